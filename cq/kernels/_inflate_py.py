"""Pure-Python twin of ``_inflate.pyx``: the zlib bodies of a decoded body column, inflated.
"""
from __future__ import annotations

import zlib

import numpy as np

from .. import format as fmt


def adler32_of(data):
    """Adler-32 of ``data`` as ``zlib.adler32`` gives it (the compiled engine checks inflated bodies with its own)."""
    return zlib.adler32(bytes(data))



#: The most bytes a body column may hold: int32 offsets.
_INT32_MAX = 0x7FFFFFFF


def inflate_bodies(offsets, data, sys_flag, max_bytes=_INT32_MAX):
    """The body column with every ``COMPRESSED_FLAG`` row of a zlib type inflated.

    Returns ``(offsets, data, rest)`` as the engine does: the new column and
    the int64 indices of the rows left to ``cq.readers.commitlog.decompress_body``
    (LZ4, ZSTD, unknown types, bodies that do not inflate), empty in the
    column. No compressed row: the inputs unchanged. OverflowError when the
    column would pass ``max_bytes`` (at most 2 GiB - 1), before inflating past it.
    """
    k = len(sys_flag)
    if len(offsets) != k + 1:
        raise ValueError(f"offsets must have len(sys_flag) + 1 = {k + 1} entries, got {len(offsets)}")
    o = offsets.astype(np.int64)
    bad = np.flatnonzero((o[:-1] < 0) | (o[1:] < o[:-1]) | (o[1:] > len(data)))
    if len(bad):
        raise ValueError(f"offsets out of order or outside the data of {len(data)} bytes at row {bad[0]}")
    flags = np.asarray(sys_flag, dtype=np.int32)
    if not (flags & fmt.COMPRESSED_FLAG).any():
        return offsets, data, np.zeros(0, dtype=np.int64)
    cap = max_bytes if 0 <= max_bytes < _INT32_MAX else _INT32_MAX
    overflow = OverflowError(f"the body column of {k} records passes {cap} bytes once decompressed"
                             f"{'' if cap < _INT32_MAX else ' (2 GiB, int32 offsets)'}: "
                             "decode fewer records at a time")
    raw = memoryview(np.ascontiguousarray(data)).cast("B")
    out: list[bytes] = []
    rest: list[int] = []
    size = 0
    for i, (a, b, flag) in enumerate(zip(o[:-1].tolist(), o[1:].tolist(), flags.tolist())):
        body = bytes(raw[a:b])
        if flag & fmt.COMPRESSED_FLAG:
            body = None  # left to decompress_body unless it inflates here
            if fmt.compression_type(flag) in fmt.ZLIB_COMPRESSION_TYPES:
                # bounded: never more than the column can still hold, whatever the body inflates to
                inflater = zlib.decompressobj()
                try:
                    got = inflater.decompress(raw[a:b], cap - size + 1)
                except zlib.error:
                    got = None
                if got is not None and size + len(got) > cap:
                    raise overflow
                if got is not None and inflater.eof:  # bytes after the stream's end are ignored
                    body = got
            if body is None:
                rest.append(i)
                body = b""
        size += len(body)
        if size > cap:
            raise overflow
        out.append(body)
    new_offsets = np.zeros(k + 1, dtype=np.int32)
    np.cumsum([len(b) for b in out], out=new_offsets[1:])
    return new_offsets, np.frombuffer(b"".join(out), dtype=np.uint8), np.array(rest, dtype=np.int64)
