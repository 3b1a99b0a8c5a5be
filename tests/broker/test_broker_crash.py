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


def read(path, group: dict) -> dict[tuple[int, int], str]:
    store = cq.Store(str(path))
    try:
        return {(m.queue_id, m.queue_offset): m.properties.get("UNIQ_KEY")
                for m in store.consume(group["topic"], group["group"], tags=group["expression"])}
    finally:
        store.close()


def report(what: str, got: dict, want: dict) -> str:
    return (f"{what}: {len(got)} units read, {len(want)} served; served but not read: "
            f"{sorted(set(want) - set(got))[:10]}; read but not served: {sorted(set(got) - set(want))[:10]}")


def acked(run, group: dict) -> set[str]:
    """UNIQ_KEYs of the group's messages whose send the broker acknowledged."""
    return {s["uniq_key"] for s in run.sent if s["outcome"] == "sent"
            and (group["expression"] == "*" or s["tags"] == group["expression"])}


@pytest.mark.parametrize("group", list(harness.CRASH_GROUPS))
def test_recovered_store_reads_what_the_restarted_broker_served(run, group):
    g = run.group(group)
    got = read(run.store_path(), g)
    want = {k: r["uniq_key"] for k, r in run.first[group].items()}
    assert got == want, report(f"recovered store, {group}", got, want)
    assert acked(run, g) <= set(got.values())       # every acknowledged send survived the crash


@pytest.mark.parametrize("group", list(harness.CRASH_GROUPS))
def test_killed_store_reads_what_the_restarted_broker_served(run, group):
    """Every unit the killed store's ConsumeQueues hold, and every record the broker wrote but had
    not dispatched when it was killed (read as its recovery dispatches them at the restart,
    docs/reliability.md#undispatched), reads as the message the restarted broker served there."""
    g = run.group(group)
    killed = run.dir / run.broker["brokers"][0]["killed_store"]
    got = read(killed, g)
    want = {k: r["uniq_key"] for k, r in run.first[group].items()}
    assert got == want, report(f"killed store, {group}", got, want)
