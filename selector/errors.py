"""Exceptions raised by the selector package, and their wording (shared by both engines).

Like msgpack's ``exceptions`` module, this is neutral ground: the Cython evaluator
and its pure-Python twin both raise :class:`SelectorEvaluationError` worded by
:func:`comparison_error`, so neither engine depends on the other.
"""
from __future__ import annotations

import rmqfilter_java as java

__all__ = ["SelectorEvaluationError", "SelectorSyntaxError", "comparison_error", "line_column"]


def line_column(text: str, position: int) -> tuple[int, int]:
    """Return the 1-based ``(line, column)`` of ``position`` in ``text``.

    Lines end at LF, CR or CRLF, as in the broker's lexer.
    """
    position = max(0, min(position, len(text)))
    head = text[:position]
    line = 1 + head.count("\n") + head.count("\r") - head.count("\r\n")
    start = max(head.rfind("\n"), head.rfind("\r")) + 1
    return line, position - start + 1


class SelectorSyntaxError(ValueError):
    """A selector the broker would refuse to compile.

    Attributes
    ----------
    sql : str
        The selector text.
    position : int
        0-based offset of the offending token (``len(sql)`` at end of input).
    line, column : int
        1-based line and column of ``position``.
    reason : str
        The message without the position prefix.
    cause : str
        The class of the broker's underlying error: ``"ParseException"``,
        ``"TokenMgrError"`` (lexical), ``"RuntimeException"`` (semantic check),
        ``"NumberFormatException"`` or ``"ClassCastException"``.
    """

    def __init__(self, sql: str, position: int, reason: str, cause: str = "ParseException"):
        self.sql = sql
        self.position = position
        self.line, self.column = line_column(sql, position)
        self.reason = reason
        self.cause = cause
        super().__init__(f"{self.line}:{self.column}: {reason}")

    def __reduce__(self):
        return (type(self), (self.sql, self.position, self.reason, self.cause))


class SelectorEvaluationError(ValueError):
    """Raised by ``Selector.evaluate`` where the broker's evaluation throws.

    ``cause`` is the broker's exception class (``"RuntimeException"`` for a
    failed number conversion or string ordering, ``"ClassCastException"`` for a
    boolean compared with a string). The broker treats these as "no match".
    ``root_cause`` is the class of the Java exception that one wraps
    (``"NumberFormatException"`` inside the RuntimeException), or None.
    """

    def __init__(self, message: str, cause: str = "RuntimeException", root_cause: str | None = None):
        self.cause = cause
        self.root_cause = root_cause
        super().__init__(message)

    def __reduce__(self):
        return (type(self), (self.args[0], self.cause, self.root_cause))



def comparison_error(symbol: str, lv, rv) -> SelectorEvaluationError:
    """The error the broker's evaluation throws comparing ``lv`` with ``rv`` by ``symbol``.

    Both engines call it once they know the comparison throws. Two strings ordered by
    ``>``, ``>=``, ``<`` or ``<=`` that are not both numbers are the broker's string-ordering
    error; otherwise Java's comparison rules (:func:`selector.javalang.compare`) say which
    exception it is: a failed number conversion (``RuntimeException``) or a Boolean
    compared with a String (``ClassCastException``).
    """
    if symbol != "=" and isinstance(lv, str) and isinstance(rv, str):
        return SelectorEvaluationError(
            f"It's illegal to compare string by '>=', '>', '<', '<='. lv={lv}, rv={rv}",
            root_cause="NumberFormatException")
    try:
        java.compare(lv, rv)
    except java.JavaNumberFormatError as exc:
        return SelectorEvaluationError(
            f"cannot compare {lv!r} {symbol} {rv!r}: java.lang.NumberFormatException: {exc}",
            root_cause="NumberFormatException")
    except java.JavaClassCastError as exc:
        return SelectorEvaluationError(f"cannot compare {lv!r} {symbol} {rv!r}: {exc}", "ClassCastException")
    raise AssertionError(f"comparing {lv!r} {symbol} {rv!r} does not throw")  # a caller's bug, not input's
