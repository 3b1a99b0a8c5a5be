"""What a stopped broker wrote to its CommitLog but never dispatched (docs/reliability.md#undispatched).

The broker appends a record to the CommitLog, then its dispatch thread (the "reput" service)
writes the record's ConsumeQueue unit, in log order. A broker killed between the two leaves
records without units; at its restart, its recovery dispatches them and then serves them. A
reader of the stopped broker's store gets them the same way: every record past the dispatch
frontier (the end of the furthest record any ConsumeQueue unit points at) whose transaction
type the dispatch takes (not prepared, not rolled back) and whose QUEUEOFFSET is its queue's
next offset becomes that queue's next unit, with the tag code the dispatch computes.

Only a store no process holds: a running broker (or :class:`cq.writer.writer.StoreWriter`)
holds its ``lock`` file, and its own dispatch writes those units. Whether a process holds it
comes from the kernel's lock table (``/proc/locks``), read without taking any lock; where
there is no such table, the store is read as its ConsumeQueues lie.
"""
from __future__ import annotations

import os

import numpy as np

from .. import format as fmt
from ..readers.commitlog import CommitLog
from ..readers.consumequeue import ConsumeQueue
from ..tags import tags_code_utf8

__all__ = ["held_by_a_process", "undispatched_units"]

#: The store root's lock file, which a running broker holds (docs/reliability.md#undispatched).
LOCK_FILE = "lock"
#: The file a broker creates at start and deletes at a clean shutdown.
ABORT_FILE = "abort"
_PROC_LOCKS = "/proc/locks"
_FIELDS = ("topic", "queue_id", "queue_offset", "sys_flag", "tags", "store_size", "commit_log_offset")


def held_by_a_process(root: str) -> bool | None:
    """Whether a process holds a lock on ``root/lock`` (a running broker does); None if unknown.

    Reads the kernel's table of file locks (Linux ``/proc/locks``: POSIX locks as Java takes
    them, and ``flock`` locks), matching the file's device and inode; takes no lock itself.
    """
    try:
        st = os.stat(os.path.join(root, LOCK_FILE))
    except FileNotFoundError:
        return False
    try:
        with open(_PROC_LOCKS, encoding="ascii", errors="replace") as f:
            table = f.read()
    except OSError:
        return None
    want = (os.major(st.st_dev), os.minor(st.st_dev), st.st_ino)
    for line in table.splitlines():
        for field in line.split():
            parts = field.split(":")
            if len(parts) == 3 and parts[2].isdigit():
                try:
                    if (int(parts[0], 16), int(parts[1], 16), int(parts[2])) == want:
                        return True
                except ValueError:
                    pass
                break
    return False


def crashed(root: str) -> bool:
    """A store its broker did not shut down cleanly (``abort`` left) and no process holds now."""
    return os.path.exists(os.path.join(root, ABORT_FILE)) and held_by_a_process(root) is False


def _queue_ends(root: str, cq_file_size: int | None) -> tuple[dict[tuple[str, int], int], int]:
    """Each queue's end and the dispatch frontier (the furthest record end a unit points at).

    Opens one queue at a time (its files are closed before the next is opened).
    """
    top = os.path.join(root, fmt.CONSUME_QUEUE_DIR)
    ends: dict[tuple[str, int], int] = {}
    frontier = 0
    for topic in sorted(os.listdir(top)) if os.path.isdir(top) else []:
        tdir = os.path.join(top, topic)
        if not os.path.isdir(tdir):
            continue
        for q in sorted(os.listdir(tdir)):
            if not q.isdigit():
                continue
            queue = ConsumeQueue(os.path.join(tdir, q), file_size=cq_file_size, topic=topic, queue_id=int(q))
            try:
                end = queue.max_offset
                ends[topic, int(q)] = end
                if end > queue.min_offset:
                    phys, size, _ = queue.unit(end - 1)
                    frontier = max(frontier, phys + size)
            finally:
                queue.close()
    return ends, frontier


def undispatched_units(root: str, log: CommitLog, commit_log_end: int, *,
                       cq_file_size: int | None = None) -> dict[tuple[str, int], tuple[int, bytes]]:
    """The units a broker's recovery would add to each queue of a crashed store: ``{(topic, queue):
    (queue end, 20-byte big-endian units)}``, the units following the queue's last one (at its
    end), for records below ``commit_log_end``.

    Queues that have no directory yet (their first unit was never written) get none, nor does
    ``SCHEDULE_TOPIC_XXXX`` (its units hold delivery times, from the broker's delay levels).
    """
    ends, frontier = _queue_ends(root, cq_file_size)
    if frontier >= commit_log_end or not ends:
        return {}
    expected = dict(ends)
    units: dict[tuple[str, int], list[np.ndarray]] = {}
    stopped: set[tuple[str, int]] = set()
    for batch in log.record_batches(frontier, commit_log_end, _FIELDS):
        c = batch.columns
        offsets, data = c["topic"][:2]
        transaction = c["sys_flag"] & fmt.TRANSACTION_TYPE_MASK
        dispatched = (transaction == fmt.TRANSACTION_NOT_TYPE) | (transaction == fmt.TRANSACTION_COMMIT_TYPE)
        rows = np.flatnonzero(dispatched)
        queue_ids, queue_offsets = c["queue_id"][rows].tolist(), c["queue_offset"][rows].tolist()
        topics: dict[bytes, str] = {}  # each topic name decoded once a batch
        taken, taken_keys = [], []
        # the take-or-skip decision follows each queue's expected offset in log order
        for i, row in enumerate(rows.tolist()):
            raw = bytes(data[offsets[row]:offsets[row + 1]])
            topic = topics.get(raw) or topics.setdefault(raw, raw.decode("utf-8", "replace"))
            key = (topic, queue_ids[i])
            if key not in expected or key in stopped or topic == fmt.SCHEDULE_TOPIC:
                continue  # (a delayed message's unit holds its delivery time: not read here)
            if queue_offsets[i] < expected[key]:
                continue  # dispatched already (a unit below the queue's end)
            if queue_offsets[i] > expected[key]:
                stopped.add(key)  # a gap: the queue's order is not the log's; read no further
                continue
            expected[key] += 1
            taken.append(row)
            taken_keys.append(key)
        if not taken:
            continue
        block = np.zeros(len(taken), dtype=fmt.CQ_UNIT_DTYPE)  # the batch's units, built as columns
        block["commit_log_offset"] = c["commit_log_offset"][taken]
        block["size"] = c["store_size"][taken]
        block["tags_code"] = tags_code_utf8(*c["tags"]).astype(np.int64)[taken]
        ids = {key: n for n, key in enumerate(dict.fromkeys(taken_keys))}
        owner = np.array([ids[key] for key in taken_keys])
        for key, n in ids.items():
            units.setdefault(key, []).append(block[owner == n])
    return {key: (ends[key], b"".join(part.tobytes() for part in parts)) for key, parts in units.items()}
