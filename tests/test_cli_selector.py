"""``rmqfilter check`` and ``rmqfilter eval``."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from pyspark_udfs.cli import main

ROOT = Path(__file__).resolve().parent.parent


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


def test_selector_commands_do_not_import_spark():
    code = ("import sys; from pyspark_udfs.cli import main; main(['check', 'a = 1']);"
            "main(['eval', 'a = 1', 'a=1']); assert 'pyspark' not in sys.modules, 'pyspark imported'")
    subprocess.run([sys.executable, "-c", code], cwd=ROOT, check=True, capture_output=True,
                   env={"PYTHONPATH": str(ROOT)})
