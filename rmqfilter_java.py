"""Java semantics the broker relies on, written out in Python: their one home.

The broker is Java, so its results follow Java's rules for strings and numbers. Each rule is
written here once, and every package imports it from here:

* strings are UTF-16 code units: ``String.hashCode`` (:func:`string_hash`; the tags code, the
  IndexFile's key hash, ``HashMap`` order), ``String.getBytes(UTF_8)`` (:func:`utf8_bytes`;
  the Bloom filter's key), ``String.compareTo`` (in :func:`compare`);
* Java's ``(int)`` narrowing of a double (:func:`int_cast`; the Bloom filter's parameters);
* the number grammars of ``Integer.parseInt``, ``Long.parseLong``, ``Double.valueOf`` and
  ``Boolean.parseBoolean``, with ``Character.digit``'s BMP decimal digits
  (:func:`non_ascii_bmp_digits`, which the Spark translation turns into a regex);
  ``Double.compare``; and the broker's mixed-type comparison table
  (docs/selector-semantics.md#comparison-and-coercion).

Why a top-level module: ``bloom`` imports no other package of the project
(docs/contributing.md#layers), and it needs the string rules as much as ``selector``, ``cq``
and ``pyspark_udfs`` do; like ``rmqfilter_engine`` this module imports nothing of the project.
``selector.javalang`` re-exports the selector's names. The Cython engines implement the same
rules in C (``selector/_eval.pyx``, ``cq/kernels/_tags.pyx``, ``bloom/_bloom.pyx``).

Values are represented as Python objects: ``None`` (SQL NULL), ``bool``
(Boolean), ``int`` (Integer, 32-bit), :class:`Long` (64-bit), ``float``
(Double) and ``str`` (String).
"""
from __future__ import annotations

import functools
import math
import re
import struct
import unicodedata

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
    "int_cast",
    "java_type",
    "negate",
    "non_ascii_bmp_digits",
    "parse_boolean",
    "parse_double",
    "parse_int",
    "parse_long",
    "read_lines",
    "split_literal",
    "string_hash",
    "utf8_bytes",
]

INT_MIN, INT_MAX = -(1 << 31), (1 << 31) - 1
LONG_MIN, LONG_MAX = -(1 << 63), (1 << 63) - 1


class Long(int):
    """A Java ``Long`` value (a plain ``int`` is a Java ``Integer``)."""

    __slots__ = ()

    def __repr__(self) -> str:
        return f"{int(self)}L"


class JavaNumberFormatError(ValueError):
    """``NumberFormatException``: the text is not in the target's grammar."""


class JavaClassCastError(TypeError):
    """``ClassCastException``: the broker compares a Boolean with a String."""


# ------------------------------------------------------------------ strings
def string_hash(s: str) -> int:
    """Java ``String.hashCode`` of ``s`` over UTF-16 code units, as a signed int32."""
    h = 0
    data = s.encode("utf-16-be", "surrogatepass")
    for (unit,) in struct.iter_unpack(">H", data):
        h = (31 * h + unit) & 0xFFFFFFFF
    return h - (1 << 32) if h & 0x80000000 else h


_LINE_BREAK = re.compile(r"\r\n|\r|\n")


def read_lines(text: str) -> list[str]:
    """The lines ``BufferedReader.readLine`` returns one by one: split at ``\\n``, ``\\r`` or ``\\r\\n`` only
    (not at the other breaks ``str.splitlines`` knows), without their breaks; text after the last break is
    a last line, an empty text none."""
    lines = _LINE_BREAK.split(text)
    if lines and lines[-1] == "":
        lines.pop()
    return lines


def split_literal(s: str, sep: str) -> list[str]:
    """``s.split(sep)`` for a one-character separator that is no regex metacharacter (Java's fast path):
    every part, trailing empty parts removed (``"1-".split("-")`` is ``["1"]``, ``"-".split("-")`` is empty)."""
    parts = s.split(sep)
    if not s:
        return [s]
    while parts and parts[-1] == "":
        parts.pop()
    return parts


def utf8_bytes(s: str) -> bytes:
    """UTF-8 bytes of ``s`` as Java's ``String.getBytes(UTF_8)`` produces them.

    Java sees a string as UTF-16 code units: a surrogate pair is one character
    (even if Python holds it as two code points), an unpaired surrogate becomes ``?``.
    """
    try:
        return s.encode("utf-8")
    except UnicodeEncodeError:
        joined = s.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "surrogatepass")
        return joined.encode("utf-8", "replace")


def _utf16(s: str) -> bytes:
    return s.encode("utf-16-be", "surrogatepass")


# ------------------------------------------------------------------ numbers
def int_cast(x: float) -> int:
    """Java's ``(int)`` narrowing of a double: NaN -> 0, saturating at the int32 range."""
    if math.isnan(x):
        return 0
    if x >= INT_MAX:
        return INT_MAX
    if x <= INT_MIN:
        return INT_MIN
    return int(x)


@functools.cache
def non_ascii_bmp_digits() -> tuple[str, str]:
    """``(characters, their values)``: every non-ASCII character ``Character.digit(ch, 10)``
    reads as a decimal digit (Unicode Nd of the Basic Multilingual Plane, as :func:`parse_int`
    reads them), in code-point order, each value one ASCII digit at the same position."""
    chars, values = [], []
    for cp in range(0x80, 0x10000):
        if 0xD800 <= cp <= 0xDFFF:
            continue
        d = _digit(chr(cp))
        if d >= 0:
            chars.append(chr(cp))
            values.append(str(d))
    return "".join(chars), "".join(values)


def _digit(ch: str) -> int:
    # Java's Character.digit(ch, 10) reads one UTF-16 unit: any Unicode Nd digit
    # of the Basic Multilingual Plane counts; supplementary characters never do.
    if ch < "\x80":
        return ord(ch) - 48 if "0" <= ch <= "9" else -1
    if ord(ch) > 0xFFFF:
        return -1
    return unicodedata.decimal(ch, -1)


def _parse_integer(s: str, lo: int, hi: int) -> int:
    n = len(s)
    i = 0
    negative = False
    if n and s[0] in "+-":
        negative = s[0] == "-"
        i = 1
    if i >= n:
        raise JavaNumberFormatError(f'For input string: "{s}"')
    value = 0
    for ch in s[i:]:
        d = _digit(ch)
        if d < 0:
            raise JavaNumberFormatError(f'For input string: "{s}"')
        value = value * 10 + d
    if negative:
        value = -value
    if not lo <= value <= hi:
        raise JavaNumberFormatError(f'For input string: "{s}"')
    return value


def parse_int(s: str) -> int:
    """``Integer.parseInt(s)``: optional sign, then BMP Unicode decimal digits."""
    return _parse_integer(s, INT_MIN, INT_MAX)


def parse_long(s: str) -> Long:
    """``Long.parseLong(s)``."""
    return Long(_parse_integer(s, LONG_MIN, LONG_MAX))


# Characters String.trim() removes: everything <= U+0020.
_TRIM = "".join(chr(c) for c in range(0x21))
_DECIMAL = re.compile(r"([+-]?)(?:(NaN|Infinity)|((?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?)[fFdD]?)\Z")
_HEX = re.compile(
    r"([+-]?)0[xX](?:([0-9a-fA-F]+)\.?([0-9a-fA-F]*)|\.([0-9a-fA-F]+))[pP]([+-]?[0-9]+)[fFdD]?\Z"
)


def parse_double(s: str) -> float:
    """``Double.valueOf(s)``: Java's grammar exactly, rounded to nearest.

    Trims characters <= U+0020; accepts ``NaN``/``Infinity`` (exact case,
    optional sign, no suffix), ASCII decimal numbers with optional fraction and
    exponent, hexadecimal ``0x...p...`` numbers, and one optional trailing
    ``f``/``F``/``d``/``D`` after a number.
    """
    t = s.strip(_TRIM)
    m = _DECIMAL.match(t)
    if m is not None:
        sign, special, number = m.groups()
        if special == "NaN":
            return math.nan
        if special == "Infinity":
            return -math.inf if sign == "-" else math.inf
        return float(sign + number)
    m = _HEX.match(t)
    if m is None:
        raise JavaNumberFormatError(f'For input string: "{s}"')
    sign, whole, frac, only_frac, exponent = m.groups()
    digits = (whole or "") + "." + (frac if only_frac is None else only_frac)
    try:
        value = float.fromhex(f"0x{digits}p{int(exponent)}")
    except OverflowError:
        value = math.inf
    return -value if sign == "-" else value


def parse_boolean(s: str) -> bool:
    """``Boolean.parseBoolean(s)``: true iff ``s`` is "true" in any ASCII case."""
    return len(s) == 4 and s.isascii() and s.lower() == "true"


def double_compare(a: float, b: float) -> int:
    """``Double.compare``: -0.0 < 0.0; NaN equals NaN and is above +Infinity."""
    if a < b:
        return -1
    if a > b:
        return 1
    a_nan, b_nan = math.isnan(a), math.isnan(b)
    if a_nan or b_nan:
        return (a_nan > b_nan) - (a_nan < b_nan)
    if a == 0.0:
        a_neg, b_neg = math.copysign(1.0, a) < 0, math.copysign(1.0, b) < 0
        return (b_neg > a_neg) - (b_neg < a_neg)
    return 0


def java_type(v) -> str:
    """One letter for a value's Java class: B(oolean), I(nteger), L(ong), D(ouble), S(tring)."""
    if v is True or v is False:
        return "B"
    if isinstance(v, Long):
        return "L"
    if isinstance(v, int):
        return "I"
    if isinstance(v, float):
        return "D"
    return "S"


def _natural(a, b, kind: str) -> int:
    if kind == "D":
        return double_compare(a, b)
    if kind == "S":
        a, b = _utf16(a), _utf16(b)
    return (a > b) - (a < b)


def compare(lv, rv) -> int:
    """The broker's ``compareTo`` of two non-null values, with its coercions (docs/selector-semantics.md#comparison-and-coercion).

    Raises JavaNumberFormatError where a string does not parse as the other
    side's type, JavaClassCastError for a Boolean left of a String.
    """
    lt, rt = java_type(lv), java_type(rv)
    if lt == rt:
        return _natural(lv, rv, lt)
    if lt == "B":
        if rt == "S":
            raise JavaClassCastError("class java.lang.Boolean cannot be cast to class java.lang.String")
        return -1
    if rt == "B":
        if lt == "S":
            return _natural(parse_boolean(lv), rv, "I")
        return -1
    if lt == "S":
        if rt == "I":
            return _natural(parse_int(lv), rv, "I")
        if rt == "L":
            return _natural(parse_long(lv), rv, "L")
        return double_compare(parse_double(lv), rv)
    if rt == "S":
        if lt == "I":
            return _natural(lv, parse_int(rv), "I")
        if lt == "L":
            return _natural(lv, parse_long(rv), "L")
        return double_compare(lv, parse_double(rv))
    # Two different numeric types: widen to Long, or convert to Double.
    if lt == "D" or rt == "D":
        return double_compare(float(lv), float(rv))
    return _natural(int(lv), int(rv), "L")


#: Java conversions by the name :func:`conversions` gives them: text to a Java value, or a widening.
CONVERTERS = {
    "Integer.parseInt": parse_int,
    "Long.parseLong": parse_long,
    "Double.valueOf": parse_double,
    "Boolean.parseBoolean": parse_boolean,
    "longValue": lambda v: Long(v),
    "doubleValue": float,
}
_PARSER = {"I": "Integer.parseInt", "L": "Long.parseLong", "D": "Double.valueOf"}


def conversions(lv, rv) -> tuple[str | None, str | None]:
    """The conversion :func:`compare` applies to each operand: a name in :data:`CONVERTERS`, or None.

    Follows compare's branches: a String beside a number is parsed as that
    number's type, a String left of a Boolean with ``Boolean.parseBoolean``,
    two different numeric types widen to long (or to double when either is a
    Double); equal types, and a Boolean beside a number, compare as they are.
    """
    lt, rt = java_type(lv), java_type(rv)
    if lt == rt or lt == "B":
        return None, None
    if rt == "B":
        return ("Boolean.parseBoolean" if lt == "S" else None), None
    if lt == "S":
        return _PARSER[rt], None
    if rt == "S":
        return None, _PARSER[lt]
    wide = "D" if "D" in (lt, rt) else "L"
    widen = "doubleValue" if wide == "D" else "longValue"
    return (None if lt == wide else widen), (None if rt == wide else widen)


def equals(lv, rv) -> bool:
    """``lv.equals(rv)`` for two non-null values (same class and same value)."""
    lt = java_type(lv)
    if lt != java_type(rv):
        return False
    if lt == "D":
        return double_compare(lv, rv) == 0
    return lv == rv


def negate(v):
    """The broker's unary minus: numbers negate with Java wrap-around, anything else is NULL."""
    t = java_type(v) if v is not None else None
    if t == "I":
        return -v if v != INT_MIN else INT_MIN
    if t == "L":
        return Long(-v if v != LONG_MIN else LONG_MIN)
    if t == "D":
        return -v
    return None
