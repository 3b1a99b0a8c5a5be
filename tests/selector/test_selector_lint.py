"""selector.lint (the broker's traps) and selector.canonical."""
from __future__ import annotations

import pytest
from helpers import load_jsonl

import selector


def codes(sql):
    return [(w.code, w.position) for w in selector.lint(sql)]


def test_clean_selector_has_no_warnings():
    assert selector.lint("a > 5.0 AND TAGS IN ('A', 'B') AND NOT (b = 'x') AND c IS NULL") == []


def test_ignored_text():
    (w,) = selector.lint("a = 'x' garbage")
    assert (w.code, w.position, w.line, w.column) == ("ignored-text", 8, 1, 9)
    assert "garbage" in w.message
    assert codes("a = 'x' + 2") == [("ignored-text", 8)]
    assert codes("a = 'x'\n)") == [("ignored-text", 8)]
    assert selector.lint("a = 'x' -- comment\n") == []


def test_not_binds_tight():
    # (NOT a) is a boolean, so comparing it with a string also throws on the broker.
    assert codes("NOT a = 'x'") == [("not-binds-tight", 0), ("bare-property", 4), ("boolean-equals-string", 6)]
    assert codes("NOT a = TRUE") == [("not-binds-tight", 0), ("bare-property", 4)]
    assert codes("x = 'y' AND NOT a IS NULL") == [("not-binds-tight", 12), ("bare-property", 16)]
    assert "((NOT a) = TRUE)" in selector.lint("NOT a = TRUE")[0].message
    # Written with explicit parentheses it is intentional; NOT (...) is the fix.
    assert [c for c, _ in codes("(NOT a) = TRUE")] == ["bare-property"]
    assert selector.lint("NOT (a = 'x')") == []


def test_bare_property():
    (w,) = selector.lint("x = 'y' OR flag")
    assert (w.code, w.position) == ("bare-property", 11)
    assert "'flag'" in w.message


def test_boolean_equals_string():
    assert codes("TRUE = a") == [("boolean-equals-string", 5)]
    assert codes("(a = 'x') = b") == [("boolean-equals-string", 10)]
    assert codes("(a = 'x') = 'true'") == [("boolean-equals-string", 10)]
    assert selector.lint("a = TRUE") == []


def test_integer_literal():
    (w,) = selector.lint("a > 5")
    assert (w.code, w.position) == ("integer-literal", 4)
    assert "5.0" in w.message
    assert codes("a BETWEEN -1 AND 10") == [("integer-literal", 11)]
    assert codes("3000000000 <> a") == [("integer-literal", 0)]
    assert selector.lint("a > 5.0 AND b = '5'") == []


def test_warnings_come_in_order_with_line_and_column():
    ws = selector.lint("TRUE = a\nAND b > 1 junk")
    assert [(w.line, w.column) for w in ws] == [(1, 6), (2, 9), (2, 11)]
    assert str(ws[0]).startswith("1:6: boolean-equals-string: ")


def test_lint_rejects_what_the_broker_rejects():
    with pytest.raises(selector.SelectorSyntaxError):
        selector.lint("a > 'x'")


@pytest.mark.parametrize("sql, form", [
    ("a>5 and b<10 or c='x'", "(((a > 5) AND (b < 10)) OR (c = 'x'))"),
    ("NOT a = 1", "((NOT a) = 1)"),
    ("a NOT BETWEEN -1 AND 1E3", "(a NOT BETWEEN (-1) AND 1000.0)"),
    ("a is not null", "(a IS NOT NULL)"),
    ("s not startswith 'it''s'", "(s NOT STARTSWITH 'it''s')"),
    ("t in ('a','b','a')", "(t IN ('a', 'b', 'a'))"),
    ("TRUE or NULL", "(TRUE OR NULL)"),
    ("a = 1 garbage", "(a = 1)"),
])
def test_canonical(sql, form):
    assert selector.canonical(sql) == form


def test_canonical_form_means_the_same_on_every_case():
    """Re-parsing the canonical text gives the same tree and the same results."""
    for c in load_jsonl("selector_cases.jsonl"):
        if not c["parse_ok"]:
            continue
        form = selector.canonical(c["expr"])
        assert selector.canonical(form) == form
        original, again = selector.compile(c["expr"]), selector.compile(form)
        try:
            want = original.evaluate(c["props"])
        except selector.SelectorEvaluationError:
            with pytest.raises(selector.SelectorEvaluationError):
                again.evaluate(c["props"])
        else:
            assert again.evaluate(c["props"]) is want
