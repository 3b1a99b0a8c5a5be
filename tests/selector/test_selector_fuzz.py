"""Property tests for the selector: random selectors from the grammar and mutated ones.

Whatever text comes in, the engine's parser and PLY's own lexer and driver give
the same tree or the same error, and ``selector.compile`` either returns a selector or raises
``SelectorSyntaxError`` with a position inside the text; a compiled selector
evaluates to the same result or error in the Cython engine, the pure-Python
twin and the batch (Arrow) path; ``canonical(sql)`` parses back to the same tree.

The number of examples follows the hypothesis profile: ``fast`` (the default,
used by ``make test``) or ``long`` (``HYPOTHESIS_PROFILE=long``), registered in
``tests/conftest.py``.
"""
from __future__ import annotations

import importlib
import math
import re

import pytest
from helpers import load_jsonl
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

import selector
from selector import _eval_py, parser
from selector.nodes import Node, canonical_form
from selector.parser import parse

pa = pytest.importorskip("pyarrow")

try:
    _cython = importlib.import_module("selector._eval")
except ImportError:  # not built: the twin is compared with itself and the batch path
    _cython = None

CASES = load_jsonl("selector_cases.jsonl")
EXPRS = sorted({c["expr"] for c in CASES})
PROPS = [c["props"] for c in CASES if c["props"]]

FUZZ = settings(deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])

# -- the grammar, as a hypothesis strategy -----------------------------------------------------

NAMES = ["a", "b", "TAGS", "s", "p", "x_1", "$v", "_n", "Long9", "inx", "nulls", "ISX"]
INT_TEXTS = ["0", "1", "5", "7", "2147483647", "2147483648", "9223372036854775807",
             "9223372036854775808", "99999999999999999999", "3L", "10l", "0L"]
FLOAT_TEXTS = ["1.5", "5.", ".5", "0.0", "1e3", "1E-3", "2.5e+2", "1e400", "1e-400", "4.9e-324",
               "1.7976931348623157E308", "00.5", "3.0"]
STRING_TEXTS = ["''", "'x'", "'A'", "'hello'", "'it''s'", "'\u4e2d\u6587'", "'5'", "'5.0'", "' 7'",
                "'true'", "'\U0001F600'", "'a b'"]

name = st.sampled_from(NAMES)
number = st.sampled_from(INT_TEXTS + FLOAT_TEXTS)
string = st.sampled_from(STRING_TEXTS)
constant = st.sampled_from(["TRUE", "FALSE", "NULL", "true", "null"])


def _unary(inner: st.SearchStrategy[str]) -> st.SearchStrategy[str]:
    return st.one_of(
        inner,
        inner.map(lambda t: f"-{t}"),
        inner.map(lambda t: f"+ {t}"),
        inner.map(lambda t: f"NOT {t}"),
        inner.map(lambda t: f"({t})"),
    )


operand = _unary(st.one_of(name, number, string, constant))


def _comparison(value: st.SearchStrategy[str]) -> st.SearchStrategy[str]:
    op = st.sampled_from(["=", "<>", ">", ">=", "<", "<="])
    neg = st.sampled_from(["", "NOT "])
    match_op = st.sampled_from(["CONTAINS", "STARTSWITH", "ENDSWITH"])
    return st.one_of(
        st.tuples(value, op, value).map(" ".join),
        st.tuples(value, st.sampled_from(["IS NULL", "IS NOT NULL"])).map(" ".join),
        st.tuples(value, neg, value, value).map(lambda t: f"{t[0]} {t[1]}BETWEEN {t[2]} AND {t[3]}"),
        st.tuples(value, neg, st.lists(string, min_size=1, max_size=4)).map(
            lambda t: f"{t[0]} {t[1]}IN ({', '.join(t[2])})"),
        st.tuples(value, neg, match_op, string).map(lambda t: f"{t[0]} {t[1]}{t[2]} {t[3]}"),
        value,
    )


def _boolean(leaf: st.SearchStrategy[str]) -> st.SearchStrategy[str]:
    def extend(inner):
        return st.one_of(
            st.tuples(inner, st.sampled_from(["AND", "OR", "and", "Or"]), inner).map(" ".join),
            inner.map(lambda t: f"NOT ({t})"),
            inner.map(lambda t: f"({t})"),
            st.tuples(inner, st.sampled_from(["=", "<>"]), operand).map(" ".join),
        )

    return st.recursive(leaf, extend, max_leaves=8)


selectors = _boolean(_comparison(operand))

# Property values that probe Java's number and boolean grammars.
TRICKY = ["1", "5", "7", "-3", "+1", "01", "5.0", "3.5", " 5", "5 ", "abc", "true", "TRUE", "NaN",
          "-0.0", "Infinity", "0x1p3", "5d", "1e5f", "2147483648", "9223372036854775807",
          "\u0663", "\uff15", "\u4e2d\u6587", "hello", "it's", "", "A", "x"]
value = st.one_of(st.none(), st.sampled_from(TRICKY), st.text(max_size=5))

# -- what every run checks ----------------------------------------------------------------------


def _parsed(parse_function, sql: str):
    try:
        result = parse_function(sql)
    except selector.SelectorSyntaxError as exc:
        return ("error", str(exc), exc.position, exc.cause)
    return ("ok", canonical_form(result.tree), result.stop)


def _compile(sql: str):
    """The selector, or the syntax error after checking it describes a place in ``sql``.

    Either way, the engine's scanner and LALR driver must agree with PLY's own
    lexer and driver (``parser._parse_reference``) on the tree, the stop
    offset, or the error's text, position and cause.
    """
    assert _parsed(parse, sql) == _parsed(parser._parse_reference, sql), sql
    try:
        return selector.compile(sql)
    except selector.SelectorSyntaxError as exc:
        assert 0 <= exc.position <= len(sql), (sql, exc.position)
        assert exc.sql == sql
        assert str(exc).startswith(f"{exc.line}:{exc.column}: "), str(exc)
        return None


def _outcome(evaluator, props):
    try:
        return evaluator.evaluate_value(props)
    except selector.SelectorEvaluationError as exc:
        return ("error", exc.cause)


def _check_engines(s: selector.Selector, rows: list[dict[str, str]]) -> None:
    engines = [_eval_py.Evaluator(s._program)]
    if _cython is not None:
        engines.append(_cython.Evaluator(s._program))
    want = [_outcome(engines[0], props) for props in rows]
    for engine in engines[1:]:
        assert [_outcome(engine, props) for props in rows] == want, (s.sql, rows)
    codes = [{True: selector.TRUE, False: selector.FALSE, None: selector.UNKNOWN}.get(w, selector.ERROR)
              if not isinstance(w, tuple) else selector.ERROR for w in want]
    for engine in engines:
        assert engine.evaluate_many(rows).tolist() == codes, (s.sql, rows)
    columns = {n: pa.array([r.get(n) for r in rows], pa.string()) for n in sorted(s.properties)}
    batch = s.evaluate_arrow(columns, num_rows=len(rows))
    errors = batch.field("error").to_pylist()
    results = batch.field("result").to_pylist()
    for i, w in enumerate(want):
        if isinstance(w, tuple):
            assert errors[i] and results[i] is None, (s.sql, rows[i], w)
        else:
            assert not errors[i] and results[i] is w, (s.sql, rows[i], w, results[i])


def _shape(node: Node):
    """The tree without positions or parentheses: what the broker would evaluate."""
    fields = []
    for cls in type(node).__mro__:
        for slot in getattr(cls, "__slots__", ()):
            if slot in ("position", "parens", "__weakref__", "text"):
                continue
            v = getattr(node, slot, None)
            if isinstance(v, Node):
                v = _shape(v)
            elif isinstance(v, (list, tuple)):
                v = tuple(_shape(x) if isinstance(x, Node) else x for x in v)
            elif isinstance(v, float) and math.isnan(v):
                v = "NaN"
            fields.append((slot, v))
    return (type(node).__name__, tuple(fields))


def _check_canonical(sql: str) -> None:
    form = selector.canonical(sql)
    assert _shape(parse(form).tree) == _shape(parse(sql).tree), (sql, form)
    assert selector.canonical(form) == form


# -- random selectors from the grammar ----------------------------------------------------------

@FUZZ
@given(sql=selectors, rows=st.lists(st.dictionaries(name, value), min_size=1, max_size=6))
@example(sql="a > 5 AND TAGS IN ('A', 'B')", rows=[{"a": "7", "TAGS": "A"}, {"a": "5.0"}, {}])
@example(sql="NOT (a BETWEEN 1 AND 9223372036854775808) OR s CONTAINS ''", rows=[{"a": "2", "s": "x"}])
def test_grammar_selectors_compile_or_fail_cleanly_and_engines_agree(sql, rows):
    s = _compile(sql)
    if s is None:
        return
    rows = [{k: v for k, v in r.items() if v is not None} for r in rows]
    _check_engines(s, rows)
    _check_canonical(sql)


# -- mutated selectors ---------------------------------------------------------------------------

TOKEN = re.compile(r"'(?:[^']|'')*'|[A-Za-z_$][A-Za-z0-9_$]*|[0-9.]+(?:[eE][+-]?[0-9]+)?[lL]?|<>|>=|<=|\S")
VOCABULARY = ["AND", "OR", "NOT", "(", ")", ",", "'", "=", "<>", "<", ">=", "IN", "BETWEEN", "IS", "NULL",
              "TRUE", "CONTAINS", "ENDSWITH", "-", "+", "--", "/*", "*/", "1e", ".", "0x1F", "5L", "a",
              "9" * 400, "1" + "0" * 330 + ".5", "'" + "z" * 5000 + "'", "\u0000", "\ud800", "#", "\u00a0"]


@st.composite
def mutated(draw) -> str:
    base = draw(st.sampled_from(EXPRS))
    toks = TOKEN.findall(base) or [base]
    for _ in range(draw(st.integers(1, 3))):
        i = draw(st.integers(0, len(toks)))
        how = draw(st.sampled_from(["delete", "insert", "swap", "duplicate", "bytes", "truncate"]))
        if how == "delete" and toks:
            del toks[min(i, len(toks) - 1)]
        elif how == "insert":
            toks.insert(i, draw(st.sampled_from(VOCABULARY)))
        elif how == "swap" and len(toks) > 1:
            j = min(i, len(toks) - 2)
            toks[j], toks[j + 1] = toks[j + 1], toks[j]
        elif how == "duplicate" and toks:
            j = min(i, len(toks) - 1)
            toks.insert(j, toks[j])
        elif how == "bytes":
            toks.insert(i, draw(st.text(min_size=1, max_size=8)))
        elif how == "truncate":
            text = " ".join(toks)
            return text[:draw(st.integers(0, len(text)))]
    sep = draw(st.sampled_from([" ", "", "\n", "\t"]))
    return sep.join(toks)


@FUZZ
@given(sql=mutated(), rows=st.lists(st.sampled_from(PROPS), min_size=1, max_size=4))
@example(sql="a > " + "9" * 400, rows=[{"a": "1"}])
@example(sql="a IN (" + ", ".join(["'x'"] * 3000) + ")", rows=[{"a": "x"}])
def test_mutated_selectors_compile_or_fail_cleanly_and_engines_agree(sql, rows):
    s = _compile(sql)
    if s is None:
        return
    _check_engines(s, rows)
    _check_canonical(sql)


@FUZZ
@given(sql=st.text(max_size=60))
def test_arbitrary_text_never_escapes_as_another_exception(sql):
    s = _compile(sql)
    if s is not None:
        _check_canonical(sql)
