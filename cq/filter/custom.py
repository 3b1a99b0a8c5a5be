"""Custom message filters: the broker's old class-filter mode, in Python, after both broker layers.

A custom filter is a callable that gets one decoded :class:`cq.Message` and returns a bool, or,
marked with :func:`batch_filter`, a callable that gets a ``pyarrow.RecordBatch`` holding the
``messages`` table's columns (:data:`MESSAGE_COLUMNS`) and returns a boolean array, one value
per row. It runs after layer 1 (tag code / Bloom bitmap), layer 2 (the selector) and the
client's tag re-check: a message is delivered only if all of them pass. The broker's class
filter *replaced* layer 2; here it *narrows* it (docs/custom-filters.md).

The batch is built here for every reader, without a Python object per message: from the
decoder's Arrow columns (:func:`records_record_batch`, what ``Store.consume`` gives it) or from
the data source's own columns (:func:`filter_record_batch`). :func:`messages_record_batch`
builds it from :class:`cq.Message` objects, for a caller that holds those
(:meth:`MessageFilter.apply`).

An exception in the filter (or a result that is not a bool / a boolean array of the right
length) raises :class:`FilterError` naming the filter and the message (topic, queue id, queue
offset) with ``on_error="fail"``; with ``on_error="skip"`` the message (for the batch form, the
batch) is not delivered and counted as skipped.
"""
from __future__ import annotations

import functools
import importlib
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from rmqfilter_arrow import binary_array

from .. import format as fmt
from ..kernels import gather_spans
from ..readers.columns import MessageColumns
from ..readers.commitlog import Message

__all__ = ["BATCH_RECORD_FIELDS", "MESSAGE_COLUMNS", "ON_FILTER_ERROR", "PROPERTY_COLUMNS", "UNIT_COLUMNS", "FilterError", "MessageFilter", "as_message_filter",
           "batch_filter", "ext_columns", "filter_record_batch", "load_filter", "message_schema",
           "messages_record_batch", "records_record_batch"]

ON_FILTER_ERROR = ("fail", "skip")
_BATCH_MARK = "__rmqfilter_batch__"

#: The ``messages`` table's columns a batch filter sees, in order, with their Arrow types (the
#: ``rocketmq`` data source's ``table=messages`` schema; a test keeps the two equal).
MESSAGE_COLUMNS: tuple[tuple[str, str], ...] = (
    ("topic", "string"), ("queue_id", "int32"), ("queue_offset", "int64"), ("commit_log_offset", "int64"),
    ("store_size", "int32"), ("tags_code", "int64"), ("tags", "string"), ("keys", "string"), ("uniq_key", "string"),
    ("properties", "map<string, string>"), ("body", "binary"), ("born_timestamp", "int64"),
    ("born_host", "string"), ("store_timestamp", "int64"), ("store_host", "string"), ("sys_flag", "int32"),
    ("reconsume_times", "int32"), ("msg_store_time", "int64"), ("filter_bitmap", "binary"),
)
#: The columns of :data:`MESSAGE_COLUMNS` that come from the ConsumeQueue unit (and its ext unit);
#: every other one is a field of the CommitLog record (``cq.format.RECORD_FIELDS``).
UNIT_COLUMNS = ("tags_code", "msg_store_time", "filter_bitmap")
#: The columns of :data:`MESSAGE_COLUMNS` that are one property of the record (NULL where absent), taken from
#: the ``properties`` map (:func:`property_column`): column -> property (docs/spark.md#data-source).
PROPERTY_COLUMNS = {"uniq_key": fmt.PROPERTY_UNIQ_KEY}
#: The record fields a batch filter's batch is decoded from (what :func:`records_record_batch` needs).
BATCH_RECORD_FIELDS = tuple(name for name, _ in MESSAGE_COLUMNS if name not in UNIT_COLUMNS
                            and name not in PROPERTY_COLUMNS)


class FilterError(ValueError):
    """A custom filter failed on a message: it raised, or returned something other than a bool.

    Attributes
    ----------
    filter : str
        The filter's name (``package.module:function``).
    topic : str
    queue_id : int
    queue_offset : int
        The message (for a batch filter, the first message of the batch).
    last_queue_offset : int or None
        For a batch filter, the last message of the batch.
    """

    def __init__(self, filter_name: str, topic: str, queue_id: int, queue_offset: int, problem: str,
                 last_queue_offset: int | None = None) -> None:
        self.filter = filter_name
        self.topic = topic
        self.queue_id = queue_id
        self.queue_offset = queue_offset
        self.last_queue_offset = last_queue_offset
        where = (f"message topic {topic!r} queue {queue_id} offset {queue_offset}" if last_queue_offset is None
                 else f"batch of topic {topic!r} queue {queue_id} offsets {queue_offset}..{last_queue_offset}")
        super().__init__(f"custom filter {filter_name} failed on {where}: {problem}")


def batch_filter(fn: Callable) -> Callable:
    """Mark ``fn`` as a batch filter: it takes a ``pyarrow.RecordBatch`` and returns a boolean array.

    >>> @batch_filter
    ... def big(batch):
    ...     import pyarrow.compute as pc
    ...     return pc.greater(pc.binary_length(batch["body"]), 100)
    >>> big.__rmqfilter_batch__
    True
    """
    setattr(fn, _BATCH_MARK, True)
    return fn


def _name(fn: Any) -> str:
    module = getattr(fn, "__module__", None) or type(fn).__module__
    qual = getattr(fn, "__qualname__", None) or type(fn).__qualname__
    return f"{module}:{qual}"


def load_filter(spec: str) -> Callable:
    """Import ``"package.module:function"`` (``function`` may be a dotted attribute path).

    Raises
    ------
    ValueError
        ``spec`` is malformed, the module cannot be imported, the attribute is missing or not callable.
    """
    if not isinstance(spec, str) or spec.count(":") != 1 or not all(spec.split(":")):
        raise ValueError(f"custom filter {spec!r}: expected package.module:function")
    module_name, attr = spec.split(":")
    try:
        obj: Any = importlib.import_module(module_name)
    except Exception as exc:  # an import can fail with anything the module raises
        raise ValueError(f"custom filter {spec!r}: cannot import module {module_name!r}: "
                         f"{type(exc).__name__}: {exc}") from exc
    for part in attr.split("."):
        try:
            obj = getattr(obj, part)
        except AttributeError as exc:
            raise ValueError(f"custom filter {spec!r}: module {module_name!r} has no attribute {attr!r}") from exc
    if not callable(obj):
        # bad input named by the user, like a missing module: a ValueError, as the CLI and load() report them
        raise ValueError(f"custom filter {spec!r}: {attr!r} is a {type(obj).__name__}, not a callable")  # noqa: TRY004
    return obj


class MessageFilter:
    """A custom filter with its error policy; :meth:`apply` runs it over decoded messages.

    Parameters
    ----------
    fn : callable or str
        ``fn(message) -> bool``, a :func:`batch_filter` ``fn(record_batch) -> bool array``, or
        ``"package.module:function"`` naming one.
    on_error : {"fail", "skip"}
    batch : bool, optional
        Force the form (default: batch iff ``fn`` is marked by :func:`batch_filter`).
    """

    def __init__(self, fn: Callable | str, *, on_error: str = "fail", batch: bool | None = None) -> None:
        if on_error not in ON_FILTER_ERROR:
            raise ValueError(f"on_filter_error must be fail or skip, got {on_error!r}")
        self.name = fn if isinstance(fn, str) else _name(fn)
        self.fn = load_filter(fn) if isinstance(fn, str) else fn
        if not callable(self.fn):
            raise TypeError(f"a custom filter must be callable, got {type(self.fn).__name__}")
        self.on_error = on_error
        self.batch = bool(getattr(self.fn, _BATCH_MARK, False)) if batch is None else bool(batch)

    def __repr__(self) -> str:
        return f"MessageFilter({self.name}, on_error={self.on_error!r}, batch={self.batch})"

    def apply(self, messages: Sequence[Message], units: dict[str, np.ndarray] | None = None
              ) -> tuple[np.ndarray, np.ndarray]:
        """``(keep, skipped)`` for ``messages``: bool arrays, skipped = the filter failed (``on_error="skip"``).

        ``units``: for the batch form, the ConsumeQueue columns of the messages (``tags_code``,
        ``msg_store_time``, ``filter_bitmap``) when known.
        """
        n = len(messages)
        if n == 0:
            return np.zeros(0, dtype=bool), np.zeros(0, dtype=bool)
        if self.batch:
            return self._apply_batch(messages_record_batch(messages, units), messages[0], messages[-1])
        keep = np.zeros(n, dtype=bool)
        skipped = np.zeros(n, dtype=bool)
        fn = self.fn
        for i, m in enumerate(messages):
            try:
                result = fn(m)
                if not isinstance(result, (bool, np.bool_)):
                    raise TypeError(f"returned {type(result).__name__} {result!r}, not a bool")
            except Exception as exc:  # the user's code may raise anything
                if self.on_error == "fail":
                    raise FilterError(self.name, m.topic, m.queue_id, m.queue_offset,
                                      f"{type(exc).__name__}: {exc}") from exc
                skipped[i] = True
                continue
            keep[i] = result
        return keep, skipped

    def apply_record_batch(self, batch, first: tuple[str, int, int], last: tuple[str, int, int]
                           ) -> tuple[np.ndarray, np.ndarray]:
        """The batch form on a ready ``RecordBatch`` (the data source's own): ``(keep, skipped)``."""
        return self._apply_batch(batch, _Where(*first), _Where(*last))

    def _apply_batch(self, batch, first, last) -> tuple[np.ndarray, np.ndarray]:
        n = batch.num_rows
        try:
            result = self.fn(batch)
            keep = _bool_array(result, n)
        except Exception as exc:  # the user's code may raise anything
            if self.on_error == "fail":
                raise FilterError(self.name, first.topic, first.queue_id, first.queue_offset,
                                  f"{type(exc).__name__}: {exc}", last_queue_offset=last.queue_offset) from exc
            return np.zeros(n, dtype=bool), np.ones(n, dtype=bool)
        return keep, np.zeros(n, dtype=bool)


class _Where:
    __slots__ = ("queue_id", "queue_offset", "topic")

    def __init__(self, topic: str, queue_id: int, queue_offset: int) -> None:
        self.topic, self.queue_id, self.queue_offset = topic, queue_id, queue_offset


def _bool_array(result: Any, n: int) -> np.ndarray:
    """A batch filter's result as a bool ndarray of length ``n`` (TypeError otherwise; nulls are False)."""
    if hasattr(result, "to_numpy") and hasattr(result, "null_count"):  # a pyarrow array / chunked array
        if not str(result.type) == "bool":
            raise TypeError(f"returned an Arrow {result.type} array, not bool")
        result = result.fill_null(False).to_numpy(zero_copy_only=False)
    arr = np.asarray(result)
    if arr.dtype != np.bool_:
        raise TypeError(f"returned an array of {arr.dtype}, not bool")
    if arr.shape != (n,):
        raise TypeError(f"returned {arr.shape[0] if arr.ndim == 1 else arr.shape} values for {n} rows")
    return arr


def as_message_filter(obj: Any, on_error: str = "fail") -> MessageFilter | None:
    """``obj`` (None, a callable, ``"package.module:function"`` or a :class:`MessageFilter`) as a MessageFilter."""
    if obj is None or isinstance(obj, MessageFilter):
        return obj
    return MessageFilter(obj, on_error=on_error)


def messages_record_batch(messages: Sequence[Message], units: dict[str, Any] | None = None):
    """A ``pyarrow.RecordBatch`` of :data:`MESSAGE_COLUMNS` for decoded messages.

    ``units`` may give ``tags_code``, ``msg_store_time`` and ``filter_bitmap`` (the ConsumeQueue and
    ext unit's values); without them those columns are NULL.
    """
    import pyarrow as pa  # deliberate lazy import: only the batch form needs pyarrow

    units = units or {}
    n = len(messages)
    cols = {
        "topic": [m.topic for m in messages],
        "queue_id": [m.queue_id for m in messages],
        "queue_offset": [m.queue_offset for m in messages],
        "commit_log_offset": [m.commit_log_offset for m in messages],
        "store_size": [m.store_size for m in messages],
        "tags_code": units.get("tags_code", [None] * n),
        "tags": [m.tags for m in messages],
        "keys": [m.keys for m in messages],
        "properties": None,  # built below from flat key and value arrays (much faster than per-row lists)
        "body": [m.body for m in messages],
        "born_timestamp": [m.born_timestamp for m in messages],
        "born_host": [m.born_host for m in messages],
        "store_timestamp": [m.store_timestamp for m in messages],
        "store_host": [m.store_host for m in messages],
        "sys_flag": [m.sys_flag for m in messages],
        "reconsume_times": [m.reconsume_times for m in messages],
        "msg_store_time": units.get("msg_store_time", [None] * n),
        "filter_bitmap": units.get("filter_bitmap", [None] * n),
    }
    sizes = np.fromiter((len(m.properties) for m in messages), dtype=np.int32, count=n)
    offsets = np.zeros(n + 1, dtype=np.int32)
    np.cumsum(sizes, out=offsets[1:])
    keys = pa.array([k for m in messages for k in m.properties], pa.string())
    values = pa.array([v for m in messages for v in m.properties.values()], pa.string())
    schema = message_schema()
    arrays = {f.name: pa.array(cols[f.name], f.type) for f in schema if f.name in cols and f.name != "properties"}
    arrays["properties"] = pa.MapArray.from_arrays(pa.array(offsets), keys, values)
    return filter_record_batch(arrays)


@functools.cache
def message_schema():
    """:data:`MESSAGE_COLUMNS` as a ``pyarrow.Schema``."""
    import pyarrow as pa  # deliberate lazy import: only the batch form needs pyarrow

    types = {"string": pa.string(), "int32": pa.int32(), "int64": pa.int64(), "binary": pa.binary(),
             "map<string, string>": pa.map_(pa.string(), pa.string())}
    return pa.schema([pa.field(name, types[t]) for name, t in MESSAGE_COLUMNS])


def filter_record_batch(columns: Mapping[str, Any]):
    """The ``pyarrow.RecordBatch`` a batch filter gets: ``columns`` (pyarrow arrays by name, at least
    every one of :data:`MESSAGE_COLUMNS`; others are left out) in :func:`message_schema` order and types.
    """
    import pyarrow as pa  # deliberate lazy import: only the batch form needs pyarrow

    schema = message_schema()
    arrays = []
    for field in schema:
        arr = columns[field.name] if field.name not in PROPERTY_COLUMNS or field.name in columns \
            else property_column(columns["properties"], field.name)
        arrays.append(arr if arr.type == field.type else arr.cast(field.type))
    return pa.RecordBatch.from_arrays(arrays, schema=schema)


def property_column(properties, name: str):
    """Column ``name`` of :data:`PROPERTY_COLUMNS` (``uniq_key``) from a ``properties`` map array: the
    property's value, NULL where absent (a map holds a key once, docs/data-path.md), with no Python
    object per row."""
    import pyarrow.compute as pc  # deliberate lazy import: only the batch form and the data source need pyarrow

    return pc.map_lookup(properties, PROPERTY_COLUMNS[name], "first")


def ext_columns(ext_batch, rows: np.ndarray | slice) -> dict:
    """``msg_store_time`` and ``filter_bitmap`` of units ``rows`` of a ``cq.readers.ext.ExtBatch`` as pyarrow
    arrays: NULL where there is no ext unit (``ext_batch`` None: none at all), the bitmap NULL where
    the unit has none. ``rows``: indices, or ``slice(start, stop)`` of consecutive units (whose
    bitmaps are then used in place)."""
    import pyarrow as pa  # deliberate lazy import: only the batch form and the data source need pyarrow

    n = rows.stop - rows.start if isinstance(rows, slice) else len(rows)
    if ext_batch is None:
        return {"msg_store_time": pa.nulls(n, pa.int64()), "filter_bitmap": pa.nulls(n, pa.binary())}
    found = ext_batch.found[rows]
    has = found & (ext_batch.bit_map_size[rows] >= 1)  # ExtBatch.has_bitmap, for these rows only
    bounds = ext_batch.bitmap_offsets
    if isinstance(rows, slice) and n and int(bounds[rows.stop] - bounds[rows.start]) <= 0x7FFFFFFF:
        # consecutive units: their bitmaps are one run of the batch's data, used in place
        a, b = rows.start, rows.stop
        offsets = (bounds[a:b + 1] - bounds[a]).astype(np.int32)
        data = ext_batch.bitmap_data[int(bounds[a]):int(bounds[b])]
        bitmap_type = pa.binary()
    else:
        rows = np.arange(rows.start, rows.stop) if isinstance(rows, slice) else rows
        starts = np.ascontiguousarray(bounds[rows])
        offsets, data = gather_spans(ext_batch.bitmap_data, starts, np.ascontiguousarray(bounds[rows + 1] - starts))
        bitmap_type = pa.large_binary()
    missing = ~found
    bitmaps = binary_array(bitmap_type, n, offsets, data, has)
    return {
        "msg_store_time": pa.array(ext_batch.msg_store_time[rows], mask=missing if missing.any() else None),
        "filter_bitmap": bitmaps if bitmap_type == pa.binary() else bitmaps.cast(pa.binary()),
    }


def records_record_batch(records: MessageColumns, slots: np.ndarray, ext_batch=None):
    """The batch filter's ``RecordBatch`` for decoded CommitLog records and their ConsumeQueue units.

    Every column but :data:`UNIT_COLUMNS` is the record's own field, as :class:`cq.Message` holds it
    (the Arrow buffers of :meth:`cq.CommitLog.decode_columns`, no Python object per row);
    ``tags_code`` is the unit's slot, or the ext unit's tags code where the slot holds an ext address
    (NULL where that unit cannot be read); ``msg_store_time`` and ``filter_bitmap`` are the ext
    unit's (:func:`ext_columns`).

    Parameters
    ----------
    records : cq.readers.columns.MessageColumns
        Holding at least the fields :data:`BATCH_RECORD_FIELDS`, e.g.
        ``CommitLog.decode_columns(offsets, BATCH_RECORD_FIELDS)``.
    slots : int64 array
        The units' ``tags_code`` slots (tags code or ext address), one per record.
    ext_batch : cq.readers.ext.ExtBatch, optional
        ``ConsumeQueueExt.read_batch(slots)``; None when the queue has no ext file.

    Examples
    --------
    >>> import cq
    >>> store = cq.Store("tests/data/golden_store")
    >>> units = store.consume_queue("GoldenFilterTopic", 0).read(0, 4)
    >>> records = store.commit_log.decode_columns(units["commit_log_offset"], BATCH_RECORD_FIELDS)
    >>> batch = records_record_batch(records, units["tags_code"])
    >>> batch.schema == message_schema(), batch.column("queue_offset").to_pylist()
    (True, [0, 1, 2, 3])
    """
    import pyarrow as pa  # deliberate lazy import: only the batch form needs pyarrow

    slots = np.asarray(slots, dtype=np.int64)
    rows = np.arange(len(slots))
    is_ext = slots <= fmt.MAX_ADDR
    tags_code = slots.copy()
    known = ~is_ext
    if ext_batch is not None:  # non-ext slots come back not found
        tags_code[ext_batch.found] = ext_batch.tags_code[ext_batch.found]
        known |= ext_batch.found
    columns = records.to_arrow(BATCH_RECORD_FIELDS)
    columns["tags_code"] = pa.array(tags_code, mask=~known)
    columns.update(ext_columns(ext_batch, rows))
    return filter_record_batch(columns)
