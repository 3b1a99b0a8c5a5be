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

import contextlib
import fnmatch
import functools
import glob
import mmap
import os
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Self

import numpy as np

from rmqfilter_engine import load

from .. import format as fmt
from ..errors import ObjectStoreError, StoreFormatError, UnsupportedLayoutError
from .commitlog import Message, decode_message
from .consumequeue import ConsumeQueue, head_units
from .ext import ConsumeQueueExt

__all__ = [
    "BATCH_BYTES",
    "COALESCE_GAP",
    "FETCH_THREADS",
    "HEAD_FIRST",
    "NO_TAIL",
    "RECORD_PROBE",
    "RECOVERY",
    "SIZE_REQUESTS",
    "TAIL_FIRST",
    "TAIL_MARK",
    "CopiedDir",
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
#: The first head of a queue's last ConsumeQueue or ext object a Store fetches; then twice as much each
#: time until the head holds the end of the queue's data (docs/object-storage.md#costs). A multiple of
#: the ConsumeQueue's 20-byte unit.
HEAD_FIRST = 20 * 52429
#: The first head of a queue's last ConsumeQueue object fetched to find its last unit alone (the dispatch
#: frontier of a store in a bucket, :meth:`ObjectStore.queue_tails`); then twice as much each time until the
#: head holds the end of the queue's data (docs/object-storage.md#costs). A multiple of the 20-byte unit.
TAIL_FIRST = 20 * 3277
#: Values of ``ObjectStore(recovery=...)``: where a cold recovery walk of a classic CommitLog starts
#: (docs/object-storage.md#a-snapshot).
RECOVERY = ("frontier", "walk")
#: A record read by offset alone (no unit gives its size) is fetched as its first this many bytes, then
#: the rest by its TOTALSIZE where it is longer (docs/object-storage.md#coalescing).
RECORD_PROBE = 4096
#: The smallest record fetched by its size: a record's fixed head up to its born host
#: (docs/formats.md#commitlog); one shorter is read from its whole object.
RECORD_PROBE_MIN = fmt.RECORD_BORN_HOST_POSITION + 8


#: Requests a process makes at once: the independent ranges of one step of a read (a batch's coalesced
#: CommitLog ranges, a queue's objects, the recovery walk's objects, the small objects a Store copies when
#: it opens) are fetched by this many threads (docs/object-storage.md#costs); pyarrow's reads release the GIL.
FETCH_THREADS = 4
_POOL: tuple[int, ThreadPoolExecutor] | None = None  # (the process it was made in, the pool)
_POOL_LOCK = threading.Lock()


def _fetch_pool() -> ThreadPoolExecutor:
    """The process's pool of :data:`FETCH_THREADS` fetching threads (a forked child, such as a Spark
    Python worker, makes its own: threads do not survive a fork)."""
    global _POOL
    with _POOL_LOCK:
        if _POOL is None or _POOL[0] != os.getpid():
            _POOL = (os.getpid(), ThreadPoolExecutor(FETCH_THREADS, thread_name_prefix="rmqfilter-fetch"))
        return _POOL[1]


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


#: How an in-memory buffer of an object is mapped: private anonymous memory where the platform takes map
#: flags (its pages may be huge pages; shared anonymous memory's are not), the default anonymous map elsewhere.
PRIVATE_MAP = {"flags": mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS} if hasattr(mmap, "MAP_PRIVATE") else {}


def _guessed(guess, head) -> int:
    """``guess(head)``: the bytes a queue object's data likely ends in, or 0 (no guess)."""
    if guess is None or not len(head):
        return 0
    return int(guess(memoryview(head)) or 0)


def merge_spans(spans) -> list[tuple[int, int]]:
    """Byte spans ``(lo, hi)`` sorted and joined where they touch or overlap."""
    out: list[tuple[int, int]] = []
    for a, b in sorted(spans):
        if out and a <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], b))
        else:
            out.append((a, b))
    return out


def _missing(held: list[tuple[int, int]], lo: int, hi: int) -> list[tuple[int, int]]:
    """The parts of ``[lo, hi)`` outside the sorted, disjoint spans ``held``."""
    out, at = [], lo
    for a, b in held:
        if b <= at:
            continue
        if a >= hi:
            break
        if a > at:
            out.append((at, a))
        at = max(at, b)
    if at < hi:
        out.append((at, hi))
    return out


#: The kind :meth:`ObjectStore.stats` counts requests for an object's size under (a HEAD): a read opened by
#: path (``cq.readers._arrowfs_py``) makes one before its GET; a read whose answer may have been short, one
#: after it (:data:`TAIL_MARK`).
SIZE_REQUESTS = "HEAD"

#: What a ranged read's last bytes are set to before its GET (:meth:`ObjectStore.read_range_into`): a
#: tail the answer did not overwrite was not answered, and the object's size is asked. Random per process,
#: so no store's bytes hold it but by a chance of 2**-128 (which costs one HEAD, not a wrong answer).
TAIL_MARK = os.urandom(16)


@functools.cache
def _ranged_reads():
    """The module ranged reads go through (docs/object-storage.md#requests): ``cq.readers._arrowfs``, one GET
    per read, opened by the listed size; its twin (``RMQFILTER_PUREPYTHON``, or not built against this
    pyarrow) opens by path, a HEAD and the GET. Loaded at the first read: it imports pyarrow."""
    return load("cq.readers", "_arrowfs")[0]


def coalesce(offsets, sizes, file_starts, file_sizes=None, *, gap: int = COALESCE_GAP,
             budget: int = BATCH_BYTES) -> np.ndarray:
    """Ranges of the log that hold the records ``(offsets, sizes)`` (docs/object-storage.md#coalescing).

    ``file_starts`` are the ascending start offsets of the log's files (objects); a range never
    crosses one. Records are sorted; a record joins the range before it when it lies in the same
    file, starts less than ``gap`` bytes past the range's end, and the range with it stays within
    ``budget`` bytes (a record larger than ``budget`` is a range of its own). With ``file_sizes`` (each
    file's size), a range at least ``gap`` long (a run of a batch's records, not a record read alone) that
    starts less than ``gap`` bytes past its file's start starts there, and one that ends less than ``gap``
    bytes before its file's end ends there, where the range stays within ``budget``: a later batch's
    records at the file's edges ask nothing more.

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
    starts = np.asarray(file_starts, dtype=np.int64)
    order = np.lexsort((-sizes, offsets))
    order = order[np.r_[True, np.diff(offsets[order]) != 0]]  # each offset once, its largest size
    off, end = offsets[order], offsets[order] + sizes[order]
    files = np.searchsorted(starts, off, side="right") - 1
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
            out.append([int(off[i]), stop, int(files[i])])
            i = j
    if file_sizes is not None and out:
        lengths = np.asarray(file_sizes, dtype=np.int64)
        for r in out:
            lo, hi, f = r
            if f < 0 or hi - lo < gap:
                continue
            first, last = int(starts[f]), int(starts[f]) + int(lengths[f])
            if 0 < lo - first < gap and hi - first <= budget:
                r[0] = lo = first
            if 0 < last - hi < gap and last - lo <= budget:
                r[1] = last
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
        """``(start_offset, URI)`` of the store files directly in this directory, ascending (names of
        20 decimal digits, as ``fmt.list_queue_files``): messages name each file by its object's URI."""
        return [(start, self.source.uri_of(key)) for start, key in self.source.list_dir_files(self.relpath)]


@dataclass(frozen=True)
class CopiedDir(ObjectDir):
    """A queue directory of a store in object storage that :class:`cq.Store` reads through its private
    copy: listed from the store's listing, its files copied (:meth:`ObjectStore.fetch_files`) by
    ``copy()`` the first time a reader maps one of them, then mapped from the copy; a reader that
    never maps a file (an ext a read does not consult) fetches nothing (docs/object-storage.md#costs)."""

    copy: object = None  # () -> the local directory holding the copy, fetched on the first call
    #: The copy is in memory (:meth:`ObjectStore.ranged_view`), not files: ``copy()`` fetches into it.
    in_memory: bool = False

    def open_file(self, path: str) -> memoryview:
        """The mapped bytes of the queue's file ``path`` (its URI), from the copy."""
        if self.in_memory:
            self.copy()
            return self.source.ranged_view(path)
        local = os.path.join(self.copy(), path.rsplit("/", 1)[-1])
        return fmt.map_file_identity(local)[0]


def open_filesystem(uri: str, *, filesystem=None, endpoint: str | None = None,
                    region: str | None = None) -> tuple[object, str]:
    """``(pyarrow filesystem, path inside it)`` of an object-storage URI: ``filesystem`` itself when given,
    an S3 filesystem from ``endpoint`` and ``region`` (docs/object-storage.md#options), else the URI's own
    (``pyarrow.fs.FileSystem.from_uri``, which reads the environment). Credentials are never arguments."""
    # lazy: pyarrow is an optional dependency of cq
    import pyarrow.fs as pafs

    if filesystem is not None:
        return filesystem, uri.split("://", 1)[-1]
    scheme, _, rest = uri.partition("://")
    if not rest:
        raise ObjectStoreError("not an object-storage URI (expected scheme://bucket/prefix)", uri)
    if scheme == "s3" and (endpoint or region):
        kwargs = {}
        if endpoint:
            ep_scheme, sep, host = endpoint.partition("://")
            kwargs["endpoint_override"] = host if sep else endpoint
            if sep:
                kwargs["scheme"] = ep_scheme
        if region:
            kwargs["region"] = region
        return pafs.S3FileSystem(**kwargs), rest
    try:
        return pafs.FileSystem.from_uri(uri)
    except (OSError, ValueError, TypeError) as exc:
        raise ObjectStoreError(f"cannot open a filesystem for this URI ({type(exc).__name__})", uri) from None


def expand_pattern(pattern: str, *, filesystem=None, endpoint: str | None = None,
                   region: str | None = None) -> list[str]:
    """The URIs of the prefixes a glob pattern over a bucket names (``s3://backups/brokers/broker-*``),
    sorted, as :func:`glob.glob` names local directories (docs/object-storage.md#naming-a-store).

    Each segment with a wildcard (``*``, ``?``, ``[...]``) is matched against the prefixes one listing
    (one LIST request, delimited by ``/``) finds under each prefix matched so far; a segment without one
    is taken as it is. A wildcard in the bucket's name is refused (listing buckets is another
    permission). Only prefixes match, never single objects; an empty list when none does."""
    # lazy: pyarrow is an optional dependency of cq
    import pyarrow.fs as pafs

    scheme, _, rest = pattern.partition("://")
    bucket, _, key = rest.partition("/")
    if not bucket or glob.has_magic(bucket):
        raise ObjectStoreError("a pattern needs the bucket's own name (no wildcard there)", pattern)
    fs, _root = open_filesystem(f"{scheme}://{bucket}", filesystem=filesystem, endpoint=endpoint, region=region)
    found = [bucket]
    for segment in [s for s in key.split("/") if s]:
        if not glob.has_magic(segment):
            found = [f"{p}/{segment}" for p in found]
            continue
        matched: set[str] = set()
        for prefix in found:
            try:
                infos = fs.get_file_info(pafs.FileSelector(prefix, recursive=False))
            except FileNotFoundError:
                continue
            except OSError as exc:
                raise request_error(exc, f"{scheme}://{prefix}", None) from None
            matched.update(i.path.rstrip("/") for i in infos if i.type == pafs.FileType.Directory
                           and fnmatch.fnmatchcase(i.path.rstrip("/").rsplit("/", 1)[-1], segment))
        found = sorted(matched)
    return [f"{scheme}://{p}" for p in found]


#: Why a prefix is refused as a store (:meth:`ObjectStore.check`, the listing of :class:`ObjectStore`).
_NO_STORE = "no store under this prefix (nothing is stored there)"
#: The top-level names one of which every broker store's prefix holds.
_STORE_TOPS = (fmt.COMMIT_LOG_DIR, fmt.CONSUME_QUEUE_DIR, "config")


def _require_store(tops, count: int, uri: str, what: str = "") -> None:
    """Refuse a prefix that holds nothing (``count`` of its entries) or no broker store (none of ``tops``, the
    top-level names under it, is a store's: :data:`_STORE_TOPS`), naming ``uri``."""
    if not count:
        raise ObjectStoreError(_NO_STORE, uri)
    if not set(tops) & set(_STORE_TOPS):
        raise ObjectStoreError(
            f"not a broker store: no {fmt.COMMIT_LOG_DIR}/, {fmt.CONSUME_QUEUE_DIR}/ or config/ objects "
            f"among the {count}{what} under this prefix", uri)


#: The reasons :func:`request_error` gives a request that failed for no reason it names, and one whose
#: range starts past the object's end.
_FAILED = "the request failed"
_PAST_END = "object is shorter than listed: the range starts past its end (truncated or overwritten since the listing)"


def request_error(exc: BaseException, uri: str, byte_range: tuple[int, int] | None) -> ObjectStoreError:
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
    elif "InvalidRange" in text or "HTTP status 416" in text or "past end of file" in text:
        why = _PAST_END
    elif "NETWORK_CONNECTION" in text or "curlCode" in text:
        why = "cannot reach the endpoint (the endpoint option, or AWS_ENDPOINT_URL)"
    else:
        why = f"{_FAILED} ({type(exc).__name__})"
    return ObjectStoreError(why, uri, byte_range)


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
    listing : tuple, optional
        The listing another ObjectStore of the same URI took (:meth:`listing`), read as this one's cut
        instead of listing the prefix again: how a Spark task reads the cut its query planned
        (docs/object-storage.md#spark). Not pickled.
    preloaded : mapping, optional
        ``{key: bytes}``: the first bytes of objects of the listing that another ObjectStore of the same URI
        fetched (:meth:`carried`), taken in place of fetching them again (:meth:`preload`): how a Spark
        task reads the small objects and ConsumeQueue heads its plan carries (docs/object-storage.md#spark).
        Only with ``listing`` (the same cut). Not pickled.
    recovery : {"frontier", "walk"}, default "frontier"
        Where a :class:`cq.Store`'s cold recovery walk of the classic CommitLog starts: at the dispatch
        frontier (:meth:`RangedLog.walk_start`), or ``"walk"``, the broker's walk from the third-to-last
        object, for a copy that may be damaged before its frontier (docs/object-storage.md#a-snapshot).
    """

    def __init__(self, uri: str, *, filesystem=None, endpoint: str | None = None, region: str | None = None,
                 coalesce_gap: int = COALESCE_GAP, batch_bytes: int = BATCH_BYTES,
                 listing: tuple | None = None, preloaded=None, recovery: str = "frontier") -> None:
        if coalesce_gap < 0 or batch_bytes <= 0:
            raise ValueError(f"coalesce_gap must be >= 0 and batch_bytes > 0, got {coalesce_gap} and {batch_bytes}")
        if recovery not in RECOVERY:
            raise ValueError(f"recovery must be one of {', '.join(RECOVERY)}, got {recovery!r}")
        self.uri = uri.rstrip("/")
        self._options = {"endpoint": endpoint, "region": region, "coalesce_gap": int(coalesce_gap),
                         "batch_bytes": int(batch_bytes)}
        if recovery != "frontier":
            self._options["recovery"] = recovery
        self.recovery = recovery
        self.coalesce_gap, self.batch_bytes = int(coalesce_gap), int(batch_bytes)
        self._fs, self._root = self._open_filesystem(filesystem)
        self._lock = threading.Lock()
        self._stats: dict[str, list[int]] = {}
        self._modified: dict[str, int | None] = {}  # key -> its modification time listed (ns), where known
        self._copied: dict[str, int] = {}  # key -> the bytes from its start fetch_queues copied
        # key -> (its buffer, the byte spans fetched into it, ascending, disjoint): objects read by ranges
        # into memory (ranged_view, hold), not copied
        self._ranged: dict[str, tuple[mmap.mmap, list[tuple[int, int]]]] = {}
        # the read's cut: every object and its size, taken once
        self._listing = self._take(self._list() if listing is None else listing)
        self._preloaded: dict[str, bytes] = {}  # key -> its first bytes, given (preload)
        if preloaded:
            if listing is None:
                raise ValueError("preloaded objects need the listing they were fetched at (listing=)")
            self.preload(preloaded)

    def __repr__(self) -> str:
        return f"ObjectStore({self.uri!r})"

    def __reduce__(self):
        opts = {k: v for k, v in self._options.items() if v is not None}
        return _reopen, (self.uri, opts)

    @staticmethod
    def check(uri: str, *, filesystem=None, endpoint: str | None = None, region: str | None = None,
              **_reading) -> None:
        """That a store lies at ``uri``, by one listing of its top level (one LIST, delimited by ``/``: a few
        names, not every object), failing as opening it would (a missing bucket or prefix, a denied request,
        a prefix that holds no broker store: docs/object-storage.md#errors). The options that only shape a
        read (``_reading``: ``coalesce_gap``, ``batch_bytes``, ...) are taken and not used. What the data
        source's ``load()`` asks; the plan's listing, taken later, is the read's cut."""
        # lazy: pyarrow is an optional dependency of cq
        import pyarrow.fs as pafs

        uri = uri.rstrip("/")
        fs, root = open_filesystem(uri, filesystem=filesystem, endpoint=endpoint, region=region)
        try:
            infos = fs.get_file_info(pafs.FileSelector(root, recursive=False))
        except OSError as exc:
            if isinstance(exc, FileNotFoundError):
                raise ObjectStoreError(_NO_STORE, uri) from None
            raise request_error(exc, uri, None) from None
        names = {i.path.rstrip("/").rsplit("/", 1)[-1] for i in infos}
        _require_store(names, len(names), uri, " names")

    # ------------------------------------------------------------ the filesystem
    def _open_filesystem(self, filesystem):
        return open_filesystem(self.uri, filesystem=filesystem, endpoint=self._options["endpoint"],
                               region=self._options["region"])

    def uri_of(self, relpath: str) -> str:
        """The URI of an object (or directory) of the store, from its key relative to the store root."""
        return f"{self.uri}/{relpath}" if relpath else self.uri

    def _fail(self, exc: BaseException, uri: str, byte_range: tuple[int, int] | None) -> ObjectStoreError:
        return request_error(exc, uri, byte_range)

    # ------------------------------------------------------------ listing
    def _list(self) -> list[tuple[str, int, int | None]]:
        """One listing of the prefix: ``(key, size, modification time in ns or None)`` of each object."""
        # lazy: pyarrow is an optional dependency of cq
        import pyarrow.fs as pafs

        try:
            infos = self._fs.get_file_info(pafs.FileSelector(self._root, recursive=True))
        except OSError as exc:
            if isinstance(exc, FileNotFoundError):
                raise ObjectStoreError(_NO_STORE, self.uri) from None
            raise self._fail(exc, self.uri, None) from None
        self._count("list", 0)
        prefix = self._root.rstrip("/") + "/"
        return [(i.path[len(prefix):], int(i.size), i.mtime_ns) for i in infos
                if i.type == pafs.FileType.File and i.path.startswith(prefix)]

    def _take(self, entries) -> dict[str, int]:
        """The listing ``entries`` (``(key, size, mtime_ns)``) as the store's cut, checked to be a store's."""
        listing = {str(k): int(v) for k, v, _ in entries}
        # a key that other keys lie under is a directory marker some servers list as an object
        # (s3proxy's filesystem back end lists each directory with its inode size), never a store file
        dirs = {k[:i] for k in listing for i in range(len(k)) if k[i] == "/"}
        listing = {k: v for k, v in listing.items() if k not in dirs}
        _require_store({k.split("/", 1)[0] for k in listing if "/" in k}, len(listing), self.uri)
        self._modified = {str(k): (None if m is None else int(m)) for k, _, m in entries if k in listing}
        return listing

    def listing(self) -> tuple[tuple[str, int, int | None], ...]:
        """The store's listing (its cut): ``(key, size, modification time in ns or None)`` of each object,
        sorted; what ``listing=`` takes (a Spark plan hands it to its tasks, docs/object-storage.md#spark)."""
        return tuple((k, self._listing[k], self._modified.get(k)) for k in sorted(self._listing))

    def identity_of(self, key: str) -> tuple | None:
        """What names an object of the listing unchanged, for the sealed-file rule
        (docs/object-storage.md#costs): its URI, the endpoint, its listed size and modification time
        (second to last); None where the listing gives no modification time."""
        rel = self._relative(key)
        modified = self._modified.get(rel)
        if modified is None:
            return None
        return ("object", self.uri_of(rel), self._options["endpoint"], self.size_of(rel), modified)

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
        """``{kind: (requests, bytes)}`` since the store was opened, every request the server answered: ``list``,
        one kind per reader (``ConsumeQueue``, ``ConsumeQueueExt``, ``CommitLog``, ``config``, ...: their GETs), and
        ``HEAD`` (:data:`SIZE_REQUESTS`), the requests for an object's size (docs/object-storage.md#requests)."""
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

    def read_range(self, key: str, start: int, end: int, *, kind: str = "object") -> bytearray:
        """Bytes ``[start, end)`` of an object, one request; exactly that many or an
        :class:`ObjectStoreError` naming the object's URI and the range."""
        out = bytearray(max(end - start, 0))
        self.read_range_into(key, start, end, memoryview(out), kind=kind)
        return out

    def read_range_into(self, key: str, start: int, end: int, out: memoryview, *, kind: str = "object") -> None:
        """Bytes ``[start, end)`` of an object into ``out`` (a writable buffer of ``end - start`` bytes), one
        request, read straight into it; exactly that many or an :class:`ObjectStoreError` naming the
        object's URI and the range. Thread-safe (each request opens its own file)."""
        rel = self._relative(key)
        uri = self.uri_of(rel)
        size = self.size_of(rel)
        if start < 0 or end > size or start > end:
            raise ObjectStoreError(f"range outside the object's {size} listed bytes", uri, (start, end))
        if len(out) != end - start:
            raise ValueError(f"read_range_into: a buffer of {len(out)} bytes for the {end - start} of [{start}, {end})")
        reads = _ranged_reads()
        path = f"{self._root}/{rel}"
        # the read is opened by the listed size (no HEAD), so the client reports every byte asked even where
        # the server answered fewer: a short answer leaves the buffer's tail as it was, so the tail is set to
        # TAIL_MARK first and a tail still holding it asks the object's size (docs/object-storage.md#requests)
        mark = min(len(out), len(TAIL_MARK))
        tail = out[len(out) - mark:]
        before = bytes(tail)
        tail[:] = TAIL_MARK[:mark]
        try:
            try:
                got = reads.read_range_into(self._fs, path, size, start, out)
            except OSError as exc:
                error = self._fail(exc, uri, (start, end))
                # a range past a shortened object's end can fail in the client's own words (an answer
                # too long for a small buffer): the object's size says what happened
                if error.reason.startswith(_FAILED) and self._size_now(path, uri) < end:
                    error = ObjectStoreError(_PAST_END, uri, (start, end))
                raise error from None
            if mark and got == end - start and tail == TAIL_MARK[:mark]:
                got = min(got, max(self._size_now(path, uri) - start, 0))
            if end > start:
                self._count(kind, got)
                for _ in range(reads.REQUESTS_PER_READ - 1):
                    self._count(SIZE_REQUESTS, 0)  # the open's HEAD, where the read opened by path
            if got != end - start:
                raise ObjectStoreError(
                    f"object is shorter than listed: got {got} of {end - start} bytes "
                    "(truncated or overwritten since the listing)", uri, (start, end))
        except BaseException:
            tail[:] = before  # a failed read leaves the buffer's tail as it was, not the mark
            raise

    def _size_now(self, path: str, uri: str) -> int:
        """The object's size as the server says now (one HEAD request, :data:`SIZE_REQUESTS` in :meth:`stats`)."""
        try:
            size = self._fs.get_file_info(path).size
        except OSError as exc:
            raise self._fail(exc, uri, None) from None
        self._count(SIZE_REQUESTS, 0)
        return -1 if size is None else int(size)

    def read_ranges_into(self, requests: list[tuple]) -> None:
        """Each ``(key, start, end, out, kind)`` as :meth:`read_range_into`, at most :data:`FETCH_THREADS`
        at once: independent ranges fetched concurrently. A request may end with a callable, ``ready()``, run
        just before it in the same thread (the buffer's pages made ready, :mod:`cq.readers.objectlog`). Every
        request has ended when this returns; the first that failed (in the order given) raises its
        :class:`ObjectStoreError`."""
        if len(requests) <= 1:
            for request in requests:
                self._read_request(*request)
            return
        pool = _fetch_pool()
        futures = [pool.submit(self._read_request, *request) for request in requests]
        errors = [f.exception() for f in futures]  # waits for each: no request is left writing
        for exc in errors:
            if exc is not None:
                raise exc

    def _read_request(self, key: str, start: int, end: int, out: memoryview, kind: str, ready=None) -> None:
        if ready is not None:
            ready()
        self.read_range_into(key, start, end, out, kind=kind)

    def read_object(self, key: str, *, kind: str = "object") -> bytearray:
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

    def read_file(self, relpath: str) -> bytearray:
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
        ranges = coalesce(offsets, sizes, starts, [self.size_of(k) for _, k in files], gap=self.coalesce_gap,
                          budget=self.batch_bytes)
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

    def fetch_files(self, relpath: str, directory: str | None, *, kind: str, enough=None, first_head=None,
                    guess=None) -> None:
        """Copy the store files directly under ``relpath`` into the same place under ``directory`` (a
        private copy, :meth:`mirror`; None: into memory, :meth:`ranged_view`): a queue's ConsumeQueue or ext objects when a read first asks for
        the queue (``kind`` in :meth:`stats`), one request each, concurrently; :meth:`fetch_queues` of one."""
        self.fetch_queues([(relpath, kind, enough, first_head, guess)], directory)

    def fetch_queues(self, queues, directory: str | None) -> None:
        """Copy the objects of several queue directories into ``directory`` (the private copy; None: into
        memory, :meth:`ranged_view`, where a read maps them without a file): each
        ``(relpath, kind, enough, first_head[, guess])`` as :meth:`fetch_files` describes, every object's first
        request at once (:data:`FETCH_THREADS` at a time), then the heads that did not hold enough, round by round
        (the first up to ``guess(head)``, the bytes its data likely ends in, where given and it knows),
        every queue's next request of a round at once.

        Each object is fetched whole in one request, but the last of a queue with ``enough(head)``
        (whether the head holds everything a read takes from that file: its readers stop at the end of
        the data), fetched by its head alone: ``first_head()`` bytes (when given and it knows, such as the
        ext's head from its ConsumeQueue's last ext address) or :data:`HEAD_FIRST`, then twice as many
        each time until ``enough``; the copy is the object's size with the rest left a hole of zeros
        (docs/object-storage.md#costs).
        """
        with (_FileCopies(directory) if directory is not None else _MemoryCopies(self)) as copies:
            requests, growing = [], []
            for relpath, kind, enough, first_head, *more in queues:
                guess = more[0] if more else None
                files = self.list_dir_files(relpath)
                head = None
                if enough is not None and files:
                    head = first_head() if first_head is not None else None
                    head = int(head) if head else HEAD_FIRST
                for n, (_, key) in enumerate(files):
                    size = self.size_of(key)
                    copies.open(key, size)
                    end = size if head is None or n + 1 < len(files) else min(size, head)
                    given = self._preloaded.get(key)
                    if given is not None and (len(given) >= end or (end < size and enough(given))):
                        copies.region(key, 0, len(given))[:] = given  # the plan's bytes (preload): no request
                        copies.fetched([(key, 0, len(given))])
                        self._copied[key] = len(given)
                        if len(given) < size and not enough(given):
                            growing.append((key, size, len(given), kind, enough, guess))
                        continue
                    if end:
                        requests.append((key, 0, end, copies.region(key, 0, end), kind))
                    if end < size:
                        growing.append((key, size, end, kind, enough, guess))
            self.read_ranges_into(requests)
            copies.fetched(requests)
            self._copied.update((key, end) for key, _, end, *_ in requests)
            # the heads that did not hold enough: up to the guess of their data's end, then twice as many
            # bytes each round, every queue's at once
            heads = [[key, size, got, max(got, 1), kind, enough, guess]
                     for key, size, got, kind, enough, guess in growing]
            while True:
                heads = [h for h in heads if h[2] < h[1] and not (h[2] and h[5](copies.written(h[0], h[2])))]
                if not heads:
                    break
                requests = []
                for h in heads:  # [key, size, got, step, kind, enough, guess]
                    key, size, got, step, kind, _, guess = h
                    end = min(size, max(got + 2 * step, _guessed(guess, copies.written(key, got))))
                    requests.append((key, got, end, copies.region(key, got, end), kind))
                    h[2], h[3], h[6] = end, 2 * step, None  # one guess, then doubling
                self.read_ranges_into(requests)
                copies.fetched(requests)
                self._copied.update((h[0], h[2]) for h in heads)

    def preload(self, objects) -> None:
        """Take ``objects`` (``{key: bytes}`` or ``(key, bytes)`` pairs: each object's first bytes, as another
        ObjectStore of this URI fetched them at the same listing, :meth:`carried`) in place of fetching them:
        :meth:`mirror` and :meth:`fetch_queues` copy those bytes and request only what they lack
        (docs/object-storage.md#spark). A key not listed, or bytes longer than its object, is a ``ValueError``."""
        items = objects.items() if isinstance(objects, dict) else objects
        for key, data in items:
            if len(data) > self.size_of(key):
                raise ValueError(f"preloaded {len(data)} bytes of {self.uri_of(key)}, listed at {self.size_of(key)}")
            self._preloaded[str(key)] = bytes(data)

    def carried(self, directory: str, keys, budget: int) -> tuple[tuple[str, bytes], ...]:
        """What a plan carries to its tasks of the objects ``keys`` (None: those :meth:`mirror` copies whole)
        that the private copy ``directory`` holds (:meth:`mirror`, :meth:`fetch_queues`): ``(key, bytes)`` of
        each, in order, while their total stays
        within ``budget`` bytes (one that does not fit is left out; an empty object needs nothing). A queue
        object copied by its head gives its data only: up to and with the ConsumeQueue unit that ends it
        (docs/formats.md#consumequeue), the rest being the object's preallocated space; other objects whole.
        What :meth:`preload` takes (docs/object-storage.md#spark)."""
        if keys is None:
            keys = [k for k in sorted(self._listing) if self._is_whole_copy(k)]
        out, total = [], 0
        for key in keys:
            size = self.size_of(key)
            copied = self._copied.get(key)
            path = os.path.join(directory, *key.split("/"))
            if copied is None and not (os.path.isfile(path) and self._is_whole_copy(key)):
                continue  # not in the copy
            length = size if copied is None else copied
            if not length:
                continue
            with open(path, "rb") as f:
                data = f.read(length)
            if copied is not None and copied < size and self._is_queue_file(key):
                units, ended = head_units(data)
                if ended:
                    data = data[:(len(units) + 1) * fmt.CQ_STORE_UNIT_SIZE]
            if total + len(data) > budget:
                continue
            out.append((key, data))
            total += len(data)
        return tuple(out)

    def _is_whole_copy(self, key: str) -> bool:
        """Whether :meth:`mirror` copies object ``key`` whole (not a log's, a queue's or an ext's)."""
        dledger = self.dledger
        return not (key.startswith((fmt.COMMIT_LOG_DIR + "/", fmt.CONSUME_QUEUE_EXT_DIR + "/"))
                    or (dledger is not None and self._is_log_file(key, dledger)) or self._is_queue_file(key))

    def queue_tails(self, relpaths, enough, *, first: int = TAIL_FIRST, kind: str = "ConsumeQueueTail",
                    guess=None) -> dict[str, bytes]:
        """The head of the last object of each queue directory ``relpaths`` that holds the end of the queue's
        data (``enough(head)``, as :meth:`fetch_queues` takes it), in memory, not copied: ``first`` bytes,
        then up to ``guess(head)`` (the bytes its data likely ends in, when given and it knows) the first time,
        then twice as many each time until ``enough`` or the whole object, every queue's request of a round
        at once (docs/object-storage.md#costs). What a Store reads each queue's last unit from to find the
        dispatch frontier without fetching whole queues (kind ``ConsumeQueueTail`` in :meth:`stats`); a queue
        with no object is left out."""
        heads: dict[str, bytearray] = {}
        todo: list[tuple[str, str, int]] = []  # (relpath, key, size)
        for relpath in relpaths:
            files = self.list_dir_files(relpath)
            if files:
                heads[relpath] = bytearray()
                todo.append((relpath, files[-1][1], self.size_of(files[-1][1])))
        want, rounds = int(first), 0
        while todo:
            requests, bufs = [], []
            for relpath, key, size in todo:
                have = len(heads[relpath])
                end = min(size, max(want, have, _guessed(guess, heads[relpath]) if rounds == 1 else 0))
                buf = bytearray(end - have)
                bufs.append(buf)
                requests.append((key, have, end, memoryview(buf), kind))
            self.read_ranges_into(requests)
            left = []
            for (relpath, key, size), buf in zip(todo, bufs):
                heads[relpath] += buf
                if len(heads[relpath]) < size and not enough(memoryview(heads[relpath])):
                    left.append((relpath, key, size))
            todo, want, rounds = left, want * 2, rounds + 1
        return {relpath: bytes(head) for relpath, head in heads.items()}

    def ranged_view(self, key: str) -> memoryview:
        """The in-memory buffer of object ``key`` (its listed size; zeros where nothing was fetched), made on
        first use: what a reader of an object read by ranges maps (:meth:`hold` fetches into it;
        :class:`cq.readers.objectqueue.RangedConsumeQueue`, docs/object-storage.md#spark)."""
        rel = self._relative(key)
        with self._lock:
            got = self._ranged.get(rel)
            if got is None:
                got = self._ranged[rel] = (mmap.mmap(-1, max(self.size_of(rel), 1), **PRIVATE_MAP), [])
        # a view of an array over the buffer, not of the buffer: a reader that closes its maps
        # (cq.format.release_maps) releases its view, never the buffer other readers view
        return memoryview(np.frombuffer(got[0], dtype=np.uint8, count=self.size_of(rel)))

    def hold(self, spans, *, kind: str = "ConsumeQueue") -> None:
        """Fetch into the objects' buffers (:meth:`ranged_view`) the bytes of each ``(key, lo, hi)`` not held yet,
        every missing part one request, all at once (:meth:`read_ranges_into`); bytes a plan carried
        (:meth:`preload`) are taken without a request. The spans are held once every request has ended."""
        todo: dict[str, list[tuple[int, int]]] = {}
        for key, lo, hi in spans:
            rel = self._relative(key)
            if not 0 <= lo <= hi <= self.size_of(rel):
                raise ObjectStoreError(f"range outside the object's {self.size_of(rel)} listed bytes",
                                       self.uri_of(rel), (lo, hi))
            if hi > lo:
                todo.setdefault(rel, []).append((lo, hi))
        requests, done = [], []
        for rel, wanted in todo.items():
            view = self.ranged_view(rel)
            held = self._ranged[rel][1]
            given = self._preloaded.get(rel, b"")
            for lo, hi in merge_spans(wanted):
                for a, b in _missing(held, lo, hi):
                    if b <= len(given):  # the plan's bytes (preload): no request
                        view[a:b] = given[a:b]
                    else:
                        requests.append((rel, a, b, view[a:b], kind))
                    done.append((rel, a, b))
        self.read_ranges_into(requests)
        self.mark_held(done)

    def release_ranged(self) -> None:
        """Give back the memory of every object read into memory (:meth:`ranged_view`) and forget what it held: a
        later read fetches again (a Store's :meth:`~cq.Store.close`)."""
        with self._lock:
            ranged, self._ranged = self._ranged, {}
            for key in ranged:
                self._copied.pop(key, None)
        for buf, _ in ranged.values():
            with contextlib.suppress(BufferError):  # a view still held keeps its map until it is collected
                buf.close()

    def mark_held(self, spans) -> None:
        """Note the bytes ``(key, lo, hi)`` of the objects' buffers (:meth:`ranged_view`) as fetched."""
        added: dict[str, list[tuple[int, int]]] = {}
        for key, a, b in spans:
            added.setdefault(self._relative(key), []).append((a, b))
        with self._lock:
            for rel, new in added.items():  # each object's held spans merged once
                held = self._ranged[rel][1]
                held[:] = merge_spans([*held, *new])

    def copied(self, key: str) -> int | None:
        """The bytes from the start of object ``key`` that :meth:`fetch_queues` copied (None: not copied):
        all of it, or the head holding its queue's data (the rest of the copy is a hole)."""
        return self._copied.get(self._relative(key))

    @staticmethod
    def _is_log_file(key: str, dledger: str) -> bool:
        """A file of the DLedger log: ``<dledger-dir>/data/<20 digits>``."""
        head, _, name = key.rpartition("/")
        return head == f"{dledger}/{fmt.DLEDGER_DATA_DIR}" and fmt.parse_file_name(name) is not None

    @staticmethod
    def _is_queue_file(key: str) -> bool:
        """A ConsumeQueue or BatchCQ file: ``consumequeue/<topic>/<queueId>/<20 digits>`` or the same under
        ``batchconsumequeue/`` (not a RocksDB consume queue's database, which lies directly in
        ``consumequeue/``)."""
        parts = key.split("/")
        return (len(parts) == 4 and parts[0] in (fmt.CONSUME_QUEUE_DIR, fmt.BATCH_CONSUME_QUEUE_DIR)
                and parts[2].isdigit() and fmt.parse_file_name(parts[3]) is not None)

    def mirror(self, directory: str) -> str:
        """Fetch every object but the CommitLog's, the ConsumeQueues', the BatchCQs' and the ext's whole into
        ``directory`` (a private, fresh directory), one request each, and make an empty ``commitlog/``
        and each queue's empty ConsumeQueue (or BatchCQ) and ext directories there (a queue's objects are
        read when a read asks for the queue, :class:`ObjectDir`): the local view
        :class:`cq.Store` reads a store in object storage through, its CommitLog staying in the
        bucket (:class:`ObjectCommitLog`, docs/object-storage.md#costs). A store with DLedger data
        reads its logs, classic and DLedger, from the bucket too (:class:`ObjectDLedgerCommitLog`); the copy
        holds their directories. Returns ``directory``."""
        dledger = self.dledger
        if dledger is None:
            os.makedirs(os.path.join(directory, fmt.COMMIT_LOG_DIR), exist_ok=True)
        copies: list[str] = []
        for key in sorted(self._listing):
            if key.startswith(fmt.COMMIT_LOG_DIR + "/") or (dledger is not None and self._is_log_file(key, dledger)):
                if dledger is not None:  # its directory: the layout is read from the copy
                    os.makedirs(os.path.join(directory, *key.split("/")[:-1]), exist_ok=True)
                continue
            if key.startswith(fmt.CONSUME_QUEUE_EXT_DIR + "/") or self._is_queue_file(key):
                # read from the bucket, queue by queue, when a read asks for the queue
                os.makedirs(os.path.join(directory, *key.split("/")[:-1]), exist_ok=True)
                continue
            copies.append(key)
        # one request each, concurrently, straight into the copy; an empty object (the lock file) needs none
        with _FileCopies(directory) as files:
            requests = []
            for key in copies:
                size = self.size_of(key)
                files.open(key, size)
                given = self._preloaded.get(key)
                if size and given is not None and len(given) == size:  # the plan's bytes (preload): no request
                    files.region(key, 0, size)[:] = given
                elif size:
                    requests.append((key, 0, size, files.region(key, 0, size), key.split("/", 1)[0] if "/" in key else key))
            self.read_ranges_into(requests)
        return directory


class _MemoryCopies:
    """:class:`_FileCopies`'s interface over an ObjectStore's in-memory buffers (:meth:`ObjectStore.ranged_view`):
    a copy of queue objects kept in memory, not in files; what was fetched is held (:meth:`fetched`)."""

    def __init__(self, source: ObjectStore) -> None:
        self._source = source

    def open(self, key: str, size: int) -> None:
        """Nothing: an object's buffer is made on first use, its size the listing's."""

    def region(self, key: str, lo: int, hi: int) -> memoryview:
        """Bytes ``[lo, hi)`` of the buffer of ``key`` to write."""
        return self._source.ranged_view(key)[lo:hi]

    def written(self, key: str, hi: int) -> memoryview:
        """Bytes ``[0, hi)`` of the buffer of ``key``, as written so far."""
        return self._source.ranged_view(key)[:hi]

    def fetched(self, requests) -> None:
        """The ``(key, lo, hi, ...)`` requests have written their bytes: hold them."""
        self._source.mark_held([(key, lo, hi) for key, lo, hi, *_ in requests])

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc) -> None:
        pass


class _FileCopies:
    """Files of a private copy written by fetches straight into them: :meth:`open` makes the file of an
    object at its listed size (a hole of zeros until written), :meth:`region` gives writable bytes of it
    (a map whose pages are the file's, in the page cache, not this process's memory); the maps close on
    exit."""

    def __init__(self, directory: str) -> None:
        self.directory = directory
        self._maps: dict[str, tuple[str, memoryview]] = {}
        self._held: list[mmap.mmap] = []

    def open(self, key: str, size: int) -> None:
        """Make the copy of object ``key`` (``size`` bytes, a hole), once."""
        if key in self._maps:
            return
        path = os.path.join(self.directory, *key.split("/"))
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "wb+") as f:
            f.truncate(size)
            out = memoryview(bytearray())
            if size:
                m = mmap.mmap(f.fileno(), size)
                self._held.append(m)
                out = memoryview(m)
        self._maps[key] = (path, out)

    def region(self, key: str, lo: int, hi: int) -> memoryview:
        """Bytes ``[lo, hi)`` of the copy of ``key`` to write, their disk space taken first: a full disk is
        an ``OSError`` here, never a fault when the map is written."""
        path, out = self._maps[key]
        if hi > lo:
            with open(path, "r+b") as f:
                os.posix_fallocate(f.fileno(), lo, hi - lo)
        return out[lo:hi]

    def written(self, key: str, hi: int) -> memoryview:
        """Bytes ``[0, hi)`` of the copy of ``key``, as written so far."""
        return self._maps[key][1][:hi]

    def fetched(self, requests) -> None:
        """The ``(key, lo, hi, ...)`` requests have written their bytes: nothing to note for files."""

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc) -> None:
        self._maps.clear()
        for m in self._held:  # a view still held somewhere keeps its map until it is collected
            with contextlib.suppress(BufferError):
                m.close()
        self._held.clear()
