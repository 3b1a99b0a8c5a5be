"""Consistent cuts of a live store (docs/live.md): :class:`StoreCut`, what one read sees, and
:meth:`cq.Store.cut`, which takes it (queue ends first, then the CommitLog's end)."""
from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from ..readers.compaction import CompactionConsumeQueue
from ..readers.consumequeue import ConsumeQueue
from ..readers.tiered import TieredStoreError


def first_unit_past(cqueue: ConsumeQueue, lo: int, hi: int, commit_log_end: int) -> int:
    """First queue offset in ``[lo, hi)`` whose record ends past ``commit_log_end`` (``hi`` if none).

    A queue's CommitLog offsets grow with its queue offsets, so this is a bisection.
    """
    def past(q: int) -> bool:
        u = cqueue.read(q, 1)
        return bool(len(u)) and int(u["commit_log_offset"][0]) + int(u["size"][0]) > commit_log_end

    if hi <= lo or not past(hi - 1):
        return hi
    a, b = lo, hi - 1  # the answer is in [a, b]
    while a < b:
        mid = (a + b) // 2
        if past(mid):
            b = mid
        else:
            a = mid + 1
    return a


@dataclass(frozen=True)
class StoreCut:
    """One consistent cut of a store: what a read sees (docs/live.md).

    Taken by :meth:`Store.cut` when a read starts: each queue's offsets
    ``[min, end)``, read first, then the CommitLog's recovered end. The broker
    writes a CommitLog record before the ConsumeQueue unit that points at it,
    so every unit inside the cut has its record below ``commit_log_end``; a
    unit that does not (a torn or corrupt tail) or whose record lies below
    ``commit_log_min`` (expired) is missing. Units written after the cut are
    outside it: not read, not counted. A cut is small and picklable.

    Attributes
    ----------
    commit_log_min, commit_log_end : int
        Physical offsets: the first byte of the first CommitLog file and the
        recovered end of the data, when the cut was taken.
    queues : tuple of (topic, queue_id, min_offset, end_offset)
        Queue offsets ``[min_offset, end_offset)`` of each queue in the cut; for a tiered store the
        minimum is the smaller of the local and the tier's, as the broker gives it.
    tiers : tuple of (topic, queue_id, lo, hi)
        For a store read with its tier: the queue offsets ``[lo, hi)`` of each queue that the broker
        serves from the tier (:meth:`cq.Store.tier_served`).
    """

    commit_log_min: int
    commit_log_end: int
    queues: tuple[tuple[str, int, int, int], ...] = ()
    tiers: tuple[tuple[str, int, int, int], ...] = ()

    def tier_range(self, topic: str, queue_id: int) -> tuple[int, int] | None:
        """``(lo, hi)``: the queue offsets of a queue the broker serves from its tier in this cut, or None
        (docs/reading.md#tiered-storage)."""
        for t, q, lo, hi in self.tiers:
            if t == topic and q == int(queue_id):
                return lo, hi
        return None

    def queue_range(self, topic: str, queue_id: int) -> tuple[int, int] | None:
        """``(min_offset, end_offset)`` of a queue in the cut, or None when the cut does not hold it."""
        ranges = self.__dict__.get("_ranges")
        if ranges is None:
            ranges = {(t, q): (lo, hi) for t, q, lo, hi in self.queues}
            object.__setattr__(self, "_ranges", ranges)
        return ranges.get((topic, int(queue_id)))

    def ends(self, topic: str) -> dict[int, int]:
        """``{queue_id: end_offset}`` of ``topic``'s queues in the cut."""
        return {q: hi for t, q, _, hi in self.queues if t == topic}


class CutRoom:
    """The :class:`cq.Store` method that takes a cut."""

    def _check_tier_queues(self, topics: list[str], queue_ids, queues: list[tuple[str, int, int, int]]) -> None:
        """A queue the tier holds that the local store has no consume queue for cannot be read as the
        broker reads it: an error naming the tier, never a queue left out."""
        if getattr(self, "tier", None) is None:
            return
        held = {(t, q) for t, q, _, _ in queues}
        asked = None if queue_ids is None else {int(q) for q in queue_ids}
        missing = [(t, q) for t, q in self.tier.queues()
                   if t in topics and (asked is None or q in asked) and (t, q) not in held]
        if missing:
            raise TieredStoreError(f"the tier holds queue(s) {missing} that have no local consume queue; "
                                   "rmqfilter reads a tiered queue beside its local one", self.tier.path)

    def _init_cuts(self) -> None:
        self._frozen: dict[tuple[str, int], tuple[int, int]] = {}  # refresh="never": each queue's first view

    def cut(self, topic: str | None = None, queue_ids: Iterable[int] | None = None, *,
            keep_readers: bool = False) -> StoreCut:
        """The cut a read starting now sees: queue ends first, then the CommitLog end (docs/live.md).

        Parameters
        ----------
        topic : str, optional
            Only this topic's queues (default: every topic).
        queue_ids : iterable of int, optional
            Only these queues of ``topic``.
        keep_readers : bool, default False
            Keep each queue's reader in the Store (its maps released after the
            cut, so no file stays open), so the next cut continues each queue's
            recovery from the end this one found instead of opening the queue
            again (docs/live.md#cached-readers). For a Store that takes a cut
            per trigger of a stream. By default a queue not already cached is
            opened for the cut and closed after it.

        Returns
        -------
        StoreCut
            With ``refresh="always"`` the store as it is now; with ``"never"``
            the Store's first view, each queue's end clipped to that view's
            CommitLog end (units written later lie outside it).
        """
        live = self.refresh_mode == "always"
        queue_ids = list(queue_ids) if queue_ids is not None else None
        with self._open_lock:
            if live:
                self._check_root()
                self.refresh_tier()  # the tier's metadata and ends, read before the queues' (docs/live.md)
                if self._commit_log is not None:
                    self._commit_log.refresh_files()
            log = self.commit_log
            topics = [topic] if topic is not None else self.topics()
            listed = {t: list(queue_ids) if queue_ids is not None and topic is not None else self.queue_ids(t)
                      for t in topics}
            # a store in a bucket: the queues' ConsumeQueue objects, many at once (docs/object-storage.md#costs)
            self._prefetch_queues([(t, q) for t, qids in listed.items() for q in qids
                                   if live or (t, int(q)) not in self._frozen])
            ranges = []
            for t in topics:
                for q in listed[t]:
                    if not live and (t, int(q)) in self._frozen:
                        ranges.append((t, int(q), *self._frozen[t, int(q)], None))
                        continue
                    cached = (t, int(q)) in self._cqs
                    try:
                        if keep_readers and not cached:
                            self._open_consume_queue((t, int(q)))
                            self._kept.add((t, int(q)))
                        cqueue, ext = self._queue_readers(t, q)
                    except KeyError:
                        if queue_ids is not None:
                            raise
                        continue  # deleted since it was listed
                    try:
                        if live and cached and self._cqs.get((t, int(q))) is cqueue:
                            self._refresh_kept((t, int(q)), cqueue)
                        ranges.append((t, int(q), cqueue.min_offset, cqueue.max_offset, cqueue))
                    except BaseException:
                        self._release(t, q, cqueue, ext)
                        raise
                    if live or keep_readers:  # a kept reader keeps its ends and file list; its maps go
                        self._release(t, q, cqueue, ext, cached=keep_readers)
            end = log.refresh() if live else log.max_offset
            queues, tiers = [], []
            for t, q, lo, hi, cqueue in ranges:
                tier_queue = self.tier_queue(t, q)
                if tier_queue is not None:  # docs/reading.md#tiered-storage
                    served = self.tier_served(t, q, lo)
                    if served is not None:
                        tiers.append((t, q, *served))
                    lo = min(lo, tier_queue.min_offset)
                if not live and cqueue is not None:
                    # the first view of a queue in a Store that never refreshes: units whose
                    # records came after the view's CommitLog end lie outside it, for good (a
                    # compaction CQ's records are in its compaction log, written before its units)
                    if not isinstance(cqueue, CompactionConsumeQueue):
                        hi = first_unit_past(cqueue, lo, hi, end)
                    self._release(t, q, cqueue, self._exts.get((t, q)))
                    self._frozen[t, q] = (lo, max(lo, hi))
                queues.append((t, q, lo, max(lo, hi)))
            self._check_tier_queues(topics, queue_ids if topic is not None else None, queues)
            return StoreCut(log.min_offset, end, tuple(queues), tuple(tiers))
