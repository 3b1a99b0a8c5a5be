"""Stores kept open across reads in one process, checked before each use (docs/live.md#cached-readers).

A Spark Python worker reads many slices of one store, query after query and trigger after
trigger; opening a :class:`~cq.store.store.Store` costs a CommitLog recovery walk and a
ConsumeQueue recovery per queue. :class:`StoreCache` keeps the few stores a process reads
and hands one out only after :meth:`Store.replaced <cq.store.store.Store.replaced>` says it still
reads the store at its root; the reader then follows the broker (new data, expired files)
through the Store's own refresh. The cache is bounded: past ``max_stores`` roots the least
recently used Store is closed (its maps and file descriptors released).
"""
from __future__ import annotations

import logging
import os
import threading
from collections import OrderedDict

from ..errors import StoreFormatError
from .store import Store

__all__ = ["DEFAULT_MAX_STORES", "StoreCache"]

#: Stores a cache keeps by default: a worker rarely reads more than a few stores at once.
DEFAULT_MAX_STORES = 4

_LOG = logging.getLogger("rmqfilter.storecache")


def _key(root: str | os.PathLike, tier: str | os.PathLike | None) -> str:
    """A cached Store's key: its root, and its tier when read with one."""
    key = os.path.abspath(os.fspath(root))
    return key if tier is None else f"{key}\0{os.path.abspath(os.fspath(tier))}"


class StoreCache:
    """At most ``max_stores`` open :class:`~cq.store.store.Store` objects by root, least recently used closed first.

    Parameters
    ----------
    max_stores : int, default DEFAULT_MAX_STORES
        Roots kept open; opening one more closes the least recently used.

    Notes
    -----
    :meth:`get` checks a cached Store before returning it: a Store whose root
    directory or mapped files were replaced is closed and the root opened
    again. It does not refresh the Store: each read follows the broker itself
    (:meth:`Store.cut`, :meth:`Store.follow`). Safe to share between threads
    for :meth:`get`; a Store it returns is shared as a Store is.

    Examples
    --------
    >>> cache = StoreCache(max_stores=2)
    >>> store = cache.get("tests/data/golden_store")
    >>> cache.get("tests/data/golden_store") is store
    True
    >>> cache.clear()
    """

    def __init__(self, max_stores: int = DEFAULT_MAX_STORES) -> None:
        if int(max_stores) < 1:
            raise ValueError(f"max_stores must be at least 1, got {max_stores!r}")
        self.max_stores = int(max_stores)
        self._stores: OrderedDict[str, Store] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, root: str | os.PathLike, *, tier: str | os.PathLike | None = None) -> Store:
        """The Store of ``root`` (read with ``tier``, docs/reading.md#tiered-storage): the cached one if it still
        reads the store there, else a new one.

        Raises
        ------
        StoreFormatError
            ``root`` is not a store, or the cached Store's directory was deleted
            (the Store is dropped from the cache).
        """
        key = _key(root, tier)
        with self._lock:
            store = self._stores.pop(key, None)
            if store is not None:
                try:
                    reason = store.replaced()
                except StoreFormatError:
                    store.close()
                    raise
                if reason is not None:
                    _LOG.info("reopening %s: %s", key, reason)
                    store.close()
                    store = None
            if store is None:
                store = Store(root, tier=tier)
            self._stores[key] = store
            while len(self._stores) > self.max_stores:
                _, old = self._stores.popitem(last=False)
                old.close()
            return store

    def peek(self, root: str | os.PathLike, *, tier: str | os.PathLike | None = None) -> Store | None:
        """The cached Store of ``root`` (and ``tier``) as it is (not checked, not opened), or None."""
        return self._stores.get(_key(root, tier))

    def clear(self) -> None:
        """Close and forget every cached Store."""
        with self._lock:
            for store in self._stores.values():
                store.close()
            self._stores.clear()

    def __len__(self) -> int:
        return len(self._stores)

    def __contains__(self, root: object) -> bool:
        return isinstance(root, (str, os.PathLike)) and os.path.abspath(os.fspath(root)) in self._stores
