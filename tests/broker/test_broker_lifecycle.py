"""The paths a message takes, held against the real broker's ``lifecycle`` scenario (docs/paths.md).

For every message the scenario sent and every group of its topic, ``why``'s state is what the
broker did: what the consumers received in which phase, what the failing group's retries and DLQ
came to, what the transactional producer decided, and which delay levels were still due at the
snapshot (from the send time and the broker's configured levels); a timer message the producer
recalled is ``recalled``, and the timer's own files agree with what the broker was sent.
"""
from __future__ import annotations

import json

import pytest
from broker_support import scenario_fixtures

import cq
import rmqfilter
from cq.analyses.paths import why_every_copy
from cq.analyses.pending import COLUMNS, pending

pytestmark = pytest.mark.broker


run, store = scenario_fixtures("lifecycle")


def expected_state(run, sent: dict, group: str) -> str:
    """What happened to ``sent`` for ``group`` on the real broker, from the harness's records alone."""
    life = run.broker["lifecycle"]
    if sent.get("tx") == "rollback":
        return "rolled_back"
    if sent.get("tx") == "unknown":
        return "uncommitted"
    level = sent.get("delay_level")
    if level and due_after_copy(run, sent["sent_ms"] + life["delay_levels_s"][level - 1] * 1000):
        return "scheduled"
    if sent["uniq_key"] in recalled(run):
        return "recalled"
    if sent.get("timer_delay_ms") and due_after_copy(run, sent["deliver_ms"]):
        return "scheduled"
    lines = [r for r in run.received if r["group"] == group and r["uniq_key"] == sent["uniq_key"]]
    if group == life["pop_group"]:
        return pop_state(run, lines)
    if group == life["off_group"]:
        assert not lines       # a disabled group receives nothing
        return "gated"
    if not lines:
        return "filtered"
    live = [r for r in lines if r["phase"] == "live"]
    if not live:
        return "pending"
    if group == life["fail_group"] and all(r["result"] == "failed" for r in live):
        last = max(r["reconsume_times"] for r in live)
        return "dead_letter" if last == life["max_reconsume_times"] else "retrying"
    first = next((r for r in live if r["topic"] == life["topic"] and r["reconsume_times"] == 0), None)
    if first is not None and broker_committed(run, group, first["queue_id"]) <= first["queue_offset"]:
        # received, but the consumer's last offset commit had not reached the broker when it
        # stopped: the broker's own progress at the snapshot says pending, and the drain gets it again
        assert any(r["phase"] == "drain" for r in lines), (group, sent["keys"])
        return "pending"
    return "consumed"


def due_after_copy(run, due_ms: int) -> bool:
    """Whether a delayed or timer message due at ``due_ms`` was still waiting in the copied store.

    The broker keeps delivering until its store shuts down, somewhere between ``snapshot_ms`` and
    ``copied_ms`` (the clean shutdown can take seconds): the scenario keeps every due time at least a
    second outside that window."""
    start, end = run.broker["snapshot_ms"], run.broker["copied_ms"]
    assert not start - 1000 <= due_ms <= end + 1000, (due_ms, start, end)
    return due_ms > end


def broker_committed(run, group: str, queue_id: int) -> int:
    """The group's committed offset on a queue of the topic, as the broker's admin API gave it at the snapshot."""
    progress = run.group(group).get("progress", [])
    return next((p["consumer_offset"] for p in progress if p["queue_id"] == queue_id), 0)


def recalled(run) -> set[str]:
    """The UNIQ_KEYs of the timer messages whose recall the broker took."""
    return {r["uniq_key"] for r in run.broker["lifecycle"]["recalls"] if r["ok"]}


def pop_state(run, lines: list[dict]) -> str:
    """The POP group's state of a message from its pops (Client.java ``pop``): never popped, pending;
    the last pop acked, consumed; not acked, in flight until pop time + invisible time, or revived
    into the POP retry topic when that passed before the snapshot (the scenario waited for it)."""
    if not lines:
        return "pending"
    last = max(lines, key=lambda r: r["pop_time"])
    if last["result"] == "acked":
        return "consumed"
    due = last["pop_time"] + last["invisible_ms"]
    # the scenario waits for the revive of its short pops before the snapshot; its long ones are due minutes after
    assert due < run.broker["snapshot_ms"] or due > run.broker["snapshot_ms"] + 60_000, last
    return "in_flight" if due > run.broker["snapshot_ms"] else "retrying"


def subscription(run, group: str) -> dict:
    g = run.group(group)
    return {} if g["type"] == "SQL92" else {"tags": g["expression"]}


def test_every_state_the_scenario_makes_is_there(run):
    topic = run.broker["lifecycle"]["topic"]
    states = {expected_state(run, s, g["group"]) for s in run.sent for g in run.broker["groups"] if g["topic"] == topic}
    assert states == {"consumed", "pending", "filtered", "scheduled", "recalled", "uncommitted", "rolled_back",
                      "retrying", "dead_letter", "gated", "in_flight"}
    pop = [expected_state(run, s, run.broker["lifecycle"]["pop_group"]) for s in run.sent]
    assert {"consumed", "in_flight", "retrying", "pending"} <= set(pop), pop


def test_why_state_is_what_the_broker_did(run, store):
    topic = run.broker["lifecycle"]["topic"]
    wrong = []
    for g in run.broker["groups"]:
        for s in run.sent:
            paths = why_every_copy(store, topic, g["group"], msg_id=s["uniq_key"], **subscription(run, g["group"]))
            want = expected_state(run, s, g["group"])
            if [p.state for p in paths] != [want]:
                wrong.append((g["group"], s["keys"][0], [p.state for p in paths], want))
    assert not wrong, wrong


def test_state_fields_match_the_store_and_the_sends(run, store):
    life = run.broker["lifecycle"]
    topic, fail = life["topic"], life["fail_group"]
    for s in run.sent:
        [p] = why_every_copy(store, topic, fail, tags="*", msg_id=s["uniq_key"])
        if p.state in ("scheduled", "recalled") and s.get("timer_delay_ms"):
            assert p.fields["timer"] and abs(p.fields["due_at_ms"] - s["deliver_ms"]) < 1000
        elif p.state == "scheduled":
            level = s["delay_level"]
            assert p.fields["delay_level"] == level
            # the SCHEDULE unit's tags code is the delivery time: store time + the level's delay
            sched = next(c for c in p.copies if c.role == "scheduled").message
            assert p.fields["due_at_ms"] == sched.store_timestamp + life["delay_levels_s"][level - 1] * 1000
        elif p.state == "dead_letter":
            assert p.fields["reconsume_times"] == life["max_reconsume_times"] + 1
            assert {c.role for c in p.copies} >= {"topic", "retry", "dead_letter"}
        elif p.state == "uncommitted":
            assert p.fields["check_times"] >= 1 and p.fields["producer_group"] == "harness_tx_producer"
            checked = life["tx_checks"].get(s["uniq_key"], 0)
            assert checked >= 1   # the producer's listener answered UNKNOW at least once
        elif p.state == "retrying":
            assert p.fields["reconsume_times"] >= 1


def test_cli_by_offset_id_key_and_queue_offset(run, capsys):
    life = run.broker["lifecycle"]
    topic = life["topic"]
    base = ["why", str(run.store_path()), "--topic", topic, "--group", life["fail_group"], "--tags", "*"]
    for s in run.sent:
        want = expected_state(run, s, life["fail_group"])
        capsys.readouterr()
        assert rmqfilter.main([*base, "--key", s["keys"][0], "--json"]) == 0
        [doc] = json.loads(capsys.readouterr().out)
        assert doc["state"] == want and doc["uniq_key"] == s["uniq_key"], (s, doc["state"])
        if s.get("msg_id") and not s.get("delay_level") and not s.get("timer_delay_ms"):
            assert rmqfilter.main([*base, "--msg-id", s["msg_id"], "--json"]) == 0
            [doc] = json.loads(capsys.readouterr().out)
            assert doc["state"] == want and doc["found_by"] == "msg_id"
        if want in ("consumed", "pending", "dead_letter", "retrying") and not s.get("tx") and not s.get("delay_level") \
                and not s.get("timer_delay_ms"):
            assert rmqfilter.main([*base, "--queue", str(s["queue_id"]), "--offset", str(s["queue_offset"])]) == 0
            out = capsys.readouterr().out
            assert out.startswith(f"state     {want.upper()}: "), out[:200]


def test_pending_rows_are_the_sends_outstanding_at_the_snapshot(run, store):
    """Scheduled copies still due, transactions by the producer's decision, the failing group's dead letters."""
    life = run.broker["lifecycle"]
    topic = life["topic"]
    rows = pending(store, "scheduled")
    for kind, field in (("delay_level", "delay_level"), ("timer", "timer_delay_ms")):
        still = {r["uniq_key"] for r in rows if r["status"] == "scheduled" and r["real_topic"] == topic
                 and r["kind"] == kind}
        assert still == {s["uniq_key"] for s in run.sent if s.get(field)
                         and expected_state(run, s, life["fail_group"]) == "scheduled"}, kind
    sent = {s["uniq_key"]: s for s in run.sent}
    for r in rows:
        if r["kind"] == "delay_level":
            assert r["due_at_ms"] == r["store_timestamp"] + life["delay_levels_s"][r["delay_level"] - 1] * 1000
        else:   # the time the producer asked for (TIMER_DELIVER_MS), as the broker rounds it
            assert abs(r["due_at_ms"] - sent[r["uniq_key"]]["deliver_ms"]) < 1000, r
    assert {r["uniq_key"] for r in rows if r["kind"] == "timer"} == {s["uniq_key"] for s in run.sent
                                                                    if s.get("timer_delay_ms")}
    assert {r["uniq_key"] for r in rows if r["status"] == "recalled"} == recalled(run)
    decided = {"commit": "committed", "rollback": "rolled_back", "unknown": "unresolved"}
    txs = {r["uniq_key"]: r for r in pending(store, "transactions")}
    assert {u: r["status"] for u, r in txs.items()} == {s["uniq_key"]: decided[s["tx"]] for s in run.sent if "tx" in s}
    committed = {r["commit_commit_log_offset"] for r in txs.values() if r["status"] == "committed"}
    assert None not in committed
    dead = pending(store, "dead_letters")
    assert {(r["group"], r["uniq_key"]) for r in dead} == {
        (life["fail_group"], s["uniq_key"]) for s in run.sent if expected_state(run, s, life["fail_group"]) == "dead_letter"}
    firsts: dict[str, set] = {}    # the copies the failing group received first (reconsume 0)
    for x in run.received:
        if x["group"] == life["fail_group"] and x["reconsume_times"] == 0:
            firsts.setdefault(x["uniq_key"], set()).add(x["msg_id"])
    for r in dead:   # the origin is the record the group first received: the send's own, as a rule
        assert r["origin_topic"] == topic
        assert r["origin_msg_id"] in firsts[r["uniq_key"]], (r, sent[r["uniq_key"]]["msg_id"])
        assert r["reconsume_times"] == life["max_reconsume_times"] + 1 and r["first_store_ms"] <= r["store_timestamp"]


def test_pending_cli_prints_the_same_rows(run, store, capsys):
    capsys.readouterr()
    assert rmqfilter.main(["pending", str(run.store_path()), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc == {t: pending(store, t) for t in ("scheduled", "transactions", "dead_letters", "pops")}


@pytest.mark.spark
@pytest.mark.parametrize("table", ["scheduled", "transactions", "dead_letters", "pops"])
def test_data_source_pending_tables_give_the_same_rows(spark, run, store, table):
    df = spark.read.format("rocketmq").option("table", table).load(str(run.store_path()))
    assert [f.name for f in df.schema.fields] == [n for n, _ in COLUMNS[table]]
    assert sorted(map(tuple, df.collect()), key=repr) == sorted(
        (tuple(r.values()) for r in pending(store, table)), key=repr)


@pytest.mark.parametrize("group", ["GID_LIFE_ALL", "GID_LIFE_A", "GID_LIFE_SQL", "GID_LIFE_FAIL"])
def test_backlog_now_and_later_is_what_the_drained_consumers_received(run, store, group):
    """At the snapshot: the topic's backlog, the retry topic's and the delay copies still due, through the
    group's filter, are what the group received once its consumers were started again."""
    sent = {s["uniq_key"]: s for s in run.sent}
    drain = {(r["uniq_key"], r["reconsume_times"]) for r in run.received if r["group"] == group and r["phase"] == "drain"}
    # copies that existed at the snapshot: first deliveries, and one retry of each message the fail
    # group was retrying (in its retry topic, or scheduled to it; which one, and its reconsume
    # times, depend on how far the live consumer got before it stopped)
    due_later = {u for u, rc in drain if rc == 0 and expected_state(run, sent[u], group) == "scheduled"}
    now = {u for u, rc in drain if rc == 0} - due_later
    retries = {u for u, rc in drain if rc >= 1}
    b = cq.backlog(store, run.broker["lifecycle"]["topic"], group, later=True, **subscription(run, group))
    assert b.will_receive == len(now)
    in_retry = b.retry.will_receive if b.retry is not None else 0
    assert in_retry + b.scheduled["to_retry"] == len(retries)
    # the broker's own progress on the retry topic just before the copy: the same committed offsets
    # (no consumer runs), and the units the copy holds beyond them are at least those it counted
    # (its schedule service may still have delivered retries in between); a retry queue that had
    # never held a unit has no files in the copy (a consumer may have committed offset 0 there or not)
    queues = {q.queue_id: q for q in b.retry.queues} if b.retry is not None else {}
    retry_progress = [p for p in next(g for g in run.broker["groups"] if g["group"] == group)["retry_progress"]
                      if p["broker_offset"] > 0 or p["queue_id"] in queues]
    assert {q: (x.committed_offset, x.max_offset >= p["broker_offset"]) for q, x in queues.items()
            for p in retry_progress if p["queue_id"] == q} == {p["queue_id"]: (p["consumer_offset"], True)
                                                             for p in retry_progress}
    assert b.scheduled["to_topic"] == len(due_later)
    assert b.will_receive_later == len(now) + len(retries) + len(due_later)
    assert sum(b.scheduled["buckets"].values()) == b.scheduled["will_receive"]


def test_pop_group_fields_are_its_pops(run, store):
    """in_flight: due at the pop time + invisible time of its last pop; retrying: a revived copy in
    the POP retry topic (v1 name); consumed: the checkpoint and the ack the broker wrote."""
    life = run.broker["lifecycle"]
    topic, group = life["topic"], life["pop_group"]
    seen = set()
    for s in run.sent:
        lines = [r for r in run.received if r["group"] == group and r["uniq_key"] == s["uniq_key"]]
        want = expected_state(run, s, group)
        [p] = why_every_copy(store, topic, group, tags="*", msg_id=s["uniq_key"])
        seen.add(p.state)
        if want == "in_flight":
            last = max(lines, key=lambda r: r["pop_time"])
            assert p.fields["due_at_ms"] == last["pop_time"] + last["invisible_ms"]
            assert (p.fields["pop"]["queue_id"], p.fields["pop"]["queue_offset"]) == (last["queue_id"],
                                                                                     last["queue_offset"])
        elif want == "retrying":
            [revived] = [c for c in p.copies if c.role == "pop_retry"]
            assert revived.message.topic == life["pop_retry_topic"] and revived.message.reconsume_times == 1
        elif want == "consumed" and lines:
            assert p.fields["pop"]["acked"] and p.fields["pop"]["pop_time"] == max(r["pop_time"] for r in lines)
    assert {"in_flight", "retrying", "consumed"} <= seen


def test_pop_acks_single_and_batch_both_reach_the_revive_log(run):
    """The scenario acks one pop's messages one by one and the next pop's in one batch ack: both kinds."""
    group = run.broker["lifecycle"]["pop_group"]
    assert {r["ack"] for r in run.received if r["group"] == group and r["result"] == "acked"} == {"single", "batch"}


def test_pop_backlog_counts_what_is_in_flight(run, store):
    """At the snapshot: in flight, the un-acked pops not yet due; the POP retry topic, the revived
    ones; the topic, the messages the group never popped."""
    life = run.broker["lifecycle"]
    group = life["pop_group"]
    states = [expected_state(run, s, group) for s in run.sent]
    b = cq.backlog(store, life["topic"], group, tags="*", later=True, now_ms=run.broker["snapshot_ms"])
    assert b.in_flight["messages"] == states.count("in_flight")
    assert sum(b.in_flight["buckets"].values()) == b.in_flight["messages"] and b.in_flight["buckets"]["overdue"] == 0
    assert b.pop_retry.topic == life["pop_retry_topic"] and b.pop_retry.will_receive == states.count("retrying")
    assert b.will_receive == states.count("pending")
    assert b.will_receive_later == b.will_receive + b.pop_retry.will_receive + b.scheduled["will_receive"]


def test_pending_pops_are_what_the_pop_group_popped(run, store):
    """One row per pop of each message: the POP group's pops and acks, revived where the broker took them back."""
    life = run.broker["lifecycle"]
    rows = {(r["topic"], r["queue_id"], r["queue_offset"], r["pop_time"]): r for r in pending(store, "pops")}
    pops = {(x["topic"], x["queue_id"], x["queue_offset"], x["pop_time"]): x for x in run.received
            if x["group"] == life["pop_group"]}
    assert set(rows) == set(pops)
    for k, x in pops.items():
        due = x["pop_time"] + x["invisible_ms"]
        want = "acked" if x["result"] == "acked" else "in_flight" if due > run.broker["snapshot_ms"] else "revived"
        assert (rows[k]["status"], rows[k]["uniq_key"], rows[k]["due_at_ms"]) == (want, x["uniq_key"], due), k


def test_recalls_the_broker_took_and_refused(run):
    """Two recalls taken (timer messages due a minute later), one refused: its message had fired."""
    life = run.broker["lifecycle"]
    took = [r for r in life["recalls"] if r["ok"]]
    refused = [r for r in life["recalls"] if not r["ok"]]
    assert len(took) == 2 and all(r["deliver_ms"] - r["recall_ms"] > 30_000 for r in took)
    assert [r["keys"] for r in refused] == ["timer-0"] and "timestamp invalid" in refused[0]["error"]
    assert refused[0]["deliver_ms"] < refused[0]["recall_ms"]


def test_a_recalled_timer_message_never_arrives(run, store):
    """The drain ran past the recalled messages' due time (it waited for the kept ones, then 3 s past
    the recalled ones' second): no group received a recalled one, and why says so for every group,
    in words."""
    life = run.broker["lifecycle"]
    gone = recalled(run)
    assert not [r for r in run.received if r["uniq_key"] in gone]
    kept = [s for s in run.sent if s["keys"][0].startswith("recall-timer-") and s["uniq_key"] not in gone]
    drained = {r["uniq_key"] for r in run.received if r["group"] == "GID_LIFE_ALL" and r["phase"] == "drain"}
    assert kept and {s["uniq_key"] for s in kept} <= drained
    # the consumers still ran seconds after the recalled messages' due second
    assert life["recall_drain_end_ms"] > max(r["deliver_ms"] // 1000 * 1000 for r in life["recalls"] if r["ok"]) + 2000
    for s in run.sent:
        if s["uniq_key"] in gone:
            [p] = why_every_copy(store, life["topic"], "GID_LIFE_ALL", tags="*", msg_id=s["uniq_key"])
            assert str(p).startswith("state     RECALLED: the producer recalled it"), str(p)[:200]
            assert [c.role for c in p.copies] == ["timer", "timer_recall"]


def test_timer_files_agree_with_the_broker(run, store):
    """config/timercheck, timerlog/ and timerwheel against the timer topic and the sends: every timer
    record (messages, recall markers, POP checkpoints and acks) has its unit, due at its TIMER_OUT_MS;
    the recalls are delete units in their message's slot; the progress lies between the fired timer
    messages and the ones still due."""
    life = run.broker["lifecycle"]
    queue = store.consume_queue(cq.format.TIMER_TOPIC, 0)
    with cq.TimerFiles(run.store_path()) as timer:
        check, units = timer.checkpoint, timer.units()
        assert check.last_timer_queue_offset <= queue.max_offset
        assert check.flush_pos <= int(units["position"][-1]) + cq.format.TIMER_LOG_UNIT_SIZE
        for q in range(queue.min_offset, check.last_timer_queue_offset):
            m = store.commit_log.read_message(queue.unit(q)[0])
            [u] = timer.units_of(m.commit_log_offset)
            assert int(u["due_ms"]) == int(m.properties["TIMER_OUT_MS"]) and int(u["size_py"]) == m.store_size
            marker = "TIMER_DEL_UNIQKEY" in m.properties
            assert bool(int(u["magic"]) & cq.format.TIMER_MAGIC_DELETE) == marker, q
        timers = [s for s in run.sent if s.get("timer_delay_ms")]
        fired = [s["deliver_ms"] for s in timers if not due_after_copy(run, s["deliver_ms"])]
        due = [s["deliver_ms"] for s in timers if due_after_copy(run, s["deliver_ms"])]
        assert fired and due and max(fired) < check.last_read_time_ms < min(due) // 1000 * 1000
        took = [r for r in life["recalls"] if r["ok"]]
        # the recalled timers were sent together, but their due times can straddle a second:
        # each second's slot counts its own messages and recalls
        for second in {r["deliver_ms"] // 1000 for r in took}:
            slot = timer.wheel.slot(second * 1000)
            same = [s for s in timers if s["deliver_ms"] // 1000 == second]
            recalls = [r for r in took if r["deliver_ms"] // 1000 == second]
            assert slot["num"] == len(same) - len(recalls), second   # each message +1, each recall -1
