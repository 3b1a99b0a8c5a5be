"""``rmqfilter demo`` end to end on a small sample: its results equal ``cq.Store.consume``'s counts."""
from __future__ import annotations

import json

import pytest

pytestmark = pytest.mark.spark


def test_demo_writes_a_sample_and_reports_store_consume_counts(spark, tmp_path, capsys):
    import cq
    import cq.writer.sample
    import rmqfilter

    root, report = tmp_path / "demo", tmp_path / "demo.json"
    argv = ["demo", "--messages", "3000", "--seed", "5", "--store", str(root), "--json", str(report)]
    assert rmqfilter.main(argv) == 0
    printed = capsys.readouterr().out
    assert "Wrote 3,000 messages" in printed and "passed CQ" in printed
    results = {r["group"]: r for r in json.loads(report.read_text())["results"]}
    store = cq.Store(str(root))
    topic = cq.writer.sample.SAMPLE_TOPICS[0]
    assert set(results) == {g for g, _ in cq.writer.sample.SAMPLE_GROUPS} | {"GID_TAGS_BC"}
    for group, sql in cq.writer.sample.SAMPLE_GROUPS:
        result = store.consume(topic, group, sql=sql)
        list(result)
        s, got = result.stats, results[group]
        assert group in printed
        assert (got["units_scanned"], got["passed_consume_queue"], got["passed_commit_log"], got["delivered"]) == (
            s.units_scanned, s.passed_consume_queue, s.passed_commit_log, s.delivered)
        assert 0 < s.delivered <= s.passed_consume_queue < s.units_scanned
    # the backlog the demo prints is Store.backlog's, from the sample's committed offsets
    assert "(rmqfilter backlog)" in printed and "rmqfilter why" in printed
    for group, _sql in cq.writer.sample.SAMPLE_GROUPS:
        b = cq.backlog(store, topic, group)
        assert 0 < b.will_receive < b.lag
        assert any(line.split() == [group, f"{b.lag:,}", f"{b.will_receive:,}"] for line in printed.splitlines())
    # A second run reuses the store instead of writing it again.
    assert rmqfilter.main(argv) == 0
    assert "Reusing the sample store" in capsys.readouterr().out
