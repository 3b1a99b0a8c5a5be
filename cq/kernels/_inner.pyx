"""Cython engine of the inner-batch split (twin: ``_inner_py.py``; docs/formats.md#inner-batch).

``split_inner`` walks the messages of a batch record's body without the GIL, twice: once to count
the messages that fit, once to write their spans; ``split_records`` does so for many bodies of one
buffer (a decoded body column). Every offset comes from cq/format.py through
``_layout.h``.
"""
import numpy as np

from libc.stdint cimport int16_t, int32_t, int64_t, uint8_t

from ._bytes cimport rmq_load_be16, rmq_load_be32
from ._layout cimport (RMQ_INNER_BODY_CRC, RMQ_INNER_BODY_LEN, RMQ_INNER_FLAG, RMQ_INNER_HEAD,
                       RMQ_INNER_PROPS_LEN_WIDTH, RMQ_INNER_TOTAL)

SPAN_COLUMNS = ("body_crc", "flag", "body_start", "body_len", "props_len")

DEF OK = 0
DEF SHORT = 1
DEF SIZE = 2
DEF PROPS = 3


cdef int _walk(const uint8_t* p, int64_t n, int64_t[:, ::1] out, int64_t* count, int64_t* at,
               int64_t* detail) noexcept nogil:
    # Walks the messages; writes their spans into out when it has rows. Returns the error kind,
    # with the messages that fit in count, the error's byte in at and its numbers in detail.
    cdef int64_t pos = 0, k = 0, end, props_at
    cdef int32_t size, body_len
    cdef int16_t props_len
    while pos < n:
        if n - pos < RMQ_INNER_HEAD + RMQ_INNER_PROPS_LEN_WIDTH:
            count[0], at[0], detail[0] = k, pos, n - pos
            return SHORT
        size = <int32_t>rmq_load_be32(p + pos + RMQ_INNER_TOTAL)
        body_len = <int32_t>rmq_load_be32(p + pos + RMQ_INNER_BODY_LEN)
        end = pos + size
        props_at = pos + RMQ_INNER_HEAD + <int64_t>body_len
        if (size < RMQ_INNER_HEAD + RMQ_INNER_PROPS_LEN_WIDTH or end > n or body_len < 0
                or props_at + RMQ_INNER_PROPS_LEN_WIDTH > end):
            count[0], at[0], detail[0], detail[1], detail[2] = k, pos, size, body_len, n - pos
            return SIZE
        props_len = <int16_t>rmq_load_be16(p + props_at)
        if props_len < 0 or props_at + RMQ_INNER_PROPS_LEN_WIDTH + props_len != end:
            count[0], at[0], detail[0], detail[1] = k, props_at, props_len, size
            return PROPS
        if out.shape[0] > k:
            out[k, 0] = <int32_t>rmq_load_be32(p + pos + RMQ_INNER_BODY_CRC)
            out[k, 1] = <int32_t>rmq_load_be32(p + pos + RMQ_INNER_FLAG)
            out[k, 2] = pos + RMQ_INNER_HEAD
            out[k, 3] = body_len
            out[k, 4] = props_len
        k += 1
        pos = end
    count[0], at[0] = k, -1
    return OK


def split_inner(const uint8_t[::1] body):
    """``(spans, error_pos, error)`` of the messages of an inner-batch body (uint8 array).

    ``spans`` is int64 (k, 5): each message's body CRC, flag, body start, body length and
    properties length (the properties follow the body and their 2-byte length); the messages up
    to the first that does not fit. ``error`` None, or what is wrong at byte ``error_pos``.
    """
    cdef int64_t n = body.shape[0], count = 0, at = -1
    cdef int64_t detail[3]
    cdef int kind
    cdef int64_t[:, ::1] none = np.zeros((0, 5), dtype=np.int64)
    cdef const uint8_t* p = &body[0] if n else NULL
    with nogil:
        kind = _walk(p, n, none, &count, &at, detail)
    spans = np.zeros((count, 5), dtype=np.int64)
    cdef int64_t[:, ::1] out = spans
    if count:
        with nogil:
            _walk(p, n, out, &count, &at, detail)
    return spans, at, _error_text(kind, detail)


cdef _error_text(int kind, int64_t* detail):
    if kind == SHORT:
        return (f"inner message of {detail[0]} bytes, shorter than its "
                f"{RMQ_INNER_HEAD + RMQ_INNER_PROPS_LEN_WIDTH}-byte head")
    if kind == SIZE:
        return (f"inner message size {detail[0]} (body {detail[1]} bytes) does not fit the "
                f"batch's {detail[2]} remaining bytes")
    if kind == PROPS:
        return f"inner message properties length {detail[0]} does not end the message (size {detail[1]})"
    return None


def split_records(const uint8_t[::1] buf, const int64_t[::1] starts, const int64_t[::1] lengths):
    """:func:`split_inner` of many inner-batch bodies at once: body ``i`` is
    ``buf[starts[i]:starts[i] + lengths[i]]``.

    Returns ``(spans, counts, bad, error_pos, error)``: ``spans`` int64 (m, 5) as
    :func:`split_inner`'s, every body's messages in order, body starts counted from the start of
    ``buf``; ``counts`` int64 (k,) the messages of each body. ``bad`` is -1, or the first body that
    does not split (``error`` at its byte ``error_pos``; ``spans`` then hold the bodies before it).
    """
    cdef Py_ssize_t i, k = starts.shape[0], bad = -1
    cdef int64_t n = buf.shape[0], count = 0, at = -1, total = 0, j, off = 0
    cdef int64_t detail[3]
    cdef int kind = OK
    if lengths.shape[0] != k:
        raise ValueError(f"{k} starts need {k} lengths, got {lengths.shape[0]}")
    for i in range(k):
        if starts[i] < 0 or lengths[i] < 0 or starts[i] + lengths[i] > n:
            raise ValueError(f"body {i} ({starts[i]}, {lengths[i]}) outside the buffer of {n} bytes")
    counts_a = np.zeros(k, dtype=np.int64)
    cdef int64_t[::1] counts = counts_a
    cdef int64_t[:, ::1] none = np.zeros((0, 5), dtype=np.int64)
    cdef const uint8_t* p = &buf[0] if n else NULL
    with nogil:
        for i in range(k):
            kind = _walk(p + starts[i], lengths[i], none, &count, &at, detail)
            if kind != OK:
                bad = i
                break
            counts[i] = count
            total += count
    spans = np.zeros((total, 5), dtype=np.int64)
    cdef int64_t[:, ::1] out = spans
    with nogil:
        for i in range(k if bad < 0 else bad):
            if counts[i]:
                _walk(p + starts[i], lengths[i], out[off:off + counts[i]], &count, &j, detail)
                for j in range(off, off + counts[i]):
                    out[j, 2] += starts[i]
                off += counts[i]
    return spans, counts_a, bad, at, _error_text(kind, detail)
