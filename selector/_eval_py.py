"""Pure-Python twin of the selector evaluation engine (``_eval.pyx``).

It walks the same flat post-order node array (see :mod:`selector.compiler`)
with the same loop, and spells out the broker's evaluation rules (docs/selector-semantics.md#evaluation)
in plain Python. ``RMQFILTER_PUREPYTHON=1`` selects it; the tests check that
both engines agree on every case.

Result codes: ``FALSE = 0``, ``TRUE = 1``, ``UNKNOWN = 2`` (SQL NULL),
``ERROR = 3`` (the broker's evaluation throws).
"""
from __future__ import annotations

from collections.abc import Mapping

import numpy as np

import rmqfilter_java as java

from .compiler import Program
from .errors import SelectorEvaluationError, comparison_error
from .opcodes import (
    COMPARISON_SYMBOLS,
    GUARD_FALSE,
    GUARD_NONE,
    GUARD_NULL,
    GUARD_TRUE,
    OP_AND,
    OP_BOOLCAST,
    OP_CONST,
    OP_CONTAINS,
    OP_ENDSWITH,
    OP_EQ,
    OP_GE,
    OP_GT,
    OP_IN,
    OP_ISNULL,
    OP_LE,
    OP_LT,
    OP_NEG,
    OP_NOT,
    OP_NOT_CONTAINS,
    OP_NOT_IN,
    OP_NOT_STARTSWITH,
    OP_OR,
    OP_PROP,
    OP_STARTSWITH,
)

__all__ = ["ERROR", "FALSE", "TRUE", "UNKNOWN", "Evaluator", "conversions"]

FALSE, TRUE, UNKNOWN, ERROR = 0, 1, 2, 3
_CODE = {False: FALSE, True: TRUE, None: UNKNOWN}
_ORDER_TESTS = {OP_GT: lambda c: c > 0, OP_GE: lambda c: c >= 0, OP_LT: lambda c: c < 0,
                OP_LE: lambda c: c <= 0}


def order_test(op: int, lv, rv):
    """``lv <op> rv`` for an ordering ``op`` (``>``, ``>=``, ``<``, ``<=``) of two non-NULL values, as
    the broker compares them; raises the selector's comparison error where Java would throw."""
    try:
        if isinstance(lv, str) and isinstance(rv, str):
            # Two strings are both read as doubles (the broker's string ordering rule).
            c = java.double_compare(java.parse_double(lv), java.parse_double(rv))
        else:
            c = java.compare(lv, rv)
    except (java.JavaNumberFormatError, java.JavaClassCastError):
        raise comparison_error(COMPARISON_SYMBOLS[op], lv, rv) from None
    return _ORDER_TESTS[op](c)


def _compare(lv, rv, symbol: str) -> int:
    try:
        return java.compare(lv, rv)
    except (java.JavaNumberFormatError, java.JavaClassCastError):
        raise comparison_error(symbol, lv, rv) from None


def equal_test(lv, rv):
    """``lv = rv`` as the broker tests it: True, False, or None (UNKNOWN) where one side is NULL."""
    if lv is None:
        return True if rv is None else None
    if rv is None:
        return False
    if java.equals(lv, rv):
        return True
    return _compare(lv, rv, "=") == 0


def conversions(op: int, lv, rv) -> tuple[str | None, str | None]:
    """The Java conversion :func:`order_test` (``op`` an ordering code) or :func:`equal_test` (``OP_EQ``)
    applies to each of two non-NULL operands: a name in ``java.CONVERTERS``, or None (used as is).

    ``selector.explain`` shows it; it follows the branches of the two functions above.
    """
    if op == OP_EQ:
        return (None, None) if java.equals(lv, rv) else java.conversions(lv, rv)
    if isinstance(lv, str) and isinstance(rv, str):
        return "Double.valueOf", "Double.valueOf"
    return java.conversions(lv, rv)


def match_test(op: int, v, pattern: str):
    """``v`` against a CONTAINS / STARTSWITH / ENDSWITH ``pattern`` (or its NOT form); non-strings never match."""
    if not isinstance(v, str):  # NULL, numbers and booleans never match, even negated
        return False
    if op == OP_CONTAINS or op == OP_NOT_CONTAINS:
        found = pattern in v
    elif op == OP_STARTSWITH or op == OP_NOT_STARTSWITH:
        found = v.startswith(pattern)
    else:
        found = v.endswith(pattern)
    return found if op <= OP_ENDSWITH else not found


class Evaluator:
    """Evaluates one compiled :class:`~selector.compiler.Program`; stateless, thread-safe."""

    def __init__(self, program: Program):
        self.program = program
        self._nodes = program.rows()
        self._args = program.args
        self._props = program.props

    def _load(self, props) -> list:
        """The value (str or None) of each property slot; None for the whole mapping means none."""
        if props is None:
            return [None] * len(self._props)
        if not isinstance(props, Mapping):
            raise TypeError(f"message properties must be a mapping of str to str, got {type(props).__name__}")
        values = [props.get(name) for name in self._props]
        for name, value in zip(self._props, values):
            if value is not None and not isinstance(value, str):
                raise TypeError(f"property {name!r} must be a str, got {type(value).__name__}")
        return values

    def run(self, props) -> bool | None:
        """The root's value for a mapping of property strings (None = no properties)."""
        nodes, args = self._nodes, self._args
        slots = self._load(props)
        vals: list = [None] * len(nodes)
        i, count = 0, len(nodes)
        while i < count:
            op, guard, a, b, _parent, arg = nodes[i]
            if op == OP_PROP:
                v = slots[arg]
            elif op == OP_CONST:
                v = args[arg]
            elif op == OP_BOOLCAST:
                x = vals[a]
                v = x if x is None or x is True or x is False else False
            elif op == OP_NOT:
                x = vals[a]
                v = None if x is None else not x
            elif op == OP_NEG:
                v = java.negate(vals[a])
            elif op == OP_AND:
                # Left operand is TRUE or NULL here (its FALSE guard skipped us).
                r = vals[b]
                v = False if r is False else (None if vals[a] is None or r is None else True)
            elif op == OP_OR:
                r = vals[b]
                v = True if r is True else (None if vals[a] is None or r is None else False)
            elif op == OP_EQ:
                v = equal_test(vals[a], vals[b])
            elif op == OP_ISNULL:
                v = vals[a] is None
            elif op in _ORDER_TESTS:
                # Left operand is non-NULL here (its NULL guard skipped us).
                r = vals[b]
                v = None if r is None else order_test(op, vals[a], r)
            elif op == OP_IN or op == OP_NOT_IN:
                x = vals[a]
                v = None if not isinstance(x, str) else ((x in args[arg]) == (op == OP_IN))
            else:
                v = match_test(op, vals[a], args[arg])
            vals[i] = v
            j = i
            while guard != GUARD_NONE and (
                    (guard == GUARD_FALSE and v is False) or (guard == GUARD_TRUE and v is True)
                    or (guard == GUARD_NULL and v is None)):
                j = nodes[j][4]
                vals[j] = v
                guard = nodes[j][1]
            i = j + 1
        return vals[count - 1]

    def evaluate(self, props) -> int:
        """Result code for one message; raises SelectorEvaluationError where the broker throws."""
        return _CODE[self.run(props)]

    def evaluate_value(self, props) -> bool | None:
        """True, False or None (SQL NULL) for one message; raises where the broker throws."""
        return self.run(props)

    def matches(self, props) -> bool:
        """The broker's decision for one message (NULL and errors: False)."""
        try:
            return self.run(props) is True
        except SelectorEvaluationError:
            return False

    def evaluate_many(self, rows) -> np.ndarray:
        """Result codes (int8) for a sequence of mappings; errors give ERROR."""
        out = np.empty(len(rows), dtype=np.int8)
        for i, props in enumerate(rows):
            try:
                out[i] = _CODE[self.run(props)]
            except SelectorEvaluationError:
                out[i] = ERROR
        return out

    def evaluate_columns(self, columns: list, length: int) -> np.ndarray:
        """Result codes for ``length`` rows given one column per property slot.

        Each column is a pyarrow string array or a sequence of str/None (None
        for the column itself when no row has the property).
        """
        names = self._props
        lists = [None if col is None else (col.to_pylist() if hasattr(col, "to_pylist") else list(col))
                 for col in columns]
        for name, col in zip(names, lists):
            if col is not None and len(col) != length:
                raise ValueError(f"column for {name!r} has {len(col)} rows, expected {length}")
        rows = [{names[k]: col[i] for k, col in enumerate(lists) if col is not None and col[i] is not None}
                for i in range(length)]
        return self.evaluate_many(rows)
