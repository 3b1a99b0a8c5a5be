"""Shared across threads and shipped by pickle: readers, filters, Bloom filters, selectors.

Threads hammer one object at once (a barrier lines them up so the lazy opening and
mapping race too) and every thread's result must equal the single-threaded one.
Pickle round trips must behave like the original; readers pickle as their
directory and options and map the files again on unpickle.
"""
from __future__ import annotations

import pickle
import threading
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
from helpers import DATA, load_jsonl

import bloom
import cq
import selector
from cq.readers.registry import READERS, ReaderEntry

STORE = DATA / "golden_store"
ROWS = load_jsonl("golden_store.jsonl")
TOPIC = "GoldenFilterTopic"
SQL = "a > 5 AND b = 'abc'"
THREADS = 8


def hammer(fn, threads: int = THREADS, rounds: int = 3) -> list:
    """Run ``fn()`` in ``threads`` threads started together, ``rounds`` times each; all results."""
    barrier = threading.Barrier(threads)

    def run():
        barrier.wait()
        return [fn() for _ in range(rounds)]

    with ThreadPoolExecutor(threads) as pool:
        futures = [pool.submit(run) for _ in range(threads)]
        return [r for f in futures for r in f.result()]


def _consume_everything(store: cq.Store) -> list:
    out = []
    for topic in store.topics():
        for how in ({"sql": SQL}, {"tags": "TagA || TagB"}, {"tags": "*"}):
            result = store.consume(topic, "GID_SQL_A", **how)
            out.append([(m.topic, m.queue_id, m.queue_offset, m.body, tuple(sorted(m.properties.items())))
                        for m in result])
            out.append(result.stats.as_dict())
    return out


def _batch_reads(store: cq.Store) -> list:
    out = []
    for q in store.queue_ids(TOPIC):
        units = store.consume_queue(TOPIC, q).read()
        ext = store.ext(TOPIC, q).read_batch(units["tags_code"])
        cols = store.commit_log.decode_columns(units["commit_log_offset"])
        out.append((units.tobytes(), ext.bitmap_data.tobytes(), ext.tags_code.tolist(),
                    cols.columns["store_timestamp"].tolist(), cols.columns["body"][1].tobytes(),
                    store.commit_log.gather_properties(units["commit_log_offset"])))
    return out


def test_one_store_shared_by_threads_from_its_first_use():
    want = _consume_everything(cq.Store(STORE))
    store = cq.Store(STORE)  # nothing opened yet: the threads race to open and map every file
    results = hammer(lambda: _consume_everything(store))
    assert all(r == want for r in results)
    # consume opens each queue for the pass and closes it after: nothing stays cached
    assert store._cqs == {} and len(store.commit_log._maps) <= len(store.commit_log.files)


def test_threads_opening_the_same_queue_get_one_reader_and_one_map_per_file():
    store = cq.Store(STORE)

    def open_and_read():
        cqueue = store.consume_queue(TOPIC, 1)
        return id(cqueue), cqueue.read().tobytes(), id(store.ext(TOPIC, 1)), id(store.commit_log)

    results = hammer(open_and_read, rounds=1)
    assert len(set(results)) == 1
    cqueue = store.consume_queue(TOPIC, 1)
    assert len(cqueue._maps) == len(cqueue.files)


def test_readers_shared_by_threads_in_batch_form():
    want = _batch_reads(cq.Store(STORE))
    store = cq.Store(STORE)
    assert all(r == want for r in hammer(lambda: _batch_reads(store)))


def test_commit_log_walks_in_parallel():
    log = cq.CommitLog(STORE / "commitlog")
    want = [m.commit_log_offset for m in log.messages(verify_crc=True)]
    results = hammer(lambda: ([m.commit_log_offset for m in log.messages(verify_crc=True)], log.max_offset,
                              log.count_records()))
    assert all(r == (want, 433183, 300) for r in results)


def test_filters_shared_by_threads():
    store = cq.Store(STORE)
    sql_filter = store.make_filter(TOPIC, "GID_SQL_A", sql=SQL)
    tag_filter = store.make_filter(TOPIC, "G", tags="TagA || TagC")
    props = [r["properties"] for r in ROWS]
    tags = [r["tags"] for r in ROWS]

    def decide():
        return (np.asarray(sql_filter.is_matched_by_commit_log_many(props)).tolist(),
                [tag_filter.is_matched_by_client(t) for t in tags],
                [tag_filter.is_matched_by_consume_queue(cq.tags_code(t)) for t in tags])

    want = decide()
    assert sum(want[0]) and sum(want[1])
    assert all(r == want for r in hammer(decide))


def test_compiled_selector_and_bloom_filter_shared_by_threads():
    sel = selector.compile("a > 5 AND (color IN ('red', 'grün') OR TAGS = 'TagA') AND b IS NOT NULL")
    bf = bloom.BloomFilter()
    rows = [r["properties"] for r in ROWS]
    keys = [f"GID_{i}#{TOPIC}" for i in range(500)]
    bitmaps = np.frombuffer(b"".join(bytes(r["ext"]["bitmap"]) for r in ROWS if r.get("ext")),
                            dtype=np.uint8).reshape(-1, 14)
    data = bf.generate(f"GID_SQL_A#{TOPIC}")

    def work():
        return (sel.matches_many(rows).tolist(), [sel.evaluate(r) for r in rows],
                bf.calc_bit_positions_many(keys).tolist(), bf.is_hit_many(data, bitmaps).tolist(),
                cq.tags_code_many([r["tags"] for r in ROWS]).tolist())

    want = work()
    assert all(r == want for r in hammer(work))


# ---------------------------------------------------------------- pickle
def _roundtrip(obj):
    return pickle.loads(pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL))


def test_bloom_objects_pickle():
    bf = bloom.BloomFilter(f=10, n=64)
    copy = _roundtrip(bf)
    assert copy == bf and (copy.k, copy.m) == (bf.k, bf.m)
    key = f"GID_SQL_A#{TOPIC}"
    assert copy.calc_bit_positions(key) == bf.calc_bit_positions(key)
    data = bf.generate(key)
    assert _roundtrip(data) == data
    bits = bloom.BitsArray(bf.m)
    bf.hash_to(data, bits)
    bits_copy = _roundtrip(bits)
    assert bytes(bits_copy) == bytes(bits) and copy.is_hit(_roundtrip(data), bits_copy)


# Every registered reader (cq/readers/registry.py), and the Store over them all.
_PICKLED = (*READERS, ReaderEntry("Store", cq.Store, lambda root: [], _consume_everything))


@pytest.mark.parametrize("entry", _PICKLED, ids=repr)
def test_readers_pickle_as_paths_and_reopen(entry):
    reader = entry.open(str(DATA / entry.store))
    before = entry.read_all(reader)  # maps open: they must not travel
    assert before, f"{entry.name} read nothing from the golden store"
    blob = pickle.dumps(reader)
    assert len(blob) < 1024, "a pickled reader carries no file data"
    copy = pickle.loads(blob)
    assert type(copy) is type(reader) and repr(copy) == repr(reader)
    assert entry.read_all(copy) == before
    reader.close()
    copy.close()


@pytest.mark.parametrize("entry", READERS, ids=repr)
def test_registered_readers_shared_by_threads(entry):
    reader = entry.open(str(DATA / entry.store))
    want = entry.read_all(entry.open(str(DATA / entry.store)))
    assert all(r == want for r in hammer(lambda: entry.read_all(reader)))
    reader.close()


def test_store_options_survive_pickle():
    store = cq.Store(STORE, commit_log_file_size=65536, ext_file_size=1024)
    copy = _roundtrip(store)
    assert copy.commit_log.file_size == 65536 and copy.ext(TOPIC, 0).file_size == 1024
    log = _roundtrip(cq.CommitLog(STORE / "commitlog", check_crc_on_recover=False))
    assert log.check_crc_on_recover is False and _roundtrip(cq.CommitLog(STORE / "commitlog")).check_crc_on_recover
    queue = _roundtrip(cq.ConsumeQueue(STORE / "consumequeue" / TOPIC / "1", topic=TOPIC, queue_id=1))
    assert (queue.topic, queue.queue_id) == (TOPIC, 1)


def test_filters_pickle():
    store = cq.Store(STORE)
    props = [r["properties"] for r in ROWS]
    sql_filter = store.make_filter(TOPIC, "GID_SQL_A", sql=SQL)
    sql_copy = _roundtrip(sql_filter)
    assert (np.asarray(sql_copy.is_matched_by_commit_log_many(props)).tolist()
            == np.asarray(sql_filter.is_matched_by_commit_log_many(props)).tolist())
    tag_filter = store.make_filter(TOPIC, "G", tags="TagA || TagC")
    tag_copy = _roundtrip(tag_filter)
    assert tag_copy.codes == tag_filter.codes
    assert [tag_copy.is_matched_by_client(r["tags"]) for r in ROWS] == [
        tag_filter.is_matched_by_client(r["tags"]) for r in ROWS]
    # a consume driven by the unpickled filters gives the same messages
    for flt, copy in ((sql_filter, sql_copy), (tag_filter, tag_copy)):
        assert ([m.queue_offset for m in store.consume(TOPIC, "GID_SQL_A", filter=copy)]
                == [m.queue_offset for m in store.consume(TOPIC, "GID_SQL_A", filter=flt)])
