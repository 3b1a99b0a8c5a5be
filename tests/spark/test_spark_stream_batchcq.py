"""The streaming source over a BatchCQ topic (docs/live.md#batchcq-topics): micro-batches end on batch
boundaries and partitions never split a batch, so with a ``maxUnitsPerTrigger`` smaller than the
batches every message comes out once, as the batch source and ``Store.consume`` give them, across a
restart from the checkpoint while batches arrive, over one store and over several."""
from __future__ import annotations

import json
from contextlib import closing
from pathlib import Path

import pytest
from live_support import BatchCQWriter, stream_to_the_end

import cq

pytestmark = pytest.mark.spark

TOPIC = "T"
KEY = ["queue_id", "queue_offset"]


def _write(root, sizes: dict[int, list[int]]) -> BatchCQWriter:
    w = BatchCQWriter(root, TOPIC, queues=len(sizes))
    for q, ns in sizes.items():
        for n in ns:
            w.append(q, n)
    return w


def _consumed(root) -> list[tuple[int, int, bytes]]:
    with closing(cq.Store(root)) as store:
        return sorted((m.queue_id, m.queue_offset, m.body) for m in store.consume(TOPIC, "G", tags="*"))


def _boundaries(root) -> dict[str, set[int]]:
    with closing(cq.Store(root)) as store:
        out = {}
        for q in store.queue_ids(TOPIC):
            units = store.consume_queue(TOPIC, q).units
            out[str(q)] = {int(b) for b in units["base_offset"]} | {int(units["base_offset"][-1] +
                                                                        units["batch_size"][-1])}
        return out


def _rows(reader, parts) -> list[dict]:
    return [r for p in parts for b in reader.read(p) for r in b.to_pylist()]


def test_micro_batches_over_two_brokers_read_each_message_once_as_the_batch_source(tmp_path):
    """In-process (no SparkSession): a budget of 3 messages and partitions of 2 would cut batches of up
    to 7 everywhere; a starting offset inside a batch gives that batch whole, as the broker does."""
    from pyspark_udfs import _reader
    from pyspark_udfs.datasource import RocketMQDataSource

    sizes = {"east": {0: [3, 5, 1, 7], 1: [4, 6]}, "west": {0: [2, 7, 2]}}
    roots = [tmp_path / b for b in sizes]
    for root, s in zip(roots, sizes.values()):
        _write(root, s)
    common = {"paths": json.dumps([str(r) for r in roots]), "topic": TOPIC, "partition_units": "2",
              "min_partitions": "4"}
    src = RocketMQDataSource({**common, "maxUnitsPerTrigger": "3",
                              "startingOffsets": json.dumps({"brokers": {"east": {TOPIC: {"0": 5}}}})})
    reader = src.streamReader(src.schema())
    got = []
    try:
        start = reader.initialOffset()
        assert start["brokers"]["east"][TOPIC]["0"] == 3  # 5 is inside the batch [3, 8): from its start
        for _ in range(50):
            end = reader.latestOffset(start, reader.getDefaultReadLimit())
            if end == start:
                break
            for b, root in zip(sizes, roots):
                bounds = _boundaries(root)
                assert all(o in bounds[q] for q, o in end["brokers"][b][TOPIC].items()), end
            got += _rows(reader, reader.partitions(start, end))
            start = end
    finally:
        reader.stop()
    keys = sorted((r["broker"], r["queue_id"], r["queue_offset"]) for r in got)
    assert len(keys) == len(set(keys))
    batch = RocketMQDataSource(common)  # the batch source's read: the same messages
    plan = batch.reader(batch.schema())
    rows = [r for p in plan.partitions() for b in _reader.read_partition(plan.options, plan.schema, p, [])
            for r in b.to_pylist()]
    want = sorted((r["broker"], r["queue_id"], r["queue_offset"]) for r in rows)
    assert keys == [k for k in want if not (k[:2] == ("east", 0) and k[2] < 3)]
    assert want == sorted((b, q, o) for b, root in zip(sizes, roots) for q, o, _ in _consumed(root))


def test_a_stream_restarted_from_its_checkpoint_while_batches_arrive_is_exactly_once(spark, tmp_path):
    """Trigger.AvailableNow with maxUnitsPerTrigger=4 over batches of up to 6 messages, then more
    batches and a restart from the checkpoint: each message once, the offsets in the checkpoint all
    batch boundaries."""
    root, out, ck = tmp_path / "store", str(tmp_path / "out"), str(tmp_path / "ck")
    w = _write(root, {0: [3, 6], 1: [5]})

    def run() -> None:
        df = (spark.readStream.format("rocketmq").option("topic", TOPIC).option("startingOffsets", "earliest")
              .option("maxUnitsPerTrigger", "4").load(str(root)))
        stream_to_the_end(df.select(*KEY, "body"), out, ck, timeout=120)

    run()
    for q, n in ((1, 6), (0, 2)):
        w.append(q, n)
    run()
    rows = sorted((r["queue_id"], r["queue_offset"], bytes(r["body"])) for r in spark.read.parquet(out).collect())
    assert rows == _consumed(root)
    bounds = _boundaries(root)
    logged = [json.loads(f.read_text().splitlines()[-1]) for f in Path(ck, "offsets").iterdir()
              if f.name.isdigit()]
    assert len(logged) == 3  # the budget cut the reads into micro-batches: two, then one after the restart
    assert all(o in bounds[q] for offsets in logged for q, o in offsets[TOPIC].items()), logged
