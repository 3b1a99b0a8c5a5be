"""POP consumption from a store: the broker's revive log read back (docs/paths.md#pop).

A POP consumer's pops and acks are not in ``consumerOffset.json`` alone (the broker moves a POP
group's committed offset when it pops, not when it acks): each pop writes a checkpoint (tag
``ck``, a JSON body: topic ``t``, group ``c``, queue ``q``, start offset ``so``, pop time ``pt``,
invisible time ``it``, offset deltas ``d``) and each ack an ack record (``ack``: ``ao``; a batch
ack ``bAck``: ``aol``), keyed to their checkpoint by ``t``, ``c``, ``q``, ``so`` and ``pt``, into
the revive topic ``rmq_sys_REVIVE_LOG_{cluster}``. With the broker's timer on, both first wait in
``rmq_sys_wheel_timer`` (``REAL_TOPIC`` the revive topic): a checkpoint is due there at its
revive time less a second, an ack at its revive time. The broker's revive service reads each
revive queue in order (its group ``CID_RMQ_SYS_REVIVE_GROUP`` commits the last offset it
processed) and writes each message a checkpoint holds but no ack acked to the group's POP retry
topic ``%RETRY%{group}_{topic}``.

:func:`read_revive_log` reads all of it from a store, one cut; :meth:`ReviveLog.pops_of` says,
for one message, each pop of it, whether it was acked, and whether the revive service has
passed it (revived) or it is still in flight (invisible until ``pop time + invisible time``).
Checkpoints the broker keeps in memory only (``enablePopBufferMerge=true``) never reach the
store; ``docs/limits.md`` says so.
"""
from __future__ import annotations

import json
import threading
import weakref
from collections.abc import Iterator
from dataclasses import dataclass, field

from .. import format as fmt
from ..errors import StoreFormatError
from ..readers.commitlog import Message
from ..store.store import Store
from .find import topic_records

__all__ = ["CheckPoint", "Pop", "ReviveLog", "pop_retry_topics", "read_revive_log"]

#: A checkpoint's identity, as the broker matches acks to it: (topic, group, queue id, start offset, pop time).
CkKey = tuple[str, str, int, int, int]


def pop_retry_topics(group: str, topic: str) -> list[str]:
    """The POP retry topics of ``group`` on ``topic``: v1 ``%RETRY%G_T`` and v2 ``%RETRY%G+T``."""
    return [f"{fmt.RETRY_GROUP_TOPIC_PREFIX}{group}{sep}{topic}" for sep in fmt.POP_RETRY_SEPARATORS]


@dataclass(frozen=True)
class CheckPoint:
    """One pop: a ``ck`` record of the revive log (its copy in the revive topic when it has one).

    Attributes
    ----------
    topic, group : str
        The queue's topic (a POP retry topic for a revived copy popped again) and the POP group.
    queue_id, start_offset, pop_time, invisible_time : int
    offsets : tuple of int
        The queue offsets popped (``so + d[i]``).
    bitmap : int
        Offsets acked in the checkpoint itself (bit i: ``offsets[i]``).
    revive_topic : str
    revive_queue_id : int
    revive_offset : int or None
        Its offset in the revive queue; None while it waits in the timer.
    commit_log_offset : int
        The record it was read from (its revive-topic copy when there is one).
    """

    topic: str
    group: str
    queue_id: int
    start_offset: int
    pop_time: int
    invisible_time: int
    offsets: tuple[int, ...]
    bitmap: int
    broker_name: str | None
    revive_topic: str
    revive_queue_id: int
    revive_offset: int | None
    commit_log_offset: int

    @property
    def key(self) -> CkKey:
        return self.topic, self.group, self.queue_id, self.start_offset, self.pop_time

    @property
    def due_at_ms(self) -> int:
        """When the broker revives what is not acked by then: pop time + invisible time."""
        return self.pop_time + self.invisible_time


@dataclass(frozen=True)
class Pop:
    """One pop of one message: its checkpoint, whether it was acked, whether the broker revived it."""

    checkpoint: CheckPoint
    queue_offset: int
    acked: bool
    revived: bool
    #: The ack record (CommitLog offset) that acked it, None when the checkpoint's bitmap did.
    ack_commit_log_offset: int | None = None

    @property
    def in_flight(self) -> bool:
        """Popped, not acked, not revived: invisible to the group until :attr:`CheckPoint.due_at_ms`."""
        return not self.acked and not self.revived

    def to_dict(self) -> dict:
        ck = self.checkpoint
        return {"topic": ck.topic, "queue_id": ck.queue_id, "queue_offset": self.queue_offset,
                "pop_time": ck.pop_time, "invisible_time": ck.invisible_time, "due_at_ms": ck.due_at_ms,
                "acked": self.acked, "revived": self.revived, "revive_topic": ck.revive_topic,
                "revive_queue_id": ck.revive_queue_id, "revive_offset": ck.revive_offset,
                "checkpoint_commit_log_offset": ck.commit_log_offset,
                "ack_commit_log_offset": self.ack_commit_log_offset}


@dataclass
class ReviveLog:
    """Every checkpoint and ack of a store's revive log (:func:`read_revive_log`)."""

    checkpoints: dict[CkKey, CheckPoint] = field(default_factory=dict)
    #: checkpoint key -> {acked queue offset: the ack record's CommitLog offset}
    acks: dict[CkKey, dict[int, int]] = field(default_factory=dict)
    #: (revive topic, revive queue id) -> the revive service's committed offset (the last record it processed)
    revive_progress: dict[tuple[str, int], int] = field(default_factory=dict)
    #: (topic, group, queue id) -> the checkpoints of that queue, in pop-time order
    _by_queue: dict[tuple[str, str, int], list[CheckPoint]] = field(default_factory=dict, repr=False)

    def groups(self) -> set[str]:
        """The groups with a checkpoint: the store's POP groups."""
        return {ck.group for ck in self.checkpoints.values()}

    def _pop(self, ck: CheckPoint, offset: int) -> Pop:
        i = ck.offsets.index(offset)
        acks = self.acks.get(ck.key, {})
        acked = bool(ck.bitmap >> i & 1) or offset in acks
        done = self.revive_progress.get((ck.revive_topic, ck.revive_queue_id))
        revived = ck.revive_offset is not None and done is not None and ck.revive_offset <= done
        return Pop(ck, offset, acked, revived, acks.get(offset))

    def pops_of(self, topic: str, group: str, queue_id: int, queue_offset: int) -> list[Pop]:
        """Each pop of the message at ``topic``/``queue_id``/``queue_offset`` by ``group``, first first."""
        return [self._pop(ck, queue_offset) for ck in self._by_queue.get((topic, group, queue_id), ())
                if queue_offset in ck.offsets]

    def pops(self, group: str | None = None, topics: list[str] | None = None) -> Iterator[Pop]:
        """Every popped message (of ``group``, of ``topics``), one per checkpoint offset."""
        for ck in self.checkpoints.values():
            if (group is None or ck.group == group) and (topics is None or ck.topic in topics):
                for offset in ck.offsets:
                    yield self._pop(ck, offset)


def _bad(m: Message, what: str, problem: str) -> StoreFormatError:
    """The error for record ``m``'s POP ``what`` body: ``problem`` with the record's file and offset."""
    return StoreFormatError(f"the POP {what} body of the {m.topic} record at CommitLog offset {m.commit_log_offset} "
                            f"{problem}", m._path, m._file_offset)


def _field(doc: dict, name: str, kind, m: Message, what: str):
    value = doc.get(name, doc.get(fmt.ACK_LONG_NAMES.get(name, name)))
    if kind is int and isinstance(value, int) and not isinstance(value, bool):
        return value
    if kind is str and isinstance(value, str):
        return value
    raise _bad(m, what, f"has {name!r} = {value!r}, not {'an integer' if kind is int else 'a string'}")


def _int_list(value, name: str, m: Message, what: str) -> list[int]:
    if not isinstance(value, list) or not all(isinstance(v, int) and not isinstance(v, bool) for v in value):
        raise _bad(m, what, f"has {name!r} = {value!r}, not a list of integers")
    return value


def _body(m: Message, what: str) -> dict:
    try:
        doc = json.loads(m.body.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as exc:
        raise _bad(m, what, f"is not JSON ({exc})") from None
    if not isinstance(doc, dict):
        raise _bad(m, what, f"is {type(doc).__name__} JSON, not an object")
    return doc


def _key(doc: dict, m: Message, what: str) -> CkKey:
    return (_field(doc, fmt.CK_TOPIC, str, m, what), _field(doc, fmt.CK_GROUP, str, m, what),
            _field(doc, fmt.CK_QUEUE_ID, int, m, what), _field(doc, fmt.CK_START_OFFSET, int, m, what),
            _field(doc, fmt.CK_POP_TIME, int, m, what))


def _checkpoint(m: Message, revive_topic: str, revive_queue_id: int, revive_offset: int | None) -> CheckPoint:
    doc = _body(m, "checkpoint")
    topic, group, queue_id, start, pop_time = _key(doc, m, "checkpoint")
    diffs = doc.get(fmt.CK_OFFSET_DIFFS)
    if diffs is None:   # a checkpoint of one message written before the deltas existed
        diffs = [0] * max(0, doc.get(fmt.CK_NUM, 0) if isinstance(doc.get(fmt.CK_NUM), int) else 0)
    diffs = _int_list(diffs, fmt.CK_OFFSET_DIFFS, m, "checkpoint")
    bitmap = doc.get(fmt.CK_BITMAP, 0)
    broker = doc.get(fmt.CK_BROKER_NAME)
    return CheckPoint(topic, group, queue_id, start, pop_time, _field(doc, fmt.CK_INVISIBLE_TIME, int, m, "checkpoint"),
                      tuple(start + d for d in diffs), bitmap if isinstance(bitmap, int) else 0,
                      broker if isinstance(broker, str) else None, revive_topic, revive_queue_id, revive_offset,
                      m.commit_log_offset)


def _acked_offsets(m: Message, tag: str) -> tuple[CkKey, list[int]]:
    what = "ack" if tag == fmt.POP_ACK_TAG else "batch ack"
    doc = _body(m, what)
    key = _key(doc, m, what)
    if tag == fmt.POP_ACK_TAG:
        return key, [_field(doc, fmt.ACK_OFFSET, int, m, what)]
    offsets = doc.get(fmt.BATCH_ACK_OFFSETS, doc.get(fmt.ACK_LONG_NAMES[fmt.BATCH_ACK_OFFSETS]))
    return key, _int_list(offsets, fmt.BATCH_ACK_OFFSETS, m, what)


#: Each Store's last revive log with the stamp it was read at (:func:`_revive_stamp`): ``why`` asks
#: for it once per message of a POP group, and it is the whole revive topic read.
_LOGS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
_LOGS_LOCK = threading.Lock()


def _revive_topics(store: Store) -> list[str]:
    return sorted(t for t in store.topics() if t.startswith(fmt.REVIVE_TOPIC_PREFIX))


def _revive_stamp(store: Store, topics: list[str]) -> tuple:
    """What the revive log is read from, as it is now: the CommitLog's ends, each revive and timer
    queue's ends, and the revive service's committed offsets. The same stamp, the same records."""
    log = store.commit_log
    queued = [*topics, fmt.TIMER_TOPIC] if fmt.TIMER_TOPIC in store.topics() else topics
    ends = []
    for topic in queued:
        for q in store.queue_ids(topic):
            with store.queue_readers(topic, q, ext=False) as (cqueue, _ext):
                ends.append((topic, q, cqueue.min_offset, cqueue.max_offset))
    progress = [tuple(sorted(store.committed_offsets(fmt.REVIVE_GROUP, t).items())) for t in topics]
    return log.min_offset, log.max_offset, tuple(ends), tuple(progress)


def read_revive_log(store: Store) -> ReviveLog:
    """The checkpoints and acks of every revive topic of ``store`` and of its timer on their way there.

    Read again only when the store's revive and timer queues, its CommitLog's ends or the revive
    service's offsets moved since the last read through the same Store (:func:`_revive_stamp`);
    the log returned is shared between those reads: read it, never change it.

    Raises
    ------
    cq.StoreFormatError
        A ``ck``, ``ack`` or ``bAck`` record whose body is not the broker's JSON (names the
        CommitLog file, the byte offset and the field).
    cq.readers.config.ConfigFormatError
        ``config/consumerOffset.json`` is malformed.
    """
    topics = _revive_topics(store)
    stamp = _revive_stamp(store, topics)
    with _LOGS_LOCK:
        kept = _LOGS.get(store)
    if kept is not None and kept[0] == stamp:
        return kept[1]
    log = _read_revive_log(store, topics)
    with _LOGS_LOCK:
        _LOGS[store] = (stamp, log)
    return log


def _read_revive_log(store: Store, topics: list[str]) -> ReviveLog:
    log = ReviveLog()
    records: list[tuple[Message, str, int, int | None]] = []   # (record, revive topic, revive queue, offset there)
    for topic in topics:
        for q, off in store.committed_offsets(fmt.REVIVE_GROUP, topic).items():
            log.revive_progress[(topic, q)] = off
        records.extend((m, topic, q, m.queue_offset) for q, m, _slot in topic_records(store, topic))
    for _q, m, _slot in topic_records(store, fmt.TIMER_TOPIC):
        real = m.properties.get(fmt.PROPERTY_REAL_TOPIC)
        if real is not None and real.startswith(fmt.REVIVE_TOPIC_PREFIX):
            try:
                rq = int(m.properties.get(fmt.PROPERTY_REAL_QUEUE_ID, ""))
            except ValueError:
                raise StoreFormatError(f"the timer record at CommitLog offset {m.commit_log_offset} bound for {real} "
                                       f"has {fmt.PROPERTY_REAL_QUEUE_ID} "
                                       f"{m.properties.get(fmt.PROPERTY_REAL_QUEUE_ID)!r}, not a queue id",
                                       m._path, m._file_offset) from None
            records.append((m, real, rq, None))
    for m, topic, q, offset in records:
        tag = m.tags
        if tag == fmt.POP_CK_TAG:
            ck = _checkpoint(m, topic, q, offset)
            known = log.checkpoints.get(ck.key)
            # the revive-topic copy (what the revive service reads) wins over the timer's
            if known is None or (known.revive_offset is None and ck.revive_offset is not None):
                log.checkpoints[ck.key] = ck
        elif tag in (fmt.POP_ACK_TAG, fmt.POP_BATCH_ACK_TAG):
            key, offsets = _acked_offsets(m, tag)
            acked = log.acks.setdefault(key, {})
            for o in offsets:
                acked.setdefault(o, m.commit_log_offset)
    for ck in sorted(log.checkpoints.values(), key=lambda c: (c.pop_time, c.start_offset)):
        log._by_queue.setdefault((ck.topic, ck.group, ck.queue_id), []).append(ck)
    return log
