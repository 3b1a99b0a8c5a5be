"""Spark throughput: ``selector_match`` beside a native Column predicate and a plain ``@udf``;
the ``rocketmq`` data source with and without filter pushdown.

All in one SparkSession (local[2]), same run, same data:

- selector ``a > 5 AND TAGS IN ('TagA', 'TagB')`` over 5 M rows with a
  ``map<string,string>`` column of six properties, as
  (1) ``pyspark_udfs.selector_match`` with its default ``engine="auto"``
  (exact here, so the native translation: no Python), (2) the same predicate
  written by hand as native Spark Column expressions (the ceiling),
  (3) a plain row-at-a-time ``@udf`` calling ``Selector.matches`` on the map,
  (4) ``selector_match(..., engine="arrow")`` (JVM extracts ``props['a']`` and
  ``props['TAGS']``, an Arrow UDF runs the batch kernel), (5) the SQL form
  ``rmq_selector_match(sql, props)`` that ships the whole map; all give the
  same count (checked);
- the data source over a sample store (``cq.writer.sample.generate_sample_store``):
  ``messages`` and ``consumequeue`` tables, all rows, and a TagB query
  (``tags = 'TagB'`` / ``tags_code = <hash of TagB>``) with pushdown on and
  off (``spark.sql.python.filterPushdown.enabled``);
- the data source's reader in-process (no Spark), same store: the batch
  reader beside per-unit ``ConsumeQueueExt.get`` + ``CommitLog.read_message``
  with Arrow built from lists, and a SQL group's ``decisions=true`` read with
  layer 1 on arrays beside layer 1 unit by unit.

Run: ``.venv/bin/python -m pytest bench/bench_spark.py`` (about 3-4 minutes on 2 cores).
"""
from __future__ import annotations

import os

import numpy as np
import pytest

# Rows of the selector group; RMQFILTER_BENCH_SPARK_ROWS makes a shorter run (the plain @udf is slow).
ROWS = int(os.environ.get("RMQFILTER_BENCH_SPARK_ROWS", "5000000"))
GROUP = f"spark selector_match, {ROWS / 1e6:g} M rows"
SQL = "a > 5 AND TAGS IN ('TagA', 'TagB')"
STORE_MESSAGES = 200_000
ROUNDS = 3


def _count(df, predicate) -> int:
    return df.filter(predicate).count()


def _run(benchmark, fn, role: str, items: int):
    benchmark.extra_info.update(items=items, role=role)
    return benchmark.pedantic(fn, rounds=ROUNDS, iterations=1, warmup_rounds=1)


@pytest.fixture(scope="module")
def expected_count(props_df):
    from pyspark.sql import functions as F

    native = (F.col("props")["a"].cast("double") > 5) & F.col("props")["TAGS"].isin("TagA", "TagB")
    return _count(props_df, native)


@pytest.mark.benchmark(group=GROUP)
def test_selector_match_auto(benchmark, props_df, expected_count):
    # engine="auto" (the default): the native translation, exact for this selector.
    from pyspark_udfs import selector_match

    pred = selector_match(SQL, "props")
    assert _run(benchmark, lambda: _count(props_df, pred), "ours", ROWS) == expected_count


@pytest.mark.benchmark(group=GROUP)
def test_selector_match_arrow_udf(benchmark, props_df, expected_count):
    from pyspark_udfs import selector_match

    pred = selector_match(SQL, "props", engine="arrow")
    benchmark.extra_info["series"] = "arrow udf"
    assert _run(benchmark, lambda: _count(props_df, pred), "twin", ROWS) == expected_count


@pytest.mark.benchmark(group=GROUP)
def test_selector_match_sql_whole_map(benchmark, props_df, expected_count):
    from pyspark.sql import functions as F

    pred = F.expr(f"rmq_selector_match({SQL!r}, props)".replace("\\'", "''"))
    benchmark.extra_info["series"] = "sql form"
    assert _run(benchmark, lambda: _count(props_df, pred), "twin", ROWS) == expected_count


@pytest.mark.benchmark(group=GROUP)
def test_native_column_predicate(benchmark, props_df, expected_count):
    from pyspark.sql import functions as F

    pred = (F.col("props")["a"].cast("double") > 5) & F.col("props")["TAGS"].isin("TagA", "TagB")
    assert _run(benchmark, lambda: _count(props_df, pred), "alternative", ROWS) == expected_count


@pytest.mark.benchmark(group=GROUP)
def test_plain_python_udf(benchmark, props_df, expected_count):
    from pyspark.sql.functions import udf

    import selector

    compiled = selector.compile(SQL)
    plain = udf(lambda m: compiled.matches(m), "boolean", useArrow=False)
    assert _run(benchmark, lambda: _count(props_df, plain("props")), "alternative", ROWS) == expected_count


# ------------------------------------------------------------------ data source
@pytest.fixture(scope="module")
def sample_store(cached_sample_store):
    return cached_sample_store(STORE_MESSAGES, 1)


def _scan(spark, store: str, table: str, tags: str | None, pushdown: bool) -> int:
    from pyspark.sql import functions as F

    spark.conf.set("spark.sql.python.filterPushdown.enabled", "true" if pushdown else "false")
    try:
        df = spark.read.format("rocketmq").option("table", table).option("pushdown", str(pushdown)).load(store)
        if tags is not None and table == "messages":
            df = df.filter(F.col("tags") == tags)
        elif tags is not None:
            import cq

            df = df.filter(F.col("tags_code") == cq.tags_code(tags))
        return df.count()
    finally:
        spark.conf.set("spark.sql.python.filterPushdown.enabled", "true")


@pytest.mark.parametrize("table", ["messages", "consumequeue"])
def test_datasource_all_rows(benchmark, spark, sample_store, table):
    benchmark.group = f"spark data source {table}, {STORE_MESSAGES:,} messages"
    count = _run(benchmark, lambda: _scan(spark, sample_store, table, None, True), "ours", STORE_MESSAGES)
    assert count == STORE_MESSAGES


@pytest.mark.parametrize("table", ["messages", "consumequeue"])
@pytest.mark.parametrize("pushdown", [True, False], ids=["pushdown", "no-pushdown"])
def test_datasource_tag_query(benchmark, spark, sample_store, table, pushdown):
    benchmark.group = f"spark data source {table} WHERE tag is TagB, {STORE_MESSAGES:,} messages"
    role = "ours" if pushdown else "alternative"
    count = _run(benchmark, lambda: _scan(spark, sample_store, table, "TagB", pushdown), role, STORE_MESSAGES)
    assert 0 < count < STORE_MESSAGES


# ------------------------------------------------------------------ the reader in-process (no Spark)
def _slices(store_path):
    import cq
    from pyspark_udfs.datasource import ConsumeQueueSlice

    store = cq.Store(store_path)
    out = [ConsumeQueueSlice(t, q, 0, len(store.consume_queue(t, q))) for t in store.topics()
           for q in store.queue_ids(t)]
    store.close()
    return out


def _read_all(store_path, **options) -> int:
    from pyspark_udfs import _reader
    from pyspark_udfs.datasource import ReadOptions

    opts = ReadOptions(path=store_path, **options)
    schema = opts.schema()
    return sum(b.num_rows for part in _slices(store_path) for b in _reader.read_slice(opts, schema, part, []))


def _read_all_per_item(store_path) -> int:
    """The alternative: ``ConsumeQueueExt.get`` and ``CommitLog.read_message`` per unit, Arrow from lists."""
    import pyarrow as pa

    import cq

    store = cq.Store(store_path)
    rows = 0
    for part in _slices(store_path):
        units = store.consume_queue(part.topic, part.queue_id).read(part.start, part.end - part.start)
        ext = store.ext(part.topic, part.queue_id)
        ext_units = [ext.get(int(a)) if ext is not None else None for a in units["tags_code"].tolist()]
        msgs = [store.commit_log.read_message(o) for o in units["commit_log_offset"].tolist()]
        batch = pa.RecordBatch.from_pydict({
            "tags_code": pa.array([u.tags_code if u else None for u in ext_units], pa.int64()),
            "msg_store_time": pa.array([u.msg_store_time if u else None for u in ext_units], pa.int64()),
            "filter_bitmap": pa.array([u.filter_bitmap if u else None for u in ext_units], pa.binary()),
            "tags": pa.array([m.tags for m in msgs], pa.string()),
            "keys": pa.array([m.keys for m in msgs], pa.string()),
            "properties": pa.array([list(m.properties.items()) for m in msgs], pa.map_(pa.string(), pa.string())),
            "body": pa.array([m.body for m in msgs], pa.binary()),
            "born_host": pa.array([m.born_host for m in msgs], pa.string()),
            "store_host": pa.array([m.store_host for m in msgs], pa.string()),
            "born_timestamp": pa.array([m.born_timestamp for m in msgs], pa.int64()),
            "store_timestamp": pa.array([m.store_timestamp for m in msgs], pa.int64()),
        })
        rows += batch.num_rows
    store.close()
    return rows


def test_reader_in_process_batch(benchmark, sample_store):
    benchmark.group = f"data source reader in-process, messages, {STORE_MESSAGES:,} messages"
    _read_all(sample_store)  # warm the page cache and the mapped stores
    assert _run(benchmark, lambda: _read_all(sample_store), "ours", STORE_MESSAGES) == STORE_MESSAGES


def test_reader_in_process_per_item(benchmark, sample_store):
    benchmark.group = f"data source reader in-process, messages, {STORE_MESSAGES:,} messages"
    benchmark.extra_info["series"] = "get + read_message per unit, Arrow from lists"
    count = _run(benchmark, lambda: _read_all_per_item(sample_store), "alternative", STORE_MESSAGES)
    assert count == STORE_MESSAGES


def _layer1_per_unit(self, codes, *, known, ext_batch, **_):
    """Layer 1 through the filter's ``is_matched_by_consume_queue``, one unit at a time."""
    f, values = self.filter, codes.tolist()
    passed = np.fromiter((f.is_matched_by_consume_queue(values[i] if known[i] else None,
                                                        ext_batch.unit(i) if ext_batch is not None else None)
                          for i in range(len(values))), dtype=bool, count=len(values))
    return passed, np.zeros(len(values), dtype=bool)


@pytest.mark.parametrize("layer1", ["arrays", "per-unit"])
def test_reader_group_decisions_layer1(benchmark, sample_store, layer1):
    from cq.filter.layers import Layers

    benchmark.group = f"data source reader in-process, SQL group decisions, {STORE_MESSAGES:,} messages"
    options = {"table": "consumequeue", "group": "GID_bench", "sql": "a > 5", "decisions": True}
    original = Layers.layer1
    if layer1 == "per-unit":
        Layers.layer1 = _layer1_per_unit  # the filter asked unit by unit
    try:
        count = _run(benchmark, lambda: _read_all(sample_store, **options),
                     "ours" if layer1 == "arrays" else "alternative", STORE_MESSAGES)
    finally:
        Layers.layer1 = original
    assert count == STORE_MESSAGES
