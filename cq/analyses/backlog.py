"""The backlog a consumer group will really receive (:func:`cq.backlog`).

The broker's consumer lag of a queue is ``maxOffset - committedOffset``: it counts every unit,
including all those the group's filter drops. What the group will actually receive from
there is the two-layer filter replayed over ``[committedOffset, maxOffset)``: this module
runs :meth:`cq.Store.consume` over exactly that range of each queue (the same code, so the
same answer). A queue without a committed offset (absent from ``consumerOffset.json``, or
-1) has no lag the store can tell: where its consumer starts depends on its
``ConsumeFromWhere`` setting (``docs/config-and-index.md``), except on the group's ``%RETRY%``
topic, whose queues a push consumer starts at their first offset (docs/paths.md#retry-start). A committed offset below the queue's
minimum (the broker expired those units since the group committed) is lost, not backlog: the
broker moves such a consumer to the minimum; those units are counted as ``expired``
(``docs/live.md``).
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field, replace
from typing import Any

from .. import format as fmt
from ..filter.subscription import DEFAULT_BLOOM
from ..store.cluster import Cluster
from ..store.store import Store
from ..tags import tags_code
from .pending import SCHEDULED, scheduled_rows
from .pop import pop_retry_topics, read_revive_log
from .why import Subscription, resolve_subscription

__all__ = ["DUE_BUCKETS", "Backlog", "QueueBacklog", "backlog"]

#: The due-time buckets of scheduled copies: (label, due at most this long after ``now_ms``, ms).
DUE_BUCKETS = (("overdue", 0), ("1m", 60_000), ("10m", 600_000), ("1h", 3_600_000), ("1d", 86_400_000),
               ("later", None))


@dataclass(frozen=True)
class QueueBacklog:
    """One queue's backlog.

    Attributes
    ----------
    queue_id : int
    committed_offset : int or None
        The next offset the group will consume (None: nothing committed).
    min_offset, max_offset : int
        The queue's first unit and the offset the next unit will get.
    lag : int or None
        The broker's lag, ``max_offset - committed_offset``. A queue of a ``%RETRY%`` topic without
        a committed offset is counted from its first offset, where a push consumer starts it
        (docs/paths.md#retry-start): its ``committed_offset`` is None, its lag and
        ``will_receive`` are not.
    will_receive : int or None
        Messages of ``[committed_offset, max_offset)`` the group's filter delivers (of a BatchCQ
        topic, from the start of the batch holding the committed offset: the broker serves that
        batch whole again, docs/reading.md#batchcq).
    expired : int or None
        Units of ``[committed_offset, max_offset)`` the group will never receive because the
        broker expired them: those below the queue's minimum, and those whose CommitLog record
        is gone (``commit_log_missing``).
    broker : str or None
        The broker holding the queue, for the backlog of a :class:`cq.Cluster` (None for one store).
    compacted : int or None
        A compaction topic's offsets of ``[committed_offset, max_offset)`` the broker's compaction
        removed (docs/reading.md#compaction-topics): part of the lag, never received, not expired;
        None for any other topic.
    """

    queue_id: int
    committed_offset: int | None
    min_offset: int
    max_offset: int
    lag: int | None
    will_receive: int | None
    expired: int | None = None
    broker: str | None = None
    compacted: int | None = None

    def to_dict(self) -> dict[str, Any]:
        out = {"queue_id": self.queue_id, "committed_offset": self.committed_offset,
               "max_offset": self.max_offset, "lag": self.lag, "will_receive": self.will_receive,
               "min_offset": self.min_offset, "expired": self.expired}
        if self.compacted is not None:  # a compaction topic's
            out["compacted"] = self.compacted
        return out if self.broker is None else {"broker": self.broker, **out}


@dataclass(frozen=True)
class Backlog:
    """A group's backlog on a topic, per queue and in total (totals over queues with a committed offset)."""

    topic: str
    group: str
    subscription: Subscription
    queues: list[QueueBacklog]
    #: The group's retry topic (``%RETRY%{group}``, subscribed "*" by the client), when it has units.
    retry: Backlog | None = None
    #: Delay-level copies still due whose real topic is the topic or the retry topic and which the
    #: group's filter lets through: ``{"will_receive", "to_topic", "to_retry", "buckets": {label: n}}``.
    scheduled: dict | None = field(default=None)
    #: A POP group's messages popped and neither acked nor revived yet, of the topic and its POP
    #: retry topic: ``{"messages", "buckets": {label: n}, "now_ms"}`` by when the broker revives
    #: them (docs/paths.md#pop). Not in :attr:`will_receive_later`: they come back only if the
    #: consumer does not ack them in time.
    in_flight: dict | None = field(default=None)
    #: The group's POP retry topic (``%RETRY%{group}_{topic}``, or ``+``), when it has units.
    pop_retry: Backlog | None = None

    @property
    def lag(self) -> int:
        """Total broker lag."""
        return sum(q.lag for q in self.queues if q.lag is not None)

    @property
    def will_receive(self) -> int:
        """Total the group will receive."""
        return sum(q.will_receive for q in self.queues if q.will_receive is not None)

    @property
    def expired(self) -> int:
        """Total units lost to the broker's expiry since the group committed."""
        return sum(q.expired for q in self.queues if q.expired is not None)

    def to_dict(self) -> dict[str, Any]:
        """``{"queues": [{"queue_id", "committed_offset", "max_offset", "lag", "will_receive", "expired"},
        ...], "total": {"lag", "will_receive"}, "expired": n}`` plus topic, group and subscription
        (``total`` keeps its shape; ``expired`` is the units lost to the broker's expiry in all)."""
        doc = {"topic": self.topic, "group": self.group, "subscription": self.subscription.to_dict(),
               "queues": [q.to_dict() for q in self.queues],
               "total": {"lag": self.lag, "will_receive": self.will_receive}, "expired": self.expired}
        if self.retry is not None or self.scheduled is not None:
            doc["retry"] = None if self.retry is None else {
                "topic": self.retry.topic, "queues": [q.to_dict() for q in self.retry.queues],
                "total": {"lag": self.retry.lag, "will_receive": self.retry.will_receive}}
            doc["scheduled"] = self.scheduled
            doc["in_flight"] = self.in_flight
            doc["pop_retry"] = None if self.pop_retry is None else {
                "topic": self.pop_retry.topic, "queues": [q.to_dict() for q in self.pop_retry.queues],
                "total": {"lag": self.pop_retry.lag, "will_receive": self.pop_retry.will_receive}}
            doc["will_receive_later"] = self.will_receive_later
        return doc

    @property
    def will_receive_later(self) -> int:
        """What the group receives now (its queues) and later: its retry topic's and its POP retry
        topic's backlog and the delay-level and timer copies still due to the topic or to its retry topic,
        through its filter."""
        retry = sum(r.will_receive for r in (self.retry, self.pop_retry) if r is not None)
        return self.will_receive + retry + (self.scheduled["will_receive"] if self.scheduled else 0)

    def __str__(self) -> str:
        sub = self.subscription
        # a cluster's backlog names each queue's broker in a first column
        width = max((len(q.broker) + 1 for q in self.queues if q.broker is not None), default=0)
        if width:
            width = max(width, len("broker "))

        def row(broker: str, rest: str) -> str:
            return f"{broker:<{width}}{rest}" if width else rest

        head = (f"{'queue':>5} {'committed':>12} {'max':>12} {'broker lag':>12} {'will receive':>13} "
                f"{'filtered out':>13}")
        rule = "-" * (width + len(head))
        lines = [f"group {self.group} on {self.topic}: {sub.type} {sub.expression!r} ({sub.source})",
                 row("broker", head), rule]
        for q in self.queues:
            if q.committed_offset is None and q.will_receive is not None:   # a retry queue, from its first offset
                rest = (f"{q.queue_id:>5} {'none':>12} {q.max_offset:>12,} {q.lag:>12,} "
                        f"{q.will_receive:>13,} {q.lag - q.will_receive:>13,}")
            elif q.committed_offset is None:
                rest = f"{q.queue_id:>5} {'none':>12} {q.max_offset:>12,} {'-':>12} {'-':>13} {'-':>13}"
            else:
                rest = (f"{q.queue_id:>5} {q.committed_offset:>12,} {q.max_offset:>12,} {q.lag:>12,} "
                        f"{q.will_receive:>13,} {q.lag - q.will_receive:>13,}")
            lines.append(row(q.broker or "", rest))
        lines.append(rule)
        lines.append(row("", f"{'total':>5} {'':>12} {'':>12} {self.lag:>12,} {self.will_receive:>13,} "
                             f"{self.lag - self.will_receive:>13,}"))
        if any(q.committed_offset is None and q.will_receive is None for q in self.queues):
            lines.append("none: no committed offset; where the consumer starts depends on its ConsumeFromWhere")
        gone = [q for q in self.queues if q.compacted]
        if gone:
            lost = ", ".join(f"{q.broker + ' ' if q.broker else ''}{q.queue_id}: {q.compacted:,}" for q in gone)
            lines.append(f"compacted: {sum(q.compacted for q in gone):,} offset(s) of the broker lag the broker's "
                         f"compaction removed (queue {lost}); never received")
        if self.expired:
            lost = ", ".join(f"{q.broker + ' ' if q.broker else ''}{q.queue_id}: {q.expired:,}"
                             for q in self.queues if q.expired)
            lines.append(f"expired: {self.expired:,} unit(s) of the broker lag the broker deleted before the group "
                         f"read them (queue {lost}); lost, never received")
        for label, r, what in (("retry:    ", self.retry, "message(s)"),
                               ("pop retry:", self.pop_retry, "revived message(s)")):
            if r is not None:
                lines.append(f"{label} {r.will_receive:,} {what} wait in {r.topic} (lag {r.lag:,})")
        for label, d, key, what in (
                ("scheduled:", self.scheduled, "will_receive", "delay-level and timer copies still due will reach the group"),
                ("in flight:", self.in_flight, "messages",
                 "message(s) popped and not acked; the broker revives them unless acked first")):
            if d is not None and d[key]:
                due = ", ".join(f"{k} {n:,}" for k, n in d["buckets"].items() if n)
                lines.append(f"{label} {d[key]:,} {what} (due: {due})")
        if self.will_receive_later != self.will_receive:
            lines.append(f"now and later: {self.will_receive_later:,}")
        return "\n".join(lines)


def backlog(store: Store | Cluster, topic: str, group: str, *, sql: str | None = None, tags: str | None = None,
            queue_ids=None, bloom_filter=DEFAULT_BLOOM, later: bool = False, now_ms: int | None = None) -> Backlog:
    """Per queue: the group's committed offset, the max offset, the broker's lag and how many
    of those units the group will actually receive (its filter replayed over
    ``[committed, max)``, by :func:`cq.Store.consume`).

    The committed offsets come from ``config/consumerOffset.json``; a queue without one has
    ``committed_offset``, ``lag`` and ``will_receive`` None and is left out of the totals.
    Units of ``[committed, max)`` the broker expired before the group read them (a committed
    offset below the queue's minimum) are ``expired``: lost, not received (docs/live.md).
    ``store`` a :class:`cq.Store`, or a :class:`cq.Cluster`: each broker holding the topic in
    turn (its own committed offsets and registration, one cut per broker), each queue with its
    ``broker``, ``queue_ids`` then ``(broker, queue_id)`` pairs (docs/reading.md#clusters);
    ``sql``/``tags`` as for :func:`cq.why`. One cut for all queues of a store, each opened for
    it in turn.

    Returns
    -------
    cq.analyses.backlog.Backlog
        ``.queues`` (:class:`~cq.analyses.backlog.QueueBacklog`), ``.lag``, ``.will_receive``, ``.expired``,
        ``to_dict()`` (``{"queues": [...], "total": {"lag", "will_receive"}, "expired": n}``), ``str()``.
        With ``later``, also ``.retry`` (the group's ``%RETRY%`` topic, subscribed ``*``),
        ``.scheduled`` (delay-level copies still due to the topic or the retry topic that the
        group's filter lets through, bucketed by due time from ``now_ms``, default now), for a
        POP group ``.in_flight`` (popped, not acked, not revived) and ``.pop_retry`` (its POP
        retry topic), and ``.will_receive_later``; ``to_dict()`` then has ``retry``,
        ``scheduled``, ``in_flight``, ``pop_retry`` and ``will_receive_later`` (docs/paths.md#backlog).
    """
    if isinstance(store, Cluster):
        # each broker's own queues, committed offsets and registration; the totals sum them
        now_ms = int(time.time() * 1000) if now_ms is None else now_ms
        parts = [(name, backlog(store.stores[name], topic, group, sql=sql, tags=tags, bloom_filter=bloom_filter,
                                queue_ids=None if queue_ids is None else
                                [q for b, q in queue_ids if b == name], later=later, now_ms=now_ms))
                 for name in store.brokers_of(topic)
                 if queue_ids is None or any(b == name for b, _ in queue_ids)]
        queues = [replace(q, broker=name) for name, part in parts for q in part.queues]
        if not later:
            return Backlog(topic, group, parts[0][1].subscription, queues)
        retries = [(name, part.retry) for name, part in parts if part.retry is not None]
        retry = Backlog(retries[0][1].topic, group, retries[0][1].subscription,
                        [replace(q, broker=name) for name, r in retries for q in r.queues]) if retries else None
        pops = [(name, part.pop_retry) for name, part in parts if part.pop_retry is not None]
        pop_retry = Backlog(pops[0][1].topic, group, pops[0][1].subscription,
                            [replace(q, broker=name) for name, r in pops for q in r.queues]) if pops else None
        return Backlog(topic, group, parts[0][1].subscription, queues, retry,
                       _sum_scheduled([part.scheduled for _, part in parts]),
                       _sum_scheduled([part.in_flight for _, part in parts], ("messages",)), pop_retry)
    flt, sub = resolve_subscription(store, topic, group, sql=sql, tags=tags, bloom_filter=bloom_filter)
    committed = store.committed_offsets(group, topic)
    # one cut for every queue (each queue opened for it and closed after, so thousands of queues
    # hold one queue's files at a time): units past it are not counted
    cut = store.cut(topic, list(queue_ids) if queue_ids is not None else None)
    out = []
    # a push consumer starts a retry queue without a committed offset at its first offset
    # (docs/paths.md#retry-start); any other queue without one has no start the store can tell
    retry_start = topic.startswith(fmt.RETRY_GROUP_TOPIC_PREFIX)
    for _, q, lo, hi in cut.queues:
        c = committed.get(q)
        if c is None and not retry_start:
            out.append(QueueBacklog(q, None, lo, hi, None, None))
            continue
        start = min(lo, hi) if c is None else c
        result = store.consume(topic, group, filter=flt, queue_ids=[q], ranges={q: (start, hi)}, cut=cut)
        for _ in result:
            pass
        # a compaction topic's offsets without a compaction CQ unit (below its minimum too) were compacted,
        # not expired (docs/reading.md#compaction-topics)
        compaction = topic in store.layout.compaction_topics
        below = 0 if compaction else max(0, min(lo, hi) - start)
        expired = below + result.stats.commit_log_missing
        compacted = max(0, hi - start) - result.stats.units_scanned if compaction else None
        out.append(QueueBacklog(q, c, lo, hi, hi - start, result.stats.delivered, expired, compacted=compacted))
    if not later:
        return Backlog(topic, group, sub, out)
    retry_topic = fmt.RETRY_GROUP_TOPIC_PREFIX + group
    retry = backlog(store, retry_topic, group, tags="*") if retry_topic in store.topics() else None
    now_ms = int(time.time() * 1000) if now_ms is None else now_ms
    pop_topics = pop_retry_topics(group, topic)
    pop_retry = next((backlog(store, t, group, tags="*") for t in pop_topics if t in store.topics()), None)
    return Backlog(topic, group, sub, out, retry, _scheduled(store, topic, retry_topic, flt, now_ms),
                   _in_flight(store, group, [topic, *pop_topics], now_ms), pop_retry)


def _bucket(buckets: dict, due_at_ms: int, now_ms: int) -> None:
    ahead = due_at_ms - now_ms
    buckets[next(lb for lb, limit in DUE_BUCKETS if limit is None or ahead <= limit)] += 1


def _in_flight(store: Store, group: str, topics: list[str], now_ms: int) -> dict:
    """The group's messages of ``topics`` popped and neither acked nor revived, bucketed by their
    revive time (one per message: a message popped twice counts once, at its last pop)."""
    last: dict[tuple[str, int, int], int | None] = {}
    for p in sorted(read_revive_log(store).pops(group, topics), key=lambda p: p.checkpoint.pop_time):
        last[(p.checkpoint.topic, p.checkpoint.queue_id, p.queue_offset)] = \
            p.checkpoint.due_at_ms if p.in_flight else None
    buckets = dict.fromkeys([label for label, _ in DUE_BUCKETS], 0)
    for due in last.values():
        if due is not None:
            _bucket(buckets, due, now_ms)
    return {"messages": sum(buckets.values()), "buckets": buckets, "now_ms": now_ms}


def _scheduled(store: Store, topic: str, retry_topic: str, flt, now_ms: int) -> dict:
    """Delay-level copies still due to ``topic`` (through the group's filter: layer 1 on their tags'
    code, as the unit the broker writes on delivery will hold, then layers 2 and the client's) or to
    ``retry_topic`` (the client subscribes it with "*"), bucketed by due time."""
    buckets = dict.fromkeys([label for label, _ in DUE_BUCKETS], 0)
    to_topic = to_retry = 0
    for r in scheduled_rows(store):
        if r["status"] != SCHEDULED or r["real_topic"] not in (topic, retry_topic):
            continue
        if r["real_topic"] == topic:
            msg = store.commit_log.read_message(r["commit_log_offset"])
            code = tags_code(msg.tags)
            if not (flt.is_matched_by_consume_queue(code) and flt.is_matched_by_commit_log(msg.properties)
                    and flt.is_matched_by_client(msg.tags)):
                continue
            to_topic += 1
        else:
            to_retry += 1
        _bucket(buckets, r["due_at_ms"], now_ms)
    return {"will_receive": to_topic + to_retry, "to_topic": to_topic, "to_retry": to_retry, "buckets": buckets,
            "now_ms": now_ms}


def _sum_scheduled(parts: list[dict], keys=("will_receive", "to_topic", "to_retry")) -> dict:
    """The brokers' scheduled copies (:func:`_scheduled`) or in-flight messages (:func:`_in_flight`)
    added up, bucket by bucket."""
    out = {key: sum(p[key] for p in parts) for key in keys}
    out["buckets"] = {label: sum(p["buckets"][label] for p in parts) for label in parts[0]["buckets"]}
    out["now_ms"] = parts[0]["now_ms"]
    return out
