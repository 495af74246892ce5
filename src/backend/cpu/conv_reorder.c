/* bf16 activations between NCHW and nChw16c for oneDNN's bf16 convs (conv_reorder.h).
 *
 * Each (image, block of 16 channels) is a 16 x HW matrix transposed to HW x 16: one pass,
 * the 16 x HW source of a Fashion-MNIST conv (6 KiB) in L1. The loops are plain C that the
 * compiler vectorises; they are built for AVX-512 (BW for 16-bit lanes), which every CPU that
 * runs oneDNN's bf16 convs has (AVX512-BF16 implies it), and for the baseline elsewhere.
 * Measured on Zen 5 (one thread, -O3, [128, 64, 14, 14]): to blocked 0.08 ms, from blocked
 * 0.23 ms, where oneDNN 2.6's generic (jit:uni) bf16 reorders took 0.4 and 0.5-1.1 ms on two
 * threads. Bits are moved, never converted: the result is oneDNN's reorder's bit for bit. */
#include "backend/cpu/conv_reorder.h"

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

REORDER_TARGET void kiln__conv_bf16_from_blocked(const uint16_t *restrict src, uint16_t *restrict dst, int64_t n,
                                                 int64_t c, int64_t hw) {
    for (int64_t plane = 0; plane < n * (c / BLOCK); plane++) {
        const uint16_t *s = src + plane * BLOCK * hw;
        uint16_t *d = dst + plane * BLOCK * hw;
        for (int k = 0; k < BLOCK; k++)
            for (int64_t p = 0; p < hw; p++) d[k * hw + p] = s[p * BLOCK + k];
    }
}
