"""Every public conformance case, produced by RocketMQ's own parser and evaluator.

For each case: the broker's accept/reject (and the class of its error), its
raw evaluation result (TRUE/FALSE/NULL or an exception) and its match
decision, under the engine in use (run the suite again with
RMQFILTER_PUREPYTHON=1 for the twin).
"""
from __future__ import annotations

import pytest
from helpers import load_jsonl

import selector

CASES = load_jsonl("selector_cases.jsonl")


def test_case_file_is_complete():
    assert len(CASES) == 3000
    assert sum(c["parse_ok"] for c in CASES) == 2211


@pytest.mark.parametrize("case", CASES, ids=[c["id"] for c in CASES])
def test_broker_agreement(case):
    expr, props = case["expr"], case["props"]
    if not case["parse_ok"]:
        with pytest.raises(selector.SelectorSyntaxError) as info:
            selector.compile(expr)
        assert info.value.cause == case["error_cause"]
        return
    s = selector.compile(expr)
    want = case["result"]
    if isinstance(want, str):
        assert want.startswith("ERROR:")
        with pytest.raises(selector.SelectorEvaluationError) as info:
            s.evaluate(props)
        assert info.value.cause == want[len("ERROR:"):]
    else:
        assert s.evaluate(props) is want
    assert s.matches(props) is case["matched"]


def test_batch_agrees_with_single_evaluation():
    """evaluate_many over all parsed cases of one selector gives the same codes as evaluate."""
    by_expr: dict[str, list] = {}
    for c in CASES:
        if c["parse_ok"]:
            by_expr.setdefault(c["expr"], []).append(c)
    for expr, cases in by_expr.items():
        s = selector.compile(expr)
        codes = s.evaluate_many([c["props"] for c in cases])
        want = [selector.ERROR if isinstance(c["result"], str) else
                {True: selector.TRUE, False: selector.FALSE, None: selector.UNKNOWN}[c["result"]]
                for c in cases]
        assert codes.tolist() == want, expr
        assert s.matches_many([c["props"] for c in cases]).tolist() == [c["matched"] for c in cases]
