"""Differential tests: the Cython engines against their pure-Python twins and numpy (hypothesis)."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from cq import _scan_py, _tags_py
from cq import format as fmt

_scan = pytest.importorskip("cq._scan")
_tags = pytest.importorskip("cq._tags")

INT64 = st.integers(-(2**63), 2**63 - 1)
CODES = st.one_of(st.integers(-(2**31), 2**31 - 1), INT64)


@settings(max_examples=200, deadline=None)
@given(tags=st.lists(CODES, min_size=0, max_size=300), codes=st.lists(CODES, min_size=0, max_size=80),
       reuse=st.integers(0, 10))
def test_scan_tags_engine_equals_twin_and_numpy(tags, codes, reuse):
    codes = codes + tags[:reuse]  # make some units hit
    units = np.zeros(len(tags), dtype=fmt.CQ_UNIT_DTYPE)
    units["tags_code"] = tags
    raw = np.frombuffer(units.tobytes(), np.uint8)
    code_arr = np.unique(np.array(codes, dtype=np.int64).astype(np.uint32).astype(np.int32))
    want = np.flatnonzero(np.isin(np.array(tags, dtype=np.int64).astype(np.uint32).astype(np.int32), code_arr))
    assert _scan.scan_tags(raw, code_arr).tolist() == want.tolist()
    assert _scan_py.scan_tags(raw, code_arr).tolist() == want.tolist()


@settings(max_examples=300, deadline=None)
@given(st.lists(st.one_of(st.none(), st.text(alphabet=st.characters(min_codepoint=0, max_codepoint=0x10FFFF),
                                             max_size=40)), max_size=30))
def test_tags_code_engine_equals_twin(tags):
    assert _tags.tags_code_many_str(tags).tolist() == _tags_py.tags_code_many_str(tags).tolist()
    for t in tags:
        assert _tags.tags_code(t) == _tags_py.tags_code(t)


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=200))
def test_properties_decoding_engine_equals_twin(data):
    buf = np.frombuffer(data, np.uint8) if data else np.zeros(0, np.uint8)
    if len(buf):
        assert _scan.decode_properties_at(buf, 0, len(buf)) == _scan_py.decode_properties_at(buf, 0, len(buf))
    assert fmt.decode_properties_bytes(data) == _scan_py.decode_properties_at(buf, 0, len(buf))


@settings(max_examples=80, deadline=None)
@given(data=st.one_of(st.binary(max_size=80), st.binary(min_size=2040, max_size=2060),
                      st.binary(min_size=4000, max_size=9000)))
def test_recovery_crc_equals_zlib(data):
    """The recovery walk's CRC-32 (inline for short bodies, zlib for long ones) is zlib's."""
    import zlib

    assert _scan.crc32_of(np.frombuffer(data, np.uint8)) == zlib.crc32(data)


@settings(max_examples=60, deadline=None)
@given(data=st.one_of(st.binary(max_size=100), st.binary(min_size=5540, max_size=5600),
                      st.binary(min_size=11000, max_size=12000)))
@example(data=b"\xff" * 5552)
@example(data=b"\xff" * 200_000)
def test_inflate_adler32_equals_zlib(data):
    """The Adler-32 inflate_bodies checks bodies with (32 bytes a step where the CPU can, blocks of
    5552 bytes between reductions as zlib's; all-0xFF bytes give the largest sums) is zlib's."""
    import zlib

    assert _scan.adler32_of(np.frombuffer(data, np.uint8)) == zlib.adler32(data)


def _column(texts: list[str]) -> tuple[np.ndarray, np.ndarray]:
    raw = [t.encode() for t in texts]
    offsets = np.zeros(len(raw) + 1, np.int32)
    np.cumsum([len(r) for r in raw], out=offsets[1:])
    return offsets, np.frombuffer(b"".join(raw), np.uint8).copy()


TEXT = st.text(alphabet=st.characters(min_codepoint=1, max_codepoint=0x10FFFF, exclude_categories=("Cs",)),
               max_size=12)


@settings(max_examples=200, deadline=None)
@given(rows=st.lists(st.lists(st.tuples(st.sampled_from(["a", "TAGS", "KEYS", "ключ", "k"]) | TEXT, TEXT),
                              max_size=6), max_size=20))
def test_message_objects_from_columns_engine_equals_twin(rows):
    """The str and dict per row that cq.Message gets, built from a column's buffers, by both engines."""
    dicts = [dict(r) for r in rows]
    keys, values = _column([k for d in dicts for k in d]), _column([v for d in dicts for v in d.values()])
    mo = np.zeros(len(dicts) + 1, np.int32)
    np.cumsum([len(d) for d in dicts], out=mo[1:])
    for engine in (_scan, _scan_py):
        got = engine.property_dicts(mo, keys[0], keys[1], values[0], values[1])
        assert got == dicts and [list(g) for g in got] == [list(d) for d in dicts]
        picked = np.arange(len(dicts) - 1, -1, -2, dtype=np.int64)  # some rows, in another order
        assert engine.property_dicts(mo, keys[0], keys[1], values[0], values[1], picked) == [dicts[r] for r in picked]
        with pytest.raises(IndexError, match="outside"):
            engine.property_dicts(mo, keys[0], keys[1], values[0], values[1], np.array([len(dicts)], np.int64))
        flat = [v for d in dicts for v in d.values()]
        assert engine.texts_list(*values) == flat
        assert engine.texts_list(*values, True) == [v.encode() for v in flat]
        with pytest.raises(ValueError, match="past"):
            engine.texts_list(values[0] + 1, values[1][:0] if len(values[1]) else values[1])


@settings(max_examples=200, deadline=None)
@given(files=st.lists(st.integers(0, 40), max_size=6, unique=True),
       offsets=st.lists(st.one_of(st.integers(0, 41 * 4096), st.just(0)), max_size=60),
       plain=st.lists(st.integers(fmt.MAX_ADDR + 1, 2**63 - 1), max_size=10))
def test_ext_locate_engine_equals_twin(files, offsets, plain):
    """An ext address's file and position: gaps between files, offset 0, past the last file, non-addresses."""
    starts = np.array(sorted(f * 4096 for f in files), dtype=np.int64)
    addresses = np.array([fmt.decorate(o) for o in offsets] + plain, dtype=np.int64)
    got = _scan.ext_locate(addresses, starts, 4096)
    want = _scan_py.ext_locate(addresses, starts, 4096)
    assert [g.tolist() for g in got] == [w.tolist() for w in want]
    for i, off in enumerate(offsets):  # a held offset is its file's start plus its position
        if got[0][i] >= 0 and off:
            assert starts[got[0][i]] + got[1][i] == off
    assert (got[0][len(offsets):] == -1).all()


def test_property_dicts_past_the_shared_key_table_and_value_ways():
    """Keys and values are shared between rows through a table of 256 keys and the last 4 values of
    each: a column of 700 distinct keys, values cycling through 9 per key, keys moving place from
    row to row, gives the twin's dicts (same entries, same order) from both engines, and each key
    text the table holds is one str."""
    rng = np.random.default_rng(7)
    dicts = []
    for r in range(400):
        names = [f"key{int(k)}" for k in rng.choice(700, size=int(rng.integers(0, 12)), replace=False)]
        names += ["TAGS", "region"][: r % 3]
        dicts.append({k: f"v{(r + len(k)) % 9}" for k in names})
    keys, values = _column([k for d in dicts for k in d]), _column([v for d in dicts for v in d.values()])
    mo = np.zeros(len(dicts) + 1, np.int32)
    np.cumsum([len(d) for d in dicts], out=mo[1:])
    for engine in (_scan, _scan_py):
        got = engine.property_dicts(mo, keys[0], keys[1], values[0], values[1])
        assert got == dicts and [list(g.items()) for g in got] == [list(d.items()) for d in dicts]
    got = _scan.property_dicts(mo, keys[0], keys[1], values[0], values[1])
    tags = [next(k for k in g if k == "TAGS") for g in got if "TAGS" in g]
    assert len(tags) > 100 and all(t is tags[0] for t in tags)
