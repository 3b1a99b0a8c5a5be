"""A tiny expression IR for native selector translation, lowered to Spark Columns.

The translator (:mod:`pyspark_udfs.native._compile`) builds plain tuples rather
than Spark Columns, so that a translation can be planned, measured and cached
without a SparkContext, and so that its size is known before Spark sees it.
Each node is ``(op, *args)``; args are nodes or plain Python values. Nodes are
shared freely (a DAG); :func:`tree_size` counts them the way Catalyst will,
as a tree.

Every op lowers to a Spark expression that cannot throw, whatever
``spark.sql.ansi.enabled`` says: map lookups use ``map[key]`` (NULL for a
missing key in both modes), casts from strings are ``try_cast``, and array
lookups use ``get`` (NULL out of range).
"""
from __future__ import annotations

import math
from typing import Any

from pyspark.sql import functions as F

import rmqfilter_java as java

__all__ = ["Node", "lit", "lower", "op", "to_sql", "tree_size"]

Node = tuple

_TRUE = ("lit", True, "boolean")
_FALSE = ("lit", False, "boolean")


def lit(value: Any, spark_type: str | None = None) -> Node:
    """A literal; ``spark_type`` is required for NULL and pins numeric widths."""
    if value is True:
        return _TRUE
    if value is False:
        return _FALSE
    return ("lit", value, spark_type)


def op(name: str, *args: Any) -> Node:
    return (name, *args)


def is_lit(node: Node) -> bool:
    return node[0] == "lit"


def tree_size(root: Node) -> int:
    """Number of nodes of ``root`` expanded as a tree (shared nodes counted each time)."""
    memo: dict[int, int] = {}
    stack = [(root, False)]
    while stack:
        node, done = stack.pop()
        key = id(node)
        if key in memo:
            continue
        kids = [a for a in _children(node)]
        if done:
            memo[key] = 1 + sum(memo[id(k)] for k in kids)
        else:
            stack.append((node, True))
            stack.extend((k, False) for k in kids if id(k) not in memo)
    return memo[id(root)]


_UNARY = {"isnull", "isnotnull", "not", "octet_length", "lower", "try_cast", "cast", "rlike",
          "translate", "contains", "startswith", "endswith", "isin", "substr"}
_BINARY = {"and", "or", "eq", "ne", "lt", "le", "gt", "ge", "eqns", "add", "mul"}


def _children(node: Node):
    name = node[0]
    if name in _UNARY:
        yield node[1]
    elif name in _BINARY:
        yield node[1]
        yield node[2]
    elif name == "case":  # ("case", [(cond, value), ...], otherwise)
        for cond, value in node[1]:
            yield cond
            yield value
        yield node[2]
    elif name == "coalesce":
        yield from node[1:]
    elif name == "table":  # ("table", values, spark_type, index)
        yield node[3]


def lower(root: Node, props) -> Any:
    """Build the Spark Column of ``root``; ``props`` is the ``map<string,string>`` Column.

    Iterative (post-order), memoised by node identity so a shared node becomes
    one Column object.
    """
    return _post_order(root, lambda node, memo: _lower_one(node, memo, props, F))


def _post_order(root: Node, build) -> Any:
    """``build(node, memo)`` for every node, children first, once per node identity.

    Iterative, so arbitrarily deep trees need no recursion; returns the root's value.
    """
    memo: dict[int, Any] = {}
    stack = [(root, False)]
    while stack:
        node, done = stack.pop()
        key = id(node)
        if key in memo:
            continue
        if not done:
            stack.append((node, True))
            stack.extend((k, False) for k in _children(node) if id(k) not in memo)
            continue
        memo[key] = build(node, memo)
    return memo[id(root)]


def _lower_one(node: Node, memo: dict, props, F) -> Any:
    name = node[0]

    def c(i: int):
        return memo[id(node[i])]

    if name == "lit":
        value, spark_type = node[1], node[2]
        if isinstance(value, int) and not isinstance(value, bool):
            value = int(value)  # selector.javalang.Long is an int subclass py4j cannot send
        column = F.lit(value)
        return column.cast(spark_type) if spark_type else column
    if name == "prop":
        return F.try_element_at(props, F.lit(node[1]))
    if name == "isnull":
        return c(1).isNull()
    if name == "isnotnull":
        return c(1).isNotNull()
    if name == "not":
        return ~c(1)
    if name == "and":
        return c(1) & c(2)
    if name == "or":
        return c(1) | c(2)
    if name == "eq":
        return c(1) == c(2)
    if name == "ne":
        return c(1) != c(2)
    if name == "lt":
        return c(1) < c(2)
    if name == "le":
        return c(1) <= c(2)
    if name == "gt":
        return c(1) > c(2)
    if name == "ge":
        return c(1) >= c(2)
    if name == "eqns":
        return c(1).eqNullSafe(c(2))
    if name == "add":
        return c(1) + c(2)
    if name == "mul":
        return c(1) * c(2)
    if name == "case":
        branches, otherwise = node[1], node[2]
        column = None
        for cond, value in branches:
            cond_c, value_c = memo[id(cond)], memo[id(value)]
            column = F.when(cond_c, value_c) if column is None else column.when(cond_c, value_c)
        return column.otherwise(memo[id(otherwise)])
    if name == "coalesce":
        return F.coalesce(*(memo[id(a)] for a in node[1:]))
    if name == "try_cast":
        return c(1).try_cast(node[2])
    if name == "cast":
        return c(1).cast(node[2])
    if name == "rlike":
        return c(1).rlike(node[2])
    if name == "translate":
        return F.translate(c(1), node[2], node[3])
    if name == "contains":
        return c(1).contains(F.lit(node[2]))
    if name == "startswith":
        return c(1).startswith(F.lit(node[2]))
    if name == "endswith":
        return c(1).endswith(F.lit(node[2]))
    if name == "isin":
        return c(1).isin(list(node[2]))
    if name == "substr":
        return F.substring(c(1), node[2], node[3])
    if name == "octet_length":
        return F.octet_length(c(1))
    if name == "lower":
        return F.lower(c(1))
    if name == "table":
        # node = ("table", values, spark_type, index): values[index], 0-based.
        values, spark_type = node[1], node[2]
        array = F.array(*(F.lit(v).cast(spark_type) for v in values))
        return F.get(array, c(3))
    raise AssertionError(f"unknown IR op {name!r}")


# -- Spark SQL text ---------------------------------------------------------------------------

def _sql_string(value: str) -> str:
    """A literal Spark's parser reads back as exactly ``value``, as short as it can be.

    Plain (``'...'``) without a quote, a backslash or an unprintable character; raw (``r'...'``,
    no escapes at all) when backslashes are its only trouble, as in the regular expressions;
    otherwise hex bytes, immune to every quoting and escaping rule. The text is parsed for
    every column built from it, so its length is planning time.
    """
    if not value:
        return "''"
    if "'" not in value and value.isprintable():
        return f"r'{value}'" if "\\" in value else f"'{value}'"
    return f"CAST(X'{value.encode('utf-8').hex()}' AS STRING)"


def _sql_literal(value: Any, spark_type: str | None) -> str:
    """A literal of ``spark_type``: bare where Spark's parser gives that type itself (INT and
    DOUBLE literals that are not negative, BIGINT with ``L``), a folded cast otherwise (a
    leading minus sign parses as an operator on some literals, which can widen the type)."""
    if value is None:
        return f"CAST(NULL AS {spark_type.upper()})"
    if value is True or value is False:
        return "TRUE" if value else "FALSE"
    if isinstance(value, str):
        return _sql_string(value)
    if isinstance(value, float):
        if not math.isfinite(value):  # no SQL literal spells these; the cast is folded
            spelled = "NaN" if math.isnan(value) else ("-Infinity" if value < 0 else "Infinity")
            return f"CAST('{spelled}' AS {(spark_type or 'double').upper()})"
        if (spark_type or "double") == "double" and math.copysign(1.0, value) > 0:
            return f"{float(value)!r}D"
        return f"CAST({float(value)!r}D AS {(spark_type or 'double').upper()})"
    if spark_type == "bigint":
        return f"{int(value)}L"
    if (spark_type or "int") == "int" and 0 <= int(value) <= java.INT_MAX:
        return str(int(value))
    return f"CAST({int(value)} AS {(spark_type or 'int').upper()})"


_SQL_BINARY = {"and": "AND", "or": "OR", "eq": "=", "ne": "<>", "lt": "<", "le": "<=", "gt": ">",
               "ge": ">=", "eqns": "<=>", "add": "+", "mul": "*"}


def to_sql(root: Node, props_sql: str) -> str:
    """Spark SQL text of ``root`` (for ``F.expr``), ``props_sql`` being the map expression.

    One parse in the JVM instead of one Py4J call per node; shared nodes are
    written out each time they occur, like :func:`tree_size` counts them.
    """
    return _post_order(root, lambda node, memo: _sql_one(node, memo, props_sql))


def _sql_one(node: Node, memo: dict, props_sql: str) -> str:
    name = node[0]

    def c(i: int) -> str:
        return memo[id(node[i])]

    if name == "lit":
        return _sql_literal(node[1], node[2])
    if name == "prop":
        return f"try_element_at({props_sql}, {_sql_string(node[1])})"
    if name in _SQL_BINARY:
        return f"({c(1)} {_SQL_BINARY[name]} {c(2)})"
    if name == "isnull":
        return f"({c(1)} IS NULL)"
    if name == "isnotnull":
        return f"({c(1)} IS NOT NULL)"
    if name == "not":
        return f"(NOT {c(1)})"
    if name == "case":
        branches = " ".join(f"WHEN {memo[id(cond)]} THEN {memo[id(value)]}" for cond, value in node[1])
        return f"CASE {branches} ELSE {memo[id(node[2])]} END"
    if name == "coalesce":
        return f"coalesce({', '.join(memo[id(a)] for a in node[1:])})"
    if name == "try_cast":
        return f"try_cast({c(1)} AS {node[2].upper()})"
    if name == "cast":
        return f"CAST({c(1)} AS {node[2].upper()})"
    if name == "rlike":
        return f"({c(1)} RLIKE {_sql_string(node[2])})"
    if name == "translate":
        return f"translate({c(1)}, {_sql_string(node[2])}, {_sql_string(node[3])})"
    if name in ("contains", "startswith", "endswith"):
        return f"{name}({c(1)}, {_sql_string(node[2])})"
    if name == "isin":
        return f"({c(1)} IN ({', '.join(_sql_string(v) for v in node[2])}))"
    if name == "substr":
        return f"substring({c(1)}, {int(node[2])}, {int(node[3])})"
    if name == "octet_length":
        return f"octet_length({c(1)})"
    if name == "lower":
        return f"lower({c(1)})"
    if name == "table":
        values, spark_type = node[1], node[2]
        items = ", ".join(_sql_literal(v, spark_type) for v in values)
        return f"get(array({items}), {c(3)})"
    raise AssertionError(f"unknown IR op {name!r}")
