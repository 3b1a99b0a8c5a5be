"""Message trace: the records RocketMQ's clients write to the trace topic, decoded (docs/trace.md).

A client with message trace on sends what its send, consume, end-transaction and recall hooks saw
as messages of the trace topic (``RMQ_SYS_TRACE_TOPIC``, or the one the client or broker names).
Their layout is in docs/formats.md#trace-records; :func:`decode_trace_body` reads one message's
body into its records, and a record that does not read becomes a :class:`TraceError` naming the
trace message's CommitLog offset and the record's byte offset in the body, never dropped.

:func:`trace` finds the trace messages of a store or cluster (through ``find``: the trace messages'
``KEYS`` hold the traced messages' ids and keys, so an id or a key goes through the IndexFiles)
and gives their records; :func:`client_trace` gathers, for one message (its ``UNIQ_KEY``) and
optionally one group, what the clients reported: each send, each end of its transaction, each
delivery to a listener with its answer. ``rmqfilter why`` shows it beside the store's facts.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

import rmqfilter_java as java

from .. import format as fmt
from ..readers.commitlog import Message
from ..store.cluster import Cluster, broker_name, each_store
from ..store.store import Store
from .find import message_at, parse_offset_msg_id
from .search import find

__all__ = [
    "COLUMNS",
    "CONSUME_RETURN_TYPES",
    "ERROR_COLUMNS",
    "MESSAGE_TYPES",
    "TRACE_TOPIC",
    "TRACE_TYPES",
    "TRANSACTION_STATES",
    "ClientTrace",
    "Consumption",
    "TraceError",
    "TraceRecord",
    "TraceResult",
    "client_trace",
    "decode_trace_body",
    "has_trace_topic",
    "trace",
]

# docs/formats.md#trace-records
#: ``TopicValidator.RMQ_SYS_TRACE_TOPIC``: the trace topic unless a client or broker names another.
TRACE_TOPIC = "RMQ_SYS_TRACE_TOPIC"
#: ``TraceConstants.FIELD_SPLITOR``: ends each record (one byte in UTF-8, never inside a character).
FIELD_SEPARATOR = b"\x02"
#: ``TraceConstants.CONTENT_SPLITOR``: separates a record's fields.
CONTENT_SEPARATOR = "\x01"
PUB, SUB_BEFORE, SUB_AFTER, END_TRANSACTION, RECALL = "Pub", "SubBefore", "SubAfter", "EndTransaction", "Recall"
TRACE_TYPES = (PUB, SUB_BEFORE, SUB_AFTER, END_TRANSACTION, RECALL)
#: ``MessageType`` by ordinal.
MESSAGE_TYPES = ("Normal_Msg", "Trans_Msg_Half", "Trans_msg_Commit", "Delay_Msg", "Order_Msg")
#: ``LocalTransactionState`` names.
TRANSACTION_STATES = ("COMMIT_MESSAGE", "ROLLBACK_MESSAGE", "UNKNOW")
#: ``ConsumeReturnType`` by ordinal (a ``SubAfter``'s context code).
CONSUME_RETURN_TYPES = ("SUCCESS", "TIME_OUT", "EXCEPTION", "RETURNNULL", "FAILED")
#: The fewest fields each type reads with (the type itself counted).
_MIN_FIELDS = {PUB: 13, SUB_BEFORE: 8, SUB_AFTER: 6, END_TRANSACTION: 13, RECALL: 7}
#: Java's ``String.valueOf(null)``: a string the hook did not have.
_NULL = "null"

#: The trace table's columns: (name, type), type one of ``"string"``, ``"int"``, ``"long"``, ``"boolean"``
#: (every column may be NULL); ``rmqfilter trace`` and the data source's ``table=trace`` give these rows.
COLUMNS: tuple[tuple[str, str], ...] = (
    ("broker", "string"), ("trace_commit_log_offset", "long"), ("record_index", "int"), ("record_position", "int"),
    ("trace_type", "string"), ("timestamp", "long"), ("region_id", "string"), ("group", "string"),
    ("request_id", "string"), ("topic", "string"), ("msg_id", "string"), ("offset_msg_id", "string"),
    ("tags", "string"), ("keys", "string"), ("store_host", "string"), ("client_host", "string"),
    ("body_length", "int"), ("cost_ms", "int"), ("msg_type", "string"), ("success", "boolean"),
    ("retry_times", "int"), ("context_code", "string"), ("transaction_id", "string"),
    ("transaction_state", "string"), ("from_transaction_check", "boolean"), ("trace_born_host", "string"),
    ("trace_store_timestamp", "long"),
)
#: The columns of a record that does not read.
ERROR_COLUMNS: tuple[tuple[str, str], ...] = (
    ("broker", "string"), ("trace_commit_log_offset", "long"), ("record_index", "int"), ("record_position", "int"),
    ("reason", "string"), ("text", "string"),
)


@dataclass
class TraceRecord:
    """One record of a trace message (docs/formats.md#trace-records); fields a type lacks are None.

    ``trace_commit_log_offset`` is the trace message's record, ``record_index`` and ``record_position``
    the record's place in its body (0-based; byte offset); ``trace_born_host`` the client that sent it.
    """

    broker: str | None
    trace_commit_log_offset: int
    record_index: int
    record_position: int
    trace_type: str
    timestamp: int | None = None
    region_id: str | None = None
    group: str | None = None
    request_id: str | None = None
    topic: str | None = None
    msg_id: str | None = None
    offset_msg_id: str | None = None
    tags: str | None = None
    keys: str | None = None
    store_host: str | None = None
    client_host: str | None = None
    body_length: int | None = None
    cost_ms: int | None = None
    msg_type: str | None = None
    success: bool | None = None
    retry_times: int | None = None
    context_code: str | None = None
    transaction_id: str | None = None
    transaction_state: str | None = None
    from_transaction_check: bool | None = None
    trace_born_host: str | None = None
    trace_store_timestamp: int | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class TraceError:
    """A record of a trace message that does not read: where it is and why."""

    broker: str | None
    trace_commit_log_offset: int
    record_index: int
    record_position: int
    reason: str
    text: str

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def __str__(self) -> str:
        return (f"{self.broker}: trace message at CommitLog offset {self.trace_commit_log_offset}, record "
                f"{self.record_index} at byte {self.record_position} of its body: {self.reason} ({self.text})")


class _Bad(ValueError):
    """A field that does not read (its reason)."""


def _text(value: str) -> str | None:
    return None if value == _NULL else value


def _long(value: str, what: str) -> int:
    try:
        return int(java.parse_long(value))
    except ValueError as exc:
        raise _Bad(f"{what} {value!r} is not a long (Long.parseLong)") from exc


def _int(value: str, what: str) -> int:
    try:
        return java.parse_int(value)
    except ValueError as exc:
        raise _Bad(f"{what} {value!r} is not an int (Integer.parseInt)") from exc


def _ordinal(value: str, names: tuple[str, ...], what: str) -> str:
    i = _int(value, what)
    if not 0 <= i < len(names):
        raise _Bad(f"{what} {i} is no ordinal of {', '.join(names)}")
    return names[i]


def _fields(rec: TraceRecord, f: list[str]) -> None:
    """Fill ``rec`` from the fields ``f`` of its type (``f[0]``), docs/formats.md#trace-records."""
    kind = f[0]
    if kind in (PUB, SUB_BEFORE, END_TRANSACTION, RECALL):
        rec.timestamp = _long(f[1], "timestamp")
        rec.region_id, rec.group = _text(f[2]), f[3]
    if kind == PUB:
        rec.topic, rec.msg_id, rec.tags, rec.keys, rec.store_host = f[4], _text(f[5]), _text(f[6]), _text(f[7]), \
            _text(f[8])
        rec.body_length = _int(f[9], "body length")
        rec.cost_ms = _int(f[10], "cost")
        rec.msg_type = _ordinal(f[11], MESSAGE_TYPES, "message type")
        if len(f) == 13:
            rec.success = java.parse_boolean(f[12])
        else:
            rec.offset_msg_id, rec.success = _text(f[12]), java.parse_boolean(f[13])
            if len(f) >= 15:
                rec.client_host = _text(f[14])
    elif kind == SUB_BEFORE:
        rec.request_id, rec.msg_id = f[4], _text(f[5])
        rec.retry_times = _int(f[6], "retry times")
        rec.keys = _text(f[7])
    elif kind == SUB_AFTER:
        rec.request_id, rec.msg_id = f[1], _text(f[2])
        rec.cost_ms = _int(f[3], "cost")
        rec.success = java.parse_boolean(f[4])
        rec.keys = _text(f[5])
        if len(f) >= 7:
            rec.context_code = _ordinal(f[6], CONSUME_RETURN_TYPES, "context code")
        if len(f) >= 8 and f[7] != "":   # a cloud access channel's record ends after the context code
            rec.timestamp = _long(f[7], "timestamp")
        if len(f) >= 9:
            rec.group = f[8]
    elif kind == END_TRANSACTION:
        rec.topic, rec.msg_id, rec.tags, rec.keys, rec.store_host = f[4], _text(f[5]), _text(f[6]), _text(f[7]), \
            _text(f[8])
        rec.msg_type = _ordinal(f[9], MESSAGE_TYPES, "message type")
        rec.transaction_id = _text(f[10])
        if f[11] not in TRANSACTION_STATES:
            raise _Bad(f"transaction state {f[11]!r} is no name of {', '.join(TRANSACTION_STATES)}")
        rec.transaction_state = f[11]
        rec.from_transaction_check = java.parse_boolean(f[12])
    else:  # RECALL
        rec.topic, rec.msg_id = f[4], _text(f[5])
        rec.success = java.parse_boolean(f[6])


def decode_trace_body(body: bytes, *, broker: str | None = None, commit_log_offset: int = 0,
                      born_host: str | None = None, store_timestamp: int | None = None,
                      ) -> tuple[list[TraceRecord], list[TraceError]]:
    """The records of one trace message's (uncompressed) body, and those that do not read.

    Parameters
    ----------
    body : bytes
        The body: records each ended by ``\\x02``, fields separated by ``\\x01`` (docs/formats.md#trace-records).
    broker, commit_log_offset, born_host, store_timestamp
        The trace message's broker, record offset, born host and store time, carried into each row.

    Returns
    -------
    (list of TraceRecord, list of TraceError)
        Every record in body order, each that does not read as an error with its byte offset.
    """
    records: list[TraceRecord] = []
    errors: list[TraceError] = []
    parts = body.split(FIELD_SEPARATOR)
    if parts and parts[-1] == b"":
        parts.pop()  # the last record's own separator
    pos = 0
    for index, raw in enumerate(parts):
        start, pos = pos, pos + len(raw) + 1

        def bad(reason: str, raw=raw, index=index, start=start) -> None:
            errors.append(TraceError(broker, commit_log_offset, index, start, reason,
                                     raw[:80].decode("utf-8", "backslashreplace")
                                     .replace("\x01", "|") + ("..." if len(raw) > 80 else "")))

        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            bad(f"not UTF-8 at byte {start + exc.start} of the body")
            continue
        f = text.split(CONTENT_SEPARATOR)
        kind = f[0]
        if kind not in _MIN_FIELDS:
            bad(f"unknown record type {kind!r} (expected one of {', '.join(TRACE_TYPES)})" if kind else "an empty record")
            continue
        if len(f) < _MIN_FIELDS[kind]:
            bad(f"a {kind} record has {len(f)} fields, at least {_MIN_FIELDS[kind]} expected")
            continue
        rec = TraceRecord(broker, commit_log_offset, index, start, kind, trace_born_host=born_host,
                          trace_store_timestamp=store_timestamp)
        try:
            _fields(rec, f)
        except _Bad as exc:
            bad(str(exc))
            continue
        records.append(rec)
    return records, errors


@dataclass
class TraceResult:
    """What :func:`trace` read: the records, those that did not read, and how the trace messages were found."""

    topic: str
    rows: list[TraceRecord]
    errors: list[TraceError]
    notes: list[str]
    trace_messages: int = 0

    def to_dict(self) -> dict[str, Any]:
        return {"topic": self.topic, "trace_messages": self.trace_messages, "rows": [r.to_dict() for r in self.rows],
                "errors": [e.to_dict() for e in self.errors], "notes": self.notes}


def has_trace_topic(store: Store | Cluster, topic: str | None = None) -> bool:
    """Whether some broker of ``store`` holds consume queues of the trace topic (default :data:`TRACE_TOPIC`)."""
    topic = TRACE_TOPIC if topic is None else topic
    return any(topic in one.topics() for _name, one in each_store(store))


def _resolve_msg_id(store: Store | Cluster, msg_id: str) -> tuple[str, str | None]:
    """``(uniq_key, offset_msg_id)`` of ``msg_id``: an offset message id of a record here names its ``UNIQ_KEY``
    (what the trace records and their keys hold), anything else is taken as the ``UNIQ_KEY``."""
    wanted = msg_id.strip().upper()
    parsed = parse_offset_msg_id(msg_id)
    if parsed is not None:
        for _name, one in each_store(store):
            m = message_at(one, parsed[1])
            if m is not None and m.msg_id == wanted:
                return m.properties.get(fmt.PROPERTY_UNIQ_KEY) or wanted, wanted
    return msg_id.strip(), None


def trace(store: Store | Cluster, *, topic: str | None = None, msg_id: str | None = None, key: str | None = None,
          uniq_key: str | None = None) -> TraceResult:
    """The trace records of ``store`` (a Store or a Cluster), all of them or those of one message (docs/trace.md).

    Parameters
    ----------
    topic : str, optional
        The trace topic (default :data:`TRACE_TOPIC`).
    msg_id : str, optional
        An offset message id (of a record of ``store``: its ``UNIQ_KEY`` is looked up, and a ``Pub``
        naming the offset id matches too) or a ``UNIQ_KEY``: the records about that message.
    uniq_key : str, optional
        The records whose message id is this ``UNIQ_KEY``.
    key : str, optional
        The records whose traced message's keys hold ``key``.

    Every trace message the lookup finds is decoded whole: a record of it that does not read is in
    ``errors`` (whichever message it was about), never dropped.

    Raises
    ------
    ValueError
        More than one of ``msg_id``, ``uniq_key``, ``key``.
    LookupError
        No broker holds the trace topic (a broker without ``traceTopicEnable`` and no client naming a topic).
    """
    if sum(x is not None for x in (msg_id, key, uniq_key)) > 1:
        raise ValueError("give one of msg_id, uniq_key, key")
    topic = TRACE_TOPIC if topic is None else topic
    if not has_trace_topic(store, topic):
        raise LookupError(f"trace topic {topic!r} has no consume queues in {store.root} (a broker creates "
                          "RMQ_SYS_TRACE_TOPIC with traceTopicEnable=true; a client may name its own with "
                          "customizedTraceTopic: give it with topic)")
    offset_id = None
    if msg_id is not None:
        uniq_key, offset_id = _resolve_msg_id(store, msg_id)
    look = uniq_key if uniq_key is not None else key
    found = find(store, topic=topic, key=look)  # the trace messages' KEYS hold the ids and keys they trace
    stores = {name if name is not None else broker_name(one)[0]: one for name, one in each_store(store)}
    rows: list[TraceRecord] = []
    errors: list[TraceError] = []
    for r in found.rows:
        msg = stores[r.broker].commit_log.read_message(r.commit_log_offset)
        recs, errs = decode_message(msg, r.broker)
        errors += errs
        rows += [x for x in recs if _about(x, uniq_key, offset_id, key)]
    return TraceResult(topic, rows, errors, found.notes, len(found.rows))


def decode_message(msg: Message, broker: str | None) -> tuple[list[TraceRecord], list[TraceError]]:
    """:func:`decode_trace_body` of trace message ``msg`` (its body uncompressed as the producer compressed it)."""
    return decode_trace_body(msg.uncompressed_body(), broker=broker, commit_log_offset=msg.commit_log_offset,
                             born_host=msg.born_host, store_timestamp=msg.store_timestamp)


def _about(rec: TraceRecord, uniq_key: str | None, offset_id: str | None, key: str | None) -> bool:
    if uniq_key is not None:
        return rec.msg_id == uniq_key or (offset_id is not None and rec.offset_msg_id == offset_id)
    if key is not None:
        return rec.keys is not None and key in rec.keys.split(fmt.KEY_SEPARATOR)
    return True


# ------------------------------------------------------------------ one message, for why
@dataclass
class Consumption:
    """One delivery of a message to a listener (a ``SubBefore``) and the listener's answer (its ``SubAfter``)."""

    group: str
    request_id: str
    received_at: int | None
    client: str | None
    retry_times: int | None
    success: bool | None = None
    cost_ms: int | None = None
    context_code: str | None = None
    answered_at: int | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class ClientTrace:
    """What the clients reported about one message (its ``UNIQ_KEY``): sends, transaction ends, recalls and,
    for each group (or the one asked), every delivery to a listener with its answer."""

    topic: str
    uniq_key: str
    group: str | None
    sends: list[TraceRecord] = field(default_factory=list)
    transactions: list[TraceRecord] = field(default_factory=list)
    recalls: list[TraceRecord] = field(default_factory=list)
    consumptions: list[Consumption] = field(default_factory=list)
    errors: list[TraceError] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {"trace_topic": self.topic, "uniq_key": self.uniq_key, "group": self.group,
                "sends": [r.to_dict() for r in self.sends], "transactions": [r.to_dict() for r in self.transactions],
                "recalls": [r.to_dict() for r in self.recalls],
                "consumptions": [c.to_dict() for c in self.consumptions],
                "errors": [e.to_dict() for e in self.errors]}


def client_trace(store: Store | Cluster, uniq_key: str, *, group: str | None = None,
                 topic: str | None = None) -> ClientTrace:
    """What the clients reported about the message ``uniq_key`` (docs/trace.md#why).

    A ``SubBefore`` and the ``SubAfter`` with its request id and message id make one
    :class:`Consumption`; the ``SubBefore``'s trace message's born host is the client that received it.
    ``group`` keeps one consumer group's deliveries (sends and transaction ends are the producer's).
    """
    res = trace(store, topic=topic, uniq_key=uniq_key)
    out = ClientTrace(res.topic, uniq_key, group, errors=res.errors)
    after: dict[tuple[str | None, str | None], TraceRecord] = {}
    for r in res.rows:
        if r.trace_type == SUB_AFTER:
            after.setdefault((r.request_id, r.msg_id), r)
    for r in sorted(res.rows, key=lambda x: (x.timestamp if x.timestamp is not None else 0)):
        if r.trace_type == PUB:
            out.sends.append(r)
        elif r.trace_type == END_TRANSACTION:
            out.transactions.append(r)
        elif r.trace_type == RECALL:
            out.recalls.append(r)
        elif r.trace_type == SUB_BEFORE and (group is None or r.group == group):
            c = Consumption(r.group, r.request_id, r.timestamp, r.trace_born_host, r.retry_times)
            a = after.get((r.request_id, r.msg_id))
            if a is not None:
                c.success, c.cost_ms, c.context_code, c.answered_at = a.success, a.cost_ms, a.context_code, a.timestamp
            out.consumptions.append(c)
    return out
