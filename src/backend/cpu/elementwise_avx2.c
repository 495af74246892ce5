/* AVX2 versions of the f32 loops of the simple elementwise ops (arithmetic, maximum/minimum,
 * the relu gradient, neg, abs, relu, clamp). The portable loops are compiled for the baseline
 * ISA (SSE2: four floats a step); these take eight, which matters where the data is in cache:
 * the fused kernel runs a chain of them over one L1-resident block. They give the portable
 * loops' bits: the same IEEE operations in the same order, no contraction, and the same
 * NaN and signed-zero rules (the selects mirror the C expressions). Dense output and inputs
 * that are dense or stride 0 take the vector path; anything else runs the scalar expression. */
#include <math.h>

#include "backend/cpu/elementwise-impl.h"
#include "backend/cpu/vmath.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>

#define AVX2 __attribute__((target("avx2")))

#define BINARY_AVX2(name, EXPR, VEXPR)                                                               \
    static AVX2 void name(void *ctx, int64_t n, char **p, const int64_t *st) {                       \
        (void)ctx;                                                                                   \
        if (st[0] != 4 || (st[1] != 4 && st[1] != 0) || (st[2] != 4 && st[2] != 0)) {               \
            for (int64_t i = 0; i < n; i++) {                                                        \
                float x = *(const float *)(p[1] + i * st[1]), y = *(const float *)(p[2] + i * st[2]); \
                *(float *)(p[0] + i * st[0]) = (EXPR);                                               \
            }                                                                                        \
            return;                                                                                  \
        }                                                                                            \
        float *o = (float *)p[0];                                                                    \
        const float *a = (const float *)p[1], *b = (const float *)p[2];                              \
        int64_t sa = st[1] / 4, sb = st[2] / 4, i = 0;                                               \
        const __m256 zero = _mm256_setzero_ps();                                                     \
        (void)zero;                                                                                  \
        if (sa && sb) {                                                                              \
            for (; i + 8 <= n; i += 8) {                                                             \
                __m256 x = _mm256_loadu_ps(a + i), y = _mm256_loadu_ps(b + i);                       \
                _mm256_storeu_ps(o + i, VEXPR);                                                      \
            }                                                                                        \
        } else if (sa) {                                                                             \
            const __m256 y = _mm256_set1_ps(*b);                                                     \
            for (; i + 8 <= n; i += 8) {                                                             \
                __m256 x = _mm256_loadu_ps(a + i);                                                   \
                _mm256_storeu_ps(o + i, VEXPR);                                                      \
            }                                                                                        \
        } else if (sb) {                                                                             \
            const __m256 x = _mm256_set1_ps(*a);                                                     \
            for (; i + 8 <= n; i += 8) {                                                             \
                __m256 y = _mm256_loadu_ps(b + i);                                                   \
                _mm256_storeu_ps(o + i, VEXPR);                                                      \
            }                                                                                        \
        }                                                                                            \
        for (; i < n; i++) {                                                                         \
            float x = a[i * sa], y = b[i * sb];                                                      \
            o[i] = (EXPR);                                                                           \
        }                                                                                            \
    }

#define GT(a, b) _mm256_cmp_ps(a, b, _CMP_GT_OQ)
#define LT(a, b) _mm256_cmp_ps(a, b, _CMP_LT_OQ)
#define ISNAN(a) _mm256_cmp_ps(a, a, _CMP_UNORD_Q)
/* blendv(a, b, m): b where m is set, a elsewhere */
BINARY_AVX2(add_avx2, x + y, _mm256_add_ps(x, y))
BINARY_AVX2(sub_avx2, x - y, _mm256_sub_ps(x, y))
BINARY_AVX2(mul_avx2, x * y, _mm256_mul_ps(x, y))
BINARY_AVX2(div_avx2, x / y, _mm256_div_ps(x, y))
BINARY_AVX2(maximum_avx2, (x > y || x != x) ? x : y, _mm256_blendv_ps(y, x, _mm256_or_ps(GT(x, y), ISNAN(x))))
BINARY_AVX2(minimum_avx2, (x < y || x != x) ? x : y, _mm256_blendv_ps(y, x, _mm256_or_ps(LT(x, y), ISNAN(x))))
BINARY_AVX2(relu_backward_avx2, y > 0 ? x : 0.0f, _mm256_blendv_ps(zero, x, GT(y, zero)))

#define UNARY_AVX2(name, PRE, EXPR, VEXPR)                                                           \
    static AVX2 void name(void *ctx, int64_t n, char **p, const int64_t *st) {                       \
        PRE;                                                                                         \
        int64_t i = 0;                                                                               \
        if (st[0] == 4 && st[1] == 4) {                                                              \
            float *o = (float *)p[0];                                                                \
            const float *a = (const float *)p[1];                                                    \
            const __m256 zero = _mm256_setzero_ps(), sign = _mm256_set1_ps(-0.0f);                   \
            (void)zero, (void)sign;                                                                  \
            for (; i + 8 <= n; i += 8) {                                                             \
                __m256 x = _mm256_loadu_ps(a + i);                                                   \
                _mm256_storeu_ps(o + i, VEXPR);                                                      \
            }                                                                                        \
        }                                                                                            \
        for (; i < n; i++) {                                                                         \
            float x = *(const float *)(p[1] + i * st[1]);                                            \
            *(float *)(p[0] + i * st[0]) = (EXPR);                                                   \
        }                                                                                            \
    }

UNARY_AVX2(neg_avx2, (void)ctx, -x, _mm256_xor_ps(x, sign))
UNARY_AVX2(abs_avx2, (void)ctx, fabsf(x), _mm256_andnot_ps(sign, x))
UNARY_AVX2(relu_avx2, (void)ctx, x < 0 ? 0.0f : x, _mm256_blendv_ps(x, zero, LT(x, zero)))
/* clamp: NaN bounds mean none (the portable loop's FLOAT_BOUNDS) */
#define CLAMP_PRE                                                              \
    const double *bound = ctx;                                                 \
    const float lo = isnan(bound[0]) ? -INFINITY : (float)bound[0];            \
    const float hi = isnan(bound[1]) ? INFINITY : (float)bound[1];             \
    const __m256 vlo = _mm256_set1_ps(lo), vhi = _mm256_set1_ps(hi)
UNARY_AVX2(clamp_avx2, CLAMP_PRE, x < lo ? lo : (x > hi ? hi : x),
           _mm256_blendv_ps(_mm256_blendv_ps(x, vhi, GT(x, vhi)), vlo, LT(x, vlo)))

kiln__loop_fn kiln__ew_avx2_loop(kiln__opcode code, kiln_dtype dt) {
    if (dt != KILN_F32 || kiln__vmath_isa()[0] != 'a') return NULL; /* KILN_ISA=scalar: portable */
    switch (code) {
    case KILN__OP_ADD: return add_avx2;
    case KILN__OP_SUB: return sub_avx2;
    case KILN__OP_MUL: return mul_avx2;
    case KILN__OP_DIV: return div_avx2;
    case KILN__OP_MAXIMUM: return maximum_avx2;
    case KILN__OP_MINIMUM: return minimum_avx2;
    case KILN__OP_RELU_BACKWARD: return relu_backward_avx2;
    case KILN__OP_NEG: return neg_avx2;
    case KILN__OP_ABS: return abs_avx2;
    case KILN__OP_RELU: return relu_avx2;
    case KILN__OP_CLAMP: return clamp_avx2;
    default: return NULL;
    }
}
#else
kiln__loop_fn kiln__ew_avx2_loop(kiln__opcode code, kiln_dtype dt) {
    (void)code, (void)dt;
    return NULL;
}
#endif
