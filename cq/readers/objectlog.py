"""The CommitLog of a store in object storage, read by ranges (docs/object-storage.md#costs).

:class:`RangedLog` is what a CommitLog whose files are objects of an
:class:`~cq.readers.objects.ObjectStore` reads through: mixed in before :class:`CommitLog`
(:class:`ObjectCommitLog`) or :class:`DLedgerCommitLog` (:class:`ObjectDLedgerCommitLog`), it holds the
byte ranges fetched so far of each object and fetches the coalesced ranges a read needs
(:func:`~cq.readers.objects.coalesce`, docs/object-storage.md#coalescing); the store's end comes from the
dispatch frontier (:meth:`RangedLog.walk_start`). The byte source, its listing and its request counts are
:mod:`cq.readers.objects`.
"""
from __future__ import annotations

import bisect
import contextlib
import functools
import mmap
import sys
import threading

import numpy as np

from .. import format as fmt
from ..kernels import _record
from .columns import MessageColumns
from .commitlog import CommitLog, Message
from .dledger import DLedgerCommitLog
from .objects import PRIVATE_MAP, RECORD_PROBE, RECORD_PROBE_MIN, coalesce, merge_spans

__all__ = ["ObjectCommitLog", "ObjectDLedgerCommitLog", "RangedLog"]

#: Linux's ``MADV_POPULATE_WRITE`` (5.14 and later; Python's mmap module does not name it): a buffer's pages
#: made ready for a fetch in one call, not one fault per page as the fetch writes them.
_POPULATE_WRITE = 23 if sys.platform.startswith("linux") else None


def _populate(buf: mmap.mmap, lo: int, hi: int) -> None:
    """Make the pages of ``buf[lo:hi]`` ready to be written (:data:`_POPULATE_WRITE`) where the system can;
    elsewhere (another system, an older kernel) the fetch's writes fault them in, as before."""
    if _POPULATE_WRITE is None:
        return
    start = lo - lo % mmap.PAGESIZE
    with contextlib.suppress(OSError, ValueError):
        buf.madvise(_POPULATE_WRITE, start, hi - start)


#: The most bytes of given-back CommitLog buffers (:meth:`RangedLog.release_held`) a process keeps, their
#: pages zeroed, for the next buffers of their size: a fetch into them writes pages already there, where one
#: into fresh memory makes each page first (docs/object-storage.md#costs); past this, a buffer's memory is
#: given back to the system.
KEPT_BUFFER_BYTES = 256 << 20


class _BufferPool:
    """Buffers of CommitLog objects given back by reads, their fetched bytes zeroed, kept for reuse by size
    (at most :data:`KEPT_BUFFER_BYTES` of pages they may hold)."""

    def __init__(self) -> None:
        self._free: dict[int, list[tuple[mmap.mmap, int]]] = {}  # size -> (buffer, bytes its pages may hold)
        self._bytes = 0
        self._lock = threading.Lock()
        self._paged: dict[int, int] = {}  # id of a buffer taken from here -> bytes its pages may hold

    def take(self, size: int) -> mmap.mmap | None:
        """A kept buffer of ``size`` bytes (all zeros), or None."""
        with self._lock:
            free = self._free.get(size)
            if not free:
                return None
            buf, paged = free.pop()
            self._bytes -= paged
            self._paged[id(buf)] = paged
            return buf

    def give(self, buf: mmap.mmap, spans) -> bool:
        """Keep ``buf`` (its bytes ``spans`` zeroed) if it fits :data:`KEPT_BUFFER_BYTES`; False: not kept."""
        if not hasattr(buf, "madvise"):
            return False
        with self._lock:
            paged = min(len(buf), self._paged.pop(id(buf), 0) + sum(hi - lo for lo, hi in spans))
            if self._bytes + paged > KEPT_BUFFER_BYTES:
                return False
            self._bytes += paged
        zeros = np.frombuffer(buf, dtype=np.uint8)
        for lo, hi in spans:
            zeros[lo:hi] = 0
        del zeros
        with self._lock:
            self._free.setdefault(len(buf), []).append((buf, paged))
        return True

    @property
    def kept_bytes(self) -> int:
        """Bytes the kept buffers' pages may hold."""
        with self._lock:
            return self._bytes


_POOL = _BufferPool()


def _indices_in(idx: np.ndarray) -> list[int]:
    """The distinct object indices (>= 0) among ``idx``, ascending: a count, not a sort of the records."""
    idx = idx[idx >= 0]
    return np.flatnonzero(np.bincount(idx)).tolist() if len(idx) else []


class RangedLog:
    """What a CommitLog whose files are objects of an :class:`ObjectStore` reads through
    (docs/object-storage.md#costs): mixed in before :class:`CommitLog` (:class:`ObjectCommitLog`) or
    :class:`DLedgerCommitLog` (:class:`ObjectDLedgerCommitLog`).

    Its records are decoded by the log's own code, over one buffer per object (an anonymous map of the
    object's size, pages taken only where bytes are written) that holds the byte ranges fetched so far.
    Reads by offset (:meth:`read_message`, :meth:`decode_columns`, :meth:`gather_properties`,
    :meth:`pickup_store_timestamp`, :meth:`hold_records`, :meth:`decode_copied`) fetch the coalesced
    ranges of the records they need that are not held yet (:func:`coalesce`,
    docs/object-storage.md#coalescing), never one request per record; the recovery walk of a classic
    object fetches it by heads up to the end of its data; other walks (a DLedger object's entries, a
    scan of the log) fetch the objects they walk whole. The listing is the read's cut, so held bytes
    stay valid until :meth:`close`.
    """

    def __init__(self, directory, **kwargs) -> None:
        super().__init__(directory, **kwargs)
        #: () -> the dispatch frontier's unit ``(commit_log_offset, size)`` or None: where a cold recovery walk
        #: of a classic log starts, rather than at its third-to-last object (:meth:`walk_start`); set by the
        #: Store that reads the log (:func:`cq.store.undispatched.dispatch_frontier`). None: the broker's walk.
        self.frontier = None
        self._bufs: dict[int, mmap.mmap] = {}  # file index -> its buffer
        self._held: dict[int, list[tuple[int, int]]] = {}  # file index -> held [lo, hi), ascending, disjoint
        self._fetch_lock = threading.RLock()
        self._local = threading.local()  # a read by offset in progress in this thread

    # ------------------------------------------------------------ buffers and held ranges
    def _buffer_of(self, index: int) -> mmap.mmap:
        buf = self._bufs.get(index)
        if buf is None:
            with self._fetch_lock:
                buf = self._bufs.get(index)
                if buf is None:
                    size = max(self._source.size_of(self._files[index][1]), 1)
                    # private: its pages may be huge pages, where shared anonymous memory's are not (a
                    # fetch writes them a quarter faster); zeros until written, as the object's holes; one
                    # a read gave back, its pages kept (zeros again), where the process holds one
                    buf = self._bufs[index] = _POOL.take(size) or mmap.mmap(-1, size, **PRIVATE_MAP)
        return buf

    def _object_size(self, index: int) -> int:
        return self._source.size_of(self._files[index][1])

    def _object_sizes(self) -> np.ndarray:
        """Each listed object's size, from the listing (the cut), as an int64 array."""
        files = self._files
        cached = getattr(self, "_sizes_of", None)
        if cached is None or cached[0] is not files:
            cached = self._sizes_of = (files, np.array([self._source.size_of(k) for _, k in files], dtype=np.int64))
        return cached[1]

    def _fill(self, index: int, lo: int, hi: int) -> None:
        """Fetch bytes ``[lo, hi)`` of object ``index`` (one request) into its buffer; hold them."""
        self._fill_many([(index, lo, hi)])

    def _fill_many(self, spans: list[tuple[int, int, int]]) -> None:
        """Fetch each ``(index, lo, hi)`` (bytes ``[lo, hi)`` of object ``index``, one request each,
        concurrently: :meth:`ObjectStore.read_ranges_into`) straight into the objects' buffers; hold
        them once every request has ended (a failed request holds none)."""
        spans = [(i, lo, hi) for i, lo, hi in spans if hi > lo]
        if not spans:
            return
        requests = []
        for i, lo, hi in spans:
            buf = self._buffer_of(i)
            requests.append((self._files[i][1], lo, hi, memoryview(buf)[lo:hi], self._kind,
                             functools.partial(_populate, buf, lo, hi)))
        self._source.read_ranges_into(requests)
        added: dict[int, list[tuple[int, int]]] = {}
        for index, lo, hi in spans:
            added.setdefault(index, []).append((lo, hi))
        for index, new in added.items():  # each object's held ranges merged once
            self._held[index] = merge_spans([*self._held.get(index, []), *new])

    def _is_held(self, index: int, pos: np.ndarray, end: np.ndarray) -> np.ndarray:
        """Which records ``[pos, end)`` of object ``index`` its held ranges cover."""
        spans = self._held.get(index)
        if not spans:
            return np.zeros(len(pos), dtype=bool)
        los = np.array([a for a, _ in spans], dtype=np.int64)
        his = np.array([b for _, b in spans], dtype=np.int64)
        at = np.searchsorted(los, pos, side="right") - 1
        return (at >= 0) & (end <= his[np.maximum(at, 0)])

    def _fetch_ranges(self, offs: np.ndarray, ends: np.ndarray) -> None:
        """Fetch the coalesced ranges of the records ``[offs, ends)`` (log offsets) not held yet."""
        idx = self.file_indices(offs)
        want = np.zeros(len(offs), dtype=bool)
        for index in _indices_in(idx):
            sel = idx == index
            start = int(self._starts[index])
            want[sel] = ~self._is_held(index, offs[sel] - start, ends[sel] - start)
        if not want.any():
            return
        ranges = coalesce(offs[want], ends[want] - offs[want], self._starts, self._object_sizes(),
                          gap=self._source.coalesce_gap, budget=self._source.batch_bytes)
        self._fill_many([(index, lo - int(self._starts[index]), min(hi - int(self._starts[index]),
                                                                     self._object_size(index)))
                         for lo, hi, index in ranges.tolist()])

    def _need(self, offsets, sizes=None) -> None:
        """Hold every byte the records at ``offsets`` span (docs/object-storage.md#coalescing).

        With ``sizes`` (the units'), their coalesced ranges are fetched; without, each record's first
        :data:`RECORD_PROBE` bytes, then the rest of those longer than that, by their TOTALSIZE. A
        record whose head is not a message's, whose size runs past its object, or that is shorter than
        a record's head, gets its whole object: the local decoder's error then reads the same bytes.
        Offsets outside the log are left to the local reader's error."""
        offs = np.asarray(offsets, dtype=np.int64).reshape(-1)
        if not len(offs) or not self._files:
            return
        idx = self.file_indices(offs)
        inside = idx >= 0
        offs, idx = offs[inside], idx[inside]
        if not len(offs):
            return
        file_end = self._starts[idx] + self._object_sizes()[idx]
        with self._fetch_lock:
            if sizes is not None:
                first = np.asarray(sizes, dtype=np.int64).reshape(-1)[inside]
                first = np.maximum(first, RECORD_PROBE_MIN)
            else:  # a record whose head is held already is fetched by its own TOTALSIZE, not probed
                first = np.full(len(offs), RECORD_PROBE, dtype=np.int64)
                for index in _indices_in(idx):
                    sel = np.flatnonzero(idx == index)
                    pos = offs[sel] - self._starts[index]
                    end = file_end[sel] - self._starts[index]
                    known = (pos + 8 <= end) & self._is_held(index, pos, pos + 8)
                    if known.any():
                        total, ok = self._record_heads(index, pos[known], end[known])
                        first[sel[known][ok]] = total[ok]
            self._fetch_ranges(offs, np.minimum(offs + first, file_end))
            # each record's own TOTALSIZE and MAGICCODE, from the bytes held now
            whole: set[int] = set()
            totals = np.zeros(len(offs), dtype=np.int64)
            for index in _indices_in(idx):
                sel = np.flatnonzero(idx == index)
                pos = offs[sel] - self._starts[index]
                end = file_end[sel] - self._starts[index]
                short = pos + 8 > end
                if short.any():
                    whole.add(index)
                total, ok = self._record_heads(index, pos[~short], end[~short])
                if not ok.all():
                    whole.add(index)
                totals[sel[~short]] = np.where(ok, total, 0)
            rest = totals > 0
            if rest.any():
                self._fetch_ranges(offs[rest], offs[rest] + totals[rest])
            for index in sorted(whole):
                self._hold_whole(index)

    def _record_heads(self, index: int, pos: np.ndarray, end: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The TOTALSIZE of the records at positions ``pos`` of object ``index`` (their first 8 bytes held),
        and whether each is a message's record of at least a record's fixed head that ends by ``end``
        (docs/formats.md#commitlog)."""
        return _record.record_totals(np.frombuffer(self._buffer_of(index), dtype=np.uint8),
                                     np.ascontiguousarray(pos, dtype=np.int64), np.ascontiguousarray(end, dtype=np.int64),
                                     RECORD_PROBE_MIN)

    def _hold_whole(self, index: int) -> None:
        with self._fetch_lock:
            size = self._object_size(index)
            if self._held.get(index) != [(0, size)]:
                self._fill(index, 0, size)

    @contextlib.contextmanager
    def _by_offset(self, offsets, sizes=None):
        """A read by offset: fetch what the records need, and let this thread's reads of the
        buffers within take them as they are (not whole)."""
        self._need(offsets, sizes)
        with self._as_held():
            yield

    @contextlib.contextmanager
    def _as_held(self):
        """This thread's reads of the buffers within (:meth:`_map`) take them as they are held, not fetched
        whole first: a read that fetched what it reads (:meth:`_by_offset`, a walk by heads)."""
        depth = getattr(self._local, "depth", 0)
        self._local.depth = depth + 1
        try:
            yield
        finally:
            self._local.depth = depth

    # ------------------------------------------------------------ the CommitLog's buffer access
    def _map(self, index: int) -> memoryview:
        """The buffer of object ``index``: inside a read by offset as held, else fetched whole first
        (a walk reads every byte)."""
        if not getattr(self._local, "depth", 0):
            self._hold_whole(index)
        return memoryview(self._buffer_of(index))

    def _u8(self, index: int) -> np.ndarray:
        return np.frombuffer(self._map(index), np.uint8)

    def drop_resident(self, index: int | None = None) -> None:
        """Nothing: the buffers hold fetched bytes, not pages of a file to fault in again."""

    def drop_resident_range(self, lo: int, hi: int) -> None:
        """Nothing, as :meth:`drop_resident`."""

    # ------------------------------------------------------------ the recovery walk: by growing heads
    def _sealed_identity(self, index: int) -> tuple | None:
        """The object's identity from the listing (:meth:`ObjectStore.identity_of`), for the sealed-file
        rule: an object walked valid to its blank end record is not walked again by a later Store of this
        process while it is listed with the same size and modification time (docs/live.md#sealed-files)."""
        identity = self._source.identity_of(self._files[index][1])
        return None if identity is None else (*identity, self.check_crc_on_recover)

    def _before_walk(self, indices: list[int], pos: int) -> None:
        """Fetch the first head of each object the recovery walk is about to walk (the first from ``pos``)
        concurrently, as :meth:`_walk_file` would one after the other: the same requests, at once. A walk
        that ends before the last of them (a record not valid) has fetched the heads after it for nothing."""
        if len(indices) > 1:
            self._fetch_walk_heads(indices, pos)

    def take_end(self, end: int) -> None:
        """Take ``end`` as the CommitLog's recovered end, with no walk: the end another process's walk
        found over the same listing (a Spark plan's cut, which its tasks read with the plan's listing,
        docs/object-storage.md#spark). Nothing when the end is known already; ``ValueError`` for an end
        outside the listed objects."""
        if self._max_offset is not None:
            return
        first = int(self._starts[0]) if self._files else 0
        last = int(self._starts[-1]) + self._object_size(len(self._files) - 1) if self._files else 0
        if not first <= int(end) <= last:
            raise ValueError(f"CommitLog end {end} outside the listed objects [{first}, {last}] of {self.directory}")
        self._max_offset = int(end)

    @property
    def end_known(self) -> bool:
        """Whether the log's end is known (found by a walk, or given, :meth:`take_end`): no recovery walk left."""
        return self._max_offset is not None

    def prefetch_recovery(self) -> None:
        """Fetch at once the heads a cold recovery walk (the CommitLog's end, every read's cut) will read:
        from :meth:`walk_start`, those of the objects it walks but the sealed ones, as the walk fetches them
        (nothing when the end is known already). What :meth:`cq.Store.prefetch` runs after a read's queues."""
        if self._max_offset is not None or not self._files:
            return
        first, pos = self.walk_start()
        self._fetch_walk_heads(self._walk_order(first, pos)[1], pos)

    def _recover(self, first: int | None = None, pos: int = 0) -> int:
        # a cold walk starts at the dispatch frontier where it lies in the broker's walk (walk_start)
        if first is None and self._files:
            first, pos = self.walk_start()
        return super()._recover(first, pos)

    def walk_start(self) -> tuple[int, int]:
        """Where a cold recovery walk of this log starts: ``(object index, position in it)``.

        The broker walks from its third-to-last file (:meth:`CommitLog.max_offset`). In a snapshot, every
        record before the dispatch frontier (the end of the record a ConsumeQueue unit points at furthest,
        :attr:`frontier`) was written and dispatched before the copy was taken, so the walk from the
        third-to-last object passes them all and goes on from the frontier as a walk from there does: the
        walk starts there, at the record past the frontier's: the frontier's record and the
        :data:`RECORD_PROBE` bytes after it fetched first, then ``batch_bytes`` more each time the walk needs
        more (docs/object-storage.md#costs). Only when the frontier's own record is what its unit says (its
        TOTALSIZE the unit's size, a valid record, its body CRC matching where the walk checks it; in a
        DLedger object, the entry holding it too, :meth:`_find_entry_start`); else, or with no frontier, or
        one before the third-to-last object, the broker's own walk."""
        found = getattr(self, "_walk_start_at", None)
        if found is None or found[0] is not self._files:  # once per listing (the snapshot read)
            found = self._walk_start_at = (self._files, self._find_walk_start())
        return found[1]

    def _find_walk_start(self) -> tuple[int, int]:
        default = (max(0, len(self._files) - 3), 0)
        unit = self.frontier() if self.frontier is not None else None
        if unit is None:
            return default
        phys, size = unit
        index = bisect.bisect_right(self._start_list, phys) - 1
        if index < default[0] or size < RECORD_PROBE_MIN:
            return default
        start = int(self._starts[index])
        pos, object_size = phys - start, self._object_size(index)
        if pos + size > object_size:
            return default
        is_dledger = getattr(self, "_is_dledger", None)
        if is_dledger is not None and is_dledger(index):
            return self._find_entry_start(index, pos, size, default)
        # the frontier's record and RECORD_PROBE bytes after it: usually nothing follows it in a snapshot,
        # and the walk fetches batch_bytes more each time it reaches the end of what is held
        with self._fetch_lock:
            self._hold_span(index, pos, min(object_size, pos + size + RECORD_PROBE))
        buf = np.frombuffer(self._buffer_of(index), np.uint8)
        p, _, records = _record.commit_log_walk(buf[:pos + size], pos)
        if p != pos + size or records != 1 or (
                self.check_crc_on_recover and _record.body_crc_mismatch(buf, pos, pos + size) >= 0):
            return default
        return index, pos + size

    def _find_entry_start(self, index: int, pos: int, size: int, default: tuple[int, int]) -> tuple[int, int]:
        """:meth:`_find_walk_start` where the frontier's record (``size`` bytes at ``pos``) lies in a DLedger
        object: the entry holding it (its 48-byte header just before the record) and :data:`RECORD_PROBE`
        bytes after it fetched, the entry checked as the walk checks entries (a NORMAL entry whose body is
        that one record, its CRC matching where the walk checks it); the walk then starts at the entry's end
        (docs/object-storage.md#costs), else at ``default``, the broker's walk."""
        entry = pos - fmt.DLEDGER_BODY_OFFSET
        if entry < 0:
            return default
        with self._fetch_lock:
            self._hold_span(index, entry, min(self._object_size(index), pos + size + RECORD_PROBE))
        with self._as_held():
            records, p, _status, _reason, _last = self._scan(index, entry, pos + size,
                                                             check_crc=self.check_crc_on_recover, max_records=1)
        if len(records) != 1 or int(records[0]) != pos or p != pos + size:
            return default
        return index, pos + size

    def _held_end(self, index: int, pos: int) -> int:
        """The end of the bytes of object ``index`` held from ``pos`` on without a gap (``pos``: none)."""
        for a, b in self._held.get(index) or []:
            if a <= pos <= b:
                return b
        return pos

    def _hold_span(self, index: int, lo: int, hi: int) -> None:
        """Hold bytes ``[lo, hi)`` of object ``index``: the part not held from ``lo`` on, one request. Call
        with ``_fetch_lock`` held."""
        have = self._held_end(index, lo)
        if have < hi:
            self._fill(index, have, hi)

    def _fetch_walk_heads(self, indices: list[int], pos: int) -> None:
        """The first head of each object ``indices`` a walk reads (the first from ``pos``), at once."""
        spans = []
        with self._fetch_lock:
            for n, index in enumerate(indices):
                size = self._object_size(index)
                start = pos if n == 0 else 0
                have = self._held_end(index, start)
                if have < start + 8:
                    spans.append((index, have, min(size, start + self._source.batch_bytes)))
            self._fill_many(spans)

    def _walk_file(self, index: int, check_crc: bool, pos: int = 0) -> tuple[int, int, int]:
        """:meth:`CommitLog._walk_file` over the object's bytes from ``pos``, fetched ``batch_bytes`` (the
        budget of a request) past ``pos`` first and as many again each time the walk runs out of fetched
        bytes, so the walk to the end of the data (the broker's recovery, docs/object-storage.md#costs)
        never fetches the preallocated rest of the last object, nor the bytes before ``pos`` (a walk from
        the dispatch frontier, :meth:`walk_start`). The walk stops where it stops over the whole object: it
        goes on while the record it stopped at is not wholly fetched."""
        is_dledger = getattr(self, "_is_dledger", None)
        entries = is_dledger is not None and is_dledger(index)  # a DLedger object's entries, not records
        size = self._object_size(index)
        step = self._source.batch_bytes
        have = self._held_end(index, pos)
        want = have if have >= pos + 8 else min(size, pos + step)  # a walk again from its end: no request
        start = pos
        records = 0
        while True:
            with self._fetch_lock:
                self._hold_span(index, start, want)
            buf = np.frombuffer(self._buffer_of(index), np.uint8)[:want]
            if entries:  # the entry walk over the bytes held, not the object fetched whole first
                with self._as_held():
                    found, p, status, _reason, _last = self._scan(index, pos, want, check_crc=check_crc)
                r = len(found)
            else:
                p, status, r = self._walk_buffer(index, buf, check_crc, pos)
            records += r
            if want >= size or status == 1 or not self._cut_short(buf, p, entries):
                return p, status, records
            pos, want = p, min(size, want + step)

    @staticmethod
    def _cut_short(buf: np.ndarray, p: int, entries: bool = False) -> bool:
        """Whether a walk over the head ``buf`` stopped at ``p`` only because the head ends: fewer than a
        record head's bytes left, or a record whose magic code is a message's or the blank's and whose
        TOTALSIZE runs past the head; with ``entries`` (a DLedger object), an entry (or a blank) whose magic is
        an entry's and whose size runs past the head (docs/formats.md#dledger-entry: magic, then size)."""
        n = len(buf)
        if p + 8 > n:
            return True
        if entries:
            magic, total = fmt.RECORD_HEAD_STRUCT.unpack_from(buf, p)
            magics = (*fmt.DLEDGER_ENTRY_MAGICS, fmt.DLEDGER_BLANK_MAGIC_CODE)  # a blank inside the object too
        else:
            total, magic = fmt.RECORD_HEAD_STRUCT.unpack_from(buf, p)
            magics = (fmt.MESSAGE_MAGIC_CODE_V1, fmt.MESSAGE_MAGIC_CODE_V2, fmt.BLANK_MAGIC_CODE)
        return magic in magics and total > 0 and p + total > n

    # ------------------------------------------------------------ reads by offset: ranges only
    def hold_records(self, offsets: np.ndarray, sizes: np.ndarray) -> None:
        """Fetch the coalesced ranges of the records ``(offsets, sizes)`` not held yet: layer 2 then
        reads them from the buffers (docs/object-storage.md#coalescing)."""
        self._need(offsets, sizes)

    def read_message(self, physical_offset: int, *, verify_crc: bool | str = False) -> Message:
        """:meth:`CommitLog.read_message`, the record's bytes fetched by range."""
        with self._by_offset([physical_offset]):
            return super().read_message(physical_offset, verify_crc=verify_crc)

    def pickup_store_timestamp(self, physical_offset: int) -> int:
        """:meth:`CommitLog.pickup_store_timestamp`, the record's bytes fetched by range."""
        with self._by_offset([physical_offset]):
            return super().pickup_store_timestamp(physical_offset)

    def decode_columns(self, physical_offsets, fields=None, *, decompress_body: bool = False) -> MessageColumns:
        """:meth:`CommitLog.decode_columns`, the records' bytes fetched by coalesced ranges."""
        with self._by_offset(physical_offsets):
            return super().decode_columns(physical_offsets, fields, decompress_body=decompress_body)

    def gather_properties(self, physical_offsets, *, absent_as_none: bool = False) -> list[dict | None]:
        """:meth:`CommitLog.gather_properties`, the records' bytes fetched by coalesced ranges."""
        with self._by_offset(physical_offsets):
            return super().gather_properties(physical_offsets, absent_as_none=absent_as_none)

    def decode_copied(self, physical_offsets, sizes) -> MessageColumns:
        """:meth:`CommitLog.decode_copied`: every field of the records, their bytes fetched by the
        coalesced ranges of the units' sizes (a record not of its unit's size by its own TOTALSIZE;
        a record that does not decode from its whole object, raising the local decoder's error)."""
        offs = np.asarray(physical_offsets, dtype=np.int64).reshape(-1)
        sizes = np.asarray(sizes, dtype=np.int64).reshape(-1)
        with self._by_offset(offs, sizes if len(sizes) == len(offs) else None):
            return super().decode_columns(offs)

    @property
    def held_bytes(self) -> int:
        """Bytes of the log's objects fetched and held now (what :meth:`release_held` gives back)."""
        with self._fetch_lock:
            return sum(hi - lo for spans in self._held.values() for lo, hi in spans)

    def release_held(self) -> None:
        """Give back the memory of every byte fetched so far and forget that it is held: a later read
        fetches what it needs again (docs/object-storage.md#costs). What a read that is done with its
        records calls (a Spark task at its end, a ``consume`` when it ends), so a Store kept for further
        reads holds none of this one's records. The buffers stay (their pages are zeros again), so a
        view of one never outlives its memory; what a read returned was copied out of them. Up to
        :data:`KEPT_BUFFER_BYTES` of the process's given-back buffers keep their pages, zeroed, for the next
        buffers of their size (any Store's): a fetch into fresh memory makes each of its pages first."""
        with self._fetch_lock:
            for index, buf in list(self._bufs.items()):
                spans = self._held.get(index) or []
                if _POOL.give(buf, spans):  # kept for the next buffer of its size, its held bytes zeroed
                    del self._bufs[index]
                elif hasattr(buf, "madvise"):
                    buf.madvise(mmap.MADV_DONTNEED)
                else:  # no madvise (Windows): a new buffer, the old one's memory freed with its last view
                    del self._bufs[index]
            self._held.clear()

    def close(self) -> None:
        """Release the buffers (kept for reuse as :meth:`release_held` keeps them) and forget what they held."""
        with self._fetch_lock:
            self.release_held()
            super().close()
            self._held.clear()
            self._bufs.clear()


class ObjectCommitLog(RangedLog, CommitLog):
    """A classic CommitLog whose files are objects of an :class:`ObjectStore` (:class:`RangedLog`)."""


class ObjectDLedgerCommitLog(RangedLog, DLedgerCommitLog):
    """A DLedger CommitLog (and the classic one below it in a migrated store) whose files are objects of
    an :class:`ObjectStore` (:class:`RangedLog`): records read by ranges, entries walked whole."""
