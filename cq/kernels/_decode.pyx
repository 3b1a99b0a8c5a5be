"""Cython engine of the ConsumeQueue / ext / CommitLog scan kernels (twin: ``cq/_scan_py.py``).

Every kernel takes a uint8 buffer (one mapped file, or a slice of one) and
byte positions inside it; the loops run without the GIL over typed
memoryviews. Inputs are validated here, at the boundary: the build turns
bounds checking off.
"""
import numpy as np

cimport numpy as cnp
from libc.stdint cimport int8_t, int16_t, int32_t, int64_t, uint8_t, uint16_t, uint32_t, uint64_t
from libc.stdlib cimport calloc, free, malloc, realloc
from cpython.bytes cimport PyBytes_FromStringAndSize
from cpython.unicode cimport PyUnicode_DecodeUTF8
from cpython.object cimport PyObject, PyTypeObject
from cpython.ref cimport Py_INCREF, Py_XDECREF
from libc.string cimport memchr, memcmp, memcpy, memset
from posix.unistd cimport pread

from . import format as fmt

cnp.import_array()

cdef extern from "arpa/inet.h" nogil:
    const char* inet_ntop(int af, const void* src, char* dst, unsigned int size)

cdef extern from "sys/socket.h" nogil:
    int AF_INET6

cdef extern from "zlib.h" nogil:
    unsigned long crc32(unsigned long crc, const unsigned char* buf, unsigned int len)

# The store's constants, from their one home (cq/format.py), as C values the
# nogil loops compare with.
cdef int32_t MAGIC_V1 = fmt.MESSAGE_MAGIC_CODE_V1
cdef int32_t MAGIC_V2 = fmt.MESSAGE_MAGIC_CODE_V2
cdef int32_t MAGIC_BLANK = fmt.BLANK_MAGIC_CODE
cdef int32_t BORN_V6 = fmt.BORNHOST_V6_FLAG
cdef int32_t STORE_V6 = fmt.STOREHOSTADDRESS_V6_FLAG
cdef int32_t MIN_RECORD = fmt.RECORD_V1_IPV4_OVERHEAD
cdef int64_t C_MAX_ADDR = fmt.MAX_ADDR
cdef int64_t EXT_HEAD = fmt.MIN_EXT_UNIT_SIZE  # an ext unit's bytes before its bitmap
cdef uint8_t NAME_VALUE_SEP = ord(fmt.NAME_VALUE_SEPARATOR)
cdef uint8_t PROPERTY_SEP = ord(fmt.PROPERTY_SEPARATOR)
cdef bytes _TAGS_NAME = fmt.PROPERTY_TAGS.encode()
cdef bytes _KEYS_NAME = fmt.PROPERTY_KEYS.encode()
cdef const char* TAGS_NAME = _TAGS_NAME
cdef const char* KEYS_NAME = _KEYS_NAME
cdef int64_t TAGS_LEN = len(_TAGS_NAME)
assert NAME_VALUE_SEP < 0x7F and PROPERTY_SEP < 0x7F
# every byte of a word, set to one past the larger separator: the SWAR scan of ASCII text for them
cdef uint64_t SEP_BOUND = 0x0101010101010101ULL * (max(NAME_VALUE_SEP, PROPERTY_SEP) + 1)
cdef int64_t KEYS_LEN = len(_KEYS_NAME)

cdef extern from *:
    """
    static inline uint32_t rmq_load_be32(const uint8_t* p) {
        uint32_t v; memcpy(&v, p, 4); return __builtin_bswap32(v);
    }
    static inline uint16_t rmq_load_be16(const uint8_t* p) {
        uint16_t v; memcpy(&v, p, 2); return __builtin_bswap16(v);
    }
    static inline uint64_t rmq_load_be64(const uint8_t* p) {
        uint64_t v; memcpy(&v, p, 8); return __builtin_bswap64(v);
    }
    /* the 8 bytes at p with the first in the low byte, whatever the machine's order */
    static inline uint64_t rmq_load_le64(const uint8_t* p) {
        uint64_t v; memcpy(&v, p, 8);
    #if __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
        v = __builtin_bswap64(v);
    #endif
        return v;
    }
    static inline uint32_t rmq_load_raw32(const uint8_t* p) {
        uint32_t v; memcpy(&v, p, 4); return v;
    }
    static inline uint32_t rmq_bswap32(uint32_t v) { return __builtin_bswap32(v); }
    static inline int rmq_ctz64(uint64_t v) { return __builtin_ctzll(v); }
    static inline void rmq_prefetch(const void* p) { __builtin_prefetch(p, 0, 3); }

    /* CRC-32 (zlib's: reflected polynomial 0xEDB88320) eight bytes a step, for the short
       bodies where a call into zlib costs more than the bytes (the recovery walk checks
       one per record). Tables are filled once by rmq_crc_init. */
    static uint32_t rmq_crc_tab[8][256];
    static void rmq_crc_init(void) {
        for (uint32_t n = 0; n < 256; n++) {
            uint32_t c = n;
            for (int k = 0; k < 8; k++) c = (c & 1) ? 0xEDB88320u ^ (c >> 1) : c >> 1;
            rmq_crc_tab[0][n] = c;
        }
        for (uint32_t n = 0; n < 256; n++) {
            uint32_t c = rmq_crc_tab[0][n];
            for (int k = 1; k < 8; k++) { c = rmq_crc_tab[0][c & 0xff] ^ (c >> 8); rmq_crc_tab[k][n] = c; }
        }
    }
    /* Adler-32 (RFC 1950, zlib's adler32), for the check of a zlib body inflated raw
       (inflate_bodies). zlib's own loop takes a byte a step; with AVX2 a step takes 32:
       for chunk c of S in a block, byte j (0..31) weighs 32 * (S - 1 - c) + (32 - j) in
       s2, so s2 grows by 32 * (the sum of each chunk's preceding byte sums) plus the
       byte sums weighted 32..1. Blocks of at most 5552 bytes (zlib's NMAX) keep every
       32-bit lane below overflow before the modulo. */
    #define RMQ_ADLER_BASE 65521u
    #define RMQ_ADLER_NMAX 5552
    #if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
    #include <immintrin.h>
    #define RMQ_ADLER_AVX2 1
    static int rmq_have_avx2 = 0;
    __attribute__((target("avx2")))
    static uint32_t rmq_adler32_avx2(uint32_t s1, uint32_t s2, const uint8_t* p, int64_t n, int64_t* done) {
        const __m256i zero = _mm256_setzero_si256();
        const __m256i ones = _mm256_set1_epi16(1);
        const __m256i weights = _mm256_setr_epi8(32, 31, 30, 29, 28, 27, 26, 25, 24, 23, 22, 21, 20, 19, 18, 17,
                                                 16, 15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1);
        int64_t start = n;
        uint32_t lanes[8];
        while (n >= 32) {
            int64_t block = (n < RMQ_ADLER_NMAX ? n : RMQ_ADLER_NMAX) & ~(int64_t)31;
            __m256i v1 = zero, v1_before = zero, v2 = zero;
            n -= block;
            uint64_t s2_64 = (uint64_t)s2 + (uint64_t)block * s1;
            for (int64_t i = 0; i < block; i += 32) {
                __m256i d = _mm256_loadu_si256((const __m256i*)(p + i));
                v1_before = _mm256_add_epi32(v1_before, v1);
                v1 = _mm256_add_epi32(v1, _mm256_sad_epu8(d, zero));
                v2 = _mm256_add_epi32(v2, _mm256_madd_epi16(_mm256_maddubs_epi16(d, weights), ones));
            }
            p += block;
            uint64_t sum1 = 0, before = 0, sum2 = 0;
            _mm256_storeu_si256((__m256i*)lanes, v1);
            for (int k = 0; k < 8; k++) sum1 += lanes[k];
            _mm256_storeu_si256((__m256i*)lanes, v1_before);
            for (int k = 0; k < 8; k++) before += lanes[k];
            _mm256_storeu_si256((__m256i*)lanes, v2);
            for (int k = 0; k < 8; k++) sum2 += lanes[k];
            s1 = (uint32_t)((s1 + sum1) % RMQ_ADLER_BASE);
            s2 = (uint32_t)((s2_64 + 32 * before + sum2) % RMQ_ADLER_BASE);
        }
        *done = start - n;
        return (s2 << 16) | s1;
    }
    #endif
    static void rmq_adler_init(void) {
    #ifdef RMQ_ADLER_AVX2
        __builtin_cpu_init();
        rmq_have_avx2 = __builtin_cpu_supports("avx2");
    #endif
    }
    static uint32_t rmq_adler32(const uint8_t* p, int64_t n) {
        uint32_t s1 = 1, s2 = 0;
    #ifdef RMQ_ADLER_AVX2
        if (rmq_have_avx2 && n >= 32) {
            int64_t done;
            uint32_t a = rmq_adler32_avx2(s1, s2, p, n, &done);
            s1 = a & 0xffff;
            s2 = a >> 16;
            p += done;
            n -= done;
        }
    #endif
        while (n > 0) {  /* zlib's definition, NMAX bytes between reductions */
            int64_t block = n < RMQ_ADLER_NMAX ? n : RMQ_ADLER_NMAX;
            n -= block;
            while (block-- > 0) {
                s1 += *p++;
                s2 += s1;
            }
            s1 %= RMQ_ADLER_BASE;
            s2 %= RMQ_ADLER_BASE;
        }
        return (s2 << 16) | s1;
    }

    static inline uint32_t rmq_crc32_short(const uint8_t* p, int64_t n) {
        uint32_t c = 0xFFFFFFFFu;
    #if __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
        while (n >= 8) {
            uint64_t w;
            memcpy(&w, p, 8);
            w ^= c;
            c = rmq_crc_tab[7][w & 0xff] ^ rmq_crc_tab[6][(w >> 8) & 0xff]
              ^ rmq_crc_tab[5][(w >> 16) & 0xff] ^ rmq_crc_tab[4][(w >> 24) & 0xff]
              ^ rmq_crc_tab[3][(w >> 32) & 0xff] ^ rmq_crc_tab[2][(w >> 40) & 0xff]
              ^ rmq_crc_tab[1][(w >> 48) & 0xff] ^ rmq_crc_tab[0][w >> 56];
            p += 8;
            n -= 8;
        }
    #endif
        while (n-- > 0) c = rmq_crc_tab[0][(c ^ *p++) & 0xff] ^ (c >> 8);
        return c ^ 0xFFFFFFFFu;
    }
    """
    void rmq_crc_init() noexcept nogil
    void rmq_adler_init() noexcept nogil
    uint32_t rmq_adler32(const uint8_t* p, int64_t n) noexcept nogil
    uint32_t rmq_crc32_short(const uint8_t* p, int64_t n) noexcept nogil
    int rmq_ctz64(uint64_t v) noexcept nogil
    void rmq_prefetch(const void* p) noexcept nogil
    uint32_t rmq_load_be32(const uint8_t* p) noexcept nogil
    uint16_t rmq_load_be16(const uint8_t* p) noexcept nogil
    uint64_t rmq_load_be64(const uint8_t* p) noexcept nogil
    uint64_t rmq_load_le64(const uint8_t* p) noexcept nogil
    uint32_t rmq_load_raw32(const uint8_t* p) noexcept nogil
    uint32_t rmq_bswap32(uint32_t v) noexcept nogil

cdef enum:
    C_PRUNED = 0
    C_PASS = 1
    C_HIT = 2
    C_UNDERFLOW = 3
    C_FOUND = 0
    C_NOT_FOUND = 1

PRUNED, PASS, HIT, UNDERFLOW = C_PRUNED, C_PASS, C_HIT, C_UNDERFLOW
FOUND, NOT_FOUND = C_FOUND, C_NOT_FOUND

DEF UNIT = 20
DEF TAG_LOW = 16          # the low 32 bits of the big-endian int64 at offset 12
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
    cdef int64_t n = units.shape[0] // UNIT
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
                        x = rmq_load_raw32(p + i * UNIT + TAG_LOW)
                        cand[nc] = i
                        nc += (x == a) | (x == b) | (x == c) | (x == d)
                else:
                    for i in range(blk, stop):
                        x = rmq_load_raw32(p + i * UNIT + TAG_LOW)
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
                        x = rmq_load_raw32(p + i * UNIT + TAG_LOW)
                        cand[nc] = i
                        nc += _pre(&cs, x)
                else:
                    for i in range(blk, stop):
                        x = rmq_load_raw32(p + i * UNIT + TAG_LOW)
                        if _pre(&cs, x):
                            cand[nc] = i
                            nc += 1
                for j in range(nc):
                    if _codeset_has(&cs, rmq_load_raw32(p + cand[j] * UNIT + TAG_LOW)):
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


def ext_walk(const uint8_t[::1] buf, int64_t pos):
    """Walk ext units from ``pos``: ``(end_position, status)``; status 2 = unit past the buffer."""
    cdef int64_t n = buf.shape[0]
    cdef int16_t size
    cdef int status = 0
    if pos < 0:
        raise ValueError(f"pos must be >= 0, got {pos}")
    with nogil:
        while pos + 2 <= n:
            size = <int16_t>rmq_load_be16(&buf[pos])
            if size <= 0:
                break
            if pos + size > n:
                status = 2
                break
            pos += size
    return pos, status


cdef inline int8_t _ext_head(const uint8_t* base, int64_t pos, int64_t limit,
                             int64_t* tags, int64_t* time, int16_t* bms) noexcept nogil:
    if pos < 0 or pos >= limit or limit - pos < 2:
        return C_NOT_FOUND
    if <int16_t>rmq_load_be16(base + pos) < 1:
        return C_NOT_FOUND
    if limit - pos < EXT_HEAD:
        return C_UNDERFLOW
    tags[0] = <int64_t>rmq_load_be64(base + pos + 2)
    time[0] = <int64_t>rmq_load_be64(base + pos + 10)
    bms[0] = <int16_t>rmq_load_be16(base + pos + 18)
    if bms[0] >= 1 and pos + EXT_HEAD + bms[0] > limit:
        return C_UNDERFLOW
    return C_FOUND


def ext_units_at(const uint8_t[::1] buf, const int64_t[::1] positions, int64_t limit):
    """Ext unit heads at ``positions``: ``(status int8, tags_code, msg_store_time, bit_map_size)``."""
    cdef Py_ssize_t i, k = positions.shape[0]
    if limit < 0 or limit > buf.shape[0]:
        raise ValueError(f"limit {limit} outside the buffer of {buf.shape[0]} bytes")
    status = np.full(k, NOT_FOUND, dtype=np.int8)
    tags = np.zeros(k, dtype=np.int64)
    times = np.zeros(k, dtype=np.int64)
    bms = np.zeros(k, dtype=np.int16)
    cdef int8_t[::1] s = status
    cdef int64_t[::1] t = tags, st = times
    cdef int16_t[::1] b = bms
    cdef int64_t one_tags, one_time
    cdef int16_t one_bms
    cdef const uint8_t* base = &buf[0] if buf.shape[0] else NULL
    if base == NULL:
        return status, tags, times, bms
    with nogil:
        for i in range(k):
            # only a FOUND unit fills its row: an underflowing head leaves zeros, as in the twin
            s[i] = _ext_head(base, positions[i], limit, &one_tags, &one_time, &one_bms)
            if s[i] == C_FOUND:
                t[i] = one_tags
                st[i] = one_time
                b[i] = one_bms
    return status, tags, times, bms


def ext_units_read(const uint8_t[::1] buf, const int64_t[::1] positions, int64_t limit):
    """:func:`ext_units_at` with each unit's size field and bitmap bytes, in one pass.

    Returns ``(status int8, size int16, tags_code int64, msg_store_time int64,
    bit_map_size int16, bitmap_offsets int64 (k + 1), bitmap_data uint8)``: a row
    not FOUND is zero everywhere and has no bitmap bytes; a FOUND unit with
    ``bit_map_size >= 1`` has its ``bit_map_size`` bitmap bytes (the Arrow binary layout).
    """
    cdef Py_ssize_t i, k = positions.shape[0]
    if limit < 0 or limit > buf.shape[0]:
        raise ValueError(f"limit {limit} outside the buffer of {buf.shape[0]} bytes")
    status = np.full(k, NOT_FOUND, dtype=np.int8)
    sizes = np.zeros(k, dtype=np.int16)
    tags = np.zeros(k, dtype=np.int64)
    times = np.zeros(k, dtype=np.int64)
    bms = np.zeros(k, dtype=np.int16)
    offsets = np.zeros(k + 1, dtype=np.int64)
    cdef int8_t[::1] s = status
    cdef int16_t[::1] z = sizes, b = bms
    cdef int64_t[::1] t = tags, st = times, o = offsets
    cdef int64_t one_tags, one_time, total = 0
    cdef int16_t one_bms
    cdef const uint8_t* base = &buf[0] if buf.shape[0] else NULL
    if base == NULL:
        return status, sizes, tags, times, bms, offsets, np.empty(0, dtype=np.uint8)
    with nogil:
        for i in range(k):
            s[i] = _ext_head(base, positions[i], limit, &one_tags, &one_time, &one_bms)
            if s[i] == C_FOUND:
                z[i] = <int16_t>rmq_load_be16(base + positions[i])
                t[i] = one_tags
                st[i] = one_time
                b[i] = one_bms
                if one_bms >= 1:
                    total += one_bms
            o[i + 1] = total
    data = np.empty(total, dtype=np.uint8)
    cdef uint8_t[::1] d = data
    with nogil:
        for i in range(k):
            if o[i + 1] > o[i]:  # FOUND and inside ``limit`` (_ext_head checked the bitmap's end)
                memcpy(&d[o[i]], base + positions[i] + EXT_HEAD, o[i + 1] - o[i])
    return status, sizes, tags, times, bms, offsets, data


cdef inline uint8_t _bloom_verdict(const uint8_t* bitmap, int64_t time, int16_t bms, const int32_t* byte_idx,
                                   const uint8_t* masks, Py_ssize_t nb, int64_t bit_num,
                                   int64_t born_time) noexcept nogil:
    # Rules 3-5 of docs/filtering.md#expression-filter for a found ext unit (``bitmap``: its
    # bitmap bytes, ``bms`` of them): let through untested, or HIT / PRUNED on the k bits.
    cdef Py_ssize_t j
    cdef bint hit = 1
    if time <= born_time or bms < 1 or <int64_t>bms * 8 != bit_num:
        return C_PASS
    for j in range(nb):  # every bit, no early exit: a branch on random bitmap bits mispredicts
        hit &= (bitmap[byte_idx[j]] & masks[j]) != 0
    return C_HIT if hit else C_PRUNED


cdef _check_bit_bytes(const int32_t[::1] byte_idx, const uint8_t[::1] masks, int64_t bit_num):
    cdef Py_ssize_t j
    if masks.shape[0] != byte_idx.shape[0]:
        raise ValueError("byte_idx and masks differ in length")
    for j in range(byte_idx.shape[0]):
        if byte_idx[j] < 0 or byte_idx[j] * 8 >= bit_num:
            raise ValueError(f"bit byte index {byte_idx[j]} outside a {bit_num}-bit bitmap")


def bloom_check_units(const uint8_t[::1] found, const int64_t[::1] msg_store_time, const int16_t[::1] bit_map_size,
                      const int64_t[::1] bitmap_offsets, const uint8_t[::1] bitmap_data,
                      const int32_t[::1] byte_idx, const uint8_t[::1] masks, int64_t bit_num, int64_t born_time):
    """:func:`ext_bloom_check`'s decision over ext units already read (``cq.ext.ExtBatch``'s columns).

    Returns uint8 per unit: PASS (not found, or let through untested), HIT or PRUNED.
    A tested row's bitmap is ``bitmap_data[bitmap_offsets[i]:bitmap_offsets[i + 1]]``,
    which must hold its ``bit_map_size`` bytes (ValueError otherwise).
    """
    cdef Py_ssize_t i, k = found.shape[0], nb = byte_idx.shape[0]
    cdef int64_t n = bitmap_data.shape[0]
    _check_bit_bytes(byte_idx, masks, bit_num)
    if msg_store_time.shape[0] != k or bit_map_size.shape[0] != k or bitmap_offsets.shape[0] != k + 1:
        raise ValueError(f"ext unit columns of different lengths ({k} found rows)")
    out = np.full(k, PASS, dtype=np.uint8)
    cdef uint8_t[::1] o = out
    cdef const uint8_t* data = &bitmap_data[0] if n else NULL
    cdef const int32_t* bi = &byte_idx[0] if nb else NULL
    cdef const uint8_t* bm = &masks[0] if nb else NULL
    cdef Py_ssize_t bad = -1
    with nogil:
        for i in range(k):
            if not found[i] or bit_map_size[i] < 1 or <int64_t>bit_map_size[i] * 8 != bit_num:
                continue  # (untested: no bitmap bytes are read)
            if (bitmap_offsets[i] < 0 or bitmap_offsets[i + 1] > n
                    or bitmap_offsets[i + 1] - bitmap_offsets[i] != bit_map_size[i]):
                bad = i
                break
            o[i] = _bloom_verdict(data + bitmap_offsets[i], msg_store_time[i], bit_map_size[i], bi, bm, nb,
                                  bit_num, born_time)
    if bad >= 0:
        raise ValueError(f"row {bad}: bitmap bytes [{bitmap_offsets[bad]}, {bitmap_offsets[bad + 1]}) do not hold "
                         f"its {bit_map_size[bad]}-byte bitmap within {n} bytes")
    return out


def ext_bloom_check(const uint8_t[::1] buf, const int64_t[::1] positions, int64_t limit,
                    const int32_t[::1] byte_idx, const uint8_t[::1] masks, int64_t bit_num, int64_t born_time,
                    uint8_t[::1] found=None):
    """The ConsumeQueue-layer SQL92 decision per ext unit: PASS, HIT, PRUNED or UNDERFLOW (uint8).

    ``found`` (optional, uint8 of ``len(positions)``) gets 1 where a unit is found (as
    :func:`ext_units_at`'s FOUND), else 0: the missing units, without a second pass.
    """
    cdef Py_ssize_t i, k = positions.shape[0], nb = byte_idx.shape[0]
    cdef bint want_found = found is not None
    cdef int64_t tags, time, pos
    cdef int16_t bms
    cdef int8_t st
    cdef const int32_t* bi = &byte_idx[0] if nb else NULL
    cdef const uint8_t* bm = &masks[0] if nb else NULL
    if limit < 0 or limit > buf.shape[0]:
        raise ValueError(f"limit {limit} outside the buffer of {buf.shape[0]} bytes")
    _check_bit_bytes(byte_idx, masks, bit_num)
    if want_found:
        if found.shape[0] != k:
            raise ValueError(f"found holds {found.shape[0]} entries for {k} positions")
        found[:] = 0
    out = np.full(k, PASS, dtype=np.uint8)
    cdef uint8_t[::1] o = out
    cdef const uint8_t* base = &buf[0] if buf.shape[0] else NULL
    if base == NULL:
        return out
    with nogil:
        for i in range(k):
            pos = positions[i]
            st = _ext_head(base, pos, limit, &tags, &time, &bms)
            if want_found and st == C_FOUND:
                found[i] = 1
            if st == C_UNDERFLOW:
                o[i] = C_UNDERFLOW
                continue
            if st == C_FOUND:  # (_ext_head checked that a bitmap lies inside ``limit``)
                o[i] = _bloom_verdict(base + pos + EXT_HEAD, time, bms, bi, bm, nb, bit_num, born_time)
    return out


def ext_locate(const int64_t[::1] addresses, const int64_t[::1] starts, int64_t file_size):
    """Each ext address's file and position: ``(index int64, pos int64)``, index -1 where no file holds it.

    An address is an ext address when ``<= MAX_ADDR``; its offset is the address with
    the top bit flipped (docs/formats.md#ext-address); the file is the last whose
    start is at or below the offset, if the offset lies within it (offset 0: the first
    file); the position is the offset modulo ``file_size``.
    """
    cdef Py_ssize_t i, k = addresses.shape[0], nf = starts.shape[0], lo, hi, mid, c = 0
    cdef int64_t a, real
    if file_size <= 0:
        raise ValueError(f"file size {file_size} must be positive")
    index = np.full(k, -1, dtype=np.int64)
    positions = np.zeros(k, dtype=np.int64)
    cdef int64_t[::1] ix = index, ps = positions
    if nf == 0:
        return index, positions
    with nogil:
        for i in range(k):
            a = addresses[i]
            if a > C_MAX_ADDR:
                continue
            real = <int64_t>(<uint64_t>a ^ (<uint64_t>1 << 63))
            if real == 0:
                c = 0
            elif not (starts[c] <= real < starts[c] + file_size):
                lo = 0  # the last start <= real
                hi = nf
                while lo < hi:
                    mid = (lo + hi) >> 1
                    if starts[mid] <= real:
                        lo = mid + 1
                    else:
                        hi = mid
                if lo == 0:
                    continue
                c = lo - 1
            if real < starts[c] + file_size:
                ix[i] = c
                ps[i] = real % file_size
    return index, positions


cdef struct Rec:
    int32_t total, magic, sys_flag, body_len, topic_len, props_len
    int64_t blen, plen, body, topic, props, at
    int bw, sw


cdef int _parse(const uint8_t* b, int64_t pos, int64_t limit, Rec* r) noexcept nogil:
    # The record layout at ``pos`` with the broker's validation
    # (docs/formats.md#commitlog-record, docs/formats.md#commitlog-validation).
    # 0 = valid; otherwise an error code for _parse_error, r.at the offset to name.
    cdef int64_t p, end
    cdef int width
    r.at = pos
    if pos < 0 or limit - pos < 8:
        return 2
    r.total = <int32_t>rmq_load_be32(b + pos)
    r.magic = <int32_t>rmq_load_be32(b + pos + 4)
    if r.magic == MAGIC_BLANK:
        return 3
    if r.magic != MAGIC_V1 and r.magic != MAGIC_V2:
        return 4
    if r.total < MIN_RECORD:
        return 5
    if r.total > limit - pos:
        return 6
    end = pos + r.total
    r.sys_flag = <int32_t>rmq_load_be32(b + pos + 36)
    r.bw = 16 if r.sys_flag & BORN_V6 else 4
    r.sw = 16 if r.sys_flag & STORE_V6 else 4
    p = pos + 48 + r.bw + 4 + 8 + r.sw + 4 + 16
    if p > end:
        return 7
    r.body_len = <int32_t>rmq_load_be32(b + p - 4)
    r.blen = r.body_len if r.body_len > 0 else 0
    width = 2 if r.magic == MAGIC_V2 else 1
    if p + r.blen + width > end:
        r.at = p - 4
        return 8
    r.body = p
    p += r.blen
    r.topic_len = <int16_t>rmq_load_be16(b + p) if width == 2 else <int8_t>b[p]
    if r.topic_len < 0:
        r.at = p
        return 9
    p += width
    if p + r.topic_len + 2 > end:
        r.at = p - width
        return 10
    r.topic = p
    p += r.topic_len
    r.props_len = <int16_t>rmq_load_be16(b + p)
    p += 2
    r.plen = r.props_len if r.props_len > 0 else 0
    r.props = p
    if p + r.plen != end:
        return 11
    return 0


cdef int _span(const uint8_t* base, int64_t pos, int64_t limit, int64_t* start, int64_t* length,
               const char** why) noexcept nogil:
    # The properties text of the record at ``pos``, validated by _parse (the same
    # checks as decode_record); ``why`` gets a short reason for an invalid record.
    cdef Rec r
    cdef int code = _parse(base, pos, limit, &r)
    if code == 0:
        start[0] = r.props
        length[0] = r.plen
        return 0
    if code == 2:
        why[0] = "record header runs past the end of the file"
    elif code == 3 or code == 4:
        why[0] = "bad magic code"
    elif code == 5 or code == 6:
        why[0] = "TOTALSIZE does not fit the bytes left in the file"
    elif code == 7:
        why[0] = "record too short for its hosts"
    elif code == 8:
        why[0] = "BODYLENGTH runs past the record"
    elif code == 9:
        why[0] = "negative topic length"
    elif code == 10:
        why[0] = "topic length runs past the record"
    else:
        why[0] = "field lengths do not add up to TOTALSIZE"
    return -1


def record_properties_span(const uint8_t[::1] buf, int64_t pos, int64_t limit):
    """``(start, length)`` of the properties text of the record at ``pos``; ValueError if corrupt."""
    cdef int64_t start = 0, length = 0
    cdef const char* why = NULL
    if limit < 0 or limit > buf.shape[0] or buf.shape[0] == 0:
        raise ValueError("record header runs past the end of the file")
    if _span(&buf[0], pos, limit, &start, &length, &why) < 0:
        raise ValueError(why.decode())
    return start, length


cdef dict _decode_props(const uint8_t* p, int64_t n):
    # Split at 0x02, key = up to the first 0x01; key and value must be non-empty.
    # Splitting bytes before decoding equals the broker's decode-then-split: 0x01
    # and 0x02 never occur inside a UTF-8 sequence and never join a malformed one.
    cdef dict props = {}
    cdef int64_t i = 0, seg, sep
    while i < n:
        seg = i
        sep = -1
        while i < n and p[i] != PROPERTY_SEP:
            if sep < 0 and p[i] == NAME_VALUE_SEP:
                sep = i
            i += 1
        if sep > seg and i > sep + 1:
            props[PyUnicode_DecodeUTF8(<const char*>p + seg, sep - seg, "replace")] = \
                PyUnicode_DecodeUTF8(<const char*>p + sep + 1, i - sep - 1, "replace")
        i += 1
    return props


def gather_properties(const uint8_t[::1] buf, const int64_t[::1] positions, int64_t limit,
                      bint absent_as_none=False):
    """Properties dicts of the records at ``positions``; ValueError("<index>: <reason>") if corrupt.

    A record that stores no properties (PROPERTIES length 0) gives ``{}``, or None with
    ``absent_as_none`` (the broker's decoded properties are then null).
    """
    cdef Py_ssize_t i, k = positions.shape[0]
    cdef int64_t start, length
    cdef const char* why = NULL
    cdef list out = []
    if k == 0:
        return out
    if limit < 0 or limit > buf.shape[0] or buf.shape[0] == 0:
        raise ValueError("0: record header runs past the end of the file")
    cdef const uint8_t* base = &buf[0]
    for i in range(k):
        if _span(base, positions[i], limit, &start, &length, &why) < 0:
            raise ValueError(f"{i}: {why.decode()}")
        out.append(_decode_props(base + start, length) if length else (None if absent_as_none else {}))
    return out


cdef inline int _walk_stop(const uint8_t* base, int64_t pos, int64_t limit) noexcept nogil:
    # Where a walk of the records stops (one rule for commit_log_walk and record_positions):
    # -1 = a valid record starts at pos; 0 = unwritten space or fewer than 8 bytes left (the
    # end of the data); 1 = a blank end-of-file record; 2 = an invalid record.
    cdef int64_t start = 0, length = 0
    cdef const char* why = NULL
    cdef int32_t total, magic
    if limit - pos < 8:
        return 0
    total = <int32_t>rmq_load_be32(base + pos)
    magic = <int32_t>rmq_load_be32(base + pos + 4)
    if magic == MAGIC_BLANK:
        return 1
    if total == 0 and magic == 0:
        return 0
    if _span(base, pos, limit, &start, &length, &why) < 0:
        return 2
    return -1


def commit_log_walk(const uint8_t[::1] buf, int64_t pos):
    """Walk CommitLog records from ``pos`` of one file: ``(position, status, records)``.

    status 0: unwritten space (TOTALSIZE and MAGICCODE both 0) or fewer than 8
    bytes left - the end of the data; 1: a blank end-of-file record at
    ``position``; 2: an invalid record at ``position`` (bad magic, a size that
    does not fit, or fields that do not add up), where the broker's recovery
    truncates. ``records`` counts the valid records passed.
    """
    cdef int64_t n = buf.shape[0], records = 0
    cdef int status = 0
    if pos < 0:
        raise ValueError(f"pos must be >= 0, got {pos}")
    if n == 0:
        return pos, 0, 0
    cdef const uint8_t* base = &buf[0]
    with nogil:
        while True:
            status = _walk_stop(base, pos, n)
            if status >= 0:
                break
            pos += <int32_t>rmq_load_be32(base + pos)
            records += 1
    return pos, status, records


def decode_properties_at(const uint8_t[::1] buf, int64_t start, int64_t length):
    """The properties dict of ``length`` bytes at ``start`` (broker parsing rules, UTF-8 with replacement)."""
    if start < 0 or length < 0 or start + length > buf.shape[0]:
        raise ValueError(f"properties [{start}, {start + length}) outside the buffer of {buf.shape[0]} bytes")
    if length == 0:
        return {}
    return _decode_props(&buf[start], length)


cdef str _parse_error(int code, const Rec* r, int64_t pos, int64_t limit):
    if code == 2:
        return f"record header needs 8 bytes, {limit - pos} left in the file"
    if code == 3:
        return "blank end-of-file record, not a message"
    if code == 4:
        return f"bad magic code {<uint32_t>r.magic:#010x} (TOTALSIZE {r.total})"
    if code == 5:
        return f"TOTALSIZE {r.total} is smaller than the smallest record"
    if code == 6:
        return f"TOTALSIZE {r.total} runs past the end of the file ({limit - pos} bytes left)"
    if code == 7:
        return f"record of {r.total} bytes is too short for its hosts (sys_flag {r.sys_flag:#x})"
    if code == 8:
        return f"BODYLENGTH {r.body_len} runs past the record of {r.total} bytes"
    if code == 9:
        return f"negative topic length {r.topic_len}"
    if code == 10:
        return f"topic length {r.topic_len} runs past the record"
    return f"field lengths add up to {r.props + r.plen - pos} bytes but TOTALSIZE is {r.total}"


def decode_record(const uint8_t[::1] buf, int64_t pos, int64_t limit):
    """Decode the CommitLog record at ``pos`` (readable end ``limit``).

    Returns ``(total, magic, body_crc, queue_id, flag, queue_offset, physical_offset,
    sys_flag, born_timestamp, born_ip, born_port, store_timestamp, store_ip,
    store_port, reconsume_times, prepared_transaction_offset, body, topic,
    properties)``; raises ``ValueError(reason, offset)`` for a record that is not valid.
    """
    cdef int64_t n = buf.shape[0]
    cdef Rec r
    cdef int code
    if limit < 0 or limit > n:
        raise ValueError(f"limit {limit} outside the buffer of {n} bytes", pos)
    if pos < 0 or limit - pos < 8:
        raise ValueError(f"record header needs 8 bytes, {limit - pos} left in the file", pos)
    cdef const uint8_t* b = &buf[0]
    code = _parse(b, pos, limit, &r)
    if code:
        raise ValueError(_parse_error(code, &r, pos, limit), r.at)
    body = PyBytes_FromStringAndSize(<const char*>b + r.body, r.blen)
    topic = PyUnicode_DecodeUTF8(<const char*>b + r.topic, r.topic_len, "replace")
    props = _decode_props(b + r.props, r.plen) if r.plen else {}
    cdef int64_t h = pos + 48
    born_ip = PyBytes_FromStringAndSize(<const char*>b + h, r.bw)
    born_port = <int32_t>rmq_load_be32(b + h + r.bw)
    h += r.bw + 4
    store_ts = <int64_t>rmq_load_be64(b + h)
    h += 8
    store_ip = PyBytes_FromStringAndSize(<const char*>b + h, r.sw)
    store_port = <int32_t>rmq_load_be32(b + h + r.sw)
    h += r.sw + 4
    return (r.total, r.magic, <int32_t>rmq_load_be32(b + pos + 8), <int32_t>rmq_load_be32(b + pos + 12),
            <int32_t>rmq_load_be32(b + pos + 16), <int64_t>rmq_load_be64(b + pos + 20),
            <int64_t>rmq_load_be64(b + pos + 28), r.sys_flag, <int64_t>rmq_load_be64(b + pos + 40),
            born_ip, born_port, store_ts, store_ip, store_port,
            <int32_t>rmq_load_be32(b + h), <int64_t>rmq_load_be64(b + h + 4), body, topic, props)


#: decode_records column names, in order: int32 / int64 fixed fields, then spans
RECORD_INT_COLUMNS = (
    ("store_size", "i4"), ("magic_code", "i4"), ("body_crc", "i4"), ("queue_id", "i4"), ("flag", "i4"),
    ("queue_offset", "i8"), ("commit_log_offset", "i8"), ("sys_flag", "i4"), ("born_timestamp", "i8"),
    ("born_port", "i4"), ("store_timestamp", "i8"), ("store_port", "i4"), ("reconsume_times", "i4"),
    ("prepared_transaction_offset", "i8"),
)
RECORD_SPAN_COLUMNS = ("body_start", "body_len", "topic_start", "topic_len", "props_start", "props_len")


def decode_records(const uint8_t[::1] buf, const int64_t[::1] positions, int64_t limit):
    """Decode the records at ``positions`` into columns (the batch form of :func:`decode_record`).

    Returns ``(columns, error)``: ``columns`` maps each ``RECORD_INT_COLUMNS``
    name to an int32/int64 array, ``born_ip``/``store_ip`` to (k, 16) uint8
    arrays (IPv4 in the first 4 bytes), and each ``RECORD_SPAN_COLUMNS`` name to
    int64 byte positions/lengths inside ``buf``. ``error`` is None, or
    ``(index, reason, offset)`` of the first record that is not valid (the rows
    from it on are left zero), with the reason and offset of ``decode_record``.
    """
    cdef Py_ssize_t i, k = positions.shape[0]
    cdef int64_t n = buf.shape[0], pos, h
    cdef Rec r
    cdef int code = 0
    cdef Py_ssize_t bad = -1
    if limit < 0 or limit > n:
        raise ValueError(f"limit {limit} outside the buffer of {n} bytes")
    cols = {name: np.zeros(k, dtype=dt) for name, dt in RECORD_INT_COLUMNS}
    for name in RECORD_SPAN_COLUMNS:
        cols[name] = np.zeros(k, dtype=np.int64)
    cols["born_ip"] = np.zeros((k, 16), dtype=np.uint8)
    cols["store_ip"] = np.zeros((k, 16), dtype=np.uint8)
    cdef int32_t[::1] total = cols["store_size"], magic = cols["magic_code"], crc = cols["body_crc"]
    cdef int32_t[::1] qid = cols["queue_id"], flag = cols["flag"], sysf = cols["sys_flag"]
    cdef int32_t[::1] bport = cols["born_port"], sport = cols["store_port"], recon = cols["reconsume_times"]
    cdef int64_t[::1] qoff = cols["queue_offset"], phys = cols["commit_log_offset"], bts = cols["born_timestamp"]
    cdef int64_t[::1] sts = cols["store_timestamp"], prep = cols["prepared_transaction_offset"]
    cdef int64_t[::1] bs = cols["body_start"], bl = cols["body_len"], ts = cols["topic_start"]
    cdef int64_t[::1] tl = cols["topic_len"], ps = cols["props_start"], pl = cols["props_len"]
    cdef uint8_t[:, ::1] bip = cols["born_ip"], sip = cols["store_ip"]
    if k == 0:
        return cols, None
    if n == 0:
        return cols, (0, f"record header needs 8 bytes, {limit - positions[0]} left in the file", positions[0])
    cdef const uint8_t* b = &buf[0]
    with nogil:
        for i in range(k):
            pos = positions[i]
            code = _parse(b, pos, limit, &r)
            if code:
                bad = i
                break
            total[i] = r.total
            magic[i] = r.magic
            crc[i] = <int32_t>rmq_load_be32(b + pos + 8)
            qid[i] = <int32_t>rmq_load_be32(b + pos + 12)
            flag[i] = <int32_t>rmq_load_be32(b + pos + 16)
            qoff[i] = <int64_t>rmq_load_be64(b + pos + 20)
            phys[i] = <int64_t>rmq_load_be64(b + pos + 28)
            sysf[i] = r.sys_flag
            bts[i] = <int64_t>rmq_load_be64(b + pos + 40)
            h = pos + 48
            memcpy(&bip[i, 0], b + h, r.bw)
            bport[i] = <int32_t>rmq_load_be32(b + h + r.bw)
            h += r.bw + 4
            sts[i] = <int64_t>rmq_load_be64(b + h)
            h += 8
            memcpy(&sip[i, 0], b + h, r.sw)
            sport[i] = <int32_t>rmq_load_be32(b + h + r.sw)
            h += r.sw + 4
            recon[i] = <int32_t>rmq_load_be32(b + h)
            prep[i] = <int64_t>rmq_load_be64(b + h + 4)
            bs[i] = r.body
            bl[i] = r.blen
            ts[i] = r.topic
            tl[i] = r.topic_len
            ps[i] = r.props
            pl[i] = r.plen
    if bad >= 0:
        return cols, (bad, _parse_error(code, &r, positions[bad], limit), r.at)
    return cols, None


def _check_spans(buf_len, starts, lengths):
    if starts.shape[0] != lengths.shape[0]:
        raise ValueError("starts and lengths differ in length")
    # lengths are compared with the room left after each start (a sum could overflow int64)
    if len(starts) and (np.min(starts) < 0 or np.min(lengths) < 0 or np.max(starts) > buf_len
                        or (np.asarray(lengths) > buf_len - np.asarray(starts)).any()):
        raise ValueError(f"a span lies outside the buffer of {buf_len} bytes")


def gather_spans(const uint8_t[::1] buf, const int64_t[::1] starts, const int64_t[::1] lengths):
    """Concatenate ``buf[starts[i]:starts[i] + lengths[i]]``: ``(offsets int64 (k + 1), data uint8)``.

    The Arrow (large) binary layout of the spans.
    """
    cdef Py_ssize_t i, k = starts.shape[0]
    _check_spans(buf.shape[0], np.asarray(starts), np.asarray(lengths))
    offsets = np.zeros(k + 1, dtype=np.int64)
    cdef int64_t[::1] o = offsets
    for i in range(k):
        o[i + 1] = o[i] + lengths[i]
    data = np.empty(o[k], dtype=np.uint8)
    cdef uint8_t[::1] d = data
    cdef const uint8_t* b = &buf[0] if buf.shape[0] else NULL
    with nogil:
        for i in range(k):
            if lengths[i]:
                memcpy(&d[o[i]], b + starts[i], lengths[i])
    return offsets, data


cdef inline bint _span_eq(const uint8_t* b, int64_t s1, int64_t n1, int64_t s2, int64_t n2) noexcept nogil:
    return n1 == n2 and (n1 == 0 or memcmp(b + s1, b + s2, n1) == 0)


def split_properties(const uint8_t[::1] buf, const int64_t[::1] starts, const int64_t[::1] lengths):
    """Split each record's properties text into map entries, as :func:`gather_properties` parses it.

    Returns ``(map_offsets int64 (k + 1), key_start, key_len, value_start,
    value_len, tags_entry, keys_entry)``: record ``i`` owns entries
    ``map_offsets[i]:map_offsets[i + 1]`` in first-seen key order, a repeated key
    (equal bytes) keeping its first place and its last value, as a dict does;
    ``tags_entry``/``keys_entry`` give the entry of ``TAGS``/``KEYS`` or -1.
    """
    cdef Py_ssize_t i, k = starts.shape[0]
    cdef int64_t j, e, m, cap = 0, seg, sep, end, p
    _check_spans(buf.shape[0], np.asarray(starts), np.asarray(lengths))
    cdef const uint8_t* b = &buf[0] if buf.shape[0] else NULL
    with nogil:
        for i in range(k):  # upper bound on entries: one per 0x01
            for j in range(starts[i], starts[i] + lengths[i]):
                cap += b[j] == NAME_VALUE_SEP
    map_offsets = np.zeros(k + 1, dtype=np.int64)
    ks, kl = np.empty(cap, dtype=np.int64), np.empty(cap, dtype=np.int64)
    vs, vl = np.empty(cap, dtype=np.int64), np.empty(cap, dtype=np.int64)
    tags_entry = np.full(k, -1, dtype=np.int64)
    keys_entry = np.full(k, -1, dtype=np.int64)
    cdef int64_t[::1] mo = map_offsets, a_ks = ks, a_kl = kl, a_vs = vs, a_vl = vl
    cdef int64_t[::1] te = tags_entry, ke = keys_entry
    e = 0
    with nogil:
        for i in range(k):
            p = starts[i]
            end = p + lengths[i]
            while p < end:
                seg = p
                sep = -1
                while p < end and b[p] != PROPERTY_SEP:
                    if sep < 0 and b[p] == NAME_VALUE_SEP:
                        sep = p
                    p += 1
                if sep > seg and p > sep + 1:
                    for m in range(mo[i], e):
                        if _span_eq(b, a_ks[m], a_kl[m], seg, sep - seg):
                            break
                    else:
                        m = e
                        e += 1
                        a_ks[m] = seg
                        a_kl[m] = sep - seg
                    a_vs[m] = sep + 1
                    a_vl[m] = p - sep - 1
                p += 1
            mo[i + 1] = e
            for m in range(mo[i], e):
                if a_kl[m] == TAGS_LEN and memcmp(b + a_ks[m], TAGS_NAME, TAGS_LEN) == 0:
                    te[i] = m
                elif a_kl[m] == KEYS_LEN and memcmp(b + a_ks[m], KEYS_NAME, KEYS_LEN) == 0:
                    ke[i] = m
    return map_offsets, ks[:e], kl[:e], vs[:e], vl[:e], tags_entry, keys_entry


# ------------------------------------------------------------------ the decoder
# decode_columns: CommitLog records straight into Arrow buffers (docs/data-path.md).

cdef struct GBuf:
    uint8_t* p
    int64_t n
    int64_t cap


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


cdef void _reserve_rows(GBuf* g, int64_t done, int64_t rows) noexcept nogil:
    # After ``done`` of ``rows`` rows: grow ``g`` once to the bytes the rest will take at
    # this rate, plus an eighth (a miss only means the usual doubling later).
    cdef int64_t need, cap
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
    if _reserve(g, n) < 0:
        return -1
    if n:
        memcpy(g.p + g.n, s, n)
    g.n += n
    return 0


cdef inline int _put_i32(GBuf* g, int32_t v) noexcept nogil:
    if _reserve(g, 4) < 0:
        return -1
    memcpy(g.p + g.n, &v, 4)
    g.n += 4
    return 0


cdef inline int64_t _ascii_prefix(const uint8_t* s, int64_t n) noexcept nogil:
    # Length of the leading run of bytes < 0x80, eight at a time.
    cdef int64_t i = 0
    cdef uint64_t w
    while i + 8 <= n:
        memcpy(&w, s + i, 8)
        if w & 0x8080808080808080ULL:
            break
        i += 8
    while i < n and s[i] < 0x80:
        i += 1
    return i


cdef inline void _copy(uint8_t* d, const uint8_t* s, int64_t n) noexcept nogil:
    # memcpy for the short strings of a record (keys, values), without a call per string:
    # two overlapping fixed-size copies cover any length from 4 to 16.
    if n >= 8:
        if n > 16:
            memcpy(d, s, n)
        else:
            memcpy(d, s, 8)
            memcpy(d + n - 8, s + n - 8, 8)
    elif n >= 4:
        memcpy(d, s, 4)
        memcpy(d + n - 4, s + n - 4, 4)
    else:
        while n > 0:
            n -= 1
            d[n] = s[n]


cdef int64_t _utf8_into(uint8_t* out, const uint8_t* s, int64_t n) noexcept nogil:
    # Write ``s`` to ``out`` (room for 3 * n bytes) as UTF-8, each maximal ill-formed
    # subpart replaced by U+FFFD (EF BF BD): what bytes.decode("utf-8", "replace")
    # then encode gives. Returns the bytes written.
    cdef int64_t i, o, j, need, run
    cdef uint8_t c, c1, lo, hi
    i = _ascii_prefix(s, n)
    _copy(out, s, i)
    if i == n:  # the common case: plain ASCII
        return n
    o = i
    while i < n:
        c = s[i]
        if c < 0x80:
            run = _ascii_prefix(s + i, n - i)
            _copy(out + o, s + i, run)
            o += run
            i += run
            continue
        lo = 0x80
        hi = 0xBF
        if 0xC2 <= c <= 0xDF:
            need = 1
        elif c == 0xE0:
            need = 2
            lo = 0xA0
        elif (0xE1 <= c <= 0xEC) or c == 0xEE or c == 0xEF:
            need = 2
        elif c == 0xED:
            need = 2
            hi = 0x9F
        elif c == 0xF0:
            need = 3
            lo = 0x90
        elif 0xF1 <= c <= 0xF3:
            need = 3
        elif c == 0xF4:
            need = 3
            hi = 0x8F
        else:
            need = 0
        j = 1
        if need:
            while j <= need and i + j < n:
                c1 = s[i + j]
                if j == 1:
                    if c1 < lo or c1 > hi:
                        break
                elif c1 < 0x80 or c1 > 0xBF:
                    break
                j += 1
        if need and j > need:
            memcpy(out + o, s + i, need + 1)
            o += need + 1
            i += need + 1
        else:
            out[o] = 0xEF
            out[o + 1] = 0xBF
            out[o + 2] = 0xBD
            o += 3
            i += j
    return o


cdef inline int _put_utf8(GBuf* g, const uint8_t* s, int64_t n) noexcept nogil:
    if _reserve(g, 3 * n) < 0:
        return -1
    g.n += _utf8_into(g.p + g.n, s, n)
    return 0


cdef inline int64_t _put_uint(char* out, uint32_t v) noexcept nogil:
    cdef char tmp[12]
    cdef int64_t n = 0, k
    if v == 0:
        out[0] = 48
        return 1
    while v:
        tmp[n] = <char>(48 + v % 10)
        v //= 10
        n += 1
    for k in range(n):
        out[k] = tmp[n - 1 - k]
    return n


cdef int _put_host(GBuf* g, const uint8_t* ip, bint v6, int32_t port) noexcept nogil:
    # "a.b.c.d:port" / "[ipv6]:port", the text read_message gives (libc inet_ntop, as
    # Python's socket.inet_ntop); the port is the stored int32, signed.
    cdef char* out
    cdef int64_t o = 0, k
    if _reserve(g, 80) < 0:
        return -1
    out = <char*>(g.p + g.n)
    if v6:
        out[0] = 91  # '['
        if inet_ntop(AF_INET6, ip, out + 1, 64) == NULL:
            return -1
        o = 1
        while out[o]:
            o += 1
        out[o] = 93  # ']'
        o += 1
    else:
        for k in range(4):
            o += _put_uint(out + o, ip[k])
            if k < 3:
                out[o] = 46  # '.'
                o += 1
    out[o] = 58  # ':'
    o += 1
    if port < 0:
        out[o] = 45  # '-'
        o += 1
        o += _put_uint(out + o, <uint32_t>(-<int64_t>port))
    else:
        o += _put_uint(out + o, <uint32_t>port)
    g.n += o
    return 0


cdef struct HostCache:
    uint8_t ip[16]
    int32_t port
    bint v6
    int64_t start, length    # the cached text inside the column's GBuf; length -1: none


DEF HOST_SLOTS = 16  # a power of two: hosts cached per column (each producer is one born host)


cdef inline int _host_column(GBuf* g, HostCache* cache, const uint8_t* ip, int width, int32_t port) noexcept nogil:
    # Hosts repeat from record to record (a few producers, one broker): ``cache`` holds
    # HOST_SLOTS texts already written to the column, one slot per host by a hash of its last
    # address bytes and port; a host found there is copied, another written and cached.
    cdef bint v6 = width == 16
    cdef int64_t start = g.n
    cdef uint32_t x = (<uint32_t>port * 0x9E3779B1U) ^ (<uint32_t>ip[width - 1] * 0x85EBCA77U) \
        ^ (<uint32_t>ip[width - 2] * 0xC2B2AE3DU)
    cdef HostCache* c = &cache[(x >> 16) & (HOST_SLOTS - 1)]
    if c.length >= 0 and c.port == port and c.v6 == v6 and memcmp(c.ip, ip, width) == 0:
        if _reserve(g, c.length) < 0:
            return -1
        memcpy(g.p + g.n, g.p + c.start, c.length)
        g.n += c.length
        return 0
    if _put_host(g, ip, v6, port) < 0:
        return -1
    memcpy(c.ip, ip, width)
    c.port = port
    c.v6 = v6
    c.start = start
    c.length = g.n - start
    return 0


# ------------------------------------------------------------------ reused output memory
# A decoded batch's buffers are fresh memory: the kernel faults in and zeroes each page the
# first time it is written, which for a large batch cost more than the decode itself. So the
# buffers of freed arrays are kept (at most POOL_BYTES in all, docs/data-path.md) and handed
# to the next decode, best fit for the size the same buffer took per row last time. The pool
# is touched only with the GIL held (no Python code runs in between: the GIL is its lock).
DEF POOL_BYTES = 128 << 20
DEF POOL_MIN = 1 << 16       # smaller buffers are cheap to malloc: not kept
cdef list _pool = []         # [(capacity, address)]
cdef int64_t _pool_bytes = 0


cdef void _pool_put(void* p, int64_t cap):
    global _pool_bytes
    if p == NULL:
        return
    if cap < POOL_MIN or _pool_bytes + cap > POOL_BYTES:
        free(p)
        return
    _pool.append((cap, <size_t>p))
    _pool_bytes += cap


cdef void _pool_get(GBuf* g, int64_t want):
    # Give the empty ``g`` the pooled buffer that best fits ``want`` bytes (the smallest that
    # holds them, else the largest); nothing when the pool is empty or want is small.
    global _pool_bytes
    cdef Py_ssize_t i, best = -1, n = len(_pool)
    cdef int64_t cap, best_cap = 0
    if n == 0 or want < POOL_MIN:
        return
    for i in range(n):
        cap = (<tuple>_pool[i])[0]
        if best < 0 or (want <= cap < best_cap if best_cap >= want else cap > best_cap):
            best = i
            best_cap = cap
    entry = _pool.pop(best)
    _pool_bytes -= best_cap
    g.p = <uint8_t*><size_t>(<tuple>entry)[1]
    g.cap = best_cap
    g.n = 0


def pool_bytes():
    """Bytes of freed decode buffers kept for reuse (at most 128 MiB)."""
    return _pool_bytes


cdef class _Owned:
    """Owner of a malloc'd buffer handed to numpy without a copy; freed into the pool."""
    cdef void* p
    cdef int64_t cap

    def __dealloc__(self):
        _pool_put(self.p, self.cap)


cdef object _take(GBuf* g, object dtype, int64_t count):
    # The buffer as a numpy array of ``count`` items (owning the memory), g emptied.
    cdef cnp.npy_intp dims[1]
    cdef _Owned owner
    cdef cnp.ndarray arr
    if g.p == NULL or count == 0:
        _pool_put(g.p, g.cap)
        g.p = NULL
        g.n = g.cap = 0
        return np.zeros(count, dtype=dtype)
    dims[0] = count
    arr = cnp.PyArray_SimpleNewFromData(1, dims, cnp.dtype(dtype).num, g.p)
    owner = _Owned()
    owner.p = g.p
    owner.cap = g.cap
    cnp.set_array_base(arr, owner)
    g.p = NULL
    g.n = g.cap = 0
    return arr


cdef object _pooled_zeros(int64_t count, object dtype):
    # np.zeros(count, dtype) in a pooled buffer when one fits (hot pages: no faults to zero them)
    cdef GBuf g
    cdef int64_t nbytes = count * np.dtype(dtype).itemsize
    memset(&g, 0, sizeof(GBuf))
    _pool_get(&g, nbytes)
    if g.cap < nbytes:
        _pool_put(g.p, g.cap)
        return np.zeros(count, dtype=dtype)
    memset(g.p, 0, nbytes)
    g.n = nbytes
    return _take(&g, dtype, count)


cdef struct Entry:
    int64_t kstart, klen, vsrc, vlen
    uint64_t head     # the key's first 8 bytes (zero-padded): most unequal keys differ here


cdef inline uint64_t _head(const uint8_t* s, int64_t n) noexcept nogil:
    # (a fixed 8-byte copy is one load; a variable-length memcpy is far slower here)
    cdef uint64_t w = 0
    cdef int64_t k
    if n >= 8:
        return rmq_load_le64(s)
    for k in range(n):
        w |= (<uint64_t>s[k]) << (8 * k)
    return w


cdef inline uint64_t _head_in_room(const uint8_t* s, int64_t n) noexcept nogil:
    # _head of ``n`` bytes at ``s`` where 8 bytes can be read
    cdef uint64_t w = rmq_load_le64(s)
    return w if n >= 8 else w & ((<uint64_t>1 << (8 * n)) - 1)


cdef void _tags_keys(const uint8_t* b, int64_t p, int64_t end, int64_t* tv, int64_t* tl,
                     int64_t* kv, int64_t* kl) noexcept nogil:
    # The raw value spans of the TAGS and KEYS entries (the later of repeated ones), or -1:
    # what _props finds without copying a key (a key that is not plain ASCII cannot
    # become "TAGS" or "KEYS" by replacement, so the raw bytes decide).
    cdef int64_t seg, sep
    cdef const uint8_t* hit
    tv[0] = -1
    kv[0] = -1
    while p < end:
        seg = p
        hit = <const uint8_t*>memchr(b + p, PROPERTY_SEP, end - p)
        p = (hit - b) if hit != NULL else end
        hit = <const uint8_t*>memchr(b + seg, NAME_VALUE_SEP, p - seg)
        sep = (hit - b) if hit != NULL else -1
        if sep > seg and p > sep + 1:
            if sep - seg == TAGS_LEN and memcmp(b + seg, TAGS_NAME, TAGS_LEN) == 0:
                tv[0] = sep + 1
                tl[0] = p - sep - 1
            elif sep - seg == KEYS_LEN and memcmp(b + seg, KEYS_NAME, KEYS_LEN) == 0:
                kv[0] = sep + 1
                kl[0] = p - sep - 1
        p += 1


cdef inline int64_t _next_low(const uint8_t* b, int64_t p, int64_t end) noexcept nogil:
    # A position at or after ``p`` where the caller must look, else ``end``: the first byte
    # below SEP_BOUND's byte (a separator, or a control byte the caller passes over) is never
    # passed. In non-ASCII text it may stop earlier, at a byte >= 0x80 the caller passes over
    # too. A borrow can flag a byte after a hit, never one before it, so the lowest flag is a
    # low byte or a high one.
    cdef uint64_t w, m
    while p + 8 <= end:
        w = rmq_load_le64(b + p)  # (the lowest flag is then the first byte)
        m = (w - SEP_BOUND) & 0x8080808080808080ULL
        if m:
            return p + (rmq_ctz64(m) >> 3)
        p += 8
    while p < end and b[p] >= <uint8_t>SEP_BOUND:
        p += 1
    return p


cdef inline int64_t _entry_end(const uint8_t* b, int64_t p, int64_t end, int64_t* sep) noexcept nogil:
    # The end of the properties entry at ``p`` (its PROPERTY_SEP, or ``end``), and in ``sep``
    # its first NAME_VALUE_SEP (-1: none): one SWAR pass finds both.
    sep[0] = -1
    while True:
        p = _next_low(b, p, end)
        if p == end or b[p] == PROPERTY_SEP:
            return p
        if sep[0] < 0 and b[p] == NAME_VALUE_SEP:
            sep[0] = p
        p += 1


cdef inline uint64_t _key_bit(uint64_t head, int64_t klen) noexcept nogil:
    # a key's bit of the 64 _props marks for the keys of a record (equal keys, equal bits)
    return (<uint64_t>1) << (((head ^ <uint64_t>klen) * 0x9E3779B97F4A7C15ULL) >> 58)


assert TAGS_LEN <= 8 and KEYS_LEN <= 8, "_props compares these names by their head"
cdef uint64_t TAGS_HEAD = _head(<const uint8_t*>TAGS_NAME, TAGS_LEN)
cdef uint64_t KEYS_HEAD = _head(<const uint8_t*>KEYS_NAME, KEYS_LEN)


cdef int _props(const uint8_t* b, int64_t p, int64_t end, GBuf* keys, GBuf* koff, GBuf* scratch,
                int64_t* tags_e, int64_t* keys_e, bint* all_ascii) noexcept nogil:
    # Split one record's properties text (separators from cq/format.py) into entries,
    # appending each key (UTF-8 replaced) to ``keys`` and its offset to ``koff``; a
    # repeated key (equal after replacement, as dict keys are) keeps its first place
    # and takes the later value. ``scratch`` gets the record's entries; ``all_ascii``
    # says whether the whole text is ASCII (its values then need no UTF-8 check).
    cdef int64_t seg, sep, kstart, klen, m, ne = 0
    cdef uint64_t head, bit, seen = 0
    cdef Entry* ents
    cdef Entry* e
    cdef bint ascii = _ascii_prefix(b + p, end - p) == end - p
    all_ascii[0] = ascii
    scratch.n = 0
    tags_e[0] = -1
    keys_e[0] = -1
    # room for every key of the record, replaced (3 bytes a byte at worst), and for its entries
    if _reserve(keys, 3 * (end - p)) < 0 or _reserve(koff, 4 * (end - p)) < 0 or \
            _reserve(scratch, <int64_t>sizeof(Entry) * (end - p)) < 0:
        return -1
    while p < end:
        seg = p
        p = _entry_end(b, p, end, &sep)
        if sep > seg and p > sep + 1:
            kstart = keys.n
            if ascii:
                _copy(keys.p + kstart, b + seg, sep - seg)
                keys.n += sep - seg
            else:
                keys.n += _utf8_into(keys.p + kstart, b + seg, sep - seg)  # room reserved above
            klen = keys.n - kstart
            # (from the text when the key is its bytes: a load from the bytes just copied
            # would wait for the copy's stores)
            head = _head_in_room(b + seg, klen) if ascii and seg + 8 <= end else _head(keys.p + kstart, klen)
            ents = <Entry*>scratch.p
            # one bit per key head seen in this record: a clear bit means no earlier key can be equal
            bit = _key_bit(head, klen)
            m = ne if (seen & bit) == 0 else 0
            seen |= bit
            while m < ne:
                if ents[m].head == head and ents[m].klen == klen and (
                        klen <= 8 or memcmp(keys.p + ents[m].kstart, keys.p + kstart, klen) == 0):
                    keys.n = kstart  # a repeated key: its first entry takes the value
                    ents[m].vsrc = sep + 1
                    ents[m].vlen = p - sep - 1
                    break
                m += 1
            if m == ne:
                (<int32_t*>(koff.p + koff.n))[0] = <int32_t>kstart
                koff.n += 4
                e = <Entry*>(scratch.p + scratch.n)
                e.kstart = kstart
                e.klen = klen
                e.head = head
                e.vsrc = sep + 1
                e.vlen = p - sep - 1
                scratch.n += sizeof(Entry)
                if klen == TAGS_LEN and head == TAGS_HEAD:  # (both names are under 8 bytes)
                    tags_e[0] = ne
                elif klen == KEYS_LEN and head == KEYS_HEAD:
                    keys_e[0] = ne
                ne += 1
        p += 1
    return <int>ne


cdef int _props_direct(const uint8_t* b, int64_t p, int64_t end, GBuf* keys, GBuf* koff, GBuf* vals,
                       GBuf* voff, int64_t* tv, int64_t* tl, int64_t* kv, int64_t* kl,
                       bint* all_ascii) noexcept nogil:
    # _props and the copy of its values in one pass, for the common record whose keys are all
    # distinct: each entry's key and value go straight to the map's buffers (UTF-8 replaced
    # unless the whole text is ASCII), and the raw spans of the TAGS and KEYS values to tv/tl,
    # kv/kl (-1: none). Returns the entries, -1 out of memory, or -2 at a repeated key: the
    # caller then drops what this wrote for the record and takes _props' way. ``all_ascii``
    # as _props gives it. (The buffers' ends are kept in locals: a byte store may alias any
    # GBuf field, which would make the compiler reload each after every copy.)
    cdef int64_t seg, sep, klen, vlen, m, ne = 0
    cdef uint64_t head, bit, seen = 0
    cdef bint ascii = _ascii_prefix(b + p, end - p) == end - p
    cdef uint8_t* kp
    cdef uint8_t* vp
    cdef int32_t* ko
    cdef int32_t* vo
    cdef int64_t kn, vn
    all_ascii[0] = ascii
    tv[0] = -1
    kv[0] = -1
    # room for every key and value of the record, replaced (3 bytes a byte at worst), and offsets
    if _reserve(keys, 3 * (end - p)) < 0 or _reserve(koff, 4 * (end - p)) < 0 or \
            _reserve(vals, 3 * (end - p)) < 0 or _reserve(voff, 4 * (end - p)) < 0:
        return -1
    kp = keys.p
    kn = keys.n
    vp = vals.p
    vn = vals.n
    ko = <int32_t*>(koff.p + koff.n)
    vo = <int32_t*>(voff.p + voff.n)
    while p < end:
        seg = p
        p = _entry_end(b, p, end, &sep)
        if sep > seg and p > sep + 1:
            vlen = p - sep - 1
            if ascii:
                klen = sep - seg
                _copy(kp + kn, b + seg, klen)
                # (from the text: a load from the bytes just copied would wait for the stores)
                head = _head_in_room(b + seg, klen) if seg + 8 <= end else _head(b + seg, klen)
            else:
                klen = _utf8_into(kp + kn, b + seg, sep - seg)
                head = _head(kp + kn, klen)
            # one bit per key head seen in this record: a clear bit means no earlier key can be equal
            bit = _key_bit(head, klen)
            if seen & bit:
                for m in range(ne):  # the earlier keys' spans, from their offsets
                    seg = ko[m - ne]
                    sep = ko[m + 1 - ne] if m + 1 < ne else kn
                    if sep - seg == klen and memcmp(kp + seg, kp + kn, klen) == 0:
                        return -2
            seen |= bit
            ko[0] = <int32_t>kn
            ko += 1
            kn += klen
            vo[0] = <int32_t>vn
            vo += 1
            if ascii:
                _copy(vp + vn, b + p - vlen, vlen)
                vn += vlen
            else:
                vn += _utf8_into(vp + vn, b + p - vlen, vlen)
            if klen == TAGS_LEN and head == TAGS_HEAD:  # (both names are under 8 bytes)
                tv[0] = p - vlen
                tl[0] = vlen
            elif klen == KEYS_LEN and head == KEYS_HEAD:
                kv[0] = p - vlen
                kl[0] = vlen
            ne += 1
        p += 1
    keys.n = kn
    vals.n = vn
    koff.n = <uint8_t*>ko - koff.p
    voff.n = <uint8_t*>vo - voff.p
    return <int>ne


cdef enum:
    F_STORE_SIZE, F_MAGIC, F_BODY_CRC, F_QUEUE_ID, F_FLAG, F_QUEUE_OFFSET, F_PHYS, F_SYS_FLAG
    F_BORN_TS, F_BORN_HOST, F_STORE_TS, F_STORE_HOST, F_RECONSUME, F_PREPARED, F_BODY, F_TOPIC
    F_PROPERTIES, F_TAGS, F_KEYS, N_FIELDS

assert [name for name, _ in fmt.RECORD_FIELDS] == [
    "store_size", "magic_code", "body_crc", "queue_id", "flag", "queue_offset", "commit_log_offset",
    "sys_flag", "born_timestamp", "born_host", "store_timestamp", "store_host", "reconsume_times",
    "prepared_transaction_offset", "body", "topic", "properties", "tags", "keys"], "RECORD_FIELDS moved"

DEF INT32_MAX = 2147483647
# decode_columns' buffer slots beyond the fields' own: the map's key offsets, value offsets,
# key bytes and value bytes; _rates holds each slot's bytes per row in the last decode
cdef enum:
    SLOT_KOFF = N_FIELDS
    SLOT_VOFF
    SLOT_PKEYS
    SLOT_PVALS
    N_SLOTS
cdef double _rates[N_SLOTS]
memset(_rates, 0, sizeof(_rates))


cdef void _pool_take(GBuf* g, int slot, int64_t rows):
    # a pooled buffer for ``slot``, sized by the bytes per row it took last time
    _pool_get(g, <int64_t>(_rates[slot] * rows * 1.125))


cdef void _rate_note(GBuf* g, int slot, int64_t rows):
    if rows > 0 and g.n > 0:
        _rates[slot] = <double>g.n / rows
DEF PREFETCH_AHEAD = 8
DEF PREFETCH_BYTES = 512
DEF SIZING_ROWS = 256


def decode_columns(const uint8_t[::1] buf, const int64_t[::1] positions, int64_t limit, int64_t mask):
    """Decode the records at ``positions`` into the Arrow buffers of the fields in ``mask``.

    ``mask`` has bit ``1 << i`` for field ``i`` of ``cq.format.RECORD_FIELDS``.
    Returns ``(columns, error)``. ``columns`` maps each asked field to: an
    int32/int64 array (fixed fields); ``(offsets int32 (k + 1), data uint8,
    valid)`` for ``str``/``bin`` fields (``valid`` a uint8 0/1 array for
    ``tags``/``keys``, None otherwise; text is UTF-8 with each malformed
    subpart replaced by U+FFFD, as ``read_message`` decodes it); for
    ``properties``, ``(map_offsets int32 (k + 1), key_offsets int32 (e + 1),
    key_data, value_offsets int32 (e + 1), value_data)`` in ``read_message``'s
    dict order (first-seen key, later value wins). ``error`` is None or
    ``(index, reason, offset)`` of the first invalid record, as
    ``decode_records`` gives it (rows from it on are left zero). Raises
    OverflowError when a column passes 2 GiB (ask for fewer records).
    """
    cdef Py_ssize_t i, k = positions.shape[0]
    cdef int64_t n = buf.shape[0], pos, h, j, pf
    cdef Rec r
    cdef int code = 0, fail = 0, ne
    cdef Py_ssize_t bad = -1
    cdef int64_t tags_e, keys_e, tv = -1, tl = 0, kv = -1, kl = 0, k0, ko0, v0, vo0
    cdef Entry* ents
    cdef bint want[N_FIELDS]
    cdef GBuf g[N_FIELDS]
    cdef GBuf koff, voff, scratch, pkeys, pvals
    cdef HostCache born_cache[HOST_SLOTS]
    cdef HostCache store_cache[HOST_SLOTS]
    cdef bint need_props, props_ascii = 0, ascii_values
    if limit < 0 or limit > n:
        raise ValueError(f"limit {limit} outside the buffer of {n} bytes")
    for j in range(N_FIELDS):
        want[j] = (mask >> j) & 1
    memset(g, 0, sizeof(g))
    memset(&koff, 0, sizeof(GBuf))
    memset(&voff, 0, sizeof(GBuf))
    memset(&scratch, 0, sizeof(GBuf))
    memset(&pkeys, 0, sizeof(GBuf))
    memset(&pvals, 0, sizeof(GBuf))
    for j in range(HOST_SLOTS):
        born_cache[j].length = -1
        store_cache[j].length = -1
    need_props = want[F_PROPERTIES] or want[F_TAGS] or want[F_KEYS]
    for j in (F_BORN_HOST, F_STORE_HOST, F_BODY, F_TOPIC, F_TAGS, F_KEYS):
        if want[j]:
            _pool_take(&g[j], j, k)
    if want[F_PROPERTIES]:
        _pool_take(&koff, SLOT_KOFF, k)
        _pool_take(&voff, SLOT_VOFF, k)
        _pool_take(&pkeys, SLOT_PKEYS, k)
        _pool_take(&pvals, SLOT_PVALS, k)
    cols = {}
    ints = {}
    for j, (name, kind) in enumerate(fmt.RECORD_FIELDS):
        if want[j] and kind in ("i4", "i8"):
            ints[j] = cols[name] = _pooled_zeros(k, kind)
    var_offsets = {}
    for j in (F_BORN_HOST, F_STORE_HOST, F_BODY, F_TOPIC, F_TAGS, F_KEYS, F_PROPERTIES):
        if want[j]:
            var_offsets[j] = _pooled_zeros(k + 1, np.int32)
    valid_tags = np.zeros(k if want[F_TAGS] else 0, dtype=np.uint8)
    valid_keys = np.zeros(k if want[F_KEYS] else 0, dtype=np.uint8)
    cdef int32_t[::1] o_born = var_offsets.get(F_BORN_HOST, np.zeros(1, np.int32))
    cdef int32_t[::1] o_store = var_offsets.get(F_STORE_HOST, np.zeros(1, np.int32))
    cdef int32_t[::1] o_body = var_offsets.get(F_BODY, np.zeros(1, np.int32))
    cdef int32_t[::1] o_topic = var_offsets.get(F_TOPIC, np.zeros(1, np.int32))
    cdef int32_t[::1] o_tags = var_offsets.get(F_TAGS, np.zeros(1, np.int32))
    cdef int32_t[::1] o_keys = var_offsets.get(F_KEYS, np.zeros(1, np.int32))
    cdef int32_t[::1] o_map = var_offsets.get(F_PROPERTIES, np.zeros(1, np.int32))
    cdef uint8_t[::1] v_tags = valid_tags, v_keys = valid_keys
    cdef int32_t[::1] c_size = ints.get(F_STORE_SIZE, np.zeros(0, np.int32))
    cdef int32_t[::1] c_magic = ints.get(F_MAGIC, np.zeros(0, np.int32))
    cdef int32_t[::1] c_crc = ints.get(F_BODY_CRC, np.zeros(0, np.int32))
    cdef int32_t[::1] c_qid = ints.get(F_QUEUE_ID, np.zeros(0, np.int32))
    cdef int32_t[::1] c_flag = ints.get(F_FLAG, np.zeros(0, np.int32))
    cdef int64_t[::1] c_qoff = ints.get(F_QUEUE_OFFSET, np.zeros(0, np.int64))
    cdef int64_t[::1] c_phys = ints.get(F_PHYS, np.zeros(0, np.int64))
    cdef int32_t[::1] c_sysf = ints.get(F_SYS_FLAG, np.zeros(0, np.int32))
    cdef int64_t[::1] c_bts = ints.get(F_BORN_TS, np.zeros(0, np.int64))
    cdef int64_t[::1] c_sts = ints.get(F_STORE_TS, np.zeros(0, np.int64))
    cdef int32_t[::1] c_recon = ints.get(F_RECONSUME, np.zeros(0, np.int32))
    cdef int64_t[::1] c_prep = ints.get(F_PREPARED, np.zeros(0, np.int64))
    if k and n == 0:
        return cols, (0, f"record header needs 8 bytes, {limit - positions[0]} left in the file", positions[0])
    cdef const uint8_t* b = &buf[0] if n else NULL
    with nogil:
        for i in range(k):
            # records are scattered through the file (other topics and queues between them): ask
            # for the first line of a record well ahead, and a few records ahead, its size read
            # from that line, for every line of it (its properties text, read last, ends it)
            if i + 2 * PREFETCH_AHEAD < k:
                pf = positions[i + 2 * PREFETCH_AHEAD]
                if 0 <= pf < n:
                    rmq_prefetch(b + pf)
            if i + PREFETCH_AHEAD < k:
                pf = positions[i + PREFETCH_AHEAD]
                if 0 <= pf and pf + 4 <= n:
                    h = <int32_t>rmq_load_be32(b + pf)
                    if h > PREFETCH_BYTES:  # (a long record's head is what is read first)
                        h = PREFETCH_BYTES
                    if h > 64 and pf + h <= n:
                        j = (pf & ~(<int64_t>63)) + 64
                        while j < pf + h:
                            rmq_prefetch(b + j)
                            j += 64
            if i == SIZING_ROWS and k > 2 * SIZING_ROWS:
                # the first rows tell each buffer's bytes per row: reserve for all rows at once
                for j in range(N_FIELDS):
                    _reserve_rows(&g[j], i, k)
                _reserve_rows(&pkeys, i, k)
                _reserve_rows(&pvals, i, k)
                _reserve_rows(&koff, i, k)
                _reserve_rows(&voff, i, k)
            pos = positions[i]
            code = _parse(b, pos, limit, &r)
            if code:
                bad = i
                break
            if want[F_STORE_SIZE]:
                c_size[i] = r.total
            if want[F_MAGIC]:
                c_magic[i] = r.magic
            if want[F_BODY_CRC]:
                c_crc[i] = <int32_t>rmq_load_be32(b + pos + 8)
            if want[F_QUEUE_ID]:
                c_qid[i] = <int32_t>rmq_load_be32(b + pos + 12)
            if want[F_FLAG]:
                c_flag[i] = <int32_t>rmq_load_be32(b + pos + 16)
            if want[F_QUEUE_OFFSET]:
                c_qoff[i] = <int64_t>rmq_load_be64(b + pos + 20)
            if want[F_PHYS]:
                c_phys[i] = <int64_t>rmq_load_be64(b + pos + 28)
            if want[F_SYS_FLAG]:
                c_sysf[i] = r.sys_flag
            if want[F_BORN_TS]:
                c_bts[i] = <int64_t>rmq_load_be64(b + pos + 40)
            h = pos + 48
            if want[F_BORN_HOST]:
                if _host_column(&g[F_BORN_HOST], born_cache, b + h, r.bw,
                                <int32_t>rmq_load_be32(b + h + r.bw)) < 0:
                    fail = 1
                    break
                o_born[i + 1] = <int32_t>g[F_BORN_HOST].n
            h += r.bw + 4
            if want[F_STORE_TS]:
                c_sts[i] = <int64_t>rmq_load_be64(b + h)
            h += 8
            if want[F_STORE_HOST]:
                if _host_column(&g[F_STORE_HOST], store_cache, b + h, r.sw,
                                <int32_t>rmq_load_be32(b + h + r.sw)) < 0:
                    fail = 1
                    break
                o_store[i + 1] = <int32_t>g[F_STORE_HOST].n
            h += r.sw + 4
            if want[F_RECONSUME]:
                c_recon[i] = <int32_t>rmq_load_be32(b + h)
            if want[F_PREPARED]:
                c_prep[i] = <int64_t>rmq_load_be64(b + h + 4)
            if want[F_BODY]:
                if _put(&g[F_BODY], b + r.body, r.blen) < 0:
                    fail = 1
                    break
                o_body[i + 1] = <int32_t>g[F_BODY].n
            if want[F_TOPIC]:
                if _put_utf8(&g[F_TOPIC], b + r.topic, r.topic_len) < 0:
                    fail = 1
                    break
                o_topic[i + 1] = <int32_t>g[F_TOPIC].n
            if want[F_PROPERTIES]:
                k0, ko0, v0, vo0 = pkeys.n, koff.n, pvals.n, voff.n
                ne = _props_direct(b, r.props, r.props + r.plen, &pkeys, &koff, &pvals, &voff,
                                   &tv, &tl, &kv, &kl, &props_ascii)
                if ne == -1:
                    fail = 1
                    break
                if ne == -2:  # a repeated key: its first place, its later value
                    pkeys.n, koff.n, pvals.n, voff.n = k0, ko0, v0, vo0
                    ne = _props(b, r.props, r.props + r.plen, &pkeys, &koff, &scratch, &tags_e, &keys_e,
                                &props_ascii)
                    if ne < 0:
                        fail = 1
                        break
                    ents = <Entry*>scratch.p
                    if _reserve(&pvals, 3 * r.plen) < 0 or _reserve(&voff, 4 * ne) < 0:
                        fail = 1
                        break
                    for j in range(ne):
                        (<int32_t*>(voff.p + voff.n))[0] = <int32_t>pvals.n
                        voff.n += 4
                        if props_ascii:
                            _copy(pvals.p + pvals.n, b + ents[j].vsrc, ents[j].vlen)
                            pvals.n += ents[j].vlen
                        else:
                            pvals.n += _utf8_into(pvals.p + pvals.n, b + ents[j].vsrc, ents[j].vlen)
                    tv = ents[tags_e].vsrc if tags_e >= 0 else -1
                    tl = ents[tags_e].vlen if tags_e >= 0 else 0
                    kv = ents[keys_e].vsrc if keys_e >= 0 else -1
                    kl = ents[keys_e].vlen if keys_e >= 0 else 0
                o_map[i + 1] = o_map[i] + ne
            elif need_props:
                _tags_keys(b, r.props, r.props + r.plen, &tv, &tl, &kv, &kl)
            # values inside properties text already found all ASCII need no UTF-8 check: a plain copy
            ascii_values = want[F_PROPERTIES] and props_ascii
            if want[F_TAGS]:
                if tv >= 0:
                    v_tags[i] = 1
                    if (_put(&g[F_TAGS], b + tv, tl) if ascii_values else _put_utf8(&g[F_TAGS], b + tv, tl)) < 0:
                        fail = 1
                        break
                o_tags[i + 1] = <int32_t>g[F_TAGS].n
            if want[F_KEYS]:
                if kv >= 0:
                    v_keys[i] = 1
                    if (_put(&g[F_KEYS], b + kv, kl) if ascii_values else _put_utf8(&g[F_KEYS], b + kv, kl)) < 0:
                        fail = 1
                        break
                o_keys[i + 1] = <int32_t>g[F_KEYS].n
            # only the variable-length buffers grow (the fixed fields write numpy arrays)
            if (g[F_BORN_HOST].n > INT32_MAX or g[F_STORE_HOST].n > INT32_MAX or g[F_BODY].n > INT32_MAX
                    or g[F_TOPIC].n > INT32_MAX or g[F_TAGS].n > INT32_MAX or g[F_KEYS].n > INT32_MAX
                    or pkeys.n > INT32_MAX or pvals.n > INT32_MAX):
                fail = 2
                break
    try:
        if fail == 1:
            raise MemoryError()
        if fail == 2:
            raise OverflowError(f"a column of {k} records passes 2 GiB: decode fewer records at a time")
        if bad < 0:
            for j in (F_BORN_HOST, F_STORE_HOST, F_BODY, F_TOPIC, F_TAGS, F_KEYS):
                _rate_note(&g[j], j, k)
            _rate_note(&koff, SLOT_KOFF, k)
            _rate_note(&voff, SLOT_VOFF, k)
            _rate_note(&pkeys, SLOT_PKEYS, k)
            _rate_note(&pvals, SLOT_PVALS, k)
        names = [name for name, _ in fmt.RECORD_FIELDS]
        for j in (F_BORN_HOST, F_STORE_HOST, F_BODY, F_TOPIC):
            if want[j]:
                cols[names[j]] = (var_offsets[j], _take(&g[j], np.uint8, g[j].n), None)
        if want[F_TAGS]:
            cols["tags"] = (var_offsets[F_TAGS], _take(&g[F_TAGS], np.uint8, g[F_TAGS].n), valid_tags)
        if want[F_KEYS]:
            cols["keys"] = (var_offsets[F_KEYS], _take(&g[F_KEYS], np.uint8, g[F_KEYS].n), valid_keys)
        if want[F_PROPERTIES]:
            if _put_i32(&koff, <int32_t>pkeys.n) < 0 or _put_i32(&voff, <int32_t>pvals.n) < 0:
                raise MemoryError()
            cols["properties"] = (var_offsets[F_PROPERTIES], _take(&koff, np.int32, koff.n // 4),
                                  _take(&pkeys, np.uint8, pkeys.n), _take(&voff, np.int32, voff.n // 4),
                                  _take(&pvals, np.uint8, pvals.n))
    finally:
        for j in range(N_FIELDS):
            _pool_put(g[j].p, g[j].cap)
        _pool_put(koff.p, koff.cap)
        _pool_put(voff.p, voff.cap)
        free(scratch.p)
        _pool_put(pkeys.p, pkeys.cap)
        _pool_put(pvals.p, pvals.cap)
    if bad >= 0:
        for arr in var_offsets.values():  # offsets stay monotonic: the rows from ``bad`` on are empty
            arr[bad + 1:] = arr[bad]
        return cols, (bad, _parse_error(code, &r, positions[bad], limit), r.at)
    return cols, None


def copy_records(const int32_t[::1] fds, const int64_t[::1] positions, const int64_t[::1] sizes,
                 int64_t file_size):
    """Copy record ``i`` from open CommitLog file ``fds[i]`` at ``positions[i]``, ``sizes[i]`` bytes, back to back.

    What ``decode_columns`` needs to decode the records out of the copy
    instead of the mapped files (docs/data-path.md#consume): ``(data,
    starts)``, a uint8 array of the records and each one's start in it. None
    when a record does not lie inside ``file_size``, a read comes short, or a
    copied record's TOTALSIZE is not its size: the caller then reads the
    mapped files, where the decoder names what is wrong. Records that follow
    each other in one file are read in one call.
    """
    cdef Py_ssize_t i, j, k = positions.shape[0]
    cdef int64_t total = 0, got, want
    cdef int ok = 1
    cdef GBuf g
    if sizes.shape[0] != k or fds.shape[0] != k:
        raise ValueError(f"{k} positions need {k} sizes and file descriptors, got {sizes.shape[0]} "
                         f"and {fds.shape[0]}")
    for i in range(k):
        if positions[i] < 0 or sizes[i] < 8 or sizes[i] > file_size - positions[i]:
            return None
        total += sizes[i]
    starts = np.empty(k, dtype=np.int64)
    cdef int64_t[::1] st = starts
    memset(&g, 0, sizeof(GBuf))
    _pool_get(&g, total)
    if g.cap < total:
        _pool_put(g.p, g.cap)
        g.p = <uint8_t*>malloc(total if total else 1)
        if g.p == NULL:
            raise MemoryError()
        g.cap = total
    with nogil:
        i = 0
        while i < k and ok:
            j = i + 1  # a run of records that follow each other in one file: one read
            want = sizes[i]
            while j < k and fds[j] == fds[i] and positions[j] == positions[j - 1] + sizes[j - 1]:
                want += sizes[j]
                j += 1
            got = pread(fds[i], g.p + g.n, want, positions[i])
            if got != want:
                ok = 0
                break
            while i < j:
                st[i] = g.n
                if <int64_t>rmq_load_be32(g.p + g.n) != sizes[i]:
                    ok = 0
                    break
                g.n += sizes[i]
                i += 1
    if not ok:
        _pool_put(g.p, g.cap)
        return None
    return _take(&g, np.uint8, g.n), starts


rmq_crc_init()
DEF SHORT_CRC = 2048  # bodies up to this many bytes are checked inline, longer ones by zlib


cdef uint32_t _crc32(const uint8_t* p, int64_t n) noexcept nogil:
    # zlib's CRC-32 of n bytes: short ones inline, long ones by zlib (whose length is an unsigned int)
    cdef uint32_t crc = 0
    cdef int64_t done = 0, step
    if n <= SHORT_CRC:
        return rmq_crc32_short(p, n)
    while done < n:
        step = n - done if n - done < (1 << 30) else (1 << 30)
        crc = <uint32_t>crc32(crc, p + done, <unsigned int>step)
        done += step
    return crc


def crc32_of(const uint8_t[::1] data):
    """CRC-32 of ``data`` as ``zlib.crc32`` gives it, by the recovery walk's own code (tests compare the two)."""
    if data.shape[0] == 0:
        return 0
    return _crc32(&data[0], data.shape[0])


rmq_adler_init()


def adler32_of(const uint8_t[::1] data):
    """Adler-32 of ``data`` as ``zlib.adler32`` gives it, by ``inflate_bodies``' own code (tests compare the two)."""
    if data.shape[0] == 0:
        return 1
    return rmq_adler32(&data[0], data.shape[0])


def body_crc_mismatch(const uint8_t[::1] buf, int64_t pos, int64_t end):
    """Position of the first record in ``buf[pos:end]`` whose BODYCRC does not match, or -1.

    ``buf[pos:end]`` holds records that passed the recovery walk's checks
    (``commit_log_walk``); each is parsed again here, so nothing is read
    outside a record. BODYCRC is the body's CRC-32 with the sign bit cleared.
    """
    cdef Rec r
    cdef int64_t found = -1
    cdef uint32_t crc
    if pos < 0 or end > buf.shape[0] or pos > end:
        raise ValueError(f"range [{pos}, {end}) outside the buffer of {buf.shape[0]} bytes")
    if pos == end:
        return -1
    cdef const uint8_t* b = &buf[0]
    with nogil:
        while pos < end:
            if _parse(b, pos, end, &r):
                found = pos
                break
            crc = _crc32(b + r.body, r.blen)
            if <int32_t>(crc & 0x7FFFFFFF) != <int32_t>rmq_load_be32(b + pos + 8):
                found = pos
                break
            pos += r.total
    return found


def record_positions(const uint8_t[::1] buf, int64_t pos, int64_t limit, int64_t max_records):
    """Positions of the valid records from ``pos`` (readable end ``limit``), at most ``max_records``.

    Returns ``(positions int64, position, status)``: ``position`` is where the
    walk stopped; status 0: unwritten space or fewer than 8 bytes left (the end
    of the data); 1: a blank end-of-file record there; 2: an invalid record
    there; 3: ``max_records`` found (call again from ``position``). The checks
    are ``commit_log_walk``'s.
    """
    cdef int64_t count = 0
    cdef int status = 0
    if pos < 0 or max_records < 0:
        raise ValueError(f"pos and max_records must be >= 0, got {pos}, {max_records}")
    if limit < 0 or limit > buf.shape[0]:
        raise ValueError(f"limit {limit} outside the buffer of {buf.shape[0]} bytes")
    out = np.empty(max_records, dtype=np.int64)
    cdef int64_t[::1] o = out
    if limit == 0:
        return out[:0], pos, 0
    cdef const uint8_t* base = &buf[0]
    with nogil:
        while True:
            if count == max_records:
                status = 3
                break
            status = _walk_stop(base, pos, limit)
            if status >= 0:
                break
            o[count] = pos
            count += 1
            pos += <int32_t>rmq_load_be32(base + pos)
    return out[:count], pos, status


# ------------------------------------------------------------------ columns -> Python objects
# For the APIs that hand out Python objects (cq.Message): one str or dict per row, built
# here from the decoder's buffers (valid UTF-8: the decoder replaced malformed bytes).

cdef inline bint _bytes_eq(const uint8_t* d, int32_t a, int32_t b, int32_t c, int32_t e) noexcept:
    return b - a == e - c and (b == a or memcmp(d + a, d + c, b - a) == 0)


cdef inline object _str_at(const uint8_t* d, int32_t a, int32_t b):
    if b <= a:
        return ""
    return PyUnicode_DecodeUTF8(<const char*>(d + a), b - a, NULL)


cdef inline const uint8_t* _data_ptr(const uint8_t[::1] d):
    return &d[0] if d.shape[0] else NULL


cdef extern from "Python.h":
    object _PyDict_NewPresized(Py_ssize_t minused)  # CPython: a dict with room for minused entries


cdef inline Py_ssize_t _row_at(const int64_t[::1] rows, bint all_rows, Py_ssize_t i, Py_ssize_t n) except -1:
    cdef Py_ssize_t r = i if all_rows else rows[i]
    if r < 0 or r >= n:
        raise IndexError(f"row {r} outside the {n} rows of the column")
    return r


def texts_list(const int32_t[::1] offsets, const uint8_t[::1] data, bint binary=False, const int64_t[::1] rows=None):
    """Rows of a text (or, with ``binary``, bytes) column as str (bytes): rows ``rows`` (default all), in order.

    A row whose bytes equal the previous row's reuses that object (a topic, a host: one str).
    """
    cdef Py_ssize_t i, r, n = offsets.shape[0] - 1, k
    cdef int32_t a, b, pa = 0, pb = 0
    cdef bint all_rows = rows is None
    if n < 0:
        raise ValueError("offsets must hold at least one entry")
    k = n if all_rows else rows.shape[0]
    cdef list out = [None] * k
    if offsets[n] > data.shape[0] or offsets[0] < 0:
        raise ValueError(f"offsets run to {offsets[n]}, past the {data.shape[0]} bytes of data")
    cdef const uint8_t* d = _data_ptr(data)
    prev = b"" if binary else ""
    for i in range(k):
        r = _row_at(rows, all_rows, i, n)
        a = offsets[r]
        b = offsets[r + 1]
        if not _bytes_eq(d, a, b, pa, pb):
            if binary:
                prev = PyBytes_FromStringAndSize(<const char*>(d + a), b - a) if b > a else b""
            else:
                prev = _str_at(d, a, b)
            pa = a
            pb = b
        out[i] = prev
    return out


# One str per distinct key text, and a few recent strs per key for its values: records of a
# topic carry the same keys, and many the same few values (a region, a tag, "true").
DEF KEY_SLOTS = 512       # hash table slots (a power of two)
DEF KEYS_CACHED = 256     # distinct keys remembered; later ones get a str each time
DEF VALUE_WAYS = 4        # values remembered per key


cdef struct KeySlot:
    int32_t ka, kb                    # the key's bytes in key_data
    PyObject* key                     # owned: the key's str
    int32_t va[VALUE_WAYS]
    int32_t vb[VALUE_WAYS]
    PyObject* value[VALUE_WAYS]       # owned or NULL: recent values' strs, their bytes at va:vb
    int next_way
    int32_t hits, misses              # a key whose values never repeat (an id) stops looking


cdef class _DictBuilder:
    """Property dicts of a decoded ``properties`` column, row by row, sharing strs between rows."""
    cdef const int32_t[::1] mo, ko, vo    # held: the pointers below point into them
    cdef const uint8_t[::1] kd, vd
    cdef const uint8_t* kp
    cdef const uint8_t* vp
    cdef KeySlot* slots
    cdef int32_t* by_place    # per entry place: the slot the previous row's key there used, or -1
    cdef Py_ssize_t places, cached, rows

    def __cinit__(self, const int32_t[::1] map_offsets, const int32_t[::1] key_offsets,
                  const uint8_t[::1] key_data, const int32_t[::1] value_offsets,
                  const uint8_t[::1] value_data):
        cdef Py_ssize_t n = map_offsets.shape[0] - 1
        if n < 0:
            raise ValueError("map offsets must hold at least one entry")
        if map_offsets[0] < 0 or map_offsets[n] > key_offsets.shape[0] - 1 or map_offsets[n] > value_offsets.shape[0] - 1:
            raise ValueError(f"map offsets run to entry {map_offsets[n]}, past the entries given")
        if map_offsets[n] > 0 and (key_offsets[map_offsets[n]] > key_data.shape[0]
                                   or value_offsets[map_offsets[n]] > value_data.shape[0]):
            raise ValueError("entry offsets run past their data")
        self.mo = map_offsets
        self.ko = key_offsets
        self.kd = key_data
        self.vo = value_offsets
        self.vd = value_data
        self.rows = n
        self.kp = &key_data[0] if key_data.shape[0] else NULL
        self.vp = &value_data[0] if value_data.shape[0] else NULL
        self.slots = <KeySlot*>calloc(KEY_SLOTS, sizeof(KeySlot))
        if self.slots == NULL:
            raise MemoryError()

    def __dealloc__(self):
        cdef Py_ssize_t i, w
        if self.slots != NULL:
            for i in range(KEY_SLOTS):
                Py_XDECREF(self.slots[i].key)
                for w in range(VALUE_WAYS):
                    Py_XDECREF(self.slots[i].value[w])
            free(self.slots)
        free(self.by_place)

    cdef int32_t _slot(self, int32_t a, int32_t b) except -2:
        # the slot holding key bytes kd[a:b], added if there is room; -1 when the table is full
        cdef uint64_t h = _head(self.kp + a, b - a) if b > a else 0
        cdef uint32_t i = <uint32_t>(((h ^ <uint64_t>(b - a)) * 0x9E3779B97F4A7C15ULL) >> 55) & (KEY_SLOTS - 1)
        cdef KeySlot* s
        while True:
            s = &self.slots[i]
            if s.key == NULL:
                if self.cached >= KEYS_CACHED:
                    return -1
                key = _str_at(self.kp, a, b)
                Py_INCREF(key)
                s.key = <PyObject*>key
                s.ka = a
                s.kb = b
                self.cached += 1
                return i
            if _bytes_eq(self.kp, s.ka, s.kb, a, b):
                return i
            i = (i + 1) & (KEY_SLOTS - 1)

    cdef object _value(self, KeySlot* s, int32_t a, int32_t b):
        cdef int w
        if s.misses >= 32 and 8 * s.hits < s.misses:
            return _str_at(self.vp, a, b)
        for w in range(VALUE_WAYS):
            if s.value[w] != NULL and _bytes_eq(self.vp, s.va[w], s.vb[w], a, b):
                s.hits += 1
                return <object>s.value[w]
        s.misses += 1
        value = _str_at(self.vp, a, b)
        w = s.next_way
        s.next_way = (w + 1) % VALUE_WAYS
        Py_XDECREF(s.value[w])
        Py_INCREF(value)
        s.value[w] = <PyObject*>value
        s.va[w] = a
        s.vb[w] = b
        return value

    cdef dict row(self, Py_ssize_t r):
        cdef int32_t e0 = self.mo[r], e1 = self.mo[r + 1], e, a, b, si
        cdef Py_ssize_t j
        cdef int32_t* grown
        cdef KeySlot* s
        cdef dict out = _PyDict_NewPresized(e1 - e0)
        if e1 - e0 > self.places:
            grown = <int32_t*>realloc(self.by_place, (e1 - e0) * sizeof(int32_t))
            if grown == NULL:
                raise MemoryError()
            self.by_place = grown
            for j in range(self.places, e1 - e0):
                grown[j] = -1
            self.places = e1 - e0
        for e in range(e0, e1):
            j = e - e0
            a = self.ko[e]
            b = self.ko[e + 1]
            si = self.by_place[j]
            if si < 0 or not _bytes_eq(self.kp, self.slots[si].ka, self.slots[si].kb, a, b):
                si = self._slot(a, b)
                self.by_place[j] = si
            if si < 0:  # more distinct keys than the table holds
                out[_str_at(self.kp, a, b)] = _str_at(self.vp, self.vo[e], self.vo[e + 1])
            else:
                s = &self.slots[si]
                out[<object>s.key] = self._value(s, self.vo[e], self.vo[e + 1])
        return out


def property_dicts(const int32_t[::1] map_offsets, const int32_t[::1] key_offsets, const uint8_t[::1] key_data,
                   const int32_t[::1] value_offsets, const uint8_t[::1] value_data, const int64_t[::1] rows=None):
    """Rows of a ``properties`` column as dicts (entries in order): rows ``rows`` (default all), in order.

    Records of a topic tend to carry the same keys, and many the same few values: each
    distinct key text is one str shared by the rows, and a value equal to one of the last
    few of its key reuses that str.
    """
    cdef _DictBuilder dicts = _DictBuilder(map_offsets, key_offsets, key_data, value_offsets, value_data)
    cdef Py_ssize_t i, n = dicts.rows
    cdef bint all_rows = rows is None
    cdef Py_ssize_t k = n if all_rows else rows.shape[0]
    cdef list out = [None] * k
    for i in range(k):
        out[i] = dicts.row(_row_at(rows, all_rows, i, n))
    return out


cdef inline object _text_reusing(const int32_t[::1] offsets, const uint8_t* d, Py_ssize_t r,
                                 int32_t* pa, int32_t* pb, object prev):
    # row r of a text column: ``prev`` (the last row built) when its bytes are equal
    cdef int32_t a = offsets[r], b = offsets[r + 1]
    if _bytes_eq(d, a, b, pa[0], pb[0]) and prev is not None:
        return prev
    pa[0] = a
    pb[0] = b
    return _str_at(d, a, b)


cdef extern from "Python.h":
    object PyObject_Vectorcall(object callable, PyObject** args, size_t nargsf, PyObject* kwnames)
    PyObject* PyTuple_GET_ITEM(object t, Py_ssize_t i)


cdef tuple _NO_ARGS = ()


cdef class _MessageBuilder:
    """``cls(*fields)`` of rows of a decoded column set (every record field), one at a time."""
    cdef object cls
    cdef object init        # cls.__init__ when cls is made by object.__new__: called without type()'s detour
    cdef _DictBuilder dicts
    cdef const int32_t[::1] c_size, c_magic, c_crc, c_qid, c_flag, c_sysf, c_recon
    cdef const int64_t[::1] c_qoff, c_phys, c_bts, c_sts, c_prep
    cdef const int32_t[::1] o_born, o_store, o_body, o_topic
    cdef const uint8_t[::1] d_born, d_store, d_body, d_topic   # held: the pointers point into them
    cdef const uint8_t* p_born
    cdef const uint8_t* p_store
    cdef const uint8_t* p_body
    cdef const uint8_t* p_topic
    cdef const int64_t[::1] rows, file_index, file_offsets
    cdef list paths
    cdef Py_ssize_t n, k
    cdef int32_t born_a, born_b, store_a, store_b, topic_a, topic_b
    cdef object born, store, body, topic

    def __cinit__(self, cls, dict columns, const int64_t[::1] rows, const int64_t[::1] file_index, list paths,
                  const int64_t[::1] file_offsets):
        self.dicts = _DictBuilder(*columns["properties"])
        n = self.n = self.dicts.rows
        self.k = rows.shape[0]
        if file_index.shape[0] != self.k or file_offsets.shape[0] != self.k:
            raise ValueError(f"{self.k} rows need {self.k} file indices and offsets")
        for name, kind in fmt.RECORD_FIELDS[:F_PROPERTIES]:
            if kind in ("i4", "i8") and len(columns[name]) != n:
                raise ValueError(f"column {name} holds {len(columns[name])} rows beside {n} rows of properties")
            if kind in ("str", "bin"):
                o, d = columns[name][0], columns[name][1]
                if len(o) != n + 1 or o[0] < 0 or o[n] > len(d):
                    raise ValueError(f"column {name}'s offsets do not fit {n} rows and its {len(d)} bytes")
        self.cls = cls
        if isinstance(cls, type) and cls.__new__ is object.__new__:
            self.init = cls.__init__
        self.c_size = columns["store_size"]
        self.c_magic = columns["magic_code"]
        self.c_crc = columns["body_crc"]
        self.c_qid = columns["queue_id"]
        self.c_flag = columns["flag"]
        self.c_sysf = columns["sys_flag"]
        self.c_recon = columns["reconsume_times"]
        self.c_qoff = columns["queue_offset"]
        self.c_phys = columns["commit_log_offset"]
        self.c_bts = columns["born_timestamp"]
        self.c_sts = columns["store_timestamp"]
        self.c_prep = columns["prepared_transaction_offset"]
        self.o_born, self.d_born = columns["born_host"][0], columns["born_host"][1]
        self.o_store, self.d_store = columns["store_host"][0], columns["store_host"][1]
        self.o_body, self.d_body = columns["body"][0], columns["body"][1]
        self.o_topic, self.d_topic = columns["topic"][0], columns["topic"][1]
        self.p_born = _data_ptr(self.d_born)
        self.p_store = _data_ptr(self.d_store)
        self.p_body = _data_ptr(self.d_body)
        self.p_topic = _data_ptr(self.d_topic)
        self.rows = rows
        self.file_index = file_index
        self.file_offsets = file_offsets
        self.paths = paths

    cdef object build(self, Py_ssize_t i):
        cdef Py_ssize_t r = self.rows[i]
        cdef int64_t f = self.file_index[i]
        if r < 0 or r >= self.n:
            raise IndexError(f"row {r} outside the {self.n} rows of the columns")
        if f < 0 or f >= len(self.paths):
            raise IndexError(f"file index {f} outside the {len(self.paths)} paths")
        self.born = _text_reusing(self.o_born, self.p_born, r, &self.born_a, &self.born_b, self.born)
        self.store = _text_reusing(self.o_store, self.p_store, r, &self.store_a, &self.store_b, self.store)
        # (bodies differ from message to message: each its own bytes, no comparison)
        self.body = PyBytes_FromStringAndSize(<const char*>(self.p_body + self.o_body[r]),
                                              self.o_body[r + 1] - self.o_body[r])
        self.topic = _text_reusing(self.o_topic, self.p_topic, r, &self.topic_a, &self.topic_b, self.topic)
        fields = (self.c_size[r], self.c_magic[r], self.c_crc[r], self.c_qid[r], self.c_flag[r], self.c_qoff[r],
                  self.c_phys[r], self.c_sysf[r], self.c_bts[r], self.born, self.c_sts[r], self.store,
                  self.c_recon[r], self.c_prep[r], self.body, self.topic, self.dicts.row(r), self.paths[f],
                  self.file_offsets[i])
        if self.init is None:
            return self.cls(*fields)
        # what cls(*fields) does for a class that object.__new__ makes: allocate, then __init__
        # with the fields in place (no argument tuple rebuilt, no lookup of __init__ per call)
        cdef PyObject* args[32]
        cdef Py_ssize_t j, m = len(fields)
        obj = (<PyTypeObject*>self.cls).tp_new(self.cls, <PyObject*>_NO_ARGS, NULL)
        args[0] = <PyObject*>obj
        for j in range(m):
            args[j + 1] = PyTuple_GET_ITEM(fields, j)
        PyObject_Vectorcall(self.init, args, m + 1, NULL)
        return obj


def message_objects(cls, dict columns, const int64_t[::1] rows, const int64_t[::1] file_index, list paths,
                    const int64_t[::1] file_offsets):
    """``cls(*fields)`` for rows ``rows`` of a decoded column set (every record field), in order.

    The positional fields are ``cq.format.RECORD_FIELDS`` up to ``properties``
    (``tags`` and ``keys`` are not passed), then ``paths[file_index[i]]`` and
    ``file_offsets[i]``: ``cq.Message``'s order. Strs are shared as
    :func:`texts_list` and :func:`property_dicts` share them.
    """
    cdef _MessageBuilder b = _MessageBuilder(cls, columns, rows, file_index, paths, file_offsets)
    cdef Py_ssize_t i
    cdef list out = [None] * b.k
    for i in range(b.k):
        out[i] = b.build(i)
    return out


cdef class Delivered:
    """An iterator handing out messages and counting each in ``stats.delivered`` as it goes.

    ``Delivered(items, stats)`` hands out ``items`` (a list, or any iterable);
    ``Delivered.built(...)`` (:func:`message_objects`' arguments, then ``stats``) builds
    each message only when it is handed out, so a consumer that lets each go holds one
    at a time.
    """
    cdef object it          # the items' iterator, or None when the builder builds them
    cdef _MessageBuilder builder
    cdef Py_ssize_t i
    cdef object stats

    def __init__(self, items, stats):
        self.it = iter(items)
        self.stats = stats

    @staticmethod
    def built(cls, dict columns, const int64_t[::1] rows, const int64_t[::1] file_index, list paths,
              const int64_t[::1] file_offsets, stats):
        cdef Delivered d = Delivered((), stats)
        d.it = None
        d.builder = _MessageBuilder(cls, columns, rows, file_index, paths, file_offsets)
        return d

    def __iter__(self):
        return self

    def __next__(self):
        if self.it is not None:
            msg = next(self.it)
        elif self.i >= self.builder.k:
            raise StopIteration
        else:
            msg = self.builder.build(self.i)
            self.i += 1
        self.stats.delivered += 1
        return msg


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

cdef int32_t COMPRESSED = fmt.COMPRESSED_FLAG
cdef int32_t CTYPE_MASK = fmt.COMPRESSION_TYPE_MASK
cdef int CTYPE_SHIFT = fmt.COMPRESSION_TYPE_SHIFT
assert len(fmt.ZLIB_COMPRESSION_TYPES) == 2, "ZLIB_COMPRESSION_TYPES changed: update inflate_bodies"
cdef int32_t CTYPE_ZLIB = fmt.ZLIB_COMPRESSION_TYPES[1]
cdef int32_t CTYPE_ZLIB_LEGACY = fmt.ZLIB_COMPRESSION_TYPES[0]
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
    ``cq.commitlog.decompress_body``, decodes them or names the error). With
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
            if sf[i] & COMPRESSED:
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
                if not sf[i] & COMPRESSED:
                    got = _room(&g, e - a, limit)
                    if got < 0:
                        fail = got
                        break
                    if e > a:
                        memcpy(g.p + g.n, s + a, e - a)
                    g.n += e - a
                else:
                    ct = (sf[i] & CTYPE_MASK) >> CTYPE_SHIFT
                    got = 1
                    if ct == CTYPE_ZLIB or ct == CTYPE_ZLIB_LEGACY:
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
