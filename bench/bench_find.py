"""``rmqfilter find`` against a scan of the same question, on one large store written with cq/writer (issue 38).

Run it as a script (not a pytest module: the store takes minutes to write)::

    PYTHONPATH=. .venv/bin/python bench/bench_find.py --messages 2000000
    PYTHONPATH=. .venv/bin/python bench/bench_find.py --messages 10000000 --dir /big/disk

It writes a store of ``--messages`` messages over ``--queues`` queues of one topic, one message per
millisecond of store time, each with a ``UNIQ_KEY`` and one key of ``--keys`` distinct ones, and the
IndexFiles the broker would have built (:func:`cq.writer.index.write_index_files`). Then, each timed
``--rounds`` times (the best kept), side by side:

* ``find --between`` over a window of ``--window-ms`` in the middle of the store: the broker's binary
  search of each queue by store time (``cq.analyses.search.find``), against a full scan of the same
  queues that reads every unit's store time and keeps the window (the same rows, checked);
* ``find --key`` through the IndexFiles, against a scan of the topic's records
  (``cq.analyses.find.scan_topic``, what ``why`` falls back to without an index).

It prints, per lookup, the units or records each side read, the rows, and the times; the figures go
in the bench report (docs do not quote them).
"""
from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time

import numpy as np

import cq
from cq.analyses.by_time import store_timestamps
from cq.analyses.find import scan_topic
from cq.analyses.search import FindRow, find
from cq.readers.indexfile import DEFAULT_INDEX_NUM, DEFAULT_MAX_HASH_SLOT_NUM
from cq.store.cluster import broker_name
from cq.writer import StoreWriter
from cq.writer.index import write_index_files

TOPIC = "BenchFindTopic"
T0 = 1_700_000_000_000


def write_store(root: str, n: int, queues: int, keys: int) -> None:
    def messages():
        for i in range(n):
            yield {"topic": TOPIC, "body": b"x" * 64, "queue_id": i % queues, "keys": f"key-{i % keys}",
                   "properties": {"UNIQ_KEY": f"U{i:012d}", "n": str(i)}, "store_timestamp": T0 + i}

    with StoreWriter(root, commit_log_file_size=1 << 30) as w:
        w.append_many(messages())


def scan_between(store: cq.Store, begin: int, end: int) -> tuple[list[FindRow], int]:
    """Every unit of every queue of the topic read, its record's store time compared: the rows and units read."""
    log = store.commit_log
    lo, hi = log.min_offset, log.max_offset
    broker = broker_name(store)[0]
    found, units = [], 0
    for q in store.queue_ids(TOPIC):
        with store.queue_readers(TOPIC, q, ext=False) as (cqueue, _ext):
            for _first, batch in cqueue.iter_batches(1 << 16):
                offs = batch["commit_log_offset"].astype(np.int64)
                stamps = store_timestamps(log, offs, batch["size"], lo, hi)
                units += len(offs)
                found += offs[(stamps >= begin) & (stamps <= end)].tolist()
    found.sort()
    return [FindRow.of(broker, m, "scan") for m in log.read_messages(found)], units


def best(rounds: int, fn):
    times, out = [], None
    for _ in range(rounds):
        t = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t)
    return min(times), out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--messages", type=int, default=2_000_000, help="messages in the store (default 2,000,000: "
                   "about a minute to write on the project's 2-core machine; the issue asks 10,000,000)")
    p.add_argument("--queues", type=int, default=8)
    p.add_argument("--keys", type=int, default=100_000, help="distinct keys (each carried by messages/keys messages)")
    p.add_argument("--window-ms", type=int, default=1000, help="the --between window (default one second)")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--dir", help="where to write the store (default a temporary directory, removed after)")
    args = p.parse_args(argv)
    base = args.dir or tempfile.mkdtemp(prefix="bench-find-")
    root = os.path.join(base, "store")
    try:
        t = time.perf_counter()
        if not os.path.isdir(root):
            write_store(root, args.messages, args.queues, args.keys)
            written = time.perf_counter() - t
            t = time.perf_counter()
            # the broker's default geometry (maxHashSlotNum, maxIndexNum): read without inferring it
            files = write_index_files(root, hash_slot_num=DEFAULT_MAX_HASH_SLOT_NUM, index_num=DEFAULT_INDEX_NUM)
            indexed = time.perf_counter() - t
            print(f"store: {args.messages:,} messages, {args.queues} queues, written in {written:.1f} s; "
                  f"{len(files)} index file(s) in {indexed:.1f} s")
        store = cq.Store(root)
        try:
            n = args.messages
            begin = T0 + n // 2
            end = begin + args.window_ms - 1
            t_find, r = best(args.rounds, lambda: find(store, topic=TOPIC, between=(begin, end)))
            t_scan, (scanned, units) = best(args.rounds, lambda: scan_between(store, begin, end))
            assert [x.commit_log_offset for x in r.rows] == [x.commit_log_offset for x in scanned]
            key = f"key-{args.keys // 2}"
            t_key, k = best(args.rounds, lambda: find(store, topic=TOPIC, key=key))
            t_kscan, ks = best(args.rounds, lambda: scan_topic(store, TOPIC, key, None))
            assert sorted(x.commit_log_offset for x in k.rows) == sorted(m.commit_log_offset for m in ks)
        finally:
            store.close()
        per_queue = max(q["probes"] for q in r.stats["queues"])
        rows = [
            (f"--between {args.window_ms} ms", "binary search by store time",
             f"{r.stats['probes']:,} probes + {r.stats['range_units']:,} units", len(r.rows), t_find, ""),
            ("", "full scan of the queues", f"{units:,} units", len(scanned), t_scan, f"{t_scan / t_find:.1f}x"),
            (f"--key {key}", "IndexFiles", f"{k.stats['index_candidates']:,} candidates", len(k.rows), t_key, ""),
            ("", "scan of the topic (scan_topic)", f"{n:,} records", len(ks), t_kscan, f"{t_kscan / t_key:.1f}x"),
        ]
        head = f"{'lookup':<24} {'method':<32} {'read':>28} {'rows':>7} {'time ms':>10} {'scan/find':>10}"
        print(head)
        print("-" * len(head))
        for lookup, method, read, count, secs, ratio in rows:
            print(f"{lookup:<24} {method:<32} {read:>28} {count:>7,} {secs * 1e3:>10.2f} {ratio:>10}")
        bound = 2 * int(np.ceil(np.log2(n // args.queues + 1)))
        print(f"time search: {len(r.stats['queues'])} queues of about {n // args.queues:,} units, at most "
              f"{per_queue} probes in one queue (2 x ceil(log2(n+1)) = {bound}); best of {args.rounds} rounds")
    finally:
        if not args.dir:
            shutil.rmtree(base, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
