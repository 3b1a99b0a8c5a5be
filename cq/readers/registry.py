"""Every store-file reader, declared once (docs/contributing.md#add-a-reader).

Each :class:`ReaderEntry` says how to open its reader over a store directory, which files that
reader reads there, and how to read it whole. The generic tests (pickling and threads, the
read-only proof, corrupt files, the fuzz sweeps) run over :data:`READERS`, so a new reader is
covered by adding its entry here.
"""
from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ..format import COMMIT_LOG_DIR, CONSUME_QUEUE_DIR, CONSUME_QUEUE_EXT_DIR, list_queue_files
from .commitlog import CommitLog
from .consumequeue import ConsumeQueue
from .ext import ConsumeQueueExt
from .indexfile import INDEX_DIR, IndexFiles

__all__ = ["READERS", "ReaderEntry"]


@dataclass(frozen=True)
class ReaderEntry:
    """One reader: ``open(root)`` over a store directory, the ``files(root)`` it reads there,
    and ``read_all(reader)``, everything it reads as plain values (equal for equal files)."""

    name: str
    open: Callable[[str], Any]
    files: Callable[[str], list[str]]
    read_all: Callable[[Any], Any]

    def __repr__(self) -> str:
        return self.name


def _last_queue(root: str, kind: str) -> tuple[str, int]:
    """The first topic's highest queue of ``root/kind`` (the golden store's GoldenFilterTopic/1)."""
    top = os.path.join(root, kind)
    topic = min(os.listdir(top))
    queue_id = max(int(q) for q in os.listdir(os.path.join(top, topic)) if q.isdigit())
    return topic, queue_id


def _open_consume_queue(root: str) -> ConsumeQueue:
    topic, q = _last_queue(root, CONSUME_QUEUE_DIR)
    return ConsumeQueue(os.path.join(root, CONSUME_QUEUE_DIR, topic, str(q)), topic=topic, queue_id=q)


def _open_ext(root: str) -> ConsumeQueueExt:
    topic, q = _last_queue(root, CONSUME_QUEUE_EXT_DIR)
    return ConsumeQueueExt(os.path.join(root, CONSUME_QUEUE_EXT_DIR, topic, str(q)))


def _queue_files(kind: str) -> Callable[[str], list[str]]:
    def files(root: str) -> list[str]:
        topic, q = _last_queue(root, kind)
        return [path for _, path in list_queue_files(os.path.join(root, kind, topic, str(q)))]
    return files


def _index_files(root: str) -> list[str]:
    directory = os.path.join(root, INDEX_DIR)
    return [os.path.join(directory, n) for n in sorted(os.listdir(directory)) if n.isdigit()]


READERS: tuple[ReaderEntry, ...] = (
    ReaderEntry(
        "CommitLog",
        lambda root: CommitLog(os.path.join(root, COMMIT_LOG_DIR)),
        lambda root: [path for _, path in list_queue_files(os.path.join(root, COMMIT_LOG_DIR))],
        lambda log: [m.commit_log_offset for m in log.messages()],
    ),
    ReaderEntry(
        "ConsumeQueue",
        _open_consume_queue,
        _queue_files(CONSUME_QUEUE_DIR),
        lambda queue: queue.read().tolist(),
    ),
    ReaderEntry(
        "ConsumeQueueExt",
        _open_ext,
        _queue_files(CONSUME_QUEUE_EXT_DIR),
        lambda ext: [(address, unit) for address, unit in ext.units()],
    ),
    ReaderEntry(
        "IndexFiles",
        IndexFiles,
        _index_files,
        lambda index: [list(f.entries()) for f in index.files],
    ),
)
