"""rmqfilter against a real RocketMQ broker: the ``filters`` scenario (docs/testing.md).

RocketMQ's own broker (the version tests/broker/pom.xml pins) served SQL92 groups (bitmaps,
ConsumeQueueExt and property filtering on) and tag groups (``||`` lists, the ``Aa``/``BB`` hash
collision, messages without a tag) to real push consumers, which took what was sent while they
ran, committed and stopped; more was sent; the store was copied after a clean shutdown and the
consumers then drained the rest from their committed offsets. Every answer rmqfilter gives about
that store must be what the broker and its consumers did.
"""
from __future__ import annotations

import json
import os

import pytest
from broker_support import (
    assert_backlog_is_what_the_drain_received,
    assert_data_source_is_what_the_consumers_received,
    assert_inspect_offsets_are_the_brokers,
    assert_same_units,
    delivered,
    harness,
    release,
    scenario_fixtures,
)

import cq
import rmqfilter

pytestmark = pytest.mark.broker

GROUPS = [*harness.FILTER_SQL_GROUPS, harness.LATE_SQL_GROUP[0], *harness.FILTER_TAG_GROUPS,
          *harness.OTHER_TAG_GROUPS]
SQL_GROUPS = [*harness.FILTER_SQL_GROUPS, harness.LATE_SQL_GROUP[0]]
PURE_PYTHON = bool(os.environ.get("RMQFILTER_PUREPYTHON"))


run, store = scenario_fixtures("filters")


def spread(items: list, n: int) -> list:
    """n items spread evenly over the list (all of them when it has at most n)."""
    if len(items) <= n:
        return list(items)
    step = len(items) / n
    return [items[int(i * step)] for i in range(n)]


def test_the_scenario_exercises_what_it_should(run, store):
    """The run is what the checks below rely on: both phases, the collision, the bitmaps."""
    assert run.broker["rocketmq_version"] == release("filters")
    phases = {(r["group"], r["phase"]) for r in run.received}
    for g in GROUPS:
        assert (g, "live") in phases and (g, "drain") in phases, g
    assert all(r["reconsume_times"] == 0 for r in run.received)
    tags = {s["tags"] for s in run.sent}
    assert {"Aa", "BB", None} <= tags
    assert cq.tags_code("Aa") == cq.tags_code("BB")
    registered = json.loads((run.store_path() / "config" / "consumerFilter.json").read_text())
    assert set(SQL_GROUPS) <= {g for topic in registered["filterDataByTopic"].values()
                               for g in topic["groupFilterData"]}
    for g in harness.FILTER_SQL_GROUPS:      # subscribed before any message: bitmaps prune
        result = store.consume(harness.FILTER_TOPIC, g)
        list(result)
        assert result.stats.bloom_pruned > 0, g


@pytest.mark.parametrize("group", GROUPS)
def test_consume_is_what_the_consumers_received(run, store, group):
    g = run.group(group)
    want = {k: (r["uniq_key"], r["msg_id"]) for k, r in run.first[group].items()}
    assert_same_units(delivered(store, g, **run.subscription(g)), want, f"Store.consume({group})")


@pytest.mark.parametrize("group", SQL_GROUPS[:3])
def test_consume_with_the_expression_given_equals_the_registration(run, store, group):
    g = run.group(group)
    assert delivered(store, g, sql=g["expression"]) == delivered(store, g)


@pytest.mark.spark
@pytest.mark.parametrize("group", GROUPS)
def test_data_source_with_group_gives_the_same_rows(spark, run, group):
    assert_data_source_is_what_the_consumers_received(spark, run, group)


@pytest.mark.parametrize("group", GROUPS)
def test_backlog_is_what_the_drain_received_and_lag_is_the_admin_api(run, store, group):
    g = run.group(group)
    progress = {p["queue_id"]: p for p in g["progress"]}
    b = cq.backlog(store, g["topic"], group, **run.subscription(g))
    assert_backlog_is_what_the_drain_received(b, run, group)
    for q in b.queues:
        p = progress[q.queue_id]
        assert q.lag == p["broker_offset"] - p["consumer_offset"], q
    assert b.lag == sum(p["broker_offset"] - p["consumer_offset"] for p in progress.values())


def test_sql_given_for_the_late_group_answers_as_its_registration(run, store, capsys):
    """The late group's registered expression given outright (``--sql``) is the group's filter, its
    bornTime included: what its consumers received; bornTime 0 trusts the bitmaps computed before
    the group existed and drops messages the broker delivered (docs/filtering.md#born-time)."""
    group, sql = harness.LATE_SQL_GROUP
    g = run.group(group)
    want = {k: (r["uniq_key"], r["msg_id"]) for k, r in run.first[group].items()}
    assert_same_units(delivered(store, g, sql=sql), want, f"Store.consume({group}, sql=its expression)")
    assert len(delivered(store, g, sql=sql, born_time=0)) < len(want)     # 441 against 723 before the fix
    code, out = run_cli(capsys, "consume", run.store_path(), "--topic", g["topic"], "--group", group, "--sql", sql,
                        "--format", "jsonl")
    assert code == 0
    got = {(m["queue_id"], m["queue_offset"]): (m["properties"]["UNIQ_KEY"], m["msg_id"])
           for m in map(json.loads, out.splitlines())}
    assert_same_units(got, want, f"rmqfilter consume --group {group} --sql its expression")
    [w] = cq.why(store, g["topic"], group, sql=sql, msg_id=next(iter(want.values()))[0])
    assert w.delivered and w.subscription.registration is not None


def sent_by_uniq(run) -> dict[str, dict]:
    return {s["uniq_key"]: s for s in run.sent}


@pytest.mark.parametrize("group", GROUPS)
def test_why_says_delivered_for_received_messages(run, store, group):
    g = run.group(group)
    sub = run.subscription(g)
    for r in spread(sorted(run.first[group].values(), key=lambda r: (r["queue_id"], r["queue_offset"])), 12):
        for msg_id in (r["uniq_key"], r["msg_id"]):
            found = cq.why(store, g["topic"], group, msg_id=msg_id, **sub)
            assert [(w.queue_id, w.queue_offset, w.delivered, w.dropped_by) for w in found] == [
                (r["queue_id"], r["queue_offset"], True, None)], (group, msg_id)


@pytest.mark.parametrize("group", GROUPS)
def test_why_names_the_layer_that_dropped_what_was_never_received(run, store, group):
    g = run.group(group)
    sub = run.subscription(g)
    received = run.first[group]
    never = [(q["queue_id"], offset) for q in next(t["queues"] for t in run.broker["topics"]
                                                   if t["topic"] == g["topic"])
             for offset in range(q["min_offset"], q["max_offset"]) if (q["queue_id"], offset) not in received]
    if g["expression"] == "*":
        assert never == []
        return
    assert never
    codes = {cq.tags_code(t.strip()) for t in g["expression"].split("||")}
    for queue_id, offset in spread(never, 25):
        w = cq.why(store, g["topic"], group, queue_id=queue_id, queue_offset=offset, **sub)
        assert not w.delivered and w.dropped_by is not None, (queue_id, offset)
        if g["type"] == "TAG":
            tag = store.commit_log.read_message(w.commit_log_offset).tags
            # A tag whose hash is subscribed passes the broker; the client's exact re-check drops it.
            assert w.dropped_by == ("client" if cq.tags_code(tag) in codes else "consume_queue"), (tag, w)
        else:
            layer1 = next(s for s in w.steps if s.name == "consume_queue")
            assert w.dropped_by in ("consume_queue", "commit_log"), w
            if w.dropped_by == "consume_queue":
                assert layer1.reason == "bloom_miss", w


def run_cli(capsys, *argv) -> tuple[int, str]:
    capsys.readouterr()
    code = rmqfilter.main([str(a) for a in argv])
    return code, capsys.readouterr().out


@pytest.mark.parametrize("group", ["GID_SQL_STR_IN", "GID_SQL_LATE", "GID_TAG_AA", "GID_OTHER"])
def test_why_cli_by_uniq_key_offset_id_and_key(run, capsys, group):
    g = run.group(group)
    sub = ["--tags", g["expression"]] if g["type"] == "TAG" else []
    sent = sent_by_uniq(run)
    base = ["why", run.store_path(), "--topic", g["topic"], "--group", group, *sub, "--json"]
    for r in spread(sorted(run.first[group].values(), key=lambda r: r["uniq_key"]), 3):
        for option, value in (("--msg-id", r["uniq_key"]), ("--msg-id", r["msg_id"]),
                              ("--key", sent[r["uniq_key"]]["keys"][0])):
            code, out = run_cli(capsys, *base, option, value)
            answers = json.loads(out)
            assert code == 0 and [(a["queue_id"], a["queue_offset"], a["delivered"]) for a in answers] == [
                (r["queue_id"], r["queue_offset"], True)], (option, value, out[:500])
    # A key several messages carry: one answer each, delivered exactly where the consumer got it.
    shared = next(k for s in run.sent if s["topic"] == g["topic"] for k in s["keys"] if k.startswith("shared-"))
    code, out = run_cli(capsys, *base, "--key", shared)
    answers = json.loads(out)
    carriers = [s for s in run.sent if shared in s["keys"] and s["topic"] == g["topic"]]
    assert code == 0 and len(answers) == len(carriers) > 1
    for a in answers:
        assert a["delivered"] == ((a["queue_id"], a["queue_offset"]) in run.first[group]), a


def test_inspect_offsets_are_the_brokers(run, capsys):
    assert_inspect_offsets_are_the_brokers(run, capsys)


def test_every_key_and_uniq_key_is_found_through_the_broker_index(run, store):
    assert len(list((run.store_path() / "index").iterdir())) > 1    # the lookups cross index files
    # Each lookup opens the IndexFiles again (about 7 ms here), so a spread sample: every 6th
    # message (every 30th in the pure-Python pass), each file and both key kinds included.
    for s in run.sent[::30 if PURE_PYTHON else 6]:
        msgs, found_by, _ = cq.find_messages(store, s["topic"], msg_id=s["uniq_key"])
        assert found_by == "index" and [(m.queue_id, m.queue_offset, m.properties["UNIQ_KEY"]) for m in msgs] == [
            (s["queue_id"], s["queue_offset"], s["uniq_key"])], s
        for key in s["keys"]:
            msgs, found_by, _ = cq.find_messages(store, s["topic"], key=key)
            assert found_by == "index" and s["uniq_key"] in {m.properties["UNIQ_KEY"] for m in msgs}, (key, s)
