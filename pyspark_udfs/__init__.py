"""rmqfilter on Spark: SQL functions, Arrow UDFs, the ``rocketmq`` data source and the scan job.

Importing this package imports pyspark (and pyarrow): it is the Spark layer. The ``rmqfilter``
command imports it only inside the commands that run Spark (``scan``, ``demo``, ``cost --spark``),
so the others never load pyspark (docs/contributing.md#layers).

Public names:

- Column functions :func:`selector_match`, :func:`tags_code`,
  :func:`bloom_positions`, :func:`bloom_is_hit`;
- :func:`register` (SQL functions ``rmq_*`` and the ``rocketmq`` data source);
- :class:`RocketMQDataSource` (``spark.read.format("rocketmq")``);
- :func:`selector_column`, :func:`selector_value_column`, :func:`translate`:
  selectors compiled to native Spark expressions (no Python UDF).
"""
from __future__ import annotations

from .datasource import RocketMQDataSource
from .functions import bloom_is_hit, bloom_positions, register, selector_match, tags_code
from .native import selector_column, selector_value_column, translate

__all__ = [
    "RocketMQDataSource",
    "bloom_is_hit",
    "bloom_positions",
    "register",
    "selector_column",
    "selector_match",
    "selector_value_column",
    "tags_code",
    "translate",
]
