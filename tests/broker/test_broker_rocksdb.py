"""rmqfilter against a real RocketMQ broker with ``storeType=defaultRocksDB``: the ``rocksdb`` scenario.

RocketMQ's own broker kept its consume queues and its metadata (consumer offsets, subscription
groups, topics) in RocksDB and served the tag and SQL92 groups of ``modes`` to real push
consumers, which received, committed and stopped; more was sent; the store was copied after a
clean shutdown and the consumers drained the rest (docs/testing.md). Read through the
``rmqfilter[rocksdb]`` extra, the store must answer as the broker did
(docs/formats.md#rocksdb-consume-queue), and reading it must change none of its files.
"""
from __future__ import annotations

import json
import os
import tempfile
from contextlib import closing

import pytest
from broker_support import (
    assert_backlog_is_what_the_drain_received,
    assert_data_source_is_what_the_consumers_received,
    assert_same_units,
    delivered,
    harness,
    scenario,
)
from helpers import tree_snapshot

import cq
from cq.readers import rocksdb
from pyspark_udfs import cli

pytestmark = pytest.mark.broker

GROUPS = list(harness.MODES_GROUPS)


@pytest.fixture(scope="module")
def run():
    return scenario("rocksdb")


@pytest.fixture(scope="module")
def store(run):
    with closing(cq.Store(str(run.store_path()))) as s:
        yield s


def test_the_broker_kept_its_queues_and_metadata_in_rocksdb(run, store):
    assert run.broker["rocketmq_version"] == harness.rocketmq_version()
    layout = store.layout
    assert (layout.consume_queues, set(layout.rocksdb_tables)) == (
        "rocksdb", {"consumerOffsets", "subscriptionGroups", "topics"})
    assert not any(n.isdigit() for n in os.listdir(run.store_path() / "consumequeue"))  # no queue directories
    phases = {(r["group"], r["phase"]) for r in run.received}
    assert all((g, p) in phases for g in GROUPS for p in ("live", "drain"))


def test_every_message_is_where_the_send_result_put_it(run, store):
    assert all(s["outcome"] == "sent" for s in run.sent)
    for s in run.sent:
        unit = store.consume_queue(s["topic"], s["queue_id"]).unit(s["queue_offset"])
        msg = store.commit_log.read_message(unit[0])
        assert (msg.properties["UNIQ_KEY"], msg.queue_offset, msg.msg_id) == (
            s["uniq_key"], s["queue_offset"], s["msg_id"]), s


@pytest.mark.parametrize("group", GROUPS)
def test_consume_is_what_the_consumers_received(run, store, group):
    g = run.group(group)
    want = {k: (r["uniq_key"], r["msg_id"]) for k, r in run.first[group].items()}
    result = store.consume(g["topic"], group, **run.subscription(g))
    got = {(m.queue_id, m.queue_offset): (m.properties.get("UNIQ_KEY"), m.msg_id) for m in result}
    assert_same_units(got, want, f"Store.consume({group})")
    assert result.stats.commit_log_missing == 0
    if g["type"] == "SQL92":
        assert delivered(store, g, sql=g["expression"]) == got


@pytest.mark.parametrize("group", GROUPS)
def test_backlog_is_what_the_drain_received(run, store, group):
    """The committed offsets come from the RocksDB table (the JSON file beside it is stale)."""
    g = run.group(group)
    assert_backlog_is_what_the_drain_received(cq.backlog(store, g["topic"], group, **run.subscription(g)), run, group)


def test_inspect_prints_the_mode_and_the_brokers_offsets(run, capsys):
    assert cli.main(["inspect", str(run.store_path())]) == 0
    assert "consume queues RocksDB; metadata RocksDB" in capsys.readouterr().out
    assert cli.main(["inspect", str(run.store_path()), "--json"]) == 0
    topics = json.loads(capsys.readouterr().out)["topics"]
    for t in run.broker["topics"]:
        for q in t["queues"]:
            mine = topics[t["topic"]][str(q["queue_id"])]
            assert (mine["min_offset"], mine["max_offset"]) == (q["min_offset"], q["max_offset"]), (t["topic"], q)


def test_reading_the_store_changes_none_of_its_files(run):
    root = run.store_path()
    before = tree_snapshot(root)
    mine = f"{rocksdb.LINKS_PREFIX}{os.getpid()}-"
    links = {n for n in os.listdir(tempfile.gettempdir()) if n.startswith(mine)}
    for argv in (["inspect", str(root)], ["backlog", str(root), "--topic", harness.MODES_TOPIC, "--group",
                                          "GID_MODES_TAG", "--tags", "TagA || TagB"]):
        assert cli.main(argv) == 0
    assert tree_snapshot(root) == before
    assert {n for n in os.listdir(tempfile.gettempdir()) if n.startswith(mine)} == links


@pytest.mark.spark
@pytest.mark.parametrize("group", GROUPS)
def test_data_source_with_group_gives_the_same_rows(spark, run, group):
    assert_data_source_is_what_the_consumers_received(spark, run, group)
