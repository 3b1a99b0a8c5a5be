"""Spark over a live store: each query reads the cut it planned, whatever the workers cached
(docs/live.md); the streaming source reads each queue exactly once across restarts."""
from __future__ import annotations

import collections

import pytest
from live_support import live_writer, stream_to_the_end, stream_until_stopped

import cq
from cq.writer.writer import StoreWriter

pytestmark = pytest.mark.spark

TOPIC, GROUP, SQL = "LiveTopic", "GID_RED", "color = 'red'"


def _append(w: StoreWriter, n: int, queues: int, start: dict) -> None:
    for i in range(n):
        q = i % queues
        seq = start.get(q, 0)
        start[q] = seq + 1
        w.append(TOPIC, f"{q}#{seq}".encode(), queue_id=q, tags="TagA" if seq % 3 else "TagB",
                 properties={"seq": str(seq), "color": "red" if seq % 2 == 0 else "blue"})
    w.flush()


def _count(spark, root, **options) -> int:
    reader = spark.read.format("rocketmq").option("topic", TOPIC)
    for k, v in options.items():
        reader = reader.option(k, v)
    return reader.load(str(root)).count()


def test_one_session_follows_a_growing_store(spark, tmp_path):
    root = tmp_path / "store"
    seqs: dict = {}
    sizes = {"commit_log_file_size": 16 << 10, "consume_queue_file_size": 20 * 100}
    with StoreWriter(root, enable_ext=True, **sizes) as w:
        w.register_group(TOPIC, GROUP, SQL)
        seen = []
        for step, (n, queues) in enumerate([(300, 2), (900, 3), (1500, 5)]):
            _append(w, n, queues, seqs)
            broker = cq.Store(root)  # the broker's answer for this moment
            want_all = sum(1 for _ in broker.consume(TOPIC, "G", tags="*"))
            want_sql = sum(1 for _ in broker.consume(TOPIC, GROUP, sql=SQL))
            want_tags = sum(1 for _ in broker.consume(TOPIC, "GT", tags="TagB"))
            got = (_count(spark, root), _count(spark, root, group=GROUP, sql=SQL),
                   _count(spark, root, group="GT", tags="TagB"),
                   _count(spark, root, table="consumequeue", group=GROUP, sql=SQL))
            assert got == (want_all, want_sql, want_tags, want_sql), step
            seen.append(got[0])
    assert seen == [300, 1200, 2700]


def test_queries_while_a_writer_appends_read_whole_cuts(spark, tmp_path):
    root = tmp_path / "store"
    counts = []
    with live_writer(root, 5.0, rate=500) as proc:
        while proc.poll() is None or len(counts) < 2:  # the second query may start after the writer stops
            rows = (spark.read.format("rocketmq").option("topic", TOPIC).load(str(root))
                    .select("queue_id", "queue_offset", "properties").collect())
            by_queue = collections.defaultdict(list)
            for r in rows:
                assert int(r["properties"]["seq"]) == r["queue_offset"]
                by_queue[r["queue_id"]].append(r["queue_offset"])
            for q, offs in by_queue.items():
                assert sorted(offs) == list(range(len(offs))), q  # a prefix of each queue: no gap
            counts.append(len(rows))
    assert counts == sorted(counts) and counts[-1] > counts[0]
    # afterwards: everything the writer wrote, in the same session (no stale worker cache)
    assert _count(spark, root) == sum(v for k, v in proc.counts.items() if k.startswith(TOPIC + "/"))


def _stream(spark, root, **options):
    reader = spark.readStream.format("rocketmq").option("topic", TOPIC)
    for k, v in options.items():
        reader = reader.option(k, v)
    return reader.load(str(root))


def _snapshot(root) -> dict:
    import os

    return {os.path.join(d, f): (os.stat(os.path.join(d, f)).st_size, os.stat(os.path.join(d, f)).st_mtime_ns)
            for d, _, files in os.walk(root) for f in files}


def test_stream_is_exactly_once_across_a_restart_while_a_writer_appends(spark, tmp_path):
    root, out, ck = tmp_path / "store", str(tmp_path / "out"), str(tmp_path / "ck")
    options = {"group": GROUP, "sql": SQL, "startingOffsets": "earliest", "maxUnitsPerTrigger": "60"}
    cols = ["queue_id", "queue_offset", "properties", "body"]
    with live_writer(root, 4.0, rate=250):
        # stopped mid-run: the writer goes on
        stream_until_stopped(_stream(spark, root, **options).select(*cols), out, ck, every="200 milliseconds")
        first = spark.read.parquet(out).count()
    # restarted from the checkpoint once the writer is done: it goes on where it stopped, to the end
    # (in one batch: the rate limit may change between runs)
    options["maxUnitsPerTrigger"] = "100000"
    stream_to_the_end(_stream(spark, root, **options).select(*cols), out, ck)
    rows = spark.read.parquet(out).collect()
    got = [(r["queue_id"], r["queue_offset"]) for r in rows]
    assert len(got) == len(set(got)) and 0 < first < len(got)  # no duplicates; both runs wrote
    batch = {(r["queue_id"], r["queue_offset"]) for r in spark.read.format("rocketmq").option("topic", TOPIC)
             .option("group", GROUP).option("sql", SQL).load(str(root)).collect()}
    assert set(got) == batch  # no gaps: the union is the batch read of the same range
    assert {q for q, _ in got} == {0, 1, 2, 3}  # queues that appeared mid-run were picked up
    assert all(r["properties"]["color"] == "red" for r in rows)
    assert sum(1 for _ in cq.Store(root).consume(TOPIC, GROUP, sql=SQL)) == len(got)


def test_stream_bad_starting_offsets_fail_naming_the_queue_and_write_nothing(spark, tmp_path):
    from pyspark.errors import PySparkException
    from pyspark.errors.exceptions.captured import StreamingQueryException

    root = tmp_path / "store"
    with StoreWriter(root) as w:
        _append(w, 10, 2, {})
    before = _snapshot(root)
    for offsets, message in [('{"LiveTopic": {"9": 0}}', "queue LiveTopic/9 does not exist"),
                             ('{"LiveTopic": {"0": 77}}', "offset 77 of queue LiveTopic/0 is outside")]:
        with pytest.raises((StreamingQueryException, PySparkException, ValueError)) as err:
            q = (_stream(spark, root, startingOffsets=offsets).writeStream.format("noop")
                 .option("checkpointLocation", str(tmp_path / f"ck{len(offsets)}")).start())
            try:
                q.awaitTermination(60)
            finally:
                q.stop()
        assert message in str(err.value)
    assert _snapshot(root) == before


@pytest.mark.parametrize("deleted, message", [
    ("store", "the store directory no longer exists"),
    ("topic", "topic 'LiveTopic' has no consume queues any more"),
])
def test_stream_over_a_store_deleted_mid_stream_fails_naming_it(spark, tmp_path, deleted, message):
    import os
    import shutil
    import time

    from pyspark.errors.exceptions.captured import StreamingQueryException

    root = tmp_path / "store"
    with StoreWriter(root) as w:
        _append(w, 20, 2, {})
    q = (_stream(spark, root, startingOffsets="earliest").writeStream.format("noop")
         .option("checkpointLocation", str(tmp_path / "ck")).trigger(processingTime="200 milliseconds").start())
    try:
        deadline = time.monotonic() + 60
        while not [p for p in q.recentProgress if p["numInputRows"] > 0] and time.monotonic() < deadline:
            time.sleep(0.2)
        assert sum(p["numInputRows"] for p in q.recentProgress) == 20
        target = root if deleted == "store" else root / "consumequeue" / "LiveTopic"
        gone = tmp_path / "gone"
        os.rename(target, gone)  # at once: shutil.rmtree alone removes the topic's queues before the directory
        shutil.rmtree(gone)
        with pytest.raises(StreamingQueryException) as err:
            q.awaitTermination(60)
    finally:
        q.stop()
    assert message in str(err.value) and str(root) in str(err.value)
