"""rmqfilter against a real controller-mode group: the ``replicas_controller`` scenario
(tests/broker/scenario_replicas.py, docs/reading.md#replicas).

Two brokers of one name in controller mode; the elected master was killed in the middle of a send
loop, the controller elected the other (a new epoch in its ``epochFileCheckpoint``), the loop's
sends went on to it and the groups then read every queue from it. Read as one broker's replicas,
the elected one is read by default (the highest epoch); the two part at their consistent point (the
new epoch's start): the killed master's units past it are its tail, never received, and the
elected one's past it are other messages at the same queue offsets. On 5.3.3 and 5.5.1.
"""
from __future__ import annotations

import warnings

import pytest
from broker_support import assert_same_units, scenario
from scenario_replicas import CONTROLLER_BROKER, CONTROLLER_GROUPS, CONTROLLER_TOPIC
from test_broker_replicas import assert_tail_reached_no_one

import cq
from cq.errors import ReplicaWarning

pytestmark = pytest.mark.broker

TOPIC = CONTROLLER_TOPIC


@pytest.fixture(scope="module", params=["replicas_controller", "replicas_controller@5.5.1"])
def run(request):
    return scenario(request.param)


def roots(run) -> list[str]:
    return [str(run.dir / run.broker["replicas_controller"][k]) for k in ("old", "new")]


@pytest.fixture(scope="module")
def cluster(run):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ReplicaWarning)
        c = cq.Cluster(roots(run))
    yield c
    c.close()


def received(run, group: str) -> dict[tuple[int, int], dict]:
    out: dict[tuple[int, int], dict] = {}
    for r in run.received:
        if r["group"] == group and r["phase"] == "after":
            out.setdefault((r["queue_id"], r["queue_offset"]), r)
    return out


def test_the_election_is_in_the_stores(run, cluster):
    """The killed master (abort file) and the elected one: one broker name, two broker ids, the
    elected one's epoch file a newer epoch from the offset where it took over."""
    rs = cluster.replicas[CONTROLLER_BROKER]
    old, new = rs.replicas
    assert (run.dir / "stores" / "old" / "abort").exists()
    assert old.controller_mode and new.controller_mode
    assert old.identity.broker_name == new.identity.broker_name == CONTROLLER_BROKER
    assert old.identity.broker_id != new.identity.broker_id
    assert new.last_epoch > old.last_epoch and new.epochs[:-1] == old.epochs
    assert rs.read is new and rs.picked_by == "epoch"
    assert run.broker["replicas_controller"]["loop_failed"] > 0       # sends failed until the election


@pytest.mark.parametrize("group", list(CONTROLLER_GROUPS))
def test_consume_on_the_elected_replica_is_what_the_consumers_got(run, cluster, group):
    g = run.group(group)
    want = {k: (r["uniq_key"], r["msg_id"]) for k, r in received(run, group).items()}
    got = {(m.queue_id, m.queue_offset): (m.properties.get("UNIQ_KEY"), m.msg_id)
           for m in cluster.consume(TOPIC, group, **run.subscription(g))}
    assert_same_units(got, want, f"Cluster.consume({group}), the elected replica")


def test_the_replicas_part_at_the_new_epochs_start_and_the_old_tail_reached_no_one(run, cluster):
    rs = cluster.replicas[CONTROLLER_BROKER]
    old, new = rs.replicas
    ends = {r.root: r.store.cut().commit_log_end for r in rs.replicas}
    point = rs.consistent_offset(old, new, ends)
    assert point == new.epochs[-1].start_offset <= ends[old.root]
    tails = rs.tails(TOPIC)
    assert {(t.holder, t.lacking) for t in tails} <= {(old.root, new.root), (new.root, old.root)}
    for t in tails:
        store = old.store if t.holder == old.root else new.store
        for o in range(t.start, t.end):
            m = store.commit_log.read_message(int(store.consume_queue(TOPIC, t.queue_id).unit(o)[0]))
            assert m.commit_log_offset >= point
    assert_tail_reached_no_one(run, [(t, old.store) for t in tails if t.holder == old.root],
                               received(run, "GID_REP_STAR"))


def test_why_says_the_same_offset_is_another_message_on_the_killed_master(run, cluster):
    rs = cluster.replicas[CONTROLLER_BROKER]
    old, new = rs.replicas
    t = next(x for x in rs.tails(TOPIC) if x.holder == new.root)
    w = cq.why(cluster, TOPIC, "GID_REP_STAR", tags="*", queue_id=t.queue_id, queue_offset=t.start)
    assert w.replica == new.root and w.delivered
    old_range = old.store.cut(TOPIC).queue_range(TOPIC, t.queue_id)
    if old_range[1] > t.start:    # the killed master wrote that offset too: a different message
        assert f"not on {old.root} (its record there is another" in w.replica_note
