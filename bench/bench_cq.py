"""ConsumeQueue / ext / CommitLog kernels beside their best alternatives, in the same run.

- ``cq.scan_tags`` over 10 M ConsumeQueue units (200 MB, mapped from a file in
  the page cache) with 3, 40 and 64 tag codes vs numpy (an ``==`` chain and
  ``np.isin`` on the low 32 bits, compared as raw big-endian words so numpy
  does no byte swapping);
- ``cq.check_bitmaps``: the SQL92 Bloom test of 10 M ext units (340 MB) vs
  numpy's vectorised byte-and-mask test over the same units;
- properties gathering (``CommitLog.gather_properties``'s kernel) vs the
  pure-Python decoder (the twin) and vs a plain ``struct`` + ``str.split`` decoder;
- the data source's batch reads: ``CommitLog.decode_columns`` (records to columns) vs
  ``read_message`` per record and the twin; ``ConsumeQueueExt.read_batch`` vs ``get``
  per address;
- peak RSS and file descriptors of reading a store with 2000 queues and a 1.5 GiB
  CommitLog, each case in a fresh subprocess (``VmHWM``; ``getrusage``'s ``ru_maxrss``
  carries the parent's peak across ``execve``).

Run: ``make bench`` or ``.venv/bin/python -m pytest bench/bench_cq.py``.
"""
from __future__ import annotations

import mmap
import os
import shutil
import struct

import numpy as np
import pytest

import bloom
import cq
from cq import format as fmt
from cq.kernels import _decode_py, _record, _record_py

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
    assert ((got == cq.kernels.HIT) == _numpy_bitmaps(ext_file, positions)).all()


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
    got = benchmark(_record.gather_properties, buf, positions, len(buf))
    assert got[:100] == _plain_python_properties(buf, positions[:100])


def test_gather_properties_python_twin(benchmark, log_buffer):
    buf, positions = log_buffer
    benchmark.group = "properties gathering, 100k records"
    benchmark.extra_info.update(items=len(positions), role="alternative")
    benchmark.pedantic(_record_py.gather_properties, (buf, positions, len(buf)), rounds=3)


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
    benchmark(lambda: [_record.decode_record(buf, p, len(buf)) for p in pos])


def test_decode_records_python_twin(benchmark, log_buffer):
    buf, positions = log_buffer
    benchmark.group = "record decode, 100k records"
    benchmark.extra_info.update(items=len(positions), role="alternative")
    pos = positions.tolist()
    benchmark.pedantic(lambda: [_record_py.decode_record(buf, p, len(buf)) for p in pos], rounds=3)


# ---------------------------------------------------------- end to end
SAMPLE_MESSAGES = 300_000


@pytest.fixture(scope="module")
def sample_store(tmp_path_factory):
    from cq.writer.sample import generate_sample_store

    root = tmp_path_factory.mktemp("sample") / "store"
    sample = generate_sample_store(root, messages=SAMPLE_MESSAGES, seed=1)
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


def test_decode_columns_records_ours(benchmark, commit_log_dir):
    log, positions = commit_log_dir
    benchmark.group = "CommitLog records to columns, 100k records"
    benchmark.extra_info.update(items=len(positions), role="ours")
    cols = benchmark(log.decode_columns, positions)
    m, last = log.read_message(int(positions[-1])), len(positions) - 1
    assert cols.value("body", last) == m.body and cols.value("properties", last) == m.properties


def test_decode_columns_records_python_twin(benchmark, commit_log_dir):
    log, positions = commit_log_dir
    buf = np.frombuffer(log.buffer(0), np.uint8)
    benchmark.group = "CommitLog records to columns, 100k records"
    benchmark.extra_info.update(items=len(positions), role="alternative")
    benchmark.extra_info["series"] = "twin decode_columns"
    benchmark.pedantic(_decode_py.decode_columns, (buf, positions, len(buf), fmt.ALL_RECORD_FIELDS), rounds=2)


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


# ------------------------------------------------------------- peak RSS, file descriptors
# Each case runs in a fresh interpreter (subprocess) so its peak RSS (VmHWM) is its own;
# "base" is the same interpreter's peak right after importing cq, before any store is opened;
# the store's total file size is printed beside it (what RSS reached when readers kept every
# page they touched resident: see bench/README.md for the numbers before they streamed).
RSS_QUEUES = 2000
RSS_LOG_BYTES = 1536 << 20  # 1.5 GiB of CommitLog in three 512 MiB files
RSS_FD_LIMIT = 256          # the many-queue case also runs under `ulimit -n 256`

_RSS_SCRIPT = r"""
import json, os, sys, time
import cq
root, what = sys.argv[1], sys.argv[2]

def peak():
    # VmHWM, the peak RSS of this process image: getrusage's ru_maxrss survives execve on
    # Linux, so in a child it would still hold the pytest parent's peak
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("VmHWM")) / 1024

fds = lambda: len(os.listdir("/proc/self/fd"))
base, most_fds, t = peak(), fds(), time.perf_counter()
store = cq.Store(root)
n = 0
if what == "count_records":
    n = store.commit_log.count_records()
elif what == "messages":
    n = sum(1 for _ in store.commit_log.messages())
else:
    topic = store.topics()[0]
    how = {"sql": "a > 5"} if what == "consume_sql" else {"tags": "Tag1"}
    for _ in store.consume(topic, "GID", **how):
        n += 1
        if n % 256 == 0:
            most_fds = max(most_fds, fds())
_ = store.commit_log.max_offset
print(json.dumps({"items": n, "seconds": time.perf_counter() - t, "base_mb": base, "peak_mb": peak(),
                  "fds": max(most_fds, fds())}))
"""


def _peak_rss(root, what: str, fd_limit: int | None = None) -> dict:
    import json
    import resource
    import subprocess
    import sys

    def limit():
        if fd_limit:
            resource.setrlimit(resource.RLIMIT_NOFILE, (fd_limit, fd_limit))

    out = subprocess.run([sys.executable, "-c", _RSS_SCRIPT, str(root), what], check=True,
                         capture_output=True, text=True, preexec_fn=limit)
    return json.loads(out.stdout)


@pytest.fixture(scope="module")
def many_queue_store(tmp_path_factory):
    root = tmp_path_factory.mktemp("rss_queues") / "store"
    with cq.StoreWriter(root, enable_ext=True, commit_log_file_size=64 << 20, ext_file_size=1 << 20) as w:
        w.register_group("ManyQueues", "GID", "a > 5")
        w.append_many([{"topic": "ManyQueues", "body": b"m%d" % i, "queue_id": i % RSS_QUEUES,
                        "tags": f"Tag{i % 5}", "properties": {"a": str(i % 10)}}
                       for i in range(RSS_QUEUES * 10)])
    yield root
    shutil.rmtree(root)


@pytest.fixture(scope="module")
def big_log_store(tmp_path_factory):
    root = tmp_path_factory.mktemp("rss_log") / "store"
    body = bytes(range(256)) * 64  # 16 KiB
    n = RSS_LOG_BYTES // (len(body) + 200)
    with cq.StoreWriter(root, enable_ext=True, commit_log_file_size=512 << 20) as w:
        w.register_group("BigTopic", "GID", "a > 5")
        for s in range(0, n, 5000):
            w.append_many([{"topic": "BigTopic", "body": body, "queue_id": i % 4, "tags": f"Tag{i % 5}",
                            "properties": {"a": str(i % 10)}} for i in range(s, min(n, s + 5000))])
    yield root
    shutil.rmtree(root)


def _mapped_bytes(root) -> int:
    return sum(os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(root) for f in fs)


def _rss_case(benchmark, root, what, group, fd_limit=None):
    benchmark.group = group
    res = {}
    benchmark.pedantic(lambda: res.update(_peak_rss(root, what, fd_limit)), rounds=1, iterations=1)
    grown = res["peak_mb"] - res["base_mb"]
    benchmark.extra_info.update(items=res["items"], role="ours", peak_rss_mb=round(res["peak_mb"], 1),
                                base_rss_mb=round(res["base_mb"], 1), rss_growth_mb=round(grown, 1),
                                max_fds=res["fds"], store_mb=round(_mapped_bytes(root) / 2**20),
                                fd_limit=fd_limit)
    print(f"\n{group} / {what}: peak RSS {res['peak_mb']:.0f} MB (interpreter + cq {res['base_mb']:.0f} MB, "
          f"+{grown:.0f} MB) over {_mapped_bytes(root) / 2**20:.0f} MB of store files; "
          f"{res['fds']} fds{f' (ulimit -n {fd_limit})' if fd_limit else ''}; {res['items']} items "
          f"in {res['seconds']:.1f} s")
    return res, grown


@pytest.mark.parametrize("what", ["consume_sql", "consume_tags"])
def test_peak_rss_many_queues(benchmark, many_queue_store, what):
    res, grown = _rss_case(benchmark, many_queue_store, what,
                           f"peak RSS, {RSS_QUEUES} queues", fd_limit=RSS_FD_LIMIT)
    assert res["fds"] < 32 and grown < 128


@pytest.mark.parametrize("what", ["count_records", "messages", "consume_tags", "consume_sql"])
def test_peak_rss_large_commit_log(benchmark, big_log_store, what):
    _, grown = _rss_case(benchmark, big_log_store, what, f"peak RSS, {RSS_LOG_BYTES >> 20} MB CommitLog")
    assert grown < 256, "the readers should stream, not keep what they read resident"
