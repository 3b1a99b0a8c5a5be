"""Pure-Python twin of ``bloom/_bloom.pyx``: the same functions, written to be read.

It documents the semantics the Cython engine must reproduce (docs/filtering.md#bloom-positions) and
checks it in the test suite. ``RMQFILTER_PUREPYTHON=1`` selects it.

Keys arrive here already encoded as UTF-8 ``bytes`` (``encode_key`` does that
the way Java's ``String.getBytes(UTF_8)`` does); positions are computed as the
broker's ``BloomFilter.calcBitPositions`` does:

1. H = first 8 bytes, little-endian, of MurmurHash3 x64-128 (seed 0) of the key;
2. hash1 = low 32 bits of H, hash2 = high 32 bits (both signed int32);
3. for i in 1..k: c = int32(hash1 + i * hash2); if c < 0: c = ~c; pos = c % m.
"""
from __future__ import annotations

from collections.abc import Sequence

import numpy as np

_MASK64 = (1 << 64) - 1
_C1 = 0x87C37B91114253D5
_C2 = 0x4CF5AD432745937F


def _rotl64(x: int, r: int) -> int:
    return ((x << r) | (x >> (64 - r))) & _MASK64


def _fmix64(k: int) -> int:
    k ^= k >> 33
    k = (k * 0xFF51AFD7ED558CCD) & _MASK64
    k ^= k >> 33
    k = (k * 0xC4CEB9FE1A85EC53) & _MASK64
    k ^= k >> 33
    return k


def _mix_k1(k1: int) -> int:
    k1 = (k1 * _C1) & _MASK64
    k1 = _rotl64(k1, 31)
    return (k1 * _C2) & _MASK64


def _mix_k2(k2: int) -> int:
    k2 = (k2 * _C2) & _MASK64
    k2 = _rotl64(k2, 33)
    return (k2 * _C1) & _MASK64


def murmur3_h1(data: bytes) -> int:
    """First 64 bits (h1, as signed int64) of MurmurHash3 x64-128 of ``data``, seed 0.

    This is Guava's ``Hashing.murmur3_128().hashBytes(data).asLong()``.
    """
    length = len(data)
    h1 = h2 = 0
    nblocks = length // 16
    for b in range(nblocks):
        k1 = int.from_bytes(data[16 * b : 16 * b + 8], "little")
        k2 = int.from_bytes(data[16 * b + 8 : 16 * b + 16], "little")
        h1 ^= _mix_k1(k1)
        h1 = _rotl64(h1, 27)
        h1 = (h1 + h2) & _MASK64
        h1 = (h1 * 5 + 0x52DCE729) & _MASK64
        h2 ^= _mix_k2(k2)
        h2 = _rotl64(h2, 31)
        h2 = (h2 + h1) & _MASK64
        h2 = (h2 * 5 + 0x38495AB5) & _MASK64
    tail = data[16 * nblocks :]
    if len(tail) > 8:
        h2 ^= _mix_k2(int.from_bytes(tail[8:], "little"))
    if tail:
        h1 ^= _mix_k1(int.from_bytes(tail[:8], "little"))
    h1 ^= length
    h2 ^= length
    h1 = (h1 + h2) & _MASK64
    h2 = (h2 + h1) & _MASK64
    h1 = _fmix64(h1)
    h2 = _fmix64(h2)
    h1 = (h1 + h2) & _MASK64
    return h1 - (1 << 64) if h1 >> 63 else h1


def _int32(x: int) -> int:
    x &= 0xFFFFFFFF
    return x - (1 << 32) if x >> 31 else x


def bit_positions(key: bytes, k: int, m: int) -> list[int]:
    """The broker's k bit positions (in order i = 1..k) of a UTF-8 encoded key."""
    h = murmur3_h1(key)
    hash1 = _int32(h)
    hash2 = _int32(h >> 32)
    out = []
    for i in range(1, k + 1):
        c = _int32(hash1 + i * hash2)
        if c < 0:
            c = ~c
        out.append(c % m)
    return out


def bit_positions_many(keys: Sequence[str | bytes | None], k: int, m: int) -> np.ndarray:
    """Positions of many keys (str, UTF-8 bytes or None) as an int32 array (N, k).

    A ``None`` key gives a row of -1; a str with a lone surrogate raises
    UnicodeEncodeError (``bloom`` then re-encodes it the way Java does).
    """
    out = np.full((len(keys), k), -1, dtype=np.int32)
    for row, key in enumerate(keys):
        if isinstance(key, str):
            key = key.encode("utf-8")
        elif key is None:
            continue
        elif not isinstance(key, bytes):
            raise TypeError(f"keys[{row}]: expected str, bytes or None, got {type(key).__name__}")
        out[row] = bit_positions(key, k, m)
    return out


def bit_positions_buffers(data: np.ndarray, offsets: np.ndarray, valid: np.ndarray | None,
                          k: int, m: int) -> np.ndarray:
    """Positions of the strings of an Arrow-style layout: ``data[offsets[i]:offsets[i+1]]``.

    ``valid`` is a bool array (False = null key, row of -1) or None (no nulls).
    """
    n = len(offsets) - 1
    raw = data.tobytes()
    keys = [raw[offsets[i] : offsets[i + 1]] if valid is None or valid[i] else None for i in range(n)]
    return bit_positions_many(keys, k, m)


def is_hit_many(bitmaps: np.ndarray, byte_idx: np.ndarray, masks: np.ndarray) -> np.ndarray:
    """For each row of ``bitmaps`` (N, nbytes): are all the masked bits set?"""
    out = np.empty(bitmaps.shape[0], dtype=np.bool_)
    for row in range(bitmaps.shape[0]):
        bitmap = bitmaps[row]
        out[row] = all(int(bitmap[b]) & int(mk) == int(mk) for b, mk in zip(byte_idx, masks))
    return out


def set_positions(bits: bytearray, positions: np.ndarray) -> None:
    """OR every position of a (N, k) array into ``bits`` (rows of -1 are skipped)."""
    for p in positions.ravel().tolist():
        if p >= 0:
            bits[p >> 3] |= 1 << (p & 7)
