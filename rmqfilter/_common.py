"""What the ``rmqfilter`` commands do alike when they run: errors and exit status, warnings, a closed pipe.

Bad input is one line on stderr, ``rmqfilter <command>: error: <what, naming the input>``, and exit
status 2 (docs/cli.md): :func:`fail` and :func:`error_text`, defined once in
:mod:`rmqfilter_options` (the scan job reports its bad input the same way) and offered here to
every command. Never imports pyspark.
"""
from __future__ import annotations

import contextlib
import os
import sys
import warnings
from collections.abc import Iterator

from rmqfilter_options import BAD_INPUT, error_text, fail

__all__ = ["BAD_INPUT", "bad_input_errors", "emit", "error_text", "fail", "reported_warnings", "stdout_closed"]


def bad_input_errors() -> tuple[type[BaseException], ...]:
    """The exceptions a store command's bad input raises (each names what was wrong): exit status
    :data:`BAD_INPUT`, one line on stderr (docs/cli.md)."""
    import cq  # lazy: the commands that read no store never import the store package
    import selector

    return (cq.StoreFormatError, cq.UnknownGroupError, cq.TagSubscriptionError, selector.SelectorSyntaxError,
            LookupError, ValueError)


def stdout_closed() -> int:
    """After a BrokenPipeError on stdout (``| head``): end quietly, as Unix tools do; returns 0."""
    os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    return 0


def emit(text: str) -> int:
    """Print ``text``; a closed pipe (``| head``) ends quietly, as Unix tools do. Returns 0."""
    try:
        print(text)
        sys.stdout.flush()
    except BrokenPipeError:
        return stdout_closed()
    return 0


@contextlib.contextmanager
def reported_warnings(prog: str) -> Iterator[None]:
    """Print warnings (a config file read from its .bak, bloom data that does not match) to stderr, once each."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        # A ResourceWarning is the interpreter collecting some other object's file (a caller's pipe,
        # in a process that runs the command in-line), not something the command has to say.
        warnings.simplefilter("ignore", ResourceWarning)
        try:
            yield
        finally:
            seen = set()
            for w in caught:
                text = str(w.message)
                if text not in seen:
                    seen.add(text)
                    print(f"{prog}: warning: {text}", file=sys.stderr)
