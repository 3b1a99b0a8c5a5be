"""``append=True`` re-dispatches the records an interrupted writer left without units, reading the
CommitLog in decoded column batches (``cq.CommitLog.record_batches``, ``cq.writer.recovery.redispatch``),
and the ConsumeQueue and ext files come out byte for byte as a writer that was never interrupted
wrote them.

The store: about 2,600 records over a multi-file CommitLog (blank end-of-file records), several
topics and queues, SQL92 groups (ext bitmaps), PREPARED / COMMIT / ROLLBACK records,
``SCHEDULE_TOPIC_XXXX`` records with DELAY levels, malformed UTF-8 (the records of
``tests/cq/writer/test_rebuild.py``). Its ConsumeQueues are cut as a kill leaves them (units and files
past a point lost, ext units past the last referenced one still on disk), or lost entirely.
"""
from __future__ import annotations

import shutil
import struct
from pathlib import Path

import numpy as np
import pytest
from helpers import PUREPYTHON, kernels, use_kernels

import cq
from cq.format import RECORD_OFFSETS_POSITION, SCHEDULE_TOPIC, list_queue_files
from cq.readers.columns import factorize
from cq.writer import recovery
from cq.writer.writer import StoreWriter
from tests.cq.writer.test_rebuild import CONFIG, GROUPS, _messages, _rebuild_per_message, _write
from tests.cq.writer.test_writer import STORE_DIRS, assert_same_store

ENGINES = {"compiled": kernels("compiled"), "twin": kernels("twin")}


@pytest.fixture(params=["twin"] if PUREPYTHON else list(ENGINES))  # the pure-Python pass: the twin only
def engine(request, monkeypatch):
    """The scan kernel the walk and the decoder use: the compiled engine or its pure-Python twin."""
    use_kernels(monkeypatch, request.param, "cq.readers.commitlog", "cq.writer.recovery")
    return request.param


@pytest.fixture(scope="module")
def intact(tmp_path_factory) -> Path:
    """The store written in one go, with the groups registered."""
    root = tmp_path_factory.mktemp("redispatch") / "intact"
    _write(root, _messages(), GROUPS)
    return root


def _copy(source: Path, dest: Path) -> Path:
    for sub in STORE_DIRS:
        shutil.copytree(source / sub, dest / sub)
    return dest


def _queues(root: Path) -> list[tuple[str, int, Path]]:
    base = root / "consumequeue"
    return [(t.name, int(q.name), q) for t in sorted(base.iterdir()) for q in sorted(t.iterdir(), key=lambda p: int(p.name))]


def _cut_queue(directory: Path, keep: int) -> None:
    """Keep the first ``keep`` units of a ConsumeQueue: later files deleted, the rest of the file zeroed."""
    cut = keep * 20
    for start, path in list_queue_files(str(directory)):
        if start >= cut and start > 0:
            Path(path).unlink()
        elif start <= cut < start + CONFIG["consume_queue_file_size"]:
            data = Path(path).read_bytes()
            Path(path).write_bytes(data[:cut - start] + bytes(len(data) - (cut - start)))


def _reopen(root: Path) -> None:
    """What a restarted writer does before anything new: recover, register the groups, close."""
    with StoreWriter(root, enable_ext=True, append=True, **CONFIG) as w:
        for g in GROUPS:
            w.register_group(*g)


def _units(root: Path) -> int:
    store = cq.Store(root)
    try:
        return sum(len(store.consume_queue(t, q).read()) for t in store.topics() for q in store.queue_ids(t))
    finally:
        store.close()


@pytest.mark.parametrize(("cut", "batch"), [
    (cut, batch) for cut in ("tails", "lost-queue", "no-consumequeue") for batch in (None, 97)
] + [("lost-queue", 2)])  # two-record batches: the restart after many held-back batches
def test_redispatch_writes_the_uninterrupted_store(intact, tmp_path, engine, cut, batch, monkeypatch):
    """``tails``: every queue lost a different part of its units (the pass starts at the earliest
    loss and skips the units still on disk); ``lost-queue``: besides, one queue's files never
    reached the disk (the pass starts over from the first CommitLog file); ``no-consumequeue``:
    every unit lost (one pass from the first record, each batch written as it is decided)."""
    if batch is not None:
        monkeypatch.setattr(recovery, "_REDISPATCH_BATCH", batch)
    root = _copy(intact, tmp_path / "store")
    total = _units(root)
    assert len(cq.CommitLog(root / "commitlog").files) >= 8  # blank records end the files
    if cut == "no-consumequeue":
        shutil.rmtree(root / "consumequeue")
        shutil.rmtree(root / "consumequeue_ext")
    else:
        queues = _queues(root)
        assert len(queues) >= 8
        for i, (_topic, _qid, directory) in enumerate(queues):
            units = len(cq.ConsumeQueue(directory).read())
            _cut_queue(directory, max(1, units * (i % 5) // 5))  # one unit up to four fifths of them
        if cut == "lost-queue":
            topic, qid, directory = queues[1]
            shutil.rmtree(directory)
            shutil.rmtree(root / "consumequeue_ext" / topic / str(qid))
    assert _units(root) < total
    _reopen(root)
    assert _units(root) == total
    assert_same_store(root, intact)


def test_a_record_whose_dispatch_fails_gets_no_unit(intact, tmp_path, engine):
    """A ``SCHEDULE_TOPIC_XXXX`` record whose DELAY is not an int: the broker's dispatch fails, no unit;
    the store equals the one the per-message reader builds from the same CommitLog."""
    root = _copy(intact, tmp_path / "store")
    log = max((root / "commitlog").iterdir())  # the SCHEDULE_TOPIC records come last
    data = log.read_bytes()
    assert data.count(b"DELAY\x0199") == 1
    log.write_bytes(data.replace(b"DELAY\x0199", b"DELAY\x019x"))  # same length, properties not in BODYCRC
    reference = _rebuild_per_message(root, tmp_path / "reference", GROUPS)
    total = _units(root)
    shutil.rmtree(root / "consumequeue")
    shutil.rmtree(root / "consumequeue_ext")
    _reopen(root)
    assert _units(root) == total - 1 == reference.dispatched
    assert_same_store(root, tmp_path / "reference")
    store = cq.Store(root)
    delays = [m.properties["DELAY"] for m in store.commit_log.messages() if m.topic == SCHEDULE_TOPIC]
    units = store.consume_queue(SCHEDULE_TOPIC, 2).read()
    store.close()
    assert delays == ["3", "9x", "0", "-1", "3"] and len(units) == 4


def _offsets_between(log: cq.CommitLog, start: int, end: int) -> list[int]:
    batches = list(log.record_batches(start, end, ("commit_log_offset", "store_size"), 7))
    assert all(0 < len(b) <= 7 for b in batches)
    return np.concatenate([b.columns["commit_log_offset"] for b in batches]).tolist() if batches else []


def test_walk_between_offsets_across_blank_records(intact, engine):
    """The records from ``start`` to ``end``: every record in between, across files; a start on a
    blank end-of-file record moves to the next file."""
    log = cq.CommitLog(intact / "commitlog")
    try:
        offsets = [m.commit_log_offset for m in log.messages()]
        ends = {m.commit_log_offset + m.store_size for m in log.messages()}
        end = log.max_offset
        for i in (0, 1, 500, 1234, len(offsets) - 1):
            assert _offsets_between(log, offsets[i], end) == offsets[i:]
            assert _offsets_between(log, offsets[0], offsets[i]) == offsets[:i]
        blank = next(e for e in sorted(ends) if e not in offsets and e < end)  # the end of a file's data
        after = [o for o in offsets if o > blank]
        assert after[0] % CONFIG["commit_log_file_size"] == 0
        assert _offsets_between(log, blank, end) == after
        assert _offsets_between(log, end, end) == []
    finally:
        log.close()


def test_walk_between_offsets_raises_the_readers_error_at_a_corrupt_record(intact, tmp_path, engine):
    root = _copy(intact, tmp_path / "store")
    log = cq.CommitLog(root / "commitlog")
    victim = [m for m in log.messages()][900]
    end = log.max_offset
    log.close()
    index = victim.commit_log_offset // CONFIG["commit_log_file_size"]
    path = sorted((root / "commitlog").iterdir())[index]
    with open(path, "r+b") as f:
        f.seek(victim.commit_log_offset % CONFIG["commit_log_file_size"] + 4)
        f.write(b"\x12\x34\x56\x78")  # MAGICCODE
    log = cq.CommitLog(root / "commitlog")
    try:
        with pytest.raises(cq.StoreFormatError) as want:
            log.read_message(victim.commit_log_offset)
        with pytest.raises(cq.StoreFormatError) as got:
            _offsets_between(log, 0, end)
    finally:
        log.close()
    assert (str(got.value), got.value.path, got.value.offset) == (str(want.value), want.value.path,
                                                                  want.value.offset)


@pytest.mark.parametrize("batch", [None, 2], ids=["batch-default", "batch-2"])
@pytest.mark.parametrize("back", [1, 5])
def test_a_record_repeating_a_dispatched_queue_offset_gets_no_unit(intact, tmp_path, engine, batch, back,
                                                                    monkeypatch):
    """The queue already holds that offset: a record whose QUEUEOFFSET is not past the last one
    dispatched to its queue is skipped (the others keep their units, in log order), whether the
    record that took the offset is in the same batch or an earlier one."""
    if batch is not None:
        monkeypatch.setattr(recovery, "_REDISPATCH_BATCH", batch)
    root = _copy(intact, tmp_path / "store")
    topic = _queues(root)[0][0]
    store = cq.Store(root)
    want = store.consume_queue(topic, 0).read()["commit_log_offset"].tolist()
    store.close()
    victim = want[50]
    index, at = divmod(victim, CONFIG["commit_log_file_size"])
    with open(sorted((root / "commitlog").iterdir())[index], "r+b") as f:
        f.seek(at + RECORD_OFFSETS_POSITION)
        f.write(struct.pack(">q", 50 - back))  # QUEUEOFFSET, not covered by BODYCRC
    _cut_queue(root / "consumequeue" / topic / "0", 40)
    _reopen(root)
    store = cq.Store(root)
    got = store.consume_queue(topic, 0).read()["commit_log_offset"].tolist()
    store.close()
    assert got == want[:50] + want[51:]


DELAYS = ["3", "99", "0", "-1", " 3", "+3", "x", "", "2147483648", "-2147483648", "\u0663", "18", "19", "0003"]


def test_batch_tags_codes_equal_the_record_rule(tmp_path, engine):
    """``StoreWriter.dispatch_tags_codes`` (the columns) gives per record what ``dispatch_tags_code``
    (a properties dict) gives, and fails where it raises: DELAY texts Java's ``parseInt`` reads
    or refuses, a repeated DELAY (the last value counts), no TAGS, DELAY on another topic."""
    texts = [f"TAGS\x01t{i}\x02DELAY\x01{d}\x02" for i, d in enumerate(DELAYS)]
    texts += ["DELAY\x01x\x02DELAY\x012\x02", "DELAY\x012\x02DELAY\x01x\x02", "a\x011\x02", "", "TAGS\x01\u6807\x02"]
    records = [(SCHEDULE_TOPIC, t) for t in texts] + [("Other", t) for t in texts[:3]]
    buf = bytearray()
    positions = []
    for i, (topic, text) in enumerate(records):
        positions.append(len(buf))
        buf += cq.format.encode_record(topic=topic, body=b"b", properties=text, store_timestamp=1_700_000_000_000 + i)
    u8 = np.frombuffer(bytes(buf), np.uint8)
    mask = cq.format.record_field_mask(["topic", "tags", "store_timestamp", "properties"])
    columns, error = ENGINES[engine].decode_columns(u8, np.array(positions, np.int64), len(u8), mask)
    assert error is None
    cols = cq.readers.columns.MessageColumns(columns, len(records))
    with StoreWriter(tmp_path / "w") as w:
        topic_ids, topics = factorize(*cols.columns["topic"][:2])
        codes, ok = w.dispatch_tags_codes(cols, topic_ids, topics)
        want_codes, want_ok = [], []
        for i, pos in enumerate(positions):
            m = cq.readers.commitlog.decode_message(u8, pos, len(u8))
            try:
                want_codes.append(w.dispatch_tags_code(m.topic, m.properties, m.store_timestamp))
                want_ok.append(True)
            except ValueError:
                want_codes.append(int(codes[i]))  # no unit: the code is not used
                want_ok.append(False)
    assert ok.tolist() == want_ok
    assert codes.tolist() == want_codes
    assert want_ok.count(False) == 4 and len(set(want_codes)) > 10  # " 3", "x", "2147483648", "2" then "x"
