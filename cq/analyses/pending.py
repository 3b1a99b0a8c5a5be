"""The broker's pending work as tables: scheduled copies, transactions, dead letters (docs/paths.md#pending).

:func:`pending` reads, from a store alone, what the broker still has to do or gave up on:

- ``scheduled``: every ``SCHEDULE_TOPIC_XXXX`` copy (delay levels and the retries on their way to
  a ``%RETRY%`` topic) with its real topic, its due time (the unit's tags code) and whether the
  broker's schedule service has delivered it (``config/delayOffset.json``); and every timer copy
  (``rmq_sys_wheel_timer``, due at its ``TIMER_OUT_MS``), delivered once its real topic holds a
  record of its ``UNIQ_KEY`` or the timer's progress (``config/timercheck``) is past its due time,
  ``recalled`` when a recall's marker (``TIMER_DEL_UNIQKEY``) names it (the markers are no rows);
- ``transactions``: one row per transaction half (``RMQ_SYS_TRANS_HALF_TOPIC``, its re-put
  copies counted as checks) with its status: ``committed`` (a COMMIT record of its ``UNIQ_KEY``
  is in the real topic), ``rolled_back`` (an op record resolves one of its copies, no commit),
  ``check_limit`` (the broker moved it to ``TRANS_CHECK_MAX_TIME_TOPIC``) or ``unresolved``;
- ``dead_letters``: every ``%DLQ%{group}`` record with its origin message id and topic,
  reconsume times, and the store time of the original;
- ``pops``: every message a POP group popped, one row per pop, as the broker's revive log holds
  it (:mod:`cq.analyses.pop`): ``acked``, ``in_flight`` (invisible until its due time) or
  ``revived`` (the broker took it back for the group's next pop).

``rmqfilter pending`` prints them; the data source's ``table`` option (``scheduled``,
``transactions``, ``dead_letters``, ``pops``) gives the same rows to Spark. The paths and what the real
broker does on each are in ``docs/paths.md``.
"""
from __future__ import annotations

from .. import format as fmt
from ..readers.commitlog import Message
from ..store.releases import check_message_rocksdb
from ..store.store import Store
from .find import message_at, parse_offset_msg_id, topic_records, unit_tags_code
from .paths import _delay_offsets, _lookup, _resolved_halves
from .pop import read_revive_log

__all__ = ["COLUMNS", "TABLES", "pending"]

#: Each table's columns: (name, type), type one of ``"string"``, ``"int"``, ``"long"`` (the data
#: source maps them to Spark's types; every column may be NULL).
COLUMNS: dict[str, tuple[tuple[str, str], ...]] = {
    "scheduled": (
        ("kind", "string"), ("delay_level", "int"), ("queue_offset", "long"), ("status", "string"), ("due_at_ms", "long"),
        ("real_topic", "string"), ("real_queue_id", "int"), ("retry_topic", "string"), ("uniq_key", "string"),
        ("keys", "string"), ("tags", "string"), ("reconsume_times", "int"), ("store_timestamp", "long"),
        ("commit_log_offset", "long"), ("msg_id", "string"),
    ),
    "transactions": (
        ("uniq_key", "string"), ("status", "string"), ("real_topic", "string"), ("real_queue_id", "int"),
        ("producer_group", "string"), ("check_times", "int"), ("half_copies", "int"), ("first_store_ms", "long"),
        ("last_store_ms", "long"), ("keys", "string"), ("tags", "string"), ("half_commit_log_offset", "long"),
        ("commit_commit_log_offset", "long"),
    ),
    "dead_letters": (
        ("group", "string"), ("queue_id", "int"), ("queue_offset", "long"), ("uniq_key", "string"),
        ("origin_msg_id", "string"), ("origin_topic", "string"), ("reconsume_times", "int"),
        ("store_timestamp", "long"), ("first_store_ms", "long"), ("keys", "string"), ("tags", "string"),
        ("commit_log_offset", "long"), ("msg_id", "string"),
    ),
    "pops": (
        ("group", "string"), ("topic", "string"), ("queue_id", "int"), ("queue_offset", "long"), ("status", "string"),
        ("pop_time", "long"), ("invisible_time", "long"), ("due_at_ms", "long"), ("uniq_key", "string"),
        ("keys", "string"), ("tags", "string"), ("reconsume_times", "int"), ("revive_topic", "string"),
        ("revive_queue_id", "int"), ("revive_offset", "long"), ("checkpoint_commit_log_offset", "long"),
        ("ack_commit_log_offset", "long"),
    ),
}
TABLES = tuple(COLUMNS)

#: ``kind`` of a scheduled row: a delay-level copy (``SCHEDULE_TOPIC_XXXX``) or a 5.x timer copy.
KIND_DELAY, KIND_TIMER = "delay_level", "timer"
#: ``status`` values.
SCHEDULED, DELIVERED, RECALLED = "scheduled", "delivered", "recalled"
COMMITTED, ROLLED_BACK, CHECK_LIMIT, UNRESOLVED = "committed", "rolled_back", "check_limit", "unresolved"
ACKED, IN_FLIGHT, REVIVED = "acked", "in_flight", "revived"


def _int(text: str | None) -> int | None:
    try:
        return int(text) if text is not None else None
    except ValueError:
        return None


def scheduled_rows(store: Store) -> list[dict]:
    delay = _delay_offsets(store)
    rows = []
    for q, m, slot in topic_records(store, fmt.SCHEDULE_TOPIC):
        level = q + 1
        due = unit_tags_code(store, fmt.SCHEDULE_TOPIC, q, slot)    # docs/formats.md#tagscode-slot
        p = m.properties
        rows.append({
            "kind": KIND_DELAY, "delay_level": level, "queue_offset": m.queue_offset,
            "status": SCHEDULED if m.queue_offset >= delay.get(level, 0) else DELIVERED, "due_at_ms": due,
            "real_topic": p.get(fmt.PROPERTY_REAL_TOPIC), "real_queue_id": _int(p.get(fmt.PROPERTY_REAL_QUEUE_ID)),
            "retry_topic": p.get(fmt.PROPERTY_RETRY_TOPIC), "uniq_key": p.get(fmt.PROPERTY_UNIQ_KEY),
            "keys": p.get(fmt.PROPERTY_KEYS), "tags": p.get(fmt.PROPERTY_TAGS), "reconsume_times": m.reconsume_times,
            "store_timestamp": m.store_timestamp, "commit_log_offset": m.commit_log_offset, "msg_id": m.msg_id,
        })
    timers = [m for _q, m, _slot in topic_records(store, fmt.TIMER_TOPIC)]
    # a recall's marker is no message: it names the one the broker drops (docs/paths.md#timers)
    recalled = {m.properties[fmt.PROPERTY_TIMER_DEL_UNIQKEY] for m in timers
                if fmt.PROPERTY_TIMER_DEL_UNIQKEY in m.properties}
    check = None
    if timers:
        with store.timer_files("the timer's due times") as files:   # docs/formats.md#message-rocksdb
            check = files.checkpoint
    for m in timers:
        p = m.properties
        real, uniq = p.get(fmt.PROPERTY_REAL_TOPIC), p.get(fmt.PROPERTY_UNIQ_KEY)
        if fmt.PROPERTY_TIMER_DEL_UNIQKEY in p:
            continue
        if real is not None and real.startswith(fmt.REVIVE_TOPIC_PREFIX):
            continue    # a POP checkpoint or ack on its way to the revive log (cq.analyses.pop), not a message
        due = _int(p.get(fmt.PROPERTY_TIMER_OUT_MS))
        status = SCHEDULED
        if real is not None and uniq is not None and real in store.topics() and _lookup(store, [real], None, uniq)[0]:
            status = DELIVERED
        elif real is not None and uniq is not None and not recalled.isdisjoint(fmt.timer_delete_keys(real, uniq)):
            status = RECALLED
        elif check is not None and due is not None and check.fired(due):
            status = DELIVERED      # the timer's progress is past it (config/timercheck)
        rows.append({
            "kind": KIND_TIMER, "delay_level": None, "queue_offset": m.queue_offset,
            "status": status, "due_at_ms": due,
            "real_topic": real, "real_queue_id": _int(p.get(fmt.PROPERTY_REAL_QUEUE_ID)),
            "retry_topic": p.get(fmt.PROPERTY_RETRY_TOPIC), "uniq_key": uniq, "keys": p.get(fmt.PROPERTY_KEYS),
            "tags": p.get(fmt.PROPERTY_TAGS), "reconsume_times": m.reconsume_times,
            "store_timestamp": m.store_timestamp, "commit_log_offset": m.commit_log_offset, "msg_id": m.msg_id,
        })
    return rows


def transaction_rows(store: Store) -> list[dict]:
    check_message_rocksdb(store.root, "trans", "the transaction table")   # docs/formats.md#message-rocksdb
    halves: dict[str, list[Message]] = {}
    check_max: set[str] = set()
    for topic in (fmt.TRANS_HALF_TOPIC, fmt.TRANS_CHECK_MAX_TIME_TOPIC):
        for _q, m, _slot in topic_records(store, topic):
            uniq = m.properties.get(fmt.PROPERTY_UNIQ_KEY) or m.msg_id
            halves.setdefault(uniq, []).append(m)
            if topic == fmt.TRANS_CHECK_MAX_TIME_TOPIC:
                check_max.add(uniq)
    resolved = _resolved_halves(store) if halves else {}
    rows = []
    for uniq, copies in halves.items():
        first = copies[0]
        p = first.properties
        real = p.get(fmt.PROPERTY_REAL_TOPIC)
        commit = None
        if real is not None and real in store.topics():
            found, _how, _note = _lookup(store, [real], None, uniq)
            commit = next((m for m in found if m.transaction_type == fmt.TRANSACTION_COMMIT_TYPE), None)
        if commit is not None:
            status = COMMITTED
        elif any(c.topic == fmt.TRANS_HALF_TOPIC and c.queue_offset in resolved for c in copies):
            status = ROLLED_BACK
        elif uniq in check_max:
            status = CHECK_LIMIT
        else:
            status = UNRESOLVED
        rows.append({
            "uniq_key": uniq, "status": status, "real_topic": real, "real_queue_id": _int(p.get(fmt.PROPERTY_REAL_QUEUE_ID)),
            "producer_group": p.get(fmt.PROPERTY_PRODUCER_GROUP),
            "check_times": max(_int(c.properties.get(fmt.PROPERTY_TRANSACTION_CHECK_TIMES)) or 0 for c in copies),
            "half_copies": len(copies), "first_store_ms": min(c.store_timestamp for c in copies),
            "last_store_ms": max(c.store_timestamp for c in copies), "keys": p.get(fmt.PROPERTY_KEYS),
            "tags": p.get(fmt.PROPERTY_TAGS), "half_commit_log_offset": first.commit_log_offset,
            "commit_commit_log_offset": commit.commit_log_offset if commit is not None else None,
        })
    return rows


def dead_letter_rows(store: Store) -> list[dict]:
    rows = []
    for topic in sorted(t for t in store.topics() if t.startswith(fmt.DLQ_GROUP_TOPIC_PREFIX)):
        group = topic[len(fmt.DLQ_GROUP_TOPIC_PREFIX):]
        for q, m, _slot in topic_records(store, topic):
            p = m.properties
            origin_id = p.get(fmt.PROPERTY_ORIGIN_MESSAGE_ID)
            parsed = parse_offset_msg_id(origin_id) if origin_id else None
            origin = message_at(store, parsed[1]) if parsed is not None else None
            if origin is not None and origin.msg_id != origin_id.strip().upper():
                origin = None
            rows.append({
                "group": group, "queue_id": q, "queue_offset": m.queue_offset, "uniq_key": p.get(fmt.PROPERTY_UNIQ_KEY),
                "origin_msg_id": origin_id, "origin_topic": p.get(fmt.PROPERTY_RETRY_TOPIC),
                "reconsume_times": m.reconsume_times, "store_timestamp": m.store_timestamp,
                "first_store_ms": origin.store_timestamp if origin is not None else None,
                "keys": p.get(fmt.PROPERTY_KEYS), "tags": p.get(fmt.PROPERTY_TAGS),
                "commit_log_offset": m.commit_log_offset, "msg_id": m.msg_id,
            })
    return rows


def pop_rows(store: Store) -> list[dict]:
    rows = []
    log = store.commit_log
    for p in read_revive_log(store).pops():
        ck = p.checkpoint
        msg = None
        if ck.topic in store.topics() and ck.queue_id in store.queue_ids(ck.topic):
            cqueue = store.consume_queue(ck.topic, ck.queue_id)
            if cqueue.min_offset <= p.queue_offset < cqueue.max_offset:
                phys, size, _slot = cqueue.unit(p.queue_offset)
                if log.min_offset <= phys and phys + size <= log.max_offset:
                    msg = log.read_message(phys)
        props = msg.properties if msg is not None else {}
        rows.append({
            "group": ck.group, "topic": ck.topic, "queue_id": ck.queue_id, "queue_offset": p.queue_offset,
            "status": ACKED if p.acked else REVIVED if p.revived else IN_FLIGHT, "pop_time": ck.pop_time,
            "invisible_time": ck.invisible_time, "due_at_ms": ck.due_at_ms,
            "uniq_key": props.get(fmt.PROPERTY_UNIQ_KEY), "keys": props.get(fmt.PROPERTY_KEYS),
            "tags": props.get(fmt.PROPERTY_TAGS), "reconsume_times": msg.reconsume_times if msg is not None else None,
            "revive_topic": ck.revive_topic, "revive_queue_id": ck.revive_queue_id, "revive_offset": ck.revive_offset,
            "checkpoint_commit_log_offset": ck.commit_log_offset, "ack_commit_log_offset": p.ack_commit_log_offset,
        })
    return rows


_BUILDERS = {"scheduled": scheduled_rows, "transactions": transaction_rows, "dead_letters": dead_letter_rows,
             "pops": pop_rows}


def pending(store: Store, table: str) -> list[dict]:
    """The rows of one pending-work table (``"scheduled"``, ``"transactions"``, ``"dead_letters"`` or ``"pops"``).

    Each row is a dict with exactly :data:`COLUMNS` ``[table]``'s names, in that order.

    Raises
    ------
    ValueError
        An unknown table.
    cq.readers.config.ConfigFormatError
        ``config/delayOffset.json`` is malformed (names the file and the place).
    cq.StoreFormatError
        A transaction op record whose body is not a list of queue offsets, a POP checkpoint or
        ack whose body is not the broker's JSON, or a timer file cut short or corrupt
        (``config/timercheck``, ``timerlog/``, ``timerwheel``; names the file and offset).
    """
    if table not in _BUILDERS:
        raise ValueError(f"unknown pending table {table!r}: expected one of {', '.join(TABLES)}")
    return _BUILDERS[table](store)
