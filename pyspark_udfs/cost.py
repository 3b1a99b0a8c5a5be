"""``rmqfilter cost --spark``: the filtering-cost pass of :mod:`cq.cost` spread over Spark tasks.

The driver plans one task per ConsumeQueue file (split every ``partition_units`` units), each
task runs :func:`cq.cost.tally_range` over its queue offsets on an executor, and the driver adds
the :class:`cq.cost.Tally` objects up and finishes the same report :func:`cq.cost.filter_cost`
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
from cq.cost import (
    CostGroup,
    CostReport,
    Tally,
    finish_report,
    measure_ns_per_evaluation,
    resolve_groups,
    tally_range,
)

__all__ = ["filter_cost_spark"]

DEFAULT_PARTITION_UNITS = 200_000


def _slices(store: cq.Store, topic: str, partition_units: int) -> list[tuple[int, int, int]]:
    out = []
    for q in store.queue_ids(topic):
        queue = store.consume_queue(topic, q)
        lo, hi = queue.min_offset, queue.max_offset
        per_file = queue.units_per_file
        for file_start, _ in queue.files:
            first = file_start // 20
            start, end = max(lo, first), min(hi, first + per_file)
            out += [(q, s, min(end, s + partition_units)) for s in range(start, end, partition_units)]
    return out


def _tally_task(path: str, topic: str, reported, registered, bloom_filter, part) -> Tally:
    store = cq.Store(path)
    try:
        queue_id, start, end = part
        tally = tally_range(store, topic, reported, registered, queue_id=queue_id, start=start, end=end,
                            bloom_filter=bloom_filter)
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
    """:func:`cq.cost.filter_cost` with the pass over the units on Spark (same arguments, same report).

    Parameters
    ----------
    spark : SparkSession
    store_path : str or path
        Store root, the same path on the driver and every executor.
    partition_units : int
        Largest number of ConsumeQueue units per task.
    """
    t0 = time.perf_counter()
    path = os.path.abspath(os.fspath(store_path))
    bf = bloom_filter if bloom_filter is not None else bloom.BloomFilter()
    store = cq.Store(path)
    try:
        if topic not in store.topics():
            raise KeyError(f"topic {topic!r} has no consume queues in {path}")
        reported, registered = resolve_groups(store, topic, groups, bloom_filter=bf)
        parts = _slices(store, topic, partition_units)
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
