"""RocketMQ's SQL92 message selector, exactly as the broker parses and evaluates it.

>>> import selector
>>> s = selector.compile("a > 5 AND TAGS IN ('A', 'B')")
>>> s.evaluate({"a": "7", "TAGS": "A"})
True
>>> s.evaluate({"TAGS": "A"}) is None     # a missing: SQL NULL
True
>>> s.matches({"a": "5.0", "TAGS": "A"})  # "5.0" is not an int32: the broker throws, no match
False

Two engines evaluate the compiled tree: the Cython engine (``_eval.pyx``) and
its pure-Python twin (``_eval_py.py``); ``ENGINE`` says which one is in use and
``RMQFILTER_PUREPYTHON=1`` forces the twin.
"""
from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Mapping, Sequence

import numpy as np

from rmqfilter_arrow import bool_array, string_scalar
from rmqfilter_engine import load as _load

from . import compiler as _compiler
from .errors import SelectorEvaluationError, SelectorSyntaxError
from .parser import parse as _parse

_eval, ENGINE = _load("selector", "_eval")

__all__ = [
    "CACHE_SIZE",
    "ENGINE",
    "ERROR",
    "FALSE",
    "TRUE",
    "UNKNOWN",
    "ExplainNode",
    "Explanation",
    "LintWarning",
    "Selector",
    "SelectorEvaluationError",
    "SelectorSyntaxError",
    "canonical",
    "compile",
    "explain",
    "lint",
]

#: Result codes of ``evaluate_many`` (int8).
FALSE, TRUE, UNKNOWN, ERROR = 0, 1, 2, 3

#: Entries kept by the parse cache (the broker keeps 100).
CACHE_SIZE = 100


class Selector:
    """A compiled selector. Immutable, picklable and safe to share between threads.

    Use :func:`compile` to build one.

    Attributes
    ----------
    sql : str
        The text it was compiled from.
    properties : frozenset of str
        Names of the properties it reads.
    """

    __slots__ = ("__weakref__", "_engine", "_program", "properties", "sql")

    def __init__(self, sql: str, program: _compiler.Program):
        self.sql = sql
        self.properties = frozenset(program.props)
        self._program = program
        self._engine = _eval.Evaluator(program)

    def __reduce__(self):
        return (_restore, (self.sql, self._program.nodes, self._program.args, self._program.props))

    def __repr__(self) -> str:
        return f"selector.compile({self.sql!r})"

    def evaluate(self, props: Mapping[str, str] | None) -> bool | None:
        """The broker's raw result for one message.

        Parameters
        ----------
        props : mapping of str to str, or None
            The message's properties; a missing key (or ``None`` for the whole
            mapping) is the broker's null.

        Returns
        -------
        True, False or None
            None is SQL NULL (UNKNOWN).

        Raises
        ------
        SelectorEvaluationError
            Where the broker's evaluation throws (a property that does not
            parse as the literal's type, strings ordered with ``>``, a boolean
            compared with a string).
        TypeError
            If ``props`` is not a mapping of str to str.
        """
        return self._engine.evaluate_value(props)

    def matches(self, props: Mapping[str, str] | None) -> bool:
        """The broker's decision: True only where :meth:`evaluate` is True (errors, NULL: False)."""
        return self._engine.matches(props)

    def evaluate_many(self, rows: Sequence[Mapping[str, str] | None]) -> np.ndarray:
        """Result codes for many messages in one call.

        Returns
        -------
        numpy.ndarray of int8
            ``selector.FALSE`` (0), ``TRUE`` (1), ``UNKNOWN`` (2, SQL NULL) or
            ``ERROR`` (3, the broker's evaluation throws) per row.
        """
        return self._engine.evaluate_many(_as_rows(rows))

    def matches_many(self, rows: Sequence[Mapping[str, str] | None]) -> np.ndarray:
        """The broker's decision for many messages: bool ndarray, True where the result is TRUE."""
        return self._engine.evaluate_many(_as_rows(rows)) == TRUE

    def evaluate_arrow(self, props, *, num_rows: int | None = None):
        """Three-valued results over Arrow data.

        Parameters
        ----------
        props : pyarrow map<string, string> array, or dict of str to pyarrow string array
            One row per message. With a dict, each array holds one property
            (null where absent); properties the selector does not read may be
            left out.
        num_rows : int, optional
            Row count; needed only when ``props`` is an empty dict.

        Returns
        -------
        pyarrow.StructArray
            Fields ``result`` (bool; null for SQL NULL and for errors) and
            ``error`` (bool; True where the broker's evaluation throws).
        """
        import pyarrow as pa  # lazy: pyarrow is optional (the spark extra); only Arrow input needs it

        codes = self._evaluate_arrow_codes(props, num_rows)
        result = bool_array(codes == TRUE, valid=codes < UNKNOWN)
        return pa.StructArray.from_arrays([result, bool_array(codes == ERROR)], names=["result", "error"])

    def matches_arrow(self, props, *, num_rows: int | None = None):
        """The broker's decision over Arrow data (see :meth:`evaluate_arrow`): a pyarrow bool array."""
        return bool_array(self._evaluate_arrow_codes(props, num_rows) == TRUE)

    def _evaluate_arrow_codes(self, props, num_rows) -> np.ndarray:
        columns, length = _arrow_columns(props, self._program.props)
        if num_rows is not None:
            if columns and any(c is not None for c in columns) and num_rows != length or num_rows < 0:
                raise ValueError(f"num_rows={num_rows} but the arrays have {length} rows")
            length = num_rows
        return self._engine.evaluate_columns(columns, length)


def _restore(sql, nodes, args, props) -> Selector:
    return Selector(sql, _compiler.Program(nodes, args, props))


def _as_rows(rows):
    if isinstance(rows, (list, tuple)):
        return rows
    if isinstance(rows, (str, bytes, Mapping)) or not isinstance(rows, Sequence):
        raise TypeError(f"rows must be a sequence of mappings, got {type(rows).__name__}")
    return list(rows)


def _arrow_columns(props, names: tuple) -> tuple[list, int]:
    """One Arrow string array (or None) per property slot, and the row count."""
    import pyarrow as pa  # lazy: pyarrow is optional (the spark extra); only Arrow input needs it
    import pyarrow.compute as pc  # lazy: as above

    def as_string_array(arr, what):
        if isinstance(arr, pa.ChunkedArray):
            arr = arr.combine_chunks()
        if not isinstance(arr, pa.Array):
            raise TypeError(f"{what}: expected a pyarrow array, got {type(arr).__name__}")
        t = arr.type
        if pa.types.is_dictionary(t):
            arr, t = arr.dictionary_decode(), t.value_type
        if pa.types.is_large_string(t) or pa.types.is_string_view(t):
            arr = arr.cast(pa.string())
        elif pa.types.is_null(t):
            return None
        elif not pa.types.is_string(t):
            raise TypeError(f"{what}: expected an Arrow string array, got {t}")
        return arr

    if isinstance(props, Mapping):
        length = None
        columns = []
        for key, arr in props.items():
            if not isinstance(key, str):
                raise TypeError(f"property names must be str, got {key!r}")
            n = len(arr)
            if length is None:
                length = n
            elif n != length:
                raise ValueError(f"property {key!r} has {n} rows, expected {length} like the others")
        for name in names:
            columns.append(as_string_array(props[name], f"property {name!r}") if name in props else None)
        return columns, length or 0
    if isinstance(props, pa.ChunkedArray):
        props = props.combine_chunks()
    if not isinstance(props, pa.MapArray):
        raise TypeError("expected a pyarrow map<string, string> array or a dict of string arrays, "
                        f"got {type(props).__name__}")
    if not (pa.types.is_string(props.type.key_type) or pa.types.is_large_string(props.type.key_type)):
        raise TypeError(f"map keys must be strings, got {props.type.key_type}")
    columns = [as_string_array(pc.map_lookup(props, string_scalar(name, props.type.key_type), "last"),
                               f"property {name!r}") for name in names]
    return columns, len(props)


_cache: OrderedDict[str, Selector | SelectorSyntaxError] = OrderedDict()
_cache_lock = threading.Lock()


def compile(sql: str) -> Selector:
    """Compile a selector as the broker does, through a bounded parse cache.

    Like the broker's cache (keyed by the exact text, 100 entries, least
    recently used evicted), it remembers failures too: compiling the same bad
    text again raises the same error without parsing again.

    Parameters
    ----------
    sql : str
        Selector text, used verbatim (no trimming).

    Returns
    -------
    Selector

    Raises
    ------
    SelectorSyntaxError
        Where the broker's compile fails; ``position``, ``line`` and
        ``column`` locate the offending token.
    TypeError
        If ``sql`` is not a str.
    """
    if not isinstance(sql, str):
        raise TypeError(f"selector must be a str, got {type(sql).__name__}")
    with _cache_lock:
        hit = _cache.get(sql)
        if hit is not None:
            _cache.move_to_end(sql)
    if hit is None:
        try:
            hit = _compile_uncached(sql)
        except SelectorSyntaxError as exc:
            hit = exc
        with _cache_lock:
            _cache[sql] = hit
            _cache.move_to_end(sql)
            while len(_cache) > CACHE_SIZE:
                _cache.popitem(last=False)
    if isinstance(hit, SelectorSyntaxError):
        raise hit.with_traceback(None)
    return hit


def _compile_uncached(sql: str) -> Selector:
    tree = _parse(sql).tree
    try:
        program = _compiler.compile_tree(tree)
    except OverflowError as exc:
        raise SelectorSyntaxError(sql, 0, f"selector too large: {exc}", "StackOverflowError") from None
    return Selector(sql, program)


from .explain import ExplainNode, Explanation, explain
from .lint import LintWarning, canonical, lint
