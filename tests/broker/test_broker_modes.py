"""rmqfilter against a real RocketMQ broker in DLedger mode: the ``modes`` scenario (docs/testing.md).

RocketMQ's own broker, with ``enableDLegerCommitLog=true`` in a one-node DLedger group, kept its
CommitLog in ``dledger-n0/data/`` (entries crossing file ends) and served SQL92 groups (bitmaps,
ConsumeQueueExt, property filtering) and tag groups to real push consumers, which received, committed
and stopped; more was sent; the store was copied after a clean shutdown and the consumers drained
the rest. What rmqfilter reads from that store must be what they received
(docs/formats.md#dledger-commitlog).
"""
from __future__ import annotations

import pytest
from broker_support import (
    assert_backlog_is_what_the_drain_received,
    assert_consume_is_what_the_consumers_received,
    assert_data_source_is_what_the_consumers_received,
    assert_inspect_offsets_are_the_brokers,
    harness,
    release,
    scenario_fixtures,
)

import cq

pytestmark = pytest.mark.broker

GROUPS = list(harness.MODES_GROUPS)


run, store = scenario_fixtures("modes")


def test_the_broker_wrote_a_dledger_log(run, store):
    assert run.broker["rocketmq_version"] == release("modes")
    assert store.layout.commit_log == "dledger" and not (run.store_path() / "commitlog").exists()
    log = store.commit_log
    assert isinstance(log, cq.DLedgerCommitLog) and len(log.files) > 1  # entries cross file ends
    messages = list(log.messages(verify_crc=True))
    assert len(messages) == len(run.sent) and all(s["outcome"] == "sent" for s in run.sent)
    assert {m.properties["UNIQ_KEY"] for m in messages} == {s["uniq_key"] for s in run.sent}
    offsets = [m.commit_log_offset for m in messages]
    assert offsets == [int(o) for b in log.column_batches(["commit_log_offset"])
                       for o in b.columns["commit_log_offset"]]
    assert log.max_offset == offsets[-1] + messages[-1].store_size
    phases = {(r["group"], r["phase"]) for r in run.received}
    assert all((g, p) in phases for g in GROUPS for p in ("live", "drain"))


def test_every_message_is_where_the_send_result_put_it(run, store):
    for s in run.sent:
        units = store.consume_queue(s["topic"], s["queue_id"]).read(s["queue_offset"], 1)
        msg = store.commit_log.read_message(int(units["commit_log_offset"][0]))
        assert (msg.properties["UNIQ_KEY"], msg.queue_offset, msg.commit_log_offset) == (
            s["uniq_key"], s["queue_offset"], int(units["commit_log_offset"][0])), s
        assert msg.msg_id == s["msg_id"], s  # the offset id holds the record's offset inside its entry


@pytest.mark.parametrize("group", GROUPS)
def test_consume_is_what_the_consumers_received(run, store, group):
    assert_consume_is_what_the_consumers_received(store, run, group)


@pytest.mark.parametrize("group", GROUPS)
def test_backlog_is_what_the_drain_received(run, store, group):
    g = run.group(group)
    assert_backlog_is_what_the_drain_received(cq.backlog(store, g["topic"], group, **run.subscription(g)), run, group)


def test_inspect_prints_the_mode_and_the_brokers_offsets(run, capsys):
    out = assert_inspect_offsets_are_the_brokers(run, capsys)
    assert "Mode: CommitLog DLedger (dledger-n0/data/); consume queues files; metadata JSON files" in out


@pytest.mark.spark
@pytest.mark.parametrize("group", GROUPS)
def test_data_source_with_group_gives_the_same_rows(spark, run, group):
    assert_data_source_is_what_the_consumers_received(spark, run, group)
