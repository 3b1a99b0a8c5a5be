"""The 5.x timer's files (cq/readers/timer.py, docs/formats.md#timer-files) on the store the real broker
wrote (tests/data/timer_store, TIMER_STORE.md), and cut or corrupt timer files as errors naming the
file and the byte offset."""
from __future__ import annotations

import json
import os
import shutil

import numpy as np
import pytest
from helpers import DATA, patch_file

import cq
from cq import format as fmt
from cq.readers.timer import read_timer_checkpoint

STORE = DATA / "timer_store"
RUN = json.loads((DATA / "timer_store.json").read_text())
SENDS = {s["keys"][0]: s for s in RUN["timer_sends"]}
UNIT = fmt.TIMER_LOG_UNIT_SIZE


@pytest.fixture(scope="module")
def timer():
    with cq.TimerFiles(STORE) as t:
        yield t


@pytest.fixture(scope="module")
def timer_records():
    """Every record of the timer topic: (queue offset, CommitLog offset, properties)."""
    store = cq.Store(STORE)
    try:
        queue = store.consume_queue(fmt.TIMER_TOPIC, 0)
        out = []
        for q in range(queue.min_offset, queue.max_offset):
            phys = queue.unit(q)[0]
            out.append((q, phys, store.commit_log.read_message(phys).properties))
        return out
    finally:
        store.close()


def test_checkpoint_is_the_timers_progress_at_the_snapshot(timer, timer_records):
    check = timer.checkpoint
    # it has read the whole timer topic into the timerlog, up to the position it flushed
    assert check.last_timer_queue_offset == len(timer_records) == check.master_timer_queue_offset
    units = timer.units()
    assert check.flush_pos == int(units["position"][-1]) + UNIT
    # it fired the first timer messages (due seconds after they were sent), not the far ones
    fired = max(SENDS[f"timer-{i}"]["deliver_ms"] for i in range(4))
    # (the checkpoint was last written at the broker's clean shutdown, just after the snapshot time)
    assert fired < check.last_read_time_ms <= check.data_version_timestamp < SENDS["far-timer-0"]["deliver_ms"]
    assert check.fired(fired) and not check.fired(SENDS["far-timer-0"]["deliver_ms"] // 1000 * 1000)
    assert check.data_version_counter > 0 and check.data_version_timestamp > RUN["snapshot_ms"]


def test_every_timer_record_has_its_unit_and_recalls_are_delete_units(timer, timer_records):
    units = timer.units()
    assert len(units) == len(timer_records)
    for q, phys, props in timer_records:
        [u] = timer.units_of(phys)
        # the unit's due time is TIMER_OUT_MS (the asked time floored to the second), its size the record's
        assert int(u["due_ms"]) == int(props[fmt.PROPERTY_TIMER_OUT_MS]), q
        recall = fmt.PROPERTY_TIMER_DEL_UNIQKEY in props
        assert int(u["magic"]) == (fmt.TIMER_MAGIC_DEFAULT | (fmt.TIMER_MAGIC_DELETE if recall else 0)), q
    markers = [props for _q, _phys, props in timer_records if fmt.PROPERTY_TIMER_DEL_UNIQKEY in props]
    took = [r for r in RUN["recalls"] if r["ok"]]
    assert sorted(m[fmt.PROPERTY_TIMER_DEL_UNIQKEY] for m in markers) == sorted(
        fmt.timer_delete_key(RUN["topic"], r["uniq_key"]) for r in took)
    assert sorted(m[fmt.PROPERTY_UNIQ_KEY] for m in markers) == sorted(r["uniq_key"] for r in took)


def test_units_cross_the_file_end_over_its_blank(timer):
    units = timer.units()
    assert [s for s, _ in timer.log.files] == [0, 1024]
    positions = units["position"].tolist()
    # 19 units fill the first file (19 * 52 + 16 > 1024 - 52 is where the broker writes its blank)
    assert positions[:20] == [*range(0, 19 * UNIT, UNIT), 1024]
    assert np.all(np.diff(units["position"][20:]) == UNIT)


def test_wheel_slots_chain_their_units(timer):
    units = {int(u["position"]): u for u in timer.units()}
    slots = timer.wheel.occupied()
    assert len(slots)
    for s in slots:
        chain, pos = [], int(s["last_pos"])
        while pos != -1:
            chain.append(pos)
            pos = int(units[pos]["prev_pos"])
        assert chain[-1] == int(s["first_pos"])
        # every unit of the chain is due in the slot's second; a delete unit counts -1
        assert all(int(units[p]["due_ms"]) // 1000 * 1000 == int(s["time_ms"]) for p in chain)
        deletes = sum(1 for p in chain if int(units[p]["magic"]) & fmt.TIMER_MAGIC_DELETE)
        assert int(s["num"]) == len(chain) - 2 * deletes
        assert timer.wheel.slot(int(s["time_ms"]) + 999)["last_pos"] == int(s["last_pos"])
    due = SENDS["recall-timer-0"]["deliver_ms"]
    slot = timer.wheel.slot(due)
    assert slot["num"] == 2            # four messages, two of them recalled
    assert timer.wheel.slot(due + 7 * 86400 * 1000) is None   # the same slot, another week: not its time


def test_a_store_without_timer_files():
    with cq.TimerFiles(DATA / "golden_store") as t:
        assert t.checkpoint is None and t.wheel is None and len(t.units()) == 0


# ------------------------------------------------------------------ cut and corrupt files
@pytest.fixture()
def timer_copy(tmp_path):
    """The timer's files of timer_store, the wheel linked (never written here)."""
    root = tmp_path / "timer"
    (root / "config").mkdir(parents=True)
    shutil.copy(STORE / "config" / fmt.TIMER_CHECK_FILE, root / "config")
    shutil.copytree(STORE / fmt.TIMER_LOG_DIR, root / fmt.TIMER_LOG_DIR)
    os.symlink(STORE / fmt.TIMER_WHEEL_FILE, root / fmt.TIMER_WHEEL_FILE)
    return root


def _error(root) -> cq.StoreFormatError:
    with pytest.raises(cq.StoreFormatError) as info, cq.TimerFiles(root) as t:
        t.units()
    return info.value


@pytest.mark.parametrize("cut", [0, 8, 31, 55])
def test_a_timercheck_cut_short(timer_copy, cut):
    path = timer_copy / "config" / fmt.TIMER_CHECK_FILE
    path.write_bytes(path.read_bytes()[:cut])
    e = _error(timer_copy)
    assert (e.path, e.offset) == (str(path), cut // 8 * 8) and "shorter than its 56 bytes" in str(e)
    with pytest.raises(cq.StoreFormatError):
        read_timer_checkpoint(path)


@pytest.mark.parametrize("field, value, offset", [
    ("size", 51, 0), ("size", -1, 0), ("magic", 0x10, 12), ("magic", fmt.BLANK_MAGIC_CODE, 12),
    ("offset_py", -5, 28), ("size_py", 0, 36)])
def test_an_impossible_timerlog_unit(timer_copy, field, value, offset):
    path = timer_copy / fmt.TIMER_LOG_DIR / fmt.file_name(1024)
    at = 3 * UNIT
    width = fmt.TIMER_LOG_UNIT_DTYPE[field].itemsize
    patch_file(path, at + offset, value.to_bytes(width, "big", signed=True))
    e = _error(timer_copy)
    assert (e.path, e.offset) == (str(path), at) and "not a unit" in str(e), e


def test_an_unfinished_unit_past_the_flushed_position_ends_the_log(timer_copy):
    """Past timercheck's flush position the broker may still be writing (or crashed while it did):
    an impossible unit there ends the data, as the broker's recovery ends it, while the same unit
    before the flush position is an error."""
    check = cq.TimerFiles(timer_copy)
    flushed, count = check.checkpoint.flush_pos, len(check.units())
    check.close()
    path = timer_copy / fmt.TIMER_LOG_DIR / fmt.file_name(1024)
    patch_file(path, flushed - 1024, (52).to_bytes(4, "big") + bytes(8) + (0x10).to_bytes(4, "big"))
    with cq.TimerFiles(timer_copy) as t:
        assert len(t.units()) == count
    with pytest.raises(cq.StoreFormatError) as info:
        cq.TimerLog(timer_copy / fmt.TIMER_LOG_DIR).units()
    assert (info.value.path, info.value.offset) == (str(path), flushed - 1024)


def test_a_timerlog_file_without_its_blank(timer_copy):
    path = timer_copy / fmt.TIMER_LOG_DIR / fmt.file_name(0)
    patch_file(path, 19 * UNIT, bytes(16))
    e = _error(timer_copy)
    assert (e.path, e.offset) == (str(path), 19 * UNIT) and "without its end-of-file blank" in str(e)


def test_a_truncated_timerlog_file(timer_copy):
    path = timer_copy / fmt.TIMER_LOG_DIR / fmt.file_name(0)
    path.write_bytes(path.read_bytes()[:700])
    e = _error(timer_copy)
    assert (e.path, e.offset) == (str(path), 700) and "timerlog file is 700 bytes" in str(e)


@pytest.mark.parametrize("size", [0, 4096, fmt.TIMER_WHEEL_FILE_SIZE + 32])
def test_a_wheel_of_the_wrong_size(timer_copy, size):
    path = timer_copy / fmt.TIMER_WHEEL_FILE
    path.unlink()
    path.write_bytes(bytes(size))
    e = _error(timer_copy)
    assert (e.path, e.offset) == (str(path), min(size, fmt.TIMER_WHEEL_FILE_SIZE)) and "expected 38707200" in str(e)


def test_files_are_opened_read_only(timer_copy):
    for path in [timer_copy / "config" / fmt.TIMER_CHECK_FILE, *(timer_copy / fmt.TIMER_LOG_DIR).iterdir()]:
        path.chmod(0o444)
    with cq.TimerFiles(timer_copy) as t:
        assert len(t.units()) and t.checkpoint is not None and t.wheel.slot(1000) is None
