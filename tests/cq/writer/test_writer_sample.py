"""generate_sample_store and ``rmqfilter gen-store``: deterministic sample stores whose bitmaps are right."""
from __future__ import annotations

import json
from collections import Counter

import numpy as np
import pytest

import bloom
import cq
import selector
from cq.writer.sample import SAMPLE_GROUPS, SAMPLE_TAGS, SampleStore, generate_sample_store
from cq.writer.writer import SqlGroup
from rmqfilter import main
from tests.cq.writer.test_writer import store_files

SMALL = {"commit_log_file_size": 1 << 20, "ext_file_size": 1 << 16, "consume_queue_file_size": 20_000}


@pytest.fixture(scope="module")
def sample(tmp_path_factory) -> SampleStore:
    root = tmp_path_factory.mktemp("sample") / "store"
    return generate_sample_store(root, messages=6000, seed=11, **SMALL)


def test_sample_description_matches_the_store(sample):
    store = cq.Store(sample.root)
    assert store.topics() == sorted(sample.topics)
    for topic, queues in sample.topics.items():
        assert store.queue_ids(topic) == list(range(queues))
    total = sum(len(store.consume_queue(t, q)) for t, n in sample.topics.items() for q in range(n))
    assert total == sample.messages == 6000
    assert sample.groups == [SqlGroup(sample.main_topic, g, sql) for g, sql in SAMPLE_GROUPS]
    assert len(store.commit_log.files) > 1  # 1 MiB commit log files: the sample spans several
    d = sample.to_dict()
    assert json.loads(json.dumps(d)) == d and d["groups"][0]["sql"] == SAMPLE_GROUPS[0][1]
    store.close()


def test_sample_contents_are_skewed_like_real_traffic(sample):
    store = cq.Store(sample.root)
    messages = list(store.commit_log.messages())
    by_topic = Counter(m.topic for m in messages)
    assert by_topic[sample.main_topic] > 0.6 * len(messages)
    tags = Counter(m.tags for m in messages)
    assert 0.02 < tags[None] / len(messages) < 0.08
    ranked = [t for t, _ in tags.most_common() if t is not None]
    assert ranked[0] == SAMPLE_TAGS[0] and set(ranked) == set(SAMPLE_TAGS)
    assert tags["TagA"] > 3 * tags["TagH"]
    assert all({"region", "price", "priority", "UNIQ_KEY", "KEYS", "CLUSTER"} <= set(m.properties)
               for m in messages)
    assert 0.05 < sum("color" not in m.properties for m in messages) / len(messages) < 0.15
    assert len({m.properties["UNIQ_KEY"] for m in messages}) == len(messages)
    store.close()


def test_sample_bitmaps_are_the_brokers(sample):
    """Every ext bitmap on the main topic is exactly the OR of the groups whose selector is TRUE."""
    store = cq.Store(sample.root)
    bf = bloom.BloomFilter()
    compiled = [(selector.compile(g.sql), bf.calc_bit_positions(g.bloom_key)) for g in sample.groups]
    checked = hits = 0
    for q in range(sample.topics[sample.main_topic]):
        units = store.consume_queue(sample.main_topic, q).read()
        ext = store.ext(sample.main_topic, q)
        for unit in units:
            msg = store.commit_log.read_message(int(unit["commit_log_offset"]))
            want = np.zeros(bf.m // 8, dtype=np.uint8)
            for sel, positions in compiled:
                if sel.evaluate(msg.properties) is True:
                    hits += 1
                    for p in positions:
                        want[p // 8] |= 1 << (p % 8)
            got = ext.get(int(unit["tags_code"]))
            assert got.filter_bitmap == want.tobytes()
            assert got.tags_code == cq.tags_code(msg.tags) and got.msg_store_time == msg.store_timestamp
            checked += 1
    assert checked > 3000 and hits > 500
    for topic in sample.topics:
        if topic != sample.main_topic:
            unit = store.consume_queue(topic, 0).read(0, 1)[0]
            assert store.ext(topic, 0).get(int(unit["tags_code"])).filter_bitmap is None
    store.close()


def test_sample_consume_agrees_with_brute_force(sample):
    store = cq.Store(sample.root)
    group = sample.groups[1]
    got = sorted(m.commit_log_offset for m in store.consume(sample.main_topic, group.group, sql=group.sql))
    sel = selector.compile(group.sql)
    want = sorted(m.commit_log_offset for m in store.commit_log.messages()
                  if m.topic == sample.main_topic and sel.matches(m.properties))
    assert got == want and len(want) > 50
    store.close()


def test_same_seed_same_bytes_other_seed_other_bytes(tmp_path):
    a = generate_sample_store(tmp_path / "a", messages=1500, seed=5, **SMALL)
    generate_sample_store(tmp_path / "b", messages=1500, seed=5, **SMALL)
    generate_sample_store(tmp_path / "c", messages=1500, seed=6, **SMALL)
    assert store_files(tmp_path / "a") == store_files(tmp_path / "b")
    assert store_files(tmp_path / "a") != store_files(tmp_path / "c")
    assert a.root == str(tmp_path / "a")


def test_sample_arguments_are_checked(tmp_path):
    with pytest.raises(ValueError, match="messages must be in"):
        generate_sample_store(tmp_path / "x", messages=-1)
    with pytest.raises(ValueError, match="distinct"):
        generate_sample_store(tmp_path / "x", topics=["A", "A"])
    with pytest.raises(ValueError, match="topic pattern"):
        generate_sample_store(tmp_path / "x", messages=10, topics=["bad topic"])
    with pytest.raises(ValueError, match="queues must be in"):
        generate_sample_store(tmp_path / "x", queues=0)


def test_gen_store_command(tmp_path, capsys):
    root = tmp_path / "cli"
    assert main(["gen-store", str(root), "--messages", "2000", "--seed", "4", "--topics", "Main", "Side",
                 "--queues", "3", "--json", "--progress", "never", "--commit-log-file-size", "1048576",
                 "--ext-file-size", "65536", "--consume-queue-file-size", "20000"]) == 0
    out, err = capsys.readouterr()
    info = json.loads(out)
    assert info["messages"] == 2000 and info["topics"] == {"Main": 3, "Side": 2}
    assert [g["group"] for g in info["groups"]] == [g for g, _ in SAMPLE_GROUPS]
    assert "wrote 2,000 messages" in err
    same = generate_sample_store(tmp_path / "api", messages=2000, seed=4, topics=["Main", "Side"], queues=3,
                                 **SMALL)
    assert store_files(root) == store_files(tmp_path / "api") and same.topics == info["topics"]
    # A second run refuses to overwrite the store.
    assert main(["gen-store", str(root), "--messages", "10"]) == 2
    assert "already holds a store" in capsys.readouterr().err


def test_sample_has_a_few_compressed_attachments(sample):
    store = cq.Store(sample.root)
    messages = list(store.commit_log.messages(verify_crc=True))
    compressed = [m for m in messages if m.sys_flag & 0x1]
    assert 0.003 < len(compressed) / len(messages) < 0.03
    for m in compressed:
        assert m.sys_flag & 0x700 == 0x300
        body = json.loads(m.uncompressed_body())
        assert len(body["attachment"]) >= 4000 and body["region"] == m.properties["region"]
    assert all(json.loads(m.body)["amount"] == float(m.properties["price"]) for m in messages if not m.sys_flag)
    store.close()
