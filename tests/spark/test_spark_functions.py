"""Spark Column functions and SQL functions agree with the conformance vectors (RocketMQ's own results)."""
from __future__ import annotations

import pytest
from helpers import load_jsonl

pytestmark = pytest.mark.spark

BLOOM_CASES = [c for c in load_jsonl("bloom_cases.jsonl") if c["kind"] in ("group", "subset")]


def _utf8_ok(s: str) -> bool:
    # Spark strings are UTF-8; a lone surrogate cannot enter a DataFrame at all.
    try:
        s.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _collect_by_id(df, column: str) -> dict:
    return {row["id"]: row[column] for row in df.collect()}


def test_tags_code_column_and_sql_equal_java_hashcode(spark):
    from pyspark.sql import functions as F

    from pyspark_udfs import tags_code

    cases = [c for c in load_jsonl("tagcodes.jsonl") if _utf8_ok(c["s"])]
    assert len(cases) >= 490
    rows = [(c["id"], c["s"]) for c in cases] + [("null-tag", None)]
    df = spark.createDataFrame(rows, "id string, tag string")
    out = df.select("id", tags_code("tag").alias("col"), F.expr("rmq_tags_code(tag)").alias("sql")).collect()
    expected = {c["id"]: c["hashcode"] for c in cases}
    expected["null-tag"] = 0
    assert {r["id"]: r["col"] for r in out} == expected
    assert {r["id"]: r["sql"] for r in out} == expected
    assert dict(df.select(tags_code("tag")).dtypes).popitem()[1] == "int"


def test_bloom_positions_equal_broker_for_every_filter_shape(spark):
    from pyspark.sql import functions as F

    from pyspark_udfs import bloom_positions

    rows = []
    for case in BLOOM_CASES:
        for i, (key, pos) in enumerate(zip(case["keys"], case["positions"])):
            rows.append((f"{case['id']}/{i}", case["f"], case["n"], key, pos))
    rows.append(("null-key", 20, 32, None, None))
    df = spark.createDataFrame(rows, "id string, f int, n int, key string, expected array<int>")
    shapes = sorted({(c["f"], c["n"]) for c in BLOOM_CASES} | {(20, 32)})
    assert len(shapes) >= 5
    # One Column per Bloom filter shape, each applied to that shape's rows.
    picked = F.coalesce(*[F.when((F.col("f") == f) & (F.col("n") == n), bloom_positions("key", f, n))
                          for f, n in shapes])
    out = df.select("id", "f", "n", "expected", picked.alias("col"),
                    F.expr("rmq_bloom_positions(key)").alias("sql")).collect()
    assert len(out) == len(rows)
    for r in out:
        assert r["col"] == r["expected"], r["id"]
        if (r["f"], r["n"]) == (20, 32):
            assert r["sql"] == r["expected"], r["id"]


def test_bloom_is_hit_equals_broker_probes(spark):
    from pyspark.sql import functions as F

    from pyspark_udfs import bloom_is_hit

    rows = []
    for case in BLOOM_CASES:
        bitmap = bytes(case["bits_u8"])
        for i, probe in enumerate(case["probes"]):
            rows.append((f"{case['id']}/{i}", case["f"], case["n"], probe["key"], bitmap, probe["hit"]))
    assert any(not r[-1] for r in rows) and any(r[-1] for r in rows)
    # Broker would throw (wrong length) or nothing to test: NULL.
    rows.append(("short-bitmap", 20, 32, "g#t", b"\x00" * 3, None))
    rows.append(("null-bitmap", 20, 32, "g#t", None, None))
    rows.append(("null-key", 20, 32, None, b"\xff" * 14, None))
    df = spark.createDataFrame(rows, "id string, f int, n int, key string, bitmap binary, expected boolean")
    shapes = sorted({(c["f"], c["n"]) for c in BLOOM_CASES} | {(20, 32)})
    picked = F.coalesce(*[F.when((F.col("f") == f) & (F.col("n") == n), bloom_is_hit("key", "bitmap", f, n))
                          for f, n in shapes])
    out = df.select("id", "f", "n", "expected", picked.alias("col"),
                    F.expr("rmq_bloom_is_hit(key, bitmap)").alias("sql")).collect()
    for r in out:
        assert r["col"] == r["expected"], r["id"]
        if (r["f"], r["n"]) == (20, 32):
            assert r["sql"] == r["expected"], r["id"]


def test_bad_bloom_parameters_fail_when_the_column_is_built(spark):
    from pyspark_udfs import bloom_is_hit, bloom_positions

    with pytest.raises(ValueError, match="f must be"):
        bloom_positions("key", f=100)
    with pytest.raises(ValueError, match="n must be"):
        bloom_is_hit("key", "bitmap", n=0)


SELECTOR_CASES = [
    c for c in load_jsonl("selector_cases.jsonl")
    if c["parse_ok"] and _utf8_ok(c["expr"]) and all(_utf8_ok(k) and _utf8_ok(v) for k, v in c["props"].items())
]


def _selector_frame(spark):
    rows = [(c["id"], c["expr"], c["props"], c["matched"]) for c in SELECTOR_CASES]
    rows.append(("null-map", "a IS NULL", None, True))  # no properties at all: every lookup is absent
    rows.append(("null-sql", None, {"a": "1"}, None))
    return spark.createDataFrame(rows, "id string, sql string, props map<string,string>, expected boolean")


def test_rmq_selector_match_sql_form_equals_broker_for_every_case(spark):
    from pyspark.sql import functions as F

    import selector

    assert len(SELECTOR_CASES) >= 2200
    out = _selector_frame(spark).select("id", "sql", "expected",
                                        F.expr("rmq_selector_match(sql, props)").alias("got")).collect()
    assert len(out) == len(SELECTOR_CASES) + 2
    by_id = {c["id"]: c for c in SELECTOR_CASES}
    for r in out:
        assert r["got"] == r["expected"], (r["id"], r["sql"])
        if r["id"] in by_id:  # and the library agrees with both
            assert selector.compile(r["sql"]).matches(by_id[r["id"]]["props"]) == r["expected"]


@pytest.mark.parametrize("string_type", ["string", "large_string"])
def test_arrow_udf_body_equals_broker_for_every_distinct_selector(string_type):
    """The Arrow UDF engine's body (``selector_match_columns``, as ``arrow_match_column`` calls it in
    Spark's Python workers) on every distinct public selector, with either Arrow string type.

    No Spark here: the UDF's wiring (the property columns it gets, the batches) is checked on a
    sample in test_selector_match_column_equals_broker_on_a_sample_of_selectors."""
    import pyarrow as pa

    from pyspark_udfs import _batch

    by_expr: dict[str, list[tuple[str, dict | None, bool]]] = {}
    for c in SELECTOR_CASES:
        by_expr.setdefault(c["expr"], []).append((c["id"], c["props"], c["matched"]))
    by_expr.setdefault("a IS NULL", []).append(("null-map", None, True))  # every lookup is absent
    assert len(by_expr) >= 1000
    arrow_type = getattr(pa, string_type)()
    got, expected = {}, {}
    for sql, cases in by_expr.items():
        names = tuple(sorted(_batch.compiled_selector(sql).properties))  # as arrow_match_column sends them
        if names:
            arrays = [pa.array([None if props is None else props.get(name) for _, props, _ in cases], arrow_type)
                      for name in names]
        else:
            arrays = [pa.array([None] * len(cases), arrow_type)]  # the placeholder: only the batch length
        decisions = _batch.selector_match_columns(sql, names, arrays)
        assert decisions.type == pa.bool_() and decisions.null_count == 0, sql
        got.update(zip([i for i, _, _ in cases], decisions.to_pylist()))
        expected.update({i: matched for i, _, matched in cases})
    wrong = {i: (got[i], expected[i]) for i in expected if got[i] is not expected[i]}
    assert not wrong, f"{len(wrong)} of {len(expected)} differ, e.g. {list(wrong.items())[:5]}"


# Every curated case and every twentieth other distinct selector, as test_spark_native samples them.
ENGINE_SAMPLE = sorted({c["expr"] for n, c in enumerate(SELECTOR_CASES) if c["kind"] == "curated" or n % 20 == 0})


def test_selector_match_column_equals_broker_on_a_sample_of_selectors(spark):
    """The Arrow UDF engine in Spark, one job over ENGINE_SAMPLE (every distinct selector: the test above)."""
    from pyspark.sql import functions as F

    import selector
    from pyspark_udfs import selector_match

    exprs = sorted(set(ENGINE_SAMPLE) | {"a IS NULL"})
    assert len(exprs) >= 150 and any(not selector.compile(x).properties for x in exprs)  # some read nothing
    df = _selector_frame(spark).filter(F.col("sql").isin(exprs))
    # Each row takes the Column built for its own selector text.
    picked = F.coalesce(*[F.when(F.col("sql") == F.lit(x), selector_match(x, "props", engine="arrow"))
                          for x in exprs])
    plan_and_rows = df.select("id", picked.alias("got"))
    assert "ArrowEvalPython" in plan_and_rows._jdf.queryExecution().executedPlan().toString()
    got = {r["id"]: r["got"] for r in plan_and_rows.collect()}
    expected = {c["id"]: c["matched"] for c in SELECTOR_CASES if c["expr"] in exprs}
    expected["null-map"] = True
    assert got == expected


def test_selector_match_reads_only_the_selectors_properties(spark):
    import re

    from pyspark_udfs import selector_match

    df = spark.createDataFrame([({"a": "7", "TAGS": "A", "big": "x" * 1000},), ({"a": "7"},), (None,)],
                               "props map<string,string>")
    out = df.select(selector_match("a > 5 AND TAGS IN ('A', 'B')", "props", engine="arrow"))
    plan = out._jdf.queryExecution().executedPlan().toString()
    udf_line = next(line for line in plan.splitlines() if "ArrowEvalPython" in line)
    # The UDF gets props['TAGS'] and props['a'] from the JVM, never the map itself.
    args = re.search(r"match\((.*)\)#", udf_line).group(1)
    assert sorted(re.findall(r"element_at\(props#\d+, (\w+)", args)) == ["TAGS", "a"]
    assert not re.search(r"(^|, )props#\d+(,|$)", args)
    assert [r[0] for r in out.collect()] == [True, False, False]


def test_selector_match_rejects_bad_selector_when_the_column_is_built(spark):
    import selector
    from pyspark_udfs import selector_match

    with pytest.raises(selector.SelectorSyntaxError) as info:
        selector_match("a > 5 AND", "props")
    assert info.value.position is not None
    with pytest.raises(TypeError, match="selector text"):
        selector_match(None, "props")


ENGINE_CHUNK = 10  # native selector columns per Spark job (as in test_spark_native.py)


def _match_by_engine(spark, engine: str, sample: list[str]) -> tuple[dict[str, bool], list[str]]:
    """selector_match(engine=...) on the rows of ``sample``'s selectors: {case id: result} and the plans' text."""
    from pyspark.sql import functions as F

    from pyspark_udfs import selector_match

    df = _selector_frame(spark).filter(F.col("sql").isin(sample)).cache()
    got: dict[str, bool] = {}
    plans = []
    saved = spark.conf.get("spark.sql.codegen.wholeStage")
    spark.conf.set("spark.sql.codegen.wholeStage", "false")  # 10 wide expressions fused would be thrown away
    try:
        for start in range(0, len(sample), ENGINE_CHUNK):
            chunk = sample[start:start + ENGINE_CHUNK]
            picked = F.coalesce(*[F.when(F.col("sql") == F.lit(x), selector_match(x, "props", engine=engine))
                                  for x in chunk])
            out = df.filter(F.col("sql").isin(chunk)).select("id", picked.alias("got"))
            plans.append(out._jdf.queryExecution().executedPlan().toString())
            got.update({r["id"]: r["got"] for r in out.collect()})
    finally:
        spark.conf.set("spark.sql.codegen.wholeStage", saved)
        df.unpersist()
    return got, plans


def test_selector_match_engines_agree_with_the_broker_and_auto_runs_natively(spark):
    assert len(ENGINE_SAMPLE) >= 150
    # The Arrow engine on every distinct selector: test_arrow_udf_body_equals_broker_..., in Spark
    # on this sample: test_selector_match_column_equals_broker_on_a_sample_of_selectors;
    # the native engine on this whole sample: test_spark_native.py (public_results), and
    # every compilable public selector translates natively (test_every_compilable_public_...).
    # auto's native Column is the same lowering of the same translation as selector_column's
    # (NativeSelector.match_column / .column), so here auto in Spark on one job of the sample:
    # planning 10 of these wide columns takes seconds.
    evaluated = ENGINE_SAMPLE[:ENGINE_CHUNK]
    auto, auto_plans = _match_by_engine(spark, "auto", evaluated)
    expected = {c["id"]: c["matched"] for c in SELECTOR_CASES if c["expr"] in evaluated}
    if "a IS NULL" in evaluated:
        expected["null-map"] = True  # the frame's extra row: a NULL map, every property absent
    assert auto == expected
    # auto chose the native expression for every one of these selectors: no Python in the plan.
    assert not any("ArrowEvalPython" in plan for plan in auto_plans)


def test_selector_match_engine_native_and_its_errors(spark):
    import selector
    from pyspark_udfs import selector_match

    df = spark.createDataFrame([({"a": "7", "TAGS": "A"},), ({"a": " 7", "TAGS": "A"},), ({"a": "٧"},), (None,)],
                               "props map<string,string>")
    sql = "a > 5 AND (TAGS IN ('A', 'B') OR TAGS IS NULL)"
    columns = [selector_match(sql, "props", engine=e).alias(e) for e in ("native", "auto", "arrow")]
    rows = df.select(*columns).collect()
    # " 7" throws at the broker (Integer.parseInt has no whitespace); "٧" is Arabic-Indic seven.
    assert [tuple(r) for r in rows] == [(True,) * 3, (False,) * 3, (True,) * 3, (False,) * 3]
    with pytest.raises(ValueError, match=r"engine must be one of 'auto', 'native', 'arrow', got 'jvm'"):
        selector_match("a > 5", "props", engine="jvm")
    with pytest.raises(selector.SelectorSyntaxError):
        selector_match("a >", "props", engine="native")
    deep = "NOT " * 401 + "(a > 5)"  # deeper than the native translation goes; odd, so a <= 5
    with pytest.raises(ValueError, match="cannot run as a native Spark expression.*nesting depth"):
        selector_match(deep, "props", engine="native")
    out = df.select(selector_match(deep, "props"))
    assert "ArrowEvalPython" in out._jdf.queryExecution().executedPlan().toString()  # auto fell back
    assert [r[0] for r in out.collect()] == [False, False, False, False]  # " 7" throws, NULL a is UNKNOWN
