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
def test_killed_store_reads_what_the_restarted_broker_served_for_its_units(run, group):
    """Every unit the killed store's ConsumeQueues hold reads as the message the broker served there."""
    g = run.group(group)
    killed = run.dir / run.broker["brokers"][0]["killed_store"]
    got = read(killed, g)
    ends = killed_queue_ends(killed)
    want = {k: r["uniq_key"] for k, r in run.first[group].items() if k[1] < ends[k[0]]}
    assert got == want, report(f"killed store, {group}", got, want)


def killed_queue_ends(killed) -> dict[int, int]:
    store = cq.Store(str(killed))
    try:
        return {q: store.consume_queue(harness.CRASH_TOPIC, q).max_offset for q in (0, 1)}
    finally:
        store.close()


@pytest.mark.xfail(strict=True, reason=(
    "rmqfilter reads a killed broker's ConsumeQueues as they lie: records the broker had written "
    "to the CommitLog but not yet dispatched when it was killed (here: the last sends in flight, "
    "an acknowledged one among them) are not read, while the restarted broker's recovery "
    "dispatches and serves them (docs/limits.md, 'a killed broker's store')"))
def test_killed_store_reads_the_records_the_restarted_broker_dispatched(run):
    g = run.group("GID_CRASH_ALL")
    killed = run.dir / run.broker["brokers"][0]["killed_store"]
    ends = killed_queue_ends(killed)
    orphans = [k for k in run.first["GID_CRASH_ALL"] if k[1] >= ends[k[0]]]
    assert orphans, "the crash left every record dispatched: nothing to check in this run"
    got = read(killed, g)
    want = {k: r["uniq_key"] for k, r in run.first["GID_CRASH_ALL"].items()}
    assert got == want, report("killed store, GID_CRASH_ALL", got, want)
