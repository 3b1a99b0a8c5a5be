"""rmqfilter against a real RocketMQ broker: the ``crash`` scenario (docs/testing.md).

A producer wrote to a broker that was then killed with SIGKILL (its abort file left behind); the
store was copied as the crash left it. The broker was restarted on that store (its recovery ran)
and consumers that had never consumed drained everything it then served. Reading the killed
store must give what the restarted broker served, and so must reading the recovered store.
"""
from __future__ import annotations

import pytest
from broker_support import harness, scenario

import cq

pytestmark = pytest.mark.broker


@pytest.fixture(scope="module")
def run():
    return scenario("crash")


def test_the_store_was_left_as_a_crash_leaves_it(run):
    killed = run.dir / run.broker["brokers"][0]["killed_store"]
    assert (killed / "abort").exists()                         # the broker never shut down
    assert not (run.store_path() / "abort").exists()           # the restarted one did
    assert run.broker["crash"]["sent"] >= 3000


@pytest.mark.parametrize("copy", ["killed", "recovered"])
@pytest.mark.parametrize("group", list(harness.CRASH_GROUPS))
def test_reads_give_what_the_restarted_broker_served(run, copy, group):
    path = run.dir / run.broker["brokers"][0]["killed_store"] if copy == "killed" else run.store_path()
    g = run.group(group)
    store = cq.Store(str(path))
    try:
        got = {(m.queue_id, m.queue_offset): m.properties.get("UNIQ_KEY")
               for m in store.consume(g["topic"], group, tags=g["expression"])}
    finally:
        store.close()
    want = {k: r["uniq_key"] for k, r in run.first[group].items()}
    missing = sorted(set(want) - set(got))
    extra = sorted(set(got) - set(want))
    assert got == want, (f"{copy} store, {group}: {len(got)} units read, {len(want)} served; served but not "
                         f"read: {missing[:10]}; read but not served: {extra[:10]}")
    # Every message the producer saw acknowledged is in it.
    acked = {s["uniq_key"] for s in run.sent if s["outcome"] == "sent"
             and (group == "GID_CRASH_ALL" or s["tags"] == g["expression"])}
    assert acked <= set(got.values())
