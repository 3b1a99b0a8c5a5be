"""A writer's crash recovery: where the data of an interrupted store ends, and the torn tail cleared.

:class:`cq.writer.StoreWriter` calls these with ``append=True`` before it writes again,
so a killed writer leaves a store that both the readers and the next writer recover alike.
"""
from __future__ import annotations

import os

import numpy as np

from ._filequeue import _check_file_sizes
from .commitlog import CommitLog
from .format import (
    _I16,
    BLANK_MAGIC_CODE,
    CQ_STORE_UNIT_SIZE,
    PLACEHOLDER_UNIT,
    RECORD_HEAD_STRUCT,
    list_queue_files,
)
from .format import CQ_UNIT_STRUCT as _CQ_UNIT


def _recover_commit_log(directory: str, file_size: int) -> tuple[int, int]:
    """``(start of the file to write, write position in it)`` where the CommitLog's data ends.

    The end is the readers' (:attr:`cq.CommitLog.max_offset`: the broker's recovery, from
    the third-to-last file, record by record, body CRC checked), so a writer continues
    exactly where every reader stops. What lies past it is cleared, as the broker's
    ``truncateDirtyFiles`` does: the torn tail of the file holding the end is zeroed (so no
    reader, strict or not, finds half a record after what is appended) and later files are
    deleted. A blank end-of-file record at the end is kept: the next record opens the next
    file, as it would have had the writer not been interrupted.
    """
    files = list_queue_files(directory)
    if not files:
        return 0, 0
    _check_file_sizes(files, file_size, "commit log", "commit_log_file_size")
    with CommitLog(directory, file_size=file_size) as log:
        end = log.max_offset
    start = end - end % file_size
    pos = end - start
    for file_start, path in files:
        if file_start > start:
            os.remove(path)  # wholly past the data: the broker deletes such files
    path = dict(files)[start]
    with open(path, "r+b") as f:
        f.seek(pos)
        head = f.read(RECORD_HEAD_STRUCT.size)
        if len(head) == RECORD_HEAD_STRUCT.size and RECORD_HEAD_STRUCT.unpack(head)[1] == BLANK_MAGIC_CODE:
            return start + file_size, 0
        _zero_tail(f, pos)
    return start, pos


#: Bytes read at a time while looking for the end of a torn tail.
_TAIL_CHUNK = 1 << 20


def _zero_tail(f, pos: int) -> None:
    """Zero the bytes of open file ``f`` from ``pos`` to its last non-zero byte (none: nothing written)."""
    size = os.fstat(f.fileno()).st_size
    used = size
    while used > pos:  # from the end backwards: unwritten space is zero and needs no write
        lo = max(pos, used - _TAIL_CHUNK)
        f.seek(lo)
        chunk = f.read(used - lo).rstrip(b"\0")
        if chunk:
            used = lo + len(chunk)
            break
        used = lo
    at = pos
    while at < used:
        n = min(_TAIL_CHUNK, used - at)
        f.seek(at)
        f.write(bytes(n))
        at += n


def _recover_consume_queue(files: list[tuple[int, str]], file_size: int) -> tuple[int, int]:
    """``(start, position)`` of the first invalid unit after the valid ones (docs/formats.md#consumequeue-end-of-data)."""
    _check_file_sizes(files, file_size, "consume queue", "consume_queue_file_size")
    start, path = files[-1]
    with open(path, "rb") as f:
        data = f.read()
    units = np.frombuffer(data[: len(data) - len(data) % CQ_STORE_UNIT_SIZE], dtype=">i8,>i4,>i8")
    invalid = np.flatnonzero((units["f0"] < 0) | (units["f1"] <= 0))
    if len(invalid):
        return start, int(invalid[0]) * CQ_STORE_UNIT_SIZE
    if len(data) == 0:
        return start, 0
    return start + file_size, 0  # the last file is full: the next unit opens a new one


def _last_unit(files: list[tuple[int, str]], end: int, file_size: int) -> tuple[int, int, int] | None:
    """The ConsumeQueue unit just before logical byte offset ``end``, or None when there is none."""
    at = end - CQ_STORE_UNIT_SIZE
    if at < 0:
        return None
    start = at - at % file_size
    for s, path in files:
        if s == start:
            with open(path, "rb") as f:
                f.seek(at - s)
                raw = f.read(CQ_STORE_UNIT_SIZE)
            if len(raw) == CQ_STORE_UNIT_SIZE:
                phys, size, code = _CQ_UNIT.unpack(raw)
                if phys >= 0 and size > 0 and (phys, size, code) != PLACEHOLDER_UNIT:
                    return phys, size, code
    return None


def _truncate_consume_queue(
    files: list[tuple[int, str]], file_size: int, walked: tuple[int, int], commit_log_end: int
) -> tuple[int, int]:
    """Drop the units that point at or past ``commit_log_end`` (the broker's ``truncateDirtyLogicFiles``).

    ``walked`` is the ``(file start, position)`` :func:`_recover_consume_queue` found; returns the new
    one. Units point at ascending CommitLog offsets, so the dirty ones are a suffix: they are zeroed
    (files wholly past the new end are deleted), so readers stop where the writer continues.
    """
    end = walked[0] + walked[1]
    new_end = end
    for start, path in reversed(files):
        if start >= end:
            continue
        with open(path, "rb") as f:
            data = f.read(min(end - start, file_size))
        units = np.frombuffer(data[: len(data) - len(data) % CQ_STORE_UNIT_SIZE], dtype=">i8,>i4,>i8")
        clean = np.flatnonzero(units["f0"] < commit_log_end)
        new_end = start + (int(clean[-1]) + 1) * CQ_STORE_UNIT_SIZE if len(clean) else start
        if len(clean):
            break
    if new_end == end:
        return walked
    current = new_end - new_end % file_size
    for start, path in files:
        if start > current:
            os.remove(path)
        elif start == current:
            with open(path, "r+b") as f:
                f.seek(new_end - start)
                f.write(bytes(min(end - start, file_size) - (new_end - start)))
    return current, new_end - current


def _truncate_ext(files: list[tuple[int, str]], file_size: int, last: int, walked: tuple[int, int]) -> tuple[int, int]:
    """Drop the ext units past the one at real offset ``last``: zeroed, so readers stop there too.

    ``walked`` is the ``(file start, position)`` the recovery walk found; returns the new one.
    """
    start = last - last % file_size
    path = dict(files).get(start)
    if path is None:
        return walked
    with open(path, "rb") as f:
        f.seek(last - start)
        head = f.read(2)
    size = int.from_bytes(head, "big", signed=True) if len(head) == 2 else 0
    new_end, end = last + max(size, 0), walked[0] + walked[1]
    if size <= 0 or new_end >= end:
        return walked
    for s, p in files:
        lo, hi = max(new_end, s), min(end, s + file_size)
        if lo < hi:
            with open(p, "r+b") as g:
                g.seek(lo - s)
                g.write(bytes(hi - lo))
    return start, new_end - start


def _records_between(log, start: int, end: int):
    """Messages of ``log`` from physical offset ``start`` to ``end``, across blank end-of-file records."""
    off = start
    while off < end:
        index = log.file_index(off)
        if index is None:
            return
        file_start = log.files[index][0]
        buf = log.buffer(index)
        pos = off - file_start
        if log.file_size - pos < 8:
            off = file_start + log.file_size
            continue
        _total, magic = RECORD_HEAD_STRUCT.unpack_from(buf, pos)
        if magic == BLANK_MAGIC_CODE:
            off = file_start + log.file_size
            continue
        msg = log.read_message(off)
        yield msg
        off += msg.store_size


def _recover_ext(files: list[tuple[int, str]], file_size: int) -> tuple[int, int]:
    """Walk every ext file as the broker's recovery does (docs/formats.md#ext-walk)."""
    _check_file_sizes(files, file_size, "consume queue ext", "ext_file_size")
    start, pos = files[0][0], 0
    for start, path in files:
        with open(path, "rb") as f:
            data = f.read()
        pos = 0
        while len(data) - pos >= 2:
            size, = _I16.unpack_from(data, pos)
            if size <= 0:
                break
            pos += size
    return start, pos
