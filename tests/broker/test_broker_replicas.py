"""rmqfilter against a real master and slave of one broker name: the ``replicas`` scenario
(tests/broker/scenario_replicas.py, docs/reading.md#replicas).

The master was killed in the middle of a send loop; the groups then read every queue from the slave.
The slave's store alone must answer as the slave served: each group's messages, its backlog, why a
message was or was not delivered. Both stores together are one broker's replicas: the master's
tail (what it wrote and acknowledged but had not copied) is what the slave's queues lack, and no
consumer received it. Runs on 5.3.3 and on 5.5.1 (``replicas@5.5.1``).
"""
from __future__ import annotations

import json
import warnings

import pytest
from broker_support import assert_same_units, harness, scenario
from scenario_replicas import REPLICAS_BROKER, REPLICAS_GROUPS, REPLICAS_TOPIC
from test_broker_filters import run_cli, spread

import cq
from cq.errors import ReplicaWarning

pytestmark = pytest.mark.broker

GROUPS = list(REPLICAS_GROUPS)
TOPIC = REPLICAS_TOPIC
RUNS = ["replicas", "replicas@5.5.1"]


@pytest.fixture(scope="module", params=RUNS)
def run(request):
    return scenario(request.param)


@pytest.fixture(scope="module")
def slave(run):
    s = cq.Store(run.dir / run.broker["replicas"]["slave"])
    yield s
    s.close()


@pytest.fixture(scope="module")
def master(run):
    s = cq.Store(run.dir / run.broker["replicas"]["master"])
    yield s
    s.close()


def roots(run) -> list[str]:
    return [str(run.dir / run.broker["replicas"][k]) for k in ("master", "slave")]


def open_both(run, **kw) -> cq.Cluster:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ReplicaWarning)
        return cq.Cluster(roots(run), **kw)


def from_slave(run, group: str) -> dict[tuple[int, int], dict]:
    """First deliveries of ``group`` once the master was gone (every one came from the slave)."""
    out: dict[tuple[int, int], dict] = {}
    for r in run.received:
        if r["group"] == group and r["phase"] == "slave":
            out.setdefault((r["queue_id"], r["queue_offset"]), r)
    return out


def subscription(run, group: str) -> dict:
    return run.subscription(run.group(group))


def tails(run) -> list:
    c = open_both(run)
    try:
        return c.replicas[REPLICAS_BROKER].tails(TOPIC)
    finally:
        c.close()


def test_the_scenario_exercises_what_it_should(run, slave, master):
    """The master was killed mid-write (abort file, a send loop with successes before and failures
    after), the groups received from the slave only after that, and both stores name one broker."""
    rep = run.broker["replicas"]
    assert rep["loop_sent"] > 0 and rep["loop_failed"] > 0
    assert (run.dir / rep["master"] / "abort").exists()
    assert {r["phase"] for r in run.received} == {"slave"}      # nothing was sent while they registered
    for g in GROUPS:
        assert from_slave(run, g), g
    assert {r["broker"] for r in run.received} == {REPLICAS_BROKER}
    assert cq.store.cluster.broker_name(slave) == cq.store.cluster.broker_name(master) == (REPLICAS_BROKER,
                                                                                             "topics.json")
    # the SQL92 groups registered on the slave before the messages came: the slave's bitmaps hold them
    registered = {f.group for f in slave.registered_filters(TOPIC)}
    assert {g for g, (t, _) in REPLICAS_GROUPS.items() if t == "SQL92"} <= registered


@pytest.mark.parametrize("group", GROUPS)
def test_consume_on_the_slave_is_what_the_consumers_got_from_it(run, slave, group):
    want = {k: (r["uniq_key"], r["msg_id"]) for k, r in from_slave(run, group).items()}
    got = {(m.queue_id, m.queue_offset): (m.properties.get("UNIQ_KEY"), m.msg_id)
           for m in slave.consume(TOPIC, group, **subscription(run, group))}
    assert_same_units(got, want, f"slave consume({group})")
    # the replicas read as one, the slave asked for: the same answer, the broker named
    c = open_both(run, replica=roots(run)[1])
    try:
        result = c.consume(TOPIC, group, **subscription(run, group))
        assert {(m.broker, m.queue_id, m.queue_offset) for m in result} == {(REPLICAS_BROKER, *k) for k in want}
    finally:
        c.close()


@pytest.mark.parametrize("group", GROUPS)
def test_backlog_on_the_slave_is_what_is_left_there(run, slave, group):
    """The groups drained the slave and committed there: its consumerOffset.json holds each
    queue's end, and rmqfilter finds nothing left for them."""
    b = cq.backlog(slave, TOPIC, group, **subscription(run, group))
    ends = slave.cut(TOPIC).ends(TOPIC)
    assert sorted(q.queue_id for q in b.queues) == sorted(ends)
    for q in b.queues:
        assert (q.committed_offset, q.max_offset, q.will_receive) == (ends[q.queue_id], ends[q.queue_id], 0), q


@pytest.mark.parametrize("group", GROUPS)
def test_why_on_the_slave_says_what_the_consumer_got(run, slave, group):
    sub = subscription(run, group)
    got = from_slave(run, group)
    ends = slave.cut(TOPIC).ends(TOPIC)
    every = [(q, o) for q, end in sorted(ends.items()) for o in range(end)]
    for q, o in spread(every, 40):
        w = cq.why(slave, TOPIC, group, queue_id=q, queue_offset=o, **sub)
        assert w.delivered == ((q, o) in got), (group, q, o, w.verdict)


def test_both_stores_are_one_brokers_replicas_and_the_masters_tail_reached_no_one(run, slave, master):
    with pytest.warns(ReplicaWarning, match=f"broker {REPLICAS_BROKER}: 2 replicas; reading "):
        c = cq.Cluster(roots(run))
    try:
        rs = c.replicas[REPLICAS_BROKER]
        assert c.brokers == [REPLICAS_BROKER] and c.named_by == {REPLICAS_BROKER: "topics.json"}
        m_end, s_end = master.cut().commit_log_end, slave.cut().commit_log_end
        assert m_end >= s_end                       # the slave's CommitLog is a prefix of the master's
        assert rs.read.root == roots(run)[0]         # the furthest, or the first given when they end alike
        assert rs.picked_by == ("furthest" if m_end > s_end else "first")
        tail = rs.tails(TOPIC)
        ranges = rs.ranges(TOPIC)
        m_ranges, s_ranges = ranges[roots(run)[0]], ranges[roots(run)[1]]
        assert all(t.holder == roots(run)[0] and t.lacking == roots(run)[1] for t in tail)
        assert [(t.queue_id, t.start, t.end) for t in tail] == [
            (q, s_ranges[TOPIC, q][1], hi) for (_, q), (_, hi) in sorted(m_ranges.items())
            if hi > s_ranges[TOPIC, q][1]]
    finally:
        c.close()
    # every message the producer was told was stored is on the slave (a consumer got it) or in the
    # master's tail, never both; the tail may also hold sends whose answer the kill cut off (the
    # producer counted them failed); no consumer received any of it
    assert_tail_reached_no_one(run, [(t, master) for t in tail], from_slave(run, "GID_REP_STAR"))


def assert_tail_reached_no_one(run, tail, star_received: dict) -> None:
    """``tail``: ``(ReplicaTail, Store of its holder)`` of the replica that lost; ``star_received``:
    the ``*`` group's deliveries from the replica read after it."""
    star = {r["uniq_key"] for r in star_received.values()}
    in_tail = set()
    for t, store in tail:
        for o in range(t.start, t.end):
            unit = store.consume_queue(t.topic, t.queue_id).unit(o)
            in_tail.add(store.commit_log.read_message(int(unit[0])).properties["UNIQ_KEY"])
    acknowledged = {s["uniq_key"] for s in run.sent if s["outcome"] == "sent"}
    attempted = {s["uniq_key"] for s in run.sent}
    assert not (in_tail & star) and in_tail <= attempted
    assert acknowledged - star <= in_tail, sorted(acknowledged - star - in_tail)[:5]
    assert star <= attempted
    assert not ({r["uniq_key"] for r in run.received} & in_tail)


def test_the_command_line_names_the_replica_and_the_tail(run, capsys):
    both = roots(run)
    code, out = run_cli(capsys, "inspect", *both)
    assert code == 0 and "Replicas: 2; read " in out and f"  * {both[0]}" in out or f"  * {both[1]}" in out
    for t in tails(run):
        assert (f"Tail: {TOPIC} queue {t.queue_id} offsets [{t.start:,}, {t.end:,}) "
                f"({t.end - t.start:,} messages): on {both[0]}, not on {both[1]}") in out
    code, out = run_cli(capsys, "inspect", *both, "--json")
    doc = json.loads(out)
    assert [r["root"] for r in doc["brokers"][0]["replicas"]["replicas"]] == both
    group = "GID_REP_SQL_MOD"
    code, out = run_cli(capsys, "consume", *both, "--topic", TOPIC, "--group", group, "--replica", both[1],
                        "--format", "jsonl")
    assert code == 0
    assert {(json.loads(x)["queue_id"], json.loads(x)["queue_offset"]) for x in out.splitlines()} == set(
        from_slave(run, group))
    # a message of the master's tail, asked of the slave read, is walked on the master; the
    # subscription given (a killed 5.5.1 master's consumerFilter.json holds no registration yet)
    for t in tails(run)[:2]:
        c = open_both(run, replica=both[1])
        w = cq.why(c, TOPIC, group, queue_id=t.queue_id, queue_offset=t.start, broker=REPLICAS_BROKER,
                   sql=REPLICAS_GROUPS[group][1])
        c.close()
        assert w.replica == both[0] and f"a consumer reading {both[1]}, the replica read, does not receive it" \
            in w.replica_note
        code, out = run_cli(capsys, "why", *both, "--topic", TOPIC, "--group", group, "--sql",
                            REPLICAS_GROUPS[group][1], "--broker", REPLICAS_BROKER, "--queue", t.queue_id,
                            "--offset", t.start, "--replica", both[1])
        assert code == 0 and f"replica   only on {both[0]}; not on {both[1]} (its queue ends at offset {t.start})" \
            in out


@pytest.mark.spark
@pytest.mark.parametrize("group", ["GID_REP_SQL_MOD", "GID_REP_TAG_OR"])
def test_data_source_over_both_replicas_reads_the_slave_asked(spark, run, group):
    """``load([master, slave])`` with ``replica`` = the slave gives what the group got from it."""
    g = run.group(group)
    reader = spark.read.format("rocketmq").option("topic", TOPIC).option("group", group) \
        .option("replica", roots(run)[1])
    if g["type"] == "TAG":
        reader = reader.option("tags", g["expression"])
    rows = reader.load(roots(run)).selectExpr("broker", "queue_id", "queue_offset",
                                              "properties['UNIQ_KEY'] AS uniq").collect()
    got = {(r.queue_id, r.queue_offset): r.uniq for r in rows}
    assert len(got) == len(rows) and {r.broker for r in rows} == {REPLICAS_BROKER}
    assert_same_units(got, {k: r["uniq_key"] for k, r in from_slave(run, group).items()},
                      f"data source, group {group}, the slave")


def test_harness_lists_the_scenario():
    assert "replicas" in harness.SCENARIOS
