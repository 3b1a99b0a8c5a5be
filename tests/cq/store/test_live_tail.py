"""The stream's offset rules (cq.store.stream) and ``rmqfilter tail`` against a writer process (docs/live.md)."""
from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from live_support import ROOT, live_writer

import cq
from cq.store import stream
from cq.writer.config_writer import write_consumer_offsets
from cq.writer.writer import StoreWriter

TOPIC, GROUP, SQL = "LiveTopic", "GID_RED", "color = 'red'"
CLI = [sys.executable, "-c", "import sys; from rmqfilter import main; sys.exit(main())"]


def _store(tmp_path: Path, per_queue=(5, 3)) -> Path:
    root = tmp_path / "store"
    with StoreWriter(root) as w:
        for q, n in enumerate(per_queue):
            for i in range(n):
                w.append(TOPIC, b"m", queue_id=q, properties={"seq": str(i)})
    return root


@pytest.mark.parametrize(("text", "message"), [
    ("[1, 2]", "expected a JSON object"),
    ('{"T": [1]}', "topic 'T' must map queue ids to offsets"),
    ('{"T": {"x": 1}}', "queue id 'x' of topic 'T' is not a non-negative integer"),
    ('{"T": {"0": -3}}', "offset -3 of queue T/0 is not a non-negative integer"),
    ('{"T": {"0": 1}', "is not JSON: Expecting ',' delimiter at line 1 column 15"),
    ("newest", "expected earliest, latest, committed or a JSON object"),
])
def test_bad_starting_offsets_name_the_input(text, message):
    with pytest.raises(ValueError, match="startingOffsets") as err:
        stream.parse_starting_offsets(text)
    assert message in str(err.value)


def test_starting_offsets_are_checked_against_the_store(tmp_path):
    root = _store(tmp_path)
    store = cq.Store(root)
    cut = store.cut(TOPIC)
    assert stream.starting_offsets(store, cut, "earliest") == {TOPIC: {"0": 0, "1": 0}}
    assert stream.starting_offsets(store, cut, "latest") == {TOPIC: {"0": 5, "1": 3}}
    assert stream.starting_offsets(store, cut, {TOPIC: {"1": 2}}) == {TOPIC: {"0": 0, "1": 2}}
    with pytest.raises(ValueError, match=r"queue LiveTopic/7 does not exist .*\(queues: 0, 1\)"):
        stream.starting_offsets(store, cut, {TOPIC: {"7": 0}})
    with pytest.raises(ValueError, match=r"offset 9 of queue LiveTopic/0 is outside the queue's \[0, 5\]"):
        stream.starting_offsets(store, cut, {TOPIC: {"0": 9}})
    with pytest.raises(ValueError, match="topic 'Nope' has no queues"):
        stream.starting_offsets(store, cut, {"Nope": {"0": 0}})
    # committed: the group's offsets, clamped into each queue; queues without one start at the minimum
    write_consumer_offsets(root, {(TOPIC, "GC"): {0: 4, 1: 99}})
    assert stream.starting_offsets(store, cut, "committed", group="GC") == {TOPIC: {"0": 4, "1": 3}}
    assert stream.starting_offsets(store, cut, "committed", group="Other") == {TOPIC: {"0": 0, "1": 0}}


def test_next_offsets_share_the_unit_budget_and_pick_up_new_queues(tmp_path):
    root = _store(tmp_path, (10, 2, 6))
    cut = cq.Store(root).cut(TOPIC)
    start = {TOPIC: {"0": 0, "1": 0}}  # queue 2 appeared since
    assert stream.next_offsets(start, cut) == {TOPIC: {"0": 10, "1": 2, "2": 6}}
    step = stream.next_offsets(start, cut, max_units=9)
    assert step == {TOPIC: {"0": 4, "1": 2, "2": 3}}  # 3 each; queue 1 could use 2, the spare unit went on
    assert sum(step[TOPIC].values()) == 9
    # batches under a budget cover each queue exactly once, in order
    seen, offsets = [], {TOPIC: {}}
    while True:
        end = stream.next_offsets(offsets, cut, max_units=4)
        todo = stream.ranges(offsets, end, TOPIC)
        if not todo:
            break
        assert sum(e - s for s, e in todo.values()) <= 4
        seen += [(q, o) for q, (s, e) in todo.items() for o in range(s, e)]
        offsets = end
    assert sorted(seen) == [(q, o) for q, n in enumerate((10, 2, 6)) for o in range(n)]
    # AvailableNow: never past the target
    assert stream.next_offsets(start, cut, target={TOPIC: {"0": 1}}) == {TOPIC: {"0": 1, "1": 0, "2": 0}}


def test_tail_follows_the_writer_and_ctrl_c_exits_cleanly(tmp_path):
    root = tmp_path / "store"
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    with live_writer(root, 3.0, rate=400) as proc:
        tail = subprocess.Popen(
            [*CLI, "tail", str(root), "--topic", TOPIC, "--group", GROUP,
             "--sql", SQL, "--from", "earliest", "--format", "jsonl", "--interval", "0.1"],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
        lines: list[str] = []
        reader = threading.Thread(target=lambda: lines.extend(iter(tail.stdout.readline, "")), daemon=True)
        reader.start()
        try:
            proc.wait(timeout=30)
            want = [(m.queue_id, m.queue_offset) for m in cq.Store(root).consume(TOPIC, GROUP, sql=SQL)]
            deadline = time.monotonic() + 30
            while len(lines) < len(want) and time.monotonic() < deadline and tail.poll() is None:
                time.sleep(0.1)  # tail catches up with the last writes
            tail.send_signal(signal.SIGINT)
            tail.wait(timeout=120)  # generous: a loaded machine (make test runs two passes at once)
            reader.join(timeout=10)
            err = tail.stderr.read()
        finally:
            if tail.poll() is None:
                tail.kill()
                tail.wait()
    assert tail.returncode == 130 and "Traceback" not in err, err
    rows = [json.loads(line) for line in lines]
    # exactly what the group receives from the finished store, each message once, queue order kept
    got = [(r["queue_id"], r["queue_offset"]) for r in rows]
    assert sorted(got) == sorted(want) and len(set(got)) == len(got)
    for q in {q for q, _ in got}:
        offs = [o for qq, o in got if qq == q]
        assert offs == sorted(offs)
    assert {q for q, _ in got} == {0, 1, 2, 3}  # queues that appeared mid-run are followed too
    assert all(r["properties"]["color"] == "red" for r in rows)


def test_tail_errors_name_the_input(tmp_path):
    root = _store(tmp_path)
    env = dict(os.environ, PYTHONPATH=str(ROOT))

    def run(*args):
        return subprocess.run([*CLI, "tail", str(root), "--topic", TOPIC,
                               "--group", "G", "--tags", "*", *args], check=False, capture_output=True, text=True, env=env,
                              timeout=60)

    r = run("--from", '{"LiveTopic": {"5": 0}}')
    assert r.returncode == 2 and "queue LiveTopic/5 does not exist" in r.stderr and "Traceback" not in r.stderr
    r = run("--from", '{"LiveTopic": {"0": 99}}')
    assert r.returncode == 2 and "offset 99 of queue LiveTopic/0 is outside" in r.stderr
    r = run("--from", "earliest", "--limit", "8")
    assert r.returncode == 0 and len(r.stdout.splitlines()) == 8


def test_tail_of_a_store_deleted_mid_stream_is_a_clear_error(tmp_path):
    root = _store(tmp_path)
    store = cq.Store(root)
    rounds = []

    def sleep(_):
        rounds.append(1)
        if len(rounds) == 2:
            shutil.rmtree(root)

    got = []
    with pytest.raises(cq.StoreFormatError, match="no longer exists") as err:
        for m in stream.tail(store, TOPIC, "G", tags="*", starting="earliest", sleep=sleep):
            got.append((m.queue_id, m.queue_offset))
    assert len(got) == 8 and err.value.path == str(root)


def test_tail_keeps_its_queue_readers_from_round_to_round_and_reopens_a_replaced_store(tmp_path, monkeypatch):
    """A round goes on from the previous round's ends (each queue opened once while the broker
    appends, new files included); a store directory replaced between rounds is read through a
    reopened Store."""
    root = tmp_path / "store"
    sizes = {"commit_log_file_size": 4096, "consume_queue_file_size": 4 * 20}  # files roll between rounds
    writer = [StoreWriter(root, **sizes)]
    for q, n in enumerate((5, 3)):
        for i in range(n):
            writer[0].append(TOPIC, b"m", queue_id=q, properties={"seq": str(i)})
    writer[0].flush()
    store = cq.Store(root)
    stores = [store]  # the tail's Stores: the one given, then any it reopens
    opened = []  # (which of the tail's Stores, queue id) of every queue reader they open
    real_open, real_readers, real_reopen = cq.Store._open_consume_queue, cq.Store._queue_readers, cq.Store.reopen

    def note(store_, queue_id):
        if any(store_ is s for s in stores):
            opened.append((next(i for i, s in enumerate(stores) if s is store_), int(queue_id)))

    def counting_open(self, key):  # a queue reader the Store keeps
        if key not in self._cqs:
            note(self, key[1])
        return real_open(self, key)

    def counting_readers(self, topic, queue_id):  # a queue reader for one pass
        if (topic, int(queue_id)) not in self._cqs:
            note(self, queue_id)
        return real_readers(self, topic, queue_id)

    def recording_reopen(self):
        stores.append(real_reopen(self))
        return stores[-1]

    monkeypatch.setattr(cq.Store, "_open_consume_queue", counting_open)
    monkeypatch.setattr(cq.Store, "_queue_readers", counting_readers)
    monkeypatch.setattr(cq.Store, "reopen", recording_reopen)
    rounds = []

    def sleep(_):
        rounds.append(1)
        if len(rounds) <= 3:  # the broker appends to both queues between rounds
            for q in (0, 1):
                writer[0].append(TOPIC, b"m", queue_id=q, properties={"seq": f"late{len(rounds)}"})
            writer[0].flush()
        elif len(rounds) == 4:  # the store is restored from a copy: a new directory, new files
            writer[0].close()
            shutil.copytree(root, tmp_path / "copy")
            shutil.rmtree(root)
            os.rename(tmp_path / "copy", root)
            writer[0] = StoreWriter(root, append=True, **sizes)
            writer[0].append(TOPIC, b"m", queue_id=0, properties={"seq": "after-restore"})
            writer[0].flush()

    try:
        got = [(m.queue_id, m.queue_offset, m.properties["seq"])
               for m in stream.tail(store, TOPIC, "G", tags="*", starting="earliest", sleep=sleep,
                                    stop=lambda: len(rounds) >= 6)]
    finally:
        writer[0].close()
    want = [(m.queue_id, m.queue_offset, m.properties["seq"]) for m in cq.Store(root).consume(TOPIC, "G", tags="*")]
    assert sorted(got) == sorted(want) and len(set(got)) == len(got) and len(got) == 5 + 3 + 6 + 1
    # each queue opened once in 4 rounds of appends, and once more by the one Store reopened after the restore
    assert sorted(opened) == [(0, 0), (0, 1), (1, 0), (1, 1)] and len(stores) == 2


def test_tail_over_two_brokers_takes_each_brokers_new_units_with_its_broker(tmp_path, capsys):
    """Several stores (a cluster's brokers, docs/reading.md#clusters): each round reads every broker's
    new units; what a tail gives is what ``cq.Cluster`` consumes, each message naming its broker."""
    import rmqfilter
    from cq.writer.config_writer import write_topic_configs

    writers = {}
    for name in ("east", "west"):  # both roots are named "store": the names come from topics.json
        root = tmp_path / name / "store"
        writers[name] = StoreWriter(root)
        write_topic_configs(root, {TOPIC: 2, f"rmq_sys_SYNC_BROKER_MEMBER_{name}": 1})

    def write(n: int) -> None:
        for name, w in writers.items():
            for i in range(n):
                w.append(TOPIC, b"m", queue_id=i % 2, tags="TagA" if i % 3 else "TagB", properties={"b": name})
            w.flush()

    write(5)
    roots = [str(tmp_path / name / "store") for name in writers]
    cluster = cq.Cluster(roots)
    rounds = []

    def sleep(_):
        rounds.append(1)
        if len(rounds) == 1:
            write(4)  # more on both brokers while the tail waits

    got = []
    for m in stream.tail(cluster, TOPIC, "G", tags="TagA", starting="earliest", sleep=sleep,
                         stop=lambda: len(rounds) >= 2):
        got.append((m.broker, m.queue_id, m.queue_offset))
    for w in writers.values():
        w.close()
    want = [(m.broker, m.queue_id, m.queue_offset) for m in cluster.consume(TOPIC, "G", tags="TagA")]
    assert sorted(got) == sorted(want) and len(got) == len(set(got)) == 10  # TagA: 3 + 2 per broker
    assert {b for b, _, _ in got} == {"east", "west"}
    # one store's offsets are refused over several: queue ids repeat across brokers
    with pytest.raises(ValueError, match=r"over several stores \(brokers east, west\) expected a JSON object "
                                         r'\{"brokers": \{"<broker>": \{"topic"'):
        next(stream.tail(cluster, TOPIC, "G", tags="*", starting={TOPIC: {"0": 0}}))
    cluster.close()
    # the command: each line leads with its broker
    assert rmqfilter.main(["tail", *roots, "--topic", TOPIC, "--group", "G", "--tags", "TagA", "--from", "earliest",
                     "--limit", "10"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert sorted(tuple(int(x) if x.isdigit() else x for x in ln.split("\t")[:3]) for ln in lines) == sorted(want)


def test_tail_over_two_stores_starts_each_broker_at_its_own_offsets(tmp_path, capsys):
    """``--from`` over several stores: offsets per broker, under ``"brokers"`` (docs/live.md#offsets-per-broker);
    a broker it does not name starts at its minimum, one it names but that lacks the topic is refused."""
    from cluster_stores import write_brokers

    import rmqfilter
    from cq.writer.sample import SAMPLE_TOPICS

    topic = SAMPLE_TOPICS[0]
    roots = [str(r) for r in write_brokers(tmp_path, messages=120)]
    cluster = cq.Cluster(roots)
    ends = {(b, q): hi for b, _, q, _, hi in cluster.cut(topic).queues}
    given = {"east": {topic: {"0": 5, "2": ends[("east", 2)]}}, "west": {topic: {"1": 3}}}
    starts = {(b, q): given.get(b, {}).get(topic, {}).get(str(q), 0) for b, q in ends}
    want = [(m.broker, m.queue_id, m.queue_offset) for m in cluster.consume(
        topic, "G", tags="*", ranges={k: (starts[k], ends[k]) for k in ends})]
    got = [(m.broker, m.queue_id, m.queue_offset) for m in stream.tail(
        cluster, topic, "G", tags="*", starting={"brokers": given}, sleep=lambda _: None,
        stop=iter([False, True]).__next__)]
    assert got == want and len(got) == sum(ends.values()) - 5 - ends[("east", 2)] - 3  # every unit past the offsets
    cluster.close()
    assert rmqfilter.main(["tail", *roots, "--topic", topic, "--group", "G", "--tags", "*", "--from",
                     json.dumps({"brokers": given}), "--limit", str(len(want))]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert [tuple(int(x) if x.isdigit() else x for x in ln.split("\t")[:3]) for ln in lines] == want
    for text, message in [
        (json.dumps(given), 'over several stores (brokers east, west) expected a JSON object {"brokers": '),
        ('{"brokers": {"south": {}}}', "no broker 'south' among the stores (brokers: east, west)"),
        (json.dumps({"brokers": {"west": {topic: {"0": 9999}}}}),
         f"broker 'west': offset 9999 of queue {topic}/0 is outside"),
    ]:
        assert rmqfilter.main(["tail", *roots, "--topic", topic, "--group", "G", "--tags", "*", "--from", text]) == 2
        assert message in capsys.readouterr().err
    # offsets on a broker that does not hold the topic
    shutil.rmtree(Path(roots[1]) / "consumequeue" / SAMPLE_TOPICS[1])
    text = json.dumps({"brokers": {"west": {SAMPLE_TOPICS[1]: {"0": 0}}}})
    assert rmqfilter.main(["tail", *roots, "--topic", SAMPLE_TOPICS[1], "--group", "G", "--tags", "*", "--from", text]) == 2
    assert f"startingOffsets: broker 'west' does not hold topic {SAMPLE_TOPICS[1]!r}" in capsys.readouterr().err
    # one store keeps the one-store form
    assert rmqfilter.main(["tail", roots[1], "--topic", topic, "--group", "G", "--tags", "*", "--from",
                     json.dumps(given["west"]), "--limit", "2"]) == 0
    assert [ln.split("\t")[:2] for ln in capsys.readouterr().out.splitlines()] == [["0", "0"], ["0", "1"]]


def test_tail_over_two_stores_says_what_one_broker_expired_for_that_broker(tmp_path):
    from cluster_stores import write_brokers
    from live_support import expire_commit_log, expire_consume_queues

    from cq.writer.sample import SAMPLE_TOPICS

    topic = SAMPLE_TOPICS[0]
    roots = write_brokers(tmp_path, messages=300, commit_log_file_size=16 << 10, consume_queue_file_size=20 * 20)
    cluster = cq.Cluster(roots)
    calls = iter(range(10))

    def stop() -> bool:  # called before each round: east expires its oldest files before the first
        n = next(calls)
        if n == 0:
            expire_consume_queues(roots[0], topic, expire_commit_log(roots[0], 2))
        return n == 1

    lost: list[tuple] = []
    got = [m.broker for m in stream.tail(cluster, topic, "G", tags="*", starting="earliest", sleep=lambda _: None,
                                         stop=stop, on_lost=lambda *a, **kw: lost.append((a, kw)))]
    mins = {q: lo for _, q, lo, _ in cq.Store(roots[0]).cut(topic).queues}
    assert lost and {kw["broker"] for _, kw in lost} == {"east"}
    assert sum(a[2] for a, _ in lost if "expired by the broker before they were read" in a[3]) == sum(mins.values())
    west = sum(1 for _ in cluster.store("west").consume(topic, "G", tags="*"))
    assert got.count("west") == west and 0 < got.count("east")
    assert stream.lost_text(topic, 0, 3, "gone", "east") == f"3 unit(s) of queue {topic}/0 on broker 'east' lost: gone"
    cluster.close()
