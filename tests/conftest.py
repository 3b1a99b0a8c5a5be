"""Shared fixtures, defined once here: the data directory, a writable golden store, one SparkSession.

Tests never import this module (pytest loads it); plain helpers they import are in
``tests/helpers.py``.
"""
from __future__ import annotations

import contextlib
import multiprocessing
import os
import shutil
import sys
import traceback
import uuid
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from pathlib import Path
from typing import Any

import pytest
from helpers import DATA, SPARK_TEST_JAVA_OPTIONS, ConnectCallError, tasks_passed_on_retry
from hypothesis import settings

# Spark starts its Python workers with PYSPARK_PYTHON; they must be this interpreter.
os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
# Spark binds to the machine's first non-loopback address unless told otherwise;
# tests talk to nothing but this machine's loopback.
os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")

# Hypothesis: "fast" keeps `make test` quick; HYPOTHESIS_PROFILE=long digs deeper.
settings.register_profile("fast", max_examples=150, deadline=None)
settings.register_profile("long", max_examples=5000, deadline=None)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "fast"))


@pytest.fixture(scope="session")
def data_dir() -> Path:
    return DATA


@pytest.fixture
def golden_copy(tmp_path) -> Path:
    """A writable copy of the golden store (``tests/data/golden_store``), to corrupt or append to."""
    root = tmp_path / "store"
    shutil.copytree(DATA / "golden_store", root)
    return root


@pytest.fixture(scope="session")
def s3_server(tmp_path_factory):
    """A real S3-compatible server (s3proxy, ``tests/s3_server.py``) on a free loopback port for the
    session, its credentials in this process's environment as pyarrow reads them, logging each request it
    answers (``server.requests()``); stopped at the end.
    Skips, loudly, without Java or Maven (``make test`` fetches the jar: the Makefile's ``s3proxy``)."""
    import s3_server  # lazy: a helper only the object-storage tests need

    if s3_server.missing_tools():
        pytest.skip(f"object-storage tests need {', '.join(s3_server.missing_tools())} (s3proxy)")
    server = s3_server.start(tmp_path_factory.mktemp("s3proxy") / "data", log_requests=True)
    saved = {k: os.environ.get(k) for k in server.env()}
    os.environ.update(server.env())
    try:
        yield server
    finally:
        server.stop()
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


@pytest.fixture(scope="session")
def spark():
    """One SparkSession for the whole test session: local[2,2], UI off, few shuffle partitions.

    local[2,2]: two threads, and a failed task is tried once more before its job fails (as
    spark.task.maxFailures does on a cluster; plain local[2] never retries), so
    tests/spark/test_spark_failures.py checks retries here rather than in a second Spark.
    A task that fails for good fails its job as before, after two attempts.
    Fails (never skips) with a clear message when Java or PySpark is missing.
    """
    if not (os.environ.get("JAVA_HOME") or shutil.which("java")):
        pytest.fail("Spark tests need Java 17: no `java` on PATH and JAVA_HOME is not set", pytrace=False)
    try:
        from pyspark.sql import SparkSession
    except ImportError as exc:
        pytest.fail(f"Spark tests need pyspark (pip install -e '.[spark]'): {exc}", pytrace=False)
    import pyspark_udfs

    session = (
        SparkSession.builder.master("local[2,2]")
        .appName("rmqfilter-tests")
        .config("spark.ui.enabled", "false")
        # The native-selector tests build very wide plans; 1 GB (the default) runs out
        # once the whole suite has shared the session.
        .config("spark.driver.memory", "4g")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.default.parallelism", "2")
        .config("spark.sql.python.filterPushdown.enabled", "true")
        .config("spark.ui.showConsoleProgress", "false")
        # A young generation of 1 GB from the start: the native-selector sweeps allocate plans
        # fast, and with the serial collector's default sizing (a third of a heap that starts
        # small) one sweep ran 115 young collections, 10.5 s of pauses; 23 and 7.2 s with this.
        .config("spark.driver.extraJavaOptions", f"{SPARK_TEST_JAVA_OPTIONS} -Xms2g -Xmn1g")
    )
    token = uuid.uuid4().hex
    serve_connect = _CONNECT_WANTED and _connect_missing() is None
    if serve_connect:  # the Connect server runs in this session's JVM (see below)
        for key, value in connect_server_conf(token).items():
            session = session.config(key, value)
    session = session.getOrCreate()
    session.sparkContext.setLogLevel("ERROR")
    pyspark_udfs.register(session)
    if serve_connect:
        server = ConnectServer(session, token)
        _CONNECT_BACKGROUND["server"] = server
        _CONNECT_BACKGROUND["session"] = ConnectSession(server)  # its child connects meanwhile
    yield session
    _stop_connect()
    session.stop()


@pytest.fixture(autouse=True)
def _no_task_passes_only_on_retry(request):
    """A Spark test fails when one of its jobs succeeded only because a failed task was tried again.

    The shared session retries a failed task once (local[2,2]); a task that fails now and then
    (a torn read of a live store, say) must still fail its test, as it would under local[2].
    A test that fails tasks on purpose says so with the ``task_retries`` marker. Jobs in a job
    group (a streaming query's) are not looked at.
    """
    if "spark" not in request.fixturenames or request.node.get_closest_marker("task_retries"):
        yield
        return
    spark = request.getfixturevalue("spark")
    before = set(spark.sparkContext.statusTracker().getJobIdsForGroup())
    yield
    retried = tasks_passed_on_retry(spark, before)
    if retried:
        pytest.fail("tasks failed and passed only on Spark's retry (a flaky task): " + "; ".join(retried),
                    pytrace=False)


# --------------------------------------------------------------------------- Spark Connect
# A Spark Connect client switches PySpark's whole process into Connect mode (pyspark.sql.functions
# and the UDF factories then build Connect objects), and SparkSession.builder.remote("local[2]")
# refuses to start while a classic session exists. So the classic `spark` above stays in this
# process and the Connect client lives apart: one Connect client session in a child Python
# process that runs the functions the tests hand it. The Connect server is Spark's own plugin
# (SparkConnectPlugin) in the classic session's JVM, on 127.0.0.1, a port of the system's
# choosing and an auth token: no second JVM to start and warm up, and the client's queries run
# on the same SparkContext through the Connect server's planner. When collection has found a
# `connect` test, the `spark` fixture starts the plugin and the client's child process at once,
# so the client connects while the tests before run. See docs/spark-connect.md#tests.
CONNECT_PLUGIN = "org.apache.spark.sql.connect.SparkConnectPlugin"
CONNECT_START_SECONDS = 240
_CONNECT_WANTED = False  # a `connect` test was collected: the `spark` fixture serves Connect
_CONNECT_BACKGROUND: dict[str, Any] = {}  # "server", "session": started by the `spark` fixture


def connect_server_conf(token: str) -> dict[str, str]:
    """The classic session's settings that make it a Connect server too (Spark's plugin): loopback,
    a port the system picks (no race for a free port), clients must present ``token``."""
    return {"spark.plugins": CONNECT_PLUGIN, "spark.connect.grpc.binding.address": "127.0.0.1",
            "spark.connect.grpc.binding.port": "0", "spark.connect.authenticate.token": token}


class ConnectServer:
    """The Spark Connect server in the classic session's JVM: ``url`` (``sc://localhost:PORT``) and
    ``token`` for its clients."""

    def __init__(self, session, token: str) -> None:
        service = getattr(session._jvm.org.apache.spark.sql.connect.service, "SparkConnectService$")
        self.port = getattr(service, "MODULE$").localPort()
        self.token = token
        self.url = f"sc://localhost:{self.port}"

    def client_env(self) -> dict[str, str]:
        """Environment for a client process: the server's token, and no Connect state inherited."""
        env = {k: v for k, v in os.environ.items()
               if k not in ("SPARK_REMOTE", "SPARK_LOCAL_REMOTE", "SPARK_CONNECT_MODE_ENABLED")}
        env["SPARK_CONNECT_AUTHENTICATE_TOKEN"] = self.token
        return env


def _connect_missing() -> str | None:
    """Why Spark Connect cannot run here (the connect extra is missing), or None."""
    from pyspark_udfs.job import require_connect

    try:
        require_connect()
    except ImportError as exc:
        return str(exc)
    return None


def _broker_support():
    """tests/broker/broker_support.py, imported from the broker tests' directory."""
    sys.path.insert(0, str(Path(__file__).parent / "broker"))
    try:
        import broker_support
    finally:
        sys.path.pop(0)
    return broker_support


def pytest_collection_modifyitems(session, config, items) -> None:
    """The real-broker checks run last: their scenarios run meanwhile (``pytest_collection_finish``).
    Those that read their scenario's store while the broker acts (``broker_support.IN_TEST_SCENARIOS``:
    its set-up starts with the session) run before the Spark tests, where that set-up is done and
    the other tests keep the cores busy meanwhile, not at the very end of a pass, alone."""
    items.sort(key=lambda item: item.get_closest_marker("broker") is not None)  # stable: order kept within
    if not any(i.get_closest_marker("broker") for i in items):
        return
    # the broker modules in the order their scenarios run (broker_support.module_rank)
    rank = _broker_support().module_rank
    items.sort(key=lambda item: rank(item.module.__name__) if item.get_closest_marker("broker") else -1)
    in_test = {f"test_broker_{n}" for n in _broker_support().IN_TEST_SCENARIOS}
    early = [i for i in items if i.module.__name__.rsplit(".", 1)[-1] in in_test]
    if early:
        rest = [i for i in items if i not in early]
        at = next((n for n, i in enumerate(rest) if "/spark/" in i.nodeid), len(rest))
        items[:] = rest[:at] + early + rest[at:]


def pytest_collection_finish(session) -> None:
    """Start in the background what slow tests need: the broker scenarios whose outputs the
    `broker` tests read (tests/broker/broker_support.py); and note whether a `connect` test will
    run (the `spark` fixture then serves Spark Connect as well)."""
    global _CONNECT_WANTED
    if session.config.option.collectonly:
        return
    modules = {i.module.__name__ for i in session.items if i.get_closest_marker("broker")}
    if modules:
        broker_support = _broker_support()
        # the scenarios of the selected modules (test_broker_<scenario>.py); an in-test
        # scenario's set-up only where its tests will run (not skipped here)
        # test_broker_random.py's covering seeds: one cached run each, on each release (random-N[@V])
        seeds = {s for i in session.items if i.module.__name__.endswith("test_broker_random")
                 and not os.environ.get("RMQFILTER_RANDOM_RUN") for s in i.module.covering_runs()}
        broker_support.start_in_background([n for n in broker_support.CACHED_SCENARIOS
                                            if any(m.endswith(f"test_broker_{n.partition('@')[0]}") for m in modules)]
                                           + sorted(seeds))
        runnable = {i.module.__name__ for i in session.items if not _skipped_here(i)}
        broker_support.start_in_test([n for n in broker_support.IN_TEST_SCENARIOS
                                      if any(m.endswith(f"test_broker_{n}") for m in runnable)])
    _CONNECT_WANTED = any(i.get_closest_marker("connect") for i in session.items)


def _skipped_here(item) -> bool:
    """Whether a ``skip`` or a true ``skipif(condition)`` marker skips the item in this session."""
    for mark in item.iter_markers():
        if mark.name == "skip" or (mark.name == "skipif" and mark.args and mark.args[0] is True):
            return True
    return False


def _stop_connect() -> None:
    connect_session = _CONNECT_BACKGROUND.pop("session", None)
    if connect_session is not None:
        connect_session.stop()
    _CONNECT_BACKGROUND.pop("server", None)


@pytest.fixture(scope="session")
def connect_server(spark):
    """The session's Spark Connect server (in the classic session's JVM; stopped with it)."""
    missing = _connect_missing()
    if missing is not None:
        pytest.fail(f"Spark Connect tests need the connect extra (pip install -e '.[connect]'): {missing}",
                    pytrace=False)
    server = _CONNECT_BACKGROUND.get("server")
    if server is None:
        pytest.fail("the `spark` session serves Spark Connect only when collection found a `connect` test",
                    pytrace=False)
    return server


class ConnectSession:
    """One Spark Connect session, living in a child process; :meth:`run` calls functions with it.

    ``run(fn, *args)`` is ``fn(session, *args)`` there: ``fn`` must be importable (a module-level
    function) and its arguments and result picklable, so tests return plain rows, counts and text.
    The same ``fn`` run with the classic ``spark`` fixture gives the result to compare with.
    The child connects at once and runs a first query (:func:`_warm_up`).
    """

    def __init__(self, server: ConnectServer) -> None:
        self.server = server
        self._pool = ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn"),
                                         initializer=_connect_child_start,
                                         initargs=(server.url, server.token))
        self._warm = self._pool.submit(_connect_child_call, _warm_up, (), {})

    def run(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        self._warm.result(timeout=CONNECT_START_SECONDS + 600)
        return self._pool.submit(_connect_child_call, fn, args, kwargs).result(timeout=600)

    def stop(self) -> None:
        try:
            with contextlib.suppress(BrokenProcessPool):  # a child that never connected has nothing to stop
                self._pool.submit(_connect_child_stop).result(timeout=120)
        finally:
            self._pool.shutdown(cancel_futures=True)


_CONNECT_SESSION = None  # the child process's Spark Connect session


def _connect_child_start(url: str, token: str) -> None:
    global _CONNECT_SESSION
    os.environ["SPARK_CONNECT_AUTHENTICATE_TOKEN"] = token
    # Imported before the session exists, as a user's script may: nothing in pyspark_udfs may
    # bind a UDF or Column to the API mode of import time.
    from pyspark.sql import SparkSession

    import pyspark_udfs
    import pyspark_udfs.functions

    _CONNECT_SESSION = SparkSession.builder.remote(url).getOrCreate()
    pyspark_udfs.register(_CONNECT_SESSION)


def _warm_up(spark) -> None:
    """A first query (data source, Arrow UDF) while the tests before the Connect ones run."""
    from pyspark.sql import functions as F

    from pyspark_udfs import tags_code

    spark.read.format("rocketmq").load(str(DATA / "golden_store")).agg(F.sum(tags_code("tags"))).first()


def _connect_child_call(fn: Callable[..., Any], args: tuple, kwargs: dict) -> Any:
    try:
        return fn(_CONNECT_SESSION, *args, **kwargs)
    except Exception as exc:  # noqa: BLE001  PySpark's Connect exceptions do not all pickle: send their text
        raise ConnectCallError(f"{type(exc).__module__}.{type(exc).__qualname__}", str(exc),
                               traceback.format_exc()) from None


def _connect_child_stop() -> None:
    if _CONNECT_SESSION is not None:
        _CONNECT_SESSION.stop()


@pytest.fixture(scope="session")
def connect_spark(connect_server):
    """One Spark Connect session for the whole test session, in a child process (:class:`ConnectSession`)."""
    session = _CONNECT_BACKGROUND.pop("session", None)
    if session is None or session.server is not connect_server:  # the server was started again
        if session is not None:
            session.stop()
        session = ConnectSession(connect_server)
    yield session
    session.stop()
