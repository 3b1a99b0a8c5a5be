"""The broker's selector language: what it accepts, how it groups, where it fails."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from helpers import load_jsonl
from hypothesis import given, settings
from hypothesis import strategies as st

import selector
from selector import _flatten_py, _lalr_py, compiler, lexer, parser
from selector.parser import parse

ROOT = Path(__file__).resolve().parents[2]


def accepts(sql: str) -> bool:
    try:
        selector.compile(sql)
    except selector.SelectorSyntaxError:
        return False
    return True


# -- lexical structure ------------------------------------------------------------------------

@pytest.mark.parametrize("sql", ["a = 1", "A\t=\n1", "a\r=\f1", "a = 1\r\n"])
def test_whitespace_is_exactly_space_tab_lf_cr_ff(sql):
    assert accepts(sql)


@pytest.mark.parametrize("ch", ["\u000b", "\u00a0", "\u3000", "\u0000"])
def test_other_whitespace_is_a_lexical_error(ch):
    with pytest.raises(selector.SelectorSyntaxError) as info:
        selector.compile(f"a ={ch}1")
    assert info.value.cause == "TokenMgrError"
    assert info.value.position == 3


def test_keywords_are_case_insensitive_and_reserved():
    assert selector.compile("a = 1 aNd b Is NoT nUlL").evaluate({"a": "1"}) is False
    assert not accepts("and = 1")
    assert selector.compile("ORDER = 1 AND notes = 2 AND INx = 3").properties == {"ORDER", "notes", "INx"}


def test_identifiers_are_case_sensitive_ascii():
    s = selector.compile("A = 'x'")
    assert s.evaluate({"a": "x"}) is None
    assert s.evaluate({"A": "x"}) is True
    assert accepts("$a_9 = 1 AND _b$ = 2")
    for bad in ("é = 1", "a.b = 1", "\u212a = 1"):
        assert not accepts(bad), bad


def test_line_comment_needs_a_terminator():
    assert selector.canonical("a = 1 -- note\nAND b = 2") == "((a = 1) AND (b = 2))"
    assert selector.canonical("a = 1 AND -- note\r\nb = 2") == "((a = 1) AND (b = 2))"
    # Without a terminator "--" is two minus signs; alone it is not boolean.
    with pytest.raises(selector.SelectorSyntaxError, match="not result in a boolean"):
        selector.compile("-- comment")
    assert parse("a = 1 -- c").stop == 6


def test_block_comments_do_not_nest():
    assert selector.canonical("/* x */ a /* y */ = 1") == "(a = 1)"
    assert not accepts("/* a /* b */ c */ a = 1")
    with pytest.raises(selector.SelectorSyntaxError, match="unterminated comment"):
        selector.compile("a = 1 /* open")


def test_string_literals():
    assert selector.compile("a = 'it''s'").evaluate({"a": "it's"}) is True
    # '' without a closing quote after it is not an escape: the literal ends at its first quote.
    assert selector.canonical("a = 'x'' OR b = '1'") == "(a = 'x'' OR b = ')"
    assert not accepts("a = 'x''")
    assert accepts("x >= 7 OR NOT (tags) 'a''")
    assert not accepts('a = "x"')
    assert selector.compile("a = 'back\\slash\nline'").evaluate({"a": "back\\slash\nline"}) is True


@pytest.mark.parametrize("sql, canonical", [
    ("a = 007", "(a = 0)"),
    ("a = 0L", "(a = 0)"),
    ("a = 0x10", "(a = 0)"),
    ("a = 010", "(a = 0)"),
    ("a = 5L", "(a = 5)"),
    ("a = 1E", "(a = 1)"),
    ("a = 5.", "(a = 5.0)"),
    ("a = .5", "(a = 0.5)"),
    ("a = 1.e5", "(a = 100000.0)"),
    ("a = 1.5e-3", "(a = 0.0015)"),
    ("a = 007.5", "(a = 7.5)"),
])
def test_number_tokens(sql, canonical):
    assert selector.canonical(sql) == canonical


def test_literal_typing_int_long_double():
    # An int literal parses the property as Integer, a long literal as Long, a double as Double.
    assert selector.compile("a = 2147483647L").evaluate({"a": "2147483647"}) is True
    with pytest.raises(selector.SelectorEvaluationError):
        selector.compile("a = 1").evaluate({"a": "3000000000"})
    assert selector.compile("a = 3000000000").evaluate({"a": "3000000000"}) is True
    assert selector.compile("a = -2147483648").evaluate({"a": "-2147483648"}) is True
    assert selector.compile("a = 9223372036854775807").evaluate({"a": "9223372036854775807"}) is True
    assert selector.compile("a = 1.0").evaluate({"a": " 1 "}) is True


@pytest.mark.parametrize("sql, cause", [
    ("a = 9223372036854775808", "NumberFormatException"),
    ("a = -9223372036854775808", "NumberFormatException"),
    ("a > 1.8e308", "RuntimeException"),
    ("a = 0.0", "RuntimeException"),
    ("a = 0.", "RuntimeException"),
    ("a = .0", "RuntimeException"),
    ("a = 0e5", "RuntimeException"),
    ("a = 1e-400", "RuntimeException"),
])
def test_literal_range_rejections(sql, cause):
    with pytest.raises(selector.SelectorSyntaxError) as info:
        selector.compile(sql)
    assert info.value.cause == cause
    assert info.value.position == 4 or sql.startswith("a = -") and info.value.position == 5


def test_smallest_positive_double_literal_is_accepted():
    assert selector.compile("a > 4.9E-324").evaluate({"a": "1"}) is True


# -- grammar and grouping ---------------------------------------------------------------------

@pytest.mark.parametrize("sql, canonical", [
    ("NOT a = 1", "((NOT a) = 1)"),
    ("a BETWEEN 1 AND 2 AND b = 1", "((a BETWEEN 1 AND 2) AND (b = 1))"),
    ("a = 1 OR b = 2 AND c = 3", "((a = 1) OR ((b = 2) AND (c = 3)))"),
    ("a <> 1 <> 2", "((a <> 1) <> 2)"),
    ("a IS NOT NULL = TRUE", "((a IS NOT NULL) = TRUE)"),
    ("+'x' = a", "('x' = a)"),
    ("-a = -1", "((-a) = (-1))"),
    ("a NOT IN ('x', 'y')", "(a NOT IN ('x', 'y'))"),
    ("s NOT CONTAINS 'x' AND s ENDSWITH 'y'", "((s NOT CONTAINS 'x') AND (s ENDSWITH 'y'))"),
    ("a > 1 CONTAINS 'x'", "((a > 1) CONTAINS 'x')"),
])
def test_grouping(sql, canonical):
    assert selector.canonical(sql) == canonical


@pytest.mark.parametrize("sql", ["NOT a > 1", "NOT a BETWEEN 1 AND 2", "NOT a IN ('x')"])
def test_not_binds_tighter_than_comparison(sql):
    with pytest.raises(selector.SelectorSyntaxError, match="cannot be compared|Expected a property"):
        selector.compile(sql)


@pytest.mark.parametrize("sql, canonical, rest", [
    ("a = 1 garbage", "(a = 1)", "garbage"),
    ("a = 1 + 2", "(a = 1)", "+ 2"),
    ("a = 1 - 2", "(a = 1)", "- 2"),
    ("a + 1 = 2", "a", "+ 1 = 2"),
    ("a = 1)garbage(((", "(a = 1)", ")garbage((("),
    ("a = 1 , x", "(a = 1)", ", x"),
    ("a IS NULL x", "(a IS NULL)", "x"),
    ("a = 1 x @", "(a = 1)", "x @"),
    ("a IS NULL NOT", "(a IS NULL)", "NOT"),
])
def test_text_after_a_complete_expression_is_ignored(sql, canonical, rest):
    result = parse(sql)
    assert selector.canonical(sql) == canonical
    assert sql[result.stop:] == rest


@pytest.mark.parametrize("sql", ["a = 1 AND", "a = 1 NOT", "a = 1 IS", "a = 1 @", "a = 1 é", "a = 1 ;",
                                 "a = 1 !", "a = 1 'open", "a = 1 /* open", "a = 1 OR OR"])
def test_tokens_that_continue_or_cannot_be_lexed_fail(sql):
    assert not accepts(sql)


# -- parse-time checks ------------------------------------------------------------------------

@pytest.mark.parametrize("sql, cause, fragment", [
    ("5", "ParseException", "boolean value"),
    ("'abc'", "ParseException", "boolean value"),
    ("NOT 5", "ParseException", "boolean value"),
    ("a = 1 AND 5", "ParseException", "boolean value"),
    ("-a", "ParseException", "boolean value"),
    ("a > '5'", "RuntimeException", "cannot be compared"),
    ("a > TRUE", "RuntimeException", "cannot be compared"),
    ("a > NULL", "RuntimeException", "cannot be compared"),
    ("(a = 1) > 1", "RuntimeException", "cannot be compared"),
    ("a = NULL", "RuntimeException", "'NULL' cannot be compared"),
    ("NULL = 1", "RuntimeException", "'NULL' cannot be compared"),
    ("TRUE = 5", "RuntimeException", "cannot be compared with"),
    ("TRUE = 'x'", "RuntimeException", "cannot be compared with"),
    ("a BETWEEN NULL AND 1", "RuntimeException", "can not be null"),
    ("a BETWEEN 10 AND 1", "RuntimeException", "must less than or equal"),
    ("a BETWEEN 1 AND 'x'", "RuntimeException", "not comparable"),
    ("a BETWEEN '0.0' AND TRUE", "ClassCastException", "not comparable"),
    ("a BETWEEN 'a' AND 'b'", "RuntimeException", "cannot be compared"),
    ("a BETWEEN FALSE AND TRUE", "RuntimeException", "cannot be compared"),
    ("'a' IN ('x')", "RuntimeException", "Expected a property"),
    ("a IN (1, 2)", "ParseException", "syntax error"),
    ("a CONTAINS b", "ParseException", "syntax error"),
    ("a == 1", "ParseException", "syntax error"),
])
def test_parse_time_rejections(sql, cause, fragment):
    with pytest.raises(selector.SelectorSyntaxError, match=fragment) as info:
        selector.compile(sql)
    assert info.value.cause == cause


@pytest.mark.parametrize("sql", ["5 = TRUE", "(a = 1) = TRUE", "a = TRUE", "'x' = TRUE", "5 CONTAINS 'a'",
                                 "a > -'x'", "a NOT BETWEEN 10 AND 1", "a BETWEEN 5 AND -5", "(a) IN ('x')"])
def test_parse_time_acceptances(sql):
    assert accepts(sql)


# -- errors: position, line, column, token ----------------------------------------------------

def test_syntax_error_names_the_token_and_its_place():
    with pytest.raises(selector.SelectorSyntaxError) as info:
        selector.compile("a = 1 AND\n  b = = 2")
    e = info.value
    assert (e.position, e.line, e.column) == (16, 2, 7)
    assert "'='" in str(e)
    assert str(e).startswith("2:7: ")
    assert isinstance(e, ValueError)


def test_error_at_end_of_input():
    with pytest.raises(selector.SelectorSyntaxError) as info:
        selector.compile("a = ")
    assert info.value.position == 4
    assert "end of input" in str(info.value)


def test_error_at_ignored_token_reports_that_token():
    with pytest.raises(selector.SelectorSyntaxError) as info:
        selector.compile("a = ) b")
    assert info.value.position == 4
    assert "')'" in str(info.value)


def test_lexical_error_position():
    with pytest.raises(selector.SelectorSyntaxError) as info:
        selector.compile("a = 1 AND b ! 2")
    assert (info.value.position, info.value.column) == (12, 13)
    assert "'!'" in str(info.value)


def test_semantic_error_points_at_the_operand():
    with pytest.raises(selector.SelectorSyntaxError) as info:
        selector.compile("x = 1 AND a > 'abc'")
    assert info.value.position == 14


def test_crlf_counts_as_one_line_break():
    with pytest.raises(selector.SelectorSyntaxError) as info:
        selector.compile("a = 1 AND\r\n\r\n!")
    assert (info.value.line, info.value.column) == (3, 1)


# -- API --------------------------------------------------------------------------------------

def test_compile_rejects_non_str():
    with pytest.raises(TypeError):
        selector.compile(b"a = 1")


def test_cache_returns_the_same_selector_and_remembers_failures(monkeypatch):
    s = selector.compile("cache_probe = 1")
    assert selector.compile("cache_probe = 1") is s
    with pytest.raises(selector.SelectorSyntaxError) as first:
        selector.compile("cache_probe >")
    calls = []
    monkeypatch.setattr(selector, "_compile_uncached", lambda sql: calls.append(sql))
    with pytest.raises(selector.SelectorSyntaxError) as second:
        selector.compile("cache_probe >")
    assert second.value is first.value
    assert selector.compile("cache_probe = 1") is s
    assert calls == []


def test_cache_is_bounded_and_keyed_by_exact_text():
    first = selector.compile("bounded_probe = 1")
    assert selector.compile("bounded_probe = 1 ") is not first
    for i in range(selector.CACHE_SIZE):
        selector.compile(f"evict_{i} = 1")
    assert len(selector._cache) == selector.CACHE_SIZE
    assert selector.compile("bounded_probe = 1") is not first


def test_properties_and_sql():
    s = selector.compile("a > 5 AND TAGS IN ('A', 'B') OR b IS NULL")
    assert s.properties == frozenset({"a", "TAGS", "b"})
    assert s.sql == "a > 5 AND TAGS IN ('A', 'B') OR b IS NULL"


def test_import_prints_nothing_and_writes_no_tables(tmp_path):
    code = "import selector; selector.compile('a = 1'); selector.canonical('b > 2')"
    out = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True,
                         env={"PYTHONPATH": str(ROOT)}, check=True)
    assert out.stdout == "" and out.stderr == ""
    assert list(tmp_path.iterdir()) == []
    assert not list((ROOT / "selector").glob("parser.out"))
    assert not list((ROOT / "selector").glob("parsetab*"))


# -- limits -----------------------------------------------------------------------------------

def test_ten_thousand_parentheses():
    s = selector.compile("(" * 10000 + "a = 1" + ")" * 10000)
    assert s.evaluate({"a": "1"}) is True


def test_hundred_thousand_parentheses_fail_or_succeed_cleanly():
    s = selector.compile("(" * 100000 + "a = 1" + ")" * 100000)
    assert s.evaluate({"a": "1"}) is True


def test_deep_not_and_negation_chains():
    s = selector.compile("NOT " * 10001 + "a")
    assert s.evaluate({"a": "x"}) is True   # NOT^odd of FALSE
    assert selector.canonical("NOT " * 3 + "a") == "(NOT (NOT (NOT a)))"
    s = selector.compile("-" * 10000 + "a = 1")
    assert s.evaluate({"a": "1"}) is None
    s = selector.compile("(a = 1 AND " * 5000 + "a = 1" + ")" * 5000)
    assert s.evaluate({"a": "1"}) is True
    assert s.evaluate({"a": "2"}) is False


def test_hundred_thousand_item_in_list():
    s = selector.compile("a IN (" + ",".join(f"'v{i}'" for i in range(100000)) + ")")
    assert s.evaluate({"a": "v99999"}) is True
    assert s.evaluate({"a": "v100000"}) is False


def test_one_megabyte_selectors():
    s = selector.compile("a = '" + "x" * 1_000_000 + "'")
    assert s.evaluate({"a": "x" * 1_000_000}) is True
    name = "p" * 1_000_000
    assert selector.compile(f"{name} IS NULL").properties == {name}
    # Token-dense text costs linear time (a few microseconds a token): keep these at ~150 kB.
    sql = " OR ".join(["a = 1"] * 25000) + " OR b = 'y'"
    assert selector.compile(sql).evaluate({"a": "2", "b": "y"}) is True
    with pytest.raises(selector.SelectorSyntaxError) as info:
        selector.compile("a = 1 AND " * 15000 + "AND")
    assert info.value.position == 150000
    assert not accepts("-" * 150_000)
    # A megabyte of "--" comment lines: each terminator search resumes where the last one
    # stopped (searching from each comment to the end of the text took seconds).
    s = selector.compile("--c\n" * 250_000 + "a = 1")
    assert s.evaluate({"a": "1"}) is True


# -- the fast scanner, driver and compiler agree with PLY and the two-pass compiler -----------

CASE_EXPRS = sorted({c["expr"] for c in load_jsonl("selector_cases.jsonl")})


def ply_tokens(text: str):
    """(type, value, position) of every token PLY's lexer produces, and its error if any."""
    out = []
    try:
        for tok in lexer.SelectorLexer(text):
            out.append((tok.type, tok.value, tok.lexpos))
    except selector.SelectorSyntaxError as exc:
        return out, (str(exc), exc.position, exc.cause)
    return out, None


try:
    from selector import _flatten as _flatten_cython
    from selector import _lalr as _lalr_cython
except ImportError:  # pragma: no cover - the engines are built by `make setup`
    _lalr_cython = _flatten_cython = None
# Per engine: its scanner and LALR driver, and its flattening pass.
KERNELS = [_lalr_py] + ([_lalr_cython] if _lalr_cython is not None else [])
FLATTEN = {_lalr_py: _flatten_py, _lalr_cython: _flatten_cython}
KERNEL_IDS = ["python", "cython"][:len(KERNELS)]


def scanned_tokens(text: str, kernel=None):
    kinds, values, positions, error = (kernel.scan if kernel else lexer.scan)(text)
    return (list(zip(kinds, values, positions)),
            None if error is None else (str(error), error.position, error.cause))


@pytest.fixture(params=KERNELS, ids=KERNEL_IDS)
def kernel(request, monkeypatch):
    """Each engine's scanner, driver and flattening pass in turn (Cython only where built)."""
    monkeypatch.setattr(parser, "_driver", request.param.Parser(*parser._DRIVER_ARGS))
    monkeypatch.setattr(compiler, "_flatten_kernel", FLATTEN[request.param])
    return request.param


def outcome(parse_function, text: str):
    """What a parse gives, in comparable form: the tree, the stop offset and the program, or the error."""
    try:
        result = parse_function(text)
    except selector.SelectorSyntaxError as exc:
        return ("error", str(exc), exc.position, exc.cause)
    program = compiler.compile_tree(result.tree)
    return ("ok", selector.nodes.canonical_form(result.tree), result.stop, program.nodes.tobytes(),
            program.args, [type(a) for a in program.args], program.props)


def reference_outcome(text: str):
    try:
        result = parser._parse_reference(text)
    except selector.SelectorSyntaxError as exc:
        return ("error", str(exc), exc.position, exc.cause)
    program = compiler._compile_tree_reference(result.tree)
    return ("ok", selector.nodes.canonical_form(result.tree), result.stop, program.nodes.tobytes(),
            program.args, [type(a) for a in program.args], program.props)


def test_scanners_agree_with_the_ply_lexer_on_every_case(kernel):
    for text in CASE_EXPRS:
        want = ply_tokens(text)
        assert scanned_tokens(text) == want, text
        assert scanned_tokens(text, kernel) == want, text


def test_fast_parse_and_compile_agree_with_ply_on_every_case(kernel):
    assert len(CASE_EXPRS) > 1000
    for text in CASE_EXPRS:
        assert outcome(parse, text) == reference_outcome(text), text


# Fragments that exercise every lexical rule and its edges (comments with and without a line
# end, quotes, number forms, keywords in other cases, characters that are lexical errors).
FRAGMENTS = ["a", "b_1", "$x", "ORDER", "and", "OR", "Not", "=", "<>", ">", ">=", "<", "<=", "==",
             "(", ")", ",", "+", "-", "--", "-- c\n", "\r\n", "\n", "\r", "/*", "*/", "/* z */",
             "'", "''", "'x'", "'it''s'", "0", "1", "007", "5L", "0L", "0x10", "1.5", ".5e3", "1e",
             "1e-400", "0.0", "9223372036854775808", "2147483648", "IN", "BETWEEN", "IS", "NULL",
             "TRUE", "false", "CONTAINS", "startswith", "ENDSWITH", " ", "\t", "\f", "@", "é", "!",
             ";", '"']


# Each text goes through every engine's scanner, driver and flattening pass against one PLY
# reference (PLY's lexer and parser are most of the cost: computed once per text, not per engine).
@settings(max_examples=1500, deadline=None)
@given(st.lists(st.sampled_from(FRAGMENTS), max_size=14).map("".join)
       | st.lists(st.sampled_from(FRAGMENTS), max_size=14).map(" ".join))
def test_fast_path_agrees_with_ply_on_random_text(text):
    want = ply_tokens(text)
    assert scanned_tokens(text) == want
    reference = reference_outcome(text)
    driver, flatten = parser._driver, compiler._flatten_kernel
    try:
        for kernel_id, kernel_module in zip(KERNEL_IDS, KERNELS):
            assert scanned_tokens(text, kernel_module) == want, kernel_id
            parser._driver = kernel_module.Parser(*parser._DRIVER_ARGS)
            compiler._flatten_kernel = FLATTEN[kernel_module]
            assert outcome(parse, text) == reference, kernel_id
    finally:
        parser._driver, compiler._flatten_kernel = driver, flatten


def test_engine_drivers_handle_deep_nesting_and_long_inputs(kernel):
    """The Cython driver grows its stacks; both give the same trees as PLY's driver."""
    for text in ["(" * 3000 + "a = 1" + ")" * 3000, "NOT " * 3001 + "a",
                 " OR ".join(["a = 1"] * 2000), "a IN (" + ",".join(f"'v{i}'" for i in range(3000)) + ")"]:
        assert outcome(parse, text) == reference_outcome(text)


@pytest.mark.parametrize("text", [
    "a = 1 AND --x\r b = 2\n", "a = 1 AND --x\n b = 2\r", "a = 1 AND --x\r\n b = 2", "a = 1 -- x",
    "a = 1 AND b = 2 --", "a = 'x''", "a = 'x'' OR b = '1'", "a = 'it''s' AND b = ''''", "a = 'open",
    "/**/ a = 1", "/*/ a = 1", "a = 1.e5 AND b = .5E-3 AND c = 1E AND d = 5L AND e = 007",
    "a = 1.5e", "a = .x", "a\u00a0= 1", "a = 1 \x00", "a > 9223372036854775808 @"])
def test_engine_scanners_on_comment_quote_and_number_edges(kernel, text):
    want = ply_tokens(text)
    assert scanned_tokens(text) == want
    assert scanned_tokens(text, kernel) == want
    assert outcome(parse, text) == reference_outcome(text)
