"""Two brokers' stores of one cluster for the tests of commands that read several stores as one
(docs/reading.md#clusters): sample stores of different seeds, each root a directory named
``store``, so each broker's name can only come from its own ``rmq_sys_SYNC_BROKER_MEMBER_<name>``
topic in ``config/topics.json``, as a 5.x broker keeps it."""
from __future__ import annotations

import json
from pathlib import Path

from cq.writer.sample import generate_sample_store

SMALL = {"commit_log_file_size": 1 << 20, "ext_file_size": 1 << 16, "consume_queue_file_size": 20_000}
BROKERS = ("east", "west")


def write_brokers(base: Path, *, messages: int = 1200, **sizes: int) -> list[Path]:
    """The store roots of brokers :data:`BROKERS` under ``base`` (``base/<name>/store``), in that order.

    ``sizes``: file sizes in place of :data:`SMALL`'s (``commit_log_file_size``...), for stores of
    several files (a test that expires the oldest)."""
    roots = []
    for seed, name in enumerate(BROKERS, 11):
        root = base / name / "store"
        generate_sample_store(root, messages=messages, seed=seed, **{**SMALL, **sizes})
        topics = root / "config" / "topics.json"
        doc = json.loads(topics.read_text(encoding="utf-8"))
        member = f"rmq_sys_SYNC_BROKER_MEMBER_{name}"
        doc["topicConfigTable"][member] = {"topicName": member, "readQueueNums": 1, "writeQueueNums": 1}
        topics.write_text(json.dumps(doc), encoding="utf-8")
        roots.append(root)
    return roots

