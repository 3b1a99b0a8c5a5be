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
requests per record and per 4 MiB of records delivered; the answers are checked equal.

Then the ``rocketmq`` data source (Spark local[2], docs/object-storage.md#spark), from the bucket and
from local disk, the best of ``--rounds``:

* **spark full**: the messages table of the main topic, every column decoded (the query sums
  ``store_size`` and the bodies' lengths, so the reader decodes every record whole);
* **spark sql92**: what ``GID_RED_CHEAP`` receives (options ``group`` and ``sql``, layer 2 in the reader).

Requests cannot be counted inside Spark's Python workers, so each read is replayed in this process
with the same plan and reader (``RocketMQReader.partitions()`` then ``read()`` of every partition, each
in a Store of its own, as a task in a Python worker of its own opens one: the planning Store's requests
and every task's): its requests and bytes are the bucket's columns. A task opens its Store at the plan's
listing, taking the objects its slices carry (docs/object-storage.md#spark).

**plan** lines (also with ``--no-spark``: no Spark needed), measured first, in a process that has read
nothing of the store yet: for each data source read, the requests and bytes its plan fetched
(``RocketMQReader.partitions()``, the driver's) and those of its tasks (every partition's ``read()``, each
in a Store of its own), by kind.

``--report FILE`` writes the results as a Markdown fragment (``### Object storage`` and tables) for
the bench report. The figures go in the bench report (docs do not quote them).
"""
from __future__ import annotations

import argparse
import os
import shutil
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
#: requests and bytes of every cq.ObjectStore of this process, by kind (the replays of the data source)
_REQUESTS: dict[str, list[int]] = {}


def _count_every_request() -> None:
    """Count every request any :class:`cq.ObjectStore` of this process makes into :data:`_REQUESTS`
    (the data source opens and closes its own; a benchmark's instrument, not the library's)."""
    from cq.readers.objects import ObjectStore

    counted = ObjectStore._count

    def count(self, kind: str, nbytes: int) -> None:
        counted(self, kind, nbytes)
        entry = _REQUESTS.setdefault(kind, [0, 0])
        entry[0] += 1
        entry[1] += nbytes

    ObjectStore._count = count


def _spark_options(path: str, topic: str, kind: str, endpoint: str) -> dict[str, str]:
    options = {"path": path, "topic": topic}
    if kind == "spark sql92":
        options.update(group=GROUP, sql=SQL)
    if "://" in path:
        options.update(endpoint=endpoint, region="us-east-1")
    return options


def spark_read(spark, options: dict[str, str]) -> tuple[float, int, int, dict]:
    """One data source read (a fresh plan): (seconds, rows, stored bytes of the rows, {})."""
    from pyspark.sql import functions as F

    t0 = time.perf_counter()
    df = spark.read.format("rocketmq").options(**options).load()
    row = df.agg(F.count(F.lit(1)).alias("n"), F.sum("store_size").alias("bytes"),
                 F.sum(F.length("body")).alias("body")).first()
    return time.perf_counter() - t0, int(row["n"]), int(row["bytes"] or 0), {}


def replay_requests(options: dict[str, str], schema) -> tuple[int, int, dict]:
    """The data source's plan and reads of ``options`` in this process (no Spark): rows, stored bytes,
    and the requests by kind every ObjectStore made (the plan's, and each task's in a worker of its own,
    as local[2] runs a query of two partitions)."""
    from pyspark_udfs._source import ReadOptions
    from pyspark_udfs.datasource import RocketMQReader

    _REQUESTS.clear()
    read = ReadOptions.parse(options)
    reader = RocketMQReader(read, schema)
    n = nbytes = 0
    for part in reader.partitions():
        for batch in reader.read(part):
            n += batch.num_rows
            nbytes += int(np.asarray(batch.column("store_size")).sum())
        _close_workers_stores()
    return n, nbytes, {k: (r, b) for k, (r, b) in _REQUESTS.items()}


def _close_workers_stores() -> None:
    """Close the Stores of the bucket the replayed tasks opened: the next task opens its own, as a task
    in another Python worker does."""
    from pyspark_udfs import _reader

    for store in _reader._BUCKETS.values():
        store.close()
    _reader._BUCKETS.clear()


def plan_requests(options: dict[str, str]) -> tuple[dict, dict, int]:
    """The data source's plan of ``options`` and its tasks, replayed in this process with no Spark:
    ``(the plan's requests by kind, the tasks' requests by kind, rows)``."""
    from pyspark_udfs._source import ReadOptions
    from pyspark_udfs.datasource import RocketMQReader

    read = ReadOptions.parse(options)
    reader = RocketMQReader(read, read.schema())
    _REQUESTS.clear()
    parts = reader.partitions()
    plan = {k: (r, b) for k, (r, b) in _REQUESTS.items()}
    _REQUESTS.clear()
    rows = 0
    for part in parts:  # each task in a worker of its own
        rows += sum(batch.num_rows for batch in reader.read(part))
        _close_workers_stores()
    return plan, {k: (r, b) for k, (r, b) in _REQUESTS.items()}, rows


def _by_kind(stats: dict) -> str:
    total = f"{sum(r for r, _ in stats.values()):,} requests, {sum(b for _, b in stats.values()) / 1e6:.2f} MB"
    return total + " (" + ", ".join(f"{k} {r:,} / {b / 1e6:.2f} MB" for k, (r, b) in sorted(stats.items())) + ")"


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


def _row(kind: str, best: dict, stats: dict) -> list[list[str]]:
    """The table rows of one read, local then bucket; SystemExit when the answers differ."""
    (lt, ln, lb, _), (_bt, bn, bb, _) = best["local"], best["bucket"]
    if (ln, lb) != (bn, bb):
        raise SystemExit(f"{kind}: the bucket's answer differs: {bn} messages ({bb} bytes) vs {ln} ({lb}) locally")
    requests = sum(r for r, _ in stats.values())
    fetched = sum(b for _, b in stats.values())
    log_requests, log_bytes = stats.get("CommitLog", (0, 0))
    rows = []
    for where, (t, n, nb, _) in best.items():
        cells = [kind, where, f"{t:.3f}", f"{n:,}", f"{n / t:,.0f}" if t else "-"]
        if where == "bucket":
            cells += [f"{requests:,}", f"{fetched / 1e6:.1f}", f"{requests / n:.4f}" if n else "-",
                      f"{fetched / n:,.0f}" if n else "-", f"{requests / (nb / (4 << 20)):.2f}" if nb else "-",
                      f"{requests / (log_bytes / (4 << 20)):.2f}" if log_bytes else "-",
                      f"{log_requests / (log_bytes / (4 << 20)):.2f}" if log_bytes else "-", f"{lt / t:.2f}"]
        else:
            cells += [""] * 8
        rows.append(cells)
    return rows


HEAD = ["read", "where", "best s", "messages", "msg/s", "requests", "MB fetched", "req/record",
        "bytes fetched/record", "req/4MiB", "req/4MiB read", "CommitLog req/4MiB read", "bucket/local"]


def _print(rows: list[list[str]]) -> None:
    widths = [max(len(HEAD[i]), *(len(r[i]) for r in rows)) for i in range(len(HEAD))]
    for r in [HEAD, *rows]:
        print("  ".join(c.ljust(w) if i < 2 else c.rjust(w) for i, (c, w) in enumerate(zip(r, widths))))


def _markdown(rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(HEAD) + " |", "|" + "|".join(["---"] * 2 + ["---:"] * (len(HEAD) - 2)) + "|"]
    return "\n".join(lines + ["| " + " | ".join(r) + " |" for r in rows])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    ap.add_argument("--messages", type=int, default=200_000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--commit-log-file-size", type=int, default=16 << 20)
    ap.add_argument("--dir", default=None, help="where to write the store (default: a temporary directory)")
    ap.add_argument("--keep", action="store_true", help="keep the store and the bucket's files (default: removed)")
    ap.add_argument("--no-spark", action="store_true", help="skip the data source's reads")
    ap.add_argument("--report", metavar="FILE", help="write the results as a Markdown fragment (### Object storage)")
    args = ap.parse_args(argv)
    base = Path(tempfile.mkdtemp(prefix="bench-object-storage-", dir=args.dir))
    local = base / "store"
    t0 = time.perf_counter()
    sample = generate_sample_store(local, messages=args.messages, seed=1,
                                   commit_log_file_size=args.commit_log_file_size)
    topic = sample.main_topic
    size = sum(f.stat().st_size for f in local.rglob("*") if f.is_file())
    print(f"store: {args.messages:,} messages, {size:,} bytes, written in {time.perf_counter() - t0:.1f} s")
    server = s3_server.start(base / "s3")
    spark = None
    try:
        # before Spark starts: its Python workers read the credentials from the environment they inherit
        os.environ.update({**server.env(), "AWS_ENDPOINT_URL": server.endpoint, "AWS_DEFAULT_REGION": "us-east-1"})
        t0 = time.perf_counter()
        uri = server.upload(local, "bench", "broker-a")
        print(f"uploaded to {uri} in {time.perf_counter() - t0:.1f} s (s3proxy {s3_server.VERSION}, loopback)")
        # the plans first, in a process that has read nothing of the store yet (no sealed object noted)
        _count_every_request()
        plan_lines = []
        for kind in ("spark full", "spark sql92"):
            plan, tasks, rows = plan_requests(_spark_options(uri, topic, kind, server.endpoint))
            plan_lines += [f"plan of {kind}: {_by_kind(plan)}", f"tasks of {kind} ({rows:,} rows): {_by_kind(tasks)}"]
        store_rows, kinds = [], []
        for kind in ("open", "full", "sql92", "records"):
            best = {}
            for where, path in (("local", str(local)), ("bucket", uri)):
                runs = [read_records(path, str(local), topic) if kind == "records" else read(path, topic, kind)
                        for _ in range(args.rounds)]
                best[where] = min(runs, key=lambda r: r[0])
            stats = best["bucket"][3]
            store_rows += _row(kind, best, stats)
            kinds.append(f"{kind}: " + ", ".join(f"{k} {r:,} ({b / 1e6:.1f} MB)" for k, (r, b) in sorted(stats.items())))
        _print(store_rows)
        print()
        for line in plan_lines:
            print(line)
        spark_rows, spark_kinds = [], []
        if not args.no_spark:
            from pyspark_udfs.job import spark_session

            spark = spark_session("local[2]", app_name="bench object storage", progress=False,
                                  conf={"spark.ui.enabled": "false", "spark.sql.shuffle.partitions": "2"})
            spark.sparkContext.setLogLevel("ERROR")
            for kind in ("spark full", "spark sql92"):
                best, stats = {}, {}
                for where, path in (("local", str(local)), ("bucket", uri)):
                    options = _spark_options(path, topic, kind, server.endpoint)
                    spark_read(spark, options)  # warm-up: the Python workers start, the modules load
                    best[where] = min((spark_read(spark, options) for _ in range(args.rounds)), key=lambda r: r[0])
                    if where == "bucket":
                        schema = spark.read.format("rocketmq").options(**options).load().schema
                        n, nb, stats = replay_requests(options, schema)
                        if (n, nb) != best[where][1:3]:
                            raise SystemExit(f"{kind}: the replay read {n} rows, Spark {best[where][1]}")
                spark_rows += _row(kind, best, stats)
                spark_kinds.append(f"{kind}: " + ", ".join(f"{k} {r:,} ({b / 1e6:.1f} MB)"
                                                          for k, (r, b) in sorted(stats.items())))
            print()
            _print(spark_rows)
        for line in kinds + spark_kinds:
            print(f"bucket requests by kind, {line}")
        if args.report:
            Path(args.report).write_text(_report(args, size, store_rows, spark_rows, kinds + spark_kinds,
                                                 plan_lines), encoding="utf-8")
            print(f"report fragment written to {args.report}")
    finally:
        if spark is not None:
            spark.stop()
        server.stop()
        if args.keep:
            print(f"kept {base}")
        else:  # the store and the bucket's copy: hundreds of MB each run
            shutil.rmtree(base, ignore_errors=True)
    return 0


def _report(args, size: int, store_rows, spark_rows, kinds, plan_lines=()) -> str:
    """The Markdown fragment of ``--report``: a heading and the two tables."""
    cores = os.cpu_count()
    parts = [
        "### Object storage",
        "",
        (f"`bench/bench_object_storage.py --messages {args.messages} --rounds {args.rounds}`: a sample store of "
        f"{args.messages:,} messages ({size / 1e6:.1f} MB, CommitLog files of {args.commit_log_file_size >> 20} MiB) "
        f"read from a bucket of s3proxy {s3_server.VERSION} on loopback and from local disk, best of "
        f"{args.rounds}, on {cores} cores (docs/object-storage.md). Requests are the ones the server answered "
        "(`stats()`: one GET per ranged read, no HEAD before it, docs/object-storage.md#requests). "
        "`req/4MiB`: requests per 4 MiB of the records "
        "the read delivered; `req/4MiB read`: per 4 MiB of the CommitLog records the read fetched (every "
        "request, the listing, config objects and queues' included; `CommitLog req/4MiB read`: the "
        "CommitLog's requests alone); `bucket/local`: the bucket's throughput over the local one's."),
        "",
        "`cq.Store` (one process):",
        "",
        _markdown(store_rows),
    ]
    if spark_rows:
        parts += ["", ("The `rocketmq` data source (Spark local[2]); the bucket's requests are the plan's and each "
                  "task's in a Python worker of its own, replayed in-process:"), "",
                  _markdown(spark_rows)]
    parts += ["", "Requests by kind (bucket): " + "; ".join(kinds), ""]
    if plan_lines:
        parts += [("The data source's plan (the driver) and its tasks (each in a worker of its own), replayed "
                   "in-process:"), "",
                  *(f"- {line}" for line in plan_lines), ""]
    return "\n".join(parts)


if __name__ == "__main__":
    sys.exit(main())
