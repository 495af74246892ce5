/* f32 products through oneDNN's dnnl_sgemm (see gemm_dnnl.h).
 *
 * Why: Debian's OpenBLAS 0.3.21 does not know AMD's Zen 5 and runs its Haswell (AVX2)
 * kernels there, while oneDNN picks AVX-512 from the CPU's feature bits. One thread, this
 * machine (AMD EPYC, AVX-512), x W^T at MiniLM's shapes (m = 2300 tokens): OpenBLAS 107-118
 * GFLOP/s, dnnl_sgemm 211-223. With OPENBLAS_CORETYPE=SkylakeX (the AVX-512 kernels OpenBLAS
 * picks on an Intel CPU) the two measured alike here (222 against 224 GFLOP/s at 2300 x 1152 x
 * 384), so oneDNN costs nothing where OpenBLAS does know the CPU, and the path is on wherever the
 * CPU has AVX-512 and KILN_ISA leaves kiln's own AVX-512 code on (KILN_GEMM_DNNL=0 turns it
 * off, =1 on everywhere oneDNN runs). That is the rule; where the user says nothing, gemm.c
 * asks the tuner (tune.h), which times oneDNN against the BLAS per size class on this machine.
 *
 * Tiles: oneDNN's sums over k for one output element depend on the call's shape (a row
 * computed in a call of fewer than 16 rows, or with k = 1000 fewer than 128, came out
 * different from the same row in a larger call), so every product runs as tiles of a height
 * fixed by n, k and the machine (kiln__gemm_dnnl_tile_rows: never by m or the thread count)
 * from its row 0, and columns in a split fixed by n alone (a short last tile's by n, k and its
 * rows: kiln__gemm_dnnl_tile_cols): a panel of a product starting at a multiple of that height
 * (fused_matmul.c) makes the same calls for its rows as the whole product does, and a row's bits are the same whatever the thread count. The tiles spread over
 * kiln's pool, each oneDNN call on its own thread (OpenMP told one thread on each pool thread:
 * no OpenMP team besides the pool).
 *
 * The height: each call packs its k x tile_cols slice of B again, 1/rows of the tile's work in
 * copies; cheap while the slice comes from cache, not once it streams from memory. So tiles are
 * TILE_ROWS (256) tall while the slice fits in two L2s (core/machine.h); past that, as tall as
 * leaves a square product (m = n) one tile per core, up to TILE_ROWS_MAX. Two threads, AMD EPYC
 * Zen 5 (L2 1 MiB), under `chrt -f 50` on a loaded machine (BENCHMARKS.md, #29, 20:22 UTC):
 * n = k = 2048 (8 MiB slices) 256-row tiles 448-450 GFLOP/s, 512-row 465-471, 1024-row (the rule
 * before, two tiles per core) 449-455, 2048-row (this rule's) 469-478, oneDNN's own 2-thread
 * sgemm 472-483; n = k = 4096 (32 MiB) 1024-row 476-491, 2048-row (before) 490-493, 4096-row
 * (now) 498-503, oneDNN 483-486. (An earlier loaded run had measured 1024 rows best at 2048.) */
#include "backend/cpu/gemm_dnnl.h"

#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cpu/cpu-impl.h"
#include "backend/cpu/gemm.h"
#include "backend/cpu/vmath.h"
#include "core/machine.h"

#define TILE_ROWS KILN__GEMM_DNNL_TILE_ROWS
#define TILE_ROWS_MAX 4096
/* Columns: two tiles (one per core here) from 256 columns up, in multiples of 64. */
#define TILE_COLS_MIN 256

static int64_t tile_cols_of(int64_t n) { return n < TILE_COLS_MIN ? n : ((n + 1) / 2 + 63) / 64 * 64; }

/* A short tile (fewer rows than the tile height: a product's last tile, or all of a product of
 * fewer rows, such as a layer over one batch of 128) that is one column tile (under 256 columns)
 * and at least two of the built-in kernel's smallest tasks (gemm_builtin.c: 4e6 FLOP, well above
 * a hand-off) runs as two column halves, in multiples of 16, from 128 columns (halves of 64 and
 * more): otherwise it is one task, one thread, and a product of one such tile leaves the other
 * cores idle. The Fashion-MNIST CNN's first linear layer (128 x 128 x 3136, x W^T) took 676-949
 * us as one tile, 484-528 us in two halves, oneDNN's own 2-thread sgemm 378-549 (Intel Xeon
 * family 6 model 207, 2 vCPUs, BENCHMARKS.md, #29). Only short tiles: splitting every tile of a
 * tall 128-column product cost 8-13% there (512 x 128 x 512, 2300 x 128 x 384: narrower calls),
 * where the row tiles already feed every thread. A function of n, k and the tile's own rows:
 * a row panel starting at a tile edge (fused_matmul.c) makes the same calls for its rows. */
#define SHORT_SPLIT_MIN_COLS 128
#define SHORT_SPLIT_MIN_FLOPS 8.0e6

int64_t kiln__gemm_dnnl_tile_cols(int64_t n, int64_t k, int64_t rows, int64_t tile_rows) {
    int64_t cols = tile_cols_of(n > 0 ? n : 1);
    if (rows >= tile_rows || cols != n || n < SHORT_SPLIT_MIN_COLS) return cols;
    if (2.0 * (double)rows * (double)n * (double)k < SHORT_SPLIT_MIN_FLOPS) return cols;
    return ((n + 1) / 2 + 15) / 16 * 16;
}

/* KILN_GEMM_DNNL_ROWS: a height for every shape, 0 unset; read once */
static int64_t env_rows(void) {
    static _Atomic int64_t cached = -1;
    int64_t v = atomic_load_explicit(&cached, memory_order_relaxed);
    if (v < 0) {
        v = kiln__env_int_range("KILN_GEMM_DNNL_ROWS", 16, 65536, 0);
        atomic_store_explicit(&cached, v, memory_order_relaxed);
    }
    return v;
}

int64_t kiln__gemm_dnnl_tile_rows(int64_t n, int64_t k) {
    int64_t user = env_rows();
    if (user > 0) return user;
    const kiln__machine *mc = kiln__machine_facts();
    int64_t cols = tile_cols_of(n > 0 ? n : 1), col_tiles = ((n > 0 ? n : 1) + cols - 1) / cols;
    double slice = (double)(k > 0 ? k : 1) * (double)cols * sizeof(float), cached = 2.0 * (double)mc->l2_bytes;
    double square_cap = (double)n * (double)col_tiles / (double)mc->cores; /* one tile per core at m = n */
    int64_t rows = TILE_ROWS;
    if (slice > cached)
        while (rows < TILE_ROWS_MAX && 2.0 * (double)rows <= square_cap) rows *= 2;
    return rows;
}

static atomic_int forced = -1;

void kiln__gemm_dnnl_force(int mode) { atomic_store(&forced, mode < 0 ? -1 : mode != 0); }

/* KILN_GEMM_DNNL: 0 off, 1 on, -1 unset; read once */
static int env_mode(void) {
    static atomic_int cached = -2;
    int v = atomic_load_explicit(&cached, memory_order_relaxed);
    if (v == -2) {
        v = (int)kiln__env_int_range("KILN_GEMM_DNNL", 0, 1, -1);
        atomic_store_explicit(&cached, v, memory_order_relaxed);
    }
    return v;
}

int kiln__gemm_dnnl_user_mode(void) {
    if (!KILN_HAVE_DNNL) return -1;
    int f = atomic_load_explicit(&forced, memory_order_relaxed);
    return f >= 0 ? f : env_mode();
}

/* forced, else KILN_GEMM_DNNL, else the CPU's AVX-512 unless KILN_ISA (or a test) caps kiln's
 * vector code below it */
static bool enabled(void) {
    if (!KILN_HAVE_DNNL) return false;
    int user = kiln__gemm_dnnl_user_mode();
    if (user >= 0) return user;
    return kiln__machine_facts()->avx512f && strcmp(kiln__vmath_isa(), "avx512") == 0;
}

bool kiln__gemm_dnnl_by_rule(void) { return enabled(); }

int64_t kiln__gemm_dnnl_rows(int64_t n, int64_t k) { return enabled() ? kiln__gemm_dnnl_tile_rows(n, k) : 0; }

/* oneDNN wants each leading dimension at least its stored row's width, even of a single row */
static bool ld_ok(int64_t cols, int64_t ld) { return ld >= (cols > 1 ? cols : 1); }

bool kiln__gemm_dnnl_takes(int trans_a, int trans_b, int64_t m, int64_t n, int64_t k, int64_t lda, int64_t ldb,
                           int64_t ldc) {
    return enabled() && kiln__gemm_dnnl_fits(trans_a, trans_b, m, n, k, lda, ldb, ldc);
}

bool kiln__gemm_dnnl_fits(int trans_a, int trans_b, int64_t m, int64_t n, int64_t k, int64_t lda, int64_t ldb,
                          int64_t ldc) {
    return KILN_HAVE_DNNL && m > 0 && n > 0 && k > 0 && ld_ok(trans_a ? m : k, lda) && ld_ok(trans_b ? k : n, ldb) &&
           ld_ok(n, ldc);
}

#if KILN_HAVE_DNNL

#include <dlfcn.h>
#include <oneapi/dnnl/dnnl.h>
#include <pthread.h>

/* libgomp's omp_set_num_threads, which comes in with libdnnl; looked up, not linked */
static void (*omp_set_threads)(int);
static pthread_once_t omp_once = PTHREAD_ONCE_INIT;
static void omp_lookup(void) { *(void **)&omp_set_threads = dlsym(RTLD_DEFAULT, "omp_set_num_threads"); }

void kiln__dnnl_omp_threads(int n) {
    pthread_once(&omp_once, omp_lookup);
    if (omp_set_threads) omp_set_threads(n);
}

typedef struct {
    char ta, tb;
    int64_t m, n, k, lda, ldb, ldc, tile_rows, tile_cols, col_tiles;
    int64_t full_tasks, last_cols, last_col_tiles; /* the tasks of whole tiles; the last tile's columns */
    float alpha, beta;
    const float *a, *b;
    float *c;
} tiles_job;

static void tiles_task(void *ctx, int64_t begin, int64_t end) {
    tiles_job *j = ctx;
    kiln__dnnl_omp_threads(1); /* every time: a oneDNN conv on this thread sets its own */
    for (int64_t t = begin; t < end; t++) {
        bool last = t >= j->full_tasks; /* (a short last tile: its own column split) */
        int64_t tc = last ? j->last_cols : j->tile_cols, u = last ? t - j->full_tasks : t;
        int64_t i0 = last ? j->full_tasks / j->col_tiles * j->tile_rows : u / j->col_tiles * j->tile_rows;
        int64_t j0 = (last ? u : u % j->col_tiles) * tc;
        int64_t rows = j->m - i0 < j->tile_rows ? j->m - i0 : j->tile_rows;
        int64_t cols = j->n - j0 < tc ? j->n - j0 : tc;
        const float *a = j->a + (j->ta == 'T' ? i0 : i0 * j->lda);
        const float *b = j->b + (j->tb == 'T' ? j0 * j->ldb : j0);
        float *c = j->c + i0 * j->ldc + j0;
        /* a tile oneDNN refuses (it could not get memory to pack) runs on the built-in kernel:
         * the product stays whole, in other bits for that tile only */
        if (dnnl_sgemm(j->ta, j->tb, rows, cols, j->k, j->alpha, a, j->lda, b, j->ldb, j->beta, c, j->ldc) !=
            dnnl_success)
            kiln__gemm_builtin_f32(j->ta == 'T', j->tb == 'T', rows, cols, j->k, j->alpha, a, j->lda, b, j->ldb,
                                   j->beta, c, j->ldc);
    }
}

/* The product's tiles (kiln__gemm_dnnl_tile_rows high, tile_cols_of wide; a short last row of
 * tiles kiln__gemm_dnnl_tile_cols wide); returns their count. */
static int64_t tiles_of(tiles_job *j, int trans_a, int trans_b, int64_t m, int64_t n, int64_t k, float alpha,
                        const float *a, int64_t lda, const float *b, int64_t ldb, float beta, float *c, int64_t ldc) {
    int64_t tile_cols = tile_cols_of(n), tile_rows = kiln__gemm_dnnl_tile_rows(n, k);
    int64_t full_rows = m / tile_rows, short_rows = m % tile_rows;
    int64_t last_cols = kiln__gemm_dnnl_tile_cols(n, k, short_rows > 0 ? short_rows : tile_rows, tile_rows);
    *j = (tiles_job){.ta = trans_a ? 'T' : 'N', .tb = trans_b ? 'T' : 'N', .m = m, .n = n, .k = k, .lda = lda,
                     .ldb = ldb, .ldc = ldc, .tile_rows = tile_rows, .tile_cols = tile_cols,
                     .col_tiles = (n + tile_cols - 1) / tile_cols, .last_cols = last_cols,
                     .last_col_tiles = short_rows > 0 ? (n + last_cols - 1) / last_cols : 0, .alpha = alpha,
                     .beta = beta, .a = a, .b = b, .c = c};
    j->full_tasks = full_rows * j->col_tiles;
    return j->full_tasks + j->last_col_tiles;
}

/* oneDNN registers its JIT kernels' destructors when it first makes them (for each shape class):
 * the exit hold is registered after them (backend-impl.h), a bounded number of times */
static void hold_exit_after_jit(void) {
    static atomic_int registrations;
    if (atomic_fetch_add(&registrations, 1) < 64) kiln__backend_exit_hold_register();
}

kiln_status kiln__gemm_dnnl_f32(int trans_a, int trans_b, int64_t m, int64_t n, int64_t k, float alpha,
                                const float *a, int64_t lda, const float *b, int64_t ldb, float beta, float *c,
                                int64_t ldc) {
    tiles_job j;
    int64_t count = tiles_of(&j, trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
    kiln__parallel_for(count, 1, tiles_task, &j);
    hold_exit_after_jit();
    return KILN_OK;
}

void kiln__gemm_dnnl_serial_f32(int trans_a, int trans_b, int64_t m, int64_t n, int64_t k, float alpha,
                                const float *a, int64_t lda, const float *b, int64_t ldb, float beta, float *c,
                                int64_t ldc) {
    tiles_job j;
    tiles_task(&j, 0, tiles_of(&j, trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc));
    hold_exit_after_jit();
}

#else

kiln_status kiln__gemm_dnnl_f32(int trans_a, int trans_b, int64_t m, int64_t n, int64_t k, float alpha,
                                const float *a, int64_t lda, const float *b, int64_t ldb, float beta, float *c,
                                int64_t ldc) {
    (void)trans_a, (void)trans_b, (void)m, (void)n, (void)k, (void)alpha, (void)a, (void)lda, (void)b, (void)ldb;
    (void)beta, (void)c, (void)ldc;
    kiln__kernel_error("kiln was built without oneDNN");
    return KILN_ERR_UNSUPPORTED;
}

/* (never called: kiln__gemm_dnnl_fits is false without oneDNN) */
void kiln__gemm_dnnl_serial_f32(int trans_a, int trans_b, int64_t m, int64_t n, int64_t k, float alpha,
                                const float *a, int64_t lda, const float *b, int64_t ldb, float beta, float *c,
                                int64_t ldc) {
    kiln__gemm_builtin_f32(trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

#endif
