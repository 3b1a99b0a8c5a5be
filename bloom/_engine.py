"""Choose between a package's Cython engine and its pure-Python twin.

Each kernel module ``<package>/_<name>.pyx`` has a readable twin
``<package>/_<name>_py.py`` with the same names and semantics (msgpack's
model). ``RMQFILTER_PUREPYTHON=1`` selects the twins everywhere; without it
the compiled engine is used when it has been built, and the twin otherwise.
"""
from __future__ import annotations

import importlib
import os
from types import ModuleType

PUREPYTHON = os.environ.get("RMQFILTER_PUREPYTHON", "") not in ("", "0")


def load(package: str, name: str) -> tuple[ModuleType, str]:
    """Return ``(module, engine)`` for kernel ``name`` of ``package``.

    ``engine`` is ``"cython"`` or ``"python"``.
    """
    if not PUREPYTHON:
        try:
            return importlib.import_module(f"{package}.{name}"), "cython"
        except ImportError:
            pass
    return importlib.import_module(f"{package}.{name}_py"), "python"
