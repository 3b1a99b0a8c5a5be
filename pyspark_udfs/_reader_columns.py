"""The Arrow columns a slice of the ``rocketmq`` data source is made of: the columns a read makes, the
ConsumeQueue units' and the records' columns, the topic column, and the batch in the schema's order
(docs/data-path.md).
"""
from __future__ import annotations

import numpy as np
import pyarrow as pa

from cq.filter.custom import PROPERTY_COLUMNS, ext_columns, message_schema, property_column

__all__ = ["record_columns", "schema_batch", "topic_column", "unit_columns", "wanted_columns"]


def wanted_columns(options, schema: pa.Schema) -> set[str]:
    """The columns a read of ``schema`` makes: its own, every column of the messages table for a custom
    filter (docs/custom-filters.md), and ``properties`` for a column that is one property (``uniq_key``)."""
    wanted = set(schema.names)
    if options.message_filter is not None:
        wanted |= {f.name for f in message_schema()}
    if not wanted.isdisjoint(PROPERTY_COLUMNS):
        wanted.add("properties")
    return wanted


def schema_batch(schema: pa.Schema, columns: dict[str, pa.Array]) -> pa.RecordBatch:
    """The batch of ``schema``'s columns, in its order and types, from ``columns`` by name; a column that
    is one property (:data:`cq.filter.custom.PROPERTY_COLUMNS`) looked up in the ``properties`` map the
    reader decoded."""
    arrays = []
    for field in schema:
        arr = columns.get(field.name)
        if arr is None and field.name in PROPERTY_COLUMNS:
            arr = property_column(columns["properties"], field.name)
        if arr is None:
            raise KeyError(field.name)
        arrays.append(arr if arr.type == field.type else arr.cast(field.type))
    return pa.RecordBatch.from_arrays(arrays, schema=schema)


_TOPIC_COLUMNS: dict[str, pa.Array] = {}  # per worker: the longest topic column made, sliced for each batch


def topic_column(topic: str, n: int) -> pa.Array:
    """``n`` rows of ``topic`` (or a broker's name): a zero-copy slice of one column per name (a batch of
    a slice of a topic would otherwise repeat the name again)."""
    col = _TOPIC_COLUMNS.get(topic)
    if col is None or len(col) < n:
        col = _TOPIC_COLUMNS[topic] = pa.repeat(pa.scalar(topic, pa.string()), max(n, 1 << 16))
    return col.slice(0, n)


def unit_columns(wanted, topic, queue_id, queue_offsets, units, tags_code, known, is_ext, ext_batch,
                  rows) -> dict[str, pa.Array]:
    """The asked-for columns that come from ConsumeQueue (and ext) units, for ``rows`` (indices, or
    ``slice(start, stop)`` of consecutive units: the columns are then views). ``units`` maps each
    ConsumeQueue field to its column."""
    n = rows.stop - rows.start if isinstance(rows, slice) else len(rows)

    def masked(values: np.ndarray, valid: np.ndarray) -> pa.Array:
        return pa.array(values) if valid.all() else pa.array(values, mask=~valid)

    makers = {
        "topic": lambda: topic_column(topic, n),
        "queue_id": lambda: pa.array(np.full(n, queue_id, dtype=np.int32)),
        "queue_offset": lambda: pa.array(queue_offsets[rows]),
        "commit_log_offset": lambda: pa.array(units["commit_log_offset"][rows].astype(np.int64, copy=False)),
        "store_size": lambda: pa.array(units["size"][rows].astype(np.int32, copy=False)),
        "tags_code": lambda: masked(tags_code[rows], known[rows]),
        "ext_address": lambda: masked(units["tags_code"][rows].astype(np.int64, copy=False), is_ext[rows]),
    }
    out = {name: make() for name, make in makers.items() if name in wanted}
    if "msg_store_time" in wanted or "filter_bitmap" in wanted:
        out.update({k: v for k, v in ext_columns(ext_batch, rows).items() if k in wanted})
    return out


def record_columns(records, names: list[str], read: np.ndarray) -> dict[str, pa.Array]:
    """Arrow columns of the decoded ``records``; rows where ``read`` is False are NULL."""
    out = {name: records.arrow(name) for name in names}
    if not read.all():  # put the NULLs back where no record was read
        take = pa.array(np.cumsum(read) - 1, mask=~read)
        out = {name: arr.take(take) for name, arr in out.items()}
    return out
