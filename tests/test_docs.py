"""The examples in README.md and docs/*.md run, so the pages cannot drift from the code.

What runs, page by page (one test per page; the examples of a page share one namespace,
in page order, as in a doctest file):

- ``>>>`` examples in ```` ```pycon ```` and ```` ```python ```` blocks, as doctests
  (ELLIPSIS and NORMALIZE_WHITESPACE), under whichever engine the run selects, so
  ``make test`` runs them under the Cython engines and again under the pure-Python twins;
- ``$ rmqfilter ...`` lines of ```` ```console ```` blocks, through
  ``rmqfilter.main`` in-process: the exit status must be 0, or N where the line ends
  with ``# exit N``; the lines shown under the command (when any are shown) must be what it
  printed, ``...`` standing for any text, whitespace exact (columns are part of the output):
  its stdout, and for a failing command (``# exit N``) its stdout then its stderr, where the
  error message is.

The namespace every page gets: ``store`` (a ``cq.Store`` over the golden store),
``golden_store_path`` (its path, str), ``sample_store_path`` (the sample store, written once by
``rmqfilter gen-store sample-store --messages 2000 --seed 1``: messages, ext bitmaps and the
config files of its three registered SQL92 groups), ``tmp_path`` (a fresh empty directory, str);
the examples run from the repository root, so ``tests/data/golden_store`` names the golden store.
Console commands run in a directory where ``tests/data/golden_store`` is the golden store and
``sample-store`` the sample store, so pages can show those paths as a reader types them. A page
whose examples use the sample store shows the command that writes it, so a reader can make it.

Markers, an HTML comment on the line just before a block (not rendered):

- ``<!-- doctest: spark -->``: the block's examples need ``spark`` (the shared session); the
  page's examples run again with them, in page order, in ``test_page_spark_examples`` of
  tests/spark/test_docs_spark.py (marker ``spark``), in the process of the other Spark tests;
- ``<!-- doctest: skip REASON -->``: the block does not run, and REASON says why (it needs a
  cluster, a path on the reader's machine...). A python block without ``>>>`` must carry one:
  every Python example either runs or says why it does not.

The code's citations of the docs (``docs/<page>.md#<anchor>``) must name a page and an explicit
anchor (``{ #anchor }``) that exist, and no source may cite a document outside the repository.
"""
from __future__ import annotations

import contextlib
import doctest
import io
import re
import shlex
from dataclasses import dataclass, field
from pathlib import Path

import pytest

import cq
import rmqfilter

ROOT = Path(__file__).resolve().parent.parent
GOLDEN = ROOT / "tests" / "data" / "golden_store"
PAGES = sorted([ROOT / "README.md", *(ROOT / "docs").rglob("*.md")])

_FENCE = re.compile(r"^(?P<indent>[ \t]*)```(?P<lang>[\w-]*)[^\n]*\n(?P<body>.*?)^(?P=indent)```[ \t]*$",
                   re.MULTILINE | re.DOTALL)
_MARKER = re.compile(r"<!--\s*doctest:\s*(?P<kind>skip|spark)\b(?P<reason>.*?)-->\s*$")
_EXIT = re.compile(r"#\s*exit\s+(\d+)\s*$")
_OPTIONS = doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE


@dataclass
class Block:
    lang: str
    body: str
    line: int  # 1-based line of the first body line
    marker: str | None = None
    reason: str = ""


@dataclass
class Page:
    path: Path
    blocks: list[Block] = field(default_factory=list)

    @property
    def name(self) -> str:
        return str(self.path.relative_to(ROOT))


def parse_page(path: Path) -> Page:
    text = path.read_text(encoding="utf-8")
    page = Page(path)
    for m in _FENCE.finditer(text):
        start_line = text.count("\n", 0, m.start()) + 1
        before = text[: m.start()].rstrip("\n").rsplit("\n", 1)[-1]
        marker = _MARKER.search(before)
        body = m.group("body")
        indent = m.group("indent")
        if indent:
            body = "\n".join(line.removeprefix(indent)
                             for line in body.split("\n"))
        page.blocks.append(Block(m.group("lang"), body, start_line + 1,
                                 marker.group("kind") if marker else None,
                                 marker.group("reason").strip() if marker else ""))
    return page


def page_doctest(page: Page, globs: dict, *, spark: bool) -> doctest.DocTest:
    """The page's examples as one doctest; with ``spark``, the Spark blocks too, in page order."""
    parser = doctest.DocTestParser()
    examples = []
    for block in page.blocks:
        if block.lang not in ("python", "pycon") or block.marker == "skip":
            continue
        if block.marker == "spark" and not spark:
            continue
        for ex in parser.get_examples(block.body, page.name):
            ex.lineno += block.line - 1
            examples.append(ex)
    return doctest.DocTest(examples, globs, page.name, str(page.path), 0, None)


def run_doctest(test: doctest.DocTest) -> None:
    out = io.StringIO()
    runner = doctest.DocTestRunner(optionflags=_OPTIONS)
    runner.run(test, out=out.write, clear_globs=False)
    if runner.failures:
        pytest.fail(f"{runner.failures} example(s) of {test.name} drifted from the code:\n{out.getvalue()}",
                    pytrace=False)


#: What writes the sample store; a page whose examples use it says so with this command.
SAMPLE_STORE_COMMAND = "rmqfilter gen-store sample-store --messages 2000 --seed 1"
_USES_SAMPLE_STORE = re.compile(r"\bsample_store_path\b|(?<![\w/-])sample-store\b")


@pytest.fixture(scope="session")
def sample_store_path(tmp_path_factory) -> str:
    root = tmp_path_factory.mktemp("docs") / "sample-store"
    argv = [str(root) if word == "sample-store" else word for word in shlex.split(SAMPLE_STORE_COMMAND)[1:]]
    with contextlib.redirect_stdout(io.StringIO()):
        assert rmqfilter.main([*argv, "--progress", "never"]) == 0
    return str(root)


@pytest.fixture
def doc_globs(tmp_path, sample_store_path, monkeypatch):
    monkeypatch.chdir(ROOT)  # README shows the golden store as tests/data/golden_store
    store = cq.Store(GOLDEN)
    work = tmp_path / "work"
    work.mkdir()
    globs = {"store": store, "golden_store_path": str(GOLDEN), "sample_store_path": sample_store_path,
             "tmp_path": str(work)}
    yield globs
    store.close()


def _page_id(path: Path) -> str:
    return str(path.relative_to(ROOT))


def test_pages_found():
    names = {_page_id(p) for p in PAGES}
    assert "README.md" in names and "docs/index.md" in names and "docs/formats.md" in names


@pytest.mark.parametrize("path", PAGES, ids=_page_id)
def test_every_python_block_runs_or_says_why(path):
    page = parse_page(path)
    for block in page.blocks:
        if block.marker == "skip":
            assert block.reason, f"{page.name}:{block.line}: a skipped block must say why"
        elif block.lang in ("python", "pycon"):
            assert ">>>" in block.body, (
                f"{page.name}:{block.line}: a python block without >>> examples; make it a doctest "
                "or mark it <!-- doctest: skip REASON -->")


@pytest.mark.parametrize("path", PAGES, ids=_page_id)
def test_a_page_using_the_sample_store_says_how_to_make_it(path):
    page = parse_page(path)
    uses = [block.line for block in page.blocks
            if block.marker != "skip" and block.lang in ("python", "pycon", "console")
            and _USES_SAMPLE_STORE.search(block.body.replace("gen-store sample-store", ""))]
    if uses:
        assert SAMPLE_STORE_COMMAND in path.read_text(encoding="utf-8"), (
            f"{page.name}:{uses[0]}: the examples use the sample store; show the command that writes "
            f"it ({SAMPLE_STORE_COMMAND})")


@pytest.mark.parametrize("path", PAGES, ids=_page_id)
def test_page_examples(path, doc_globs):
    page = parse_page(path)
    test = page_doctest(page, doc_globs, spark=False)
    if test.examples:
        run_doctest(test)


_CITATION = re.compile(r"\bdocs/([\w-]+\.md)(?:#([\w-]+))?")
_ANCHOR = re.compile(r"\{\s*#([\w-]+)\s*\}")
SOURCES = sorted(p for package in ("bloom", "selector", "cq", "pyspark_udfs", "tests", "bench", "fuzz")
                 for ext in ("py", "pyx", "pxd") for p in (ROOT / package).rglob(f"*.{ext}"))


def test_code_cites_pages_and_sections_that_exist():
    """Every ``docs/<page>.md#<anchor>`` cited in the code names a page and an explicit anchor in it,
    and nothing cites a document outside the repository ("spec §...")."""
    anchors: dict[str, set[str]] = {}
    missing = []
    for source in SOURCES:
        text = source.read_text(encoding="utf-8")
        for m in _CITATION.finditer(text):
            page, anchor = m.groups()
            if page not in anchors:
                path = ROOT / "docs" / page
                anchors[page] = set(_ANCHOR.findall(path.read_text(encoding="utf-8"))) if path.exists() else None
            if anchors[page] is None or (anchor and anchor not in anchors[page]):
                line = text.count("\n", 0, m.start()) + 1
                missing.append(f"{source.relative_to(ROOT)}:{line}: {m.group(0)}")
        for m in re.finditer(r"spec §", text if source != Path(__file__) else "", re.IGNORECASE):
            line = text.count("\n", 0, m.start()) + 1
            missing.append(f"{source.relative_to(ROOT)}:{line}: cites a spec outside the repository")
    assert not missing, "citations of pages or sections that do not exist:\n" + "\n".join(missing)
    assert "formats.md" in anchors  # the scan found the citations


def console_commands(page: Page):
    """``(line, argv, expected stdout or None, exit status)`` of each ``$ rmqfilter`` line."""
    for block in page.blocks:
        if block.lang != "console" or block.marker == "skip":
            continue
        lines = block.body.rstrip("\n").split("\n")
        i = 0
        while i < len(lines):
            line = lines[i]
            if not line.startswith("$ rmqfilter "):
                i += 1
                continue
            command = line[2:]
            while command.endswith("\\"):
                i += 1
                command = command[:-1] + lines[i]
            status = _EXIT.search(command)
            argv = shlex.split(command, comments=True)[1:]
            output = []
            i += 1
            while i < len(lines) and not lines[i].startswith("$ "):
                output.append(lines[i])
                i += 1
            expected = "\n".join(output) + "\n" if output else None
            yield block.line, argv, expected, int(status.group(1)) if status else 0


@pytest.mark.parametrize("path", [p for p in PAGES if any(console_commands(parse_page(p)))], ids=_page_id)
def test_page_cli_examples(path, tmp_path, monkeypatch, sample_store_path):
    page = parse_page(path)
    data = tmp_path / "tests" / "data"
    data.mkdir(parents=True)
    (data / "golden_store").symlink_to(GOLDEN, target_is_directory=True)
    (data / "tiered_store").symlink_to(GOLDEN.parent / "tiered_store", target_is_directory=True)
    (tmp_path / "sample-store").symlink_to(sample_store_path, target_is_directory=True)
    monkeypatch.chdir(tmp_path)
    checker = doctest.OutputChecker()
    for line, argv, expected, status in console_commands(page):
        if argv[:1] in (["scan"], ["demo"]):
            pytest.fail(f"{page.name}:{line}: `rmqfilter {argv[0]}` starts Spark; mark its block "
                        "<!-- doctest: skip REASON -->", pytrace=False)
        out, err = io.StringIO(), io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                got_status = rmqfilter.main(argv)
            except SystemExit as exc:  # argparse errors
                got_status = exc.code
        where = f"{page.name}:{line}: rmqfilter {shlex.join(argv)}"
        assert got_status == status, f"{where}: exit status {got_status}, the page says {status}\n{err.getvalue()}"
        printed = out.getvalue() + (err.getvalue() if status else "")
        if expected is not None and not checker.check_output(expected, printed, doctest.ELLIPSIS):
            pytest.fail(f"{where}: the page shows\n{expected}but the command printed\n{printed}",
                        pytrace=False)
