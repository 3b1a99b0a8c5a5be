# Growable output buffers and the pool of freed ones (_pool.pyx), shared by the decoder
# (_decode.pyx) and the inflater (_inflate.pyx). The buffer operations are inline (each
# module compiles its own, on the hot path); the pool is touched with the GIL held.
from libc.stdint cimport int32_t, int64_t, uint8_t
from libc.stdlib cimport realloc
from libc.string cimport memcpy


cdef struct GBuf:
    uint8_t* p      # the bytes (malloc'd), NULL before the first growth
    int64_t n       # bytes written
    int64_t cap     # bytes allocated at p


cdef inline int _room(GBuf* g, int64_t need, int64_t limit) noexcept nogil:
    # At least ``need`` bytes free (doubling, capped at ``limit`` in total): 0, -1 no memory, -2 too big.
    cdef int64_t cap
    cdef uint8_t* q
    if g.n + need <= g.cap:
        return 0
    if g.n + need > limit:
        return -2
    cap = g.cap * 2 if g.cap else 4096
    if cap < g.n + need:
        cap = g.n + need
    if cap > limit:
        cap = limit
    q = <uint8_t*>realloc(g.p, cap)
    if q == NULL:
        return -1
    g.p = q
    g.cap = cap
    return 0


cdef inline int _reserve(GBuf* g, int64_t extra) noexcept nogil:
    # At least ``extra`` bytes free: 0, or -1 when out of memory (one growth rule: _room's).
    return _room(g, extra, 0x7FFFFFFFFFFFFFFF)


cdef inline void _reserve_rows(GBuf* g, int64_t done, int64_t rows) noexcept nogil:
    # After ``done`` of ``rows`` rows: grow ``g`` once to the bytes the rest will take at
    # this rate, plus an eighth (a miss only means the usual doubling later).
    cdef int64_t need
    cdef uint8_t* q
    if done <= 0 or g.n == 0:
        return
    need = g.n + (g.n // done) * (rows - done) * 9 // 8 + 4096
    if need <= g.cap:
        return
    q = <uint8_t*>realloc(g.p, need)
    if q != NULL:  # out of memory here is not an error: the row-by-row growth reports it
        g.p = q
        g.cap = need


cdef inline int _put(GBuf* g, const uint8_t* s, int64_t n) noexcept nogil:
    # Append ``n`` bytes: 0, or -1 when out of memory.
    if _reserve(g, n) < 0:
        return -1
    if n:
        memcpy(g.p + g.n, s, n)
    g.n += n
    return 0


cdef inline int _put_i32(GBuf* g, int32_t v) noexcept nogil:
    # Append an int32 in the machine's order (an Arrow offset): 0, or -1 when out of memory.
    if _reserve(g, 4) < 0:
        return -1
    memcpy(g.p + g.n, &v, 4)
    g.n += 4
    return 0


# The pool (GIL held). Buffers smaller than 64 KiB, or past the pool's 128 MiB, are freed.
cdef void _pool_put(void* p, int64_t cap) except *            # keep (or free) a buffer of ``cap`` bytes; NULL: nothing
cdef void _pool_get(GBuf* g, int64_t want) except *           # give the empty ``g`` the best-fitting pooled buffer, if any
cdef object _take(GBuf* g, object dtype, int64_t count)       # g's bytes as a numpy array owning them (back to the pool when freed); g emptied
cdef object _pooled_zeros(int64_t count, object dtype)        # np.zeros(count, dtype), in a pooled buffer when one fits
