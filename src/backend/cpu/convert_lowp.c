/* f32 <-> bf16 COPY loops (see convert_lowp.h). Why: the generic conversion goes through
 * double and a function call per element; a 2048 x 2048 weight cast to bf16 under autocast
 * took 7 ms that way (1.7 ns per element), the products it feeds 3 ms. */
#include "backend/cpu/convert_lowp.h"

#include <string.h>
#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include "backend/cpu/vmath.h"

static inline uint16_t round_bf16(uint32_t u) {
    uint32_t rounded = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16, quiet = (u >> 16) | 0x40u;
    return (uint16_t)((u & 0x7fffffffu) > 0x7f800000u ? quiet : rounded);
}

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
/* round_bf16 on 16 values a step in AVX2. Why: the portable loop compiles to SSE2 (the build's
 * baseline), which lacks a 32 -> 16-bit pack of unsigned values; rewriting an SGD step's bf16
 * copies that way cost 1.1 ms per 2048 x 2048 weight, an AVX2 pass a fraction of it. */
__attribute__((target("avx2"))) static int64_t round_bf16_avx2(int64_t n, const uint32_t *src, uint16_t *dst) {
    const __m256i one = _mm256_set1_epi32(1), half = _mm256_set1_epi32(0x7fff), quiet = _mm256_set1_epi32(0x40);
    const __m256i magnitude = _mm256_set1_epi32(0x7fffffff), inf = _mm256_set1_epi32(0x7f800000);
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        __m256i r[2];
        for (int h = 0; h < 2; h++) {
            __m256i u = _mm256_loadu_si256((const __m256i *)(src + i + 8 * h));
            __m256i top = _mm256_srli_epi32(u, 16);
            __m256i rounded = _mm256_srli_epi32(_mm256_add_epi32(_mm256_add_epi32(u, half), _mm256_and_si256(top, one)), 16);
            __m256i nan = _mm256_cmpgt_epi32(_mm256_and_si256(u, magnitude), inf); /* both sides below 2^31 */
            r[h] = _mm256_blendv_epi8(rounded, _mm256_or_si256(top, quiet), nan);
        }
        /* each lane holds its 16 bits in the low half: pack (per 128-bit half), then reorder */
        __m256i packed = _mm256_permute4x64_epi64(_mm256_packus_epi32(r[0], r[1]), 0xD8);
        _mm256_storeu_si256((__m256i *)(dst + i), packed);
    }
    return i;
}
#define HAVE_AVX2_ROUND 1
#endif

static void f32_to_bf16(void *ctx, int64_t n, char **p, const int64_t *st) {
    (void)ctx;
    if (st[0] == 2 && st[1] == 4) { /* dense: vectorised */
        uint16_t *restrict dst = (uint16_t *)p[0];
        const uint32_t *restrict src = (const uint32_t *)p[1];
        int64_t i = 0;
#ifdef HAVE_AVX2_ROUND
        if (n >= 16 && strcmp(kiln__vmath_isa(), "scalar") != 0) i = round_bf16_avx2(n, src, dst);
#endif
        for (; i < n; i++) dst[i] = round_bf16(src[i]);
        return;
    }
    for (int64_t i = 0; i < n; i++) {
        uint32_t u;
        memcpy(&u, p[1] + i * st[1], 4);
        uint16_t h = round_bf16(u);
        memcpy(p[0] + i * st[0], &h, 2);
    }
}

static void bf16_to_f32(void *ctx, int64_t n, char **p, const int64_t *st) {
    (void)ctx;
    if (st[0] == 4 && st[1] == 2) {
        uint32_t *restrict dst = (uint32_t *)p[0];
        const uint16_t *restrict src = (const uint16_t *)p[1];
        for (int64_t i = 0; i < n; i++) dst[i] = (uint32_t)src[i] << 16;
        return;
    }
    for (int64_t i = 0; i < n; i++) {
        uint16_t h;
        memcpy(&h, p[1] + i * st[1], 2);
        uint32_t u = (uint32_t)h << 16;
        memcpy(p[0] + i * st[0], &u, 4);
    }
}

void kiln__cpu_store_bf16(int64_t n, const float *src, int64_t src_stride, uint16_t *dst, int64_t dst_stride) {
    int64_t st[2] = {dst_stride * 2, src_stride * 4};
    f32_to_bf16(NULL, n, (char *[]){(char *)dst, (char *)src}, st);
}

kiln__loop_fn kiln__cpu_convert_lowp_loop(kiln_dtype src, kiln_dtype dst) {
    if (src == KILN_F32 && dst == KILN_BF16) return f32_to_bf16;
    if (src == KILN_BF16 && dst == KILN_F32) return bf16_to_f32;
    return NULL;
}
