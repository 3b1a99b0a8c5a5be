"""ConsumeQueue: the per-queue index of 20-byte units (docs/formats.md#consumequeue)."""
from __future__ import annotations

import os
from collections.abc import Iterator

import numpy as np

from .. import format as fmt
from ..kernels import data_end
from ._mapped import MappedFileQueue
from .entry import ReaderEntry, last_queue, queue_files


def head_units(data) -> tuple[np.ndarray, bool]:
    """The units of bytes ``data`` (the head of a ConsumeQueue file) before the one that ends the queue's
    data (:func:`cq.kernels.data_end`), and whether that unit is within ``data`` (docs/formats.md#consumequeue)."""
    units = np.frombuffer(data, dtype=fmt.CQ_UNIT_DTYPE, count=len(data) // fmt.CQ_STORE_UNIT_SIZE)
    end = data_end(units)
    return units[:end], end < len(units)


#: How much past its guessed end a fetch by :func:`data_bytes_guess` asks for.
GUESS_MARGIN = 1.25


def data_bytes_guess(head, log_end: int) -> int | None:
    """A guess of the bytes of a queue's file that hold its data, from ``head`` (the file's start, which does
    not hold the unit that ends the data) and ``log_end`` (the CommitLog's end, or a bound of it): the units
    after the head's lie over the rest of the log as the head's lie over theirs, the guess
    :data:`GUESS_MARGIN` past that. What a fetch of the file from a bucket asks for next, rather than twice
    its head (docs/object-storage.md#costs); None when the head's units give no spread. Only a guess: the
    data's end is still the unit that ends it (:func:`data_ends_within`)."""
    n = len(head) // fmt.CQ_STORE_UNIT_SIZE
    if n < 2:
        return None
    offsets = np.frombuffer(head, dtype=fmt.CQ_UNIT_DTYPE, count=n)["commit_log_offset"]
    first, last = int(offsets[0]), int(offsets[-1])
    if not 0 <= first < last < log_end:
        return None
    return int(n * (log_end - first) / (last - first) * GUESS_MARGIN) * fmt.CQ_STORE_UNIT_SIZE


def data_ends_within(data) -> bool:
    """Whether bytes ``data`` (the head of a ConsumeQueue file) hold the unit that ends the queue's data:
    the recovery reads nothing past it, so a copy of a file needs no more (docs/object-storage.md#costs)."""
    return head_units(data)[1]


class ConsumeQueue(MappedFileQueue):
    """Read-only view of one ``consumequeue/{topic}/{queueId}/`` directory.

    Parameters
    ----------
    directory : str or os.PathLike
        The queue directory holding 20-digit-named files.
    file_size : int, optional
        Bytes per file (a multiple of 20). Inferred from the files when omitted.
    topic, queue_id : optional
        Recorded for messages and repr only.

    Notes
    -----
    The end of data follows the broker's recovery: files before the
    third-to-last are taken as full, and from there the first unit with
    ``commit_log_offset < 0`` or ``size <= 0`` ends the queue. Placeholder units
    ``(0, 2147483647, 0)`` at the head of the queue lie below ``min_offset``.
    """

    def __init__(self, directory: str | os.PathLike, *, file_size: int | None = None,
                 topic: str | None = None, queue_id: int | None = None) -> None:
        self.topic = topic
        self.queue_id = queue_id
        if file_size is not None:
            file_size = fmt.round_consume_queue_file_size(file_size)
        self._open(directory, file_size, "ConsumeQueue", unit=fmt.CQ_STORE_UNIT_SIZE)
        self._max_offset: int | None = None  # the end the files hold
        self._min_offset: int | None = None
        self._undispatched = b""  # units past the files' end (set_undispatched)

    def _reopen_kwargs(self) -> dict:
        return {"file_size": self.file_size or None, "topic": self.topic, "queue_id": self.queue_id}

    def __repr__(self) -> str:
        return f"ConsumeQueue({self.directory!r}, files={len(self._files)}, file_size={self.file_size})"

    # ------------------------------------------------------------ file access
    @property
    def units_per_file(self) -> int:
        """Units held by one file."""
        return self.file_size // fmt.CQ_STORE_UNIT_SIZE

    @property
    def file_units(self) -> list[tuple[int, int]]:
        """``(first, end)`` queue offsets each listed file holds room for, ascending; then the range of
        units held in memory past the last file, if any (:meth:`set_undispatched`)."""
        per_file = self.units_per_file
        out = [(start // fmt.CQ_STORE_UNIT_SIZE, start // fmt.CQ_STORE_UNIT_SIZE + per_file)
               for start, _ in self._files]
        end = out[-1][1] if out else self._files_end()
        if self._undispatched and self.max_offset > end:  # units past the last file (set_undispatched)
            out.append((end, self.max_offset))
        return out

    def _units_of_file(self, index: int) -> np.ndarray:
        return np.frombuffer(self._map(index), dtype=fmt.CQ_UNIT_DTYPE)

    def _hold(self, index: int, lo: int, hi: int) -> None:
        """Bytes ``[lo, hi)`` of file ``index`` are about to be read: nothing for mapped files (a reader of a
        file read by ranges fetches them, :class:`cq.readers.objectqueue.RangedConsumeQueue`)."""

    @property
    def undispatched_count(self) -> int:
        """Units read past the files' end (:meth:`set_undispatched`): those a stopped broker's recovery adds."""
        return len(self._undispatched) // fmt.CQ_STORE_UNIT_SIZE

    # -------------------------------------------------------------- offsets
    @property
    def max_offset(self) -> int:
        """The next queue offset to be written (one past the last valid unit, undispatched ones included)."""
        return self._files_end() + len(self._undispatched) // fmt.CQ_STORE_UNIT_SIZE

    def _files_end(self) -> int:
        if self._max_offset is None:
            self._max_offset = self._recover()
        return self._max_offset

    def set_undispatched(self, units: bytes) -> None:
        """Units that follow the files' last one: the records a stopped broker wrote but never
        dispatched, as its recovery would dispatch them (:mod:`cq.store.undispatched`), 20-byte
        big-endian units. Read as the queue's own; dropped when a refresh finds the files grew."""
        if len(units) % fmt.CQ_STORE_UNIT_SIZE:
            raise ValueError(f"undispatched units: {len(units)} bytes is not a whole number of "
                             f"{fmt.CQ_STORE_UNIT_SIZE}-byte units")
        self._undispatched = bytes(units)

    @property
    def min_offset(self) -> int:
        """First queue offset holding a real unit (placeholders at the head are skipped)."""
        if self._min_offset is None:
            if not self._files:
                self._min_offset = 0
            else:
                first = self._files[0][0] // fmt.CQ_STORE_UNIT_SIZE
                units = self._units_of_file(0)
                limit = min(len(units), self._files_end() - first)
                head = units[:1]  # the usual head is a real unit: one unit read, not the whole file's mask
                if limit and not (head["commit_log_offset"][0] == 0 and head["size"][0] == fmt.PLACEHOLDER_SIZE
                                  and head["tags_code"][0] == 0):
                    self._min_offset = first
                    return first
                filler = (
                    (units["commit_log_offset"][:limit] == 0)
                    & (units["size"][:limit] == fmt.PLACEHOLDER_SIZE)
                    & (units["tags_code"][:limit] == 0)
                )
                skip = int(np.argmin(filler)) if limit and not filler.all() else int(limit)
                self._min_offset = first + skip
        return self._min_offset

    def correct_min_offset(self, commit_log_min_offset: int) -> int:
        """Move ``min_offset`` to the first unit whose CommitLog offset is >= ``commit_log_min_offset``.

        This is what the broker does after CommitLog files were deleted; if no
        unit qualifies, min_offset becomes max_offset. Returns the new value.
        """
        lo, hi = self.min_offset, self.max_offset
        if lo < hi and int(self.read(lo, 1)["commit_log_offset"][0]) >= commit_log_min_offset:
            return lo  # nothing to move (the common case on each refresh): one unit read, not a file
        for first, units in self.iter_batches(start=lo):
            ok = np.flatnonzero(units["commit_log_offset"] >= commit_log_min_offset)
            if len(ok):
                self._min_offset = first + int(ok[0])
                return self._min_offset
        self._min_offset = hi
        return hi

    def refresh(self) -> int:
        """Follow the broker: list the files again and move the ends (docs/live.md).

        Files expired at the front move :attr:`min_offset` to the first file
        left (the caller corrects it past deleted CommitLog records); the end is
        found by continuing the recovery from the previous end. Returns the new
        :attr:`max_offset`.
        """
        previous = self._max_offset
        removed, _ = self.refresh_files()
        first = self._files[0][0] // fmt.CQ_STORE_UNIT_SIZE if self._files else 0
        if removed or (self._min_offset is not None and self._min_offset < first):
            self._min_offset = None
        if previous is None or not self._files:
            self._max_offset = None
            self._undispatched = b""
            return self.max_offset
        self._max_offset = self._recover(max(previous, first))
        if self._max_offset != previous:
            self._undispatched = b""  # a broker dispatches again: its units are in the files now
        return self.max_offset

    def _recover(self, from_offset: int | None = None) -> int:
        if not self._files:
            return 0
        per_file = self.units_per_file
        index, skip = max(0, len(self._files) - 3), 0
        if from_offset is not None:  # refresh: units before the previous end do not change
            first = self._files[0][0] // fmt.CQ_STORE_UNIT_SIZE
            index, skip = divmod(from_offset - first, per_file)
            if index >= len(self._files):
                return first + len(self._files) * per_file
        while True:
            start = self._files[index][0]
            units = self._units_of_file(index)[skip:]
            # the scan stops at the unit that ends the data: only the pages up to it are read (a 6 MB
            # file holding a few units costs a page or two, not 1465 pages)
            found = data_end(units)
            if found < len(units):
                return start // fmt.CQ_STORE_UNIT_SIZE + skip + found
            skip = 0
            if index + 1 == len(self._files):
                return start // fmt.CQ_STORE_UNIT_SIZE + per_file
            index += 1

    def __len__(self) -> int:
        return self.max_offset - self.min_offset

    # -------------------------------------------------------------- reading
    def _clamp(self, start: int | None, count: int | None) -> tuple[int, int]:
        lo, hi = self.min_offset, self.max_offset
        if start is None:
            start = lo
        if start < 0:
            raise ValueError(f"start must be >= 0, got {start}")
        if count is not None and count < 0:
            raise ValueError(f"count must be >= 0, got {count}")
        start = max(start, lo)
        end = hi if count is None else min(hi, start + count)
        return start, max(start, end)

    def raw_chunks(self, start: int | None = None, count: int | None = None) -> Iterator[tuple[int, memoryview]]:
        """Yield ``(first_queue_offset, raw_bytes)`` per file for queue offsets in range.

        ``raw_bytes`` is a read-only view of the mapped file: whole 20-byte
        big-endian units, as :func:`cq.scan_tags` takes them.
        """
        start, end = self._clamp(start, count)
        unit = fmt.CQ_STORE_UNIT_SIZE
        per_file = self.units_per_file
        first_file_q = self._files[0][0] // unit if self._files else 0
        files_end = self._files_end()
        q = start
        if end > files_end:
            yield from self.raw_chunks(start, max(0, files_end - start)) if start < files_end else ()
            tail = memoryview(self._undispatched)
            q = max(start, files_end)
            yield q, tail[(q - files_end) * unit:(end - files_end) * unit]
            return
        while q < end:
            index = (q - first_file_q) // per_file
            file_q = self._files[index][0] // unit
            stop = min(end, file_q + per_file)
            self._hold(index, (q - file_q) * unit, (stop - file_q) * unit)
            yield q, self._map(index)[(q - file_q) * unit:(stop - file_q) * unit]
            q = stop

    def iter_batches(self, batch_size: int = 1 << 20, start: int | None = None,
                     count: int | None = None) -> Iterator[tuple[int, np.ndarray]]:
        """Yield ``(first_queue_offset, units)`` batches (native-order structured arrays)."""
        if batch_size <= 0:
            raise ValueError(f"batch_size must be > 0, got {batch_size}")
        for q, raw in self.raw_chunks(start, count):
            units = np.frombuffer(raw, dtype=fmt.CQ_UNIT_DTYPE)
            for i in range(0, len(units), batch_size):
                yield q + i, units[i:i + batch_size].astype(fmt.CQ_UNIT_NATIVE_DTYPE)

    def read(self, start: int = 0, count: int | None = None) -> np.ndarray:
        """Units from queue offset ``start`` (clamped to ``min_offset``), at most ``count``.

        Returns
        -------
        numpy.ndarray
            Structured array, native byte order: ``commit_log_offset`` int64,
            ``size`` int32, ``tags_code`` int64 (an ext address when the store
            uses ConsumeQueueExt).
        """
        parts = [np.frombuffer(raw, dtype=fmt.CQ_UNIT_DTYPE) for _, raw in self.raw_chunks(start, count)]
        if not parts:
            return np.zeros(0, dtype=fmt.CQ_UNIT_NATIVE_DTYPE)
        return np.concatenate(parts).astype(fmt.CQ_UNIT_NATIVE_DTYPE)

    def read_columns(self, start: int = 0, count: int | None = None,
                     fields=None) -> dict[str, np.ndarray]:
        """The units :meth:`read` gives, as one contiguous native-order column per field.

        Each field is copied once, straight from the mapped files into its own
        (aligned) array, instead of the units being joined, converted and then
        split: a reader that works on columns (the ``rocketmq`` source) takes
        slices of these, never gathers from the 20-byte units.

        Parameters
        ----------
        fields : sequence of str, optional
            The fields to copy (default: all three).

        Returns
        -------
        dict of str to numpy.ndarray
            ``commit_log_offset`` int64, ``size`` int32, ``tags_code`` int64
            (:data:`cq.format.CQ_UNIT_NATIVE_DTYPE`'s fields, or those of ``fields``), equal in length.
        """
        chunks = [np.frombuffer(raw, dtype=fmt.CQ_UNIT_DTYPE) for _, raw in self.raw_chunks(start, count)]
        n = sum(len(c) for c in chunks)
        names = fmt.CQ_UNIT_NATIVE_DTYPE.names if fields is None else tuple(fields)
        out = {name: np.empty(n, dtype=fmt.CQ_UNIT_NATIVE_DTYPE[name]) for name in names}
        i = 0
        for units in chunks:
            for name, column in out.items():
                column[i:i + len(units)] = units[name]  # one byte-swapping strided copy a field
            i += len(units)
        return out

    def unit(self, queue_offset: int) -> tuple[int, int, int]:
        """``(commit_log_offset, size, tags_code)`` at ``queue_offset``; IndexError outside the queue."""
        if not self.min_offset <= queue_offset < self.max_offset:
            raise IndexError(
                f"queue offset {queue_offset} outside [{self.min_offset}, {self.max_offset}) of {self.directory}"
            )
        u = self.read(queue_offset, 1)[0]
        return int(u["commit_log_offset"]), int(u["size"]), int(u["tags_code"])

    def file_position(self, queue_offset: int) -> tuple[str, int]:
        """``(path, byte_offset)`` of the unit at ``queue_offset`` (for error messages)."""
        unit = fmt.CQ_STORE_UNIT_SIZE
        for start, path in self._files:
            if start <= queue_offset * unit < start + self.file_size:
                return path, queue_offset * unit - start
        return self.directory, queue_offset * unit


def _open_last_queue(root: str) -> ConsumeQueue:
    topic, q = last_queue(root, fmt.CONSUME_QUEUE_DIR)
    return ConsumeQueue(os.path.join(root, fmt.CONSUME_QUEUE_DIR, topic, str(q)), topic=topic, queue_id=q)


# This reader's registry entry (docs/contributing.md#add-a-reader).
READERS = (
    ReaderEntry(
        "ConsumeQueue",
        _open_last_queue,
        queue_files(fmt.CONSUME_QUEUE_DIR),
        lambda queue: queue.read().tolist(),
    ),
)
