/* Products through the CBLAS (OpenBLAS): tiles of rows over kiln's pool, each tile one
 * single-threaded BLAS call over every column; and serial products (one thread each, many side
 * by side).
 *
 * The bits of a row must not depend on how a product was cut: a fused product's panel
 * (fused_matmul.c) has to compute what the whole product does (tests/test_fusion_matmul failed
 * under KILN_ISA=avx2, where products go to OpenBLAS). Three things in Debian's OpenBLAS 0.3.21
 * move them (measured here, AMD Zen 5 running its Haswell kernels):
 *  - threads: its threaded driver (driver/level3/level3_thread.c) cuts k into other slices than
 *    its single-threaded one (level3.c: a remainder between GEMM_Q and 2 GEMM_Q is halved as
 *    (r + 1) / 2 there, rounded up to the unroll here), and each slice is rounded into C; whether
 *    a call runs threaded depends on its own size (interface/gemm.c: under 2^18 multiply-adds on
 *    one thread). So every call here runs on one thread.
 *  - the columns of the call: a sgemm over columns [0, 512) of a product gives column 248 other
 *    bits than the call over all 1024 (a 300 x 1024 x 784 or x 16 product). So a call always
 *    spans every column.
 *  - a row's place in the call modulo the kernel's row period: the Haswell sgemm kernel sums a
 *    row whose index in the call is a multiple of 12 apart alike (cutting a product's rows at 12,
 *    24, ... keeps its bits, at any other count it does not); its dgemm kernel every 2 rows, the
 *    SkylakeX sgemm kernel every row. Which kernel runs is OpenBLAS's choice at run time, so the
 *    period is probed once per element type on a small product (blas_row_period) and tiles and
 *    panels start at multiples of it (kiln__gemm_blas_row_period).
 * And the one thread budget (DESIGN.md section 3) holds by construction: OpenBLAS never starts
 * its threads for kiln's products; the tiles take kiln's pool when it is free and run on their
 * caller when another op holds it. The tiles: as many as threads (fewer for a product too small
 * to give each BLAS_MIN_FLOPS_PER_TASK: waking a worker costs more than it saves below). */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE 1 /* OpenBLAS's cblas.h declares functions taking cpu_set_t */
#endif
#include <limits.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cpu/cpu-impl.h"
#include "backend/cpu/gemm-impl.h"
#include "backend/cpu/gemm.h"
#include "backend/cpu/gemm_dnnl.h"
#include "backend/cpu/threadpool.h"

#ifndef KILN_HAVE_CBLAS
#define KILN_HAVE_CBLAS 0
#endif
#if KILN_HAVE_CBLAS
#include <cblas.h>
#endif

const char *kiln__gemm_impl(void) {
#if KILN_HAVE_CBLAS && defined(OPENBLAS_VERSION)
    return "openblas";
#elif KILN_HAVE_CBLAS
    return "cblas";
#else
    return "builtin";
#endif
}

#if KILN_HAVE_CBLAS

/* Declared by OpenBLAS's cblas.h; weak so that linking against another CBLAS (which lacks them)
 * still works and the calls are skipped. */
#ifndef OPENBLAS_VERSION
void openblas_set_num_threads(int num_threads);
int openblas_get_num_threads(void);
#endif
#pragma weak openblas_set_num_threads
#pragma weak openblas_get_num_threads

/* ~50 us of one AVX2 core: less is not worth waking a worker for */
#define BLAS_MIN_FLOPS_PER_TASK 1.0e7

/* OpenBLAS on one thread for every call of kiln's (a user's openblas_set_num_threads between
 * products is undone at the next one). Setting the count starts OpenBLAS's helper threads again
 * (goto_set_num_threads initialises its server), and an idle helper spins in sched_yield for about
 * 0.1 s, a core's worth beside the product (perf: half the speed of a 1024 product): so they are
 * stopped again (blas_startup.c); one thread never wakes them. */
static void blas_single_thread(void) {
    if (openblas_set_num_threads && (!openblas_get_num_threads || openblas_get_num_threads() != 1)) {
        openblas_set_num_threads(1);
        kiln__openblas_stop_helpers();
    }
}

/* CBLAS wants int sizes and leading dimensions of at least the row width. A single row
 * may carry any leading dimension; anything else (stride-0 broadcasts, huge sizes) goes
 * to the built-in kernel, which takes any layout. */
static bool blas_fix_ld(int64_t rows, int64_t cols, int64_t *ld) {
    int64_t need = cols > 1 ? cols : 1;
    if (*ld < need) {
        if (rows > 1) return false;
        *ld = need;
    }
    return rows <= INT_MAX && cols <= INT_MAX && *ld <= INT_MAX;
}

bool kiln__gemm_blas_can_take(int trans_a, int trans_b, int64_t m, int64_t n, int64_t k, int64_t *lda, int64_t *ldb,
                              int64_t *ldc) {
    return blas_fix_ld(trans_a ? k : m, trans_a ? m : k, lda) && blas_fix_ld(trans_b ? n : k, trans_b ? k : n, ldb) &&
           blas_fix_ld(m, n, ldc);
}

typedef struct blas_job {
    bool f64;
    int trans_a, trans_b;
    int64_t m, n, k, lda, ldb, ldc, tile_rows;
    double alpha, beta;
    const void *a, *b;
    void *c;
} blas_job;

static int64_t round_up(int64_t x, int64_t to) { return (x + to - 1) / to * to; }

static void blas_tiles(void *ctx, int64_t begin, int64_t end) {
    const blas_job *j = ctx;
    enum CBLAS_TRANSPOSE ta = j->trans_a ? CblasTrans : CblasNoTrans, tb = j->trans_b ? CblasTrans : CblasNoTrans;
    for (int64_t t = begin; t < end; t++) {
        int64_t i0 = t * j->tile_rows, a_at = j->trans_a ? i0 : i0 * j->lda, c_at = i0 * j->ldc;
        int rows = (int)(j->m - i0 < j->tile_rows ? j->m - i0 : j->tile_rows);
        if (j->f64)
            cblas_dgemm(CblasRowMajor, ta, tb, rows, (int)j->n, (int)j->k, j->alpha, (const double *)j->a + a_at,
                        (int)j->lda, (const double *)j->b, (int)j->ldb, j->beta, (double *)j->c + c_at, (int)j->ldc);
        else
            cblas_sgemm(CblasRowMajor, ta, tb, rows, (int)j->n, (int)j->k, (float)j->alpha, (const float *)j->a + a_at,
                        (int)j->lda, (const float *)j->b, (int)j->ldb, (float)j->beta, (float *)j->c + c_at,
                        (int)j->ldc);
    }
}

/* Rows cut at every multiple of PROBE_PERIODS[i] from a call of PROBE_M x PROBE_N x PROBE_K:
 * the smallest period whose every cut gives the uncut call's bits. 0 when none does. */
static const int64_t probe_periods[] = {1, 2, 4, 6, 8, 12, 16, 24, 32, 48, 96};
#define PROBE_M (96 + 13)
#define PROBE_N 37
#define PROBE_K 41

#define BLAS_PROBE_DEFINE(T, SFX, BLAS_FN)                                                               \
    static int64_t blas_probe_##SFX(void) {                                                              \
        T *a = malloc(sizeof(T) * PROBE_M * PROBE_K), *b = malloc(sizeof(T) * PROBE_K * PROBE_N);        \
        T *whole = malloc(sizeof(T) * PROBE_M * PROBE_N), *cut = malloc(sizeof(T) * PROBE_M * PROBE_N); \
        int64_t found = 0;                                                                               \
        if (a && b && whole && cut) {                                                                    \
            uint64_t x = 0x9e3779b97f4a7c15ull;                                                          \
            for (int i = 0; i < PROBE_M * PROBE_K; i++) x = x * 6364136223846793005ull + 1, a[i] = (T)(x >> 40) / (T)(1 << 24) - (T)0.5; \
            for (int i = 0; i < PROBE_K * PROBE_N; i++) x = x * 6364136223846793005ull + 1, b[i] = (T)(x >> 40) / (T)(1 << 24) - (T)0.5; \
            BLAS_FN(CblasRowMajor, CblasNoTrans, CblasNoTrans, PROBE_M, PROBE_N, PROBE_K, 1, a, PROBE_K, b, \
                    PROBE_N, 0, whole, PROBE_N);                                                         \
            for (size_t p = 0; p < sizeof probe_periods / sizeof probe_periods[0] && !found; p++) {      \
                bool same = true;                                                                        \
                for (int64_t r = probe_periods[p]; r < PROBE_M && same; r += probe_periods[p]) {         \
                    BLAS_FN(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)r, PROBE_N, PROBE_K, 1, a,    \
                            PROBE_K, b, PROBE_N, 0, cut, PROBE_N);                                       \
                    BLAS_FN(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)(PROBE_M - r), PROBE_N,      \
                            PROBE_K, 1, a + r * PROBE_K, PROBE_K, b, PROBE_N, 0, cut + r * PROBE_N,      \
                            PROBE_N);                                                                    \
                    same = memcmp(whole, cut, sizeof(T) * PROBE_M * PROBE_N) == 0;                       \
                }                                                                                        \
                if (same) found = probe_periods[p];                                                      \
            }                                                                                            \
        }                                                                                                \
        free(a), free(b), free(whole), free(cut);                                                        \
        return found;                                                                                    \
    }

BLAS_PROBE_DEFINE(float, f32, cblas_sgemm)
BLAS_PROBE_DEFINE(double, f64, cblas_dgemm)

static int64_t row_period[2];
static pthread_once_t period_once = PTHREAD_ONCE_INIT;

static void blas_probe_periods(void) {
    blas_single_thread();
    row_period[0] = blas_probe_f32();
    row_period[1] = blas_probe_f64();
}

int64_t kiln__gemm_blas_row_period(bool f64) {
    pthread_once(&period_once, blas_probe_periods);
    return row_period[f64];
}

static void blas_run(blas_job *j) {
    blas_single_thread();
    int64_t period = kiln__gemm_blas_row_period(j->f64);
    double tasks_by_size = 2.0 * (double)j->m * (double)j->n * (double)j->k / BLAS_MIN_FLOPS_PER_TASK;
    int64_t tasks = kiln__pool_in_parallel_region() ? 1 : kiln__pool_threads();
    if (tasks_by_size < (double)tasks) tasks = tasks_by_size < 1 ? 1 : (int64_t)tasks_by_size;
    j->tile_rows = period > 0 && tasks > 1 ? round_up((j->m + tasks - 1) / tasks, period) : j->m;
    kiln__parallel_for((j->m + j->tile_rows - 1) / j->tile_rows, 1, blas_tiles, j);
}

void kiln__gemm_blas_f32(int trans_a, int trans_b, int64_t m, int64_t n, int64_t k, float alpha, const float *a,
                         int64_t lda, const float *b, int64_t ldb, float beta, float *c, int64_t ldc) {
    blas_job j = {.f64 = false, .trans_a = trans_a, .trans_b = trans_b, .m = m, .n = n, .k = k, .lda = lda,
                  .ldb = ldb, .ldc = ldc, .alpha = alpha, .beta = beta, .a = a, .b = b, .c = c};
    blas_run(&j);
}

void kiln__gemm_blas_f64(int trans_a, int trans_b, int64_t m, int64_t n, int64_t k, double alpha, const double *a,
                         int64_t lda, const double *b, int64_t ldb, double beta, double *c, int64_t ldc) {
    blas_job j = {.f64 = true, .trans_a = trans_a, .trans_b = trans_b, .m = m, .n = n, .k = k, .lda = lda,
                  .ldb = ldb, .ldc = ldc, .alpha = alpha, .beta = beta, .a = a, .b = b, .c = c};
    blas_run(&j);
}

#else

bool kiln__gemm_blas_can_take(int trans_a, int trans_b, int64_t m, int64_t n, int64_t k, int64_t *lda, int64_t *ldb,
                              int64_t *ldc) {
    (void)trans_a, (void)trans_b, (void)m, (void)n, (void)k, (void)lda, (void)ldb, (void)ldc;
    return false;
}

int64_t kiln__gemm_blas_row_period(bool f64) {
    (void)f64;
    return 0;
}

/* (never called: nothing is taken) */
void kiln__gemm_blas_f32(int trans_a, int trans_b, int64_t m, int64_t n, int64_t k, float alpha, const float *a,
                         int64_t lda, const float *b, int64_t ldb, float beta, float *c, int64_t ldc) {
    kiln__gemm_builtin_run_f32(trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc, 0);
}

void kiln__gemm_blas_f64(int trans_a, int trans_b, int64_t m, int64_t n, int64_t k, double alpha, const double *a,
                         int64_t lda, const double *b, int64_t ldb, double beta, double *c, int64_t ldc) {
    kiln__gemm_builtin_run_f64(trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc, 0);
}

#endif

/* ---- Serial products: one thread each, many side by side ---------------------------- */

/* A serial product runs as BLAS calls of at most 2^18 multiply-adds (m*n*k): OpenBLAS runs
 * those on its caller whatever its thread count (SMP_THRESHOLD_MIN x GEMM_MULTITHREAD_THRESHOLD
 * in interface/gemm.c), so the product stays on the calling thread even where a user set that
 * count. A larger product goes in row blocks under that size; blocks shorter than
 * GEMM_SERIAL_MIN_ROWS lose too much to repacking B: the built-in kernel runs those. */
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
    if (rows > 0 && kiln__gemm_blas_can_take(trans_a, trans_b, m, n, k, &lda, &ldb, &ldc)) {  \
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

#define GEMM_SERIAL_DEFINE(T, SFX, BLAS_FN, FIRST)                                            \
    void kiln__gemm_serial_##SFX(int trans_a, int trans_b, int64_t m, int64_t n, int64_t k,   \
                                 T alpha, const T *a, int64_t lda, const T *b, int64_t ldb,   \
                                 T beta, T *c, int64_t ldc) {                                 \
        if (m <= 0 || n <= 0) return;                                                         \
        if (k <= 0 || alpha == (T)0) {                                                        \
            kiln__gemm_scale_##SFX(m, n, beta, c, ldc);                                       \
            return;                                                                           \
        }                                                                                     \
        FIRST                                                                                 \
        GEMM_SERIAL_BLAS(T, BLAS_FN)                                                          \
        kiln__gemm_builtin_run_##SFX(trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, \
                                     ldc, 1);                                                 \
    }

/* An f32 serial product goes where a pool product of its size class goes when that is oneDNN
 * (kiln__gemm_f32_provider: the tuner's measurement, else the rule), in the same tiles, on this
 * thread: the BLAS is there only when it measured faster. Intel Xeon family 6 model 207, where
 * Debian's OpenBLAS runs its Prescott (SSE3) kernels, one thread: attention's 128 x 128 x 32
 * 65 us in OpenBLAS against 11 in oneDNN, 16 x 16 x 32 0.95 against 0.62 (BENCHMARKS.md). */
#define SERIAL_DNNL_F32                                                                                   \
    if (kiln__gemm_f32_provider(n, k) == KILN__GEMM_DNNL &&                                               \
        kiln__gemm_dnnl_fits(trans_a, trans_b, m, n, k, lda, ldb, ldc)) {                                 \
        kiln__gemm_dnnl_serial_f32(trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);       \
        return;                                                                                           \
    }

GEMM_SERIAL_DEFINE(float, f32, cblas_sgemm, SERIAL_DNNL_F32)
GEMM_SERIAL_DEFINE(double, f64, cblas_dgemm, )
