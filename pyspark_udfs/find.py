"""``rmqfilter find --spark``: :func:`cq.analyses.search.find`'s rows, from the ``rocketmq`` data source (docs/find.md#spark).

For ranges too large for one process: the data source reads every unit of the topic (or the store) with its
record, in parallel, one partition per queue range; Spark keeps the rows whose store time is in the window,
whose ``KEYS`` hold the key, whose ``UNIQ_KEY`` or offset message id is the one asked, and whose properties
the ``where`` selector matches (:func:`pyspark_udfs.functions.selector_match`, the compiled selector). A group
is the data source's ``group`` option (its ``sql``/``tags``, else its registration): the reader decides
through the broker's one pipeline (cq.store.decide), and the driver adds each kept row's state as ``find``
does. The rows are those of :func:`~cq.analyses.search.find` for every record that has a ConsumeQueue unit
(the data source reads units). A window or a unique key without a message id is pushed into the data source
(``pushdown=true``): each queue's range is the broker's search by store time, the ``uniq_key`` column's value
the units the IndexFiles give (docs/spark.md#pushdown).
"""
from __future__ import annotations

import os
import time
from collections.abc import Sequence

from pyspark.sql import functions as F

import cq
import selector
from cq import format as fmt
from cq.analyses.find import parse_offset_msg_id
from cq.analyses.paths import why_every_copy
from cq.analyses.search import BY_TIER, FindResult, FindRow
from cq.store.cluster import broker_name

from .functions import selector_match
from .job import object_storage_options, owns_session, spark_session

__all__ = ["find_spark"]

_COLUMNS = ["topic", "queue_id", "queue_offset", "commit_log_offset", "store_host", "properties", "keys", "uniq_key",
            "tags", "store_timestamp", "born_timestamp"]


def find_spark(stores: str | Sequence[str], *, spark=None, master: str | None = None, topic: str | None = None,
               key: str | None = None, uniq_key: str | None = None, msg_id: str | None = None,
               between: tuple[int, int] | None = None, where: str | None = None, group: str | None = None,
               sql: str | None = None, tags: str | None = None, now_ms: int | None = None,
               tier: str | None = None) -> FindResult:
    """:func:`cq.analyses.search.find` on Spark: the same arguments and rows (each row's ``found_by`` is
    ``"spark"``, or ``"tier"`` for a message the broker serves from its tier). ``spark``: a session to use
    (default: one made for ``master`` and stopped after). ``tier``: the tier directory of stores whose brokers
    ran the tiered store (the data source's option ``tier``, docs/find.md#tiered)."""
    roots = [stores] if isinstance(stores, str) else list(stores)
    if uniq_key is not None and msg_id is not None:
        raise ValueError("give uniq_key or msg_id, not both")
    if between is not None and between[0] > between[1]:
        raise ValueError(f"the time window ends ({between[1]}) before it begins ({between[0]})")
    if group is None and (sql is not None or tags is not None):
        raise ValueError("sql and tags are a group's subscription: give group too")
    if group is not None and topic is None:
        raise ValueError("group needs topic (a group's filter is per topic)")
    if where is not None:
        selector.compile(where)  # a selector that does not parse fails here, with its position
    names = {}
    served: dict[str, set] = {}  # per broker, the (topic, queue, offset range) its tier serves
    for root in roots:
        store = cq.Store(root, tier=tier)
        try:
            names[root] = broker_name(store)[0]
            holds = topic is None or topic in store.topics()
            if tier is not None and holds:
                served[names[root]] = {(t, q, lo, hi) for t, q, lo, hi in store.cut(topic).tiers}
        finally:
            store.close()
        if not holds and len(roots) == 1:
            raise LookupError(f"topic {topic!r} has no consume queues in {root}")
    own = spark is None and owns_session()
    if spark is None:
        spark = spark_session(master, app_name="rmqfilter find", progress=False)
    try:
        reader = spark.read.format("rocketmq")
        # one query on this DataFrame (docs/spark.md#pushdown): the window plans each queue's range by store time,
        # a unique key the units the IndexFiles give
        pushed = (between is not None or uniq_key is not None) and msg_id is None
        if pushed:
            reader = reader.option("pushdown", "true")
        if tier is not None:
            reader = reader.option("tier", os.path.abspath(tier))
        reader = reader.options(**object_storage_options(roots))  # stores in object storage: their endpoint
        if topic is not None:
            reader = reader.option("topic", topic)
        if group is not None:
            reader = reader.option("group", group)
            if sql is not None:
                reader = reader.option("sql", sql)
            if tags is not None:
                reader = reader.option("tags", tags)
        df = reader.load(roots if len(roots) > 1 else roots[0])
        cols = (["broker"] if len(roots) > 1 else []) + _COLUMNS
        df = df.select(*cols)
        if between is not None:
            df = df.where(F.col("store_timestamp").between(int(between[0]), int(between[1])))
        if key is not None:
            df = df.where(F.array_contains(F.split(F.col("keys"), fmt.KEY_SEPARATOR), key))
        uniq = uniq_key
        if msg_id is not None:
            parsed = parse_offset_msg_id(msg_id)
            by_offset = None
            if parsed is not None:
                by_offset = df.where((F.col("commit_log_offset") == parsed[1]) & (F.col("store_host") == parsed[0]))
            if by_offset is not None and by_offset.limit(1).count():
                df = by_offset
            else:
                uniq = msg_id.strip()
        if uniq is not None:
            df = df.where(F.col("uniq_key") == uniq)
        if where is not None:
            df = df.where(selector_match(where, F.col("properties")))
        collected = df.collect()
    finally:
        if own:
            spark.stop()
    single = names[roots[0]] if len(roots) == 1 else None
    rows = []
    for r in collected:
        d = r.asDict()
        broker = d["broker"] if single is None else single
        from_tier = any(t == d["topic"] and q == d["queue_id"] and lo <= d["queue_offset"] < hi
                        for t, q, lo, hi in served.get(broker, ()))
        rows.append(FindRow(broker, d["topic"], d["queue_id"], d["queue_offset"],
                            d["commit_log_offset"], fmt.offset_msg_id(d["store_host"], d["commit_log_offset"]),
                            d["uniq_key"], d["keys"], d["tags"], d["store_timestamp"],
                            d["born_timestamp"], BY_TIER if from_tier else "spark"))
    order = {n: i for i, n in enumerate(names.values())}
    # a tier's rows first (its flat CommitLog offsets are its own), as find lists them (docs/find.md#tiered)
    rows.sort(key=lambda r: (order.get(r.broker, 0), r.found_by != BY_TIER,
                             (r.queue_id, r.queue_offset) if r.found_by == BY_TIER else (0, r.commit_log_offset)))
    if group is not None:
        _states(roots, names, rows, topic, group, sql, tags, now_ms, tier)
    what = f"topic {topic}" if topic else "the store"
    read = ("the units the search by store time found in each queue" if pushed else "every unit")
    note = (f"on Spark: the rocketmq data source read {read} of {what} of {len(roots)} store(s); Spark kept "
            f"{len(rows)} row(s)")
    stats = {"index_files": 0, "index_candidates": 0, "index_confirmed": 0, "scanned_records": 0, "scans": [],
             "queues": [], "probes": 0, "range_units": 0, "units": 0, "spark": True}
    return FindResult(rows, [note], stats, group)


def _states(roots, names, rows, topic, group, sql, tags, now_ms, tier=None) -> None:
    """Each row's state for ``group`` (:func:`cq.analyses.paths.why_every_copy`, as ``find`` gives it)."""
    now_ms = int(time.time() * 1000) if now_ms is None else now_ms
    for root in roots:
        store = cq.Store(root, tier=tier)
        try:
            for r in rows:
                if r.broker == names[root]:
                    r.state = why_every_copy(store, topic, group, sql=sql, tags=tags, queue_id=r.queue_id,
                                             queue_offset=r.queue_offset, now_ms=now_ms)[0].state
        finally:
            store.close()
