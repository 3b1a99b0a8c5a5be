"""Exceptions raised by the selector package (shared by both engines)."""
from __future__ import annotations

__all__ = ["SelectorEvaluationError", "SelectorSyntaxError", "line_column"]


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
