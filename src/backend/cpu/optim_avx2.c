/* Adam's f32 update over dense runs eight floats at a time (AVX2), for optim.c's ADAM_UPDATE.
 *
 * Why: the portable loop is compiled for the baseline ISA (SSE2, four floats a step), and
 * Adam's two divisions and square root per element bound it there. One thread, a 784 x 256
 * weight (200704 floats, the Fashion-MNIST MLP's fc1), best of 200, Intel Xeon family 6 model
 * 207: the portable loop 219 us, this one 136 us (AVX-512 also 136: the divider and the cache,
 * not the width, bound it from here).
 *
 * Bits: the portable loop's, element for element. The same IEEE operations in the same order
 * (the moments, the square root, then the update, each rounded to float), and no contraction:
 * the target is AVX2 without FMA, so no multiply and add can become one rounding. The tail (n
 * not a multiple of eight) runs the scalar expressions. */
#include "backend/cpu/optim_avx2.h"

#include <math.h>

#include "backend/cpu/vmath.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#define AVX2 __attribute__((target("avx2")))

bool kiln__adam_f32_avx2_ok(void) { return kiln__vmath_isa()[0] == 'a'; } /* KILN_ISA=scalar: optim.c's */

/* optim.c's ADAM_MOMENTS and update on one element */
static inline void adam_one(float *p, float *m, float *v, const float *g, const kiln__adam_f32_consts *c, int decay,
                            bool first) {
    float x = *p, d = *g;
    if (decay == 1) d = d + c->k * x;
    if (decay == 2) x = x * c->k;
    float m0 = first ? 0.0f : *m, v0 = first ? 0.0f : *v;
    float m1 = m0 + c->w1 * (d - m0);
    float v1 = v0 * c->b2 + c->w2 * d * d;
    *m = m1;
    *v = v1;
    *p = x - c->step * (m1 / (sqrtf(v1) / c->bc2 + c->eps));
}

AVX2 void kiln__adam_f32_avx2(int64_t n, float *p, float *m, float *v, const float *g, const kiln__adam_f32_consts *c,
                              int decay, bool first) {
    const __m256 step = _mm256_set1_ps(c->step), w1 = _mm256_set1_ps(c->w1), b2 = _mm256_set1_ps(c->b2);
    const __m256 w2 = _mm256_set1_ps(c->w2), eps = _mm256_set1_ps(c->eps), bc2 = _mm256_set1_ps(c->bc2);
    const __m256 k = _mm256_set1_ps(c->k), zero = _mm256_setzero_ps();
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256 x = _mm256_loadu_ps(p + i), d = _mm256_loadu_ps(g + i);
        if (decay == 1) d = _mm256_add_ps(d, _mm256_mul_ps(k, x));
        if (decay == 2) x = _mm256_mul_ps(x, k);
        __m256 m0 = first ? zero : _mm256_loadu_ps(m + i), v0 = first ? zero : _mm256_loadu_ps(v + i);
        __m256 m1 = _mm256_add_ps(m0, _mm256_mul_ps(w1, _mm256_sub_ps(d, m0)));
        __m256 v1 = _mm256_add_ps(_mm256_mul_ps(v0, b2), _mm256_mul_ps(_mm256_mul_ps(w2, d), d));
        _mm256_storeu_ps(m + i, m1);
        _mm256_storeu_ps(v + i, v1);
        __m256 denom = _mm256_add_ps(_mm256_div_ps(_mm256_sqrt_ps(v1), bc2), eps);
        _mm256_storeu_ps(p + i, _mm256_sub_ps(x, _mm256_mul_ps(step, _mm256_div_ps(m1, denom))));
    }
    for (; i < n; i++) adam_one(p + i, m + i, v + i, g + i, c, decay, first);
}

#else

bool kiln__adam_f32_avx2_ok(void) { return false; }

void kiln__adam_f32_avx2(int64_t n, float *p, float *m, float *v, const float *g, const kiln__adam_f32_consts *c,
                         int decay, bool first) {
    (void)n, (void)p, (void)m, (void)v, (void)g, (void)c, (void)decay, (void)first;
}

#endif
