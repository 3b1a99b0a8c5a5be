"""Start and stop the stand-in broker of tests/live_writer.py (bounded, always cleaned up)."""
from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np

from cq import format as fmt

ROOT = Path(__file__).resolve().parent.parent


@contextlib.contextmanager
def live_writer(store: Path, seconds: float, rate: float = 0.0, min_files: int = 0, until: Path | None = None):
    """Run the writer for ``seconds``; yields the process once its first messages are on disk.

    On exit the writer is waited for (it stops by itself) and killed if it overruns.
    The process gets ``.counts`` (messages written per ``topic/queue``) once it is done.
    """
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
    args = [sys.executable, str(ROOT / "tests" / "live_writer.py"), str(store), str(seconds)]
    if rate:
        args += ["--rate", str(rate)]
    if min_files:
        args += ["--min-files", str(min_files)]
    if until is not None:
        args += ["--until", str(until)]
    proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    try:
        line = proc.stdout.readline()
        assert line.strip() == "started", (line, proc.stderr.read() if proc.poll() is not None else "")
        yield proc
        out, err = proc.communicate(timeout=seconds + 120)
        assert proc.returncode == 0, err
        proc.counts = json.loads(out.strip().splitlines()[-1])
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def expire_commit_log(root, files: int) -> int:
    """Delete the ``files`` oldest CommitLog files, as the broker's CommitLog clean-up does first (the
    ConsumeQueue files pointing into them stay, for now); returns the new first CommitLog offset."""
    listed = fmt.list_queue_files(os.path.join(root, fmt.COMMIT_LOG_DIR))
    for _, path in listed[:files]:
        os.remove(path)
    return listed[files][0]


def expire_consume_queues(root, topic: str, below: int) -> None:
    """Delete ``topic``'s ConsumeQueue files whose units all point below CommitLog offset ``below``
    (never a queue's last file), as the broker's ConsumeQueue clean-up does later."""
    for qdir in sorted((Path(root) / fmt.CONSUME_QUEUE_DIR / topic).iterdir()):
        for _, path in fmt.list_queue_files(qdir)[:-1]:
            units = np.fromfile(path, dtype=fmt.CQ_UNIT_DTYPE)
            units = units[units["size"] > 0]
            if len(units) and int(units["commit_log_offset"].max()) < below:
                os.remove(path)


def stream_until_stopped(df, out: str, ck: str, *, every: str, batches: int = 2) -> None:
    """Write streaming DataFrame ``df`` to parquet ``out`` (checkpoint ``ck``), a micro-batch ``every``
    so often, and stop it mid-run once ``batches`` micro-batches had rows (or after 60 s)."""
    import time

    q = df.writeStream.format("parquet").option("checkpointLocation", ck).trigger(processingTime=every).start(out)
    try:
        deadline = time.monotonic() + 60
        while len([p for p in q.recentProgress if p["numInputRows"] > 0]) < batches and time.monotonic() < deadline:
            time.sleep(0.1)
        assert q.exception() is None
    finally:
        q.stop()


def stream_to_the_end(df, out: str, ck: str, timeout: float = 300) -> None:
    """Write streaming DataFrame ``df`` to parquet ``out`` from checkpoint ``ck`` with Trigger.AvailableNow:
    everything there is when it starts, then it stops."""
    q = df.writeStream.format("parquet").option("checkpointLocation", ck).trigger(availableNow=True).start(out)
    try:
        assert q.awaitTermination(timeout)
    finally:
        q.stop()
    assert q.exception() is None
