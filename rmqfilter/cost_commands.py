"""``rmqfilter cost``: what broker-side filtering costs per consumer group, and whether the bitmap pays.

Runs in this process (``cq.analyses.cost``) unless ``--spark`` is given; only that branch imports pyspark,
inside the command function (docs/cost.md).
"""
from __future__ import annotations

import argparse
import json

import bloom
import cq
import selector
from cq.analyses.cost import CostGroup, NoExtUnitsError, filter_cost, resolve_groups
from cq.analyses.cost_render import format_table, render_html
from cq.store.cluster import read_roots
from cq.store.topics import topic_store

from ._common import error_text, fail, reported_warnings
from ._options import add_group_args, add_json_file_arg, add_master_arg, add_store_arg, add_topic_arg


def add_parsers(subparsers) -> None:
    """Add the ``cost`` sub-command."""
    cost = subparsers.add_parser(
        "cost",
        help="per-group filtering cost (layers, evaluations, CommitLog reads, Bloom false positives) "
             "and whether the bitmap pays",
        description="Replay the broker's two filter layers for a topic's consumer groups and report, per "
                    "group: units, passed layer 1, Bloom false positives, delivered, selector evaluations "
                    "and CommitLog reads with and without the bitmap, measured CPU per evaluation (beside "
                    "the broker's quoted Java figures); the Bloom false-positive rate against the number "
                    "of registered groups and other f/n (bitmaps rebuilt in memory, never written); and a "
                    "verdict. Groups come from config/consumerFilter.json, or are given with --sql-group / "
                    "--tag-group. Several STOREs (or a quoted glob) are the brokers of a cluster: the "
                    "counts are summed over the brokers holding the topic, and each broker's rows follow "
                    "(docs/cost.md#clusters). Exit status 2 on bad input, and when the topic has no "
                    "ConsumeQueueExt units (the report then has layer-2-only costs).",
    )
    add_store_arg(cost, several=True)
    add_topic_arg(cost)
    add_group_args(cost, all_groups=True, repeatable=True, required=False)
    cost.add_argument("--sql-group", nargs=2, action="append", default=[], metavar=("G", "SQL"),
                      help="a SQL92 group given explicitly, counted as registered (repeatable; for stores "
                           "without consumerFilter.json)")
    cost.add_argument("--tag-group", nargs=2, action="append", default=[], metavar=("G", "TAGS"),
                      help='a tag group, e.g. GID_T "TagA || TagB" (repeatable; reported, never registered)')
    cost.add_argument("--f", type=int, action="append", default=[], dest="fs", metavar="F",
                      help="Bloom f (error rate %%) of an alternative to replay; pair with --n (repeatable)")
    cost.add_argument("--n", type=int, action="append", default=[], dest="ns", metavar="N",
                      help="Bloom n (expected groups) of an alternative to replay; pair with --f")
    cost.add_argument("--fp-target", metavar="RATE",
                      help="false-positive rate to stay under, e.g. 1%% or 0.01: names the smallest replayed "
                           "bitmap that does")
    add_json_file_arg(cost, "the report")
    cost.add_argument("--html", dest="html_path", metavar="FILE", help="write the report as one HTML page")
    cost.add_argument("--no-timing", action="store_true", help="skip the CPU-per-evaluation measurement")
    cost.add_argument("--spark", action="store_true", help="count on Spark (one task per ConsumeQueue file)")
    add_master_arg(cost, condition="with --spark: ")
    cost.set_defaults(func=_run_cost)


def _rate(text: str | None) -> float | None:
    if text is None:
        return None
    t = text.strip()
    value = float(t[:-1]) / 100 if t.endswith("%") else float(t)
    if not 0 <= value <= 1:
        raise ValueError(f"--fp-target must be between 0 and 1 (or 0% and 100%), got {text!r}")
    return value


def _error(message: str) -> int:
    return fail("rmqfilter cost", message)


def _run_cost(args: argparse.Namespace) -> int:
    with reported_warnings("rmqfilter cost"):
        return _cost(args)


def _cost(args: argparse.Namespace) -> int:
    if len(args.fs) != len(args.ns):
        return _error(f"--f and --n come in pairs: got {len(args.fs)} --f and {len(args.ns)} --n")
    try:
        target = _rate(args.fp_target)
        alternatives = list(zip(args.fs, args.ns)) or None
        for f, n in alternatives or []:
            bloom.BloomFilter(f, n)  # the broker's checks on f and n
        explicit = [CostGroup(g, sql) for g, sql in args.sql_group]
        explicit += [CostGroup(g, tags, "TAG", registered=False) for g, tags in args.tag_group]
        for g in explicit:
            try:
                if g.is_sql:
                    selector.compile(g.expression)
                else:
                    cq.parse_tag_subscription(g.expression)
            except ValueError as exc:
                kind = "--sql-group" if g.is_sql else "--tag-group"
                return _error(f"{kind} {g.group}: {exc} in {'selector' if g.is_sql else 'subscription'} "
                              f"{g.expression!r}")
        if not (args.groups or args.all_groups or explicit):
            return _error("name the groups: --group G, --all-groups, --sql-group G SQL or --tag-group G TAGS")
        groups = None if args.all_groups and not explicit else (
            (_registered(args) if args.all_groups else list(args.groups or [])) + explicit)
        if args.spark:
            from pyspark_udfs.cost import filter_cost_spark  # lazy: pyspark, only --spark runs Spark
            from pyspark_udfs.job import owns_session, spark_session  # lazy: pyspark, as above

            with topic_store(args.store, args.topic, replica=args.replica, tier=args.tier) as store:  # bad input fails before Spark starts
                resolve_groups(store, args.topic, groups)
                roots = read_roots(store)      # a broker's replica read, as the local path reads it
            owned = owns_session()
            spark = spark_session(args.master, app_name=f"rmqfilter cost {args.topic}", progress=False)
            try:
                report = filter_cost_spark(spark, roots if args.replica else args.store, args.topic, groups,
                                           alternatives=alternatives, fp_target=target, timing=not args.no_timing,
                                           tier=args.tier)
            finally:
                if owned:
                    spark.stop()
        else:
            with topic_store(args.store, args.topic, replica=args.replica, tier=args.tier) as store:
                report = filter_cost(store, args.topic, groups, alternatives=alternatives, fp_target=target,
                                     timing=not args.no_timing)
    except cq.UnknownGroupError as exc:
        return _error(f"{exc} (here: --sql-group {exc.group} SQL or --tag-group {exc.group} TAGS)")
    except (LookupError, ValueError, OSError) as exc:  # StoreFormatError, SelectorSyntaxError, bad f/n: ValueErrors
        return _error(error_text(exc))
    print(format_table(report))
    if args.json_path:
        with open(args.json_path, "w", encoding="utf-8") as f:
            json.dump(report.to_dict(), f, indent=2, ensure_ascii=False)
    if args.html_path:
        with open(args.html_path, "w", encoding="utf-8") as f:
            f.write(render_html(report))
    if not report.bitmap_available:
        return _error(str(NoExtUnitsError(args.topic, report.store, report)))
    return 0


def _registered(args: argparse.Namespace) -> list[str]:
    """``--all-groups``: the topic's registered groups, each once (every broker of a cluster registers them)."""
    store = cq.open_stores(args.store, replica=args.replica, **({"tier": args.tier} if args.tier else {}))
    try:
        return list(dict.fromkeys(f.group for f in store.registered_filters(args.topic)))
    finally:
        store.close()
