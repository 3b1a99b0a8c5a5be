"""Thousands of queues under a common descriptor limit (docs/limits.md): one queue's files open at a time.

Every store command runs over a topic of 3,000 queues in a process limited to 1,024 file
descriptors (``ulimit -n 1024``, a common default), and a stream's driver refreshes only the
queues written since its last trigger.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest
from live_support import ROOT

import cq
from cq.writer import StoreWriter
from cq.writer.config_writer import write_consumer_offsets

resource = pytest.importorskip("resource")  # POSIX: the descriptor limit

TOPIC, GROUP, SQL = "Wide", "GID_RED", "color = 'red'"
QUEUES = 3000
LIMIT = 1024


@pytest.fixture(scope="module")
def wide_store(tmp_path_factory):
    """3,000 queues of 2 messages each (one red), with bitmaps and committed offsets for GID_RED."""
    root = tmp_path_factory.mktemp("wide") / "store"
    with StoreWriter(root, commit_log_file_size=1 << 20, consume_queue_file_size=20 * 4, ext_file_size=4096,
                     enable_ext=True) as w:
        w.register_group(TOPIC, GROUP, SQL)
        w.append_many({"topic": TOPIC, "body": b"m", "queue_id": q, "tags": "TagA", "keys": [f"k{q}-{i}"],
                       "properties": {"color": "red" if i == 0 else "blue"}}
                      for q in range(QUEUES) for i in range(2))
    write_consumer_offsets(root, {f"{TOPIC}@{GROUP}": {q: 1 for q in range(QUEUES)}})
    return root


def _limited():
    resource.setrlimit(resource.RLIMIT_NOFILE, (LIMIT, LIMIT))


def _cli(*args: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
    return subprocess.run([sys.executable, "-c", "import sys; from rmqfilter import main; sys.exit(main())",
                           *args], capture_output=True, text=True, timeout=300, preexec_fn=_limited, env=env,
                          check=False)


@pytest.mark.parametrize(("args", "check"), [
    (["inspect", "--json"], lambda out: len(json.loads(out)["topics"][TOPIC]) == QUEUES),
    (["backlog", "--topic", TOPIC, "--group", GROUP, "--json"],
     lambda out: json.loads(out)["total"] == {"lag": QUEUES, "will_receive": 0}),
    (["consume", "--topic", TOPIC, "--group", GROUP, "--format", "jsonl"], lambda out: len(out.splitlines()) == QUEUES),
    (["tail", "--topic", TOPIC, "--group", GROUP, "--from", "earliest", "--limit", str(QUEUES)],
     lambda out: len(out.splitlines()) == QUEUES),
    (["why", "--topic", TOPIC, "--group", GROUP, "--key", f"k{QUEUES - 1}-0", "--json"],
     lambda out: json.loads(out)[0]["delivered"] is True),
    (["cost", "--topic", TOPIC, "--group", GROUP, "--no-timing"], lambda out: f"{2 * QUEUES:,}" in out),
], ids=["inspect", "backlog", "consume", "tail", "why", "cost"])
def test_every_command_passes_over_3000_queues_under_a_1024_descriptor_limit(wide_store, args, check):
    cmd, *rest = args
    proc = _cli(cmd, str(wide_store), *rest)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "Too many open files" not in proc.stderr
    assert check(proc.stdout), proc.stdout[-2000:]


def _open_descriptors() -> int:
    return len(os.listdir("/proc/self/fd"))


@pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="counts descriptors through /proc")
def test_store_backlog_leaves_no_descriptor_per_queue_open(wide_store):
    before = _open_descriptors()
    store = cq.Store(wide_store)
    b = cq.backlog(store, TOPIC, GROUP)
    assert len(b.queues) == QUEUES and b.lag == QUEUES
    assert _open_descriptors() - before < 16  # the CommitLog's files, not one per queue
    # the same for inspect-like passes, a stream driver's cuts and tail's reads
    for _ in store.consume(TOPIC, GROUP, sql=SQL):
        pass
    store.cut(TOPIC, keep_readers=True)
    assert _open_descriptors() - before < 16
    store.close()


def _age(root, seconds: float = 3600) -> None:
    """Make every file and directory of the store look untouched for ``seconds``."""
    past = time.time() - seconds
    for dirpath, _dirs, files in os.walk(root):
        for name in files:
            os.utime(os.path.join(dirpath, name), (past, past))
        os.utime(dirpath, (past, past))


def test_a_kept_store_refreshes_only_the_queues_written_since(tmp_path, monkeypatch):
    root = tmp_path / "store"
    with StoreWriter(root, consume_queue_file_size=20 * 100) as w:
        for q in range(50):
            w.append(TOPIC, b"m", queue_id=q)
    _age(root)
    store = cq.Store(root)
    first = store.cut(TOPIC, keep_readers=True)  # a stream's first trigger: every queue opened once
    refreshed: list[str] = []
    real = cq.ConsumeQueue.refresh
    monkeypatch.setattr(cq.ConsumeQueue, "refresh", lambda self: refreshed.append(self.directory) or real(self))
    store.cut(TOPIC, keep_readers=True)  # found quiet at the first trigger's refresh? not yet: walked again
    refreshed.clear()
    again = store.cut(TOPIC, keep_readers=True)
    assert refreshed == [] and again.queues == first.queues  # nothing written: nothing opened
    with StoreWriter(root, append=True, consume_queue_file_size=20 * 100) as w:
        w.append(TOPIC, b"late", queue_id=7)
    after = store.cut(TOPIC, keep_readers=True)
    assert [os.path.basename(d) for d in refreshed] == ["7"]  # only the queue written since
    assert after.queue_range(TOPIC, 7) == (0, 2)
    assert [r for r in after.queues if r[1] != 7] == [r for r in first.queues if r[1] != 7]
    # what a fresh Store sees, the kept one sees
    assert cq.Store(root).cut(TOPIC).queues == after.queues
