"""Readers kept across a stream's triggers and a worker's tasks, checked at each use
(docs/live.md#cached-readers); the streaming source's partitions, in-process (no JVM)."""
from __future__ import annotations

import os
import shutil

import numpy as np
import pyarrow as pa
import pytest

import cq
from cq import format as fmt
from cq.writer.writer import StoreWriter
from pyspark_udfs import _reader
from pyspark_udfs.datasource import ConsumeQueueSlice, ReadOptions
from pyspark_udfs.streaming import RocketMQStreamReader, StreamOptions, pack_ranges

TOPIC = "CacheTopic"
CL_FILE = 4096


def _send(w: StoreWriter, n: int, seqs: dict, queues: int = 2, body: bytes = b"z" * 60) -> None:
    for i in range(n):
        q = i % queues
        seq = seqs.get(q, 0)
        seqs[q] = seq + 1
        w.append(TOPIC, body, queue_id=q, tags="TagA", properties={"seq": str(seq)})
    w.flush()


def _writer(root) -> StoreWriter:
    return StoreWriter(root, commit_log_file_size=CL_FILE, consume_queue_file_size=20 * 20)


def _expire_front(root, keep_from: int) -> None:
    """Delete CommitLog files below ``keep_from`` and the ConsumeQueue files whose units all point
    below it, as the broker's clean-up services do."""
    for start, path in fmt.list_queue_files(root / "commitlog"):
        if start + os.path.getsize(path) <= keep_from:
            os.remove(path)
    for qdir in (root / "consumequeue" / TOPIC).iterdir():
        for _, path in fmt.list_queue_files(qdir)[:-1]:
            if int(np.fromfile(path, dtype=fmt.CQ_UNIT_DTYPE)["commit_log_offset"].max()) < keep_from:
                os.remove(path)


def _seqs(store: cq.Store, cut: cq.StoreCut) -> dict[int, list[int]]:
    out: dict[int, list[int]] = {}
    for m in store.consume(TOPIC, "G", tags="*", cut=cut):
        out.setdefault(m.queue_id, []).append(int(m.properties["seq"]))
    return out


def _open_queue_files(root) -> int | None:
    """ConsumeQueue files this process holds open (a map holds its file), or None off Linux."""
    if not os.path.isdir("/proc/self/fd"):
        return None
    held = 0
    for fd in os.listdir("/proc/self/fd"):
        try:
            held += os.readlink(f"/proc/self/fd/{fd}").startswith(str(root / "consumequeue"))
        except OSError:
            pass
    return held


def test_kept_driver_store_sees_appends_and_expired_files_and_holds_no_file(tmp_path, monkeypatch):
    root = tmp_path / "store"
    w = _writer(root)
    seqs: dict = {}
    _send(w, 40, seqs)
    store = cq.Store(root)
    cut = store.cut(TOPIC, keep_readers=True)
    assert cut.queues == ((TOPIC, 0, 0, 20), (TOPIC, 1, 0, 20))
    _send(w, 160, seqs)  # the broker appends between two triggers, into new files too
    assert store.replaced() is None
    cold = []
    recover = cq.ConsumeQueue._recover
    monkeypatch.setattr(cq.ConsumeQueue, "_recover",
                        lambda self, from_offset=None: cold.append(from_offset is None) or recover(self, from_offset))
    cut = store.cut(TOPIC, keep_readers=True)
    assert cold == [False, False]  # each queue's recovery went on from its previous end
    monkeypatch.undo()
    assert cut.queues == ((TOPIC, 0, 0, 100), (TOPIC, 1, 0, 100))
    assert _open_queue_files(root) in (0, None)  # the queue readers kept their ends, not their files
    assert _seqs(store, cut) == {0: list(range(100)), 1: list(range(100))}
    keep_from = 3 * CL_FILE
    _expire_front(root, keep_from)
    _send(w, 2, seqs)
    assert store.replaced() is None  # files expired and appended: followed, not replaced
    cut = store.cut(TOPIC, keep_readers=True)
    fresh = cq.Store(root).cut(TOPIC)
    assert cut == fresh and cut.commit_log_min == keep_from  # what a new Store sees
    got = _seqs(store, cut)
    assert [q for q in got] == [0, 1] and all(s[-1] == 100 for s in got.values())
    assert all(s[0] == cut.queue_range(TOPIC, q)[0] > 0 for q, s in got.items())
    w.close()


def test_worker_cache_reads_appends_and_expired_files_through_planned_cuts(tmp_path, monkeypatch):
    monkeypatch.setattr(_reader, "_STORES", cq.StoreCache())
    root = tmp_path / "store"
    w = _writer(root)
    seqs: dict = {}
    _send(w, 40, seqs)
    options = ReadOptions.parse({"path": str(root), "topic": TOPIC})
    schema = options.schema()

    def read(q: int, start: int, end: int, cut: cq.StoreCut) -> list[int]:
        part = ConsumeQueueSlice(TOPIC, q, start, end, commit_log_min=cut.commit_log_min,
                                 commit_log_end=cut.commit_log_end)
        batches = list(_reader.read_slice(options, schema, part, []))
        return pa.Table.from_batches(batches, schema=batches[0].schema)["queue_offset"].to_pylist() \
            if batches else []

    planner = cq.Store(root)
    assert read(0, 0, 20, planner.cut(TOPIC)) == list(range(20))
    kept = _reader._STORES.get(str(root))
    _send(w, 160, seqs)
    cut = planner.cut(TOPIC)
    assert read(0, 20, 100, cut) == list(range(20, 100))  # appended after the worker cached its Store
    assert read(1, 90, 100, cut) == list(range(90, 100))
    assert _reader._STORES.get(str(root)) is kept
    _expire_front(root, 4 * CL_FILE)
    cut = planner.cut(TOPIC)
    lo = cut.queue_range(TOPIC, 1)[0]
    assert lo > 20
    # queue 1's first files are gone, some never mapped by the worker: it lists them again
    # (its cached end is not behind this cut, so only the expired first file tells it to)
    assert read(1, 0, 100, cut) == list(range(lo, 100))
    w.close()


def test_replaced_store_is_opened_again(tmp_path):
    root = tmp_path / "store"
    with _writer(root) as w:
        _send(w, 20, {}, body=b"old")
    cache = cq.StoreCache()
    first = cache.get(root)
    assert {m.body for m in first.consume(TOPIC, "G", tags="*")} == {b"old"}  # maps the files
    shutil.rmtree(root)
    with _writer(root) as w:
        _send(w, 20, {}, body=b"new")
    assert first.replaced() is not None
    second = cache.get(root)
    assert second is not first
    assert {m.body for m in second.consume(TOPIC, "G", tags="*")} == {b"new"}
    shutil.rmtree(root)
    with pytest.raises(cq.StoreFormatError, match="no longer exists"):
        cache.get(root)
    assert root not in cache


def test_a_mapped_file_replaced_in_place_is_seen(tmp_path):
    root = tmp_path / "store"
    with _writer(root) as w:
        _send(w, 20, {})
    store = cq.Store(root)
    list(store.consume_queue(TOPIC, 0).read(0, 5))  # maps the queue's file
    path = store.consume_queue(TOPIC, 0).files[0][1]
    copy = str(path) + ".copy"
    shutil.copyfile(path, copy)
    os.replace(copy, path)  # same name, same bytes, another file
    assert path in store.replaced()


def test_cache_closes_the_least_recently_used_store(tmp_path):
    roots = []
    for i in range(3):
        roots.append(tmp_path / f"store{i}")
        with _writer(roots[-1]) as w:
            _send(w, 4, {})
    cache = cq.StoreCache(max_stores=2)
    stores = [cache.get(r) for r in roots[:2]]
    assert cache.get(roots[0]) is stores[0]  # now the most recently used
    cache.get(roots[2])
    assert len(cache) == 2 and roots[1] not in cache and roots[0] in cache
    assert cache.get(roots[1]) is not stores[1]
    with pytest.raises(ValueError, match="max_stores"):
        cq.StoreCache(max_stores=0)


@pytest.mark.parametrize("ranges, size", [
    ([("T", 0, 0, 5000), ("T", 1, 0, 5000), ("T", 2, 0, 5000), ("T", 3, 0, 5000)], 100_000),
    ([("T", 0, 0, 34910), ("T", 1, 0, 35033), ("T", 2, 7, 35005), ("T", 3, 0, 34891)], 100_000),
    ([("T", 0, 3, 250), ("U", 5, 0, 1)], 100),
    ([("T", 0, 0, 1)], 1),
])
def test_pack_ranges_covers_each_unit_once_in_the_fewest_equal_partitions(ranges, size):
    groups = pack_ranges(ranges, size)
    total = sum(e - s for _, _, s, e in ranges)
    assert len(groups) == -(-total // size)
    sizes = [sum(e - s for _, _, s, e in g) for g in groups]
    assert max(sizes) <= size and max(sizes) - min(sizes) <= max(sizes) - sizes[-1] + 1
    units = [(t, q, o) for g in groups for t, q, s, e in g for o in range(s, e)]
    assert units == [(t, q, o) for t, q, s, e in ranges for o in range(s, e)]
    assert pack_ranges([], size) == [] and pack_ranges([("T", 0, 5, 5)], size) == []


def test_stream_triggers_read_each_unit_once_while_the_broker_appends(tmp_path, monkeypatch):
    """The source's own trigger loop, in-process: latestOffset, partitions, read, offsets carried on."""
    monkeypatch.setattr(_reader, "_STORES", cq.StoreCache())
    root = tmp_path / "store"
    w = _writer(root)
    seqs: dict = {}
    _send(w, 30, seqs, queues=3)
    raw = {"path": str(root), "topic": TOPIC, "startingOffsets": "earliest", "maxUnitsPerTrigger": "25",
           "group": "G", "tags": "*"}
    options = StreamOptions.parse(raw, ReadOptions.parse(raw))
    schema = options.read.schema()
    reader = RocketMQStreamReader(options, schema)
    offsets = reader.initialOffset()
    got = []
    for trigger in range(40):
        end = reader.latestOffset(offsets, reader.getDefaultReadLimit())
        parts = reader.partitions(offsets, end) if end != offsets else []
        assert len(parts) <= 1  # 25 units: one task
        for part in parts:
            for batch in reader.read(part):
                got += zip(batch.column("queue_id").to_pylist(), batch.column("queue_offset").to_pylist())
        offsets = end
        if trigger < 6:
            _send(w, 17, seqs, queues=3 + trigger // 3)  # a new queue appears mid-stream
    reader.stop()
    assert len(got) == len(set(got)) == sum(seqs.values())  # each unit once, none left out
    assert sorted(got) == [(q, o) for q in sorted(seqs) for o in range(seqs[q])]
    w.close()
