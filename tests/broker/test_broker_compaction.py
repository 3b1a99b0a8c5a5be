"""rmqfilter against a real RocketMQ broker's compaction topic: the ``compaction`` scenario, on 5.3.3
and on 5.5.1.

RocketMQ's own broker stored messages with repeated KEYS to a compaction topic
(``+cleanup.policy=COMPACTION``), compacted its rolled compaction log files, and served them to real
push consumers of tag and SQL92 groups reading from the first offset; more messages followed and were
compacted, the store was copied, and the groups drained the rest (tests/broker/scenario_compaction.py,
docs/testing.md). The drain read the compaction files as the copy holds them: every answer rmqfilter
gives about those offsets must be what the consumers received (docs/reading.md#compaction-topics).
"""
from __future__ import annotations

import pytest
from broker_support import assert_inspect_offsets_are_the_brokers, assert_same_units, release, scenario
from scenario_compaction import COMPACTION_GROUPS, COMPACTION_TOPIC

import cq
import rmqfilter

pytestmark = pytest.mark.broker

RUNS = ["compaction", "compaction@5.5.1"]
GROUPS = sorted(COMPACTION_GROUPS)


@pytest.fixture(scope="module", params=RUNS)
def run(request):
    return scenario(request.param)


@pytest.fixture(scope="module")
def store(run):
    s = cq.Store(str(run.store_path()))
    yield s
    s.close()


def subscription(run, group: str) -> dict:
    return run.subscription(run.group(group))


def drained(run, group: str) -> dict:
    return {(r["queue_id"], r["queue_offset"]): (r["uniq_key"], r["msg_id"]) for r in run.received
            if r["group"] == group and r["phase"] == "drain"}


def committed(run, group: str) -> dict[int, int]:
    return {p["queue_id"]: p["consumer_offset"] for p in run.group(group)["progress"]}


def test_the_store_holds_a_compacted_topic(run, store):
    assert run.release in {release(name) for name in RUNS}
    assert store.layout.compaction_topics == (COMPACTION_TOPIC,)
    positions = cq.read_position_checkpoint(store.root)
    assert set(positions) == {(COMPACTION_TOPIC, 0), (COMPACTION_TOPIC, 1)}
    for q in (0, 1):
        queue = store.consume_queue(COMPACTION_TOPIC, q)
        assert len(queue) < queue.max_offset - queue.min_offset     # compaction removed messages
        assert queue.min_offset <= positions[COMPACTION_TOPIC, q] < queue.max_offset


def test_the_brokers_answers_are_the_ones_the_docs_state(run):
    """The compaction store ignores the filter: each SQL92 group received what ``*`` received, the tag
    group what the client's re-check kept of it (docs/reading.md#compaction-topics)."""
    got = {g: {(r["queue_id"], r["queue_offset"], r["phase"]) for r in run.received if r["group"] == g}
           for g in GROUPS}
    assert got["GID_COMPACT_SQL"] == got["GID_COMPACT_SQL_TAGS"] == got["GID_COMPACT_STAR"]
    tagged = {(r["queue_id"], r["queue_offset"], r["phase"]) for r in run.received
              if r["group"] == "GID_COMPACT_STAR" and r["tags"] == "TagA"}
    assert got["GID_COMPACT_TAG"] == tagged and tagged


@pytest.mark.parametrize("group", GROUPS)
def test_consume_from_the_committed_offsets_is_what_the_drain_received(run, store, group):
    result = store.consume(COMPACTION_TOPIC, group, ranges={q: (o, None) for q, o in committed(run, group).items()},
                           **subscription(run, group))
    got = {(m.queue_id, m.queue_offset): (m.properties["UNIQ_KEY"], m.msg_id) for m in result}
    assert_same_units(got, drained(run, group), f"Store.consume({group})")
    assert result.stats.commit_log_missing == 0


@pytest.mark.parametrize("group", GROUPS)
def test_backlog_is_what_the_drain_received(run, store, group):
    backlog = cq.backlog(store, COMPACTION_TOPIC, group, **subscription(run, group))
    want: dict[int, int] = {}
    for q, _ in drained(run, group):
        want[q] = want.get(q, 0) + 1
    progress = {p["queue_id"]: p for p in run.group(group)["progress"]}
    assert sorted(q.queue_id for q in backlog.queues) == sorted(progress)
    for q in backlog.queues:
        p = progress[q.queue_id]
        assert (q.committed_offset, q.max_offset) == (p["consumer_offset"], p["broker_offset"]), q
        assert (q.will_receive, q.expired) == (want.get(q.queue_id, 0), 0), q


@pytest.mark.parametrize("group", ["GID_COMPACT_TAG", "GID_COMPACT_SQL"])
def test_why_is_what_the_drain_received_and_says_compacted_otherwise(run, store, group):
    received = drained(run, group)
    start = committed(run, group)
    for s in run.sent:
        q, o = s["queue_id"], s["queue_offset"]
        if o < start[q]:
            continue
        w = cq.why(store, COMPACTION_TOPIC, group, queue_id=q, queue_offset=o, **subscription(run, group))
        assert w.delivered == ((q, o) in received), (s, w.verdict)
        if o not in store.consume_queue(COMPACTION_TOPIC, q).offsets:
            assert w.dropped_by == "compaction" and w.steps[0].reason == "compacted", (s, w.verdict)
            assert "a newer message with the same key replaced it" in w.verdict
        elif not w.delivered:
            assert w.dropped_by == "client" and s["tags"] != "TagA"


def test_inspect_offsets_are_the_brokers_and_name_the_compaction_store(run, capsys):
    text = assert_inspect_offsets_are_the_brokers(run, capsys)
    assert f"compaction topics: {COMPACTION_TOPIC}" in text
    assert text.count("served from the compaction store") == 2


def test_cli_consume_of_a_compaction_topic(run, store, capsys):
    g = run.group("GID_COMPACT_TAG")
    assert rmqfilter.main(["consume", str(run.store_path()), "--topic", COMPACTION_TOPIC, "--group", g["group"],
                           "--tags", g["expression"], "--format", "jsonl"]) == 0
    want = len(list(store.consume(COMPACTION_TOPIC, g["group"], tags=g["expression"])))
    assert capsys.readouterr().out.count("\n") == want > 0


def test_why_by_the_offset_message_id_the_consumers_saw(run, store):
    for r in [r for r in run.received if r["phase"] == "drain" and r["group"] == "GID_COMPACT_STAR"][:8]:
        answers = cq.why(store, COMPACTION_TOPIC, "GID_COMPACT_STAR", tags="*", msg_id=r["msg_id"])
        assert (r["queue_id"], r["queue_offset"]) in {(w.queue_id, w.queue_offset) for w in answers}


@pytest.mark.spark
@pytest.mark.parametrize("group", ["GID_COMPACT_TAG", "GID_COMPACT_SQL"])
def test_data_source_from_committed_is_what_the_drain_received(spark, run, group):
    g = run.group(group)
    reader = (spark.read.format("rocketmq").option("topic", COMPACTION_TOPIC).option("group", group)
              .option("from_committed", "true"))
    if g["type"] == "TAG":
        reader = reader.option("tags", g["expression"])
    rows = reader.load(str(run.store_path())).selectExpr("queue_id", "queue_offset", "properties['UNIQ_KEY'] AS uniq",
                                                        "commit_log_offset").collect()
    got = {(r.queue_id, r.queue_offset): r.uniq for r in rows}
    assert len(got) == len(rows)
    assert_same_units(got, {k: u for k, (u, _) in drained(run, group).items()}, f"data source, group {group}")
