"""The ``rocketmq`` data source over a store whose broker ran the tiered store (docs/reading.md#tiered-storage):
with option ``tier`` it reads the ranges the broker serves from the tier there and gives what ``cq.Store.consume``
and the broker's consumers gave (tests/data/TIERED_STORE.md); without it the store is refused."""
from __future__ import annotations

import json
from contextlib import closing

import pytest
from helpers import DATA, tiered_cluster
from live_support import stream_to_the_end

import cq

pytestmark = pytest.mark.spark

STORE = str(DATA / "tiered_store")
TIER = str(DATA / "tiered_store" / "tier")
FACTS = json.loads((DATA / "tiered_store.json").read_text())
TOPIC = "TieredTopic"


def _read(spark, **options):
    reader = spark.read.format("rocketmq").option("topic", TOPIC)
    for name, value in options.items():
        reader = reader.option(name, value)
    return reader.load(STORE)


def test_without_its_tier_the_store_is_refused(spark):
    with pytest.raises(Exception, match="give the tier directory"):
        _read(spark).count()


def test_every_message_from_the_brokers_minimum(spark):
    rows = _read(spark, tier=TIER).select("queue_id", "queue_offset", "commit_log_offset").collect()
    got = sorted((r.queue_id, r.queue_offset) for r in rows)
    assert got == sorted((q, o) for q in (0, 1) for o in range(580))
    with closing(cq.Store(STORE, tier=TIER)) as store:
        # below the local minimum the records are the tier's (their offset is the flat CommitLog's)
        tier0 = store.tier_queue(TOPIC, 0).messages(0, 3)
    first = {(r.queue_id, r.queue_offset): r.commit_log_offset for r in rows}
    assert [first[0, o] for o in range(3)] == [m.commit_log_offset for m in tier0]


@pytest.mark.parametrize("group", ["GID_TIER_TAG", "GID_TIER_SQL", "GID_TIER_STAR", "GID_TIER_TAG_C"])
def test_a_groups_read_is_what_it_received(spark, group):
    g = FACTS["groups"][group]
    options = {"group": group, "tier": TIER}
    if g["type"] == "TAG":
        options["tags"] = g["expression"]
    rows = _read(spark, **options).selectExpr("queue_id", "queue_offset", "properties['UNIQ_KEY'] AS uniq").collect()
    got = {(r.queue_id, r.queue_offset): r.uniq for r in rows}
    assert len(got) == len(rows)
    assert got == {(q, o): u for q, o, u, _ in FACTS["received"][group]}


def test_a_read_the_tier_and_the_bitmaps_disagree_on_is_refused(spark):
    with pytest.raises(Exception, match="depends on its pull batches"):
        _read(spark, group="G", sql="TAGS IN ('TagB') OR a = 1", tier=TIER).count()


def test_a_stream_reads_the_tier_as_the_batch_source_does(spark, tmp_path):
    """``readStream`` with ``tier``, from the earliest offsets (the broker's minimums, the tier's), in micro-batches
    of 300 units: what the group received, each unit once."""
    out, ck = str(tmp_path / "out"), str(tmp_path / "ck")
    df = spark.readStream.format("rocketmq").option("topic", TOPIC).option("group", "GID_TIER_TAG") \
        .option("tags", "TagA || TagB").option("tier", TIER).option("startingOffsets", "earliest") \
        .option("maxUnitsPerTrigger", "300").load(STORE).selectExpr("queue_id", "queue_offset",
                                                                      "properties['UNIQ_KEY'] AS uniq")
    stream_to_the_end(df, out, ck)
    rows = spark.read.parquet(out).collect()
    got = {(r.queue_id, r.queue_offset): r.uniq for r in rows}
    assert len(got) == len(rows)
    assert got == {(q, o): u for q, o, u, _ in FACTS["received"]["GID_TIER_TAG"]}


@pytest.mark.parametrize("layer2", ["native", "python"])
def test_the_scan_job_counts_the_tier(spark, layer2):
    from pyspark_udfs.job import GroupScan, scan

    g = FACTS["groups"]["GID_TIER_SQL"]
    result = scan(spark, STORE, TOPIC, GroupScan("GID_TIER_SQL", sql=g["expression"], registered=True),
                  layer2=layer2, tier=TIER)
    assert result.units_scanned == 1160
    assert result.delivered == len(FACTS["received"]["GID_TIER_SQL"])


def test_several_tiered_stores_read_with_their_shared_tier(spark, tmp_path):
    """load([root_a, root_b]) with option tier: each broker's ranges below its local minimum read from its own
    flat files in the shared tier; each broker's rows are what its consumer received."""
    roots, tier = tiered_cluster(tmp_path)
    group = "GID_TIER_SQL"
    rows = (spark.read.format("rocketmq").option("topic", TOPIC).option("group", group).option("tier", str(tier))
            .load([str(r) for r in roots])
            .selectExpr("broker", "queue_id", "queue_offset", "properties['UNIQ_KEY'] AS uniq").collect())
    want = {(q, o): u for q, o, u, _ in FACTS["received"][group]}
    for broker in ("broker-a", "broker-b"):
        assert {(r.queue_id, r.queue_offset): r.uniq for r in rows if r.broker == broker} == want
    assert len(rows) == 2 * len(want)
    with pytest.raises(Exception, match="give the tier directory"):
        spark.read.format("rocketmq").option("topic", TOPIC).load([str(r) for r in roots]).count()


def test_cost_on_spark_tallies_the_tier_as_the_local_pass(spark):
    """filter_cost_spark with the tier: the ranges the broker serves from it tallied on the executors from its
    flat files, the report's counts those of filter_cost (which equal consume's)."""
    from cq.analyses.cost import CostGroup, filter_cost
    from pyspark_udfs.cost import filter_cost_spark

    groups = ["GID_TIER_SQL", CostGroup("GID_TIER_TAG", "TagA || TagB", "TAG", registered=False)]
    with closing(cq.Store(STORE, tier=TIER)) as store:
        local = filter_cost(store, TOPIC, groups, timing=False)
    on_spark = filter_cost_spark(spark, STORE, TOPIC, groups, timing=False, partition_units=200, tier=TIER)
    numbers = ("units", "passed_consume_queue", "bloom_tested", "bloom_false_positives", "delivered")
    assert [[getattr(g, k) for k in numbers] for g in on_spark.groups] == \
        [[getattr(g, k) for k in numbers] for g in local.groups]
    assert on_spark.group("GID_TIER_TAG").delivered == len(FACTS["received"]["GID_TIER_TAG"])
    assert (on_spark.units, on_spark.messages, on_spark.ext) == (local.units, local.messages, local.ext)


def test_find_on_spark_gives_finds_rows_for_a_tiered_store(spark):
    """find_spark with the tier: the data source reads the tier's ranges; the same rows as find, a tier's rows
    marked found_by "tier"."""
    from cq.analyses.search import find
    from pyspark_udfs.find import find_spark

    with closing(cq.Store(STORE, tier=TIER)) as store:
        every = {(m.queue_id, m.queue_offset): m for m in store.consume(TOPIC, "G", tags="*")}
        begin, end = every[0, 500].store_timestamp, every[0, 560].store_timestamp
        local = find(store, topic=TOPIC, between=(begin, end))
    on_spark = find_spark(STORE, spark=spark, topic=TOPIC, between=(begin, end), tier=TIER)
    assert [(r.queue_id, r.queue_offset, r.msg_id, r.found_by == "tier") for r in on_spark.rows] == \
        [(r.queue_id, r.queue_offset, r.msg_id, r.found_by == "tier") for r in local.rows]
    assert {r.found_by for r in on_spark.rows} == {"tier", "spark"}


def test_a_stream_over_two_tiered_brokers_reads_each_ones_tier(spark, tmp_path):
    """readStream over two tiered brokers sharing one tier (a glob), from the earliest offsets: each broker's
    rows what the group received, each unit once."""
    _roots, tier = tiered_cluster(tmp_path / "stores")
    out, ck = str(tmp_path / "out"), str(tmp_path / "ck")
    df = spark.readStream.format("rocketmq").option("topic", TOPIC).option("group", "GID_TIER_TAG") \
        .option("tags", "TagA || TagB").option("tier", str(tier)).option("startingOffsets", "earliest") \
        .option("maxUnitsPerTrigger", "500").load(str(tmp_path / "stores" / "broker-*")) \
        .selectExpr("broker", "queue_id", "queue_offset", "properties['UNIQ_KEY'] AS uniq")
    stream_to_the_end(df, out, ck)
    rows = spark.read.parquet(out).collect()
    want = {(q, o): u for q, o, u, _ in FACTS["received"]["GID_TIER_TAG"]}
    assert len(rows) == 2 * len(want)
    for broker in ("broker-a", "broker-b"):
        assert {(r.queue_id, r.queue_offset): r.uniq for r in rows if r.broker == broker} == want
