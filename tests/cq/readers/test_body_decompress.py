"""Bodies on the data path as the consumer reads them: ``CommitLog.decode_columns(decompress_body=True)``
(kernel ``inflate_bodies`` in ``cq/kernels/_inflate.pyx`` and its twin), the data source's option ``body`` and
``rmqfilter consume --body``, each equal to ``Message.uncompressed_body()`` / ``Message.body``."""
from __future__ import annotations

import importlib.util
import json
import zlib

import numpy as np
import pytest
from helpers import ENGINE_CASES, kernels, use_kernels

import cq
import rmqfilter
from cq import format as fmt
from cq.writer.writer import compress_body

ENGINES = {"compiled": kernels("compiled"), "twin": kernels("twin")}
TOPIC = "Bodies"
ZLIB = fmt.COMPRESSED_FLAG | (fmt.COMPRESSION_ZLIB << fmt.COMPRESSION_TYPE_SHIFT)
CODECS = [name for name, module in (("lz4", "lz4"), ("zstd", "zstandard")) if importlib.util.find_spec(module)]


def _text(n: int, seed: int) -> bytes:
    """Compressible but not trivial: words drawn from a small vocabulary."""
    words = np.array([b"order", b"price", b"region", b"cn-hangzhou", b"7.25", b"\xe5\x8c\x97\xe4\xba\xac", b"{", b"}"])
    picks = np.random.default_rng(seed).integers(0, len(words), size=n // 5)
    return b" ".join(words[picks].tolist())[:n]


def _bodies() -> list[tuple[str, bytes, int]]:
    """(label, stored body, sys_flag): plain bodies between ZLIB ones of every kind, then LZ4/ZSTD."""
    rows = [("plain", b"plain body", 0), ("empty", b"", 0)]
    for i, n in enumerate((4096, 20_000, 300_000)):  # 300 KB: the kernel grows its output many times
        rows.append((f"zlib-5-{n}", *compress_body(_text(n, i))))
        rows.append(("plain-between", _text(100 + i, 50 + i), fmt.MULTI_TAGS_FLAG))
    rows.append(("zlib-9", *compress_body(_text(9000, 7), level=9)))
    rows.append(("zlib-legacy-type-0", zlib.compress(_text(6000, 8), 5), fmt.COMPRESSED_FLAG))
    rows.append(("zlib-trailing-bytes", zlib.compress(_text(5000, 9)) + b"after the stream", ZLIB))
    rows.append(("zlib-empty", zlib.compress(b""), ZLIB))
    rows.append(("not-compressed-type-bits", b"stored as is", fmt.COMPRESSION_ZLIB << fmt.COMPRESSION_TYPE_SHIFT))
    for codec in CODECS:
        rows.append((codec, *compress_body(_text(8000, 10), codec)))
        rows.append((f"zlib-after-{codec}", *compress_body(_text(4500, 11))))
    return rows


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    """Every body kind, in a CommitLog of 64 KiB files (the decoder works file by file)."""
    root = tmp_path_factory.mktemp("bodies") / "store"
    with cq.StoreWriter(root, commit_log_file_size=1 << 16) as w:
        for i, (label, body, sys_flag) in enumerate(_bodies() * 3):
            w.append(TOPIC, body, queue_id=i % 2, sys_flag=sys_flag, tags=label)
    s = cq.Store(root)
    assert len(s.commit_log.files) > 2
    yield s
    s.close()


def _offsets(store: cq.Store) -> np.ndarray:
    return np.array([m.commit_log_offset for m in store.commit_log.messages()], dtype=np.int64)


@pytest.mark.parametrize("engine", ENGINE_CASES)
@pytest.mark.parametrize("fields", [["body"], ["tags", "body"], None])
def test_decompressed_column_is_uncompressed_body_stored_column_is_body(store, engine, fields, monkeypatch):
    use_kernels(monkeypatch, engine, "cq.readers.commitlog")
    log = store.commit_log
    offsets = np.random.default_rng(1).permutation(_offsets(store))
    messages = log.read_messages(offsets)
    assert sum(m.is_compressed for m in messages) == 3 * (7 + 2 * len(CODECS))
    got = log.decode_columns(offsets, fields, decompress_body=True)
    stored = log.decode_columns(offsets, fields)
    want_fields = [n for n, _ in fmt.RECORD_FIELDS] if fields is None else fields
    assert list(got.columns) == list(stored.columns) == want_fields  # sys_flag is not added to the output
    for i, m in enumerate(messages):
        assert got.value("body", i) == m.uncompressed_body(), m.tags
        assert stored.value("body", i) == m.body, m.tags
        if fields is None:  # every other column as stored, sys_flag included
            for name in want_fields:
                if name != "body":
                    assert got.value(name, i) == stored.value(name, i), name


@pytest.mark.parametrize("engine", ENGINE_CASES)
@pytest.mark.parametrize("codec", ["lz4", "zstd"])
def test_lz4_and_zstd_rows(store, engine, codec, monkeypatch):
    if codec not in CODECS:
        pytest.skip(f"the {codec} package is not installed")
    use_kernels(monkeypatch, engine, "cq.readers.commitlog")
    messages = [m for m in store.commit_log.messages() if m.tags in (codec, f"zlib-after-{codec}")]
    assert len(messages) == 6
    cols = store.commit_log.decode_columns([m.commit_log_offset for m in messages], ["body"], decompress_body=True)
    assert [cols.value("body", i) for i in range(6)] == [m.uncompressed_body() for m in messages]
    assert all(m.uncompressed_body() == _text(8000, 10) for m in messages if m.tags == codec)


@pytest.mark.parametrize("engine", ENGINE_CASES)
def test_kernel_leaves_lz4_zstd_and_unknown_types_to_python(engine):
    bodies = [zlib.compress(b"a" * 70_000), b"lz4 frame", b"zstd frame", b"type 4", b"\x78\x9cnot deflate", b"raw"]
    flags = [ZLIB, fmt.COMPRESSED_FLAG | 1 << 8, fmt.COMPRESSED_FLAG | 2 << 8, fmt.COMPRESSED_FLAG | 4 << 8, ZLIB, 0]
    offsets = np.zeros(len(bodies) + 1, dtype=np.int32)
    np.cumsum([len(b) for b in bodies], out=offsets[1:])
    data = np.frombuffer(b"".join(bodies), dtype=np.uint8)
    new_offsets, new_data, rest = ENGINES[engine].inflate_bodies(offsets, data, np.array(flags, dtype=np.int32))
    assert rest.tolist() == [1, 2, 3, 4]
    assert new_offsets.tolist() == [0, 70_000, 70_000, 70_000, 70_000, 70_000, 70_003]
    assert new_data.tobytes() == b"a" * 70_000 + b"raw"


def _small_window(data: bytes) -> bytes:
    c = zlib.compressobj(5, zlib.DEFLATED, 9)  # a 512-byte window: the header's CINFO is 1, not 7
    return c.compress(data) + c.flush()


def _with_dictionary(data: bytes) -> bytes:
    c = zlib.compressobj(zdict=b"dictionary")  # FDICT set: zlib.decompress cannot inflate it
    return c.compress(data) + c.flush()


GOOD = zlib.compress(b"check me " * 500)


@pytest.mark.parametrize("engine", ENGINE_CASES)
@pytest.mark.parametrize(("label", "body", "inflates"), [
    ("small-window", _small_window(b"window " * 900), True),
    ("level-1", zlib.compress(b"fast " * 900, 1), True),
    ("adler32-flipped", GOOD[:-1] + bytes([GOOD[-1] ^ 1]), False),
    ("trailer-cut", GOOD[:-2], False),
    ("trailer-missing", GOOD[:-4], False),
    ("preset-dictionary", _with_dictionary(b"dict " * 900), False),
    ("header-check-bad", bytes([0x78, 0x9D]) + GOOD[2:], False),
])
def test_kernel_inflates_exactly_what_zlib_inflates(engine, label, body, inflates):
    """The header, the window and the Adler-32 trailer decide as in zlib.decompress (the compiled kernel
    reads the usual header itself and checks the trailer with its own Adler-32)."""
    try:
        want = zlib.decompress(body)
    except zlib.error:
        want = None
    assert (want is not None) == inflates
    bodies = [b"before", body, b"after"]
    offsets = np.zeros(4, dtype=np.int32)
    np.cumsum([len(b) for b in bodies], out=offsets[1:])
    data = np.frombuffer(b"".join(bodies), dtype=np.uint8)
    new_offsets, new_data, rest = ENGINES[engine].inflate_bodies(offsets, data, np.array([0, ZLIB, 0], np.int32))
    assert rest.tolist() == ([] if inflates else [1])
    assert new_data.tobytes() == b"before" + (want or b"") + b"after"
    assert new_offsets.tolist() == [0, 6, 6 + len(want or b""), 11 + len(want or b"")]


@pytest.mark.parametrize("engine", ENGINE_CASES)
def test_a_body_that_fails_after_inflating_much_leaves_nothing_behind(engine):
    cut = zlib.compress(bytes(1 << 20))[:-20]  # inflates most of 1 MiB, then ends too soon
    for bodies, flags in (([cut], [ZLIB]), ([b"ab", cut, b"c"], [0, ZLIB, 0])):
        offsets = np.zeros(len(bodies) + 1, dtype=np.int32)
        np.cumsum([len(b) for b in bodies], out=offsets[1:])
        data = np.frombuffer(b"".join(bodies), dtype=np.uint8)
        new_offsets, new_data, rest = ENGINES[engine].inflate_bodies(offsets, data, np.array(flags, np.int32))
        assert new_data.tobytes() == b"".join(b for b, f in zip(bodies, flags) if not f)
        assert rest.tolist() == [flags.index(ZLIB)] and new_offsets[-1] == len(new_data)


@pytest.mark.parametrize("engine", ENGINE_CASES)
def test_no_compressed_row_returns_the_column_itself(engine):
    offsets = np.array([0, 3, 3, 8], dtype=np.int32)
    data = np.frombuffer(b"abcdefgh", dtype=np.uint8)
    # the type bits alone do not make a body compressed
    flags = np.array([0, fmt.COMPRESSION_ZLIB << fmt.COMPRESSION_TYPE_SHIFT, fmt.MULTI_TAGS_FLAG], dtype=np.int32)
    new_offsets, new_data, rest = ENGINES[engine].inflate_bodies(offsets, data, flags)
    assert new_offsets is offsets and new_data is data and len(rest) == 0


@pytest.mark.parametrize("engine", ENGINE_CASES)
def test_engines_give_the_same_column(store, engine):
    cols = store.commit_log.decode_columns(_offsets(store), ["body", "sys_flag"]).columns
    offsets, data, _ = cols["body"]
    got = ENGINES[engine].inflate_bodies(offsets, data, cols["sys_flag"])
    want = ENGINES["twin"].inflate_bodies(offsets, data, cols["sys_flag"])
    for a, b in zip(got, want):
        assert a.dtype == b.dtype and np.array_equal(a, b)


@pytest.mark.parametrize("engine", ENGINE_CASES)
def test_a_decompression_bomb_stops_at_the_limit(engine):
    # 16 MiB of zeros in ~16 KiB: with a 1 MiB limit the kernel stops before inflating (or allocating) it all
    bomb = zlib.compress(bytes(16 << 20), 9)
    offsets = np.array([0, 5, 5 + len(bomb)], dtype=np.int32)
    data = np.frombuffer(b"plain" + bomb, dtype=np.uint8)
    flags = np.array([0, ZLIB], dtype=np.int32)
    with pytest.raises(OverflowError, match=r"body column of 2 records passes 1048576 bytes once decompressed"):
        ENGINES[engine].inflate_bodies(offsets, data, flags, 1 << 20)
    new_offsets, new_data, rest = ENGINES[engine].inflate_bodies(offsets, data, flags, (16 << 20) + 5)
    assert new_offsets.tolist() == [0, 5, (16 << 20) + 5] and not new_data[5:].any() and len(rest) == 0


@pytest.mark.parametrize("engine", ENGINE_CASES)
def test_bad_offsets_are_refused(engine):
    data = np.frombuffer(b"abc", dtype=np.uint8)
    with pytest.raises(ValueError, match="outside the data of 3 bytes at row 1"):
        ENGINES[engine].inflate_bodies(np.array([0, 2, 9], np.int32), data, np.array([1, 1], np.int32))
    with pytest.raises(ValueError, match="len\\(sys_flag\\) \\+ 1 = 3"):
        ENGINES[engine].inflate_bodies(np.array([0, 2], np.int32), data, np.array([1, 1], np.int32))


@pytest.fixture(scope="module")
def bad_store(tmp_path_factory):
    """Good compressed bodies, then bodies no codec reads, across two CommitLog files."""
    root = tmp_path_factory.mktemp("bad-bodies") / "store"
    good = compress_body(_text(5000, 3))
    rows = [("good", *good), ("padding", _text(64_000, 4), 0), ("good-2", *good),
            ("not-deflate", b"\x78\x9c this is not deflate", ZLIB),
            ("cut-short", good[0][:-10], ZLIB),
            ("type-6", good[0], fmt.COMPRESSED_FLAG | 6 << fmt.COMPRESSION_TYPE_SHIFT)]
    if "zstd" in CODECS:  # without the package the row raises ImportError, not a format error
        rows.append(("zstd-garbage", b"not a zstd frame", fmt.COMPRESSED_FLAG | fmt.COMPRESSION_ZSTD << 8))
    with cq.StoreWriter(root, commit_log_file_size=1 << 16) as w:
        offsets = {label: w.append(TOPIC, body, sys_flag=flag, tags=label).commit_log_offset
                   for label, body, flag in rows}
    s = cq.Store(root)
    assert len(s.commit_log.files) == 2 and offsets["good"] < s.commit_log.files[1][0] <= offsets["good-2"]
    yield s, offsets
    s.close()


@pytest.mark.parametrize("engine", ENGINE_CASES)
@pytest.mark.parametrize("bad", ["not-deflate", "cut-short", "type-6", "zstd-garbage"])
def test_a_body_that_does_not_decompress_is_uncompressed_bodys_error(bad_store, engine, bad, monkeypatch):
    if bad == "zstd-garbage" and "zstd" not in CODECS:
        pytest.skip("the zstandard package is not installed")
    use_kernels(monkeypatch, engine, "cq.readers.commitlog")
    store, offsets = bad_store
    log = store.commit_log
    with pytest.raises(cq.StoreFormatError) as want:
        log.read_message(offsets[bad]).uncompressed_body()
    start, path = log.files[1]
    assert (want.value.path, want.value.offset) == (path, offsets[bad] - start)
    assert f"{path} at byte offset {offsets[bad] - start}: " in str(want.value)
    batch = [offsets["good"], offsets["padding"], offsets["good-2"], offsets[bad], offsets["good"]]
    with pytest.raises(cq.StoreFormatError) as got:
        log.decode_columns(batch, ["body"], decompress_body=True)
    assert (str(got.value), got.value.path, got.value.offset) == (str(want.value), path, offsets[bad] - start)
    assert len(log.decode_columns(batch, ["body"])) == 5  # as stored, nothing to decompress


def _consume_jsonl(store: cq.Store, *extra: str, capsys) -> list[dict]:
    assert rmqfilter.main(["consume", store.root, "--topic", TOPIC, "--group", "G", "--tags", "*",
                     "--format", "jsonl", "--progress", "never", *extra]) == 0
    return [json.loads(line) for line in capsys.readouterr().out.splitlines()]


def test_consume_jsonl_body_length_uncompressed_by_default_or_as_stored(store, capsys):
    messages = {(m.queue_id, m.queue_offset): m for m in store.consume(TOPIC, "G", tags="*")}
    default = _consume_jsonl(store, capsys=capsys)
    stored = _consume_jsonl(store, "--body", "stored", capsys=capsys)
    assert len(default) == len(stored) == len(messages)
    for d, s in zip(default, stored):
        m = messages[(d["queue_id"], d["queue_offset"])]
        assert (d["body_length"], s["body_length"]) == (len(m.uncompressed_body()), len(m.body))
    assert any(d["body_length"] != s["body_length"] for d, s in zip(default, stored))


def test_consume_names_a_body_that_does_not_decompress(bad_store, capsys):
    store, _ = bad_store
    assert rmqfilter.main(["consume", store.root, "--topic", TOPIC, "--group", "G", "--tags", "not-deflate",
                     "--format", "jsonl", "--progress", "never"]) == 2
    assert "does not decompress" in capsys.readouterr().err
    assert rmqfilter.main(["consume", store.root, "--topic", TOPIC, "--group", "G", "--tags", "not-deflate",
                     "--format", "jsonl", "--progress", "never", "--body", "stored"]) == 0


def _source_rows(store: cq.Store, **options) -> dict:
    """``(queue_id, queue_offset) -> (body, sys_flag)`` of the data source's reader, run in-process."""
    import pyarrow as pa

    from pyspark_udfs import _reader
    from pyspark_udfs.datasource import ReadOptions, RocketMQReader

    opts = ReadOptions.parse({"path": store.root, "topic": TOPIC, **options})
    schema = opts.schema()
    table = pa.Table.from_batches([b for p in RocketMQReader(opts, schema).partitions()
                                   for b in _reader.read_partition(opts, schema, p, [])])
    return {(q, o): (b, f) for q, o, b, f in zip(*(table[c].to_pylist()
                                                  for c in ("queue_id", "queue_offset", "body", "sys_flag")))}


@pytest.mark.parametrize("engine", ENGINE_CASES)
def test_data_source_reader_body_option(store, engine, monkeypatch):
    use_kernels(monkeypatch, engine, "cq.readers.commitlog")
    messages = list(store.consume(TOPIC, "G", tags="*"))
    default = _source_rows(store)
    stored = _source_rows(store, body="Stored")
    assert len(default) == len(stored) == len(messages) == len(_bodies()) * 3
    for m in messages:
        key = (m.queue_id, m.queue_offset)
        assert default[key] == (m.uncompressed_body(), m.sys_flag)  # sys_flag as stored
        assert stored[key] == (m.body, m.sys_flag)


def test_data_source_refuses_an_unknown_body_option(store):
    from pyspark_udfs.datasource import ReadOptions

    with pytest.raises(ValueError, match="rocketmq option 'body': expected one of uncompressed, stored, got 'zip'"):
        ReadOptions.parse({"path": store.root, "body": "zip"})


@pytest.mark.spark
def test_spark_body_is_uncompressed_body_or_as_stored(spark, store):
    messages = {(m.queue_id, m.queue_offset): m for m in store.consume(TOPIC, "G", tags="*")}
    reader = spark.read.format("rocketmq").option("topic", TOPIC)
    default = reader.load(store.root).select("queue_id", "queue_offset", "body").collect()
    stored = reader.option("body", "stored").load(store.root).select("queue_id", "queue_offset", "body").collect()
    assert len(default) == len(stored) == len(messages)
    assert all(bytes(r.body) == messages[(r.queue_id, r.queue_offset)].uncompressed_body() for r in default)
    assert all(bytes(r.body) == messages[(r.queue_id, r.queue_offset)].body for r in stored)
    with pytest.raises(Exception, match="rocketmq option 'body': expected one of uncompressed, stored, got 'raw'"):
        spark.read.format("rocketmq").option("body", "raw").load(store.root).count()


def test_data_source_skips_a_body_that_does_not_decompress_with_on_corrupt_skip(bad_store):
    store, offsets = bad_store
    with pytest.raises(cq.StoreFormatError, match="does not decompress"):
        _source_rows(store)
    kept = _source_rows(store, on_corrupt="skip")
    units = store.consume_queue(TOPIC, 0).read(0, len(offsets))
    assert sorted(int(units["commit_log_offset"][o]) for _, o in kept) == sorted(
        offsets[k] for k in ("good", "padding", "good-2"))
    assert len(_source_rows(store, body="stored")) == len(offsets)


GROUP_T0 = 1_700_000_000_000


@pytest.fixture(scope="module")
def group_store(tmp_path_factory):
    """SQL92 groups with Bloom bitmaps over records, some of whose bodies no codec reads.

    Group ``GN`` (``n > 3``) was born after the first 40 messages: layer 1 passes those
    untested (read with its registration), so layer 2 rejects some of the records it reads. Every body that does not
    decompress is in a record ``GN`` does not receive; ``GALL`` (``n >= 0``) receives them all.
    """
    root = tmp_path_factory.mktemp("group-bodies") / "store"
    t0 = GROUP_T0
    good = compress_body(_text(3000, 5))
    bad = (b"\x78\x9c this is not deflate", ZLIB)
    with cq.StoreWriter(root, enable_ext=True, cluster=None) as w:
        w.register_group(TOPIC, "GALL", "n >= 0", born_time=t0 - 1)
        for i in range(120):
            if i == 40:
                w.register_group(TOPIC, "GN", "n > 3", born_time=t0 + 100)
            n = i % 7
            body, flag = bad if n == 2 and i % 3 == 0 else good if i % 2 else (_text(50, i), 0)
            w.append(TOPIC, body, sys_flag=flag, queue_id=i % 2, properties={"n": str(n)},
                     store_timestamp=t0 + (i if i < 40 else 200 + i))
    s = cq.Store(root)
    yield s
    s.close()


def test_group_read_decodes_each_record_once_and_never_fails_a_record_the_group_does_not_receive(
        group_store, monkeypatch):
    """A group whose layer 1 prunes on bitmaps takes layer 2 from the output batches' own decode
    (``fuses_layer2``): the same rows as the unfused read and as ``Store.consume``, and a body
    that does not decompress fails (or is skipped) only in a record the group receives."""
    from pyspark_udfs import _reader

    fused = []
    real = _reader._GroupFilter.fuses_layer2
    monkeypatch.setattr(_reader._GroupFilter, "fuses_layer2", lambda self, *a: fused.append(real(self, *a)) or fused[-1])
    rows = _source_rows(group_store, group="GN")  # the registered filter data: bornTime included
    assert fused and all(fused)
    result = group_store.consume(TOPIC, "GN", sql="n > 3", born_time=GROUP_T0 + 100)
    want = {(m.queue_id, m.queue_offset): (m.uncompressed_body(), m.sys_flag) for m in result}
    assert rows == want and len(want) == sum(1 for i in range(120) if i % 7 > 3)
    assert result.stats.passed_consume_queue > len(want)  # layer 2 rejected records the read decoded
    assert _source_rows(group_store, group="GN", on_corrupt="skip") == want
    monkeypatch.setattr(_reader._GroupFilter, "fuses_layer2", lambda self, *a: False)
    assert _source_rows(group_store, group="GN") == want
    monkeypatch.setattr(_reader._GroupFilter, "fuses_layer2", real)
    # GALL receives the bad bodies: the read fails on the first, or skips exactly those
    with pytest.raises(cq.StoreFormatError, match="does not decompress"):
        _source_rows(group_store, group="GALL")
    kept = _source_rows(group_store, group="GALL", on_corrupt="skip")
    assert len(kept) == 120 - sum(1 for i in range(120) if i % 7 == 2 and i % 3 == 0)
