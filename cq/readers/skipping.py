"""Decoding a batch of values where some may be corrupt: find each bad one in a few decodes.

What ``on_corrupt="skip"`` reads rest on (the ``rocketmq`` data source's, docs/spark.md): a batch
decodes iff each of its values does, so an intact batch costs one decode, and the bad values of a
batch are found by doubling windows then bisection.
"""
from __future__ import annotations

from collections.abc import Callable

import numpy as np

from ..errors import StoreFormatError

__all__ = ["decode_skipping"]


def _first_bad(decode: Callable, values: np.ndarray, start: int) -> int:
    """Index of the first value at or after ``start`` that ``decode`` refuses, or ``len(values)``.

    Windows doubling from ``start``, then bisection inside the first window
    that fails: the cost is proportional to the distance to the bad value, so
    finding every bad value of a batch costs a few decodes of the batch in all
    (however many there are).
    """
    lo, size, n = start, 1, len(values)
    while lo < n:
        hi = min(n, lo + size)
        try:
            decode(values[lo:hi])
        except StoreFormatError:
            break
        lo, size = hi, size * 2
    else:
        return n
    hi -= 1  # the first bad value is in values[lo:hi + 1]
    while lo < hi:
        mid = (lo + hi) // 2
        try:
            decode(values[lo:mid + 1])
        except StoreFormatError:
            hi = mid
        else:
            lo = mid + 1
    return lo


def decode_skipping(decode: Callable, values: np.ndarray, skipping: bool):
    """``decode(values)``, or with ``skipping``, ``decode`` of the values it accepts.

    Returns ``(result, good, errors)``: ``result`` is ``decode(values[good])``,
    ``good`` a bool mask over ``values`` and ``errors`` the
    :class:`~cq.errors.StoreFormatError` of each refused value, in order.
    Each value is decoded on its own (a record, an ext unit), so a batch
    decodes iff every value in it does; an intact batch is decoded once.
    """
    good = np.ones(len(values), dtype=np.bool_)
    try:
        return decode(values), good, []
    except StoreFormatError:
        if not skipping:
            raise
    errors: list[StoreFormatError] = []
    pos = 0
    while (bad := _first_bad(decode, values, pos)) < len(values):
        try:
            decode(values[bad:bad + 1])
        except StoreFormatError as exc:
            errors.append(exc)
        else:  # pragma: no cover - a value refused in a window is refused alone
            raise RuntimeError(f"value {values[bad]!r} decodes alone but not in its batch")
        good[bad] = False
        pos = bad + 1
    return decode(values[good]), good, errors
