"""rmqfilter against a real RocketMQ broker's BatchCQ topic and LMQ queues: the ``batch`` scenario.

RocketMQ's own broker (``enableLmq``, ``enableMultiDispatch``, property filtering) stored batch sends
to a BatchCQ topic as inner-batch records and served them to real push consumers of tag and SQL92
groups, in the two phases of ``modes``; messages of another topic were multi-dispatched to two LMQ
queues, each read by a real pull consumer after each phase (docs/testing.md). The store must answer
as the broker and its clients did (docs/formats.md#batch-consume-queue, docs/formats.md#lmq).
"""
from __future__ import annotations

import warnings

import pytest
from broker_support import (
    assert_backlog_is_what_the_drain_received,
    assert_data_source_is_what_the_consumers_received,
    assert_inspect_offsets_are_the_brokers,
    assert_same_units,
    harness,
    release,
    scenario_fixtures,
)

import cq
import rmqfilter
from cq import format as fmt
from cq.store.releases import written_by

pytestmark = pytest.mark.broker

BATCH_GROUPS = list(harness.BATCH_GROUPS)
LMQ_GROUPS = list(harness.LMQ_GROUPS.values())


run, store = scenario_fixtures("batch")


def lmq_offset(msg: cq.Message, queue: str) -> int:
    """The record's offset in LMQ ``queue``, as the broker wrote it in the record's properties."""
    queues = msg.properties[fmt.PROPERTY_INNER_MULTI_DISPATCH].split(fmt.LMQ_DISPATCH_SEPARATOR)
    offsets = msg.properties[fmt.PROPERTY_INNER_MULTI_QUEUE_OFFSET].split(fmt.LMQ_DISPATCH_SEPARATOR)
    return int(offsets[queues.index(queue)])


def consumed(store, run, group: str, **kw) -> dict:
    """``Store.consume`` of ``group`` as (queue, offset) -> UNIQ_KEY: an LMQ's records at their LMQ
    offset (queue 0), the record as stored (its own topic) otherwise."""
    g = run.group(group)
    result = store.consume(g["topic"], group, **(kw or run.subscription(g)))
    lmq = g["topic"].startswith(fmt.LMQ_PREFIX)
    got = {(fmt.LMQ_QUEUE_ID, lmq_offset(m, g["topic"])) if lmq else (m.queue_id, m.queue_offset):
           m.properties.get("UNIQ_KEY") for m in result}
    assert result.stats.commit_log_missing == 0
    return got


def received(run, group: str) -> dict:
    return {k: r["uniq_key"] for k, r in run.first.get(group, {}).items()}


def test_the_store_holds_a_batch_cq_topic_and_lmq_queues(run, store):
    assert run.broker["rocketmq_version"] == release("batch")
    layout = store.layout
    assert layout.batch_cq_topics == (harness.BATCH_TOPIC,)
    assert layout.lmq_queues == tuple(sorted(harness.LMQ_GROUPS))
    assert set(store.topics()) == {harness.BATCH_TOPIC, harness.LMQ_PARENT_TOPIC, *harness.LMQ_GROUPS}
    phases = {(r["group"], r["phase"]) for r in run.received}
    assert all((g, p) in phases for g in ("GID_BATCH_STAR", *LMQ_GROUPS) for p in ("live", "drain"))


def test_every_batch_message_is_where_the_send_result_put_it(run, store):
    """Each message of a batch at the batch's queue offset plus its index, with its own tags, keys,
    properties and body; the batch is one record (one offset message id)."""
    batch = [s for s in run.sent if s["topic"] == harness.BATCH_TOPIC]
    assert all(s["outcome"] == "sent" for s in batch) and any(s["batch_size"] > 1 for s in batch)
    got = {(m.queue_id, m.queue_offset): m for m in store.consume(harness.BATCH_TOPIC, "G", tags="*")}
    assert len(got) == len(batch)
    for s in batch:
        m = got[s["queue_id"], s["queue_offset"]]
        assert (m.properties["UNIQ_KEY"], m.tags, m.keys, m.msg_id) == (
            s["uniq_key"], s["tags"], " ".join(s["keys"]), s["msg_id"]), s
        assert {k: m.properties[k] for k in s["properties"]} == s["properties"]
        assert m.body == f"batch message {s['keys'][0].rsplit('-', 1)[1]}".encode()


@pytest.mark.parametrize("group", BATCH_GROUPS + LMQ_GROUPS)
def test_consume_is_what_the_consumers_received(run, store, group):
    """Tag groups: the broker judges a batch by its unit's tags code, 0 (the record has no TAGS),
    so only a subscription holding a tag of hash 0 reaches the client, which keeps the messages
    whose own tag it subscribed; SQL92 groups: the selector sees the batch record's own properties."""
    assert_same_units(consumed(store, run, group), received(run, group), f"Store.consume({group})")


def test_the_brokers_answers_are_the_ones_the_docs_state(run):
    counts = {g: len(run.first.get(g, {})) for g in BATCH_GROUPS}
    total = sum(1 for s in run.sent if s["topic"] == harness.BATCH_TOPIC)
    assert counts["GID_BATCH_STAR"] == counts["GID_BATCH_SQL_NULL"] == total
    assert counts["GID_BATCH_TAG"] == counts["GID_BATCH_SQL"] == 0
    zero = [s for s in run.sent if s["topic"] == harness.BATCH_TOPIC and s["tags"] in ("TagA", harness.ZERO_HASH_TAG)]
    assert counts["GID_BATCH_ZERO"] == len(zero) < total


@pytest.mark.parametrize("group", BATCH_GROUPS + LMQ_GROUPS)
def test_backlog_is_what_the_drain_received(run, store, group):
    """Committed offsets from lmqConsumerOffset.json (a broker with enableLmq keeps them all there)."""
    g = run.group(group)
    assert_backlog_is_what_the_drain_received(cq.backlog(store, g["topic"], group, **run.subscription(g)), run, group)


@pytest.mark.parametrize("group", ["GID_BATCH_ZERO", "GID_BATCH_STAR", "GID_BATCH_TAG", *LMQ_GROUPS])
def test_why_says_delivered_for_received_messages_and_names_the_layer_otherwise(run, store, group):
    g = run.group(group)
    want = {r["uniq_key"] for r in run.first.get(group, {}).values()}
    sent = [s for s in run.sent if (s["topic"] == g["topic"] or g["topic"] in (s.get("lmq") or []))]
    for s in sent[:40]:
        answers = cq.why(store, g["topic"], group, msg_id=s["uniq_key"], **run.subscription(g))
        answer = answers[0] if isinstance(answers, list) else answers
        assert answer.delivered == (s["uniq_key"] in want), (s, answer)
        if not answer.delivered:
            layer = "client" if s["tags"] == "TagB" and group == "GID_BATCH_ZERO" else None
            if group == "GID_BATCH_TAG":
                layer = "consume_queue"
            assert layer is None or answer.dropped_by == layer, (s, answer)


def test_inspect_names_the_batch_cq_topic_and_lmq_queues(run, capsys):
    text = assert_inspect_offsets_are_the_brokers(run, capsys)
    assert f"BatchCQ topics: {harness.BATCH_TOPIC}" in text
    assert "2 LMQ queue(s): %LMQ%alpha, %LMQ%beta" in text


def test_lmq_offsets_are_the_brokers(run, store):
    for group in LMQ_GROUPS:
        g = run.group(group)
        p = g["progress"][0]
        with store.queue_readers(g["topic"], 0, ext=False) as (queue, _):
            assert (queue.min_offset, queue.max_offset) == (p["min_offset"], p["broker_offset"])
        assert store.committed_offsets(group, g["topic"]) == {0: p["consumer_offset"]}


def test_cli_consume_of_a_batch_cq_topic(run, capsys):
    g = run.group("GID_BATCH_ZERO")
    assert rmqfilter.main(["consume", str(run.store_path()), "--topic", g["topic"], "--group", g["group"],
                     "--tags", g["expression"], "--format", "jsonl"]) == 0
    assert capsys.readouterr().out.count("\n") == len(received(run, "GID_BATCH_ZERO"))


@pytest.mark.spark
@pytest.mark.parametrize("group", ["GID_BATCH_ZERO", "GID_BATCH_SQL_NULL", "GID_BATCH_TAG", *LMQ_GROUPS])
def test_data_source_with_group_gives_the_same_rows(spark, run, group):
    """An LMQ's rows at their LMQ offsets (queue 0); a BatchCQ's one row per message of a batch."""
    assert_data_source_is_what_the_consumers_received(spark, run, group)


def test_the_sql92_registrations_read_without_a_warning(run, store):
    # This broker computes no bitmaps (enableCalcFilterBitMap off): from 5.5.1 it persists its SQL92
    # registrations without bloom data, which is no filter change (docs/config-and-index.md#no-bloom-data)
    with warnings.catch_warnings():
        warnings.simplefilter("error", cq.ConfigWarning)
        registered = store.registered_filters(harness.BATCH_TOPIC)
    assert {r.group for r in registered} >= {g for g, (kind, _) in harness.BATCH_GROUPS.items() if kind == "SQL92"}
    # ... and that is what shows a 5.5.1 store (inspect's "Written by")
    bare = all(r.bloom_data is None for r in registered)
    assert bare == (tuple(map(int, run.release.split("."))) >= (5, 5, 1))
    assert (written_by(run.store_path()).release == "5.5.1") == bare
