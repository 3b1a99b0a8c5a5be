"""The ``tiered`` scenario: a broker with RocketMQ's tiered store on a POSIX directory.

The broker runs ``TieredMessageStore`` (``messageStorePlugIn``) with the POSIX back end
(``PosixFileSegment``) in ``work/broker-a/tier``: its dispatcher copies each queue's messages into
the tier's flat CommitLog and ConsumeQueue files (docs/formats.md#tiered-storage). Small CommitLog
files and ``fileReservedTime`` 0 let the admin's delete command expire the local files while the tier
keeps their messages; consumers then read below the local minimum, which the broker serves from the
tier (docs/reading.md#tiered-storage).

Phases: two groups (a tag group and a SQL92 group, registered before any message, so the local
ConsumeQueueExt holds their bitmaps) receive a first batch and commit; a second batch follows; once the
tier holds every queue to its end the local files are expired and a short tail is sent; the store and
the tier are copied (``stores/broker-a``, ``stores/broker-a-tier``); then the two groups drain from
their committed offsets (below the local minimum now) and three new groups read from the first offset.
``broker.json`` gets ``tiered`` = ``{topic, tier, local_min_offsets}``.
"""
from __future__ import annotations

import hashlib
import random
import shutil
import time
from pathlib import Path

from run import Harness, HarnessError

TIERED_TOPIC = "TieredTopic"
#: Groups that receive the first batch, commit, and drain the rest after the copy (backlog checks).
TIERED_EARLY_GROUPS = {
    "GID_TIER_TAG": ("TAG", "TagA || TagB"),
    "GID_TIER_SQL": ("SQL92", "a > 3 AND region = 'eu'"),
}
#: Groups created after the local files expired: they read from the first offset (consume checks).
TIERED_LATE_GROUPS = {
    "GID_TIER_STAR": ("TAG", "*"),
    "GID_TIER_TAG_C": ("TAG", "TagC || TagA"),
    "GID_TIER_SQL_TAGS": ("SQL92", "TAGS IN ('TagB') OR a = 1"),
}
TIER_CLUSTER = "HarnessCluster"


def tiered_messages(rng: random.Random, start: int, n: int) -> list[dict]:
    """Messages with tags and the two properties the SQL92 groups read (some absent)."""
    out = []
    for i in range(start, start + n):
        props = {}
        if rng.random() < 0.9:
            props["a"] = str(rng.randrange(0, 10))
        if rng.random() < 0.8:
            props["region"] = rng.choice(["eu", "us", "cn"])
        out.append({"topic": TIERED_TOPIC, "tags": rng.choice(["TagA", "TagB", "TagC", None]),
                    "keys": [f"tier-{i}"], "properties": props, "body": f"tiered message {i} " + "y" * 150})
    return out


def tier_queue_dir(tier: Path, broker: str, topic: str, queue_id: int) -> Path:
    """A queue's directory in a POSIX tier (docs/formats.md#tiered-storage)."""
    cluster = f"{hashlib.md5(TIER_CLUSTER.encode()).hexdigest()[:8]}_{TIER_CLUSTER}"
    return tier / cluster / broker / topic / str(queue_id)


def tier_end(tier: Path, broker: str, topic: str, queue_id: int) -> int:
    """The queue offset the tier's ConsumeQueue files end at (0 when it has none)."""
    d = tier_queue_dir(tier, broker, topic, queue_id) / "CONSUME_QUEUE"
    files = sorted(d.iterdir(), key=lambda f: int(f.name[-20:])) if d.is_dir() else []
    if not files:
        return 0
    last = files[-1]
    return (int(last.name[-20:]) + last.stat().st_size) // 20


def scenario_tiered(h: Harness) -> None:
    """See the module docstring."""
    tier = h.work / "broker-a" / "tier"
    tier.mkdir(parents=True, exist_ok=True)
    h.start_namesrv()
    h.add_broker("broker-a", enablePropertyFilter="true", enableCalcFilterBitMap="true",
                 enableConsumeQueueExt="true",
                 mappedFileSizeCommitLog=64 * 1024, mappedFileSizeConsumeQueue=20 * 100,
                 fileReservedTime=0, deleteWhen=f"{(time.localtime().tm_hour + 12) % 24:02d}",
                 cleanResourceInterval=500, deleteCommitLogFilesInterval=10, deleteConsumeQueueFilesInterval=10,
                 flushConsumerOffsetInterval=500,
                 messageStorePlugIn="org.apache.rocketmq.tieredstore.TieredMessageStore",
                 tieredBackendServiceProvider="org.apache.rocketmq.tieredstore.provider.PosixFileSegment",
                 tieredStoreFilePath=str(tier), tieredStorageLevel="NOT_IN_DISK",
                 tieredStoreGroupCommit="false",
                 # small tier segments: the reader crosses segment ends
                 tieredStoreCommitLogMaxSize=48 * 1024, tieredStoreConsumeQueueMaxSize=20 * 150)
    h.start_broker("broker-a")
    h.start_client()
    h.create_topic(TIERED_TOPIC, 2)
    rng = random.Random(39)
    for g, (type_, expression) in TIERED_EARLY_GROUPS.items():
        h.subscribe(g, TIERED_TOPIC, type_, expression, "live")
    time.sleep(3)       # the SQL92 filter registered before the first message: its bitmaps are computed
    h.send(tiered_messages(rng, 0, 200))
    h.drain(list(TIERED_EARLY_GROUPS))
    h.unsubscribe(list(TIERED_EARLY_GROUPS))
    h.send(tiered_messages(rng, 200, 900))

    def local_ends() -> dict[int, int]:
        return {r["queue_id"]: r["max_offset"] for r in h.client("topic_stats", topic=TIERED_TOPIC)["queues"]}

    # the tier's dispatcher copies every 20 s: wait until it holds every queue to its end
    ends = local_ends()
    deadline = time.time() + 150
    while any(tier_end(tier, "broker-a", TIERED_TOPIC, q) < e for q, e in ends.items()):
        if time.time() > deadline:
            got = {q: tier_end(tier, "broker-a", TIERED_TOPIC, q) for q in ends}
            raise HarnessError(f"tiered: the tier did not catch up in 150 s (tier ends {got}, local {ends})")
        time.sleep(0.5)

    commitlog = h.store_root("broker-a") / "commitlog"
    consumequeue = h.store_root("broker-a") / "consumequeue" / TIERED_TOPIC
    first_file = min(commitlog.iterdir()).name
    h.client("delete_expired_commitlog", addr=h.brokers["broker-a"]["addr"])
    deadline = time.time() + 60
    last, since = None, time.time()
    while True:
        state = (min(f.name for f in commitlog.iterdir()),
                 {q.name: min(f.name for f in q.iterdir()) for q in consumequeue.iterdir()})
        if state != last:
            last, since = state, time.time()
        moved = state[0] != first_file and all(int(f) > 0 for f in state[1].values())
        if moved and time.time() - since >= 1.5:
            break
        if time.time() > deadline:
            raise HarnessError(f"tiered: the broker did not expire its local files in 60 s ({state})")
        time.sleep(0.2)
    h.send(tiered_messages(rng, 1100, 60))     # a tail the tier may not hold yet when the store is copied
    time.sleep(1.5)                            # the broker persists consumerOffset.json

    # the snapshot: progress, the admin's offsets (min of local and tier), clean stop, both copies
    h.record_progress()
    rows = h.client("topic_stats", topic=TIERED_TOPIC)["queues"]
    h.topics[TIERED_TOPIC] = sorted(rows, key=lambda r: (r["broker"], r["queue_id"]))
    h.snapshot_ms = int(time.time() * 1000)
    h.stop_broker("broker-a")
    h.copy_store("broker-a")
    # the tier without its index segments (a preallocated 39 MB file rmqfilter does not read)
    shutil.copytree(tier, h.out / "stores" / "broker-a-tier", ignore=shutil.ignore_patterns("INDEX"))
    h.copied_ms = int(time.time() * 1000)
    local_min = {q.name: int(min(f.name for f in q.iterdir())) // 20 for q in consumequeue.iterdir()}
    h.start_broker("broker-a")

    groups = {**TIERED_EARLY_GROUPS, **TIERED_LATE_GROUPS}
    for g, (type_, expression) in groups.items():
        h.subscribe(g, TIERED_TOPIC, type_, expression, "drain")
    h.drain(list(groups))
    h.unsubscribe(list(groups))
    h.extra["tiered"] = {"topic": TIERED_TOPIC, "tier": "stores/broker-a-tier", "cluster": TIER_CLUSTER,
                         "local_min_file_offsets": local_min}
