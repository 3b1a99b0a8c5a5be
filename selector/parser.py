"""The broker's SQL92 selector grammar (PLY, LALR), building :mod:`selector.nodes`.

The grammar is the broker's precedence ladder (spec §8.3), one rule per level::

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

The broker has no end-of-input check (§8.4): it reads one token past a
complete expression and, if that token cannot continue it, stops there and
ignores the rest. Here the first syntax error is answered by substituting
end-of-input for the offending token; if the expression is complete the parse
succeeds (``ParseResult.stop`` says where), otherwise the error is reported at
the original token. The parse-time checks of §8.5 run as the nodes are built.

Tables are built in memory once, at import (no ``parser.out``, no table file).
The LALR driver keeps its own stack, so nesting depth is limited only by memory.
"""
from __future__ import annotations

import threading
from dataclasses import dataclass

from ply import lex, yacc

from . import _javalang as java
from .errors import SelectorSyntaxError
from .lexer import SelectorLexer, tokens  # noqa: F401  (PLY reads ``tokens`` from this module)
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
    is_boolean,
)

__all__ = ["ParseResult", "parse"]

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


def _describe(tok) -> str:
    if tok is None:
        return "end of input"
    if tok.type == "STRING":
        return f"string literal {canonical_form(Literal('string', tok.value, '', 0))}"
    if tok.type == "ID":
        return f"identifier {tok.value!r}"
    if tok.type in ("DECIMAL", "FLOATING"):
        return f"number {tok.value!r}"
    return f"{tok.value!r}"


# -- parse-time checks (spec §8.5) -------------------------------------------------------------

def _as_boolean(node: Node) -> Node:
    if isinstance(node, Property):
        return BoolCast(node)
    if is_boolean(node):
        return node
    _fail(node.position, f"Expression will not result in a boolean value: {canonical_form(node)}",
          "ParseException")


def _check_orderable(node: Node) -> None:
    if (isinstance(node, Literal) and not node.is_number) or is_boolean(node):
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


# -- grammar ----------------------------------------------------------------------------------

def p_selector(p):
    "selector : or_expr"
    p[0] = _as_boolean(p[1])


def p_or_expr(p):
    """or_expr : or_expr OR and_expr
               | and_expr"""
    if len(p) == 2:
        p[0] = p[1]
    else:
        p[0] = Logical("OR", _as_boolean(p[1]), _as_boolean(p[3]), p.lexpos(2))


def p_and_expr(p):
    """and_expr : and_expr AND eq_expr
                | eq_expr"""
    if len(p) == 2:
        p[0] = p[1]
    else:
        p[0] = Logical("AND", _as_boolean(p[1]), _as_boolean(p[3]), p.lexpos(2))


def p_eq_expr(p):
    """eq_expr : eq_expr EQ cmp_expr
               | eq_expr NE cmp_expr
               | cmp_expr"""
    if len(p) == 2:
        p[0] = p[1]
    else:
        p[0] = _equality("=" if p.slice[2].type == "EQ" else "<>", p[1], p[3], p.lexpos(2))


def p_eq_expr_is_null(p):
    """eq_expr : eq_expr IS NULL
               | eq_expr IS NOT NULL"""
    p[0] = IsNull(p[1], len(p) == 5, p.lexpos(2))


def p_cmp_expr(p):
    """cmp_expr : cmp_expr GT unary
                | cmp_expr GE unary
                | cmp_expr LT unary
                | cmp_expr LE unary
                | unary"""
    if len(p) == 2:
        p[0] = p[1]
    else:
        p[0] = _ordering(p[2], p[1], p[3], p.lexpos(2))


def p_cmp_expr_match(p):
    """cmp_expr : cmp_expr match_op STRING
                | cmp_expr NOT match_op STRING"""
    negated = len(p) == 5
    op, op_pos = p[2 + negated]
    p[0] = StringMatch(op, p[1], p[len(p) - 1], negated, p.lexpos(2) if negated else op_pos)


def p_match_op(p):
    """match_op : CONTAINS
                | STARTSWITH
                | ENDSWITH"""
    p[0] = (p.slice[1].type, p.lexpos(1))


def p_cmp_expr_between(p):
    """cmp_expr : cmp_expr BETWEEN unary AND unary
                | cmp_expr NOT BETWEEN unary AND unary"""
    negated = len(p) == 7
    p[0] = _between(p[1], p[len(p) - 3], p[len(p) - 1], negated, p.lexpos(2))


def p_cmp_expr_in(p):
    """cmp_expr : cmp_expr IN LPAREN string_list RPAREN
                | cmp_expr NOT IN LPAREN string_list RPAREN"""
    negated = len(p) == 7
    p[0] = _in(p[1], p[len(p) - 2], negated, p.lexpos(2))


def p_string_list(p):
    """string_list : string_list COMMA STRING
                   | STRING"""
    if len(p) == 2:
        p[0] = [p[1]]
    else:
        p[1].append(p[3])
        p[0] = p[1]


def p_unary_plus(p):
    "unary : PLUS unary"
    p[0] = p[2]


def p_unary_minus(p):
    "unary : MINUS unary"
    p[0] = Negate(p[2], p.lexpos(1))


def p_unary_not(p):
    "unary : NOT unary"
    p[0] = Not(_as_boolean(p[2]), p.lexpos(1))


def p_unary_primary(p):
    """unary : primary"""
    p[0] = p[1]


def p_primary_paren(p):
    "primary : LPAREN or_expr RPAREN"
    p[2].parens = True
    p[0] = p[2]


def p_primary_id(p):
    "primary : ID"
    p[0] = Property(p[1], p.lexpos(1))


def p_primary_string(p):
    "primary : STRING"
    p[0] = Literal("string", p[1], p[1], p.lexpos(1))


def p_primary_constant(p):
    """primary : TRUE
               | FALSE
               | NULL"""
    kind = p.slice[1].type.lower()
    p[0] = Literal(kind, {"true": True, "false": False, "null": None}[kind], p[1], p.lexpos(1))


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
    p[0] = _number_literal(p[1], p.lexpos(1))


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
    where = len(st.text) if bad is None else bad.lexpos
    _fail(where, f"syntax error at {_describe(bad)}", "ParseException")


_parser = yacc.yacc(debug=False, write_tables=False, errorlog=yacc.NullLogger(), start="selector")
_lock = threading.Lock()


def parse(text: str) -> ParseResult:
    """Parse ``text`` as the broker would.

    Raises
    ------
    SelectorSyntaxError
        Where the broker's compile fails, with the position of the offending token.
    TypeError
        If ``text`` is not a str.
    """
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
