"""The Java rules the selector relies on: number grammars, ``Double.compare`` and the broker's
mixed-type comparison table (docs/selector-semantics.md#comparison-and-coercion).

They are written once, in the top-level :mod:`rmqfilter_java` (every Java rule the project
follows lives there, so that ``bloom`` can use the string rules too); this module keeps the
selector's public names for them.
"""
from __future__ import annotations

from rmqfilter_java import (
    CONVERTERS,
    INT_MAX,
    INT_MIN,
    LONG_MAX,
    LONG_MIN,
    JavaClassCastError,
    JavaNumberFormatError,
    Long,
    compare,
    conversions,
    double_compare,
    equals,
    java_type,
    negate,
    parse_boolean,
    parse_double,
    parse_int,
    parse_long,
)

__all__ = [
    "CONVERTERS",
    "INT_MAX",
    "INT_MIN",
    "LONG_MAX",
    "LONG_MIN",
    "JavaClassCastError",
    "JavaNumberFormatError",
    "Long",
    "compare",
    "conversions",
    "double_compare",
    "equals",
    "java_type",
    "negate",
    "parse_boolean",
    "parse_double",
    "parse_int",
    "parse_long",
]
