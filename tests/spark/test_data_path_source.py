"""Column projection in the ``rocketmq`` data source: a user schema decodes only its columns.

The reader tests run ``read_slice`` in-process (no JVM); the Spark tests check
user schemas end to end.
"""
from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest
from helpers import DATA
from pyspark.sql.types import (
    BinaryType,
    BooleanType,
    IntegerType,
    LongType,
    MapType,
    StringType,
    StructField,
    StructType,
)

import cq
from pyspark_udfs import _reader
from pyspark_udfs.datasource import ReadOptions, RocketMQReader, check_schema

GOLDEN = str(DATA / "golden_store")


def _read_all(options: ReadOptions, schema: StructType) -> pa.Table:
    parts = RocketMQReader(options, schema).partitions()
    batches = [b for p in parts for b in _reader.read_partition(options, schema, p, [])]
    return pa.Table.from_batches(batches, schema=batches[0].schema) if batches else None


_TYPES = {"int": IntegerType(), "long": LongType(), "string": StringType(), "binary": BinaryType(),
          "boolean": BooleanType(), "map<string,string>": MapType(StringType(), StringType(), True)}


def _ddl(ddl: str) -> StructType:
    """A StructType from "name type, ..." (StructType.fromDDL needs a JVM)."""
    return StructType([StructField(name, _TYPES[t], True)
                       for name, t in (part.strip().split(" ", 1) for part in ddl.split(", "))])


@pytest.mark.parametrize("ddl", [
    "queue_id int, queue_offset long, tags_code long",
    "tags_code long, topic string",
    "body binary, queue_offset long, tags string",
    "properties map<string,string>, born_host string, store_size int, keys string",
    "msg_store_time long, filter_bitmap binary, commit_log_offset long, sys_flag int, reconsume_times int",
])
def test_any_subset_in_any_order_equals_the_full_read(ddl):
    options = ReadOptions.parse({"path": GOLDEN})
    full = _read_all(options, options.schema())
    schema = _ddl(ddl)
    check_schema(options, schema)
    part = _read_all(options, schema)
    assert part.column_names == [f.name for f in schema.fields]
    assert part.num_rows == full.num_rows > 0
    for name in part.column_names:
        assert part.column(name).to_pylist() == full.column(name).to_pylist(), name


@pytest.mark.parametrize("topic", ["GoldenFilterTopic", "GoldenPlainTopic"])  # ext units with / without bitmaps
def test_full_read_equals_read_message(topic):
    options = ReadOptions.parse({"path": GOLDEN, "topic": topic})
    full = _read_all(options, options.schema()).to_pylist()
    store = cq.Store(GOLDEN)
    for row in full:
        m = store.commit_log.read_message(row["commit_log_offset"])
        assert (row["tags"], row["keys"], row["body"], row["born_host"], row["store_host"], row["sys_flag"],
                row["born_timestamp"], row["store_timestamp"], row["reconsume_times"]) == (
            m.tags, m.keys, m.body, m.born_host, m.store_host, m.sys_flag, m.born_timestamp,
            m.store_timestamp, m.reconsume_times)
        assert row["properties"] == list(m.properties.items())
        # the unit's columns (a full read takes them as slices of the slice's arrays)
        slot = int(store.consume_queue(topic, row["queue_id"]).read(row["queue_offset"], 1)["tags_code"][0])
        unit = store.ext(topic, row["queue_id"]).get(slot)
        assert slot <= cq.format.MAX_ADDR
        assert (row["tags_code"], row["msg_store_time"], row["filter_bitmap"]) == (
            unit.tags_code, unit.msg_store_time, unit.filter_bitmap)
    store.close()


def test_no_commit_log_column_reads_no_commit_log_byte(monkeypatch):
    options = ReadOptions.parse({"path": GOLDEN})
    schema = _ddl("queue_id int, queue_offset long, tags_code long, msg_store_time long")
    parts = RocketMQReader(options, schema).partitions()  # the driver fixes the CommitLog range here

    def refuse(self, *args, **kwargs):
        raise AssertionError("a CommitLog byte was read")

    monkeypatch.setattr(cq.CommitLog, "_map", refuse)
    monkeypatch.setattr(cq.CommitLog, "_u8", refuse)
    monkeypatch.setattr(_reader, "_STORES", cq.StoreCache())
    rows = sum(b.num_rows for p in parts for b in _reader.read_partition(options, schema, p, []))
    assert rows == 300
    # a CommitLog column does read it: the spy is live
    with pytest.raises(AssertionError, match="CommitLog byte"):
        for p in parts:
            list(_reader.read_partition(options, _ddl("tags string"), p, []))


@pytest.mark.parametrize("ddl, message", [
    ("queue_id int, bodyy binary",
     r"no column 'bodyy' in the messages table; its columns are: topic string, queue_id int, .*body binary"),
    ("queue_id long", r"column 'queue_id' is int, not bigint"),
    ("tags string, tags string", r"column 'tags' appears twice"),
])
def test_bad_user_schema_names_the_column(ddl, message):
    options = ReadOptions.parse({"path": GOLDEN})
    with pytest.raises(ValueError, match=message):
        check_schema(options, _ddl(ddl))


def test_batches_bounded_by_bytes():
    sizes = np.full(1000, 1000, dtype=np.int64)
    bounds = _reader.batch_bounds(sizes, 1000, batch_bytes=10_640, max_rows=1 << 20)
    assert bounds[0] == (0, 10) and bounds[-1][1] == 1000
    assert all(b - a == 10 for a, b in bounds)
    assert _reader.batch_bounds(None, 1000, batch_bytes=64 * 100, max_rows=30)[0] == (0, 30)
    huge = np.array([1 << 30, 5, 5], dtype=np.int64)  # one record over the budget is a batch of its own
    assert _reader.batch_bounds(huge, 3, batch_bytes=1 << 20) == [(0, 1), (1, 3)]


def test_group_read_with_projection_equals_consume():
    options = ReadOptions.parse({"path": GOLDEN, "topic": "GoldenFilterTopic", "group": "GID_SQL_A",
                                 "sql": "a > 5 AND b = 'abc'"})
    got = _read_all(options, _ddl("queue_id int, queue_offset long, tags string"))
    store = cq.Store(GOLDEN)
    want = [(m.queue_id, m.queue_offset, m.tags) for m in store.consume("GoldenFilterTopic", "GID_SQL_A",
                                                                          sql="a > 5 AND b = 'abc'")]
    store.close()
    rows = [] if got is None else [(r["queue_id"], r["queue_offset"], r["tags"]) for r in got.to_pylist()]
    assert sorted(rows) == sorted(want) and len(want) > 0


@pytest.mark.spark
def test_spark_user_schema(spark):
    df = spark.read.format("rocketmq").schema("queue_id int, queue_offset long, tags_code long").load(GOLDEN)
    assert df.columns == ["queue_id", "queue_offset", "tags_code"]
    full = spark.read.format("rocketmq").load(GOLDEN).select("queue_id", "queue_offset", "tags_code")
    assert sorted(df.collect()) == sorted(full.collect()) and df.count() == 300


@pytest.mark.spark
def test_spark_bad_user_schema_fails_naming_the_column(spark):
    with pytest.raises(Exception, match="no column 'bodyy'.*its columns are"):
        spark.read.format("rocketmq").schema("queue_id int, bodyy binary").load(GOLDEN).collect()


def test_partitions_pack_queue_ranges_in_equal_shares_by_what_the_read_decodes(tmp_path, monkeypatch):
    """A task costs far more than a small queue's read (docs/spark.md#partitions): ranges of several
    queues share a partition, up to ``partition_units`` (a larger default when no record is
    decoded), in at least ``min_partitions`` equal shares; each range lies in one ConsumeQueue file."""
    import pyspark_udfs._source as ds  # ReadOptions.partition_size reads these where it lives

    # a small store stands for a large one
    monkeypatch.setattr(ds, "DEFAULT_PARTITION_UNITS", 50)
    monkeypatch.setattr(ds, "UNITS_ONLY_PARTITION_UNITS", 400)
    monkeypatch.setattr(ds, "GROUP_PARTITION_UNITS", 200)
    monkeypatch.setattr(ds, "MIN_SHARE_UNITS", 10)
    root = tmp_path / "store"
    cq.generate_sample_store(root, messages=1200, seed=4, consume_queue_file_size=64 * 20)  # 64-unit files
    topic = "SampleTopic"
    store = cq.Store(root)
    queues = {q: store.consume_queue(topic, q) for q in store.queue_ids(topic)}
    units = {q: (c.min_offset, c.max_offset) for q, c in queues.items()}
    per_file = {q: c.units_per_file for q, c in queues.items()}
    store.close()
    total = sum(hi - lo for lo, hi in units.values())
    assert total > 400 and max(per_file.values()) < max(hi for _, hi in units.values())  # several files a queue

    def plan(ddl=None, **options):
        opts = ReadOptions.parse({"path": str(root), "topic": topic, "min_partitions": "1", **options})
        parts = RocketMQReader(opts, _ddl(ddl) if ddl else opts.schema()).partitions()
        covered = [(s.queue_id, o) for p in parts for s in p.slices for o in range(s.start, s.end)]
        assert covered == [(q, o) for q, (lo, hi) in sorted(units.items()) for o in range(lo, hi)]
        assert all(s.start // per_file[s.queue_id] == (s.end - 1) // per_file[s.queue_id]
                   for p in parts for s in p.slices)
        sizes = [sum(s.end - s.start for s in p.slices) for p in parts]
        assert max(sizes) - min(sizes) <= 1 or min(sizes) == sizes[-1]  # equal shares, the last maybe less
        return len(parts)

    assert plan("queue_id int, queue_offset long, tags_code long") == -(-total // 400)  # no record decoded
    assert plan("queue_id int, queue_offset long, tags string") == -(-total // 50)
    assert plan() == -(-total // 50)
    assert plan("queue_id int, queue_offset long", group="G", tags="TagA") == -(-total // 200)  # layer 1 first
    assert plan(group="G", sql="a > 1", decisions="true") == -(-total // 200)
    assert plan("queue_id int, queue_offset long", partition_units="30") == -(-total // 30)
    assert plan("queue_id int, queue_offset long", min_partitions="7") == 7  # 7 shares under the cap
    assert plan(min_partitions="7") == -(-total // 50)  # the cap still holds
    monkeypatch.setattr(ds, "MIN_SHARE_UNITS", 300)
    assert plan("queue_id int, queue_offset long", min_partitions="7") == -(-total // 300)  # no share too small
    monkeypatch.setattr(ds, "default_min_partitions", lambda: 3)
    opts = ReadOptions.parse({"path": str(root), "topic": topic})
    assert len(RocketMQReader(opts, _ddl("queue_id int")).partitions()) == 3  # the planner's CPUs by default
    full = _read_all(ReadOptions.parse({"path": str(root), "topic": topic}), _ddl("queue_id int, queue_offset long"))
    assert full.num_rows == total
