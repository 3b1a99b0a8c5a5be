"""Several broker stores read as one cluster: :class:`Cluster` (docs/reading.md#clusters).

A topic lives on several brokers at once: each broker (master) of a cluster holds its own
queues of the topic (queue ids start at 0 on each), its own CommitLog, its own committed
offsets and its own SQL92 registrations. A consumer group receives the union of what every
broker's filter delivers. A :class:`Cluster` holds one :class:`~cq.store.store.Store` per
broker and answers as the cluster does: a queue is ``(broker, queue_id)``, a read takes one
consistent cut per broker (:class:`ClusterCut`), and each broker's filter is built from that
broker's own registration.

Each store root is one broker; its name is read from the store itself: the system topic
``rmq_sys_SYNC_BROKER_MEMBER_<brokerName>`` every 5.x broker keeps in ``config/topics.json``.
A store without it (a 4.x broker, a store ``rmqfilter gen-store`` wrote) is named after its
directory; names can also be given (a mapping ``{name: root}``).

Several roots of one broker name are replicas of it, a master and its slaves
(docs/reading.md#replicas): a :class:`~cq.store.replicas.ReplicaSet` picks the one every read of
the broker takes (``replica=``, else the default rule), and :attr:`Cluster.replicas` keeps them all
for ``inspect`` and ``why``.
"""
from __future__ import annotations

import glob
import os
import warnings
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, fields

from ..errors import ReplicaWarning, StoreFormatError, UnknownGroupError
from ..readers import config as cfg
from ..readers.commitlog import Message
from ..readers.objects import expand_pattern, is_object_uri
from .replicas import ReplicaSet
from .store import REFRESH, ConsumeResult, ConsumeStats, Store, StoreCut

__all__ = ["Cluster", "ClusterCut", "broker_name", "each_store", "open_stores", "read_roots", "store_roots"]

#: The system topic a 5.x broker creates for itself, named ``<prefix><brokerName>``
#: (docs/reading.md#clusters).
SYNC_BROKER_MEMBER_PREFIX = "rmq_sys_SYNC_BROKER_MEMBER_"
#: How a broker's name was found: from ``config/topics.json``, the directory name, or given.
NAMED_BY = ("topics.json", "directory", "given")


def broker_name(store: Store) -> tuple[str, str]:
    """``(name, how)``: the broker name a store holds, and where it was found (:data:`NAMED_BY`).

    ``config/topics.json``'s ``rmq_sys_SYNC_BROKER_MEMBER_<brokerName>`` topic when there is
    exactly one; otherwise the store root's directory name (``how`` is ``"directory"``): for a store in
    object storage, the last name of its URI (docs/object-storage.md#naming-a-store).
    """
    try:
        topics = store.topic_configs()
    except (StoreFormatError, OSError):  # no readable topics.json (RocksDB metadata, a broken file)
        topics = {}
    names = [t[len(SYNC_BROKER_MEMBER_PREFIX):] for t in topics if t.startswith(SYNC_BROKER_MEMBER_PREFIX)]
    if len(names) == 1 and names[0]:
        return names[0], "topics.json"
    if getattr(store, "uri", None) is not None:  # never the private copy it is read through
        return store.uri.rstrip("/").rsplit("/", 1)[-1], "directory"
    return os.path.basename(os.path.normpath(os.path.abspath(store.root))), "directory"


def store_roots(paths: str | os.PathLike | Iterable[str | os.PathLike], *,
                object_options: dict | None = None) -> list[str]:
    """The store roots ``paths`` names: one path, several, or glob patterns (``stores/broker-*``, or
    ``s3://bucket/brokers/broker-*`` over a bucket, listed with ``object_options``:
    docs/object-storage.md#naming-a-store), each expanded in sorted order. A pattern that matches
    nothing is an error naming it."""
    if isinstance(paths, (str, os.PathLike)):
        paths = [paths]
    roots: list[str] = []
    for p in paths:
        p = os.fspath(p)
        if glob.has_magic(p):
            if is_object_uri(p):
                matched = expand_pattern(p, **(object_options or {}))
            else:
                matched = sorted(m for m in glob.glob(p) if os.path.isdir(m))
            if not matched:
                raise StoreFormatError("the pattern matches no store directory", p)
            roots += matched
        else:
            roots.append(p)
    if not roots:
        raise ValueError("no store root given")
    return roots


@dataclass(frozen=True)
class ClusterCut:
    """One consistent cut per broker (:meth:`Cluster.cut`), each a :class:`~cq.store.store.StoreCut`.

    Attributes
    ----------
    brokers : tuple of (broker, StoreCut)
        In the cluster's broker order; a broker that does not hold the topic is left out.
    """

    brokers: tuple[tuple[str, StoreCut], ...]

    def __getitem__(self, broker: str) -> StoreCut:
        for name, cut in self.brokers:
            if name == broker:
                return cut
        raise KeyError(f"broker {broker!r} is not in the cut (brokers: {', '.join(n for n, _ in self.brokers)})")

    @property
    def queues(self) -> tuple[tuple[str, str, int, int, int], ...]:
        """``(broker, topic, queue_id, min_offset, end_offset)`` of every queue in the cut."""
        return tuple((name, *q) for name, cut in self.brokers for q in cut.queues)


def _add_stats(total: ConsumeStats, part: ConsumeStats) -> None:
    for f in fields(ConsumeStats):
        setattr(total, f.name, getattr(total, f.name) + getattr(part, f.name))


def _tagged(messages: Iterable[Message], broker: str) -> Iterator[Message]:
    for m in messages:
        m.broker = broker
        yield m


class Cluster:
    """Several broker stores read as one cluster (docs/reading.md#clusters).

    Parameters
    ----------
    roots : path, iterable of paths or glob patterns, or mapping of broker name to path(s)
        One store root per broker, or several per broker: its replicas (:func:`store_roots`
        expands patterns). Each broker's name comes from its store (:func:`broker_name`) unless a
        mapping gives it (a list of roots as a value: that broker's replicas).
    replica : root, iterable of roots, or mapping of broker name to root, optional
        For a broker with several replicas, the one to read (its root, or the root's directory
        name); by default :func:`cq.store.replicas.pick_replica`'s rule (docs/reading.md#replicas).
    **store_options
        Passed to each :class:`~cq.store.store.Store` (``refresh``, file sizes).

    Raises
    ------
    cq.StoreFormatError
        A root that is not a store it can read: the message names the root and the broker it
        would be.
    KeyError
        A ``replica`` that names none (or several) of a broker's replicas.

    Warns
    -----
    cq.errors.ReplicaWarning
        For each broker with several replicas: the one read, and why.

    Notes
    -----
    What differs from a :class:`~cq.store.store.Store`: a queue is ``(broker, queue_id)``
    (:meth:`queues`, :meth:`committed_offsets`, ``ranges`` and ``queues`` of :meth:`consume`),
    a cut is a :class:`ClusterCut`, and each message :meth:`consume` yields has
    :attr:`cq.Message.broker` set. :func:`cq.backlog` and :func:`cq.why` take a Cluster too.
    A broker with several replicas is read from one (:attr:`stores` holds it; :attr:`replicas`
    the :class:`~cq.store.replicas.ReplicaSet`). A Cluster pickles as its brokers' roots, the
    replicas read and its options.
    """

    def __init__(self, roots, *, replica=None, **store_options) -> None:
        refresh = store_options.get("refresh", "always")
        if refresh not in REFRESH:
            raise ValueError(f"refresh must be one of {', '.join(REFRESH)}, got {refresh!r}")
        named = isinstance(roots, Mapping)
        pairs = [(str(n), os.fspath(r)) for n, rs in roots.items()
                 for r in ([rs] if isinstance(rs, (str, os.PathLike)) else rs)] if named else \
            [(None, r) for r in store_roots(roots, object_options=store_options.get("object_options"))]
        if not pairs:
            raise ValueError("a Cluster needs at least one store root")
        self._options = dict(store_options)
        self.stores: dict[str, Store] = {}
        self.named_by: dict[str, str] = {}
        #: broker name -> its ReplicaSet, for a broker given as several store roots
        self.replicas: dict[str, ReplicaSet] = {}
        held: dict[str, list[Store]] = {}
        try:
            for i, (name, root) in enumerate(pairs, 1):
                try:
                    store = Store(root, **store_options)
                    name, how = (name, "given") if name is not None else broker_name(store)
                except (StoreFormatError, OSError) as exc:
                    # the root and its place among the roots; the file and offset when inside it
                    path = getattr(exc, "path", None) if isinstance(exc, StoreFormatError) else exc.filename
                    reason = exc.reason if isinstance(exc, StoreFormatError) else (exc.strerror or str(exc))
                    inside = path is not None and os.path.abspath(path) != os.path.abspath(root)
                    raise StoreFormatError(f"store root {root} (broker {i} of {len(pairs)}): {reason}",
                                           path if inside else None,
                                           getattr(exc, "offset", None) if inside else None) from exc
                held.setdefault(name, []).append(store)
                self.named_by.setdefault(name, how)
            _check_replicas_named(held, replica)
            for name, stores in held.items():
                if len(stores) == 1:
                    self.stores[name] = stores.pop()
                    continue
                # several roots of one broker name: its replicas (docs/reading.md#replicas)
                given = _given_replica(replica, name, stores)
                replicas = ReplicaSet.open(name, stores, given)
                stores.clear()
                self.replicas[name] = replicas
                self.stores[name] = replicas.read.store
                warnings.warn(replicas.note(), ReplicaWarning, stacklevel=2)
        except BaseException:
            for stores in held.values():
                for s in stores:
                    s.close()
            self.close()
            raise

    # ------------------------------------------------------------ what it holds
    def __reduce__(self):
        roots = {n: [r.root for r in self.replicas[n].replicas] if n in self.replicas else s.root
                 for n, s in self.stores.items()}
        return _reopen_cluster, (roots, {**self._options, "replica": self.replica_read})

    def __repr__(self) -> str:
        return f"Cluster({ {n: s.root for n, s in self.stores.items()}!r})"

    @property
    def replica_read(self) -> dict[str, str]:
        """``{broker: root}`` of each broker with several replicas: the replica its reads take."""
        return {n: rs.read.root for n, rs in self.replicas.items()}

    @property
    def brokers(self) -> list[str]:
        """The brokers' names, in the order their roots were given."""
        return list(self.stores)

    @property
    def root(self) -> str:
        """The store roots, comma-separated (what error messages name)."""
        return ", ".join(s.root for s in self.stores.values())

    def store(self, broker: str) -> Store:
        """The :class:`~cq.store.store.Store` of ``broker``; KeyError naming the brokers there are."""
        try:
            return self.stores[broker]
        except KeyError:
            raise KeyError(f"no broker {broker!r} in the cluster (brokers: {', '.join(self.stores)})") from None

    def topics(self) -> list[str]:
        """Topics with consume queues on any broker, sorted."""
        return sorted(set().union(*(s.topics() for s in self.stores.values())))

    def brokers_of(self, topic: str) -> list[str]:
        """The brokers that hold ``topic``'s consume queues (KeyError when none does)."""
        held = [n for n, s in self.stores.items() if topic in s.topics()]
        if not held:
            raise KeyError(f"topic {topic!r} has no consume queues on any broker of the cluster ({self.root})")
        return held

    def queues(self, topic: str) -> list[tuple[str, int]]:
        """``(broker, queue_id)`` of every queue of ``topic``, broker by broker."""
        return [(n, q) for n in self.brokers_of(topic) for q in self.stores[n].queue_ids(topic)]

    def committed_offsets(self, group: str, topic: str) -> dict[tuple[str, int], int]:
        """Each broker's ``config/consumerOffset.json``: ``(broker, queue_id)`` -> the next offset."""
        return {(n, q): off for n in self.brokers_of(topic)
                for q, off in self.stores[n].committed_offsets(group, topic).items()}

    def registered_filters(self, topic: str | None = None, *, bloom_filter=None) -> list[cfg.RegisteredFilter]:
        """Every broker's registrations (:meth:`cq.Store.registered_filters`), broker by broker; a group
        registered on several brokers appears once per broker."""
        return [f for s in self.stores.values() for f in s.registered_filters(topic, bloom_filter=bloom_filter)]

    def close(self) -> None:
        """Close every broker's store."""
        for s in getattr(self, "stores", {}).values():
            s.close()
        for rs in getattr(self, "replicas", {}).values():
            rs.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # ------------------------------------------------------------ reads
    def cut(self, topic: str | None = None, *, brokers: Iterable[str] | None = None) -> ClusterCut:
        """One consistent cut per broker (:meth:`cq.Store.cut`), taken broker by broker.

        Brokers write independently, so there is no cut across them; each broker's cut is one
        the broker could have been read at. With ``topic``, only the brokers holding it.
        """
        names = list(brokers) if brokers is not None else (
            self.brokers_of(topic) if topic is not None else self.brokers)
        return ClusterCut(tuple((n, self.store(n).cut(topic)) for n in names))

    def make_filter(self, broker: str, topic: str, group: str, **kw):
        """The filter :meth:`consume` uses on ``broker`` (:meth:`cq.Store.make_filter` of its store:
        a group named alone is looked up in that broker's own registrations)."""
        return self.store(broker).make_filter(topic, group, **kw)

    def consume(self, topic: str, group: str, *, queues: Iterable[tuple[str, int]] | None = None,
                ranges: Mapping[tuple[str, int], tuple[int, int | None]] | None = None,
                cut: ClusterCut | None = None, progress: Callable[[int, int], None] | None = None,
                **kw) -> ConsumeResult:
        """The messages ``group`` receives from ``topic`` across the cluster: the union of each
        broker's :meth:`cq.Store.consume`, broker by broker, each in queue order.

        Parameters
        ----------
        topic, group : str
        queues : iterable of (broker, queue_id), optional
            Only these queues (default: every queue of every broker holding the topic).
        ranges : mapping of (broker, queue_id) to (start, end), optional
            As :meth:`cq.Store.consume`'s ``ranges``, per broker queue.
        cut : ClusterCut, optional
            From :meth:`cut`; by default one is taken per broker as its read starts.
        progress : callable(units_done, units_total), optional
            Called per batch with the counts of the broker being read.
        **kw
            :meth:`cq.Store.consume`'s other arguments (``sql``, ``tags``, ``filter``,
            ``message_filter``, ``bloom_filter``, ``verify_crc``...). With neither ``sql``
            nor ``tags`` each broker uses the group's registration on that broker.

        Returns
        -------
        ConsumeResult
            Messages with :attr:`cq.Message.broker` set; ``stats`` summed over the brokers
            (complete once exhausted), and ``broker_stats``: each broker's own counts.
        """
        if "queue_ids" in kw:
            raise TypeError("a Cluster's queues are (broker, queue_id): give queues=, not queue_ids=")
        wanted = None if queues is None else {(str(b), int(q)) for b, q in queues}
        names = self.brokers_of(topic) if cut is None else [n for n, _ in cut.brokers]
        if wanted is not None:
            unknown = {b for b, _ in wanted} - set(self.stores)
            if unknown:
                raise KeyError(f"no broker {min(unknown)!r} in the cluster (brokers: {', '.join(self.stores)})")
            names = [n for n in names if any(b == n for b, _ in wanted)]
        per_broker: dict[str, ConsumeStats] = {}

        def run(stats: ConsumeStats) -> Iterator[Iterator[Message]]:
            for name in names:
                store = self.stores[name]
                qids = None if wanted is None else sorted(q for b, q in wanted if b == name)
                own = None if ranges is None else {q: r for (b, q), r in ranges.items() if b == name}
                result = store.consume(topic, group, queue_ids=qids, ranges=own, progress=progress,
                                       cut=None if cut is None else cut[name], **kw)
                per_broker[name] = result.stats
                yield _tagged(result, name)
                _add_stats(stats, result.stats)

        result = ConsumeResult(run)
        result.broker_stats = per_broker
        return result

    def registered_filter(self, topic: str, group: str, *, bloom_filter=None) -> cfg.RegisteredFilter:
        """``group``'s registration for ``topic`` on the first broker holding the topic that has one;
        :class:`cq.UnknownGroupError` naming every broker's file when none has."""
        registered, paths = [], []
        for name in self.brokers_of(topic):
            try:
                return self.stores[name].registered_filter(topic, group, bloom_filter=bloom_filter)
            except UnknownGroupError as exc:
                registered += exc.registered
                paths.append(exc.path)
        raise UnknownGroupError(group, topic, sorted(set(registered)), " and ".join(paths))


def _reopen_cluster(roots: dict, options: dict) -> Cluster:
    with warnings.catch_warnings():        # the replica read was said when the Cluster was made
        warnings.simplefilter("ignore", ReplicaWarning)
        return Cluster(roots, **options)


def _given_replica(replica, broker: str, stores: list[Store]):
    """The ``replica=`` of :class:`Cluster` that names one of ``broker``'s ``stores``, or None."""
    if replica is None:
        return None
    if isinstance(replica, Mapping):
        return replica.get(broker)
    names = [replica] if isinstance(replica, (str, os.PathLike)) else list(replica)
    roots = {os.path.abspath(s.root) for s in stores}
    bases = {os.path.basename(os.path.normpath(s.root)) for s in stores}
    mine = [n for n in names if os.path.abspath(os.fspath(n)) in roots or os.fspath(n) in bases]
    if len(mine) > 1:
        raise KeyError(f"replica= names {len(mine)} replicas of broker {broker!r}: {', '.join(map(str, mine))}")
    return mine[0] if mine else None


def _check_replicas_named(held: dict[str, list[Store]], replica) -> None:
    """Every replica ``replica=`` names must be one of a broker's several roots (``held``: broker name
    -> its stores): a name that matches none is a KeyError naming the replicas there are."""
    several = {n: stores for n, stores in held.items() if len(stores) > 1}
    every = [s.root for stores in several.values() for s in stores]
    if replica is None or isinstance(replica, Mapping):
        for broker, name in (replica or {}).items():
            if broker not in several:
                raise KeyError(f"replica= names broker {broker!r}, which has no several replicas "
                               f"(brokers with replicas: {', '.join(several) or 'none'})")
            if _given_replica([name], broker, several[broker]) is None:
                raise KeyError(f"no replica is {os.fspath(name)!r} (replicas: {', '.join(every)})")
        return
    names = [replica] if isinstance(replica, (str, os.PathLike)) else list(replica)
    for n in names:
        if not any(_given_replica([n], b, stores) is not None for b, stores in several.items()):
            raise KeyError(f"no replica is {os.fspath(n)!r} (replicas: "
                           f"{', '.join(every) or 'none: no two stores share a broker name'})")


def open_stores(paths, *, replica=None, **store_options) -> Store | Cluster:
    """A :class:`~cq.store.store.Store` for one store root, a :class:`Cluster` for several (or a glob
    pattern matching several): what the CLI opens for its ``STORE`` arguments. ``replica``: as
    :class:`Cluster`'s (for one root, it must name that root)."""
    roots = store_roots(paths, object_options=store_options.get("object_options"))
    if len(roots) == 1 and not (isinstance(paths, (str, os.PathLike)) and glob.has_magic(os.fspath(paths))):
        if replica is not None:
            raise KeyError(f"replica= is for several stores of one broker name; {roots[0]} is one store")
        return Store(roots[0], **store_options)
    return Cluster(roots, replica=replica, **store_options)


def read_roots(store: Store | Cluster) -> list[str]:
    """The store root each broker's reads take: a Store's root, or each broker's of a Cluster (for a
    broker with several replicas, the replica read: docs/reading.md#replicas)."""
    return [s.root for _, s in each_store(store)]


def each_store(store: Store | Cluster) -> Iterator[tuple[str | None, Store]]:
    """``(broker, Store)`` of a Cluster's brokers, or ``(None, store)`` of a single Store."""
    if isinstance(store, Cluster):
        yield from store.stores.items()
    else:
        yield None, store

