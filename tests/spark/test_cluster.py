"""The scan job on a real Spark standalone cluster (master + one worker on 127.0.0.1) equals local mode.

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


def test_scan_job_on_standalone_cluster_equals_local_mode(standalone_cluster, spark, tmp_path):
    from pyspark_udfs import job

    url, env = standalone_cluster
    out_dir, summary = tmp_path / "cluster-out", tmp_path / "summary.json"
    cmd = [str(_spark_bin() / "spark-submit"), "--master", url,
           "--conf", "spark.executor.memory=768m", "--conf", "spark.ui.enabled=false",
           "--conf", f"spark.driver.extraJavaOptions={SPARK_TEST_JAVA_OPTIONS}",
           "--conf", f"spark.executor.extraJavaOptions={SPARK_TEST_JAVA_OPTIONS}",
           "--conf", f"spark.executorEnv.PYSPARK_PYTHON={sys.executable}",
           job.__file__, str(DATA / "golden_store"), "--topic", TOPIC, "--group", GROUP,
           "--sql", SQL, "--out", str(out_dir), "--format", "json", "--json", str(summary)]
    proc = subprocess.run(cmd, check=False, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert "GID_SQL_B" in proc.stdout and "passed CL" in proc.stdout
    # The application really ran on the cluster's executor, not in local mode.
    assert list((tmp_path / "work").glob("app-*/0/stderr")), "no executor ran on the standalone worker"

    cluster = json.loads(summary.read_text())
    local = job.scan(spark, str(DATA / "golden_store"), TOPIC, job.GroupScan(GROUP, sql=SQL))
    assert cluster["units_scanned"] == local.units_scanned > 0
    assert cluster["passed_consume_queue"] == local.passed_consume_queue
    assert cluster["passed_commit_log"] == local.passed_commit_log > 0
    assert cluster["delivered"] == local.delivered

    written = spark.read.json(str(out_dir))
    local_rows = spark.read.format("rocketmq").option("topic", TOPIC).option("group", GROUP) \
        .option("sql", SQL).load(str(DATA / "golden_store"))
    key = ["queue_id", "queue_offset", "commit_log_offset", "tags", "keys"]
    assert sorted(map(tuple, written.select(*key).collect())) == sorted(map(tuple, local_rows.select(*key).collect()))
