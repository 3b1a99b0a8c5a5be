"""The data source looks groups up in consumerFilter.json and reads from their committed offsets.

Counts from Spark equal the in-process ones: ``Store.consume`` for a looked-up group (bornTime
and bloom data included) and ``cq.backlog`` for ``from_committed=true``.
"""
from __future__ import annotations

import json
import shutil

import pytest
from helpers import DATA

import bloom
import cq
from cq.writer.config_writer import write_consumer_filters, write_consumer_offsets
from cq.writer.sample import SAMPLE_GROUPS, generate_sample_store

pytestmark = pytest.mark.spark

SMALL = {"commit_log_file_size": 1 << 20, "ext_file_size": 1 << 16, "consume_queue_file_size": 20_000}
TOPIC = "GoldenFilterTopic"
SQL_B = "TAGS = 'TagA' OR color IN ('red', 'grün')"


@pytest.fixture(scope="module")
def sample(tmp_path_factory):
    return generate_sample_store(tmp_path_factory.mktemp("sb") / "store", messages=3000, seed=5, **SMALL)


@pytest.fixture(scope="module")
def golden_b(tmp_path_factory):
    """The golden store with GID_SQL_B registered amid the traffic: older bitmaps are not used."""
    root = tmp_path_factory.mktemp("gb") / "store"
    shutil.copytree(DATA / "golden_store", root)
    with open(DATA / "golden_store.jsonl", encoding="utf-8") as f:
        times = sorted(json.loads(line)["storeTimestamp"] for line in f)
    born = times[len(times) // 2]
    write_consumer_filters(root, [cq.RegisteredFilter("GID_SQL_B", TOPIC, SQL_B, "SQL92", born, 0,
                                                      bloom.BloomFilter().generate(f"GID_SQL_B#{TOPIC}"), born, True)])
    write_consumer_offsets(root, {(TOPIC, "GID_SQL_B"): {0: 30}}, timestamp=0)
    return root


def test_from_committed_counts_equal_store_backlog(spark, sample):
    from pyspark.sql import functions as F

    store = cq.Store(sample.root)
    for group, _sql in SAMPLE_GROUPS:
        want = cq.backlog(store, sample.main_topic, group)
        df = (spark.read.format("rocketmq").option("topic", sample.main_topic).option("group", group)
              .option("from_committed", "true").load(sample.root))
        per_queue = {r["queue_id"]: r["n"] for r in df.groupBy("queue_id").agg(F.count("*").alias("n")).collect()}
        assert per_queue == {q.queue_id: q.will_receive for q in want.queues if q.will_receive}
        assert sum(per_queue.values()) == want.will_receive > 0
        low = df.groupBy("queue_id").agg(F.min("queue_offset").alias("lo")).collect()
        committed = store.committed_offsets(group, sample.main_topic)
        assert all(r["lo"] >= committed[r["queue_id"]] for r in low)
    store.close()


def test_group_alone_carries_born_time_and_equals_consume(spark, golden_b):
    from pyspark_udfs import job

    store = cq.Store(golden_b)
    looked_up = store.consume(TOPIC, "GID_SQL_B")
    delivered = sorted(m.commit_log_offset for m in looked_up)
    df = spark.read.format("rocketmq").option("topic", TOPIC).option("group", "GID_SQL_B").load(str(golden_b))
    assert sorted(r["commit_log_offset"] for r in df.select("commit_log_offset").collect()) == delivered
    # the scan job counts each layer with the registered bornTime: fewer units pruned than with the SQL
    # given with bornTime 0 (given without one, the registered expression is the registration's filter)
    given = store.consume(TOPIC, "GID_SQL_B", sql=SQL_B, born_time=0)
    list(given)
    as_registered = store.consume(TOPIC, "GID_SQL_B", sql=SQL_B)
    list(as_registered)
    assert as_registered.stats == looked_up.stats
    (scan,) = [job.scan(spark, str(golden_b), TOPIC, g) for g in job.registered_group_scans(str(golden_b), TOPIC)]
    assert scan.passed_consume_queue == looked_up.stats.passed_consume_queue > given.stats.passed_consume_queue
    assert scan.delivered == len(delivered) == given.stats.delivered
    # from the committed offset: queue 0 from 30, queue 1 (nothing committed) not read
    backlog = cq.backlog(store, TOPIC, "GID_SQL_B")
    n = (spark.read.format("rocketmq").option("topic", TOPIC).option("group", "GID_SQL_B")
         .option("from_committed", "true").load(str(golden_b)).count())
    assert n == backlog.will_receive == backlog.queues[0].will_receive
    store.close()


@pytest.mark.parametrize("options, message", [
    ({"group": "GID_NOPE", "topic": TOPIC}, "group 'GID_NOPE' has no SQL92 filter registered"),
    ({"group": "GID_SQL_B"}, "without 'sql' or 'tags' needs 'topic'"),
    ({"topic": TOPIC, "from_committed": "true"}, "from_committed=true needs 'group' and 'topic'"),
    ({"topic": TOPIC, "group": "GID_SQL_B", "from_committed": "maybe"}, "expected true or false"),
])
def test_bad_options_name_the_option(spark, golden_b, options, message):
    reader = spark.read.format("rocketmq")
    for k, v in options.items():
        reader = reader.option(k, v)
    with pytest.raises(Exception, match=message):
        reader.load(str(golden_b)).count()


def test_cli_scan_all_groups_uses_their_registrations(spark, sample, tmp_path, capsys):
    import rmqfilter

    summary = tmp_path / "summary.json"
    assert rmqfilter.main(["scan", sample.root, "--topic", sample.main_topic, "--all-groups", "--layer2", "python",
                     "--json", str(summary)]) == 0
    printed = capsys.readouterr().out
    results = {r["group"]: r for r in json.loads(summary.read_text())}
    assert list(results) == [g for g, _ in SAMPLE_GROUPS]
    store = cq.Store(sample.root)
    for group, _sql in SAMPLE_GROUPS:
        result = store.consume(sample.main_topic, group)
        list(result)
        got, s = results[group], result.stats
        assert group in printed and f"{group}: layer 2: python" in printed
        assert (got["passed_consume_queue"], got["delivered"]) == (s.passed_consume_queue, s.delivered)
    store.close()
