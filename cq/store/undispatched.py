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
from ..readers.columns import factorize
from ..readers.commitlog import CommitLog
from ..readers.consumequeue import ConsumeQueue, head_units
from ..tags import tags_code_utf8

__all__ = ["dispatch_frontier", "held_by_a_process", "last_unit", "queue_last_unit", "undispatched_units"]

#: The store root's lock file, which a running broker holds (docs/reliability.md#undispatched).
LOCK_FILE = "lock"
#: The file a broker creates at start and deletes at a clean shutdown.
ABORT_FILE = "abort"
_PROC_LOCKS = "/proc/locks"
_QUEUE_SPAN = 1 << 32  # a queue id as an unsigned 32-bit value, below a topic's code
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


def dispatch_frontier(last_units) -> tuple[int, int] | None:
    """The dispatch frontier's unit: of each queue's last unit ``(commit_log_offset, size)`` (None for a
    queue without one), the one whose record ends furthest in the CommitLog; None when no queue has a unit.

    Its record's end is the dispatch frontier: every record before it was dispatched by the broker's reput
    service, which walks the CommitLog in order; what lies past it is what a restart dispatches
    (docs/reliability.md#undispatched). A store in a bucket finds its CommitLog's end by walking from there
    (docs/object-storage.md#costs)."""
    best = None
    for unit in last_units:
        if unit is not None and (best is None or unit[0] + unit[1] > best[0] + best[1]):
            best = (int(unit[0]), int(unit[1]))
    return best


def last_unit(head) -> tuple[int, int] | None:
    """``(commit_log_offset, size)`` of the last unit of bytes ``head`` (the start of a queue's last file)
    before the one that ends the queue's data (:func:`cq.readers.consumequeue.head_units`); None when there
    is none, or it is a placeholder (a queue's head, docs/formats.md#consumequeue-offsets)."""
    units, _ended = head_units(head)
    if not len(units):
        return None
    phys, size, tags = (int(units[name][-1]) for name in ("commit_log_offset", "size", "tags_code"))
    if (phys, size, tags) == fmt.PLACEHOLDER_UNIT:
        return None
    return phys, size


def queue_last_unit(queue: ConsumeQueue) -> tuple[int, int] | None:
    """``(commit_log_offset, size)`` of an open queue's last unit; None for a queue with no unit."""
    end = queue.max_offset
    return queue.unit(end - 1)[:2] if end > queue.min_offset else None


def _queue_ends(root: str, cq_file_size: int | None, queue_dir=None) -> tuple[dict[tuple[str, int], int], int]:
    """Each queue's end and the dispatch frontier (the furthest record end a unit points at,
    :func:`dispatch_frontier`).

    Opens one queue at a time (its files are closed before the next is opened). ``queue_dir(topic,
    queue_id)``, when given, is the directory each queue's reader opens (a store in object storage:
    its queue's objects, docs/object-storage.md#costs); else the directory under ``root``.
    """
    top = os.path.join(root, fmt.CONSUME_QUEUE_DIR)
    ends: dict[tuple[str, int], int] = {}
    last: list[tuple[int, int] | None] = []
    for topic in sorted(os.listdir(top)) if os.path.isdir(top) else []:
        tdir = os.path.join(top, topic)
        if not os.path.isdir(tdir):
            continue
        for q in sorted(os.listdir(tdir)):
            if not q.isdigit():
                continue
            where = queue_dir(topic, int(q)) if queue_dir is not None else os.path.join(tdir, q)
            queue = ConsumeQueue(where, file_size=cq_file_size, topic=topic, queue_id=int(q))
            try:
                ends[topic, int(q)] = queue.max_offset
                last.append(queue_last_unit(queue))
            finally:
                queue.close()
    unit = dispatch_frontier(last)
    return ends, 0 if unit is None else unit[0] + unit[1]


def undispatched_units(root: str, log: CommitLog, commit_log_end: int, *, cq_file_size: int | None = None,
                       queue_dir=None) -> dict[tuple[str, int], tuple[int, bytes]]:
    """The units a broker's recovery would add to each queue of a crashed store: ``{(topic, queue):
    (queue end, 20-byte big-endian units)}``, the units following the queue's last one (at its
    end), for records below ``commit_log_end``.

    Queues that have no directory yet (their first unit was never written) get none, nor does
    ``SCHEDULE_TOPIC_XXXX`` (its units hold delivery times, from the broker's delay levels).
    ``queue_dir`` as :func:`_queue_ends`.
    """
    ends, frontier = _queue_ends(root, cq_file_size, queue_dir)
    if frontier >= commit_log_end or not ends:
        return {}
    keys = list(ends)
    key_id = {key: n for n, key in enumerate(keys)}
    expected = np.array([ends[key] for key in keys], dtype=np.int64)  # each queue's next offset
    stopped = np.zeros(len(keys), dtype=bool)
    units: dict[int, list[np.ndarray]] = {}
    for batch in log.record_batches(frontier, commit_log_end, _FIELDS):
        c = batch.columns
        transaction = c["sys_flag"] & fmt.TRANSACTION_TYPE_MASK
        dispatched = (transaction == fmt.TRANSACTION_NOT_TYPE) | (transaction == fmt.TRANSACTION_COMMIT_TYPE)
        topic_codes, topics = factorize(*c["topic"][:2])  # each topic name decoded once a batch
        # (topic, queue) -> queue index, -1 for a queue without units (and the schedule topic:
        # a delayed message's unit holds its delivery time, not read here)
        queue_ids = c["queue_id"].astype(np.int64) & 0xFFFFFFFF
        known = [(t * _QUEUE_SPAN + q, key_id[topic, q]) for t, topic in enumerate(topics)
                 if topic != fmt.SCHEDULE_TOPIC for (name, q) in keys if name == topic]
        owner = _lookup(topic_codes * _QUEUE_SPAN + queue_ids, known)
        rows = np.flatnonzero(dispatched & (owner >= 0))
        rows = rows[~stopped[owner[rows]]]
        if not len(rows):
            continue
        taken, stops = _take(owner[rows], c["queue_offset"][rows].astype(np.int64), expected)
        stopped[stops] = True
        rows = rows[taken]
        if not len(rows):
            continue
        block = np.zeros(len(rows), dtype=fmt.CQ_UNIT_DTYPE)  # the batch's units, built as columns
        block["commit_log_offset"] = c["commit_log_offset"][rows]
        block["size"] = c["store_size"][rows]
        block["tags_code"] = tags_code_utf8(*c["tags"]).astype(np.int64)[rows]
        for k in np.unique(owner[rows]).tolist():
            units.setdefault(k, []).append(block[owner[rows] == k])
    return {keys[k]: (ends[keys[k]], b"".join(part.tobytes() for part in parts)) for k, parts in units.items()}


def _lookup(composite: np.ndarray, known: list[tuple[int, int]]) -> np.ndarray:
    """Per composite (topic, queue) key, the queue's index in ``known`` ``[(key, index)]``; -1 if absent."""
    if not known:
        return np.full(len(composite), -1, dtype=np.int64)
    table = np.array(sorted(known), dtype=np.int64)
    at = np.minimum(np.searchsorted(table[:, 0], composite), len(table) - 1)
    return np.where(table[at, 0] == composite, table[at, 1], -1)


def _take(owner: np.ndarray, offsets: np.ndarray, expected: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The dispatch's take-or-skip rule over one batch, as array operations: ``(taken mask, queues
    that stopped)``; ``expected`` (each queue's next offset) is advanced in place.

    In log order, a record whose QUEUEOFFSET is below its queue's next offset was dispatched
    already (skipped), one equal to it is the queue's next unit (taken), and one above it is a
    gap: the queue reads no further. Up to a queue's first gap its next offset is therefore
    ``max(next offset at the batch's start, 1 + the largest earlier offset)``: a running maximum.
    """
    order = np.argsort(owner, kind="stable")  # each queue's records together, in log order
    q, o = owner[order], offsets[order]
    first = np.ones(len(q), dtype=bool)
    first[1:] = q[1:] != q[:-1]
    group = np.cumsum(first) - 1
    # the largest earlier offset in the same queue: one running maximum over offsets lifted by
    # queue, so that a queue's values all exceed the previous queues' ones
    low = int(o.min())
    span = int(o.max()) - low + 2
    lifted = q * span + (o - low)
    running = np.maximum.accumulate(lifted)
    before = np.full(len(q), -1, dtype=np.int64)
    before[1:] = running[:-1]
    earlier = ~first  # a previous record of the same queue exists
    largest = np.where(earlier, before - q * span + low, np.iinfo(np.int64).min // 2)
    due = np.maximum(expected[q], largest + 1)
    gap = o > due
    gaps = np.cumsum(gap)
    gaps_before_queue = (gaps - gap)[first][group]
    past_gap = gaps - gaps_before_queue > 0  # at or after the queue's first gap
    taken_sorted = (o == due) & ~past_gap
    expected += np.bincount(q[taken_sorted], minlength=len(expected))
    taken = np.empty(len(q), dtype=bool)
    taken[order] = taken_sorted
    return taken, np.unique(q[gap])
