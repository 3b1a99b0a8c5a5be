/* Byte loads of the store's big-endian fields, and the few compiler builtins the kernels use.
   Every load goes through memcpy: store fields sit at any byte offset (a ConsumeQueue unit's
   tags_code is 4 bytes off an 8-byte boundary), and a misaligned pointer load is undefined. */
#ifndef RMQ_BYTES_H
#define RMQ_BYTES_H
#include <stdint.h>
#include <string.h>

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

#endif
