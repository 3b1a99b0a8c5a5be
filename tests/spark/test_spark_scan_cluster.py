"""``rmqfilter scan`` / ``job.scan`` over several stores, a cluster's brokers (docs/reading.md#clusters):
the counts are the sums of scanning each broker's store alone, each broker's counts are kept, and
what the group receives is what ``cq.Cluster`` consumes."""
from __future__ import annotations

import json

import pytest
from cluster_stores import BROKERS, write_brokers

import cq
from cq.writer.sample import SAMPLE_GROUPS, SAMPLE_TOPICS

pytestmark = pytest.mark.spark

TOPIC = SAMPLE_TOPICS[0]
COUNTS = ("units_scanned", "passed_consume_queue", "passed_commit_log", "delivered")


@pytest.fixture(scope="module")
def roots(tmp_path_factory):
    return [str(r) for r in write_brokers(tmp_path_factory.mktemp("scan-cluster"))]


def _counts(c) -> dict[str, int]:
    return {k: getattr(c, k) for k in COUNTS}


@pytest.mark.parametrize(("group", "layer2"), [(SAMPLE_GROUPS[0][0], "native"), (SAMPLE_GROUPS[2][0], "python"),
                                               ("GID_TAGS", "python")])
def test_scan_of_two_brokers_sums_each_brokers_scan(spark, roots, group, layer2):
    from pyspark_udfs import job

    if group == "GID_TAGS":
        scans = [job.GroupScan(group, tags="TagA || TagC")] * 2
    else:  # each broker's own registration of the group
        scans = [job.registered_group_scans(root, TOPIC, group)[0] for root in roots]
    got = job.scan(spark, roots, TOPIC, scans[0], layer2=layer2)
    alone = [job.scan(spark, root, TOPIC, s, layer2=layer2) for root, s in zip(roots, scans)]
    assert [b.broker for b in got.brokers] == list(BROKERS)
    assert [_counts(b) for b in got.brokers] == [_counts(a) for a in alone]
    assert _counts(got) == {k: sum(getattr(a, k) for a in alone) for k in COUNTS}
    assert got.false_positives == sum(b.false_positives for b in got.brokers)
    # and what cq.Cluster's consume counts, broker by broker
    cluster = cq.Cluster(roots)
    result = cluster.consume(TOPIC, group, **({"tags": "TagA || TagC"} if group == "GID_TAGS" else {}))
    delivered = list(result)
    cluster.close()
    assert got.delivered == len(delivered) > 0 and min(b.delivered for b in got.brokers) > 0
    for b in got.brokers:
        stats = result.broker_stats[b.broker]
        assert (b.units_scanned, b.passed_consume_queue, b.passed_commit_log, b.delivered) == (
            stats.units_scanned, stats.passed_consume_queue, stats.passed_commit_log, stats.delivered)
    assert "brokers" not in alone[0].as_dict()
    assert [d["broker"] for d in got.as_dict()["brokers"]] == list(BROKERS)


def test_cli_scan_of_a_glob_prints_each_broker_and_writes_the_broker_column(spark, roots, tmp_path, capsys):
    import rmqfilter

    group = SAMPLE_GROUPS[1][0]
    out, summary = tmp_path / "out", tmp_path / "summary.json"
    pattern = roots[0].replace("/east/", "/*/")
    code = rmqfilter.main(["scan", pattern, "--topic", TOPIC, "--group", group, "--out", str(out), "--format", "json",
                     "--json", str(summary)])
    printed = capsys.readouterr().out
    assert code == 0
    doc = json.loads(summary.read_text())
    assert [d["broker"] for d in doc["brokers"]] == list(BROKERS)
    assert doc["delivered"] == sum(d["delivered"] for d in doc["brokers"])
    assert "per broker:" in printed
    for d in doc["brokers"]:
        line = next(ln for ln in printed.splitlines() if ln.startswith(f"{group}  {d['broker']} "))
        assert f"{d['units_scanned']:,}" in line and f"{d['delivered']:,}" in line
    cluster = cq.Cluster(roots)
    want = {(m.broker, m.queue_id, m.queue_offset) for m in cluster.consume(TOPIC, group)}
    cluster.close()
    written = spark.read.json(str(out)).select("broker", "queue_id", "queue_offset").collect()
    assert {tuple(r) for r in written} == want and len(written) == len(want) == doc["delivered"]

    code = rmqfilter.main(["scan", *roots, "--topic", TOPIC, "--all-groups", "--json", str(summary)])
    assert code == 0 and [d["group"] for d in json.loads(summary.read_text())] == [g for g, _ in SAMPLE_GROUPS]
