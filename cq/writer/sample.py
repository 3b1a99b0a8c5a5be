"""Deterministic sample stores for demos, tests and benchmarks: :func:`generate_sample_store`.
"""
from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..format import (
    DEFAULT_CONSUME_QUEUE_FILE_SIZE,
    DEFAULT_EXT_FILE_SIZE,
)
from .config_writer import write_consumer_offsets, write_subscription_groups, write_topic_configs
from .writer import (
    BATCH_SIZE,
    COMPRESS_MSG_BODY_OVER_HOWMUCH,
    DEFAULT_STORE_HOST,
    SqlGroup,
    StoreWriter,
    check_int,
    compress_body,
)

__all__ = ["SAMPLE_GROUPS", "SAMPLE_TOPICS", "SampleStore", "generate_sample_store"]

# ------------------------------------------------------------ sample stores
#: Topics of the sample store: the first one carries the SQL92 groups.
SAMPLE_TOPICS = ("SampleTopic", "OrderTopic", "AuditTopic")
#: Tags of the sample store, most popular first (Zipf-like weights).
SAMPLE_TAGS = ("TagA", "TagB", "TagC", "TagD", "TagE", "TagF", "TagG", "TagH")
SAMPLE_REGIONS = ("cn-hangzhou", "cn-beijing", "us-east-1", "eu-central-1", "ap-southeast-1")
SAMPLE_COLORS = ("red", "green", "blue", "black", "grün")
#: The SQL92 groups registered on the sample store's main topic: ``(group, sql)``.
SAMPLE_GROUPS = (
    ("GID_PRIORITY", "priority >= 4 AND region IN ('cn-hangzhou', 'cn-beijing')"),
    ("GID_RED_CHEAP", "color = 'red' AND price < 20.0"),
    ("GID_TAGA_OR_EU", "TAGS = 'TagA' OR region = 'eu-central-1'"),
)
#: Born timestamp of the first sample message (2023-11-14T22:13:20Z).
SAMPLE_EPOCH_MS = 1_700_000_000_000
#: bornTime of the sample groups' filter data: registered a minute before the first message,
#: so every message's bitmap carries their bits (``isMsgInLive``).
SAMPLE_GROUPS_BORN_MS = SAMPLE_EPOCH_MS - 60_000
#: How far through each queue of the main topic each sample group has committed its offset
#: (``consumerOffset.json``), in group order: so ``rmqfilter backlog`` has a backlog to show.
SAMPLE_COMMITTED_FRACTIONS = (0.5, 0.75, 0.9)


@dataclass(frozen=True)
class SampleStore:
    """Description of a store written by :func:`generate_sample_store`.

    Attributes
    ----------
    root : str
        Store root directory.
    messages : int
        Messages written.
    seed : int
        Seed the contents derive from.
    topics : dict of str to int
        Topic -> number of queues.
    main_topic : str
        The topic with the SQL92 groups (and ext bitmaps).
    groups : list of SqlGroup
        Groups registered on ``main_topic``.
    tags : list of str
        Tag values in use, most popular first (about 5 % of messages have none).
    properties : list of str
        User property names (``region``, ``price``, ``color``, ``priority``).
    commit_log_file_size, consume_queue_file_size, ext_file_size : int
        File sizes of the store.
    """

    root: str
    messages: int
    seed: int
    topics: dict[str, int]
    main_topic: str
    groups: list[SqlGroup]
    tags: list[str]
    properties: list[str]
    commit_log_file_size: int
    consume_queue_file_size: int
    ext_file_size: int

    def to_dict(self) -> dict[str, Any]:
        """A JSON-friendly dict of this description."""
        return {
            "root": self.root,
            "messages": self.messages,
            "seed": self.seed,
            "topics": dict(self.topics),
            "main_topic": self.main_topic,
            "groups": [{"topic": g.topic, "group": g.group, "sql": g.sql} for g in self.groups],
            "tags": list(self.tags),
            "properties": list(self.properties),
            "commit_log_file_size": self.commit_log_file_size,
            "consume_queue_file_size": self.consume_queue_file_size,
            "ext_file_size": self.ext_file_size,
        }


def _zipf_weights(n: int, s: float = 1.1) -> np.ndarray:
    w = 1.0 / np.arange(1, n + 1, dtype=np.float64) ** s
    return w / w.sum()


def _sample_messages(
    count: int, seed: int, topics: Sequence[str], queues: Mapping[str, int], chunk: int = BATCH_SIZE
) -> Iterable[dict[str, Any]]:
    """Deterministic sample messages, generated a chunk at a time with numpy."""
    rng = np.random.default_rng(seed)
    topic_w = np.array([0.7] + [0.3 / (len(topics) - 1)] * (len(topics) - 1)) if len(topics) > 1 else np.ones(1)
    tag_w = _zipf_weights(len(SAMPLE_TAGS))
    region_w = _zipf_weights(len(SAMPLE_REGIONS), 0.8)
    color_w = np.array([0.3, 0.25, 0.2, 0.15, 0.1])
    priority_w = np.array([0.4, 0.3, 0.15, 0.1, 0.05])
    producers = [f"192.168.{seed % 200}.{10 + i}:{40000 + 97 * i}" for i in range(8)]
    pid = 1000 + seed % 50000
    # UNIQ_KEY: producer IP, pid, class-loader hash, then per message ms-in-month and counter (docs/formats.md#properties)
    uniq_prefix = f"C0A8{seed % 200:02X}0A{pid:04X}{seed:08X}"
    priorities = [str(p) for p in range(6)]
    for first in range(0, count, chunk):
        n = min(chunk, count - first)
        topic_i = rng.choice(len(topics), size=n, p=topic_w).tolist()
        queue_r = rng.integers(0, 1 << 30, size=n).tolist()
        tag_i = np.where(rng.random(n) >= 0.05, rng.choice(len(SAMPLE_TAGS), size=n, p=tag_w), -1).tolist()
        region_i = rng.choice(len(SAMPLE_REGIONS), size=n, p=region_w).tolist()
        color_i = np.where(rng.random(n) >= 0.1, rng.choice(len(SAMPLE_COLORS), size=n, p=color_w), -1).tolist()
        prices = [f"{p:.2f}" for p in rng.lognormal(3.0, 0.8, size=n).tolist()]
        priority = (rng.choice(5, size=n, p=priority_w) + 1).tolist()
        delay = rng.integers(0, 20, size=n).tolist()
        producer_i = rng.integers(0, len(producers), size=n).tolist()
        # ~1 % of bodies are large attachments the producer compresses (>= 4096 bytes, ZLIB level 5)
        large = np.where(rng.random(n) < 0.01, rng.integers(COMPRESS_MSG_BODY_OVER_HOWMUCH, 20_000, size=n),
                         0).tolist()
        for j in range(n):
            i = first + j
            topic = topics[topic_i[j]]
            region = SAMPLE_REGIONS[region_i[j]]
            price = prices[j]
            born = SAMPLE_EPOCH_MS + (i >> 2)
            props = {
                "UNIQ_KEY": f"{uniq_prefix}{born & 0xFFFFFFFF:08X}{i & 0xFFFF:04X}",
                "region": region,
                "price": price,
                "priority": priorities[priority[j]],
                "WAIT": "true",
            }
            color = color_i[j]
            if color >= 0:
                props["color"] = SAMPLE_COLORS[color]
            tag = tag_i[j]
            body = f'{{"order":{i},"amount":{price},"region":"{region}"}}'.encode()
            sys_flag = 0
            if large[j]:
                body = (body[:-1] + b',"attachment":"' + (b"%08d;" % i) * (large[j] // 9) + b'"}')
                body, sys_flag = compress_body(body)
            yield {
                "topic": topic,
                "queue_id": queue_r[j] % queues[topic],
                "body": body,
                "sys_flag": sys_flag,
                "properties": props,
                "tags": SAMPLE_TAGS[tag] if tag >= 0 else None,
                "keys": f"order-{i}",
                "born_timestamp": born,
                "store_timestamp": born + delay[j],
                "born_host": producers[producer_i[j]],
            }


def generate_sample_store(
    root: str | os.PathLike,
    *,
    messages: int = 100_000,
    seed: int = 0,
    topics: Sequence[str] | None = None,
    queues: int = 4,
    commit_log_file_size: int = 64 * 1024 * 1024,
    consume_queue_file_size: int = DEFAULT_CONSUME_QUEUE_FILE_SIZE,
    ext_file_size: int = DEFAULT_EXT_FILE_SIZE,
    store_host: str = DEFAULT_STORE_HOST,
    progress: Callable[[int], None] | None = None,
) -> SampleStore:
    """Write a deterministic sample broker store for demos and benchmarks.

    The same ``(messages, seed, topics, queues, sizes)`` always gives the same
    bytes. About 70 % of the messages go to the main topic (the first of
    ``topics``, ``queues`` queues), the rest spread over the other topics (two
    queues each). Tags follow Zipf-like popularity (``TagA`` most common, ~5 %
    untagged); properties ``region`` (skewed), ``price`` (log-normal, two
    decimals), ``color`` (missing for ~10 %), ``priority`` (1-5, mostly low),
    ``KEYS``, ``UNIQ_KEY`` and ``WAIT``; the broker adds ``CLUSTER``. Bodies
    are small JSON documents; about 1 % carry a 4-20 KB attachment and are
    ZLIB-compressed as the producer does (``COMPRESSED_FLAG``). The three
    :data:`SAMPLE_GROUPS` are registered on the main topic, so its
    ConsumeQueueExt units carry their bitmaps (every topic has ext units).
    ``config/`` holds what a broker serving them would persist: ``consumerFilter.json``
    (bornTime :data:`SAMPLE_GROUPS_BORN_MS`), ``consumerOffset.json`` (each group committed
    :data:`SAMPLE_COMMITTED_FRACTIONS` of the way through each queue), ``subscriptionGroup.json``
    and ``topics.json``.

    Parameters
    ----------
    root : path
        A directory that does not hold a store yet.
    messages : int
        Number of messages (>= 0).
    seed : int
        Seed of the generator (>= 0).
    topics : sequence of str, optional
        Topic names; default :data:`SAMPLE_TOPICS`.
    queues : int
        Queues of the main topic (>= 1).
    commit_log_file_size : int, default 64 MiB
        Smaller than the broker's 1 GiB so that a sample spans several files
        (Spark reads one partition per file).
    consume_queue_file_size, ext_file_size : int
        Broker defaults.
    store_host : str
        STOREHOST of every record.
    progress : callable, optional
        Called with the number of messages written after each batch.

    Returns
    -------
    SampleStore

    Examples
    --------
    >>> info = generate_sample_store("/tmp/sample", messages=10_000, seed=7)  # doctest: +SKIP
    >>> [g.group for g in info.groups]  # doctest: +SKIP
    ['GID_PRIORITY', 'GID_RED_CHEAP', 'GID_TAGA_OR_EU']
    """
    messages = check_int("messages", messages, 0, 2**40)
    seed = check_int("seed", seed, 0, 2**32 - 1)
    queues = check_int("queues", queues, 1, 1 << 16)
    topics = list(SAMPLE_TOPICS if topics is None else topics)
    if not topics:
        raise ValueError("topics must name at least one topic")
    if len(set(topics)) != len(topics):
        raise ValueError(f"topics must be distinct, got {topics}")
    queue_counts = {t: (queues if i == 0 else 2) for i, t in enumerate(topics)}
    with StoreWriter(
        root,
        commit_log_file_size=commit_log_file_size,
        consume_queue_file_size=consume_queue_file_size,
        ext_file_size=ext_file_size,
        enable_ext=True,
        store_host=store_host,
    ) as writer:
        for t in topics:
            writer.topic_info(t)
        groups = [writer.register_group(topics[0], group, sql, born_time=SAMPLE_GROUPS_BORN_MS)
                  for group, sql in SAMPLE_GROUPS]
        writer.append_many(_sample_messages(messages, seed, topics, queue_counts), progress=progress)
        # the broker's other config files, as a broker serving these groups would have them
        write_consumer_offsets(root, {
            (topics[0], g.group): {q: int(writer.queue_max_offset(topics[0], q) * fraction)
                                   for q in range(queue_counts[topics[0]])}
            for g, fraction in zip(groups, SAMPLE_COMMITTED_FRACTIONS)
        }, timestamp=SAMPLE_EPOCH_MS)
        write_subscription_groups(root, [g.group for g in groups], timestamp=SAMPLE_EPOCH_MS)
        write_topic_configs(root, queue_counts, timestamp=SAMPLE_EPOCH_MS)
    return SampleStore(
        root=os.fspath(root),
        messages=messages,
        seed=seed,
        topics=queue_counts,
        main_topic=topics[0],
        groups=groups,
        tags=list(SAMPLE_TAGS),
        properties=["region", "price", "color", "priority"],
        commit_log_file_size=writer.commit_log_file_size,
        consume_queue_file_size=writer.consume_queue_file_size,
        ext_file_size=writer.ext_file_size,
    )
