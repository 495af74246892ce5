/* The int8 product as the engine runs it (the ops linear_int8, linear_int8_bias[_gelu] over
 * kiln's pool) against f64: every row count the tiles and the split treat differently (1, 2,
 * 15, 16, 17 and 64 rows: one tile, below one, one over, several), odd output and input counts
 * (a partial group of 16 outputs, a partial block of 32 inputs, inputs padded to a multiple of
 * 4), at 1 and 2 threads and on every ISA path this CPU has (scalar, AVX2, AVX512-VNNI). The f64
 * reference quantizes as kiln does (kiln__s8_quantize_values, whose bytes every path shares:
 * test_quantize) and sums the dequantized products exactly, so the tolerance is f32 rounding
 * only: an output computed twice, skipped or taken from another thread's columns fails by far
 * more. Results at 1 and 2 threads are the same bits (each output's sum runs in one order
 * whatever the split). Then the split itself at every output and row boundary, and bad input
 * naming the op and this file. */
#include <kiln.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cpu/gemm_int8.h"
#include "backend/cpu/vmath.h"
#include "kiln_test.h"
#include "nn/layers-impl.h"

#define F32_EPS 1.1920929e-7

static void fill(float *v, int64_t n, unsigned seed, float scale) {
    for (int64_t i = 0; i < n; i++) {
        seed = seed * 1103515245u + 12345u;
        v[i] = scale * ((float)((seed >> 8) % 20001) / 10000.0f - 1.0f);
    }
}

static double gelu_f64(double v) { return 0.5 * v * (1.0 + erf(v / sqrt(2.0))); }

/* Row-major values q [n, k] and scales s [n, nblk] of v [n, k] quantized per block of 32 */
static void quantize_blocks(const float *v, int64_t n, int64_t k, int8_t *q, float *s) {
    int64_t nblk = (k + KILN__S8_BLOCK - 1) / KILN__S8_BLOCK;
    for (int64_t r = 0; r < n; r++)
        for (int64_t b = 0; b < nblk; b++) {
            int64_t k0 = b * KILN__S8_BLOCK, len = k - k0 < KILN__S8_BLOCK ? k - k0 : KILN__S8_BLOCK;
            s[r * nblk + b] = kiln__s8_quantize_values(v + r * k + k0, 1, len, q + r * k + k0);
        }
}

typedef struct {
    int64_t m, n, k;
    float *x, *w, *bias;
    double *want, *mag; /* the f64 product of the quantized values (bias included), and the sum
                         * of its terms' magnitudes that f32 rounding is relative to */
    kiln_tensor packed, scales, packed_plain, scales_plain;
} case_data;

static bool case_make(case_data *c, int64_t m, int64_t n, int64_t k, unsigned seed) {
    *c = (case_data){.m = m, .n = n, .k = k};
    int64_t nblk = (k + KILN__S8_BLOCK - 1) / KILN__S8_BLOCK;
    c->x = malloc(sizeof(float) * (size_t)(m * k)), c->w = malloc(sizeof(float) * (size_t)(n * k));
    c->bias = malloc(sizeof(float) * (size_t)n);
    c->want = malloc(sizeof(double) * (size_t)(m * n)), c->mag = malloc(sizeof(double) * (size_t)(m * n));
    int8_t *qx = malloc((size_t)(m * k)), *qw = malloc((size_t)(n * k));
    float *sx = malloc(sizeof(float) * (size_t)(m * nblk)), *sw = malloc(sizeof(float) * (size_t)(n * nblk));
    bool ok = c->x && c->w && c->bias && c->want && c->mag && qx && qw && sx && sw;
    if (ok) {
        fill(c->x, m * k, seed, 2.0f), fill(c->w, n * k, seed + 1, 0.1f), fill(c->bias, n, seed + 2, 0.5f);
        for (int64_t i = 0; i < k && i < 8; i++) c->x[i] *= 30.0f; /* an outlier block in row 0 */
        quantize_blocks(c->x, m, k, qx, sx), quantize_blocks(c->w, n, k, qw, sw);
        for (int64_t r = 0; r < m; r++)
            for (int64_t o = 0; o < n; o++) {
                double want = c->bias[o], mag = fabs(c->bias[o]);
                for (int64_t b = 0; b < nblk; b++) {
                    int64_t sum = 0;
                    for (int64_t i = b * KILN__S8_BLOCK; i < k && i < (b + 1) * KILN__S8_BLOCK; i++)
                        sum += (int64_t)qx[r * k + i] * qw[o * k + i];
                    double term = (double)sx[r * nblk + b] * sw[o * nblk + b] * (double)sum;
                    want += term, mag += fabs(term);
                }
                c->want[r * n + o] = want, c->mag[r * n + o] = mag;
            }
        kiln_tensor wt = kiln_from_data(KILN_CPU, KILN_F32, KILN_SHAPE(n, k), c->w);
        kiln_tensor bt = kiln_from_data(KILN_CPU, KILN_F32, KILN_SHAPE(n), c->bias);
        ok = kiln__quantize_weight_i8("test", wt, bt, &c->packed, &c->scales) == KILN_OK &&
             kiln__quantize_weight_i8("test", wt, KILN_NONE, &c->packed_plain, &c->scales_plain) == KILN_OK;
        kiln_release(wt), kiln_release(bt);
    }
    free(qx), free(qw), free(sx), free(sw);
    return ok;
}

static void case_free(case_data *c) {
    kiln_tensor ts[] = {c->packed, c->scales, c->packed_plain, c->scales_plain};
    for (int i = 0; i < 4; i++)
        if (ts[i].id) kiln_release(ts[i]);
    free(c->x), free(c->w), free(c->bias), free(c->want), free(c->mag);
}

enum { FORM_PLAIN, FORM_BIAS, FORM_BIAS_GELU, FORMS };
static const char *const FORM_NAMES[FORMS] = {"linear_int8 + add", "linear_int8_bias", "linear_int8_bias_gelu"};

/* y [m, n] of the form through the engine (a queued op, then a blocking read) */
static bool run_form(const case_data *c, int form, float *y) {
    kiln_tensor x = kiln_from_data(KILN_CPU, KILN_F32, KILN_SHAPE(c->m, c->k), c->x), out;
    if (form == FORM_PLAIN)
        out = kiln__linear_i8("test", x, kiln_ref(c->packed_plain), kiln_ref(c->scales_plain),
                              kiln_from_data(KILN_CPU, KILN_F32, KILN_SHAPE(c->n), c->bias));
    else
        out = kiln__linear_i8_fused("test", x, kiln_ref(c->packed), kiln_ref(c->scales), form == FORM_BIAS_GELU);
    return kiln_into_data(out, y, sizeof(float) * (size_t)(c->m * c->n)) == KILN_OK;
}

/* Checks y against the reference; false at the first wrong value (reported) */
static bool check_form(const case_data *c, int form, const float *y, const char *where) {
    int64_t nblk = (c->k + KILN__S8_BLOCK - 1) / KILN__S8_BLOCK;
    for (int64_t i = 0; i < c->m * c->n; i++) {
        /* per block: the scales' product and the fma each round once, and the running sum once
         * an addition (to at most mag); the bias adds one more (and its own rounding) */
        double want = c->want[i], tol = (2.0 * (double)nblk + 4.0) * F32_EPS * c->mag[i] + 1e-30;
        if (form == FORM_BIAS_GELU) /* gelu' <= 1.13, and its own few ulp */
            want = gelu_f64(want), tol = 1.13 * tol + 4e-7 * fabs(want);
        if (!(fabs(y[i] - want) <= tol)) {
            KT_CHECK_MSG(false, "%s %s %lldx%lldx%lld: y[%lld,%lld] = %.9g, want %.9g (tol %.3g)", where, FORM_NAMES[form],
                         (long long)c->m, (long long)c->n, (long long)c->k, (long long)(i / c->n), (long long)(i % c->n),
                         y[i], want, tol);
            return false;
        }
    }
    return true;
}

/* The shapes: every row count of the list, output and input counts odd (19: one group
 * and a partial one; 1001 at 771 inputs: enough work for the pool to split even one row) */
static const int64_t ROW_COUNTS[] = {1, 2, 15, 16, 17, 64};
static const int64_t OUT_IN[][2] = {{19, 37}, {1001, 771}, {67, 101}};

KT_TEST(product_matches_f64_at_every_row_count_thread_count_and_path) {
    kt_mem_begin();
    const char *isas[] = {"scalar", "avx2", "avx512"};
    int saved_threads = kiln_num_threads();
    for (size_t s = 0; s < sizeof OUT_IN / sizeof OUT_IN[0]; s++)
        for (size_t mi = 0; mi < sizeof ROW_COUNTS / sizeof ROW_COUNTS[0]; mi++) {
            case_data c;
            bool made = case_make(&c, ROW_COUNTS[mi], OUT_IN[s][0], OUT_IN[s][1], (unsigned)(s * 16 + mi + 1));
            KT_CHECK(made);
            size_t bytes = sizeof(float) * (size_t)(c.m * c.n);
            float *y = malloc(bytes), *first = malloc(bytes);
            for (int p = 0; made && p < 3; p++) {
                if (kiln__vmath_force_isa(isas[p]) != 0) continue; /* this CPU lacks it */
                for (int form = 0; form < FORMS; form++)
                    for (int threads = 1; threads <= 2; threads++) {
                        kiln_set_num_threads(threads);
                        char where[64];
                        snprintf(where, sizeof where, "%s (%s), %d thread%s", isas[p], kiln__gemm_s8_path(), threads,
                                 threads > 1 ? "s" : "");
                        KT_CHECK(run_form(&c, form, y));
                        if (!check_form(&c, form, y, where)) continue;
                        if (threads == 1) memcpy(first, y, bytes);
                        else
                            KT_CHECK_MSG(memcmp(first, y, bytes) == 0, "%s %s %lldx%lldx%lld: 1 and 2 threads differ",
                                         where, FORM_NAMES[form], (long long)c.m, (long long)c.n, (long long)c.k);
                    }
            }
            kiln__vmath_force_isa(NULL);
            kiln_set_num_threads(saved_threads);
            free(y), free(first);
            case_free(&c);
        }
    KT_MEM_CHECK();
}

/* The kernel over any partition of the outputs (group boundaries) and rows, as the pool's
 * chunks call it, gives the bits of one call over everything, on every path. */
KT_TEST(any_split_of_outputs_and_rows_gives_the_same_bits) {
    enum { M = 37, N = 83, K = 132, NB = (K + KILN__S8_BLOCK - 1) / KILN__S8_BLOCK, COLS = NB + 1 };
    static float x[M * K], w[N * K], s[N * COLS], packed_s[N * COLS], xs[M * NB], whole[M * N], parts[M * N];
    static int8_t qw[N * K], packed_w[N * K];
    static int8_t qx[M * K];
    static int32_t xsum[M * NB];
    fill(x, M * K, 3, 1.0f), fill(w, N * K, 4, 1.0f);
    for (int64_t o = 0; o < N; o++) {
        for (int64_t b = 0; b < NB; b++) {
            int64_t len = K - b * KILN__S8_BLOCK < KILN__S8_BLOCK ? K - b * KILN__S8_BLOCK : KILN__S8_BLOCK;
            s[o * COLS + b] = kiln__s8_quantize_values(w + o * K + b * KILN__S8_BLOCK, 1, len, qw + o * K + b * KILN__S8_BLOCK);
        }
        s[o * COLS + NB] = 0.25f * (float)(o % 5) - 0.5f;
    }
    kiln__s8_pack_weight(qw, N, K, packed_w);
    kiln__s8_pack_scales(s, N, COLS, packed_s);
    for (int64_t r = 0; r < M; r++) kiln__s8_quantize_row(x + r * K, 1, K, K, qx + r * K, xs + r * NB, xsum + r * NB);
    const char *isas[] = {"scalar", "avx2", "avx512"};
    static const int64_t row_cuts[][4] = {{0, M, M, M}, {0, 1, 2, M}, {0, 16, 17, M}, {0, 15, 31, M}};
    for (int p = 0; p < 3; p++) {
        if (kiln__vmath_force_isa(isas[p]) != 0) continue;
        for (int e = KILN__S8_BIAS; e <= KILN__S8_BIAS_GELU; e++) {
            kiln__gemm_s8_rescale(qx, xs, xsum, M, packed_w, packed_s, N, 0, N, K, (kiln__s8_epilogue)e, whole, N);
            for (int64_t step = 1; step <= 3; step++)
                for (size_t rc = 0; rc < sizeof row_cuts / sizeof row_cuts[0]; rc++) {
                    memset(parts, 0xff, sizeof parts); /* NaN: a value no part writes stays NaN */
                    for (int i = 0; i < 3; i++) {
                        int64_t r0 = row_cuts[rc][i], r1 = row_cuts[rc][i + 1];
                        for (int64_t o0 = 0; o0 < N && r1 > r0; o0 += step * KILN__S8_GROUP) {
                            int64_t o1 = o0 + step * KILN__S8_GROUP < N ? o0 + step * KILN__S8_GROUP : N;
                            kiln__gemm_s8_rescale(qx + r0 * K, xs + r0 * NB, xsum + r0 * NB, r1 - r0, packed_w, packed_s, N, o0, o1, K,
                                                  (kiln__s8_epilogue)e, parts + r0 * N, N);
                        }
                    }
                    KT_CHECK_MSG(memcmp(whole, parts, sizeof whole) == 0, "%s epilogue %d: outputs by %lld groups, rows cut %zu",
                                 isas[p], e, (long long)step, rc);
                }
        }
    }
    kiln__vmath_force_isa(NULL);
}

/* Wrong input, in the default asynchronous mode at 2 threads: the poisoned result names the op
 * and this file; a poisoned input's error passes through the product unchanged. */
KT_TEST(bad_input_names_the_op) {
    kt_mem_begin();
    int saved_threads = kiln_num_threads();
    kiln_set_num_threads(2);
    case_data c;
    KT_CHECK(case_make(&c, 16, 67, 101, 9));
    /* the wrong feature count, an f64 input, a transposed (i32 [k/4, n]) packed weight */
    KT_READ_ERROR(kiln__linear_i8_fused("test", kiln_zeros(KILN_CPU, KILN_F32, KILN_SHAPE(16, 105)), kiln_ref(c.packed),
                                        kiln_ref(c.scales), true),
                  KILN_ERR_INVALID_ARGUMENT, "linear_int8_bias_gelu");
    KT_READ_ERROR(kiln__linear_i8_fused("test", kiln_zeros(KILN_CPU, KILN_F64, KILN_SHAPE(16, 101)), kiln_ref(c.packed),
                                        kiln_ref(c.scales), false),
                  KILN_ERR_INVALID_ARGUMENT, "linear_int8_bias");
    KT_READ_ERROR(kiln__linear_i8("test", kiln_zeros(KILN_CPU, KILN_F32, KILN_SHAPE(16, 101)),
                                  kiln_transpose(kiln_ref(c.packed_plain), 0, 1), kiln_ref(c.scales_plain), KILN_NONE),
                  KILN_ERR_INVALID_ARGUMENT, "linear_int8");
    /* the plain op given the scales with the bias column */
    KT_READ_ERROR(kiln__linear_i8("test", kiln_zeros(KILN_CPU, KILN_F32, KILN_SHAPE(16, 101)), kiln_ref(c.packed),
                                  kiln_ref(c.scales), KILN_NONE),
                  KILN_ERR_INVALID_ARGUMENT, "linear_int8");
    /* a poisoned input: its own error (the reshape's), not the product's */
    KT_READ_ERROR(kiln__linear_i8_fused("test", kiln_reshape(kiln_zeros(KILN_CPU, KILN_F32, KILN_SHAPE(16, 101)), KILN_SHAPE(7, 3)),
                                        kiln_ref(c.packed), kiln_ref(c.scales), true),
                  KILN_ERR_SHAPE, "kiln_reshape");
    case_free(&c);
    kiln_set_num_threads(saved_threads);
    KT_MEM_CHECK();
}

int main(void) {
    KT_RUN(product_matches_f64_at_every_row_count_thread_count_and_path);
    KT_RUN(any_split_of_outputs_and_rows_gives_the_same_bits);
    KT_RUN(bad_input_names_the_op);
    return kt_finish();
}
