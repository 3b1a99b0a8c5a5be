"""rmqfilter against a real RocketMQ broker: the ``live`` scenario (docs/testing.md).

The broker keeps writing while these reads run over its store directory in place (docs/live.md):
each read is one consistent cut, so no unit of a read lacks its record, each queue's units read
are a gap-free prefix, and what a later read sees never goes back. After the broker stopped,
a read gives every message the producer had acknowledged.
"""
from __future__ import annotations

import os
import time

import pytest
from broker_support import RUNS, harness, load, release, require_tools

import cq

pytestmark = [
    pytest.mark.broker,
    pytest.mark.skipif(bool(os.environ.get("RMQFILTER_PUREPYTHON")),
                       reason="the live scenario starts a broker: it runs once per make test, "
                              "in the pass under the compiled engines"),
]


def read(store: cq.Store) -> dict[int, list]:
    """One read of every queue of the live topic (tags "*": every unit is delivered)."""
    result = store.consume(harness.LIVE_TOPIC, "GID_LIVE_READER", tags="*")
    by_queue: dict[int, list] = {}
    for m in result:
        assert m.topic == harness.LIVE_TOPIC
        by_queue.setdefault(m.queue_id, []).append((m.queue_offset, m.properties["UNIQ_KEY"]))
    assert result.stats.commit_log_missing == 0        # no unit of the cut lacks its record
    return by_queue


def test_reads_while_the_broker_writes_are_consistent_cuts():
    require_tools()
    harness.build(release("live"))
    out = RUNS / f"live-{release('live')}"
    reads: list[dict[int, list]] = []

    def during(root, deadline):
        while not (root / "consumequeue" / harness.LIVE_TOPIC).exists():
            time.sleep(0.1)
        following = cq.Store(str(root))            # one store following the broker (refresh)
        try:
            while time.time() < deadline:
                reads.append(read(following))
                fresh = cq.Store(str(root))        # and a cold open each round
                try:
                    reads.append(read(fresh))
                finally:
                    fresh.close()
        finally:
            following.close()

    harness.run("live", out, rocketmq=release("live"), during=during)
    run = load(out)
    seen: dict[tuple[int, int], str] = {}
    previous: dict[int, int] = {}
    for by_queue in reads:
        for queue_id, units in by_queue.items():
            offsets = [o for o, _ in units]
            assert offsets == list(range(len(offsets))), f"queue {queue_id}: not a gap-free prefix"
            assert len(offsets) >= previous.get(queue_id, 0), f"queue {queue_id} went back"
            previous[queue_id] = len(offsets)
            for unit, uniq in units:
                assert seen.setdefault((queue_id, unit), uniq) == uniq, "a unit changed its message"
    assert len(reads) >= 4 and sum(previous.values()) > 0
    assert len({len(r.get(0, [])) for r in reads}) > 1          # the reads did see the broker write
    acked = {s["uniq_key"]: (s["queue_id"], s["queue_offset"]) for s in run.sent if s["outcome"] == "sent"}
    for (queue_id, unit), uniq in seen.items():
        assert acked.get(uniq, (queue_id, unit)) == (queue_id, unit)
    final = cq.Store(str(run.store_path()))
    try:
        got = {uniq: (q, o) for q, units in read(final).items() for o, uniq in units}
    finally:
        final.close()
    assert {u: got.get(u) for u in acked} == acked
