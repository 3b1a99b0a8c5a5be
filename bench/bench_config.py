"""Reading a big ``consumerOffset.json`` (fastjson's bare integer keys): the C-json fast path
beside the exact recursive-descent reader, in the same run.

Run: ``make bench`` or ``.venv/bin/python -m pytest bench/bench_config.py``.
"""
from __future__ import annotations

import pytest

from cq.readers.config import _Parser, parse_fastjson
from cq.writer.config_writer import dumps_fastjson

GROUPS = 10_000
QUEUES = 16


@pytest.fixture(scope="module")
def offsets_text() -> str:
    """A broker with 10,000 topic@group entries of 16 queues each (160,000 offsets), pretty-printed."""
    doc = {"offsetTable": {f"Topic{i % 100}@GID_{i}": {q: i * q for q in range(QUEUES)} for i in range(GROUPS)}}
    return dumps_fastjson(doc, pretty=True)


def test_parse_fastjson_ours(benchmark, offsets_text):
    benchmark.group = "consumerOffset.json, 160k offsets"
    benchmark.extra_info.update(items=GROUPS * QUEUES, bytes=len(offsets_text), role="ours")
    got = benchmark(parse_fastjson, offsets_text)
    assert len(got["offsetTable"]) == GROUPS and got["offsetTable"]["Topic1@GID_1"][3] == 3


def test_parse_exact_reader(benchmark, offsets_text):
    benchmark.group = "consumerOffset.json, 160k offsets"
    benchmark.extra_info.update(items=GROUPS * QUEUES, bytes=len(offsets_text), role="alternative")
    got = benchmark.pedantic(lambda: _Parser(offsets_text, "bench").parse(), rounds=3, iterations=1)
    assert got == parse_fastjson(offsets_text)
