"""Every store-file reader, collected from the reader modules (docs/contributing.md#add-a-reader).

Each reader module of ``cq.readers`` declares its own ``READERS = (ReaderEntry(...),)``
(:class:`cq.readers.entry.ReaderEntry`: how to open the reader over a store directory, which
files it reads there, and how to read it whole). :data:`READERS` here is all of them, in the
order of their module names; modules whose name starts with ``_`` are skipped. The generic tests
(pickling and threads, the read-only proof, corrupt files, the fuzz sweeps) run over
:data:`READERS`, so a new reader is covered by the entry in its own module.
"""
from __future__ import annotations

import importlib
import pkgutil

from .entry import ReaderEntry

__all__ = ["READERS", "ReaderEntry"]

_PACKAGE = __name__.rpartition(".")[0]


def _collect() -> tuple[ReaderEntry, ...]:
    """The ``READERS`` of every public module of the package, sorted by module name."""
    package = importlib.import_module(_PACKAGE)
    names = sorted(info.name for info in pkgutil.iter_modules(package.__path__))
    entries: list[ReaderEntry] = []
    for name in names:
        if name.startswith("_") or f"{_PACKAGE}.{name}" == __name__:
            continue
        declared = getattr(importlib.import_module(f"{_PACKAGE}.{name}"), "READERS", ())
        for entry in declared:
            if not isinstance(entry, ReaderEntry):
                raise TypeError(f"{_PACKAGE}.{name}.READERS holds {entry!r}, not a ReaderEntry")
            if any(entry.name == seen.name for seen in entries):
                raise ValueError(f"{_PACKAGE}.{name}.READERS declares {entry.name!r} a second time")
            entries.append(entry)
    return tuple(entries)


READERS: tuple[ReaderEntry, ...] = _collect()
