"""How a store-file reader declares itself to the registry (docs/contributing.md#add-a-reader).

A reader module ends with ``READERS = (ReaderEntry(...),)``; ``cq/readers/registry.py`` collects
those tuples from every module of ``cq.readers``. This module imports nothing from the readers,
so every reader module can import it.
"""
from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ..format import list_queue_files

__all__ = ["ReaderEntry", "last_queue", "queue_files"]


@dataclass(frozen=True)
class ReaderEntry:
    """One reader: ``open(root)`` over a store directory, the ``files(root)`` it reads there,
    and ``read_all(reader)``, everything it reads as plain values (equal for equal files).
    ``store`` names the store of ``tests/data`` the generic tests read it over (a reader of a
    layout the golden store does not hold, such as a DLedger CommitLog, names its own)."""

    name: str
    open: Callable[[str], Any]
    files: Callable[[str], list[str]]
    read_all: Callable[[Any], Any]
    store: str = "golden_store"

    def __repr__(self) -> str:
        return self.name


def last_queue(root: str, kind: str) -> tuple[str, int]:
    """The first topic's highest queue of ``root/kind`` (the golden store's GoldenFilterTopic/1)."""
    top = os.path.join(root, kind)
    topic = min(os.listdir(top))
    queue_id = max(int(q) for q in os.listdir(os.path.join(top, topic)) if q.isdigit())
    return topic, queue_id


def queue_files(kind: str) -> Callable[[str], list[str]]:
    """``files(root)`` for a per-queue reader: the files of :func:`last_queue`'s queue."""
    def files(root: str) -> list[str]:
        topic, q = last_queue(root, kind)
        return [path for _, path in list_queue_files(os.path.join(root, kind, topic, str(q)))]
    return files
