"""``find`` (cq.analyses.search): keys through every IndexFile, the scan where no index covers, store-time ranges
by the broker's binary search (logarithmic), properties, a group's view, clusters, and bad arguments."""
from __future__ import annotations

import math
import random
from contextlib import closing

import numpy as np
import pytest

import cq
import selector
from cq.analyses.by_time import QueueSearch, time_range
from cq.analyses.search import find
from cq.readers.indexfile import index_key, index_key_hash
from cq.writer import StoreWriter
from cq.writer.index import write_index_files

T0 = 1_700_000_000_000
TOPIC = "Orders"
QUEUES = 4
SMALL = {"commit_log_file_size": 1 << 20, "consume_queue_file_size": 20 * 1000}


def write_store(root, n: int = 2000, *, seed: int = 1, topics=(TOPIC, "Other"), t0: int = T0) -> list[dict]:
    """A store of ``n`` messages over two topics, store times rising by 0-40 ms (equal ones too), keys that collide
    in the index (``"Aa"`` and ``"BB"`` have one String.hashCode); returns what was written, in CommitLog order."""
    rnd = random.Random(seed)
    written = []
    t = t0
    with StoreWriter(root, **SMALL) as w:
        for i in range(n):
            t += rnd.choice((0, 0, 1, 7, 40))
            topic = topics[i % len(topics)]
            keys = [f"k{i % 13}", "Aa" if i % 4 == 0 else "BB"]
            props = {"UNIQ_KEY": f"U{seed}-{i:06d}", "amount": str(rnd.randrange(200)), "region": rnd.choice("NSEW")}
            r = w.append(topic, b"body", queue_id=i % QUEUES, tags=rnd.choice(("TagA", "TagB")), keys=keys,
                         properties=props, store_timestamp=t)
            written.append({"topic": topic, "queue_id": i % QUEUES, "offset": r.commit_log_offset, "t": t,
                            "keys": keys, "uniq": props["UNIQ_KEY"], "props": {**props, "TAGS": None}})
    return written


@pytest.fixture(scope="module")
def indexed(tmp_path_factory):
    root = tmp_path_factory.mktemp("find") / "store"
    written = write_store(root)
    files = write_index_files(root, hash_slot_num=16, index_num=400)
    assert len(files) >= 10
    return str(root), written


def offsets(result) -> list[int]:
    return [r.commit_log_offset for r in result.rows]


def test_collision_keys_are_one_hash():
    assert index_key_hash(index_key(TOPIC, "Aa")) == index_key_hash(index_key(TOPIC, "BB"))


def test_every_key_match_across_index_files_with_collisions_resolved(indexed):
    root, written = indexed
    with closing(cq.Store(root)) as store:
        for key in ("Aa", "BB", "k5"):
            r = find(store, topic=TOPIC, key=key)
            expected = [w["offset"] for w in written if w["topic"] == TOPIC and key in w["keys"]]
            assert offsets(r) == expected and len(expected) > 50  # every match, no cap
            assert {row.found_by for row in r.rows} == {"index"} and r.stats["scans"] == []
            assert r.stats["index_files"] >= 10
        # "Aa" and "BB" share a hash: the index gives both, the records' own keys tell them apart
        r = find(store, topic=TOPIC, key="Aa")
        assert r.stats["index_candidates"] == 2 * r.stats["index_confirmed"]
        assert "hash candidate" in r.notes[0] and "confirmed" in r.notes[0]
        # without a topic: every topic of the store
        r = find(store, key="k5")
        assert offsets(r) == [w["offset"] for w in written if "k5" in w["keys"]]
        assert {row.topic for row in r.rows} == {TOPIC, "Other"}


def test_uniq_key_and_msg_id(indexed):
    root, written = indexed
    w = written[777]
    with closing(cq.Store(root)) as store:
        r = find(store, uniq_key=w["uniq"])
        assert offsets(r) == [w["offset"]] and r.rows[0].uniq_key == w["uniq"]
        msg_id = r.rows[0].msg_id
        r = find(store, msg_id=msg_id)
        assert offsets(r) == [w["offset"]] and r.rows[0].found_by == "msg_id"
        r = find(store, msg_id=w["uniq"])  # not an offset message id: a UNIQ_KEY
        assert offsets(r) == [w["offset"]] and "looked up as a UNIQ_KEY" in " ".join(r.notes)
        r = find(store, key=w["keys"][0], uniq_key=w["uniq"])
        assert offsets(r) == [w["offset"]]
        assert find(store, key="k1", uniq_key=w["uniq"]).rows == [] or "k1" in w["keys"]


def test_the_part_no_index_covers_is_scanned_and_said(tmp_path):
    root = tmp_path / "store"
    written = write_store(root, n=1200)
    cut_at = written[700]["offset"]
    write_index_files(root, hash_slot_num=16, index_num=300, up_to=cut_at)
    with closing(cq.Store(root)) as store:
        r = find(store, topic=TOPIC, key="k3")
        expected = [w["offset"] for w in written if w["topic"] == TOPIC and "k3" in w["keys"]]
        assert offsets(r) == expected
        (scan,) = r.stats["scans"]
        assert scan["from"] == written[699]["offset"] and scan["to"] == store.commit_log.max_offset
        assert scan["records"] == len(written) - 700  # the records after the last one indexed
        assert "no index file covers the CommitLog after the record at offset" in scan["why"]
        assert any("scanned CommitLog" in n for n in r.notes)
        assert {row.found_by for row in r.rows if row.commit_log_offset >= cut_at} == {"scan"}
        assert {row.found_by for row in r.rows if row.commit_log_offset < written[699]["offset"]} == {"index"}
    # no index at all: the whole CommitLog, and why
    for f in (root / "index").iterdir():
        f.unlink()
    with closing(cq.Store(root)) as store:
        r = find(store, topic=TOPIC, key="k3")
        assert offsets(r) == expected
        assert r.stats["scans"][0]["why"] == "the store has no index files"


def brute(written, begin, end, topic=TOPIC):
    return [w["offset"] for w in written if w["topic"] == topic and begin <= w["t"] <= end]


def test_time_ranges_equal_a_brute_force_filter_and_probe_logarithmically(indexed):
    root, written = indexed
    rnd = random.Random(3)
    last = written[-1]["t"]
    windows = [(T0, last), (T0 - 5000, T0 - 1), (last + 1, last + 9), (written[10]["t"], written[10]["t"])]
    windows += [tuple(sorted((rnd.randint(T0 - 50, last + 50), rnd.randint(T0 - 50, last + 50)))) for _ in range(25)]
    with closing(cq.Store(root)) as store:
        for begin, end in windows:
            r = find(store, topic=TOPIC, between=(begin, end))
            assert offsets(r) == brute(written, begin, end), (begin, end)
            assert {row.found_by for row in r.rows} <= {"time_search"}
            for qs in r.stats["queues"]:
                n = qs["units"]
                # two lower-bound searches: at most ceil(log2(n + 1)) probes each
                assert qs["probes"] <= 2 * math.ceil(math.log2(n + 1)), qs
                assert qs["range_units"] == sum(1 for w in written if w["topic"] == TOPIC
                                                and w["queue_id"] == qs["queue_id"] and begin <= w["t"] <= end)
            assert r.stats["probes"] == sum(qs["probes"] for qs in r.stats["queues"])


def test_probes_grow_with_log_n_not_n(tmp_path):
    probes = {}
    for n in (256, 4096):
        root = tmp_path / f"s{n}"
        with StoreWriter(root, **SMALL) as w:
            for i in range(n):
                w.append(TOPIC, b"", store_timestamp=T0 + i)
        with closing(cq.Store(root)) as store:
            r = find(store, topic=TOPIC, between=(T0 + n // 3, T0 + n // 2))
            assert len(r.rows) == n // 2 - n // 3 + 1
            probes[n] = r.stats["probes"]
    assert probes[256] <= 2 * 9 and probes[4096] <= 2 * 13
    assert probes[4096] - probes[256] <= 2 * 4 + 2  # 16x the units, a handful more probes


def test_search_follows_the_brokers_boundaries_on_equal_times(tmp_path):
    """LOWER of t is the first unit stored at or after t; UPPER the last stored at or before t (ties included)."""
    root = tmp_path / "s"
    times = [10, 20, 20, 20, 30, 30, 40]
    with StoreWriter(root, **SMALL) as w:
        for t in times:
            w.append(TOPIC, b"", store_timestamp=T0 + t)
    with closing(cq.Store(root)) as store:
        log = store.commit_log
        cqueue = store.consume_queue(TOPIC, 0)
        for begin, end, expect in [(20, 20, (1, 4)), (25, 30, (4, 6)), (21, 29, (4, 4)), (0, 9, (0, 0)),
                                   (41, 50, (7, 7)), (10, 40, (0, 7))]:
            s = time_range(cqueue, log, QueueSearch(TOPIC, 0, 0, len(times)), T0 + begin, T0 + end,
                           log.min_offset, log.max_offset)
            assert (s.first, s.end) == expect, (begin, end)


def test_where_keeps_what_the_compiled_selector_matches(indexed):
    root, written = indexed
    sql = "amount > 120 AND region IN ('N', 'S')"
    s = selector.compile(sql)
    with closing(cq.Store(root)) as store:
        r = find(store, topic=TOPIC, key="k7", where=sql)
        expected = [w["offset"] for w in written if w["topic"] == TOPIC and "k7" in w["keys"]
                    and s.matches({k: v for k, v in w["props"].items() if v is not None})]
        assert offsets(r) == expected and 0 < len(expected)
        with pytest.raises(selector.SelectorSyntaxError) as exc:
            find(store, topic=TOPIC, where="amount >> 3")
        assert exc.value.position == 8


def test_group_keeps_what_it_would_receive_with_its_state(indexed):
    root, written = indexed
    begin, end = written[300]["t"], written[900]["t"]
    with closing(cq.Store(root)) as store:
        r = find(store, topic=TOPIC, between=(begin, end), group="GID_A", tags="TagA")
        received = {m.commit_log_offset for m in store.consume(TOPIC, "GID_A", tags="TagA")}
        assert offsets(r) == [o for o in brute(written, begin, end) if o in received]
        assert r.rows and {row.state for row in r.rows} == {"pending"}  # no committed offsets in this store
        assert all(row.tags == "TagA" for row in r.rows)
        assert "state" in r.rows[0].to_dict(group=True) and "state" not in r.rows[0].to_dict()


def test_a_cluster_names_each_rows_broker(tmp_path):
    a = write_store(tmp_path / "broker-a", n=600, seed=1)
    b = write_store(tmp_path / "broker-b", n=600, seed=2, t0=T0 + 3)
    write_index_files(tmp_path / "broker-a")
    cluster = cq.Cluster([tmp_path / "broker-a", tmp_path / "broker-b"])
    try:
        r = find(cluster, topic=TOPIC, key="k4")
        assert [(row.broker, row.commit_log_offset) for row in r.rows] == \
            [("broker-a", w["offset"]) for w in a if w["topic"] == TOPIC and "k4" in w["keys"]] + \
            [("broker-b", w["offset"]) for w in b if w["topic"] == TOPIC and "k4" in w["keys"]]
        assert any(n.startswith("broker-b: scanned CommitLog") for n in r.notes)  # b has no index
        r = find(cluster, topic=TOPIC, between=(T0 + 100, T0 + 900))
        assert {row.broker for row in r.rows} == {"broker-a", "broker-b"}
        assert sorted((row.broker, row.commit_log_offset) for row in r.rows) == sorted(
            [("broker-a", o) for o in brute(a, T0 + 100, T0 + 900)] +
            [("broker-b", o) for o in brute(b, T0 + 100, T0 + 900)])
        with pytest.raises(LookupError, match="no consume queues"):
            find(cluster, topic="Nowhere", key="k4")
    finally:
        cluster.close()


def test_bad_arguments_are_clear_errors(indexed):
    root, _ = indexed
    with closing(cq.Store(root)) as store:
        with pytest.raises(ValueError, match="ends .* before it begins"):
            find(store, topic=TOPIC, between=(T0 + 10, T0))
        with pytest.raises(ValueError, match="uniq_key or msg_id"):
            find(store, uniq_key="a", msg_id="b")
        with pytest.raises(ValueError, match="group needs topic"):
            find(store, group="G", tags="*")
        with pytest.raises(ValueError, match="give group too"):
            find(store, topic=TOPIC, tags="TagA")
        with pytest.raises(LookupError, match="'Nowhere' has no consume queues"):
            find(store, topic="Nowhere")
        with pytest.raises(cq.UnknownGroupError):
            find(store, topic=TOPIC, key="k1", group="NOT_REGISTERED")


def test_store_timestamps_of_records_outside_the_cut():
    from cq.analyses.by_time import store_timestamps

    out = store_timestamps(None, np.array([5, 100]), np.array([10, 10]), 50, 105)
    assert out[0] < 0 and out[1] > 2**62


def test_a_probe_that_hits_no_record_names_the_file_and_offset(indexed):
    root, written = indexed
    with closing(cq.Store(root)) as store:
        log = store.commit_log
        assert log.pickup_store_timestamp(written[5]["offset"]) == written[5]["t"]
        with pytest.raises(cq.StoreFormatError, match="commitlog"):
            log.pickup_store_timestamp(written[5]["offset"] + 3)


def test_an_lmq_lists_the_records_dispatched_to_it_at_their_place_there():
    """docs/formats.md#lmq: a record's unit in an LMQ is not in the record's own topic; the index holds it under
    its own topic only, so a key in an LMQ reads the LMQ's units."""
    from helpers import DATA

    lmq = "%LMQ%alpha"
    with closing(cq.Store(DATA / "batch_store")) as store:
        units = store.consume_queue(lmq, 0).read()
        r = find(store, topic=lmq, between=(0, 2**62))
        assert [(row.topic, row.queue_id, row.queue_offset, row.commit_log_offset) for row in r.rows] == \
            [(lmq, 0, o, int(u["commit_log_offset"])) for o, u in enumerate(units)]
        key = r.rows[3].keys.split(" ")[0]
        by_key = find(store, topic=lmq, key=key)
        assert [row.commit_log_offset for row in by_key.rows] == [r.rows[3].commit_log_offset]
        assert by_key.rows[0].queue_offset == 3 and by_key.stats["index_files"] == 0


@pytest.mark.parametrize("name", ["dledger_store", "dledger_migrated_store"])
def test_a_scan_without_an_index_walks_a_dledger_log_too(name):
    """A DLedger CommitLog's records lie past each entry's header: the scan takes the log's own walk."""
    from helpers import DATA

    with closing(cq.Store(DATA / "golden_store")) as golden, closing(cq.Store(DATA / name)) as store:
        want = [(r.topic, r.queue_id, r.queue_offset, r.uniq_key) for r in find(golden, key="order-115").rows]
        r = find(store, key="order-115")
        assert [(x.topic, x.queue_id, x.queue_offset, x.uniq_key) for x in r.rows] == want and len(want) == 2
        assert r.stats["scans"][0]["records"] == 300 and {x.found_by for x in r.rows} == {"scan"}


def test_a_probe_reads_the_store_time_past_an_ipv6_born_host(tmp_path):
    root = tmp_path / "s"
    with StoreWriter(root, **SMALL) as w:
        for i, host in enumerate(["10.0.0.1:1", "[::1]:2", "[fe80::1]:3", "10.0.0.2:4"]):
            w.append(TOPIC, b"x", born_host=host, store_host=host, store_timestamp=T0 + i)
    with closing(cq.Store(root)) as store:
        log = store.commit_log
        assert [log.pickup_store_timestamp(m.commit_log_offset) for m in log.messages()] == [T0 + i for i in range(4)]
        assert [r.store_timestamp for r in find(store, topic=TOPIC, between=(T0 + 1, T0 + 2)).rows] == [T0 + 1, T0 + 2]


def test_a_batchcq_topic_gives_each_message_the_broker_stored():
    """docs/find.md#batchcq: the messages of the batch_store's BatchCQ topic, as RocketMQ's broker reported sending
    them (tests/data/BATCH_STORE.md), by store time, key, UNIQ_KEY and the batch record's msg id."""
    import json

    from helpers import DATA

    sent = [s for s in json.loads((DATA / "batch_store.json").read_text())["sent"] if s["topic"] == "BatchTopic"]
    with closing(cq.Store(DATA / "batch_store")) as store:
        r = find(store, topic="BatchTopic", between=(0, 2**62))
        got = sorted((row.queue_id, row.queue_offset, row.uniq_key) for row in r.rows)
        assert got == sorted((s["queue_id"], s["queue_offset"], s["uniq_key"]) for s in sent) and len(got) == 55
        s = sent[17]
        assert [(x.queue_id, x.queue_offset) for x in find(store, topic="BatchTopic", uniq_key=s["uniq_key"]).rows] \
            == [(s["queue_id"], s["queue_offset"])]
        assert (s["queue_id"], s["queue_offset"]) in \
            [(x.queue_id, x.queue_offset) for x in find(store, topic="BatchTopic", key=s["keys"][0]).rows]
        same_batch = sorted(x["queue_offset"] for x in sent if x["msg_id"] == s["msg_id"])
        assert sorted(x.queue_offset for x in find(store, msg_id=s["msg_id"]).rows) == same_batch
        with pytest.raises(ValueError, match="BatchCQ"):
            find(store, topic="BatchTopic", between=(0, 2**62), group="G", tags="*")


def test_rows_stay_columns_until_read(indexed):
    """A window's rows are columns (FindRows) until read; read, they are the rows of the records read whole."""
    root, written = indexed
    begin, end = written[300]["t"], written[1200]["t"]
    with closing(cq.Store(root)) as store:
        result = find(store, topic=TOPIC, between=(begin, end))
        rows = result.rows
        assert rows._made is None and len(rows) > 0  # counted without making the rows
        want = [w["offset"] for w in written if w["topic"] == TOPIC and begin <= w["t"] <= end]
        assert rows.column("commit_log_offset").tolist() == want
        msgs = store.commit_log.read_messages(want)
    # made after the store closed: the columns are the read's own copy
    assert [(r.commit_log_offset, r.queue_id, r.queue_offset, r.msg_id, r.uniq_key, r.keys, r.tags,
             r.store_timestamp, r.born_timestamp, r.found_by) for r in rows] == \
        [(m.commit_log_offset, m.queue_id, m.queue_offset, m.msg_id, m.properties.get("UNIQ_KEY"),
          m.properties.get("KEYS"), m.properties.get("TAGS"), m.store_timestamp, m.born_timestamp, "time_search")
         for m in msgs]
    assert rows == list(rows) and rows[0] == next(iter(rows))


def test_topic_compared_as_arrays(indexed):
    """The array check of a record's topic against the topic its unit was read for (lengths and bytes differ)."""
    from cq.analyses.search import _topic_is

    root, written = indexed
    with closing(cq.Store(root)) as store:
        offs = np.array([w["offset"] for w in written[:40]], dtype=np.int64)
        cols = store.commit_log.decode_columns(offs, ["topic"])
    topics = [TOPIC, "Other", "Orderz", "O"]
    table = np.zeros((len(topics), 6), dtype=np.uint8)
    for i, t in enumerate(topics):
        table[i, :len(t)] = np.frombuffer(t.encode(), dtype=np.uint8)
    lengths = np.array([len(t) for t in topics])
    rnd = random.Random(3)
    want = np.array([rnd.randrange(len(topics)) for _ in offs], dtype=np.int64)
    got = _topic_is(cols.columns["topic"], want, lengths, table)
    assert got.tolist() == [w["topic"] == topics[k] for w, k in zip(written[:40], want.tolist())]
    assert got.any() and not got.all()
