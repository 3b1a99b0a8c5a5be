"""The data path (docs/data-path.md): store bytes -> Arrow, beside Parquet and an in-memory Arrow source.

One sample store (``cq.writer.writer.generate_sample_store``, ``RMQFILTER_BENCH_DATAPATH_MESSAGES``
messages, default 5 000 000 as in the issue; its main topic holds ~70 %), and, written once from our own
output, a Parquet (snappy) copy and an Arrow IPC copy of the main topic's ``messages`` rows.
Each group runs ours and its alternative in the same session:

- in-process, one thread: ``read_slice`` over every partition of the main topic, full
  ``messages`` schema, vs ``pyarrow.parquet.read_table`` of the copy (``use_threads=False``);
- ``Store.consume`` with a SQL92 group: layer 2 over the decoded map column vs the previous
  path (a property dict per record, ``gather_properties`` + ``matches_many``);
- Spark local[2]: ``count``, ``sum(length(body))``, ``count(properties['region'])`` over the
  main topic from the ``rocketmq`` source, from a Python data source yielding the same rows
  from the memory-mapped Arrow copy (the ceiling of any Python source), and from the Parquet copy;
- Spark: a projection of four ConsumeQueue columns (user schema) vs the full read;
- Spark: a SQL92 group filtered in the reader (full schema, and a user schema of the two columns
  the count needs) vs the Parquet copy filtered by ``selector_column``;
- the stages of these paths on their own (decoder by field, ext units, recovery walk, Messages
  for delivered records, planning, a Spark query's fixed cost): what a missed target is made of;
- body decompression (``decode_columns(decompress_body=True)``'s kernel ``inflate_bodies``, no
  store needed) vs a Python loop of ``zlib.decompress`` building the same column: a column of
  producer-compressed ZLIB bodies, and a column where 1 % of the bodies are compressed (as in the
  sample store).

Run: ``.venv/bin/python -m pytest bench/bench_datapath.py`` (several minutes on 2 shared cores;
the store, 1.5 GB, and its copies are written once under the temp directory and reused). The
default store is the issue's five million messages: every Spark query pays a fixed cost
(``test_stage_spark_query_fixed_cost``) that would dominate a small store's ratios;
``RMQFILTER_BENCH_DATAPATH_MESSAGES`` sets another size.
"""
from __future__ import annotations

import os

import pytest

from cq.writer.sample import SAMPLE_TOPICS

MESSAGES = int(os.environ.get("RMQFILTER_BENCH_DATAPATH_MESSAGES", "5000000"))
SEED = 11
TOPIC = SAMPLE_TOPICS[0]  # the sample store's main topic, which carries the groups
GROUP, SQL = "GID_PRIORITY", "priority >= 4 AND region IN ('cn-hangzhou', 'cn-beijing')"
# Rounds after a warm-up round. The machine's noise comes in bursts of seconds: five rounds
# (the median reported) let a burst spoil fewer of a test's rounds than three did.
ROUNDS = 5


@pytest.fixture(scope="module")
def store_path(cached_sample_store):
    return cached_sample_store(MESSAGES, SEED)


def _options(store_path, **kw):
    from pyspark_udfs.datasource import ReadOptions

    return ReadOptions.parse({"path": store_path, "topic": TOPIC, **kw})


def _partitions(opts):
    from pyspark_udfs.datasource import RocketMQReader

    return RocketMQReader(opts, opts.schema()).partitions()


def _read_batches(opts, parts, schema=None):
    from pyspark_udfs import _reader

    schema = schema if schema is not None else opts.schema()
    for part in parts:
        yield from _reader.read_partition(opts, schema, part, [])


@pytest.fixture(scope="module")
def copies(store_path):
    """Parquet (snappy) and Arrow IPC copies of the main topic's messages rows, and the row count."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    opts = _options(store_path)
    batches = list(_read_batches(opts, _partitions(opts)))
    table = pa.Table.from_batches(batches)
    parquet = os.path.join(store_path, "..", f"rmqfilter-bench-datapath-{MESSAGES}-{SEED}.parquet")
    ipc = os.path.join(store_path, "..", f"rmqfilter-bench-datapath-{MESSAGES}-{SEED}.arrow")
    if not os.path.exists(parquet):
        pq.write_table(table, parquet + ".tmp", compression="snappy")
        os.replace(parquet + ".tmp", parquet)
    if not os.path.exists(ipc):
        # nullable like the memory source's DDL schema (Spark checks the batches' schema exactly)
        table = table.cast(pa.schema([f.with_nullable(True) for f in table.schema]))
        with pa.OSFile(ipc + ".tmp", "wb") as f, pa.ipc.new_file(f, table.schema) as w:
            for b in table.to_batches(max_chunksize=1 << 16):
                w.write_batch(b)
        os.replace(ipc + ".tmp", ipc)
    return {"parquet": os.path.abspath(parquet), "ipc": os.path.abspath(ipc), "rows": table.num_rows}


def _run(benchmark, fn, role: str, items: int, rounds: int = ROUNDS):
    benchmark.extra_info.update(items=items, role=role)
    return benchmark.pedantic(fn, rounds=rounds, iterations=1, warmup_rounds=1)


# ------------------------------------------------------------------ in-process, one thread
IN_PROCESS = f"store -> Arrow batches, full messages schema, one thread, {MESSAGES:,}-message store"


@pytest.mark.benchmark(group=IN_PROCESS)
def test_read_messages_arrow_ours(benchmark, store_path, copies):
    opts = _options(store_path)
    parts = _partitions(opts)

    def read():
        return sum(b.num_rows for b in _read_batches(opts, parts))

    assert _run(benchmark, read, "ours", copies["rows"]) == copies["rows"]


@pytest.mark.benchmark(group=IN_PROCESS)
def test_read_messages_parquet_pyarrow(benchmark, copies):
    import pyarrow.parquet as pq

    def read():
        return pq.read_table(copies["parquet"], use_threads=False).num_rows

    assert _run(benchmark, read, "alternative", copies["rows"]) == copies["rows"]


# ------------------------------------------------------------------ Store.consume
CONSUME = f"Store.consume SQL92 group, {MESSAGES:,}-message store"


def _consume(store_path, flt=None) -> int:
    import cq

    store = cq.Store(store_path)
    try:
        return sum(1 for _ in store.consume(TOPIC, GROUP, sql=SQL, filter=flt))
    finally:
        store.close()


def _units(store_path) -> int:
    import cq

    store = cq.Store(store_path)
    n = sum(len(store.consume_queue(TOPIC, q)) for q in store.queue_ids(TOPIC))
    store.close()
    return n


@pytest.mark.benchmark(group=CONSUME)
def test_consume_sql_layer2_columns_ours(benchmark, store_path):
    benchmark.extra_info["expected"] = _consume(store_path)
    _run(benchmark, lambda: _consume(store_path), "ours", _units(store_path))


def _consume_previous(store_path) -> int:
    """``_consume`` by the previous path: layer 2 on a property dict per record
    (``gather_properties``, no decoder columns to share with delivery), and a ``read_message``
    per delivered record."""
    import bloom
    import cq

    class DictFilter(cq.SqlFilter):
        is_matched_by_commit_log_columns = None

    columns_read = cq.CommitLog.read_messages
    cq.CommitLog.read_messages = lambda self, offsets: [self.read_message(o) for o in offsets.tolist()]
    try:
        return _consume(store_path, DictFilter(GROUP, TOPIC, SQL, bloom.BloomFilter()))
    finally:
        cq.CommitLog.read_messages = columns_read


@pytest.mark.benchmark(group=CONSUME)
def test_consume_sql_layer2_dicts_previous(benchmark, store_path):
    got = _run(benchmark, lambda: _consume_previous(store_path), "alternative", _units(store_path))
    assert got == _consume(store_path)


# ------------------------------------------------------------------ Spark
def _memory_source(ipc_path: str, schema_ddl: str, partitions: int):
    """A Python data source yielding the rows of the Arrow IPC copy (memory-mapped): the ceiling of
    any Python data source with this schema and these rows. Defined here so cloudpickle ships it."""
    from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition

    class _Part(InputPartition):
        def __init__(self, index):
            self.index = index

    class _Reader(DataSourceReader):
        def partitions(self):
            return [_Part(i) for i in range(partitions)]

        def read(self, partition):
            import pyarrow as pa

            reader = pa.ipc.open_file(pa.memory_map(ipc_path))
            for i in range(partition.index, reader.num_record_batches, partitions):
                yield reader.get_batch(i)

    class MemoryArrowSource(DataSource):
        @classmethod
        def name(cls):
            return "rmqfilter_bench_arrow"

        def schema(self):
            return schema_ddl

        def reader(self, schema):
            return _Reader()

    return MemoryArrowSource


def _full_query(df):
    from pyspark.sql import functions as F

    return tuple(df.agg(F.count(F.lit(1)), F.sum(F.length("body")), F.count(F.col("properties")["region"])).first())


SPARK_FULL = f"spark full messages read, {MESSAGES:,}-message store (main topic)"


@pytest.fixture(scope="module")
def full_answer(spark, store_path, copies):
    return _full_query(spark.read.parquet(copies["parquet"]))


@pytest.mark.benchmark(group=SPARK_FULL)
def test_spark_full_read_ours(benchmark, spark, store_path, copies, full_answer):
    df = spark.read.format("rocketmq").option("topic", TOPIC).load(store_path)
    assert _run(benchmark, lambda: _full_query(df), "ours", copies["rows"]) == full_answer


def _memory_frame(spark, copies):
    """The in-memory Arrow source over the IPC copy, with the ``messages`` schema, registered and loaded."""
    from pyspark_udfs.datasource import ReadOptions

    ddl = ReadOptions(path="/").schema().simpleString()[len("struct<"):-1].replace(":", " ")
    spark.dataSource.register(_memory_source(copies["ipc"], ddl, 2))
    return spark.read.format("rmqfilter_bench_arrow").load()


@pytest.mark.benchmark(group=SPARK_FULL)
def test_spark_full_read_memory_arrow_source(benchmark, spark, copies, full_answer):
    df = _memory_frame(spark, copies)
    assert _run(benchmark, lambda: _full_query(df), "alternative", copies["rows"]) == full_answer


@pytest.mark.benchmark(group=SPARK_FULL)
def test_spark_full_read_partition_per_file_split(benchmark, spark, store_path, copies, full_answer):
    """The previous planning's task count: at most 100,000 units a partition (35 tasks here; it was
    one per 100,000 units of a ConsumeQueue file, 36)."""
    df = (spark.read.format("rocketmq").option("topic", TOPIC).option("partition_units", "100000")
          .load(store_path))
    assert _run(benchmark, lambda: _full_query(df), "alternative", copies["rows"]) == full_answer


@pytest.mark.benchmark(group=SPARK_FULL)
def test_spark_full_read_parquet(benchmark, spark, copies, full_answer):
    df = spark.read.parquet(copies["parquet"])
    assert _run(benchmark, lambda: _full_query(df), "alternative", copies["rows"]) == full_answer


SPARK_PROJECTION = f"spark projection of 4 ConsumeQueue columns vs full read, {MESSAGES:,}-message store"


def _projection_query(df):
    from pyspark.sql import functions as F

    return tuple(df.agg(F.count(F.lit(1)), F.sum("queue_offset"), F.sum("store_size"),
                        F.count("tags_code")).first())


@pytest.mark.benchmark(group=SPARK_PROJECTION)
def test_spark_projection_cq_columns_ours(benchmark, spark, store_path, copies):
    df = (spark.read.format("rocketmq").option("topic", TOPIC)
          .schema("queue_id int, queue_offset long, store_size int, tags_code long").load(store_path))
    full = spark.read.format("rocketmq").option("topic", TOPIC).load(store_path)
    want = _projection_query(full)
    assert _run(benchmark, lambda: _projection_query(df), "ours", copies["rows"]) == want


@pytest.mark.benchmark(group=SPARK_PROJECTION)
def test_spark_projection_full_read(benchmark, spark, store_path, copies):
    df = spark.read.format("rocketmq").option("topic", TOPIC).load(store_path)
    _run(benchmark, lambda: _projection_query(df), "alternative", copies["rows"])


SPARK_GROUP = f"spark SQL92 group, layer 2 in the reader vs Parquet + selector_column, {MESSAGES:,}-message store"


@pytest.mark.benchmark(group=SPARK_GROUP)
def test_spark_group_in_reader_ours(benchmark, spark, store_path, copies):
    from pyspark_udfs import selector_column

    df = (spark.read.format("rocketmq").option("topic", TOPIC).option("group", GROUP).option("sql", SQL)
          .load(store_path))
    want = spark.read.parquet(copies["parquet"]).where(selector_column(SQL, "properties")).count()
    assert _run(benchmark, df.count, "ours", copies["rows"]) == want


@pytest.mark.benchmark(group=SPARK_GROUP)
def test_spark_group_in_reader_projected_ours(benchmark, spark, store_path, copies):
    """The same count with a user schema of the columns the query needs: Spark prunes the Parquet
    read to ``properties`` by itself, but a Python data source is handed no pruned schema."""
    from pyspark_udfs import selector_column

    df = (spark.read.format("rocketmq").option("topic", TOPIC).option("group", GROUP).option("sql", SQL)
          .schema("queue_id int, queue_offset long").load(store_path))
    want = spark.read.parquet(copies["parquet"]).where(selector_column(SQL, "properties")).count()
    assert _run(benchmark, df.count, "ours", copies["rows"]) == want


@pytest.mark.benchmark(group=SPARK_GROUP)
def test_spark_group_in_reader_projected_partition_per_file_split(benchmark, spark, store_path, copies):
    """The user-schema count with the previous planning's task count (at most 100,000 units a partition)."""
    df = (spark.read.format("rocketmq").option("topic", TOPIC).option("group", GROUP).option("sql", SQL)
          .option("partition_units", "100000").schema("queue_id int, queue_offset long").load(store_path))
    _run(benchmark, df.count, "alternative", copies["rows"])


@pytest.mark.benchmark(group=SPARK_GROUP)
def test_spark_group_parquet_selector_column(benchmark, spark, copies):
    from pyspark_udfs import selector_column

    df = spark.read.parquet(copies["parquet"]).where(selector_column(SQL, "properties"))
    _run(benchmark, df.count, "alternative", copies["rows"])


# ------------------------------------------------------------------ interleaved rounds
# The machine's noise comes in bursts of seconds to minutes, and the groups above run each side's
# rounds together, minutes apart: a burst can fall on one side only. Here each round runs ours,
# then its alternative, so a burst falls on both sides of a round; the report gives the median of
# the per-round ratios beside the ratio of the medians above (bench/report.py, Targets).
INTERLEAVED = f"interleaved rounds: ours then the alternative in each round, {MESSAGES:,}-message store"


def _interleaved(benchmark, sides: dict, items: int, rounds: int = ROUNDS) -> dict:
    """Run ``sides`` (name -> function of no argument returning ``(result, parts)``; ``parts``
    maps a part's name to its seconds in that call) one after the other in each round, after one
    warm-up round. Records ``extra_info["interleaved"]``: per side, each round's seconds and parts.
    Returns the last round's results by side. The benchmark's own timing is of whole rounds."""
    import time

    log = {name: {"seconds": [], "parts": {}} for name in sides}
    results = {}
    state = {"warm": True}

    def one_round():
        for name, fn in sides.items():
            t = time.perf_counter()
            results[name], parts = fn()
            took = time.perf_counter() - t
            if not state["warm"]:
                log[name]["seconds"].append(took)
                for part, secs in parts.items():
                    log[name]["parts"].setdefault(part, []).append(secs)
        state["warm"] = False

    benchmark.extra_info.update(items=items, role="interleaved", interleaved=log)
    benchmark.pedantic(one_round, rounds=rounds + 1, iterations=1, warmup_rounds=0)
    # (the first round ran as the warm-up: drop it from the log; the benchmark's row keeps it)
    return results


def _timed_decoder(monkeypatch):
    """Timers around the data path's two kernels (``decode_columns``, ``inflate_bodies``), as the
    reader calls them; returns the dict they add their seconds to."""
    import time

    from cq.readers import commitlog

    spent = {"decode": 0.0, "inflate": 0.0}
    decode, inflate = commitlog._decode.decode_columns, commitlog._inflate.inflate_bodies

    def timed(fn, key):
        def call(*args):
            t = time.perf_counter()
            try:
                return fn(*args)
            finally:
                spent[key] += time.perf_counter() - t
        return call

    monkeypatch.setattr(commitlog._decode, "decode_columns", timed(decode, "decode"))
    monkeypatch.setattr(commitlog._inflate, "inflate_bodies", timed(inflate, "inflate"))
    return spent


@pytest.mark.benchmark(group=INTERLEAVED)
def test_interleaved_read_messages_profile(benchmark, store_path, copies, monkeypatch):
    """store -> Arrow against pyarrow's Parquet read, interleaved, with ours split into its parts:
    the decoder kernel, body inflation, and the rest (ConsumeQueue and ext columns, batch
    bookkeeping, Arrow arrays). The report draws the split (bench/charts)."""
    import time

    import pyarrow.parquet as pq

    from cq.readers import commitlog

    if commitlog._decode.__name__.endswith("_py"):
        pytest.skip("the profile times the compiled kernels")
    spent = _timed_decoder(monkeypatch)
    opts = _options(store_path)
    parts = _partitions(opts)

    def ours():
        spent.update(decode=0.0, inflate=0.0)
        t = time.perf_counter()
        n = sum(b.num_rows for b in _read_batches(opts, parts))
        total = time.perf_counter() - t
        rest = total - spent["decode"] - spent["inflate"]
        return n, {"decoder kernel": spent["decode"], "body inflation": spent["inflate"],
                   "ConsumeQueue, ext, batches": rest}

    def parquet():
        return pq.read_table(copies["parquet"], use_threads=False).num_rows, {}

    got = _interleaved(benchmark, {"ours": ours, "pyarrow Parquet read": parquet}, copies["rows"])
    assert got == {"ours": copies["rows"], "pyarrow Parquet read": copies["rows"]}


@pytest.mark.benchmark(group=INTERLEAVED)
def test_interleaved_consume(benchmark, store_path):
    """``Store.consume`` with the SQL92 group against the previous layer 2 (property dicts and a
    ``read_message`` per delivered record, as ``test_consume_sql_layer2_dicts_previous``), interleaved."""
    got = _interleaved(benchmark, {"ours": lambda: (_consume(store_path), {}),
                                   "previous": lambda: (_consume_previous(store_path), {})},
                       _units(store_path))
    assert got["ours"] == got["previous"] > 0


@pytest.mark.benchmark(group=INTERLEAVED)
def test_interleaved_spark_full_read(benchmark, spark, store_path, copies, full_answer):
    """The Spark full read against the in-memory Arrow source, interleaved."""
    ours = spark.read.format("rocketmq").option("topic", TOPIC).load(store_path)
    memory = _memory_frame(spark, copies)
    got = _interleaved(benchmark, {"ours": lambda: (_full_query(ours), {}),
                                   "in-memory Arrow source": lambda: (_full_query(memory), {})},
                       copies["rows"])
    assert got == {"ours": full_answer, "in-memory Arrow source": full_answer}


# ------------------------------------------------------------------ where the time goes
# Each stage of the paths above on its own, in the same run, so the report shows what a missed
# target is made of (bench/README.md#the-data-path reads these rows).
STAGES = f"data path stages, {MESSAGES:,}-message store (main topic unless named)"


@pytest.fixture(scope="module")
def main_offsets(store_path):
    """CommitLog offsets of the main topic's records, in log order, and the store's record count."""
    import numpy as np

    import cq

    store = cq.Store(store_path)
    try:
        offs = np.sort(np.concatenate([store.consume_queue(TOPIC, q).read(0, 1 << 40)["commit_log_offset"]
                                       for q in store.queue_ids(TOPIC)]).astype(np.int64))
        return offs, store.commit_log.count_records()
    finally:
        store.close()


@pytest.mark.parametrize("fields", [["store_timestamp"], ["properties"], ["tags"], None],
                         ids=["one_fixed_field", "properties_map", "tags_only", "all_fields"])
@pytest.mark.benchmark(group=STAGES)
def test_stage_decode_columns(benchmark, store_path, main_offsets, fields):
    """The decoder alone, in batches of 65,536 records (``column_batches``' size): a fixed field is
    the memory wait per record; the map is the text split."""
    import cq

    log = cq.CommitLog(os.path.join(store_path, "commitlog"))
    offs, _ = main_offsets
    batches = [offs[i:i + 65536] for i in range(0, len(offs), 65536)]
    _run(benchmark, lambda: [len(log.decode_columns(b, fields)) for b in batches], "ours", len(offs))
    log.close()


@pytest.mark.benchmark(group=STAGES)
def test_stage_ext_read_batch(benchmark, store_path):
    """ConsumeQueueExt units (tag codes, bitmaps) for every ConsumeQueue slot of the main topic."""
    import cq

    store = cq.Store(store_path)
    slots = [(store.ext(TOPIC, q), store.consume_queue(TOPIC, q).read(0, 1 << 40)["tags_code"])
             for q in store.queue_ids(TOPIC)]
    _run(benchmark, lambda: [ext.read_batch(s) for ext, s in slots], "ours", sum(len(s) for _, s in slots))
    store.close()


@pytest.mark.benchmark(group=STAGES)
def test_stage_recovery_walk_every_record(benchmark, store_path, main_offsets):
    """A cold ``CommitLog.max_offset`` (the broker's recovery walk, body CRCs checked), per record of
    the whole log: what opening a store costs ``Store.consume`` and each Spark query's planning."""
    import cq

    def walk():
        log = cq.CommitLog(os.path.join(store_path, "commitlog"))
        try:
            return log.max_offset
        finally:
            log.close()

    _run(benchmark, walk, "ours", main_offsets[1])


@pytest.mark.benchmark(group=STAGES)
def test_stage_messages_for_delivered(benchmark, store_path):
    """``cq.Message`` objects for the records ``Store.consume`` delivers to the SQL92 group, built from
    their decoded columns (``CommitLog.messages_from_columns``) in slices of 8,192 as consume reads
    them: a dict of properties and str fields each. The decode itself is not in this stage."""
    import numpy as np

    import cq

    store = cq.Store(store_path)
    log = store.commit_log
    offs = np.array([m.commit_log_offset for m in store.consume(TOPIC, GROUP, sql=SQL)], dtype=np.int64)
    slices = [(s, log.decode_columns(s)) for s in (offs[i:i + 8192] for i in range(0, len(offs), 8192))]
    _run(benchmark, lambda: [len(log.messages_from_columns(c, s)) for s, c in slices], "ours", len(offs))
    store.close()


def _tiny_source():
    """A Python data source of one row per partition (option ``partitions``, default 1): a Spark
    query's fixed cost with any Python source, and what each further task adds."""
    from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition

    class _Reader(DataSourceReader):
        def __init__(self, n):
            self.n = n

        def partitions(self):
            return [InputPartition(i) for i in range(self.n)]

        def read(self, partition):
            yield (1,)

    class TinySource(DataSource):
        @classmethod
        def name(cls):
            return "rmqfilter_bench_tiny"

        def schema(self):
            return "a int"

        def reader(self, schema):
            return _Reader(int(self.options.get("partitions", "1")))

    return TinySource


@pytest.mark.benchmark(group=STAGES)
def test_stage_spark_query_fixed_cost(benchmark, spark):
    """One query over a one-row Python data source (per query: planning, a task, Python workers)."""
    from pyspark.sql import functions as F

    spark.dataSource.register(_tiny_source())
    df = spark.read.format("rmqfilter_bench_tiny").load()
    _run(benchmark, lambda: df.agg(F.count(F.lit(1))).first()[0], "ours", 1)


TASKS = "a Python data source's tasks: one row a partition"


@pytest.mark.benchmark(group=TASKS)
@pytest.mark.parametrize("tasks", [2, 34])
def test_stage_spark_tasks(benchmark, spark, tasks):
    """The same one-row-a-task query planned as 2 and as 34 partitions: the 32 more tasks' share is
    what a task costs with any Python source (why the ``rocketmq`` source packs queue ranges into
    few partitions, docs/spark.md#partitions)."""
    from pyspark.sql import functions as F

    spark.dataSource.register(_tiny_source())
    df = spark.read.format("rmqfilter_bench_tiny").option("partitions", str(tasks)).load()
    _run(benchmark, lambda: df.agg(F.count(F.lit(1))).first()[0], "ours" if tasks == 2 else "alternative", tasks)


@pytest.mark.benchmark(group=STAGES)
def test_stage_rocketmq_partitions(benchmark, store_path):
    """The ``rocketmq`` source's planning in-process (a cut of the store: recovery walk, queue
    bounds), what each Spark query runs on the driver before any task."""
    opts = _options(store_path)
    _run(benchmark, lambda: len(_partitions(opts)), "ours", 1)


# ------------------------------------------------------------------ body decompression
N_ZLIB_BODIES = 4000
N_MIXED_BODIES = 100_000


def _body_column(n: int, compressed_share: float, seed: int):
    """``(offsets int32, data uint8, sys_flag int32, uncompressed bytes)``: a body column as the decoder
    gives it, text bodies, the compressed ones 4-20 KiB before ZLIB level 5 (the producer's default)."""
    import numpy as np

    from cq.writer.writer import compress_body

    rng = np.random.default_rng(seed)
    words = [b"order", b"price", b"region", b"cn-hangzhou", b"7.25", b"customer", b"{", b"}", b"sku-1042"]
    bodies, flags, raw_bytes = [], [], 0
    for i in range(n):
        big = rng.random() < compressed_share
        size = int(rng.integers(4096, 20_000)) if big else int(rng.integers(50, 600))
        text = b" ".join(words[j] for j in rng.integers(0, len(words), size // 6))[:size] + b"%d" % i
        raw_bytes += len(text)
        if big:
            text, flag = compress_body(text)
        else:
            flag = 0
        bodies.append(text)
        flags.append(flag)
    offsets = np.zeros(n + 1, dtype=np.int32)
    np.cumsum([len(b) for b in bodies], out=offsets[1:])
    return offsets, np.frombuffer(b"".join(bodies), np.uint8), np.array(flags, np.int32), raw_bytes


def _python_inflate(offsets, data, sys_flag):
    """The obvious alternative: zlib.decompress per compressed row, then the same Arrow column."""
    import zlib

    import numpy as np

    raw = data.tobytes()
    out = [zlib.decompress(raw[a:b]) if f & 1 else raw[a:b]
           for a, b, f in zip(offsets[:-1].tolist(), offsets[1:].tolist(), sys_flag.tolist())]
    new_offsets = np.zeros(len(out) + 1, dtype=np.int32)
    np.cumsum([len(b) for b in out], out=new_offsets[1:])
    return new_offsets, np.frombuffer(b"".join(out), np.uint8)


@pytest.fixture(scope="module")
def zlib_bodies():
    return _body_column(N_ZLIB_BODIES, 1.0, 21)


@pytest.fixture(scope="module")
def mixed_bodies():
    return _body_column(N_MIXED_BODIES, 0.01, 22)


def _inflate_ours(benchmark, column):
    import numpy as np

    from cq.kernels import _inflate

    offsets, data, flags, raw_bytes = column
    benchmark.extra_info.update(bytes=raw_bytes)
    got = _run(benchmark, lambda: _inflate.inflate_bodies(offsets, data, flags), "ours", len(flags))
    want = _python_inflate(offsets, data, flags)
    assert len(got[2]) == 0 and np.array_equal(got[0], want[0]) and np.array_equal(got[1], want[1])


def _inflate_python(benchmark, column):
    offsets, data, flags, raw_bytes = column
    benchmark.extra_info.update(bytes=raw_bytes)
    _run(benchmark, lambda: _python_inflate(offsets, data, flags), "alternative", len(flags))


INFLATE_ZLIB = f"body column decompression, {N_ZLIB_BODIES:,} ZLIB bodies of 4-20 KiB"
INFLATE_MIXED = f"body column decompression, {N_MIXED_BODIES:,} bodies, 1 % ZLIB"


@pytest.mark.benchmark(group=INFLATE_ZLIB)
def test_inflate_bodies_zlib_ours(benchmark, zlib_bodies):
    _inflate_ours(benchmark, zlib_bodies)


@pytest.mark.benchmark(group=INFLATE_ZLIB)
def test_inflate_bodies_zlib_python_loop(benchmark, zlib_bodies):
    _inflate_python(benchmark, zlib_bodies)


@pytest.mark.benchmark(group=INFLATE_MIXED)
def test_inflate_bodies_mixed_ours(benchmark, mixed_bodies):
    _inflate_ours(benchmark, mixed_bodies)


@pytest.mark.benchmark(group=INFLATE_MIXED)
def test_inflate_bodies_mixed_python_loop(benchmark, mixed_bodies):
    _inflate_python(benchmark, mixed_bodies)
