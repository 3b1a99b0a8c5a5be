"""A store described as one dict: what ``rmqfilter inspect --json`` prints (docs/cli.md#stores).

:func:`describe` reads the store's layout, the release that wrote it, its CommitLog's range, every
queue's range and files (one queue's files open at a time), the SQL92 registrations of
``config/consumerFilter.json`` with their committed offsets, every committed offset, and which file
(or RocksDB table) each config file was read from. The CLI only renders this dict.
"""
from __future__ import annotations

import os
from typing import Any

from ..readers import config as cfg
from ..readers.compaction import read_position_checkpoint
from .releases import written_by
from .store import Store

__all__ = ["describe"]


def describe(store: Store | str | os.PathLike, *, count_messages: bool = False,
             tier: str | os.PathLike | None = None) -> dict[str, Any]:
    """The description of ``store`` (a :class:`cq.Store`, or a path, opened and closed here).

    Parameters
    ----------
    store : cq.Store or path
    count_messages : bool
        Also count the CommitLog's records (``commit_log.messages``; reads the whole log).
    tier : path, optional
        A path's tier directory (a tiered store, docs/reading.md#tiered-storage).

    Returns
    -------
    dict
        ``store`` (its root), ``layout``, ``written_by``, ``commit_log`` (files, file size, offsets),
        ``topics`` (per topic, per queue id as a string: offsets, messages, files, ext bytes),
        ``registered_groups``, ``committed_offsets`` and ``config`` (each config file's source, None
        when absent): JSON-ready, keys in this order. A store read with its tier also has ``tier`` (its
        directory and cluster), and each queue ``local_min_offset`` and ``tier`` (the tier's ``min_offset``,
        ``max_offset`` and the offsets ``served`` from it, or None): its ``min_offset`` is then the
        broker's, the smaller of the local and the tier's (docs/formats.md#tiered-offsets).
    """
    own = not isinstance(store, Store)
    if own:
        store = Store(store, tier=tier)
    try:
        return _describe(store, count_messages)
    finally:
        if own:
            store.close()


def _compaction_queue(store: Store, topic: str, queue_id: int, served: dict, positions: dict) -> dict[str, Any]:
    """A compaction topic's queue: ``min_offset``, ``max_offset`` and ``messages`` of its ConsumeQueue (what the
    broker's admin API reports), and under ``compaction`` what the broker serves: its compaction CQ's range,
    units and files, and the queue's compaction position (the checkpoint's; None before the first round)."""
    try:
        with store.dispatched_queue(topic, queue_id) as dispatched:
            row = {"min_offset": dispatched.min_offset, "max_offset": dispatched.max_offset,
                   "messages": len(dispatched), "files": len(dispatched.files), "file_size": dispatched.file_size}
    except KeyError:
        row = {"min_offset": 0, "max_offset": 0, "messages": 0, "files": 0, "file_size": 0}
    row.update(ext_bytes=None, ext_file_size=None,
               compaction={"min_offset": served["min_offset"], "max_offset": served["max_offset"],
                           "units": served["messages"], "files": served["files"], "file_size": served["file_size"],
                           "position": positions.get((topic, int(queue_id)))})
    return row


def _tier_range(store: Store, topic: str, queue_id: int, local_min: int) -> dict[str, Any]:
    """A queue's offsets with its tier: the broker's minimum, the local one, the tier's range and the offsets
    served from it (docs/reading.md#tiered-storage)."""
    queue = store.tier_queue(topic, queue_id)
    if queue is None:
        return {"local_min_offset": local_min, "tier": None}
    served = store.tier_served(topic, queue_id, local_min)
    return {"min_offset": min(local_min, queue.min_offset), "local_min_offset": local_min,
            "tier": {"min_offset": queue.min_offset, "max_offset": queue.end_offset,
                     "served": None if served is None else list(served)}}


def _describe(store: Store, count_messages: bool) -> dict[str, Any]:
    log = store.commit_log
    info: dict[str, Any] = {
        "store": store.root,
        "layout": store.layout.as_dict(),
        "written_by": written_by(store.root, store.layout).as_dict(),
        "commit_log": {
            "files": len(log.files),
            "file_size": log.file_size,
            "min_offset": log.min_offset,
            "max_offset": log.max_offset,
        },
        "topics": {},
    }
    if store.tier is not None:
        info["tier"] = {"path": store.tier.path, "cluster": store.tier.cluster, "metadata": store.tier.metadata.path}
    if count_messages:
        info["commit_log"]["messages"] = log.count_records()
    positions = read_position_checkpoint(store.root) if store.layout.compaction_topics else {}
    for topic in store.topics():
        queues = {}
        for qid in store.queue_ids(topic):
            with store.queue_readers(topic, qid) as (cqueue, ext):  # one queue's files open at a time
                queues[str(qid)] = {
                    "min_offset": cqueue.min_offset,
                    "max_offset": cqueue.max_offset,
                    "messages": len(cqueue),
                    "files": len(cqueue.files),
                    "file_size": cqueue.file_size,
                    "ext_bytes": None if ext is None else ext.max_offset - (ext.files[0][0] if ext.files else 0),
                    "ext_file_size": None if ext is None else ext.file_size,
                }
            if topic in store.layout.compaction_topics:  # docs/reading.md#compaction-topics
                queues[str(qid)] = _compaction_queue(store, topic, qid, queues[str(qid)], positions)
            elif store.tier is not None:
                queues[str(qid)].update(_tier_range(store, topic, qid, queues[str(qid)]["min_offset"]))
        info["topics"][topic] = queues
    table = store.offset_table()  # read once (the JSON file, or its RocksDB table)
    info["registered_groups"] = [
        {"group": f.group, "topic": f.topic, "expression": f.expression, "expression_type": f.expression_type,
         "born_time": f.born_time, "dead_time": f.dead_time, "is_dead": f.is_dead,
         "client_version": f.client_version, "bloom_matches": f.bloom_matches,
         "committed_offsets": {str(q): o for q, o in cfg.committed_from_table(table, f.group, f.topic).items()}}
        for f in store.registered_filters()
    ]
    info["committed_offsets"] = [
        {"topic": topic, "group": group, "offsets": {str(q): o for q, o in sorted(queues.items())}}
        for (topic, group), queues in table.items()
    ]
    info["config"] = {name: store.layout.rocksdb_table_of(name) or store.config_file(name).source for name in
                      (cfg.CONSUMER_FILTER_FILE, cfg.CONSUMER_OFFSET_FILE, cfg.SUBSCRIPTION_GROUP_FILE, cfg.TOPICS_FILE)}
    lmq = store.config_file(cfg.LMQ_CONSUMER_OFFSET_FILE).source  # where a broker with enableLmq keeps them all
    if lmq is not None:
        info["config"][cfg.LMQ_CONSUMER_OFFSET_FILE] = lmq
    return info
