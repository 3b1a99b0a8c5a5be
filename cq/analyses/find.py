"""Finding messages in a store: by offset message id, ``UNIQ_KEY`` or key, and the records of a topic.

:func:`find_messages` is what ``why`` and ``why --every-copy`` (:mod:`cq.analyses.paths`) look a
message up with: an offset message id names its record (store host and CommitLog offset,
docs/formats.md#commitlog-record); a ``UNIQ_KEY`` or key goes through the store's IndexFiles
(:func:`query_index`, each hash candidate confirmed by the record's own key), else a scan of the
topic's ConsumeQueues (:func:`scan_topic`). :func:`topic_records` walks a topic's present records
(``pending``, the POP analyses). A message of a BatchCQ topic is found inside its batch record
(:func:`find_batch_messages`, docs/reading.md#batchcq). Nothing here decides a filter; the
analyses that do import this module, never the reverse.
"""
from __future__ import annotations

import contextlib
import os
import struct
from collections.abc import Callable, Iterator, Sequence
from typing import NamedTuple

import numpy as np

from .. import format as fmt
from ..errors import StoreFormatError
from ..readers.batchcq import expand_batch
from ..readers.commitlog import Message
from ..readers.indexfile import IndexFiles
from ..store.cluster import Cluster
from ..store.store import Store

__all__ = [
    "IndexAnswer",
    "MessageNotFoundError",
    "batch_message_at",
    "brokers_to_ask",
    "check_message_args",
    "find_batch_messages",
    "find_messages",
    "in_topic",
    "key_matches",
    "message_at",
    "open_index",
    "parse_offset_msg_id",
    "position",
    "query_index",
    "scan_topic",
    "topic_records",
    "unit_tags_code",
]


class MessageNotFoundError(LookupError, ValueError):
    """No message matches a msg id, UNIQ_KEY, key or queue offset (names what was searched)."""


# ------------------------------------------------------------------ naming a message
def check_message_args(queue_id, queue_offset, msg_id, key, sql, tags) -> list[bool]:
    """Which way a message is named (``[by queue offset, by msg_id, by key]``, exactly one true);
    ValueError when none or several are, or both sql and tags are given."""
    given = [queue_offset is not None or queue_id is not None, msg_id is not None, key is not None]
    if sum(given) != 1:
        raise ValueError("give queue_id with queue_offset, or msg_id, or key")
    if given[0] and (queue_id is None or queue_offset is None):
        raise ValueError("queue_id and queue_offset go together")
    if sql is not None and tags is not None:
        raise ValueError("give sql or tags, not both")
    return given


def brokers_to_ask(cluster: Cluster, topic: str, broker: str | None, queue_id: int | None) -> list[str]:
    """The brokers of ``cluster`` a question about a message of ``topic`` goes to: those holding the
    topic, or ``broker`` alone; one only for a queue offset (ValueError asking for the broker)."""
    names = cluster.brokers_of(topic)
    if broker is not None:
        if broker not in names:
            raise MessageNotFoundError(f"broker {broker!r} holds no queue of topic {topic!r} (brokers holding it: "
                                       f"{', '.join(names)})")
        names = [broker]
    if queue_id is not None and len(names) > 1:
        raise ValueError(f"topic {topic!r} has queues on brokers {', '.join(names)}: name the broker of "
                         f"queue {queue_id} (broker=, --broker)")
    return names


def parse_offset_msg_id(msg_id: str) -> tuple[str, int] | None:
    """``(store_host, commit_log_offset)`` of an offset message id (IPv4: 32 hex digits, IPv6: 56)."""
    text = msg_id.strip()
    if len(text) not in (32, 56):
        return None
    try:
        raw = bytes.fromhex(text)
    except ValueError:
        return None
    host = fmt.decode_host(raw[:-8])
    return host, struct.unpack(">q", raw[-8:])[0]


# ------------------------------------------------------------------ records
def message_at(store: Store, offset: int) -> Message | None:
    """The record at CommitLog ``offset``, or None when it lies outside the CommitLog or does not read."""
    log = store.commit_log
    if not log.min_offset <= offset < log.max_offset:
        return None
    try:
        return log.read_message(offset)
    except StoreFormatError:
        return None


def in_topic(msg: Message, topic: str) -> bool:
    """Whether record ``msg`` is served from ``topic``: its own topic, or an LMQ it was dispatched to
    (docs/formats.md#lmq: the unit's topic is not the record's)."""
    return msg.topic == topic or (topic.startswith(fmt.LMQ_PREFIX) and fmt.lmq_offset(msg.properties, topic) is not None)


def position(msg: Message, topic: str) -> tuple[int, int]:
    """``(queue id, queue offset)`` of record ``msg`` in ``topic``: its own, or its place in an LMQ."""
    if msg.topic != topic and topic.startswith(fmt.LMQ_PREFIX):
        return fmt.LMQ_QUEUE_ID, fmt.lmq_offset(msg.properties, topic)
    return msg.queue_id, msg.queue_offset


def key_matches(msg_props: dict, key: str | None, uniq_key: str | None) -> bool:
    """Whether a record's properties hold ``uniq_key`` as ``UNIQ_KEY`` or ``key`` among its ``KEYS``."""
    if uniq_key is not None and msg_props.get(fmt.PROPERTY_UNIQ_KEY) == uniq_key:
        return True
    if key is not None:
        keys = msg_props.get(fmt.PROPERTY_KEYS)
        return keys is not None and key in keys.split(fmt.KEY_SEPARATOR)
    return False


@contextlib.contextmanager
def _queue_only(store: Store, topic: str, queue_id: int) -> Iterator:
    """A queue's reader for one pass, without its ext files."""
    with store.queue_readers(topic, queue_id, ext=False) as (cqueue, _ext):
        yield cqueue


def scan_topic(store: Store, topic: str, key: str | None, uniq_key: str | None, *,
               skip: tuple[int, int] | None = None) -> list[Message]:
    """Every message of ``topic`` (through its ConsumeQueues) whose key or UNIQ_KEY is the one asked;
    on a BatchCQ topic, the messages inside its batch records (docs/reading.md#batchcq).

    ``skip=(begin, end)``: leave out the records at CommitLog offsets ``begin`` to ``end`` (both
    included; what the IndexFiles covered, :func:`records_by_uniq_key`)."""
    log = store.commit_log
    lo, hi = log.min_offset, log.max_offset
    found = []
    compaction = topic in store.layout.compaction_topics  # docs/reading.md#compaction-topics
    if topic in store.layout.batch_cq_topics:
        for q in store.queue_ids(topic):
            with store.queue_readers(topic, q, ext=False) as (cqueue, _ext):
                for off in cqueue.units["commit_log_offset"].tolist():
                    record = message_at(store, off)
                    if record is not None:
                        found += [m for m in expand_batch(record) if key_matches(m.properties, key, uniq_key)]
        return found
    for q in store.queue_ids(topic):
        # one queue's files open at a time; a compaction topic's every message, compacted or not
        with (store.dispatched_queue(topic, q) if compaction else _queue_only(store, topic, q)) as cqueue:
            for _first, units in cqueue.iter_batches(1 << 16):
                offs = units["commit_log_offset"].astype(np.int64)
                ok = (offs >= lo) & (offs + units["size"].astype(np.int64) <= hi)
                if skip is not None:
                    ok &= (offs < skip[0]) | (offs > skip[1])
                offs = offs[ok]
                for off, props in zip(offs.tolist(), log.gather_properties(offs)):
                    if props is not None and key_matches(props, key, uniq_key):
                        found.append(log.read_message(off))
    return found


def scan_tier(store: Store, topic: str, key: str | None, uniq_key: str | None,
              offset_id: tuple[str, int] | None = None) -> list[Message]:
    """The messages of ``topic`` the broker serves from its tier (below each queue's local minimum,
    docs/reading.md#tiered-storage) whose key or UNIQ_KEY is the one asked, or (``offset_id``) whose offset
    message id names their flat CommitLog offset; nothing for a store read without a tier."""
    if store.tier is None:
        return []
    found = []
    for t, q, lo, hi in store.cut(topic).tiers:
        tier = store.tier_queue(t, q)
        offs = tier.units(lo, hi)["commit_log_offset"].astype(np.int64)
        if offset_id is not None:
            found += [m for m in tier.commit_log.read_messages(offs[offs == offset_id[1]])]
            continue
        for off, props in zip(offs.tolist(), tier.commit_log.gather_properties(offs)):
            if props is not None and key_matches(props, key, uniq_key):
                found.append(tier.commit_log.read_message(off))
    return found


def topic_records(store: Store, topic: str) -> Iterator[tuple[int, Message, int]]:
    """(queue id, record, the unit's tags code) of every unit of ``topic`` whose record is present."""
    if topic not in store.topics():
        return
    log = store.commit_log
    for q in store.queue_ids(topic):
        with store.queue_readers(topic, q, ext=False) as (cqueue, _ext):  # one queue's files open at a time
            for off in range(cqueue.min_offset, cqueue.max_offset):
                phys, size, slot = cqueue.unit(off)
                if log.min_offset <= phys and phys + size <= log.max_offset:
                    yield q, log.read_message(phys), slot


def unit_tags_code(store: Store, topic: str, queue_id: int, slot: int) -> int:
    """A ConsumeQueue unit's tags code (on ``SCHEDULE_TOPIC_XXXX``, the delivery time): the unit's
    slot, or, when the slot holds an ext address (the broker's ``enableConsumeQueueExt``), the
    value of the ext unit it names (docs/formats.md#tagscode-slot). :class:`cq.StoreFormatError`
    naming the queue and the address when that ext unit cannot be read."""
    if not fmt.is_ext_addr(slot):
        return slot
    ext = store.ext(topic, queue_id)
    unit = ext.get(slot) if ext is not None else None
    if unit is None:
        where = os.path.join(store.root, fmt.CONSUME_QUEUE_EXT_DIR, topic, str(queue_id))
        raise StoreFormatError(f"a {topic} queue {queue_id} unit holds ext address {slot} "
                               f"(ext offset {fmt.undecorate(slot)}), and no ext unit is there", where)
    return unit.tags_code


# ------------------------------------------------------------------ the IndexFiles
def open_index(store: Store) -> tuple[IndexFiles | None, str]:
    """The store's IndexFiles (None when they cannot be read) and what to say when a scan replaces them."""
    try:
        return store.index_files(), "the store has no index files"
    except StoreFormatError as exc:
        return None, f"its index files cannot be read ({exc})"


class IndexAnswer(NamedTuple):
    """What the IndexFiles answer for a key (:func:`query_index`)."""
    #: ``(CommitLog offset, record)`` confirmed by the record's own key, in the index's order (a record
    #: indexed under two of its keys comes twice); None when the store has no index to ask
    found: list[tuple[int, Message]] | None
    #: how many hash candidates the index gave
    candidates: int
    #: why a scan must replace the index (when ``found`` is None)
    why_scan: str
    #: the CommitLog range the index files cover: ``(begin_phy_offset of the first, end_phy_offset of the
    #: last)``, the offset of the first and of the last record indexed; None without an index
    covered: tuple[int, int] | None = None
    #: how many index files were asked
    files: int = 0


def query_index(store: Store, topics: Sequence[str], key: str | None, uniq_key: str | None, *,
                served_from: Callable[[Message, str], bool] = in_topic) -> IndexAnswer:
    """The records of ``topics`` the IndexFiles give for ``uniq_key`` (else ``key``), each confirmed by
    its own ``UNIQ_KEY`` or ``KEYS`` (an index entry is a hash candidate, docs/config-and-index.md#index-file),
    and the CommitLog range the index covers (what a scan must add, docs/find.md#keys).

    ``served_from(record, topic)`` says whether a record read at a candidate belongs to the topic
    asked (:func:`in_topic`: its own topic or an LMQ it was dispatched to).
    """
    index, why_scan = open_index(store)
    if index is None or not len(index):
        if index is not None:
            index.close()
        return IndexAnswer(None, 0, why_scan)
    wanted = uniq_key if uniq_key is not None else key
    found: list[tuple[int, Message]] = []
    candidates = 0
    try:
        covered = (index.files[0].header.begin_phy_offset, index.files[-1].header.end_phy_offset)
        for topic in topics:
            offsets = index.query(topic, wanted)  # every hash candidate of every file: no cap
            candidates += len(offsets)
            for off in offsets:
                msg = message_at(store, off)
                if msg is not None and served_from(msg, topic) and key_matches(msg.properties, key, uniq_key):
                    found.append((off, msg))
        return IndexAnswer(found, candidates, why_scan, covered, len(index))
    finally:
        index.close()


def records_by_uniq_key(store: Store, topics: Sequence[str], uniq_key: str) -> list[Message]:
    """The records of ``topics`` (those the store has; not BatchCQ ones) whose ``UNIQ_KEY`` is ``uniq_key``:
    the IndexFiles' candidates confirmed by the record, and a scan of the units no index file covers
    (before the first entry, after the last); every unit when the store has no readable index files."""
    present = [t for t in topics if t in store.topics()]
    answer = query_index(store, present, None, uniq_key, served_from=lambda msg, t: msg.topic == t)
    if answer.found is None:
        return [m for t in present for m in scan_topic(store, t, None, uniq_key)]
    found = dict(answer.found)
    for t in present:
        found.update((m.commit_log_offset, m) for m in scan_topic(store, t, None, uniq_key, skip=answer.covered))
    return [found[off] for off in sorted(found)]


# ------------------------------------------------------------------ find_messages
def compaction_positions(store: Store, topic: str, msg_id: str) -> list[tuple[int, int]]:
    """``(queue id, queue offset)`` of each message of compaction topic ``topic`` whose offset message id, as
    its consumer sees it (store host and compaction log position, docs/reading.md#compaction-topics), is
    ``msg_id``: one per queue whose compaction CQ has a unit at that position (each queue's log has its own
    positions, so several queues may)."""
    parsed = parse_offset_msg_id(msg_id)
    if parsed is None:
        return []
    wanted, out = msg_id.strip().upper(), []
    for q in store.queue_ids(topic):
        with store.queue_readers(topic, q, ext=False) as (cqueue, _ext):
            rows = np.flatnonzero(cqueue.units["commit_log_offset"] == parsed[1])
            offsets = cqueue.units["base_offset"][rows].tolist()
        if offsets:
            with store.compaction_log(topic, q) as log:
                if log.read_message(parsed[1]).msg_id == wanted:
                    out += [(q, int(o)) for o in offsets]
    return out


def find_messages(store: Store | Cluster, topic: str, *, msg_id: str | None = None,
                  key: str | None = None) -> tuple[list[Message], str, str]:
    """Messages of ``topic`` by offset message id, ``UNIQ_KEY`` (given as ``msg_id``) or key.

    A :class:`cq.Cluster` looks on each broker holding the topic; each message found has its
    :attr:`cq.Message.broker` set, and ``note`` says how each broker found it.

    Returns
    -------
    (messages, found_by, note)
        ``found_by`` is ``"msg_id"``, ``"index"`` or ``"scan"``; ``note`` says how (and why a
        scan was needed). Messages are in CommitLog order.

    Raises
    ------
    MessageNotFoundError
        Nothing matches (the message says what was searched).
    """
    if (msg_id is None) == (key is None):
        raise ValueError("give msg_id or key")
    if isinstance(store, Cluster):
        return _find_in_cluster(store, topic, msg_id, key)
    if msg_id is not None:
        parsed = parse_offset_msg_id(msg_id)
        if parsed is not None:
            msg = message_at(store, parsed[1])
            if msg is not None and msg.msg_id == msg_id.strip().upper():
                if not in_topic(msg, topic):
                    raise MessageNotFoundError(f"message {msg_id} (CommitLog offset {parsed[1]}) is on topic "
                                               f"{msg.topic!r}, not {topic!r}")
                return [msg], "msg_id", f"offset message id: store host {parsed[0]}, CommitLog offset {parsed[1]}"
            tiered = [m for m in scan_tier(store, topic, None, None, parsed) if m.msg_id == msg_id.strip().upper()]
            if tiered:  # a record the broker serves from its tier carries its flat CommitLog offset
                return tiered, "msg_id", (f"offset message id: store host {parsed[0]}, offset {parsed[1]} in the "
                                          f"tier's flat CommitLog of queue {tiered[0].queue_id}")
    uniq_key = msg_id
    wanted = msg_id if msg_id is not None else key
    what = f"UNIQ_KEY {wanted!r}" if msg_id is not None else f"key {wanted!r}"
    # the messages the broker serves from its tier first (older than the local ones); the local
    # IndexFiles and records hold only the local range (docs/reading.md#tiered-storage)
    tiered = scan_tier(store, topic, key, uniq_key)
    in_tier = f"; {len(tiered)} in the tier" if store.tier is not None else ""
    indexed, candidates, why_scan, _covered, _files = query_index(store, [topic], key, uniq_key)
    if indexed is not None:
        found = sorted((msg for _off, msg in indexed), key=lambda m: m.commit_log_offset)
        if found or tiered:
            return tiered + found, "index", (f"{what} found in the index files ({candidates} hash candidate(s), "
                                             f"{len(found)} confirmed by the record's own key){in_tier}")
        why_scan = f"{what} is not in the index files ({candidates} hash candidate(s), none confirmed)"
    found = scan_topic(store, topic, key, uniq_key)
    if not found and not tiered:
        looked = ("it names no record of the topic as an offset message id; "
                  if msg_id is not None and parse_offset_msg_id(msg_id) else "")
        tier = f" and its tier {store.tier_path}" if store.tier is not None else ""
        raise MessageNotFoundError(f"no message of topic {topic!r} has {what} in {store.root}{tier}: {looked}"
                                   f"{why_scan}, and a scan of the topic found none")
    found.sort(key=lambda m: m.commit_log_offset)
    return tiered + found, "scan", f"{what} found by scanning topic {topic}: {why_scan}{in_tier}"


def _find_in_cluster(cluster: Cluster, topic: str, msg_id: str | None, key: str | None):
    """:func:`find_messages` on each broker of ``cluster`` holding ``topic``."""
    found: list[Message] = []
    how: list[tuple[str, str]] = []
    misses = []
    for name in cluster.brokers_of(topic):
        try:
            msgs, found_by, note = find_messages(cluster.stores[name], topic, msg_id=msg_id, key=key)
        except MessageNotFoundError as exc:
            misses.append(f"{name}: {exc}")
            continue
        for m in msgs:
            m.broker = name
        found += msgs
        how.append((found_by, f"{name}: {note}"))
    if not found:
        raise MessageNotFoundError("no broker of the cluster holds it; " + "; ".join(misses))
    return found, how[0][0], "; ".join(note for _, note in how)


def batch_message_at(store: Store, topic: str, queue_id: int, queue_offset: int) -> Message | None:
    """The message at (``queue_id``, ``queue_offset``) of BatchCQ topic ``topic``, taken out of its
    batch record (docs/reading.md#batchcq); None when the record is no longer in the CommitLog.
    :class:`MessageNotFoundError` when the queue has no such offset."""
    try:
        cqueue = store.consume_queue(topic, queue_id)
    except KeyError as exc:
        raise MessageNotFoundError(str(exc.args[0]) if exc.args else str(exc)) from None
    if not cqueue.min_offset <= queue_offset < cqueue.max_offset:
        raise MessageNotFoundError(f"queue offset {queue_offset} is outside BatchCQ queue {topic}/{queue_id}'s "
                                   f"messages [{cqueue.min_offset}, {cqueue.max_offset}) in {store.root}")
    unit = cqueue.units_between(queue_offset, queue_offset + 1)[0]
    record = message_at(store, int(unit["commit_log_offset"]))
    return None if record is None else expand_batch(record)[queue_offset - int(unit["base_offset"])]


def find_batch_messages(store: Store, topic: str, msg_id: str | None, key: str | None) -> list[tuple[int, int]]:
    """(queue id, queue offset) of every message of BatchCQ topic ``topic`` whose ``UNIQ_KEY`` or key is
    the one asked, or (an offset message id) of every message of the batch record it names: a scan
    of the topic's batch records (the IndexFiles index a batch record, not its messages)."""
    wanted = msg_id.strip().upper() if msg_id is not None else None
    found = []
    for q in store.queue_ids(topic):
        with store.queue_readers(topic, q, ext=False) as (cqueue, _ext):
            for off in cqueue.units["commit_log_offset"].tolist():
                record = message_at(store, off)
                if record is None:
                    continue
                for m in expand_batch(record):
                    if record.msg_id == wanted or key_matches(m.properties, key, msg_id):
                        found.append((q, m.queue_offset))
    if not found:
        what = f"UNIQ_KEY or offset message id {msg_id!r}" if msg_id is not None else f"key {key!r}"
        raise MessageNotFoundError(f"no message of BatchCQ topic {topic!r} has {what} in {store.root} "
                                   "(a scan of its batch records)")
    return found
