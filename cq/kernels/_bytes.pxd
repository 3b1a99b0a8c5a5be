# Byte loads and builtins for the kernels (C in _bytes.h), and the key-head helper the
# decoder (_decode.pyx) and the dict builder (_objects.pyx) share. Every function here is
# inline: each cimporting module compiles its own copy, as when all lived in one module.
from libc.stdint cimport int64_t, uint8_t, uint16_t, uint32_t, uint64_t

cdef extern from "_bytes.h" nogil:
    uint32_t rmq_load_be32(const uint8_t* p) noexcept    # big-endian int32 field at p (any alignment)
    uint16_t rmq_load_be16(const uint8_t* p) noexcept    # big-endian int16 field at p
    uint64_t rmq_load_be64(const uint8_t* p) noexcept    # big-endian int64 field at p
    uint64_t rmq_load_le64(const uint8_t* p) noexcept    # 8 bytes at p, the first in the low byte
    uint32_t rmq_load_raw32(const uint8_t* p) noexcept   # 4 bytes at p in the machine's order
    uint32_t rmq_bswap32(uint32_t v) noexcept
    int rmq_ctz64(uint64_t v) noexcept                   # trailing zero bits (v != 0)
    void rmq_prefetch(const void* p) noexcept            # a read hint for the cache line of p


cdef inline uint64_t _head(const uint8_t* s, int64_t n) noexcept nogil:
    # A key's first 8 bytes, zero-padded, first byte lowest: most unequal keys differ here.
    # (a fixed 8-byte copy is one load; a variable-length memcpy is far slower here)
    cdef uint64_t w = 0
    cdef int64_t k
    if n >= 8:
        return rmq_load_le64(s)
    for k in range(n):
        w |= (<uint64_t>s[k]) << (8 * k)
    return w
