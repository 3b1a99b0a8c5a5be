"""The compaction store: what a broker serves a compaction topic from (docs/formats.md#compaction-store).

A topic whose ``cleanup.policy`` attribute is ``COMPACTION`` has, per queue, a **compaction log**
(``compaction/compactionLog/{topic}/{queueId}/``: CommitLog records, each one's PHYSICALOFFSET its own
position in the compaction log) and a sparse **compaction CQ** (``compaction/compactionCq/{topic}/{queueId}/``:
46-byte BatchConsumeQueue units, one CQ file per log file and of the same name, each file's valid units
a prefix of it), and the store has one **position checkpoint** (``compaction/position-checkpoint``).
Compaction replaces files by new ones named from 0, so neither queue's file names need follow each other.

:class:`CompactionLog` reads the records (it is a :class:`cq.CommitLog` whose files may skip);
:class:`CompactionConsumeQueue` the units; :func:`read_position_checkpoint` the checkpoint.
"""
from __future__ import annotations

import json
import os
import struct
from collections.abc import Iterator

import numpy as np

from .. import format as fmt
from ..errors import StoreFormatError, UnsupportedLayoutError
from ._mapped import MappedFileQueue
from .commitlog import CommitLog, Message, decode_message
from .entry import ReaderEntry, last_queue, queue_files

__all__ = ["CompactionConsumeQueue", "CompactionLog", "compaction_queue_dirs", "read_position_checkpoint"]

#: A record's TOTALSIZE and MAGICCODE (docs/formats.md#commitlog-record).
_HEAD = struct.Struct(">ii")
#: The units read in native byte order.
_NATIVE = fmt.BCQ_UNIT_DTYPE.newbyteorder("=")


def compaction_queue_dirs(root: str | os.PathLike, topic: str, queue_id: int) -> tuple[str, str]:
    """``(compaction log directory, compaction CQ directory)`` of one queue of store root ``root``."""
    base = os.path.join(os.fspath(root), fmt.COMPACTION_DIR)
    q = str(int(queue_id))
    return (os.path.join(base, fmt.COMPACTION_LOG_DIR, topic, q), os.path.join(base, fmt.COMPACTION_CQ_DIR, topic, q))


class CompactionLog(CommitLog):
    """One queue's compaction log, read-only (docs/formats.md#compaction-store).

    Its records are CommitLog records and read as those of a :class:`cq.CommitLog` are
    (``read_message``, ``decode_columns``, ``messages``...); their ``commit_log_offset`` is the record's
    position in this log, as the broker serves it. The files have one size but their names may skip
    (compaction writes its output from 0 and drops the files it replaced).
    """

    _KIND = "CompactionLog"
    _CONTIGUOUS = False

    def __repr__(self) -> str:
        return f"CompactionLog({self.directory!r}, files={len(self._files)}, file_size={self.file_size})"

    def _recover(self, first: int | None = None, pos: int = 0) -> int:
        # every file but the last is closed (a blank record, or unwritten space after a compaction's
        # output): the data ends in the last file, where its walk stops
        if not self._files:
            return 0
        last = len(self._files) - 1
        end, _, _ = self._walk_file(last, self.check_crc_on_recover, 0)
        return self._files[last][0] + end

    def messages(self, *, verify_crc: bool | str = False, strict: bool = True) -> Iterator[Message]:
        """Every record, file by file: a file's records end at a blank record or at unwritten space (a
        compaction's output file has no blank record), and the next file goes on.

        Parameters
        ----------
        verify_crc : bool or {"body", "property"}
            As for :meth:`cq.CommitLog.messages`.
        strict : bool
            True: a record that does not decode raises :class:`StoreFormatError` naming the file and
            byte; False: that file's records end there.
        """
        for index, (start, path) in enumerate(self._files):
            buf = self._u8(index)
            pos = 0
            while self.file_size - pos >= 8:
                total, magic = _HEAD.unpack_from(buf, pos)
                if magic == fmt.BLANK_MAGIC_CODE or (total == 0 and magic == 0):
                    break
                try:
                    msg = decode_message(buf, pos, self.file_size, path=path, file_start=start, verify_crc=verify_crc)
                except StoreFormatError:
                    if strict:
                        raise
                    break
                pos += msg.store_size
                yield msg
            self.drop_resident(index)


class CompactionConsumeQueue(MappedFileQueue):
    """One queue's compaction CQ, read-only (docs/formats.md#compaction-store).

    ``units`` holds every valid unit in queue order (:data:`cq.format.BCQ_UNIT_DTYPE`'s fields, native
    order): each file's units up to its first unit whose offset, size, base offset or batch size is
    not positive, file after file. Queue offsets (``base_offset``) ascend but skip the offsets
    compaction removed. ``min_offset`` is the first unit's offset, ``max_offset`` one past the last
    unit's (0 and 0 when there is none).

    Raises :class:`StoreFormatError` naming the file and byte offset of a unit whose offset is not
    above the unit before it, or whose batch size is not 1.
    """

    _CONTIGUOUS = False

    def __init__(self, directory: str | os.PathLike, *, file_size: int | None = None,
                 topic: str | None = None, queue_id: int | None = None) -> None:
        self.topic, self.queue_id = topic, queue_id
        self._open(directory, file_size, "compaction CQ", unit=fmt.BCQ_STORE_UNIT_SIZE)
        self._units: np.ndarray | None = None
        self._where: np.ndarray | None = None  # per unit: (file index, byte position)

    def _reopen_kwargs(self) -> dict:
        return {"file_size": self.file_size or None, "topic": self.topic, "queue_id": self.queue_id}

    def __repr__(self) -> str:
        return f"CompactionConsumeQueue({self.directory!r}, files={len(self._files)}, file_size={self.file_size})"

    @property
    def units(self) -> np.ndarray:
        """Every valid unit, in queue order, found once per :meth:`refresh`."""
        if self._units is None:
            self._units, self._where = self._recover()
        return self._units

    def _recover(self) -> tuple[np.ndarray, np.ndarray]:
        parts, where = [], []
        for i in range(len(self._files)):
            units = np.frombuffer(self._map(i), dtype=fmt.BCQ_UNIT_DTYPE)
            valid = ((units["commit_log_offset"] >= 0) & (units["size"] > 0) & (units["base_offset"] >= 0)
                     & (units["batch_size"] > 0))
            end = int(np.argmin(valid)) if not valid.all() else len(units)
            parts.append(units[:end].astype(_NATIVE))
            where.append(np.stack([np.full(end, i, dtype=np.int64),
                                   np.arange(end, dtype=np.int64) * fmt.BCQ_STORE_UNIT_SIZE], axis=1))
        if not parts:
            return np.zeros(0, dtype=_NATIVE), np.zeros((0, 2), dtype=np.int64)
        units, where = np.concatenate(parts), np.concatenate(where)
        bad = np.flatnonzero(units["batch_size"] != 1)
        if len(bad):
            i = int(bad[0])
            raise StoreFormatError(f"compaction CQ unit holds {int(units['batch_size'][i])} messages, expected 1",
                                   self._files[int(where[i, 0])][1], int(where[i, 1]))
        follows = units["base_offset"][1:] > units["base_offset"][:-1]
        if not follows.all():
            i = int(np.argmin(follows)) + 1
            raise StoreFormatError(
                f"compaction CQ unit offset {int(units['base_offset'][i])} is not above the unit before it "
                f"({int(units['base_offset'][i - 1])})", self._files[int(where[i, 0])][1], int(where[i, 1]))
        return units, where

    @property
    def offsets(self) -> np.ndarray:
        """The queue offset of each unit, ascending (int64)."""
        return self.units["base_offset"].astype(np.int64)

    @property
    def min_offset(self) -> int:
        """The first unit's queue offset (0 for an empty queue)."""
        units = self.units
        return int(units["base_offset"][0]) if len(units) else 0

    @property
    def max_offset(self) -> int:
        """One past the last unit's queue offset (0 for an empty queue)."""
        units = self.units
        return int(units["base_offset"][-1]) + 1 if len(units) else 0

    def __len__(self) -> int:
        return len(self.units)

    def units_between(self, start: int, end: int) -> np.ndarray:
        """The units of queue offsets ``[start, end)``."""
        base = self.units["base_offset"]
        return self.units[int(np.searchsorted(base, start, side="left")):int(np.searchsorted(base, end, side="left"))]

    @property
    def file_units(self) -> list[tuple[int, int]]:
        """``(first, end)`` queue offsets of each listed file's units (``end`` the next file's first, or the
        queue's end), ascending: what a reader splits a queue's reads by; files without a unit left out."""
        units, where = self.units, self._where
        out = []
        for i in range(len(self._files)):
            rows = np.flatnonzero(where[:, 0] == i)
            if len(rows):
                out.append(int(units["base_offset"][rows[0]]))
        return [(first, out[k + 1] if k + 1 < len(out) else self.max_offset) for k, first in enumerate(out)]

    def file_position(self, queue_offset: int) -> tuple[str, int]:
        """``(path, byte_offset)`` of the unit of ``queue_offset``, or of the first unit after it (the
        directory and 0 when there is none)."""
        units = self.units
        i = int(np.searchsorted(units["base_offset"], queue_offset, side="left"))
        if i >= len(units):
            return self.directory, 0
        return self._files[int(self._where[i, 0])][1], int(self._where[i, 1])

    # What a classic ConsumeQueue reader offers and a compaction CQ must not answer: their callers read
    # the CommitLog at a unit's offset, which here is a compaction log position. A read that does not
    # follow the compaction store is refused, naming the queue, never answered from the wrong file.
    def _refuse(self, *_args, **_kwargs):
        raise UnsupportedLayoutError(
            f"compaction topic {self.topic!r} queue {self.queue_id} (its units point into the compaction log, "
            "not the CommitLog)", self.directory,
            "this read does not follow the broker's compaction store; consume, why, backlog, inspect and the "
            "data source do (docs/reading.md#compaction-topics)")

    unit = read = read_columns = raw_chunks = iter_batches = _refuse

    def correct_min_offset(self, commit_log_min_offset: int) -> int:
        """``min_offset``: the compaction log keeps its records when the broker expires CommitLog files."""
        return self.min_offset

    def refresh(self) -> int:
        """List the files again and find the units anew (compaction replaces files; docs/live.md)."""
        self.refresh_files()
        self._units = self._where = None
        return self.max_offset


def read_position_checkpoint(root: str | os.PathLike) -> dict[tuple[str, int], int]:
    """The compaction position of each compacted queue, ``{(topic, queue id): offset}``, from
    ``compaction/position-checkpoint`` of store root ``root`` (its ``.bak`` where the file is missing,
    as the broker's ``ConfigManager`` loads it); ``{}`` when neither exists.

    Raises :class:`StoreFormatError` naming the file when it is not the checkpoint's JSON.
    """
    base = os.path.join(os.fspath(root), fmt.COMPACTION_DIR, fmt.COMPACTION_CHECKPOINT_FILE)
    for path in (base, base + ".bak"):
        try:
            with open(path, "rb") as f:
                raw = f.read()
        except FileNotFoundError:
            continue
        try:
            doc = json.loads(raw.decode("utf-8"))
            table = doc.get("queueOffsetMap") or {}
            out = {}
            for key, offset in table.items():
                topic, sep, qid = str(key).rpartition("_")
                if not sep or not qid.lstrip("-").isdigit() or isinstance(offset, bool) or not isinstance(offset, int):
                    raise ValueError(f"entry {key!r}: {offset!r}")
                out[(topic, int(qid))] = offset
            return out
        except (ValueError, AttributeError, UnicodeDecodeError) as exc:
            raise StoreFormatError(f"not a compaction position checkpoint ({exc})", path, 0) from exc
    return {}


def _compaction_kind(kind: str) -> str:
    return os.path.join(fmt.COMPACTION_DIR, kind)


def _open_cq(root: str) -> CompactionConsumeQueue:
    topic, q = last_queue(root, _compaction_kind(fmt.COMPACTION_CQ_DIR))
    return CompactionConsumeQueue(compaction_queue_dirs(root, topic, q)[1], topic=topic, queue_id=q)


def _open_log(root: str) -> CompactionLog:
    topic, q = last_queue(root, _compaction_kind(fmt.COMPACTION_LOG_DIR))
    return CompactionLog(compaction_queue_dirs(root, topic, q)[0])


READERS = (
    ReaderEntry("CompactionConsumeQueue", _open_cq, queue_files(_compaction_kind(fmt.COMPACTION_CQ_DIR)),
                lambda cq: cq.units.tolist(), store="compaction_store"),
    ReaderEntry("CompactionLog", _open_log, queue_files(_compaction_kind(fmt.COMPACTION_LOG_DIR)),
                lambda log: [(m.queue_offset, m.commit_log_offset, m.keys, m.body) for m in log.messages()],
                store="compaction_store"),
)
