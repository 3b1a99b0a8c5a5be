"""The ``rocketmq`` streaming source beside the batch read of the same units.

One SparkSession (local[2]), one sample store (``cq.writer.sample.generate_sample_store``,
``STORE_MESSAGES`` messages, topic ``SampleTopic``), the broker's filter for
``GID_PRIORITY`` in the reader, all rows to a ``noop`` sink:

- the stream: ``readStream`` from ``startingOffsets=earliest`` with
  ``maxUnitsPerTrigger=UNITS_PER_BATCH`` and ``Trigger.AvailableNow`` (a fresh
  checkpoint per round), so each round is ``ceil(units / UNITS_PER_BATCH)``
  micro-batches; each micro-batch's rows/s (Spark's ``processedRowsPerSecond``,
  rows over the batch's whole duration, planning included) goes to
  ``extra_info["batch_rows_per_s"]`` and its median duration to ``batch_seconds``;
- the batch read of the same units: ``spark.read`` with the same options, one job.

Both count the same rows (checked). Run:
``.venv/bin/python -m pytest bench/bench_stream.py`` (about 2 minutes on 2 cores).
"""
from __future__ import annotations

import os
import statistics
import tempfile

import pytest

STORE_MESSAGES = int(os.environ.get("RMQFILTER_BENCH_STREAM_MESSAGES", "200000"))
UNITS_PER_BATCH = 20_000
TOPIC, GROUP = "SampleTopic", "GID_PRIORITY"
SQL = "priority >= 4 AND region IN ('cn-hangzhou', 'cn-beijing')"
ROUNDS = 2
BENCH_GROUP = f"rocketmq stream vs batch, {TOPIC} of a {STORE_MESSAGES:,}-message store, {GROUP}"


@pytest.fixture(scope="module")
def store(cached_sample_store):
    return cached_sample_store(STORE_MESSAGES, 1)


@pytest.fixture(scope="module")
def units(store) -> int:
    import cq

    return sum(hi - lo for _, _, lo, hi in cq.Store(store).cut(TOPIC).queues)


@pytest.fixture(scope="module")
def expected(spark, store) -> int:
    import pyspark_udfs

    pyspark_udfs.register(spark)
    return _batch(spark, store)


def _options(reader):
    return reader.format("rocketmq").option("topic", TOPIC).option("group", GROUP).option("sql", SQL)


def _batch(spark, store) -> int:
    return _options(spark.read).load(store).count()


def _stream(spark, store, batches: list) -> int:
    ck = tempfile.mkdtemp(prefix="rmqfilter-bench-ck-")
    q = (_options(spark.readStream).option("startingOffsets", "earliest")
         .option("maxUnitsPerTrigger", str(UNITS_PER_BATCH)).load(store)
         .writeStream.format("noop").option("checkpointLocation", ck).trigger(availableNow=True).start())
    q.awaitTermination()
    progress = [p for p in q.recentProgress if p["numInputRows"] > 0]
    batches.append([(p["numInputRows"], p["processedRowsPerSecond"], p["durationMs"]["triggerExecution"])
                    for p in progress])
    return sum(p["numInputRows"] for p in progress)


@pytest.mark.benchmark(group=BENCH_GROUP)
def test_stream_micro_batches(benchmark, spark, store, units, expected):
    batches: list = []
    benchmark.extra_info.update(items=units, role="ours")
    rows = benchmark.pedantic(lambda: _stream(spark, store, batches), rounds=ROUNDS, iterations=1)
    assert rows == expected
    per_batch = [rate for run in batches for _, rate, _ in run]
    seconds = [ms / 1000 for run in batches for _, _, ms in run]
    benchmark.extra_info.update(micro_batches=len(batches[-1]), units_per_batch=UNITS_PER_BATCH,
                                batch_rows_per_s=round(statistics.median(per_batch)),
                                batch_seconds=round(statistics.median(seconds), 3), rows=expected)


@pytest.mark.benchmark(group=BENCH_GROUP)
def test_batch_read_same_units(benchmark, spark, store, units, expected):
    benchmark.extra_info.update(items=units, role="alternative", rows=expected)
    assert benchmark.pedantic(lambda: _batch(spark, store), rounds=ROUNDS, iterations=1, warmup_rounds=1) == expected
