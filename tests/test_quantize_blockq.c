/* kiln_quantize_dynamic's weight-only block formats (KILN_QUANT_Q8_0, KILN_QUANT_Q4_0): each
 * ISA path of the product against an f64 product of the dequantized weights (rows 1 to 64, odd
 * outputs, inputs with a tail block, every epilogue), the op with 1 and 2 threads, the blocks'
 * rounding bounds, the Linear layer, a bit-exact safetensors round trip, and bad input naming
 * the op and this file, queued (the default mode) and read later. With --reference:
 * all-MiniLM-L6-v2's cosine to the f32 reference embeddings for both formats. */
#include <kiln.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cpu/gemm_blockq.h"
#include "backend/cpu/gemm_int8.h"
#include "backend/cpu/vmath.h"
#include "kiln_test.h"
#include "minilm_reference.h"
#include "nn/linear_blockq-impl.h"

#define IN 75 /* two blocks and a tail of 11 */
#define OUT 37 /* two groups of 16 and one of 5 */
#define MINILM_Q8_0_MIN_COSINE 0.995 /* issue 27's int8 goal, on every sentence */
/* q4_0 has no goal: measured 0.854 worst, 0.956 mean (all four linears of each layer; keeping
 * the FFN's two in q8_0 gave 0.922 worst, no mix reached 0.93). A floor below that catches a
 * broken kernel (a wrong block gives cosines far lower) without pretending to more. */
#define MINILM_Q4_0_FLOOR 0.8

static const kiln_quant_type TYPES[2] = {KILN_QUANT_Q8_0, KILN_QUANT_Q4_0};
static const char *const TYPE_NAMES[2] = {"q8_0", "q4_0"};
static const char *const ISAS[3] = {"scalar", "avx2", "avx512"};
static const int64_t ROWS[] = {1, 2, 15, 16, 17, 64};

static void fill(float *v, int64_t n, unsigned seed) {
    for (int64_t i = 0; i < n; i++) {
        seed = seed * 1103515245u + 12345u;
        v[i] = (float)((seed >> 8) % 20001) / 10000.0f - 1.0f;
    }
}

static double gelu_f64(double v) { return 0.5 * v * (1.0 + erf(v / sqrt(2.0))); }

static kiln__bq_format format_of(kiln_quant_type t) { return t == KILN_QUANT_Q4_0 ? KILN__BQ_Q4_0 : KILN__BQ_Q8_0; }

/* w [out, k] quantized block by block: q [out, nblk * 32], scales [out, nblk], and the weights
 * they stand for in f64, wd [out, k]. */
static void quantize_ref(kiln__bq_format f, const float *w, int64_t out, int64_t k, int8_t *q, float *scales, double *wd) {
    int64_t nblk = (k + KILN__BQ_BLOCK - 1) / KILN__BQ_BLOCK;
    for (int64_t o = 0; o < out; o++)
        for (int64_t b = 0; b < nblk; b++) {
            int64_t k0 = b * KILN__BQ_BLOCK, n = k - k0 < KILN__BQ_BLOCK ? k - k0 : KILN__BQ_BLOCK;
            int8_t *qb = q + o * nblk * KILN__BQ_BLOCK + k0;
            scales[o * nblk + b] = kiln__bq_quantize_block(f, w + o * k + k0, n, qb);
            for (int64_t i = 0; i < n; i++) wd[o * k + k0 + i] = (double)qb[i] * (double)scales[o * nblk + b];
        }
}

/* y[r, o] = x[r] . wd[o] (+ bias, then GELU) in f64; *mag the sum of magnitudes f32's rounding
 * is relative to. */
static double ref_dot(const float *x, const double *wd, int64_t k, const float *bias, int64_t o, int gelu, double *mag) {
    double want = bias ? bias[o] : 0.0;
    *mag = fabs(want);
    for (int64_t i = 0; i < k; i++) want += (double)x[i] * wd[o * k + i], *mag += fabs((double)x[i] * wd[o * k + i]);
    return gelu ? gelu_f64(want) : want;
}

static bool close_to(double got, double want, double mag, int64_t k, int gelu) {
    double tol = (double)(k + 4) * 1.2e-7 * mag + 1e-30; /* f32 sums of k products */
    if (gelu) tol = 1.2 * tol + 4e-7 * fabs(want);   /* gelu' <= 1.13, and its own ulps */
    return fabs(got - want) <= tol;
}

/* Every ISA path against f64, at each row count (the AVX-512 path's 16/8/4/2/1-row tiles, the
 * AVX2 path's 4/2/1), outputs with a narrow last group, inputs with a tail block, an exact
 * multiple of 32 and a single input, each epilogue; the outputs split in two calls at a group
 * boundary, as two threads split them. */
KT_TEST(every_path_matches_the_dequantized_f64_reference) {
    static const int64_t shapes[][2] = {{OUT, IN}, {16, 96}, {5, 1}, {3, 0}};
    for (int t = 0; t < 2; t++)
        for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
            kiln__bq_format f = format_of(TYPES[t]);
            int64_t N = shapes[s][0], K = shapes[s][1], NB = (K + KILN__BQ_BLOCK - 1) / KILN__BQ_BLOCK, M = 64;
            float *w = malloc(sizeof(float) * (size_t)(N * K + 1)), *x = malloc(sizeof(float) * (size_t)(M * K + 1));
            float *sc = malloc(sizeof(float) * (size_t)(N * (NB + 1))), *cols = malloc(sizeof(float) * (size_t)(N * (NB + 1)));
            float *pcols = malloc(sizeof(float) * (size_t)(N * (NB + 1))), *bias = malloc(sizeof(float) * (size_t)N);
            float *y = malloc(sizeof(float) * (size_t)(M * N));
            int8_t *q = calloc((size_t)(N * NB * KILN__BQ_BLOCK) + 1, 1);
            uint8_t *pw = malloc((size_t)(N * NB * kiln__bq_block_bytes(f)) + 1);
            double *wd = malloc(sizeof(double) * (size_t)(N * K + 1));
            fill(w, N * K, 3 + (unsigned)s), fill(x, M * K, 5 + (unsigned)s), fill(bias, N, 9);
            for (int64_t i = 0; i < N * K; i += 7) w[i] *= 20.0f; /* outliers in some blocks */
            quantize_ref(f, w, N, K, q, sc, wd);
            kiln__bq_pack_weight(f, q, N, NB, pw);
            for (int e = KILN__BQ_PLAIN; e <= KILN__BQ_BIAS_GELU; e++) {
                int64_t C = NB + (e != KILN__BQ_PLAIN);
                for (int64_t o = 0; o < N; o++)
                    for (int64_t c = 0; c < C; c++) cols[o * C + c] = c < NB ? sc[o * NB + c] : bias[o];
                kiln__s8_pack_scales(cols, N, C, pcols);
                for (int p = 0; p < 3; p++) {
                    if (kiln__vmath_force_isa(ISAS[p]) != 0) continue; /* this CPU lacks it */
                    if (t == 0 && s == 0 && e == 0) printf("  block product for KILN_ISA=%s: %s\n", ISAS[p], kiln__gemm_bq_path());
                    for (size_t m = 0; m < sizeof ROWS / sizeof ROWS[0]; m++) {
                        int64_t R = ROWS[m], split = N > KILN__BQ_GROUP ? KILN__BQ_GROUP : N;
                        for (int64_t i = 0; i < R * N; i++) y[i] = -1e30f;
                        KT_CHECK(kiln__gemm_bq(f, x, K, R, pw, pcols, N, 0, split, K, (kiln__bq_epilogue)e, y, N) == 0);
                        KT_CHECK(kiln__gemm_bq(f, x, K, R, pw, pcols, N, split, N, K, (kiln__bq_epilogue)e, y, N) == 0);
                        int bad = 0;
                        for (int64_t r = 0; r < R && bad < 3; r++)
                            for (int64_t o = 0; o < N && bad < 3; o++) {
                                double mag, want = ref_dot(x + r * K, wd, K, e != KILN__BQ_PLAIN ? bias : NULL, o,
                                                           e == KILN__BQ_BIAS_GELU, &mag);
                                if (close_to(y[r * N + o], want, mag, K, e == KILN__BQ_BIAS_GELU)) continue;
                                bad++;
                                KT_CHECK_MSG(false, "%s %s epilogue %d rows %lld %lldx%lld: y[%lld,%lld] = %.9g, want %.9g",
                                             TYPE_NAMES[t], ISAS[p], e, (long long)R, (long long)N, (long long)K,
                                             (long long)r, (long long)o, y[r * N + o], want);
                            }
                    }
                }
                kiln__vmath_force_isa(NULL);
            }
            free(w), free(x), free(sc), free(cols), free(pcols), free(bias), free(y), free(q), free(pw), free(wd);
        }
}

/* A block's integers and scale: q8_0 within half a step of every value (the scale amax / 127);
 * q4_0 likewise but for values past 7.5 steps on the other side of the largest (clamped to 7,
 * within a step), the largest itself exact; zeros past a short block; packing then dequantizing
 * gives q * d exactly; a block with an inf or a NaN has scale NAN, an all-zero or too small one
 * scale 1 and zeros. */
KT_TEST(quantize_round_trip_bounds) {
    static const int64_t lengths[] = {32, 11, 1};
    for (int t = 0; t < 2; t++) {
        kiln__bq_format f = format_of(TYPES[t]);
        for (size_t l = 0; l < sizeof lengths / sizeof lengths[0]; l++)
            for (unsigned seed = 1; seed <= 50; seed++) {
                int64_t n = lengths[l];
                float x[32];
                int8_t q[32];
                fill(x, n, seed);
                if (seed % 3 == 0) x[seed % n] = 7.0f; /* a positive largest */
                double amax = 0, largest = 0;
                for (int64_t i = 0; i < n; i++)
                    if (fabs(x[i]) > amax) amax = fabs(x[i]), largest = x[i];
                float d = kiln__bq_quantize_block(f, x, n, q);
                for (int64_t i = n; i < 32; i++) KT_CHECK(q[i] == 0);
                for (int64_t i = 0; i < n; i++) {
                    double back = (double)q[i] * d, err = fabs(x[i] - back), step = fabs((double)d);
                    if (f == KILN__BQ_Q8_0) {
                        KT_CHECK(q[i] >= -127 && q[i] <= 127);
                        KT_CHECK_MSG(err <= step / 2 * (1 + 1e-6), "q8_0 x %.9g back %.9g step %g", x[i], back, step);
                    } else {
                        KT_CHECK(q[i] >= -8 && q[i] <= 7);
                        double bound = fabs(x[i] / d) <= 7.5 ? step / 2 : step;
                        KT_CHECK_MSG(err <= bound * (1 + 1e-6), "q4_0 x %.9g back %.9g step %g", x[i], back, step);
                        if (x[i] == largest) KT_CHECK(back == largest && q[i] == -8);
                    }
                }
                if (f == KILN__BQ_Q8_0) KT_CHECK(fabs(d - amax / 127) <= 1e-7 * amax);
                /* packed (one output) and back */
                uint8_t packed[32];
                float w[32];
                kiln__bq_pack_weight(f, q, 1, 1, packed);
                kiln__bq_dequantize(f, packed, &d, 1, 1, 0, 1, n, w, 32);
                for (int64_t i = 0; i < n; i++) KT_CHECK(w[i] == (float)q[i] * d);
            }
        float special[4][32] = {{0}};
        special[1][5] = INFINITY, special[2][31] = NAN, special[3][0] = 1e-44f;
        int8_t q[32];
        KT_CHECK(kiln__bq_quantize_block(f, special[0], 32, q) == 1.0f && q[0] == 0);
        KT_CHECK(isnan(kiln__bq_quantize_block(f, special[1], 32, q)));
        KT_CHECK(isnan(kiln__bq_quantize_block(f, special[2], 32, q)));
        KT_CHECK(kiln__bq_quantize_block(f, special[3], 32, q) == 1.0f && q[0] == 0);
    }
}

/* The op (the custom ops a Linear and BERT call, queued) against f64 with KILN_NUM_THREADS 1
 * and 2 at every row count: from 64 rows the weight is dequantized and the f32 GEMM runs it. */
KT_TEST(the_op_matches_the_reference_on_one_and_two_threads) {
    kt_mem_begin();
    enum { M = 64 };
    static float w[OUT * IN], x[M * IN], b[OUT], y[M * OUT];
    static int8_t q[OUT * 3 * KILN__BQ_BLOCK];
    static float sc[OUT * 3];
    static double wd[OUT * IN];
    fill(w, OUT * IN, 21), fill(x, M * IN, 22), fill(b, OUT, 23);
    int threads_before = kiln_num_threads();
    for (int t = 0; t < 2; t++) {
        quantize_ref(format_of(TYPES[t]), w, OUT, IN, q, sc, wd);
        kiln_tensor wt = kiln_from_data(KILN_CPU, KILN_F32, KILN_SHAPE(OUT, IN), w);
        kiln_tensor bt = kiln_from_data(KILN_CPU, KILN_F32, KILN_SHAPE(OUT), b);
        kiln_tensor packed, scales, plain_packed, plain_scales;
        KT_CHECK(kiln__quantize_weight_blockq("test", TYPES[t], wt, bt, &packed, &scales) == KILN_OK);
        KT_CHECK(kiln__quantize_weight_blockq("test", TYPES[t], wt, KILN_NONE, &plain_packed, &plain_scales) == KILN_OK);
        KT_CHECK(kiln__quant_type_of(packed) == TYPES[t] && kiln_tensor_dim(packed, 1) == 3);
        kiln_release(wt), kiln_release(bt);
        for (int threads = 1; threads <= 2; threads++)
            for (int p = 0; p < 3; p++) {
                if (kiln__vmath_force_isa(ISAS[p]) != 0) continue;
                kiln_set_num_threads(threads);
                for (size_t m = 0; m < sizeof ROWS / sizeof ROWS[0]; m++)
                    for (int e = 0; e < 3; e++) {
                        int64_t R = ROWS[m];
                        kiln_tensor xt = kiln_from_data(KILN_CPU, KILN_F32, KILN_SHAPE(R, IN), x);
                        kiln_tensor yt = e == 0 ? kiln__linear_blockq("test", TYPES[t], xt, kiln_ref(plain_packed),
                                                                      kiln_ref(plain_scales), KILN_NONE)
                                                : kiln__linear_blockq_fused("test", xt, kiln_ref(packed), kiln_ref(scales), e == 2);
                        KT_CHECK(kiln_into_data(yt, y, sizeof(float) * (size_t)(R * OUT)) == KILN_OK);
                        int bad = 0;
                        for (int64_t r = 0; r < R && bad < 3; r++)
                            for (int64_t o = 0; o < OUT && bad < 3; o++) {
                                double mag, want = ref_dot(x + r * IN, wd, IN, e ? b : NULL, o, e == 2, &mag);
                                if (close_to(y[r * OUT + o], want, mag, IN, e == 2)) continue;
                                bad++;
                                KT_CHECK_MSG(false, "%s %s %d threads, %lld rows, epilogue %d: y[%lld,%lld] = %.9g, want %.9g",
                                             TYPE_NAMES[t], ISAS[p], threads, (long long)R, e, (long long)r, (long long)o,
                                             y[r * OUT + o], want);
                            }
                    }
            }
        kiln__vmath_force_isa(NULL);
        kiln_set_num_threads(threads_before);
        kiln_release(packed), kiln_release(scales), kiln_release(plain_packed), kiln_release(plain_scales);
    }
    KT_MEM_CHECK();
}

static kiln_module *mlp(uint64_t seed) {
    kiln_module *layers[] = {kiln_linear_new(IN, 24, true, seed), kiln_relu_new(), kiln_linear_new(24, OUT, true, seed + 1)};
    return kiln_sequential_new(3, layers);
}

/* The layer: no parameters left, buffers named for the format, its output the f64 product of
 * its dequantized weight plus the bias; a strided input gives the contiguous input's bits; a
 * non-finite row gives NaN in that row only. */
KT_TEST(quantized_linear_matches_the_reference) {
    kt_mem_begin();
    enum { R = 15 };
    float w[OUT * IN], b[OUT], x[R * IN], y[R * OUT], t2[R * OUT];
    int8_t q[OUT * 3 * KILN__BQ_BLOCK];
    float sc[OUT * 3];
    double wd[OUT * IN];
    fill(x, R * IN, 7);
    for (int t = 0; t < 2; t++) {
        kiln_module *m = kiln_linear_new(IN, OUT, true, 3 + (uint64_t)t);
        KT_CHECK(kiln_into_data(kiln_module_param(m, "weight"), w, sizeof w) == KILN_OK);
        KT_CHECK(kiln_into_data(kiln_module_param(m, "bias"), b, sizeof b) == KILN_OK);
        quantize_ref(format_of(TYPES[t]), w, OUT, IN, q, sc, wd);
        KT_CHECK(kiln_quantize_dynamic(m, TYPES[t]) == KILN_OK);
        KT_CHECK(kiln_module_is_quantized(m));
        KT_CHECK(kiln_module_num_parameters(m) == 0);
        kiln_tensor packed = kiln_module_param(m, t ? "weight_q4_0" : "weight_q8_0");
        KT_CHECK(kiln_tensor_ndim(packed) == 3 && kiln_tensor_dim(packed, 2) == (t ? 4 : 8));
        kiln_release(packed);
        kiln_tensor xt = kiln_from_data(KILN_CPU, KILN_F32, KILN_SHAPE(3, 5, IN), x);
        kiln_tensor yt = kiln_module_forward(m, kiln_ref(xt));
        KT_CHECK(kiln_tensor_ndim(yt) == 3 && kiln_tensor_dim(yt, 2) == OUT);
        KT_CHECK(kiln_into_data(yt, y, sizeof y) == KILN_OK);
        for (int r = 0; r < R; r++)
            for (int o = 0; o < OUT; o++) {
                double mag, want = ref_dot(x + r * IN, wd, IN, b, o, 0, &mag);
                KT_CHECK_MSG(close_to(y[r * OUT + o], want, mag, IN, 0), "%s y[%d,%d] = %.9g, want %.9g", TYPE_NAMES[t], r, o,
                             y[r * OUT + o], want);
            }
        /* the same values through a transposed view */
        kiln_tensor flat = kiln_reshape(xt, KILN_SHAPE(R, IN));
        kiln_tensor xv = kiln_transpose(kiln_contiguous(kiln_transpose(flat, 0, 1)), 0, 1);
        KT_CHECK(!kiln_tensor_is_contiguous(xv));
        KT_CHECK(kiln_into_data(kiln_module_forward(m, xv), t2, sizeof t2) == KILN_OK);
        KT_CHECK(memcmp(y, t2, sizeof y) == 0);
        /* a row with an inf, one with a NaN */
        float xn[3 * IN];
        memcpy(xn, x, sizeof xn);
        xn[IN + 4] = INFINITY, xn[2 * IN + 70] = NAN;
        KT_CHECK(kiln_into_data(kiln_module_forward(m, kiln_from_data(KILN_CPU, KILN_F32, KILN_SHAPE(3, IN), xn)), y,
                                sizeof(float) * 3 * OUT) == KILN_OK);
        for (int o = 0; o < OUT; o++) KT_CHECK(isfinite(y[o]) && !isfinite(y[OUT + o]) && isnan(y[2 * OUT + o]));
        kiln_module_free(m);
    }
    KT_MEM_CHECK();
}

/* A quantized model saved and loaded again has the same bits in every buffer and gives the
 * same bits; a checkpoint of the other format (or an f32 model) does not load: the names differ. */
KT_TEST(safetensors_round_trip_is_bit_exact) {
    kt_mem_begin();
    const char *path = "test_quantize_blockq.safetensors";
    for (int t = 0; t < 2; t++) {
        kiln_module *a = mlp(1), *b = mlp(9), *other = mlp(1), *f = mlp(1);
        KT_CHECK(kiln_quantize_dynamic(a, TYPES[t]) == KILN_OK);
        KT_CHECK(kiln_quantize_dynamic(b, TYPES[t]) == KILN_OK);
        KT_CHECK(kiln_quantize_dynamic(other, TYPES[1 - t]) == KILN_OK);
        KT_CHECK(kiln_checkpoint_save(path, a, NULL) == KILN_OK);
        KT_CHECK(kiln_checkpoint_load(path, b, NULL) == KILN_OK);
        const char *names[] = {t ? "weight_q4_0" : "weight_q8_0", "weight_scale_b32", "bias"};
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
                KT_CHECK_MSG(memcmp(da, db, (size_t)bytes) == 0, "%s layer %d %s differs", TYPE_NAMES[t], l, names[i]);
                free(da), free(db);
            }
        float x[4 * IN], ya[4 * OUT], yb[4 * OUT];
        fill(x, 4 * IN, 2);
        kiln_tensor xt = kiln_from_data(KILN_CPU, KILN_F32, KILN_SHAPE(4, IN), x);
        KT_CHECK(kiln_into_data(kiln_module_forward(a, kiln_ref(xt)), ya, sizeof ya) == KILN_OK);
        KT_CHECK(kiln_into_data(kiln_module_forward(b, xt), yb, sizeof yb) == KILN_OK);
        KT_CHECK(memcmp(ya, yb, sizeof ya) == 0);
        KT_CHECK(kiln_checkpoint_load(path, other, NULL) != KILN_OK);
        KT_CHECK(kiln_checkpoint_load(path, f, NULL) != KILN_OK);
        remove(path);
        kiln_module_free(a), kiln_module_free(b), kiln_module_free(other), kiln_module_free(f);
    }
    KT_MEM_CHECK();
}

KT_TEST(bad_input_names_the_op) {
    kt_mem_begin();
    KT_CHECK(kiln_quantize_dynamic(NULL, KILN_QUANT_Q8_0) == KILN_ERR_NULL);
    KT_EXPECT_ERROR(KILN_ERR_NULL, "kiln_quantize_dynamic", __LINE__ - 1);
    KT_CHECK(kiln_bert_quantize_dynamic(NULL, KILN_QUANT_Q4_0) == KILN_ERR_NULL);
    KT_EXPECT_ERROR(KILN_ERR_NULL, "kiln_bert_quantize_dynamic", __LINE__ - 1);
    /* no Linear in it: nothing to quantize */
    kiln_module *relu = kiln_relu_new();
    KT_CHECK(kiln_quantize_dynamic(relu, KILN_QUANT_Q4_0) == KILN_OK && !kiln_module_is_quantized(relu));
    kiln_module_free(relu);
    /* weights that are not a Linear's: 3-d, f64, a non-finite value */
    kiln_tensor packed, scales;
    kiln_tensor w3 = kiln_zeros(KILN_CPU, KILN_F32, KILN_SHAPE(2, 3, 4)), w64 = kiln_zeros(KILN_CPU, KILN_F64, KILN_SHAPE(3, 4));
    KT_CHECK(kiln__quantize_weight_blockq("test_op", KILN_QUANT_Q8_0, w3, KILN_NONE, &packed, &scales) == KILN_ERR_UNSUPPORTED);
    KT_CHECK(!packed.id && !scales.id && strstr(kiln_last_error(), "test_op") != NULL);
    KT_CHECK(kiln__quantize_weight_blockq("test_op", KILN_QUANT_Q4_0, w64, KILN_NONE, &packed, &scales) == KILN_ERR_UNSUPPORTED);
    KT_CHECK(kiln__quantize_weight_blockq("test_op", KILN_QUANT_I8, w3, KILN_NONE, &packed, &scales) == KILN_ERR_INVALID_ARGUMENT);
    kiln_release(w3), kiln_release(w64);
    float nanw[3 * 40] = {0};
    nanw[2 * 40 + 39] = NAN;
    kiln_tensor wn = kiln_from_data(KILN_CPU, KILN_F32, KILN_SHAPE(3, 40), nanw);
    KT_CHECK(kiln__quantize_weight_blockq("test_op", KILN_QUANT_Q4_0, wn, KILN_NONE, &packed, &scales) == KILN_ERR_INVALID_ARGUMENT);
    KT_CHECK(!packed.id && strstr(kiln_last_error(), "row 2") != NULL);
    kiln_release(wn);
    /* unknown type, then twice (the same type, another): the quantized layers stay as they are */
    kiln_module *m = mlp(4);
    KT_CHECK(kiln_quantize_dynamic(m, (kiln_quant_type)42) == KILN_ERR_INVALID_ARGUMENT);
    KT_EXPECT_ERROR(KILN_ERR_INVALID_ARGUMENT, "kiln_quantize_dynamic", __LINE__ - 1);
    KT_CHECK(!kiln_module_is_quantized(m));
    KT_CHECK(kiln_quantize_dynamic(m, KILN_QUANT_Q8_0) == KILN_OK);
    float x[2 * IN], y1[2 * OUT], y2[2 * OUT];
    fill(x, 2 * IN, 3);
    kiln_tensor xt = kiln_from_data(KILN_CPU, KILN_F32, KILN_SHAPE(2, IN), x);
    KT_CHECK(kiln_into_data(kiln_module_forward(m, kiln_ref(xt)), y1, sizeof y1) == KILN_OK);
    KT_CHECK(kiln_quantize_dynamic(m, KILN_QUANT_Q8_0) == KILN_OK);
    KT_CHECK(kiln_quantize_dynamic(m, KILN_QUANT_Q4_0) == KILN_OK);
    KT_CHECK(kiln_quantize_dynamic(m, KILN_QUANT_I8) == KILN_OK);
    KT_CHECK(kiln_into_data(kiln_module_forward(m, xt), y2, sizeof y2) == KILN_OK);
    KT_CHECK(memcmp(y1, y2, sizeof y1) == 0);
    kiln_tensor still = kiln_module_param(kiln_module_child(m, "0"), "weight_q8_0");
    KT_CHECK(kiln_tensor_ndim(still) == 3);
    kiln_release(still);
    /* optimizers refuse it */
    KT_CHECK(kiln_sgd_new(m, (kiln_sgd_options){.lr = 0.1}) == NULL);
    KT_EXPECT_ERROR(KILN_ERR_UNSUPPORTED, "kiln_sgd_new", __LINE__ - 1);
    KT_CHECK(kiln_adam_new(m, (kiln_adam_options){.lr = 0.1}) == NULL);
    KT_EXPECT_ERROR(KILN_ERR_UNSUPPORTED, "kiln_adam_new", __LINE__ - 1);
    /* queued and read later: a wrong feature count, an f64 input */
    KT_READ_ERROR(kiln_module_forward(m, kiln_zeros(KILN_CPU, KILN_F32, KILN_SHAPE(2, IN + 1))), KILN_ERR_SHAPE, "Linear");
    KT_READ_ERROR(kiln_module_forward(m, kiln_zeros(KILN_CPU, KILN_F64, KILN_SHAPE(2, IN))), KILN_ERR_INVALID_ARGUMENT,
                  "linear_q8_0");
    kiln_module_free(m);
    /* the ops themselves: a feature count past the weight's blocks, scales without the bias
     * column, an int8 (2-d) weight, a weight of the wrong dtype */
    float w[OUT * IN], b[OUT];
    fill(w, OUT * IN, 1), fill(b, OUT, 2);
    kiln_tensor wt = kiln_from_data(KILN_CPU, KILN_F32, KILN_SHAPE(OUT, IN), w);
    kiln_tensor bt = kiln_from_data(KILN_CPU, KILN_F32, KILN_SHAPE(OUT), b);
    kiln_tensor plain_packed, plain_scales, i8_packed, i8_scales;
    KT_CHECK(kiln__quantize_weight_blockq("test", KILN_QUANT_Q4_0, wt, bt, &packed, &scales) == KILN_OK);
    KT_CHECK(kiln__quantize_weight_blockq("test", KILN_QUANT_Q4_0, wt, KILN_NONE, &plain_packed, &plain_scales) == KILN_OK);
    KT_CHECK(kiln__quantize_weight_i8("test", wt, bt, &i8_packed, &i8_scales) == KILN_OK);
    kiln_release(wt), kiln_release(bt);
    KT_READ_ERROR(kiln__linear_blockq_fused("test", kiln_zeros(KILN_CPU, KILN_F32, KILN_SHAPE(2, IN + 40)), kiln_ref(packed),
                                            kiln_ref(scales), true),
                  KILN_ERR_INVALID_ARGUMENT, "linear_q4_0_bias_gelu");
    KT_READ_ERROR(kiln__linear_blockq_fused("test", kiln_zeros(KILN_CPU, KILN_F32, KILN_SHAPE(2, IN)), kiln_ref(plain_packed),
                                            kiln_ref(plain_scales), false),
                  KILN_ERR_INVALID_ARGUMENT, "linear_q4_0_bias");
    KT_READ_ERROR(kiln__linear_blockq_fused("test_fused", kiln_zeros(KILN_CPU, KILN_F32, KILN_SHAPE(2, IN)), kiln_ref(i8_packed),
                                            kiln_ref(i8_scales), false),
                  KILN_ERR_INVALID_ARGUMENT, "test_fused");
    KT_READ_ERROR(kiln__linear_blockq("test", KILN_QUANT_Q4_0, kiln_zeros(KILN_CPU, KILN_F32, KILN_SHAPE(2, IN)),
                                      kiln_cast(kiln_ref(plain_packed), KILN_F32), kiln_ref(plain_scales), KILN_NONE),
                  KILN_ERR_INVALID_ARGUMENT, "linear_q4_0");
    KT_READ_ERROR(kiln__linear_blockq("test", KILN_QUANT_Q8_0, kiln_zeros(KILN_CPU, KILN_F32, KILN_SHAPE(2, IN)),
                                      kiln_ref(plain_packed), kiln_ref(plain_scales), KILN_NONE),
                  KILN_ERR_INVALID_ARGUMENT, "linear_q8_0"); /* a q4_0 weight into the q8_0 product */
    KT_READ_ERROR(kiln__linear_blockq("test", KILN_QUANT_Q8_0, kiln_full(KILN_CPU, KILN_F32, (kiln_shape){.ndim = 0}, 1.0),
                                      kiln_ref(plain_packed), kiln_ref(plain_scales), KILN_NONE),
                  KILN_ERR_INVALID_ARGUMENT, "linear_q8_0");
    kiln_release(packed), kiln_release(scales), kiln_release(plain_packed), kiln_release(plain_scales);
    kiln_release(i8_packed), kiln_release(i8_scales);
    KT_MEM_CHECK();
}

/* all-MiniLM-L6-v2 with its linears in q8_0 and q4_0 against the f32 reference embeddings
 * (test_quantize_blockq --reference; skipped with 77 without the model package). q4_0 has no
 * goal of its own: its worst sentence is printed and held to MINILM_Q4_0_FLOOR. */
static const char *model_dir;

KT_TEST(minilm_blockq_cosine) {
    for (int t = 0; t < 2; t++) {
        mr_comparison c;
        KT_CHECK(mr_comparison_open(&c, model_dir));
        if (!c.model) return;
        KT_CHECK(kiln_bert_quantize_dynamic(c.model, TYPES[t]) == KILN_OK);
        KT_CHECK(kiln_bert_quantize_dynamic(c.model, TYPES[t]) == KILN_OK); /* again: nothing to do */
        KT_CHECK(kiln_bert_quantize_dynamic(c.model, TYPES[1 - t]) == KILN_ERR_UNSUPPORTED);
        KT_CHECK(mr_comparison_embed(&c));
        double worst = mr_comparison_worst(&c, TYPE_NAMES[t]);
        KT_CHECK(worst >= (t == 0 ? MINILM_Q8_0_MIN_COSINE : MINILM_Q4_0_FLOOR));
        mr_comparison_close(&c);
    }
}

int main(int argc, char **argv) {
    if (argc == 2 && strcmp(argv[1], "--reference") == 0) {
        model_dir = mr_model_dir();
        if (!model_dir) return mr_skip();
        KT_RUN(minilm_blockq_cosine);
        return kt_finish();
    }
    KT_RUN(quantize_round_trip_bounds);
    KT_RUN(every_path_matches_the_dequantized_f64_reference);
    KT_RUN(the_op_matches_the_reference_on_one_and_two_threads);
    KT_RUN(quantized_linear_matches_the_reference);
    KT_RUN(safetensors_round_trip_is_bit_exact);
    KT_RUN(bad_input_names_the_op);
    return kt_finish();
}
