"""The data source's pushdowns of ``store_timestamp`` ranges and ``keys`` / ``uniq_key`` equality
(``pushdown=true``, docs/spark.md#pushdown): the planned ranges are the broker's search by store time and the
IndexFiles' answer (docs/find.md), the reader applies the conditions exactly, the rows equal those Spark's own
filter gives without pushdown, and the plan's description shows the pushed filters."""
from __future__ import annotations

import pytest
from helpers import DATA
from pyspark.sql.datasource import EqualTo, GreaterThan, GreaterThanOrEqual, In, LessThan, LessThanOrEqual

from cq.writer import StoreWriter
from cq.writer.index import write_index_files
from pyspark_udfs._source import ReadOptions
from pyspark_udfs.datasource import RocketMQPushdownReader

T0 = 1_700_000_000_000
TOPIC = "Orders"
N = 900


@pytest.fixture(scope="module")
def root(tmp_path_factory):
    """900 messages over 3 queues, stored 10 ms apart; keys k0..k6 (two keys on every 4th); the IndexFiles
    cover the first 800 records (the rest is found by the scan find falls back to)."""
    root = tmp_path_factory.mktemp("pushdown") / "broker-a"
    offsets = []
    with StoreWriter(root, commit_log_file_size=1 << 20, consume_queue_file_size=20 * 100) as w:
        for i in range(N):
            keys = [f"k{i % 7}"] + (["extra"] if i % 4 == 0 else [])
            r = w.append(TOPIC, b"x", queue_id=i % 3, tags="TagA", keys=keys, properties={"UNIQ_KEY": f"U{i}"},
                         store_timestamp=T0 + 10 * i)
            offsets.append(r.commit_log_offset)
    write_index_files(root, hash_slot_num=16, index_num=2000, up_to=offsets[800])
    return root


def planned(root, *filters) -> tuple[int, list]:
    opts = ReadOptions.parse({"path": str(root), "topic": TOPIC, "pushdown": "true"})
    reader = RocketMQPushdownReader(opts, opts.schema())
    left = list(reader.pushFilters(list(filters)))
    units = sum(s.end - s.start for p in reader.partitions() for s in p.slices)
    return units, left


@pytest.mark.parametrize(("filters", "want"), [
    ((GreaterThanOrEqual(("store_timestamp",), T0 + 1000), LessThan(("store_timestamp",), T0 + 2000)), 100),
    ((GreaterThan(("store_timestamp",), T0 + 1000), LessThanOrEqual(("store_timestamp",), T0 + 2000)), 100),
    ((EqualTo(("store_timestamp",), T0 + 4500),), 1),
    ((GreaterThanOrEqual(("store_timestamp",), T0 + 8950),), 5),
    ((LessThan(("store_timestamp",), T0),), 0),
])
def test_a_store_time_window_plans_the_units_the_search_finds(root, filters, want):
    units, left = planned(root, *filters)
    assert left == []   # taken over: the reader applies them exactly
    assert units == want


def test_keys_plan_the_units_the_index_and_the_scan_find(root):
    units, left = planned(root, EqualTo(("keys",), "k3"))
    assert left == [] and units == sum(1 for i in range(N) if i % 7 == 3)
    units, _ = planned(root, In(("keys",), ("k1", "k2 extra")))
    assert units == sum(1 for i in range(N) if i % 7 in (1, 2))   # candidates: every record holding k1 or k2
    units, _ = planned(root, EqualTo(("keys",), "k3"), GreaterThanOrEqual(("store_timestamp",), T0 + 4500))
    assert units == sum(1 for i in range(450, N) if i % 7 == 3)


def test_a_key_value_with_no_key_is_not_looked_up(root):
    units, left = planned(root, EqualTo(("keys",), ""))
    assert left == [] and units == N    # every unit read; the reader's exact test keeps none


def test_uniq_keys_plan_the_units_the_index_and_the_scan_find(root):
    units, left = planned(root, EqualTo(("uniq_key",), "U5"))
    assert left == [] and units == 1                       # one unit of 900
    # U850 lies past the last indexed record: found by the scan find falls back to
    units, left = planned(root, In(("uniq_key",), ("U1", "U850", "nope")))
    assert left == [] and units == 2
    units, _ = planned(root, EqualTo(("keys",), "k3"), EqualTo(("uniq_key",), "U10"))
    assert units == 1                                      # the condition with the fewer values is looked up
    units, _ = planned(root, EqualTo(("uniq_key",), "U10"), LessThan(("store_timestamp",), T0 + 50))
    assert units == 0                                      # U10 was stored at T0 + 100


@pytest.mark.parametrize("value", ["nope", ""])
def test_a_uniq_key_absent_from_the_store_plans_no_unit(root, value):
    units, left = planned(root, EqualTo(("uniq_key",), value))
    assert left == [] and units == 0    # "": a property is never empty (docs/formats.md#properties)


@pytest.mark.spark
@pytest.mark.parametrize("where", [
    f"store_timestamp >= {T0 + 1000} AND store_timestamp < {T0 + 2000}",
    f"store_timestamp = {T0 + 4500}",
    f"store_timestamp > {T0 + 8000}",
    "keys = 'k3'",
    "keys = 'k0 extra'",
    "keys IN ('k1', 'k5 extra', 'nope')",
    f"keys = 'k2' AND store_timestamp <= {T0 + 3000} AND queue_id = 1",
    "keys = ''",
    "uniq_key = 'U5'",
    "uniq_key IN ('U1', 'U850', 'nope')",
    "uniq_key = 'U10' AND keys = 'k3'",
    "uniq_key = 'nope'",
])
def test_rows_equal_those_without_pushdown_and_explain_shows_them(spark, root, where):
    def rows(pushdown: str) -> tuple[list, object]:
        df = (spark.read.format("rocketmq").option("topic", TOPIC).option("pushdown", pushdown).load(str(root))
              .where(where))
        return sorted((r.queue_id, r.queue_offset, r.keys, r.uniq_key, r.store_timestamp) for r in df.collect()), df

    want, _ = rows("false")
    got, df = rows("true")
    assert got == want
    assert (want == []) == (where in ("keys = ''", "uniq_key = 'nope'"))   # an absent uniq_key: no row
    # what df.explain(mode="formatted") prints: the scan's PushedFilters are what the reader took
    plan = df._sc._jvm.PythonSQLUtils.explainString(df._jdf.queryExecution(), "formatted")
    pushed = next(line for line in plan.splitlines() if line.startswith("PushedFilters:"))
    for column in ("store_timestamp", "keys", "uniq_key"):
        if column in where:
            assert f"({column}," in pushed, pushed
    condition = next((line for line in plan.splitlines() if line.startswith("Condition")), "")  # no Filter: ""
    assert f"{T0}" not in condition and "= k" not in condition and "= U" not in condition and " IN (" not in condition
    # (Spark's Filter no longer tests them)


#: Stores of tests/data, and one of two of them: ConsumeQueues narrowed through their IndexFiles, a BatchCQ,
#: compaction and RocksDB queues read whole and filtered (docs/spark.md#pushdown).
STORES = [["golden_store"], ["timer_store"], ["batch_store"], ["compaction_store"], ["rocksdb_store"],
          ["golden_store", "timer_store"]]


@pytest.mark.spark
@pytest.mark.parametrize("names", STORES, ids="+".join)
def test_uniq_key_rows_equal_those_without_pushdown_on_the_stores_of_tests_data(spark, names):
    roots = [str(DATA / n) for n in names]
    path = roots[0] if len(roots) == 1 else roots
    cols = "broker, topic, queue_id, queue_offset" if len(roots) > 1 else "topic, queue_id, queue_offset"
    every = spark.read.format("rocketmq").load(path)
    # the column is the record's UNIQ_KEY property, NULL where it has none
    assert every.where("NOT (uniq_key <=> properties['UNIQ_KEY'])").count() == 0
    present = sorted(r.uniq_key for r in every.where("uniq_key IS NOT NULL").select("uniq_key").distinct().collect())
    assert present, names
    where = f"uniq_key IN ('{present[0]}', '{present[-1]}', 'absent')"

    def rows(pushdown: str):
        df = spark.read.format("rocketmq").option("pushdown", pushdown).load(path).where(where)
        return sorted(tuple(r) for r in df.selectExpr(*cols.split(", "), "uniq_key").collect()), df

    want, _ = rows("false")
    got, df = rows("true")
    assert got == want and {r[-1] for r in want} == {present[0], present[-1]}
    plan = df._sc._jvm.PythonSQLUtils.explainString(df._jdf.queryExecution(), "formatted")
    assert "(uniq_key," in next(line for line in plan.splitlines() if line.startswith("PushedFilters:"))
    absent = spark.read.format("rocketmq").option("pushdown", "true").load(path).where("uniq_key = 'absent'")
    assert absent.count() == 0
