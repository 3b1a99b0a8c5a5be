"""ConsumeQueueExt: per-message tags code, store time and filter bitmap (docs/formats.md#consumequeueext)."""
from __future__ import annotations

import os
from collections.abc import Iterator
from typing import NamedTuple

import numpy as np

from .. import format as fmt
from ..errors import StoreFormatError
from ..kernels import _ext, kernel_array
from ._mapped import MappedFileQueue
from .entry import ReaderEntry, last_queue, queue_files


class CqExtUnit(NamedTuple):
    """One ConsumeQueueExt unit (``CqExtUnit``).

    Attributes
    ----------
    size : int
        Unit length in bytes (20 + bit_map_size).
    tags_code : int
        What the ConsumeQueue slot would hold without ext: tag hash, 0 or delivery time.
    msg_store_time : int
        CommitLog store timestamp (ms).
    bit_map_size : int
        Bitmap length in bytes; 0 when there is none.
    filter_bitmap : bytes or None
        The Bloom bitmap (``BitsArray`` bytes), None when bit_map_size < 1.
    """

    size: int
    tags_code: int
    msg_store_time: int
    bit_map_size: int
    filter_bitmap: bytes | None


class ExtBatch(NamedTuple):
    """Many ConsumeQueueExt units at once, as :meth:`ConsumeQueueExt.read_batch` returns them.

    Row ``i`` describes ``addresses[i]``; where ``found[i]`` is False
    (:meth:`ConsumeQueueExt.get` would return None) every other field is 0.

    Attributes
    ----------
    found : numpy.ndarray of bool
    size : numpy.ndarray of int16
        The unit's stored size field.
    tags_code, msg_store_time : numpy.ndarray of int64
    bit_map_size : numpy.ndarray of int16
        Bitmap length in bytes; < 1 where the unit has no bitmap.
    bitmap_offsets : numpy.ndarray of int64, shape (N + 1,)
    bitmap_data : numpy.ndarray of uint8
        The bitmaps in the Arrow binary layout: row ``i``'s bitmap is
        ``bitmap_data[bitmap_offsets[i]:bitmap_offsets[i + 1]]`` (empty where
        there is none). See :attr:`bitmaps` for the same as one 2-D array.
    """

    found: np.ndarray
    size: np.ndarray
    tags_code: np.ndarray
    msg_store_time: np.ndarray
    bit_map_size: np.ndarray
    bitmap_offsets: np.ndarray
    bitmap_data: np.ndarray

    @property
    def has_bitmap(self) -> np.ndarray:
        """bool per row: a unit was found and it has a bitmap (``filter_bitmap`` is not None)."""
        return self.found & (self.bit_map_size >= 1)

    @property
    def bitmaps(self) -> np.ndarray:
        """The bitmaps as a (N, nbytes) uint8 array, zero padded; nbytes = the longest (0 when none).

        Built on access: one long (corrupt) bitmap widens every row, so batch
        code should prefer :attr:`bitmap_offsets` / :attr:`bitmap_data`.
        """
        lengths = np.diff(self.bitmap_offsets)
        nbytes = int(lengths.max()) if len(lengths) else 0
        out = np.zeros((len(lengths), nbytes), dtype=np.uint8)
        out[np.arange(nbytes)[None, :] < lengths[:, None]] = self.bitmap_data  # row-major: rows in order
        return out

    def unit(self, i: int) -> CqExtUnit | None:
        """Row ``i`` as the :class:`CqExtUnit` :meth:`ConsumeQueueExt.get` returns, or None."""
        if not self.found[i]:
            return None
        bms = int(self.bit_map_size[i])
        bitmap = self.bitmap_data[self.bitmap_offsets[i]:self.bitmap_offsets[i + 1]].tobytes() if bms >= 1 else None
        return CqExtUnit(int(self.size[i]), int(self.tags_code[i]), int(self.msg_store_time[i]), bms, bitmap)


def _no_units(k: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """``found``, ``tags_code``, ``msg_store_time`` and ``bitmap_size`` columns of ``k`` units not found."""
    return np.zeros(k, dtype=bool), np.zeros(k, dtype=np.int64), np.zeros(k, dtype=np.int64), np.zeros(k, dtype=np.int16)


def data_ends_within(data) -> bool:
    """Whether bytes ``data`` (the head of the last ext file) hold the whole walk to the end of the ext's
    data and the size field that ends it: nothing past that is read in the last file (every read stops at
    :meth:`ConsumeQueueExt.limit`), so a copy of the file needs no more (docs/object-storage.md#costs)."""
    end, status = _ext.ext_walk(np.frombuffer(data, dtype=np.uint8), 0)
    return status == 0 and end + 2 <= len(data)


def head_holding(slots: np.ndarray, file_start: int, file_size: int) -> int | None:
    """The bytes from the start of the ext file at ``file_start`` (``file_size`` bytes) that hold the unit
    at the largest ext address among the ConsumeQueue ``slots`` (its ``tags_code`` column), whatever its
    size (at most ``MAX_EXT_UNIT_SIZE``), and the size field after it: where the ext's data ends when its
    last unit is that one, what a copy of the file fetches first (docs/object-storage.md#costs). None
    when no slot addresses a byte of that file."""
    slots = np.asarray(slots, dtype=np.int64)
    ext = slots[slots <= fmt.MAX_ADDR]
    if not len(ext):
        return None
    pos = fmt.undecorate(int(ext.max())) - int(file_start)
    if not 0 <= pos < file_size:
        return None
    return min(int(file_size), pos + fmt.MAX_EXT_UNIT_SIZE + 2)


class ConsumeQueueExt(MappedFileQueue):
    """Read-only view of one ``consumequeue_ext/{topic}/{queueId}/`` directory.

    Parameters
    ----------
    directory : str or os.PathLike
    file_size : int, optional
        Bytes per file; inferred from the files when omitted.
    """

    def __init__(self, directory: str | os.PathLike, *, file_size: int | None = None) -> None:
        self._open(directory, file_size, "ConsumeQueueExt")
        self._last_limit: int | None = None

    def __repr__(self) -> str:
        return f"ConsumeQueueExt({self.directory!r}, files={len(self._files)}, file_size={self.file_size})"

    def _walk_file(self, index: int, pos: int = 0) -> int:
        end, status = _ext.ext_walk(np.frombuffer(self._map(index), dtype=np.uint8), pos)
        if status == 2:
            raise StoreFormatError(
                "ConsumeQueueExt unit runs past the end of the file", self._files[index][1], end
            )
        return end

    def refresh(self) -> None:
        """List the files again and forget the last file's write position (docs/live.md)."""
        self.refresh_files()
        self._last_limit = None

    def limit(self, index: int) -> int:
        """Readable bytes of file ``index``: the whole file, except the last file's write position."""
        if index < len(self._files) - 1:
            return self.file_size
        if self._last_limit is None:
            self._last_limit = self._walk_file(index)
        return self._last_limit

    @property
    def max_offset(self) -> int:
        """Real (undecorated) offset one past the last unit: the end of valid data."""
        if not self._files:
            return 0
        return self._files[-1][0] + self.limit(len(self._files) - 1)

    def file_index(self, real_offset: int) -> int | None:
        """Index of the loaded file that holds ``real_offset`` (the broker's lookup), or None."""
        if not self._files:
            return None
        if real_offset == 0:  # broker quirk: offset 0 always resolves to the first file
            return 0
        i = int(np.searchsorted(self._starts, real_offset, side="right")) - 1
        if i < 0 or real_offset >= self._files[i][0] + self.file_size:
            return None
        return i

    def get(self, address: int) -> CqExtUnit | None:
        """The ext unit at ``address``, or None where the broker's lookup fails (docs/formats.md#ext-get).

        Raises
        ------
        StoreFormatError
            When the unit starts inside the readable region but its head or
            bitmap runs past it (the broker's buffer underflow).
        """
        if not fmt.is_ext_addr(address):
            return None
        real = fmt.undecorate(address)
        index = self.file_index(real)
        if index is None:
            return None
        pos = real % self.file_size
        limit = self.limit(index)
        path = self._files[index][1]
        buf = self._map(index)
        if pos >= limit or limit - pos < 2:
            return None
        size = int.from_bytes(buf[pos:pos + 2], "big", signed=True)
        if size < 1:
            return None
        if limit - pos < fmt.MIN_EXT_UNIT_SIZE:
            raise StoreFormatError(
                f"ConsumeQueueExt unit head needs {fmt.MIN_EXT_UNIT_SIZE} bytes, {limit - pos} readable", path, pos
            )
        size, tags_code, store_time, bms = fmt.decode_ext_head(buf, pos)
        bitmap = None
        if bms >= 1:
            end = pos + fmt.MIN_EXT_UNIT_SIZE + bms
            if end > limit:
                raise StoreFormatError(
                    f"ConsumeQueueExt bitmap of {bms} bytes runs past the readable end {limit}", path, pos
                )
            bitmap = bytes(buf[pos + fmt.MIN_EXT_UNIT_SIZE:end])
        return CqExtUnit(size, tags_code, store_time, bms, bitmap)

    def units(self) -> Iterator[tuple[int, CqExtUnit]]:
        """Walk every unit in order as the broker's recovery does: ``(address, unit)``.

        In each file, int16 s > 0 is a unit of s bytes; s <= 0 (0 = unwritten,
        -1 = end-of-file marker) moves to the next file.
        """
        for index, (start, path) in enumerate(self._files):
            buf = self._map(index)
            limit = self.limit(index)
            pos = 0
            while pos + 2 <= limit:
                size = int.from_bytes(buf[pos:pos + 2], "big", signed=True)
                if size <= 0:
                    break
                if pos + size > self.file_size:
                    raise StoreFormatError("ConsumeQueueExt unit runs past the end of the file", path, pos)
                unit = self.get(fmt.decorate(start + pos))
                if unit is None:  # pragma: no cover - size was checked above
                    break
                yield fmt.decorate(start + pos), unit
                pos += size

    def read_many(self, addresses: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Resolve many addresses at once: ``(found, tags_code, msg_store_time)`` arrays.

        ``found`` is False where :meth:`get` would return None (tags_code is
        then left as the address, as the broker leaves it).
        """
        addresses = np.asarray(addresses, dtype=np.int64)
        found = np.zeros(len(addresses), dtype=bool)
        tags = addresses.copy()
        times = np.zeros(len(addresses), dtype=np.int64)
        for index, sel, pos in self._group_by_file(addresses):
            status, t, st, _ = _ext.ext_units_at(
                np.frombuffer(self._map(index), dtype=np.uint8), pos, self.limit(index)
            )
            self._raise_underflow(index, pos, status == _ext.UNDERFLOW)
            ok = status == 0
            found[sel[ok]] = True
            tags[sel[ok]] = t[ok]
            times[sel[ok]] = st[ok]
        return found, tags, times

    def read_batch(self, addresses) -> ExtBatch:
        """Resolve many addresses at once, bitmaps included: what :meth:`get` gives for each.

        Parameters
        ----------
        addresses : array of int
            Ext addresses (decorated, as stored in ConsumeQueue slots); any
            int64 is accepted, as by :meth:`get`.

        Returns
        -------
        ExtBatch
            ``found`` is False exactly where :meth:`get` returns None.

        Raises
        ------
        StoreFormatError
            For the first address (in input order) where :meth:`get` raises,
            with the same message, file and byte offset.

        Examples
        --------
        >>> batch = ext.read_batch(units["tags_code"])          # doctest: +SKIP
        >>> batch.found.sum(), batch.bitmap_offsets[-1]          # doctest: +SKIP
        """
        addresses = np.asarray(addresses, dtype=np.int64).reshape(-1)
        k = len(addresses)
        parts = []  # (rows, the kernel's columns) per file holding some of the addresses
        first_bad = None  # (row, file index, position) of the first underflow in input order
        for index, sel, pos in self._group_by_file(addresses):
            cols = _ext.ext_units_read(np.frombuffer(self._map(index), dtype=np.uint8), pos, self.limit(index))
            bad = np.flatnonzero(cols[0] == _ext.UNDERFLOW)
            if len(bad) and (first_bad is None or sel[bad[0]] < first_bad[0]):
                first_bad = (int(sel[bad[0]]), index, int(pos[bad[0]]))
            parts.append((sel, cols))
        if first_bad is not None:
            _, index, pos = first_bad
            limit = self.limit(index)
            path = self._files[index][1]
            if limit - pos < fmt.MIN_EXT_UNIT_SIZE:
                raise StoreFormatError(
                    f"ConsumeQueueExt unit head needs {fmt.MIN_EXT_UNIT_SIZE} bytes, {limit - pos} readable", path, pos
                )
            b = fmt.decode_ext_head(self._map(index), pos)[3]
            raise StoreFormatError(
                f"ConsumeQueueExt bitmap of {b} bytes runs past the readable end {limit}", path, pos
            )
        if len(parts) == 1 and len(parts[0][0]) == k:  # one file holds every address: its columns as they are
            status, size, tags, times, bms, offsets, data = parts[0][1]
            return ExtBatch(status == _ext.FOUND, size, tags, times, bms, offsets, data)
        found, tags, times, bms = _no_units(k)
        size = np.zeros(k, dtype=np.int16)
        lengths = np.zeros(k, dtype=np.int64)
        for sel, (status, sz, t, st, b, offs, _) in parts:
            found[sel] = status == _ext.FOUND
            size[sel], tags[sel], times[sel], bms[sel] = sz, t, st, b
            lengths[sel] = np.diff(offs)
        offsets = np.zeros(k + 1, dtype=np.int64)
        np.cumsum(lengths, out=offsets[1:])
        data = np.empty(int(offsets[-1]), dtype=np.uint8)
        for sel, cols in parts:  # each file's bitmap bytes to their rows' places in input order
            offs, gdata = cols[5], cols[6]
            if len(gdata):
                shift = offsets[sel] - offs[:-1]
                data[np.repeat(shift, np.diff(offs)) + np.arange(len(gdata))] = gdata
        return ExtBatch(found, size, tags, times, bms, offsets, data)

    def bloom_verdicts(self, addresses: np.ndarray, byte_idx: np.ndarray, masks: np.ndarray, bit_num: int,
                       born_time: int) -> tuple[np.ndarray, np.ndarray]:
        """The Bloom check of layer 1 on the ext units at ``addresses``, in the mapped files
        (docs/filtering.md#expression-filter): ``(verdict, found)`` uint8 arrays, ``verdict`` one of
        :data:`cq.kernels.PASS` / ``HIT`` / ``PRUNED`` per address, ``found`` 1 where the address
        resolved (an address that does not passes). ``byte_idx``/``masks`` from
        :func:`cq.kernels.bloom_bit_bytes`. A unit running past a file's readable end raises
        :class:`StoreFormatError` naming the file and offset.
        """
        n = len(addresses)
        verdict = np.full(n, _ext.PASS, dtype=np.uint8)
        found = np.zeros(n, dtype=np.uint8)
        for index, sel, fpos in self._group_by_file(addresses):
            got = np.empty(len(sel), dtype=np.uint8)
            v = _ext.ext_bloom_check(np.frombuffer(self._map(index), dtype=np.uint8), fpos, self.limit(index),
                                      byte_idx, masks, bit_num, born_time, got)
            self._raise_underflow(index, fpos, v == _ext.UNDERFLOW)
            verdict[sel] = v
            found[sel] = got
        return verdict, found

    def _group_by_file(self, addresses: np.ndarray):
        """``(file index, rows, positions)`` per file holding some of ``addresses`` (rows in input order)."""
        if not self._files:
            return
        idx, pos = _ext.ext_locate(kernel_array(addresses, np.int64), self._starts, self.file_size)
        held = idx >= 0
        if not held.any():
            return
        if held.all() and idx[0] == idx[-1] and (idx == idx[0]).all():  # (the common case: one file)
            yield int(idx[0]), np.arange(len(addresses)), pos
            return
        files = idx[held]
        lo, hi = int(files.min()), int(files.max())
        for index in range(lo, hi + 1):  # (a batch spans a file or two: no sort of the addresses)
            sel = np.flatnonzero(held) if lo == hi else np.flatnonzero(idx == index)
            if len(sel):
                yield index, sel, pos[sel]

    def _raise_underflow(self, index: int, pos: np.ndarray, underflow: np.ndarray) -> None:
        bad = np.flatnonzero(underflow)
        if len(bad):
            raise StoreFormatError(
                "ConsumeQueueExt unit runs past the readable end of the file",
                self._files[index][1],
                int(pos[bad[0]]),
            )


def _open_last_queue(root: str) -> ConsumeQueueExt:
    topic, q = last_queue(root, fmt.CONSUME_QUEUE_EXT_DIR)
    return ConsumeQueueExt(os.path.join(root, fmt.CONSUME_QUEUE_EXT_DIR, topic, str(q)))


# This reader's registry entry (docs/contributing.md#add-a-reader).
READERS = (
    ReaderEntry(
        "ConsumeQueueExt",
        _open_last_queue,
        queue_files(fmt.CONSUME_QUEUE_EXT_DIR),
        lambda ext: [(address, unit) for address, unit in ext.units()],
    ),
)
