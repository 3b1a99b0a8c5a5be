"""How a read of a store is cut into Spark tasks (docs/spark.md#partitions): no pyspark here.

The ``rocketmq`` data source, its streaming reader and ``rmqfilter cost --spark`` plan with
these rules, and the non-Spark CLI commands import ``pyspark_udfs.cost`` without Spark.
"""
from __future__ import annotations

import functools
import itertools
import os
from collections.abc import Callable, Mapping, Sequence

import numpy as np

import cq
from cq.readers.batchcq import batch_start  # the broker's rule, one home: re-exported here

__all__ = ["DEFAULT_PARTITION_UNITS", "GROUP_PARTITION_UNITS", "KEPT_OFFSET_BYTES", "LOG_BINS", "MIN_SHARE_UNITS", "SLICE_UNITS",
           "TIER_RANGE", "UNITS_ONLY_PARTITION_UNITS", "align_to_batches", "batch_start", "default_min_partitions",
           "file_ranges", "pack_by_log", "pack_ranges", "share_size"]

#: Most units a partition takes (option ``partition_units``) when the read decodes every unit's
#: CommitLog record, when a group's layer 1 decides which it decodes, and when it decodes none:
#: enough work that a task's fixed cost is a small share of it (docs/spark.md#partitions).
DEFAULT_PARTITION_UNITS = 1_000_000
GROUP_PARTITION_UNITS = 4_000_000
UNITS_ONLY_PARTITION_UNITS = 8_000_000
#: Fewest units a share for ``min_partitions`` takes: below it a second task costs more than it saves.
MIN_SHARE_UNITS = 50_000
#: Most units one queue range of a partition holds (what the reader holds in memory at once).
SLICE_UNITS = 300_000
#: The third part of a planned range's key when the broker serves the range from its tier
#: (docs/reading.md#tiered-storage): ``(broker, topic, TIER_RANGE)``.
TIER_RANGE = "tier"
#: Bins of the cut's CommitLog range in which :func:`pack_by_log` counts a read's units to place its
#: partitions' bounds (a bound falls within one bin's span of the equal share).
LOG_BINS = 4096
#: The most bytes of CommitLog offsets :func:`pack_by_log` keeps between its three passes over the ranges
#: (8 bytes a unit): within it each range's offsets are read once, past it once per pass.
KEPT_OFFSET_BYTES = 64 << 20


def default_min_partitions() -> int:
    """The CPUs this process may run on: local mode's parallelism (option ``min_partitions``)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # pragma: no cover - not on Linux
        return max(1, os.cpu_count() or 1)


def share_size(units: int, cap: int, parallel: int, min_share: int = MIN_SHARE_UNITS) -> int:
    """Units per partition for a read of ``units`` units: at most ``cap``, and small enough to
    make ``parallel`` partitions, though no share below ``min_share`` (``cap`` still wins).

    >>> share_size(3_500_000, 1_000_000, 2), share_size(3_500_000, 4_000_000, 2), share_size(300, 70, 2)
    (1000000, 1750000, 70)
    """
    return max(1, min(cap, max(min_share, -(-units // max(1, parallel)))))


def file_ranges(queue: cq.ConsumeQueue, topic: str, queue_id: int, lo: int | None = None,
                hi: int | None = None) -> list[tuple[str, int, int, int]]:
    """Queue offsets ``[lo, hi)`` (default: the queue's) as ``(topic, queue_id, start, end)`` ranges,
    each inside one ConsumeQueue file and at most :data:`SLICE_UNITS` long."""
    lo = queue.min_offset if lo is None else lo
    hi = queue.max_offset if hi is None else hi
    out = []
    for first, last in queue.file_units:
        start, end = max(lo, first), min(hi, last)
        out += [(topic, queue_id, s, min(end, s + SLICE_UNITS)) for s in range(start, end, SLICE_UNITS)]
    return out


def pack_ranges(ranges: Sequence[tuple[str, int, int, int]], size: int) -> list[list[tuple[str, int, int, int]]]:
    """``(topic, queue_id, start, end)`` ranges cut into the fewest groups of at most ``size`` units,
    in equal shares (the last may be smaller); a range is split where a share ends.

    >>> pack_ranges([("T", 0, 0, 5), ("T", 1, 0, 5)], 100)
    [[('T', 0, 0, 5), ('T', 1, 0, 5)]]
    >>> pack_ranges([("T", 0, 0, 150), ("T", 1, 10, 60)], 100)
    [[('T', 0, 0, 100)], [('T', 0, 100, 150), ('T', 1, 10, 60)]]
    """
    total = sum(e - s for _, _, s, e in ranges)
    if total <= 0:
        return []
    share = -(-total // -(-total // size))  # ceil(total / groups), groups = ceil(total / size)
    groups: list[list[tuple[str, int, int, int]]] = [[]]
    room = share
    for topic, q, s, e in ranges:
        while s < e:
            if room == 0:
                groups.append([])
                room = share
            take = min(room, e - s)
            groups[-1].append((topic, q, s, s + take))
            s += take
            room -= take
    return groups


def pack_by_log(ranges: Sequence[tuple], size: int, offsets_of: Callable[[tuple], np.ndarray],
                log_range: tuple[int, int]) -> list[list[tuple]]:
    """``(key, queue_id, start, end)`` ranges packed into the groups :func:`pack_ranges` makes (as many, of
    the same shares), each group a stretch of the CommitLog rather than a run of queues: the units whose
    records lie in one stretch of the log, from every queue (docs/spark.md#partitions). A task reading a
    store in object storage then fetches its own stretch of the CommitLog's objects, not the whole log
    again for its queues' records, which lie all over it (docs/object-storage.md#spark).

    ``offsets_of(range)`` gives the CommitLog offsets of a range's units, ascending (a ConsumeQueue's
    order); ``log_range`` is the cut's CommitLog ``[min, end)``. A group's first unit is found by counting
    every unit in :data:`LOG_BINS` bins of that range (units outside it count in the first or last bin),
    then ranking the units of the bin where the share ends. Within a group the ranges keep their order
    (topic, queue, offset); a range is split where its records cross into the next group.

    >>> offs = {0: np.arange(0, 100, 10), 1: np.arange(5, 105, 10)}   # two queues, interleaved
    >>> pack_by_log([("T", 0, 0, 10), ("T", 1, 0, 10)], 10, lambda r: offs[r[1]][r[2]:r[3]], (0, 105))
    [[('T', 0, 0, 5), ('T', 1, 0, 5)], [('T', 0, 5, 10), ('T', 1, 5, 10)]]
    """
    ranges = [r for r in ranges if r[3] > r[2]]
    total = sum(e - s for _, _, s, e in ranges)
    groups = -(-total // max(1, size)) if total > 0 else 0
    lo, hi = int(log_range[0]), int(log_range[1])
    if groups <= 1 or hi <= lo:
        return pack_ranges(ranges, size)
    share = -(-total // groups)  # pack_ranges' share: every group but the last holds this many units
    bins = min(LOG_BINS, hi - lo)
    if total * 8 <= KEPT_OFFSET_BYTES:  # each range's queue opened and read once, not once per pass
        offsets_of = functools.cache(offsets_of)

    def bin_of(offsets: np.ndarray) -> np.ndarray:
        return (np.clip(offsets, lo, hi - 1) - lo) * bins // (hi - lo)

    counts = np.zeros(bins, dtype=np.int64)
    for r in ranges:
        counts += np.bincount(bin_of(np.asarray(offsets_of(r), dtype=np.int64)), minlength=bins)
    before = np.concatenate([[0], np.cumsum(counts)])  # units in the bins before each bin
    targets = np.arange(1, groups) * share  # the units before each group but the first
    where = np.searchsorted(before, targets, side="right") - 1  # the bin holding each group's first unit
    inside: dict[int, list[np.ndarray]] = {int(j): [] for j in where}
    for r in ranges:
        offsets = np.asarray(offsets_of(r), dtype=np.int64)
        at = bin_of(offsets)
        for j, found in inside.items():
            found.append(offsets[at == j])
    # each group's first unit: ranked within its bin (a tie of offsets, one record in two queues, stays whole)
    bounds = np.array([np.sort(np.concatenate(inside[int(j)]))[t - before[j]] for j, t in zip(where, targets)],
                      dtype=np.int64)
    out: list[list[tuple]] = [[] for _ in range(groups)]
    for key, q, s, e in ranges:
        group = np.searchsorted(bounds, np.asarray(offsets_of((key, q, s, e)), dtype=np.int64), side="right")
        cuts = [0, *(np.flatnonzero(np.diff(group)) + 1).tolist(), e - s]
        for a, b in itertools.pairwise(cuts):
            out[int(group[a])].append((key, q, s + a, s + b))
    return [group for group in out if group]


def align_to_batches(groups: list[list[tuple]], batch_starts: Mapping[tuple, np.ndarray]) -> list[list[tuple]]:
    """Packed ranges (:func:`pack_ranges`) whose BatchCQ queues' bounds (``batch_starts`` by ``(topic,
    queue_id)``: the batch starts, then the queue's end) are moved down to the start of the batch they fall in, so no batch is split between
    two ranges and each is read whole, once (docs/reading.md#batchcq); ranges left empty are
    dropped, and groups left empty.

    The rule that moves a bound is :func:`cq.readers.batchcq.batch_start`, the one the streaming
    source's micro-batch ends and ``rmqfilter tail`` follow too (:mod:`cq.store.stream`).

    >>> align_to_batches([[("T", 0, 0, 5)], [("T", 0, 5, 10)]], {("T", 0): np.array([0, 3, 7, 10])})
    [[('T', 0, 0, 3)], [('T', 0, 3, 10)]]
    """
    if not batch_starts:
        return groups
    out = []
    for group in groups:
        kept = []
        for topic, q, s, e in group:
            starts = batch_starts.get((topic, q))
            if starts is not None:
                s, e = batch_start(starts, s), batch_start(starts, e)
            if e > s:
                kept.append((topic, q, s, e))
        if kept:
            out.append(kept)
    return out
