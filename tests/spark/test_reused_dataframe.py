"""A DataFrame reused over a live store reads the cut its first action planned, and says so (docs/spark.md).

Spark plans a Python data source's read once per DataFrame (the partitions and the reader are kept
on its relation), so the reader cannot re-plan; a task reading an old cut of a store that has moved
on logs a warning naming the cut and its age.
"""
from __future__ import annotations

import logging
import os

import pytest

pytest.importorskip("pyarrow")
pytest.importorskip("pyspark")

from cq.writer import StoreWriter
from pyspark_udfs import _reader
from pyspark_udfs.datasource import RocketMQDataSource

TOPIC = "T"


def _send(root, n: int) -> None:
    with StoreWriter(root, append=os.path.isdir(os.path.join(root, "commitlog"))) as w:
        for i in range(n):
            w.append(TOPIC, b"x", queue_id=i % 2)


def _rows(reader, parts) -> int:
    return sum(b.num_rows for p in parts for b in reader.read(p))


def _said(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == "rmqfilter.datasource"]


@pytest.fixture(autouse=True)
def _fresh_worker_state():
    _reader._STALE_SAID.clear()
    yield
    _reader._STALE_SAID.clear()


def test_a_task_reading_an_old_cut_of_a_store_that_moved_on_says_so_once(tmp_path, caplog):
    root = str(tmp_path / "store")
    _send(root, 500)
    src = RocketMQDataSource({"path": root, "topic": TOPIC, "stale_after": "0"})
    reader = src.reader(src.schema())
    parts = reader.partitions()
    end = parts[0].slices[0].commit_log_end
    with caplog.at_level(logging.WARNING, logger="rmqfilter.datasource"):
        assert _rows(reader, parts) == 500
        assert _said(caplog) == []  # the store is as planned: nothing to say
        _send(root, 300)
        assert _rows(reader, parts) == 500  # the plan's cut, as Spark's second action reads it
        _rows(reader, parts)
    said = _said(caplog)
    assert len(said) == 1  # once per plan
    assert f"CommitLog [0, {end})" in said[0] and " s ago (at 20" in said[0]
    assert "load it again" in said[0] and "docs/spark.md#reused-dataframes" in said[0]
    # a new plan reads the store as it is now, without a word
    fresh = src.reader(src.schema())
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="rmqfilter.datasource"):
        assert _rows(fresh, fresh.partitions()) == 800
    assert _said(caplog) == []


def test_a_recent_plan_is_not_called_old(tmp_path, caplog):
    root = str(tmp_path / "store")
    _send(root, 50)
    src = RocketMQDataSource({"path": root, "topic": TOPIC})  # stale_after: 60 s
    reader = src.reader(src.schema())
    parts = reader.partitions()
    _send(root, 50)  # written while the first action runs: a live store, not a reused plan
    with caplog.at_level(logging.WARNING, logger="rmqfilter.datasource"):
        assert _rows(reader, parts) == 50
    assert _said(caplog) == []


@pytest.mark.parametrize("text", ["-1", "soon", "nan"])
def test_stale_after_is_checked(tmp_path, text):
    root = str(tmp_path / "store")
    _send(root, 1)
    with pytest.raises(ValueError, match=f"rocketmq option 'stale_after': expected seconds .* got '{text}'"):
        RocketMQDataSource({"path": root, "topic": TOPIC, "stale_after": text})


@pytest.mark.spark
def test_spark_keeps_a_dataframes_first_plan_and_a_new_load_sees_the_store_now(spark, tmp_path):
    root = str(tmp_path / "store")
    _send(root, 500)
    df = spark.read.format("rocketmq").option("topic", TOPIC).load(root)
    assert df.count() == 500
    _send(root, 300)
    # Spark 4's Python data source plans the read once per DataFrame and reuses it for every action
    # that pushes no new filter into the reader
    assert df.count() == 500
    assert spark.read.format("rocketmq").option("topic", TOPIC).load(root).count() == 800
