"""Input shared by the Spark selector benchmarks (bench_spark.py, bench_spark_native.py)."""
from __future__ import annotations


def props_frame(spark, rows: int):
    """``rows`` cached rows of a six-entry ``props`` map, the Spark selector benchmarks' input:
    ``a`` 0..9, ``TAGS`` TagA..TagD, ``region`` cn-beijing (every third) or cn-hangzhou,
    ``color`` blue (every fifth) or red, plus a unique ``KEYS`` and ``UNIQ_KEY``."""
    from pyspark.sql import functions as F

    tags = F.element_at(F.array(*[F.lit(t) for t in ("TagA", "TagB", "TagC", "TagD")]),
                        (F.col("id") % 4 + 1).cast("int"))
    props = F.create_map(
        F.lit("a"), (F.col("id") % 10).cast("string"),
        F.lit("TAGS"), tags,
        F.lit("region"), F.when(F.col("id") % 3 == 0, "cn-beijing").otherwise("cn-hangzhou"),
        F.lit("color"), F.when(F.col("id") % 5 == 0, "blue").otherwise("red"),
        F.lit("KEYS"), F.concat(F.lit("key-"), F.col("id").cast("string")),
        F.lit("UNIQ_KEY"), F.sha1(F.col("id").cast("string")),
    )
    df = spark.range(rows, numPartitions=4).select(props.alias("props")).cache()
    assert df.count() == rows
    return df
