"""rmqfilter against a real RocketMQ broker that ran the tiered store: the ``tiered`` scenario.

RocketMQ's own broker (``TieredMessageStore`` with the POSIX back end) copied its queues to a tier,
then expired its local files; consumers read below the local minimum, which the broker served from
the tier (docs/testing.md, docs/reading.md#tiered-storage). On 5.3.3 and on 5.5.1 (``tiered@5.5.1``):
the store read with its tier must give what the consumers received, the backlog the two early groups
drained, the broker's minimum offsets, and ``why`` must say which offsets the tier served.
"""
from __future__ import annotations

import json

import pytest
from broker_support import assert_same_units, scenario

import cq
import rmqfilter

pytestmark = pytest.mark.broker

RUNS = ("tiered", "tiered@5.5.1")


@pytest.fixture(scope="module", params=RUNS)
def run(request):
    return scenario(request.param)


def tier_of(run) -> str:
    return str(run.dir / run.broker["tiered"]["tier"])


@pytest.fixture(scope="module")
def store(run):
    s = cq.Store(str(run.store_path()), tier=tier_of(run))
    yield s
    s.close()


def subscription(run, g: dict) -> dict:
    """Store.consume's arguments for a group: a SQL92 group created after the copy by its expression, born
    after every message (its registration is not in the copied consumerFilter.json)."""
    if g["type"] == "TAG":
        return {"tags": g["expression"]}
    if g.get("progress") is None:
        return {"sql": g["expression"], "born_time": run.broker["copied_ms"]}
    return {}


def test_the_store_without_its_tier_is_refused_naming_the_metadata(run):
    with pytest.raises(cq.TieredStoreError, match="tieredStoreMetadata.json.*give the tier directory"):
        cq.Store(str(run.store_path()))
    with pytest.raises(cq.TieredStoreError, match="does not exist"):
        cq.Store(str(run.store_path()), tier=str(run.dir / "no-such-tier"))


def test_the_broker_served_below_the_local_minimum(run, store):
    """The run is what it must be: the local files expired past offsets the consumers then received."""
    cut = store.cut(run.broker["tiered"]["topic"])
    for t, q, lo, hi in cut.tiers:
        assert lo == 0 and hi > 0, (t, q, lo, hi)
        assert any(o < hi for (qid, o) in run.first["GID_TIER_STAR"] if qid == q)


def test_consume_is_what_the_consumers_received(run, store):
    """Every group's delivered units and UNIQ_KEYs; the offset msg ids where the source is certain: the
    tier's below the local minimum (its records carry their flat CommitLog offset), and where a pull that
    started in the tier read on past the local minimum, the tier's or the local one."""
    topic = run.broker["tiered"]["topic"]
    cut = store.cut(topic)
    for g in run.broker["groups"]:
        first = run.first.get(g["group"], {})
        want = {k: r["uniq_key"] for k, r in first.items()}
        result = store.consume(topic, g["group"], **subscription(run, g))
        msgs = {(m.queue_id, m.queue_offset): m for m in result}
        assert_same_units({k: m.properties.get("UNIQ_KEY") for k, m in msgs.items()}, want,
                          f"Store.consume({g['group']})")
        assert result.stats.commit_log_missing == 0
        for (q, o), r in first.items():
            if r["phase"] != "drain":
                continue    # the live phase was served from local files since expired
            _, hi = cut.tier_range(topic, q)
            if o < hi:
                assert r["msg_id"] == msgs[q, o].msg_id, (g["group"], q, o)
            elif o < store.tier_queue(topic, q).end_offset:
                # (past the copied tier's end the broker's tier, copying on after the copy, may have served it)
                local = store.commit_log.read_message(store.consume_queue(topic, q).unit(o)[0]).msg_id
                tiered = store.tier_queue(topic, q).messages(o, o + 1)[0].msg_id
                assert r["msg_id"] in (local, tiered), (g["group"], q, o)


def test_backlog_is_what_the_drain_received(run, store):
    topic = run.broker["tiered"]["topic"]
    for name in ("GID_TIER_TAG", "GID_TIER_SQL"):
        g = run.group(name)
        b = cq.backlog(store, topic, name, **subscription(run, g))
        progress = {p["queue_id"]: p for p in g["progress"]}
        drained: dict[int, int] = {}
        for (q, _), r in run.first.get(name, {}).items():
            if r["phase"] == "drain":
                drained[q] = drained.get(q, 0) + 1
        for q in b.queues:
            p = progress[q.queue_id]
            assert (q.committed_offset, q.max_offset) == (p["consumer_offset"], p["broker_offset"]), q
            assert q.committed_offset < store.consume_queue(topic, q.queue_id).min_offset  # expired locally
            assert (q.will_receive, q.expired) == (drained.get(q.queue_id, 0), 0), q


def test_inspect_gives_the_brokers_offsets_and_the_tier(run, capsys):
    assert rmqfilter.main(["inspect", str(run.store_path()), "--tier", tier_of(run), "--json"]) == 0
    info = json.loads(capsys.readouterr().out)
    assert info["tier"]["cluster"] == "HarnessCluster"
    for t in run.broker["topics"]:
        for q in t["queues"]:
            mine = info["topics"][t["topic"]][str(q["queue_id"])]
            assert (mine["min_offset"], mine["max_offset"]) == (q["min_offset"], q["max_offset"]), (t["topic"], q)
            assert mine["local_min_offset"] > mine["min_offset"] == mine["tier"]["min_offset"]
    assert rmqfilter.main(["inspect", str(run.store_path())]) == 2
    assert "give the tier directory" in capsys.readouterr().err


def test_why_says_the_tier_served_it(run, capsys):
    topic = run.broker["tiered"]["topic"]
    (q, o), r = min(run.first["GID_TIER_TAG_C"].items())
    argv = ["why", str(run.store_path()), "--tier", tier_of(run), "--topic", topic, "--group", "GID_TIER_TAG_C",
            "--tags", run.group("GID_TIER_TAG_C")["expression"], "--queue", str(q), "--offset", str(o), "--json"]
    assert rmqfilter.main(argv) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["delivered"] is True and doc["msg_id"] == r["msg_id"]
    assert doc["steps"][0]["step"] == "tier" and doc["steps"][0]["reason"] == "served_from_tier"


def test_a_filter_the_tier_and_the_local_bitmap_disagree_on_is_refused(run, store):
    """A SQL92 subscription of a group the bitmaps were not computed for, born before the messages: the local
    bitmaps drop what the tier (no bitmap) passes past the local minimum, where a pull that started in the tier
    reads on: the answer depends on pull batches, so it is refused, naming the queue."""
    g = run.group("GID_TIER_SQL_TAGS")
    with pytest.raises(cq.TieredStoreError, match="depends on its pull batches"):
        list(store.consume(run.broker["tiered"]["topic"], g["group"], sql=g["expression"], born_time=0))


@pytest.mark.spark
def test_the_data_source_with_the_tier_is_what_the_consumers_received(spark, run):
    topic = run.broker["tiered"]["topic"]
    for name in ("GID_TIER_STAR", "GID_TIER_TAG", "GID_TIER_SQL"):
        g = run.group(name)
        reader = spark.read.format("rocketmq").option("topic", topic).option("group", name) \
            .option("tier", tier_of(run))
        if g["type"] == "TAG":
            reader = reader.option("tags", g["expression"])
        rows = reader.load(str(run.store_path())).selectExpr("queue_id", "queue_offset",
                                                             "properties['UNIQ_KEY'] AS uniq").collect()
        got = {(r.queue_id, r.queue_offset): r.uniq for r in rows}
        assert len(got) == len(rows)
        assert_same_units(got, {k: r["uniq_key"] for k, r in run.first.get(name, {}).items()},
                          f"data source with the tier, group {name}")
