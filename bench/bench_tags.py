"""Tag hash codes in batch beside a pure-Python fold, in the same run.

Run: ``make bench`` or ``.venv/bin/python -m pytest bench/bench_tags.py``.
"""
from __future__ import annotations

import numpy as np
import pytest

import cq
from cq.kernels import _tags_py

N_TAGS = 1_000_000


@pytest.fixture(scope="module")
def tags() -> list:
    rng = np.random.default_rng(8)
    pool = [f"Tag_{i}" for i in range(200)] + ["标签", "Ωmega", "😀tag", None]
    return [pool[i] for i in rng.integers(0, len(pool), N_TAGS)]


def _python_fold(tags):
    out = np.empty(len(tags), dtype=np.int32)
    for i, tag in enumerate(tags):
        h = 0
        if tag:
            data = tag.encode("utf-16-be", "surrogatepass")
            for j in range(0, len(data), 2):
                h = (31 * h + (data[j] << 8 | data[j + 1])) & 0xFFFFFFFF
        out[i] = h - (1 << 32) if h >> 31 else h
    return out


def test_tags_code_many_list_ours(benchmark, tags):
    benchmark.group = "tags_code_many, 1M tags"
    benchmark.extra_info.update(items=len(tags), role="ours")
    got = benchmark(cq.tags_code_many, tags)
    assert got[:1000].tolist() == _python_fold(tags[:1000]).tolist()


def test_tags_code_many_arrow_ours(benchmark, tags):
    pa = pytest.importorskip("pyarrow")
    arr = pa.array(tags, type=pa.string())
    benchmark.group = "tags_code_many, 1M tags"
    benchmark.extra_info.update(items=len(tags), role="ours")
    got = benchmark(cq.tags_code_many, arr)
    assert got[:1000].tolist() == _python_fold(tags[:1000]).tolist()


def test_tags_code_many_python_fold(benchmark, tags):
    benchmark.group = "tags_code_many, 1M tags"
    benchmark.extra_info.update(items=len(tags), role="alternative")
    benchmark.pedantic(_python_fold, (tags,), rounds=2)


def test_tags_code_many_python_twin(benchmark, tags):
    benchmark.group = "tags_code_many, 1M tags"
    benchmark.extra_info.update(items=len(tags), role="alternative")
    benchmark.pedantic(_tags_py.tags_code_many_str, (tags,), rounds=2)
