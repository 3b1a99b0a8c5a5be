"""``rmqfilter why``, ``backlog`` and ``pending``: one message through a group's filter (and every copy
of it), a group's real backlog, and the broker's pending work.

All three only read the store (``cq``, ``selector``, ``bloom``), never Spark. ``docs/why.md`` shows them.
"""
from __future__ import annotations

import argparse
import json
import textwrap

import cq
from cq.analyses.paths import why_every_copy
from cq.analyses.pending import COLUMNS, pending
from cq.analyses.trace import TRACE_TOPIC, client_trace, has_trace_topic
from cq.store.topics import registered_groups, topic_store

from ._common import bad_input_errors, emit, error_text, fail, reported_warnings
from ._options import add_consumer_args, add_json_flag, add_store_arg, subscription_conflict
from .trace_commands import client_trace_text


def add_parsers(subparsers) -> None:
    """Add the ``why`` and ``backlog`` sub-commands."""
    why = subparsers.add_parser(
        "why",
        help="walk one message through every step of the broker's filter for a consumer group",
        description=textwrap.fill("Say where one message is for a consumer group, and why: every copy of it in the store "
                    "(its topic, SCHEDULE_TOPIC_XXXX, rmq_sys_wheel_timer, the transaction half topics, the group's %%RETRY%%, "
                    "POP retry (%%RETRY%%{group}_{topic}) and %%DLQ%% topics; through the IndexFiles, or a scan that says "
                    "so) and its state (consumed, pending, filtered, scheduled, recalled: a timer message its producer "
                    "recalled; uncommitted, rolled_back, retrying, "
                    "dead_letter, in_flight: a POP consumer holds it, per the broker's revive log; gated, "
                    "expired) in one sentence first; then the copy in the topic through the broker's filter: the "
                    "ConsumeQueue unit; layer 1 (the tags code, or the ext unit's Bloom bitmap with the group's k "
                    "bits and which are clear; isMsgInLive against the registered bornTime); layer 2 (the "
                    "selector's evaluation tree); the client's exact tag re-check; the verdict. Without "
                    "--sql/--tags the group's SQL92 registration is read from the store's "
                    "config/consumerFilter.json.", 88),
        epilog="examples:\n"
               "  rmqfilter why STORE --topic Orders --group GID_BILLING --tags 'TagA || TagB' --msg-id UNIQ_KEY\n"
               "  rmqfilter why STORE --topic Orders --group GID_SQL --key order-42 --json\n"
               "  rmqfilter why STORE --topic Orders --group GID_SQL --queue 1 --offset 17\n"
               "docs/why.md and docs/paths.md show the output and each state.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_consumer_args(why, several=True)
    which = why.add_mutually_exclusive_group(required=True)
    which.add_argument("--queue", type=int, metavar="Q", help="queue id (with --offset)")
    which.add_argument("--msg-id", metavar="ID",
                       help="the broker's message id (store host + CommitLog offset) or a UNIQ_KEY")
    which.add_argument("--key", metavar="K", help="a message key (KEYS)")
    why.add_argument("--offset", type=int, metavar="O", help="queue offset (with --queue)")
    why.add_argument("--broker", metavar="NAME",
                     help="with several STOREs: the broker to look in (needed with --queue when several "
                          "brokers hold the topic)")
    why.add_argument("--filter-support-retry", action="store_true",
                     help="the broker runs with filterSupportRetry=true (its config is not in the store): in a "
                          "%%RETRY%% topic, layer 2 of a SQL92 group evaluates the filter registered for the "
                          "message's RETRY_TOPIC")
    why.add_argument("--trace-topic", metavar="T", default=None,
                     help=f"the message-trace topic whose records show what the clients reported (default "
                          f"{TRACE_TOPIC}, read when a store holds it; docs/trace.md#why)")
    add_json_flag(why, "an object for --queue/--offset, a list for --msg-id/--key")
    why.set_defaults(func=_run_why)

    backlog = subparsers.add_parser(
        "backlog",
        help="per queue: committed offset, broker lag, and how many of those the group will really receive",
        description="Read the group's committed offsets (config/consumerOffset.json) and, per queue, "
                    "print the committed offset, the max offset, the broker's lag (max - committed: every "
                    "unit, also those the group's filter drops) and how many units of [committed, max) "
                    "the group will actually receive (its two-layer filter replayed), with totals; then what "
                    "it will receive later: its %%RETRY%% topic's backlog and the delay-level and timer copies still "
                    "due (not recalled) "
                    "to the topic or the retry topic that its filter lets through, bucketed by due time; "
                    "for a POP group, its POP retry topic's backlog and the messages it popped and has "
                    "neither acked nor had revived (in flight, bucketed by revive time; docs/paths.md#backlog).",
    )
    add_consumer_args(backlog, all_groups=True, several=True)
    add_json_flag(backlog, '{"queues": [...], "total": {"lag", "will_receive"}, "expired": n, "retry", "scheduled", '
                           '"in_flight", "pop_retry", "will_receive_later"} (a list with --all-groups)')
    backlog.set_defaults(func=_run_backlog)

    pend = subparsers.add_parser(
        "pending",
        help="the broker's pending work: scheduled copies, transaction halves, dead letters, POP pops",
        description=textwrap.fill(
            "Print, from a store alone, what the broker still has to do or gave up on: every "
            "SCHEDULE_TOPIC_XXXX and timer copy with its real topic, due time and status (scheduled, or "
            "delivered per config/delayOffset.json or, for a timer, its real topic or config/timercheck; a "
            "timer message a recall names: recalled); every transaction half with its status (committed, rolled_back, "
            "check_limit, unresolved), check count and age; every %%DLQ%% record with its origin message "
            "id, reconsume times and the original's store time; every message a POP group popped (from "
            "the revive log) with its status (acked, in_flight, revived), pop time and due time. The data "
            "source's table option (scheduled, transactions, dead_letters, pops) gives the same rows.", 88),
        epilog="examples:\n"
               "  rmqfilter pending STORE\n"
               "  rmqfilter pending STORE --table transactions --json\n"
               "  rmqfilter pending STORE --table pops\n"
               "docs/paths.md#pending describes each column.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_store_arg(pend)
    pend.add_argument("--table", choices=list(COLUMNS), action="append",
                      help="only this table (repeatable); default: all of them")
    add_json_flag(pend, '{"scheduled": [...], "transactions": [...], "dead_letters": [...], "pops": [...]}')
    pend.set_defaults(func=_run_pending)



def _run_why(args: argparse.Namespace) -> int:
    prog = "rmqfilter why"
    if (args.queue is None) != (args.offset is None):
        return fail(prog, "--queue and --offset go together")
    try:
        with reported_warnings(prog), topic_store(args.store, args.topic, replica=args.replica, tier=args.tier) as store:
            result = why_every_copy(store, args.topic, args.group, sql=args.sql, tags=args.tags, queue_id=args.queue,
                                    queue_offset=args.offset, msg_id=args.msg_id, key=args.key,
                                    filter_support_retry=args.filter_support_retry, broker=args.broker)
            if args.queue is not None:
                result = result[:1]
            traced = _client_traces(store, result, args)
    except bad_input_errors() as exc:
        return fail(prog, error_text(exc))
    if args.json:
        docs = [w.to_dict() for w in result]
        for doc, (ct, _stored) in zip(docs, traced):
            if ct is not None:
                doc["client_trace"] = ct.to_dict()
        return emit(json.dumps(docs[0] if args.queue is not None else docs, indent=2, ensure_ascii=False))
    texts = [str(w) + ("" if ct is None else "\n\n" + client_trace_text(ct, stored))
             for w, (ct, stored) in zip(result, traced)]
    head = f"{len(result)} messages match; each in turn:\n\n" if len(result) > 1 and args.queue is None else ""
    return emit(head + "\n\n".join(texts))


def _client_traces(store, paths: list, args: argparse.Namespace) -> list[tuple]:
    """For each path: (what the clients reported about its message for the group, its store time in the topic),
    or (None, None) where no store holds the trace topic or the message has no UNIQ_KEY (docs/trace.md#why)."""
    if not has_trace_topic(store, args.trace_topic):
        if args.trace_topic is not None:
            raise LookupError(f"--trace-topic: no store holds topic {args.trace_topic!r}")
        return [(None, None)] * len(paths)
    out = []
    for p in paths:
        stored = next((c.message.store_timestamp for c in p.copies if c.role == "topic"), None)
        out.append((client_trace(store, p.uniq_key, group=p.group, topic=args.trace_topic), stored)
                   if p.uniq_key else (None, None))
    return out


def _run_backlog(args: argparse.Namespace) -> int:
    prog = "rmqfilter backlog"
    conflict = subscription_conflict(args)
    if conflict:
        return fail(prog, conflict)
    try:
        with reported_warnings(prog), topic_store(args.store, args.topic, replica=args.replica, tier=args.tier) as store:
            groups = registered_groups(store, args.topic) if args.all_groups else [args.group]
            results = [cq.backlog(store, args.topic, g, sql=args.sql, tags=args.tags, later=True) for g in groups]
    except bad_input_errors() as exc:
        return fail(prog, error_text(exc))
    if args.json:
        doc = [b.to_dict() for b in results] if args.all_groups else results[0].to_dict()
        return emit(json.dumps(doc, indent=2, ensure_ascii=False))
    return emit("\n\n".join(str(b) for b in results))


def _run_pending(args: argparse.Namespace) -> int:
    prog = "rmqfilter pending"
    tables = args.table or list(COLUMNS)
    try:
        with reported_warnings(prog):
            store = cq.Store(args.store, tier=args.tier)
            try:
                doc = {t: pending(store, t) for t in tables}
            finally:
                store.close()
    except bad_input_errors() as exc:
        return fail(prog, error_text(exc))
    if args.json:
        return emit(json.dumps(doc, indent=2, ensure_ascii=False))
    parts = []
    for table, rows in doc.items():
        names = [n for n, _ in COLUMNS[table]]
        cells = [names] + [["" if r[n] is None else str(r[n]) for n in names] for r in rows]
        widths = [max(len(row[i]) for row in cells) for i in range(len(names))]
        lines = [f"{table}: {len(rows)} row(s)"]
        lines += ["  " + "  ".join(c.ljust(w) for c, w in zip(row, widths)).rstrip() for row in cells] if rows else []
        parts.append("\n".join(lines))
    return emit("\n\n".join(parts))


