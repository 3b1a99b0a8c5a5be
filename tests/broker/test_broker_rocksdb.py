"""rmqfilter against a real RocketMQ broker with ``storeType=defaultRocksDB``: the ``rocksdb`` scenario.

RocketMQ's own broker kept its consume queues and its metadata (consumer offsets, subscription
groups, topics) in RocksDB and served the tag and SQL92 groups of ``modes`` to real push
consumers, which received, committed and stopped; more was sent; the store was copied after a
clean shutdown and the consumers drained the rest (docs/testing.md). Read through the
``rmqfilter[rocksdb]`` extra, the store must answer as the broker did
(docs/formats.md#rocksdb-consume-queue), and reading it must change none of its files.

Then a second broker, ``broker-v2``, ran the same on its own topic with ``configManagerVersion=v2``:
every metadata table in one database, ``config/rdb`` (docs/formats.md#rocksdb-metadata-v2). Its
store must answer as that broker did too, from ``config/rdb`` and never from a JSON file.
"""
from __future__ import annotations

import json
import os
import shutil
import tempfile
from contextlib import closing
from pathlib import Path

import pytest
from broker_support import (
    Run,
    assert_backlog_is_what_the_drain_received,
    assert_consume_is_what_the_consumers_received,
    assert_data_source_is_what_the_consumers_received,
    assert_inspect_offsets_are_the_brokers,
    harness,
    release,
    scenario_fixtures,
)
from helpers import tree_snapshot

import cq
import rmqfilter
from cq.analyses.paths import why_every_copy
from cq.readers import rocksdb

pytestmark = pytest.mark.broker

GROUPS = list(harness.MODES_GROUPS)
V2_GROUPS = list(harness.ROCKSDB_V2_GROUPS)
V2_TOPIC = harness.ROCKSDB_V2_TOPIC


run, store = scenario_fixtures("rocksdb")


class V2Run(Run):
    """The run as the v2 broker's: its store, and its topic's queue stats from the admin API."""

    def store_path(self, name: str = harness.ROCKSDB_V2_BROKER) -> Path:
        return super().store_path(name)


@pytest.fixture(scope="module")
def v2_run(run):
    return V2Run(run.dir, {**run.broker, "topics": run.broker["rocksdb_v2"]["topics"]}, run.sent, run.received,
                 run.first)


@pytest.fixture(scope="module")
def v2_store(v2_run):
    s = cq.Store(str(v2_run.store_path()))
    yield s
    s.close()


#: Every group of both brokers: "v1" for broker-a's, "v2" for broker-v2's.
CASES = [("v1", g) for g in GROUPS] + [("v2", g) for g in V2_GROUPS]


@pytest.fixture(scope="module")
def brokers(run, store, v2_run, v2_store):
    """"v1" or "v2" -> that broker's run view (:meth:`Run.store_path`, ``topics``) and store."""
    return {"v1": (run, store), "v2": (v2_run, v2_store)}


def _topic(run: Run) -> str:
    return run.broker["topics"][0]["topic"]


def test_the_broker_kept_its_queues_and_metadata_in_rocksdb(run, store):
    assert run.broker["rocketmq_version"] == release("rocksdb")
    layout = store.layout
    assert (layout.consume_queues, set(layout.rocksdb_tables)) == (
        "rocksdb", {"consumerOffsets", "subscriptionGroups", "topics"})
    assert not any(n.isdigit() for n in os.listdir(run.store_path() / "consumequeue"))  # no queue directories
    phases = {(r["group"], r["phase"]) for r in run.received}
    assert all((g, p) in phases for g in GROUPS for p in ("live", "drain"))


@pytest.mark.parametrize("which", ["v1", "v2"])
def test_every_message_is_where_the_send_result_put_it(brokers, which):
    run, store = brokers[which]
    sent = [s for s in run.sent if s["topic"] == _topic(run)]
    assert sent and all(s["outcome"] == "sent" for s in sent)
    for s in sent:
        unit = store.consume_queue(s["topic"], s["queue_id"]).unit(s["queue_offset"])
        msg = store.commit_log.read_message(unit[0])
        assert (msg.properties["UNIQ_KEY"], msg.queue_offset, msg.msg_id) == (
            s["uniq_key"], s["queue_offset"], s["msg_id"]), s


@pytest.mark.parametrize(("which", "group"), CASES)
def test_consume_is_what_the_consumers_received(brokers, which, group):
    run, store = brokers[which]
    assert_consume_is_what_the_consumers_received(store, run, group)


@pytest.mark.parametrize(("which", "group"), CASES)
def test_backlog_is_what_the_drain_received(brokers, which, group):
    """The committed offsets come from the RocksDB table (v1's, beside a stale JSON file; v2's
    config/rdb): equal to the broker's admin progress."""
    run, store = brokers[which]
    g = run.group(group)
    assert_backlog_is_what_the_drain_received(cq.backlog(store, g["topic"], group, **run.subscription(g)), run, group)


def test_inspect_prints_the_mode_and_the_brokers_offsets(run, capsys):
    assert "consume queues RocksDB; metadata RocksDB" in assert_inspect_offsets_are_the_brokers(run, capsys)


@pytest.mark.parametrize(("which", "group"), [("v1", "GID_MODES_TAG"), ("v2", "GID_MODES_TAG_V2")])
def test_reading_the_store_changes_none_of_its_files(brokers, which, group):
    run = brokers[which][0]
    root, topic = run.store_path(), _topic(run)
    before = tree_snapshot(root)
    mine = f"{rocksdb.LINKS_PREFIX}{os.getpid()}-"
    links = {n for n in os.listdir(tempfile.gettempdir()) if n.startswith(mine)}
    tags = ["--tags", "TagA || TagB"]
    for argv in (["inspect", str(root)], ["backlog", str(root), "--topic", topic, "--group", group, *tags],
                 ["why", str(root), "--topic", topic, "--group", group, *tags, "--queue", "0", "--offset", "0"]):
        assert rmqfilter.main(argv) == 0
    assert tree_snapshot(root) == before
    assert {n for n in os.listdir(tempfile.gettempdir()) if n.startswith(mine)} == links


@pytest.mark.spark
@pytest.mark.parametrize(("which", "group"), CASES)
def test_data_source_with_group_gives_the_same_rows(spark, brokers, which, group):
    assert_data_source_is_what_the_consumers_received(spark, brokers[which][0], group)


# -- the v2 broker: config/rdb -------------------------------------------------------------------

def test_the_v2_broker_kept_its_metadata_in_config_rdb(v2_run, v2_store):
    layout = v2_store.layout
    assert (layout.consume_queues, layout.rocksdb_config, set(layout.rocksdb_tables)) == (
        "files", "v2", {"consumerOffsets", "subscriptionGroups", "topics"})
    config = v2_run.store_path() / "config"
    assert (config / "rdb" / "CURRENT").is_file()
    # the broker writes none of the three tables' JSON files: nothing stale could be read
    assert not {"consumerOffset.json", "topics.json", "subscriptionGroup.json"} & set(os.listdir(config))
    phases = {(r["group"], r["phase"]) for r in v2_run.received}
    assert all((g, p) in phases for g in V2_GROUPS for p in ("live", "drain"))


def test_v2_inspect_names_config_rdb_and_prints_the_brokers_offsets(v2_run, capsys):
    out = assert_inspect_offsets_are_the_brokers(v2_run, capsys)
    assert "consume queues files; metadata RocksDB v2 (config/rdb" in out
    assert "Committed offsets (RocksDB config/rdb" in out


def test_v2_topics_and_groups_are_the_brokers(v2_run, v2_store):
    queues = v2_run.broker["topics"][0]["queues"]
    topic = v2_store.topic_configs()[V2_TOPIC]
    assert (topic["topicName"], topic["readQueueNums"], topic["writeQueueNums"], topic["perm"]) == (
        V2_TOPIC, len(queues), len(queues), 6)
    off = v2_run.broker["rocksdb_v2"]["off_group"]
    groups = v2_store.subscription_groups()
    assert (groups[off]["groupName"], groups[off]["consumeEnable"]) == (off, False)  # as the admin API set it
    # the groups the broker created on their consumers' first pulls it kept in memory alone
    assert not set(V2_GROUPS) & set(groups)


def test_v2_why_says_the_disabled_group_is_gated(v2_run, v2_store):
    """``why`` reads consumeEnable=false from config/rdb: the broker answers the group's pulls with
    NO_PERMISSION."""
    off = v2_run.broker["rocksdb_v2"]["off_group"]
    sent = next(s for s in v2_run.sent if s["topic"] == V2_TOPIC)
    [path] = why_every_copy(v2_store, V2_TOPIC, off, tags="*", msg_id=sent["uniq_key"])
    assert (path.state, path.fields["reason"]) == ("gated", "group_disabled")
    [path] = why_every_copy(v2_store, V2_TOPIC, "GID_MODES_STAR_V2", tags="*", msg_id=sent["uniq_key"])
    assert path.state == "consumed"  # its group is enabled: not gated


def test_v2_pull_offsets_lie_between_the_committed_offset_and_the_end(v2_run, v2_store):
    """How far each group's pulls reached (kept by v2 alone): never below what it committed,
    never past the queue's end, for every queue the broker reports for the group."""
    pulled = v2_store.pull_offset_table()
    for group in V2_GROUPS:
        progress = v2_run.group(group)["progress"]
        assert sorted(pulled[V2_TOPIC, group]) == sorted(p["queue_id"] for p in progress)
        for p in progress:
            assert p["consumer_offset"] <= pulled[V2_TOPIC, group][p["queue_id"]] <= p["broker_offset"], (group, p)
    with closing(cq.Store(str(v2_run.store_path("broker-a")))) as v1_store, pytest.raises(
            cq.UnsupportedLayoutError, match="configManagerVersion=v2"):
        v1_store.pull_offset_table()


def test_v2_json_files_beside_config_rdb_are_never_read(v2_run, tmp_path):
    """JSON files of the three tables put beside config/rdb (as a broker switched from v1 leaves
    them) change no answer: the offsets, topics and groups still come from config/rdb."""
    root = tmp_path / "store"
    shutil.copytree(v2_run.store_path(), root)
    config = root / "config"
    (config / "consumerOffset.json").write_text(json.dumps(
        {"offsetTable": {f"{V2_TOPIC}@{g}": {0: 0, 1: 0, 2: 0} for g in V2_GROUPS}}))
    (config / "topics.json").write_text(json.dumps(
        {"topicConfigTable": {V2_TOPIC: {"topicName": V2_TOPIC, "readQueueNums": 1, "writeQueueNums": 1}}}))
    off = v2_run.broker["rocksdb_v2"]["off_group"]
    (config / "subscriptionGroup.json").write_text(json.dumps({"subscriptionGroupTable": {
        g: {"groupName": g, "consumeEnable": g == off} for g in [*V2_GROUPS, off]}}))
    with closing(cq.Store(str(root))) as s:
        assert s.layout.metadata == "json+rocksdb"
        assert s.topic_configs()[V2_TOPIC]["readQueueNums"] == 3
        assert {g: c["consumeEnable"] for g, c in s.subscription_groups().items()} == {off: False}
        sent = next(m for m in v2_run.sent if m["topic"] == V2_TOPIC)
        assert [p.state for p in why_every_copy(s, V2_TOPIC, "GID_MODES_STAR_V2", tags="*",
                                                msg_id=sent["uniq_key"])] == ["consumed"]
        for group in V2_GROUPS:
            g = v2_run.group(group)
            assert s.committed_offsets(group, V2_TOPIC) == {p["queue_id"]: p["consumer_offset"] for p in g["progress"]}
        with pytest.raises(cq.UnsupportedLayoutError, match=r"v2 \(config/rdb, configManagerVersion=v2\)"):
            s.config_path("consumerOffset.json")
