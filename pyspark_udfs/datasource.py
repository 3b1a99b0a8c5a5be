"""The ``rocketmq`` Spark data source: read a broker store, with the broker's filter inside the reader.

>>> pyspark_udfs.register(spark)                                  # doctest: +SKIP
>>> df = (spark.read.format("rocketmq")
...       .option("topic", "TopicTest")
...       .option("group", "GID_SQL_A").option("sql", "a > 5")
...       .load("/data/rocketmq/store"))                          # doctest: +SKIP

Options (all strings, parsed once when the reader is made): each is documented once, in
:data:`pyspark_udfs._source.OPTIONS`, beside :meth:`~pyspark_udfs._source.ReadOptions.parse`, which reads
them (docs/spark.md#data-source-options lists them).

Filters on ``queue_id``, ``tags_code`` and ``tags`` (``=``, ``IN``, and for
``queue_id`` comparisons) are pushed into the reader when
``spark.sql.python.filterPushdown.enabled`` is true: ``queue_id`` prunes
partitions, ``tags_code`` and ``tags`` select units by their tag code before
any CommitLog record is read (``tags`` is then re-checked exactly by Spark). On the
messages table, ``store_timestamp`` ranges are planned by the broker's search by store
time and ``keys`` / ``uniq_key`` equality through the IndexFiles, and the reader applies
them exactly (docs/spark.md#pushdown).
"""
from __future__ import annotations

import dataclasses
import glob
import json
import os
import time
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np
from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    EqualTo,
    Filter,
    GreaterThan,
    GreaterThanOrEqual,
    In,
    InputPartition,
    LessThan,
    LessThanOrEqual,
)
from pyspark.sql.types import (
    StructType,
)

import cq
from cq.analyses.by_time import QueueSearch, time_range
from cq.analyses.search import find
from cq.readers.objects import is_object_uri

from ._plan import (
    SLICE_UNITS,
    TIER_RANGE,
    align_to_batches,
    batch_start,
    file_ranges,
    pack_by_log,
)
from ._source import (
    BODY,
    LAYER2,
    LISTING_IN_PLAN,
    NOT_STREAMED,
    OBJECT_BYTES_IN_PLAN,
    ON_CORRUPT,
    ON_FILTER_ERROR,
    PENDING_TABLES,
    QUEUE_BYTES_IN_PLAN,
    TABLES,
    TRACE_TABLE,
    ConsumeQueueSlice,
    ReadOptions,
    SlicesPartition,
    TagsCodes,
    batch_cq_layer2_error,
    compaction_layer2_error,
)

__all__ = ["BODY", "LAYER2", "ON_CORRUPT", "ON_FILTER_ERROR", "TABLES", "ConsumeQueueSlice", "ReadOptions", "RocketMQDataSource", "RocketMQPushdownReader",
           "RocketMQReader", "SlicesPartition", "skipped_ranges"]

class RocketMQDataSource(DataSource):
    """``spark.read.format("rocketmq").load(store_root)``: a RocketMQ broker store as a DataFrame."""

    @classmethod
    def name(cls) -> str:
        return "rocketmq"

    def __init__(self, options: dict[str, str]) -> None:
        super().__init__(options)
        self.read_options = ReadOptions.parse(options)

    def schema(self) -> StructType:
        return self.read_options.schema()

    def reader(self, schema: StructType) -> RocketMQReader:
        # pushdown=false (default) gives a reader without pushFilters, whose planned
        # read holds no query's filters: Spark keeps the read planned with pushed
        # filters on the DataFrame's source and reuses it for a later query that
        # pushes none (docs/spark.md#pushdown). Spark refuses a reader that
        # implements pushFilters while spark.sql.python.filterPushdown.enabled is false.
        check_schema(self.read_options, schema)
        if self.read_options.table == TRACE_TABLE:
            return TraceReader(self.read_options, schema)
        if self.read_options.table in PENDING_TABLES:
            return PendingReader(self.read_options, schema)
        if self.read_options.pushdown:
            return RocketMQPushdownReader(self.read_options, schema)
        return RocketMQReader(self.read_options, schema)

    def streamReader(self, schema: StructType):
        """``spark.readStream.format("rocketmq")``: see :mod:`pyspark_udfs.streaming`."""
        if self.read_options.table in (*PENDING_TABLES, TRACE_TABLE):
            raise ValueError(f"rocketmq option table={self.read_options.table!r} is a batch table (the broker's "
                             "pending work at one moment), not a stream")
        bucket = [root for _, root in self.read_options.brokers or ((None, self.read_options.path),)
                  if is_object_uri(root)]
        if bucket:  # docs/object-storage.md#a-snapshot
            raise ValueError(f"rocketmq: store path {bucket[0]}: {NOT_STREAMED}")
        from pyspark_udfs.streaming import (  # lazy: batch reads never load it
            RocketMQStreamReader,
            StreamOptions,
        )

        return RocketMQStreamReader(StreamOptions.parse(self.options, self.read_options), schema)


class _StoreTableReader(DataSourceReader):
    """A table read whole in one task from one store: :meth:`rows` gives its rows as dicts."""

    def __init__(self, options: ReadOptions, schema: StructType) -> None:
        self.options = options
        self.names = [f.name for f in schema.fields]

    def partitions(self) -> Sequence[InputPartition]:
        return [InputPartition(0)]

    def rows(self, store: cq.Store) -> list[dict]:
        raise NotImplementedError

    def open(self) -> cq.Store | cq.Cluster:
        """The store read (one store; :class:`TraceReader`: the cluster of a read of several)."""
        return self.options.open_store()

    def read(self, partition: InputPartition):
        store = self.open()
        try:
            rows = self.rows(store)
        finally:
            store.close()
        for r in rows:
            yield tuple(r[n] for n in self.names)


class PendingReader(_StoreTableReader):
    """``table`` = ``scheduled``, ``transactions`` or ``dead_letters``: the rows of
    :func:`cq.analyses.pending.pending` (the same ``rmqfilter pending`` prints), read in one task."""

    def rows(self, store: cq.Store) -> list[dict]:
        from cq.analyses.pending import pending  # lazy: only pending reads need it

        return pending(store, self.options.table)


class TraceReader(_StoreTableReader):
    """``table`` = ``trace``: the rows of :func:`cq.analyses.trace.trace` (those ``rmqfilter trace`` prints),
    read in one task; a record that does not read fails the read naming its place (docs/trace.md#spark). Over
    several stores, the cluster's (each row with its broker, as ``rmqfilter trace`` over a cluster prints)."""

    def open(self) -> cq.Store | cq.Cluster:
        if self.options.brokers:
            return cq.Cluster([root for _name, root in self.options.brokers])
        return super().open()

    def rows(self, store: cq.Store) -> list[dict]:
        from cq.analyses.trace import trace  # lazy: only trace reads need it

        result = trace(store, topic=self.options.trace_topic)
        if result.errors:
            raise ValueError(f"rocketmq table=trace: {len(result.errors)} trace record(s) do not read; the first: "
                             f"{result.errors[0]} (rmqfilter trace lists them all)")
        return [r.to_dict() for r in result.rows]


def check_schema(options: ReadOptions, schema: StructType) -> None:
    """Check a (user-specified) schema against the table's columns: any subset, any order.

    Raises
    ------
    ValueError
        Naming the first unknown column or the column of the wrong type, and
        listing the table's columns with their types.
    """
    table = {f.name: f.dataType for f in options.schema().fields}
    listing = ", ".join(f"{name} {t.simpleString()}" for name, t in table.items())
    seen = set()
    for f in schema.fields:
        if f.name not in table:
            raise ValueError(f"rocketmq: no column {f.name!r} in the {options.table} table; "
                             f"its columns are: {listing}")
        if f.dataType != table[f.name]:
            raise ValueError(f"rocketmq: column {f.name!r} is {table[f.name].simpleString()}, not "
                             f"{f.dataType.simpleString()}; the {options.table} table's columns are: {listing}")
        if f.name in seen:
            raise ValueError(f"rocketmq: column {f.name!r} appears twice in the schema")
        seen.add(f.name)


_QUEUE_ID_TESTS = {
    "EqualTo": lambda q, v: q == v,
    "In": lambda q, v: q in v,
    "GreaterThan": lambda q, v: q > v,
    "GreaterThanOrEqual": lambda q, v: q >= v,
    "LessThan": lambda q, v: q < v,
    "LessThanOrEqual": lambda q, v: q <= v,
}


_LOWER_BOUNDS = ("GreaterThan", "GreaterThanOrEqual")
_UPPER_BOUNDS = ("LessThan", "LessThanOrEqual")


def _time_range(store: cq.Store, queue, topic: str, queue_id: int, lo: int, hi: int,
                window: tuple[int | None, int | None]) -> tuple[int, int]:
    """``[lo, hi)`` narrowed to the units whose records were stored in ``window``, by the broker's search by
    store time (:func:`cq.analyses.by_time.time_range`, docs/find.md#by-time)."""
    begin, end = window
    if begin is not None and end is not None and begin > end:
        return lo, lo
    log = store.commit_log
    search = QueueSearch(topic, queue_id, lo, hi)
    time_range(queue, log, search, begin, end, log.min_offset, log.refresh())
    return search.first, max(search.first, search.end)


def _runs(offsets: Sequence[int], lo: int, hi: int) -> list[tuple[int, int]]:
    """The sorted ``offsets`` inside ``[lo, hi)`` as runs ``[start, end)`` of consecutive offsets."""
    out: list[list[int]] = []
    for o in offsets:
        if lo <= o < hi:
            if out and out[-1][1] == o:
                out[-1][1] = o + 1
            else:
                out.append([o, o + 1])
    return [(a, b) for a, b in out]


def _log_offsets(store: cq.Store):
    """``range -> CommitLog offsets of its units`` over ``store``'s queues (:func:`pack_by_log`), each queue
    opened for the one range (from the private copy the plan fetched: no request)."""
    def offsets_of(rng: tuple) -> np.ndarray:
        (_broker, topic), queue_id, start, end = rng
        with store.queue_readers(topic, queue_id, ext=False) as (queue, _ext):
            return queue.read_columns(start, end - start, ("commit_log_offset",))["commit_log_offset"]
    return offsets_of


def _attribute(f: Filter) -> str | None:
    attr = getattr(f, "attribute", None)
    return attr[0] if attr is not None and len(attr) == 1 else None


class RocketMQReader(DataSourceReader):
    """Plans queue ranges packed into partitions (docs/spark.md#partitions) and reads them as Arrow record batches."""

    def __init__(self, options: ReadOptions, schema: StructType) -> None:
        self.options = options
        self.schema = schema
        # Pushed-down conditions, ANDed: queue id predicates, allowed tag codes.
        self.queue_id_filters: list[tuple[str, Any]] = []
        self.tags_code_sets: list[frozenset[int]] = []
        # Pushed-down row conditions the reader applies exactly to what it read (docs/spark.md#pushdown):
        # (column, operator, value) on store_timestamp (planned by the search by store time), keys and
        # uniq_key (planned through the IndexFiles).
        self.row_conditions: list[tuple[str, str, Any]] = []

    def _time_window(self) -> tuple[int | None, int | None] | None:
        """``[begin, end]`` of the pushed store_timestamp conditions (None: none pushed)."""
        conds = [(op, v) for c, op, v in self.row_conditions if c == "store_timestamp"]
        if not conds:
            return None
        begin = max((v + (op == "GreaterThan") for op, v in conds if op in _LOWER_BOUNDS), default=None)
        end = min((v - (op == "LessThan") for op, v in conds if op in _UPPER_BOUNDS), default=None)
        return begin, end

    def _index_lookup(self) -> tuple[str, frozenset[str]] | None:
        """What an IndexFile lookup asks for (:func:`cq.analyses.search.find`'s argument ``key`` or ``uniq_key``
        and its values), from the pushed ``keys`` or ``uniq_key`` condition with the fewest values, or None when
        none can be looked up. A ``keys`` value asks for its first space-separated key (a value whose first key
        is empty cannot be looked up); a ``uniq_key`` value for itself, an empty one for nothing: a property is
        never empty (docs/formats.md#properties), so no row holds it."""
        lookups = []
        for column, _op, values in self.row_conditions:
            if column == "keys":
                firsts = frozenset(v.split(" ")[0] for v in values)
                if "" not in firsts:
                    lookups.append(("key", firsts))
            elif column == "uniq_key":
                lookups.append(("uniq_key", frozenset(v for v in values if v)))
        # a tie goes to uniq_key: a unique key names one message, a key often many
        return min(lookups, key=lambda lookup: (len(lookup[1]), lookup[0] == "key"), default=None)

    def _queue_id_allowed(self, queue_id: int) -> bool:
        return all(_QUEUE_ID_TESTS[op](queue_id, value) for op, value in self.queue_id_filters)

    # --------------------------------------------------------------- planning
    def partitions(self) -> Sequence[SlicesPartition]:
        """The queue ranges to read, packed into partitions of equal shares (docs/spark.md#partitions).

        Each range lies in one ConsumeQueue file and holds at most :data:`pyspark_udfs._plan.SLICE_UNITS`
        units; :meth:`ReadOptions.partition_size` says how many units a partition takes.
        """
        opts = self.options
        planned_at = time.time()
        # one store, or each broker of a read of several stores in turn (docs/reading.md#clusters):
        # each broker's queues planned from its own files, each with its own cut
        brokers = opts.brokers or ((None, opts.path),)
        ranges: list[tuple] = []
        unreadable: list[ConsumeQueueSlice] = []  # queues that did not open (on_corrupt=skip)
        cuts: dict[str | None, dict] = {}
        batch_starts: dict[tuple, np.ndarray] = {}  # ((broker, topic), queue id) -> a BatchCQ queue's batch starts
        carried: dict[tuple, tuple] = {}  # (broker, topic, queue id) -> the objects its slices carry (a bucket's)
        bounds: dict[tuple, tuple] = {}  # (broker, topic, queue id) -> its [min, max) offsets, last slot (a bucket's)
        by_log: list[list[tuple]] = []  # one store in a bucket: its ranges packed by CommitLog stretch
        held = False
        for broker, root in brokers:
            store = opts.open_store(root)
            try:
                if opts.topic is not None and opts.topic not in {*store.topics(), *store.layout.batch_cq_topics}:
                    if opts.brokers:
                        continue  # a topic need not be on every broker
                    raise ValueError(f"rocketmq option 'topic': no topic {opts.topic!r} in store {opts.path!r}")
                held = True
                cuts[broker] = self._plan_store(store, broker, ranges, unreadable, planned_at, batch_starts, carried,
                                                None if opts.brokers else by_log, bounds)
            finally:
                store.close()
        if not held:
            raise ValueError(f"rocketmq option 'topic': no topic {opts.topic!r} in any of the stores {opts.path}")
        # a range's key is (broker, topic): packing sees it as one opaque name; a BatchCQ queue's
        # ranges then start at batch starts, so each batch is read whole, once (docs/reading.md#batchcq)
        packed = by_log or align_to_batches(opts.pack(self.schema, ranges), batch_starts)
        # a range the broker serves from its tier is keyed (broker, topic, TIER_RANGE) (docs/reading.md#tiered-storage)
        parts = [[ConsumeQueueSlice(key[1], q, s, e, broker=key[0], tier=len(key) > 2,
                                    carried=carried.get((key[0], key[1], q)), queue_bounds=bounds.get((key[0], key[1], q)),
                                    **cuts[key[0]])
                  for key, q, s, e in group] for group in packed]
        if unreadable:  # read first, by the first task: each reports its queue skipped
            parts[:1] = [[*(dataclasses.replace(s, **cuts[s.broker]) for s in unreadable), *(parts[0] if parts else [])]]
        # Spark needs at least one partition; an empty one reads nothing.
        return [SlicesPartition(tuple(p)) for p in parts] or [SlicesPartition(())]

    def _plan_store(self, store: cq.Store, broker: str | None, ranges: list, unreadable: list,
                    planned_at: float, batch_starts: dict, carried: dict, by_log: list | None = None,
                    bounds: dict | None = None) -> dict:
        """Add one store's queue ranges (keyed ``(broker, topic)``) and unreadable queues, the batch
        starts of its BatchCQ queues and, for a store in object storage whose listing the plan carries, what
        its slices of each queue carry of the plan's fetches (``carried[broker, topic, queue id]``,
        docs/object-storage.md#spark); returns its cut. ``by_log`` (a read of this store alone): for a store in
        object storage whose ranges are all ConsumeQueue ranges, filled with them packed by CommitLog
        stretch (:func:`pyspark_udfs._plan.pack_by_log`), the partitions to read. ``bounds``: for a store in
        object storage whose listing the plan carries, each plain ConsumeQueue's ``[min, max)`` offsets and its
        last unit's ``tags_code`` slot (``bounds[broker, topic, queue id]``), which its tasks read it by ranges within
        (``cq.Store.take_queue_bounds``, docs/object-storage.md#spark)."""
        opts = self.options
        first_range = len(ranges)
        plain = True  # every range is a ConsumeQueue's (no BatchCQ, compaction or tier range)
        # A fresh Store: the cut is the store as it is now. Queue ends are read first, the
        # CommitLog end last, so every unit planned has its record inside the cut (docs/live.md).
        topics = [opts.topic] if opts.topic is not None else list(store.topics())
        window, keyed = self._time_window(), self._key_positions(store, topics)
        for topic in topics:
            committed = store.committed_offsets(opts.group, topic) if opts.from_committed else None
            queue_ids = [q for q in store.queue_ids(topic)
                         if self._queue_id_allowed(q) and (committed is None or q in committed)]
            # a store in a bucket: the queues' objects and the recovery walk's heads at once
            # (docs/object-storage.md#spark); nothing for a local store
            store.prefetch(topic, queue_ids)
            for queue_id in queue_ids:
                try:
                    # one queue's files open at a time: thousands of queues fit a common descriptor limit
                    with store.queue_readers(topic, queue_id, ext=False) as (queue, _ext):
                        lo, hi = queue.min_offset, queue.max_offset
                        if committed is not None:  # the group's backlog: from its committed offset on
                            lo = min(max(lo, committed[queue_id]), hi)
                        if isinstance(queue, cq.CompactionConsumeQueue) and opts.layer2 == "spark":
                            raise compaction_layer2_error(topic)
                        if isinstance(queue, cq.BatchConsumeQueue):
                            if opts.layer2 == "spark" and opts.table == "messages":
                                raise batch_cq_layer2_error(topic)
                            # a pull inside a batch gets the whole batch: the read starts at its start
                            starts = queue.batch_starts()
                            batch_starts[(broker, topic), queue_id] = starts
                            lo = batch_start(starts, lo)
                        elif store.tier is not None:  # ranges below the local minimum: the tier's
                            lo = self._plan_tier(store, broker, topic, queue_id, queue.min_offset, lo, hi,
                                                 committed is not None, ranges)
                        elif type(queue) is cq.ConsumeQueue:  # docs/spark.md#pushdown: narrowed by time and keys
                            if window is not None:
                                lo, hi = _time_range(store, queue, topic, queue_id, lo, hi, window)
                            if keyed is not None:
                                ranges += [((broker, t), q, s2, e2)
                                           for s, e in _runs(keyed.get((topic, queue_id), ()), lo, hi)
                                           for t, q, s2, e2 in file_ranges(queue, topic, queue_id, s, e)]
                                continue
                        plain = plain and type(queue) is cq.ConsumeQueue and store.tier is None
                        if (bounds is not None and store.source is not None and type(queue) is cq.ConsumeQueue
                                and store.tier is None and not queue.undispatched_count):
                            last = queue.unit(queue.max_offset - 1)[2] if len(queue) else None
                            bounds[broker, topic, queue_id] = (queue.min_offset, queue.max_offset, last)
                        ranges += [((broker, t), q, s, e) for t, q, s, e in file_ranges(queue, topic, queue_id, lo, hi)]
                except cq.StoreFormatError as exc:
                    if opts.on_corrupt != "skip":
                        raise
                    unreadable.append(ConsumeQueueSlice(topic, queue_id, 0, 0, exc.reason, exc.path, exc.offset,
                                                        broker=broker))
                    continue
        # The cut travels in every slice, so an executor that decodes no record reads no
        # CommitLog byte, and every executor reads the same cut (docs/live.md).
        log = store.commit_log
        end = log.refresh()  # the CommitLog end read after every queue's end (it opened with the first queue)
        cut = {"commit_log_min": log.min_offset, "commit_log_end": end, "planned_at": planned_at}
        if by_log is not None and store.source is not None and plain and not unreadable:
            mine = ranges[first_range:]
            units = sum(e - s for _, _, s, e in mine)
            by_log += pack_by_log(mine, opts.partition_size(self.schema, units), _log_offsets(store),
                                  (log.min_offset, end))
        listing = store.source.listing() if store.source is not None else ()
        if 0 < len(listing) <= LISTING_IN_PLAN:  # the tasks read this listing's cut (docs/object-storage.md#spark)
            cut["listing"] = listing
            # and what this plan fetched that they would fetch again: the small objects, the queues' heads
            small = store.source.carried(store.root, None, OBJECT_BYTES_IN_PLAN)
            for key, q, _s, _e in ranges[first_range:]:
                if (broker, key[1], q) not in carried:
                    rel = f"{cq.format.CONSUME_QUEUE_DIR}/{key[1]}/{int(q)}"
                    keys = [k for _, k in store.source.list_dir_files(rel)]
                    carried[broker, key[1], q] = (*small, *store.source.carried(store.root, keys, QUEUE_BYTES_IN_PLAN))
        elif bounds:  # the tasks list the store again: its queues' bounds are their own to find
            for k in [k for k in bounds if k[0] == broker]:
                del bounds[k]
        return cut

    def _key_positions(self, store: cq.Store, topics: list[str]) -> dict[tuple[str, int], list[int]] | None:
        """``(topic, queue id) -> queue offsets`` of the records holding a pushed key or unique key
        (:meth:`_index_lookup`), found as ``find --key`` / ``--uniq-key`` finds them (the IndexFiles, a scan
        where no index covers; docs/find.md#keys); None: nothing pushed can be looked up."""
        lookup = self._index_lookup()
        if lookup is None:
            return None
        argument, values = lookup
        found: dict[tuple[str, int], set[int]] = {}
        for topic in topics:
            for value in sorted(values):
                for r in find(store, topic=topic, **{argument: value}).rows:
                    found.setdefault((r.topic, r.queue_id), set()).add(r.queue_offset)
        return {k: sorted(v) for k, v in found.items()}

    def _plan_tier(self, store: cq.Store, broker, topic: str, queue_id: int, local_min: int, lo: int, hi: int,
                   from_committed: bool, ranges: list) -> int:
        """Add the ranges of a queue the broker serves from its tier (:meth:`cq.Store.tier_served`), checked as
        ``Store.consume`` checks a read crossing into the local range; returns where the local ranges start."""
        tier = store.tier_queue(topic, queue_id)
        if tier is None:
            return lo
        if not from_committed:  # the queue's minimum is the broker's: the smaller of the local and the tier's
            lo = min(lo, tier.min_offset)
        opts = self.options
        flt = None if opts.group is None else store.make_filter(
            topic, opts.group, sql=opts.sql, tags=opts.tags, born_time=opts.born_time, bloom_data=opts.bloom_data)
        local = lo
        for a, b, from_tier in store.tier_runs(topic, queue_id, store.tier_served(topic, queue_id, local_min), lo, hi,
                                               flt=flt):
            if from_tier:
                ranges += [((broker, topic, TIER_RANGE), queue_id, s, min(b, s + SLICE_UNITS))
                           for s in range(a, b, SLICE_UNITS)]
                local = b
        return local

    # ---------------------------------------------------------------- reading
    def read(self, partition: SlicesPartition):
        """Yield ``pyarrow.RecordBatch``es of the partition's rows, range by range (heavy imports happen here)."""
        # lazy: the heavy imports (pyarrow, the store readers) run on the executor, as Spark's own sources do
        from pyspark_udfs import _reader

        batches = _reader.read_partition(self.options, self.schema, partition, self.tags_code_sets)
        if not self.row_conditions:
            yield from batches
            return
        import pyarrow as pa  # lazy: as above
        import pyarrow.compute as pc  # lazy: as above

        compare = {"GreaterThan": pc.greater, "GreaterThanOrEqual": pc.greater_equal, "LessThan": pc.less,
                   "LessThanOrEqual": pc.less_equal}
        for batch in batches:  # the pushed conditions, exactly: Spark no longer checks them
            mask = None
            for column, op, value in self.row_conditions:
                col = batch.column(batch.schema.get_field_index(column))
                m = pc.is_in(col, value_set=pa.array(sorted(value), pa.string())) if op == "In" \
                    else compare[op](col, value)
                mask = m if mask is None else pc.and_(mask, m)
            yield batch.filter(mask)  # a NULL (a record not read) is dropped, as Spark's filter drops it


def skipped_ranges(skipped_log: str | os.PathLike) -> list[dict]:
    """The ranges an ``on_corrupt=skip`` read wrote to its ``skipped_log`` directory.

    Parameters
    ----------
    skipped_log : str or path
        The directory given as the ``skipped_log`` option (missing: nothing was skipped).

    Returns
    -------
    list of dict
        Sorted by topic, queue and start offset. Keys: ``topic``, ``queue_id``,
        ``start``, ``end`` (queue offsets ``[start, end)``; ``end`` None when
        the whole queue could not be opened), ``units`` (None when unknown),
        ``path`` and ``offset`` (the file and byte offset of the error) and
        ``reason``.
    """
    ranges = []
    for name in sorted(glob.glob(os.path.join(os.fspath(skipped_log), "*.jsonl"))):
        with open(name, encoding="utf-8") as f:
            ranges.extend(json.loads(line) for line in f if line.strip())
    return sorted(ranges, key=lambda r: (r["topic"], r["queue_id"], r["start"]))


class RocketMQPushdownReader(RocketMQReader):
    """:class:`RocketMQReader` that also takes simple filters (option ``pushdown=true``).

    Needs ``spark.sql.python.filterPushdown.enabled``. Each planning gets a fresh
    reader, but Spark (4.3) stores the read planned after ``pushFilters``
    on the DataFrame's source and reuses it, pushed filters included, for a later
    query on that DataFrame whose filters it cannot hand to Python (none at all,
    as in ``df.count()``); see docs/spark.md#pushdown.
    """

    def pushFilters(self, filters: list[Filter]) -> Iterator[Filter]:
        """Take filters on ``queue_id``, ``tags_code`` and ``tags``, and on the messages table ``store_timestamp``
        ranges and ``keys`` / ``uniq_key`` equality (docs/spark.md#pushdown); hand the rest back to Spark."""
        for f in filters:
            name = _attribute(f)
            if name == "queue_id" and isinstance(f, (EqualTo, In, GreaterThan, GreaterThanOrEqual,
                                                     LessThan, LessThanOrEqual)):
                self.queue_id_filters.append((type(f).__name__, f.value))
                continue
            if name == "tags_code" and isinstance(f, (EqualTo, In)):
                values = f.value if isinstance(f, In) else (f.value,)
                self.tags_code_sets.append(frozenset(int(v) for v in values if v is not None))
                continue
            if name == "store_timestamp" and self.options.table == "messages" and isinstance(
                    f, (EqualTo, GreaterThan, GreaterThanOrEqual, LessThan, LessThanOrEqual)) \
                    and isinstance(f.value, int) and not isinstance(f.value, bool):
                if isinstance(f, EqualTo):
                    self.row_conditions += [("store_timestamp", "GreaterThanOrEqual", f.value),
                                            ("store_timestamp", "LessThanOrEqual", f.value)]
                else:
                    self.row_conditions.append(("store_timestamp", type(f).__name__, f.value))
                continue
            if name in ("keys", "uniq_key") and self.options.table == "messages" and isinstance(f, (EqualTo, In)):
                values = f.value if isinstance(f, In) else (f.value,)
                if all(isinstance(v, str) for v in values):
                    self.row_conditions.append((name, "In", frozenset(values)))
                    continue
            if name == "tags" and isinstance(f, (EqualTo, In)):
                # Tag codes select candidate units (hash collisions included);
                # Spark still checks the tag string exactly.
                values = f.value if isinstance(f, In) else (f.value,)
                self.tags_code_sets.append(
                    TagsCodes(int(cq.tags_code(v)) for v in values if v is not None and v != ""))
            yield f
