"""``find --spark`` (pyspark_udfs.find): the rocketmq data source gives find's rows, on one store and a cluster."""
from __future__ import annotations

import json
from contextlib import closing

import pytest
from helpers import DATA

import cq
from cq.analyses.search import find
from pyspark_udfs.find import find_spark

GOLDEN = str(DATA / "golden_store")
TOPIC = "GoldenFilterTopic"


def same(rows) -> list[tuple]:
    return [(r.broker, r.topic, r.queue_id, r.queue_offset, r.commit_log_offset, r.msg_id, r.uniq_key, r.keys, r.tags,
             r.store_timestamp, r.born_timestamp, r.state) for r in rows]


@pytest.mark.spark
def test_find_on_spark_gives_finds_rows(spark):
    with open(DATA / "golden_store.jsonl", encoding="utf-8") as f:
        times = sorted(json.loads(line)["storeTimestamp"] for line in f)
    questions = [
        {"topic": TOPIC, "between": (times[50], times[200]), "where": "a > 5"},
        {"topic": TOPIC, "key": "order-115"},
        {"topic": TOPIC, "uniq_key": "FD0000000000000000000000000000024D885FFD2B276BB0AC90003F"},
        {"topic": TOPIC, "between": (times[0], times[-1]), "group": "GID_TAGS", "tags": "TagA || TagB"},
        {"msg_id": "0A00030700002A9F0000000000011184"},
    ]
    with closing(cq.Store(GOLDEN)) as store:
        for q in questions:
            local = find(store, now_ms=0, **q)
            on_spark = find_spark(GOLDEN, spark=spark, now_ms=0, **q)
            assert same(on_spark.rows) == same(local.rows) and local.rows, q
            assert {r.found_by for r in on_spark.rows} == {"spark"}
