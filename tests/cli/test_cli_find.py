"""``rmqfilter find`` from the command line: the table, JSON lines and their summary, Parquet, --stats, clusters,
and bad input (exit status 2, one line naming what was wrong)."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import rmqfilter
from cq.writer import StoreWriter
from cq.writer.index import write_index_files

T0 = 1_700_000_000_000
TOPIC = "Orders"


def write(root, n: int, *, start: int = 0, index_up_to: int | None = None) -> list[dict]:
    out = []
    with StoreWriter(root, commit_log_file_size=1 << 20, consume_queue_file_size=20 * 500) as w:
        for i in range(start, start + n):
            r = w.append(TOPIC, b"x", queue_id=i % 3, tags="TagA" if i % 2 else "TagB", keys=[f"k{i % 5}"],
                         properties={"UNIQ_KEY": f"U{i:05d}", "n": str(i)}, store_timestamp=T0 + 10 * i)
            out.append({"offset": r.commit_log_offset, "i": i})
    if index_up_to is not None:
        write_index_files(root, hash_slot_num=8, index_num=100, up_to=out[index_up_to]["offset"])
    return out


@pytest.fixture(scope="module")
def stores(tmp_path_factory):
    base = tmp_path_factory.mktemp("cli-find")
    a = write(base / "broker-a", 600, index_up_to=500)
    b = write(base / "broker-b", 300, start=600)
    return base, a, b


def run(capsys, *argv) -> tuple[int, str, str]:
    code = rmqfilter.main([str(x) for x in argv])
    out, err = capsys.readouterr()
    return code, out, err


def test_key_table_says_where_it_scanned(capsys, stores):
    base, a, _ = stores
    code, out, err = run(capsys, "find", base / "broker-a", "--topic", TOPIC, "--key", "k2")
    assert code == 0 and err == ""
    lines = out.splitlines()
    assert lines[0].split() == ["broker", "topic", "queue_id", "queue_offset", "commit_log_offset", "msg_id",
                                "uniq_key", "keys", "tags", "store_timestamp", "born_timestamp", "found_by"]
    body = [ln for ln in lines[1:] if ln.startswith("broker-a")]
    assert len(body) == sum(1 for w in a if w["i"] % 5 == 2) == 120
    assert "120 message(s)" in out
    assert sum(ln.endswith("scan") for ln in body) == sum(1 for w in a[500:] if w["i"] % 5 == 2)
    assert "note: broker-a: scanned CommitLog" in out and "no index file covers" in out
    assert "2023-11-14T22:13:20.020Z" in out  # store times as ISO 8601 UTC


def test_json_lines_and_summary_over_a_cluster(capsys, stores):
    base, a, b = stores
    code, out, _ = run(capsys, "find", base / "broker-a", base / "broker-b", "--topic", TOPIC,
                       "--between", T0 + 5000, "2023-11-14T22:13:27.990", "--json")
    assert code == 0
    *rows, summary = [json.loads(ln) for ln in out.splitlines()]
    expected = [("broker-a", w["offset"]) for w in a if 500 <= w["i"] <= 799] + \
               [("broker-b", w["offset"]) for w in b if 500 <= w["i"] <= 799]
    assert [(r["broker"], r["commit_log_offset"]) for r in rows] == expected
    assert {r["found_by"] for r in rows} == {"time_search"}
    stats = summary["summary"]["stats"]
    assert summary["summary"]["rows"] == len(rows) and len(stats["queues"]) == 6
    assert all(q["probes"] <= 2 * 9 for q in stats["queues"])
    assert any("broker's search" in n for n in summary["summary"]["notes"])


def test_stats_where_group_and_parquet(capsys, stores, tmp_path):
    base, a, _ = stores
    code, out, _ = run(capsys, "find", base / "broker-a", "--topic", TOPIC, "--between", T0, T0 + 3000, "--stats",
                       "--where", "n >= 100", "--group", "GID", "--tags", "TagA")
    assert code == 0
    body = [ln.split() for ln in out.splitlines() if ln.startswith("broker-a")]
    assert [int(r[4]) for r in body] == [w["offset"] for w in a if 100 <= w["i"] <= 300 and w["i"] % 2]
    assert {r[-1] for r in body} == {"pending"} and out.splitlines()[0].split()[-1] == "state"
    assert "stats: broker-a Orders/0:" in out and "probed" in out
    path = tmp_path / "rows.parquet"
    code, out, _ = run(capsys, "find", base / "broker-a", "--key", "k1", "--out", path)
    assert code == 0 and f"written to {path}" in out
    import pyarrow.parquet as pq

    table = pq.read_table(path)
    assert table.num_rows == 120 and table.schema.field("store_timestamp").type == "int64"
    assert "state" not in table.column_names


@pytest.mark.parametrize("argv, message", [
    (["--between", "yesterday", "1"], "argument --between: expected epoch milliseconds, or an ISO 8601 time"),
    (["--between", "5", "1"], "--between: T2 (1) is before T1 (5)"),
    (["--where", "n >>= 1"], "--where: 1:4: syntax error"),
    (["--uniq-key", "a", "--msg-id", "b"], "not allowed with argument"),
    (["--group", "G"], "--group needs --topic"),
    (["--topic", TOPIC, "--tags", "TagA"], "give --group too"),
    (["--topic", "Nowhere", "--key", "k"], "'Nowhere' has no consume queues"),
    (["--key", "k", "--tier", "/nonexistent"], "did not run the tiered store"),
    (["--key", "k", "--replica", "x", "--spark"], "--replica: find --spark reads every store given"),
])
def test_bad_input_is_one_clear_line(capsys, stores, argv, message):
    base, _, _ = stores
    try:
        code = rmqfilter.main(["find", str(base / "broker-a"), *argv])
    except SystemExit as exc:  # argparse's usage error: the same status
        code = exc.code
    err = capsys.readouterr().err
    assert code == 2 and message in err
    assert err.splitlines()[-1].startswith("rmqfilter find: error:")


def test_find_without_spark_imports_no_spark():
    root = str(Path(__file__).resolve().parents[2])
    golden = os.path.join(root, "tests", "data", "golden_store")
    code = ("import sys, rmqfilter; "
            f"rmqfilter.main(['find', {golden!r}, '--topic', 'GoldenFilterTopic', '--key', 'order-115', '--json']); "
            "bad = [m for m in sys.modules if m.split('.')[0] in ('pyspark', 'pyspark_udfs', 'pyarrow')]; "
            "sys.exit(1 if bad else 0)")
    proc = subprocess.run([sys.executable, "-c", code], check=False, cwd=root, capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": root})
    assert proc.returncode == 0, proc.stderr
