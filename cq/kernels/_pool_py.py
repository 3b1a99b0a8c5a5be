"""Pure-Python twin of ``_pool.pyx``: the twins keep no freed buffers (numpy allocates).
"""
from __future__ import annotations


def pool_bytes():
    """Bytes of freed decode buffers kept for reuse: the twin keeps none (numpy allocates)."""
    return 0
