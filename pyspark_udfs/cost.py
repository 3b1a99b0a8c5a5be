"""``rmqfilter cost --spark``: the filtering-cost pass of :mod:`cq.analyses.cost` spread over Spark tasks.

The driver packs the topic's queue ranges into tasks as the ``rocketmq`` source packs a read's
(docs/spark.md#partitions): at most ``partition_units`` units a task, one task per core when
that is fewer. Each task runs :func:`cq.analyses.cost.tally_range` over its ranges on an executor, and the driver adds
the :class:`cq.analyses.cost.Tally` objects up and finishes the same report :func:`cq.analyses.cost.filter_cost`
gives (the replay and the timing run on the driver). The store must be visible to every executor
at the same path (docs/cost.md).
"""
from __future__ import annotations

import os
import time
from collections.abc import Iterable
from typing import Any

import bloom
import cq
from cq.analyses.cost import (
    CostGroup,
    CostReport,
    Tally,
    finish_report,
    measure_ns_per_evaluation,
    resolve_groups,
    tally_range,
)

from ._plan import file_ranges, pack_ranges, share_size

__all__ = ["filter_cost_spark"]

DEFAULT_PARTITION_UNITS = 1_000_000


def _tally_task(path: str, topic: str, reported, registered, bloom_filter, part) -> Tally:
    store = cq.Store(path)
    try:
        tally = None
        for _, queue_id, start, end in part:
            one = tally_range(store, topic, reported, registered, queue_id=queue_id, start=start, end=end,
                              bloom_filter=bloom_filter)
            if tally is None:
                tally = one
            else:
                tally.add(one)
    finally:
        store.close()
    tally.queues = 0  # counted once per queue on the driver
    tally.queues_without_ext = 0
    return tally


def filter_cost_spark(spark, store_path: str | os.PathLike, topic: str,
                      groups: Iterable[str | CostGroup] | None = None, *,
                      alternatives: Iterable[tuple[int, int]] | None = None, fp_target: float | None = None,
                      bloom_filter: Any = None, timing: bool = True,
                      partition_units: int = DEFAULT_PARTITION_UNITS) -> CostReport:
    """:func:`cq.analyses.cost.filter_cost` with the pass over the units on Spark (same arguments, same report).

    Parameters
    ----------
    spark : SparkSession
    store_path : str or path
        Store root, the same path on the driver and every executor.
    partition_units : int
        Largest number of ConsumeQueue units per task (fewer, in equal shares, to give every
        core of ``spark`` a task).
    """
    t0 = time.perf_counter()
    path = os.path.abspath(os.fspath(store_path))
    bf = bloom_filter if bloom_filter is not None else bloom.BloomFilter()
    store = cq.Store(path)
    try:
        if topic not in store.topics():
            raise KeyError(f"topic {topic!r} has no consume queues in {path}")
        reported, registered = resolve_groups(store, topic, groups, bloom_filter=bf)
        ranges = [r for q in store.queue_ids(topic) for r in file_ranges(store.consume_queue(topic, q), topic, q)]
        total = sum(e - s for _, _, s, e in ranges)
        parallel = spark.sparkContext.defaultParallelism
        parts = pack_ranges(ranges, share_size(total, partition_units, parallel))
        queue_ids = store.queue_ids(topic)
        without_ext = sum(store.ext(topic, q) is None for q in queue_ids)
        ns, timed = measure_ns_per_evaluation(store, topic, [g.expression for g in reported + registered
                                                             if g.is_sql]) if timing else ({}, 0)
    finally:
        store.close()
    names = [g.group for g in reported]
    tally = Tally(names + [g.group for g in registered if g.group not in names], [g.group for g in registered])
    if parts:
        rdd = spark.sparkContext.parallelize(parts, len(parts))
        for part in rdd.map(lambda p: _tally_task(path, topic, reported, registered, bf, p)).collect():
            tally.add(part)
    tally.queues, tally.queues_without_ext = len(queue_ids), without_ext
    report = finish_report(path, topic, reported, registered, tally, bloom_filter=bf, alternatives=alternatives,
                           fp_target=fp_target, ns_per_evaluation=ns, timed_messages=timed)
    report.seconds = time.perf_counter() - t0
    return report
