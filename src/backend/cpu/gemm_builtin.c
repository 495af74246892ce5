/* kiln's own blocked matrix product (gemm.h: kiln__gemm_builtin_*), for builds without a BLAS,
 * layouts a BLAS cannot take, and sizes its int arguments cannot hold.
 *
 * The usual blocked scheme. C is cut into tiles of about MC x NC; each tile is one unit of work
 * for the thread pool and walks k in slices of KC. For every slice the tile packs its block of
 * op(B) into NR-wide column panels and its block of op(A) into MR-tall row panels (zero-padded at
 * the edges), so the micro-kernel reads both operands contiguously whatever the transposes and
 * leading dimensions were. The micro-kernel keeps an MR x NR block of C in registers across the
 * whole slice. Each element's sum runs over k in the same order whatever the tiling and thread
 * count (slices of KC from k = 0), so its bits do not depend on either. */
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cpu/gemm-impl.h"
#include "backend/cpu/gemm.h"
#include "backend/cpu/threadpool.h"

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


/* ---- AVX2 + FMA micro-kernels: C[MR x NR] = alpha * Ap.Bp + beta * C -------------- */

#if GEMM_HAVE_AVX2_KERNELS
/* Row i of the accumulator block, scaled and merged into C. beta == 0 never reads C. */
#define GEMM_AVX2_STORE_ROW_F32(i, lo, hi)                                                    \
    do {                                                                                      \
        float *row = c + (i) * ldc;                                                           \
        __m256 out_lo = _mm256_mul_ps(valpha, lo), out_hi = _mm256_mul_ps(valpha, hi);        \
        if (beta != 0.0f) {                                                                   \
            out_lo = _mm256_fmadd_ps(vbeta, _mm256_loadu_ps(row), out_lo);                    \
            out_hi = _mm256_fmadd_ps(vbeta, _mm256_loadu_ps(row + 8), out_hi);                \
        }                                                                                     \
        _mm256_storeu_ps(row, out_lo);                                                        \
        _mm256_storeu_ps(row + 8, out_hi);                                                    \
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

#define GEMM_AVX2_STORE_ROW_F64(i, lo, hi)                                                    \
    do {                                                                                      \
        double *row = c + (i) * ldc;                                                          \
        __m256d out_lo = _mm256_mul_pd(valpha, lo), out_hi = _mm256_mul_pd(valpha, hi);       \
        if (beta != 0.0) {                                                                    \
            out_lo = _mm256_fmadd_pd(vbeta, _mm256_loadu_pd(row), out_lo);                    \
            out_hi = _mm256_fmadd_pd(vbeta, _mm256_loadu_pd(row + 4), out_hi);                \
        }                                                                                     \
        _mm256_storeu_pd(row, out_lo);                                                        \
        _mm256_storeu_pd(row + 4, out_hi);                                                    \
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
 *   kiln__gemm_scale_SFX     C = beta * C (beta == 0 writes zeros)
 *   gemm_kernel_portable_SFX  the micro-kernel in plain C, for any CPU
 *   gemm_pack_a_SFX / gemm_pack_b_SFX
 *   gemm_tiles_SFX          the pool task: a range of C tiles, packing and multiplying
 *   kiln__gemm_builtin_SFX */
#define GEMM_DEFINE(T, SFX, MC, NR, NC)                                                       \
    typedef void (*gemm_kernel_##SFX##_fn)(int64_t kc, const T *ap, const T *bp, T *c,        \
                                           int64_t ldc, T alpha, T beta);                     \
                                                                                              \
    void kiln__gemm_scale_##SFX(int64_t m, int64_t n, T beta, T *c, int64_t ldc) {            \
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
    void kiln__gemm_builtin_run_##SFX(int trans_a, int trans_b, int64_t m, int64_t n,         \
                                        int64_t k, T alpha, const T *a, int64_t lda,          \
                                        const T *b, int64_t ldb, T beta, T *c, int64_t ldc,   \
                                        int serial) {                                         \
        if (m <= 0 || n <= 0) return;                                                         \
        if (k <= 0 || alpha == (T)0) {                                                        \
            kiln__gemm_scale_##SFX(m, n, beta, c, ldc);                                       \
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
        kiln__gemm_builtin_run_##SFX(trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, \
                                     ldc, 0);                                                 \
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
