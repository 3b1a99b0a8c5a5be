"""The ``rocketmq`` data source over a BatchCQ topic answers as ``Store.consume`` and ``cq.why`` do,
for every table and option (docs/reading.md#batchcq).

On ``tests/data/batch_store`` (tests/data/BATCH_STORE.md), the store RocketMQ 5.3.3's own broker
wrote: 14 batches of 55 messages in two queues. The reads run in-process (the reader's plan and its
partitions, no SparkSession), except one Spark query at the end.
"""
from __future__ import annotations

import shutil
import struct
from contextlib import closing

import pytest
from helpers import DATA, patch_file

import cq
from cq import format as fmt

STORE = DATA / "batch_store"
TOPIC = "BatchTopic"
#: Tag group of the store's consumer, a tag no tags code matches, and a SQL92 group whose layer 2 (on the
#: batch record's own properties: INNER_NUM is its message count) passes some batches only.
GROUPS = [("GID_BATCH_ZERO", {"tags": "TagA || f5a5a608"}), ("G", {"tags": "TagA"}), ("G", {"sql": "INNER_NUM > 4"})]


@pytest.fixture(scope="module")
def store():
    with closing(cq.Store(STORE)) as s:
        yield s


def _read(root, **options) -> tuple[list[dict], list]:
    """The data source's rows over the plan's partitions (in-process), and the partitions' slices."""
    import pyarrow as pa

    from pyspark_udfs import _reader
    from pyspark_udfs.datasource import ReadOptions, RocketMQReader

    opts = ReadOptions.parse({"path": str(root), "topic": TOPIC, **options})
    schema = opts.schema()
    parts = RocketMQReader(opts, schema).partitions()
    batches = [b for p in parts for b in _reader.read_partition(opts, schema, p, [])]
    rows = pa.Table.from_batches(batches, schema=_reader.to_arrow_schema(schema)).to_pylist()
    return sorted(rows, key=lambda r: (r["queue_id"], r["queue_offset"])), [s for p in parts for s in p.slices]


def _batches(store) -> dict[int, list[tuple[int, int]]]:
    """``[base, end)`` of every batch of each queue."""
    out = {}
    for q in store.queue_ids(TOPIC):
        units = store.consume_queue(TOPIC, q).units
        out[q] = [(int(b), int(b + n)) for b, n in zip(units["base_offset"], units["batch_size"])]
    return out


@pytest.mark.parametrize(("group", "sub"), GROUPS)
def test_decisions_and_both_tables_are_store_consumes_and_whys(store, group, sub):
    """One row per message in both tables; with ``decisions`` each message's columns are what ``why``
    says of it, and the counts are ``Store.consume``'s stats: ``units_scanned`` counts messages."""
    result = store.consume(TOPIC, group, **sub)
    delivered = {(m.queue_id, m.queue_offset) for m in result}
    stats = result.stats
    rows, _ = _read(STORE, group=group, decisions="true", **sub)
    assert len(rows) == stats.units_scanned == 55  # every message, as for a ConsumeQueue's units
    assert sum(r["matched_by_consume_queue"] for r in rows) == stats.passed_consume_queue
    assert sum(bool(r["matched_by_commit_log"]) for r in rows) == stats.passed_commit_log
    assert sum(r["delivered"] for r in rows) == stats.delivered == len(delivered)
    assert stats.passed_commit_log == stats.delivered + stats.client_filtered  # all counted in messages
    for r in rows:
        why = cq.why(store, TOPIC, group, queue_id=r["queue_id"], queue_offset=r["queue_offset"], **sub)
        assert (r["delivered"], r["matched_by_consume_queue"], r["matched_by_commit_log"]) == (
            why.delivered, why.dropped_by != "consume_queue",
            None if why.dropped_by == "consume_queue" else why.dropped_by != "commit_log"), r["queue_offset"]
        assert (r["born_timestamp"] is None) == (why.dropped_by == "consume_queue")  # record columns where layer 2 read it
    # without decisions: the delivered messages, in both tables
    for table in ("messages", "consumequeue"):
        got, _ = _read(STORE, group=group, table=table, **sub)
        assert {(r["queue_id"], r["queue_offset"]) for r in got} == delivered
    cq_rows, _ = _read(STORE, group=group, table="consumequeue", decisions="true", **sub)
    assert [{k: r[k] for k in cq_rows[0] if k in r} for r in rows] == [
        {k: v for k, v in r.items() if k in rows[0]} for r in cq_rows]
    assert {(r["ext_address"], r["filter_bitmap"]) for r in cq_rows} == {(None, None)}  # a BatchCQ keeps no ext units


@pytest.mark.parametrize("name", ["filters_for_tests:tag_a", "filters_for_tests:queue0_batch"])
def test_a_custom_filter_sees_each_message_of_a_batch(store, name):
    """A custom filter (per message, or per batch of rows) judges each message of a batch, not the batch
    record: the data source keeps what ``Store.consume`` with that filter keeps, with ``decisions`` too."""
    result = store.consume(TOPIC, "GID_BATCH_ZERO", tags="TagA || f5a5a608", message_filter=name)
    want = [(m.queue_id, m.queue_offset) for m in result]
    assert 0 < len(want) < 16 and result.stats.filter_rejected > 0
    rows, _ = _read(STORE, group="GID_BATCH_ZERO", tags="TagA || f5a5a608", filter=name)
    assert [(r["queue_id"], r["queue_offset"]) for r in rows] == want
    rows, _ = _read(STORE, group="GID_BATCH_ZERO", tags="TagA || f5a5a608", filter=name, decisions="true")
    assert [(r["queue_id"], r["queue_offset"]) for r in rows if r["delivered"]] == want


def test_layer2_in_spark_reads_the_batch_records_own_properties(store):
    """``layer2=spark``: the consumequeue table hands Spark the properties layer 2 judges (the batch
    record's), so the selector over them gives the reader's layer 2; the messages table, whose
    properties are each message's own, refuses it naming the topic."""
    import selector

    sub = {"sql": "INNER_NUM > 4"}
    want, _ = _read(STORE, group="G", table="consumequeue", decisions="true", **sub)
    rows, _ = _read(STORE, group="G", table="consumequeue", decisions="true", layer2="spark", **sub)
    sel = selector.compile(sub["sql"])
    assert [(r["matched_by_consume_queue"], r["reached_commit_log"] and sel.matches(dict(r["properties"])))
            for r in rows] == [(w["matched_by_consume_queue"], bool(w["matched_by_commit_log"])) for w in want]
    assert {r["properties"] is None for r in rows} == {False}  # a BatchCQ's layer 1 passes every batch for SQL92
    reached, _ = _read(STORE, group="G", table="consumequeue", layer2="spark", **sub)
    assert len(reached) == 55
    with pytest.raises(ValueError, match="BatchTopic.*BatchCQ.*layer2=reader"):
        _read(STORE, group="G", layer2="spark", **sub)


@pytest.mark.parametrize("units", [1, 4, 7])
def test_partitions_never_split_a_batch(store, units):
    """Small partitions start at batch starts only, so every message is read once, its batch whole."""
    batches = _batches(store)
    rows, slices = _read(STORE, partition_units=str(units), min_partitions="1")
    assert len(slices) > len(batches)  # several slices per queue
    starts = {q: {b for b, _ in bs} | {bs[-1][1]} for q, bs in batches.items()}
    assert all(s.start in starts[s.queue_id] and s.end in starts[s.queue_id] for s in slices)
    assert [(r["queue_id"], r["queue_offset"]) for r in rows] == [
        (q, o) for q in sorted(batches) for b, e in batches[q] for o in range(b, e)]


def test_a_read_from_inside_a_batch_gets_the_whole_batch(tmp_path, store):
    """A pull at an offset inside a batch gets the whole batch (RocketMQ 5.3.3's BatchConsumeQueue finds
    the unit holding it): ``Store.consume`` from there and the data source's ``from_committed`` start at
    the batch's first message."""
    (b, e), = [(b, e) for b, e in _batches(store)[0] if b < 5 < e]
    got = [m.queue_offset for m in store.consume(TOPIC, "G", tags="*", ranges={0: (5, None)}, queue_ids=[0])]
    assert got[:e - b] == list(range(b, e)) and got == sorted(set(got))
    root = tmp_path / "batch_store"
    shutil.copytree(STORE, root)
    path = root / "config" / "lmqConsumerOffset.json"  # (an enableLmq broker keeps its offsets there)
    path.write_text(path.read_text().replace('"BatchTopic@GID_BATCH_ZERO":{0:17,1:19', '"BatchTopic@G":{0:5,1:19'))
    with closing(cq.Store(root)) as s:
        backlog = [(m.queue_id, m.queue_offset) for m in s.consume(
            TOPIC, "G", tags="*", ranges={0: (5, None), 1: (19, None)})]
        assert any(q == 0 and o < 5 for q, o in backlog)  # the batch's messages before the committed offset
    rows, slices = _read(root, group="G", tags="*", from_committed="true")
    assert min(s.start for s in slices if s.queue_id == 0) == b
    assert [(r["queue_id"], r["queue_offset"]) for r in rows] == backlog


def _corrupt_inner_body(root, store, queue_id=1, unit=1):
    """Make the first inner message of a batch record claim 1 MiB (its body CRC mended, so the CommitLog
    still ends where it did): ``(path, byte, batch)`` of the bad message and the batch's offsets."""
    from cq.kernels.layout import layout
    from cq.readers.batchcq import _body_position

    u = store.consume_queue(TOPIC, queue_id).units[unit]
    with closing(cq.Store(root)) as s:
        msg = s.commit_log.read_message(int(u["commit_log_offset"]))
    at = (msg._file_offset or 0) + _body_position(msg)
    body = struct.pack(">i", 1 << 20) + msg.body[4:]
    patch_file(msg._path, at, body[:4])
    patch_file(msg._path, (msg._file_offset or 0) + layout(fmt)["REC_BODY_CRC"], struct.pack(">i", fmt.body_crc(body)))
    return msg._path, at, (int(u["base_offset"]), int(u["base_offset"] + u["batch_size"]))


@pytest.mark.parametrize(("table", "group"), [("messages", None), ("messages", GROUPS[0]),
                                              ("consumequeue", GROUPS[0])])
def test_on_corrupt_skip_drops_the_corrupt_batch_only(tmp_path, store, table, group):
    """A batch record that does not split: without ``on_corrupt=skip`` the read fails naming its file
    and byte, as ``Store.consume`` does; with it, that batch's messages are left out and reported
    (queue offsets, file and byte), every other message read as before."""
    from pyspark_udfs.datasource import skipped_ranges

    root = tmp_path / "batch_store"
    shutil.copytree(STORE, root)
    path, at, (b, e) = _corrupt_inner_body(root, store)
    sub = {} if group is None else {"group": group[0], **group[1]}
    with pytest.raises(cq.StoreFormatError) as err:
        _read(root, table=table, **sub)
    assert (err.value.path, err.value.offset) == (path, at)
    before, _ = _read(STORE, table=table, **sub)
    rows, _ = _read(root, table=table, on_corrupt="skip", skipped_log=str(tmp_path / "skipped"), **sub)
    assert rows == [r for r in before if not (r["queue_id"] == 1 and b <= r["queue_offset"] < e)]
    assert [(r["queue_id"], r["start"], r["end"], r["path"], r["offset"]) for r in
            skipped_ranges(tmp_path / "skipped")] == [(1, b, e, path, at)]


def test_pushed_down_tags_do_not_prune_batches_but_tags_codes_do():
    """A pushed-down ``tags = 'TagA'`` must not drop a batch whose unit's tags code (0) is not TagA's
    hash: its messages' own tags are TagA (Spark re-checks the tags column); ``tags_code = ...`` is the
    unit's column, so it prunes by it."""
    from pyspark.sql.datasource import EqualTo

    from pyspark_udfs import _reader
    from pyspark_udfs.datasource import ReadOptions, RocketMQPushdownReader

    opts = ReadOptions.parse({"path": str(STORE), "topic": TOPIC, "pushdown": "true"})
    schema = opts.schema()

    def rows(*filters):
        reader = RocketMQPushdownReader(opts, schema)
        list(reader.pushFilters(list(filters)))
        return [r for p in reader.partitions() for b in _reader.read_partition(opts, schema, p, reader.tags_code_sets)
                for r in b.to_pylist()]

    tagged = [r for r in rows(EqualTo(("tags",), "TagA")) if r["tags"] == "TagA"]
    assert len(tagged) == sum(1 for r in rows() if r["tags"] == "TagA") > 0
    assert rows(EqualTo(("tags_code",), cq.tags_code("TagA"))) == []
    assert len(rows(EqualTo(("tags_code",), 0))) == 55


def test_on_corrupt_skip_drops_a_queue_whose_units_do_not_follow(tmp_path):
    """A BatchConsumeQueue unit whose base offset does not follow the unit before it: the queue cannot be
    read (as for ``Store.consume``), so ``on_corrupt=skip`` reports the whole queue skipped, naming the
    unit's file and byte, and reads the other queue as before."""
    from pyspark_udfs.datasource import skipped_ranges

    root = tmp_path / "batch_store"
    shutil.copytree(STORE, root)
    path = min((root / fmt.BATCH_CONSUME_QUEUE_DIR / TOPIC / "0").iterdir())
    patch_file(path, fmt.BCQ_STORE_UNIT_SIZE + 28, struct.pack(">q", 1000))  # the second unit's base offset
    with pytest.raises(cq.StoreFormatError, match="does not follow"):
        _read(root)
    before, _ = _read(STORE)
    rows, _ = _read(root, on_corrupt="skip", skipped_log=str(tmp_path / "skipped"))
    assert rows == [r for r in before if r["queue_id"] == 1]
    assert [(r["queue_id"], r["end"], r["path"], r["offset"]) for r in skipped_ranges(tmp_path / "skipped")] == [
        (0, None, str(path), fmt.BCQ_STORE_UNIT_SIZE)]


@pytest.mark.spark
def test_spark_reads_a_batch_cq_topic_as_store_consume_counts(spark, store):
    """One Spark query: the scan job's counting read (consumequeue table, decisions, layer2=spark with
    the selector as a native expression) gives ``Store.consume``'s counts, in messages."""
    from pyspark.sql import functions as F

    from pyspark_udfs.native import selector_column

    sql = "INNER_NUM > 4"
    result = store.consume(TOPIC, "G", sql=sql)
    list(result)  # (the stats fill as the messages are handed out)
    stats = result.stats
    df = (spark.read.format("rocketmq").option("topic", TOPIC).option("group", "G").option("sql", sql)
          .option("table", "consumequeue").option("decisions", "true").option("layer2", "spark")
          .load(str(STORE)))
    matched = F.coalesce(F.when(F.col("reached_commit_log"), selector_column(sql, "properties")), F.lit(False))
    row = df.agg(F.count(F.lit(1)).alias("n"), F.sum(F.col("matched_by_consume_queue").cast("long")).alias("cq"),
                 F.sum(matched.cast("long")).alias("cl")).first()
    assert (row["n"], row["cq"], row["cl"]) == (stats.units_scanned, stats.passed_consume_queue, stats.passed_commit_log)
    assert 0 < stats.passed_commit_log < 55
