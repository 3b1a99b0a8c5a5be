"""Message-trace records (docs/formats.md#trace-records): the decoder on each record type and field count,
records that do not read (reported with their place, never dropped), the trace topic of a store and a
cluster through the IndexFiles, one message's client trace for why, and ``rmqfilter trace`` / ``why``.

The trace bodies here are written by :func:`encode` from the layout the docs give (RocketMQ's
``TraceDataEncoder``); the real clients' records are checked by tests/broker/test_broker_trace.py.
"""
from __future__ import annotations

import json
from contextlib import closing

import pytest
from trace_stores import T0, TOPIC, F, encode, end_tx, pub, sub_after, sub_before, write_store

import rmqfilter
from cq import Cluster, Store
from cq.analyses.trace import client_trace, decode_trace_body, trace
from cq.writer import StoreWriter


# ------------------------------------------------------------------ the decoder
def test_each_type_reads_as_the_layout_says():
    body = encode(pub("U1"), sub_before("U1", "R1", retry=2), sub_after("U1", "R1", ok=False, code=4),
                  end_tx("U1", state="ROLLBACK_MESSAGE", check=True),
                  ["Recall", T0 + 9, "DefaultRegion", "PG", TOPIC, "U1", True])
    recs, errs = decode_trace_body(body, broker="b", commit_log_offset=100, born_host="10.0.0.1:5000",
                                   store_timestamp=T0 + 99)
    assert errs == []
    p, sb, sa, et, rc = recs
    assert (p.trace_type, p.timestamp, p.group, p.topic, p.msg_id, p.tags, p.keys, p.store_host, p.body_length,
            p.cost_ms, p.msg_type, p.offset_msg_id, p.success) == \
        ("Pub", T0, "PG", TOPIC, "U1", "TagA", "k1", "127.0.0.1:10911", 5, 3, "Normal_Msg", "OFF", True)
    assert (sb.timestamp, sb.group, sb.request_id, sb.msg_id, sb.retry_times, sb.keys) == (T0 + 10, "CG", "R1", "U1", 2,
                                                                                          "k1")
    assert (sa.request_id, sa.msg_id, sa.cost_ms, sa.success, sa.context_code, sa.timestamp, sa.group) == \
        ("R1", "U1", 7, False, "FAILED", T0 + 20, "CG")
    assert (et.msg_type, et.transaction_id, et.transaction_state, et.from_transaction_check) == \
        ("Trans_msg_Commit", "TXID-1", "ROLLBACK_MESSAGE", True)
    assert (rc.trace_type, rc.topic, rc.msg_id, rc.success) == ("Recall", TOPIC, "U1", True)
    assert [r.record_index for r in recs] == [0, 1, 2, 3, 4]
    assert recs[1].record_position == len(encode(pub("U1")))  # byte offsets in the body
    assert {(r.broker, r.trace_commit_log_offset, r.trace_born_host, r.trace_store_timestamp) for r in recs} == \
        {("b", 100, "10.0.0.1:5000", T0 + 99)}


def test_older_and_newer_field_counts():
    p13 = pub("U")[:12] + [True]  # no offset msg id
    p15 = pub("U") + ["client-1"]
    sa6 = sub_after("U", "R")[:6]
    sa8 = sub_after("U", "R")[:8]
    cloud = sub_after("U", "R")[:7] + [""]  # a cloud access channel: ends after the context code
    recs, errs = decode_trace_body(encode(p13, p15, sa6, sa8, cloud))
    assert errs == []
    assert (recs[0].offset_msg_id, recs[0].success) == (None, True)
    assert (recs[1].offset_msg_id, recs[1].client_host) == ("OFF", "client-1")
    assert (recs[2].context_code, recs[2].timestamp, recs[2].group) == (None, None, None)
    assert (recs[3].timestamp, recs[3].group) == (T0 + 20, None)
    assert (recs[4].context_code, recs[4].timestamp) == ("SUCCESS", None)


def test_null_strings_read_as_absent():
    (r,), _ = decode_trace_body(encode(pub("U", tags=None, keys=None, offset_id=None)))
    assert (r.tags, r.keys, r.offset_msg_id) == (None, None, None)


@pytest.mark.parametrize(("record", "reason"), [
    (["Bogus", 1, 2], "unknown record type 'Bogus'"),
    ([""], "an empty record"),
    (pub("U")[:10], "a Pub record has 10 fields, at least 13 expected"),
    (pub("U", ts="x"), "timestamp 'x' is not a long"),
    (pub("U", mtype=9), "message type 9 is no ordinal"),
    (sub_before("U", "R", retry="2.5"), "retry times '2.5' is not an int"),
    (sub_after("U", "R", code=7), "context code 7 is no ordinal"),
    (end_tx("U", state="COMMIT"), "transaction state 'COMMIT' is no name"),
])
def test_a_record_that_does_not_read_is_reported_with_its_place(record, reason):
    good = encode(pub("U0"))
    body = good + encode(record) + good
    recs, errs = decode_trace_body(body, broker="b", commit_log_offset=4242)
    assert [r.record_index for r in recs] == [0, 2]  # the others still read
    (e,) = errs
    assert reason in e.reason
    assert (e.broker, e.trace_commit_log_offset, e.record_index, e.record_position) == ("b", 4242, 1, len(good))
    assert str(4242) in str(e) and f"byte {len(good)}" in str(e)


def test_a_record_not_utf8_is_reported():
    body = encode(pub("U0")) + b"Pub\x01\xff\xfe" + F.encode()
    recs, errs = decode_trace_body(body)
    assert len(recs) == 1 and "not UTF-8" in errs[0].reason and errs[0].record_index == 1


@pytest.fixture(scope="module")
def store_root(tmp_path_factory):
    root = tmp_path_factory.mktemp("trace") / "broker-a"
    write_store(root, bad=True)
    return root


def test_trace_of_a_store_every_record(store_root):
    with closing(Store(store_root)) as s:
        res = trace(s)
    assert res.trace_messages == 4
    assert [(r.trace_type, r.msg_id) for r in res.rows] == [
        ("Pub", "U0"), ("Pub", "U1"), ("SubBefore", "U0"), ("SubAfter", "U0"), ("SubBefore", "U0"),
        ("SubAfter", "U0"), ("SubBefore", "U0"), ("Pub", "U2")]
    (e,) = res.errors
    assert e.record_index == 1 and "a Pub record has 2 fields" in e.reason


def test_trace_of_one_message_goes_through_the_index(store_root):
    with closing(Store(store_root)) as s:
        res = trace(s, uniq_key="U1")
        by_key = trace(s, key="k0")
        u0 = trace(s, msg_id="U0")
    assert [(r.trace_type, r.msg_id) for r in res.rows] == [("Pub", "U1")]
    assert res.trace_messages == 1 and any("index" in n for n in res.notes)
    assert len(by_key.rows) == 6 and {r.msg_id for r in by_key.rows} == {"U0"}
    assert [r.trace_type for r in u0.rows] == ["Pub", "SubBefore", "SubAfter", "SubBefore", "SubAfter", "SubBefore"]


def test_an_offset_msg_id_names_its_uniq_key(store_root):
    with closing(Store(store_root)) as s:
        off_id = next(m for m in s.commit_log.messages() if m.properties.get("UNIQ_KEY") == "U1").msg_id
        res = trace(s, msg_id=off_id)
    assert [(r.trace_type, r.msg_id) for r in res.rows] == [("Pub", "U1")]


def test_no_trace_topic_is_an_error(tmp_path):
    with StoreWriter(tmp_path / "s") as w:
        w.append(TOPIC, b"x")
    with closing(Store(tmp_path / "s")) as s, pytest.raises(LookupError, match="traceTopicEnable"):
        trace(s)


def test_a_cluster_and_a_named_topic(tmp_path):
    write_store(tmp_path / "broker-a", trace_topic="MyTrace")
    with StoreWriter(tmp_path / "broker-b") as w:
        w.append(TOPIC, b"y", properties={"UNIQ_KEY": "U9"})
    with closing(Cluster([tmp_path / "broker-a", tmp_path / "broker-b"])) as c:
        res = trace(c, topic="MyTrace", uniq_key="U1")
    assert [(r.broker, r.trace_type, r.msg_id) for r in res.rows] == [("broker-a", "Pub", "U1")]


def test_client_trace_pairs_each_delivery_with_its_answer(store_root):
    with closing(Store(store_root)) as s:
        ct = client_trace(s, "U0", group="CG")
        every = client_trace(s, "U0")
    assert [(x.msg_id, x.success) for x in ct.sends] == [("U0", True)]
    assert [(c.request_id, c.received_at, c.client, c.retry_times, c.success, c.cost_ms, c.context_code)
            for c in ct.consumptions] == [("R1", T0 + 10, "10.0.0.2:4001", 0, False, 7, "FAILED"),
                                          ("R2", T0 + 1000, "10.0.0.3:4002", 1, True, 7, "SUCCESS")]
    assert [(c.group, c.success) for c in every.consumptions] == [("CG", False), ("OTHER", None), ("CG", True)]
    assert len(ct.errors) == 0  # the bad record's message is about U2: not read for U0


# ------------------------------------------------------------------ the commands
def run(capsys, *argv) -> tuple[int, str, str]:
    code = rmqfilter.main([str(x) for x in argv])
    out, err = capsys.readouterr()
    return code, out, err


def test_cli_trace_table_and_unreadable_record(capsys, store_root):
    code, out, err = run(capsys, "trace", store_root)
    assert code == 1 and err == ""  # a record that does not read: exit status 1
    lines = out.splitlines()
    assert lines[0].split()[:3] == ["broker", "trace_type", "timestamp"]
    assert "8 record(s) in 4 trace message(s) of RMQ_SYS_TRACE_TOPIC" in out
    assert any(ln.startswith("unreadable: broker-a: trace message at CommitLog offset") for ln in lines)
    code, out, _ = run(capsys, "trace", store_root, "--uniq-key", "U1", "--json")
    doc = json.loads(out)
    assert code == 0 and [r["trace_type"] for r in doc["rows"]] == ["Pub"] and doc["errors"] == []


def test_cli_why_shows_what_the_clients_reported(capsys, store_root):
    code, out, err = run(capsys, "why", store_root, "--topic", TOPIC, "--group", "CG", "--tags", "*",
                         "--msg-id", "U0")
    assert code == 0, err
    assert "what the clients reported (trace topic RMQ_SYS_TRACE_TOPIC):" in out
    assert "receive   CG at 2023-11-14T22:13:20.010Z by 10.0.0.2:4001, reconsumeTimes 0: consumption failed in 7 ms (FAILED)" \
        in out
    assert "reconsumeTimes 1: consumed in 7 ms (SUCCESS)" in out
    assert "OTHER" not in out
    code, out, _ = run(capsys, "why", store_root, "--topic", TOPIC, "--group", "CG", "--tags", "*",
                       "--queue", "0", "--offset", "0", "--json")
    doc = json.loads(out)
    assert [c["request_id"] for c in doc["client_trace"]["consumptions"]] == ["R1", "R2"]
    assert doc["client_trace"]["sends"][0]["msg_type"] == "Normal_Msg"


def test_cli_why_without_a_trace_topic_is_unchanged(capsys, tmp_path):
    with StoreWriter(tmp_path / "s") as w:
        w.append(TOPIC, b"x", tags="TagA", properties={"UNIQ_KEY": "U0"})
    code, out, _ = run(capsys, "why", tmp_path / "s", "--topic", TOPIC, "--group", "CG", "--tags", "*",
                       "--queue", "0", "--offset", "0", "--json")
    assert code == 0 and "client_trace" not in json.loads(out)
    code, _out, err = run(capsys, "why", tmp_path / "s", "--topic", TOPIC, "--group", "CG", "--tags", "*",
                          "--queue", "0", "--offset", "0", "--trace-topic", "Nope")
    assert code == 2 and "Nope" in err


def test_cli_trace_of_a_cluster_with_its_own_trace_topic(capsys, tmp_path):
    write_store(tmp_path / "broker-a", trace_topic="MyTrace")
    with StoreWriter(tmp_path / "broker-b") as w:
        w.append(TOPIC, b"y", properties={"UNIQ_KEY": "U9"})
    code, out, err = run(capsys, "trace", tmp_path / "broker-a", tmp_path / "broker-b", "--trace-topic", "MyTrace",
                         "--key", "k1")
    assert code == 0 and err == ""
    assert [ln.split()[:2] for ln in out.splitlines()[1:2]] == [["broker-a", "Pub"]]
    assert "1 record(s) in 1 trace message(s) of MyTrace" in out
    code, _out, err = run(capsys, "trace", tmp_path / "broker-b")
    assert code == 2 and "traceTopicEnable" in err
