"""The data source's pending-work tables (``table`` = scheduled, transactions, dead_letters, pops): their
schema is cq.analyses.pending's columns, and the options that do not apply to them are refused by
name (docs/paths.md#pending). Their rows against the real broker: tests/broker/test_broker_lifecycle.py."""
from __future__ import annotations

import pytest

from cq.analyses.pending import COLUMNS
from pyspark_udfs._source import ReadOptions


@pytest.mark.parametrize("table", list(COLUMNS))
def test_schema_is_the_tables_columns(tmp_path, table):
    opts = ReadOptions.parse({"path": str(tmp_path), "table": table})
    assert [(f.name, f.dataType.simpleString()) for f in opts.schema().fields] == [
        (n, {"string": "string", "int": "int", "long": "bigint"}[t]) for n, t in COLUMNS[table]]


@pytest.mark.parametrize("extra", [{"topic": "T"}, {"group": "G", "tags": "*"}, {"decisions": "true"}])
def test_options_that_do_not_apply_are_refused_by_name(tmp_path, extra):
    with pytest.raises(ValueError, match="reads the broker's pending work of the whole store: option") as info:
        ReadOptions.parse({"path": str(tmp_path), "table": "scheduled", **extra})
    assert all(k in str(info.value) for k in extra)
