#ifndef RMQ_ADLER32_H
#define RMQ_ADLER32_H
#include <stdint.h>

/* Adler-32 (RFC 1950, zlib's adler32), for the check of a zlib body inflated raw
   (inflate_bodies). Included by one module only (_inflate.pyx). zlib's own loop takes a byte a step; with AVX2 a step takes 32:
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

#endif
