/* The f32 2x2, stride-2, unpadded max pool (the CNNs' pool) with AVX2: eight outputs at once,
 * the four taps of each window in the generic kernel's raster order (pool.c) with its rule (a
 * tap replaces the maximum when it is greater or NaN), so values and indices are the generic
 * kernel's bit for bit. A row's 16 input floats come in two 8-float loads (masked in the
 * row's last, shorter block) and a shuffle splits even and odd columns; an index is kept in 32
 * bits (planes of 2^31 elements or more go to pool.c's kernel) and widened to i64 as stored.
 * The bf16 kernel is the same sweep on 16 bf16 a row step, widened to f32 as loaded (exact) and
 * narrowed as stored by keeping the top half (exact: a maximum is one of its inputs), a NaN made
 * quiet as the f32 -> bf16 cast makes it: the values of pooling between casts, bit for bit. */
#include "backend/cpu/pool_avx2.h"

#include <math.h>
#include <string.h>

#include "core/core-impl.h"

#include "backend/cpu/vmath.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define POOL_HAVE_AVX2 1
#include <immintrin.h>
#define AVX2 __attribute__((target("avx2")))
#else
#define POOL_HAVE_AVX2 0
#endif

bool kiln__max_pool_2x2_avx2_ok(int64_t h, int64_t w) {
#if POOL_HAVE_AVX2
    return kiln__vmath_isa()[0] == 'a' && h * w < ((int64_t)1 << 31); /* KILN_ISA=scalar: pool.c's */
#else
    (void)h, (void)w;
    return false;
#endif
}

#if POOL_HAVE_AVX2
/* Lanes i < n of a mask (n in 0..8). */
AVX2 static inline __m256i first_lanes(int64_t n) {
    return _mm256_cmpgt_epi32(_mm256_set1_epi32((int)n), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

/* Even and odd elements of p[0..16) (f32, or bf16 widened), each in order; only p[0..n) read
 * (the others are 0). */
AVX2 static inline void split16(const void *p, bool bf16, int64_t n, __m256 *even, __m256 *odd) {
    __m256 a, b;
    if (bf16) {
        /* n is even (two taps a window): n / 2 pairs, masked as 32-bit lanes (AVX2 has no
         * 16-bit masked load; a memcpy per short row cost three times the kernel) */
        __m256i raw = n >= 16 ? _mm256_loadu_si256((const __m256i *)p)
                              : _mm256_maskload_epi32((const int *)p, first_lanes(n / 2));
        a = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm256_castsi256_si128(raw)), 16));
        b = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm256_extracti128_si256(raw, 1)), 16));
    } else if (n >= 16) {
        a = _mm256_loadu_ps(p), b = _mm256_loadu_ps((const float *)p + 8);
    } else {
        a = _mm256_maskload_ps(p, first_lanes(n < 8 ? n : 8));
        b = _mm256_maskload_ps((const float *)p + 8, first_lanes(n > 8 ? n - 8 : 0));
    }
    /* per 128-bit lane: a0 a2 b0 b2 | a4 a6 b4 b6; then the 64-bit pairs put in order */
    __m256 e = _mm256_shuffle_ps(a, b, _MM_SHUFFLE(2, 0, 2, 0)), o = _mm256_shuffle_ps(a, b, _MM_SHUFFLE(3, 1, 3, 1));
    *even = _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(e), _MM_SHUFFLE(3, 1, 2, 0)));
    *odd = _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(o), _MM_SHUFFLE(3, 1, 2, 0)));
}

/* The first n of 8 maxima stored at y (f32, or bf16: the top halves, a NaN made quiet). */
AVX2 static inline void store8(void *y, bool bf16, int64_t n, __m256 best) {
    if (!bf16) {
        if (n == 8) _mm256_storeu_ps(y, best);
        else _mm256_maskstore_ps(y, first_lanes(n), best);
        return;
    }
    __m256i quiet = _mm256_and_si256(_mm256_castps_si256(_mm256_cmp_ps(best, best, _CMP_UNORD_Q)),
                                     _mm256_set1_epi32(0x400000));
    __m256i top = _mm256_srli_epi32(_mm256_or_si256(_mm256_castps_si256(best), quiet), 16);
    __m128i packed = _mm256_castsi256_si128(_mm256_permute4x64_epi64(_mm256_packus_epi32(top, top), 0xD8));
    if (n == 8) {
        _mm_storeu_si128((__m128i *)y, packed);
        return;
    }
    _mm_maskstore_epi32((int *)y, _mm256_castsi256_si128(first_lanes(n / 2)), packed); /* pairs, then an odd last */
    if (n & 1) {
        _Alignas(16) uint16_t all[8];
        _mm_store_si128((__m128i *)all, packed);
        ((uint16_t *)y)[n - 1] = all[n - 1];
    }
}

/* One tap: where v is greater than best or NaN, it and its index replace them. */
AVX2 static inline void take(__m256 v, __m256i at_v, __m256 *best, __m256i *at) {
    __m256 m = _mm256_or_ps(_mm256_cmp_ps(v, *best, _CMP_GT_OQ), _mm256_cmp_ps(v, v, _CMP_UNORD_Q));
    *best = _mm256_blendv_ps(*best, v, m);
    *at = _mm256_castps_si256(_mm256_blendv_ps(_mm256_castsi256_ps(*at), _mm256_castsi256_ps(at_v), m));
}

AVX2 static inline __attribute__((always_inline)) void pool_2x2(const void *x, bool bf16, int64_t row_stride, int64_t w,
                                                                  int64_t oh, int64_t ow, void *y, int64_t *idx) {
    const __m256i lanes = _mm256_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14), one = _mm256_set1_epi32(1);
    const __m256i down = _mm256_set1_epi32((int)w);
    const size_t es = bf16 ? sizeof(uint16_t) : sizeof(float);
    for (int64_t oy = 0; oy < oh; oy++) {
        const char *r0 = (const char *)x + 2 * oy * row_stride * (int64_t)es, *r1 = r0 + row_stride * (int64_t)es;
        char *yr = (char *)y + oy * ow * (int64_t)es;
        int64_t *ir = idx ? idx + oy * ow : NULL;
        for (int64_t ox = 0; ox < ow; ox += 8) {
            int64_t n = ow - ox < 8 ? ow - ox : 8; /* the last block may be short: masked */
            __m256 e0, o0, e1, o1;
            split16(r0 + 2 * ox * (int64_t)es, bf16, 2 * n, &e0, &o0);
            split16(r1 + 2 * ox * (int64_t)es, bf16, 2 * n, &e1, &o1);
            __m256i at0 = _mm256_add_epi32(_mm256_set1_epi32((int)(2 * oy * w + 2 * ox)), lanes);
            __m256 best = _mm256_set1_ps(-INFINITY);
            __m256i at = at0;
            take(e0, at0, &best, &at);
            take(o0, _mm256_add_epi32(at0, one), &best, &at);
            __m256i at1 = _mm256_add_epi32(at0, down);
            take(e1, at1, &best, &at);
            take(o1, _mm256_add_epi32(at1, one), &best, &at);
            store8(yr + ox * (int64_t)es, bf16, n, best);
            if (!ir) continue;
            __m256i lo = _mm256_cvtepi32_epi64(_mm256_castsi256_si128(at));
            __m256i hi = _mm256_cvtepi32_epi64(_mm256_extracti128_si256(at, 1));
            if (n == 8) {
                _mm256_storeu_si256((__m256i *)(ir + ox), lo), _mm256_storeu_si256((__m256i *)(ir + ox + 4), hi);
                continue;
            }
            __m256i m = first_lanes(n);
            _mm256_maskstore_epi64((long long *)(ir + ox), _mm256_cvtepi32_epi64(_mm256_castsi256_si128(m)), lo);
            _mm256_maskstore_epi64((long long *)(ir + ox + 4), _mm256_cvtepi32_epi64(_mm256_extracti128_si256(m, 1)), hi);
        }
    }
}

AVX2 void kiln__max_pool_2x2_avx2(const float *x, int64_t row_stride, int64_t w, int64_t oh, int64_t ow, float *y,
                                  int64_t *idx) {
    pool_2x2(x, false, row_stride, w, oh, ow, y, idx);
}

AVX2 void kiln__max_pool_2x2_bf16_avx2(const uint16_t *x, int64_t row_stride, int64_t w, int64_t oh, int64_t ow,
                                       uint16_t *y, int64_t *idx) {
    pool_2x2(x, true, row_stride, w, oh, ow, y, idx);
}
#else
/* Window (oy, ox) with the generic kernel's rule (a build for a CPU without AVX2 never calls this
 * file's kernel: kiln__max_pool_2x2_avx2_ok says no; it stays correct all the same). */
static void window_scalar(const float *r0, const float *r1, int64_t w, int64_t oy, int64_t ox, float *y,
                          int64_t *idx) {
    float best = -INFINITY;
    int64_t at = 2 * oy * w + 2 * ox;
    const float *rows[2] = {r0, r1};
    for (int dy = 0; dy < 2; dy++)
        for (int dx = 0; dx < 2; dx++) {
            float v = rows[dy][2 * ox + dx];
            if (v > best || v != v) best = v, at = (2 * oy + dy) * w + 2 * ox + dx;
        }
    *y = best;
    if (idx) *idx = at;
}

void kiln__max_pool_2x2_avx2(const float *x, int64_t row_stride, int64_t w, int64_t oh, int64_t ow, float *y,
                             int64_t *idx) {
    for (int64_t oy = 0; oy < oh; oy++)
        for (int64_t ox = 0; ox < ow; ox++)
            window_scalar(x + 2 * oy * row_stride, x + (2 * oy + 1) * row_stride, w, oy, ox, y + oy * ow + ox,
                          idx ? idx + oy * ow + ox : NULL);
}

void kiln__max_pool_2x2_bf16_avx2(const uint16_t *x, int64_t row_stride, int64_t w, int64_t oh, int64_t ow,
                                  uint16_t *y, int64_t *idx) {
    for (int64_t oy = 0; oy < oh; oy++)
        for (int64_t ox = 0; ox < ow; ox++) {
            float best = -INFINITY;
            int64_t at = 2 * oy * w + 2 * ox;
            for (int dy = 0; dy < 2; dy++)
                for (int dx = 0; dx < 2; dx++) {
                    float v = kiln__bf16_to_f32(x[(2 * oy + dy) * row_stride + 2 * ox + dx]);
                    if (v > best || v != v) best = v, at = (2 * oy + dy) * w + 2 * ox + dx;
                }
            y[oy * ow + ox] = kiln__f32_to_bf16(best);
            if (idx) idx[oy * ow + ox] = at;
        }
}
#endif
