"""``rmqfilter why`` and ``rmqfilter backlog``: one message through a group's filter, and its real backlog.

Both only read the store (``cq``, ``selector``, ``bloom``), never Spark. ``docs/why.md`` shows them.
"""
from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
import warnings
from collections.abc import Iterator

import cq
import selector


def add_parsers(subparsers) -> None:
    """Add the ``why`` and ``backlog`` sub-commands."""
    why = subparsers.add_parser(
        "why",
        help="walk one message through every step of the broker's filter for a consumer group",
        description="Say why a consumer group does or does not receive one message: the ConsumeQueue "
                    "unit; layer 1 (the tags code, or the ext unit's Bloom bitmap with the group's k bits "
                    "and which are clear; isMsgInLive against the registered bornTime); layer 2 (the "
                    "selector's evaluation tree); the client's exact tag re-check; the verdict. Without "
                    "--sql/--tags the group's SQL92 registration is read from the store's "
                    "config/consumerFilter.json.",
    )
    why.add_argument("store", metavar="STORE", help="store root directory")
    why.add_argument("--topic", required=True, help="the message's topic")
    why.add_argument("--group", required=True, help="consumer group")
    how = why.add_mutually_exclusive_group()
    how.add_argument("--sql", help="the group's SQL92 selector (default: its registration)")
    how.add_argument("--tags", help='the group\'s tag subscription, e.g. "TagA || TagB"')
    which = why.add_mutually_exclusive_group(required=True)
    which.add_argument("--queue", type=int, metavar="Q", help="queue id (with --offset)")
    which.add_argument("--msg-id", metavar="ID",
                       help="the broker's message id (store host + CommitLog offset) or a UNIQ_KEY")
    which.add_argument("--key", metavar="K", help="a message key (KEYS)")
    why.add_argument("--offset", type=int, metavar="O", help="queue offset (with --queue)")
    why.add_argument("--filter-support-retry", action="store_true",
                     help="the broker runs with filterSupportRetry=true (its config is not in the store): in a "
                          "%%RETRY%% topic, layer 2 of a SQL92 group evaluates the filter registered for the "
                          "message's RETRY_TOPIC")
    why.add_argument("--json", action="store_true",
                     help="print JSON: an object for --queue/--offset, a list for --msg-id/--key")
    why.set_defaults(func=_run_why)

    backlog = subparsers.add_parser(
        "backlog",
        help="per queue: committed offset, broker lag, and how many of those the group will really receive",
        description="Read the group's committed offsets (config/consumerOffset.json) and, per queue, "
                    "print the committed offset, the max offset, the broker's lag (max - committed: every "
                    "unit, also those the group's filter drops) and how many units of [committed, max) "
                    "the group will actually receive (its two-layer filter replayed), with totals.",
    )
    backlog.add_argument("store", metavar="STORE", help="store root directory")
    backlog.add_argument("--topic", required=True, help="topic")
    who = backlog.add_mutually_exclusive_group(required=True)
    who.add_argument("--group", help="consumer group")
    who.add_argument("--all-groups", action="store_true",
                     help="every SQL92 group registered for the topic in config/consumerFilter.json")
    how = backlog.add_mutually_exclusive_group()
    how.add_argument("--sql", help="the group's SQL92 selector (default: its registration)")
    how.add_argument("--tags", help='the group\'s tag subscription, e.g. "TagA || TagB"')
    backlog.add_argument("--json", action="store_true",
                         help='print {"queues": [...], "total": {"lag", "will_receive"}} (a list with --all-groups)')
    backlog.set_defaults(func=_run_backlog)


@contextlib.contextmanager
def reported_warnings(prog: str) -> Iterator[None]:
    """Print warnings (a config file read from its .bak, bloom data that does not match) to stderr."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            yield
        finally:
            seen = set()
            for w in caught:
                text = str(w.message)
                if text not in seen:
                    seen.add(text)
                    print(f"{prog}: warning: {text}", file=sys.stderr)


def _errors():
    """The exceptions bad input raises (each names what was wrong): exit status 2."""
    return (cq.StoreFormatError, cq.UnknownGroupError, cq.TagSubscriptionError, selector.SelectorSyntaxError,
            LookupError, ValueError)


@contextlib.contextmanager
def _topic_store(args: argparse.Namespace) -> Iterator[cq.Store]:
    """The store of ``args.store``, opened for this command's read and closed after it; LookupError
    when ``args.topic`` has no consume queues there."""
    store = cq.Store(args.store)
    try:
        if args.topic not in store.topics():
            raise LookupError(f"topic {args.topic!r} has no consume queues in {args.store}")
        yield store
    finally:
        store.close()


def _run_why(args: argparse.Namespace) -> int:
    prog = "rmqfilter why"
    if (args.queue is None) != (args.offset is None):
        print(f"{prog}: error: --queue and --offset go together", file=sys.stderr)
        return 2
    try:
        with reported_warnings(prog), _topic_store(args) as store:
            result = store.why(args.topic, args.group, sql=args.sql, tags=args.tags, queue_id=args.queue,
                               queue_offset=args.offset, msg_id=args.msg_id, key=args.key,
                               filter_support_retry=args.filter_support_retry)
    except _errors() as exc:
        print(f"{prog}: error: {_message(exc, args)}", file=sys.stderr)
        return 2
    if args.json:
        doc = [w.to_dict() for w in result] if isinstance(result, list) else result.to_dict()
        return _emit(json.dumps(doc, indent=2, ensure_ascii=False))
    if isinstance(result, list):
        head = f"{len(result)} messages match; each in turn:\n\n" if len(result) > 1 else ""
        return _emit(head + "\n\n".join(str(w) for w in result))
    return _emit(str(result))


def _run_backlog(args: argparse.Namespace) -> int:
    prog = "rmqfilter backlog"
    if args.all_groups and (args.sql is not None or args.tags is not None):
        print(f"{prog}: error: --all-groups takes each group's registered subscription; drop --sql/--tags",
              file=sys.stderr)
        return 2
    try:
        with reported_warnings(prog), _topic_store(args) as store:
            if args.all_groups:
                groups = [f.group for f in store.registered_filters(args.topic)]
                if not groups:
                    raise LookupError(f"no SQL92 group is registered for topic {args.topic!r} in "
                                      f"{store.config_path('consumerFilter.json')}")
            else:
                groups = [args.group]
            results = [store.backlog(args.topic, g, sql=args.sql, tags=args.tags) for g in groups]
    except _errors() as exc:
        print(f"{prog}: error: {_message(exc, args)}", file=sys.stderr)
        return 2
    if args.json:
        doc = [b.to_dict() for b in results] if args.all_groups else results[0].to_dict()
        return _emit(json.dumps(doc, indent=2, ensure_ascii=False))
    return _emit("\n\n".join(str(b) for b in results))


def _emit(text: str) -> int:
    """Print ``text``; a closed pipe (``| head``) ends quietly, as Unix tools do."""
    try:
        print(text)
        sys.stdout.flush()
    except BrokenPipeError:
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    return 0


def _message(exc: BaseException, args: argparse.Namespace) -> str:
    if isinstance(exc, selector.SelectorSyntaxError):
        return f"{exc} in selector {args.sql!r}"
    # KeyError quotes its message; everything else reads as it is
    return str(exc.args[0]) if isinstance(exc, KeyError) and exc.args else str(exc)
