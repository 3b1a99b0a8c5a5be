"""``rmqfilter why``, ``backlog``, and the group lookup of ``consume`` / ``inspect``, from the command line."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from helpers import DATA, write_retry_store

import cq
import rmqfilter
from cq.writer.config_writer import dumps_fastjson
from cq.writer.sample import SAMPLE_GROUPS, generate_sample_store

GOLDEN = str(DATA / "golden_store")
TOPIC = "GoldenFilterTopic"
SQL_A = "a > 5 AND b = 'abc'"
SMALL = {"commit_log_file_size": 1 << 20, "ext_file_size": 1 << 16, "consume_queue_file_size": 20_000}


@pytest.fixture(scope="module")
def sample(tmp_path_factory):
    return generate_sample_store(tmp_path_factory.mktemp("cli") / "store", messages=2000, seed=8, **SMALL)


def golden_rows() -> list[dict]:
    with open(DATA / "golden_store.jsonl", encoding="utf-8") as f:
        return [json.loads(line) for line in f]


def run(capsys, *argv) -> tuple[int, str, str]:
    code = rmqfilter.main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


# ------------------------------------------------------------------ why
def test_why_by_queue_offset_prints_every_step(capsys):
    row = golden_rows()[4]
    code, out, err = run(capsys, "why", GOLDEN, "--topic", TOPIC, "--group", "GID_SQL_A", "--sql", SQL_A,
                         "--queue", row["queueId"], "--offset", row["queueOffset"])
    assert code == 0 and err == ""
    assert f"CommitLog offset {row['commitLogOffset']}" in out and row["msgId"] in out
    for title in ("ConsumeQueue unit", "Layer 1: ConsumeQueue", "Layer 2: CommitLog", "Client re-check",
                  "verdict"):
        assert title in out
    matched = next(g for g in row["groups"] if g["group"] == "GID_SQL_A")["matched"]
    assert ("DELIVERED: the group receives" in out) == matched


def test_why_json_object_agrees_with_the_python_api(capsys):
    store = cq.Store(GOLDEN)
    for row in golden_rows()[:200:13]:
        code, out, _ = run(capsys, "why", GOLDEN, "--topic", row["topic"], "--group", "GID_SQL_B", "--sql",
                           "TAGS = 'TagA' OR color IN ('red', 'grün')", "--queue", row["queueId"], "--offset",
                           row["queueOffset"], "--json")
        doc = json.loads(out)
        assert code == 0 and isinstance(doc, dict)
        want = cq.why(store, row["topic"], "GID_SQL_B", sql="TAGS = 'TagA' OR color IN ('red', 'grün')",
                         queue_id=row["queueId"], queue_offset=row["queueOffset"])
        assert (doc["delivered"], doc["dropped_by"]) == (want.delivered, want.dropped_by)
        assert (doc["queue_id"], doc["queue_offset"], doc["commit_log_offset"]) == (
            row["queueId"], row["queueOffset"], row["commitLogOffset"])
        assert doc["dropped_by"] in (None, "consume_queue", "commit_log", "client")
        assert [s["step"] for s in doc["steps"]][:2] == ["consume_queue_unit", "consume_queue"]


def test_why_by_msg_id_and_key_prints_a_list(capsys):
    row = golden_rows()[30]
    for flag, value, found_by in (("--msg-id", row["msgId"], "msg_id"), ("--msg-id", row["uniqKey"], "index"),
                                  ("--key", "order-115", "index")):
        code, out, _ = run(capsys, "why", GOLDEN, "--topic", row["topic"], "--group", "G", "--tags", "*",
                           flag, value, "--json")
        doc = json.loads(out)
        assert code == 0 and isinstance(doc, list) and doc and all(d["found_by"] == found_by for d in doc)
        if flag == "--msg-id":
            assert [d["commit_log_offset"] for d in doc] == [row["commitLogOffset"]]
    code, out, _ = run(capsys, "why", GOLDEN, "--topic", TOPIC, "--group", "G", "--tags", "*", "--key", "order-115")
    assert code == 0 and "2 messages match; each in turn" in out


def test_why_looks_the_group_up_and_says_so(sample, capsys):
    code, out, _ = run(capsys, "why", sample.root, "--topic", sample.main_topic, "--group", "GID_PRIORITY",
                       "--queue", 0, "--offset", 5)
    assert code == 0 and "registered in config/consumerFilter.json: bornTime" in out
    assert "isMsgInLive" in out
    # no index files in a sample store: a UNIQ_KEY is found by a scan, and the output says so
    msg = cq.why(cq.Store(sample.root), sample.main_topic, "GID_PRIORITY", queue_id=0, queue_offset=5)
    uniq = cq.Store(sample.root).commit_log.read_message(msg.commit_log_offset).properties["UNIQ_KEY"]
    code, out, _ = run(capsys, "why", sample.root, "--topic", sample.main_topic, "--group", "GID_PRIORITY",
                       "--msg-id", uniq)
    assert code == 0 and "found by scanning topic SampleTopic: the store has no index files" in out


def test_why_filter_support_retry_on_a_retry_topic(tmp_path, capsys):
    root = tmp_path / "store"
    write_retry_store(root)
    base = ["why", root, "--topic", "%RETRY%GID_ORDERS", "--group", "GID_ORDERS", "--queue", 0]
    code, out, err = run(capsys, *base, "--offset", 2, "--filter-support-retry")
    assert code == 0 and err == ""
    assert "filter    ExpressionForRetryMessageFilter (filterSupportRetry)" in out
    assert "RETRY_TOPIC 'AuditTopic': no filter registered for (AuditTopic, GID_ORDERS): the broker delivers it" in out
    assert "verdict   DELIVERED" in out
    code, out, err = run(capsys, *base, "--offset", 1, "--filter-support-retry", "--json")
    doc = json.loads(out)
    assert code == 0 and err == "" and (doc["delivered"], doc["dropped_by"]) == (False, "commit_log")
    layer2 = doc["steps"][-2]
    assert layer2["reason"] == "retry_selector_false" and layer2["evidence"]["retry"]["lookup"] == [
        "OrderTopic", "GID_ORDERS"] and layer2["evidence"]["retry"]["expression"] == "price > 30"
    # a retry record without properties is explained, exit 0
    code, out, err = run(capsys, *base, "--offset", 3, "--filter-support-retry")
    assert code == 0 and err == "" and "retry filter: the record has no properties" in out
    # the flag off (the broker's default): the group's own expression decides, and the output says so
    code, out, _ = run(capsys, *base, "--offset", 0)
    assert code == 0 and "filterSupportRetry is off" in out and "NOT DELIVERED" in out


@pytest.mark.parametrize("argv, message", [
    (["--group", "GID_NOPE", "--queue", "0", "--offset", "0"],
     "group 'GID_NOPE' has no SQL92 filter registered for topic 'SampleTopic'"),
    (["--group", "GID_PRIORITY", "--queue", "0", "--offset", "999999"], "queue offset 999999 is outside"),
    (["--group", "GID_PRIORITY", "--key", "no-such-key"], "no message of topic 'SampleTopic' has key 'no-such-key'"),
    (["--group", "GID_PRIORITY", "--queue", "0"], "--queue and --offset go together"),
    (["--group", "GID_PRIORITY", "--queue", "9", "--offset", "0"], "no consume queue SampleTopic/9"),
    (["--group", "GID_PRIORITY", "--sql", "a >", "--queue", "0", "--offset", "0"], "1:4: syntax error at end of input in selector 'a >'"),
])
def test_why_errors_exit_2_naming_the_input(sample, capsys, argv, message):
    code, out, err = run(capsys, "why", sample.root, "--topic", sample.main_topic, *argv)
    assert code == 2 and out == "" and message in err
    if "GID_NOPE" in argv:
        assert "registered groups: GID_PRIORITY, GID_RED_CHEAP, GID_TAGA_OR_EU" in err


def test_malformed_config_is_an_error_naming_file_and_position(tmp_path, capsys):
    root = tmp_path / "s"
    generate_sample_store(root, messages=50, seed=1, **SMALL)
    path = root / "config" / "consumerFilter.json"
    path.write_text('{"filterDataByTopic":{\n  "SampleTopic":{"groupFilterData":{,}}}}')
    (root / "config" / "consumerFilter.json.bak").unlink()
    code, _, err = run(capsys, "why", root, "--topic", "SampleTopic", "--group", "GID_PRIORITY", "--queue", 0,
                       "--offset", 0)
    assert code == 2 and f"{path} at byte offset 59: line 2 column 37: expected an object key" in err
    code, _, err = run(capsys, "backlog", root, "--topic", "SampleTopic", "--group", "GID_PRIORITY")
    assert code == 2 and str(path) in err


def test_bloom_data_mismatch_warns_naming_the_group(tmp_path, capsys):
    root = tmp_path / "s"
    generate_sample_store(root, messages=200, seed=1, **SMALL)
    path = root / "config" / "consumerFilter.json"
    from cq.readers.config import parse_fastjson

    doc = parse_fastjson(path.read_bytes())
    doc["filterDataByTopic"]["SampleTopic"]["groupFilterData"]["GID_RED_CHEAP"]["bloomFilterData"]["bitPos"] = [
        1, 2, 3]
    path.write_text(dumps_fastjson(doc))
    code, out, err = run(capsys, "why", root, "--topic", "SampleTopic", "--group", "GID_PRIORITY", "--queue", 0,
                         "--offset", 0)
    assert code == 0 and "warning:" in err and "group 'GID_RED_CHEAP' on topic 'SampleTopic' has bloom data" in err
    code, out, err = run(capsys, "inspect", root)
    assert code == 0 and "GID_RED_CHEAP on SampleTopic" in out and "[bloom data mismatch]" in out


# ------------------------------------------------------------------ backlog
def test_backlog_json_is_the_issues_shape_and_equals_the_api(sample, capsys):
    store = cq.Store(sample.root)
    for group, _ in SAMPLE_GROUPS:
        code, out, _ = run(capsys, "backlog", sample.root, "--topic", sample.main_topic, "--group", group, "--json")
        doc = json.loads(out)
        want = cq.backlog(store, sample.main_topic, group)
        assert code == 0
        assert [{k: q[k] for k in ("queue_id", "committed_offset", "max_offset", "lag", "will_receive")}
                for q in doc["queues"]] == [
            {"queue_id": q.queue_id, "committed_offset": q.committed_offset, "max_offset": q.max_offset,
             "lag": q.lag, "will_receive": q.will_receive} for q in want.queues]
        assert doc["total"] == {"lag": want.lag, "will_receive": want.will_receive}
    code, out, _ = run(capsys, "backlog", sample.root, "--topic", sample.main_topic, "--all-groups", "--json")
    assert code == 0 and [d["group"] for d in json.loads(out)] == [g for g, _ in SAMPLE_GROUPS]
    code, out, _ = run(capsys, "backlog", sample.root, "--topic", sample.main_topic, "--group", "GID_PRIORITY")
    assert code == 0 and "broker lag" in out and "will receive" in out and "total" in out


def test_backlog_errors(sample, capsys):
    code, _, err = run(capsys, "backlog", sample.root, "--topic", sample.main_topic, "--group", "GID_X")
    assert code == 2 and "group 'GID_X' has no SQL92 filter registered" in err
    code, _, err = run(capsys, "backlog", sample.root, "--topic", "NoTopic", "--group", "GID_PRIORITY")
    assert code == 2 and "topic 'NoTopic' has no consume queues" in err
    code, _, err = run(capsys, "backlog", GOLDEN, "--topic", TOPIC, "--all-groups")
    assert code == 2 and "no SQL92 group is registered for topic 'GoldenFilterTopic'" in err


# ------------------------------------------------------------------ consume / inspect with the config files
def test_consume_group_alone_equals_consume_with_its_sql(sample, capsys):
    for group, sql in SAMPLE_GROUPS:
        code, by_group, _ = run(capsys, "consume", sample.root, "--topic", sample.main_topic, "--group", group)
        code2, by_sql, _ = run(capsys, "consume", sample.root, "--topic", sample.main_topic, "--group", group,
                               "--sql", sql)
        assert code == code2 == 0 and by_group == by_sql and by_group.count("\n") > 10
    code, out, err = run(capsys, "consume", sample.root, "--topic", sample.main_topic, "--all-groups",
                         "--format", "jsonl")
    docs = [json.loads(line) for line in out.splitlines()]
    assert code == 0 and {d["group"] for d in docs} == {g for g, _ in SAMPLE_GROUPS}
    assert all(f"{g}: units scanned" in err for g, _ in SAMPLE_GROUPS)


def test_inspect_lists_registered_groups_and_committed_offsets(sample, capsys):
    code, out, _ = run(capsys, "inspect", sample.root, "--json")
    info = json.loads(out)
    assert code == 0
    assert [g["group"] for g in info["registered_groups"]] == [g for g, _ in SAMPLE_GROUPS]
    store = cq.Store(sample.root)
    for g in info["registered_groups"]:
        assert g["bloom_matches"] and not g["is_dead"]
        assert {int(q): o for q, o in g["committed_offsets"].items()} == store.committed_offsets(
            g["group"], sample.main_topic)
    assert info["config"]["consumerOffset.json"].endswith("config/consumerOffset.json")
    code, out, _ = run(capsys, "inspect", sample.root)
    assert "SQL92 groups registered in config/consumerFilter.json:" in out and "Committed offsets" in out


def test_why_and_backlog_do_not_import_spark(sample):
    code = ("import sys; import rmqfilter; "
            f"rmqfilter.main(['why', {sample.root!r}, '--topic', 'SampleTopic', '--group', 'GID_PRIORITY', "
            "'--queue', '0', '--offset', '1']); "
            f"rmqfilter.main(['backlog', {sample.root!r}, '--topic', 'SampleTopic', '--all-groups']); "
            "sys.exit(1 if any(m.split('.')[0] in ('pyspark', 'pyspark_udfs') for m in sys.modules) else 0)")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, check=False)
    assert done.returncode == 0, done.stderr


def test_scan_group_lookup_errors_before_spark_starts(sample, capsys):
    code, _, err = run(capsys, "scan", sample.root, "--topic", sample.main_topic, "--group", "GID_NOPE")
    assert code == 2 and "group 'GID_NOPE' has no SQL92 filter registered" in err and "GID_PRIORITY" in err
    code, _, err = run(capsys, "scan", sample.root, "--topic", sample.main_topic, "--all-groups", "--sql", "a=1")
    assert code == 2 and "--all-groups takes each group's registered subscription" in err
    code, _, err = run(capsys, "scan", GOLDEN, "--topic", TOPIC, "--all-groups")
    assert code == 2 and "no SQL92 group is registered for topic 'GoldenFilterTopic'" in err
