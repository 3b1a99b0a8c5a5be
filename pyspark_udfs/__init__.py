"""rmqfilter on Spark: SQL functions, Arrow UDFs, the ``rocketmq`` data source and the CLI.

Public names (imported lazily, so ``rmqfilter`` commands that do not run Spark
never import pyspark):

- Column functions :func:`selector_match`, :func:`tags_code`,
  :func:`bloom_positions`, :func:`bloom_is_hit`;
- :func:`register` (SQL functions ``rmq_*`` and the ``rocketmq`` data source);
- :class:`RocketMQDataSource` (``spark.read.format("rocketmq")``);
- :func:`selector_column`, :func:`selector_value_column`, :func:`translate`:
  selectors compiled to native Spark expressions (no Python UDF).
"""
from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "selector_match": "pyspark_udfs.functions",
    "tags_code": "pyspark_udfs.functions",
    "bloom_positions": "pyspark_udfs.functions",
    "bloom_is_hit": "pyspark_udfs.functions",
    "register": "pyspark_udfs.functions",
    "RocketMQDataSource": "pyspark_udfs.datasource",
    "selector_column": "pyspark_udfs.native",
    "selector_value_column": "pyspark_udfs.native",
    "translate": "pyspark_udfs.native",
}

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


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'pyspark_udfs' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_EXPORTS))
