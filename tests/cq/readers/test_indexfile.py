"""The IndexFile reader on the golden store's index/, written by RocketMQ's own IndexService."""
from __future__ import annotations

import json
import struct

import pytest
from helpers import DATA

import cq
from cq.readers.indexfile import (
    INDEX_ENTRY_SIZE,
    INDEX_HEADER_SIZE,
    IndexFile,
    IndexFiles,
    index_key,
    index_key_hash,
)

GOLDEN = DATA / "golden_store"


def golden_rows() -> list[dict]:
    with open(DATA / "golden_store.jsonl", encoding="utf-8") as f:
        return [json.loads(line) for line in f]


def expected_keys(row: dict) -> list[tuple[str, str]]:
    """("uniq"/"key", value) of every index entry IndexService writes for a message."""
    out = [("uniq", row["uniqKey"])] if row["uniqKey"] else []
    return out + [("key", k) for k in (row["keys"] or "").split(" ") if k]


def test_headers_and_geometry_of_the_golden_index():
    index = IndexFiles(GOLDEN)
    first, second = index.files
    assert (first.hash_slot_num, first.index_num) == (64, 512)   # inferred: the size alone does not say
    assert (second.hash_slot_num, second.index_num) == (64, 512)
    assert first.header.index_count == 512 and second.header.index_count == 72
    assert first.header.begin_timestamp <= first.header.end_timestamp < second.header.begin_timestamp
    assert first.header.begin_phy_offset == 0
    # 582 entries over both files (entry 0 of each is never used)
    assert sum(1 for f in index.files for _ in f.entries()) == 511 + 71 == 582
    index.close()


def test_every_key_and_uniq_key_of_every_message_is_found():
    index = IndexFiles(GOLDEN)
    rows = golden_rows()
    entries = 0
    for row in rows:
        for _kind, key in expected_keys(row):
            entries += 1
            assert row["commitLogOffset"] in index.query(row["topic"], key), (row["topic"], key)
    assert len(rows) == 300 and entries == 582
    index.close()


def test_store_finds_each_message_by_key_and_uniq_key_confirming_the_real_key():
    store = cq.Store(GOLDEN)
    for row in golden_rows()[::7]:
        for kind, key in expected_keys(row):
            found, how, note = cq.find_messages(store, row["topic"], **({"msg_id": key} if kind == "uniq" else
                                                                     {"key": key}))
            assert how == "index" and "index files" in note
            assert row["commitLogOffset"] in [m.commit_log_offset for m in found]
            for m in found:   # hash candidates were confirmed against the record
                if kind == "uniq":
                    assert m.properties["UNIQ_KEY"] == key
                else:
                    assert key in m.keys.split(" ")
    store.close()


def test_keys_are_per_topic_and_confirmed_against_the_record():
    rows = golden_rows()
    topics = {r["topic"] for r in rows}
    by_topic = {t: {k for r in rows if r["topic"] == t for _, k in expected_keys(r)} for t in topics}
    only_filter = min(by_topic["GoldenFilterTopic"] - by_topic["GoldenPlainTopic"])
    index = IndexFiles(GOLDEN)
    assert index.query("GoldenFilterTopic", only_filter)
    assert index.query("GoldenFilterTopic", "no-such-key-anywhere") == []
    index.close()
    store = cq.Store(GOLDEN)
    with pytest.raises(cq.analyses.why.MessageNotFoundError, match="no message of topic 'GoldenPlainTopic' has key"):
        cq.find_messages(store, "GoldenPlainTopic", key=only_filter)
    store.close()


def test_key_hash_is_abs_of_java_hash_with_min_value_zero():
    assert index_key_hash("a") == 97
    assert index_key_hash("polygenelubricants") == 0   # String.hashCode() == Integer.MIN_VALUE
    assert cq.format.java_string_hash("polygenelubricants") == -(2 ** 31)
    assert index_key_hash("TopicTest#x") == abs(cq.format.java_string_hash("TopicTest#x"))
    assert index_key("T", "k") == "T#k"


def test_time_range_bounds_the_lookup():
    index = IndexFiles(GOLDEN)
    row = golden_rows()[0]
    key = row["uniqKey"]
    assert row["commitLogOffset"] in index.query(row["topic"], key, 0, 2**62)
    last = index.files[-1].header.end_timestamp
    assert index.query(row["topic"], key, last + 1_000_000, last + 2_000_000) == []
    index.close()


def test_cyclic_chain_ends_and_short_file_is_an_error(tmp_path):
    src = min((GOLDEN / "index").iterdir())
    path = tmp_path / src.name
    data = bytearray(src.read_bytes())
    base = INDEX_HEADER_SIZE + 64 * 4
    key_hash = struct.unpack_from(">i", data, base + 2 * INDEX_ENTRY_SIZE)[0]
    slot = key_hash % 64
    # a corrupt chain: the slot's head is entry 2, and entries 1 and 2 point at each other
    struct.pack_into(">i", data, INDEX_HEADER_SIZE + slot * 4, 2)
    struct.pack_into(">i", data, base + 1 * INDEX_ENTRY_SIZE + 16, 2)
    struct.pack_into(">i", data, base + 2 * INDEX_ENTRY_SIZE + 16, 1)
    path.write_bytes(bytes(data))
    f = IndexFile(path, hash_slot_num=64)
    # a key with entry 2's hash: its base-31 digits as UTF-16 units hash to exactly that value
    digits, rest = [], key_hash
    for _ in range(7):
        rest, d = divmod(rest, 31)
        digits.append(chr(d))
    key = "".join(reversed(digits))
    assert index_key_hash(key) == key_hash
    phys = f.entry(2)[1]
    found = f.select_phy_offsets(key)   # the broker's walk would loop forever here; ours ends
    assert phys in found and len(found) <= 513
    f.close()
    (tmp_path / "short").write_bytes(b"\0" * 10)
    with pytest.raises(cq.StoreFormatError, match="shorter than its 40-byte header"):
        IndexFile(tmp_path / "short")


def write_index(path, slots: int, num: int, keys: list[str], begin: int = 1_700_000_000_000) -> None:
    """An IndexFile laid out as IndexService writes it (the facts of docs/config-and-index.md)."""
    data = bytearray(INDEX_HEADER_SIZE + slots * 4 + num * INDEX_ENTRY_SIZE)
    heads = [0] * slots
    for i, key in enumerate(keys, 1):
        h = index_key_hash(key)
        pos = INDEX_HEADER_SIZE + slots * 4 + i * INDEX_ENTRY_SIZE
        struct.pack_into(">iqii", data, pos, h, 1000 * i, i % 7, heads[h % slots])
        heads[h % slots] = i
    for s, head in enumerate(heads):
        struct.pack_into(">i", data, INDEX_HEADER_SIZE + s * 4, head)
    struct.pack_into(">qqqqii", data, 0, begin, begin + 7000, 1000, 1000 * len(keys), sum(map(bool, heads)),
                     len(keys) + 1)
    path.write_bytes(bytes(data))


@pytest.mark.parametrize("slots, num", [(32, 128), (16, 100), (7, 50)])
def test_geometry_is_inferred_and_every_key_found(tmp_path, slots, num):
    keys = [index_key("T", f"k{i}") for i in range(num - 1)]
    write_index(tmp_path / "f", slots, num, keys)
    f = IndexFile(tmp_path / "f")
    assert (f.hash_slot_num, f.index_num) == (slots, num)
    for i, key in enumerate(keys, 1):
        assert 1000 * i in f.select_phy_offsets(key)
    # a time range that excludes the entry's time finds nothing
    assert f.select_phy_offsets(keys[0], 0, 1_600_000_000_000) == []
    f.close()
