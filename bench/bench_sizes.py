"""Throughput against input size, for the report's charts.

Two kernels, each beside its obvious alternative at every size:

- the ConsumeQueue tag scan (``cq.scan_tags``, 40 tag codes) vs numpy
  (``np.isin`` on the raw low-32 tag words), from 10 k to 10 M units;
- the batch selector (``Selector.matches_arrow`` of
  ``a > 5 AND TAGS IN ('A', 'B')``) vs the same condition written with
  ``pyarrow.compute`` (cast to int32, ``greater``, ``is_in``, ``and_kleene``),
  from 1 k to 1 M rows. The pyarrow version is not the broker's semantics (its
  cast accepts and rejects other strings than ``Integer.valueOf``); on this data
  both give the same rows, which the benchmark checks.

Every benchmark records ``series`` and ``size`` in ``extra_info``; ``bench/report.py``
draws one chart per series (throughput, log-log) into ``bench/charts/``.

Run: ``make bench`` or ``.venv/bin/python -m pytest bench/bench_sizes.py``.
"""
from __future__ import annotations

import numpy as np
import pytest

import cq
import selector
from cq import format as fmt

pa = pytest.importorskip("pyarrow")
pc = pytest.importorskip("pyarrow.compute")

SCAN_SIZES = [10_000, 100_000, 1_000_000, 10_000_000]
SELECTOR_SIZES = [1_000, 10_000, 100_000, 1_000_000]
N_CODES = 40
SCAN_SERIES = f"ConsumeQueue tag scan, {N_CODES} codes (units/s)"
SQL = "a > 5 AND TAGS IN ('A', 'B')"
SELECTOR_SERIES = f"batch selector `{SQL}` (rows/s)"


@pytest.fixture(scope="module")
def units() -> tuple[np.ndarray, np.ndarray]:
    """10 M ConsumeQueue units drawn from 1000 tags, and 40 of those tags' codes."""
    rng = np.random.default_rng(11)
    pool = np.array(sorted({cq.tags_code(f"Tag_{i}") for i in range(1000)}), dtype=np.int64)
    data = np.zeros(SCAN_SIZES[-1], dtype=fmt.CQ_UNIT_DTYPE)
    data["commit_log_offset"] = np.arange(len(data), dtype=np.int64) * 300
    data["size"] = 300
    data["tags_code"] = rng.choice(pool, size=len(data))
    return data.view(np.uint8), pool[:: len(pool) // N_CODES][:N_CODES]


def _numpy_scan(buf: np.ndarray, codes: np.ndarray) -> np.ndarray:
    col = buf.view("<u4").reshape(-1, 5)[:, 4]
    return np.flatnonzero(np.isin(col, codes.astype(np.uint32).byteswap()))


@pytest.mark.parametrize("size", SCAN_SIZES)
@pytest.mark.parametrize("role", ["ours", "alternative"])
def test_scan_by_size(benchmark, units, size, role):
    data, codes = units
    buf = data[: size * fmt.CQ_STORE_UNIT_SIZE]
    benchmark.group = f"scan_tags by size, {size:,} units, {N_CODES} codes"
    label = "cq.scan_tags" if role == "ours" else "numpy isin on the tag words"
    benchmark.extra_info.update(items=size, bytes=len(buf), role=role, series=SCAN_SERIES, size=size,
                                label=label)
    fn = cq.scan_tags if role == "ours" else _numpy_scan
    got = benchmark.pedantic(fn, args=(buf, codes), rounds=max(5, min(200, 20_000_000 // size)),
                             warmup_rounds=1)
    assert np.array_equal(got, _numpy_scan(buf, codes))


@pytest.fixture(scope="module")
def columns() -> dict[str, pa.Array]:
    rng = np.random.default_rng(12)
    n = SELECTOR_SIZES[-1]
    a = [str(i) for i in rng.integers(0, 13, n)]
    tags = [("A", "B", "C", "D", "E", "F", "G")[i] for i in rng.integers(0, 7, n)]
    return {"a": pa.array(a, pa.string()), "TAGS": pa.array(tags, pa.string())}


def _pyarrow_condition(cols: dict[str, pa.Array]) -> pa.Array:
    gt = pc.greater(pc.cast(cols["a"], pa.int32()), 5)
    return pc.and_kleene(gt, pc.is_in(cols["TAGS"], value_set=pa.array(["A", "B"])))


@pytest.mark.parametrize("size", SELECTOR_SIZES)
@pytest.mark.parametrize("role", ["ours", "alternative"])
def test_selector_by_size(benchmark, columns, size, role):
    cols = {k: v.slice(0, size) for k, v in columns.items()}
    s = selector.compile(SQL)
    benchmark.group = f"matches_arrow by size, {size:,} rows"
    label = "Selector.matches_arrow" if role == "ours" else "pyarrow.compute (not broker-exact)"
    benchmark.extra_info.update(items=size, role=role, series=SELECTOR_SERIES, size=size, label=label)
    if role == "ours":
        fn, args = s.matches_arrow, (cols,)
    else:
        fn, args = _pyarrow_condition, (cols,)
    got = benchmark.pedantic(fn, args=args, rounds=max(5, min(200, 2_000_000 // size)), warmup_rounds=1)
    assert got.to_pylist() == s.matches_arrow(cols).to_pylist()
