"""Consume queues and metadata a broker keeps in RocksDB (``storeType=defaultRocksDB``, 5.2+).

docs/formats.md#rocksdb-consume-queue has the layout, as RocketMQ 5.3.3 writes it, and
docs/formats.md#rocksdb-metadata-v2 that of config v2's ``config/rdb`` (every metadata table in one
database). The databases are opened read-only through ``rocksdict`` (the ``rmqfilter[rocksdb]``
extra), from links to their files (:class:`_ReadOnlyDatabase`: nothing is written to the store): RocksDB's read-only
mode takes no lock, so a running broker keeps its database, and it sees the database as of the open (the write-ahead log replayed into memory, nothing written back). One open is one
consistent cut of every queue's units and ends; a queue reader reopens it to follow the broker.

The binding gives one Python ``bytes`` per unit (it has no bulk read); the units are turned into
the 20-byte ConsumeQueue units every other reader takes as one array per queue.
"""
from __future__ import annotations

import json
import os
import re
import shutil
import struct
import tempfile
import weakref
from collections.abc import Callable, Iterator

import numpy as np

from .. import format as fmt
from ..errors import StoreFormatError, UnsupportedLayoutError
from .config import CONFIG_DIR, parse_fastjson
from .consumequeue import ConsumeQueue
from .entry import ReaderEntry

__all__ = [
    "EXTRA",
    "RocksDBConsumeQueue",
    "RocksDBMetadataV2",
    "RocksDBQueueTable",
    "families_with_data",
    "is_v2",
    "metadata_table",
    "offset_table",
    "pull_offset_table",
    "read_metadata_table",
    "require_binding",
]

#: What to install for these readers.
EXTRA = "rmqfilter[rocksdb]"
#: The temporary directories of links a database is opened through (then the process id).
LINKS_PREFIX = "rmqfilter-rocksdb-"
_I32 = struct.Struct(">i")
#: A file and a byte offset in RocksDB's error messages ("... in /dir/000011.sst offset 0 size 2018").
_NAMED_FILE = re.compile(r"/([0-9A-Za-z_.-]+\.(?:sst|log|ldb)|MANIFEST-\d+|CURRENT|OPTIONS-\d+)\b")
_NAMED_OFFSET = re.compile(r"\boffset (\d+)")
_I64 = struct.Struct(">q")
#: Files of a database directory never linked: the lock, and the settings file the binding writes
#: where it opens a database (one another program left there would be written through its link).
_NOT_LINKED = frozenset({"LOCK", "rocksdict-config.json"})


def require_binding(layout: str, path: str):
    """The ``rocksdict`` module; :class:`UnsupportedLayoutError` naming the extra when it is missing."""
    try:
        import rocksdict
    except ImportError as exc:
        raise UnsupportedLayoutError(layout, path, f"install the RocksDB reader: pip install '{EXTRA}' "
                                                   f"(the rocksdict package): {exc}") from exc
    return rocksdict


class _ReadOnlyDatabase:
    """A RocksDB database opened read-only from a directory of links to its files.

    The binding writes a ``rocksdict-config.json`` into the directory it opens, even read-only, and
    RocksDB may write its info log there: opened through links in a temporary directory, the
    store's own directory is never written. The links live until :meth:`close` (RocksDB opens the
    table files when it first reads them). A file the broker's compaction deletes between the
    listing and the open is found again by a second listing.
    """

    def __init__(self, path: str, layout: str) -> None:
        rocksdict = require_binding(layout, path)
        self.path = path
        error: Exception | None = None
        for _ in range(3):
            self._links = tempfile.mkdtemp(prefix=f"{LINKS_PREFIX}{os.getpid()}-")
            try:
                for name in os.listdir(path):
                    if name not in _NOT_LINKED and os.path.isfile(os.path.join(path, name)):
                        os.symlink(os.path.abspath(os.path.join(path, name)), os.path.join(self._links, name))
                families = rocksdict.Rdict.list_cf(self._links)
                self.families = tuple(families)
                self.db = rocksdict.Rdict(
                    self._links, options=rocksdict.Options(raw_mode=True),
                    access_type=rocksdict.AccessType.read_only(),
                    column_families={f: rocksdict.Options(raw_mode=True) for f in families if f != "default"})
                # the links go when the database is closed, or collected unclosed (a Store keeps one open)
                self._remove_links = weakref.finalize(self, shutil.rmtree, self._links, True)
                return
            except Exception as exc:  # noqa: BLE001 (the binding raises plain Exception for RocksDB's errors)
                error = self.error(exc, "not a readable RocksDB database")
                shutil.rmtree(self._links, ignore_errors=True)
        raise error

    def error(self, exc: Exception, what: str) -> StoreFormatError:
        """RocksDB's error ``exc`` as a :class:`StoreFormatError`: the store file it names (RocksDB
        names the links) and the byte offset it gives, else the database directory and offset 0."""
        text = str(exc).replace(self._links, self.path)
        named = _NAMED_FILE.search(text)
        path = os.path.join(self.path, named.group(1)) if named else self.path
        at = _NAMED_OFFSET.search(text)
        return StoreFormatError(f"{what} ({text})", path, int(at.group(1)) if at else 0)

    def items(self, family=None, what: str = "reading the database", **kwargs) -> Iterator[tuple[bytes, bytes]]:
        """``(key, value)`` of the default column family (or ``family``) in key order; RocksDB's
        errors on the way (a corrupt block) as :meth:`error`."""
        source = self.db if family is None else family
        try:
            yield from source.items(**kwargs)
        except Exception as exc:  # the binding raises plain Exception for RocksDB's errors
            raise self.error(exc, what) from exc

    def file_of(self, key: bytes) -> str:
        """The store path of the table file whose key range holds ``key`` (where a bad record
        lies); the database directory when none does (a record missing between two files)."""
        try:
            files = self.db.live_files()
        except Exception:  # noqa: BLE001 (the binding raises plain Exception; the directory still names the database)
            return self.path
        for meta in files:
            if meta["start_key"] <= key <= meta["end_key"]:
                return os.path.join(self.path, os.path.basename(meta["name"]))
        return self.path

    def close(self) -> None:
        self.db.close()
        self._remove_links()


def _queue_prefix(topic: str, queue_id: int) -> bytes:
    name = topic.encode()
    sep = fmt.ROCKSDB_CQ_SEPARATOR
    return _I32.pack(len(name)) + sep + name + sep + _I32.pack(queue_id) + sep


def _split_offset_key(key: bytes, path: str) -> tuple[str, bytes, int]:
    """``(topic, b"min" | b"max", queue id)`` of an ``offset`` family key."""
    sep = fmt.ROCKSDB_CQ_SEPARATOR
    if len(key) < 5:
        raise StoreFormatError(f"offset key {key!r} shorter than its topic length and separator", path)
    n = _I32.unpack_from(key)[0]
    if n < 0 or len(key) < 4 + 1 + n + 1 + 3 or key[4:5] != sep or key[5 + n:6 + n] != sep:
        raise StoreFormatError(f"offset key {key!r} is not topicLen, 0x01, topic, 0x01, ...", path)
    rest = key[6 + n:]
    topic = key[5:5 + n].decode("utf-8", "replace")
    if len(rest) == 3 + 1 + 4 and rest[3:4] == sep:
        return topic, rest[:3], _I32.unpack_from(rest, 4)[0]
    return topic, b"", -1  # another record of the family (the dispatch checkpoint)


class RocksDBQueueTable:
    """The ``consumequeue/`` database of one store, opened read-only: each queue's ends and units.

    Parameters
    ----------
    directory : str
        ``{storeRoot}/consumequeue`` (it holds ``CURRENT`` and ``*.sst`` files).
    """

    def __init__(self, directory: str | os.PathLike) -> None:
        self.directory = os.fspath(directory)
        self._opened = _ReadOnlyDatabase(self.directory, "RocksDB consume queue (storeType=defaultRocksDB)")
        self._db = self._opened.db
        self._ends: dict[tuple[str, int], tuple[int, int]] | None = None
        self._queues: list[tuple[str, int]] | None = None

    @property
    def ends(self) -> dict[tuple[str, int], tuple[int, int]]:
        """Every queue: (topic, queue) -> ``(min_offset, max_offset)``, max one past the highest unit."""
        if self._ends is None:
            self._ends = self._read_ends()
        return self._ends

    def ends_of(self, topic: str) -> dict[tuple[str, int], tuple[int, int]]:
        """:attr:`ends` of ``topic``'s queues alone, reading only their records (a queue reader
        needs no other topic's)."""
        if self._ends is not None:
            return {key: v for key, v in self._ends.items() if key[0] == topic}
        name = topic.encode()
        return self._read_ends(_I32.pack(len(name)) + fmt.ROCKSDB_CQ_SEPARATOR + name + fmt.ROCKSDB_CQ_SEPARATOR)

    def _read_ends(self, prefix: bytes = b"") -> dict[tuple[str, int], tuple[int, int]]:
        """(topic, queue) -> ``(min_offset, max_offset)`` of the ``offset`` records whose keys start
        with ``prefix``: max is one past the highest unit."""
        try:
            family = self._db.get_column_family(fmt.ROCKSDB_CQ_OFFSET_FAMILY)
        except Exception as exc:  # the binding raises plain Exception for RocksDB's errors
            raise self._opened.error(exc, f"no {fmt.ROCKSDB_CQ_OFFSET_FAMILY!r} column family: not a RocketMQ "
                                          "consume queue database") from exc
        lows: dict[tuple[str, int], int] = {}
        highs: dict[tuple[str, int], int] = {}
        for key, value in self._opened.items(family, "reading the queues' ends", from_key=prefix):
            if not key.startswith(prefix):
                break
            topic, kind, queue_id = _split_offset_key(key, self.directory)
            if not kind or topic == fmt.ROCKSDB_CQ_CHECKPOINT_TOPIC:
                continue
            if len(value) != fmt.ROCKSDB_CQ_OFFSET_VALUE_SIZE:
                raise StoreFormatError(f"offset value of {topic}/{queue_id} ({kind.decode()}) holds "
                                       f"{len(value)} bytes, not {fmt.ROCKSDB_CQ_OFFSET_VALUE_SIZE}", self.directory)
            commit_log_offset, queue_offset = struct.unpack(">qq", value)
            if kind == fmt.ROCKSDB_CQ_MAX:
                highs[topic, queue_id] = queue_offset + 1
            elif kind == fmt.ROCKSDB_CQ_MIN and commit_log_offset >= 0:  # -1: no unit yet
                lows[topic, queue_id] = queue_offset
        # no min record: the queue starts at unit 0 (docs/formats.md#rocksdb-no-min)
        return {key: (min(lows.get(key, 0), high), high) for key, high in highs.items()}

    def close(self) -> None:
        self._opened.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    @property
    def queues(self) -> list[tuple[str, int]]:
        """Every queue, ``(topic, queue id)``, sorted (read once: the database is opened read-only)."""
        if self._queues is None:
            self._queues = sorted(self.ends)
        return self._queues

    def topics(self) -> list[str]:
        return sorted({topic for topic, _ in self.ends})

    def queue_ids(self, topic: str) -> list[int]:
        return sorted(q for t, q in self.ends if t == topic)

    def units(self, topic: str, queue_id: int) -> tuple[int, np.ndarray]:
        """The queue's minimum offset and its units from there to its maximum,
        :data:`cq.format.ROCKSDB_CQ_VALUE_DTYPE`.

        Raises :class:`StoreFormatError` naming the queue offset where a unit is missing or
        malformed below the queue's recorded maximum.
        """
        low, high = self.ends_of(topic).get((topic, queue_id), (0, 0))
        prefix = _queue_prefix(topic, queue_id)
        values = []

        def bad(offset: int, what: str) -> StoreFormatError:
            path = self._opened.file_of(prefix + _I64.pack(offset))
            return StoreFormatError(f"{topic}/{queue_id}: {what} (RocksDB key {(prefix + _I64.pack(offset)).hex()}; "
                                    "the byte offset inside the table file is RocksDB's own)", path, 0)

        for key, value in self._opened.items(None, f"reading the units of {topic}/{queue_id}",
                                             from_key=prefix + _I64.pack(low)):
            if not key.startswith(prefix) or len(key) != len(prefix) + 8:
                break
            offset = _I64.unpack_from(key, len(prefix))[0]
            if offset >= high:
                break
            if offset != low + len(values):
                raise bad(low + len(values), f"unit of queue offset {low + len(values)} missing (next key holds "
                                             f"{offset}) below the queue's maximum {high}")
            if len(value) != fmt.ROCKSDB_CQ_VALUE_DTYPE.itemsize:
                raise bad(offset, f"unit of queue offset {offset} holds {len(value)} bytes, not "
                                  f"{fmt.ROCKSDB_CQ_VALUE_DTYPE.itemsize}")
            values.append(value)
        if len(values) != high - low:
            raise bad(low + len(values), f"units end at queue offset {low + len(values)}, below the queue's "
                                         f"maximum {high}")
        return low, np.frombuffer(b"".join(values), dtype=fmt.ROCKSDB_CQ_VALUE_DTYPE)

    def last_unit(self, topic: str, queue_id: int) -> tuple[int, int] | None:
        """``(commit_log_offset, size)`` of the queue's highest unit, read alone (one key); None for a queue
        with no unit. What the dispatch frontier takes of each queue (docs/object-storage.md#costs)."""
        low, high = self.ends_of(topic).get((topic, queue_id), (0, 0))
        if high <= low:
            return None
        key = _queue_prefix(topic, queue_id) + _I64.pack(high - 1)
        for found, value in self._opened.items(None, f"reading the last unit of {topic}/{queue_id}", from_key=key):
            if found != key or len(value) != fmt.ROCKSDB_CQ_VALUE_DTYPE.itemsize:
                break
            unit = np.frombuffer(value, dtype=fmt.ROCKSDB_CQ_VALUE_DTYPE)[0]
            return int(unit["commit_log_offset"]), int(unit["size"])
        return None  # missing or malformed: a read of the queue names it; the frontier does without


class RocksDBConsumeQueue(ConsumeQueue):
    """One queue of a RocksDB consume queue, read as a :class:`ConsumeQueue` (every reader of the
    store's units takes it): its units held in memory as 20-byte units from its minimum on, one
    cut of the database; :meth:`refresh` opens the database again (docs/live.md).
    """

    def __init__(self, directory: str | os.PathLike, topic: str, queue_id: int,
                 table: RocksDBQueueTable | None = None) -> None:
        self.topic, self.queue_id = topic, int(queue_id)
        self._set_files(directory, "RocksDB consume queue", fmt.CQ_STORE_UNIT_SIZE)  # no files: units in memory
        self._load(table)

    def _load(self, table: RocksDBQueueTable | None) -> None:
        own = table is None
        table = RocksDBQueueTable(self.directory) if own else table
        try:
            low, units = table.units(self.topic, self.queue_id)
        finally:
            if own:
                table.close()
        out = np.zeros(len(units), dtype=fmt.CQ_UNIT_DTYPE)
        for name in fmt.CQ_UNIT_DTYPE.names:
            out[name] = units[name]
        self._max_offset = self._min_offset = low  # the "files" end where the units start
        self._undispatched = out.tobytes()
        self.store_timestamps = units["store_timestamp"].astype(np.int64)

    def __repr__(self) -> str:
        return f"RocksDBConsumeQueue({self.directory!r}, topic={self.topic!r}, queue_id={self.queue_id})"

    def _reopen_kwargs(self) -> dict:
        return {"topic": self.topic, "queue_id": self.queue_id}  # a copy opens the database again

    def _recover(self, from_offset: int | None = None) -> int:
        return self._max_offset

    @property
    def min_offset(self) -> int:
        return self._min_offset

    def refresh(self, table: RocksDBQueueTable | None = None) -> int:
        """Take the queue's units as the broker has them now: from ``table`` (the database open on its
        current files, as a Store keeps it), or from the database opened again."""
        self._load(table)
        return self.max_offset

    def file_position(self, queue_offset: int) -> tuple[str, int]:
        return f"{self.directory} [{self.topic}/{self.queue_id}]", queue_offset


def read_metadata_table(directory: str | os.PathLike, table: str) -> dict[str, dict]:
    """A metadata table kept in RocksDB (``config/consumerOffsets``, ``subscriptionGroups``,
    ``topics``): key -> its JSON value. Raises :class:`StoreFormatError` naming the database and
    the key whose value is not a JSON object."""
    path = os.fspath(directory)
    opened = _ReadOnlyDatabase(path, f"RocksDB metadata ({table})")
    try:
        out = {}
        for key, value in opened.items(None, f"reading the {table} table"):
            name = key.decode("utf-8", "replace")
            try:
                parsed = json.loads(value)
            except (ValueError, UnicodeDecodeError) as exc:
                raise StoreFormatError(f"value of key {name!r} is not JSON ({exc})", path) from exc
            if not isinstance(parsed, dict):
                raise StoreFormatError(f"value of key {name!r} is not a JSON object", path)
            out[name] = parsed
        return out
    finally:
        opened.close()


def offset_table(directory: str | os.PathLike) -> dict[tuple[str, str], dict[int, int]]:
    """``config/consumerOffsets`` (v1; keys ``{topic}@{group}``) or v2's ``config/rdb`` as
    :func:`cq.readers.config.read_offset_table` gives the JSON file: (topic, group) -> {queue id:
    committed offset}. v2 keeps the LMQ queues' offsets in the same table (queue 0)."""
    read = _read_while_unchanged(directory, "consumerOffsets (offsets)", lambda: (
        _v2_offsets(directory, "consumerOffsets") if is_v2(directory) else _v1_offsets(directory)))
    return {k: dict(v) for k, v in read.items()}


def _v1_offsets(directory: str | os.PathLike) -> dict[tuple[str, str], dict[int, int]]:
    out: dict[tuple[str, str], dict[int, int]] = {}
    for key, value in read_metadata_table(directory, "consumerOffsets").items():
        topic, sep, group = key.rpartition(fmt.ROCKSDB_OFFSET_KEY_SEPARATOR)
        table = value.get("offsetTable")
        if not sep or not isinstance(table, dict):
            raise StoreFormatError(f"key {key!r} is not topic@group with an offsetTable", os.fspath(directory))
        out[topic, group] = {int(q): int(o) for q, o in table.items()}
    return out


# ---------------------------------------------------------------- config v2: config/rdb
_U16 = struct.Struct(">H")
#: What the v2 database is called in errors and layouts.
V2_LAYOUT = "RocksDB metadata v2 (config/rdb, configManagerVersion=v2)"


def is_v2(directory: str | os.PathLike) -> bool:
    """Whether metadata database ``directory`` is config v2's ``config/rdb`` (every table in one)."""
    return os.path.basename(os.path.normpath(os.fspath(directory))) == fmt.ROCKSDB_V2_DIR


def _v2_records(directory: str | os.PathLike, table: str) -> Iterator[tuple[_V2Key, bytes]]:
    """``(record key, value)`` of every data record of ``table`` in the v2 database, in key order,
    the key without the table and record prefixes. The database is open for the iteration alone."""
    path = os.fspath(directory)
    prefix = bytes([fmt.ROCKSDB_V2_TABLE_PREFIX]) + _U16.pack(fmt.ROCKSDB_V2_TABLE_IDS[table]) + \
        bytes([fmt.ROCKSDB_V2_DATA_RECORD])
    opened = _ReadOnlyDatabase(path, V2_LAYOUT)
    try:
        for key, value in opened.items(None, f"reading the {table} table", from_key=prefix):
            if not key.startswith(prefix):
                break
            yield _V2Key(key, len(prefix), opened, table), value
    finally:
        opened.close()


class _V2Key:
    """Reads the length-prefixed strings and integers of one v2 record key from byte ``at`` on; a
    key that ends early or holds something else, and a value that does not parse, is a
    :class:`StoreFormatError` naming the table file that holds the key (:meth:`bad`)."""

    def __init__(self, key: bytes, at: int, opened: _ReadOnlyDatabase, table: str) -> None:
        self.key, self.at, self._opened, self._table = key, at, opened, table

    def bad(self, what: str) -> StoreFormatError:
        """The error for this record: the table file whose key range holds it (the database
        directory when it is in the write-ahead log), the table and the key in hex."""
        return StoreFormatError(f"{self._table} record, RocksDB key {self.key.hex()}: {what} (the byte offset "
                                "inside the table file is RocksDB's own)", self._opened.file_of(self.key), 0)

    def name(self, what: str) -> str:
        if self.at + 2 > len(self.key):
            raise self.bad(f"the key ends before the length of its {what}")
        n = _U16.unpack_from(self.key, self.at)[0]
        start, self.at = self.at + 2, self.at + 2 + n
        if self.at > len(self.key):
            raise self.bad(f"the {what} length {n} runs past the key's end")
        try:
            return self.key[start:self.at].decode("utf-8")
        except UnicodeDecodeError as exc:
            raise self.bad(f"the {what} is not UTF-8 ({exc})") from exc

    def separator(self) -> None:
        if self.key[self.at:self.at + 1] != fmt.ROCKSDB_V2_SEPARATOR:
            raise self.bad(f"expected the separator 0x01 at key byte {self.at}")
        self.at += 1

    def int32(self) -> int:
        if self.at + 4 > len(self.key):
            raise self.bad("the key ends before its queue id")
        self.at += 4
        return _I32.unpack_from(self.key, self.at - 4)[0]

    def end(self) -> None:
        if self.at != len(self.key):
            raise self.bad(f"{len(self.key) - self.at} byte(s) after the record's key")


def _v2_offsets(directory: str | os.PathLike, table: str) -> dict[tuple[str, str], dict[int, int]]:
    out: dict[tuple[str, str], dict[int, int]] = {}
    for k, value in _v2_records(directory, table):
        group = k.name("group")
        k.separator()
        topic = k.name("topic")
        k.separator()
        queue_id = k.int32()
        k.end()
        if len(value) != fmt.ROCKSDB_V2_OFFSET_VALUE_SIZE:
            raise k.bad(f"the offset of {group} on {topic}/{queue_id} holds {len(value)} bytes, not "
                        f"{fmt.ROCKSDB_V2_OFFSET_VALUE_SIZE}")
        out.setdefault((topic, group), {})[queue_id] = _I64.unpack(value)[0]
    return out


def _v2_named_table(directory: str | os.PathLike, table: str) -> dict[str, dict]:
    out = {}
    for k, value in _v2_records(directory, table):
        name = k.name("name")
        k.end()
        if value[:1] != bytes([fmt.ROCKSDB_V2_SERIALIZATION_JSON]):
            raise k.bad(f"value of {name!r} has serialization type {value[:1].hex() or 'none'}, not JSON "
                        f"({fmt.ROCKSDB_V2_SERIALIZATION_JSON:02x})")
        try:
            parsed = parse_fastjson(value[1:], name)
        except StoreFormatError as exc:  # its offset counts from the JSON text, after the type byte
            at = "" if exc.offset is None else f" at value byte {exc.offset + 1}"
            raise k.bad(f"value of {name!r} is not JSON{at}: {exc.reason}") from exc
        if not isinstance(parsed, dict):
            raise k.bad(f"value of {name!r} is not a JSON object")
        out[name] = parsed
    return out


def database_stamp(path: str | os.PathLike) -> tuple:
    """The names, sizes and modification times of the files of the RocksDB database in ``path``,
    sorted. RocksDB writes new files and appends to its log, never rewriting a file in place: an
    equal stamp is an unchanged database, so what was read from it is still current."""
    try:
        with os.scandir(path) as entries:
            return tuple(sorted((e.name, st.st_size, st.st_mtime_ns) for e in entries
                                if e.is_file() for st in [e.stat()]))
    except FileNotFoundError:
        return ()


#: (database path, table) -> (database_stamp when read, the table): reused only while the stamp is equal
_METADATA_READ: dict[tuple[str, str], tuple[tuple, dict]] = {}


def _read_while_unchanged(directory: str | os.PathLike, name: str, read: Callable[[], dict]) -> dict:
    """``read()`` of the metadata database ``directory`` (``name``: what is read), or what it gave last
    while the database's :func:`database_stamp` is the same (opening it costs milliseconds). The caller
    copies what it returns."""
    key = (os.path.abspath(os.fspath(directory)), name)
    stamp = database_stamp(key[0])
    kept = _METADATA_READ.get(key)
    if kept is None or not stamp or kept[0] != stamp:
        kept = (stamp, read())
        _METADATA_READ[key] = kept
    return kept[1]


def metadata_table(directory: str | os.PathLike, table: str) -> dict[str, dict]:
    """Metadata table ``table`` (``subscriptionGroups``, ``topics``) of a RocksDB metadata database:
    v1's ``config/{table}`` (:func:`read_metadata_table`) or v2's ``config/rdb``: name -> its JSON
    settings, as the JSON files' tables give them.

    Opening the database costs milliseconds: the table read last is returned again (a new dict) while
    the database's :func:`database_stamp` is the same."""
    return dict(_read_while_unchanged(directory, table, lambda: (
        _v2_named_table(directory, table) if is_v2(directory) else read_metadata_table(directory, table))))


def pull_offset_table(directory: str | os.PathLike) -> dict[tuple[str, str], dict[int, int]]:
    """How far each group's pulls reached, from v2's ``config/rdb`` (:func:`offset_table`'s form):
    the next offset of the last pull the broker served, per queue. v2 alone keeps it."""
    return _v2_offsets(directory, "pullOffsets")


def _open_last_queue(root: str) -> RocksDBConsumeQueue:
    """The highest queue of the last topic of ``root``'s RocksDB consume queue."""
    directory = os.path.join(root, fmt.CONSUME_QUEUE_DIR)
    with RocksDBQueueTable(directory) as table:
        if not table.ends:
            raise StoreFormatError("the consume queue database holds no queue", directory, 0)
        topic, queue_id = max(table.ends)
        return RocksDBConsumeQueue(directory, topic, queue_id, table)


def _database_files(*parts: str) -> Callable[[str], list[str]]:
    """``files(root)``: the files of the database in ``root/{parts}`` that hold bytes (an empty
    lock file or write-ahead log holds nothing to read)."""
    def files(root: str) -> list[str]:
        directory = os.path.join(root, *parts)
        return [os.path.join(directory, n) for n in sorted(os.listdir(directory))
                if os.path.isfile(os.path.join(directory, n)) and os.path.getsize(os.path.join(directory, n))]
    return files


class RocksDBMetadataV2:
    """Config v2's ``config/rdb`` (docs/formats.md#rocksdb-metadata-v2): each table read from one
    open of the database when asked, as :func:`offset_table`, :func:`pull_offset_table` and
    :func:`metadata_table` read it. Holds the path alone (nothing stays open between reads)."""

    def __init__(self, directory: str | os.PathLike) -> None:
        self.directory = os.fspath(directory)

    def __repr__(self) -> str:
        return f"RocksDBMetadataV2({self.directory!r})"

    def tables(self) -> dict[str, dict]:
        """Every table: ``consumerOffsets`` and ``pullOffsets`` ((topic, group) -> {queue id:
        offset}), ``topics`` and ``subscriptionGroups`` (name -> settings)."""
        return {"consumerOffsets": offset_table(self.directory), "pullOffsets": pull_offset_table(self.directory),
                "topics": metadata_table(self.directory, "topics"),
                "subscriptionGroups": metadata_table(self.directory, "subscriptionGroups")}

    def close(self) -> None:
        """Nothing to release: each read opens and closes the database."""


# This module's registry entries (docs/contributing.md#add-a-reader), over what real brokers wrote.
READERS = (
    ReaderEntry("RocksDBConsumeQueue", _open_last_queue, _database_files(fmt.CONSUME_QUEUE_DIR),
                lambda queue: queue.read().tolist(), store="rocksdb_store"),
    ReaderEntry("RocksDBMetadataV2",
                lambda root: RocksDBMetadataV2(os.path.join(root, CONFIG_DIR, fmt.ROCKSDB_V2_DIR)),
                _database_files(CONFIG_DIR, fmt.ROCKSDB_V2_DIR), RocksDBMetadataV2.tables, store="rdb_v2_store"),
)


def families_with_data(directory: str | os.PathLike, layout: str) -> tuple[str, ...]:
    """The column families of the RocksDB database ``directory`` that hold at least one record, in
    the database's order (docs/formats.md#message-rocksdb). A database with no table file and
    only empty write-ahead logs holds none, and is not opened (no binding needed); otherwise it is
    opened read-only like the others (:class:`UnsupportedLayoutError` naming ``layout`` and the
    extra without the binding)."""
    directory = os.fspath(directory)
    names = os.listdir(directory)
    if not any(n.endswith(".sst") or (n.endswith(".log") and os.path.getsize(os.path.join(directory, n)) > 0)
               for n in names):
        return ()
    opened = _ReadOnlyDatabase(directory, layout)
    try:
        found = []
        for name in opened.families:
            family = opened.db if name == "default" else opened.db.get_column_family(name)
            if next(opened.items(family, f"reading column family {name!r}"), None) is not None:
                found.append(name)
        return tuple(found)
    finally:
        opened.close()
