"""DLedger CommitLog: CommitLog records inside DLedger entries (docs/formats.md#dledger-commitlog).

A broker with ``enableDLegerCommitLog=true`` keeps its log in ``{root}/dledger-{selfId}/data/``:
a mapped-file queue like ``commitlog/`` whose files hold DLedger entries, each a 48-byte header
then one ordinary CommitLog record as its body (docs/formats.md#dledger-entry). The record's
PHYSICALOFFSET, and every ConsumeQueue unit pointing at it, is the offset of the body, so a
record is read at its offset exactly as in a classic log: :class:`DLedgerCommitLog` is a
:class:`~cq.readers.commitlog.CommitLog` whose random reads (``read_message``,
``decode_columns``, ``gather_properties``) are the classic ones, through the same decoder
and kernels; only walking the log (recovery, ``messages``, ``column_batches``) steps over
entry headers.

A store migrated to DLedger keeps its old ``commitlog/`` below ``dividedCommitlogOffset``,
the start of the first DLedger file (docs/formats.md#dledger-migrated): files below it are
read as classic files, the rest as DLedger files, one logical byte space.
"""
from __future__ import annotations

import os
from collections.abc import Iterator

from .. import format as fmt
from ..errors import StoreFormatError
from ..kernels import _dledger
from .columns import MessageColumns
from .commitlog import CommitLog, decode_message
from .entry import ReaderEntry

__all__ = ["DLedgerCommitLog"]

_HEADER = fmt.DLEDGER_ENTRY_HEADER_STRUCT
_BODY = fmt.DLEDGER_BODY_OFFSET
_BLANK_HEAD = fmt.RECORD_HEAD_STRUCT  # magic i32 then size i32: two ints, as the classic blank

# walk statuses, as the classic kernel's (cq/kernels/_record_py.py:record_positions)
_END, _BLANK, _INVALID, _FULL = 0, 1, 2, 3


class DLedgerCommitLog(CommitLog):
    """Read-only view of a DLedger CommitLog (``dledger-{selfId}/data/``), with the classic
    ``commitlog/`` of a migrated store below it.

    Parameters
    ----------
    directory : str or os.PathLike
        The DLedger data directory.
    classic_directory : str or os.PathLike, optional
        The store's ``commitlog/``: its files below the first DLedger file are the log before
        the migration (``dividedCommitlogOffset``).
    file_size, check_crc_on_recover
        As :class:`~cq.readers.commitlog.CommitLog`.
    """

    def __init__(self, directory: str | os.PathLike, *, classic_directory: str | os.PathLike | None = None,
                 file_size: int | None = None, check_crc_on_recover: bool = True) -> None:
        # a directory of a store in object storage (cq.readers.objects.ObjectDir) stays as it is
        self.classic_directory = None if classic_directory is None else (
            classic_directory if hasattr(classic_directory, "list_files") else os.fspath(classic_directory))
        super().__init__(directory, file_size=file_size, check_crc_on_recover=check_crc_on_recover)

    def __repr__(self) -> str:
        return (f"DLedgerCommitLog({self.directory!r}, files={len(self._files)}, file_size={self.file_size}, "
                f"divided_offset={self.divided_offset})")

    def _reopen_kwargs(self) -> dict:
        return {**super()._reopen_kwargs(), "classic_directory": self.classic_directory}

    def _list_files(self, file_size: int | None) -> tuple[list[tuple[int, str]], int]:
        if self._source is not None:  # a store in object storage: its listing (a snapshot), listed once
            classic = self.classic_directory.list_files() if self.classic_directory is not None else []
            return self._divide(self._directory_arg.list_files(), classic, file_size, self._source.size_of)
        for attempt in range(3):
            try:
                classic = fmt.list_queue_files(self.classic_directory) if self.classic_directory is not None else []
                return self._divide(fmt.list_queue_files(self.directory), classic, file_size, None)
            except FileNotFoundError:
                if attempt == 2:
                    raise
        raise AssertionError("unreachable")  # pragma: no cover

    def _divide(self, entries, classic, file_size: int | None, size_of) -> tuple[list[tuple[int, str]], int]:
        """The log's files: the classic files below the first DLedger file, then the DLedger files
        (docs/formats.md#dledger-commitlog); sets :attr:`divided_offset`. ``size_of`` gives a file's size
        (None: the local file's)."""
        divided = entries[0][0] if entries else None
        classic = [(s, p) for s, p in classic if divided is None or s < divided]
        size = size_of or os.path.getsize
        self._divided = divided if divided is not None else (classic[-1][0] + size(classic[-1][1]) if classic else 0)
        return fmt.check_queue_files(classic + entries, file_size, kind="CommitLog", size_of=size)

    @property
    def divided_offset(self) -> int:
        """``dividedCommitlogOffset``: where the DLedger entries start (classic records below it)."""
        return self._divided

    def _is_dledger(self, index: int) -> bool:
        return self._files[index][0] >= self._divided

    def _scan(self, index: int, pos: int, limit: int, *, check_crc: bool = False, max_records: int = -1,
              last: tuple[int, int] = (-1, -1)):
        """The entry walk kernel over file ``index`` (cq/kernels/_dledger_py.py:dledger_scan); ``last``
        is the (index, term) of the entry before ``pos``. Returns ``(records, pos, status, reason,
        last)``, ``last`` the (index, term) of the last entry passed."""
        records, pos, status, reason, *last = _dledger.dledger_scan(
            self._u8(index), self._files[index][0], pos, limit, check_crc, max_records, *last)
        return records, pos, status, reason, tuple(last)

    def _walk_file(self, index: int, check_crc: bool, pos: int = 0) -> tuple[int, int, int]:
        if not self._is_dledger(index):
            return super()._walk_file(index, check_crc, pos)
        records, pos, status, _, _ = self._scan(index, pos, self.file_size, check_crc=check_crc)
        self.drop_resident(index)
        return pos, status, len(records)

    def _strict_error(self, index: int, pos: int, status: int, reason: str | None) -> StoreFormatError | None:
        """The error a strict walk raises where the entries of file ``index`` stopped, or None."""
        path = self._files[index][1]
        if status == _INVALID:
            body = pos + _BODY
            if reason and reason.startswith("the DLedger entry's body") and body < self.file_size:
                try:  # the record's own error names what is wrong in it, at its offset
                    size = _BLANK_HEAD.unpack_from(self._u8(index), pos)[1]
                    decode_message(self._u8(index), body, pos + size, path=path)
                except StoreFormatError as exc:
                    return exc
            return StoreFormatError(reason or "invalid DLedger entry", path, pos)
        if index != len(self._files) - 1:
            if self.file_size - pos < fmt.DLEDGER_MIN_BLANK_LEN:
                return StoreFormatError("fewer than 8 bytes left and no DLedger blank", path, pos)
            return StoreFormatError("unwritten space before the last commit-log file (missing DLedger blank)",
                                    path, pos)
        return None

    def _walk(self, index: int = 0, *, strict: bool, verify_crc: bool | str = False):
        recovered_end = None if strict else self.max_offset
        last = (-1, -1)
        while index < len(self._files):
            if not self._is_dledger(index):
                for item in super()._walk(index, strict=strict, verify_crc=verify_crc):
                    yield item
                    if item[2] == "end":
                        return
                    if item[2] == "blank":  # on to the next file, which may be the first DLedger one
                        break
                index += 1
                continue
            start, path = self._files[index]
            limit = self.file_size if recovered_end is None else max(0, min(self.file_size, recovered_end - start))
            records, pos, status, reason, last = self._scan(index, 0, limit, last=last)
            buf = self._u8(index)
            for at in records.tolist():
                msg = decode_message(buf, at, self.file_size, path=path, file_start=start, verify_crc=verify_crc)
                yield msg, start + at + msg.store_size, "message"
            self.drop_resident(index)
            if status == _BLANK:
                yield None, start + self.file_size, "blank"
                index += 1
                continue
            if strict:
                error = self._strict_error(index, pos, status, reason)
                if error is not None:
                    raise error
            yield None, start + pos, "end"
            return

    def column_batches(self, fields=None, *, strict: bool = True, batch_records: int = 65536,
                       decompress_body: bool = False) -> Iterator[MessageColumns]:
        """Every record in log order, as :meth:`decode_columns` batches (entries' records, classic
        files below :attr:`divided_offset` as :class:`~cq.readers.commitlog.CommitLog` reads them)."""
        recovered_end = None if strict else self.max_offset
        last = (-1, -1)
        for index in range(len(self._files)):
            start = self._files[index][0]
            limit = self.file_size if recovered_end is None else max(0, min(self.file_size, recovered_end - start))
            if not self._is_dledger(index):
                status = yield from self._classic_file_batches(index, fields, strict, batch_records,
                                                               decompress_body, limit)
                if status != _BLANK:
                    return
                continue
            pos = 0
            while True:
                records, pos, status, reason, last = self._scan(
                    index, pos, limit, max_records=batch_records, last=last)
                if len(records):
                    yield self.decode_columns(records + start, fields,
                                              decompress_body=decompress_body)
                    self.drop_resident(index)
                if status == _FULL:
                    continue
                break
            if status == _BLANK:
                continue
            if strict:
                error = self._strict_error(index, pos, status, reason)
                if error is not None:
                    raise error
            return

    def record_batches(self, start: int, end: int, fields, batch_records: int = 65536) -> Iterator[MessageColumns]:
        """The records from physical offset ``start`` (a record's start) to ``end`` in batches
        (see :meth:`CommitLog.record_batches`): classic files below :attr:`divided_offset` as the
        classic log reads them, then the records of the entries. An entry the walk stops at before
        ``end`` raises :class:`~cq.StoreFormatError` naming its file and offset."""
        if start < self._divided:
            yield from super().record_batches(start, min(end, self._divided), fields, batch_records)
            start = self._divided + _BODY
        off = start - _BODY  # the entry that holds the record
        while off < end:
            index = self.file_index(off)
            if index is None:
                return
            file_start = self._files[index][0]
            records, pos, status, reason, _ = self._scan(index, off - file_start, min(self.file_size, end - file_start),
                                                         max_records=batch_records)
            if len(records):
                yield self.decode_columns(records + file_start, fields)
                self.drop_resident(index)
            off = file_start + pos
            if status == _FULL or off >= end:
                continue
            if status == _BLANK or (status == _END and index != len(self._files) - 1):
                off = file_start + self.file_size
                continue
            raise self._strict_error(index, pos, status, reason) or StoreFormatError(
                "the DLedger log ends before the requested records", self._files[index][1], pos)

    def _classic_file_batches(self, index, fields, strict, batch_records, decompress_body, limit):
        """The classic records of file ``index`` (below :attr:`divided_offset`) in batches; returns
        the walk's status there (1: its blank record, the log goes on)."""
        status, pos = yield from self.file_column_batches(index, limit, fields, strict=strict,
                                                          batch_records=batch_records,
                                                          decompress_body=decompress_body)
        if status != _BLANK and strict:
            raise StoreFormatError("classic commit-log file below dividedCommitlogOffset does not end "
                                   "with a blank record", self._files[index][1], pos)
        return status


def _open_entry(root: str) -> DLedgerCommitLog:
    """The DLedger log of store ``root`` (its one ``dledger-*/data``), the classic files below it."""
    names = sorted(n for n in os.listdir(root) if n.startswith(fmt.DLEDGER_DIR_PREFIX))
    return DLedgerCommitLog(os.path.join(root, names[0], fmt.DLEDGER_DATA_DIR),
                            classic_directory=os.path.join(root, fmt.COMMIT_LOG_DIR))


def _entry_files(root: str) -> list[str]:
    with _open_entry(root) as log:
        return [path for _, path in log.files]


# This reader's registry entry (docs/contributing.md#add-a-reader): swept over the migrated
# store, so its classic files below dividedCommitlogOffset are read too.
READERS = (
    ReaderEntry("DLedgerCommitLog", _open_entry, _entry_files,
                lambda log: [m.commit_log_offset for m in log.messages()], store="dledger_migrated_store"),
)
