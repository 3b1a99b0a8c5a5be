"""The options several ``rmqfilter`` commands share, each declared once (docs/cli.md#options).

A command calls ``add_<option>(parser)`` rather than ``parser.add_argument`` for any option another
command has too, so every command spells it, defaults it, validates it and explains it the same
way. Values are checked while the command line is parsed (the ``type`` functions below): a bad
value is argparse's usage error, naming the option, with exit status 2. Options that belong to one
command stay in that command's module.

This module never imports pyspark (argparse, and the option values of
:mod:`pyspark_udfs._choices`): ``spark-submit pyspark_udfs/job.py`` and the commands that never
start Spark both use it. ``rmqfilter scan``'s own arguments live here too
(:func:`add_scan_args`), because ``job.py`` parses the same ones.
"""
from __future__ import annotations

import argparse
from collections.abc import Callable

from cq.filter.custom import ON_FILTER_ERROR
from pyspark_udfs._choices import BODY, LAYER2_CHOICES, LAYER2_DEFAULT, ON_CORRUPT, OUT_FORMATS

#: ``--progress``: when to draw a progress bar on stderr
PROGRESS_CHOICES = ("auto", "always", "never")
#: ``--format`` of the commands that print messages (``none``: the counts only)
MESSAGE_FORMATS = ("text", "jsonl", "none")

_SQL_HELP = ("SQL92 selector, e.g. \"a > 5 AND b = 'abc'\" (default: the group's registration in "
             "config/consumerFilter.json, with its bornTime)")
_TAGS_HELP = 'tag subscription, e.g. "TagA || TagB" or "*"'
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


# ---------------------------------------------------------------- what to read
def add_store_arg(parser: argparse.ArgumentParser, *, several: bool = False) -> None:
    """The positional ``STORE``: a broker store to read (only read, never written).

    ``several``: one or more (``args.store`` a list; usage ``STORE [STORE ...]``), the stores of a
    cluster's brokers read as one (``cq.Cluster``, docs/reading.md#clusters). The help reads the
    same either way.
    """
    parser.add_argument("store", metavar="STORE", nargs="+" if several else None,
                        help="broker store root directory (holds commitlog/, consumequeue/ and, for SQL92 "
                             "groups, consumequeue_ext/); only read")


def add_topic_arg(parser: argparse.ArgumentParser) -> None:
    """``--topic``, required: a topic with consume queues in ``STORE``."""
    parser.add_argument("--topic", required=True, help="topic to read (it must have consume queues in STORE)")


def add_group_args(parser: argparse.ArgumentParser, *, all_groups: bool = False, repeatable: bool = False,
                   required: bool = True) -> None:
    """``--group`` and, with ``all_groups``, ``--all-groups`` (one or the other).

    ``repeatable`` makes ``--group`` take several groups, in ``args.groups``; else it is one group,
    in ``args.group``. ``required``: one of the two must be given.
    """
    where = parser.add_mutually_exclusive_group(required=required) if all_groups else parser
    alone = required and not all_groups  # in a group, the group is what is required
    if repeatable:
        where.add_argument("--group", action="append", dest="groups", metavar="GROUP", required=alone,
                           help="a consumer group registered in config/consumerFilter.json (repeatable)")
    else:
        where.add_argument("--group", required=alone, help="consumer group (its Bloom key is <group>#<topic>)")
    if all_groups:
        where.add_argument("--all-groups", action="store_true",
                           help="every SQL92 group registered for the topic in the store's "
                                "config/consumerFilter.json (the output names each group)")


def add_subscription_args(parser: argparse.ArgumentParser) -> None:
    """``--sql`` or ``--tags`` (at most one): the group's subscription, else its registration."""
    how = parser.add_mutually_exclusive_group()
    how.add_argument("--sql", help=_SQL_HELP)
    how.add_argument("--tags", help=_TAGS_HELP)


def add_consumer_args(parser: argparse.ArgumentParser, *, all_groups: bool = False, several: bool = False) -> None:
    """A consumer to replay: ``STORE --topic T --group G [--sql S | --tags E]`` (and ``--all-groups``);
    ``several``: ``STORE...``, a cluster's brokers (:func:`add_store_arg`)."""
    add_store_arg(parser, several=several)
    add_topic_arg(parser)
    add_group_args(parser, all_groups=all_groups)
    add_subscription_args(parser)


def subscription_conflict(args: argparse.Namespace) -> str | None:
    """The error text when ``--all-groups`` comes with ``--sql``/``--tags``, else None."""
    if args.all_groups and (args.sql is not None or args.tags is not None):
        return "--all-groups takes each group's registered subscription; drop --sql/--tags"
    return None


def add_filter_args(parser: argparse.ArgumentParser, *, where: str) -> None:
    """``--filter`` and ``--on-filter-error``: a custom filter after both broker layers.

    ``where`` ends the ``--filter`` help with what this command adds (where the module is looked
    for, what runs before it): docs/custom-filters.md says the rest.
    """
    parser.add_argument("--filter", dest="message_filter", metavar="MODULE:FUNCTION",
                        help="custom filter run after both broker layers (docs/custom-filters.md): "
                             "package.module:function taking a cq.Message (or, marked with cq.batch_filter, "
                             f"an Arrow record batch) and returning bool; {where}")
    parser.add_argument("--on-filter-error", choices=ON_FILTER_ERROR, default="fail",
                        help="an exception in the custom filter stops with an error naming the message "
                             "(fail, default) or drops the message and counts it (skip)")


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


def add_json_file_arg(parser: argparse.ArgumentParser, what: str) -> None:
    """``--json FILE``: also write ``what`` as JSON to a file (in ``args.json_path``)."""
    parser.add_argument("--json", dest="json_path", metavar="FILE", help=f"also write {what} as JSON to FILE")


def add_progress_arg(parser: argparse.ArgumentParser) -> None:
    """``--progress``: a progress bar on stderr."""
    parser.add_argument("--progress", choices=PROGRESS_CHOICES, default="auto",
                        help="progress bar on stderr: auto (default) = when stderr is a terminal and the "
                             "work is long; always; never")


# ---------------------------------------------------------------- Spark and samples
def add_master_arg(parser: argparse.ArgumentParser | argparse._MutuallyExclusiveGroup, *,
                   default: str | None = None, condition: str = "") -> None:
    """``--master``: the Spark master URL; ``condition`` (e.g. ``"with --spark: "``) starts the help."""
    fallback = f"default {default}" if default else "default: spark-submit's, or local[*]"
    parser.add_argument("--master", default=default, metavar="URL",
                        help=f"{condition}Spark master URL, e.g. spark://host:7077 or local[2] ({fallback})")


def add_sample_args(parser: argparse.ArgumentParser, *, messages: int, minimum: int) -> None:
    """``--messages`` (default ``messages``, at least ``minimum``) and ``--seed`` of a sample store."""
    parser.add_argument("--messages", type=int_at_least(minimum), default=messages, metavar="N",
                        help=f"number of messages (default {messages:,})")
    parser.add_argument("--seed", type=int, default=0,
                        help="sample generator seed: the same --messages and --seed give the same store "
                             "(default 0)")


# ---------------------------------------------------------------- rmqfilter scan
def add_scan_args(parser: argparse.ArgumentParser) -> None:
    """The arguments of ``rmqfilter scan``, which spark-submit ``pyspark_udfs/job.py`` parses too
    (one definition for both entry points)."""
    add_consumer_args(parser, all_groups=True, several=True)
    parser.add_argument("--out", metavar="DIR", help="write the messages the group would receive to DIR (over "
                                                     "several stores, with a broker column)")
    parser.add_argument("--format", dest="out_format", choices=OUT_FORMATS, default=OUT_FORMATS[0],
                        help="with --out: the format of the files (default parquet)")
    where = parser.add_mutually_exclusive_group()
    add_master_arg(where)
    where.add_argument("--remote", metavar="URL",
                       help="run on Spark Connect: sc://host:port for a running server, or local[2] for one "
                            "started in this process (needs the connect extra; docs/spark-connect.md#scan-remote)")
    add_json_file_arg(parser, "the summary")
    parser.add_argument("--layer2", choices=LAYER2_CHOICES, default=LAYER2_DEFAULT,
                        help="where a SQL92 selector runs: native Spark expression, python (in the reader), "
                             "or auto (the faster measured; default)")
    parser.add_argument("--on-corrupt", choices=ON_CORRUPT, default=ON_CORRUPT[0],
                        help="a corrupt store file fails the scan (default), or is skipped and reported")
    parser.add_argument("--skipped-log", metavar="DIR",
                        help="with --on-corrupt skip: directory (shared with the executors) for the skipped "
                             "ranges (default: a temporary directory)")
    add_filter_args(parser, where="it runs in the reader, so its module must be importable on the executors")
