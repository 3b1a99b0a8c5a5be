"""A Store read with its tier (docs/reading.md#tiered-storage), on the store RocketMQ's broker wrote in
the ``tiered`` scenario (tests/data/TIERED_STORE.md): minimum offsets as the broker gives them, pulls below
the local minimum served from the tier through the one decision pipeline, what ``why``, ``backlog`` and
``inspect`` say there, and the refusals."""
from __future__ import annotations

import json
import pickle
import shutil
from contextlib import closing

import pytest
from helpers import DATA, tiered_cluster

import cq
import rmqfilter
from cq.analyses.cost import CostGroup, filter_cost
from cq.analyses.search import find
from cq.readers.tiered import tier_file_name, tier_hash

STORE = DATA / "tiered_store"
TIER = STORE / "tier"
FACTS = json.loads((DATA / "tiered_store.json").read_text())
TOPIC = "TieredTopic"
COPIED_MS = FACTS["copied_ms"]   # after every message of the run, before the late groups subscribed


@pytest.fixture(scope="module")
def store():
    with closing(cq.Store(STORE, tier=TIER)) as s:
        yield s


def received(group: str, phase: str | None = None) -> dict:
    return {(q, o): u for q, o, u, p in FACTS["received"][group] if phase is None or p == phase}


def subscription(group: str) -> dict:
    g = FACTS["groups"][group]
    if g["type"] == "TAG":
        return {"tags": g["expression"]}
    return {} if g["progress"] else {"sql": g["expression"], "born_time": COPIED_MS}


def test_a_store_whose_broker_tiered_its_queues_needs_its_tier():
    with pytest.raises(cq.TieredStoreError, match="give the tier directory") as e:
        cq.Store(STORE)
    assert e.value.path.endswith("config/tieredStoreMetadata.json")
    with pytest.raises(cq.TieredStoreError, match="did not run the tiered store"):
        cq.Store(DATA / "golden_store", tier=TIER)


def test_the_cut_has_the_brokers_minimums_and_the_tiers_served_range(store):
    cut = store.cut(TOPIC)
    admin = {r["queue_id"]: (r["min_offset"], r["max_offset"]) for r in FACTS["topics"][TOPIC]}
    assert {q: (lo, hi) for _, q, lo, hi in cut.queues} == admin
    local = {q: store.consume_queue(TOPIC, q).min_offset for q in admin}
    assert cut.tiers == tuple((TOPIC, q, 0, local[q]) for q in sorted(admin))


@pytest.mark.parametrize("group", sorted(FACTS["received"]))
def test_consume_gives_what_the_consumers_received(store, group):
    result = store.consume(TOPIC, group, **subscription(group))
    got = {(m.queue_id, m.queue_offset): m.properties["UNIQ_KEY"] for m in result}
    assert got == received(group)
    assert result.stats.commit_log_missing == 0


def test_backlog_is_what_the_early_groups_drained_from_the_tier(store):
    for group in ("GID_TIER_TAG", "GID_TIER_SQL"):
        b = cq.backlog(store, TOPIC, group, **subscription(group))
        drained = received(group, "drain")
        for q in b.queues:
            assert q.committed_offset == 100 < store.consume_queue(TOPIC, q.queue_id).min_offset
            assert (q.will_receive, q.expired) == (sum(1 for k in drained if k[0] == q.queue_id), 0)


def test_the_store_pickles_with_its_tier(store):
    copy = pickle.loads(pickle.dumps(store))
    with closing(copy):
        assert copy.tier_path == str(TIER)
        assert sum(1 for _ in copy.consume(TOPIC, "G", tags="*", queue_ids=[1])) == 580


def test_why_walks_a_unit_the_tier_serves(store):
    w = cq.why(store, TOPIC, "GID_TIER_TAG", tags="TagA || TagB", queue_id=0, queue_offset=7)
    assert w.delivered and [s.name for s in w.steps][:2] == ["tier", "consume_queue_unit"]
    assert "serves it from the tier" in str(w)
    local = cq.why(store, TOPIC, "GID_TIER_TAG", tags="TagA || TagB", queue_id=0, queue_offset=575)
    assert local.steps[0].name == "consume_queue_unit"


def test_inspect_prints_each_queues_tier(capsys):
    assert rmqfilter.main(["inspect", str(STORE), "--tier", str(TIER)]) == 0
    out = capsys.readouterr().out
    assert "TieredTopic 0: tier [0, 550), local minimum 530, served from the tier [0, 530)" in out


def test_a_tier_that_lags_behind_the_local_minimum_leaves_a_gap_the_broker_cannot_serve(tmp_path):
    """Units between the tier's end and the local minimum: the broker reads them locally, finds them expired
    and moves the consumer to the local minimum; they are counted missing, never delivered."""
    root = tmp_path / "tiered_store"
    shutil.copytree(STORE, root)
    cq_dir = (root / "tier" / f"{tier_hash('HarnessCluster')}_HarnessCluster" / "broker-a" / TOPIC / "0"
              / "CONSUME_QUEUE")
    last = cq_dir / tier_file_name(9000)
    with open(last, "r+b") as f:
        f.truncate(20 * 10)                       # the tier's queue 0 now ends at offset 460
    with closing(cq.Store(root, tier=root / "tier")) as s:
        assert s.cut(TOPIC, [0]).tiers == ((TOPIC, 0, 0, 460),)
        result = s.consume(TOPIC, "G", tags="*", queue_ids=[0])
        got = [m.queue_offset for m in result]
        assert got == list(range(460)) + list(range(530, 580))
        assert result.stats.commit_log_missing == 530 - 460


def test_a_filter_the_tier_and_the_local_bitmap_disagree_on_is_refused(store):
    """A SQL92 subscription born before the messages for a group whose bits the local bitmaps lack: past the
    local minimum the bitmaps drop what the tier passes, and a pull that starts in the tier reads on there."""
    with pytest.raises(cq.TieredStoreError, match="depends on its pull batches"):
        list(store.consume(TOPIC, "G", sql="TAGS IN ('TagB') OR a = 1", born_time=0))


def test_why_finds_a_message_of_the_tier_by_key_and_by_msg_id(capsys):
    """The local IndexFiles and records hold only the local range: a message the broker serves from the tier
    is found there, by its key, its UNIQ_KEY and the offset msg id a consumer saw (its flat CommitLog offset)."""
    q, o, uniq, _ = next(r for r in FACTS["received"]["GID_TIER_STAR"] if r[1] < 500)
    with closing(cq.Store(STORE, tier=TIER)) as s:
        msg = s.tier_queue(TOPIC, q).messages(o, o + 1)[0]
    base = ["why", str(STORE), "--tier", str(TIER), "--topic", TOPIC, "--group", "GID_TIER_TAG", "--tags",
            "TagA || TagB", "--json"]
    for how in (["--msg-id", msg.msg_id], ["--msg-id", uniq], ["--key", msg.keys]):
        assert rmqfilter.main(base + how) == 0, how
        doc = json.loads(capsys.readouterr().out)
        doc = doc[0] if isinstance(doc, list) else doc
        assert [(c["queue_id"], c["queue_offset"]) for c in doc["copies"]] == [(q, o)], how
        assert doc["state"] in ("consumed", "filtered"), how


def test_tail_reads_the_tier_from_the_earliest_offsets(capsys):
    want = received("GID_TIER_TAG")
    argv = ["tail", str(STORE), "--tier", str(TIER), "--topic", TOPIC, "--group", "G", "--tags", "TagA || TagB",
            "--from", "earliest", "--limit", str(len(want)), "--format", "jsonl", "--interval", "0.1"]
    assert rmqfilter.main(argv) == 0
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert {(m["queue_id"], m["queue_offset"]): m["properties"]["UNIQ_KEY"] for m in lines} == want


def test_why_refuses_an_offset_a_tier_read_may_reach_where_the_two_sides_disagree(store):
    """Past the local minimum, within a tier pull's read-ahead, as consume: exact where both sides agree."""
    agree = cq.why(store, TOPIC, "G", tags="TagA || TagB", queue_id=0, queue_offset=540)
    assert agree.steps[0].name == "consume_queue_unit"
    with pytest.raises(cq.TieredStoreError, match="depends on its pull batches"):
        cq.why(store, TOPIC, "G", sql="TAGS IN ('TagB') OR a = 1", queue_id=0, queue_offset=540)


def _cost_group(group: str):
    """The group as ``cost`` is given it: by name where the store registers it, else explicitly."""
    g = FACTS["groups"][group]
    if g["type"] == "TAG":
        return CostGroup(group, g["expression"], "TAG", registered=False)
    if g["progress"]:
        return group
    return CostGroup(group, g["expression"], born_time=COPIED_MS, registered=False)


def test_cost_counts_the_tier_as_consume_does(store):
    """cost over a tiered store: the units the tier serves tallied from its flat files (no bitmap there), each
    group's delivered count equal to consume's and to what the consumers received."""
    groups = sorted(FACTS["received"])
    report = filter_cost(store, TOPIC, [_cost_group(g) for g in groups], timing=False)
    units = sum(hi - lo for _, _, lo, hi in store.cut(TOPIC).queues)
    assert (report.units, report.messages, report.commit_log_missing) == (units, units, 0)
    for group in groups:
        stats = store.consume(TOPIC, group, **subscription(group))
        delivered = sum(1 for _ in stats)
        row = report.group(group)
        assert row.delivered == delivered == len(received(group)), group
        assert row.passed_consume_queue == stats.stats.passed_consume_queue, group
        assert row.bloom_false_positives == stats.stats.bloom_false_positives, group


def test_cost_refuses_a_filter_the_tier_and_the_local_bitmap_disagree_on(store):
    with pytest.raises(cq.TieredStoreError, match="depends on its pull batches"):
        filter_cost(store, TOPIC, [CostGroup("G", "TAGS IN ('TagB') OR a = 1", born_time=0, registered=False)],
                    timing=False)


def test_cost_command_reads_the_tier(capsys):
    argv = ["cost", str(STORE), "--topic", TOPIC, "--group", "GID_TIER_SQL", "--tag-group", "GID_TIER_TAG",
            "TagA || TagB", "--no-timing"]
    assert rmqfilter.main(argv) == 2                 # without its tier: refused, naming the metadata file
    assert "tieredStoreMetadata.json" in capsys.readouterr().err
    assert rmqfilter.main(argv + ["--tier", str(TIER)]) == 0
    out = capsys.readouterr().out
    assert "GID_TIER_TAG" in out and f"{len(received('GID_TIER_TAG')):,}" in out


def test_a_cluster_of_tiered_brokers_reads_each_brokers_tier(tmp_path):
    """cq.Cluster(roots, tier=DIR): the brokers share one tier, each reading its own flat files there (its
    name's directory): consume, backlog and inspect as on each store alone, per broker."""
    roots, tier = tiered_cluster(tmp_path)
    cq_dir = next(tier.iterdir()) / "broker-b" / TOPIC / "0" / "CONSUME_QUEUE"
    with open(cq_dir / tier_file_name(9000), "r+b") as f:
        f.truncate(20 * 10)                       # broker-b's tier of queue 0 now ends at offset 460
    with closing(cq.Cluster(roots, tier=tier)) as cluster:
        assert [(b, c.tiers) for b, c in cluster.cut(TOPIC).brokers] == [
            ("broker-a", ((TOPIC, 0, 0, 530), (TOPIC, 1, 0, 529))),
            ("broker-b", ((TOPIC, 0, 0, 460), (TOPIC, 1, 0, 529)))]
        group = "GID_TIER_TAG"
        want = received(group)
        result = cluster.consume(TOPIC, group, **subscription(group))
        got = {}
        for m in result:
            got.setdefault(m.broker, {})[m.queue_id, m.queue_offset] = m.properties["UNIQ_KEY"]
        assert got["broker-a"] == want
        assert got["broker-b"] == {k: u for k, u in want.items() if not (k[0] == 0 and 460 <= k[1] < 530)}
        assert result.broker_stats["broker-b"].commit_log_missing == 530 - 460
        backlog = cq.backlog(cluster, TOPIC, group, **subscription(group))
        assert {(q.broker, q.queue_id): q.will_receive for q in backlog.queues} == {
            (b, q): sum(1 for k in got[b] if k[0] == q and k[1] >= 100) for b in got for q in (0, 1)}


def test_the_inspect_command_of_a_tiered_cluster_shows_each_brokers_tier(tmp_path, capsys):
    roots, tier = tiered_cluster(tmp_path)
    assert rmqfilter.main(["inspect", *map(str, roots), "--tier", str(tier)]) == 0
    out = capsys.readouterr().out
    for broker in ("broker-a", "broker-b"):
        part = out[out.index(f"Broker {broker}"):]
        assert "TieredTopic 0: tier [0, 550), local minimum 530, served from the tier [0, 530)" in part
    assert rmqfilter.main(["consume", *map(str, roots), "--topic", TOPIC, "--group", "G", "--tags", "*",
                           "--format", "none"]) == 2   # without the tier: refused, naming the broker's store
    err = capsys.readouterr().err
    assert "broker-a" in err and "give the tier directory" in err


def test_a_tier_given_to_a_cluster_with_a_broker_that_ran_none_names_that_broker(tmp_path):
    roots, tier = tiered_cluster(tmp_path)
    plain = tmp_path / "broker-c"
    shutil.copytree(DATA / "golden_store", plain)
    with pytest.raises(cq.StoreFormatError, match="did not run the tiered store") as e:
        cq.Cluster([*roots, plain], tier=tier)
    assert "broker 3 of 3" in str(e.value)


def _everything(store) -> dict:
    return {(m.queue_id, m.queue_offset): m for m in store.consume(TOPIC, "G", tags="*")}


def test_find_searches_the_tier_by_key_uniq_key_and_msg_id(store):
    """find's lookups read the tier's flat files where the broker serves a queue from it: the local IndexFiles
    hold only the local range. Each row from the tier says so (found_by "tier")."""
    q, o, uniq, _ = next(r for r in FACTS["received"]["GID_TIER_STAR"] if r[1] < 500)
    msg = store.tier_queue(TOPIC, q).messages(o, o + 1)[0]
    for how in ({"key": msg.keys.split(" ")[0]}, {"uniq_key": uniq}, {"msg_id": msg.msg_id}, {"msg_id": uniq}):
        result = find(store, topic=TOPIC, **how)
        every = _everything(store)
        want = sorted(k for k, m in every.items() if (how.get("key") in (m.keys or "").split(" "))
                      or m.properties.get("UNIQ_KEY") in (how.get("uniq_key"), how.get("msg_id")))
        if "msg_id" in how and how["msg_id"] == msg.msg_id:
            # each queue's flat CommitLog has offsets of its own: one offset msg id may name a record of each
            want = sorted(k for k, m in every.items() if m.msg_id == msg.msg_id)
            assert (q, o) in want
        assert sorted((r.queue_id, r.queue_offset) for r in result.rows) == want, how
        tiered = {(t[1], o_) for t in store.cut(TOPIC).tiers for o_ in range(t[2], t[3])}
        assert all((r.found_by == "tier") == ((r.queue_id, r.queue_offset) in tiered) for r in result.rows), how
        assert any("the tier" in n for n in result.notes)


def test_find_by_store_time_searches_the_tiers_flat_consume_queues(store):
    every = _everything(store)
    stamps = sorted(m.store_timestamp for m in every.values())
    for begin, end in ((stamps[10], stamps[400]), (stamps[500], stamps[1100]), (stamps[0], stamps[-1])):
        result = find(store, topic=TOPIC, between=(begin, end))
        want = sorted(k for k, m in every.items() if begin <= m.store_timestamp <= end)
        assert sorted((r.queue_id, r.queue_offset) for r in result.rows) == want
        assert any(s.get("tier") for s in result.stats["queues"])
    assert sorted((r.queue_id, r.queue_offset) for r in find(store, topic=TOPIC).rows) == sorted(every)


def test_find_a_groups_view_across_the_tier_is_what_it_received(store):
    """--group over a window across the local minimum: the tier's rows decided from its flat files, the
    local ones with their bitmaps, each what the group received."""
    every = _everything(store)
    begin, end = every[0, 500].store_timestamp, every[0, 560].store_timestamp
    inside = {k for k, m in every.items() if begin <= m.store_timestamp <= end}
    for group in ("GID_TIER_TAG", "GID_TIER_SQL"):
        result = find(store, topic=TOPIC, group=group, between=(begin, end), **subscription(group))
        got = {(r.queue_id, r.queue_offset): r.uniq_key for r in result.rows}
        assert got == {k: u for k, u in received(group).items() if k in inside}, group
        assert {r.found_by for r in result.rows} == {"tier", "time_search"}, group


def test_the_find_command_searches_the_tier(capsys):
    q, o, uniq, _ = next(r for r in FACTS["received"]["GID_TIER_STAR"] if r[1] < 500)
    argv = ["find", str(STORE), "--topic", TOPIC, "--uniq-key", uniq, "--json"]
    assert rmqfilter.main(argv) == 2                         # without its tier: refused, naming the metadata
    assert "tieredStoreMetadata.json" in capsys.readouterr().err
    assert rmqfilter.main(argv + ["--tier", str(TIER)]) == 0
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [(d["queue_id"], d["queue_offset"], d["found_by"]) for d in lines[:-1]] == [(q, o, "tier")]
