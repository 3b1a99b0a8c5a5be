"""POP consumption read back from the revive log (cq.analyses.pop, docs/paths.md#pop): ``why``'s
``in_flight`` and a POP group's ``retrying``/``consumed``, ``backlog``'s in-flight count and POP
retry topic, and a malformed checkpoint as an error naming the file and the offset, exit status 2,
no byte changed. The same against the real broker: tests/broker/test_broker_lifecycle.py.
"""
from __future__ import annotations

import contextlib
import json
import os

import pytest
from helpers import tree_snapshot

import cq
import rmqfilter
from cq.analyses.paths import why_every_copy
from cq.analyses.pending import COLUMNS, pending
from cq.analyses.pop import pop_retry_topics, read_revive_log

T0 = 1_700_000_000_000
TOPIC, GROUP = "OrderTopic", "GID_POP"
REVIVE = "rmq_sys_REVIVE_LOG_TestCluster"
RETRY = f"%RETRY%{GROUP}_{TOPIC}"


def ck(so: int, pt: int, it: int, diffs: list[int], q: int = 0, topic: str = TOPIC) -> bytes:
    return json.dumps({"so": so, "pt": pt, "it": it, "bm": 0, "n": len(diffs), "q": q, "t": topic, "c": GROUP,
                       "ro": 0, "d": diffs, "bn": "broker-a"}).encode()


def ack(so: int, pt: int, ao: int) -> bytes:
    return json.dumps({"ao": ao, "so": so, "c": GROUP, "t": TOPIC, "q": 0, "pt": pt, "bn": "broker-a"}).encode()


def batch_ack(so: int, pt: int, aol: list[int]) -> bytes:
    return json.dumps({"aol": aol, "so": so, "c": GROUP, "t": TOPIC, "q": 0, "pt": pt, "bn": "broker-a"}).encode()


def write_store(root) -> None:
    """OrderTopic queue 0 offsets 0-4 (U0-U4). GID_POP popped 0-2 at T0 for 60 s (checkpoint in the
    revive topic; U0 acked there, U1 by a batch ack still in the timer, U2 not acked) and 3 at
    T0 + 1000 for 1 s (checkpoint in revive queue 1, which the revive service has processed: no ack,
    revived into the POP retry topic, not popped again); its committed offset is 4 (U4 not popped)."""
    with cq.StoreWriter(root, cluster=None) as w:
        for i in range(5):
            w.append(TOPIC, f"m{i}".encode(), tags="TagA", properties={"UNIQ_KEY": f"U{i}"}, store_timestamp=T0 - 100 + i)
        w.append(REVIVE, ck(0, T0, 60_000, [0, 1, 2]), queue_id=0, tags="ck", store_timestamp=T0 + 10)
        w.append(REVIVE, ack(0, T0, 0), queue_id=0, tags="ack", store_timestamp=T0 + 20)
        w.append("rmq_sys_wheel_timer", batch_ack(0, T0, [1]), tags="bAck",
                 properties={"REAL_TOPIC": REVIVE, "REAL_QID": "0", "TIMER_OUT_MS": str(T0 + 60_000)},
                 store_timestamp=T0 + 30)
        w.append(REVIVE, ck(3, T0 + 1000, 1000, [0]), queue_id=1, tags="ck", store_timestamp=T0 + 1010)
        w.append(RETRY, b"m3", tags="TagA", reconsume_times=1, properties={"UNIQ_KEY": "U3"},
                 store_timestamp=T0 + 5000)
    config = os.path.join(root, "config")
    os.makedirs(config, exist_ok=True)
    with open(os.path.join(config, "consumerOffset.json"), "w") as f:
        json.dump({"offsetTable": {f"{TOPIC}@{GROUP}": {"0": 4}, f"{RETRY}@{GROUP}": {"0": 0},
                                   f"{REVIVE}@CID_RMQ_SYS_REVIVE_GROUP": {"1": 0}}}, f)


@pytest.fixture()
def store_root(tmp_path):
    root = tmp_path / "store"
    write_store(root)
    return str(root)


@contextlib.contextmanager
def opened(root):
    s = cq.Store(root)
    try:
        yield s
    finally:
        s.close()


def state(root, uniq):
    with opened(root) as s:
        [p] = why_every_copy(s, TOPIC, GROUP, tags="*", msg_id=uniq, now_ms=T0 + 10_000)
    return p


def test_the_revive_log_read_back(store_root):
    with opened(store_root) as s:
        log = read_revive_log(s)
    assert log.groups() == {GROUP}
    pops = {p.queue_offset: (p.acked, p.revived, p.checkpoint.due_at_ms) for p in log.pops(GROUP)}
    assert pops == {0: (True, False, T0 + 60_000), 1: (True, False, T0 + 60_000), 2: (False, False, T0 + 60_000),
                    3: (False, True, T0 + 2000)}
    assert pop_retry_topics(GROUP, TOPIC) == [RETRY, f"%RETRY%{GROUP}+{TOPIC}"]


def test_why_states_of_a_pop_group(store_root):
    assert state(store_root, "U0").state == "consumed"
    acked_in_timer = state(store_root, "U1")
    assert acked_in_timer.state == "consumed" and "acked by the record" in acked_in_timer.steps[-1].detail
    held = state(store_root, "U2")
    assert (held.state, held.fields["due_at_ms"]) == ("in_flight", T0 + 60_000)
    assert held.fields["pop"]["pop_time"] == T0 and "invisible until" in held.sentence
    revived = state(store_root, "U3")
    assert revived.state == "retrying" and revived.fields["reconsume_times"] == 1
    assert [c.role for c in revived.copies] == ["topic", "pop_retry"]
    assert state(store_root, "U4").state == "pending"


def test_backlog_counts_in_flight_and_the_pop_retry_topic(store_root, capsys):
    with opened(store_root) as s:
        b = cq.backlog(s, TOPIC, GROUP, tags="*", later=True, now_ms=T0 + 10_000)
    assert b.will_receive == 1 and b.in_flight["messages"] == 1 and b.in_flight["buckets"]["1m"] == 1
    assert b.pop_retry.topic == RETRY and b.pop_retry.will_receive == 1
    assert b.will_receive_later == 2
    capsys.readouterr()
    assert rmqfilter.main(["backlog", store_root, "--topic", TOPIC, "--group", GROUP, "--tags", "*", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["in_flight"]["messages"] == 1 and doc["pop_retry"]["total"]["will_receive"] == 1
    assert rmqfilter.main(["backlog", store_root, "--topic", TOPIC, "--group", GROUP, "--tags", "*"]) == 0
    assert "in flight: 1 message(s) popped and not acked" in capsys.readouterr().out


def test_pending_pops_table(store_root, capsys):
    with opened(store_root) as s:
        rows = pending(s, "pops")
    assert [list(r) for r in rows] == [[n for n, _ in COLUMNS["pops"]]] * 4
    got = {r["queue_offset"]: (r["status"], r["uniq_key"], r["due_at_ms"], r["revive_offset"]) for r in rows}
    assert got == {0: ("acked", "U0", T0 + 60_000, 0), 1: ("acked", "U1", T0 + 60_000, 0),
                   2: ("in_flight", "U2", T0 + 60_000, 0), 3: ("revived", "U3", T0 + 2000, 0)}
    capsys.readouterr()
    assert rmqfilter.main(["pending", store_root, "--table", "pops", "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == {"pops": rows}


def test_a_malformed_checkpoint(tmp_path, capsys):
    root = tmp_path / "store"
    with cq.StoreWriter(root, cluster=None) as w:
        w.append(TOPIC, b"m0", tags="TagA", properties={"UNIQ_KEY": "U0"}, store_timestamp=T0)
        bad = w.append(REVIVE, b'{"so": 0, "pt": 1, "it": 2, "q": 0, "t": "OrderTopic", "c": "GID_POP", "d": [0',
                       queue_id=0, tags="ck", store_timestamp=T0)
    before = tree_snapshot(str(root))
    capsys.readouterr()
    code = rmqfilter.main(["why", str(root), "--topic", TOPIC, "--group", GROUP, "--tags", "*", "--msg-id", "U0"])
    out, err = capsys.readouterr()
    assert code == 2 and out == "" and "Traceback" not in err
    assert "POP checkpoint body" in err and "not JSON" in err
    assert os.path.join(str(root), "commitlog") in err and f"offset {bad.commit_log_offset}" in err, err
    assert tree_snapshot(str(root)) == before


def test_a_checkpoint_field_of_the_wrong_type(tmp_path):
    root = tmp_path / "store"
    with cq.StoreWriter(root, cluster=None) as w:
        w.append(REVIVE, json.dumps({"so": "zero", "pt": 1, "it": 2, "q": 0, "t": TOPIC, "c": GROUP,
                                     "d": [0]}).encode(), tags="ck")
    with opened(root) as s, pytest.raises(cq.StoreFormatError, match=r"'so' = 'zero', not an integer"):
        read_revive_log(s)


def test_an_open_store_follows_the_revive_service(store_root):
    """The revive log a Store read is read again once the revive service has moved: the checkpoint at
    revive queue 0 offset 0 was in flight, and is revived once the service's offset passes it."""
    with opened(store_root) as s:
        before = {p.queue_offset: p.revived for p in read_revive_log(s).pops(GROUP)}
        assert before[2] is False
        path = os.path.join(store_root, "config", "consumerOffset.json")
        with open(path) as f:
            doc = json.load(f)
        doc["offsetTable"][f"{REVIVE}@CID_RMQ_SYS_REVIVE_GROUP"]["0"] = 1
        with open(path, "w") as f:
            json.dump(doc, f)
        after = {p.queue_offset: p.revived for p in read_revive_log(s).pops(GROUP)}
    assert after == {0: True, 1: True, 2: True, 3: True}
