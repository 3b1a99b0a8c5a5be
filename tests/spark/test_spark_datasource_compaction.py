"""The ``rocketmq`` data source over a compaction topic (docs/reading.md#compaction-topics), on the store a
real broker compacted (``tests/data/compaction_store``): the reader called as a worker calls it, row for row
against ``Store.consume``, and one query through Spark that plans the slices."""
from __future__ import annotations

from contextlib import closing

import pyarrow as pa
import pytest
from helpers import DATA

import cq

pytest.importorskip("pyspark")
pytestmark = pytest.mark.spark

STORE = DATA / "compaction_store"
TOPIC = "CompactTopic"
CASES = [("GID_COMPACT_TAG", {"tags": "TagA"}), ("GID_COMPACT_SQL", {}), ("GID_COMPACT_STAR", {"tags": "*"})]


def _read(queue_id, **kw):
    from pyspark_udfs import _reader
    from pyspark_udfs.datasource import ConsumeQueueSlice, ReadOptions

    _reader._STORES.clear()
    options = ReadOptions(path=str(STORE), **kw)
    end = cq.Store(STORE).consume_queue(TOPIC, queue_id).max_offset
    batches = list(_reader.read_slice(options, options.schema(), ConsumeQueueSlice(TOPIC, queue_id, 0, end), []))
    return pa.Table.from_batches(batches).to_pylist() if batches else []


def _consumed(group, **kw) -> dict:
    with closing(cq.Store(STORE)) as store:
        return {(m.queue_id, m.queue_offset): (m.commit_log_offset, m.properties["UNIQ_KEY"], m.body)
                for m in store.consume(TOPIC, group, **kw)}


@pytest.mark.parametrize(("group", "kw"), CASES)
def test_the_reader_gives_what_consume_gives(group, kw):
    rows = [r for q in (0, 1) for r in _read(q, group=group, **kw)]
    got = {(r["queue_id"], r["queue_offset"]): (r["commit_log_offset"], dict(r["properties"])["UNIQ_KEY"], r["body"])
           for r in rows}
    assert len(got) == len(rows) and got == _consumed(group, **kw)


def test_decisions_show_the_client_recheck_alone():
    rows = _read(0, group="GID_COMPACT_TAG", tags="TagA", decisions=True)
    with closing(cq.Store(STORE)) as store:
        assert [r["queue_offset"] for r in rows] == store.consume_queue(TOPIC, 0).offsets.tolist()
    assert all(r["matched_by_consume_queue"] and r["matched_by_commit_log"] for r in rows)
    assert [r["delivered"] for r in rows] == [r["tags"] == "TagA" for r in rows]


def test_layer2_spark_is_refused_naming_the_topic():
    with pytest.raises(ValueError, match="'CompactTopic' is a compaction topic"):
        _read(0, group="GID_COMPACT_SQL", layer2="spark")


def test_a_spark_query_plans_and_reads_the_compaction_topic(spark):
    df = (spark.read.format("rocketmq").option("topic", TOPIC).option("group", "GID_COMPACT_TAG")
          .option("tags", "TagA").load(str(STORE)))
    got = {(r.queue_id, r.queue_offset): (r.commit_log_offset, r.uniq, bytes(r.body)) for r in
           df.selectExpr("queue_id", "queue_offset", "commit_log_offset", "properties['UNIQ_KEY'] AS uniq",
                         "body").collect()}
    assert got == _consumed("GID_COMPACT_TAG", tags="TagA")
