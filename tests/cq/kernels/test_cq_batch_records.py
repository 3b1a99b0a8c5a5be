"""``CommitLog.decode_columns`` (every field) equals ``read_message`` per offset: golden store, hand-made records,
corrupt bytes."""
from __future__ import annotations

import shutil
import struct

import numpy as np
import pytest
from helpers import DATA, ENGINE_CASES, kernels

import cq
from cq import format as fmt
from cq.readers.commitlog import CommitLog

FILE_SIZE = 1 << 16


def _row(cols, i) -> dict:
    out = {name: cols.value(name, i) for name, _ in fmt.RECORD_FIELDS}
    out.update(born_port=int(out["born_host"].rsplit(":", 1)[1]), store_port=int(out["store_host"].rsplit(":", 1)[1]),
               properties=list(out["properties"].items()))
    return out


def _message_row(m) -> dict:
    return {
        "store_size": m.store_size, "magic_code": m.magic_code, "body_crc": m.body_crc, "queue_id": m.queue_id,
        "flag": m.flag, "queue_offset": m.queue_offset, "commit_log_offset": m.commit_log_offset,
        "sys_flag": m.sys_flag, "born_timestamp": m.born_timestamp,
        "born_port": int(m.born_host.rsplit(":", 1)[1]), "store_timestamp": m.store_timestamp,
        "store_port": int(m.store_host.rsplit(":", 1)[1]), "reconsume_times": m.reconsume_times,
        "prepared_transaction_offset": m.prepared_transaction_offset, "born_host": m.born_host,
        "store_host": m.store_host, "topic": m.topic, "body": m.body, "tags": m.tags, "keys": m.keys,
        "properties": list(m.properties.items()),
    }


def _outcome(log, offsets):
    """(rows, error) of read_message per offset and of decode_columns; errors as (message, path, offset)."""
    try:
        per_item = [_message_row(log.read_message(int(o))) for o in offsets]
        err = None
    except cq.StoreFormatError as exc:
        per_item, err = None, (str(exc), exc.path, exc.offset)
    try:
        cols = log.decode_columns(np.asarray(offsets, dtype=np.int64))
        batch, berr = [_row(cols, i) for i in range(len(cols))], None
    except cq.StoreFormatError as exc:
        batch, berr = None, (str(exc), exc.path, exc.offset)
    return (per_item, err), (batch, berr)


def _assert_same(log, offsets):
    expected, got = _outcome(log, offsets)
    assert got == expected
    return expected


def _golden_offsets(store):
    offs = []
    for topic in store.topics():
        for q in store.queue_ids(topic):
            units = store.consume_queue(topic, q).read(0, 1 << 20)
            offs.extend(units["commit_log_offset"].tolist())
    return offs


def test_golden_store_every_record_in_queue_and_shuffled_order():
    store = cq.Store(DATA / "golden_store")
    offs = _golden_offsets(store)
    rows, err = _assert_same(store.commit_log, offs)
    assert err is None and len(rows) == len(offs) >= 300
    assert any(r["tags"] is None for r in rows) or any(r["keys"] for r in rows)
    order = np.random.default_rng(3).permutation(len(offs))
    _assert_same(store.commit_log, [offs[i] for i in order])
    cols = store.commit_log.decode_columns(np.zeros(0, dtype=np.int64))
    assert len(cols) == 0 and cols.columns["body"][0].tolist() == [0]


def _handmade(tmp_path):
    recs = [
        {"topic": "T", "body": b"", "properties": {}},
        {"topic": "T", "body": b"hello", "properties": "a\x01x\x02TAGS\x01t1\x02a\x01y\x02KEYS\x01k1 k2\x02"},
        {"topic": "T", "body": b"\x00\xff", "properties": "\x01nokey\x02novalue\x01\x02\x02x\x02TAGS\x01\x02"},
        {"topic": "T6", "body": b"b6", "properties": {"TAGS": "标签", "city": "北京"}, "sys_flag": 0x30,
             "born_host": "[2001:db8::1]:5000", "store_host": "[::1]:10911", "born_timestamp": 7, "store_timestamp": 9},
        {"topic": "x" * 200, "body": b"long topic", "properties": {"KEYS": "k"}, "reconsume_times": 3, "flag": -1,
             "queue_offset": 1 << 40, "prepared_transaction_offset": -5, "born_host": "10.0.0.2:65535"},
    ]
    data = b""
    offsets = []
    for r in recs:
        offsets.append(len(data))
        data += fmt.encode_record(commit_log_offset=len(data), **r)
    d = tmp_path / "commitlog"
    d.mkdir()
    path = d / fmt.file_name(0)
    path.write_bytes(data + bytes(FILE_SIZE - len(data)))
    return d, path, offsets


def test_handmade_records_hosts_duplicates_and_empty_properties(tmp_path):
    d, _, offsets = _handmade(tmp_path)
    log = CommitLog(d)
    rows, err = _assert_same(log, offsets + offsets[::-1])
    assert err is None
    assert rows[1]["properties"] == [("a", "y"), ("TAGS", "t1"), ("KEYS", "k1 k2")]
    assert rows[3]["born_host"] == "[2001:db8::1]:5000" and rows[3]["tags"] == "标签"
    assert rows[2]["tags"] is None and rows[0]["properties"] == []
    log.close()


@pytest.mark.parametrize("where, patch", [
    (4, struct.pack(">i", 0x12345678)),           # bad magic
    (4, struct.pack(">i", fmt.BLANK_MAGIC_CODE)),  # blank record
    (0, struct.pack(">i", 50)),                   # TOTALSIZE too small
    (0, struct.pack(">i", FILE_SIZE)),            # TOTALSIZE past the file
    (0, struct.pack(">i", 2000)),                 # fields do not add up
    (36, struct.pack(">i", 0x30)),                # hosts claim IPv6
])
def test_corrupt_record_same_error_as_read_message(tmp_path, where, patch):
    d, path, offsets = _handmade(tmp_path)
    with open(path, "r+b") as f:
        f.seek(offsets[2] + where)
        f.write(patch)
    log = CommitLog(d)
    (_, err), _ = _outcome(log, offsets)
    assert err is not None and err[1] == str(path)
    _assert_same(log, offsets)
    _assert_same(log, [offsets[0], offsets[2], 999_999_999])
    _assert_same(log, [offsets[0], 999_999_999, offsets[2]])  # outside the log comes first
    log.close()


def test_body_and_topic_lengths_past_the_record(tmp_path):
    d, path, offsets = _handmade(tmp_path)
    body_len_at = offsets[1] + 4 + 4 + 4 + 4 + 4 + 8 + 8 + 4 + 8 + 8 + 8 + 8 + 4 + 8
    with open(path, "r+b") as f:
        f.seek(body_len_at)
        f.write(struct.pack(">i", 10_000))
    log = CommitLog(d)
    (_, err), _ = _outcome(log, offsets)
    assert err is not None and err[2] == body_len_at and "BODYLENGTH" in err[0]
    _assert_same(log, offsets)
    log.close()
    with open(path, "r+b") as f:
        f.seek(body_len_at)
        f.write(struct.pack(">i", 5))
        f.seek(body_len_at + 4 + 5)
        f.write(b"\x90")  # negative V1 topic length
    log = CommitLog(d)
    (_, err), _ = _outcome(log, offsets)
    assert err is not None and "negative topic length" in err[0]
    _assert_same(log, offsets)
    log.close()


def test_misaligned_offsets_and_store_copy(tmp_path):
    root = tmp_path / "store"
    shutil.copytree(DATA / "golden_store", root)
    store = cq.Store(root)
    offs = _golden_offsets(store)
    for probe in (offs[5] + 1, offs[5] + 4, store.commit_log.max_offset, -1):
        _assert_same(store.commit_log, [offs[0], probe, offs[1]])


@pytest.mark.parametrize("engine", ENGINE_CASES)
def test_span_kernels_reject_spans_outside_the_buffer(engine):
    engine_kernels = kernels(engine)
    buf = np.zeros(100, dtype=np.uint8)
    big = np.array([1 << 62], dtype=np.int64)
    for starts, lengths in ((big, big), (np.array([90]), np.array([11])), (np.array([-1]), np.array([1])),
                            (np.array([0]), np.array([-1])), (np.array([0, 1]), np.array([1]))):
        starts, lengths = starts.astype(np.int64), lengths.astype(np.int64)
        with pytest.raises(ValueError):
            engine_kernels.gather_spans(buf, starts, lengths)
    offsets, data = engine_kernels.gather_spans(buf, np.array([90], dtype=np.int64), np.array([10], dtype=np.int64))
    assert offsets.tolist() == [0, 10] and len(data) == 10


@pytest.mark.parametrize("engine", ENGINE_CASES)
def test_decode_columns_rejects_positions_anywhere(engine):
    engine_kernels = kernels(engine)
    buf = np.zeros(200, dtype=np.uint8)
    for pos in (-1, 195, 1 << 62, -(1 << 62)):
        _, err = engine_kernels.decode_columns(buf, np.array([pos], dtype=np.int64), len(buf), fmt.ALL_RECORD_FIELDS)
        assert err is not None and err[0] == 0
    with pytest.raises(ValueError):
        engine_kernels.decode_columns(buf, np.array([0], dtype=np.int64), 201, fmt.ALL_RECORD_FIELDS)


@pytest.mark.parametrize("engine", ENGINE_CASES)
def test_decoded_properties_equal_the_dict_parse_on_random_text(engine):
    """Records whose properties text is random separators and key bytes: the decoder's map (order,
    repeated keys) and its ``tags``/``keys`` columns are what the broker's dict parse gives."""
    engine_kernels = kernels(engine)
    rng = np.random.default_rng(11)
    alphabet = np.frombuffer(b"\x01\x02\x01\x02abTAGSKEY", dtype=np.uint8)
    texts = [alphabet[rng.integers(0, len(alphabet), int(rng.integers(0, 40)))].tobytes() for _ in range(2000)]
    texts += [b"TAGS\x01a\x02KEYS\x01b\x02TAGS\x01c", b"\x02\x02", b"\x01\x01\x01", b"k\x01\x01v\x02"]
    host = fmt.parse_host("127.0.0.1:1")[0]
    topic = fmt.encode_topic_field(b"T", fmt.MESSAGE_MAGIC_CODE_V2)
    records = [bytes(fmt.pack_record(fmt.MESSAGE_MAGIC_CODE_V2, 0, 0, 0, 0, 0, 0, 0, host, 0, host, 0, 0, b"",
                                     topic, t)) for t in texts]
    buf = np.frombuffer(b"".join(records), dtype=np.uint8)
    positions = np.concatenate([[0], np.cumsum([len(r) for r in records])[:-1]]).astype(np.int64)
    cols, err = engine_kernels.decode_columns(buf, positions, len(buf),
                                              fmt.record_field_mask(["properties", "tags", "keys"]))
    assert err is None
    dicts = engine_kernels.property_dicts(*cols["properties"])
    tags = engine_kernels.texts_list(*cols["tags"][:2])
    keys = engine_kernels.texts_list(*cols["keys"][:2])
    for i, t in enumerate(texts):
        expected = fmt.decode_properties_bytes(t)
        assert list(dicts[i].items()) == list(expected.items()), t
        assert (tags[i] if cols["tags"][2][i] else None) == expected.get("TAGS")
        assert (keys[i] if cols["keys"][2][i] else None) == expected.get("KEYS")
