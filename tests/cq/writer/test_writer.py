"""cq.StoreWriter: broker-identical CommitLog, ConsumeQueue and ConsumeQueueExt files.

The acceptance test rebuilds the golden store (written by RocketMQ's own Java
store) from its JSONL description and compares the files byte for byte.
"""
from __future__ import annotations

import base64
import hashlib
import os
import shutil
import struct
import zlib
from pathlib import Path

import pytest
from helpers import DATA, load_jsonl

import cq
from cq.format import BLANK_MAGIC_CODE, MESSAGE_MAGIC_CODE_V1, MESSAGE_MAGIC_CODE_V2, decorate
from cq.tags import tags_code
from cq.writer.writer import AppendResult, SqlGroup, StoreWriter

GOLDEN = DATA / "golden_store"
GOLDEN_ROWS = load_jsonl("golden_store.jsonl")
GOLDEN_CONFIG = {
    "commit_log_file_size": 65536,
    "consume_queue_file_size": 1000,
    "ext_file_size": 1024,
    "enable_ext": True,
    "store_host": "10.0.3.7:10911",
    "cluster": "GoldenCluster",
}
STORE_DIRS = ("commitlog", "consumequeue", "consumequeue_ext")
SMALL_LOG = 1 << 16  # tests that read a whole commit log file keep it small


def golden_groups() -> list[tuple[str, str, str]]:
    return [(g["topic"], g["group"], g["sql"]) for g in GOLDEN_ROWS[0]["groups"]]


def golden_kwargs(row: dict, *, as_mapping: bool = False) -> dict:
    """append() arguments for one golden message."""
    if as_mapping:
        # The producer sent everything but CLUSTER; the broker adds CLUSTER itself.
        properties = {k: v for k, v in row["properties"].items() if k != "CLUSTER"}
    else:
        properties = row["propertiesString"]
    return {
        "topic": row["topic"],
        "body": base64.b64decode(row["body_b64"]),
        "queue_id": row["queueId"],
        "properties": properties,
        "flag": row["flag"],
        "sys_flag": row["sysFlag"],
        "born_timestamp": row["bornTimestamp"],
        "store_timestamp": row["storeTimestamp"],
        "born_host": row["bornHost"],
        "store_host": row["storeHost"],
        "reconsume_times": row["reconsumeTimes"],
        "prepared_transaction_offset": row["preparedTransactionOffset"],
    }


def store_files(root: Path) -> dict[str, bytes]:
    """Relative path -> content of every CommitLog/ConsumeQueue/ext file under ``root``."""
    out = {}
    for sub in STORE_DIRS:
        for path in sorted((root / sub).rglob("*")):
            if path.is_file():
                out[str(path.relative_to(root))] = path.read_bytes()
    return out


def assert_same_store(actual: Path, expected: Path = GOLDEN) -> None:
    got, want = store_files(actual), store_files(expected)
    assert sorted(got) == sorted(want), "different set of store files"
    for name, data in want.items():
        if got[name] != data:
            first = next(i for i, (a, b) in enumerate(zip(got[name], data)) if a != b)
            pytest.fail(f"{name} differs from the golden file at byte {first}")


def write_golden(root: Path, *, as_mapping: bool = False, batch: bool = False, rows=GOLDEN_ROWS,
                 append: bool = False, groups: bool = True) -> list[AppendResult]:
    with StoreWriter(root, append=append, **GOLDEN_CONFIG) as writer:
        if groups:
            for topic, group, sql in golden_groups():
                writer.register_group(topic, group, sql)
        if batch:
            assert writer.append_many(golden_kwargs(r, as_mapping=as_mapping) for r in rows) == len(rows)
            return []
        return [writer.append(**golden_kwargs(r, as_mapping=as_mapping)) for r in rows]


# ------------------------------------------------------------ golden round trip
def test_golden_store_is_reproduced_byte_for_byte(tmp_path):
    results = write_golden(tmp_path)
    assert_same_store(tmp_path)
    for row, res in zip(GOLDEN_ROWS, results):
        assert res.commit_log_offset == row["commitLogOffset"]
        assert res.store_size == row["storeSize"]
        assert res.queue_offset == row["queueOffsetAssigned"]
        assert res.tags_code == row["tagsCodeComputed"] == row["ext"]["tagsCode"]
        assert res.ext_address == row["cq"]["tagsCode"] == row["ext"]["address"]
        assert res.msg_id == row["msgId"]


def test_golden_store_from_property_maps_follows_broker_hashmap_order(tmp_path):
    """Re-serialising the decoded maps (CLUSTER added by the broker) gives the stored bytes."""
    write_golden(tmp_path, as_mapping=True)
    assert_same_store(tmp_path)


def test_append_many_batches_bitmaps_identically(tmp_path):
    write_golden(tmp_path, batch=True)
    assert_same_store(tmp_path)


def test_append_mode_continues_a_store(tmp_path):
    write_golden(tmp_path, rows=GOLDEN_ROWS[:137])
    write_golden(tmp_path, rows=GOLDEN_ROWS[137:], append=True)
    assert_same_store(tmp_path)


# ------------------------------------------------------------ spec vectors
# The CommitLog record of docs/formats.md#test-vectors, byte for byte.
SPEC_RECORD_HEX = """
00 00 00 7b da a3 20 a7 77 d1 89 82 00 00 00 00
00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00
00 00 00 00 00 00 00 00 00 00 01 8b cf e5 68 00
7f 00 00 01 00 00 d4 31 00 00 01 8b cf e5 68 7b
c0 a8 00 01 00 00 2a 9f 00 00 00 00 00 00 00 00
00 00 00 00 00 00 00 05 48 65 6c 6c 6f 09 54 6f
70 69 63 54 65 73 74 00 12 54 41 47 53 01 54 61
67 41 02 4b 45 59 53 01 6b 31 02
"""


def spec_message(writer: StoreWriter, **overrides) -> AppendResult:
    kwargs = {
        "body": b"Hello",
        "properties": "TAGS\x01TagA\x02KEYS\x01k1\x02",
        "born_timestamp": 1700000000000,
        "store_timestamp": 1700000000123,
        "born_host": "127.0.0.1:54321",
    }
    kwargs.update(overrides)
    return writer.append("TopicTest", **kwargs)


def test_spec_commit_log_record_and_consume_queue_unit(tmp_path):
    with StoreWriter(tmp_path, store_host="192.168.0.1:10911", commit_log_file_size=4096) as w:
        res = spec_message(w)
    assert res == AppendResult(0, 123, 0, 2598919, None, "C0A8000100002A9F0000000000000000")
    log = (tmp_path / "commitlog" / "00000000000000000000").read_bytes()
    assert len(log) == 4096
    assert log[:123] == bytes.fromhex(SPEC_RECORD_HEX)
    assert log[123:] == bytes(4096 - 123)
    cq = (tmp_path / "consumequeue" / "TopicTest" / "0" / "00000000000000000000").read_bytes()
    assert len(cq) == 6_000_000
    assert cq[:20] == bytes.fromhex("0000000000000000 0000007b 000000000027a807".replace(" ", ""))
    assert not (tmp_path / "consumequeue_ext").exists()


def test_spec_ext_unit_with_bitmap(tmp_path):
    with StoreWriter(tmp_path, store_host="192.168.0.1:10911", enable_ext=True) as w:
        w.register_group("TopicTest", "CID_A", "a = 1")
        res = spec_message(w, properties={"TAGS": "TagA", "a": "1"})
        miss = spec_message(w, properties={"TAGS": "TagA", "a": "2"})
    ext = (tmp_path / "consumequeue_ext" / "TopicTest" / "0" / "00000000000000000000").read_bytes()
    assert len(ext) == 48 * 1024 * 1024
    assert ext[:34] == bytes.fromhex(
        "0022 000000000027a807 0000018bcfe5687b 000e 0000100800000000100000000000".replace(" ", "")
    )
    assert ext[34:68] == bytes.fromhex(
        "0022 000000000027a807 0000018bcfe5687b 000e 0000000000000000000000000000".replace(" ", "")
    )
    assert res.ext_address == -(2**63) and miss.ext_address == decorate(34)
    cq = (tmp_path / "consumequeue" / "TopicTest" / "0" / "00000000000000000000").read_bytes()
    assert cq[12:20] == bytes.fromhex("8000000000000000")
    assert cq[32:40] == bytes.fromhex("8000000000000022")


def test_topics_without_groups_get_20_byte_ext_units(tmp_path):
    with StoreWriter(tmp_path, enable_ext=True) as w:
        w.register_group("Other", "G", "a = 1")
        spec_message(w)
        spec_message(w)
    ext = (tmp_path / "consumequeue_ext" / "TopicTest" / "0" / "00000000000000000000").read_bytes()
    assert struct.unpack_from(">hqqh", ext, 0) == (20, 2598919, 1700000000123, 0)
    assert struct.unpack_from(">hqqh", ext, 20) == (20, 2598919, 1700000000123, 0)
    assert ext[40:42] == b"\0\0"


def test_blank_record_and_the_8_byte_rule(tmp_path):
    size = 123 * 3 + 8  # three records fit exactly with the 8 bytes the broker keeps free
    with StoreWriter(tmp_path, commit_log_file_size=size) as w:
        offsets = [spec_message(w).commit_log_offset for _ in range(4)]
    assert offsets == [0, 123, 246, size]
    first = (tmp_path / "commitlog" / f"{0:020d}").read_bytes()
    assert first[369:377] == struct.pack(">ii", 8, BLANK_MAGIC_CODE)
    assert sorted(os.listdir(tmp_path / "commitlog")) == [f"{0:020d}", f"{size:020d}"]
    # One byte less room: the third record moves to the next file.
    other = tmp_path / "other"
    with StoreWriter(other, commit_log_file_size=size - 1) as w:
        offsets = [spec_message(w).commit_log_offset for _ in range(3)]
    assert offsets == [0, 123, size - 1]
    first = (other / "commitlog" / f"{0:020d}").read_bytes()
    assert first[246:254] == struct.pack(">ii", size - 1 - 246, BLANK_MAGIC_CODE)


def test_ext_end_of_file_marker_and_addresses_across_files(tmp_path):
    with StoreWriter(tmp_path, enable_ext=True, ext_file_size=100) as w:
        w.register_group("TopicTest", "G", "TAGS = 'TagA'")
        addresses = [spec_message(w).ext_address for _ in range(5)]
    # 34-byte units; a unit needs 34 + 4 free bytes: two per 100-byte file.
    assert [a + 2**63 for a in addresses] == [0, 34, 100, 134, 200]
    first = (tmp_path / "consumequeue_ext" / "TopicTest" / "0" / f"{0:020d}").read_bytes()
    assert first[68:70] == b"\xff\xff" and first[70:] == bytes(30)
    names = sorted(os.listdir(tmp_path / "consumequeue_ext" / "TopicTest" / "0"))
    assert names == [f"{0:020d}", f"{100:020d}", f"{200:020d}"]


def test_consume_queue_rolls_files_and_rounds_size_to_units(tmp_path):
    with StoreWriter(tmp_path, consume_queue_file_size=50) as w:  # rounds up to 60: 3 units a file
        results = [spec_message(w) for _ in range(7)]
    assert [r.queue_offset for r in results] == list(range(7))
    directory = tmp_path / "consumequeue" / "TopicTest" / "0"
    assert sorted(os.listdir(directory)) == [f"{0:020d}", f"{60:020d}", f"{120:020d}"]
    third = (directory / f"{120:020d}").read_bytes()
    assert len(third) == 60
    assert struct.unpack_from(">qiq", third, 0) == (6 * 123, 123, 2598919)
    assert third[20:] == bytes(40)


def test_queue_offsets_are_per_topic_and_queue(tmp_path):
    with StoreWriter(tmp_path) as w:
        got = [
            w.append(t, b"x", queue_id=q, born_timestamp=1, store_timestamp=2).queue_offset
            for t, q in [("A", 0), ("A", 1), ("A", 0), ("B", 0), ("A", 1), ("A", 0)]
        ]
        assert w.queue_max_offset("A", 0) == 3 and w.queue_max_offset("Z", 9) == 0
    assert got == [0, 0, 1, 0, 1, 2]


def test_transaction_types_decide_who_gets_a_unit(tmp_path):
    with StoreWriter(tmp_path, commit_log_file_size=SMALL_LOG) as w:
        kinds = [0x0, 0x4, 0x8, 0xC, 0x0]
        results = [spec_message(w, sys_flag=k) for k in kinds]
    assert [r.queue_offset for r in results] == [0, None, 1, None, 2]
    log = (tmp_path / "commitlog" / f"{0:020d}").read_bytes()
    for r, kind in zip(results, kinds):
        qoff, phys, sys_flag = struct.unpack_from(">qqi", log, r.commit_log_offset + 20)
        assert (qoff, phys, sys_flag) == (r.queue_offset or 0, r.commit_log_offset, kind)
    cq = (tmp_path / "consumequeue" / "TopicTest" / "0" / f"{0:020d}").read_bytes()
    assert [struct.unpack_from(">q", cq, 20 * i)[0] for i in range(4)] == [0, 246, 492, 0]


def test_ipv6_hosts_set_sys_flag_bits_and_widen_the_record(tmp_path):
    with StoreWriter(tmp_path, store_host="[2001:db8::1]:10911", commit_log_file_size=SMALL_LOG) as w:
        r6 = spec_message(w, born_host="[::1]:54321")
        r4 = spec_message(w, store_host="192.168.0.1:10911")
    assert r6.store_size == 123 + 24 and r4.store_size == 123
    assert r6.msg_id == "20010DB8000000000000000000000001" + "00002A9F" + "0000000000000000"
    log = (tmp_path / "commitlog" / f"{0:020d}").read_bytes()
    assert struct.unpack_from(">i", log, 36)[0] == 0x30
    assert log[48:64] == bytes(15) + b"\x01" and struct.unpack_from(">i", log, 64)[0] == 54321
    assert struct.unpack_from(">i", log, r4.commit_log_offset + 36)[0] == 0
    with pytest.raises(ValueError, match="IPv6 born host but the host given is IPv4"):
        spec_message(StoreWriter(tmp_path / "x"), sys_flag=0x10)


def test_long_topics_use_v2_records(tmp_path):
    topic = "%RETRY%" + "g" * 150
    with StoreWriter(tmp_path, commit_log_file_size=SMALL_LOG) as w:
        res = w.append(topic, b"x", born_timestamp=1, store_timestamp=2)
        v1 = w.append("T" * 127, b"x", born_timestamp=1, store_timestamp=2)
    log = (tmp_path / "commitlog" / f"{0:020d}").read_bytes()
    assert struct.unpack_from(">i", log, 4)[0] == MESSAGE_MAGIC_CODE_V2
    assert res.store_size == 91 + 1 + 1 + len(topic) + len("CLUSTER\x01DefaultCluster\x02")
    assert struct.unpack_from(">i", log, v1.commit_log_offset + 4)[0] == MESSAGE_MAGIC_CODE_V1


def test_compressed_body_is_stored_as_given_with_its_crc(tmp_path):
    body = zlib.compress(b"a" * 10000, 5)
    with StoreWriter(tmp_path, commit_log_file_size=SMALL_LOG) as w:
        r = w.append("T", body, sys_flag=0x1 | 0x300, born_timestamp=1, store_timestamp=2)
    log = (tmp_path / "commitlog" / f"{0:020d}").read_bytes()
    assert struct.unpack_from(">i", log, 8)[0] == zlib.crc32(body) & 0x7FFFFFFF
    assert log[r.commit_log_offset + 88 : r.commit_log_offset + 88 + len(body)] == body


def test_schedule_topic_tags_code_is_the_delivery_time(tmp_path):
    with StoreWriter(tmp_path) as w:
        level3 = w.append("SCHEDULE_TOPIC_XXXX", b"x", queue_id=2, tags="TagA",
                          properties={"DELAY": "3"}, store_timestamp=5000, born_timestamp=1)
        clamped = w.append("SCHEDULE_TOPIC_XXXX", b"x", properties={"DELAY": "99"},
                           store_timestamp=5000, born_timestamp=1)
        level0 = w.append("SCHEDULE_TOPIC_XXXX", b"x", tags="TagA", properties={"DELAY": "0"},
                          store_timestamp=5000, born_timestamp=1)
        other = w.append("Normal", b"x", tags="TagA", properties={"DELAY": "3"},
                         store_timestamp=5000, born_timestamp=1)
        with pytest.raises(ValueError, match="DELAY property 'x'"):
            w.append("SCHEDULE_TOPIC_XXXX", b"x", properties={"DELAY": "x"}, born_timestamp=1)
    assert level3.tags_code == 5000 + 10_000
    assert clamped.tags_code == 5000 + 7_200_000
    assert level0.tags_code == other.tags_code == tags_code("TagA")
    cq = (tmp_path / "consumequeue" / "SCHEDULE_TOPIC_XXXX" / "2" / f"{0:020d}").read_bytes()
    assert struct.unpack_from(">q", cq, 12)[0] == 15000


def test_mapping_properties_drop_empty_values_and_add_cluster(tmp_path):
    with StoreWriter(tmp_path, cluster="C1", commit_log_file_size=SMALL_LOG) as w:
        r = w.append("T", b"", properties={"b": "", "a": "1", "n": None}, tags="TagA", keys=["k1", "k2"],
                     born_timestamp=1, store_timestamp=2)
    log = (tmp_path / "commitlog" / f"{0:020d}").read_bytes()
    end = r.commit_log_offset + r.store_size
    # HashMap(128) buckets: CLUSTER 28, TAGS 62, KEYS 87, a 97; empty and None values dropped.
    text = b"CLUSTER\x01C1\x02TAGS\x01TagA\x02KEYS\x01k1 k2\x02a\x011\x02"
    assert log[end - len(text):end] == text
    assert struct.unpack_from(">h", log, end - len(text) - 2)[0] == len(text)


# ------------------------------------------------------------ bad input
def test_refuses_a_directory_that_holds_a_store(tmp_path):
    write_golden(tmp_path, rows=GOLDEN_ROWS[:3])
    with pytest.raises(FileExistsError, match="already holds a store"):
        StoreWriter(tmp_path)
    (tmp_path / "afile").write_bytes(b"")
    with pytest.raises(ValueError, match="not a directory"):
        StoreWriter(tmp_path / "afile")


def test_append_mode_checks_file_sizes(tmp_path):
    write_golden(tmp_path, rows=GOLDEN_ROWS[:3])
    with pytest.raises(ValueError, match="commit_log_file_size=65536"):
        StoreWriter(tmp_path, append=True)


def test_oversize_properties_are_refused_and_nothing_is_written(tmp_path):
    with StoreWriter(tmp_path, commit_log_file_size=1 << 20, cluster=None) as w:
        with pytest.raises(ValueError, match="32768 bytes exceed the broker's limit of 32767"):
            w.append("T", b"", properties={"k": "v" * (32768 - 3)}, born_timestamp=1)
        ok = w.append("T", b"", properties={"k": "v" * (32767 - 3)}, born_timestamp=1)
    assert ok.commit_log_offset == 0 and ok.queue_offset == 0


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"topic": "a/b"}, ValueError, "topic pattern"),
        ({"topic": ""}, ValueError, "topic pattern"),
        ({"topic": "T" * 256}, ValueError, "longer than 255"),
        ({"queue_id": -1}, ValueError, "queue_id must be >= 0"),
        ({"queue_id": 2**31}, ValueError, r"queue_id must be in \[0, 2147483647\]"),
        ({"flag": 2**31}, ValueError, "flag must be in"),
        ({"born_timestamp": 2**63}, ValueError, "born_timestamp must be in"),
        ({"reconsume_times": "1"}, TypeError, "reconsume_times must be an int"),
        ({"born_host": "1.2.3.4"}, ValueError, "born_host '1.2.3.4' is not 'ip:port'"),
        ({"born_host": "1.2.3.4:70000"}, ValueError, "port in 0..65535"),
        ({"store_host": "::1:80"}, ValueError, "store_host '::1:80'"),
        ({"body": "text"}, TypeError, "body must be bytes-like"),
        ({"properties": {"a\x01": "x"}}, ValueError, "separator"),
        ({"properties": {"a": "x\x02y"}}, ValueError, "value contains"),
        ({"properties": {"a": 1}}, TypeError, "must be str"),
        ({"properties": {"a": "\ud800"}}, ValueError, "UTF-8"),
        ({"properties": "TAGS\x01x\x02", "tags": "T"}, ValueError, "pre-serialised"),
        ({"body": b"x" * 5000}, ValueError, "cannot fit a commit log file of 4096"),
    ],
)
def test_bad_append_arguments_name_the_problem(tmp_path, kwargs, error, match):
    kwargs = {"topic": "T", "born_timestamp": 1, **kwargs}
    with StoreWriter(tmp_path, commit_log_file_size=4096) as w:
        with pytest.raises(error, match=match):
            w.append(**kwargs)
        assert w.append("T", b"ok", born_timestamp=1).commit_log_offset == 0


def test_v1_topic_length_byte_overflow_is_refused(tmp_path):
    w = StoreWriter(tmp_path, auto_message_version_on_topic_len=False)
    with pytest.raises(ValueError, match="signed length byte of a V1 record"):
        w.append("T" * 128, b"", born_timestamp=1)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"commit_log_file_size": 0}, "commit_log_file_size must be in"),
        ({"commit_log_file_size": 10}, "at least 64 bytes"),
        ({"consume_queue_file_size": -20}, "consume_queue_file_size"),
        ({"ext_file_size": 37}, "ext_file_size must be at least 38 bytes"),
        ({"store_host": "nohost"}, "store_host 'nohost'"),
        ({"cluster": ""}, "cluster"),
        ({"message_delay_level": "1s 5x"}, "'5x'"),
    ],
)
def test_bad_writer_options(tmp_path, kwargs, match):
    with pytest.raises(ValueError, match=match):
        StoreWriter(tmp_path, **kwargs)


def test_register_group_needs_ext_and_valid_sql(tmp_path):
    selector = pytest.importorskip("selector")
    with pytest.raises(ValueError, match="enable_ext=True"):
        StoreWriter(tmp_path / "a").register_group("T", "G", "a = 1")
    w = StoreWriter(tmp_path / "b", enable_ext=True)
    with pytest.raises(selector.SelectorSyntaxError):
        w.register_group("T", "G", "a = = 1")
    with pytest.raises(ValueError, match="group must be"):
        w.register_group("T", "", "a = 1")
    assert w.register_group("T", "G", "a = 1") == SqlGroup("T", "G", "a = 1")
    assert w.groups == [SqlGroup("T", "G", "a = 1")]


def test_append_many_reports_the_bad_message_and_keeps_the_good_ones(tmp_path):
    msgs = [{"topic": "T", "body": b"1", "born_timestamp": 1}, {"topic": "T", "body": b"2", "born_timestamp": 1},
            {"topic": "T", "queue_id": -5, "born_timestamp": 1}]
    w = StoreWriter(tmp_path)
    with pytest.raises(ValueError, match="message #2: queue_id"):
        w.append_many(msgs)
    with pytest.raises(TypeError, match="message #0: .*unexpected keyword argument 'colour'"):
        w.append_many([{"topic": "T", "colour": "red"}])
    assert w.queue_max_offset("T", 0) == 2
    w.close()
    with pytest.raises(ValueError, match="closed"):
        w.append("T", b"")


def test_golden_store_reads_back_through_the_reader(tmp_path):
    write_golden(tmp_path)
    store = cq.Store(tmp_path)
    messages = list(store.commit_log.messages())
    assert len(messages) == len(GOLDEN_ROWS)
    for msg, row in zip(messages, GOLDEN_ROWS):
        assert msg.commit_log_offset == row["commitLogOffset"]
        assert msg.topic == row["topic"] and msg.queue_id == row["queueId"]
        assert msg.queue_offset == row["queueOffset"]
        assert msg.body == base64.b64decode(row["body_b64"])
        assert msg.properties == row["properties"]
        assert msg.born_host == row["bornHost"] and msg.store_host == row["storeHost"]
        assert msg.store_timestamp == row["storeTimestamp"]
    for row in GOLDEN_ROWS:
        unit = store.ext(row["topic"], row["queueId"]).get(row["ext"]["address"])
        assert unit.tags_code == row["ext"]["tagsCode"]
        want = bytes(row["ext"]["bitmap"]) if row["ext"]["bitMapSize"] else None
        assert unit.filter_bitmap == want


# ------------------------------------------------------------ rebuild bitmaps
def digest_tree(root: Path) -> str:
    h = hashlib.sha256()
    for path in sorted(root.rglob("*")):
        if path.is_file():
            h.update(str(path.relative_to(root)).encode() + b"\0" + path.read_bytes())
    return h.hexdigest()


def test_rebuild_bitmaps_reproduces_the_golden_ext_files(tmp_path):
    from cq.writer.rebuild import rebuild_bitmaps

    plain = tmp_path / "plain"
    write_golden(plain, groups=False)  # same records, ext units without bitmaps
    before = digest_tree(plain)
    result = rebuild_bitmaps(plain, tmp_path / "rebuilt", golden_groups())
    assert digest_tree(plain) == before
    assert (result.messages, result.dispatched) == (300, 300)
    assert_same_store(tmp_path / "rebuilt")
    with pytest.raises(FileExistsError):
        rebuild_bitmaps(plain, tmp_path / "rebuilt", golden_groups())


def test_rebuild_of_a_store_without_ext_equals_writing_with_groups(tmp_path):
    from cq.writer.rebuild import rebuild_bitmaps

    config = {**GOLDEN_CONFIG, "enable_ext": False}
    with StoreWriter(tmp_path / "noext", **config) as w:
        for row in GOLDEN_ROWS:
            w.append(**golden_kwargs(row))
    assert not (tmp_path / "noext" / "consumequeue_ext").exists()
    result = rebuild_bitmaps(tmp_path / "noext", tmp_path / "rebuilt", golden_groups(), ext_file_size=1024)
    assert result.groups == [SqlGroup(*g) for g in golden_groups()]
    assert_same_store(tmp_path / "rebuilt")


def test_rebuild_bitmaps_refuses_bad_targets(tmp_path):
    from cq.writer.rebuild import rebuild_bitmaps

    write_golden(tmp_path / "src", rows=GOLDEN_ROWS[:5])
    with pytest.raises(ValueError, match="dest must differ"):
        rebuild_bitmaps(tmp_path / "src", tmp_path / "src", [])
    with pytest.raises(cq.StoreFormatError, match="no CommitLog files"):
        rebuild_bitmaps(tmp_path / "nothing", tmp_path / "out", [])
    assert not (tmp_path / "out").exists()


def test_append_mode_continues_the_broker_written_golden_store(tmp_path):
    """Recovery on files the broker wrote: appending to a copy of the golden store equals writing it all."""
    extra = [dict(golden_kwargs(row), born_timestamp=row["bornTimestamp"] + 10**6) for row in GOLDEN_ROWS[:40]]
    copy = tmp_path / "copy"
    for sub in STORE_DIRS:
        shutil.copytree(GOLDEN / sub, copy / sub)
    with StoreWriter(copy, append=True, **GOLDEN_CONFIG) as w:
        for topic, group, sql in golden_groups():
            w.register_group(topic, group, sql)
        assert w.commit_log_max_offset == 433183
        assert w.queue_max_offset("GoldenFilterTopic", 0) == 100
        assert w.queue_max_offset("GoldenPlainTopic", 1) == 53
        w.append_many(extra)
    fresh = tmp_path / "fresh"
    with StoreWriter(fresh, **GOLDEN_CONFIG) as w:
        for topic, group, sql in golden_groups():
            w.register_group(topic, group, sql)
        w.append_many([golden_kwargs(r) for r in GOLDEN_ROWS] + extra)
    assert_same_store(copy, fresh)


def test_rebuild_fills_placeholders_before_a_queue_that_starts_late(tmp_path):
    """A queue whose first record has queue offset 57 starts in the file of offset 57, after placeholders."""
    from cq.format import encode_record
    from cq.writer.rebuild import rebuild_bitmaps

    records = b"".join(
        encode_record(topic="T", body=b"x", properties="TAGS\x01TagA\x02", queue_offset=57 + i,
                      commit_log_offset=i * 103, born_timestamp=1, store_timestamp=2)
        for i in range(3)
    )
    assert len(records) == 3 * 103
    (tmp_path / "src" / "commitlog").mkdir(parents=True)
    (tmp_path / "src" / "commitlog" / f"{0:020d}").write_bytes(records + bytes(4096 - len(records)))
    result = rebuild_bitmaps(tmp_path / "src", tmp_path / "out", [], consume_queue_file_size=1000,
                             ext_file_size=1024)
    assert (result.messages, result.dispatched) == (3, 3)
    directory = tmp_path / "out" / "consumequeue" / "T" / "0"
    assert os.listdir(directory) == [f"{1000:020d}"]
    data = (directory / f"{1000:020d}").read_bytes()
    units = [struct.unpack_from(">qiq", data, 20 * i) for i in range(11)]
    assert units[:7] == [(0, 0x7FFFFFFF, 0)] * 7
    assert [u[:2] for u in units[7:10]] == [(0, 103), (103, 103), (206, 103)]
    assert units[10] == (0, 0, 0)
    store = cq.Store(tmp_path / "out")
    assert store.consume_queue("T", 0).min_offset <= 57 and store.consume_queue("T", 0).max_offset == 60
    store.close()


def test_record_crc_property_when_enabled(tmp_path):
    """enabledAppendPropCRC: 20 reserved bytes end the record with __CRC32# = CRC of the rest.

    See docs/formats.md#record-crc-property.
    """
    with StoreWriter(tmp_path, commit_log_file_size=SMALL_LOG, enabled_append_prop_crc=True) as w:
        plain = spec_message(w)
        stale = spec_message(w, properties="__CRC32#\x010000000001\x02TAGS\x01TagA\x02KEYS\x01k1")
        empty = spec_message(w, properties="")
    log = (tmp_path / "commitlog" / f"{0:020d}").read_bytes()
    assert plain.store_size == stale.store_size == 123 + 20 and empty.store_size == 123 - 18 + 20
    for r in (plain, stale, empty):
        rec = log[r.commit_log_offset:r.commit_log_offset + r.store_size]
        crc = zlib.crc32(rec[:-20]) & 0x7FFFFFFF
        assert rec[-20:] == b"__CRC32#\x01" + str(crc)[::-1].ljust(10, "0").encode() + b"\x02"
    props_len = struct.unpack_from(">h", log, plain.commit_log_offset + 123 - 18 - 2)[0]
    assert props_len == 18 + 20
    assert log[stale.commit_log_offset + 105:stale.commit_log_offset + 123] == b"TAGS\x01TagA\x02KEYS\x01k1\x02"
    store = cq.Store(tmp_path)
    messages = list(store.commit_log.messages(verify_crc="property"))
    assert [m.properties["TAGS"] for m in messages[:2]] == ["TagA", "TagA"]
    assert all(cq.format.PROPERTY_CRC32 in m.properties for m in messages)
    store.close()
    corrupt = bytearray(log)
    corrupt[plain.commit_log_offset + 16] ^= 1  # FLAG: body CRC still fine, record CRC not
    (tmp_path / "commitlog" / f"{0:020d}").write_bytes(bytes(corrupt))
    store = cq.Store(tmp_path)
    with pytest.raises(cq.StoreFormatError, match="record CRC mismatch"):
        list(store.commit_log.messages(verify_crc="property"))
    store.close()


def test_one_writer_per_store(tmp_path):
    first = StoreWriter(tmp_path, commit_log_file_size=SMALL_LOG)
    spec_message(first)
    with pytest.raises(BlockingIOError, match="locked by another writer"):
        StoreWriter(tmp_path, commit_log_file_size=SMALL_LOG, append=True)
    first.close()
    with StoreWriter(tmp_path, commit_log_file_size=SMALL_LOG, append=True) as again:
        assert spec_message(again).commit_log_offset == 123


def test_compress_body_sets_the_producer_flags(tmp_path):
    from cq.writer.writer import compress_body

    stored, bits = compress_body(b"payload " * 1000)
    assert bits == 0x1 | 0x300 and zlib.decompress(stored) == b"payload " * 1000
    with StoreWriter(tmp_path, commit_log_file_size=SMALL_LOG) as w:
        spec_message(w, body=stored, sys_flag=bits)
    store = cq.Store(tmp_path)
    (msg,) = store.commit_log.messages(verify_crc=True)
    assert msg.body == stored and msg.uncompressed_body() == b"payload " * 1000
    store.close()
    with pytest.raises(ValueError, match="compress_type must be one of"):
        compress_body(b"x", "snappy")
