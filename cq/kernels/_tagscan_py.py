"""Pure-Python twin of ``_tagscan.pyx``: the ConsumeQueue unit scans, name for name and result for result.
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


def data_end(units):
    """How many of the 20-byte big-endian ``units`` come before the first that ends a queue's data in the
    broker's recovery (``commit_log_offset < 0`` or ``size <= 0``, docs/formats.md#consumequeue): all of
    them when none does."""
    n = len(units) // fmt.CQ_STORE_UNIT_SIZE
    u = np.frombuffer(memoryview(units)[: n * fmt.CQ_STORE_UNIT_SIZE], dtype=fmt.CQ_UNIT_DTYPE)
    ends = np.flatnonzero((u["commit_log_offset"] < 0) | (u["size"] <= 0))
    return int(ends[0]) if len(ends) else n
