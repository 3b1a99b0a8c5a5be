"""``why`` follows every copy (cq.analyses.paths, docs/paths.md): the states a written store can show,
and bad input (an id that is nowhere, a malformed delayOffset.json) as an error, exit status 2, no byte changed.

The states against the real broker are in tests/broker/test_broker_lifecycle.py.
"""
from __future__ import annotations

import json
import os

import pytest
from helpers import tree_snapshot

import cq
from cq.analyses.paths import why_every_copy
from pyspark_udfs import cli

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
    code = cli.main([str(a) for a in argv])
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
