"""The docs' Spark examples (``<!-- doctest: spark -->`` blocks) run, with the shared session.

Apart from tests/test_docs.py (which defines how pages are read and run, and runs every other
kind of example) so the Spark examples run in the process that holds the warm ``spark`` session.
"""
from __future__ import annotations

import pytest
from test_docs import PAGES, _page_id, doc_globs, page_doctest, parse_page, run_doctest, sample_store_path  # noqa: F401

pytestmark = pytest.mark.spark

SPARK_PAGES = [p for p in PAGES if any(b.marker == "spark" for b in parse_page(p).blocks)]


def test_pages_with_spark_examples_found():
    assert {_page_id(p) for p in SPARK_PAGES} >= {"README.md", "docs/spark.md"}


@pytest.mark.parametrize("path", SPARK_PAGES, ids=_page_id)
def test_page_spark_examples(path, doc_globs, spark):  # noqa: F811  the fixture imported above
    page = parse_page(path)
    run_doctest(page_doctest(page, dict(doc_globs, spark=spark), spark=True))
