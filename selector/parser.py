"""The broker's SQL92 selector grammar (PLY, LALR), building :mod:`selector.nodes`.

The grammar is the broker's precedence ladder (docs/selector-semantics.md#grammar), one rule per level::

    selector = or_expr
    or_expr  = or_expr OR and_expr | and_expr
    and_expr = and_expr AND eq_expr | eq_expr
    eq_expr  = eq_expr (= | <>) cmp_expr | eq_expr IS [NOT] NULL | cmp_expr
    cmp_expr = cmp_expr (> | >= | < | <=) unary
             | cmp_expr [NOT] (CONTAINS | STARTSWITH | ENDSWITH) string
             | cmp_expr [NOT] BETWEEN unary AND unary
             | cmp_expr [NOT] IN ( string {, string} )
             | unary
    unary    = + unary | - unary | NOT unary | primary
    primary  = literal | identifier | ( or_expr )

The broker has no end-of-input check (docs/selector-semantics.md#no-end-of-input-check): it reads one token past a
complete expression and, if that token cannot continue it, stops there and
ignores the rest. Here the first syntax error is answered by substituting
end-of-input for the offending token; if the expression is complete the parse
succeeds (``ParseResult.stop`` says where), otherwise the error is reported at
the original token. The parse-time checks of docs/selector-semantics.md#parse-time-checks run as the nodes are built.

Tables are built by ``ply.yacc`` in memory once, at import (no ``parser.out``,
no table file). :func:`parse` runs them with the engine's driver
(``_lalr.pyx``: a hand-written scanner and PLY's loop over the tables in C
arrays; twin ``_lalr_py.py``: :func:`selector.lexer.scan` and the same loop in
Python), calling the ``_r_`` reductions directly. :func:`_parse_reference`
runs the same ``p_`` rules through PLY's own lexer and driver; both give the
same trees, stops and errors. The drivers keep their own stacks, so nesting
depth is limited only by memory.
"""
from __future__ import annotations

import threading
from dataclasses import dataclass

from ply import lex, yacc

import rmqfilter_java as java
from rmqfilter_engine import load as _load

from .errors import SelectorSyntaxError
from .lexer import SelectorLexer, lexical_error, tokens  # noqa: F401  (PLY reads ``tokens`` from this module)
from .nodes import (
    Between,
    BoolCast,
    Comparison,
    In,
    IsNull,
    Literal,
    Logical,
    Negate,
    Node,
    Not,
    Property,
    StringMatch,
    canonical_form,
)

__all__ = ["ParseResult", "parse"]

_kernel, ENGINE = _load("selector", "_lalr")

DOUBLE_MIN_VALUE = 5e-324  # Java Double.MIN_VALUE (prints as 4.9E-324)


@dataclass(frozen=True)
class ParseResult:
    """A parsed selector.

    ``tree`` is the boolean root node; ``stop`` is the offset of the token at
    which the broker stops reading (the rest of the text is ignored), or None
    when the whole text was read.
    """

    tree: Node
    stop: int | None


class _Failure(Exception):
    """Carries a SelectorSyntaxError out of PLY's driver untouched."""


def _fail(position: int, reason: str, cause: str):
    raise SelectorSyntaxError(_state.text, position, reason, cause)


_state = threading.local()


def _describe(kind: str | None, value) -> str:
    """A token as error messages name it (``kind`` None: end of input)."""
    if kind is None:
        return "end of input"
    if kind == "STRING":
        return f"string literal {canonical_form(Literal('string', value, '', 0))}"
    if kind == "ID":
        return f"identifier {value!r}"
    if kind in ("DECIMAL", "FLOATING"):
        return f"number {value!r}"
    return f"{value!r}"


# -- parse-time checks (docs/selector-semantics.md#parse-time-checks) ----------------------------------

# Exact classes (no node class is subclassed): a set lookup is cheaper than isinstance chains.
_BOOLEAN_TYPES = frozenset((BoolCast, Not, Logical, Comparison, IsNull, Between, In, StringMatch))
_BOOLEAN_LITERALS = frozenset(("true", "false", "null"))
_NUMBER_LITERALS = frozenset(("int", "long", "double"))


def _as_boolean(node: Node) -> Node:
    cls = type(node)
    if cls is Property:
        return BoolCast(node)
    if cls in _BOOLEAN_TYPES or (cls is Literal and node.kind in _BOOLEAN_LITERALS):
        return node
    _fail(node.position, f"Expression will not result in a boolean value: {canonical_form(node)}",
          "ParseException")


def _check_orderable(node: Node) -> None:
    cls = type(node)
    if cls in _BOOLEAN_TYPES or (cls is Literal and node.kind not in _NUMBER_LITERALS):
        _fail(node.position, f"Value '{canonical_form(node)}' cannot be compared.", "RuntimeException")


def _ordering(op: str, left: Node, right: Node, position: int) -> Comparison:
    _check_orderable(left)
    _check_orderable(right)
    return Comparison(op, left, right, position)


def _equality(op: str, left: Node, right: Node, position: int) -> Comparison:
    for side in (left, right):
        if isinstance(side, Literal) and side.kind == "null":
            _fail(side.position, "'NULL' cannot be compared.", "RuntimeException")
    if (isinstance(left, Literal) and isinstance(right, Literal) and left.kind in ("true", "false")
            and right.kind not in ("true", "false")):
        _fail(position, f"'{canonical_form(left)}' cannot be compared with '{canonical_form(right)}'",
              "RuntimeException")
    return Comparison(op, left, right, position)


def _between(operand: Node, low: Node, high: Node, negated: bool, position: int) -> Between:
    if not negated and isinstance(low, Literal) and isinstance(high, Literal):
        if low.kind == "null" or high.kind == "null":
            _fail(position, "Illegal values of between, values can not be null!", "RuntimeException")
        try:
            order = java.compare(high.value, low.value)
        except java.JavaNumberFormatError as exc:
            _fail(high.position, f"BETWEEN bounds are not comparable: {exc}", "RuntimeException")
        except java.JavaClassCastError as exc:
            _fail(high.position, f"BETWEEN bounds are not comparable: {exc}", "ClassCastException")
        if order < 0:
            _fail(position, f"Illegal values of between, left value({canonical_form(low)}) must less "
                            f"than or equal to right value({canonical_form(high)})", "RuntimeException")
    for bound in (low, high):
        _check_orderable(operand)
        _check_orderable(bound)
    return Between(operand, low, high, negated, position)


def _in(operand: Node, values: list, negated: bool, position: int) -> In:
    if not isinstance(operand, Property):
        _fail(operand.position, f"Expected a property for In expression, got: {canonical_form(operand)}",
              "RuntimeException")
    return In(operand, tuple(values), negated, position)


# -- reductions -------------------------------------------------------------------------------
# One function per grammar rule, called as ``rule(values, positions)`` with the values and the
# token offsets of the rule's right-hand side. The fast driver (``parse``) calls them directly;
# the ``p_`` functions below hand them PLY's arguments (``_parse_reference``).

def _r_selector(v, ps):
    return _as_boolean(v[0])


def _r_or(v, ps):
    return Logical("OR", _as_boolean(v[0]), _as_boolean(v[2]), ps[1])


def _r_and(v, ps):
    return Logical("AND", _as_boolean(v[0]), _as_boolean(v[2]), ps[1])


def _r_equality(v, ps):
    return _equality(v[1], v[0], v[2], ps[1])


def _r_is_null(v, ps):
    return IsNull(v[0], len(v) == 4, ps[1])


def _r_ordering(v, ps):
    return _ordering(v[1], v[0], v[2], ps[1])


def _r_match(v, ps):
    negated = len(v) == 4
    op, op_pos = v[1 + negated]
    return StringMatch(op, v[0], v[-1], negated, ps[1] if negated else op_pos)


def _r_match_op(v, ps):
    return (v[0].upper(), ps[0])


def _r_between(v, ps):
    return _between(v[0], v[-3], v[-1], len(v) == 6, ps[1])


def _r_in(v, ps):
    return _in(v[0], v[-2], len(v) == 6, ps[1])


def _r_string_list(v, ps):
    if len(v) == 1:
        return [v[0]]
    v[0].append(v[2])
    return v[0]


def _r_plus(v, ps):
    return v[1]


def _r_minus(v, ps):
    return Negate(v[1], ps[0])


def _r_not(v, ps):
    return Not(_as_boolean(v[1]), ps[0])


def _r_paren(v, ps):
    v[1].parens = True
    return v[1]


def _r_id(v, ps):
    return Property(v[0], ps[0])


def _r_string(v, ps):
    return Literal("string", v[0], v[0], ps[0])


_CONSTANTS = {"true": True, "false": False, "null": None}


def _r_constant(v, ps):
    kind = v[0].lower()
    return Literal(kind, _CONSTANTS[kind], v[0], ps[0])


def _r_number(v, ps):
    return _number_literal(v[0], ps[0])


# -- grammar ----------------------------------------------------------------------------------

def _ply(rule, p):
    """Call ``rule`` with a PLY production's right-hand side."""
    n = len(p)
    return rule([p[i] for i in range(1, n)], [p.lexpos(i) for i in range(1, n)])


def p_selector(p):
    "selector : or_expr"
    p[0] = _ply(_r_selector, p)


def p_or_expr(p):
    """or_expr : or_expr OR and_expr
               | and_expr"""
    p[0] = p[1] if len(p) == 2 else _ply(_r_or, p)


def p_and_expr(p):
    """and_expr : and_expr AND eq_expr
                | eq_expr"""
    p[0] = p[1] if len(p) == 2 else _ply(_r_and, p)


def p_eq_expr(p):
    """eq_expr : eq_expr EQ cmp_expr
               | eq_expr NE cmp_expr
               | cmp_expr"""
    p[0] = p[1] if len(p) == 2 else _ply(_r_equality, p)


def p_eq_expr_is_null(p):
    """eq_expr : eq_expr IS NULL
               | eq_expr IS NOT NULL"""
    p[0] = _ply(_r_is_null, p)


def p_cmp_expr(p):
    """cmp_expr : cmp_expr GT unary
                | cmp_expr GE unary
                | cmp_expr LT unary
                | cmp_expr LE unary
                | unary"""
    p[0] = p[1] if len(p) == 2 else _ply(_r_ordering, p)


def p_cmp_expr_match(p):
    """cmp_expr : cmp_expr match_op STRING
                | cmp_expr NOT match_op STRING"""
    p[0] = _ply(_r_match, p)


def p_match_op(p):
    """match_op : CONTAINS
                | STARTSWITH
                | ENDSWITH"""
    p[0] = _ply(_r_match_op, p)


def p_cmp_expr_between(p):
    """cmp_expr : cmp_expr BETWEEN unary AND unary
                | cmp_expr NOT BETWEEN unary AND unary"""
    p[0] = _ply(_r_between, p)


def p_cmp_expr_in(p):
    """cmp_expr : cmp_expr IN LPAREN string_list RPAREN
                | cmp_expr NOT IN LPAREN string_list RPAREN"""
    p[0] = _ply(_r_in, p)


def p_string_list(p):
    """string_list : string_list COMMA STRING
                   | STRING"""
    p[0] = _ply(_r_string_list, p)


def p_unary_plus(p):
    "unary : PLUS unary"
    p[0] = _ply(_r_plus, p)


def p_unary_minus(p):
    "unary : MINUS unary"
    p[0] = _ply(_r_minus, p)


def p_unary_not(p):
    "unary : NOT unary"
    p[0] = _ply(_r_not, p)


def p_unary_primary(p):
    """unary : primary"""
    p[0] = p[1]


def p_primary_paren(p):
    "primary : LPAREN or_expr RPAREN"
    p[0] = _ply(_r_paren, p)


def p_primary_id(p):
    "primary : ID"
    p[0] = _ply(_r_id, p)


def p_primary_string(p):
    "primary : STRING"
    p[0] = _ply(_r_string, p)


def p_primary_constant(p):
    """primary : TRUE
               | FALSE
               | NULL"""
    p[0] = _ply(_r_constant, p)


def _number_literal(text: str, position: int) -> Literal:
    """Type a numeric token as the broker does (the checks run as soon as it is read)."""
    if text[-1] in "lL" or text.isdigit():
        value = int(text.rstrip("lL"))
        if value > java.LONG_MAX:
            _fail(position, f'integer literal out of range: For input string: "{text.rstrip("lL")}"',
                  "NumberFormatException")
        if value <= java.INT_MAX:
            return Literal("int", value, text, position)
        return Literal("long", java.Long(value), text, position)
    value = float(text)
    if value == float("inf"):
        _fail(position, f"{text} is greater than 1.7976931348623157E308", "RuntimeException")
    if value < DOUBLE_MIN_VALUE:
        _fail(position, f"{text} is less than 4.9E-324", "RuntimeException")
    return Literal("double", value, text, position)


def p_primary_number(p):
    """primary : DECIMAL
               | FLOATING"""
    p[0] = _ply(_r_number, p)


class _TokenStream:
    """The lexer as the parser sees it.

    The broker types a number literal as soon as it reads it, before looking
    at the next token; the LALR parser only reduces it after reading that
    token. So a bad literal's error must win over a lexical error just after it.
    """

    def __init__(self, text: str):
        self._lexer = SelectorLexer(text)
        self._last = None

    def token(self):
        try:
            tok = self._lexer.token()
        except SelectorSyntaxError:
            last = self._last
            if last is not None and last.type in ("DECIMAL", "FLOATING"):
                _number_literal(last.value, last.lexpos)
            raise
        self._last = tok
        return tok

    def input(self, text: str) -> None:  # PLY hands the text over again; ours is set already
        pass


def p_error(tok):
    st = _state
    if tok is not None and not st.stopped:
        # First error: the broker would stop here if what came before is complete.
        st.stopped = True
        st.stop = tok
        _parser.errok()
        end = lex.LexToken()
        end.type, end.value, end.lineno = "$end", None, 1
        end.lexpos = len(st.text) if tok is None else tok.lexpos
        return end
    bad = st.stop if st.stopped else tok
    if bad is None:
        _fail(len(st.text), "syntax error at end of input", "ParseException")
    _fail(bad.lexpos, f"syntax error at {_describe(bad.type, bad.value)}", "ParseException")


_parser = yacc.yacc(debug=False, write_tables=False, errorlog=yacc.NullLogger(), start="selector")
_lock = threading.Lock()

# -- the fast driver --------------------------------------------------------------------------
# PLY's LALR tables, read once from the parser PLY built above, and the reduction of each
# production. A unit production whose rule passes its value through (``unary : primary``,
# ``cmp_expr : unary``, ...) only changes the state; the others call their ``_r_`` function.
_ACTIONS = _parser.action                  # state -> {token type: shift > 0, reduce < 0, accept 0}
_GOTOS = _parser.goto                      # state -> {nonterminal: state}
_DEFAULTED = _parser.defaulted_states      # state -> the one reduction it makes without lookahead
_PASS_THROUGH = {"p_or_expr", "p_and_expr", "p_eq_expr", "p_cmp_expr", "p_unary_primary"}
_RULES = {
    "p_selector": _r_selector, "p_or_expr": _r_or, "p_and_expr": _r_and, "p_eq_expr": _r_equality,
    "p_eq_expr_is_null": _r_is_null, "p_cmp_expr": _r_ordering, "p_cmp_expr_match": _r_match,
    "p_match_op": _r_match_op, "p_cmp_expr_between": _r_between, "p_cmp_expr_in": _r_in,
    "p_string_list": _r_string_list, "p_unary_plus": _r_plus, "p_unary_minus": _r_minus,
    "p_unary_not": _r_not, "p_primary_paren": _r_paren, "p_primary_id": _r_id,
    "p_primary_string": _r_string, "p_primary_constant": _r_constant, "p_primary_number": _r_number,
}
# production number -> (nonterminal, right-hand side length, rule or None to pass the value through)
_PRODUCTIONS = [(prod.name, prod.len,
                 None if prod.len == 1 and prod.func in _PASS_THROUGH else _RULES.get(prod.func))
                for prod in _parser.productions]


def _syntax_error(kind, value, position: int):
    what = "end of input" if kind is None else _describe(kind, value)
    _fail(position, f"syntax error at {what}", "ParseException")


def _lexical_error_after(text: str, position: int, kind, value, where):
    # The broker types a number literal as soon as it reads it, before the next token; its
    # error wins over a lexical error just after it.
    if kind in ("DECIMAL", "FLOATING"):
        _number_literal(value, where)
    raise lexical_error(text, position)


# What a kernel's Parser is built from (the tests build one per engine).
_DRIVER_ARGS = (_ACTIONS, _GOTOS, _DEFAULTED, _PRODUCTIONS, _syntax_error, _lexical_error_after)
_driver = _kernel.Parser(*_DRIVER_ARGS)


def parse(text: str) -> ParseResult:
    """Parse ``text`` as the broker would.

    PLY's LALR tables, driven by the engine's ``Parser`` (``_lalr.pyx``, or
    its twin ``_lalr_py.py``: PLY's loop with the broker's stop rule of docs/selector-semantics.md#no-end-of-input-check
    in place of PLY's error recovery), over the fast scanner's tokens.
    :func:`_parse_reference` runs the same grammar through PLY's own lexer
    and driver and gives the same results.

    Parameters
    ----------
    text : str
        Selector text.

    Returns
    -------
    ParseResult

    Raises
    ------
    SelectorSyntaxError
        Where the broker's compile fails, with the position of the offending token.
    TypeError
        If ``text`` is not a str.
    """
    if not isinstance(text, str):
        raise TypeError(f"selector must be a str, got {type(text).__name__}")
    _state.text = text
    try:
        tree, stop = _driver.parse(text)
    finally:
        _state.text = None
    return ParseResult(tree, stop)


def _parse_reference(text: str) -> ParseResult:
    """:func:`parse` through PLY's own lexer and LALR driver (the reference the tests compare with)."""
    if not isinstance(text, str):
        raise TypeError(f"selector must be a str, got {type(text).__name__}")
    with _lock:  # PLY's parser object keeps its state on itself
        _state.text = text
        _state.stop = None
        _state.stopped = False
        try:
            tree = _parser.parse(text, lexer=_TokenStream(text))
        finally:
            stop = _state.stop
            _state.text = _state.stop = None
    return ParseResult(tree, None if stop is None else stop.lexpos)
