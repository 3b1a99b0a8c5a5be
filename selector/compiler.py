"""Compile a selector AST into the broker's evaluation tree, stored flat.

The broker desugars as it builds (docs/selector-semantics.md#parse-time-checks): ``x <> y`` is ``NOT (x = y)``,
``x IS NOT NULL`` is ``NOT (x IS NULL)``, ``x BETWEEN a AND b`` is
``(x >= a) AND (x <= b)``, ``x NOT BETWEEN a AND b`` is ``(x < a) OR (x > b)``.
A CONTAINS-family test with an empty pattern is FALSE without evaluating its
operand, so it compiles to the constant FALSE.

The evaluation tree is stored as a flat array of nodes in post-order (children
before parents, children referenced by index), like scikit-learn's trees. A
node whose value can decide its parent early carries a *guard*: the left
operand of AND (FALSE decides), of OR (TRUE decides) and of an ordering
comparison (NULL decides, and the right operand is not evaluated). Both engines
walk the array with one forward loop, jumping past the rest of the parent's
subtree when a guard fires; no recursion, no stack. The opcodes, guards and node
layout are the contract of :mod:`selector.opcodes`, which the kernels import too.
"""
from __future__ import annotations

import numpy as np

from rmqfilter_engine import load as _load

from . import nodes as n
from .opcodes import (
    GUARD_NONE,
    GUARDS,
    MATCH,
    MAX_NODES,
    NODE_DTYPE,
    OP_AND,
    OP_BOOLCAST,
    OP_CONST,
    OP_EQ,
    OP_GE,
    OP_GT,
    OP_IN,
    OP_ISNULL,
    OP_LE,
    OP_LT,
    OP_NEG,
    OP_NOT,
    OP_NOT_IN,
    OP_OR,
    OP_PROP,
    ORDERING,
)

__all__ = ["MAX_NODES", "NODE_DTYPE", "Program", "compile_tree"]

_flatten_kernel, ENGINE = _load("selector", "_flatten")


class Program:
    """A compiled selector: the flat node array and what its nodes refer to.

    Immutable once built. ``compile_tree`` hands over the node fields as
    lists; the numpy array is made the first time ``nodes`` is read (pickling,
    the twin), since the Cython engine reads :meth:`rows` and an uncached
    compile should not pay for an array nobody looks at.

    Attributes
    ----------
    nodes : numpy.ndarray of NODE_DTYPE
        Post-order; the root is the last node.
    args : tuple
        Constants (None, bool, int, Long, float, str), IN sets (frozenset of
        str) and CONTAINS-family patterns (str), referenced by ``arg``.
    props : tuple of str
        Property name of each slot, in order of first use.
    """

    __slots__ = ("_columns", "_nodes", "args", "props")

    def __init__(self, nodes: np.ndarray, args: tuple, props: tuple):
        self._nodes = nodes
        self._columns = None
        self.args = args
        self.props = props

    @classmethod
    def _from_columns(cls, columns: tuple, args: tuple, props: tuple) -> Program:
        """A program from its node fields, one list per NODE_DTYPE field."""
        program = cls(None, args, props)
        program._columns = columns
        return program

    @property
    def nodes(self) -> np.ndarray:
        if self._nodes is None:
            nodes = np.empty(len(self._columns[0]), NODE_DTYPE)
            for name, column in zip(NODE_DTYPE.names, self._columns):
                nodes[name] = column
            self._nodes = nodes
        return self._nodes

    def rows(self) -> list[tuple[int, int, int, int, int, int]]:
        """The nodes as ``(op, guard, a, b, parent, arg)`` tuples of Python ints."""
        if self._columns is not None:
            return list(zip(*self._columns))
        return [tuple(int(x) for x in row) for row in self._nodes.tolist()]

    def __repr__(self) -> str:
        return f"Program(nodes={len(self.rows())}, args={self.args!r}, props={self.props!r})"


class _Builder:
    def __init__(self):
        self.rows: list[list[int]] = []
        self.args: list = []
        self.arg_index: dict = {}
        self.slots: dict[str, int] = {}

    def arg(self, value) -> int:
        key = (type(value), value)
        if key not in self.arg_index:
            self.arg_index[key] = len(self.args)
            self.args.append(value)
        return self.arg_index[key]

    def slot(self, name: str) -> int:
        return self.slots.setdefault(name, len(self.slots))


# An evaluation tree before flattening: (op, children tuple, arg).
def _desugar(b: _Builder, node: n.Node, kids: list):
    if isinstance(node, n.Property):
        return (OP_PROP, (), b.slot(node.name))
    if isinstance(node, n.Literal):
        return (OP_CONST, (), b.arg(node.value))
    if isinstance(node, n.BoolCast):
        return (OP_BOOLCAST, (kids[0],), -1)
    if isinstance(node, n.Not):
        return (OP_NOT, (kids[0],), -1)
    if isinstance(node, n.Negate):
        return (OP_NEG, (kids[0],), -1)
    if isinstance(node, n.Logical):
        return (OP_AND if node.op == "AND" else OP_OR, (kids[0], kids[1]), -1)
    if isinstance(node, n.Comparison):
        if node.op == "=":
            return (OP_EQ, (kids[0], kids[1]), -1)
        if node.op == "<>":
            return (OP_NOT, ((OP_EQ, (kids[0], kids[1]), -1),), -1)
        return (ORDERING[node.op], (kids[0], kids[1]), -1)
    if isinstance(node, n.IsNull):
        test = (OP_ISNULL, (kids[0],), -1)
        return (OP_NOT, (test,), -1) if node.negated else test
    if isinstance(node, n.Between):
        x, low, high = kids
        if node.negated:
            return (OP_OR, ((OP_LT, (x, low), -1), (OP_GT, (x, high), -1)), -1)
        return (OP_AND, ((OP_GE, (x, low), -1), (OP_LE, (x, high), -1)), -1)
    if isinstance(node, n.In):
        return (OP_NOT_IN if node.negated else OP_IN, (kids[0],), b.arg(frozenset(node.values)))
    if isinstance(node, n.StringMatch):
        if node.pattern == "":
            return (OP_CONST, (), b.arg(False))
        op = MATCH[node.op] + (3 if node.negated else 0)
        return (op, (kids[0],), b.arg(node.pattern))
    raise TypeError(f"unknown node {type(node).__name__}")


def _flatten(b: _Builder, root) -> np.ndarray:
    rows = b.rows
    done: list[int] = []          # node indices of finished subtrees
    stack = [(root, False)]
    while stack:
        tree, expanded = stack.pop()
        op, kids, arg = tree
        if kids and not expanded:
            stack.append((tree, True))
            stack.extend((k, False) for k in reversed(kids))
            continue
        if len(rows) >= MAX_NODES:
            raise OverflowError(f"selector compiles to more than {MAX_NODES} nodes")
        child = done[len(done) - len(kids):] if kids else []
        if kids:
            del done[len(done) - len(kids):]
        index = len(rows)
        rows.append([op, GUARD_NONE, child[0] if child else -1, child[1] if len(child) > 1 else -1,
                     -1, arg])
        for c in child:
            rows[c][4] = index
        if op in GUARDS:
            rows[child[0]][1] = GUARDS[op]
        done.append(index)
    return np.array([tuple(row) for row in rows], dtype=NODE_DTYPE)


def _compile_tree_reference(tree: n.Node) -> Program:
    """:func:`compile_tree` in two passes (desugar to nested tuples, then flatten); the tests
    check that both give the same program."""
    b = _Builder()
    root = n.fold(tree, lambda node, kids: _desugar(b, node, kids))
    nodes = _flatten(b, root)
    return Program(nodes, tuple(b.args), tuple(b.slots))


def compile_tree(tree: n.Node) -> Program:
    """Compile a parsed (and checked) AST into a :class:`Program`.

    The engine's ``flatten`` (``_flatten.pyx``, twin ``_flatten_py.py``) emits
    the post-order node array in one pass; :func:`_compile_tree_reference`
    does the same in two and gives the same programs.
    """
    columns, args, props = _flatten_kernel.flatten(tree)
    return Program._from_columns(columns, args, props)

