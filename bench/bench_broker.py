"""The real broker's consumer as the peer (issue 25; docs/testing.md, scenario ``throughput``).

The harness (tests/broker) filled a topic of 1,000,000 messages on a real RocketMQ broker and
timed a push consumer of one SQL92 group, tuned for speed, receiving all of them from the broker.
These benchmarks read the store that broker wrote, for the same group, with ``Store.consume``, the
``rocketmq`` data source and ``rmqfilter consume``; each must deliver exactly what the consumer
received. ``items`` is the topic's messages (what each side filters); the report sets the
consumer's own figure (``extra_info["peer"]``) beside them.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import cq

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests" / "broker"))
import run as harness

sys.path.remove(str(ROOT / "tests" / "broker"))

ROUNDS = 3
GROUP = "broker peer: SQL92 group over 1 M messages"


@pytest.fixture(scope="module")
def throughput():
    """``(store path, broker.json's throughput)``: the scenario's run, kept per harness version."""
    missing = harness.missing_tools()
    if missing:
        pytest.skip(f"the broker peer needs Java 17 and Maven (missing: {', '.join(missing)})")
    out = ROOT / "build" / "broker-runs" / f"throughput-{harness.source_hash()}"
    if not (out / "broker.json").exists():
        for old in out.parent.glob("throughput-*"):
            shutil.rmtree(old, ignore_errors=True)
        partial = out.with_name(out.name + ".partial")
        harness.run("throughput", partial)
        partial.rename(out)
    doc = json.loads((out / "broker.json").read_text())
    return out / "stores" / "broker-a", doc["throughput"]


def _measure(benchmark, fn, peer: dict):
    benchmark.extra_info.update(items=peer["messages"], role="ours", peer=peer)
    return benchmark.pedantic(fn, rounds=ROUNDS, iterations=1, warmup_rounds=1)


@pytest.mark.benchmark(group=GROUP)
def test_broker_peer_store_consume(benchmark, throughput):
    path, peer = throughput
    store = cq.Store(str(path))
    try:
        got = _measure(benchmark, lambda: sum(1 for _ in store.consume(peer["topic"], peer["group"])), peer)
    finally:
        store.close()
    assert got == peer["received"]


@pytest.mark.benchmark(group=GROUP)
def test_broker_peer_data_source(benchmark, throughput, spark):
    path, peer = throughput

    def count():
        return (spark.read.format("rocketmq").option("topic", peer["topic"]).option("group", peer["group"])
                .load(str(path)).count())

    assert _measure(benchmark, count, peer) == peer["received"]


@pytest.mark.benchmark(group=GROUP)
def test_broker_peer_cli_consume(benchmark, throughput):
    path, peer = throughput
    cli = [str(Path(sys.executable).with_name("rmqfilter")), "consume", str(path), "--topic", peer["topic"],
           "--group", peer["group"], "--format", "jsonl"]

    def consume():
        out = subprocess.run(cli, check=True, capture_output=True, env=dict(os.environ)).stdout
        return out.count(b"\n")

    assert _measure(benchmark, consume, peer) == peer["received"]
