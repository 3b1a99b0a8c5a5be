"""docs/why.md runs: its Python examples as doctests, its console examples as commands whose
output must be what the page shows (against the golden store and the page's sample store)."""
from __future__ import annotations

import doctest
import re
import shlex
from pathlib import Path

import pytest
from conftest import DATA

from pyspark_udfs.cli import main

DOC = Path(__file__).resolve().parent.parent / "docs" / "why.md"


@pytest.fixture(scope="module")
def doc_dir(tmp_path_factory):
    """A directory laid out as the page assumes: tests/data/golden_store, and sample-store written
    by the page's own gen-store command."""
    root = tmp_path_factory.mktemp("whydoc")
    (root / "tests" / "data").mkdir(parents=True)
    (root / "tests" / "data" / "golden_store").symlink_to(DATA / "golden_store")
    text = DOC.read_text(encoding="utf-8")
    gen = re.search(r"\$ (rmqfilter gen-store .*)", text).group(1)
    with pytest.MonkeyPatch.context() as mp:
        mp.chdir(root)
        assert main([*shlex.split(gen)[1:], "--progress", "never"]) == 0
    return root


def test_python_examples_run(doc_dir, monkeypatch, capsys):
    monkeypatch.chdir(doc_dir)
    capsys.readouterr()
    result = doctest.testfile(str(DOC), module_relative=False, optionflags=doctest.NORMALIZE_WHITESPACE)
    assert result.attempted > 10 and result.failed == 0


def test_console_examples_print_what_the_page_shows(doc_dir, monkeypatch, capsys):
    monkeypatch.chdir(doc_dir)
    capsys.readouterr()
    blocks = re.findall(r"```console\n(.*?)```", DOC.read_text(encoding="utf-8"), re.DOTALL)
    assert len(blocks) >= 7
    for block in blocks:
        command, *shown = block.splitlines()
        argv = shlex.split(command.removeprefix("$ "))
        assert argv[0] == "rmqfilter"
        status = main(argv[1:])
        captured = capsys.readouterr()
        assert (captured.out + captured.err).splitlines() == shown, command
        assert status == (2 if captured.err else 0)
