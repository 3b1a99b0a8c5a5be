"""``rmqfilter tail``: what a consumer group would receive from a live store, as it arrives (docs/live.md).

Local and without Spark (imports ``cq`` only): the stream's offset rules of :mod:`cq.store.stream`,
read with :meth:`cq.Store.consume`.
"""
from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import sys
import threading

import cq
from cq.readers.objects import NO_TAIL, refuse_object_uri
from cq.store import stream
from cq.store.topics import topic_store
from selector.errors import SelectorSyntaxError

from ._common import error_text, fail, reported_warnings
from ._options import add_consumer_args, add_message_output_args
from .store_commands import message_json


def add_parsers(subparsers) -> None:
    """Add the ``tail`` sub-command."""
    tail = subparsers.add_parser(
        "tail",
        help="follow a live store: print the messages a consumer group would receive as they arrive",
        description="Follow a store a broker is writing and print, as they arrive, the messages the "
                    "group would receive (the broker's two-layer filter), queue by queue in offset order. "
                    "Several STOREs (or a quoted glob) are the brokers of a cluster: each look takes one cut "
                    "per broker and the messages lead with their broker (docs/reading.md#clusters). "
                    "Ctrl-C stops it (exit status 130).",
    )
    add_consumer_args(tail, several=True)
    tail.add_argument("--from", dest="starting", default="latest", metavar="WHERE",
                      help="latest (default: only what arrives from now on), earliest, committed (the group's "
                           "offsets in config/consumerOffset.json) or a JSON object of offsets: for one store "
                           '{"topic": {"queue_id": offset}}, for several '
                           '{"brokers": {"broker": {"topic": {"queue_id": offset}}}}')
    add_message_output_args(tail, formats=("text", "jsonl"))
    tail.add_argument("--interval", type=float, default=0.5, help="seconds between looks when nothing is new")
    tail.set_defaults(func=_run_tail)


def _run_tail(args: argparse.Namespace) -> int:
    if args.interval <= 0:
        print(f"rmqfilter tail: error: --interval must be > 0, got {args.interval}", file=sys.stderr)
        return 2
    # Ctrl-C ends a tail. Python raises KeyboardInterrupt wherever the main thread is, and one
    # raised inside a finalizer (a reader's maps released by the garbage collector) is printed
    # and dropped: the flag makes the next round end the tail all the same.
    interrupted: list[int] = []

    def on_sigint(signum, frame):
        interrupted.append(signum)
        raise KeyboardInterrupt

    main_thread = threading.current_thread() is threading.main_thread()
    previous = signal.signal(signal.SIGINT, on_sigint) if main_thread else None
    try:
        code = _tail(args, lambda: bool(interrupted))
    finally:
        if main_thread:
            signal.signal(signal.SIGINT, previous)
    return 130 if interrupted else code


def _tail(args: argparse.Namespace, stop) -> int:
    out = sys.stdout
    with contextlib.ExitStack() as stack:
        try:
            for root in [args.store] if isinstance(args.store, str) else args.store:
                refuse_object_uri(root, NO_TAIL)
            with reported_warnings("rmqfilter tail"):     # the replica read, said before the first message
                store = stack.enter_context(topic_store(args.store, args.topic, replica=args.replica,
                                                             tier=getattr(args, "tier", None)))
            # several stores: offsets per broker (docs/live.md#offsets-per-broker)
            brokers = store.brokers if isinstance(store, cq.Cluster) else None
            starting = stream.parse_starting_offsets(args.starting, brokers)

            def lost(topic: str, queue_id: int, units: int, detail: str, broker: str | None = None) -> None:
                print(f"rmqfilter tail: warning: {stream.lost_text(topic, queue_id, units, detail, broker)}",
                      file=sys.stderr, flush=True)  # said at once, and it goes on

            for n, m in enumerate(stream.tail(store, args.topic, args.group, sql=args.sql, tags=args.tags,
                                              starting=starting, interval=args.interval, on_lost=lost,
                                              stop=stop), 1):
                if args.format == "text":  # a cluster's messages lead with their broker
                    lead = "" if m.broker is None else f"{m.broker}\t"
                    out.write(f"{lead}{m.queue_id}\t{m.queue_offset}\t{m.msg_id}\t{m.tags or ''}\t{m.keys or ''}\n")
                else:
                    out.write(json.dumps(message_json(m, args.body), ensure_ascii=False) + "\n")
                out.flush()
                if args.limit is not None and n >= args.limit:
                    break
        except KeyboardInterrupt:  # Ctrl-C is how a tail ends: no traceback
            return 130
        except BrokenPipeError:  # `| head`: stop quietly, as Unix tools do
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
            return 0
        except (cq.StoreFormatError, cq.TagSubscriptionError, cq.UnknownGroupError, SelectorSyntaxError,
                ValueError, LookupError, ImportError) as exc:  # ImportError: an LZ4/ZSTD body's codec is missing
            return fail("rmqfilter tail", error_text(exc))
        return 0
