"""``rmqfilter inspect``, ``rmqfilter consume`` (and ``gen-store``): a broker store, locally, without Spark."""
from __future__ import annotations

import argparse
import glob
import json
import os
import sys
import time

import cq
from cq.filter.subscription import DEFAULT_BLOOM, NO_BLOOM
from cq.readers import config as cfg
from cq.readers.objects import is_object_uri
from cq.store.describe import describe
from cq.store.topics import registered_groups, topic_store
from cq.writer.sample import generate_sample_store
from selector.errors import SelectorSyntaxError

from ._common import error_text, fail, reported_warnings, stdout_closed
from ._options import (
    add_consumer_args,
    add_filter_args,
    add_json_flag,
    add_message_output_args,
    add_progress_arg,
    add_sample_args,
    add_store_arg,
    subscription_conflict,
)


def _import_from_cwd() -> None:
    """Let ``--filter module:function`` find a module in the current directory, as ``python -m`` would."""
    if "" not in sys.path and os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())


def add_parsers(subparsers) -> None:
    """Add the store sub-commands."""
    inspect = subparsers.add_parser(
        "inspect",
        help="list a store's topics, queues, offsets and message counts",
        description="Read a RocketMQ broker store directory (read-only) and print its CommitLog "
                    "files and, per topic and queue, the ConsumeQueue offsets, message counts and "
                    "ConsumeQueueExt size.",
    )
    add_store_arg(inspect, several=True)
    add_json_flag(inspect, "one document describing the store")
    inspect.add_argument("--count-messages", action="store_true",
                         help="also walk the whole CommitLog and count its records (slow on big stores)")
    inspect.set_defaults(func=_run_inspect)

    consume = subparsers.add_parser(
        "consume",
        help="list the messages a consumer group would receive (the broker's two-layer filter)",
        description="Replay the broker's filter for one consumer group over a topic: tag codes or "
                    "Bloom bitmaps first, then the exact tag / SQL92 selector. Messages go to "
                    "stdout, per-layer counts and progress to stderr.",
    )
    add_consumer_args(consume, all_groups=True, several=True)
    add_filter_args(consume, where="found on PYTHONPATH or in the current directory; without --sql/--tags "
                                   "the group's registration, else '*', comes first")
    consume.add_argument("--queue", type=int, action="append", dest="queue_ids", metavar="ID",
                         help="queue id to read (repeatable; default: all)")
    add_message_output_args(consume)
    consume.add_argument("--no-bloom", action="store_true",
                         help="SQL92: ignore ext bitmaps (the group's filter has no bloom data)")
    consume.add_argument("--born-time", type=int, default=None,
                         help="SQL92: the filter's bornTime in ms; older bitmaps are not trusted (default: the "
                              "group's registered bornTime when --sql is the expression it registered, else 0)")
    consume.add_argument("--verify-crc", action="store_true", help="check the body CRC of each delivered message")
    add_progress_arg(consume)
    consume.set_defaults(func=_run_consume)
    _add_gen_store_parser(subparsers)


# ---------------------------------------------------------------- gen-store
def _add_gen_store_parser(subparsers) -> None:
    gen = subparsers.add_parser(
        "gen-store",
        help="write a deterministic sample broker store (CommitLog, ConsumeQueue, ext bitmaps)",
        description="Write a sample RocketMQ store with cq.writer.sample: a few topics and queues, Zipf-like "
                    "tag popularity, properties region/price/color/priority, and ConsumeQueueExt "
                    "bitmaps for three SQL92 groups registered on the main topic, and the config files a "
                    "broker serving them keeps (config/consumerFilter.json, consumerOffset.json with offsets "
                    "committed partway, subscriptionGroup.json, topics.json). The same "
                    "--messages/--seed/--topics always give the same bytes. The description (topics, "
                    "groups and their SQL) goes to stdout, progress to stderr.",
    )
    gen.add_argument("root", metavar="DIR", help="store root to create (must not hold a store yet)")
    add_sample_args(gen, messages=100_000, minimum=0)
    gen.add_argument("--topics", nargs="+", metavar="TOPIC", default=None,
                     help="topic names; the first gets the SQL92 groups (default SampleTopic OrderTopic "
                          "AuditTopic)")
    gen.add_argument("--queues", type=int, default=4, help="queues of the main topic (default 4)")
    gen.add_argument("--commit-log-file-size", type=int, default=64 * 1024 * 1024, metavar="BYTES",
                     help="CommitLog file size (default 64 MiB, so Spark gets several files)")
    gen.add_argument("--consume-queue-file-size", type=int, default=6_000_000, metavar="BYTES",
                     help="ConsumeQueue file size (default 6000000, the broker's)")
    gen.add_argument("--ext-file-size", type=int, default=48 * 1024 * 1024, metavar="BYTES",
                     help="ConsumeQueueExt file size (default 48 MiB, the broker's)")
    add_json_flag(gen, "one document describing the sample")
    add_progress_arg(gen)
    gen.set_defaults(func=_run_gen_store)


def _run_gen_store(args: argparse.Namespace) -> int:
    progress = _Progress(args.progress)
    started = time.perf_counter()
    try:
        info = generate_sample_store(
            args.root, messages=args.messages, seed=args.seed, topics=args.topics, queues=args.queues,
            commit_log_file_size=args.commit_log_file_size,
            consume_queue_file_size=args.consume_queue_file_size, ext_file_size=args.ext_file_size,
            progress=lambda done: progress(done, args.messages),
        )
    except (OSError, ValueError, TypeError) as exc:
        progress.finish()
        return fail("rmqfilter gen-store", exc)
    progress.finish()
    elapsed = time.perf_counter() - started
    print(f"rmqfilter gen-store: wrote {info.messages:,} messages to {info.root} in {elapsed:.1f} s "
          f"({info.messages / max(elapsed, 1e-9):,.0f} messages/s)", file=sys.stderr)
    if args.json:
        json.dump(info.to_dict(), sys.stdout, indent=2, ensure_ascii=False)
        print()
        return 0
    print(f"Store {info.root}: {info.messages:,} messages, seed {info.seed}")
    for topic, queues in info.topics.items():
        print(f"  topic {topic}: {queues} queue(s)" + ("  (SQL92 groups, ext bitmaps)" if topic == info.main_topic
                                                      else ""))
    for g in info.groups:
        print(f"  group {g.group} on {g.topic}: {g.sql}")
    print(f"  tags {', '.join(info.tags)} (Zipf-like; ~5% untagged); properties {', '.join(info.properties)}")
    return 0


# ---------------------------------------------------------------- inspect
def _run_inspect(args: argparse.Namespace) -> int:
    prog = "rmqfilter inspect"
    if len(args.store) > 1 or any(glob.has_magic(p) for p in args.store):
        return _inspect_cluster(prog, args)
    opened = None
    try:
        with reported_warnings(prog):
            if is_object_uri(args.store[0]):  # opened once: its listing is the read's cut (docs/object-storage.md)
                opened = cq.Store(args.store[0], **({"tier": args.tier} if args.tier else {}))
            layout = opened.layout if opened is not None else cq.detect_layout(args.store[0])
            if not args.json:  # the mode first: it explains an error the rest of the store gives
                print(f"Store {args.store[0] if opened is not None else layout.root}")
                print(f"Mode: {layout.describe()}")
                print(f"Written by: {cq.written_by(layout.root, layout).describe()}")
            info = describe(opened if opened is not None else args.store[0], count_messages=args.count_messages,
                            tier=None if opened is not None else args.tier)
    except cq.StoreFormatError as exc:
        return fail(prog, exc)
    finally:
        if opened is not None:
            opened.close()
    if args.json:
        json.dump(info, sys.stdout, indent=2, ensure_ascii=False)
        print()
        return 0
    _print_inspect(info)
    return 0


def _inspect_cluster(prog: str, args: argparse.Namespace) -> int:
    """``inspect`` of several stores, a cluster's brokers: each broker's store in turn, named
    (docs/reading.md#clusters); ``--json``: ``{"brokers": [{"broker": name, ...}, ...]}``."""
    try:
        with reported_warnings(prog):
            cluster = cq.Cluster(args.store, replica=args.replica, **({"tier": args.tier} if args.tier else {}))
            try:
                infos = [{"broker": name, "named_by": cluster.named_by[name],
                          **describe(store, count_messages=args.count_messages),
                          **({"replicas": cluster.replicas[name].describe()} if name in cluster.replicas else {})}
                         for name, store in cluster.stores.items()]
                # the modes while the stores are open (a bucket's store is read from a private copy)
                modes = {name: (store.layout.describe(), cq.written_by(store.layout.root, store.layout).describe())
                         for name, store in cluster.stores.items()}
            finally:
                cluster.close()
    except cq.StoreFormatError as exc:
        return fail(prog, exc)
    if args.json:
        json.dump({"brokers": infos}, sys.stdout, indent=2, ensure_ascii=False)
        print()
        return 0
    for i, info in enumerate(infos):
        print(("\n" if i else "") + f"Broker {info['broker']} (named from {info['named_by']}): store {info['store']}")
        mode, written = modes[info["broker"]]
        print(f"Mode: {mode}")
        print(f"Written by: {written}")
        if "replicas" in info:
            _print_replicas(info["replicas"])
        _print_inspect(info)
    return 0


def _print_replicas(rs: dict) -> None:
    """A broker's replicas (docs/reading.md#replicas): each one's files and CommitLog end, the one
    read, each queue's range per replica, and the tails one holds beyond another."""
    print(f"Replicas: {len(rs['replicas'])}; read {rs['read']} (picked: {rs['picked_by']})")
    for r in rs["replicas"]:
        facts = [r["mode"]]
        if r["broker_id"] is not None:
            facts.append(f"brokerId {r['broker_id']}")
        if r["epochs"] is not None:
            facts.append("epochs " + (", ".join(f"{e}@{o:,}" for e, o in r["epochs"]) or "none"))
        if r["confirm_offset"] is not None:
            facts.append(f"confirm offset {r['confirm_offset']:,}")
        print(f"  {'*' if r['root'] == rs['read'] else ' '} {r['root']}: CommitLog end {r['commit_log_end']:,}; "
              + "; ".join(facts))
    roots = [r["root"] for r in rs["replicas"]]
    ranges = {}
    for i, r in enumerate(rs["replicas"]):
        for q in r["queues"]:
            ranges.setdefault((q["topic"], q["queue_id"]), {})[i] = (q["min_offset"], q["max_offset"])
    header = f"  {'topic':<32} {'queue':>5} " + " ".join(f"{'replica ' + str(i + 1):>21}" for i in range(len(roots)))
    print(header)
    for (topic, qid), by in sorted(ranges.items()):
        cells = " ".join(f"{f'[{by[i][0]}, {by[i][1]})' if i in by else '-':>21}" for i in range(len(roots)))
        print(f"  {topic:<32} {qid:>5} {cells}")
    for i, root in enumerate(roots):
        print(f"  replica {i + 1}: {root}")
    if not rs["tails"]:
        print("  Tails: none (every replica's queues end at the same offsets)")
    for t in rs["tails"]:
        print(f"  Tail: {t['topic']} queue {t['queue_id']} offsets [{t['start']:,}, {t['end']:,}) "
              f"({t['messages']:,} messages): on {t['holder']}, not on {t['lacking']}")


def _print_inspect(info: dict) -> None:
    cl = info["commit_log"]
    extra = f", {cl['messages']:,} messages" if "messages" in cl else ""
    print(f"CommitLog: {cl['files']} file(s) of {cl['file_size']:,} B, offsets "
          f"[{cl['min_offset']:,}, {cl['max_offset']:,}){extra}")
    header = f"{'topic':<32} {'queue':>5} {'min':>12} {'max':>12} {'messages':>12} {'ext bytes':>12}"
    print(header)
    print("-" * len(header))
    total = 0
    for topic, queues in info["topics"].items():
        for qid, q in queues.items():
            ext = "-" if q["ext_bytes"] is None else f"{q['ext_bytes']:,}"
            print(f"{topic:<32} {qid:>5} {q['min_offset']:>12,} {q['max_offset']:>12,} "
                  f"{q['messages']:>12,} {ext:>12}")
            total += q["messages"]
            c = q.get("compaction")
            if c is not None:  # docs/reading.md#compaction-topics: what the broker serves instead
                position = "none yet" if c["position"] is None else f"{c['position']:,}"
                print(f"{'':<32} {'':>5}   served from the compaction store: {c['units']:,} message(s) in "
                      f"[{c['min_offset']:,}, {c['max_offset']:,}), compacted up to offset {position}")
    print(f"{len(info['topics'])} topic(s), {total:,} message(s) in consume queues")
    if "tier" in info:  # docs/reading.md#tiered-storage
        print(f"\nTier {info['tier']['path']} (cluster {info['tier']['cluster']}):")
        for topic, queues in info["topics"].items():
            for qid, q in queues.items():
                t = q["tier"]
                if t is not None:
                    served = "none" if t["served"] is None else f"[{t['served'][0]:,}, {t['served'][1]:,})"
                    print(f"  {topic} {qid}: tier [{t['min_offset']:,}, {t['max_offset']:,}), local minimum "
                          f"{q['local_min_offset']:,}, served from the tier {served}")
    used = {name: src for name, src in info["config"].items() if src is not None}
    if used:
        print("\nConfig files: " + ", ".join(
            src if src.endswith(".bak") else name if src.endswith(name) else f"{name} (RocksDB {src})"
            for name, src in used.items()))
    if info["registered_groups"]:
        print("\nSQL92 groups registered in config/consumerFilter.json:")
        for g in info["registered_groups"]:
            flags = (" [dead]" if g["is_dead"] else "") + ("" if g["bloom_matches"] else " [bloom data mismatch]")
            print(f"  {g['group']} on {g['topic']}: {g['expression']!r}  bornTime {g['born_time']}{flags}")
    if info["committed_offsets"]:
        source = info["config"].get(cfg.CONSUMER_OFFSET_FILE) or ""
        where = "config/consumerOffset.json" if source.endswith(".json") or not source else \
            f"RocksDB config/{os.path.basename(source)}"  # consumerOffsets (v1) or rdb (v2)
        if cfg.LMQ_CONSUMER_OFFSET_FILE in info["config"]:
            where = f"config/{cfg.LMQ_CONSUMER_OFFSET_FILE}"
        print(f"\nCommitted offsets ({where}, next offset per queue):")
        for c in info["committed_offsets"]:
            offsets = ", ".join(f"{q}:{o}" for q, o in c["offsets"].items())
            print(f"  {c['group']} on {c['topic']}: {offsets}")


# ---------------------------------------------------------------- consume
class _Progress:
    """A one-line progress bar on stderr, redrawn at most 5 times a second."""

    MIN_UNITS = 200_000

    def __init__(self, mode: str) -> None:
        self.mode = mode
        self.start = time.perf_counter()
        self.last = 0.0
        self.drawn = False

    def __call__(self, done: int, total: int) -> None:
        if self.mode == "never":
            return
        if self.mode == "auto" and (not sys.stderr.isatty() or total < self.MIN_UNITS):
            return
        now = time.perf_counter()
        if now - self.last < 0.2 and done < total:
            return
        self.last = now
        frac = done / total if total else 1.0
        bar = "#" * int(30 * frac)
        rate = done / max(now - self.start, 1e-9)
        sys.stderr.write(f"\r[{bar:<30}] {frac:6.1%} {done:,}/{total:,} units {rate:,.0f} units/s")
        sys.stderr.flush()
        self.drawn = True

    def finish(self) -> None:
        if self.drawn:
            sys.stderr.write("\n")


def message_json(m, body: str = "uncompressed") -> dict:
    """A message as ``--format jsonl`` prints it; ``body_length`` of the body ``body`` names."""
    raw = m.uncompressed_body() if body == "uncompressed" else m.body
    return {
        **({} if m.broker is None else {"broker": m.broker}),
        "topic": m.topic, "queue_id": m.queue_id, "queue_offset": m.queue_offset,
        "commit_log_offset": m.commit_log_offset, "msg_id": m.msg_id, "tags": m.tags, "keys": m.keys,
        "store_timestamp": m.store_timestamp, "body_length": len(raw), "properties": m.properties,
    }


def _run_consume(args: argparse.Namespace) -> int:
    prog = "rmqfilter consume"
    conflict = subscription_conflict(args)
    if conflict:
        return fail(prog, conflict)
    progress = _Progress(args.progress)
    try:
        message_filter = None
        if args.message_filter is not None:
            _import_from_cwd()
            message_filter = cq.MessageFilter(args.message_filter, on_error=args.on_filter_error)
        with reported_warnings(prog), topic_store(args.store, args.topic, replica=args.replica, tier=args.tier) as store:
            groups = registered_groups(store, args.topic) if args.all_groups else [args.group]
            out = sys.stdout
            for group in groups:
                t0 = time.perf_counter()
                prefix = f"{group}\t" if args.all_groups else ""
                queues = {"queue_ids": args.queue_ids}
                if isinstance(store, cq.Cluster):  # --queue Q: queue Q of every broker
                    queues = {"queues": None if args.queue_ids is None else
                              [(b, q) for b in store.brokers_of(args.topic) for q in args.queue_ids]}
                result = store.consume(
                    args.topic, group, sql=args.sql, tags=args.tags, **queues,
                    bloom_filter=NO_BLOOM if args.no_bloom else DEFAULT_BLOOM, born_time=args.born_time,
                    verify_crc=args.verify_crc, progress=progress, message_filter=message_filter,
                )
                for delivered, m in enumerate(result, 1):
                    if args.format == "text":  # a cluster's messages lead with their broker
                        out.write(f"{prefix}{'' if m.broker is None else m.broker + chr(9)}{m.queue_id}\t"
                                  f"{m.queue_offset}\t{m.msg_id}\t{m.tags or ''}\t{m.keys or ''}\n")
                    elif args.format == "jsonl":
                        doc = message_json(m, args.body)
                        if args.all_groups:
                            doc = {"group": group, **doc}
                        out.write(json.dumps(doc, ensure_ascii=False) + "\n")
                    if args.limit is not None and delivered >= args.limit:
                        break
                progress.finish()
                _print_stats(result.stats, time.perf_counter() - t0, group if args.all_groups else None,
                             message_filter is not None)
    except BrokenPipeError:
        return stdout_closed()
    except (cq.StoreFormatError, cq.TagSubscriptionError, cq.UnknownGroupError, SelectorSyntaxError,
            LookupError, cq.FilterError, ValueError, ImportError) as exc:  # ImportError: an LZ4/ZSTD body's codec
        progress.finish()
        return fail(prog, error_text(exc))
    return 0


def _print_stats(st, seconds: float, group: str | None, custom_filter: bool = False) -> None:
    print(
        (f"{group}: " if group else "") +
        f"units scanned {st.units_scanned:,}; passed ConsumeQueue layer {st.passed_consume_queue:,}; "
        f"passed CommitLog layer {st.passed_commit_log:,}; delivered {st.delivered:,}; "
        f"bloom tested {st.bloom_tested:,}, pruned {st.bloom_pruned:,}, "
        f"false positives {st.bloom_false_positives:,}; client re-check dropped {st.client_filtered:,}; "
        f"missing in CommitLog {st.commit_log_missing:,}; unresolved ext {st.ext_missing:,}; "
        + (f"custom filter rejected {st.filter_rejected:,}, skipped on error {st.filter_skipped:,}; "
           if custom_filter else "")
        + f"{seconds:.2f} s",
        file=sys.stderr,
    )
