"""Writing a store's IndexFiles (``{root}/index/``) as the broker's ``IndexService`` builds them.

The layout and the rules are docs/config-and-index.md#index-file: for every record that is not a
rolled-back transaction, in CommitLog order, one entry for ``"{topic}#{UNIQ_KEY}"`` (when the record
has one) and one per key of ``KEYS`` (split on single spaces, empty keys skipped). An entry goes to
the newest file until its ``indexCount`` reaches ``indexNum``; then a new file begins. The first entry
of a file sets its ``beginTimestamp`` and ``beginPhyOffset`` (its ``timeDiff`` is 0); every entry sets
``endTimestamp`` and ``endPhyOffset``; ``timeDiff`` is whole seconds after ``beginTimestamp``, clamped
to ``[0, Integer.MAX_VALUE]``; the slot ``abs(hashCode) % hashSlotNum`` points at the newest entry,
which links to the slot's previous head.

:func:`write_index_files` reads a closed store's CommitLog and writes its index, so tests and the
benchmarks (``rmqfilter find``, docs/find.md) have stores with IndexFiles that
:class:`cq.readers.indexfile.IndexFiles` reads; ``up_to`` leaves the records from that CommitLog
offset on unindexed (a broker whose index lags, or a store whose index was lost).
"""
from __future__ import annotations

import datetime
import os
import struct

import numpy as np

from .. import format as fmt
from ..readers.commitlog import CommitLog
from ..readers.indexfile import INDEX_DIR, INVALID_INDEX, index_key, index_key_hash

__all__ = ["write_index_files"]

_HEADER = struct.Struct(">qqqqii")
_ENTRY_DTYPE = np.dtype([("key_hash", ">i4"), ("phy_offset", ">i8"), ("time_diff", ">i4"), ("prev_index", ">i4")])
_INT_MAX = 2**31 - 1


def _time_name(ms: int) -> str:
    """``yyyyMMddHHmmssSSS`` of ``ms`` (UTC), the IndexFile's name form."""
    t = datetime.datetime.fromtimestamp(ms / 1000, tz=datetime.timezone.utc)
    return t.strftime("%Y%m%d%H%M%S") + f"{ms % 1000:03d}"


class _File:
    """One IndexFile being filled in memory."""

    def __init__(self, slots: int, num: int) -> None:
        self.slots = np.zeros(slots, dtype=">i4")
        self.entries = np.zeros(num, dtype=_ENTRY_DTYPE)
        self.count = 1  # indexCount starts at 1: entry 0 is never used
        self.slot_count = 0
        self.begin_ts = self.end_ts = 0
        self.begin_phy = self.end_phy = 0

    def put(self, key_hash: int, phy: int, ts: int) -> None:
        slot = key_hash % len(self.slots)
        head = int(self.slots[slot])
        if head <= INVALID_INDEX or head > self.count:
            head = INVALID_INDEX
        diff = 0 if self.begin_ts <= 0 else min(max((ts - self.begin_ts) // 1000, 0), _INT_MAX)
        self.entries[self.count] = (key_hash, phy, diff, head)
        self.slots[slot] = self.count
        if self.count <= 1:
            self.begin_phy, self.begin_ts = phy, ts
        if head == INVALID_INDEX:
            self.slot_count += 1
        self.count += 1
        self.end_phy, self.end_ts = phy, ts

    def write(self, path: str) -> None:
        with open(path, "wb") as f:
            f.write(_HEADER.pack(self.begin_ts, self.end_ts, self.begin_phy, self.end_phy, self.slot_count,
                                 self.count))
            f.write(self.slots.tobytes())
            f.write(self.entries.tobytes())


def write_index_files(root: str | os.PathLike, *, hash_slot_num: int = 64, index_num: int = 512,
                      up_to: int | None = None) -> list[str]:
    """Write ``{root}/index/`` for the records of the store's CommitLog, as ``IndexService`` does.

    Parameters
    ----------
    root : path
        A store no writer has open (its CommitLog is read, its ``index/`` replaced).
    hash_slot_num, index_num : int
        The broker's ``maxHashSlotNum`` / ``maxIndexNum`` (small by default, so a test store rolls
        over to several files).
    up_to : int, optional
        Index only the records that start below this CommitLog offset.

    Returns
    -------
    list of str
        The files written, oldest first.
    """
    if hash_slot_num < 1 or index_num < 2:
        raise ValueError(f"hash_slot_num must be >= 1 and index_num >= 2, got {hash_slot_num} and {index_num}")
    root = os.fspath(root)
    directory = os.path.join(root, INDEX_DIR)
    os.makedirs(directory, exist_ok=True)
    for name in os.listdir(directory):
        if name.isdigit():
            os.remove(os.path.join(directory, name))
    log = CommitLog(os.path.join(root, fmt.COMMIT_LOG_DIR))
    files: list[_File] = []
    current: _File | None = None
    fields = ["store_size", "commit_log_offset", "sys_flag", "store_timestamp", "topic", "properties"]
    try:
        end = log.max_offset if up_to is None else min(int(up_to), log.max_offset)
        for batch in log.record_batches(log.min_offset, end, fields):
            offs = batch.columns["commit_log_offset"].tolist()
            flags = batch.columns["sys_flag"].tolist()
            times = batch.columns["store_timestamp"].tolist()
            topics = batch.texts("topic")
            for i, props in enumerate(batch.dicts()):
                if offs[i] >= end:
                    break
                if flags[i] & fmt.TRANSACTION_TYPE_MASK == fmt.TRANSACTION_ROLLBACK_TYPE:
                    continue
                keys = []
                if props.get(fmt.PROPERTY_UNIQ_KEY) is not None:
                    keys.append(props[fmt.PROPERTY_UNIQ_KEY])
                keys += [k for k in (props.get(fmt.PROPERTY_KEYS) or "").split(fmt.KEY_SEPARATOR) if k]
                for k in keys:
                    if current is None or current.count >= index_num:
                        current = _File(hash_slot_num, index_num)
                        files.append(current)
                    current.put(index_key_hash(index_key(topics[i], k)), offs[i], times[i])
    finally:
        log.close()
    paths = []
    last = ""
    for f in files:
        name = _time_name(f.begin_ts)
        while name <= last:  # two files begun in one millisecond: keep the names apart and in order
            name = str(int(name) + 1)
        last = name
        path = os.path.join(directory, name)
        f.write(path)
        paths.append(path)
    return paths
