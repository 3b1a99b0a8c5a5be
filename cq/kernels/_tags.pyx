"""Cython engine of the broker's tag hash code (twin: ``cq/_tags_py.py``)."""
import numpy as np

cimport numpy as cnp
from libc.stdint cimport int32_t, int64_t, uint8_t, uint32_t

cnp.import_array()


cdef inline uint32_t _fold_str(str s):
    cdef uint32_t h = 0, u
    cdef Py_UCS4 c
    for c in s:
        u = <uint32_t>c
        if u > 0xFFFF:
            u -= 0x10000
            h = 31 * h + (0xD800 + (u >> 10))
            h = 31 * h + (0xDC00 + (u & 0x3FF))
        else:
            h = 31 * h + u
    return h


def tags_code(tag):
    """Tag hash code of one TAGS string (None or "" -> 0)."""
    if tag is None:
        return 0
    if not isinstance(tag, str):
        raise TypeError(f"tags_code() expects str or None, got {type(tag).__name__}")
    return <int32_t>_fold_str(tag)


def tags_code_many_str(tags):
    """Tag hash codes of a sequence of str/None -> int32 ndarray."""
    cdef Py_ssize_t i, n = len(tags)
    out = np.empty(n, dtype=np.int32)
    cdef int32_t[::1] o = out
    for i in range(n):
        tag = tags[i]
        if tag is None:
            o[i] = 0
        elif isinstance(tag, str):
            o[i] = <int32_t>_fold_str(<str>tag)
        else:
            raise TypeError(f"tags_code_many() item {i} is {type(tag).__name__}, expected str or None")
    return out


cdef inline uint32_t _fold_utf8(const uint8_t* p, int64_t n) noexcept nogil:
    # Arrow strings are valid UTF-8; decode code points, fold UTF-16 units.
    cdef uint32_t h = 0, c
    cdef int64_t i = 0
    cdef uint8_t b
    while i < n:
        b = p[i]
        if b < 0x80:
            c = b
            i += 1
        elif b < 0xE0:
            c = ((b & 0x1F) << 6) | (p[i + 1] & 0x3F) if i + 1 < n else 0xFFFD
            i += 2
        elif b < 0xF0:
            c = (((b & 0x0F) << 12) | ((p[i + 1] & 0x3F) << 6) | (p[i + 2] & 0x3F)) if i + 2 < n else 0xFFFD
            i += 3
        else:
            c = (((b & 0x07) << 18) | ((p[i + 1] & 0x3F) << 12) | ((p[i + 2] & 0x3F) << 6)
                 | (p[i + 3] & 0x3F)) if i + 3 < n else 0xFFFD
            i += 4
        if c > 0xFFFF:
            c -= 0x10000
            h = 31 * h + (0xD800 + (c >> 10))
            h = 31 * h + (0xDC00 + (c & 0x3FF))
        else:
            h = 31 * h + c
    return h


def tags_code_many_utf8(const int64_t[::1] offsets, const uint8_t[::1] data, const uint8_t[::1] valid):
    """Tag hash codes of an Arrow-style string column (offsets N+1, UTF-8 data, validity N)."""
    cdef Py_ssize_t n = offsets.shape[0] - 1
    if n < 0 or valid.shape[0] < n:
        raise ValueError("offsets must have N + 1 entries and valid N")
    cdef Py_ssize_t i
    for i in range(n):
        if offsets[i] < 0 or offsets[i + 1] < offsets[i] or offsets[i + 1] > data.shape[0]:
            raise ValueError(f"string offsets out of range at item {i}")
    out = np.zeros(n, dtype=np.int32)
    cdef int32_t[::1] o = out
    cdef const uint8_t* base = &data[0] if data.shape[0] else NULL
    with nogil:
        for i in range(n):
            if valid[i] and offsets[i + 1] > offsets[i]:
                o[i] = <int32_t>_fold_utf8(base + offsets[i], offsets[i + 1] - offsets[i])
    return out
