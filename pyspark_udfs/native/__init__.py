"""SQL92 selectors compiled to native Spark Columns (no Python UDF in the plan).

:func:`selector_column` turns a selector into an ordinary Spark expression over
a ``map<string,string>`` properties column, so the whole filter runs inside the
JVM (whole-stage code generation, no Arrow round trip to Python). The result
equals the broker's decision (``selector.compile(sql).matches``) row for row:

* the broker's three-valued logic with its left-to-right short circuit, so an
  exception on the right of ``FALSE AND ...`` never surfaces, and one on the
  left of ``... OR TRUE`` does (docs/selector-semantics.md#evaluation);
* the asymmetric NULL rules of ``=`` and ``<>``; IN / NOT IN; BETWEEN as two
  comparisons; the CONTAINS family (empty pattern or NULL operand: FALSE);
  boolean cast of a bare property (any string is FALSE); negation of a string
  is NULL; int32/int64 wrap-around in negated literals;
* Java's number grammars as guards in front of every cast
  (``Integer.parseInt`` with BMP Unicode digits, ``Long.parseLong``,
  ``Double.valueOf`` with hex floats and ``f``/``d`` suffixes,
  ``Boolean.parseBoolean``), see :mod:`pyspark_udfs.native._java`; ``try_cast``
  and ``map[key]`` never throw, so the translation is the same with
  ``spark.sql.ansi.enabled`` on or off;
* Java's ``Double.compare`` (NaN above +Infinity, -0.0 below 0.0).

String *ordering* by UTF-16 code units never arises at run time: the broker
converts both Strings of ``<``/``>`` to doubles, and compares strings only for
equality, where code units and UTF-8 bytes agree.

What is not translated: a selector nested deeper than
``native._compile.MAX_DEPTH`` or whose expression would exceed
``MAX_TREE_SIZE`` nodes. Those run in the Arrow UDF
(:func:`pyspark_udfs.functions.selector_match` with ``engine="arrow"``) instead, with a
:class:`NativeFallbackWarning` naming the reason; ``explain()`` then shows an
``ArrowEvalPython`` node. :func:`translate` tells in advance which it will be.

Three-valued form
-----------------
:func:`selector_value_column` returns ``struct<result: boolean, error:
boolean, error_cause: string>``, the same ``result``/``error`` pair as
``Selector.evaluate_arrow``:

========================  ========  =======  ========================
broker outcome            result    error    error_cause
========================  ========  =======  ========================
TRUE / FALSE              true/false false   NULL
NULL (UNKNOWN)            NULL      false    NULL
evaluation throws         NULL      true     ``RuntimeException`` or
                                             ``ClassCastException``
selector does not compile NULL      true     ``MQFilterException``
========================  ========  =======  ========================
"""
from __future__ import annotations

import functools
import re
import warnings
from dataclasses import dataclass

import pyarrow as pa
from pyspark.sql import Column
from pyspark.sql import functions as F
from pyspark.sql.functions import arrow_udf
from pyspark.sql.types import BooleanType

import selector
from selector.parser import parse as _parse

from .. import _batch
from . import _compile as nc
from . import _ir as ir

ColumnOrName = Column | str

__all__ = ["NativeFallbackWarning", "NativeSelector", "selector_column", "selector_value_column",
           "translate"]

PROPS_TYPE = "map<string,string>"
VALUE_TYPE = "struct<result:boolean,error:boolean,error_cause:string>"
SYNTAX_ERROR_CAUSE = "MQFilterException"


class NativeFallbackWarning(UserWarning):
    """A selector runs in the Arrow UDF because the native translation cannot express it exactly."""


@dataclass(frozen=True)
class NativeSelector:
    """How a selector runs on Spark; build one with :func:`translate`.

    Attributes
    ----------
    sql : str
        The selector text.
    native : bool
        True when :meth:`column` is a native expression; False when it falls
        back to the Arrow UDF (or when the selector does not compile).
    reason : str or None
        Why it is not native: the construct that cannot be expressed, or the
        syntax error. None when native.
    syntax_error : selector.SelectorSyntaxError or None
        The compile error, when the broker would reject the selector.
    size : int
        Nodes of the native expression (0 when not native).
    """

    sql: str
    native: bool
    reason: str | None
    syntax_error: selector.SelectorSyntaxError | None
    size: int
    _translation: nc.Translation | None = None

    @property
    def engine(self) -> str:
        """``"native"``, ``"arrow-udf"`` (fallback) or ``"constant"`` (selector does not compile)."""
        if self.syntax_error is not None:
            return "constant"
        return "native" if self.native else "arrow-udf"

    def column(self, props: ColumnOrName, *, on_syntax_error: str = "false") -> Column:
        """The broker's decision per row (BOOLEAN, never NULL); see :func:`selector_column`."""
        _check_on_syntax_error(on_syntax_error)
        props = _Props(props)
        name = f"selector_column({self.sql})"
        if self.syntax_error is not None:
            if on_syntax_error == "raise":
                raise self.syntax_error
            return F.lit(False).alias(name)
        if not self.native:
            self._warn()
            return arrow_match_column(self.sql, selector.compile(self.sql), props.column)
        return props.lower(self._translation.match).alias(name)

    def match_column(self, props: ColumnOrName) -> Column:
        """The native match expression, unnamed; ``ValueError`` when the selector is not native."""
        if not self.native:
            raise ValueError(f"selector {self.sql!r} has no native form: {self.reason}")
        return _Props(props).lower(self._translation.match)

    def value_column(self, props: ColumnOrName) -> Column:
        """The broker's raw result per row as a struct; see :func:`selector_value_column`."""
        props = _Props(props)
        name = f"selector_value({self.sql})"
        if self.syntax_error is not None:
            return F.struct(F.lit(None).cast("boolean").alias("result"), F.lit(True).alias("error"),
                            F.lit(SYNTAX_ERROR_CAUSE).alias("error_cause")).alias(name)
        if not self.native:
            self._warn()
            return _value_udf(self.sql)(props.column).alias(name)
        t = self._translation
        value, error = props.lower(t.value), props.lower(t.error)
        return F.struct(value.alias("result"), error.isNotNull().alias("error"),
                        error.alias("error_cause")).alias(name)

    def _warn(self) -> None:
        warnings.warn(f"selector {self.sql!r}: {self.reason}; it runs in the Arrow UDF "
                      "(selector_match) instead of a native Spark expression", NativeFallbackWarning,
                      stacklevel=4)


def _check_on_syntax_error(value: str) -> None:
    if value not in ("false", "raise"):
        raise ValueError(f"on_syntax_error must be 'false' or 'raise', got {value!r}")


_SIMPLE_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*\Z")


class _Props:
    """The properties column, and its SQL text when it is a plain column name."""

    def __init__(self, props: ColumnOrName):
        if isinstance(props, str):
            self.sql = props if _SIMPLE_NAME.match(props) else None
            props = F.col(props)
        elif isinstance(props, Column):
            self.sql = None
        else:
            raise TypeError(f"props must be a Column or a column name, got {type(props).__name__}")
        self.column = props

    def lower(self, node: ir.Node) -> Column:
        # SQL text is one call into the JVM; node-by-node Py4J building is the
        # general path (any Column), with the same expression as the result.
        if self.sql is not None:
            return F.expr(ir.to_sql(node, self.sql))
        return ir.lower(node, self.column)


@functools.lru_cache(maxsize=512)
def translate(sql: str) -> NativeSelector:
    """Plan how ``sql`` runs on Spark: natively when exact, otherwise in the Arrow UDF.

    Needs no SparkSession. Cached by the exact text.

    Parameters
    ----------
    sql : str
        Selector text.

    Returns
    -------
    NativeSelector

    Raises
    ------
    TypeError
        If ``sql`` is not a str.

    Examples
    --------
    >>> from pyspark_udfs.native import translate
    >>> translate("a > 5 AND TAGS IN ('A', 'B')").engine
    'native'
    """
    if not isinstance(sql, str):
        raise TypeError(f"selector must be a str, got {type(sql).__name__}")
    try:
        tree = _parse(sql).tree
    except selector.SelectorSyntaxError as exc:
        return NativeSelector(sql, False, f"syntax error: {exc}", exc, 0)
    except RecursionError:
        return NativeSelector(sql, False, "nesting too deep for the parser", None, 0)
    try:
        translation = nc.translate_tree(tree)
    except nc.NotTranslatable as exc:
        return NativeSelector(sql, False, f"not expressible natively: {exc.construct}", None, 0)
    return NativeSelector(sql, True, None, None, translation.size, translation)


def selector_column(sql: str, props: ColumnOrName, *, on_syntax_error: str = "false") -> Column:
    """Whether the broker delivers each message to a consumer with selector ``sql``, as a native Column.

    Parameters
    ----------
    sql : str
        Selector text, e.g. ``"a > 5 AND TAGS IN ('A', 'B')"``.
    props : Column or str
        ``map<string,string>`` column of message properties. A missing key, or
        a NULL map, is an absent property.
    on_syntax_error : {"false", "raise"}
        A selector the broker cannot compile matches nothing at the broker, so
        by default the column is the constant FALSE; ``"raise"`` raises
        :class:`selector.SelectorSyntaxError` instead.

    Returns
    -------
    Column
        BOOLEAN, never NULL: True only where the broker's evaluation is TRUE
        (``Selector.matches``); NULL results and evaluation errors are False.
        A native expression, unless :func:`translate` says otherwise (then the
        Arrow UDF, with a :class:`NativeFallbackWarning`).

    Examples
    --------
    >>> from pyspark_udfs import selector_column
    >>> df.filter(selector_column("a > 5 AND TAGS IN ('A', 'B')", "properties"))  # doctest: +SKIP
    """
    return translate(sql).column(props, on_syntax_error=on_syntax_error)


def selector_value_column(sql: str, props: ColumnOrName) -> Column:
    """The broker's raw three-valued result of ``sql`` per row, as a native Column.

    Parameters
    ----------
    sql : str
        Selector text.
    props : Column or str
        ``map<string,string>`` column of message properties.

    Returns
    -------
    Column
        ``struct<result: boolean, error: boolean, error_cause: string>``:
        ``result`` is TRUE/FALSE, or NULL for SQL NULL (and where ``error``);
        ``error`` is True where the broker's evaluation throws, with
        ``error_cause`` the Java exception class (``RuntimeException``,
        ``ClassCastException``), or where the selector does not compile
        (``MQFilterException``).

    Examples
    --------
    >>> df.select(selector_value_column("a > 5", "properties").alias("r"))  # doctest: +SKIP
    """
    return translate(sql).value_column(props)


def arrow_match_column(sql: str, compiled: selector.Selector, props: ColumnOrName) -> Column:
    """The Arrow UDF form of :func:`pyspark_udfs.functions.selector_match` (Python workers).

    Each worker makes one call into the library's batch kernel per Arrow batch;
    only the properties ``compiled`` reads leave the JVM. The fallback of
    :meth:`NativeSelector.column` and ``selector_match(engine="arrow")``.
    """
    names = tuple(sorted(compiled.properties))
    props = F.col(props) if isinstance(props, str) else props
    if names:
        # try_element_at: NULL for an absent key even under ANSI mode.
        columns = [F.try_element_at(props, F.lit(name)) for name in names]
    else:
        columns = [F.lit(None).cast("string")]

    def match(*arrays: pa.Array) -> pa.Array:
        return _batch.selector_match_columns(sql, names, list(arrays))

    udf = arrow_udf(match, BooleanType())
    return udf(*columns).alias(f"selector_match({sql})")


def _value_udf(sql: str):
    """Arrow UDF fallback for :func:`selector_value_column` (same struct)."""
    def evaluate(props: pa.Array) -> pa.Array:
        compiled = selector.compile(sql)
        results, errors, causes = [], [], []
        for row in props.to_pylist():
            try:
                results.append(compiled.evaluate(dict(row) if row is not None else None))
                errors.append(False)
                causes.append(None)
            except selector.SelectorEvaluationError as exc:
                results.append(None)
                errors.append(True)
                causes.append(exc.cause)
        return pa.StructArray.from_arrays(
            [pa.array(results, pa.bool_()), pa.array(errors, pa.bool_()), pa.array(causes, pa.string())],
            names=["result", "error", "error_cause"])

    return arrow_udf(evaluate, VALUE_TYPE)
