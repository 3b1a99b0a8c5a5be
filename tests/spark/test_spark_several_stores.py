"""The ``rocketmq`` data source over several stores, a cluster's brokers (docs/reading.md#clusters):
``load([root, ...])`` and a glob, a ``broker`` column, each broker's rows what ``cq.Cluster`` gives."""
from __future__ import annotations

import shutil

import pytest
from helpers import DATA, replica_pair

import cq
from cq.writer.sample import SAMPLE_GROUPS, SAMPLE_TOPICS, generate_sample_store

pytestmark = pytest.mark.spark

SMALL = {"commit_log_file_size": 1 << 20, "ext_file_size": 1 << 16, "consume_queue_file_size": 20_000}


@pytest.fixture(scope="module")
def golden_brokers(tmp_path_factory):
    """Two copies of the golden store as two brokers; broker-b without GoldenPlainTopic."""
    base = tmp_path_factory.mktemp("golden-cluster")
    for name in ("broker-a", "broker-b"):
        shutil.copytree(DATA / "golden_store", base / name)
    for d in ("consumequeue", "consumequeue_ext"):
        shutil.rmtree(base / "broker-b" / d / "GoldenPlainTopic", ignore_errors=True)
    return base


@pytest.fixture(scope="module")
def sample_brokers(tmp_path_factory):
    base = tmp_path_factory.mktemp("sample-cluster")
    for name, seed in (("broker-a", 5), ("broker-b", 6)):
        generate_sample_store(base / name, messages=1500, seed=seed, **SMALL)
    return base


def test_several_roots_read_with_a_broker_column(spark, golden_brokers):
    roots = [str(golden_brokers / "broker-a"), str(golden_brokers / "broker-b")]
    df = spark.read.format("rocketmq").load(roots)
    assert df.columns[:2] == ["broker", "topic"]
    counts = {(r.broker, r.topic): r["count"] for r in df.groupBy("broker", "topic").count().collect()}
    # the topic broker-b does not hold is read where it is
    assert counts == {("broker-a", "GoldenFilterTopic"): 200, ("broker-a", "GoldenPlainTopic"): 100,
                      ("broker-b", "GoldenFilterTopic"): 200}
    plain = spark.read.format("rocketmq").option("topic", "GoldenPlainTopic").load(roots)
    assert {r.broker for r in plain.select("broker").distinct().collect()} == {"broker-a"}
    # a single store keeps its columns
    assert "broker" not in spark.read.format("rocketmq").load(roots[0]).columns


def test_a_glob_and_a_group_give_what_the_cluster_consumes(spark, golden_brokers):
    cluster = cq.Cluster(str(golden_brokers / "broker-*"))
    want = {(m.broker, m.queue_id, m.queue_offset) for m in cluster.consume("GoldenFilterTopic", "G", tags="TagA")}
    cluster.close()
    rows = (spark.read.format("rocketmq").option("topic", "GoldenFilterTopic").option("group", "G")
            .option("tags", "TagA").load(str(golden_brokers / "broker-*"))
            .select("broker", "queue_id", "queue_offset").collect())
    assert {tuple(r) for r in rows} == want and len(rows) == len(want) == 50


def test_a_registered_group_uses_each_brokers_registration(spark, sample_brokers):
    group = SAMPLE_GROUPS[0][0]
    topic = SAMPLE_TOPICS[0]
    cluster = cq.Cluster([sample_brokers / "broker-a", sample_brokers / "broker-b"])
    want = {(m.broker, m.queue_id, m.queue_offset) for m in cluster.consume(topic, group)}
    backlog = cq.backlog(cluster, topic, group)
    cluster.close()
    reader = spark.read.format("rocketmq").option("topic", topic).option("group", group)
    roots = [str(sample_brokers / "broker-a"), str(sample_brokers / "broker-b")]
    rows = reader.load(roots).select("broker", "queue_id", "queue_offset").collect()
    assert {tuple(r) for r in rows} == want and {r.broker for r in rows} == {"broker-a", "broker-b"}
    pending = reader.option("from_committed", "true").load(roots).count()
    assert pending == backlog.will_receive > 0


def test_a_bad_root_among_several_fails_at_load_naming_it(spark, golden_brokers, tmp_path):
    missing = str(tmp_path / "no-such-store")
    with pytest.raises(Exception, match="no-such-store"):
        spark.read.format("rocketmq").load([str(golden_brokers / "broker-a"), missing]).count()
    with pytest.raises(Exception, match="no topic 'NoTopic'"):
        spark.read.format("rocketmq").option("topic", "NoTopic").load(str(golden_brokers / "broker-*")).count()


def test_replicas_of_one_broker_read_the_replica_read_with_its_name(spark, tmp_path_factory):
    """A master and its slave (docs/reading.md#replicas): the master by default, the slave with the
    ``replica`` option, each with the broker's name; a replica that is none fails naming the option."""
    master, slave, _ = replica_pair(tmp_path_factory.mktemp("replicas"), **SMALL)
    group = SAMPLE_GROUPS[0][0]
    topic = SAMPLE_TOPICS[0]
    reader = spark.read.format("rocketmq").option("topic", topic).option("group", group)
    for option, root in ((None, master), (str(slave), slave)):
        alone = cq.Store(root)
        want = {("broker-x", m.queue_id, m.queue_offset) for m in alone.consume(topic, group)}
        alone.close()
        r = reader if option is None else reader.option("replica", option)
        rows = r.load([str(master), str(slave)]).select("broker", "queue_id", "queue_offset").collect()
        assert {tuple(x) for x in rows} == want and len(rows) == len(want) > 0
    with pytest.raises(Exception, match="rocketmq option 'replica': no replica is '/nowhere'"):
        reader.option("replica", "/nowhere").load([str(master), str(slave)]).count()
