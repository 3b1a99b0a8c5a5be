"""A broker store in object storage, read through a ``pyarrow.fs`` filesystem (docs/object-storage.md).

The byte source under the readers for a store that is not on a local disk: the store's objects are
listed once (the read's cut, docs/object-storage.md#a-snapshot); ConsumeQueue, ext, config,
checkpoint and IndexFile objects are read whole, one request each, by the same readers as local files
(:class:`ObjectDir` is what :class:`cq.readers._mapped.MappedFileQueue` takes for a directory); CommitLog
records are fetched by coalesced ranges (:func:`coalesce`, docs/object-storage.md#coalescing). Every
request and byte is counted (:meth:`ObjectStore.stats`).

Credentials are never held here: pyarrow reads them from the environment when a process opens its
filesystem, so a pickled :class:`ObjectStore` carries its URI and options only.
"""
from __future__ import annotations

import os
import threading
from dataclasses import dataclass

import numpy as np

from .. import format as fmt
from ..errors import ObjectStoreError, StoreFormatError, UnsupportedLayoutError
from ..kernels import _decode
from .columns import MessageColumns
from .commitlog import CommitLog, Message, decode_message
from .consumequeue import ConsumeQueue
from .ext import ConsumeQueueExt

__all__ = [
    "BATCH_BYTES",
    "COALESCE_GAP",
    "NO_TAIL",
    "ObjectCommitLog",
    "ObjectDir",
    "ObjectStore",
    "coalesce",
    "is_object_uri",
    "name_uris",
    "refuse_object_uri",
    "register_mirror",
]

#: Records closer than this many bytes are fetched in one request (docs/object-storage.md#coalescing).
COALESCE_GAP = 256 * 1024
#: The most bytes one CommitLog request fetches: the data source's batch budget
#: (docs/object-storage.md#options, docs/data-path.md#batches-sized-by-bytes).
BATCH_BYTES = 32 * 1024 * 1024


#: mirror directory -> the URI of the store it mirrors (cq.Store of a bucket): what messages show
_MIRRORS: dict[str, str] = {}


def register_mirror(directory: str, uri: str | None) -> None:
    """Name ``directory`` by ``uri`` in messages (:func:`name_uris`); ``uri`` None forgets it."""
    if uri is None:
        _MIRRORS.pop(directory, None)
    else:
        _MIRRORS[directory] = uri


def name_uris(text: str) -> str:
    """``text`` with each open mirror directory of a store in object storage replaced by the store's
    URI: an error about a file read from the bucket names the object, not a temporary path."""
    for directory, uri in list(_MIRRORS.items()):
        text = text.replace(directory, uri)
    return text


def is_object_uri(path) -> bool:
    """True for a store path that names object storage (``s3://...``, any ``scheme://`` but ``file://``)."""
    return isinstance(path, str) and "://" in path and not path.startswith("file://")


#: Why ``rmqfilter tail`` refuses a store in object storage (:func:`refuse_object_uri`).
NO_TAIL = ("a store in object storage is a snapshot (its objects are written whole): there is no tail to follow; "
           "read it with consume (docs/object-storage.md#a-snapshot)")


def refuse_object_uri(path, reason: str) -> None:
    """Raise :class:`ObjectStoreError` naming ``path`` and ``reason`` when ``path`` is in object
    storage and the caller does not read such a store, so it is never read as a missing local directory."""
    if is_object_uri(path):
        raise ObjectStoreError(reason, path)


def coalesce(offsets, sizes, file_starts, *, gap: int = COALESCE_GAP,
             budget: int = BATCH_BYTES) -> np.ndarray:
    """Ranges of the log that hold the records ``(offsets, sizes)`` (docs/object-storage.md#coalescing).

    ``file_starts`` are the ascending start offsets of the log's files (objects); a range never
    crosses one. Records are sorted; a record joins the range before it when it lies in the same
    file, starts less than ``gap`` bytes past the range's end, and the range with it stays within
    ``budget`` bytes (a record larger than ``budget`` is a range of its own).

    Returns
    -------
    numpy.ndarray
        int64 array of shape (R, 3): ``start``, ``end`` (exclusive) and the file index of each range,
        ascending. The loop runs once per range, not per record.
    """
    offsets = np.asarray(offsets, dtype=np.int64)
    sizes = np.asarray(sizes, dtype=np.int64)
    if len(offsets) != len(sizes):
        raise ValueError(f"coalesce: {len(offsets)} offsets but {len(sizes)} sizes")
    if not len(offsets):
        return np.zeros((0, 3), dtype=np.int64)
    order = np.lexsort((-sizes, offsets))
    order = order[np.r_[True, np.diff(offsets[order]) != 0]]  # each offset once, its largest size
    off, end = offsets[order], offsets[order] + sizes[order]
    files = np.searchsorted(np.asarray(file_starts, dtype=np.int64), off, side="right") - 1
    reach = np.maximum.accumulate(end)  # the furthest byte any record so far needs
    # where a new range must start whatever the budget: another file, or a gap of `gap` or more
    cut = np.ones(len(off), dtype=bool)
    cut[1:] = (files[1:] != files[:-1]) | (off[1:] - reach[:-1] >= gap)
    heads = np.flatnonzero(cut)
    tails = np.append(heads[1:], len(off))
    out = []
    for a, b in zip(heads.tolist(), tails.tolist()):
        i = a
        while i < b:  # greedy within the run: as many records as fit the budget from record i
            j = max(i + int(np.searchsorted(reach[i:b], off[i] + budget, side="right")), i + 1)
            stop = int(reach[j - 1])
            j = i + int(np.searchsorted(reach[i:b], stop, side="right"))  # and what lies inside it
            out.append((int(off[i]), stop, int(files[i])))
            i = j
    return np.array(out, dtype=np.int64)


@dataclass(frozen=True)
class ObjectDir:
    """A directory of a store in object storage, as the mapped-file readers take it (``_mapped.py``)."""

    source: ObjectStore
    relpath: str

    @property
    def uri(self) -> str:
        """The directory's URI."""
        return self.source.uri_of(self.relpath)

    def list_files(self) -> list[tuple[int, str]]:
        """``(start_offset, URI)`` of the store files directly in this directory, ascending (names of 20
        decimal digits, as ``fmt.list_queue_files``): a reader's error names the object by its URI,
        wherever the read runs (a Spark task's too)."""
        return [(start, self.source.uri_of(key)) for start, key in self.source.list_dir_files(self.relpath)]


def _reopen(uri: str, options: dict) -> ObjectStore:
    return ObjectStore(uri, **options)


class ObjectStore:
    """A broker store in object storage, read-only (docs/object-storage.md).

    Parameters
    ----------
    uri : str
        ``s3://bucket/prefix/broker-a`` (any scheme ``pyarrow.fs.FileSystem.from_uri`` opens), or a path
        inside ``filesystem``.
    filesystem : pyarrow.fs.FileSystem, optional
        The filesystem to read through instead of the URI's (not pickled: a pickled store opens the
        URI's filesystem again).
    endpoint, region : str, optional
        The S3 endpoint (``http://127.0.0.1:9000``) and region (docs/object-storage.md#options).
        Credentials come from the environment, as pyarrow reads them; they are never options.
    coalesce_gap, batch_bytes : int
        The coalescing rule's gap and budget (docs/object-storage.md#coalescing).
    """

    def __init__(self, uri: str, *, filesystem=None, endpoint: str | None = None, region: str | None = None,
                 coalesce_gap: int = COALESCE_GAP, batch_bytes: int = BATCH_BYTES) -> None:
        if coalesce_gap < 0 or batch_bytes <= 0:
            raise ValueError(f"coalesce_gap must be >= 0 and batch_bytes > 0, got {coalesce_gap} and {batch_bytes}")
        self.uri = uri.rstrip("/")
        self._options = {"endpoint": endpoint, "region": region, "coalesce_gap": int(coalesce_gap),
                         "batch_bytes": int(batch_bytes)}
        self.coalesce_gap, self.batch_bytes = int(coalesce_gap), int(batch_bytes)
        self._fs, self._root = self._open_filesystem(filesystem)
        self._lock = threading.Lock()
        self._stats: dict[str, list[int]] = {}
        self._listing = self._list()  # the read's cut: every object and its size, taken once

    def __repr__(self) -> str:
        return f"ObjectStore({self.uri!r})"

    def __reduce__(self):
        opts = {k: v for k, v in self._options.items() if v is not None}
        return _reopen, (self.uri, opts)

    # ------------------------------------------------------------ the filesystem
    def _open_filesystem(self, filesystem):
        # lazy: pyarrow is an optional dependency of cq
        import pyarrow.fs as pafs

        if filesystem is not None:
            return filesystem, self.uri.split("://", 1)[-1]
        scheme, _, rest = self.uri.partition("://")
        if not rest:
            raise ObjectStoreError("not an object-storage URI (expected scheme://bucket/prefix)", self.uri)
        if scheme == "s3" and (self._options["endpoint"] or self._options["region"]):
            kwargs = {}
            endpoint, region = self._options["endpoint"], self._options["region"]
            if endpoint:
                ep_scheme, sep, host = endpoint.partition("://")
                kwargs["endpoint_override"] = host if sep else endpoint
                if sep:
                    kwargs["scheme"] = ep_scheme
            if region:
                kwargs["region"] = region
            return pafs.S3FileSystem(**kwargs), rest
        try:
            fs, root = pafs.FileSystem.from_uri(self.uri)
        except (OSError, ValueError, TypeError) as exc:
            raise ObjectStoreError(f"cannot open a filesystem for this URI ({type(exc).__name__})", self.uri) from None
        return fs, root

    def uri_of(self, relpath: str) -> str:
        """The URI of an object (or directory) of the store, from its key relative to the store root."""
        return f"{self.uri}/{relpath}" if relpath else self.uri

    def _fail(self, exc: BaseException, uri: str, byte_range: tuple[int, int] | None) -> ObjectStoreError:
        """The error for a failed request: what went wrong, by kind, without the filesystem's own
        text (which may quote request headers)."""
        text = str(exc)
        if isinstance(exc, PermissionError) or any(
                code in text for code in ("ACCESS_DENIED", "AccessDenied", "Forbidden", "InvalidAccessKeyId",
                                          "SignatureDoesNotMatch", "HTTP status 403")):
            why = "access denied (check the credentials pyarrow reads from the environment)"
        elif "NO_SUCH_BUCKET" in text or "NoSuchBucket" in text:
            why = "the bucket does not exist"
        elif isinstance(exc, FileNotFoundError) or "NoSuchKey" in text or "NOT_FOUND" in text:
            why = "no such object (deleted since the listing?)" if byte_range is not None else "no such object"
        elif "NETWORK_CONNECTION" in text or "curlCode" in text:
            why = "cannot reach the endpoint (the endpoint option, or AWS_ENDPOINT_URL)"
        else:
            why = f"the request failed ({type(exc).__name__})"
        return ObjectStoreError(why, uri, byte_range)

    # ------------------------------------------------------------ listing
    def _list(self) -> dict[str, int]:
        # lazy: pyarrow is an optional dependency of cq
        import pyarrow.fs as pafs

        try:
            infos = self._fs.get_file_info(pafs.FileSelector(self._root, recursive=True))
        except OSError as exc:
            if isinstance(exc, FileNotFoundError):
                raise ObjectStoreError("no store under this prefix (nothing is stored there)", self.uri) from None
            raise self._fail(exc, self.uri, None) from None
        self._count("list", 0)
        prefix = self._root.rstrip("/") + "/"
        listing = {i.path[len(prefix):]: int(i.size) for i in infos
                   if i.type == pafs.FileType.File and i.path.startswith(prefix)}
        # a key that other keys lie under is a directory marker some servers list as an object
        # (s3proxy's filesystem back end lists each directory with its inode size), never a store file
        dirs = {k[:i] for k in listing for i in range(len(k)) if k[i] == "/"}
        listing = {k: v for k, v in listing.items() if k not in dirs}
        if not listing:
            raise ObjectStoreError("no store under this prefix (nothing is stored there)", self.uri)
        if not any(k.startswith((fmt.COMMIT_LOG_DIR + "/", fmt.CONSUME_QUEUE_DIR + "/", "config/")) for k in listing):
            raise ObjectStoreError(
                f"not a broker store: no {fmt.COMMIT_LOG_DIR}/, {fmt.CONSUME_QUEUE_DIR}/ or config/ objects "
                f"among the {len(listing)} under this prefix", self.uri)
        return listing

    @property
    def dledger(self) -> str | None:
        """The first ``dledger-*`` directory holding DLedger data, None for a classic CommitLog."""
        found = sorted({k.split("/", 1)[0] for k in self._listing
                        if k.startswith(fmt.DLEDGER_DIR_PREFIX) and f"/{fmt.DLEDGER_DATA_DIR}/" in k})
        return found[0] if found else None

    def _check_layout(self, what: str) -> None:
        """Refuse, by name, a layout this byte source's own reads (queues, records) do not take yet,
        rather than answer empty; ``cq.Store`` of a bucket reads both (docs/object-storage.md#costs)."""
        if f"{fmt.CONSUME_QUEUE_DIR}/CURRENT" in self._listing and what == "queues":
            raise UnsupportedLayoutError("RocksDB consume queue", self.uri_of(fmt.CONSUME_QUEUE_DIR),
                                         "cq.ObjectStore reads file consume queues only; cq.Store reads it")
        if self.dledger is not None and what == "records":
            raise UnsupportedLayoutError("DLedger CommitLog", self.uri_of(self.dledger),
                                         "cq.ObjectStore reads a classic CommitLog only; cq.Store reads it")

    @property
    def keys(self) -> list[str]:
        """Every object of the store, as keys relative to its root, sorted (the listing of the cut)."""
        return sorted(self._listing)

    def size_of(self, key: str) -> int:
        """The size of an object in the listing, by its key or URI."""
        rel = self._relative(key)
        try:
            return self._listing[rel]
        except KeyError:
            raise ObjectStoreError("no such object in the store's listing", self.uri_of(rel)) from None

    def _relative(self, key: str) -> str:
        return key[len(self.uri) + 1:] if key.startswith(self.uri + "/") else key

    def list_dir_files(self, relpath: str) -> list[tuple[int, str]]:
        """``(start_offset, key)`` of the store files directly under ``relpath``, ascending."""
        prefix = relpath.rstrip("/") + "/"
        out = []
        for key in self._listing:
            if key.startswith(prefix) and "/" not in key[len(prefix):]:
                start = fmt.parse_file_name(key[len(prefix):])
                if start is not None:
                    out.append((start, key))
        out.sort()
        return out

    def subdirs(self, relpath: str) -> list[str]:
        """The names directly under ``relpath`` that hold objects further down (directories)."""
        prefix = relpath.rstrip("/") + "/"
        return sorted({k[len(prefix):].split("/", 1)[0] for k in self._listing
                       if k.startswith(prefix) and "/" in k[len(prefix):]})

    # ------------------------------------------------------------ requests
    def _count(self, kind: str, nbytes: int) -> None:
        with self._lock:
            s = self._stats.setdefault(kind, [0, 0])
            s[0] += 1
            s[1] += nbytes

    def stats(self) -> dict[str, tuple[int, int]]:
        """``{kind: (requests, bytes)}`` since the store was opened: ``list``, and one kind per reader
        (``ConsumeQueue``, ``ConsumeQueueExt``, ``CommitLog``, ``config``, ...)."""
        with self._lock:
            return {k: (v[0], v[1]) for k, v in self._stats.items()}

    @property
    def requests(self) -> int:
        """Requests made so far, listings included."""
        return sum(r for r, _ in self.stats().values())

    @property
    def bytes_fetched(self) -> int:
        """Bytes fetched so far."""
        return sum(b for _, b in self.stats().values())

    def read_range(self, key: str, start: int, end: int, *, kind: str = "object") -> bytes:
        """Bytes ``[start, end)`` of an object, one request; exactly that many or an
        :class:`ObjectStoreError` naming the object's URI and the range."""
        rel = self._relative(key)
        uri = self.uri_of(rel)
        size = self.size_of(rel)
        if start < 0 or end > size or start > end:
            raise ObjectStoreError(f"range outside the object's {size} listed bytes", uri, (start, end))
        try:
            with self._fs.open_input_file(f"{self._root}/{rel}") as f:
                data = f.read_at(end - start, start)
        except OSError as exc:
            raise self._fail(exc, uri, (start, end)) from None
        self._count(kind, len(data))
        if len(data) != end - start:
            raise ObjectStoreError(
                f"object is shorter than listed: got {len(data)} of {end - start} bytes "
                "(truncated or overwritten since the listing)", uri, (start, end))
        return data

    def read_object(self, key: str, *, kind: str = "object") -> bytes:
        """A whole object, one request (ConsumeQueue, ext, config, checkpoint and IndexFile objects)."""
        return self.read_range(key, 0, self.size_of(key), kind=kind)

    # ------------------------------------------------------------ the store's files
    def topics(self) -> list[str]:
        """Topics with a ConsumeQueue directory in the store."""
        self._check_layout("queues")
        return self.subdirs(fmt.CONSUME_QUEUE_DIR)

    def queue_ids(self, topic: str) -> list[int]:
        """The queue ids of ``topic`` with ConsumeQueue files."""
        self._check_layout("queues")
        return sorted(int(q) for q in self.subdirs(f"{fmt.CONSUME_QUEUE_DIR}/{topic}") if q.isdigit())

    def consume_queue(self, topic: str, queue_id: int, *, file_size: int | None = None) -> ConsumeQueue:
        """The queue's :class:`ConsumeQueue`, its files read whole from the bucket on first use."""
        self._check_layout("queues")
        return ConsumeQueue(ObjectDir(self, f"{fmt.CONSUME_QUEUE_DIR}/{topic}/{int(queue_id)}"), file_size=file_size)

    def ext(self, topic: str, queue_id: int, *, file_size: int | None = None) -> ConsumeQueueExt | None:
        """The queue's :class:`ConsumeQueueExt`, or None where the store has no ext files for it."""
        rel = f"{fmt.CONSUME_QUEUE_EXT_DIR}/{topic}/{int(queue_id)}"
        return ConsumeQueueExt(ObjectDir(self, rel), file_size=file_size) if self.list_dir_files(rel) else None

    def read_file(self, relpath: str) -> bytes:
        """A file of the store other than a queue's (``config/topics.json``, ``checkpoint``,
        ``index/<name>``), read whole; kind ``config``, ``checkpoint`` or ``index`` in :meth:`stats`."""
        kind = relpath.split("/", 1)[0] if "/" in relpath else relpath
        return self.read_object(relpath, kind=kind)

    def commit_log_files(self) -> list[tuple[int, str]]:
        """``(start_offset, key)`` of the CommitLog's objects, ascending."""
        self._check_layout("records")
        return self.list_dir_files(fmt.COMMIT_LOG_DIR)

    def read_messages(self, offsets, sizes, *, verify_crc: bool | str = False) -> list[Message]:
        """The CommitLog records at ``offsets`` (their sizes from the units), decoded, in the order asked.

        Fetched by the ranges :func:`coalesce` gives, one request each (docs/object-storage.md#coalescing),
        never one per record; a record that does not decode raises :class:`cq.StoreFormatError` naming
        the object's URI and the byte offset in it.
        """
        offsets = np.asarray(offsets, dtype=np.int64)
        sizes = np.asarray(sizes, dtype=np.int64)
        files = self.commit_log_files()
        if not files:
            raise ObjectStoreError("the store has no CommitLog objects", self.uri_of(fmt.COMMIT_LOG_DIR))
        starts = np.array([s for s, _ in files], dtype=np.int64)
        ranges = coalesce(offsets, sizes, starts, gap=self.coalesce_gap, budget=self.batch_bytes)
        decoded: dict[int, Message] = {}
        for lo, hi, index in ranges.tolist():
            if index < 0:
                raise ObjectStoreError("offset before the CommitLog's first object", self.uri_of(fmt.COMMIT_LOG_DIR),
                                       (lo, hi))
            file_start, key = files[index]
            buf = self.read_range(key, lo - file_start, hi - file_start, kind="CommitLog")
            inside = offsets[(offsets >= lo) & (offsets < hi)]
            for off in np.unique(inside).tolist():
                try:
                    msg = decode_message(buf, off - lo, len(buf), path=self.uri_of(key),
                                         file_start=file_start, verify_crc=verify_crc)
                except StoreFormatError as exc:  # the offset in the object, not in the range fetched
                    at = None if exc.offset is None else exc.offset + lo - file_start
                    raise StoreFormatError(exc.reason, self.uri_of(key), at) from None
                msg._file_offset = off - file_start
                decoded[off] = msg
        return [decoded[o] for o in offsets.tolist()]

    def mirror(self, directory: str) -> str:
        """Fetch every object but the CommitLog's and the ext's whole into ``directory`` (a private,
        fresh directory), one request each, and make an empty ``commitlog/`` and each queue's empty ext
        directory there (the ext objects are read queue by queue, :class:`ObjectDir`): the local view
        :class:`cq.Store` reads a store in object storage through, its CommitLog staying in the
        bucket (:class:`ObjectCommitLog`, docs/object-storage.md#costs). A store with DLedger data
        is fetched whole, its classic CommitLog too. Returns ``directory``."""
        classic = self.dledger is None  # a DLedger (or migrated) store's logs are fetched whole too
        if classic:
            os.makedirs(os.path.join(directory, fmt.COMMIT_LOG_DIR), exist_ok=True)
        for key in sorted(self._listing):
            if classic and key.startswith(fmt.COMMIT_LOG_DIR + "/"):
                continue
            if key.startswith(fmt.CONSUME_QUEUE_EXT_DIR + "/"):  # read from the bucket, queue by queue
                os.makedirs(os.path.join(directory, *key.split("/")[:-1]), exist_ok=True)
                continue
            kind = key.split("/", 1)[0] if "/" in key else key
            path = os.path.join(directory, *key.split("/"))
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with open(path, "wb") as out:
                out.write(self.read_object(key, kind=kind))
        return directory


class ObjectCommitLog(CommitLog):
    """A CommitLog whose files are objects of an :class:`ObjectStore` (docs/object-storage.md#costs).

    Its records are decoded by the CommitLog's own code. :meth:`decode_copied` (records whose sizes
    the units give) fetches them by the coalesced ranges of :func:`coalesce`, never one request per
    record; every other read (recovery's walk of the last three files, reads by offset alone)
    fetches the objects it touches whole, once per read.
    """

    def __init__(self, directory: ObjectDir, *, file_size: int | None = None,
                 check_crc_on_recover: bool = True) -> None:
        super().__init__(directory, file_size=file_size, check_crc_on_recover=check_crc_on_recover)

    def decode_copied(self, physical_offsets, sizes):
        """:meth:`CommitLog.decode_copied` from coalesced ranges of the objects (every field); where
        a fetched record is not of its unit's size, or does not decode, :meth:`decode_columns`,
        which reads the whole objects and raises their errors."""
        offs = np.asarray(physical_offsets, dtype=np.int64).reshape(-1)
        sizes = np.asarray(sizes, dtype=np.int64).reshape(-1)
        if len(offs) == 0 or len(sizes) != len(offs) or int(self.file_indices(offs).min()) < 0:
            return self.decode_columns(offs)
        source = self._source
        ranges = coalesce(offs, sizes, self._starts, gap=source.coalesce_gap, budget=source.batch_bytes)
        parts, bases, base = [], [], 0
        for lo, hi, index in ranges.tolist():
            if index in self._maps:  # already whole in memory: no request
                part = bytes(self._maps[index][lo - self._starts[index]:hi - self._starts[index]])
            else:
                start, key = self._files[index]
                part = source.read_range(key, lo - start, hi - start, kind=self._kind)
            parts.append(part)
            bases.append(base)
            base += len(part)
        data = np.frombuffer(b"".join(parts), dtype=np.uint8)
        which = np.searchsorted(ranges[:, 0], offs, side="right") - 1
        pos = np.asarray(bases, dtype=np.int64)[which] + offs - ranges[which, 0]
        ends = np.asarray(bases, dtype=np.int64)[which] + ranges[which, 1] - ranges[which, 0]
        if (pos + sizes > ends).any() or (sizes < 4).any():
            return self.decode_columns(offs)
        stored = data[(pos[:, None] + np.arange(4)).reshape(-1)].reshape(-1, 4).astype(np.int64)
        total = (stored[:, 0] << 24) | (stored[:, 1] << 16) | (stored[:, 2] << 8) | stored[:, 3]
        if not np.array_equal(total, sizes):  # a unit's size is not its record's: the whole-object path
            return self.decode_columns(offs)
        cols, err = _decode.decode_columns(data, np.ascontiguousarray(pos), len(data), fmt.ALL_RECORD_FIELDS)
        if err is not None:
            return self.decode_columns(offs)
        return MessageColumns(cols, len(offs))
