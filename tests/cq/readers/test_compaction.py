"""Compaction topics, on a store RocketMQ's own broker wrote and compacted.

``tests/data/compaction_store`` (tests/data/COMPACTION_STORE.md): a two-queue compaction topic whose
messages repeat a few KEYS, compacted by the broker, then read from its first offset by tag and SQL92
groups, and after more messages and the copy drained by them. ``tests/data/compaction_store.json``
holds what the broker and the consumers reported; only the drain read the compaction files as they
are in the copy (docs/formats.md#compaction-store, docs/reading.md#compaction-topics).
"""
from __future__ import annotations

import json
import shutil
from contextlib import closing

import numpy as np
import pytest
from helpers import DATA, patch_file

import cq
from cq import format as fmt
from cq.readers.compaction import CompactionConsumeQueue, CompactionLog, compaction_queue_dirs
from cq.store.describe import describe

STORE = DATA / "compaction_store"
FACTS = json.loads((DATA / "compaction_store.json").read_text())
TOPIC = "CompactTopic"
GROUPS = {g["group"]: g for g in FACTS["broker"]["groups"]}


@pytest.fixture(scope="module")
def store():
    with closing(cq.Store(STORE)) as s:
        yield s


@pytest.fixture
def copy(tmp_path):
    root = tmp_path / "store"
    shutil.copytree(STORE, root)
    return root


def subscription(group: str) -> dict:
    g = GROUPS[group]
    return {} if g["type"] == "SQL92" else {"tags": g["expression"]}


def drained(group: str) -> dict:
    return {(r["queue_id"], r["queue_offset"]): (r["uniq_key"], r["msg_id"]) for r in FACTS["received"]
            if r["group"] == group and r["phase"] == "drain"}


def committed(group: str) -> dict[int, int]:
    return {p["queue_id"]: p["consumer_offset"] for p in GROUPS[group]["progress"]}


def test_the_store_holds_a_compaction_topic(store):
    assert FACTS["broker"]["rocketmq_version"] == "5.3.3"
    assert store.layout.compaction_topics == (TOPIC,)
    assert "compaction topics: CompactTopic" in store.layout.describe()
    assert store.topics() == [TOPIC] and store.queue_ids(TOPIC) == [0, 1]
    assert cq.read_position_checkpoint(STORE) == {(TOPIC, 0): 80, (TOPIC, 1): 80}


@pytest.mark.parametrize("queue_id", [0, 1])
def test_the_compaction_cq_points_at_the_compaction_log(store, queue_id):
    """Sparse ascending offsets; each unit's record in the log file of its CQ file's name, with the unit's
    queue offset and, as PHYSICALOFFSET, its own position in the compaction log."""
    queue = store.consume_queue(TOPIC, queue_id)
    assert isinstance(queue, CompactionConsumeQueue)
    offsets = queue.offsets
    assert (np.diff(offsets) > 0).all() and len(offsets) < queue.max_offset - queue.min_offset
    assert queue.max_offset == 90   # the last message of a queue is never compacted
    with store.compaction_log(TOPIC, queue_id) as log:
        assert isinstance(log, CompactionLog) and [s for s, _ in log.files] == [s for s, _ in queue.files]
        for unit in queue.units:
            msg = log.read_message(int(unit["commit_log_offset"]))
            assert (msg.queue_offset, msg.commit_log_offset, msg.store_size) == (
                int(unit["base_offset"]), int(unit["commit_log_offset"]), int(unit["size"]))
            assert msg.topic == TOPIC and msg.keys
        walked = [(m.queue_offset, m.commit_log_offset) for m in log.messages()]
    assert walked == [(int(u["base_offset"]), int(u["commit_log_offset"])) for u in queue.units]


@pytest.mark.parametrize("queue_id", [0, 1])
def test_each_key_keeps_its_newest_message_in_the_compacted_files(store, queue_id):
    """Below the checkpoint's position each KEYS text has one message, its newest there; the newest
    message of every key is served (docs/formats.md#compaction-store)."""
    sent = [s for s in FACTS["sent"] if s["queue_id"] == queue_id]
    newest = {}
    for s in sent:
        newest[" ".join(s["keys"])] = s["queue_offset"]
    with store.compaction_log(TOPIC, queue_id) as log:
        served = {m.queue_offset: m.keys for m in log.messages()}
    compacted = [k for o, k in served.items() if o <= 80]
    assert len(compacted) == len(set(compacted))
    assert set(newest.values()) <= set(served)


@pytest.mark.parametrize("group", sorted(GROUPS))
def test_consume_from_the_committed_offsets_is_what_the_drain_received(store, group):
    """Offsets, UNIQ_KEY and the offset message id (the compaction log position) of each message; a SQL92
    group receives every served message: the compaction store ignores the filter."""
    offsets = committed(group)
    result = store.consume(TOPIC, group, ranges={q: (o, None) for q, o in offsets.items()}, **subscription(group))
    got = {(m.queue_id, m.queue_offset): (m.properties["UNIQ_KEY"], m.msg_id) for m in result}
    assert got == drained(group)
    assert result.stats.commit_log_missing == 0
    if GROUPS[group]["type"] == "SQL92":
        assert result.stats.client_filtered == 0 and result.stats.delivered == result.stats.units_scanned


@pytest.mark.parametrize("group", sorted(GROUPS))
def test_backlog_is_what_the_drain_received(store, group):
    backlog = cq.backlog(store, TOPIC, group, **subscription(group))
    want = {}
    for q, _ in drained(group):
        want[q] = want.get(q, 0) + 1
    progress = {p["queue_id"]: p for p in GROUPS[group]["progress"]}
    for q in backlog.queues:
        assert (q.committed_offset, q.max_offset) == (progress[q.queue_id]["consumer_offset"],
                                                      progress[q.queue_id]["broker_offset"])
        assert q.will_receive == want.get(q.queue_id, 0) and q.expired == 0
        with closing(cq.Store(STORE)) as s:
            served = len(s.consume_queue(TOPIC, q.queue_id).units_between(q.committed_offset, q.max_offset))
        assert q.compacted == q.lag - served and q.to_dict()["compacted"] == q.compacted
    assert "offset(s) of the broker lag the broker's compaction removed" in str(backlog)


def test_why_says_compacted_for_replaced_messages_and_delivered_for_served_ones(store):
    group = "GID_COMPACT_TAG"
    received = drained(group)
    for s in FACTS["sent"]:
        q, o = s["queue_id"], s["queue_offset"]
        w = cq.why(store, TOPIC, group, tags="TagA", queue_id=q, queue_offset=o)
        served = o in store.consume_queue(TOPIC, q).offsets
        if not served:
            assert (w.delivered, w.dropped_by) == (False, "compaction")
            assert w.steps[0].reason == "compacted"
            assert w.verdict.startswith("NOT DELIVERED: dropped by the broker's compaction: compacted: a newer "
                                        "message with the same key replaced it")
            ev = w.steps[0].evidence
            same = [t["queue_offset"] for t in FACTS["sent"]
                    if t["queue_id"] == q and t["queue_offset"] > o and t["keys"] == s["keys"]]
            assert ev["newer_offsets"] == same[:5]    # the first five newer ones
            kept = [t for t in same if t in store.consume_queue(TOPIC, q).offsets]
            assert ev["kept_offset"] == (kept[-1] if kept else None)
        elif o >= committed(group)[q]:
            assert w.delivered == ((q, o) in received), s
            assert w.delivered == (s["tags"] == "TagA")
            if not w.delivered:
                assert w.dropped_by == "client"


def test_why_by_key_walks_each_message_of_the_key(store):
    answers = cq.why(store, TOPIC, "GID_COMPACT_SQL", key="k3")
    sent = {(s["queue_id"], s["queue_offset"]) for s in FACTS["sent"] if s["keys"] == ["k3"]}
    assert {(w.queue_id, w.queue_offset) for w in answers} == sent
    assert {w.dropped_by for w in answers if not w.delivered} == {"compaction"}
    # the served ones: the newest of the compacted files, and every one in the last file of each queue
    assert {(w.queue_id, w.queue_offset) for w in answers if w.delivered} == {
        (q, o) for q, o in sent if o in store.consume_queue(TOPIC, q).offsets}


def test_inspect_gives_the_brokers_offsets_and_the_compaction_stores(store):
    info = describe(store)
    for row in FACTS["broker"]["topics"][0]["queues"]:
        q = info["topics"][TOPIC][str(row["queue_id"])]
        assert (q["min_offset"], q["max_offset"]) == (row["min_offset"], row["max_offset"])
        served = store.consume_queue(TOPIC, row["queue_id"])
        assert q["compaction"] == {"min_offset": served.min_offset, "max_offset": served.max_offset,
                                   "units": len(served), "files": 2, "file_size": 460, "position": 80}


# ------------------------------------------------------------------ bad input
def test_a_compaction_topic_without_its_compaction_cq_is_an_error(copy):
    shutil.rmtree(copy / fmt.COMPACTION_DIR / fmt.COMPACTION_CQ_DIR / TOPIC / "1")
    with closing(cq.Store(copy)) as s:
        assert s.layout.compaction_topics == (TOPIC,)   # from topics.json
        with pytest.raises(cq.StoreFormatError, match="no compaction CQ") as info:
            list(s.consume(TOPIC, "G", tags="*"))
    assert info.value.path.endswith(f"compactionCq/{TOPIC}/1")


def test_a_compaction_log_file_without_its_cq_file_is_an_error(copy):
    log_dir, cq_dir = compaction_queue_dirs(copy, TOPIC, 0)
    last = max((copy / cq_dir).iterdir())
    last.unlink()
    with closing(cq.Store(copy)) as s, pytest.raises(cq.StoreFormatError, match="no compaction CQ file") as info:
        list(s.consume(TOPIC, "G", tags="*", queue_ids=[0]))
    assert info.value.path == str(copy / log_dir / last.name) and info.value.offset == 0


def test_units_out_of_order_name_the_file_and_unit(copy):
    cq_dir = compaction_queue_dirs(copy, TOPIC, 0)[1]
    first = min((copy / cq_dir).iterdir())
    unit = np.fromfile(first, dtype=fmt.BCQ_UNIT_DTYPE, count=2)
    patch_file(first, fmt.BCQ_STORE_UNIT_SIZE + 28, int(unit["base_offset"][0]).to_bytes(8, "big"))
    with pytest.raises(cq.StoreFormatError, match="is not above the unit before it") as info:
        _ = CompactionConsumeQueue(copy / cq_dir).units
    assert (info.value.path, info.value.offset) == (str(first), fmt.BCQ_STORE_UNIT_SIZE)


def test_a_broken_checkpoint_names_its_file(copy):
    path = copy / fmt.COMPACTION_DIR / fmt.COMPACTION_CHECKPOINT_FILE
    path.write_text('{"queueOffsetMap": {"CompactTopic_0": "x"}}')
    with pytest.raises(cq.StoreFormatError, match="not a compaction position checkpoint") as info:
        cq.read_position_checkpoint(copy)
    assert info.value.path == str(path)


def test_reads_that_do_not_follow_the_compaction_store_are_refused(store):
    """A classic queue read of a compaction CQ would read the CommitLog at compaction log positions: the
    cost report (which replays the broker's classic path) is refused, naming the queue."""
    from cq.analyses import cost

    queue = store.consume_queue(TOPIC, 0)
    with pytest.raises(cq.UnsupportedLayoutError, match="compaction topic 'CompactTopic' queue 0") as info:
        queue.unit(queue.min_offset)
    assert info.value.path == queue.directory
    with pytest.raises(cq.UnsupportedLayoutError, match="compaction topic"):
        cost.filter_cost(store, TOPIC, groups=[cost.CostGroup("G", "TagA", "TAG")], timing=False)


def test_the_path_of_a_compacted_message_says_compacted(store):
    """``rmqfilter why``'s state (docs/paths.md#states): ``compacted`` for a replaced message, ``pending`` for a
    served one above the committed offset; the copy in the topic is the CommitLog record."""
    from cq.analyses.paths import why_every_copy

    (path,) = why_every_copy(store, TOPIC, "GID_COMPACT_TAG", tags="TagA", queue_id=0, queue_offset=3)
    assert path.state == "compacted" and "a newer message with the same key replaced it" in path.sentence
    served = int(store.consume_queue(TOPIC, 0).offsets[-1])
    (path,) = why_every_copy(store, TOPIC, "GID_COMPACT_STAR", tags="*", queue_id=0, queue_offset=served)
    assert path.state == "pending" and path.why.delivered
    with store.dispatched_queue(TOPIC, 0) as dispatched:
        assert path.why.commit_log_offset == int(dispatched.read(served, 1)["commit_log_offset"][0])
    assert [c.message.queue_offset for c in path.copies] == [served]


def test_why_by_the_offset_message_id_a_consumer_saw(store):
    """A consumer's offset message id names the compaction log position (docs/reading.md#compaction-topics):
    ``why`` finds the message it names in its queue."""
    for r in [r for r in FACTS["received"] if r["phase"] == "drain" and r["group"] == "GID_COMPACT_STAR"][:6]:
        answers = cq.why(store, TOPIC, "GID_COMPACT_STAR", tags="*", msg_id=r["msg_id"])
        assert (r["queue_id"], r["queue_offset"]) in {(w.queue_id, w.queue_offset) for w in answers}
        assert all(w.delivered and w.msg_id == r["msg_id"] for w in answers)
    from cq.analyses.paths import why_every_copy

    paths = why_every_copy(store, TOPIC, "GID_COMPACT_STAR", tags="*", msg_id=r["msg_id"])
    assert (r["queue_id"], r["queue_offset"]) in {(p.why.queue_id, p.why.queue_offset) for p in paths}


def test_a_record_that_is_not_its_units_names_the_log_file(copy):
    """A compaction round replaces files of the same names: a unit whose record has another queue offset
    (here a unit moved onto the next record) is an error naming the log file and byte, not another message."""
    log_dir, cq_dir = compaction_queue_dirs(copy, TOPIC, 0)
    first = min((copy / cq_dir).iterdir())
    units = np.fromfile(first, dtype=fmt.BCQ_UNIT_DTYPE, count=2)
    patch_file(first, 0, int(units["commit_log_offset"][1]).to_bytes(8, "big"))
    with closing(cq.Store(copy)) as s, pytest.raises(cq.StoreFormatError, match="a compaction round replaced") as info:
        list(s.consume(TOPIC, "G", tags="*", queue_ids=[0]))
    assert (info.value.path, info.value.offset) == (str(copy / log_dir / first.name), int(units["commit_log_offset"][1]))


def test_tail_from_committed_is_what_the_drain_received_without_a_lost_warning(capsys):
    """A stream reads a compaction topic through ``consume``; offsets below the compaction CQ's minimum were
    compacted, not expired: no "lost" line."""
    import rmqfilter

    want = drained("GID_COMPACT_TAG")
    assert rmqfilter.main(["tail", str(STORE), "--topic", TOPIC, "--group", "GID_COMPACT_TAG", "--tags", "TagA",
                           "--from", "committed", "--limit", str(len(want)), "--format", "jsonl"]) == 0
    out, err = capsys.readouterr()
    rows = [json.loads(line) for line in out.splitlines()]
    assert {(r["queue_id"], r["queue_offset"]): (r["properties"]["UNIQ_KEY"], r["msg_id"]) for r in rows} == want
    assert "lost" not in err


def test_the_commands_leave_the_compaction_store_unchanged(copy, capsys):
    """Readers open the compaction files read-only: every byte, size and modification time stays."""
    import hashlib
    import os

    import rmqfilter

    def state():
        return {p: (hashlib.sha256(p.read_bytes()).hexdigest(), os.stat(p).st_mtime_ns)
                for p in sorted(copy.rglob("*")) if p.is_file()}

    before = state()
    store = str(copy)
    for argv in (["consume", store, "--topic", TOPIC, "--group", "GID_COMPACT_SQL"],
                 ["why", store, "--topic", TOPIC, "--group", "GID_COMPACT_TAG", "--tags", "TagA", "--key", "k3"],
                 ["backlog", store, "--topic", TOPIC, "--group", "GID_COMPACT_TAG", "--tags", "TagA"],
                 ["inspect", store, "--json"],
                 ["tail", store, "--topic", TOPIC, "--group", "G", "--tags", "*", "--from", "earliest", "--limit", "3"]):
        assert rmqfilter.main(argv) == 0, argv
    capsys.readouterr()
    assert state() == before


def _served(store_root) -> dict:
    with closing(cq.Store(store_root)) as s:
        return {(m.queue_id, m.queue_offset): m.properties["UNIQ_KEY"] for m in s.consume(TOPIC, "G", tags="*")}


@pytest.mark.parametrize("sub", [fmt.COMPACTING_SUB_DIR, fmt.REPLICATING_SUB_DIR])
def test_a_round_writing_beside_the_queue_reads_what_the_broker_serves_and_says_so(copy, sub):
    """RocketMQ's CompactionLog writes a round's output (compacting/) or a slave's copy of its master's log
    (replicating/) beside the queue's files and serves those files until it swaps the output in: they are
    read, and a warning names the directory."""
    want = _served(STORE)
    log_dir, cq_dir = compaction_queue_dirs(copy, TOPIC, 0)
    for d in (log_dir, cq_dir):
        (copy / d / sub).mkdir()
        shutil.copy(copy / d / fmt.file_name(0), copy / d / sub / fmt.file_name(0))
    with pytest.warns(cq.errors.CompactionWarning, match=f"queue 0: .* in .*compactionLog/{TOPIC}/0/{sub} "
                                                          r"\(1 file\(s\)\); until it swaps them in"):
        assert _served(copy) == want


def test_a_swap_under_way_is_an_error_naming_the_file_never_two_rounds_mixed(copy):
    log_dir, cq_dir = compaction_queue_dirs(copy, TOPIC, 1)
    # the round's log output moved in, its CQ output not yet: the two compacting/ directories differ
    (copy / cq_dir / fmt.COMPACTING_SUB_DIR).mkdir()
    shutil.copy(copy / cq_dir / fmt.file_name(0), copy / cq_dir / fmt.COMPACTING_SUB_DIR / fmt.file_name(0))
    (copy / log_dir / fmt.COMPACTING_SUB_DIR).mkdir()
    with closing(cq.Store(copy)) as s, pytest.raises(cq.StoreFormatError, match="was being swapped in") as info:
        list(s.consume(TOPIC, "G", tags="*"))
    assert info.value.path.endswith(f"compactionLog/{TOPIC}/1/{fmt.COMPACTING_SUB_DIR}")
    shutil.rmtree(copy / cq_dir / fmt.COMPACTING_SUB_DIR)
    # a file the swap replaces, renamed before its removal
    name = fmt.file_name(0)
    (copy / cq_dir / name).rename(copy / cq_dir / (name + fmt.DELETED_FILE_SUFFIX))
    with closing(cq.Store(copy)) as s, pytest.raises(cq.StoreFormatError, match="swapping its files in") as info:
        list(s.consume(TOPIC, "G", tags="*"))
    assert info.value.path.endswith(f"compactionCq/{TOPIC}/1/{name}.delete")


def test_a_compaction_topic_a_broker_served_from_its_consume_queue_is_refused_by_name(copy):
    """enableCompaction=false: the broker serves the topic from its ConsumeQueue and writes no compaction files,
    a setting the store does not record: a queue holding messages without them is refused, naming it."""
    shutil.rmtree(copy / fmt.COMPACTION_DIR)
    with closing(cq.Store(copy)) as s, pytest.raises(cq.StoreFormatError, match="enableCompaction=false") as info:
        list(s.consume(TOPIC, "G", tags="*"))
    assert info.value.path.endswith(f"compactionCq/{TOPIC}/0")
