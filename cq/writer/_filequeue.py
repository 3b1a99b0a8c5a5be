"""Files a writer appends to: a mapped-file queue opened for writing, and the store's lock file.

Only writers use this module; readers map store files read-only (:mod:`cq.readers._mapped`).
"""
from __future__ import annotations

import os
from collections.abc import Callable

try:
    import fcntl
except ImportError:  # not POSIX (Windows): the store lock is skipped
    fcntl = None

from ..errors import StoreFormatError, UnsupportedLayoutError
from ..format import (
    COMMIT_LOG_DIR,
    CONSUME_QUEUE_DIR,
    CONSUME_QUEUE_EXT_DIR,
    DLEDGER_DIR_PREFIX,
    file_name,
)

#: Flush a file queue's buffer once it holds this many bytes.
COMMIT_LOG_FLUSH = 4 * 1024 * 1024
QUEUE_FLUSH = 256 * 1024

# ------------------------------------------------------------ file queues
class FileQueue:
    """A mapped-file queue opened for appending.

    Bytes are buffered and written with ``pwrite``; a file is created
    full-size (zero-filled, sparse) when its first bytes are flushed, as the
    broker creates a file when the first message goes into it.

    ``after`` is a queue whose buffer is flushed first: a ConsumeQueue flushes
    its ext queue and the CommitLog before its own units, so an interrupted
    writer never leaves a unit that points past the data (the broker builds
    units from the CommitLog, after the fact, for the same reason).
    """

    __slots__ = ("_buf", "_buf_pos", "_flush_at", "after", "directory", "file_size", "flush_all", "pos", "start")

    def __init__(self, directory: str, file_size: int, start: int = 0, pos: int = 0, flush_at: int = QUEUE_FLUSH,
                 after: FileQueue | None = None, flush_all: Callable[[], None] | None = None):
        self.after = after
        # set for ConsumeQueue and ext queues: a full buffer flushes every queue of the
        # writer, so the units on disk always cover a prefix of the CommitLog (the broker
        # dispatches records in log order)
        self.flush_all = flush_all
        self.directory = directory
        self.file_size = file_size
        self.start = start  # logical offset of the current file
        self.pos = pos  # write position in the current file
        self._buf = bytearray()
        self._buf_pos = pos  # where the buffer goes in the current file
        self._flush_at = flush_at

    @property
    def offset(self) -> int:
        """Logical offset of the next byte to be written."""
        return self.start + self.pos

    @property
    def remaining(self) -> int:
        return self.file_size - self.pos

    def position_at(self, start: int, pos: int) -> None:
        """Write next at byte ``pos`` of the file starting at logical offset ``start`` (the buffer
        must be empty: a new queue, or one whose existing end recovery found)."""
        self.start, self.pos, self._buf_pos = start, pos, pos

    def write(self, data: bytes | bytearray) -> None:
        self._buf += data
        self.pos += len(data)
        if len(self._buf) >= self._flush_at:
            (self.flush_all or self.flush)()

    def roll(self) -> None:
        """Mark the current file full; the next write goes to the next file."""
        (self.flush_all or self.flush)()
        self.start += self.file_size
        self.pos = 0
        self._buf_pos = 0

    def flush(self) -> None:
        if not self._buf:
            return
        if self.after is not None:
            self.after.flush()
        os.makedirs(self.directory, exist_ok=True)
        path = os.path.join(self.directory, file_name(self.start))
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            if os.fstat(fd).st_size < self.file_size:
                os.ftruncate(fd, self.file_size)
            data = memoryview(self._buf)
            written = 0
            while written < len(data):
                written += os.pwrite(fd, data[written:], self._buf_pos + written)
        finally:
            os.close(fd)
        self._buf_pos += len(self._buf)
        self._buf = bytearray()


#: The broker's lock file in the store root; a writer holds an exclusive flock on it.
LOCK_FILE = "lock"


def lock_store(root: str) -> int | None:
    """Take the store's ``lock`` file as the broker does, so two writers never share a store."""
    if fcntl is None:  # not POSIX: no advisory locks
        return None
    fd = os.open(os.path.join(root, LOCK_FILE), os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as exc:
        os.close(fd)
        raise BlockingIOError(f"{root!r} is locked by another writer (its {LOCK_FILE} file is held)") from exc
    return fd


def holds_store(root: str) -> str | None:
    """The first store file found under ``root`` (commitlog, consumequeue, consumequeue_ext), or None."""
    for sub in (COMMIT_LOG_DIR, CONSUME_QUEUE_DIR, CONSUME_QUEUE_EXT_DIR):
        top = os.path.join(root, sub)
        if not os.path.isdir(top):
            continue
        for dirpath, _dirs, files in os.walk(top):
            for name in files:
                return os.path.join(dirpath, name)
    return None


def check_classic(root: str) -> None:
    """Refuse a store whose CommitLog is DLedger's (docs/formats.md#dledger-commitlog): the writer
    appends classic records to ``commitlog/``, which readers would not find beside a DLedger log."""
    if os.path.isdir(root) and any(n.startswith(DLEDGER_DIR_PREFIX) for n in os.listdir(root)):
        raise UnsupportedLayoutError("DLedger CommitLog", root, "the writer appends classic CommitLog records "
                                     "only; write a classic store and convert it with cq.write_dledger_store")


def check_file_sizes(files: list[tuple[int, str]], file_size: int, kind: str, option: str) -> None:
    """Refuse to append to existing ``kind`` files not of ``file_size`` bytes (naming the writer
    ``option`` that fits them) or starting off a multiple of it; a trailing empty file is reused."""
    for start, path in files:
        actual = os.path.getsize(path)
        if actual == 0 and (start, path) == files[-1]:
            continue  # a trailing empty file; the broker deletes it, the writer reuses it
        if actual != file_size:
            raise ValueError(
                f"existing {kind} file {path} is {actual} bytes; pass {option}={actual} to append to this store"
            )
        if start % file_size:
            raise StoreFormatError(f"{kind} file start {start} is not a multiple of {file_size}", path, 0)
