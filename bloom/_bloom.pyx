# cython: language_level=3
"""Cython engine of the broker's Bloom filter: MurmurHash3 x64-128 and batch kernels.

Same functions and semantics as ``bloom/_bloom_py.py`` (read that one first).
Every public function checks its inputs once; the loops below run without the
GIL over typed memoryviews.
"""
from cpython.unicode cimport PyUnicode_Check
from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_GET_SIZE, PyBytes_Check
from libc.stdint cimport int32_t, int64_t, uint8_t, uint32_t, uint64_t

import numpy as np
cimport numpy as cnp

cnp.import_array()

cdef extern from "Python.h":
    const char* PyUnicode_AsUTF8AndSize(object s, Py_ssize_t* size) except NULL


cdef inline uint64_t rotl64(uint64_t x, int r) noexcept nogil:
    return (x << r) | (x >> (64 - r))


cdef inline uint64_t fmix64(uint64_t k) noexcept nogil:
    k ^= k >> 33
    k *= 0xFF51AFD7ED558CCDULL
    k ^= k >> 33
    k *= 0xC4CEB9FE1A85EC53ULL
    k ^= k >> 33
    return k


cdef inline uint64_t load_le64(const uint8_t* p, Py_ssize_t n) noexcept nogil:
    # n <= 8 bytes, little-endian, assembled byte by byte (endian-independent).
    cdef uint64_t v = 0
    cdef Py_ssize_t i
    for i in range(n):
        v |= (<uint64_t>p[i]) << (8 * i)
    return v


cdef inline int64_t murmur3_x64_128_h1(const uint8_t* data, Py_ssize_t length) noexcept nogil:
    cdef uint64_t c1 = 0x87C37B91114253D5ULL
    cdef uint64_t c2 = 0x4CF5AD432745937FULL
    cdef uint64_t h1 = 0, h2 = 0, k1, k2
    cdef Py_ssize_t nblocks = length // 16, b, rest
    cdef const uint8_t* p
    for b in range(nblocks):
        p = data + 16 * b
        k1 = load_le64(p, 8)
        k2 = load_le64(p + 8, 8)
        k1 *= c1
        k1 = rotl64(k1, 31)
        k1 *= c2
        h1 ^= k1
        h1 = rotl64(h1, 27)
        h1 += h2
        h1 = h1 * 5 + 0x52DCE729
        k2 *= c2
        k2 = rotl64(k2, 33)
        k2 *= c1
        h2 ^= k2
        h2 = rotl64(h2, 31)
        h2 += h1
        h2 = h2 * 5 + 0x38495AB5
    p = data + 16 * nblocks
    rest = length & 15
    if rest > 8:
        k2 = load_le64(p + 8, rest - 8)
        k2 *= c2
        k2 = rotl64(k2, 33)
        k2 *= c1
        h2 ^= k2
    if rest > 0:
        k1 = load_le64(p, 8 if rest > 8 else rest)
        k1 *= c1
        k1 = rotl64(k1, 31)
        k1 *= c2
        h1 ^= k1
    h1 ^= <uint64_t>length
    h2 ^= <uint64_t>length
    h1 += h2
    h2 += h1
    h1 = fmix64(h1)
    h2 = fmix64(h2)
    h1 += h2
    return <int64_t>h1


cdef inline void positions_of(const uint8_t* data, Py_ssize_t length, int k, int32_t m,
                              int32_t* out) noexcept nogil:
    cdef uint64_t h = <uint64_t>murmur3_x64_128_h1(data, length)
    cdef uint32_t hash1 = <uint32_t>h
    cdef uint32_t hash2 = <uint32_t>(h >> 32)
    cdef int32_t c
    cdef int i
    for i in range(1, k + 1):
        # int32 wrap of hash1 + i * hash2, done in unsigned arithmetic (no C UB).
        c = <int32_t>(hash1 + (<uint32_t>i) * hash2)
        if c < 0:
            c = ~c
        out[i - 1] = c % m


def murmur3_h1(const uint8_t[::1] data not None):
    """First 64 bits (h1, signed) of MurmurHash3 x64-128 of ``data``, seed 0."""
    cdef Py_ssize_t n = data.shape[0]
    cdef const uint8_t* p = &data[0] if n else <const uint8_t*>b""
    return murmur3_x64_128_h1(p, n)


def bit_positions(bytes key not None, int k, int32_t m):
    """The broker's k bit positions of a UTF-8 encoded key, as a list."""
    cdef int32_t buf[64]
    cdef int32_t[::1] big
    cdef int32_t* out = buf
    if k > 64:
        big = np.empty(k, dtype=np.int32)
        out = &big[0]
    positions_of(<const uint8_t*>PyBytes_AS_STRING(key), PyBytes_GET_SIZE(key), k, m, out)
    return [out[i] for i in range(k)]


def bit_positions_many(keys, int k, int32_t m):
    """Positions of a sequence of keys (str already valid UTF-8, or bytes) -> int32 (N, k).

    A ``None`` key gives a row of -1. Strings that ``str.encode`` would reject
    (lone surrogates) must be pre-encoded by the caller; ``bloom`` does that.
    """
    cdef Py_ssize_t n = len(keys), row
    cdef cnp.ndarray[int32_t, ndim=2] arr = np.empty((n, k), dtype=np.int32)
    cdef int32_t[:, ::1] out = arr
    cdef Py_ssize_t size
    cdef const char* p
    cdef int j
    for row in range(n):
        key = keys[row]
        if PyUnicode_Check(key):
            p = PyUnicode_AsUTF8AndSize(key, &size)
        elif PyBytes_Check(key):
            p = PyBytes_AS_STRING(key)
            size = PyBytes_GET_SIZE(key)
        elif key is None:
            for j in range(k):
                out[row, j] = -1
            continue
        else:
            raise TypeError(f"keys[{row}]: expected str, bytes or None, got {type(key).__name__}")
        positions_of(<const uint8_t*>p, size, k, m, &out[row, 0])
    return arr


cdef void _positions_buffers(const uint8_t* data, Py_ssize_t data_len, const int64_t[::1] offsets,
                             const uint8_t[::1] valid, bint has_valid, int k, int32_t m,
                             int32_t[:, ::1] out) noexcept nogil:
    cdef Py_ssize_t n = offsets.shape[0] - 1, row
    cdef int j
    for row in range(n):
        if has_valid and not valid[row]:
            for j in range(k):
                out[row, j] = -1
        else:
            positions_of(data + offsets[row], offsets[row + 1] - offsets[row], k, m, &out[row, 0])


def bit_positions_buffers(const uint8_t[::1] data not None, const int64_t[::1] offsets not None,
                          valid, int k, int32_t m):
    """Positions of the strings ``data[offsets[i]:offsets[i+1]]`` (Arrow layout) -> int32 (N, k).

    ``valid``: uint8/bool array, 0 marks a null key (row of -1); or None.
    Offsets are checked to be non-decreasing and inside ``data`` before the loop.
    """
    cdef Py_ssize_t n = offsets.shape[0] - 1
    if n < 0:
        raise ValueError("offsets must hold at least one entry")
    cdef cnp.ndarray[int32_t, ndim=2] arr = np.empty((n, k), dtype=np.int32)
    cdef int32_t[:, ::1] out = arr
    cdef const uint8_t[::1] valid_view = np.zeros(1, dtype=np.uint8)
    cdef bint has_valid = valid is not None
    cdef Py_ssize_t i
    cdef Py_ssize_t data_len = data.shape[0]
    if has_valid:
        valid_view = np.ascontiguousarray(valid).view(np.uint8)
        if valid_view.shape[0] < n:
            raise ValueError(f"validity has {valid_view.shape[0]} entries for {n} keys")
    for i in range(n):
        if offsets[i] < 0 or offsets[i + 1] < offsets[i] or offsets[i + 1] > data_len:
            raise ValueError(f"offsets[{i}:{i + 2}] = ({offsets[i]}, {offsets[i + 1]}) "
                             f"out of order or outside the {data_len}-byte data buffer")
    cdef const uint8_t* base = &data[0] if data_len else <const uint8_t*>b""
    with nogil:
        _positions_buffers(base, data_len, offsets, valid_view, has_valid, k, m, out)
    return arr


cdef void _is_hit_many(const uint8_t[:, ::1] bitmaps, const Py_ssize_t* idx, const uint8_t* mk,
                       Py_ssize_t nmask, uint8_t* out) noexcept nogil:
    cdef Py_ssize_t n = bitmaps.shape[0], row, j
    cdef Py_ssize_t i0, i1, i2
    cdef uint8_t m0, m1, m2, ok
    if nmask <= 3:
        # The broker's default k = 3: pad to three tests of a byte against itself.
        i0 = idx[0] if nmask > 0 else 0
        m0 = mk[0] if nmask > 0 else 0
        i1 = idx[1] if nmask > 1 else i0
        m1 = mk[1] if nmask > 1 else m0
        i2 = idx[2] if nmask > 2 else i0
        m2 = mk[2] if nmask > 2 else m0
        for row in range(n):
            out[row] = (((bitmaps[row, i0] & m0) == m0)
                        & ((bitmaps[row, i1] & m1) == m1)
                        & ((bitmaps[row, i2] & m2) == m2))
        return
    for row in range(n):
        ok = 1
        for j in range(nmask):
            ok &= (bitmaps[row, idx[j]] & mk[j]) == mk[j]
        out[row] = ok


def is_hit_many(const uint8_t[:, ::1] bitmaps not None, const Py_ssize_t[::1] byte_idx not None,
                const uint8_t[::1] masks not None):
    """For each row of ``bitmaps`` (N, nbytes): are all the masked bits set? -> bool (N,).

    ``byte_idx`` must already be checked to lie inside a row (``bloom`` does that).
    """
    cdef Py_ssize_t n = bitmaps.shape[0]
    cdef cnp.ndarray out = np.empty(n, dtype=np.bool_)
    cdef uint8_t[::1] out_view = out.view(np.uint8)
    cdef Py_ssize_t nmask = byte_idx.shape[0]
    if n == 0:
        return out
    if nmask == 0:
        out[:] = True
        return out
    with nogil:
        _is_hit_many(bitmaps, &byte_idx[0], &masks[0], nmask, &out_view[0])
    return out


def set_positions(uint8_t[::1] bits not None, const int32_t[:, ::1] positions not None):
    """OR every position of a (N, k) array into ``bits`` (rows of -1 are skipped).

    Positions must already be checked to lie inside ``bits``.
    """
    cdef Py_ssize_t row, j
    cdef int32_t p
    with nogil:
        for row in range(positions.shape[0]):
            for j in range(positions.shape[1]):
                p = positions[row, j]
                if p >= 0:
                    bits[p >> 3] |= <uint8_t>(1 << (p & 7))
