"""A writer's crash recovery: where the data of an interrupted store ends, and the torn tail cleared.

:class:`cq.writer.StoreWriter` calls these with ``append=True`` before it writes again,
so a killed writer leaves a store that both the readers and the next writer recover alike.
"""
from __future__ import annotations

import struct
import zlib

import numpy as np

from ._filequeue import _check_file_sizes
from .format import (
    _I16,
    BLANK_MAGIC_CODE,
    BORNHOST_V6_FLAG,
    CQ_STORE_UNIT_SIZE,
    MESSAGE_MAGIC_CODE_V1,
    MESSAGE_MAGIC_CODE_V2,
    PLACEHOLDER_UNIT,
    STOREHOSTADDRESS_V6_FLAG,
    list_queue_files,
)
from .format import CQ_UNIT_STRUCT as _CQ_UNIT
from .format import RECORD_HEAD_STRUCT as _BLANK


def _recover_commit_log(directory: str, file_size: int) -> tuple[int, int]:
    """``(start of last file, write position in it)`` after the last valid record.

    Bytes after it in the last file (a torn record) are zeroed.
    """
    files = list_queue_files(directory)
    if not files:
        return 0, 0
    _check_file_sizes(files, file_size, "commit log", "commit_log_file_size")
    start, path = files[-1]
    with open(path, "rb") as f:
        data = f.read()
    pos = 0
    while len(data) - pos > 4:
        total, magic = struct.unpack_from(">ii", data, pos) if len(data) - pos >= 8 else (0, 0)
        if magic == BLANK_MAGIC_CODE:
            return start + file_size, 0
        if magic not in (MESSAGE_MAGIC_CODE_V1, MESSAGE_MAGIC_CODE_V2) or total <= 0 or total > len(data) - pos:
            break
        end = _valid_record_end(data, pos, total, magic)
        if end is None:
            break
        pos = end
    used = len(data.rstrip(b"\0"))
    if used > pos:
        # a record torn by an interrupted writer (or its tail): the data ends before it, and the
        # bytes are cleared so no reader, strict or not, finds half a record after what we append
        with open(path, "r+b") as f:
            f.seek(pos)
            f.write(bytes(used - pos))
    return start, pos


def _valid_record_end(data: bytes, pos: int, total: int, magic: int) -> int | None:
    """End of the record at ``pos`` if its lengths add up to TOTALSIZE and its body CRC matches."""
    try:
        crc, = struct.unpack_from(">i", data, pos + 8)
        sys_flag, = struct.unpack_from(">i", data, pos + 36)
        bh = 20 if sys_flag & BORNHOST_V6_FLAG else 8
        sh = 20 if sys_flag & STOREHOSTADDRESS_V6_FLAG else 8
        at = pos + 68 + bh + sh
        body_len, = struct.unpack_from(">i", data, at)
        body_len = max(body_len, 0)
        body = data[at + 4:at + 4 + body_len]
        at += 4 + body_len
        if magic == MESSAGE_MAGIC_CODE_V2:
            topic_len, = struct.unpack_from(">h", data, at)
            at += 2
        else:
            topic_len, = struct.unpack_from(">b", data, at)
            at += 1
        at += topic_len
        props_len, = struct.unpack_from(">h", data, at)
        at += 2 + max(props_len, 0)
    except struct.error:
        return None
    if at - pos != total or (zlib.crc32(body) & 0x7FFFFFFF) != crc:
        return None
    return at


def _recover_consume_queue(files: list[tuple[int, str]], file_size: int) -> tuple[int, int]:
    """``(start, position)`` of the first invalid unit after the valid ones (spec §2.4)."""
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
        _total, magic = _BLANK.unpack_from(buf, pos)
        if magic == BLANK_MAGIC_CODE:
            off = file_start + log.file_size
            continue
        msg = log.read_message(off)
        yield msg
        off += msg.store_size


def _recover_ext(files: list[tuple[int, str]], file_size: int) -> tuple[int, int]:
    """Walk every ext file as the broker's recovery does (spec §3.5)."""
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
