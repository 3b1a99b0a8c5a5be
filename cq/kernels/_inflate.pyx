"""Cython engine of body decompression: the body column as the consumer reads it (twin: ``_inflate_py.py``).

``inflate_bodies`` inflates each zlib-compressed body of a decoded column (``_decode.pyx``'s
layout) without the GIL, into pooled memory (``_pool.pxd``); the other codecs are left to
``cq.readers.commitlog.decompress_body`` (docs/data-path.md#bodies).
"""
import numpy as np

from libc.stdint cimport int32_t, int64_t, uint8_t, uint32_t
from libc.stdlib cimport free, realloc
from libc.string cimport memcpy, memset

from .. import format as fmt
from ._bytes cimport rmq_load_be32
from ._layout cimport (RMQ_COMPRESSED_FLAG, RMQ_COMPRESSION_TYPE_MASK, RMQ_COMPRESSION_TYPE_SHIFT,
                       RMQ_COMPRESSION_ZLIB, RMQ_COMPRESSION_ZLIB_LEGACY)
from ._pool cimport GBuf, _pool_get, _room, _take

cdef extern from "_adler32.h" nogil:
    void rmq_adler_init() noexcept                             # choose the AVX2 loop when the CPU has it (once)
    uint32_t rmq_adler32(const uint8_t* p, int64_t n) noexcept  # zlib's adler32 of n bytes

DEF INT32_MAX = 2147483647

rmq_adler_init()


def adler32_of(const uint8_t[::1] data):
    """Adler-32 of ``data`` as ``zlib.adler32`` gives it, by ``inflate_bodies``' own code (tests compare the two)."""
    if data.shape[0] == 0:
        return 1
    return rmq_adler32(&data[0], data.shape[0])


# ------------------------------------------------------------------ body decompression
# inflate_bodies: the body column as the consumer reads it (docs/data-path.md#bodies).

cdef extern from "zlib.h" nogil:
    ctypedef struct z_stream:
        uint8_t* next_in
        unsigned int avail_in
        uint8_t* next_out
        unsigned int avail_out
        const char* msg
        void* zalloc
        void* zfree
        void* opaque
    int Z_OK, Z_STREAM_END, Z_BUF_ERROR, Z_FINISH
    int inflateInit(z_stream* strm)
    int inflateInit2(z_stream* strm, int windowBits)
    int inflateReset(z_stream* strm)
    int inflate(z_stream* strm, int flush)
    int inflateEnd(z_stream* strm)

assert len(fmt.ZLIB_COMPRESSION_TYPES) == 2, "ZLIB_COMPRESSION_TYPES changed: update layout.py and inflate_bodies"
DEF INFLATE_FIRST = 65536      # first output room for a body: grown by doubling as output comes
cdef double _inflate_ratio = 0  # inflated bytes per compressed byte in the last inflate_bodies call


cdef int _inflate_into(z_stream* raw, z_stream* wrapped, GBuf* g, const uint8_t* src, int64_t n,
                       int64_t limit) noexcept nogil:
    # Inflate one zlib stream (RFC 1950) at the end of g: 0 done, 1 it does not inflate (the caller
    # leaves the row to decompress_body, which names the error), -1 no memory, -2 g would reach
    # ``limit`` bytes. Bytes after the end of the stream are ignored, as zlib.decompress ignores them.
    # The header every producer writes (deflate, 32 KiB window, no preset dictionary, header check
    # good) is read here and the deflate data inflated raw (``raw``: the same window), the trailer's
    # Adler-32 checked by rmq_adler32, faster than zlib's; any other header goes through ``wrapped``,
    # zlib's own header and check. Either way a body inflates iff zlib.decompress inflates it.
    cdef int got
    cdef int64_t start = g.n
    if n >= 2 and src[0] == 0x78 and (src[1] & 0x20) == 0 and ((<int32_t>src[0] << 8) | src[1]) % 31 == 0:
        got = _inflate_stream(raw, g, src + 2, n - 2, limit)
        if got != 0:
            return got
        if raw.avail_in < 4 or rmq_load_be32(raw.next_in) != rmq_adler32(g.p + start, g.n - start):
            return 1  # the trailer is cut short or the check fails: zlib would not inflate it either
        return 0
    return _inflate_stream(wrapped, g, src, n, limit)


cdef int _inflate_stream(z_stream* zs, GBuf* g, const uint8_t* src, int64_t n, int64_t limit) noexcept nogil:
    # Inflate ``src`` with ``zs`` (raw deflate or a zlib stream, as it was initialised) at the end
    # of g: _inflate_into's results.
    cdef int ret, got
    cdef int64_t free_room, take
    if n > INT32_MAX or inflateReset(zs) != Z_OK:  # a body column never holds more
        return 1
    zs.next_in = <uint8_t*>src  # zlib only reads it (its z_const is empty by default)
    zs.avail_in = <unsigned int>n
    while True:
        free_room = g.cap - g.n
        if free_room == 0:
            # trust nothing about the final size (a small body may inflate to gigabytes): room
            # grows only as output actually comes, and never to the limit
            if g.n >= limit:
                return -2
            got = _room(g, INFLATE_FIRST if g.cap < INFLATE_FIRST else g.cap, limit)
            if got == -2:
                got = _room(g, limit - g.n, limit)
            if got < 0:
                return got
            free_room = g.cap - g.n
        take = free_room if free_room < 0x40000000 else 0x40000000
        zs.next_out = g.p + g.n
        zs.avail_out = <unsigned int>take
        # Z_FINISH: all the input is there, so zlib keeps no copy of the output as its window
        # when the stream ends in this call (with Z_NO_FLUSH it copied up to 32 KiB a body)
        ret = inflate(zs, Z_FINISH)
        g.n += take - zs.avail_out
        if ret == Z_STREAM_END:
            return 0
        if ret == Z_BUF_ERROR and zs.avail_out == 0:
            continue  # the room is full: more room, and the stream goes on from its window
        # a data error, a dictionary it was not given, or a stream cut short (the input ended
        # with room left)
        return 1


def inflate_bodies(offsets, data, sys_flag, int64_t max_bytes=INT32_MAX):
    """The body column with every ``COMPRESSED_FLAG`` row of a zlib type inflated (GIL released).

    ``offsets`` int32 (k + 1) and ``data`` uint8 are a body column
    (``decode_columns``' layout), ``sys_flag`` the rows' int32 SYSFLAG.
    Returns ``(offsets, data, rest)``: the new column (offsets from 0) and
    the int64 indices of the rows it leaves to Python, empty there: LZ4 and
    ZSTD rows, unknown types and bodies that do not inflate (so the one rule,
    ``cq.readers.commitlog.decompress_body``, decodes them or names the error). With
    no compressed row the inputs come back unchanged (no copy). Raises
    OverflowError when the new column would pass ``max_bytes`` (at most, and
    by default, 2 GiB - 1: int32 offsets), before allocating past it.
    """
    global _inflate_ratio
    cdef const int32_t[::1] off = offsets
    cdef const uint8_t[::1] src = data
    cdef const int32_t[::1] sf = sys_flag
    cdef Py_ssize_t i, k = sf.shape[0]
    cdef int64_t compressed = 0, a, e, nrest = 0, size = src.shape[0], zbytes = 0, want
    cdef int32_t ct
    cdef int fail = 0, got
    cdef int bad_offsets = 0
    cdef GBuf g
    cdef z_stream zs, zw
    cdef uint8_t* shrunk
    cdef int64_t limit = (max_bytes if 0 <= max_bytes < INT32_MAX else INT32_MAX) + 1
    if off.shape[0] != k + 1:
        raise ValueError(f"offsets must have len(sys_flag) + 1 = {k + 1} entries, got {off.shape[0]}")
    with nogil:
        for i in range(k):
            if off[i] < 0 or off[i + 1] < off[i] or off[i + 1] > size:
                bad_offsets = 1
                break
            if sf[i] & RMQ_COMPRESSED_FLAG:
                compressed += 1
                zbytes += off[i + 1] - off[i]
    if bad_offsets:
        raise ValueError(f"offsets out of order or outside the data of {size} bytes at row {i}")
    empty_rest = np.zeros(0, dtype=np.int64)
    if compressed == 0:
        return offsets, data, empty_rest
    new_offsets = np.zeros(k + 1, dtype=np.int32)
    rest = np.empty(compressed, dtype=np.int64)
    cdef int32_t[::1] o = new_offsets
    cdef int64_t[::1] r = rest
    cdef const uint8_t* s = &src[0] if size else NULL
    memset(&g, 0, sizeof(GBuf))
    memset(&zs, 0, sizeof(z_stream))
    memset(&zw, 0, sizeof(z_stream))
    if inflateInit2(&zs, -15) != Z_OK:  # raw deflate, 32 KiB window
        raise MemoryError()
    if inflateInit(&zw) != Z_OK:
        inflateEnd(&zs)
        raise MemoryError()
    # output memory from the pool (pages already faulted in), sized for the uncompressed rows and
    # the compressed ones inflated as much as last time (room that doubles as output comes copies
    # what it holds)
    want = <int64_t>((size - zbytes) + zbytes * _inflate_ratio * 1.125)
    want = want if want > size else size
    want = want if want < limit else limit - 1
    _pool_get(&g, want)
    try:
        with nogil:
            got = _room(&g, want, limit)
            if got == -1 and want > size:  # the guess is only a guess: no room for it, no failure
                got = _room(&g, size, limit)
            if got < 0:
                fail = got
            for i in range(k):
                if fail:
                    break
                a = off[i]
                e = off[i + 1]
                if not sf[i] & RMQ_COMPRESSED_FLAG:
                    got = _room(&g, e - a, limit)
                    if got < 0:
                        fail = got
                        break
                    if e > a:
                        memcpy(g.p + g.n, s + a, e - a)
                    g.n += e - a
                else:
                    ct = (sf[i] & RMQ_COMPRESSION_TYPE_MASK) >> RMQ_COMPRESSION_TYPE_SHIFT
                    got = 1
                    if ct == RMQ_COMPRESSION_ZLIB or ct == RMQ_COMPRESSION_ZLIB_LEGACY:
                        a = g.n
                        got = _inflate_into(&zs, &zw, &g, s + off[i], e - off[i], limit)
                        if got < 0:
                            fail = got
                            break
                        if got == 1:
                            g.n = a  # what it inflated before failing is dropped
                    if got == 1:
                        r[nrest] = i
                        nrest += 1
                if g.n >= limit:
                    fail = -2
                    break
                o[i + 1] = <int32_t>g.n
        if fail == -1:
            raise MemoryError()
        if fail == -2:
            raise OverflowError(f"the body column of {k} records passes {limit - 1} bytes once decompressed"
                                f"{'' if limit - 1 < INT32_MAX else ' (2 GiB, int32 offsets)'}: "
                                "decode fewer records at a time")
        _inflate_ratio = <double>(g.n - (size - zbytes)) / zbytes if zbytes else 0
        if g.n and g.cap > g.n + 65536 and g.cap > g.n + g.n // 4:
            # give back most of the room the doubling left over (realloc to 0 frees); a pooled
            # buffer sized by the last rate keeps its slack, for the next batch
            shrunk = <uint8_t*>realloc(g.p, g.n)
            if shrunk != NULL:
                g.p = shrunk
                g.cap = g.n
        out = _take(&g, np.uint8, g.n)
    finally:
        inflateEnd(&zs)
        inflateEnd(&zw)
        free(g.p)
    return new_offsets, out, rest[:nrest]
