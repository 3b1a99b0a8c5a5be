"""Executor side of the ``rocketmq`` data source, option ``filter``: the custom message filter on the rows a
group receives (docs/custom-filters.md), after the broker's path (:mod:`cq.store.decide`) decided them; the
filter runs as that path's last step (:func:`cq.store.decide.decide_custom`), over the reader's columns.
Imported by :mod:`pyspark_udfs._reader` only."""
from __future__ import annotations

import numpy as np
import pyarrow as pa

from cq.filter.custom import MessageFilter, filter_record_batch
from cq.readers.batchcq import expand_batch
from cq.store.decide import decide_custom

_MESSAGE_FILTERS: dict[tuple[str, str], object] = {}  # per worker: each filter imported once


#: Rows handed to a custom filter per call (a per-message filter gets them as cq.Message objects).
FILTER_BATCH_ROWS = 8192


def _messages_at(log, offsets: np.ndarray, queue_offsets: np.ndarray, batches: bool) -> list:
    """The :class:`cq.Message` of each row (its record at ``offsets``); of a BatchCQ queue (``batches``),
    the message at its queue offset in its batch record, as ``Store.consume`` unwraps it."""
    if not batches:
        return [log.read_message(int(off)) for off in offsets]
    unwrapped: dict[int, list] = {}  # each record read and split once
    out = []
    for off, q in zip(offsets.tolist(), queue_offsets.tolist()):
        msgs = unwrapped.get(off)
        if msgs is None:
            msgs = unwrapped[off] = expand_batch(log.read_message(off))
        out.append(msgs[q - msgs[0].queue_offset])
    return out


def apply_message_filter(options, store, topic: str, queue_id: int, columns: dict[str, pa.Array], *,
                          batches: bool = False) -> dict:
    """Option ``filter``: the custom filter on the rows the group receives (docs/custom-filters.md).

    Without ``decisions`` the rows it rejects (or fails on, with ``on_filter_error=skip``) are
    dropped; with it, ``delivered`` takes its answer and ``filter_skipped`` marks the failures.
    """
    key = (options.message_filter, options.on_filter_error)
    mf = _MESSAGE_FILTERS.get(key)
    if mf is None:
        mf = _MESSAGE_FILTERS[key] = MessageFilter(options.message_filter, on_error=options.on_filter_error)
    n = len(columns["queue_offset"])
    decided = "delivered" in columns
    candidates = np.flatnonzero(columns["delivered"].to_numpy(zero_copy_only=False)) if decided else np.arange(n)
    keep = np.zeros(n, dtype=np.bool_)
    skipped = np.zeros(n, dtype=np.bool_)
    offsets = columns["commit_log_offset"].to_numpy()
    queue_offsets = columns["queue_offset"].to_numpy()
    batch = filter_record_batch(columns) if mf.batch else None
    keep[candidates], skipped[candidates] = decide_custom(
        mf, len(candidates), chunk=FILTER_BATCH_ROWS,
        messages=lambda run: _messages_at(store.commit_log, offsets[candidates[run]], queue_offsets[candidates[run]],
                                          batches),
        batch=lambda run: batch.take(pa.array(candidates[run])),
        where=lambda i: (topic, queue_id, int(queue_offsets[candidates[i]])))
    if decided:
        return {**columns, "delivered": pa.array(keep), "filter_skipped": pa.array(skipped)}
    mask = pa.array(keep)
    return {name: arr.filter(mask) for name, arr in columns.items()}
