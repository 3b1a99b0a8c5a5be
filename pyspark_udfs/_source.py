"""The ``rocketmq`` data source's options, columns and partitions: what the source
(:mod:`pyspark_udfs.datasource`), its batch reader (``_reader``) and its stream reader
(:mod:`pyspark_udfs.streaming`) share, so none of them imports another (docs/spark.md)."""
from __future__ import annotations

import dataclasses
import glob
import json
import os

from pyspark.sql.datasource import (
    InputPartition,
)
from pyspark.sql.types import (
    BinaryType,
    BooleanType,
    IntegerType,
    LongType,
    MapType,
    StringType,
    StructField,
    StructType,
)

import bloom
import cq
import selector
from cq.analyses.pending import COLUMNS as PENDING_COLUMNS
from cq.analyses.trace import COLUMNS as TRACE_COLUMNS
from cq.filter.custom import ON_FILTER_ERROR, PROPERTY_COLUMNS, load_filter
from cq.filter.layers import Layers
from cq.filter.subscription import registration_filter
from cq.readers.objects import is_object_uri
from cq.store.cluster import store_roots
from rmqfilter_options import BODY, ON_CORRUPT

from ._plan import (
    DEFAULT_PARTITION_UNITS,
    GROUP_PARTITION_UNITS,
    MIN_SHARE_UNITS,
    UNITS_ONLY_PARTITION_UNITS,
    default_min_partitions,
    pack_ranges,
    share_size,
)

#: The broker's pending work (cq.analyses.pending, docs/paths.md#pending): whole-store tables, one row per
#: scheduled copy, transaction or dead letter, the same rows ``rmqfilter pending`` prints.
PENDING_TABLES = tuple(PENDING_COLUMNS)
#: The clients' message-trace records (cq.analyses.trace, docs/trace.md#spark): a whole-store table too.
TRACE_TABLE = "trace"
TABLES = ("messages", "consumequeue", *PENDING_TABLES, TRACE_TABLE)
_PENDING_TYPES = {"string": StringType(), "int": IntegerType(), "long": LongType(), "boolean": BooleanType()}
LAYER2 = ("reader", "spark")
#: Why the stream source refuses a store in object storage (docs/object-storage.md#a-snapshot).
NOT_STREAMED = ("a store in object storage is a snapshot (its objects are written whole): there is no tail for "
                "readStream to follow; read it with spark.read, a batch (docs/object-storage.md#a-snapshot)")
#: ``stale_after``'s default: a task reading a cut planned a minute ago, of a store that moved on, says so
DEFAULT_STALE_AFTER = 60.0
_UNIT_FIELDS = [
    StructField("topic", StringType(), False),
    StructField("queue_id", IntegerType(), False),
    StructField("queue_offset", LongType(), False),
    StructField("commit_log_offset", LongType(), False),
    StructField("store_size", IntegerType(), False),
    # The tag code as the broker uses it: the ConsumeQueue slot, or the ext
    # unit's tags code when the slot is an ext address; NULL if that ext unit
    # cannot be read (the broker then passes the message through).
    StructField("tags_code", LongType(), True),
]
_EXT_FIELDS = [
    StructField("msg_store_time", LongType(), True),
    StructField("filter_bitmap", BinaryType(), True),
]
_CONSUMEQUEUE_FIELDS = [
    *_UNIT_FIELDS,
    StructField("ext_address", LongType(), True),
    *_EXT_FIELDS,
]
_MESSAGE_FIELDS = [
    *_UNIT_FIELDS,
    StructField("tags", StringType(), True),
    StructField("keys", StringType(), True),
    StructField("uniq_key", StringType(), True),
    StructField("properties", MapType(StringType(), StringType(), True), True),
    StructField("body", BinaryType(), True),
    StructField("born_timestamp", LongType(), True),
    StructField("born_host", StringType(), True),
    StructField("store_timestamp", LongType(), True),
    StructField("store_host", StringType(), True),
    StructField("sys_flag", IntegerType(), True),
    StructField("reconsume_times", IntegerType(), True),
    *_EXT_FIELDS,
]
#: Columns of the messages table decoded from the CommitLog record (the rest come from the units).
RECORD_COLUMNS = ("tags", "keys", "properties", "body", "born_timestamp", "born_host", "store_timestamp",
                  "store_host", "sys_flag", "reconsume_times")
#: The first column of a read of several stores (a cluster's brokers): the broker holding the unit.
_BROKER_FIELD = StructField("broker", StringType(), False)
_PROPERTIES_FIELD = StructField("properties", MapType(StringType(), StringType(), True), True)
_LAYER1_DECISION_FIELDS = [
    StructField("matched_by_consume_queue", BooleanType(), False),
    StructField("reached_commit_log", BooleanType(), False),
]
_FILTER_DECISION_FIELDS = [StructField("filter_skipped", BooleanType(), False)]
_DECISION_FIELDS = [
    StructField("matched_by_consume_queue", BooleanType(), False),
    StructField("matched_by_commit_log", BooleanType(), True),
    StructField("delivered", BooleanType(), False),
]


def batch_cq_layer2_error(topic: str) -> ValueError:
    """The error of ``layer2=spark`` on the messages table of BatchCQ topic ``topic`` (docs/reading.md#batchcq)."""
    return ValueError(f"rocketmq: topic {topic!r} is a BatchCQ topic: layer 2 judges each batch by the batch "
                      "record's own properties, which the messages table's properties column (each message's "
                      "own) does not hold; read it with layer2=reader, or the consumequeue table with "
                      "layer2=spark (docs/reading.md#batchcq)")


def compaction_layer2_error(topic: str) -> ValueError:
    """The error of ``layer2=spark`` on compaction topic ``topic`` (docs/reading.md#compaction-topics)."""
    return ValueError(f"rocketmq: topic {topic!r} is a compaction topic: the broker serves it from its compaction "
                      "store without either filter layer, so there is no layer 2 for Spark to evaluate; read it "
                      "with layer2=reader (docs/reading.md#compaction-topics)")


class TagsCodes(frozenset):
    """Tag codes of a pushed-down filter on ``tags`` (candidates by hash; Spark re-checks the tags):
    a BatchCQ topic's reader ignores them, its units' tags code being the batch's, not a message's
    (docs/reading.md#batchcq)."""


def _bool_option(options: dict, name: str, default: bool) -> bool:
    raw = options.get(name)
    if raw is None:
        return default
    value = str(raw).strip().lower()
    if value in ("true", "1", "yes"):
        return True
    if value in ("false", "0", "no"):
        return False
    raise ValueError(f"rocketmq option {name!r}: expected true or false, got {raw!r}")


def _number_option(options: dict, name: str, parse, ok, expected: str, default):
    """The option ``name`` (keys lower-cased) as ``parse`` reads it, ``default`` when absent;
    ``ValueError`` naming the option and saying what was ``expected`` when it is not ``ok``."""
    raw = options.get(name.lower())
    if raw is None:
        return default
    try:
        value = parse(raw)
    except ValueError:
        value = None
    if value is None or not ok(value):
        raise ValueError(f"rocketmq option {name!r}: expected {expected}, got {raw!r}")
    return value


def _seconds_option(options: dict, name: str, default: float) -> float:
    """The option ``name`` as seconds >= 0 (NaN refused)."""
    return _number_option(options, name, float, lambda v: v >= 0, "seconds (a number >= 0)", default)


def positive_int_option(options: dict, name: str) -> int | None:
    """The option ``name`` (keys lower-cased) as a positive integer, or None when absent;
    ``ValueError`` naming the option otherwise."""
    return _number_option(options, name, int, lambda v: v > 0, "a positive integer", None)


#: Every option of the ``rocketmq`` source, each documented once, here, beside :meth:`ReadOptions.parse`,
#: which reads them (Spark passes strings; a bad value fails ``load()`` naming the option). The data
#: source's docstring and docs/spark.md#data-source-options point here; a new option gets its entry
#: here (docs/contributing.md#add-a-spark-option).
OPTIONS: dict[str, str] = {
    "topic": (
        "Topic to read; every topic of the store when absent."
    ),
    "table": (
        "``messages`` (default): each ConsumeQueue unit joined to its CommitLog record. "
        "``consumequeue``: the units and their ConsumeQueueExt fields only (the CommitLog is not read)."
        " ``scheduled``, ``transactions``, ``dead_letters``, ``pops``: the broker's pending work in the"
        " whole store (delay-level copies with their due time and status, transaction halves with their"
        " status, dead letters with their origin, POP groups' pops with theirs), the rows ``rmqfilter "
        "pending`` prints (docs/paths.md#pending); they take no other option. ``trace``: the clients' "
        "message-trace records of the trace topic, the rows ``rmqfilter trace`` prints (docs/trace.md#spark); "
        "it takes ``trace_topic`` alone."
    ),
    "trace_topic": (
        "With ``table=trace``: the trace topic (default ``RMQ_SYS_TRACE_TOPIC``)."
    ),
    "group": (
        "With ``sql`` or ``tags``: apply the broker's two-layer filter for that consumer group inside "
        "the reader: only the messages the group would receive come out (both tables give the same "
        "rows; ``consumequeue`` reads only the properties of the records layer 1 let through, for layer"
        " 2, and none of their other fields). ``group`` alone (with ``topic``): the group's SQL92 "
        "registration in the store's ``config/consumerFilter.json`` (expression, bornTime, bloom data),"
        " looked up on the driver (``docs/why.md``)."
    ),
    "sql": (
        "With ``group``: the group's SQL92 selector (excludes ``tags``; see ``group``)."
    ),
    "tags": (
        "With ``group``: the group's tag subscription, e.g. ``TagA || TagB`` (excludes ``sql``; see "
        "``group``)."
    ),
    "from_committed": (
        "``true`` (needs ``group`` and ``topic``): read each queue from the group's committed offset in"
        " ``config/consumerOffset.json`` (partitions are planned from there; queues without a committed"
        " offset are not read), so the rows are the group's real backlog (``rmqfilter backlog``)."
    ),
    "decisions": (
        "``true``: with a group, keep every unit and add the columns ``matched_by_consume_queue`` "
        "(layer 1), ``matched_by_commit_log`` (layer 2; NULL where it was not reached, and the "
        "CommitLog columns NULL there too, because the broker does not read those records) and "
        "``delivered`` (what the consumer gets, after the client's exact tag re-check)."
    ),
    "pushdown": (
        "``false`` (default): Spark filters the rows the reader yields. ``true``: the reader takes "
        "pushed-down filters on ``queue_id``, ``tags_code`` and ``tags`` (needs "
        "``spark.sql.python.filterPushdown.enabled``, which :func:`pyspark_udfs.register` sets). Only "
        "for a DataFrame that runs one filtered query: Spark (4.3) keeps the read it planned for a "
        "pushed-down query on the DataFrame's source and reuses it for a later query on the same "
        "DataFrame that pushes no filter, which then sees only the earlier query's rows "
        "(docs/spark.md#pushdown)."
    ),
    "body": (
        "``uncompressed`` (default): the ``body`` column as the consumer reads it, decompressed where "
        "SYSFLAG has ``COMPRESSED_FLAG`` (``cq.Message.uncompressed_body()``, batch-decoded by "
        "``CommitLog.decode_columns(decompress_body=True)``); ``stored``: the bytes as stored "
        "(``cq.Message.body``). ``sys_flag`` is the stored value either way (docs/data-path.md#bodies)."
        " A body that does not decompress is a corrupt record (``on_corrupt``)."
    ),
    "partition_units": (
        "Largest number of ConsumeQueue units per partition (Spark task). A partition reads one or more"
        " queue ranges, one after the other, so small queues share a task: a task's fixed cost is far "
        "above a small queue's read (docs/spark.md#partitions). Default: 1000000; 4000000 with a group "
        "(its layer 1 decides which records are decoded); 8000000 when the read decodes no CommitLog "
        "record (a schema of ConsumeQueue and ext columns only, no group or filter)."
    ),
    "min_partitions": (
        "At least this many partitions, in equal shares of at least 50000 units, when the read has that"
        " many: the cores that run the read. Default: the CPU count of the machine that plans the read,"
        " which is local mode's parallelism; on a cluster pass "
        "``spark.sparkContext.defaultParallelism``."
    ),
    "layer2": (
        "``reader`` (default): with ``sql``, the reader evaluates the selector (layer 2) itself, "
        "in-process with the Cython engine, on the properties of the records layer 1 let through. "
        "``spark``: the reader applies layer 1 only and leaves layer 2 to Spark, for a native "
        "expression (:func:`pyspark_udfs.selector_column`) over ``properties``: without ``decisions`` "
        "the rows are the records the broker reads (layer 1 passed), to be filtered by the selector; "
        "with ``decisions`` the columns are ``matched_by_consume_queue`` and ``reached_commit_log`` "
        "(and, in the ``consumequeue`` table, ``properties``, NULL where not reached). Needs ``sql``; "
        "``rmqfilter scan`` uses it (see :mod:`pyspark_udfs.job`)."
    ),
    "on_corrupt": (
        "``fail`` (default): a corrupt store file fails the query with a ``cq.StoreFormatError`` naming"
        " the file and byte offset (inside Spark's ``PythonException`` or ``AnalysisException``). "
        "``skip``: skip what cannot be read where a reader can resume and go on: a CommitLog record or "
        "ConsumeQueueExt unit that does not decode drops that one unit; a ConsumeQueue or "
        "ConsumeQueueExt file that cannot be opened drops the partition's range (the whole queue when "
        "it fails while planning). Each skipped range is logged (WARNING, logger "
        "``rmqfilter.datasource``) and, with ``skipped_log``, written there; read them with "
        ":func:`skipped_ranges`."
    ),
    "filter": (
        "``package.module:function``: a custom filter (docs/custom-filters.md) run in the reader after "
        "both broker layers and the client's tag re-check, on each message the group would receive "
        "(every message without ``group``). Imported when the reader is made (``load()`` fails with the"
        " import error) and again on the executors, so the module must be importable there (PYTHONPATH,"
        " ``spark.submit.pyFiles``). Needs ``table=messages``. With ``decisions`` the column "
        "``filter_skipped`` says where it failed under ``on_filter_error=skip`` and ``delivered`` "
        "includes its answer."
    ),
    "on_filter_error": (
        "``fail`` (default): an exception in the filter fails the query with ``cq.FilterError`` naming "
        "the message and the filter; ``skip``: the message is dropped."
    ),
    "skipped_log": (
        "A directory (visible to the executors) where ``on_corrupt=skip`` writes the skipped ranges, "
        "one JSON-lines file per partition (a retried task replaces its own file, so nothing is counted"
        " twice)."
    ),
    "tier": (
        "The tier directory (``tieredStoreFilePath``) of a store whose broker ran RocketMQ's tiered store: "
        "queue ranges the broker serves from the tier are read there (docs/reading.md#tiered-storage). "
        "Required for such a store (it is refused without); over several stores, the tier the brokers share (each "
        "broker's flat files under its own name there); readStream too."
    ),
    "stale_after": (
        "Seconds (default 60; 0: always): a task reading a cut planned longer ago than this, of a store"
        " that has moved on since, logs a WARNING (logger ``rmqfilter.datasource``, once per plan and "
        "worker) naming the cut and its age. Spark plans a DataFrame's read once: every later action on"
        " it reads that first cut (docs/spark.md#reused-dataframes)."
    ),
    "endpoint": (
        "A store in object storage (an ``s3://bucket/prefix`` path, docs/object-storage.md#spark): the S3 "
        "endpoint, ``http://host:port`` for a local or on-premises server (default: ``AWS_ENDPOINT_URL`` as "
        "pyarrow reads it on each process). Each task opens its own filesystem from this option and "
        "``region``; credentials are never options: every process reads its own from its environment as "
        "pyarrow does (``spark.executorEnv.AWS_ACCESS_KEY_ID``/``AWS_SECRET_ACCESS_KEY``, an instance "
        "role), so no secret travels in the plan."
    ),
    "region": (
        "With an ``s3://`` path: the bucket's region (default: ``AWS_DEFAULT_REGION`` / pyarrow's "
        "resolution; docs/object-storage.md#spark)."
    ),
    "replica": (
        "With several store roots of one broker name (a master and its slaves, docs/reading.md#replicas):"
        " the replica to read, its root or the root's directory name (comma-separated: one per broker);"
        " by default the highest epoch, else the CommitLog that reaches furthest, as ``cq.Cluster``."
    ),
}


@dataclasses.dataclass(frozen=True)
class ReadOptions:
    """The data source's options, parsed and checked once on the driver."""

    path: str
    topic: str | None = None
    table: str = "messages"
    group: str | None = None
    sql: str | None = None
    tags: str | None = None
    decisions: bool = False
    pushdown: bool = False
    #: None: DEFAULT_PARTITION_UNITS, or UNITS_ONLY_PARTITION_UNITS when the read decodes no record
    partition_units: int | None = None
    #: None: the planning machine's CPU count (:func:`default_min_partitions`)
    min_partitions: int | None = None
    on_corrupt: str = "fail"
    skipped_log: str | None = None
    layer2: str = "reader"
    message_filter: str | None = None
    on_filter_error: str = "fail"
    #: a group looked up in config/consumerFilter.json: its bornTime and bloom data
    born_time: int = 0
    bloom_bit_pos: tuple[int, ...] | None = None
    bloom_bit_num: int | None = None
    from_committed: bool = False
    #: "uncompressed": the body column decompressed where SYSFLAG says so; "stored": as stored
    body: str = "uncompressed"
    #: seconds after which a task reading an old cut of a store that moved on says so
    stale_after: float = DEFAULT_STALE_AFTER
    #: a read of several stores (docs/reading.md#clusters): ``(broker, root)`` of each, and with a
    #: registered group ``(broker, born_time, bloom_bit_pos, bloom_bit_num)`` of its registration
    #: on each broker; ``path`` then lists the roots (for messages)
    brokers: tuple[tuple[str, str], ...] = ()
    registrations: tuple[tuple[str, int, tuple[int, ...] | None, int | None], ...] = ()
    #: set by :meth:`for_broker`: the broker of the store ``path`` is, for the ``broker`` column
    broker: str | None = None
    #: the tier directory of a store whose broker ran the tiered store (docs/reading.md#tiered-storage)
    tier: str | None = None
    #: ``table=trace``: the trace topic (None: RMQ_SYS_TRACE_TOPIC)
    trace_topic: str | None = None
    #: a store in object storage: ``(name, value)`` of the options ``endpoint`` and ``region`` given
    #: (docs/object-storage.md#spark); never a credential, which each process reads from its environment
    object_options: tuple[tuple[str, str], ...] = ()

    def open_store(self, root: str | None = None, *, listing: tuple | None = None,
                   preloaded: tuple | None = None) -> cq.Store:
        """A fresh :class:`cq.Store` of ``root`` (default ``path``), read with the tier and, for a store in
        object storage, opened from the ``endpoint``/``region`` options (docs/object-storage.md#spark) and,
        with ``listing`` (a plan's, ``cq.ObjectStore.listing()``), read at that listing's cut, taking the
        objects ``preloaded`` (the plan's, ``cq.ObjectStore.carried``) instead of fetching them."""
        objects = dict(self.object_options)
        if listing is not None:
            objects["listing"] = listing
            if preloaded:
                objects["preloaded"] = preloaded
        return cq.Store(self.path if root is None else root, tier=self.tier, object_options=objects or None)

    def for_broker(self, broker: str) -> ReadOptions:
        """These options for one broker of a read of several stores: ``path`` its root, the group's
        bornTime and bloom data its registration on that broker."""
        root = dict(self.brokers)[broker]
        reg = {b: {"born_time": t, "bloom_bit_pos": pos, "bloom_bit_num": num}
               for b, t, pos, num in self.registrations}.get(broker, {})
        return dataclasses.replace(self, path=root, brokers=(), registrations=(), broker=broker, **reg)

    def pack(self, schema: StructType | None, ranges: list[tuple[str, int, int, int]]) -> list[list[tuple]]:
        """``(topic, queue_id, start, end)`` ranges of a read of ``schema`` packed into partitions
        (:func:`~pyspark_udfs._plan.pack_ranges`) of :meth:`partition_size` units each."""
        return pack_ranges(ranges, self.partition_size(schema, sum(e - s for _, _, s, e in ranges)))

    def partition_size(self, schema: StructType | None, units: int) -> int:
        """Units per partition for a read of ``units`` units in all (docs/spark.md#partitions).

        At most the ``partition_units`` option, by default :data:`DEFAULT_PARTITION_UNITS`;
        :data:`GROUP_PARTITION_UNITS` when a group's layer 1 decides which records are decoded
        (most units then cost a bitmap or tag code check); :data:`UNITS_ONLY_PARTITION_UNITS`
        when a read of ``schema`` decodes no CommitLog record (a unit then costs a few
        nanoseconds against a task's fixed cost). And small enough that the read makes
        ``min_partitions`` partitions, though no share below :data:`MIN_SHARE_UNITS`.
        """
        cap = self.partition_units
        if cap is None:
            if self.group is not None and self.message_filter is None:
                cap = GROUP_PARTITION_UNITS
            elif schema is None or self.message_filter or any(
                    f.name in RECORD_COLUMNS or f.name in PROPERTY_COLUMNS for f in schema.fields):
                cap = DEFAULT_PARTITION_UNITS
            else:
                cap = UNITS_ONLY_PARTITION_UNITS
        parallel = self.min_partitions if self.min_partitions is not None else default_min_partitions()
        return share_size(units, cap, parallel, MIN_SHARE_UNITS)

    @property
    def bloom_data(self):
        """The registered group's bloom data (None: generated from the broker's filter)."""
        if self.bloom_bit_pos is None:
            return None
        return bloom.BloomFilterData(self.bloom_bit_pos, self.bloom_bit_num)

    @classmethod
    def parse(cls, options: dict) -> ReadOptions:
        """Parse Spark's string options (each documented in :data:`OPTIONS`); ``ValueError`` naming the
        option on bad input."""
        options = {str(k).lower(): v for k, v in dict(options).items()}
        path = options.get("path")
        if not path and options.get("paths"):  # load([root, ...]): Spark passes a JSON array
            path = json.loads(options["paths"])
        if not path:
            raise ValueError("rocketmq: no store path; use spark.read.format('rocketmq').load('/path/to/store')")
        replica = [r.strip() for r in str(options.get("replica") or "").split(",") if r.strip()] or None
        objects = _object_options(options, path)
        brokers = _broker_roots(path, replica, _tier_option(options), objects)
        if brokers:
            read = cls._parse(options, ", ".join(root for _, root in brokers), brokers, objects)
        else:
            read = cls._parse(options, path if isinstance(path, str) else path[0], (), objects)
        return dataclasses.replace(read, object_options=tuple(sorted(objects.items())))

    @classmethod
    def _parse(cls, options: dict, path: str, brokers: tuple[tuple[str, str], ...],
               objects: dict | None = None) -> ReadOptions:
        if not brokers and is_object_uri(path):
            _check_bucket_store(path, objects or {})
        elif not brokers and not os.path.isdir(path):
            # Under Spark Connect the client's working directory is not the server's (a local
            # server runs Python in a per-session directory): docs/spark-connect.md#limits.
            where = "" if os.path.isabs(path) else (f" (a relative path is resolved in {os.getcwd()!r}, where "
                                                    f"Spark runs this reader; give an absolute path)")
            raise ValueError(f"rocketmq: store path {path!r} is not a directory{where}")
        table = options.get("table", "messages").strip().lower()
        if table not in TABLES:
            raise ValueError(f"rocketmq option 'table': expected one of {', '.join(TABLES)}, got {table!r}")
        if table == TRACE_TABLE or options.get("trace_topic") not in (None, ""):
            return cls._parse_trace(options, path, table, brokers)
        if table in PENDING_TABLES:
            clash = sorted(k for k in ("topic", "group", "sql", "tags", "decisions", "from_committed", "filter",
                                       "pushdown", "layer2") if options.get(k) not in (None, ""))
            if clash:
                raise ValueError(f"rocketmq option table={table!r} reads the broker's pending work of the whole "
                                 f"store: option(s) {', '.join(clash)} do not apply to it")
            return cls(path=_root(path), table=table, tier=_tier_option(options))
        tier = _tier_option(options)
        partition_units = positive_int_option(options, "partition_units")
        min_partitions = positive_int_option(options, "min_partitions")
        stale_after = _seconds_option(options, "stale_after", DEFAULT_STALE_AFTER)
        on_corrupt = str(options.get("on_corrupt", "fail")).strip().lower()
        if on_corrupt not in ON_CORRUPT:
            raise ValueError(f"rocketmq option 'on_corrupt': expected fail or skip, got {options['on_corrupt']!r}")
        skipped_log = options.get("skipped_log") or None
        if skipped_log is not None and on_corrupt != "skip":
            raise ValueError("rocketmq option 'skipped_log' needs on_corrupt=skip (nothing is skipped otherwise)")
        layer2 = str(options.get("layer2", "reader")).strip().lower()
        if layer2 not in LAYER2:
            raise ValueError(f"rocketmq option 'layer2': expected reader or spark, got {options['layer2']!r}")
        body = str(options.get("body", "uncompressed")).strip().lower()
        if body not in BODY:
            raise ValueError(f"rocketmq option 'body': expected one of {', '.join(BODY)}, got {options['body']!r}")
        group = options.get("group") or None
        sql = options.get("sql")
        tags = options.get("tags")
        if sql is not None and tags is not None:
            raise ValueError("rocketmq options 'sql' and 'tags' exclude each other: a group subscribes one way")
        if group is None and (sql is not None or tags is not None):
            raise ValueError("rocketmq options 'sql'/'tags' need 'group' (the consumer group whose filter it is)")
        topic = options.get("topic") or None
        registered = {}
        if group is not None and sql is None and tags is None:
            if brokers:
                sql, tags, registered = _registered_cluster_group(brokers, topic, group, tier, objects)
            else:
                sql, tags, registered = _registered_group(path, topic, group, tier, objects)
        from_committed = _bool_option(options, "from_committed", False)
        if from_committed and (group is None or topic is None):
            raise ValueError("rocketmq option from_committed=true needs 'group' and 'topic' (committed offsets "
                             "are per group and topic)")
        decisions = _bool_option(options, "decisions", False)
        pushdown = _bool_option(options, "pushdown", False)
        if layer2 == "spark" and sql is None:
            raise ValueError("rocketmq option layer2=spark needs 'group' with 'sql' (a SQL92 layer 2 to leave to Spark)")
        if decisions and group is None:
            raise ValueError("rocketmq option 'decisions' needs 'group' with 'sql' or 'tags'")
        if sql is not None:
            try:  # fail now, on the driver, with the selector's position
                selector.compile(sql)
            except selector.SelectorSyntaxError as exc:
                raise ValueError(f"rocketmq option 'sql': {exc} in selector {sql!r}") from exc
        if tags is not None:
            try:
                cq.parse_tag_subscription(tags)
            except ValueError as exc:
                raise ValueError(f"rocketmq option 'tags': {exc} in {tags!r}") from exc
        message_filter = options.get("filter") or None
        on_filter_error = str(options.get("on_filter_error", "fail")).strip().lower()
        if on_filter_error not in ON_FILTER_ERROR:
            raise ValueError(f"rocketmq option 'on_filter_error': expected fail or skip, got "
                             f"{options['on_filter_error']!r}")
        if message_filter is not None:
            if table != "messages" or layer2 != "reader":
                raise ValueError("rocketmq option 'filter' runs on decoded messages after layer 2: it needs "
                                 "table=messages and layer2=reader")
            load_filter(message_filter)  # now, on the driver: a clear error at load() (ValueError naming it)
        return cls(
            path=path if brokers else _root(path),
            brokers=brokers,
            topic=topic,
            table=table,
            group=group,
            sql=sql,
            tags=tags,
            decisions=decisions,
            pushdown=pushdown,
            partition_units=partition_units,
            min_partitions=min_partitions,
            on_corrupt=on_corrupt,
            skipped_log=os.path.abspath(skipped_log) if skipped_log is not None else None,
            layer2=layer2,
            message_filter=message_filter,
            on_filter_error=on_filter_error,
            from_committed=from_committed,
            body=body,
            stale_after=stale_after,
            tier=tier,
            **registered,
        )

    @classmethod
    def _parse_trace(cls, options: dict, path: str, table: str, brokers) -> ReadOptions:
        """``table=trace`` (docs/trace.md#spark): the trace topic of one store or of several (a cluster, each row with
        its broker); ``trace_topic`` alone."""
        if table != TRACE_TABLE:
            raise ValueError(f"rocketmq option 'trace_topic' is for table=trace, not table={table!r}")
        clash = sorted(k for k in ("topic", "group", "sql", "tags", "decisions", "from_committed", "filter",
                                   "pushdown", "layer2", "tier") if options.get(k) not in (None, ""))
        if clash:
            raise ValueError(f"rocketmq option table='trace' reads the stores' trace topic: option(s) "
                             f"{', '.join(clash)} do not apply to it")
        topic = (options.get("trace_topic") or "").strip() or None
        return cls(path=path if brokers else _root(path), table=table, trace_topic=topic, brokers=brokers)

    def schema(self) -> StructType:
        """The Spark schema these options produce."""
        if self.table == TRACE_TABLE:
            return StructType([StructField(n, _PENDING_TYPES[t], True) for n, t in TRACE_COLUMNS])
        if self.table in PENDING_TABLES:
            return StructType([StructField(n, _PENDING_TYPES[t], True) for n, t in PENDING_COLUMNS[self.table]])
        fields = list(_MESSAGE_FIELDS if self.table == "messages" else _CONSUMEQUEUE_FIELDS)
        if self.brokers:
            fields.insert(0, _BROKER_FIELD)
        if self.layer2 == "spark" and self.table != "messages":
            fields.append(_PROPERTIES_FIELD)
        if self.decisions:
            fields += _LAYER1_DECISION_FIELDS if self.layer2 == "spark" else _DECISION_FIELDS
            if self.message_filter is not None:
                fields += _FILTER_DECISION_FIELDS
        return StructType(fields)


def _root(path: str) -> str:
    """A store root as the executors name it: an absolute local path, or a store in object storage's URI."""
    return path if is_object_uri(path) else os.path.abspath(path)


def _object_options(options: dict, path) -> dict[str, str]:
    """The options ``endpoint`` and ``region`` given (docs/object-storage.md#spark); ``ValueError``
    when given for a read with no store in object storage."""
    given = {k: str(options[k]).strip() for k in ("endpoint", "region") if options.get(k) not in (None, "")}
    paths = [path] if isinstance(path, str) else list(path)
    if given and not any(is_object_uri(p) for p in paths):
        raise ValueError(f"rocketmq option(s) {', '.join(sorted(given))}: for a store in object storage "
                         "(an s3:// path, docs/object-storage.md#spark); the path is a local one")
    return given


def _check_bucket_store(uri: str, objects: dict) -> None:
    """Check the store at ``uri`` once, on the driver (one listing of its top level, ``ObjectStore.check``),
    so a missing bucket or prefix or a denied request fails ``load()`` naming the URI
    (docs/object-storage.md#errors), never an empty read later."""
    from cq.readers.objects import ObjectStore  # lazy: pyarrow.fs is loaded for a bucket only

    try:
        ObjectStore.check(uri, **objects)
    except cq.StoreFormatError as exc:
        raise ValueError(f"rocketmq: store path {exc}") from None


def _broker_roots(path: str | list[str], replica: list[str] | None = None,
                  tier: str | None = None, objects: dict | None = None) -> tuple[tuple[str, str], ...]:
    """``(broker, root)`` of each store of a read of several stores (a list, or a glob pattern), named
    as :class:`cq.Cluster` names them (a broker given as several replicas: the one ``replica`` names,
    else the one :class:`cq.Cluster` reads; each store opened with ``tier``, the brokers' shared tier);
    ``()`` for one store root. ``ValueError`` naming a bad root or replica."""
    several = not isinstance(path, str) and len(path) > 1
    if not several and not (isinstance(path, str) and glob.has_magic(path)):
        if replica:
            raise ValueError("rocketmq option 'replica': it picks among several store roots of one broker name; "
                             f"one store root was given ({path if isinstance(path, str) else path[0]})")
        return ()
    try:
        roots = store_roots(path, object_options=objects)
        for root in roots:
            if not is_object_uri(root) and not os.path.isdir(root):
                raise cq.StoreFormatError("not a directory", root)
        cluster = cq.Cluster([_root(r) for r in roots], replica=replica,
                             **({"tier": tier} if tier is not None else {}),
                             **({"object_options": objects} if objects else {}))
    except cq.StoreFormatError as exc:
        raise ValueError(f"rocketmq: store path {exc}") from None
    except KeyError as exc:
        raise ValueError(f"rocketmq option 'replica': {exc.args[0]}") from exc
    # a store in object storage by its URI, never the private copy this process read it through
    brokers = tuple((name, store.uri or store.root) for name, store in cluster.stores.items())
    cluster.close()
    return brokers


def _registered_cluster_group(brokers, topic: str | None, group: str, tier: str | None = None,
                              objects: dict | None = None) -> tuple[str | None, str | None, dict]:
    """:func:`_registered_group` on each broker holding ``topic``: the expression of the first, and
    each broker's own bornTime and bloom data (``registrations``)."""
    found = []
    for name, root in brokers:
        store = cq.Store(root, tier=tier, object_options=objects or None)
        held = topic is None or topic in store.topics()
        store.close()
        if held:
            found.append((name, *_registered_group(root, topic, group, tier, objects)))
    if not found:
        raise ValueError(f"rocketmq option 'topic': no topic {topic!r} in stores "
                         f"{', '.join(r for _, r in brokers)}")
    _, sql, tags, _ = found[0]
    registrations = tuple((name, f.get("born_time", 0), f.get("bloom_bit_pos"), f.get("bloom_bit_num"))
                          for name, _, _, f in found)
    return sql, tags, {"registrations": registrations}


def _tier_option(options: dict) -> str | None:
    """Option ``tier``: an existing directory (docs/reading.md#tiered-storage). Over several stores it is the
    tier the brokers share: each broker's flat files lie under its own name there."""
    tier = options.get("tier") or None
    if tier is None:
        return None
    if not os.path.isdir(tier):
        raise ValueError(f"rocketmq option 'tier': {tier!r} is not a directory")
    return os.path.abspath(tier)


def _registered_group(path: str, topic: str | None, group: str, tier: str | None = None,
                      objects: dict | None = None) -> tuple[str | None, str | None, dict]:
    """``(sql, tags, fields)`` of ``group``'s registration in the store's consumerFilter.json."""
    if topic is None:
        raise ValueError(f"rocketmq option 'group' ({group!r}) without 'sql' or 'tags' needs 'topic': the group's "
                         "registration in config/consumerFilter.json is per topic")
    try:
        store = cq.Store(path, tier=tier, object_options=objects or None)
        try:
            reg = store.registered_filter(topic, group)
        finally:
            store.close()
    except (cq.UnknownGroupError, cq.StoreFormatError) as exc:
        raise ValueError(f"rocketmq option 'group': {exc}") from exc
    if not Layers(registration_filter(reg)).has_layer2:  # not a SQL92 registration
        # the broker keeps no compiled expression for it and lets every message through (warned)
        return None, "*", {}
    fields = {"born_time": reg.born_time}
    if reg.bloom_data is not None:
        fields.update(bloom_bit_pos=tuple(reg.bloom_data.bit_pos), bloom_bit_num=reg.bloom_data.bit_num)
    return reg.expression, None, fields


@dataclasses.dataclass(frozen=True)
class ConsumeQueueSlice(InputPartition):
    """One partition: queue offsets ``[start, end)`` of one ConsumeQueue (a file, or part of one).

    With ``on_corrupt=skip``, a queue that could not be opened while planning
    is one slice carrying the error (``skip_reason``, ``skip_path``,
    ``skip_offset``); reading it reads nothing and reports the queue skipped.
    """

    topic: str
    queue_id: int
    start: int
    end: int
    skip_reason: str | None = None
    skip_path: str | None = None
    skip_offset: int | None = None
    #: The cut the query planned (docs/live.md): the CommitLog's first byte and recovered end when the
    #: queue ends were read; every executor reads this cut whatever its Store has cached. None: the
    #: executor's own view (a slice made by hand).
    commit_log_min: int | None = None
    commit_log_end: int | None = None
    #: When the cut was taken (seconds since the epoch), for the warning a task reading an old
    #: cut logs (docs/spark.md#reused-dataframes); None for a stream's slices (re-planned per batch).
    planned_at: float | None = None
    #: The broker whose store holds the queue, in a read of several stores (docs/reading.md#clusters).
    broker: str | None = None
    #: The range is one the broker serves from its tier: read from the tier's flat files
    #: (docs/reading.md#tiered-storage).
    tier: bool = False
    #: A store in object storage: the listing the plan's cut was taken from (``cq.ObjectStore.listing()``:
    #: keys, sizes and times, never a credential), which the task reads instead of listing the bucket again
    #: (docs/object-storage.md#spark); None when the store has more than :data:`LISTING_IN_PLAN` objects
    #: (the task lists it) or is local. One tuple shared by the slices of a plan (pickled once per task);
    #: not compared (the cut and ``planned_at`` say which plan).
    listing: tuple | None = dataclasses.field(default=None, repr=False, compare=False)
    #: A store in object storage whose listing the slice carries: ``(key, bytes)`` of the objects the plan
    #: fetched that the task would fetch again (``cq.ObjectStore.carried``): the small objects a Store copies
    #: when it opens (within :data:`OBJECT_BYTES_IN_PLAN`) and the objects of the slice's ConsumeQueue (within
    #: :data:`QUEUE_BYTES_IN_PLAN`), which the task's Store takes instead of fetching them
    #: (``cq.ObjectStore.preload``, docs/object-storage.md#spark). Store contents, never a credential; the
    #: slices of a queue share one tuple, and its pairs are shared by every queue's (pickled once per task).
    carried: tuple | None = dataclasses.field(default=None, repr=False, compare=False)
    #: A store in object storage whose listing the slice carries: the queue's ``(min_offset, max_offset,
    #: last_slot)`` in the plan's cut (``last_slot``: its last unit's ``tags_code`` slot, None for an empty
    #: queue), within which the task reads the queue by ranges, fetching its slices' units and not the
    #: queue's objects (``cq.Store.take_queue_bounds``, docs/object-storage.md#spark); None: the task finds
    #: the bounds from the queue's objects (a local store, a queue the plan saw undispatched units of).
    queue_bounds: tuple[int, int, int | None] | None = None


#: A store in object storage of at most this many objects travels with its plan's listing (one LIST page):
#: each task then reads the plan's cut without a listing of its own (docs/object-storage.md#spark).
LISTING_IN_PLAN = 1000
#: With its listing, a plan carries the small objects its Store copied when it opened (``config/*.json``,
#: ``checkpoint``, ...) while their bytes total at most this many; objects past it are fetched by the tasks
#: (docs/object-storage.md#spark).
OBJECT_BYTES_IN_PLAN = 1 << 20
#: With its listing, each slice carries its queue's ConsumeQueue objects as the plan fetched them (the
#: last one's data only) while they total at most this many bytes (52,428 units); objects past it are
#: fetched by the task (docs/object-storage.md#spark).
QUEUE_BYTES_IN_PLAN = 1 << 20


@dataclasses.dataclass(frozen=True)
class SlicesPartition(InputPartition):
    """One partition (Spark task): queue ranges read one after the other (docs/spark.md#partitions)."""

    slices: tuple[ConsumeQueueSlice, ...]
