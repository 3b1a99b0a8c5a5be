"""The ``rmqfilter`` command.

Each group of sub-commands lives in its own module with an ``add_parsers``
function; Spark is imported only by the commands that run Spark jobs.
"""
from __future__ import annotations

import argparse
import importlib
import sys

# Modules that contribute sub-commands, in the order they are listed in --help.
COMMAND_MODULES = (
    "pyspark_udfs._cli_selector",  # check, eval
    "pyspark_udfs._cli_store",  # inspect, gen-store, consume
    "pyspark_udfs._cli_spark",  # scan, demo
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
