"""A store read from S3-compatible object storage against the same store on local disk (issue 37).

Run it as a script (it starts a real S3 server, s3proxy on loopback, as the tests do; Java 17 and
Maven, ``make s3proxy``)::

    PYTHONPATH=. .venv/bin/python bench/bench_object_storage.py --messages 200000

It writes a sample store (``cq.writer.sample``) of ``--messages`` messages, uploads it to a bucket
of the local server, and times side by side, from the bucket (``cq.Store("s3://...")``) and from
local disk (``cq.Store(path)``), the best of ``--rounds``:

* **open**: the Store opened and its main topic's queues listed (for the bucket: the listing and
  the private copy of the objects other than the CommitLog's, docs/object-storage.md#costs);
* **full read**: every message of the main topic, ``Store.consume`` with the tag subscription ``*``
  (records by coalesced ranges: the units give their sizes);
* **SQL92 group read**: what ``GID_RED_CHEAP`` (``color = 'red' AND price < 20.0``) receives,
  ``Store.consume`` through both layers (layer 2 reads records by offset: whole objects);
* **records**: the byte source alone, every record of the main topic's units as ``cq.Message``
  objects, ``cq.ObjectStore.read_messages`` (coalesced ranges) beside ``CommitLog.read_messages``.

Each read opens its own Store (a read is one cut). Per read, for the bucket: requests, bytes fetched,
requests per record and per 4 MiB of records delivered; the answers are checked equal. The
``rocketmq`` data source does not read a bucket yet (docs/object-storage.md#what-is-left), so the reads
here are ``Store.consume``'s. The figures go in the bench report (docs do not quote them).
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from contextlib import closing
from pathlib import Path

import numpy as np

import cq
from cq.writer.sample import generate_sample_store

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
import s3_server  # the tests' S3 server helper (s3proxy), not a package

GROUP, SQL = "GID_RED_CHEAP", "color = 'red' AND price < 20.0"


def read(path: str, topic: str, kind: str) -> tuple[float, int, int, dict]:
    """One read in its own Store: (seconds, messages, stored bytes of the messages, request stats)."""
    t0 = time.perf_counter()
    store = cq.Store(path)
    try:
        n = nbytes = 0
        store.queue_ids(topic)
        if kind != "open":
            for m in store.consume(topic, GROUP, **({"tags": "*"} if kind == "full" else {"sql": SQL})):
                n += 1
                nbytes += m.store_size
        stats = store.source.stats() if store.source is not None else {}
        return time.perf_counter() - t0, n, nbytes, stats
    finally:
        store.close()


def read_records(path: str, local: str, topic: str) -> tuple[float, int, int, dict]:
    """The byte source alone: every record of the topic's units as ``cq.Message`` objects, locally
    (``CommitLog.read_messages``) or from the bucket by coalesced ranges (``cq.ObjectStore.read_messages``)."""
    with closing(cq.Store(local)) as store:
        units = np.concatenate([store.consume_queue(topic, q).read() for q in store.queue_ids(topic)])
    offs, sizes = units["commit_log_offset"].astype(np.int64), units["size"].astype(np.int64)
    t0 = time.perf_counter()
    if path == local:
        with closing(cq.Store(local)) as store:
            msgs = store.commit_log.read_messages(offs)
        stats = {}
    else:
        source = cq.ObjectStore(path)
        msgs = source.read_messages(offs, sizes)
        stats = source.stats()
    return time.perf_counter() - t0, len(msgs), sum(m.store_size for m in msgs), stats


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    ap.add_argument("--messages", type=int, default=200_000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--commit-log-file-size", type=int, default=16 << 20)
    ap.add_argument("--dir", default=None, help="where to write the store (default: a temporary directory)")
    args = ap.parse_args(argv)
    base = Path(tempfile.mkdtemp(prefix="bench-object-storage-", dir=args.dir))
    local = base / "store"
    t0 = time.perf_counter()
    sample = generate_sample_store(local, messages=args.messages, seed=1,
                                   commit_log_file_size=args.commit_log_file_size)
    topic = sample.main_topic
    print(f"store: {args.messages:,} messages, {sum(f.stat().st_size for f in local.rglob('*') if f.is_file()):,} "
          f"bytes, written in {time.perf_counter() - t0:.1f} s")
    server = s3_server.start(base / "s3")
    try:
        os.environ.update({**server.env(), "AWS_ENDPOINT_URL": server.endpoint, "AWS_DEFAULT_REGION": "us-east-1"})
        t0 = time.perf_counter()
        uri = server.upload(local, "bench", "broker-a")
        print(f"uploaded to {uri} in {time.perf_counter() - t0:.1f} s (s3proxy {s3_server.VERSION}, loopback)")
        print(f"{'read':<10} {'where':<6} {'best s':>8} {'messages':>9} {'msg/s':>10} {'requests':>9} "
              f"{'MB fetched':>11} {'req/record':>11} {'req/4MiB':>9} {'ratio':>6}")
        for kind in ("open", "full", "sql92", "records"):
            best = {}
            for where, path in (("local", str(local)), ("bucket", uri)):
                runs = [read_records(path, str(local), topic) if kind == "records" else read(path, topic, kind)
                        for _ in range(args.rounds)]
                best[where] = min(runs, key=lambda r: r[0])
            (lt, ln, lb, _), (_, bn, bb, stats) = best["local"], best["bucket"]
            if (ln, lb) != (bn, bb):
                raise SystemExit(f"{kind}: the bucket's answer differs: {bn} messages vs {ln} locally")
            requests = sum(r for r, _ in stats.values())
            fetched = sum(b for _, b in stats.values())
            for where, (t, n, nb, _) in best.items():
                per_record = f"{requests / n:>11.4f}" if n else f"{'-':>11}"
                per_4mib = f"{requests / (nb / (4 << 20)):>9.2f}" if nb else f"{'-':>9}"
                extra = (f"{requests:>9,} {fetched / 1e6:>11.1f} {per_record} {per_4mib} {lt / t:>6.2f}"
                         if where == "bucket" else "")
                print(f"{kind:<10} {where:<6} {t:>8.3f} {n:>9,} {n / t:>10,.0f} {extra}")
            print(f"{'':<10} bucket requests by kind: "
                  + ", ".join(f"{k} {r:,} ({b / 1e6:.1f} MB)" for k, (r, b) in sorted(stats.items())))
    finally:
        server.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
