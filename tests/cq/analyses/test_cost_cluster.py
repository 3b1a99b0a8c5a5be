"""``filter_cost`` and ``rmqfilter cost`` over several stores, a cluster's brokers (docs/cost.md#clusters):
each broker's rows are its store's report alone, the report's counts their sums, and the delivered
counts what ``cq.Cluster`` consumes."""
from __future__ import annotations

import dataclasses
import json

import pytest
from cluster_stores import BROKERS, write_brokers

import cq
import rmqfilter
from cq.analyses.cost import filter_cost
from cq.writer.sample import SAMPLE_GROUPS, SAMPLE_TOPICS

TOPIC = SAMPLE_TOPICS[0]
#: the GroupCost fields that count units, evaluations or bytes (they add up over the brokers)
SUMMED = ("units", "passed_consume_queue", "bloom_tested", "bloom_false_positives", "delivered", "client_filtered",
          "evaluations_without_bitmap", "evaluations_with_bitmap", "commit_log_reads_without_bitmap",
          "commit_log_reads_with_bitmap", "commit_log_bytes_without_bitmap", "commit_log_bytes_with_bitmap")


@pytest.fixture(scope="module")
def roots(tmp_path_factory):
    return [str(r) for r in write_brokers(tmp_path_factory.mktemp("cost-cluster"))]


def _counts(g) -> dict:
    return {k: getattr(g, k) for k in SUMMED}


def test_cost_over_two_brokers_is_each_brokers_cost_added(roots):
    tag = cq.analyses.cost.CostGroup("GID_TAGS", "TagA || TagC", "TAG", registered=False)
    groups = [g for g, _ in SAMPLE_GROUPS] + [tag]
    report = filter_cost(roots, TOPIC, groups, timing=False)
    alone = [filter_cost(root, TOPIC, groups, timing=False) for root in roots]
    assert [b.broker for b in report.brokers] == list(BROKERS) and [b.store for b in report.brokers] == roots
    for b, one in zip(report.brokers, alone):
        assert [dataclasses.asdict(g) for g in b.groups] == [dataclasses.asdict(g) for g in one.groups]
        assert (b.units, b.messages, b.registered_groups) == (one.units, one.messages, one.registered_groups)
    assert report.units == sum(a.units for a in alone) and report.messages == sum(a.messages for a in alone)
    assert report.dispatch_evaluations == sum(a.dispatch_evaluations for a in alone) > 0
    assert report.ext == {k: sum(a.ext[k] for a in alone) for k in report.ext}
    for g in report.groups:
        assert _counts(g) == {k: sum(getattr(a.group(g.group), k) for a in alone) for k in SUMMED}, g.group
    # the delivered counts are what the cluster's consumers receive, broker by broker
    cluster = cq.Cluster(roots)
    for name in (SAMPLE_GROUPS[0][0], "GID_TAGS"):
        result = cluster.consume(TOPIC, name, **({"tags": "TagA || TagC"} if name == "GID_TAGS" else {}))
        delivered = sum(1 for _ in result)
        assert report.group(name).delivered == delivered > 0
        assert [b.groups[groups.index(name) if name != "GID_TAGS" else -1].delivered for b in report.brokers] == [
            result.broker_stats[b].delivered for b in BROKERS]
    cluster.close()


@pytest.fixture(scope="module")
def other_groups(roots, tmp_path_factory):
    """East's root, and a copy of west's that lacks east's first registered group: ``(roots, group)``."""
    import shutil

    other = tmp_path_factory.mktemp("other") / "west" / "store"
    shutil.copytree(roots[1], other)
    path = other / "config" / "consumerFilter.json"
    doc = json.loads(path.read_text())
    table = doc["filterDataByTopic"][TOPIC]["groupFilterData"]
    gone = next(iter(table))
    table.pop(gone)
    path.write_text(json.dumps(doc))
    return [roots[0], str(other)], gone


def test_brokers_registering_other_groups_give_a_merged_report(other_groups, tmp_path, capsys):
    """Each group's row sums the brokers registering it; the report names the broker lacking a group."""
    two, gone = other_groups
    report = filter_cost(two, TOPIC, timing=False)
    east, west = (filter_cost(root, TOPIC, timing=False) for root in two)
    assert gone not in [g.group for g in west.groups]
    assert [g.group for g in report.groups] == [g.group for g in east.groups]  # the union
    assert report.registered_groups == east.registered_groups
    assert [b.missing_groups for b in report.brokers] == [[], [gone]]
    for g in report.groups:
        have = [a.group(g.group) for a in (east, west) if g.group in [x.group for x in a.groups]]
        assert _counts(g) == {k: sum(getattr(h, k) for h in have) for k in SUMMED}, g.group
    assert report.group(gone).delivered == east.group(gone).delivered > 0
    assert report.dispatch_evaluations == east.dispatch_evaluations + west.dispatch_evaluations
    assert report.messages == east.messages + west.messages
    page = tmp_path / "cost.html"
    assert rmqfilter.main(["cost", *two, "--topic", TOPIC, "--all-groups", "--no-timing", "--html", str(page)]) == 0
    line = f"west lacks {gone}: not registered there"
    assert line in capsys.readouterr().out and line in page.read_text()
    # a group named that no broker registers is still an error; one some broker lacks is not
    assert filter_cost(two, TOPIC, [gone], timing=False).group(gone).delivered == east.group(gone).delivered
    with pytest.raises(cq.UnknownGroupError):
        filter_cost(two, TOPIC, ["GID_NOWHERE"], timing=False)


def test_cli_cost_over_a_glob_shows_each_broker(roots, tmp_path, capsys):
    report, page = tmp_path / "cost.json", tmp_path / "cost.html"
    pattern = roots[0].replace("/east/", "/*/")
    code = rmqfilter.main(["cost", pattern, "--topic", TOPIC, "--all-groups", "--no-timing", "--json", str(report),
                     "--html", str(page)])
    out = capsys.readouterr().out
    assert code == 0
    doc = json.loads(report.read_text())
    assert [b["broker"] for b in doc["brokers"]] == list(BROKERS)
    assert [g["group"] for g in doc["groups"]] == [g for g, _ in SAMPLE_GROUPS]
    for i, g in enumerate(doc["groups"]):
        assert g["delivered"] == sum(b["groups"][i]["delivered"] for b in doc["brokers"])
    assert "2 brokers (east, west): the counts above are their sums" in out
    for b in doc["brokers"]:
        for g in b["groups"]:
            assert any(line.split()[:3] == [g["group"], b["broker"], "SQL92"] and f"{g['delivered']:,}" in line
                       for line in out.splitlines()), (b["broker"], g["group"])
    html = page.read_text()
    assert "<h2>Per broker</h2>" in html and all(f">{b}</td>" in html for b in BROKERS)


@pytest.mark.spark
def test_cost_on_spark_over_two_brokers_is_the_same_report(spark, roots, other_groups):
    """The same report on Spark, over brokers with the same groups and over brokers with different ones."""
    from pyspark_udfs.cost import filter_cost_spark

    for stores in (roots, other_groups[0]):
        here = filter_cost(stores, TOPIC, fp_target=0.05, timing=False).to_dict()
        on_spark = filter_cost_spark(spark, stores, TOPIC, fp_target=0.05, timing=False, partition_units=300).to_dict()
        for doc in (here, on_spark):
            doc.pop("seconds")
        assert on_spark == here and [b["broker"] for b in on_spark["brokers"]] == list(BROKERS)
    assert on_spark["brokers"][1]["missing_groups"] == [other_groups[1]]
