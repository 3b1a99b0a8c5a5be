"""The ``rmqfilter`` command (``python -m rmqfilter`` too).

Each group of sub-commands lives in its own module of this package with an ``add_parsers``
function, listed in :data:`COMMAND_MODULES` (with the commands each adds). Only ``scan``,
``demo``, ``cost --spark`` and ``find --spark`` run Spark; the other commands read or write stores and
selectors with ``cq``, ``selector`` and ``bloom`` and never import pyspark, so a user without Java can
still run them.
``spark_commands`` and ``cost_commands`` import :mod:`pyspark_udfs.job`, which imports pyspark
only inside the functions that run a job (marked ``# lazy``). This package imports
``pyspark_udfs``; nothing in ``pyspark_udfs`` imports it (docs/contributing.md#layers).

To add a command: write ``add_parsers(subparsers)`` in a new module here (or in the module of its
group), set ``func`` on the sub-parser, and list the module in :data:`COMMAND_MODULES`
(docs/contributing.md#add-a-cli-command).
"""
from __future__ import annotations

import argparse
import importlib
import sys

from cq.readers.objects import is_object_uri, name_uris

__all__ = ["COMMAND_MODULES", "build_parser", "main"]

# Modules that contribute sub-commands, in the order they are listed in --help.
COMMAND_MODULES = (
    "rmqfilter.selector_commands",  # check, eval, explain
    "rmqfilter.store_commands",  # inspect, gen-store, consume
    "rmqfilter.cost_commands",  # cost (its --spark branch imports pyspark inside the command)
    "rmqfilter.why_commands",  # why, backlog, pending
    "rmqfilter.find_commands",  # find (its --spark branch imports pyspark inside the command)
    "rmqfilter.trace_commands",  # trace
    "rmqfilter.live_commands",  # tail
    "rmqfilter.spark_commands",  # scan, demo
)


def build_parser() -> argparse.ArgumentParser:
    """The ``rmqfilter`` parser, with the sub-commands of every module of :data:`COMMAND_MODULES`."""
    parser = argparse.ArgumentParser(
        prog="rmqfilter",
        description="RocketMQ broker-side message filtering, reproduced exactly.",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    for name in COMMAND_MODULES:
        try:
            module = importlib.import_module(name)
        except ModuleNotFoundError as exc:
            if exc.name != name:
                raise
            continue
        module.add_parsers(sub)
    return parser


class _NamingStream:
    """``sys.stdout`` / ``sys.stderr`` while a command reads a store in object storage: each file read
    from the bucket is named by its object's URI, not by the private copy's path
    (docs/object-storage.md#naming-a-store)."""

    def __init__(self, stream) -> None:
        self._stream = stream

    def write(self, text: str) -> int:
        return self._stream.write(name_uris(text))

    def __getattr__(self, name: str):
        return getattr(self._stream, name)


def main(argv: list[str] | None = None) -> int:
    """Run the command line; returns the process exit code."""
    args = build_parser().parse_args(argv)
    stores = getattr(args, "store", None)
    stores = [stores] if isinstance(stores, str) else list(stores or [])
    if not any(is_object_uri(s) for s in stores):
        return int(args.func(args) or 0)
    out, err = sys.stdout, sys.stderr
    sys.stdout, sys.stderr = _NamingStream(out), _NamingStream(err)
    try:
        return int(args.func(args) or 0)
    finally:
        sys.stdout, sys.stderr = out, err
