"""Pure-Python twin of ``_inner.pyx``: the split of an inner-batch body into its messages,
name for name and result for result (docs/formats.md#inner-batch)."""
from __future__ import annotations

import numpy as np

from .. import format as fmt

#: The columns of :func:`split_inner`'s spans.
SPAN_COLUMNS = ("body_crc", "flag", "body_start", "body_len", "props_len")

_HEAD = fmt.INNER_MESSAGE_HEAD_STRUCT
_PLEN = fmt.INNER_PROPERTIES_LENGTH_STRUCT


def split_inner(body):
    """``(spans, error_pos, error)`` of the messages of an inner-batch body (uint8 array).

    ``spans`` is int64 (k, 5): each message's body CRC, flag, body start, body length and
    properties length (the properties follow the body and their 2-byte length); the messages up
    to the first that does not fit. ``error`` None, or what is wrong at byte ``error_pos``.
    """
    buf = memoryview(body).cast("B")
    n = len(buf)
    rows, pos = [], 0
    while pos < n:
        if n - pos < _HEAD.size + _PLEN.size:
            return _spans(rows), pos, (f"inner message of {n - pos} bytes, shorter than its "
                                       f"{_HEAD.size + _PLEN.size}-byte head")
        size, _magic, crc, flag, body_len = _HEAD.unpack_from(buf, pos)
        end = pos + size
        props_at = pos + _HEAD.size + body_len
        if size < _HEAD.size + _PLEN.size or end > n or body_len < 0 or props_at + _PLEN.size > end:
            return _spans(rows), pos, (f"inner message size {size} (body {body_len} bytes) does not fit the "
                                       f"batch's {n - pos} remaining bytes")
        props_len = _PLEN.unpack_from(buf, props_at)[0]
        if props_len < 0 or props_at + _PLEN.size + props_len != end:
            return _spans(rows), props_at, (f"inner message properties length {props_len} does not end the "
                                            f"message (size {size})")
        rows.append((crc, flag, pos + _HEAD.size, body_len, props_len))
        pos = end
    return _spans(rows), -1, None


def split_records(buf, starts, lengths):
    """:func:`split_inner` of many inner-batch bodies at once: body ``i`` is
    ``buf[starts[i]:starts[i] + lengths[i]]``; ``(spans, counts, bad, error_pos, error)`` as the
    engine's (body starts counted from the start of ``buf``)."""
    n, k = len(buf), len(starts)
    if len(lengths) != k:
        raise ValueError(f"{k} starts need {k} lengths, got {len(lengths)}")
    for i, (a, m) in enumerate(zip(starts.tolist(), lengths.tolist())):
        if a < 0 or m < 0 or a + m > n:
            raise ValueError(f"body {i} ({a}, {m}) outside the buffer of {n} bytes")
    parts, counts = [], np.zeros(k, dtype=np.int64)
    for i, (a, m) in enumerate(zip(starts.tolist(), lengths.tolist())):
        spans, at, error = split_inner(buf[a:a + m])
        if error is not None:
            return _joined(parts), counts, i, at, error
        spans[:, 2] += a
        parts.append(spans)
        counts[i] = len(spans)
    return _joined(parts), counts, -1, -1, None


def _joined(parts):
    return np.concatenate(parts) if parts else _spans([])


def _spans(rows):
    return np.array(rows, dtype=np.int64).reshape(len(rows), len(SPAN_COLUMNS))
