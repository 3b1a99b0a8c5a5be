"""ConsumeQueue / ext / CommitLog kernels beside their best alternatives, in the same run.

- ``cq.scan_tags`` over 10 M ConsumeQueue units (200 MB, mapped from a file in
  the page cache) with 3, 40 and 64 tag codes vs numpy (an ``==`` chain and
  ``np.isin`` on the low 32 bits, compared as raw big-endian words so numpy
  does no byte swapping);
- ``cq.check_bitmaps``: the SQL92 Bloom test of 10 M ext units (340 MB) vs
  numpy's vectorised byte-and-mask test over the same units;
- properties gathering (``CommitLog.gather_properties``'s kernel) vs the
  pure-Python decoder (the twin) and vs a plain ``struct`` + ``str.split`` decoder;
- the data source's batch reads: ``CommitLog.read_batch`` (records to columns) vs
  ``read_message`` per record and the twin; ``ConsumeQueueExt.read_batch`` vs ``get``
  per address.

Run: ``make bench`` or ``.venv/bin/python -m pytest bench/bench_cq.py``.
"""
from __future__ import annotations

import mmap
import struct

import numpy as np
import pytest

import bloom
import cq
from cq import _scan_py
from cq import format as fmt
from cq.scan import _scan

N_UNITS = 10_000_000
N_TAGS = 1000
N_RECORDS = 100_000


def _map(path):
    with open(path, "rb") as f:
        return mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)


@pytest.fixture(scope="module")
def tag_pool() -> np.ndarray:
    rng = np.random.default_rng(3)
    return np.array(sorted({cq.tags_code(f"Tag_{i}_{rng.integers(1 << 30)}") for i in range(N_TAGS)}),
                    dtype=np.int64)


@pytest.fixture(scope="module")
def cq_file(tmp_path_factory, tag_pool):
    rng = np.random.default_rng(4)
    units = np.zeros(N_UNITS, dtype=fmt.CQ_UNIT_DTYPE)
    units["commit_log_offset"] = np.arange(N_UNITS, dtype=np.int64) * 300
    units["size"] = 300
    units["tags_code"] = rng.choice(tag_pool, size=N_UNITS)
    path = tmp_path_factory.mktemp("cq") / fmt.file_name(0)
    units.tofile(path)
    m = _map(path)
    np.frombuffer(m, np.uint8).sum()  # warm the page cache
    return m


def _numpy_scan(buf, codes):
    """Best numpy: the low 32 bits as a strided uint32 column, codes byte-swapped instead of data."""
    col = np.frombuffer(buf, dtype="<u4").reshape(-1, 5)[:, 4]
    swapped = np.asarray(codes, dtype=np.int64).astype(np.uint32).byteswap()
    if len(swapped) <= 8:
        hit = col == swapped[0]
        for c in swapped[1:]:
            hit |= col == c
    else:
        hit = np.isin(col, swapped)
    return np.flatnonzero(hit)


@pytest.mark.parametrize("ncodes", [3, 40, 64])
def test_scan_tags_ours(benchmark, cq_file, tag_pool, ncodes):
    codes = tag_pool[:: N_TAGS // ncodes][:ncodes]
    benchmark.group = f"scan_tags, 10M units, {ncodes} codes"
    benchmark.extra_info.update(items=N_UNITS, bytes=N_UNITS * 20, role="ours")
    got = benchmark(cq.scan_tags, cq_file, codes)
    assert got.tolist() == _numpy_scan(cq_file, codes).tolist()


@pytest.mark.parametrize("ncodes", [3, 40, 64])
def test_scan_tags_numpy(benchmark, cq_file, tag_pool, ncodes):
    codes = tag_pool[:: N_TAGS // ncodes][:ncodes]
    benchmark.group = f"scan_tags, 10M units, {ncodes} codes"
    benchmark.extra_info.update(items=N_UNITS, bytes=N_UNITS * 20, role="alternative")
    benchmark(_numpy_scan, cq_file, codes)


@pytest.mark.parametrize("ncodes", [3, 40])
def test_scan_tags_numpy_isin(benchmark, cq_file, tag_pool, ncodes):
    codes = tag_pool[:: N_TAGS // ncodes][:ncodes]
    benchmark.group = f"scan_tags, 10M units, {ncodes} codes"
    benchmark.extra_info.update(items=N_UNITS, bytes=N_UNITS * 20, role="alternative")
    col = np.frombuffer(cq_file, dtype="<u4").reshape(-1, 5)[:, 4]
    swapped = codes.astype(np.uint32).byteswap()
    benchmark(lambda: np.flatnonzero(np.isin(col, swapped)))


# ------------------------------------------------------------- bitmaps
BF = bloom.BloomFilter()
GROUP_POS = BF.calc_bit_positions("GID_bench#TopicBench")


@pytest.fixture(scope="module")
def ext_file(tmp_path_factory):
    rng = np.random.default_rng(5)
    dt = np.dtype([("head", fmt.EXT_UNIT_HEADER_DTYPE), ("bitmap", "u1", (14,))])
    units = np.zeros(N_UNITS, dtype=dt)
    units["head"]["size"] = 34
    units["head"]["tags_code"] = 7
    units["head"]["msg_store_time"] = 1_700_000_000_000 + np.arange(N_UNITS)
    units["head"]["bit_map_size"] = 14
    units["bitmap"] = rng.integers(0, 256, size=(N_UNITS, 14), dtype=np.uint8)
    path = tmp_path_factory.mktemp("ext") / fmt.file_name(0)
    units.tofile(path)
    m = _map(path)
    np.frombuffer(m, np.uint8).sum()
    return m


def _numpy_bitmaps(buf, positions):
    rows = np.frombuffer(buf, np.uint8).reshape(-1, 34)
    hit = np.ones(len(rows), dtype=bool)
    for p in GROUP_POS:
        hit &= (rows[:, 20 + p // 8] & (1 << (p % 8))) != 0
    return hit


def test_check_bitmaps_ours(benchmark, ext_file):
    positions = np.arange(N_UNITS, dtype=np.int64) * 34
    benchmark.group = "Bloom check, 10M ext units of 34 bytes"
    benchmark.extra_info.update(items=N_UNITS, bytes=N_UNITS * 34, role="ours")
    got = benchmark(cq.check_bitmaps, ext_file, positions, GROUP_POS)
    assert ((got == cq.scan.HIT) == _numpy_bitmaps(ext_file, positions)).all()


def test_check_bitmaps_numpy(benchmark, ext_file):
    positions = np.arange(N_UNITS, dtype=np.int64) * 34
    benchmark.group = "Bloom check, 10M ext units of 34 bytes"
    benchmark.extra_info.update(items=N_UNITS, bytes=N_UNITS * 34, role="alternative")
    benchmark(_numpy_bitmaps, ext_file, positions)


# ---------------------------------------------------------- properties
@pytest.fixture(scope="module")
def log_buffer():
    rng = np.random.default_rng(6)
    parts, positions, pos = [], [], 0
    for i in range(N_RECORDS):
        props = {"UNIQ_KEY": f"7F0000010001{i:020X}", "CLUSTER": "DefaultCluster", "TAGS": f"Tag{i % 50}",
                 "KEYS": f"order-{i} user-{i % 977}", "WAIT": "true", "a": str(int(rng.integers(0, 100))),
                 "b": "abc" if i % 3 else "xyz", "city": "北京" if i % 7 == 0 else "Zürich"}
        rec = fmt.encode_record(topic="TopicBench", body=b"x" * 64, properties=props, commit_log_offset=pos)
        parts.append(rec)
        positions.append(pos)
        pos += len(rec)
    buf = np.frombuffer(b"".join(parts), np.uint8)
    return buf, np.array(positions, dtype=np.int64)


def _plain_python_properties(buf, positions):
    raw = buf.tobytes()
    out = []
    for pos in positions.tolist():
        sys_flag = struct.unpack_from(">i", raw, pos + 36)[0]
        p = pos + 48 + (20 if sys_flag & 0x10 else 8) + 8 + (20 if sys_flag & 0x20 else 8) + 12
        body_len = struct.unpack_from(">i", raw, p)[0]
        p += 4 + max(body_len, 0)
        topic_len = raw[p]
        p += 1 + topic_len
        props_len = struct.unpack_from(">h", raw, p)[0]
        out.append(fmt.decode_properties(raw[p + 2:p + 2 + props_len].decode("utf-8", "replace")))
    return out


def test_gather_properties_ours(benchmark, log_buffer):
    buf, positions = log_buffer
    benchmark.group = "properties gathering, 100k records"
    benchmark.extra_info.update(items=len(positions), role="ours")
    got = benchmark(_scan.gather_properties, buf, positions, len(buf))
    assert got[:100] == _plain_python_properties(buf, positions[:100])


def test_gather_properties_python_twin(benchmark, log_buffer):
    buf, positions = log_buffer
    benchmark.group = "properties gathering, 100k records"
    benchmark.extra_info.update(items=len(positions), role="alternative")
    benchmark.pedantic(_scan_py.gather_properties, (buf, positions, len(buf)), rounds=3)


def test_gather_properties_plain_python(benchmark, log_buffer):
    buf, positions = log_buffer
    benchmark.group = "properties gathering, 100k records"
    benchmark.extra_info.update(items=len(positions), role="alternative")
    benchmark.pedantic(_plain_python_properties, (buf, positions), rounds=3)


def test_decode_records_ours(benchmark, log_buffer):
    buf, positions = log_buffer
    benchmark.group = "record decode, 100k records"
    benchmark.extra_info.update(items=len(positions), role="ours")
    pos = positions.tolist()
    benchmark(lambda: [_scan.decode_record(buf, p, len(buf)) for p in pos])


def test_decode_records_python_twin(benchmark, log_buffer):
    buf, positions = log_buffer
    benchmark.group = "record decode, 100k records"
    benchmark.extra_info.update(items=len(positions), role="alternative")
    pos = positions.tolist()
    benchmark.pedantic(lambda: [_scan_py.decode_record(buf, p, len(buf)) for p in pos], rounds=3)


# ---------------------------------------------------------- end to end
SAMPLE_MESSAGES = 300_000


@pytest.fixture(scope="module")
def sample_store(tmp_path_factory):
    from cq import writer

    root = tmp_path_factory.mktemp("sample") / "store"
    sample = writer.generate_sample_store(root, messages=SAMPLE_MESSAGES, seed=1)
    group = sample.to_dict()["groups"][1]
    store = cq.Store(root)
    units = sum(len(store.consume_queue(group["topic"], q)) for q in store.queue_ids(group["topic"]))
    return store, group, units


def _consume(store, group, **kw):
    return sum(1 for _ in store.consume(group["topic"], group["group"], sql=group["sql"], **kw))


def test_consume_sql_two_layers_ours(benchmark, sample_store):
    store, group, units = sample_store
    benchmark.group = "Store.consume SQL92, 300k-message sample store"
    benchmark.extra_info.update(items=units, role="ours")
    benchmark.pedantic(_consume, (store, group), rounds=3)


def test_consume_sql_commit_log_layer_only(benchmark, sample_store):
    store, group, units = sample_store
    benchmark.group = "Store.consume SQL92, 300k-message sample store"
    benchmark.extra_info.update(items=units, role="alternative")
    got = benchmark.pedantic(_consume, (store, group), {"bloom_filter": None}, rounds=2)
    assert got == _consume(store, group)


def test_consume_sql_naive_python(benchmark, sample_store):
    import selector

    store, group, units = sample_store
    benchmark.group = "Store.consume SQL92, 300k-message sample store"
    benchmark.extra_info.update(items=units, role="alternative")
    sel = selector.compile(group["sql"])

    def naive():
        n = 0
        for q in store.queue_ids(group["topic"]):
            for u in store.consume_queue(group["topic"], q).read():
                m = store.commit_log.read_message(int(u["commit_log_offset"]))
                n += sel.matches(m.properties)
        return n

    got = benchmark.pedantic(naive, rounds=1)
    assert got == _consume(store, group)


# ---------------------------------------------------------- batch reads (the data source's path)
N_BATCH_EXT = 200_000


@pytest.fixture(scope="module")
def commit_log_dir(tmp_path_factory, log_buffer):
    buf, positions = log_buffer
    d = tmp_path_factory.mktemp("commitlog")
    (d / fmt.file_name(0)).write_bytes(buf.tobytes() + bytes(1 << 20))
    log = cq.CommitLog(d)
    yield log, positions
    log.close()


def test_read_batch_records_ours(benchmark, commit_log_dir):
    log, positions = commit_log_dir
    benchmark.group = "CommitLog records to columns, 100k records"
    benchmark.extra_info.update(items=len(positions), role="ours")
    cols = benchmark(log.read_batch, positions)
    m = log.read_message(int(positions[-1]))
    assert cols.body.value(len(positions) - 1) == m.body and cols.properties(len(positions) - 1) == m.properties


def test_read_batch_records_python_twin(benchmark, commit_log_dir):
    log, positions = commit_log_dir
    buf = np.frombuffer(log.buffer(0), np.uint8)
    benchmark.group = "CommitLog records to columns, 100k records"
    benchmark.extra_info.update(items=len(positions), role="alternative")
    benchmark.extra_info["series"] = "twin decode_records + split_properties"

    def twin():
        cols, _ = _scan_py.decode_records(buf, positions, len(buf))
        return _scan_py.split_properties(buf, cols["props_start"], cols["props_len"])

    benchmark.pedantic(twin, rounds=2)


def test_read_message_per_record(benchmark, commit_log_dir):
    log, positions = commit_log_dir
    benchmark.group = "CommitLog records to columns, 100k records"
    benchmark.extra_info.update(items=len(positions), role="alternative")
    pos = positions.tolist()
    benchmark.pedantic(lambda: [log.read_message(p) for p in pos], rounds=3)


@pytest.fixture(scope="module")
def ext_dir(tmp_path_factory):
    rng = np.random.default_rng(8)
    dt = np.dtype([("head", fmt.EXT_UNIT_HEADER_DTYPE), ("bitmap", "u1", (14,))])
    units = np.zeros(N_BATCH_EXT, dtype=dt)
    units["head"]["size"] = 34
    units["head"]["tags_code"] = rng.integers(-(1 << 31), 1 << 31, N_BATCH_EXT)
    units["head"]["msg_store_time"] = 1_700_000_000_000 + np.arange(N_BATCH_EXT)
    units["head"]["bit_map_size"] = 14
    units["bitmap"] = rng.integers(0, 256, size=(N_BATCH_EXT, 14), dtype=np.uint8)
    d = tmp_path_factory.mktemp("extdir")
    units.tofile(d / fmt.file_name(0))
    ext = cq.ConsumeQueueExt(d)
    addresses = np.array([fmt.decorate(i * 34) for i in range(N_BATCH_EXT)], dtype=np.int64)
    yield ext, addresses
    ext.close()


def test_ext_read_batch_ours(benchmark, ext_dir):
    ext, addresses = ext_dir
    benchmark.group = f"ext units with bitmaps, {N_BATCH_EXT // 1000}k addresses"
    benchmark.extra_info.update(items=len(addresses), role="ours")
    b = benchmark(ext.read_batch, addresses)
    assert b.unit(N_BATCH_EXT - 1) == ext.get(int(addresses[-1]))


def test_ext_get_per_address(benchmark, ext_dir):
    ext, addresses = ext_dir
    benchmark.group = f"ext units with bitmaps, {N_BATCH_EXT // 1000}k addresses"
    benchmark.extra_info.update(items=len(addresses), role="alternative")
    addr = addresses.tolist()
    benchmark.pedantic(lambda: [ext.get(a) for a in addr], rounds=3)
