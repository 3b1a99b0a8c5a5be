"""The data source's batch reader (``pyspark_udfs._reader.read_slice``) row for row against
``cq``'s per-item reads (``ConsumeQueueExt.get``, ``CommitLog.read_message``), on the golden
store and on corrupt copies of it. No Spark session: the reader is called as a worker calls it."""
from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest
from helpers import DATA

import cq
from cq import format as fmt

pytest.importorskip("pyspark")
pytestmark = pytest.mark.spark

FILTER_TOPIC = "GoldenFilterTopic"


def _read(root, topic, queue_id, *, table="messages", **kw):
    from pyspark_udfs import _reader
    from pyspark_udfs.datasource import ConsumeQueueSlice, ReadOptions

    _reader._STORES.clear()  # a fresh store per call: the tests patch copies on disk
    options = ReadOptions(path=str(root), table=table, **kw)
    n = len(cq.Store(root).consume_queue(topic, queue_id))
    batches = list(_reader.read_slice(options, options.schema(), ConsumeQueueSlice(topic, queue_id, 0, n), []))
    return pa.Table.from_batches(batches).to_pylist() if batches else []


def _expected(root, topic, queue_id, *, messages=True):
    store = cq.Store(root)
    ext = store.ext(topic, queue_id)
    log = store.commit_log
    rows = []
    for qo, u in enumerate(store.consume_queue(topic, queue_id).read(0, 1 << 20)):
        slot = int(u["tags_code"])
        unit = ext.get(slot) if ext is not None and fmt.is_ext_addr(slot) else None
        row = {
            "topic": topic, "queue_id": queue_id, "queue_offset": qo,
            "commit_log_offset": int(u["commit_log_offset"]), "store_size": int(u["size"]),
            "tags_code": unit.tags_code if unit else (None if fmt.is_ext_addr(slot) else slot),
            "msg_store_time": unit.msg_store_time if unit else None,
            "filter_bitmap": unit.filter_bitmap if unit else None,
        }
        if messages:
            m = log.read_message(row["commit_log_offset"])
            row.update(tags=m.tags, keys=m.keys, uniq_key=m.properties.get(fmt.PROPERTY_UNIQ_KEY),
                       properties=list(m.properties.items()), body=m.body,
                       born_timestamp=m.born_timestamp, born_host=m.born_host,
                       store_timestamp=m.store_timestamp, store_host=m.store_host,
                       sys_flag=m.sys_flag, reconsume_times=m.reconsume_times)
        else:
            row["ext_address"] = slot if fmt.is_ext_addr(slot) else None
        rows.append(row)
    return rows


def _queues(root):
    store = cq.Store(root)
    return [(t, q) for t in store.topics() for q in store.queue_ids(t)]


@pytest.mark.parametrize("table", ["messages", "consumequeue"])
def test_every_queue_of_the_golden_store_equals_per_item_reads(table):
    root = DATA / "golden_store"
    total = 0
    for topic, q in _queues(root):
        got = _read(root, topic, q, table=table)
        assert got == _expected(root, topic, q, messages=table == "messages"), (topic, q)
        total += len(got)
    assert total >= 300


def test_decisions_rows_not_read_stay_null():
    root = DATA / "golden_store"
    store = cq.Store(root)
    rows = _read(root, FILTER_TOPIC, 0, group="GID_SQL_A", sql="a > 5 AND b = 'abc'", decisions=True)
    expected = {r["queue_offset"]: r for r in _expected(root, FILTER_TOPIC, 0)}
    assert rows and any(r["matched_by_commit_log"] is None for r in rows)
    assert any(r["matched_by_commit_log"] is not None for r in rows)
    for r in rows:
        e = expected[r["queue_offset"]]
        if r["matched_by_commit_log"] is None:
            assert r["body"] is None and r["properties"] is None and r["born_host"] is None
        else:
            assert (r["body"], r["properties"], r["store_host"]) == (e["body"], e["properties"], e["store_host"])
    store.close()


def _record_with_properties(root):
    store = cq.Store(root)
    for u in store.consume_queue(FILTER_TOPIC, 0).read(0, 1 << 20):
        off = int(u["commit_log_offset"])
        m = store.commit_log.read_message(off)
        if m.tags and m.keys:
            index = store.commit_log.file_index(off)
            start, path = store.commit_log.files[index]
            raw = bytes(store.commit_log.buffer(index)[off - start:off - start + m.store_size])
            store.close()
            return path, off - start, raw, m
    raise AssertionError("no record with tags and keys")


def test_malformed_utf8_property_decodes_as_read_message(golden_copy):
    path, pos, raw, m = _record_with_properties(golden_copy)
    at = raw.rindex(m.tags.encode())  # first byte of the TAGS value
    with open(path, "r+b") as f:
        f.seek(pos + at)
        f.write(b"\xff")
    got = _read(golden_copy, FILTER_TOPIC, 0)
    expected = _expected(golden_copy, FILTER_TOPIC, 0)
    assert got == expected
    assert any("\ufffd" in (r["tags"] or "") for r in got)


def test_corrupt_record_raises_read_message_error(golden_copy):
    path, pos, _, _ = _record_with_properties(golden_copy)
    with open(path, "r+b") as f:
        f.seek(pos + 4)
        f.write(b"\x00\x00\x00\x01")  # bad magic code
    with pytest.raises(cq.StoreFormatError) as per_item:
        _expected(golden_copy, FILTER_TOPIC, 0)
    with pytest.raises(cq.StoreFormatError) as batch:
        _read(golden_copy, FILTER_TOPIC, 0)
    assert (str(batch.value), batch.value.path, batch.value.offset) == (
        str(per_item.value), per_item.value.path, per_item.value.offset)
    assert batch.value.offset == pos


def test_reader_arrays_are_schema_types():
    from pyspark.sql.pandas.types import to_arrow_schema

    from pyspark_udfs import _reader
    from pyspark_udfs.datasource import ConsumeQueueSlice, ReadOptions

    options = ReadOptions(path=str(DATA / "golden_store"), topic=FILTER_TOPIC)
    schema = options.schema()
    batches = list(_reader.read_slice(options, schema, ConsumeQueueSlice(FILTER_TOPIC, 0, 0, 10), []))
    assert batches and all(b.schema == to_arrow_schema(schema) for b in batches)
    assert np.sum([b.num_rows for b in batches]) == 10


@pytest.mark.parametrize("kind, expr", [
    ("sql", "a > 5 AND b = 'abc'"),
    ("sql", "TAGS = 'TagA' OR color IN ('red', 'grün')"),
    ("sql", "num BETWEEN 10 AND 20 OR (city IS NOT NULL AND city = '北京')"),
    ("tags", "TagA || TagB"),
    ("tags", "*"),
    ("tags", "TagC"),
])
def test_vectorised_layer1_equals_the_filter_unit_by_unit(kind, expr):
    from pyspark_udfs import _reader
    from pyspark_udfs.datasource import ReadOptions

    root = DATA / "golden_store"
    store = cq.Store(root)
    checked = 0
    for topic, q in _queues(root):
        slots = store.consume_queue(topic, q).read(0, 1 << 20)["tags_code"]
        tags_code, known, _, ext_batch, _ = _reader._resolve_ext(store, topic, q, slots)
        candidates = np.random.default_rng(q).random(len(slots)) < 0.8
        for group in ("GID_SQL_A", "GID_SQL_B", "GID_SQL_C", "G_other"):
            options = ReadOptions(path=str(root), group=group, **{kind: expr})
            gf = _reader._GroupFilter(store, options, topic)
            for born_time in (0, 1 << 62):
                if kind == "sql":
                    gf.filter.born_time = born_time
                fast = candidates & gf.layers.layer1(tags_code, known=known, ext_batch=ext_batch)[0]
                slow = np.zeros(len(candidates), dtype=bool)
                for i in np.flatnonzero(candidates).tolist():
                    slow[i] = gf.filter.is_matched_by_consume_queue(int(tags_code[i]) if known[i] else None,
                                                                    ext_batch.unit(i) if ext_batch is not None else None)
                assert fast.tolist() == slow.tolist(), (topic, q, group, born_time)
                checked += int(candidates.sum())
    assert checked > 0
    store.close()
