"""``rmqfilter inspect`` and ``rmqfilter consume`` on the golden store."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from helpers import DATA, load_jsonl

import rmqfilter

GOLDEN = str(DATA / "golden_store")
ROWS = load_jsonl("golden_store.jsonl")
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _has_selector():
    try:
        import selector
    except ImportError:
        return False
    return hasattr(selector, "compile")


def test_inspect_table(capsys):
    assert rmqfilter.main(["inspect", GOLDEN]) == 0
    out = capsys.readouterr().out
    assert "CommitLog: 7 file(s) of 65,536 B, offsets [0, 433,183)" in out
    assert "GoldenPlainTopic                     1            0           53           53" in out
    assert "2 topic(s), 300 message(s)" in out


def test_inspect_json(capsys):
    assert rmqfilter.main(["inspect", GOLDEN, "--json", "--count-messages"]) == 0
    info = json.loads(capsys.readouterr().out)
    assert info["commit_log"]["messages"] == 300
    q = info["topics"]["GoldenFilterTopic"]["0"]
    assert (q["min_offset"], q["max_offset"], q["messages"], q["ext_bytes"]) == (0, 100, 100, 3412)


def test_inspect_json_prints_the_stores_description(capsys):
    """``inspect --json`` renders cq.store.describe.describe, of a path or of an open Store alike."""
    import cq
    from cq.store.describe import describe

    assert rmqfilter.main(["inspect", GOLDEN, "--json"]) == 0
    printed = json.loads(capsys.readouterr().out)
    store = cq.Store(GOLDEN)
    try:
        assert describe(store) == describe(GOLDEN) == printed
        assert describe(store, count_messages=True)["commit_log"]["messages"] == 300
        assert store.topics()  # describe leaves a Store it was given open
    finally:
        store.close()


def test_inspect_not_a_store(tmp_path, capsys):
    assert rmqfilter.main(["inspect", str(tmp_path)]) == 2
    assert "not a RocketMQ store" in capsys.readouterr().err


def test_consume_tags_text(capsys):
    assert rmqfilter.main(["consume", GOLDEN, "--topic", "GoldenPlainTopic", "--group", "G",
                     "--tags", "TagA || Ωmega", "--progress", "never"]) == 0
    captured = capsys.readouterr()
    lines = captured.out.splitlines()
    want = sorted((r["queueId"], r["queueOffset"], r["msgId"]) for r in ROWS
                  if r["topic"] == "GoldenPlainTopic" and r["tags"] in ("TagA", "Ωmega"))
    assert [tuple(line.split("\t")[:3]) for line in lines] == [(str(a), str(b), c) for a, b, c in want]
    assert f"delivered {len(want):,}" in captured.err and "units scanned 100" in captured.err


def test_consume_jsonl_with_queue_and_limit(capsys):
    assert rmqfilter.main(["consume", GOLDEN, "--topic", "GoldenFilterTopic", "--group", "G", "--tags", "*",
                     "--queue", "1", "--format", "jsonl", "--limit", "5", "--verify-crc"]) == 0
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [(r["queue_id"], r["queue_offset"]) for r in rows] == [(1, i) for i in range(5)]
    golden = {(r["queueId"], r["queueOffset"]): r for r in ROWS if r["topic"] == "GoldenFilterTopic"}
    for r in rows:
        g = golden[(1, r["queue_offset"])]
        assert (r["msg_id"], r["properties"], r["commit_log_offset"]) == (g["msgId"], g["properties"],
                                                                           g["commitLogOffset"])


@pytest.mark.skipif(not _has_selector(), reason="selector.compile has not landed yet")
def test_consume_sql_counts(capsys):
    sql = "a > 5 AND b = 'abc'"
    assert rmqfilter.main(["consume", GOLDEN, "--topic", "GoldenFilterTopic", "--group", "GID_SQL_A",
                     "--sql", sql, "--format", "none"]) == 0
    err = capsys.readouterr().err
    matched = sum(1 for r in ROWS for g in r["groups"] if g["group"] == "GID_SQL_A" and g["matched"])
    assert f"delivered {matched:,}" in err and "bloom tested 200" in err


@pytest.mark.parametrize("argv, message", [
    (["--topic", "Nope", "--group", "G", "--tags", "*"], "topic 'Nope' has no consume queues"),
    (["--topic", "GoldenFilterTopic", "--group", "G", "--tags", "||"], "subString split error"),
])
def test_consume_errors(capsys, argv, message):
    assert rmqfilter.main(["consume", GOLDEN, *argv]) == 2
    assert message in capsys.readouterr().err


def test_consume_takes_at_most_one_filter(capsys):
    # the group alone is looked up in config/consumerFilter.json; the golden store has none
    assert rmqfilter.main(["consume", GOLDEN, "--topic", "GoldenFilterTopic", "--group", "G"]) == 2
    assert "group 'G' has no SQL92 filter registered for topic 'GoldenFilterTopic'" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        rmqfilter.main(["consume", GOLDEN, "--topic", "T", "--group", "G", "--tags", "*", "--sql", "a=1"])


def test_store_commands_do_not_import_spark():
    code = ("import sys; import rmqfilter; "
            f"rmqfilter.main(['inspect', {GOLDEN!r}]); "
            f"rmqfilter.main(['consume', {GOLDEN!r}, '--topic', 'GoldenPlainTopic', '--group', 'G', '--tags', 'TagA']); "
            "bad = [m for m in sys.modules if m in ('pyspark', 'pyspark_udfs') or m.startswith(('pyspark.', 'pyspark_udfs.'))]; "
            "sys.exit(1 if bad else 0)")
    proc = subprocess.run([sys.executable, "-c", code], check=False, cwd=ROOT, capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": ROOT})
    assert proc.returncode == 0, proc.stderr


def test_commands_do_not_print_the_interpreters_resource_warnings(capsys, monkeypatch):
    """A file the caller left open and the interpreter collects while a command runs is not the
    command's warning (CI saw ``pending`` print "unclosed file" for a test's pipe); the command's own
    warnings still print."""
    import warnings

    import cq

    real = cq.Store.__init__

    def init(self, *args, **kwargs):
        warnings.warn("unclosed file <_io.TextIOWrapper name=15 encoding='UTF-8'>", ResourceWarning, stacklevel=1)
        warnings.warn("a warning of the command's own", UserWarning, stacklevel=1)
        real(self, *args, **kwargs)

    monkeypatch.setattr(cq.Store, "__init__", init)
    code = rmqfilter.main(["pending", GOLDEN])
    err = capsys.readouterr().err
    assert code == 0 and "unclosed file" not in err and "a warning of the command's own" in err, err
