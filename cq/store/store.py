"""A broker store directory, and what a consumer group would receive from it.

:class:`Store` is the public face; each of its concerns has a room of its own in :mod:`cq.store`:
:mod:`~cq.store.readers` (opening, caching and following the readers of a live store),
:mod:`~cq.store.metadata` (the broker's config files, IndexFiles and timer files),
:mod:`~cq.store.cuts` (consistent cuts), :mod:`~cq.store.consume` (what a group receives) and
:mod:`~cq.store.decide` (the broker's path for a run of units, which every reader of decisions calls).
"""
from __future__ import annotations

import dataclasses
import os
import shutil
import tempfile
import weakref

from .. import format as fmt
from ..readers.objects import ObjectStore, is_object_uri, register_mirror
from .consume import CONSUME_BATCH, ConsumeResult, ConsumeRoom, ConsumeStats
from .cuts import CutRoom, StoreCut
from .metadata import MetadataRoom
from .modes import detect_layout
from .readers import ReaderRoom
from .tiered import TierRoom

__all__ = ["CONSUME_BATCH", "REFRESH", "ConsumeResult", "ConsumeStats", "Store", "StoreCut"]

#: Values of ``Store(refresh=...)``.
REFRESH = ("always", "never")


def _remove_mirror(directory: str) -> None:
    # its name stays registered: an error raised inside the read is often printed after the close
    shutil.rmtree(directory, ignore_errors=True)


def _reopen_store(root: str, kwargs: dict) -> Store:
    return Store(root, **kwargs)


class Store(ReaderRoom, MetadataRoom, CutRoom, ConsumeRoom, TierRoom):
    """Read-only view of a RocketMQ broker store directory.

    Parameters
    ----------
    root : str or os.PathLike
        The ``storePathRootDir`` (holding ``commitlog/``, ``consumequeue/``, ...).
    commit_log_file_size, consume_queue_file_size, ext_file_size : int, optional
        Override the file sizes; by default each is inferred from the files present.
    tier : str or os.PathLike, optional
        The tier directory (``tieredStoreFilePath``) of a broker that ran RocketMQ's tiered store with its
        POSIX back end: reads below a queue's local minimum come from there, as the broker serves them
        (docs/reading.md#tiered-storage). A store whose ``config/tieredStoreMetadata.json`` lists tiered
        segments cannot be opened without it (:class:`cq.TieredStoreError`).
    refresh : {"always", "never"}, default "always"
        ``"always"``: each read (:meth:`consume`, :meth:`cut`) first follows the
        broker (:meth:`refresh`), so it sees the store as it is when it starts.
        ``"never"``: the Store keeps the view it took on first use; units written
        after that lie outside it (docs/live.md).

    Notes
    -----
    A Store may be shared between threads (readers are opened once under a
    lock) and pickles as its root and options (the copy maps the files again).
    :meth:`consume` opens each queue's readers for its pass and closes them
    after; :meth:`consume_queue` and :meth:`ext` cache theirs until
    :meth:`close` (each mapped file holds a file descriptor).

    Examples
    --------
    >>> store = Store("tests/data/golden_store")            # doctest: +SKIP
    >>> store.topics()                                       # doctest: +SKIP
    ['GoldenFilterTopic', 'GoldenPlainTopic']
    >>> result = store.consume("GoldenFilterTopic", "GID_SQL_A", sql="a > 5 AND b = 'abc'")  # doctest: +SKIP
    >>> msgs = list(result); result.stats.passed_commit_log  # doctest: +SKIP
    """

    def __init__(self, root: str | os.PathLike, *, commit_log_file_size: int | None = None,
                 consume_queue_file_size: int | None = None, ext_file_size: int | None = None,
                 refresh: str = "always", tier: str | os.PathLike | None = None,
                 object_options: dict | None = None) -> None:
        if refresh not in REFRESH:
            raise ValueError(f"refresh must be one of {', '.join(REFRESH)}, got {refresh!r}")
        self.refresh_mode = refresh
        self.root = os.fspath(root)
        self.uri: str | None = None  # a store in object storage: its URI (docs/object-storage.md)
        self.source: ObjectStore | None = None
        if is_object_uri(self.root):
            self._open_object_store(self.root, object_options or {})
        # which CommitLog, consume queues and metadata the root holds (docs/reading.md#store-modes):
        # a layout rmqfilter cannot read is an error here, never an empty answer later
        self.layout = detect_layout(self.root)
        if self.source is not None and self.layout.dledger_dir is not None:
            # the copy holds the logs' directories, not their files: whether classic files lie below
            # the DLedger ones (a migrated store) is the listing's to say
            migrated = bool(self.source.list_dir_files(fmt.COMMIT_LOG_DIR))
            self.layout = dataclasses.replace(self.layout, commit_log="dledger+classic" if migrated else "dledger")
        self.layout.check_consume_queues()
        self._init_readers(commit_log_file_size, consume_queue_file_size, ext_file_size)
        self._init_cuts()
        self._init_tier(tier)

    def _open_object_store(self, uri: str, options: dict) -> None:
        """Open a store in object storage (docs/object-storage.md): list it once (the snapshot read),
        fetch what is not the CommitLog into a private temporary directory, removed on close or
        when the Store is collected, and read the CommitLog from the bucket."""
        self.source = ObjectStore(uri, **options)
        self.uri = uri
        # what a copy opens again: a listing given (a Spark plan's) is this Store's cut, not the copy's, and
        # the objects it preloads are that cut's
        self._object_options = {k: v for k, v in options.items() if k not in ("listing", "preloaded")}
        mirror = tempfile.mkdtemp(prefix="rmqfilter-object-store-")
        register_mirror(mirror, uri)
        self._mirror_cleanup = weakref.finalize(self, _remove_mirror, mirror)
        try:
            self.source.mirror(mirror)
        except BaseException:
            self._mirror_cleanup()
            raise
        self.root = mirror

    def __reduce__(self):
        if self.uri is not None:  # the URI and options, never the mirror nor a credential
            return _reopen_store, (self.uri, {"commit_log_file_size": self._cl_size,
                                              "consume_queue_file_size": self._cq_size,
                                              "ext_file_size": self._ext_size, "refresh": self.refresh_mode,
                                              "tier": self.tier_path, "object_options": self._object_options})
        # a Store pickles as its root and options: the copy opens the files again
        return _reopen_store, (self.root, {"commit_log_file_size": self._cl_size,
                                           "consume_queue_file_size": self._cq_size,
                                           "ext_file_size": self._ext_size,
                                           "refresh": self.refresh_mode, "tier": self.tier_path})

    def __repr__(self) -> str:
        if self.uri is not None:
            return f"Store({self.uri!r})"
        return f"Store({self.root!r})" if self.tier is None else f"Store({self.root!r}, tier={self.tier_path!r})"

    def close(self) -> None:
        """Release every mapped file (the tier's segments too)."""
        super().close()
        self._close_tier()
        if self.uri is not None:
            self._mirror_cleanup()
