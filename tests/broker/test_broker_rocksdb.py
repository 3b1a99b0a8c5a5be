"""rmqfilter against a real RocketMQ broker with ``storeType=defaultRocksDB``: the ``rocksdb`` scenario.

RocketMQ's own broker kept its consume queues and its metadata (consumer offsets, subscription
groups, topics) in RocksDB and served the tag and SQL92 groups of ``modes`` to real push
consumers, which received, committed and stopped; more was sent; the store was copied after a
clean shutdown and the consumers drained the rest (docs/testing.md). Read through the
``rmqfilter[rocksdb]`` extra, the store must answer as the broker did
(docs/formats.md#rocksdb-consume-queue), and reading it must change none of its files.
"""
from __future__ import annotations

import os
import tempfile

import pytest
from broker_support import (
    assert_backlog_is_what_the_drain_received,
    assert_consume_is_what_the_consumers_received,
    assert_data_source_is_what_the_consumers_received,
    assert_inspect_offsets_are_the_brokers,
    harness,
    scenario_fixtures,
)
from helpers import tree_snapshot

import cq
from cq.readers import rocksdb
from pyspark_udfs import cli

pytestmark = pytest.mark.broker

GROUPS = list(harness.MODES_GROUPS)


run, store = scenario_fixtures("rocksdb")


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
    assert_consume_is_what_the_consumers_received(store, run, group)


@pytest.mark.parametrize("group", GROUPS)
def test_backlog_is_what_the_drain_received(run, store, group):
    """The committed offsets come from the RocksDB table (the JSON file beside it is stale)."""
    g = run.group(group)
    assert_backlog_is_what_the_drain_received(cq.backlog(store, g["topic"], group, **run.subscription(g)), run, group)


def test_inspect_prints_the_mode_and_the_brokers_offsets(run, capsys):
    assert "consume queues RocksDB; metadata RocksDB" in assert_inspect_offsets_are_the_brokers(run, capsys)


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
