"""The Spark functions, the ``rocketmq`` data source and the scan job under Spark Connect give
exactly the classic session's results.

Each workload below is a module-level function ``workload(spark, ...)`` that returns plain
values (sorted rows, counts, plan text). A test runs it on the classic ``spark`` fixture and,
through ``connect_spark.run``, on one Spark Connect session (a client in a child process, a
local Connect server beside it: tests/conftest.py says why), and compares. Each test also
checks the classic result against the broker's (the conformance vectors, ``cq.Store.consume``)
so that "equal" cannot mean "equally empty".
"""
from __future__ import annotations

import contextlib
import io
import json
import os
import subprocess
import sys

import pytest
from helpers import DATA, ConnectCallError, load_jsonl

pytestmark = [pytest.mark.spark, pytest.mark.connect]

STORE = str(DATA / "golden_store")
TOPIC = "GoldenFilterTopic"
SQL_GROUPS = {
    "GID_SQL_A": "a > 5 AND b = 'abc'",
    "GID_SQL_B": "TAGS = 'TagA' OR color IN ('red', 'grün')",
    "GID_SQL_C": "num BETWEEN 10 AND 20 OR (city IS NOT NULL AND city = '北京')",
}
TAG_GROUP = ("GID_TAGS", "TagA || TagC || tag-0")
KEY = ("topic", "queue_id", "queue_offset")


def _utf8(s: str) -> bool:
    try:
        s.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


# Every curated selector case and every twentieth other one: a few hundred rows, one Spark job each way.
SELECTOR_CASES = [c for n, c in enumerate(load_jsonl("selector_cases.jsonl"))
                  if c["parse_ok"] and (c["kind"] == "curated" or n % 20 == 0)
                  and _utf8(c["expr"]) and all(_utf8(k) and _utf8(v) for k, v in c["props"].items())]
TAG_CASES = [c for c in load_jsonl("tagcodes.jsonl") if _utf8(c["s"])]
BLOOM_CASES = [c for c in load_jsonl("bloom_cases.jsonl") if c["kind"] in ("group", "subset")]
# Selectors for the Column function: each engine, over every selector row's properties.
MATCH_SELECTORS = ["a > 5 AND b = 'abc'", "TAGS IN ('TagA', 'TagB') OR a IS NULL",
                   "a BETWEEN 1 AND 10 AND NOT (b = 'x') OR num < 3.5"]


def _plain(rows) -> list[tuple]:
    """Rows as sorted tuples of plain values (maps as sorted item tuples, binary as bytes)."""
    def value(v):
        if isinstance(v, dict):
            return tuple(sorted(v.items()))
        if isinstance(v, (bytes, bytearray)):
            return bytes(v)
        if isinstance(v, list):
            return tuple(v)
        return v

    return sorted((tuple(value(v) for v in r) for r in rows), key=repr)


def _read(spark, path: str = STORE, **options):
    reader = spark.read.format("rocketmq")
    for name, value in options.items():
        reader = reader.option(name, value)
    return reader.load(path)


def _physical_plan(df) -> str:
    """``explain()``'s text: the public way to see a plan under both APIs (Connect has no ``_jdf``)."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        df.explain()
    return out.getvalue()


# ------------------------------------------------------------------------------ workloads

def session_api(spark) -> tuple[str, bool, bool]:
    from pyspark.sql.utils import is_remote

    from pyspark_udfs.job import is_connect_session

    return type(spark).__module__, is_remote(), is_connect_session(spark)


def sql_functions(spark) -> list[tuple]:
    """``register`` then the four ``rmq_*`` functions in SQL text over a temporary view."""
    import pyspark_udfs

    pyspark_udfs.register(spark)
    rows = [(f"sel/{c['id']}", c["expr"], c["props"], None, None) for c in SELECTOR_CASES]
    rows += [(f"tag/{c['id']}", None, None, c["s"], None) for c in TAG_CASES[:200]]
    for case in BLOOM_CASES:
        if (case["f"], case["n"]) == (20, 32):
            for i, probe in enumerate(case["probes"]):
                rows.append((f"bloom/{case['id']}/{i}", None, None, probe["key"], bytes(case["bits_u8"])))
    spark.createDataFrame(rows, "id string, sql string, props map<string,string>, s string, bitmap binary") \
        .createOrReplaceTempView("rmq_connect_cases")
    return _plain(spark.sql(
        "SELECT id, rmq_selector_match(sql, props), rmq_tags_code(s), rmq_bloom_positions(s), "
        "rmq_bloom_is_hit(s, bitmap) FROM rmq_connect_cases").collect())


def column_functions(spark) -> dict[str, list[tuple]]:
    """``selector_match`` (native and arrow engines), ``tags_code``, ``bloom_positions``/``bloom_is_hit``."""
    from pyspark.sql import functions as F

    from pyspark_udfs import bloom_is_hit, bloom_positions, selector_match, tags_code

    props = spark.createDataFrame([(c["id"], c["props"]) for c in SELECTOR_CASES] + [("null-map", None)],
                                  "id string, props map<string,string>")
    matches = [selector_match(sql, "props", engine=engine).alias(f"{engine}{n}")
               for n, sql in enumerate(MATCH_SELECTORS) for engine in ("native", "arrow")]
    tags = spark.createDataFrame([(c["id"], c["s"]) for c in TAG_CASES] + [("null", None)], "id string, s string")
    f, n = BLOOM_CASES[-1]["f"], BLOOM_CASES[-1]["n"]  # a shape other than the broker default as well
    keys = spark.createDataFrame([(c["id"], k, bytes(c["bits_u8"])) for c in BLOOM_CASES for k in c["keys"]],
                                 "id string, key string, bitmap binary")
    return {
        "selector_match": _plain(props.select("id", *matches).collect()),
        "tags_code": _plain(tags.select("id", tags_code("s")).collect()),
        "bloom": _plain(keys.select("id", "key", bloom_positions("key"), bloom_positions(F.col("key"), f, n),
                                    bloom_is_hit("key", "bitmap")).collect()),
    }


def read_table(spark, **options) -> list[tuple]:
    return _plain(_read(spark, **options).collect())


def pushdown(spark) -> dict[str, object]:
    """Filters on queue_id and tags_code go into the reader; tags are re-checked by Spark."""
    from pyspark.sql import functions as F

    import cq

    code_a = cq.tags_code("TagA")
    df = _read(spark, pushdown="true").filter(
        (F.col("queue_id") == 1) & F.col("tags_code").isin(code_a, cq.tags_code("标签")))
    spark_filters = [line for line in _physical_plan(df).splitlines() if " Filter " in line or "Filter (" in line]
    return {
        "rows": _plain(df.select(*KEY, "tags").collect()),
        "tags": _plain(_read(spark, topic=TOPIC, pushdown="true").filter(F.col("tags") == "Ωmega")
                       .select(*KEY).collect()),
        "pushed": not any("queue_id" in line or str(code_a) in line for line in spark_filters),
    }


def layer2_in_spark(spark, group: str) -> list[tuple]:
    from pyspark.sql import functions as F

    from pyspark_udfs import selector_column

    sql = SQL_GROUPS[group]
    df = _read(spark, topic=TOPIC, group=group, sql=sql, decisions="true", table="consumequeue", layer2="spark")
    matched = F.when(F.col("reached_commit_log"), selector_column(sql, "properties"))
    return _plain(df.select(*KEY, "matched_by_consume_queue", matched.alias("cl")).collect())


def bad_read(spark, **options) -> str:
    """The error message a bad read gives (it must name the option, under either API)."""
    try:
        _read(spark, **options).count()
    except Exception as exc:  # noqa: BLE001  AnalysisException (classic) or its Connect twin
        return str(exc)
    raise AssertionError(f"reading with {options} did not fail")


def scan_job(spark, group: str, sql: str | None, tags: str | None, layer2: str, out: str | None = None,
             store: str = STORE, on_corrupt: str = "fail") -> dict:
    from pyspark_udfs import job

    result = job.scan(spark, store, TOPIC, job.GroupScan(group, sql=sql, tags=tags), layer2=layer2, out=out,
                      on_corrupt=on_corrupt)
    d = result.as_dict()
    del d["seconds"], d["rows_per_second"]
    return d


def read_parquet(spark, path: str) -> list[tuple]:
    return _plain(spark.read.parquet(path).select(*KEY, "body").collect())


# ---------------------------------------------------------------------------------- tests

def test_connect_session_is_spark_connect_and_classic_stays_classic(spark, connect_spark):
    assert connect_spark.run(session_api) == ("pyspark.sql.connect.session", True, True)
    assert session_api(spark) == ("pyspark.sql.session", False, False)


def test_sql_functions_equal_classic_and_the_broker(spark, connect_spark):
    classic = sql_functions(spark)
    assert connect_spark.run(sql_functions) == classic
    got = {r[0]: r[1:] for r in classic}
    assert len(SELECTOR_CASES) >= 200
    for c in SELECTOR_CASES:
        assert got[f"sel/{c['id']}"][0] == c["matched"], c["id"]
    for c in TAG_CASES[:200]:
        assert got[f"tag/{c['id']}"][1] == c["hashcode"], c["id"]
    hits = [(got[f"bloom/{c['id']}/{i}"][3], p["hit"]) for c in BLOOM_CASES if (c["f"], c["n"]) == (20, 32)
            for i, p in enumerate(c["probes"])]
    assert hits and all(a == b for a, b in hits) and {b for _, b in hits} == {True, False}


def test_column_functions_equal_classic_with_both_selector_engines(spark, connect_spark):
    import selector

    classic = column_functions(spark)
    assert connect_spark.run(column_functions) == classic
    props = {c["id"]: c["props"] for c in SELECTOR_CASES}
    for row in classic["selector_match"]:
        for n, sql in enumerate(MATCH_SELECTORS):
            native, arrow = row[1 + 2 * n], row[2 + 2 * n]
            expected = selector.compile(sql).matches(props.get(row[0]) or {})
            assert native == arrow == expected, (row[0], sql)
    codes = {c["id"]: c["hashcode"] for c in TAG_CASES} | {"null": 0}
    assert dict(classic["tags_code"]) == codes


@pytest.mark.parametrize("table", ["messages", "consumequeue"])
def test_data_source_tables_equal_classic(spark, connect_spark, table):
    classic = read_table(spark, table=table)
    assert len(classic) == 300
    assert connect_spark.run(read_table, table=table) == classic


@pytest.mark.parametrize(("group", "sql", "tags"),
                         [("GID_SQL_B", SQL_GROUPS["GID_SQL_B"], None), (TAG_GROUP[0], None, TAG_GROUP[1])])
def test_data_source_group_filter_and_decisions_equal_classic(spark, connect_spark, group, sql, tags):
    import cq

    sub = {"sql": sql} if sql is not None else {"tags": tags}
    expected = sorted((TOPIC, m.queue_id, m.queue_offset) for m in cq.Store(STORE).consume(TOPIC, group, **sub))
    for options in ({"table": "messages"}, {"table": "consumequeue"}, {"decisions": "true"}):
        options = {"topic": TOPIC, "group": group, **sub, **options}
        classic = read_table(spark, **options)
        assert connect_spark.run(read_table, **options) == classic, options
        if "decisions" in options:
            assert len(classic) == 200
        else:
            assert sorted(r[:3] for r in classic) == expected and expected


def test_pushdown_equals_classic_and_still_reaches_the_reader(spark, connect_spark):
    classic = pushdown(spark)
    assert classic["rows"] and classic["tags"] and classic["pushed"]
    assert connect_spark.run(pushdown) == classic


def test_layer2_in_spark_equals_classic(spark, connect_spark):
    classic = layer2_in_spark(spark, "GID_SQL_C")
    assert len(classic) == 200 and any(r[4] for r in classic)
    assert connect_spark.run(layer2_in_spark, "GID_SQL_C") == classic


def test_bad_options_name_the_option_under_connect(connect_spark):
    assert "in selector 'a >'" in connect_spark.run(bad_read, topic=TOPIC, group="G", sql="a >")
    assert "option 'table'" in connect_spark.run(bad_read, table="index")
    # The server's Python resolves a relative path in its own working directory, not the
    # client's: a relative path that is no store there says so (here: relative to tests/).
    assert "give an absolute path" in connect_spark.run(bad_read, path=os.path.relpath(STORE, DATA.parent))
    with pytest.raises(ConnectCallError, match="did not fail"):  # the workload itself can fail
        connect_spark.run(bad_read, topic=TOPIC)


@pytest.mark.parametrize(("group", "sql", "tags", "layer2"), [
    ("GID_SQL_A", SQL_GROUPS["GID_SQL_A"], None, "native"),
    ("GID_SQL_A", SQL_GROUPS["GID_SQL_A"], None, "python"),
    (TAG_GROUP[0], None, TAG_GROUP[1], "auto"),
])
def test_scan_job_equals_classic(spark, connect_spark, group, sql, tags, layer2):
    import cq

    classic = scan_job(spark, group, sql, tags, layer2)
    consumed = cq.Store(STORE).consume(TOPIC, group, sql=sql, tags=tags)
    delivered = list(consumed)
    stats = consumed.stats  # complete once the messages have been read
    assert (classic["units_scanned"], classic["passed_consume_queue"], classic["delivered"]) == (
        stats.units_scanned, stats.passed_consume_queue, len(delivered))
    assert connect_spark.run(scan_job, group, sql, tags, layer2) == classic


def test_scan_job_on_a_corrupt_store_fails_or_skips_as_classic(spark, connect_spark, tmp_path):
    import shutil
    import struct

    import cq
    from cq import format as fmt

    store = tmp_path / "store"
    shutil.copytree(STORE, store)
    # Break the body length of the first message GID_SQL_A receives (IPv4 hosts: byte 84 of the record).
    target = next(iter(cq.Store(STORE).consume(TOPIC, "GID_SQL_A", sql=SQL_GROUPS["GID_SQL_A"])))
    assert target.sys_flag & 0x30 == 0
    path = store / "commitlog" / fmt.file_name(target.commit_log_offset - target.commit_log_offset % 65536)
    with open(path, "r+b") as f:
        f.seek(target.commit_log_offset % 65536 + 84)
        f.write(struct.pack(">i", len(target.body) - 3))
    args = ("GID_SQL_A", SQL_GROUPS["GID_SQL_A"], None, "python")
    with pytest.raises(ConnectCallError, match=rf"StoreFormatError: {path} at byte offset"):
        connect_spark.run(scan_job, *args, store=str(store))
    classic = scan_job(spark, *args, store=str(store), on_corrupt="skip")
    assert [(r["queue_id"], r["start"]) for r in classic["skipped"]] == [(target.queue_id, target.queue_offset)]
    assert connect_spark.run(scan_job, *args, store=str(store), on_corrupt="skip") == classic


def test_scan_job_output_written_through_connect_is_what_the_group_receives(spark, connect_spark, tmp_path):
    import cq

    group, sql = "GID_SQL_B", SQL_GROUPS["GID_SQL_B"]
    remote = connect_spark.run(scan_job, group, sql, None, "auto", out=str(tmp_path / "out"))
    expected = sorted((TOPIC, m.queue_id, m.queue_offset, m.body)
                      for m in cq.Store(STORE).consume(TOPIC, group, sql=sql))
    written = read_parquet(spark, str(tmp_path / "out"))
    assert sorted(r[:4] for r in written) == expected and remote["delivered"] == len(expected) > 0


def test_cli_scan_remote_runs_on_a_connect_server(spark, connect_server, tmp_path):
    """``rmqfilter scan --remote sc://...`` in its own process, against the local Connect server."""
    group, sql = "GID_SQL_C", SQL_GROUPS["GID_SQL_C"]
    summary = tmp_path / "summary.json"
    done = subprocess.run(
        [sys.executable, "-c", "import sys; from rmqfilter import main; sys.exit(main())", "scan", STORE, "--topic", TOPIC, "--group", group,
         "--sql", sql, "--remote", connect_server.url, "--json", str(summary)],
        check=False, env=connect_server.client_env(), capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert group in done.stdout and "\nlayer 2: native\n" in done.stdout
    remote = json.loads(summary.read_text())
    classic = scan_job(spark, group, sql, None, "auto")
    del remote["seconds"], remote["rows_per_second"]
    remote["skipped"] = tuple(remote["skipped"])  # a JSON list
    assert remote == classic and classic["delivered"] > 0
