/* bf16 activations between NCHW and nChw16c for oneDNN's bf16 convs (conv_reorder.h).
 *
 * Each (image, block of 16 channels) is a 16 x HW matrix transposed to HW x 16 or back: one
 * pass, the 16 x HW source of a Fashion-MNIST conv (6 KiB) in L1. To nChw16c is plain C that
 * the compiler vectorises; from it, 32 positions at a time go through a 4-level network of
 * two-register 16-bit permutes (vpermt2w), which the compiler does not find (its own version
 * of the plain loop took 3x as long). Built for AVX-512 (BW for 16-bit lanes), which every CPU
 * that runs oneDNN's bf16 convs has (AVX512-BF16 implies it); kiln__conv_reorder_bf16_ok is
 * false elsewhere and oneDNN's reorders run. Measured on Zen 5 (one thread, -O3, [128, 64,
 * 14, 14], best of 32, in cache / from memory): to blocked 0.07 / 0.07 ms, from blocked 0.08 /
 * 0.14 ms (0.23 as plain C), where oneDNN 2.6's generic (jit:uni) bf16 reorders took 0.4 and
 * 0.5-1.1 ms on two threads. Bits are moved, never converted: the result is oneDNN's
 * reorder's bit for bit. */
#include "backend/cpu/conv_reorder.h"

#include <string.h>

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define REORDER_TARGET __attribute__((target("avx512f,avx512bw,avx512vl")))
static bool has_avx512bw(void) { return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw"); }
#else
#define REORDER_TARGET
static bool has_avx512bw(void) { return false; }
#endif

#define BLOCK 16

bool kiln__conv_reorder_bf16_ok(int64_t c) { return c > 0 && c % BLOCK == 0 && has_avx512bw(); }

REORDER_TARGET void kiln__conv_bf16_to_blocked(const uint16_t *restrict src, uint16_t *restrict dst, int64_t n,
                                               int64_t c, int64_t hw) {
    for (int64_t plane = 0; plane < n * (c / BLOCK); plane++) {
        const uint16_t *s = src + plane * BLOCK * hw;
        uint16_t *d = dst + plane * BLOCK * hw;
        for (int64_t p = 0; p < hw; p++)
            for (int k = 0; k < BLOCK; k++) d[p * BLOCK + k] = s[k * hw + p];
    }
}

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>

/* Index vectors of the 4 levels of from_blocked_32 (two-source vpermt2w lanes 0-63). */
typedef struct {
    __m512i first[4], second[4];
} transpose_steps;

/* Level l halves the channels a register holds and doubles its rows: a register of level l
 * holds 2^(l+1) rows x 16/2^l channels (lane e: row e / ch, channel e % ch, ch = 16 >> l), and
 * two of them (a: rows 0.., b: the next rows) give the lower and upper halves of those
 * channels over twice the rows. */
REORDER_TARGET static void transpose_steps_init(transpose_steps *t) {
    for (int l = 0; l < 4; l++) {
        int ch = 16 >> l, half = ch / 2, rows = 32 / half; /* rows per output register */
        uint16_t lo[32], hi[32];
        for (int e = 0; e < 32; e++) {
            int row = e / half, c = e % half, per_src = rows / 2; /* rows each source holds */
            int src = (row / per_src) * 32 + (row % per_src) * ch + c;
            lo[e] = (uint16_t)src, hi[e] = (uint16_t)(src + half);
        }
        t->first[l] = _mm512_loadu_si512(lo), t->second[l] = _mm512_loadu_si512(hi);
    }
}

/* Positions [p, p + 32) of one nChw16c block (s: 32 positions x 16 channels) into its 16
 * NCHW planes (d, hw apart): 16 loads, 4 levels of 16 vpermt2w, 16 stores. Every loop is
 * unrolled so that r and q index with constants and live in the zmm registers: left as
 * loops, gcc kept them on the stack and the transpose took 3-4x as long (libkiln.a, [128, 64,
 * 14, 14], one thread: 0.25-0.30 ms against 0.08 in cache, 0.14 from memory). */
REORDER_TARGET static inline void from_blocked_32(const transpose_steps *t, const uint16_t *s, uint16_t *d,
                                                  int64_t hw) {
    __m512i r[16], q[16];
#pragma GCC unroll 16
    for (int j = 0; j < 16; j++) r[j] = _mm512_loadu_si512(s + 32 * j); /* rows 2j, 2j + 1 */
#pragma GCC unroll 4
    for (int l = 0; l < 4; l++) {
        /* level l has 2^l slices of channels, each of `per` registers by rows; pair i of a slice
         * gives the lower half of its channels (slice 2 sl next level) and the upper (2 sl + 1) */
        const int per = 16 >> l;
#pragma GCC unroll 8
        for (int m = 0; m < 8; m++) {
            const int sl = m / (per / 2), i = m % (per / 2);
            __m512i a = r[sl * per + 2 * i], b = r[sl * per + 2 * i + 1];
            q[2 * sl * (per / 2) + i] = _mm512_permutex2var_epi16(a, t->first[l], b);
            q[(2 * sl + 1) * (per / 2) + i] = _mm512_permutex2var_epi16(a, t->second[l], b);
        }
#pragma GCC unroll 16
        for (int j = 0; j < 16; j++) r[j] = q[j];
    }
#pragma GCC unroll 16
    for (int k = 0; k < 16; k++) _mm512_storeu_si512(d + k * hw, r[k]);
}
#endif

REORDER_TARGET void kiln__conv_bf16_from_blocked(const uint16_t *restrict src, uint16_t *restrict dst, int64_t n,
                                                 int64_t c, int64_t hw) {
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
    transpose_steps t;
    transpose_steps_init(&t);
#endif
    for (int64_t plane = 0; plane < n * (c / BLOCK); plane++) {
        const uint16_t *s = src + plane * BLOCK * hw;
        uint16_t *d = dst + plane * BLOCK * hw;
        int64_t p0 = 0;
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
        for (; p0 + 32 <= hw; p0 += 32) from_blocked_32(&t, s + p0 * BLOCK, d + p0, hw);
#endif
        for (int k = 0; k < BLOCK; k++)
            for (int64_t p = p0; p < hw; p++) d[k * hw + p] = s[p * BLOCK + k];
    }
}
