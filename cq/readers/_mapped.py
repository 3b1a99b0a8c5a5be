"""What CommitLog, ConsumeQueue and ConsumeQueueExt share: a read-only mapped-file queue.

The file mechanics are in docs/formats.md#mapped-file-queues.
"""
from __future__ import annotations

import contextlib
import mmap
import os
import threading

import numpy as np

from .. import format as fmt
from ..errors import StoreFileDeleted


def _reopen(cls, directory: str, kwargs: dict):
    """Unpickle a reader: open the same directory again (maps are per process)."""
    return cls(directory, **kwargs)


def _dont_need(m, lo: int = 0, hi: int | None = None) -> None:
    """Let the kernel unmap the resident pages of map ``m`` within bytes ``[lo, hi)`` (default all):
    ``madvise(MADV_DONTNEED)``; the pages stay in the page cache. Nothing for a closed or empty map."""
    advice = getattr(mmap, "MADV_DONTNEED", None)
    obj = getattr(m, "obj", None)
    if advice is None or not isinstance(obj, mmap.mmap):
        return
    with contextlib.suppress(ValueError, OSError):  # closed meanwhile: nothing to drop
        if hi is None and lo == 0:
            obj.madvise(advice)
            return
        a = max(lo, 0) // mmap.PAGESIZE * mmap.PAGESIZE
        b = len(obj) if hi is None else min(hi, len(obj))
        if b > a:
            obj.madvise(advice, a, b - a)


class MappedFileQueue:
    """Files of one queue, mapped read-only on first use and released by :meth:`close`.

    Subclasses call :meth:`_open` from their constructor and name their
    constructor's keyword arguments in :meth:`_reopen_kwargs`.

    Readers are safe to share between threads: a file is mapped once, under a
    lock; everything else they cache is computed from immutable bytes, so a
    race only computes the same value twice. A reader pickles as its directory
    and options and opens the files again when unpickled (Spark ships paths;
    this makes a reader captured in a closure work too).
    """

    _files: list[tuple[int, str]]
    _maps: dict[int, memoryview]
    #: Files follow each other by one file size (``fmt.check_queue_files``); False for the compaction
    #: store's files, whose names may skip (docs/formats.md#compaction-store).
    _CONTIGUOUS = True

    def _open(self, directory, file_size: int | None, kind: str, unit: int | None = None) -> None:
        """List and check the queue's files (docs/formats.md#mapped-file-queues); nothing is mapped yet."""
        self._set_files(directory, kind, unit)
        self._files, self.file_size = self._list_files(file_size)
        self._starts = np.array([s for s, _ in self._files], dtype=np.int64)

    def _set_files(self, directory, kind: str, unit: int | None) -> None:
        """The reader's state before any file is listed or mapped: no files yet (and none ever for
        a queue whose units are held elsewhere, such as a RocksDB consume queue's).

        ``directory`` is a local path, or a directory of a store in object storage (an object with
        ``source``, ``uri`` and ``list_files()``, :class:`cq.readers.objects.ObjectDir`): its files are
        then listed from the store's listing and each read whole by one request
        (docs/object-storage.md#costs)."""
        self._source = getattr(directory, "source", None)
        self._directory_arg = directory if self._source is not None else None
        self.directory = directory.uri if self._source is not None else os.fspath(directory)
        self._kind, self._unit = kind, unit or 1
        self._files, self.file_size = [], 0
        self._starts = np.zeros(0, dtype=np.int64)
        self._maps = {}
        self._identities: dict[str, tuple[int, int, int]] = {}  # path -> identity when mapped
        self._map_lock = threading.Lock()

    def _list_files(self, file_size: int | None) -> tuple[list[tuple[int, str]], int]:
        # A broker may delete a front file between the listing and the size check: list again.
        if self._source is not None:  # a snapshot: listed once, sizes from the listing
            return fmt.check_queue_files(self._directory_arg.list_files(), file_size, kind=self._kind,
                                         unit=self._unit, contiguous=self._CONTIGUOUS,
                                         size_of=self._source.size_of)
        for attempt in range(3):
            try:
                return fmt.check_queue_files(fmt.list_queue_files(self.directory), file_size,
                                             kind=self._kind, unit=self._unit, contiguous=self._CONTIGUOUS)
            except FileNotFoundError:
                if attempt == 2:
                    raise
        raise AssertionError("unreachable")  # pragma: no cover

    def refresh_files(self) -> tuple[int, int]:
        """List the queue's files again (docs/live.md): ``(files gone at the front, files added at the end)``.

        Files the broker expired are dropped from the front (their maps are
        released), files it created are added at the end; a file that is
        still mapped stays readable until released. Not to be called while
        another thread reads through this reader.
        """
        files, size = self._list_files(self.file_size or None)
        old = self._files
        if files == old:
            return 0, 0
        if not self.file_size:
            self.file_size = size
        new_index = {start: i for i, (start, _) in enumerate(files)}
        with self._map_lock:
            keep, gone = {}, {}
            for i, m in self._maps.items():
                j = new_index.get(old[i][0]) if i < len(old) else None
                (keep if j is not None else gone)[j if j is not None else i] = m
            fmt.release_maps(gone)
            self._maps = keep
            listed = {path for _, path in files}
            self._identities = {p: v for p, v in self._identities.items() if p in listed}
            self._files = files
            self._starts = np.array([s for s, _ in files], dtype=np.int64)
            self._files_moved({i: new_index[old[i][0]] for i in range(len(old)) if old[i][0] in new_index})
        removed = sum(1 for s, _ in old if s < (files[0][0] if files else float("inf")))
        added = sum(1 for s, _ in files if not old or s > old[-1][0])
        return removed, added

    def _files_moved(self, moved: dict[int, int]) -> None:
        """Hook for subclasses caching per-file state by index: ``moved`` maps old index -> new."""

    def _reopen_kwargs(self) -> dict:
        return {"file_size": self.file_size or None}

    def __reduce__(self):
        return _reopen, (type(self), self._directory_arg or self.directory, self._reopen_kwargs())

    @property
    def files(self) -> list[tuple[int, str]]:
        """``(start_offset, path)`` of each file, ascending."""
        return list(self._files)

    @property
    def file_starts(self) -> np.ndarray:
        """The start offsets of :attr:`files`, ascending, as an int64 array (shared: do not modify)."""
        return self._starts

    def _map(self, index: int) -> memoryview:
        m = self._maps.get(index)
        if m is None:
            with self._map_lock:  # one map per file even when threads race to the first read
                m = self._maps.get(index)
                if m is None:
                    path = self._files[index][1]
                    if self._source is not None:  # one GET of the whole object, or the Store's copy of it
                        opener = getattr(self._directory_arg, "open_file", None)
                        m = opener(path) if opener is not None else memoryview(
                            self._source.read_object(path, kind=self._kind))
                        self._maps[index] = m
                        return m
                    try:
                        m, self._identities[path] = fmt.map_file_identity(path)
                    except FileNotFoundError as exc:
                        raise StoreFileDeleted(
                            f"{self._kind} file was deleted after it was listed (expired by the broker)",
                            path) from exc
                    self._maps[index] = m
        return m

    def replaced_file(self) -> str | None:
        """A file this reader has mapped that its path no longer names (docs/live.md#cached-readers).

        The path of the first file whose device, inode or size differ from the
        file mapped there (replaced, or the store rewritten), else None. A file
        that is gone is not replaced: the broker expired it, and
        :meth:`refresh_files` drops it.
        """
        for path, identity in list(self._identities.items()):
            try:
                st = os.stat(path)
            except FileNotFoundError:
                continue
            if fmt.file_identity(st) != identity:
                return path
        return None

    def drop_resident(self, index: int | None = None) -> None:
        """Let the kernel unmap the resident pages of file ``index`` (all files: None).

        The mapping stays valid: a later read faults the pages back in from the
        page cache, so this is safe while other threads read the same map. Walks
        call it after each file, so a scan of a multi-GB CommitLog keeps only the
        file it is in resident instead of everything it has read.
        """
        maps = [self._maps.get(index)] if index is not None else list(self._maps.values())
        for m in maps:
            _dont_need(m)

    def drop_resident_range(self, lo: int, hi: int) -> None:
        """:meth:`drop_resident` for the pages of bytes ``[lo, hi)`` of the queue's logical space only:
        the cost follows the pages a read touched, not the size of the mapped files."""
        if hi <= lo or not self._files:
            return
        first = max(0, int(self.file_indices(np.array([lo], dtype=np.int64))[0]))
        for index in range(first, len(self._files)):
            start = self._files[index][0]
            if start >= hi:
                break
            _dont_need(self._maps.get(index), lo - start, hi - start)

    def file_indices(self, offsets: np.ndarray) -> np.ndarray:
        """Index of the listed file holding each offset of the queue's logical space, -1 where none does.

        Files are contiguous, each one file size after the one before (``fmt.check_queue_files``),
        so a file is a division away; where names may skip (``_CONTIGUOUS`` False), a bisection.
        """
        offsets = np.asarray(offsets, dtype=np.int64)
        if not self._files:
            return np.full(len(offsets), -1, dtype=np.int64)
        if not self._CONTIGUOUS:  # names may skip: the last file starting at or below each offset
            idx = np.searchsorted(self._starts, offsets, side="right").astype(np.int64) - 1
            idx[(idx >= 0) & (offsets >= self._starts[np.maximum(idx, 0)] + self.file_size)] = -1
            return idx
        idx = (offsets - self._starts[0]) // self.file_size
        idx[(idx < 0) | (idx >= len(self._files))] = -1
        return idx

    def close(self) -> None:
        """Release the mapped files."""
        with self._map_lock:
            fmt.release_maps(self._maps)
            self._identities.clear()

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()
