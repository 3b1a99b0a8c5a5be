"""The ``rocketmq`` data source and ``rmqfilter scan`` over stores in object storage
(docs/object-storage.md#spark), read from a real S3 server (s3proxy on loopback): every table read from
the bucket equals the same table read from the local copy; the stream source refuses a bucket; a missing
bucket or prefix and denied credentials fail naming the URI, with no secret in any output."""
from __future__ import annotations

import contextlib
import dataclasses
import json
import pickle
from pathlib import Path

import pytest
from helpers import DATA

import cq
import pyspark_udfs
from cq.writer.sample import SAMPLE_GROUPS, SAMPLE_TOPICS, generate_sample_store
from pyspark_udfs._source import ReadOptions
from pyspark_udfs.datasource import RocketMQReader

pytestmark = [pytest.mark.spark, pytest.mark.objectstore]

ROOT = Path(__file__).resolve().parents[2]


@contextlib.contextmanager
def _worker_env(spark, **env):
    """The shared session's Python workers given ``env`` the way a cluster gives executors theirs, as
    ``spark.executorEnv.*`` does (the context's environment), the data source registered again so that
    new workers start with it; the environment as it was afterwards."""
    environment = spark.sparkContext.environment
    saved = {k: environment.get(k) for k in env}
    environment.update(env)
    pyspark_udfs.register(spark)
    try:
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                environment.pop(k, None)
            else:
                environment[k] = v
        pyspark_udfs.register(spark)


@pytest.fixture(scope="module")
def bucket(spark, s3_server):
    """The S3 server, its credentials given to the shared session's Python workers for the module (the
    session may have started before the server set them in this process's environment)."""
    with _worker_env(spark, **s3_server.env()):
        yield s3_server


def _opts(bucket) -> dict[str, str]:
    return {"endpoint": bucket.endpoint, "region": "us-east-1"}


def _plain(value):
    """A row's value comparable and sortable: maps as sorted items, rows as tuples."""
    if isinstance(value, dict):
        return tuple(sorted((k, _plain(v)) for k, v in value.items()))
    if isinstance(value, (list, tuple)):
        return tuple(_plain(v) for v in value)
    if isinstance(value, bytearray):
        return bytes(value)
    return value


def _table(spark, store, options: dict, schema: str | None = None):
    r = spark.read.format("rocketmq").options(**options)
    if schema is not None:
        r = r.schema(schema)
    df = r.load(store)
    return df.schema, sorted((_plain(tuple(row)) for row in df.collect()), key=repr)


def _same_tables(spark, bucket, local, uri, reads: list[dict]) -> int:
    """Each read (data source options) from the bucket equals it from the local copy; returns the rows
    compared."""
    compared = 0
    for options in reads:
        want = _table(spark, local, options)
        got = _table(spark, uri, {**options, **_opts(bucket)})
        assert got == want, options
        compared += len(want[1])
    return compared


def _reads(topic: str, group: str, sql: str, tags: str) -> list[dict]:
    return [
        {},
        {"table": "consumequeue"},
        {"topic": topic, "group": group, "sql": sql, "decisions": "true"},
        {"topic": topic, "group": group, "sql": sql},
        {"topic": topic, "group": group, "sql": sql, "layer2": "spark", "table": "consumequeue",
         "decisions": "true"},
        {"topic": topic, "group": group, "tags": tags, "body": "stored"},
        *({"table": t} for t in ("scheduled", "transactions", "dead_letters", "pops")),
    ]


@pytest.mark.parametrize(("store", "topic", "sql"), [
    ("golden_store", "GoldenFilterTopic", "TAGS = 'TagA' OR color IN ('red', 'grün')"),
    ("dledger_store", "GoldenFilterTopic", "a > 5"),
    ("rocksdb_store", "ModesTopic", "a > 5"),
])
def test_every_table_from_the_bucket_equals_the_local_read(spark, bucket, store, topic, sql):
    uri = bucket.upload(DATA / store, "spark", store)
    rows = _same_tables(spark, bucket, str(DATA / store), uri, _reads(topic, "G", sql, "TagA || TagB"))
    assert rows > 0


def test_a_registered_group_and_several_stores_from_the_bucket(spark, bucket, tmp_path):
    """``load([uri, ...])``: a broker column, each broker's registration looked up from the bucket."""
    for name, seed in (("broker-a", 5), ("broker-b", 6)):
        generate_sample_store(tmp_path / name, messages=1500, seed=seed, commit_log_file_size=1 << 20,
                              ext_file_size=1 << 16, consume_queue_file_size=20_000)
    local = [str(tmp_path / "broker-a"), str(tmp_path / "broker-b")]
    uris = [bucket.upload(Path(p), "severalstores", Path(p).name) for p in local]
    group, topic = SAMPLE_GROUPS[0][0], SAMPLE_TOPICS[0]
    rows = _same_tables(spark, bucket, local, uris, [
        {}, {"table": "consumequeue"},
        {"topic": topic, "group": group, "decisions": "true"},
        {"topic": topic, "group": group, "from_committed": "true"},
    ])
    assert rows > 0
    assert {r.broker for r in spark.read.format("rocketmq").options(**_opts(bucket)).load(uris)
            .select("broker").distinct().collect()} == {"broker-a", "broker-b"}
    # a glob over the bucket names the same stores (docs/object-storage.md#naming-a-store)
    assert _table(spark, "s3://severalstores/broker-*", _opts(bucket)) == _table(spark, uris, _opts(bucket))


def _cached_cluster_run() -> list[Path] | None:
    runs = sorted(p for p in (ROOT / "build" / "broker-runs").glob("cluster-*")
                  if p.is_dir() and not p.name.endswith(".partial") and (p / "broker.json").exists())
    return sorted((runs[-1] / "stores").iterdir()) if runs else None


def test_the_real_brokers_cluster_from_the_bucket(spark, bucket):
    """The harness's ``cluster`` scenario: the real broker's two stores, read as one from the bucket."""
    local = _cached_cluster_run()
    if local is None:
        pytest.skip("no cached run of the cluster scenario in build/broker-runs")
    uris = [bucket.upload(root, "sparkcluster", root.name) for root in local]
    with contextlib.closing(cq.Cluster(local)) as cluster:
        topics = [t for t in cluster.topics() if not t.startswith(("rmq_sys", "%", "SCHEDULE", "RMQ_SYS", "TBW"))]
    rows = _same_tables(spark, bucket, [str(p) for p in local], uris, [
        {}, {"table": "consumequeue"}, {"topic": topics[0], "group": "G", "tags": "*", "decisions": "true"},
    ])
    assert rows > 0
    for root, uri in zip(local, uris):  # the pending tables read one store each
        _same_tables(spark, bucket, str(root), uri,
                     [{"table": t} for t in ("scheduled", "transactions", "dead_letters", "pops")])


def test_the_trace_table_from_the_bucket(spark, bucket):
    """The harness's ``trace`` scenario's store (the clients' trace records), when a run is cached."""
    runs = sorted(p for p in (ROOT / "build" / "broker-runs").glob("trace-*")
                  if p.is_dir() and not p.name.endswith(".partial") and (p / "broker.json").exists())
    if not runs:
        pytest.skip("no cached run of the trace scenario in build/broker-runs")
    root = runs[-1] / "stores" / "broker-a"
    uri = bucket.upload(root, "sparktrace", "broker-a")
    assert _same_tables(spark, bucket, str(root), uri, [{"table": "trace"}]) > 0


def test_the_plan_carries_no_credential(spark, bucket):
    """Options, partitions and the query plan hold the URI and the endpoint, never a key."""
    uri = bucket.upload(DATA / "golden_store", "plan", "golden")
    options = ReadOptions.parse({"path": uri, "group": "G", "sql": "a > 5", **_opts(bucket)})
    assert options.path == uri and dict(options.object_options) == _opts(bucket)
    reader = RocketMQReader(options, options.schema())
    parts = reader.partitions()
    assert parts and all(s.commit_log_end is not None for p in parts for s in p.slices)
    df = spark.read.format("rocketmq").options(path=uri, **_opts(bucket)).load()
    plan = df._jdf.queryExecution().toString()
    for blob in (pickle.dumps(options), pickle.dumps(parts), pickle.dumps(reader), plan.encode(), repr(options).encode()):
        assert bucket.secret_key.encode() not in blob
        assert bucket.access_key.encode() not in blob


def test_a_task_reads_the_plans_listing_and_cut(bucket, monkeypatch):
    """Each slice carries the listing its plan's cut was taken from; a task opens its Store at that listing
    with the plan's CommitLog end: no listing and no recovery walk of its own (docs/object-storage.md#spark),
    and the rows are the local read's. Replayed in this process, as a Python worker runs it."""
    from cq.readers.commitlog import CommitLog
    from pyspark_udfs import _reader

    uri = bucket.upload(DATA / "golden_store", "tasklisting", "golden")
    read = {"group": "G", "sql": "a > 5"}
    options = ReadOptions.parse({"path": uri, **read, **_opts(bucket)})
    reader = RocketMQReader(options, options.schema())
    parts = reader.partitions()
    slices = [s for p in parts for s in p.slices]
    assert slices and all(s.listing == cq.ObjectStore(uri, **_opts(bucket)).listing() for s in slices)
    assert "listing" not in repr(slices[0])

    def walked(self, *args, **kwargs):
        raise AssertionError("a task walked the CommitLog")

    monkeypatch.setattr(CommitLog, "_recover", walked)
    _reader._BUCKETS.clear()
    try:
        rows = sum(batch.num_rows for p in parts for batch in reader.read(p))
        stores = list(_reader._BUCKETS.values())
        assert len(stores) == 1 and "list" not in stores[0].source.stats()
        assert stores[0].commit_log.max_offset == slices[0].commit_log_end
    finally:
        for store in _reader._BUCKETS.values():
            store.close()
        _reader._BUCKETS.clear()
    monkeypatch.undo()
    local_options = ReadOptions.parse({"path": str(DATA / "golden_store"), **read})
    local = RocketMQReader(local_options, local_options.schema())
    assert rows == sum(batch.num_rows for p in local.partitions() for batch in local.read(p)) > 0


def _task_requests(reader, parts) -> tuple[int, dict]:
    """Rows and requests by kind of the tasks reading ``parts``, replayed in this process as one Python
    worker runs them (its Stores of the bucket, closed after)."""
    from pyspark_udfs import _reader

    _reader._BUCKETS.clear()
    try:
        rows = sum(batch.num_rows for p in parts for batch in reader.read(p))
        stats: dict[str, tuple[int, int]] = {}
        for store in _reader._BUCKETS.values():
            for kind, (r, b) in store.source.stats().items():
                stats[kind] = (stats.get(kind, (0, 0))[0] + r, stats.get(kind, (0, 0))[1] + b)
        return rows, stats
    finally:
        for store in _reader._BUCKETS.values():
            store.close()
        _reader._BUCKETS.clear()


def test_a_task_takes_the_objects_its_plan_fetched(s3_server, tmp_path):
    """The plan carries what it fetched that its tasks would fetch again (docs/object-storage.md#spark): the
    small objects (``config/*.json``, ``checkpoint``, IndexFiles) and each slice's ConsumeQueue objects. A
    task then requests only its records (and the ext objects a filter consults): no config object, no
    ConsumeQueue object; without them (a slice made by hand) it fetches both. The rows are the same."""
    root = tmp_path / "store"
    topic = generate_sample_store(root, messages=2000, seed=3, commit_log_file_size=1 << 18).main_topic
    uri = s3_server.upload(root, "carried", "broker-a")
    for read in ({"topic": topic}, {"topic": topic, "group": "GID_RED_CHEAP", "sql": "color = 'red'"}):
        options = ReadOptions.parse({"path": uri, **read, "endpoint": s3_server.endpoint, "region": "us-east-1"})
        reader = RocketMQReader(options, options.schema())
        parts = reader.partitions()
        slices = [s for p in parts for s in p.slices]
        assert slices and all(s.carried for s in slices) and "carried" not in repr(slices[0])
        carried = {key for s in slices for key, _ in s.carried}
        assert any(k.startswith("config/") for k in carried) and any(k.startswith("consumequeue/") for k in carried)
        rows, stats = _task_requests(reader, parts)
        assert not set(stats) & {"config", "checkpoint", "index", "ConsumeQueue", "ConsumeQueueTail", "list"}, stats
        assert stats["CommitLog"][0] > 0
        bare = [type(p)(tuple(dataclasses.replace(s, carried=None) for s in p.slices)) for p in parts]
        again, fetched = _task_requests(reader, bare)
        assert again == rows > 0
        assert fetched["config"][0] >= 1 and fetched["ConsumeQueue"][0] >= len({(s.topic, s.queue_id) for s in slices})
    local_options = ReadOptions.parse({"path": str(root), **read})
    local = RocketMQReader(local_options, local_options.schema())
    assert rows == sum(batch.num_rows for p in local.partitions() for batch in local.read(p))


def _sample_in_bucket(s3_server, tmp_path, bucket: str, messages: int, seed: int, log_file_size: int):
    """A sample store written under ``tmp_path`` and uploaded to ``bucket``: ``(root, main topic, URI)``."""
    root = tmp_path / "store"
    topic = generate_sample_store(root, messages=messages, seed=seed, commit_log_file_size=log_file_size).main_topic
    return root, topic, s3_server.upload(root, bucket, "broker-a")


def _full_and_group_reads(topic: str) -> tuple[dict, ...]:
    """A topic's full read and a SQL92 group's read of it."""
    return {"topic": topic}, {"topic": topic, "group": "GID_RED_CHEAP", "sql": "color = 'red'"}


def _bucket_reader(s3_server, uri: str, read: dict) -> RocketMQReader:
    """The data source's reader of ``uri`` with the options ``read``, from the test server."""
    options = ReadOptions.parse({"path": uri, **read, "endpoint": s3_server.endpoint, "region": "us-east-1"})
    return RocketMQReader(options, options.schema())


def test_a_bucket_read_is_cut_into_stretches_of_the_commit_log(s3_server, tmp_path):
    """A read of a store in object storage packs its partitions by CommitLog stretch, each holding every
    queue's units whose records lie there (docs/spark.md#partitions): the tasks, each in its own worker,
    together fetch the log about once, not once per task for their queues' records, which lie all over it.
    Every unit is read once, and the rows are the local read's."""
    root, topic, uri = _sample_in_bucket(s3_server, tmp_path, "stretches", 6000, 5, 1 << 18)
    for read in _full_and_group_reads(topic):
        reader = _bucket_reader(s3_server, uri, {**read, "partition_units": "1000"})
        parts = reader.partitions()
        assert len(parts) >= 3
        units = sorted((s.queue_id, o) for p in parts for s in p.slices for o in range(s.start, s.end))
        local_options = ReadOptions.parse({"path": str(root), **read, "partition_units": "1000"})
        local = RocketMQReader(local_options, local_options.schema())
        local_parts = local.partitions()
        assert units == sorted((s.queue_id, o) for p in local_parts for s in p.slices for o in range(s.start, s.end))
        rows, together = _task_requests(reader, parts)
        apart = [_task_requests(reader, [p]) for p in parts]  # each task in a worker of its own
        assert sum(n for n, _ in apart) == rows == sum(b.num_rows for p in local_parts for b in local.read(p)) > 0
        fetched = sum(stats["CommitLog"][1] for _, stats in apart if "CommitLog" in stats)
        assert fetched <= 1.25 * together["CommitLog"][1], (fetched, together["CommitLog"])


def test_a_task_fetches_its_slices_units_not_its_queues_objects(s3_server, tmp_path):
    """A plan of a store in a bucket hands each slice its queue's bounds (docs/object-storage.md#spark): a
    task, each in a worker of its own, fetches the ConsumeQueue units of its slices, exactly their bytes,
    not its queues' objects (a task of a store packed by stretch reads every queue); without the bounds it
    fetches the objects. The rows are the local read's."""
    root, topic, uri = _sample_in_bucket(s3_server, tmp_path, "windows", 20000, 6, 1 << 20)
    for read in _full_and_group_reads(topic):
        reader = _bucket_reader(s3_server, uri, {**read, "partition_units": "3000"})
        parts = [type(p)(tuple(dataclasses.replace(s, carried=None) for s in p.slices)) for p in reader.partitions()]
        assert len(parts) >= 3 and all(s.queue_bounds for p in parts for s in p.slices)
        apart = [_task_requests(reader, [p]) for p in parts]
        for part, (_, stats) in zip(parts, apart):
            units = sum(s.end - s.start for s in part.slices)
            assert stats["ConsumeQueue"][1] == units * cq.format.CQ_STORE_UNIT_SIZE, stats
        whole = [type(p)(tuple(dataclasses.replace(s, queue_bounds=None) for s in p.slices)) for p in parts]
        before = [_task_requests(reader, [p]) for p in whole]
        assert all(s["ConsumeQueue"][1] > 2 * a["ConsumeQueue"][1] for (_, s), (_, a) in zip(before, apart))
        local_options = ReadOptions.parse({"path": str(root), **read})
        local = RocketMQReader(local_options, local_options.schema())
        assert (sum(n for n, _ in apart) == sum(n for n, _ in before)
                == sum(b.num_rows for p in local.partitions() for b in local.read(p)) > 0)


def test_a_worker_holds_no_records_of_a_task_it_ran(s3_server, tmp_path):
    """A worker keeps its Store of the bucket for the query's other tasks; each task gives back the
    CommitLog records it fetched when it ends (docs/object-storage.md#spark), so the worker's memory does
    not grow with the log it reads. The batches a task returned are copies: still the local rows."""
    import pyarrow as pa

    from pyspark_udfs import _reader

    root = tmp_path / "store"
    topic = generate_sample_store(root, messages=4000, seed=8, commit_log_file_size=1 << 18).main_topic
    uri = s3_server.upload(root, "released", "broker-a")
    read = {"topic": topic, "partition_units": "1000"}
    options = ReadOptions.parse({"path": uri, **read, "endpoint": s3_server.endpoint, "region": "us-east-1"})
    reader = RocketMQReader(options, options.schema())
    parts = reader.partitions()
    assert len(parts) >= 2
    _reader._BUCKETS.clear()
    batches = []
    try:
        for part in parts:  # one worker runs every task, one after the other
            batches += reader.read(part)
            (store,) = _reader._BUCKETS.values()
            assert store.source.stats()["CommitLog"][1] > 0 and store.commit_log.held_bytes == 0
    finally:
        for store in _reader._BUCKETS.values():
            store.close()
        _reader._BUCKETS.clear()
    local_options = ReadOptions.parse({"path": str(root), **read})
    local = RocketMQReader(local_options, local_options.schema())

    def rows(bs):
        return sorted(pa.Table.from_batches(bs).to_pylist(), key=lambda r: (r["queue_id"], r["queue_offset"]))

    assert rows(batches) == rows([b for p in local.partitions() for b in local.read(p)])


def test_a_rare_tag_fetches_its_records_not_the_whole_log(s3_server, tmp_path):
    """From a bucket, a group's task fetches the records its layer 1 passes (docs/object-storage.md#costs),
    as the broker reads only those: a tag on one message in 500 fetches a few ranges, not every record of
    its queues. The rows are the local read's."""
    from cq.writer.writer import StoreWriter

    root = tmp_path / "store"
    with StoreWriter(root, commit_log_file_size=1 << 21) as writer:
        for i in range(2000):
            writer.append("Sparse", b"x" * 4000, queue_id=i % 2, tags="Rare" if i % 500 == 7 else "Bulk")
    uri = s3_server.upload(root, "raretag", "broker-a")
    fetched, rows = {}, {}
    for name, read in (("all", {}), ("rare", {"group": "G", "tags": "Rare"})):
        options = ReadOptions.parse({"path": uri, "topic": "Sparse", **read,
                                     "endpoint": s3_server.endpoint, "region": "us-east-1"})
        reader = RocketMQReader(options, options.schema())
        rows[name], stats = _task_requests(reader, reader.partitions())
        fetched[name] = stats.get("CommitLog", (0, 0))[1]
        local_options = ReadOptions.parse({"path": str(root), "topic": "Sparse", **read})
        local = RocketMQReader(local_options, local_options.schema())
        assert rows[name] == sum(b.num_rows for p in local.partitions() for b in local.read(p))
    assert rows == {"all": 2000, "rare": 4}
    assert 0 < fetched["rare"] < fetched["all"] / 10, fetched


def test_options_endpoint_and_region_are_for_a_bucket(spark):
    with pytest.raises(Exception, match="for a store in object storage"):
        spark.read.format("rocketmq").option("endpoint", "http://127.0.0.1:1").load(str(DATA / "golden_store"))


def test_the_stream_source_refuses_a_snapshot_naming_the_uri(spark, bucket, tmp_path):
    uri = bucket.upload(DATA / "golden_store", "stream", "golden")
    with pytest.raises(Exception, match="snapshot") as info:
        q = (spark.readStream.format("rocketmq").options(**_opts(bucket)).load(uri).writeStream.format("noop")
             .option("checkpointLocation", str(tmp_path / "ck")).start())
        try:
            q.awaitTermination(60)
        finally:
            q.stop()
    assert uri in str(info.value) and "object-storage.md#a-snapshot" in str(info.value)


def test_missing_bucket_and_prefix_fail_at_load_naming_the_uri(spark, bucket):
    bucket.upload(DATA / "golden_store", "present", "golden")
    for uri, why in (("s3://no-such-bucket/x/broker-a", "bucket does not exist"),
                     ("s3://present/elsewhere", "no store under this prefix")):
        with pytest.raises(Exception, match=why) as info:
            spark.read.format("rocketmq").options(**_opts(bucket)).load(uri).count()
        assert uri in str(info.value)
        assert bucket.secret_key not in str(info.value)
    with pytest.raises(Exception, match="no store under this prefix") as info:
        spark.read.format("rocketmq").options(**_opts(bucket)).load(
            ["s3://present/golden", "s3://present/elsewhere"]).count()
    assert "s3://present/elsewhere" in str(info.value)


def test_denied_credentials_fail_naming_the_uri_and_no_secret(spark, bucket, capsys):
    """Wrong credentials where the data source runs: load() (the listing planning takes) fails naming
    the URI, and so does a task whose worker's own filesystem is denied; no secret in any output."""
    uri = bucket.upload(DATA / "golden_store", "denied", "golden")
    wrong = "wrong-" + bucket.secret_key[::-1]
    with _worker_env(spark, AWS_SECRET_ACCESS_KEY=wrong), pytest.raises(Exception, match="access denied") as info:
        spark.read.format("rocketmq").options(**_opts(bucket)).load(uri).count()
    text = str(info.value)
    assert uri in text and wrong not in text and bucket.secret_key not in text
    out = capsys.readouterr()
    assert wrong not in out.out + out.err and bucket.secret_key not in out.out + out.err


def test_a_task_denied_by_its_own_filesystem_names_the_uri(bucket, monkeypatch):
    """The executor's side, in this process: planned with the right key, a task whose environment holds
    a wrong one opens its own filesystem and is denied, naming the URI, no secret."""
    from pyspark_udfs import _reader

    uri = bucket.upload(DATA / "golden_store", "denied-task", "golden")
    options = ReadOptions.parse({"path": uri, **_opts(bucket)})
    reader = RocketMQReader(options, options.schema())
    parts = reader.partitions()
    for store in _reader._BUCKETS.values():
        store.close()
    _reader._BUCKETS.clear()
    wrong = "wrong-" + bucket.secret_key[::-1]
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", wrong)
    with pytest.raises(cq.ObjectStoreError, match="access denied") as info:
        list(reader.read(parts[0]))
    text = str(info.value) + repr(info.value)
    assert uri in text and wrong not in text and bucket.secret_key not in text
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", bucket.secret_key)
    assert sum(b.num_rows for p in parts for b in reader.read(p)) == 300
    _reader._BUCKETS.clear()


def _scan(capsys, argv: list[str]) -> tuple[int, str, str]:
    import rmqfilter

    code = rmqfilter.main(["scan", *argv])
    out = capsys.readouterr()
    return code, out.out, out.err


def test_scan_from_the_bucket_equals_the_local_scan(spark, bucket, monkeypatch, capsys, tmp_path):
    """``rmqfilter scan`` of an ``s3://`` store (the endpoint and region from the environment, as the
    other commands read them): the counts and the messages written are the local copy's."""
    monkeypatch.setenv("AWS_ENDPOINT_URL", bucket.endpoint)
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    local = str(DATA / "golden_store")
    uri = bucket.upload(DATA / "golden_store", "scan", "golden")
    group, sql = "GID_SQL_B", "TAGS = 'TagA' OR color IN ('red', 'grün')"
    results = {}
    for name, store in (("local", local), ("bucket", uri)):
        for layer2 in ("native", "python"):
            out, summary = tmp_path / f"{name}-{layer2}", tmp_path / f"{name}-{layer2}.json"
            code, printed, err = _scan(capsys, [store, "--topic", "GoldenFilterTopic", "--group", group, "--sql", sql,
                                                "--layer2", layer2, "--out", str(out), "--format", "json",
                                                "--json", str(summary)])
            assert code == 0, err
            assert bucket.secret_key not in printed + err
            counts = {k: v for k, v in json.loads(summary.read_text()).items()
                      if k not in ("seconds", "rows_per_second", "output")}
            written = sorted(json.dumps(r, sort_keys=True) for p in sorted(out.glob("part-*"))
                             for r in map(json.loads, p.read_text().splitlines()))
            results[name, layer2] = (counts, written)
    for layer2 in ("native", "python"):
        assert results["bucket", layer2] == results["local", layer2]
        assert results["local", layer2][0]["delivered"] == len(results["local", layer2][1]) > 0


def test_scan_of_a_missing_prefix_or_with_denied_credentials_names_the_uri(bucket, monkeypatch, capsys):
    monkeypatch.setenv("AWS_ENDPOINT_URL", bucket.endpoint)
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    uri = bucket.upload(DATA / "golden_store", "scanerrors", "golden")
    argv = ["--topic", "GoldenFilterTopic", "--group", "G", "--sql", "a > 5"]
    code, out, err = _scan(capsys, ["s3://scanerrors/elsewhere", *argv])
    assert code != 0 and "s3://scanerrors/elsewhere" in err and "no store under this prefix" in err
    assert "Traceback" not in err
    wrong = "wrong-" + bucket.secret_key[::-1]
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", wrong)
    code, out, err = _scan(capsys, [uri, *argv])
    assert code != 0 and uri in err and "access denied" in err and "Traceback" not in err
    assert wrong not in out + err and bucket.secret_key not in out + err


def test_an_object_truncated_after_the_plan_fails_the_task_naming_it(bucket):
    """The executor's side, in this process: a CommitLog object rewritten shorter between the plan and
    the task fails the task with an error naming the object's URI and the byte offset, never a short
    answer."""
    from pyspark_udfs import _reader

    uri = bucket.upload(DATA / "golden_store", "truncated", "golden")
    options = ReadOptions.parse({"path": uri, **_opts(bucket)})
    reader = RocketMQReader(options, options.schema())
    parts = reader.partitions()
    fs = bucket.filesystem()
    with contextlib.closing(cq.Store(DATA / "golden_store")) as local:
        _, path = local.commit_log.files[-1]
    name = Path(path).name
    data = Path(path).read_bytes()
    with fs.open_output_stream(f"truncated/golden/commitlog/{name}") as out:
        out.write(data[: len(data) // 3])
    try:
        with pytest.raises(cq.StoreFormatError) as info:
            for p in parts:
                list(reader.read(p))
        assert f"{uri}/commitlog/{name}" in str(info.value) and "byte" in str(info.value)
    finally:
        for store in _reader._BUCKETS.values():
            store.close()
        _reader._BUCKETS.clear()


def test_cost_and_find_on_spark_from_the_bucket_equal_the_local_copy(spark, bucket, monkeypatch, capsys):
    """``rmqfilter cost --spark`` (tasks that open the store themselves) and ``rmqfilter find --spark``
    (the data source): the same output from the bucket as from the local copy, the URI in place of the path."""
    import rmqfilter

    monkeypatch.setenv("AWS_ENDPOINT_URL", bucket.endpoint)
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    local = str(DATA / "golden_store")
    uri = bucket.upload(DATA / "golden_store", "costfind", "golden_store")  # the broker named as locally
    for command in (["cost", "--topic", "GoldenFilterTopic", "--sql-group", "G", "a > 5", "--no-timing", "--spark"],
                    ["find", "--topic", "GoldenFilterTopic", "--where", "a > 5", "--spark", "--json"]):
        answers = []
        for store in (local, uri):
            code = rmqfilter.main([command[0], store, *command[1:]])
            out = capsys.readouterr()
            # Spark gives find's rows in no set order
            answers.append((code, sorted(out.out.replace(store, "STORE").splitlines())))
            assert bucket.secret_key not in out.out + out.err
        assert answers[1] == answers[0] and answers[0][0] == 0 and answers[0][1], command
