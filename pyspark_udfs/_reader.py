"""Executor side of the ``rocketmq`` data source: one ConsumeQueue slice -> Arrow record batches.

Imported only inside ``RocketMQReader.read``, so the driver never loads it and
a Python worker loads it once. Everything the broker decides (ext address
resolution, the two filter layers, record decoding) is done by :mod:`cq`; this
module only moves its results into Arrow columns.
"""
from __future__ import annotations

from collections.abc import Iterable, Iterator

import numpy as np
import pyarrow as pa

import cq

# Opened stores, per worker process: a worker reads many slices of one store.
_STORES: dict[str, cq.Store] = {}
BATCH_ROWS = 8192
TAGS = "TAGS"  # the property holding a message's tag


def _store(path: str) -> cq.Store:
    store = _STORES.get(path)
    if store is None:
        store = _STORES[path] = cq.Store(path)
    return store


def _resolve_ext(store, topic: str, queue_id: int, slots: np.ndarray):
    """Tag codes as the broker sees them, plus ext columns, for the ConsumeQueue ``slots``.

    Returns ``(tags_code, tags_known, ext_address, ext_units)``: ``tags_known`` is
    False where the slot is an ext address whose unit cannot be read (the
    broker then has no tag code), ``ext_units`` holds the ``CqExtUnit`` or None.
    """
    n = len(slots)
    is_ext = slots <= cq.format.MAX_ADDR
    tags_code = slots.copy()
    known = np.ones(n, dtype=np.bool_)
    units: list = [None] * n
    if is_ext.any():
        ext = store.ext(topic, queue_id)
        for i in np.flatnonzero(is_ext):
            unit = ext.get(int(slots[i])) if ext is not None else None
            units[i] = unit
            if unit is None:
                known[i] = False
            else:
                tags_code[i] = unit.tags_code
    return tags_code, known, is_ext, units


def _in_commit_log(log, offsets: np.ndarray, sizes: np.ndarray) -> np.ndarray:
    """Units whose record is inside the CommitLog's valid range, as ``cq.Store.consume`` decides.

    Records below the first file were deleted and records past the recovered
    end were never completed; the broker skips their units.
    """
    return (offsets >= log.min_offset) & (offsets + sizes <= log.max_offset)


class Decisions:
    """Per-unit results of a group's filter layers over one slice."""

    def __init__(self, n: int) -> None:
        #: layer 1, ``isMatchedByConsumeQueue`` (tag code / Bloom bitmap)
        self.consume_queue = np.zeros(n, dtype=np.bool_)
        #: layer 1 passed and the record is in the CommitLog, so layer 2 ran
        self.reached_commit_log = np.zeros(n, dtype=np.bool_)
        #: layer 2, ``isMatchedByCommitLog`` (the selector; always true for tags)
        self.commit_log = np.zeros(n, dtype=np.bool_)
        #: what the consumer finally gets (after the client's exact tag re-check)
        self.delivered = np.zeros(n, dtype=np.bool_)


class _GroupFilter:
    """The filter ``cq.Store.make_filter`` builds for the group, applied to a slice of units."""

    def __init__(self, store, options, topic: str) -> None:
        self.store = store
        self.filter = store.make_filter(topic, options.group, sql=options.sql, tags=options.tags)

    def decide(self, units, tags_code, known, ext_units, candidates) -> Decisions:
        """Layer 1 on every candidate unit; layer 2 only where layer 1 passed, as the broker does.

        Layer 2 needs only the records' properties, gathered in one batch call.
        """
        f = self.filter
        d = Decisions(len(units))
        codes = tags_code.tolist()
        for i in np.flatnonzero(candidates).tolist():
            d.consume_queue[i] = f.is_matched_by_consume_queue(codes[i] if known[i] else None, ext_units[i])
        log = self.store.commit_log
        offsets = units["commit_log_offset"]
        rows = np.flatnonzero(d.consume_queue & _in_commit_log(log, offsets, units["size"]))
        props = log.gather_properties(offsets[rows])
        many = getattr(f, "is_matched_by_commit_log_many", None)
        if many is not None:
            layer2 = np.asarray(many(props), dtype=np.bool_)
        else:
            layer2 = np.fromiter((f.is_matched_by_commit_log(p) for p in props), dtype=np.bool_, count=len(rows))
        client = np.fromiter((f.is_matched_by_client(p.get(TAGS) if p is not None else None) for p in props),
                             dtype=np.bool_, count=len(rows))
        d.reached_commit_log[rows] = True
        d.commit_log[rows] = layer2
        d.delivered[rows] = layer2 & client
        return d


def _batches(columns: dict[str, pa.Array], schema: pa.Schema) -> Iterator[pa.RecordBatch]:
    batch = pa.RecordBatch.from_arrays([columns[f.name] for f in schema], schema=schema)
    for start in range(0, batch.num_rows, BATCH_ROWS):
        yield batch.slice(start, BATCH_ROWS)


def read_slice(options, spark_schema, part, tags_code_sets: Iterable[frozenset[int]]) -> Iterator[pa.RecordBatch]:
    """Read ConsumeQueue offsets ``[part.start, part.end)`` of one queue as Arrow batches.

    Parameters
    ----------
    options : pyspark_udfs.datasource.ReadOptions
    spark_schema : pyspark.sql.types.StructType
        The schema Spark asked for (names and order of the output columns).
    part : pyspark_udfs.datasource.ConsumeQueueSlice
    tags_code_sets : iterable of frozenset of int
        Pushed-down tag code sets; a unit is kept only if its tag code is in all.
    """
    from pyspark.sql.pandas.types import to_arrow_schema

    schema = to_arrow_schema(spark_schema)
    if part.end <= part.start:
        return
    store = _store(options.path)
    topic, queue_id = part.topic, part.queue_id
    messages = options.table == "messages"
    units = store.consume_queue(topic, queue_id).read(part.start, part.end - part.start)
    queue_offsets = np.arange(part.start, part.start + len(units), dtype=np.int64)
    tags_code, known, is_ext, ext_units = _resolve_ext(store, topic, queue_id, units["tags_code"])

    keep = np.ones(len(units), dtype=np.bool_)
    for codes in tags_code_sets:
        keep &= known & np.isin(tags_code, np.fromiter(codes, dtype=np.int64, count=len(codes)))

    decisions = None
    if options.group is not None:
        decisions = _GroupFilter(store, options, topic).decide(units, tags_code, known, ext_units, keep)
        if not options.decisions:
            keep &= decisions.delivered
    if messages and decisions is None:
        # Records no longer in the CommitLog have no message to show (the broker skips them).
        keep &= _in_commit_log(store.commit_log, units["commit_log_offset"], units["size"])
    rows = np.flatnonzero(keep)
    if len(rows) == 0:
        return

    n = len(rows)
    ext_rows = [ext_units[i] for i in rows.tolist()]
    columns: dict[str, pa.Array] = {
        "topic": pa.array([topic] * n, pa.string()),
        "queue_id": pa.array(np.full(n, queue_id, dtype=np.int32)),
        "queue_offset": pa.array(queue_offsets[rows]),
        "commit_log_offset": pa.array(units["commit_log_offset"][rows]),
        "store_size": pa.array(units["size"][rows].astype(np.int32)),
        "tags_code": pa.array(tags_code[rows], mask=~known[rows]),
        "msg_store_time": pa.array([u.msg_store_time if u is not None else None for u in ext_rows], pa.int64()),
        "filter_bitmap": pa.array([u.filter_bitmap if u is not None else None for u in ext_rows], pa.binary()),
    }
    if messages:
        # With decisions=true the broker reads only the records layer 1 let through.
        read = decisions.reached_commit_log[rows] if decisions is not None else None
        columns.update(_message_columns(store, units["commit_log_offset"][rows], read))
    else:
        columns["ext_address"] = pa.array(units["tags_code"][rows], mask=~is_ext[rows])
    if decisions is not None and options.decisions:
        reached = decisions.reached_commit_log[rows]
        columns["matched_by_consume_queue"] = pa.array(decisions.consume_queue[rows])
        columns["matched_by_commit_log"] = pa.array(decisions.commit_log[rows], mask=~reached)
        columns["delivered"] = pa.array(decisions.delivered[rows])
    yield from _batches(columns, schema)


_MESSAGE_COLUMNS = {
    "tags": pa.string(),
    "keys": pa.string(),
    "properties": pa.map_(pa.string(), pa.string()),
    "body": pa.binary(),
    "born_timestamp": pa.int64(),
    "born_host": pa.string(),
    "store_timestamp": pa.int64(),
    "store_host": pa.string(),
    "sys_flag": pa.int32(),
    "reconsume_times": pa.int32(),
}


def _message_columns(store, offsets: np.ndarray, read: np.ndarray | None) -> dict[str, pa.Array]:
    """CommitLog columns of the records at ``offsets``; rows where ``read`` is False stay NULL."""
    read_message = store.commit_log.read_message
    if read is None:
        msgs = [read_message(o) for o in offsets.tolist()]
    else:
        msgs = [read_message(o) if r else None for o, r in zip(offsets.tolist(), read.tolist())]
    present = [m for m in msgs if m is not None]

    def column(name: str, values: list) -> pa.Array:
        if len(present) != len(msgs):  # put the NULLs back where no record was read
            it = iter(values)
            values = [next(it) if m is not None else None for m in msgs]
        return pa.array(values, _MESSAGE_COLUMNS[name])

    return {
        "tags": column("tags", [m.tags for m in present]),
        "keys": column("keys", [m.keys for m in present]),
        "properties": column("properties", [list(m.properties.items()) for m in present]),
        "body": column("body", [m.body for m in present]),
        "born_timestamp": column("born_timestamp", [m.born_timestamp for m in present]),
        "born_host": column("born_host", [m.born_host for m in present]),
        "store_timestamp": column("store_timestamp", [m.store_timestamp for m in present]),
        "store_host": column("store_host", [m.store_host for m in present]),
        "sys_flag": column("sys_flag", [m.sys_flag for m in present]),
        "reconsume_times": column("reconsume_times", [m.reconsume_times for m in present]),
    }
