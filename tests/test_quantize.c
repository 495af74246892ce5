/* kiln_quantize_dynamic: int8 Linear layers against an f64 reference within the bound that
 * per-channel weight and per-row activation rounding allow, strided inputs, non-finite rows,
 * a bit-exact checkpoint round trip of the packed weights and scales, and bad input
 * (optimizers refuse a quantized model; wrong shapes and dtypes name the op and the line). */
#include <kiln.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cpu/gemm_int8.h"
#include "backend/cpu/vmath.h"
#include "kiln_test.h"
#include "nn/layers-impl.h"
#include "minilm_reference.h"

#define IN 37
#define OUT 19
#define ROWS 15
#define MINILM_INT8_MIN_COSINE 0.995 /* issue 27's goal, on every sentence */

static void fill(float *v, int n, unsigned seed) {
    for (int i = 0; i < n; i++) {
        seed = seed * 1103515245u + 12345u;
        v[i] = (float)((seed >> 8) % 20001) / 10000.0f - 1.0f;
    }
}

static double amax(const float *v, int n) {
    double m = 0;
    for (int i = 0; i < n; i++) m = fmax(m, fabs(v[i]));
    return m;
}

KT_TEST(int8_linear_is_within_the_quantization_bound) {
    kt_mem_begin();
    kiln_module *m = kiln_linear_new(IN, OUT, true, 3);
    float w[OUT * IN], b[OUT], x[ROWS * IN], y[ROWS * OUT];
    KT_CHECK(kiln_into_data(kiln_module_param(m, "weight"), w, sizeof w) == KILN_OK);
    KT_CHECK(kiln_into_data(kiln_module_param(m, "bias"), b, sizeof b) == KILN_OK);
    fill(x, ROWS * IN, 7);
    KT_CHECK(kiln_quantize_dynamic(m, KILN_QUANT_I8) == KILN_OK);
    KT_CHECK(kiln_module_is_quantized(m));
    KT_CHECK(kiln_module_num_parameters(m) == 0);
    kiln_tensor xt = kiln_from_data(KILN_CPU, KILN_F32, KILN_SHAPE(3, 5, IN), x);
    kiln_tensor yt = kiln_module_forward(m, xt);
    KT_CHECK(kiln_tensor_dim(yt, 2) == OUT);
    KT_CHECK(kiln_into_data(yt, y, sizeof y) == KILN_OK);
    double err2 = 0, ref2 = 0;
    for (int r = 0; r < ROWS; r++)
        for (int o = 0; o < OUT; o++) {
            /* |x - qx*sx| <= sx/2 and |w - qw*sw| <= sw/2, so the product's error is at most
             * sum |x| sw/2 + |w| sx/2 + sx sw/4 (plus f32 rounding) */
            double sx = amax(x + r * IN, IN) / 127, sw = amax(w + o * IN, IN) / 127, ref = b[o], bound = 0;
            for (int k = 0; k < IN; k++) {
                ref += (double)x[r * IN + k] * w[o * IN + k];
                bound += fabs(x[r * IN + k]) * sw / 2 + fabs(w[o * IN + k]) * sx / 2 + sx * sw / 4;
            }
            double got = y[r * OUT + o];
            KT_CHECK_MSG(fabs(got - ref) <= bound * 1.001 + 1e-5, "y[%d,%d] = %g, f64 %g, bound %g", r, o, got, ref,
                         bound);
            err2 += (got - ref) * (got - ref), ref2 += ref * ref;
        }
    KT_CHECK_MSG(sqrt(err2 / ref2) < 0.02, "relative error %g", sqrt(err2 / ref2));
    kiln_module_free(m);
    KT_MEM_CHECK();
}

KT_TEST(strided_input_gives_the_contiguous_result) {
    kt_mem_begin();
    kiln_module *m = kiln_linear_new(IN, OUT, false, 5);
    KT_CHECK(kiln_quantize_dynamic(m, KILN_QUANT_I8) == KILN_OK);
    float x[ROWS * IN], a[ROWS * OUT], t[ROWS * OUT];
    fill(x, ROWS * IN, 11);
    kiln_tensor xt = kiln_from_data(KILN_CPU, KILN_F32, KILN_SHAPE(ROWS, IN), x);
    KT_CHECK(kiln_into_data(kiln_module_forward(m, kiln_ref(xt)), a, sizeof a) == KILN_OK);
    /* the same values through a transposed view: [IN, ROWS] made contiguous, then transposed back */
    kiln_tensor xv = kiln_transpose(kiln_contiguous(kiln_transpose(xt, 0, 1)), 0, 1);
    KT_CHECK(!kiln_tensor_is_contiguous(xv));
    KT_CHECK(kiln_into_data(kiln_module_forward(m, xv), t, sizeof t) == KILN_OK);
    KT_CHECK(memcmp(a, t, sizeof a) == 0);
    kiln_module_free(m);
    KT_MEM_CHECK();
}

KT_TEST(a_non_finite_row_gives_nan_in_that_row_only) {
    kt_mem_begin();
    kiln_module *m = kiln_linear_new(4, 3, false, 1);
    KT_CHECK(kiln_quantize_dynamic(m, KILN_QUANT_I8) == KILN_OK);
    float x[3 * 4] = {1, 2, 3, 4, 1, INFINITY, 0, 0, NAN, 1, 2, 3}, y[3 * 3];
    KT_CHECK(kiln_into_data(kiln_module_forward(m, kiln_from_data(KILN_CPU, KILN_F32, KILN_SHAPE(3, 4), x)), y,
                            sizeof y) == KILN_OK);
    for (int o = 0; o < 3; o++) KT_CHECK(isfinite(y[o]) && isnan(y[3 + o]) && isnan(y[6 + o]));
    kiln_module_free(m);
    KT_MEM_CHECK();
}

/* The product of kiln__gemm_s8_rescale in f64 from row-major int8 values: each block's integer
 * sum exactly, *mag the sum of magnitudes its f32 rounding is relative to. */
static double s8_reference(const int8_t *qx, const float *xs, const int8_t *qw, const float *ws, int64_t k, double *mag) {
    int64_t nb = (k + KILN__S8_BLOCK - 1) / KILN__S8_BLOCK;
    double want = 0;
    *mag = 0;
    for (int64_t b = 0; b < nb; b++) {
        int64_t sum = 0;
        for (int64_t i = b * KILN__S8_BLOCK; i < k && i < (b + 1) * KILN__S8_BLOCK; i++) sum += (int64_t)qx[i] * qw[i];
        double term = (double)xs[b] * (double)ws[b] * (double)sum;
        want += term, *mag += fabs(term);
    }
    return want;
}

static double gelu_f64(double v) { return 0.5 * v * (1.0 + erf(v / sqrt(2.0))); }

/* Every ISA path gives the block sums of an f64 reference (exact integers) to f32 rounding, at
 * shapes with every kind of tail: rows not a multiple of the VNNI path's 16/8/4/2-row tiles (one
 * row), outputs not a multiple of its 16-lane groups (and a range starting past the first group),
 * k with a partial last block; extremes (+-127 against -127) included; each with every epilogue
 * (the bias from the scales' last column, then GELU against the erf form in f64). */
KT_TEST(every_isa_path_matches_the_reference) {
    static const int64_t shapes[][3] = {{3, 9, 1004}, {31, 35, 384}, {16, 16, 32}, {1, 1, 4}, {17, 48, 68}, {5, 3, 36}, {1, 21, 100}};
    const char *isas[] = {"scalar", "avx2", "avx512"};
    static const char *const epi_names[] = {"plain", "bias", "bias+gelu"};
    for (size_t t = 0; t < sizeof shapes / sizeof shapes[0]; t++) {
        int64_t R = shapes[t][0], O = shapes[t][1], K = shapes[t][2], NB = (K + KILN__S8_BLOCK - 1) / KILN__S8_BLOCK;
        int8_t *qx = malloc((size_t)(R * K)), *qw = malloc((size_t)(O * K)), *pw = malloc((size_t)(O * K));
        int32_t *xsum = malloc(sizeof(int32_t) * (size_t)(R * NB));
        float *xs = malloc(sizeof(float) * (size_t)(R * NB)), *ws = malloc(sizeof(float) * (size_t)(O * (NB + 1)));
        float *pws = malloc(sizeof(float) * (size_t)(O * (NB + 1)));
        float *y = malloc(sizeof(float) * (size_t)(R * O));
        unsigned seed = (unsigned)t + 1;
        for (int64_t i = 0; i < R * K; i++) qx[i] = (int8_t)((int)((seed = seed * 1103515245u + 12345u) >> 8) % 255 - 127);
        for (int64_t i = 0; i < O * K; i++) qw[i] = (int8_t)((int)((seed = seed * 1103515245u + 12345u) >> 8) % 255 - 127);
        for (int64_t i = 0; i < K; i++) qx[i] = (int8_t)(i % 2 ? -127 : 127), qw[i] = -127; /* sums near the extremes */
        for (int64_t r = 0; r < R; r++) /* each block's activation sum, as kiln__s8_quantize_row gives it */
            for (int64_t b = 0; b < NB; b++) {
                xsum[r * NB + b] = 0;
                for (int64_t i = b * KILN__S8_BLOCK; i < K && i < (b + 1) * KILN__S8_BLOCK; i++) xsum[r * NB + b] += qx[r * K + i];
            }
        for (int64_t i = 0; i < R * NB; i++) xs[i] = 0.001f * (float)(i % 7 + 1);
        kiln__s8_pack_weight(qw, O, K, pw);
        for (int e = KILN__S8_PLAIN; e <= KILN__S8_BIAS_GELU; e++) {
            int64_t cols = NB + (e != KILN__S8_PLAIN);
            /* scales [O, cols], the bias last (sized like the products, of both signs) */
            for (int64_t o = 0; o < O; o++)
                for (int64_t b = 0; b < cols; b++)
                    ws[o * cols + b] = b < NB ? 0.01f * (float)((o * NB + b) % 11 + 1) : (float)((o % 9) - 4) * 0.5f;
            kiln__s8_pack_scales(ws, O, cols, pws);
            for (int p = 0; p < 3; p++) {
                if (kiln__vmath_force_isa(isas[p]) != 0) continue; /* this CPU lacks it */
                if (t == 0 && e == 0) printf("  int8 path for KILN_ISA=%s: %s\n", isas[p], kiln__gemm_s8_path());
                for (int64_t i = 0; i < R * O; i++) y[i] = -1e30f;
                /* the first group on its own, then the rest: both halves of a split must agree */
                int64_t split = O > KILN__S8_GROUP ? KILN__S8_GROUP : O;
                kiln__gemm_s8_rescale(qx, xs, xsum, R, pw, pws, O, 0, split, K, (kiln__s8_epilogue)e, y, O);
                kiln__gemm_s8_rescale(qx, xs, xsum, R, pw, pws, O, split, O, K, (kiln__s8_epilogue)e, y, O);
                for (int64_t r = 0; r < R; r++)
                    for (int64_t o = 0; o < O; o++) {
                        double mag, want = s8_reference(qx + r * K, xs + r * NB, qw + o * K, ws + o * cols, K, &mag);
                        if (e != KILN__S8_PLAIN) want += ws[o * cols + NB], mag += fabs(ws[o * cols + NB]);
                        double tol = 1e-6 * mag;
                        if (e == KILN__S8_BIAS_GELU) /* gelu' <= 1.13, and its own 2.5 ulp */
                            want = gelu_f64(want), tol = 1.2 * tol + 4e-7 * fabs(want) + 1e-30;
                        KT_CHECK_MSG(fabs(y[r * O + o] - want) <= tol, "%s %s %lldx%lldx%lld: y[%lld,%lld] = %.9g, want %.9g",
                                     isas[p], epi_names[e], (long long)R, (long long)O, (long long)K, (long long)r,
                                     (long long)o, y[r * O + o], want);
                    }
            }
            kiln__vmath_force_isa(NULL);
        }
        free(qx), free(qw), free(pw), free(xsum), free(xs), free(ws), free(pws), free(y);
    }
}

/* The activations' quantization gives the same bytes and scales on every path and at any
 * stride, against an f64 rounding of x / scale: partial last blocks, padding to k, a block
 * with an inf or a NaN (scale NAN), an all-zero block and one too small to invert (scale 1). */
/* One row of n values padded to k, quantized on every path and with both strides: the same
 * bytes and scales, the block sums, and x / scale rounded. The blocks: 0 an outlier block, 1
 * holds an inf, 2 a NaN, the last one (or 3) values too small to invert. */
enum { ROW_MAX = 640 };
static void check_row_paths(int n, int k) {
    int nb = (k + KILN__S8_BLOCK - 1) / KILN__S8_BLOCK, tiny = nb - 1 > 3 ? 3 : nb - 1;
    float x[ROW_MAX], strided[2 * ROW_MAX];
    fill(x, n, 5);
    for (int i = 0; i < 8; i++) x[i] *= 100.0f; /* an outlier block */
    x[40] = INFINITY, x[70] = NAN;          /* blocks 1 and 2 */
    for (int i = tiny * KILN__S8_BLOCK; i < n && i < (tiny + 1) * KILN__S8_BLOCK; i++)
        x[i] = i == tiny * KILN__S8_BLOCK + 1 ? 1e-44f : 0.0f; /* too small to invert */
    for (int i = 0; i < n; i++) strided[2 * i] = x[i], strided[2 * i + 1] = 99.0f;
    int8_t first[ROW_MAX];
    float first_scale[ROW_MAX / KILN__S8_BLOCK];
    const char *isas[] = {"scalar", "avx2", "avx512"};
    bool have_first = false;
    for (int p = 0; p < 3; p++) {
        if (kiln__vmath_force_isa(isas[p]) != 0) continue;
        for (int stride = 1; stride <= 2; stride++) {
            int8_t qx[ROW_MAX];
            int32_t xsum[ROW_MAX / KILN__S8_BLOCK];
            float xs[ROW_MAX / KILN__S8_BLOCK];
            memset(qx, 7, sizeof qx);
            kiln__s8_quantize_row(stride == 1 ? x : strided, stride, n, k, qx, xs, xsum);
            KT_CHECK(isnan(xs[1]) && isnan(xs[2]) && xs[tiny] == 1.0f);
            for (int b = 0; b < nb; b++) {
                if (isnan(xs[b])) continue;
                for (int i = b * KILN__S8_BLOCK; i < k && i < (b + 1) * KILN__S8_BLOCK; i++) {
                    double v = i < n ? (double)x[i] / xs[b] : 0;
                    int want = b == tiny ? 0 : (int)nearbyint(v);
                    KT_CHECK_MSG(qx[i] == want || fabs(v - nearbyint(v)) > 0.499,
                                 "%s stride %d: q[%d] = %d, x / scale = %.6f", isas[p], stride, i, qx[i], v);
                    KT_CHECK(qx[i] >= -127 && qx[i] <= 127);
                }
            }
            KT_CHECK(xs[0] == (float)(amax(x, 32) / 127) || fabs(xs[0] - amax(x, 32) / 127) <= 1e-7 * xs[0]);
            for (int b = 0; b < nb; b++) { /* the block sums the VNNI product's offset needs */
                int32_t sum = 0;
                for (int i = b * KILN__S8_BLOCK; i < k && i < (b + 1) * KILN__S8_BLOCK; i++) sum += qx[i];
                KT_CHECK_MSG(xsum[b] == sum, "%s stride %d: block %d sums to %d, not %d", isas[p], stride, b, (int)xsum[b], (int)sum);
            }
            if (!have_first) memcpy(first, qx, (size_t)k), memcpy(first_scale, xs, sizeof(float) * (size_t)nb), have_first = true;
            KT_CHECK_MSG(memcmp(first, qx, (size_t)k) == 0, "%s stride %d: other bytes", isas[p], stride);
            for (int b = 0; b < nb; b++) KT_CHECK(isnan(xs[b]) ? isnan(first_scale[b]) : xs[b] == first_scale[b]);
        }
    }
    kiln__vmath_force_isa(NULL);
}

/* A row with a partial last block, and one of whole blocks only (the VNNI path then quantizes 16
 * blocks at a time: 20 blocks are a full group and a partial one). */
KT_TEST(row_quantization_is_the_same_on_every_path) {
    check_row_paths(101, 104);
    check_row_paths(ROW_MAX, ROW_MAX);
}

/* The product with its bias and GELU fused (kiln__quantize_weight_i8 with a bias: the scales'
 * last column; the op "linear_int8_bias[_gelu]", called as a user calls a custom op) against
 * f64, within the bound of the quantization (as above, through GELU, whose slope is at most
 * 1.13): many rows, one row, and none (an empty result, as PyTorch's Linear gives). */
KT_TEST(fused_bias_and_gelu_match_f64) {
    kt_mem_begin();
    float w[OUT * IN], b[OUT], x[ROWS * IN], y[ROWS * OUT];
    fill(w, OUT * IN, 3), fill(b, OUT, 4), fill(x, ROWS * IN, 8);
    kiln_tensor wt = kiln_from_data(KILN_CPU, KILN_F32, KILN_SHAPE(OUT, IN), w);
    kiln_tensor bt = kiln_from_data(KILN_CPU, KILN_F32, KILN_SHAPE(OUT), b);
    kiln_tensor packed, scales;
    KT_CHECK(kiln__quantize_weight_i8("test", wt, bt, &packed, &scales) == KILN_OK);
    KT_CHECK(kiln_tensor_dim(scales, 1) == ((IN + 3) / 4 * 4 + KILN__S8_BLOCK - 1) / KILN__S8_BLOCK + 1);
    kiln_release(wt), kiln_release(bt);
    for (int gelu = 0; gelu <= 1; gelu++)
        for (int rows = ROWS; rows >= 0; rows = rows > 1 ? 1 : rows - 1) {
            kiln_custom_op *op = kiln_custom_op_find(gelu ? "linear_int8_bias_gelu" : "linear_int8_bias");
            kiln_tensor in[3] = {kiln_from_data(KILN_CPU, KILN_F32, KILN_SHAPE(rows, IN), x), kiln_ref(packed),
                                 kiln_ref(scales)};
            kiln_tensor yt = op ? kiln_custom_op_call(op, 3, in)
                                : kiln__linear_i8_fused("test", in[0], in[1], in[2], gelu); /* registers them */
            KT_CHECK(kiln_tensor_ndim(yt) == 2 && kiln_tensor_dim(yt, 0) == rows && kiln_tensor_dim(yt, 1) == OUT);
            KT_CHECK(kiln_into_data(yt, y, sizeof(float) * (size_t)(rows * OUT)) == KILN_OK);
            for (int r = 0; r < rows; r++)
                for (int o = 0; o < OUT; o++) {
                    double ref = b[o], bound = 0;
                    for (int kb = 0; kb < IN; kb += KILN__S8_BLOCK) { /* a scale per block of 32, both sides */
                        int n = IN - kb < KILN__S8_BLOCK ? IN - kb : KILN__S8_BLOCK;
                        double sx = amax(x + r * IN + kb, n) / 127, sw = amax(w + o * IN + kb, n) / 127;
                        for (int k = kb; k < kb + n; k++) {
                            ref += (double)x[r * IN + k] * w[o * IN + k];
                            bound += fabs(x[r * IN + k]) * sw / 2 + fabs(w[o * IN + k]) * sx / 2 + sx * sw / 4;
                        }
                    }
                    if (gelu) ref = gelu_f64(ref), bound *= 1.13;
                    KT_CHECK_MSG(fabs(y[r * OUT + o] - ref) <= bound * 1.001 + 1e-5, "gelu %d rows %d: y[%d,%d] = %g, f64 %g, bound %g",
                                 gelu, rows, r, o, y[r * OUT + o], ref, bound);
                }
        }
    kiln_release(packed), kiln_release(scales);
    KT_MEM_CHECK();
}

/* Wrong input into the fused ops, queued (the default mode) and read later: the error names the
 * op and this file (KT_READ_ERROR checks both); a bias of the wrong size is refused when
 * quantizing. (A feature count that pads to the same multiple of 4 cannot be told from the
 * packed weight: the Linear layer checks it before the product.) */
KT_TEST(fused_op_bad_input_names_the_op) {
    kt_mem_begin();
    float w[OUT * IN], b[OUT];
    fill(w, OUT * IN, 1), fill(b, OUT, 2);
    kiln_tensor wt = kiln_from_data(KILN_CPU, KILN_F32, KILN_SHAPE(OUT, IN), w);
    kiln_tensor bt = kiln_from_data(KILN_CPU, KILN_F32, KILN_SHAPE(OUT), b);
    kiln_tensor packed, scales, plain_packed, plain_scales, p2, s2;
    KT_CHECK(kiln__quantize_weight_i8("test", wt, bt, &packed, &scales) == KILN_OK);
    KT_CHECK(kiln__quantize_weight_i8("test", wt, KILN_NONE, &plain_packed, &plain_scales) == KILN_OK);
    kiln_tensor short_bias = kiln_zeros(KILN_CPU, KILN_F32, KILN_SHAPE(OUT - 1));
    KT_CHECK(kiln__quantize_weight_i8("test", wt, short_bias, &p2, &s2) == KILN_ERR_SHAPE && !p2.id && !s2.id);
    KT_CHECK(strstr(kiln_last_error(), "bias") != NULL);
    kiln_release(short_bias), kiln_release(wt), kiln_release(bt);
    /* the first call registers the ops */
    kiln_release(kiln__linear_i8_fused("test", kiln_zeros(KILN_CPU, KILN_F32, KILN_SHAPE(1, IN)), kiln_ref(packed),
                                       kiln_ref(scales), true));
    kiln_custom_op *gelu_op = kiln_custom_op_find("linear_int8_bias_gelu"), *bias_op = kiln_custom_op_find("linear_int8_bias");
    KT_CHECK(gelu_op && bias_op);
    if (gelu_op && bias_op) {
        KT_READ_ERROR(kiln_custom_op_call(gelu_op, 3, (kiln_tensor[]){kiln_zeros(KILN_CPU, KILN_F64, KILN_SHAPE(2, IN)),
                                                                      kiln_ref(packed), kiln_ref(scales)}),
                      KILN_ERR_INVALID_ARGUMENT, "linear_int8_bias_gelu");
        KT_READ_ERROR(kiln_custom_op_call(bias_op, 3, (kiln_tensor[]){kiln_zeros(KILN_CPU, KILN_F32, KILN_SHAPE(2, IN + 4)),
                                                                      kiln_ref(packed), kiln_ref(scales)}),
                      KILN_ERR_INVALID_ARGUMENT, "linear_int8_bias");
        /* scales without the bias column, and a weight of the wrong dtype */
        KT_READ_ERROR(kiln_custom_op_call(bias_op, 3, (kiln_tensor[]){kiln_zeros(KILN_CPU, KILN_F32, KILN_SHAPE(2, IN)),
                                                                      kiln_ref(plain_packed), kiln_ref(plain_scales)}),
                      KILN_ERR_INVALID_ARGUMENT, "linear_int8_bias");
        KT_READ_ERROR(kiln_custom_op_call(gelu_op, 3, (kiln_tensor[]){kiln_zeros(KILN_CPU, KILN_F32, KILN_SHAPE(2, IN)),
                                                                      kiln_cast(kiln_ref(packed), KILN_F32), kiln_ref(scales)}),
                      KILN_ERR_INVALID_ARGUMENT, "linear_int8_bias_gelu");
        /* a scalar input */
        KT_READ_ERROR(kiln_custom_op_call(gelu_op, 3, (kiln_tensor[]){kiln_full(KILN_CPU, KILN_F32, (kiln_shape){.ndim = 0}, 1.0), kiln_ref(packed),
                                                                      kiln_ref(scales)}),
                      KILN_ERR_INVALID_ARGUMENT, "linear_int8_bias_gelu");
    }
    kiln_release(packed), kiln_release(scales), kiln_release(plain_packed), kiln_release(plain_scales);
    KT_MEM_CHECK();
}

static kiln_module *mlp(uint64_t seed) {
    kiln_module *layers[] = {kiln_linear_new(IN, 24, true, seed), kiln_relu_new(), kiln_linear_new(24, OUT, true, seed + 1)};
    return kiln_sequential_new(3, layers);
}

KT_TEST(checkpoint_round_trip_is_bit_exact) {
    kt_mem_begin();
    const char *path = "test_quantize.safetensors";
    kiln_module *a = mlp(1), *b = mlp(9);
    KT_CHECK(kiln_quantize_dynamic(a, KILN_QUANT_I8) == KILN_OK);
    KT_CHECK(kiln_quantize_dynamic(b, KILN_QUANT_I8) == KILN_OK);
    KT_CHECK(kiln_checkpoint_save(path, a, NULL) == KILN_OK);
    KT_CHECK(kiln_checkpoint_load(path, b, NULL) == KILN_OK);
    const char *names[] = {"weight_int8_g16", "weight_scale_k32", "bias"};
    for (int l = 0; l <= 2; l += 2)
        for (int i = 0; i < 3; i++) {
            char child[4];
            snprintf(child, sizeof child, "%d", l);
            kiln_tensor ta = kiln_module_param(kiln_module_child(a, child), names[i]);
            kiln_tensor tb = kiln_module_param(kiln_module_child(b, child), names[i]);
            int64_t bytes = kiln_tensor_numel(ta) * 4;
            KT_CHECK(bytes > 0 && bytes == kiln_tensor_numel(tb) * 4);
            char *da = malloc((size_t)bytes), *db = malloc((size_t)bytes);
            KT_CHECK(kiln_into_data(ta, da, (size_t)bytes) == KILN_OK);
            KT_CHECK(kiln_into_data(tb, db, (size_t)bytes) == KILN_OK);
            KT_CHECK_MSG(memcmp(da, db, (size_t)bytes) == 0, "layer %d %s differs", l, names[i]);
            free(da), free(db);
        }
    float x[ROWS * IN], ya[ROWS * OUT], yb[ROWS * OUT];
    fill(x, ROWS * IN, 2);
    kiln_tensor xt = kiln_from_data(KILN_CPU, KILN_F32, KILN_SHAPE(ROWS, IN), x);
    KT_CHECK(kiln_into_data(kiln_module_forward(a, kiln_ref(xt)), ya, sizeof ya) == KILN_OK);
    KT_CHECK(kiln_into_data(kiln_module_forward(b, xt), yb, sizeof yb) == KILN_OK);
    KT_CHECK(memcmp(ya, yb, sizeof ya) == 0);
    /* an f32 model does not load the int8 file: the names differ */
    kiln_module *f = mlp(1);
    KT_CHECK(kiln_checkpoint_load(path, f, NULL) == KILN_ERR_SHAPE);
    remove(path);
    kiln_module_free(a), kiln_module_free(b), kiln_module_free(f);
    KT_MEM_CHECK();
}

KT_TEST(bad_input) {
    kt_mem_begin();
    KT_CHECK(kiln_quantize_dynamic(NULL, KILN_QUANT_I8) == KILN_ERR_NULL);
    KT_EXPECT_ERROR(KILN_ERR_NULL, "kiln_quantize_dynamic", __LINE__ - 1);
    KT_CHECK(kiln_bert_quantize_dynamic(NULL, KILN_QUANT_I8) == KILN_ERR_NULL);
    KT_EXPECT_ERROR(KILN_ERR_NULL, "kiln_bert_quantize_dynamic", __LINE__ - 1);
    kiln_module *m = mlp(4);
    KT_CHECK(!kiln_module_is_quantized(m));
    KT_CHECK(kiln_quantize_dynamic(m, (kiln_quant_type)42) == KILN_ERR_INVALID_ARGUMENT);
    KT_EXPECT_ERROR(KILN_ERR_INVALID_ARGUMENT, "kiln_quantize_dynamic", __LINE__ - 1);
    KT_CHECK(!kiln_module_is_quantized(m));
    KT_CHECK(kiln_quantize_dynamic(m, KILN_QUANT_I8) == KILN_OK);
    KT_CHECK(kiln_quantize_dynamic(m, KILN_QUANT_I8) == KILN_OK); /* again: nothing left to do */
    KT_CHECK(kiln_sgd_new(m, (kiln_sgd_options){.lr = 0.1}) == NULL);
    KT_EXPECT_ERROR(KILN_ERR_UNSUPPORTED, "kiln_sgd_new", __LINE__ - 1);
    KT_CHECK(kiln_adam_new(m, (kiln_adam_options){.lr = 0.1}) == NULL);
    KT_EXPECT_ERROR(KILN_ERR_UNSUPPORTED, "kiln_adam_new", __LINE__ - 1);
    /* wrong feature count, f64 input */
    KT_READ_ERROR(kiln_module_forward(m, kiln_zeros(KILN_CPU, KILN_F32, KILN_SHAPE(2, IN + 1))), KILN_ERR_SHAPE,
                  "Linear");
    KT_READ_ERROR(kiln_module_forward(m, kiln_zeros(KILN_CPU, KILN_F64, KILN_SHAPE(2, IN))),
                  KILN_ERR_INVALID_ARGUMENT, "linear_int8");
    kiln_module_free(m);
    KT_MEM_CHECK();
}

/* all-MiniLM-L6-v2 with its linears in int8 against the f32 reference embeddings
 * (test_quantize --reference; skipped with 77 without the model package). */
static const char *model_dir;

KT_TEST(minilm_int8_cosine) {
    mr_comparison c;
    KT_CHECK(mr_comparison_open(&c, model_dir));
    if (!c.model) return;
    KT_CHECK(kiln_bert_quantize_dynamic(c.model, KILN_QUANT_I8) == KILN_OK);
    KT_CHECK(mr_comparison_embed(&c));
    KT_CHECK(mr_comparison_worst(&c, "int8") >= MINILM_INT8_MIN_COSINE);
    /* a sentence alone, as examples/embed and the latency benchmark run it: no padding, so the
     * unpadded path (bert_attention.c's kernel, no mask ops) rather than the packed one; every
     * ONE_STEP-th sentence, to keep the sanitizer builds' CI time small (all 278 alone: min 0.99780) */
    enum { ONE_STEP = 12 };
    double worst = 1;
    for (size_t i = 0; i < c.n; i += ONE_STEP) {
        float got[384];
        KT_CHECK(mr_embed_all(c.tok, c.model, c.sentences + i, 1, 384, got) == 1);
        double dot = 0, gg = 0, ww = 0;
        for (int d = 0; d < 384; d++)
            dot += (double)got[d] * c.want[i * 384 + d], gg += (double)got[d] * got[d], ww += (double)c.want[i * 384 + d] * c.want[i * 384 + d];
        double cosine = dot / sqrt(gg * ww);
        worst = cosine < worst ? cosine : worst;
        KT_CHECK_MSG(cosine >= MINILM_INT8_MIN_COSINE, "sentence %zu alone: cosine %.5f", i + 1, cosine);
    }
    fprintf(stderr, "  int8, one sentence at a time (every %dth): cosine to f32 min %.5f\n", ONE_STEP, worst);
    mr_comparison_close(&c);
}

int main(int argc, char **argv) {
    if (argc == 2 && strcmp(argv[1], "--reference") == 0) {
        model_dir = mr_model_dir();
        if (!model_dir) return mr_skip();
        KT_RUN(minilm_int8_cosine);
        return kt_finish();
    }
    KT_RUN(int8_linear_is_within_the_quantization_bound);
    KT_RUN(strided_input_gives_the_contiguous_result);
    KT_RUN(a_non_finite_row_gives_nan_in_that_row_only);
    KT_RUN(every_isa_path_matches_the_reference);
    KT_RUN(row_quantization_is_the_same_on_every_path);
    KT_RUN(fused_bias_and_gelu_match_f64);
    KT_RUN(fused_op_bad_input_names_the_op);
    KT_RUN(checkpoint_round_trip_is_bit_exact);
    KT_RUN(bad_input);
    return kt_finish();
}
