"""The 5.x timer's own files: ``config/timercheck``, ``timerlog/`` and ``timerwheel`` (docs/formats.md#timer-files).

A timer message waits in ``rmq_sys_wheel_timer`` (docs/paths.md#timers); the broker's timer store
reads that queue into ``timerlog/``, a mapped-file queue of 52-byte units (each points at a
message's CommitLog record, says when it is due and whether it is a message, a roll or a recall's
delete marker), links the units of one second through ``timerwheel``'s slots, and records how far
it has got in ``config/timercheck``: ``last_read_time_ms``, the time up to which it has fired
everything, and ``last_timer_queue_offset``, the timer topic's queue offset up to which it has
read messages into the timerlog. The layouts are in ``cq/format.py`` (``TIMER_*``).

:class:`TimerFiles` opens the three read-only; every unit is checked at once with numpy (no
Python object per unit), and a file cut short or holding an impossible unit raises
:class:`cq.StoreFormatError` naming the file and the byte offset.
"""
from __future__ import annotations

import os
from dataclasses import astuple, dataclass

import numpy as np

from .. import format as fmt
from ..errors import StoreFormatError
from ._mapped import MappedFileQueue
from .config import CONFIG_DIR
from .entry import ReaderEntry

__all__ = ["TIMER_UNIT_DTYPE", "TimerCheckpoint", "TimerFiles", "TimerLog", "TimerWheel", "read_timer_checkpoint"]

#: A timerlog unit as :meth:`TimerLog.units` returns it: the stored fields in native byte order,
#: then ``position`` (the unit's offset in the timerlog) and ``due_ms`` (``write_time_ms + delay_delta``).
TIMER_UNIT_DTYPE = np.dtype([(name, "=" + fmt.TIMER_LOG_UNIT_DTYPE[name].str[1:])
                             for name in fmt.TIMER_LOG_UNIT_DTYPE.names] + [("position", "=i8"), ("due_ms", "=i8")])


@dataclass(frozen=True)
class TimerCheckpoint:
    """``config/timercheck`` (``TimerCheckpoint``).

    Attributes
    ----------
    last_read_time_ms : int
        The timer has fired every message due before this time.
    flush_pos : int
        The timerlog's flushed position.
    last_timer_queue_offset : int
        Messages of the timer topic below this queue offset are in the timerlog.
    master_timer_queue_offset : int
        The master's (on a slave).
    state_version, data_version_timestamp, data_version_counter : int
        The data version.
    """

    last_read_time_ms: int
    flush_pos: int
    last_timer_queue_offset: int
    master_timer_queue_offset: int
    state_version: int
    data_version_timestamp: int
    data_version_counter: int

    def fired(self, due_ms: int) -> bool:
        """Whether the timer has processed the slot of a message due at ``due_ms``."""
        return self.last_read_time_ms > due_ms


def read_timer_checkpoint(path: str | os.PathLike) -> TimerCheckpoint:
    """Read ``config/timercheck``; a file shorter than its fields raises :class:`cq.StoreFormatError`."""
    data = fmt.map_file(path)
    try:
        need = fmt.TIMER_CHECK_DTYPE.itemsize
        if len(data) < need:
            field = fmt.TIMER_CHECK_DTYPE.names[len(data) // 8]
            raise StoreFormatError(f"timercheck is {len(data)} bytes, shorter than its {need} bytes of fields "
                                   f"(cut short in {field})", path, len(data) // 8 * 8)
        row = np.frombuffer(data, dtype=fmt.TIMER_CHECK_DTYPE, count=1)[0]
        return TimerCheckpoint(*(int(v) for v in row.tolist()))
    finally:
        fmt.release_maps({0: data})


class TimerLog(MappedFileQueue):
    """``{root}/timerlog/``: the timer's units, files of ``mappedFileSizeTimerLog`` bytes."""

    def __init__(self, directory: str | os.PathLike, file_size: int | None = None):
        self._open(directory, file_size, "timerlog")
        self._ends: dict[tuple[int, int | None], int] = {}   # (file index, flushed) -> its unit count

    def units(self, flushed: int | None = None) -> np.ndarray:
        """Every unit of every file, in timerlog order (:data:`TIMER_UNIT_DTYPE`).

        A file's units run from its start to its end-of-file blank (``BLANK_MAGIC_CODE``,
        ``size`` = the bytes left) or, in the last file, to the first zero ``size``. Anything else
        where a unit belongs (a ``size`` other than 52, a ``magic`` with bits above 0xF, a
        CommitLog offset or size that cannot be) raises :class:`cq.StoreFormatError`, except at
        or past ``flushed`` (``config/timercheck``'s flush position) in the last file: the broker
        may be writing there, and its recovery ends the timerlog at such a unit.
        """
        parts = [self._native(i, np.arange(self._end(i, flushed))) for i in range(len(self._files))]
        return np.concatenate(parts) if parts else np.zeros(0, dtype=TIMER_UNIT_DTYPE)

    def check(self, flushed: int | None = None) -> int:
        """Check every file as :meth:`units` does, without copying a unit out; returns how many there are."""
        return sum(self._end(i, flushed) for i in range(len(self._files)))

    def units_of(self, commit_log_offset: int, flushed: int | None = None) -> np.ndarray:
        """The units (:meth:`units`) that point at the CommitLog record at ``commit_log_offset``."""
        parts = []
        for i in range(len(self._files)):
            end = self._end(i, flushed)
            parts.append(self._native(i, np.flatnonzero(self._raw(i)["offset_py"][:end] == commit_log_offset)))
        return np.concatenate(parts) if parts else np.zeros(0, dtype=TIMER_UNIT_DTYPE)

    def _raw(self, index: int) -> np.ndarray:
        """File ``index`` as stored units (a view of its map, no copy)."""
        data = self._map(index)
        return np.frombuffer(data, dtype=fmt.TIMER_LOG_UNIT_DTYPE, count=len(data) // fmt.TIMER_LOG_UNIT_SIZE)

    def _native(self, index: int, rows: np.ndarray) -> np.ndarray:
        """Units ``rows`` of file ``index`` in native byte order, with their position and due time."""
        raw = self._raw(index)[rows]
        out = np.zeros(len(rows), dtype=TIMER_UNIT_DTYPE)
        for name in fmt.TIMER_LOG_UNIT_DTYPE.names:
            out[name] = raw[name]
        out["position"] = self._files[index][0] + rows.astype(np.int64) * fmt.TIMER_LOG_UNIT_SIZE
        out["due_ms"] = out["write_time_ms"] + out["delay_delta"]
        return out

    def _end(self, index: int, flushed: int | None) -> int:
        """How many units file ``index`` holds (checked once); raises where the file holds what cannot be."""
        key = (index, flushed)
        if key not in self._ends:
            self._ends[key] = self._check_file(index, flushed)
        return self._ends[key]

    def _check_file(self, index: int, flushed: int | None) -> int:
        start, path = self._files[index]
        data = self._map(index)
        unit = fmt.TIMER_LOG_UNIT_SIZE
        raw = self._raw(index)
        ok = ((raw["size"] == unit) & ((raw["magic"] & ~fmt.TIMER_MAGIC_MASK) == 0)
              & (raw["offset_py"] >= 0) & (raw["size_py"] > 0))
        bad = np.flatnonzero(~ok)
        end = int(bad[0]) if len(bad) else len(raw)
        at = end * unit
        last = index == len(self._files) - 1
        if at + fmt.TIMER_LOG_MIN_BLANK_LEN <= len(data):
            size, magic = (int(v) for v in np.frombuffer(data, dtype=">i4", count=4, offset=at)[[0, 3]])
            if size == len(data) - at and magic == fmt.BLANK_MAGIC_CODE:
                pass        # the end-of-file blank
            elif last and (size == 0 or (flushed is not None and start + at >= flushed)):
                pass        # the end of the data (or a unit the broker has not finished writing)
            elif end < len(raw):
                u = raw[end]
                raise StoreFormatError(
                    f"timerlog unit has size {int(u['size'])}, magic {int(u['magic'])}, CommitLog offset "
                    f"{int(u['offset_py'])}, size {int(u['size_py'])}: not a unit (size {unit}, magic within "
                    f"{fmt.TIMER_MAGIC_MASK:#x}), nor the file's end-of-file blank", path, at)
            else:
                raise StoreFormatError(f"timerlog file ends at byte {at} without its end-of-file blank "
                                       f"(size {size}, magic {magic})", path, at)
        elif not last:
            raise StoreFormatError(f"timerlog file ends at byte {at} without its end-of-file blank", path, at)
        return end


class TimerWheel:
    """``{root}/timerwheel``: ``2 * TIMER_WHEEL_SLOTS`` slots; the slot of time t (ms) is
    ``t // precision_ms % (2 * TIMER_WHEEL_SLOTS)`` and is t's only while its ``time`` field is
    ``t // precision_ms``."""

    def __init__(self, path: str | os.PathLike, precision_ms: int = fmt.TIMER_PRECISION_MS):
        self.path, self.precision_ms = os.fspath(path), precision_ms
        self._data = fmt.map_file(self.path)
        if len(self._data) != fmt.TIMER_WHEEL_FILE_SIZE:
            size = len(self._data)
            self.close()
            raise StoreFormatError(f"timerwheel is {size} bytes, expected {fmt.TIMER_WHEEL_FILE_SIZE} "
                                   f"(2 x {fmt.TIMER_WHEEL_SLOTS} slots of {fmt.TIMER_SLOT_DTYPE.itemsize} bytes)",
                                   self.path, min(size, fmt.TIMER_WHEEL_FILE_SIZE))
        self._slots = np.frombuffer(self._data, dtype=fmt.TIMER_SLOT_DTYPE)

    def slot(self, time_ms: int) -> dict | None:
        """The slot of ``time_ms`` (``time_ms`` floored to the precision, ``first_pos``, ``last_pos``, ``num``),
        or None when the wheel holds nothing for that time."""
        tick = time_ms // self.precision_ms
        s = self._slots[tick % len(self._slots)]
        if int(s["time"]) != tick:
            return None
        return {"time_ms": tick * self.precision_ms, "first_pos": int(s["first_pos"]),
                "last_pos": int(s["last_pos"]), "num": int(s["num"])}

    def occupied(self) -> np.ndarray:
        """The slots in use (``time`` not 0), native byte order, with their ``index``."""
        used = np.flatnonzero(self._slots["time"] != 0)
        out = np.zeros(len(used), dtype=[("index", "=i8"), ("time_ms", "=i8"), ("first_pos", "=i8"),
                                         ("last_pos", "=i8"), ("num", "=i4")])
        out["index"] = used
        out["time_ms"] = self._slots["time"][used] * self.precision_ms
        for name in ("first_pos", "last_pos", "num"):
            out[name] = self._slots[name][used]
        return out

    def close(self) -> None:
        self._slots = None
        fmt.release_maps({0: self._data})


class TimerFiles:
    """The timer's three files of a store root, opened read-only and checked whole when opened (a
    cut or impossible file raises :class:`cq.StoreFormatError` then); each is None where the store
    has none (a broker that never enabled the timer writes none of them).

    Attributes
    ----------
    checkpoint : TimerCheckpoint or None
    log : TimerLog
        Empty when there is no ``timerlog/``.
    wheel : TimerWheel or None
    """

    def __init__(self, root: str | os.PathLike, precision_ms: int = fmt.TIMER_PRECISION_MS):
        self.root, self.precision_ms = os.fspath(root), precision_ms
        check = os.path.join(self.root, CONFIG_DIR, fmt.TIMER_CHECK_FILE)
        self.checkpoint = read_timer_checkpoint(check) if os.path.exists(check) else None
        self.log = TimerLog(os.path.join(self.root, fmt.TIMER_LOG_DIR))
        self.wheel, self._units = None, None
        self._flushed = self.checkpoint.flush_pos if self.checkpoint is not None else None
        try:
            wheel = os.path.join(self.root, fmt.TIMER_WHEEL_FILE)
            self.wheel = TimerWheel(wheel, precision_ms) if os.path.exists(wheel) else None
            self.log.check(self._flushed)   # every unit checked, whoever opens the files; none copied out
        except StoreFormatError:
            self.close()
            raise

    def __reduce__(self):
        return TimerFiles, (self.root, self.precision_ms)

    def __repr__(self) -> str:
        return f"TimerFiles({self.root!r}, precision_ms={self.precision_ms})"

    def units(self) -> np.ndarray:
        """:meth:`TimerLog.units` up to what the checkpoint says is flushed, read once."""
        if self._units is None:
            self._units = self.log.units(self._flushed)
        return self._units

    def units_of(self, commit_log_offset: int) -> np.ndarray:
        """The units that point at the CommitLog record at ``commit_log_offset`` (:meth:`TimerLog.units_of`)."""
        return self.log.units_of(commit_log_offset, self._flushed)

    def close(self) -> None:
        self.log.close()
        if self.wheel is not None:
            self.wheel.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def _timer_files(root: str) -> list[str]:
    """The files the generic sweeps rewrite: timercheck and the timerlog's. The 37 MiB wheel is
    left out (each sweep case rewrites a file whole); tests/cq/readers/test_timer.py cuts it."""
    log = [path for _, path in fmt.list_queue_files(os.path.join(root, fmt.TIMER_LOG_DIR))]
    return [os.path.join(root, CONFIG_DIR, fmt.TIMER_CHECK_FILE), *log]


def _read_all(timer: TimerFiles):
    check = astuple(timer.checkpoint) if timer.checkpoint is not None else None
    return check, timer.units().tolist(), timer.wheel.occupied().tolist() if timer.wheel is not None else None


# This reader's registry entry (docs/contributing.md#add-a-reader).
READERS = (ReaderEntry("TimerFiles", TimerFiles, _timer_files, _read_all, store="timer_store"),)
