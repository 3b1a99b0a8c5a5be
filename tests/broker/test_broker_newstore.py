"""What releases after 5.3.3 write, on a real broker (scenario ``newstore``, docs/formats.md#releases-after-533):
the message RocksDB's families, priority and Lite topics are read exactly or refused, never answered
without them; the store says which release wrote it."""
from __future__ import annotations

import pytest
from broker_support import (
    assert_consume_is_what_the_consumers_received,
    assert_inspect_offsets_are_the_brokers,
    assert_same_units,
    harness,
    release,
    scenario_fixtures,
)

import cq
from cq import format as fmt
from cq.analyses.pending import pending
from cq.store.releases import message_rocksdb_families, written_by

pytestmark = pytest.mark.broker

if tuple(map(int, release("newstore").split("."))) < tuple(map(int, harness.NEWSTORE_RELEASE.split("."))):
    pytest.skip(f"newstore's features are not in RocketMQ {release('newstore')}", allow_module_level=True)

run, store = scenario_fixtures("newstore")


def _sent(run, topic: str) -> list[dict]:
    return [s for s in run.sent if s["topic"] == topic]


def test_the_store_says_it_was_written_by_5_5_or_later(run, store):
    assert run.broker["rocketmq_version"] == release("newstore")
    found = written_by(store.root)
    assert found.release == "5.5.0"
    assert set(found.evidence) >= {f"topic {harness.NEWSTORE_LITE_TOPIC}: message.type=LITE",
                                   f"topic {harness.NEWSTORE_PRIORITY_TOPIC}: message.type=PRIORITY",
                                   "rocksdbstore/: RIP-82's message RocksDB"}


def test_the_message_rocksdb_holds_the_index_timer_and_transaction_families(store):
    assert set(message_rocksdb_families(store.root)) == {"default", "timer", "trans"}


def test_timer_and_transaction_answers_are_refused_not_answered_without_rocksdb(run, store):
    with pytest.raises(cq.UnsupportedLayoutError, match="timerRocksDBEnable.*5.4.0"):
        pending(store, "scheduled")
    with pytest.raises(cq.UnsupportedLayoutError, match="transRocksDBEnable.*5.4.0"):
        pending(store, "transactions")
    from cq.analyses.paths import why_every_copy

    tx = next(s for s in _sent(run, harness.NEWSTORE_TOPIC) if s["keys"][0].startswith("new-tx-"))
    with pytest.raises(cq.UnsupportedLayoutError, match="transRocksDBEnable"):
        why_every_copy(store, harness.NEWSTORE_TOPIC, harness.NEWSTORE_GROUP, tags="*", msg_id=tx["uniq_key"])


def test_the_plain_topic_reads_as_the_consumer_received_it(run, store):
    assert_consume_is_what_the_consumers_received(store, run, harness.NEWSTORE_GROUP)


def test_priority_messages_are_at_the_queue_the_broker_chose(run, store):
    sent = _sent(run, harness.NEWSTORE_PRIORITY_TOPIC)
    assert len(sent) == 7
    for s in sent:     # min(priority, writeQueueNums - 1), as the send result says
        priority = int(s["keys"][0].rsplit("-", 1)[1])
        assert s["queue_id"] == min(priority, harness.NEWSTORE_PRIORITY_QUEUES - 1), s
    got = {(m.queue_id, m.queue_offset): (m.properties.get("UNIQ_KEY"), m.msg_id)
           for m in store.consume(harness.NEWSTORE_PRIORITY_TOPIC, "GID_ANY", tags="*")}
    assert_same_units(got, {(s["queue_id"], s["queue_offset"]): (s["uniq_key"], s["msg_id"]) for s in sent},
                      "priority topic")
    for m in store.consume(harness.NEWSTORE_PRIORITY_TOPIC, "GID_ANY", tags="*"):
        assert m.properties[fmt.PROPERTY_PRIORITY] == m.properties["KEYS"].rsplit("-", 1)[1]


def test_a_lite_topics_queue_reads_as_an_lmq_and_its_group_views_are_refused(run, store):
    queue = f"{fmt.LITE_QUEUE_PREFIX}{harness.NEWSTORE_LITE_TOPIC}${harness.NEWSTORE_LITE_CHILD}"
    assert queue in store.layout.lmq_queues
    sent = _sent(run, harness.NEWSTORE_LITE_TOPIC)
    got = [m.properties["UNIQ_KEY"] for m in store.consume(queue, "GID_ANY", tags="*")]
    assert got == [s["uniq_key"] for s in sent]
    for topic in (queue, harness.NEWSTORE_LITE_TOPIC):
        with pytest.raises(cq.UnsupportedLayoutError, match="RIP-83, RocketMQ 5.5.0"):
            cq.backlog(store, topic, "GID_ANY", tags="*")


def test_inspect_names_the_release_and_has_the_brokers_offsets(run, capsys):
    text = assert_inspect_offsets_are_the_brokers(run, capsys)
    assert "Written by: RocketMQ 5.5.0 or later" in text
