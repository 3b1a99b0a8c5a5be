"""Re-dispatch an existing store for a new set of SQL92 groups: :func:`rebuild_bitmaps`.
"""
from __future__ import annotations

import os
import shutil
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..errors import StoreFormatError
from ..format import (
    COMMIT_LOG_DIR,
    CONSUME_QUEUE_DIR,
    CONSUME_QUEUE_EXT_DIR,
    DEFAULT_CONSUME_QUEUE_FILE_SIZE,
    DEFAULT_EXT_FILE_SIZE,
    TRANSACTION_COMMIT_TYPE,
    TRANSACTION_NOT_TYPE,
    TRANSACTION_TYPE_MASK,
    list_queue_files,
)
from ..readers.columns import factorize
from ..readers.commitlog import CommitLog
from ..store.store import Store
from ._dispatch import dispatch_units, write_units
from ._filequeue import check_classic
from .writer import BATCH_SIZE, DEFAULT_MESSAGE_DELAY_LEVEL, Prepared, SqlGroup, StoreWriter

__all__ = ["RebuildResult", "rebuild_bitmaps"]

# ----------------------------------------------------------- rebuild bitmaps
@dataclass
class RebuildResult:
    """What :func:`rebuild_bitmaps` wrote.

    Attributes
    ----------
    messages : int
        CommitLog records read.
    dispatched : int
        Records that got ConsumeQueue and ext units.
    groups : list of SqlGroup
    """

    messages: int
    dispatched: int
    groups: list[SqlGroup] = field(default_factory=list)


def _as_groups(groups: Iterable[Any]) -> list[SqlGroup]:
    out = []
    for g in groups:
        if isinstance(g, SqlGroup):
            out.append(g)
        elif isinstance(g, Mapping):
            out.append(SqlGroup(g["topic"], g["group"], g["sql"]))
        else:
            topic, group, sql = g
            out.append(SqlGroup(topic, group, sql))
    return out


def rebuild_bitmaps(
    source: str | os.PathLike,
    dest: str | os.PathLike,
    groups: Iterable[SqlGroup | tuple[str, str, str] | Mapping[str, str]],
    *,
    consume_queue_file_size: int | None = None,
    ext_file_size: int | None = None,
    bloom_filter: Any = None,
    message_delay_level: str = DEFAULT_MESSAGE_DELAY_LEVEL,
    progress: Callable[[int], None] | None = None,
) -> RebuildResult:
    """Copy a store's CommitLog to ``dest`` and rebuild its ConsumeQueues and ext bitmaps there.

    The records are re-dispatched in log order exactly as the broker's reput
    service would with ``groups`` registered: ConsumeQueue units at each
    record's QUEUEOFFSET, ext units (``enableConsumeQueueExt`` on) with the
    bitmap of the new groups. The source store is only read.

    Parameters
    ----------
    source : path
        An existing store root.
    dest : path
        A directory that does not hold a store (created if missing).
    groups : iterable
        :class:`SqlGroup` objects, ``(topic, group, sql)`` tuples or mappings with those keys.
    consume_queue_file_size, ext_file_size : int, optional
        Default: the sizes of the source's files, else the broker defaults.
    bloom_filter : bloom.BloomFilter, optional
        Default ``BloomFilter(20, 32)``.
    message_delay_level : str
        For ``SCHEDULE_TOPIC_XXXX`` tag codes.
    progress : callable, optional
        Called with the number of records read after each batch.

    Returns
    -------
    RebuildResult

    Raises
    ------
    FileExistsError
        ``dest`` already holds a store.
    cq.StoreFormatError
        The source CommitLog is corrupt.
    """
    source = os.fspath(source)
    dest = os.fspath(dest)
    if os.path.realpath(source) == os.path.realpath(dest):
        raise ValueError("rebuild_bitmaps writes into a new directory; dest must differ from source")
    specs = _as_groups(groups)
    check_classic(source)
    src_log = os.path.join(source, COMMIT_LOG_DIR)
    log_files = list_queue_files(src_log)
    if not log_files:
        raise StoreFormatError("no CommitLog files to rebuild from", src_log)
    commit_log_file_size = os.path.getsize(log_files[0][1])

    def first_size(kind: str, default: int) -> int:
        for dirpath, _dirs, names in os.walk(os.path.join(source, kind)):
            for name in sorted(names):
                size = os.path.getsize(os.path.join(dirpath, name))
                if size:
                    return size
        return default

    return _rebuild(source, dest, specs, _dispatch_batches, commit_log_file_size,
                    consume_queue_file_size or first_size(CONSUME_QUEUE_DIR, DEFAULT_CONSUME_QUEUE_FILE_SIZE),
                    ext_file_size or first_size(CONSUME_QUEUE_EXT_DIR, DEFAULT_EXT_FILE_SIZE),
                    bloom_filter, message_delay_level, progress)


#: How a rebuild reads and dispatches the source CommitLog: ``(log, writer, progress) ->
#: (records read, records dispatched, lowest STORETIMESTAMP or None)``.
_Dispatcher = Callable[[CommitLog, StoreWriter, Callable[[int], None] | None], tuple[int, int, int | None]]


def _rebuild(source: str, dest: str, specs: list[SqlGroup], dispatcher: _Dispatcher, commit_log_file_size: int,
             consume_queue_file_size: int, ext_file_size: int, bloom_filter: Any, message_delay_level: str,
             progress: Callable[[int], None] | None) -> RebuildResult:
    """Create the writer, copy the CommitLog files, dispatch every record with ``dispatcher``."""
    log_files = list_queue_files(os.path.join(source, COMMIT_LOG_DIR))
    store = Store(source)
    writer = None
    try:
        writer = StoreWriter(
            dest,
            commit_log_file_size=max(commit_log_file_size, 64),
            consume_queue_file_size=consume_queue_file_size,
            ext_file_size=ext_file_size,
            enable_ext=True,
            bloom_filter=bloom_filter,
            message_delay_level=message_delay_level,
        )
        for g in specs:
            writer.register_group(g.topic, g.group, g.sql)
        os.makedirs(os.path.join(dest, COMMIT_LOG_DIR), exist_ok=True)
        for _start, path in log_files:
            shutil.copyfile(path, os.path.join(dest, COMMIT_LOG_DIR, os.path.basename(path)))
        messages, dispatched, first_store_time = dispatcher(store.commit_log, writer, progress)
        if first_store_time is not None:
            # every message got the groups' bits: their filter data is older than all of them
            # (isMsgInLive), which consumerFilter.json's bornTime must say
            for g in specs:
                writer.register_group(g.topic, g.group, g.sql, born_time=first_store_time - 1)
    finally:
        store.close()
        if writer is not None:
            writer.close()
    if progress is not None:
        progress(messages)
    return RebuildResult(messages, dispatched, specs)


#: The record fields a re-dispatch reads.
_DISPATCH_FIELDS = ("store_size", "queue_id", "queue_offset", "commit_log_offset", "sys_flag", "store_timestamp",
                    "topic", "properties", "tags")
#: Records decoded per batch.
_BATCH_RECORDS = 65536


def _dispatch_batches(log: CommitLog, writer: StoreWriter,
                      progress: Callable[[int], None] | None) -> tuple[int, int, int | None]:
    """Re-dispatch every record of ``log`` from :meth:`CommitLog.column_batches`: the rebuild's reader.

    Per batch, tag codes (:meth:`StoreWriter.dispatch_tags_codes`) and bitmaps (the
    selectors over the Arrow properties map, :meth:`StoreWriter.column_bitmaps`) are
    array operations (:func:`cq.writer.dispatch_unit.dispatch_units`). Then each unit is written in
    log order.
    """
    messages = dispatched = 0
    first_store_time = None
    for cols in log.column_batches(_DISPATCH_FIELDS, strict=True, batch_records=_BATCH_RECORDS):
        n = len(cols)
        c = cols.columns
        messages += n
        stamps = c["store_timestamp"]
        low = int(stamps.min())
        first_store_time = low if first_store_time is None else min(first_store_time, low)
        transaction = c["sys_flag"] & TRANSACTION_TYPE_MASK
        dispatch = (transaction == TRANSACTION_NOT_TYPE) | (transaction == TRANSACTION_COMMIT_TYPE)
        topic_ids, topics = factorize(*c["topic"][:2])
        codes, ok = writer.dispatch_tags_codes(cols, topic_ids, topics)
        rows = np.flatnonzero(dispatch & ok)  # a record whose dispatch fails gets no unit
        if len(rows):
            dispatched += len(rows)
            write_units(writer, dispatch_units(writer, cols, rows, topic_ids, topics, codes))
        if progress is not None:
            progress(messages)
    return messages, dispatched, first_store_time


def _dispatch_messages(log: CommitLog, writer: StoreWriter,
                       progress: Callable[[int], None] | None) -> tuple[int, int, int | None]:
    """Re-dispatch every record of ``log`` one :class:`cq.Message` at a time (the former reader).

    Kept as the alternative :func:`_dispatch_batches` is measured against
    (bench/bench_writer.py) and checked against (tests/cq/writer/test_rebuild.py).
    """
    messages = dispatched = 0
    first_store_time = None
    batch: list[tuple[Prepared, int, int]] = []

    def flush_batch() -> None:
        nonlocal dispatched
        prepared = [p for p, _, _ in batch]
        for (p, phys, qoff), bitmap in zip(batch, writer.batch_bitmaps(prepared)):
            if p.dispatch:
                state = writer.queue_state(p.topic, p.queue_id)
                writer.dispatch_unit(state, phys, p.size, p.tags_code, p.store_timestamp, bitmap, queue_offset=qoff)
                dispatched += 1
        batch.clear()

    for msg in log.messages(strict=True):
        messages += 1
        if first_store_time is None or msg.store_timestamp < first_store_time:
            first_store_time = msg.store_timestamp
        transaction = msg.sys_flag & TRANSACTION_TYPE_MASK
        props = msg.properties or {}
        try:
            code = writer.dispatch_tags_code(msg.topic, props, msg.store_timestamp)
        except ValueError:
            continue  # the broker's dispatch fails on such a record: it gets no unit
        p = Prepared(
            msg.topic, msg.queue_id, b"", transaction in (TRANSACTION_NOT_TYPE, TRANSACTION_COMMIT_TYPE),
            code, msg.store_timestamp, props,
        )
        p.size = msg.store_size
        batch.append((p, msg.commit_log_offset, msg.queue_offset))
        if len(batch) >= BATCH_SIZE:
            flush_batch()
            if progress is not None:
                progress(messages)
    if batch:
        flush_batch()
    return messages, dispatched, first_store_time
