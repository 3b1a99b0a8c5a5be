"""The broker's IndexFile (``{store}/index/{yyyyMMddHHmmssSSS}``): find messages by key.

The facts this module relies on are in ``docs/config-and-index.md``. In short:

* ``IndexService`` writes, for every message that is not a transaction rollback, one entry
  for ``"{topic}#{UNIQ_KEY}"`` and one for ``"{topic}#{key}"`` per key of ``KEYS`` (split on
  single spaces, empty keys skipped).
* A file is a 40-byte header (``beginTimestamp``, ``endTimestamp``, ``beginPhyOffset``,
  ``endPhyOffset`` i64; ``hashSlotCount``, ``indexCount`` i32), ``hashSlotNum`` i32 slots,
  then ``indexNum`` 20-byte entries (``keyHash`` i32, ``phyOffset`` i64, ``timeDiff`` i32
  seconds from ``beginTimestamp``, ``prevIndex`` i32), all big-endian. ``indexCount`` starts
  at 1: entry 0 is never used and index 0 means "none".
* ``keyHash = abs(String.hashCode(key))`` (``Integer.MIN_VALUE`` becomes 0); the slot is
  ``keyHash % hashSlotNum`` and holds the newest entry of its chain; entries link to older
  ones through ``prevIndex``.
* Lookup walks the chain from the slot, collects the ``phyOffset`` of entries whose hash
  equals the key's and whose time is inside the asked range, and stops at ``prevIndex`` 0,
  out of range or equal to the current index, or at an entry older than the range. Files
  are searched newest first. A hash match is only a candidate: the record at ``phyOffset``
  is read and its real key compared (:meth:`IndexFiles.find`).

``hashSlotNum`` and ``indexNum`` are broker settings, not stored in the file: the broker's
defaults (5,000,000 and 20,000,000) are used when the file size fits them, else the slot
count is inferred from the file's own consistency (every slot's head entry and every chain
link hash to that slot), or given by the caller.
"""
from __future__ import annotations

import os
import struct
import threading
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np

from .. import format as fmt
from ..errors import StoreFormatError
from .entry import ReaderEntry

__all__ = [
    "DEFAULT_INDEX_NUM",
    "DEFAULT_MAX_HASH_SLOT_NUM",
    "INDEX_DIR",
    "IndexFile",
    "IndexFiles",
    "IndexHeader",
    "index_key",
    "index_key_hash",
]

INDEX_DIR = "index"
#: ``IndexHeader.INDEX_HEADER_SIZE``.
INDEX_HEADER_SIZE = 40
#: ``hashSlotSize``.
HASH_SLOT_SIZE = 4
#: ``indexSize``: one entry.
INDEX_ENTRY_SIZE = 20
#: ``invalidIndex``: "no entry".
INVALID_INDEX = 0
#: ``maxHashSlotNum`` / ``maxIndexNum`` defaults of ``MessageStoreConfig``.
DEFAULT_MAX_HASH_SLOT_NUM = 5_000_000
DEFAULT_INDEX_NUM = 5_000_000 * 4
#: ``Long.MAX_VALUE``: the open end of a time range.
MAX_TIME = 2**63 - 1
#: The key joining topic and key in the index (``IndexService.buildKey``).
INDEX_KEY_SEPARATOR = "#"

#: maxIndexNum / maxHashSlotNum ratios tried first when inferring a file's geometry.
_USUAL_RATIOS = (4, 8, 2, 1, 16, 5, 10, 3, 6, 32)
#: Files up to this size may be searched for any slot count (each try reads the slots).
_SEARCH_LIMIT = 1 << 20

_HEADER = struct.Struct(">qqqqii")
_ENTRY_DTYPE = np.dtype([("key_hash", ">i4"), ("phy_offset", ">i8"), ("time_diff", ">i4"), ("prev_index", ">i4")])


def index_key(topic: str, key: str) -> str:
    """``"{topic}#{key}"``: what the broker hashes into the index."""
    return f"{topic}{INDEX_KEY_SEPARATOR}{key}"


def index_key_hash(key: str) -> int:
    """``abs(key.hashCode())``, with ``Math.abs(Integer.MIN_VALUE)`` (still negative) made 0."""
    h = abs(fmt.java_string_hash(key))
    return 0 if h > 0x7FFFFFFF else h


@dataclass(frozen=True)
class IndexHeader:
    """The 40-byte header of an IndexFile."""

    begin_timestamp: int
    end_timestamp: int
    begin_phy_offset: int
    end_phy_offset: int
    hash_slot_count: int
    index_count: int


#: Slot counts inferred lately (:meth:`IndexFile._inferred_slots`), oldest first.
_SLOTS: dict[tuple, int] = {}
_SLOTS_MAX = 256
_SLOTS_LOCK = threading.Lock()


class IndexFile:
    """One IndexFile, mapped read-only.

    Parameters
    ----------
    path : str or os.PathLike
        The file.
    hash_slot_num, index_num : int, optional
        ``maxHashSlotNum`` / ``maxIndexNum`` of the broker that wrote it; inferred when not
        given (see the module docstring).

    Raises
    ------
    StoreFormatError
        The file is shorter than its header, or its geometry cannot be determined.
    """

    def __init__(self, path: str | os.PathLike, *, hash_slot_num: int | None = None,
                 index_num: int | None = None) -> None:
        self.path = os.fspath(path)
        self._buf = fmt.map_file(self.path)
        size = len(self._buf)
        if size < INDEX_HEADER_SIZE:
            raise StoreFormatError(f"IndexFile of {size} bytes is shorter than its {INDEX_HEADER_SIZE}-byte header",
                                   self.path, 0)
        self.header = IndexHeader(*_HEADER.unpack_from(self._buf, 0))
        if hash_slot_num is None:
            hash_slot_num = self._inferred_slots(size)
        if index_num is None:
            index_num = (size - INDEX_HEADER_SIZE - hash_slot_num * HASH_SLOT_SIZE) // INDEX_ENTRY_SIZE
        if hash_slot_num < 1 or index_num < 1 or \
                INDEX_HEADER_SIZE + hash_slot_num * HASH_SLOT_SIZE + index_num * INDEX_ENTRY_SIZE > size:
            raise StoreFormatError(
                f"IndexFile of {size} bytes cannot hold {hash_slot_num} slots and {index_num} entries", self.path, 0)
        self.hash_slot_num = hash_slot_num
        self.index_num = index_num
        self._entries_at = INDEX_HEADER_SIZE + hash_slot_num * HASH_SLOT_SIZE

    def __repr__(self) -> str:
        return f"IndexFile({self.path!r}, slots={self.hash_slot_num}, entries={self.index_num})"

    def close(self) -> None:
        """Release the map."""
        fmt.release_maps({0: self._buf})

    # ------------------------------------------------------------ geometry
    def _consistent(self, slots: int, count: int) -> bool:
        """Whether the file reads sensibly with ``slots`` hash slots (entries 1 .. count-1)."""
        size = len(self._buf)
        entries_at = INDEX_HEADER_SIZE + slots * HASH_SLOT_SIZE
        if entries_at + count * INDEX_ENTRY_SIZE > size:
            return False
        heads = np.frombuffer(self._buf, dtype=">i4", count=slots, offset=INDEX_HEADER_SIZE).astype(np.int64)
        if ((heads < 0) | (heads >= count)).any():
            return False
        entries = np.frombuffer(self._buf, dtype=_ENTRY_DTYPE, count=count, offset=entries_at)[1:]
        key_hash = entries["key_hash"].astype(np.int64)
        prev = entries["prev_index"].astype(np.int64)
        own = np.arange(1, count, dtype=np.int64)
        if ((key_hash < 0) | (prev < 0) | (prev >= own)).any():
            return False
        slot_of = key_hash % slots
        linked = prev > 0
        if (slot_of[prev[linked] - 1] != slot_of[linked]).any():
            return False
        used = np.flatnonzero(heads)
        if not (slot_of[heads[used] - 1] == used).all():
            return False
        # every entry written is, exactly once, either its slot's head or a newer entry's prevIndex
        targets = np.concatenate([heads[used], prev[linked]])
        return len(targets) == count - 1 and len(np.unique(targets)) == count - 1

    def _inferred_slots(self, size: int) -> int:
        """:meth:`_infer_slots`, reused for the same file (device, inode, size) with the same header: a
        file's geometry is fixed when the broker creates it, and a header that moved (entries added) is
        inferred again from what it now holds. ``why`` opens the IndexFiles once per message."""
        st = os.stat(self.path)
        key = (self.path, st.st_dev, st.st_ino, size, bytes(self._buf[:INDEX_HEADER_SIZE]))
        with _SLOTS_LOCK:
            slots = _SLOTS.get(key)
        if slots is None:
            slots = self._infer_slots(size)
            with _SLOTS_LOCK:
                _SLOTS[key] = slots
                while len(_SLOTS) > _SLOTS_MAX:
                    _SLOTS.pop(next(iter(_SLOTS)))
        return slots

    def _infer_slots(self, size: int) -> int:
        count = max(1, min(self.header.index_count, (size - INDEX_HEADER_SIZE) // INDEX_ENTRY_SIZE))
        if size == INDEX_HEADER_SIZE + DEFAULT_MAX_HASH_SLOT_NUM * HASH_SLOT_SIZE + DEFAULT_INDEX_NUM * INDEX_ENTRY_SIZE:
            return DEFAULT_MAX_HASH_SLOT_NUM
        body = size - INDEX_HEADER_SIZE

        def fits(slots: int) -> bool:
            rest = body - slots * HASH_SLOT_SIZE
            return slots >= 1 and rest >= 0 and rest % INDEX_ENTRY_SIZE == 0 and rest // INDEX_ENTRY_SIZE >= count

        # first the usual shapes: maxIndexNum a small multiple of maxHashSlotNum (the broker's
        # defaults are 4x, the golden store's 8x); then, for files small enough, every slot count
        for ratio in _USUAL_RATIOS:
            slots, rest = divmod(body, HASH_SLOT_SIZE + ratio * INDEX_ENTRY_SIZE)
            if rest == 0 and fits(slots) and self._consistent(slots, count):
                return slots
        if size <= _SEARCH_LIMIT:
            for slots in range(1, body // HASH_SLOT_SIZE + 1):
                if fits(slots) and self._consistent(slots, count):
                    return slots
        raise StoreFormatError("cannot tell this IndexFile's hashSlotNum from its contents; give hash_slot_num "
                               "(the broker's maxHashSlotNum)", self.path, 0)

    # ------------------------------------------------------------ reading
    def slot(self, key_hash: int) -> int:
        """The head index of the slot ``key_hash`` falls in (0: empty)."""
        pos = INDEX_HEADER_SIZE + (key_hash % self.hash_slot_num) * HASH_SLOT_SIZE
        return int.from_bytes(self._buf[pos:pos + 4], "big", signed=True)

    def entry(self, index: int) -> tuple[int, int, int, int]:
        """``(key_hash, phy_offset, time_diff, prev_index)`` of entry ``index``."""
        pos = self._entries_at + index * INDEX_ENTRY_SIZE
        if not 0 <= index or pos + INDEX_ENTRY_SIZE > len(self._buf):
            raise IndexError(f"entry {index} is outside {self.path}")
        rec = np.frombuffer(self._buf, dtype=_ENTRY_DTYPE, count=1, offset=pos)[0]
        return int(rec["key_hash"]), int(rec["phy_offset"]), int(rec["time_diff"]), int(rec["prev_index"])

    def entries(self) -> Iterator[tuple[int, int, int, int, int]]:
        """``(index, key_hash, phy_offset, time_diff, prev_index)`` of every entry written."""
        count = min(self.header.index_count, self.index_num)
        if count <= 1:
            return
        recs = np.frombuffer(self._buf, dtype=_ENTRY_DTYPE, count=count, offset=self._entries_at)
        for i in range(1, count):
            r = recs[i]
            yield i, int(r["key_hash"]), int(r["phy_offset"]), int(r["time_diff"]), int(r["prev_index"])

    def time_matched(self, begin: int, end: int) -> bool:
        """``isTimeMatched``: the file's ``[beginTimestamp, endTimestamp]`` overlaps ``[begin, end]``."""
        b, e = self.header.begin_timestamp, self.header.end_timestamp
        return (begin < b and end > e) or b <= begin <= e or b <= end <= e

    def select_phy_offsets(self, key: str, begin: int = 0, end: int = MAX_TIME,
                           max_num: int | None = None) -> list[int]:
        """``selectPhyOffset``: CommitLog offsets of entries whose hash is ``key``'s, newest first.

        ``key`` is the full index key (``"{topic}#{key}"``). Only hash matches: read the
        records to confirm.
        """
        key_hash = index_key_hash(key)
        count = self.header.index_count
        index = self.slot(key_hash)
        out: list[int] = []
        if index <= INVALID_INDEX or index > count or count <= 1:
            return out
        begin_ts = self.header.begin_timestamp
        for _ in range(min(count, self.index_num) + 1):  # a chain visits each entry at most once
            if max_num is not None and len(out) >= max_num:
                break
            # the broker bounds the index by the header alone; a full file's count points past its end
            if index * INDEX_ENTRY_SIZE + self._entries_at + INDEX_ENTRY_SIZE > len(self._buf):
                break
            hash_read, phy, time_diff, prev = self.entry(index)
            if time_diff < 0:
                break
            time_read = begin_ts + time_diff * 1000
            if hash_read == key_hash and begin <= time_read <= end:
                out.append(phy)
            if prev <= INVALID_INDEX or prev > count or prev == index or time_read < begin:
                break
            index = prev
        return out


class IndexFiles:
    """Every IndexFile of a store (``IndexService``), newest first when searching.

    Parameters
    ----------
    root : str or os.PathLike
        The store root (``{root}/index/`` holds the files).
    hash_slot_num, index_num : int, optional
        The broker's ``maxHashSlotNum`` / ``maxIndexNum``; inferred per file when not given.
    """

    def __init__(self, root: str | os.PathLike, *, hash_slot_num: int | None = None,
                 index_num: int | None = None) -> None:
        self.root = os.fspath(root)
        self._options = {"hash_slot_num": hash_slot_num, "index_num": index_num}
        self.directory = os.path.join(self.root, INDEX_DIR)
        names = sorted(n for n in os.listdir(self.directory) if n.isdigit()) \
            if os.path.isdir(self.directory) else []
        self.files: list[IndexFile] = [
            IndexFile(os.path.join(self.directory, n), hash_slot_num=hash_slot_num, index_num=index_num)
            for n in names if os.path.getsize(os.path.join(self.directory, n)) > 0
        ]

    def __len__(self) -> int:
        return len(self.files)

    def __repr__(self) -> str:
        return f"IndexFiles({self.root!r}, files={len(self.files)})"

    def __getstate__(self) -> tuple[str, dict]:
        """Pickle as the store root and options (maps are per process), like the other readers."""
        return self.root, self._options

    def __setstate__(self, state: tuple[str, dict]) -> None:
        root, options = state
        self.__init__(root, **options)

    def close(self) -> None:
        """Release every map."""
        for f in self.files:
            f.close()

    def query(self, topic: str, key: str, begin: int = 0, end: int = MAX_TIME,
              max_num: int | None = None) -> list[int]:
        """``queryOffset``: candidate CommitLog offsets for ``key`` of ``topic``, newest file first.

        Hash matches only (deduplicated, order kept): compare the real key of each record.
        """
        full = index_key(topic, key)
        out: list[int] = []
        seen: set[int] = set()
        for f in reversed(self.files):
            if f.time_matched(begin, end):
                for phy in f.select_phy_offsets(full, begin, end, max_num):
                    if phy not in seen:
                        seen.add(phy)
                        out.append(phy)
            if f.header.begin_timestamp < begin:
                break
        return out


def _index_files(root: str) -> list[str]:
    directory = os.path.join(root, INDEX_DIR)
    return [os.path.join(directory, n) for n in sorted(os.listdir(directory)) if n.isdigit()]


# This reader's registry entry (docs/contributing.md#add-a-reader).
READERS = (
    ReaderEntry(
        "IndexFiles",
        IndexFiles,
        _index_files,
        lambda index: [list(f.entries()) for f in index.files],
    ),
)
