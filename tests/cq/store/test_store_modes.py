"""Store modes: which CommitLog, consume queues and metadata a store holds, and a clear error
(exit status 2 on the command line) for every layout rmqfilter cannot read, never an empty
answer (docs/reading.md#store-modes)."""
from __future__ import annotations

import json
import os
import shutil
from contextlib import closing

import pytest
from helpers import DATA

import cq
import rmqfilter
from cq import format as fmt

GOLDEN = DATA / "golden_store"
TOPIC = "GoldenFilterTopic"


@pytest.fixture
def copy(tmp_path):
    dest = tmp_path / "store"
    shutil.copytree(GOLDEN, dest)
    return dest


def _rocksdb(directory) -> None:
    """What a RocksDB database directory holds (its CURRENT file, a MANIFEST, an .sst)."""
    os.makedirs(directory, exist_ok=True)
    for name, data in (("CURRENT", b"MANIFEST-000005\n"), ("MANIFEST-000005", b"\0" * 16), ("000009.sst", b"\0" * 64)):
        with open(os.path.join(directory, name), "wb") as f:
            f.write(data)


def _write_topics(root, table: dict) -> None:
    os.makedirs(os.path.join(root, "config"), exist_ok=True)
    with open(os.path.join(root, "config", "topics.json"), "w") as f:
        json.dump({"topicConfigTable": table, "dataVersion": {"counter": 1, "timestamp": 0}}, f)


def test_the_classic_store_is_detected():
    layout = cq.detect_layout(GOLDEN)
    assert (layout.commit_log, layout.consume_queues, layout.batch_cq_topics) == ("classic", "files", ())
    assert layout.describe().startswith("CommitLog classic (commitlog/); consume queues files")


def test_the_dledger_stores_are_detected():
    assert cq.detect_layout(DATA / "dledger_store").commit_log == "dledger"
    assert cq.detect_layout(DATA / "dledger_migrated_store").commit_log == "dledger+classic"
    assert "above a classic commitlog/ (migrated)" in cq.detect_layout(DATA / "dledger_migrated_store").describe()


def test_a_consume_queue_database_rocksdb_cannot_open_is_an_error_not_zero_topics(copy, capsys):
    """(tests/cq/readers/test_rocksdb.py reads a real broker's RocksDB consume queue.)"""
    shutil.rmtree(copy / fmt.CONSUME_QUEUE_DIR)
    _rocksdb(copy / fmt.CONSUME_QUEUE_DIR)
    assert cq.detect_layout(copy).consume_queues == "rocksdb"
    with closing(cq.Store(copy)) as store, pytest.raises(cq.StoreFormatError, match="not a readable RocksDB") as err:
        store.topics()
    assert err.value.path.startswith(str(copy / fmt.CONSUME_QUEUE_DIR))  # the database, or the file RocksDB names
    assert rmqfilter.main(["inspect", str(copy)]) == 2
    captured = capsys.readouterr()
    assert "Mode: CommitLog classic (commitlog/); consume queues RocksDB;" in captured.out
    assert "topic(s)" not in captured.out
    assert "not a readable RocksDB database" in captured.err
    assert rmqfilter.main(["consume", str(copy), "--topic", TOPIC, "--group", "G", "--tags", "*"]) == 2
    assert rmqfilter.main(["backlog", str(copy), "--topic", TOPIC, "--group", "G", "--tags", "*"]) == 2


def test_files_beside_a_rocksdb_consume_queue_are_an_error(copy):
    _rocksdb(copy / fmt.CONSUME_QUEUE_DIR)
    with pytest.raises(cq.UnsupportedLayoutError, match="both as files and in RocksDB"):
        cq.Store(copy)


def test_a_store_without_its_commit_log_is_an_error_not_missing_records(copy, capsys):
    shutil.rmtree(copy / fmt.COMMIT_LOG_DIR)
    with closing(cq.Store(copy)) as store:
        assert store.layout.commit_log == "none"
        with pytest.raises(cq.UnsupportedLayoutError, match="no CommitLog") as err:
            list(store.consume(TOPIC, "G", tags="*"))
        assert err.value.path == str(copy)
        with pytest.raises(cq.UnsupportedLayoutError, match="no CommitLog"):
            cq.backlog(store, TOPIC, "G", tags="*")
    assert rmqfilter.main(["consume", str(copy), "--topic", TOPIC, "--group", "G", "--tags", "*"]) == 2
    assert "no CommitLog: not supported" in capsys.readouterr().err


@pytest.mark.parametrize("how", ["attribute", "directory"])
def test_a_batch_cq_topic_is_listed_and_read_from_its_own_directory(copy, capsys, how):
    """BatchCQ topics are read (docs/formats.md#batch-consume-queue); one marked in topics.json
    without a batchconsumequeue directory (no message yet) has no queues and reads empty, never as a
    classic topic."""
    if how == "attribute":  # the broker marks it in topics.json (TopicAttributes.QUEUE_TYPE_ATTRIBUTE)
        _write_topics(copy, {TOPIC: {"topicName": TOPIC, "readQueueNums": 2, "writeQueueNums": 2,
                                     "attributes": {"+queue.type": "BatchCQ"}}})
        shutil.rmtree(copy / fmt.CONSUME_QUEUE_DIR / TOPIC)
    else:
        os.makedirs(copy / fmt.BATCH_CONSUME_QUEUE_DIR / "BatchTopic" / "0")
    topic = TOPIC if how == "attribute" else "BatchTopic"
    with closing(cq.Store(copy)) as store:
        assert (topic in store.topics()) == (how == "directory")  # listed where it has queues
        if how == "attribute":
            assert store.queue_ids(topic) == []
            assert list(store.consume(topic, "G", tags="*")) == []
            assert store.cut().queues  # a whole-store read passes over it
        else:
            assert store.queue_ids(topic) == [0]
            assert list(store.consume(topic, "G", tags="*")) == []  # an empty queue, not a classic one
        # the other topic reads as before
        assert len(list(store.consume("GoldenPlainTopic", "G", tags="*"))) > 0
    assert f"BatchCQ topics: {topic}" in cq.detect_layout(copy).describe()


def test_rocksdb_metadata_is_read_there_never_from_the_stale_json(copy, capsys):
    _rocksdb(copy / "config" / "consumerOffsets")  # a database RocksDB cannot open
    _write_topics(copy, {})
    with closing(cq.Store(copy)) as store:
        assert store.layout.metadata == "json+rocksdb"
        assert store.layout.rocksdb_tables == ("consumerOffsets",)
        with pytest.raises(cq.StoreFormatError, match="not a readable RocksDB database") as err:
            store.committed_offsets("G", TOPIC)  # the JSON file beside it is never read as current
        assert err.value.path.startswith(str(copy / "config" / "consumerOffsets"))
        with pytest.raises(cq.UnsupportedLayoutError, match=r"RocksDB metadata \(consumerOffsets\)"):
            store.config_path("consumerOffset.json")
        assert store.topic_configs() == {}  # tables still in JSON read as before
        assert len(list(store.consume(TOPIC, "G", tags="*"))) > 0  # an explicit subscription needs no metadata
    assert rmqfilter.main(["backlog", str(copy), "--topic", TOPIC, "--group", "G", "--tags", "*"]) == 2
    assert "consumerOffsets" in capsys.readouterr().err


def test_config_v2_keeps_every_table_in_rocksdb(copy):
    _rocksdb(copy / "config" / "rdb")
    _rocksdb(copy / "config" / "topics")  # a v1 database beside it: a v2 broker never reads it
    layout = cq.detect_layout(copy)
    assert (layout.metadata, set(layout.rocksdb_tables), layout.rocksdb_config) == (
        "rocksdb", {"consumerOffsets", "subscriptionGroups", "topics"}, "v2")
    assert "metadata RocksDB v2 (config/rdb" in layout.describe()
    with closing(cq.Store(copy)) as store:
        for read in (store.subscription_groups, store.topic_configs, store.offset_table):
            with pytest.raises(cq.StoreFormatError, match="not a readable RocksDB database") as err:
                read()  # the v2 database, never the v1 one or a JSON file
            assert err.value.path.startswith(str(copy / "config" / "rdb"))


def test_two_dledger_logs_in_one_root_are_an_error(tmp_path):
    root = tmp_path / "store"
    shutil.copytree(DATA / "dledger_store", root)
    shutil.copytree(root / "dledger-n0", root / "dledger-n1")
    with pytest.raises(cq.StoreFormatError, match="several DLedger CommitLogs"):
        cq.Store(root)


def test_inspect_prints_the_mode(capsys):
    assert rmqfilter.main(["inspect", str(DATA / "dledger_migrated_store")]) == 0
    out = capsys.readouterr().out
    assert "Mode: CommitLog DLedger (dledger-n0/data/) above a classic commitlog/ (migrated); " \
           "consume queues files; metadata" in out
    assert "2 topic(s), 300 message(s) in consume queues" in out
    assert rmqfilter.main(["inspect", "--json", str(DATA / "dledger_store")]) == 0
    assert json.loads(capsys.readouterr().out)["layout"]["commit_log"] == "dledger"


def test_a_broken_topics_json_does_not_stop_the_store_from_opening(copy):
    """Mode detection reads topics.json for BatchCQ topics; a broken one is for topic_configs to report."""
    os.makedirs(copy / "config", exist_ok=True)
    (copy / "config" / "topics.json").write_text('{"topicConfigTable": {"T": ')
    with closing(cq.Store(copy)) as store:
        assert store.topics() == ["GoldenFilterTopic", "GoldenPlainTopic"]
        with pytest.raises(cq.ConfigFormatError):
            store.topic_configs()
