"""Batch evaluation (lists of mappings, Arrow arrays) and agreement of the two engines."""
from __future__ import annotations

import importlib
import re
from pathlib import Path

import numpy as np
import pytest
from helpers import load_jsonl
from hypothesis import given, settings
from hypothesis import strategies as st

import selector
from selector import _eval_py, opcodes

pa = pytest.importorskip("pyarrow")

CASES = load_jsonl("selector_cases.jsonl")
GROUPS: dict[str, list] = {}
for _c in CASES:
    if _c["parse_ok"]:
        GROUPS.setdefault(_c["expr"], []).append(_c["props"])


def codes_one_by_one(s, rows):
    out = []
    for props in rows:
        try:
            value = s.evaluate(props)
        except selector.SelectorEvaluationError:
            out.append(selector.ERROR)
        else:
            out.append({False: selector.FALSE, True: selector.TRUE, None: selector.UNKNOWN}[value])
    return out


def columns(rows, names):
    return {name: pa.array([r.get(name) for r in rows], pa.string()) for name in names}


def test_many_and_arrow_agree_with_single_evaluation_on_every_case():
    for expr, rows in GROUPS.items():
        s = selector.compile(expr)
        want = codes_one_by_one(s, rows)
        assert s.evaluate_many(rows).tolist() == want, expr
        got = s.evaluate_arrow(columns(rows, s.properties), num_rows=len(rows))
        assert got.field("error").to_pylist() == [c == selector.ERROR for c in want], expr
        assert got.field("result").to_pylist() == [
            {selector.TRUE: True, selector.FALSE: False}.get(c) for c in want], expr
        assert s.matches_arrow(columns(rows, s.properties), num_rows=len(rows)).to_pylist() == [c == selector.TRUE for c in want]


def test_matches_many_returns_a_bool_array():
    s = selector.compile("a > 5")
    out = s.matches_many([{"a": "7"}, {"a": "x"}, None, {}, {"a": "6"}])
    assert out.dtype == np.bool_
    assert out.tolist() == [True, False, False, False, True]
    assert s.evaluate_many([]).tolist() == []
    assert s.matches_many(({"a": "9"},)).tolist() == [True]


def test_many_rejects_bad_rows():
    s = selector.compile("a > 5")
    with pytest.raises(TypeError):
        s.evaluate_many({"a": "1"})
    with pytest.raises(TypeError, match="'a'"):
        s.matches_many([{"a": "1"}, {"a": 2}])


def test_arrow_map_array():
    s = selector.compile("a > 5 AND TAGS IN ('A', 'B')")
    maps = pa.array([[("a", "7"), ("TAGS", "A")], [("a", "7")], None, [("a", "x"), ("TAGS", "A")],
                     [("a", "1"), ("a", "9"), ("TAGS", "B")]],
                    type=pa.map_(pa.string(), pa.string()))
    assert s.matches_arrow(maps).to_pylist() == [True, False, False, False, True]
    ev = s.evaluate_arrow(maps)
    assert ev.field("result").to_pylist() == [True, None, None, None, True]
    assert ev.field("error").to_pylist() == [False, False, False, True, False]
    assert s.matches_arrow(pa.chunked_array([maps[:2], maps[2:]])).to_pylist() == [True, False, False, False, True]


def test_arrow_dict_of_arrays_variants():
    s = selector.compile("a BETWEEN 1 AND 10 AND (b IS NULL OR b CONTAINS 'x')")
    a = pa.array(["5", "50", None, "7", "3", "x"])
    b = pa.array(["yxz", None, "x", "y", None, "x"])
    want = [True, False, False, False, True, False]
    assert s.matches_arrow({"a": a, "b": b}).to_pylist() == want
    assert s.matches_arrow({"a": a.cast(pa.large_string()), "b": b}).to_pylist() == want
    assert s.matches_arrow({"a": a.dictionary_encode(), "b": pa.chunked_array([b[:3], b[3:]])}).to_pylist() == want
    # Sliced arrays carry an offset into their buffers.
    assert s.matches_arrow({"a": a[2:], "b": b[2:]}).to_pylist() == want[2:]
    # A property left out of the dict is absent from every row; extra columns are ignored.
    assert s.matches_arrow({"a": a, "other": b}).to_pylist() == [True, False, False, True, True, False]
    assert s.matches_arrow({"a": a, "b": pa.nulls(6)}).to_pylist() == [True, False, False, True, True, False]


def test_arrow_input_errors():
    s = selector.compile("a > 5")
    with pytest.raises(ValueError, match="rows"):
        s.matches_arrow({"a": pa.array(["1", "2"]), "b": pa.array(["1"])})
    with pytest.raises(TypeError, match="string"):
        s.matches_arrow({"a": pa.array([1, 2])})
    with pytest.raises(TypeError, match="map"):
        s.matches_arrow(pa.array(["a"]))
    with pytest.raises(TypeError, match="map keys"):
        s.matches_arrow(pa.array([[(1, "x")]], type=pa.map_(pa.int32(), pa.string())))


def test_arrow_empty_and_non_ascii():
    s = selector.compile("s STARTSWITH '\u4e2d' OR n = 3")
    assert s.matches_arrow({"s": pa.array([], pa.string())}).to_pylist() == []
    got = s.matches_arrow({"s": pa.array(["\u4e2d\u6587", "", "x", None]), "n": pa.array(["1", "\u0663", "3", "x"])})
    assert got.to_pylist() == [True, True, True, False]


# -- the two engines --------------------------------------------------------------------------

try:
    _cython = importlib.import_module("selector._eval")
except ImportError:  # not built: nothing to compare
    _cython = None

needs_both = pytest.mark.skipif(_cython is None, reason="Cython engine not built")

TRICKY = ["1", "01", "+1", "-0", "5", "5.0", " 5", "5 ", "abc", "true", "TRUE", "NaN", "-0.0", "0.0",
          "Infinity", "0x1p3", "5d", "1e5f", "3000000000", "9223372036854775807", "-9223372036854775808",
          "2147483648", "\u0663", "\uff15", "\U0001d7d3", "\u4e2d\u6587", "x'y", "A", "B", "Hello", "%",
          "4.9e-324", "1.7976931348623157E308", "\t7\n"]
values = st.one_of(st.sampled_from(TRICKY), st.text(max_size=6))
EXPRS = sorted(GROUPS)


def both(program, props):
    out = []
    for engine in (_cython, _eval_py):
        try:
            out.append(engine.Evaluator(program).evaluate(props))
        except selector.SelectorEvaluationError as exc:
            out.append(("error", exc.cause))
    return out


@needs_both
@settings(max_examples=400, deadline=None)
@given(expr=st.sampled_from(EXPRS), data=st.data())
def test_engines_agree_on_random_property_values(expr, data):
    s = selector.compile(expr)
    props = {name: data.draw(st.one_of(st.none(), values)) for name in sorted(s.properties)}
    props = {k: v for k, v in props.items() if v is not None}
    cy, py = both(s._program, props)
    assert cy == py, (expr, props)


@needs_both
def test_engines_agree_on_every_case_and_batch():
    for expr, rows in GROUPS.items():
        s = selector.compile(expr)
        cy, py = _cython.Evaluator(s._program), _eval_py.Evaluator(s._program)
        assert cy.evaluate_many(rows).tolist() == py.evaluate_many(rows).tolist(), expr


def test_opcodes_match_the_engine_contract():
    text = (Path(opcodes.__file__).parent / "_eval.pxd").read_text(encoding="utf-8")
    for name, value in vars(opcodes).items():
        if name.startswith(("OP_", "GUARD_")) and isinstance(value, int):
            assert re.search(rf"^\s+{name} = {value}\b", text, re.MULTILINE), name


def test_string_tests_on_short_and_long_values():
    s = selector.compile("s CONTAINS 'needle' OR s NOT ENDSWITH 'z'")
    values = ["needle", "xneedlex", "a" * 40 + "needle" + "z", "a" * 40 + "z", "nee" + "dlz", None, "z", "",
              "é" * 20 + "needle" + "z"]
    want = [selector.compile(s.sql).evaluate({"s": v} if v is not None else {}) for v in values]
    assert want == [True, True, True, False, False, False, False, True, True]
    assert s.matches_arrow({"s": pa.array(values)}).to_pylist() == [w is True for w in want]
    assert s.matches_many([{"s": v} if v is not None else {} for v in values]).tolist() == [w is True for w in want]


def test_arrow_with_a_very_large_selector():
    """Tens of thousands of nodes: the engine shrinks its chunk instead of its correctness."""
    sql = " OR ".join(f"a = '{i}'" for i in range(20000))
    s = selector.compile(sql)
    values = ["5", "19999", "20000", None, "x"]
    assert s.matches_arrow({"a": pa.array(values)}).to_pylist() == [True, True, False, False, False]
    assert s.matches_many([{"a": v} if v else {} for v in values]).tolist() == [True, True, False, False, False]


def test_long_patterns():
    head, tail = "p" * 20 + "é", "é" + "q" * 20
    s = selector.compile(f"s STARTSWITH '{head}' AND s ENDSWITH '{tail}' AND s NOT CONTAINS 'xx'")
    values = [head + tail, head + "x" + tail, head + "xx" + tail, head, tail, "p" * 19 + tail]
    want = [True, True, False, False, False, False]
    assert [s.evaluate({"s": v}) for v in values] == want
    assert s.matches_arrow({"s": pa.array(values)}).to_pylist() == want


STRING_OPS = {"CONTAINS": lambda v, p: p in v, "STARTSWITH": str.startswith, "ENDSWITH": str.endswith}


@settings(max_examples=300, deadline=None)
@given(op=st.sampled_from(sorted(STRING_OPS)), negated=st.booleans(),
       pattern=st.text(alphabet="ab\x00é", min_size=1, max_size=10),
       rows=st.lists(st.one_of(st.none(), st.text(alphabet="ab\x00é", max_size=40)), max_size=300))
def test_string_family_over_arrow_is_python_string_search(op, negated, pattern, rows):
    """Needles of 1..10 bytes (the 64-bit window and the memchr paths), values up to 40
    characters, NUL bytes and two-byte UTF-8, AND-ed with a second test so the right side
    sees a selection of rows: the Arrow loop gives Python's answer; NULL is FALSE either way."""
    sql = f"s {'NOT ' if negated else ''}{op} {selector.nodes.quote(pattern)} AND s STARTSWITH 'a'"
    want = [v is not None and (STRING_OPS[op](v, pattern) != negated) and v.startswith("a") for v in rows]
    s = selector.compile(sql)
    got = s.matches_arrow({"s": pa.array(rows, pa.string())}, num_rows=len(rows))
    assert got.to_pylist() == want
    assert [s.matches({} if v is None else {"s": v}) for v in rows] == want   # row-at-a-time path


@pytest.mark.parametrize("items", [
    ["A", "B", "C"],
    ["", "a", "ab", "abcdefgh"],                       # lengths 0..8: the small-list path
    ["abcdefgh", "abcdefghi"],                         # one item past 8 bytes: the hash set
    [f"v{i}" for i in range(9)],                       # nine items: the hash set
    ["\u4e2d", "\u00e9t\u00e9", "x\x00", "\x00x"],     # multi-byte UTF-8 and NUL bytes
])
def test_in_lists_small_and_hashed_agree_with_python(items):
    quoted = ", ".join("'" + i.replace("'", "''") + "'" for i in items)
    s = selector.compile(f"t IN ({quoted})")
    probes = [*items, "", "a", "A", "abcdefg", "abcdefghi", "abcdefgha", "\u4e2d\u6587", "x", "\x00",
              "v8", "v9", "A" * 9, "b", "ab ", None]
    want = [None if p is None else p in items for p in probes]
    rows = [{} if p is None else {"t": p} for p in probes]
    assert [s.evaluate(r) for r in rows] == want
    got = s.evaluate_arrow({"t": pa.array(probes, pa.string())}, num_rows=len(probes))
    assert got.field("result").to_pylist() == want
    for engine in [e for e in (_cython, _eval_py) if e is not None]:
        assert [engine.Evaluator(s._program).evaluate_value(r) for r in rows] == want


@needs_both
@pytest.mark.parametrize("sql, props", [
    ("a = 1", {"a": "x"}), ("a > b", {"a": "x", "b": "1"}), ("TRUE = a", {"a": "x"}),
    ("a >= 3000000000", {"a": "q"}), ("a < 1.5", {"a": "z"}), ("a BETWEEN 1 AND b", {"a": "2", "b": "w"}),
])
def test_engines_word_errors_alike_without_the_engine_calling_its_twin(sql, props, monkeypatch):
    program = selector.compile(sql)._program
    worded = []
    for engine in (_eval_py, _cython):
        with pytest.raises(selector.SelectorEvaluationError) as info:
            engine.Evaluator(program).evaluate(props)
        worded.append((str(info.value), info.value.cause))
        monkeypatch.setattr(_eval_py, "Evaluator", None)  # the compiled engine must not need it
    assert worded[0] == worded[1]
