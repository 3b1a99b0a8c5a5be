"""Reads that survive the broker's housekeeping: files expired in the broker's order (docs/live.md).

A broker deletes the oldest CommitLog files first and the ConsumeQueue files pointing into them
later. Every read path finishes across that and counts what went away: units whose record is gone
in ``commit_log_missing``, committed offsets below a queue's new minimum as ``expired``.
"""
from __future__ import annotations

import re
import subprocess
import sys

import numpy as np
import pytest
from live_support import expire_commit_log, expire_consume_queues

import cq
from cq import format as fmt
from cq.store import stream
from cq.writer import StoreWriter
from cq.writer.config_writer import write_consumer_offsets

TOPIC, GROUP, SQL = "T", "GID_RED", "color = 'red'"
CL_FILE = 16 << 10
QUEUES = 4


def _write(root, n: int = 2000, blocks: bool = False) -> None:
    """``n`` messages over 4 queues in 16 KiB CommitLog files; odd ones red, with bitmaps for GID_RED.

    ``blocks``: each queue's messages written together, the last queue's first (so the oldest
    CommitLog files hold only queue 3's records, which a read reaches last).
    """
    with StoreWriter(root, commit_log_file_size=CL_FILE, consume_queue_file_size=20 * 100, enable_ext=True) as w:
        w.register_group(TOPIC, GROUP, SQL)
        for i in range(n):
            q = QUEUES - 1 - i * QUEUES // n if blocks else i % QUEUES
            w.append(TOPIC, b"m" * 100, queue_id=q, tags="TagA" if i % 2 else "TagB",
                     properties={"seq": str(i), "color": "red" if i % 2 else "blue"})


def _units(root) -> dict[int, np.ndarray]:
    """Every queue's units as written: queue id -> CommitLog offsets, by queue offset."""
    out = {}
    for q in range(QUEUES):
        files = fmt.list_queue_files(root / fmt.CONSUME_QUEUE_DIR / TOPIC / str(q))
        units = np.concatenate([np.fromfile(p, dtype=fmt.CQ_UNIT_DTYPE) for _, p in files])
        out[q] = units["commit_log_offset"][units["size"] > 0].astype(np.int64)
    return out


@pytest.fixture
def store_root(tmp_path):
    root = tmp_path / "store"
    _write(root)
    return root


def _check_consumed(result, msgs, units, first_kept: int, lo: dict | None = None) -> None:
    """Everything still on disk delivered, in order; every unit whose record went away counted."""
    lo = lo or {}
    want = [int(o) for q in sorted(units) for o in units[q][lo.get(q, 0):] if o >= first_kept]
    gone = sum(int((units[q][lo.get(q, 0):] < first_kept).sum()) for q in units)
    assert [m.commit_log_offset for m in msgs] == want
    assert result.stats.commit_log_missing == gone > 0
    assert result.stats.units_scanned == len(want) + gone


def test_consume_of_a_cut_taken_before_the_commit_log_expired_counts_what_went_away(store_root):
    units = _units(store_root)
    store = cq.Store(store_root)
    cut = store.cut(TOPIC)
    first_kept = expire_commit_log(store_root, 3)
    result = store.consume(TOPIC, "G", tags="*", cut=cut)
    _check_consumed(result, list(result), units, first_kept)


def test_consume_without_a_cut_after_the_commit_log_expired(store_root):
    units = _units(store_root)
    store = cq.Store(store_root)
    assert sum(1 for _ in store.consume(TOPIC, "G", tags="*")) == 2000  # opened before the expiry
    first_kept = expire_commit_log(store_root, 3)
    # the same Store follows the broker: the queue minimums move past the deleted records, as the
    # broker moves minLogicOffset, so nothing is read there and nothing is missing
    again = store.consume(TOPIC, "G", tags="*")
    msgs = list(again)
    assert [m.commit_log_offset for m in msgs] == [int(o) for q in sorted(units) for o in units[q] if o >= first_kept]
    assert again.stats.commit_log_missing == 0
    fresh = cq.Store(store_root)
    assert [m.commit_log_offset for m in fresh.consume(TOPIC, "G", tags="*")] == [m.commit_log_offset for m in msgs]


@pytest.mark.parametrize("sql", [None, SQL])
def test_consume_interrupted_by_the_expiry_finishes_and_counts(tmp_path, sql):
    root = tmp_path / "store"
    _write(root, blocks=True)
    units = _units(root)
    store = cq.Store(root)
    result = store.consume(TOPIC, GROUP, sql=sql, tags=None if sql else "*")
    it = iter(result)
    head = [next(it) for _ in range(10)]  # queue 0, whose records are in the newest files
    first_kept = expire_commit_log(root, 3)  # only queue 3's records, not read yet
    msgs = head + list(it)
    red = (lambda o: True) if sql is None else (lambda o: o in red_offsets)
    red_offsets = {m.commit_log_offset for m in cq.Store(root).consume(TOPIC, GROUP, sql=SQL)}
    want = [int(o) for q in sorted(units) for o in units[q] if o >= first_kept and red(int(o))]
    assert [m.commit_log_offset for m in msgs] == want
    st = result.stats
    assert st.units_scanned == 2000
    gone = int((units[3] < first_kept).sum())
    if sql is None:
        assert st.commit_log_missing == gone and st.delivered + st.commit_log_missing == 2000
    else:  # counted once layer 1 passes a unit, as the broker reads the record only then
        assert 0 < st.commit_log_missing <= gone


def test_refresh_never_counts_units_lost_to_expiry(store_root):
    units = _units(store_root)
    frozen = cq.Store(store_root, refresh="never")
    assert sum(1 for _ in frozen.consume(TOPIC, "G", tags="*")) == 2000
    first_kept = expire_commit_log(store_root, 3)
    frozen.commit_log.close()  # the maps a long-lived Store held are released (as by a restart of its reads)
    result = frozen.consume(TOPIC, "G", tags="*")
    _check_consumed(result, list(result), units, first_kept)


def test_backlog_and_why_report_committed_offsets_below_the_new_minimum_as_expired(store_root):
    units = _units(store_root)
    write_consumer_offsets(store_root, {f"{TOPIC}@G": {0: 5, 1: 0, 2: 480, 3: 0}})
    store = cq.Store(store_root)
    before = cq.backlog(store, TOPIC, "G", tags="*")
    assert [q.expired for q in before.queues] == [0, 0, 0, 0]
    first_kept = expire_commit_log(store_root, 3)
    expire_consume_queues(store_root, TOPIC, first_kept)
    after = cq.backlog(cq.Store(store_root), TOPIC, "G", tags="*")
    for q, row in enumerate(after.queues):
        lost = int((units[q] < first_kept).sum())
        committed = {0: 5, 1: 0, 2: 480, 3: 0}[q]
        assert row.min_offset == lost  # the broker's corrected minimum
        assert row.expired == max(0, lost - committed)
        assert row.lag == 500 - committed  # the broker's lag counts from the committed offset
        assert row.will_receive == 500 - max(lost, committed)
    assert after.expired == sum(q.expired for q in after.queues) > 0
    assert after.to_dict()["expired"] == after.expired
    assert "expired" in str(after)
    # the same Store kept across the expiry answers the same
    assert [q.to_dict() for q in cq.backlog(store, TOPIC, "G", tags="*").queues] == [q.to_dict() for q in after.queues]
    # why: a unit below the minimum, and a unit whose record the broker deleted
    w = cq.why(store, TOPIC, "G", tags="*", queue_id=1, queue_offset=0)
    assert not w.delivered and w.dropped_by == "expired"
    assert "expired" in str(w)
    fresh = cq.Store(store_root)
    cut_min = fresh.consume_queue(TOPIC, 1).min_offset
    assert cq.why(fresh, TOPIC, "G", tags="*", queue_id=1, queue_offset=cut_min).delivered


def test_why_of_a_unit_whose_record_expired_says_expired(store_root):
    store = cq.Store(store_root)
    store.consume_queue(TOPIC, 0)  # opened before the expiry: its minimum is still 0
    expire_commit_log(store_root, 3)
    w = cq.why(store, TOPIC, "G", tags="*", queue_id=0, queue_offset=0)
    assert not w.delivered and w.dropped_by == "expired"
    assert w.steps[-2].reason == "expired" or any(s.reason == "expired" for s in w.steps)


def test_cost_counts_records_gone_during_the_report(tmp_path, monkeypatch):
    from cq.analyses import cost
    root = tmp_path / "store"
    _write(root, blocks=True)
    units = _units(root)
    real, done, first_kept = cost.tally_range, [], []

    def tally_then_expire(*args, **kwargs):  # the broker expires the oldest files after the first queue
        part = real(*args, **kwargs)
        done.append(kwargs["queue_id"])
        if len(done) == 1:
            first_kept.append(expire_commit_log(root, 3))
        return part

    monkeypatch.setattr(cost, "tally_range", tally_then_expire)
    report = cost.filter_cost(cq.Store(root), TOPIC, [cost.CostGroup(GROUP, SQL)], timing=True)
    gone = int((units[3] < first_kept[0]).sum())
    assert report.units == 2000 and report.commit_log_missing == gone > 0
    assert report.messages == 2000 - gone


@pytest.mark.parametrize("when", ["between rounds", "mid-round"])
def test_tail_that_falls_behind_an_expiry_says_how_many_it_lost_and_goes_on(tmp_path, when):
    root = tmp_path / "store"
    _write(root, blocks=True)  # the oldest files hold queue 3's records: the tail reaches them last
    units = _units(root)
    first_kept: list[int] = []

    def expire() -> None:
        first_kept.append(expire_commit_log(root, 3))
        expire_consume_queues(root, TOPIC, first_kept[0])

    calls = iter(range(100))

    def stop() -> bool:  # called before each round; the first round starts after the tail's first cut
        n = next(calls)
        if n == 0 and when == "between rounds":
            expire()
        return n == 3

    lost: list[tuple] = []
    got = []
    for m in stream.tail(cq.Store(root), TOPIC, "G", tags="*", starting="earliest", sleep=lambda _: None,
                         stop=stop, on_lost=lambda *a: lost.append(a)):
        got.append(m.commit_log_offset)
        if len(got) == 1 and when == "mid-round":
            expire()
    gone = int((units[3] < first_kept[0]).sum())
    assert [q for _, q, _, _ in lost] == [3] and lost[0][2] == gone > 0  # said once, for the queue, with the count
    assert "expired by the broker" in lost[0][3]
    assert got == [int(o) for q in sorted(units) for o in units[q] if o >= first_kept[0]]  # and it went on


def test_tail_command_says_what_it_lost(tmp_path):
    root = tmp_path / "store"
    _write(root, blocks=True)
    first_kept = expire_commit_log(root, 3)  # the group committed before the broker expired these
    write_consumer_offsets(root, {f"{TOPIC}@G": {q: 0 for q in range(QUEUES)}})
    cmd = [sys.executable, "-c", "import sys; from rmqfilter import main; sys.exit(main())", "tail",
           str(root), "--topic", TOPIC, "--group", "G", "--tags", "*", "--from", "committed", "--limit", "1700"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120, check=False)
    gone = int((_units(root)[3] < first_kept).sum())
    assert proc.returncode == 0, proc.stderr
    assert len(proc.stdout.splitlines()) == 1700
    said = (f"rmqfilter tail: warning: {gone:,} unit(s) of queue {TOPIC}/3 lost: the group's committed offset 0 is "
            f"below the queue's minimum {gone} (expired by the broker before the group read them)")
    assert proc.stderr.splitlines() == [said]


def test_stream_source_falls_behind_an_expiry_says_how_many_it_lost_and_goes_on(store_root, caplog):
    pytest.importorskip("pyarrow")
    from pyspark_udfs.datasource import RocketMQDataSource

    src = RocketMQDataSource({"path": str(store_root), "topic": TOPIC, "group": "G", "tags": "*",
                              "startingOffsets": "earliest"})
    reader = src.streamReader(src.schema())
    start = reader.initialOffset()
    end = reader.latestOffset(start, reader.getDefaultReadLimit())
    first_kept = expire_commit_log(store_root, 3)
    expire_consume_queues(store_root, TOPIC, first_kept)
    with caplog.at_level("WARNING", logger="rmqfilter.streaming"):
        parts = reader.partitions(start, end)
    rows = sum(b.num_rows for p in parts for b in reader.read(p))
    units = _units(store_root)
    gone = sum(int((u < first_kept).sum()) for u in units.values())
    assert rows == 2000 - gone
    said = [r.getMessage() for r in caplog.records if r.name == "rmqfilter.streaming"]
    assert sum(int(re.search(r"(\d+) unit\(s\) of queue", t).group(1)) for t in said) == gone  # per queue
    assert all("expired by the broker" in t for t in said)
    reader.stop()


def test_batch_source_planned_before_the_expiry_reads_what_is_left(store_root):
    pytest.importorskip("pyarrow")
    from pyspark_udfs.datasource import RocketMQDataSource

    src = RocketMQDataSource({"path": str(store_root), "topic": TOPIC, "group": "G", "tags": "*"})
    reader = src.reader(src.schema())
    parts = reader.partitions()
    first_kept = expire_commit_log(store_root, 3)
    rows = sum(b.num_rows for p in parts for b in reader.read(p))
    units = _units(store_root)
    assert rows == sum(int((u >= first_kept).sum()) for u in units.values())
