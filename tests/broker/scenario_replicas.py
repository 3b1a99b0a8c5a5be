"""Scenario ``replicas``: a master and its slave of one broker name (classic HA), the master killed
mid-write, consumers then reading from the slave (docs/testing.md, docs/reading.md#replicas).

The master (``broker-r``, ``brokerId`` 0, ``ASYNC_MASTER``) runs in its own JVM so it can be
killed; the slave (``brokerId`` 1, ``brokerRole=SLAVE``, same ``brokerName``) copies it over HA on
loopback (``haListenPort``; the NameServer gives the slave its master's HA address). Both filter by
property and keep bitmaps; ``slaveReadEnable=true``, without which a slave refuses every pull.
Steps:

1. the topic is created on the master; the slave copies it (its SlaveSynchronize);
2. every group subscribes once and stops before anything is sent, so its SQL92 filter is registered
   on both brokers (the consumers heartbeat to every broker of the route) when the messages come;
3. a first batch is sent through the master, then a send loop runs and the master is SIGKILLed in the
   middle of it: what it wrote but had not copied yet is its tail; its store is copied as the kill
   left it (``stores/master``);
4. the groups subscribe again: with the master gone, the clients pull from the slave (and commit
   there); they drain, stop, and the slave is stopped cleanly and copied (``stores/slave``).

``broker.json`` gets ``replicas`` = ``{topic, broker, master, slave, loop_sent, loop_failed}``.
"""
from __future__ import annotations

import json
import random
import shutil
import sys
import time

REPLICAS_TOPIC = "ReplicaTopic"
REPLICAS_BROKER = "broker-r"
REPLICAS_SLAVE = "broker-r-slave"       # the harness's name for the slave (its brokerName is REPLICAS_BROKER)
# Groups over both the batch (filter_messages' properties) and the loop's messages (seq, mod, tags
# TagA/TagB/TagC): SQL92 groups of both kinds of property, tag groups, the star.
REPLICAS_GROUPS = {
    "GID_REP_SQL_INT": ("SQL92", "a > 5 AND a <= 40"),
    "GID_REP_SQL_MOD": ("SQL92", "mod > 3 OR TAGS IN ('TagB')"),
    "GID_REP_SQL_STR": ("SQL92", "region IN ('eu', 'us') AND color <> 'red'"),
    "GID_REP_TAG_OR": ("TAG", "TagA || TagB"),
    "GID_REP_TAG_C": ("TAG", "TagC"),
    "GID_REP_STAR": ("TAG", "*"),
}
# slaveReadEnable: a slave without it rejects every pull ("system busy"), master or no master
FILTER_SETTINGS = {"enablePropertyFilter": "true", "enableCalcFilterBitMap": "true", "enableConsumeQueueExt": "true",
                   "slaveReadEnable": "true"}


def _wait(run, what: str, done, timeout_s: float) -> None:
    deadline = time.time() + timeout_s
    while not done():
        if time.time() > deadline:
            raise run.HarnessError(f"replicas: {what} did not happen in {timeout_s:.0f} s")
        time.sleep(0.3)


def _has_topic(root) -> bool:
    path = root / "config" / "topics.json"
    try:
        return REPLICAS_TOPIC in json.loads(path.read_text()).get("topicConfigTable", {})
    except (OSError, ValueError):
        return False


def _drained(h, group: str) -> bool:
    """Whether the slave says ``group`` committed every queue's end (the admin's consume stats, which
    go to the slave once the master is gone)."""
    rows = [r for r in h.client("progress", group=group)["progress"] if r["topic"] == REPLICAS_TOPIC]
    return len(rows) == 3 and all(r["consumer_offset"] == r["broker_offset"] for r in rows)


def scenario_replicas(h) -> None:
    """The scenario (module docstring)."""
    run = sys.modules[type(h).__module__]      # the harness module (run.py, as a script or imported)
    h.start_namesrv()
    h.add_broker(REPLICAS_BROKER, own_jvm=True, **FILTER_SETTINGS)
    h.start_broker(REPLICAS_BROKER)
    h.add_broker(REPLICAS_SLAVE, brokerName=REPLICAS_BROKER, brokerId=1, brokerRole="SLAVE", **FILTER_SETTINGS)
    h.start_broker(REPLICAS_SLAVE)
    h.start_client()
    # on both: the slave would copy the master's topics only a minute after it started (SlaveSynchronize)
    h.client("wait_brokers", names=[REPLICAS_BROKER])
    h.topics[REPLICAS_TOPIC] = []
    h.client("create_topic", topic=REPLICAS_TOPIC, queues=3, attributes=None,
             brokers=[b["addr"] for b in h.brokers.values()])
    _wait(run, "the slave's copy of the topic", lambda: _has_topic(h.store_root(REPLICAS_SLAVE)), 30)
    for g, (type_, expression) in REPLICAS_GROUPS.items():
        h.subscribe(g, REPLICAS_TOPIC, type_, expression, "register")
    time.sleep(3)           # every SQL92 filter registered on both brokers (heartbeats every second)
    h.unsubscribe(list(REPLICAS_GROUPS))
    rng = random.Random(39)
    h.send(run.filter_messages(rng, REPLICAS_TOPIC, 0, 400))
    h.client("send_loop_start", out=h.sent_path, topic=REPLICAS_TOPIC, prefix="loop",
             tags=["TagA", "TagB", "TagC"], pause_ms=0, threads=2)
    time.sleep(1.5)
    h.kill_broker(REPLICAS_BROKER)              # mid-write: the loop keeps sending
    killed_ms = int(time.time() * 1000)
    time.sleep(1.0)
    loop = h.client("send_loop_stop")
    h.copy_store(REPLICAS_BROKER, "master")
    for g, (type_, expression) in REPLICAS_GROUPS.items():
        h.subscribe(g, REPLICAS_TOPIC, type_, expression, "slave")
    # drained as the slave's admin answers (the client's own drain check asks the master for max offsets)
    _wait(run, "the groups' drain of the slave", lambda: all(_drained(h, g) for g in REPLICAS_GROUPS), 240)
    h.unsubscribe(list(REPLICAS_GROUPS))
    h.record_progress()     # each group's progress as the slave's admin gives it
    h.snapshot_ms = int(time.time() * 1000)
    h.client("broker_stop", name=REPLICAS_BROKER, timeout=180)    # the slave: the client JVM's broker-r
    h.copy_store(REPLICAS_SLAVE, "slave")
    h.copied_ms = int(time.time() * 1000)
    h.brokers[REPLICAS_BROKER]["store"] = "stores/master"
    h.brokers[REPLICAS_SLAVE]["store"] = "stores/slave"
    h.extra["replicas"] = {"topic": REPLICAS_TOPIC, "broker": REPLICAS_BROKER, "master": "stores/master",
                           "slave": "stores/slave", "killed_ms": killed_ms,
                           "loop_sent": loop.get("sent"), "loop_failed": loop.get("failed")}
    for name in (REPLICAS_BROKER, REPLICAS_SLAVE):     # copied above; run() removes broker-a's only
        shutil.rmtree(h.store_root(name), ignore_errors=True)
