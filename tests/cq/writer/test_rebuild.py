"""``rebuild_bitmaps`` reads the source CommitLog through the columnar decoder (``column_batches``) and
writes the same store as appending the messages with the groups registered, and as the former
per-message reader (``cq.writer.rebuild._dispatch_messages``), on records the sample store lacks."""
from __future__ import annotations

import shutil
import sys
from pathlib import Path

import pytest

import cq
from cq.format import SCHEDULE_TOPIC
from cq.writer import rebuild
from cq.writer.rebuild import rebuild_bitmaps
from cq.writer.sample import SAMPLE_GROUPS, SAMPLE_TOPICS, _sample_messages
from cq.writer.writer import DEFAULT_MESSAGE_DELAY_LEVEL, StoreWriter, compress_body
from tests.cq.writer.test_writer import STORE_DIRS, assert_same_store, store_files

CONFIG = {"commit_log_file_size": 1 << 16, "consume_queue_file_size": 2000, "ext_file_size": 4096}
GROUPS = [(SAMPLE_TOPICS[0], g, sql) for g, sql in SAMPLE_GROUPS] + [
    ("Mixed", "GID_A2", "a = '2'"),  # the repeated key: the stored value that wins
    ("Mixed", "GID_BAD_UTF8", "KEYS = 'k\ufffd'"),  # malformed UTF-8 read as read_message reads it
    ("Mixed", "GID_NUM", "a > 1"),  # errors on text values: no bit
    ("Mixed", "GID_NONE", "missing IS NOT NULL"),
    (SCHEDULE_TOPIC, "GID_SCHED", "TAGS = 'later'"),
]


def _messages() -> list[dict]:
    out = list(_sample_messages(2500, 7, SAMPLE_TOPICS, {t: 3 for t in SAMPLE_TOPICS}))
    stamp = out[-1]["store_timestamp"]
    z, zflag = compress_body(b"zlib body " * 300)
    mixed = [
        {"body": z, "sys_flag": zflag, "tags": "TagZ", "born_host": "[2001:db8::7]:4321",
         "store_host": "[::1]:10911", "properties": {"a": "2"}},
        {"body": b"\xff\xfe body", "properties": b"TAGS\x01bad\xff\xfetag\x02KEYS\x01k\xc3\x02a\x01\xe2\x82",
         "born_host": "10.1.2.3:65535"},
        {"body": b"", "properties": b"a\x011\x02a\x012\x02\xff\x01x\x02\xfe\x01y\x02TAGS\x01t1\x02TAGS\x01t2"},
        {"body": b"x", "properties": b"", "born_host": "[fe80::1:2]:0", "store_host": "1.2.3.4:0"},
        {"body": b"y", "tags": "标签", "keys": ["k1", "k2"], "properties": {"a": "2", "missing": "no"}},
        {"body": b"p", "tags": "TagP", "sys_flag": 0x4, "properties": {"a": "2"}},  # PREPARED: no unit
        {"body": b"c", "tags": "TagC", "sys_flag": 0x8, "properties": {"a": "3"}},  # COMMIT
        {"body": b"r", "tags": "TagR", "sys_flag": 0xC},  # ROLLBACK: no unit
    ]
    for i, m in enumerate(mixed):
        out.append({"topic": "Mixed", "queue_id": i % 2, **m, "store_timestamp": stamp + i})
    for i, delay in enumerate(["3", "99", "0", "-1", "3"]):
        out.append({"topic": SCHEDULE_TOPIC, "queue_id": 2, "body": b"d", "tags": "later" if i else "TagD",
                    "properties": {"DELAY": delay, "REAL_TOPIC": "Mixed"}, "store_timestamp": stamp + 100 + i})
    for j, m in enumerate(out):  # interleave topics across blank records and file rolls
        m.setdefault("born_timestamp", 1_700_000_000_000 + j)
    return out


def _write(root: Path, messages: list[dict], groups) -> None:
    with StoreWriter(root, enable_ext=True, **CONFIG) as w:
        for g in groups:
            w.register_group(*g)
        w.append_many(messages)


def _rebuild_per_message(source: Path, dest: Path, groups) -> rebuild.RebuildResult:
    """The former reader: one Message and one properties dict per record."""
    return rebuild._rebuild(str(source), str(dest), rebuild._as_groups(groups), rebuild._dispatch_messages,
                            CONFIG["commit_log_file_size"], CONFIG["consume_queue_file_size"],
                            CONFIG["ext_file_size"], None, DEFAULT_MESSAGE_DELAY_LEVEL, None)


@pytest.fixture(scope="module")
def stores(tmp_path_factory) -> tuple[Path, Path]:
    root = tmp_path_factory.mktemp("rebuild")
    messages = _messages()
    _write(root / "plain", messages, [])
    _write(root / "expected", messages, GROUPS)
    return root / "plain", root / "expected"


def test_rebuild_equals_appending_with_the_groups(stores, tmp_path):
    plain, expected = stores
    before = store_files(plain)
    seen = []
    result = rebuild_bitmaps(plain, tmp_path / "out", GROUPS, progress=seen.append)
    assert store_files(plain) == before  # the source is only read
    assert_same_store(tmp_path / "out", expected)
    assert result.messages == seen[-1] == len(_messages())
    assert result.dispatched == result.messages - 2  # PREPARED and ROLLBACK get no unit
    # the selectors really set bits on the odd records: the repeated key, the malformed UTF-8
    store = cq.Store(tmp_path / "out")
    hits = {g: [m.body for m in store.consume("Mixed", group=g, sql=sql)] for _t, g, sql in GROUPS[3:6]}
    store.close()
    zipped = compress_body(b"zlib body " * 300)[0]
    assert hits["GID_A2"] == [zipped, b"", b"y"]  # b"": the last of the repeated a's is '2'
    assert hits["GID_BAD_UTF8"] == [b"\xff\xfe body"]
    assert hits["GID_NUM"] == [zipped, b"", b"y", b"c"]  # not the malformed a


def test_rebuild_equals_the_per_message_reader(stores, tmp_path):
    """Including a SCHEDULE_TOPIC record whose DELAY does not parse: neither path gives it a unit."""
    plain, _expected = stores
    source = tmp_path / "src"
    for sub in STORE_DIRS:
        shutil.copytree(plain / sub, source / sub)
    log = max((source / "commitlog").iterdir())  # the SCHEDULE_TOPIC records come last
    data = log.read_bytes()
    assert data.count(b"DELAY\x0199") == 1
    log.write_bytes(data.replace(b"DELAY\x0199", b"DELAY\x019x"))  # same length, properties not in BODYCRC
    got = rebuild_bitmaps(source, tmp_path / "columns", GROUPS)
    want = _rebuild_per_message(source, tmp_path / "messages", GROUPS)
    assert (got.messages, got.dispatched) == (want.messages, want.dispatched) == (len(_messages()),
                                                                                  len(_messages()) - 3)
    assert_same_store(tmp_path / "columns", tmp_path / "messages")
    filters = sorted(p.relative_to(tmp_path / "columns") for p in (tmp_path / "columns").rglob("*.json"))
    for rel in filters:  # consumerFilter.json: same groups, same bornTime
        assert (tmp_path / "columns" / rel).read_bytes() == (tmp_path / "messages" / rel).read_bytes()
    assert filters


def test_corrupt_source_raises_the_readers_error(stores, tmp_path):
    plain, _expected = stores
    source = tmp_path / "src"
    shutil.copytree(plain / "commitlog", source / "commitlog")
    path = min((source / "commitlog").iterdir())
    log = cq.CommitLog(source / "commitlog")
    victim = [m.commit_log_offset for m in log.messages()][7]
    log.close()
    with open(path, "r+b") as f:
        f.seek(victim + 4)
        f.write(b"\x12\x34\x56\x78")  # MAGICCODE
    log = cq.CommitLog(source / "commitlog")
    with pytest.raises(cq.StoreFormatError) as want:
        list(log.messages())
    log.close()
    with pytest.raises(cq.StoreFormatError) as got:
        rebuild_bitmaps(source, tmp_path / "out", GROUPS)
    assert (str(got.value), got.value.path, got.value.offset) == (str(want.value), want.value.path,
                                                                  want.value.offset)
    assert got.value.path == str(path) and got.value.offset == victim


def test_rebuild_without_pyarrow_evaluates_over_dicts(stores, tmp_path, monkeypatch):
    """cq does not need pyarrow: without it the selectors run over property dicts, same store."""
    plain, expected = stores
    monkeypatch.setitem(sys.modules, "pyarrow", None)  # import pyarrow raises ImportError
    with pytest.raises(ImportError):
        import pyarrow  # noqa: F401
    rebuild_bitmaps(plain, tmp_path / "out", GROUPS)
    assert_same_store(tmp_path / "out", expected)
