"""``rmqfilter trace``: the message-trace records RocketMQ's clients wrote to the trace topic, decoded
(docs/trace.md).

Reads the store only (:func:`cq.analyses.trace.trace`), never Spark. A record that does not read is
printed with the trace message's CommitLog offset and its byte offset in the body, and the command
exits 1 (docs/trace.md#errors).
"""
from __future__ import annotations

import argparse
import json
import textwrap

import cq
from cq.analyses.trace import TRACE_TOPIC, ClientTrace, TraceResult, trace
from cq.store.cluster import open_stores

from ._common import emit, error_text, fail, reported_warnings
from ._options import add_json_flag, add_store_arg
from .find_commands import time_text

__all__ = ["add_parsers", "client_trace_text"]

#: The columns of the text table (``--json`` gives every column of cq.analyses.trace.COLUMNS).
TEXT_COLUMNS = ("broker", "trace_type", "timestamp", "group", "topic", "msg_id", "keys", "success", "cost_ms",
                "retry_times", "context_code", "transaction_state", "trace_born_host", "trace_commit_log_offset")


def add_parsers(subparsers) -> None:
    """Add the ``trace`` sub-command."""
    p = subparsers.add_parser(
        "trace",
        help="decode the message-trace records clients wrote (sends, deliveries, answers, transactions, recalls)",
        description=textwrap.fill(
            "Decode the records of the message-trace topic (RMQ_SYS_TRACE_TOPIC, or --trace-topic) of one store or "
            "a cluster: Pub (a send), SubBefore (a delivery to a listener), SubAfter (its answer), EndTransaction, "
            "Recall; each with the client that wrote it (the trace message's born host). --msg-id/--uniq-key/--key "
            "find one message's records through the IndexFiles (the trace messages' keys hold the ids and keys "
            "they trace). A record that does not read is printed with its place, and the exit status is 1.", 88),
        epilog="examples:\n"
               "  rmqfilter trace STORE\n"
               "  rmqfilter trace STORE --uniq-key 7F0000010A2F18B4AAC2... --json\n"
               "  rmqfilter trace broker-a broker-b --key order-42\n"
               "docs/trace.md describes each column.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_store_arg(p, several=True)
    p.add_argument("--trace-topic", metavar="T", default=None,
                   help=f"the trace topic (default {TRACE_TOPIC}; --topic in other commands is a topic of messages)")
    which = p.add_mutually_exclusive_group()
    which.add_argument("--msg-id", metavar="ID",
                       help="a traced message's offset message id (of a record in STORE) or UNIQ_KEY")
    which.add_argument("--uniq-key", metavar="U", help="a traced message's UNIQ_KEY (the client's message id)")
    which.add_argument("--key", metavar="K", help="a key of the traced messages")
    add_json_flag(p, '{"topic", "trace_messages", "rows": [...], "errors": [...], "notes": [...]}')
    p.set_defaults(func=_run_trace)


def _run_trace(args: argparse.Namespace) -> int:
    prog = "rmqfilter trace"
    if args.tier is not None:   # docs/trace.md#limits: the tier's files are not searched, as find
        return fail(prog, "--tier: trace does not search a tier yet (docs/reading.md#tiered-storage)")
    try:
        with reported_warnings(prog):
            store = open_stores(args.store, replica=args.replica)
            try:
                result = trace(store, topic=args.trace_topic, msg_id=args.msg_id, uniq_key=args.uniq_key, key=args.key)
            finally:
                store.close()
    except (cq.StoreFormatError, LookupError, ValueError) as exc:
        return fail(prog, error_text(exc))
    if args.json:
        status = emit(json.dumps(result.to_dict(), ensure_ascii=False, indent=2))
    else:
        status = emit(table_text(result))
    return status or (1 if result.errors else 0)


def _cell(name: str, value) -> str:
    if value is None:
        return ""
    if name == "timestamp":
        return time_text(value)
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def table_text(result: TraceResult) -> str:
    """The records as an aligned table, then the records that did not read and the notes."""
    cells = [list(TEXT_COLUMNS)]
    for r in result.rows:
        d = r.to_dict()
        cells.append([_cell(n, d[n]) for n in TEXT_COLUMNS])
    widths = [max(len(row[i]) for row in cells) for i in range(len(TEXT_COLUMNS))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(row, widths)).rstrip() for row in cells]
    lines.append(f"{len(result.rows)} record(s) in {result.trace_messages} trace message(s) of {result.topic}")
    lines += [f"unreadable: {e}" for e in result.errors]
    lines += [f"note: {n}" for n in result.notes]
    return "\n".join(lines)


def client_trace_text(ct: ClientTrace, stored_at: int | None = None) -> str:
    """``why``'s section: what the clients reported about one message, beside the store's time (docs/trace.md#why)."""
    lines = [f"what the clients reported (trace topic {ct.topic}):"]
    if stored_at is not None:
        lines.append(f"  store     stored {time_text(stored_at)}")
    for s in ct.sends:
        ok = "sent" if s.success else "send failed"
        lines.append(f"  send      {ok} at {time_text(s.timestamp)} by {s.group} ({s.trace_born_host}) to "
                     f"{s.store_host}, {s.cost_ms} ms, {s.msg_type}")
    for t in ct.transactions:
        check = " (answering a transaction check)" if t.from_transaction_check else ""
        lines.append(f"  end       {t.transaction_state} at {time_text(t.timestamp)} by {t.group}{check}")
    for r in ct.recalls:
        lines.append(f"  recall    {'recalled' if r.success else 'recall failed'} at {time_text(r.timestamp)} by {r.group}")
    for c in ct.consumptions:
        if c.success is None:
            answer = "no answer traced"
        else:
            answer = ("consumed" if c.success else "consumption failed") + f" in {c.cost_ms} ms"
            if c.context_code is not None:
                answer += f" ({c.context_code})"
        lines.append(f"  receive   {c.group} at {time_text(c.received_at) if c.received_at else '?'} by "
                     f"{c.client}, reconsumeTimes {c.retry_times}: {answer}")
    if len(lines) == 1 + (stored_at is not None):
        lines.append("  (no record of this message" + (f" for group {ct.group}" if ct.group else "") + ")")
    lines += [f"  unreadable: {e}" for e in ct.errors]
    return "\n".join(lines)
