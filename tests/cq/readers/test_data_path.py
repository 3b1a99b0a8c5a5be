"""The data path's decoder (``CommitLog.decode_columns``, ``cq/kernels/_decode.pyx`` ``decode_columns`` and its twin)
gives, for every record and under every projection, what ``read_message`` gives; and the same errors."""
from __future__ import annotations

import itertools
import os
import shutil

import numpy as np
import pytest
from helpers import DATA, ENGINE_CASES, PUREPYTHON, body_start, kernels, use_kernels

import cq
from cq import format as fmt
from cq.readers.columns import MessageColumns
from cq.writer.writer import compress_body

FIELDS = [name for name, _ in fmt.RECORD_FIELDS]
ENGINES = {"compiled": kernels("compiled"), "twin": kernels("twin")}


def _expected(m: cq.Message, name: str):
    return getattr(m, name)


def _all_offsets(store: cq.Store) -> np.ndarray:
    offs = []
    for topic in store.topics():
        for q in store.queue_ids(topic):
            cq_ = store.consume_queue(topic, q)
            units = cq_.read(cq_.min_offset, len(cq_))
            offs.append(units["commit_log_offset"].astype(np.int64))
    return np.concatenate(offs)


def _decode(log: cq.CommitLog, offsets, fields, engine: str, monkeypatch) -> MessageColumns:
    use_kernels(monkeypatch, engine, "cq.readers.commitlog")
    return log.decode_columns(offsets, fields)


def _check(log: cq.CommitLog, offsets: np.ndarray, fields, engine, monkeypatch) -> None:
    cols = _decode(log, offsets, fields, engine, monkeypatch)
    assert len(cols) == len(offsets) and set(cols.columns) == set(fields)
    for i, off in enumerate(offsets.tolist()):
        m = log.read_message(off)
        for name in fields:
            assert cols.value(name, i) == _expected(m, name), (name, off)
    if "properties" in fields:  # dict order too
        for i, off in enumerate(offsets.tolist()):
            assert list(cols.value("properties", i).items()) == list(log.read_message(off).properties.items())


def _projections():
    singles = [[f] for f in FIELDS]
    pairs = [list(p) for p in itertools.combinations(FIELDS, 2)][::7]
    return singles + pairs + [FIELDS, FIELDS[::-1]]


@pytest.fixture(scope="module")
def mixed_store(tmp_path_factory):
    """A sample store plus records the sample lacks: IPv6 hosts, every compression type, bad UTF-8,
    repeated keys, empty properties, port 0."""
    root = tmp_path_factory.mktemp("mixed") / "store"
    cq.generate_sample_store(root, messages=3000, seed=5, commit_log_file_size=1 << 20)
    with cq.StoreWriter(root, append=True, commit_log_file_size=1 << 20) as w:
        z, zflag = compress_body(b"zlib body " * 300)
        w.append("Mixed", z, sys_flag=zflag, tags="TagZ", born_host="[2001:db8::7]:4321",
                 store_host="[::1]:10911")
        w.append("Mixed", b"\xff\xfe body", properties=b"TAGS\x01bad\xff\xfetag\x02KEYS\x01k\xc3\x02a\x01\xe2\x82",
                 born_host="10.1.2.3:65535")
        w.append("Mixed", b"", properties=b"a\x011\x02a\x012\x02\xff\x01x\x02\xfe\x01y\x02TAGS\x01t1\x02TAGS\x01t2")
        w.append("Mixed", b"x", properties=b"", born_host="[fe80::1:2]:0", store_host="1.2.3.4:0")
        w.append("Mixed", b"y", tags="标签", keys=["k1", "k2"])
    store = cq.Store(root)
    yield store
    store.close()


@pytest.mark.parametrize("engine", ENGINE_CASES)
@pytest.mark.parametrize("fields", _projections(), ids=lambda f: "+".join(f) if len(f) < 3 else f"all{len(f)}")
def test_golden_store_every_record_every_projection(engine, fields, monkeypatch):
    store = cq.Store(DATA / "golden_store")
    offsets = _all_offsets(store)
    _check(store.commit_log, offsets, fields, engine, monkeypatch)
    store.close()


@pytest.mark.parametrize("engine", ENGINE_CASES)
@pytest.mark.parametrize("fields", [[f] for f in FIELDS] + [FIELDS], ids=lambda f: f[0] if len(f) == 1 else "all")
def test_sample_store_with_ipv6_compressed_and_bad_utf8(mixed_store, engine, fields, monkeypatch):
    offsets = _all_offsets(mixed_store)
    rng = np.random.default_rng(3)
    _check(mixed_store.commit_log, rng.permutation(offsets), fields, engine, monkeypatch)


@pytest.mark.parametrize("engine", ENGINE_CASES)
def test_many_hosts_in_one_batch(tmp_path, engine, monkeypatch):
    # More hosts than the decoder caches (several sharing an address or a port, IPv4 and IPv6),
    # in random order: each row still reads its own record's text.
    rng = np.random.default_rng(11)
    hosts = [f"10.0.{i % 7}.{i % 5}:{1000 + i % 13}" for i in range(60)]
    hosts += [f"[2001:db8::{i % 9:x}]:{i % 4}" for i in range(30)] + ["0.0.0.0:0", "255.255.255.255:65535"]
    with cq.StoreWriter(tmp_path / "store") as w:
        for i in rng.integers(0, len(hosts), 2000).tolist():
            w.append("Hosts", b"x", born_host=hosts[i], store_host=hosts[(i * 7) % len(hosts)])
    store = cq.Store(tmp_path / "store")
    _check(store.commit_log, _all_offsets(store), ["born_host", "store_host"], engine, monkeypatch)
    store.close()


@pytest.mark.parametrize("engine", ENGINE_CASES)
def test_many_keys_and_late_repeats(tmp_path, engine, monkeypatch):
    # More keys than the decoder's 64 seen-bits (so bits collide between distinct keys), keys
    # of 1 to 20 bytes, and a key repeated after many others (its first place, its later
    # value), TAGS and KEYS among the repeated ones, in ASCII and non-ASCII text.
    rng = np.random.default_rng(5)
    names = [f"k{i}" * (1 + i % 7) for i in range(90)] + ["TAGS", "KEYS", "é", "x"]
    texts = []
    for _ in range(300):
        picked = [names[i] for i in rng.permutation(len(names))[: int(rng.integers(1, len(names)))]]
        picked += [picked[int(j)] for j in rng.integers(0, len(picked), int(rng.integers(0, 3)))]
        texts.append(b"\x02".join(f"{k}\x01v{j}".encode() for j, k in enumerate(picked)))
    with cq.StoreWriter(tmp_path / "store") as w:
        for t in texts:
            w.append("Keys", b"x", properties=t)
    store = cq.Store(tmp_path / "store")
    log, offsets = store.commit_log, _all_offsets(store)
    _check(log, offsets, ["properties", "tags", "keys"], engine, monkeypatch)
    # the map's entries themselves (a dict made of them would hide a key written twice)
    pytest.importorskip("pyarrow")
    entries = _decode(log, offsets, ["properties"], engine, monkeypatch).arrow("properties").to_pylist()
    for got, off in zip(entries, offsets.tolist()):
        assert got == list(log.read_message(off).properties.items()), off
    store.close()


def test_engines_give_the_same_buffers(mixed_store):
    log = mixed_store.commit_log
    offsets = np.sort(_all_offsets(mixed_store))
    index = log.file_index(int(offsets[0]))
    pos = offsets[offsets < log.files[index][0] + log.file_size] - log.files[index][0]
    a, ea = ENGINES["compiled"].decode_columns(log._u8(index), pos, log.file_size, fmt.ALL_RECORD_FIELDS)
    b, eb = ENGINES["twin"].decode_columns(log._u8(index), pos, log.file_size, fmt.ALL_RECORD_FIELDS)
    assert ea is None and eb is None and a.keys() == b.keys()
    for name in a:
        for x, y in zip(*(v if isinstance(v, tuple) else (v,) for v in (a[name], b[name]))):
            assert (x is None and y is None) or np.array_equal(x, y), name


def test_arrow_arrays_equal_read_message(mixed_store):
    pa = pytest.importorskip("pyarrow")
    log = mixed_store.commit_log
    offsets = _all_offsets(mixed_store)
    cols = log.decode_columns(offsets)
    arrays = cols.to_arrow()
    assert arrays["properties"].type == pa.map_(pa.string(), pa.string())
    assert arrays["body"].type == pa.binary() and arrays["tags"].type == pa.string()
    for name, arr in arrays.items():
        arr.validate(full=True)
        got = arr.to_pylist()
        for i, off in enumerate(offsets.tolist()):
            m = log.read_message(off)
            want = list(m.properties.items()) if name == "properties" else _expected(m, name)
            assert got[i] == want, (name, off)


@pytest.mark.parametrize("engine", ENGINE_CASES)
def test_utf8_replacement_equals_python_on_random_bytes(engine):
    kernels = ENGINES[engine]
    rng = np.random.default_rng(7)
    alphabet = np.frombuffer(bytes([0x41, 0x80, 0xBF, 0xC2, 0xC0, 0xDF, 0xE0, 0xA0, 0xED, 0x9F, 0xA0, 0xEF,
                                    0xF0, 0x90, 0xF4, 0x8F, 0x90, 0xF5, 0xFF, 0xE2, 0x82, 0xAC, 0x01, 0x02]),
                             dtype=np.uint8)
    texts = [alphabet[rng.integers(0, len(alphabet), int(rng.integers(1, 12)))].tobytes() for _ in range(3000)]
    # one record per text, the text as a value (keys of random bytes too, some colliding after replacement)
    props = [b"k" + t[:2] + b"\x01" + t + b"\x02" + b"TAGS\x01" + t for t in texts]
    props = [p for p in props if len(p) < 30000]
    buf = np.concatenate([_encode_v1(p) for p in props])
    sizes = np.array([fmt.RECORD_V1_IPV4_OVERHEAD + 1 + len(p) for p in props], dtype=np.int64)
    positions = np.concatenate([[0], np.cumsum(sizes)[:-1]]).astype(np.int64)
    cols, err = kernels.decode_columns(buf, positions, len(buf), fmt.record_field_mask(["properties", "tags"]))
    assert err is None
    m = MessageColumns(cols, len(props))
    for i, p in enumerate(props):
        want = fmt.decode_properties_bytes(p)
        assert list(m.value("properties", i).items()) == list(want.items())
        assert m.value("tags", i) == want.get("TAGS")


def _encode_v1(props: bytes) -> np.ndarray:
    """A minimal valid V1 record (IPv4 hosts, empty body, topic "T") with ``props`` as its properties."""
    import struct

    topic = b"T"
    total = fmt.RECORD_V1_IPV4_OVERHEAD + len(topic) + len(props)
    head = struct.pack(">iiiiiqqiq4siq4siiqi", total, fmt.MESSAGE_MAGIC_CODE_V1, 0, 0, 0, 0, 0, 0, 0,
                       b"\x01\x02\x03\x04", 1, 0, b"\x01\x02\x03\x04", 2, 0, 0, 0)
    rec = head + bytes([len(topic)]) + topic + struct.pack(">h", len(props)) + props
    assert len(rec) == total
    return np.frombuffer(rec, dtype=np.uint8)


def test_unknown_field_is_named():
    store = cq.Store(DATA / "golden_store")
    with pytest.raises(ValueError, match="unknown record field 'bodyy'.*store_size"):
        store.commit_log.decode_columns([0], ["bodyy"])
    store.close()


def _bad_magic(root, path, target: int):
    """Write a bad magic code into the record at ``target`` of CommitLog file ``path``; a Store of
    ``root`` opened after, and the error ``read_message`` raises there."""
    with open(path, "r+b") as f:
        f.seek(target + 4)
        f.write(b"\x12\x34\x56\x78")
    store = cq.Store(root)
    with pytest.raises(cq.StoreFormatError) as want:
        store.commit_log.read_message(target)
    return store, want.value


@pytest.mark.parametrize("engine", ENGINE_CASES)
def test_corrupt_records_same_error_and_offset_as_read_message(tmp_path, engine, monkeypatch):
    root = tmp_path / "store"
    shutil.copytree(DATA / "golden_store", root)
    store = cq.Store(root)
    offsets = np.sort(_all_offsets(store))
    store.close()
    path = min((root / "commitlog").iterdir())
    store, want = _bad_magic(root, path, int(offsets[3]))
    for fields in (["tags"], ["store_timestamp"], FIELDS):
        with pytest.raises(cq.StoreFormatError) as got:
            _decode(store.commit_log, offsets, fields, engine, monkeypatch)
        assert (str(got.value), got.value.path, got.value.offset) == (str(want), want.path,
                                                                      want.offset)
    with pytest.raises(cq.StoreFormatError, match="outside the commit log"):
        _decode(store.commit_log, [1 << 40], ["tags"], engine, monkeypatch)
    store.close()


@pytest.mark.parametrize("engine", ENGINE_CASES)
def test_recovery_crc_check_runs_in_the_kernel(tmp_path, engine, monkeypatch):
    """A body byte flipped: the recovered end stops at that record (the broker's checkCRCOnRecover)."""
    use_kernels(monkeypatch, engine, "cq.readers.commitlog")
    root = tmp_path / "store"
    shutil.copytree(DATA / "golden_store", root)
    store = cq.Store(root)
    files = store.commit_log.files
    last_start, last_path = files[-1]
    offsets = np.sort(_all_offsets(store))
    in_last = offsets[offsets >= last_start]
    end = store.commit_log.max_offset
    target = int(in_last[len(in_last) // 2])
    m = store.commit_log.read_message(target)
    store.close()
    body_at = target - last_start + body_start(m)
    with open(last_path, "r+b") as f:
        f.seek(body_at)
        byte = f.read(1)
        f.seek(body_at)
        f.write(bytes([byte[0] ^ 0xFF]))
    assert cq.CommitLog(root / "commitlog").max_offset == target < end
    assert cq.CommitLog(root / "commitlog", check_crc_on_recover=False).max_offset == end


def test_no_pyarrow_needed_to_decode():
    import subprocess
    import sys

    code = ("import sys; sys.modules['pyarrow'] = None\n"
            "import cq\n"
            f"s = cq.Store({str(DATA / 'golden_store')!r})\n"
            "c = s.commit_log.decode_columns([0], ['tags', 'properties', 'body'])\n"
            "print(len(c))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         env={**os.environ, "PYTHONPATH": os.getcwd()}, check=True)
    assert out.stdout.strip() == "1"


def test_sql92_consume_does_not_import_pandas():
    """A process's first SQL92 ``Store.consume`` (what ``rmqfilter consume`` runs) builds its Arrow
    arrays from buffers: ``pa.array``, ``pa.scalar`` and ``to_numpy`` import pandas (~0.4 s) first."""
    import subprocess
    import sys

    code = ("import sys, cq\n"
            f"s = cq.Store({str(DATA / 'golden_store')!r})\n"
            "n = sum(1 for _ in s.consume('GoldenFilterTopic', 'GID_SQL_A', sql='a > 1 AND b IS NOT NULL'))\n"
            "print(n, 'pandas' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         env={**os.environ, "PYTHONPATH": os.getcwd()}, check=True)
    n, pandas = out.stdout.split()
    assert int(n) > 0 and pandas == "False"


@pytest.mark.parametrize("engine", ENGINE_CASES)
@pytest.mark.parametrize("strict", [True, False])
def test_column_batches_equal_messages(engine, strict, monkeypatch):
    use_kernels(monkeypatch, engine, "cq.readers.commitlog")
    log = cq.CommitLog(DATA / "golden_store" / "commitlog")
    want = [(m.commit_log_offset, m.topic, m.tags, m.properties, m.body) for m in log.messages(strict=strict)]
    got = []
    for cols in log.column_batches(["commit_log_offset", "topic", "tags", "properties", "body"], strict=strict,
                                   batch_records=7):
        assert len(cols) <= 7
        got += [tuple(cols.value(n, i) for n in ("commit_log_offset", "topic", "tags", "properties", "body"))
                for i in range(len(cols))]
    assert got == want and len(want) == 300
    log.close()


@pytest.mark.parametrize("engine", ENGINE_CASES)
def test_column_batches_corrupt_store_same_error_as_messages(tmp_path, engine, monkeypatch):
    use_kernels(monkeypatch, engine, "cq.readers.commitlog")
    root = tmp_path / "store"
    shutil.copytree(DATA / "golden_store", root)
    path = min((root / "commitlog").iterdir())
    log = cq.CommitLog(root / "commitlog")
    second = [m.commit_log_offset for m in log.messages()][5]
    log.close()
    with open(path, "r+b") as f:
        f.seek(second + 4)
        f.write(b"\x12\x34\x56\x78")
    log = cq.CommitLog(root / "commitlog")
    with pytest.raises(cq.StoreFormatError) as want:
        list(log.messages())
    with pytest.raises(cq.StoreFormatError) as got:
        list(log.column_batches(["tags"]))
    assert (str(got.value), got.value.path, got.value.offset) == (str(want.value), want.value.path,
                                                                  want.value.offset)
    non_strict = sum(len(c) for c in log.column_batches(["tags"], strict=False))
    assert non_strict == len(list(log.messages(strict=False))) == 5
    log.close()


@pytest.mark.parametrize("engine", ENGINE_CASES)
def test_read_messages_equal_read_message(mixed_store, engine, monkeypatch):
    use_kernels(monkeypatch, engine, "cq.readers.commitlog")
    log = mixed_store.commit_log
    offsets = np.random.default_rng(1).permutation(_all_offsets(mixed_store))
    got = log.read_messages(offsets)
    assert len(got) == len(offsets)
    for m, off in zip(got, offsets.tolist()):
        want = log.read_message(off)
        assert m == want and list(m.properties.items()) == list(want.properties.items())
        assert (m._path, m._file_offset) == (want._path, want._file_offset)
        if m.is_compressed:
            assert m.uncompressed_body() == want.uncompressed_body()


@pytest.mark.skipif(PUREPYTHON, reason="the compiled engine reuses buffers; the twin does not")
def test_reused_buffers_never_change_a_column_still_held(mixed_store):
    """Freed decode buffers are handed to later decodes (docs/data-path.md): a column still
    referenced keeps its bytes however many decodes follow, and the pool stays bounded."""
    log = mixed_store.commit_log
    offsets = np.sort(_all_offsets(mixed_store))
    held = log.decode_columns(offsets)
    snapshot = {name: [None if part is None else np.array(part, copy=True)
                       for part in (col if isinstance(col, tuple) else (col,))]
                for name, col in held.columns.items()}
    for _ in range(20):
        other = log.decode_columns(offsets[::-1])  # every buffer freed and reused, in another order
        del other
        assert 0 < ENGINES["compiled"].pool_bytes() <= 128 << 20
    for name, col in held.columns.items():
        for part, saved in zip(col if isinstance(col, tuple) else (col,), snapshot[name]):
            assert (part is None and saved is None) or np.array_equal(part, saved), name
    assert [held.value("properties", i) for i in range(len(held))] == [
        log.read_message(int(o)).properties for o in offsets]


def _sizes(log: cq.CommitLog, offsets: np.ndarray) -> np.ndarray:
    return np.array([log.read_message(o).store_size for o in offsets.tolist()], dtype=np.int64)


def _same_columns(got: MessageColumns, want: MessageColumns) -> None:
    assert len(got) == len(want) and set(got.columns) == set(want.columns)
    for name, col in want.columns.items():
        parts = col if isinstance(col, tuple) else (col,)
        got_parts = got.columns[name] if isinstance(col, tuple) else (got.columns[name],)
        for a, b in zip(got_parts, parts):
            assert (a is None and b is None) or np.array_equal(a, b), name


@pytest.mark.parametrize("engine", ENGINE_CASES)
@pytest.mark.parametrize("store_kind", ["mixed", "several_files"])
def test_records_copied_with_reads_decode_as_through_the_map(mixed_store, tmp_path, store_kind, engine,
                                                             monkeypatch):
    """Store.consume reads a slice's records with one pread each (docs/data-path.md#consume): the
    columns are decode_columns' over the mapped files, in log order or any other, across files."""
    use_kernels(monkeypatch, engine, "cq.readers.commitlog")
    store = mixed_store
    if store_kind == "several_files":
        cq.generate_sample_store(tmp_path / "s", messages=2000, seed=2, commit_log_file_size=1 << 17)
        store = cq.Store(tmp_path / "s")
    log = store.commit_log
    offsets = _all_offsets(store)
    assert (len(set(log.file_indices(offsets).tolist())) > 1) == (store_kind == "several_files")
    sizes = _sizes(log, offsets)
    for order in (np.argsort(offsets), np.random.default_rng(3).permutation(len(offsets))):
        want = log.decode_columns(offsets[order])
        with monkeypatch.context() as m:  # the copies decode by themselves: no fallback to the map
            m.setattr(cq.CommitLog, "decode_columns", lambda *a, **k: pytest.fail("read through the map"))
            got = log.decode_copied(offsets[order], sizes[order])
        _same_columns(got, want)


@pytest.mark.parametrize("engine", ENGINE_CASES)
def test_copy_records_refuses_what_the_map_must_decide(mixed_store, engine):
    """``copy_records`` copies exactly the records' bytes, and gives None (the caller reads the map)
    for a record outside the file or whose TOTALSIZE is not the size its unit gives."""
    kernel = ENGINES[engine]
    log = mixed_store.commit_log
    offsets = np.sort(_all_offsets(mixed_store))
    start, path = log.files[0]
    pos = offsets[log.file_indices(offsets) == 0][:50] - start
    sizes = _sizes(log, pos + start)
    with open(path, "rb") as f:
        raw = f.read()
    fd = os.open(path, os.O_RDONLY)
    try:
        fds = np.full(len(pos), fd, dtype=np.int32)
        data, starts = kernel.copy_records(fds, pos, sizes, log.file_size)
        assert bytes(data) == b"".join(raw[p:p + s] for p, s in zip(pos.tolist(), sizes.tolist()))
        assert starts.tolist() == np.concatenate([[0], np.cumsum(sizes)[:-1]]).tolist()
        wrong = sizes.copy()
        wrong[7] += 1
        assert kernel.copy_records(fds, pos, wrong, log.file_size) is None
        assert kernel.copy_records(fds, pos, sizes, int(pos[-1] + sizes[-1] - 1)) is None  # past the file
        assert kernel.copy_records(fds[:1], np.array([-1], np.int64), sizes[:1], log.file_size) is None
        with pytest.raises(ValueError, match="sizes"):
            kernel.copy_records(fds, pos, sizes[:-1], log.file_size)
        with pytest.raises(ValueError, match="file descriptors"):
            kernel.copy_records(fds[:-1], pos, sizes, log.file_size)
    finally:
        os.close(fd)


@pytest.mark.parametrize("engine", ENGINE_CASES)
def test_copied_records_keep_the_maps_errors_and_its_file(tmp_path, engine, monkeypatch):
    """A corrupt record raises what read_message raises; a file replaced since it was mapped is read
    from the map, as decode_columns reads it (one consistent cut, docs/live.md)."""
    use_kernels(monkeypatch, engine, "cq.readers.commitlog")
    root = tmp_path / "store"
    shutil.copytree(DATA / "golden_store", root)
    store = cq.Store(root)
    offsets = np.sort(_all_offsets(store))
    sizes = _sizes(store.commit_log, offsets)
    mapped = store.commit_log.decode_columns(offsets)  # maps the file
    path = min((root / "commitlog").iterdir())
    changed = bytearray(path.read_bytes())
    m = store.commit_log.read_message(int(offsets[2]))
    assert m._path == str(path) and m.body
    changed[m._file_offset + body_start(m)] ^= 0xFF
    (tmp_path / "new").write_bytes(changed)
    os.replace(tmp_path / "new", path)  # a new file at the path; the map still reads the old one
    _same_columns(store.commit_log.decode_copied(offsets, sizes), mapped)
    store.close()

    store, want = _bad_magic(root, path, int(offsets[3]))
    with pytest.raises(cq.StoreFormatError) as got:
        store.commit_log.decode_copied(offsets, sizes)
    assert (str(got.value), got.value.path, got.value.offset) == (str(want), want.path, want.offset)
    store.close()


def test_consume_queue_columns_across_files(tmp_path):
    """``read_columns`` joins the queue's files (three units each here) as ``read`` does, from any
    start, clamped to the queue: the columns the data source slices its batches from."""
    with cq.StoreWriter(tmp_path / "store", consume_queue_file_size=3 * fmt.CQ_STORE_UNIT_SIZE) as w:
        for i in range(20):
            w.append(topic="T", queue_id=0, body=b"x" * i, tags=f"tag{i % 3}")
    cqueue = cq.Store(tmp_path / "store").consume_queue("T", 0)
    assert len(cqueue.files) == 7
    units = cqueue.read()
    for start, count in [(0, None), (2, 5), (3, 3), (4, 100), (19, 1), (20, 5)]:
        want = cqueue.read(start, count)
        got = cqueue.read_columns(start, count)
        assert {k: v.tolist() for k, v in got.items()} == {k: want[k].tolist() for k in units.dtype.names}
    assert cqueue.read_columns()["size"].tolist() == [int(u["size"]) for u in units]
    with pytest.raises(ValueError, match="start must be >= 0"):
        cqueue.read_columns(-3, 4)
