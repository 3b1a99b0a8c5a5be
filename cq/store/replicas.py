"""Several stores of one broker name: a master and its slaves (docs/reading.md#replicas).

A :class:`ReplicaSet` holds one :class:`Replica` per store root of a broker name, says which one a
read takes (:attr:`ReplicaSet.read`: the one given, else the default rule of :func:`pick_replica`)
and compares what they hold: each replica's queue ranges, and the tail one replica holds beyond
another's end, in queue offsets. Replication copies the master's bytes at the same physical offsets
and the same dispatch order (docs/formats.md#replicas), so a queue offset names one message on every
replica that holds it, and a replica's queue ends where its dispatch reached.

What a consumer reading one replica gets is that replica's own :meth:`cq.Store.consume`: nothing
here filters; a :class:`cq.Cluster` reads :attr:`ReplicaSet.read` as the broker's store.
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field

from ..readers.replica import (
    BrokerIdentity,
    EpochEntry,
    StoreCheckpoint,
    read_broker_identity,
    read_epoch_file,
    read_store_checkpoint,
)
from .cuts import StoreCut, first_unit_past
from .store import Store

__all__ = ["PICKED_BY", "Replica", "ReplicaSet", "ReplicaTail", "pick_replica", "replica_place"]

#: How :func:`pick_replica` chose: named by the caller, the highest last epoch (controller mode),
#: the CommitLog that reaches furthest (classic HA), or the first of replicas that hold the same.
PICKED_BY = ("given", "epoch", "furthest", "first")


@dataclass
class Replica:
    """One store root of a broker name and its replica files (docs/formats.md#replicas).

    Attributes
    ----------
    root : str
        The store root as given.
    store : cq.Store
    checkpoint : StoreCheckpoint or None
        ``{root}/checkpoint``.
    epochs : list of EpochEntry or None
        ``{root}/epochFileCheckpoint`` (its ``.bak`` when the broker would read that); None in
        classic HA.
    identity : BrokerIdentity or None
        ``{root}/brokerIdentity`` (controller mode).
    """

    root: str
    store: Store
    checkpoint: StoreCheckpoint | None = None
    epochs: list[EpochEntry] | None = None
    identity: BrokerIdentity | None = None

    @classmethod
    def open(cls, store: Store) -> Replica:
        """The replica files of ``store``'s root, read once (a bad one is a StoreFormatError naming it)."""
        epochs = read_epoch_file(store.root)
        return cls(store.root, store, read_store_checkpoint(store.root),
                   None if epochs is None else epochs[0], read_broker_identity(store.root))

    @property
    def controller_mode(self) -> bool:
        """Whether the store holds controller mode's files (an epoch file or a broker identity)."""
        return self.epochs is not None or self.identity is not None

    @property
    def last_epoch(self) -> int | None:
        """The epoch of the epoch file's last entry (None in classic HA or with no entry)."""
        return self.epochs[-1].epoch if self.epochs else None

    @property
    def confirm_offset(self) -> int | None:
        """The confirm offset ``checkpoint`` holds, in controller mode only: the value last *set*,
        shown as a fact, not judged by (a master's stays where its election set it;
        docs/formats.md#replicas)."""
        if not self.controller_mode or self.checkpoint is None:
            return None
        return self.checkpoint.confirm_phy_offset

    def matches(self, name: str | os.PathLike) -> bool:
        """Whether ``name`` names this replica: its root (any spelling of the path) or the root's
        directory name."""
        name = os.fspath(name)
        return (os.path.abspath(name) == os.path.abspath(self.root)
                or name == os.path.basename(os.path.normpath(self.root)))

    def to_dict(self) -> dict:
        """JSON-ready facts of the replica files (no read of the queues)."""
        return {
            "root": self.root,
            "mode": "controller" if self.controller_mode else "classic",
            "broker_id": None if self.identity is None else self.identity.broker_id,
            "epochs": None if self.epochs is None else [[e.epoch, e.start_offset] for e in self.epochs],
            "confirm_offset": self.confirm_offset,
            "master_flushed_offset": None if self.checkpoint is None else self.checkpoint.master_flushed_offset,
        }


@dataclass(frozen=True)
class ReplicaTail:
    """Queue offsets ``[start, end)`` of ``topic``/``queue_id`` that replica ``holder`` holds and
    replica ``lacking`` does not: ``lacking``'s queue ends at ``start`` (docs/reading.md#replicas)."""

    topic: str
    queue_id: int
    holder: str
    lacking: str
    start: int
    end: int

    def to_dict(self) -> dict:
        return {"topic": self.topic, "queue_id": self.queue_id, "holder": self.holder, "lacking": self.lacking,
                "start": self.start, "end": self.end, "messages": self.end - self.start}


def pick_replica(replicas: list[Replica], given: str | os.PathLike | None = None) -> tuple[Replica, str, dict]:
    """The replica a read takes, how it was picked (:data:`PICKED_BY`) and each replica's CommitLog end.

    ``given`` (a root or its directory name) wins. Else, when any replica holds controller mode's
    files, the one with the highest last epoch (the last elected master); else, and between equal
    epochs, the one whose CommitLog reaches furthest: a slave's CommitLog is a prefix of its
    master's, so that one holds every record the others hold (docs/reading.md#replicas). Replicas
    that reach equally far hold the same: the first given is read.
    """
    ends = {r.root: r.store.cut().commit_log_end for r in replicas}
    if given is not None:
        named = [r for r in replicas if r.matches(given)]
        if len(named) != 1:
            what = "no" if not named else "several"
            raise KeyError(f"{what} replica is {os.fspath(given)!r} (replicas: {', '.join(r.root for r in replicas)})")
        return named[0], "given", ends
    if any(r.controller_mode for r in replicas):
        top = max(-1 if r.last_epoch is None else r.last_epoch for r in replicas)
        by_epoch = [r for r in replicas if (-1 if r.last_epoch is None else r.last_epoch) == top]
        if len(by_epoch) == 1:
            return by_epoch[0], "epoch", ends
        replicas = by_epoch
    furthest = max(ends[r.root] for r in replicas)
    first = next(r for r in replicas if ends[r.root] == furthest)
    equal = sum(1 for r in replicas if ends[r.root] == furthest)
    return first, "furthest" if equal == 1 else "first", ends


@dataclass
class ReplicaSet:
    """The replicas of one broker name and the one a read takes (docs/reading.md#replicas).

    Attributes
    ----------
    broker : str
    replicas : list of Replica
        In the order their roots were given.
    read : Replica
        The replica every read of the broker takes.
    picked_by : str
        :data:`PICKED_BY`.
    commit_log_ends : dict of root to int
        Each replica's CommitLog end when the set was opened (what the pick compared).
    """

    broker: str
    replicas: list[Replica]
    read: Replica
    picked_by: str
    commit_log_ends: dict[str, int] = field(default_factory=dict)

    @classmethod
    def open(cls, broker: str, stores: list[Store], given: str | os.PathLike | None = None) -> ReplicaSet:
        """The replicas of ``broker``, one per store, and the one to read (:func:`pick_replica`)."""
        replicas = [Replica.open(s) for s in stores]
        read, how, ends = pick_replica(replicas, given)
        return cls(broker, replicas, read, how, ends)

    def close(self) -> None:
        for r in self.replicas:
            r.store.close()

    def note(self) -> str:
        """One sentence: which replica is read and why (what :class:`cq.errors.ReplicaWarning` says)."""
        why = {"given": "as asked",
               "epoch": f"the highest last epoch, {self.read.last_epoch}: the last master elected",
               "furthest": "its CommitLog reaches furthest, so it holds what the others hold",
               "first": "every replica's CommitLog reaches as far: the first given"}[self.picked_by]
        ends = ", ".join(f"{r.root} to {self.commit_log_ends.get(r.root, 0):,}" for r in self.replicas)
        return (f"broker {self.broker}: {len(self.replicas)} replicas; reading {self.read.root} ({why}; "
                f"CommitLog ends: {ends}); pick another with replica=ROOT (--replica on the command line)")

    def cuts(self, topic: str | None = None) -> dict[str, StoreCut | None]:
        """One cut per replica (``topic``'s queues; None where the replica lacks the topic)."""
        out: dict[str, StoreCut | None] = {}
        for r in self.replicas:
            try:
                out[r.root] = r.store.cut(topic) if topic is None or topic in r.store.topics() else None
            except KeyError:
                out[r.root] = None
        return out

    def ranges(self, topic: str | None = None,
               cuts: dict[str, StoreCut | None] | None = None) -> dict[str, dict[tuple[str, int], tuple[int, int]]]:
        """Each replica's queue ranges ``{root: {(topic, queue_id): (min, end)}}``, one cut each."""
        cuts = self.cuts(topic) if cuts is None else cuts
        return {root: {} if cut is None else {(t, q): (lo, hi) for t, q, lo, hi in cut.queues}
                for root, cut in cuts.items()}

    def consistent_offset(self, a: Replica, b: Replica, ends: dict[str, int]) -> int:
        """The CommitLog offset below which replicas ``a`` and ``b`` hold the same records
        (docs/formats.md#replicas): with both epoch files, the end of the newest epoch both hold
        from the same start offset (what the broker's ``findConsistentPoint`` computes; 0 when
        none is shared); otherwise the smaller CommitLog end (a slave's log is a prefix of its
        master's)."""
        if a.epochs and b.epochs:
            theirs = {e.epoch: i for i, e in enumerate(b.epochs)}
            for i in range(len(a.epochs) - 1, -1, -1):
                j = theirs.get(a.epochs[i].epoch)
                if j is not None and b.epochs[j].start_offset == a.epochs[i].start_offset:
                    end_a = a.epochs[i + 1].start_offset if i + 1 < len(a.epochs) else ends[a.root]
                    end_b = b.epochs[j + 1].start_offset if j + 1 < len(b.epochs) else ends[b.root]
                    return min(end_a, end_b)
            return 0
        return min(ends[a.root], ends[b.root])

    def tails(self, topic: str | None = None, cuts: dict[str, StoreCut | None] | None = None) -> list[ReplicaTail]:
        """What each replica holds that another does not, queue by queue: for every pair, the
        holder's units from its first record at or past their :meth:`consistent_offset` to its
        queue end (in classic HA: the offsets past the lacking replica's queue end)."""
        cuts = self.cuts(topic) if cuts is None else cuts
        ends = {root: (0 if cut is None else cut.commit_log_end) for root, cut in cuts.items()}
        out = []
        for holder in self.replicas:
            cut = cuts[holder.root]
            if cut is None:
                continue
            for lacking in self.replicas:
                if lacking is holder:
                    continue
                consistent = self.consistent_offset(holder, lacking, ends)
                for t, q, lo, hi in sorted(cut.queues):
                    if hi <= lo:
                        continue
                    with holder.store.queue_readers(t, q, ext=False) as (cqueue, _):
                        start = first_unit_past(cqueue, lo, hi, consistent)
                    if start < hi:
                        out.append(ReplicaTail(t, q, holder.root, lacking.root, start, hi))
        return sorted(out, key=lambda x: (x.topic, x.queue_id, x.holder, x.lacking))

    def holders(self, topic: str, queue_id: int, queue_offset: int, found_on: str) -> list[str]:
        """The replicas that hold the unit ``topic``/``queue_id``/``queue_offset`` of replica
        ``found_on``: itself, and each other whose queue holds that offset for a record below their
        :meth:`consistent_offset` (the same message there)."""
        cuts = self.cuts(topic)
        ends = {root: (0 if cut is None else cut.commit_log_end) for root, cut in cuts.items()}
        own = next(r for r in self.replicas if r.root == found_on)
        with own.store.queue_readers(topic, queue_id, ext=False) as (cqueue, _):
            unit = cqueue.unit(queue_offset)
        record_end = int(unit[0]) + int(unit[1])
        out = []
        for r in self.replicas:
            got = None if cuts[r.root] is None else cuts[r.root].queue_range(topic, queue_id)
            if r is own or (got is not None and got[0] <= queue_offset < got[1]
                            and record_end <= self.consistent_offset(own, r, ends)):
                out.append(r.root)
        return out

    def describe(self, topic: str | None = None) -> dict:
        """JSON-ready: the replica read and why, each replica's files and queue ranges, the tails."""
        cuts = self.cuts(topic)
        ranges = self.ranges(topic, cuts)
        return {
            "broker": self.broker, "read": self.read.root, "picked_by": self.picked_by,
            "replicas": [{**r.to_dict(), "commit_log_end": self.commit_log_ends.get(r.root),
                          "queues": [{"topic": t, "queue_id": q, "min_offset": lo, "max_offset": hi}
                                     for (t, q), (lo, hi) in sorted(ranges[r.root].items())]}
                         for r in self.replicas],
            "tails": [t.to_dict() for t in self.tails(topic, cuts)],
        }


def replica_place(replicas: ReplicaSet, topic: str, w, root: str) -> str:
    """Where the message of ``w`` (a :class:`cq.analyses.why.Why` read from replica ``root``) lies
    among ``replicas``, in one sentence: on every replica, or only on some, each lacking one's queue
    end, and what that means for a consumer reading the replica read (docs/reading.md#replicas)."""
    holders = replicas.holders(topic, w.queue_id, w.queue_offset, root)
    read = replicas.read.root
    if len(holders) == len(replicas.replicas):
        return f"on every replica ({', '.join(holders)}); read from {read}"
    lacking = []
    for r in replicas.replicas:
        if r.root in holders:
            continue
        got = r.store.cut(topic).queue_range(topic, w.queue_id) if topic in r.store.topics() else None
        end = "no such queue" if got is None else (
            f"its queue ends at offset {got[1]}" if w.queue_offset >= got[1] else
            f"its queue starts at offset {got[0]}" if w.queue_offset < got[0] else
            "its record there is another: their CommitLogs part before this one")
        lacking.append(f"{r.root} ({end})")
    text = f"only on {', '.join(holders) or root}; not on {', '.join(lacking)}"
    if read in holders:
        return text + f"; read from {read}"
    return (text + f": a consumer reading {read}, the replica read, does not receive it; the walk is what "
            f"a consumer reading {root} gets")
