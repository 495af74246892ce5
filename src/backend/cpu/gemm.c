/* Matrix product: CBLAS when the build has it, else a cache-blocked kernel of our own.
 *
 * The built-in path follows the usual blocked scheme. C is cut into tiles of about
 * MC x NC; each tile is one unit of work for the thread pool and walks k in slices of KC.
 * For every slice the tile packs its block of op(B) into NR-wide column panels and its
 * block of op(A) into MR-tall row panels (zero-padded at the edges), so the micro-kernel
 * reads both operands contiguously whatever the transposes and leading dimensions were.
 * The micro-kernel keeps an MR x NR block of C in registers across the whole slice. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE 1 /* OpenBLAS's cblas.h declares functions taking cpu_set_t */
#endif
#include "backend/cpu/gemm.h"

#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cpu/gemm_dnnl.h"
#include "backend/cpu/threadpool.h"
#include "backend/cpu/vmath.h"
#include "core/core-impl.h"
#include "core/machine.h"

#ifndef KILN_HAVE_CBLAS
#define KILN_HAVE_CBLAS 0
#endif
#if KILN_HAVE_CBLAS
#include <cblas.h>
#endif

#if (defined(__x86_64__) || defined(__i386__)) && (defined(__GNUC__) || defined(__clang__))
#define GEMM_HAVE_AVX2_KERNELS 1
#include <immintrin.h>
#define GEMM_TARGET_AVX2 __attribute__((target("avx2,fma")))
#else
#define GEMM_HAVE_AVX2_KERNELS 0
#endif

/* Register block: 6 x 16 floats or 6 x 8 doubles is twelve 256-bit accumulators, leaving
 * room for two B vectors and one broadcast A value in sixteen registers. */
enum { GEMM_MR = 6, GEMM_NR_F32 = 16, GEMM_NR_F64 = 8 };
/* Cache block: a KC x NR panel of B (16 KiB) stays in L1 while the MC x KC block of A
 * (288 KiB) stays in L2; NC bounds the packed B block of a tile (1 MiB, streamed once per
 * k slice). A taller MC means fewer tiles repacking the same B block: measured on Zen 4,
 * MC 288 over 144 gave +5-10% at n = 2048. */
enum { GEMM_KC = 256, GEMM_MC_F32 = 288, GEMM_MC_F64 = 144, GEMM_NC_F32 = 1024, GEMM_NC_F64 = 512 };
/* Smallest work worth a thread of its own: about 50-100 us of one core, well above the
 * cost of waking a sleeping worker. */
#define GEMM_MIN_FLOPS_PER_TASK 4.0e6

static atomic_int gemm_force_portable;

static int gemm_use_avx2(void) {
#if GEMM_HAVE_AVX2_KERNELS
    return !atomic_load_explicit(&gemm_force_portable, memory_order_relaxed) &&
           __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
#else
    return 0;
#endif
}

const char *kiln__gemm_builtin_kernel(void) { return gemm_use_avx2() ? "avx2-fma" : "portable"; }

void kiln__gemm_builtin_use_portable(int on) { atomic_store(&gemm_force_portable, on != 0); }

const char *kiln__gemm_impl(void) {
#if KILN_HAVE_CBLAS && defined(OPENBLAS_VERSION)
    return "openblas";
#elif KILN_HAVE_CBLAS
    return "cblas";
#else
    return "builtin";
#endif
}

/* ---- AVX2 + FMA micro-kernels: C[MR x NR] = alpha * Ap.Bp + beta * C -------------- */

#if GEMM_HAVE_AVX2_KERNELS
/* Row i of the accumulator block, scaled and merged into C. beta == 0 never reads C. */
#define GEMM_AVX2_STORE_ROW_F32(i, lo, hi)                                             \
    do {                                                                               \
        float *row = c + (i) * ldc;                                                    \
        __m256 out_lo = _mm256_mul_ps(valpha, lo), out_hi = _mm256_mul_ps(valpha, hi); \
        if (beta != 0.0f) {                                                            \
            out_lo = _mm256_fmadd_ps(vbeta, _mm256_loadu_ps(row), out_lo);             \
            out_hi = _mm256_fmadd_ps(vbeta, _mm256_loadu_ps(row + 8), out_hi);         \
        }                                                                              \
        _mm256_storeu_ps(row, out_lo);                                                 \
        _mm256_storeu_ps(row + 8, out_hi);                                             \
    } while (0)

GEMM_TARGET_AVX2 static void gemm_kernel_avx2_f32(int64_t kc, const float *ap, const float *bp,
                                                  float *c, int64_t ldc, float alpha, float beta) {
    __m256 c0l = _mm256_setzero_ps(), c0h = c0l, c1l = c0l, c1h = c0l, c2l = c0l, c2h = c0l;
    __m256 c3l = c0l, c3h = c0l, c4l = c0l, c4h = c0l, c5l = c0l, c5h = c0l;
    for (int64_t p = 0; p < kc; p++, ap += GEMM_MR, bp += GEMM_NR_F32) {
        __m256 b_lo = _mm256_loadu_ps(bp), b_hi = _mm256_loadu_ps(bp + 8), a;
        a = _mm256_broadcast_ss(ap + 0);
        c0l = _mm256_fmadd_ps(a, b_lo, c0l), c0h = _mm256_fmadd_ps(a, b_hi, c0h);
        a = _mm256_broadcast_ss(ap + 1);
        c1l = _mm256_fmadd_ps(a, b_lo, c1l), c1h = _mm256_fmadd_ps(a, b_hi, c1h);
        a = _mm256_broadcast_ss(ap + 2);
        c2l = _mm256_fmadd_ps(a, b_lo, c2l), c2h = _mm256_fmadd_ps(a, b_hi, c2h);
        a = _mm256_broadcast_ss(ap + 3);
        c3l = _mm256_fmadd_ps(a, b_lo, c3l), c3h = _mm256_fmadd_ps(a, b_hi, c3h);
        a = _mm256_broadcast_ss(ap + 4);
        c4l = _mm256_fmadd_ps(a, b_lo, c4l), c4h = _mm256_fmadd_ps(a, b_hi, c4h);
        a = _mm256_broadcast_ss(ap + 5);
        c5l = _mm256_fmadd_ps(a, b_lo, c5l), c5h = _mm256_fmadd_ps(a, b_hi, c5h);
    }
    __m256 valpha = _mm256_set1_ps(alpha), vbeta = _mm256_set1_ps(beta);
    GEMM_AVX2_STORE_ROW_F32(0, c0l, c0h);
    GEMM_AVX2_STORE_ROW_F32(1, c1l, c1h);
    GEMM_AVX2_STORE_ROW_F32(2, c2l, c2h);
    GEMM_AVX2_STORE_ROW_F32(3, c3l, c3h);
    GEMM_AVX2_STORE_ROW_F32(4, c4l, c4h);
    GEMM_AVX2_STORE_ROW_F32(5, c5l, c5h);
}

#define GEMM_AVX2_STORE_ROW_F64(i, lo, hi)                                              \
    do {                                                                                \
        double *row = c + (i) * ldc;                                                    \
        __m256d out_lo = _mm256_mul_pd(valpha, lo), out_hi = _mm256_mul_pd(valpha, hi); \
        if (beta != 0.0) {                                                              \
            out_lo = _mm256_fmadd_pd(vbeta, _mm256_loadu_pd(row), out_lo);              \
            out_hi = _mm256_fmadd_pd(vbeta, _mm256_loadu_pd(row + 4), out_hi);          \
        }                                                                               \
        _mm256_storeu_pd(row, out_lo);                                                  \
        _mm256_storeu_pd(row + 4, out_hi);                                              \
    } while (0)

GEMM_TARGET_AVX2 static void gemm_kernel_avx2_f64(int64_t kc, const double *ap, const double *bp,
                                                  double *c, int64_t ldc, double alpha,
                                                  double beta) {
    __m256d c0l = _mm256_setzero_pd(), c0h = c0l, c1l = c0l, c1h = c0l, c2l = c0l, c2h = c0l;
    __m256d c3l = c0l, c3h = c0l, c4l = c0l, c4h = c0l, c5l = c0l, c5h = c0l;
    for (int64_t p = 0; p < kc; p++, ap += GEMM_MR, bp += GEMM_NR_F64) {
        __m256d b_lo = _mm256_loadu_pd(bp), b_hi = _mm256_loadu_pd(bp + 4), a;
        a = _mm256_broadcast_sd(ap + 0);
        c0l = _mm256_fmadd_pd(a, b_lo, c0l), c0h = _mm256_fmadd_pd(a, b_hi, c0h);
        a = _mm256_broadcast_sd(ap + 1);
        c1l = _mm256_fmadd_pd(a, b_lo, c1l), c1h = _mm256_fmadd_pd(a, b_hi, c1h);
        a = _mm256_broadcast_sd(ap + 2);
        c2l = _mm256_fmadd_pd(a, b_lo, c2l), c2h = _mm256_fmadd_pd(a, b_hi, c2h);
        a = _mm256_broadcast_sd(ap + 3);
        c3l = _mm256_fmadd_pd(a, b_lo, c3l), c3h = _mm256_fmadd_pd(a, b_hi, c3h);
        a = _mm256_broadcast_sd(ap + 4);
        c4l = _mm256_fmadd_pd(a, b_lo, c4l), c4h = _mm256_fmadd_pd(a, b_hi, c4h);
        a = _mm256_broadcast_sd(ap + 5);
        c5l = _mm256_fmadd_pd(a, b_lo, c5l), c5h = _mm256_fmadd_pd(a, b_hi, c5h);
    }
    __m256d valpha = _mm256_set1_pd(alpha), vbeta = _mm256_set1_pd(beta);
    GEMM_AVX2_STORE_ROW_F64(0, c0l, c0h);
    GEMM_AVX2_STORE_ROW_F64(1, c1l, c1h);
    GEMM_AVX2_STORE_ROW_F64(2, c2l, c2h);
    GEMM_AVX2_STORE_ROW_F64(3, c3l, c3h);
    GEMM_AVX2_STORE_ROW_F64(4, c4l, c4h);
    GEMM_AVX2_STORE_ROW_F64(5, c5l, c5h);
}
#endif

/* ---- Type-generic parts, stamped out for float and double ------------------------- */

/* GEMM_DEFINE(T, SFX, MC, NR, NC) defines, for element type T:
 *   gemm_scale_SFX          C = beta * C (beta == 0 writes zeros)
 *   gemm_kernel_portable_SFX  the micro-kernel in plain C, for any CPU
 *   gemm_pack_a_SFX / gemm_pack_b_SFX
 *   gemm_tiles_SFX          the pool task: a range of C tiles, packing and multiplying
 *   kiln__gemm_builtin_SFX */
#define GEMM_DEFINE(T, SFX, MC, NR, NC)                                                       \
    typedef void (*gemm_kernel_##SFX##_fn)(int64_t kc, const T *ap, const T *bp, T *c,        \
                                           int64_t ldc, T alpha, T beta);                     \
                                                                                              \
    static void gemm_scale_##SFX(int64_t m, int64_t n, T beta, T *c, int64_t ldc) {           \
        if (beta == (T)1) return;                                                             \
        for (int64_t i = 0; i < m; i++) {                                                     \
            T *row = c + i * ldc;                                                             \
            if (beta == (T)0) {                                                               \
                memset(row, 0, (size_t)n * sizeof(T));                                        \
            } else {                                                                          \
                for (int64_t j = 0; j < n; j++) row[j] *= beta;                               \
            }                                                                                 \
        }                                                                                     \
    }                                                                                         \
                                                                                              \
    static void gemm_kernel_portable_##SFX(int64_t kc, const T *restrict ap,                  \
                                           const T *restrict bp, T *restrict c,               \
                                           int64_t ldc, T alpha, T beta) {                    \
        T acc[GEMM_MR][NR];                                                                   \
        memset(acc, 0, sizeof acc);                                                           \
        for (int64_t p = 0; p < kc; p++, ap += GEMM_MR, bp += NR) {                           \
            for (int i = 0; i < GEMM_MR; i++) {                                               \
                T a = ap[i];                                                                  \
                for (int j = 0; j < NR; j++) acc[i][j] += a * bp[j];                          \
            }                                                                                 \
        }                                                                                     \
        for (int i = 0; i < GEMM_MR; i++) {                                                   \
            T *row = c + i * ldc;                                                             \
            if (beta == (T)0) {                                                               \
                for (int j = 0; j < NR; j++) row[j] = alpha * acc[i][j];                      \
            } else {                                                                          \
                for (int j = 0; j < NR; j++) row[j] = alpha * acc[i][j] + beta * row[j];      \
            }                                                                                 \
        }                                                                                     \
    }                                                                                         \
                                                                                              \
    /* Packing: a block of `count` x kc values of op(X) into panels `width` wide, each        \
     * panel p-major (width values per step of k) and zero-padded to a full width. The        \
     * source is read along its rows either way, which is what keeps packing cheap:           \
     * pack_along_k when its rows run along k, pack_across_k when they run along count. */    \
    static void gemm_pack_along_k_##SFX(const T *src, int64_t ld, int64_t count, int64_t kc,  \
                                        int width, T *dst) {                                  \
        for (int64_t first = 0; first < count; first += width, dst += width * kc) {           \
            int64_t used = count - first < width ? count - first : width, w = 0;              \
            for (; w < used; w++) {                                                           \
                const T *row = src + (first + w) * ld;                                        \
                for (int64_t p = 0; p < kc; p++) dst[p * width + w] = row[p];                 \
            }                                                                                 \
            for (; w < width; w++)                                                            \
                for (int64_t p = 0; p < kc; p++) dst[p * width + w] = (T)0;                   \
        }                                                                                     \
    }                                                                                         \
                                                                                              \
    static void gemm_pack_across_k_##SFX(const T *src, int64_t ld, int64_t count,             \
                                         int64_t kc, int width, T *dst) {                     \
        int64_t full = count / width * width;                                                 \
        for (int64_t p = 0; p < kc; p++) {                                                    \
            const T *row = src + p * ld;                                                      \
            T *out = dst + p * width;                                                         \
            for (int64_t first = 0; first < full; first += width, out += width * kc)          \
                for (int w = 0; w < width; w++) out[w] = row[first + w];                      \
            if (full < count) {                                                               \
                int w = 0;                                                                    \
                for (; w < count - full; w++) out[w] = row[full + w];                         \
                for (; w < width; w++) out[w] = (T)0;                                         \
            }                                                                                 \
        }                                                                                     \
    }                                                                                         \
                                                                                              \
    /* Rows [i0, i0+mc) x [p0, p0+kc) of op(A) into MR-row panels. */                         \
    static void gemm_pack_a_##SFX(int trans, const T *a, int64_t lda, int64_t i0,             \
                                  int64_t mc, int64_t p0, int64_t kc, T *ap) {                \
        if (trans) { /* stored k x m */                                                       \
            gemm_pack_across_k_##SFX(a + p0 * lda + i0, lda, mc, kc, GEMM_MR, ap);            \
        } else {                                                                              \
            gemm_pack_along_k_##SFX(a + i0 * lda + p0, lda, mc, kc, GEMM_MR, ap);             \
        }                                                                                     \
    }                                                                                         \
                                                                                              \
    /* Rows [p0, p0+kc) x cols [j0, j0+nc) of op(B) into NR-column panels. */                 \
    static void gemm_pack_b_##SFX(int trans, const T *b, int64_t ldb, int64_t p0,             \
                                  int64_t kc, int64_t j0, int64_t nc, T *bp) {                \
        if (trans) { /* stored n x k */                                                       \
            gemm_pack_along_k_##SFX(b + j0 * ldb + p0, ldb, nc, kc, NR, bp);                  \
        } else {                                                                              \
            gemm_pack_across_k_##SFX(b + p0 * ldb + j0, ldb, nc, kc, NR, bp);                 \
        }                                                                                     \
    }                                                                                         \
                                                                                              \
    typedef struct gemm_job_##SFX {                                                           \
        int trans_a, trans_b;                                                                 \
        int64_t m, n, k;                                                                      \
        T alpha, beta;                                                                        \
        const T *a, *b;                                                                       \
        T *c;                                                                                 \
        int64_t lda, ldb, ldc;                                                                \
        int64_t tile_m, tile_n, tiles_n; /* tile sizes: multiples of MR and NR */             \
        gemm_kernel_##SFX##_fn kernel;                                                        \
    } gemm_job_##SFX;                                                                         \
                                                                                              \
    static void gemm_tile_unpacked_##SFX(const gemm_job_##SFX *job, int64_t i0, int64_t mc,   \
                                         int64_t j0, int64_t nc) {                            \
        for (int64_t i = i0; i < i0 + mc; i++) {                                              \
            for (int64_t j = j0; j < j0 + nc; j++) {                                          \
                T sum = 0;                                                                    \
                for (int64_t p = 0; p < job->k; p++) {                                        \
                    T x = job->trans_a ? job->a[p * job->lda + i] : job->a[i * job->lda + p]; \
                    T y = job->trans_b ? job->b[j * job->ldb + p] : job->b[p * job->ldb + j]; \
                    sum += x * y;                                                             \
                }                                                                             \
                T *out = job->c + i * job->ldc + j;                                           \
                *out = job->beta == (T)0 ? job->alpha * sum                                   \
                                         : job->alpha * sum + job->beta * *out;               \
            }                                                                                 \
        }                                                                                     \
    }                                                                                         \
                                                                                              \
    static void gemm_tile_##SFX(const gemm_job_##SFX *job, int64_t i0, int64_t mc,            \
                                int64_t j0, int64_t nc, T *ap, T *bp) {                       \
        T edge[GEMM_MR * NR];                                                                 \
        for (int64_t p0 = 0; p0 < job->k; p0 += GEMM_KC) {                                    \
            int64_t kc = job->k - p0 < GEMM_KC ? job->k - p0 : GEMM_KC;                       \
            T beta = p0 == 0 ? job->beta : (T)1; /* later slices accumulate */                \
            gemm_pack_b_##SFX(job->trans_b, job->b, job->ldb, p0, kc, j0, nc, bp);            \
            gemm_pack_a_##SFX(job->trans_a, job->a, job->lda, i0, mc, p0, kc, ap);            \
            for (int64_t jr = 0; jr < nc; jr += NR) {                                         \
                int64_t cols = nc - jr < NR ? nc - jr : NR;                                   \
                for (int64_t ir = 0; ir < mc; ir += GEMM_MR) {                                \
                    int64_t rows = mc - ir < GEMM_MR ? mc - ir : GEMM_MR;                     \
                    T *c = job->c + (i0 + ir) * job->ldc + j0 + jr;                           \
                    const T *a_panel = ap + ir * kc, *b_panel = bp + jr * kc;                 \
                    if (rows == GEMM_MR && cols == NR) {                                      \
                        job->kernel(kc, a_panel, b_panel, c, job->ldc, job->alpha, beta);     \
                        continue;                                                             \
                    }                                                                         \
                    job->kernel(kc, a_panel, b_panel, edge, NR, (T)1, (T)0);                  \
                    for (int64_t i = 0; i < rows; i++) {                                      \
                        T *row = c + i * job->ldc;                                            \
                        for (int64_t j = 0; j < cols; j++)                                    \
                            row[j] = beta == (T)0                                             \
                                         ? job->alpha * edge[i * NR + j]                      \
                                         : job->alpha * edge[i * NR + j] + beta * row[j];     \
                    }                                                                         \
                }                                                                             \
            }                                                                                 \
        }                                                                                     \
    }                                                                                         \
                                                                                              \
    static void gemm_tiles_##SFX(void *ctx, int64_t begin, int64_t end) {                     \
        const gemm_job_##SFX *job = ctx;                                                      \
        size_t kc = (size_t)(job->k < GEMM_KC ? job->k : GEMM_KC);                            \
        size_t a_bytes = gemm_round_up((size_t)job->tile_m * kc * sizeof(T), 64);             \
        size_t b_bytes = gemm_round_up((size_t)job->tile_n * kc * sizeof(T), 64);             \
        T *ap = aligned_alloc(64, a_bytes), *bp = aligned_alloc(64, b_bytes);                 \
        for (int64_t t = begin; t < end; t++) {                                               \
            int64_t i0 = t / job->tiles_n * job->tile_m, j0 = t % job->tiles_n * job->tile_n; \
            int64_t mc = job->m - i0 < job->tile_m ? job->m - i0 : job->tile_m;               \
            int64_t nc = job->n - j0 < job->tile_n ? job->n - j0 : job->tile_n;               \
            if (ap && bp) {                                                                   \
                gemm_tile_##SFX(job, i0, mc, j0, nc, ap, bp);                                 \
            } else { /* out of memory: a kernel has no status to return, so go slowly */      \
                gemm_tile_unpacked_##SFX(job, i0, mc, j0, nc);                                \
            }                                                                                 \
        }                                                                                     \
        free(ap);                                                                             \
        free(bp);                                                                             \
    }                                                                                         \
                                                                                              \
    /* serial: on the calling thread alone, as one task over every tile. */                   \
    static void gemm_builtin_run_##SFX(int trans_a, int trans_b, int64_t m, int64_t n,        \
                                       int64_t k, T alpha, const T *a, int64_t lda,           \
                                       const T *b, int64_t ldb, T beta, T *c, int64_t ldc,    \
                                       int serial) {                                          \
        if (m <= 0 || n <= 0) return;                                                         \
        if (k <= 0 || alpha == (T)0) {                                                        \
            gemm_scale_##SFX(m, n, beta, c, ldc);                                             \
            return;                                                                           \
        }                                                                                     \
        gemm_job_##SFX job = {.trans_a = trans_a, .trans_b = trans_b, .m = m, .n = n,         \
                              .k = k, .alpha = alpha, .beta = beta, .a = a, .b = b, .c = c,   \
                              .lda = lda, .ldb = ldb, .ldc = ldc,                             \
                              .kernel = gemm_kernel_portable_##SFX};                          \
        gemm_kernel_select_##SFX(&job.kernel);                                                \
        gemm_tiling tiling =                                                                  \
            gemm_plan_tiles(m, n, k, MC, NR, NC, serial ? 1 : kiln__pool_threads());          \
        job.tile_m = tiling.tile_m;                                                           \
        job.tile_n = tiling.tile_n;                                                           \
        job.tiles_n = tiling.tiles_n;                                                         \
        if (serial) {                                                                         \
            gemm_tiles_##SFX(&job, 0, tiling.tiles_m * tiling.tiles_n);                       \
        } else {                                                                              \
            kiln__parallel_for(tiling.tiles_m * tiling.tiles_n, tiling.grain,                 \
                               gemm_tiles_##SFX, &job);                                       \
        }                                                                                     \
    }                                                                                         \
                                                                                              \
    void kiln__gemm_builtin_##SFX(int trans_a, int trans_b, int64_t m, int64_t n, int64_t k,  \
                                  T alpha, const T *a, int64_t lda, const T *b, int64_t ldb,  \
                                  T beta, T *c, int64_t ldc) {                                \
        gemm_builtin_run_##SFX(trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c,     \
                               ldc, 0);                                                       \
    }

static size_t gemm_round_up(size_t x, size_t to) { return (x + to - 1) / to * to; }

typedef struct gemm_tiling {
    int64_t tile_m, tile_n, tiles_m, tiles_n, grain;
} gemm_tiling;

static int64_t gemm_ceil_div(int64_t x, int64_t y) { return (x + y - 1) / y; }

/* Tiles of at most mc_max x nc_max, split further until every thread has a couple of tiles
 * to balance with, then evened out so the last row or column of tiles is not a sliver. */
static gemm_tiling gemm_plan_tiles(int64_t m, int64_t n, int64_t k, int64_t mc_max, int64_t nr,
                                   int64_t nc_max, int threads) {
    int64_t tiles_m = gemm_ceil_div(m, mc_max), tiles_n = gemm_ceil_div(n, nc_max);
    int64_t want = threads > 1 ? 2 * (int64_t)threads : 1;
    while (tiles_m * tiles_n < want) {
        int can_split_m = gemm_ceil_div(m, tiles_m + 1) >= 4 * GEMM_MR;
        int can_split_n = gemm_ceil_div(n, tiles_n + 1) >= 4 * nr;
        if (!can_split_m && !can_split_n) break;
        if (can_split_n && (!can_split_m || n / tiles_n > m / tiles_m)) {
            tiles_n++;
        } else {
            tiles_m++;
        }
    }
    gemm_tiling t;
    t.tile_m = gemm_round_up((size_t)gemm_ceil_div(m, tiles_m), GEMM_MR);
    t.tile_n = gemm_round_up((size_t)gemm_ceil_div(n, tiles_n), (size_t)nr);
    t.tiles_m = gemm_ceil_div(m, t.tile_m);
    t.tiles_n = gemm_ceil_div(n, t.tile_n);
    double tile_flops = 2.0 * (double)t.tile_m * (double)t.tile_n * (double)k;
    double grain = GEMM_MIN_FLOPS_PER_TASK / tile_flops;
    t.grain = grain < 1.0 ? 1 : (int64_t)grain + 1;
    return t;
}

static void gemm_kernel_select_f32(void (**kernel)(int64_t, const float *, const float *, float *,
                                                   int64_t, float, float)) {
#if GEMM_HAVE_AVX2_KERNELS
    if (gemm_use_avx2()) *kernel = gemm_kernel_avx2_f32;
#else
    (void)kernel;
#endif
}

static void gemm_kernel_select_f64(void (**kernel)(int64_t, const double *, const double *,
                                                   double *, int64_t, double, double)) {
#if GEMM_HAVE_AVX2_KERNELS
    if (gemm_use_avx2()) *kernel = gemm_kernel_avx2_f64;
#else
    (void)kernel;
#endif
}

GEMM_DEFINE(float, f32, GEMM_MC_F32, GEMM_NR_F32, GEMM_NC_F32)
GEMM_DEFINE(double, f64, GEMM_MC_F64, GEMM_NR_F64, GEMM_NC_F64)

/* ---- Public entry points ---------------------------------------------------------- */

#if KILN_HAVE_CBLAS
/* Declared by OpenBLAS's cblas.h; weak so that linking against another CBLAS (which
 * lacks it) still works and the call is skipped. */
#ifndef OPENBLAS_VERSION
void openblas_set_num_threads(int num_threads);
#endif
#pragma weak openblas_set_num_threads

/* OpenBLAS's count is one global: the cache and the setting change together under a lock, or
 * two threads interleaving could leave the cache saying 1 while OpenBLAS runs on N */
static atomic_int gemm_blas_threads;
static pthread_mutex_t gemm_blas_threads_lock = PTHREAD_MUTEX_INITIALIZER;

static void gemm_blas_set_threads(int want) {
    if (atomic_load_explicit(&gemm_blas_threads, memory_order_relaxed) == want) return;
    pthread_mutex_lock(&gemm_blas_threads_lock);
    if (atomic_load_explicit(&gemm_blas_threads, memory_order_relaxed) != want) {
        if (openblas_set_num_threads) openblas_set_num_threads(want);
        atomic_store_explicit(&gemm_blas_threads, want, memory_order_relaxed);
    }
    pthread_mutex_unlock(&gemm_blas_threads_lock);
}

/* One thread budget (DESIGN.md section 3). Two engine workers may each start a product; if
 * both asked OpenBLAS for every core, a 2-core machine would run four busy threads (and
 * OpenBLAS's idle helpers yield-spin after each call). So a product claims kiln's pool, as a
 * oneDNN convolution does: the holder gives OpenBLAS the pool's threads, and a product that
 * starts while another product, convolution or parallel_for holds the pool (or from inside a
 * pool task) runs on its caller alone. A small product runs on its caller alone anyway and
 * leaves the pool free: waking OpenBLAS's helper costs more than it saves below about
 * GEMM_BLAS_MIN_FLOPS_PER_THREAD each (measured on this 2-core machine under load, cblas_sgemm
 * alone: 128x3136x128 took 0.76 ms on one thread and 5.4 ms on two, 128x784x256 0.36 against
 * 7.0 ms in one run and 0.39 in another; bench_gemm_shapes). OpenBLAS's thread count is one global: a product starting between another's
 * setting and its read may run with the other's count, which costs speed, never correctness.
 * For measurement, KILN_GEMM_BUDGET=0 gives every product the pool's threads (the rule
 * before) and KILN_GEMM_BUDGET=1 claims the pool without the size rule. */
#define GEMM_BLAS_MIN_FLOPS_PER_THREAD 2.0e8

static int gemm_blas_budget_mode(void) {
    static atomic_int cached = -1;
    int mode = atomic_load_explicit(&cached, memory_order_relaxed);
    if (mode < 0) {
        mode = (int)kiln__env_int_range("KILN_GEMM_BUDGET", 0, 1, 2);
        atomic_store_explicit(&cached, mode, memory_order_relaxed);
    }
    return mode;
}

/* Under the size rule: a product its caller runs alone. */
static int gemm_blas_is_small(int64_t m, int64_t n, int64_t k) {
    return 2.0 * (double)m * (double)n * (double)k < 2.0 * GEMM_BLAS_MIN_FLOPS_PER_THREAD;
}

/* Sets OpenBLAS's thread count for an m x n x k product; returns whether it claimed the pool
 * (the caller unclaims after the product). */
static int gemm_blas_claim_threads(int64_t m, int64_t n, int64_t k) {
    int mode = gemm_blas_budget_mode(), threads = kiln__pool_threads();
    if (mode == 0) {
        gemm_blas_set_threads(threads);
        return 0;
    }
    if (mode == 2 && gemm_blas_is_small(m, n, k)) {
        gemm_blas_set_threads(1);
        return 0;
    }
    int held = threads > 1 && kiln__pool_try_claim();
    gemm_blas_set_threads(held ? threads : 1);
    return held;
}

/* CBLAS wants int sizes and leading dimensions of at least the row width. A single row
 * may carry any leading dimension; anything else (stride-0 broadcasts, huge sizes) goes
 * to the built-in kernel, which takes any layout. */
static int gemm_blas_fix_ld(int64_t rows, int64_t cols, int64_t *ld) {
    int64_t need = cols > 1 ? cols : 1;
    if (*ld < need) {
        if (rows > 1) return 0;
        *ld = need;
    }
    return rows <= INT_MAX && cols <= INT_MAX && *ld <= INT_MAX;
}

static int gemm_blas_can_take(int trans_a, int trans_b, int64_t m, int64_t n, int64_t k,
                              int64_t *lda, int64_t *ldb, int64_t *ldc) {
    return gemm_blas_fix_ld(trans_a ? k : m, trans_a ? m : k, lda) &&
           gemm_blas_fix_ld(trans_b ? n : k, trans_b ? k : n, ldb) &&
           gemm_blas_fix_ld(m, n, ldc);
}
#endif

/* ---- Who runs an f32 product: the rule, or what was measured here (tune.h) ---------- */

void kiln__gemm_f32_with(kiln__gemm_provider p, int trans_a, int trans_b, int64_t m, int64_t n, int64_t k,
                         float alpha, const float *a, int64_t lda, const float *b, int64_t ldb, float beta,
                         float *c, int64_t ldc) {
    if (m <= 0 || n <= 0) return;
    if (k <= 0 || alpha == 0.0f) {
        gemm_scale_f32(m, n, beta, c, ldc);
        return;
    }
    if (p == KILN__GEMM_DNNL && kiln__gemm_dnnl_fits(trans_a, trans_b, m, n, k, lda, ldb, ldc)) {
        (void)kiln__gemm_dnnl_f32(trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
        return;
    }
#if KILN_HAVE_CBLAS
    if (p != KILN__GEMM_BUILTIN && gemm_blas_can_take(trans_a, trans_b, m, n, k, &lda, &ldb, &ldc)) {
        int held = gemm_blas_claim_threads(m, n, k);
        cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans,
                    trans_b ? CblasTrans : CblasNoTrans, (int)m, (int)n, (int)k, alpha, a,
                    (int)lda, b, (int)ldb, beta, c, (int)ldc);
        if (held) kiln__pool_unclaim();
        return;
    }
#endif
    kiln__gemm_builtin_f32(trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

/* what the tuner times: a dense product, as a user's matmul runs it */
static void gemm_tune_run(kiln__gemm_provider p, int64_t m, int64_t n, int64_t k, const float *a, const float *b,
                          float *c) {
    kiln__gemm_f32_with(p, 0, 0, m, n, k, 1.0f, a, k, b, n, 0.0f, c, n);
}

/* kiln's vector code runs at the CPU's best (KILN_ISA or a test did not cap it): a decision
 * measured with everything on holds only then */
static bool gemm_isa_uncapped(void) {
    const kiln__machine *mc = kiln__machine_facts();
    const char *best = mc->avx512f ? "avx512" : mc->avx2 && mc->fma ? "avx2" : "scalar";
    return strcmp(kiln__vmath_isa(), best) == 0;
}

kiln__gemm_provider kiln__gemm_f32_provider(int64_t n, int64_t k) {
    /* the rule: oneDNN where the CPU has AVX-512 (gemm_dnnl.c), else the BLAS, else our kernel */
    kiln__gemm_provider rule = kiln__gemm_dnnl_by_rule() ? KILN__GEMM_DNNL
                               : KILN_HAVE_CBLAS         ? KILN__GEMM_BLAS
                                                         : KILN__GEMM_BUILTIN;
    if (kiln__gemm_dnnl_user_mode() >= 0 || !gemm_isa_uncapped()) return rule;
    unsigned available = 1u << KILN__GEMM_BUILTIN | (KILN_HAVE_CBLAS ? 1u << KILN__GEMM_BLAS : 0u) |
                         (KILN_HAVE_DNNL ? 1u << KILN__GEMM_DNNL : 0u);
    kiln__gemm_provider p =
        kiln__tune_gemm_f32(n, k, gemm_tune_run, available, rule, !kiln__pool_in_parallel_region());
    return p == KILN__GEMM_BY_RULE ? rule : p;
}

int64_t kiln__gemm_f32_tile_rows(int64_t n, int64_t k) {
    return KILN_HAVE_DNNL && kiln__gemm_f32_provider(n, k) == KILN__GEMM_DNNL ? kiln__gemm_dnnl_tile_rows(n, k) : 0;
}

void kiln__gemm_f32(int trans_a, int trans_b, int64_t m, int64_t n, int64_t k, float alpha,
                    const float *a, int64_t lda, const float *b, int64_t ldb, float beta,
                    float *c, int64_t ldc) {
    if (m <= 0 || n <= 0) return;
    kiln__gemm_f32_with(k > 0 ? kiln__gemm_f32_provider(n, k) : KILN__GEMM_BUILTIN, trans_a, trans_b, m, n, k,
                        alpha, a, lda, b, ldb, beta, c, ldc);
}

void kiln__gemm_f64(int trans_a, int trans_b, int64_t m, int64_t n, int64_t k, double alpha,
                    const double *a, int64_t lda, const double *b, int64_t ldb, double beta,
                    double *c, int64_t ldc) {
    if (m <= 0 || n <= 0) return;
    if (k <= 0 || alpha == 0.0) {
        gemm_scale_f64(m, n, beta, c, ldc);
        return;
    }
#if KILN_HAVE_CBLAS
    if (gemm_blas_can_take(trans_a, trans_b, m, n, k, &lda, &ldb, &ldc)) {
        int held = gemm_blas_claim_threads(m, n, k);
        cblas_dgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans,
                    trans_b ? CblasTrans : CblasNoTrans, (int)m, (int)n, (int)k, alpha, a,
                    (int)lda, b, (int)ldb, beta, c, (int)ldc);
        if (held) kiln__pool_unclaim();
        return;
    }
#endif
    kiln__gemm_builtin_f64(trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

/* ---- Serial products: one thread each, many side by side ---------------------------- */

/* OpenBLAS runs a product of at most 2^18 multiply-adds (m*n*k) on its caller without waking
 * its threads (SMP_THRESHOLD_MIN x GEMM_MULTITHREAD_THRESHOLD in interface/gemm.c). A larger
 * product cut into row blocks under that size stays on the calling thread too, and so costs
 * nothing in global thread settings that concurrent callers would race on. Blocks shorter
 * than GEMM_SERIAL_MIN_ROWS lose too much to repacking B: the built-in kernel runs those. */
#define GEMM_BLAS_SERIAL_MNK ((int64_t)1 << 18)
#define GEMM_SERIAL_MIN_ROWS 8

/* Rows of C per BLAS call of a serial product, or 0 when the built-in kernel runs it. */
static int64_t gemm_serial_rows(int64_t m, int64_t n, int64_t k) {
#if KILN_HAVE_CBLAS
    if (m <= 0 || n <= 0 || k <= 0) return m > 0 ? m : 1;
    if (n > GEMM_BLAS_SERIAL_MNK / k) return 0; /* even one row is over the limit */
    int64_t rows = GEMM_BLAS_SERIAL_MNK / (n * k);
    if (rows >= m) return m;
    return rows >= GEMM_SERIAL_MIN_ROWS ? rows : 0;
#else
    (void)m, (void)n, (void)k;
    return 0;
#endif
}

int kiln__gemm_serial_is_fast(int64_t m, int64_t n, int64_t k) {
    return !KILN_HAVE_CBLAS || gemm_serial_rows(m, n, k) > 0;
}

#if KILN_HAVE_CBLAS
#define GEMM_SERIAL_BLAS(T, BLAS_FN)                                                          \
    int64_t rows = gemm_serial_rows(m, n, k);                                                 \
    if (rows > 0 && gemm_blas_can_take(trans_a, trans_b, m, n, k, &lda, &ldb, &ldc)) {        \
        for (int64_t i = 0; i < m; i += rows) {                                               \
            int64_t mb = m - i < rows ? m - i : rows;                                         \
            const T *ai = trans_a ? a + i : a + i * lda; /* op(A)'s rows from i */            \
            BLAS_FN(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans,                       \
                    trans_b ? CblasTrans : CblasNoTrans, (int)mb, (int)n, (int)k, alpha, ai,  \
                    (int)lda, b, (int)ldb, beta, c + i * ldc, (int)ldc);                      \
        }                                                                                     \
        return;                                                                               \
    }
#else
#define GEMM_SERIAL_BLAS(T, BLAS_FN)
#endif

#define GEMM_SERIAL_DEFINE(T, SFX, BLAS_FN)                                                   \
    void kiln__gemm_serial_##SFX(int trans_a, int trans_b, int64_t m, int64_t n, int64_t k,   \
                                 T alpha, const T *a, int64_t lda, const T *b, int64_t ldb,   \
                                 T beta, T *c, int64_t ldc) {                                 \
        if (m <= 0 || n <= 0) return;                                                         \
        if (k <= 0 || alpha == (T)0) {                                                        \
            gemm_scale_##SFX(m, n, beta, c, ldc);                                             \
            return;                                                                           \
        }                                                                                     \
        GEMM_SERIAL_BLAS(T, BLAS_FN)                                                          \
        gemm_builtin_run_##SFX(trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c,     \
                               ldc, 1);                                                       \
    }

GEMM_SERIAL_DEFINE(float, f32, cblas_sgemm)
GEMM_SERIAL_DEFINE(double, f64, cblas_dgemm)
