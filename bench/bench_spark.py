"""Spark throughput: ``selector_match`` beside a native Column predicate and a plain ``@udf``;
the ``rocketmq`` data source with and without filter pushdown.

All in one SparkSession (local[2]), same run, same data:

- selector ``a > 5 AND TAGS IN ('TagA', 'TagB')`` over 5 M rows with a
  ``map<string,string>`` column of six properties, as
  (1) ``pyspark_udfs.selector_match`` (JVM extracts ``props['a']`` and
  ``props['TAGS']``, an Arrow UDF runs the batch kernel), (2) the same predicate
  written as native Spark Column expressions (the ceiling: no Python at all),
  (3) a plain row-at-a-time ``@udf`` calling ``Selector.matches`` on the map,
  (4) the SQL form ``rmq_selector_match(sql, props)`` that ships the whole map,
  (5) ``pyspark_udfs.native.selector_column`` (the selector translated to
  native expressions); all give the same count (checked);
- the data source over a sample store (``cq.writer.generate_sample_store``):
  ``messages`` and ``consumequeue`` tables, all rows, and a TagB query
  (``tags = 'TagB'`` / ``tags_code = <hash of TagB>``) with pushdown on and
  off (``spark.sql.python.filterPushdown.enabled``).

Run: ``.venv/bin/python -m pytest bench/bench_spark.py`` (about 3-4 minutes on 2 cores).
"""
from __future__ import annotations

import os
import sys
import tempfile

import pytest

ROWS = 5_000_000
SQL = "a > 5 AND TAGS IN ('TagA', 'TagB')"
STORE_MESSAGES = 200_000
ROUNDS = 3


@pytest.fixture(scope="module")
def spark():
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark_udfs.job import spark_session

    session = spark_session("local[2]", app_name="rmqfilter bench", progress=False,
                            conf={"spark.ui.enabled": "false", "spark.sql.shuffle.partitions": "2"})
    yield session
    session.stop()


@pytest.fixture(scope="module")
def props_df(spark):
    from pyspark.sql import functions as F

    tags = F.element_at(F.array(*[F.lit(t) for t in ("TagA", "TagB", "TagC", "TagD")]),
                        (F.col("id") % 4 + 1).cast("int"))
    props = F.create_map(
        F.lit("a"), (F.col("id") % 10).cast("string"),
        F.lit("TAGS"), tags,
        F.lit("region"), F.lit("cn-hangzhou"),
        F.lit("color"), F.lit("red"),
        F.lit("KEYS"), F.concat(F.lit("key-"), F.col("id").cast("string")),
        F.lit("UNIQ_KEY"), F.sha1(F.col("id").cast("string")),
    )
    df = spark.range(ROWS, numPartitions=4).select(props.alias("props")).cache()
    assert df.count() == ROWS
    yield df
    df.unpersist()


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


@pytest.mark.benchmark(group="spark selector_match, 5 M rows")
def test_selector_match_arrow_udf(benchmark, props_df, expected_count):
    from pyspark_udfs import selector_match

    pred = selector_match(SQL, "props")
    assert _run(benchmark, lambda: _count(props_df, pred), "ours", ROWS) == expected_count


@pytest.mark.benchmark(group="spark selector_match, 5 M rows")
def test_selector_match_sql_whole_map(benchmark, props_df, expected_count):
    from pyspark.sql import functions as F

    pred = F.expr(f"rmq_selector_match({SQL!r}, props)".replace("\\'", "''"))
    benchmark.extra_info["series"] = "sql form"
    assert _run(benchmark, lambda: _count(props_df, pred), "twin", ROWS) == expected_count


@pytest.mark.benchmark(group="spark selector_match, 5 M rows")
def test_selector_column_translated(benchmark, props_df, expected_count):
    # pyspark_udfs.native: the selector compiled to native Spark expressions.
    from pyspark_udfs.native import selector_column

    pred = selector_column(SQL, "props")
    assert _run(benchmark, lambda: _count(props_df, pred), "ours", ROWS) == expected_count


@pytest.mark.benchmark(group="spark selector_match, 5 M rows")
def test_native_column_predicate(benchmark, props_df, expected_count):
    from pyspark.sql import functions as F

    pred = (F.col("props")["a"].cast("double") > 5) & F.col("props")["TAGS"].isin("TagA", "TagB")
    assert _run(benchmark, lambda: _count(props_df, pred), "alternative", ROWS) == expected_count


@pytest.mark.benchmark(group="spark selector_match, 5 M rows")
def test_plain_python_udf(benchmark, props_df, expected_count):
    from pyspark.sql.functions import udf

    import selector

    compiled = selector.compile(SQL)
    plain = udf(lambda m: compiled.matches(m), "boolean", useArrow=False)
    assert _run(benchmark, lambda: _count(props_df, plain("props")), "alternative", ROWS) == expected_count


# ------------------------------------------------------------------ data source
@pytest.fixture(scope="module")
def sample_store():
    from cq import writer

    root = os.path.join(tempfile.gettempdir(), f"rmqfilter-bench-store-{STORE_MESSAGES}")
    marker = os.path.join(root, "rmqfilter-bench.done")
    if not os.path.exists(marker):
        import shutil

        shutil.rmtree(root, ignore_errors=True)
        writer.generate_sample_store(root, messages=STORE_MESSAGES, seed=1)
        open(marker, "w").close()
    return root


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
