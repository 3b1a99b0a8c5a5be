"""Java's number grammars as guarded Spark expressions (IR of :mod:`._ir`).

Spark's casts from strings accept and reject different strings than Java does,
so every cast the translation emits sits behind a guard that admits exactly
Java's grammar (docs/selector-semantics.md#comparison-and-coercion, the parse functions). What Spark does, measured on
Spark 4 (``try_cast``; the same with ANSI mode on or off):

* to int/bigint: trims leading and trailing ASCII whitespace and control
  characters (``" 7"``, ``"\\x7f7"`` → 7), accepts an optional sign and ASCII
  digits, rejects decimals, exponents and every non-ASCII digit (``"٣"``);
* to double: ``java.lang.Double.parseDouble`` (so Java's trim of characters
  <= U+0020, hex floats, ``f``/``d`` suffixes, ``NaN``/``Infinity``), and on
  failure also ``inf``, ``-infinity``, ``nan``... in any case.

Java, as the broker runs it:

* ``Integer.parseInt`` / ``Long.parseLong``: optional ``+``/``-``, then one or
  more digits, where a digit is any Unicode Nd character of the Basic
  Multilingual Plane (``"٣"`` → 3); no whitespace anywhere;
* ``Double.valueOf``: as Spark's first step, nothing more;
* ``Boolean.parseBoolean``: ``"true"`` in any ASCII case.

Each parser below returns a node that is NULL where the string is NULL or not
in Java's grammar (the broker would throw), and Java's value otherwise. A
cheap fast path handles the usual ASCII forms without a regular expression;
the rest goes through a Java regex built from the digit table of
:func:`rmqfilter_java.non_ascii_bmp_digits` (Python's Unicode database), so library and Spark
agree by construction.
"""
from __future__ import annotations

from collections.abc import Callable

from rmqfilter_java import non_ascii_bmp_digits

from . import _ir as ir

__all__ = [
    "NON_ASCII_DIGITS",
    "double_compare_op",
    "integer_compare_truth",
    "parse_boolean",
    "parse_double",
    "parse_int32",
    "parse_int64",
]


NON_ASCII_DIGITS, _DIGIT_VALUES = non_ascii_bmp_digits()


def _char_class(chars: str) -> str:
    """Java regex character-class body for ``chars`` (ranges of consecutive code points)."""
    out = []
    cps = sorted(ord(c) for c in chars)
    i = 0
    while i < len(cps):
        j = i
        while j + 1 < len(cps) and cps[j + 1] == cps[j] + 1:
            j += 1
        out.append(f"\\u{cps[i]:04X}" if i == j else f"\\u{cps[i]:04X}-\\u{cps[j]:04X}")
        i = j + 1
    return "".join(out)


# \A and \z, not ^ and $: Java's $ also matches before a final line terminator.
INTEGER_REGEX = r"\A[+-]?[0-9" + _char_class(NON_ASCII_DIGITS) + r"]+\z"
_FLOAT_BODY = (
    r"[+-]?(?:NaN|Infinity|(?:(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?"
    r"|0[xX](?:[0-9a-fA-F]+\.?[0-9a-fA-F]*|\.[0-9a-fA-F]+)[pP][+-]?[0-9]+)[fFdD]?)"
)
DOUBLE_REGEX = r"\A[\x00-\x20]*" + _FLOAT_BODY + r"[\x00-\x20]*\z"


def _between(s: ir.Node, lo: str, hi_exclusive: str) -> ir.Node:
    # Byte-wise string comparison: s starts with a byte in [lo, hi) when lo and
    # hi_exclusive are one-byte strings (or share a prefix and differ in their last byte).
    return ir.op("and", ir.op("ge", s, ir.lit(lo, "string")), ir.op("lt", s, ir.lit(hi_exclusive, "string")))


def _last_is_ascii_digit(s: ir.Node) -> ir.Node:
    last = ir.op("substr", s, -1, 1)
    return ir.op("and", ir.op("ge", last, ir.lit("0", "string")), ir.op("le", last, ir.lit("9", "string")))


def _no_trailing_trimmed_byte(s: ir.Node) -> ir.Node:
    """For s that Spark's integer cast read and whose first byte is a sign or digit:
    does it also end in a digit (no byte Spark trimmed off the end)?

    Spark trims bytes <= 0x20 and 0x7F; such an s otherwise ends in an ASCII
    digit. ``>= '0'`` rules out the first kind and one endswith the second:
    one substring and two tests, where ten endswith calls (one per digit)
    cost a tenth of the filter's time.
    """
    return ir.op("and", ir.op("ge", ir.op("substr", s, -1, 1), ir.lit("0", "string")),
                 ir.op("not", ir.op("endswith", s, "\x7f")))


def _parse_integer(s: ir.Node, spark_type: str) -> ir.Node:
    # Fast path: first byte one of + , - . / 0-9 and last byte an ASCII digit. Then
    # Spark's try_cast either fails or saw no whitespace to trim, and a sign plus
    # ASCII digits is read the same by Java and Spark. When it fails the string
    # may still hold non-ASCII digits ("1٣5"), so the slow path gets its turn.
    fast = ir.op("case", [(ir.op("and", _between(s, "+", ":"), _last_is_ascii_digit(s)),
                           ir.op("try_cast", s, spark_type))], ir.lit(None, spark_type))
    return ir.op("coalesce", fast, _slow_integer(s, spark_type))


def _slow_integer(s: ir.Node, spark_type: str) -> ir.Node:
    ascii_digits = ir.op("translate", s, NON_ASCII_DIGITS, _DIGIT_VALUES)
    return ir.op("case", [(ir.op("rlike", s, INTEGER_REGEX), ir.op("try_cast", ascii_digits, spark_type))],
                 ir.lit(None, spark_type))


def integer_compare_truth(s: ir.Node, spark_type: str, compare: Callable[[ir.Node], ir.Node]) -> ir.Node:
    """TRUE where Java's ``parseInt``/``parseLong`` of ``s`` succeeds and ``compare(value)`` holds.

    FALSE or NULL elsewhere (callers only ask whether it is TRUE). Cheaper than
    ``compare(parse_int32(s))``: Spark's cast runs first and the guard only
    where the comparison holds. A non-NULL cast is Java's value unless Spark
    trimmed bytes off either end, which the first- and last-byte checks rule
    out; a NULL cast may still be Java's number with non-ASCII digits, which
    the slow path reads. The first-byte check and ``isnotnull(v)`` put the
    string and the cast twice each in the always-evaluated condition, so
    Spark's common sub-expression elimination computes each once for the
    whole CASE (one map lookup, one cast per row).
    """
    v = ir.op("try_cast", s, spark_type)
    fast = ir.op("and", ir.op("and", _between(s, "+", ":"), ir.op("isnotnull", v)), compare(v))
    return ir.op("case", [(fast, _no_trailing_trimmed_byte(s)),
                          (ir.op("isnull", v), compare(_slow_integer(s, spark_type)))], ir.lit(False))


def parse_int32(s: ir.Node) -> ir.Node:
    """``Integer.parseInt(s)`` as an ``int`` node; NULL where Java throws (or s is NULL)."""
    return _parse_integer(s, "int")


def parse_int64(s: ir.Node) -> ir.Node:
    """``Long.parseLong(s)`` as a ``bigint`` node; NULL where Java throws (or s is NULL)."""
    return _parse_integer(s, "bigint")


def parse_double(s: ir.Node) -> ir.Node:
    """``Double.valueOf(s)`` as a ``double`` node; NULL where Java throws (or s is NULL)."""
    # Spark's cast runs Double.parseDouble first and only where that throws
    # tries its own inf/nan spellings, which give an infinity or NaN. So a
    # finite result is Java's value and needs no guard; a non-finite one (or
    # NULL) must match Java's grammar first. The cast appears twice in the
    # finiteness test, where Spark's common sub-expression elimination
    # evaluates it (and the map lookup inside) once for both and for the THEN.
    cast = ir.op("try_cast", s, "double")
    finite = ir.op("and", ir.op("gt", cast, ir.lit(float("-inf"), "double")),
                   ir.op("lt", cast, ir.lit(float("inf"), "double")))
    return ir.op("case", [(finite, cast), (ir.op("rlike", s, DOUBLE_REGEX), cast)], ir.lit(None, "double"))


def parse_boolean(s: ir.Node) -> ir.Node:
    """``Boolean.parseBoolean(s)``: TRUE iff s is "true" in any ASCII case (NULL for NULL s)."""
    # Four bytes and lower-case "true": all four characters are then ASCII.
    return ir.op("and", ir.op("eq", ir.op("octet_length", s), ir.lit(4, "int")),
                 ir.op("eq", ir.op("lower", s), ir.lit("true", "string")))


_SPARK_OP = {"<": "lt", "<=": "le", ">": "gt", ">=": "ge", "=": "eq", "<>": "ne"}


def double_compare_op(symbol: str, p: ir.Node, q: ir.Node) -> ir.Node:
    """``Double.compare(p, q) <symbol> 0`` for two double nodes.

    Spark orders doubles as Java does (NaN above +Infinity and equal to itself)
    except that it treats -0.0 and 0.0 as equal, where Java puts -0.0 first.
    The correction runs only when both are zero.
    """
    spark = ir.op(_SPARK_OP[symbol], p, q)
    zero = ir.lit(0.0, "double")
    both_zero = ir.op("and", ir.op("eq", p, zero), ir.op("eq", q, zero))
    p_neg = ir.op("startswith", ir.op("cast", p, "string"), "-")
    q_neg = ir.op("startswith", ir.op("cast", q, "string"), "-")
    neg_pos = ir.op("and", both_zero, ir.op("and", p_neg, ir.op("not", q_neg)))   # (-0.0, 0.0): Java <
    pos_neg = ir.op("and", both_zero, ir.op("and", ir.op("not", p_neg), q_neg))   # (0.0, -0.0): Java >
    if symbol == "=":
        return ir.op("and", spark, ir.op("not", ir.op("or", neg_pos, pos_neg)))
    if symbol == "<>":
        return ir.op("or", spark, ir.op("or", neg_pos, pos_neg))
    if symbol == "<":
        return ir.op("or", spark, neg_pos)
    if symbol == ">":
        return ir.op("or", spark, pos_neg)
    if symbol == "<=":
        return ir.op("and", spark, ir.op("not", pos_neg))
    return ir.op("and", spark, ir.op("not", neg_pos))
