"""The tiered store's POSIX layout, on files RocketMQ's own broker wrote (docs/formats.md#tiered-storage).

``tests/data/tiered_store`` (tests/data/TIERED_STORE.md): a store whose broker ran ``TieredMessageStore``
with the POSIX back end, its tier in ``tier/``; ``tests/data/tiered_store.json`` holds what the broker and
its consumers reported. Bad input names the file and byte offset.
"""
from __future__ import annotations

import itertools
import json
import os
import shutil

import pytest
from helpers import DATA

import cq
from cq import format as fmt
from cq.readers.tiered import TieredMetadata, tier_file_name, tier_hash

STORE = DATA / "tiered_store"
TIER = STORE / "tier"
FACTS = json.loads((DATA / "tiered_store.json").read_text())
TOPIC = "TieredTopic"


@pytest.fixture
def tier():
    t = cq.Tier(STORE, TIER)
    yield t
    t.close()


@pytest.fixture
def copy(tmp_path):
    """A writable copy of the store and its tier."""
    root = tmp_path / "tiered_store"
    shutil.copytree(STORE, root)
    return root


def queue_dir(root, queue_id: int, kind: str):
    return root / "tier" / f"{tier_hash('HarnessCluster')}_HarnessCluster" / "broker-a" / TOPIC / str(queue_id) / kind


def test_names_follow_the_brokers_hash_rules():
    assert tier_file_name(0) == "cfcd208400000000000000000000"   # md5("0")[:8], then 20 digits
    assert tier_hash("HarnessCluster") == "5437f86d"
    assert sorted(os.listdir(TIER)) == ["5437f86d_HarnessCluster"]


def test_the_metadata_lists_each_queues_segments():
    meta = TieredMetadata(STORE)
    assert meta.queues == {(TOPIC, 0): "broker-a", (TOPIC, 1): "broker-a"}
    assert meta.topic_ids == {TOPIC: 0}
    segments = meta.segments(0, f"broker-a/{TOPIC}/0")
    assert [s.base_offset for s in segments] == [0, 49114, 97975, 146810, 195936]
    assert all(a.base_offset + a.size == b.base_offset for a, b in itertools.pairwise(segments))


def test_each_queue_reads_whole_from_its_flat_files(tier):
    for q in (0, 1):
        queue = tier.queue(TOPIC, q)
        # the tier's minimum is the broker's (the admin API's, the smaller of local and tier)
        admin = next(r for r in FACTS["topics"][TOPIC] if r["queue_id"] == q)
        assert queue.min_offset == admin["min_offset"] == 0
        assert queue.end_offset == 550 < admin["max_offset"]       # the tier lags the local queue
        units = queue.units(queue.min_offset, queue.end_offset)
        msgs = queue.messages()
        assert [m.queue_offset for m in msgs] == list(range(550))
        # PHYSICALOFFSET is rewritten to the record's offset in the flat CommitLog (docs/formats.md#tiered-segments)
        assert [m.commit_log_offset for m in msgs] == units["commit_log_offset"].tolist()
        assert all(m.topic == TOPIC and m.queue_id == q for m in msgs)
        # the units' tags codes are the records' tags' hashes (resolved, never ext addresses)
        assert units["tags_code"].tolist() == [cq.tags_code(m.tags) for m in msgs]


def test_what_the_consumers_received_below_the_local_minimum_is_in_the_tier(tier):
    for q in (0, 1):
        queue = tier.queue(TOPIC, q)
        keys = {m.queue_offset: m.properties["UNIQ_KEY"] for m in queue.messages()}
        got = [(o, u) for qid, o, u, _ in FACTS["received"]["GID_TIER_STAR"] if qid == q and o < 550]
        assert got and all(keys[o] == u for o, u in got)


def test_a_missing_tier_or_cluster_directory_is_named(tmp_path):
    with pytest.raises(cq.TieredStoreError, match="does not exist") as e:
        cq.Tier(STORE, tmp_path / "nowhere")
    assert e.value.path == str(tmp_path / "nowhere")
    with pytest.raises(cq.TieredStoreError, match="no cluster directory"):
        cq.Tier(STORE, tmp_path)


def test_a_missing_segment_is_named(copy):
    gone = queue_dir(copy, 0, "COMMIT_LOG") / tier_file_name(97975)
    gone.unlink()
    t = cq.Tier(copy, copy / "tier")
    with pytest.raises(cq.StoreFormatError, match="segment 97975 listed in the metadata is missing") as e:
        t.queue(TOPIC, 0)
    assert e.value.path == str(gone)


def test_a_segment_shorter_than_its_metadata_size_is_named(copy):
    short = queue_dir(copy, 1, "COMMIT_LOG") / tier_file_name(0)
    os.truncate(short, 1000)
    with pytest.raises(cq.StoreFormatError, match="holds 1000 bytes, its metadata says 48763") as e:
        cq.Tier(copy, copy / "tier").queue(TOPIC, 1)
    assert (e.value.path, e.value.offset) == (str(short), 1000)


def test_a_unit_outside_the_flat_commit_log_is_named(copy):
    cq_file = queue_dir(copy, 0, "CONSUME_QUEUE") / tier_file_name(0)
    data = bytearray(cq_file.read_bytes())
    data[7 * 20:7 * 20 + 8] = (10**9).to_bytes(8, "big")
    cq_file.write_bytes(bytes(data))
    queue = cq.Tier(copy, copy / "tier").queue(TOPIC, 0)
    with pytest.raises(cq.StoreFormatError, match="queue offset 7 points at flat CommitLog bytes") as e:
        queue.units(0, 20)
    assert (e.value.path, e.value.offset) == (str(cq_file), 7 * fmt.CQ_STORE_UNIT_SIZE)
    assert len(queue.units(0, 7)) == 7


def test_a_record_that_does_not_decode_is_named(copy):
    log_file = queue_dir(copy, 0, "COMMIT_LOG") / tier_file_name(0)
    data = bytearray(log_file.read_bytes())
    data[4:8] = b"\x00\x00\x00\x00"    # the first record's MAGICCODE
    log_file.write_bytes(bytes(data))
    queue = cq.Tier(copy, copy / "tier").queue(TOPIC, 0)
    with pytest.raises(cq.StoreFormatError, match="magic") as e:
        queue.messages(0, 1)
    assert (e.value.path, e.value.offset) == (str(log_file), 0)
