"""The data source's ``table=trace`` (docs/trace.md#spark): the rows equal :func:`cq.analyses.trace.trace`'s,
of one store or of several (a cluster, each row with its broker), the schema is its columns, options that do not apply are refused by name, and a record that does not read
fails the read naming its place. Against the real clients' records: tests/broker/test_broker_trace.py."""
from __future__ import annotations

from contextlib import closing

import pytest
from trace_stores import write_store

from cq import Cluster, Store
from cq.analyses.trace import COLUMNS, trace
from pyspark_udfs._source import ReadOptions

_TYPES = {"string": "string", "int": "int", "long": "bigint", "boolean": "boolean"}


def test_schema_is_the_trace_columns(tmp_path):
    opts = ReadOptions.parse({"path": str(tmp_path), "table": "trace", "trace_topic": "MyTrace"})
    assert opts.trace_topic == "MyTrace"
    assert [(f.name, f.dataType.simpleString()) for f in opts.schema().fields] == [
        (n, _TYPES[t]) for n, t in COLUMNS]


@pytest.mark.parametrize("extra", [{"topic": "T"}, {"group": "G", "tags": "*"}, {"pushdown": "true"}])
def test_options_that_do_not_apply_are_refused_by_name(tmp_path, extra):
    with pytest.raises(ValueError, match="reads the stores' trace topic: option") as info:
        ReadOptions.parse({"path": str(tmp_path), "table": "trace", **extra})
    assert all(k in str(info.value) for k in extra)


def test_trace_topic_needs_the_trace_table(tmp_path):
    with pytest.raises(ValueError, match="'trace_topic' is for table=trace"):
        ReadOptions.parse({"path": str(tmp_path), "trace_topic": "X"})


@pytest.mark.spark
def test_rows_equal_the_trace_command(spark, tmp_path):
    root = tmp_path / "broker-a"
    write_store(root)
    with closing(Store(root)) as s:
        want = [tuple(r.to_dict()[n] for n, _t in COLUMNS) for r in trace(s).rows]
    got = [tuple(row) for row in spark.read.format("rocketmq").option("table", "trace").load(str(root)).collect()]
    assert got == want and len(got) == 7
    bad = tmp_path / "bad"
    write_store(bad, bad=True)
    with pytest.raises(Exception, match="trace record\\(s\\) do not read; the first: .*CommitLog offset"):
        spark.read.format("rocketmq").option("table", "trace").load(str(bad)).collect()


def test_several_stores_are_a_cluster(tmp_path):
    """Over several stores the options name each broker's root; the schema is the trace columns still (their
    ``broker`` column names each row's broker)."""
    for name in ("broker-a", "broker-b"):
        write_store(tmp_path / name)
    opts = ReadOptions.parse({"path": str(tmp_path / "broker-*"), "table": "trace"})
    assert [name for name, _root in opts.brokers] == ["broker-a", "broker-b"]
    assert [f.name for f in opts.schema().fields] == [n for n, _t in COLUMNS]


@pytest.mark.spark
def test_rows_of_a_cluster_equal_the_trace_command(spark, tmp_path):
    write_store(tmp_path / "broker-a")
    write_store(tmp_path / "broker-b", trace_topic="MyTrace")
    write_store(tmp_path / "broker-c", trace_topic="MyTrace")
    roots = [str(tmp_path / n) for n in ("broker-a", "broker-b", "broker-c")]
    with closing(Cluster(roots)) as c:
        want = [tuple(r.to_dict()[n] for n, _t in COLUMNS) for r in trace(c, topic="MyTrace").rows]
    got = [tuple(row) for row in spark.read.format("rocketmq").option("table", "trace")
           .option("trace_topic", "MyTrace").load(roots).collect()]
    assert got == want and len(got) == 14
    assert {row[0] for row in got} == {"broker-b", "broker-c"}  # broker-a has no topic MyTrace
    bad = tmp_path / "bad"
    write_store(bad, bad=True, trace_topic="MyTrace")
    with pytest.raises(Exception, match="trace record\\(s\\) do not read; the first: bad: .*CommitLog offset"):
        spark.read.format("rocketmq").option("table", "trace").option("trace_topic", "MyTrace") \
            .load([*roots, str(bad)]).collect()
