"""Tokens of the broker's SQL92 selector language (PLY lexer).

The rules follow the broker's lexer (docs/selector-semantics.md#lexical):

* whitespace is exactly space, tab, LF, CR and FF; any other character outside
  a string literal is a lexical error;
* ``--`` starts a comment (up to and including the next LF, CR or CRLF) only
  when a line terminator follows before the end of the input; otherwise it is
  two ``-`` tokens;
* ``/* ... */`` comments do not nest;
* keywords are case-insensitive and win over identifiers of the same length;
  identifiers are ASCII letters, digits, ``_`` and ``$`` (case-sensitive);
* decimal literals have no leading zeros (``007`` is ``0``, ``0``, ``7``) and
  an optional ``l``/``L`` suffix; floating literals need a ``.`` or exponent;
* a string literal is the longest ``'...'`` prefix in which ``''`` stands for
  one quote.

Two implementations produce the same tokens: :class:`SelectorLexer`, the
PLY lexer (the reference, one regular-expression rule per token), and
:func:`scan`, which the parser uses: one compiled master expression that also
skips whitespace, run over the whole text at once. Text after the token that
ends the expression is never looked at by the parser (docs/selector-semantics.md#no-end-of-input-check); ``scan``
returns a lexical error as a value instead of raising it, so an error there is
raised only if the parser asks for that token.
"""
from __future__ import annotations

import re

from ply import lex

from .errors import SelectorSyntaxError

__all__ = ["KEYWORDS", "SelectorLexer", "scan", "tokens"]

KEYWORDS = {
    kw: kw
    for kw in (
        "NOT", "AND", "OR", "BETWEEN", "IN", "TRUE", "FALSE", "NULL", "IS",
        "CONTAINS", "STARTSWITH", "ENDSWITH",
    )
}

tokens = (
    "ID", "DECIMAL", "FLOATING", "STRING",
    "EQ", "NE", "GT", "GE", "LT", "LE", "LPAREN", "RPAREN", "COMMA", "PLUS", "MINUS",
) + tuple(KEYWORDS)


class _Rules:
    """PLY rule holder; each method's docstring is its regular expression."""

    tokens = tokens
    t_ignore = " \t\n\r\f"

    def t_BLOCK_COMMENT(self, t):
        r"/\*(?:[^*]|\*(?!/))*\*/"

    def t_STRING(self, t):
        r"'(?:[^']++|'')*'"
        t.value = t.value[1:-1].replace("''", "'")
        return t

    def t_FLOATING(self, t):
        r"(?:[0-9]+\.[0-9]*(?:[eE][+-]?[0-9]+)?|\.[0-9]+(?:[eE][+-]?[0-9]+)?|[0-9]+[eE][+-]?[0-9]+)"
        return t

    def t_DECIMAL(self, t):
        r"(?:[1-9][0-9]*[lL]?|0)"
        return t

    def t_ID(self, t):
        r"[A-Za-z_$][A-Za-z0-9_$]*"
        t.type = KEYWORDS.get(t.value.upper(), "ID")
        return t

    def t_NE(self, t):
        r"<>"
        return t

    def t_GE(self, t):
        r">="
        return t

    def t_LE(self, t):
        r"<="
        return t

    def t_EQ(self, t):
        r"="
        return t

    def t_GT(self, t):
        r">"
        return t

    def t_LT(self, t):
        r"<"
        return t

    def t_LPAREN(self, t):
        r"\("
        return t

    def t_RPAREN(self, t):
        r"\)"
        return t

    def t_COMMA(self, t):
        r","
        return t

    def t_PLUS(self, t):
        r"\+"
        return t

    def t_MINUS(self, t):
        r"-"
        # "--" starts a comment only if a line terminator follows somewhere; checking that
        # with a regular expression would rescan the rest of the line at every "-".
        lexer = t.lexer
        pos = t.lexpos
        if lexer.lexdata.startswith("-", pos + 1) and lexer.last_eol > pos:
            text = lexer.lexdata
            ends = [i for i in (text.find("\n", pos), text.find("\r", pos)) if i >= 0]
            end = min(ends)
            lexer.lexpos = end + (2 if text.startswith("\r\n", end) else 1)
            return None
        return t

    def t_error(self, t):
        raise lexical_error(t.lexer.lexdata, t.lexpos)


def lexical_error(text: str, pos: int) -> SelectorSyntaxError:
    """The error for the character at ``pos`` of ``text`` that starts no token (the parser raises it too)."""
    ch = text[pos]
    if ch == "'":
        reason = "lexical error: unterminated string literal"
    elif text.startswith("/*", pos):
        reason = "lexical error: unterminated comment"
    else:
        reason = f"lexical error: unexpected character {ch!r} (U+{ord(ch):04X})"
    return SelectorSyntaxError(text, pos, reason, "TokenMgrError")


_MASTER = lex.lex(module=_Rules(), optimize=False, debug=False, errorlog=lex.NullLogger())


class SelectorLexer:
    """A fresh lexer over one selector text (PLY's ``input``/``token`` protocol)."""

    def __init__(self, text: str = ""):
        self._lexer = _MASTER.clone()
        self.input(text)

    def input(self, text: str) -> None:
        self._lexer.input(text)
        self._lexer.last_eol = max(text.rfind("\n"), text.rfind("\r"))

    def token(self):
        return self._lexer.token()

    def __iter__(self):
        while True:
            tok = self._lexer.token()
            if tok is None:
                return
            yield tok


# -- the fast scanner ---------------------------------------------------------------------------
# The same rules in the same order as _Rules (PLY tries function rules in definition order and
# takes the first that matches), preceded by the ignored characters, as one expression.
_WHITESPACE = " \t\n\r\f"
_MASTER_RE = re.compile(
    "[ \t\n\r\f]*+(?:"
    + "|".join(f"(?P<{name}>{getattr(_Rules, 't_' + name).__doc__})" for name in (
        "BLOCK_COMMENT", "STRING", "FLOATING", "DECIMAL", "ID"))
    + "|(?P<OP><>|>=|<=|[=><(),+])|(?P<MINUS>-)"
    + "|(?P<END>\\Z))"
)
_OPERATORS = {"<>": "NE", ">=": "GE", "<=": "LE", "=": "EQ", ">": "GT", "<": "LT", "(": "LPAREN",
              ")": "RPAREN", ",": "COMMA", "+": "PLUS"}


def scan(text: str) -> tuple[list, list, list, SelectorSyntaxError | None]:
    """Every token of ``text``, as PLY's lexer (:class:`SelectorLexer`) would produce them.

    Parameters
    ----------
    text : str
        Selector text.

    Returns
    -------
    types, values, positions : list
        Token type names, token values (string literals unquoted) and 0-based
        offsets, one entry per token, up to the first lexical error.
    error : SelectorSyntaxError or None
        The lexical error that stops the text, if any; it belongs to the
        token after the last one returned.
    """
    types: list = []
    values: list = []
    positions: list = []
    add_type = types.append
    add_value = values.append
    add_position = positions.append
    match = _MASTER_RE.match
    keyword = KEYWORDS.get
    operator = _OPERATORS.get
    last_eol = max(text.rfind("\n"), text.rfind("\r"))
    next_lf = next_cr = -2   # first LF / CR at or after the last "--" comment; -1: none; -2: unknown
    pos = 0
    while True:
        m = match(text, pos)
        if m is None:
            pos = len(text) - len(text[pos:].lstrip(_WHITESPACE))
            return types, values, positions, lexical_error(text, pos)
        kind = m.lastgroup
        start = m.start(kind)
        pos = m.end()
        if kind == "ID":
            value = m.group(kind)
            add_type(keyword(value.upper(), "ID"))
        elif kind == "OP":
            value = m.group(kind)
            add_type(operator(value))
        elif kind == "STRING":
            value = text[start + 1:pos - 1]
            if "''" in value:
                value = value.replace("''", "'")
            add_type("STRING")
        elif kind == "DECIMAL" or kind == "FLOATING":
            value = m.group(kind)
            add_type(kind)
        elif kind == "MINUS":
            if text.startswith("-", pos) and last_eol > start:
                # "--" with a line terminator somewhere after it: a comment up to that terminator.
                # Each search resumes where it last found something, so many comments stay linear.
                if next_lf != -1 and next_lf < start:
                    next_lf = text.find("\n", start)
                if next_cr != -1 and next_cr < start:
                    next_cr = text.find("\r", start)
                end = min(i for i in (next_lf, next_cr) if i >= 0)
                pos = end + (2 if text.startswith("\r\n", end) else 1)
                continue
            value = "-"
            add_type("MINUS")
        elif kind == "END":
            return types, values, positions, None
        else:  # BLOCK_COMMENT
            continue
        add_value(value)
        add_position(start)
