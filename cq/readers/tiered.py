"""RocketMQ's tiered store on its POSIX back end: the metadata file and each queue's flat files.

The layout and the rules read here are docs/formats.md#tiered-storage: the local store's
``config/tieredStoreMetadata.json`` (``DefaultMetadataStore``) lists each queue's segments; the
segments live under the tier directory (``tieredStoreFilePath``) at
``{md5(cluster)[:8]}_{cluster}/{broker}/{topic}/{queueId}/{COMMIT_LOG|CONSUME_QUEUE}/{md5(offset)[:8]}{offset:020}``.
A queue's flat CommitLog holds its records back to back (copied from the local CommitLog, PHYSICALOFFSET
rewritten to the flat offset, no blank record at a segment's end) at offsets of its own; its flat ConsumeQueue holds
20-byte units as the local one does, with the flat CommitLog's offsets and the resolved tags code.

:class:`TieredMetadata` reads the metadata file, :class:`Tier` finds the tier's cluster directory
and opens :class:`TieredQueue` (:class:`TieredCommitLog` and :class:`TieredConsumeQueue`) per queue.
Every file is opened read-only; a file the metadata lists that is missing, shorter than listed or not
where the layout puts it is a :class:`cq.StoreFormatError` naming it.
"""
from __future__ import annotations

import hashlib
import os
import threading
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np

from .. import format as fmt
from ..errors import StoreFormatError
from ._mapped import MappedFileQueue
from .commitlog import CommitLog
from .config import ConfigFormatError, load_config
from .entry import ReaderEntry

__all__ = ["TIERED_METADATA_FILE", "Tier", "TierSegment", "TieredCommitLog", "TieredConsumeQueue",
           "TieredMetadata", "TieredQueue", "TieredStoreError", "tier_file_name"]

#: The metadata file of ``DefaultMetadataStore``, under the local store's ``config/``.
TIERED_METADATA_FILE = "tieredStoreMetadata.json"
#: ``FileSegmentType`` codes (the segment tables' ``type``) and the directory names the POSIX back end uses.
COMMIT_LOG_TYPE, CONSUME_QUEUE_TYPE, INDEX_TYPE = 0, 1, 2
SEGMENT_DIRS = {COMMIT_LOG_TYPE: "COMMIT_LOG", CONSUME_QUEUE_TYPE: "CONSUME_QUEUE", INDEX_TYPE: "INDEX"}
_TABLES = {COMMIT_LOG_TYPE: "commitLogFileSegmentTable", CONSUME_QUEUE_TYPE: "consumeQueueFileSegmentTable",
           INDEX_TYPE: "indexFileSegmentTable"}
#: Bytes of a record up to and including QUEUEOFFSET: what the broker reads of a flat CommitLog's first
#: record to find the queue's first offset there (``getMinOffsetFromFile``).
FIRST_RECORD_HEAD = fmt.RECORD_OFFSETS_POSITION + 8


class TieredStoreError(StoreFormatError):
    """A store whose broker tiered its messages cannot be read as the broker serves it
    (docs/reading.md#tiered-storage): the tier was not given, or cannot be read exactly."""


def tier_hash(text: str) -> str:
    """The first 8 hex digits of the MD5 of ``text`` (UTF-8): ``MessageStoreUtil.getHash``."""
    return hashlib.md5(text.encode("utf-8")).hexdigest()[:8]


def tier_file_name(offset: int) -> str:
    """A segment's file name: ``offset2FileName`` (the hash of the decimal offset, then 20 digits)."""
    return f"{tier_hash(str(int(offset)))}{int(offset):020d}"


@dataclass(frozen=True)
class TierSegment:
    """One segment of a flat file as the metadata lists it: its base offset and committed size."""

    base_offset: int
    size: int


class TieredMetadata:
    """``config/tieredStoreMetadata.json`` of a store (docs/formats.md#tiered-metadata).

    Attributes
    ----------
    path : str
        The file (its ``.bak`` is read as the broker's ``ConfigManager`` does when it is missing or bad).
    queues : dict of (topic, queue id) to broker name
        The queues the tier has flat files for.
    topic_ids : dict of str to int
        Each topic's id in the tier (its index files name it).
    """

    def __init__(self, store_root: str | os.PathLike) -> None:
        self.path = os.path.join(os.fspath(store_root), "config", TIERED_METADATA_FILE)
        loaded = load_config(self.path, self._extract)
        self.source = loaded.source
        self.queues, self.topic_ids, self._tables = loaded.data if loaded.data is not None else ({}, {}, {})

    @staticmethod
    def exists(store_root: str | os.PathLike) -> bool:
        """Whether the store's broker ran the tiered store (its metadata file, or its ``.bak``, is there)."""
        path = os.path.join(os.fspath(store_root), "config", TIERED_METADATA_FILE)
        return os.path.exists(path) or os.path.exists(path + ".bak")

    @staticmethod
    def _extract(parsed, src: str):
        if not isinstance(parsed, dict):
            raise ConfigFormatError("expected a JSON object at the top", src)
        queues: dict[tuple[str, int], str] = {}
        for topic, table in _object(parsed, "queueMetadataTable", src).items():
            for qid, meta in _object_of(table, f"queueMetadataTable.{topic}", src).items():
                q = _object_of(meta, f"queueMetadataTable.{topic}.{qid}", src).get("queue")
                if not isinstance(q, dict) or not isinstance(q.get("brokerName"), str):
                    raise ConfigFormatError("expected a queue with its brokerName", src,
                                            field=f"queueMetadataTable.{topic}.{qid}.queue")
                queues[(str(topic), _int(qid, f"queueMetadataTable.{topic}", src))] = q["brokerName"]
        topic_ids = {str(t): _int(_object_of(m, f"topicMetadataTable.{t}", src).get("topicId"),
                                  f"topicMetadataTable.{t}.topicId", src)
                     for t, m in _object(parsed, "topicMetadataTable", src).items()}
        tables: dict[int, dict[str, list[TierSegment]]] = {}
        for kind, name in _TABLES.items():
            tables[kind] = {}
            for file_path, segments in _object(parsed, name, src).items():
                rows = []
                for base, seg in _object_of(segments, f"{name}.{file_path}", src).items():
                    where = f"{name}.{file_path}.{base}"
                    seg = _object_of(seg, where, src)
                    base_offset = _int(seg.get("baseOffset"), f"{where}.baseOffset", src)
                    size = _int(seg.get("size"), f"{where}.size", src)
                    if base_offset < 0 or size < 0 or _int(base, where, src) != base_offset:
                        raise ConfigFormatError(f"segment base offset {base_offset} and size {size} do not fit "
                                                f"its key {base}", src, field=where)
                    rows.append(TierSegment(base_offset, size))
                tables[kind][str(file_path)] = sorted(rows, key=lambda s: s.base_offset)
        return queues, topic_ids, tables

    def segments(self, kind: int, file_path: str) -> list[TierSegment]:
        """The segments of one flat file (``kind``: :data:`COMMIT_LOG_TYPE` ...; ``file_path``:
        ``{broker}/{topic}/{queueId}``), by base offset."""
        return list(self._tables.get(kind, {}).get(file_path, ()))

    def has_segments(self) -> bool:
        """Whether any queue's flat CommitLog or ConsumeQueue has a segment."""
        return any(self._tables.get(k) for k in (COMMIT_LOG_TYPE, CONSUME_QUEUE_TYPE))


def _object(parsed: dict, name: str, src: str) -> dict:
    return _object_of(parsed.get(name, {}), name, src)


def _object_of(value, where: str, src: str) -> dict:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise ConfigFormatError("expected an object", src, field=where)
    return value


def _int(value, where: str, src: str) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, str)):
        raise ConfigFormatError(f"expected an integer, found {value!r}", src, field=where)
    try:
        return int(value)
    except ValueError:
        raise ConfigFormatError(f"expected an integer, found {value!r}", src, field=where) from None


class _SegmentFiles:
    """The segment files of one flat file, checked against the metadata (docs/formats.md#tiered-segments):
    each at its name, contiguous, the committed bytes of each on disk. ``[(base, path, committed)]``."""

    @staticmethod
    def list(directory: str, segments: list[TierSegment], kind: str, unit: int = 1) -> list[tuple[int, str, int]]:
        out: list[tuple[int, str, int]] = []
        for i, seg in enumerate(segments):
            path = os.path.join(directory, tier_file_name(seg.base_offset))
            try:
                on_disk = os.path.getsize(path)
            except FileNotFoundError:
                raise StoreFormatError(f"tier {kind} segment {seg.base_offset} listed in the metadata is missing",
                                       path) from None
            last = i == len(segments) - 1
            # the broker recovers the last segment's size from the file; the others keep their metadata size
            committed = on_disk if last else seg.size
            if committed > on_disk:
                raise StoreFormatError(f"tier {kind} segment holds {on_disk} bytes, its metadata says {seg.size}",
                                       path, on_disk)
            if last and unit > 1:
                committed -= committed % unit  # a unit being written lies past the cut (docs/live.md)
            if out and out[-1][0] + out[-1][2] != seg.base_offset:
                prev = out[-1]
                raise StoreFormatError(f"tier {kind} segment starts at {seg.base_offset}, the one before it "
                                       f"ends at {prev[0] + prev[2]}", path, 0)
            if seg.base_offset % unit or (not last and committed % unit):
                raise StoreFormatError(f"tier {kind} segment base {seg.base_offset} or size {committed} is not a "
                                       f"multiple of {unit}", path, 0)
            out.append((seg.base_offset, path, committed))
        return out


class TieredCommitLog(CommitLog):
    """A queue's flat CommitLog in the tier: its records back to back in segments of varying size.

    Offsets are the flat file's own (the tier's ConsumeQueue units hold them); every record read
    (:meth:`read_message`, :meth:`decode_columns`, :meth:`gather_properties`) must lie inside one
    segment's committed bytes. It reads as :class:`cq.CommitLog` does otherwise, so the broker's path
    (:mod:`cq.store.decide`) runs over it unchanged.
    """

    def __init__(self, directory: str | os.PathLike, segments: list[tuple[int, str, int]]) -> None:
        self.check_crc_on_recover = False
        self._segments = list(segments)
        self._set_files(directory, "tier CommitLog", None)
        self._files = [(base, path) for base, path, _ in self._segments]
        self._limits = [committed for _, _, committed in self._segments]
        self.file_size = max(self._limits, default=0)
        self._starts = np.array([s for s, _ in self._files], dtype=np.int64)
        self._start_list = [s for s, _ in self._files]
        self._arrays: dict[int, np.ndarray] = {}
        self._max_offset = self._files[-1][0] + self._limits[-1] if self._files else 0

    def __repr__(self) -> str:
        return f"TieredCommitLog({self.directory!r}, segments={len(self._files)})"

    def __reduce__(self):
        return TieredCommitLog, (self.directory, self._segments)

    def _list_files(self, file_size):  # the metadata's segments, read when the tier was opened
        return list(self._files), self.file_size

    def _file_limit(self, index: int) -> int:
        return self._limits[index]

    def file_indices(self, offsets: np.ndarray) -> np.ndarray:
        offsets = np.asarray(offsets, dtype=np.int64)
        if not self._files:
            return np.full(len(offsets), -1, dtype=np.int64)
        idx = np.searchsorted(self._starts, offsets, side="right").astype(np.int64) - 1
        ends = self._starts + np.array(self._limits, dtype=np.int64)
        idx[(idx < 0) | (offsets >= ends[np.maximum(idx, 0)])] = -1
        return idx

    @property
    def min_offset(self) -> int:
        return self._files[0][0] if self._files else 0

    @property
    def max_offset(self) -> int:
        """The end of the committed bytes of the last segment."""
        return self._max_offset

    def refresh(self) -> int:
        return self._max_offset

    def decode_copied(self, physical_offsets, sizes):
        return self.decode_columns(physical_offsets)

    def first_queue_offset(self) -> int:
        """The QUEUEOFFSET of the first record, as the broker reads it (``getMinOffsetFromFile``); -1
        when fewer than :data:`FIRST_RECORD_HEAD` bytes are committed."""
        if not self._files or self._limits[0] < FIRST_RECORD_HEAD:
            return -1
        head = bytes(self._map(0)[fmt.RECORD_OFFSETS_POSITION:FIRST_RECORD_HEAD])
        return int.from_bytes(head, "big", signed=True)

    def messages(self, *, verify_crc: bool | str = False, strict: bool = True):
        raise TypeError("a tier's flat CommitLog is read through its ConsumeQueue (TieredQueue.messages)")


class TieredConsumeQueue(MappedFileQueue):
    """A queue's flat ConsumeQueue in the tier: 20-byte units (the flat CommitLog's offset, the size, the
    tags code) in segments that start at ``queue offset x 20``."""

    def __init__(self, directory: str | os.PathLike, segments: list[tuple[int, str, int]], *,
                 topic: str | None = None, queue_id: int | None = None) -> None:
        self.topic, self.queue_id = topic, queue_id
        self._segments = list(segments)
        self._set_files(directory, "tier ConsumeQueue", fmt.CQ_STORE_UNIT_SIZE)
        self._files = [(base, path) for base, path, _ in self._segments]
        self._starts = np.array([s for s, _ in self._files], dtype=np.int64)
        self.file_size = max((c for _, _, c in self._segments), default=0)

    def __repr__(self) -> str:
        return f"TieredConsumeQueue({self.directory!r}, segments={len(self._files)})"

    def __reduce__(self):
        return _reopen_cq, (self.directory, self._segments, self.topic, self.queue_id)

    def _list_files(self, file_size):
        return list(self._files), self.file_size

    @property
    def min_offset(self) -> int:
        """The first segment's first unit (the flat file's minimum; see :attr:`TieredQueue.min_offset`)."""
        return self._segments[0][0] // fmt.CQ_STORE_UNIT_SIZE if self._segments else 0

    @property
    def max_offset(self) -> int:
        """Just past the last committed unit (``getConsumeQueueCommitOffset``)."""
        if not self._segments:
            return 0
        base, _, committed = self._segments[-1]
        return (base + committed) // fmt.CQ_STORE_UNIT_SIZE

    def refresh(self) -> int:
        return self.max_offset

    def raw_chunks(self, start: int | None = None, count: int | None = None) -> Iterator[tuple[int, memoryview]]:
        """``(first_queue_offset, raw_bytes)`` per segment for queue offsets in range (clamped)."""
        unit = fmt.CQ_STORE_UNIT_SIZE
        lo = self.min_offset if start is None else max(int(start), self.min_offset)
        hi = self.max_offset if count is None else min(self.max_offset, lo + int(count))
        for index, (base, _, committed) in enumerate(self._segments):
            first, stop = base // unit, (base + committed) // unit
            a, b = max(lo, first), min(hi, stop)
            if a < b:
                yield a, self._map(index)[(a - first) * unit:(b - first) * unit]

    def position(self, queue_offset: int) -> tuple[str, int]:
        """``(segment path, byte offset)`` of a queue offset's unit inside the tier's range."""
        byte = int(queue_offset) * fmt.CQ_STORE_UNIT_SIZE
        index = int(np.searchsorted(self._starts, byte, side="right")) - 1
        base, path, _ = self._segments[max(index, 0)]
        return path, byte - base

    def file_position(self, queue_offset: int) -> tuple[str, int]:
        """:meth:`position`, named as :meth:`cq.ConsumeQueue.file_position` is."""
        return self.position(queue_offset)

    def unit(self, queue_offset: int) -> tuple[int, int, int]:
        """``(commit_log_offset, size, tags_code)`` of one unit inside the tier's range."""
        if not self.min_offset <= queue_offset < self.max_offset:
            raise IndexError(f"queue offset {queue_offset} is outside the tier's [{self.min_offset}, {self.max_offset})")
        u = self.read(queue_offset, 1)[0]
        return int(u["commit_log_offset"]), int(u["size"]), int(u["tags_code"])

    def read(self, start: int = 0, count: int | None = None) -> np.ndarray:
        """Units from queue offset ``start`` (clamped), at most ``count``, native order."""
        parts = [np.frombuffer(raw, dtype=fmt.CQ_UNIT_DTYPE) for _, raw in self.raw_chunks(start, count)]
        if not parts:
            return np.zeros(0, dtype=fmt.CQ_UNIT_NATIVE_DTYPE)
        return np.concatenate(parts).astype(fmt.CQ_UNIT_NATIVE_DTYPE)


def _reopen_cq(directory, segments, topic, queue_id):
    return TieredConsumeQueue(directory, segments, topic=topic, queue_id=queue_id)


class TieredQueue:
    """One queue's flat files in the tier, as the broker's ``FlatMessageFile`` reads them.

    Attributes
    ----------
    topic, queue_id, broker : str, int, str
    commit_log : TieredCommitLog
    consume_queue : TieredConsumeQueue
    """

    def __init__(self, tier: Tier, topic: str, queue_id: int, broker: str) -> None:
        self.topic, self.queue_id, self.broker = topic, int(queue_id), broker
        file_path = f"{broker}/{topic}/{int(queue_id)}"
        self.directory = os.path.join(tier.cluster_dir, broker, topic, str(int(queue_id)))
        meta = tier.metadata
        cl_dir = os.path.join(self.directory, SEGMENT_DIRS[COMMIT_LOG_TYPE])
        cq_dir = os.path.join(self.directory, SEGMENT_DIRS[CONSUME_QUEUE_TYPE])
        self.commit_log = TieredCommitLog(cl_dir, _SegmentFiles.list(
            cl_dir, meta.segments(COMMIT_LOG_TYPE, file_path), "CommitLog"))
        self.consume_queue = TieredConsumeQueue(cq_dir, _SegmentFiles.list(
            cq_dir, meta.segments(CONSUME_QUEUE_TYPE, file_path), "ConsumeQueue", fmt.CQ_STORE_UNIT_SIZE),
            topic=topic, queue_id=int(queue_id))

    def __repr__(self) -> str:
        return f"TieredQueue({self.topic!r}, {self.queue_id}, [{self.min_offset}, {self.end_offset}))"

    @property
    def min_offset(self) -> int:
        """The queue's first offset in the tier (``getConsumeQueueMinOffset``): the flat ConsumeQueue's first
        unit, or the flat CommitLog's first record's QUEUEOFFSET when that is later (docs/formats.md#tiered-offsets)."""
        return max(self.consume_queue.min_offset, self.commit_log.first_queue_offset())

    @property
    def end_offset(self) -> int:
        """Just past the last unit the tier committed (``getConsumeQueueCommitOffset``)."""
        return self.consume_queue.max_offset

    def raw_chunks(self, start: int, end: int) -> Iterator[tuple[int, memoryview]]:
        """``(first_queue_offset, raw_units)`` of queue offsets ``[start, end)`` (clamped to the tier's range),
        each unit checked: its record lies inside the flat CommitLog's committed bytes. A unit that does not
        is a :class:`cq.StoreFormatError` naming the ConsumeQueue segment and the unit's byte offset: inside
        the tier's range every record was committed before its unit (docs/formats.md#tiered-segments)."""
        lo = max(int(start), self.min_offset)
        log = self.commit_log
        for first, raw in self.consume_queue.raw_chunks(lo, max(0, int(end) - lo)):
            units = np.frombuffer(raw, dtype=fmt.CQ_UNIT_DTYPE)
            offs = units["commit_log_offset"].astype(np.int64)
            sizes = units["size"].astype(np.int64)
            bad = np.flatnonzero((sizes <= 0) | (offs < log.min_offset) | (offs > log.max_offset - sizes))
            if len(bad):
                q = first + int(bad[0])
                path, pos = self.consume_queue.position(q)
                raise StoreFormatError(
                    f"tier ConsumeQueue unit of queue offset {q} points at flat CommitLog bytes "
                    f"[{int(offs[bad[0]])}, +{int(sizes[bad[0]])}), outside its committed "
                    f"[{log.min_offset}, {log.max_offset})", path, pos)
            yield first, raw

    def units(self, start: int, end: int) -> np.ndarray:
        """The checked units (:meth:`raw_chunks`) of queue offsets ``[start, end)``, native order."""
        parts = [np.frombuffer(raw, dtype=fmt.CQ_UNIT_DTYPE) for _, raw in self.raw_chunks(start, end)]
        if not parts:
            return np.zeros(0, dtype=fmt.CQ_UNIT_NATIVE_DTYPE)
        return np.concatenate(parts).astype(fmt.CQ_UNIT_NATIVE_DTYPE)

    def messages(self, start: int | None = None, end: int | None = None) -> list:
        """The records of queue offsets ``[start, end)`` (default: the tier's range), as :class:`cq.Message`."""
        lo = self.min_offset if start is None else start
        hi = self.end_offset if end is None else end
        units = self.units(lo, hi)
        return self.commit_log.read_messages(units["commit_log_offset"])

    def close(self) -> None:
        """Release the mapped segments."""
        self.commit_log.close()
        self.consume_queue.close()


class Tier:
    """A tier directory (``tieredStoreFilePath``) of the POSIX back end, read with the local store's metadata.

    Parameters
    ----------
    store_root : str or os.PathLike
        The local store (its ``config/tieredStoreMetadata.json`` lists the segments).
    path : str or os.PathLike
        The tier directory: it holds ``{md5(cluster)[:8]}_{cluster}/`` (docs/formats.md#tiered-storage).

    Raises
    ------
    TieredStoreError
        The directory is missing, holds no cluster directory with the metadata's broker, or more than one.
    """

    def __init__(self, store_root: str | os.PathLike, path: str | os.PathLike) -> None:
        self.store_root = os.fspath(store_root)
        self.path = os.fspath(path)
        self.metadata = TieredMetadata(self.store_root)
        self.cluster_dir = self._find_cluster_dir()
        self.cluster = os.path.basename(self.cluster_dir).partition("_")[2]
        self._queues: dict[tuple[str, int], TieredQueue] = {}
        self._lock = threading.Lock()

    def __reduce__(self):
        return Tier, (self.store_root, self.path)

    def __repr__(self) -> str:
        return f"Tier({self.path!r}, cluster={self.cluster!r})"

    def _find_cluster_dir(self) -> str:
        if not os.path.isdir(self.path):
            raise TieredStoreError("the tier directory (tieredStoreFilePath) does not exist or is not a directory",
                                   self.path)
        brokers = set(self.metadata.queues.values())
        found = []
        for name in sorted(os.listdir(self.path)):
            digest, sep, cluster = name.partition("_")
            d = os.path.join(self.path, name)
            ours = sep and cluster and digest == tier_hash(cluster) and os.path.isdir(d)
            if ours and (not brokers or any(os.path.isdir(os.path.join(d, b)) for b in brokers)):
                found.append(d)
        if len(found) != 1:
            what = "no" if not found else f"{len(found)}"
            raise TieredStoreError(
                f"{what} cluster directory ({{md5(cluster)[:8]}}_{{cluster}}) holding broker "
                f"{', '.join(sorted(brokers)) or '(none listed)'} of {self.metadata.path} in the tier directory",
                self.path)
        return found[0]

    def queues(self) -> list[tuple[str, int]]:
        """The (topic, queue id) the metadata lists, sorted."""
        return sorted(self.metadata.queues)

    def queue(self, topic: str, queue_id: int) -> TieredQueue | None:
        """The flat files of a queue (opened once, kept until :meth:`close`), or None when the tier has none
        for it."""
        key = (topic, int(queue_id))
        broker = self.metadata.queues.get(key)
        if broker is None:
            return None
        with self._lock:
            queue = self._queues.get(key)
            if queue is None:
                queue = self._queues[key] = TieredQueue(self, topic, int(queue_id), broker)
        return queue

    def refresh(self) -> None:
        """Follow the broker (docs/live.md): read the metadata again and forget the queues opened (their
        segment lists and committed ends were read when they were opened); each is opened again on next use."""
        with self._lock:
            self.metadata = TieredMetadata(self.store_root)
            for queue in self._queues.values():
                queue.close()
            self._queues.clear()

    def close(self) -> None:
        """Release every queue's mapped segments."""
        with self._lock:
            for queue in self._queues.values():
                queue.close()

    def files(self) -> list[str]:
        """Every segment file the metadata lists (CommitLog and ConsumeQueue), with the metadata file."""
        out = [self.metadata.path]
        for (topic, q), broker in sorted(self.metadata.queues.items()):
            for kind in (COMMIT_LOG_TYPE, CONSUME_QUEUE_TYPE):
                d = os.path.join(self.cluster_dir, broker, topic, str(q), SEGMENT_DIRS[kind])
                out += [os.path.join(d, tier_file_name(s.base_offset))
                        for s in self.metadata.segments(kind, f"{broker}/{topic}/{q}")]
        return out


#: Where a test store of ``tests/data`` keeps its tier (the harness copies it beside the store).
TEST_TIER_DIR = "tier"


def _open_test_tier(root: str) -> Tier:
    return Tier(root, os.path.join(root, TEST_TIER_DIR))


def _read_tier(tier: Tier) -> list:
    out = []
    for topic, q in tier.queues():
        queue = tier.queue(topic, q)
        units = queue.units(queue.min_offset, queue.end_offset)
        msgs = queue.commit_log.read_messages(units["commit_log_offset"])
        out.append((topic, q, queue.min_offset, queue.end_offset, units.tolist(),
                    [(m.queue_offset, m.commit_log_offset, m.properties, m.body) for m in msgs]))
    return out


# This reader's registry entry (docs/contributing.md#add-a-reader).
READERS = (
    ReaderEntry("Tier", _open_test_tier, lambda root: _open_test_tier(root).files()[1:], _read_tier,
                store="tiered_store"),
)
