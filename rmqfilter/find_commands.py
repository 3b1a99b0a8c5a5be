"""``rmqfilter find``: messages of one store or a cluster by key, unique key, message id, store time,
properties and a group's view (docs/find.md).

Runs in this process (:func:`cq.analyses.search.find`) unless ``--spark`` is given; only that branch
imports pyspark (``pyspark_udfs.find``), and ``--out`` imports pyarrow.
"""
from __future__ import annotations

import argparse
import datetime
import json
import textwrap

import selector
from cq.analyses.search import COLUMNS, FindResult, find
from cq.store.cluster import open_stores

from ._common import bad_input_errors, emit, error_text, fail, reported_warnings
from ._options import add_json_flag, add_master_arg, add_store_arg, add_subscription_args, add_topic_arg

__all__ = ["add_parsers", "parse_time"]

_EPOCH = datetime.datetime(1970, 1, 1, tzinfo=datetime.timezone.utc)
_TIME_HELP = ("epoch milliseconds, or an ISO 8601 time such as 2026-11-29T14:05:00 or 2026-11-29T14:05:00.250+08:00 "
              "(no zone: UTC)")


def parse_time(text: str) -> int:
    """A ``--between`` bound: epoch milliseconds, or an ISO 8601 date/time (UTC unless it names a zone);
    a usage error quoting the text otherwise."""
    value = text.strip()
    if value.lstrip("-").isdigit():
        return int(value)
    try:
        t = datetime.datetime.fromisoformat(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected {_TIME_HELP}, got {text!r}") from None
    if t.tzinfo is None:
        t = t.replace(tzinfo=datetime.timezone.utc)
    return (t - _EPOCH) // datetime.timedelta(milliseconds=1)


def time_text(ms: int) -> str:
    """``ms`` as an ISO 8601 UTC time with milliseconds (``2026-11-29T14:05:00.250Z``)."""
    try:
        t = datetime.datetime.fromtimestamp(ms / 1000, tz=datetime.timezone.utc)
    except (OverflowError, OSError, ValueError):
        return str(ms)
    return t.strftime("%Y-%m-%dT%H:%M:%S.") + f"{ms % 1000:03d}Z"


def add_parsers(subparsers) -> None:
    """Add the ``find`` sub-command."""
    p = subparsers.add_parser(
        "find",
        help="find messages by key, unique key, msg id, store time, properties, or what a group receives",
        description=textwrap.fill(
            "Find messages in one store or a cluster (several STOREs; each row names its broker). Keys and unique "
            "keys go through the IndexFiles the broker wrote (every match, no cap; hash collisions resolved "
            "against the record), with a scan, said so, only where no index file covers the CommitLog. A time "
            "window is the broker's binary search of each queue by store time (a logarithmic number of records "
            "read), then the range read exactly. --where keeps records whose properties a SQL92 selector "
            "matches; --group keeps what the group received or would receive, with its why state.", 88),
        epilog="examples:\n"
               "  rmqfilter find STORE --topic Orders --key order-42\n"
               "  rmqfilter find broker-a broker-b --msg-id 7F000001... --json\n"
               "  rmqfilter find STORE --topic Orders --between 2026-11-29T14:04 2026-11-29T14:06 --stats\n"
               "  rmqfilter find STORE --topic Orders --between 0 1800000000000 --where \"amount > 100\" "
               "--group GID_BILLING\n"
               "docs/find.md describes each column and how each lookup reads the store.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_store_arg(p, several=True)
    add_topic_arg(p, required=False)
    p.add_argument("--key", metavar="K", help="a message key (one of KEYS)")
    which = p.add_mutually_exclusive_group()
    which.add_argument("--uniq-key", metavar="U", help="the UNIQ_KEY (the client's message id)")
    which.add_argument("--msg-id", metavar="ID",
                       help="the broker's offset message id (store host + CommitLog offset), else taken as a UNIQ_KEY")
    p.add_argument("--between", nargs=2, type=parse_time, metavar=("T1", "T2"),
                   help=f"store time from T1 to T2, both included: {_TIME_HELP}")
    p.add_argument("--where", metavar="SQL92", help="keep records whose properties this SQL92 selector matches")
    p.add_argument("--group", help="keep what this consumer group received or would receive (needs --topic), "
                                   "with its state")
    add_subscription_args(p)
    out = p.add_mutually_exclusive_group()
    add_json_flag(out, "one object per message, then one line {\"summary\": {\"rows\", \"notes\", \"stats\"}}")
    out.add_argument("--out", metavar="FILE.parquet", help="write the rows to a Parquet file (pyarrow)")
    p.add_argument("--stats", action="store_true",
                   help="also print what was read: index candidates, scanned ranges, each queue's time search "
                        "(units, records probed)")
    p.add_argument("--spark", action="store_true",
                   help="run on Spark (the rocketmq data source): for large ranges; the same rows")
    add_master_arg(p, condition="with --spark: ")
    p.set_defaults(func=_run_find)



def _run_find(args: argparse.Namespace) -> int:
    prog = "rmqfilter find"
    if args.group is None and (args.sql is not None or args.tags is not None):
        return fail(prog, "--sql/--tags are a group's subscription: give --group too")
    if args.group is not None and args.topic is None:
        return fail(prog, "--group needs --topic (a group's filter is per topic)")
    if args.between is not None and args.between[0] > args.between[1]:
        return fail(prog, f"--between: T2 ({args.between[1]}) is before T1 ({args.between[0]})")
    if args.where is not None:
        try:
            selector.compile(args.where)
        except selector.SelectorSyntaxError as exc:
            return fail(prog, f"--where: {error_text(exc)}")
    tier = getattr(args, "tier", None)
    replica = getattr(args, "replica", None)
    if args.spark and replica:
        return fail(prog, "--replica: find --spark reads every store given; name only the replica to read")
    query = {"topic": args.topic, "key": args.key, "uniq_key": args.uniq_key, "msg_id": args.msg_id,
             "between": tuple(args.between) if args.between else None, "where": args.where, "group": args.group,
             "sql": args.sql, "tags": args.tags}
    try:
        with reported_warnings(prog):
            if args.spark:
                from pyspark_udfs.find import find_spark  # lazy: pyspark, only --spark runs Spark
                result = find_spark(args.store, master=args.master, tier=tier, **query)
            else:
                store = open_stores(args.store, replica=replica, **({"tier": tier} if tier is not None else {}))
                try:
                    result = find(store, **query)
                finally:
                    store.close()
    except bad_input_errors() as exc:
        return fail(prog, error_text(exc))
    if args.out:
        write_parquet(result, args.out)
        return emit(f"{len(result.rows)} message(s) written to {args.out}\n" + _notes_text(result, args.stats))
    if args.json:
        lines = [json.dumps(r.to_dict(result.group is not None), ensure_ascii=False) for r in result.rows]
        lines.append(json.dumps({"summary": {"rows": len(result.rows), "notes": result.notes,
                                             "stats": result.stats}}, ensure_ascii=False))
        return emit("\n".join(lines))
    return emit(table_text(result) + "\n" + _notes_text(result, args.stats))


def _columns(result: FindResult) -> list[str]:
    return [c for c in COLUMNS if c != "state" or result.group is not None]


def table_text(result: FindResult) -> str:
    """The rows as an aligned table (times as ISO 8601 UTC)."""
    names = _columns(result)
    cells = [names]
    for r in result.rows:
        d = r.to_dict(result.group is not None)
        cells.append([time_text(d[n]) if n.endswith("_timestamp") else "" if d[n] is None else str(d[n])
                      for n in names])
    widths = [max(len(row[i]) for row in cells) for i in range(len(names))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(row, widths)).rstrip() for row in cells]
    return "\n".join(lines) + f"\n{len(result.rows)} message(s)"


def _notes_text(result: FindResult, stats: bool) -> str:
    lines = [f"note: {n}" for n in result.notes]
    if stats:
        s = result.stats
        lines.append(f"stats: index files {s['index_files']}, hash candidates {s['index_candidates']}, confirmed "
                     f"{s['index_confirmed']}; records scanned {s['scanned_records']}; time search: "
                     f"{len(s['queues'])} queue(s), {s['units']} unit(s), {s['probes']} record(s) probed, "
                     f"{s['range_units']} unit(s) in the ranges found")
        for qs in s["queues"]:
            lines.append(f"stats: {qs['broker']} {qs['topic']}/{qs['queue_id']}: {qs['units']} unit(s), "
                         f"{qs['probes']} probed, range [{qs['first']}, {qs['end']})")
    return "\n".join(lines)


def write_parquet(result: FindResult, path: str) -> None:
    """The rows of ``result`` as a Parquet file (one column per :data:`~cq.analyses.search.COLUMNS` field)."""
    import pyarrow as pa  # lazy: pyarrow only for --out
    import pyarrow.parquet as pq  # lazy: as above

    types = {"queue_id": pa.int32(), "queue_offset": pa.int64(), "commit_log_offset": pa.int64(),
             "store_timestamp": pa.int64(), "born_timestamp": pa.int64()}
    names = _columns(result)
    rows = [r.to_dict(result.group is not None) for r in result.rows]
    schema = pa.schema([(n, types.get(n, pa.string())) for n in names])
    pq.write_table(pa.table({n: [d[n] for d in rows] for n in names}, schema=schema), path)

