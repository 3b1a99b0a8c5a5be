"""CommitLog: the message records themselves (docs/formats.md#commitlog)."""
from __future__ import annotations

import bisect
import itertools
import os
import socket
import struct
import time
import zlib
from collections.abc import Generator, Iterator
from dataclasses import dataclass, field, fields

import numpy as np

from .. import format as fmt
from ..errors import StoreFormatError
from ..kernels import _decode, _inflate, _objects, _record
from . import columns as _columns
from ._mapped import MappedFileQueue
from .columns import MessageColumns
from .entry import ReaderEntry

_HOSTS: dict[tuple[bytes, int], str] = {}
_I32_BE = struct.Struct(">i")
_I64_BE = struct.Struct(">q")


def _host(ip: bytes, port: int) -> str:
    """``"ip:port"`` / ``"[ipv6]:port"``; hosts repeat across records, so they are cached."""
    key = (ip, port)
    text = _HOSTS.get(key)
    if text is None:
        if len(ip) == 4:
            text = f"{socket.inet_ntop(socket.AF_INET, ip)}:{port}"
        else:
            text = f"[{socket.inet_ntop(socket.AF_INET6, ip)}]:{port}"
        if len(_HOSTS) < 65536:
            _HOSTS[key] = text
    return text


@dataclass(eq=True)
class Message:
    """One CommitLog record, decoded (``MessageExt``'s fields in snake_case).

    ``body`` is the body exactly as stored (compressed when ``sys_flag`` has
    ``COMPRESSED_FLAG``); :meth:`uncompressed_body` decodes it. Hosts read
    ``"ip:port"`` or ``"[ipv6]:port"``.
    """

    store_size: int
    magic_code: int
    body_crc: int
    queue_id: int
    flag: int
    queue_offset: int
    commit_log_offset: int
    sys_flag: int
    born_timestamp: int
    born_host: str
    store_timestamp: int
    store_host: str
    reconsume_times: int
    prepared_transaction_offset: int
    body: bytes
    topic: str
    properties: dict = field(default_factory=dict)
    _path: str | None = field(default=None, repr=False, compare=False)
    _file_offset: int | None = field(default=None, repr=False, compare=False)
    #: The broker whose store holds the record, when read through a :class:`cq.Cluster`
    #: (docs/reading.md#clusters); None for a single store.
    broker: str | None = field(default=None, repr=False, compare=False)

    @property
    def tags(self) -> str | None:
        """The TAGS property as stored, or None."""
        return self.properties.get(fmt.PROPERTY_TAGS)

    @property
    def keys(self) -> str | None:
        """The KEYS property as stored (keys separated by spaces), or None."""
        return self.properties.get(fmt.PROPERTY_KEYS)

    @property
    def msg_id(self) -> str:
        """The offset message id: store-host address, port and commit-log offset, in upper-case hex."""
        return fmt.offset_msg_id(self.store_host, self.commit_log_offset)

    @property
    def transaction_type(self) -> int:
        """``sys_flag & 0xC``: 0 NOT_TYPE, 4 PREPARED, 8 COMMIT, 0xC ROLLBACK."""
        return self.sys_flag & fmt.TRANSACTION_TYPE_MASK

    @property
    def is_compressed(self) -> bool:
        """True when the stored body is compressed (``COMPRESSED_FLAG``)."""
        return bool(self.sys_flag & fmt.COMPRESSED_FLAG)

    def uncompressed_body(self) -> bytes:
        """The body, decompressed when ``COMPRESSED_FLAG`` is set (docs/formats.md#body-compression).

        ZLIB uses the standard library; LZ4 (frame format) needs the ``lz4``
        package and ZSTD the ``zstandard`` package. The rule is
        :func:`decompress_body`'s, which the data path's batch decoder shares.

        Raises
        ------
        StoreFormatError
            Unknown compression type or a body that does not decompress.
        ImportError
            The codec's optional package is not installed.
        """
        return decompress_body(self.body, self.sys_flag, path=self._path, offset=self._file_offset,
                               commit_log_offset=self.commit_log_offset)


def decompress_body(body: bytes, sys_flag: int, *, path: str | None = None, offset: int | None = None,
                    commit_log_offset: int | None = None) -> bytes:
    """One stored body as the consumer reads it: decompressed when ``sys_flag`` says so.

    The one home of the codec rule (docs/formats.md#body-compression):
    without ``COMPRESSED_FLAG`` the body is returned as stored; otherwise the
    type bits pick ZLIB (types 3 and 0, the legacy value), LZ4 (frame format,
    the ``lz4`` package) or ZSTD (the ``zstandard`` package); types 4-7 are an
    error. :meth:`Message.uncompressed_body` and :meth:`CommitLog.decode_columns`
    (``decompress_body=True``, for the rows its kernel leaves to Python) call it.

    Parameters
    ----------
    body : bytes
        The body as stored.
    sys_flag : int
        The record's SYSFLAG.
    path, offset : str and int, optional
        The CommitLog file and the record's byte offset in it, for the error.
    commit_log_offset : int, optional
        The record's COMMITLOGOFFSET field, for the error.

    Raises
    ------
    StoreFormatError
        Unknown compression type or a body that does not decompress (naming
        ``path`` and ``offset``).
    ImportError
        The codec's optional package is not installed.
    """
    if not sys_flag & fmt.COMPRESSED_FLAG:
        return body
    ctype = fmt.compression_type(sys_flag)
    try:
        if ctype in fmt.ZLIB_COMPRESSION_TYPES:
            return zlib.decompress(body)
        if ctype == fmt.COMPRESSION_LZ4:
            try:
                import lz4.frame  # lazy: an optional codec, needed only for LZ4 bodies
            except ImportError as exc:
                raise ImportError("body is LZ4-compressed: pip install lz4 to read it") from exc
            return lz4.frame.decompress(body)
        if ctype == fmt.COMPRESSION_ZSTD:
            try:
                import zstandard  # lazy: an optional codec, needed only for ZSTD bodies
            except ImportError as exc:
                raise ImportError("body is ZSTD-compressed: pip install zstandard to read it") from exc
            return zstandard.ZstdDecompressor().decompress(body)
    except ImportError:
        raise
    except Exception as exc:
        raise StoreFormatError(
            f"compressed body (type {ctype}) of the record at commit-log offset "
            f"{commit_log_offset} does not decompress: {exc}",
            path, offset,
        ) from exc
    raise StoreFormatError(f"Unknown compress type value {ctype} in sys_flag {sys_flag:#x}", path, offset)


# _objects.message_objects builds Messages positionally: the record fields up to properties, then the place
assert tuple(f.name for f in fields(Message)) == (
    *(name for name, _ in fmt.RECORD_FIELDS[:[n for n, _ in fmt.RECORD_FIELDS].index("properties") + 1]),
    "_path", "_file_offset", "broker"), "Message's fields moved: update message_objects"


def decode_message(buf, pos: int, limit: int, *, path: str | None = None, file_start: int = 0,
                   verify_crc: bool | str = False) -> Message:
    """Decode the record at ``pos`` of a CommitLog file buffer.

    Layout and validation: docs/formats.md#commitlog-record, docs/formats.md#commitlog-validation.

    ``limit`` is the end of the readable bytes of the file. Raises
    :class:`StoreFormatError` naming ``path`` and the byte offset for a bad
    magic code, a size that does not fit, fields that do not add up to
    TOTALSIZE, or a CRC mismatch: ``verify_crc=True`` (or ``"body"``) checks
    BODYCRC as ``checkCRCOnRecover`` does; ``"property"`` checks the
    ``__CRC32#`` record CRC instead, as ``forceVerifyPropCRC`` does (docs/formats.md#record-crc-property).
    """

    try:
        (total, magic, crc, queue_id, flag, queue_offset, phys, sys_flag, born_ts, born_ip, born_port,
         store_ts, store_ip, store_port, reconsume, prepared, body, topic, props) = _record.decode_record(
            _as_u8(buf), pos, limit)
    except ValueError as exc:
        reason, at = exc.args if len(exc.args) == 2 else (str(exc), pos)
        raise StoreFormatError(reason, path, at) from None
    if verify_crc:
        _check_crc(verify_crc, buf, pos, total, body, crc, props, path)
    return Message(
        store_size=total, magic_code=magic, body_crc=crc, queue_id=queue_id, flag=flag,
        queue_offset=queue_offset, commit_log_offset=phys, sys_flag=sys_flag,
        born_timestamp=born_ts, born_host=_host(born_ip, born_port), store_timestamp=store_ts,
        store_host=_host(store_ip, store_port), reconsume_times=reconsume,
        prepared_transaction_offset=prepared, body=body, topic=topic, properties=props,
        _path=path, _file_offset=pos,
    )


def _check_crc(mode, buf, pos: int, total: int, body: bytes, crc: int, props: dict, path) -> None:
    if mode is True or mode == "body":
        if fmt.body_crc(body) != crc:
            raise StoreFormatError(f"body CRC mismatch: stored {crc}, computed {fmt.body_crc(body)}", path, pos)
        return
    if mode != "property":
        raise ValueError(f"verify_crc must be False, True, 'body' or 'property', got {mode!r}")
    # forceVerifyPropCRC: the __CRC32# property against bytes [0, TOTALSIZE - 20) of the record
    value = props.get(fmt.PROPERTY_CRC32)
    if value is None:
        raise StoreFormatError(f"record has no {fmt.PROPERTY_CRC32} property to verify", path, pos)
    stored = fmt.decode_property_crc(value)
    actual = zlib.crc32(bytes(buf[pos:pos + total - fmt.CRC32_RESERVED_LEN])) & 0x7FFFFFFF
    if stored != actual:
        raise StoreFormatError(f"record CRC mismatch: {fmt.PROPERTY_CRC32}={value!r}, computed {actual}", path, pos)


#: Bytes of a CommitLog file the header walks map at a time (see ``CommitLog._walk_file``).
_WALK_WINDOW = 64 << 20

# Files a cold recovery walk found valid up to their blank end-of-file record, per process
# (docs/live.md#sealed-files): a later cold walk passes over such a file without reading it
# while its identity is unchanged (device, inode, size, mtime). Only files untouched for
# SEALED_AGE_NS when walked are noted, so any later write gives a different mtime (a broker
# never writes to a file once it has moved past it).
_SEALED: dict[tuple, bool] = {}
#: Nanoseconds a file must have gone unmodified before a walk takes it as sealed; the Store's
#: quiet-queue rule uses the same age (docs/live.md#sealed-files).
SEALED_AGE_NS = 2_000_000_000
_SEALED_MAX = 4096


def _file_identity(path: str, check_crc: bool) -> tuple | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return (os.path.abspath(path), *fmt.file_identity(st), st.st_mtime_ns, check_crc)


def _as_u8(buf) -> np.ndarray:
    return buf if isinstance(buf, np.ndarray) else np.frombuffer(buf, np.uint8)


def _inflate_body_column(cols: dict, positions: np.ndarray, path: str) -> tuple:
    """``cols["body"]`` decompressed where ``cols["sys_flag"]`` says so (records at ``positions`` of ``path``).

    The kernel inflates the ZLIB rows in one pass; the rows it leaves (LZ4,
    ZSTD, unknown types, bodies that do not inflate) go through
    :func:`decompress_body`, which decodes them or raises its error.
    """
    offsets, data, valid = cols["body"]
    sys_flag = cols["sys_flag"]
    new_offsets, new_data, rest = _inflate.inflate_bodies(offsets, data, sys_flag)
    if not len(rest):
        return new_offsets, new_data, valid
    phys = cols["commit_log_offset"]
    bodies = [decompress_body(data[offsets[i]:offsets[i + 1]].tobytes(), int(sys_flag[i]), path=path,
                              offset=int(positions[i]), commit_log_offset=int(phys[i]))
              for i in rest.tolist()]
    return (*_splice(new_offsets, new_data, rest, bodies), valid)


def _splice(offsets: np.ndarray, data: np.ndarray, rows: np.ndarray, bodies: list[bytes]) -> tuple:
    """The binary column ``(offsets, data)`` with the (empty) values at ``rows`` (ascending) set to ``bodies``."""
    lengths = np.diff(offsets).astype(np.int64)
    lengths[rows] = [len(b) for b in bodies]
    total = int(lengths.sum())
    if total > 0x7FFFFFFF:
        raise OverflowError(f"the body column of {len(lengths)} records passes 2 GiB once decompressed: "
                            "decode fewer records at a time")
    out_offsets = np.zeros(len(offsets), dtype=np.int32)
    np.cumsum(lengths, out=out_offsets[1:])
    out = np.empty(total, dtype=np.uint8)
    prev = 0
    for row, body in zip(rows.tolist(), bodies):  # the runs of rows between them move in one copy each
        out[out_offsets[prev]:out_offsets[row]] = data[offsets[prev]:offsets[row]]
        out[out_offsets[row]:out_offsets[row + 1]] = np.frombuffer(body, dtype=np.uint8)
        prev = row + 1
    out[out_offsets[prev]:] = data[offsets[prev]:offsets[-1]]
    return out_offsets, out


class CommitLog(MappedFileQueue):
    """Read-only view of a ``commitlog/`` directory.

    Parameters
    ----------
    directory : str or os.PathLike
    file_size : int, optional
        Bytes per file; inferred from the files when omitted.
    check_crc_on_recover : bool, default True
        :attr:`max_offset` also ends the data at the first record whose body
        CRC does not match, as the broker's recovery does with
        ``checkCRCOnRecover`` (its default). A record cut short by an
        interrupted writer can pass every length check (the file is
        pre-allocated with zeros) and only the CRC rejects it.
    """

    #: What errors call the files (a subclass reads records of the same layout elsewhere).
    _KIND = "CommitLog"

    def __init__(self, directory: str | os.PathLike, *, file_size: int | None = None,
                 check_crc_on_recover: bool = True) -> None:
        self.check_crc_on_recover = bool(check_crc_on_recover)
        self._open(directory, file_size, self._KIND)
        self._start_list = [s for s, _ in self._files]
        self._arrays: dict[int, np.ndarray] = {}
        self._max_offset: int | None = None

    def __repr__(self) -> str:
        return f"CommitLog({self.directory!r}, files={len(self._files)}, file_size={self.file_size})"

    def _reopen_kwargs(self) -> dict:
        return {"file_size": self.file_size or None, "check_crc_on_recover": self.check_crc_on_recover}

    def _u8(self, index: int) -> np.ndarray:
        arr = self._arrays.get(index)
        if arr is None:
            arr = np.frombuffer(self._map(index), np.uint8)
            arr = self._arrays.setdefault(index, arr)  # atomic: racing threads share one array
        return arr

    def _file_limit(self, index: int) -> int:
        """The readable bytes of file ``index``: the file size (a tier's flat CommitLog segments differ,
        docs/formats.md#tiered-storage)."""
        return self.file_size

    def file_index(self, physical_offset: int) -> int | None:
        """Index of the file holding ``physical_offset``, or None.

        An offset past the last file listed lists the files again first: the
        broker may have started a new file since (docs/live.md).
        """
        if self._files and physical_offset >= self._files[-1][0] + self._file_limit(len(self._files) - 1):
            self.refresh_files()
        i = bisect.bisect_right(self._start_list, physical_offset) - 1
        if i < 0 or physical_offset >= self._files[i][0] + self._file_limit(i):
            return None
        return i

    def buffer(self, index: int) -> memoryview:
        """The mapped bytes of file ``index`` (read-only)."""
        return self._map(index)

    def hold_records(self, offsets: np.ndarray, sizes: np.ndarray) -> None:
        """Make the records ``(offsets, sizes)`` readable until the reader closes: what
        :func:`cq.store.decide.records_present` asks before layer 2 reads them. Here every listed file
        from the first record's to the last's is mapped (files are contiguous: one that holds none of
        them costs a map and no read, and the broker expires files oldest first, so one gone means
        every record before it is gone too); :class:`StoreFileDeleted` where one was expired. A
        CommitLog in object storage fetches the records' coalesced ranges instead
        (docs/object-storage.md#coalescing)."""
        offsets = np.asarray(offsets, dtype=np.int64)
        if not len(offsets):
            return
        starts = self.file_starts
        first = max(0, int(np.searchsorted(starts, offsets.min(), side="right")) - 1)
        for off in starts[first:int(np.searchsorted(starts, offsets.max(), side="right"))].tolist():
            index = self.file_index(off)
            if index is not None:
                self.buffer(index)

    @property
    def min_offset(self) -> int:
        """Physical offset of the first byte of the first file."""
        return self._files[0][0] if self._files else 0

    @property
    def max_offset(self) -> int:
        """Physical offset just past the last valid record (the broker's recovery end)."""
        if self._max_offset is None:
            self._max_offset = self._recover()
        return self._max_offset

    def _recover(self, first: int | None = None, pos: int = 0) -> int:
        # The broker's recovery (a cold open): from the third-to-last file, record by record
        # (headers and field lengths checked in the scan kernel), to the first record that
        # is not valid; a blank record moves on to the next file. refresh() continues from
        # the previous end instead (index, pos): the bytes before it do not change.

        if not self._files:
            return 0
        if first is None:
            first = max(0, len(self._files) - 3)
        last = len(self._files) - 1
        identities, walked = self._walk_order(first, pos)
        self._before_walk(walked, pos)
        for index in range(first, len(self._files)):
            start, _path = self._files[index]
            identity = identities.get(index)
            if identity is not None and identity in _SEALED:
                continue  # walked before, valid to its blank end record, unchanged since
            pos, status, _ = self._walk_file(index, self.check_crc_on_recover, pos)
            if status == 1 and identity is not None and time.time_ns() - identity[-2] > SEALED_AGE_NS:
                if len(_SEALED) >= _SEALED_MAX:
                    _SEALED.clear()
                _SEALED[identity] = True
            if status != 1 or index == last:
                return start + pos
            pos = 0
        return self._files[-1][0]  # pragma: no cover - the loop always returns

    def _walk_order(self, first: int, pos: int) -> tuple[dict[int, tuple | None], list[int]]:
        """For a recovery walk from file ``first`` (at ``pos``): the sealed-file identity of each file before
        the last (None for the first when the walk starts inside it), and the files it walks, in order: all
        but those walked before and unchanged since (docs/live.md#sealed-files)."""
        last = len(self._files) - 1
        identities = {index: self._sealed_identity(index) for index in range(first, last)}
        if pos:
            identities[first] = None
        return identities, [i for i in range(first, last + 1) if identities.get(i) not in _SEALED]

    def _sealed_identity(self, index: int) -> tuple | None:
        """What names file ``index`` unchanged for the sealed-file rule (docs/live.md#sealed-files): its
        path, device, inode, size and modification time (the time second to last), or None."""
        return _file_identity(self._files[index][1], self.check_crc_on_recover)

    def _before_walk(self, indices: list[int], pos: int) -> None:
        """Hook: the recovery walk is about to walk files ``indices`` (the first from ``pos``), in order."""

    def refresh(self) -> int:
        """Follow the broker: list the files again and move :attr:`max_offset` (docs/live.md).

        Expired files at the front are dropped (``min_offset`` moves), new files
        at the end are added, and the end of the data is found by continuing the
        recovery walk from the previous end, not by walking the last three files
        again (records before the end never change). Returns the new
        :attr:`max_offset`.
        """
        previous = self._max_offset
        self.refresh_files()
        if previous is None or not self._files:
            self._max_offset = None
            return self.max_offset
        end = self._files[-1][0] + self.file_size
        if previous >= end:  # pragma: no cover - the recovered end lies inside the files
            self._max_offset = end
            return end
        i = bisect.bisect_right(self._start_list, previous) - 1
        if i < 0:  # every file that held the previous end has expired: walk from the first
            i, previous = 0, self._files[0][0]
        self._max_offset = self._recover(i, previous - self._files[i][0])
        return self._max_offset

    def _files_moved(self, moved: dict[int, int]) -> None:
        self._start_list = [s for s, _ in self._files]
        self._arrays = {moved[i]: a for i, a in self._arrays.items() if i in moved}

    def _walk_file(self, index: int, check_crc: bool, pos: int = 0) -> tuple[int, int, int]:
        """The scan kernel's ``commit_log_walk`` over file ``index``, in windows of
        :data:`_WALK_WINDOW` bytes whose pages are dropped after each (so a walk keeps one
        window resident, not the file): ``(position, status, records)``.

        With ``check_crc`` a record whose body CRC does not match ends the data (status 2;
        ``records`` then counts only up to the window that held it).
        """
        return self._walk_buffer(index, np.frombuffer(self._map(index), np.uint8), check_crc, pos)

    def _walk_buffer(self, index: int, buf: np.ndarray, check_crc: bool, pos: int) -> tuple[int, int, int]:
        """:meth:`_walk_file` over ``buf``, file ``index``'s bytes (all of them, or a head of them)."""
        n = len(buf)
        records = 0
        while True:
            end = min(n, pos + _WALK_WINDOW)
            p, status, r = _record.commit_log_walk(buf[:end], pos)
            if end < n and status != 1 and p == pos:
                # no whole record fits from pos: one longer than the window, or the end of
                # the data; the rest of the file decides
                end = n
                p, status, r = _record.commit_log_walk(buf, pos)
            if check_crc:
                bad = _record.body_crc_mismatch(buf, pos, p)
                if bad >= 0:
                    self.drop_resident(index)
                    return bad, 2, records
            records += r
            self.drop_resident(index)
            if status == 1 or end == n:
                return p, status, records
            pos = p  # stopped at the window's edge (or at a real end, which the next pass finds)

    def count_records(self) -> int:
        """Number of valid records from the first file to the end of data (fast header walk)."""

        total = 0
        for index in range(len(self._files)):
            _, status, records = self._walk_file(index, False)
            total += records
            if status != 1:
                break
        return total

    def read_message(self, physical_offset: int, *, verify_crc: bool | str = False) -> Message:
        """Decode the record that starts at ``physical_offset``.

        Raises
        ------
        StoreFormatError
            No file holds the offset, or the bytes there are not a valid record.
        """
        index = self.file_index(physical_offset)
        if index is None:
            raise StoreFormatError(
                f"physical offset {physical_offset} is outside the commit log "
                f"[{self.min_offset}, {self._files[-1][0] + self.file_size if self._files else 0})",
                self.directory,
                physical_offset,
            )
        start, path = self._files[index]
        return decode_message(self._u8(index), physical_offset - start, self._file_limit(index),
                              path=path, file_start=start, verify_crc=verify_crc)

    def pickup_store_timestamp(self, physical_offset: int) -> int:
        """STORETIMESTAMP of the record at ``physical_offset``, read alone (the broker's
        ``CommitLog.pickupStoreTimestamp``, what its search of a queue by store time reads per probe,
        docs/find.md#by-time): SYSFLAG gives the born host's width, the store time follows it.

        Raises
        ------
        StoreFormatError
            No file holds the offset, or no record with a known magic code starts there (file and byte).
        """
        index = self.file_index(physical_offset)
        if index is None:
            return self.read_message(physical_offset).store_timestamp  # raises the outside-the-log error
        start = self._files[index][0]
        buf = self._map(index)
        pos = physical_offset - start
        if pos + fmt.RECORD_BORN_HOST_POSITION + 28 > len(buf):
            return self.read_message(physical_offset).store_timestamp  # raises read_message's error
        _size, magic = fmt.RECORD_HEAD_STRUCT.unpack_from(buf, pos)
        if magic not in (fmt.MESSAGE_MAGIC_CODE_V1, fmt.MESSAGE_MAGIC_CODE_V2):
            return self.read_message(physical_offset).store_timestamp  # raises, naming the magic code
        sys_flag = _I32_BE.unpack_from(buf, pos + fmt.RECORD_SYS_FLAG_POSITION)[0]
        at = pos + fmt.RECORD_BORN_HOST_POSITION + fmt.host_width(sys_flag, store=False)
        return _I64_BE.unpack_from(buf, at)[0]

    def decode_columns(self, physical_offsets, fields=None, *, decompress_body: bool = False) -> MessageColumns:
        """Decode the records at ``physical_offsets`` straight into Arrow buffers: the data path's decoder.

        Parameters
        ----------
        physical_offsets : array of int
            Record start offsets, any order (rows follow the input order).
        fields : iterable of str, optional
            The record fields to decode (names of ``cq.format.RECORD_FIELDS``:
            the :class:`Message` fields plus ``tags`` and ``keys``); default
            all. Only these are decoded.
        decompress_body : bool, default False
            False: ``body`` as stored (:attr:`Message.body`). True: as the
            consumer reads it, decompressed where SYSFLAG has ``COMPRESSED_FLAG``
            (:meth:`Message.uncompressed_body`; ZLIB inflated in one batch
            without the GIL, LZ4/ZSTD through the optional packages).
            ``sys_flag`` stays the stored value either way.

        Returns
        -------
        cq.readers.columns.MessageColumns
            Row ``i`` holds what ``read_message(physical_offsets[i])`` decodes
            (text as UTF-8, malformed bytes replaced as ``read_message`` does).

        Raises
        ------
        StoreFormatError
            For the first offset (in input order) where :meth:`read_message`
            raises, with the same message, path and byte offset; with
            ``decompress_body``, then for the first body that
            :meth:`Message.uncompressed_body` cannot decompress, with its message.
        ImportError
            A body is LZ4/ZSTD-compressed and the codec's package is missing.
        OverflowError
            A column passes 2 GiB (decompressed bodies included): ask for fewer records.
        """
        names = [n for n, _ in fmt.RECORD_FIELDS] if fields is None else list(dict.fromkeys(fields))
        inflate = decompress_body and "body" in names
        # the kernel needs each row's SYSFLAG, and the error its COMMITLOGOFFSET field
        extra = [n for n in ("sys_flag", "commit_log_offset") if n not in names] if inflate else []
        mask = fmt.record_field_mask(names + extra)
        offs = np.asarray(physical_offsets, dtype=np.int64).reshape(-1)
        k = len(offs)
        if k == 0:
            return _columns.empty(names)
        one, last = self.file_indices(np.array([offs.min(), offs.max()], dtype=np.int64)).tolist()
        if one >= 0 and one == last:
            # every record in one file (the data source's batches are): no per-offset file index
            runs, idx = [(0, k)], None
        else:
            idx = self.file_indices(offs)
            # runs of consecutive rows in one file, decoded in input order so the first error is read_message's
            runs = itertools.pairwise([0, *(np.flatnonzero(np.diff(idx)) + 1).tolist(), k])
        parts = []
        for a, b in runs:
            index = one if idx is None else int(idx[a])
            if index < 0:
                self.read_message(int(offs[a]))  # raises the outside-the-log error
            start, path = self._files[index]
            pos = np.ascontiguousarray(offs[a:b] - start)
            cols, err = _decode.decode_columns(self._u8(index), pos, self._file_limit(index), mask)
            if err is not None:
                raise StoreFormatError(err[1], path, int(err[2]))
            if inflate:
                cols["body"] = _inflate_body_column(cols, pos, path)
                for name in extra:
                    del cols[name]
            parts.append(_columns.MessageColumns(cols, b - a))
        return _columns.concat(parts, names)

    def decode_copied(self, physical_offsets, sizes) -> MessageColumns:
        """:meth:`decode_columns` (every field) of records read with ``pread`` instead of through the map.

        For records scattered through the log (a queue's, docs/data-path.md#consume): a read
        per record costs less than faulting its pages into the map and letting them go again.
        ``sizes`` are the records' sizes from their ConsumeQueue units. Where a copy cannot
        stand for the mapped file (a file replaced since it was mapped, a record outside its
        file or not of its size, any invalid record) this is :meth:`decode_columns`, which
        raises its errors.
        """
        offs = np.asarray(physical_offsets, dtype=np.int64).reshape(-1)
        sizes = np.asarray(sizes, dtype=np.int64).reshape(-1)
        if len(offs) == 0 or len(sizes) != len(offs):
            return self.decode_columns(offs)
        idx = self.file_indices(offs)
        if int(idx.min()) < 0:
            return self.decode_columns(offs)  # raises the outside-the-log error
        files = np.unique(idx).tolist()
        fds: dict[int, int] = {}
        try:
            for index in files:
                path = self._files[index][1]
                fd = fds[index] = os.open(path, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
                known = self._identities.get(path)
                if known is not None and fmt.file_identity(os.fstat(fd)) != known:
                    return self.decode_columns(offs)  # the map still reads the file it mapped
            per_record = np.array([fds[i] for i in files], dtype=np.int32)[np.searchsorted(files, idx)]
            copied = _decode.copy_records(per_record, offs - self._starts[idx], sizes, self.file_size)
        except OSError:  # a file gone since it was listed: the map says what that means
            return self.decode_columns(offs)
        finally:
            for fd in fds.values():
                os.close(fd)
        if copied is None:
            return self.decode_columns(offs)
        data, pos = copied
        cols, err = _decode.decode_columns(data, pos, len(data), fmt.ALL_RECORD_FIELDS)
        if err is not None:
            return self.decode_columns(offs)
        return _columns.MessageColumns(cols, len(offs))

    def _walk(self, index: int = 0, *, strict: bool, verify_crc: bool | str = False):
        # yields (message|None, physical offset after it, kind) with kind in
        # {"message", "blank", "end"}; "end" carries the end-of-data offset.
        last = len(self._files) - 1
        # non-strict walks end where the broker's recovery ends the data (a torn
        # record can pass the length checks and fail only its CRC)
        recovered_end = None if strict else self.max_offset
        while index <= last:
            start, path = self._files[index]
            buf = self._u8(index)
            pos = dropped_at = 0
            while True:
                if recovered_end is not None and start + pos == recovered_end:
                    yield None, start + pos, "end"
                    return
                if self.file_size - pos < 8:
                    if index == last or not strict:
                        yield None, start + pos, "end"
                        return
                    raise StoreFormatError("fewer than 8 bytes left and no blank record", path, pos)
                total, magic = struct.unpack_from(">ii", buf, pos)
                if magic == fmt.BLANK_MAGIC_CODE:
                    yield None, start + self.file_size, "blank"
                    break
                if total == 0 and magic == 0:  # never-written space: the end of the data
                    if index != last and strict:
                        raise StoreFormatError(
                            "unwritten space before the last commit-log file (missing blank record)", path, pos
                        )
                    yield None, start + pos, "end"
                    return
                try:
                    msg = decode_message(buf, pos, self.file_size, path=path, file_start=start,
                                         verify_crc=verify_crc)
                except StoreFormatError:
                    if strict:
                        raise
                    yield None, start + pos, "end"  # the broker's recovery truncates here
                    return
                pos += msg.store_size
                if pos - dropped_at > _WALK_WINDOW:
                    self.drop_resident(index)  # keep about one window resident, not the file
                    dropped_at = pos
                yield msg, start + pos, "message"
            self.drop_resident(index)
            index += 1

    def messages(self, *, verify_crc: bool | str = False, strict: bool = True) -> Iterator[Message]:
        """Every message in log order, across blank end-of-file records.

        Parameters
        ----------
        verify_crc : bool or {"body", "property"}
            True/"body": check each BODYCRC (the broker's ``checkCRCOnRecover``);
            "property": check the ``__CRC32#`` record CRC (``forceVerifyPropCRC``).
        strict : bool
            True: a corrupt record raises :class:`StoreFormatError`. False: stop
            there, as the broker's recovery truncates at the first invalid record.
        """
        try:
            for msg, _, kind in self._walk(0, strict=strict, verify_crc=verify_crc):
                if kind == "message":
                    yield msg
        except StoreFormatError as exc:
            starts = {path: start for start, path in self._files}
            if exc.path in starts and exc.offset is not None and starts[exc.path] + exc.offset >= self.max_offset:
                raise StoreFormatError(
                    f"{exc.reason} (past the recovered end of the data, {self.max_offset}: a writer may still "
                    "be appending there; strict=False ends the walk at the recovered end)",
                    exc.path, exc.offset) from exc
            raise

    def read_messages(self, physical_offsets) -> list[Message]:
        """:meth:`read_message` for many offsets, decoded in one :meth:`decode_columns` pass.

        Raises :class:`StoreFormatError` as :meth:`decode_columns` does (the
        first offset where :meth:`read_message` raises, same message and place).
        """
        offs = np.asarray(physical_offsets, dtype=np.int64).reshape(-1)
        return self.messages_from_columns(self.decode_columns(offs), offs)

    def messages_from_columns(self, cols: MessageColumns, physical_offsets, rows=None) -> list[Message]:
        """:class:`Message` objects of rows of :meth:`decode_columns`' result (every field decoded).

        ``physical_offsets`` are the offsets ``cols`` was decoded at; ``rows``
        (row numbers, default all) picks the rows, in that order. What
        :meth:`read_messages` returns for those offsets, without decoding again.
        """
        args = self.message_args(physical_offsets, rows)
        return _objects.message_objects(Message, cols.columns, *args) if len(args[0]) else []

    def message_args(self, physical_offsets, rows=None) -> tuple:
        """The arguments after the columns that build :class:`Message` objects from decoded columns
        (``cq.kernels._objects.message_objects`` and ``Delivered.built``): the rows picked (all by
        default), the file index of each, the files' paths and each record's offset in its file.
        :meth:`messages_from_columns` and the Store's consume build their messages with it."""
        offs = np.asarray(physical_offsets, dtype=np.int64).reshape(-1)
        if rows is not None:
            rows = np.asarray(rows, dtype=np.int64).reshape(-1)
            offs = offs[rows]
        else:
            rows = np.arange(len(offs), dtype=np.int64)
        idx = self.file_indices(offs)  # every offset was decoded: each is in a file
        return rows, idx, [path for _, path in self._files], offs - self._starts[idx]

    def record_batches(self, start: int, end: int, fields, batch_records: int = 65536) -> Iterator[MessageColumns]:
        """The records from physical offset ``start`` (a record's start) to ``end``, as :meth:`decode_columns` batches.

        Positions come from the one walk rule (the scan kernel's ``record_positions``, as
        :meth:`column_batches` finds them); a blank end-of-file record, or fewer than 8 bytes
        left, moves on to the next file. A record the walk stops at before ``end`` is decoded
        on its own, so a corrupt one raises :meth:`read_message`'s :class:`~cq.StoreFormatError`
        (file and byte offset). ``fields`` must hold ``store_size``; a batch holds at most
        ``batch_records`` records and never spans two files.
        """
        off = start
        while off < end:
            index = self.file_index(off)
            if index is None:
                return
            file_start = self._files[index][0]
            buf = self._u8(index)
            pos = off - file_start
            positions, pos, status = _record.record_positions(buf, pos, min(self.file_size, end - file_start),
                                                            batch_records)
            if len(positions):
                yield self.decode_columns(positions + file_start, fields)
                self.drop_resident(index)  # the batch is decoded: keep about one batch of the file resident
            off = file_start + pos
            if status == 3 or off >= end:
                continue
            if (status == 1 or self.file_size - pos < 8
                    or fmt.RECORD_HEAD_STRUCT.unpack_from(buf, pos)[1] == fmt.BLANK_MAGIC_CODE):
                off = file_start + self.file_size  # the end of this file: on to the next one
                continue
            one = self.decode_columns([off], fields)  # not a record the walk takes: read_message's error
            yield one
            off += int(one.columns["store_size"][0])

    def column_batches(self, fields=None, *, strict: bool = True, batch_records: int = 65536,
                       decompress_body: bool = False) -> Iterator[MessageColumns]:
        """Every record in log order, as :meth:`decode_columns` batches: the columnar :meth:`messages`.

        Parameters
        ----------
        fields : iterable of str, optional
            Record fields to decode (default all); ``commit_log_offset`` gives each row's offset.
        strict : bool
            As :meth:`messages`: True raises :class:`StoreFormatError` at a corrupt
            record (and at unwritten space before the last file); False ends the data
            where the broker's recovery ends it.
        batch_records : int
            Most records per batch; a batch never spans two files.
        decompress_body : bool
            As :meth:`decode_columns`: ``body`` decompressed where SYSFLAG says so.
        """
        last = len(self._files) - 1
        recovered_end = None if strict else self.max_offset
        for index in range(len(self._files)):
            start, path = self._files[index]
            limit = self.file_size
            if recovered_end is not None:
                limit = max(0, min(limit, recovered_end - start))
            status, pos = yield from self.file_column_batches(index, limit, fields, strict=strict,
                                                              batch_records=batch_records,
                                                              decompress_body=decompress_body)
            if status == 1:
                continue  # blank end-of-file record: on to the next file
            if recovered_end is not None and start + pos >= recovered_end:
                return
            if strict and index != last:
                if self.file_size - pos < 8:
                    raise StoreFormatError("fewer than 8 bytes left and no blank record", path, pos)
                raise StoreFormatError(
                    "unwritten space before the last commit-log file (missing blank record)", path, pos)
            return

    def file_column_batches(self, index: int, limit: int, fields=None, *, strict: bool = True,
                            batch_records: int = 65536, decompress_body: bool = False,
                            ) -> Generator[MessageColumns, None, tuple[int, int]]:
        """The records of file ``index`` up to byte ``limit`` as :meth:`decode_columns` batches;
        returns ``(status, position)`` where the walk stopped: status 1 at the file's blank
        end-of-file record, 0 at unwritten space, 2 at a record that is not valid (with ``strict``,
        that record's :class:`StoreFormatError` is raised instead)."""
        start, path = self._files[index]
        buf = self._u8(index)
        pos = 0
        while True:
            positions, pos, status = _record.record_positions(buf, pos, limit, batch_records)
            if len(positions):
                yield self.decode_columns(positions + start, fields, decompress_body=decompress_body)
                self.drop_resident(index)
            if status == 3:
                continue  # the batch was full
            if status == 2 and strict:
                decode_message(buf, pos, limit, path=path, file_start=start)  # raises its error
            return status, pos

    def gather_properties(self, physical_offsets, *, absent_as_none: bool = False) -> list[dict | None]:
        """Properties of the records at ``physical_offsets``, decoded in batch by the scan kernel.

        A record that stores no properties (PROPERTIES length 0) gives ``{}``,
        or None with ``absent_as_none``: what the broker's filters see, whose
        decoded properties are then null (docs/filtering.md#retry-filter).
        Raises :class:`StoreFormatError` naming the file and offset of the first
        record that is not valid.
        """
        offs = np.asarray(physical_offsets, dtype=np.int64)
        out: list = [None] * len(offs)
        if not len(offs):
            return out
        idx = self.file_indices(offs)
        for i in np.flatnonzero(idx < 0):
            raise StoreFormatError(f"physical offset {offs[i]} is outside the commit log", self.directory, int(offs[i]))
        for index in np.unique(idx):
            sel = np.flatnonzero(idx == index)
            pos = np.ascontiguousarray(offs[sel] - self._files[index][0])
            buf = np.frombuffer(self._map(int(index)), dtype=np.uint8)
            try:
                props = _record.gather_properties(buf, pos, self._file_limit(int(index)), absent_as_none)
            except ValueError as exc:
                k, _, reason = str(exc).partition(": ")
                raise StoreFormatError(reason, self._files[index][1], int(pos[int(k)])) from None
            for j, p in zip(sel.tolist(), props):
                out[j] = p
        return out

    def close(self) -> None:
        """Release the mapped files."""
        self._arrays.clear()
        super().close()


# This reader's registry entry (docs/contributing.md#add-a-reader).
READERS = (
    ReaderEntry(
        "CommitLog",
        lambda root: CommitLog(os.path.join(root, fmt.COMMIT_LOG_DIR)),
        lambda root: [path for _, path in fmt.list_queue_files(os.path.join(root, fmt.COMMIT_LOG_DIR))],
        lambda log: [m.commit_log_offset for m in log.messages()],
    ),
)
