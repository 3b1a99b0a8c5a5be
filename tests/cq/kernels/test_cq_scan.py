"""The scan kernels: tag-code selection, ext resolution, Bloom checks, properties gathering."""
from __future__ import annotations

import numpy as np
import pytest
from helpers import DATA, load_jsonl

import bloom
import cq
from cq import format as fmt
from cq.kernels import _ext, _ext_py, _record, _record_py, _tagscan_py, bloom_masks

ROWS = load_jsonl("golden_store.jsonl")


def _units(rng, n, pool):
    u = np.zeros(n, dtype=fmt.CQ_UNIT_DTYPE)
    u["commit_log_offset"] = np.arange(n) * 100
    u["size"] = 100
    u["tags_code"] = rng.choice(pool, size=n)
    return u


def _reference(units, codes):
    low = units["tags_code"].astype(np.int64).astype(np.uint32).astype(np.int32)
    return np.flatnonzero(np.isin(low, np.asarray(codes, dtype=np.int64).astype(np.uint32).astype(np.int32)))


@pytest.mark.parametrize("ncodes", [1, 2, 3, 4, 5, 17, 40, 64, 300])
def test_scan_tags_equals_numpy_reference(ncodes):
    rng = np.random.default_rng(ncodes)
    tags = rng.integers(-(2**31), 2**31, size=500, dtype=np.int64)
    tags[:4] = [0, -(2**31), 2**31 - 1, -1]
    # ext addresses and delivery times whose low 32 bits collide with a code still count (broker's (int) cast)
    pool = np.concatenate([tags, tags[:50] + (3 << 32), [cq.decorate(int(t) & 0xFFFFFFFF) for t in tags[50:60]]])
    units = _units(rng, 20_000, pool)
    codes = rng.choice(tags, size=ncodes, replace=False)
    want = _reference(units, codes)
    assert len(want) > 0
    got = cq.scan_tags(units.tobytes(), codes.tolist())
    assert got.dtype == np.int64 and got.tolist() == want.tolist()
    assert _tagscan_py.scan_tags(np.frombuffer(units.tobytes(), np.uint8),
                              np.unique(codes).astype(np.int32)).tolist() == want.tolist()


@pytest.mark.parametrize("ncodes", [5, 64, 300, 2000])
def test_scan_tags_with_consecutive_tag_codes(ncodes):
    """Tags named in sequence ("Tag_0", "Tag_1", ...) have consecutive hash codes: they share
    all but their low bits, the case that once crowded the kernel's prefilter and table."""
    rng = np.random.default_rng(ncodes)
    pool = np.array([cq.tags_code(f"Tag_{i}") for i in range(4000)] + list(range(-2000, 2000)), np.int64)
    units = _units(rng, 50_000, pool)
    codes = rng.choice(pool, size=ncodes, replace=False)
    got = cq.scan_tags(units.tobytes(), codes.tolist())
    assert got.tolist() == _reference(units, codes).tolist()


def test_scan_tags_accepts_buffers_and_structured_arrays():
    raw = fmt.encode_cq_unit(0, 10, cq.tags_code("TagA")) + fmt.encode_cq_unit(10, 10, 0)
    a = cq.tags_code("TagA")
    assert cq.scan_tags(raw, [a]).tolist() == [0]
    assert cq.scan_tags(bytearray(raw), {a, 0}).tolist() == [0, 1]
    assert cq.scan_tags(memoryview(raw), np.array([0])).tolist() == [1]
    assert cq.scan_tags(np.frombuffer(raw, fmt.CQ_UNIT_DTYPE), [a]).tolist() == [0]
    assert cq.scan_tags(raw, []).tolist() == []
    assert cq.scan_tags(b"", [a]).tolist() == []


def test_scan_tags_rejects_bad_input():
    with pytest.raises(ValueError, match="whole number of 20-byte units"):
        cq.scan_tags(b"\0" * 21, [1])
    with pytest.raises(TypeError):
        cq.scan_tags(np.zeros(20, dtype=np.int32), [1])
    with pytest.raises(TypeError):
        cq.scan_tags(b"\0" * 20, ["TagA"])
    with pytest.raises(TypeError):
        cq.scan_tags(12, [1])


def test_scan_tags_on_golden_queues_equals_exact_layer1():
    store = cq.Store(DATA / "golden_store")
    for t in store.topics():
        for q in store.queue_ids(t):
            for first, raw in store.consume_queue(t, q).raw_chunks():
                units = np.frombuffer(raw, fmt.CQ_UNIT_DTYPE)
                codes = [cq.tags_code("TagA"), cq.decorate(0)]
                assert cq.scan_tags(raw, codes).tolist() == _reference(units, codes).tolist()


def _golden_group_cases():
    store = cq.Store(DATA / "golden_store")
    bf = bloom.BloomFilter()
    for group in ("GID_SQL_A", "GID_SQL_B", "GID_SQL_C"):
        positions = bf.calc_bit_positions(f"{group}#GoldenFilterTopic")
        rows = [r for r in ROWS if r["groups"]]
        for r in rows:
            g = next(g for g in r["groups"] if g["group"] == group)
            assert g["bloomBitPos"] == positions
        yield store, group, positions, rows


@pytest.mark.parametrize("engine", [_ext, _ext_py], ids=["engine", "twin"])
def test_ext_bloom_check_agrees_with_golden_bloom_hit(engine):
    for store, group, positions, rows in _golden_group_cases():
        byte_idx, masks = bloom_masks(positions)
        for q in (0, 1):
            ext = store.ext("GoldenFilterTopic", q)
            mine = sorted((r for r in rows if r["queueId"] == q), key=lambda r: r["queueOffset"])
            addrs = np.array([r["cq"]["tagsCode"] for r in mine], dtype=np.int64)
            verdict = np.empty(len(addrs), dtype=np.uint8)
            for index, sel, pos in ext._group_by_file(addrs):
                verdict[sel] = engine.ext_bloom_check(np.frombuffer(ext._map(index), np.uint8), pos,
                                                      ext.limit(index), byte_idx, masks, 112, 0)
            want = [_ext.HIT if next(g for g in r["groups"] if g["group"] == group)["bloomHit"]
                    else _ext.PRUNED for r in mine]
            assert verdict.tolist() == want
            # a filter born after the messages were stored does not trust their bitmaps
            late = engine.ext_bloom_check(np.frombuffer(ext._map(0), np.uint8), np.array([0], np.int64),
                                          ext.limit(0), byte_idx, masks, 112, 2**62)
            assert late.tolist() == [_ext.PASS]
            # other bit count than the bitmap: untested pass
            assert engine.ext_bloom_check(np.frombuffer(ext._map(0), np.uint8), np.array([0], np.int64),
                                          ext.limit(0), byte_idx, masks, 216, 0).tolist() == [_ext.PASS]


def test_ext_kernels_twin_equals_engine_on_hostile_buffers():
    rng = np.random.default_rng(7)
    for _ in range(200):
        buf = rng.integers(0, 256, size=int(rng.integers(0, 80)), dtype=np.uint8)
        if len(buf) > 4 and rng.random() < 0.5:
            buf[0:2] = [0, rng.integers(1, 40)]
        pos = rng.integers(-3, 90, size=6).astype(np.int64)
        limit = int(rng.integers(0, len(buf) + 1))
        a = _ext.ext_units_at(buf, pos, limit)
        b = _ext_py.ext_units_at(buf, pos, limit)
        assert a[0].tolist() == b[0].tolist()
        found = a[0] == _ext.FOUND
        for x, y in zip(a[1:], b[1:]):
            assert x[found].tolist() == y[found].tolist()
        # the one-pass read: the same heads, and each found unit's size field and bitmap bytes
        a, b = _ext.ext_units_read(buf, pos, limit), _ext_py.ext_units_read(buf, pos, limit)
        assert [x.tolist() for x in a] == [y.tolist() for y in b]
        assert a[0].tolist() == _ext.ext_units_at(buf, pos, limit)[0].tolist()
        for i in np.flatnonzero((a[0] == _ext.FOUND) & (a[4] >= 1)).tolist():
            assert a[6][a[5][i]:a[5][i + 1]].tobytes() == buf[pos[i] + 20:pos[i] + 20 + a[4][i]].tobytes()
        start = int(rng.integers(0, 10))
        assert _ext.ext_walk(buf, start) == _ext_py.ext_walk(buf, start)
        byte_idx, masks = bloom_masks([1, 9, 13])
        verdict = _ext.ext_bloom_check(buf, pos, limit, byte_idx, masks, 16, 0)
        assert verdict.tolist() == _ext_py.ext_bloom_check(buf, pos, limit, byte_idx, masks, 16, 0).tolist()
        # the same decision over the units once read (the data source's layer 1)
        found = (a[0] == _ext.FOUND).view(np.uint8)
        for engine in (_ext, _ext_py):
            batch = engine.bloom_check_units(found, a[3], a[4], a[5], a[6], byte_idx, masks, 16, 0)
            assert batch.tolist() == np.where(verdict == _ext.UNDERFLOW, _ext.PASS, verdict).tolist()


def test_kernel_boundary_checks():
    buf = np.zeros(40, np.uint8)
    with pytest.raises(ValueError):
        _ext.ext_units_at(buf, np.zeros(1, np.int64), 41)
    with pytest.raises(ValueError):
        _ext.ext_units_read(buf, np.zeros(1, np.int64), 41)
    with pytest.raises(ValueError):
        _ext.ext_bloom_check(buf, np.zeros(1, np.int64), 40, np.array([20], np.int32),
                              np.array([1], np.uint8), 112, 0)
    with pytest.raises(ValueError):
        _ext.ext_walk(buf, -1)


@pytest.mark.parametrize("engine", [_ext, _ext_py], ids=["engine", "twin"])
def test_bloom_check_units_refuses_bitmap_bytes_that_do_not_hold_the_bitmap(engine):
    byte_idx, masks = bloom_masks([1, 9, 13])
    one = (np.ones(1, np.uint8), np.array([5], np.int64), np.array([2], np.int16))
    assert engine.bloom_check_units(*one, np.array([0, 2], np.int64), np.array([0x02, 0x22], np.uint8),
                                    byte_idx, masks, 16, 0).tolist() == [_ext.HIT]
    assert engine.bloom_check_units(*one, np.array([0, 2], np.int64), np.array([0x02, 0x02], np.uint8),
                                    byte_idx, masks, 16, 0).tolist() == [_ext.PRUNED]
    assert engine.bloom_check_units(*one, np.array([0, 2], np.int64), np.array([0x02, 0x22], np.uint8),
                                    byte_idx, masks, 16, 5).tolist() == [_ext.PASS]  # stored at bornTime
    for offsets in ([0, 1], [0, 3], [1, 3]):
        with pytest.raises(ValueError, match="row 0: bitmap bytes"):
            engine.bloom_check_units(*one, np.array(offsets, np.int64), np.zeros(2, np.uint8), byte_idx, masks, 16, 0)
    with pytest.raises(ValueError, match="different lengths"):
        engine.bloom_check_units(*one, np.array([0], np.int64), np.zeros(2, np.uint8), byte_idx, masks, 16, 0)


@pytest.mark.parametrize("engine", [_record, _record_py], ids=["engine", "twin"])
def test_gather_properties_agrees_with_the_decoder(engine):
    store = cq.Store(DATA / "golden_store")
    log = store.commit_log
    for index, (start, _) in enumerate(log.files):
        rows = [r for r in ROWS if start <= r["commitLogOffset"] < start + log.file_size]
        pos = np.array([r["commitLogOffset"] - start for r in rows], dtype=np.int64)
        got = engine.gather_properties(np.frombuffer(log.buffer(index), np.uint8), pos, log.file_size)
        assert got == [r["properties"] for r in rows]


@pytest.mark.parametrize("engine", [_record, _record_py], ids=["engine", "twin"])
def test_gather_properties_malformed_utf8_and_bad_records(engine):
    props = b"k\x01v\x02" + b"bad\xff\xfekey\x01val\xe2\x82\x02x\x01y\x02"
    rec = fmt.encode_record(topic="t", body=b"", properties=props.decode("latin-1"))
    # encode_record encodes text as UTF-8; build the raw record by hand instead
    body_end = len(rec) - 2 - len(props.decode("latin-1").encode("utf-8"))
    raw = bytearray(rec[:body_end])
    raw += len(props).to_bytes(2, "big") + props
    raw[0:4] = len(raw).to_bytes(4, "big")
    buf = np.frombuffer(bytes(raw), np.uint8)
    (got,) = engine.gather_properties(buf, np.array([0], np.int64), len(buf))
    assert got == fmt.decode_properties(props.decode("utf-8", "replace"))
    with pytest.raises(ValueError, match="0: bad magic"):
        engine.gather_properties(buf, np.array([4], np.int64), len(buf))
    with pytest.raises(ValueError, match="1: "):
        engine.gather_properties(buf, np.array([0, len(buf) - 3], np.int64), len(buf))


def test_check_bitmaps_public_api_on_golden_ext():
    store = cq.Store(DATA / "golden_store")
    bf = bloom.BloomFilter()
    ext = store.ext("GoldenFilterTopic", 0)
    rows = sorted((r for r in ROWS if r["topic"] == "GoldenFilterTopic" and r["queueId"] == 0),
                  key=lambda r: r["queueOffset"])
    first = [r for r in rows if r["ext"]["fileOffset"] < 1024]
    pos = np.array([r["ext"]["fileOffset"] for r in first], dtype=np.int64)
    for group in ("GID_SQL_A", "GID_SQL_B", "GID_SQL_C"):
        bit_pos = bf.calc_bit_positions(f"{group}#GoldenFilterTopic")
        got = cq.check_bitmaps(ext._map(0), pos, bit_pos, limit=ext.limit(0))
        want = [cq.kernels.HIT if next(g for g in r["groups"] if g["group"] == group)["bloomHit"] else cq.kernels.PRUNED
                for r in first]
        assert got.tolist() == want
    # a position outside the bitmap makes the broker's isHit throw: every unit passes
    assert set(cq.check_bitmaps(ext._map(0), pos, [1, 500, 2], limit=ext.limit(0)).tolist()) == {cq.kernels.PASS}


def _misaligned(values) -> np.ndarray:
    """``values`` as an int64 array 4 bytes off an 8-byte boundary (as one ConsumeQueue unit's
    ``tags_code`` field is)."""
    values = np.asarray(values, dtype=np.int64)
    raw = np.zeros(values.nbytes + 4, dtype=np.uint8)
    out = raw[4:].view(np.int64)
    out[:] = values
    assert out.flags.c_contiguous and not out.flags.aligned
    return out


def test_kernels_get_aligned_arrays_from_misaligned_input(monkeypatch):
    """The public calls hand the kernels aligned int64 arrays, whatever the caller passed: a
    kernel's load from a misaligned one is undefined behaviour (and faults on some machines)."""
    from cq import kernels

    seen = []

    def checking(fn):
        def call(*args):
            seen.extend(a.flags.aligned for a in args if isinstance(a, np.ndarray))
            return fn(*args)
        return call

    for module, name in ((kernels._ext, "ext_bloom_check"), (kernels._record, "gather_spans"),
                         (kernels._ext, "ext_locate"), (kernels._objects, "texts_list"),
                         (kernels._objects, "property_dicts")):
        monkeypatch.setattr(module, name, checking(getattr(module, name)))
    store = cq.Store(DATA / "golden_store")
    ext = store.ext("GoldenFilterTopic", 0)
    units = store.consume_queue("GoldenFilterTopic", 0).read()
    pos = np.array([r["ext"]["fileOffset"] for r in ROWS if r["topic"] == "GoldenFilterTopic"
                    and r["queueId"] == 0 and r["ext"]["fileOffset"] < 1024], dtype=np.int64)
    bit_pos = bloom.BloomFilter().calc_bit_positions("GID_SQL_A#GoldenFilterTopic")
    want = cq.check_bitmaps(ext._map(0), pos, bit_pos, limit=ext.limit(0))
    assert cq.check_bitmaps(ext._map(0), _misaligned(pos), bit_pos, limit=ext.limit(0)).tolist() == want.tolist()
    buf = np.arange(64, dtype=np.uint8)
    assert [a.tolist() for a in cq.kernels.gather_spans(buf, _misaligned([3, 10]), _misaligned([4, 2]))] == \
        [[0, 4, 6], [3, 4, 5, 6, 10, 11]]
    one = units[:1]["tags_code"]  # one unit's field: contiguous, misaligned
    assert not one.flags.aligned
    assert ext.read_batch(one).tags_code.tolist() == ext.read_batch(one.copy()).tags_code.tolist()
    cols = store.commit_log.decode_columns(units["commit_log_offset"][:3], ["tags", "properties"])
    rows = _misaligned([2, 0])
    assert cols.texts("tags", rows=rows) == cols.texts("tags", rows=np.array([2, 0]))
    assert cols.dicts(rows) == cols.dicts(np.array([2, 0]))
    assert seen and all(seen)
    store.close()


@pytest.mark.parametrize("engine", [_record, _record_py], ids=["engine", "twin"])
def test_commit_log_walk(engine):
    log = cq.Store(DATA / "golden_store").commit_log
    results = [engine.commit_log_walk(np.frombuffer(log.buffer(i), np.uint8), 0) for i in range(len(log.files))]
    assert [s for _, s, _ in results] == [1] * 6 + [0]
    assert sum(r for _, _, r in results) == 300 == log.count_records()
    assert log.files[-1][0] + results[-1][0] == log.max_offset
    first = ROWS[0]
    buf = np.frombuffer(log.buffer(0), np.uint8).copy()
    buf[first["storeSize"] + 4] ^= 0xFF  # break the second record's magic
    assert engine.commit_log_walk(buf, 0) == (first["storeSize"], 2, 1)
    assert engine.commit_log_walk(buf[:5], 0) == (0, 0, 0)
    with pytest.raises(ValueError):
        engine.commit_log_walk(buf, -1)


def test_decode_record_twin_equals_engine_on_mutated_records():
    log = cq.Store(DATA / "golden_store").commit_log
    base = np.frombuffer(log.buffer(0), np.uint8)
    rng = np.random.default_rng(11)
    starts = [r["commitLogOffset"] for r in ROWS if r["commitLogOffset"] < 60000][:20]
    for _ in range(400):
        buf = base.copy()
        pos = int(rng.choice(starts))
        for _ in range(int(rng.integers(1, 4))):
            buf[pos + int(rng.integers(0, 120))] = rng.integers(0, 256)
        limit = int(rng.integers(pos, len(buf) + 1))
        results = []
        for engine in (_record, _record_py):
            try:
                results.append(("ok", engine.decode_record(buf, pos, limit)))
            except ValueError as exc:
                results.append(("error", exc.args[1]))
        assert results[0] == results[1]
