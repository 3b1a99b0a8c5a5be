"""rmqfilter against a real RocketMQ cluster: the ``cluster`` scenario (docs/testing.md).

Two brokers of one cluster (broker-a, broker-b, one NameServer) served one topic: the producer
spread its sends over both brokers' queues, and each group's push consumer (tag and SQL92
groups of the filters scenario) took what both brokers delivered, committed and stopped; more
was sent; both stores were copied after a clean shutdown and the consumers drained the rest.
Read as one :class:`cq.Cluster`, the two stores must answer as the cluster did: a group's
messages are the union of both brokers', a backlog counts each broker's queues, and why names
the broker holding the message.
"""
from __future__ import annotations

import json

import pytest
from broker_support import assert_same_units, harness, release, scenario
from test_broker_filters import run_cli, spread

import cq

pytestmark = pytest.mark.broker

GROUPS = list(harness.CLUSTER_GROUPS)
BROKERS = list(harness.CLUSTER_BROKERS)
TOPIC = harness.CLUSTER_TOPIC


@pytest.fixture(scope="module")
def run():
    return scenario("cluster")


@pytest.fixture(scope="module")
def cluster(run):
    c = cq.Cluster([str(run.store_path(b)) for b in BROKERS])
    yield c
    c.close()


def group_of(run, name: str) -> dict:
    return run.group(name)


def received(run, group: str) -> dict[tuple[str, int, int], dict]:
    """First deliveries of ``group``, keyed (broker, queue id, queue offset)."""
    out: dict[tuple[str, int, int], dict] = {}
    for r in run.received:
        if r["group"] == group:
            out.setdefault((r["broker"], r["queue_id"], r["queue_offset"]), r)
    return out


def test_the_scenario_exercises_what_it_should(run, cluster):
    """Both brokers hold the topic and served every group in both phases; the stores name their brokers."""
    assert run.broker["rocketmq_version"] == release("cluster")
    assert cluster.brokers == BROKERS
    assert cluster.named_by == {b: "topics.json" for b in BROKERS}    # not the directory names
    assert cluster.brokers_of(TOPIC) == BROKERS
    assert {s["broker"] for s in run.sent} == set(BROKERS)
    for g in GROUPS:
        seen = {(r["broker"], r["phase"]) for r in run.received if r["group"] == g}
        assert seen == {(b, p) for b in BROKERS for p in ("live", "drain")}, g
    assert all(r["reconsume_times"] == 0 for r in run.received)
    # each broker holds its own registration of each SQL92 group (its own bornTime)
    for b in BROKERS:
        registered = {f.group for f in cluster.store(b).registered_filters(TOPIC)}
        assert {g for g, (t, _) in harness.CLUSTER_GROUPS.items() if t == "SQL92"} <= registered, b


def cluster_delivered(cluster, group: dict, **kw) -> dict:
    result = cluster.consume(group["topic"], group["group"], **kw)
    return {(m.broker, m.queue_id, m.queue_offset): (m.properties.get("UNIQ_KEY"), m.msg_id) for m in result}


@pytest.mark.parametrize("group", GROUPS)
def test_consume_over_both_stores_is_what_the_consumers_received(run, cluster, group):
    g = group_of(run, group)
    want = {k: (r["uniq_key"], r["msg_id"]) for k, r in received(run, group).items()}
    got = cluster_delivered(cluster, g, **run.subscription(g))
    assert_same_units(got, want, f"Cluster.consume({group})")
    # the union is the brokers' own answers, and the stats sum theirs
    result = cluster.consume(TOPIC, group, **run.subscription(g))
    assert sum(1 for _ in result) == len(want) == result.stats.delivered
    assert {b: s.delivered for b, s in result.broker_stats.items()} == {
        b: sum(1 for k in want if k[0] == b) for b in BROKERS}


@pytest.mark.parametrize("group", GROUPS)
def test_backlog_sums_each_broker_queue_and_names_the_broker(run, cluster, group):
    g = group_of(run, group)
    progress = {(p["broker"], p["queue_id"]): p for p in g["progress"]}
    assert {b for b, _ in progress} == set(BROKERS)
    b = cq.backlog(cluster, TOPIC, group, **run.subscription(g))
    assert sorted((q.broker, q.queue_id) for q in b.queues) == sorted(progress)
    drained: dict[tuple[str, int], int] = {}
    for (broker, queue_id, _), r in received(run, group).items():
        if r["phase"] == "drain":
            drained[broker, queue_id] = drained.get((broker, queue_id), 0) + 1
    for q in b.queues:
        p = progress[q.broker, q.queue_id]
        assert (q.committed_offset, q.max_offset) == (p["consumer_offset"], p["broker_offset"]), q
        assert q.will_receive == drained.get((q.broker, q.queue_id), 0), q
    assert b.lag == sum(p["broker_offset"] - p["consumer_offset"] for p in progress.values())
    assert b.will_receive == sum(drained.values())
    doc = b.to_dict()
    assert {(q["broker"], q["queue_id"]) for q in doc["queues"]} == set(progress)
    assert all(broker in str(b) for broker in BROKERS)


@pytest.mark.parametrize("group", GROUPS)
def test_why_names_the_broker_holding_each_received_message(run, cluster, group):
    g = group_of(run, group)
    sub = run.subscription(g)
    got = received(run, group)
    for r in spread(sorted(got.values(), key=lambda r: (r["broker"], r["queue_id"], r["queue_offset"])), 10):
        for msg_id in (r["uniq_key"], r["msg_id"]):
            found = cq.why(cluster, TOPIC, group, msg_id=msg_id, **sub)
            assert [(w.broker, w.queue_id, w.queue_offset, w.delivered, w.dropped_by) for w in found] == [
                (r["broker"], r["queue_id"], r["queue_offset"], True, None)], (group, msg_id)


@pytest.mark.parametrize("group", GROUPS)
def test_why_names_the_layer_that_dropped_what_neither_broker_delivered(run, cluster, group):
    g = group_of(run, group)
    sub = run.subscription(g)
    got = received(run, group)
    topic = next(t for t in run.broker["topics"] if t["topic"] == TOPIC)
    never = [(q["broker"], q["queue_id"], offset) for q in topic["queues"]
             for offset in range(q["min_offset"], q["max_offset"])
             if (q["broker"], q["queue_id"], offset) not in got]
    if g["expression"] == "*":
        assert never == []
        return
    assert {b for b, _, _ in never} == set(BROKERS)
    for broker, queue_id, offset in spread(never, 16):
        w = cq.why(cluster, TOPIC, group, broker=broker, queue_id=queue_id, queue_offset=offset, **sub)
        assert w.broker == broker and not w.delivered and w.dropped_by in ("consume_queue", "commit_log",
                                                                          "client"), (broker, queue_id, offset, w)
    with pytest.raises(ValueError, match="broker"):   # queue 0 is on both brokers: which one?
        cq.why(cluster, TOPIC, group, queue_id=0, queue_offset=0, **sub)


@pytest.mark.parametrize("group", ["GID_SQL_STR_IN", "GID_TAG_AA"])
def test_cli_consume_backlog_and_why_over_both_stores(run, capsys, group):
    g = group_of(run, group)
    sub = ["--tags", g["expression"]] if g["type"] == "TAG" else []
    roots = [run.store_path(b) for b in BROKERS]
    code, out = run_cli(capsys, "consume", *roots, "--topic", TOPIC, "--group", group, *sub, "--format", "jsonl")
    assert code == 0
    got = {(d["broker"], d["queue_id"], d["queue_offset"]): d["properties"]["UNIQ_KEY"]
           for d in map(json.loads, out.splitlines())}
    assert_same_units(got, {k: r["uniq_key"] for k, r in received(run, group).items()}, f"rmqfilter consume {group}")
    code, out = run_cli(capsys, "backlog", *roots, "--topic", TOPIC, "--group", group, *sub, "--json")
    doc = json.loads(out)
    assert code == 0 and doc["total"]["lag"] == sum(p["broker_offset"] - p["consumer_offset"] for p in g["progress"])
    r = spread(sorted(received(run, group).values(), key=lambda r: r["uniq_key"]), 1)[0]
    code, out = run_cli(capsys, "why", *roots, "--topic", TOPIC, "--group", group, *sub, "--msg-id", r["msg_id"],
                        "--json")
    assert code == 0 and [(a["broker"], a["queue_id"], a["queue_offset"], a["delivered"])
                          for a in json.loads(out)] == [(r["broker"], r["queue_id"], r["queue_offset"], True)]


@pytest.mark.spark
@pytest.mark.parametrize("group", GROUPS)
def test_data_source_over_both_stores_gives_what_the_consumers_received(spark, run, group):
    g = group_of(run, group)
    reader = spark.read.format("rocketmq").option("topic", TOPIC).option("group", group)
    if g["type"] == "TAG":
        reader = reader.option("tags", g["expression"])
    rows = reader.load([str(run.store_path(b)) for b in BROKERS]).selectExpr(
        "broker", "queue_id", "queue_offset", "properties['UNIQ_KEY'] AS uniq").collect()
    got = {(r.broker, r.queue_id, r.queue_offset): r.uniq for r in rows}
    assert len(got) == len(rows)
    assert_same_units(got, {k: r["uniq_key"] for k, r in received(run, group).items()}, f"data source, group {group}")


@pytest.mark.spark
def test_data_source_reads_a_glob_of_store_roots_with_a_broker_column(spark, run):
    df = spark.read.format("rocketmq").option("topic", TOPIC).load(str(run.dir / "stores" / "broker-*"))
    assert df.columns[0] == "broker"
    counts = {r.broker: r["count"] for r in df.groupBy("broker").count().collect()}
    want = {b: sum(q["max_offset"] - q["min_offset"] for t in run.broker["topics"] if t["topic"] == TOPIC
                   for q in t["queues"] if q["broker"] == b) for b in BROKERS}
    assert counts == want


@pytest.mark.spark
@pytest.mark.parametrize("group", ["GID_SQL_STR_IN", "GID_TAG_AA"])
def test_scan_over_both_stores_counts_and_writes_what_the_consumers_received(spark, run, tmp_path, group):
    from pyspark_udfs import job

    g = group_of(run, group)
    roots = [str(run.store_path(b)) for b in BROKERS]
    scan = (job.GroupScan(group, tags=g["expression"]) if g["type"] == "TAG"
            else job.registered_group_scans(roots, TOPIC, group)[0])
    got = job.scan(spark, roots, TOPIC, scan, out=str(tmp_path / "out"))
    want = {k: r["uniq_key"] for k, r in received(run, group).items()}
    assert got.delivered == len(want)
    assert {b.broker: b.delivered for b in got.brokers} == {b: sum(1 for k in want if k[0] == b) for b in BROKERS}
    assert got.units_scanned == sum(b.units_scanned for b in got.brokers) == sum(
        q["max_offset"] - q["min_offset"] for t in run.broker["topics"] if t["topic"] == TOPIC for q in t["queues"])
    rows = spark.read.parquet(str(tmp_path / "out")).selectExpr(
        "broker", "queue_id", "queue_offset", "properties['UNIQ_KEY'] AS uniq").collect()
    written = {(r.broker, r.queue_id, r.queue_offset): r.uniq for r in rows}
    assert len(written) == len(rows)
    assert_same_units(written, want, f"rmqfilter scan {group} --out")


def test_cost_over_both_stores_delivers_what_the_consumers_received(run):
    from cq.analyses.cost import CostGroup, filter_cost

    tags = [CostGroup(g, run.group(g)["expression"], "TAG", registered=False)
            for g in GROUPS if run.group(g)["type"] == "TAG"]
    sql = [g for g in GROUPS if run.group(g)["type"] == "SQL92"]
    report = filter_cost([str(run.store_path(b)) for b in BROKERS], TOPIC, sql + tags, timing=False)
    assert [b.broker for b in report.brokers] == BROKERS
    for g in GROUPS:
        got = received(run, g)
        assert report.group(g).delivered == len(got), g
        assert [next(r for r in b.groups if r.group == g).delivered for b in report.brokers] == [
            sum(1 for k in got if k[0] == b) for b in BROKERS], g
