"""Executor side of the ``rocketmq`` data source: one ConsumeQueue slice -> Arrow record batches.

Imported only inside ``RocketMQReader.read``, so the driver never loads it and
a Python worker loads it once. Everything the broker decides (ext address
resolution, the two filter layers, record decoding) is done by :mod:`cq`; this
module only moves its results into Arrow columns.

The slice is read in batches sized by bytes (:func:`batch_bounds`; docs/data-path.md):
ext units by ``ConsumeQueueExt.read_batch`` and records by the data path's decoder,
``CommitLog.decode_columns``, asked only for the schema's CommitLog columns, whose
Arrow buffers become the batch's columns without a Python object per row (bodies
decompressed in the same call unless the option ``body`` is ``stored``). With a
group, the broker's path is :func:`cq.store.decide.decide_units`' (what ``Store.consume`` runs):
layer 1 in array operations, layer 2 over the decoded properties map
(``SqlFilter.is_matched_by_commit_log_columns``) and the client's tag re-check over
the decoded tags (``TagFilter.is_matched_by_client_columns``); only a filter that
decides row by row (``RetrySqlFilter``) works on per-record property dicts. With
``layer2="spark"`` the reader stops after layer 1 and hands the properties of the
records it would read to Spark, for a native expression.

Corrupt input (``cq.StoreFormatError``) fails the task with the file and byte
offset in the message (``on_corrupt="fail"``, the default), or, with
``on_corrupt="skip"``, is skipped where a reader can resume and reported
(:class:`Skips`): a CommitLog record or ConsumeQueueExt unit that cannot be
decoded drops its unit only; a ConsumeQueue or ConsumeQueueExt file that
cannot be opened drops the slice's whole range.
"""
from __future__ import annotations

import datetime
import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Iterable, Iterator

import numpy as np
import pyarrow as pa
from pyspark.sql.pandas.types import to_arrow_schema

import cq
from cq import format as fmt
from cq.errors import StoreFormatError
from cq.filter.custom import (
    PROPERTY_COLUMNS,
)
from cq.filter.layers import Layers, TagFilter
from cq.kernels import gather_spans, properties_columns, split_records
from cq.readers.batchcq import BatchConsumeQueue, expand_batch
from cq.readers.columns import MessageColumns
from cq.readers.compaction import CompactionConsumeQueue
from cq.readers.objects import is_object_uri
from cq.readers.skipping import decode_skipping
from cq.store.cache import DEFAULT_MAX_STORES
from cq.store.decide import (
    in_range,
)
from pyspark_udfs._reader_columns import (
    record_columns,
    schema_batch,
    topic_column,
    unit_columns,
    wanted_columns,
)
from pyspark_udfs._reader_filter import apply_message_filter
from pyspark_udfs._reader_group import _cut, _GroupFilter, _in_commit_log
from pyspark_udfs._reader_skips import Skips
from pyspark_udfs._source import (
    RECORD_COLUMNS,
    TagsCodes,
    batch_cq_layer2_error,
    compaction_layer2_error,
)
from rmqfilter_arrow import binary_array

# Opened stores, per worker process: a worker reads many slices of a few stores. Each use
# checks the Store still reads the store at its path, and a slice carries the cut its query
# planned, which _store() brings the cached readers up to (docs/live.md#cached-readers).
_STORES = cq.StoreCache()


def _store(options, part=None) -> cq.Store:
    """The worker's Store of ``options.path`` (read with ``options.tier``, docs/reading.md#tiered-storage; a store
    in object storage opened by this worker from the options ``endpoint`` and ``region``, its credentials
    from this worker's environment, docs/object-storage.md#spark), checked current and caught up with the
    cut ``part`` was planned in."""
    if is_object_uri(options.path):
        return _bucket_store(options, part)
    store = _STORES.get(options.path, tier=options.tier)
    if part is not None and part.commit_log_end is not None:
        store.follow(part.topic, part.queue_id, part.end, part.commit_log_end)
    return store


# Stores in object storage, per worker process, by URI and the time of the plan that reads them: a
# query's tasks share the listing one worker took for it, and a later query (a new plan) lists the
# bucket again, so no listing outlives the query it was taken for (docs/object-storage.md#spark).
_BUCKETS: OrderedDict[tuple, cq.Store] = OrderedDict()
_BUCKETS_LOCK = threading.Lock()


def _bucket_store(options, part=None) -> cq.Store:
    """The worker's Store of the store in object storage ``options.path`` for the plan ``part`` was cut in
    (its ``planned_at``): opened on first use from the options ``endpoint`` and ``region``, its credentials
    read from this worker's environment by pyarrow, never from the plan. A slice carrying its plan's
    listing opens the Store at that listing (no listing of its own) with the plan's CommitLog end as the
    log's (no recovery walk of its own), and takes the objects the slice carries (the small objects, its
    queue's ConsumeQueue objects) instead of fetching them: the slice's cut is the read's cut
    (docs/object-storage.md#spark)."""
    planned_at = getattr(part, "planned_at", None)
    key = (options.path, options.tier, options.object_options, planned_at)
    with _BUCKETS_LOCK:
        store = _BUCKETS.pop(key, None)
        listing, carried = getattr(part, "listing", None), getattr(part, "carried", None)
        if store is None:
            store = options.open_store(listing=listing, preloaded=carried)
            if listing is not None and part.commit_log_end is not None:
                store.commit_log.take_end(part.commit_log_end)
        elif listing is not None and carried:  # another queue's objects, as the plan fetched them
            store.source.preload(carried)
        _BUCKETS[key] = store
        while len(_BUCKETS) > DEFAULT_MAX_STORES:
            _BUCKETS.popitem(last=False)[1].close()
        return store


def _peek(options, part) -> cq.Store | None:
    """The worker's cached Store of the slice's store as it is, or None."""
    if is_object_uri(options.path):
        return _BUCKETS.get((options.path, options.tier, options.object_options, getattr(part, "planned_at", None)))
    return _STORES.peek(options.path, tier=options.tier)


_LOG = logging.getLogger("rmqfilter.datasource")
_STALE_SAID: set[tuple[str, float]] = set()  # the old cuts this worker has warned about


def _warn_if_stale(options, part) -> None:
    """Log a WARNING, once per plan in this worker, when the slice reads a cut planned more than
    ``stale_after`` seconds ago of a store that has moved on since: Spark plans a DataFrame's read
    once and every later action on it reads that cut (docs/spark.md#reused-dataframes)."""
    planned = getattr(part, "planned_at", None)
    if planned is None or part.commit_log_end is None or is_object_uri(options.path):
        return  # a store in object storage is a snapshot, listed again by each plan
    age = time.time() - planned
    key = (options.path, planned)
    if age < options.stale_after or key in _STALE_SAID:
        return
    log = _store(options).commit_log
    end = log.refresh()
    if end <= part.commit_log_end and log.min_offset <= part.commit_log_min:
        return  # the store has not moved: the old cut is the store as it is now
    _STALE_SAID.add(key)
    when = datetime.datetime.fromtimestamp(planned, datetime.timezone.utc).isoformat(timespec="seconds")
    _LOG.warning("rocketmq: reading the cut of %s planned %.0f s ago (at %s; CommitLog [%d, %d)); the store has "
                 "moved on since (CommitLog now [%d, %d)). Spark planned this DataFrame's read once and every "
                 "action on it, or on a DataFrame or view made from it, reads that cut: for the store as it is "
                 "now, load it again (spark.read.format(\"rocketmq\")...load(path)) (docs/spark.md#reused-dataframes)",
                 options.path, age, when, part.commit_log_min, part.commit_log_end, log.min_offset, end)


def _resolve_ext(store, topic: str, queue_id: int, slots: np.ndarray, skips: Skips | None = None,
                 queue_offsets: np.ndarray | None = None):
    """Tag codes as the broker sees them, plus ext columns, for the ConsumeQueue ``slots``.

    Returns ``(tags_code, tags_known, is_ext, ext_batch, skipped)``:
    ``tags_known`` is False where the slot is an ext address whose unit cannot
    be read (the broker then has no tag code); ``ext_batch`` is the
    ``cq.readers.ext.ExtBatch`` of ``slots`` (None when the queue has no ext unit to
    read); ``skipped`` marks the units whose ext unit is corrupt, recorded in
    ``skips`` (``on_corrupt="skip"``; otherwise the error propagates).
    """
    is_ext = slots <= cq.format.MAX_ADDR
    skipped = np.zeros(len(slots), dtype=np.bool_)
    tags_code = slots.copy()
    known = np.ones(len(slots), dtype=np.bool_)
    batch = None
    if is_ext.any():
        ext = store.ext(topic, queue_id)
        if ext is not None:
            # non-ext slots come back not found, as get() gives None
            batch, good, errors = decode_skipping(ext.read_batch, slots, skips is not None and skips.enabled)
            if errors:
                skips.add_units(queue_offsets[~good], errors)
                cleared = slots.copy()
                cleared[~good] = 0  # not an ext address: comes back not found, row dropped by the caller
                batch = ext.read_batch(cleared)
                skipped = ~good
            tags_code[batch.found] = batch.tags_code[batch.found]
            known = ~is_ext | batch.found
        else:
            known = ~is_ext
    return tags_code, known, is_ext, batch, skipped


#: A batch holds at most this many bytes of the CommitLog records it decodes (each record
#: counted at its stored size) ...
BATCH_BYTES = 32 << 20
#: ... and at most this many rows (ConsumeQueue-only columns take ~50 bytes a row).
MAX_FILTER_BATCH_ROWS = 1 << 20
#: Bytes a row is counted for besides its record (unit and fixed columns, offsets).
ROW_OVERHEAD = 64


def batch_bounds(sizes: np.ndarray | None, n: int, batch_bytes: int = BATCH_BYTES,
                 max_rows: int = MAX_FILTER_BATCH_ROWS, cuts: np.ndarray | None = None) -> list[tuple[int, int]]:
    """``(start, stop)`` row ranges of at most ``batch_bytes`` (rows counted at ``ROW_OVERHEAD``
    plus their record's stored size, when ``sizes`` is given) and ``max_rows`` rows each; a
    single row larger than ``batch_bytes`` is a batch of its own. A batch also ends before each
    row index in ``cuts`` (where the records move to the next CommitLog file, so each batch
    decodes from one file, without joining)."""
    if n == 0:
        return []
    if cuts is not None and len(cuts):
        out = []
        for a, b in zip([0, *cuts.tolist()], [*cuts.tolist(), n]):
            out += [(a + x, a + y) for x, y in batch_bounds(None if sizes is None else sizes[a:b], b - a,
                                                              batch_bytes, max_rows)]
        return out
    cost = np.full(n, ROW_OVERHEAD, dtype=np.int64)
    if sizes is not None:
        cost += np.clip(sizes.astype(np.int64, copy=False), 0, None)
    ends = np.cumsum(cost)
    bounds = []
    start, base = 0, 0
    while start < n:
        stop = int(np.searchsorted(ends, base + batch_bytes, side="right"))
        stop = min(max(stop, start + 1), start + max_rows, n)
        bounds.append((start, stop))
        base = int(ends[stop - 1])
        start = stop
    return bounds


def read_partition(options, spark_schema, partition, tags_code_sets: Iterable[frozenset[int]]) -> Iterator[pa.RecordBatch]:
    """Read a partition's queue ranges one after the other (:func:`read_slice` each).

    Parameters
    ----------
    partition : pyspark_udfs.datasource.SlicesPartition
    """
    tags_code_sets = list(tags_code_sets)
    _prefetch_slices(options, partition.slices)
    try:
        for part in partition.slices:
            yield from read_slice(options, spark_schema, part, tags_code_sets)
    finally:
        _release_records(options, partition.slices)


def _release_records(options, slices) -> None:
    """For a store in object storage: give back the CommitLog records the task fetched
    (:meth:`cq.readers.objectlog.RangedLog.release_held`). The worker keeps its Store for the query's
    other tasks, which read other stretches of the log: it holds none of this task's records
    (docs/object-storage.md#spark)."""
    for broker in {getattr(part, "broker", None) for part in slices}:
        opts = options.for_broker(broker) if broker is not None else options
        store = _peek(opts, next(p for p in slices if getattr(p, "broker", None) == broker))
        if store is not None:
            store.release_records()


def _prefetch_slices(options, slices) -> None:
    """For a store in object storage: fetch at once what the partition's slices read first, every queue's
    (:meth:`cq.Store.prefetch`), rather than one queue after the other as the slices reach them: of a queue
    whose bounds the plan carried, the units of the slices (:meth:`cq.Store.take_queue_bounds`), else the
    ConsumeQueue objects the slices do not carry; then the ext objects their units address
    (docs/object-storage.md#spark). A fetch that fails here is left to the slice that reads it (its error,
    or its skip with ``on_corrupt=skip``)."""
    queues: dict[tuple, list] = {}  # (broker, topic) -> the slices of its ConsumeQueue ranges
    for part in slices:
        if part.skip_reason is None and part.end > part.start and not getattr(part, "tier", False):
            queues.setdefault((getattr(part, "broker", None), part.topic), []).append(part)
    for (broker, topic), parts in queues.items():
        opts = options.for_broker(broker) if broker is not None else options
        if not is_object_uri(opts.path):
            continue
        try:
            store = None
            windows: dict[int, list[tuple[int, int]]] = {}
            for part in parts:  # each slice's carried objects taken first: they are not fetched again
                store = _store(opts, part)
                bounds = getattr(part, "queue_bounds", None)
                if bounds is not None:
                    store.take_queue_bounds(topic, part.queue_id, *bounds)
                    windows.setdefault(part.queue_id, []).append((part.start, part.end))
            store.prefetch(topic, sorted({part.queue_id for part in parts}), ext=True, windows=windows)
        except StoreFormatError:
            continue


def read_slice(options, spark_schema, part, tags_code_sets: Iterable[frozenset[int]]) -> Iterator[pa.RecordBatch]:
    """Read ConsumeQueue offsets ``[part.start, part.end)`` of one queue as Arrow batches.

    Parameters
    ----------
    options : pyspark_udfs.datasource.ReadOptions
    spark_schema : pyspark.sql.types.StructType
        The schema Spark asked for (names and order of the output columns):
        only these columns are decoded.
    part : pyspark_udfs.datasource.ConsumeQueueSlice
    tags_code_sets : iterable of frozenset of int
        Pushed-down tag code sets; a unit is kept only if its tag code is in all.
    """
    if getattr(part, "broker", None) is not None:  # a read of several stores: this slice's broker
        options = options.for_broker(part.broker)
    schema = to_arrow_schema(spark_schema)
    skips = Skips(options, part)
    _warn_if_stale(options, part)
    try:
        yield from _read_slice(options, schema, part, tags_code_sets, skips)
    finally:
        skips.report()
        store = _peek(options, part)
        if store is not None:  # the worker keeps the queue's readers, not its files (docs/limits.md)
            store.release_queue(part.topic, part.queue_id)


def _read_slice(options, schema, part, tags_code_sets, skips: Skips) -> Iterator[pa.RecordBatch]:
    if part.skip_reason is not None:  # the queue could not be opened when the read was planned
        skips.add(part.start, None, StoreFormatError(part.skip_reason, part.skip_path, part.skip_offset))
        return
    if part.end <= part.start:
        return
    topic, queue_id = part.topic, part.queue_id
    messages = options.table == "messages"
    wanted = wanted_columns(options, schema)
    tier = None
    try:
        store = _store(options, part)
        if getattr(part, "tier", False):  # a range the broker serves from its tier (docs/reading.md#tiered-storage)
            tier = store.tier_queue(topic, queue_id)
            if tier is None or tier.end_offset < part.end:  # the worker's view predates the plan: follow the tier
                store.refresh_tier()
                tier = store.tier_queue(topic, queue_id)
            if tier is None or tier.end_offset < part.end or tier.min_offset > part.start:
                raise StoreFormatError(f"the tier no longer holds offsets [{part.start}, {part.end}) of queue "
                                       f"{topic}/{queue_id} planned from it (its queue was destroyed or expired "
                                       "since the read was planned)", options.tier)
            units = tier.units(part.start, part.end)
            fields = {name: np.ascontiguousarray(units[name]) for name in units.dtype.names}
            queue_offsets = np.arange(part.start, part.start + len(units), dtype=np.int64)
            tags_code, known, is_ext, ext_batch, skipped = _resolve_ext(
                store, topic, queue_id, fields["tags_code"], skips, queue_offsets)
            cqueue = None
        else:
            cqueue = store.consume_queue(topic, queue_id)
        if isinstance(cqueue, BatchConsumeQueue):
            yield from _read_batch_cq_slice(options, schema, store, part, tags_code_sets, skips)
            return
        if isinstance(cqueue, CompactionConsumeQueue):
            yield from _read_compaction_slice(options, schema, store, part, tags_code_sets)
            return
        start = max(part.start, cqueue.min_offset) if tier is None else part.start  # the broker may have expired
        if start > part.start:  # files since planning  # lost, as for the broker's consumer: said, not silent (docs/live.md)
            on = "" if options.broker is None else f" on broker {options.broker!r}"  # several stores
            _LOG.warning("rocketmq: %d unit(s) of %s queue %s%s in offsets [%s, %s) expired by the broker since the "
                         "read was planned (the queue's minimum is now %s): not read", min(start, part.end) - part.start,
                         topic, queue_id, on, part.start, part.end, start)
        if tier is None:
            # the unit fields as contiguous columns: a batch takes slices of them (views), not gathers
            # from the 20-byte units
            fields = cqueue.read_columns(start, max(0, part.end - start))
            queue_offsets = np.arange(start, start + len(fields["size"]), dtype=np.int64)
            tags_code, known, is_ext, ext_batch, skipped = _resolve_ext(
                store, topic, queue_id, fields["tags_code"], skips, queue_offsets)
    except StoreFormatError as exc:
        # A queue or ext file that cannot be opened: nothing of this range can be read.
        if not skips.enabled:
            raise
        skips.add(part.start, part.end, exc)
        return

    keep = ~skipped
    for codes in tags_code_sets:
        keep &= known & np.isin(tags_code, np.fromiter(codes, dtype=np.int64, count=len(codes)))

    record_fields = [name for name in RECORD_COLUMNS if name in wanted]
    decisions = fused = None
    if options.group is not None:
        group = _GroupFilter(store, options, topic, part, tier)
        fused = group if group.fuses_layer2(options, record_fields) else None
        decisions = group.decide(fields, tags_code, known, ext_batch, keep, skips, queue_offsets,
                                 layer2=fused is None)
        keep &= ~decisions.skipped
        if not options.decisions:
            keep &= decisions.delivered if fused is None and options.layer2 != "spark" else decisions.reached
    if messages and decisions is None:
        # Records no longer in the CommitLog have no message to show (the broker skips them).
        cut = _cut(part)
        if record_fields or cut is None or tier is not None:
            keep &= _in_commit_log(store, fields["commit_log_offset"], fields["size"], part, tier)
        else:  # no record is decoded: the cut's range decides, and no CommitLog file is opened
            keep &= in_range(fields["commit_log_offset"], fields["size"], cut.commit_log_min, cut.commit_log_end)
    rows = np.flatnonzero(keep)
    # With decisions=true the broker reads only the records layer 1 let through: NULL elsewhere.
    reached = decisions.reached if decisions is not None else None
    log = (tier.commit_log if tier is not None else store.commit_log) if record_fields else None

    def decode(offsets: np.ndarray):
        return log.decode_columns(offsets, record_fields, decompress_body=options.body == "uncompressed")

    cuts = None
    if record_fields and len(rows):
        # a batch never spans two CommitLog files (where a record starts; the decoder checks the rest)
        file_of = log.file_indices(fields["commit_log_offset"][rows])
        cuts = np.flatnonzero(np.diff(file_of)) + 1
    for a, b in batch_bounds(fields["size"][rows] if record_fields else None, len(rows), cuts=cuts):
        batch_rows = rows[a:b]
        records = None
        read = None
        delivered = None
        if record_fields:
            read = reached[batch_rows] if reached is not None else np.ones(len(batch_rows), np.bool_)
            if fused is not None:  # (every row of the batch is read: ``read`` is all true)
                try:
                    records = decode(fields["commit_log_offset"][batch_rows])
                except (StoreFormatError, ImportError):
                    # a record that does not decode whole: layer 2 first, on properties alone, so
                    # that only the records the group receives are decoded whole (and fail or skip)
                    fused.layer2_rows(decisions, fields["commit_log_offset"], batch_rows, skips, queue_offsets)
                    batch_rows = batch_rows[decisions.delivered[batch_rows]]
                    read = read[:len(batch_rows)]
                else:  # layer 2 on this decode: keep what the group receives
                    ok = fused.delivered(records)
                    if not ok.all():
                        delivered = pa.array(ok)
                        batch_rows, read = batch_rows[ok], read[ok]
        if record_fields and records is None:
            records, good, errors = decode_skipping(
                decode, fields["commit_log_offset"][batch_rows if reached is None else batch_rows[read]], skips.enabled)
            if errors:
                bad = batch_rows[read][~good]
                skips.add_units(queue_offsets[bad], errors)
                keep_rows = ~np.isin(batch_rows, bad)
                batch_rows, read = batch_rows[keep_rows], read[keep_rows]
        if len(batch_rows) == 0:
            continue
        # the rows of a batch are often consecutive units (a full read): slices instead of gathers
        consecutive = int(batch_rows[-1]) - int(batch_rows[0]) == len(batch_rows) - 1
        columns = unit_columns(wanted, topic, queue_id, queue_offsets, fields, tags_code, known, is_ext,
                                ext_batch, slice(int(batch_rows[0]), int(batch_rows[-1]) + 1) if consecutive
                                else batch_rows)
        if "broker" in wanted:
            columns["broker"] = topic_column(options.broker, len(batch_rows))
        if records is not None:
            from_records = record_columns(records, record_fields, read)
            if delivered is not None:
                from_records = {name: arr.filter(delivered) for name, arr in from_records.items()}
            columns.update(from_records)
        d = decisions
        if d is not None and options.decisions and options.layer2 == "spark":
            columns["matched_by_consume_queue"] = pa.array(d.consume_queue[batch_rows])
            columns["reached_commit_log"] = pa.array(d.reached[batch_rows])
        elif d is not None and options.decisions:
            columns["matched_by_consume_queue"] = pa.array(d.consume_queue[batch_rows])
            columns["matched_by_commit_log"] = pa.array(d.commit_log[batch_rows],
                                                        mask=~d.reached[batch_rows])
            columns["delivered"] = pa.array(d.delivered[batch_rows])
        if options.message_filter is not None:
            columns = apply_message_filter(options, store, topic, queue_id, columns)
        yield schema_batch(schema, columns)


def _read_compaction_slice(options, schema, store, part, tags_code_sets) -> Iterator[pa.RecordBatch]:
    """Queue offsets ``[part.start, part.end)`` of a compaction topic's queue (docs/reading.md#compaction-topics):
    one row per unit of its compaction CQ, the records decoded from its compaction log (``commit_log_offset``
    is the compaction log position, as the consumer's offset message id), every table and option as for a
    ConsumeQueue but ``layer2=spark``. The decisions are :meth:`cq.Store.compacted_decisions`' (the ones
    ``Store.consume`` makes: no broker layer, the client's re-check); ``msg_store_time``, ``ext_address``
    and ``filter_bitmap`` are NULL (no ext units). A compaction file that cannot be read fails the read,
    naming it, whatever ``on_corrupt`` says."""
    topic, queue_id = part.topic, part.queue_id
    if options.layer2 == "spark":
        raise compaction_layer2_error(topic)
    grouped = options.group is not None
    flt = _GroupFilter(store, options, topic, part).filter if grouped else TagFilter("*")
    found = store.compacted_decisions(topic, queue_id, flt, part.start, part.end)
    units = found.units
    tags_code = units["tags_code"].astype(np.int64)
    keep = found.present.copy()
    for codes in tags_code_sets:
        keep &= np.isin(tags_code, np.fromiter(codes, dtype=np.int64, count=len(codes)))
    if grouped and not options.decisions:
        keep &= found.delivered
    rows = np.flatnonzero(keep)
    if not len(rows):
        return
    wanted = wanted_columns(options, schema)
    record_fields = [name for name in RECORD_COLUMNS if name in wanted]
    fields = {"commit_log_offset": units["commit_log_offset"], "size": units["size"], "tags_code": units["tags_code"]}
    queue_offsets = units["base_offset"].astype(np.int64)
    known, is_ext = np.ones(len(units), dtype=bool), np.zeros(len(units), dtype=bool)
    with store.compaction_log(topic, queue_id) as log:
        for a, b in batch_bounds(units["size"][rows] if record_fields else None, len(rows)):
            batch_rows = rows[a:b]
            columns = unit_columns(wanted, topic, queue_id, queue_offsets, fields, tags_code, known, is_ext, None,
                                    batch_rows)
            if "broker" in wanted:
                columns["broker"] = topic_column(options.broker, len(batch_rows))
            if record_fields:
                records = log.decode_columns(fields["commit_log_offset"][batch_rows].astype(np.int64), record_fields,
                                             decompress_body=options.body == "uncompressed")
                columns.update(record_columns(records, record_fields, np.ones(len(batch_rows), dtype=bool)))
            if grouped and options.decisions:
                columns["matched_by_consume_queue"] = pa.array(found.consume_queue[batch_rows])
                columns["matched_by_commit_log"] = pa.array(found.commit_log[batch_rows])
                columns["delivered"] = pa.array(found.delivered[batch_rows])
            if options.message_filter is not None:
                columns = apply_message_filter(options, store, topic, queue_id, columns)
            yield schema_batch(schema, columns)


def _read_batch_cq_slice(options, schema, store, part, tags_code_sets, skips: Skips) -> Iterator[pa.RecordBatch]:
    """Queue offsets ``[part.start, part.end)`` of a BatchCQ queue (docs/reading.md#batchcq), one row
    per message as the client unwraps the batches, every table and option as for a ConsumeQueue.

    The broker's decisions over the units are :meth:`cq.Store.batch_decisions`' (the ones
    ``Store.consume`` makes: layer 1 by the unit's tags code, layer 2 by the batch record's own
    properties); each unit's decisions hold for every message of its batch, and the client's tag
    re-check is each message's own. Every batch holding a message of the range is read whole, as the
    broker serves it (partitions start at batch starts, so each batch is read once).

    Columnar, as the classic path: the records to unwrap are decoded in batches, their bodies split
    by the inner-batch kernel (``cq.kernels.split_records``) and each message's columns built from
    those buffers; the record's fields repeated by an Arrow take. A record that does not decode or
    split fails the read naming its file and byte, or under ``on_corrupt=skip`` drops its batch's
    messages (reported as the batch's queue offsets)."""
    topic, queue_id = part.topic, part.queue_id
    messages = options.table == "messages"
    spark_layer2 = options.layer2 == "spark"
    grouped = options.group is not None
    if spark_layer2 and messages:  # (planning refuses it first; a slice made by hand comes here)
        raise batch_cq_layer2_error(topic)
    flt = _GroupFilter(store, options, topic, part).filter if grouped else TagFilter("*")
    layers = Layers(flt)
    cut = _cut(part)
    if cut is not None:  # the slice's queue range inside the planned cut's CommitLog range
        cut = cq.StoreCut(cut.commit_log_min, cut.commit_log_end, ((topic, queue_id, part.start, part.end),))
    try:
        found = store.batch_decisions(topic, queue_id, flt, part.start, part.end, cut=cut, layer2=not spark_layer2,
                                      skip=skips.enabled)
    except StoreFormatError as exc:  # a BatchConsumeQueue file that cannot be read: nothing of the range can
        if not skips.enabled:
            raise
        skips.add(part.start, part.end, exc)
        return
    units, count = found.units, found.messages
    base = units["base_offset"].astype(np.int64)
    for i, exc in found.errors:
        skips.add(base[i], base[i] + count[i], exc)
    tags_code = units["tags_code"].astype(np.int64)
    keep = ~found.skipped
    for codes in tags_code_sets:
        if not isinstance(codes, TagsCodes):  # (a tag's code is not a batch unit's: the tags column is the message's)
            keep &= np.isin(tags_code, np.fromiter(codes, dtype=np.int64, count=len(codes)))
    unwrap = np.zeros(len(units), dtype=bool)  # the units whose records are decoded and split
    if not grouped:
        if messages:  # records no longer in the CommitLog have no message to show (the broker skips them)
            keep &= found.present
            unwrap = keep
    elif spark_layer2:
        if not options.decisions:
            keep &= found.reached
    else:
        if not options.decisions:
            keep &= found.commit_log
        # the messages' columns where layer 2 read the record; the client's re-check where it passed
        unwrap = keep & (found.reached if messages else found.commit_log)
    wanted = wanted_columns(options, schema)
    record_fields = [name for name in _BATCH_RECORD_FIELDS if name in wanted]
    inner_fields = ["tags", *(name for name in ("keys", "properties") if name in wanted)]
    log = store.commit_log
    offs = units["commit_log_offset"].astype(np.int64)
    rows = np.flatnonzero(keep)
    sizes = np.where(unwrap[rows], units["size"][rows], 0)
    record_properties = "properties" in wanted and not messages  # layer2=spark: what layer 2 reads
    if record_properties:
        sizes = np.where(found.reached[rows], units["size"][rows], 0)

    def decoded(decode, chunk: np.ndarray, which: np.ndarray):
        """``decode`` of the records of units ``which`` (of ``chunk``), the units it refuses skipped (and
        left out of the chunk) under ``on_corrupt=skip``: ``(result, chunk, which)``."""
        if not len(which):
            return None, chunk, which
        result, good, errors = decode_skipping(decode, offs[which], skips.enabled)
        for i, exc in zip(which[~good].tolist(), errors):
            skips.add(base[i], base[i] + count[i], exc)
        return result, chunk[~np.isin(chunk, which[~good])], which[good]

    for a, b in batch_bounds(sizes, len(rows)):
        chunk = rows[a:b]
        got, chunk, _ = decoded(lambda o: _Unwrapped(log, o, layers, record_fields, inner_fields),
                                     chunk, chunk[unwrap[chunk]])
        props = None
        if record_properties:
            props, chunk, read = decoded(lambda o: log.decode_columns(o, ["properties"]), chunk,
                                         chunk[found.reached[chunk]])
        per_unit = count[chunk].copy()
        is_open = unwrap[chunk]
        if got is not None:
            per_unit[is_open] = got.per_record
        unit = np.repeat(chunk, per_unit)  # each message's unit
        first = np.cumsum(per_unit) - per_unit
        queue_offsets = base[unit] + (np.arange(len(unit)) - np.repeat(first, per_unit))
        opened_msg = np.repeat(is_open, per_unit)
        at = np.cumsum(opened_msg) - 1  # a message's index among the unwrapped ones
        client = np.ones(len(unit), dtype=bool)
        if got is not None:
            client[opened_msg] = got.client
        delivered = found.commit_log[unit] & client if found.commit_log is not None else None
        if grouped and not options.decisions and not spark_layer2:
            take = np.flatnonzero(client)  # (layer 2 passed every unit kept): the client's re-check
            unit, queue_offsets, opened_msg, at, delivered = (x[take] for x in (unit, queue_offsets, opened_msg, at,
                                                                                 delivered))
        if not len(unit):
            continue
        n = len(unit)
        columns = {
            "topic": topic_column(topic, n),
            "queue_id": pa.array(np.full(n, queue_id, dtype=np.int32)),
            "queue_offset": pa.array(queue_offsets),
            "commit_log_offset": pa.array(offs[unit]),
            "store_size": pa.array(units["size"][unit].astype(np.int32)),
            "tags_code": pa.array(tags_code[unit]),
            "ext_address": pa.nulls(n, pa.int64()),
            "msg_store_time": pa.nulls(n, pa.int64()),  # a BatchCQ keeps no ext units
            "filter_bitmap": pa.nulls(n, pa.binary()),
        }
        if got is not None and messages:
            columns.update(got.columns(wanted, at, opened_msg))
        elif messages:
            columns.update({name: pa.nulls(n, field.type) for name, field in zip(schema.names, schema)
                            if name in RECORD_COLUMNS or name in PROPERTY_COLUMNS})
        if record_properties:  # the batch record's own, NULL where layer 2 does not read it
            reached = found.reached[unit]
            at_read = np.searchsorted(read, np.where(reached, unit, read[0] if len(read) else 0))
            columns["properties"] = (pa.nulls(n, schema.field("properties").type) if props is None else
                                     props.arrow("properties").take(pa.array(at_read, mask=~reached)))
        if "broker" in wanted:
            columns["broker"] = topic_column(options.broker, n)
        if options.decisions:
            columns["matched_by_consume_queue"] = pa.array(found.consume_queue[unit])
            if spark_layer2:
                columns["reached_commit_log"] = pa.array(found.reached[unit])
            else:
                columns["matched_by_commit_log"] = pa.array(found.commit_log[unit], mask=~found.reached[unit])
                columns["delivered"] = pa.array(delivered)
        if options.message_filter is not None:
            columns = apply_message_filter(options, store, topic, queue_id, columns, batches=True)
        yield schema_batch(schema, columns)


#: The batch records' fields each of their messages repeats (what ``expand_batch`` copies).
_BATCH_RECORD_FIELDS = ("born_timestamp", "born_host", "store_timestamp", "store_host", "sys_flag",
                        "reconsume_times")


class _Unwrapped:
    """The messages of the batch records at ``offs`` as the client unwraps them (``expand_batch``'s,
    columnar): the records decoded once, their bodies split, each message's properties, tags and keys
    parsed from its own text; a record without ``INNER_BATCH_FLAG`` is one message. ``client`` is the
    client's tag re-check of each message. Raises :class:`StoreFormatError` naming the file and byte of
    a record that does not decode or split."""

    def __init__(self, log, offs: np.ndarray, layers: Layers, record_fields, inner_fields) -> None:
        records = log.decode_columns(offs, ["body", "sys_flag", *record_fields])
        body_off, self.body_data, _ = records.columns["body"]
        body_start, body_len = body_off[:-1].astype(np.int64), np.diff(body_off).astype(np.int64)
        inner = (records.columns["sys_flag"] & fmt.INNER_BATCH_FLAG) != 0
        batches = np.flatnonzero(inner)
        spans, counts, bad, _at, error = split_records(self.body_data, body_start[batches], body_len[batches])
        if error is not None:  # the record read alone raises the error naming its file and byte
            expand_batch(log.read_message(int(offs[batches[bad]])))
            raise StoreFormatError(error, log.directory, int(offs[batches[bad]]))  # pragma: no cover - raised above
        self.records, self.record_fields = records, record_fields
        self.per_record = np.ones(len(offs), dtype=np.int64)
        self.per_record[batches] = counts
        self.rec = np.repeat(np.arange(len(offs)), self.per_record)  # each message's record
        in_batch = inner[self.rec]
        rows_inner, rows_plain = np.flatnonzero(in_batch), np.flatnonzero(~in_batch)
        self.starts, self.lengths = body_start[self.rec], body_len[self.rec]
        self.starts[rows_inner], self.lengths[rows_inner] = spans[:, 2], spans[:, 3]
        # properties, tags, keys: the inner messages' from their texts, a plain record's from the record
        props = MessageColumns(properties_columns(self.body_data, spans[:, 2] + spans[:, 3]
                                                  + fmt.INNER_PROPERTIES_LENGTH_STRUCT.size, spans[:, 4], inner_fields),
                               len(spans))
        self.client = np.ones(len(self.rec), dtype=bool)
        self.client[rows_inner] = layers.client_columns(props)
        if not len(rows_plain):
            self.inner = {name: props.arrow(name) for name in inner_fields}
            return
        plain = log.decode_columns(offs[self.rec[rows_plain]], inner_fields)
        self.client[rows_plain] = layers.client_columns(plain)
        order = np.empty(len(self.rec), dtype=np.int64)  # the inner messages' then the plain records', in message order
        order[rows_inner] = np.arange(len(rows_inner))
        order[rows_plain] = len(rows_inner) + np.arange(len(rows_plain))
        at = pa.array(order)
        self.inner = {name: pa.concat_arrays([props.arrow(name), plain.arrow(name)]).take(at) for name in inner_fields}

    def columns(self, wanted, at: np.ndarray, opened: np.ndarray) -> dict[str, pa.Array]:
        """The messages-table columns decoded from the records, for output rows whose message is
        ``at`` (its index here) where ``opened``, NULL elsewhere (layer 2 did not read the record)."""
        whole = opened.all() and len(at) == len(self.rec) and (np.diff(at) == 1).all()
        take = None if whole else pa.array(np.where(opened, at, 0), mask=~opened)
        out = {}
        if "body" in wanted:
            rows = at[opened]
            offsets, body = gather_spans(self.body_data, self.starts[rows], self.lengths[rows])
            arr = binary_array(pa.binary(), len(rows), offsets.astype(np.int32), body)
            if not opened.all():
                back = np.cumsum(opened) - 1
                arr = arr.take(pa.array(np.where(opened, back, 0), mask=~opened))
            out["body"] = arr
        for name, arr in self.inner.items():
            if name in wanted:
                out[name] = arr if take is None else arr.take(take)
        if self.record_fields:
            rec = pa.array(np.where(opened, self.rec[np.where(opened, at, 0)], 0), mask=~opened)
            out.update({name: self.records.arrow(name).take(rec) for name in self.record_fields})
        return out
