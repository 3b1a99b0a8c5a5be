"""``why`` follows every copy (cq.analyses.paths, docs/paths.md): the states a written store can show,
and bad input (an id that is nowhere, a malformed delayOffset.json) as an error, exit status 2, no byte changed.

The states against the real broker are in tests/broker/test_broker_lifecycle.py.
"""
from __future__ import annotations

import json
import os
import shutil

import pytest
from helpers import DATA, tree_snapshot

import cq
import rmqfilter
from cq.analyses.paths import why_every_copy
from cq.analyses.pending import pending

T0 = 1_700_000_000_000
TOPIC, GROUP = "OrderTopic", "GID_ORDERS"


def write_store(root) -> None:
    """OrderTopic: U-plain (committed past by GID_ORDERS), U-new (not yet); a level-2 delay copy U-late
    still scheduled; a level-1 copy U-due already delivered (delayOffset past it), with its topic copy;
    a transaction half U-half without an op; GID_ORDERS failed U-plain once: its retry waits in %RETRY%."""
    with cq.StoreWriter(root, cluster=None, message_delay_level="1s 5s") as w:
        w.append(TOPIC, b"plain", tags="TagA", properties={"UNIQ_KEY": "U-plain"}, store_timestamp=T0)
        w.append(TOPIC, b"due", tags="TagA", properties={"UNIQ_KEY": "U-due", "DELAY": "1", "REAL_TOPIC": TOPIC,
                                                         "REAL_QID": "0"}, store_timestamp=T0 + 2000)
        w.append(TOPIC, b"new", tags="TagB", properties={"UNIQ_KEY": "U-new"}, store_timestamp=T0 + 3000)
        w.append("SCHEDULE_TOPIC_XXXX", b"due", queue_id=0, tags="TagA",
                 properties={"UNIQ_KEY": "U-due", "DELAY": "1", "REAL_TOPIC": TOPIC, "REAL_QID": "0"},
                 store_timestamp=T0 + 1000)
        w.append("SCHEDULE_TOPIC_XXXX", b"late", queue_id=1, tags="TagA",
                 properties={"UNIQ_KEY": "U-late", "DELAY": "2", "REAL_TOPIC": TOPIC, "REAL_QID": "0"},
                 store_timestamp=T0 + 4000)
        w.append("RMQ_SYS_TRANS_HALF_TOPIC", b"half", tags="TagA",
                 properties={"UNIQ_KEY": "U-half", "REAL_TOPIC": TOPIC, "REAL_QID": "0", "TRAN_MSG": "true",
                             "PGROUP": "PG"}, store_timestamp=T0 + 5000)
        w.append("%RETRY%GID_ORDERS", b"plain", tags="TagA", reconsume_times=1,
                 properties={"UNIQ_KEY": "U-retry", "RETRY_TOPIC": TOPIC}, store_timestamp=T0 + 6000)
        w.append(TOPIC, b"retry", tags="TagA", properties={"UNIQ_KEY": "U-retry"}, store_timestamp=T0 + 500)
    config = os.path.join(root, "config")
    os.makedirs(config, exist_ok=True)
    with open(os.path.join(config, "delayOffset.json"), "w") as f:
        f.write('{"offsetTable":{1:1,2:0}}')
    with open(os.path.join(config, "consumerOffset.json"), "w") as f:
        json.dump({"offsetTable": {f"{TOPIC}@{GROUP}": {"0": 1}}}, f)


@pytest.fixture()
def store_root(tmp_path):
    root = tmp_path / "store"
    write_store(root)
    return str(root)


def state(root, uniq, **kw):
    [p] = why_every_copy(cq.Store(root), TOPIC, GROUP, tags="*", msg_id=uniq, now_ms=T0 + 10_000, **kw)
    return p


def test_states_of_a_written_store(store_root):
    assert state(store_root, "U-plain").state == "consumed"
    assert state(store_root, "U-new").state == "pending"
    assert state(store_root, "U-due").state == "pending"       # its level-1 copy was delivered
    late = state(store_root, "U-late")
    assert (late.state, late.fields["due_at_ms"], late.fields["delay_level"]) == ("scheduled", T0 + 4000 + 5000, 2)
    half = state(store_root, "U-half")
    assert half.state == "uncommitted" and (half.fields["age_ms"], half.fields["producer_group"]) == (5000, "PG")
    retry = state(store_root, "U-retry")
    assert retry.state == "retrying" and retry.fields["reconsume_times"] == 1
    # no index files: the copies were found by a scan, and the answer says so
    assert "by scanning" in late.note and "the store has no index files" in late.note


def test_a_group_filter_and_a_disabled_group(store_root):
    [p] = why_every_copy(cq.Store(store_root), TOPIC, GROUP, tags="TagA", msg_id="U-new")
    assert p.state == "filtered" and p.fields["dropped_by"] == "consume_queue"
    with open(os.path.join(store_root, "config", "subscriptionGroup.json"), "w") as f:
        json.dump({"subscriptionGroupTable": {GROUP: {"groupName": GROUP, "consumeEnable": False}}}, f)
    p = state(store_root, "U-new")
    assert p.state == "gated" and p.fields["reason"] == "group_disabled" and "consumeEnable=false" in p.sentence


def run_cli(capsys, *argv) -> tuple[int, str, str]:
    capsys.readouterr()
    code = rmqfilter.main([str(a) for a in argv])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_an_id_that_is_nowhere(store_root, capsys):
    before = tree_snapshot(store_root)
    code, out, err = run_cli(capsys, "why", store_root, "--topic", TOPIC, "--group", GROUP, "--tags", "*",
                             "--msg-id", "NO-SUCH-ID")
    assert code == 2 and out == ""
    assert err.startswith("rmqfilter why: error: ") and "'NO-SUCH-ID'" in err and "OrderTopic" in err
    assert "Traceback" not in err and tree_snapshot(store_root) == before


def test_a_malformed_delay_offset_file(store_root, capsys):
    path = os.path.join(store_root, "config", "delayOffset.json")
    with open(path, "w") as f:
        f.write('{"offsetTable":{1:1,2:}}')
    before = tree_snapshot(store_root)
    code, out, err = run_cli(capsys, "why", store_root, "--topic", TOPIC, "--group", GROUP, "--tags", "*",
                             "--msg-id", "U-late")
    assert code == 2 and out == ""
    assert path in err and "offset 22" in err and "Traceback" not in err, err
    assert tree_snapshot(store_root) == before


def test_text_leads_with_the_state_and_json_has_its_fields(store_root, capsys):
    code, out, _ = run_cli(capsys, "why", store_root, "--topic", TOPIC, "--group", GROUP, "--tags", "*",
                           "--msg-id", "U-late")
    assert code == 0 and out.startswith("state     SCHEDULED: it is scheduled (delay level 2)")
    code, out, _ = run_cli(capsys, "why", store_root, "--topic", TOPIC, "--group", GROUP, "--tags", "*",
                           "--msg-id", "U-late", "--json")
    [doc] = json.loads(out)
    assert code == 0 and (doc["state"], doc["due_at_ms"]) == ("scheduled", T0 + 9000)
    assert [c["role"] for c in doc["copies"]] == ["scheduled"]


# ------------------------------------------------------------------ timer recalls on the real broker's store
TIMER_STORE = DATA / "timer_store"
TIMER_RUN = json.loads((DATA / "timer_store.json").read_text())
TIMER_SENDS = {s["keys"][0]: s for s in TIMER_RUN["timer_sends"]}
RECALLED = {r["keys"] for r in TIMER_RUN["recalls"] if r["ok"]}


@pytest.mark.parametrize("group, tags", [("GID_LIFE_ALL", "*"), ("GID_LIFE_A", "TagA"), ("GID_LIFE_FAIL", "*")])
def test_timer_messages_recalled_scheduled_or_delivered(group, tags):
    """TIMER_STORE.md: recall-timer-0 and -2 were recalled, -1 and -3 and the far timers still due at
    the snapshot; timer-0 fired and was consumed although its recall was asked (and refused)."""
    store = cq.Store(str(TIMER_STORE))
    try:
        for key, s in TIMER_SENDS.items():
            [p] = why_every_copy(store, TIMER_RUN["topic"], group, tags=tags, msg_id=s["uniq_key"])
            if key in RECALLED:
                assert p.state == "recalled" and p.fields["due_at_ms"] == s["deliver_ms"] // 1000 * 1000, key
                assert [c.role for c in p.copies] == ["timer", "timer_recall"]
                [took] = [r for r in TIMER_RUN["recalls"] if r["keys"] == key]
                assert took["recall_ms"] - 1000 < p.fields["recalled_at_ms"] < took["recall_ms"] + 1000
                assert [s.reason for s in p.steps] == ["not_fired", "recalled"]
                assert "magic 5" in p.steps[1].detail     # the marker's delete unit in the timerlog
            elif key.startswith(("recall-timer", "far-timer")):
                assert p.state == "scheduled" and p.fields["timer"], key
                assert "magic 1" in p.steps[0].detail and "lastReadTime" not in p.steps[0].detail
            else:
                assert p.state in ("consumed", "filtered"), (key, p.state)
    finally:
        store.close()


def test_recalled_text_json_and_pending_rows(capsys):
    root = str(TIMER_STORE)
    uniq = TIMER_SENDS["recall-timer-0"]["uniq_key"]
    code, out, _ = run_cli(capsys, "why", root, "--topic", "LifeTopic", "--group", "GID_LIFE_ALL", "--tags", "*",
                           "--key", "recall-timer-0")
    assert code == 0 and out.startswith("state     RECALLED: the producer recalled it (recallMessage) before it was "
                                        "due at"), out
    code, out, _ = run_cli(capsys, "why", root, "--topic", "LifeTopic", "--group", "GID_LIFE_ALL", "--tags", "*",
                           "--msg-id", uniq, "--json")
    [doc] = json.loads(out)
    assert code == 0 and doc["state"] == "recalled" and doc["uniq_key"] == uniq
    code, out, _ = run_cli(capsys, "pending", root, "--table", "scheduled", "--json")
    rows = [r for r in json.loads(out)["scheduled"] if r["kind"] == "timer" and r["real_topic"] == "LifeTopic"]
    # one row per timer message (the recall markers are none), by what the broker did
    by_key = {r["keys"]: r["status"] for r in rows}
    assert by_key == {k: "recalled" if k in RECALLED else "scheduled" if k.startswith(("recall", "far")) else "delivered"
                      for k in TIMER_SENDS}
    # backlog --later: the timer messages still due that pass the group's filter, the recalled ones not
    b = cq.backlog(cq.Store(root), "LifeTopic", "GID_LIFE_ALL", tags="*", later=True)
    due = [k for k in TIMER_SENDS if k.startswith(("recall", "far")) and k not in RECALLED]
    assert b.scheduled["to_topic"] >= len(due)
    b_a = cq.backlog(cq.Store(root), "LifeTopic", "GID_LIFE_A", tags="TagA", later=True)
    assert b.scheduled["to_topic"] - b_a.scheduled["to_topic"] == sum(
        1 for k in due if TIMER_SENDS[k]["tags"] != "TagA") + _delay_copies_due(root, "TagB")


def _delay_copies_due(root, tag: str) -> int:
    """The delay-level copies of LifeTopic still due with ``tag`` (they count in backlog's to_topic too)."""
    return sum(1 for r in pending(cq.Store(root), "scheduled") if r["kind"] == "delay_level"
               and r["status"] == "scheduled" and r["real_topic"] == "LifeTopic" and r["tags"] == tag)


def _timer_store_copy(tmp_path, *, own_wheel: bool = False):
    """A writable copy of timer_store; its 37 MiB wheel linked unless the test damages it."""
    root = tmp_path / "timer_store"
    shutil.copytree(TIMER_STORE, root, ignore=None if own_wheel else shutil.ignore_patterns("timerwheel"))
    if not own_wheel:
        os.symlink(TIMER_STORE / "timerwheel", root / "timerwheel")
    return root


def test_a_timer_message_the_checkpoint_has_fired_without_a_record_in_its_topic(tmp_path):
    """Move config/timercheck's progress past far-timer-0's due time: the timer has fired it, yet its
    topic holds no record of it; why says expired, pending delivered, backlog no longer counts it."""
    root = _timer_store_copy(tmp_path)
    far = TIMER_SENDS["far-timer-0"]
    before = cq.backlog(cq.Store(str(root)), "LifeTopic", "GID_LIFE_ALL", tags="*", later=True).scheduled["to_topic"]
    progress = far["deliver_ms"] // 1000 * 1000 + 1000
    with open(root / "config" / "timercheck", "r+b") as f:
        f.write(progress.to_bytes(8, "big"))
    store = cq.Store(str(root))
    [p] = why_every_copy(store, "LifeTopic", "GID_LIFE_ALL", tags="*", msg_id=far["uniq_key"])
    assert p.state == "expired" and p.steps[0].reason == "fired" and "the broker's timer fired it" in p.sentence
    rows = {r["keys"]: r["status"] for r in pending(store, "scheduled") if r["kind"] == "timer"}
    assert rows["far-timer-0"] == "delivered" and rows["recall-timer-1"] == "scheduled"
    assert rows["recall-timer-0"] == "recalled"
    after = cq.backlog(store, "LifeTopic", "GID_LIFE_ALL", tags="*", later=True).scheduled["to_topic"]
    fired = [k for k, s in TIMER_SENDS.items() if k.startswith("far") and s["deliver_ms"] // 1000 * 1000 < progress]
    assert "far-timer-0" in fired and after == before - len(fired)


def _cut_timercheck(root, cut: int) -> tuple[str, int, str]:
    path = root / "config" / "timercheck"
    path.write_bytes(path.read_bytes()[:cut])
    return str(path), cut // 8 * 8, f"timercheck is {cut} bytes"


def _bad_timerlog_magic(root) -> tuple[str, int, str]:
    path = root / "timerlog" / "00000000000000001024"
    with open(path, "r+b") as f:     # the fourth unit of the second file: magic 0x10
        f.seek(3 * 52 + 12)
        f.write((0x10).to_bytes(4, "big"))
    return str(path), 3 * 52, "timerlog unit has size 52, magic 16"


def _short_wheel(root) -> tuple[str, int, str]:
    path = root / "timerwheel"
    with open(path, "r+b") as f:
        f.truncate(1 << 20)
    return str(path), 1 << 20, "timerwheel is 1048576 bytes, expected 38707200"


@pytest.mark.parametrize("damage", [lambda r: _cut_timercheck(r, 0), lambda r: _cut_timercheck(r, 40),
                                    _bad_timerlog_magic, _short_wheel], ids=["check0", "check40", "magic", "wheel"])
def test_damaged_timer_files_are_an_error_for_why_pending_and_backlog(tmp_path, capsys, damage):
    root = _timer_store_copy(tmp_path, own_wheel=damage is _short_wheel)
    path, offset, text = damage(root)
    before = tree_snapshot(root)
    for argv in (["why", root, "--topic", "LifeTopic", "--group", "GID_LIFE_ALL", "--tags", "*", "--key",
                  "recall-timer-1"],
                 ["pending", root, "--table", "scheduled"],
                 ["backlog", root, "--topic", "LifeTopic", "--group", "GID_LIFE_ALL", "--tags", "*"]):
        code, out, err = run_cli(capsys, *argv)
        assert code == 2 and out == "", (argv[0], out)
        assert f"{path} at byte offset {offset}: {text}" in err, err
        assert "Traceback" not in err
    assert tree_snapshot(root) == before


def _two_brokers(tmp_path, elsewhere: str):
    """broker-a holds OrderTopic's U-moved, consumed by GID_ORDERS; broker-b holds what the client sent
    through its own producer when broker-a refused the send-back: a retry (``elsewhere`` "retry",
    uncommitted) or a dead letter ("dlq") of the same UNIQ_KEY (docs/paths.md#retries-on-another-broker)."""
    a, b = tmp_path / "broker-a", tmp_path / "broker-b"
    with cq.StoreWriter(a, cluster=None) as w:
        w.append(TOPIC, b"moved", tags="TagA", properties={"UNIQ_KEY": "U-moved"}, store_timestamp=T0)
        w.append(TOPIC, b"kept", tags="TagA", properties={"UNIQ_KEY": "U-kept"}, store_timestamp=T0 + 1)
    with cq.StoreWriter(b, cluster=None) as w:
        w.append(TOPIC, b"other", tags="TagA", properties={"UNIQ_KEY": "U-other"}, store_timestamp=T0)
        topic = "%RETRY%GID_ORDERS" if elsewhere == "retry" else "%DLQ%GID_ORDERS"
        w.append(topic, b"moved", tags="TagA", reconsume_times=1 if elsewhere == "retry" else 3,
                 properties={"UNIQ_KEY": "U-moved", "RETRY_TOPIC": TOPIC, "ORIGIN_MESSAGE_ID": "AB"},
                 store_timestamp=T0 + 100)
    for root in (a, b):
        os.makedirs(root / "config", exist_ok=True)
        with open(root / "config" / "consumerOffset.json", "w") as f:
            json.dump({"offsetTable": {f"{TOPIC}@{GROUP}": {"0": 2 if root == a else 1}}}, f)
    return a, b


@pytest.mark.parametrize(("elsewhere", "want"), [("retry", "retrying"), ("dlq", "dead_letter")])
def test_a_retry_the_client_sent_through_another_broker(tmp_path, capsys, elsewhere, want):
    """Over the cluster the copy on broker-b decides (named in the sentence, the copies and
    ``copy_broker``); broker-a's store alone says consumed; a message without such a copy stays consumed."""
    a, b = _two_brokers(tmp_path, elsewhere)
    with cq.Cluster([str(a), str(b)]) as cluster:
        [p] = why_every_copy(cluster, TOPIC, GROUP, tags="*", msg_id="U-moved", now_ms=T0 + 10_000)
        assert (p.state, p.fields["broker"], p.fields["copy_broker"]) == (want, "broker-a", "broker-b")
        assert "broker-b" in p.sentence and {c.message.topic for c in p.copies} == {
            TOPIC, "%RETRY%GID_ORDERS" if elsewhere == "retry" else "%DLQ%GID_ORDERS"}
        [kept] = why_every_copy(cluster, TOPIC, GROUP, tags="*", msg_id="U-kept", now_ms=T0 + 10_000)
        assert kept.state == "consumed" and "copy_broker" not in kept.fields
    [alone] = why_every_copy(cq.Store(str(a)), TOPIC, GROUP, tags="*", msg_id="U-moved")
    assert alone.state == "consumed"
    capsys.readouterr()
    assert rmqfilter.main(["why", str(a), str(b), "--topic", TOPIC, "--group", GROUP, "--tags", "*",
                           "--msg-id", "U-moved", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    doc = doc[0] if isinstance(doc, list) else doc
    assert (doc["state"], doc["copy_broker"]) == (want, "broker-b")
