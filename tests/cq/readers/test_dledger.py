"""The DLedger CommitLog reader: the golden store's messages, as a DLedger broker stores them.

``tests/data/dledger_store`` and ``dledger_migrated_store`` hold the golden store's records in
DLedger entries (docs/formats.md#dledger-commitlog; how they were made: tests/data/DLEDGER_STORES.md).
Everything a reader answers must equal what it answers on the classic golden store, except
the CommitLog offsets, which point at the records inside the entries.
"""
from __future__ import annotations

import os
import pickle
import shutil
import struct
from contextlib import closing
from pathlib import Path

import numpy as np
import pytest
from helpers import DATA, patch_file

import cq
from cq import format as fmt

GOLDEN = DATA / "golden_store"
DLEDGER = DATA / "dledger_store"
MIGRATED = DATA / "dledger_migrated_store"
HEAD = fmt.DLEDGER_ENTRY_HEADER_STRUCT


def _content(msg: cq.Message) -> tuple:
    """What a consumer reads of a message, apart from its CommitLog offset."""
    return (msg.topic, msg.queue_id, msg.queue_offset, msg.body, msg.properties, msg.store_timestamp,
            msg.born_host, msg.store_host, msg.sys_flag, msg.body_crc)


@pytest.fixture(scope="module")
def golden():
    with closing(cq.Store(GOLDEN)) as store:
        yield store


@pytest.fixture(scope="module", params=["dledger", "migrated"])
def dstore(request):
    with closing(cq.Store(DLEDGER if request.param == "dledger" else MIGRATED)) as store:
        yield store


def test_the_store_is_detected_as_dledger(dstore):
    log = dstore.commit_log
    assert isinstance(log, cq.DLedgerCommitLog)
    if dstore.root.endswith("migrated_store"):
        assert dstore.layout.commit_log == "dledger+classic"
        assert log.divided_offset == 3 * 65536  # the first DLedger file starts after the 3 classic files
        assert os.path.dirname(log.files[0][1]).endswith(fmt.COMMIT_LOG_DIR)
    else:
        assert dstore.layout.commit_log == "dledger"
        assert log.divided_offset == 0
    assert dstore.layout.dledger_dir.endswith(os.path.join("dledger-n0", "data"))
    assert os.path.dirname(log.files[-1][1]) == dstore.layout.dledger_dir


def test_every_message_in_log_order_equals_the_classic_log(golden, dstore):
    expect = [_content(m) for m in golden.commit_log.messages(verify_crc=True)]
    got = list(dstore.commit_log.messages(verify_crc=True))
    assert [_content(m) for m in got] == expect
    assert len(got) == 300
    # the PHYSICALOFFSET field points at the record itself (entry position + 48)
    assert all(m.commit_log_offset == m._file_offset + _file_start(dstore.commit_log, m._path) for m in got)


def _file_start(log, path) -> int:
    return {p: s for s, p in log.files}[path]


def test_records_are_read_where_the_consume_queue_points(golden, dstore):
    for topic in golden.topics():
        for q in golden.queue_ids(topic):
            units = dstore.consume_queue(topic, q).read()
            msgs = dstore.commit_log.read_messages(units["commit_log_offset"])
            assert [m.commit_log_offset for m in msgs] == units["commit_log_offset"].tolist()
            assert [m.store_size for m in msgs] == units["size"].tolist()
            expect = golden.commit_log.read_messages(golden.consume_queue(topic, q).read()["commit_log_offset"])
            assert [_content(m) for m in msgs] == [_content(m) for m in expect]


def test_column_batches_are_the_messages(dstore):
    log = dstore.commit_log
    offsets = np.concatenate([b.columns["commit_log_offset"] for b in log.column_batches(
        ["commit_log_offset"], batch_records=37)])
    assert offsets.tolist() == [m.commit_log_offset for m in log.messages()]


@pytest.mark.parametrize("sub", [{"tags": "TagA || TagC"}, {"tags": "*"}, {"sql": "a > 5"},
                                 {"sql": "TAGS IN ('TagB') OR b = 'abc'"}])
def test_consume_equals_the_classic_store(golden, dstore, sub):
    for topic in golden.topics():
        expect = [_content(m) for m in golden.consume(topic, "G", **sub)]
        result = dstore.consume(topic, "G", **sub)
        assert [_content(m) for m in result] == expect
        assert result.stats.commit_log_missing == 0


def test_recovered_end_and_counts(golden, dstore):
    log = dstore.commit_log
    assert log.count_records() == golden.commit_log.count_records() == 300
    last = max(m.commit_log_offset + m.store_size for m in log.messages())
    assert log.max_offset == last


def test_pickles_as_its_directories(dstore):
    log = pickle.loads(pickle.dumps(dstore.commit_log))
    assert log.files == dstore.commit_log.files
    assert log.divided_offset == dstore.commit_log.divided_offset
    log.close()


# ------------------------------------------------------------------ damage
@pytest.fixture
def dcopy(tmp_path):
    dest = tmp_path / "store"
    shutil.copytree(DLEDGER, dest)
    return dest


def _entries(store_root):
    """``(path, position, size)`` of every entry of the last DLedger file."""
    log = cq.Store(store_root).commit_log
    start, path = log.files[-1]
    out = [(path, m.commit_log_offset - start - fmt.DLEDGER_BODY_OFFSET, m.store_size + fmt.DLEDGER_BODY_OFFSET)
           for m in log.messages() if m._path == path]
    log.close()
    return out


def test_a_partly_written_last_entry_is_the_end(dcopy):
    path, pos, size = _entries(dcopy)[-1]
    with open(path, "r+b") as f:  # the last entry's record torn: its header written, its body zeros
        f.seek(pos + fmt.DLEDGER_BODY_OFFSET + 8)
        f.write(bytes(size - fmt.DLEDGER_BODY_OFFSET - 8))
    with closing(cq.Store(dcopy)) as store:
        log = store.commit_log
        assert log.max_offset == _file_start(log, path) + pos
        assert len(list(log.messages(strict=False))) == 299
        with pytest.raises(cq.StoreFormatError) as err:
            list(log.messages())
        assert err.value.path == path and err.value.offset == pos + fmt.DLEDGER_BODY_OFFSET
        # the torn record's unit lies past the recovered end: outside the cut, not "missing"
        got = sum(1 for t in store.topics() for _ in store.consume(t, "G", tags="*"))
        assert got == 299


@pytest.mark.parametrize("field, value, reason", [
    (0, 7, "unknown DLedger entry magic 7"),
    (4, 10**9, "does not fit"),
    (16 + 8, 12345, "pos field 12345"),
    (44, 3, "!= bodyLen 3"),
])
def test_a_corrupt_entry_names_file_and_offset(dcopy, field, value, reason):
    path, pos, _ = _entries(dcopy)[5]
    width = 8 if field == 24 else 4
    patch_file(path, pos + field, struct.pack(">q" if width == 8 else ">i", value))
    with closing(cq.Store(dcopy)) as store:
        with pytest.raises(cq.StoreFormatError, match=reason) as err:
            list(store.commit_log.messages())
        assert (err.value.path, err.value.offset) == (path, pos)
        with pytest.raises(cq.StoreFormatError, match=reason):
            list(store.commit_log.column_batches())
        assert store.commit_log.max_offset == _file_start(store.commit_log, path) + pos  # recovery ends there


def test_an_index_out_of_sequence_is_corrupt(dcopy):
    path, pos, _ = _entries(dcopy)[3]
    index = HEAD.unpack_from(Path(path).read_bytes(), pos)[2]
    patch_file(path, pos + 8, struct.pack(">q", index + 5))
    with closing(cq.Store(dcopy)) as store, pytest.raises(cq.StoreFormatError, match="does not follow") as err:
        list(store.commit_log.messages())
    assert (err.value.path, err.value.offset) == (path, pos)


def test_a_term_below_the_entry_befores_is_corrupt(dcopy):
    """A term never decreases (a new leader's is higher): DLedger's recovery stops at an entry
    whose term is below the one before it, and rmqfilter names that entry."""
    entries = _entries(dcopy)
    path, pos, _ = entries[2]
    term = HEAD.unpack_from(Path(path).read_bytes(), pos)[3]
    patch_file(path, pos + 16, struct.pack(">q", term + 5))
    bad_path, bad_pos, _ = entries[3]
    with closing(cq.Store(dcopy)) as store:
        with pytest.raises(cq.StoreFormatError, match=f"term {term} is below the term {term + 5}") as err:
            list(store.commit_log.messages())
        assert (err.value.path, err.value.offset) == (bad_path, bad_pos)
        with pytest.raises(cq.StoreFormatError, match="is below the term"):
            list(store.commit_log.column_batches())


def test_a_noop_entry_holds_no_record(tmp_path):
    """DLedger's NOOP entries (empty body) are stepped over."""
    src = tmp_path / "src"
    shutil.copytree(DLEDGER, src)
    path, pos, _ = _entries(src)[-1]
    end = pos + _entries(src)[-1][2]
    start = _file_start(cq.Store(src).commit_log, path)
    index = HEAD.unpack_from(Path(path).read_bytes(), pos)[2] + 1
    patch_file(path, end, HEAD.pack(fmt.DLEDGER_MAGIC_NOOP, fmt.DLEDGER_BODY_OFFSET, index, 0, start + end,
                                    0, 0, 0, 0))
    with closing(cq.Store(src)) as store:
        assert len(list(store.commit_log.messages())) == 300
        assert store.commit_log.max_offset == start + end + fmt.DLEDGER_BODY_OFFSET


def test_the_writers_refuse_a_dledger_store(tmp_path):
    """StoreWriter and rebuild_bitmaps write classic CommitLogs: beside a DLedger log, readers
    would not find those records, so they refuse it instead."""
    root = tmp_path / "store"
    shutil.copytree(DLEDGER, root)
    with pytest.raises(cq.UnsupportedLayoutError, match="DLedger CommitLog"):
        cq.StoreWriter(root, append=True)
    with pytest.raises(cq.UnsupportedLayoutError, match="DLedger CommitLog"):
        cq.rebuild_bitmaps(root, tmp_path / "rebuilt", [])
    assert not (root / fmt.COMMIT_LOG_DIR).exists()


def test_record_batches_between_two_offsets(dstore):
    """CommitLog.record_batches (the writer's redispatch walk) across entries, blanks and the division."""
    log = dstore.commit_log
    msgs = list(log.messages())
    for a, b in ((0, len(msgs)), (17, 200), (150, 151), (299, 300)):
        start, end = msgs[a].commit_log_offset, msgs[b - 1].commit_log_offset + msgs[b - 1].store_size
        got = [int(o) for c in log.record_batches(start, end, ("commit_log_offset", "store_size"), 11)
               for o in c.columns["commit_log_offset"]]
        assert got == [m.commit_log_offset for m in msgs[a:b]], (a, b)
