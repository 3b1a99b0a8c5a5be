"""Stores whose consume queues and metadata are in RocksDB (``storeType=defaultRocksDB``).

``tests/data/rocksdb_store`` is what RocketMQ's own broker (the version in
``tests/data/rocksdb_store.json``) wrote with ``storeType=defaultRocksDB``: 400 messages of the
filters scenario's kinds over three queues, a tag group ``GID_R_TAG`` that received and committed
the first 300 and stopped (tests/data/ROCKSDB_STORE.md). What rmqfilter reads from it must be the
broker's queue ends, what the group received, and its committed offsets
(docs/formats.md#rocksdb-consume-queue); and reading it changes no file of the store.
"""
from __future__ import annotations

import json
import os
import shutil
import struct
import sys
import tempfile
from contextlib import closing

import pytest
from helpers import DATA, tree_snapshot

import cq
import rmqfilter
from cq import format as fmt
from cq.readers import rocksdb

STORE = DATA / "rocksdb_store"
FACTS = json.loads((DATA / "rocksdb_store.json").read_text())
TOPIC, GROUP, TAGS = FACTS["topic"], FACTS["group"], FACTS["tags"]


def _links_left() -> set[str]:
    """This process's directories of links (the other test pass may open databases at the same time)."""
    mine = f"{rocksdb.LINKS_PREFIX}{os.getpid()}-"
    return {n for n in os.listdir(tempfile.gettempdir()) if n.startswith(mine)}


@pytest.fixture(scope="module")
def store():
    s = cq.Store(STORE)
    yield s
    s.close()


def test_the_layout_is_rocksdb_queues_and_metadata(store):
    layout = store.layout
    assert (layout.commit_log, layout.consume_queues, layout.metadata) == ("classic", "rocksdb", "json+rocksdb")
    assert set(layout.rocksdb_tables) == {"consumerOffsets", "subscriptionGroups", "topics"}


def test_queue_ends_are_the_brokers(store):
    assert store.topics() == [TOPIC]
    assert store.queue_ids(TOPIC) == [q["queue_id"] for q in FACTS["queues"]]
    for q in FACTS["queues"]:
        queue = store.consume_queue(TOPIC, q["queue_id"])
        assert (queue.min_offset, queue.max_offset) == (q["min_offset"], q["max_offset"])


def test_consume_gives_what_the_group_received_and_its_committed_offsets(store):
    committed = store.committed_offsets(GROUP, TOPIC)
    result = store.consume(TOPIC, GROUP, tags=TAGS)
    got = sorted([m.queue_id, m.queue_offset, m.properties["UNIQ_KEY"]] for m in result
                 if m.queue_offset < committed[m.queue_id])
    assert got == FACTS["received"]
    assert result.stats.commit_log_missing == 0 and result.stats.units_scanned == sum(
        q["max_offset"] - q["min_offset"] for q in FACTS["queues"])
    # every committed offset is where the group stopped: one past the last unit it was given
    assert committed == {q["queue_id"]: 100 for q in FACTS["queues"]}


def test_every_unit_points_at_its_own_record(store):
    for q in FACTS["queues"]:
        queue = store.consume_queue(TOPIC, q["queue_id"])
        for offset, unit in enumerate(queue.read().tolist()):
            msg = store.commit_log.read_message(unit[0])
            assert (msg.topic, msg.queue_id, msg.queue_offset, msg.store_size) == (TOPIC, q["queue_id"], offset, unit[1])


def test_backlog_counts_from_the_rocksdb_offsets(store):
    b = cq.backlog(store, TOPIC, GROUP, tags=TAGS)
    delivered = [(m.queue_id, m.queue_offset) for m in store.consume(TOPIC, GROUP, tags=TAGS)]
    assert sorted(q.queue_id for q in b.queues) == store.queue_ids(TOPIC)
    for q, facts in zip(b.queues, FACTS["queues"]):
        left = sum(1 for queue_id, offset in delivered if queue_id == q.queue_id and offset >= 100)
        assert (q.committed_offset, q.max_offset, q.will_receive) == (100, facts["max_offset"], left) and left


def test_metadata_tables_are_read_from_rocksdb(store):
    assert store.topic_configs()[TOPIC]["readQueueNums"] == len(FACTS["queues"])
    assert store.subscription_groups()[GROUP]["groupName"] == GROUP
    with pytest.raises(cq.UnsupportedLayoutError, match="consumerOffsets"):
        store.config_path("consumerOffset.json")  # the JSON file is stale: never read as current


def test_inspect_names_the_mode_and_the_databases(capsys):
    assert rmqfilter.main(["inspect", str(STORE)]) == 0
    out = capsys.readouterr().out
    assert "consume queues RocksDB; metadata RocksDB beside stale JSON files" in out
    assert "Committed offsets (RocksDB config/consumerOffsets" in out and f"{GROUP} on {TOPIC}: 0:100" in out


def test_reading_changes_no_file_and_leaves_no_links():
    before, links = tree_snapshot(STORE), _links_left()
    with closing(cq.Store(STORE)) as s:
        list(s.consume(TOPIC, GROUP, tags=TAGS))
        s.committed_offsets(GROUP, TOPIC)
        s.topic_configs()
    assert tree_snapshot(STORE) == before
    assert _links_left() == links


def test_without_the_binding_the_error_names_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "rocksdict", None)
    with pytest.raises(cq.UnsupportedLayoutError, match=r"rmqfilter\[rocksdb\]"):
        cq.Store(STORE)
    assert rmqfilter.main(["inspect", str(STORE)]) == 2


def _key(topic: str, queue_id: int, offset: int) -> bytes:
    name = topic.encode()
    return struct.pack(">i", len(name)) + b"\x01" + name + b"\x01" + struct.pack(">i", queue_id) + b"\x01" + \
        struct.pack(">q", offset)


def _rewritten(tmp_path, change) -> str:
    """A copy of the store whose consume queue database ``change(db)`` rewrote through the binding."""
    import rocksdict

    root = tmp_path / "store"
    shutil.copytree(STORE, root)
    db = rocksdict.Rdict(str(root / fmt.CONSUME_QUEUE_DIR), options=rocksdict.Options(raw_mode=True),
                         column_families={"offset": rocksdict.Options(raw_mode=True)})
    try:
        change(db)
    finally:
        db.close()
    return str(root)


def test_a_unit_of_the_wrong_length_is_an_error_naming_the_queue_and_offset(tmp_path):
    root = _rewritten(tmp_path, lambda db: db.put(_key(TOPIC, 0, 7), b"\x00" * 27))
    with closing(cq.Store(root)) as s, pytest.raises(cq.StoreFormatError, match=r"000\d+\.sst at byte offset 0: ModesTopic/0: unit of queue offset 7 holds 27"):
        s.consume_queue(TOPIC, 0)


def test_a_missing_unit_below_the_maximum_is_an_error(tmp_path):
    root = _rewritten(tmp_path, lambda db: db.delete(_key(TOPIC, 1, 50)))
    with closing(cq.Store(root)) as s, pytest.raises(cq.StoreFormatError, match="queue offset 50 missing"):
        list(s.consume(TOPIC, GROUP, tags=TAGS))
    assert rmqfilter.main(["consume", str(root), "--topic", TOPIC, "--group", GROUP, "--tags", TAGS]) == 2


def test_a_database_that_is_not_rocksdb_is_an_error_naming_it(tmp_path):
    root = tmp_path / "store"
    shutil.copytree(STORE, root)
    (root / fmt.CONSUME_QUEUE_DIR / "CURRENT").write_text("MANIFEST-999999\n")
    with pytest.raises(cq.StoreFormatError, match="not a readable RocksDB database"):
        cq.Store(root).topics()


def test_the_offset_ids_of_rocksdb_units_are_the_records(store):
    """The RocksDB units hold the store timestamp too; it is the record's."""
    queue = store.consume_queue(TOPIC, 2)
    units = queue.read()
    for i in (0, len(units) // 2, len(units) - 1):
        msg = store.commit_log.read_message(int(units["commit_log_offset"][i]))
        assert int(queue.store_timestamps[i]) == msg.store_timestamp



@pytest.mark.spark
def test_the_data_source_reads_the_rocksdb_queues(spark, store):
    rows = spark.read.format("rocketmq").option("topic", TOPIC).option("group", GROUP).option("tags", TAGS) \
        .load(str(STORE)).selectExpr("queue_id", "queue_offset", "properties['UNIQ_KEY'] AS uniq").collect()
    want = sorted((m.queue_id, m.queue_offset, m.properties["UNIQ_KEY"]) for m in store.consume(TOPIC, GROUP, tags=TAGS))
    assert sorted(map(tuple, rows)) == want and len(want) > len(FACTS["received"])
    everything = spark.read.format("rocketmq").option("topic", TOPIC).load(str(STORE)).count()
    assert everything == sum(q["max_offset"] - q["min_offset"] for q in FACTS["queues"])


def test_a_batch_cq_topic_known_only_from_the_rocksdb_topic_table_is_flagged_and_reads_empty(tmp_path):
    """A BatchCQ topic without messages has no ``batchconsumequeue/`` directory: the topic table kept in
    RocksDB (``config/topics``) marks it, so it is detected as BatchCQ and every read of it is empty,
    never a classic queue's read or a "no such topic" error."""
    import rocksdict

    root = tmp_path / "store"
    shutil.copytree(STORE, root)
    path = str(root / "config" / "topics")
    raw = rocksdict.Options(raw_mode=True)
    db = rocksdict.Rdict(path, options=raw, column_families={n: raw for n in rocksdict.Rdict.list_cf(path)})
    db[b"EmptyBatch"] = json.dumps({"topicName": "EmptyBatch", "readQueueNums": 2, "writeQueueNums": 2,
                                    "attributes": {"+queue.type": "BatchCQ"}}).encode()
    db.close()
    assert cq.detect_layout(root).batch_cq_topics == ("EmptyBatch",)
    with closing(cq.Store(root)) as s:
        assert s.topic_configs()["EmptyBatch"]["attributes"] == {"+queue.type": "BatchCQ"}
        assert s.queue_ids("EmptyBatch") == []
        result = s.consume("EmptyBatch", "G", tags="*")
        assert (list(result), result.stats.units_scanned) == ([], 0)
        assert len(list(s.consume(TOPIC, "G", tags="*"))) == sum(q["max_offset"] - q["min_offset"]
                                                                  for q in FACTS["queues"])
    from pyspark_udfs import _reader
    from pyspark_udfs.datasource import ReadOptions, RocketMQReader

    opts = ReadOptions.parse({"path": str(root), "topic": "EmptyBatch"})
    parts = RocketMQReader(opts, opts.schema()).partitions()
    assert [b for p in parts for b in _reader.read_partition(opts, opts.schema(), p, [])] == []


def test_a_database_read_again_after_it_changed(tmp_path):
    """Store.topics() and the metadata tables reuse what they read only while the database's files are
    unchanged: a topic and a queue the broker adds between two calls on one open Store are seen by the second."""
    import rocksdict

    root = tmp_path / "store"
    shutil.copytree(STORE, root)
    raw = rocksdict.Options(raw_mode=True)
    with closing(cq.Store(str(root))) as s:
        before_topics, before_configs = s.topics(), s.topic_configs()
        assert s.topics() == before_topics and s.topic_configs() == before_configs
        path = str(root / "config" / "topics")
        db = rocksdict.Rdict(path, options=raw, column_families={n: raw for n in rocksdict.Rdict.list_cf(path)})
        db[b"AddedTopic"] = json.dumps({"topicName": "AddedTopic", "readQueueNums": 1, "writeQueueNums": 1}).encode()
        db.close()
        assert set(s.topic_configs()) - set(before_configs) == {"AddedTopic"}
        queues = str(root / fmt.CONSUME_QUEUE_DIR)
        db = rocksdict.Rdict(queues, options=raw, column_families={n: raw for n in rocksdict.Rdict.list_cf(queues)})
        name = b"AddedTopic"
        max_key = struct.pack(">i", len(name)) + b"\x01" + name + b"\x01" + b"max" + b"\x01" + struct.pack(">i", 0)
        db.get_column_family(fmt.ROCKSDB_CQ_OFFSET_FAMILY).put(max_key, struct.pack(">qq", 0, 0))
        db.close()
        assert set(s.topics()) - set(before_topics) == {"AddedTopic"}


def test_an_open_store_reads_committed_offsets_the_broker_wrote_since(tmp_path):
    """A Store reads a RocksDB metadata table again once the broker wrote to its database: the group's
    committed offsets read, then moved by a write, are read as moved by the same Store."""
    from rocksdict import Options, Rdict

    root = tmp_path / "store"
    shutil.copytree(STORE, root)
    path = str(root / "config" / "consumerOffsets")

    def options() -> Options:
        opts = Options(raw_mode=True)
        opts.set_db_log_dir(str(tmp_path))    # not the broker's log directory its OPTIONS name
        return opts

    with closing(cq.Store(root)) as s:
        assert s.committed_offsets(GROUP, TOPIC) == {q["queue_id"]: 100 for q in FACTS["queues"]}
        db = Rdict(path, options=options(),
                   column_families={f: options() for f in Rdict.list_cf(path) if f != "default"})
        try:
            key = f"{TOPIC}{fmt.ROCKSDB_OFFSET_KEY_SEPARATOR}{GROUP}".encode()
            db[key] = json.dumps({"offsetTable": {"0": 120, "1": 100, "2": 100}}).encode()
            db.flush()
        finally:
            db.close()
        assert s.committed_offsets(GROUP, TOPIC)[0] == 120
