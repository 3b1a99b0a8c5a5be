"""Beyond the broker: warnings for its traps, and a fully parenthesised form."""
from __future__ import annotations

from dataclasses import dataclass

from .nodes import canonical_form
from .parser import parse

__all__ = ["LintWarning", "canonical", "lint"]


@dataclass(frozen=True)
class LintWarning:
    """One warning: ``code`` names the trap; ``position`` is a 0-based offset."""

    code: str
    message: str
    position: int
    line: int
    column: int

    def __str__(self) -> str:
        return f"{self.line}:{self.column}: {self.code}: {self.message}"


def canonical(sql: str) -> str:
    """The selector printed fully parenthesised, as the broker groups it.

    Raises SelectorSyntaxError if it does not compile.
    """
    return canonical_form(parse(sql).tree)


def lint(sql: str) -> list[LintWarning]:
    """Warnings for the broker's traps in ``sql`` (filled in below)."""
    raise NotImplementedError
