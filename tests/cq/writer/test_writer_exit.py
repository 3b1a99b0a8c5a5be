"""An abandoned writer at interpreter exit: closed (flushed, unlocked) while the interpreter is whole, silently."""
from __future__ import annotations

import subprocess
import sys
import textwrap

import cq
from cq import format as fmt
from cq.writer import StoreWriter

TOPIC = "T"
CL_FILE = 16 << 10


def _write(root, n: int) -> None:
    with StoreWriter(root, commit_log_file_size=CL_FILE, consume_queue_file_size=2000) as w:
        for i in range(n):
            w.append(TOPIC, b"m", queue_id=i % 4, properties={"seq": str(i)})


def test_abandoned_append_writer_prints_nothing_at_exit(tmp_path):
    root = tmp_path / "store"
    _write(root, 12)
    # what an interrupted writer leaves: records in the CommitLog whose units are not written yet
    path = fmt.list_queue_files(root / fmt.CONSUME_QUEUE_DIR / TOPIC / "0")[0][1]
    with open(path, "r+b") as f:
        f.seek(fmt.CQ_STORE_UNIT_SIZE)
        f.write(bytes(2 * fmt.CQ_STORE_UNIT_SIZE))
    script = textwrap.dedent(f"""
        from cq.writer import StoreWriter
        w = StoreWriter({str(root)!r}, append=True, commit_log_file_size={CL_FILE}, consume_queue_file_size=2000)
        raise SystemExit(3)  # a script that dies with the writer open
    """)
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120, check=False)
    assert (proc.returncode, proc.stderr) == (3, "")
    # closed at exit as a file object is: the records got their units back (the broker's reput)
    assert [int(m.properties["seq"]) for m in cq.Store(root).consume(TOPIC, "G", tags="*", queue_ids=[0])] == \
        [0, 4, 8]
