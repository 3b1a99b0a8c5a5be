"""A topic of one store or a cluster, opened for one read, and the SQL92 groups registered for it.

What a command that reads one topic does first (``rmqfilter consume``, ``why``, ``cost``, ``tail``, the
scan job): open the stores it was given, check that the topic is there, and, for ``--all-groups``, list
the topic's registered groups. Lookups of the store's public API only; nothing here is cached past the
read (docs/reading.md#clusters).
"""
from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator, Sequence

from ..readers.config import CONSUMER_FILTER_FILE
from .cluster import Cluster, each_store, open_stores
from .store import Store

__all__ = ["registered_groups", "topic_store"]


@contextlib.contextmanager
def topic_store(path: str | os.PathLike | Sequence[str], topic: str, *,
                tier: str | os.PathLike | None = None, replica=None) -> Iterator[Store | Cluster]:
    """The store at ``path``, opened for one read of ``topic`` and closed after it; several paths (or
    a glob pattern): a :class:`~cq.store.cluster.Cluster` of those brokers (docs/reading.md#clusters),
    ``replica`` picking the replica read of a broker given as several (docs/reading.md#replicas).
    ``tier``: the tier directory of a tiered store (docs/reading.md#tiered-storage; a cluster's brokers
    share one: the tier names each broker's directory).

    Raises
    ------
    LookupError
        When ``topic`` has no consume queues there (on no broker of a cluster).
    cq.StoreFormatError
        A root that is not a readable store, named (with its place among several).
    """
    store = open_stores(path, replica=replica, **({"tier": tier} if tier is not None else {}))
    try:
        if topic not in store.topics():
            raise LookupError(f"topic {topic!r} has no consume queues in {store.root}")
        yield store
    finally:
        store.close()


def registered_groups(store: Store | Cluster, topic: str) -> list[str]:
    """The SQL92 groups registered for ``topic`` (``--all-groups``), each once (a cluster's brokers each
    register a group), in the order of the registrations.

    Raises
    ------
    LookupError
        When no group is registered for ``topic``, naming the consumerFilter.json file(s) read.
    """
    groups = list(dict.fromkeys(f.group for f in store.registered_filters(topic)))
    if not groups:
        where = " and ".join(s.config_path(CONSUMER_FILTER_FILE) for _, s in each_store(store))
        raise LookupError(f"no SQL92 group is registered for topic {topic!r} in {where}")
    return groups
