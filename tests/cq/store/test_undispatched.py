"""A crashed store's records that never got their ConsumeQueue units (docs/reliability.md#undispatched).

The golden store is made into what a broker killed mid-dispatch leaves: every unit pointing at the
last records of the CommitLog is zeroed (the dispatch runs in log order, so that is each queue's
tail), and an ``abort`` file says the broker never shut down. Read with no process holding the
store, it gives what the broker's recovery would serve: the golden store's answers. Held by a
process (a running broker dispatches them itself), or shut down cleanly, it reads as it lies.
"""
from __future__ import annotations

import fcntl
import os
import shutil

import numpy as np
import pytest

import cq
from cq import format as fmt
from cq.store import undispatched

TOPIC = "GoldenFilterTopic"
READS = [("GID_ALL", {"tags": "*"}), ("GID_TAGS", {"tags": "TagA || TagC"}),
         ("GID_SQL_B", {"sql": "TAGS = 'TagA' OR color IN ('red', 'grün')"})]


def delivered(root, group, kwargs) -> list[tuple[int, int, int]]:
    store = cq.Store(str(root))
    try:
        return sorted((m.queue_id, m.queue_offset, m.commit_log_offset)
                      for m in store.consume(TOPIC, group, **kwargs))
    finally:
        store.close()


@pytest.fixture
def crashed(tmp_path, data_dir):
    """The golden store as a broker killed before it dispatched its last 40 records leaves it."""
    root = tmp_path / "store"
    shutil.copytree(data_dir / "golden_store", root)
    log = cq.CommitLog(str(root / "commitlog"))
    offsets = [m.commit_log_offset for m in log.messages()]
    log.close()
    frontier = offsets[-40]
    zeroed = 0
    for topic in os.listdir(root / "consumequeue"):
        for q in os.listdir(root / "consumequeue" / topic):
            for name in sorted(os.listdir(root / "consumequeue" / topic / q)):
                path = root / "consumequeue" / topic / q / name
                units = np.fromfile(path, dtype=fmt.CQ_UNIT_DTYPE)
                late = units["commit_log_offset"] >= frontier
                late &= units["size"] > 0
                if late.any():
                    units[np.argmax(late):] = np.zeros(1, dtype=fmt.CQ_UNIT_DTYPE)
                    zeroed += int(late.sum())
                    units.tofile(path)
    assert zeroed >= 30  # most of the last 40 records are units of the two topics
    (root / "abort").write_bytes(b"")
    return root


@pytest.mark.parametrize("group, kwargs", READS)
def test_a_crashed_store_reads_what_the_restarted_broker_serves(crashed, data_dir, group, kwargs):
    assert undispatched.crashed(str(crashed))
    got = delivered(crashed, group, kwargs)
    assert got == delivered(data_dir / "golden_store", group, kwargs) and got


def test_queue_ends_and_units_include_the_records_the_recovery_dispatches(crashed, data_dir):
    store, golden = cq.Store(str(crashed)), cq.Store(str(data_dir / "golden_store"))
    try:
        for q in golden.queue_ids(TOPIC):
            queue, want = store.consume_queue(TOPIC, q), golden.consume_queue(TOPIC, q)
            assert queue.max_offset == want.max_offset
            mine, theirs = queue.read(), want.read()
            assert mine["commit_log_offset"].tolist() == theirs["commit_log_offset"].tolist()
            assert mine["size"].tolist() == theirs["size"].tolist()
        assert store.cut(TOPIC).queues == golden.cut(TOPIC).queues
    finally:
        store.close()
        golden.close()


def test_a_store_held_by_a_process_or_shut_down_cleanly_reads_as_it_lies(crashed, data_dir):
    full = delivered(data_dir / "golden_store", "GID_ALL", {"tags": "*"})
    fd = os.open(crashed / "lock", os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)  # as a running broker (or StoreWriter) holds it
        assert undispatched.held_by_a_process(str(crashed)) is True
        held = delivered(crashed, "GID_ALL", {"tags": "*"})
    finally:
        os.close(fd)
    assert undispatched.held_by_a_process(str(crashed)) is False
    assert len(held) < len(full) and set(held) <= set(full)
    os.remove(crashed / "abort")
    assert delivered(crashed, "GID_ALL", {"tags": "*"}) == held


def test_a_store_without_a_lock_file_is_held_by_nobody(tmp_path):
    assert undispatched.held_by_a_process(str(tmp_path)) is False


def _take_one_by_one(owner, offsets, expected):
    """The dispatch's rule as the broker applies it: one record after another, in log order."""
    expected, stopped, taken = list(expected), set(), []
    for k, o in zip(owner.tolist(), offsets.tolist()):
        if k in stopped or o < expected[k]:
            taken.append(False)
        elif o == expected[k]:
            expected[k] += 1
            taken.append(True)
        else:
            stopped.add(k)
            taken.append(False)
    return taken, stopped, expected


@pytest.mark.parametrize("seed", range(40))
def test_the_batch_rule_takes_what_the_record_by_record_dispatch_takes(seed):
    """Queues interleaved in log order, with records dispatched already, repeats and gaps: the
    units taken and the queues that stop are the ones the broker's one-record-at-a-time
    dispatch gives, and each queue's next offset moves on as the dispatch's does."""
    rng = np.random.default_rng(seed)
    queues = int(rng.integers(1, 6))
    start = rng.integers(0, 50, queues).astype(np.int64)
    owner, offsets, nxt = [], [], start.copy()
    for _ in range(int(rng.integers(1, 200))):
        k = int(rng.integers(queues))
        step = rng.choice([0, 0, 0, 0, 0, 0, -1, -3, 1, 2])  # mostly the next offset
        offsets.append(int(nxt[k] + step))
        owner.append(k)
        if step == 0:
            nxt[k] += 1
    owner, offsets = np.array(owner, dtype=np.int64), np.array(offsets, dtype=np.int64)
    want_taken, want_stopped, want_next = _take_one_by_one(owner, offsets, start)
    expected = start.copy()
    taken, stops = undispatched._take(owner, offsets, expected)
    assert taken.tolist() == want_taken
    assert set(stops.tolist()) == want_stopped
    assert expected.tolist() == want_next
