"""Differential tests: the Cython engines against their pure-Python twins and numpy (hypothesis)."""
from __future__ import annotations

import numpy as np
import pytest
from helpers import DATA
from hypothesis import example, given, settings
from hypothesis import strategies as st

from cq import format as fmt
from cq.kernels import (
    _decode_py,
    _dledger_py,
    _ext_py,
    _inner_py,
    _objects_py,
    _record_py,
    _tags_py,
    _tagscan_py,
)

_tagscan = pytest.importorskip("cq.kernels._tagscan")
_ext = pytest.importorskip("cq.kernels._ext")
_record = pytest.importorskip("cq.kernels._record")
_decode = pytest.importorskip("cq.kernels._decode")
_inflate = pytest.importorskip("cq.kernels._inflate")
_objects = pytest.importorskip("cq.kernels._objects")
_tags = pytest.importorskip("cq.kernels._tags")
_inner = pytest.importorskip("cq.kernels._inner")

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
    assert _tagscan.scan_tags(raw, code_arr).tolist() == want.tolist()
    assert _tagscan_py.scan_tags(raw, code_arr).tolist() == want.tolist()


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
    """Any properties bytes, in a record: both engines' property readers (the recovery walk's
    ``gather_properties`` and the decoder's map, as dicts) give what the broker's parse gives."""
    host = fmt.parse_host("127.0.0.1:1")[0]
    record = fmt.pack_record(fmt.MESSAGE_MAGIC_CODE_V2, 0, 0, 0, 0, 0, 0, 0, host, 0, host, 0, 0, b"",
                             fmt.encode_topic_field(b"T", fmt.MESSAGE_MAGIC_CODE_V2), data)
    buf, at = np.frombuffer(bytes(record), np.uint8), np.zeros(1, np.int64)
    want = fmt.decode_properties_bytes(data)
    mask = fmt.record_field_mask(["properties"])
    for record_kernels, decoder, objects in ((_record, _decode, _objects), (_record_py, _decode_py, _objects_py)):
        assert record_kernels.gather_properties(buf, at, len(buf)) == [want]
        columns, error = decoder.decode_columns(buf, at, len(buf), mask)
        assert error is None and objects.property_dicts(*columns["properties"]) == [want]


@settings(max_examples=80, deadline=None)
@given(data=st.one_of(st.binary(max_size=80), st.binary(min_size=2040, max_size=2060),
                      st.binary(min_size=4000, max_size=9000)))
def test_recovery_crc_equals_zlib(data):
    """The recovery walk's CRC-32 (inline for short bodies, zlib for long ones) is zlib's."""
    import zlib

    assert _record.crc32_of(np.frombuffer(data, np.uint8)) == zlib.crc32(data)


@settings(max_examples=60, deadline=None)
@given(data=st.one_of(st.binary(max_size=100), st.binary(min_size=5540, max_size=5600),
                      st.binary(min_size=11000, max_size=12000)))
@example(data=b"\xff" * 5552)
@example(data=b"\xff" * 200_000)
def test_inflate_adler32_equals_zlib(data):
    """The Adler-32 inflate_bodies checks bodies with (32 bytes a step where the CPU can, blocks of
    5552 bytes between reductions as zlib's; all-0xFF bytes give the largest sums) is zlib's."""
    import zlib

    assert _inflate.adler32_of(np.frombuffer(data, np.uint8)) == zlib.adler32(data)


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
    for engine in (_objects, _objects_py):
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
    got = _ext.ext_locate(addresses, starts, 4096)
    want = _ext_py.ext_locate(addresses, starts, 4096)
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
    for engine in (_objects, _objects_py):
        got = engine.property_dicts(mo, keys[0], keys[1], values[0], values[1])
        assert got == dicts and [list(g.items()) for g in got] == [list(d.items()) for d in dicts]
    got = _objects.property_dicts(mo, keys[0], keys[1], values[0], values[1])
    tags = [next(k for k in g if k == "TAGS") for g in got if "TAGS" in g]
    assert len(tags) > 100 and all(t is tags[0] for t in tags)


def test_kernels_take_every_offset_from_the_format_module():
    """The compiled kernels were built with the layout cq/format.py gives today (``_layout.h`` is
    written from it at build time), and the twins read the same table: one home for each offset."""
    from cq.kernels import _layout_py, layout

    _layout = pytest.importorskip("cq.kernels._layout")
    want = layout.layout(fmt)
    assert _layout.LAYOUT == want == _layout_py.LAYOUT
    # the named positions of cq/format.py, as the kernels read them
    assert want["REC_SYS_FLAG"] == fmt.RECORD_SYS_FLAG_POSITION
    assert want["REC_QUEUE_OFFSET"] == fmt.RECORD_OFFSETS_POSITION
    assert want["REC_BORN_HOST"] == fmt.RECORD_BORN_HOST_POSITION == fmt.RECORD_PREFIX_STRUCT.size
    assert want["CQ_TAG_LOW"] == fmt.MSG_TAG_OFFSET_INDEX + 4 and want["CQ_UNIT_SIZE"] == fmt.CQ_STORE_UNIT_SIZE
    assert want["EXT_HEAD"] == fmt.MIN_EXT_UNIT_SIZE == fmt.EXT_UNIT_HEADER_STRUCT.size
    assert (want["MAGIC_V1"], want["MAGIC_V2"], want["MAGIC_BLANK"]) == (
        fmt.MESSAGE_MAGIC_CODE_V1, fmt.MESSAGE_MAGIC_CODE_V2, fmt.BLANK_MAGIC_CODE)
    # the fixed fields the kernels step over add up to format's fixed size, and with two IPv4 hosts,
    # a 1-byte topic length and the 2-byte properties length to the smallest record
    assert want["REC_BORN_HOST"] + want["STORE_TS_WIDTH"] + want["REC_TAIL"] == fmt.RECORD_FIXED_SIZE
    hosts = 2 * (want["IPV4_WIDTH"] + want["PORT_WIDTH"])
    assert fmt.RECORD_FIXED_SIZE + hosts + 1 + 2 == want["REC_MIN_SIZE"]


_DLEDGER_FILES = sorted((DATA / "dledger_store" / "dledger-n0" / "data").iterdir())


@settings(max_examples=300, deadline=None)
@given(file=st.sampled_from(_DLEDGER_FILES), flips=st.lists(st.tuples(st.integers(0, 65535), st.integers(0, 255)),
                                                            max_size=6),
       cut=st.integers(0, 65536), pos=st.sampled_from([0, 8, 300]), check_crc=st.booleans(),
       max_records=st.sampled_from([-1, 0, 1, 7]), last_index=st.sampled_from([-1, 0, 41]),
       last_term=st.sampled_from([-1, 0, 1, 2**40]))
def test_dledger_scan_engine_equals_twin(file, flips, cut, pos, check_crc, max_records, last_index, last_term):
    """The DLedger entry walk on damaged files of the DLedger fixture: same records, stop, reason."""
    _dledger = pytest.importorskip("cq.kernels._dledger")
    data = bytearray(file.read_bytes())
    for at, value in flips:
        data[at] = value
    buf = np.frombuffer(bytes(data), np.uint8)
    start = int(file.name)
    limit = max(cut, pos)
    got = _dledger.dledger_scan(buf, start, pos, limit, check_crc, max_records, last_index, last_term)
    want = _dledger_py.dledger_scan(buf, start, pos, limit, check_crc, max_records, last_index, last_term)
    assert (got[0].tolist(), *got[1:]) == (want[0].tolist(), *want[1:])


def _inner_message(body: bytes, props: bytes, flag: int, crc: int) -> bytes:
    size = fmt.INNER_MESSAGE_HEAD_STRUCT.size + len(body) + fmt.INNER_PROPERTIES_LENGTH_STRUCT.size + len(props)
    return (fmt.INNER_MESSAGE_HEAD_STRUCT.pack(size, 0, crc, flag, len(body)) + body
            + fmt.INNER_PROPERTIES_LENGTH_STRUCT.pack(len(props)) + props)


@settings(max_examples=300, deadline=None)
@given(messages=st.lists(st.tuples(st.binary(max_size=40), st.binary(max_size=40), st.integers(-(2**31), 2**31 - 1),
                                   st.integers(-(2**31), 2**31 - 1)), max_size=8),
       cut=st.integers(0, 400), flips=st.lists(st.tuples(st.integers(0, 400), st.integers(0, 255)), max_size=3))
def test_split_inner_engine_equals_twin(messages, cut, flips):
    """The inner-batch split (docs/formats.md#inner-batch): whole bodies, cut and damaged ones give the
    same spans, error byte and error text in both engines; a whole body gives every message back."""
    whole = b"".join(_inner_message(*m) for m in messages)
    spans, at, error = _inner_py.split_inner(np.frombuffer(whole, np.uint8))
    assert error is None and at == -1 and len(spans) == len(messages)
    for (body, props, flag, crc), (c, f, start, n, pn) in zip(messages, spans.tolist()):
        assert (whole[start:start + n], pn, f, c) == (body, len(props), flag, crc)
    damaged = bytearray(whole[:cut] if cut < len(whole) else whole)
    for at_byte, value in flips:
        if at_byte < len(damaged):
            damaged[at_byte] = value
    buf = np.frombuffer(bytes(damaged), np.uint8)
    want = _inner_py.split_inner(buf)
    got = _inner.split_inner(buf)
    assert (got[0].tolist(), got[1], got[2]) == (want[0].tolist(), want[1], want[2])


@settings(max_examples=200, deadline=None)
@given(bodies=st.lists(st.lists(st.tuples(st.binary(max_size=30), st.binary(max_size=60), st.integers(-(2**31), 2**31 - 1),
                                          st.integers(-(2**31), 2**31 - 1)), max_size=5), max_size=6),
       gap=st.binary(max_size=5), damage=st.one_of(st.none(), st.tuples(st.integers(0, 5), st.integers(0, 300))))
def test_split_records_engine_equals_twin_and_split_inner(bodies, gap, damage):
    """Many inner-batch bodies in one buffer (a decoded body column, docs/formats.md#inner-batch): both
    engines give each body's messages as ``split_inner`` gives them alone, starts counted from the
    buffer's start; a cut body stops the split there with ``split_inner``'s error, in both engines."""
    raw = [b"".join(_inner_message(*m) for m in msgs) for msgs in bodies]
    if damage is not None and raw:
        i = damage[0] % len(raw)
        raw[i] = raw[i][:damage[1]] if damage[1] < len(raw[i]) else raw[i] + b"\x00"
    buf, starts = b"", []
    for r in raw:
        buf += gap
        starts.append(len(buf))
        buf += r
    arr = np.frombuffer(buf, np.uint8)
    starts, lengths = np.array(starts, np.int64), np.array([len(r) for r in raw], np.int64)
    got = _inner.split_records(arr, starts, lengths)
    want = _inner_py.split_records(arr, starts, lengths)
    assert (got[0].tolist(), got[1].tolist(), *got[2:]) == (want[0].tolist(), want[1].tolist(), *want[2:])
    spans, counts, bad, at, error = want
    alone = [_inner_py.split_inner(np.frombuffer(r, np.uint8)) for r in raw]
    first_bad = next((i for i, (_s, _a, e) in enumerate(alone) if e is not None), -1)
    assert (bad, at, error) == ((-1, -1, None) if first_bad < 0 else (first_bad, *alone[first_bad][1:]))
    expected = [[c, f, s + int(starts[i]), n, pn] for i, (sp, _a, _e) in enumerate(alone[:len(raw) if bad < 0 else bad])
                for c, f, s, n, pn in sp.tolist()]
    assert spans.tolist() == expected
    done = len(raw) if bad < 0 else bad
    assert counts[:done].tolist() == [len(sp) for sp, _a, _e in alone[:done]]


@settings(max_examples=200, deadline=None)
@given(texts=st.lists(st.one_of(st.binary(max_size=60), st.dictionaries(
           st.sampled_from(["TAGS", "KEYS", "a", "UNIQ_KEY", "é"]), st.text(max_size=8), max_size=4).map(
           lambda d: fmt.encode_properties(d).encode())), max_size=6),
       fields=st.sets(st.sampled_from(["properties", "tags", "keys"]), min_size=1))
def test_properties_columns_engine_equals_twin_and_the_decoder(texts, fields):
    """Properties texts outside a record (an inner message's): both engines give the columns the
    decoder gives for the same text inside a record."""
    buf = np.frombuffer(b"".join(texts), np.uint8)
    lengths = np.array([len(t) for t in texts], np.int64)
    starts = (np.cumsum(lengths) - lengths).astype(np.int64)
    mask = fmt.record_field_mask(sorted(fields))
    got = _decode.properties_columns(buf, starts, lengths, mask)
    want = _decode_py.properties_columns(buf, starts, lengths, mask)
    host = fmt.parse_host("127.0.0.1:1")[0]
    records = [bytes(fmt.pack_record(fmt.MESSAGE_MAGIC_CODE_V2, 0, 0, 0, 0, 0, 0, 0, host, 0, host, 0, 0, b"",
                                     fmt.encode_topic_field(b"T", fmt.MESSAGE_MAGIC_CODE_V2), t)) for t in texts]
    positions = (np.cumsum([len(r) for r in records]) - [len(r) for r in records]).astype(np.int64)
    rbuf = np.frombuffer(b"".join(records) or b"\x00", np.uint8)
    decoded, error = _decode.decode_columns(rbuf, positions, len(rbuf), mask)
    assert error is None and got.keys() == want.keys() == decoded.keys() == fields
    for name in fields:
        for g, w, d in zip(got[name], want[name], decoded[name]):
            assert (g is None and w is None and d is None) or (np.array_equal(g, w) and np.array_equal(g, d)), name


@settings(max_examples=60, deadline=None)
@given(st.binary(min_size=8, max_size=400), st.data())
def test_record_totals_engine_equals_twin(raw, data):
    """A bucket read's check of the records it fetched by the units' sizes: TOTALSIZE read unsigned, the
    magic a message's, at least the smallest record, ending by its end; the engine as the twin."""
    buf = bytearray(raw)
    pos = data.draw(st.lists(st.integers(0, len(buf) - 8), max_size=12))
    for p in pos:  # some heads made a real record's
        if data.draw(st.booleans()):
            total = data.draw(st.integers(0, 600))
            magic = data.draw(st.sampled_from([fmt.MESSAGE_MAGIC_CODE_V1, fmt.MESSAGE_MAGIC_CODE_V2, fmt.BLANK_MAGIC_CODE]))
            buf[p:p + 8] = total.to_bytes(4, "big") + magic.to_bytes(4, "big", signed=True)
    b = np.frombuffer(bytes(buf), dtype=np.uint8)
    p = np.array(pos, dtype=np.int64)
    end = np.array([data.draw(st.integers(x, len(buf))) for x in pos], dtype=np.int64)
    min_total = data.draw(st.integers(0, 200))
    total, ok = _record.record_totals(b, p, end, min_total)
    total_py, ok_py = _record_py.record_totals(b, p, end, min_total)
    assert total.tolist() == total_py.tolist() and ok.tolist() == ok_py.tolist()
    for i, x in enumerate(pos):  # the rule itself
        t = int.from_bytes(buf[x:x + 4], "big")
        magic = int.from_bytes(buf[x + 4:x + 8], "big", signed=True)
        assert total[i] == t
        assert ok[i] == (magic in (fmt.MESSAGE_MAGIC_CODE_V1, fmt.MESSAGE_MAGIC_CODE_V2) and t >= min_total
                         and x + t <= end[i])
    with pytest.raises(ValueError, match="no 8-byte head"):
        _record.record_totals(b, np.array([len(buf) - 7], dtype=np.int64), np.array([len(buf)], dtype=np.int64), 0)


@settings(max_examples=100, deadline=None)
@given(st.lists(st.tuples(st.integers(-2**63, 2**63 - 1), st.integers(-2**31, 2**31 - 1), st.integers(-2**63, 2**63 - 1)),
                max_size=40))
def test_data_end_engine_equals_twin(units):
    """The unit that ends a queue's data (a negative CommitLog offset or a size of at most 0): the engine as
    the twin and as the rule says, over any units."""
    raw = b"".join(fmt.encode_cq_unit(*u) for u in units)
    want = next((i for i, (off, size, _) in enumerate(units) if off < 0 or size <= 0), len(units))
    b = np.frombuffer(raw, dtype=np.uint8)
    assert _tagscan.data_end(b) == _tagscan_py.data_end(b) == want
