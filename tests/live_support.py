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


def inner_body(messages) -> bytes:
    """The body of an inner-batch record holding ``messages``, ``(body, properties)`` pairs, as the
    broker stores a batch sent to a BatchCQ topic (docs/formats.md#inner-batch)."""
    parts = []
    for body, props in messages:
        text = fmt.encode_properties(props).encode()
        size = fmt.INNER_MESSAGE_HEAD_STRUCT.size + len(body) + fmt.INNER_PROPERTIES_LENGTH_STRUCT.size + len(text)
        parts += [fmt.INNER_MESSAGE_HEAD_STRUCT.pack(size, 0, 0, 0, len(body)), body,
                  fmt.INNER_PROPERTIES_LENGTH_STRUCT.pack(len(text)), text]
    return b"".join(parts)


class BatchCQWriter:
    """Appends batches to BatchCQ topic ``topic`` of a store at ``root``, as the broker does: the
    inner-batch record on the CommitLog first, then its 46-byte unit (docs/formats.md#batch-consume-queue),
    so a reader may read while it appends. Each message's body is ``b"<queue_id>:<queue offset>"``."""

    def __init__(self, root, topic: str = "T", queues: int = 1, log_size: int = 1 << 20, units_per_file: int = 64):
        self.root, self.topic, self.log_size = Path(root), topic, log_size
        self.unit_file_size = units_per_file * fmt.BCQ_STORE_UNIT_SIZE
        self.pos, self.ends = 0, [0] * queues
        (self.root / fmt.COMMIT_LOG_DIR).mkdir(parents=True, exist_ok=True)
        self._blank(self.root / fmt.COMMIT_LOG_DIR / fmt.file_name(0), log_size)
        for q in range(queues):
            (self._queue(q)).mkdir(parents=True, exist_ok=True)
            self._blank(self._queue(q) / fmt.file_name(0), self.unit_file_size)

    @staticmethod
    def _blank(path: Path, size: int) -> None:
        with open(path, "wb") as f:
            f.truncate(size)

    def _queue(self, q: int) -> Path:
        return self.root / fmt.BATCH_CONSUME_QUEUE_DIR / self.topic / str(q)

    def append(self, queue_id: int, n: int) -> tuple[int, int]:
        """One batch of ``n`` messages (tag ``TagA``) to queue ``queue_id``; its queue offsets ``[base, end)``."""
        base = self.ends[queue_id]
        msgs = [(f"{queue_id}:{base + i}".encode(), {"TAGS": "TagA"}) for i in range(n)]
        record = fmt.encode_record(topic=self.topic, body=inner_body(msgs), queue_id=queue_id,
                                   properties={fmt.PROPERTY_INNER_NUM: str(n), fmt.PROPERTY_INNER_BASE: str(base)},
                                   queue_offset=base, commit_log_offset=self.pos, store_timestamp=5,
                                   sys_flag=fmt.INNER_BATCH_FLAG | fmt.NEED_UNWRAP_FLAG)
        assert self.pos + len(record) < self.log_size, "BatchCQWriter: the CommitLog file is full"
        with open(self.root / fmt.COMMIT_LOG_DIR / fmt.file_name(0), "r+b") as f:
            f.seek(self.pos)
            f.write(record)
        units_before = len(self._units(queue_id))
        assert (units_before + 1) * fmt.BCQ_STORE_UNIT_SIZE <= self.unit_file_size, "BatchCQWriter: queue file full"
        unit = np.array([(self.pos, len(record), 0, 5, base, n, -1, 0)], dtype=fmt.BCQ_UNIT_DTYPE)
        with open(self._queue(queue_id) / fmt.file_name(0), "r+b") as f:
            f.seek(units_before * fmt.BCQ_STORE_UNIT_SIZE)
            f.write(unit.tobytes())
        self.pos += len(record)
        self.ends[queue_id] = base + n
        return base, base + n

    def _units(self, queue_id: int) -> np.ndarray:
        units = np.fromfile(self._queue(queue_id) / fmt.file_name(0), dtype=fmt.BCQ_UNIT_DTYPE)
        return units[units["size"] > 0]
