"""A store in object storage (docs/object-storage.md), read from a real S3 server (s3proxy on loopback):
everything read from the bucket equals what the local readers read from the same store, requests are
coalesced, and every failure names the URI (and the byte range) without a credential."""
from __future__ import annotations

import collections
import functools
import os
import pickle
import re
import shutil
import time
from contextlib import closing
from pathlib import Path

import numpy as np
import pytest
from cluster_stores import write_brokers
from helpers import DATA

import cq
import rmqfilter
from cq import format as fmt
from cq.readers import objects
from cq.readers.ext import head_holding as ext_head
from cq.readers.objects import COALESCE_GAP, HEAD_FIRST, RECORD_PROBE, TAIL_FIRST, ObjectStore, coalesce
from cq.store.cluster import store_roots
from cq.store.undispatched import dispatch_frontier
from cq.writer.sample import generate_sample_store

ROOT = Path(__file__).resolve().parents[3]
#: A SQL92 group of the sample store (cq.writer.sample), as bench/bench_object_storage.py reads it.
SAMPLE_SQL = "color = 'red' AND price < 20.0"


# ------------------------------------------------------------------ the coalescing rule, alone
def test_coalesce_merges_records_closer_than_the_gap():
    gap = COALESCE_GAP
    offsets = [0, 100, 100 + 50 + gap - 1, 10 * gap]
    sizes = [100, 50, 10, 20]
    ranges = coalesce(offsets, sizes, [0])
    # the third record starts gap - 1 bytes after the second's end: merged; the fourth is far
    assert ranges.tolist() == [[0, 100 + 50 + gap - 1 + 10, 0], [10 * gap, 10 * gap + 20, 0]]


def test_coalesce_keeps_ranges_within_the_budget_and_one_file():
    offsets = np.arange(0, 1000, 100)
    sizes = np.full(10, 100)
    assert coalesce(offsets, sizes, [0], budget=300).tolist() == [
        [0, 300, 0], [300, 600, 0], [600, 900, 0], [900, 1000, 0]]
    # a file boundary at 500 cuts a range that the gap and budget would keep
    assert coalesce(offsets, sizes, [0, 500]).tolist() == [[0, 500, 0], [500, 1000, 1]]
    # a record larger than the budget is a range of its own; duplicates and order do not matter
    assert coalesce([2000, 0, 0], [50, 1000, 1000], [0], budget=300).tolist() == [[0, 1000, 0], [2000, 2050, 0]]
    # a record inside the range before it adds no request
    assert coalesce([0, 500, 900], [1000, 10, 100], [0], budget=300).tolist() == [[0, 1000, 0]]
    assert coalesce([], [], [0]).shape == (0, 3)


def test_coalesce_reaches_a_file_edge_closer_than_the_gap():
    """With the files' sizes, a range at least the gap long that starts less than the gap past its file's
    start starts there, and one that ends less than the gap before its file's end ends there, within the
    budget: a later batch's records at the edges ask nothing more. A shorter range (a record read alone)
    stays as its records need it."""
    gap = 1000
    starts, sizes = [0, 10_000], [10_000, 10_000]
    # [500, 1_600) is 500 past file 0's start: from 0; [8_000, 9_500) ends 500 before its end: to 10_000;
    # [12_000, 13_100) is 2_000 past file 1's start and 6_900 before its end: unchanged
    got = coalesce([500, 1_000, 8_000, 9_000, 12_000], [100, 600, 100, 500, 1_100], starts, sizes, gap=gap)
    assert got.tolist() == [[0, 1_600, 0], [8_000, 10_000, 0], [12_000, 13_100, 1]]
    # a range the edge would take past the budget stays as the records need it
    assert coalesce([500], [1_100], starts, sizes, gap=gap, budget=1_500).tolist() == [[500, 1_600, 0]]
    assert coalesce([500], [1_100], starts, sizes, gap=gap, budget=1_600).tolist() == [[0, 1_600, 0]]
    # shorter than the gap (a record read alone), at the edge already, or without the sizes: unchanged
    assert coalesce([500, 9_900], [100, 100], starts, sizes, gap=gap).tolist() == [[500, 600, 0], [9_900, 10_000, 0]]
    assert coalesce([0], [5_000], starts, sizes, gap=gap).tolist() == [[0, 5_000, 0]]
    assert coalesce([500], [1_100], starts, gap=gap).tolist() == [[500, 1_600, 0]]


# ------------------------------------------------------------------ a real S3 server


def _file_sizes(log) -> list[int]:
    """The sizes of a local CommitLog's files (what a bucket's listing gives for its objects)."""
    return [Path(path).stat().st_size for _, path in log.files]


def _bucket_store(s3_server, local: Path, bucket: str, prefix: str, **options) -> ObjectStore:
    uri = s3_server.upload(local, bucket, prefix)
    return ObjectStore(uri, endpoint=s3_server.endpoint, region="us-east-1", **options)


def _multi_file_store(s3_server, tmp_path, bucket: str) -> tuple[Path, str, dict]:
    """A store of several 256 KiB CommitLog files (the first broker of ``write_brokers``) uploaded under
    ``s3://BUCKET/east``: ``(local root, URI, object options)``."""
    root = write_brokers(tmp_path, messages=3000, commit_log_file_size=1 << 18)[0]
    return root, s3_server.upload(root, bucket, "east"), {"endpoint": s3_server.endpoint, "region": "us-east-1"}


def _assert_same_store(remote: ObjectStore, local: cq.Store) -> int:
    """Every queue's units, ext units and records read from the bucket equal the local readers';
    returns the number of records compared."""
    assert remote.topics() == local.topics()
    records = 0
    for topic in local.topics():
        assert remote.queue_ids(topic) == local.queue_ids(topic)
        for q in local.queue_ids(topic):
            mine, theirs = remote.consume_queue(topic, q), local.consume_queue(topic, q)
            assert (mine.min_offset, mine.max_offset) == (theirs.min_offset, theirs.max_offset)
            units = theirs.read()
            assert np.array_equal(mine.read(), units)
            ext_r, ext_l = remote.ext(topic, q), local.ext(topic, q)
            assert (ext_r is None) == (ext_l is None)
            if ext_l is not None:
                for code in units["tags_code"].tolist():
                    if cq.is_ext_addr(code):
                        assert ext_r.get(code) == ext_l.get(code)
            present = units[units["commit_log_offset"] >= local.commit_log.min_offset]
            got = remote.read_messages(present["commit_log_offset"], present["size"])
            assert got == local.commit_log.read_messages(present["commit_log_offset"])
            records += len(present)
    # the files that are not a queue's (config/*.json, checkpoint, IndexFiles), read whole
    queue_dirs = ("commitlog/", "consumequeue/", "consumequeue_ext/")
    for key in remote.keys:
        if not key.startswith(queue_dirs):
            assert remote.read_file(key) == (Path(local.root) / key).read_bytes(), key
    return records


@pytest.mark.objectstore
def test_golden_store_from_the_bucket_equals_the_local_read(s3_server):
    remote = _bucket_store(s3_server, DATA / "golden_store", "stores", "golden")
    with closing(cq.Store(DATA / "golden_store")) as local:
        records = _assert_same_store(remote, local)
        starts, lengths = local.commit_log.file_starts, _file_sizes(local.commit_log)
        ranges = [coalesce(u["commit_log_offset"], u["size"], starts, lengths)
                  for u in (local.consume_queue(t, q).read() for t in local.topics() for q in local.queue_ids(t))]
    assert "checkpoint" in remote.keys and any(k.startswith("index/") for k in remote.keys)
    stats = remote.stats()
    assert stats["list"] == (1, 0)
    # the golden store's 64 KiB CommitLog files: one request per queue and file its records lie in
    assert stats["CommitLog"] == (sum(map(len, ranges)), sum(int((r[:, 1] - r[:, 0]).sum()) for r in ranges))
    assert stats["CommitLog"][0] < records / 5
    assert remote.requests == sum(r for r, _ in stats.values())


@pytest.mark.objectstore
def test_multi_file_cluster_stores_and_coalesced_requests(s3_server, tmp_path):
    """Stores of several 256 KiB CommitLog files: ranges stop at each object's end, requests follow
    the coalesced ranges (never one per record), and a smaller budget gives more, smaller ones."""
    for root in write_brokers(tmp_path, messages=3000, commit_log_file_size=1 << 18):
        name = root.parent.name
        remote = _bucket_store(s3_server, root, "cluster", name)
        with closing(cq.Store(root)) as local:
            assert len(local.commit_log.files) > 1
            records = _assert_same_store(remote, local)
            log = local.commit_log
            topic = local.topics()[0]
            units = local.consume_queue(topic, 0).read()
            starts, lengths = np.array([s for s, _ in log.files]), _file_sizes(log)
        requests = remote.stats()["CommitLog"][0]
        assert requests < records / 10
        expected = coalesce(units["commit_log_offset"], units["size"], starts, lengths)
        small = ObjectStore(remote.uri, endpoint=s3_server.endpoint, region="us-east-1", batch_bytes=4096)
        small.read_messages(units["commit_log_offset"], units["size"])
        narrow = coalesce(units["commit_log_offset"], units["size"], starts, lengths, budget=4096)
        assert small.stats()["CommitLog"] == (len(narrow), int((narrow[:, 1] - narrow[:, 0]).sum()))
        assert len(narrow) > len(expected)


@pytest.mark.objectstore
def test_cluster_broker_run_from_the_bucket(s3_server):
    """The real broker's two stores of the harness's ``cluster`` scenario, when a run is cached."""
    runs = sorted(p for p in (ROOT / "build" / "broker-runs").glob("cluster-*")
                  if p.is_dir() and not p.name.endswith(".partial") and (p / "broker.json").exists())
    if not runs:
        pytest.skip("no cached run of the cluster scenario in build/broker-runs")
    for root in sorted((runs[-1] / "stores").iterdir()):
        remote = _bucket_store(s3_server, root, "brokers", root.name)
        with closing(cq.Store(root)) as local:
            _assert_same_store(remote, local)


@pytest.mark.objectstore
@pytest.mark.parametrize(("store", "layout", "topic"), [("dledger_store", "DLedger CommitLog", "GoldenFilterTopic"),
                                                         ("dledger_migrated_store", "DLedger CommitLog",
                                                          "GoldenFilterTopic"),
                                                         ("rocksdb_store", "RocksDB consume queue", "ModesTopic")])
def test_dledger_and_rocksdb_stores_from_the_bucket(s3_server, capsys, monkeypatch, store, layout, topic):
    """cq.Store and the commands read them (a DLedger store's logs, a RocksDB database fetched whole);
    the byte source's own reads refuse the layout by name rather than answer empty."""
    monkeypatch.setenv("AWS_ENDPOINT_URL", s3_server.endpoint)
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    uri = s3_server.upload(DATA / store, "layouts", store)
    _same_answers(capsys, s3_server, [DATA / store], [uri], [
        ["inspect"],
        ["consume", "--topic", topic, "--group", "G", "--sql", "a > 5", "--format", "jsonl"],
        ["consume", "--topic", topic, "--group", "G", "--tags", "*", "--format", "jsonl"],
        ["backlog", "--topic", topic, "--group", "G", "--sql", "a > 5"],
        ["why", "--topic", topic, "--group", "G", "--tags", "*", "--queue", "0", "--offset", "1"],
        ["pending"],
    ])
    if store.startswith("dledger"):  # its records by ranges too: one read alone asks its first bytes only
        with closing(cq.Store(uri)) as remote, closing(cq.Store(DATA / store)) as local:
            units = local.consume_queue(topic, 0).read()
            one = int(units["commit_log_offset"][len(units) // 2])
            assert remote.commit_log.read_message(one) == local.commit_log.read_message(one)
            key = remote.commit_log.files[remote.commit_log.file_index(one)][1]
            start = remote.commit_log.files[remote.commit_log.file_index(one)][0]
            probe = min(RECORD_PROBE, remote.source.size_of(key) - (one - start))
            assert remote.source.stats()["CommitLog"] == (1, probe)
            assert probe < remote.source.size_of(key)
        # the log's end from the dispatch frontier: the entry holding its record, not the last objects whole
        with closing(cq.Store(uri)) as remote, closing(cq.Store(DATA / store)) as local:
            assert remote.commit_log.max_offset == local.commit_log.max_offset
            index, pos = remote.commit_log.walk_start()
            phys, size = _frontier_unit(local)
            assert pos > 0 and remote.commit_log.files[index][0] + pos == phys + size
            assert remote.commit_log.files[index][0] >= remote.commit_log.divided_offset  # a DLedger object
            assert remote.source.stats()["CommitLog"] == (1, fmt.DLEDGER_BODY_OFFSET + size + RECORD_PROBE)
    else:  # the CommitLog's end from the frontier, its last units from the RocksDB database (no tail)
        with closing(cq.Store(uri)) as remote, closing(cq.Store(DATA / store)) as local:
            assert remote.commit_log.max_offset == local.commit_log.max_offset
            index, pos = remote.commit_log.walk_start()
            phys, size = _frontier_unit(local)
            assert pos > 0 and remote.commit_log.files[index][0] + pos == phys + size
            assert "ConsumeQueueTail" not in remote.source.stats()
    source = ObjectStore(uri, endpoint=s3_server.endpoint, region="us-east-1")
    with pytest.raises(cq.UnsupportedLayoutError, match=layout) as info:
        source.read_messages([0], [100]) if store.startswith("dledger") else source.topics()
    assert uri in str(info.value)


@pytest.mark.objectstore
def test_a_dledger_walk_fetches_entries_by_heads(s3_server):
    """The broker's walk of a DLedger log's last three objects (``recovery="walk"``) fetches each by heads of
    ``batch_bytes``, as a classic object's (docs/object-storage.md#costs): to the end of the entries, never
    the unwritten rest of the last object; the end is the local one."""
    uri = s3_server.upload(DATA / "dledger_store", "dledgerwalk", "dledger")
    budget = 4096
    with closing(cq.Store(DATA / "dledger_store")) as local:
        end = local.commit_log.max_offset
        (last_start, _), size = local.commit_log.files[-1], local.commit_log.file_size
    opts = {"endpoint": s3_server.endpoint, "region": "us-east-1", "batch_bytes": budget, "recovery": "walk"}
    with closing(cq.Store(uri, object_options=opts)) as remote:
        assert remote.commit_log.max_offset == end
        requests, fetched = remote.source.stats()["CommitLog"]
    assert end - last_start + budget < size  # the last object's unwritten rest is more than one head
    assert requests > 3 and fetched <= 2 * size + (end - last_start) + budget


@pytest.mark.objectstore
def test_a_batchcq_queue_is_fetched_when_a_read_asks_for_it(s3_server):
    """A Store of a bucket fetches a BatchCQ queue's objects when a read first asks for the queue, not when
    it opens (docs/object-storage.md#costs): a read of another topic fetches none; the answers are local."""
    uri = s3_server.upload(DATA / "batch_store", "batchcq", "broker-a")
    with closing(cq.Store(DATA / "batch_store")) as local:
        want = {t: [(m.queue_id, m.queue_offset, m.body) for m in local.consume(t, "G", tags="*")]
                for t in ("LmqParentTopic", "BatchTopic")}
    objects = [k for k in ObjectStore(uri, endpoint=s3_server.endpoint, region="us-east-1").keys
               if k.startswith("batchconsumequeue/BatchTopic/")]
    assert objects
    with closing(cq.Store(uri, object_options={"endpoint": s3_server.endpoint, "region": "us-east-1"})) as remote:
        assert remote.topics() == ["%LMQ%alpha", "%LMQ%beta", "BatchTopic", "LmqParentTopic"]
        assert remote.queue_ids("BatchTopic") == [0, 1]
        got = [(m.queue_id, m.queue_offset, m.body) for m in remote.consume("LmqParentTopic", "G", tags="*")]
        assert got == want["LmqParentTopic"] and "BatchConsumeQueue" not in remote.source.stats()
        got = [(m.queue_id, m.queue_offset, m.body) for m in remote.consume("BatchTopic", "G", tags="*")]
        assert got == want["BatchTopic"] and got
        assert remote.source.stats()["BatchConsumeQueue"][0] == len(objects)


@pytest.mark.objectstore
def test_missing_bucket_prefix_and_object(s3_server):
    opts = {"endpoint": s3_server.endpoint, "region": "us-east-1"}
    with pytest.raises(cq.ObjectStoreError, match="bucket does not exist") as info:
        ObjectStore("s3://no-such-bucket/x/broker-a", **opts)
    assert info.value.uri == "s3://no-such-bucket/x/broker-a"
    s3_server.upload(DATA / "golden_store", "present", "golden")
    with pytest.raises(cq.ObjectStoreError, match="no store under this prefix") as info:
        ObjectStore("s3://present/elsewhere", **opts)
    assert "s3://present/elsewhere" in str(info.value)


@pytest.mark.objectstore
def test_the_check_at_load_fails_as_opening_would(s3_server, tmp_path):
    """``ObjectStore.check`` (what the data source's ``load()`` asks: one delimited listing of the top level)
    fails as opening the store fails, naming the URI, and passes a store, whatever its read options."""
    opts = {"endpoint": s3_server.endpoint, "region": "us-east-1"}
    uri = s3_server.upload(DATA / "golden_store", "checked", "golden")
    (tmp_path / "notes").mkdir()
    (tmp_path / "notes" / "readme.txt").write_text("not a store")
    other = s3_server.upload(tmp_path, "checked", "other")
    before = len(s3_server.requests())
    ObjectStore.check(uri + "/", batch_bytes=1 << 20, **opts)
    assert [method for method, _ in s3_server.requests()[before:]] == ["GET"]  # one LIST
    for bad, why in (("s3://no-such-bucket/x/broker-a", "bucket does not exist"),
                     ("s3://checked/elsewhere", "no store under this prefix"),
                     (other, "not a broker store")):
        with pytest.raises(cq.ObjectStoreError, match=why) as info:
            ObjectStore.check(bad, **opts)
        assert info.value.uri == bad
        with pytest.raises(cq.ObjectStoreError, match=why):
            ObjectStore(bad, **opts)


@pytest.mark.objectstore
def test_truncated_object_names_uri_and_range(s3_server):
    remote = _bucket_store(s3_server, DATA / "golden_store", "trunc", "golden")
    topic = remote.topics()[0]
    key = remote.list_dir_files(f"consumequeue/{topic}/0")[0][1]
    size = remote.size_of(key)
    with s3_server.filesystem().open_output_stream(f"trunc/golden/{key}") as out:
        out.write(b"\0" * (size // 2))  # overwritten shorter after the listing
    with pytest.raises(cq.ObjectStoreError, match="shorter than listed") as info:
        remote.consume_queue(topic, 0).read()
    assert info.value.uri == f"{remote.uri}/{key}"
    assert info.value.byte_range == (0, size)
    assert f"bytes [0, {size})" in str(info.value)


@pytest.mark.objectstore
def test_requests_counted_are_the_servers(s3_server, tmp_path):
    """The requests a Store of a bucket counts (``stats()``: the benchmark's figures) are the requests the
    server answered, kind by kind: a SQL92 group's consume makes one GET per ranged read, opened by the
    listed size, with no HEAD before it (the compiled reads); the twin's open asks the size first, and each
    of those HEADs is counted as ``HEAD``."""
    root = tmp_path / "store"
    topic = generate_sample_store(root, messages=3000, seed=1, commit_log_file_size=1 << 18).main_topic
    uri = s3_server.upload(root, "counted", "east")
    before = len(s3_server.requests())
    opts = {"endpoint": s3_server.endpoint, "region": "us-east-1"}
    with closing(cq.Store(uri, object_options=opts)) as remote, closing(cq.Store(root)) as local:
        got = list(remote.consume(topic, "GID_RED_CHEAP", sql=SAMPLE_SQL))
        assert got == list(local.consume(topic, "GID_RED_CHEAP", sql=SAMPLE_SQL)) and got
        stats = remote.source.stats()
    served = collections.Counter(method for method, _ in s3_server.requests()[before:])
    gets = sum(n for kind, (n, _) in stats.items() if kind not in ("list", "HEAD"))
    heads = (objects._ranged_reads().REQUESTS_PER_READ - 1) * gets
    assert served == {"GET": gets + stats["list"][0], **({"HEAD": heads} if heads else {})}
    assert stats.get("HEAD", (0, 0)) == (heads, 0)


@pytest.mark.objectstore
def test_a_read_whose_data_ends_like_the_tail_mark_asks_the_size(s3_server, monkeypatch):
    """A read opened by the listed size learns of a short answer by its buffer's tail, set to
    ``TAIL_MARK`` before the GET: an object whose bytes end like the mark costs one HEAD and is read as it
    is, where an object shortened since the listing is an error (above)."""
    remote = _bucket_store(s3_server, DATA / "golden_store", "marked", "golden")
    key = remote.list_dir_files("commitlog")[0][1]
    want = (DATA / "golden_store" / key).read_bytes()[:4096]
    monkeypatch.setattr(objects, "TAIL_MARK", want[-16:])
    assert remote.read_range(key, 0, 4096) == want
    heads = (objects._ranged_reads().REQUESTS_PER_READ - 1) + 1
    assert remote.stats()["HEAD"] == (heads, 0)


@pytest.mark.objectstore
def test_denied_request_names_uri_and_no_secret(s3_server, monkeypatch, capsys):
    uri = s3_server.upload(DATA / "golden_store", "denied", "golden")
    wrong = "wrong-" + s3_server.secret_key[::-1]
    for k, v in s3_server.env(secret_key=wrong).items():
        monkeypatch.setenv(k, v)
    with pytest.raises(cq.ObjectStoreError, match="access denied") as info:
        ObjectStore(uri, endpoint=s3_server.endpoint, region="us-east-1")
    text = str(info.value) + repr(info.value)
    assert uri in text
    for secret in (wrong, s3_server.secret_key):
        assert secret not in text
    # a command: the error names the URI, no traceback, no secret
    monkeypatch.setenv("AWS_ENDPOINT_URL", s3_server.endpoint)
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    code, out, err = _run(capsys, ["backlog", uri, "--topic", "T", "--group", "G", "--sql", "a > 5"])
    assert code != 0 and uri in err and "access denied" in err and "Traceback" not in err
    assert wrong not in out + err and s3_server.secret_key not in out + err
    # the right credentials: the store, its readers and their pickles carry no secret either
    for k, v in s3_server.env().items():
        monkeypatch.setenv(k, v)
    store = ObjectStore(uri, endpoint=s3_server.endpoint, region="us-east-1")
    cqueue = store.consume_queue(store.topics()[0], 0)
    for blob in (pickle.dumps(store), pickle.dumps(cqueue), repr(store).encode(), repr(cqueue).encode()):
        assert s3_server.secret_key.encode() not in blob
    again = pickle.loads(pickle.dumps(cqueue))  # opens its own filesystem from the URI and options
    assert np.array_equal(again.read(), cqueue.read())


def _cached_cluster_run() -> Path | None:
    runs = sorted(p for p in (ROOT / "build" / "broker-runs").glob("cluster-*")
                  if p.is_dir() and not p.name.endswith(".partial") and (p / "broker.json").exists())
    return runs[-1] / "stores" if runs else None


def _run(capsys, argv: list[str]) -> tuple[int, str, str]:
    code = rmqfilter.main(argv)
    out = capsys.readouterr()
    return code, out.out, re.sub(r"\d+\.\d+ s\b", "(time) s", out.err)  # timings differ, nothing else


def _same_answers(capsys, s3_server, local: list[Path], uris: list[str], commands: list[list[str]]) -> None:
    for command in commands:
        got = _run(capsys, [command[0], *uris, *command[1:]])
        want = _run(capsys, [command[0], *map(str, local), *command[1:]])
        text = got[1] + got[2]
        for uri, root in zip(uris, local):
            text = text.replace(uri, str(root))
        assert (got[0], text) == (want[0], want[1] + want[2]), command
        assert s3_server.secret_key not in got[1] + got[2]


@pytest.mark.objectstore
def test_commands_read_a_bucket_as_the_local_copy(s3_server, capsys, monkeypatch):
    """inspect, consume, why, backlog, cost, pending: the same output from the bucket as from the
    local copy (the URI in place of the path), the endpoint from AWS_ENDPOINT_URL as pyarrow reads it."""
    monkeypatch.setenv("AWS_ENDPOINT_URL", s3_server.endpoint)
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    golden = DATA / "golden_store"
    uri = s3_server.upload(golden, "commands", "golden")
    topic = "GoldenFilterTopic"
    _same_answers(capsys, s3_server, [golden], [uri], [
        ["inspect"],
        ["consume", "--topic", topic, "--group", "G", "--sql", "a > 5", "--format", "jsonl"],
        ["consume", "--topic", "GoldenPlainTopic", "--group", "G", "--tags", "TagA || TagB", "--format", "jsonl"],
        ["why", "--topic", topic, "--group", "G", "--sql", "a > 5", "--queue", "0", "--offset", "3"],
        ["backlog", "--topic", topic, "--group", "G", "--sql", "a > 5"],
        ["cost", "--topic", topic, "--sql-group", "G", "a > 5", "--no-timing"],
        ["pending"],
    ])
    with closing(cq.Store(uri)) as remote, closing(cq.Store(golden)) as local:
        assert repr(remote) == f"Store({uri!r})"
        mirror = remote.root
        got = list(remote.consume(topic, "G", sql="a > 5 AND b = 'abc'"))
        assert got == list(local.consume(topic, "G", sql="a > 5 AND b = 'abc'"))
        again = pickle.loads(pickle.dumps(remote))  # the URI and options: its own listing and mirror
        assert again.root != mirror and list(again.consume(topic, "G", sql="a > 5 AND b = 'abc'")) == got
        again.close()
    assert not os.path.exists(mirror)  # the private copy of the small objects goes with the Store


@pytest.mark.objectstore
def test_cluster_commands_from_the_bucket(s3_server, capsys, monkeypatch):
    """The real broker's two stores of the harness's ``cluster`` scenario, read from the bucket as a
    cluster by every command that takes several stores, when a run is cached."""
    stores = _cached_cluster_run()
    if stores is None:
        pytest.skip("no cached run of the cluster scenario in build/broker-runs")
    monkeypatch.setenv("AWS_ENDPOINT_URL", s3_server.endpoint)
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    local = sorted(stores.iterdir())
    uris = [s3_server.upload(root, "clusterrun", root.name) for root in local]
    with closing(cq.Store(local[0])) as one:
        topics = [t for t in one.topics() if not t.startswith(("rmq_sys", "%", "SCHEDULE", "RMQ_SYS", "TBW"))]
    commands = [["inspect"]]
    for topic in topics[:2]:
        commands += [["backlog", "--topic", topic, "--all-groups"], ["cost", "--topic", topic, "--all-groups",
                                                                    "--no-timing"]]
    _same_answers(capsys, s3_server, local, uris, commands)
    for root, uri in zip(local, uris):
        _same_answers(capsys, s3_server, [root], [uri], [["inspect"], ["pending"]])


@pytest.mark.objectstore
def test_tail_refuses_a_snapshot(s3_server, capsys):
    uri = s3_server.upload(DATA / "golden_store", "cli", "golden")
    code, _out, err = _run(capsys, ["tail", uri, "--topic", "GoldenFilterTopic", "--group", "G", "--sql", "a > 5"])
    assert code != 0 and uri in err and "snapshot" in err and "Traceback" not in err


@pytest.mark.objectstore
def test_store_commit_log_reads_records_by_coalesced_ranges(s3_server, tmp_path):
    """``ObjectCommitLog.decode_copied`` (consume's path where the units give sizes): the local
    decoder's columns, one request per coalesced range before any object is held whole."""
    root, uri, opts = _multi_file_store(s3_server, tmp_path, "ranges")
    with closing(cq.Store(uri, object_options=opts)) as remote, \
            closing(cq.Store(root)) as local:
        topic = local.topics()[0]
        units = local.consume_queue(topic, 0).read()
        offs, sizes = units["commit_log_offset"].astype(np.int64), units["size"].astype(np.int64)
        got = remote.commit_log.decode_copied(offs, sizes)
        want = local.commit_log.decode_columns(offs)
        assert got.dicts() == want.dicts()
        ranges = coalesce(offs, sizes, local.commit_log.file_starts, _file_sizes(local.commit_log))
        assert remote.source.stats()["CommitLog"] == (len(ranges), int((ranges[:, 1] - ranges[:, 0]).sum()))
        assert 1 < len(ranges) < len(offs) / 10
        # a unit whose size is not its record's: the whole-object path, as the local decoder reads it
        wrong = sizes.copy()
        wrong[0] += 1
        assert remote.commit_log.decode_copied(offs, wrong).dicts() == want.dicts()


@pytest.mark.objectstore
def test_reads_by_offset_fetch_ranges_not_objects(s3_server, tmp_path):
    """Reads by offset alone (layer 2 of a SQL92 group, ``why``, ``cost``): the local decoder's answers,
    from the coalesced ranges of the records asked (each record's first ``RECORD_PROBE`` bytes when no
    unit gives its size), never whole objects: the requests and bytes are counted."""
    root, uri, opts = _multi_file_store(s3_server, tmp_path, "byoffset")
    with closing(cq.Store(uri, object_options=opts)) as remote, closing(cq.Store(root)) as local:
        log = local.commit_log
        topic = local.topics()[0]
        units = local.consume_queue(topic, 0).read()
        offs = units["commit_log_offset"].astype(np.int64)
        assert len(log.files) > 3 and int(units["size"].max()) < RECORD_PROBE
        starts = log.file_starts
        ends = np.minimum(offs + RECORD_PROBE, starts[log.file_indices(offs)] + log.file_size)
        probes = coalesce(offs, ends - offs, starts, _file_sizes(log))
        got = remote.commit_log.gather_properties(offs, absent_as_none=True)
        assert got == log.gather_properties(offs, absent_as_none=True)
        assert remote.source.stats()["CommitLog"] == (len(probes), int((probes[:, 1] - probes[:, 0]).sum()))
        assert 1 < len(probes) < len(offs) / 10
        # held now: decoding the same records whole asks nothing more
        assert remote.commit_log.decode_columns(offs).dicts() == log.decode_columns(offs).dicts()
        assert remote.source.stats()["CommitLog"][0] == len(probes)
    # one record read alone (why), in a fresh Store: one request of its first RECORD_PROBE bytes
    with closing(cq.Store(uri, object_options=opts)) as remote, closing(cq.Store(root)) as local:
        one = int(offs[len(offs) // 2])
        assert remote.commit_log.read_message(one) == local.commit_log.read_message(one)
        assert remote.source.stats()["CommitLog"] == (1, RECORD_PROBE)


@pytest.mark.objectstore
def test_sql92_group_read_from_the_bucket_is_ranged(s3_server, tmp_path):
    """A SQL92 group's consume (layer 2 reads properties by offset): the local answer, the records
    fetched by the ranges their units give (a small budget makes many small requests, where whole
    objects would be one request per object), and nothing fetched twice."""
    root = tmp_path / "store"
    topic = generate_sample_store(root, messages=3000, seed=1, commit_log_file_size=1 << 18).main_topic
    uri = s3_server.upload(root, "sqlgroup", "east")
    budget = 16384
    opts = {"endpoint": s3_server.endpoint, "region": "us-east-1", "batch_bytes": budget}
    with closing(cq.Store(root)) as local:
        want = list(local.consume(topic, "GID_RED_CHEAP", sql=SAMPLE_SQL))
        files, size = len(local.commit_log.files), local.commit_log.file_size
        # each ext's one head: the bytes holding the unit its ConsumeQueue addresses last, whatever its size
        ext_heads = []
        for q in local.queue_ids(topic):
            ext_files = local.ext(topic, q).files
            head = ext_head(local.consume_queue(topic, q).read()["tags_code"], ext_files[-1][0],
                            Path(ext_files[-1][1]).stat().st_size)
            ext_heads.append(head)
            assert head < HEAD_FIRST and len(ext_files) == 1
    with closing(cq.Store(uri, object_options=opts)) as remote:
        got = list(remote.consume(topic, "GID_RED_CHEAP", sql=SAMPLE_SQL))
        stats = remote.source.stats()
        requests, fetched = stats["CommitLog"]
        listing = {k: remote.source.size_of(k) for k in remote.source.keys}
        # the consume gave back the records it fetched when it ended (the messages are copies); the
        # next one fetches them again
        assert remote.commit_log.held_bytes == 0
        assert list(remote.consume(topic, "GID_RED_CHEAP", sql=SAMPLE_SQL)) == want
        assert remote.source.stats()["CommitLog"][1] >= 2 * fetched - budget
    assert got == want and 0 < len(got) < 3000
    # each queue's ConsumeQueue and ext objects: the heads holding their data, one request each here,
    # not the preallocated objects (6,000,000 and 48 MiB bytes at the broker's default)
    for kind, top in (("ConsumeQueue", "consumequeue"), ("ConsumeQueueExt", "consumequeue_ext")):
        objects = [k for k in listing if k.startswith(f"{top}/{topic}/")]
        heads = [min(HEAD_FIRST, listing[k]) for k in objects] if kind == "ConsumeQueue" else ext_heads
        assert stats[kind] == (len(objects), sum(heads)), kind
        assert all(listing[k] > HEAD_FIRST for k in objects)
    # the recovery walks one head from the dispatch frontier's record; every other request is at most the
    # budget (these records are far smaller), and no byte is fetched twice
    assert requests >= 1 + (fetched - budget) // budget
    assert requests > 2 * files
    assert fetched <= files * size + budget


@pytest.mark.objectstore
def test_store_fetches_a_queue_when_a_read_asks_for_it(s3_server, tmp_path):
    """Opening ``cq.Store`` of a bucket fetches no ConsumeQueue object; a read fetches the objects of the
    queues it reads, whole, once, and nothing of the other topics' queues; the answers are the local ones."""
    root = write_brokers(tmp_path, messages=3000, consume_queue_file_size=20 * 200)[0]
    uri = s3_server.upload(root, "lazyqueues", "east")
    opts = {"endpoint": s3_server.endpoint, "region": "us-east-1"}
    with closing(cq.Store(uri, object_options=opts)) as remote, closing(cq.Store(root)) as local:
        topics = local.topics()
        assert remote.topics() == topics and len(topics) > 1
        assert [remote.queue_ids(t) for t in topics] == [local.queue_ids(t) for t in topics]
        kinds = remote.source.stats()
        assert "ConsumeQueue" not in kinds and "consumequeue" not in kinds
        keys = [k for k in remote.source.keys if k.startswith("consumequeue/")]
        sizes = {k: remote.source.size_of(k) for k in keys}

        def of(topic, queue=None):
            prefix = f"consumequeue/{topic}/" + ("" if queue is None else f"{queue}/")
            mine = [k for k in keys if k.startswith(prefix)]
            return len(mine), sum(sizes[k] for k in mine)

        topic = max(topics, key=lambda t: of(t)[0])
        assert of(topic, 0)[0] > 1  # several files in the queue
        assert np.array_equal(remote.consume_queue(topic, 0).read(), local.consume_queue(topic, 0).read())
        assert remote.source.stats()["ConsumeQueue"] == of(topic, 0)
        got = list(remote.consume(topic, "G", tags="*"))
        assert got == list(local.consume(topic, "G", tags="*"))
        # every queue of the topic once (queue 0's reader is cached by the Store), no other topic's
        assert remote.source.stats()["ConsumeQueue"] == of(topic)


@pytest.mark.objectstore
def test_last_queue_objects_fetched_by_growing_heads(s3_server, tmp_path, monkeypatch):
    """A queue's last ConsumeQueue and ext objects are fetched by heads twice as long each time until one
    holds the end of the queue's data, a ConsumeQueue's second head reaching at once as far as its first
    head's units guess the data goes (``data_bytes_guess``, with the end of the CommitLog's last object):
    the same answers as the local copy, and the requests counted."""
    from cq.readers import consumequeue, ext, objects

    monkeypatch.setattr(objects, "HEAD_FIRST", 20 * 8)
    # an ext's first head, from its ConsumeQueue's last ext address, made as short: the heads grow as well
    monkeypatch.setattr(ext, "head_holding", lambda *args: 20 * 8)
    root = tmp_path / "store"
    topic = generate_sample_store(root, messages=3000, seed=2, commit_log_file_size=1 << 18).main_topic
    uri = s3_server.upload(root, "heads", "east")
    opts = {"endpoint": s3_server.endpoint, "region": "us-east-1"}

    def heads(path: Path, enough, guess=None) -> tuple[int, int]:
        data, size, step, requests = path.read_bytes(), path.stat().st_size, 20 * 8, 0
        got = 0
        while got < size and not (got and enough(data[:got])):
            end = got + step
            if guess is not None and requests == 1:  # the first head's guess, once
                end = max(end, guess(data[:got]) or 0)
            got, step, requests = min(size, end), step * 2, requests + 1
        return requests, got

    log_end = max(int(f.name) + f.stat().st_size for f in (root / "commitlog").iterdir())
    guess = functools.partial(consumequeue.data_bytes_guess, log_end=log_end)

    with closing(cq.Store(uri, object_options=opts)) as remote, closing(cq.Store(root)) as local:
        assert list(remote.consume(topic, "G", tags="*")) == list(local.consume(topic, "G", tags="*"))
        assert "ConsumeQueueExt" not in remote.source.stats()  # a read that never consults the ext
        want = list(local.consume(topic, "GID_RED_CHEAP", sql=SAMPLE_SQL))
        assert list(remote.consume(topic, "GID_RED_CHEAP", sql=SAMPLE_SQL)) == want
        for q in local.queue_ids(topic):
            mine, theirs = remote.consume_queue(topic, q), local.consume_queue(topic, q)
            assert (mine.min_offset, mine.max_offset) == (theirs.min_offset, theirs.max_offset)
            assert remote.ext(topic, q).max_offset == local.ext(topic, q).max_offset
        stats = remote.source.stats()
    for kind, top, enough, guessed in (("ConsumeQueue", "consumequeue", consumequeue.data_ends_within, guess),
                                       ("ConsumeQueueExt", "consumequeue_ext", ext.data_ends_within, None)):
        want = [heads(f, enough, guessed) for f in sorted((root / top / topic).glob("*/*"))]
        assert all(r >= 2 for r, _ in want)  # several heads each
        if guessed is not None:  # fewer than by doubling alone
            assert sum(r for r, _ in want) < sum(heads(f, enough)[0] for f in sorted((root / top / topic).glob("*/*")))
        assert stats[kind] == (sum(r for r, _ in want), sum(b for _, b in want)), kind


@pytest.mark.objectstore
def test_truncated_objects_in_ranged_reads_name_uri_and_range(s3_server, tmp_path):
    """An object overwritten shorter after the listing: a record read by range, and a queue's head, fail
    naming the object's URI and the byte range asked, never a short answer; no secret in the message."""
    root, uri, opts = _multi_file_store(s3_server, tmp_path, "truncranges")
    with closing(cq.Store(uri, object_options=opts)) as remote, closing(cq.Store(root)) as local:
        topic = local.topics()[0]
        units = local.consume_queue(topic, 0).read()
        first = local.commit_log.files[0][0]
        off = int(units["commit_log_offset"][units["commit_log_offset"] >= first + 4096][0])
        key = remote.source.list_dir_files("commitlog")[0][1]
        cq_key = remote.source.list_dir_files(f"consumequeue/{topic}/1")[-1][1]
        fs = s3_server.filesystem()
        for k in (key, cq_key):
            with fs.open_output_stream(f"truncranges/east/{k}") as out:
                out.write(b"\0" * 100)
        with pytest.raises(cq.ObjectStoreError, match="shorter than listed") as info:
            remote.commit_log.read_message(off)
        assert info.value.uri == f"{uri}/{key}"
        assert info.value.byte_range == (off - first, off - first + RECORD_PROBE)
        # a small range past the new end (the server's answer longer than the range asked)
        with pytest.raises(cq.ObjectStoreError, match="shorter than listed") as info:
            remote.source.read_range(key, 200, 300)
        assert info.value.byte_range == (200, 300)
        with pytest.raises(cq.ObjectStoreError, match="shorter than listed") as info:
            remote.consume_queue(topic, 1).read()
        assert info.value.uri == f"{uri}/{cq_key}" and info.value.byte_range[0] == 0
        assert s3_server.secret_key not in str(info.value)


@pytest.mark.objectstore
def test_recovery_walk_fetches_heads_not_preallocated_objects(s3_server, tmp_path):
    """The CommitLog's end by the broker's recovery walk (``recovery="walk"``) from a bucket: the local end,
    from the head of the last object that holds the data, not the preallocated object whole."""
    root = write_brokers(tmp_path, messages=3000, commit_log_file_size=16 << 20)[0]
    uri = s3_server.upload(root, "recovery", "east")
    step = 256 << 10  # the budget of a request: the walk's head grows by as much
    opts = {"endpoint": s3_server.endpoint, "region": "us-east-1", "batch_bytes": step, "recovery": "walk"}
    with closing(cq.Store(uri, object_options=opts)) as remote, closing(cq.Store(root)) as local:
        end = local.commit_log.max_offset
        assert len(local.commit_log.files) == 1 and end > 2 * step
        assert remote.commit_log.max_offset == end
        heads = end // step + 1  # the walk stops at the unwritten space after the end, in the last head
        assert remote.source.stats()["CommitLog"] == (heads, heads * step)
        topic = local.topics()[0]
        assert list(remote.consume(topic, "G", sql="a > 5")) == list(local.consume(topic, "G", sql="a > 5"))
        assert remote.source.stats()["CommitLog"] == (heads, heads * step)  # every record lies in the heads


@pytest.mark.objectstore
def test_a_glob_over_a_bucket_names_its_stores(s3_server, tmp_path, capsys, monkeypatch):
    """``s3://bucket/brokers/*`` names the stores under the prefix as a local glob names
    directories: a Cluster, the commands and the data source's planning read them as the URIs listed one
    by one; a pattern matching nothing, or a wildcard in the bucket, is an error naming the pattern."""
    local = write_brokers(tmp_path, messages=400)
    uris = [s3_server.upload(root, "globbed", f"brokers/broker-{root.parent.name}") for root in local]
    s3_server.upload(local[0], "globbed", "elsewhere/broker-x")  # under another prefix: not matched
    options = {"endpoint": s3_server.endpoint, "region": "us-east-1"}
    assert store_roots("s3://globbed/brokers/broker-*", object_options=options) == uris
    assert store_roots("s3://globbed/*/broker-[ex]*", object_options=options) == sorted(
        [uris[0], "s3://globbed/elsewhere/broker-x"])
    with closing(cq.Cluster("s3://globbed/brokers/*", object_options=options)) as by_pattern, \
            closing(cq.Cluster(uris, object_options=options)) as by_uris:
        assert list(by_pattern.stores) == list(by_uris.stores)
        topic = by_uris.topics()[0]
        assert [(m.broker, m.commit_log_offset) for m in by_pattern.consume(topic, "G", tags="*")] == \
            [(m.broker, m.commit_log_offset) for m in by_uris.consume(topic, "G", tags="*")]
    for bad in ("s3://globbed/brokers/nobody-*", "s3://glob*/brokers/broker-a"):
        with pytest.raises(cq.StoreFormatError) as err:
            store_roots(bad, object_options=options)
        assert bad in str(err.value) and s3_server.secret_key not in str(err.value)
    monkeypatch.setenv("AWS_ENDPOINT_URL", s3_server.endpoint)
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    got = _run(capsys, ["inspect", "s3://globbed/brokers/broker-*"])
    assert got == _run(capsys, ["inspect", *uris]) and got[0] == 0
def test_recovery_walk_heads_at_once_and_sealed_objects_walked_once(s3_server, tmp_path, monkeypatch):
    """The recovery walk's three objects: their first heads fetched at once, the end the local one; a later
    Store of this process walks the last object alone while the listing gives the others the same size and
    time (the sealed-file rule, docs/live.md#sealed-files), and every object again once they are uploaded
    anew. The answers are the local ones throughout."""
    from cq.readers import commitlog, objectlog

    monkeypatch.setattr(commitlog, "SEALED_AGE_NS", -(10**12))  # every object old enough to be noted
    monkeypatch.setattr(commitlog, "_SEALED", {})
    root, uri, opts = _multi_file_store(s3_server, tmp_path, "sealed")
    opts["recovery"] = "walk"  # the broker's walk from the third-to-last object
    with closing(cq.Store(root)) as local:
        end, files = local.commit_log.max_offset, local.commit_log.files
        topic = local.topics()[0]
        want = list(local.consume(topic, "G", sql="a > 5"))
    assert len(files) > 3
    walked = []
    walk = objectlog.RangedLog._walk_file

    def counted(self, index, check_crc, pos=0):
        walked.append(index)
        return walk(self, index, check_crc, pos)

    monkeypatch.setattr(objectlog.RangedLog, "_walk_file", counted)
    last = len(files) - 1
    for expected in ([last - 2, last - 1, last], [last], [last]):
        walked.clear()
        with closing(cq.Store(uri, object_options=opts)) as remote:
            assert remote.commit_log.max_offset == end
            assert walked == expected
            if expected != [last]:  # the three heads, whole objects here, one request each
                assert remote.source.stats()["CommitLog"] == (3, 3 * (1 << 18))
            assert list(remote.consume(topic, "G", sql="a > 5")) == want
    time.sleep(1.1)  # a new upload: a later modification time (listed to the second)
    s3_server.upload(root, "sealed", "east")
    walked.clear()
    with closing(cq.Store(uri, object_options=opts)) as remote:
        assert remote.commit_log.max_offset == end and walked == [last - 2, last - 1, last]


@pytest.mark.objectstore
def test_a_failed_request_among_concurrent_ones_names_its_object(s3_server, tmp_path):
    """Requests made at once (a batch's ranges over several objects): one object overwritten shorter after
    the listing fails the read with an error naming that object's URI and the byte range asked, once the
    others have ended; no secret in the message."""
    root, uri, opts = _multi_file_store(s3_server, tmp_path, "concurrent")
    with closing(cq.Store(uri, object_options=opts)) as remote, closing(cq.Store(root)) as local:
        topic = local.topics()[0]
        units = local.consume_queue(topic, 0).read()
        offs, sizes = units["commit_log_offset"].astype(np.int64), units["size"].astype(np.int64)
        keys = [k for _, k in remote.source.list_dir_files("commitlog")]
        assert len(keys) > 3
        with s3_server.filesystem().open_output_stream(f"concurrent/east/{keys[1]}") as out:
            out.write(b"\0" * 100)
        with pytest.raises(cq.ObjectStoreError, match="shorter than listed") as info:
            remote.commit_log.decode_copied(offs, sizes)
        assert info.value.uri == f"{uri}/{keys[1]}" and info.value.byte_range is not None
        assert s3_server.secret_key not in str(info.value)


# ------------------------------------------------------------------ the CommitLog's end from the dispatch frontier
def _frontier_unit(local: cq.Store) -> tuple[int, int]:
    """The dispatch frontier's unit of a local store: the last unit whose record ends furthest."""
    last = []
    for topic in local.topics():
        for q in local.queue_ids(topic):
            queue = local.consume_queue(topic, q)
            if queue.max_offset > queue.min_offset:
                last.append(queue.unit(queue.max_offset - 1)[:2])
    return dispatch_frontier(last)


def _answers(store: cq.Store) -> dict:
    return {topic: [(m.queue_id, m.queue_offset, m.commit_log_offset, m.body)
                    for m in store.consume(topic, "G", tags="*")] for topic in store.topics()}


@pytest.mark.objectstore
def test_commit_log_end_from_the_dispatch_frontier(s3_server, tmp_path):
    """Opening a store in a bucket and taking a read's cut (what the data source's plan does) finds the
    CommitLog's end from the dispatch frontier: one head fetched from the frontier's record, not the last
    three objects' data; each queue the read does not read costs one small tail of its last ConsumeQueue
    object. The ends, cuts and answers are the local ones; ``recovery="walk"`` walks the three objects."""
    root, uri, opts = _multi_file_store(s3_server, tmp_path, "frontier")
    budget = 16 << 10
    opts["batch_bytes"] = budget
    with closing(cq.Store(root)) as local:
        end, sizes = local.commit_log.max_offset, _file_sizes(local.commit_log)
        starts = local.commit_log.file_starts
        phys, size = _frontier_unit(local)
        topic = local.topics()[0]
        cut = local.cut(topic)
        queues = sum(len(local.queue_ids(t)) for t in local.topics())
        others = queues - len(local.queue_ids(topic))
        want = _answers(local)
    assert len(sizes) > 3 and phys + size == end  # every record dispatched: nothing past the frontier
    last_three = sum(sizes[-3:])
    with closing(cq.Store(uri, object_options=opts)) as remote:
        remote.prefetch(topic)
        assert remote.cut(topic) == cut
        stats = remote.source.stats()
        # one request: the frontier's record and the RECORD_PROBE bytes after it (nothing follows it here)
        index = int(np.searchsorted(starts, phys, side="right")) - 1
        head = min(int(starts[index]) + sizes[index], phys + size + RECORD_PROBE) - phys
        assert stats["CommitLog"] == (1, head)
        assert head * 100 < last_three
        # the other topics' queues: one tail each (their last object's first TAIL_FIRST bytes, or less)
        tails, tail_bytes = stats["ConsumeQueueTail"]
        assert tails == others and tail_bytes <= others * TAIL_FIRST
        assert _answers(remote) == want
    with closing(cq.Store(uri, object_options={**opts, "recovery": "walk"})) as remote:
        assert remote.commit_log.max_offset == end
        assert remote.source.stats()["CommitLog"][1] >= last_three - sizes[-1]  # the broker's walk
        assert "ConsumeQueueTail" not in remote.source.stats()


@pytest.mark.objectstore
def test_crashed_store_walks_past_the_frontier(s3_server, tmp_path, data_dir):
    """A crashed store whose last records were never dispatched (docs/reliability.md#undispatched): the walk
    from the frontier passes them, so the bucket's end and answers are the local ones, the restarted broker's."""
    root = tmp_path / "store"
    shutil.copytree(data_dir / "golden_store", root)
    with closing(cq.CommitLog(str(root / "commitlog"))) as log:
        frontier = [m.commit_log_offset for m in log.messages()][-40]
    for path in sorted((root / "consumequeue").glob("*/*/*")):
        units = np.fromfile(path, dtype=cq.format.CQ_UNIT_DTYPE)
        late = (units["commit_log_offset"] >= frontier) & (units["size"] > 0)
        if late.any():
            units[np.argmax(late):] = np.zeros(1, dtype=cq.format.CQ_UNIT_DTYPE)
            units.tofile(path)
    (root / "abort").write_bytes(b"")
    uri = s3_server.upload(root, "crashed", "golden")
    opts = {"endpoint": s3_server.endpoint, "region": "us-east-1"}
    with closing(cq.Store(uri, object_options=opts)) as remote, closing(cq.Store(root)) as local, \
            closing(cq.Store(data_dir / "golden_store")) as golden:
        index, pos = remote.commit_log.walk_start()  # the end of the last dispatched record
        assert pos > 0 and remote.commit_log.files[index][0] + pos <= frontier < remote.commit_log.max_offset
        assert remote.commit_log.max_offset == local.commit_log.max_offset == golden.commit_log.max_offset
        assert _answers(remote) == _answers(local) == _answers(golden)


def _damaged_copy(s3_server, tmp_path, bucket: str, damage) -> tuple[Path, str, dict, int, int]:
    """A multi-file store whose local copy ``damage(root, frontier unit, records of the last object)`` changes
    before it is uploaded: ``(root, URI, options, frontier record's offset, its size)``."""
    root = write_brokers(tmp_path, messages=3000, commit_log_file_size=1 << 18)[0]
    with closing(cq.Store(root)) as local:
        phys, size = _frontier_unit(local)
        start, path = local.commit_log.files[-1]
        units = np.concatenate([local.consume_queue(t, q).read() for t in local.topics() for q in local.queue_ids(t)])
        inside = np.sort(units["commit_log_offset"][units["commit_log_offset"] >= start])
    damage(Path(path), phys - start, size, inside - start)
    uri = s3_server.upload(root, bucket, "east")
    return root, uri, {"endpoint": s3_server.endpoint, "region": "us-east-1"}, phys, size


def _patch(path: Path, at: int, data: bytes) -> None:
    with open(path, "r+b") as f:
        f.seek(at)
        f.write(data)


@pytest.mark.objectstore
def test_a_damaged_frontier_record_falls_back_to_the_walk(s3_server, tmp_path):
    """The frontier's own record not what its unit says (here its body CRC does not match, which ends the
    broker's recovery there): the walk from the third-to-last object, so the end and answers are the local ones."""
    def flip_body(path, pos, size, _records):
        at = pos + 8  # BODYCRC (docs/formats.md#commitlog): the body no longer matches it
        _patch(path, at, bytes([path.read_bytes()[at] ^ 0x01]))

    root, uri, opts, phys, _size = _damaged_copy(s3_server, tmp_path, "badfrontier", flip_body)
    with closing(cq.Store(uri, object_options=opts)) as remote, closing(cq.Store(root)) as local:
        assert local.commit_log.max_offset == phys  # the CRC ends the local walk at the frontier's record
        assert remote.commit_log.max_offset == phys
        assert _answers(remote) == _answers(local)


@pytest.mark.objectstore
def test_a_damaged_record_before_the_frontier_is_an_error_or_the_walk(s3_server, tmp_path):
    """A record before the frontier zeroed after it was dispatched (the local walk ends the log there): a read
    of it from the bucket fails naming the object's URI and the record's byte offset, never decodes it
    silently; ``recovery="walk"`` reads the log's end as the local reader does, with the same answers."""
    chosen = {}

    def zero_one(path, pos, size, records):
        at = int(records[len(records) // 2])  # a record in the middle of the last object
        assert at < pos
        nxt = int(records[np.searchsorted(records, at, side="right")])
        chosen["at"] = at
        _patch(path, at, b"\0" * (nxt - at))

    root, uri, opts, phys, size = _damaged_copy(s3_server, tmp_path, "badrecord", zero_one)
    with closing(cq.Store(root)) as local:
        start, _ = local.commit_log.files[-1]
        assert local.commit_log.max_offset == start + chosen["at"]
        want = _answers(local)
        victim = next(t for t in local.topics() for q in local.queue_ids(t)
                      if (local.consume_queue(t, q).read()["commit_log_offset"] == start + chosen["at"]).any())
    key = f"commitlog/{start:020d}"
    with closing(cq.Store(uri, object_options=opts)) as remote:
        assert remote.commit_log.max_offset == phys + size  # the frontier's walk does not read that record
        with pytest.raises(cq.StoreFormatError) as info:
            list(remote.consume(victim, "G", tags="*"))
        assert info.value.path == f"{uri}/{key}" and info.value.offset == chosen["at"]
    with closing(cq.Store(uri, object_options={**opts, "recovery": "walk"})) as remote:
        assert remote.commit_log.max_offset == start + chosen["at"]
        assert _answers(remote) == want


def test_a_queue_read_by_ranges_within_a_plans_bounds(s3_server, tmp_path):
    """A Store given a queue's bounds as a plan found them (``take_queue_bounds``, docs/object-storage.md#spark)
    reads the queue by ranges: a read of some of its units fetches those units' bytes alone, not the queue's
    objects, and gives the units the local queue holds; a read elsewhere in the queue fetches that too; the
    reader pickles with its bounds and reads the same after."""
    root = tmp_path / "store"
    topic = generate_sample_store(root, messages=8000, seed=9, consume_queue_file_size=20 * 600).main_topic
    uri = s3_server.upload(root, "ranged", "broker-a")
    with closing(cq.Store(str(root))) as local_store:
        local = local_store.consume_queue(topic, 0)
        lo, hi = local.min_offset, local.max_offset
        assert len(local.files) >= 2 and hi - lo > 700
        want = local.read(lo, hi - lo)
    with closing(cq.Store(uri, object_options={"endpoint": s3_server.endpoint, "region": "us-east-1"})) as store:
        store.take_queue_bounds(topic, 0, lo, hi)
        store.prefetch(topic, [0], windows={0: [(lo + 550, lo + 700)]})  # across two objects
        assert store.source.stats()["ConsumeQueue"] == (2, 150 * fmt.CQ_STORE_UNIT_SIZE)
        queue = store.consume_queue(topic, 0)
        assert (queue.min_offset, queue.max_offset) == (lo, hi)
        assert queue.read(lo + 550, 150).tolist() == want[550:700].tolist()
        assert store.source.stats()["ConsumeQueue"][1] == 150 * fmt.CQ_STORE_UNIT_SIZE  # nothing fetched again
        assert queue.read(lo, 10).tolist() == want[:10].tolist()  # outside the window: fetched now
        assert store.source.stats()["ConsumeQueue"][1] == 160 * fmt.CQ_STORE_UNIT_SIZE
        again = pickle.loads(pickle.dumps(queue))
        assert (again.min_offset, again.max_offset) == (lo, hi)
        assert again.read(lo, hi - lo).tolist() == want.tolist()
        again.close()
        store.take_queue_bounds(topic, 1, 0, 0)  # an empty queue, as the plan saw it
        assert len(store.consume_queue(topic, 1)) == 0


def test_given_back_buffers_are_kept_zeroed_within_their_bound(s3_server, tmp_path, monkeypatch):
    """A read that gives back the CommitLog records it fetched leaves their buffers to the process, zeroed,
    for the next buffers of their size (docs/object-storage.md#spark), never more than
    ``KEPT_BUFFER_BYTES`` of pages: another Store's read takes them and reads the local rows; past the
    bound a buffer's memory goes back to the system."""
    from cq.readers import objectlog

    root = tmp_path / "store"
    topic = generate_sample_store(root, messages=3000, seed=4, commit_log_file_size=1 << 18).main_topic
    uri = s3_server.upload(root, "kept", "east")
    opts = {"endpoint": s3_server.endpoint, "region": "us-east-1"}
    monkeypatch.setattr(objectlog, "_POOL", objectlog._BufferPool())
    with closing(cq.Store(root)) as local:
        want = [m.msg_id for m in local.consume(topic, "GID_ALL", tags="*")]
    with closing(cq.Store(uri, object_options=opts)) as remote:
        assert [m.msg_id for m in remote.consume(topic, "GID_ALL", tags="*")] == want
        kept = objectlog._POOL.kept_bytes
        assert 0 < kept <= objectlog.KEPT_BUFFER_BYTES and remote.commit_log.held_bytes == 0
    taken = objectlog._POOL.take(1 << 18)  # a kept buffer is all zeros
    assert taken is not None and not np.frombuffer(taken, dtype=np.uint8).any()
    assert objectlog._POOL.give(taken, [])
    with closing(cq.Store(uri, object_options=opts)) as again:
        assert [m.msg_id for m in again.consume(topic, "GID_ALL", tags="*")] == want  # reads through the kept buffers
        assert objectlog._POOL.kept_bytes <= objectlog.KEPT_BUFFER_BYTES
    monkeypatch.setattr(objectlog, "KEPT_BUFFER_BYTES", 1 << 18)  # room for one object's pages
    monkeypatch.setattr(objectlog, "_POOL", objectlog._BufferPool())
    with closing(cq.Store(uri, object_options=opts)) as bounded:
        assert [m.msg_id for m in bounded.consume(topic, "GID_ALL", tags="*")] == want
        assert objectlog._POOL.kept_bytes <= 1 << 18
        assert len(bounded.commit_log.files) > 2  # the others gave their memory back


def test_a_closed_store_gives_back_its_in_memory_objects(s3_server, tmp_path):
    """A Store of a bucket keeps the ext objects and the queue units it read by ranges in memory until it
    closes (docs/object-storage.md#costs): closed, it holds none of them."""
    root = tmp_path / "store"
    topic = generate_sample_store(root, messages=3000, seed=12, commit_log_file_size=1 << 18).main_topic
    uri = s3_server.upload(root, "closed", "east")
    with closing(cq.Store(root)) as local:
        want = list(local.consume(topic, "GID_RED_CHEAP", sql=SAMPLE_SQL))
        lo, hi = local.consume_queue(topic, 0).min_offset, local.consume_queue(topic, 0).max_offset
        units = local.consume_queue(topic, 0).read(lo, hi - lo).tolist()
    store = cq.Store(uri, object_options={"endpoint": s3_server.endpoint, "region": "us-east-1"})
    store.take_queue_bounds(topic, 0, lo, hi)
    assert store.consume_queue(topic, 0).read(lo, hi - lo).tolist() == units
    assert list(store.consume(topic, "GID_RED_CHEAP", sql=SAMPLE_SQL)) == want
    buffers = [buf for buf, _ in store.source._ranged.values()]
    assert buffers and store.source.stats()["ConsumeQueueExt"][1] > 0
    store.close()
    assert not store.source._ranged and all(buf.closed for buf in buffers)
