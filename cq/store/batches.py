"""The broker's two layers over the units of a BatchCQ queue, one decision per unit
(docs/reading.md#batchcq): what :meth:`cq.Store.batch_decisions` returns and what
``Store.consume`` and the data source unwrap."""
from __future__ import annotations

import numpy as np

from ..errors import StoreFormatError


class BatchDecisions:
    """The broker's two layers over some units of a BatchCQ queue (:meth:`Store.batch_decisions`),
    one bool per unit (docs/reading.md#batchcq).

    Attributes
    ----------
    units : ndarray
        The units, :data:`cq.format.BCQ_UNIT_DTYPE`'s fields, in queue order.
    consume_queue : ndarray
        Layer 1 passed (the unit's tags code; a BatchCQ keeps no bitmap).
    reached : ndarray
        Layer 1 passed and the batch record is in the CommitLog: layer 2 reads it.
    present : ndarray
        The batch record is in the CommitLog (whatever layer 1 said).
    commit_log : ndarray or None
        Layer 2 passed (the batch record's own properties); None when layer 2 was not run.
    skipped : ndarray
        Layer 2 could not decode the record (only when asked to skip); ``errors`` holds
        ``(unit index, StoreFormatError)`` of each.
    """

    def __init__(self, units: np.ndarray, consume_queue: np.ndarray, present: np.ndarray,
                 commit_log: np.ndarray | None = None) -> None:
        self.units = units
        self.consume_queue = consume_queue
        self.present = present
        self.reached = consume_queue & present
        self.commit_log = commit_log
        self.skipped = np.zeros(len(units), dtype=bool)
        self.errors: list[tuple[int, StoreFormatError]] = []

    @property
    def messages(self) -> np.ndarray:
        """Messages per unit (the unit's batch size), int64."""
        return self.units["batch_size"].astype(np.int64)

    def count(self, stats) -> None:
        """Add these decisions to ``stats`` (a ``ConsumeStats``), each unit counted once per message of its batch: a
        BatchCQ's ``units_scanned`` counts messages (queue offsets), as a ConsumeQueue's units do."""
        n = self.messages
        stats.units_scanned += int(n.sum())
        stats.passed_consume_queue += int(n[self.consume_queue].sum())
        stats.commit_log_missing += int(n[self.consume_queue & ~self.present].sum())
        stats.passed_commit_log += int(n[self.commit_log].sum())
