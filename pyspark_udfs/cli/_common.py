"""What the ``rmqfilter`` commands do alike when they run: errors and exit status, warnings, a closed pipe.

Bad input is one line on stderr, ``rmqfilter <command>: error: <what, naming the input>``, and exit
status 2 (docs/cli.md). Imports ``cq`` only, never pyspark.
"""
from __future__ import annotations

import contextlib
import os
import sys
import warnings
from collections.abc import Iterator

import cq
from selector.errors import SelectorSyntaxError

#: the exit status of bad input (a usage error, a store or selector that does not read)
BAD_INPUT = 2


def fail(prog: str, message: object) -> int:
    """Print ``prog: error: message`` to stderr; returns :data:`BAD_INPUT` for the command to return."""
    print(f"{prog}: error: {message}", file=sys.stderr)
    return BAD_INPUT


def error_text(exc: BaseException) -> str:
    """An exception's message as a user reads it: a selector's syntax error names the selector, a
    KeyError's message comes without the quotes ``str`` adds."""
    if isinstance(exc, SelectorSyntaxError):
        return f"{exc} in selector {exc.sql!r}"
    return str(exc.args[0]) if isinstance(exc, KeyError) and exc.args else str(exc)


def stdout_closed() -> int:
    """After a BrokenPipeError on stdout (``| head``): end quietly, as Unix tools do; returns 0."""
    os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    return 0


@contextlib.contextmanager
def reported_warnings(prog: str) -> Iterator[None]:
    """Print warnings (a config file read from its .bak, bloom data that does not match) to stderr, once each."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            yield
        finally:
            seen = set()
            for w in caught:
                text = str(w.message)
                if text not in seen:
                    seen.add(text)
                    print(f"{prog}: warning: {text}", file=sys.stderr)


@contextlib.contextmanager
def topic_store(path: str | list[str], topic: str) -> Iterator[cq.Store | cq.Cluster]:
    """The store at ``path``, opened for one command's read and closed after it; several paths (or
    a glob pattern): a :class:`cq.Cluster` of those brokers (docs/reading.md#clusters).

    Raises
    ------
    LookupError
        When ``topic`` has no consume queues there (on no broker of a cluster).
    cq.StoreFormatError
        A root that is not a readable store, named (with its place among several).
    """
    store = cq.open_stores(path)
    try:
        if topic not in store.topics():
            raise LookupError(f"topic {topic!r} has no consume queues in {store.root}")
        yield store
    finally:
        store.close()


def registered_groups(store: cq.Store | cq.Cluster, topic: str) -> list[str]:
    """The SQL92 groups registered for ``topic`` (``--all-groups``), each once (a cluster's brokers each
    register a group); LookupError naming the consumerFilter.json file(s) when there are none."""
    groups = list(dict.fromkeys(f.group for f in store.registered_filters(topic)))
    if not groups:
        stores = store.stores.values() if isinstance(store, cq.Cluster) else [store]
        where = " and ".join(s.config_path("consumerFilter.json") for s in stores)
        raise LookupError(f"no SQL92 group is registered for topic {topic!r} in {where}")
    return groups
