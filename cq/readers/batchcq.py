"""BatchConsumeQueue: the consume queue of a topic whose ``queue.type`` is ``BatchCQ`` (5.x).

docs/formats.md#batch-consume-queue has the layout as RocketMQ 5.3.3 writes it:
``batchconsumequeue/{topic}/{queueId}/`` files of 46-byte units, each pointing at one CommitLog
record that may hold many messages; a unit's ``base_offset`` is the queue offset of its first
message, so queue offsets count messages, not units. A batch sent to such a topic is stored as one
inner-batch record (SYSFLAG ``INNER_BATCH_FLAG``) whose body holds the messages
(docs/formats.md#inner-batch): :func:`inner_messages` splits it.

Units are few (one per batch) and the records are read one by one, so this reader works in numpy
over the mapped files; the inner messages are split by the ``_inner`` kernel (cq/kernels/).
"""
from __future__ import annotations

import os

import numpy as np

from .. import format as fmt
from ..errors import StoreFormatError
from ..kernels import split_inner
from ._mapped import MappedFileQueue
from .commitlog import Message
from .entry import ReaderEntry, last_queue, queue_files

__all__ = ["BatchConsumeQueue", "batch_end", "batch_start", "expand_batch", "inner_messages", "is_inner_batch"]

#: The units read in native byte order.
_NATIVE = fmt.BCQ_UNIT_DTYPE.newbyteorder("=")


class BatchConsumeQueue(MappedFileQueue):
    """One queue of a BatchCQ topic, read-only (docs/formats.md#batch-consume-queue).

    Its end is found as the broker's recovery finds it: the first unit whose CommitLog offset,
    size, base offset or batch size is not positive ends the queue. ``min_offset`` and
    ``max_offset`` are queue offsets of messages: the first unit's base offset, and one past the
    last unit's last message.

    Raises :class:`StoreFormatError` naming the file and byte offset of a unit whose base offset
    does not follow the unit before it, or of valid units that follow the queue's end in a later file.
    """

    def __init__(self, directory: str | os.PathLike, *, file_size: int | None = None,
                 topic: str | None = None, queue_id: int | None = None) -> None:
        self.topic, self.queue_id = topic, queue_id
        self._open(directory, file_size, "BatchConsumeQueue", unit=fmt.BCQ_STORE_UNIT_SIZE)
        self._units: np.ndarray | None = None
        self._first = 0  # units before it lie below the queue's corrected minimum

    def _reopen_kwargs(self) -> dict:
        return {"file_size": self.file_size or None, "topic": self.topic, "queue_id": self.queue_id}

    def __repr__(self) -> str:
        return f"BatchConsumeQueue({self.directory!r}, files={len(self._files)}, file_size={self.file_size})"

    # ------------------------------------------------------------------ units
    @property
    def units(self) -> np.ndarray:
        """Every valid unit from the queue's minimum on, native byte order (:data:`cq.format.BCQ_UNIT_DTYPE`'s fields)."""
        return self._all_units()[self._first:]

    def _all_units(self) -> np.ndarray:
        """Every valid unit, those below the corrected minimum too: recovered once per :meth:`refresh`."""
        if self._units is None:
            self._units = self._recover()
        return self._units

    def _unit_position(self, index: int) -> tuple[str, int]:
        per_file = self.file_size // fmt.BCQ_STORE_UNIT_SIZE
        f, i = divmod(index, per_file)
        return self._files[f][1], i * fmt.BCQ_STORE_UNIT_SIZE

    def _recover(self) -> np.ndarray:
        if not self._files:
            return np.zeros(0, dtype=_NATIVE)
        parts = [np.frombuffer(self._map(i), dtype=fmt.BCQ_UNIT_DTYPE) for i in range(len(self._files))]
        units = np.concatenate(parts).astype(_NATIVE)
        valid = ((units["commit_log_offset"] >= 0) & (units["size"] > 0) & (units["base_offset"] >= 0)
                 & (units["batch_size"] > 0))
        end = int(np.argmin(valid)) if not valid.all() else len(units)
        per_file = self.file_size // fmt.BCQ_STORE_UNIT_SIZE
        later = np.flatnonzero(valid[(end // per_file + 1) * per_file:])
        if len(later):
            path, at = self._unit_position((end // per_file + 1) * per_file + int(later[0]))
            end_path, end_at = self._unit_position(end)
            raise StoreFormatError(f"BatchConsumeQueue unit after the queue's end ({end_path} at byte {end_at}): "
                                   "a unit of a later file is valid", path, at)
        units = units[:end]
        follows = units["base_offset"][1:] == units["base_offset"][:-1] + units["batch_size"][:-1]
        if not follows.all():
            i = int(np.argmin(follows)) + 1
            path, at = self._unit_position(i)
            raise StoreFormatError(
                f"BatchConsumeQueue unit base offset {int(units['base_offset'][i])} does not follow the unit "
                f"before it (base {int(units['base_offset'][i - 1])}, {int(units['batch_size'][i - 1])} messages)",
                path, at)
        return units

    @property
    def min_offset(self) -> int:
        """Queue offset of the first message of the first unit (0 for an empty queue)."""
        units = self.units
        return int(units["base_offset"][0]) if len(units) else self.max_offset

    @property
    def max_offset(self) -> int:
        """One past the queue offset of the last unit's last message."""
        units = self._all_units()
        if not len(units):
            return 0
        return int(units["base_offset"][-1]) + int(units["batch_size"][-1])

    def __len__(self) -> int:
        return self.max_offset - self.min_offset

    def correct_min_offset(self, commit_log_min_offset: int) -> int:
        """Move ``min_offset`` past units whose records lie below ``commit_log_min_offset`` (deleted)."""
        gone = np.flatnonzero(self._all_units()["commit_log_offset"][self._first:] < commit_log_min_offset)
        if len(gone):
            self._first += int(gone[-1]) + 1
        return self.min_offset

    def refresh(self) -> int:
        """List the files again and find the end anew (docs/live.md)."""
        self.refresh_files()
        self._units, self._first = None, 0
        return self.max_offset

    @property
    def file_units(self) -> list[tuple[int, int]]:
        """``(first, end)`` queue offsets of the messages whose units each listed file holds, ascending
        (what a reader splits a queue's reads by)."""
        per_file = self.file_size // fmt.BCQ_STORE_UNIT_SIZE if self.file_size else 0
        base, out = self._all_units()["base_offset"], []
        for i in range(len(self._files)):
            lo = i * per_file
            if lo >= len(base):
                break
            out.append((int(base[lo]), int(base[lo + per_file]) if lo + per_file < len(base) else self.max_offset))
        return out

    def batch_starts(self, end: int | None = None) -> np.ndarray:
        """The queue offsets of the batch starts from the queue's minimum on, ascending, then the end
        (``end``, a cut's end: the starts below it; default the queue's end): what
        :func:`batch_start` and :func:`batch_end` look offsets up in."""
        end = self.max_offset if end is None else int(end)
        base = self.units["base_offset"]  # ascending: the starts below ``end`` are a prefix
        return np.append(base[:int(np.searchsorted(base, end, side="left"))].astype(np.int64), end)

    def units_between(self, start: int, end: int) -> np.ndarray:
        """The units holding a message of queue offsets ``[start, end)``."""
        units = self.units
        base = units["base_offset"]
        lo = max(0, int(np.searchsorted(base, start, side="right")) - 1)
        hi = int(np.searchsorted(base, end, side="left"))
        return units[lo:hi]

    def file_position(self, queue_offset: int) -> tuple[str, int]:
        """``(path, byte_offset)`` of the unit holding the message at ``queue_offset``."""
        i = max(0, int(np.searchsorted(self._all_units()["base_offset"], queue_offset, side="right")) - 1)
        return self._unit_position(i) if self._files else (self.directory, 0)


def batch_start(starts: np.ndarray, offset: int) -> int:
    """The start of the batch holding queue offset ``offset`` (``starts``: a BatchCQ queue's batch
    starts, ascending, then its end: :meth:`BatchConsumeQueue.batch_starts`), as the broker finds the
    unit of a pull at an offset inside a batch (the last unit whose base offset is at most the
    offset; docs/reading.md#batchcq); ``offset`` itself below the first batch.

    >>> batch_start(np.array([0, 3, 8]), 5), batch_start(np.array([0, 3, 8]), 8), batch_start(np.array([4]), 2)
    (3, 8, 2)
    """
    i = int(np.searchsorted(starts, offset, side="right")) - 1
    return int(starts[i]) if i >= 0 else offset


def batch_end(starts: np.ndarray, offset: int) -> int:
    """The end of the batch holding queue offset ``offset`` (``starts`` as for :func:`batch_start`): the
    next batch start after it, or the end; ``offset`` itself at or past the end.

    >>> batch_end(np.array([0, 3, 8]), 3), batch_end(np.array([0, 3, 8]), 7), batch_end(np.array([0, 3, 8]), 8)
    (8, 8, 8)
    """
    i = int(np.searchsorted(starts, offset, side="right"))
    return int(starts[i]) if i < len(starts) else offset


def is_inner_batch(msg: Message) -> bool:
    """True for an inner-batch record: its body holds the messages (docs/formats.md#inner-batch)."""
    return bool(msg.sys_flag & fmt.INNER_BATCH_FLAG)


def _body_position(msg: Message) -> int:
    """Byte position of the body inside the record (for error messages)."""
    return (fmt.RECORD_PREFIX_STRUCT.size + fmt.host_width(msg.sys_flag, store=False) + 8
            + fmt.host_width(msg.sys_flag, store=True) + fmt.RECORD_BODY_HEAD_STRUCT.size)


def inner_messages(body: bytes, path: str | None = None, offset: int = 0) -> list[tuple[int, int, bytes, dict]]:
    """The messages of an inner-batch body: ``(body_crc, flag, body, properties)`` each (the split is
    the :func:`cq.kernels.split_inner` kernel's).

    ``path`` and ``offset`` (the file and byte where ``body`` starts) name the place of a message
    whose sizes do not fit the body, in the :class:`StoreFormatError` raised for it.
    """
    spans, at, error = split_inner(body)
    if error is not None:
        raise StoreFormatError(error, path or "<body>", offset + at)
    plen = fmt.INNER_PROPERTIES_LENGTH_STRUCT.size
    out = []
    for crc, flag, start, body_len, props_len in spans.tolist():
        props_at = start + body_len + plen
        text = body[props_at:props_at + props_len].decode("utf-8", "replace")
        out.append((crc, flag, body[start:start + body_len], fmt.decode_properties(text)))
    return out


def expand_batch(msg: Message) -> list[Message]:
    """The messages a consumer receives from record ``msg``: an inner-batch record's inner messages,
    each with its own queue offset (the record's plus its index), properties, tags and body and the
    record's other fields, as the client unwraps them (docs/formats.md#inner-batch); any other record
    as itself."""
    if not is_inner_batch(msg):
        return [msg]
    at = (msg._file_offset or 0) + _body_position(msg)
    inner = inner_messages(msg.body, msg._path, at)
    fields = msg.__dict__
    out = []
    for i, (crc, flag, body, props) in enumerate(inner):
        # a copy of the record's fields with the message's own (dataclasses.replace runs __init__ again:
        # several times slower, and this is once per message)
        m = object.__new__(Message)
        m.__dict__.update(fields)
        m.queue_offset, m.body_crc, m.flag, m.body, m.properties = msg.queue_offset + i, crc, flag, body, props
        out.append(m)
    return out


def _open_last_queue(root: str) -> BatchConsumeQueue:
    topic, q = last_queue(root, fmt.BATCH_CONSUME_QUEUE_DIR)
    return BatchConsumeQueue(os.path.join(root, fmt.BATCH_CONSUME_QUEUE_DIR, topic, str(q)), topic=topic, queue_id=q)


# This reader's registry entry (docs/contributing.md#add-a-reader).
READERS = (
    ReaderEntry(
        "BatchConsumeQueue",
        _open_last_queue,
        queue_files(fmt.BATCH_CONSUME_QUEUE_DIR),
        lambda queue: queue.units.tolist(),
        store="batch_store",
    ),
)
