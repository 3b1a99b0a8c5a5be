/* CRC-32 (zlib's: reflected polynomial 0xEDB88320) eight bytes a step, for the short
   bodies where a call into zlib costs more than the bytes (the recovery walk checks
   one per record). Tables are filled once by rmq_crc_init. Included by one module only
   (_record.pyx): the tables are that module's. */
#ifndef RMQ_CRC32_H
#define RMQ_CRC32_H
#include <stdint.h>
#include <string.h>

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

#endif
