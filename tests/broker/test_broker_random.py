"""Generated broker configurations and workloads, held against the real broker (docs/testing.md#random).

``run.py random --seed N`` draws a configuration and a workload from the space declared in
``run.py`` (``RANDOM_CONFIG_AXES``, ``RANDOM_WORKLOAD_AXES``; the same table is in docs/testing.md)
and runs it. The checks here are the written scenarios' checks, driven by a run's outputs alone
(``sent.jsonl``, ``received.jsonl``, ``broker.json``): every broker's copied store is read on its
own and compared with what its consumers received and what its admin API reported, on every topic
the run created (the random topic, and when drawn the BatchCQ topic and the LMQ queues), for every
kind of group (push, pull, POP).

``make test`` runs :data:`COVERING_SEEDS` (every value of every axis drawn at least once:
:func:`uncovered`); ``make matrix SEEDS=...`` runs the same checks on any seeds, one run directory
at a time (``RMQFILTER_RANDOM_RUN``, set by tests/broker/matrix.py).
"""
from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest
from broker_support import assert_same_units, harness, load, scenario

import cq
import rmqfilter as cli
from cq import format as fmt
from cq.analyses.backlog import DUE_BUCKETS
from cq.analyses.find import topic_records
from cq.analyses.paths import why_every_copy
from cq.analyses.pending import pending

pytestmark = pytest.mark.broker

#: Seeds ``make test`` runs: together they draw every value of every axis
#: (test_the_covering_seeds_cover_every_axis). Pinned seeds that once failed are among them, each with what it found.
PINNED_SEEDS = {
    # found: with enableConsumeQueueExt, pending/backlog read SCHEDULE_TOPIC_XXXX's ext address as the due time;
    # with the BatchCQ topic and LMQ axes it also found `why` crashing on a BatchCQ message and finding no LMQ one
    26: "ext on, delay levels still due: due_at_ms near Long.MIN_VALUE, backlog counted them overdue; "
        "why on a BatchCQ topic: AttributeError; why on an LMQ queue: 'no copy'",
    # found: %RETRY% queues with no committed offset counted 0, and RocksDB queues without a min record read as empty
    13: "retry never committed: backlog's retry 0 against 7 drained; RocksDB %DLQ% queue without min: no dead letters; "
        "on 5.5.1 on CI, the broker's own transaction op write refused as page cache busy (the harness's brokers "
        "now wait 10 s for the lock, and a run whose broker lost a write runs again)",
}
COVERING_SEEDS = (*PINNED_SEEDS, 9192, 1354)
# Seeds pinned on one release only: (seed, release) -> what it found.
PINNED_RELEASE_SEEDS = {
    # found: LMQ dispatch on a DLedger CommitLog with RocksDB queues: the broker assigned no LMQ offsets
    # and served nothing there, and the LMQ check read a queue that does not exist
    (199836, "5.5.1"): "DLedger + RocksDB + LMQ: no INNER_MULTI_QUEUE_OFFSET, LMQ max offset 0; the check assumed units",
    # found: two brokers with RocksDB stores in the harness's one JVM: the JVM died in RocksDB's native code
    (175990, "5.3.3"): "two RocksDB brokers in one JVM: SIGSEGV in librocksdbjni (ScheduleMessageTimerThread)",
    # found: a broker in its own JVM (two RocksDB brokers) had 256 MiB of direct memory; its pops failed with
    # OutOfMemoryError (direct buffer memory) and never answered, and the harness waited only 15 s for them
    (17798, "5.5.1"): "POP on two RocksDB brokers in their own JVMs: direct buffer OOM in the broker, pop unanswered",
}


def uncovered(draws: list[dict]) -> list[tuple[str, object]]:
    """The (axis, value) pairs of the declared space that no draw in ``draws`` holds."""
    seen = {(axis, json.dumps(v)) for d in draws for part in ("config", "workload") for axis, v in d[part].items()}
    return [(axis, v) for axes in (harness.RANDOM_CONFIG_AXES, harness.RANDOM_WORKLOAD_AXES)
            for axis, values in axes.items() for v in values if (axis, json.dumps(v)) not in seen]


def test_the_covering_seeds_cover_every_axis():
    assert uncovered([harness.random_draw(s) for s in COVERING_SEEDS]) == []


def test_the_docs_table_is_the_codes():
    """docs/testing.md#random declares the same axes and values as run.py."""
    text = (Path(__file__).resolve().parents[2] / "docs" / "testing.md").read_text()
    rows = re.findall(r"^\| (config|workload) \| `(\w+)` \| (.*?) \| ", text, re.MULTILINE)
    assert {(part, axis): [json.loads(v) for v in re.findall(r"`([^`]*)`", values)] for part, axis, values in rows} == {
        (part, axis): list(values) for part, axes in (("config", harness.RANDOM_CONFIG_AXES),
                                                     ("workload", harness.RANDOM_WORKLOAD_AXES))
        for axis, values in axes.items()}


def test_every_delay_string_has_five_short_levels_then_far_ones():
    """Levels 1-5 carry the short delays and the retries (delivered before the copy); the others
    are the far delays, still due once the stores are copied (seed 559976 drew a 1 s level 6)."""
    for levels in harness.RANDOM_CONFIG_AXES["delay_levels"]:
        ms = [harness.delay_ms(x) for x in levels.split()]
        assert max(ms[:5]) <= 3000 and min(ms[5:]) >= 90_000, levels


def test_a_crashed_judge_is_named_by_its_fatal_error_report(tmp_path):
    """A client JVM that died in native code (matrix seeds 325541 and 95933: RocketMQ 5.3.3's RocksDB
    under ScheduleMessageTimerThread) is reported by its hs_err report's frame and thread, a harness
    error that make test and make matrix run again, never a JSON error on the report's lines."""
    class Dead:
        pid = 4242

        def poll(self):
            return 134

    assert harness.jvm_crash(tmp_path, Dead(), wait_s=0) is None
    (tmp_path / "hs_err_pid4242.log").write_text(
        "#\n# A fatal error has been detected by the Java Runtime Environment:\n#\n"
        "#  SIGSEGV (0xb) at pc=0x00007f7fe99d505f, pid=4242, tid=6122\n#\n# Problematic frame:\n"
        "# C  [librocksdbjni1.so+0x3d505f]  rocksdb::DBImpl::FailIfTsMismatchCf()+0x2f\n#\n"
        'Current thread (0x00007f8018008b30):  JavaThread "ScheduleMessageTimerThread_4" [_thread_in_native]\n')
    said = harness.jvm_crash(tmp_path, Dead(), wait_s=0)
    assert said.startswith(harness.JVM_CRASHED) and "SIGSEGV (0xb)" in said
    assert "FailIfTsMismatchCf" in said and "ScheduleMessageTimerThread_4" in said


def test_a_broker_that_lost_its_own_op_record_fails_the_run(tmp_path):
    """A broker that could not write its batched transaction op record (random-13@5.5.1 on CI: puts
    refused as page cache busy on the loaded machine) lost the rollbacks in it; the run is a harness
    error naming the log line, which make test and make matrix run again, never checks that expect
    the producer's decisions."""
    logs = tmp_path / "home" / "logs" / "rocketmqlogs"
    logs.mkdir(parents=True)
    (logs / "transaction.log").write_text(
        "2026-11-29 19:44:46 INFO TransactionalOpBatchService - Start transaction op batch thread!\n")
    assert harness.broker_lost_writes(tmp_path) is None
    with open(logs / "transaction.log", "a") as f:
        f.write("2026-11-29 19:49:31 ERROR TransactionalOpBatchService - Transaction batch op message write "
                "failed. body is 1,2,4,5,, queueId is 0\n")
    said = harness.broker_lost_writes(tmp_path)
    assert said.startswith(harness.BROKER_LOST_WRITES) and "body is 1,2,4,5,, queueId is 0" in said


def test_a_draw_is_the_seeds_alone():
    assert harness.random_draw(7) == harness.random_draw(7) != harness.random_draw(8)


# -- the run under test ---------------------------------------------------------------------------

def covering_runs() -> list[str]:
    """The cached runs ``make test`` holds: every covering seed on every pinned release
    (``random-N`` on the default one, ``random-N@V`` on the others), and each seed pinned on one
    release (:data:`PINNED_RELEASE_SEEDS`) on it."""
    return [f"random-{s}" + ("" if v == harness.DEFAULT_RELEASE else f"@{v}")
            for v in harness.RELEASES for s in COVERING_SEEDS] + \
        [f"random-{s}" + ("" if v == harness.DEFAULT_RELEASE else f"@{v}") for s, v in PINNED_RELEASE_SEEDS]


def _seeds() -> list:
    one = os.environ.get("RMQFILTER_RANDOM_RUN")
    return [Path(one)] if one else covering_runs()


@pytest.fixture(scope="module", params=_seeds(), ids=str)
def run(request):
    if isinstance(request.param, Path):
        return load(request.param)
    return scenario(request.param)


class Broker:
    """One broker of a run: its copied store, and the sends and deliveries that concern it."""

    def __init__(self, run, name: str):
        self.name = name
        self.store = cq.Store(str(run.store_path(name)))
        self.topic = run.broker["random"]["topic"]
        #: (topic, queue id) -> the admin API's max offset at the copy: units at or past it are not in the copy
        self.copy_max = {(t["topic"], q["queue_id"]): q["max_offset"] for t in run.broker["topics"]
                         for q in t["queues"] if q.get("broker", name) == name}
        #: (topic, the admin API's queue stats) of every topic the run created
        self.queues = [(t["topic"], q) for t in run.broker["topics"] for q in t["queues"] if q.get("broker", name) == name]
        self.all_sent = [s for s in run.sent if s.get("broker") == name]
        self.sent = [s for s in self.all_sent if s["topic"] == self.topic]
        self.received = [r for r in run.received if r["broker"] == name]

    def sent_to(self, topic: str) -> list[dict]:
        return [s for s in self.all_sent if s["topic"] == topic]


@pytest.fixture(scope="module")
def brokers(run):
    out = [Broker(run, b["name"]) for b in run.broker["brokers"]]
    yield out
    for b in out:
        b.store.close()


def groups(run, *roles) -> list[dict]:
    return [g for g in run.broker["groups"] if not roles or g["role"] in roles]


def subscription(g: dict) -> dict:
    return {} if g["type"] == "SQL92" else {"tags": g["expression"]}


def in_copy(run, s: dict) -> bool:
    """Whether a send is in the copied stores (sent before the snapshot began)."""
    return s["outcome"] == "sent" and s["sent_ms"] < run.broker["snapshot_ms"]


def due_after_copy(run, due_ms: int) -> bool:
    """Whether a message due at ``due_ms`` still waited in the copy (the broker delivers until its
    store shuts down, between ``snapshot_ms`` and ``copied_ms``: a due time there is undecided)."""
    start, end = run.broker["snapshot_ms"], run.broker["copied_ms"]
    assert not start - 1000 <= due_ms <= end + 1000, (due_ms, start, end)
    return due_ms > end


def due_ms(run, s: dict) -> int | None:
    """When a delayed or timer message was due: the send time plus its level's delay, or the time
    the producer asked for."""
    if s.get("delay_level"):
        return s["sent_ms"] + run.broker["random"]["delay_levels_ms"][s["delay_level"] - 1]
    return s.get("deliver_ms")


def recalled(run) -> set[str]:
    return {r["uniq_key"] for r in run.broker["random"]["recalls"] if r["ok"]}


def committed(run, group: str, broker: str, queue_id: int) -> int:
    g = next(x for x in run.broker["groups"] if x["group"] == group)
    return next((p["consumer_offset"] for p in g.get("progress", [])
                 if p["queue_id"] == queue_id and p["broker"] == broker), 0)


def expected_state(run, s: dict, g: dict) -> str:
    """What happened to ``s`` for group ``g`` on the real broker, from the run's records alone."""
    rnd = run.broker["random"]
    if s.get("tx") == "rollback":
        return "rolled_back"
    if s.get("tx") == "unknown":
        # past transactionCheckMax the broker moved the half to TRANS_CHECK_MAX_TIME_TOPIC: never
        # delivered (the scenario waited for that before the copy)
        return "rolled_back" if rnd["tx_check_max"] < harness.RANDOM_TX_CHECK_MAX_DEFAULT else "uncommitted"
    due = due_ms(run, s)
    if s.get("delay_level") and due_after_copy(run, due):
        return "scheduled"
    if s["uniq_key"] in recalled(run):
        return "recalled"
    if s.get("timer_delay_ms") and due_after_copy(run, due):
        return "scheduled"
    lines = [r for r in run.received if r["group"] == g["group"] and r["uniq_key"] == s["uniq_key"]]
    if g["role"] == "pop":
        return pop_state(run, lines)
    if g["role"] == "disabled":
        assert not lines      # a disabled group receives nothing
        return "gated"
    if not lines:
        return "filtered"
    live = [r for r in lines if r["phase"] == "live"]
    if not live:
        return "pending"
    if g["role"] in ("fail", "never_commits_retry") and all(r.get("result") == "failed" for r in live):
        last = max(r["reconsume_times"] for r in live)
        return "dead_letter" if g["role"] == "fail" and last == rnd["max_reconsume_times"] else "retrying"
    first = next((r for r in live if r["topic"] == rnd["topic"] and r["reconsume_times"] == 0), None)
    if first is not None and committed(run, g["group"], first["broker"], first["queue_id"]) <= first["queue_offset"]:
        # received, but the consumer's last commit had not reached the broker when it stopped
        assert any(r["phase"] == "drain" for r in lines), (g["group"], s["keys"])
        return "pending"
    return "consumed"


def pop_state(run, lines: list[dict]) -> str:
    """The POP group's state of a message from its pops: never popped, pending; acked, consumed;
    not acked, in flight (the scenario's invisible time ends long after the copy)."""
    if not lines:
        return "pending"
    last = max(lines, key=lambda r: r["pop_time"])
    if last["result"] == "acked":
        return "consumed"
    assert last["pop_time"] + last["invisible_ms"] > run.broker["copied_ms"] + 60_000, last
    return "in_flight"


# -- the checks -----------------------------------------------------------------------------------

def test_the_run_is_its_draw(run):
    """broker.json's generated is the seed's draw, and the brokers ran its configuration."""
    gen = run.broker["generated"]
    assert {k: gen[k] for k in ("seed", "config", "workload", "message_seed")} == harness.random_draw(gen["seed"])
    assert len(run.broker["brokers"]) == gen["config"]["brokers"]
    for b in run.broker["brokers"]:
        assert b["config"]["messageDelayLevel"] == gen["config"]["delay_levels"]


def test_consume_is_what_the_consumers_received(run, brokers):
    """Store.consume of every group (SQL92 groups by their registration alone) gives, unit for unit,
    what its consumers first received from each broker's topic queues, up to the copy's end."""
    for b in brokers:
        # a consumer of a BatchCQ topic gets no offset message id with a batch's messages: its send result's
        sent_id = {s["uniq_key"]: s.get("msg_id") for s in b.all_sent}
        for g in groups(run, "plain", "late", "fail", "never_commits_retry"):
            topic = g["topic"]
            want = {}
            for r in b.received:
                key = (r["queue_id"], r["queue_offset"])
                if r["group"] == g["group"] and r["topic"] == topic and r["reconsume_times"] == 0 \
                    and r["queue_offset"] < b.copy_max[topic, r["queue_id"]]:
                    want.setdefault(key, (r["uniq_key"], r["msg_id"] or sent_id.get(r["uniq_key"])))
            result = b.store.consume(topic, g["group"], **subscription(g))
            got = {(m.queue_id, m.queue_offset): (m.properties.get("UNIQ_KEY"), m.msg_id) for m in result}
            assert_same_units(got, want, f"{b.name}: Store.consume({g['group']})")
            assert result.stats.commit_log_missing == 0


def test_consume_with_the_registered_expression_given_is_the_groups(run, brokers):
    """``--sql`` with the expression a SQL92 group registered answers as the group (its bornTime)."""
    for b in brokers:
        for g in groups(run):
            if g["type"] == "SQL92" and g["role"] != "disabled":
                given = b.store.consume(g["topic"], g["group"], sql=g["expression"])
                registered = b.store.consume(g["topic"], g["group"])
                assert [(m.queue_id, m.queue_offset) for m in given] == [
                    (m.queue_id, m.queue_offset) for m in registered], (b.name, g["group"])


def test_backlog_is_what_the_drain_received(run, brokers):
    """Per queue: the admin API's committed and max offsets, and will_receive the units of the copy
    the drain received from that queue; the retry topic and the scheduled copies due to it are the
    retries the drain received; the scheduled copies due to the topic (tag groups: by their tags)
    and their due buckets are the sends still due, from their send times."""
    snap = run.broker["snapshot_ms"]
    for b in brokers:
        for g in groups(run, "plain", "late", "fail", "never_commits_retry"):
            group, topic = g["group"], g["topic"]
            bl = cq.backlog(b.store, topic, group, later=True, now_ms=snap, **subscription(g))
            progress = {p["queue_id"]: p for p in g["progress"] if p["broker"] == b.name}
            assert sorted(q.queue_id for q in bl.queues) == sorted(progress)
            drain = [r for r in b.received if r["group"] == group and r["phase"] == "drain"]
            for q in bl.queues:
                p = progress[q.queue_id]
                assert (q.committed_offset, q.max_offset) == (p["consumer_offset"], p["broker_offset"]), (b.name, group, q)
                got = {r["queue_offset"] for r in drain if r["topic"] == topic and r["queue_id"] == q.queue_id
                       and r["reconsume_times"] == 0 and q.committed_offset <= r["queue_offset"] < q.max_offset}
                assert q.will_receive == len(got), (b.name, group, q)
            retries = {r["uniq_key"] for r in drain if r["reconsume_times"] >= 1}
            in_retry = bl.retry.will_receive if bl.retry is not None else 0
            assert in_retry + bl.scheduled["to_retry"] == len(retries), (b.name, group, "retry", bl.to_dict())
            assert sum(bl.scheduled["buckets"].values()) == bl.scheduled["will_receive"]
            if g["type"] == "TAG" and bl.scheduled["to_retry"] == 0:
                tags = {t.strip() for t in g["expression"].split("||")}
                due = [due_ms(run, s) for s in b.sent_to(topic) if in_copy(run, s)
                       and (s.get("delay_level") or s.get("timer_delay_ms"))
                       and expected_state(run, s, g) == "scheduled" and ("*" in tags or s["tags"] in tags)]
                assert bl.scheduled["to_topic"] == len(due), (b.name, group)
                want = dict.fromkeys(bl.scheduled["buckets"], 0)
                for d in due:
                    want[next(lb for lb, limit in DUE_BUCKETS if limit is None or d - snap <= limit)] += 1
                assert bl.scheduled["buckets"] == want, (b.name, group, "due buckets")


def test_backlog_cli_text_and_json_are_the_same_figures(run, brokers, capsys):
    for b in brokers[:1]:
        for g in groups(run, "plain", "fail", "never_commits_retry")[:3]:
            base = ["backlog", str(run.store_path(b.name)), "--topic", g["topic"], "--group", g["group"],
                    *(["--tags", g["expression"]] if g["type"] == "TAG" else [])]
            capsys.readouterr()
            assert cli.main([*base, "--json"]) == 0
            doc = json.loads(capsys.readouterr().out)
            want = cq.backlog(b.store, g["topic"], g["group"], later=True, **subscription(g)).to_dict()
            for key in ("queues", "total", "retry"):
                assert doc[key] == want[key], key
            assert doc["scheduled"]["will_receive"] == want["scheduled"]["will_receive"]
            assert cli.main(base) == 0
            text = capsys.readouterr().out
            retry = want["retry"]
            if retry is not None:
                assert f"retry:     {retry['total']['will_receive']:,} message(s) wait in {retry['topic']}" in text


@pytest.fixture(scope="module")
def cluster(run, brokers):
    """The run's brokers as one cq.Cluster (None for one broker)."""
    if len(brokers) < 2:
        yield None
        return
    c = cq.Cluster({b.name: str(run.store_path(b.name)) for b in brokers})
    yield c
    c.close()


def test_why_state_is_what_the_broker_did(run, brokers, cluster):
    """``why`` of every send for every group is what the broker did with it; with two brokers it
    asks the cluster (the message's broker), since a retry the client could not send back through
    the message's broker went to the other (read_only_send_back; docs/paths.md#retries-on-another-broker)."""
    wrong = []
    for b in brokers:
        for g in groups(run):
            if g["role"] == "lmq":
                continue      # test_lmq_queues_are_what_the_pull_consumers_got
            for s in b.sent_to(g["topic"]):
                if not in_copy(run, s):
                    continue
                target, only = (b.store, {}) if cluster is None else (cluster, {"broker": b.name})
                paths = why_every_copy(target, g["topic"], g["group"], msg_id=s["uniq_key"], **only, **subscription(g))
                want = expected_state(run, s, g)
                if [p.state for p in paths] != [want]:
                    wrong.append((b.name, g["group"], s["keys"][0], [p.state for p in paths], want))
    assert not wrong, wrong[:20]


def test_retries_sent_through_the_other_broker_are_why_retrying(run, brokers, cluster):
    """With broker-b read-only while GID_RND_NC sent its failures back, each such retry is on
    broker-a (the drain received it from there), and ``why`` over the cluster says retrying and
    names broker-a; broker-b's store alone says consumed."""
    if not run.broker["generated"]["workload"].get("read_only_send_back"):
        pytest.skip("the draw has no read_only_send_back")
    home, other = brokers[1], brokers[0]
    nc = next(g for g in groups(run) if g["group"] == harness.RANDOM_NC_GROUP)
    failed = {r["uniq_key"] for r in home.received
              if r["group"] == nc["group"] and r["phase"] == "live" and r.get("result") == "failed"}
    assert failed, "GID_RND_NC failed no message of broker-b"
    moved = {r["uniq_key"] for r in other.received
             if r["group"] == nc["group"] and r["reconsume_times"] >= 1 and r["uniq_key"] in failed}
    assert moved == failed, (sorted(failed - moved)[:5], "retries not received from broker-a")
    for uniq in sorted(moved)[:10]:
        [path] = why_every_copy(cluster, nc["topic"], nc["group"], msg_id=uniq, broker=home.name, **subscription(nc))
        assert (path.state, path.fields["copy_broker"]) == ("retrying", other.name), path.sentence
        [alone] = why_every_copy(home.store, nc["topic"], nc["group"], msg_id=uniq, **subscription(nc))
        assert alone.state == "consumed", alone.sentence


def test_pending_rows_and_due_times_are_the_sends(run, brokers):
    """Scheduled rows are the sends still due at the copy, each due at its send time plus its delay
    (the time the producer asked for, for a timer); transactions by the producer's decision; the
    failing group's dead letters."""
    fail = next((g for g in groups(run, "fail")), None)
    limited = run.broker["random"]["tx_check_max"] < harness.RANDOM_TX_CHECK_MAX_DEFAULT
    decided = {"commit": "committed", "rollback": "rolled_back", "unknown": "check_limit" if limited else "unresolved"}
    for b in brokers:
        sent = {s["uniq_key"]: s for s in b.sent}
        rows = [r for r in pending(b.store, "scheduled") if r["real_topic"] == b.topic]
        for kind, field in (("delay_level", "delay_level"), ("timer", "timer_delay_ms")):
            still = {r["uniq_key"] for r in rows if r["status"] == "scheduled" and r["kind"] == kind}
            assert still == {s["uniq_key"] for s in b.sent if s.get(field) and in_copy(run, s)
                             and s["uniq_key"] not in recalled(run) and due_after_copy(run, due_ms(run, s))}, (b.name, kind)
        for r in rows:
            assert abs(r["due_at_ms"] - due_ms(run, sent[r["uniq_key"]])) < 1000, (b.name, r)
        for r in pending(b.store, "scheduled"):   # retries' copies too: due at store time + their level's delay
            if r["kind"] == "delay_level":
                level_ms = run.broker["random"]["delay_levels_ms"][r["delay_level"] - 1]
                assert r["due_at_ms"] == r["store_timestamp"] + level_ms, (b.name, r)
        assert {r["uniq_key"] for r in rows if r["status"] == "recalled"} == {
            u for u in recalled(run) if u in sent}
        txs = {r["uniq_key"]: r["status"] for r in pending(b.store, "transactions")}
        assert txs == {s["uniq_key"]: decided[s["tx"]] for s in b.sent if "tx" in s}, b.name
    # the cluster's dead letters: a client whose send-back failed sent the last retry through its own
    # producer, and the broker that took it wrote the dead letter (seed 17798 on 5.5.1: broker-b's message
    # in broker-a's DLQ; docs/paths.md#retries-on-another-broker)
    dead = {(r["group"], r["uniq_key"]) for b in brokers for r in pending(b.store, "dead_letters")}
    assert dead == ({(fail["group"], s["uniq_key"]) for b in brokers for s in b.sent if in_copy(run, s)
                     and expected_state(run, s, fail) == "dead_letter"} if fail else set())


def test_inspect_offsets_are_the_admin_apis(run, brokers, capsys):
    for b in brokers:
        capsys.readouterr()
        assert cli.main(["inspect", str(run.store_path(b.name)), "--json"]) == 0
        topics = json.loads(capsys.readouterr().out)["topics"]
        for topic, q in b.queues:
            mine = topics[topic][str(q["queue_id"])]
            assert (mine["min_offset"], mine["max_offset"]) == (q["min_offset"], q["max_offset"]), (b.name, topic, q)


def test_pop_group_backlog_and_pops_are_its_pops(run, brokers):
    """The POP group: ``backlog`` in flight the un-acked pops (due pop time + invisible time, none
    overdue), ``will_receive`` the messages it never popped; ``pending pops`` one row per pop."""
    pop = next(iter(groups(run, "pop")), None)
    if pop is None:
        pytest.skip("the draw has no POP group")
    snap = run.broker["snapshot_ms"]
    for b in brokers:
        states = [expected_state(run, s, pop) for s in b.sent if in_copy(run, s)]
        bl = cq.backlog(b.store, pop["topic"], pop["group"], tags="*", later=True, now_ms=snap)
        assert bl.in_flight["messages"] == states.count("in_flight"), (b.name, bl.to_dict())
        assert sum(bl.in_flight["buckets"].values()) == bl.in_flight["messages"] and bl.in_flight["buckets"]["overdue"] == 0
        assert bl.will_receive == states.count("pending"), (b.name, bl.to_dict())
        rows = {(r["topic"], r["queue_id"], r["queue_offset"], r["pop_time"]): r for r in pending(b.store, "pops")}
        pops = {(x["topic"], x["queue_id"], x["queue_offset"], x["pop_time"]): x for x in b.received
                if x["group"] == pop["group"]}
        assert set(rows) == set(pops), b.name
        for k, x in pops.items():
            want = "acked" if x["result"] == "acked" else "in_flight"
            assert (rows[k]["status"], rows[k]["uniq_key"], rows[k]["due_at_ms"]) == (
                want, x["uniq_key"], x["pop_time"] + x["invisible_ms"]), (b.name, k)


def test_lmq_queues_are_what_the_pull_consumers_got(run, brokers):
    """Each LMQ queue (one broker): ``Store.consume`` gives the records its pull consumer received
    (at their LMQ offsets), ``backlog`` the broker's committed and max offsets and the drain's
    records, the queue's offsets the broker's, ``why`` consumed (pulled before the copy) or
    pending (pulled after it)."""
    lmq = groups(run, "lmq")
    if not lmq:
        pytest.skip("the draw has no LMQ dispatch")
    [b] = brokers
    for g in lmq:
        queue, [p] = g["topic"], g["progress"]
        lines = [r for r in b.received if r["group"] == g["group"]]
        if p["broker_offset"] == 0 and not lines:
            # the broker dispatched nothing to the LMQ (seed 199836 on 5.5.1: a DLedger CommitLog writes no
            # INNER_MULTI_QUEUE_OFFSET): its records name the LMQ but hold no offset in it, and rmqfilter
            # finds no queue there, as the broker serves none (docs/formats.md#lmq)
            named = [m for _, m, _ in topic_records(b.store, g["parent_topic"])
                     if queue in (m.properties.get(fmt.PROPERTY_INNER_MULTI_DISPATCH) or "").split(
                         fmt.LMQ_DISPATCH_SEPARATOR)]
            assert named and not any(fmt.PROPERTY_INNER_MULTI_QUEUE_OFFSET in m.properties for m in named)
            with pytest.raises(KeyError, match="has no consume queues"):
                b.store.consume(queue, g["group"], tags="*")
            continue
        want = {}
        for r in lines:
            want.setdefault((r["queue_id"], r["queue_offset"]), (r["uniq_key"], r["msg_id"]))
        result = b.store.consume(queue, g["group"], tags="*")
        got = {(fmt.LMQ_QUEUE_ID, lmq_offset(m, queue)): (m.properties.get("UNIQ_KEY"), m.msg_id) for m in result}
        assert_same_units(got, want, f"Store.consume({queue})")
        bl = cq.backlog(b.store, queue, g["group"], tags="*")
        [q] = bl.queues
        assert (q.committed_offset, q.max_offset) == (p["consumer_offset"], p["broker_offset"]), q
        assert q.will_receive == sum(1 for r in lines if r["phase"] == "drain"), q
        with b.store.queue_readers(queue, fmt.LMQ_QUEUE_ID, ext=False) as (reader, _):
            assert (reader.min_offset, reader.max_offset) == (p["min_offset"], p["broker_offset"])
        for s in b.all_sent:
            if queue in (s.get("lmq") or []) and in_copy(run, s):
                phases = {r["phase"] for r in lines if r["uniq_key"] == s["uniq_key"]}
                [path] = why_every_copy(b.store, queue, g["group"], tags="*", msg_id=s["uniq_key"])
                assert path.state == ("consumed" if "live" in phases else "pending"), (queue, s["keys"], path.state)


def lmq_offset(msg, queue: str) -> int:
    """The record's offset in LMQ ``queue``, as the broker wrote it in the record's properties."""
    queues = msg.properties[fmt.PROPERTY_INNER_MULTI_DISPATCH].split(fmt.LMQ_DISPATCH_SEPARATOR)
    offsets = msg.properties[fmt.PROPERTY_INNER_MULTI_QUEUE_OFFSET].split(fmt.LMQ_DISPATCH_SEPARATOR)
    return int(offsets[queues.index(queue)])


@pytest.mark.spark
def test_data_source_is_what_the_consumers_received(spark, run, brokers):
    """The data source with each group's subscription gives the units it first received (first broker)."""
    b = brokers[0]
    for g in groups(run, "plain", "late"):
        topic = g["topic"]
        reader = spark.read.format("rocketmq").option("topic", topic).option("group", g["group"])
        if g["type"] == "TAG":
            reader = reader.option("tags", g["expression"])
        rows = reader.load(str(run.store_path(b.name))).selectExpr(
            "queue_id", "queue_offset", "properties['UNIQ_KEY'] AS uniq").collect()
        got = {(r.queue_id, r.queue_offset): r.uniq for r in rows}
        want = {}
        for r in b.received:
            if r["group"] == g["group"] and r["topic"] == topic and r["reconsume_times"] == 0 \
                    and r["queue_offset"] < b.copy_max[topic, r["queue_id"]]:
                want.setdefault((r["queue_id"], r["queue_offset"]), r["uniq_key"])
        assert_same_units(got, want, f"data source, {b.name} group {g['group']}")
