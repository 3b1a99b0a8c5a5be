"""Corrupt stores give StoreFormatError naming the file and byte offset, or a counted skip; never a crash."""
from __future__ import annotations

import os
import random
import struct

import numpy as np
import pytest
from helpers import entry_root, load_jsonl, patch_file

import cq
from cq import format as fmt
from cq.readers.registry import READERS

ROWS = load_jsonl("golden_store.jsonl")
TOPIC = "GoldenFilterTopic"


def _first_cl(root):
    return str(root / "commitlog" / fmt.file_name(0))


def test_truncated_consume_queue_file(golden_copy):
    path = golden_copy / "consumequeue" / TOPIC / "0" / fmt.file_name(0)
    os.truncate(path, 990)
    with pytest.raises(cq.StoreFormatError) as exc:
        cq.Store(golden_copy).consume_queue(TOPIC, 0)
    assert exc.value.path == str(path) and exc.value.offset == 990
    assert str(path) in str(exc.value) and "990" in str(exc.value)


def test_truncated_commit_log_file(golden_copy):
    path = golden_copy / "commitlog" / fmt.file_name(65536)
    os.truncate(path, 1000)
    with pytest.raises(cq.StoreFormatError) as exc:
        cq.Store(golden_copy).commit_log.messages()
    assert exc.value.path == str(path)


def test_trailing_empty_file_is_ignored_like_the_broker(golden_copy):
    open(golden_copy / "commitlog" / fmt.file_name(7 * 65536), "wb").close()
    assert len(list(cq.Store(golden_copy).commit_log.messages())) == 300


def test_truncated_ext_file(golden_copy):
    path = golden_copy / "consumequeue_ext" / TOPIC / "1" / fmt.file_name(3072)
    os.truncate(path, 100)
    with pytest.raises(cq.StoreFormatError, match="ConsumeQueueExt") as exc:
        cq.Store(golden_copy).ext(TOPIC, 1)
    assert exc.value.path == str(path)


def test_bad_magic_names_file_and_offset(golden_copy):
    row = ROWS[3]
    patch_file(_first_cl(golden_copy), row["commitLogOffset"] + 4, b"\x12\x34\x56\x78")
    store = cq.Store(golden_copy)
    with pytest.raises(cq.StoreFormatError, match="bad magic code 0x12345678") as exc:
        store.commit_log.read_message(row["commitLogOffset"])
    assert (exc.value.path, exc.value.offset) == (_first_cl(golden_copy), row["commitLogOffset"])
    with pytest.raises(cq.StoreFormatError) as exc:
        list(store.commit_log.messages())
    assert exc.value.offset == row["commitLogOffset"]
    # non-strict: stop where the broker's recovery would truncate
    assert len(list(store.commit_log.messages(strict=False))) == 3


@pytest.mark.parametrize("total", [-5, 0x7FFFFFF0, 10])
def test_bad_total_size(golden_copy, total):
    row = ROWS[5]
    patch_file(_first_cl(golden_copy), row["commitLogOffset"], struct.pack(">i", total))
    with pytest.raises(cq.StoreFormatError, match="TOTALSIZE") as exc:
        cq.Store(golden_copy).commit_log.read_message(row["commitLogOffset"])
    assert exc.value.offset == row["commitLogOffset"]


def test_field_lengths_that_disagree_with_total_size(golden_copy):
    row = ROWS[0]
    body_len_at = row["commitLogOffset"] + 84
    patch_file(_first_cl(golden_copy), body_len_at, struct.pack(">i", row["bodyLength"] - 3))
    store = cq.Store(golden_copy)
    with pytest.raises(cq.StoreFormatError, match="add up"):
        store.commit_log.read_message(row["commitLogOffset"])
    with pytest.raises(cq.StoreFormatError, match="add up") as exc:
        store.commit_log.gather_properties([row["commitLogOffset"]])
    assert exc.value.path == _first_cl(golden_copy)
    patch_file(_first_cl(golden_copy), body_len_at, struct.pack(">i", 10**9))
    with pytest.raises(cq.StoreFormatError, match="BODYLENGTH"):
        cq.Store(golden_copy).commit_log.read_message(row["commitLogOffset"])


def test_body_crc_checked_on_request(golden_copy):
    row = ROWS[0]
    patch_file(_first_cl(golden_copy), row["commitLogOffset"] + 88, b"X")  # first body byte
    store = cq.Store(golden_copy)
    store.commit_log.read_message(row["commitLogOffset"])  # not checked by default, like reput
    with pytest.raises(cq.StoreFormatError, match="CRC"):
        store.commit_log.read_message(row["commitLogOffset"], verify_crc=True)


def test_offset_outside_the_log(golden_copy):
    with pytest.raises(cq.StoreFormatError, match="outside the commit log"):
        cq.Store(golden_copy).commit_log.read_message(10**12)
    with pytest.raises(cq.StoreFormatError, match="outside the commit log"):
        cq.Store(golden_copy).commit_log.gather_properties([0, 10**12])


def test_unit_pointing_past_the_log_is_a_counted_skip(golden_copy):
    path = golden_copy / "consumequeue" / TOPIC / "0" / fmt.file_name(0)
    patch_file(path, 20 * 2, struct.pack(">q", 5 * 10**6))   # third unit -> far past the log
    result = cq.Store(golden_copy).consume(TOPIC, "G", tags="*")
    got = list(result)
    assert len(got) == 199 and result.stats.commit_log_missing == 1
    assert 2 not in [m.queue_offset for m in got if m.queue_id == 0]


def test_negative_unit_size_ends_the_queue(golden_copy):
    path = golden_copy / "consumequeue" / TOPIC / "0" / fmt.file_name(1000)
    patch_file(path, 20 * 10 + 8, struct.pack(">i", -1))
    cqueue = cq.Store(golden_copy).consume_queue(TOPIC, 0)
    assert cqueue.max_offset == 60  # the broker's validity rule: size <= 0 is the end


def test_ext_address_out_of_range(golden_copy):
    path = golden_copy / "consumequeue" / TOPIC / "0" / fmt.file_name(0)
    for i, addr in enumerate([cq.decorate(10**9), cq.decorate(4000), cq.MAX_ADDR]):
        patch_file(path, 20 * i + 12, struct.pack(">q", addr))
    store = cq.Store(golden_copy)
    ext = store.ext(TOPIC, 0)
    assert ext.get(cq.decorate(10**9)) is None
    assert ext.get(cq.decorate(4000)) is None  # past the write position of the last file
    assert ext.get(5) is None                  # not an ext address
    result = store.consume(TOPIC, "G", tags="NoSuchTag")
    got = list(result)
    # unresolvable tags codes are "null": the broker lets them through, the client drops them
    assert result.stats.ext_missing == 3 and result.stats.passed_consume_queue == 3
    assert got == [] and result.stats.client_filtered == 3


def test_ext_unit_whose_bitmap_runs_past_the_data(golden_copy):
    path = golden_copy / "consumequeue_ext" / TOPIC / "0" / fmt.file_name(0)
    patch_file(path, 18, struct.pack(">h", 2000))
    ext = cq.Store(golden_copy).ext(TOPIC, 0)
    with pytest.raises(cq.StoreFormatError, match="bitmap") as exc:
        ext.get(cq.decorate(0))
    assert exc.value.path == str(path) and exc.value.offset == 0


def test_ext_unit_size_past_file_end(golden_copy):
    path = golden_copy / "consumequeue_ext" / TOPIC / "0" / fmt.file_name(3072)
    patch_file(path, 0, struct.pack(">h", 2000))
    with pytest.raises(cq.StoreFormatError, match="past the end") as exc:
        _ = cq.Store(golden_copy).ext(TOPIC, 0).max_offset
    assert exc.value.path == str(path)


def test_not_a_store(tmp_path):
    with pytest.raises(cq.StoreFormatError, match="not a RocketMQ store"):
        cq.Store(tmp_path)
    with pytest.raises(cq.StoreFormatError, match="not a directory"):
        cq.Store(tmp_path / "missing")


def test_misnamed_files_are_ignored_and_misaligned_starts_refused(golden_copy):
    d = golden_copy / "consumequeue" / TOPIC / "0"
    (d / "README").write_text("not a queue file")
    assert cq.Store(golden_copy).consume_queue(TOPIC, 0).max_offset == 100
    os.rename(d / fmt.file_name(1000), d / fmt.file_name(1500))
    with pytest.raises(cq.StoreFormatError, match="multiple"):
        cq.Store(golden_copy).consume_queue(TOPIC, 0)


def _contents(files) -> dict:
    out = {}
    for p in files:
        with open(p, "rb") as f:
            out[p] = f.read()
    return out


def _corrupt(rng, originals: dict, how_many: int) -> None:
    """Write every file back, then patch 1..8 random bytes in ``how_many`` of them."""
    for p, data in originals.items():
        with open(p, "wb") as f:
            f.write(data)
    for p in rng.sample(list(originals), how_many):
        for _ in range(rng.randint(1, 8)):
            patch_file(p, rng.randrange(len(originals[p])), bytes([rng.randrange(256)]))


def test_random_corruption_never_crashes(golden_copy):
    """Flip random bytes everywhere; every failure must be a StoreFormatError."""
    rng = random.Random(20250919)
    files = [os.path.join(d, f) for d, _, fs in os.walk(golden_copy) for f in fs
             if "index" not in d and f not in ("checkpoint", "abort.bak")]
    originals = _contents(files)
    for _ in range(60):
        _corrupt(rng, originals, 3)
        try:
            store = cq.Store(golden_copy)
            list(store.commit_log.messages(strict=False))
            for t in store.topics():
                for q in store.queue_ids(t):
                    units = store.consume_queue(t, q).read()
                    ext = store.ext(t, q)
                    ext.read_many(units["tags_code"])
                    list(store.consume(t, "G", tags="TagA || TagB"))
                    offs = units["commit_log_offset"][(units["commit_log_offset"] >= 0)
                                                      & (units["commit_log_offset"] < 7 * 65536)]
                    store.commit_log.gather_properties(np.unique(offs))
        except cq.StoreFormatError as exc:
            assert exc.path is not None


@pytest.mark.parametrize("entry", READERS, ids=repr)
def test_random_corruption_of_each_registered_reader_never_crashes(golden_copy, entry):
    """Random bytes over the files a registered reader reads (cq/readers/registry.py): it reads
    them whole or raises StoreFormatError naming a file of the store and a byte offset."""
    rng = random.Random(f"corrupt-{entry.name}")
    root = entry_root(entry, golden_copy)
    files = entry.files(str(root))
    assert files, f"{entry.store} has no file for {entry.name}"
    originals = _contents(files)
    for _ in range(30):
        _corrupt(rng, originals, rng.randint(1, len(files)))
        try:
            reader = entry.open(str(root))
            try:
                entry.read_all(reader)
            finally:
                reader.close()
        except cq.StoreFormatError as exc:
            assert exc.path is not None and exc.path.startswith(str(root)) and exc.offset is not None


@pytest.mark.parametrize("how", [{"sql": "a > 5"}, {"tags": "TagA"}])
def test_consume_over_an_ext_unit_running_past_the_data(golden_copy, how):
    path = golden_copy / "consumequeue_ext" / TOPIC / "0" / fmt.file_name(3072)
    # the last unit of the last file claims a bitmap far past the write position
    last = max(r["ext"]["fileOffset"] for r in ROWS if r["topic"] == TOPIC and r["queueId"] == 0)
    patch_file(path, last - 3072 + 18, struct.pack(">h", 900))
    with pytest.raises(cq.StoreFormatError, match="past the readable end") as exc:
        list(cq.Store(golden_copy).consume(TOPIC, "GID_SQL_A", queue_ids=[0], **how))
    assert exc.value.path == str(path) and exc.value.offset == last - 3072


def test_deleted_commit_log_files_move_the_queue_minimum(golden_copy):
    os.remove(golden_copy / "commitlog" / fmt.file_name(0))
    store = cq.Store(golden_copy)
    assert store.commit_log.min_offset == 65536
    for q in (0, 1):
        rows = sorted((r for r in ROWS if r["topic"] == TOPIC and r["queueId"] == q), key=lambda r: r["queueOffset"])
        first_kept = next(r["queueOffset"] for r in rows if r["commitLogOffset"] >= 65536)
        cqueue = store.consume_queue(TOPIC, q)
        assert cqueue.min_offset == first_kept
        got = [m.queue_offset for m in store.consume(TOPIC, "G", tags="*", queue_ids=[q])]
        assert got == [r["queueOffset"] for r in rows if r["commitLogOffset"] >= 65536]
