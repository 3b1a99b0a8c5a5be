"""Property tests: whatever StoreWriter writes, the reader (cq.Store) reads back unchanged.

Random topics, queues, bodies, properties, hosts (IPv4/IPv6), transaction
types and tiny file sizes, so blank end-of-file records, ConsumeQueue file
rolls and ext end markers all happen.
"""
from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

import cq
from cq.format import is_ext_addr, undecorate
from cq.writer.writer import StoreWriter
from tests.cq.writer.test_writer import store_files

TOPICS = st.sampled_from(["TopicA", "TopicB", "%RETRY%GID_x", "T" * 130])
PROP_NAME = st.text(st.characters(blacklist_characters="\x01\x02", blacklist_categories=("Cs",)), min_size=1,
                    max_size=8).filter(lambda name: name != "__CRC32#")  # the writer's own, when enabled
PROP_VALUE = st.text(st.characters(blacklist_characters="\x02", blacklist_categories=("Cs",)), max_size=20)
HOSTS = st.sampled_from(["10.0.0.1:1234", "192.168.1.2:0", "[::1]:65535", "[2001:db8::7]:10911"])

MESSAGE = st.fixed_dictionaries(
    {
        "topic": TOPICS,
        "queue_id": st.integers(0, 2),
        "body": st.binary(max_size=300),
        "properties": st.dictionaries(PROP_NAME, PROP_VALUE, max_size=6),
        "tags": st.one_of(st.none(), st.sampled_from(["TagA", "标签", "Ωmega", ""])),
        "keys": st.one_of(st.none(), st.lists(st.sampled_from(["k1", "ключ"]), max_size=3)),
        "flag": st.integers(-(2**31), 2**31 - 1),
        "sys_flag": st.sampled_from([0, 0x4, 0x8, 0xC, 0x2]),
        "born_timestamp": st.integers(0, 2**45),
        "store_timestamp": st.integers(0, 2**45),
        "born_host": HOSTS,
        "store_host": HOSTS,
        "reconsume_times": st.integers(0, 16),
        "prepared_transaction_offset": st.integers(0, 2**40),
    }
)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(MESSAGE, min_size=1, max_size=40), st.booleans(), st.booleans())
# found by Hypothesis: a TAGS property with tags=None is the message's tag, and its code the unit's
@example([{"topic": "TopicA", "queue_id": 0, "body": b"", "properties": {"TAGS": "0"}, "tags": None, "keys": None,
           "flag": 0, "sys_flag": 0, "born_timestamp": 0, "store_timestamp": 0, "born_host": "10.0.0.1:1234",
           "store_host": "10.0.0.1:1234", "reconsume_times": 0, "prepared_transaction_offset": 0}], False, False)
def test_written_messages_read_back_identically(messages, enable_ext, prop_crc):
    root = tempfile.mkdtemp(prefix="rmq-writer-")
    try:
        with StoreWriter(root, commit_log_file_size=2048, consume_queue_file_size=100, ext_file_size=64,
                         enable_ext=enable_ext, cluster="C", enabled_append_prop_crc=prop_crc) as writer:
            results = [writer.append(**m) for m in messages]
        store = cq.Store(root)
        read = list(store.commit_log.messages(verify_crc="property" if prop_crc else True))
        assert [m.commit_log_offset for m in read] == [r.commit_log_offset for r in results]
        for m, r, got in zip(messages, results, read):
            assert got.topic == m["topic"] and got.queue_id == m["queue_id"]
            assert got.body == m["body"] and got.flag == m["flag"]
            assert got.sys_flag & ~0x30 == m["sys_flag"]
            assert got.born_host == m["born_host"] and got.store_host == m["store_host"]
            assert got.born_timestamp == m["born_timestamp"]
            assert got.store_timestamp == m["store_timestamp"]
            assert got.reconsume_times == m["reconsume_times"]
            assert got.prepared_transaction_offset == m["prepared_transaction_offset"]
            assert got.store_size == r.store_size and got.msg_id == r.msg_id
            want = {k: v for k, v in m["properties"].items() if v}
            if m["tags"]:
                want["TAGS"] = m["tags"]
            if m["keys"]:
                want["KEYS"] = " ".join(m["keys"])
            want["CLUSTER"] = "C"
            got_props = dict(got.properties)
            assert (got_props.pop("__CRC32#", None) is not None) == prop_crc
            assert got_props == want
            assert got.queue_offset == (r.queue_offset or 0)
            # the broker's tags code is the stored TAGS property's (tags=, or a TAGS in properties)
            assert r.tags_code == cq.tags_code(want.get("TAGS"))
        # Every dispatched message has its unit at its queue offset, pointing back at it.
        for m, r in zip(messages, results):
            if r.queue_offset is None:
                continue
            unit = store.consume_queue(m["topic"], m["queue_id"]).read(r.queue_offset, 1)[0]
            assert (unit["commit_log_offset"], unit["size"]) == (r.commit_log_offset, r.store_size)
            if enable_ext:
                assert is_ext_addr(int(unit["tags_code"])) and int(unit["tags_code"]) == r.ext_address
                ext = store.ext(m["topic"], m["queue_id"]).get(r.ext_address)
                assert (ext.tags_code, ext.msg_store_time, ext.filter_bitmap) == (
                    r.tags_code, m["store_timestamp"], None)
                assert undecorate(r.ext_address) % 64 + ext.size + 4 <= 64
            else:
                assert int(unit["tags_code"]) == r.tags_code
        for (topic, qid), n in _dispatched_counts(messages, results).items():
            assert len(store.consume_queue(topic, qid)) == n
        store.close()
    finally:
        shutil.rmtree(root, ignore_errors=True)


def _dispatched_counts(messages, results):
    counts: dict = {}
    for m, r in zip(messages, results):
        if r.queue_offset is not None:
            counts[(m["topic"], m["queue_id"])] = counts.get((m["topic"], m["queue_id"]), 0) + 1
    return counts


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(MESSAGE, min_size=2, max_size=30), st.data())
def test_append_mode_equals_writing_in_one_go(messages, data):
    split = data.draw(st.integers(1, len(messages) - 1))
    config = {"commit_log_file_size": 1024, "consume_queue_file_size": 60, "ext_file_size": 48,
              "enable_ext": True}
    one, two = tempfile.mkdtemp(), tempfile.mkdtemp()
    try:
        with StoreWriter(one, **config) as w:
            for m in messages:
                w.append(**m)
        with StoreWriter(two, **config) as w:
            for m in messages[:split]:
                w.append(**m)
        with StoreWriter(two, append=True, **config) as w:
            for m in messages[split:]:
                w.append(**m)
        assert store_files(Path(one)) == store_files(Path(two))
    finally:
        shutil.rmtree(one, ignore_errors=True)
        shutil.rmtree(two, ignore_errors=True)


GROUP_SQL = st.sampled_from([
    "a IS NOT NULL", "a > 5", "TAGS = 'TagA' OR b = 'x'", "a = 1 OR a = 'y'", "NOT (b = 'x')",
    "color IN ('red', 'grün') AND a BETWEEN 1 AND 9",
])
SQL_PROPS = st.dictionaries(st.sampled_from(["a", "b", "color"]),
                            st.sampled_from(["1", "7", "x", "y", "red", "grün", "", "3.5"]), max_size=3)


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(MESSAGE, min_size=1, max_size=30), st.lists(SQL_PROPS, min_size=30, max_size=30),
       st.lists(st.tuples(st.sampled_from(["TopicA", "TopicB"]), GROUP_SQL), min_size=1, max_size=4))
def test_rebuild_equals_dispatching_with_the_groups_in_place(messages, props, groups):
    """rebuild_bitmaps over a plain store gives the files the writer gives with the groups registered."""
    from cq.writer.rebuild import rebuild_bitmaps

    groups = [(topic, f"GID_{i}", sql) for i, (topic, sql) in enumerate(groups)]
    messages = [{**m, "properties": {**m["properties"], **p}} for m, p in zip(messages, props)]
    config = {"commit_log_file_size": 2048, "consume_queue_file_size": 100, "ext_file_size": 80}
    direct, plain, rebuilt = (tempfile.mkdtemp() for _ in range(3))
    try:
        with StoreWriter(direct, enable_ext=True, **config) as w:
            for g in groups:
                w.register_group(*g)
            for m in messages:
                w.append(**m)
        with StoreWriter(plain, **config) as w:
            for m in messages:
                w.append(**m)
        shutil.rmtree(rebuilt)
        rebuild_bitmaps(plain, rebuilt, groups, ext_file_size=80)
        assert store_files(Path(direct)) == store_files(Path(rebuilt))
    finally:
        for d in (direct, plain, rebuilt):
            shutil.rmtree(d, ignore_errors=True)
