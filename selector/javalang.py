"""The Java rules the selector relies on: number grammars, ``Double.compare`` and the broker's
mixed-type comparison table (docs/selector-semantics.md#comparison-and-coercion).

They are written once, in the top-level :mod:`rmqfilter_java` (every Java rule the project
follows lives there, so that ``bloom`` can use the string rules too); this module keeps the
public name ``selector.javalang`` for them, and re-exports all of them.
"""
from __future__ import annotations

from rmqfilter_java import *  # the re-export is this module's purpose
from rmqfilter_java import __all__  # noqa: F401
