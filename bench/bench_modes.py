"""Each store mode's reader beside the classic one, on the same messages (docs/reading.md#store-modes).

One sample store (``cq.writer.sample.generate_sample_store``, 200 000 messages, the one
``bench_writer`` and others share) and two copies holding the same messages in another layout:

- a DLedger CommitLog (``cq.writer.dledger.write_dledger_store``): every record inside a 48-byte
  entry, the consume queues pointing into the entries;
- a RocksDB consume queue: the same units as keys and values of a RocksDB database in
  ``consumequeue/``, written here through the binding in the broker's layout
  (docs/formats.md#rocksdb-consume-queue); the CommitLog and the rest of the store are the classic
  files.

Each group reads every message of the sample store's main topic with ``Store.consume`` (``tags="*"``,
a fresh ``Store`` each round, so opening the layout is counted): the classic store is the
alternative, the mode's reader "ours".

Run: ``.venv/bin/python -m pytest bench/bench_modes.py`` (a minute; the copies are written once
under the temp directory).
"""
from __future__ import annotations

import os
import shutil
import struct
import tempfile
from contextlib import closing

import pytest

import cq
from cq import format as fmt
from cq.writer.dledger import write_dledger_store
from cq.writer.sample import SAMPLE_TOPICS

MESSAGES, SEED = 200_000, 1
TOPIC = SAMPLE_TOPICS[0]
ROUNDS = 5
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


def _consume(root: str) -> int:
    with closing(cq.Store(root)) as store:
        return sum(1 for _ in store.consume(TOPIC, "G", tags="*"))


def _units(root: str) -> int:
    with closing(cq.Store(root)) as store:
        return sum(len(store.consume_queue(TOPIC, q)) for q in store.queue_ids(TOPIC))


def _run(benchmark, root: str, role: str, mode: str) -> None:
    benchmark.group = GROUP
    benchmark.extra_info.update(items=_units(root), role=role, mode=mode)
    got = benchmark.pedantic(_consume, args=(root,), rounds=ROUNDS, iterations=1, warmup_rounds=1)
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
