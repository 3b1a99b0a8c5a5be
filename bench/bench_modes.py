"""Each store mode's reader beside the classic one, on the same messages (docs/reading.md#store-modes).

One sample store (``cq.writer.sample.generate_sample_store``, 200 000 messages, the one
``bench_writer`` and others share) and two copies holding the same messages in another layout:

- a DLedger CommitLog (``cq.writer.dledger.write_dledger_store``): every record inside a 48-byte
  entry, the consume queues pointing into the entries;
- a RocksDB consume queue: the same units as keys and values of a RocksDB database in
  ``consumequeue/``, written here through the binding in the broker's layout
  (docs/formats.md#rocksdb-consume-queue); the CommitLog and the rest of the store are the classic
  files;
- a BatchCQ topic (docs/formats.md#batch-consume-queue): each queue's messages, in queue order, in
  inner-batch records of :data:`BATCH` messages (a CommitLog of those records and a
  BatchConsumeQueue of one unit each), written here in the broker's layout; every message is read
  back unwrapped, with its own queue offset.

Each group reads every message of the sample store's main topic with ``Store.consume`` (``tags="*"``,
a fresh ``Store`` each round, so opening the layout is counted): the classic store is the
alternative, the mode's reader "ours".

A second group reads the same messages through the ``rocketmq`` data source's executor side
(``pyspark_udfs._reader.read_partition`` over every slice of the plan, in-process, no Spark): the
classic store's columnar read is the alternative, the BatchCQ copy's (docs/reading.md#batchcq) ours.

Run: ``.venv/bin/python -m pytest bench/bench_modes.py`` (a minute; the copies are written once
under the temp directory).
"""
from __future__ import annotations

import os
import shutil
import struct
import tempfile
from contextlib import closing

import numpy as np
import pytest

import cq
from cq import format as fmt
from cq.writer.dledger import write_dledger_store
from cq.writer.sample import SAMPLE_TOPICS

MESSAGES, SEED = 200_000, 1
TOPIC = SAMPLE_TOPICS[0]
ROUNDS = 5
#: Messages per inner-batch record of the BatchCQ copy.
BATCH = 16
GROUP = f"Store.consume of every message of {TOPIC}, {MESSAGES:,}-message sample store"


@pytest.fixture(scope="module")
def classic(cached_sample_store) -> str:
    return cached_sample_store(MESSAGES, SEED)


def _copy_once(name: str, write) -> str:
    """A copy written by ``write(dest)`` once under the temp directory (a marker says it is complete)."""
    root = os.path.join(tempfile.gettempdir(), f"rmqfilter-bench-{name}-{MESSAGES}-{SEED}")
    marker = root + ".done"
    if not os.path.exists(marker):
        shutil.rmtree(root, ignore_errors=True)
        write(root)
        open(marker, "w").close()
    return root


@pytest.fixture(scope="module")
def dledger(classic) -> str:
    return _copy_once("dledger", lambda dest: write_dledger_store(classic, dest))


def _write_rocksdb_queues(classic: str, dest: str) -> None:
    """``classic`` copied with its consume queue files replaced by a RocksDB database of the same units."""
    import rocksdict

    shutil.copytree(classic, dest, ignore=shutil.ignore_patterns(fmt.CONSUME_QUEUE_DIR))
    raw = rocksdict.Options(raw_mode=True)
    db = rocksdict.Rdict(os.path.join(dest, fmt.CONSUME_QUEUE_DIR), options=raw)
    offsets = db.create_column_family(fmt.ROCKSDB_CQ_OFFSET_FAMILY, rocksdict.Options(raw_mode=True))
    sep = fmt.ROCKSDB_CQ_SEPARATOR
    with closing(cq.Store(classic)) as store:
        for topic in store.topics():
            name = topic.encode()
            for queue_id in store.queue_ids(topic):
                queue = store.consume_queue(topic, queue_id)
                units = queue.read()
                head = struct.pack(">i", len(name)) + sep + name + sep
                batch = rocksdict.WriteBatch(raw_mode=True)
                for i, (phys, size, code) in enumerate(units.tolist()):
                    batch.put(head + struct.pack(">i", queue_id) + sep + struct.pack(">q", queue.min_offset + i),
                              struct.pack(">qiqq", phys, size, code, 0))
                db.write(batch)
                for kind, (phys, offset) in ((fmt.ROCKSDB_CQ_MIN, (int(units[0][0]), queue.min_offset)),
                                             (fmt.ROCKSDB_CQ_MAX, (int(units[-1][0]), queue.max_offset - 1))):
                    offsets[head + kind + sep + struct.pack(">i", queue_id)] = struct.pack(">qq", phys, offset)
    db.close()
    os.remove(os.path.join(dest, fmt.CONSUME_QUEUE_DIR, "rocksdict-config.json"))


@pytest.fixture(scope="module")
def rocksdb_queues(classic) -> str:
    return _copy_once("rocksdb", lambda dest: _write_rocksdb_queues(classic, dest))


def _inner_body(messages) -> bytes:
    """An inner-batch body: each message as the client encodes it (docs/formats.md#inner-batch)."""
    parts = []
    for m in messages:
        props = fmt.encode_properties(m.properties).encode()
        size = fmt.INNER_MESSAGE_HEAD_STRUCT.size + len(m.body) + fmt.INNER_PROPERTIES_LENGTH_STRUCT.size + len(props)
        parts += [fmt.INNER_MESSAGE_HEAD_STRUCT.pack(size, 0, 0, m.flag, len(m.body)), m.body,
                  fmt.INNER_PROPERTIES_LENGTH_STRUCT.pack(len(props)), props]
    return b"".join(parts)


def _write_batch_queues(classic: str, dest: str) -> None:
    """``classic``'s main topic again as a BatchCQ topic: a CommitLog of inner-batch records of
    :data:`BATCH` messages each (one file) and a BatchConsumeQueue per queue (one file each)."""
    log_dir = os.path.join(dest, fmt.COMMIT_LOG_DIR)
    os.makedirs(log_dir)
    records, units = [], {}
    pos = 0
    with closing(cq.Store(classic)) as store:
        for queue_id in store.queue_ids(TOPIC):
            msgs = list(store.consume(TOPIC, "G", tags="*", queue_ids=[queue_id]))
            rows = units[queue_id] = []
            for i in range(0, len(msgs), BATCH):
                batch = msgs[i:i + BATCH]
                base = batch[0].queue_offset
                props = {fmt.PROPERTY_UNIQ_KEY: f"BATCH-{queue_id}-{base}", fmt.PROPERTY_INNER_NUM: str(len(batch)),
                         fmt.PROPERTY_INNER_BASE: str(base)}
                record = fmt.encode_record(topic=TOPIC, body=_inner_body(batch), properties=props,
                                           queue_id=queue_id, queue_offset=base, commit_log_offset=pos,
                                           sys_flag=fmt.INNER_BATCH_FLAG | fmt.NEED_UNWRAP_FLAG,
                                           born_timestamp=batch[0].born_timestamp,
                                           store_timestamp=batch[0].store_timestamp)
                rows.append((pos, len(record), 0, batch[0].store_timestamp, base, len(batch), -1, 0))
                records.append(record)
                pos += len(record)
    file_size = 1 << max(20, (pos + 8).bit_length())
    with open(os.path.join(log_dir, fmt.file_name(0)), "wb") as f:
        f.write(b"".join(records))
        f.truncate(file_size)
    per_file = max(len(r) for r in units.values()) + 1
    for queue_id, rows in units.items():
        queue_dir = os.path.join(dest, fmt.BATCH_CONSUME_QUEUE_DIR, TOPIC, str(queue_id))
        os.makedirs(queue_dir)
        with open(os.path.join(queue_dir, fmt.file_name(0)), "wb") as f:
            f.write(np.array(rows, dtype=fmt.BCQ_UNIT_DTYPE).tobytes())
            f.truncate(per_file * fmt.BCQ_STORE_UNIT_SIZE)


@pytest.fixture(scope="module")
def batch_queues(classic) -> str:
    return _copy_once(f"batchcq{BATCH}", lambda dest: _write_batch_queues(classic, dest))


def _consume(root: str) -> int:
    with closing(cq.Store(root)) as store:
        return sum(1 for _ in store.consume(TOPIC, "G", tags="*"))


def _units(root: str) -> int:
    with closing(cq.Store(root)) as store:
        return sum(len(store.consume_queue(TOPIC, q)) for q in store.queue_ids(TOPIC))


def _run(benchmark, root: str, role: str, mode: str, group: str = GROUP, read=_consume) -> None:
    benchmark.group = group
    benchmark.extra_info.update(items=_units(root), role=role, mode=mode)
    got = benchmark.pedantic(read, args=(root,), rounds=ROUNDS, iterations=1, warmup_rounds=1)
    assert got == benchmark.extra_info["items"]


def test_consume_classic(benchmark, classic):
    _run(benchmark, classic, "alternative", "classic")


def test_consume_dledger_ours(benchmark, dledger, classic):
    assert _units(dledger) == _units(classic)
    _run(benchmark, dledger, "ours", "dledger")


def test_consume_rocksdb_queues_ours(benchmark, rocksdb_queues, classic):
    with closing(cq.Store(rocksdb_queues)) as rocks, closing(cq.Store(classic)) as files:
        assert rocks.layout.consume_queues == "rocksdb"
        for q in files.queue_ids(TOPIC):
            assert rocks.consume_queue(TOPIC, q).read().tolist() == files.consume_queue(TOPIC, q).read().tolist()
    _run(benchmark, rocksdb_queues, "ours", "rocksdb")


def test_consume_batch_cq_ours(benchmark, batch_queues, classic):
    with closing(cq.Store(batch_queues)) as batch, closing(cq.Store(classic)) as files:
        assert batch.layout.batch_cq_topics == (TOPIC,)
        for q in files.queue_ids(TOPIC):
            got = [(m.queue_offset, m.properties, m.body) for m in batch.consume(TOPIC, "G", tags="*", queue_ids=[q])]
            assert got == [(m.queue_offset, m.properties, m.body)
                           for m in files.consume(TOPIC, "G", tags="*", queue_ids=[q])]
    _run(benchmark, batch_queues, "ours", "batchcq")


SOURCE_GROUP = f"rocketmq data source read (executor side, every slice) of {TOPIC}, {MESSAGES:,}-message sample store"


def _source_rows(root: str) -> int:
    from pyspark_udfs import _reader
    from pyspark_udfs.datasource import ReadOptions, RocketMQReader

    opts = ReadOptions.parse({"path": root, "topic": TOPIC})
    schema = opts.schema()
    return sum(b.num_rows for p in RocketMQReader(opts, schema).partitions()
               for b in _reader.read_partition(opts, schema, p, []))


def test_source_classic(benchmark, classic):
    _run(benchmark, classic, "alternative", "classic", SOURCE_GROUP, _source_rows)


def test_source_batch_cq_ours(benchmark, batch_queues):
    _run(benchmark, batch_queues, "ours", "batchcq", SOURCE_GROUP, _source_rows)
