"""What broker-side filtering costs per consumer group on a store, and whether the Bloom bitmap pays.

:func:`filter_cost` replays the broker's two filter layers (docs/cost.md) for every group of a
topic in one pass over its ConsumeQueue units:

* layer 1 as this store has it: the tag code (tag groups) or the ConsumeQueueExt bitmap (SQL92
  groups), through the same pipeline :meth:`cq.Store.consume` runs (:func:`cq.store.decide.decide_units`:
  layer 1, then whether the record is present);
* layer 2: each distinct selector evaluated once per batch on every message's properties
  (``Selector.matches_many``), so the report knows each group's exact answer for every message;
* the bitmap the dispatcher (``CommitLogDispatcherCalcBitMap``) would build for every registered
  SQL92 group, rebuilt in memory from the groups' answers and replayed (:mod:`cq.analyses.cost_measure`).

The pass is split into :class:`Tally` objects that add up (one per queue range), so the Spark
variant (:mod:`pyspark_udfs.cost`) runs :func:`tally_range` on executors and
:func:`finish_report` on the driver.
"""
from __future__ import annotations

import os
import time
from collections.abc import Iterable, Sequence
from dataclasses import fields
from typing import Any

import numpy as np

import selector
from selector.quoted import BROKER_EVALUATE_NS

from .. import format as fmt
from ..errors import UnknownGroupError
from ..filter.layers import Layers
from ..filter.subscription import DEFAULT_BLOOM, broker_bloom, subscription_filter
from ..store.cluster import Cluster, each_store, open_stores
from ..store.decide import decide_units, records_present
from ..store.store import CONSUME_BATCH, ConsumeStats, Store, StoreCut
from .cost_measure import (
    machine,
    measure_ns_per_evaluation,
    predicted_fp_rate,
    quoted_java_ns,
    replay_bitmaps,
    replay_steps,
)
from .cost_records import (
    BrokerCost,
    CostGroup,
    CostReport,
    GroupCost,
    NoExtUnitsError,
    StorePass,
    Tally,
)

__all__ = [
    "DEFAULT_ALTERNATIVES",
    "BrokerCost",
    "CostGroup",
    "CostReport",
    "GroupCost",
    "NoExtUnitsError",
    "StorePass",
    "Tally",
    "filter_cost",
    "finish_cluster_report",
    "finish_report",
    "in_order_of",
    "predicted_fp_rate",
    "queue_runs",
    "resolve_groups",
    "tally_range",
]

#: ``(f, n)`` pairs replayed besides the store's own when the caller names none: from a 1-byte
#: to a 78-byte bitmap, so a target false-positive rate finds the smallest bitmap that holds it.
DEFAULT_ALTERNATIVES: tuple[tuple[int, int], ...] = (
    (50, 4), (33, 8), (20, 16), (20, 32), (20, 64), (10, 32), (10, 64), (5, 64), (1, 64),
)


# ------------------------------------------------------------------ groups
def resolve_groups(store: Store, topic: str, groups: Iterable[str | CostGroup] | None = None, *,
                   bloom_filter: Any = DEFAULT_BLOOM) -> tuple[list[CostGroup], list[CostGroup]]:
    """``(reported, registered)``: the groups to report on, and the topic's registered SQL92 groups.

    Registered groups are those of ``config/consumerFilter.json`` for ``topic`` (dead ones too:
    the dispatcher evaluates them) plus every explicit SQL92 :class:`CostGroup` with
    ``registered=True``; ones without a compiled expression or bloom data are left out, as the
    dispatcher skips them. A group named by a string must be registered
    (:class:`cq.UnknownGroupError` otherwise). ``groups=None``: every registered group and
    every explicit one.
    """
    bf = broker_bloom(bloom_filter, required="the cost report")
    explicit = [g for g in (groups or []) if isinstance(g, CostGroup)]
    names = [g for g in (groups or []) if not isinstance(g, CostGroup)]
    from_file = [
        CostGroup(r.group, r.expression or "", r.expression_type or "", r.born_time, True,
                  r.bloom_data if r.bloom_matches else None)
        for r in store.registered_filters(topic, bloom_filter=bf)
    ]
    by_name = {g.group: g for g in from_file}
    for g in explicit:
        by_name[g.group] = g
    registered = [g for g in by_name.values() if g.registered and g.is_sql and _compiles(g.expression)]
    if groups is None:
        return list(by_name.values()), registered
    reported: list[CostGroup] = []
    for name in names:
        if name not in by_name:
            raise UnknownGroupError(name, topic, sorted(by_name), store.config_path("consumerFilter.json"))
        reported.append(by_name[name])
    reported += explicit
    seen: set[str] = set()
    return [g for g in reported if not (g.group in seen or seen.add(g.group))], registered


def _compiles(sql: str) -> bool:
    try:
        selector.compile(sql)
    except selector.SelectorSyntaxError:
        return False
    return bool(sql.strip())


def _make_filter(g: CostGroup, topic: str, bf: Any):
    """The filter of a reported group: its expression, as registered with ``bf`` (its bloom data, bornTime)."""
    if not g.is_sql:
        return subscription_filter(topic, g.group, tags=g.expression)
    return subscription_filter(topic, g.group, sql=g.expression, bloom_filter=bf, born_time=g.born_time,
                               bloom_data=g.bloom_data)


# ------------------------------------------------------------------ one pass
def tally_range(store: Store, topic: str, reported: Sequence[CostGroup], registered: Sequence[CostGroup], *,
                queue_id: int, start: int | None = None, end: int | None = None, bloom_filter: Any = DEFAULT_BLOOM,
                from_tier: bool = False) -> Tally:
    """Count queue offsets ``[start, end)`` of one queue for every group (the unit of work of a pass).

    Layer 1 runs through :class:`cq.filter.layers.Layers` with the store's ext bitmaps; each distinct selector
    is evaluated once per batch on every message present in the CommitLog.

    ``from_tier``: the range is one the broker serves from its tier (a run of :meth:`cq.Store.tier_runs`,
    docs/reading.md#tiered-storage): its units and records are the tier's flat files, with no ext file
    (docs/filtering.md#tiered-filter). Such a tally counts no queue (the queue's local run counts it).
    """
    bf = broker_bloom(bloom_filter, required="the cost report")
    all_groups = list(reported) + [g for g in registered if g.group not in {r.group for r in reported}]
    names = [g.group for g in all_groups]
    reg_names = [g.group for g in registered]
    tally = Tally(names, reg_names, queues=0 if from_tier else 1)
    filters = [_make_filter(g, topic, bf) for g in all_groups]
    reg_index = [names.index(n) for n in reg_names]
    if from_tier:
        tier = store.tier_queue(topic, queue_id)
        if tier is None:
            raise ValueError(f"queue {topic}/{queue_id} has no flat files in the tier of {store.root}")
        log = tier.commit_log
        lo = tier.min_offset if start is None else int(start)
        hi = tier.end_offset if end is None else int(end)
        cut = StoreCut(log.min_offset, log.max_offset)
        expected = lo
        for first, raw in tier.raw_chunks(lo, hi):
            if first > expected:  # below the tier's minimum now: gone, as for the broker
                tally.units += first - expected
                tally.commit_log_missing += first - expected
            expected = first + len(raw) // fmt.CQ_STORE_UNIT_SIZE
            for b in range(0, len(raw) // fmt.CQ_STORE_UNIT_SIZE, CONSUME_BATCH):
                chunk = raw[b * fmt.CQ_STORE_UNIT_SIZE:(b + CONSUME_BATCH) * fmt.CQ_STORE_UNIT_SIZE]
                _tally_batch(log, tally, chunk, filters, reg_index, None, cut)
        if expected < hi:
            tally.units += hi - expected
            tally.commit_log_missing += hi - expected
        return tally
    log = store.commit_log
    cut = StoreCut(log.min_offset, log.max_offset)  # the CommitLog range read; files expiring meanwhile leave it
    with store.queue_readers(topic, queue_id) as (cqueue, ext):
        if ext is None:
            tally.queues_without_ext = 1
        count = None if end is None else max(0, int(end) - (cqueue.min_offset if start is None else int(start)))
        if start is not None:
            # units of the range now below the queue's minimum went away (the broker expired them)
            gone = max(0, min(cqueue.min_offset, int(start) + (count if count is not None else 0)) - int(start))
            tally.units += gone
            tally.commit_log_missing += gone
            start = max(int(start), cqueue.min_offset)
            count = None if count is None else max(0, count - gone)
        for _first, raw in cqueue.raw_chunks(start, count):
            for b in range(0, len(raw) // fmt.CQ_STORE_UNIT_SIZE, CONSUME_BATCH):
                chunk = raw[b * fmt.CQ_STORE_UNIT_SIZE:(b + CONSUME_BATCH) * fmt.CQ_STORE_UNIT_SIZE]
                _tally_batch(log, tally, chunk, filters, reg_index, ext, cut)
                log.drop_resident()
    return tally


def _tally_batch(log, tally: Tally, chunk, filters, reg_index, ext, cut: StoreCut) -> None:
    units = np.frombuffer(chunk, dtype=fmt.CQ_UNIT_DTYPE)
    n = len(units)
    offs = units["commit_log_offset"].astype(np.int64)
    sizes = units["size"].astype(np.int64)
    present = records_present(log, offs, sizes, cut)  # as Store.consume decides: expired ones are missing
    tally.units += n
    tally.commit_log_missing += int(n - present.sum())
    tally.records += int(present.sum())
    tally.record_bytes += int(sizes[present].sum())
    slot = units["tags_code"]
    if ext is not None:
        eb = ext.read_batch(slot)
        tally.ext_units += int(eb.found.sum())
        bms = np.maximum(eb.bit_map_size[eb.found].astype(np.int64), 0)
        tally.ext_bitmaps += int((bms > 0).sum())
        tally.ext_bitmap_bytes += int(bms.sum())
        tally.ext_unit_bytes += int(eb.size[eb.found].astype(np.int64).sum())
    props = log.gather_properties(offs[present])
    answers: dict[str, np.ndarray] = {}  # one evaluation per distinct selector
    tags = None
    matched = np.zeros((len(filters), n), dtype=bool)
    for j, flt in enumerate(filters):
        stats = ConsumeStats()
        layers = Layers(flt)
        # the broker's path as consume decides it (layer 1, presence); layer 2 below runs on every present
        # record, not only those layer 1 passed: the dispatcher evaluates each for the bitmap replay
        found = decide_units(layers, log, offs, sizes, slot, ext=ext, raw=chunk, stats=stats, present=present,
                             layer2=False)
        hits = found.hits
        tested = (hits | ~found.consume_queue) & present if stats.bloom_tested else np.zeros(n, dtype=bool)
        passed = found.reached
        if layers.has_layer2:
            got = answers.get(flt.sql)
            if got is None:
                got = answers[flt.sql] = layers.layer2_properties(props)
            matched[j, present] = got
            tally.bloom_tested[j] += int(tested.sum())
            tally.bloom_false_positives[j] += int((hits & present & ~matched[j]).sum())
            tally.delivered[j] += int((passed & matched[j]).sum())
        else:
            if tags is None:
                tags = [p.get("TAGS") if p is not None else None for p in props]
            client = layers.client_tags(tags)
            matched[j, present] = client
            tally.client_filtered[j] += int((passed & ~matched[j] & present).sum())
            tally.delivered[j] += int((passed & matched[j]).sum())
        tally.passed_consume_queue[j] += int(passed.sum())
        tally.matched[j] += int(matched[j].sum())
        tally.passed_bytes[j] += int(sizes[passed].sum())
    if reg_index:
        rows = np.packbits(matched[reg_index][:, present].T, axis=1)
        if len(rows):
            uniq, counts = np.unique(rows, axis=0, return_counts=True)
            for row, c in zip(uniq, counts.tolist()):
                key = row.tobytes()
                tally.patterns[key] = tally.patterns.get(key, 0) + c


def resolve_reported(store: Store, topic: str, groups: Iterable[str | CostGroup] | None, *,
                     bloom_filter: Any, broker: str | None = None) -> tuple[list[CostGroup], list[CostGroup]]:
    """:func:`resolve_groups` on a store holding ``topic``, with the errors of :func:`filter_cost`: KeyError
    when the topic has no consume queues, ValueError when there is no group to report on. On a
    ``broker`` of several stores, a group named that is not registered there is left out (its report
    says which broker lacks it; :func:`check_named` checks some broker has it)."""
    if topic not in store.topics():
        raise KeyError(f"topic {topic!r} has no consume queues in {store.root}")
    if broker is not None and groups is not None:
        groups = list(groups)
        here = {r.group for r in store.registered_filters(topic, bloom_filter=bloom_filter)}
        groups = [g for g in groups if isinstance(g, CostGroup) or g in here]
    reported, registered = resolve_groups(store, topic, groups, bloom_filter=bloom_filter)
    if broker is not None and registered:
        return reported, registered
    if not reported:
        raise ValueError(f"no group to report on: no SQL92 group is registered for topic {topic!r} in "
                         f"{store.config_path('consumerFilter.json')}; name groups explicitly (CostGroup, "
                         "--sql-group, --tag-group)")
    return reported, registered


def check_named(groups: Iterable[str | CostGroup] | None, passes: dict[str | None, StorePass], topic: str) -> None:
    """Raise :class:`cq.UnknownGroupError` for a group named (a string) that no broker's pass has."""
    have = {g.group for p in passes.values() for g in p.reported}
    for name in groups or []:
        if not isinstance(name, CostGroup) and name not in have:
            first = next(iter(passes.values()))
            raise UnknownGroupError(name, topic, sorted(have), os.path.join(first.root, "config", "consumerFilter.json"))


def empty_tally(reported: Sequence[CostGroup], registered: Sequence[CostGroup]) -> Tally:
    """The tally of no unit (a topic without units), with the groups :func:`tally_range` counts."""
    return Tally([g.group for g in reported] + [g.group for g in registered if g not in reported],
                 [g.group for g in registered])


def in_order_of(first: StorePass | None, reported: list[CostGroup],
                registered: list[CostGroup]) -> tuple[list[CostGroup], list[CostGroup]]:
    """Another broker's groups in the ``first`` broker's order (its config file may list them in
    another), so the brokers' tallies add up; groups ``first`` lacks keep their place at the end."""
    if first is None:
        return reported, registered

    def order(groups: list[CostGroup], like: list[CostGroup]) -> list[CostGroup]:
        at = {g.group: i for i, g in enumerate(like)}
        return sorted(groups, key=lambda g: at.get(g.group, len(at)))

    return order(reported, first.reported), order(registered, first.registered)


def _store_pass(store: Store, topic: str, groups, bf, first: StorePass | None, timing: bool,
                broker: str | None = None) -> StorePass:
    reported, registered = in_order_of(first, *resolve_reported(store, topic, groups, bloom_filter=bf, broker=broker))
    tally = None
    for q, runs in queue_runs(store, topic, reported, bf):  # one cut: what the broker expires meanwhile is counted
        for a, b, from_tier in runs:
            part = tally_range(store, topic, reported, registered, queue_id=q, start=a, end=b, bloom_filter=bf,
                               from_tier=from_tier)
            tally = part if tally is None else tally.add(part)
        if all(from_tier for _, _, from_tier in runs):  # no local run counted the queue
            tally.queues += 1
            with store.queue_readers(topic, q) as (_cqueue, ext):
                tally.queues_without_ext += ext is None
    ns, timed = ({}, 0)
    if timing:
        ns, timed = measure_ns_per_evaluation(store, topic, [g.expression for g in reported + registered if g.is_sql])
    return StorePass(store.root, reported, registered, tally or empty_tally(reported, registered), ns, timed)


def queue_runs(store: Store, topic: str, reported: Sequence[CostGroup], bloom_filter: Any = DEFAULT_BLOOM,
               ) -> list[tuple[int, list[tuple[int, int, bool]]]]:
    """``(queue_id, runs)`` of each queue of one cut of ``topic``: its range as ``(start, end, from_tier)`` runs,
    split where the broker serves it from its tier as ``consume`` splits it (:meth:`cq.Store.tier_runs`,
    docs/reading.md#tiered-storage), with the read-ahead check of each reported group's filter (a
    :class:`cq.TieredStoreError` where a pull crossing into the local range depends on its batches); a queue
    without units is one empty local run. The one split of the local pass and the Spark one."""
    bf = broker_bloom(bloom_filter, required="the cost report")
    cut = store.cut(topic)
    checks = [_make_filter(g, topic, bf) for g in reported] if store.tier is not None else []
    out = []
    for _, q, lo, hi in cut.queues:
        served = cut.tier_range(topic, q)
        for flt in checks:
            store.tier_runs(topic, q, served, lo, hi, flt=flt, cut=cut)
        out.append((q, store.tier_runs(topic, q, served, lo, hi) or [(lo, hi, False)]))
    return out


def filter_cost(store: Store | Cluster | str | os.PathLike | Sequence[str | os.PathLike], topic: str,
                groups: Iterable[str | CostGroup] | None = None, *,
                alternatives: Iterable[tuple[int, int]] | None = None, fp_target: float | None = None,
                bloom_filter: Any = DEFAULT_BLOOM, timing: bool = True, raise_without_ext: bool = False) -> CostReport:
    """The filtering-cost report of ``topic``: per group, per layer, with and without the bitmap.

    Parameters
    ----------
    store : cq.Store, cq.Cluster, path, or several paths (or a glob pattern)
        Several stores are a cluster's brokers (docs/cost.md#clusters): each broker's units are
        counted with its own registrations, the report's counts are the sums over the brokers
        holding the topic, and :attr:`CostReport.brokers` gives each broker's rows.
    topic : str
    groups : iterable of str or CostGroup, optional
        Groups to report on: names of registered groups (``config/consumerFilter.json``) and
        explicit :class:`CostGroup` s (SQL92 ones count as registered unless told otherwise;
        TAG ones are reported only). Default: every registered group.
    alternatives : iterable of (f, n), optional
        Bloom parameters to replay besides the store's (default :data:`DEFAULT_ALTERNATIVES`).
    fp_target : float, optional
        A false-positive rate (0..1): the report names the smallest bitmap among the replayed
        ``f``/``n`` whose rate stays under it.
    bloom_filter : bloom.BloomFilter or DEFAULT_BLOOM
        The broker's filter (DEFAULT_BLOOM: ``BloomFilter(20, 32)``, k=3, m=112); NO_BLOOM is a ValueError.
    timing : bool
        Measure each selector's CPU per evaluation (False: leave those fields None); over
        several stores, on the first broker's messages.
    raise_without_ext : bool
        Raise :class:`NoExtUnitsError` (carrying the report) when the topic has no ext units.

    Returns
    -------
    CostReport

    Raises
    ------
    cq.UnknownGroupError
        A named group is not registered on the topic.
    KeyError
        The topic has no consume queues (on no broker).
    """
    t0 = time.perf_counter()
    own = not isinstance(store, (Store, Cluster))
    store = open_stores(store) if own else store
    try:
        bf = broker_bloom(bloom_filter, required="the cost report")
        held = store.brokers_of(topic) if isinstance(store, Cluster) else None
        passes = {}
        for broker, s in each_store(store):
            if held is None or broker in held:
                first = next(iter(passes.values()), None)
                passes[broker] = _store_pass(s, topic, groups, bf, first, timing and first is None, broker)
        check_named(groups, passes, topic)
        report = finish_cluster_report(store.root, topic, passes, bloom_filter=bf, alternatives=alternatives,
                                       fp_target=fp_target)
        report.seconds = time.perf_counter() - t0
    finally:
        if own:
            store.close()
    if raise_without_ext and not report.bitmap_available:
        raise NoExtUnitsError(topic, store.root, report)
    return report


def finish_cluster_report(root: str, topic: str, passes: dict[str | None, StorePass], *, bloom_filter: Any = DEFAULT_BLOOM,
                          alternatives: Iterable[tuple[int, int]] | None = None,
                          fp_target: float | None = None) -> CostReport:
    """The report of one store's pass (``passes`` ``{None: pass}``), or of each broker's of a cluster
    (``{broker: pass}``): the tallies added up, then each broker's own rows (:class:`BrokerCost`).
    The CPU per evaluation is the first pass's (where it was measured)."""
    first = next(iter(passes.values()))
    timing = {"ns_per_evaluation": first.ns_per_evaluation, "timed_messages": first.timed_messages}
    if list(passes) == [None]:
        return finish_report(root, topic, first.reported, first.registered, first.tally, bloom_filter=bloom_filter,
                             alternatives=alternatives, fp_target=fp_target, **timing)
    # the union of the brokers' groups, in the first broker's order then each next one's new ones
    reported = _union(p.reported for p in passes.values())
    registered = _union(p.registered for p in passes.values())
    names = [g.group for g in reported] + [g.group for g in registered if g not in reported]
    same = all((p.tally.groups, p.tally.registered) == (first.tally.groups, first.tally.registered)
               for p in passes.values())
    total = Tally(names, [g.group for g in registered])
    brokers, dispatch = [], 0
    for broker, p in passes.items():
        total.add(p.tally if same else p.tally.widened(total.groups, total.registered))
        own = finish_report(p.root, topic, p.reported, p.registered, p.tally, bloom_filter=bloom_filter,
                            alternatives=(), **timing)
        held = {g.group for g in p.reported}
        brokers.append(BrokerCost(broker, p.root, own.bitmap_available, own.messages, own.units,
                                  own.commit_log_missing, own.registered_groups, own.groups,
                                  [g.group for g in reported if g.group not in held]))
        dispatch += own.dispatch_evaluations or 0
    merged = None
    if not same:  # each group's row: the sum of its rows on the brokers that have it
        per_pass = [{g.group: _group_row(g, p.tally, first.ns_per_evaluation)
                     for g in _union([p.reported, p.registered])} for p in passes.values()]
        merged = {name: _summed([rows[name] for rows in per_pass if name in rows]) for name in names}
    report = finish_report(root, topic, reported, registered, total, bloom_filter=bloom_filter,
                           alternatives=alternatives, fp_target=fp_target, group_rows=merged,
                           dispatch_evaluations=None if same else dispatch, **timing)
    report.brokers = brokers
    return report


def _union(lists: Iterable[list[CostGroup]]) -> list[CostGroup]:
    """The groups of ``lists``, each name once, in order of first appearance."""
    out: dict[str, CostGroup] = {}
    for groups in lists:
        for g in groups:
            out.setdefault(g.group, g)
    return list(out.values())


def _summed(rows: list[GroupCost]) -> GroupCost:
    """One group's rows of several brokers as one: counts added (a count no broker has stays None), the
    group's own fields and its CPU per evaluation the first row's."""
    first = rows[0]
    out = {}
    for f in fields(GroupCost):
        values = [getattr(r, f.name) for r in rows]
        if f.name in _SUMMED_COST_FIELDS:
            known = [v for v in values if v is not None]
            out[f.name] = sum(known) if known else None
        else:
            out[f.name] = getattr(first, f.name)
    return GroupCost(**out)


#: The :class:`GroupCost` fields that count units, evaluations, bytes or CPU: a group's rows add up.
_SUMMED_COST_FIELDS = frozenset((
    "units", "passed_consume_queue", "bloom_tested", "bloom_false_positives", "delivered", "client_filtered",
    "evaluations_without_bitmap", "evaluations_with_bitmap", "commit_log_reads_without_bitmap",
    "commit_log_reads_with_bitmap", "commit_log_bytes_without_bitmap", "commit_log_bytes_with_bitmap",
    "cpu_ms_without_bitmap", "cpu_ms_with_bitmap"))


def _ms(count: int | None, ns: float | None) -> float | None:
    return None if count is None or ns is None else count * ns / 1e6


def finish_report(root: str, topic: str, reported: Sequence[CostGroup], registered: Sequence[CostGroup],
                  tally: Tally, *, bloom_filter: Any = DEFAULT_BLOOM, alternatives: Iterable[tuple[int, int]] | None = None,
                  fp_target: float | None = None, ns_per_evaluation: dict[str, float] | None = None,
                  timed_messages: int = 0, group_rows: dict[str, GroupCost] | None = None,
                  dispatch_evaluations: int | None = None) -> CostReport:
    """Turn a whole topic's :class:`Tally` into the :class:`CostReport` (the replay runs here).

    ``group_rows`` (brokers with different groups): each group's row as given, the sum of its brokers'
    rows, and ``dispatch_evaluations`` the sum of the brokers' (each broker evaluates its own groups)."""
    bf = broker_bloom(bloom_filter, required="the cost report")
    ns_per_evaluation = ns_per_evaluation or {}
    bitmap_available = tally.queues_without_ext < tally.queues
    records = tally.records

    def row(g: CostGroup) -> GroupCost:
        return group_rows[g.group] if group_rows is not None else _group_row(g, tally, ns_per_evaluation)

    rows = [row(g) for g in reported]
    reg_rows = {g.group: row(g) for g in registered}
    dispatch = records * len(registered) if bitmap_available else None
    dispatch_ms = None
    if dispatch is not None and dispatch_evaluations is not None:
        dispatch = dispatch_evaluations
    elif bitmap_available and all(ns_per_evaluation.get(g.expression) is not None for g in registered):
        dispatch_ms = sum(records * ns_per_evaluation[g.expression] for g in registered) / 1e6
    # replays, from the distinct answer rows (the store is not touched)
    own = (bf.f, bf.n)
    by_groups = replay_bitmaps(tally.patterns, registered, topic, own[0], own[1], replay_steps(len(registered))) \
        if registered else []
    configs = []
    alts = list(DEFAULT_ALTERNATIVES if alternatives is None else alternatives)
    for f, n in [own] + [a for a in alts if tuple(a) != own]:
        full = replay_bitmaps(tally.patterns, registered, topic, int(f), int(n), [len(registered)]) if registered else []
        if full:
            configs.append(full[0] | {"store": (int(f), int(n)) == own})
    choice = None
    if fp_target is not None:
        # measured and predicted both under the target: a small store measures few false positives by chance
        # no negatives at all (every selector TRUE on every unit): nothing can pass falsely
        ok = [c for c in configs if (c["fp_rate"] or 0.0) <= fp_target and (c["predicted_fp_rate"] or 0.0) <= fp_target]
        if ok:
            best = min(ok, key=lambda c: (c["bitmap_bytes"], c["fp_rate"]))
            choice = {k: best[k] for k in ("f", "n", "k", "m", "bitmap_bytes", "fp_rate", "predicted_fp_rate")}
    # the verdict, over the registered SQL92 groups (the ones the dispatcher evaluates)
    saved_evals = sum(reg_rows[g.group].evaluations_without_bitmap - (reg_rows[g.group].evaluations_with_bitmap or 0)
                      for g in registered) if bitmap_available else None
    saved_reads = saved_evals
    saved_bytes = sum(tally.record_bytes - (reg_rows[g.group].commit_log_bytes_with_bitmap or 0)
                      for g in registered) if bitmap_available else None
    verdict: dict[str, Any] = {
        "pull_evaluations_saved": saved_evals,
        "commit_log_reads_saved": saved_reads,
        "commit_log_bytes_saved": saved_bytes,
        "dispatch_evaluations_added": dispatch,
        "pays_in_evaluations": None if saved_evals is None else saved_evals > (dispatch or 0),
        # pulls of every message by every group (broadcast consumers, offset resets) from which the
        # evaluations saved at pull outweigh the dispatch's: dispatch / saved per pass
        "break_even_pulls": (dispatch / saved_evals) if saved_evals else None,
        "extra_evaluations": None if saved_evals is None else (dispatch or 0) - saved_evals,
        "costliest_groups": [g.group for g in sorted(rows, key=_pull_cost, reverse=True)][:3],
    }
    if saved_evals is not None and all(ns_per_evaluation.get(g.expression) is not None for g in registered):
        saved_ms = sum((reg_rows[g.group].evaluations_without_bitmap - (reg_rows[g.group].evaluations_with_bitmap
                                                                        or 0)) * ns_per_evaluation[g.expression]
                       for g in registered) / 1e6
        verdict["pull_cpu_ms_saved"] = saved_ms
        verdict["dispatch_cpu_ms_added"] = dispatch_ms
        verdict["pays_in_cpu"] = saved_ms > (dispatch_ms or 0)
    verdict["summary"] = _verdict_text(verdict, bitmap_available, len(registered), choice, fp_target)
    return CostReport(
        store=root, topic=topic, bitmap_available=bitmap_available,
        bloom={"f": own[0], "n": own[1], "k": bf.k, "m": bf.m, "bitmap_bytes": (bf.m + 7) // 8},
        messages=records, units=tally.units, commit_log_missing=tally.commit_log_missing,
        registered_groups=[g.group for g in registered], dispatch_evaluations=dispatch, dispatch_cpu_ms=dispatch_ms,
        ext={"units": tally.ext_units, "unit_bytes": tally.ext_unit_bytes, "bitmaps": tally.ext_bitmaps,
             "bitmap_bytes": tally.ext_bitmap_bytes, "queues_without_ext": tally.queues_without_ext,
             "queues": tally.queues},
        groups=rows, fp_by_groups=by_groups, fp_by_config=configs, fp_target=fp_target,
        fp_target_choice=choice, verdict=verdict,
        measurement={"what": "Selector.matches_many over this topic's property maps, best of 5 runs, "
                             "nanoseconds per message", "messages": timed_messages, "machine": machine()},
        quoted={"what": "the broker's own Java figures per selector evaluation (warm JIT), quoted, "
                        "not measured here", "ns_per_evaluation": dict(BROKER_EVALUATE_NS)},
    )


def _group_row(g: CostGroup, tally: Tally, ns_per_evaluation: dict[str, float]) -> GroupCost:
    """Group ``g``'s row of the report of ``tally`` (a whole topic's, or one broker's)."""
    bitmap_available = tally.queues_without_ext < tally.queues
    i = tally.groups.index(g.group)
    records = tally.records
    sql = g.is_sql
    ns = ns_per_evaluation.get(g.expression) if sql else None
    passed = int(tally.passed_consume_queue[i]) if bitmap_available or not sql else records
    with_evals = (passed if sql else 0) if bitmap_available else None
    return GroupCost(
        group=g.group, expression_type=g.expression_type, expression=g.expression,
        registered=g.group in tally.registered, born_time=g.born_time, units=tally.units,
        passed_consume_queue=passed, bloom_tested=int(tally.bloom_tested[i]),
        bloom_false_positives=int(tally.bloom_false_positives[i]),
        delivered=int(tally.delivered[i]) if bitmap_available or not sql else int(tally.matched[i]),
        client_filtered=int(tally.client_filtered[i]),
        evaluations_without_bitmap=records if sql else 0,
        evaluations_with_bitmap=with_evals,
        commit_log_reads_without_bitmap=records,
        commit_log_reads_with_bitmap=passed if bitmap_available or not sql else None,
        commit_log_bytes_without_bitmap=tally.record_bytes,
        commit_log_bytes_with_bitmap=int(tally.passed_bytes[i]) if bitmap_available or not sql else None,
        ns_per_evaluation=ns, quoted_java_ns_per_evaluation=quoted_java_ns(g.expression) if sql
        else None,
        cpu_ms_without_bitmap=_ms(records if sql else 0, ns) if sql else None,
        cpu_ms_with_bitmap=_ms(with_evals, ns) if sql else None,
    )


def _pull_cost(g: GroupCost) -> tuple:
    """What a group costs at pull: measured CPU of its evaluations, then CommitLog bytes read."""
    evals = g.evaluations_with_bitmap if g.evaluations_with_bitmap is not None else g.evaluations_without_bitmap
    read = g.commit_log_bytes_with_bitmap if g.commit_log_bytes_with_bitmap is not None \
        else g.commit_log_bytes_without_bitmap
    return (evals * (g.ns_per_evaluation or 0.0), read, evals)


def _verdict_text(v: dict, available: bool, registered: int, choice: dict | None, target: float | None) -> str:
    if not registered:
        return "No SQL92 group is registered on this topic: the dispatcher builds no bitmap."
    parts = []
    if not available:
        parts.append("This topic has no ConsumeQueueExt units, so the bitmap cannot be evaluated on this store; "
                     "every unit is read and evaluated on pull (layer 2 only).")
    else:
        saved, added = v["pull_evaluations_saved"], v["dispatch_evaluations_added"]
        parts.append(f"The bitmap saves {saved:,} selector evaluations and {v['commit_log_reads_saved']:,} "
                     f"CommitLog reads ({v['commit_log_bytes_saved']:,} bytes) at pull, and adds {added:,} "
                     f"evaluations at dispatch.")
        if saved > added:
            parts.append("In evaluations it pays.")
        elif not saved:
            parts.append(f"It saves no evaluation and no CommitLog read: it does not pay (it costs {added:,} "
                         "evaluations more).")
        else:
            parts.append(f"In evaluations it does not pay for one pull of each message by each group (it cannot: "
                         f"the dispatcher evaluates every registered group on every message, as pulls without the "
                         f"bitmap do): it costs {added - saved:,} evaluations more, to save the CommitLog reads; "
                         f"it pays in evaluations once each message is pulled more than "
                         f"{v['break_even_pulls']:.2f} times per group (broadcast consumers, offset resets).")
        if "pays_in_cpu" in v:
            parts.append(f"In measured CPU: {v['pull_cpu_ms_saved']:.3g} ms saved at pull against "
                         f"{v['dispatch_cpu_ms_added']:.3g} ms added at dispatch (CommitLog reads saved come on top).")
    if target is not None:
        parts.append(f"Smallest replayed bitmap keeping false positives under {target:.2%}: "
                     + ("(no unit fails any selector, so none can pass falsely) "
                        if choice and choice["fp_rate"] is None else "")
                     + (f"f={choice['f']}, n={choice['n']} (k={choice['k']}, m={choice['m']}, "
                        f"{choice['bitmap_bytes']} bytes per unit, measured {choice['fp_rate'] or 0.0:.2%}, predicted "
                        f"{choice['predicted_fp_rate'] or 0.0:.2%})."
                        if choice else "none of the replayed f/n."))
    if v["costliest_groups"]:
        parts.append(f"Costliest groups: {', '.join(v['costliest_groups'])}.")
    return " ".join(parts)
