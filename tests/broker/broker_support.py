"""The broker harness's runs, for the tests marked ``broker`` (docs/testing.md).

Each scenario runs once per release and source version of the harness: its outputs are kept in
``build/broker-runs/<scenario>-<release>-<hash>/`` (``hash`` covers the release, tests/broker's
pom, Java sources and run.py), so the second ``make test`` pass (the pure-Python engines) and later
runs read the same stores. Which pinned release a scenario runs on is :data:`SCENARIO_RELEASES`
(``RMQFILTER_ROCKETMQ=V`` runs every scenario on release V instead; docs/testing.md#releases).
Without Java or Maven the tests fail under CI (``CI`` set) and are skipped, loudly, elsewhere.
"""
from __future__ import annotations

import collections
import contextlib
import fcntl
import json
import os
import shutil
import sys
import threading
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path

import pytest

HARNESS = Path(__file__).resolve().parent
ROOT = HARNESS.parent.parent
RUNS = ROOT / "build" / "broker-runs"

sys.path.insert(0, str(HARNESS))
import run as harness

sys.path.remove(str(HARNESS))


def require_tools() -> None:
    """Fails under CI, skips with a loud reason elsewhere, when Java or Maven is missing."""
    missing = harness.missing_tools()
    if not missing:
        return
    reason = (f"the broker harness needs Java 17 and Maven (missing: {', '.join(missing)}); "
              "the tests that hold rmqfilter against a real RocketMQ broker did NOT run")
    if os.environ.get("CI"):
        pytest.fail(reason, pytrace=False)
    warnings.warn(reason, stacklevel=2)
    pytest.skip(reason)


# Which pinned release (harness.RELEASES) each written scenario runs on in `make test`: each on
# one, so the suite keeps its time budget, and every check runs on at least one release. The
# scenarios whose checks read what changed after 5.3.3 (the timer's recall markers, RocksDB,
# BatchCQ and LMQ dispatch, recovery after a kill, a store read while the broker writes) run on
# the newest; the others, on 5.3.3. One table, shown in docs/testing.md#releases
# (tests/broker/test_broker_releases.py holds them equal).
SCENARIO_RELEASES = {
    "filters": "5.3.3",
    "modes": "5.3.3",
    "rocksdb": "5.5.1",
    "batch": "5.5.1",
    "cluster": "5.3.3",
    "lifecycle": "5.5.1",
    "crash": "5.5.1",
    "housekeeping": "5.3.3",
    "live": "5.5.1",
    "newstore": "5.5.1",
    "compaction": "5.3.3",
    "tiered": "5.3.3",
    "replicas": "5.3.3",     # and replicas@5.5.1 (tests/broker/test_broker_replicas.py)
    "replicas_controller": "5.3.3",
    "trace": "5.3.3",        # and trace@5.5.1 (tests/broker/test_broker_trace.py)
}
# Runs every scenario on this release instead of its SCENARIO_RELEASES one.
RELEASE_ENV = "RMQFILTER_ROCKETMQ"


def release(name: str) -> str:
    """The RocketMQ release scenario ``name`` runs on: ``$RMQFILTER_ROCKETMQ`` if set, else the release
    a ``random-N@V`` name gives, else its :data:`SCENARIO_RELEASES` entry (the harness's default
    release for a scenario not in it)."""
    pinned = name.partition("@")[2] or SCENARIO_RELEASES.get(name)    # random-N@V: seed N on release V
    return harness.rocketmq_version(os.environ.get(RELEASE_ENV) or pinned)


@dataclass
class Run:
    """One scenario's outputs: the store copies, what was sent and received, broker.json."""

    dir: Path
    broker: dict
    sent: list[dict]
    received: list[dict]
    first: dict[str, dict[tuple[int, int], dict]] = field(default_factory=dict)

    @property
    def release(self) -> str:
        """The RocketMQ release the run's brokers were (broker.json ``rocketmq_version``)."""
        return self.broker["rocketmq_version"]

    def store_path(self, name: str = "broker-a") -> Path:
        return self.dir / "stores" / name

    def group(self, name: str) -> dict:
        return next(g for g in self.broker["groups"] if g["group"] == name)

    def subscription(self, group: dict) -> dict:
        """Store.consume's arguments for a group: SQL92 groups by their registration alone."""
        return {} if group["type"] == "SQL92" else {"tags": group["expression"]}


def load(out: Path) -> Run:
    def lines(name):
        with open(out / name, encoding="utf-8") as f:
            return [json.loads(line) for line in f if line.strip()]

    run = Run(out, json.loads((out / "broker.json").read_text()), lines("sent.jsonl"), lines("received.jsonl"))
    first: dict[str, dict] = collections.defaultdict(dict)
    for r in run.received:     # first deliveries: a redelivered unit keeps its first line
        first[r["group"]].setdefault((r["queue_id"], r["queue_offset"]), r)
    run.first = dict(first)
    return run


_CACHE: dict[str, Run] = {}
_RUNNING: dict[str, threading.Thread] = {}
_FAILED: dict[str, str] = {}
# The scenarios whose outputs the tests read afterwards (live is read while it runs), longest
# first (their times are in docs/testing.md): they take the run slots (:func:`_slot`) in this
# order, so the last to finish are short ones. The generated runs (``random-N[@V]``, 90 to 200 s
# each) take theirs after "lifecycle" and "rocksdb" (:data:`RANDOM_RANK`).
CACHED_SCENARIOS = ("lifecycle", "rocksdb", "cluster", "tiered@5.5.1", "tiered", "filters", "compaction", "batch",
                    "compaction@5.5.1", "modes", "trace", "replicas_controller@5.5.1", "crash", "replicas@5.5.1",
                    "replicas", "replicas_controller", "trace@5.5.1", "newstore")
RANDOM_RANK = CACHED_SCENARIOS.index("rocksdb") + 0.5


def _out(name: str) -> Path:
    version = release(name)
    return RUNS / f"{name}-{version}-{harness.source_hash(version)}"


def _stale_runs(name: str) -> list[Path]:
    """The runs of scenario ``name`` on its current release for older harness sources (or one a
    killed session left), and those of the layout before runs were kept per release: never the
    runs of the other releases, which a session with ``RMQFILTER_ROCKETMQ`` set reads."""
    version, stale = release(name), []
    for old in RUNS.glob(f"{name}-*"):
        rest = old.name[len(name) + 1:].removesuffix(".partial")
        if old.is_dir() and (rest.startswith(f"{version}-") or "-" not in rest):
            stale.append(old)
    return stale


def runnable(name: str) -> tuple[str, dict]:
    """A cached run's scenario and arguments: ``random-N`` (or ``random-N@V``, on release V) is
    scenario ``random`` with seed N (tests/broker/test_broker_random.py), any other name the
    scenario itself (``NAME@V``: on release V)."""
    base, _, seed = name.partition("@")[0].partition("-")
    return (base, {"seed": int(seed)}) if base == "random" and seed.isdigit() else (name.partition("@")[0], {})


# How many scenarios run at once, across both of ``make test``'s sessions: each is a NameServer,
# one or more brokers and a client JVM, and on CI's two cores seven at once beside the tests left
# brokers too slow to answer their clients in time.
PARALLEL = int(os.environ.get("RMQFILTER_HARNESS_PARALLEL", "3"))


# The scenarios of this session waiting for a slot; the first of them in CACHED_SCENARIOS' order
# takes the next one free.
_WAITING: set[str] = set()
_WAITING_LOCK = threading.Lock()


def _rank(name: str) -> float:
    if name in CACHED_SCENARIOS:
        return CACHED_SCENARIOS.index(name)
    return RANDOM_RANK if name.startswith("random-") else len(CACHED_SCENARIOS)


def module_rank(module: str) -> float:
    """Where the checks of test module ``module`` (``test_broker_<scenario>``) go among a session's
    broker tests: in the order their scenarios take the run slots, so that a pass reaching its broker
    tests checks each run as it is done rather than waiting on one of the last behind a finished
    one; modules of no cached scenario last."""
    base = module.rsplit(".", 1)[-1].removeprefix("test_broker_")
    if base == "random":
        return RANDOM_RANK
    return min((_rank(n) for n in CACHED_SCENARIOS if n.partition("@")[0] == base), default=len(CACHED_SCENARIOS))


@contextlib.contextmanager
def _slot(name: str):
    """Holds one of :data:`PARALLEL` slot locks (files under ``build/broker-runs``, so the two
    sessions share them) while scenario ``name`` runs; of this session's scenarios waiting, the
    longest (first in :data:`CACHED_SCENARIOS`) takes a slot first."""
    with _WAITING_LOCK:
        _WAITING.add(name)
    try:
        while True:
            with _WAITING_LOCK:
                first = min(_WAITING, key=_rank) == name
            for i in range(max(1, PARALLEL) if first else 0):
                with open(RUNS / f"slot-{i}.lock", "w") as f:
                    try:
                        fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    except BlockingIOError:
                        continue
                    with _WAITING_LOCK:
                        _WAITING.discard(name)
                    yield
                    return
            time.sleep(0.5)
    finally:
        with _WAITING_LOCK:
            _WAITING.discard(name)


def _run_into_cache(name: str) -> None:
    """Runs the scenario into its cache directory, unless another test session (``make test``
    runs its two passes at once) has run it meanwhile: the sessions take turns by a lock.

    A run the harness gives up on (a :class:`harness.HarnessError`: a client request, a broker
    start or an awaited delivery out of time) runs once more from scratch, and a second failure is
    reported with both errors: a machine loaded for a moment should not fail a suite that checks
    rmqfilter, and a harness that fails twice is reported all the same."""
    out = _out(name)
    partial = out.with_name(out.name + ".partial")
    RUNS.mkdir(parents=True, exist_ok=True)
    try:
        with open(RUNS / f"{name}-{release(name)}.lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            if (out / "broker.json").exists():
                return
            for old in _stale_runs(name):
                shutil.rmtree(old, ignore_errors=True)
            with _slot(name):
                scenario_name, args = runnable(name)
                try:
                    harness.run(scenario_name, partial, rocketmq=release(name), **args)
                except harness.HarnessError as first:
                    print(f"broker harness, scenario {name}: {first}; running it again", file=sys.stderr)
                    try:
                        harness.run(scenario_name, partial, rocketmq=release(name), **args)
                    except harness.HarnessError as second:
                        raise harness.HarnessError(f"{second} (and on the first attempt: {first})") from second
            partial.rename(out)
    except Exception as e:  # noqa: BLE001  (reported by scenario(), in the test that needs it)
        _FAILED[name] = f"{type(e).__name__}: {e}"


def start(names=CACHED_SCENARIOS) -> None:
    """Starts, in the background, each named scenario that has no run for these sources yet.

    The scenarios mostly wait (JVM start-ups, consumers draining), so the session starts those
    of its selected tests at once, once they are collected (:func:`start_in_background`).
    """
    require_tools()
    todo = [n for n in names if n not in _RUNNING and not (_out(n) / "broker.json").exists()]
    if not todo:
        return
    try:
        for version in sorted({release(n) for n in todo}):   # before the threads: one Maven build at a time
            harness.build(version)
    except harness.HarnessError as e:
        pytest.fail(f"broker harness: {e}", pytrace=False)
    for name in todo:
        thread = threading.Thread(target=_run_into_cache, args=(name,), name=f"broker-{name}", daemon=True)
        _RUNNING[name] = thread
        thread.start()


_BOOT: list[threading.Thread] = []


def start_in_background(names=CACHED_SCENARIOS) -> None:
    """:func:`start` without waiting for the harness build either: the session calls it once its
    tests are collected (tests/conftest.py), so the cached scenarios run while the suite's other
    tests do, and the broker tests (ordered last) find them done. A failure is reported by
    :func:`scenario`, in the test that needs the run; without Java or Maven nothing starts."""
    if harness.missing_tools() or _BOOT or not names:
        return

    def boot() -> None:
        try:
            start(names)
        except BaseException as e:  # noqa: BLE001  (pytest.fail from the build: reported by scenario())
            for name in names:
                _FAILED.setdefault(name, f"{type(e).__name__}: {e}")

    _BOOT.append(threading.Thread(target=boot, name="broker-boot", daemon=True))
    _BOOT[0].start()


def scenario(name: str) -> Run:
    """The scenario's run for the harness's current sources (run now if there is none yet)."""
    if name in _CACHE:
        return _CACHE[name]
    for boot in _BOOT:
        boot.join()
    if name in _FAILED:
        pytest.fail(f"broker harness, scenario {name}: {_FAILED[name]}", pytrace=False)
    start((name,))
    if name in _RUNNING:
        _RUNNING[name].join()
    if name in _FAILED:
        pytest.fail(f"broker harness, scenario {name}: {_FAILED[name]}", pytrace=False)
    _CACHE[name] = load(_out(name))
    return _CACHE[name]


# -- scenarios the test reads while the broker acts ----------------------------------------------

# Scenarios whose test reads the store while the broker acts (``harness.run(name, during=...)``):
# their set-up (JVM, broker, sends, drains) runs in the background from the session's start, and
# waits in ``during`` until the test comes to read (:func:`read_during`).
IN_TEST_SCENARIOS = ("housekeeping",)
# How long a set-up scenario waits for its test before it gives up and stops its broker.
IN_TEST_WAIT_S = 3600.0


class _InTest:
    """One in-test scenario: its thread runs ``harness.run`` until ``during``, hands the store
    root and the scenario's callback over to the test's thread, and finishes once the test's
    reads are done."""

    def __init__(self, name: str):
        self.name = name
        self.out = RUNS / f"{name}-{release(name)}"
        self.ready = threading.Event()       # in during (root and act set), or failed
        self.done = threading.Event()        # the test's reads are over
        self.root = self.act = self.error = None
        self.thread = threading.Thread(target=self._run, name=f"broker-{name}", daemon=True)

    def _during(self, root: Path, act) -> None:
        self.root, self.act = root, act
        self.ready.set()
        if not self.done.wait(IN_TEST_WAIT_S):
            raise harness.HarnessError(f"scenario {self.name}: its test did not come to read in {IN_TEST_WAIT_S:.0f} s")

    def _run(self) -> None:
        try:
            harness.build(release(self.name))
            RUNS.mkdir(parents=True, exist_ok=True)
            harness.run(self.name, self.out, rocketmq=release(self.name), during=self._during)
        except BaseException as e:  # noqa: BLE001  (reported by read_during, in the test)
            self.error = f"{type(e).__name__}: {e}"
        finally:
            self.ready.set()


_IN_TEST: dict[str, _InTest] = {}


def start_in_test(names) -> None:
    """Starts the set-up of each named in-test scenario in the background (once per session)."""
    if harness.missing_tools():
        return
    for name in names:
        if name not in _IN_TEST:
            _IN_TEST[name] = _InTest(name)
            _IN_TEST[name].thread.start()


def read_during(name: str, reads) -> Run:
    """Runs ``reads(store_root, act)`` in the caller's thread while scenario ``name``'s broker
    waits in ``during`` (started now unless :func:`start_in_test` did earlier), then lets the
    scenario finish (its snapshot) and returns its run."""
    require_tools()
    start_in_test((name,))
    job = _IN_TEST[name]
    job.ready.wait()
    try:
        if job.error is None:
            reads(job.root, job.act)
    finally:
        job.done.set()
        job.thread.join()
    if job.error is not None:
        pytest.fail(f"broker harness, scenario {name}: {job.error}", pytrace=False)
    return load(job.out)


def scenario_fixtures(name: str):
    """A test module's ``run`` and ``store`` fixtures (module scope): the scenario's run, and a
    :class:`cq.Store` on its first broker's copied store, closed after the module's tests."""

    @pytest.fixture(scope="module")
    def run():
        return scenario(name)

    @pytest.fixture(scope="module")
    def store(run):
        import cq

        s = cq.Store(str(run.store_path()))
        yield s
        s.close()

    return run, store


# -- checks shared by the scenarios' tests ------------------------------------------------------

def delivered(store, group: dict, **kw) -> dict:
    result = store.consume(group["topic"], group["group"], **kw)
    return {(m.queue_id, m.queue_offset): (m.properties.get("UNIQ_KEY"), m.msg_id) for m in result}


def assert_same_units(got: dict, want: dict, what: str) -> None:
    missing = sorted(set(want) - set(got))
    extra = sorted(set(got) - set(want))
    differ = sorted(k for k in set(got) & set(want) if got[k] != want[k])
    assert not (missing or extra or differ), (
        f"{what}: {len(got)} units from rmqfilter, {len(want)} from the broker; "
        f"received but not given (queue, offset): {missing[:10]}; given but never received: {extra[:10]}; "
        f"different message: {[(k, got[k], want[k]) for k in differ[:5]]}")


def assert_data_source_is_what_the_consumers_received(spark, run: Run, group: str) -> None:
    """The ``rocketmq`` data source with the group's subscription gives the units it first received."""
    g = run.group(group)
    reader = spark.read.format("rocketmq").option("topic", g["topic"]).option("group", group)
    if g["type"] == "TAG":
        reader = reader.option("tags", g["expression"])
    rows = reader.load(str(run.store_path())).selectExpr("queue_id", "queue_offset",
                                                         "properties['UNIQ_KEY'] AS uniq").collect()
    got = {(r.queue_id, r.queue_offset): r.uniq for r in rows}
    assert len(got) == len(rows)
    want = {k: r["uniq_key"] for k, r in run.first.get(group, {}).items()}
    assert_same_units(got, want, f"data source, group {group}")


def assert_backlog_is_what_the_drain_received(backlog, run: Run, group: str) -> None:
    """:func:`cq.backlog` has the broker's queues and offsets, and will give per queue what the
    group's consumers received in the drain after the snapshot."""
    g = run.group(group)
    progress = {p["queue_id"]: p for p in g["progress"]}
    assert sorted(q.queue_id for q in backlog.queues) == sorted(progress)
    drained: dict[int, int] = {}
    for (queue_id, _), r in run.first.get(group, {}).items():
        if r["phase"] == "drain":
            drained[queue_id] = drained.get(queue_id, 0) + 1
    for q in backlog.queues:
        p = progress[q.queue_id]
        assert (q.committed_offset, q.max_offset) == (p["consumer_offset"], p["broker_offset"]), q
        assert q.will_receive == drained.get(q.queue_id, 0), q


def assert_consume_is_what_the_consumers_received(store, run: Run, group: str) -> None:
    """``Store.consume`` with the group's subscription gives, unit for unit, what it first received
    (its ``UNIQ_KEY`` and offset id), no record missing; a SQL92 group's registration and its
    expression given outright agree."""
    g = run.group(group)
    want = {k: (r["uniq_key"], r["msg_id"]) for k, r in run.first.get(group, {}).items()}
    result = store.consume(g["topic"], group, **run.subscription(g))
    got = {(m.queue_id, m.queue_offset): (m.properties.get("UNIQ_KEY"), m.msg_id) for m in result}
    assert_same_units(got, want, f"Store.consume({group})")
    assert result.stats.commit_log_missing == 0
    if g["type"] == "SQL92":
        assert delivered(store, g, sql=g["expression"]) == got


def assert_inspect_offsets_are_the_brokers(run: Run, capsys) -> str:
    """``rmqfilter inspect --json`` gives each queue the admin API's min and max offsets; returns
    the text ``rmqfilter inspect`` prints (its ``Mode:`` line first)."""
    import rmqfilter

    assert rmqfilter.main(["inspect", str(run.store_path()), "--json"]) == 0
    topics = json.loads(capsys.readouterr().out)["topics"]
    for t in run.broker["topics"]:
        for q in t["queues"]:
            mine = topics[t["topic"]][str(q["queue_id"])]
            assert (mine["min_offset"], mine["max_offset"]) == (q["min_offset"], q["max_offset"]), (t["topic"], q)
    assert rmqfilter.main(["inspect", str(run.store_path())]) == 0
    return capsys.readouterr().out
