"""A writer killed with SIGKILL mid-run leaves a store the readers read, and ``append=True`` continues it.

What the kill leaves (the writer buffers and flushes each queue with ``pwrite``):

* the CommitLog ends at its last whole record; a record cut short is invalid (lengths or body CRC,
  docs/formats.md#commitlog-validation) and recovery ends the data before it;
* ConsumeQueue and ext units are flushed only after the records they point at, so no unit points
  past the data: ``Store.consume`` delivers every unit on disk, none counted missing;
* records past the last unit of their queue (written, not yet dispatched) are not visible to
  consumers until a writer reopens the store with ``append=True``, which dispatches them first,
  as the broker's reput service does on restart.

The ``lock`` file is held with ``flock``: the kernel releases it when the process dies, so a
killed writer never blocks the next one, while a live one makes it fail at once.
"""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

import cq
import selector

TOPIC = "KillTopic"
QUEUES = 4
GROUP, SQL = "GID_KILL", "a > 5"
# Small files: every kill still lands several CommitLog, ConsumeQueue and ext files in (the
# units' first flush comes at a ConsumeQueue file's end), with about a quarter of the records
# (and of the readers' checks, a loop per unit) that 1 MiB files took; what a kill leaves does
# not depend on the file size.
SIZES = {"commit_log_file_size": 1 << 18, "consume_queue_file_size": 20 * 1000, "ext_file_size": 1 << 15}

WRITER = """
import sys, cq
root, start = sys.argv[1], int(sys.argv[2])
w = cq.StoreWriter(root, enable_ext=True, append=start > 0, commit_log_file_size={cl},
                   consume_queue_file_size={cqs}, ext_file_size={ext})
w.register_group({topic!r}, {group!r}, {sql!r})
i = start
while True:
    w.append({topic!r}, b"body-%d-" % i + b"x" * (i % 300), queue_id=i % {queues}, tags="Tag%d" % (i % 3),
             properties={{"a": str(i % 10), "i": str(i)}})
    i += 1
    if i == start + 500:
        print("written", flush=True)
""".format(cl=SIZES["commit_log_file_size"], cqs=SIZES["consume_queue_file_size"], ext=SIZES["ext_file_size"],
           topic=TOPIC, group=GROUP, sql=SQL, queues=QUEUES)


def _data_bytes(root) -> int:
    d = os.path.join(root, "commitlog")
    return sum(os.path.getsize(os.path.join(d, f)) for f in os.listdir(d)) if os.path.isdir(d) else 0


def _units_bytes(root) -> int:
    d = os.path.join(root, "consumequeue", TOPIC)
    return sum(os.path.getsize(os.path.join(dp, f)) for dp, _, fs in os.walk(d) for f in fs)


def kill_writer_midway(root, *, min_files: int, start: int = 0) -> None:
    """Run the writer in a subprocess until it has flushed ConsumeQueue units and then
    ``min_files`` more CommitLog files, then SIGKILL it."""
    proc = subprocess.Popen([sys.executable, "-c", WRITER, str(root), str(start)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 120
        units_before = _units_bytes(root)

        def wait_for(condition) -> None:
            while not condition():
                assert proc.poll() is None, proc.stderr.read().decode()
                assert time.monotonic() < deadline, "writer made no progress"
                time.sleep(0.005)

        wait_for(lambda: _units_bytes(root) > units_before)  # the first flush of units after the start
        target = _data_bytes(root) + min_files * SIZES["commit_log_file_size"]
        wait_for(lambda: _data_bytes(root) >= target)
        os.kill(proc.pid, signal.SIGKILL)
    finally:
        proc.kill()
        proc.wait()
    assert proc.returncode == -signal.SIGKILL


def check_readable(root) -> dict:
    """Every reader works on the store and what consumers see is consistent; returns counts."""
    store = cq.Store(root)
    log = store.commit_log
    records = list(log.messages(strict=False))  # the broker's recovery view
    end = records[-1].commit_log_offset + records[-1].store_size
    # the last record's end, or, when the kill came just after the writer moved on to a new
    # file, that file's start (the broker's recovery: an empty last file ends the log there)
    assert records and (log.max_offset == end or log.max_offset == log.files[-1][0] > end), (log.max_offset, end)
    by_offset = {m.commit_log_offset: m for m in records}
    sel = selector.compile(SQL)
    units_total = 0
    for q in store.queue_ids(TOPIC):
        cqueue = store.consume_queue(TOPIC, q)
        units = cqueue.read()
        units_total += len(units)
        # every unit points at a whole record of its queue, in queue order
        for i, u in enumerate(units.tolist()):
            m = by_offset[u[0]]
            assert (m.topic, m.queue_id, m.queue_offset, m.store_size) == (TOPIC, q, cqueue.min_offset + i, u[1])
        ext = store.ext(TOPIC, q)
        batch = ext.read_batch(units["tags_code"])
        assert batch.found.all()
        assert batch.tags_code.tolist() == [cq.tags_code(by_offset[o].tags) for o in units["commit_log_offset"]]
        result = store.consume(TOPIC, GROUP, sql=SQL, queue_ids=[q])
        got = [m.queue_offset for m in result]
        want = [cqueue.min_offset + i for i, o in enumerate(units["commit_log_offset"].tolist())
                if sel.matches(by_offset[o].properties)]
        assert got == want
        assert result.stats.commit_log_missing == 0 and result.stats.ext_missing == 0
    store.close()
    return {"records": len(records), "units": units_total}


def _dispatched_everything(root, queues: int = QUEUES) -> None:
    """Every record of the topic has its unit (after an append-mode writer closed)."""
    store = cq.Store(root)
    records = [m for m in store.commit_log.messages() if m.topic == TOPIC]
    for q in range(queues):
        mine = [m for m in records if m.queue_id == q]
        units = store.consume_queue(TOPIC, q).read()
        assert units["commit_log_offset"].tolist() == [m.commit_log_offset for m in mine]
        assert [m.queue_offset for m in mine] == list(range(len(mine)))
    store.close()


@pytest.mark.parametrize("min_files", [2, 3])
def test_killed_writer_leaves_a_readable_store_that_append_continues(tmp_path, min_files):
    root = tmp_path / "store"
    kill_writer_midway(root, min_files=min_files)
    counts = check_readable(root)
    assert counts["units"] <= counts["records"]

    with pytest.raises(FileExistsError, match="append=True"):
        cq.StoreWriter(root, **SIZES, enable_ext=True)

    # the dead writer's lock file is still there, but its flock died with the process: append
    # does not block, and dispatches the orphaned records first
    assert (root / "lock").exists()
    started = time.monotonic()
    with cq.StoreWriter(root, **SIZES, enable_ext=True, append=True) as w:
        w.register_group(TOPIC, GROUP, SQL)
        n = counts["records"]
        for i in range(n, n + 50):
            w.append(TOPIC, f"after-{i}".encode(), queue_id=i % QUEUES, tags=f"Tag{i % 3}",
                     properties={"a": str(i % 10), "i": str(i)})
    assert time.monotonic() - started < 30  # generous for a loaded machine; it takes well under 1 s
    after = check_readable(root)
    assert after["units"] == after["records"] == counts["records"] + 50
    _dispatched_everything(root)


def test_killed_twice_then_continued(tmp_path):
    """An append-mode writer killed in turn leaves a readable store again."""
    root = tmp_path / "store"
    kill_writer_midway(root, min_files=2)
    first = check_readable(root)
    kill_writer_midway(root, min_files=4, start=first["records"])
    check_readable(root)
    with cq.StoreWriter(root, **SIZES, enable_ext=True, append=True) as w:
        w.register_group(TOPIC, GROUP, SQL)
    final = check_readable(root)
    assert final["units"] == final["records"]
    _dispatched_everything(root)


def test_a_record_cut_by_the_kill_is_dropped_and_overwritten(tmp_path):
    """Simulate the worst torn write: the last record half on disk (zeros after it)."""
    root = tmp_path / "store"
    kill_writer_midway(root, min_files=2)
    store = cq.Store(root)
    last = list(store.commit_log.messages(strict=False))[-1]
    end = store.commit_log.max_offset
    store.close()
    # tear the last record: keep its head, zero the rest of its bytes (the file is pre-allocated)
    index = last.commit_log_offset // SIZES["commit_log_file_size"]
    path = os.path.join(root, "commitlog", cq.format.file_name(index * SIZES["commit_log_file_size"]))
    at = last.commit_log_offset % SIZES["commit_log_file_size"]
    with open(path, "r+b") as f:
        f.seek(at + 100)
        f.write(bytes(last.store_size - 100))
    store = cq.Store(root)
    assert store.commit_log.max_offset == last.commit_log_offset < end
    store.close()
    with cq.StoreWriter(root, **SIZES, enable_ext=True, append=True) as w:
        r = w.append(TOPIC, b"replacement", queue_id=0, tags="Tag0", properties={"a": "9"})
    assert r.commit_log_offset == last.commit_log_offset
    check_readable(root)
    _dispatched_everything(root)


def test_a_live_writer_makes_the_next_one_fail_at_once(tmp_path):
    root = tmp_path / "store"
    proc = subprocess.Popen([sys.executable, "-c", WRITER, str(root), "0"], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE)
    try:
        assert proc.stdout.readline().strip() == b"written"
        started = time.monotonic()
        with pytest.raises(BlockingIOError, match="locked by another writer"):
            cq.StoreWriter(root, **SIZES, enable_ext=True, append=True)
        assert time.monotonic() - started < 5
    finally:
        proc.kill()
        proc.wait()


def test_append_dispatches_units_lost_from_disk(tmp_path):
    """Units cut from one queue and a queue whose files never reached the disk: append=True
    re-dispatches both from the CommitLog (starting over from the first file when a queue's
    first record lies before the others' last unit), so every record has its unit again."""
    import shutil

    root = tmp_path / "store"
    with cq.StoreWriter(root, **SIZES, enable_ext=True) as w:
        w.register_group(TOPIC, GROUP, SQL)
        for i in range(40):
            w.append(TOPIC, f"m{i}".encode(), queue_id=i % 2, tags=f"Tag{i % 3}", properties={"a": str(i % 10)})
    intact = {q: cq.Store(root).consume_queue(TOPIC, q).read().tobytes() for q in (0, 1)}
    shutil.rmtree(root / "consumequeue" / TOPIC / "1")
    shutil.rmtree(root / "consumequeue_ext" / TOPIC / "1")
    path = root / "consumequeue" / TOPIC / "0" / cq.format.file_name(0)
    data = path.read_bytes()
    path.write_bytes(data[:5 * 20] + bytes(len(data) - 5 * 20))  # queue 0 keeps 5 of its 20 units
    with cq.StoreWriter(root, **SIZES, enable_ext=True, append=True) as w:
        w.register_group(TOPIC, GROUP, SQL)
    store = cq.Store(root)
    assert {q: store.consume_queue(TOPIC, q).read().tobytes() for q in (0, 1)} == intact
    store.close()
    check_readable(root)
    _dispatched_everything(root, queues=2)


def test_append_continues_where_the_readers_recovery_ends_before_the_last_file(tmp_path):
    """The writer's recovery is the readers' one (``cq.CommitLog.max_offset``), across files.

    A record whose body CRC is wrong in the second-to-last CommitLog file ends the data for
    every reader (the broker's recovery walks from the third-to-last file). A writer that
    walked only the last file found valid records there and appended after them, where no
    reader would ever look; now it continues at the readers' end, deletes the file past it
    and cuts the ConsumeQueue units that pointed past it.
    """
    root = tmp_path / "store"
    sizes = {"commit_log_file_size": 1 << 15, "consume_queue_file_size": 20 * 1000, "enable_ext": True}
    with cq.StoreWriter(root, **sizes) as w:
        w.register_group(TOPIC, GROUP, SQL)
        results = [w.append(TOPIC, b"body-%04d-" % i + b"x" * 200, tags="Tag0", properties={"a": str(i % 10)})
                   for i in range(500)]
    files = cq.CommitLog(root / "commitlog").files
    assert len(files) >= 3 and results[-1].commit_log_offset >= files[-1][0]  # the last file looks valid
    victim = next(i for i, r in enumerate(results) if r.commit_log_offset >= files[-2][0] + 4096)
    with open(files[-2][1], "r+b") as f:
        data = f.read()
        f.seek(data.index(b"body-%04d-" % victim) + 12)
        f.write(b"y")  # the body CRC no longer matches
    with cq.CommitLog(root / "commitlog") as log:
        reader_end = log.max_offset
    assert reader_end == results[victim].commit_log_offset

    with cq.StoreWriter(root, **sizes, append=True) as w:
        w.register_group(TOPIC, GROUP, SQL)
        assert w.commit_log_max_offset == reader_end
        r = w.append(TOPIC, b"after", tags="Tag0", properties={"a": "7"})
    assert (r.commit_log_offset, r.queue_offset) == (reader_end, victim)

    with cq.CommitLog(root / "commitlog") as log:
        assert log.max_offset == reader_end + r.store_size
        messages = list(log.messages())
        assert len(log.files) == len(files) - 1
    assert [m.body for m in messages[-2:]] == [b"body-%04d-" % (victim - 1) + b"x" * 200, b"after"]
    assert check_readable(root) == {"records": victim + 1, "units": victim + 1}
    _dispatched_everything(root, queues=1)


@pytest.mark.parametrize("sparse", [True, False])
def test_a_torn_tail_is_zeroed_to_its_last_written_byte_in_holes_and_in_written_space(tmp_path, sparse):
    """The writer's recovery zeroes a torn tail from the recovered end to the last non-zero byte,
    whether the file's unwritten space is a hole (a preallocated store file) or written zeros;
    bytes before the end are left alone."""
    from cq.writer.recovery import _TAIL_CHUNK, _zero_tail

    size = 3 * _TAIL_CHUNK + 4096
    path = tmp_path / "00000000000000000000"
    with open(path, "wb") as f:
        if sparse:
            f.truncate(size)
        else:
            f.write(bytes(size))
        f.seek(0)
        f.write(b"\x01" * 100)  # the recovered records
        f.seek(_TAIL_CHUNK - 3)  # a torn record spanning a chunk boundary ...
        f.write(b"\x07" * 10)
        f.seek(2 * _TAIL_CHUNK + 17)  # ... and garbage further on, after a hole
        f.write(b"\x09")
    with open(path, "r+b") as f:
        _zero_tail(f, 100)
    data = path.read_bytes()
    assert len(data) == size and data[:100] == b"\x01" * 100 and data.count(0) == size - 100
    with open(path, "r+b") as f:  # nothing left to zero: nothing written
        _zero_tail(f, 100)
    assert path.read_bytes() == data
