"""The ``compaction`` scenario: a compaction topic (``cleanup.policy=COMPACTION``) served from the
broker's CompactionStore (docs/formats.md#compaction-store, docs/reading.md#compaction-topics).

One broker with small compaction files (so its compaction log rolls every few messages) and a
compaction round every two to three seconds: messages with repeated KEYS, mixed tags and a
property are sent to a two-queue compaction topic, the broker compacts the rolled files, and only
then do tag and SQL92 groups subscribe and read the topic from its first offset. A second batch
follows once they stopped, is compacted too, the store is copied, and the groups drain the rest.
``broker.json`` gets ``compaction`` = ``{topic, checkpoint}`` (the position checkpoint's text at the
copy)."""
from __future__ import annotations

import random
import time
from pathlib import Path

COMPACTION_TOPIC = "CompactTopic"
COMPACTION_GROUPS = {
    "GID_COMPACT_STAR": ("TAG", "*"),
    "GID_COMPACT_TAG": ("TAG", "TagA"),
    "GID_COMPACT_SQL": ("SQL92", "a > 5"),
    "GID_COMPACT_SQL_TAGS": ("SQL92", "TAGS = 'TagB'"),
}
#: The message keys: few, so most are replaced; a two-key KEYS value is one key of its own.
KEYS = [["k0"], ["k1"], ["k2"], ["k3"], ["k4"], ["k5"], ["k1", "k2"]]
CHECKPOINT = Path("compaction") / "position-checkpoint"


def compaction_messages(rng: random.Random, start: int, n: int) -> list[dict]:
    """``n`` messages with keys from :data:`KEYS`, tags TagA, TagB or none, and ``a`` (mostly)."""
    out = []
    for i in range(start, start + n):
        props = {"a": str(rng.randrange(0, 11))} if rng.random() < 0.85 else {}
        out.append({"topic": COMPACTION_TOPIC, "tags": rng.choice(["TagA", "TagB", None]),
                    "keys": rng.choice(KEYS), "properties": props, "body": f"compaction message {i}"})
    return out


def wait_compacted(h, timeout_s: float = 90) -> str:
    """Wait until the broker's compaction of both queues has settled: the position checkpoint names
    both queues and has not changed for two compaction rounds. Returns its text."""
    path = h.store_root("broker-a") / CHECKPOINT
    deadline = time.time() + timeout_s
    last, since = None, time.time()
    while time.time() < deadline:
        text = path.read_text() if path.exists() else ""
        if text != last:
            last, since = text, time.time()
        elif all(f'"{COMPACTION_TOPIC}_{q}"' in text for q in (0, 1)) and time.time() - since > 7:
            return text
        time.sleep(0.5)
    raise RuntimeError(f"the broker's compaction did not settle in {timeout_s:.0f} s (checkpoint: {last!r})")


def scenario_compaction(h) -> None:
    """See the module docstring."""
    h.start_namesrv()
    h.add_broker("broker-a", enablePropertyFilter="true", flushConsumerOffsetInterval=500,
                 mappedFileSizeCommitLog=64 * 1024,     # the store is small enough for tests/data
                 # compaction files of 10 units (9 and an end unit) and logs of 4140 bytes: a file
                 # rolls every 9 messages, and every file but the last is compacted
                 compactionCqMappedFileSize=46 * 10, compactionMappedFileSize=4096,
                 compactionScheduleInternal=1000, compactionThreadNum=1, maxOffsetMapSize=1 << 20)
    h.start_broker("broker-a")
    h.start_client()
    h.create_topic(COMPACTION_TOPIC, 2, attributes={"+cleanup.policy": "COMPACTION"})
    rng = random.Random(39)
    groups = list(COMPACTION_GROUPS)
    h.send(compaction_messages(rng, 0, 120))
    wait_compacted(h)
    for g, (type_, expression) in COMPACTION_GROUPS.items():
        h.subscribe(g, COMPACTION_TOPIC, type_, expression, "live")
    h.drain(groups)
    h.unsubscribe(groups)
    h.send(compaction_messages(rng, 1000, 60))
    checkpoint = wait_compacted(h)
    h.snapshot()
    for g, (type_, expression) in COMPACTION_GROUPS.items():
        h.subscribe(g, COMPACTION_TOPIC, type_, expression, "drain")
    h.drain(groups)
    h.unsubscribe(groups)
    h.extra["compaction"] = {"topic": COMPACTION_TOPIC, "checkpoint": checkpoint}
