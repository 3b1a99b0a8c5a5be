"""What a store shows of the release that wrote it, and the refusals for what releases after 5.3.3
keep where rmqfilter does not read (docs/formats.md#releases-after-533): each store here is the
golden store with only the files that show the feature added."""
from __future__ import annotations

import json
import os
import shutil
from contextlib import closing

import pytest
from helpers import DATA

import cq
import rmqfilter as cli
from cq import format as fmt
from cq.analyses.paths import why_every_copy
from cq.analyses.pending import pending
from cq.store.releases import check_message_rocksdb, message_rocksdb_families, written_by

GOLDEN = DATA / "golden_store"
TOPIC = "GoldenFilterTopic"
GROUP = "GID_RELEASES"


@pytest.fixture
def copy(tmp_path):
    dest = tmp_path / "store"
    shutil.copytree(GOLDEN, dest)
    return dest


def _write_config(root, name: str, key: str, table: dict) -> None:
    os.makedirs(os.path.join(root, "config"), exist_ok=True)
    with open(os.path.join(root, "config", name), "w") as f:
        json.dump({key: table, "dataVersion": {"counter": 1, "timestamp": 0}}, f)


def _topic(name: str, **attributes) -> dict:
    return {"topicName": name, "readQueueNums": 4, "writeQueueNums": 4, "perm": 6,
            "attributes": {f"+{k}": v for k, v in attributes.items()}}


def _message_rocksdb(root, records: dict[str, dict[bytes, bytes]]) -> str:
    """A ``rocksdbstore/`` database with the families of RIP-82, holding ``records`` per family."""
    rocksdict = pytest.importorskip("rocksdict")
    path = os.path.join(root, fmt.MESSAGE_ROCKSDB_DIR)
    db = rocksdict.Rdict(path, options=rocksdict.Options(raw_mode=True))
    families = {"default": db}
    for name in ("timer", "trans"):
        families[name] = db.create_column_family(name, rocksdict.Options(raw_mode=True))
    for name, items in records.items():
        for key, value in items.items():
            families[name][key] = value
    db.close()
    return path


def test_a_store_that_names_no_release_says_unknown():
    found = written_by(GOLDEN)
    assert found.release is None and found.evidence == ()
    assert found.describe().startswith("unknown")
    assert found.as_dict() == {"release": None, "at_least": False, "evidence": []}


def test_the_message_rocksdb_shows_5_4_and_its_empty_families_refuse_nothing(copy):
    _message_rocksdb(copy, {})
    found = written_by(copy)
    assert found.release == "5.4.0" and "rocksdbstore/" in found.evidence[0]
    assert message_rocksdb_families(copy) == ()
    for family in ("timer", "trans"):
        check_message_rocksdb(copy, family, "anything")


def test_an_empty_message_rocksdb_needs_no_binding(copy):
    """What a 5.4+ broker leaves with every RIP-82 setting off: CURRENT, an empty write-ahead log."""
    directory = copy / fmt.MESSAGE_ROCKSDB_DIR
    directory.mkdir()
    (directory / "CURRENT").write_bytes(b"MANIFEST-000005\n")
    (directory / "000004.log").write_bytes(b"")
    assert message_rocksdb_families(copy) == ()
    assert written_by(copy).release == "5.4.0"


@pytest.mark.parametrize(("kind", "release"), [("PRIORITY", "5.4.0"), ("LITE", "5.5.0")])
def test_a_topic_of_a_newer_message_type_shows_its_release(copy, kind, release):
    _write_config(copy, "topics.json", "topicConfigTable", {"P": _topic("P", **{"message.type": kind}),
                                                            TOPIC: _topic(TOPIC, **{"message.type": "NORMAL"})})
    found = written_by(copy)
    assert found.release == release
    assert found.evidence == (f"topic P: message.type={kind}",)


def test_registrations_without_bloom_data_show_5_5_1(copy):
    # docs/config-and-index.md#no-bloom-data: only a 5.5.1+ broker, bitmaps off, writes them so
    entry = {"consumerGroup": GROUP, "topic": TOPIC, "expression": "a > 1", "expressionType": "SQL92",
             "bornTime": 1, "deadTime": 0, "clientVersion": 1}
    with_bloom = dict(entry, consumerGroup="GID_OLD", bloomFilterData={"bitPos": [1, 2, 3], "bitNum": 112})
    table = {TOPIC: {"topic": TOPIC, "groupFilterData": {GROUP: entry, "GID_OLD": with_bloom}}}
    _write_config(copy, "consumerFilter.json", "filterDataByTopic", table)
    found = written_by(copy)
    assert found.release == "5.5.1"
    assert found.evidence == ("config/consumerFilter.json: 1 registration(s) without bloomFilterData",)
    del table[TOPIC]["groupFilterData"][GROUP]
    _write_config(copy, "consumerFilter.json", "filterDataByTopic", table)
    assert written_by(copy).release is None     # bloom data that does not match is no release's sign


def test_the_strongest_evidence_comes_first(copy):
    _message_rocksdb(copy, {})
    _write_config(copy, "topics.json", "topicConfigTable", {"L": _topic("L", **{"message.type": "LITE"})})
    found = written_by(copy)
    assert found.release == "5.5.0"
    assert found.evidence[0] == "topic L: message.type=LITE" and "rocksdbstore/" in found.evidence[1]


def test_timer_data_in_rocksdb_is_refused_naming_the_feature_file_and_release(copy):
    path = _message_rocksdb(copy, {"timer": {b"\x00" * 16: b"\x01" * 8}})
    assert message_rocksdb_families(copy) == ("timer",)
    with pytest.raises(cq.UnsupportedLayoutError) as err:
        check_message_rocksdb(copy, "timer", "the timer's state")
    text = str(err.value)
    assert "timerRocksDBEnable" in text and "5.4.0" in text and "RIP-82" in text and path in text
    check_message_rocksdb(copy, "trans", "the transaction table")   # the other family is empty


def test_an_index_in_rocksdb_is_not_refused(copy):
    """``indexRocksDBEnable`` adds the index to RocksDB; the IndexFiles are still written (or the
    topic is scanned without them), so nothing rmqfilter answers depends on the family."""
    _message_rocksdb(copy, {"default": {b"key": b"value"}})
    assert message_rocksdb_families(copy) == ("default",)
    for family in ("timer", "trans"):
        check_message_rocksdb(copy, family, "anything")


def test_transaction_halves_kept_in_rocksdb_refuse_the_transaction_table_and_why(copy):
    half = copy / fmt.CONSUME_QUEUE_DIR / fmt.ROCKSDB_TRANS_HALF_TOPIC / "0"
    half.mkdir(parents=True)
    with closing(cq.Store(str(copy))) as store:
        with pytest.raises(cq.UnsupportedLayoutError, match="transRocksDBEnable.*5.4.0.*RIP-82") as err:
            pending(store, "transactions")
        assert err.value.path == str(half.parent)
        with pytest.raises(cq.UnsupportedLayoutError, match="transRocksDBEnable"):
            why_every_copy(store, TOPIC, GROUP, tags="*", queue_id=0, queue_offset=0)
    assert written_by(copy).release == "5.4.0"


def test_a_transaction_family_with_records_refuses_too(copy):
    path = _message_rocksdb(copy, {"trans": {b"k": b"v"}})
    with closing(cq.Store(str(copy))) as store, pytest.raises(cq.UnsupportedLayoutError) as err:
        pending(store, "transactions")
    assert err.value.path == path


def test_a_lite_topic_and_a_group_bound_to_one_are_refused_by_the_group_views(copy):
    _write_config(copy, "topics.json", "topicConfigTable", {TOPIC: _topic(TOPIC, **{"message.type": "LITE"})})
    with closing(cq.Store(str(copy))) as store:
        for view in (cq.why, cq.backlog):
            kw = {"queue_id": 0, "queue_offset": 0} if view is cq.why else {}
            with pytest.raises(cq.UnsupportedLayoutError, match=r"Lite topic consumption \(RIP-83, RocketMQ 5.5.0\+\)"):
                view(store, TOPIC, GROUP, tags="*", **kw)
        lite_queue = f"{fmt.LITE_QUEUE_PREFIX}{TOPIC}$child"
        with pytest.raises(cq.UnsupportedLayoutError, match="Lite topic") as err:
            cq.backlog(store, lite_queue, GROUP, tags="*")
        assert err.value.path.endswith(lite_queue)
    _write_config(copy, "topics.json", "topicConfigTable", {TOPIC: _topic(TOPIC)})
    _write_config(copy, "subscriptionGroup.json", "subscriptionGroupTable",
                  {GROUP: {"groupName": GROUP, "consumeEnable": True, "liteBindTopic": TOPIC}})
    with closing(cq.Store(str(copy))) as store, pytest.raises(cq.UnsupportedLayoutError, match="Lite topic") as err:
        cq.backlog(store, TOPIC, GROUP, tags="*")
    assert err.value.path.endswith("subscriptionGroup.json")


def test_priority_messages_are_read_as_ordinary_units(copy):
    """RIP-80 stores a priority message as an ordinary unit of queue min(priority, queues - 1):
    a topic of message.type PRIORITY reads as any other."""
    _write_config(copy, "topics.json", "topicConfigTable", {TOPIC: _topic(TOPIC, **{"message.type": "PRIORITY"})})
    with closing(cq.Store(str(copy))) as store:
        plain = list(cq.Store(str(GOLDEN)).consume(TOPIC, GROUP, tags="*"))
        assert [(m.queue_id, m.queue_offset) for m in store.consume(TOPIC, GROUP, tags="*")] == \
            [(m.queue_id, m.queue_offset) for m in plain]


def test_inspect_prints_the_release(copy, capsys):
    _message_rocksdb(copy, {})
    assert cli.main(["inspect", str(copy)]) == 0
    out = capsys.readouterr().out
    assert "Written by: RocketMQ 5.4.0 or later (rocksdbstore/" in out
    assert cli.main(["inspect", str(copy), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["written_by"]["release"] == "5.4.0"
    assert cli.main(["inspect", str(GOLDEN)]) == 0
    assert "Written by: unknown" in capsys.readouterr().out
