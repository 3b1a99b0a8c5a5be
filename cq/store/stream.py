"""Reading a live store as a stream: per-queue offsets, where a stream starts, how far a batch goes.

The ``rocketmq`` streaming source (:mod:`pyspark_udfs.streaming`) and ``rmqfilter tail``
share these rules; ``docs/live.md`` states them for users.

**Offsets** are the queues' ConsumeQueue offsets (the broker's "queue offsets"): one JSON
object ``{"<topic>": {"<queue_id>": <next queue offset to read>, ...}, ...}``. A batch
from offsets ``start`` to ``end`` reads queue offsets ``[start[q], end[q])`` of each queue;
a queue missing from ``start`` (it appeared since) starts at 0, clamped to its minimum as
the broker clamps a consumer that asks for an expired offset.

**startingOffsets**: ``earliest`` (each queue's minimum), ``latest`` (each queue's end:
only what arrives after the start), ``committed`` (the group's committed offsets in
``config/consumerOffset.json``; queues it has none for start at their minimum), or a JSON
object as above (queues it does not name start at their minimum).

**Several stores** (a cluster's brokers, docs/reading.md#clusters): queue ids repeat across
brokers, so the offsets are one store's offsets per broker, under the key ``"brokers"``:
``{"brokers": {"<broker>": {"<topic>": {"<queue_id>": <next>}}}}``. The key says which form
it is, whatever the topics are named; one store's offsets keep their own form. Each broker's
offsets follow the rules above against that broker's own cut (there is no cut across brokers);
a broker the object does not name starts each queue at its minimum, as a queue not named does.

**BatchCQ topics** (docs/reading.md#batchcq): a queue offset counts messages, and the broker serves
a pull at an offset inside a batch with the whole batch. A stream over such a topic reads whole
batches, each once: a starting offset inside a batch moves down to the batch's start (the first
read gives that batch whole, as the broker does), and a batch's end is always a batch boundary, so
the offsets a stream keeps are batch boundaries. ``maxUnitsPerTrigger`` then counts messages and
a queue's share ends at the last batch boundary within it; a queue whose share is smaller than its
next batch reads that batch whole, so a stream always moves on (a micro-batch may read more than
``maxUnitsPerTrigger`` messages then, by less than one batch per queue).
"""
from __future__ import annotations

import json
import time
import warnings
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence

import numpy as np

from ..errors import UnitsLostWarning
from ..readers.batchcq import BatchConsumeQueue, batch_end, batch_start
from .cluster import Cluster
from .store import Store, StoreCut

#: Values of ``startingOffsets`` besides a JSON object.
STARTING = ("earliest", "latest", "committed")

Offsets = dict[str, dict[str, int]]
#: ``{(topic, queue_id): batch starts then end}`` of a store's BatchCQ queues in a cut (:func:`batch_starts`).
Batches = dict[tuple[str, int], np.ndarray]
#: The key of the offsets of a stream over several stores: ``{"brokers": {broker: Offsets}}``.
BROKERS_KEY = "brokers"


def parse_starting_offsets(text: str, brokers: Sequence[str] | None = None) -> str | dict:
    """``earliest`` / ``latest`` / ``committed``, or the JSON object of queue offsets, checked for shape.

    ``brokers``: the broker names of a stream over several stores; the JSON object is then the
    several stores' form, ``{"brokers": {"<broker>": {"topic": {"queue_id": offset}}}}``
    (:func:`check_offsets`).

    Raises
    ------
    ValueError
        Naming ``startingOffsets`` and, for JSON, the line and column of a syntax
        error or the entry that is not ``{"topic": {"queue_id": offset}}`` (or a broker
        that is not among ``brokers``).
    """
    raw = str(text).strip()
    if raw.lower() in STARTING:
        return raw.lower()
    try:
        value = json.loads(raw)
    except json.JSONDecodeError as exc:
        raise ValueError(f"startingOffsets: expected earliest, latest, committed or a JSON object; {raw!r} is not "
                         f"JSON: {exc.msg} at line {exc.lineno} column {exc.colno}") from exc
    return check_offsets(value, brokers)


#: The two JSON forms, as errors show them.
_ONE_FORM = '{"topic": {"queue_id": offset}}'
_BROKERS_FORM = f'{{"{BROKERS_KEY}": {{"<broker>": {_ONE_FORM}}}}}'


def check_offsets(value: object, brokers: Sequence[str] | None = None) -> dict:
    """``value`` (decoded JSON, or a dict given in Python) checked as one store's offsets, or with
    ``brokers`` as the offsets of a stream over those brokers' stores; returned with queue ids
    normalised (``"007"`` -> ``"7"``).

    Raises
    ------
    ValueError
        Naming ``startingOffsets`` and the part that is wrong: the shape, a broker not among
        ``brokers``, a topic, a queue id or an offset.
    """
    if brokers is None:
        return _check_one(value, _where(None))
    names = ", ".join(brokers)
    if not isinstance(value, dict) or set(value) != {BROKERS_KEY} or not isinstance(value[BROKERS_KEY], dict):
        raise ValueError(f"startingOffsets: over several stores (brokers {names}) expected a JSON object "
                         f"{_BROKERS_FORM}, got {_text(value)}")
    out: dict[str, Offsets] = {}
    for broker, offsets in value[BROKERS_KEY].items():
        if broker not in brokers:
            raise ValueError(f"startingOffsets: no broker {broker!r} among the stores (brokers: {names})")
        out[broker] = _check_one(offsets, _where(broker))
    return {BROKERS_KEY: out}


def _where(broker: str | None) -> str:
    """What leads an error about offsets: the option, and the broker of a stream over several stores."""
    return "startingOffsets" if broker is None else f"startingOffsets: broker {broker!r}"


def _text(value: object) -> str:
    return repr(json.dumps(value)) if not isinstance(value, str) else repr(value)


def _check_one(value: object, where: str) -> Offsets:
    """One store's offsets ``{"topic": {"queue_id": offset}}``, checked; ``where`` leads each error."""
    shape_ok = isinstance(value, dict)  # bad option text is a ValueError, like every option error
    if not shape_ok:
        raise ValueError(f"{where}: expected a JSON object {_ONE_FORM}, got {_text(value)}")
    out: Offsets = {}
    for topic, queues in value.items():
        shape_ok = isinstance(queues, dict)
        if not shape_ok:
            raise ValueError(f"{where}: topic {topic!r} must map queue ids to offsets, got {queues!r}")
        out[topic] = {}
        for q, off in queues.items():
            if not str(q).isdigit():
                raise ValueError(f"{where}: queue id {q!r} of topic {topic!r} is not a non-negative integer")
            if isinstance(off, bool) or not isinstance(off, int) or off < 0:
                raise ValueError(f"{where}: offset {off!r} of queue {topic}/{q} is not a non-negative integer")
            out[topic][str(int(q))] = off
    return out


def broker_starting(spec: str | dict, held: Sequence[str], topic: str) -> dict[str, str | Offsets]:
    """Where each broker of ``held`` (those holding ``topic`` now) starts, in a stream over several
    stores: ``spec`` itself when it is ``earliest``/``latest``/``committed``, else that broker's own
    offsets in ``spec`` (checked by :func:`check_offsets`; a broker it leaves out: ``{}``, each queue
    from its minimum). Each is then resolved by :func:`starting_offsets` against the broker's own cut.

    Raises
    ------
    ValueError
        ``spec`` gives offsets on a broker that does not hold ``topic``.
    """
    if spec in STARTING:
        return {b: spec for b in held}
    per = spec[BROKERS_KEY]
    for b, offsets in per.items():
        if b not in held and offsets:
            raise ValueError(f"startingOffsets: broker {b!r} does not hold topic {topic!r} (brokers holding it: "
                             f"{', '.join(held)})")
    return {b: per.get(b, {}) for b in held}


def cut_offsets(cut: StoreCut, which: str = "end") -> Offsets:
    """Each queue's minimum (``which="min"``) or end (``"end"``) in ``cut``, as offsets."""
    out: Offsets = {}
    for t, q, lo, hi in cut.queues:
        out.setdefault(t, {})[str(q)] = lo if which == "min" else hi
    return out


def batch_starts(store: Store, cut: StoreCut, topic: str) -> Batches:
    """The batch starts (then the end) in ``cut`` of each BatchCQ queue of ``topic`` in ``store``
    (none for a topic of ConsumeQueues): what a stream's offsets and batch ends are aligned by
    (see the module docstring). Each queue's reader is the one the Store keeps (``keep_readers``),
    followed to the cut's end if it is behind it."""
    if topic not in store.layout.batch_cq_topics:
        return {}
    out: Batches = {}
    for t, q, _lo, hi in cut.queues:
        if t != topic:
            continue
        with store.queue_readers(t, q, ext=False) as (cqueue, _ext):
            if not isinstance(cqueue, BatchConsumeQueue):  # pragma: no cover - the layout said BatchCQ
                continue
            if cqueue.max_offset < hi:
                cqueue.refresh()
            out[t, q] = cqueue.batch_starts(hi)
    return out


def _aligned(offsets: Offsets, batches: Batches) -> Offsets:
    """``offsets`` with each BatchCQ queue's offset moved down to the start of the batch holding it."""
    for (t, q), starts in batches.items():
        off = offsets.get(t, {}).get(str(q))
        if off is not None:
            offsets[t][str(q)] = batch_start(starts, int(off))
    return offsets


def starting_offsets(store: Store, cut: StoreCut, spec: str | Offsets, *, group: str | None = None,
                     broker: str | None = None) -> Offsets:
    """The offsets a new stream starts from (see the module docstring); an offset inside a batch
    of a BatchCQ queue is that batch's start, so the first read gives the batch whole.

    ``broker``: the broker ``store`` is, in a stream over several stores (the errors name it).

    Raises
    ------
    ValueError
        ``committed`` without a group, or a JSON object naming a topic or queue
        the store does not have, or an offset outside the queue's ``[min, end]``.
    """
    offsets = _starting(store, cut, spec, group, broker)
    batches: Batches = {}
    for topic in offsets:
        batches.update(batch_starts(store, cut, topic))
    return _aligned(offsets, batches)


def _starting(store: Store, cut: StoreCut, spec: str | Offsets, group: str | None, broker: str | None) -> Offsets:
    where = _where(broker)
    offsets = cut_offsets(cut, "min")
    if spec == "earliest":
        return offsets
    if spec == "latest":
        return cut_offsets(cut, "end")
    if spec == "committed":
        if group is None:
            raise ValueError("startingOffsets=committed needs the consumer group (option 'group')")
        for topic, queues in offsets.items():
            for q, c in store.committed_offsets(group, topic).items():
                lo, hi = cut.queue_range(topic, q) or (0, 0)
                if str(q) in queues:
                    queues[str(q)] = min(max(c, lo), hi)  # the broker clamps an offset outside the queue
        return offsets
    for topic, queues in spec.items():
        if topic not in offsets:
            raise ValueError(f"{where}: topic {topic!r} has no queues in this read of {store.root} "
                             f"(topics: {', '.join(sorted(offsets)) or 'none'})")
        for q, off in queues.items():
            r = cut.queue_range(topic, int(q))
            if r is None:
                raise ValueError(f"{where}: queue {topic}/{q} does not exist in {store.root} "
                                 f"(queues: {', '.join(sorted(offsets[topic], key=int))})")
            if not r[0] <= off <= r[1]:
                raise ValueError(f"{where}: offset {off} of queue {topic}/{q} is outside the queue's "
                                 f"[{r[0]}, {r[1]}]")
            offsets[topic][q] = off
    return offsets


def next_offsets(start: Mapping[str, Mapping[str, int]], cut: StoreCut, *, max_units: int | None = None,
                 target: Mapping[str, Mapping[str, int]] | None = None, batches: Batches | None = None) -> Offsets:
    """The end of the next batch from ``start``: each queue's end in ``cut``, or less.

    ``max_units`` bounds the units the batch reads in all, shared among the queues
    that have any (each gets an equal share, and what one cannot use goes to the
    others); ``target`` (Trigger.AvailableNow) caps each queue at the end it had
    when the query started. Queues in ``start`` but not in the cut (deleted) keep
    their offset. ``batches`` (:func:`batch_starts`): a BatchCQ queue goes from the start of
    the batch holding its offset to a batch boundary, whole batches (see the module docstring).
    """
    return next_broker_offsets({None: start}, {None: cut}, max_units=max_units,
                               target=None if target is None else {None: target},
                               batches=None if batches is None else {None: batches})[None]


def next_broker_offsets(start: Mapping, cuts: Mapping, *, max_units: int | None = None,
                        target: Mapping | None = None, batches: Mapping | None = None) -> dict:
    """:func:`next_offsets` of several stores at once: ``start``, ``target`` and ``batches`` map
    each broker to its offsets (its batch starts), ``cuts`` each broker to its own cut. ``max_units``
    is shared among the queues of every broker; a broker without a cut (it does not hold the topic
    now) keeps its offsets."""
    begin: dict[tuple, int] = {}
    avail: dict[tuple, int] = {}
    starts_of: dict[tuple, np.ndarray] = {}
    for b, cut in cuts.items():
        own = start.get(b, {})
        own_batches = (batches or {}).get(b) or {}
        for t, q, lo, hi in cut.queues:
            key = (b, t, str(q))
            s = own.get(t, {}).get(key[2])
            s = max(lo, 0 if s is None else int(s))
            starts = own_batches.get((t, q))
            if starts is not None:  # a read inside a batch gets it whole: from its start
                starts_of[key] = starts
                s = batch_start(starts, s)
            e = hi
            if target is not None:
                e = min(e, target.get(b, {}).get(t, {}).get(key[2], 0))
            begin[key] = s
            avail[key] = max(0, e - s)
    grant = dict(avail)
    if max_units is not None:
        grant = {k: 0 for k in avail}
        budget, open_ = int(max_units), sorted(k for k, v in avail.items() if v > 0)
        while budget > 0 and open_:
            share = max(1, budget // len(open_))
            for k in list(open_):
                take = min(share, avail[k] - grant[k], budget)
                grant[k] += take
                budget -= take
                if grant[k] == avail[k]:
                    open_.remove(k)
                if budget == 0:
                    break
    for key, starts in starts_of.items():
        grant[key] = _whole_batches(starts, begin[key], grant[key])
    out = {b: {t: dict(qs) for t, qs in offsets.items()} for b, offsets in start.items()}
    for (b, t, q), s in begin.items():
        out.setdefault(b, {}).setdefault(t, {})[q] = s + grant[(b, t, q)]  # s: past units expired meanwhile
    return out


def _whole_batches(starts: np.ndarray, s: int, grant: int) -> int:
    """A BatchCQ queue's ``grant`` of units from batch start ``s`` made whole batches: down to the last
    batch boundary within it, or, when the next batch alone is larger, that batch whole (so the
    stream moves on); nothing stays nothing."""
    if grant <= 0:
        return 0
    end = batch_start(starts, s + grant)
    return (end if end > s else batch_end(starts, s)) - s


def expired(start: Mapping[str, Mapping[str, int]], cut: StoreCut,
            compacted: Collection[str] = ()) -> list[tuple[str, int, int, int]]:
    """``(topic, queue_id, next, min)`` of each queue whose next offset in ``start`` is below its
    minimum in ``cut``: the broker expired units ``[next, min)`` before the stream read them. They
    are lost (a batch goes on from the minimum, as the broker moves its consumer); a stream says so.
    The queues of ``compacted`` topics (a store's ``layout.compaction_topics``) are left out: below a
    compaction CQ's minimum the broker's compaction removed the messages, which no consumer of the
    topic receives (docs/reading.md#compaction-topics)."""
    out = []
    for t, q, lo, _hi in cut.queues:
        if t in compacted:
            continue
        s = start.get(t, {}).get(str(q))
        if s is not None and int(s) < lo:
            out.append((t, q, int(s), lo))
    return out


def lost_text(topic: str, queue_id: int, units: int, detail: str, broker: str | None = None) -> str:
    """How a stream says it lost units to the broker's expiry (one line); ``broker``: the broker
    whose queue it is, in a stream over several stores."""
    on = "" if broker is None else f" on broker {broker!r}"
    return f"{units:,} unit(s) of queue {topic}/{queue_id}{on} lost: {detail}"


def _warn_lost(topic: str, queue_id: int, units: int, detail: str, broker: str | None = None) -> None:
    warnings.warn(lost_text(topic, queue_id, units, detail, broker), UnitsLostWarning, stacklevel=3)


def ranges(start: Mapping[str, Mapping[str, int]], end: Mapping[str, Mapping[str, int]],
           topic: str) -> dict[int, tuple[int, int]]:
    """``{queue_id: (start, end)}`` of ``topic``'s queues that a batch from ``start`` to ``end`` reads."""
    out = {}
    for q, e in end.get(topic, {}).items():
        s = int(start.get(topic, {}).get(q, 0))
        if int(e) > s:
            out[int(q)] = (s, int(e))
    return out


class _Follower:
    """One store's side of a tail: its offsets, its filter, and the Store its rounds read (the
    given one until a file it maps is replaced, then a reopened one)."""

    def __init__(self, store: Store, topic: str, group: str, sql, tags, starting, on_lost,
                 broker: str | None = None) -> None:
        self.store = self.current = store
        self.topic, self.group, self.on_lost, self.broker = topic, group, on_lost, broker
        self.flt = store.make_filter(topic, group, sql=sql, tags=tags)
        cut = store.cut(topic, keep_readers=True)
        self.offsets = starting_offsets(store, cut, starting, group=group, broker=broker)
        if starting == "committed":  # the group committed units the broker expired since: lost, said
            committed = {topic: {str(q): c for q, c in store.committed_offsets(group, topic).items()}}
            for t, q, c, lo in expired(committed, cut, store.layout.compaction_topics):
                self.lost(t, q, lo - c, f"the group's committed offset {c} is below the queue's minimum {lo} "
                                        "(expired by the broker before the group read them)")

    def lost(self, topic: str, queue_id: int, units: int, detail: str) -> None:
        """``on_lost``, given the broker too when the tail is over several stores."""
        if self.broker is None:
            self.on_lost(topic, queue_id, units, detail)
        else:
            self.on_lost(topic, queue_id, units, detail, broker=self.broker)

    def round(self) -> Iterator[object] | None:
        """The messages of a new cut past the offsets read so far (None: nothing new)."""
        if self.current.replaced() is not None:
            if self.current is not self.store:
                self.current.close()
            self.current = self.store.reopen()
        cut = self.current.cut(self.topic, keep_readers=True)
        for t, q, s, lo in expired(self.offsets, cut, self.current.layout.compaction_topics):
            self.lost(t, q, lo - s, f"offsets [{s}, {lo}) expired by the broker before they were read")
        batches = batch_starts(self.current, cut, self.topic)  # a BatchCQ topic: whole batches, each once
        end = next_offsets(self.offsets, cut, batches=batches)
        todo = ranges(next_offsets(self.offsets, cut, max_units=0, batches=batches), end, self.topic)
        return self._read(cut, todo, end) if todo else None

    def _read(self, cut: StoreCut, todo: dict[int, tuple[int, int]], end: Offsets) -> Iterator[object]:
        for q in sorted(todo):  # queue by queue, in offset order, as one consume reads them
            result = self.current.consume(self.topic, self.group, filter=self.flt, queue_ids=[q],
                                          ranges={q: todo[q]}, cut=cut)
            for m in result:
                if self.broker is not None:
                    m.broker = self.broker
                yield m
            if result.stats.commit_log_missing:
                self.lost(self.topic, q, result.stats.commit_log_missing,
                             f"their CommitLog records in offsets [{todo[q][0]}, {todo[q][1]}) went away "
                             "before they were read (expired by the broker)")
        self.offsets = end

    def close(self) -> None:
        if self.current is not self.store:
            self.current.close()


def tail(store: Store | Cluster, topic: str, group: str, *, sql: str | None = None, tags: str | None = None,
         starting: str | Offsets = "latest", interval: float = 0.5, sleep=None,
         stop=None, on_lost: Callable[[str, int, int, str], None] | None = None) -> Iterator[object]:
    """What ``group`` would receive from ``topic``, as it arrives: ``rmqfilter tail``.

    Each round takes a cut (:meth:`Store.cut`), consumes each queue's new
    offsets with both filter layers (:meth:`Store.consume` with ``ranges``),
    yields the messages and moves on; between rounds with nothing new it
    sleeps ``interval`` seconds. ``stop()`` (optional) returning True ends it.

    ``store`` may be a :class:`cq.Cluster` (docs/reading.md#clusters): each round then takes one
    cut per broker holding the topic and reads each broker's new offsets in turn, each with the
    group's filter on that broker; the messages have :attr:`cq.Message.broker` set. ``starting``
    is then ``earliest``, ``latest``, ``committed`` (each broker's own committed offsets) or
    offsets per broker, ``{"brokers": {broker: {topic: {queue_id: offset}}}}`` (see the module
    docstring), and ``on_lost`` is also given ``broker=`` (a keyword).

    The queue readers are kept from round to round (``keep_readers``), so a
    round goes on from the end the previous one found instead of opening and
    recovering each queue again; each round first checks that they still read
    the store (:meth:`Store.replaced`) and reads with a reopened Store if not
    (docs/live.md#cached-readers).

    A tail that falls behind the broker's expiry goes on from each queue's new minimum and
    says what it lost: ``on_lost(topic, queue_id, units, detail)`` for offsets below the
    minimum and for units whose CommitLog record went away (default: a
    :class:`cq.errors.UnitsLostWarning`).
    """
    sleep = sleep or time.sleep
    on_lost = on_lost or _warn_lost
    if isinstance(store, Cluster):
        held = store.brokers_of(topic)
        own = broker_starting(starting if starting in STARTING else check_offsets(starting, store.brokers),
                              held, topic)
        followers = [_Follower(store.store(b), topic, group, sql, tags, own[b], on_lost, broker=b) for b in held]
    else:
        followers = [_Follower(store, topic, group, sql, tags, starting, on_lost)]
    try:
        while stop is None or not stop():
            new = False
            for f in followers:
                read = f.round()
                if read is not None:
                    new = True
                    yield from read
            if not new:
                sleep(interval)
    finally:
        for f in followers:
            f.close()
