"""rmqfilter against the trace records real RocketMQ clients wrote: the ``trace`` scenario, on 5.3.3 and on
5.5.1 (its 5.5.0 client).

A producer, a transaction producer and three push consumers ran with message trace on against a broker with
``traceTopicEnable=true`` (tests/broker/scenario_trace.py, docs/testing.md): plain sends, a committed and a
rolled-back transaction, a group failing every ``fail=true`` message through one retry. Every record
``rmqfilter trace`` decodes must be what those clients did (sent.jsonl, received.jsonl), and ``why``'s
client section must be each delivery of the message to the group (docs/trace.md).
"""
from __future__ import annotations

import collections
import json
from contextlib import closing

import pytest
from broker_support import release, scenario
from scenario_trace import GROUPS

import cq
import rmqfilter
from cq.analyses.find import parse_offset_msg_id
from cq.analyses.trace import client_trace, trace

pytestmark = pytest.mark.broker

RUNS = ["trace", "trace@5.5.1"]


@pytest.fixture(scope="module", params=RUNS)
def run(request):
    return scenario(request.param)


@pytest.fixture(scope="module")
def store(run):
    s = cq.Store(str(run.store_path()))
    yield s
    s.close()


@pytest.fixture(scope="module")
def records(store):
    return trace(store)


def info(run) -> dict:
    return run.broker["trace"]


def test_every_record_reads(run, records):
    assert run.release in {release(name) for name in RUNS}
    assert records.errors == []
    assert records.trace_messages > 0
    assert {r.trace_type for r in records.rows} == {"Pub", "SubBefore", "SubAfter", "EndTransaction", "Recall"}


def test_each_send_is_a_pub_record_beside_the_store(run, store, records):
    """One Pub per send, with the id, offset id, topic, tags, keys and broker the producer had; the broker
    stored the message between the send's start and its end (the Pub's timestamp and cost)."""
    sent = [s for s in run.sent if s["topic"] == info(run)["topic"]]
    pubs = [r for r in records.rows if r.trace_type == "Pub" and r.topic == info(run)["topic"]]
    # a transaction's send result carries no offset id (TransactionSendResult): its half's is checked below
    got = sorted((r.msg_id, None if r.msg_type == "Trans_Msg_Half" else r.offset_msg_id, r.tags, r.keys,
                  r.store_host, r.success, r.msg_type, r.group) for r in pubs)
    # a timer message is Delay_Msg from the 5.5.0 client on (docs/formats.md#trace-records), Normal_Msg before
    client = tuple(int(x) for x in run.broker["rocketmq_client_version"].split("."))
    timer = "Delay_Msg" if client >= (5, 5, 0) else "Normal_Msg"
    want = sorted((s["uniq_key"], s["msg_id"], s["tags"], " ".join(s["keys"]), info(run)["broker_addr"],
                   s["send_status"] == "SEND_OK",
                   "Trans_Msg_Half" if "tx" in s else timer if "timer_delay_ms" in s else "Normal_Msg",
                   "harness_tx_producer" if "tx" in s else "harness_producer") for s in sent)
    assert got == want and len(got) == 24
    sent_ms = {s["uniq_key"]: s["sent_ms"] for s in sent}
    for r in pubs:
        assert r.timestamp <= sent_ms[r.msg_id]
        stored = store.commit_log.read_message(parse_offset_msg_id(r.offset_msg_id)[1])
        assert stored.properties["UNIQ_KEY"] == r.msg_id
        if r.msg_type == "Trans_Msg_Half":   # the record the send wrote is the half
            assert (stored.topic, stored.properties["REAL_TOPIC"]) == ("RMQ_SYS_TRANS_HALF_TOPIC", r.topic)
        assert r.timestamp <= stored.store_timestamp <= r.timestamp + r.cost_ms + 1, (r, stored.store_timestamp)
        assert r.body_length == len(stored.uncompressed_body())


def test_each_transaction_end_is_the_producers_decision(run, records):
    ends = {r.msg_id: r for r in records.rows if r.trace_type == "EndTransaction"}
    txs = [s for s in run.sent if "tx" in s]
    assert {s["uniq_key"]: s["tx_state"] for s in txs} == {u: r.transaction_state for u, r in ends.items()}
    assert {s["tx"] for s in txs} == {"commit", "rollback"}
    for r in ends.values():
        assert (r.group, r.topic, r.msg_type, r.from_transaction_check) == \
            ("harness_tx_producer", info(run)["topic"], "Trans_msg_Commit", False)
        assert r.transaction_id


def test_each_recall_is_a_recall_record(run, records):
    """The producer's recall of a timer message: one Recall record, its group, topic, id and the broker's answer."""
    got = sorted((r.group, r.topic, r.msg_id, r.success) for r in records.rows if r.trace_type == "Recall")
    want = sorted(("harness_producer", info(run)["topic"], r["uniq_key"], r["ok"]) for r in info(run)["recalls"])
    assert got == want and len(got) == 1
    (rec,) = (r for r in records.rows if r.trace_type == "Recall")
    assert info(run)["recalls"][0]["recall_ms"] <= rec.timestamp  # stamped when the broker answered


def deliveries(run) -> collections.Counter:
    return collections.Counter((r["group"], r["uniq_key"], r["reconsume_times"], r.get("result") != "failed")
                               for r in run.received)


def test_each_delivery_is_a_sub_before_and_its_answer(run, store, records):
    """Every delivery a listener had is one SubBefore of its group, paired with the SubAfter of its request:
    the message, its reconsumeTimes, consumed or failed (FAILED for RECONSUME_LATER), after the harness saw it."""
    got: collections.Counter = collections.Counter()
    for uniq in {r["uniq_key"] for r in run.received}:
        for c in client_trace(store, uniq).consumptions:
            got[(c.group, uniq, c.retry_times, c.success)] += 1
            assert c.context_code == ("SUCCESS" if c.success else "FAILED")
            assert c.client is not None and c.client.startswith("127.0.0.1:")
            assert c.cost_ms is not None and c.cost_ms >= 0
    assert got == deliveries(run)
    failed = [k for k in got if not k[3]]
    assert {k[0] for k in failed} == {info(run)["fail_group"]} and {k[2] for k in failed} == {0, 1}
    assert {k[0] for k in got} == set(GROUPS)
    stamps = {r.msg_id for r in records.rows if r.trace_type == "SubBefore"}
    assert stamps == {r["uniq_key"] for r in run.received}


def test_why_shows_each_delivery_beside_the_store(run, store, capsys):
    """``rmqfilter why`` of a failed message for the failing group: its client section holds the two
    deliveries the listener had (reconsumeTimes 0 and 1, both failed), the retry copy the store holds."""
    group = info(run)["fail_group"]
    lines = sorted((r for r in run.received if r["group"] == group and r.get("result") == "failed"),
                   key=lambda r: r["received_ms"])
    uniq = lines[0]["uniq_key"]
    code = rmqfilter.main(["why", str(run.store_path()), "--topic", info(run)["topic"], "--group", group,
                           "--tags", "*", "--msg-id", uniq, "--json"])
    out, err = capsys.readouterr()
    assert code == 0, err
    (doc,) = json.loads(out)
    mine = [r for r in lines if r["uniq_key"] == uniq]
    got = [(c["retry_times"], c["success"]) for c in doc["client_trace"]["consumptions"]]
    assert got == [(r["reconsume_times"], False) for r in mine] == [(0, False), (1, False)]
    for c, r in zip(doc["client_trace"]["consumptions"], mine):
        assert c["received_at"] <= r["received_ms"]
    retry = [c for c in doc["copies"] if c["role"] == "retry"]
    assert [c["reconsume_times"] for c in retry] == [1]
    assert [s["msg_id"] for s in doc["client_trace"]["sends"]] == [uniq]


def test_the_command_lists_one_message(run, capsys):
    uniq = next(s["uniq_key"] for s in run.sent if s["topic"] == info(run)["topic"])
    code = rmqfilter.main(["trace", str(run.store_path()), "--uniq-key", uniq, "--json"])
    doc = json.loads(capsys.readouterr()[0])
    assert code == 0 and doc["errors"] == []
    assert {r["msg_id"] for r in doc["rows"]} == {uniq}
    with closing(cq.Store(str(run.store_path()))) as s:
        want = [r.to_dict() for r in trace(s).rows if r.msg_id == uniq]
    assert doc["rows"] == want
