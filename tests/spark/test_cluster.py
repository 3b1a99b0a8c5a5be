"""The scan job on a real Spark standalone cluster (master + one worker on 127.0.0.1) gives what the group receives.

Starts the master and worker from the installed pyspark (``spark-class``),
submits ``pyspark_udfs/job.py`` with ``spark-submit``, and always tears both down.
"""
from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from helpers import DATA, SPARK_TEST_JAVA_OPTIONS

pytestmark = pytest.mark.cluster

TOPIC = "GoldenFilterTopic"
GROUP = "GID_SQL_B"
SQL = "TAGS = 'TagA' OR color IN ('red', 'grün')"
STARTUP_SECONDS = 90


def _spark_bin() -> Path:
    import pyspark

    return Path(pyspark.__file__).resolve().parent / "bin"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait_for(predicate, what: str, procs, logs) -> None:
    deadline = time.monotonic() + STARTUP_SECONDS
    while time.monotonic() < deadline:
        if predicate():
            return
        for p, log in zip(procs, logs):
            if p.poll() is not None:
                pytest.fail(f"{what}: a Spark daemon exited early; its log:\n{Path(log).read_text()[-4000:]}")
        time.sleep(0.5)
    pytest.fail(f"{what}: not ready after {STARTUP_SECONDS} s; logs:\n"
                + "\n".join(Path(log).read_text()[-2000:] for log in logs))


@pytest.fixture
def standalone_cluster(tmp_path):
    """``spark://127.0.0.1:<port>`` of a fresh master with one registered worker."""
    if not (os.environ.get("JAVA_HOME") or shutil.which("java")):
        pytest.fail("the cluster test needs Java 17: no `java` on PATH and JAVA_HOME is not set", pytrace=False)
    env = dict(os.environ, SPARK_LOCAL_IP="127.0.0.1", SPARK_LOG_DIR=str(tmp_path),
               SPARK_DAEMON_JAVA_OPTS=SPARK_TEST_JAVA_OPTIONS,
               SPARK_WORKER_DIR=str(tmp_path / "work"), PYSPARK_PYTHON=sys.executable)
    port, ui, worker_ui = _free_port(), _free_port(), _free_port()
    url = f"spark://127.0.0.1:{port}"
    spark_class = str(_spark_bin() / "spark-class")
    master_log, worker_log = tmp_path / "master.log", tmp_path / "worker.log"
    procs: list[subprocess.Popen] = []
    try:
        with open(master_log, "w") as out:
            procs.append(subprocess.Popen(
                [spark_class, "org.apache.spark.deploy.master.Master", "--host", "127.0.0.1",
                 "--port", str(port), "--webui-port", str(ui)],
                env=env, stdout=out, stderr=subprocess.STDOUT))
        with open(worker_log, "w") as out:
            procs.append(subprocess.Popen(
                [spark_class, "org.apache.spark.deploy.worker.Worker", url, "--host", "127.0.0.1",
                 "--cores", "1", "--memory", "1g", "--webui-port", str(worker_ui),
                 "--work-dir", str(tmp_path / "work")],
                env=env, stdout=out, stderr=subprocess.STDOUT))
        logs = [master_log, worker_log]
        _wait_for(lambda: "Successfully registered with master" in worker_log.read_text(),
                  "worker registration", procs, logs)
        yield url, env
    finally:
        for p in procs:
            if p.poll() is None:
                p.terminate()
        for p in procs:
            try:
                p.wait(timeout=20)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()


def _submit_the_job(url: str, store: str, out_dir: Path, summary: Path) -> list[str]:
    """``spark-submit`` of the main job on the cluster at ``url``: the group's SQL92 read of ``store``,
    rows as JSON into ``out_dir``, the counts into ``summary``."""
    from pyspark_udfs import job

    return [str(_spark_bin() / "spark-submit"), "--master", url,
            "--conf", "spark.executor.memory=768m", "--conf", "spark.ui.enabled=false",
            "--conf", f"spark.driver.extraJavaOptions={SPARK_TEST_JAVA_OPTIONS}",
            "--conf", f"spark.executor.extraJavaOptions={SPARK_TEST_JAVA_OPTIONS}",
            "--conf", f"spark.executorEnv.PYSPARK_PYTHON={sys.executable}",
            job.__file__, store, "--topic", TOPIC, "--group", GROUP,
            "--sql", SQL, "--out", str(out_dir), "--format", "json", "--json", str(summary)]


def test_scan_job_on_standalone_cluster_gives_what_the_group_receives(standalone_cluster, tmp_path):

    url, env = standalone_cluster
    out_dir, summary = tmp_path / "cluster-out", tmp_path / "summary.json"
    cmd = _submit_the_job(url, str(DATA / "golden_store"), out_dir, summary)
    proc = subprocess.run(cmd, check=False, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert "GID_SQL_B" in proc.stdout and "passed CL" in proc.stdout
    # The application really ran on the cluster's executor, not in local mode.
    assert list((tmp_path / "work").glob("app-*/0/stderr")), "no executor ran on the standalone worker"

    # What the group receives, from the library (no SparkSession in this process: the job's
    # local-mode equality with the library is tests/spark/test_spark_job.py's).
    _same_as_the_library(summary, out_dir, *_the_groups_messages(DATA / "golden_store"))


def _the_groups_messages(root) -> tuple:
    """The library's consume of the group on the store at ``root``: its stats and (queue id, queue offset,
    CommitLog offset, tags, keys) of each message."""
    import cq

    store = cq.Store(root)
    try:
        result = store.consume(TOPIC, GROUP, sql=SQL)
        received = [(m.queue_id, m.queue_offset, m.commit_log_offset, m.tags, m.keys) for m in result]
    finally:
        store.close()
    return result.stats, received


def _same_as_the_library(summary: Path, out_dir: Path, stats, received: list) -> None:
    """The job's summary and written rows are the library's answer."""
    cluster = json.loads(summary.read_text())
    assert cluster["units_scanned"] == stats.units_scanned > 0
    assert cluster["passed_consume_queue"] == stats.passed_consume_queue
    assert cluster["passed_commit_log"] == stats.passed_commit_log > 0
    assert cluster["delivered"] == stats.delivered == len(received)
    key = ["queue_id", "queue_offset", "commit_log_offset", "tags", "keys"]
    written = [json.loads(line) for part in sorted(out_dir.glob("part-*")) for line in part.read_text().splitlines()]
    assert sorted(tuple(row.get(k) for k in key) for row in written) == sorted(received)


@pytest.mark.objectstore
def test_scan_job_on_standalone_cluster_reads_the_bucket_with_no_shared_path(s3_server, standalone_cluster, tmp_path):
    """The same job over ``s3://`` (docs/object-storage.md#spark): the store's local copy is deleted
    before the job starts, so the executor reads the bucket alone; the endpoint and region reach it as
    data source options (the worker's environment has neither), the credentials through the worker's
    environment; no secret in the job's output or the executor's log."""
    from pyspark_udfs import job

    url, env = standalone_cluster
    assert "AWS_ENDPOINT_URL" not in env and env.get("AWS_SECRET_ACCESS_KEY") == s3_server.secret_key
    copy = tmp_path / "golden-copy"
    shutil.copytree(DATA / "golden_store", copy)
    uri = s3_server.upload(copy, "cluster", "golden")
    stats, received = _the_groups_messages(copy)
    shutil.rmtree(copy)  # no path holds the store now: only the bucket does
    out_dir, summary = tmp_path / "cluster-out", tmp_path / "summary.json"
    cmd = _submit_the_job(url, uri, out_dir, summary)
    driver_env = dict(env, AWS_ENDPOINT_URL=s3_server.endpoint, AWS_DEFAULT_REGION="us-east-1",
                      PYTHONPATH=os.pathsep.join([str(Path(job.__file__).resolve().parents[1]),
                                                  env.get("PYTHONPATH", "")]))
    proc = subprocess.run(cmd, check=False, env=driver_env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-4000:]
    logs = list((tmp_path / "work").glob("app-*/0/stderr"))
    assert logs, "no executor ran on the standalone worker"
    for text in (proc.stdout, proc.stderr, *(p.read_text(errors="replace") for p in logs)):
        assert s3_server.secret_key not in text
    _same_as_the_library(summary, out_dir, stats, received)
