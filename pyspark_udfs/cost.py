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
from collections.abc import Iterable, Sequence
from typing import Any

import cq
from cq.analyses.cost import (
    CostGroup,
    CostReport,
    StorePass,
    Tally,
    check_named,
    empty_tally,
    finish_cluster_report,
    in_order_of,
    measure_ns_per_evaluation,
    queue_runs,
    resolve_reported,
    tally_range,
)
from cq.filter.subscription import DEFAULT_BLOOM, broker_bloom
from cq.readers.objects import is_object_uri
from cq.store.cluster import each_store

from ._plan import SLICE_UNITS, TIER_RANGE, file_ranges, pack_ranges, share_size
from .job import object_storage_options

__all__ = ["filter_cost_spark"]

DEFAULT_PARTITION_UNITS = 1_000_000


def _tally_task(path: str, topic: str, reported, registered, bloom_filter, part, tier: str | None = None,
                objects: dict | None = None) -> Tally:
    # a store in object storage: opened by the task from its URI and ``objects`` (endpoint, region), its
    # credentials from the executor's environment (docs/object-storage.md#spark)
    store = cq.Store(path, tier=tier, object_options=objects or None)
    try:
        tally = None
        for key, queue_id, start, end in part:
            # a range the broker serves from its tier is keyed (topic, TIER_RANGE) (docs/reading.md#tiered-storage)
            one = tally_range(store, topic, reported, registered, queue_id=queue_id, start=start, end=end,
                              bloom_filter=bloom_filter, from_tier=isinstance(key, tuple))
            if tally is None:
                tally = one
            else:
                tally.add(one)
    finally:
        store.close()
    tally.queues = 0  # counted once per queue on the driver
    tally.queues_without_ext = 0
    return tally


def _ranges(store: cq.Store, topic: str, reported: list[CostGroup], bf) -> list[tuple]:
    """The topic's queue ranges of one pass: each queue's, split where the broker serves it from its tier as
    the local pass splits it (``Store.tier_runs``, with each reported group's read-ahead check); a tier range
    keyed ``(topic, TIER_RANGE)``, at most ``SLICE_UNITS`` long."""
    if store.tier is None:
        return [r for q in store.queue_ids(topic) for r in file_ranges(store.consume_queue(topic, q), topic, q)]
    out = []
    for q, runs in queue_runs(store, topic, reported, bf):
        for a, b, from_tier in runs:
            if from_tier:
                out += [((topic, TIER_RANGE), q, s, min(b, s + SLICE_UNITS)) for s in range(a, b, SLICE_UNITS)]
            else:
                out += file_ranges(store.consume_queue(topic, q), topic, q, a, b)
    return out


def _spark_pass(spark, store: cq.Store, topic: str, groups, bf, first: StorePass | None, timing: bool,
                partition_units: int, broker: str | None = None) -> StorePass:
    """One store's pass on Spark: its queue ranges tallied on the executors, added on the driver."""
    path, tier = store.uri or store.root, store.tier_path  # a store in object storage by its URI
    objects = object_storage_options(path)
    reported, registered = in_order_of(first, *resolve_reported(store, topic, groups, bloom_filter=bf, broker=broker))
    ranges = _ranges(store, topic, reported, bf)
    total = sum(e - s for _, _, s, e in ranges)
    parts = pack_ranges(ranges, share_size(total, partition_units, spark.sparkContext.defaultParallelism))
    queue_ids = store.queue_ids(topic)
    without_ext = sum(store.ext(topic, q) is None for q in queue_ids)
    ns, timed = measure_ns_per_evaluation(store, topic, [g.expression for g in reported + registered
                                                         if g.is_sql]) if timing else ({}, 0)
    tally = empty_tally(reported, registered)
    if parts:
        rdd = spark.sparkContext.parallelize(parts, len(parts))
        for part in rdd.map(lambda p: _tally_task(path, topic, reported, registered, bf, p, tier, objects)).collect():
            tally.add(part)
    tally.queues, tally.queues_without_ext = len(queue_ids), without_ext
    return StorePass(path, reported, registered, tally, ns, timed)


def _root(path: str | os.PathLike) -> str:
    """A store root as every executor names it: absolute, or a store in object storage's URI."""
    path = os.fspath(path)
    return path if is_object_uri(path) else os.path.abspath(path)


def filter_cost_spark(spark, store_path: str | os.PathLike | Sequence[str | os.PathLike], topic: str,
                      groups: Iterable[str | CostGroup] | None = None, *,
                      alternatives: Iterable[tuple[int, int]] | None = None, fp_target: float | None = None,
                      bloom_filter: Any = DEFAULT_BLOOM, timing: bool = True,
                      partition_units: int = DEFAULT_PARTITION_UNITS, tier: str | os.PathLike | None = None) -> CostReport:
    """:func:`cq.analyses.cost.filter_cost` with the pass over the units on Spark (same arguments, same report).

    Parameters
    ----------
    spark : SparkSession
    store_path : str or path, or several (or a glob pattern)
        Store root, the same path on the driver and every executor; several: a cluster's brokers,
        each broker's pass run in turn and the report's counts summed over them (docs/cost.md#clusters).
    partition_units : int
        Largest number of ConsumeQueue units per task (fewer, in equal shares, to give every
        core of ``spark`` a task).
    tier : str or path, optional
        The tier directory of a store whose broker ran the tiered store, the same path on every executor: the
        ranges the broker serves from it are tallied from its flat files (docs/cost.md#tiered).
    """
    t0 = time.perf_counter()
    paths = _root(store_path) if isinstance(store_path, (str, os.PathLike)) else [_root(p) for p in store_path]
    bf = broker_bloom(bloom_filter, required="the cost report")
    store = cq.open_stores(paths, **({"tier": os.path.abspath(os.fspath(tier))} if tier is not None else {}))
    try:
        held = store.brokers_of(topic) if isinstance(store, cq.Cluster) else None
        passes: dict[str | None, StorePass] = {}
        for broker, s in each_store(store):
            if held is None or broker in held:
                first = next(iter(passes.values()), None)
                passes[broker] = _spark_pass(spark, s, topic, groups, bf, first, timing and first is None,
                                             partition_units, broker)
        check_named(groups, passes, topic)
        report = finish_cluster_report(store.root, topic, passes, bloom_filter=bf, alternatives=alternatives,
                                       fp_target=fp_target)
    finally:
        store.close()
    report.seconds = time.perf_counter() - t0
    return report
