"""``rmqfilter scan`` and ``rmqfilter demo``: the broker's filter as a Spark job.

The job is :mod:`pyspark_udfs.job` (``spark-submit pyspark_udfs/job.py`` runs the same ``scan``); it is
imported inside the commands, because importing ``pyspark_udfs`` imports pyspark and the parser is
built for every command. Scan's arguments come from :mod:`rmqfilter_options`, which the job parses too.
"""
from __future__ import annotations

import argparse
import json
import os
import tempfile
import time

import cq
from cq.writer.sample import generate_sample_store

from ._common import fail
from ._options import add_json_file_arg, add_master_arg, add_sample_args, add_scan_args

DEMO_MESSAGES = 1_000_000
DEMO_MARKER = "rmqfilter-demo.json"


def add_parsers(subparsers) -> None:
    """Add the ``scan`` and ``demo`` sub-commands."""
    scan = subparsers.add_parser(
        "scan",
        help="replay a consumer group's broker filter over a store on Spark",
        description="Run the broker's two-layer filter for one consumer group over a topic of a "
                    "store on Spark and print units scanned, passed per layer, false positives, "
                    "rows/s and wall time. Several STOREs (or a quoted glob) are the brokers of a "
                    "cluster, scanned as one: the counts are summed over the brokers and shown per "
                    "broker, and --out writes a broker column (docs/reading.md#clusters).",
    )
    add_scan_args(scan)
    scan.set_defaults(func=_run_scan)

    demo = subparsers.add_parser(
        "demo",
        help="write a sample store (~1 M messages) and scan it for its SQL92 groups on local Spark",
        description="Write a deterministic sample broker store with cq.writer.sample (three topics, "
                    "skewed tags and properties, ext bitmaps for three SQL92 groups), then run "
                    "`scan` for each group on local Spark and print the results.",
    )
    add_sample_args(demo, messages=DEMO_MESSAGES, minimum=1)
    demo.add_argument("--store", help="store directory (default: a cached directory under the temp dir; "
                                      "reused when it already holds this sample)")
    add_master_arg(demo, default="local[2]")
    add_json_file_arg(demo, "the results")
    demo.set_defaults(func=_run_demo)


def _run_scan(args: argparse.Namespace) -> int:
    from pyspark_udfs.job import run_scan  # lazy: pyspark, imported by the commands that run Spark only

    return run_scan(args)


def _sample_store(root: str, messages: int, seed: int):
    """Reuse the sample at ``root`` if a previous demo wrote the same one, else write it."""
    marker = os.path.join(root, DEMO_MARKER)
    if os.path.exists(marker):
        with open(marker, encoding="utf-8") as f:
            info = json.load(f)
        if info.get("messages") == messages and info.get("seed") == seed:
            print(f"Reusing the sample store in {root} ({messages:,} messages, seed {seed}).")
            return info
        raise ValueError(f"{root} holds another sample ({info.get('messages')} messages, "
                         f"seed {info.get('seed')}); choose another --store")
    print(f"Writing a sample store of {messages:,} messages to {root} ...", flush=True)
    t0 = time.perf_counter()
    last = [0.0]

    def progress(done: int) -> None:
        now = time.perf_counter()
        if now - last[0] >= 5 or done == messages:
            last[0] = now
            print(f"  {done:>12,} / {messages:,} messages  ({now - t0:5.1f} s)", flush=True)

    sample = generate_sample_store(root, messages=messages, seed=seed, progress=progress)
    seconds = time.perf_counter() - t0
    info = sample.to_dict()
    with open(marker, "w", encoding="utf-8") as f:
        json.dump(info, f, indent=2)
    print(f"Wrote {messages:,} messages in {seconds:.1f} s ({messages / max(seconds, 1e-9):,.0f} messages/s).")
    return info


def _registered(root: str, topic: str) -> list[str]:
    """The SQL92 groups the sample's config/consumerFilter.json registers for ``topic``."""
    return [f.group for f in cq.Store(root).registered_filters(topic)]


def _print_backlog_and_why(root: str, topic: str, groups: list[str]) -> None:
    """What ``rmqfilter backlog`` and ``rmqfilter why`` say about the sample's groups (in-process)."""
    store = cq.Store(root)
    print("\nBacklog from each group's committed offset (config/consumerOffset.json): the broker's lag counts "
          "every unit,\nthe group will receive only what its filter lets through (rmqfilter backlog):")
    print(f"  {'group':<16} {'broker lag':>12} {'will receive':>13}")
    for group in groups:
        b = cq.backlog(store, topic, group)
        print(f"  {group:<16} {b.lag:>12,} {b.will_receive:>13,}")
    group = groups[0]
    committed = store.committed_offsets(group, topic)
    q = min(committed) if committed else 0
    offset = committed.get(q, 0)
    w = cq.why(store, topic, group, queue_id=q, queue_offset=offset)
    print(f"\nThe next message of queue {q} for {group} (rmqfilter why {root} --topic {topic} --group {group} "
          f"--queue {q} --offset {offset}):\n  {w.verdict}")
    store.close()


def _run_demo(args: argparse.Namespace) -> int:
    from pyspark_udfs.job import (  # lazy: pyspark, imported by the commands that run Spark only
        GroupScan,
        format_summary,
        owns_session,
        registered_group_scans,
        scan,
        spark_session,
    )

    root = args.store or os.path.join(tempfile.gettempdir(), f"rmqfilter-demo-{args.messages}-{args.seed}")
    try:
        info = _sample_store(root, args.messages, args.seed)
    except (OSError, ValueError) as exc:  # another sample in --store, a directory that cannot be written
        return fail("rmqfilter demo", exc)
    topic = info["main_topic"]
    print(f"\nTopics and queues: {', '.join(f'{t} ({q})' for t, q in info['topics'].items())}; "
          f"SQL92 groups on {topic}:")
    for g in info["groups"]:
        print(f"  {g['group']:<16} {g['sql']}")
    registered = _registered(root, topic)
    if registered:  # the groups as the broker's config/consumerFilter.json registers them (bornTime and all)
        groups = registered_group_scans(root, topic)
    else:  # a sample written before the sample store had config files
        groups = [GroupScan(g["group"], sql=g["sql"]) for g in info["groups"]]
    # A tag subscription too, to show the tag-code layer and the client's exact re-check.
    groups.append(GroupScan("GID_TAGS_BC", tags="TagB || TagC"))

    print(f"\nStarting Spark ({args.master}) ...", flush=True)
    owned = owns_session()
    spark = spark_session(args.master, app_name="rmqfilter demo")
    results = []
    try:
        for group in groups:
            print(f"Scanning {topic} for {group.group} ...", flush=True)
            results.append(scan(spark, root, topic, group))
    finally:
        if owned:
            spark.stop()
    print()
    print(format_summary(results))
    print("\n" + "\n".join(f"{r.group}: layer 2: {r.layer2}" for r in results))
    if args.json_path:
        with open(args.json_path, "w", encoding="utf-8") as f:
            json.dump({"store": info, "results": [r.as_dict() for r in results]}, f, indent=2)
    if registered:
        _print_backlog_and_why(root, topic, registered)
    print("\nunits: ConsumeQueue units scanned; passed CQ: kept by the ConsumeQueue layer (Bloom bitmap for "
          "SQL92, tag code for tags);\npassed CL: kept by the CommitLog layer (the selector; every message for "
          "tags); delivered: what the consumer gets\n(after the client's exact tag re-check); false pos: passed "
          "CQ but not delivered.")
    return 0
