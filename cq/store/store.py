"""A broker store directory, and what a consumer group would receive from it."""
from __future__ import annotations

import contextlib
import itertools
import os
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, fields

import numpy as np

import bloom

from .. import format as fmt
from ..errors import StoreFileDeleted, StoreFormatError, UnknownGroupError, UnsupportedLayoutError
from ..filter.custom import BATCH_RECORD_FIELDS, ON_FILTER_ERROR, as_message_filter, records_record_batch
from ..filter.layers import Layers, SqlFilter, TagFilter
from ..kernels import _objects
from ..readers import config as cfg
from ..readers.batchcq import BatchConsumeQueue, expand_batch
from ..readers.commitlog import SEALED_AGE_NS, CommitLog, Message
from ..readers.consumequeue import ConsumeQueue
from ..readers.dledger import DLedgerCommitLog
from ..readers.ext import ConsumeQueueExt
from ..readers.rocksdb import RocksDBConsumeQueue, RocksDBQueueTable, metadata_table, pull_offset_table
from ..readers.rocksdb import offset_table as rocksdb_offset_table
from ..readers.skipping import decode_skipping
from ..tags import EXPRESSION_TYPE_SQL92
from . import undispatched
from .batches import BatchDecisions
from .modes import detect_layout

#: Units handled per batch by :meth:`Store.consume`.
CONSUME_BATCH = 1 << 16
#: Layer 2 of :meth:`Store.consume` reads records in slices of at most this many records
#: spanning at most this many CommitLog bytes, and lets the kernel drop the pages read
#: after each slice (they stay in the page cache), so its RSS does not grow with the log.
_SLICE_RECORDS = 8192
_SLICE_SPAN = 64 << 20


def _slices(offs: np.ndarray, span: int, count: int) -> Iterator[tuple[int, int]]:
    """``(start, stop)`` runs of ``offs`` of at most ``count`` items within ``span`` bytes of the first."""
    n = len(offs)
    if n == 0:
        return
    if n <= count and int(offs.max()) - int(offs.min()) <= span:
        yield 0, n
        return
    if (offs[1:] >= offs[:-1]).all():  # queue order: offsets ascend, so each run ends at a bisection
        start = 0
        while start < n:
            stop = min(start + count, int(np.searchsorted(offs, offs[start] + span, side="right")))
            yield start, stop
            start = stop
        return
    start, base = 0, int(offs[0])
    for i, off in enumerate(offs.tolist()):
        if i - start >= count or abs(off - base) > span:
            yield start, i
            start, base = i, off
    yield start, n


def _clip_to_log(cqueue: ConsumeQueue, lo: int, hi: int, commit_log_end: int) -> int:
    """First queue offset in ``[lo, hi)`` whose record ends past ``commit_log_end`` (``hi`` if none).

    A queue's CommitLog offsets grow with its queue offsets, so this is a bisection.
    """
    def past(q: int) -> bool:
        u = cqueue.read(q, 1)
        return bool(len(u)) and int(u["commit_log_offset"][0]) + int(u["size"][0]) > commit_log_end

    if hi <= lo or not past(hi - 1):
        return hi
    a, b = lo, hi - 1  # the answer is in [a, b]
    while a < b:
        mid = (a + b) // 2
        if past(mid):
            b = mid
        else:
            a = mid + 1
    return a


@dataclass
class ConsumeStats:
    """Counts per filter layer, filled in while :meth:`Store.consume` runs.

    Attributes
    ----------
    units_scanned : int
        ConsumeQueue units examined.
    passed_consume_queue : int
        Units that passed layer 1 (tags code / Bloom bitmap).
    passed_commit_log : int
        Messages that passed layer 2 (selector on the properties; always for tags).
    delivered : int
        Messages yielded (after the client's exact tag re-check).
    bloom_tested : int
        Units whose ext bitmap was actually tested in layer 1.
    bloom_pruned : int
        Units layer 1 dropped because a group bit was clear.
    bloom_false_positives : int
        Bitmap hits that layer 2 then rejected.
    client_filtered : int
        Messages the client's exact tag re-check dropped (hash collisions, no TAGS).
    commit_log_missing : int
        Units whose record is not in the CommitLog (removed, or past its end):
        skipped, as the broker skips them.
    ext_missing : int
        Units holding an ext address the ext file could not resolve.
    filter_rejected : int
        Messages both broker layers (and the client re-check) passed that the custom
        message filter rejected (docs/custom-filters.md).
    filter_skipped : int
        Messages not delivered because the custom filter failed on them
        (``on_filter_error="skip"``; the whole batch for a batch filter).
    """

    units_scanned: int = 0
    passed_consume_queue: int = 0
    passed_commit_log: int = 0
    delivered: int = 0
    bloom_tested: int = 0
    bloom_pruned: int = 0
    bloom_false_positives: int = 0
    client_filtered: int = 0
    commit_log_missing: int = 0
    ext_missing: int = 0
    filter_rejected: int = 0
    filter_skipped: int = 0

    def as_dict(self) -> dict[str, int]:
        """The counts as a plain dict."""
        return {f.name: getattr(self, f.name) for f in fields(self)}


class ConsumeResult:
    """The messages a group would receive (an iterator), with :attr:`stats` per layer.

    Iterating drives the scan; ``stats`` is complete once the iterator is exhausted.
    """

    def __init__(self, gen_factory: Callable[[ConsumeStats], Iterator[Iterator[Message]]]) -> None:
        self.stats = ConsumeStats()
        # the factory yields chunks (iterators counting what they hand out): one C-level chain
        # hands the messages out, instead of a resumed generator per message
        self._messages = itertools.chain.from_iterable(gen_factory(self.stats))

    def __iter__(self) -> Iterator[Message]:
        return self._messages

    def __next__(self) -> Message:
        return next(self._messages)


@dataclass(frozen=True)
class StoreCut:
    """One consistent cut of a store: what a read sees (docs/live.md).

    Taken by :meth:`Store.cut` when a read starts: each queue's offsets
    ``[min, end)``, read first, then the CommitLog's recovered end. The broker
    writes a CommitLog record before the ConsumeQueue unit that points at it,
    so every unit inside the cut has its record below ``commit_log_end``; a
    unit that does not (a torn or corrupt tail) or whose record lies below
    ``commit_log_min`` (expired) is missing. Units written after the cut are
    outside it: not read, not counted. A cut is small and picklable.

    Attributes
    ----------
    commit_log_min, commit_log_end : int
        Physical offsets: the first byte of the first CommitLog file and the
        recovered end of the data, when the cut was taken.
    queues : tuple of (topic, queue_id, min_offset, end_offset)
        Queue offsets ``[min_offset, end_offset)`` of each queue in the cut.
    """

    commit_log_min: int
    commit_log_end: int
    queues: tuple[tuple[str, int, int, int], ...] = ()

    def queue_range(self, topic: str, queue_id: int) -> tuple[int, int] | None:
        """``(min_offset, end_offset)`` of a queue in the cut, or None when the cut does not hold it."""
        ranges = self.__dict__.get("_ranges")
        if ranges is None:
            ranges = {(t, q): (lo, hi) for t, q, lo, hi in self.queues}
            object.__setattr__(self, "_ranges", ranges)
        return ranges.get((topic, int(queue_id)))

    def ends(self, topic: str) -> dict[int, int]:
        """``{queue_id: end_offset}`` of ``topic``'s queues in the cut."""
        return {q: hi for t, q, _, hi in self.queues if t == topic}


#: Values of ``Store(refresh=...)``.
REFRESH = ("always", "never")


def _dir_identity(st: os.stat_result) -> tuple[int, int, int]:
    # a directory's change time moves when entries are added or removed in it: a store
    # deleted and written again at the same path differs here even if its inode is reused
    return st.st_dev, st.st_ino, st.st_ctime_ns


def _reopen_store(root: str, kwargs: dict) -> Store:
    return Store(root, **kwargs)


class Store:
    """Read-only view of a RocketMQ broker store directory.

    Parameters
    ----------
    root : str or os.PathLike
        The ``storePathRootDir`` (holding ``commitlog/``, ``consumequeue/``, ...).
    commit_log_file_size, consume_queue_file_size, ext_file_size : int, optional
        Override the file sizes; by default each is inferred from the files present.
    refresh : {"always", "never"}, default "always"
        ``"always"``: each read (:meth:`consume`, :meth:`cut`) first follows the
        broker (:meth:`refresh`), so it sees the store as it is when it starts.
        ``"never"``: the Store keeps the view it took on first use; units written
        after that lie outside it (docs/live.md).

    Notes
    -----
    A Store may be shared between threads (readers are opened once under a
    lock) and pickles as its root and options (the copy maps the files again).
    :meth:`consume` opens each queue's readers for its pass and closes them
    after; :meth:`consume_queue` and :meth:`ext` cache theirs until
    :meth:`close` (each mapped file holds a file descriptor).

    Examples
    --------
    >>> store = Store("tests/data/golden_store")            # doctest: +SKIP
    >>> store.topics()                                       # doctest: +SKIP
    ['GoldenFilterTopic', 'GoldenPlainTopic']
    >>> result = store.consume("GoldenFilterTopic", "GID_SQL_A", sql="a > 5 AND b = 'abc'")  # doctest: +SKIP
    >>> msgs = list(result); result.stats.passed_commit_log  # doctest: +SKIP
    """

    def __init__(self, root: str | os.PathLike, *, commit_log_file_size: int | None = None,
                 consume_queue_file_size: int | None = None, ext_file_size: int | None = None,
                 refresh: str = "always") -> None:
        if refresh not in REFRESH:
            raise ValueError(f"refresh must be one of {', '.join(REFRESH)}, got {refresh!r}")
        self.refresh_mode = refresh
        self.root = os.fspath(root)
        # which CommitLog, consume queues and metadata the root holds (docs/reading.md#store-modes):
        # a layout rmqfilter cannot read is an error here, never an empty answer later
        self.layout = detect_layout(self.root)
        self.layout.check_consume_queues()
        self._cl_size = commit_log_file_size
        self._cq_size = consume_queue_file_size
        self._ext_size = ext_file_size
        self._commit_log: CommitLog | None = None
        self._cqs: dict[tuple[str, int], ConsumeQueue] = {}
        self._exts: dict[tuple[str, int], ConsumeQueueExt | None] = {}
        self._frozen: dict[tuple[str, int], tuple[int, int]] = {}  # refresh="never": each queue's first view
        # queues whose readers cut(keep_readers=True) keeps: their maps are released after each pass
        self._kept: set[tuple[str, int]] = set()
        # kept queues found quiet at their last refresh: what their refresh depended on (_queue_state)
        self._quiet: dict[tuple[str, int], tuple] = {}
        self._root_identity = _dir_identity(os.stat(self.root))  # what replaced() compares
        # a crashed store: the units its broker's recovery would add, found on first use
        self._undispatched: dict[tuple[str, int], tuple[int, bytes]] | None = None
        # readers are opened lazily; the lock makes threads sharing a Store open each one once
        self._open_lock = threading.RLock()

    def __reduce__(self):
        # a Store pickles as its root and options: the copy opens the files again
        return _reopen_store, (self.root, {"commit_log_file_size": self._cl_size,
                                           "consume_queue_file_size": self._cq_size,
                                           "ext_file_size": self._ext_size,
                                           "refresh": self.refresh_mode})

    def __repr__(self) -> str:
        return f"Store({self.root!r})"

    @property
    def commit_log(self) -> CommitLog:
        """The store's :class:`CommitLog`."""
        if self._commit_log is None:
            with self._open_lock:
                if self._commit_log is None:
                    self._commit_log = self._open_commit_log()
        return self._commit_log

    def _open_commit_log(self) -> CommitLog:
        layout = self.layout
        layout.check_commit_log()
        if layout.dledger_dir is not None:
            return DLedgerCommitLog(layout.dledger_dir, classic_directory=layout.commit_log_dir,
                                    file_size=self._cl_size)
        return CommitLog(layout.commit_log_dir, file_size=self._cl_size)

    def _rocksdb_queues(self) -> list[tuple[str, int]] | None:
        """The queues of a RocksDB consume queue, read now (one cut); None for queue files."""
        if self.layout.consume_queues != "rocksdb":
            return None
        with RocksDBQueueTable(os.path.join(self.root, fmt.CONSUME_QUEUE_DIR)) as table:
            return sorted(table.ends)

    def topics(self) -> list[str]:
        """Topics that have a ConsumeQueue directory (LMQ queues, ``%LMQ%...``, included) or a
        BatchConsumeQueue directory (BatchCQ topics), sorted."""
        d = os.path.join(self.root, fmt.CONSUME_QUEUE_DIR)
        batch = os.path.join(self.root, fmt.BATCH_CONSUME_QUEUE_DIR)
        listed = {t for t in self.layout.batch_cq_topics if os.path.isdir(os.path.join(batch, t))}
        rocks = self._rocksdb_queues()
        if rocks is not None:
            listed.update(topic for topic, _ in rocks)
        elif os.path.isdir(d):
            listed.update(t for t in os.listdir(d) if os.path.isdir(os.path.join(d, t)))
        return sorted(listed)

    def queue_ids(self, topic: str) -> list[int]:
        """Queue ids of ``topic``, ascending."""
        if topic in self.layout.batch_cq_topics:
            d = os.path.join(self.root, fmt.BATCH_CONSUME_QUEUE_DIR, topic)
            if not os.path.isdir(d):  # known from the topic table, no message yet: no queue, never a classic one
                return []
            return sorted(int(q) for q in os.listdir(d) if q.isdigit() and os.path.isdir(os.path.join(d, q)))
        rocks = self._rocksdb_queues()
        if rocks is not None:
            ids = [q for t, q in rocks if t == topic]
            if not ids:
                raise KeyError(f"topic {topic!r} has no consume queues in {self.root}")
            return ids
        d = os.path.join(self.root, fmt.CONSUME_QUEUE_DIR, topic)
        if not os.path.isdir(d):
            raise KeyError(f"topic {topic!r} has no consume queues in {self.root}")
        return sorted(int(q) for q in os.listdir(d) if q.isdigit() and os.path.isdir(os.path.join(d, q)))

    def consume_queue(self, topic: str, queue_id: int) -> ConsumeQueue:
        """The :class:`ConsumeQueue` of (topic, queue_id).

        Its ``min_offset`` is corrected past units whose CommitLog records were
        deleted, as the broker does when the first CommitLog file does not start at 0.
        """
        key = (topic, int(queue_id))
        cq = self._cqs.get(key)
        if cq is None:
            with self._open_lock:
                return self._open_consume_queue(key)
        return cq

    def _open_consume_queue(self, key: tuple[str, int]) -> ConsumeQueue:
        topic, queue_id = key
        cq = self._cqs.get(key)
        if cq is None:
            cq = self._new_consume_queue(topic, queue_id)
            self._cqs[key] = cq
        return cq

    def _new_consume_queue(self, topic: str, queue_id: int) -> ConsumeQueue:
        """A new reader of one queue, as the broker sees the queue (every reader comes from here)."""
        if topic in self.layout.batch_cq_topics:  # docs/formats.md#batch-consume-queue
            d = os.path.join(self.root, fmt.BATCH_CONSUME_QUEUE_DIR, topic, str(int(queue_id)))
            if not os.path.isdir(d):
                raise KeyError(f"no BatchCQ queue {topic}/{queue_id} in {self.root}")
            cq = BatchConsumeQueue(d, topic=topic, queue_id=int(queue_id))
        elif self.layout.consume_queues == "rocksdb":
            d = os.path.join(self.root, fmt.CONSUME_QUEUE_DIR)
            with RocksDBQueueTable(d) as table:
                if (topic, int(queue_id)) not in table.ends_of(topic):
                    raise KeyError(f"no consume queue {topic}/{queue_id} in {self.root}")
                cq = RocksDBConsumeQueue(d, topic, int(queue_id), table)
        else:
            d = os.path.join(self.root, fmt.CONSUME_QUEUE_DIR, topic, str(int(queue_id)))
            if not os.path.isdir(d):
                raise KeyError(f"no consume queue {topic}/{queue_id} in {self.root}")
            cq = ConsumeQueue(d, file_size=self._cq_size, topic=topic, queue_id=int(queue_id))
        end, units = self._undispatched_units().get((topic, int(queue_id)), (None, b""))
        if units and cq.max_offset == end:
            cq.set_undispatched(units)  # what the broker's recovery dispatches (docs/reliability.md#undispatched)
        if self.commit_log.files and self.commit_log.min_offset > 0:
            # CommitLog files were deleted: the broker moves minLogicOffset past units
            # whose records are gone (docs/formats.md#consumequeue-offsets)
            cq.correct_min_offset(self.commit_log.min_offset)
        return cq

    def _undispatched_units(self) -> dict[tuple[str, int], tuple[int, bytes]]:
        """For a crashed store no process holds: each queue's end and the units its broker's recovery
        would add after it (:mod:`cq.store.undispatched`); otherwise nothing. Found once per Store."""
        if self._undispatched is None:
            self._undispatched = {}
            if undispatched.crashed(self.root) and self.commit_log.files and self.layout.consume_queues == "files":
                log = self.commit_log
                self._undispatched = undispatched.undispatched_units(self.root, log, log.max_offset,
                                                                     cq_file_size=self._cq_size)
        return self._undispatched

    def ext(self, topic: str, queue_id: int) -> ConsumeQueueExt | None:
        """The :class:`ConsumeQueueExt` of (topic, queue_id), or None if the store has none."""
        key = (topic, int(queue_id))
        if key not in self._exts:
            with self._open_lock:
                if key not in self._exts:
                    d = os.path.join(self.root, fmt.CONSUME_QUEUE_EXT_DIR, topic, str(int(queue_id)))
                    self._exts[key] = ConsumeQueueExt(d, file_size=self._ext_size) if os.path.isdir(d) else None
        return self._exts[key]

    def close(self) -> None:
        """Release every mapped file."""
        for cq in self._cqs.values():
            cq.close()
        for ext in self._exts.values():
            if ext is not None:
                ext.close()
        if self._commit_log is not None:
            self._commit_log.close()

    # ------------------------------------------------------------ config files
    def config_path(self, name: str) -> str:
        """``{root}/config/{name}``: where the broker keeps its config file ``name``.

        Raises :class:`cq.errors.UnsupportedLayoutError` when the broker keeps that table in
        RocksDB instead (the JSON file is then stale, docs/reading.md#store-modes).
        """
        self.layout.check_config(name)
        return os.path.join(self.root, cfg.CONFIG_DIR, name)

    def config_file(self, name: str) -> cfg.ConfigFile:
        """Load config file ``name`` with the ``.bak`` fallback; ``.source`` says which file was read."""
        return cfg.load_config(self.config_path(name))

    def registered_filters(self, topic: str | None = None, *, bloom_filter=None) -> list[cfg.RegisteredFilter]:
        """The SQL92 registrations of ``config/consumerFilter.json`` (all topics, or ``topic``'s).

        Parameters
        ----------
        topic : str, optional
            Only this topic's registrations.
        bloom_filter : bloom.BloomFilter, optional
            The broker's filter the bloom data is checked against (default ``bloom.BloomFilter()``).

        Returns
        -------
        list of cq.readers.config.RegisteredFilter
            In file order; ``[]`` when the file (and its ``.bak``) is missing.

        Warns
        -----
        cq.readers.config.ConfigWarning
            For each group whose bloom data is not what the filter computes, naming it, and
            when the ``.bak`` file was read instead of a broken one.

        Raises
        ------
        cq.readers.config.ConfigFormatError
            The file (and its ``.bak``) is malformed: names the file, byte offset and line:column.
        """
        return cfg.read_registered_filters(self.config_path(cfg.CONSUMER_FILTER_FILE), bloom_filter, topic)

    def registered_filter(self, topic: str, group: str, *, bloom_filter=None) -> cfg.RegisteredFilter:
        """``group``'s registration for ``topic``; :class:`cq.UnknownGroupError` (listing the
        registered groups) when there is none."""
        filters = self.registered_filters(topic, bloom_filter=bloom_filter)
        for f in filters:
            if f.group == group:
                return f
        raise UnknownGroupError(group, topic, [f.group for f in filters],
                                self.config_path(cfg.CONSUMER_FILTER_FILE))

    def registration_of(self, topic: str, group: str, sql: str) -> cfg.RegisteredFilter | None:
        """``group``'s registration for ``topic`` when ``sql`` is the SQL92 expression it registered
        (the same text), else None: a filter given that expression is the group's own, bornTime and
        all (docs/filtering.md#born-time)."""
        try:
            reg = self.registered_filter(topic, group)
        except UnknownGroupError:
            return None
        return reg if reg.expression_type == EXPRESSION_TYPE_SQL92 and reg.expression == sql else None

    def committed_offsets(self, group: str, topic: str) -> dict[int, int]:
        """``config/consumerOffset.json``: queue id -> the next offset ``group`` will consume in ``topic``.

        Queues without a committed offset (absent, or -1) are left out; a missing file gives ``{}``.
        """
        return cfg.committed_from_table(self.offset_table(), group, topic)

    def offset_table(self) -> dict[tuple[str, str], dict[int, int]]:
        """Every committed offset: (topic, group) -> {queue id: offset} (raw, -1 kept), from
        ``config/consumerOffset.json``, or where the broker keeps it instead: its RocksDB table (v1's
        ``config/consumerOffsets``, v2's ``config/rdb``), or ``config/lmqConsumerOffset.json`` of a
        broker with ``enableLmq`` (docs/formats.md#lmq)."""
        rocks = self.layout.rocksdb_table_of(cfg.CONSUMER_OFFSET_FILE)
        if rocks is not None:
            return rocksdb_offset_table(rocks)
        lmq = os.path.join(self.root, cfg.CONFIG_DIR, cfg.LMQ_CONSUMER_OFFSET_FILE)
        if os.path.exists(lmq) or os.path.exists(lmq + ".bak"):
            return cfg.read_lmq_offset_table(lmq)
        return cfg.read_offset_table(self.config_path(cfg.CONSUMER_OFFSET_FILE))

    def pull_offset_table(self) -> dict[tuple[str, str], dict[int, int]]:
        """How far each group's pulls reached: (topic, group) -> {queue id: the next offset of the
        last pull the broker served}, :meth:`offset_table`'s form. Only a config v2 broker keeps
        it (``config/rdb``; docs/formats.md#rocksdb-metadata-v2); any other store raises
        :class:`cq.errors.UnsupportedLayoutError`, since its broker held it in memory alone."""
        rocks = self.layout.rocksdb_table_of(cfg.CONSUMER_OFFSET_FILE)
        if rocks is None or self.layout.rocksdb_config != "v2":
            raise UnsupportedLayoutError(
                "pull offsets", os.path.join(self.root, cfg.CONFIG_DIR),
                "a broker keeps them on disk only with configManagerVersion=v2 (config/rdb); this one kept "
                "them in memory")
        return pull_offset_table(rocks)

    def subscription_groups(self) -> dict[str, dict]:
        """``config/subscriptionGroup.json`` (or its RocksDB table): group name -> its settings as
        stored (``{}`` if missing)."""
        rocks = self.layout.rocksdb_table_of(cfg.SUBSCRIPTION_GROUP_FILE)
        if rocks is not None:
            return metadata_table(rocks, "subscriptionGroups")
        return cfg.read_subscription_groups(self.config_path(cfg.SUBSCRIPTION_GROUP_FILE))

    def topic_configs(self) -> dict[str, dict]:
        """``config/topics.json`` (or its RocksDB table): topic name -> its settings as stored (``{}`` if missing)."""
        rocks = self.layout.rocksdb_table_of(cfg.TOPICS_FILE)
        if rocks is not None:
            return metadata_table(rocks, "topics")
        return cfg.read_topic_configs(self.config_path(cfg.TOPICS_FILE))

    # ------------------------------------------------------------ live stores
    def _check_root(self) -> None:
        if not os.path.isdir(self.root):
            raise StoreFormatError("the store directory no longer exists (deleted while it was being read)",
                                   self.root)

    def refresh(self) -> None:
        """Follow the broker: see new files, queues, topics and moved ends (docs/live.md).

        The CommitLog and every cached queue reader list their files again:
        files the broker expired at the front are dropped (queue minimums move
        past deleted records, as the broker moves them), new files are added,
        and each end is found by continuing the recovery walk from the previous
        end. New queues and topics are listed by each read. Not to be called
        while another thread reads through this Store.

        Raises
        ------
        StoreFormatError
            The store directory is gone.
        """
        with self._open_lock:
            self._check_root()
            if self._commit_log is not None:
                self._commit_log.refresh()
            for key, cqueue in list(self._cqs.items()):
                self._refresh_queue(key, cqueue)

    def _queue_state(self, cqueue: ConsumeQueue) -> tuple | None:
        """What a queue's refresh depends on, by ``stat`` alone (no file opened): its directory's and
        its last file's identity and modification time, and the CommitLog's first offset."""
        files = cqueue.files
        if not files:
            return None
        try:
            d, f = os.stat(cqueue.directory), os.stat(files[-1][1])
        except FileNotFoundError:
            return None
        return d.st_ino, d.st_mtime_ns, f.st_ino, f.st_size, f.st_mtime_ns, self.commit_log.min_offset

    def _refresh_kept(self, key: tuple[str, int], cqueue: ConsumeQueue) -> None:
        """Refresh a cached queue, unless it is kept across reads and nothing it depends on changed
        since a refresh that found it quiet (docs/live.md#cached-readers): a stream over thousands of
        queues opens only those written since, not every queue at every trigger.

        Quiet: nobody had written to the queue's directory or last file for two seconds (the
        sealed-file rule), so any later write gives them a new modification time.
        """
        state = self._queue_state(cqueue) if key in self._kept else None
        if state is not None and self._quiet.get(key) == state:
            return
        self._refresh_queue(key, cqueue)
        now = time.time_ns()
        if state is not None and now - state[1] > SEALED_AGE_NS and now - state[4] > SEALED_AGE_NS:
            self._quiet[key] = state
        else:
            self._quiet.pop(key, None)

    def _refresh_queue(self, key: tuple[str, int], cqueue: ConsumeQueue) -> None:
        if not os.path.isdir(cqueue.directory):  # the broker deleted the queue (topic removed)
            self._cqs.pop(key, None)
            ext = self._exts.pop(key, None)
            cqueue.close()
            if ext is not None:
                ext.close()
            return
        cqueue.refresh()
        ext = self._exts.get(key)
        if ext is not None:
            ext.refresh()
        elif key in self._exts:
            del self._exts[key]  # the ext directory may have appeared: look again on next use
        if self.commit_log.files and self.commit_log.min_offset > 0:
            cqueue.correct_min_offset(self.commit_log.min_offset)

    def replaced(self) -> str | None:
        """Why this Store's readers no longer read the store at its root, or None (docs/live.md#cached-readers).

        For a Store kept across reads (a stream's triggers, a Spark worker's
        tasks): the root directory must be the same directory, with the same
        entries (device, inode, change time), and every file a reader has
        mapped must still be the file its path names (device, inode, size).
        Appended data and files the broker expired are not changes: a
        refresh follows them. A replaced Store must be closed and opened again.

        Raises
        ------
        StoreFormatError
            The store directory is gone.
        """
        with self._open_lock:
            self._check_root()
            try:
                st = os.stat(self.root)
            except FileNotFoundError:  # deleted just now
                self._check_root()
                raise
            if _dir_identity(st) != self._root_identity:
                return (f"the store directory {self.root} changed since it was opened (entries added or removed "
                        f"at its top, or a new directory there)")
            readers = [self._commit_log, *self._cqs.values(), *self._exts.values()]
            for reader in readers:
                path = reader.replaced_file() if reader is not None else None
                if path is not None:
                    return f"store file {path} was replaced since it was mapped"
        return None

    def reopen(self) -> Store:
        """A new Store of the same root and options, with no reader open yet: what replaces this
        one when :meth:`replaced` says its readers no longer read the store."""
        opener, args = self.__reduce__()
        return opener(*args)

    def cut(self, topic: str | None = None, queue_ids: Iterable[int] | None = None, *,
            keep_readers: bool = False) -> StoreCut:
        """The cut a read starting now sees: queue ends first, then the CommitLog end (docs/live.md).

        Parameters
        ----------
        topic : str, optional
            Only this topic's queues (default: every topic).
        queue_ids : iterable of int, optional
            Only these queues of ``topic``.
        keep_readers : bool, default False
            Keep each queue's reader in the Store (its maps released after the
            cut, so no file stays open), so the next cut continues each queue's
            recovery from the end this one found instead of opening the queue
            again (docs/live.md#cached-readers). For a Store that takes a cut
            per trigger of a stream. By default a queue not already cached is
            opened for the cut and closed after it.

        Returns
        -------
        StoreCut
            With ``refresh="always"`` the store as it is now; with ``"never"``
            the Store's first view, each queue's end clipped to that view's
            CommitLog end (units written later lie outside it).
        """
        live = self.refresh_mode == "always"
        with self._open_lock:
            if live:
                self._check_root()
                if self._commit_log is not None:
                    self._commit_log.refresh_files()
            log = self.commit_log
            topics = [topic] if topic is not None else self.topics()
            ranges = []
            for t in topics:
                qids = list(queue_ids) if queue_ids is not None and topic is not None else self.queue_ids(t)
                for q in qids:
                    if not live and (t, int(q)) in self._frozen:
                        ranges.append((t, int(q), *self._frozen[t, int(q)], None))
                        continue
                    cached = (t, int(q)) in self._cqs
                    try:
                        if keep_readers and not cached:
                            self._open_consume_queue((t, int(q)))
                            self._kept.add((t, int(q)))
                        cqueue, ext = self._queue_readers(t, q)
                    except KeyError:
                        if queue_ids is not None:
                            raise
                        continue  # deleted since it was listed
                    try:
                        if live and cached and self._cqs.get((t, int(q))) is cqueue:
                            self._refresh_kept((t, int(q)), cqueue)
                        ranges.append((t, int(q), cqueue.min_offset, cqueue.max_offset, cqueue))
                    except BaseException:
                        self._release(t, q, cqueue, ext)
                        raise
                    if live or keep_readers:  # a kept reader keeps its ends and file list; its maps go
                        self._release(t, q, cqueue, ext, cached=keep_readers)
            end = log.refresh() if live else log.max_offset
            queues = []
            for t, q, lo, hi, cqueue in ranges:
                if not live and cqueue is not None:
                    # the first view of a queue in a Store that never refreshes: units whose
                    # records came after the view's CommitLog end lie outside it, for good
                    hi = _clip_to_log(cqueue, lo, hi, end)
                    self._release(t, q, cqueue, self._exts.get((t, q)))
                    self._frozen[t, q] = (lo, max(lo, hi))
                queues.append((t, q, lo, max(lo, hi)))
            return StoreCut(log.min_offset, end, tuple(queues))

    def follow(self, topic: str, queue_id: int, queue_end: int, commit_log_end: int) -> ConsumeQueue:
        """The cached reader of a queue, refreshed if it is behind a cut's ``queue_end`` or ``commit_log_end``.

        For readers that keep a Store across reads (Spark executors): whatever
        it has cached, it can then read any cut taken up to now. The CommitLog's
        and the queue's files are listed again when the cut needs newer ones or
        the broker expired the first one (docs/live.md#cached-readers).
        """
        with self._open_lock:
            self._check_root()
            log = self.commit_log
            if (not log.files or log.files[-1][0] + log.file_size < commit_log_end
                    or not os.path.exists(log.files[0][1])):  # new files, or the broker expired the first
                log.refresh_files()
            cqueue = self.consume_queue(topic, queue_id)
            files = cqueue.files
            if cqueue.max_offset < queue_end or (files and not os.path.exists(files[0][1])):
                self._refresh_queue((topic, int(queue_id)), cqueue)
            return cqueue

    def records_present(self, offsets: np.ndarray, sizes: np.ndarray, cut: StoreCut | None = None) -> np.ndarray:
        """Bool mask: the records are inside the cut's CommitLog range and still on disk.

        The CommitLog files the records lie in are mapped now: a file the broker
        expired since the cut was taken moves ``min_offset`` (its records are
        deleted, as for the broker), and a file mapped stays readable.
        """
        log = self.commit_log
        lo, hi = (cut.commit_log_min, cut.commit_log_end) if cut is not None else (log.min_offset, log.max_offset)
        offsets = np.asarray(offsets, dtype=np.int64)
        # a record below the first file listed now is gone, whatever the cut says: the broker expired
        # its file since the cut was taken, and the listing that dropped the file released its map
        present = (offsets >= max(lo, log.min_offset)) & (offsets + np.asarray(sizes, dtype=np.int64) <= hi)
        for _ in range(3):
            try:
                held = offsets[present]
                if len(held):
                    # every listed file from the first record's to the last's (files are contiguous):
                    # one that holds none of them costs a map and no read, and the broker expires
                    # files oldest first, so one gone means every record before it is gone too
                    starts = log.file_starts
                    first = max(0, int(np.searchsorted(starts, held.min(), side="right")) - 1)
                    for off in starts[first:int(np.searchsorted(starts, held.max(), side="right"))].tolist():
                        index = log.file_index(off)
                        if index is not None:
                            log.buffer(index)
                return present
            except StoreFileDeleted:
                log.refresh_files()
                present &= offsets >= log.min_offset
        return present

    # ------------------------------------------------------------ consume
    def make_filter(self, topic: str, group: str, *, sql: str | None = None, tags: str | None = None,
                    bloom_filter="default", born_time: int | None = None, bloom_data=None):
        """The filter :meth:`consume` uses: a :class:`SqlFilter` for ``sql``, a :class:`TagFilter` for
        ``tags``; neither: the group's registration in ``config/consumerFilter.json``
        (:meth:`registered_filter`: its expression, bornTime and bloom data, as the broker pulls
        with them), :class:`cq.UnknownGroupError` when there is none. A ``sql`` that is the
        group's registered expression, with no ``born_time`` or ``bloom_data`` given, is that
        registration's filter too (:meth:`registration_of`); another ``sql`` has bornTime
        ``born_time`` (default 0: every bitmap trusted)."""
        if sql is not None and tags is not None:
            raise ValueError("give sql or tags, not both")
        if bloom_filter == "default":
            bloom_filter = bloom.BloomFilter()
        if sql is None and tags is None:
            return self.registered_filter(topic, group, bloom_filter=bloom_filter).make_filter(bloom_filter)
        if sql is not None:
            if born_time is None and bloom_data is None:
                reg = self.registration_of(topic, group, sql)
                if reg is not None:
                    return reg.make_filter(bloom_filter)
            return SqlFilter(group, topic, sql, bloom_filter, born_time=born_time or 0,
                             bloom_data=bloom_data if bloom_filter is not None else None)
        return TagFilter(tags)

    def consume(self, topic: str, group: str, *, sql: str | None = None, tags: str | None = None,
                queue_ids: Iterable[int] | None = None, filter=None, bloom_filter="default",
                born_time: int | None = None, verify_crc: bool | str = False,
                progress: Callable[[int, int], None] | None = None,
                ranges: Mapping[int, tuple[int, int | None]] | None = None,
                message_filter=None, on_filter_error: str = "fail", cut: StoreCut | None = None) -> ConsumeResult:
        """The messages consumer group ``group`` would receive from ``topic``, in queue order.

        Parameters
        ----------
        topic, group : str
        sql : str, optional
            A SQL92 selector: the group is taken as registered with the broker's
            default Bloom filter, so layer 1 prunes on ext bitmaps.
        tags : str, optional
            A tag subscription such as ``"TagA || TagB"`` (``"*"``: everything).
            Neither sql nor tags: the group's SQL92 registration in
            ``config/consumerFilter.json`` (expression, bornTime, bloom data);
            :class:`cq.UnknownGroupError` (a ValueError) when it has none.
        queue_ids : iterable of int, optional
            Queues to read (default: all, ascending).
        filter : TagFilter, SqlFilter or callable, optional
            A ready-made broker filter instead of sql/tags; or a custom message filter (any
            other callable), the same as ``message_filter=``.
        bloom_filter : bloom.BloomFilter, "default" or None
            For sql: the broker's Bloom filter; None = no bloom data (layer 1 passes all).
        born_time : int, optional
            For sql: the filter's bornTime (ms). Default: the group's registered bornTime when
            ``sql`` is the expression it registered (the group's own answer), else 0.
        verify_crc : bool or {"body", "property"}
            Check the CRC of each delivered message (see :func:`cq.readers.commitlog.decode_message`).
        progress : callable(units_done, units_total), optional
            Called after each batch.
        ranges : mapping of queue id to (start, end), optional
            Read only queue offsets ``[start, end)`` of these queues (``end`` None: to the
            queue's end; clamped to the queue), e.g. from a group's committed offset.
        message_filter : callable, str or cq.filter.custom.MessageFilter, optional
            A custom filter run after both broker layers and the client re-check:
            ``fn(cq.Message) -> bool``, a :func:`cq.batch_filter` ``fn(pyarrow.RecordBatch) ->
            bool array``, or ``"package.module:function"`` (docs/custom-filters.md). With
            neither sql nor tags, the broker's layers are the group's registration if it has
            one, else ``"*"`` (the class-filter mode: they pass everything).
        on_filter_error : {"fail", "skip"}
            An exception in the custom filter raises :class:`cq.FilterError` naming the
            message and the filter (``fail``), or drops the message and counts it in
            ``stats.filter_skipped`` (``skip``).
        cut : StoreCut, optional
            Read this cut (from :meth:`cut`); by default one is taken now, when
            ``consume`` is called (refreshing first unless ``refresh="never"``).
            Queue offsets outside the cut are not read (docs/live.md).

        Returns
        -------
        ConsumeResult
            Iterator of :class:`cq.Message` (queue by queue, in queue-offset
            order) with ``.stats`` (:class:`ConsumeStats`).
        """
        if filter is not None and not hasattr(filter, "is_matched_by_consume_queue"):
            if message_filter is not None:
                raise ValueError("give the custom filter once: filter= (a callable) or message_filter=, not both")
            filter, message_filter = None, filter  # a callable, not a broker filter: the custom filter
        custom = as_message_filter(message_filter, on_filter_error)
        if on_filter_error not in ON_FILTER_ERROR:
            raise ValueError(f"on_filter_error must be fail or skip, got {on_filter_error!r}")
        if filter is not None:
            flt = filter
        elif custom is not None and sql is None and tags is None:
            try:  # the group's registration narrows as well, if it has one; else class-filter mode
                flt = self.make_filter(topic, group, bloom_filter=bloom_filter)
            except UnknownGroupError:
                flt = TagFilter("*")
        else:
            flt = self.make_filter(topic, group, sql=sql, tags=tags, bloom_filter=bloom_filter, born_time=born_time)
        qids = list(queue_ids) if queue_ids is not None else None
        if cut is None:
            cut = self.cut(topic, qids)
        if qids is None:
            qids = sorted(cut.ends(topic))

        def run(stats: ConsumeStats) -> Iterator[Iterator[Message]]:
            bounds = []
            for q in qids:
                r = cut.queue_range(topic, q)
                if r is None:
                    continue  # not in the cut: nothing of it is read
                lo, hi = r
                start, end = (ranges or {}).get(q, (None, None))
                lo = lo if start is None else max(lo, int(start))
                hi = hi if end is None else min(hi, int(end))
                if hi > lo:
                    bounds.append((q, (lo, hi)))
            total = sum(hi - lo for _, (lo, hi) in bounds)
            for q, b in bounds:
                yield from self._consume_queue(topic, q, flt, stats, verify_crc, progress, total, cut, b,
                                               custom)

        return ConsumeResult(run)

    def _queue_readers(self, topic: str, queue_id: int, with_ext: bool = True) -> tuple[ConsumeQueue,
                                                                                       ConsumeQueueExt | None]:
        """Readers of one queue for one pass, not cached: :meth:`consume` closes them when the
        queue is done, so a topic of thousands of queues holds one queue's maps (and file
        descriptors) at a time. Already-open cached readers are reused."""
        key = (topic, int(queue_id))
        if key in self._cqs:
            return self._cqs[key], self.ext(topic, queue_id) if with_ext else None
        cqueue = self._new_consume_queue(topic, queue_id)
        if isinstance(cqueue, BatchConsumeQueue):
            return cqueue, None  # a BatchCQ keeps no ext files
        if not with_ext or key in self._exts:
            return cqueue, self._exts[key] if with_ext else None
        d = os.path.join(self.root, fmt.CONSUME_QUEUE_EXT_DIR, topic, str(int(queue_id)))
        return cqueue, ConsumeQueueExt(d, file_size=self._ext_size) if os.path.isdir(d) else None

    @contextlib.contextmanager
    def queue_readers(self, topic: str, queue_id: int, *,
                      ext: bool = True) -> Iterator[tuple[ConsumeQueue, ConsumeQueueExt | None]]:
        """``(ConsumeQueue, ConsumeQueueExt or None)`` of one queue for one pass, closed after it
        (``ext=False``: the ConsumeQueue alone, its ext files not opened).

        What reads every queue of a topic in turn uses, so thousands of queues hold one queue's
        files (and descriptors) at a time (docs/limits.md); readers already cached by
        :meth:`consume_queue` / :meth:`ext` are used and stay open.
        """
        cqueue, ext_reader = self._queue_readers(topic, queue_id, ext)
        try:
            yield cqueue, ext_reader
        finally:
            self._release(topic, queue_id, cqueue, ext_reader)

    def _consume_queue(self, topic, queue_id, flt, stats, verify_crc, progress, total, cut, bounds,
                       custom=None):
        cqueue, ext = self._queue_readers(topic, queue_id)
        try:
            if cqueue.max_offset < bounds[1]:  # opened before the cut was taken (refresh="never" never is)
                cqueue.refresh()
                if ext is not None:
                    ext.refresh()
            if isinstance(cqueue, BatchConsumeQueue):
                yield from self._consume_batches(cqueue, flt, stats, verify_crc, progress, total, cut, bounds, custom)
            else:
                yield from self._consume_units(cqueue, ext, flt, stats, verify_crc, progress, total, cut, bounds,
                                               custom)
        finally:
            self._release(topic, queue_id, cqueue, ext)

    def _release(self, topic: str, queue_id: int, cqueue: ConsumeQueue | None, ext: ConsumeQueueExt | None,
                 *, cached: bool = False) -> None:
        """The one closing rule for a queue's readers after a read of it.

        A reader that is not the cached one (opened by :meth:`_queue_readers` for this pass) is
        closed. A cached reader has its maps released (closing a mapped-file queue keeps its
        ends and file list; it maps its files again on its next read) when it is kept across
        reads (``keep_readers``) or ``cached`` asks for it (:meth:`release_queue`); otherwise it
        stays open for the next caller.
        """
        key = (topic, int(queue_id))
        release_cached = cached or key in self._kept
        for reader, cache in ((cqueue, self._cqs), (ext, self._exts)):
            if reader is not None and (release_cached or cache.get(key) is not reader):
                reader.close()

    def release_queue(self, topic: str, queue_id: int) -> None:
        """Release the maps (and file descriptors) of a cached queue's readers after a read of it.

        The readers stay cached with their ends and file lists and map their files again on their
        next read: a long-lived Store reading thousands of queues in turn (a Spark worker's) so
        holds one queue's files at a time (docs/limits.md).
        """
        key = (topic, int(queue_id))
        with self._open_lock:
            self._release(topic, queue_id, self._cqs.get(key), self._exts.get(key), cached=True)

    def _layer2(self, layers: Layers, log, idx, offs, hits, stats, verify_crc, custom=None, units=None,
                ext=None, sizes=None):
        batch_custom = custom is not None and custom.batch
        cols, decoded = None, offs  # the records decoded once, and the offsets they were decoded at
        if not verify_crc and not batch_custom and (not layers.has_layer2 or 2 * int(hits[idx].sum()) >= len(idx)):
            # one decoder pass serves layer 2, the client's re-check and delivery: the records are
            # mostly Bloom hits (or no layer 2 runs), so most are delivered (docs/data-path.md#consume);
            # copied with a read each, not faulted into the map (a queue's records lie far apart)
            cols = log.decode_columns(offs) if sizes is None else log.decode_copied(offs, sizes)
        keep = None
        if layers.has_layer2:
            keep = layers.layer2_records(log, offs, cols)
            stats.bloom_false_positives += int((hits[idx] & ~keep).sum())
            idx, offs = idx[keep], offs[keep]
        stats.passed_commit_log += len(idx)
        if batch_custom:
            yield from self._deliver_batch_filtered(layers, log, idx, offs, stats, verify_crc, custom, units, ext)
            return
        # what is delivered goes out in chunks, each an iterator counting its messages as it hands
        # them out (a caller may stop early); ConsumeResult chains the chunks
        pending: list[Message] = []
        if verify_crc:  # record by record: the messages before a bad CRC are delivered before the error
            checked = self._client_checked(layers, (log.read_message(off, verify_crc=verify_crc) for off in offs.tolist()),
                                           stats)
            if custom is None:
                yield _objects.Delivered(checked, stats)
            else:
                pending = list(checked)
        elif cols is None:  # layer 2 read the records it kept: decode those
            kept = list(self._client_checked(layers, log.read_messages(offs), stats))
            if custom is None:
                yield _objects.Delivered(kept, stats)
            else:
                pending = kept
        else:  # decoded before layer 2: messages of the rows both checks keep
            rows = np.flatnonzero(keep) if keep is not None else np.arange(len(decoded))
            client = layers.client_columns(cols, rows)
            stats.client_filtered += int((~client).sum())
            if custom is None:  # each message built as it is handed out: one alive at a time
                yield _objects.Delivered.built(Message, cols.columns, *log.message_args(decoded, rows[client]), stats)
            else:
                pending = log.messages_from_columns(cols, decoded, rows[client])
        if pending:
            yield _objects.Delivered(self._custom_kept(custom, pending, stats), stats)

    @staticmethod
    def _custom_kept(custom, msgs: list[Message], stats: ConsumeStats) -> list[Message]:
        """The messages of ``msgs`` the custom filter keeps, counting those it skips and rejects: it
        narrows what both layers and the client's re-check delivered (docs/custom-filters.md)."""
        keep, skipped = custom.apply(msgs)
        stats.filter_skipped += int(skipped.sum())
        stats.filter_rejected += int((~keep & ~skipped).sum())
        return [msg for msg, ok in zip(msgs, keep.tolist()) if ok]

    @staticmethod
    def _client_checked(layers: Layers, msgs: Iterable[Message], stats: ConsumeStats) -> Iterator[Message]:
        """The messages of ``msgs`` the client's tag re-check keeps, counting the others."""
        for msg in msgs:
            if layers.filter.is_matched_by_client(msg.tags):
                yield msg
            else:
                stats.client_filtered += 1

    @staticmethod
    def _deliver_batch_filtered(layers: Layers, log, idx, offs, stats, verify_crc, custom, units, ext):
        """The client re-check and a batch custom filter over the decoder's columns of the records at
        ``offs`` (units ``idx``), then the messages it keeps, decoded as :class:`Message` (only those).

        The filter's batch is the one the data source builds (:func:`cq.filter.custom.records_record_batch`),
        no Python object per row; the batch is the slice, as for the per-message path's messages.
        """
        checked = None
        if verify_crc:  # a bad CRC fails before any filter runs, as on the per-message path
            checked = [log.read_message(off, verify_crc=verify_crc) for off in offs.tolist()]
        records = log.decode_columns(offs, BATCH_RECORD_FIELDS)
        client = layers.client_columns(records)
        stats.client_filtered += int((~client).sum())
        rows = np.flatnonzero(client)
        if not len(rows):
            return
        slots = units["tags_code"][idx].astype(np.int64)
        has_ext = ext is not None and bool((slots <= fmt.MAX_ADDR).any())
        batch = records_record_batch(records, slots, ext.read_batch(slots) if has_ext else None)
        if len(rows) < len(records):
            batch = batch.take(rows)

        def where(row: int) -> tuple[str, int, int]:
            return (records.value("topic", row), records.value("queue_id", row), records.value("queue_offset", row))

        # the custom filter narrows what both layers delivered (docs/custom-filters.md)
        keep, skipped = custom.apply_record_batch(batch, where(int(rows[0])), where(int(rows[-1])))
        stats.filter_skipped += int(skipped.sum())
        stats.filter_rejected += int((~keep & ~skipped).sum())
        kept = rows[keep]
        msgs = [checked[i] for i in kept.tolist()] if checked is not None else log.read_messages(offs[kept])
        yield _objects.Delivered(msgs, stats)

    def _consume_batches(self, cqueue: BatchConsumeQueue, flt, stats, verify_crc, progress, total, cut, bounds,
                         custom=None):
        """One queue of a BatchCQ topic (docs/reading.md#batchcq): the broker's two layers judge each
        unit by its batch record (its tags code, its own properties), then the client unwraps the
        record into its messages and re-checks each one's tag. Every batch holding a message of queue
        offsets ``bounds`` is read whole, as the broker serves a pull at an offset inside a batch; the
        counts are of messages, each message counted as its batch's unit was judged."""
        log = self.commit_log
        layers = Layers(flt)
        found = self._batch_decisions(cqueue, layers, cut, bounds)
        found.count(stats)
        offs = found.units["commit_log_offset"][found.commit_log].astype(np.int64)
        unwrapped = (msg for off in offs.tolist() for msg in expand_batch(log.read_message(off, verify_crc=verify_crc)))
        msgs = list(self._client_checked(layers, unwrapped, stats))
        if custom is not None and msgs:
            msgs = self._custom_kept(custom, msgs, stats)
        yield _objects.Delivered(msgs, stats)
        if progress is not None:
            progress(stats.units_scanned, total)

    def _batch_decisions(self, cqueue: BatchConsumeQueue, layers: Layers, cut, bounds, *, layer2: bool = True,
                         skip: bool = False) -> BatchDecisions:
        """The broker's two layers over the units holding a message of queue offsets ``bounds`` of a
        BatchCQ queue (the one home of both :meth:`consume` and the data source's reads of such a
        queue): layer 1 by the unit's tags code, layer 2 by the batch record's own properties, records
        no longer in the CommitLog or outside ``cut`` not reached. ``skip``: a record layer 2 cannot
        decode is marked skipped (its error kept) instead of raising."""
        log = self.commit_log
        if not log.files or log.files[-1][0] + log.file_size < cut.commit_log_end:
            log.refresh_files()
        units = cqueue.units_between(*bounds)
        passed, _ = layers.layer1(units["tags_code"].astype(np.int64))
        offs = units["commit_log_offset"].astype(np.int64)
        present = self.records_present(offs, units["size"].astype(np.int64), cut)
        found = BatchDecisions(units, passed, present)
        rows = np.flatnonzero(found.reached)
        if not layer2:
            return found
        found.commit_log = found.reached.copy()
        if layers.has_layer2 and len(rows):
            ok, good, errors = decode_skipping(lambda o: layers.layer2_records(log, o), offs[rows], skip)
            bad = rows[~good]
            found.skipped[bad] = True
            found.errors += list(zip(bad.tolist(), errors))
            found.commit_log[bad] = False
            found.commit_log[rows[good]] = ok
        return found

    def batch_decisions(self, topic: str, queue_id: int, flt, start: int, end: int, *,
                        cut: StoreCut | None = None, layer2: bool = True, skip: bool = False) -> BatchDecisions:
        """The broker's decisions over the units of BatchCQ queue ``queue_id`` holding a message of
        queue offsets ``[start, end)`` inside ``cut`` (default: one taken now), as :meth:`consume`
        makes them (docs/reading.md#batchcq): a :class:`BatchDecisions`, per unit, whose records the
        caller unwraps, applying the client's re-check to each message. ``layer2=False``: layer 1
        only (``commit_log`` None); ``skip``: a record layer 2 cannot decode is marked ``skipped``
        (with its error) instead of raising."""
        if cut is None:
            cut = self.cut(topic, [queue_id])
        r = cut.queue_range(topic, queue_id)
        lo, hi = (0, 0) if r is None else (max(r[0], int(start)), min(r[1], int(end)))
        with self.queue_readers(topic, queue_id, ext=False) as (cqueue, _):
            if not isinstance(cqueue, BatchConsumeQueue):
                raise TypeError(f"topic {topic!r} queue {queue_id} is not a BatchCQ queue")
            if hi <= lo:
                empty = cqueue.units[:0]
                return BatchDecisions(empty, np.zeros(0, bool), np.zeros(0, bool),
                                      np.zeros(0, bool) if layer2 else None)
            if cqueue.max_offset < hi:
                cqueue.refresh()
            return self._batch_decisions(cqueue, Layers(flt), cut, (lo, hi), layer2=layer2, skip=skip)

    def _raw_chunks(self, cqueue: ConsumeQueue, start: int, end: int) -> Iterator[tuple[int, memoryview]]:
        """``cqueue.raw_chunks`` over ``[start, end)``; a file the broker expired meanwhile moves the
        start past it (its units are below the queue's new minimum, as for the broker)."""
        q = start
        while q < end:
            try:
                for first, raw in cqueue.raw_chunks(q, end - q):
                    q = first + len(raw) // fmt.CQ_STORE_UNIT_SIZE
                    yield first, raw
                return
            except StoreFileDeleted:
                cqueue.refresh()
                if self.commit_log.files and self.commit_log.min_offset > 0:
                    cqueue.correct_min_offset(self.commit_log.min_offset)
                if cqueue.min_offset <= q:  # pragma: no cover - the file is gone, so the minimum moved
                    raise
                q = cqueue.min_offset

    def _consume_units(self, cqueue, ext, flt, stats, verify_crc, progress, total, cut, bounds,
                       custom=None):
        log = self.commit_log
        if not log.files or log.files[-1][0] + log.file_size < cut.commit_log_end:
            log.refresh_files()
        layers = Layers(flt)
        expected = bounds[0]  # the next queue offset of the cut: one the chunks pass over went away
        for first, raw in self._raw_chunks(cqueue, *bounds):
            if first > expected:  # below the queue's minimum now: the broker expired them (docs/live.md)
                stats.units_scanned += first - expected
                stats.commit_log_missing += first - expected
            expected = first + len(raw) // fmt.CQ_STORE_UNIT_SIZE
            for b in range(0, len(raw) // fmt.CQ_STORE_UNIT_SIZE, CONSUME_BATCH):
                chunk = raw[b * fmt.CQ_STORE_UNIT_SIZE:(b + CONSUME_BATCH) * fmt.CQ_STORE_UNIT_SIZE]
                units = np.frombuffer(chunk, dtype=fmt.CQ_UNIT_DTYPE)
                stats.units_scanned += len(units)
                passed, hits = layers.layer1(units["tags_code"], ext=ext, raw=chunk, stats=stats)
                idx = np.flatnonzero(passed).astype(np.int64)
                stats.passed_consume_queue += len(idx)
                offs = units["commit_log_offset"][idx].astype(np.int64)
                sizes = units["size"][idx].astype(np.int64)
                present = self.records_present(offs, sizes, cut)
                stats.commit_log_missing += int((~present).sum())
                idx, offs = idx[present], offs[present]
                # layer 2 in slices of nearby records, dropping the CommitLog pages read after
                # each (they stay in the page cache): RSS follows one slice, not the whole log
                kept_sizes = sizes[present]
                ends = offs + kept_sizes
                for a, b in _slices(offs, _SLICE_SPAN, _SLICE_RECORDS):
                    yield from self._layer2(layers, log, idx[a:b], offs[a:b], hits, stats, verify_crc,
                                            custom, units, ext, kept_sizes[a:b])
                    log.drop_resident_range(int(offs[a:b].min()), int(ends[a:b].max()))
                if progress is not None:
                    progress(stats.units_scanned, total)
        if expected < bounds[1]:  # the queue's minimum moved past the rest of the cut's range
            stats.units_scanned += bounds[1] - expected
            stats.commit_log_missing += bounds[1] - expected

