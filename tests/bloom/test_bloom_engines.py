"""The Cython engine and the pure-Python twin of ``bloom`` agree on arbitrary input (hypothesis)."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bloom import _bloom_py

_bloom = pytest.importorskip("bloom._bloom", reason="Cython engine not built")

keys = st.lists(st.one_of(st.none(), st.binary(max_size=80), st.text(max_size=40).map(lambda s: s.encode("utf-8", "replace"))),
                max_size=30)


@settings(max_examples=200, deadline=None)
@given(data=st.binary(max_size=200))
def test_murmur_agrees(data):
    assert _bloom.murmur3_h1(data) == _bloom_py.murmur3_h1(data)


@settings(max_examples=200, deadline=None)
@given(keys=keys, k=st.integers(1, 12), m=st.integers(1, 2**31 - 1))
def test_positions_agree(keys, k, m):
    assert _bloom.bit_positions_many(keys, k, m).tolist() == _bloom_py.bit_positions_many(keys, k, m).tolist()
    for key in keys:
        if key is not None:
            assert _bloom.bit_positions(key, k, m) == _bloom_py.bit_positions(key, k, m)


@settings(max_examples=100, deadline=None)
@given(keys=keys, k=st.integers(1, 8), m=st.integers(1, 5000))
def test_buffer_layout_agrees(keys, k, m):
    data = b"".join(key or b"" for key in keys)
    offsets = np.cumsum([0] + [len(key or b"") for key in keys]).astype(np.int64)
    valid = np.array([key is not None for key in keys], dtype=bool)
    buf = np.frombuffer(data, np.uint8) if data else np.zeros(0, np.uint8)
    assert (_bloom.bit_positions_buffers(buf, offsets, valid, k, m).tolist()
            == _bloom_py.bit_positions_buffers(buf, offsets, valid, k, m).tolist())


@settings(max_examples=100, deadline=None)
@given(rows=st.integers(0, 50), nbytes=st.integers(1, 40), seed=st.integers(0, 2**32 - 1),
       positions=st.lists(st.integers(0, 319), min_size=1, max_size=9))
def test_is_hit_agrees(rows, nbytes, seed, positions):
    positions = [p % (nbytes * 8) for p in positions]
    bitmaps = np.random.default_rng(seed).integers(0, 256, (rows, nbytes), dtype=np.uint8)
    bitmaps[::3] |= 0xF0
    masks: dict[int, int] = {}
    for p in positions:
        masks[p >> 3] = masks.get(p >> 3, 0) | (1 << (p & 7))
    idx = np.array(list(masks), dtype=np.intp)
    mk = np.array(list(masks.values()), dtype=np.uint8)
    assert _bloom.is_hit_many(bitmaps, idx, mk).tolist() == _bloom_py.is_hit_many(bitmaps, idx, mk).tolist()


def test_bad_offsets_are_refused_not_read():
    buf = np.frombuffer(b"abc", np.uint8)
    for offsets in ([0, 5], [2, 1], [-1, 2]):
        with pytest.raises(ValueError, match="outside the 3-byte data buffer|out of order"):
            _bloom.bit_positions_buffers(buf, np.array(offsets, np.int64), None, 3, 112)
