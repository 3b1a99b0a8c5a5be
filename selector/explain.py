"""EXPLAIN ANALYZE for one message: how the broker evaluates a selector, node by node.

:func:`explain` walks the selector's tree in the order the broker evaluates it
and records, for every node, the value it produced, the properties it read,
how a comparison converted its operands (``a > 5`` reads ``a`` with
``Integer.parseInt``, ``a > 5.0`` with ``Double.valueOf``), which operands the
short circuit skipped, and which node decided the result. The page
``docs/explain.md`` shows what it prints.

The rules are not written again here. The short circuits come from the
compiler's guard table (:data:`selector.compiler.GUARDS`: the left operand of
AND stops at FALSE, of OR at TRUE, of an ordering comparison at NULL); the
broker's Java comparisons, equality, unary minus and CONTAINS-family tests are
the pure-Python engine's own functions (``_eval_py``, ``javalang``); the
desugaring follows the compiler's (``x BETWEEN a AND b`` is
``x >= a AND x <= b``, so ``x`` is evaluated twice; an empty CONTAINS pattern
is FALSE without reading the operand). The tests check the result against
both engines on every conformance case.

This is for people, not a data path: it walks Python objects, one message at
a time (without recursion, like every walk of the tree).
"""
from __future__ import annotations

import math
from collections.abc import Iterator, Mapping
from dataclasses import dataclass

import rmqfilter_java as java

from . import compile as compile_selector
from . import nodes as n
from ._eval_py import conversions, equal_test, match_test, order_test
from .errors import SelectorEvaluationError, line_column
from .opcodes import (
    GUARD_FALSE,
    GUARD_NULL,
    GUARD_TRUE,
    GUARDS,
    MATCH,
    OP_AND,
    OP_EQ,
    OP_OR,
    ORDERING,
)
from .parser import parse

__all__ = ["ExplainNode", "Explanation", "explain"]

#: Status of a node after the walk.
EVALUATED = "evaluated"      # produced a value
SKIPPED = "skipped"          # not evaluated: the short circuit (or an empty pattern) stopped before it
THREW = "threw"              # its own evaluation threw: the broker's evaluation aborts here
ABORTED = "aborted"          # an operand threw, so it produced no value
NOT_REACHED = "not_reached"  # evaluation had already thrown before reaching it

_GUARD_VALUE = {GUARD_FALSE: False, GUARD_TRUE: True, GUARD_NULL: None}
_JAVA_CLASS = {"B": "Boolean", "I": "Integer", "L": "Long", "D": "Double", "S": "String"}
_TEXT_LIMIT = 60


@dataclass(frozen=True, eq=False)
class ExplainNode:
    """One node of the evaluation tree, after evaluating one message.

    Attributes
    ----------
    id : int
        Pre-order index in the tree (the root is 0).
    op : str
        ``"AND"``, ``"OR"``, ``"NOT"``, ``"-"``, ``"="``, ``"<>"``, ``">"``,
        ``">="``, ``"<"``, ``"<="``, ``"IS NULL"``, ``"IS NOT NULL"``,
        ``"BETWEEN"``, ``"NOT BETWEEN"``, ``"IN"``, ``"NOT IN"``,
        ``"CONTAINS"``, ``"STARTSWITH"``, ``"ENDSWITH"`` (and their ``NOT``
        forms), ``"PROPERTY"``, ``"LITERAL"``, or ``"BOOLEAN"`` (a bare
        property used as a condition).
    text : str
        The node in selector syntax (shortened with ``...`` past 60 characters).
    position : int
        0-based offset of the node's token in the selector text.
    status : str
        ``"evaluated"``, ``"skipped"`` (short circuit), ``"threw"``,
        ``"aborted"`` (an operand threw) or ``"not_reached"`` (evaluation had
        already thrown).
    value : None, bool, int, java Long, float or str
        The Java value it produced (None is SQL NULL); None unless evaluated.
    children : tuple of ExplainNode
        Operands in evaluation order. ``BETWEEN`` has the two comparisons the
        broker evaluates (``x >= low``, ``x <= high``), each with its own copy of ``x``.
    decisive : bool
        On the path from the root to the node that decided the result.
    decider : bool
        This node decided the result: the end of the decisive path.
    note : str or None
        Why the node has its value (a short circuit, a NULL operand, a failed conversion).
    property : str or None
        For ``PROPERTY`` nodes, the name read; its ``value`` is the message's
        string, or None when the message does not have it.
    present : bool or None
        For evaluated ``PROPERTY`` nodes, whether the message has the property.
    conversions : tuple of (str or None, str or None), or None
        For comparisons of two non-NULL operands: the Java conversion applied
        to the left and right operand (``"Integer.parseInt"``,
        ``"Long.parseLong"``, ``"Double.valueOf"``, ``"Boolean.parseBoolean"``,
        ``"longValue"``, ``"doubleValue"``), None where an operand is used as it is.
    compared : tuple or None
        The two operands after those conversions (None on the side whose conversion threw).
    """

    id: int
    op: str
    text: str
    position: int
    status: str
    value: object
    children: tuple[ExplainNode, ...]
    decisive: bool
    decider: bool
    note: str | None = None
    property: str | None = None
    present: bool | None = None
    conversions: tuple[str | None, str | None] | None = None
    compared: tuple | None = None

    def walk(self) -> Iterator[ExplainNode]:
        """This node and every node below it, in pre-order, without recursion."""
        stack = [self]
        while stack:
            node = stack.pop()
            yield node
            stack.extend(reversed(node.children))

    def to_dict(self) -> dict:
        """The subtree as JSON-ready dicts (see :meth:`Explanation.to_dict`)."""
        done: dict[int, dict] = {}
        for node in reversed(list(self.walk())):   # children before parents
            d = {"id": node.id, "op": node.op, "text": node.text, "position": node.position,
                 "status": node.status, "value": _json_value(node.value),
                 "type": _java_class(node.value) if node.status == EVALUATED else None,
                 "decisive": node.decisive, "decider": node.decider, "note": node.note}
            if node.op == "PROPERTY":
                d["property"] = node.property
                d["present"] = node.present
            if node.conversions is not None:
                d["conversions"] = list(node.conversions)
                d["compared"] = [_json_value(v) for v in node.compared]
            d["children"] = [done.pop(kid.id) for kid in node.children]
            done[node.id] = d
        return done[self.id]


@dataclass(frozen=True, eq=False)
class Explanation:
    """How the broker evaluates one selector for one message (see :func:`explain`).

    Attributes
    ----------
    sql : str
        The selector text.
    value : str
        ``"TRUE"``, ``"FALSE"``, ``"NULL"`` or ``"ERROR"`` (the broker's evaluation throws).
    error_cause : str or None
        The Java exception the broker's evaluation throws (``"RuntimeException"``
        or ``"ClassCastException"``), as :class:`SelectorEvaluationError`'s ``cause``.
    error_root_cause : str or None
        The exception that one wraps (``"NumberFormatException"``), or None.
    error_message : str or None
        The error's text.
    matched : bool
        The broker's decision, as ``Selector.matches``: True only when ``value`` is ``"TRUE"``.
    properties : dict of str to (str or None)
        Every property the selector reads, in order of first use, with the
        message's value (None: missing).
    root : ExplainNode
        The evaluation tree.
    decider : ExplainNode
        The node that decided the result (the end of the decisive path).
    """

    sql: str
    value: str
    error_cause: str | None
    error_root_cause: str | None
    error_message: str | None
    matched: bool
    properties: dict[str, str | None]
    root: ExplainNode
    decider: ExplainNode

    def to_dict(self) -> dict:
        """The explanation as JSON-ready data.

        Returns
        -------
        dict
            ``{"sql", "value", "matched", "error_cause", "error_root_cause",
            "error_message", "properties": {name: str or null}, "decider": id,
            "root": node}``, where each node is ``{"id", "op", "text",
            "position", "status", "value", "type", "decisive", "decider",
            "note", "children": [node, ...]}`` plus ``"property"`` and
            ``"present"`` on ``PROPERTY`` nodes and ``"conversions"``
            (``[left, right]``) and ``"compared"`` on comparisons that
            compared two values. ``value`` is the JSON form of the Java value
            (NaN and infinities as the strings ``"NaN"``, ``"Infinity"``,
            ``"-Infinity"``) and ``type`` its Java class (``"Boolean"``,
            ``"Integer"``, ``"Long"``, ``"Double"``, ``"String"``), null for
            NULL and for nodes not evaluated.
        """
        return {"sql": self.sql, "value": self.value, "matched": self.matched,
                "error_cause": self.error_cause, "error_root_cause": self.error_root_cause,
                "error_message": self.error_message, "properties": dict(self.properties),
                "decider": self.decider.id, "root": self.root.to_dict()}

    def __str__(self) -> str:
        line, column = line_column(self.sql, self.decider.position)
        props = ", ".join(f"{k}={_show(v)}" if v is not None else f"{k} missing"
                          for k, v in self.properties.items()) or "(none read)"
        value = self.value if self.error_cause is None else f"ERROR ({self._error_text()})"
        verdict = "matched" if self.matched else "not matched"
        head = [f"selector:   {self.sql}", f"properties: {props}",
                f"result:     {value}, {verdict} (decided at {line}:{column}: {self.decider.text})", ""]
        body = []
        stack = [(self.root, 0)]
        while stack:
            node, depth = stack.pop()
            body.append(_render(node, depth))
            stack.extend((kid, depth + 1) for kid in reversed(node.children))
        return "\n".join(head + body)

    def _error_text(self) -> str:
        if self.error_root_cause:
            return f"{self.error_cause} caused by {self.error_root_cause}"
        return self.error_cause


def explain(sql: str, props: Mapping[str, str] | None) -> Explanation:
    """Evaluate ``sql`` for one message as the broker does, and say how.

    Parameters
    ----------
    sql : str
        Selector text, used verbatim.
    props : mapping of str to str, or None
        The message's properties; a missing key (or None for the whole mapping)
        is the broker's NULL.

    Returns
    -------
    Explanation
        ``str()`` of it is the evaluation tree as indented text, ``to_dict()``
        the same as JSON-ready data. ``value``, ``error_cause`` and ``matched``
        agree with ``Selector.evaluate`` and ``Selector.matches``.

    Raises
    ------
    SelectorSyntaxError
        Where :func:`selector.compile` raises it (the same error).
    TypeError
        If ``props`` is not a mapping of str to str.

    Examples
    --------
    >>> import selector
    >>> e = selector.explain("a > 5 AND TAGS IN ('A', 'B')", {"a": "3", "TAGS": "A"})
    >>> e.value, e.matched, e.decider.text
    ('FALSE', False, 'a > 5')
    """
    compile_selector(sql)   # the same SelectorSyntaxError, from the same parse cache
    root = _build(parse(sql).tree)
    properties = _read(root, props)
    error = _run(root, properties)
    _mark_decisive(root)
    tree = _freeze(root)
    decider = next(node for node in tree.walk() if node.decider)
    if error is not None:
        value, cause, root_cause, message = "ERROR", error.cause, error.root_cause, str(error)
    else:
        value = {True: "TRUE", False: "FALSE", None: "NULL"}[root.value]
        cause = root_cause = message = None
    return Explanation(sql, value, cause, root_cause, message, value == "TRUE", properties, tree, decider)


# -- the tree the broker evaluates ------------------------------------------------------------

class _Step:
    """A node while it is evaluated (mutable; frozen into an ExplainNode afterwards)."""

    __slots__ = ("compared", "constant", "conversions", "decided_by", "id", "kids", "mark", "note", "op",
                 "opcode", "pattern", "position", "prop", "status", "text", "value", "values")

    def __init__(self, op: str, text: str, position: int, kids: tuple = (), opcode: int = 0):
        self.op = op
        self.text = text
        self.position = position
        self.kids = kids
        self.opcode = opcode
        self.status = NOT_REACHED
        self.value = None
        self.note = None
        self.prop = None
        self.constant = None      # LITERAL: its value
        self.values = None        # IN: the list's strings
        self.pattern = None       # CONTAINS family: the pattern
        self.conversions = None
        self.compared = None
        self.decided_by = None    # index of the kid that decided this node's value, None: itself
        self.mark = 0             # 1: on the decisive path, 2: the node that decided
        self.id = -1


def _short(text: str) -> str:
    return text if len(text) <= _TEXT_LIMIT else text[:_TEXT_LIMIT - 3] + "..."


def _text(node: n.Node, kids: list) -> str:
    # nodes' own printer for one node (which parenthesises every operator), on the operands'
    # shortened texts, without the outer parentheses; canonical_form would print every subtree in
    # full, quadratic on a deep tree.
    text = n._canonical(node, [_paren(k) for k in kids])
    if not isinstance(node, (n.Property, n.Literal, n.BoolCast)):
        text = text[1:-1]
    return _short(text)


def _paren(step: _Step) -> str:
    return f"({step.text})" if step.kids and " " in step.text else step.text


def _make_step(node: n.Node, kids: list) -> _Step:
    text = _text(node, kids)
    if isinstance(node, n.Property):
        step = _Step("PROPERTY", text, node.position)
        step.prop = node.name
    elif isinstance(node, n.Literal):
        step = _Step("LITERAL", text, node.position)
        step.constant = node.value
    elif isinstance(node, n.BoolCast):
        step = _Step("BOOLEAN", text, node.position, tuple(kids))
    elif isinstance(node, n.Not):
        step = _Step("NOT", text, node.position, tuple(kids))
    elif isinstance(node, n.Negate):
        step = _Step("-", text, node.position, tuple(kids))
    elif isinstance(node, n.Logical):
        step = _Step(node.op, text, node.position, tuple(kids), OP_AND if node.op == "AND" else OP_OR)
    elif isinstance(node, n.Comparison):
        opcode = ORDERING.get(node.op, OP_EQ)
        step = _Step(node.op, text, node.position, tuple(kids), opcode)
    elif isinstance(node, n.IsNull):
        step = _Step("IS NOT NULL" if node.negated else "IS NULL", text, node.position, tuple(kids))
    elif isinstance(node, n.Between):
        # The broker's desugaring (docs/explain.md): x >= low AND x <= high; NOT: x < low OR x > high.
        x, low, high = kids
        lo_op, hi_op = ("<", ">") if node.negated else (">=", "<=")
        halves = tuple(
            _Step(op, _short(f"{_paren(x)} {op} {_paren(bound)}"), node.position,
                  (operand, bound), ORDERING[op])
            for op, operand, bound in ((lo_op, x, low), (hi_op, _clone(x), high)))
        step = _Step("NOT BETWEEN" if node.negated else "BETWEEN", text, node.position, halves,
                     OP_OR if node.negated else OP_AND)
    elif isinstance(node, n.In):
        step = _Step("NOT IN" if node.negated else "IN", text, node.position, tuple(kids))
        step.values = frozenset(node.values)
    elif isinstance(node, n.StringMatch):
        opcode = MATCH[node.op] + (3 if node.negated else 0)
        step = _Step(("NOT " if node.negated else "") + node.op, text, node.position, tuple(kids), opcode)
        step.pattern = node.pattern
    else:
        raise TypeError(f"unknown node {type(node).__name__}")
    return step


def _build(tree: n.Node) -> _Step:
    return n.fold(tree, _make_step)


def _clone(step: _Step) -> _Step:
    """A fresh copy of a subtree (BETWEEN evaluates its operand twice)."""
    def copy(s: _Step, kids: list) -> _Step:
        c = _Step(s.op, s.text, s.position, tuple(kids), s.opcode)
        c.prop, c.constant, c.values, c.pattern = s.prop, s.constant, s.values, s.pattern
        return c

    results: list = []
    stack = [(step, False)]
    while stack:
        s, expanded = stack.pop()
        if expanded or not s.kids:
            k = len(s.kids)
            kids = results[len(results) - k:] if k else []
            if k:
                del results[len(results) - k:]
            results.append(copy(s, kids))
        else:
            stack.append((s, True))
            stack.extend((kid, False) for kid in reversed(s.kids))
    return results[0]


def _steps(root: _Step) -> Iterator[_Step]:
    stack = [root]
    while stack:
        s = stack.pop()
        yield s
        stack.extend(reversed(s.kids))


def _read(root: _Step, props) -> dict[str, str | None]:
    """The message's value (None: missing) of every property the tree reads, in order of first use."""
    if props is not None and not isinstance(props, Mapping):
        raise TypeError(f"message properties must be a mapping of str to str, got {type(props).__name__}")
    values = {}
    for step in _steps(root):
        if step.op == "PROPERTY" and step.prop not in values:
            value = None if props is None else props.get(step.prop)
            if value is not None and not isinstance(value, str):
                raise TypeError(f"property {step.prop!r} must be a str, got {type(value).__name__}")
            values[step.prop] = value
    return values


# -- the walk ---------------------------------------------------------------------------------

def _skip(step: _Step, why: str) -> None:
    step.note = why
    for s in _steps(step):
        s.status = SKIPPED


def _evaluate(s: _Step, props: Mapping[str, str]):
    """One node's evaluation, as a generator: yields an operand to evaluate, receives its step
    back (with its value) and returns the node's value. The driver in :func:`_run` keeps the
    stack, so deep trees need no recursion."""
    op = s.op
    if op == "PROPERTY":
        v = props.get(s.prop)
        s.note = None if v is not None else "missing: NULL"
        return v
    if op == "LITERAL":
        return s.constant
    if s.pattern == "":
        _skip(s.kids[0], "not read: an empty pattern is FALSE")
        s.note = "empty pattern: FALSE without reading the operand"
        return False
    left = yield s.kids[0]
    lv = left.value
    s.decided_by = 0
    if s.opcode in GUARDS and lv is _GUARD_VALUE[GUARDS[s.opcode]]:
        shown = _value_text(lv)
        _skip(s.kids[1], f"not evaluated: the left operand is {shown}")
        s.note = f"the left operand is {shown}, so {op} is {shown}: the right operand is skipped"
        return lv
    if op == "BOOLEAN":
        if lv is None or lv is True or lv is False:
            return lv
        s.decided_by = None
        s.note = f"a {_java_class(lv)} is not a Boolean: FALSE"
        return False
    if op == "NOT":
        return None if lv is None else not lv
    if op == "-":
        v = java.negate(lv)
        if v is None and lv is not None:
            s.decided_by = None
            s.note = f"a {_java_class(lv)} has no minus: NULL"
        return v
    if op in ("IS NULL", "IS NOT NULL"):
        return (lv is None) == (op == "IS NULL")
    if s.values is not None:   # IN, NOT IN
        if not isinstance(lv, str):
            s.note = "the operand is NULL: NULL"
            return None
        s.decided_by = None
        found = lv in s.values
        s.note = f"{_show(lv)} is {'' if found else 'not '}in the list"
        return found == (op == "IN")
    if s.pattern is not None:
        if not isinstance(lv, str):
            s.note = f"{'NULL' if lv is None else 'a ' + _java_class(lv)} never matches, even negated"
            return False
        s.decided_by = None
        return match_test(s.opcode, lv, s.pattern)
    right = yield s.kids[1]
    rv = right.value
    if s.opcode in (OP_AND, OP_OR):
        stop = GUARDS[s.opcode] == GUARD_TRUE   # the value that decides: TRUE for OR, FALSE for AND
        if rv is stop:
            s.decided_by = 1
            return stop
        if lv is None or rv is None:
            s.decided_by = None if lv is None and rv is None else (0 if lv is None else 1)
            return None
        s.decided_by = None
        s.note = f"both operands are {_value_text(not stop)}"
        return not stop
    # Comparisons.
    if s.opcode == OP_EQ:
        if lv is None or rv is None:
            s.decided_by = None if lv is None and rv is None else (0 if lv is None else 1)
            v = equal_test(lv, rv)
            v = v if op == "=" else (None if v is None else not v)
            if lv is None and rv is None:
                s.note = f"NULL {op} NULL is {_value_text(v)} on the broker"
            else:
                s.note = f"the {'left' if lv is None else 'right'} operand is NULL: {op} is {_value_text(v)}"
            return v
    elif rv is None:
        s.decided_by = 1
        s.note = "the right operand is NULL: NULL"
        return None
    s.decided_by = None
    _describe_conversion(s, lv, rv)
    v = equal_test(lv, rv) if s.opcode == OP_EQ else order_test(s.opcode, lv, rv)
    return v if op != "<>" else (None if v is None else not v)


def _describe_conversion(s: _Step, lv, rv) -> None:
    """Record the Java conversion of each operand and the values compared (for the reader)."""
    names = conversions(s.opcode, lv, rv)
    compared = []
    steps = []
    failed = False
    for name, v in zip(names, (lv, rv)):
        if name is None:
            compared.append(v)
        elif failed:   # the broker stops at the first failed conversion
            compared.append(None)
        else:
            try:
                c = java.CONVERTERS[name](v)
            except java.JavaNumberFormatError:
                failed = True
                compared.append(None)
                steps.append(f"{name}({_value_text(v)}) throws NumberFormatException")
            else:
                compared.append(c)
                steps.append(f"{name}({_value_text(v)}) = {_value_text(c)}")
    s.conversions = names
    s.compared = tuple(compared)
    if None not in compared:
        kinds = {_java_class(c) for c in compared}
        as_type = f" as {kinds.pop()}" if len(kinds) == 1 else ""
        steps.append(f"compared{as_type}: {_value_text(compared[0])} {s.op} {_value_text(compared[1])}")
    s.note = "; ".join(steps)


def _run(root: _Step, props: Mapping[str, str]) -> SelectorEvaluationError | None:
    """Evaluate the tree, recording every node's status and value; the error, if one is thrown."""
    stack = [(root, _evaluate(root, props))]
    sent = None
    while stack:
        step, gen = stack[-1]
        try:
            kid = gen.send(sent)
        except StopIteration as done:
            step.value = done.value
            step.status = EVALUATED
            stack.pop()
            sent = step
            continue
        except SelectorEvaluationError as exc:
            step.status = THREW
            step.decided_by = None
            step.note = f"{step.note}; throws {exc.cause}" if step.note else f"throws {exc.cause}"
            for parent, pending in stack[:-1]:
                parent.status = ABORTED
                pending.close()
            return exc
        stack.append((kid, _evaluate(kid, props)))
        sent = None
    return None


def _mark_decisive(root: _Step) -> None:
    """Follow ``decided_by`` from the root; the node where it stops decided the result.

    When the evaluation threw, the path leads down the aborted nodes to the one that threw.
    """
    path = [root]
    node = root
    while True:
        if node.status == ABORTED:
            node = next(k for k in node.kids if k.status in (ABORTED, THREW))
        elif node.status == EVALUATED and node.decided_by is not None and node.kids:
            node = node.kids[node.decided_by]
        else:
            break
        path.append(node)
    for s in path:
        s.mark = 1
    node.mark = 2


def _freeze(root: _Step) -> ExplainNode:
    order = list(_steps(root))
    for i, s in enumerate(order):
        s.id = i
    frozen: dict[int, ExplainNode] = {}
    for s in reversed(order):   # children before parents
        frozen[s.id] = ExplainNode(
            id=s.id, op=s.op, text=s.text, position=s.position, status=s.status,
            value=s.value if s.status == EVALUATED else None,
            children=tuple(frozen.pop(k.id) for k in s.kids), decisive=s.mark > 0,
            decider=s.mark == 2, note=s.note, property=s.prop,
            present=(s.value is not None) if s.op == "PROPERTY" and s.status == EVALUATED else None,
            conversions=s.conversions, compared=s.compared)
    return frozen[0]


# -- rendering --------------------------------------------------------------------------------

def _java_class(v) -> str | None:
    return None if v is None else _JAVA_CLASS[java.java_type(v)]


def _value_text(v) -> str:
    """A Java value as the tree shows it: TRUE, FALSE, NULL, 5, 5L, 5.0, 'text'."""
    if v is None:
        return "NULL"
    if v is True or v is False:
        return "TRUE" if v else "FALSE"
    if isinstance(v, str):
        return _show(v)
    return repr(v)


def _show(s: str) -> str:
    return n.quote(s)


def _json_value(v):
    if isinstance(v, float) and not math.isfinite(v):
        return "NaN" if math.isnan(v) else ("Infinity" if v > 0 else "-Infinity")
    if isinstance(v, java.Long):
        return int(v)
    return v


def _render(node: ExplainNode, depth: int) -> str:
    mark = "*" if node.decisive else " "
    label = node.op if node.op in ("AND", "OR", "NOT") else node.text
    if node.op == "BOOLEAN":
        label += " as a condition"
    if node.status == EVALUATED:
        value = _value_text(node.value)
        if node.op == "PROPERTY":
            value = f"{value} (missing)" if node.value is None else value
        elif node.op in ("LITERAL", "-") and node.value is not None and not isinstance(node.value, bool):
            value = f"{value} ({_java_class(node.value)})"
    elif node.status == THREW:
        value = "ERROR"
    elif node.status == ABORTED:
        value = "ERROR (an operand threw)"
    else:
        value = node.status.replace("_", " ")
    line = f"{mark} {'  ' * depth}{label} -> {value}"
    if node.note and not (node.op == "PROPERTY" and node.status == EVALUATED):
        line += f"  [{node.note}]"
    if node.decider:
        line += "  <== decided here"
    return line
