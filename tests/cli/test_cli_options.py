"""The options several ``rmqfilter`` commands share mean the same in each (docs/cli.md#options).

Through ``rmqfilter.main`` and the parser it builds; nothing here starts Spark.
"""
from __future__ import annotations

import argparse
import json

import pytest
from helpers import DATA

import rmqfilter
from rmqfilter_options import TOPIC_OPTIONAL_HELP

GOLDEN = str(DATA / "golden_store")
TOPIC = "GoldenFilterTopic"

#: options that must read alike wherever they appear: dest, default, choices, metavar, help, check
SHARED = ("store", "--topic", "--all-groups", "--sql", "--tags", "--body", "--limit", "--progress",
          "--on-filter-error")


def _commands() -> dict[str, argparse.ArgumentParser]:
    parser = rmqfilter.build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return dict(sub.choices)


def _declaration(action: argparse.Action) -> tuple:
    check = getattr(action.type, "__qualname__", action.type)
    help_text, required = action.help, action.required
    if action.dest == "topic" and not required:  # find's --topic: the shared one, optional, saying so
        assert help_text.endswith(TOPIC_OPTIONAL_HELP), help_text
        help_text, required = help_text.removesuffix(TOPIC_OPTIONAL_HELP), True
    return (action.dest, action.default, action.choices, action.metavar, help_text, check, required)


def test_every_command_has_help(capsys):
    for argv in ([], *([name] for name in _commands())):
        with pytest.raises(SystemExit) as info:
            rmqfilter.main([*argv, "--help"])
        assert info.value.code == 0
        assert capsys.readouterr().out.startswith("usage: rmqfilter")


def test_a_shared_option_reads_the_same_in_every_command():
    seen: dict[str, dict[str, tuple]] = {}
    for name, parser in _commands().items():
        for action in parser._actions:
            key = action.option_strings[0] if action.option_strings else action.dest
            if key in SHARED:
                seen.setdefault(key, {})[name] = _declaration(action)
    assert set(seen) == set(SHARED)
    for key, by_command in seen.items():
        assert len(by_command) >= 2, key
        assert len(set(by_command.values())) == 1, (key, by_command)
    assert set(seen["store"]) == {"inspect", "consume", "cost", "why", "backlog", "pending", "tail", "scan", "find",
                                  "trace"}
    # the commands that read a cluster take several stores (docs/reading.md#clusters), the others one
    several = {name for name, parser in _commands().items() for action in parser._actions
               if action.dest == "store" and action.nargs == "+"}
    assert several == {"inspect", "consume", "why", "backlog", "scan", "cost", "tail", "find", "trace"}


@pytest.mark.parametrize("argv", [
    ["consume", GOLDEN, "--topic", TOPIC, "--group", "G", "--tags", "*", "--limit", "0"],
    ["tail", GOLDEN, "--topic", TOPIC, "--group", "G", "--tags", "*", "--from", "earliest", "--limit", "-3"],
    ["gen-store", "never-written", "--messages", "-1"],
    ["demo", "--messages", "0"],
    ["consume", GOLDEN, "--topic", TOPIC, "--group", "G", "--limit", "many"],
])
def test_a_value_an_option_does_not_take_is_a_usage_error_naming_it(argv, capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # gen-store must not write anything
    with pytest.raises(SystemExit) as info:
        rmqfilter.main(argv)
    option, value = argv[-2:]
    err = capsys.readouterr().err
    assert info.value.code == 2 and f"rmqfilter {argv[0]}: error: argument {option}: " in err
    assert f"got {value!r}" in err
    assert list(tmp_path.iterdir()) == []


def test_limit_stops_after_n_messages(capsys):
    for n in (1, 4):
        assert rmqfilter.main(["consume", GOLDEN, "--topic", TOPIC, "--group", "G", "--tags", "*", "--limit", str(n),
                         "--format", "jsonl"]) == 0
        assert len(capsys.readouterr().out.splitlines()) == n


@pytest.mark.parametrize("command", ["consume", "backlog", "scan"])
def test_all_groups_with_a_subscription_is_the_same_error_everywhere(command, capsys):
    assert rmqfilter.main([command, GOLDEN, "--topic", TOPIC, "--all-groups", "--tags", "TagA"]) == 2
    assert capsys.readouterr().err == (f"rmqfilter {command}: error: --all-groups takes each group's registered "
                                       "subscription; drop --sql/--tags\n")


@pytest.mark.parametrize("command", ["consume", "backlog", "why"])
def test_a_selector_syntax_error_names_the_selector(command, capsys):
    extra = ["--queue", "0", "--offset", "0"] if command == "why" else []
    assert rmqfilter.main([command, GOLDEN, "--topic", TOPIC, "--group", "G", "--sql", "a >", *extra]) == 2
    err = capsys.readouterr().err
    assert f"rmqfilter {command}: error: 1:4: syntax error at end of input in selector 'a >'" in err


@pytest.mark.parametrize("argv", [
    ["consume", "--group", "G", "--tags", "*"],
    ["why", "--group", "G", "--tags", "*", "--queue", "0", "--offset", "0"],
    ["backlog", "--group", "G", "--tags", "*"],
    ["cost", "--group", "G"],
])
def test_an_unknown_topic_is_the_same_error_everywhere(argv, capsys):
    assert rmqfilter.main([argv[0], GOLDEN, "--topic", "NoSuchTopic", *argv[1:]]) == 2
    assert f"rmqfilter {argv[0]}: error: topic 'NoSuchTopic' has no consume queues in " in capsys.readouterr().err


def test_scan_errors_read_like_the_other_commands(tmp_path, capsys):
    missing = str(tmp_path / "nope")
    assert rmqfilter.main(["scan", missing, "--topic", TOPIC, "--group", "G", "--tags", "A"]) == 2
    assert capsys.readouterr().err == f"rmqfilter scan: error: store {missing!r} is not a directory\n"


def test_demo_refuses_a_store_holding_another_sample_with_status_2(tmp_path, capsys):
    (tmp_path / "rmqfilter-demo.json").write_text(json.dumps({"messages": 5, "seed": 0}))
    assert rmqfilter.main(["demo", "--store", str(tmp_path), "--messages", "10"]) == 2  # before Spark starts
    err = capsys.readouterr().err
    assert err.startswith(f"rmqfilter demo: error: {tmp_path} holds another sample (5 messages, seed 0)")
