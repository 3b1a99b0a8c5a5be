"""Metadata a broker keeps in RocksDB with ``configManagerVersion=v2``: every table in ``config/rdb``.

``tests/data/rdb_v2_store`` is the store RocketMQ's own broker (the version in
``tests/data/rdb_v2_store.json``) wrote in the harness's ``rocksdb`` scenario, as its second broker
``broker-v2`` (tests/data/RDB_V2_STORE.md). The offsets, topics, groups, pull offsets and backlogs
rmqfilter reads from it must be what that broker reported; a key or value that does not parse is
an error naming the table file and the key; reading changes no file
(docs/formats.md#rocksdb-metadata-v2).
"""
from __future__ import annotations

import json
import shutil
import struct
import sys
from contextlib import closing

import pytest
from helpers import DATA, tree_snapshot

import cq
import rmqfilter
from cq import format as fmt
from cq.readers import rocksdb

STORE = DATA / "rdb_v2_store"
FACTS = json.loads((DATA / "rdb_v2_store.json").read_text())
TOPIC, OFF_GROUP = FACTS["topic"], FACTS["off_group"]
GROUPS = {g["group"]: g["progress"] for g in FACTS["groups"]}


def _root(tmp_path):
    """A writable copy of the store."""
    root = tmp_path / "store"
    shutil.copytree(STORE, root)
    return root


@pytest.fixture(scope="module")
def store():
    with closing(cq.Store(STORE)) as s:
        yield s


def test_the_layout_is_config_v2(store):
    layout = store.layout
    assert (layout.metadata, layout.rocksdb_config, set(layout.rocksdb_tables)) == (
        "json+rocksdb", "v2", {"consumerOffsets", "subscriptionGroups", "topics"})
    assert "metadata RocksDB v2 (config/rdb: offsets, subscription groups, topics) beside JSON files" in \
        layout.describe()
    with pytest.raises(cq.UnsupportedLayoutError, match=r"v2 \(config/rdb, configManagerVersion=v2\)"):
        store.config_path("topics.json")


def test_committed_offsets_are_the_brokers(store):
    assert GROUPS
    for group, progress in GROUPS.items():
        assert store.committed_offsets(group, TOPIC) == {p["queue_id"]: p["consumer_offset"] for p in progress}
    assert {g for _, g in store.offset_table()} == set(GROUPS)


@pytest.mark.parametrize("group", FACTS["groups"], ids=lambda g: g["group"])
def test_backlog_is_the_brokers_progress_and_what_the_drain_received(store, group):
    """Committed offsets from config/rdb, the queues' ends, and per queue what the group's
    consumers received after the copy was taken."""
    sub = {"sql": group["expression"]} if group["type"] == "SQL92" else {"tags": group["expression"]}
    b = cq.backlog(store, TOPIC, group["group"], **sub)
    assert [(q.queue_id, q.committed_offset, q.max_offset, q.will_receive) for q in b.queues] == [
        (p["queue_id"], p["consumer_offset"], p["broker_offset"], group["drain_received"][str(p["queue_id"])])
        for p in group["progress"]]


def test_topics_and_groups_are_the_brokers(store):
    topic = store.topic_configs()[TOPIC]
    assert (topic["readQueueNums"], topic["writeQueueNums"], topic["perm"]) == (len(FACTS["queues"]),) * 2 + (6,)
    assert store.subscription_groups()[OFF_GROUP]["consumeEnable"] is False


def test_pull_offsets_lie_between_the_committed_offset_and_the_end(store):
    pulled = store.pull_offset_table()
    for group, progress in GROUPS.items():
        for p in progress:
            assert p["consumer_offset"] <= pulled[TOPIC, group][p["queue_id"]] <= p["broker_offset"]
    # the retry topics' pulls too: a table of its own, not the committed offsets
    assert any(t.startswith("%RETRY%") for t, _ in pulled)
    assert not any(t.startswith("%RETRY%") for t, _ in store.offset_table())


def test_inspect_names_config_rdb_and_prints_the_offsets(tmp_path, capsys):
    assert rmqfilter.main(["inspect", str(_root(tmp_path))]) == 0
    out = capsys.readouterr().out
    assert "metadata RocksDB v2 (config/rdb" in out and "Committed offsets (RocksDB config/rdb" in out
    for group, progress in GROUPS.items():
        assert f"{group} on {TOPIC}: " + ", ".join(f"{p['queue_id']}:{p['consumer_offset']}" for p in progress) in out


def test_reading_changes_no_file():
    before = tree_snapshot(STORE)
    rdb = STORE / "config" / fmt.ROCKSDB_V2_DIR
    assert rocksdb.offset_table(rdb) and rocksdb.pull_offset_table(rdb)
    assert rocksdb.metadata_table(rdb, "topics") and rocksdb.metadata_table(rdb, "subscriptionGroups")
    assert rmqfilter.main(["backlog", str(STORE), "--topic", TOPIC, "--group", "GID_MODES_TAG_V2", "--tags", "TagA || TagB"]) == 0
    assert tree_snapshot(STORE) == before


def test_without_the_binding_the_error_names_the_extra(tmp_path, monkeypatch):
    root = _root(tmp_path)
    monkeypatch.setitem(sys.modules, "rocksdict", None)
    with closing(cq.Store(root)) as s:  # the store opens: an explicit subscription needs no metadata
        for read in (s.offset_table, s.topic_configs, s.subscription_groups):
            with pytest.raises(cq.UnsupportedLayoutError, match=r"rmqfilter\[rocksdb\]"):
                read()
    assert rmqfilter.main(["inspect", str(root)]) == 2


def _key(table: str, *parts) -> bytes:
    """A v2 key of ``table``: names as u16 length and UTF-8 bytes, integers as i32, 0x01 between
    the parts of an offset key (docs/formats.md#rocksdb-metadata-v2)."""
    out = [bytes([1]), struct.pack(">H", fmt.ROCKSDB_V2_TABLE_IDS[table]), bytes([2])]
    for i, part in enumerate(parts):
        if i:
            out.append(b"\x01")
        out.append(struct.pack(">i", part) if isinstance(part, int) else struct.pack(">H", len(part.encode())) +
                   part.encode())
    return b"".join(out)


def _rewritten(tmp_path, key: bytes, value: bytes):
    """A store root whose config/rdb holds ``value`` at ``key``, put through the binding."""
    import rocksdict

    root = _root(tmp_path)
    options = rocksdict.Options(raw_mode=True)
    options.set_allow_concurrent_memtable_write(False)  # the broker's options update memtables in place
    db = rocksdict.Rdict(str(root / "config" / fmt.ROCKSDB_V2_DIR), options=options)
    try:
        db.put(key, value)
    finally:
        db.close()
    return root


def _read_fails(root, read, match: str) -> cq.StoreFormatError:
    """``read(store)`` raises a StoreFormatError matching ``match`` naming config/rdb, no byte changed."""
    before = tree_snapshot(root)
    with closing(cq.Store(root)) as s, pytest.raises(cq.StoreFormatError, match=match) as err:
        read(s)
    assert err.value.path.startswith(str(root / "config" / fmt.ROCKSDB_V2_DIR))
    assert tree_snapshot(root) == before
    return err.value


@pytest.mark.parametrize("value", [b"\x00" * 7, b""])
def test_an_offset_of_the_wrong_length_is_an_error_naming_the_key(tmp_path, capsys, value):
    group = next(iter(GROUPS))
    key = _key("consumerOffsets", group, TOPIC, 1)
    root = _rewritten(tmp_path, key, value)
    _read_fails(root, lambda s: s.committed_offsets(group, TOPIC),
                rf"consumerOffsets record, RocksDB key {key.hex()}: the offset of {group} on {TOPIC}/1 holds "
                rf"{len(value)} bytes, not 8")
    assert rmqfilter.main(["inspect", str(root)]) == 2
    assert key.hex() in capsys.readouterr().err


def test_a_topic_value_that_is_not_json_is_an_error_naming_the_key(tmp_path):
    key = _key("topics", TOPIC)
    root = _rewritten(tmp_path, key, b'\x01{"topicName": "' + TOPIC.encode() + b'", "perm": }')
    _read_fails(root, lambda s: s.topic_configs(),
                rf"topics record, RocksDB key {key.hex()}: value of '{TOPIC}' is not JSON at value byte 3\d")


def test_a_value_of_another_serialization_is_an_error(tmp_path):
    key = _key("subscriptionGroups", OFF_GROUP)
    root = _rewritten(tmp_path, key, b"\x02\x0a\x03abc")
    _read_fails(root, lambda s: s.subscription_groups(), rf"{key.hex()}: value of '{OFF_GROUP}' has serialization "
                                                         "type 02, not JSON")


@pytest.mark.parametrize(("key", "what"), [
    (_key("pullOffsets", "G", TOPIC)[:-1], "runs past the key's end"),
    (_key("pullOffsets", "G", TOPIC) + b"\x01\x00\x01", "the key ends before its queue id"),
    (_key("pullOffsets", "G", TOPIC, 0) + b"\x00", "1 byte\\(s\\) after the record's key"),
    (_key("pullOffsets", "G") + b"\x02", "expected the separator 0x01 at key byte 7"),
])
def test_a_key_that_does_not_parse_is_an_error_naming_it(tmp_path, key, what):
    root = _rewritten(tmp_path, key, b"\x00" * 8)
    _read_fails(root, lambda s: s.pull_offset_table(), f"pullOffsets record, RocksDB key {key.hex()}: .*{what}")


def test_pull_offsets_of_a_store_without_config_v2_are_an_error():
    with closing(cq.Store(DATA / "rocksdb_store")) as s, pytest.raises(cq.UnsupportedLayoutError,
                                                                       match="configManagerVersion=v2"):
        s.pull_offset_table()
