"""Finding messages (cq.analyses.find): the IndexFiles and a scan of the topic find the same records."""
from __future__ import annotations

import json

import pytest
from helpers import DATA

import cq
from cq.analyses.find import (
    MessageNotFoundError,
    find_messages,
    message_at,
    parse_offset_msg_id,
    query_index,
    scan_topic,
)
from cq.writer.sample import generate_sample_store

GOLDEN = DATA / "golden_store"


def golden_rows() -> list[dict]:
    with open(DATA / "golden_store.jsonl", encoding="utf-8") as f:
        return [json.loads(line) for line in f]


@pytest.fixture(scope="module")
def sample_store(tmp_path_factory):
    """A small sample store: it has no index files."""
    root = tmp_path_factory.mktemp("find") / "store"
    generate_sample_store(root, messages=200, seed=5, commit_log_file_size=1 << 20, ext_file_size=1 << 16,
                          consume_queue_file_size=20_000)
    return str(root)


@pytest.fixture(scope="module")
def store():
    s = cq.Store(GOLDEN)
    yield s
    s.close()


def test_the_index_and_a_scan_find_the_same_records(store):
    checked = 0
    for row in golden_rows()[::11]:
        keys = [("uniq", row["uniqKey"])] if row["uniqKey"] else []
        keys += [("key", k) for k in (row["keys"] or "").split(" ") if k]
        for kind, value in keys:
            key, uniq = (None, value) if kind == "uniq" else (value, None)
            found, how, _note = find_messages(store, row["topic"], **({"msg_id": value} if uniq else {"key": value}))
            scanned = sorted(scan_topic(store, row["topic"], key, uniq), key=lambda m: m.commit_log_offset)
            assert how == "index"
            assert [m.commit_log_offset for m in found] == [m.commit_log_offset for m in scanned]
            assert row["commitLogOffset"] in [m.commit_log_offset for m in found]
            checked += 1
    assert checked > 20


def test_query_index_confirms_candidates_and_keeps_each_topic_apart(store):
    row = next(r for r in golden_rows() if r["keys"])
    key = row["keys"].split(" ")[0]
    topics = sorted({r["topic"] for r in golden_rows()})
    found, candidates, *_ = query_index(store, topics, key, None, served_from=lambda m, t: m.topic == t)
    assert found and candidates >= len(found)
    assert all(key in m.keys.split(" ") for _off, m in found)
    assert {off for off, _m in found} == {r["commitLogOffset"] for r in golden_rows()
                                           if key in (r["keys"] or "").split(" ")}


def test_without_index_files_query_index_says_why_and_find_messages_scans(sample_store):
    s = cq.Store(sample_store)
    try:
        topic = s.topics()[0]
        found, candidates, why_scan, *_ = query_index(s, [topic], "any-key", None)
        assert found is None and candidates == 0 and why_scan == "the store has no index files"
        msg = next(iter(s.consume(topic, "G", tags="*")))
        got, how, note = find_messages(s, topic, msg_id=msg.properties["UNIQ_KEY"])
        assert how == "scan" and "the store has no index files" in note
        assert [m.commit_log_offset for m in got] == [msg.commit_log_offset]
    finally:
        s.close()


def test_an_offset_message_id_names_its_record(store):
    row = golden_rows()[5]
    host, offset = parse_offset_msg_id(row["msgId"])
    assert (host, offset) == (row["storeHost"], row["commitLogOffset"])
    assert message_at(store, offset).msg_id == row["msgId"]
    assert parse_offset_msg_id("not hex at all, 32 characters..") is None
    assert message_at(store, -1) is None and message_at(store, store.commit_log.max_offset) is None
    with pytest.raises(MessageNotFoundError, match="no message of topic 'GoldenPlainTopic' has key 'nope'"):
        find_messages(store, "GoldenPlainTopic", key="nope")
