"""AST of a parsed selector: one class per construct, a position on every node.

Nodes keep the selector's surface form (``<>``, ``BETWEEN``, ``IS NOT NULL``);
the compiler desugars them into the broker's evaluation tree. Trees can be
arbitrarily deep (``NOT NOT ... a``, long ``OR`` chains), so every walk here
is iterative.
"""
from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import TypeVar

__all__ = [
    "Between",
    "BoolCast",
    "Comparison",
    "In",
    "IsNull",
    "Literal",
    "Logical",
    "Negate",
    "Node",
    "Not",
    "Property",
    "StringMatch",
    "fold",
    "is_boolean",
    "quote",
    "walk",
]

T = TypeVar("T")


class Node:
    """Base class; ``position`` is the 0-based offset of the node's token.

    ``parens`` is set (True) on a node written inside parentheses; read it with
    ``getattr(node, "parens", False)``.
    """

    __slots__ = ("parens", "position")

    def children(self) -> tuple[Node, ...]:
        return ()

    def __repr__(self) -> str:
        return f"<{type(self).__name__} at {self.position}: {canonical_form(self)}>"


class Property(Node):
    """A property reference (the broker's ``PropertyExpression``)."""

    __slots__ = ("name",)

    def __init__(self, name: str, position: int):
        self.name = name
        self.position = position


class Literal(Node):
    """A constant. ``kind`` is one of ``int`` (Java Integer), ``long``,
    ``double``, ``string``, ``true``, ``false``, ``null``."""

    __slots__ = ("kind", "text", "value")

    def __init__(self, kind: str, value, text: str, position: int):
        self.kind = kind
        self.value = value
        self.text = text
        self.position = position

    @property
    def is_number(self) -> bool:
        return self.kind in ("int", "long", "double")


class BoolCast(Node):
    """A bare property used where a boolean is required (implicit in the text)."""

    __slots__ = ("operand",)

    def __init__(self, operand: Property):
        self.operand = operand
        self.position = operand.position

    def children(self):
        return (self.operand,)


class Not(Node):
    """Prefix ``NOT``; binds to the next operand only."""

    __slots__ = ("operand",)

    def __init__(self, operand: Node, position: int):
        self.operand = operand
        self.position = position

    def children(self):
        return (self.operand,)


class Negate(Node):
    """Prefix ``-`` (evaluated at run time; never folded into a literal)."""

    __slots__ = ("operand",)

    def __init__(self, operand: Node, position: int):
        self.operand = operand
        self.position = position

    def children(self):
        return (self.operand,)


class Logical(Node):
    """``AND`` / ``OR``."""

    __slots__ = ("left", "op", "right")

    def __init__(self, op: str, left: Node, right: Node, position: int):
        self.op = op
        self.left = left
        self.right = right
        self.position = position

    def children(self):
        return (self.left, self.right)


class Comparison(Node):
    """``=``, ``<>``, ``>``, ``>=``, ``<``, ``<=``; position is the operator's."""

    __slots__ = ("left", "op", "right")

    def __init__(self, op: str, left: Node, right: Node, position: int):
        self.op = op
        self.left = left
        self.right = right
        self.position = position

    def children(self):
        return (self.left, self.right)


class IsNull(Node):
    """``x IS [NOT] NULL``."""

    __slots__ = ("negated", "operand")

    def __init__(self, operand: Node, negated: bool, position: int):
        self.operand = operand
        self.negated = negated
        self.position = position

    def children(self):
        return (self.operand,)


class Between(Node):
    """``x [NOT] BETWEEN low AND high``."""

    __slots__ = ("high", "low", "negated", "operand")

    def __init__(self, operand: Node, low: Node, high: Node, negated: bool, position: int):
        self.operand = operand
        self.low = low
        self.high = high
        self.negated = negated
        self.position = position

    def children(self):
        return (self.operand, self.low, self.high)


class In(Node):
    """``prop [NOT] IN ('a', 'b', ...)``; ``values`` keeps the written order."""

    __slots__ = ("negated", "operand", "values")

    def __init__(self, operand: Property, values: tuple[str, ...], negated: bool, position: int):
        self.operand = operand
        self.values = values
        self.negated = negated
        self.position = position

    def children(self):
        return (self.operand,)


class StringMatch(Node):
    """``x [NOT] CONTAINS|STARTSWITH|ENDSWITH 'pattern'``."""

    __slots__ = ("negated", "op", "operand", "pattern")

    def __init__(self, op: str, operand: Node, pattern: str, negated: bool, position: int):
        self.op = op
        self.operand = operand
        self.pattern = pattern
        self.negated = negated
        self.position = position

    def children(self):
        return (self.operand,)


_BOOLEAN_NODES = (BoolCast, Not, Logical, Comparison, IsNull, Between, In, StringMatch)


def is_boolean(node: Node) -> bool:
    """True for the broker's boolean nodes (valid operands of AND/OR/NOT)."""
    if isinstance(node, Literal):
        return node.kind in ("true", "false", "null")
    return isinstance(node, _BOOLEAN_NODES)


def walk(root: Node) -> Iterator[Node]:
    """Every node of the tree in pre-order (left to right), without recursion."""
    stack = [root]
    while stack:
        node = stack.pop()
        yield node
        stack.extend(reversed(node.children()))


def fold(root: Node, visit: Callable[[Node, list], T]) -> T:
    """Post-order fold without recursion: ``visit(node, [results of children])``."""
    results: list = []
    stack: list = [(root, False)]
    while stack:
        node, expanded = stack.pop()
        kids = node.children()
        if expanded or not kids:
            n = len(kids)
            args = results[len(results) - n:] if n else []
            if n:
                del results[len(results) - n:]
            results.append(visit(node, args))
        else:
            stack.append((node, True))
            stack.extend((kid, False) for kid in reversed(kids))
    return results[0]


def quote(s: str) -> str:
    """A string literal in selector syntax (``'`` doubled)."""
    return "'" + s.replace("'", "''") + "'"


def _literal_text(node: Literal) -> str:
    if node.kind == "string":
        return quote(node.value)
    if node.kind in ("true", "false", "null"):
        return node.kind.upper()
    return repr(node.value) if node.kind == "double" else str(node.value)


def _canonical(node: Node, kids: list) -> str:
    if isinstance(node, Property):
        return node.name
    if isinstance(node, Literal):
        return _literal_text(node)
    if isinstance(node, BoolCast):
        return kids[0]
    if isinstance(node, Not):
        return f"(NOT {kids[0]})"
    if isinstance(node, Negate):
        return f"(-{kids[0]})"
    if isinstance(node, (Logical, Comparison)):
        return f"({kids[0]} {node.op} {kids[1]})"
    if isinstance(node, IsNull):
        return f"({kids[0]} IS {'NOT ' if node.negated else ''}NULL)"
    neg = "NOT " if getattr(node, "negated", False) else ""
    if isinstance(node, Between):
        return f"({kids[0]} {neg}BETWEEN {kids[1]} AND {kids[2]})"
    if isinstance(node, In):
        return f"({kids[0]} {neg}IN ({', '.join(quote(v) for v in node.values)}))"
    if isinstance(node, StringMatch):
        return f"({kids[0]} {neg}{node.op} {quote(node.pattern)})"
    raise TypeError(f"unknown node {type(node).__name__}")


def canonical_form(root: Node) -> str:
    """The tree printed fully parenthesised, in selector syntax (re-parsable)."""
    return fold(root, _canonical)
