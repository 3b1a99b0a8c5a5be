"""The Store's reading of a store in object storage (docs/object-storage.md#costs): queue objects copied or read
by ranges when a read first asks for them, fetched many queues at once, and the dispatch frontier a cold
recovery walk of its CommitLog starts from. A mixin of :class:`cq.store.readers.ReaderRoom`; nothing here runs
for a local store."""
from __future__ import annotations

import functools
import os
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from .. import format as fmt
from ..readers import consumequeue
from ..readers import ext as ext_reader
from ..readers.consumequeue import ConsumeQueue
from ..readers.objectqueue import RangedConsumeQueue
from . import undispatched

#: Queues whose objects one step of :meth:`BucketRoom._prefetch_queues` fetches at once (their requests
#: :data:`cq.readers.objects.FETCH_THREADS` at a time): a topic of thousands of queues is copied in steps.
_PREFETCH_QUEUES = 64


class BucketRoom:
    """Reading a store in a bucket: what :class:`cq.store.readers.ReaderRoom` asks of its source."""

    def _dispatch_frontier(self) -> tuple[int, int] | None:
        """For a store in a bucket: the unit whose record ends furthest among every consume queue's last
        unit (:func:`cq.store.undispatched.dispatch_frontier`), where its CommitLog's cold recovery walk
        starts (:meth:`cq.readers.objectlog.RangedLog.walk_start`). A file queue's last unit comes from its
        private copy where a read fetched the queue, else from the head of its last ConsumeQueue object
        (:meth:`cq.ObjectStore.queue_tails`, every queue's at once); a RocksDB consume queue's from its
        database, copied when the Store opened. BatchCQ and compaction topics are left out: the frontier of
        the others lies at or before theirs, and a walk from there passes it (docs/object-storage.md#costs)."""
        last: list[tuple[int, int] | None] = []
        with self._open_lock:
            if self.layout.consume_queues == "rocksdb":
                table = self._rocksdb_table()
                return undispatched.dispatch_frontier(table.last_unit(t, q) for t, q in table.queues)
            if self.layout.consume_queues != "files":
                return None
            for rel in self._tail_queues():
                if rel not in self._fetched_queues:
                    continue
                queue = ConsumeQueue(os.path.join(self.root, *rel), file_size=self._cq_size, topic=rel[1],
                                     queue_id=int(rel[2]))
                try:
                    last.append(undispatched.queue_last_unit(queue))
                finally:
                    queue.close()
            for head in self._queue_tails().values():
                last.append(undispatched.last_unit(head))
        return undispatched.dispatch_frontier(last)

    def _tail_queues(self) -> list[tuple[str, str, str]]:
        """For a store in a bucket: the queue directories ``(consumequeue, topic, queue id)`` whose last units
        make the dispatch frontier (every file consume queue but BatchCQ and compaction topics')."""
        skip = {*self.layout.batch_cq_topics, *self.layout.compaction_topics}
        return [(fmt.CONSUME_QUEUE_DIR, topic, q) for topic in self.source.subdirs(fmt.CONSUME_QUEUE_DIR)
                if topic not in skip for q in self.source.subdirs(f"{fmt.CONSUME_QUEUE_DIR}/{topic}") if q.isdigit()]

    def _queue_tails(self, exclude=frozenset()) -> dict[str, bytes]:
        """The heads holding the last unit of each frontier queue (:meth:`_tail_queues`) that no read copied
        and that is not in ``exclude``: fetched once for the Store's life (:meth:`cq.ObjectStore.queue_tails`,
        every queue's at once), then kept."""
        want = ["/".join(rel) for rel in self._tail_queues() if rel not in self._fetched_queues and rel not in exclude]
        missing = [rel for rel in want if rel not in self._tails]
        if missing:
            self._tails.update(self.source.queue_tails(missing, consumequeue.data_ends_within, guess=self._guess()))
        return {rel: self._tails[rel] for rel in want if rel in self._tails}

    def _guess(self):
        """``head -> bytes``: the guess of where a queue file's data ends from its head and the end of the
        CommitLog's last listed object (:func:`cq.readers.consumequeue.data_bytes_guess`), for a fetch to ask
        for at once rather than by doubling its head."""
        dirs = [fmt.COMMIT_LOG_DIR] + ([f"{self.source.dledger}/{fmt.DLEDGER_DATA_DIR}"] if self.source.dledger else [])
        ends = [start + self.source.size_of(key) for d in dirs for start, key in self.source.list_dir_files(d)[-1:]]
        return functools.partial(consumequeue.data_bytes_guess, log_end=max(ends, default=0))

    def _queue_copy(self, rel: tuple[str, ...], kind: str, enough, first_head=None, memory: bool = False) -> str:
        """The directory ``rel`` under the root. For a store in a bucket, its objects are fetched into
        the private copy the first time a read asks for the queue, once for the Store's life (the listing
        is its snapshot): whole, but the last file by the head that holds the end of the queue's data
        (``enough``, ``first_head``: :meth:`cq.ObjectStore.fetch_files`, docs/object-storage.md#costs)."""
        source = getattr(self, "source", None)
        if source is not None:
            with self._open_lock:
                if rel not in self._fetched_queues:
                    source.fetch_files("/".join(rel), None if memory else self.root, kind=kind, enough=enough,
                                       first_head=first_head, guess=self._guess() if kind == "ConsumeQueue" else None)
                    self._fetched_queues.add(rel)
        return os.path.join(self.root, *rel)

    def take_queue_bounds(self, topic: str, queue_id: int, min_offset: int, max_offset: int,
                          last_slot: int | None = None) -> None:
        """For a store in a bucket: read the queue by ranges (:class:`cq.readers.objectqueue.RangedConsumeQueue`)
        within ``[min_offset, max_offset)``, the queue's bounds as a plan of the same listing found them (a
        Spark task's, docs/object-storage.md#spark), instead of fetching its objects whole to find them: a read
        of a few of its units fetches those. ``last_slot``: the ``tags_code`` slot of its last unit as the plan
        read it, where a read that consults the queue's ext starts fetching its last ext object (an ext
        address holds the end of its data). Taken before the queue is first read (a queue already read keeps
        its reader); nothing for a local store."""
        if getattr(self, "source", None) is None or not 0 <= int(min_offset) <= int(max_offset):
            return
        with self._open_lock:
            self._queue_bounds[topic, int(queue_id)] = (int(min_offset), int(max_offset))
            if last_slot is not None:
                self._last_slots[topic, int(queue_id)] = int(last_slot)

    def _ranged_queue(self, topic: str, queue_id: int) -> RangedConsumeQueue | None:
        """The queue's reader by ranges where its bounds were taken (:meth:`take_queue_bounds`) and no read
        copied its objects; else None."""
        bounds = self._queue_bounds.get((topic, int(queue_id)))
        rel = (fmt.CONSUME_QUEUE_DIR, topic, str(int(queue_id)))
        if bounds is None or rel in self._fetched_queues or self.layout.consume_queues != "files":
            return None
        return RangedConsumeQueue(self.source, "/".join(rel), bounds, file_size=self._cq_size, topic=topic,
                                  queue_id=int(queue_id))

    def prefetch(self, topic: str, queue_ids=None, *, ext: bool = False, windows=None) -> None:
        """For a store in a bucket, fetch at once what a read of ``topic``'s queues ``queue_ids`` (default:
        all) asks first: their ConsumeQueue objects (with ``ext``, then the ext objects their units
        address), then the other queues' last units and the heads the CommitLog's recovery walk reads from
        the dispatch frontier (every read's cut), rather than one after the other as the read reaches each
        (docs/object-storage.md#costs). ``consume`` and the data source's planning call it; nothing for a
        local store or a topic the store does not hold. ``windows`` (``{queue id: [(start, end), ...]}``) names
        the queue offsets the read takes of a queue read by ranges (:meth:`take_queue_bounds`): those units
        are fetched, not its objects.

        Raises
        ------
        cq.ObjectStoreError
            A request failed (naming the object's URI and byte range).
        """
        if getattr(self, "source", None) is None or topic not in self.topics():
            return
        qids = self.queue_ids(topic) if queue_ids is None else list(queue_ids)
        log = self.commit_log
        # the queues, and meanwhile the other queues' last units the frontier reads (the read's own come from
        # their copies, not again), then the walk's heads from the frontier
        with ThreadPoolExecutor(1) as background:
            others = None
            if log.frontier is not None and not log.end_known and self.layout.consume_queues == "files":
                others = background.submit(self._queue_tails, {(fmt.CONSUME_QUEUE_DIR, topic, str(int(q))) for q in qids})
            self._prefetch_queues([(topic, q) for q in qids], ext=ext, windows=windows)
            if others is not None:
                others.result()
        log.prefetch_recovery()

    def _prefetch_queues(self, keys, *, ext: bool = False, windows=None) -> None:
        """For a store in a bucket: fetch the ConsumeQueue objects (with ``ext``, then the ext objects of
        those whose ConsumeQueue addresses ext units) of the queues ``keys`` (``(topic, queue id)``) a read
        is about to read that are not copied yet, each queue's objects as :meth:`_queue_copy` fetches them,
        many queues' at once (:meth:`cq.ObjectStore.fetch_queues`, docs/object-storage.md#costs); of a queue read
        by ranges, the units of its ``windows`` (:meth:`prefetch`). Nothing for a local store, nor for queues that
        are not file consume queues (BatchCQ, compaction, RocksDB)."""
        source = getattr(self, "source", None)
        if source is None or self.layout.consume_queues != "files":
            return
        skip = {*self.layout.batch_cq_topics, *self.layout.compaction_topics}
        keys = [(t, int(q)) for t, q in keys if t not in skip]
        windows = windows or {}
        with self._open_lock:
            for n in range(0, len(keys), _PREFETCH_QUEUES):
                group = keys[n:n + _PREFETCH_QUEUES]
                ranged = {(t, q): self.consume_queue(t, q) for t, q in group if q in windows}
                ranged = {k: v for k, v in ranged.items() if isinstance(v, RangedConsumeQueue)}
                guess = self._guess()
                self._fetch_copies([((fmt.CONSUME_QUEUE_DIR, t, str(q)), "ConsumeQueue", consumequeue.data_ends_within,
                                     None, guess) for t, q in group if (t, q) not in ranged])
                self.source.hold([span for (t, q), queue in ranged.items() for s, e in windows[q]
                                  for span in queue.spans(s, e)])
                if ext:  # after the ConsumeQueues: an ext's first head comes from its ConsumeQueue's units
                    heads = {(t, q): self._ext_first_head(t, q, windows.get(q) if (t, q) in ranged else None)
                             for t, q in group if (fmt.CONSUME_QUEUE_EXT_DIR, t, str(q)) not in self._fetched_queues}
                    heads = {k: v for k, v in heads.items() if v is not None}
                    self._fetch_copies([((fmt.CONSUME_QUEUE_EXT_DIR, t, str(q)), "ConsumeQueueExt",
                                         ext_reader.data_ends_within, functools.partial(int, head))
                                        for (t, q), head in heads.items()], memory=True)

    def _fetch_copies(self, specs: list[tuple], memory: bool = False) -> None:
        """Fetch the queue directories ``specs`` (``(rel, kind, enough, first_head[, guess])``, as
        :meth:`cq.ObjectStore.fetch_queues` takes them) not copied yet, at once (with ``memory``, into memory: the
        ext's objects, which nothing reads by path)."""
        specs = [spec for spec in specs if spec[0] not in self._fetched_queues]
        if specs:
            self.source.fetch_queues([("/".join(rel), *rest) for rel, *rest in specs], None if memory else self.root)
            self._fetched_queues.update(rel for rel, *_ in specs)

    def _ext_first_head(self, topic: str, queue_id: int, window=None) -> int | None:
        """For a store in a bucket, the first head of the queue's last ext object to fetch: the bytes that
        hold the unit its ConsumeQueue addresses last (:func:`cq.readers.ext.head_holding`): from its copy, or,
        for a queue read by ranges, its last unit's slot as the plan gave it (:meth:`take_queue_bounds`) and the
        units of its ``window`` (``[(start, end), ...]``, held) a read takes; None when the ConsumeQueue is
        neither copied nor given, or addresses no ext unit in that object."""
        rel = (fmt.CONSUME_QUEUE_DIR, topic, str(int(queue_id)))
        files = self.source.list_dir_files(f"{fmt.CONSUME_QUEUE_EXT_DIR}/{topic}/{int(queue_id)}")
        queue_files = self.source.list_dir_files("/".join(rel))
        if not files or not queue_files:
            return None
        if rel in self._fetched_queues:
            key = queue_files[-1][1]
            copied = self.source.copied(key)  # the head holding the queue's data: the rest is a hole
            slots = np.fromfile(os.path.join(self.root, *key.split("/")), dtype=fmt.CQ_UNIT_DTYPE,
                                count=(self.source.size_of(key) if copied is None else copied)
                                // fmt.CQ_STORE_UNIT_SIZE)["tags_code"]
        else:
            last = self._last_slots.get((topic, int(queue_id)))
            parts = [np.array([last], dtype=np.int64)] if last is not None else []
            if window:
                queue = self.consume_queue(topic, queue_id)
                parts += [queue.read_columns(s, e - s)["tags_code"] for s, e in window]
            if not parts:
                return None
            slots = np.concatenate(parts)
        start, key = files[-1]
        return ext_reader.head_holding(slots, start, self.source.size_of(key))

