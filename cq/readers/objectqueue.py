"""A ConsumeQueue of a store in object storage read by ranges: the units a read asks for, fetched into
memory, within the queue's bounds as a plan found them (docs/object-storage.md#spark)."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .. import format as fmt
from .consumequeue import ConsumeQueue
from .objects import ObjectDir, ObjectStore

__all__ = ["RangedConsumeQueue", "RangedDir"]


@dataclass(frozen=True)
class RangedDir(ObjectDir):
    """A queue directory of a store in object storage whose objects are read by ranges into memory
    (:meth:`cq.ObjectStore.ranged_view`): a reader maps an object's buffer, holding what was fetched."""

    def open_file(self, path: str) -> memoryview:
        """The buffer of the object ``path`` (its URI)."""
        return self.source.ranged_view(path)


def _reopen(source: ObjectStore, relpath: str, bounds: tuple[int, int], kwargs: dict) -> RangedConsumeQueue:
    return RangedConsumeQueue(source, relpath, bounds, **kwargs)


class RangedConsumeQueue(ConsumeQueue):
    """One queue of a store in object storage, read by ranges: every read fetches the units it reads that are
    not held yet (one request per object they lie in, :meth:`cq.ObjectStore.hold`), never the queue whole.

    Its ``bounds`` (``[min_offset, max_offset)``) are the queue's as a plan found them in the same listing (the
    cut): with no recovery walk of its own, nothing past the units a read asks for is fetched. What a Spark
    task reads its slices through (docs/object-storage.md#spark); a queue whose plan saw units past its files'
    (a crashed store's, :attr:`undispatched_count`) is read whole instead.

    Parameters
    ----------
    source : cq.ObjectStore
    relpath : str
        ``consumequeue/<topic>/<queue id>`` under the store's root.
    bounds : (int, int)
        The queue's ``min_offset`` (corrected past deleted CommitLog records, as the plan's) and ``max_offset``.
    """

    def __init__(self, source: ObjectStore, relpath: str, bounds: tuple[int, int], *, file_size: int | None = None,
                 topic: str | None = None, queue_id: int | None = None) -> None:
        super().__init__(RangedDir(source, relpath), file_size=file_size, topic=topic, queue_id=queue_id)
        lo, hi = (int(b) for b in bounds)
        if not 0 <= lo <= hi:
            raise ValueError(f"queue bounds must be 0 <= min <= max, got [{lo}, {hi})")
        self._relpath = relpath
        self._min_offset, self._max_offset = lo, hi

    def __repr__(self) -> str:
        return f"RangedConsumeQueue({self.directory!r}, [{self._min_offset}, {self._max_offset}))"

    def __reduce__(self):
        # the bounds travel; the held bytes do not (a new buffer fetches what it reads)
        return _reopen, (self._source, self._relpath, (self._min_offset, self._max_offset), self._reopen_kwargs())

    def spans(self, start: int, end: int) -> list[tuple[str, int, int]]:
        """``(key, lo, hi)`` byte spans of the objects holding queue offsets ``[start, end)`` (clamped to the
        bounds), one per object: what :meth:`hold_units` fetches."""
        start, end = self._clamp(start, max(0, end - start))
        unit, per_file = fmt.CQ_STORE_UNIT_SIZE, self.units_per_file
        out, q = [], start
        while q < end:
            index = int(np.searchsorted(self._starts, q * unit, side="right")) - 1
            file_q = int(self._starts[index]) // unit
            stop = min(end, file_q + per_file)
            out.append((self._files[index][1], (q - file_q) * unit, (stop - file_q) * unit))
            q = stop
        return out

    def hold_units(self, start: int, end: int) -> None:
        """Fetch queue offsets ``[start, end)`` now (what a read of them would fetch)."""
        self._source.hold(self.spans(start, end))

    def _hold(self, index: int, lo: int, hi: int) -> None:
        self._source.hold([(self._files[index][1], lo, hi)])

    def _units_of_file(self, index: int) -> np.ndarray:
        self._hold(index, 0, self._source.size_of(self._files[index][1]))
        return super()._units_of_file(index)

    def correct_min_offset(self, commit_log_min_offset: int) -> int:
        """The bounds' minimum: the plan corrected it past deleted CommitLog records already."""
        return self._min_offset

    def refresh(self) -> int:
        """The bounds' maximum: a store in object storage is a snapshot, its listing the cut."""
        return self._max_offset
