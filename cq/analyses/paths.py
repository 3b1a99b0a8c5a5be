"""Where a message is on its way to a group: every copy of it in the store, and the one state that says why.

:func:`why_every_copy` (``rmqfilter why``) finds every copy a message left in the store and says
what happened to it for one group: the copies share the message's ``UNIQ_KEY``, and the broker's
IndexFiles list each under ``{topic}#{UNIQ_KEY}`` for its topic, the delay-level topic
``SCHEDULE_TOPIC_XXXX``, the transaction half topics, and the group's retry, POP retry and
dead-letter topics (a scan of those topics where the store has no index, and the answer says
so). The copy in the topic itself goes through :func:`cq.analyses.why.why_unit` (the filter's
one home), then the group's committed offsets, retry and DLQ copies and, for a POP group, the
broker's revive log (:mod:`cq.analyses.pop`) decide between ``consumed``, ``pending``,
``retrying``, ``dead_letter`` and ``in_flight``. ``docs/paths.md`` draws the paths and states
what the real broker of the test harness does on each; ``docs/why.md`` shows the output.
"""
from __future__ import annotations

import os
import time
from dataclasses import dataclass, replace
from typing import Any

from .. import format as fmt
from ..errors import StoreFormatError
from ..filter.subscription import DEFAULT_BLOOM
from ..readers import config as cfg
from ..readers.commitlog import Message
from ..store.cluster import Cluster
from ..store.releases import check_message_rocksdb
from ..store.store import Store
from .find import (
    MessageNotFoundError,
    batch_message_at,
    brokers_to_ask,
    check_message_args,
    compaction_positions,
    find_batch_messages,
    in_topic,
    message_at,
    parse_offset_msg_id,
    position,
    query_index,
    records_by_uniq_key,
    scan_tier,
    scan_topic,
    unit_tags_code,
)
from .pop import ReviveLog, pop_retry_topics, read_revive_log
from .why import Subscription, Why, WhyStep, ask_replicas, resolve_subscription, why_unit
from .why_codes import DROPPED_BY_COMPACTION, DROPPED_BY_EXPIRY, INFO
from .why_places import why_batch_message
from .why_render import DROPPED_BY_TEXT

__all__ = [
    "STATES",
    "Copy",
    "MessagePath",
    "group_topics",
    "why_every_copy",
]

#: The states (docs/paths.md#states), in the order a person reads them.
CONSUMED, PENDING, FILTERED, SCHEDULED = "consumed", "pending", "filtered", "scheduled"
UNCOMMITTED, ROLLED_BACK, RETRYING, DEAD_LETTER = "uncommitted", "rolled_back", "retrying", "dead_letter"
IN_FLIGHT, GATED, EXPIRED, RECALLED = "in_flight", "gated", "expired", "recalled"
COMPACTED = "compacted"
STATES = (CONSUMED, PENDING, FILTERED, SCHEDULED, RECALLED, UNCOMMITTED, ROLLED_BACK, RETRYING, DEAD_LETTER,
          IN_FLIGHT, GATED, EXPIRED, COMPACTED)

#: ``PermName.PERM_READ``: a topic without it serves no pulls.
PERM_READ = 1 << 2

#: Roles of a copy.
ROLE_TOPIC, ROLE_SCHEDULED, ROLE_HALF, ROLE_CHECK_MAX = "topic", "scheduled", "transaction_half", "check_max"
ROLE_TIMER = "timer"
#: A timer recall's marker (``TIMER_DEL_UNIQKEY``, docs/paths.md#timers): it carries the recalled message's UNIQ_KEY.
ROLE_RECALL = "timer_recall"
ROLE_RETRY, ROLE_DLQ = "retry", "dead_letter"
#: A POP group's revived copy, in its POP retry topic (docs/paths.md#pop).
ROLE_POP_RETRY = "pop_retry"


def group_topics(topic: str, group: str) -> list[str]:
    """The topics a copy of a message of ``topic`` can be in, for ``group`` (docs/paths.md)."""
    return [topic, fmt.SCHEDULE_TOPIC, fmt.TIMER_TOPIC, fmt.TRANS_HALF_TOPIC, fmt.TRANS_CHECK_MAX_TIME_TOPIC,
            fmt.RETRY_GROUP_TOPIC_PREFIX + group, *pop_retry_topics(group, topic), fmt.DLQ_GROUP_TOPIC_PREFIX + group]


@dataclass(frozen=True)
class Copy:
    """One copy of a message: a CommitLog record of one of :func:`group_topics`.

    Attributes
    ----------
    role : str
        ``"topic"``, ``"scheduled"`` (a delay-level copy), ``"timer"``, ``"timer_recall"`` (a
        recall's marker), ``"transaction_half"``, ``"check_max"``, ``"retry"``, ``"pop_retry"``
        (a POP group's revived copy) or ``"dead_letter"``.
    message : cq.Message
        The record.
    real_topic : str or None
        ``REAL_TOPIC``: where the broker delivers a scheduled copy or commits a half.
    """

    role: str
    message: Message
    real_topic: str | None = None

    def to_dict(self) -> dict[str, Any]:
        m = self.message
        return {"role": self.role, "topic": m.topic, "queue_id": m.queue_id, "queue_offset": m.queue_offset,
                "commit_log_offset": m.commit_log_offset, "msg_id": m.msg_id, "store_timestamp": m.store_timestamp,
                "reconsume_times": m.reconsume_times, "real_topic": self.real_topic}

    def __str__(self) -> str:
        m = self.message
        real = f" (REAL_TOPIC {self.real_topic})" if self.real_topic and self.real_topic != m.topic else ""
        return (f"{self.role:<16} {m.topic} queue {m.queue_id} offset {m.queue_offset}{real}, CommitLog offset "
                f"{m.commit_log_offset}, stored {m.store_timestamp}, reconsumeTimes {m.reconsume_times}")


@dataclass(frozen=True)
class MessagePath:
    """One message's copies and its state for one group (:func:`why_every_copy`).

    Attributes
    ----------
    topic, group : str
    uniq_key : str or None
    state : str
        One of :data:`STATES`.
    sentence : str
        What happened, in one sentence a person can act on.
    fields : dict
        The state's facts: ``due_at_ms`` (scheduled, retrying, in_flight), ``reconsume_times`` (retrying,
        dead_letter, in_flight), ``pop`` (in_flight, and a POP group's consumed or retrying:
        the last pop's checkpoint), ``check_times``, ``first_store_ms``, ``age_ms`` (uncommitted),
        ``dropped_by`` (filtered, expired), ``reason`` (gated).
    copies : list of Copy
    steps : list of cq.analyses.why.WhyStep
        The evidence of each decision after the filter's.
    why : cq.analyses.why.Why or None
        The copy in the topic walked through the group's filter (None when there is none).
    found_by, note : str
    """

    topic: str
    group: str
    subscription: Subscription
    uniq_key: str | None
    state: str
    sentence: str
    fields: dict
    copies: list[Copy]
    steps: list[WhyStep]
    why: Why | None
    found_by: str
    note: str

    @property
    def delivered(self) -> bool:
        """Whether the group's filter lets the topic copy through (as :attr:`Why.delivered`)."""
        return self.why is not None and self.why.delivered

    def to_dict(self) -> dict[str, Any]:
        """The :meth:`Why.to_dict` of the topic copy (when there is one) plus ``state``, ``sentence``,
        the state's fields, ``copies`` and ``path_steps``."""
        if self.why is not None:
            doc = self.why.to_dict()
            doc["found_by"], doc["note"] = self.found_by, self.note
        else:
            seed = self.copies[0].message
            doc = {"topic": self.topic, "group": self.group, "subscription": self.subscription.to_dict(),
                   "queue_id": None, "queue_offset": None, "commit_log_offset": None, "size": None,
                   "msg_id": seed.msg_id, "found_by": self.found_by, "note": self.note, "delivered": False,
                   "dropped_by": None, "verdict": None, "steps": []}
        doc.update({"uniq_key": self.uniq_key, "state": self.state, "sentence": self.sentence, **self.fields,
                    "copies": [c.to_dict() for c in self.copies], "path_steps": [s.to_dict() for s in self.steps]})
        return doc

    def __str__(self) -> str:
        lines = [f"state     {self.state.upper()}: {self.sentence}", f"found     {self.note}", "copies"]
        lines.extend("  " + str(c) for c in self.copies)
        if self.steps:
            lines.append("path")
            for i, s in enumerate(self.steps, 1):
                lines.append(f"{i}. {s.title}")
                lines.extend("     " + line for line in s.detail.splitlines())
        if self.why is not None:
            lines.extend(["", "the copy in the topic, through the group's filter:", str(self.why)])
        return "\n".join(lines)


# ------------------------------------------------------------------ finding the copies
def _role(msg: Message, topic: str, group: str) -> tuple[str, str | None] | None:
    """The copy's role for (``topic``, ``group``), or None when it belongs to another topic."""
    real = msg.properties.get(fmt.PROPERTY_REAL_TOPIC)
    retry_topic = fmt.RETRY_GROUP_TOPIC_PREFIX + group
    if in_topic(msg, topic):     # its own topic, or an LMQ it was dispatched to (docs/formats.md#lmq)
        return ROLE_TOPIC, real
    if msg.topic == fmt.SCHEDULE_TOPIC and real in (topic, retry_topic):
        return ROLE_SCHEDULED, real
    if msg.topic == fmt.TIMER_TOPIC and real == topic:
        return (ROLE_RECALL if fmt.PROPERTY_TIMER_DEL_UNIQKEY in msg.properties else ROLE_TIMER), real
    if msg.topic == fmt.TRANS_HALF_TOPIC and real == topic:
        return ROLE_HALF, real
    if msg.topic == fmt.TRANS_CHECK_MAX_TIME_TOPIC and real == topic:
        return ROLE_CHECK_MAX, real
    if msg.topic == retry_topic:
        return ROLE_RETRY, real
    if msg.topic in pop_retry_topics(group, topic):
        return ROLE_POP_RETRY, real
    if msg.topic == fmt.DLQ_GROUP_TOPIC_PREFIX + group:
        return ROLE_DLQ, real
    return None


def _lookup(store: Store, topics: list[str], key: str | None, uniq_key: str | None) -> tuple[list[Message], str, str]:
    """Records of ``topics`` with the key or UNIQ_KEY: through the IndexFiles, else a scan (and why);
    each record once, and of its own topic (``find.query_index``, ``find.scan_topic``)."""
    wanted = uniq_key if uniq_key is not None else key
    what = f"UNIQ_KEY {wanted!r}" if uniq_key is not None else f"key {wanted!r}"
    present = [t for t in topics if t in store.topics()]
    # the records the broker serves from its tier: neither the local IndexFiles nor its files hold them
    tiered = [m for t in present for m in scan_tier(store, t, key, uniq_key)]
    indexed, _candidates, why_scan, _covered, _files = query_index(store, topics, key, uniq_key,
                                                                   served_from=lambda msg, t: msg.topic == t)
    if indexed is not None:
        found = dict(indexed)  # a record indexed under two of its keys, once
        if found or tiered:
            where = sorted({m.topic for m in [*tiered, *found.values()]})
            return [*tiered, *found.values()], "index", f"{what} found in the index files under {', '.join(where)}"
        why_scan = f"{what} is not in the index files under {', '.join(topics)}"
    found_list = tiered + [m for t in present for m in scan_topic(store, t, key, uniq_key)]
    if not found_list:
        return [], "scan", f"a scan of topic {', '.join(present)} found no {what} ({why_scan})"
    where = sorted({m.topic for m in found_list})
    return found_list, "scan", f"{what} found by scanning topic {', '.join(where)}: {why_scan}"


# ------------------------------------------------------------------ the broker's progress files
def _delay_offsets(store: Store) -> dict[int, int]:
    return cfg.read_delay_offsets(store.config_path(cfg.DELAY_OFFSET_FILE))


def _resolved_halves(store: Store) -> dict[int, Message]:
    """Half queue offset -> the op record (``RMQ_SYS_TRANS_OP_HALF_TOPIC``, tag ``d``) that resolved it."""
    out: dict[int, Message] = {}
    if fmt.TRANS_OP_HALF_TOPIC not in store.topics():
        return out
    log = store.commit_log
    for q in store.queue_ids(fmt.TRANS_OP_HALF_TOPIC):
        cqueue = store.consume_queue(fmt.TRANS_OP_HALF_TOPIC, q)
        for off in range(cqueue.min_offset, cqueue.max_offset):
            phys, _size, _slot = cqueue.unit(off)
            if not log.min_offset <= phys < log.max_offset:
                continue
            op = log.read_message(phys)
            if op.tags != fmt.TRANS_OP_TAG:
                continue
            text = op.body.decode("utf-8", "replace")
            for token in text.split(","):
                if not token:
                    continue
                try:
                    out.setdefault(int(token), op)
                except ValueError:
                    raise StoreFormatError(
                        f"the body {text!r} of the transaction op record at CommitLog offset {phys} holds {token!r}, "
                        "not a half queue offset", op._path, op._file_offset) from None
    return out


# ------------------------------------------------------------------ the state
def _step(name: str, title: str, reason: str, detail: str, evidence: dict | None = None) -> WhyStep:
    """A step of a message's path, worded here (why_render's ``step_title`` / ``step_detail`` read the words
    from its ``data``): paths' steps are state the analysis found, not the broker's filter steps."""
    return WhyStep(name, INFO, reason, evidence or {}, {"title": title, "detail": detail})


def _config_source(store: Store, name: str) -> str:
    """Where the store keeps config file ``name``'s table: ``config/{name}``, or the RocksDB
    database holding it instead (``config/subscriptionGroups``, ``config/rdb``)."""
    rocks = store.layout.rocksdb_table_of(name)
    return f"{cfg.CONFIG_DIR}/{name}" if rocks is None else f"RocksDB {os.path.relpath(rocks, store.root)}"


def _gate(store: Store, topic: str, group: str) -> tuple[str, str] | None:
    """Why the group cannot consume at all (reason, sentence), or None."""
    settings = store.subscription_groups().get(group)
    if settings is not None and settings.get("consumeEnable") is False:
        return "group_disabled", (f"group {group} is disabled (consumeEnable=false in "
                                  f"{_config_source(store, cfg.SUBSCRIPTION_GROUP_FILE)}): the broker answers its "
                                  "pulls with NO_PERMISSION; enable the group to receive it")
    topic_config = store.topic_configs().get(topic)
    perm = topic_config.get("perm") if topic_config is not None else None
    if isinstance(perm, int) and not perm & PERM_READ:
        return "topic_not_readable", (f"topic {topic} is not readable (perm {perm} in "
                                      f"{_config_source(store, cfg.TOPICS_FILE)} lacks the read bit): the broker "
                                      "answers every pull with NO_PERMISSION")
    return None


def _int_property(m: Message, name: str) -> int | None:
    try:
        return int(m.properties[name])
    except (KeyError, ValueError):
        return None


def _committed(store: Store, group: str, topic: str, queue_id: int) -> int | None:
    return store.committed_offsets(group, topic).get(queue_id)


def _state_of(store: Store, topic: str, group: str, flt, sub: Subscription, uniq: str | None, copies: list[Copy],
              now_ms: int) -> tuple[str, str, dict, list[WhyStep], Why | None]:
    by_role: dict[str, list[Copy]] = {}
    for c in copies:
        by_role.setdefault(c.role, []).append(c)
    steps: list[WhyStep] = []
    topic_copies = [c for c in by_role.get(ROLE_TOPIC, ())
                    if c.message.transaction_type in (fmt.TRANSACTION_NOT_TYPE, fmt.TRANSACTION_COMMIT_TYPE)]
    if not topic_copies:
        return _before_topic(store, topic, group, uniq, by_role, steps, now_ms)
    seed = topic_copies[0].message
    queue_id, queue_offset = position(seed, topic)     # an LMQ's record: its place in the LMQ
    if topic in store.layout.batch_cq_topics:   # a message of a batch record (docs/reading.md#batchcq)
        w = why_batch_message(store, topic, group, flt, sub, queue_id, queue_offset)
    else:
        w = why_unit(store, topic, group, flt, sub, queue_id, queue_offset)
    if w.dropped_by == DROPPED_BY_EXPIRY:
        return EXPIRED, (f"the broker deleted the file that held it (queue {topic}/{queue_id} offset "
                         f"{queue_offset}) before {group} consumed it: it is lost for this group"), \
            {"dropped_by": w.dropped_by}, steps, w
    if w.dropped_by == DROPPED_BY_COMPACTION:  # docs/reading.md#compaction-topics
        return COMPACTED, (f"the broker's compaction removed it from compaction topic {topic} (queue {seed.queue_id} "
                           f"offset {seed.queue_offset}): {w.steps[0].detail}"), \
            {"dropped_by": w.dropped_by}, steps, w
    if not w.delivered:
        return FILTERED, (f"{group}'s filter drops it ({DROPPED_BY_TEXT[w.dropped_by]}, the steps below say why): the "
                          "group never receives it unless its subscription or the message's tags/properties change"), \
            {"dropped_by": w.dropped_by}, steps, w
    gate = _gate(store, topic, group)
    if gate is not None:
        reason, sentence = gate
        steps.append(_step("gate", "The group's and the topic's permissions", reason, sentence))
        return GATED, sentence, {"reason": reason}, steps, w
    dlq = by_role.get(ROLE_DLQ)
    if dlq:
        d = dlq[-1].message
        steps.append(_step("dead_letter", "Dead-letter queue", "dlq_copy",
                           f"a copy is in {d.topic} queue {d.queue_id} offset {d.queue_offset} (stored "
                           f"{d.store_timestamp}, reconsumeTimes {d.reconsume_times}): the broker never delivers it",
                           {"queue_offset": d.queue_offset, "reconsume_times": d.reconsume_times}))
        return DEAD_LETTER, (f"{group} failed it {d.reconsume_times} times and the broker moved it to {d.topic}: "
                             "fix the consumer, then resend it from the DLQ"), \
            {"reconsume_times": d.reconsume_times, "dlq_store_ms": d.store_timestamp}, steps, w
    retry = _retry_state(store, group, by_role, steps)
    if retry is not None:
        return (*retry, steps, w)
    pop = _pop_state(store, group, topic_copies[0], by_role, steps)
    if pop is not None:
        return (*pop, steps, w)
    committed = _committed(store, group, topic, queue_id)
    ev = {"committed_offset": committed, "queue_offset": queue_offset}
    if committed is not None and committed > queue_offset:
        steps.append(_step("committed_offset", "The group's committed offset", "past",
                           f"config/{cfg.CONSUMER_OFFSET_FILE}: {topic}@{group} queue {queue_id} is at "
                           f"{committed} > {queue_offset}", ev))
        return CONSUMED, f"{group} consumed it (its committed offset {committed} is past offset {queue_offset})", \
            {"committed_offset": committed}, steps, w
    where = "has no committed offset for the queue" if committed is None else f"is at {committed}"
    steps.append(_step("committed_offset", "The group's committed offset", "not_past",
                       f"config/{cfg.CONSUMER_OFFSET_FILE}: {topic}@{group} queue {queue_id} {where}", ev))
    return PENDING, (f"{group} will receive it: it passes the filter and waits in queue {queue_id} at offset "
                     f"{queue_offset}; start (or catch up) the group's consumers"), \
        {"committed_offset": committed}, steps, w


def _scheduled_copy(store: Store, c: Copy, delay: dict[int, int]) -> tuple[bool, int, dict]:
    """(still scheduled, due time, evidence) of a ``SCHEDULE_TOPIC_XXXX`` copy."""
    m = c.message
    level = m.queue_id + 1
    cqueue = store.consume_queue(fmt.SCHEDULE_TOPIC, m.queue_id)
    due = (unit_tags_code(store, fmt.SCHEDULE_TOPIC, m.queue_id, cqueue.unit(m.queue_offset)[2])   # formats.md#tagscode-slot
           if cqueue.min_offset <= m.queue_offset < cqueue.max_offset else None)
    next_offset = delay.get(level, 0)
    ev = {"level": level, "queue_offset": m.queue_offset, "delay_offset": next_offset, "due_at_ms": due,
          "real_topic": c.real_topic}
    return m.queue_offset >= next_offset, due, ev


def _retry_state(store: Store, group: str, by_role: dict, steps: list[WhyStep]) -> tuple[str, str, dict] | None:
    """``retrying`` when a retry copy for the group still waits (scheduled, or unconsumed in its retry topic)."""
    retry_topic = fmt.RETRY_GROUP_TOPIC_PREFIX + group
    delay = None
    for c in by_role.get(ROLE_SCHEDULED, ()):
        if c.real_topic != retry_topic:
            continue
        delay = _delay_offsets(store) if delay is None else delay
        waiting, due, ev = _scheduled_copy(store, c, delay)
        if waiting:
            steps.append(_step("retry_scheduled", "A retry on its way", "scheduled",
                               f"{fmt.SCHEDULE_TOPIC} queue {c.message.queue_id} offset {c.message.queue_offset} >= "
                               f"delayOffset[{ev['level']}] {ev['delay_offset']}: due at {due}", ev))
            return RETRYING, (f"{group} failed it; retry {c.message.reconsume_times} is due at {due} in {retry_topic}"), \
                {"reconsume_times": c.message.reconsume_times, "due_at_ms": due}
    for c in by_role.get(ROLE_RETRY, ()):
        m = c.message
        committed = _committed(store, group, retry_topic, m.queue_id)
        if committed is None or committed <= m.queue_offset:
            steps.append(_step("retry_pending", "A retry waiting in the retry topic", "not_consumed",
                               f"{retry_topic} queue {m.queue_id} offset {m.queue_offset}; the group's committed "
                               f"offset there is {committed}",
                               {"queue_offset": m.queue_offset, "committed_offset": committed}))
            return RETRYING, (f"{group} failed it; retry {m.reconsume_times} waits in {retry_topic} (offset "
                              f"{m.queue_offset}) for the group's consumers"), \
                {"reconsume_times": m.reconsume_times, "due_at_ms": m.store_timestamp}
    return None


def _pop_state(store: Store, group: str, topic_copy: Copy, by_role: dict,
               steps: list[WhyStep]) -> tuple[str, str, dict] | None:
    """A POP group's state from the revive log (docs/paths.md#pop): the last copy (the topic's, or the
    last revived one) decides by its last pop: acked, consumed; not acked and not yet revived, in
    flight; revived, or a revived copy not popped again, retrying. None when the group never
    popped the message and has no revived copy of it (its committed offset decides)."""
    revived = sorted(by_role.get(ROLE_POP_RETRY, ()), key=lambda c: c.message.commit_log_offset)
    log: ReviveLog = read_revive_log(store)
    if not revived and group not in log.groups():
        return None
    last = (revived or [topic_copy])[-1]
    m = last.message
    pops = log.pops_of(m.topic, group, m.queue_id, m.queue_offset)
    if not pops:
        if last.role != ROLE_POP_RETRY:
            return None     # never popped: the committed offset decides
        committed = _committed(store, group, m.topic, m.queue_id)
        steps.append(_step("pop_retry", "A revived copy waiting in the POP retry topic", "not_popped",
                           f"{m.topic} queue {m.queue_id} offset {m.queue_offset} (reconsumeTimes {m.reconsume_times}); "
                           f"no checkpoint of {group} pops it; the group's committed offset there is {committed}",
                           {"queue_offset": m.queue_offset, "committed_offset": committed}))
        return RETRYING, (f"{group} popped it and did not ack it in time: the broker revived it into {m.topic} "
                          f"(offset {m.queue_offset}), where the group's next pops receive it"), \
            {"reconsume_times": m.reconsume_times, "due_at_ms": m.store_timestamp}
    p = pops[-1]
    ck = p.checkpoint
    ev = p.to_dict()
    where = (f"{ck.revive_topic} queue {ck.revive_queue_id} offset {ck.revive_offset}"
             if ck.revive_offset is not None else f"{fmt.TIMER_TOPIC}, bound for {ck.revive_topic}")
    popped = (f"checkpoint in {where}: {group} popped {m.topic} queue {m.queue_id} offset {m.queue_offset} at "
              f"{ck.pop_time}, invisible for {ck.invisible_time} ms (until {ck.due_at_ms})")
    if p.acked:
        steps.append(_step("pop", "POP checkpoint and ack", "acked", popped + (
            f"; acked by the record at CommitLog offset {p.ack_commit_log_offset}"
            if p.ack_commit_log_offset is not None else "; acked in the checkpoint's bitmap"), ev))
        return CONSUMED, f"{group} popped it at {ck.pop_time} and acked it", {"pop": ev}
    if p.in_flight:
        steps.append(_step("pop", "POP checkpoint, no ack", "in_flight", popped + "; no ack record matches it and "
                           "the broker's revive service has not reached the checkpoint", ev))
        return IN_FLIGHT, (f"a POP consumer of {group} holds it: popped at {ck.pop_time} and not acked, it is "
                           f"invisible until {ck.due_at_ms}, when the broker revives it for the group's next pop "
                           "unless the consumer acks it first"), \
            {"due_at_ms": ck.due_at_ms, "reconsume_times": m.reconsume_times, "pop": ev}
    done = log.revive_progress.get((ck.revive_topic, ck.revive_queue_id))
    steps.append(_step("pop", "POP checkpoint revived", "revived", popped + "; no ack matches it, and the revive "
                       f"service has processed it (its offset on {ck.revive_topic} queue {ck.revive_queue_id} is "
                       f"{done})", ev))
    return RETRYING, (f"{group} popped it and did not ack it in time: the broker's revive service took it back, "
                      "and no revived copy is in the store yet"), \
        {"reconsume_times": m.reconsume_times, "due_at_ms": ck.due_at_ms, "pop": ev}


def _timer_unit_text(units, what: str) -> str:
    """Where the timerlog holds ``units`` of a record (the evidence of a step)."""
    if not len(units):
        return f"no timerlog unit points at {what} yet"
    u = units[-1]
    return (f"timerlog unit at position {int(u['position'])} (magic {int(u['magic'])}, due {int(u['due_ms'])}) points "
            f"at {what}")


def _timer_state(store: Store, topic: str, uniq: str | None, by_role: dict,
                 steps: list[WhyStep]) -> tuple[str, str, dict] | None:
    """A timer message with no copy in its topic (docs/paths.md#timers): recalled when a recall's
    marker names it; expired when the timer's progress (``config/timercheck``) is past its due
    time (fired, yet not in the topic); else scheduled. None when it has no timer copy and no recall."""
    timers = by_role.get(ROLE_TIMER, [])
    keys = fmt.timer_delete_keys(topic, uniq) if uniq is not None else ()
    markers = [c for c in by_role.get(ROLE_RECALL, ())
               if c.message.properties.get(fmt.PROPERTY_TIMER_DEL_UNIQKEY) in keys]
    if not timers and not markers:
        return None
    with store.timer_files("the timer's state") as files:
        check = files.checkpoint
        progress = (f"config/{fmt.TIMER_CHECK_FILE}: the timer has fired everything due before "
                    f"{check.last_read_time_ms} and read {fmt.TIMER_TOPIC} up to queue offset "
                    f"{check.last_timer_queue_offset}") if check is not None else f"no config/{fmt.TIMER_CHECK_FILE}"
        due, fired = None, False
        if timers:
            m = timers[-1].message
            due = _int_property(m, fmt.PROPERTY_TIMER_OUT_MS)
            fired = check is not None and due is not None and check.fired(due)
            steps.append(_step("timer", "Timer message", "fired" if fired else "not_fired",
                               f"a copy is in {fmt.TIMER_TOPIC} (queue {m.queue_id} offset {m.queue_offset}, "
                               f"{fmt.PROPERTY_TIMER_OUT_MS} {due}) and none is in {topic}; "
                               f"{_timer_unit_text(files.units_of(m.commit_log_offset), 'it')}; {progress}",
                               {"queue_offset": m.queue_offset, "due_at_ms": due,
                                "last_read_time_ms": check.last_read_time_ms if check is not None else None}))
        if markers:
            mk = markers[-1].message
            due = due if due is not None else _int_property(mk, fmt.PROPERTY_TIMER_OUT_MS)
            steps.append(_step("timer_recall", "Timer recall", "recalled",
                               f"a recall marker is in {fmt.TIMER_TOPIC} (queue {mk.queue_id} offset {mk.queue_offset}, "
                               f"CommitLog offset {mk.commit_log_offset}, stored {mk.store_timestamp}) with "
                               f"{fmt.PROPERTY_TIMER_DEL_UNIQKEY} {mk.properties[fmt.PROPERTY_TIMER_DEL_UNIQKEY]}; "
                               f"{_timer_unit_text(files.units_of(mk.commit_log_offset), 'it (a delete unit)')}",
                               {"queue_offset": mk.queue_offset, "commit_log_offset": mk.commit_log_offset,
                                "recalled_at_ms": mk.store_timestamp}))
            return RECALLED, (f"the producer recalled it (recallMessage) before it was due at {due}: the broker drops "
                              f"it from the timer and never delivers it to {topic}; send it again if it should "
                              "arrive"), {"due_at_ms": due, "recalled_at_ms": mk.store_timestamp, "timer": True}
    if fired:
        return EXPIRED, (f"the broker's timer fired it at {due} (config/{fmt.TIMER_CHECK_FILE}), yet no copy of it is "
                         f"in {topic}: the file that held the delivered copy was deleted, or the delivery failed "
                         "(see the broker's log)"), {"due_at_ms": due, "timer": True}
    return SCHEDULED, (f"it is a timer message: the broker delivers it to {topic} at {due}; nothing to do but "
                       "wait"), {"due_at_ms": due, "timer": True}


def _before_topic(store: Store, topic: str, group: str, uniq: str | None, by_role: dict, steps: list[WhyStep],
                  now_ms: int) -> tuple[str, str, dict, list[WhyStep], None]:
    """The state of a message with no copy in its topic yet: scheduled, a transaction half, or gone."""
    scheduled = [c for c in by_role.get(ROLE_SCHEDULED, ()) if c.real_topic == topic]
    if scheduled:
        delay = _delay_offsets(store)
        for c in scheduled:
            waiting, due, ev = _scheduled_copy(store, c, delay)
            steps.append(_step("scheduled", "Delay level", "waiting" if waiting else "delivered",
                               f"{fmt.SCHEDULE_TOPIC} queue {c.message.queue_id} (level {ev['level']}) offset "
                               f"{c.message.queue_offset}; config/{cfg.DELAY_OFFSET_FILE} has level {ev['level']} at "
                               f"{ev['delay_offset']}; due at {due}", ev))
            if waiting:
                return SCHEDULED, (f"it is scheduled (delay level {ev['level']}): the broker delivers it to {topic} "
                                   f"at {due}; nothing to do but wait"), \
                    {"due_at_ms": due, "delay_level": ev["level"]}, steps, None
    timer = _timer_state(store, topic, uniq, by_role, steps)
    if timer is not None:
        return (*timer, steps, None)
    halves = by_role.get(ROLE_HALF, []) + by_role.get(ROLE_CHECK_MAX, [])
    if halves:
        resolved = _resolved_halves(store)
        first = min(c.message.store_timestamp for c in halves)
        checks = max(int(c.message.properties.get(fmt.PROPERTY_TRANSACTION_CHECK_TIMES, "0") or 0) for c in halves)
        ops = [(c, resolved[c.message.queue_offset]) for c in by_role.get(ROLE_HALF, ())
               if c.message.queue_offset in resolved]
        fields = {"check_times": checks, "first_store_ms": first, "producer_group":
                  halves[0].message.properties.get(fmt.PROPERTY_PRODUCER_GROUP)}
        if ops:
            half, op = ops[0]
            steps.append(_step("transaction_op", "Transaction op", "rolled_back",
                               f"op record at CommitLog offset {op.commit_log_offset} ({fmt.TRANS_OP_HALF_TOPIC}) "
                               f"resolves half queue offset {half.message.queue_offset}, and no committed copy is in "
                               f"{topic}", {"op_commit_log_offset": op.commit_log_offset,
                                            "half_queue_offset": half.message.queue_offset}))
            return ROLLED_BACK, (f"the producer rolled the transaction back: the broker never delivers it to {topic}; "
                                 "send it again if it should arrive"), fields, steps, None
        if by_role.get(ROLE_CHECK_MAX):
            steps.append(_step("check_max", "Transaction check limit", "discarded",
                               f"a copy is in {fmt.TRANS_CHECK_MAX_TIME_TOPIC}: the broker stopped checking it"))
            return ROLLED_BACK, (f"the broker gave up on the transaction after {checks} checks and moved its half to "
                                 f"{fmt.TRANS_CHECK_MAX_TIME_TOPIC}: it is never delivered"), \
                {**fields, "resolved_by": "check_limit"}, steps, None
        fields["age_ms"] = now_ms - first
        steps.append(_step("transaction_half", "Transaction half", "unresolved",
                           f"{len(halves)} half copies in {fmt.TRANS_HALF_TOPIC} (checked {checks} times), no op record "
                           f"resolves any, no committed copy in {topic}", {"half_copies": len(halves)}))
        return UNCOMMITTED, (f"it is a transaction half the producer has neither committed nor rolled back (checked "
                             f"{checks} times, first stored {first}): the producer group "
                             f"{fields['producer_group']} must answer the broker's check"), fields, steps, None
    if by_role.get(ROLE_TOPIC):   # a record in the topic that no ConsumeQueue unit serves (prepared, rolled back)
        m = by_role[ROLE_TOPIC][0].message
        steps.append(_step("no_unit", "Transaction type", "not_dispatched",
                           f"the record at CommitLog offset {m.commit_log_offset} has transaction type "
                           f"{m.transaction_type:#x}: the broker never serves it"))
        return ROLLED_BACK, "it is a prepared or rolled-back transaction record: the broker never delivers it", \
            {}, steps, None
    copies = ", ".join(sorted({c.message.topic for cs in by_role.values() for c in cs}))
    raise MessageNotFoundError(f"the message has no copy in {topic} and none on its way there (copies in {copies})")


# ------------------------------------------------------------------ entry point
def _tag_path(path: MessagePath, broker: str, root: str | None, note: str | None) -> MessagePath:
    """A cluster's answer: its ``broker`` in the fields, and its walk naming the replica it read."""
    path.fields["broker"] = broker
    if path.why is None:
        return path
    return replace(path, why=replace(path.why, broker=broker, replica=root, replica_note=note))


def _with_copies_elsewhere(cluster: Cluster, path: MessagePath, group: str) -> MessagePath:
    """A cluster's answer with the group's retry and dead-letter copies the other brokers hold.

    A consumer whose send-back fails (its broker refused it: read-only, or gone) sends the retry
    through the client's producer to any broker serving the group's retry topic
    (docs/paths.md#retries-on-another-broker): the message's own broker then shows it consumed,
    while its retry waits, or its dead letter lies, elsewhere. Those copies decide as they would on
    the message's own broker: a dead letter first, then a retry still waiting."""
    home = path.fields.get("broker")
    if path.state not in (CONSUMED, PENDING) or path.uniq_key is None or len(cluster.brokers) < 2:
        return path
    retry_topic, dlq_topic = fmt.RETRY_GROUP_TOPIC_PREFIX + group, fmt.DLQ_GROUP_TOPIC_PREFIX + group
    found: list[tuple[str, Store, dict[str, list[Copy]]]] = []
    for name in cluster.brokers:
        if name == home:
            continue
        store = cluster.stores[name]
        by_role: dict[str, list[Copy]] = {}
        for m in records_by_uniq_key(store, (retry_topic, fmt.SCHEDULE_TOPIC, dlq_topic), path.uniq_key):
            role = _role(m, path.topic, group)
            if role is not None and role[0] in (ROLE_RETRY, ROLE_SCHEDULED, ROLE_DLQ) and \
                    (role[0] != ROLE_SCHEDULED or role[1] == retry_topic):
                by_role.setdefault(role[0], []).append(Copy(role[0], m, role[1]))
        if by_role:
            found.append((name, store, by_role))
    if not found:
        return path
    copies = [*path.copies, *(c for _n, _s, by_role in found for cs in by_role.values() for c in cs)]
    steps = list(path.steps)
    for name, _store, by_role in found:
        for d in by_role.get(ROLE_DLQ, ()):
            m = d.message
            steps.append(_step("dead_letter_elsewhere", f"Dead-letter queue on {name}", "dlq_copy",
                               f"{name} holds a copy in {m.topic} queue {m.queue_id} offset {m.queue_offset} (stored "
                               f"{m.store_timestamp}, reconsumeTimes {m.reconsume_times}): the group's retry was sent "
                               f"through another broker than {home}, and the broker never delivers a dead letter",
                               {"broker": name, "queue_offset": m.queue_offset, "reconsume_times": m.reconsume_times}))
            return replace(path, state=DEAD_LETTER, copies=copies, steps=steps,
                           sentence=f"{group} failed it {m.reconsume_times} times and {name} moved it to {m.topic}: "
                                    "fix the consumer, then resend it from the DLQ",
                           fields={**path.fields, "reconsume_times": m.reconsume_times,
                                   "dlq_store_ms": m.store_timestamp, "copy_broker": name})
    for name, store, by_role in found:
        retry = _retry_state(store, group, by_role, steps)
        if retry is not None:
            state, sentence, fields = retry
            last = steps[-1]
            steps[-1] = _step(last.name, f"{last.title} on {name}", last.reason,
                              f"on {name} (the send-back went through another broker than {home}): {last.detail}",
                              {**last.evidence, "broker": name})
            return replace(path, state=state, copies=copies, steps=steps, sentence=f"{sentence} on {name}",
                           fields={**path.fields, **fields, "copy_broker": name})
    return replace(path, copies=copies)


def why_every_copy(store: Store | Cluster, topic: str, group: str, *, sql: str | None = None, tags: str | None = None,
                   queue_id: int | None = None, queue_offset: int | None = None, msg_id: str | None = None,
                   key: str | None = None, bloom_filter=DEFAULT_BLOOM, filter_support_retry: bool = False,
                   now_ms: int | None = None, broker: str | None = None) -> list[MessagePath]:
    """Every copy of a message and its state for ``group`` (docs/paths.md).

    Parameters
    ----------
    store : cq.Store or cq.Cluster
        A Cluster asks each broker holding the topic (only ``broker``, when given; needed with
        ``queue_id`` when several brokers hold it); each answer's ``fields`` name its ``broker``.
    topic, group : str
    sql, tags, bloom_filter, filter_support_retry
        The group's subscription, as for :func:`cq.why`.
    queue_id, queue_offset : int, optional
        The message by its unit in ``topic``.
    msg_id : str, optional
        An offset message id of any copy, or the ``UNIQ_KEY``.
    key : str, optional
        A key of ``KEYS`` (every message carrying it, one answer each).
    now_ms : int, optional
        The time ``age_ms`` counts to (default: now).

    Returns
    -------
    list of MessagePath
        One per message (several for a key many messages carry).

    Raises
    ------
    cq.analyses.why.MessageNotFoundError
        No copy of the message is anywhere in the store (the message says where it looked).
    cq.readers.config.ConfigFormatError
        A progress file (``delayOffset.json``, ``consumerOffset.json``, ...) is malformed: names it and the place.
    cq.StoreFormatError
        A timer file (``config/timercheck``, ``timerlog/``, ``timerwheel``) is cut short or corrupt,
        for a message with a timer copy: names the file and the byte offset.
    """
    given = check_message_args(queue_id, queue_offset, msg_id, key, sql, tags)
    now_ms = int(time.time() * 1000) if now_ms is None else now_ms
    if isinstance(store, Cluster):
        names = brokers_to_ask(store, topic, broker, queue_id)
        out: list[MessagePath] = []
        misses = []
        for name in names:
            try:   # a broker given as several replicas: the replica read, then what it lacks (docs/reading.md#replicas)
                out += ask_replicas(store, name, topic, lambda s: why_every_copy(
                    s, topic, group, sql=sql, tags=tags, queue_id=queue_id, queue_offset=queue_offset, msg_id=msg_id,
                    key=key, bloom_filter=bloom_filter, filter_support_retry=filter_support_retry, now_ms=now_ms),
                    why_of=lambda p: p.why, tag=_tag_path)
            except MessageNotFoundError as exc:
                misses.append(f"{name}: {exc}")
        if not out:
            raise MessageNotFoundError("no broker of the cluster holds it; " + "; ".join(misses))
        return [_with_copies_elsewhere(store, p, group) for p in out]
    if broker is not None:
        raise ValueError("broker= is for a cq.Cluster; a Store is one broker")
    if msg_id is not None and topic in store.layout.compaction_topics:
        # a consumer's offset message id of a compaction topic names a compaction log position
        # (docs/reading.md#compaction-topics): the message at each queue offset it names
        served = compaction_positions(store, topic, msg_id)
        if served:
            return [p for q, o in served for p in why_every_copy(
                store, topic, group, sql=sql, tags=tags, queue_id=q, queue_offset=o, bloom_filter=bloom_filter,
                filter_support_retry=filter_support_retry, now_ms=now_ms)]
    flt, sub = resolve_subscription(store, topic, group, sql=sql, tags=tags, bloom_filter=bloom_filter,
                                    filter_support_retry=filter_support_retry)
    # 5.4+'s transRocksDBEnable keeps the halves where group_topics does not look (docs/formats.md#message-rocksdb)
    check_message_rocksdb(store.root, "trans", "a message's path (its transaction half)")
    topics = group_topics(topic, group)
    seeds: list[tuple[str | None, list[Message], str, str]] = []   # (uniq key, known copies, found_by, note)
    if topic in store.layout.batch_cq_topics:
        # the IndexFiles and the offset message id name a batch record, not its messages: each message
        # asked for, found in its batch record (docs/reading.md#batchcq)
        places = ([(int(queue_id), int(queue_offset))] if given[0] else find_batch_messages(store, topic, msg_id, key))
        for q, o in places:
            msg = batch_message_at(store, topic, q, o)
            note = f"queue {topic}/{q} offset {o} (in its batch record)"
            if msg is None:    # its record is gone: the filter's verdict says expired (or missing)
                w = why_batch_message(store, topic, group, flt, sub, q, o)
                state = EXPIRED if w.dropped_by == DROPPED_BY_EXPIRY else FILTERED
                return [MessagePath(topic, group, sub, None, state, w.verdict, {"dropped_by": w.dropped_by}, [], [],
                                    w, "queue_offset", note)]
            seeds.append((msg.properties.get(fmt.PROPERTY_UNIQ_KEY), [msg], "queue_offset" if given[0] else "scan",
                          note))
    elif given[0]:
        w = why_unit(store, topic, group, flt, sub, int(queue_id), int(queue_offset))
        if w.steps and w.steps[0].name == "tier":  # served from the tier: the record is the tier's
            msg = store.tier_queue(topic, int(queue_id)).commit_log.read_message(w.commit_log_offset)
        else:
            msg = message_at(store, w.commit_log_offset)
        uniq = msg.properties.get(fmt.PROPERTY_UNIQ_KEY) if msg is not None else None
        note = f"queue {topic}/{queue_id} offset {queue_offset}"
        if msg is None:   # its record is gone: the filter's verdict says expired (or missing)
            state = {DROPPED_BY_EXPIRY: EXPIRED, DROPPED_BY_COMPACTION: COMPACTED}.get(w.dropped_by, FILTERED)
            return [MessagePath(topic, group, sub, None, state, w.verdict, {"dropped_by": w.dropped_by}, [], [], w,
                                "queue_offset", note)]
        seeds.append((uniq, [msg], "queue_offset", note))
    elif msg_id is not None:
        parsed = parse_offset_msg_id(msg_id)
        msg = message_at(store, parsed[1]) if parsed is not None else None
        if (msg is None or msg.msg_id != msg_id.strip().upper()) and parsed is not None:
            # a record the broker serves from its tier carries its flat CommitLog offset in its msg id
            msg = next((m for t in topics if t in store.topics() for m in scan_tier(store, t, None, None, parsed)
                        if m.msg_id == msg_id.strip().upper()), msg)
        if msg is not None and msg.msg_id == msg_id.strip().upper():
            if _role(msg, topic, group) is None:
                raise MessageNotFoundError(f"message {msg_id} (CommitLog offset {parsed[1]}) is on topic {msg.topic!r}, "
                                           f"not {topic!r} nor on its way there for group {group!r}")
            seeds.append((msg.properties.get(fmt.PROPERTY_UNIQ_KEY), [msg], "msg_id",
                          f"offset message id: store host {parsed[0]}, CommitLog offset {parsed[1]}"))
        else:
            seeds.append((msg_id.strip(), [], "", ""))
    else:
        found, found_by, note = _lookup(store, topics, key, None)
        by_uniq: dict[str | None, list[Message]] = {}
        for m in found:
            if _role(m, topic, group) is not None:
                by_uniq.setdefault(m.properties.get(fmt.PROPERTY_UNIQ_KEY), []).append(m)
        if not by_uniq:
            raise MessageNotFoundError(f"no message of topic {topic!r} has key {key!r} (nor a copy on its way there "
                                       f"for group {group!r}) in {store.root}: {note}")
        seeds.extend((u, ms, found_by, note) for u, ms in by_uniq.items())
    out = []
    for uniq, known, found_by, note in seeds:
        if uniq is not None:
            found, how, text = _lookup(store, topics, None, uniq)
            if not found_by:
                found_by, note = how, text
            # each record once (a tier's flat CommitLog offsets are its own: the queue tells them apart)
            known = {(m.topic, m.queue_id, m.queue_offset, m.commit_log_offset): m for m in [*known, *found]}.values()
        copies = [Copy(role[0], m, role[1]) for m in sorted(known, key=lambda m: m.commit_log_offset)
                  for role in [_role(m, topic, group)] if role is not None]
        if not copies:
            raise MessageNotFoundError(f"no copy of UNIQ_KEY {uniq!r} is in topic {topic!r} nor on its way there for "
                                       f"group {group!r} in {store.root}: {note} (looked under {', '.join(topics)})")
        state, sentence, fields, steps, w = _state_of(store, topic, group, flt, sub, uniq, copies, now_ms)
        out.append(MessagePath(topic, group, sub, uniq, state, sentence, fields, copies, steps, w, found_by, note))
    return out
