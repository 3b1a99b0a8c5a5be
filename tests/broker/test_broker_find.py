"""``find`` against a real RocketMQ cluster's stores: the ``cluster`` scenario (docs/testing.md, docs/find.md).

Two brokers of one cluster stored what a real producer sent to one topic, each message with one or two keys
(some keys shared by several messages, spread over both brokers), and wrote their own IndexFiles. Read as one
:class:`cq.Cluster`, ``find`` by key, UNIQ_KEY and offset message id must give exactly the messages the producer
recorded (broker, queue, queue offset, msg id), through the brokers' index; a store-time window must give what
a brute-force walk of each broker's CommitLog gives, reading a logarithmic number of records per queue.
"""
from __future__ import annotations

import math

import pytest
from broker_support import harness, scenario
from test_broker_filters import spread

import cq
from cq.analyses.search import find

pytestmark = pytest.mark.broker

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


def sent_with(run, key: str) -> list[tuple]:
    return sorted((s["broker"], s["queue_id"], s["queue_offset"], s["msg_id"], s["uniq_key"]) for s in run.sent
                  if s["outcome"] == "sent" and s["topic"] == TOPIC and key in (s["keys"] or []))


def rows_of(result) -> list[tuple]:
    return sorted((r.broker, r.queue_id, r.queue_offset, r.msg_id, r.uniq_key) for r in result.rows)


def test_find_by_key_is_what_the_producer_sent(run, cluster):
    keys = sorted({k for s in run.sent for k in (s["keys"] or [])})
    shared = [k for k in keys if len(sent_with(run, k)) > 1]
    assert shared and {b for k in shared for b, *_ in sent_with(run, k)} == set(BROKERS)
    for key in spread(shared, 15) + spread([k for k in keys if k not in shared], 25):
        result = find(cluster, topic=TOPIC, key=key)
        assert rows_of(result) == sent_with(run, key), key
        assert {r.found_by for r in result.rows} == {"index"}, (key, result.notes)  # the brokers' own index


def test_find_by_uniq_key_and_msg_id_is_the_message_sent(run, cluster):
    for s in spread([s for s in run.sent if s["outcome"] == "sent"], 20):
        want = [(s["broker"], s["queue_id"], s["queue_offset"], s["msg_id"], s["uniq_key"])]
        assert rows_of(find(cluster, topic=TOPIC, uniq_key=s["uniq_key"])) == want
        by_id = find(cluster, msg_id=s["msg_id"])
        assert rows_of(by_id) == want and by_id.rows[0].found_by == "msg_id"
        assert [n.split(":")[0] for n in by_id.notes] == [s["broker"]]  # the id names its broker: asked alone


def test_a_time_window_is_a_brute_force_walk_and_logarithmic(run, cluster):
    every = []
    for name in BROKERS:
        for m in cluster.stores[name].commit_log.messages():
            if m.topic == TOPIC:
                every.append((name, m.commit_log_offset, m.store_timestamp))
    times = sorted(t for _, _, t in every)
    for lo_i, hi_i in [(0, len(times) - 1), (len(times) // 4, len(times) // 2), (100, 101), (7, 7)]:
        begin, end = times[lo_i], times[hi_i]
        result = find(cluster, topic=TOPIC, between=(begin, end))
        assert sorted((r.broker, r.commit_log_offset) for r in result.rows) == \
            sorted((b, o) for b, o, t in every if begin <= t <= end)
        for q in result.stats["queues"]:
            assert q["probes"] <= 2 * math.ceil(math.log2(q["units"] + 1)), q
