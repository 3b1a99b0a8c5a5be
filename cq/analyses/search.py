"""``rmqfilter find``: every message of one store or a cluster by key, unique key, message id, store time,
properties and a group's view (docs/find.md).

:func:`find` takes its candidates from the cheapest source the question allows, then keeps exactly
the records that answer it:

* a ``UNIQ_KEY`` or key goes through the IndexFiles the broker wrote (every entry, no cap; each hash
  candidate confirmed against the record's own key), and where no index file covers part of the
  CommitLog (before the first entry, after the last, or no index at all) that part is scanned, and
  the answer says so (docs/find.md#keys);
* an offset message id names its record (store host and CommitLog offset), else it is looked up as
  a ``UNIQ_KEY``;
* a store-time window alone is the broker's binary search of each queue by store time
  (:mod:`cq.analyses.by_time`, docs/find.md#by-time), then the records of the range found;
* nothing of those: every unit of the topic(s).

Then, over the candidates: the topic, the key, the window (exactly, on each record's store time),
``where`` (a SQL92 selector over the record's properties, compiled by :func:`selector.compile`) and,
for ``group``, the broker's decision for the group (:func:`cq.store.decide.decide_units`, the one
pipeline) and each kept message's state (:func:`cq.analyses.paths.why_every_copy`, ``why``'s).
"""
from __future__ import annotations

import time
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

import selector

from .. import format as fmt
from ..filter.layers import Layers
from ..readers.batchcq import expand_batch
from ..readers.commitlog import CommitLog, Message
from ..store.cluster import Cluster, broker_name, each_store
from ..store.decide import decide_units
from ..store.store import Store
from .by_time import QueueSearch, time_range
from .find import in_topic, key_matches, message_at, parse_offset_msg_id, position, query_index
from .paths import why_every_copy
from .why import resolve_subscription

__all__ = ["COLUMNS", "FindResult", "FindRow", "FindRows", "find"]

#: The columns of a row, in table order (``state`` only with a group).
COLUMNS = ("broker", "topic", "queue_id", "queue_offset", "commit_log_offset", "msg_id", "uniq_key", "keys", "tags",
           "store_timestamp", "born_timestamp", "found_by", "state")

#: How a row's record was found; ``tier``: in the tier's flat files, read where the broker serves the queue
#: from its tier (docs/reading.md#tiered-storage; the note says how).
BY_MSG_ID, BY_INDEX, BY_SCAN, BY_TIME, BY_TIER = "msg_id", "index", "scan", "time_search", "tier"
#: Records decoded at a time while reading a range.
_CHUNK = 1 << 16
#: The record fields a row is made of (:meth:`FindRow.made`), in its argument order: what the columns path decodes.
ROW_FIELDS = ("topic", "queue_id", "queue_offset", "commit_log_offset", "store_host", "properties", "store_timestamp",
              "born_timestamp")


@dataclass
class FindRow:
    """One message found (a record of the CommitLog and its place in its queue)."""

    broker: str
    topic: str
    queue_id: int
    queue_offset: int
    commit_log_offset: int
    msg_id: str
    uniq_key: str | None
    keys: str | None
    tags: str | None
    store_timestamp: int
    born_timestamp: int
    found_by: str
    state: str | None = None

    @classmethod
    def of(cls, broker: str, msg: Message, found_by: str, topic: str | None = None) -> FindRow:
        """The row of record ``msg``, in ``topic`` (default its own; an LMQ it was dispatched to: its place there)."""
        topic = msg.topic if topic is None else topic
        queue_id, queue_offset = position(msg, topic)
        return cls.made(broker, topic, queue_id, queue_offset, msg.commit_log_offset, msg.store_host, msg.properties,
                        msg.store_timestamp, msg.born_timestamp, found_by)

    @classmethod
    def made(cls, broker: str, topic: str, queue_id: int, queue_offset: int, commit_log_offset: int, store_host: str,
             properties: dict, store_timestamp: int, born_timestamp: int, found_by: str) -> FindRow:
        """The row of a record from its fields (:data:`ROW_FIELDS`, as decoded): its place in ``topic``, its offset
        message id (:attr:`cq.Message.msg_id`), its keys and tags from its properties."""
        p = properties
        return cls(broker, topic, queue_id, queue_offset, commit_log_offset,
                   fmt.offset_msg_id(store_host, commit_log_offset), p.get(fmt.PROPERTY_UNIQ_KEY),
                   p.get(fmt.PROPERTY_KEYS), p.get(fmt.PROPERTY_TAGS), store_timestamp, born_timestamp, found_by)

    def to_dict(self, group: bool = False) -> dict[str, Any]:
        d = asdict(self)
        if not group:
            del d["state"]
        return d


class _RecordRows:
    """Rows of records decoded as columns (``CommitLog.decode_columns`` of :data:`ROW_FIELDS`; no body): no object
    per row until :meth:`rows` makes them (:meth:`FindRow.made`, as for a record read whole)."""

    __slots__ = ("broker", "columns", "found_by", "rows_kept")

    def __init__(self, broker: str, columns, rows_kept: np.ndarray, found_by: str) -> None:
        self.broker, self.columns, self.rows_kept, self.found_by = broker, columns, rows_kept, found_by

    def __len__(self) -> int:
        return len(self.rows_kept)

    def column(self, name: str) -> np.ndarray:
        """An integer field of the kept rows (a record field: the row's own queue, never an LMQ's)."""
        return np.asarray(self.columns.columns[name])[self.rows_kept]

    def rows(self) -> list[FindRow]:
        cols, kept = self.columns, self.rows_kept
        fields = {name: (cols.texts(name, rows=kept) if name in ("topic", "store_host") else
                         cols.dicts(kept) if name == "properties" else self.column(name).tolist())
                  for name in ROW_FIELDS}
        return [FindRow.made(self.broker, *values, self.found_by) for values in zip(*fields.values())]


class FindRows(Sequence):
    """The rows :func:`find` found, in order: a sequence of :class:`FindRow`.

    The data path keeps the records it read as columns; a :class:`FindRow` is made for each row only when the
    rows are read as objects (iterated, indexed, compared, printed), all at once, and kept. :meth:`column` reads
    an integer field of every row without making them.
    """

    __slots__ = ("_made", "_parts")

    def __init__(self, parts: Iterable = ()) -> None:
        #: lists of FindRow and _RecordRows, in order
        self._parts: list = [p for p in parts if len(p)]
        self._made: list[FindRow] | None = None

    @classmethod
    def of_records(cls, log: CommitLog, broker: str, offsets, found_by: str) -> FindRows:
        """The rows of the records at CommitLog ``offsets`` (in that order), each ``found_by`` that, as columns."""
        offs = np.asarray(offsets, dtype=np.int64).reshape(-1)
        return cls(_RecordRows(broker, log.decode_columns(offs[a:a + _CHUNK], ROW_FIELDS),
                               np.arange(len(offs[a:a + _CHUNK]), dtype=np.int64), found_by)
                   for a in range(0, len(offs), _CHUNK))

    def _rows(self) -> list[FindRow]:
        if self._made is None:
            made: list[FindRow] = []
            for part in self._parts:
                made += part.rows() if isinstance(part, _RecordRows) else part
            self._made, self._parts = made, [made]
        return self._made

    def __len__(self) -> int:
        return len(self._made) if self._made is not None else sum(len(p) for p in self._parts)

    def __getitem__(self, i):
        return self._rows()[i]

    def __iter__(self):
        return iter(self._rows())

    def __eq__(self, other) -> bool:
        if isinstance(other, (FindRows, list)):
            return self._rows() == list(other)
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"FindRows({len(self)} rows)"

    def column(self, name: str) -> np.ndarray:
        """Field ``name`` of every row (an integer one: ``queue_id``, ``queue_offset``, ``commit_log_offset``,
        ``store_timestamp``, ``born_timestamp``) as an int64 array, without making the rows."""
        if name not in ("queue_id", "queue_offset", "commit_log_offset", "store_timestamp", "born_timestamp"):
            raise ValueError(f"FindRows.column reads an integer field, not {name!r}")
        parts = [p.column(name) if isinstance(p, _RecordRows) else np.array([getattr(r, name) for r in p])
                 for p in self._parts]
        return np.concatenate(parts).astype(np.int64) if parts else np.empty(0, dtype=np.int64)


@dataclass
class FindResult:
    """What :func:`find` found, how, and what it read.

    Attributes
    ----------
    rows : FindRows or list of FindRow
        Per broker (in the cluster's order), in CommitLog order.
    notes : list of str
        How each broker's candidates were found; a scan says which CommitLog range and why.
    stats : dict
        ``index_files``, ``index_candidates``, ``index_confirmed``; ``scanned_records`` and ``scans``
        (broker, ``from``, ``to``, ``records``, ``why``); ``queues`` (each queue's time search:
        ``units``, ``probes``, ``first``, ``end``), ``probes`` and ``range_units`` summed, ``units``
        (every searched queue's units).
    group : str or None
    """

    rows: FindRows | list[FindRow]
    notes: list[str]
    stats: dict[str, Any]
    group: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"rows": [r.to_dict(self.group is not None) for r in self.rows], "notes": self.notes,
                "stats": self.stats}


@dataclass
class _Query:
    topic: str | None
    key: str | None
    uniq_key: str | None
    msg_id: str | None
    begin: int | None
    end: int | None
    where: Any
    group: str | None
    sql: str | None
    tags: str | None
    stats: dict = field(default_factory=lambda: {
        "index_files": 0, "index_candidates": 0, "index_confirmed": 0, "scanned_records": 0, "scans": [],
        "queues": [], "probes": 0, "range_units": 0, "units": 0})
    notes: list = field(default_factory=list)


def find(store: Store | Cluster, *, topic: str | None = None, key: str | None = None, uniq_key: str | None = None,
         msg_id: str | None = None, between: tuple[int, int] | None = None, where: str | None = None,
         group: str | None = None, sql: str | None = None, tags: str | None = None,
         now_ms: int | None = None) -> FindResult:
    """Every message of ``store`` (a Store or a Cluster) answering the question (docs/find.md).

    Parameters
    ----------
    store : cq.Store or cq.Cluster
        Each row names its broker (the store's own name for one store, :func:`cq.store.cluster.broker_name`).
    topic : str, optional
        Only this topic (default every topic of the store).
    key, uniq_key : str, optional
        A key of ``KEYS`` and / or the ``UNIQ_KEY`` (both: records carrying both).
    msg_id : str, optional
        An offset message id (store host + CommitLog offset), else taken as a ``UNIQ_KEY`` (not with ``uniq_key``).
    between : (int, int), optional
        Store times ``[begin, end]`` in ms, both included.
    where : str, optional
        A SQL92 selector over each record's properties (:class:`selector.SelectorSyntaxError`, with its
        position, when it does not parse); a record is kept where the broker's evaluation is true.
    group : str, optional
        Keep what this group received or would receive (its filter on the topic: ``sql`` / ``tags``, else
        its registration), each row with its ``why`` state (:data:`cq.analyses.paths.STATES`). Needs ``topic``.
    now_ms : int, optional
        The time the states count to (default now).

    Raises
    ------
    ValueError
        Arguments that do not go together, a window whose end is before its begin.
    LookupError
        ``topic`` has no consume queues in the store (on no broker of a cluster).
    """
    if uniq_key is not None and msg_id is not None:
        raise ValueError("give uniq_key or msg_id, not both")
    begin, end = between if between is not None else (None, None)
    if between is not None and begin > end:
        raise ValueError(f"the time window ends ({end}) before it begins ({begin})")
    if group is None and (sql is not None or tags is not None):
        raise ValueError("sql and tags are a group's subscription: give group too")
    if sql is not None and tags is not None:
        raise ValueError("give sql or tags, not both")
    if group is not None and topic is None:
        raise ValueError("group needs topic (a group's filter is per topic)")
    q = _Query(topic, key, uniq_key, msg_id, begin, end, selector.compile(where) if where is not None else None,
               group, sql, tags)
    now_ms = int(time.time() * 1000) if now_ms is None else now_ms
    parts: list = []
    holders = 0
    named = _holding_msg_id(store, msg_id)  # an offset message id names one broker's record: ask it alone
    for name, one in each_store(store):
        broker = name if name is not None else broker_name(one)[0]
        if topic is not None and topic not in one.topics() or named and name not in named:
            continue
        holders += 1
        parts += _find_in_store(one, broker, q, now_ms)
    if topic is not None and not holders:
        raise LookupError(f"topic {topic!r} has no consume queues in {store.root}")
    return FindResult(FindRows(parts), q.notes, q.stats, group)


def _holding_msg_id(store: Store | Cluster, msg_id: str | None) -> set[str]:
    """The brokers of a cluster holding the record ``msg_id`` names as an offset message id (empty: ask every one)."""
    parsed = parse_offset_msg_id(msg_id) if msg_id is not None else None
    if parsed is None or not isinstance(store, Cluster) or any(one.tier is not None for _, one in each_store(store)):
        return set()  # a tier's record carries its flat CommitLog offset: every broker is asked
    wanted = msg_id.strip().upper()
    return {name for name, one in each_store(store)
            if (m := message_at(one, parsed[1])) is not None and m.msg_id == wanted}


# ------------------------------------------------------------------ one broker
def _find_in_store(store: Store, broker: str, q: _Query, now_ms: int) -> list:
    """The rows of one broker's store, as parts of :class:`FindRows` (lists of FindRow, :class:`_RecordRows`)."""
    log = store.commit_log
    topics = [q.topic] if q.topic is not None else store.topics()
    # one consistent cut (docs/live.md): the queues' ends, then the CommitLog's; records wholly inside it are read.
    # A key or an id reads the CommitLog alone: its cut opens no queue.
    lmq = q.topic is not None and q.topic.startswith(fmt.LMQ_PREFIX)  # docs/formats.md#lmq
    by_record = (q.msg_id is not None or q.key is not None or q.uniq_key is not None) and not lmq
    # a window or a scan of one topic reads the queues its cut opened: kept, not opened and recovered again
    # (every topic's queues are not: a store of thousands of queues would hold them all open)
    cut = (store.cut(topics[0], []) if by_record and topics
           else store.cut(q.topic, keep_readers=q.topic is not None))
    lo, hi = cut.commit_log_min, cut.commit_log_end
    batch = [t for t in topics if t in set(store.layout.batch_cq_topics)]  # docs/find.md#batchcq
    if batch and q.group is not None:
        raise ValueError(f"topic {q.topic!r} is a BatchCQ topic: find --group does not read BatchCQ queues yet "
                         "(docs/find.md#limits)")
    batch_rows = sorted((r for t in batch for r in _batch_rows(store, broker, t, q, lo, hi)),
                        key=lambda r: (r.commit_log_offset, r.queue_offset))
    topics = [t for t in topics if t not in batch]
    if not topics:
        return [batch_rows]
    uniq = q.uniq_key
    found: dict[int, str] = {}  # CommitLog offset -> how it was found
    tier_rows: list[FindRow] = []
    if q.msg_id is not None:
        parsed = parse_offset_msg_id(q.msg_id)
        msg = message_at(store, parsed[1]) if parsed is not None else None
        if msg is None or msg.msg_id != q.msg_id.strip().upper():
            # a record the broker serves from its tier carries its flat CommitLog offset in its msg id
            tier_rows = _tier_rows(store, broker, topics, q, None, parsed) if parsed is not None else []
        if msg is not None and msg.msg_id == q.msg_id.strip().upper():
            found[msg.commit_log_offset] = BY_MSG_ID
            q.notes.append(f"{broker}: offset message id {q.msg_id}: store host {parsed[0]}, CommitLog offset "
                           f"{parsed[1]}")
        elif tier_rows:
            return [_for_group(store, tier_rows, q, now_ms) if q.group is not None else tier_rows]
        else:
            uniq = q.msg_id.strip()
            q.notes.append(f"{broker}: {q.msg_id!r} names no record of this store as an offset message id: "
                           "looked up as a UNIQ_KEY")
    if store.tier is not None and not lmq and not found:
        # the messages the broker serves from its tier first (older than the local ones): the local IndexFiles
        # and records hold only the local range (docs/reading.md#tiered-storage)
        tier_rows = _tier_rows(store, broker, topics, q, uniq, None)
    units = None  # the candidates of a queue's units: CommitLog offsets and the topic (of topics) of each
    if not found and lmq and (uniq is not None or q.key is not None):
        # the IndexFiles hold a record under its own topic only, never under an LMQ it was dispatched to
        offs, _topic = _every_unit(store, broker, topics, cut, q,
                                   "the IndexFiles hold a record under its own topic, never under an LMQ "
                                   "(docs/find.md#limits)")
        found = dict.fromkeys(offs.tolist(), BY_SCAN)
    elif not found and (uniq is not None or q.key is not None):
        found = _by_index(store, broker, topics, q.key, uniq, lo, hi, q)
    elif not found and q.begin is not None:
        units, how = _by_time(store, broker, topics, q, cut), BY_TIME
    elif not found:
        units, how = _every_unit(store, broker, topics, cut, q), BY_SCAN
    wanted = set(topics)
    lmqs = [t for t in wanted if t.startswith(fmt.LMQ_PREFIX)]
    if units is not None and not lmqs:
        parts = _unit_rows(log, broker, topics, *units, how, q)
    else:
        if units is not None:
            found = dict.fromkeys(units[0].tolist(), how)
        parts = [_record_rows(log, broker, found, wanted, lmqs, uniq, q)]
    if q.group is not None:  # (never with a BatchCQ topic: refused above)
        return [_for_group(store, tier_rows + FindRows(parts)._rows(), q, now_ms)]
    if batch_rows:
        rows = tier_rows + FindRows(parts)._rows()
        return [sorted(rows + batch_rows, key=lambda r: (r.commit_log_offset, r.queue_offset))]
    return [tier_rows, *parts]


def _record_rows(log: CommitLog, broker: str, found: dict[int, str], wanted: set[str], lmqs: list[str],
                 uniq: str | None, q: _Query) -> list[FindRow]:
    """The rows of the records at the CommitLog offsets ``found`` (each with how it was found) answering ``q``:
    each record read whole (a key's, an id's, an LMQ's candidates)."""
    offsets = sorted(found)
    rows = []
    for start in range(0, len(offsets), _CHUNK):
        msgs = log.read_messages(offsets[start:start + _CHUNK])
        keep = [m for m in msgs if (m.topic in wanted or any(in_topic(m, t) for t in lmqs))
                and (q.key is None or key_matches(m.properties, q.key, None))
                and (uniq is None or key_matches(m.properties, None, uniq))
                and (q.begin is None or q.begin <= m.store_timestamp <= q.end)]
        if q.where is not None and keep:
            ok = q.where.matches_many([m.properties for m in keep])
            keep = [m for m, k in zip(keep, ok.tolist()) if k]
        rows += [FindRow.of(broker, m, found[m.commit_log_offset], _served_from(m, wanted, lmqs)) for m in keep]
    return rows


def _unit_rows(log: CommitLog, broker: str, topics: list[str], offsets: np.ndarray, topic_of: np.ndarray,
               how: str, q: _Query) -> list[_RecordRows]:
    """The rows of queue units' records (``offsets``, each unit's topic ``topics[topic_of[i]]``) answering
    ``q`` (its window, its ``where``), in CommitLog order, as columns: each record decoded once, the record's
    topic and store time compared as arrays; a Python object per row only for ``where`` (its properties)."""
    offsets, first = np.unique(offsets, return_index=True)  # CommitLog order, each record once
    topic_of = topic_of[first]
    names = [t.encode() for t in topics]
    lengths = np.array([len(n) for n in names], dtype=np.int64)
    table = np.zeros((len(names), max(1, int(lengths.max(initial=0)))), dtype=np.uint8)
    for i, n in enumerate(names):
        table[i, :len(n)] = np.frombuffer(n, dtype=np.uint8)
    parts = []
    for a in range(0, len(offsets), _CHUNK):
        offs, want = offsets[a:a + _CHUNK], topic_of[a:a + _CHUNK]
        cols = log.decode_columns(offs, ROW_FIELDS)
        keep = _topic_is(cols.columns["topic"], want, lengths, table)
        if q.begin is not None:
            stamps = cols.columns["store_timestamp"]
            keep &= (stamps >= q.begin) & (stamps <= q.end)
        rows = np.flatnonzero(keep)
        if q.where is not None and len(rows):
            rows = rows[np.asarray(q.where.matches_many(cols.dicts(rows)), dtype=bool)]
        if len(rows):
            parts.append(_RecordRows(broker, cols, rows.astype(np.int64), how))
    return parts


def _topic_is(topic_col: tuple, want: np.ndarray, lengths: np.ndarray, table: np.ndarray) -> np.ndarray:
    """Whether each row's decoded topic (a text column) is the topic ``want`` names (row ``want[i]`` of ``table``,
    the topics' UTF-8 bytes, ``lengths`` long): every row's bytes compared at once, as a rows x width array."""
    ends, data, _valid = topic_col
    ends = np.asarray(ends, dtype=np.int64)
    data = np.asarray(data)
    need = lengths[want]
    ok = np.diff(ends) == need
    if not len(data) or not ok.any():
        return ok
    width = np.arange(table.shape[1])
    at = np.minimum(ends[:-1, None] + width, len(data) - 1)  # (bytes past a topic are not compared)
    ok &= ((data[at] == table[want]) | (width >= need[:, None])).all(axis=1)
    return ok


def _tier_rows(store: Store, broker: str, topics: list[str], q: _Query, uniq: str | None,
               offset_id: tuple[str, int] | None) -> list[FindRow]:
    """The rows of the messages the broker serves from its tier (each queue's range below its local minimum,
    ``StoreCut.tiers``; docs/reading.md#tiered-storage) answering ``q``, ``found_by`` :data:`BY_TIER`, in queue
    order. An offset message id (``offset_id``) names a record by its flat CommitLog offset; a key or unique key
    reads each range's properties; a window alone is the broker's search of the tier's flat ConsumeQueue by
    store time (:func:`cq.analyses.by_time.time_range`), then the range found read; else every unit."""
    if store.tier is None:
        return []
    wanted = set(topics)
    cut = store.cut(q.topic) if q.topic is not None else store.cut()
    by_key = q.key is not None or uniq is not None
    by_time = offset_id is None and not by_key and q.begin is not None
    wanted_id = q.msg_id.strip().upper() if offset_id is not None else None
    rows: list[FindRow] = []
    records = ranges = 0
    for t, qid, lo, hi in cut.tiers:
        if t not in wanted:
            continue
        tier = store.tier_queue(t, qid)
        log = tier.commit_log
        ranges += 1
        if by_time:
            search = QueueSearch(t, qid, lo, hi)
            time_range(tier.consume_queue, log, search, q.begin, q.end, log.min_offset, log.max_offset)
            lo, hi = search.first, search.end
            q.stats["queues"].append({"broker": broker, "tier": True, **search.to_dict()})
            q.stats["probes"] += search.probes
            q.stats["units"] += search.units
            q.stats["range_units"] += hi - lo
        if hi <= lo:
            continue
        offs = tier.units(lo, hi)["commit_log_offset"].astype(np.int64)
        if offset_id is not None:
            offs = offs[offs == offset_id[1]]
        elif by_key:  # the properties first: only the records holding the key are read whole
            props = log.gather_properties(offs)
            keep = [p is not None and (q.key is None or key_matches(p, q.key, None))
                    and (uniq is None or key_matches(p, None, uniq)) for p in props]
            records += len(offs)
            offs = offs[np.array(keep, dtype=bool)] if len(offs) else offs
        for start in range(0, len(offs), _CHUNK):
            msgs = log.read_messages(offs[start:start + _CHUNK])
            if not by_key:
                records += len(msgs)
            keep = [m for m in msgs if (wanted_id is None or m.msg_id == wanted_id)
                    and (q.begin is None or q.begin <= m.store_timestamp <= q.end)]
            if q.where is not None and keep:
                ok = q.where.matches_many([m.properties for m in keep])
                keep = [m for m, k in zip(keep, ok.tolist()) if k]
            rows += [FindRow.of(broker, m, BY_TIER) for m in keep]
    how = ("offset message id in the flat CommitLogs" if offset_id is not None else
           "the key read from each record's properties" if by_key else
           "the broker's search of the flat ConsumeQueues by store time" if by_time else "every unit")
    q.stats["scanned_records"] += records
    q.notes.append(f"{broker}: the tier {store.tier_path}: {len(rows)} message(s) in {ranges} queue range(s) the "
                   f"broker serves from it, {how} ({records} record(s) read)")
    return rows


def _batch_rows(store: Store, broker: str, topic: str, q: _Query, lo: int, hi: int) -> list[FindRow]:
    """The messages of BatchCQ topic ``topic`` answering ``q`` (docs/find.md#batchcq): a unit is a batch record,
    found by its own store time where only a window is asked (a binary search of the units, which hold it, as
    the broker's BatchConsumeQueue searches), else every unit's record read; each record's messages unwrapped
    and kept one by one (the IndexFiles hold a batch record's keys, not its messages')."""
    log = store.commit_log
    by_time = q.begin is not None and q.key is None and q.uniq_key is None and q.msg_id is None
    wanted_id = q.msg_id.strip().upper() if q.msg_id is not None else None
    uniq = q.uniq_key if q.uniq_key is not None else (q.msg_id.strip() if q.msg_id is not None else None)
    rows, records = [], 0
    for qid in store.queue_ids(topic):
        with store.queue_readers(topic, qid, ext=False) as (bcq, _ext):
            units = bcq.units
            a, b = 0, len(units)
            if by_time:
                stamps = units["store_timestamp"]
                a, b = int(np.searchsorted(stamps, q.begin, "left")), int(np.searchsorted(stamps, q.end, "right"))
            for off, size in zip(units["commit_log_offset"][a:b].tolist(), units["size"][a:b].tolist()):
                if off < lo or off + size > hi:
                    continue
                record = log.read_message(off)
                records += 1
                for m in expand_batch(record):
                    if (q.begin is not None and not q.begin <= m.store_timestamp <= q.end) \
                            or (q.key is not None and not key_matches(m.properties, q.key, None)) \
                            or (uniq is not None and record.msg_id != wanted_id
                                and not key_matches(m.properties, None, uniq)) \
                            or (q.where is not None and not q.where.matches(m.properties)):
                        continue
                    rows.append(FindRow.of(broker, m, BY_TIME if by_time else BY_SCAN))
    how = "found by the units' own store time" if by_time else "every batch record read"
    q.stats["scanned_records"] += records
    q.notes.append(f"{broker}: BatchCQ topic {topic}: {records} batch record(s) read, {how}, their messages "
                   "unwrapped (docs/find.md#batchcq)")
    return rows


def _served_from(msg: Message, wanted: set[str], lmqs: list[str]) -> str:
    """The topic a kept record is listed in: its own when asked, else the first LMQ asked it was dispatched to."""
    if msg.topic in wanted:
        return msg.topic
    return next(t for t in lmqs if in_topic(msg, t))


# ------------------------------------------------------------------ the IndexFiles
def _by_index(store: Store, broker: str, topics: list[str], key: str | None, uniq: str | None, lo: int, hi: int,
              q: _Query) -> dict[int, str]:
    """CommitLog offsets of the records of ``topics`` with ``uniq`` (else ``key``): the IndexFiles' hash candidates
    confirmed by the record, and a scan of the CommitLog no index file covers (docs/find.md#keys)."""
    wanted = uniq if uniq is not None else key
    what = f"UNIQ_KEY {wanted!r}" if uniq is not None else f"key {wanted!r}"
    found: dict[int, str] = {}
    answer = query_index(store, topics, key if uniq is None else None, uniq, served_from=lambda msg, t: msg.topic == t)
    if answer.found is None:
        _scan_log(store, broker, topics, key, uniq, lo, hi, answer.why_scan, found, q)
        return found
    confirmed = [off for off, msg in answer.found if off + msg.store_size <= hi]
    found.update(dict.fromkeys(confirmed, BY_INDEX))
    q.stats["index_files"] += answer.files
    q.stats["index_candidates"] += answer.candidates
    q.stats["index_confirmed"] += len(confirmed)
    q.notes.append(f"{broker}: {what} through {answer.files} index file(s): {answer.candidates} hash candidate(s), "
                   f"{len(confirmed)} confirmed by the record's own key")
    covered = answer.covered
    if lo < covered[0]:
        _scan_log(store, broker, topics, key, uniq, lo, min(covered[0], hi),
                  f"no index file covers the CommitLog before offset {covered[0]} (the first index entry)", found, q)
    last_indexed = message_at(store, covered[1])  # the last record indexed: the scan reads what follows it
    if last_indexed is None:
        _scan_log(store, broker, topics, key, uniq, lo, hi,
                  f"the last index entry's record (CommitLog offset {covered[1]}) is not in the CommitLog", found, q)
    elif covered[1] + last_indexed.store_size < hi:
        _scan_log(store, broker, topics, key, uniq, covered[1], hi,
                  f"no index file covers the CommitLog after the record at offset {covered[1]} (the last index "
                  "entry's)", found, q, skip_first=True)
    return found


def _scan_log(store: Store, broker: str, topics: Iterable[str], key: str | None, uniq: str | None, start: int,
              stop: int, why: str, found: dict[int, str], q: _Query, *, skip_first: bool = False) -> None:
    """Add the records of ``[start, stop)`` of the CommitLog with the key, and say that (and why) they were scanned.

    ``start`` is a record's start (``skip_first``: that record is not read), or the log's first byte: the log's
    own walk then finds its first record (a DLedger entry's record lies past the entry's header)."""
    wanted = set(topics)
    log = store.commit_log
    fields = ["store_size", "commit_log_offset", "topic", "properties"]
    batches = log.column_batches(fields) if start <= log.min_offset else log.record_batches(start, stop, fields)
    records = 0
    for cols in batches:
        offs = cols.columns["commit_log_offset"].tolist()
        if offs and offs[0] >= stop:
            break
        sizes = cols.columns["store_size"].tolist()
        for off, size, t, props in zip(offs, sizes, cols.texts("topic"), cols.dicts()):
            if off >= stop:
                break
            if skip_first and off == start:
                continue
            records += 1
            if t in wanted and off + size <= stop and key_matches(props, key if uniq is None else None, uniq) \
                    and (uniq is None or key is None or key_matches(props, key, None)):
                found.setdefault(off, BY_SCAN)
    q.stats["scanned_records"] += records
    q.stats["scans"].append({"broker": broker, "from": start, "to": stop, "records": records, "why": why})
    q.notes.append(f"{broker}: scanned CommitLog [{start}, {stop}) ({records} record(s)): {why}")


# ------------------------------------------------------------------ store time
def _by_time(store: Store, broker: str, topics: list[str], q: _Query, cut) -> tuple[np.ndarray, np.ndarray]:
    """The units of ``topics`` the broker's search of each queue by store time finds for the window
    (:func:`cq.analyses.by_time.time_range`) whose records are in the cut: their CommitLog offsets and the index
    in ``topics`` of each one's topic (the caller keeps the records whose store times are in the window)."""
    lo, hi = cut.commit_log_min, cut.commit_log_end
    log = store.commit_log
    offs, topic_of = [], []
    index = {t: i for i, t in enumerate(topics)}
    searched = probes = units = 0
    for t, qid, qlo, qhi in cut.queues:
        if t not in index or qhi <= qlo:
            continue
        with store.queue_readers(t, qid, ext=False) as (cqueue, _ext):
            # the local units: below them, a tiered store's tier (its rows: _tier_rows)
            search = QueueSearch(t, qid, max(qlo, min(cqueue.min_offset, qhi)), qhi)
            time_range(cqueue, log, search, q.begin, q.end, lo, hi)
            count = search.end - search.first
            for _first, units_arr in (cqueue.iter_batches(_CHUNK, search.first, count) if count > 0 else ()):
                o = units_arr["commit_log_offset"].astype(np.int64)
                o = o[(o >= lo) & (o + units_arr["size"].astype(np.int64) <= hi)]
                offs.append(o)
                topic_of.append(np.full(len(o), index[t], dtype=np.int64))
        searched += 1
        probes += search.probes
        units += search.units
        q.stats["queues"].append({"broker": broker, **search.to_dict()})
        q.stats["range_units"] += search.end - search.first
    q.stats["probes"] += probes
    q.stats["units"] += units
    q.notes.append(f"{broker}: store times [{q.begin}, {q.end}] by the broker's search of {searched} queue(s) by "
                   f"store time: {probes} record(s) probed among {units} unit(s)")
    return _joined(offs, topic_of)


def _joined(offs: list[np.ndarray], topic_of: list[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    if not offs:
        return np.empty(0, dtype=np.int64), np.empty(0, dtype=np.int64)
    return np.concatenate(offs), np.concatenate(topic_of)


def _every_unit(store: Store, broker: str, topics: list[str], cut, q: _Query,
                why: str = "no key, message id or time window narrows it") -> tuple[np.ndarray, np.ndarray]:
    """Every unit of ``topics`` whose record is in the cut (no key, id or window to narrow): their CommitLog
    offsets and the index in ``topics`` of each one's topic."""
    lo, hi = cut.commit_log_min, cut.commit_log_end
    offs, topic_of = [], []
    index = {t: i for i, t in enumerate(topics)}
    records = 0
    for t, qid, qlo, qhi in cut.queues:
        if t not in index or qhi <= qlo:
            continue
        with store.queue_readers(t, qid, ext=False) as (cqueue, _ext):
            qlo = max(qlo, min(cqueue.min_offset, qhi))  # the local units (a tier's: _tier_rows)
            for _first, units_arr in cqueue.iter_batches(_CHUNK, qlo, qhi - qlo):
                o = units_arr["commit_log_offset"].astype(np.int64)
                o = o[(o >= lo) & (o + units_arr["size"].astype(np.int64) <= hi)]
                records += len(o)
                offs.append(o)
                topic_of.append(np.full(len(o), index[t], dtype=np.int64))
    q.stats["scanned_records"] += records
    q.stats["scans"].append({"broker": broker, "from": lo, "to": hi, "records": records, "why": why})
    q.notes.append(f"{broker}: read every unit of {len(topics)} topic(s) ({records} record(s)): {why}")
    return _joined(offs, topic_of)


# ------------------------------------------------------------------ a group's view
def _for_group(store: Store, rows: list[FindRow], q: _Query, now_ms: int) -> list[FindRow]:
    """The rows ``q.group`` received or would receive (the broker's path for each row's unit, decided by
    :func:`cq.store.decide.decide_units`), each with its state (:func:`cq.analyses.paths.why_every_copy`)."""
    flt, _sub = resolve_subscription(store, q.topic, q.group, sql=q.sql, tags=q.tags)
    layers = Layers(flt)
    log = store.commit_log
    cut = store.cut(q.topic)  # the group's view: a cut of its own, as why takes for each unit
    kept: list[FindRow] = []
    by_queue: dict[int, list[FindRow]] = {}
    for r in rows:
        by_queue.setdefault(r.queue_id, []).append(r)
    for qid, queue_rows in by_queue.items():
        rng = cut.queue_range(q.topic, qid)
        if rng is None:
            continue
        for from_tier in (True, False):
            # a row of the tier: its unit in the tier's flat ConsumeQueue, decided with its flat CommitLog and no
            # ext file, as the broker serves it (docs/filtering.md#tiered-filter)
            rows_here = [r for r in queue_rows if (r.found_by == BY_TIER) == from_tier]
            if not rows_here:
                continue
            tier = store.tier_queue(q.topic, qid) if from_tier else None
            cqueue = tier.consume_queue if from_tier else store.consume_queue(q.topic, qid)
            units, mine = [], []
            for r in rows_here:
                if rng[0] <= r.queue_offset < rng[1]:
                    unit = cqueue.unit(r.queue_offset)
                    if unit[0] == r.commit_log_offset:  # the unit is this record's (a half has none)
                        units.append(unit)
                        mine.append(r)
            if not units:
                continue
            arr = np.array(units, dtype=np.int64)
            d = decide_units(layers, tier.commit_log if from_tier else log, arr[:, 0], arr[:, 1], arr[:, 2],
                             ext=None if from_tier else store.ext(q.topic, qid), present_all=True)
            kept += _with_state(store, q, qid, mine, d.delivered.tolist(), now_ms)
    kept.sort(key=lambda r: (r.found_by != BY_TIER, r.commit_log_offset if r.found_by != BY_TIER else 0,
                             r.queue_id, r.queue_offset))
    return kept


def _with_state(store: Store, q: _Query, qid: int, rows: list[FindRow], delivered: list[bool],
                now_ms: int) -> list[FindRow]:
    """The rows the group's decision delivers, each with its ``why`` state."""
    kept = []
    for r, ok in zip(rows, delivered):
        if ok:
            path = why_every_copy(store, q.topic, q.group, sql=q.sql, tags=q.tags, queue_id=qid,
                                  queue_offset=r.queue_offset, now_ms=now_ms)[0]
            r.state = path.state
            kept.append(r)
    return kept
