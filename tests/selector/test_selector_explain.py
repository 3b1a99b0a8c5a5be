"""``selector.explain``: the evaluation tree for one message, checked against the broker and both engines.

Every public conformance case gives the broker's result, error classes and
decision; ``explain`` must give the same, and agree with the Cython engine and
the pure-Python twin run in this process (run the file again with
RMQFILTER_PUREPYTHON=1 for the package's default engine to be the twin). The
rendered text is what a user reads, so its tests compare it line by line.
"""
from __future__ import annotations

import importlib
import json
import pickle

import pytest
from helpers import load_jsonl
from hypothesis import given
from hypothesis import strategies as st

import selector
from selector import _eval_py
from selector import javalang as java
from tests.selector.test_selector_fuzz import FUZZ, name, selectors, value

try:
    _cython = importlib.import_module("selector._eval")
except ImportError:  # not built: the twin is the only engine
    _cython = None

CASES = load_jsonl("selector_cases.jsonl")
ORDER = {">": lambda c: c > 0, ">=": lambda c: c >= 0, "<": lambda c: c < 0, "<=": lambda c: c <= 0,
         "=": lambda c: c == 0, "<>": lambda c: c != 0}


def _engine_outcome(evaluator, props):
    try:
        return evaluator.evaluate_value(props), None, None
    except selector.SelectorEvaluationError as exc:
        return "ERROR", exc.cause, exc.root_cause


def _explained_outcome(e: selector.Explanation):
    value = {"TRUE": True, "FALSE": False, "NULL": None}.get(e.value, e.value)
    return value, e.error_cause, e.error_root_cause


def _engines(s: selector.Selector) -> list:
    engines = [_eval_py.Evaluator(s._program)]
    if _cython is not None:
        engines.append(_cython.Evaluator(s._program))
    return engines


def _check_tree(e: selector.Explanation, props) -> None:
    """What the tree claims is consistent with itself, the message and the result."""
    nodes = list(e.root.walk())
    assert [node.id for node in nodes] == list(range(len(nodes)))
    deciders = [node for node in nodes if node.decider]
    assert deciders == [e.decider] and e.decider.decisive
    # The decisive nodes form one path from the root down to the decider.
    node = e.root
    while node is not e.decider:
        assert node.decisive, e.sql
        on_path = [kid for kid in node.children if kid.decisive]
        assert len(on_path) == 1, e.sql
        node = on_path[0]
    assert sum(n.decisive for n in nodes) == len(list(_path(e.root, e.decider)))
    if e.value == "ERROR":
        assert e.root.status == "aborted" or e.root is e.decider
        assert e.decider.status == "threw" and e.decider.op in ORDER
    else:
        assert e.root.status == "evaluated"
        assert e.root.value is {"TRUE": True, "FALSE": False, "NULL": None}[e.value]
        assert all(n.status in ("evaluated", "skipped") for n in nodes), e.sql
    for node in nodes:
        if node.status == "skipped":
            assert all(k.status == "skipped" for k in node.walk()), e.sql
        if node.status != "evaluated":
            assert node.value is None
        if node.op == "PROPERTY":
            assert node.property in e.properties
            if node.status == "evaluated":
                assert node.value == (props or {}).get(node.property)
                assert node.present is (node.value is not None)
        if node.conversions is not None and node.status == "evaluated" and node.value is not None:
            # The values shown as compared give the node's value (so the conversions are the ones used).
            lc, rc = node.compared
            want = ORDER[node.op](java.compare(lc, rc))
            assert node.value is want, (e.sql, node.text, node.compared)
        if node.status == "threw" and e.error_root_cause == "NumberFormatException":
            # The shown conversion is the one that fails.
            assert None in node.compared and "throws NumberFormatException" in node.note, (e.sql, node.note)
    assert e.properties == {k: (props or {}).get(k) for k in e.properties}


def _path(root, target):
    node = root
    yield node
    while node is not target:
        node = next(k for k in node.children if k.decisive)
        yield node


def test_every_conformance_case_agrees_with_the_broker_and_both_engines():
    checked = 0
    for case in CASES:
        expr, props = case["expr"], case["props"]
        if not case["parse_ok"]:
            with pytest.raises(selector.SelectorSyntaxError) as info:
                selector.explain(expr, props)
            assert info.value.cause == case["error_cause"], case["id"]
            with pytest.raises(selector.SelectorSyntaxError) as again:
                selector.compile(expr)
            assert (str(info.value), info.value.position) == (str(again.value), again.value.position)
            continue
        e = selector.explain(expr, props)
        s = selector.compile(expr)
        result = case["result"]
        if isinstance(result, str):
            want = ("ERROR", result[len("ERROR:"):], case["eval_error_cause"])
        else:
            want = (result, None, None)
        assert _explained_outcome(e) == want, (case["id"], expr, props, e.value, e.error_message)
        for engine in _engines(s):
            assert _engine_outcome(engine, props) == want, (case["id"], type(engine).__module__)
        assert e.matched is case["matched"] is s.matches(props), case["id"]
        assert e.sql == expr
        _check_tree(e, props)
        checked += 1
    assert checked == 2211


@FUZZ
@given(sql=selectors, rows=st.lists(st.dictionaries(name, value), min_size=1, max_size=4))
def test_random_selectors_explain_as_the_engines_evaluate(sql, rows):
    try:
        s = selector.compile(sql)
    except selector.SelectorSyntaxError:
        with pytest.raises(selector.SelectorSyntaxError):
            selector.explain(sql, {})
        return
    for props in rows:
        props = {k: v for k, v in props.items() if v is not None}
        e = selector.explain(sql, props)
        for engine in _engines(s):
            assert _engine_outcome(engine, props) == _explained_outcome(e), (sql, props)
        assert e.matched is s.matches(props)
        _check_tree(e, props)


# -- what a user reads ---------------------------------------------------------------------------

def test_and_short_circuit_shows_the_decisive_comparison_and_the_skipped_operand():
    e = selector.explain("a > 5 AND TAGS IN ('A', 'B')", {"a": "3", "TAGS": "A"})
    assert str(e).splitlines() == [
        "selector:   a > 5 AND TAGS IN ('A', 'B')",
        "properties: a='3', TAGS='A'",
        "result:     FALSE, not matched (decided at 1:3: a > 5)",
        "",
        "* AND -> FALSE  [the left operand is FALSE, so AND is FALSE: the right operand is skipped]",
        "*   a > 5 -> FALSE  [Integer.parseInt('3') = 3; compared as Integer: 3 > 5]  <== decided here",
        "      a -> '3'",
        "      5 -> 5 (Integer)",
        "    TAGS IN ('A', 'B') -> skipped  [not evaluated: the left operand is FALSE]",
        "      TAGS -> skipped",
    ]
    assert (e.value, e.matched, e.error_cause) == ("FALSE", False, None)
    assert [n.status for n in e.root.children] == ["evaluated", "skipped"]


def test_or_with_a_missing_property_is_null_and_names_the_missing_property():
    e = selector.explain("a > 5 OR b = 'x'", {"b": "y"})
    lines = str(e).splitlines()
    assert lines[1] == "properties: a missing, b='y'"
    assert lines[2] == "result:     NULL, not matched (decided at 1:1: a)"
    assert "*   a > 5 -> NULL  [the left operand is NULL, so > is NULL: the right operand is skipped]" in lines
    assert "*     a -> NULL (missing)  <== decided here" in lines
    assert "      5 -> skipped  [not evaluated: the left operand is NULL]" in lines
    assert "    b = 'x' -> FALSE  [compared as String: 'y' = 'x']" in lines
    assert e.properties == {"a": None, "b": "y"} and e.value == "NULL" and not e.matched


def test_or_decided_by_its_true_right_operand():
    e = selector.explain("a > 5 OR b = 'x'", {"b": "x"})
    assert (e.value, e.matched) == ("TRUE", True)
    assert e.decider.text == "b = 'x'" and e.decider.value is True
    assert "*   b = 'x' -> TRUE  [compared as String: 'x' = 'x']  <== decided here" in str(e).splitlines()


def test_in_shows_the_value_looked_up():
    e = selector.explain("TAGS NOT IN ('A', 'B')", {"TAGS": "C"})
    assert str(e).splitlines()[4:] == [
        "* TAGS NOT IN ('A', 'B') -> TRUE  ['C' is not in the list]  <== decided here",
        "    TAGS -> 'C'",
    ]


def test_between_is_the_two_comparisons_the_broker_evaluates():
    e = selector.explain("a BETWEEN 1 AND 10.5", {"a": "0"})
    assert str(e).splitlines()[4:] == [
        ("* a BETWEEN 1 AND 10.5 -> FALSE  [the left operand is FALSE, so BETWEEN is FALSE: "
        "the right operand is skipped]"),
        "*   a >= 1 -> FALSE  [Integer.parseInt('0') = 0; compared as Integer: 0 >= 1]  <== decided here",
        "      a -> '0'",
        "      1 -> 1 (Integer)",
        "    a <= 10.5 -> skipped  [not evaluated: the left operand is FALSE]",
        "      a -> skipped",
        "      10.5 -> skipped",
    ]
    inside = selector.explain("a BETWEEN 1 AND 10.5", {"a": "10.5"})
    assert inside.value == "ERROR"   # the lower bound is an int: "10.5" does not parse
    assert "Integer.parseInt('10.5') throws NumberFormatException; throws RuntimeException" in str(inside)


def test_number_format_error_names_the_conversion_that_failed():
    e = selector.explain("a > 5 AND b = 1", {"a": "7", "b": " 1"})
    assert (e.value, e.error_cause, e.error_root_cause, e.matched) == (
        "ERROR", "RuntimeException", "NumberFormatException", False)
    lines = str(e).splitlines()
    assert lines[2] == ("result:     ERROR (RuntimeException caused by NumberFormatException), not matched "
                        "(decided at 1:13: b = 1)")
    assert lines[4] == "* AND -> ERROR (an operand threw)"
    assert lines[8] == ("*   b = 1 -> ERROR  [Integer.parseInt(' 1') throws NumberFormatException; "
                        "throws RuntimeException]  <== decided here")
    assert "NumberFormatException" in e.error_message
    # The same text as a double compares: the literal's type decides how the property is read.
    assert selector.explain("a > 5 AND b = 1.0", {"a": "7", "b": " 1"}).value == "TRUE"


def test_class_cast_error_and_the_nodes_not_reached():
    e = selector.explain("TRUE = a OR b = 'x'", {"a": "x", "b": "x"})
    assert (e.value, e.error_cause, e.error_root_cause) == ("ERROR", "ClassCastException", None)
    lines = str(e).splitlines()
    assert "*   TRUE = a -> ERROR  [compared: TRUE = 'x'; throws ClassCastException]  <== decided here" in lines
    assert "    b = 'x' -> not reached" in lines
    assert [n.status for n in e.root.walk()] == [
        "aborted", "threw", "evaluated", "evaluated", "not_reached", "not_reached", "not_reached"]


def test_literal_typing_is_shown_for_long_and_double():
    e = selector.explain("a > 3000000000 OR a < 2.5", {"a": "2"})
    first, second = e.root.children
    assert first.conversions == ("Long.parseLong", None) and first.compared == (2, 3000000000)
    assert isinstance(first.compared[0], java.Long)
    assert second.conversions == ("Double.valueOf", None) and second.compared == (2.0, 2.5)
    assert "[Long.parseLong('2') = 2L; compared as Long: 2L > 3000000000L]" in str(e)


def test_empty_pattern_and_bare_property_say_why():
    e = selector.explain("a CONTAINS '' OR flag", {"a": "x", "flag": "true"})
    lines = str(e).splitlines()
    assert "    a CONTAINS '' -> FALSE  [empty pattern: FALSE without reading the operand]" in lines
    assert "      a -> skipped  [not read: an empty pattern is FALSE]" in lines
    assert "    flag as a condition -> FALSE  [a String is not a Boolean: FALSE]" in lines
    assert e.value == "FALSE" and e.decider is e.root   # both operands FALSE: the OR itself decided


def test_json_form():
    e = selector.explain("a > 5.0 AND TAGS IN ('A')", {"a": "NaN"})
    d = json.loads(json.dumps(e.to_dict(), allow_nan=False))
    assert {k: d[k] for k in ("sql", "value", "matched", "error_cause", "error_root_cause", "error_message")} == {
        "sql": "a > 5.0 AND TAGS IN ('A')", "value": "NULL", "matched": False, "error_cause": None,
        "error_root_cause": None, "error_message": None}
    assert d["properties"] == {"a": "NaN", "TAGS": None}
    root = d["root"]
    assert (root["op"], root["status"], root["value"], root["type"], root["decisive"]) == (
        "AND", "evaluated", None, None, True)
    gt, tags_in = root["children"]
    assert (gt["op"], gt["value"], gt["type"], gt["conversions"], gt["compared"]) == (
        ">", True, "Boolean", ["Double.valueOf", None], ["NaN", 5.0])
    prop = gt["children"][0]
    assert {k: prop[k] for k in ("op", "property", "present", "value", "type", "position", "children")} == {
        "op": "PROPERTY", "property": "a", "present": True, "value": "NaN", "type": "String", "position": 0,
        "children": []}
    assert tags_in["children"][0]["present"] is False and tags_in["note"] == "the operand is NULL: NULL"
    ids = {}
    stack = [root]
    while stack:
        node = stack.pop()
        ids[node["id"]] = node
        stack.extend(node["children"])
    assert sorted(ids) == list(range(len(ids)))
    assert ids[d["decider"]]["decider"] is True and ids[d["decider"]]["text"] == "TAGS"


def test_explanation_pickles():
    e = selector.explain("a BETWEEN 1 AND 9 OR b", {"a": "x"})
    again = pickle.loads(pickle.dumps(e))
    assert str(again) == str(e) and again.to_dict() == e.to_dict()


def test_error_json_form():
    d = selector.explain("a = 1", {"a": "1.0"}).to_dict()
    assert (d["value"], d["error_cause"], d["error_root_cause"]) == (
        "ERROR", "RuntimeException", "NumberFormatException")
    assert d["root"]["status"] == "threw" and d["root"]["compared"] == [None, 1]
    assert d["decider"] == 0


def test_syntax_error_is_compiles_error():
    with pytest.raises(selector.SelectorSyntaxError) as info:
        selector.explain("a = 1 AND\n  b > 'x'", {})
    assert str(info.value) == "2:7: Value ''x'' cannot be compared."
    with pytest.raises(TypeError):
        selector.explain(5, {})


def test_bad_properties_are_a_type_error():
    with pytest.raises(TypeError, match="mapping"):
        selector.explain("a = 1", ["a"])
    with pytest.raises(TypeError, match="property 'a' must be a str"):
        selector.explain("a = 1", {"a": 1})
    assert selector.explain("a = 1", None).value == "NULL"
    assert selector.explain("a = 1", {"b": 2, "a": "1"}).value == "TRUE"   # like evaluate: only what it reads


def test_deep_selectors_need_no_recursion():
    sql = "NOT " * 5000 + "(a = 1)"
    e = selector.explain(sql, {"a": "1"})
    assert e.value == "TRUE" and selector.compile(sql).evaluate({"a": "1"}) is True
    assert len(str(e).splitlines()) == 4 + 5003
    assert e.decider.text == "a = 1"
    assert e.to_dict()["root"]["op"] == "NOT"


def test_evaluation_error_keeps_its_root_cause_through_pickle():
    with pytest.raises(selector.SelectorEvaluationError) as info:
        selector.compile("a > 5").evaluate({"a": "x"})
    assert (info.value.cause, info.value.root_cause) == ("RuntimeException", "NumberFormatException")
    again = pickle.loads(pickle.dumps(info.value))
    assert (again.cause, again.root_cause, str(again)) == (info.value.cause, "NumberFormatException",
                                                           str(info.value))
