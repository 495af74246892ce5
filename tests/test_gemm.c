/* Matrix product against a double-precision reference: shapes, transposes, strides,
 * alpha/beta, for the dispatching entry points and both built-in micro-kernels; the built-in
 * and the CBLAS routes give a row the same bits whatever the thread count and the call's rows. */
#include "backend/cpu/gemm.h"
#include "backend/cpu/gemm-impl.h"
#include "backend/cpu/gemm_dnnl.h"

#include <stdint.h>

#include "backend/cpu/threadpool.h"
#include "kiln_test.h"

#ifndef KILN_HAVE_CBLAS
#define KILN_HAVE_CBLAS 0
#endif

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;

static double random_unit(void) { /* [-1, 1), xorshift64* */
    rng_state ^= rng_state >> 12, rng_state ^= rng_state << 25, rng_state ^= rng_state >> 27;
    return (double)((rng_state * 0x2545f4914f6cdd1dull) >> 11) * 0x1.0p-52 - 1.0;
}

static int64_t random_below(int64_t n) { return (int64_t)((random_unit() + 1.0) * 0.5 * (double)n); }

/* One product's description; stored operands carry `pad` extra elements per row. */
typedef struct gemm_case {
    int trans_a, trans_b;
    int64_t m, n, k, pad;
    double alpha, beta;
    int nan_c; /* fill C with NaN (only meaningful with beta == 0) */
} gemm_case;

/* f32 also goes straight to oneDNN's sgemm in its fixed tiles (gemm_dnnl.c) where this CPU
 * takes that path; f64, and a build or CPU without it, take the dispatching path on that route */
typedef enum { VIA_DISPATCH, VIA_BUILTIN_FAST, VIA_BUILTIN_PORTABLE, VIA_DNNL, VIA_COUNT } gemm_route;
static const char *route_names[VIA_COUNT] = {"dispatch", "builtin-fast", "builtin-portable", "dnnl"};

static void select_route(gemm_route route) {
    kiln__gemm_builtin_use_portable(route == VIA_BUILTIN_PORTABLE);
}

/* Reference and operand layout, shared by both precisions. The matrices are generated in
 * double and rounded to the tested type, so the reference sees exactly the same inputs. */
typedef struct operands {
    int64_t a_rows, a_cols, lda, b_rows, b_cols, ldb, ldc;
    double *a, *b, *c0, *ref, *bound;
} operands;

static void operands_make(const gemm_case *gc, int single_precision, operands *o) {
    o->a_rows = gc->trans_a ? gc->k : gc->m, o->a_cols = gc->trans_a ? gc->m : gc->k;
    o->b_rows = gc->trans_b ? gc->n : gc->k, o->b_cols = gc->trans_b ? gc->k : gc->n;
    o->lda = o->a_cols + gc->pad, o->ldb = o->b_cols + gc->pad, o->ldc = gc->n + gc->pad;
    size_t a_size = (size_t)(o->a_rows * o->lda) + 1, b_size = (size_t)(o->b_rows * o->ldb) + 1;
    size_t c_size = (size_t)(gc->m * o->ldc) + 1;
    o->a = malloc(a_size * sizeof(double));
    o->b = malloc(b_size * sizeof(double));
    o->c0 = malloc(c_size * sizeof(double));
    o->ref = malloc(c_size * sizeof(double));
    o->bound = malloc(c_size * sizeof(double));
    for (size_t i = 0; i < a_size; i++) o->a[i] = single_precision ? (float)random_unit() : random_unit();
    for (size_t i = 0; i < b_size; i++) o->b[i] = single_precision ? (float)random_unit() : random_unit();
    for (size_t i = 0; i < c_size; i++) {
        o->c0[i] = gc->nan_c ? NAN : single_precision ? (float)random_unit() : random_unit();
    }
    double eps = single_precision ? 0x1.0p-24 : 0x1.0p-53;
    for (int64_t i = 0; i < gc->m; i++) {
        for (int64_t j = 0; j < gc->n; j++) {
            double sum = 0, magnitude = 0;
            for (int64_t p = 0; p < gc->k; p++) {
                double x = gc->trans_a ? o->a[p * o->lda + i] : o->a[i * o->lda + p];
                double y = gc->trans_b ? o->b[j * o->ldb + p] : o->b[p * o->ldb + j];
                sum += x * y;
                magnitude += fabs(x * y);
            }
            double c = o->c0[i * o->ldc + j];
            double with_c = gc->beta == 0 ? 0 : gc->beta * c;
            o->ref[i * o->ldc + j] = gc->alpha * sum + with_c;
            /* Rounding of a k-term dot product grows with k; the kernel may also fuse. */
            o->bound[i * o->ldc + j] =
                4.0 * (double)(gc->k + 2) * eps * (fabs(gc->alpha) * magnitude + fabs(with_c)) + 1e-300;
        }
    }
}

static void operands_free(operands *o) {
    free(o->a), free(o->b), free(o->c0), free(o->ref), free(o->bound);
}

/* Checks the m x n result, and that the padding between rows of C was left alone. */
static int result_matches(const gemm_case *gc, const operands *o, const double *c) {
    for (int64_t i = 0; i < gc->m; i++) {
        for (int64_t j = 0; j < o->ldc; j++) {
            int64_t at = i * o->ldc + j;
            if (j >= gc->n) {
                int same = (isnan(c[at]) && isnan(o->c0[at])) || c[at] == o->c0[at];
                if (!same) return 0;
            } else if (!(fabs(c[at] - o->ref[at]) <= o->bound[at])) {
                fprintf(stderr, "  C[%lld,%lld] = %.17g, expected %.17g\n", (long long)i,
                        (long long)j, c[at], o->ref[at]);
                return 0;
            }
        }
    }
    return 1;
}

static int run_case_f32(const gemm_case *gc, gemm_route route) {
    operands o;
    operands_make(gc, 1, &o);
    size_t a_size = (size_t)(o.a_rows * o.lda) + 1, b_size = (size_t)(o.b_rows * o.ldb) + 1;
    size_t c_size = (size_t)(gc->m * o.ldc) + 1;
    float *a = malloc(a_size * sizeof *a), *b = malloc(b_size * sizeof *b), *c = malloc(c_size * sizeof *c);
    double *result = malloc(c_size * sizeof *result);
    for (size_t i = 0; i < a_size; i++) a[i] = (float)o.a[i];
    for (size_t i = 0; i < b_size; i++) b[i] = (float)o.b[i];
    for (size_t i = 0; i < c_size; i++) c[i] = (float)o.c0[i];
    select_route(route);
    int taken = route == VIA_DNNL && kiln__gemm_dnnl_takes(gc->trans_a, gc->trans_b, gc->m, gc->n, gc->k, o.lda,
                                                           o.ldb, o.ldc);
    if (taken) {
        taken = kiln__gemm_dnnl_f32(gc->trans_a, gc->trans_b, gc->m, gc->n, gc->k, (float)gc->alpha, a, o.lda, b,
                                    o.ldb, (float)gc->beta, c, o.ldc) == KILN_OK;
    } else if (route == VIA_DISPATCH || route == VIA_DNNL) {
        kiln__gemm_f32(gc->trans_a, gc->trans_b, gc->m, gc->n, gc->k, (float)gc->alpha, a, o.lda, b,
                       o.ldb, (float)gc->beta, c, o.ldc);
    } else {
        kiln__gemm_builtin_f32(gc->trans_a, gc->trans_b, gc->m, gc->n, gc->k, (float)gc->alpha, a,
                               o.lda, b, o.ldb, (float)gc->beta, c, o.ldc);
    }
    for (size_t i = 0; i < c_size; i++) result[i] = c[i];
    int ok = result_matches(gc, &o, result);
    free(a), free(b), free(c), free(result);
    operands_free(&o);
    return ok;
}

static int run_case_f64(const gemm_case *gc, gemm_route route) {
    operands o;
    operands_make(gc, 0, &o);
    size_t c_size = (size_t)(gc->m * o.ldc) + 1;
    double *c = malloc(c_size * sizeof *c);
    memcpy(c, o.c0, c_size * sizeof *c);
    select_route(route);
    if (route == VIA_DISPATCH || route == VIA_DNNL) {
        kiln__gemm_f64(gc->trans_a, gc->trans_b, gc->m, gc->n, gc->k, gc->alpha, o.a, o.lda, o.b,
                       o.ldb, gc->beta, c, o.ldc);
    } else {
        kiln__gemm_builtin_f64(gc->trans_a, gc->trans_b, gc->m, gc->n, gc->k, gc->alpha, o.a,
                               o.lda, o.b, o.ldb, gc->beta, c, o.ldc);
    }
    int ok = result_matches(gc, &o, c);
    free(c);
    operands_free(&o);
    return ok;
}

static void check_case(gemm_case gc) {
    for (int route = 0; route < VIA_COUNT; route++) {
        int ok32 = run_case_f32(&gc, (gemm_route)route), ok64 = run_case_f64(&gc, (gemm_route)route);
        KT_CHECK_MSG(ok32 && ok64,
                     "%s %s: ta=%d tb=%d m=%lld n=%lld k=%lld pad=%lld alpha=%g beta=%g nan_c=%d",
                     route_names[route], ok32 ? "f64" : "f32", gc.trans_a, gc.trans_b,
                     (long long)gc.m, (long long)gc.n, (long long)gc.k, (long long)gc.pad,
                     gc.alpha, gc.beta, gc.nan_c);
    }
    select_route(VIA_DISPATCH);
}

static void check_all_transposes(int64_t m, int64_t n, int64_t k, int64_t pad, double alpha,
                                 double beta) {
    for (int t = 0; t < 4; t++) {
        gemm_case gc = {.trans_a = t & 1, .trans_b = t >> 1, .m = m, .n = n, .k = k, .pad = pad,
                        .alpha = alpha, .beta = beta};
        check_case(gc);
    }
}

KT_TEST(reports_implementation) {
    const char *impl = kiln__gemm_impl();
    KT_CHECK(KILN_HAVE_CBLAS ? strcmp(impl, "builtin") != 0 : strcmp(impl, "builtin") == 0);
    fprintf(stderr, "  gemm: %s, built-in micro-kernel: %s\n", impl, kiln__gemm_builtin_kernel());
}

KT_TEST(empty_and_degenerate_shapes) {
    static const int64_t dims[][3] = {{0, 0, 0}, {0, 5, 3}, {5, 0, 3}, {5, 3, 0}, {1, 1, 1},
                                      {1, 7, 1}, {7, 1, 5}, {1, 1, 300}, {2, 3, 1}};
    for (size_t d = 0; d < sizeof dims / sizeof *dims; d++) {
        check_all_transposes(dims[d][0], dims[d][1], dims[d][2], 0, 1.0, 0.0);
        check_all_transposes(dims[d][0], dims[d][1], dims[d][2], 2, -0.5, 1.25);
    }
}

KT_TEST(odd_sizes_all_transposes) {
    check_all_transposes(67, 33, 129, 0, 1.0, 0.0);
    check_all_transposes(67, 33, 129, 5, 0.75, -2.0);
    check_all_transposes(6, 16, 256, 0, 1.0, 1.0);  /* exactly one register block */
    check_all_transposes(13, 17, 600, 1, 1.0, 0.5); /* several k slices accumulate */
    check_all_transposes(150, 200, 70, 3, 2.0, 0.0);
}

KT_TEST(large_multi_tile) {
    /* Several tiles in m and n (tiles are up to 288 x 1024 floats), one and two k slices. */
    check_all_transposes(301, 1100, 40, 1, 1.0, 0.25);
    gemm_case gc = {.m = 301, .n = 1030, .k = 300, .pad = 2, .alpha = -1.0, .beta = 0.5};
    check_case(gc);
}

/* f32 products over several oneDNN tiles (gemm_dnnl.c: 256 rows, two column tiles from 256
 * columns) spread over the pool's threads, also with a thread count that leaves one short. */
KT_TEST(pool_blocks_above_size_rule) {
    int threads = kiln__pool_threads();
    gemm_case big[2] = {{.trans_a = 0, .trans_b = 1, .m = 260, .n = 1030, .k = 760, .pad = 1, .alpha = 1.0, .beta = 0.0},
                        {.trans_a = 1, .trans_b = 0, .m = 1030, .n = 250, .k = 790, .pad = 3, .alpha = -0.5, .beta = 0.75}};
    for (int i = 0; i < 2; i++) { /* f32 only, the routes that cut C (the reference is costly) */
        kiln__pool_set_threads(2 + i);
        KT_CHECK_MSG(run_case_f32(&big[i], VIA_DISPATCH) && run_case_f32(&big[i], VIA_DNNL), "m=%lld n=%lld k=%lld, %d threads",
                     (long long)big[i].m, (long long)big[i].n, (long long)big[i].k, 2 + i);
    }
    kiln__pool_set_threads(threads);
    check_all_transposes(301, 1100, 40, 1, 1.0, 0.25); /* the pool route on a smaller product */
}

KT_TEST(random_shapes) {
    for (int trial = 0; trial < 40; trial++) {
        gemm_case gc = {.trans_a = (int)random_below(2), .trans_b = (int)random_below(2),
                        .m = 1 + random_below(90), .n = 1 + random_below(90),
                        .k = random_below(300), .pad = random_below(4),
                        .alpha = random_unit() * 2, .beta = trial % 3 ? random_unit() : 0.0};
        check_case(gc);
    }
}

KT_TEST(zero_beta_overwrites_nan) {
    for (int t = 0; t < 4; t++) {
        gemm_case gc = {.trans_a = t & 1, .trans_b = t >> 1, .m = 37, .n = 41, .k = 19, .pad = 2,
                        .alpha = 1.5, .beta = 0.0, .nan_c = 1};
        check_case(gc);
        gc.k = 0; /* C = 0 * C must still be exactly 0, not NaN */
        check_case(gc);
        gc.k = 19, gc.alpha = 0.0;
        check_case(gc);
    }
}

KT_TEST(alpha_zero_scales_c) {
    check_all_transposes(20, 30, 40, 1, 0.0, 3.0);
    check_all_transposes(20, 30, 40, 1, 0.0, 1.0);
}

/* The built-in kernel's k order does not depend on the tiling, so thread count cannot
 * change a single bit of the result. */
KT_TEST(builtin_independent_of_thread_count) {
    int64_t m = 257, n = 300, k = 530;
    float *a = malloc((size_t)(m * k) * sizeof *a), *b = malloc((size_t)(k * n) * sizeof *b);
    float *c1 = malloc((size_t)(m * n) * sizeof *c1), *c2 = malloc((size_t)(m * n) * sizeof *c2);
    for (int64_t i = 0; i < m * k; i++) a[i] = (float)random_unit();
    for (int64_t i = 0; i < k * n; i++) b[i] = (float)random_unit();
    int threads = kiln__pool_threads();
    kiln__pool_set_threads(1);
    kiln__gemm_builtin_f32(0, 1, m, n, k, 1.0f, a, k, b, k, 0.0f, c1, n);
    kiln__pool_set_threads(3);
    kiln__gemm_builtin_f32(0, 1, m, n, k, 1.0f, a, k, b, k, 0.0f, c2, n);
    kiln__pool_set_threads(threads);
    KT_CHECK(memcmp(c1, c2, (size_t)(m * n) * sizeof *c1) == 0);
    free(a), free(b), free(c1), free(c2);
}

/* The CBLAS route (KILN__GEMM_BLAS) gives a row the same bits whatever the thread count and
 * however the rows were cut at multiples of the kernel's row period (gemm_blas.c): a fused
 * product's panel (fused_matmul.c) must compute what the whole product does. k = 784 leaves a
 * remainder between OpenBLAS's GEMM_Q and 2 GEMM_Q, which its threaded driver sliced other than
 * its single-threaded one (test_fusion_matmul under KILN_ISA=avx2). */
KT_TEST(blas_rows_independent_of_call_and_threads) {
    int64_t period = kiln__gemm_blas_row_period(false);
    if (!KILN_HAVE_CBLAS || period <= 0) return;
    int64_t m = 600, n = 1024, k = 784, panel = period * (120 / period > 0 ? 120 / period : 1);
    float *a = malloc((size_t)(m * k) * sizeof *a), *b = malloc((size_t)(k * n) * sizeof *b);
    float *whole = malloc((size_t)(m * n) * sizeof *whole), *parts = malloc((size_t)(m * n) * sizeof *parts);
    for (int64_t i = 0; i < m * k; i++) a[i] = (float)random_unit();
    for (int64_t i = 0; i < k * n; i++) b[i] = (float)random_unit();
    int threads = kiln__pool_threads();
    for (int t = 1; t <= 3; t++) {
        kiln__pool_set_threads(2);
        kiln__gemm_f32_with(KILN__GEMM_BLAS, 0, 0, m, n, k, 1.0f, a, k, b, n, 0.0f, whole, n);
        kiln__pool_set_threads(t);
        for (int64_t r = 0; r < m; r += panel) /* the panels of a fused product, on t threads */
            kiln__gemm_f32_with(KILN__GEMM_BLAS, 0, 0, m - r < panel ? m - r : panel, n, k, 1.0f, a + r * k, k, b, n,
                                0.0f, parts + r * n, n);
        KT_CHECK_MSG(memcmp(whole, parts, (size_t)(m * n) * sizeof *whole) == 0, "panels on %d threads differ", t);
    }
    kiln__pool_set_threads(threads);
    free(a), free(b), free(whole), free(parts);
}

int main(void) {
    KT_RUN(reports_implementation);
    KT_RUN(empty_and_degenerate_shapes);
    KT_RUN(odd_sizes_all_transposes);
    KT_RUN(large_multi_tile);
    KT_RUN(pool_blocks_above_size_rule);
    KT_RUN(random_shapes);
    KT_RUN(zero_beta_overwrites_nan);
    KT_RUN(alpha_zero_scales_c);
    KT_RUN(builtin_independent_of_thread_count);
    KT_RUN(blas_rows_independent_of_call_and_threads);
    kiln__pool_shutdown();
    return kt_finish();
}
