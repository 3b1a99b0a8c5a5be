"""Cython engine of the ConsumeQueue unit scans (twin: ``_tagscan_py.py``).

``scan_tags`` reads each 20-byte unit's tag-code word (offsets from cq/format.py, through
``_layout.h``) without the GIL and keeps the units whose low 32 bits are in the code set;
``data_end`` finds the unit that ends a queue's data.
"""
import numpy as np

from libc.stdint cimport int32_t, int64_t, uint8_t, uint32_t, uint64_t
from libc.stdlib cimport free, malloc, realloc
from libc.string cimport memcpy, memset

from ._bytes cimport rmq_bswap32, rmq_load_be32, rmq_load_be64, rmq_load_raw32
from ._layout cimport RMQ_CQ_PHYS, RMQ_CQ_SIZE, RMQ_CQ_TAG_LOW, RMQ_CQ_UNIT_SIZE

DEF SCAN_BLOCK = 2048     # units per branch-free candidate pass (16 KiB of candidates on the stack)


cdef struct CodeSet:
    uint32_t small[4]     # n <= 4: compared branch-free (padded with the first code)
    int n
    uint64_t pre[256]      # 16384-bit prefilter of the code set (2 KiB, stays in L1)
    uint32_t* keys        # open addressing, 0-slot marked by used[]
    uint8_t* used
    uint32_t mask
    uint32_t shift        # 32 - log2(table size): the table index is the product's top bits


cdef inline uint32_t _mix(uint32_t x) noexcept nogil:
    # x is the raw (byte-swapped) word: swap it back first, so that codes that
    # differ only in their low bits -- tags like "Tag_1", "Tag_2", whose Java
    # hash codes are consecutive -- differ in the product's top bits, which
    # the prefilter and the table index read. Without the swap such codes
    # shared prefilter bits and table buckets (64 codes: 6 GB/s instead of 12).
    return rmq_bswap32(x) * <uint32_t>2654435761u


cdef int _codeset_init(CodeSet* cs, const int32_t[::1] codes) except -1:
    cdef Py_ssize_t i, n = codes.shape[0]
    cdef uint32_t size = 256, h, x
    while size < 4 * <uint32_t>n:
        size *= 2
    cs.n = <int>n
    cs.mask = size - 1
    cs.shift = 32
    while (<uint32_t>1 << (32 - cs.shift)) < size:
        cs.shift -= 1
    memset(cs.pre, 0, sizeof(cs.pre))
    cs.keys = <uint32_t*>malloc(size * sizeof(uint32_t))
    cs.used = <uint8_t*>malloc(size)
    if cs.keys == NULL or cs.used == NULL:
        free(cs.keys); free(cs.used)
        raise MemoryError()
    memset(cs.used, 0, size)
    for i in range(4):
        cs.small[i] = rmq_bswap32(<uint32_t>codes[i if i < n else 0]) if n else 0
    for i in range(n):
        x = rmq_bswap32(<uint32_t>codes[i])
        h = _mix(x)
        cs.pre[(h >> 18) >> 6] |= (<uint64_t>1) << ((h >> 18) & 63)
        h = h >> cs.shift
        while cs.used[h] and cs.keys[h] != x:
            h = (h + 1) & cs.mask
        cs.used[h] = 1
        cs.keys[h] = x
    return 0


cdef inline uint32_t _pre(const CodeSet* cs, uint32_t x) noexcept nogil:
    cdef uint32_t h = _mix(x) >> 18
    return <uint32_t>(cs.pre[h >> 6] >> (h & 63)) & 1


cdef inline bint _codeset_has(const CodeSet* cs, uint32_t x) noexcept nogil:
    cdef uint32_t h = _mix(x)
    if not (cs.pre[(h >> 18) >> 6] >> ((h >> 18) & 63)) & 1:
        return 0
    h = h >> cs.shift
    while cs.used[h]:
        if cs.keys[h] == x:
            return 1
        h = (h + 1) & cs.mask
    return 0


cdef int64_t _push(int64_t** out, int64_t* cap, int64_t count, int64_t value) noexcept nogil:
    cdef int64_t* grown
    if count == cap[0]:
        grown = <int64_t*>realloc(out[0], 2 * cap[0] * sizeof(int64_t))
        if grown == NULL:
            return -1
        out[0] = grown
        cap[0] *= 2
    out[0][count] = value
    return count + 1


def scan_tags(const uint8_t[::1] units, const int32_t[::1] codes):
    """Indices (int64) of the 20-byte big-endian units whose low 32 tag-code bits are in ``codes``."""
    cdef int64_t n = units.shape[0] // RMQ_CQ_UNIT_SIZE
    cdef CodeSet cs
    cdef int64_t i, count = 0, cap = 4096
    cdef int64_t* out
    cdef const uint8_t* p
    cdef uint32_t x, a, b, c, d
    cdef int64_t j, blk, stop, nc
    cdef int64_t cand[SCAN_BLOCK]
    cdef bint fail = 0, dense
    if codes.shape[0] == 0 or n == 0:
        return np.zeros(0, dtype=np.int64)
    _codeset_init(&cs, codes)
    out = <int64_t*>malloc(cap * sizeof(int64_t))
    if out == NULL:
        free(cs.keys); free(cs.used)
        raise MemoryError()
    p = &units[0]
    with nogil:
        # Keys hold the raw in-memory words (codes byte-swapped once), so the
        # loop compares and hashes the loaded word without swapping it. Each
        # block collects candidates (prefilter or small-set hits); where they
        # are frequent the pass is branch-free (index always written, count
        # advanced by the test) so no hit rate costs mispredictions; the exact
        # table check then runs on the candidates only.
        blk = 0
        dense = 0
        while blk < n and not fail:
            stop = blk + SCAN_BLOCK if blk + SCAN_BLOCK < n else n
            nc = 0
            if cs.n <= 4:
                a, b, c, d = cs.small[0], cs.small[1], cs.small[2], cs.small[3]
                if dense:
                    for i in range(blk, stop):
                        x = rmq_load_raw32(p + i * RMQ_CQ_UNIT_SIZE + RMQ_CQ_TAG_LOW)
                        cand[nc] = i
                        nc += (x == a) | (x == b) | (x == c) | (x == d)
                else:
                    for i in range(blk, stop):
                        x = rmq_load_raw32(p + i * RMQ_CQ_UNIT_SIZE + RMQ_CQ_TAG_LOW)
                        if (x == a) | (x == b) | (x == c) | (x == d):
                            cand[nc] = i
                            nc += 1
                for j in range(nc):
                    count = _push(&out, &cap, count, cand[j])
                    if count < 0:
                        fail = 1
                        break
            else:
                if dense:
                    for i in range(blk, stop):
                        x = rmq_load_raw32(p + i * RMQ_CQ_UNIT_SIZE + RMQ_CQ_TAG_LOW)
                        cand[nc] = i
                        nc += _pre(&cs, x)
                else:
                    for i in range(blk, stop):
                        x = rmq_load_raw32(p + i * RMQ_CQ_UNIT_SIZE + RMQ_CQ_TAG_LOW)
                        if _pre(&cs, x):
                            cand[nc] = i
                            nc += 1
                for j in range(nc):
                    if _codeset_has(&cs, rmq_load_raw32(p + cand[j] * RMQ_CQ_UNIT_SIZE + RMQ_CQ_TAG_LOW)):
                        count = _push(&out, &cap, count, cand[j])
                        if count < 0:
                            fail = 1
                            break
            # branch-free when candidates are frequent enough to make a branch
            # mispredict often (> 1/32 of the block), branchy when they are rare
            dense = nc * 32 > stop - blk
            blk = stop
    free(cs.keys); free(cs.used)
    if fail:
        free(out)
        raise MemoryError()
    result = np.empty(count, dtype=np.int64)
    cdef int64_t[::1] r = result
    if count:
        memcpy(&r[0], out, count * sizeof(int64_t))
    free(out)
    return result



def data_end(const uint8_t[::1] units):
    """How many of the 20-byte big-endian ``units`` come before the first that ends a queue's data in the
    broker's recovery (``commit_log_offset < 0`` or ``size <= 0``, docs/formats.md#consumequeue): all of
    them when none does. Reads no unit past that one."""
    cdef Py_ssize_t i, n = units.shape[0] // RMQ_CQ_UNIT_SIZE
    cdef const uint8_t* p
    if n == 0:
        return 0
    p = &units[0]
    with nogil:
        for i in range(n):
            if (<int64_t>rmq_load_be64(p + RMQ_CQ_PHYS) < 0
                    or <int32_t>rmq_load_be32(p + RMQ_CQ_SIZE) <= 0):
                break
            p += RMQ_CQ_UNIT_SIZE
        else:
            i = n
    return i
