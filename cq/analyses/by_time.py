"""A queue's offsets by store time: the broker's binary search over a ConsumeQueue (docs/find.md#by-time).

The broker answers "which queue offset holds the first message stored at or after T" (its admin
``searchOffset``, ``ConsumeQueue.getOffsetInQueueByTime`` with ``BoundaryType.LOWER``) and "the last
stored at or before T" (``BoundaryType.UPPER``) by a binary search over the queue's units: each
probe reads one unit's record in the CommitLog for its store timestamp; a unit whose record lies
below the CommitLog's minimum counts as earlier than any time. The RocksDB consume queue keeps the
store time in the unit itself and searches the same way. docs/find.md#by-time states the rules
and where rmqfilter's search differs (it never walks runs of equal timestamps one by one).

:func:`time_range` gives ``[first, end)`` of a queue's offsets whose records' store times lie in
``[begin, end]`` where store times never decrease along the queue, reading about ``2 log2 n``
records of an ``n``-unit queue (:class:`QueueSearch` counts them); the caller then reads the range
and keeps exactly the records inside the window. Nothing here decides a filter.
"""
from __future__ import annotations

import struct
from dataclasses import dataclass

import numpy as np

from .. import format as fmt
from ..readers.commitlog import CommitLog

__all__ = ["QueueSearch", "store_timestamps", "time_range"]

#: A ConsumeQueue unit's CommitLog offset and size, as a probe reads them (fmt.CQ_UNIT_DTYPE's first two fields).
_UNIT_HEAD = struct.Struct(">qi")
assert _UNIT_HEAD.size == fmt.CQ_UNIT_DTYPE["commit_log_offset"].itemsize + fmt.CQ_UNIT_DTYPE["size"].itemsize

#: What a probe reads for a unit whose record is not in the cut: before (expired) or after (written later).
_BEFORE, _AFTER = -(2**63), 2**63 - 1


@dataclass
class QueueSearch:
    """One queue's search by store time (:func:`time_range`).

    Attributes
    ----------
    topic : str
    queue_id : int
    min_offset, max_offset : int
        The queue's units in the cut, ``[min_offset, max_offset)``.
    first, end : int
        The offsets found: ``[first, end)`` holds every unit whose record's store time is in the window.
    probes : int
        Records whose store time the search read (the broker's ``pickupStoreTimestamp`` calls).
    """

    topic: str
    queue_id: int
    min_offset: int
    max_offset: int
    first: int = 0
    end: int = 0
    probes: int = 0

    @property
    def units(self) -> int:
        """Units in the queue (the search's ``n``)."""
        return self.max_offset - self.min_offset

    def to_dict(self) -> dict:
        return {"topic": self.topic, "queue_id": self.queue_id, "min_offset": self.min_offset,
                "max_offset": self.max_offset, "units": self.units, "first": self.first, "end": self.end,
                "range_units": self.end - self.first, "probes": self.probes}


def store_timestamps(log: CommitLog, offsets: np.ndarray, sizes: np.ndarray, lo: int, hi: int) -> np.ndarray:
    """The store timestamp of each record at ``offsets`` (int64); a record below ``lo`` reads as earlier than any
    time, one not wholly below ``hi`` (past the cut) as later than any."""
    offs = np.asarray(offsets, dtype=np.int64)
    ends = offs + np.asarray(sizes, dtype=np.int64)
    out = np.full(len(offs), _AFTER, dtype=np.int64)
    out[offs < lo] = _BEFORE
    inside = (offs >= lo) & (ends <= hi)
    if inside.any():
        out[inside] = log.decode_columns(offs[inside], ["store_timestamp"]).columns["store_timestamp"]
    return out


def time_range(cqueue, log: CommitLog, search: QueueSearch, begin: int | None, end: int | None,
               lo: int, hi: int) -> QueueSearch:
    """Fill ``search`` with the offsets of ``cqueue`` holding store times in ``[begin, end]`` (either open).

    ``lo``, ``hi``: the CommitLog range of the cut. Two lower-bound searches, each reading one record per
    step: the first offset whose store time is ``>= begin`` (the broker's LOWER boundary of ``begin``) and
    the first whose store time is ``> end`` (one past the broker's UPPER boundary of ``end``).
    """
    a, b = search.min_offset, search.max_offset
    # zero-copy views of the queue's files, each mapped when a probe first falls in it (a search of a queue of
    # many files maps a few): a probe reads one unit, nothing is copied or clamped
    views: list[tuple[int, int, memoryview]] = []  # (first offset, end offset, the file's units from first)
    unit = fmt.CQ_STORE_UNIT_SIZE
    head = _UNIT_HEAD.unpack_from

    def unit_at(q: int) -> tuple[int, int]:
        for first, stop, raw in views:
            if first <= q < stop:
                return head(raw, (q - first) * unit)
        first, raw = next(cqueue.raw_chunks(q, b - q))  # the units of q's file from q on
        views.append((first, first + len(raw) // unit, raw))
        return head(raw, 0)

    def stamp(q: int) -> int:
        phys, size = unit_at(q)
        search.probes += 1
        if phys < lo:
            return _BEFORE
        if phys + size > hi:
            return _AFTER
        return log.pickup_store_timestamp(phys)

    def first_at_least(t: int, a: int, b: int) -> int:
        while a < b:  # invariant: every offset below a is earlier than t, every one from b on is not
            mid = (a + b) // 2
            if stamp(mid) < t:
                a = mid + 1
            else:
                b = mid
        return a

    first = a if begin is None else first_at_least(begin, a, b)
    last = b if end is None or end >= _AFTER - 1 else first_at_least(end + 1, first, b)
    search.first, search.end = first, last
    return search
