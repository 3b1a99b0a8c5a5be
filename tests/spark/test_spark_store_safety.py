"""Reading a store through Spark changes nothing in it: every file hashes the same before and after
every table of the ``rocketmq`` data source and the scan job (``rmqfilter scan``)."""
from __future__ import annotations

import shutil

import pytest
from helpers import DATA, tree_snapshot

pytestmark = pytest.mark.spark

TOPIC = "GoldenFilterTopic"


def test_every_spark_read_path_leaves_the_store_unchanged(spark, tmp_path, capsys):
    from pyspark.sql import functions as F

    import rmqfilter
    from pyspark_udfs import job

    root = tmp_path / "store"
    shutil.copytree(DATA / "golden_store", root)
    before = tree_snapshot(root)
    assert len([k for k in before if not k.endswith("/")]) > 10

    def read(**options):
        reader = spark.read.format("rocketmq")
        for name, value in options.items():
            reader = reader.option(name, value)
        return reader.load(str(root))

    reads = [
        {},
        {"table": "consumequeue"},
        {"topic": TOPIC, "group": "GID_SQL_A", "sql": "a > 5 AND b = 'abc'"},
        {"topic": TOPIC, "group": "GID_SQL_B", "sql": "TAGS = 'TagA' OR color IN ('red', 'grün')",
         "decisions": "true"},
        {"topic": TOPIC, "group": "GID_TAGS", "tags": "TagA || TagC", "table": "consumequeue",
         "decisions": "true"},
        {"pushdown": "false", "partition_units": "7"},
        {"on_corrupt": "skip", "skipped_log": str(tmp_path / "skipped")},
    ]
    counts = []
    for options in reads:
        df = read(**options)
        counts.append(len(df.collect()))
    # pushed-down filters take their own path through the reader
    counts.append(read(pushdown="true").where(F.col("queue_id") == 1).where(F.col("tags").isin("TagA", "TagB")).count())
    assert counts[0] == counts[1] == counts[5] == counts[6] == 300 and all(counts)

    result = job.scan(spark, str(root), TOPIC, job.GroupScan("GID_SQL_C", sql="num BETWEEN 10 AND 20"),
                      out=str(tmp_path / "out"), on_corrupt="skip")
    assert result.units_scanned == 200 and not result.skipped
    assert rmqfilter.main(["scan", str(root), "--topic", TOPIC, "--group", "GID_TAGS", "--tags", "TagA",
                     "--out", str(tmp_path / "out2"), "--json", str(tmp_path / "summary.json")]) == 0
    assert "GID_TAGS" in capsys.readouterr().out

    assert tree_snapshot(root) == before
