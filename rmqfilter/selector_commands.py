"""``rmqfilter check``, ``eval`` and ``explain``: a selector as the broker sees it (no Spark)."""
from __future__ import annotations

import argparse
import json
import sys

import selector

from ._common import fail
from ._options import add_json_flag


def add_parsers(subparsers) -> None:
    """Register the ``check``, ``eval`` and ``explain`` sub-commands."""
    check = subparsers.add_parser(
        "check", help="parse a SQL92 selector: canonical form, properties read, lint warnings",
        description="Parse SQL as the broker does. Prints the fully parenthesised form, the "
                    "properties it reads and warnings for the broker's traps; on a syntax error "
                    "prints the error with a caret under its position and exits with status 2.")
    _add_selector_args(check, properties=False)
    check.set_defaults(func=run_check)

    ev = subparsers.add_parser(
        "eval", help="evaluate a SQL92 selector against message properties",
        description="Evaluate SQL for one message whose properties are given as KEY=VALUE; prints "
                    "the broker's raw result (TRUE, FALSE, NULL or ERROR) and its match decision.")
    _add_selector_args(ev)
    ev.set_defaults(func=run_eval)

    ex = subparsers.add_parser(
        "explain", help="show how the broker evaluates a SQL92 selector for one message",
        description="Evaluate SQL for one message whose properties are given as KEY=VALUE and print "
                    "the evaluation tree: each node's value, the properties it read, how a literal "
                    "typed a comparison, what the short circuit skipped, and (marked *) the path to "
                    "the node that decided the result. A syntax error exits with status 2.")
    _add_selector_args(ex)
    add_json_flag(ex, "the evaluation tree")
    ex.set_defaults(func=run_explain)


def _add_selector_args(parser: argparse.ArgumentParser, *, properties: bool = True) -> None:
    """The positional ``SQL`` and, with ``properties``, the message's ``KEY=VALUE`` properties."""
    parser.add_argument("sql", metavar="SQL", help="selector text")
    if properties:
        parser.add_argument("props", metavar="KEY=VALUE", nargs="*", type=_property,
                            help="a message property (repeat for more)")


def _property(text: str) -> tuple[str, str]:
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE, got {text!r}")
    return key, value


def _report_syntax_error(command: str, exc: selector.SelectorSyntaxError) -> int:
    """The error line, then the selector's line with a caret under the position (stderr); status 2."""
    lines = exc.sql.splitlines() or [""]
    line = lines[exc.line - 1] if exc.line - 1 < len(lines) else ""
    status = fail(f"rmqfilter {command}", exc)
    print(f"  {line}", file=sys.stderr)
    print("  " + " " * (exc.column - 1) + "^", file=sys.stderr)
    return status


def run_check(args) -> int:
    """Print canonical form, properties and lint warnings, or the syntax error (status 2)."""
    try:
        s = selector.compile(args.sql)
    except selector.SelectorSyntaxError as exc:
        return _report_syntax_error("check", exc)
    print(f"canonical:  {selector.canonical(args.sql)}")
    print(f"properties: {', '.join(sorted(s.properties)) or '(none)'}")
    warnings = selector.lint(args.sql)
    if warnings:
        print("warnings:")
        for w in warnings:
            print(f"  {w}")
    else:
        print("warnings:   (none)")
    return 0


def run_eval(args) -> int:
    """Print the broker's result for one message."""
    try:
        s = selector.compile(args.sql)
    except selector.SelectorSyntaxError as exc:
        return _report_syntax_error("eval", exc)
    props = dict(args.props)
    try:
        value = s.evaluate(props)
    except selector.SelectorEvaluationError as exc:
        print(f"result:  ERROR ({exc.cause}: {exc})")
    else:
        print(f"result:  {'NULL' if value is None else str(value).upper()}")
    print(f"matched: {'true' if s.matches(props) else 'false'}")
    return 0


def run_explain(args) -> int:
    """Print the evaluation tree for one message (text, or JSON with ``--json``)."""
    try:
        e = selector.explain(args.sql, dict(args.props))
    except selector.SelectorSyntaxError as exc:
        return _report_syntax_error("explain", exc)
    if args.json:
        print(json.dumps(e.to_dict(), indent=2, ensure_ascii=False, allow_nan=False))
    else:
        print(e)
    return 0
