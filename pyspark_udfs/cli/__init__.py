"""The ``rmqfilter`` command.

Each group of sub-commands lives in its own module of this package with an
``add_parsers`` function, listed in :data:`COMMAND_MODULES`. The CLI lives under
``pyspark_udfs`` because its Spark commands are the main job; the other
commands only read or write stores and selectors, so their modules import
``cq``, ``selector`` and ``bloom`` only, and never pyspark: a user without Java
can still run them. ``spark_commands`` imports :mod:`pyspark_udfs.job`, which
imports pyspark only inside the functions that run a job (marked ``# lazy``).

To add a command: write ``add_parsers(subparsers)`` in a new module here (or in
the module of its group), set ``func`` on the sub-parser, and list the module in
:data:`COMMAND_MODULES`.
"""
from __future__ import annotations

import argparse
import importlib
import sys

# Modules that contribute sub-commands, in the order they are listed in --help.
COMMAND_MODULES = (
    "pyspark_udfs.cli.selector_commands",  # check, eval, explain
    "pyspark_udfs.cli.store_commands",  # inspect, gen-store, consume
    "pyspark_udfs.cli.cost_commands",  # cost (its --spark branch imports pyspark inside the command)
    "pyspark_udfs.cli.why_commands",  # why, backlog
    "pyspark_udfs.cli.live_commands",  # tail
    "pyspark_udfs.cli.spark_commands",  # scan, demo
)


def build_parser() -> argparse.ArgumentParser:
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


def main(argv: list[str] | None = None) -> int:
    """Run the command line; returns the process exit code."""
    args = build_parser().parse_args(argv)
    return int(args.func(args) or 0)


if __name__ == "__main__":
    sys.exit(main())
