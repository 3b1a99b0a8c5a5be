"""The ``trace`` scenario: producers and consumers with message trace on, writing to the broker's trace
topic (``traceTopicEnable=true``: ``RMQ_SYS_TRACE_TOPIC``; docs/formats.md#trace-records, docs/trace.md).

One broker. The client's producer, its transaction producer and three push consumers run with
``enableTrace``: a tag group receiving everything, a SQL92 group, and a group that fails
(``RECONSUME_LATER``) every message with ``fail=true``, so those come back through its ``%RETRY%`` topic
once (``max_reconsume_times`` 1) and then go to its DLQ. Plain messages are sent (every fifth with
``fail=true``), then two transactional ones (one committed, one rolled back), then two timer messages
due a minute later (the timer wheel on, ``recallMessageEnable=true``), the first recalled at once (the
client's recall hook writes a ``Recall`` record when the JVM property
``com.rocketmq.recall.default.trace.enable`` is true, which the harness sets with trace). Once every group has
received what it will and the failing group's retries came and failed, the consumers stop (their trace
dispatchers flush), the harness waits until the trace topic has not grown for longer than the
dispatchers' flush interval (5 s), and the store is copied. Each received line carries ``received_ms``
(the trace's ``SubBefore`` is stamped just before the listener). ``broker.json`` gets ``trace`` =
``{topic, trace_topic, fail_group, max_reconsume_times, broker_addr, recalls}`` (``recalls``: the
recall asked, with the message's ``UNIQ_KEY`` and whether the broker took it).
"""
from __future__ import annotations

import json
import time

TRACE_TOPIC = "RMQ_SYS_TRACE_TOPIC"
TOPIC = "TracedTopic"
FAIL_GROUP = "GID_TRACE_FAIL"
GROUPS = {
    "GID_TRACE_ALL": ("TAG", "*"),
    "GID_TRACE_SQL": ("SQL92", "a > 5"),
    FAIL_GROUP: ("TAG", "*"),
}
MAX_RECONSUME = 1
#: The timer messages' delay: still scheduled when the store is copied.
TIMER_DELAY_MS = 60_000
#: AsyncTraceDispatcher's flushTraceInterval (ms): a context waits at most this long before it is sent.
FLUSH_INTERVAL_MS = 5000


def traced_messages(prefix: str, n: int) -> list[dict]:
    """``n`` messages with a key, tags TagA/TagB or none, ``a`` from 0 to 9, every fifth ``fail=true``."""
    out = []
    for i in range(n):
        props = {"a": str(i % 10)}
        if i % 5 == 0:
            props["fail"] = "true"
        out.append({"topic": TOPIC, "tags": ["TagA", "TagB", None][i % 3], "keys": [f"{prefix}-{i}"],
                    "properties": props, "body": f"traced message {prefix} {i}"})
    return out


def _received(h) -> list[dict]:
    with open(h.received_path, encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def _wait(what: str, done, timeout_s: float = 90) -> None:
    deadline = time.time() + timeout_s
    while not done():
        if time.time() > deadline:
            raise RuntimeError(f"trace: {what} did not happen in {timeout_s:.0f} s")
        time.sleep(0.3)


def _trace_end(h) -> int:
    return sum(r["max_offset"] for r in h.client("topic_stats", topic=TRACE_TOPIC)["queues"])


def scenario_trace(h) -> None:
    """See the module docstring."""
    h.start_namesrv()
    h.add_broker("broker-a", enablePropertyFilter="true", traceTopicEnable="true", flushConsumerOffsetInterval=500,
                 timerWheelEnable="true", recallMessageEnable="true")
    h.start_broker("broker-a")
    h.client("init", namesrv=h.namesrv, trace=True)     # start_client, with message trace on every client
    h.create_topic(TOPIC, 2)
    for g, (type_, expression) in GROUPS.items():
        tuning = {"fail_property": "fail", "max_reconsume_times": MAX_RECONSUME} if g == FAIL_GROUP else {}
        h.subscribe(g, TOPIC, type_, expression, "live", **tuning)
    time.sleep(3)              # the SQL filter registered before the first message
    plain = traced_messages("plain", 20)
    h.send(plain)
    txs = traced_messages("tx", 2)
    for m, decision in zip(txs, ("commit", "rollback")):
        m["tx"] = decision
        m["properties"].pop("fail", None)
    h.client("tx_send", out=h.sent_path, messages=txs)
    timers = traced_messages("timer", 2)
    for m in timers:
        m["properties"].pop("fail", None)
        m["timer_delay_ms"] = TIMER_DELAY_MS
    h.send(timers)
    with open(h.sent_path, encoding="utf-8") as f:
        first = next(s for s in map(json.loads, f) if s["keys"] == ["timer-0"])
    answers = h.client("recall", topic=TOPIC, handles=[first["recall_handle"]])["recalls"]
    recalls = [{"uniq_key": first["uniq_key"], "ok": a["ok"], "recall_ms": a["recall_ms"]} for a in answers]
    if not all(r["ok"] for r in recalls):
        raise RuntimeError(f"trace: the broker refused the recall: {answers}")
    fails = {m["keys"][0] for m in plain if m["properties"].get("fail")}
    _wait("the failing group's retries", lambda: fails <= {
        r["keys"] for r in _received(h) if r["group"] == FAIL_GROUP and r["reconsume_times"] == MAX_RECONSUME})
    h.drain(list(GROUPS))
    h.unsubscribe(list(GROUPS))   # each consumer's trace dispatcher flushes as it shuts down
    last, since = _trace_end(h), time.time()
    while time.time() - since < FLUSH_INTERVAL_MS / 1000 + 2:   # the producers' dispatchers: by their interval
        time.sleep(0.5)
        now = _trace_end(h)
        if now != last:
            last, since = now, time.time()
    h.snapshot(restart=False)
    h.extra["trace"] = {"topic": TOPIC, "trace_topic": TRACE_TOPIC, "fail_group": FAIL_GROUP,
                        "max_reconsume_times": MAX_RECONSUME, "broker_addr": h.brokers["broker-a"]["addr"],
                        "recalls": recalls}
