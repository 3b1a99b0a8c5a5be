"""Beyond the broker: warnings for its traps, and a fully parenthesised form.

Each warning names a construct the broker accepts but that rarely means what
its author intended (docs/selector-semantics.md):

``ignored-text``
    The broker stops after a complete expression and ignores the rest
    (``a = 1 garbage``, ``a = 1 + 2``, ``a = 007``).
``not-binds-tight``
    Prefix NOT takes the next operand only: ``NOT a = 1`` is ``(NOT a) = 1``.
``bare-property``
    A property used as a condition is cast to boolean: any string value (even
    ``"true"``) is FALSE, an absent one NULL, so it never matches.
``boolean-equals-string``
    A boolean on the left of ``=``/``<>`` and a string on the right
    (``TRUE = prop``) throws on the broker whenever both sides are non-null.
``integer-literal``
    Comparing a property with an integer literal parses the property as a Java
    int/long, so values like ``"5.0"`` or ``" 5"`` make the broker throw
    (no match); a literal such as ``5.0`` compares numerically.
"""
from __future__ import annotations

from dataclasses import dataclass

from .errors import line_column
from .nodes import (
    Between,
    BoolCast,
    Comparison,
    IsNull,
    Literal,
    Negate,
    Node,
    Not,
    Property,
    StringMatch,
    canonical_form,
    is_boolean,
    walk,
)
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
    """The selector printed fully parenthesised, grouped as the broker groups it.

    >>> canonical("NOT a = 1 OR b BETWEEN 1 AND 2 AND c IS NULL")
    '(((NOT a) = 1) OR ((b BETWEEN 1 AND 2) AND (c IS NULL)))'

    Raises
    ------
    SelectorSyntaxError
        If the broker would not compile it.
    """
    return canonical_form(parse(sql).tree)


def _integer_literal(node: Node) -> Literal | None:
    while isinstance(node, Negate):
        node = node.operand
    if isinstance(node, Literal) and node.kind in ("int", "long"):
        return node
    return None


def lint(sql: str) -> list[LintWarning]:
    """Warnings for the broker's traps in ``sql``, in order of position.

    Parameters
    ----------
    sql : str
        Selector text.

    Returns
    -------
    list of LintWarning
        Empty when nothing looks suspicious.

    Raises
    ------
    SelectorSyntaxError
        If the broker would not compile it.
    """
    result = parse(sql)
    found: list[tuple[int, str, str]] = []
    if result.stop is not None:
        rest = sql[result.stop:]
        shown = rest if len(rest) <= 40 else rest[:37] + "..."
        found.append((result.stop, "ignored-text",
                      f"the broker stops before {shown!r} and ignores it"))
    for node in walk(result.tree):
        if isinstance(node, BoolCast):
            found.append((node.position, "bare-property",
                          (f"property {node.operand.name!r} used as a condition is never TRUE: a string "
                          f"value casts to FALSE, an absent one to NULL")))
        left = getattr(node, "left", getattr(node, "operand", None))
        if (isinstance(node, (Comparison, IsNull, StringMatch)) and isinstance(left, Not)
                and not getattr(left, "parens", False)):
            found.append((left.position, "not-binds-tight",
                          (f"NOT applies to the next operand only: this means {canonical_form(node)}; "
                          f"write NOT (...) around the whole condition")))
        if isinstance(node, Comparison) and node.op in ("=", "<>"):
            right = node.right
            if (is_boolean(node.left) and not (isinstance(node.left, Literal) and node.left.kind == "null")
                    and (isinstance(right, Property) or (isinstance(right, Literal) and right.kind == "string"))):
                found.append((node.position, "boolean-equals-string",
                              (f"{canonical_form(node)} throws on the broker whenever both sides are "
                              f"non-null (a boolean compared with a string); put the property on the left")))
        if isinstance(node, (Comparison, Between)):
            operands = node.children()
            props = [x for x in operands if isinstance(x, Property)]
            ints = [lit for lit in map(_integer_literal, operands) if lit is not None]
            if props and ints:
                lit = ints[0]
                found.append((lit.position, "integer-literal",
                              (f"integer literal {lit.text} makes the broker parse {props[0].name!r} as an "
                              f"integer: values like '5.0' or ' 5' throw (no match); write {lit.value}.0 "
                              f"to compare numerically")))
    found.sort(key=lambda f: f[0])
    return [LintWarning(code, message, pos, *line_column(sql, pos)) for pos, code, message in found]
