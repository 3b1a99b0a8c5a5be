"""The readers agree with every field of every line of golden_store.jsonl (RocketMQ's own reading)."""
from __future__ import annotations

import base64

import numpy as np
import pytest
from helpers import DATA, load_jsonl, tree_snapshot

import cq
from cq import format as fmt

GOLDEN = DATA / "golden_store"
ROWS = load_jsonl("golden_store.jsonl")


@pytest.fixture(scope="module")
def store():
    s = cq.Store(GOLDEN)
    yield s
    s.close()


def test_layout(store):
    assert store.topics() == ["GoldenFilterTopic", "GoldenPlainTopic"]
    assert store.queue_ids("GoldenFilterTopic") == [0, 1]
    assert store.commit_log.file_size == 65536
    assert store.consume_queue("GoldenFilterTopic", 0).file_size == 1000
    assert store.ext("GoldenFilterTopic", 0).file_size == 1024


def test_every_message_field(store):
    msgs = list(store.commit_log.messages(verify_crc=True))
    assert len(msgs) == len(ROWS) == 300
    by_offset = {m.commit_log_offset: m for m in msgs}
    mismatches = []
    for row in ROWS:
        m = by_offset[row["commitLogOffset"]]
        expect = {
            "topic": row["topic"], "queue_id": row["queueId"], "queue_offset": row["queueOffset"],
            "commit_log_offset": row["commitLogOffset"], "store_size": row["storeSize"],
            "magic_code": row["magicCode"], "body_crc": row["bodyCRC"], "flag": row["flag"],
            "sys_flag": row["sysFlag"], "born_timestamp": row["bornTimestamp"],
            "store_timestamp": row["storeTimestamp"], "born_host": row["bornHost"],
            "store_host": row["storeHost"], "reconsume_times": row["reconsumeTimes"],
            "prepared_transaction_offset": row["preparedTransactionOffset"], "msg_id": row["msgId"],
            "tags": row["tags"] or None, "keys": row["keys"] or None, "properties": row["properties"],
            "body": base64.b64decode(row["body_b64"]),
        }
        for name, value in expect.items():
            if getattr(m, name) != value:
                mismatches.append((row["commitLogOffset"], name, getattr(m, name), value))
        if len(m.body) != row["bodyLength"] or m.uncompressed_body() != m.body:
            mismatches.append((row["commitLogOffset"], "body", len(m.body), row["bodyLength"]))
        if m.properties.get("UNIQ_KEY") != row["uniqKey"]:
            mismatches.append((row["commitLogOffset"], "uniqKey", m.properties.get("UNIQ_KEY"), row["uniqKey"]))
        if fmt.decode_properties(row["propertiesString"]) != m.properties:
            mismatches.append((row["commitLogOffset"], "propertiesString", None, None))
        if cq.tags_code(m.tags) != row["tagsCodeComputed"]:
            mismatches.append((row["commitLogOffset"], "tagsCodeComputed", cq.tags_code(m.tags), row["tagsCodeComputed"]))
    assert not mismatches, mismatches[:10]


def test_read_message_by_offset_matches_the_walk(store):
    for row in ROWS[::7]:
        m = store.commit_log.read_message(row["commitLogOffset"], verify_crc=True)
        assert (m.topic, m.queue_offset, m.store_size) == (row["topic"], row["queueOffset"], row["storeSize"])


def test_every_consume_queue_unit(store):
    for (topic, qid) in {(r["topic"], r["queueId"]) for r in ROWS}:
        rows = sorted((r for r in ROWS if (r["topic"], r["queueId"]) == (topic, qid)), key=lambda r: r["queueOffset"])
        cqueue = store.consume_queue(topic, qid)
        assert (cqueue.min_offset, cqueue.max_offset) == (0, len(rows))
        units = cqueue.read()
        assert units.dtype.names == ("commit_log_offset", "size", "tags_code")
        assert units.dtype["commit_log_offset"] == np.dtype(np.int64) and units.dtype["size"] == np.dtype(np.int32)
        assert units.dtype["tags_code"].isnative
        got = [(int(u["commit_log_offset"]), int(u["size"]), int(u["tags_code"])) for u in units]
        want = [(r["cq"]["commitLogOffset"], r["cq"]["size"], r["cq"]["tagsCode"]) for r in rows]
        assert got == want
        assert all(cq.is_ext_addr(t) == r["cq"]["isExtAddr"] for (_, _, t), r in zip(got, rows))
        # slices and batches agree with the whole
        assert cqueue.read(45, 10).tolist() == units[45:55].tolist()
        columns = cqueue.read_columns()
        assert list(columns) == list(units.dtype.names)
        for name, column in columns.items():
            assert column.dtype == units.dtype[name] and column.flags.c_contiguous and column.flags.aligned
            assert column.tolist() == units[name].tolist()
        assert {k: v.tolist() for k, v in cqueue.read_columns(45, 10).items()} == \
            {k: units[k][45:55].tolist() for k in columns}
        batches = list(cqueue.iter_batches(batch_size=7))
        assert batches[0][0] == 0 and np.concatenate([b for _, b in batches]).tolist() == units.tolist()


def test_every_ext_unit(store):
    for row in ROWS:
        ext = store.ext(row["topic"], row["queueId"])
        e = row["ext"]
        assert e is not None
        assert cq.undecorate(e["address"]) == e["fileOffset"]
        assert cq.decorate(e["fileOffset"]) == e["address"]
        unit = ext.get(row["cq"]["tagsCode"])
        assert unit == cq.CqExtUnit(e["size"], e["tagsCode"], e["msgStoreTime"], e["bitMapSize"],
                                    bytes(e["bitmap"]) if e["bitMapSize"] else None), row["commitLogOffset"]


def test_ext_walk_lists_each_unit_once_in_order(store):
    for (topic, qid) in {(r["topic"], r["queueId"]) for r in ROWS}:
        rows = sorted((r for r in ROWS if (r["topic"], r["queueId"]) == (topic, qid)), key=lambda r: r["queueOffset"])
        walked = list(store.ext(topic, qid).units())
        assert [a for a, _ in walked] == [r["ext"]["address"] for r in rows]
        assert [u.tags_code for _, u in walked] == [r["ext"]["tagsCode"] for r in rows]


def test_ext_read_many_agrees_with_get(store):
    ext = store.ext("GoldenFilterTopic", 1)
    addrs = store.consume_queue("GoldenFilterTopic", 1).read()["tags_code"]
    probe = np.concatenate([addrs, [5, cq.decorate(ext.max_offset), cq.decorate(10**9)]])
    found, tags, times = ext.read_many(probe)
    for a, f, t, st in zip(probe.tolist(), found, tags.tolist(), times.tolist()):
        unit = ext.get(a)
        assert f == (unit is not None)
        if unit is not None:
            assert (t, st) == (unit.tags_code, unit.msg_store_time)


def test_gather_properties_agrees_with_messages(store):
    offsets = [r["commitLogOffset"] for r in ROWS]
    props = store.commit_log.gather_properties(offsets)
    assert props == [r["properties"] for r in ROWS]


def test_reading_changes_no_byte():
    before = tree_snapshot(GOLDEN)
    s = cq.Store(GOLDEN)
    list(s.commit_log.messages(verify_crc=True))
    for t in s.topics():
        for q in s.queue_ids(t):
            s.consume_queue(t, q).read()
            list(s.ext(t, q).units())
    list(s.consume("GoldenFilterTopic", "G", tags="TagA || TagB"))
    s.close()
    assert tree_snapshot(GOLDEN) == before


def test_maps_are_read_only(store):
    store.consume_queue("GoldenPlainTopic", 0).read()
    buf = store.commit_log.buffer(0)
    assert buf.readonly
    with pytest.raises(TypeError):
        buf[0] = 1


@pytest.mark.parametrize("tags", ["TagA", "TagA || TagB", "标签", "Ωmega || TagC", "*", "NoSuchTag", "   "])
@pytest.mark.parametrize("topic", ["GoldenFilterTopic", "GoldenPlainTopic"])
def test_consume_by_tags_equals_exact_tag_match(store, topic, tags):
    sub = cq.parse_tag_subscription(tags)
    want = [(r["queueId"], r["queueOffset"]) for r in ROWS if r["topic"] == topic
            and (sub.is_sub_all or (not sub.tags_set and r["tags"] is not None and cq.tags_code(r["tags"]) in sub.code_set)
                 or (r["tags"] in sub.tags_set))]
    result = store.consume(topic, "G", tags=tags)
    got = [(m.queue_id, m.queue_offset) for m in result]
    assert got == sorted(want)
    st = result.stats
    assert st.units_scanned == sum(1 for r in ROWS if r["topic"] == topic)
    assert st.delivered == len(got)
    assert st.passed_consume_queue >= st.passed_commit_log >= st.delivered
