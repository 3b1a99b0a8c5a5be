"""``rmqfilter check``, ``rmqfilter eval`` and ``rmqfilter explain``."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from rmqfilter import main

ROOT = Path(__file__).resolve().parents[2]


def test_check_prints_canonical_form_properties_and_warnings(capsys):
    assert main(["check", "NOT a = 1 AND TAGS IN ('A') junk"]) == 0
    out = capsys.readouterr().out
    assert "canonical:  (((NOT a) = 1) AND (TAGS IN ('A')))" in out
    assert "properties: TAGS, a" in out
    assert "not-binds-tight" in out and "ignored-text" in out and "1:29: ignored-text" in out


def test_check_clean(capsys):
    assert main(["check", "a > 5.0"]) == 0
    assert "warnings:   (none)" in capsys.readouterr().out


def test_check_error_shows_a_caret_and_exits_2(capsys):
    assert main(["check", "a = 1 AND\n  b > 'x'"]) == 2
    err = capsys.readouterr().err
    assert "error: 2:7: Value ''x'' cannot be compared." in err
    lines = err.splitlines()
    assert lines[1] == "    b > 'x'"
    assert lines[2] == "        ^"


def test_eval_prints_the_broker_result(capsys):
    assert main(["eval", "a > 5 AND b IS NULL", "a=7"]) == 0
    assert capsys.readouterr().out.splitlines() == ["result:  TRUE", "matched: true"]
    assert main(["eval", "a = b", "a=x=y", "b=x=y"]) == 0
    assert capsys.readouterr().out.splitlines()[0] == "result:  TRUE"
    assert main(["eval", "a = 1"]) == 0
    assert capsys.readouterr().out.splitlines() == ["result:  NULL", "matched: false"]


def test_eval_error_result(capsys):
    assert main(["eval", "a = 1", "a=1.0"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("result:  ERROR (RuntimeException:") and out[1] == "matched: false"


def test_eval_syntax_error_and_bad_property(capsys):
    assert main(["eval", "a >", "a=1"]) == 2
    assert "^" in capsys.readouterr().err
    with pytest.raises(SystemExit) as info:
        main(["eval", "a = 1", "novalue"])
    assert info.value.code == 2
    assert "KEY=VALUE" in capsys.readouterr().err


def test_explain_prints_the_evaluation_tree(capsys):
    assert main(["explain", "a > 5 AND TAGS IN ('A', 'B')", "a=3", "TAGS=A"]) == 0
    assert capsys.readouterr().out.splitlines() == [
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


def test_explain_error_and_missing_property(capsys):
    assert main(["explain", "a = 1 OR b = 'x'", "a=1.0"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[1] == "properties: a='1.0', b missing"
    assert out[2] == ("result:     ERROR (RuntimeException caused by NumberFormatException), not matched "
                      "(decided at 1:3: a = 1)")
    assert "    b = 'x' -> not reached" in out
    assert main(["explain", "a = b", "a=x=y"]) == 0   # values may hold '='
    out = capsys.readouterr().out.splitlines()
    assert out[1] == "properties: a='x=y', b missing"
    assert "*   b -> NULL (missing)  <== decided here" in out


def test_explain_json(capsys):
    assert main(["explain", "--json", "a BETWEEN 1 AND 9", "a=5"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert (d["value"], d["matched"], d["error_cause"], d["properties"]) == ("TRUE", True, None, {"a": "5"})
    root = d["root"]
    assert root["op"] == "BETWEEN" and [c["op"] for c in root["children"]] == [">=", "<="]
    assert root["children"][0]["conversions"] == ["Integer.parseInt", None]
    assert d["decider"] == root["id"] == 0 and root["decider"] is True
    assert main(["explain", "a = 1", "a=x", "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert (d["value"], d["error_cause"], d["error_root_cause"]) == (
        "ERROR", "RuntimeException", "NumberFormatException")


def test_explain_syntax_error_exits_2(capsys):
    assert main(["explain", "a = 1 AND\n  b > 'x'", "a=1"]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.splitlines() == ["rmqfilter explain: error: 2:7: Value ''x'' cannot be compared.", "    b > 'x'",
                                         "        ^"]
    assert main(["explain", "--json", "a >"]) == 2
    assert "error: 1:4: " in capsys.readouterr().err
    with pytest.raises(SystemExit) as info:
        main(["explain", "a = 1", "novalue"])
    assert info.value.code == 2


def test_selector_commands_do_not_import_spark():
    code = ("import sys; from rmqfilter import main; main(['check', 'a = 1']);"
            "main(['eval', 'a = 1', 'a=1']); main(['explain', 'a = 1', 'a=1']);"
            "assert 'pyspark' not in sys.modules, 'pyspark imported'")
    subprocess.run([sys.executable, "-c", code], cwd=ROOT, check=True, capture_output=True,
                   env={"PYTHONPATH": str(ROOT)})
