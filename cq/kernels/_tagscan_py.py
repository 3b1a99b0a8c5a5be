"""Pure-Python twin of ``_tagscan.pyx``: the ConsumeQueue tag scan, name for name and result for result.
"""
from __future__ import annotations

import numpy as np

from .. import format as fmt


def scan_tags(units, codes):
    """Indices (int64) of the 20-byte big-endian units whose low 32 tag-code bits are in ``codes``.

    ``units`` is a uint8 array whose length is a multiple of 20; ``codes`` int32.
    The broker compares ``(int) tagsCode`` with its code set (docs/filtering.md#tag-match).
    """
    n = len(units) // fmt.CQ_STORE_UNIT_SIZE
    low32 = np.frombuffer(memoryview(units)[: n * 20], dtype=fmt.CQ_UNIT_DTYPE)["tags_code"].astype(np.int64)
    low32 = low32.astype(np.int32)  # keep the low 32 bits, signed, as Java's (int) cast
    return np.flatnonzero(np.isin(low32, np.asarray(codes, dtype=np.int32))).astype(np.int64)
