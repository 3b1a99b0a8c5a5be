"""The reput service's dispatch over decoded CommitLog batches: units and bitmaps of many records at once.

:func:`cq.writer.rebuild.rebuild_bitmaps` and the writer's re-dispatch after an interrupted run
(:meth:`cq.writer.writer.StoreWriter._finish_recovery`, :mod:`cq.writer.recovery`) both read the CommitLog
as :class:`cq.readers.columns.MessageColumns` batches and turn the records that get a unit into
:class:`DispatchUnits` (tag codes, ext bitmaps, queue of each unit: array operations over the
batch), then :func:`write_units` writes them in log order through the writer's per-unit
dispatch (docs/writing.md#new-groups-for-an-existing-store, docs/reliability.md#interrupted-writers).

This module never imports the writer: it receives one.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from ..readers.columns import MessageColumns, distinct_rows

__all__ = ["DispatchUnits", "dispatch_units", "write_units"]


@dataclass
class DispatchUnits:
    """The ConsumeQueue and ext units of some records, in log order, before they are written.

    Attributes
    ----------
    queues : list of (str, int)
        The distinct ``(topic, queue_id)`` of the units, in the order of their first unit.
    queue_index : numpy.ndarray of int64
        Per unit, its queue (an index into ``queues``).
    commit_log_offset, store_size, tags_code, store_timestamp, queue_offset : numpy.ndarray
        Per unit, the record's fields (``tags_code`` as the reput service computes it).
    bitmaps : list of bytes or None
        The distinct ext bitmaps; entry 0 is None (no group on the topic: no bitmap).
    bitmap_index : numpy.ndarray of int64
        Per unit, its bitmap (an index into ``bitmaps``).
    """

    queues: list[tuple[str, int]]
    queue_index: np.ndarray
    commit_log_offset: np.ndarray
    store_size: np.ndarray
    tags_code: np.ndarray
    store_timestamp: np.ndarray
    queue_offset: np.ndarray
    bitmaps: list[bytes | None]
    bitmap_index: np.ndarray

    def __len__(self) -> int:
        return len(self.queue_index)


def dispatch_units(writer: Any, cols: MessageColumns, rows: np.ndarray, topic_ids: np.ndarray, topics: list[str],
                   codes: np.ndarray) -> DispatchUnits:
    """The units of rows ``rows`` (ascending) of ``cols``: bitmaps per topic over the batch's columns.

    Parameters
    ----------
    writer : cq.writer.writer.StoreWriter
        Gives the bitmaps (:meth:`~cq.writer.writer.StoreWriter.column_bitmaps`, its registered groups).
    cols : cq.readers.columns.MessageColumns
        Holds ``queue_id``, ``queue_offset``, ``commit_log_offset``, ``store_size``,
        ``store_timestamp`` and (for topics with groups) ``properties``.
    rows : numpy.ndarray of int
        The rows that get a unit, in log order.
    topic_ids, topics : numpy.ndarray, list of str
        :func:`cq.readers.columns.factorize` of the ``topic`` column.
    codes : numpy.ndarray of int64
        The tag code of every row of ``cols``.
    """
    c = cols.columns
    row_topics = topic_ids[rows]
    # each distinct bitmap becomes bytes once; index 0 is "no bitmap" (no group on the topic)
    bitmap_table: list[bytes | None] = [None]
    bitmap_index = np.zeros(len(rows), dtype=np.int64)
    for t, topic in enumerate(topics):
        sel = np.flatnonzero(row_topics == t)
        bitmaps = writer.column_bitmaps(topic, cols, rows[sel]) if len(sel) else None
        if bitmaps is None:
            continue
        first, inverse = distinct_rows(bitmaps)
        bitmap_index[sel] = len(bitmap_table) + inverse
        bitmap_table.extend(bitmaps[i].tobytes() for i in first.tolist())
    queue_ids = c["queue_id"][rows]
    keys = (row_topics.astype(np.int64) << 32) | (queue_ids.astype(np.int64) & 0xFFFFFFFF)
    _keys, first, key_index = np.unique(keys, return_index=True, return_inverse=True)
    order = np.argsort(first, kind="stable")  # queues in the order of their first unit
    rank = np.empty(len(order), dtype=np.int64)
    rank[order] = np.arange(len(order))
    queues = [(topics[int(row_topics[i])], int(queue_ids[i])) for i in first[order].tolist()]
    return DispatchUnits(
        queues, rank[key_index.reshape(-1)], c["commit_log_offset"][rows], c["store_size"][rows], codes[rows],
        c["store_timestamp"][rows], c["queue_offset"][rows], bitmap_table, bitmap_index,
    )


def write_units(writer: Any, units: DispatchUnits) -> None:
    """Write ``units`` in log order, each at its record's QUEUEOFFSET (the writer's per-unit dispatch)."""
    states = [writer.queue_state(topic, queue_id) for topic, queue_id in units.queues]
    dispatch_unit = writer.dispatch_unit
    bitmaps = units.bitmaps
    for k, phys, size, code, stamp, b, qoff in zip(
        units.queue_index.tolist(), units.commit_log_offset.tolist(), units.store_size.tolist(),
        units.tags_code.tolist(), units.store_timestamp.tolist(), units.bitmap_index.tolist(),
        units.queue_offset.tolist(),
    ):
        dispatch_unit(states[k], phys, size, code, stamp, bitmaps[b], queue_offset=qoff)
