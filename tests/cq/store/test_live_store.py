"""Reading a store while a broker writes it: cuts, refresh, expired files (docs/live.md).

The writer is a real process (tests/live_writer.py) appending for a few seconds.
"""
from __future__ import annotations

import os
import shutil
import time
from pathlib import Path

import numpy as np
import pytest
from helpers import body_start, patch_file
from live_support import live_writer

import cq
from cq import format as fmt
from cq.writer.writer import StoreWriter

TOPIC, GROUP, SQL = "LiveTopic", "GID_RED", "color = 'red'"


def _check_cut_read(store, cut, previous: dict) -> dict:
    """Consume the cut three ways (all, SQL92 group, tags) and check what a broker would promise."""
    result = store.consume(TOPIC, "G_ALL", tags="*", cut=cut)
    per_queue: dict[int, list[int]] = {}
    for m in result:
        assert m.topic == TOPIC
        assert m.body == f"{TOPIC}/{m.queue_id}#{m.properties['seq']}".encode() * 3  # never a partial record
        per_queue.setdefault(m.queue_id, []).append(int(m.properties["seq"]))
    st = result.stats
    assert st.commit_log_missing == 0 and st.ext_missing == 0, st
    for q, seqs in per_queue.items():
        lo, hi = cut.queue_range(TOPIC, q)
        assert seqs == list(range(lo, hi)), q  # no gap, nothing past the cut, nothing twice
    assert st.units_scanned == sum(hi - lo for _, _, lo, hi in cut.queues)
    for q, seqs in per_queue.items():
        assert len(seqs) >= previous.get(q, 0)  # never backwards
    sql = store.consume(TOPIC, GROUP, sql=SQL, cut=cut)
    red = [m for m in sql]
    assert [int(m.properties["seq"]) % 2 for m in red] == [0] * len(red)
    assert len(red) == sum((len(s) + 1) // 2 for s in per_queue.values())
    assert sql.stats.commit_log_missing == 0 and sql.stats.bloom_tested == len(red) + sql.stats.bloom_pruned
    return {q: len(s) for q, s in per_queue.items()}


def test_cut_reads_are_consistent_while_a_writer_appends(tmp_path):
    root = tmp_path / "store"
    passes = 0
    enough = tmp_path / "enough"  # the writer goes on until three passes read while it wrote
    with live_writer(root, 3.0, min_files=4, until=enough) as proc:
        kept = cq.Store(root)  # one Store for the whole run: refresh="always" follows the broker
        frozen = cq.Store(root, refresh="never")
        frozen_counts = None
        previous: dict = {}
        while proc.poll() is None:
            cut = kept.cut(TOPIC)
            previous = _check_cut_read(kept, cut, previous)
            # a fresh Store reading the same cut gives the same answer (nothing depends on what is cached)
            fresh = cq.Store(root)
            assert [m.commit_log_offset for m in fresh.consume(TOPIC, "G_ALL", tags="*", cut=cut)] == \
                [m.commit_log_offset for m in kept.consume(TOPIC, "G_ALL", tags="*", cut=cut)]
            fresh.close()
            # a Store that never refreshes keeps its first view, whole and without "missing" units
            r = frozen.consume(TOPIC, "G_ALL", tags="*")
            got = sum(1 for _ in r)
            assert r.stats.commit_log_missing == 0
            assert frozen_counts in (None, got)
            frozen_counts = got
            passes += 1
            if passes == 3:
                enough.touch()
    assert passes >= 3
    # once the writer is done, a read sees everything it wrote, new queues and topics included
    final = kept.cut()
    counts = proc.counts
    assert {f"{t}/{q}": hi - lo for t, q, lo, hi in final.queues} == counts
    assert sum(1 for _ in kept.consume("LiveOther", "G_ALL", tags="*")) == counts["LiveOther/0"]
    assert len(kept.commit_log.files) > 3  # the run spanned several CommitLog files


def test_newest_records_read_without_error_while_written(tmp_path):
    root = tmp_path / "store"
    with live_writer(root, 2.0) as proc:
        store = cq.Store(root)
        log = store.commit_log
        first_end = log.max_offset
        while proc.poll() is None:
            cut = store.cut(TOPIC, [0])
            _, hi = cut.queue_range(TOPIC, 0)
            cqueue = store.consume_queue(TOPIC, 0)
            off, size, _ = cqueue.unit(hi - 1)
            msg = log.read_message(off)  # a file made after the Store was opened is listed on demand
            assert msg.queue_offset == hi - 1 and msg.store_size == size
            time.sleep(0.05)
    assert store.commit_log.refresh() > first_end


def test_refresh_continues_the_recovery_from_the_previous_end(tmp_path, monkeypatch):
    root = tmp_path / "store"
    with StoreWriter(root, commit_log_file_size=4096) as w:
        for i in range(200):
            w.append(TOPIC, b"x" * 50, properties={"seq": str(i)})
        w.flush()
        log = cq.CommitLog(root / "commitlog")
        end = log.max_offset
        assert end == w.commit_log_max_offset
        for i in range(200):
            w.append(TOPIC, b"y" * 50, properties={"seq": str(i)})
        w.flush()
        walked = []
        real = log._walk_file
        monkeypatch.setattr(log, "_walk_file", lambda index, crc, pos=0: walked.append((index, pos)) or
                            real(index, crc, pos))
        assert log.refresh() == w.commit_log_max_offset
    # the walk resumed inside the file that held the old end, not at the third-to-last file
    assert walked[0] == (end // 4096, end % 4096)
    assert cq.CommitLog(root / "commitlog").max_offset == log.max_offset  # same as a cold open


def _expire_front(root, keep_from: int) -> None:
    """Delete CommitLog files below ``keep_from`` and ConsumeQueue files whose units all point below it,
    as the broker's clean-up services do."""
    for start, path in fmt.list_queue_files(root / "commitlog"):
        if start + os.path.getsize(path) <= keep_from:
            os.remove(path)
    for qdir in (root / "consumequeue" / TOPIC).iterdir():
        files = fmt.list_queue_files(qdir)
        for start, path in files[:-1]:
            units = np.fromfile(path, dtype=fmt.CQ_UNIT_DTYPE)
            if int(units["commit_log_offset"].max()) < keep_from:
                os.remove(path)


def test_expired_front_files_move_the_minimums_without_a_crash(tmp_path):
    root = tmp_path / "store"
    with StoreWriter(root, commit_log_file_size=4096, consume_queue_file_size=20 * 20) as w:
        for i in range(400):
            w.append(TOPIC, b"z" * 60, queue_id=i % 2, properties={"seq": str(i // 2)})
    store = cq.Store(root)
    assert sum(1 for _ in store.consume(TOPIC, "G", tags="*")) == 400  # maps every file
    cold = cq.Store(root)
    cut = cold.cut(TOPIC)  # taken before the broker expires files; maps only the last few
    keep_from = 3 * 4096
    _expire_front(root, keep_from)
    # the cut still names the deleted records: their files vanish under the read, which
    # counts records as missing and moves queue minimums past deleted ConsumeQueue files
    result = cold.consume(TOPIC, "G", tags="*", cut=cut)
    got = list(result)
    assert got and all(m.commit_log_offset >= keep_from for m in got)
    assert result.stats.commit_log_missing > 0
    # a Store that mapped the CommitLog before it was deleted still reads those records for
    # the old cut (a mapped file stays readable); units in deleted queue files are gone for both,
    # and counted (issue 29: what went away is counted, never silent)
    old = store.consume(TOPIC, "G", tags="*", cut=cut)
    old_msgs = list(old)
    assert len(old_msgs) > len(got) and old.stats.commit_log_missing == 400 - len(old_msgs) > 0
    # a new read follows the broker: the queue minimums moved past the deleted records
    again = store.consume(TOPIC, "G", tags="*")
    msgs = list(again)
    assert again.stats.commit_log_missing == 0 and msgs == got
    for q in (0, 1):
        cqueue = store.consume_queue(TOPIC, q)
        first = cqueue.unit(cqueue.min_offset)[0]
        assert first >= keep_from and cqueue.min_offset > 0
    # a fresh Store agrees (the broker's rule at open)
    assert [m.commit_log_offset for m in cq.Store(root).consume(TOPIC, "G", tags="*")] == [m.commit_log_offset for m in msgs]


def test_torn_tail_is_still_missing_and_a_strict_walk_says_where(tmp_path):
    root = tmp_path / "store"
    with StoreWriter(root, commit_log_file_size=4096) as w:
        for i in range(10):
            w.append(TOPIC, b"w" * 40, properties={"seq": str(i)})
        last = w.commit_log_max_offset
    # tear the last record's body: the broker's recovery ends the data before it
    path = fmt.list_queue_files(root / "commitlog")[-1][1]
    with open(path, "r+b") as f:
        f.seek(f.read().rfind(b"w" * 40))
        f.write(b"\x01")
    store = cq.Store(root)
    result = store.consume(TOPIC, "G", tags="*")
    assert len(list(result)) == 9 and result.stats.commit_log_missing == 1
    # zero the tail completely, then write a torn header past the end: a strict walk names it
    with open(path, "r+b") as f:
        f.seek(last % 4096)
        f.write(b"\x00\x00\x00\x50\x00\x00\x00\x01")
    with pytest.raises(cq.StoreFormatError, match="past the recovered end"):
        list(cq.Store(root).commit_log.messages(strict=True))


def test_deleted_store_directory_is_a_clear_error(tmp_path):
    root = tmp_path / "store"
    with StoreWriter(root) as w:
        w.append(TOPIC, b"a")
    store = cq.Store(root)
    assert sum(1 for _ in store.consume(TOPIC, "G", tags="*")) == 1
    shutil.rmtree(root)
    with pytest.raises(cq.StoreFormatError, match="no longer exists") as err:
        store.consume(TOPIC, "G", tags="*")
    assert err.value.path == str(root)


def test_refresh_option_is_checked(tmp_path):
    with pytest.raises(ValueError, match="refresh must be one of always, never"):
        cq.Store("tests/data/golden_store", refresh="sometimes")


def _aged_sample_store(root, seconds: float = 3600):
    """A sample store over several 256 KiB CommitLog files, every file's mtime ``seconds`` ago."""
    cq.generate_sample_store(root, messages=4000, seed=3, commit_log_file_size=1 << 18)
    then = time.time() - seconds
    for dirpath, _, names in os.walk(root):
        for name in names:
            os.utime(os.path.join(dirpath, name), (then, then))
    return root / "commitlog"


def _walked(monkeypatch) -> list:
    seen = []
    real = cq.CommitLog._walk_file

    def spy(self, index, check_crc, pos=0):
        seen.append(self.files[index][0])
        return real(self, index, check_crc, pos)

    monkeypatch.setattr(cq.CommitLog, "_walk_file", spy)
    return seen


def test_cold_open_passes_over_sealed_files_it_walked_before(tmp_path, monkeypatch):
    """A second cold open walks only the file holding the end: the files before it were walked
    valid to their blank record, and nothing has written to them since (docs/live.md#sealed-files)."""
    log_dir = _aged_sample_store(tmp_path / "store")
    files = cq.CommitLog(log_dir).files
    assert len(files) >= 3
    seen = _walked(monkeypatch)
    first = cq.CommitLog(log_dir).max_offset
    assert seen == [start for start, _ in files[-3:]]
    seen.clear()
    assert cq.CommitLog(log_dir).max_offset == first
    assert seen == [files[-1][0]]
    seen.clear()
    assert cq.CommitLog(log_dir, check_crc_on_recover=False).max_offset == first
    assert seen == [start for start, _ in files[-3:]]  # a walk without CRC checks is noted apart


def test_a_sealed_file_written_again_is_walked_again(tmp_path, monkeypatch):
    """Damage written into a file noted as sealed changes its mtime: the next cold open walks it
    and ends the data at the damaged record, as a first open would."""
    log_dir = _aged_sample_store(tmp_path / "store")
    log = cq.CommitLog(log_dir)
    end = log.max_offset
    start, path = log.files[-2]
    buf = Path(path).read_bytes()
    pos = 0
    for _ in range(5):  # the sixth record of the file
        pos += int.from_bytes(buf[pos:pos + 4], "big")
    victim = start + pos
    m = log.read_message(victim)
    patch_file(path, pos + body_start(m), bytes([buf[pos + body_start(m)] ^ 0xFF]))  # its body CRC fails
    seen = _walked(monkeypatch)
    assert cq.CommitLog(log_dir).max_offset == victim < end
    assert start in seen
