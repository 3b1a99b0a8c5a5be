"""``cq.Cluster``: several broker stores read as one (docs/reading.md#clusters).

Two sample stores written with different seeds stand for two brokers of a cluster serving the
same topics (each with its own queues 0..3, CommitLog, committed offsets and registrations),
and two copies of the golden store for two brokers holding the same records.
"""
from __future__ import annotations

import json
import pickle
import shutil

import pytest
from helpers import DATA

import cq
import rmqfilter
from cq.writer.sample import SAMPLE_GROUPS, SAMPLE_TOPICS, generate_sample_store

SMALL = {"commit_log_file_size": 1 << 20, "ext_file_size": 1 << 16, "consume_queue_file_size": 20_000}
TOPIC = SAMPLE_TOPICS[0]
GROUP, SQL = SAMPLE_GROUPS[0]


@pytest.fixture(scope="module")
def brokers(tmp_path_factory):
    """Two brokers' stores: ``stores/broker-a`` and ``stores/broker-b``, different messages."""
    base = tmp_path_factory.mktemp("cluster") / "stores"
    for name, seed in (("broker-a", 3), ("broker-b", 4)):
        generate_sample_store(base / name, messages=1500, seed=seed, **SMALL)
    return base


@pytest.fixture
def cluster(brokers):
    c = cq.Cluster([brokers / "broker-a", brokers / "broker-b"])
    yield c
    c.close()


def units(result) -> dict[tuple[str | None, int, int], str]:
    return {(m.broker, m.queue_id, m.queue_offset): m.msg_id for m in result}


def test_each_root_is_a_broker_named_after_its_directory_without_a_broker_topic(cluster, brokers):
    assert cluster.brokers == ["broker-a", "broker-b"]
    assert cluster.named_by == {"broker-a": "directory", "broker-b": "directory"}
    assert cluster.store("broker-b").root == str(brokers / "broker-b")
    assert cluster.topics() == sorted(SAMPLE_TOPICS)
    assert cluster.queues(TOPIC) == [(b, q) for b in ("broker-a", "broker-b") for q in range(4)]
    with pytest.raises(KeyError, match="broker-c.*broker-a, broker-b"):
        cluster.store("broker-c")


def test_the_broker_name_comes_from_the_brokers_own_system_topic(tmp_path):
    """A 5.x broker keeps ``rmq_sys_SYNC_BROKER_MEMBER_<brokerName>`` in config/topics.json."""
    roots = []
    for i, name in enumerate(("east-1", "east-2")):
        root = tmp_path / f"store{i}"
        shutil.copytree(DATA / "golden_store", root)
        (root / "config").mkdir()
        (root / "config" / "topics.json").write_text(json.dumps({"topicConfigTable": {
            f"rmq_sys_SYNC_BROKER_MEMBER_{name}": {"topicName": f"rmq_sys_SYNC_BROKER_MEMBER_{name}"},
            "GoldenFilterTopic": {"topicName": "GoldenFilterTopic"}}}))
        roots.append(root)
    c = cq.Cluster(roots)
    assert c.brokers == ["east-1", "east-2"] and c.named_by == {"east-1": "topics.json", "east-2": "topics.json"}
    c.close()


def test_two_roots_of_one_broker_name_are_its_replicas_and_names_given_make_two_brokers(tmp_path):
    """Replicas in detail: tests/cq/store/test_store_replicas.py (docs/reading.md#replicas)."""
    for parent in ("a", "b"):
        shutil.copytree(DATA / "golden_store", tmp_path / parent / "store")
    with pytest.warns(cq.errors.ReplicaWarning, match="broker store: 2 replicas; reading .*/a/store "
                                                      r"\(every replica's CommitLog reaches as far"):
        c = cq.Cluster([tmp_path / "a" / "store", tmp_path / "b" / "store"])
    assert c.brokers == ["store"] and c.replica_read == {"store": str(tmp_path / "a" / "store")}
    c.close()
    # names given: the same stores are two brokers
    c = cq.Cluster({"a": tmp_path / "a" / "store", "b": tmp_path / "b" / "store"})
    assert c.brokers == ["a", "b"] and c.named_by == {"a": "given", "b": "given"}
    c.close()


def test_a_bad_root_among_several_is_named_with_its_place(brokers, tmp_path):
    missing = tmp_path / "no-such-store"
    with pytest.raises(cq.StoreFormatError) as info:
        cq.Cluster([brokers / "broker-a", missing])
    assert f"store root {missing} (broker 2 of 2)" in str(info.value)
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(cq.StoreFormatError, match="no store directory"):
        cq.Cluster(str(empty / "broker-*"))


def test_consume_is_the_union_of_each_brokers_consume(cluster, brokers):
    result = cluster.consume(TOPIC, GROUP)   # each broker's own registration of the group
    got = units(result)
    want = {}
    for name in ("broker-a", "broker-b"):
        alone = cq.Store(brokers / name)
        mine = alone.consume(TOPIC, GROUP)
        want.update({(name, k[1], k[2]): v for k, v in units(mine).items()})
        assert result.broker_stats[name] == mine.stats
        alone.close()
    assert got == want and len(got) > 0
    assert {b for b, _, _ in got} == {"broker-a", "broker-b"}
    assert result.stats.delivered == len(got)
    assert result.stats.units_scanned == sum(s.units_scanned for s in result.broker_stats.values())


def test_consume_of_named_queues_and_ranges(cluster):
    whole = units(cluster.consume(TOPIC, "g", tags="*"))
    some = units(cluster.consume(TOPIC, "g", tags="*", queues=[("broker-b", 2)], ranges={("broker-b", 2): (5, 9)}))
    assert some == {k: v for k, v in whole.items() if k[:2] == ("broker-b", 2) and 5 <= k[2] < 9}
    assert len(some) == 4
    with pytest.raises(TypeError, match="queues="):
        cluster.consume(TOPIC, "g", tags="*", queue_ids=[0])
    with pytest.raises(KeyError, match="broker-z"):
        cluster.consume(TOPIC, "g", tags="*", queues=[("broker-z", 0)])


def test_a_cut_per_broker_bounds_what_is_read(cluster):
    cut = cluster.cut(TOPIC)
    assert [name for name, _ in cut.brokers] == ["broker-a", "broker-b"]
    assert cut["broker-a"].ends(TOPIC) == {q: cluster.store("broker-a").consume_queue(TOPIC, q).max_offset
                                          for q in range(4)}
    assert len(cut.queues) == 8 and {q[0] for q in cut.queues} == {"broker-a", "broker-b"}
    assert units(cluster.consume(TOPIC, "g", tags="*", cut=cut)) == units(cluster.consume(TOPIC, "g", tags="*"))


def test_a_topic_on_one_broker_only_is_read_there(tmp_path):
    for name in ("broker-a", "broker-b"):
        shutil.copytree(DATA / "golden_store", tmp_path / name)
    for d in ("consumequeue", "consumequeue_ext"):
        shutil.rmtree(tmp_path / "broker-b" / d / "GoldenPlainTopic", ignore_errors=True)
    c = cq.Cluster(str(tmp_path / "broker-*"))
    assert c.brokers_of("GoldenPlainTopic") == ["broker-a"]
    assert c.brokers_of("GoldenFilterTopic") == ["broker-a", "broker-b"]
    got = units(c.consume("GoldenPlainTopic", "g", tags="*"))
    assert {b for b, _, _ in got} == {"broker-a"} and len(got) == 100
    # the same records on both brokers are two messages each, one per broker
    both = units(c.consume("GoldenFilterTopic", "g", tags="*"))
    assert len(both) == 400 and {k[1:] for k in both if k[0] == "broker-a"} == {k[1:] for k in both if k[0] == "broker-b"}
    with pytest.raises(KeyError, match="NoTopic"):
        c.consume("NoTopic", "g", tags="*")
    c.close()


def test_backlog_counts_each_broker_queue_with_its_broker(cluster):
    b = cq.backlog(cluster, TOPIC, GROUP)
    assert [(q.broker, q.queue_id) for q in b.queues] == cluster.queues(TOPIC)
    for name in ("broker-a", "broker-b"):
        alone = cq.backlog(cluster.store(name), TOPIC, GROUP)
        mine = [q for q in b.queues if q.broker == name]
        assert [(q.queue_id, q.committed_offset, q.max_offset, q.lag, q.will_receive) for q in mine] == [
            (q.queue_id, q.committed_offset, q.max_offset, q.lag, q.will_receive) for q in alone.queues]
    assert b.lag == sum(cq.backlog(cluster.store(n), TOPIC, GROUP).lag for n in cluster.brokers)
    assert b.will_receive == sum(cq.backlog(cluster.store(n), TOPIC, GROUP).will_receive for n in cluster.brokers)
    assert b.will_receive > 0
    doc = b.to_dict()
    assert doc["queues"][0]["broker"] == "broker-a" and doc["total"]["lag"] == b.lag
    text = str(b).splitlines()
    assert text[1].startswith("broker ") and any(line.startswith("broker-b ") for line in text)
    one = cq.backlog(cluster, TOPIC, GROUP, queue_ids=[("broker-b", 1)])
    assert [(q.broker, q.queue_id, q.will_receive) for q in one.queues] == [
        (q.broker, q.queue_id, q.will_receive) for q in b.queues if (q.broker, q.queue_id) == ("broker-b", 1)]
    # a single store's backlog has no broker column
    assert "broker" not in cq.backlog(cluster.store("broker-a"), TOPIC, GROUP).to_dict()["queues"][0]


def test_why_names_the_broker_holding_the_message(cluster):
    msgs = list(cluster.consume(TOPIC, GROUP))
    m = next(m for m in msgs if m.broker == "broker-b")
    found = cq.why(cluster, TOPIC, GROUP, msg_id=m.properties["UNIQ_KEY"])
    assert [(w.broker, w.queue_id, w.queue_offset, w.delivered) for w in found] == [
        ("broker-b", m.queue_id, m.queue_offset, True)]
    assert found[0].to_dict()["broker"] == "broker-b" and "on broker broker-b" in str(found[0])
    w = cq.why(cluster, TOPIC, GROUP, broker="broker-b", queue_id=m.queue_id, queue_offset=m.queue_offset)
    assert (w.broker, w.delivered) == ("broker-b", True)
    with pytest.raises(ValueError, match="broker-a, broker-b"):
        cq.why(cluster, TOPIC, GROUP, queue_id=m.queue_id, queue_offset=m.queue_offset)
    with pytest.raises(cq.MessageNotFoundError, match="no broker of the cluster holds it"):
        cq.why(cluster, TOPIC, GROUP, key="no-such-key")
    msgs, found_by, note = cq.find_messages(cluster, TOPIC, msg_id=m.properties["UNIQ_KEY"])
    assert [(x.broker, x.queue_id, x.queue_offset) for x in msgs] == [("broker-b", m.queue_id, m.queue_offset)]
    _, alone_by, alone_note = cq.find_messages(cluster.store("broker-b"), TOPIC, msg_id=m.properties["UNIQ_KEY"])
    assert (found_by, note) == (alone_by, f"broker-b: {alone_note}")


def test_a_cluster_pickles_as_its_roots(cluster):
    copy = pickle.loads(pickle.dumps(cluster))
    assert copy.brokers == cluster.brokers and [s.root for s in copy.stores.values()] == [
        s.root for s in cluster.stores.values()]
    assert units(copy.consume(TOPIC, "g", tags="TagA")) == units(cluster.consume(TOPIC, "g", tags="TagA"))
    copy.close()


def run(capsys, *argv) -> tuple[int, str, str]:
    capsys.readouterr()
    code = rmqfilter.main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


def test_cli_takes_several_store_roots(capsys, brokers, cluster):
    roots = [brokers / "broker-a", brokers / "broker-b"]
    code, out, _ = run(capsys, "consume", *roots, "--topic", TOPIC, "--group", GROUP, "--format", "jsonl")
    assert code == 0
    assert {(d["broker"], d["queue_id"], d["queue_offset"]) for d in map(json.loads, out.splitlines())} == set(
        units(cluster.consume(TOPIC, GROUP)))
    code, out, _ = run(capsys, "consume", *roots, "--topic", TOPIC, "--group", "g", "--tags", "TagA", "--queue", "1")
    lines = out.splitlines()
    assert code == 0 and lines and {line.split("\t")[:2][1] for line in lines} == {"1"}
    assert {line.split("\t")[0] for line in lines} == {"broker-a", "broker-b"}
    code, out, _ = run(capsys, "backlog", *roots, "--topic", TOPIC, "--group", GROUP, "--json")
    assert code == 0 and json.loads(out)["total"]["will_receive"] == cq.backlog(cluster, TOPIC, GROUP).will_receive
    code, out, _ = run(capsys, "backlog", str(brokers / "broker-*"), "--topic", TOPIC, "--all-groups", "--json")
    assert code == 0 and [d["group"] for d in json.loads(out)] == [g for g, _ in SAMPLE_GROUPS]
    code, out, _ = run(capsys, "inspect", *roots, "--json")
    doc = json.loads(out)["brokers"]
    assert code == 0 and [d["broker"] for d in doc] == ["broker-a", "broker-b"]
    assert [d["topics"][TOPIC]["0"]["max_offset"] for d in doc] == [
        cluster.store(b).consume_queue(TOPIC, 0).max_offset for b in ("broker-a", "broker-b")]
    code, out, _ = run(capsys, "inspect", *roots)
    assert code == 0 and "Broker broker-a (named from directory)" in out and "Broker broker-b" in out
    code, out, err = run(capsys, "why", *roots, "--topic", TOPIC, "--group", GROUP, "--queue", "0", "--offset", "0")
    assert code == 2 and "name the broker" in err
    code, out, _ = run(capsys, "why", *roots, "--topic", TOPIC, "--group", GROUP, "--queue", "0", "--offset", "0",
                       "--broker", "broker-b", "--json")
    assert code == 0 and json.loads(out)["broker"] == "broker-b"


def test_cli_names_a_bad_root_among_several_with_exit_status_2(capsys, brokers, tmp_path):
    bad = tmp_path / "not-a-store"
    bad.mkdir()
    (bad / "commitlog").write_text("a file where a directory belongs")
    for command in (["consume", "--topic", TOPIC, "--group", "g", "--tags", "*"],
                    ["backlog", "--topic", TOPIC, "--group", GROUP],
                    ["why", "--topic", TOPIC, "--group", GROUP, "--key", "k"], ["inspect"],
                    ["scan", "--topic", TOPIC, "--group", GROUP],  # scan: before Spark starts
                    ["cost", "--topic", TOPIC, "--group", GROUP],
                    ["tail", "--topic", TOPIC, "--group", GROUP, "--from", "earliest"]):
        code, out, err = run(capsys, command[0], brokers / "broker-a", bad, *command[1:])
        assert code == 2 and out == "", command
        assert str(bad) in err and "broker 2 of 2" in err and "Traceback" not in err, (command, err)


def test_cli_reads_two_roots_of_one_broker_as_replicas_and_names_the_one_read(capsys, tmp_path):
    for parent in ("a", "b"):
        shutil.copytree(DATA / "golden_store", tmp_path / parent / "store")
    roots = [tmp_path / "a" / "store", tmp_path / "b" / "store"]
    for command in (["consume", "--group", "g", "--tags", "*"], ["backlog", "--group", "g", "--tags", "*"],
                    ["cost", "--tag-group", "g", "*"], ["why", "--group", "g", "--tags", "*", "--broker", "store",
                                                        "--queue", "0", "--offset", "0"]):
        code, out, err = run(capsys, command[0], *roots, "--topic", "GoldenFilterTopic", *command[1:],
                             "--replica", str(roots[1]))
        assert code == 0 and out, (command, err)
        assert f"rmqfilter {command[0]}: warning: broker store: 2 replicas; reading {roots[1]} (as asked" in err
    errors = {}
    for command in (["consume", "--group", "g", "--tags", "*"], ["scan", "--group", "g", "--tags", "*"],
                    ["cost", "--tag-group", "g", "*"], ["tail", "--group", "g", "--tags", "*"]):
        code, out, err = run(capsys, command[0], *roots, "--topic", "GoldenFilterTopic", *command[1:],
                             "--replica", str(tmp_path / "c"))
        assert code == 2 and out == "" and "Traceback" not in err, (command, err)
        assert err.startswith(f"rmqfilter {command[0]}: error: ") and "no replica is" in err
        assert str(roots[0]) in err and str(roots[1]) in err
        errors[command[0]] = err.split(": error: ", 1)[1]
    assert errors["scan"] == errors["consume"] == errors["cost"] == errors["tail"]  # the same words everywhere
