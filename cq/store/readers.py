"""The Store's live reader cache (docs/live.md#cached-readers): the CommitLog and each queue's readers,
opened once under a lock, followed as the broker writes, expires and replaces files, and released
after each pass so thousands of queues hold one queue's files at a time (docs/limits.md)."""
from __future__ import annotations

import contextlib
import functools
import os
import threading
import time
import warnings
import weakref
from collections.abc import Iterator
from typing import TYPE_CHECKING, Self

import numpy as np

from .. import format as fmt
from ..errors import CompactionWarning, StoreFormatError
from ..readers import consumequeue
from ..readers import ext as ext_reader
from ..readers.batchcq import BatchConsumeQueue
from ..readers.commitlog import SEALED_AGE_NS, CommitLog
from ..readers.compaction import CompactionConsumeQueue, CompactionLog, compaction_queue_dirs
from ..readers.consumequeue import ConsumeQueue
from ..readers.dledger import DLedgerCommitLog
from ..readers.ext import ConsumeQueueExt
from ..readers.objectlog import ObjectCommitLog, ObjectDLedgerCommitLog
from ..readers.objects import CopiedDir, ObjectDir
from ..readers.rocksdb import RocksDBConsumeQueue, RocksDBQueueTable, database_stamp
from . import undispatched
from .bucket import BucketRoom
from .decide import records_present

if TYPE_CHECKING:
    from .cuts import StoreCut


def _dir_identity(st: os.stat_result) -> tuple[int, int, int]:
    # a directory's change time moves when entries are added or removed in it: a store
    # deleted and written again at the same path differs here even if its inode is reused
    return st.st_dev, st.st_ino, st.st_ctime_ns


def _weak_call(method):
    """A callable that calls the bound ``method`` while its object lives (None after)."""
    ref = weakref.WeakMethod(method)

    def call():
        target = ref()
        return None if target is None else target()
    return call


def _dir_stamp(path: str) -> tuple | None:
    """A directory's identity and mtime (None if missing): entries made or removed in it change it."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_dev, st.st_ino, st.st_mtime_ns


class ReaderRoom(BucketRoom):
    """The :class:`cq.Store` methods that open, cache, follow and release its readers."""

    def _init_readers(self, commit_log_file_size: int | None, consume_queue_file_size: int | None,
                      ext_file_size: int | None) -> None:
        self._cl_size = commit_log_file_size
        self._cq_size = consume_queue_file_size
        self._ext_size = ext_file_size
        self._commit_log: CommitLog | None = None
        self._cqs: dict[tuple[str, int], ConsumeQueue] = {}
        self._exts: dict[tuple[str, int], ConsumeQueueExt | None] = {}
        # queues whose readers cut(keep_readers=True) keeps: their maps are released after each pass
        self._kept: set[tuple[str, int]] = set()
        # kept queues found quiet at their last refresh: what their refresh depended on (_queue_state)
        self._quiet: dict[tuple[str, int], tuple] = {}
        self._root_identity = _dir_identity(os.stat(self.root))  # what replaced() compares
        # a crashed store: the units its broker's recovery would add, found on first use
        self._undispatched: dict[tuple[str, int], tuple[int, bytes]] | None = None
        # readers are opened lazily; the lock makes threads sharing a Store open each one once
        self._open_lock = threading.RLock()
        # a store in a bucket: the queues whose ConsumeQueue objects its private copy holds
        self._fetched_queues: set[tuple[str, ...]] = set()
        # a store in a bucket: the heads of queues' last ConsumeQueue objects fetched for the dispatch frontier
        # (relpath -> bytes), kept for the Store's life: its listing is its snapshot
        self._tails: dict[str, bytes] = {}
        self._queue_bounds: dict[tuple[str, int], tuple[int, int]] = {}  # a plan's bounds (take_queue_bounds)
        self._last_slots: dict[tuple[str, int], int] = {}  # and its queues' last units' tags_code slots
        # the RocksDB consume queue database open (its queue list read once), with the stamp of the files
        # it was opened on
        self._rocks_table: tuple[tuple, RocksDBQueueTable] | None = None
        # topics() from the queue directories, with the directories' stamps it was listed at
        self._listed_topics: tuple[tuple, list[str]] | None = None

    @property
    def commit_log(self) -> CommitLog:
        """The store's :class:`CommitLog`."""
        if self._commit_log is None:
            with self._open_lock:
                if self._commit_log is None:
                    self._commit_log = self._open_commit_log()
        return self._commit_log

    def release_records(self) -> None:
        """For a store in a bucket, give back the memory of the CommitLog records fetched so far
        (:meth:`cq.readers.objectlog.RangedLog.release_held`): what a read calls when it is done with its
        records (``consume`` when it ends, a Spark task), so a Store kept for further reads holds none of
        them (docs/object-storage.md#costs). Nothing for a local store, whose pages are the page cache's,
        nor before the log is opened."""
        release = getattr(self._commit_log, "release_held", None)
        if release is not None:
            release()

    def _open_commit_log(self) -> CommitLog:
        layout = self.layout
        layout.check_commit_log()
        source = getattr(self, "source", None)
        if source is not None:  # stays in the bucket, read by ranges (docs/object-storage.md#costs)
            classic = ObjectDir(source, fmt.COMMIT_LOG_DIR)
            if source.dledger is None:
                log = ObjectCommitLog(classic, file_size=self._cl_size)
            else:
                log = ObjectDLedgerCommitLog(ObjectDir(source, f"{source.dledger}/{fmt.DLEDGER_DATA_DIR}"),
                                             classic_directory=classic if classic.list_files() else None,
                                             file_size=self._cl_size)
            if source.recovery == "frontier":
                # its cold walk starts at the dispatch frontier (docs/object-storage.md#costs); a weak
                # reference: the log never keeps its Store (and the Store's private copy) alive
                log.frontier = _weak_call(self._dispatch_frontier)
            return log
        if layout.dledger_dir is not None:
            return DLedgerCommitLog(layout.dledger_dir, classic_directory=layout.commit_log_dir,
                                    file_size=self._cl_size)
        return CommitLog(layout.commit_log_dir, file_size=self._cl_size)

    def _rocksdb_queues(self) -> list[tuple[str, int]] | None:
        """The queues of a RocksDB consume queue, read now (one cut); None for queue files. The open
        database's list, kept with it while its files are unchanged (:meth:`_rocksdb_table`)."""
        if self.layout.consume_queues != "rocksdb":
            return None
        with self._open_lock:
            return self._rocksdb_table().queues

    def _rocksdb_table(self) -> RocksDBQueueTable:
        """The RocksDB consume queue database, open; call with ``_open_lock`` held. Opening it costs
        milliseconds (a directory of links, the database's own open) and every queue reader reads its
        units from it, so it stays open while its files are those it was opened on
        (:func:`~cq.readers.rocksdb.database_stamp`: RocksDB never rewrites a file in place) and is
        opened again once the broker has written, flushed or compacted since; closed with the Store
        (docs/live.md#cached-readers)."""
        path = os.path.join(self.root, fmt.CONSUME_QUEUE_DIR)
        stamp = database_stamp(path)  # before the open: a write during it makes the next call open again
        kept = self._rocks_table
        if kept is not None and stamp and kept[0] == stamp:
            return kept[1]
        self._rocks_table = None
        if kept is not None:
            kept[1].close()
        table = RocksDBQueueTable(path)
        self._rocks_table = (stamp, table)
        return table

    def topics(self) -> list[str]:
        """Topics that have a ConsumeQueue directory (LMQ queues, ``%LMQ%...``, included) or a
        BatchConsumeQueue directory (BatchCQ topics), sorted."""
        d = os.path.join(self.root, fmt.CONSUME_QUEUE_DIR)
        batch = os.path.join(self.root, fmt.BATCH_CONSUME_QUEUE_DIR)
        rocks = self._rocksdb_queues()
        # queue files: a topic's directory made or removed changes its parent's mtime, so the same stamps
        # give the same list
        stamp = None if rocks is not None else (_dir_stamp(d), _dir_stamp(batch), tuple(sorted(self.layout.batch_cq_topics)))
        kept = self._listed_topics
        if stamp is not None and kept is not None and kept[0] == stamp:
            return list(kept[1])
        listed = {t for t in self.layout.batch_cq_topics if os.path.isdir(os.path.join(batch, t))}
        if rocks is not None:
            return sorted(listed.union(topic for topic, _ in rocks))
        if os.path.isdir(d):
            listed.update(t for t in os.listdir(d) if os.path.isdir(os.path.join(d, t)))
        self._listed_topics = (stamp, sorted(listed))
        return list(self._listed_topics[1])

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
        dirs = [d]
        if topic in self.layout.compaction_topics:  # its queues may have compaction files alone
            dirs.append(os.path.dirname(compaction_queue_dirs(self.root, topic, 0)[1]))
        found = {int(q) for top in dirs if os.path.isdir(top)
                 for q in os.listdir(top) if q.isdigit() and os.path.isdir(os.path.join(top, q))}
        if not any(os.path.isdir(top) for top in dirs):
            raise KeyError(f"topic {topic!r} has no consume queues in {self.root}")
        return sorted(found)

    def compaction_log(self, topic: str, queue_id: int) -> CompactionLog:
        """The :class:`cq.CompactionLog` of a compaction topic's queue, opened now (the caller closes it):
        what the broker reads that queue's messages from (docs/formats.md#compaction-store).

        Raises :class:`StoreFormatError` naming the first file of the compaction log or the compaction CQ
        that has no file of the same name in the other, as the broker's load refuses such a queue.
        """
        log_dir, cq_dir = compaction_queue_dirs(self.root, topic, queue_id)
        log = CompactionLog(log_dir)
        names = {start for start, _ in fmt.list_queue_files(cq_dir)}
        for start, path in log.files:
            if start not in names:
                log.close()
                raise StoreFormatError("compaction log file has no compaction CQ file of the same name", path, 0)
        held = {start for start, _ in log.files}
        for start, path in fmt.list_queue_files(cq_dir):
            if start not in held and os.path.getsize(path):
                log.close()
                raise StoreFormatError("compaction CQ file has no compaction log file of the same name", path, 0)
        return log

    @contextlib.contextmanager
    def dispatched_queue(self, topic: str, queue_id: int) -> Iterator[ConsumeQueue]:
        """The ConsumeQueue of a compaction topic's queue, opened for one pass: every message the broker
        dispatched, before compaction (the broker serves the compaction CQ instead; what ``why`` and
        ``inspect`` compare it with, docs/reading.md#compaction-topics). KeyError when it has none."""
        d = os.path.join(self.root, fmt.CONSUME_QUEUE_DIR, topic, str(int(queue_id)))
        if not os.path.isdir(d):
            raise KeyError(f"no consume queue {topic}/{queue_id} in {self.root}")
        cqueue = ConsumeQueue(self._consume_queue_dir(topic, queue_id), file_size=self._cq_size, topic=topic,
                              queue_id=int(queue_id))
        try:
            if self.commit_log.files and self.commit_log.min_offset > 0:
                cqueue.correct_min_offset(self.commit_log.min_offset)
            yield cqueue
        finally:
            cqueue.close()

    def _compaction_queue(self, topic: str, queue_id: int) -> CompactionConsumeQueue:
        """The compaction CQ of a compaction topic's queue; an error when the queue holds messages in its
        ConsumeQueue but has no compaction CQ (the broker would serve them from one; a broker with
        ``enableCompaction=false`` is not supported: docs/reading.md#compaction-topics)."""
        cq_dir = compaction_queue_dirs(self.root, topic, queue_id)[1]
        if not os.path.isdir(cq_dir):
            classic = os.path.join(self.root, fmt.CONSUME_QUEUE_DIR, topic, str(int(queue_id)))
            if not os.path.isdir(classic):
                raise KeyError(f"no consume queue {topic}/{queue_id} in {self.root}")
            units = ConsumeQueue(self._consume_queue_dir(topic, queue_id), file_size=self._cq_size, topic=topic,
                                 queue_id=int(queue_id))
            try:
                held = units.max_offset > units.min_offset
            finally:
                units.close()
            if held:
                raise StoreFormatError(
                    f"compaction topic {topic!r} queue {queue_id} holds messages in its ConsumeQueue but has no "
                    "compaction CQ: the broker serves a compaction topic from its compaction store "
                    "(a broker with enableCompaction=false is not supported)", cq_dir)
        self._check_compaction_round(topic, queue_id)
        return CompactionConsumeQueue(cq_dir, topic=topic, queue_id=int(queue_id))

    def _check_compaction_round(self, topic: str, queue_id: int) -> None:
        """A round writing beside a queue's compaction files (docs/formats.md#compaction-rounds): before it swaps
        its output in, the broker serves the queue's own files, which are read (a :class:`cq.CompactionWarning`
        says so); a swap under way (a file renamed ``.delete``, or the log's output moved and the CQ's not) is a
        :class:`StoreFormatError` naming the file or directory, never a mix of two rounds."""
        log_dir, cq_dir = compaction_queue_dirs(self.root, topic, queue_id)
        for d in (log_dir, cq_dir):
            gone = sorted(n for n in (os.listdir(d) if os.path.isdir(d) else ()) if n.endswith(fmt.DELETED_FILE_SUFFIX))
            if gone:
                raise StoreFormatError(
                    f"compaction topic {topic!r} queue {queue_id}: a compaction round (or a slave's copy of its "
                    "master's compaction log) was swapping its files in when the store was read (a file it "
                    "replaces is renamed before removal): read the store again once it is done",
                    os.path.join(d, gone[0]))
        for sub, what in ((fmt.COMPACTING_SUB_DIR, "a compaction round is writing its output"),
                          (fmt.REPLICATING_SUB_DIR, "this slave is copying its master's compaction log")):
            names = [sorted(os.listdir(p)) if os.path.isdir(p) else [] for p in
                     (os.path.join(log_dir, sub), os.path.join(cq_dir, sub))]
            if names[0] != names[1]:
                raise StoreFormatError(
                    f"compaction topic {topic!r} queue {queue_id}: {what} in {sub}/, and its compaction log files "
                    f"{names[0]} and CQ files {names[1]} there differ: the output was being swapped in when the "
                    "store was read; read the store again once it is done", os.path.join(log_dir, sub))
            if names[0]:
                warnings.warn(CompactionWarning(
                    f"compaction topic {topic!r} queue {queue_id}: {what} in {os.path.join(log_dir, sub)} "
                    f"({len(names[0])} file(s)); until it swaps them in, the broker serves the queue's own files, "
                    "which are what is read"), stacklevel=2)

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

    def _consume_queue_dir(self, topic: str, queue_id: int) -> str:
        """The directory a queue's :class:`ConsumeQueue` opens, under the root (:meth:`_queue_copy`)."""
        return self._queue_copy((fmt.CONSUME_QUEUE_DIR, topic, str(int(queue_id))), "ConsumeQueue",
                                consumequeue.data_ends_within)

    def _new_consume_queue(self, topic: str, queue_id: int) -> ConsumeQueue:
        """A new reader of one queue, as the broker sees the queue (every reader comes from here)."""
        if topic in self.layout.compaction_topics:  # docs/reading.md#compaction-topics
            return self._compaction_queue(topic, queue_id)
        if topic in self.layout.batch_cq_topics:  # docs/formats.md#batch-consume-queue
            rel = (fmt.BATCH_CONSUME_QUEUE_DIR, topic, str(int(queue_id)))
            if not os.path.isdir(os.path.join(self.root, *rel)):
                raise KeyError(f"no BatchCQ queue {topic}/{queue_id} in {self.root}")
            # a store in a bucket: the queue's objects whole, when a read first asks for it
            cq = BatchConsumeQueue(self._queue_copy(rel, "BatchConsumeQueue", None), topic=topic, queue_id=int(queue_id))
        elif self.layout.consume_queues == "rocksdb":
            d = os.path.join(self.root, fmt.CONSUME_QUEUE_DIR)
            with self._open_lock:
                table = self._rocksdb_table()
                if (topic, int(queue_id)) not in table.ends_of(topic):
                    raise KeyError(f"no consume queue {topic}/{queue_id} in {self.root}")
                cq = RocksDBConsumeQueue(d, topic, int(queue_id), table)
        else:
            d = os.path.join(self.root, fmt.CONSUME_QUEUE_DIR, topic, str(int(queue_id)))
            if not os.path.isdir(d):
                raise KeyError(f"no consume queue {topic}/{queue_id} in {self.root}")
            ranged = self._ranged_queue(topic, queue_id)  # a store in a bucket, its bounds a plan's
            if ranged is not None:
                return ranged
            cq = ConsumeQueue(self._consume_queue_dir(topic, queue_id), file_size=self._cq_size, topic=topic,
                              queue_id=int(queue_id))
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
                                                                     cq_file_size=self._cq_size,
                                                                     queue_dir=self._consume_queue_dir)
        return self._undispatched

    def ext(self, topic: str, queue_id: int) -> ConsumeQueueExt | None:
        """The :class:`ConsumeQueueExt` of (topic, queue_id), or None if the store has none."""
        key = (topic, int(queue_id))
        if key not in self._exts:
            with self._open_lock:
                if key not in self._exts:
                    self._exts[key] = self._new_ext(topic, queue_id)
        return self._exts[key]

    def _new_ext(self, topic: str, queue_id: int) -> ConsumeQueueExt | None:
        """A new :class:`ConsumeQueueExt` of the queue, None where the store has no ext files for it. A
        store in a bucket fetches the queue's ext objects into memory when a read first asks for them,
        the last by the head that holds the end of its data (:meth:`_queue_copy`)."""
        rel = (fmt.CONSUME_QUEUE_EXT_DIR, topic, str(int(queue_id)))
        d = os.path.join(self.root, *rel)
        if not os.path.isdir(d):
            return None
        if getattr(self, "source", None) is not None:  # fetched when a read first maps one of its files
            copy = functools.partial(self._queue_copy, rel, "ConsumeQueueExt", ext_reader.data_ends_within,
                                     functools.partial(self._ext_first_head, topic, int(queue_id)), True)
            return ConsumeQueueExt(CopiedDir(self.source, "/".join(rel), copy, in_memory=True),
                                   file_size=self._ext_size)
        return ConsumeQueueExt(d, file_size=self._ext_size)

    def _queue_readers(self, topic: str, queue_id: int, with_ext: bool = True) -> tuple[ConsumeQueue,
                                                                                       ConsumeQueueExt | None]:
        """Readers of one queue for one pass, not cached: :meth:`consume` closes them when the
        queue is done, so a topic of thousands of queues holds one queue's maps (and file
        descriptors) at a time. Already-open cached readers are reused."""
        key = (topic, int(queue_id))
        if key in self._cqs:
            return self._cqs[key], self.ext(topic, queue_id) if with_ext else None
        cqueue = self._new_consume_queue(topic, queue_id)
        if isinstance(cqueue, (BatchConsumeQueue, CompactionConsumeQueue)):
            return cqueue, None  # a BatchCQ keeps no ext files, nor does a compaction CQ
        if not with_ext or key in self._exts:
            return cqueue, self._exts[key] if with_ext else None
        return cqueue, self._new_ext(topic, queue_id)

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

    def close(self) -> None:
        """Release every mapped file (and the RocksDB consume queue database, when open), and for a store in a
        bucket the objects it read into memory."""
        kept, self._rocks_table = self._rocks_table, None
        if kept is not None:
            kept[1].close()
        for cq in self._cqs.values():
            cq.close()
        for ext in self._exts.values():
            if ext is not None:
                ext.close()
        if self._commit_log is not None:
            self._commit_log.close()
        source = getattr(self, "source", None)
        if source is not None:  # the objects it read into memory (the exts', the queues read by ranges)
            source.release_ranged()

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
            self.refresh_tier()
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
        if isinstance(cqueue, RocksDBConsumeQueue):
            with self._open_lock:  # the database the Store keeps open while its files are unchanged
                cqueue.refresh(self._rocksdb_table())
        else:
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

    def reopen(self) -> Self:
        """A new Store of the same root and options, with no reader open yet: what replaces this
        one when :meth:`replaced` says its readers no longer read the store."""
        opener, args = self.__reduce__()
        return opener(*args)

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
        """Bool mask: the records are inside the cut's CommitLog range and still on disk
        (:func:`cq.store.decide.records_present`, the one presence test).

        The CommitLog files the records lie in are mapped now: a file the broker
        expired since the cut was taken moves ``min_offset`` (its records are
        deleted, as for the broker), and a file mapped stays readable.
        """
        return records_present(self.commit_log, offsets, sizes, cut)
