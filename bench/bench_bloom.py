"""Bloom filter kernels beside their obvious alternatives, in the same run.

- bit positions per key, single and batch (list of str, Arrow array) vs mmh3 in a Python loop;
- ``is_hit_many`` over (N, 14) bitmaps vs numpy's vectorised byte-and-mask test;
- the pure-Python twin, so the engine's gain over it is visible too.

Run: ``make bench`` or ``.venv/bin/python -m pytest bench/bench_bloom.py``.
"""
from __future__ import annotations

import numpy as np
import pytest

import bloom
from bloom import _bloom_py

N_KEYS = 1_000_000
N_BITMAPS = 10_000_000
BF = bloom.BloomFilter()


@pytest.fixture(scope="module")
def keys() -> list[str]:
    rng = np.random.default_rng(1)
    groups = [f"GID_consumer_{i}" for i in range(500)]
    topics = [f"TopicTest_{i}" for i in range(200)]
    return [f"{groups[g]}#{topics[t]}" for g, t in zip(rng.integers(0, 500, N_KEYS), rng.integers(0, 200, N_KEYS))]


@pytest.fixture(scope="module")
def bitmaps() -> np.ndarray:
    rng = np.random.default_rng(2)
    return rng.integers(0, 256, (N_BITMAPS, BF.m // 8), dtype=np.uint8)


def _mmh3_positions(keys, k, m):
    import mmh3

    out = np.empty((len(keys), k), dtype=np.int32)
    for row, key in enumerate(keys):
        h = mmh3.hash64(key, 0, signed=True)[0]
        hash1 = (h & 0xFFFFFFFF) - ((h & 0x80000000) << 1)
        hash2 = h >> 32
        for i in range(1, k + 1):
            c = (hash1 + i * hash2) & 0xFFFFFFFF
            c = c - (1 << 32) if c >> 31 else c
            out[row, i - 1] = (~c if c < 0 else c) % m
    return out


def test_positions_single_key_ours(benchmark):
    benchmark.group = "bloom positions, one key per call"
    benchmark.extra_info.update(items=1, role="ours")
    benchmark(BF.calc_bit_positions, "GID_consumer_17#TopicTest_3")


def test_positions_single_key_mmh3(benchmark):
    pytest.importorskip("mmh3")
    benchmark.group = "bloom positions, one key per call"
    benchmark.extra_info.update(items=1, role="alternative")
    benchmark(_mmh3_positions, ["GID_consumer_17#TopicTest_3"], BF.k, BF.m)


def test_positions_batch_list_ours(benchmark, keys):
    benchmark.group = "bloom positions, batch of 1M keys"
    benchmark.extra_info.update(items=len(keys), role="ours")
    got = benchmark(BF.calc_bit_positions_many, keys)
    assert got.shape == (len(keys), 3)


def test_positions_batch_arrow_ours(benchmark, keys):
    pa = pytest.importorskip("pyarrow")
    arr = pa.array(keys)
    benchmark.group = "bloom positions, batch of 1M keys"
    benchmark.extra_info.update(items=len(keys), role="ours")
    got = benchmark(BF.calc_bit_positions_many, arr)
    assert got.shape == (len(keys), 3)


def test_positions_batch_mmh3_loop(benchmark, keys):
    pytest.importorskip("mmh3")
    sample = keys[:100_000]
    benchmark.group = "bloom positions, batch of 1M keys"
    benchmark.extra_info.update(items=len(sample), role="alternative")
    got = benchmark.pedantic(_mmh3_positions, (sample, BF.k, BF.m), rounds=3)
    assert got.tolist() == BF.calc_bit_positions_many(sample).tolist()


def test_positions_batch_python_twin(benchmark, keys):
    sample = keys[:20_000]
    benchmark.group = "bloom positions, batch of 1M keys"
    benchmark.extra_info.update(items=len(sample), role="twin")
    benchmark.pedantic(_bloom_py.bit_positions_many, (sample, BF.k, BF.m), rounds=2)


def test_is_hit_many_ours(benchmark, bitmaps):
    data = BF.generate("GID_consumer_17#TopicTest_3")
    benchmark.group = "bloom is_hit, 10M bitmaps of 14 bytes"
    benchmark.extra_info.update(items=len(bitmaps), bytes=bitmaps.nbytes, role="ours")
    got = benchmark(BF.is_hit_many, data, bitmaps)
    assert got.shape == (len(bitmaps),)


def test_is_hit_many_numpy(benchmark, bitmaps):
    data = BF.generate("GID_consumer_17#TopicTest_3")
    idx = np.array([p // 8 for p in data.bit_pos])
    masks = np.array([1 << (p % 8) for p in data.bit_pos], dtype=np.uint8)

    def numpy_hits(b):
        return np.all((b[:, idx] & masks) == masks, axis=1)

    benchmark.group = "bloom is_hit, 10M bitmaps of 14 bytes"
    benchmark.extra_info.update(items=len(bitmaps), bytes=bitmaps.nbytes, role="alternative")
    got = benchmark.pedantic(numpy_hits, (bitmaps,), rounds=3)
    assert got.tolist() == BF.is_hit_many(data, bitmaps).tolist()


def test_is_hit_many_cache_resident_ours(benchmark, bitmaps):
    """The same kernel over 64k bitmaps (896 KiB, fits L2/L3): compute bound, not memory bound."""
    small = np.ascontiguousarray(bitmaps[:65536])
    data = BF.generate("GID_consumer_17#TopicTest_3")
    benchmark.group = "bloom is_hit, 64k bitmaps (cache resident)"
    benchmark.extra_info.update(items=len(small), bytes=small.nbytes, role="ours")
    benchmark(BF.is_hit_many, data, small)
