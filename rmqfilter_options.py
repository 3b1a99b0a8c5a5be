"""The options rmqfilter's entry points share: their values, their command-line declarations, and
how a bad one is reported, each defined once.

Three entry points read options: the ``rocketmq`` data source (``pyspark_udfs/_source.py``: Spark's
string options), the scan job (``spark-submit pyspark_udfs/job.py``) and the ``rmqfilter`` command
(``rmqfilter/``). The values they share (``on_corrupt``, ``body``, ``--layer2``, ``--format``) are
the tuples below; the arguments the job and ``rmqfilter scan`` both parse (:func:`add_scan_args`)
and the options ``scan`` shares with the other commands (``STORE``, ``--topic``, ``--group``,
``--sql``/``--tags``, ``--filter``, ``--master``, ``--json FILE``) are declared here once; bad input
is one line on stderr, ``<prog>: error: <what, naming the input>``, and exit status
:data:`BAD_INPUT` (:func:`fail`, docs/cli.md).

A top-level module, as ``rmqfilter_engine`` is, because it belongs to no one package: the job and the
data source live in ``pyspark_udfs``, the command in ``rmqfilter``, which imports ``pyspark_udfs``,
never the reverse. It sits above ``cq`` and ``selector`` (it imports their errors and the custom
filter's ``on_error`` values) and below both entry points; ``bloom``, ``selector`` and ``cq`` never
import it. It never imports pyspark: the commands that never start Spark use it
(docs/contributing.md#layers).
"""
from __future__ import annotations

import argparse
import sys

from cq.filter.custom import ON_FILTER_ERROR
from cq.readers.objects import name_uris
from selector.errors import SelectorSyntaxError

__all__ = ["BAD_INPUT", "BODY", "LAYER2_AUTO", "LAYER2_CHOICES", "LAYER2_DEFAULT", "ON_CORRUPT", "OUT_FORMATS",
           "TOPIC_OPTIONAL_HELP", "add_consumer_args", "add_filter_args", "add_group_args", "add_json_file_arg", "add_master_arg",
           "add_scan_args", "add_store_arg", "add_subscription_args", "add_topic_arg", "error_text", "fail",
           "subscription_conflict"]


# ---------------------------------------------------------------- option values
#: Option ``on_corrupt`` / ``--on-corrupt``: a corrupt store file fails the read, or is skipped and reported.
ON_CORRUPT = ("fail", "skip")
#: Option ``body`` / ``--body``: decompressed where SYSFLAG says so (``Message.uncompressed_body()``), or as stored.
BODY = ("uncompressed", "stored")
#: ``--layer2`` of ``rmqfilter scan`` (``scan(layer2=...)``): where a SQL92 selector runs.
LAYER2_CHOICES = ("auto", "native", "python")
LAYER2_DEFAULT = "auto"
#: what ``layer2="auto"`` picks: the native expression where the translation is exact (as fast
#: as the reader on the 1 M-message demo store, bench/README.md; no Python evaluates the
#: selector), the reader otherwise, with the reason in the summary.
LAYER2_AUTO = "native"
#: ``--format`` of ``rmqfilter scan --out`` (``scan(out_format=...)``): the files written.
OUT_FORMATS = ("parquet", "json")

#: the exit status of bad input (a usage error, a store or selector that does not read)
BAD_INPUT = 2

_SQL_HELP = ("SQL92 selector, e.g. \"a > 5 AND b = 'abc'\" (default: the group's registration in "
             "config/consumerFilter.json, with its bornTime)")
_TAGS_HELP = 'tag subscription, e.g. "TagA || TagB" or "*"'


# ---------------------------------------------------------------- bad input
def fail(prog: str, message: object) -> int:
    """Print ``prog: error: message`` to stderr; returns :data:`BAD_INPUT` for the command to return."""
    print(f"{prog}: error: {name_uris(str(message))}", file=sys.stderr)  # a bucket's store by its URI
    return BAD_INPUT


def error_text(exc: BaseException) -> str:
    """An exception's message as a user reads it: a selector's syntax error names the selector, a
    KeyError's message comes without the quotes ``str`` adds."""
    if isinstance(exc, SelectorSyntaxError):
        return f"{exc} in selector {exc.sql!r}"
    return str(exc.args[0]) if isinstance(exc, KeyError) and exc.args else str(exc)


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
    parser.add_argument("--tier", metavar="DIR",
                        help="the tier directory (tieredStoreFilePath) of a broker that ran RocketMQ's tiered "
                             "store: pulls below a queue's local minimum are read from there, as the broker "
                             "serves them (docs/reading.md#tiered-storage); only read")
    if several:  # several stores of one broker name are its replicas (docs/reading.md#replicas)
        parser.add_argument("--replica", action="append", metavar="ROOT",
                            help="with several STOREs of one broker name (a master and its slaves): the one "
                                 "to read (its root or directory name; once per broker); default: the "
                                 "highest epoch, else the CommitLog that reaches furthest")


#: What ``--topic`` says where a command may go without it (``find``: every topic of the store).
TOPIC_OPTIONAL_HELP = "; without it, every topic of STORE"


def add_topic_arg(parser: argparse.ArgumentParser, *, required: bool = True) -> None:
    """``--topic``: a topic with consume queues in ``STORE``; required unless ``required=False``
    (the help then says what the command reads without it)."""
    parser.add_argument("--topic", required=required, help="topic to read (it must have consume queues in STORE)"
                        + ("" if required else TOPIC_OPTIONAL_HELP))


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


# ---------------------------------------------------------------- where to run, what to write
def add_master_arg(parser: argparse.ArgumentParser | argparse._MutuallyExclusiveGroup, *,
                   default: str | None = None, condition: str = "") -> None:
    """``--master``: the Spark master URL; ``condition`` (e.g. ``"with --spark: "``) starts the help."""
    fallback = f"default {default}" if default else "default: spark-submit's, or local[*]"
    parser.add_argument("--master", default=default, metavar="URL",
                        help=f"{condition}Spark master URL, e.g. spark://host:7077 or local[2] ({fallback})")


def add_json_file_arg(parser: argparse.ArgumentParser, what: str) -> None:
    """``--json FILE``: also write ``what`` as JSON to a file (in ``args.json_path``)."""
    parser.add_argument("--json", dest="json_path", metavar="FILE", help=f"also write {what} as JSON to FILE")


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
