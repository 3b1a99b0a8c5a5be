"""Spark Column functions and SQL functions agree with the conformance vectors (RocketMQ's own results)."""
from __future__ import annotations

import pytest
from conftest import load_jsonl

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
