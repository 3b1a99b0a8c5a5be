"""The scan job (``rmqfilter scan`` / ``job.py``) counts each filter layer as ``cq.Store.consume`` does."""
from __future__ import annotations

import json

import pytest
from helpers import DATA

pytestmark = pytest.mark.spark

STORE = str(DATA / "golden_store")
TOPIC = "GoldenFilterTopic"
GROUPS = [
    ("GID_SQL_A", "a > 5 AND b = 'abc'", None),
    ("GID_SQL_C", "num BETWEEN 10 AND 20 OR (city IS NOT NULL AND city = '北京')", None),
    ("GID_TAGS", None, "TagA || TagC || tag-0"),
]


@pytest.mark.parametrize("layer2", ["native", "python"])
@pytest.mark.parametrize(("group", "sql", "tags"), GROUPS)
def test_scan_counts_equal_store_consume_stats(spark, group, sql, tags, layer2):
    import cq
    from pyspark_udfs import job

    result = cq.Store(STORE).consume(TOPIC, group, sql=sql, tags=tags)
    delivered = list(result)
    stats = result.stats
    got = job.scan(spark, STORE, TOPIC, job.GroupScan(group, sql=sql, tags=tags), layer2=layer2)
    if tags is not None:
        assert got.layer2.startswith("python (tag subscription")
    else:
        assert got.layer2 == ("native" if layer2 == "native" else "python (reader, Cython engine)")
    assert got.units_scanned == stats.units_scanned == 200
    assert got.passed_consume_queue == stats.passed_consume_queue
    assert got.passed_commit_log == stats.passed_commit_log
    assert got.delivered == stats.delivered == len(delivered) > 0
    assert got.false_positives == stats.passed_consume_queue - stats.delivered
    if sql is not None:
        # Every SQL92 message here has a bitmap, so layer-1 leftovers are Bloom false positives.
        assert got.false_positives == stats.bloom_false_positives


def test_cli_scan_writes_what_the_group_receives(spark, tmp_path, capsys):
    import cq
    import rmqfilter

    group, sql = "GID_SQL_B", "TAGS = 'TagA' OR color IN ('red', 'grün')"
    out, summary = tmp_path / "out", tmp_path / "summary.json"
    code = rmqfilter.main(["scan", STORE, "--topic", TOPIC, "--group", group, "--sql", sql,
                     "--out", str(out), "--format", "json", "--json", str(summary)])
    assert code == 0
    printed = capsys.readouterr().out
    assert group in printed and "passed CQ" in printed and "rows/s" in printed
    assert "\nlayer 2: native\n" in printed  # --layer2 auto: native where the translation is exact
    expected = sorted((m.queue_id, m.queue_offset, m.commit_log_offset)
                      for m in cq.Store(STORE).consume(TOPIC, group, sql=sql))
    written = spark.read.json(str(out)).select("queue_id", "queue_offset", "commit_log_offset").collect()
    assert sorted(tuple(r) for r in written) == expected
    assert json.loads(summary.read_text())["delivered"] == len(expected)


def test_cli_scan_rejects_a_missing_store(capsys):
    import rmqfilter

    assert rmqfilter.main(["scan", str(DATA / "nope"), "--topic", TOPIC, "--group", "G", "--tags", "A"]) == 2
    assert "nope" in capsys.readouterr().err


def test_summary_table_lines_up():
    from pyspark_udfs.job import ScanResult, format_summary

    rows = [ScanResult("GID_A", "T", "a > 5", 1000, 400, 300, 300, 2.0),
            ScanResult("GID_LONGER_NAME", "T", "tags: A || B", 10, 10, 10, 9, 0.5)]
    lines = format_summary(rows).splitlines()
    assert len(lines) == 4 and len({len(line) for line in lines[:2]}) == 1
    assert "1,000" in lines[2] and "100" in lines[2] and "500" in lines[2]  # units, false pos, rows/s


@pytest.mark.parametrize("layer2", ["native", "python"])
def test_scan_output_is_the_same_with_layer2_native_or_in_the_reader(spark, tmp_path, layer2):
    import cq
    from pyspark_udfs import job

    group, sql = "GID_SQL_C", "num BETWEEN 10 AND 20 OR (city IS NOT NULL AND city = '北京')"
    out = tmp_path / "out"
    got = job.scan(spark, STORE, TOPIC, job.GroupScan(group, sql=sql), out=str(out), layer2=layer2)
    expected = sorted((m.queue_id, m.queue_offset, m.body) for m in cq.Store(STORE).consume(TOPIC, group, sql=sql))
    written = spark.read.parquet(str(out)).select("queue_id", "queue_offset", "body").collect()
    assert sorted((r[0], r[1], bytes(r[2])) for r in written) == expected
    assert got.delivered == len(expected) > 0


def test_selector_the_native_translation_cannot_express_runs_in_the_reader_and_says_why(spark):
    import cq
    from pyspark_udfs import job

    # deeper than the native translation goes (MAX_DEPTH), so layer 2 stays in the reader
    sql = " OR ".join(f"num = {i}" for i in range(500))
    stats = cq.Store(STORE).consume(TOPIC, "GID_WIDE", sql=sql)
    delivered = len(list(stats))
    got = job.scan(spark, STORE, TOPIC, job.GroupScan("GID_WIDE", sql=sql), layer2="native")
    assert got.layer2.startswith("python (not expressible natively: nesting depth")
    assert (got.units_scanned, got.delivered) == (200, delivered)
