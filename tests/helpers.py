"""Plain helpers the tests share: where the test data lives and how to read it.

Tests import these (``from helpers import DATA, load_jsonl``); fixtures live in
``conftest.py``, which pytest loads by itself and no test imports.
"""
from __future__ import annotations

import json
from pathlib import Path

from rmqfilter_engine import PUREPYTHON

__all__ = ["DATA", "PUREPYTHON", "load_jsonl", "patch_file"]

#: The conformance cases and the golden store (copied from ../shared so the suite stands alone).
DATA = Path(__file__).resolve().parent / "data"


def load_jsonl(name: str) -> list[dict]:
    """The records of ``tests/data/<name>``, one JSON object per line."""
    with open(DATA / name, encoding="utf-8") as f:
        return [json.loads(line) for line in f]


def patch_file(path, offset: int, data: bytes) -> None:
    """Overwrite the bytes of ``path`` at ``offset`` with ``data`` (to corrupt a store copy)."""
    with open(path, "r+b") as f:
        f.seek(offset)
        f.write(data)


class ConnectCallError(RuntimeError):
    """An exception raised under Spark Connect, carried back from the client process as text."""

    def __init__(self, type_name: str, message: str, remote_traceback: str) -> None:
        super().__init__(f"{type_name}: {message}\n\n(in the Spark Connect client process)\n{remote_traceback}")
        self.type_name, self.message, self.remote_traceback = type_name, message, remote_traceback

    def __reduce__(self):
        return type(self), (self.type_name, self.message, self.remote_traceback)


def body_start(message) -> int:
    """Where ``message``'s body starts, counted from its record's first byte (the body comes
    before TOPICLENGTH, the topic, PROPERTIESLENGTH and the properties: docs/formats.md)."""
    from cq import format as fmt

    topic_len_width = 2 if message.magic_code == fmt.MESSAGE_MAGIC_CODE_V2 else 1
    return (message.store_size - len(message.body) - topic_len_width - len(message.topic.encode()) - 2
            - len(fmt.encode_properties(message.properties).encode()))
