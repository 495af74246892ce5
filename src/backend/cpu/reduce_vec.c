/* Vectorised primitives for the reduction and softmax kernels (see reduce-impl.h). */
#include <math.h>
#include <string.h>

#include "backend/cpu/reduce-impl.h"
#include "backend/cpu/vmath.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#define HAVE_AVX2_PATH 1
#define AVX2 __attribute__((target("avx2,fma")))
#else
#define HAVE_AVX2_PATH 0
#endif

/* Short runs stay scalar: the ISA lookup would cost more than it saves. vmath's choice is
 * followed so KILN_ISA=scalar tests these fallbacks too. */
static bool use_avx2(int64_t n) {
#if HAVE_AVX2_PATH
    return n >= 32 && kiln__vmath_isa()[0] == 'a';
#else
    (void)n;
    return false;
#endif
}

/* ---- portable versions ------------------------------------------------------------------- */

static double sum_f32_scalar(const float *x, int64_t n) {
    double a0 = 0, a1 = 0, a2 = 0, a3 = 0;
    int64_t i = 0;
    for (; i + 4 <= n; i += 4) a0 += x[i], a1 += x[i + 1], a2 += x[i + 2], a3 += x[i + 3];
    for (; i < n; i++) a0 += x[i];
    return (a0 + a1) + (a2 + a3);
}

#define MINMAX_SCALAR(NAME, T, INIT, CMP)                      \
    static T NAME(const T *x, int64_t n) {                     \
        T m = INIT;                                            \
        for (int64_t i = 0; i < n; i++) {                      \
            if (isnan(x[i])) return x[i];                      \
            if (x[i] CMP m) m = x[i];                          \
        }                                                      \
        return m;                                              \
    }
MINMAX_SCALAR(max_f32_scalar, float, -INFINITY, >)
MINMAX_SCALAR(min_f32_scalar, float, INFINITY, <)
MINMAX_SCALAR(max_f64_scalar, double, -INFINITY, >)
MINMAX_SCALAR(min_f64_scalar, double, INFINITY, <)

/* ---- AVX2 versions ----------------------------------------------------------------------- */
#if HAVE_AVX2_PATH
AVX2 static double hsum_ps_as_pd(__m256 v) {
    __m256d d = _mm256_add_pd(_mm256_cvtps_pd(_mm256_castps256_ps128(v)), _mm256_cvtps_pd(_mm256_extractf128_ps(v, 1)));
    __m128d h = _mm_add_pd(_mm256_castpd256_pd128(d), _mm256_extractf128_pd(d, 1));
    return _mm_cvtsd_f64(_mm_add_sd(h, _mm_unpackhi_pd(h, h)));
}

AVX2 static double hsum_pd(__m256d d) {
    __m128d h = _mm_add_pd(_mm256_castpd256_pd128(d), _mm256_extractf128_pd(d, 1));
    return _mm_cvtsd_f64(_mm_add_sd(h, _mm_unpackhi_pd(h, h)));
}

AVX2 static double sum_f32_avx2(const float *x, int64_t n) {
    double total = 0;
    int64_t i = 0;
    for (; i + 256 <= n; i += 256) {
        __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
        for (int64_t j = i; j < i + 256; j += 32) {
            a0 = _mm256_add_ps(a0, _mm256_loadu_ps(x + j));
            a1 = _mm256_add_ps(a1, _mm256_loadu_ps(x + j + 8));
            a2 = _mm256_add_ps(a2, _mm256_loadu_ps(x + j + 16));
            a3 = _mm256_add_ps(a3, _mm256_loadu_ps(x + j + 24));
        }
        total += hsum_ps_as_pd(_mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3)));
    }
    __m256 a = _mm256_setzero_ps();
    for (; i + 8 <= n; i += 8) a = _mm256_add_ps(a, _mm256_loadu_ps(x + i));
    total += hsum_ps_as_pd(a);
    for (; i < n; i++) total += x[i];
    return total;
}

AVX2 static double sum_f64_avx2(const double *x, int64_t n) {
    __m256d a0 = _mm256_setzero_pd(), a1 = a0, a2 = a0, a3 = a0;
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        a0 = _mm256_add_pd(a0, _mm256_loadu_pd(x + i));
        a1 = _mm256_add_pd(a1, _mm256_loadu_pd(x + i + 4));
        a2 = _mm256_add_pd(a2, _mm256_loadu_pd(x + i + 8));
        a3 = _mm256_add_pd(a3, _mm256_loadu_pd(x + i + 12));
    }
    double total = hsum_pd(_mm256_add_pd(_mm256_add_pd(a0, a1), _mm256_add_pd(a2, a3)));
    for (; i < n; i++) total += x[i];
    return total;
}

/* max_ps/min_ps drop NaNs, so NaN lanes are tracked on the side. */
#define MINMAX_AVX2(NAME, T, V, SUF, INIT, OP, SOP, TAILFN, W)                                 \
    AVX2 static T NAME(const T *x, int64_t n) {                                              \
        V m0 = _mm256_set1_##SUF(INIT), m1 = m0, bad = _mm256_setzero_##SUF();               \
        int64_t i = 0;                                                                       \
        for (; i + 2 * W <= n; i += 2 * W) {                                                 \
            V v0 = _mm256_loadu_##SUF(x + i), v1 = _mm256_loadu_##SUF(x + i + W);           \
            m0 = OP(m0, v0);                                                                 \
            m1 = OP(m1, v1);                                                                 \
            bad = _mm256_or_##SUF(bad, _mm256_cmp_##SUF(v0, v1, _CMP_UNORD_Q));              \
        }                                                                                    \
        if (_mm256_movemask_##SUF(bad)) return NAN;                                          \
        T lanes[W];                                                                          \
        _mm256_storeu_##SUF(lanes, OP(m0, m1));                                              \
        T m = TAILFN(lanes, W), t = TAILFN(x + i, n - i);                                    \
        return isnan(t) ? t : SOP(m, t);                                                      \
    }
#define MAX2(a, b) ((b) > (a) ? (b) : (a))
#define MIN2(a, b) ((b) < (a) ? (b) : (a))
MINMAX_AVX2(max_f32_avx2, float, __m256, ps, -INFINITY, _mm256_max_ps, MAX2, max_f32_scalar, 8)
MINMAX_AVX2(min_f32_avx2, float, __m256, ps, INFINITY, _mm256_min_ps, MIN2, min_f32_scalar, 8)
MINMAX_AVX2(max_f64_avx2, double, __m256d, pd, -INFINITY, _mm256_max_pd, MAX2, max_f64_scalar, 4)
MINMAX_AVX2(min_f64_avx2, double, __m256d, pd, INFINITY, _mm256_min_pd, MIN2, min_f64_scalar, 4)

/* acc[0..8) += v, in double. */
AVX2 static inline void add8_pd(double *acc, __m256 v) {
    _mm256_storeu_pd(acc, _mm256_add_pd(_mm256_loadu_pd(acc), _mm256_cvtps_pd(_mm256_castps256_ps128(v))));
    _mm256_storeu_pd(acc + 4, _mm256_add_pd(_mm256_loadu_pd(acc + 4), _mm256_cvtps_pd(_mm256_extractf128_ps(v, 1))));
}

AVX2 static void col_sum_rows_f32_avx2(double *acc, const float *const *rows, int nrows, int64_t n) {
    int64_t j = 0;
    for (; j + 8 <= n; j += 8) {
        __m256 v = _mm256_loadu_ps(rows[0] + j);
        for (int r = 1; r < nrows; r++) v = _mm256_add_ps(v, _mm256_loadu_ps(rows[r] + j));
        add8_pd(acc + j, v);
    }
    for (; j < n; j++) {
        float v = rows[0][j];
        for (int r = 1; r < nrows; r++) v += rows[r][j];
        acc[j] += v;
    }
}

AVX2 static void col_sum_f64_avx2(double *acc, const double *x, int64_t n) {
    int64_t j = 0;
    for (; j + 4 <= n; j += 4)
        _mm256_storeu_pd(acc + j, _mm256_add_pd(_mm256_loadu_pd(acc + j), _mm256_loadu_pd(x + j)));
    for (; j < n; j++) acc[j] += x[j];
}

AVX2 static void sub_f32_avx2(float *y, const float *x, float a, float b, int64_t n) {
    __m256 va = _mm256_set1_ps(a), vb = _mm256_set1_ps(b);
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps(y + i, _mm256_sub_ps(_mm256_sub_ps(_mm256_loadu_ps(x + i), va), vb));
    for (; i < n; i++) y[i] = (x[i] - a) - b;
}

AVX2 static void scale_f32_avx2(float *y, float s, int64_t n) {
    __m256 vs = _mm256_set1_ps(s);
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps(y + i, _mm256_mul_ps(_mm256_loadu_ps(y + i), vs));
    for (; i < n; i++) y[i] *= s;
}

AVX2 static void vsub_f32_avx2(float *y, const float *x, const float *v, int64_t n) {
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps(y + i, _mm256_sub_ps(_mm256_loadu_ps(x + i), _mm256_loadu_ps(v + i)));
    for (; i < n; i++) y[i] = x[i] - v[i];
}

AVX2 static void vmul_f32_avx2(float *y, const float *v, int64_t n) {
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps(y + i, _mm256_mul_ps(_mm256_loadu_ps(y + i), _mm256_loadu_ps(v + i)));
    for (; i < n; i++) y[i] *= v[i];
}

/* x > acc keeps acc where x is NaN (the compare is false). */
AVX2 static void col_max_f32_avx2(float *acc, const float *x, int64_t n) {
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256 a = _mm256_loadu_ps(acc + i), v = _mm256_loadu_ps(x + i);
        _mm256_storeu_ps(acc + i, _mm256_blendv_ps(a, v, _mm256_cmp_ps(v, a, _CMP_GT_OQ)));
    }
    for (; i < n; i++) acc[i] = x[i] > acc[i] ? x[i] : acc[i];
}

/* 8 elements as two vectors of 4 doubles. */
AVX2 static inline void load8_pd_f32(const float *x, __m256d *lo, __m256d *hi) {
    __m256 v = _mm256_loadu_ps(x);
    *lo = _mm256_cvtps_pd(_mm256_castps256_ps128(v));
    *hi = _mm256_cvtps_pd(_mm256_extractf128_ps(v, 1));
}
AVX2 static inline void load8_pd_f64(const double *x, __m256d *lo, __m256d *hi) {
    *lo = _mm256_loadu_pd(x);
    *hi = _mm256_loadu_pd(x + 4);
}

#define SQDEV_AVX2(SUF, T)                                                    \
    AVX2 static double sqdev_##SUF##_avx2(const T *x, int64_t n, double mean) { \
        __m256d m = _mm256_set1_pd(mean), a0 = _mm256_setzero_pd(), a1 = a0;  \
        int64_t i = 0;                                                        \
        for (; i + 8 <= n; i += 8) {                                          \
            __m256d d0, d1;                                                   \
            load8_pd_##SUF(x + i, &d0, &d1);                                  \
            d0 = _mm256_sub_pd(d0, m);                                        \
            d1 = _mm256_sub_pd(d1, m);                                        \
            a0 = _mm256_fmadd_pd(d0, d0, a0);                                 \
            a1 = _mm256_fmadd_pd(d1, d1, a1);                                 \
        }                                                                     \
        double total = hsum_pd(_mm256_add_pd(a0, a1));                        \
        for (; i < n; i++) total += (x[i] - mean) * (x[i] - mean);            \
        return total;                                                         \
    }
SQDEV_AVX2(f32, float)
SQDEV_AVX2(f64, double)

/* Equal lanes, or NaN lanes when looking for NaN (v != v). */
AVX2 static int64_t find_f32_avx2(const float *x, int64_t n, float v) {
    __m256 vv = _mm256_set1_ps(v);
    bool nan = v != v;
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256 xi = _mm256_loadu_ps(x + i);
        int mask = _mm256_movemask_ps(nan ? _mm256_cmp_ps(xi, xi, _CMP_UNORD_Q) : _mm256_cmp_ps(xi, vv, _CMP_EQ_OQ));
        if (mask) return i + __builtin_ctz((unsigned)mask);
    }
    for (; i < n; i++)
        if (x[i] == v || (v != v && x[i] != x[i])) return i;
    return n;
}
#endif

/* ---- the entry points -------------------------------------------------------------------- */
#if HAVE_AVX2_PATH
#define PICK(n, avx2_call, scalar_call) (use_avx2(n) ? (avx2_call) : (scalar_call))
#else
#define PICK(n, avx2_call, scalar_call) (scalar_call)
#endif

double kiln__rsum_f32(const float *x, int64_t n) { return PICK(n, sum_f32_avx2(x, n), sum_f32_scalar(x, n)); }

static double sum_f64_scalar(const double *x, int64_t n) {
    double a0 = 0, a1 = 0;
    int64_t i = 0;
    for (; i + 2 <= n; i += 2) a0 += x[i], a1 += x[i + 1];
    for (; i < n; i++) a0 += x[i];
    return a0 + a1;
}

double kiln__rsum_f64(const double *x, int64_t n) { return PICK(n, sum_f64_avx2(x, n), sum_f64_scalar(x, n)); }
float kiln__rmax_f32(const float *x, int64_t n) { return PICK(n, max_f32_avx2(x, n), max_f32_scalar(x, n)); }
float kiln__rmin_f32(const float *x, int64_t n) { return PICK(n, min_f32_avx2(x, n), min_f32_scalar(x, n)); }
double kiln__rmax_f64(const double *x, int64_t n) { return PICK(n, max_f64_avx2(x, n), max_f64_scalar(x, n)); }
double kiln__rmin_f64(const double *x, int64_t n) { return PICK(n, min_f64_avx2(x, n), min_f64_scalar(x, n)); }

#define SQDEV_SCALAR(SUF, T)                                                    \
    static double sqdev_##SUF##_scalar(const T *x, int64_t n, double mean) {     \
        double a = 0;                                                           \
        for (int64_t i = 0; i < n; i++) a += (x[i] - mean) * (x[i] - mean);     \
        return a;                                                               \
    }
SQDEV_SCALAR(f32, float)
SQDEV_SCALAR(f64, double)

static int64_t find_f32_scalar(const float *x, int64_t n, float v) {
    for (int64_t i = 0; i < n; i++)
        if (x[i] == v || (isnan(v) && isnan(x[i]))) return i;
    return n;
}

double kiln__rsqdev_f32(const float *x, int64_t n, double mean) {
    return PICK(n, sqdev_f32_avx2(x, n, mean), sqdev_f32_scalar(x, n, mean));
}
double kiln__rsqdev_f64(const double *x, int64_t n, double mean) {
    return PICK(n, sqdev_f64_avx2(x, n, mean), sqdev_f64_scalar(x, n, mean));
}
int64_t kiln__rfind_f32(const float *x, int64_t n, float v) {
    return PICK(n, find_f32_avx2(x, n, v), find_f32_scalar(x, n, v));
}

/* The array-writing primitives: AVX2 body or a plain loop. */
#if HAVE_AVX2_PATH
#define VOID_PICK(n, avx2_call)  \
    if (use_avx2(n)) {           \
        avx2_call;               \
        return;                  \
    }
#else
#define VOID_PICK(n, avx2_call)
#endif

void kiln__rcol_max_f32(float *acc, const float *x, int64_t n) {
    VOID_PICK(n, col_max_f32_avx2(acc, x, n))
    for (int64_t j = 0; j < n; j++) acc[j] = x[j] > acc[j] ? x[j] : acc[j];
}

void kiln__rvsub_f32(float *y, const float *x, const float *v, int64_t n) {
    VOID_PICK(n, vsub_f32_avx2(y, x, v, n))
    for (int64_t j = 0; j < n; j++) y[j] = x[j] - v[j];
}

void kiln__rvmul_f32(float *y, const float *v, int64_t n) {
    VOID_PICK(n, vmul_f32_avx2(y, v, n))
    for (int64_t j = 0; j < n; j++) y[j] *= v[j];
}

void kiln__rcol_sum_f32(double *acc, const float *x, int64_t n) { kiln__rcol_sum_rows_f32(acc, &x, 1, n); }

void kiln__rcol_sum_rows_f32(double *acc, const float *const *rows, int nrows, int64_t n) {
    VOID_PICK(n, col_sum_rows_f32_avx2(acc, rows, nrows, n))
    for (int64_t j = 0; j < n; j++) {
        float v = rows[0][j];
        for (int r = 1; r < nrows; r++) v += rows[r][j];
        acc[j] += v;
    }
}

void kiln__rcol_sum_f64(double *acc, const double *x, int64_t n) {
    VOID_PICK(n, col_sum_f64_avx2(acc, x, n))
    for (int64_t j = 0; j < n; j++) acc[j] += x[j];
}

void kiln__rsub_f32(float *y, const float *x, float a, float b, int64_t n) {
    VOID_PICK(n, sub_f32_avx2(y, x, a, b, n))
    for (int64_t i = 0; i < n; i++) y[i] = (x[i] - a) - b;
}

void kiln__rscale_f32(float *y, float s, int64_t n) {
    VOID_PICK(n, scale_f32_avx2(y, s, n))
    for (int64_t i = 0; i < n; i++) y[i] *= s;
}

/* ---- bf16 sums (see reduce-impl.h) ------------------------------------------------------- */

static void widen_bf16(float *dst, const uint16_t *src, int64_t n, int64_t st) {
    uint32_t *d = (uint32_t *)dst; /* a shift the compiler vectorises when st == 1 */
    if (st == 1)
        for (int64_t i = 0; i < n; i++) d[i] = (uint32_t)src[i] << 16;
    else
        for (int64_t i = 0; i < n; i++) d[i] = (uint32_t)src[i * st] << 16;
}

#if HAVE_AVX2_PATH
AVX2 static inline __m256 load_bf16x8(const uint16_t *x) {
    __m256i w = _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)x));
    return _mm256_castsi256_ps(_mm256_slli_epi32(w, 16));
}

/* Dense bf16 widened in registers: blocks of 256 with four f32 accumulators added into double,
 * as sum_f32_avx2, and four accumulators for the tail too (a conv bias gradient sums runs of
 * H * W = 196: a single accumulator's add latency was the cost there). */
AVX2 static double sum_bf16_avx2(const uint16_t *x, int64_t n) {
    double total = 0;
    for (int64_t i = 0; i < n; i += 256) {
        int64_t end = n - i < 256 ? n : i + 256, j = i;
        __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
        for (; j + 32 <= end; j += 32) {
            a0 = _mm256_add_ps(a0, load_bf16x8(x + j));
            a1 = _mm256_add_ps(a1, load_bf16x8(x + j + 8));
            a2 = _mm256_add_ps(a2, load_bf16x8(x + j + 16));
            a3 = _mm256_add_ps(a3, load_bf16x8(x + j + 24));
        }
        for (; j + 8 <= end; j += 8) a0 = _mm256_add_ps(a0, load_bf16x8(x + j));
        total += hsum_ps_as_pd(_mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3)));
        for (; j < end; j++) {
            uint32_t b = (uint32_t)x[j] << 16;
            float f;
            memcpy(&f, &b, sizeof f);
            total += f;
        }
    }
    return total;
}
#endif

/* Widening block of the portable and strided path: a multiple of the f32 sum's 256-element
 * blocks, so a run is summed in the same blocks as its f32 cast would be. */
#define BF16_BLOCK 1024

double kiln__rsum_bf16(const uint16_t *x, int64_t n, int64_t st) {
#if HAVE_AVX2_PATH
    if (st == 1 && use_avx2(n)) return sum_bf16_avx2(x, n);
#endif
    float buf[BF16_BLOCK];
    double total = 0;
    for (int64_t i = 0; i < n; i += BF16_BLOCK) {
        int64_t m = n - i < BF16_BLOCK ? n - i : BF16_BLOCK;
        widen_bf16(buf, x + i * st, m, st);
        total += kiln__rsum_f32(buf, m);
    }
    return total;
}

void kiln__rcol_sum_bf16(double *acc, const uint16_t *x, int64_t n, float *buf) {
    widen_bf16(buf, x, n, 1);
    kiln__rcol_sum_f32(acc, buf, n);
}
