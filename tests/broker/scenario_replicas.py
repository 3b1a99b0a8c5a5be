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


def _drained(h, group: str, topic: str = REPLICAS_TOPIC, queues: int = 3) -> bool:
    """Whether the broker serving ``topic`` says ``group`` committed every queue's end (the admin's
    consume stats, which go to the slave once the master is gone)."""
    rows = [r for r in h.client("progress", group=group)["progress"] if r["topic"] == topic]
    return len(rows) == queues and all(r["consumer_offset"] == r["broker_offset"] for r in rows)


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


CONTROLLER_BROKER = "broker-c"
CONTROLLER_SECOND = "broker-c-2"       # the harness's name for the second replica (brokerName CONTROLLER_BROKER)
CONTROLLER_TOPIC = "ControllerTopic"
CONTROLLER_GROUPS = {g: REPLICAS_GROUPS[g] for g in ("GID_REP_SQL_MOD", "GID_REP_TAG_OR", "GID_REP_STAR")}


def _commit_log_end(root) -> int:
    """The recovered CommitLog end of a live store, as rmqfilter reads it (docs/live.md)."""
    import cq  # lazy: the harness imports nothing of rmqfilter but here
    try:
        store = cq.Store(root)
    except (cq.StoreFormatError, OSError):      # its files not made yet
        return -1
    try:   # -1 until the replica dispatched the topic at all
        return store.cut(CONTROLLER_TOPIC).commit_log_end if CONTROLLER_TOPIC in store.topics() else -1
    except (cq.StoreFormatError, OSError, KeyError):
        return -1
    finally:
        store.close()


def scenario_replicas_controller(h) -> None:
    """Controller mode (docs/reading.md#replicas): a one-node controller (DLedger) in the client's JVM,
    two brokers of one name with ``enableControllerMode`` (the first registered is elected master,
    in its own JVM; the second its slave), a batch sent and copied to the slave, then a send loop
    during which the master is SIGKILLed: the controller elects the slave (epoch 2), the loop's
    sends go to it, and the groups then read every queue from it. Stores: ``stores/old`` (the
    killed master, as the kill left it) and ``stores/new`` (the elected one, after a clean stop).
    ``broker.json`` gets ``replicas_controller`` = ``{topic, broker, old, new, loop_sent, loop_failed}``."""
    run = sys.modules[type(h).__module__]
    h.start_namesrv()
    port, raft_port = run.free_port(), run.free_port()
    home = h.work / "controller"
    home.mkdir()
    h.client("controller_start", port=port, raft_port=raft_port, home=str(home), timeout=120)
    settings = {**FILTER_SETTINGS, "enableControllerMode": "true",
                # the DLedger controller serves brokers on its raft group's address
                "controllerAddr": f"{run.LOOPBACK}:{raft_port}",
                "controllerHeartBeatTimeoutMills": 3000, "brokerHeartbeatInterval": 1000,
                "syncBrokerMetadataPeriod": 1000, "checkSyncStateSetPeriod": 1000}
    h.add_broker(CONTROLLER_BROKER, own_jvm=True, **settings)
    h.start_broker(CONTROLLER_BROKER)
    h.add_broker(CONTROLLER_SECOND, brokerName=CONTROLLER_BROKER, **settings)
    h.start_broker(CONTROLLER_SECOND)
    h.start_client()
    h.client("wait_brokers", names=[CONTROLLER_BROKER])
    h.topics[CONTROLLER_TOPIC] = []
    h.client("create_topic", topic=CONTROLLER_TOPIC, queues=2, attributes=None,
             brokers=[b["addr"] for b in h.brokers.values()])
    for g, (type_, expression) in CONTROLLER_GROUPS.items():
        h.subscribe(g, CONTROLLER_TOPIC, type_, expression, "register")
    time.sleep(3)
    h.unsubscribe(list(CONTROLLER_GROUPS))
    batch = run.filter_messages(random.Random(40), CONTROLLER_TOPIC, 0, 300)
    _wait(run, "the master's election", lambda: _sent(h, batch), 60)
    old_root, new_root = h.store_root(CONTROLLER_BROKER), h.store_root(CONTROLLER_SECOND)
    _wait(run, "the slave's copy of the batch",
          lambda: _commit_log_end(new_root) >= _commit_log_end(old_root) > 0, 60)
    h.client("send_loop_start", out=h.sent_path, topic=CONTROLLER_TOPIC, prefix="loop",
             tags=["TagA", "TagB", "TagC"], pause_ms=2, threads=2)
    time.sleep(1.5)
    h.kill_broker(CONTROLLER_BROKER)
    before = h.client("send_loop_count")["sent"]
    _wait(run, "the election of the slave", lambda: h.client("send_loop_count")["sent"] > before + 200, 60)
    loop = h.client("send_loop_stop")
    h.copy_store(CONTROLLER_BROKER, "old")
    for g, (type_, expression) in CONTROLLER_GROUPS.items():
        h.subscribe(g, CONTROLLER_TOPIC, type_, expression, "after")
    _wait(run, "the groups' drain", lambda: all(_drained(h, g, CONTROLLER_TOPIC, 2) for g in CONTROLLER_GROUPS), 240)
    h.unsubscribe(list(CONTROLLER_GROUPS))
    h.record_progress()
    h.snapshot_ms = int(time.time() * 1000)
    h.client("broker_stop", name=CONTROLLER_BROKER, timeout=180)    # the elected one, in the client's JVM
    h.copy_store(CONTROLLER_SECOND, "new")
    h.copied_ms = int(time.time() * 1000)
    h.brokers[CONTROLLER_BROKER]["store"] = "stores/old"
    h.brokers[CONTROLLER_SECOND]["store"] = "stores/new"
    h.extra["replicas_controller"] = {"topic": CONTROLLER_TOPIC, "broker": CONTROLLER_BROKER, "old": "stores/old",
                                      "new": "stores/new", "loop_sent": loop.get("sent"),
                                      "loop_failed": loop.get("failed")}
    for name in (CONTROLLER_BROKER, CONTROLLER_SECOND):
        shutil.rmtree(h.store_root(name), ignore_errors=True)


def _sent(h, batch: list[dict]) -> bool:
    """Sends ``batch``; False while the brokers refuse it (no master elected yet)."""
    try:
        h.send(batch)
        return True
    except sys.modules[type(h).__module__].HarnessError:
        return False
