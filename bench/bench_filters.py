"""Custom message filters: the batch form (an Arrow record batch in, a boolean array out) beside the
per-message form (one ``cq.Message`` per call), in the same process, on the same sample store.

Two places a custom filter runs (docs/custom-filters.md):

- ``Store.consume(..., filter=...)``: both forms see the messages both broker layers delivered;
  the batch form's Arrow batch is built from the decoder's columns, and only the messages it
  keeps are decoded as ``cq.Message``;
- the data source reader (option ``filter``, in-process, no Spark): the batch form gets the
  reader's own Arrow batch, the per-message form decodes each message with ``read_message``.

The filter keeps messages whose ``region`` property is ``cn-hangzhou`` and whose body is longer
than 60 bytes (a property and a field, as a user would write it).

Run: ``.venv/bin/python -m pytest bench/bench_filters.py`` (``make bench`` runs all).
"""
from __future__ import annotations

import pytest

import cq

pa = pytest.importorskip("pyarrow")
pc = pytest.importorskip("pyarrow.compute")

STORE_MESSAGES = 100_000
TOPIC = "SampleTopic"


def per_message(message: cq.Message) -> bool:
    return message.properties.get("region") == "cn-hangzhou" and len(message.body) > 60


@cq.batch_filter
def batch(records) -> object:
    region = pc.map_lookup(records["properties"], pa.scalar("region"), "first")
    return pc.and_(pc.fill_null(pc.equal(region, "cn-hangzhou"), False),
                   pc.greater(pc.binary_length(records["body"]), 60))


@pytest.fixture(scope="module")
def sample_store(tmp_path_factory):
    from cq.writer.sample import generate_sample_store

    root = tmp_path_factory.mktemp("filters") / "store"
    generate_sample_store(root, messages=STORE_MESSAGES, seed=5)
    return str(root)


def _consume(root: str, fn) -> int:
    store = cq.Store(root)
    try:
        return sum(1 for _ in store.consume(TOPIC, "GID_CUSTOM", tags="*", filter=fn))
    finally:
        store.close()


def _units(root: str) -> int:
    store = cq.Store(root)
    try:
        return sum(len(store.consume_queue(TOPIC, q)) for q in store.queue_ids(TOPIC))
    finally:
        store.close()


@pytest.mark.parametrize("form", ["batch", "per-message"])
def test_consume_custom_filter(benchmark, sample_store, form):
    units = _units(sample_store)
    benchmark.group = f"Store.consume with a custom filter, {units:,} messages"
    benchmark.extra_info.update(items=units, role="ours" if form == "batch" else "alternative")
    fn = batch if form == "batch" else per_message
    kept = benchmark.pedantic(_consume, (sample_store, fn), rounds=3)
    assert kept == _consume(sample_store, per_message if form == "batch" else batch)


def _read(root: str, spec: str) -> int:
    pytest.importorskip("pyspark")
    from pyspark_udfs import _reader
    from pyspark_udfs.datasource import ConsumeQueueSlice, ReadOptions

    opts = ReadOptions(path=root, topic=TOPIC, message_filter=spec)
    schema = opts.schema()
    store = cq.Store(root)
    parts = [ConsumeQueueSlice(TOPIC, q, 0, len(store.consume_queue(TOPIC, q))) for q in store.queue_ids(TOPIC)]
    store.close()
    return sum(b.num_rows for part in parts for b in _reader.read_slice(opts, schema, part, []))


@pytest.mark.parametrize("form", ["batch", "per-message"])
def test_reader_custom_filter(benchmark, sample_store, form):
    units = _units(sample_store)
    benchmark.group = f"data source reader in-process with a custom filter, {units:,} messages"
    benchmark.extra_info.update(items=units, role="ours" if form == "batch" else "alternative")
    spec = f"bench_filters:{'batch' if form == 'batch' else 'per_message'}"
    kept = benchmark.pedantic(_read, (sample_store, spec), rounds=3)
    assert kept == _consume(sample_store, per_message)
