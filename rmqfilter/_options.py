"""The options several ``rmqfilter`` commands share, each declared once (docs/cli.md#options).

A command calls ``add_<option>(parser)`` rather than ``parser.add_argument`` for any option another
command has too, so every command spells it, defaults it, validates it and explains it the same
way. Values are checked while the command line is parsed (the ``type`` functions below): a bad
value is argparse's usage error, naming the option, with exit status 2. Options that belong to one
command stay in that command's module.

The options ``rmqfilter scan`` has too (``STORE``, ``--topic``, ``--group``/``--all-groups``,
``--sql``/``--tags``, ``--filter``/``--on-filter-error``, ``--master``, ``--json FILE``) and scan's own
arguments are declared once in :mod:`rmqfilter_options`, because spark-submit ``job.py`` parses
them too (the job imports nothing from this package); this module offers them to the commands under
the same names. The others are declared here.

This module never imports pyspark (argparse and :mod:`rmqfilter_options`): the commands that never
start Spark use it.
"""
from __future__ import annotations

import argparse
from collections.abc import Callable

from rmqfilter_options import (  # the options scan shares, declared once there
    BODY,
    add_consumer_args,
    add_filter_args,
    add_group_args,
    add_json_file_arg,
    add_master_arg,
    add_scan_args,
    add_store_arg,
    add_subscription_args,
    add_topic_arg,
    subscription_conflict,
)

__all__ = ["MESSAGE_FORMATS", "PROGRESS_CHOICES", "add_consumer_args", "add_filter_args", "add_group_args",
           "add_json_file_arg", "add_json_flag", "add_master_arg", "add_message_output_args", "add_progress_arg",
           "add_sample_args", "add_scan_args", "add_store_arg", "add_subscription_args", "add_topic_arg",
           "int_at_least", "subscription_conflict"]

#: ``--progress``: when to draw a progress bar on stderr
PROGRESS_CHOICES = ("auto", "always", "never")
#: ``--format`` of the commands that print messages (``none``: the counts only)
MESSAGE_FORMATS = ("text", "jsonl", "none")

_FORMAT_HELP = {
    "text": "text: one tab-separated line per message (default)",
    "jsonl": "jsonl: one JSON object per line",
    "none": "none: the counts only",
}


# ---------------------------------------------------------------- value checks
def int_at_least(minimum: int) -> Callable[[str], int]:
    """An argparse ``type``: a whole number ``>= minimum``, else a usage error quoting the text."""
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
        if value < minimum:
            raise argparse.ArgumentTypeError(f"expected a whole number >= {minimum}, got {text!r}")
        return value

    return parse


# ---------------------------------------------------------------- what to print
def add_message_output_args(parser: argparse.ArgumentParser, *, formats: tuple[str, ...] = MESSAGE_FORMATS) -> None:
    """``--format``, ``--body`` and ``--limit`` of the commands that print messages."""
    parser.add_argument("--format", choices=formats, default="text",
                        help="; ".join(_FORMAT_HELP[f] for f in formats))
    parser.add_argument("--body", choices=BODY, default=BODY[0],
                        help="jsonl: body_length of the body decompressed where SYSFLAG says so (uncompressed, "
                             "the default, as the rocketmq data source's body) or as stored")
    parser.add_argument("--limit", type=int_at_least(1), default=None, metavar="N",
                        help="stop after N messages")


def add_json_flag(parser: argparse.ArgumentParser, shape: str = "") -> None:
    """``--json``: print JSON on stdout instead of text; ``shape`` says what the document is."""
    parser.add_argument("--json", action="store_true",
                        help="print JSON instead of text" + (f": {shape}" if shape else ""))


def add_progress_arg(parser: argparse.ArgumentParser) -> None:
    """``--progress``: a progress bar on stderr."""
    parser.add_argument("--progress", choices=PROGRESS_CHOICES, default="auto",
                        help="progress bar on stderr: auto (default) = when stderr is a terminal and the "
                             "work is long; always; never")


# ---------------------------------------------------------------- samples
def add_sample_args(parser: argparse.ArgumentParser, *, messages: int, minimum: int) -> None:
    """``--messages`` (default ``messages``, at least ``minimum``) and ``--seed`` of a sample store."""
    parser.add_argument("--messages", type=int_at_least(minimum), default=messages, metavar="N",
                        help=f"number of messages (default {messages:,})")
    parser.add_argument("--seed", type=int, default=0,
                        help="sample generator seed: the same --messages and --seed give the same store "
                             "(default 0)")
