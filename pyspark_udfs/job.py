"""The main job: replay the broker's filter for consumer groups over a store, on Spark.

Run it through the CLI (``rmqfilter scan``) or hand this file to spark-submit
unchanged, locally or on a cluster::

    spark-submit --master spark://host:7077 pyspark_udfs/job.py /data/store \\
        --topic TopicTest --group GID_A --sql "a > 5"

or on a Spark Connect server: ``rmqfilter scan ... --remote sc://host:port``
(docs/spark-connect.md#scan-remote).

For each group the job reads the store with the ``rocketmq`` data source,
the group's two-layer filter running inside the reader, and reports how many
ConsumeQueue units it scanned, how many passed the ConsumeQueue layer (tag
code, or Bloom bitmap for SQL92) and the CommitLog layer (exact tag or the
selector), the layer-1 false positives, and the throughput.

The arguments ``rmqfilter scan`` and spark-submit ``job.py`` both parse are defined once, in
:func:`rmqfilter_options.add_scan_args`; this module imports nothing from the ``rmqfilter`` package
(the CLI imports the job, inside the commands that run Spark, never the reverse).
"""
from __future__ import annotations

import argparse
import dataclasses
import glob
import importlib
import json
import os
import shutil
import sys
import tempfile
import time
import warnings
from collections.abc import Sequence
from typing import Any

from pyspark.sql import SparkSession
from pyspark.sql import functions as F

import cq
from cq.errors import ReplicaWarning
from cq.filter.custom import load_filter
from cq.readers.objects import is_object_uri
from cq.store.cluster import each_store
from cq.store.topics import registered_groups, topic_store
from pyspark_udfs.datasource import skipped_ranges
from pyspark_udfs.functions import register
from pyspark_udfs.native import selector_column, translate
from rmqfilter_options import (
    LAYER2_AUTO,
    LAYER2_CHOICES,
    LAYER2_DEFAULT,
    ON_CORRUPT,
    OUT_FORMATS,
    add_scan_args,
    error_text,
    fail,
    subscription_conflict,
)

__all__ = ["BrokerCounts", "GroupScan", "ScanResult", "default_parallelism", "format_brokers", "format_skipped",
           "format_summary", "is_connect_session", "main", "owns_session", "require_connect", "scan", "spark_session"]


def owns_session() -> bool:
    """True when no SparkSession is active yet, so the caller that makes one should stop it."""
    return SparkSession.getActiveSession() is None


#: the Python packages Spark Connect's client needs beyond pyspark (the ``connect`` extra installs them)
CONNECT_MODULES = ("grpc", "grpc_status", "google.rpc", "zstandard")


def require_connect() -> None:
    """Raise ``ImportError`` naming the missing package when Spark Connect's client cannot run.

    PySpark imports its Connect client's dependencies only when a remote
    session is built, and fails deep inside the builder; this checks first.
    """
    for name in CONNECT_MODULES:
        try:
            importlib.import_module(name)
        except ImportError as exc:
            raise ImportError(f"Spark Connect needs the Python package providing {name!r}, which is not "
                              f"installed ({exc}); install the connect extra: pip install 'rmqfilter[connect]'"
                              ) from exc


def is_connect_session(spark) -> bool:
    """True when ``spark`` is a Spark Connect session (``pyspark.sql.connect``), False when classic.

    Checked by the class's module, so a classic-only install (no grpc) never imports the Connect client.
    """
    return type(spark).__module__.startswith("pyspark.sql.connect")


def spark_session(master: str | None = None, app_name: str = "rmqfilter", *, progress: bool = True,
                  conf: dict[str, str] | None = None, remote: str | None = None):
    """Get or create a SparkSession ready for rmqfilter: classic, or Spark Connect with ``remote``.

    Sets ``PYSPARK_PYTHON`` to this interpreter unless already set (executors
    must run the Python that has rmqfilter installed), enables Python data
    source filter pushdown, and registers the SQL functions and the
    ``rocketmq`` data source.

    Parameters
    ----------
    master : str, optional
        Spark master URL (``local[2]``, ``spark://host:7077``). When None, the
        one spark-submit configured, or ``local[*]``.
    app_name : str
    progress : bool
        Keep Spark's console progress bar on (for long stages; classic sessions only).
    conf : dict, optional
        Extra Spark settings (under Spark Connect, runtime SQL settings only:
        the server's own settings were fixed when it started).
    remote : str, optional
        A Spark Connect URL instead of ``master`` (docs/spark-connect.md#session):
        ``sc://host:port`` for a running server, or ``local[2]``-style for a
        Connect server started in this process. Needs the ``connect`` extra.

    Raises
    ------
    ValueError
        If both ``master`` and ``remote`` are given.
    ImportError
        If ``remote`` is given and Spark Connect's client packages are missing.
    """
    if master is not None and remote is not None:
        raise ValueError(f"give a Spark master ({master!r}) or a Spark Connect URL ({remote!r}), not both")
    if remote is not None:
        require_connect()
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    local = (remote or master or "local").startswith("local")
    if local:
        # A local session talks only to itself: bind to loopback, not the first
        # network interface Spark would otherwise pick.
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    builder = SparkSession.builder.appName(app_name)
    if remote is not None:
        builder = builder.remote(remote)
    elif master is not None:
        builder = builder.master(master)
    settings = {
        "spark.sql.python.filterPushdown.enabled": "true",
        "spark.sql.shuffle.partitions": "8",
        # Bigger Arrow batches for the UDFs: ~20 % faster than the default 10000 here.
        "spark.sql.execution.arrow.maxRecordsPerBatch": "100000",
    }
    if remote is None:
        # Settings of the driver itself: a Connect client cannot change a server's.
        settings["spark.ui.showConsoleProgress"] = "true" if progress else "false"
        if local:
            settings["spark.ui.enabled"] = "false"
    settings.update(conf or {})
    for key, value in settings.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    if not is_connect_session(spark):
        # A Connect session has no SparkContext; its server's log level is the server's.
        spark.sparkContext.setLogLevel("ERROR")
    register(spark)
    return spark


@dataclasses.dataclass(frozen=True)
class GroupScan:
    """A consumer group and its subscription: SQL92 ``sql`` or a tag expression ``tags``.

    ``registered``: the SQL92 subscription is the group's registration in the store's
    ``config/consumerFilter.json`` (:func:`registered_group_scans`); the data source then
    looks it up itself, with its bornTime and bloom data.
    """

    group: str
    sql: str | None = None
    tags: str | None = None
    registered: bool = False

    def __post_init__(self) -> None:
        if (self.sql is None) == (self.tags is None):
            raise ValueError(f"group {self.group!r}: give exactly one of sql or tags")

    @property
    def subscription(self) -> str:
        return self.sql if self.sql is not None else f"tags: {self.tags}"


@dataclasses.dataclass(frozen=True)
class BrokerCounts:
    """What the job counted on one broker of a scan of several stores (docs/reading.md#clusters)."""

    broker: str
    units_scanned: int
    passed_consume_queue: int
    passed_commit_log: int
    delivered: int
    filter_skipped: int = 0

    @property
    def false_positives(self) -> int:
        """Units this broker's ConsumeQueue layer let through that the group does not receive."""
        return self.passed_consume_queue - self.delivered


@dataclasses.dataclass(frozen=True)
class ScanResult:
    """What the job measured for one group; over several stores, the sums over the brokers, each
    broker's own counts in :attr:`brokers`."""

    group: str
    topic: str
    subscription: str
    units_scanned: int
    passed_consume_queue: int
    passed_commit_log: int
    delivered: int
    seconds: float
    output: str | None = None
    #: ranges skipped under ``on_corrupt="skip"`` (dicts as :func:`pyspark_udfs.datasource.skipped_ranges` gives)
    skipped: tuple = ()
    #: how layer 2 ran: ``native`` (a Spark expression) or ``python (why)`` (in the reader)
    layer2: str = ""
    #: the custom filter (``package.module:function``) run after both layers, if any
    message_filter: str | None = None
    #: messages the custom filter failed on and ``on_filter_error="skip"`` dropped
    filter_skipped: int = 0
    #: a scan of several stores: each broker holding the topic, its own counts (:class:`BrokerCounts`)
    brokers: tuple = ()

    @property
    def false_positives(self) -> int:
        """Units the ConsumeQueue layer let through that the group does not receive.

        For SQL92 groups these are Bloom false positives (plus units without a
        usable bitmap, which layer 1 passes unexamined); for tag groups, tag
        hash collisions and untagged messages the client re-check drops.
        """
        return self.passed_consume_queue - self.delivered

    @property
    def rows_per_second(self) -> float:
        return self.units_scanned / self.seconds if self.seconds > 0 else float("inf")

    def as_dict(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        d["false_positives"] = self.false_positives
        d["rows_per_second"] = self.rows_per_second
        if self.brokers:
            d["brokers"] = [{**dataclasses.asdict(b), "false_positives": b.false_positives} for b in self.brokers]
        else:  # one store: no broker to name
            del d["brokers"]
        return d


def registered_group_scans(store: str | Sequence[str], topic: str, group: str | None = None, *,
                           tier: str | None = None) -> list[GroupScan]:
    """The :class:`GroupScan` of ``group``'s registration (all of the topic's when None); several
    stores (a cluster's brokers): each group once, each broker's registration looked up by the data
    source.

    Raises ``cq.UnknownGroupError`` (a ValueError naming the registered groups) when ``group``
    has none, and ValueError when the topic has no registered group at all.
    """
    st = cq.open_stores(store, **({"tier": tier} if tier is not None else {}))
    try:
        if group is not None:
            return [GroupScan(group, sql=st.registered_filter(topic, group).expression, registered=True)]
        try:
            groups = registered_groups(st, topic)
        except LookupError as exc:
            raise ValueError(error_text(exc)) from None
        regs = {f.group: f for f in reversed(st.registered_filters(topic))}  # the first broker's, as the reader
        return [GroupScan(g, sql=regs[g].expression, registered=True) for g in groups]
    finally:
        st.close()


def default_parallelism(spark) -> int | None:
    """The session's default parallelism, the ``rocketmq`` option ``min_partitions`` to pass
    (docs/spark.md#partitions); None under Spark Connect, which has no SparkContext (the server's
    reader then uses its own CPU count)."""
    try:
        return spark.sparkContext.defaultParallelism
    except AttributeError:  # Spark Connect: PySparkAttributeError
        return None


def object_storage_options(store: str | Sequence[str]) -> dict[str, str]:
    """The data source options ``endpoint`` and ``region`` for a read of stores in object storage: the
    ones this process reads (``AWS_ENDPOINT_URL``, ``AWS_DEFAULT_REGION`` or ``AWS_REGION``), so every
    executor opens the same endpoint (docs/object-storage.md#spark); ``{}`` for local stores. Never a
    credential: each executor reads its own from its environment."""
    if not any(is_object_uri(s) for s in ([store] if isinstance(store, str) else store)):
        return {}
    found = {"endpoint": os.environ.get("AWS_ENDPOINT_URL"),
             "region": os.environ.get("AWS_DEFAULT_REGION") or os.environ.get("AWS_REGION")}
    return {k: v for k, v in found.items() if v}


def _reader(spark, store: str, topic: str, group: GroupScan, *, columns: str | None = None, **options: str):
    # columns: a DDL schema, so the reader decodes only those columns (docs/data-path.md)
    r = spark.read.format("rocketmq").option("topic", topic).option("group", group.group)
    parallelism = default_parallelism(spark)
    if parallelism is not None:
        r = r.option("min_partitions", str(parallelism))
    if columns is not None:
        r = r.schema(columns)
    if not group.registered:  # a registered group is looked up by the data source, bornTime and all
        r = r.option("sql", group.sql) if group.sql is not None else r.option("tags", group.tags)
    for key, value in options.items():
        r = r.option(key, value)
    return r.load(store)


def scan(spark, store: str | Sequence[str], topic: str, group: GroupScan, *, out: str | None = None,
         out_format: str = "parquet", on_corrupt: str = "fail", skipped_log: str | None = None,
         layer2: str = LAYER2_DEFAULT, message_filter: str | None = None,
         on_filter_error: str = "fail", tier: str | None = None) -> ScanResult:
    """Run the broker's filter for ``group`` over ``topic`` and count each layer.

    Parameters
    ----------
    spark : SparkSession
        A session with the data source registered (:func:`spark_session`).
    store : str or list of str
        Store root directory (visible to every executor at the same path); several roots or a
        glob pattern: a cluster's brokers, scanned as one (docs/reading.md#clusters). The counts
        are then the sums over the brokers, :attr:`ScanResult.brokers` each broker's, and the
        messages ``out`` writes carry a ``broker`` column.
    topic : str
    group : GroupScan
    out : str, optional
        Directory to write the messages the group would receive.
    out_format : {"parquet", "json"}
    on_corrupt : {"fail", "skip"}
        The data source option: fail on a corrupt store file, or skip what
        cannot be read and report it in :attr:`ScanResult.skipped`.
    skipped_log : str, optional
        With ``on_corrupt="skip"``, the directory the executors write the
        skipped ranges to; it must be visible to the driver and every executor
        (a shared path on a cluster). Default: a temporary directory, removed
        afterwards (enough for a local master).
    layer2 : {"auto", "native", "python"}
        Where a SQL92 group's selector (layer 2) runs. ``native``: a native
        Spark expression (:func:`pyspark_udfs.selector_column`) over the
        properties the reader hands on after layer 1, when
        :func:`pyspark_udfs.native.translate` says the translation is exact
        (otherwise in the reader, and :attr:`ScanResult.layer2` says why).
        ``python``: in the reader, with the Cython engine. ``auto``
        (``LAYER2_DEFAULT``): ``native`` (see ``LAYER2_AUTO``). Tag groups always run in the reader. The counts
        are the same either way.
    message_filter : str, optional
        ``package.module:function``, a custom filter run in the reader after both layers
        (docs/custom-filters.md); layer 2 then runs in the reader too.
    on_filter_error : {"fail", "skip"}
    tier : str, optional
        The tier directory of a store whose broker ran the tiered store (the data source's option ``tier``,
        docs/reading.md#tiered-storage).

    Returns
    -------
    ScanResult
    """
    if out_format not in OUT_FORMATS:
        raise ValueError(f"out_format must be parquet or json, got {out_format!r}")
    if on_corrupt not in ON_CORRUPT:
        raise ValueError(f"on_corrupt must be fail or skip, got {on_corrupt!r}")
    if layer2 not in LAYER2_CHOICES:
        raise ValueError(f"layer2 must be one of {', '.join(LAYER2_CHOICES)}, got {layer2!r}")
    native, how = _layer2_plan(group, LAYER2_AUTO if layer2 == "auto" else layer2)
    if message_filter is not None and native:
        native, how = False, "python (reader: the custom filter runs after it there)"
    options: dict[str, str] = {}
    own_log = False
    if on_corrupt == "skip":
        own_log = skipped_log is None
        # Absolute: the executors' Python may not share this process's working directory (Spark Connect).
        log_root = tempfile.mkdtemp(prefix="rmqfilter-skipped-") if own_log else os.path.abspath(skipped_log)
        options = {"on_corrupt": "skip", "skipped_log": os.path.join(log_root, "count")}
    if not isinstance(store, str) and len(store) == 1:
        store = store[0]
    brokers: list[str] = []
    if not isinstance(store, str) or glob.has_magic(store):  # one store is only read by the data source
        opened = cq.open_stores(store)
        try:  # a cluster: the brokers holding the topic, each named in the result even when it counts nothing
            brokers = opened.brokers_of(topic) if isinstance(opened, cq.Cluster) else []
        finally:
            opened.close()
    t0 = time.perf_counter()
    # Counting needs no CommitLog fields beyond the properties layer 2 reads itself.
    filtered = {} if message_filter is None else {"filter": message_filter, "on_filter_error": on_filter_error}
    if tier is not None:  # every read of the store reads its tier (not a skip option: ``options`` says those)
        filtered["tier"] = os.path.abspath(tier)
    where = object_storage_options(store)  # every read of a store in object storage
    lead = "broker string, " if brokers else ""  # several stores: counted per broker
    if native:
        decisions = _reader(spark, store, topic, group, decisions="true", table="consumequeue", layer2="spark",
                            columns=lead + "matched_by_consume_queue boolean, reached_commit_log boolean, "
                                           "properties map<string,string>", **options, **filtered, **where)
        # Layer 2 where the broker reads the record; a plain SQL92 group's client check keeps everything.
        matched = F.when(F.col("reached_commit_log"), selector_column(group.sql, "properties"))
        delivered_col = F.coalesce(matched, F.lit(False))
    else:
        # the custom filter needs decoded messages (the reader decodes them for it); counting
        # otherwise asks for the decision columns only
        columns = (lead + "matched_by_consume_queue boolean, matched_by_commit_log boolean, delivered boolean"
                   + (", filter_skipped boolean" if message_filter is not None else ""))
        decisions = _reader(spark, store, topic, group, decisions="true",
                            table="messages" if message_filter is not None else "consumequeue", columns=columns,
                            **options, **filtered, **where)
        matched, delivered_col = F.col("matched_by_commit_log"), F.col("delivered")
    skipped_col = F.col("filter_skipped") if message_filter is not None else F.lit(False)
    counted = decisions.groupBy(*(["broker"] if brokers else [])).agg(
        F.sum(skipped_col.cast("long")).alias("filter_skipped"),
        F.count(F.lit(1)).alias("units_scanned"),
        F.sum(F.col("matched_by_consume_queue").cast("long")).alias("passed_consume_queue"),
        F.sum(F.coalesce(matched, F.lit(False)).cast("long")).alias("passed_commit_log"),
        F.sum(delivered_col.cast("long")).alias("delivered"),
    ).collect()
    keys = [f.name for f in dataclasses.fields(BrokerCounts) if f.name != "broker"]
    rows = {r["broker"] if brokers else None: {k: int(r[k] or 0) for k in keys} for r in counted}
    per_broker = tuple(BrokerCounts(b, **rows.get(b, dict.fromkeys(keys, 0))) for b in brokers)
    total = {k: sum(c[k] for c in rows.values()) for k in keys}
    if out is not None:
        # Second pass without decisions: the reader prunes as the broker does
        # and only the delivered messages reach the writer.
        if options:
            options["skipped_log"] = os.path.join(log_root, "out")
        if native:
            delivered = _reader(spark, store, topic, group, layer2="spark", **options, **where,
                                **({"tier": filtered["tier"]} if tier is not None else {})).where(
                selector_column(group.sql, "properties"))
        else:
            delivered = _reader(spark, store, topic, group, **options, **filtered, **where)
        delivered.write.mode("overwrite").format(out_format).save(out)
    seconds = time.perf_counter() - t0
    skipped: list[dict] = []
    if options:
        # The output pass decodes whole records and may meet corruption the count pass did not.
        seen = set()
        for r in skipped_ranges(os.path.join(log_root, "count")) + skipped_ranges(os.path.join(log_root, "out")):
            key = (r.get("broker"), r["topic"], r["queue_id"], r["start"], r["end"])
            if key not in seen:
                seen.add(key)
                skipped.append(r)
        if own_log:
            shutil.rmtree(log_root, ignore_errors=True)
    return ScanResult(
        group=group.group,
        topic=topic,
        subscription=group.subscription,
        seconds=seconds,
        output=out,
        skipped=tuple(skipped),
        layer2=how,
        message_filter=message_filter,
        brokers=per_broker,
        **total,
    )


def _layer2_plan(group: GroupScan, layer2: str) -> tuple[bool, str]:
    """``(native, description)``: whether layer 2 runs as a Spark expression, and the summary's words."""
    if group.sql is None:
        return False, "python (tag subscription: exact tag check in the reader)"
    if layer2 == "python":
        return False, "python (reader, Cython engine)"
    plan = translate(group.sql)
    if not plan.native:
        return False, f"python ({plan.reason})"
    return True, "native"



def _clip(text: str, width: int) -> str:
    return text if len(text) <= width else text[: width - 1] + "…"


def _table(head: tuple[str, ...], rows: list[tuple[str, ...]], left: int) -> str:
    """``head`` over ``rows``, the first ``left`` columns aligned left, the others right."""
    lines = [head, *rows]
    widths = [max(len(line[i]) for line in lines) for i in range(len(head))]
    out = []
    for n, line in enumerate(lines):
        cells = [c.ljust(w) if i < left else c.rjust(w) for i, (c, w) in enumerate(zip(line, widths))]
        out.append("  ".join(cells).rstrip())
        if n == 0:
            out.append("  ".join("-" * w for w in widths))
    return "\n".join(out)


def _counts(c: ScanResult | BrokerCounts) -> tuple[str, ...]:
    return (f"{c.units_scanned:,}", f"{c.passed_consume_queue:,}", f"{c.passed_commit_log:,}", f"{c.delivered:,}",
            f"{c.false_positives:,}")


_COUNTS_HEAD = ("units", "passed CQ", "passed CL", "delivered", "false pos")


def format_summary(results: Sequence[ScanResult]) -> str:
    """A table a person can read: one line per group (over several stores, the sums over the brokers)."""
    return _table(("group", "topic", "subscription", *_COUNTS_HEAD, "rows/s", "wall s"),
                  [(r.group, r.topic, _clip(r.subscription, 44), *_counts(r), f"{r.rows_per_second:,.0f}",
                    f"{r.seconds:.1f}") for r in results], left=3)


def format_brokers(results: Sequence[ScanResult]) -> str:
    """A scan of several stores: one line per group and broker ("" for a scan of one store)."""
    rows = [(r.group, b.broker, *_counts(b)) for r in results for b in r.brokers]
    return _table(("group", "broker", *_COUNTS_HEAD), rows, left=2) if rows else ""


def format_skipped(results: Sequence[ScanResult]) -> str:
    """The ranges ``on_corrupt=skip`` skipped, one line each ("" when none)."""
    lines = []
    for r in results:
        if not r.skipped:
            continue
        known = sum(s["units"] or 0 for s in r.skipped)
        whole = sum(1 for s in r.skipped if s["end"] is None)
        lines.append(f"{r.group}: skipped {len(r.skipped)} corrupt range(s), {known:,} unit(s)"
                     + (f" and {whole} whole queue(s)" if whole else "") + ":")
        for s in r.skipped:
            end = "end" if s["end"] is None else s["end"]
            lines.append(f"  {s['topic']} queue {s['queue_id']} offsets [{s['start']}, {end}): "
                         f"{s['path']} at byte offset {s['offset']}: {s['reason']}")
    return "\n".join(lines)


def run_scan(args: argparse.Namespace) -> int:
    """Body of ``rmqfilter scan`` and of spark-submit ``job.py``."""
    prog = "rmqfilter scan"
    given = [args.store] if isinstance(args.store, str) else args.store
    # a store in object storage by its URI (docs/object-storage.md#spark), a local one by its absolute path
    stores = [s if is_object_uri(s) else os.path.abspath(s) for s in given]
    if len(stores) == 1 and not is_object_uri(stores[0]) and not glob.has_magic(stores[0]) \
            and not os.path.isdir(stores[0]):
        return fail(prog, f"store {args.store[0]!r} is not a directory")
    try:  # a root that is not a store, a replica that is none, a topic on no broker: as the other commands
        with warnings.catch_warnings(record=True) as said:
            warnings.simplefilter("always", ReplicaWarning)
            with topic_store(stores[0] if len(stores) == 1 else stores, args.topic, replica=args.replica,
                            tier=getattr(args, "tier", None)) as opened:
                if args.replica:  # a broker's replica read, a store in object storage by its URI
                    stores = [st.uri or st.root for _, st in each_store(opened)]
        for w in said:      # which replica of a broker is read (docs/reading.md#replicas), said once, here
            print(f"{prog}: warning: {w.message}", file=sys.stderr)
    except (cq.StoreFormatError, LookupError, ValueError) as exc:
        return fail(prog, error_text(exc))
    conflict = subscription_conflict(args)
    if conflict:
        return fail(prog, conflict)
    if args.all_groups and args.out:
        return fail(prog, "--out writes one group's messages; give --group")
    remote = args.remote
    if remote is not None:
        try:
            require_connect()
        except ImportError as exc:
            return fail(prog, f"--remote {remote}: {exc}")
        if not remote.startswith(("sc://", "local")):
            return fail(prog, f"--remote {remote!r}: expected sc://host:port or local[N]")
    try:
        if args.sql is not None or args.tags is not None:
            groups = [GroupScan(args.group, sql=args.sql, tags=args.tags)]
        else:
            groups = registered_group_scans(stores, args.topic, None if args.all_groups else args.group,
                                            tier=getattr(args, "tier", None))
    except ValueError as exc:  # unknown group (listing the registered ones), malformed config file
        return fail(prog, exc)
    if args.message_filter is not None:
        try:  # fail before Spark starts, with the import error
            load_filter(args.message_filter)
        except ValueError as exc:
            return fail(prog, exc)
    owned = owns_session()
    spark = spark_session(args.master, app_name=f"rmqfilter scan {args.group or 'all groups'}", remote=remote)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ReplicaWarning)      # said above, before Spark started
            results = [scan(spark, stores, args.topic, group, out=args.out,
                            out_format=args.out_format, on_corrupt=args.on_corrupt, skipped_log=args.skipped_log,
                            layer2=args.layer2, message_filter=args.message_filter,
                            on_filter_error=args.on_filter_error, tier=getattr(args, "tier", None)) for group in groups]
    except Exception as exc:  # a failing custom filter surfaces inside Spark's exception
        if args.message_filter is not None and "FilterError" in str(exc):
            text = str(exc)
            line = next((ln for ln in text.splitlines() if "FilterError" in ln), text)
            return fail(prog, line.strip())
        raise
    finally:
        if owned:
            spark.stop()
    print(format_summary(results))
    if any(r.brokers for r in results):
        print("\nper broker:\n" + format_brokers(results))
    print("\n" + "\n".join(f"{r.group}: layer 2: {r.layer2}" if len(results) > 1 else f"layer 2: {r.layer2}"
                            for r in results))
    for r in results:
        if r.message_filter is not None:
            print(f"{r.group}: custom filter {r.message_filter}: skipped on error {r.filter_skipped:,}")
    if any(r.skipped for r in results):
        print("\n" + format_skipped(results))
    if args.out:
        print(f"\n{results[0].delivered:,} messages written to {args.out} ({args.out_format})")
    if args.json_path:
        with open(args.json_path, "w", encoding="utf-8") as f:
            json.dump(results[0].as_dict() if len(results) == 1 else [r.as_dict() for r in results], f, indent=2)
    return 0


def main(argv: list[str] | None = None) -> int:
    """Entry point for ``spark-submit pyspark_udfs/job.py STORE --topic T --group G --sql S``."""
    parser = argparse.ArgumentParser(prog="job.py", description=__doc__.split("\n\n")[0])
    add_scan_args(parser)
    return run_scan(parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
