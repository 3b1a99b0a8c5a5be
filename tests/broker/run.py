#!/usr/bin/env python3
"""Run a scenario against a real RocketMQ broker: ``python tests/broker/run.py SCENARIO --out DIR``.

The Maven project beside this file (``pom.xml``, ``src/``) builds against one released RocketMQ
per run (``--rocketmq VERSION``; the pinned ones are :data:`RELEASES`, each built into its own
``target/<version>/``) and holds
three small mains: ``Namesrv`` and ``Broker`` (each in its own JVM, so a broker can be killed
while the clients go on) and ``Client`` (RocketMQ's producer, push consumers and admin API,
driven by JSON commands on stdin). This driver builds it when its sources changed, picks free
loopback ports, writes each broker's properties file, runs the scenario and leaves in DIR:

- ``stores/<name>/``: each broker's store root, copied after a clean shutdown (``crash`` also
  leaves ``stores/<name>-killed/``, copied as the SIGKILL left it);
- ``sent.jsonl``, ``received.jsonl``: one line per send, one per message a consumer received
  (``phase`` ``live`` or ``drain``);
- ``broker.json``: the RocketMQ version, when the stores were copied, the brokers, and each
  group with its subscription and the admin API's progress per queue at the copy.

Every process it starts is stopped (SIGTERM to its process group, SIGKILL after a grace time),
also on errors and at interpreter exit. docs/testing.md describes the scenarios and how to add one.
"""
from __future__ import annotations

import argparse
import atexit
import contextlib
import fcntl
import hashlib
import importlib
import json
import os
import random
import re
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

if __name__ == "__main__":  # a scenario module's ``from run import ...`` gets this module, not a second copy
    sys.modules.setdefault("run", sys.modules[__name__])

HERE = Path(__file__).resolve().parent
TARGET = HERE / "target"
# The RocketMQ releases the harness pins (docs/testing.md#releases): 5.3.3, the release rmqfilter
# was first held against, and the newest 5.x release Maven Central serves. `run.py build` (and so
# `make harness`) builds every one; a run picks one with --rocketmq (default: the first).
RELEASES = ("5.3.3", "5.5.1")
DEFAULT_RELEASE = RELEASES[0]
# Maven Central serves 5.5.1's server jars (broker, store, common, remoting, controller,
# tiered-store) but not its client-side ones (client, namesrv, tools, srvutil, filter, auth), which
# the 5.5.1 broker's own pom asks for: a 5.5.1 run takes those from 5.5.0, the newest release that
# has them (pom.xml's rocketmq.client.version; docs/testing.md#releases).
CLIENT_RELEASE = {"5.5.1": "5.5.0"}
# 5.5.1's server jars moved to fastjson2 alone; 5.5.0's client-side jars (and the harness) still
# need fastjson 1, at 5.5.0's own version (pom.xml's client-fastjson profile).
CLIENT_FASTJSON = {"5.5.1": "1.2.83"}
LOOPBACK = "127.0.0.1"
# A broker in its own JVM gets the direct memory the client's JVM gives the brokers it hosts: with 256 MiB,
# a 5.5.1 broker on RocksDB queues failed pops with "Cannot reserve ... direct buffer memory" (seed 17798)
JVM_HEAP = ["-Xms64m", "-Xmx384m", "-XX:MaxDirectMemorySize=768m", "-XX:+UseSerialGC"]
# The client's JVM also hosts the NameServer and the brokers that are never killed (Harness.spawn).
CLIENT_JVM_HEAP = ["-Xms64m", "-Xmx1g", "-XX:MaxDirectMemorySize=768m", "-XX:+UseSerialGC"]
QUICK_START = ["-XX:TieredStopAtLevel=1"]  # C1 only: starts faster; not for the throughput scenario
SCENARIOS = ("filters", "crash", "live", "housekeeping", "throughput", "modes", "cluster", "lifecycle", "rocksdb",
             "batch", "newstore", "random", "compaction", "tiered", "replicas", "replicas_controller", "trace")


class HarnessError(RuntimeError):
    """The harness could not run (no Java/Maven, a build or start-up failure, a timeout)."""


def rocketmq_version(version: str | None = None) -> str:
    """The release a run builds against: ``version`` (a Maven version of RocketMQ, e.g. ``5.5.1``)
    or :data:`DEFAULT_RELEASE`."""
    version = version or DEFAULT_RELEASE
    if not all(part.isdigit() for part in version.split(".")) or version.count(".") != 2:
        raise HarnessError(f"--rocketmq {version!r}: a release is three dot-separated numbers, e.g. {RELEASES[-1]}")
    return version


def client_release(version: str | None = None) -> str:
    """The release of a run's client-side jars (:data:`CLIENT_RELEASE`; the run's own release elsewhere)."""
    version = rocketmq_version(version)
    return CLIENT_RELEASE.get(version, version)


def target(version: str | None = None) -> Path:
    """The release's own Maven build directory (``target/<version>/``): builds of different
    releases live side by side, so runs on both can go on at once."""
    return TARGET / rocketmq_version(version)


def source_hash(version: str | None = None) -> str:
    """Hash of everything that decides a run: the release, the pom, the Java sources, this driver and
    the scenarios kept in their own modules (``scenario_<name>.py``)."""
    h = hashlib.sha256()
    h.update(f"{rocketmq_version(version)}/{client_release(version)}".encode())
    files = [HERE / "pom.xml", Path(__file__).resolve(), *sorted(HERE.glob("scenario_*.py")),
             *sorted((HERE / "src").rglob("*.java"))]
    for f in files:
        h.update(str(f.relative_to(HERE)).encode())
        h.update(f.read_bytes())
    return h.hexdigest()[:16]


def missing_tools() -> list[str]:
    return [tool for tool in ("java", "mvn") if shutil.which(tool) is None]


def build(version: str | None = None) -> None:
    """``mvn package`` of the harness against one release into :func:`target`, when the pom or a
    Java source changed since that release's last build (hash stamp)."""
    missing = missing_tools()
    if missing:
        raise HarnessError(f"the broker harness needs Java 17 and Maven on PATH; missing: {', '.join(missing)}")
    version = rocketmq_version(version)
    out = target(version)
    stamp = out / ".harness-stamp"
    client = client_release(version)
    h = hashlib.sha256(f"{version}/{client}".encode())
    for f in [HERE / "pom.xml", *sorted((HERE / "src").rglob("*.java"))]:
        h.update(f.read_bytes())
    want = h.hexdigest()
    if stamp.exists() and stamp.read_text() == want and (out / "lib").is_dir():
        return
    out.mkdir(parents=True, exist_ok=True)
    with open(out / ".build.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # make test's two passes may both get here: one Maven build
        if stamp.exists() and stamp.read_text() == want and (out / "lib").is_dir():
            return
        shutil.rmtree(out / "lib", ignore_errors=True)   # no jar of an earlier build stays on the classpath
        proc = subprocess.run(["mvn", "-q", "-B", f"-Drocketmq.version={version}",
                               f"-Drocketmq.client.version={client}",
                               *([f"-Dharness.fastjson={CLIENT_FASTJSON[version]}"] if version in CLIENT_FASTJSON else []),
                               "package"], cwd=HERE,
                              capture_output=True, text=True, check=False)
        if proc.returncode != 0:
            raise HarnessError(f"mvn package against RocketMQ {version} failed in {HERE}:\n"
                               f"{proc.stdout[-4000:]}\n{proc.stderr[-4000:]}")
        stamp.write_text(want)


def classpath(version: str | None = None) -> str:
    out = target(version)
    return f"{out / 'classes'}{os.pathsep}{out / 'lib' / '*'}"


def _port_free(port: int) -> bool:
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((LOOPBACK, port))
        except OSError:
            return False
    return True


def _listen_ports() -> tuple[int, int]:
    """The ports ``[lo, hi)`` the harness's servers listen on: below the kernel's ephemeral range
    (``ip_local_port_range``, whence every outgoing connection on the machine takes its local port),
    so no connection can take a port between the check and the server's bind. A broker that lost its
    port that way (matrix seed 778808, beside other tests) failed its start."""
    try:
        low = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        low = 32768
    return (10000, low) if low > 12000 else (max(low, 61000), 65000)


def free_port(span: tuple[int, ...] = (0,)) -> int:
    """A port P with P+d free on loopback for every d in span (a broker uses P-2, P and P+1), outside
    the ephemeral range (:func:`_listen_ports`)."""
    rng = random.Random()
    lo, hi = _listen_ports()
    for _ in range(500):
        port = rng.randrange(lo + 2, hi - 2)
        if all(_port_free(port + d) for d in span):
            return port
    raise HarnessError("no free loopback port found")


# Every process any Harness started, so that interpreter exit stops the ones still running.
_LIVE: set[subprocess.Popen] = set()


def _stop(proc: subprocess.Popen, grace: float = 60.0) -> None:
    if proc.poll() is None:
        try:
            os.killpg(proc.pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
        try:
            proc.wait(grace)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    _LIVE.discard(proc)


@atexit.register
def _stop_all() -> None:
    for proc in list(_LIVE):
        if proc.poll() is None:
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            proc.wait()
        _LIVE.discard(proc)


class Client:
    """The Java client JVM: one JSON command per line in, one JSON answer per line out.

    It also hosts the scenario's NameServer and its brokers, except those added with
    ``own_jvm=True`` (the ones a scenario kills): one JVM to start and warm up instead of one per
    server (docs/testing.md#processes)."""

    def __init__(self, harness: Harness):
        self.proc = harness.spawn("client", ["rmqfilter.harness.Client"], stdin=subprocess.PIPE,
                                  heap=CLIENT_JVM_HEAP)
        self.stray_log = harness.logs / "client-stdout.log"
        self.work = harness.work

    def __call__(self, cmd: str, timeout: float = 600.0, **args) -> dict:
        started = time.time()
        self.proc.stdin.write(json.dumps({"cmd": cmd, **args}) + "\n")
        self.proc.stdin.flush()
        answer: list[str | None] = [None]
        stray: list[str] = []

        def read():
            # an answer is one JSON object per line; a line that is not one (a JVM warning or native
            # code writing to the JVM's stdout: matrix seed 325541 failed on one) is kept aside, never parsed
            while (line := self.proc.stdout.readline()) and not line.lstrip().startswith("{"):
                stray.append(line)
            answer[0] = line

        reader = threading.Thread(target=read, daemon=True)
        reader.start()
        reader.join(timeout)
        if stray:
            with open(self.stray_log, "a", encoding="utf-8") as f:
                f.write(f"-- before the answer to {cmd!r}:\n{''.join(stray)}")
        if reader.is_alive() or not answer[0]:
            crash = jvm_crash(self.work, self.proc)
            raise HarnessError(f"client command {cmd!r}: " + (crash or f"no answer (timeout {timeout:.0f} s or client died)"))
        try:
            reply = json.loads(answer[0])
        except ValueError:
            raise HarnessError(f"client command {cmd!r}: the answer is not JSON: {answer[0][:300]!r}") from None
        if os.environ.get("HARNESS_VERBOSE"):
            print(f"[{time.strftime('%H:%M:%S')}] {cmd} {time.time() - started:.1f} s", file=sys.stderr)
        if not reply.pop("ok"):
            raise HarnessError(f"client command {cmd!r} failed: {reply['error']}")
        return reply


#: The start of :func:`jvm_crash`'s message: the judge itself died (tests/broker/matrix.py runs such a seed again).
JVM_CRASHED = "the JVM crashed in native code"
#: What a broker logs (transaction.log) when it could not write its own transaction op record: the
#: commits and rollbacks in it are lost, its store no longer holds what the producer decided.
LOST_OP_WRITE = re.compile(r"Transaction (?:batch )?op message write failed.*")
BROKER_LOST_WRITES = "the broker failed to write its own records"


def jvm_crash(work: Path, proc: subprocess.Popen, wait_s: float = 30.0) -> str | None:
    """What the JVM ``proc`` (the client's, or a broker's own; working in ``work``) said as it crashed: its
    fatal-error report's problematic frame and thread (``work/hs_err_pid<pid>.log``, written as the JVM
    dies), or None when it did not.
    RocketMQ 5.3.3's RocksDB brokers crash so at times (SIGSEGV in librocksdbjni under
    ScheduleMessageTimerThread, docs/testing.md#matrix): the broker's defect, not the harness's."""
    report = Path(work) / f"hs_err_pid{proc.pid}.log"
    deadline = time.time() + wait_s
    while proc.poll() is None and time.time() < deadline:  # the JVM writes its report, then exits
        time.sleep(0.2)
    if not report.exists():
        return None
    text = report.read_text(errors="replace")
    frame = re.search(r"^# Problematic frame:\n#\s*(.+)$", text, re.MULTILINE)
    thread = re.search(r'^Current thread .*?JavaThread "([^"]+)"', text, re.MULTILINE)
    signal_line = re.search(r"^#\s+(SIG\w+ \(\w+\))", text, re.MULTILINE)
    return (f"{JVM_CRASHED} ({signal_line.group(1) if signal_line else 'fatal error'}"
            f"{' in ' + frame.group(1).strip()[:200] if frame else ''}"
            f"{', thread ' + thread.group(1) if thread else ''}; report {report})")


def broker_lost_writes(work: Path) -> str | None:
    """What the brokers under ``work`` logged of their own writes that failed (a transaction op
    record they could not put: an overloaded machine), or None. Such a run's store no longer holds
    the producer's decisions its checks expect, so it is a harness error, run again
    (docs/testing.md#matrix)."""
    lines = []
    for log in sorted(Path(work).glob("**/logs/rocketmqlogs/transaction.log")):
        lines += [m.group(0)[:200] for m in LOST_OP_WRITE.finditer(log.read_text(errors="replace"))]
    if not lines:
        return None
    return f"{BROKER_LOST_WRITES} ({len(lines)} transaction op record(s); first: {lines[0]})"


class Harness:
    """One run: a work directory, a NameServer, brokers and a client JVM, all stopped on exit."""

    def __init__(self, out: Path, quick_start: bool = True, rocketmq: str | None = None):
        self.out = Path(out)
        self.version = rocketmq_version(rocketmq)
        self.jvm = QUICK_START if quick_start else []
        self.work = self.out / "work"
        self.logs = self.out / "logs"
        for d in (self.out / "stores", self.work, self.logs):
            d.mkdir(parents=True, exist_ok=True)
        for f in ("sent.jsonl", "received.jsonl"):      # both exist, even when nothing is received
            (self.out / f).touch()
        self.procs: list[subprocess.Popen] = []
        self.brokers: dict[str, dict] = {}
        self.broker_procs: dict[str, subprocess.Popen] = {}   # running brokers in their own JVM
        self.own_jvm: set[str] = set()                        # brokers added with own_jvm=True
        self.groups: list[dict] = []
        self.topics: dict[str, list[dict]] = {}
        self.namesrv = None
        self.client: Client | None = None
        self.snapshot_ms = None
        self.copied_ms = None
        self.extra: dict = {}
        # Set once the scenario's outputs are written and nothing reads the brokers' own stores
        # again: close() then skips the brokers' clean shutdown, which takes RocketMQ 5.3.3 up to
        # 17 s (fixed waits in its POP and store services) and would only tidy files about to be removed.
        self.discard_stores = False

    # -- processes ---------------------------------------------------------------------------
    def spawn(self, name: str, main: list[str], stdin=None, heap: list[str] = JVM_HEAP) -> subprocess.Popen:
        home = self.work / "home"
        home.mkdir(exist_ok=True)
        # the JVM's own warnings go to stderr (the log), never into the stdout the harness reads answers from
        cmd = ["java", *heap, *self.jvm, "-XX:+DisplayVMOutputToStderr", f"-Duser.home={home}",
               f"-Drocketmq.home.dir={home}", "-cp", classpath(self.version), *main]
        with open(self.logs / f"{name}.log", "ab") as err:    # the child keeps its own descriptor
            proc = subprocess.Popen(cmd, stdin=stdin, stdout=subprocess.PIPE, stderr=err, text=True,
                                    start_new_session=True, cwd=self.work)
        _LIVE.add(proc)
        self.procs.append(proc)
        return proc

    def _await_ready(self, proc: subprocess.Popen, name: str, timeout: float = 120.0) -> None:
        line = [None]

        def read():
            while (got := proc.stdout.readline()) and not got.startswith("READY"):
                pass  # a line that is not the harness's (a JVM warning, native code)
            line[0] = got

        t = threading.Thread(target=read, daemon=True)
        t.start()
        t.join(timeout)
        if not line[0] or not line[0].startswith("READY"):
            log = (self.logs / f"{name}.log").read_text(errors="replace")[-3000:]
            raise HarnessError(f"{name} did not start (see {self.logs / (name + '.log')}):\n{log}")

    def start_namesrv(self) -> None:
        """Starts the client's JVM (no client objects yet: start_client) and the NameServer in it."""
        port = free_port()
        home = self.work / "namesrv"
        home.mkdir(exist_ok=True)
        if self.client is None:
            self.client = Client(self)
        self.client("namesrv_start", port=port, home=str(home), timeout=120)
        self.namesrv = f"{LOOPBACK}:{port}"

    def add_broker(self, name: str, own_jvm: bool = False, **settings) -> None:
        """Writes the broker's properties file (its store root under work/<name>/store).

        The broker runs in the client's JVM unless ``own_jvm``: only a broker in its own JVM can
        be killed (kill_broker)."""
        port = free_port((-2, 0, 1))
        root = self.work / name / "store"
        root.mkdir(parents=True, exist_ok=True)
        config = {
            "brokerClusterName": "HarnessCluster",
            "brokerName": name,
            "brokerId": 0,
            "brokerIP1": LOOPBACK,
            "namesrvAddr": self.namesrv,
            "listenPort": port,
            "haListenPort": port + 1,
            "bindAddress": LOOPBACK,     # its remoting servers (port and port - 2) listen on loopback only
            "storePathRootDir": str(root),
            "storePathCommitLog": str(root / "commitlog"),
            "autoCreateTopicEnable": "false",
            "flushDiskType": "ASYNC_FLUSH",
            "brokerRole": "ASYNC_MASTER",
            # Small files keep the stores small and make the readers cross file ends.
            "mappedFileSizeCommitLog": 1024 * 1024,
            "mappedFileSizeConsumeQueue": 20 * 500,
            "mappedFileSizeConsumeQueueExt": 16 * 1024,
            "maxIndexNum": 4000,
            "maxHashSlotNum": 1000,
            "timerWheelEnable": "false",
            # RocketMQ 5.3.3's TransactionMetricsFlushService spins on the clock for this long after
            # every broker start (3 s by default, a core's worth of CPU each time); with 0.5 s it
            # persists its small metrics file twice a second instead, which costs next to nothing.
            "transactionMetricFlushInterval": 500,
            # A put that waited over this long for the CommitLog's lock is refused as page cache busy
            # (1 s by default). On make test's two cores, beside the suite and two other runs, puts
            # took up to 1.6 s: the broker refused its own batched transaction op record and lost the
            # rollbacks in it (random-13@5.5.1 on CI; broker_lost_writes). 10 s keeps its writes.
            "osPageCacheBusyTimeOutMills": 10000,
            # Delay levels and retry intervals in seconds, so scenarios take minutes.
            "messageDelayLevel": "1s 2s 3s 4s 5s 6s 7s 8s 9s 10s 11s 12s 13s 14s 15s 16s 17s 18s",
            **settings,
        }
        props = self.work / name / "broker.properties"
        props.write_text("".join(f"{k}={v}\n" for k, v in config.items()))
        self.brokers[name] = {"name": name, "store": f"stores/{name}", "config": config,
                              "properties": str(props), "addr": f"{LOOPBACK}:{port}"}
        if own_jvm:
            self.own_jvm.add(name)

    def start_broker(self, name: str) -> None:
        self.start_brokers([name])

    def start_brokers(self, names: list[str]) -> None:
        """Starts brokers ``names``: those in their own JVM all at once (each then awaited), those in
        the client's JVM one after the other meanwhile."""
        started = time.time()
        spawned = {name: self.spawn(f"broker-{name}", ["rmqfilter.harness.Broker", self.brokers[name]["properties"]])
                   for name in names if name in self.own_jvm}
        for name in names:
            if name not in self.own_jvm:
                self.client("broker_start", properties=self.brokers[name]["properties"], timeout=180)
        for name, proc in spawned.items():
            self._await_ready(proc, f"broker-{name}")
            self.broker_procs[name] = proc
        if os.environ.get("HARNESS_VERBOSE"):
            print(f"[{time.strftime('%H:%M:%S')}] brokers {', '.join(names)} up in {time.time() - started:.1f} s",
                  file=sys.stderr)

    def stop_broker(self, name: str) -> None:
        """Clean shutdown: the broker flushes its files and removes its abort file."""
        self.stop_brokers([name])

    def stop_brokers(self, names: list[str]) -> None:
        """:meth:`stop_broker` of each of ``names``: those in their own JVM are told at once (a
        RocketMQ broker's shutdown takes seconds, waiting on its services one after the other) and
        each is awaited after those in the client's JVM, which stop one after the other."""
        own = [name for name in names if name in self.own_jvm]
        for name in own:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.broker_procs[name].pid, signal.SIGTERM)
        for name in names:
            if name not in self.own_jvm:
                self.client("broker_stop", name=name, timeout=180)
        for name in own:
            self._stopped(name)

    def _stopped(self, name: str) -> None:
        """Waits for broker ``name``'s own JVM to end after its SIGTERM: a clean exit, or a crash named."""
        proc = self.broker_procs.pop(name)
        try:
            proc.wait(120.0)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        _LIVE.discard(proc)
        if proc.returncode not in (0, 143, -signal.SIGTERM):
            crash = jvm_crash(self.work, proc, wait_s=0)  # died earlier, in native code (matrix seed 133215)
            raise HarnessError(f"broker {name}: {crash}" if crash else
                               f"broker {name} exited with {proc.returncode} on SIGTERM")

    def kill_broker(self, name: str) -> None:
        """SIGKILL: the store stays as the crash left it (abort file included)."""
        if name not in self.broker_procs:
            raise HarnessError(f"broker {name} does not run in its own JVM: add it with own_jvm=True to kill it")
        proc = self.broker_procs.pop(name)
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        _LIVE.discard(proc)

    def store_root(self, name: str) -> Path:
        return Path(self.brokers[name]["config"]["storePathRootDir"])

    def copy_store(self, name: str, dest: str | None = None) -> Path:
        target = self.out / "stores" / (dest or name)
        if target.exists():
            shutil.rmtree(target)
        shutil.copytree(self.store_root(name), target)
        return target

    def start_client(self) -> Client:
        """The producer and admin API in the client's JVM (started with the NameServer)."""
        if self.client is None:
            raise HarnessError("start_namesrv first: the client's JVM starts with the NameServer")
        self.client("init", namesrv=self.namesrv)
        return self.client

    def close(self) -> None:
        """Brokers in their own JVM first (their shutdown unregisters from the NameServer), then
        the client's JVM: quitting it shuts down its clients, its brokers and the NameServer.

        With :attr:`discard_stores` set, the brokers are not shut down cleanly: those in their own
        JVM get SIGKILL, and the client's JVM closes its record files and halts."""
        for proc in reversed(list(self.broker_procs.values())):
            if self.discard_stores and proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
            _stop(proc)
        if self.client is not None and self.client.proc.poll() is None:
            try:
                self.client("halt" if self.discard_stores else "quit", timeout=180)
            except (HarnessError, OSError):
                pass
        for proc in reversed(self.procs):
            _stop(proc)

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # -- scenario steps ------------------------------------------------------------------------
    @property
    def sent_path(self) -> str:
        return str(self.out / "sent.jsonl")

    @property
    def received_path(self) -> str:
        return str(self.out / "received.jsonl")

    def create_topic(self, topic: str, queues: int, attributes: dict[str, str] | None = None) -> None:
        """Creates ``topic`` on every broker, with topic ``attributes`` if given
        (``{"+queue.type": "BatchCQ"}``)."""
        self.client("wait_brokers", names=list(self.brokers))
        self.topics[topic] = []
        self.client("create_topic", topic=topic, queues=queues, attributes=attributes,
                    brokers=[b["addr"] for b in self.brokers.values()])

    def send(self, messages: list[dict]) -> None:
        for i in range(0, len(messages), 500):
            self.client("send", out=self.sent_path, messages=messages[i:i + 500])

    def subscribe(self, group: str, topic: str, type_: str, expression: str, phase: str, **tuning) -> None:
        if not any(g["group"] == group for g in self.groups):
            self.groups.append({"group": group, "topic": topic, "type": type_, "expression": expression,
                                "consumer": "push"})
        self.client("consumer_start", group=group, topic=topic, type=type_, expression=expression,
                    phase=phase, out=self.received_path, **tuning)

    def broker_permission(self, name: str, perm: int) -> None:
        """Set broker ``name``'s brokerPermission through the admin API, returning once the name
        server's route shows it (PERM_READ 4 alone: producers and send-backs refused; 6: both)."""
        self.client("broker_permission", broker=name, addr=self.brokers[name]["addr"], perm=perm, topic=RANDOM_TOPIC)

    def drain(self, groups: list[str], timeout_s: float = 300) -> None:
        self.client("consumer_wait_drained", groups=groups, timeout_ms=int(timeout_s * 1000),
                    timeout=timeout_s + 60)

    def unsubscribe(self, groups: list[str]) -> None:
        """Stops the push consumers of ``groups``, all at once (each shuts down in about a second)."""
        if groups:
            self.client("consumer_stop", groups=list(groups))

    def record_progress(self) -> None:
        """The broker's own progress of every group: ``progress`` on its topic's queues and
        ``retry_progress`` on its ``%RETRY%`` topic's (empty when it has sent nothing back)."""
        for g in self.groups:
            if g["consumer"] == "pop":
                continue    # the admin's consume stats start from the group's %RETRY% route, which a POP group lacks
            if g["consumer"] == "lmq-pull":    # an LMQ queue: the pull consumer asks the broker
                g["progress"] = self.client("lmq_progress", group=g["group"], queue=g["topic"],
                                            parent_topic=g["parent_topic"], broker=g["broker"])["progress"]
                g["retry_progress"] = []
                continue
            rows = self.client("progress", group=g["group"])["progress"]
            for key, topic in (("progress", g["topic"]), ("retry_progress", f"%RETRY%{g['group']}")):
                g[key] = sorted(
                    ({k: r[k] for k in ("broker", "queue_id", "broker_offset", "consumer_offset")}
                     for r in rows if r["topic"] == topic),
                    key=lambda r: (r["broker"], r["queue_id"]))

    def snapshot(self, names: list[str] | None = None, restart: bool = True) -> None:
        """Admin progress of every group, clean shutdown, copy, restart from the original store."""
        names = names or list(self.brokers)
        self.record_progress()
        for topic in self.topics:
            rows = self.client("topic_stats", topic=topic)["queues"]
            self.topics[topic] = sorted(rows, key=lambda r: (r["broker"], r["queue_id"]))
        self.snapshot_ms = int(time.time() * 1000)
        self.stop_brokers(names)
        for name in names:
            self.copy_store(name)
        self.copied_ms = int(time.time() * 1000)    # every copy is older than this
        if restart:
            self.start_brokers(names)

    def write_broker_json(self) -> None:
        doc = {
            "rocketmq_version": self.version,
            "rocketmq_client_version": client_release(self.version),
            "harness_hash": source_hash(self.version),
            "snapshot_ms": self.snapshot_ms,
            "copied_ms": self.copied_ms,
            "namesrv": self.namesrv,
            "brokers": [{"name": b["name"], "store": b["store"], "config": b["config"], **b.get("extra", {})}
                        for b in self.brokers.values()],
            "groups": self.groups,
            "topics": [{"topic": t, "queues": q} for t, q in self.topics.items()],
            **self.extra,
        }
        (self.out / "broker.json").write_text(json.dumps(doc, indent=2) + "\n")


# -- scenarios ---------------------------------------------------------------------------------

FILTER_TOPIC = "FilterTopic"
OTHER_TOPIC = "OtherTopic"

# SQL92 groups over FilterTopic: numbers (int, long, float), strings, booleans, NULL/absent,
# IS [NOT] NULL, BETWEEN, IN, NOT, the CONTAINS family and TAGS as a property.
FILTER_SQL_GROUPS = {
    "GID_SQL_INT": "a > 5 AND a <= 40",
    "GID_SQL_LONG_FLOAT": "l >= 3000000000 OR f < 1.5",
    "GID_SQL_STR_IN": "region IN ('eu', 'us') AND color <> 'red'",
    "GID_SQL_BOOL": "flag = TRUE",
    "GID_SQL_BETWEEN": "price BETWEEN 10 AND 20.5",
    "GID_SQL_IS_NULL": "color IS NULL",
    "GID_SQL_NOT": "region IS NOT NULL AND NOT (a BETWEEN 10 AND 30)",
    "GID_SQL_CONTAINS": "name STARTSWITH 'ord' OR name CONTAINS 'x' OR name ENDSWITH '-9'",
    "GID_SQL_TAGS": "TAGS IN ('TagA', 'Aa') OR a = 7",
}
# A group that subscribes only after the first batch: those messages were stored before its
# filter was born, so their bitmaps do not hold its bits (isMsgInLive).
LATE_SQL_GROUP = ("GID_SQL_LATE", "price > 50 OR region = 'cn'")
FILTER_TAG_GROUPS = {
    "GID_TAG_OR": "TagA || TagB",
    "GID_TAG_AA": "Aa",           # "BB" has the same String.hashCode: the client drops those
    "GID_TAG_STAR": "*",          # messages without a tag too
    "GID_TAG_C": "TagC || BB",
}
OTHER_TAG_GROUPS = {"GID_OTHER": "TagX || Aa"}


def filter_messages(rng: random.Random, topic: str, start: int, n: int) -> list[dict]:
    """Messages with properties of every kind the selector reads, some absent, some malformed."""
    tags = ["TagA", "TagB", "TagC", "Aa", "BB", None, "TagX"]
    out = []
    for i in range(start, start + n):
        props: dict[str, str] = {}
        if rng.random() < 0.85:
            props["a"] = str(rng.randrange(-5, 60)) if rng.random() < 0.95 else rng.choice(["x", "4.5", " 7"])
        if rng.random() < 0.7:
            props["l"] = str(rng.choice([rng.randrange(0, 10**6), rng.randrange(2**31, 2**33)]))
        if rng.random() < 0.7:
            props["f"] = rng.choice(["0.5", "1.5", "1.49", "2e0", "-3.25", "1e-2", "NaN", "abc"])
        if rng.random() < 0.8:
            props["region"] = rng.choice(["eu", "us", "cn", "EU", "us "])
        if rng.random() < 0.6:
            props["color"] = rng.choice(["red", "blue", "green", "Red"])
        if rng.random() < 0.7:
            props["flag"] = rng.choice(["true", "false", "TRUE", "True", "1", "yes"])
        if rng.random() < 0.8:
            props["price"] = rng.choice([str(rng.randrange(0, 100)), f"{rng.uniform(0, 100):.2f}", "20.5", "10"])
        if rng.random() < 0.6:
            props["name"] = rng.choice(["order-", "ord", "box-", "Xray", "taxi-", "item-"]) + str(i % 13)
        keys = [f"k-{topic}-{i}"] + ([f"shared-{i % 50}"] if i % 3 == 0 else [])
        out.append({"topic": topic, "tags": rng.choice(tags), "keys": keys, "properties": props,
                    "body": f"{topic} message {i}"})
    return out


def scenario_filters(h: Harness) -> None:
    h.start_namesrv()
    h.add_broker("broker-a", enablePropertyFilter="true", enableCalcFilterBitMap="true",
                 enableConsumeQueueExt="true")
    h.start_broker("broker-a")
    h.start_client()
    h.create_topic(FILTER_TOPIC, 4)
    h.create_topic(OTHER_TOPIC, 2)
    rng = random.Random(25)
    early = [(g, FILTER_TOPIC, "SQL92", e) for g, e in FILTER_SQL_GROUPS.items()]
    early += [(g, FILTER_TOPIC, "TAG", e) for g, e in FILTER_TAG_GROUPS.items()]
    early += [(g, OTHER_TOPIC, "TAG", e) for g, e in OTHER_TAG_GROUPS.items()]
    for g, t, ty, e in early:
        h.subscribe(g, t, ty, e, "live")
    # The SQL filters must be registered (and their bits computed) before the first batch.
    time.sleep(3)
    h.send(filter_messages(rng, FILTER_TOPIC, 0, 1500) + filter_messages(rng, OTHER_TOPIC, 0, 300))
    late_group, late_sql = LATE_SQL_GROUP
    h.subscribe(late_group, FILTER_TOPIC, "SQL92", late_sql, "live")
    time.sleep(3)
    h.send(filter_messages(rng, FILTER_TOPIC, 1500, 1500) + filter_messages(rng, OTHER_TOPIC, 300, 300))
    names = [g["group"] for g in h.groups]
    h.drain(names)
    h.unsubscribe(names)
    # The consumers are gone: these stay in the backlog until the drain phase.
    h.send(filter_messages(rng, FILTER_TOPIC, 3000, 1200) + filter_messages(rng, OTHER_TOPIC, 600, 200))
    time.sleep(2)
    h.snapshot()
    for g in h.groups:
        h.subscribe(g["group"], g["topic"], g["type"], g["expression"], "drain")
    h.drain(names)
    h.unsubscribe(names)


CRASH_TOPIC = "CrashTopic"
CRASH_GROUPS = {"GID_CRASH_ALL": "*", "GID_CRASH_A": "TagA"}


def scenario_crash(h: Harness) -> None:
    h.start_namesrv()
    h.add_broker("broker-a", own_jvm=True, enableConsumeQueueExt="true")   # killed below
    h.start_broker("broker-a")
    h.start_client()
    h.create_topic(CRASH_TOPIC, 2)
    h.client("send_loop_start", out=h.sent_path, topic=CRASH_TOPIC, prefix="crash", tags=["TagA", "TagB"],
             pause_ms=0, threads=4)     # several sends in flight when the broker dies
    deadline = time.time() + 120
    while h.client("send_loop_count")["sent"] < 3000:
        if time.time() > deadline:
            raise HarnessError("crash: the producer did not get 3000 messages through in 120 s")
        time.sleep(0.2)
    h.kill_broker("broker-a")
    killed_at = int(time.time() * 1000)
    h.copy_store("broker-a", "broker-a-killed")
    time.sleep(1)                       # the producer keeps trying while the broker is down
    counts = h.client("send_loop_stop")
    h.start_broker("broker-a")
    for g, e in CRASH_GROUPS.items():
        h.subscribe(g, CRASH_TOPIC, "TAG", e, "drain")
    h.drain(list(CRASH_GROUPS))
    h.unsubscribe(list(CRASH_GROUPS))
    h.snapshot(restart=False)
    h.brokers["broker-a"]["extra"] = {"killed_store": "stores/broker-a-killed", "killed_ms": killed_at}
    h.extra["crash"] = {"topic": CRASH_TOPIC, "sent": counts["sent"], "failed": counts["failed"]}


LIVE_TOPIC = "LiveTopic"


def scenario_live(h: Harness, during=None, seconds: float = 12.0) -> None:
    """The broker writes while ``during(store_root, deadline)`` (the test) reads its store in place."""
    h.start_namesrv()
    h.add_broker("broker-a", enableConsumeQueueExt="true", flushIntervalCommitLog=50)
    h.start_broker("broker-a")
    h.start_client()
    h.create_topic(LIVE_TOPIC, 3)
    h.client("send_loop_start", out=h.sent_path, topic=LIVE_TOPIC, prefix="live", tags=["TagA", "TagB", "TagC"],
             pause_ms=0)
    deadline = time.time() + seconds
    if during is not None:
        during(h.store_root("broker-a"), deadline)
    while time.time() < deadline:
        time.sleep(0.2)
    counts = h.client("send_loop_stop")
    h.snapshot(restart=False)
    h.extra["live"] = {"topic": LIVE_TOPIC, "sent": counts["sent"], "failed": counts["failed"],
                       "work_store": str(h.store_root("broker-a"))}


HOUSEKEEPING_TOPIC = "HousekeepingTopic"
HOUSEKEEPING_GROUP = ("GID_HOUSEKEEPING", "TagA || TagB")


def housekeeping_messages(start: int, n: int) -> list[dict]:
    tags = ["TagA", "TagB", "TagC"]
    return [{"topic": HOUSEKEEPING_TOPIC, "tags": tags[i % 3], "keys": [f"hk-{i}"], "properties": {},
             "body": f"housekeeping message {i} " + "x" * 200} for i in range(start, start + n)]


def scenario_housekeeping(h: Harness, during=None) -> None:
    """The broker deletes expired files while ``during(store_root, expire)`` (the test) reads.

    64 KiB CommitLog files and 100-unit ConsumeQueue files; a tag group receives the first
    batch and commits; a second batch fills several more files. ``expire()`` has the broker
    delete its expired files through the admin API (``fileReservedTime`` 0: every CommitLog
    file but the one being written is expired; ``deleteWhen`` is an hour away from now, so
    only the command starts the deletion; its clean-up service then deletes the ConsumeQueue
    files below the new CommitLog minimum) and returns once the CommitLog's first file and
    every queue's minimum have moved. Without ``during``, ``expire()`` runs at once. The disk
    ratios are raised to the broker's most (95%): past ``diskMaxUsedSpaceRatio`` (75% by default,
    of the partition's used and usable space) a broker deletes expired files at once, so a machine
    whose disk a test run fills would expire them before the reads begin.
    """
    h.start_namesrv()
    h.add_broker("broker-a", mappedFileSizeCommitLog=64 * 1024, mappedFileSizeConsumeQueue=20 * 100,
                 fileReservedTime=0, deleteWhen=f"{(time.localtime().tm_hour + 12) % 24:02d}",
                 cleanResourceInterval=500, deleteCommitLogFilesInterval=10, deleteConsumeQueueFilesInterval=10,
                 flushConsumerOffsetInterval=500, diskMaxUsedSpaceRatio=95, diskSpaceCleanForciblyRatio=95,
                 diskSpaceWarningLevelRatio=95)
    h.start_broker("broker-a")
    h.start_client()
    h.create_topic(HOUSEKEEPING_TOPIC, 3)
    group, expression = HOUSEKEEPING_GROUP
    h.subscribe(group, HOUSEKEEPING_TOPIC, "TAG", expression, "live")
    h.send(housekeeping_messages(0, 300))
    h.drain([group])
    h.unsubscribe([group])                   # its offsets committed at shutdown
    h.send(housekeeping_messages(300, 1500))
    time.sleep(1.5)                          # the broker persists consumerOffset.json
    h.record_progress()
    before = {r["queue_id"]: r["min_offset"] for r in h.client("topic_stats", topic=HOUSEKEEPING_TOPIC)["queues"]}
    commitlog = h.store_root("broker-a") / "commitlog"
    first_file = min(commitlog.iterdir()).name
    addr = h.brokers["broker-a"]["addr"]

    def expire() -> dict[int, int]:
        """Deletes; returns the admin API's queue minimums once they stayed put for 1.5 s."""
        h.client("delete_expired_commitlog", addr=addr)
        deadline = time.time() + 60
        last, since = None, time.time()
        while True:
            mins = {r["queue_id"]: r["min_offset"] for r in h.client("topic_stats", topic=HOUSEKEEPING_TOPIC)["queues"]}
            state = (sorted(f.name for f in commitlog.iterdir()), mins)
            if state != last:
                last, since = state, time.time()
            moved = state[0][0] != first_file and all(mins[q] > before[q] for q in before)
            if moved and time.time() - since >= 1.5:
                h.extra["housekeeping"]["min_offsets_after"] = mins
                return mins
            if time.time() > deadline:
                raise HarnessError(f"housekeeping: the broker did not expire its files in 60 s (minimums {mins})")
            time.sleep(0.2)

    h.extra["housekeeping"] = {"topic": HOUSEKEEPING_TOPIC, "min_offsets_before": before,
                               "first_commitlog_file_before": first_file}
    if during is None:
        expire()
    else:
        during(h.store_root("broker-a"), expire)
    h.snapshot(restart=False)


THROUGHPUT_TOPIC = "ThroughputTopic"
THROUGHPUT_GROUP = ("GID_THROUGHPUT", "a > 900 AND region = 'eu'")


def scenario_throughput(h: Harness, messages: int = 1_000_000) -> None:
    h.start_namesrv()
    # Its own JVM, as a user's broker: the consumer measured here shares no heap or GC with it.
    h.add_broker("broker-a", own_jvm=True, enablePropertyFilter="true", enableCalcFilterBitMap="true",
                 enableConsumeQueueExt="true", mappedFileSizeCommitLog=64 * 1024 * 1024,
                 mappedFileSizeConsumeQueue=20 * 300000, mappedFileSizeConsumeQueueExt=16 * 1024 * 1024,
                 maxIndexNum=2_000_000, maxHashSlotNum=500_000, sendMessageThreadPoolNums=2)
    h.start_broker("broker-a")
    client = h.start_client()
    h.create_topic(THROUGHPUT_TOPIC, 4)
    group, sql = THROUGHPUT_GROUP
    # Register the group's filter first (so every message carries its bits), then stop it.
    h.subscribe(group, THROUGHPUT_TOPIC, "SQL92", sql, "live", count_only=True)
    time.sleep(3)
    h.unsubscribe([group])
    client("bulk_send", topic=THROUGHPUT_TOPIC, count=messages, timeout=3600)
    time.sleep(2)
    h.snapshot()
    started = time.time()
    h.subscribe(group, THROUGHPUT_TOPIC, "SQL92", sql, "drain", count_only=True, pull_batch_size=32,
                consume_batch_size=32, consume_threads=4, pull_threshold=4000)
    h.drain([group], timeout_s=3600)
    seconds = time.time() - started
    received = client("received", group=group)["count"]
    h.unsubscribe([group])
    h.extra["throughput"] = {"group": group, "topic": THROUGHPUT_TOPIC, "type": "SQL92", "expression": sql,
                             "messages": messages, "received": received, "seconds": round(seconds, 3)}


MODES_TOPIC = "ModesTopic"
MODES_GROUPS = {
    "GID_MODES_SQL": ("SQL92", "a > 5 AND a <= 40"),
    "GID_MODES_SQL_TAGS": ("SQL92", "TAGS IN ('TagA', 'Aa') OR a = 7"),
    "GID_MODES_TAG": ("TAG", "TagA || TagB"),
    "GID_MODES_AA": ("TAG", "Aa"),            # "BB" shares its hash: the client drops those
    "GID_MODES_STAR": ("TAG", "*"),
}


def scenario_modes(h: Harness) -> None:
    """One broker in DLedger mode (a one-node group): tag and SQL92 groups, both phases as in filters."""
    h.start_namesrv()
    h.add_broker("broker-a", enablePropertyFilter="true", enableCalcFilterBitMap="true",
                 enableConsumeQueueExt="true", enableDLegerCommitLog="true", dLegerGroup="broker-a",
                 dLegerPeers=f"n0-{LOOPBACK}:{free_port()}", dLegerSelfId="n0",
                 mappedFileSizeCommitLog=128 * 1024)     # entries cross DLedger file ends (blanks)
    h.start_broker("broker-a")
    h.start_client()
    h.create_topic(MODES_TOPIC, 3)
    receive_in_two_phases(h, MODES_TOPIC, MODES_GROUPS, random.Random(27))


ROCKSDB_V2_BROKER = "broker-v2"
ROCKSDB_V2_TOPIC = "RdbV2Topic"
#: The groups of ``modes`` again, on the v2 broker's topic.
ROCKSDB_V2_GROUPS = {f"{g}_V2": subscription for g, subscription in MODES_GROUPS.items()}
#: A group the admin API disables on the v2 broker (consumeEnable=false): the one record of the
#: subscription group table, since the broker writes no record for the groups it creates itself.
ROCKSDB_V2_OFF_GROUP = "GID_V2_OFF"


def scenario_rocksdb(h: Harness) -> None:
    """One broker with ``storeType=defaultRocksDB`` (consume queues and metadata in RocksDB): the
    groups of ``modes``, both phases. Property filtering is on; the broker keeps no
    ConsumeQueueExt in this mode, so SQL92 groups are filtered on the CommitLog alone. Then the
    same on a second broker whose metadata is config v2 (:func:`_rocksdb_v2_round`)."""
    h.start_namesrv()
    h.add_broker("broker-a", storeType="defaultRocksDB", enablePropertyFilter="true")
    h.start_broker("broker-a")
    h.start_client()
    h.create_topic(MODES_TOPIC, 3)
    receive_in_two_phases(h, MODES_TOPIC, MODES_GROUPS, random.Random(29))
    _rocksdb_v2_round(h)


def _rocksdb_v2_round(h: Harness) -> None:
    """The two phases once more, on broker ``broker-v2`` alone (broker-a is stopped first: one
    broker JVM at a time) with ``configManagerVersion=v2``: every metadata table in one RocksDB
    database, ``config/rdb``, consume queues as files. Its topic and groups are its own
    (:data:`ROCKSDB_V2_TOPIC`, :data:`ROCKSDB_V2_GROUPS`), and :data:`ROCKSDB_V2_OFF_GROUP` is
    disabled through the admin API. The groups join broker.json's ``groups``, and ``rocksdb_v2`` =
    ``{broker, topic, topics, off_group}`` holds the admin API's queue stats of its topic
    (``topics`` itself stays broker-a's)."""
    h.stop_broker("broker-a")
    first_brokers, first_groups, first_topics = h.brokers, h.groups, h.topics
    h.brokers, h.groups, h.topics = {}, [], {}     # the round's snapshot sees this broker alone
    h.add_broker(ROCKSDB_V2_BROKER, configManagerVersion="v2", enablePropertyFilter="true")
    h.start_broker(ROCKSDB_V2_BROKER)
    h.create_topic(ROCKSDB_V2_TOPIC, 3)
    h.client("disable_group", group=ROCKSDB_V2_OFF_GROUP, brokers=[h.brokers[ROCKSDB_V2_BROKER]["addr"]])
    rng = random.Random(31)

    def send(phase: str) -> None:   # a quarter of broker-a's messages: this round checks the metadata
        h.send(filter_messages(rng, ROCKSDB_V2_TOPIC, 0, 300) if phase == "live"
               else filter_messages(rng, ROCKSDB_V2_TOPIC, 300, 150))

    receive_in_two_phases(h, ROCKSDB_V2_TOPIC, ROCKSDB_V2_GROUPS, rng, send=send)
    h.stop_broker(ROCKSDB_V2_BROKER)
    h.extra["rocksdb_v2"] = {"broker": ROCKSDB_V2_BROKER, "topic": ROCKSDB_V2_TOPIC, "off_group": ROCKSDB_V2_OFF_GROUP,
                             "topics": [{"topic": t, "queues": q} for t, q in h.topics.items()]}
    h.brokers, h.groups, h.topics = {**first_brokers, **h.brokers}, first_groups + h.groups, first_topics
    shutil.rmtree(h.work / ROCKSDB_V2_BROKER / "store", ignore_errors=True)   # run() removes broker-a's


def receive_in_two_phases(h: Harness, topic: str, groups: dict[str, tuple[str, str]], rng: random.Random,
                          send=None, after_phase=None) -> None:
    """The two phases of ``modes`` and ``cluster``: ``groups`` (name -> (type, expression)) subscribe
    and receive a first batch of :func:`filter_messages`, commit and stop; a second batch is sent;
    the stores are copied (:meth:`Harness.snapshot`); the groups drain the rest.

    ``send(phase)`` sends a phase's messages instead (``batch``'s batch sends), and
    ``after_phase(phase)`` runs once the groups drained each phase (``batch``'s LMQ pulls)."""
    if send is None:
        def send(phase: str) -> None:
            h.send(filter_messages(rng, topic, 0, 1200) if phase == "live" else filter_messages(rng, topic, 1200, 600))
    for g, (type_, expression) in groups.items():
        h.subscribe(g, topic, type_, expression, "live")
    time.sleep(3)      # the SQL filters registered (on every broker) before the first message
    send("live")
    h.drain(list(groups))
    if after_phase is not None:
        after_phase("live")
    h.unsubscribe(list(groups))
    send("drain")
    time.sleep(2)
    h.snapshot()
    for g, (type_, expression) in groups.items():
        h.subscribe(g, topic, type_, expression, "drain")
    h.drain(list(groups))
    if after_phase is not None:
        after_phase("drain")
    h.unsubscribe(list(groups))


BATCH_TOPIC = "BatchTopic"
#: A tag whose Java String.hashCode is 0: the tags code of a batch record (which has no TAGS of its
#: own), so a group subscribing it passes the broker's check of every batch.
ZERO_HASH_TAG = "f5a5a608"
BATCH_GROUPS = {
    "GID_BATCH_STAR": ("TAG", "*"),
    "GID_BATCH_TAG": ("TAG", "TagA || TagB"),
    "GID_BATCH_ZERO": ("TAG", f"TagA || {ZERO_HASH_TAG}"),
    "GID_BATCH_SQL": ("SQL92", "a > 5"),
    "GID_BATCH_SQL_NULL": ("SQL92", "a IS NULL"),
}
LMQ_PARENT_TOPIC = "LmqParentTopic"
#: LMQ queue -> the pull consumer group that reads it.
LMQ_GROUPS = {"%LMQ%alpha": "GID_LMQ_ALPHA", "%LMQ%beta": "GID_LMQ_BETA"}


def batch_messages(rng: random.Random, start: int, batches: int) -> list[list[dict]]:
    """``batches`` batch sends of 1 to 6 messages with mixed tags (the zero-hash tag, none) and ``a``."""
    tags = ["TagA", "TagB", "TagC", ZERO_HASH_TAG, None]
    out, i = [], start
    for _ in range(batches):
        batch = []
        for _ in range(rng.randrange(1, 7)):
            props = {"a": str(rng.randrange(0, 12))} if rng.random() < 0.8 else {}
            batch.append({"topic": BATCH_TOPIC, "tags": rng.choice(tags), "keys": [f"k-batch-{i}"],
                          "properties": props, "body": f"batch message {i}"})
            i += 1
        out.append(batch)
    return out


def lmq_messages(rng: random.Random, start: int, n: int) -> list[dict]:
    """Messages of the LMQ parent topic, each multi-dispatched to one, both or neither LMQ queue."""
    choices = [["%LMQ%alpha"], ["%LMQ%beta"], ["%LMQ%alpha", "%LMQ%beta"], []]
    return [{"topic": LMQ_PARENT_TOPIC, "tags": rng.choice(["TagA", "TagB"]), "keys": [f"k-lmq-{i}"],
             "properties": {"a": str(i % 10)}, "body": f"lmq message {i}", "lmq": rng.choice(choices)}
            for i in range(start, start + n)]


def scenario_batch(h: Harness) -> None:
    """One broker with LMQ multi-dispatch on (``enableLmq``, ``enableMultiDispatch``) and property
    filtering: a BatchCQ topic (``+queue.type=BatchCQ``) receives batch sends with mixed tags, read
    by tag and SQL92 groups in the two phases of ``modes``; messages of another topic are
    multi-dispatched to two LMQ queues, each read by a pull consumer (an LMQ has no route of its own)
    after each phase, which commits its end. ``broker.json`` gets ``batch`` = ``{topic, zero_tag,
    lmq_parent_topic, lmq_groups}``."""
    h.start_namesrv()
    h.add_broker("broker-a", enablePropertyFilter="true", enableLmq="true", enableMultiDispatch="true",
                 flushConsumerOffsetInterval=500,
                 mapperFileSizeBatchConsumeQueue=46 * 20)     # small BatchCQ files: readers cross file ends
    h.start_broker("broker-a")
    h.start_client()
    h.create_topic(BATCH_TOPIC, 2, attributes={"+queue.type": "BatchCQ"})
    h.create_topic(LMQ_PARENT_TOPIC, 2)
    for queue, group in LMQ_GROUPS.items():
        h.groups.append({"group": group, "topic": queue, "type": "TAG", "expression": "*", "consumer": "lmq-pull",
                         "parent_topic": LMQ_PARENT_TOPIC, "broker": "broker-a"})
    rng = random.Random(30)

    def send(phase: str) -> None:
        first = phase == "live"
        h.client("batch_send", out=h.sent_path,
                 batches=batch_messages(rng, 0 if first else 10000, 50 if first else 25))
        h.send(lmq_messages(rng, 0 if first else 10000, 40 if first else 20))

    def pull_lmq(phase: str) -> None:
        for queue, group in LMQ_GROUPS.items():
            h.client("lmq_pull", group=group, queue=queue, parent_topic=LMQ_PARENT_TOPIC, broker="broker-a",
                     phase=phase, out=h.received_path)

    receive_in_two_phases(h, BATCH_TOPIC, BATCH_GROUPS, rng, send=send, after_phase=pull_lmq)
    h.extra["batch"] = {"topic": BATCH_TOPIC, "zero_tag": ZERO_HASH_TAG, "lmq_parent_topic": LMQ_PARENT_TOPIC,
                        "lmq_groups": LMQ_GROUPS}


CLUSTER_TOPIC = "ClusterTopic"
# Groups of the filters scenario, now over a topic both brokers of the cluster serve.
CLUSTER_GROUPS = {
    **{g: ("SQL92", FILTER_SQL_GROUPS[g]) for g in ("GID_SQL_INT", "GID_SQL_STR_IN", "GID_SQL_TAGS")},
    **{g: ("TAG", FILTER_TAG_GROUPS[g]) for g in ("GID_TAG_OR", "GID_TAG_AA", "GID_TAG_STAR")},
}
CLUSTER_BROKERS = ("broker-a", "broker-b")


def scenario_cluster(h: Harness) -> None:
    """Two brokers of one cluster (broker-a, broker-b, one NameServer) serve one topic: the
    producer spreads its sends over both brokers' queues and each group's consumer takes from
    both; both phases as in filters (live, then a backlog drained after the copy)."""
    h.start_namesrv()
    for name in CLUSTER_BROKERS:
        h.add_broker(name, enablePropertyFilter="true", enableCalcFilterBitMap="true",
                     enableConsumeQueueExt="true")
        h.start_broker(name)
    h.start_client()
    h.create_topic(CLUSTER_TOPIC, 3)     # on every broker: 3 queues each
    receive_in_two_phases(h, CLUSTER_TOPIC, CLUSTER_GROUPS, random.Random(28))


LIFE_TOPIC = "LifeTopic"
# Groups of LifeTopic: (type, expression); GID_LIFE_FAIL fails every message with fail=true (two
# retries, then its DLQ); GID_LIFE_OFF is disabled (consumeEnable=false) before it starts.
LIFE_GROUPS = {
    "GID_LIFE_ALL": ("TAG", "*"),
    "GID_LIFE_A": ("TAG", "TagA"),
    "GID_LIFE_SQL": ("SQL92", "a > 5"),
    "GID_LIFE_FAIL": ("TAG", "*"),
    "GID_LIFE_OFF": ("TAG", "*"),
}
LIFE_FAIL_GROUP, LIFE_OFF_GROUP = "GID_LIFE_FAIL", "GID_LIFE_OFF"
LIFE_MAX_RECONSUME = 2
# The far messages: delay level 18 and timers as far ahead, still scheduled when the store is copied.
# The lifecycle broker's level 18 is a minute, not add_broker's 18 s: the snapshot's clean shutdown
# can take 15 s on a loaded machine (the broker's POP revive threads finish their pass before they
# stop), and the broker's delay and timer services keep delivering until its store shuts down.
LIFE_FAR_LEVEL = 18
LIFE_FAR_DELAY_S = 60
LIFE_DELAY_LEVELS = " ".join(f"{s}s" for s in [*range(1, LIFE_FAR_LEVEL), LIFE_FAR_DELAY_S])
# A POP consumer group of LifeTopic (docs/paths.md#pop): it pops with a long invisible time and
# leaves every LIFE_POP_UNACKED_EVERY-th message un-acked (in flight at the snapshot), then pops
# LIFE_POP_REVIVED more with a short one and acks none: the broker revives those into its POP
# retry topic (v1 name: the broker's enableRetryTopicV2 is off) before the snapshot.
LIFE_POP_GROUP = "GID_LIFE_POP"
LIFE_POP_RETRY_TOPIC = f"%RETRY%{LIFE_POP_GROUP}_{LIFE_TOPIC}"
LIFE_POP_INVISIBLE_MS = 600_000
LIFE_POP_SHORT_INVISIBLE_MS = 1_000
LIFE_POP_UNACKED_EVERY = 4
LIFE_POP_REVIVED = 2
# Timer recalls (5.x, the broker's recallMessageEnable): LIFE_RECALL_TIMERS timer messages due
# LIFE_RECALL_DELAY_MS after they are sent, just before the snapshot; the producer recalls every
# other one (LIFE_RECALLED) at once, and asks for a recall of a first-batch timer message that has
# already fired, which the broker must refuse (its handle's time has passed). The drain waits for
# the ones not recalled, so it has run past the recalled ones' due time when it stops.
LIFE_RECALL_TIMERS = 4
LIFE_RECALLED = (0, 2)
LIFE_RECALL_DELAY_MS = 90_000   # the snapshot (broker stop, copy) must end before: CI is slow
# The timer store's flush interval (timerFlushIntervalMs, 1 s by default). Every flush compares the
# whole 38.7 MB wheel (7 days of slots, fixed in 5.3.3) with the file byte by byte: each second that
# took a third of a core in the harness's C1-compiled JVM, more than half of the scenario's CPU. The
# scenario waits one interval after its last wheel change (the recalls) before the snapshot, since
# a clean shutdown does not flush the wheel again.
LIFE_TIMER_FLUSH_MS = 3000
# Small timerlog files (the broker's default is 100 MiB): the timer's units cross file ends
# (blank records), as a long-running broker's do.
LIFE_TIMERLOG_FILE_SIZE = 1024


def life_messages(prefix: str, n: int, **extra) -> list[dict]:
    tags = ["TagA", "TagB"]
    return [{"topic": LIFE_TOPIC, "tags": tags[i % 2], "keys": [f"{prefix}-{i}"],
             "properties": {"a": str(i % 10)}, "body": f"{prefix} message {i}", **extra} for i in range(n)]


def _life_received(h: Harness) -> list[dict]:
    with open(h.received_path, encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def _life_wait(h: Harness, what: str, done, timeout_s: float = 240) -> None:
    deadline = time.time() + timeout_s
    while not done(_life_received(h)):
        if time.time() > deadline:
            raise HarnessError(f"lifecycle: {what} did not happen in {timeout_s:.0f} s")
        time.sleep(0.3)


def _life_subscribe_all(h: Harness, phase: str) -> None:
    for g, (type_, expression) in LIFE_GROUPS.items():
        tuning = {"fail_property": "fail", "max_reconsume_times": LIFE_MAX_RECONSUME} if g == LIFE_FAIL_GROUP else {}
        h.subscribe(g, LIFE_TOPIC, type_, expression, phase, **tuning)


def _life_pop(h: Harness, **args) -> int:
    """One round of the POP group's pops (Client.java ``pop``), recorded in received.jsonl."""
    if not any(g["group"] == LIFE_POP_GROUP for g in h.groups):
        h.groups.append({"group": LIFE_POP_GROUP, "topic": LIFE_TOPIC, "type": "TAG", "expression": "*",
                         "consumer": "pop"})
    broker = h.brokers["broker-a"]
    return h.client("pop", group=LIFE_POP_GROUP, topic=LIFE_TOPIC, addr=broker["addr"], broker=broker["name"],
                    max_nums=8, phase="live", out=h.received_path, **args)["popped"]


def _life_wait_revived(h: Harness, n: int, timeout_s: float = 240) -> None:
    """Until the broker's revive service has put ``n`` copies into the POP group's retry topic."""
    broker = h.brokers["broker-a"]
    deadline = time.time() + timeout_s
    while h.client("max_offset", addr=broker["addr"], broker=broker["name"], topic=LIFE_POP_RETRY_TOPIC,
                   queue_id=0)["max_offset"] < n:
        if time.time() > deadline:
            raise HarnessError(f"lifecycle: the broker did not revive {n} POP messages in {timeout_s:.0f} s")
        time.sleep(0.3)


def _life_sent(h: Harness, prefix: str) -> list[dict]:
    with open(h.sent_path, encoding="utf-8") as f:
        rows = [json.loads(line) for line in f if line.strip()]
    return [r for r in rows if r["keys"] and r["keys"][0].startswith(prefix)]


def _life_recall(h: Harness) -> list[dict]:
    """Sends the recall timers and recalls LIFE_RECALLED of them, then asks to recall ``timer-0``
    (fired long ago): one row per recall asked, with the message's keys and ``UNIQ_KEY``, and
    whether the broker took it (``ok``) or its ``error``."""
    h.send([m | {"timer_delay_ms": LIFE_RECALL_DELAY_MS} for m in life_messages("recall-timer", LIFE_RECALL_TIMERS)])
    sent = {r["keys"][0]: r for r in [*_life_sent(h, "recall-timer-"), *_life_sent(h, "timer-0")]}
    asked = [sent[f"recall-timer-{i}"] for i in LIFE_RECALLED] + [sent["timer-0"]]
    if any(not r.get("recall_handle") for r in asked):
        raise HarnessError("lifecycle: a timer message's send result carries no recall handle")
    answers = h.client("recall", topic=LIFE_TOPIC, handles=[r["recall_handle"] for r in asked])["recalls"]
    rows = [{"keys": r["keys"][0], "uniq_key": r["uniq_key"], "deliver_ms": r["deliver_ms"], **a}
            for r, a in zip(asked, answers)]
    if not all(r["ok"] for r in rows[:-1]) or rows[-1]["ok"]:
        raise HarnessError(f"lifecycle: the broker took the wrong recalls: {rows}")
    return rows


def scenario_lifecycle(h: Harness) -> None:
    """The paths a message takes besides its queue: delay levels, timers, transactions, retries, a DLQ.

    Every group consumes while a first batch is sent: plain messages (some with ``fail=true``,
    which GID_LIFE_FAIL fails until they reach its DLQ), delay-level messages (levels 1 to 3),
    timer messages (``TIMER_DELIVER_MS`` 2 to 3.5 s ahead) and transactional ones committed,
    rolled back or left unknown (the producer answers UNKNOW to every check). GID_LIFE_OFF is
    disabled (``consumeEnable=false``) and receives nothing. Then ``fail=true`` messages that
    GID_LIFE_FAIL fails once (their retries still on the way at the snapshot); the consumers stop;
    plain messages (pending at the snapshot), delay-level-18 messages and timer messages as far
    ahead (this broker's level 18 is 60 s; still scheduled at the snapshot) are sent; the store is copied; the consumers drain, the far
    delays included. GID_LIFE_POP is a POP consumer: once the first batch is delivered it pops the
    topic with a long invisible time, acking all but every fourth message (those are in flight at
    the snapshot); after the retrying messages are sent it pops two more with a 1 s invisible time
    and acks neither, and the snapshot waits until the broker has revived them into its POP retry
    topic. The broker writes every POP checkpoint and ack to its revive log
    (``enablePopBufferMerge=false``, the default, set so). Just before the snapshot, timer
    messages due 90 s ahead are sent and every other one recalled (``recallMessageEnable=true``;
    a recall of a fired timer message is refused), and the drain waits until the others arrive.
    ``broker.json`` gets ``lifecycle`` = ``{topic, fail_group, off_group, pop_group,
    pop_retry_topic, max_reconsume_times, delay_levels_s, tx_checks, recalls,
    recall_drain_end_ms}`` (``recalls``: one row per recall asked, :func:`_life_recall`;
    ``recall_drain_end_ms``: the drain consumers still ran then, 3 s past the recalled messages'
    due second).
    """
    h.start_namesrv()
    # transactionCheckMax far above the checks a slow run makes: an unknown transaction stays a half
    # (not moved to TRANS_CHECK_MAX_TIME_TOPIC) until the snapshot
    h.add_broker("broker-a", enablePropertyFilter="true", transactionCheckInterval=5000,
                 transactionTimeOut=2000, transactionCheckMax=1000, flushConsumerOffsetInterval=500,
                 flushDelayOffsetInterval=500, timerWheelEnable="true", enablePopBufferMerge="false",
                 enableRetryTopicV2="false", recallMessageEnable="true",
                 mappedFileSizeTimerLog=LIFE_TIMERLOG_FILE_SIZE, messageDelayLevel=LIFE_DELAY_LEVELS,
                 timerFlushIntervalMs=LIFE_TIMER_FLUSH_MS)
    h.start_broker("broker-a")
    h.start_client()
    h.create_topic(LIFE_TOPIC, 2)
    h.client("disable_group", group=LIFE_OFF_GROUP, brokers=[b["addr"] for b in h.brokers.values()])
    _life_subscribe_all(h, "live")
    time.sleep(3)              # the SQL filter registered before the first message
    plain = life_messages("plain", 20)
    for m in plain[::5]:
        m["properties"]["fail"] = "true"
    h.send(plain)
    h.send([m | {"delay_level": 1 + i % 3} for i, m in enumerate(life_messages("delay", 9))])
    h.send([m | {"timer_delay_ms": 2000 + 500 * i} for i, m in enumerate(life_messages("timer", 4))])
    txs = life_messages("tx", 9)
    for i, m in enumerate(txs):
        m["tx"] = ("commit", "rollback", "unknown")[i % 3]
    h.client("tx_send", out=h.sent_path, messages=txs)
    fails = {m["keys"][0] for m in plain if m["properties"].get("fail")}
    _life_wait(h, "the failed messages' last retry", lambda rs: fails <= {
        r["keys"] for r in rs if r["group"] == LIFE_FAIL_GROUP and r["reconsume_times"] == LIFE_MAX_RECONSUME})
    time.sleep(4)              # the delays delivered, the DLQ written, a transaction check or two
    others = [g for g in LIFE_GROUPS if g != LIFE_OFF_GROUP]
    h.drain(others)
    _life_pop(h, invisible_ms=LIFE_POP_INVISIBLE_MS, unacked_every=LIFE_POP_UNACKED_EVERY, until_empty=True)
    retrying = life_messages("retrying", 4, properties={"fail": "true"})
    h.send(retrying)
    _life_pop(h, invisible_ms=LIFE_POP_SHORT_INVISIBLE_MS, unacked_every=0, until_count=LIFE_POP_REVIVED)
    wanted = {m["keys"][0] for m in retrying}
    _life_wait(h, "the first failure of the retrying messages", lambda rs: wanted <= {
        r["keys"] for r in rs if r["group"] == LIFE_FAIL_GROUP})
    h.unsubscribe(list(LIFE_GROUPS))     # the fail group's retries stay on their way
    h.send(life_messages("pending", 6))
    h.send([m | {"delay_level": LIFE_FAR_LEVEL} for m in life_messages("far", 3)])
    h.send([m | {"timer_delay_ms": LIFE_FAR_DELAY_S * 1000} for m in life_messages("far-timer", 2)])
    far_sent = time.time()
    time.sleep(1.5)            # consumerOffset.json and delayOffset.json flushed
    _life_wait_revived(h, LIFE_POP_REVIVED)
    tx_checks = h.client("tx_checks")["checks"]
    recalls = _life_recall(h)
    time.sleep(LIFE_TIMER_FLUSH_MS / 1000 + 0.5)    # the timer wheel file flushed after the recalls
    h.snapshot()
    # the broker fires a timer message at TIMER_OUT_MS, its asked time floored to the second; the
    # messages meant to be still scheduled in the copy must not have come due before it ended
    recall_sends = _life_sent(h, "recall-timer-")
    due = min(r["deliver_ms"] for r in recall_sends) // 1000 * 1000
    far_due = min(s["deliver_ms"] // 1000 * 1000 if s.get("timer_delay_ms") else s["sent_ms"] + LIFE_FAR_DELAY_S * 1000
                  for s in _life_sent(h, "far-"))
    for what, when in (("the recall timers'", due), ("the far messages'", far_due)):
        if h.copied_ms > when - 1000:
            raise HarnessError(f"lifecycle: the store was copied at {h.copied_ms}, too close to {what} due time "
                               f"({when}): they may have fired before it")
    _life_subscribe_all(h, "drain")
    time.sleep(max(0.0, far_sent + LIFE_FAR_DELAY_S + 3 - time.time()))   # the far delays delivered
    h.drain(others)
    # the drain waits on the topic's queues only: the retries waiting at the snapshot come through
    # the group's retry topic, and a loaded machine can take longer to deliver them
    _life_wait(h, "the redelivery of the retries waiting at the snapshot", lambda rs: wanted <= {
        r["keys"] for r in rs if r["group"] == LIFE_FAIL_GROUP and r["phase"] == "drain" and r["reconsume_times"] >= 1})
    kept = {f"recall-timer-{i}" for i in range(LIFE_RECALL_TIMERS) if i not in LIFE_RECALLED}
    _life_wait(h, "the delivery of the timer messages not recalled", lambda rs: kept <= {
        r["keys"] for r in rs if r["group"] == "GID_LIFE_ALL" and r["phase"] == "drain"},
        timeout_s=max(0.0, due / 1000 - time.time()) + 240)
    # the kept ones arrived: the timer reached their second; give the recalled ones' seconds time too
    last_due = max(r["deliver_ms"] for r in recall_sends) // 1000 * 1000
    time.sleep(max(0.0, last_due / 1000 + 3 - time.time()))
    recall_drain_end_ms = int(time.time() * 1000)
    h.unsubscribe(list(LIFE_GROUPS))
    levels = h.brokers["broker-a"]["config"]["messageDelayLevel"].split()
    h.extra["lifecycle"] = {"topic": LIFE_TOPIC, "fail_group": LIFE_FAIL_GROUP, "off_group": LIFE_OFF_GROUP,
                            "pop_group": LIFE_POP_GROUP, "pop_retry_topic": LIFE_POP_RETRY_TOPIC,
                            "max_reconsume_times": LIFE_MAX_RECONSUME,
                            "delay_levels_s": [int(x.rstrip("s")) for x in levels], "tx_checks": tx_checks,
                            "recalls": recalls, "recall_drain_end_ms": recall_drain_end_ms}


NEWSTORE_TOPIC = "NewStoreTopic"
NEWSTORE_PRIORITY_TOPIC = "PriorityTopic"
NEWSTORE_PRIORITY_QUEUES = 4
NEWSTORE_LITE_TOPIC = "LiteParentTopic"
NEWSTORE_LITE_CHILD = "child"
NEWSTORE_GROUP = "GID_NEW_ALL"
#: The first release each of newstore's features is in (docs/formats.md#releases-after-533).
NEWSTORE_RELEASE = "5.5.0"


def scenario_newstore(h: Harness) -> None:
    """What releases after 5.3.3 write (docs/formats.md#releases-after-533), on one broker of
    5.5.0 or later: the message RocksDB's three families on (``indexRocksDBEnable``,
    ``timerRocksDBEnable`` with the timer wheel, ``transRocksDBEnable`` without
    ``transWriteOriginTransHalfEnable``), a ``PRIORITY`` topic
    (RIP-80) and a ``LITE`` topic (RIP-83). Plain messages with keys go to one topic, which a
    tag group receives; timer messages due an hour later, transactions committed and left
    unresolved, priority messages (priorities 0 to 6 over 4 queues) and Lite messages go to
    theirs; then the store is copied. ``broker.json`` gets ``newstore`` = the topics' names."""
    if tuple(map(int, h.version.split("."))) < tuple(map(int, NEWSTORE_RELEASE.split("."))):
        raise HarnessError(f"scenario newstore needs RocketMQ {NEWSTORE_RELEASE} or later, not {h.version}")
    h.start_namesrv()
    h.add_broker("broker-a", timerWheelEnable="true", timerRocksDBEnable="true", transRocksDBEnable="true",
                 transWriteOriginTransHalfEnable="false",    # else the halves still go to the 5.3.3 topics
                 indexRocksDBEnable="true", enableLmq="true", enableMultiDispatch="true",
                 flushConsumerOffsetInterval=500)
    h.start_broker("broker-a")
    h.start_client()
    h.create_topic(NEWSTORE_TOPIC, 2)
    h.create_topic(NEWSTORE_PRIORITY_TOPIC, NEWSTORE_PRIORITY_QUEUES, attributes={"+message.type": "PRIORITY"})
    h.create_topic(NEWSTORE_LITE_TOPIC, 1, attributes={"+message.type": "LITE"})
    h.subscribe(NEWSTORE_GROUP, NEWSTORE_TOPIC, "TAG", "*", "live")
    plain = [{"topic": NEWSTORE_TOPIC, "tags": "TagA", "keys": [f"new-{i}"], "body": f"new {i}"} for i in range(20)]
    h.send(plain)
    h.send([{"topic": NEWSTORE_TOPIC, "tags": "TagT", "keys": [f"new-timer-{i}"], "body": f"timer {i}",
             "timer_delay_ms": 3_600_000} for i in range(3)])
    h.client("tx_send", out=h.sent_path, messages=[
        {"topic": NEWSTORE_TOPIC, "tags": "TagX", "keys": [f"new-tx-{i}"], "body": f"tx {i}",
         "tx": ("commit", "unknown")[i % 2]} for i in range(4)])
    h.send([{"topic": NEWSTORE_PRIORITY_TOPIC, "tags": "TagP", "keys": [f"new-priority-{p}"], "body": f"priority {p}",
             "priority": p} for p in range(7)])
    h.send([{"topic": NEWSTORE_LITE_TOPIC, "tags": "TagL", "keys": [f"new-lite-{i}"], "body": f"lite {i}",
             "lite_topic": NEWSTORE_LITE_CHILD} for i in range(5)])
    h.drain([NEWSTORE_GROUP])
    h.unsubscribe([NEWSTORE_GROUP])
    time.sleep(2)
    h.snapshot(restart=False)
    h.extra["newstore"] = {"topic": NEWSTORE_TOPIC, "priority_topic": NEWSTORE_PRIORITY_TOPIC,
                           "priority_queues": NEWSTORE_PRIORITY_QUEUES, "lite_topic": NEWSTORE_LITE_TOPIC,
                           "lite_child": NEWSTORE_LITE_CHILD}


# -- random: a generated configuration and workload (docs/testing.md#random) ----------------------

RANDOM_TOPIC = "RandTopic"
RANDOM_QUEUES = 3
#: The space ``random`` draws from, one axis a line: name -> its values. docs/testing.md#random holds
#: the same table. A value that does not apply to a drawn configuration (``applies``) is not drawn:
#: ``generated`` leaves the axis out rather than record a setting the run ignores.
RANDOM_CONFIG_AXES: dict[str, tuple] = {
    "commitlog": ("classic", "dledger"),                  # enableDLegerCommitLog, a one-node group per broker
    "store_type": ("files", "rocksdb"),                   # storeType default / defaultRocksDB
    "consume_queue_ext": (False, True),                   # enableConsumeQueueExt (files only: RocksDB keeps none)
    "calc_filter_bitmap": (False, True),                  # enableCalcFilterBitMap
    "property_filter": (False, True),                     # enablePropertyFilter (SQL92 groups need it)
    "commitlog_file_kib": (64, 1024),                     # mappedFileSizeCommitLog
    "cq_file_units": (40, 400),                           # mappedFileSizeConsumeQueue / 20
    "ext_file_kib": (16, 64),                             # mappedFileSizeConsumeQueueExt (with ext)
    "index_file": ("small", "default"),                   # maxIndexNum/maxHashSlotNum 300/64 or 4000/1000
    "delay_levels": ("1s 2s 1s 2s 3s 10m 1h 2h",          # messageDelayLevel: levels 1-5 in seconds (the
                     "2s 1s 2s 1s 2s 5m 30m 1h 3h",       # short delays and the retries), the others far
                     "1s 1s 3s 2s 1s 90s 20m 6h"),        # (still scheduled when the store is copied)
    "timer_wheel": (False, True),                         # timerWheelEnable (recallMessageEnable with it)
    "tx_check_interval_ms": (2000, 6000),                 # transactionCheckInterval (transactionCheckMax 1000)
    "max_reconsume_times": (1, 2),                        # the failing groups' maxReconsumeTimes
    "brokers": (1, 2),                                    # one broker, or two of one cluster serving the topic
    "tx_check_max": (1, 2, 1000),                         # transactionCheckMax: past it an unresolved half goes
                                                          # to TRANS_CHECK_MAX_TIME_TOPIC (transactions only)
    "batch_topic": (False, True),                         # a second topic, BatchCQ, of batch sends (classic, files)
    "lmq": (False, True),                                 # enableLmq + enableMultiDispatch: LMQ queues, pull groups
}
RANDOM_WORKLOAD_AXES: dict[str, tuple] = {
    "messages": (40, 120),                                # plain messages of the first batch
    "tags": ("plain", "collision", "long_non_ascii"),     # TagA..TagC and none; + Aa/BB; + a 300-char and a non-ASCII tag
    "tag_groups": ("star_only", "lists"),                 # tag groups: "*" alone, or "*" and || lists
    "sql_groups": (1, 3),                                 # SQL92 groups over every property type (property_filter only)
    "keys": ("own", "shared"),                            # one key per message, or a key several carry too
    "delays": (False, True),                              # delay-level messages: short ones and far ones
    "timers": ("fire", "recall"),                         # timer messages (timer_wheel only): short and far, far ones recalled
    "transactions": (False, True),                        # committed, rolled back and unresolved halves
    "fail_share": (0.0, 0.3),                             # share of plain messages GID_RND_FAIL fails (retries, DLQ)
    "late_group": (False, True),                          # a group registered after the first batch
    "disabled_group": (False, True),                      # a group disabled through the admin API
    "retry_never_committed": (False, True),               # a group that fails, never pulls its retry queues (fail_share > 0)
    "copy_at": (0.0, 0.5, 1.0),                           # share of the last batch sent before the store is copied
    "pop_group": (False, True),                           # a POP group on the topic, some of its pops un-acked
    "read_only_send_back": (False, True),                 # broker-b read-only while GID_RND_NC sends failures
                                                          # back: the client's own send puts them on broker-a
}
#: Axes added after the first seeds were pinned: each seed draws them after ``message_seed``, so every
#: earlier axis and the messages of a seed stay what they were (PINNED_SEEDS keep what they found).
RANDOM_LATER_AXES = ("tx_check_max", "batch_topic", "lmq", "pop_group", "read_only_send_back")
RANDOM_INDEX_FILE = {"small": (300, 64), "default": (4000, 1000)}
RANDOM_READ_ONLY_PERM, RANDOM_READ_WRITE_PERM = 4, 6    # brokerPermission: PERM_READ, PERM_READ | PERM_WRITE
RANDOM_SHORT_LEVELS = (1, 2)       # the short delay-level messages' levels (seconds in every string)
RANDOM_FAR_TIMER_MS = 540_000      # far timers: due nine minutes after they are sent (a due bucket's middle)
RANDOM_FAIL_GROUP = "GID_RND_FAIL"
RANDOM_NC_GROUP = "GID_RND_NC"
RANDOM_OFF_GROUP = "GID_RND_OFF"
RANDOM_LATE_GROUP = "GID_RND_LATE"
RANDOM_POP_GROUP = "GID_RND_POP"
#: The POP group pops with this invisible time and leaves every RANDOM_POP_UNACKED_EVERY-th message
#: un-acked: those are in flight at the copy, due long after it.
RANDOM_POP_INVISIBLE_MS = 900_000
RANDOM_POP_UNACKED_EVERY = 4
#: The BatchCQ topic's groups (topic BATCH_TOPIC, batch sends of ``batch_messages``): name -> (type, expression).
RANDOM_BATCH_GROUPS = {"GID_RND_BATCH_STAR": ("TAG", "*"), "GID_RND_BATCH_ZERO": ("TAG", f"TagA || {ZERO_HASH_TAG}")}
RANDOM_BATCH_SQL_GROUP = ("GID_RND_BATCH_SQL", "a IS NULL OR a > 8")     # with property_filter
#: transactionCheckMax when the draw has no tx_check_max: far above the checks a run makes.
RANDOM_TX_CHECK_MAX_DEFAULT = 1000
TRANS_CHECK_MAX_TIME_TOPIC = "TRANS_CHECK_MAX_TIME_TOPIC"    # where the broker discards a half past the limit
RANDOM_EXTRA_STREAM = 0x5EED    # the later axes' messages: random.Random(message_seed ^ this)
RANDOM_LONG_TAG = "L" * 300
RANDOM_NON_ASCII_TAG = "标签-ü"


def random_applies(axis: str, drawn: dict) -> bool:
    """Whether ``axis`` applies to what was drawn before it (else it is not drawn)."""
    if axis == "consume_queue_ext":
        return drawn["store_type"] == "files"
    if axis == "ext_file_kib":
        return drawn.get("consume_queue_ext") is True
    if axis == "sql_groups":
        return drawn["property_filter"]
    if axis == "timers":
        return drawn["timer_wheel"]
    if axis == "retry_never_committed":
        return drawn["fail_share"] > 0
    if axis == "tx_check_max":
        return drawn["transactions"]
    if axis == "batch_topic":
        # a defaultRocksDB store keeps every queue in RocksDB, which has no BatchCQ: the broker would
        # store the inner batches in a plain queue; a DLedger CommitLog dispatches an inner batch
        # as one message, so its BatchCQ units do not follow and its consumers never drain (seed
        # 185843; docs/testing.md#random)
        return drawn["store_type"] == "files" and drawn["commitlog"] == "classic"
    if axis == "lmq":
        return drawn["brokers"] == 1    # the harness's LMQ pull consumers read one broker's queues
    if axis == "pop_group":
        return drawn["timer_wheel"]     # the broker refuses every pop without its timer wheel
    if axis == "read_only_send_back":
        return drawn["brokers"] == 2 and drawn.get("retry_never_committed") is True
    return True


def random_draw(seed: int) -> dict:
    """``{"seed", "config", "workload"}`` drawn from the axes; the same seed draws the same run.

    Every axis takes one value from the seed's stream, whether or not it applies, so an axis
    left out of a draw changes no other's value; the axes of :data:`RANDOM_LATER_AXES` come after
    ``message_seed``, so adding them changed no earlier draw."""
    rng = random.Random(seed)
    drawn: dict = {}
    out: dict = {"seed": seed, "config": {}, "workload": {}}
    parts = [(part, axis, values) for part, axes in (("config", RANDOM_CONFIG_AXES), ("workload", RANDOM_WORKLOAD_AXES))
             for axis, values in axes.items()]

    def draw(part: str, axis: str, values: tuple) -> None:
        value = values[rng.randrange(len(values))]
        if random_applies(axis, drawn):
            drawn[axis] = out[part][axis] = value

    for part, axis, values in parts:
        if axis not in RANDOM_LATER_AXES:
            draw(part, axis, values)
    out["message_seed"] = rng.randrange(2**31)
    for part, axis, values in parts:
        if axis in RANDOM_LATER_AXES:
            draw(part, axis, values)
    return out


def random_broker_settings(config: dict, name: str) -> dict:
    """The broker properties of a drawn configuration."""
    index_num, slot_num = RANDOM_INDEX_FILE[config["index_file"]]
    s = {
        "mappedFileSizeCommitLog": config["commitlog_file_kib"] * 1024,
        "mappedFileSizeConsumeQueue": 20 * config["cq_file_units"],
        "maxIndexNum": index_num, "maxHashSlotNum": slot_num,
        "enablePropertyFilter": str(config["property_filter"]).lower(),
        "enableCalcFilterBitMap": str(config["calc_filter_bitmap"]).lower(),
        "enableConsumeQueueExt": str(config.get("consume_queue_ext", False)).lower(),
        "messageDelayLevel": config["delay_levels"],
        "timerWheelEnable": str(config["timer_wheel"]).lower(),
        "transactionCheckInterval": config["tx_check_interval_ms"], "transactionTimeOut": 1000,
        "transactionCheckMax": config.get("tx_check_max", RANDOM_TX_CHECK_MAX_DEFAULT),
        "flushConsumerOffsetInterval": 500, "flushDelayOffsetInterval": 500,
    }
    if "ext_file_kib" in config:
        s["mappedFileSizeConsumeQueueExt"] = config["ext_file_kib"] * 1024
    if config["store_type"] == "rocksdb":
        s["storeType"] = "defaultRocksDB"
    if config["timer_wheel"]:
        s.update(recallMessageEnable="true", timerFlushIntervalMs=1000, mappedFileSizeTimerLog=4096)
    if config["commitlog"] == "dledger":
        s.update(enableDLegerCommitLog="true", dLegerGroup=name, dLegerPeers=f"n0-{LOOPBACK}:{free_port()}",
                 dLegerSelfId="n0")
    if config.get("batch_topic"):
        s["mapperFileSizeBatchConsumeQueue"] = 46 * 20      # small BatchCQ files, as in batch
    if config.get("lmq"):
        s.update(enableLmq="true", enableMultiDispatch="true")
    return s


def random_groups(gen: dict) -> dict[str, dict]:
    """The push groups of a drawn workload: name -> {type, expression, role, topic}."""
    w, c = gen["workload"], gen["config"]
    groups = {"GID_RND_ALL": {"type": "TAG", "expression": "*", "role": "plain"}}
    if w["tag_groups"] == "lists":
        groups["GID_RND_AB"] = {"type": "TAG", "expression": "TagA || TagB", "role": "plain"}
        if w["tags"] == "collision":
            groups["GID_RND_AA"] = {"type": "TAG", "expression": "Aa", "role": "plain"}
        if w["tags"] == "long_non_ascii":
            groups["GID_RND_WIDE"] = {"type": "TAG", "expression": f"{RANDOM_NON_ASCII_TAG} || {RANDOM_LONG_TAG}",
                                      "role": "plain"}
    for g in list(FILTER_SQL_GROUPS)[:w.get("sql_groups", 0)]:
        groups[g.replace("GID_SQL", "GID_RND_SQL")] = {"type": "SQL92", "expression": FILTER_SQL_GROUPS[g],
                                                       "role": "plain"}
    if w["fail_share"] > 0:
        groups[RANDOM_FAIL_GROUP] = {"type": "TAG", "expression": "*", "role": "fail"}
    if w.get("retry_never_committed"):
        groups[RANDOM_NC_GROUP] = {"type": "TAG", "expression": "*", "role": "never_commits_retry"}
    if w["disabled_group"]:
        groups[RANDOM_OFF_GROUP] = {"type": "TAG", "expression": "*", "role": "disabled"}
    if w["late_group"]:
        late = ({"type": "SQL92", "expression": LATE_SQL_GROUP[1]} if c["property_filter"]
                else {"type": "TAG", "expression": "TagB || TagC"})
        groups[RANDOM_LATE_GROUP] = {**late, "role": "late"}
    for g in groups.values():
        g["topic"] = RANDOM_TOPIC
    if c.get("batch_topic"):
        batch = dict(RANDOM_BATCH_GROUPS)
        if c["property_filter"]:
            batch[RANDOM_BATCH_SQL_GROUP[0]] = ("SQL92", RANDOM_BATCH_SQL_GROUP[1])
        for g, (type_, expression) in batch.items():
            groups[g] = {"type": type_, "expression": expression, "role": "plain", "topic": BATCH_TOPIC}
    return groups


def random_messages(rng: random.Random, gen: dict, prefix: str, n: int) -> list[dict]:
    """Plain messages of the drawn tags, keys and properties (every type the grammar reads, some
    malformed, as in ``filters``); a ``fail_share`` of them carry ``fail=true``."""
    w = gen["workload"]
    tags = ["TagA", "TagB", "TagC", None]
    if w["tags"] == "collision":
        tags += ["Aa", "BB"]
    elif w["tags"] == "long_non_ascii":
        tags += [RANDOM_LONG_TAG, RANDOM_NON_ASCII_TAG]
    out = []
    for i, m in enumerate(filter_messages(rng, RANDOM_TOPIC, 0, n)):
        keys = [f"{prefix}-{i}"] + ([f"shared-{i % 7}"] if w["keys"] == "shared" and i % 3 == 0 else [])
        props = m["properties"]
        if rng.random() < w["fail_share"]:
            props["fail"] = "true"
        out.append(m | {"tags": rng.choice(tags), "keys": keys, "body": f"{prefix} message {i}"})
    return out


def _first_key(received: dict) -> str | None:
    """A received line's first key (the client joins a message's keys with spaces)."""
    return received["keys"].split(" ")[0] if received.get("keys") else None


def _random_wait(h: Harness, what: str, done, timeout_s: float) -> None:
    deadline = time.time() + timeout_s
    while not done(_life_received(h)):
        if time.time() > deadline:
            raise HarnessError(f"random: {what} did not happen in {timeout_s:.0f} s")
        time.sleep(0.3)


def _random_pop(h: Harness, names: list[str]) -> None:
    """The POP group pops every queue of the topic on each broker until a pop finds nothing
    (Client.java ``pop``, invisible :data:`RANDOM_POP_INVISIBLE_MS`), acking all but every
    :data:`RANDOM_POP_UNACKED_EVERY`-th message: those are in flight at the copy."""
    h.groups.append({"group": RANDOM_POP_GROUP, "topic": RANDOM_TOPIC, "type": "TAG", "expression": "*",
                     "consumer": "pop", "role": "pop"})
    for name in names:
        h.client("pop", group=RANDOM_POP_GROUP, topic=RANDOM_TOPIC, addr=h.brokers[name]["addr"], broker=name,
                 max_nums=8, phase="live", out=h.received_path, invisible_ms=RANDOM_POP_INVISIBLE_MS,
                 unacked_every=RANDOM_POP_UNACKED_EVERY, until_empty=True)


def _random_wait_check_limit(h: Harness, names: list[str], limit: int, interval_ms: int,
                             timeout_s: float = 120) -> None:
    """Until the broker has discarded every unresolved half past ``limit`` checks: the producer
    answered ``limit`` checks of each (UNKNOW), a check pass later its copy went to
    TRANS_CHECK_MAX_TIME_TOPIC (docs/paths.md#transactions). Halves of resolved transactions may go
    there too (the broker re-puts them when its check runs before their op records), so each
    broker's topic must hold at least its unresolved ones, one check interval after the last check."""
    unknown = [s for s in _life_sent(h, "tx-") if s.get("tx") == "unknown"]
    deadline = time.time() + timeout_s
    while not all(h.client("tx_checks")["checks"].get(s["uniq_key"], 0) >= limit for s in unknown):
        if time.time() > deadline:
            raise HarnessError(f"random: the broker did not check the unresolved transactions {limit} times in "
                               f"{timeout_s:.0f} s")
        time.sleep(0.5)
    time.sleep(interval_ms / 1000 + 1.5)     # the next check pass discards them
    for name in names:
        want = sum(1 for s in unknown if s.get("broker") == name)
        while h.client("max_offset", addr=h.brokers[name]["addr"], broker=name, topic=TRANS_CHECK_MAX_TIME_TOPIC,
                       queue_id=0)["max_offset"] < want:
            if time.time() > deadline:
                raise HarnessError(f"random: {name} did not discard its {want} unresolved transaction(s) past "
                                   f"transactionCheckMax {limit} in {timeout_s:.0f} s")
            time.sleep(0.5)


def scenario_random(h: Harness, seed: int = 0) -> None:
    """A configuration and a workload drawn from :data:`RANDOM_CONFIG_AXES` and
    :data:`RANDOM_WORKLOAD_AXES` by ``seed`` (:func:`random_draw`), run on the real broker.

    Every group consumes while a first batch is sent (plain messages, short delay-level and timer
    messages, transactions); the late group subscribes after it and a second batch follows. The
    failing group fails the ``fail=true`` messages until its DLQ; the group that never commits on
    its retry queue fails them once and stops. The consumers drain and stop; a last batch (plain
    messages, far delays and timers, some recalled) is sent, ``copy_at`` of it before the stores are
    copied and the rest after; every group then drains, the retries waiting included.

    The later axes (:data:`RANDOM_LATER_AXES`): batch sends to the BatchCQ topic (its groups in
    :data:`RANDOM_BATCH_GROUPS`) and LMQ messages go with the first and the last batch, the LMQ
    pull consumers read their queues after each drain; the POP group pops every broker once the
    first batch is drained (:func:`_random_pop`); with ``tx_check_max`` below
    :data:`RANDOM_TX_CHECK_MAX_DEFAULT` the run waits, before the last batch, until the broker has
    discarded every unresolved half (:func:`_random_wait_check_limit`).
    ``broker.json`` gets ``generated`` = the draw (enough to replay it from the seed) and
    ``random`` = ``{topic, fail_group, max_reconsume_times, delay_levels_ms, far_timer_ms, recalls,
    sent_after_copy, tx_check_max, batch_topic, lmq_groups, pop_group}``.
    """
    gen = random_draw(seed)
    gen["rocketmq"] = h.version
    c, w = gen["config"], gen["workload"]
    rng = random.Random(gen["message_seed"])
    names = ["broker-a", "broker-b"][:c["brokers"]]
    h.start_namesrv()
    # two RocksDB stores in one JVM are not isolated: 5.3.3's JVM died in RocksDB's native code
    # (SIGSEGV in ScheduleMessageTimerThread; seeds 114436 and 175990), so each such broker gets its own
    own_jvm = c["brokers"] > 1 and c["store_type"] == "rocksdb"
    for name in names:
        h.add_broker(name, own_jvm=own_jvm, **random_broker_settings(c, name))
    h.start_brokers(names)
    h.start_client()
    h.create_topic(RANDOM_TOPIC, RANDOM_QUEUES)
    # the later axes' messages come from a stream of their own: a seed that draws none of them sends
    # what it sent before they were added
    extra = random.Random(gen["message_seed"] ^ RANDOM_EXTRA_STREAM)
    if c.get("batch_topic"):
        h.create_topic(BATCH_TOPIC, 2, attributes={"+queue.type": "BatchCQ"})
    if c.get("lmq"):
        h.create_topic(LMQ_PARENT_TOPIC, 2)
        for queue, group in LMQ_GROUPS.items():
            h.groups.append({"group": group, "topic": queue, "type": "TAG", "expression": "*", "consumer": "lmq-pull",
                             "parent_topic": LMQ_PARENT_TOPIC, "broker": names[0], "role": "lmq"})

    def pull_lmq(phase: str) -> None:
        for queue, group in LMQ_GROUPS.items() if c.get("lmq") else ():
            h.client("lmq_pull", group=group, queue=queue, parent_topic=LMQ_PARENT_TOPIC, broker=names[0],
                     phase=phase, out=h.received_path)

    def send_extra(start: int, batches: int, lmq: int) -> None:
        if c.get("batch_topic"):
            h.client("batch_send", out=h.sent_path, batches=batch_messages(extra, start, batches))
        if c.get("lmq"):
            h.send(lmq_messages(extra, start, lmq))

    groups = random_groups(gen)
    addrs = [b["addr"] for b in h.brokers.values()]
    if RANDOM_OFF_GROUP in groups:
        h.client("disable_group", group=RANDOM_OFF_GROUP, brokers=addrs)
    max_rc = c["max_reconsume_times"]

    def subscribe(g: str, phase: str) -> None:
        spec = groups[g]
        tuning = {}
        if phase == "live" and spec["role"] == "fail":
            tuning = {"fail_property": "fail", "max_reconsume_times": max_rc}
        elif spec["role"] == "fail":
            tuning = {"max_reconsume_times": max_rc}
        h.subscribe(g, spec["topic"], spec["type"], spec["expression"], phase, **tuning)

    early = [g for g, s in groups.items() if s["role"] not in ("late", "never_commits_retry")]
    for g in early:
        subscribe(g, "live")
    time.sleep(3)                  # the SQL filters registered before the first message
    plain = random_messages(rng, gen, "plain", w["messages"])
    h.send(plain)
    if w["delays"]:
        h.send([m | {"delay_level": RANDOM_SHORT_LEVELS[i % 2]}
                for i, m in enumerate(random_messages(rng, gen, "delay", 6))])
    if "timers" in w:
        h.send([m | {"timer_delay_ms": 1500 + 400 * i} for i, m in enumerate(random_messages(rng, gen, "timer", 4))])
    if w["transactions"]:
        txs = random_messages(rng, gen, "tx", 9)
        for i, m in enumerate(txs):
            m["tx"] = ("commit", "rollback", "unknown")[i % 3]
            m["properties"].pop("fail", None)
        h.client("tx_send", out=h.sent_path, messages=txs)
    send_extra(0, 12, 20)
    if RANDOM_LATE_GROUP in groups:
        subscribe(RANDOM_LATE_GROUP, "live")
        time.sleep(3)
        h.send(random_messages(rng, gen, "late", w["messages"] // 2))
    fails = {m["keys"][0] for m in plain if m["properties"].get("fail")}
    if RANDOM_FAIL_GROUP in groups:
        _random_wait(h, "the failed messages' last retry", lambda rs: fails <= {
            _first_key(r) for r in rs if r["group"] == RANDOM_FAIL_GROUP and r["reconsume_times"] == max_rc}, 120)
    if RANDOM_NC_GROUP in groups:
        # a pull consumer reads the topic, sends the fail=true messages back and commits the topic's
        # queues only: the group never pulls (so never commits on) its retry queues
        h.groups.append({"group": RANDOM_NC_GROUP, "topic": RANDOM_TOPIC, "type": "TAG", "expression": "*",
                         "consumer": "push"})
        if w.get("read_only_send_back"):
            # broker-b refuses the send-backs of its messages (NO_PERMISSION): the client sends each
            # retry through its own producer, to the brokers the retry topic's route says are writable
            # (docs/paths.md#retries-on-another-broker); broker-b is writable again after. The client
            # needs that route: broker-a gets the retry topic as a broker makes it (one queue, read and
            # write), which it would otherwise make at the group's first send-back there
            h.client("create_topic", topic=f"%RETRY%{RANDOM_NC_GROUP}", queues=1, attributes=None,
                     brokers=[h.brokers[names[0]]["addr"]])
            h.broker_permission(names[1], RANDOM_READ_ONLY_PERM)
        h.client("pull_fail", group=RANDOM_NC_GROUP, topic=RANDOM_TOPIC, fail_property="fail", phase="live",
                 out=h.received_path)
        if w.get("read_only_send_back"):
            h.broker_permission(names[1], RANDOM_READ_WRITE_PERM)
    time.sleep(3)                  # the short delays and timers delivered, the DLQ written, a check or two
    consuming = [g for g, s in groups.items() if s["role"] not in ("disabled", "never_commits_retry")]
    h.drain(consuming)
    pull_lmq("live")
    if w.get("pop_group"):
        _random_pop(h, names)
    h.unsubscribe([g for g in groups if groups[g]["role"] != "never_commits_retry"])
    if c.get("tx_check_max", RANDOM_TX_CHECK_MAX_DEFAULT) < RANDOM_TX_CHECK_MAX_DEFAULT:
        _random_wait_check_limit(h, names, c["tx_check_max"], c["tx_check_interval_ms"])
    last = random_messages(rng, gen, "last", w["messages"] // 2)
    far: list[dict] = []
    levels = c["delay_levels"].split()
    if w["delays"]:
        far += [m | {"delay_level": 6 + i % (len(levels) - 5)} for i, m in enumerate(random_messages(rng, gen, "far", 4))]
    if "timers" in w:
        far += [m | {"timer_delay_ms": RANDOM_FAR_TIMER_MS + 1000 * i}
                for i, m in enumerate(random_messages(rng, gen, "far-timer", 4))]
    before = int(len(last) * w["copy_at"])
    h.send(last[:before] + far)
    send_extra(10000, 6, 10)       # pending at the copy: the drain receives them
    recalls = []
    if w.get("timers") == "recall":
        sent = [r for r in _life_sent(h, "far-timer-")]
        asked = sent[::2]
        answers = h.client("recall", topic=RANDOM_TOPIC, handles=[r["recall_handle"] for r in asked])["recalls"]
        recalls = [{"keys": r["keys"][0], "uniq_key": r["uniq_key"], "deliver_ms": r["deliver_ms"], **a}
                   for r, a in zip(asked, answers)]
        if not all(r["ok"] for r in recalls):
            raise HarnessError(f"random: the broker refused a recall: {recalls}")
        time.sleep(1.5)            # the timer wheel flushed after the recalls
    time.sleep(1.5)                # consumerOffset.json and delayOffset.json flushed
    h.snapshot()
    h.send(last[before:])          # after the copy: the drain receives them, the copy has none
    for g in groups:
        if groups[g]["role"] != "disabled":
            subscribe(g, "drain")
    short = max(int(x[:-1]) * {"s": 1, "m": 60, "h": 3600}[x[-1]] for x in levels[:5])
    time.sleep(short + 3)          # the retries scheduled at the copy came due
    drained = [g for g, s in groups.items() if s["role"] != "disabled"]
    h.drain(drained)
    pull_lmq("drain")
    if RANDOM_NC_GROUP in groups:  # its retries come through its retry topic, which the drain does not wait on
        _random_wait(h, "the never-committing group's retries", lambda rs: fails <= {
            _first_key(r) for r in rs if r["group"] == RANDOM_NC_GROUP and r["phase"] == "drain"
            and r["reconsume_times"] >= 1}, 60)
    h.unsubscribe([g for g in groups if groups[g]["role"] != "disabled"])
    for g in h.groups:
        g.setdefault("role", groups.get(g["group"], {}).get("role"))
    h.extra["generated"] = gen
    h.extra["random"] = {"topic": RANDOM_TOPIC, "fail_group": RANDOM_FAIL_GROUP, "max_reconsume_times": max_rc,
                         "delay_levels_ms": [delay_ms(x) for x in levels], "far_timer_ms": RANDOM_FAR_TIMER_MS,
                         "recalls": recalls, "sent_after_copy": len(last) - before,
                         "tx_check_max": c.get("tx_check_max", RANDOM_TX_CHECK_MAX_DEFAULT),
                         "batch_topic": BATCH_TOPIC if c.get("batch_topic") else None,
                         "lmq_groups": LMQ_GROUPS if c.get("lmq") else {},
                         "pop_group": RANDOM_POP_GROUP if w.get("pop_group") else None}


def delay_ms(level: str) -> int:
    """One ``messageDelayLevel`` entry (``"90s"``, ``"10m"``, ``"2h"``, ``"1d"``) in milliseconds."""
    return int(level[:-1]) * {"s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}[level[-1]]


def _scenario(name: str):
    """The function of scenario ``name``: in this module, or in its own ``scenario_<name>.py`` beside it."""
    found = globals().get(f"scenario_{name}")
    if found is None:
        if str(HERE) not in sys.path:
            sys.path.insert(0, str(HERE))
        found = getattr(importlib.import_module(f"scenario_{name}"), f"scenario_{name}")
    return found


from scenario_replicas import scenario_replicas, scenario_replicas_controller  # noqa: F401  (dispatched by name in run(); it reads this module at run time)


def run(scenario: str, out: Path, rocketmq: str | None = None, **kwargs) -> Path:
    """Builds the harness against release ``rocketmq`` (default :data:`DEFAULT_RELEASE`) if needed
    and runs one scenario on it into ``out`` (emptied first)."""
    if scenario not in SCENARIOS:
        raise HarnessError(f"unknown scenario {scenario!r} (known: {', '.join(SCENARIOS)})")
    build(rocketmq)
    out = Path(out).resolve()    # the JVMs run elsewhere: a relative --out would name another place
    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)
    with Harness(out, quick_start=scenario != "throughput", rocketmq=rocketmq) as h:
        try:
            _scenario(scenario)(h, **kwargs)
        except HarnessError as e:
            # a JVM that died in native code earlier shows up as whatever waited on it (a drain out of
            # time, a broker's stop): the crash is what failed the run (docs/testing.md#matrix)
            crashed = [c for p in h.procs if p.poll() is not None and (c := jvm_crash(h.work, p, wait_s=0))]
            if crashed and JVM_CRASHED not in str(e):
                raise HarnessError(f"{crashed[0]} (then: {e})") from e
            raise
        lost = broker_lost_writes(h.work)
        if lost:
            raise HarnessError(lost)
        h.write_broker_json()
        h.discard_stores = scenario != "live"     # the live test reads broker-a's store afterwards
    if scenario != "live":    # the copies under stores/ are what the tests read; the live test reads broker-a's
        for name in h.brokers:
            shutil.rmtree(h.work / name / "store", ignore_errors=True)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("scenario", choices=(*SCENARIOS, "build"), help="a scenario, or build: only build")
    parser.add_argument("--out", type=Path)
    parser.add_argument("--rocketmq", metavar="VERSION",
                        help=f"the RocketMQ release to run on (default {DEFAULT_RELEASE}; pinned: {', '.join(RELEASES)}); "
                             "with build: build only that one (default: every pinned release)")
    parser.add_argument("--seed", type=int, help="random: the seed that draws the configuration and workload")
    args = parser.parse_args(argv)
    if args.scenario == "random" and args.seed is None:
        parser.error("random needs --seed N")
    if args.scenario != "build" and args.out is None:
        parser.error("--out DIR is required to run a scenario")
    try:
        if args.scenario == "build":
            for version in [args.rocketmq] if args.rocketmq else RELEASES:
                build(version)
            return 0
        kwargs = {"seed": args.seed} if args.scenario == "random" else {}
        run(args.scenario, args.out, rocketmq=args.rocketmq, **kwargs)
    except HarnessError as e:
        print(f"run.py {args.scenario}: {e}", file=sys.stderr)
        return 1
    print(args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
