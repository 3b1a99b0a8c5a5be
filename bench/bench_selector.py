"""SQL92 selectors: per-call evaluate, batch rows/s and parse time, beside the pure-Python twin.

The seven selectors of issue 3, with the broker's Java timings per evaluate
(ns) for reference. Each selector is measured

- one ``evaluate`` call from Python (Cython engine vs the twin),
- ``matches_arrow`` over 1 M rows given as a dict of Arrow string arrays (the
  form Spark hands over) vs the twin on the same data,
- ``matches_many`` over 100 k Python dicts vs the twin,
- a parse + compile without the cache, beside the same grammar through PLY's
  own lexer and LALR driver and the two-pass compiler (the path before the
  Cython driver; ``selector.parser._parse_reference``).

Run: ``.venv/bin/python -m pytest bench/bench_selector.py`` (``make bench`` runs all).
"""
from __future__ import annotations

import numpy as np
import pytest

import selector
from selector import _eval_py, compiler, parser
from selector.quoted import BROKER_EVALUATE_NS

pa = pytest.importorskip("pyarrow")
try:
    from selector import _eval as _cython
except ImportError:  # pragma: no cover - the engine is built by `make setup`
    _cython = None

# sql: Java ns per evaluate (the broker's figures, quoted; one home: selector.quoted)
SELECTORS = BROKER_EVALUATE_NS
IDS = ["gt", "tags_in", "or_of_ands", "between", "is_null", "contains_startswith", "double_gt"]
N_ROWS = 1_000_000
N_DICTS = 100_000
N_TWIN = 20_000
SINGLE = {"a": "7", "b": "3", "c": "x", "d": "5", "e": "z", "f": "50", "TAGS": "B", "s": "hello",
          "p": "4.25"}


@pytest.fixture(scope="module")
def columns() -> dict:
    rng = np.random.default_rng(3)

    def pick(pool, n=N_ROWS):
        return [pool[i] for i in rng.integers(0, len(pool), n)]

    ints = [str(i) for i in range(201)]
    data = {
        "a": pick(ints[:13]), "b": pick(ints[:21]), "c": pick(["x", "y", "z"]), "d": pick(ints[:6]),
        "e": pick(["x", "y", "z"]), "f": pick(ints), "TAGS": pick(list("ABCDEFG")),
        "g": pick(["x", None]), "s": pick(["hello", "help", "shell", "world"]),
        "p": [f"{x:.2f}" for x in rng.uniform(0, 7, N_ROWS)],
    }
    return {k: pa.array(v, pa.string()) for k, v in data.items()}


def _subset(cols: dict, s, n=None) -> dict:
    return {k: (cols[k] if n is None else cols[k].slice(0, n)) for k in s.properties}


def _rows(cols: dict, s, n) -> list:
    lists = {k: cols[k].slice(0, n).to_pylist() for k in s.properties}
    return [{k: v[i] for k, v in lists.items() if v[i] is not None} for i in range(n)]


@pytest.mark.parametrize("sql", SELECTORS, ids=IDS)
def test_evaluate_one_call_ours(benchmark, sql):
    s = selector.compile(sql)
    benchmark.group = f"evaluate one message: {sql} (Java {SELECTORS[sql]} ns)"
    benchmark.extra_info.update(items=1, role="ours", engine=selector.ENGINE)
    # Many calls per round: a ~100 ns call is below the timer's resolution otherwise.
    benchmark.pedantic(s.evaluate, (SINGLE,), iterations=5000, rounds=30, warmup_rounds=2)


@pytest.mark.parametrize("sql", SELECTORS, ids=IDS)
def test_evaluate_one_call_twin(benchmark, sql):
    twin = _eval_py.Evaluator(selector.compile(sql)._program)
    benchmark.group = f"evaluate one message: {sql} (Java {SELECTORS[sql]} ns)"
    benchmark.extra_info.update(items=1, role="alternative")
    benchmark.pedantic(twin.evaluate_value, (SINGLE,), iterations=500, rounds=30, warmup_rounds=2)


@pytest.mark.parametrize("sql", SELECTORS, ids=IDS)
def test_matches_arrow_ours(benchmark, columns, sql):
    s = selector.compile(sql)
    props = _subset(columns, s)
    benchmark.group = f"batch, Arrow columns: {sql} (Java {SELECTORS[sql]} ns)"
    benchmark.extra_info.update(items=N_ROWS, role="ours", engine=selector.ENGINE)
    got = benchmark.pedantic(s.matches_arrow, (props,), rounds=7, warmup_rounds=1)
    twin = _eval_py.Evaluator(s._program)
    small = _subset(columns, s, 2000)
    assert got.slice(0, 2000).to_pylist() == (twin.evaluate_columns(
        [small.get(k) for k in s._program.props], 2000) == selector.TRUE).tolist()


@pytest.mark.parametrize("sql", SELECTORS, ids=IDS)
def test_matches_arrow_twin(benchmark, columns, sql):
    s = selector.compile(sql)
    twin = _eval_py.Evaluator(s._program)
    props = _subset(columns, s, N_TWIN)
    cols = [props.get(k) for k in s._program.props]
    benchmark.group = f"batch, Arrow columns: {sql} (Java {SELECTORS[sql]} ns)"
    benchmark.extra_info.update(items=N_TWIN, role="alternative")
    benchmark.pedantic(twin.evaluate_columns, (cols, N_TWIN), rounds=2)


@pytest.mark.parametrize("sql", SELECTORS, ids=IDS)
def test_matches_many_ours(benchmark, columns, sql):
    s = selector.compile(sql)
    rows = _rows(columns, s, N_DICTS)
    benchmark.group = f"batch, Python dicts: {sql}"
    benchmark.extra_info.update(items=N_DICTS, role="ours", engine=selector.ENGINE)
    benchmark.pedantic(s.matches_many, (rows,), rounds=5)


@pytest.mark.parametrize("sql", SELECTORS, ids=IDS)
def test_matches_many_twin(benchmark, columns, sql):
    s = selector.compile(sql)
    twin = _eval_py.Evaluator(s._program)
    rows = _rows(columns, s, N_TWIN)
    benchmark.group = f"batch, Python dicts: {sql}"
    benchmark.extra_info.update(items=N_TWIN, role="alternative")
    benchmark.pedantic(twin.evaluate_many, (rows,), rounds=2)


@pytest.mark.parametrize("sql", SELECTORS, ids=IDS)
def test_parse_uncached(benchmark, sql):
    benchmark.group = f"parse + compile, no cache: {sql}"
    benchmark.extra_info.update(items=1, role="ours", engine=parser.ENGINE)
    benchmark.pedantic(selector._compile_uncached, (sql,), iterations=50, rounds=30, warmup_rounds=2)


def _compile_with_ply(sql: str) -> selector.Selector:
    tree = parser._parse_reference(sql).tree
    return selector.Selector(sql, compiler._compile_tree_reference(tree))


@pytest.mark.parametrize("sql", SELECTORS, ids=IDS)
def test_parse_uncached_ply(benchmark, sql):
    benchmark.group = f"parse + compile, no cache: {sql}"
    benchmark.extra_info.update(items=1, role="alternative")
    got = benchmark.pedantic(_compile_with_ply, (sql,), iterations=20, rounds=15, warmup_rounds=1)
    ours = selector._compile_uncached(sql)
    assert got._program.nodes.tobytes() == ours._program.nodes.tobytes()
    assert got._program.args == ours._program.args
