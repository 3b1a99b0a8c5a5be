"""The Python examples of docs/cost.md and docs/custom-filters.md run and print what the pages say."""
from __future__ import annotations

import doctest
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.parametrize("page", ["docs/cost.md", "docs/custom-filters.md"])
def test_page_examples(page, monkeypatch):
    pytest.importorskip("pyarrow")
    monkeypatch.chdir(ROOT)  # the examples name tests/data/golden_store
    result = doctest.testfile(str(ROOT / page), module_relative=False, optionflags=doctest.ELLIPSIS,
                              raise_on_error=False, verbose=False)
    assert result.attempted > 3 and result.failed == 0
