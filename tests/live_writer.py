"""A stand-in broker for the live-store tests: appends to a store for a bounded time.

Run as ``python tests/live_writer.py ROOT SECONDS [--rate N] [--min-files N] [--until PATH]``:
after SECONDS it goes on until the CommitLog has ``--min-files`` files and ``PATH`` exists (the
test's reader says it has read enough), however slow the machine. Messages go to
topic ``LiveTopic`` (queues 0-1 from the start, queues 2-3 appearing after a
third of the run) and ``LiveOther`` (appearing after half of it); each has a
``seq`` property (its number in its queue, from 0), ``color`` red/blue
alternating and tags ``TagA``/``TagB``. Group ``GID_RED`` (``color = 'red'``)
is registered, so units carry bitmaps. The writer flushes after every few
messages, as a broker's reput makes units visible shortly after their
records. Small files, so the run spans many CommitLog and ConsumeQueue files.
Prints ``started`` once the first messages are on disk and the totals per
queue as JSON when done.
"""
from __future__ import annotations

import json
import os
import sys
import time

from cq.writer.writer import StoreWriter

TOPIC = "LiveTopic"
OTHER = "LiveOther"
GROUP, SQL = "GID_RED", "color = 'red'"
SIZES = {"commit_log_file_size": 64 << 10, "consume_queue_file_size": 20 * 200, "ext_file_size": 8 << 10}


def main(argv: list[str]) -> int:
    root, seconds = argv[0], float(argv[1])
    rate = float(argv[argv.index("--rate") + 1]) if "--rate" in argv else 0.0
    min_files = int(argv[argv.index("--min-files") + 1]) if "--min-files" in argv else 0
    until = argv[argv.index("--until") + 1] if "--until" in argv else None
    commit_log = os.path.join(root, "commitlog")

    def more() -> bool:  # after SECONDS: until the CommitLog has min_files files and the until file exists
        return len(os.listdir(commit_log)) < min_files or (until is not None and not os.path.exists(until))

    counts: dict[str, int] = {}
    with StoreWriter(root, enable_ext=True, **SIZES) as w:
        w.register_group(TOPIC, GROUP, SQL)
        w.register_group(OTHER, GROUP, SQL)
        t0 = time.monotonic()
        n = 0
        while (elapsed := time.monotonic() - t0) < seconds or more():
            queues = [(TOPIC, 0), (TOPIC, 1)]
            if elapsed > seconds / 3:
                queues += [(TOPIC, 2), (TOPIC, 3)]
            if elapsed > seconds / 2:
                queues.append((OTHER, 0))
            topic, qid = queues[n % len(queues)]
            key = f"{topic}/{qid}"
            seq = counts.get(key, 0)
            counts[key] = seq + 1
            w.append(topic, f"{key}#{seq}".encode() * 3, queue_id=qid, tags="TagA" if seq % 2 else "TagB",
                     properties={"seq": str(seq), "color": "red" if seq % 2 == 0 else "blue"})
            n += 1
            if n % 7 == 0:
                w.flush()
            if n == 50:
                print("started", flush=True)
            if rate:
                time.sleep(1 / rate)
    print(json.dumps(counts), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
