"""A writer's crash recovery: where the data of an interrupted store ends, the torn tail cleared, and
the records left without units re-dispatched (:func:`redispatch`, in decoded column batches).

:class:`cq.writer.writer.StoreWriter` calls these with ``append=True`` before it writes again,
so a killed writer leaves a store that both the readers and the next writer recover alike.
"""
from __future__ import annotations

import os
from typing import Any

import numpy as np

from ..format import (
    BLANK_MAGIC_CODE,
    CQ_STORE_UNIT_SIZE,
    EXT_UNIT_SIZE_STRUCT,
    PLACEHOLDER_UNIT,
    RECORD_HEAD_STRUCT,
    TRANSACTION_COMMIT_TYPE,
    TRANSACTION_NOT_TYPE,
    TRANSACTION_TYPE_MASK,
    list_queue_files,
)
from ..format import CQ_UNIT_STRUCT as _CQ_UNIT
from ..readers.columns import MessageColumns, factorize
from ..readers.commitlog import CommitLog
from ._dispatch import DispatchUnits, dispatch_units, write_units
from ._filequeue import check_file_sizes


def recover_commit_log(directory: str, file_size: int) -> tuple[int, int]:
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
    check_file_sizes(files, file_size, "commit log", "commit_log_file_size")
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
    # (not SEEK_DATA/SEEK_HOLE to pass over holes: tried, and after a writer killed mid-write
    # (tests/cq/writer/test_writer_interrupted.py) it left part of a torn record unzeroed on ext4)
    used, end = pos, os.fstat(f.fileno()).st_size
    buf = bytearray(_TAIL_CHUNK)
    while end > pos:  # from the end backwards: unwritten space is zero and needs no write
        lo = max(pos, end - _TAIL_CHUNK)
        f.seek(lo)
        n = f.readinto(memoryview(buf)[:end - lo])
        chunk = np.frombuffer(buf, dtype=np.uint8, count=n)
        if chunk.any():  # vectorised: a byte-wise rstrip was most of a writer's start on a fresh 1 GiB file
            used = lo + int(np.flatnonzero(chunk)[-1]) + 1
            break
        end = lo
    at = pos
    while at < used:
        n = min(_TAIL_CHUNK, used - at)
        f.seek(at)
        f.write(bytes(n))
        at += n


def recover_consume_queue(files: list[tuple[int, str]], file_size: int) -> tuple[int, int]:
    """``(start, position)`` of the first invalid unit after the valid ones (docs/formats.md#consumequeue-end-of-data)."""
    check_file_sizes(files, file_size, "consume queue", "consume_queue_file_size")
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


def last_unit(files: list[tuple[int, str]], end: int, file_size: int) -> tuple[int, int, int] | None:
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


def truncate_consume_queue(
    files: list[tuple[int, str]], file_size: int, walked: tuple[int, int], commit_log_end: int
) -> tuple[int, int]:
    """Drop the units that point at or past ``commit_log_end`` (the broker's ``truncateDirtyLogicFiles``).

    ``walked`` is the ``(file start, position)`` :func:`recover_consume_queue` found; returns the new
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


def truncate_ext(files: list[tuple[int, str]], file_size: int, last: int, walked: tuple[int, int]) -> tuple[int, int]:
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


#: Records decoded per batch by the re-dispatch.
_REDISPATCH_BATCH = 65536
#: The record fields the re-dispatch reads (``properties``: bitmaps and DELAY levels).
_REDISPATCH_FIELDS = ("topic", "queue_id", "queue_offset", "sys_flag", "store_timestamp", "store_size",
                      "commit_log_offset", "tags", "properties")


def redispatch(writer: Any, log: CommitLog, start: int, end: int) -> None:
    """Dispatch the records of ``log`` in ``[start, end)`` that lack their units: the broker's reput on restart.

    ``writer`` is the :class:`cq.writer.writer.StoreWriter` that recovered the store. A record gets
    a unit where the reput service gives one (NOT_TYPE and COMMIT records,
    docs/formats.md#consumequeue-which-messages) and its queue does not already hold it (its
    QUEUEOFFSET is past the queue's recovered end and past the records dispatched before it).
    A queue whose files never reached the disk (no unit yet) but whose first record here has
    QUEUEOFFSET > 0 has its first records further back: the pass starts over from the first
    CommitLog file. A record whose dispatch fails (:meth:`~cq.writer.writer.StoreWriter.dispatch_tags_codes`)
    gets no unit. Every decision is made per batch of records over its columns; the units are
    written in log order (:func:`cq.writer.dispatch_unit.write_units`), each at its record's QUEUEOFFSET.
    """
    # may this pass start over? then nothing is written before it ends (exactly as the record by
    # record pass did); otherwise each batch's units are written as it is decided
    may_restart = start > log.min_offset
    expected: dict[tuple[str, int], int] = {}  # next queue offset per queue, this pass
    pending: list[DispatchUnits] = []
    for cols in log.record_batches(start, end, _REDISPATCH_FIELDS, _REDISPATCH_BATCH):
        units = _redispatch_batch(writer, cols, expected, may_restart)
        if units is None:  # a queue whose files never reached the disk: its first records lie further back
            redispatch(writer, log, log.min_offset, end)
            return
        if may_restart:
            pending.append(units)
        else:
            write_units(writer, units)
    for units in pending:
        write_units(writer, units)


_NO_OFFSET = np.iinfo(np.int64).min


def _redispatch_batch(writer: Any, cols: MessageColumns, expected: dict[tuple[str, int], int],
                      may_restart: bool) -> DispatchUnits | None:
    """The units of one batch of :func:`redispatch`; None when the pass must start over.

    ``expected`` (the next queue offset of each queue met so far this pass) is updated. Per
    queue, in log order, a record is taken when its dispatch does not fail, its QUEUEOFFSET
    is at least the queue's expected offset and above every dispatchable record's before it
    in the batch: the record-by-record rule "take it if QUEUEOFFSET >= expected, then
    expected = QUEUEOFFSET + 1", as array operations.
    """
    c = cols.columns
    transaction = c["sys_flag"] & TRANSACTION_TYPE_MASK
    rows = np.flatnonzero((transaction == TRANSACTION_NOT_TYPE) | (transaction == TRANSACTION_COMMIT_TYPE))
    topic_ids, topics = factorize(*c["topic"][:2])
    codes, ok = writer.dispatch_tags_codes(cols, topic_ids, topics)
    queue_ids = c["queue_id"][rows]
    queue_offsets = c["queue_offset"][rows]
    row_ok = ok[rows]
    keys = (topic_ids[rows].astype(np.int64) << 32) | (queue_ids.astype(np.int64) & 0xFFFFFFFF)
    _keys, first, key_index = np.unique(keys, return_index=True, return_inverse=True)
    by_key = np.argsort(key_index.reshape(-1), kind="stable")  # each queue's rows, in log order
    bounds = np.concatenate([[0], np.cumsum(np.bincount(key_index.reshape(-1), minlength=len(first)))])
    take = np.zeros(len(rows), dtype=bool)
    for k in np.argsort(first, kind="stable").tolist():  # queues in the order of their first record
        i = int(first[k])
        key = (topics[int(topic_ids[rows[i]])], int(queue_ids[i]))
        state = writer.queue_state(*key)
        sel = by_key[bounds[k]:bounds[k + 1]]
        q, good = queue_offsets[sel], row_ok[sel]
        threshold = expected.get(key, state.next_offset)
        before = np.empty(len(q), dtype=np.int64)  # highest dispatchable QUEUEOFFSET before each row
        before[0] = _NO_OFFSET
        np.maximum.accumulate(np.where(good, q, _NO_OFFSET)[:-1], out=before[1:])
        taken = good & (q >= threshold) & (q > before)
        if may_restart and not state.started and key not in expected:
            # a queue with no unit yet: its first record not already dispatched (none taken before
            # it) has QUEUEOFFSET > 0, so its earlier records lie before this pass's start
            untaken_before = np.cumsum(taken) - taken == 0
            if ((q >= threshold) & untaken_before & (q > 0)).any():
                return None
        take[sel] = taken
        if taken.any():
            expected[key] = int(q[taken][-1]) + 1
    return dispatch_units(writer, cols, rows[take], topic_ids, topics, codes)


def recover_ext(files: list[tuple[int, str]], file_size: int) -> tuple[int, int]:
    """Walk every ext file as the broker's recovery does (docs/formats.md#ext-walk)."""
    check_file_sizes(files, file_size, "consume queue ext", "ext_file_size")
    start, pos = files[0][0], 0
    for start, path in files:
        with open(path, "rb") as f:
            data = f.read()
        pos = 0
        while len(data) - pos >= 2:
            size, = EXT_UNIT_SIZE_STRUCT.unpack_from(data, pos)
            if size <= 0:
                break
            pos += size
    return start, pos
