"""The streaming source over several stores, a cluster's brokers (docs/reading.md#clusters,
docs/live.md#streams): offsets per broker, one cut per broker, every unit once across a restart."""
from __future__ import annotations

import json
import re
import threading
from pathlib import Path

import pytest
from cluster_stores import BROKERS, write_brokers
from live_support import expire_commit_log, expire_consume_queues, stream_to_the_end, stream_until_stopped

import cq
from cq.writer.sample import SAMPLE_GROUPS, SAMPLE_TOPICS
from cq.writer.writer import StoreWriter

pytestmark = pytest.mark.spark

TOPIC = SAMPLE_TOPICS[0]
GROUP = SAMPLE_GROUPS[0][0]  # registered on both brokers: each broker's own registration filters
KEY = ["broker", "queue_id", "queue_offset"]


@pytest.fixture(scope="module")
def brokers(tmp_path_factory):
    return [str(r) for r in write_brokers(tmp_path_factory.mktemp("stream-cluster"), messages=300)]


def _source(roots, **options):
    from pyspark_udfs.datasource import RocketMQDataSource

    return RocketMQDataSource({"paths": json.dumps([str(r) for r in roots]), "topic": TOPIC, **options})


def _reader(roots, **options):
    src = _source(roots, **options)
    return src.streamReader(src.schema())


def _stream(spark, roots, **options):
    """``readStream`` over ``roots``: a glob pattern, or a list as option ``paths`` (a JSON array; a
    stream's ``load()`` takes one string)."""
    reader = spark.readStream.format("rocketmq").option("topic", TOPIC)
    for k, v in options.items():
        reader = reader.option(k, v)
    if isinstance(roots, str):
        return reader.load(roots)
    return reader.option("paths", json.dumps([str(r) for r in roots])).load()


def _batch(spark, roots, **options) -> list[tuple]:
    reader = spark.read.format("rocketmq").option("topic", TOPIC)
    for k, v in options.items():
        reader = reader.option(k, v)
    return sorted(tuple(r) for r in reader.load([str(r) for r in roots]).select(*KEY).collect())


def test_a_stream_over_two_brokers_gives_the_batch_reads_rows_each_once(spark, brokers, tmp_path):
    out, ck = str(tmp_path / "out"), str(tmp_path / "ck")
    pattern = str(Path(brokers[0]).parent.parent / "*" / "store")
    q = (_stream(spark, pattern, group=GROUP, startingOffsets="earliest", maxUnitsPerTrigger="250")
         .writeStream.format("parquet").option("checkpointLocation", ck).trigger(availableNow=True).start(out))
    try:
        assert q.awaitTermination(120)
    finally:
        q.stop()
    assert q.exception() is None
    assert len([p for p in q.recentProgress if p["numInputRows"] > 0]) >= 2  # the budget spans the brokers
    df = spark.read.parquet(out)
    assert df.columns[0] == "broker"
    got = sorted(tuple(r) for r in df.select(*KEY).collect())
    want = _batch(spark, brokers, group=GROUP)
    assert got == want and len(set(got)) == len(got)  # every unit once, with its broker
    assert {b for b, _, _ in got} == set(BROKERS)
    # the offsets Spark checkpointed are per broker, in the JSON startingOffsets takes
    last = json.loads(q.lastProgress["sources"][0]["endOffset"])
    cluster = cq.Cluster(brokers)
    ends = {b: {TOPIC: {str(q_): hi for _, q_, _, hi in cut.queues}} for b, cut in cluster.cut(TOPIC).brokers}
    cluster.close()
    assert last == {"brokers": ends}


def test_a_restart_from_the_checkpoint_while_one_broker_appends_is_exactly_once(spark, tmp_path):
    roots = write_brokers(tmp_path, messages=100)
    out, ck = str(tmp_path / "out"), str(tmp_path / "ck")
    options = {"startingOffsets": "earliest", "maxUnitsPerTrigger": "40"}
    writer = StoreWriter(roots[0], append=True, commit_log_file_size=1 << 20, consume_queue_file_size=20_000,
                         ext_file_size=1 << 16, enable_ext=True)
    stop = threading.Event()

    def append() -> None:  # broker east takes messages while the stream reads, 20 every 0.2 s
        for i in range(200):
            writer.append(TOPIC, b"late", queue_id=i % 4, tags="TagL", properties={"seq": str(i)})
            if i % 20 == 19:
                writer.flush()
                stop.wait(0.2)  # the rest at once when the first run has stopped
        writer.flush()

    thread = threading.Thread(target=append)
    thread.start()
    try:  # stopped mid-run, while east takes messages
        stream_until_stopped(_stream(spark, roots, **options).select(*KEY, "tags"), out, ck, every="100 milliseconds")
        first = spark.read.parquet(out).count()
    finally:
        stop.set()
        thread.join()
        writer.close()
    options["maxUnitsPerTrigger"] = "100000"  # restarted from the checkpoint: on to the end
    stream_to_the_end(_stream(spark, roots, **options).select(*KEY, "tags"), out, ck)
    rows = spark.read.parquet(out).collect()
    got = sorted((r["broker"], r["queue_id"], r["queue_offset"]) for r in rows)
    assert len(got) == len(set(got)) and 0 < first < len(got)  # no duplicates; both runs wrote
    assert got == _batch(spark, roots)  # no gaps: the union is the batch read of every broker
    late = {r["broker"] for r in rows if r["tags"] == "TagL"}
    assert late == {"east"} and sum(r["tags"] == "TagL" for r in rows) == 200


def test_a_file_expired_on_one_broker_is_said_for_that_broker_only(tmp_path, caplog):
    roots = write_brokers(tmp_path, messages=300, commit_log_file_size=16 << 10, consume_queue_file_size=20 * 20)
    reader = _reader(roots, startingOffsets="earliest")
    try:
        start = reader.initialOffset()
        end = reader.latestOffset(start, reader.getDefaultReadLimit())
        expire_consume_queues(roots[0], TOPIC, expire_commit_log(roots[0], 2))  # east expires its oldest files before the micro-batch reads them
        with caplog.at_level("WARNING", logger="rmqfilter.streaming"):
            parts = reader.partitions(start, end)
        said = [r.getMessage() for r in caplog.records if r.name == "rmqfilter.streaming"]
        east = cq.Store(roots[0])
        mins = {q: lo for _, q, lo, _ in east.cut(TOPIC).queues}
        assert said and all("on broker 'east' lost" in t and "expired by the broker" in t for t in said)
        assert sum(int(re.search(r"(\d+) unit\(s\) of queue", t).group(1)) for t in said) == sum(mins.values())
        rows: dict[str, int] = {}
        for p in parts:
            for b in reader.read(p):
                for name in b.column(0).to_pylist():
                    rows[name] = rows.get(name, 0) + 1
        west = cq.Store(roots[1])
        assert rows == {"east": sum(1 for _ in east.consume(TOPIC, "G", tags="*")),  # what is left, from the minimum
                        "west": sum(1 for _ in west.consume(TOPIC, "G", tags="*"))}  # all of it
        east.close()
        west.close()
    finally:
        reader.stop()


@pytest.mark.parametrize(("offsets", "message"), [
    ('{"SampleTopic": {"0": 0}}', 'over several stores (brokers east, west) expected a JSON object {"brokers": '),
    ('{"brokers": {"north": {}}}', "no broker 'north' among the stores (brokers: east, west)"),
    ('{"brokers": {"east": {"SampleTopic": {"x": 1}}}}',
     "broker 'east': queue id 'x' of topic 'SampleTopic' is not a non-negative integer"),
    ('{"brokers": {"west": [1]}}', "broker 'west': expected a JSON object"),
    ('{"brokers": {"east": {"SampleTopic": {"9": 0}}}}', "broker 'east': queue SampleTopic/9 does not exist"),
    ('{"brokers": {"west": {"SampleTopic": {"0": 10000}}}}',
     "broker 'west': offset 10000 of queue SampleTopic/0 is outside"),
])
def test_bad_offsets_over_several_stores_name_the_option_and_the_part(brokers, offsets, message):
    with pytest.raises(ValueError, match="startingOffsets") as err:
        _reader(brokers, startingOffsets=offsets).initialOffset()
    assert message in str(err.value)


def test_offsets_per_broker_start_each_broker_where_given_and_one_store_keeps_its_form(brokers):
    given = {"brokers": {"west": {TOPIC: {"1": 3}}}}
    reader = _reader(brokers, startingOffsets=json.dumps(given))
    start = reader.initialOffset()
    reader.stop()
    assert start["brokers"]["west"][TOPIC] == {"0": 0, "1": 3, "2": 0, "3": 0}
    assert start["brokers"]["east"][TOPIC] == {"0": 0, "1": 0, "2": 0, "3": 0}  # not named: its minimum
    from pyspark_udfs.datasource import RocketMQDataSource

    one = RocketMQDataSource({"path": brokers[1], "topic": TOPIC, "startingOffsets": json.dumps({TOPIC: {"1": 3}})})
    reader = one.streamReader(one.schema())
    assert reader.initialOffset() == start["brokers"]["west"]  # existing checkpoints' form, unchanged
    reader.stop()


def test_committed_and_latest_start_each_broker_from_its_own_files(brokers):
    stores = {b: cq.Store(r) for b, r in zip(BROKERS, brokers)}
    committed = {b: {TOPIC: {str(q): off for q, off in s.committed_offsets(GROUP, TOPIC).items()}}
                 for b, s in stores.items()}
    ends = {b: {TOPIC: {str(q): hi for _, q, _, hi in s.cut(TOPIC).queues}} for b, s in stores.items()}
    for s in stores.values():
        s.close()
    assert committed["east"] != committed["west"] and all(committed[b][TOPIC] for b in BROKERS)
    for starting, want in [("committed", committed), ("latest", ends)]:
        reader = _reader(brokers, group=GROUP, startingOffsets=starting)
        assert reader.initialOffset() == {"brokers": want}, starting
        reader.stop()
