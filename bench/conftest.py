"""Side-by-side reporting for the benchmarks.

A benchmark says what it measured through ``extra_info``:

- ``items``: how many keys/rows/units one round processes (for items/s);
- ``bytes``: how many bytes one round reads (for GB/s), optional;
- ``role``: ``"ours"`` or ``"alternative"`` — the alternative run in the same
  session for comparison (numpy, mmh3, the pure-Python twin, ...).

At the end of the run a table per benchmark group prints the median
throughput of each and the ratio of ours to the best alternative.
"""
from __future__ import annotations

import os
import shutil
import sys
import tempfile

import pytest

from cq.writer.sample import generate_sample_store

os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)


def _cached_sample_store(messages: int, seed: int) -> str:
    """A sample store (``generate_sample_store``) under the temp dir, written once and reused
    by every benchmark that asks for the same size and seed (a marker says it is complete)."""
    root = os.path.join(tempfile.gettempdir(), f"rmqfilter-bench-sample-{messages}-{seed}")
    marker = os.path.join(root, "rmqfilter-bench.done")
    if not os.path.exists(marker):
        shutil.rmtree(root, ignore_errors=True)
        generate_sample_store(root, messages=messages, seed=seed)
        open(marker, "w").close()
    return root


@pytest.fixture(scope="session")
def cached_sample_store():
    """``cached_sample_store(messages, seed)``: the path of a sample store shared by the benchmarks."""
    return _cached_sample_store


@pytest.fixture(scope="session")
def spark():
    """One local[2] SparkSession for every Spark benchmark of the run."""
    from pyspark_udfs.job import spark_session

    session = spark_session("local[2]", app_name="rmqfilter bench", progress=False,
                            conf={"spark.sql.shuffle.partitions": "2"})
    yield session
    session.stop()


def _props_frame(spark, rows: int):
    """``rows`` cached rows of a six-entry ``props`` map, the Spark selector benchmarks' input:
    ``a`` 0..9, ``TAGS`` TagA..TagD, ``region`` cn-beijing (every third) or cn-hangzhou,
    ``color`` blue (every fifth) or red, plus a unique ``KEYS`` and ``UNIQ_KEY``."""
    from pyspark.sql import functions as F

    tags = F.element_at(F.array(*[F.lit(t) for t in ("TagA", "TagB", "TagC", "TagD")]),
                        (F.col("id") % 4 + 1).cast("int"))
    props = F.create_map(
        F.lit("a"), (F.col("id") % 10).cast("string"),
        F.lit("TAGS"), tags,
        F.lit("region"), F.when(F.col("id") % 3 == 0, "cn-beijing").otherwise("cn-hangzhou"),
        F.lit("color"), F.when(F.col("id") % 5 == 0, "blue").otherwise("red"),
        F.lit("KEYS"), F.concat(F.lit("key-"), F.col("id").cast("string")),
        F.lit("UNIQ_KEY"), F.sha1(F.col("id").cast("string")),
    )
    df = spark.range(rows, numPartitions=4).select(props.alias("props")).cache()
    assert df.count() == rows
    return df


@pytest.fixture(scope="module")
def props_df(spark, request):
    """The Spark selector benchmarks' input, ``ROWS`` rows (the requesting module's constant), cached."""
    df = _props_frame(spark, request.module.ROWS)
    yield df
    df.unpersist()


def _rate(value: float) -> str:
    for unit, scale in (("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if value >= scale:
            return f"{value / scale:.2f} {unit}"
    return f"{value:.1f} "


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    session = getattr(config, "_benchmarksession", None)
    if session is None or not session.benchmarks:
        return
    groups: dict[str, list] = {}
    for bench in session.benchmarks:
        if bench.extra_info.get("items"):
            groups.setdefault(bench.group or bench.name, []).append(bench)
    if not groups:
        return
    write = terminalreporter.write_line
    write("")
    write("side by side (median per round; ratio = ours / best alternative)")
    for group, benches in sorted(groups.items()):
        write(f"[{group}]")
        rates = {}
        for bench in benches:
            median = bench.stats.median
            items = bench.extra_info["items"]
            rate = items / median if median else float("inf")
            rates[bench.name] = (bench.extra_info.get("role", "ours"), rate)
            extra = ""
            if bench.extra_info.get("bytes"):
                extra = f", {bench.extra_info['bytes'] / median / 1e9:.2f} GB/s"
            write(f"  {bench.name:<60} {_rate(rate)}items/s ({median * 1e9 / items:.2f} ns/item{extra})")
        ours = [r for role, r in rates.values() if role == "ours"]
        alts = [r for role, r in rates.values() if role == "alternative"]
        if ours and alts:
            write(f"  ratio ours/alternative: {max(ours) / max(alts):.1f}x")
