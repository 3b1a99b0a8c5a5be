"""docs/live.md runs: its Python examples as doctests (against a store the page writes), its console
examples as commands whose output must be what the page shows (against the golden store)."""
from __future__ import annotations

import doctest
import re
import shlex
from pathlib import Path

from conftest import DATA

from pyspark_udfs.cli import main

DOC = Path(__file__).resolve().parent.parent / "docs" / "live.md"


def test_python_examples_run():
    result = doctest.testfile(str(DOC), module_relative=False, optionflags=doctest.NORMALIZE_WHITESPACE)
    assert result.attempted > 10 and result.failed == 0


def test_console_examples_print_what_the_page_shows(tmp_path, monkeypatch, capsys):
    (tmp_path / "tests" / "data").mkdir(parents=True)
    (tmp_path / "tests" / "data" / "golden_store").symlink_to(DATA / "golden_store")
    monkeypatch.chdir(tmp_path)
    blocks = re.findall(r"```console\n(.*?)```", DOC.read_text(encoding="utf-8"), re.DOTALL)
    assert len(blocks) == 2
    for block in blocks:
        command, *shown = block.splitlines()
        argv = shlex.split(command.removeprefix("$ "))
        capsys.readouterr()
        status = main(argv[1:])
        captured = capsys.readouterr()
        assert (captured.out + captured.err).splitlines() == shown, command
        assert status == (2 if captured.err else 0)
