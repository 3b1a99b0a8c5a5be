"""Reading never changes a store: every read path leaves every file's bytes, the listing and
the mtimes as they were, and opens store files read-only.

Two checks back each other up: a snapshot (sha256 of every file, the directory listing,
sizes, modes and mtimes) compared before and after, and an audit hook that fails the test
the moment anything in this process opens a file under the store for writing or maps one
other than ``ACCESS_READ``. The copy's files are also made 0444 and its directories 0555, so a
write that slipped past both would fail with EACCES (except under root, which ignores the
mode bits; the audit hook is the check that still holds there).
"""
from __future__ import annotations

import contextlib
import mmap
import os
import shutil
import sys

import numpy as np
import pytest
from helpers import DATA, tree_snapshot

import cq
import rmqfilter
from cq.readers.registry import READERS
from cq.readers.tiered import TEST_TIER_DIR

TOPIC = "GoldenFilterTopic"
SQL = "a > 5 AND b = 'abc'"

_WATCH: list[str] = []      # store roots under watch; the hook is process-wide and cannot be removed
_VIOLATIONS: list[str] = []
_WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_TRUNC
_MAPPED_FDS: dict[int, str] = {}


def _under_watch(path) -> bool:
    if not _WATCH or not isinstance(path, (str, bytes, os.PathLike)):
        return False
    p = os.fsdecode(os.fspath(path))
    return any(p == root or p.startswith(root + os.sep) for root in _WATCH)


def _audit(event: str, args) -> None:
    if not _WATCH:
        return
    if event == "open":
        path, mode, flags = args
        if not _under_watch(path):
            return
        if isinstance(mode, str) and any(c in mode for c in "wax+"):
            _VIOLATIONS.append(f"open({path!r}, mode={mode!r})")
        if isinstance(flags, int) and flags & _WRITE_FLAGS:
            _VIOLATIONS.append(f"open({path!r}, flags={flags:#o})")
    elif event == "mmap.__new__":
        fileno, _length, access, _offset = args
        if fileno != -1 and access != mmap.ACCESS_READ:
            try:
                target = os.readlink(f"/proc/self/fd/{fileno}")
            except OSError:
                target = f"fd {fileno}"
            if _under_watch(target):
                _VIOLATIONS.append(f"mmap({target!r}, access={access})")
    elif event in ("os.truncate", "os.remove", "os.rename", "os.utime", "shutil.rmtree") and args \
            and _under_watch(args[0]):
        _VIOLATIONS.append(f"{event}{args!r}")


sys.addaudithook(_audit)


def _set_modes(root, file_mode: int, dir_mode: int) -> None:
    for dirpath, dirs, files in os.walk(root, topdown=False):
        for name in files:
            os.chmod(os.path.join(dirpath, name), file_mode)
        for name in dirs:
            os.chmod(os.path.join(dirpath, name), dir_mode)
    os.chmod(root, dir_mode)


def _write_config(root) -> None:
    """The config files a broker serving GID_SQL_A would persist; consumerOffset.json is empty, so
    readers take its .bak (the fallback path is read too)."""
    import bloom
    from cq.writer.config_writer import write_consumer_filters, write_consumer_offsets

    bf = bloom.BloomFilter()
    write_consumer_filters(root, [cq.RegisteredFilter("GID_SQL_A", TOPIC, SQL, "SQL92", 1, 0,
                                                      bf.generate(f"GID_SQL_A#{TOPIC}"), 1, True)])
    path = write_consumer_offsets(root, {(TOPIC, "GID_SQL_A"): {0: 10, 1: 20}})
    os.replace(path, path + ".bak")
    open(path, "w").close()


@pytest.fixture
def read_only_store(tmp_path, request):
    """A copy of the golden store (another store of tests/data when parametrized with its name; with
    config files) with 0444 files and 0555 directories, under the audit hook."""
    root = tmp_path / "store"
    shutil.copytree(DATA / getattr(request, "param", "golden_store"), root)
    _write_config(root)
    _set_modes(root, 0o444, 0o555)
    before = tree_snapshot(root)
    _WATCH.append(str(root))
    _VIOLATIONS.clear()
    try:
        yield root
    finally:
        _WATCH.remove(str(root))
        found = list(_VIOLATIONS)
        _VIOLATIONS.clear()
        after = tree_snapshot(root)
        _set_modes(root, 0o644, 0o755)  # so tmp_path can be cleaned up
    assert not found, f"store opened for writing: {found}"
    changed = sorted(k for k in before.keys() | after.keys() if before.get(k) != after.get(k))
    assert not changed, f"reading changed the store: {changed}"


def _every_library_read(root) -> int:
    """Run every read path of the library over ``root``; returns how many messages it saw."""
    seen = 0
    with contextlib.closing(cq.Store(root)) as store:
        log = store.commit_log
        msgs = list(log.messages(verify_crc=True))
        seen += len(msgs)
        assert len(list(log.messages(strict=False))) == len(msgs)
        assert log.count_records() == len(msgs)
        offsets = np.array([m.commit_log_offset for m in msgs], dtype=np.int64)
        assert len(log.decode_columns(offsets)) == len(msgs)
        assert len(log.gather_properties(offsets)) == len(msgs)
        for off in offsets[:20].tolist():
            log.read_message(off, verify_crc=True).uncompressed_body()
        _ = log.max_offset, log.min_offset, log.buffer(0)[:8].tobytes()
        for topic in store.topics():
            for q in store.queue_ids(topic):
                cqueue = store.consume_queue(topic, q)
                units = cqueue.read()
                list(cqueue.iter_batches(batch_size=17))
                list(cqueue.raw_chunks())
                cqueue.unit(cqueue.min_offset)
                cqueue.file_position(cqueue.min_offset)
                ext = store.ext(topic, q)
                if ext is not None:
                    list(ext.units())
                    assert ext.read_batch(units["tags_code"]).bitmaps.ndim == 2
                    ext.read_many(units["tags_code"])
                    [ext.get(a) for a in units["tags_code"][:10].tolist()]
                    _ = ext.max_offset
                for how in ({"sql": SQL}, {"tags": "TagA || TagB"}, {"tags": "*"}):
                    result = store.consume(topic, "GID_SQL_A", verify_crc=True, **how)
                    seen += len(list(result))
        # the config files, the IndexFiles, why and backlog
        assert [f.group for f in store.registered_filters()] == ["GID_SQL_A"]
        with pytest.warns(cq.ConfigWarning, match=r"consumerOffset.json is empty: read .*\.bak instead"):
            assert store.committed_offsets("GID_SQL_A", TOPIC) == {0: 10, 1: 20}
        assert store.subscription_groups() == {} and store.topic_configs() == {}
        seen += len(list(store.consume(TOPIC, "GID_SQL_A")))
        for q in store.queue_ids(TOPIC):
            for off in range(0, 100, 9):
                cq.why(store, TOPIC, "GID_SQL_A", queue_id=q, queue_offset=off)
        msg = msgs[0]
        cq.why(store, TOPIC, "GID_SQL_A", msg_id=msg.msg_id)
        cq.why(store, TOPIC, "GID_SQL_A", msg_id=msg.properties["UNIQ_KEY"])
        cq.why(store, TOPIC, "G", tags="*", key=msg.keys.split(" ")[0])
        with pytest.raises(LookupError):
            cq.find_messages(store, TOPIC, key="no-such-key")  # the index, then a scan of the topic
        with pytest.warns(cq.ConfigWarning):
            assert cq.backlog(store, TOPIC, "GID_SQL_A").lag == 170
    _read_registered(root, "golden_store")
    return seen


def _read_registered(root, store: str) -> None:
    """Every registered reader of ``store`` (cq/readers/registry.py) read whole over ``root``."""
    for entry in READERS:
        if entry.store == store:
            with contextlib.closing(entry.open(str(root))) as reader:
                assert entry.read_all(reader), f"{entry.name} read nothing"


def test_every_library_read_path_leaves_the_store_unchanged(read_only_store):
    assert _every_library_read(read_only_store) > 300


@pytest.mark.parametrize("read_only_store", sorted({e.store for e in READERS} - {"golden_store"}), indirect=True)
def test_readers_of_other_stores_leave_them_unchanged(read_only_store, request):
    """The registered readers whose generic tests read another store (a DLedger one) read it read-only."""
    _read_registered(read_only_store, request.node.callspec.params["read_only_store"])
    tier = os.path.join(read_only_store, TEST_TIER_DIR)  # a tiered store's tier (docs/reading.md#tiered-storage)
    with contextlib.closing(cq.Store(read_only_store, tier=tier if os.path.isdir(tier) else None)) as store:
        for topic in store.topics():
            assert list(store.consume(topic, "G", tags="*", verify_crc=True))


@pytest.mark.parametrize("argv", [
    ["inspect", "{root}"],
    ["inspect", "{root}", "--json", "--count-messages"],
    ["consume", "{root}", "--topic", TOPIC, "--group", "GID_SQL_A", "--sql", SQL, "--format", "jsonl",
     "--verify-crc"],
    ["consume", "{root}", "--topic", TOPIC, "--group", "G", "--tags", "TagA || TagB", "--format", "text"],
    ["consume", "{root}", "--topic", "GoldenPlainTopic", "--group", "G", "--tags", "*", "--no-bloom",
     "--format", "none", "--queue", "1"],
    ["cost", "{root}", "--topic", TOPIC, "--sql-group", "GID_SQL_A", SQL, "--tag-group", "T", "TagA || TagB",
     "--no-timing"],
    ["cost", "{root}", "--topic", "GoldenPlainTopic", "--sql-group", "G", "a > 1", "--fp-target", "1%"],
    ["consume", "{root}", "--topic", TOPIC, "--group", "G", "--tags", "*", "--filter", "filters_for_tests:queue0_batch",
     "--format", "jsonl"],
    ["consume", "{root}", "--topic", TOPIC, "--group", "GID_SQL_A", "--format", "text"],
    ["consume", "{root}", "--topic", TOPIC, "--all-groups", "--format", "jsonl"],
    ["why", "{root}", "--topic", TOPIC, "--group", "GID_SQL_A", "--queue", "0", "--offset", "7"],
    ["why", "{root}", "--topic", TOPIC, "--group", "GID_SQL_A", "--msg-id", "0A00030700002A9F0000000000000000",
     "--json"],
    ["why", "{root}", "--topic", TOPIC, "--group", "G", "--tags", "TagA", "--key", "order-115"],
    ["backlog", "{root}", "--topic", TOPIC, "--group", "GID_SQL_A"],
    ["backlog", "{root}", "--topic", TOPIC, "--all-groups", "--json"],
    # a glob of store roots: read as a cluster (docs/reading.md#clusters), here of one broker
    ["inspect", "{root}*"],
    ["consume", "{root}*", "--topic", TOPIC, "--group", "GID_SQL_A", "--format", "jsonl"],
    ["why", "{root}*", "--topic", TOPIC, "--group", "G", "--tags", "TagA", "--key", "order-115"],
    ["backlog", "{root}*", "--topic", TOPIC, "--all-groups", "--json"],
])
def test_read_only_cli_commands_leave_the_store_unchanged(read_only_store, argv, capsys):
    code = rmqfilter.main([a.format(root=read_only_store) for a in argv])
    captured = capsys.readouterr()
    assert code == 0 and (captured.out or captured.err)


def test_readers_map_store_files_read_only(read_only_store):
    """While files are mapped, /proc/self/maps shows them without write permission."""
    if not os.path.exists("/proc/self/maps"):
        pytest.skip("needs /proc/self/maps (Linux)")
    store = cq.Store(read_only_store)
    try:
        list(store.consume(TOPIC, "GID_SQL_A", sql=SQL))
        with open("/proc/self/maps") as f:
            lines = [line.split() for line in f if str(read_only_store) in line]
        assert lines, "no store file is mapped while the store is open"
        for fields in lines:
            assert "w" not in fields[1], f"{fields[-1]} is mapped {fields[1]}"
    finally:
        store.close()


def test_the_audit_hook_would_catch_a_write(read_only_store):
    """The check itself can fail: opening a store file for writing is recorded."""
    path = read_only_store / "commitlog" / "00000000000000000000"
    with contextlib.suppress(PermissionError), open(path, "r+b"):
        pass
    assert _VIOLATIONS and "mode='r+'" in _VIOLATIONS[0]
    _VIOLATIONS.clear()


@pytest.mark.spark
def test_spark_data_source_leaves_the_store_unchanged(spark, tmp_path):
    """Executors run in other processes (no audit hook there): the snapshot alone decides."""
    root = tmp_path / "store"
    shutil.copytree(DATA / "golden_store", root)
    _write_config(root)
    _set_modes(root, 0o444, 0o555)
    before = tree_snapshot(root)
    try:
        rows = spark.read.format("rocketmq").load(str(root)).count()
        filtered = (spark.read.format("rocketmq").option("topic", TOPIC).option("group", "GID_SQL_A")
                    .option("sql", SQL).load(str(root)).count())
        # the group looked up in config/consumerFilter.json, read from its committed offsets
        backlog = (spark.read.format("rocketmq").option("topic", TOPIC).option("group", "GID_SQL_A")
                   .option("from_committed", "true").load(str(root)).count())
    finally:
        after = tree_snapshot(root)
        _set_modes(root, 0o644, 0o755)
    assert rows == 300 and 0 < filtered < 300 and backlog <= filtered
    assert before == after

