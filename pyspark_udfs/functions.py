"""Column functions and SQL functions for RocketMQ filtering on Spark.

``selector_match`` runs as a native Spark expression when the selector's
translation is exact (see :mod:`pyspark_udfs.native`), as the Arrow UDF
otherwise or when asked (``engine="arrow"``). The Arrow UDFs
(``pyspark.sql.functions.arrow_udf``) hand each Python worker Arrow batches and
the worker makes one call into the library's batch kernel per batch (see
:mod:`pyspark_udfs._batch`).

``selector_match``'s Arrow UDF knows the selector text when the Column
is built, so it reads only the properties the selector uses out of the map in
the JVM (``props['a']``) and ships those string columns to Python. The
SQL-registered ``rmq_selector_match(sql, props)`` takes the whole map (its
selector text is a column, unknown until run time), which moves every property
of every row out of the JVM and is several times slower on wide maps.
"""
from __future__ import annotations

import pyarrow as pa
from pyspark.sql import Column, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.functions import arrow_udf
from pyspark.sql.types import ArrayType, BooleanType, IntegerType

import bloom
import selector
from pyspark_udfs import _batch, native
from pyspark_udfs.datasource import RocketMQDataSource

ColumnOrName = Column | str

__all__ = ["bloom_is_hit", "bloom_positions", "register", "selector_match", "tags_code"]

DEFAULT_F = 20  # BrokerConfig.maxErrorRateOfBloomFilter
DEFAULT_N = 32  # BrokerConfig.expectConsumerNumUseFilter


def _col(c: ColumnOrName) -> Column:
    return F.col(c) if isinstance(c, str) else c


def _check_bloom_params(f: int, n: int) -> None:
    # Raise here, when the Column is built, not later inside an executor.
    bloom.BloomFilter(f=f, n=n)


ENGINES = ("auto", "native", "arrow")


def selector_match(sql: str, props: ColumnOrName, *, engine: str = "auto") -> Column:
    """Whether the broker would deliver each message to a consumer with SQL92 selector ``sql``.

    Parameters
    ----------
    sql : str
        Selector text, e.g. ``"a > 5 AND TAGS IN ('A', 'B')"``. Compiled now, so
        a syntax error raises ``selector.SelectorSyntaxError`` (with its
        position) before any job runs.
    props : Column or str
        ``map<string,string>`` column of message properties (``TAGS`` is the
        tag). A missing key, or a NULL map, means the property is absent.
    engine : {"auto", "native", "arrow"}
        ``"auto"`` (default): a native Spark expression
        (:func:`pyspark_udfs.native.selector_column`) when
        :func:`pyspark_udfs.native.translate` says the translation is exact,
        which it is for every selector of the public conformance cases;
        otherwise the Arrow UDF. ``"native"``: the native expression, or
        ``ValueError`` naming the construct it cannot express. ``"arrow"``:
        always the Arrow UDF (Python workers). Results are identical; only
        the speed differs (``explain()`` shows an ``ArrowEvalPython`` node for
        the UDF and none for the native expression).

    Returns
    -------
    Column
        BOOLEAN, never NULL: True only where the selector evaluates to TRUE
        (``Selector.matches``: an UNKNOWN result or an evaluation error is False).

    Raises
    ------
    selector.SelectorSyntaxError
        If the broker could not compile ``sql``.
    TypeError
        If ``sql`` is not a str.
    ValueError
        If ``engine`` is not one of the three names, or is ``"native"`` for a
        selector the native translation cannot express exactly.

    Examples
    --------
    >>> df.filter(selector_match("a > 5 AND TAGS IN ('A', 'B')", "properties"))  # doctest: +SKIP
    >>> selector_match("a > 5", "properties", engine="arrow")  # doctest: +SKIP
    """
    if not isinstance(sql, str):
        raise TypeError(f"selector_match: sql must be the selector text (str), got {type(sql).__name__}")
    if engine not in ENGINES:
        raise ValueError(f"selector_match: engine must be one of {', '.join(map(repr, ENGINES))}, "
                         f"got {engine!r}")
    compiled = selector.compile(sql)
    if engine != "arrow":
        plan = native.translate(sql)
        if plan.native:
            return plan.match_column(props).alias(f"selector_match({sql})")
        if engine == "native":
            raise ValueError(f"selector_match: selector {sql!r} cannot run as a native Spark "
                             f"expression ({plan.reason}); use engine='auto' or 'arrow'")
    return native.arrow_match_column(sql, compiled, props)


def _selector_match_map(sql: pa.Array, props: pa.Array) -> pa.Array:
    return _batch.selector_match_map(sql, props)


def _tags_code(tags: pa.Array) -> pa.Array:
    return _batch.tags_code(tags)


def tags_code(tag: ColumnOrName) -> Column:
    """The broker's tags code of each tag: Java ``String.hashCode``, INT; NULL or empty tag -> 0.

    Examples
    --------
    >>> df.select(tags_code("tags"))  # doctest: +SKIP
    """
    # Made per call, like every UDF here: a UDF object made at import time keeps the API of that
    # moment (classic), and fails once the process runs a Spark Connect session.
    return arrow_udf(_tags_code, IntegerType())(_col(tag))


def bloom_positions(key: ColumnOrName, f: int = DEFAULT_F, n: int = DEFAULT_N) -> Column:
    """``BloomFilter.calcBitPositions(key)`` as ``ARRAY<INT>`` of length k; NULL key -> NULL.

    Parameters
    ----------
    key : Column or str
        String column, e.g. ``"<consumerGroup>#<topic>"``.
    f, n : int
        Error rate (percent) and expected count of the Bloom filter; broker
        defaults 20 and 32 (k = 3, m = 112). Checked now: ``ValueError`` if invalid.

    Examples
    --------
    >>> df.select(bloom_positions(F.lit("GID_A#TopicTest")))  # doctest: +SKIP
    """
    _check_bloom_params(f, n)

    def positions(keys: pa.Array) -> pa.Array:
        return _batch.bloom_positions(keys, f, n)

    return arrow_udf(positions, ArrayType(IntegerType()))(_col(key)).alias("bloom_positions")


def bloom_is_hit(key: ColumnOrName, bitmap: ColumnOrName, f: int = DEFAULT_F, n: int = DEFAULT_N) -> Column:
    """``BloomFilter.isHit(generate(key), bitmap)``: may the group ``key`` match this message?

    Parameters
    ----------
    key : Column or str
        Bloom key column, ``"<consumerGroup>#<topic>"``.
    bitmap : Column or str
        BINARY column holding a ConsumeQueueExt filter bitmap (``m / 8`` bytes).
    f, n : int
        Bloom filter parameters (broker defaults 20, 32).

    Returns
    -------
    Column
        BOOLEAN; NULL where key or bitmap is NULL or the bitmap is not ``m / 8``
        bytes long.

    Examples
    --------
    >>> df.filter(bloom_is_hit(F.lit("GID_A#TopicTest"), "filter_bitmap"))  # doctest: +SKIP
    """
    _check_bloom_params(f, n)

    def is_hit(keys: pa.Array, bitmaps: pa.Array) -> pa.Array:
        return _batch.bloom_is_hit(keys, bitmaps, f, n)

    return arrow_udf(is_hit, BooleanType())(_col(key), _col(bitmap)).alias("bloom_is_hit")


def _bloom_positions_default(keys: pa.Array) -> pa.Array:
    return _batch.bloom_positions(keys, DEFAULT_F, DEFAULT_N)


def _bloom_is_hit_default(keys: pa.Array, bitmaps: pa.Array) -> pa.Array:
    return _batch.bloom_is_hit(keys, bitmaps, DEFAULT_F, DEFAULT_N)


# name -> (function, return type) of the SQL functions.
SQL_FUNCTIONS = {
    "rmq_selector_match": (_selector_match_map, BooleanType()),
    "rmq_tags_code": (_tags_code, IntegerType()),
    "rmq_bloom_positions": (_bloom_positions_default, ArrayType(IntegerType())),
    "rmq_bloom_is_hit": (_bloom_is_hit_default, BooleanType()),
}


def register(spark: SparkSession) -> None:
    """Register the SQL functions and the ``rocketmq`` data source with ``spark``.

    Also sets ``spark.sql.python.filterPushdown.enabled`` to true: a read with
    the data source option ``pushdown=true`` takes pushed-down filters, and
    Spark refuses such a reader while the setting is off.

    SQL functions: ``rmq_selector_match(sql STRING, props MAP<STRING,STRING>) -> BOOLEAN``,
    ``rmq_tags_code(tag STRING) -> INT``, ``rmq_bloom_positions(key STRING) -> ARRAY<INT>``,
    ``rmq_bloom_is_hit(key STRING, bitmap BINARY) -> BOOLEAN`` (Bloom filter f=20, n=32).

    Examples
    --------
    >>> import pyspark_udfs
    >>> pyspark_udfs.register(spark)  # doctest: +SKIP
    >>> spark.sql("SELECT rmq_tags_code('TagA')").first()[0]  # doctest: +SKIP
    2598919
    """
    for name, (function, return_type) in SQL_FUNCTIONS.items():
        spark.udf.register(name, arrow_udf(function, return_type))
    spark.dataSource.register(RocketMQDataSource)
    # With .option("pushdown", "true") the data source pushes filters into its
    # reader; Spark refuses such a reader while this is off.
    spark.conf.set("spark.sql.python.filterPushdown.enabled", "true")
