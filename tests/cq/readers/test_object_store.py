"""A store in object storage (docs/object-storage.md), read from a real S3 server (s3proxy on loopback):
everything read from the bucket equals what the local readers read from the same store, requests are
coalesced, and every failure names the URI (and the byte range) without a credential."""
from __future__ import annotations

import os
import pickle
import re
from contextlib import closing
from pathlib import Path

import numpy as np
import pytest
from cluster_stores import write_brokers
from helpers import DATA

import cq
import rmqfilter
from cq.readers.objects import COALESCE_GAP, ObjectStore, coalesce

ROOT = Path(__file__).resolve().parents[3]


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


# ------------------------------------------------------------------ a real S3 server


def _bucket_store(s3_server, local: Path, bucket: str, prefix: str, **options) -> ObjectStore:
    uri = s3_server.upload(local, bucket, prefix)
    return ObjectStore(uri, endpoint=s3_server.endpoint, region="us-east-1", **options)


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
        starts = local.commit_log.file_starts
        ranges = [coalesce(u["commit_log_offset"], u["size"], starts)
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
            starts = np.array([s for s, _ in log.files])
        requests = remote.stats()["CommitLog"][0]
        assert requests < records / 10
        expected = coalesce(units["commit_log_offset"], units["size"], starts)
        small = ObjectStore(remote.uri, endpoint=s3_server.endpoint, region="us-east-1", batch_bytes=4096)
        small.read_messages(units["commit_log_offset"], units["size"])
        narrow = coalesce(units["commit_log_offset"], units["size"], starts, budget=4096)
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
    source = ObjectStore(uri, endpoint=s3_server.endpoint, region="us-east-1")
    with pytest.raises(cq.UnsupportedLayoutError, match=layout) as info:
        source.read_messages([0], [100]) if store == "dledger_store" else source.topics()
    assert uri in str(info.value)


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
    root = write_brokers(tmp_path, messages=3000, commit_log_file_size=1 << 18)[0]
    uri = s3_server.upload(root, "ranges", "east")
    with closing(cq.Store(uri, object_options={"endpoint": s3_server.endpoint, "region": "us-east-1"})) as remote, \
            closing(cq.Store(root)) as local:
        topic = local.topics()[0]
        units = local.consume_queue(topic, 0).read()
        offs, sizes = units["commit_log_offset"].astype(np.int64), units["size"].astype(np.int64)
        got = remote.commit_log.decode_copied(offs, sizes)
        want = local.commit_log.decode_columns(offs)
        assert got.dicts() == want.dicts()
        ranges = coalesce(offs, sizes, local.commit_log.file_starts)
        assert remote.source.stats()["CommitLog"] == (len(ranges), int((ranges[:, 1] - ranges[:, 0]).sum()))
        assert 1 < len(ranges) < len(offs) / 10
        # a unit whose size is not its record's: the whole-object path, as the local decoder reads it
        wrong = sizes.copy()
        wrong[0] += 1
        assert remote.commit_log.decode_copied(offs, wrong).dicts() == want.dicts()
