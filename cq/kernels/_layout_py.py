"""Pure-Python twin of ``_layout.pyx``: the store layout the kernels use, from cq/format.py."""
from __future__ import annotations

from .. import format as fmt
from .layout import layout

#: Each layout constant of the kernels, by name (``_layout.h`` without ``RMQ_``).
LAYOUT = layout(fmt)
