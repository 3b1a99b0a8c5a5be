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
from ..readers.indexfile import INDEX_DIR, index_key
from ..tags import tags_code_many

__all__ = ["write_index_files"]

_HEADER = struct.Struct(">qqqqii")
_ENTRY_DTYPE = np.dtype([("key_hash", ">i4"), ("phy_offset", ">i8"), ("time_diff", ">i4"), ("prev_index", ">i4")])
_INT_MAX = 2**31 - 1


def _time_name(ms: int) -> str:
    """``yyyyMMddHHmmssSSS`` of ``ms`` (UTC), the IndexFile's name form."""
    t = datetime.datetime.fromtimestamp(ms / 1000, tz=datetime.timezone.utc)
    return t.strftime("%Y%m%d%H%M%S") + f"{ms % 1000:03d}"


def _file_bytes(hashes: np.ndarray, phys: np.ndarray, times: np.ndarray, slots: int, num: int) -> bytes:
    """One IndexFile holding the entries ``hashes``/``phys``/``times`` (in the order put), as ``putKey`` leaves it."""
    k = len(hashes)
    index = np.arange(1, k + 1, dtype=np.int64)
    slot = hashes.astype(np.int64) % slots
    order = np.lexsort((index, slot))  # by slot, then by index: each entry's previous in its slot comes before it
    prev = np.zeros(k, dtype=np.int64)
    same = slot[order][1:] == slot[order][:-1]
    prev[order[1:][same]] = index[order[:-1][same]]
    begin_ts, begin_phy = int(times[0]), int(phys[0])
    # the first entry is put before the header has a beginTimestamp: its timeDiff is 0
    diff = np.zeros(k, dtype=np.int64) if begin_ts <= 0 else np.clip((times - begin_ts) // 1000, 0, _INT_MAX)
    diff[0] = 0
    entries = np.zeros(num, dtype=_ENTRY_DTYPE)
    entries["key_hash"][1:k + 1] = hashes
    entries["phy_offset"][1:k + 1] = phys
    entries["time_diff"][1:k + 1] = diff
    entries["prev_index"][1:k + 1] = prev
    heads = np.zeros(slots, dtype=">i4")
    last = np.ones(k, dtype=bool)
    last[order[:-1][same]] = False  # an entry another of its slot follows is not the head
    heads[slot[last]] = index[last]
    header = _HEADER.pack(begin_ts, int(times[-1]), begin_phy, int(phys[-1]), int(last.sum()), k + 1)
    return header + heads.tobytes() + entries.tobytes()


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
    keys: list[str] = []
    phys: list[int] = []
    times: list[int] = []
    fields = ["store_size", "commit_log_offset", "sys_flag", "store_timestamp", "topic", "properties"]
    try:
        end = log.max_offset if up_to is None else min(int(up_to), log.max_offset)
        for batch in log.record_batches(log.min_offset, end, fields):
            offs = batch.columns["commit_log_offset"].tolist()
            flags = batch.columns["sys_flag"].tolist()
            stamps = batch.columns["store_timestamp"].tolist()
            topics = batch.texts("topic")
            for i, props in enumerate(batch.dicts()):
                if offs[i] >= end:
                    break
                if flags[i] & fmt.TRANSACTION_TYPE_MASK == fmt.TRANSACTION_ROLLBACK_TYPE:
                    continue
                mine = [props[fmt.PROPERTY_UNIQ_KEY]] if props.get(fmt.PROPERTY_UNIQ_KEY) is not None else []
                mine += [k for k in (props.get(fmt.PROPERTY_KEYS) or "").split(fmt.KEY_SEPARATOR) if k]
                keys += [index_key(topics[i], k) for k in mine]
                phys += [offs[i]] * len(mine)
                times += [stamps[i]] * len(mine)
    finally:
        log.close()
    # keyHash = abs(String.hashCode(key)), Integer.MIN_VALUE becoming 0 (docs/config-and-index.md#index-file)
    hashes = np.abs(tags_code_many(keys).astype(np.int64)) if keys else np.zeros(0, np.int64)
    hashes[hashes > _INT_MAX] = 0
    phys_arr, times_arr = np.asarray(phys, dtype=np.int64), np.asarray(times, dtype=np.int64)
    per_file = index_num - 1  # entries 1 .. indexNum - 1: a file is full when indexCount reaches indexNum
    paths = []
    last = ""
    for a in range(0, len(keys), per_file):
        b = min(a + per_file, len(keys))
        name = _time_name(int(times_arr[a]))
        while name <= last:  # two files begun in one millisecond: keep the names apart and in order
            name = str(int(name) + 1)
        last = name
        path = os.path.join(directory, name)
        with open(path, "wb") as f:
            f.write(_file_bytes(hashes[a:b].astype(np.int32), phys_arr[a:b], times_arr[a:b], hash_slot_num, index_num))
        paths.append(path)
    return paths
