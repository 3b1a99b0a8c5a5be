"""rmqfilter against a real RocketMQ broker: the ``housekeeping`` scenario (docs/testing.md).

The broker deletes its expired CommitLog files (its admin command, ``fileReservedTime`` 0) and
then the ConsumeQueue files pointing into them, while rmqfilter reads its store in place
(docs/live.md#expiry): a consume with a cut taken before the deletion, one interrupted by it,
``rmqfilter tail`` running across it, and a Spark stream stopped before the deletion and
restarted from its checkpoint after it, finish without an exception, deliver only messages a
real consumer could have received (the queue, offset and ``UNIQ_KEY`` the send result gave),
and count every other unit of their cut as lost; ``cq.backlog`` reports the group's committed
offsets below the new minimums as ``expired``. The scenario starts a broker and reads while it
deletes: it runs once per ``make test``, in the pass under the compiled engines.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from broker_support import harness, read_during

import cq

pytestmark = [
    pytest.mark.broker,
    pytest.mark.skipif(bool(os.environ.get("RMQFILTER_PUREPYTHON")),
                       reason="the housekeeping scenario starts a broker: it runs once per make test, "
                              "in the pass under the compiled engines"),
]

TOPIC = harness.HOUSEKEEPING_TOPIC
GROUP, TAGS = harness.HOUSEKEEPING_GROUP
READER = "GID_HOUSEKEEPING_READER"      # tags "*": every unit of the cut is delivered or missing
RMQFILTER = Path(sys.executable).parent / "rmqfilter"


def units_in(cut) -> int:
    return sum(hi - lo for t, _, lo, hi in cut.queues if t == TOPIC)


def tail_until_accounted(proc, lines: list[str], total: int, lost_of, timeout: float = 60) -> None:
    """Lets ``tail`` run until what it printed and what it said it lost cover ``total`` units."""
    deadline = time.time() + timeout
    while len(lines) + lost_of() < total and time.time() < deadline and proc.poll() is None:
        time.sleep(0.2)
    time.sleep(1.0)                     # a unit counted twice would show up here
    if proc.poll() is None:
        proc.send_signal(signal.SIGINT)
    proc.wait(30)


#: What Spark says when a Python worker it started did not connect back within its fixed 10 s (make
#: test's broker runs beside the suite loaded the machine past that for a moment): not the source's
#: failure. The query then starts again from its checkpoint, as a user's would.
WORKER_LATE = "Python worker failed to connect back"


def stream_once(spark, root: Path, work: Path, trigger: dict) -> dict[int, int]:
    """A stream of every unit of the topic into parquet under ``work`` (its checkpoint there
    too), from the earliest offsets, 100 units a micro-batch; ``trigger`` as ``DataStreamWriter``
    takes it. With ``processingTime`` it is stopped after its first batch with rows. Returns
    the end offsets it committed. A query Spark failed because a Python worker started late
    (:data:`WORKER_LATE`) is started once more from its checkpoint."""
    try:
        return _stream_once(spark, root, work, trigger)
    except Exception as e:  # anything else is raised again
        if WORKER_LATE not in str(e):
            raise
        return _stream_once(spark, root, work, trigger)


def _stream_once(spark, root: Path, work: Path, trigger: dict) -> dict[int, int]:
    q = (spark.readStream.format("rocketmq").option("topic", TOPIC).option("startingOffsets", "earliest")
         .option("maxUnitsPerTrigger", "100").load(str(root))
         .selectExpr("queue_id", "queue_offset", "properties['UNIQ_KEY'] AS uniq")
         .writeStream.format("parquet").option("path", str(work / "out"))
         .option("checkpointLocation", str(work / "ck")).trigger(**trigger).start())
    try:
        if "availableNow" in trigger:
            q.awaitTermination(120)
        else:
            deadline = time.time() + 60
            while not any(p["numInputRows"] for p in q.recentProgress) and time.time() < deadline:
                time.sleep(0.2)
        assert q.exception() is None, q.exception()
    finally:
        q.stop()
    return committed_end(work / "ck")


def committed_end(checkpoint: Path) -> dict[int, int]:
    """The end offsets of the last micro-batch the stream committed (Spark's checkpoint:
    ``commits/<id>`` marks batch ``id`` done; ``offsets/<id>``'s last line holds its end)."""
    last = max(int(p.name) for p in (checkpoint / "commits").iterdir() if p.name.isdigit())
    end = json.loads((checkpoint / "offsets" / str(last)).read_text().splitlines()[-1])
    return {int(q): int(o) for q, o in end[TOPIC].items()}


@pytest.fixture(scope="module")
def hk(tmp_path_factory, spark):
    """Runs the scenario once per module: the reads below happen while the broker expires. Its
    set-up started in the background with the session (broker_support.read_during)."""
    seen: dict = {}
    errlog = tmp_path_factory.mktemp("tail") / "stderr.txt"
    streamed = tmp_path_factory.mktemp("stream")

    def lost_of() -> int:
        return sum(int(line.split(" unit(s) of queue ", 1)[0].split()[-1].replace(",", ""))
                   for line in errlog.read_text().splitlines() if " unit(s) of queue " in line)

    def during(root: Path, expire) -> None:
        before = cq.Store(str(root))
        interrupted = cq.Store(str(root))
        with open(errlog, "w") as err:
            # A tail from the earliest offsets; its stdout is read only after the deletion, so it
            # blocks on the full pipe in the middle of its first round while the broker deletes.
            proc = subprocess.Popen([str(RMQFILTER), "tail", str(root), "--topic", TOPIC, "--group", READER,
                                     "--tags", "*", "--from", "earliest", "--format", "jsonl",
                                     "--interval", "0.2"], stdout=subprocess.PIPE, stderr=err, text=True)
        try:
            seen["cut"] = before.cut(TOPIC)
            seen["cut_interrupted"] = interrupted.cut(TOPIC)
            first = stream_once(spark, root, streamed, {"processingTime": "200 milliseconds"})
            result = interrupted.consume(TOPIC, READER, tags="*", cut=seen["cut_interrupted"])
            messages = iter(result)
            ten = [next(messages) for _ in range(10)]
            time.sleep(3)                                  # the tail fills its pipe
            seen["min_after"] = {int(q): m for q, m in expire().items()}
            seen["interrupted"] = (ten + list(messages), result.stats)
            # the stream restarted from its checkpoint, which is now below the queues' minimums
            rest = stream_once(spark, root, streamed, {"availableNow": True})
            rows = spark.read.parquet(str(streamed / "out")).collect()
            seen["stream"] = (first, rest, [(r.queue_id, r.queue_offset, r.uniq) for r in rows])
            for name, group, tags in (("before", READER, "*"), ("before_group", GROUP, TAGS)):
                result = before.consume(TOPIC, group, tags=tags, cut=seen["cut"])
                seen[name] = (list(result), result.stats)
            fresh = cq.Store(str(root))
            try:
                seen["backlog"] = cq.backlog(fresh, TOPIC, GROUP, tags=TAGS)
            finally:
                fresh.close()
            lines: list[str] = []
            reader = threading.Thread(target=lambda: lines.extend(proc.stdout), daemon=True)
            reader.start()
            tail_until_accounted(proc, lines, units_in(seen["cut"]), lost_of)
            reader.join(10)
            seen["tail"] = (proc.returncode, [json.loads(x) for x in lines], errlog.read_text(), lost_of())
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
            before.close()
            interrupted.close()

    seen["run"] = read_during("housekeeping", during)
    return seen


def sent_units(run) -> dict[tuple[int, int], dict]:
    return {(s["queue_id"], s["queue_offset"]): s for s in run.sent if s["outcome"] == "sent"}


def assert_received_as_sent(run, delivered, tags=None) -> None:
    sent = sent_units(run)
    for m in delivered:
        s = sent.get((m.queue_id, m.queue_offset))
        assert s is not None and s["uniq_key"] == m.properties["UNIQ_KEY"], (m.queue_id, m.queue_offset)
        assert tags is None or s["tags"] in tags, (m.queue_id, m.queue_offset, s["tags"])


def test_the_broker_expired_files_during_the_reads(hk):
    run, minimums = hk["run"], hk["min_after"]
    before = {int(q): m for q, m in run.broker["housekeeping"]["min_offsets_before"].items()}
    assert all(minimums[q] > before[q] for q in before)
    assert hk["cut"].commit_log_min < hk["cut"].commit_log_end
    assert min(p.name for p in (run.store_path() / "commitlog").iterdir()) != \
        run.broker["housekeeping"]["first_commitlog_file_before"]


@pytest.mark.parametrize("name", ["before", "interrupted"])
def test_consume_across_the_expiry_counts_every_unit_of_its_cut(hk, name):
    delivered, stats = hk[name]
    cut = hk["cut" if name == "before" else "cut_interrupted"]
    assert_received_as_sent(hk["run"], delivered)
    assert len({(m.queue_id, m.queue_offset) for m in delivered}) == len(delivered)
    assert stats.delivered == len(delivered)
    assert len(delivered) + stats.commit_log_missing == units_in(cut)
    # Every unit at or above the new minimum still has its record: delivered.
    survivors = {(q, o) for t, q, lo, hi in cut.queues for o in range(max(lo, hk["min_after"][q]), hi)}
    assert survivors <= {(m.queue_id, m.queue_offset) for m in delivered}
    if name == "before":
        assert stats.commit_log_missing > 0        # the cut was taken before the deletion


def test_tag_group_across_the_expiry_gets_what_its_consumer_could(hk):
    delivered, stats = hk["before_group"]
    wanted = {t.strip() for t in TAGS.split("||")}
    assert_received_as_sent(hk["run"], delivered, tags=wanted)
    sent = sent_units(hk["run"])
    survivors = {(q, o) for t, q, lo, hi in hk["cut"].queues for o in range(max(lo, hk["min_after"][q]), hi)
                 if sent[(q, o)]["tags"] in wanted}
    assert survivors == {(m.queue_id, m.queue_offset) for m in delivered}
    assert stats.commit_log_missing > 0


def test_backlog_reports_committed_offsets_below_the_minimum_as_expired(hk):
    run, backlog = hk["run"], hk["backlog"]
    committed = {p["queue_id"]: p["consumer_offset"] for p in run.group(GROUP)["progress"]}
    assert sorted(q.queue_id for q in backlog.queues) == sorted(committed)
    lost = 0
    for q in backlog.queues:
        assert q.committed_offset == committed[q.queue_id]
        assert q.min_offset == hk["min_after"][q.queue_id]           # the admin API's minimum
        assert q.committed_offset < q.min_offset, "the scenario expires past the committed offsets"
        assert q.expired == q.min_offset - q.committed_offset
        lost += q.expired
    assert backlog.expired == lost > 0


def test_tail_across_the_expiry_exits_cleanly_and_reports_lost_units(hk):
    code, printed, stderr, lost = hk["tail"]
    assert code == 130 and "Traceback" not in stderr, stderr[-2000:]
    sent = sent_units(hk["run"])
    keys = [(r["queue_id"], r["queue_offset"]) for r in printed]
    assert len(set(keys)) == len(keys)
    for r in printed:
        assert sent[(r["queue_id"], r["queue_offset"])]["uniq_key"] == r["properties"]["UNIQ_KEY"], r
    assert lost > 0, stderr[-2000:]
    assert len(printed) + lost == units_in(hk["cut"])


@pytest.mark.spark
def test_stream_restarted_past_the_expiry_reads_the_rest_exactly_once(hk):
    """Stopped after its first batch, restarted from its checkpoint once the broker expired the
    units it had not read: it goes on from the new minimums, without an exception, and gives
    each unit it could still read once, as a consumer that fell behind the expiry gets them."""
    first_end, final_end, rows = hk["stream"]
    sent = sent_units(hk["run"])
    keys = [(q, o) for q, o, _ in rows]
    assert len(set(keys)) == len(keys)
    for q, o, uniq in rows:
        assert sent[(q, o)]["uniq_key"] == uniq, (q, o)
    want, lost = set(), 0
    for t, q, lo, hi in hk["cut"].queues:
        assert final_end[q] == hi
        minimum = hk["min_after"][q]
        want |= {(q, o) for o in range(lo, first_end[q])}
        want |= {(q, o) for o in range(max(first_end[q], minimum), hi)}
        lost += max(0, minimum - first_end[q])
    assert set(keys) == want
    assert lost > 0 and len(rows) + lost == units_in(hk["cut"])
