"""A store whose broker ran RocketMQ's tiered store (docs/reading.md#tiered-storage): the tier the Store
reads beside its local files, and the broker's rule for which of the two serves a queue offset.

:class:`TierRoom` gives :class:`cq.Store` its ``tier`` (a :class:`cq.Tier`, or None), refuses a store whose
metadata lists tiered segments when no tier was given (never an answer that calls those messages
expired), and :meth:`TierRoom.tier_served` is the one home of ``TieredMessageStore.fetchFromCurrentStore``
at ``tieredStorageLevel=NOT_IN_DISK`` (the default): the queue offsets a pull is served from the tier.
The broker's path over those units is :func:`cq.store.decide.decide_units` with the tier's flat
CommitLog and no ext file (docs/filtering.md#tiered-filter).
"""
from __future__ import annotations

import os

from ..readers.tiered import Tier, TieredMetadata, TieredQueue, TieredStoreError

__all__ = ["READ_AHEAD_UNITS", "TierRoom"]

#: How far past its first offset one pull served from the tier reads: ``readAheadMessageCountThreshold``
#: (4096 units) of the read-ahead cache, which a pull scans for its batch of matching messages.
READ_AHEAD_UNITS = 4096


class TierRoom:
    """The :class:`cq.Store` methods that read its tier."""

    def _init_tier(self, tier: str | os.PathLike | None) -> None:
        self.tier_path = os.fspath(tier) if tier is not None else None
        self.tier: Tier | None = None
        configured = TieredMetadata.exists(self.root)
        if tier is None:
            if configured:
                meta = TieredMetadata(self.root)
                if meta.has_segments():
                    raise TieredStoreError(
                        f"the broker ran the tiered store and copied {len(meta.queues)} queue(s) to a tier, which "
                        "serves the messages below each queue's local minimum; give the tier directory "
                        "(its tieredStoreFilePath): Store(..., tier=DIR), rmqfilter --tier DIR, the data source's "
                        "option tier", meta.path)
            return
        if not configured:
            raise TieredStoreError(f"a tier was given ({self.tier_path}) but the store has no "
                                   "config/tieredStoreMetadata.json: its broker did not run the tiered store",
                                   self.root)
        self.tier = Tier(self.root, self.tier_path)

    def tier_queue(self, topic: str, queue_id: int) -> TieredQueue | None:
        """The queue's flat files in the tier, or None (no tier, or none for this queue)."""
        return self.tier.queue(topic, queue_id) if self.tier is not None else None

    def tier_served(self, topic: str, queue_id: int, local_min: int) -> tuple[int, int] | None:
        """The queue offsets ``[lo, hi)`` whose pulls the broker serves from the tier, or None.

        ``TieredMessageStore.fetchFromCurrentStore`` at ``NOT_IN_DISK``: the queue has flat files and
        the offset is below the tier's end, and the offset's record is not in the local store (the local
        CommitLog has no file, or the local unit is gone or points below the CommitLog's first file:
        below ``local_min``, the local queue's minimum corrected past expired records). Offsets from the
        tier's minimum to that bound; a local CommitLog whose first file still starts at 0 keeps every
        pull local.
        """
        queue = self.tier_queue(topic, queue_id)
        if queue is None:
            return None
        log = self.commit_log
        if not log.files:
            bound = queue.end_offset
        elif log.min_offset == 0:
            return None
        else:
            bound = min(queue.end_offset, int(local_min))
        lo = queue.min_offset
        return (lo, bound) if bound > lo else None

    def tier_runs(self, topic: str, queue_id: int, served: tuple[int, int] | None, start: int, end: int, *,
                  flt=None, cut=None) -> list[tuple[int, int, bool]]:
        """Queue offsets ``[start, end)`` as ``(lo, hi, from_tier)`` runs, in order: the part of ``served`` (the
        offsets the broker serves from its tier, :meth:`tier_served`) read from the tier, the rest from the
        local files. Every reader of a tiered queue splits its range here (``consume``, the data source's
        planning, its stream).

        With the group's filter ``flt``, a range that goes on past the tier's part is checked as a pull
        that started in the tier reads on (:meth:`cq.Store.check_read_ahead`, against ``cut``'s local range):
        a :class:`cq.TieredStoreError` where the two sides would deliver differently.
        """
        if served is None or start >= served[1] or end <= served[0]:
            return [(start, end, False)] if end > start else []
        lo, hi = max(start, served[0]), min(end, served[1])
        runs = [(start, lo, False)] if start < lo else []   # below the tier's minimum: local (expired there)
        runs.append((lo, hi, True))
        if end > hi:
            if flt is not None:
                self.check_read_ahead(topic, queue_id, flt, hi, end, cut)
            runs.append((hi, end, False))
        return runs

    def refresh_tier(self) -> None:
        """Follow the broker's tier (:meth:`cq.Tier.refresh`): what each read with ``refresh="always"`` does when
        it takes its cut, so no view of the tier outlives the read that took it (docs/live.md)."""
        if self.tier is not None:
            self.tier.refresh()

    def _close_tier(self) -> None:
        if self.tier is not None:
            self.tier.close()
