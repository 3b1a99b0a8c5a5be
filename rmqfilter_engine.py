"""The engine switch of rmqfilter: each kernel's Cython engine or its pure-Python twin.

Each kernel module ``<package>/_<name>.pyx`` has a readable twin
``<package>/_<name>_py.py`` with the same names and semantics (msgpack's model).
``RMQFILTER_PUREPYTHON=1`` selects the twins everywhere; without it the compiled
engine is used when it has been built, and the twin otherwise.

Why a top-level module of its own: the switch is used by every package that has a
kernel (``bloom``, ``selector``, ``cq``) and belongs to none of them. Kept in one
package, it made the others import that package (the selector and the store used
to import ``bloom._engine``, another package's private module, just to choose an
engine). Here each package imports it without importing another package's
internals, as msgpack's engines share a neutral ``exceptions`` module. It imports
nothing of the project and only the standard library, so it can never be part of
an import cycle. The four package folders stay as the design has them.
"""
from __future__ import annotations

import importlib
import os
from types import ModuleType

__all__ = ["PUREPYTHON", "load"]

#: True when ``RMQFILTER_PUREPYTHON`` is set to anything but "" or "0" (read once, at import).
PUREPYTHON = os.environ.get("RMQFILTER_PUREPYTHON", "") not in ("", "0")


def load(package: str, name: str) -> tuple[ModuleType, str]:
    """Return ``(module, engine)`` for kernel ``name`` of ``package``.

    Parameters
    ----------
    package : str
        The package holding the kernel, e.g. ``"cq.kernels"``.
    name : str
        The kernel's module name, e.g. ``"_ext"``; its twin is ``name + "_py"``.

    Returns
    -------
    (module, str)
        The kernel module and ``"cython"`` or ``"python"``.
    """
    if not PUREPYTHON:
        try:
            return importlib.import_module(f"{package}.{name}"), "cython"
        except ImportError:
            pass
    return importlib.import_module(f"{package}.{name}_py"), "python"
