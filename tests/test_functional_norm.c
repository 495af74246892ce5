/* Functional batch_norm (training with and without running statistics and their update, eval),
 * embedding, group_norm and rms_norm (and the RMSNorm layer) against double references written
 * from PyTorch's definitions, finite-difference gradients, and bad input naming the call and
 * this file's line, the running statistics left alone on error; no leaks. */
#include <float.h>

#include "gradcheck.h"
#include "nn_util.h"

/* ---- batch_norm ------------------------------------------------------------------------------ */

enum { BN = 3, BC = 2, BL = 4, BSIZE = BN * BC * BL };

/* x [N, C, L]: per channel statistics; y with mean/var (biased) of the batch or given ones. */
static void bn_ref(const double *x, const double *mean_in, const double *var_in, const double *w, const double *b, double eps,
                   double *y, double *mean_out, double *var_out) {
    for (int c = 0; c < BC; c++) {
        double m = 0, v = 0;
        for (int n = 0; n < BN; n++)
            for (int l = 0; l < BL; l++) m += x[(n * BC + c) * BL + l];
        m /= BN * BL;
        for (int n = 0; n < BN; n++)
            for (int l = 0; l < BL; l++) v += pow(x[(n * BC + c) * BL + l] - m, 2);
        v /= BN * BL;
        if (mean_out) mean_out[c] = m, var_out[c] = v;
        double mu = mean_in ? mean_in[c] : m, var = var_in ? var_in[c] : v;
        for (int n = 0; n < BN; n++)
            for (int l = 0; l < BL; l++) {
                int i = (n * BC + c) * BL + l;
                y[i] = (x[i] - mu) / sqrt(var + eps) * (w ? w[c] : 1) + (b ? b[c] : 0);
            }
    }
}

KT_TEST(batch_norm_matches_reference) {
    kt_mem_begin();
    double x[BSIZE], w[BC] = {1.5, -0.5}, b[BC] = {0.25, 2}, rm0[BC] = {0.1, -0.3}, rv0[BC] = {0.8, 1.7};
    double y[BSIZE], want[BSIZE], bm[BC], bv[BC];
    fill(x, BSIZE, -2, 3);
    const double eps = 1e-3, mom = 0.2;
    /* training, with running statistics updated */
    kiln_tensor rm = tensor_of(KILN_F32, KILN_SHAPE(BC), rm0), rv = tensor_of(KILN_F32, KILN_SHAPE(BC), rv0);
    kiln_tensor out = kiln_batch_norm(tensor_of(KILN_F64, KILN_SHAPE(BN, BC, BL), x), &rm, &rv, tensor_of(KILN_F64, KILN_SHAPE(BC), w),
                                      tensor_of(KILN_F64, KILN_SHAPE(BC), b), true, mom, eps);
    bn_ref(x, NULL, NULL, w, b, eps, want, bm, bv);
    if (read_f64(out, y, BSIZE))
        for (int i = 0; i < BSIZE; i++) KT_NEAR(y[i], want[i], 1e-12);
    double got_m[BC], got_v[BC];
    KT_CHECK(kiln_tensor_dtype(rm) == KILN_F32 && kiln_tensor_dtype(rv) == KILN_F32); /* their own dtype */
    if (read_f64(kiln_ref(rm), got_m, BC) && read_f64(kiln_ref(rv), got_v, BC))
        for (int c = 0; c < BC; c++) {
            KT_NEAR(got_m[c], (1 - mom) * rm0[c] + mom * bm[c], 1e-6);
            KT_NEAR(got_v[c], (1 - mom) * rv0[c] + mom * bv[c] * (BN * BL) / (BN * BL - 1.0), 1e-6); /* unbiased */
        }
    /* eval: the running statistics, unchanged */
    double rm1[BC], rv1[BC];
    memcpy(rm1, got_m, sizeof rm1), memcpy(rv1, got_v, sizeof rv1);
    out = kiln_batch_norm(tensor_of(KILN_F64, KILN_SHAPE(BN, BC, BL), x), &rm, &rv, KILN_NONE, tensor_of(KILN_F64, KILN_SHAPE(BC), b),
                          false, mom, eps);
    bn_ref(x, rm1, rv1, NULL, b, eps, want, NULL, NULL);
    if (read_f64(out, y, BSIZE))
        for (int i = 0; i < BSIZE; i++) KT_NEAR(y[i], want[i], 1e-6);
    if (read_f64(kiln_ref(rm), got_m, BC))
        for (int c = 0; c < BC; c++) KT_CHECK(got_m[c] == rm1[c]);
    /* training without running statistics; a 2-d input [N, C] */
    out = kiln_batch_norm(tensor_of(KILN_F64, KILN_SHAPE(BN, BC, BL), x), NULL, NULL, KILN_NONE, KILN_NONE, true, 0.1, eps);
    bn_ref(x, NULL, NULL, NULL, NULL, eps, want, NULL, NULL);
    if (read_f64(out, y, BSIZE))
        for (int i = 0; i < BSIZE; i++) KT_NEAR(y[i], want[i], 1e-12);
    double x2[6] = {1, 10, 2, 20, 3, 60}, y2[6];
    if (read_f64(kiln_batch_norm(tensor_of(KILN_F64, KILN_SHAPE(3, 2), x2), NULL, NULL, KILN_NONE, KILN_NONE, true, 0.1, 0), y2, 6))
    {
        KT_NEAR(y2[0], -sqrt(1.5), 1e-12);
        KT_NEAR(y2[2], 0, 1e-12);
        KT_NEAR(y2[4], sqrt(1.5), 1e-12);
    }
    kiln_release(rm);
    kiln_release(rv);
    KT_MEM_CHECK();
}

typedef struct {
    bool training;
} bn_case;

static kiln_tensor run_bn(kiln_tensor *in, void *ctx) {
    const bn_case *bc = ctx;
    kiln_tensor rm = kiln_full(KILN_CPU, KILN_F64, KILN_SHAPE(BC), 0.2), rv = kiln_full(KILN_CPU, KILN_F64, KILN_SHAPE(BC), 1.3);
    kiln_tensor y = kiln_batch_norm(kiln_transpose(in[0], 0, 1), &rm, &rv, in[1], in[2], bc->training, 0.1, 1e-5);
    kiln_release(rm);
    kiln_release(rv);
    return y;
}

KT_TEST(batch_norm_gradients) {
    kt_mem_begin();
    for (int t = 0; t < 2; t++) {
        bn_case bc = {t == 0};
        GC_CHECK(t ? "batch_norm eval" : "batch_norm training", run_bn, &bc, 3,
                 ((kiln_shape[]){KILN_SHAPE(BC, BN, BL), KILN_SHAPE(BC), KILN_SHAPE(BC)}), 1e-6);
    }
    KT_MEM_CHECK();
}

KT_TEST(batch_norm_bad_input) {
    kt_mem_begin();
    kiln_tensor rm = kiln_zeros(KILN_CPU, KILN_F32, KILN_SHAPE(3)), rv = kiln_ones(KILN_CPU, KILN_F32, KILN_SHAPE(3));
    kiln_tensor keep_m = rm, keep_v = rv;
#define X3 kiln_ones(KILN_CPU, KILN_F32, KILN_SHAPE(2, 3, 4))
    KT_READ_ERROR(kiln_batch_norm(X3, NULL, NULL, KILN_NONE, KILN_NONE, false, 0.1, 1e-5), KILN_ERR_INVALID_ARGUMENT, "kiln_batch_norm");
    KT_READ_ERROR(kiln_batch_norm(X3, &rm, NULL, KILN_NONE, KILN_NONE, true, 0.1, 1e-5), KILN_ERR_NULL, "kiln_batch_norm");
    KT_READ_ERROR(kiln_batch_norm(kiln_ones(KILN_CPU, KILN_F32, KILN_SHAPE(2, 4, 4)), &rm, &rv, KILN_NONE, KILN_NONE, true, 0.1, 1e-5),
                  KILN_ERR_SHAPE, "kiln_batch_norm");
    KT_READ_ERROR(kiln_batch_norm(kiln_ones(KILN_CPU, KILN_I32, KILN_SHAPE(2, 3, 4)), &rm, &rv, KILN_NONE, KILN_NONE, true, 0.1, 1e-5),
                  KILN_ERR_DTYPE, "kiln_batch_norm");
    KT_READ_ERROR(kiln_batch_norm(kiln_ones(KILN_CPU, KILN_F32, KILN_SHAPE(3)), &rm, &rv, KILN_NONE, KILN_NONE, true, 0.1, 1e-5),
                  KILN_ERR_SHAPE, "kiln_batch_norm");
    KT_READ_ERROR(kiln_batch_norm(kiln_ones(KILN_CPU, KILN_F32, KILN_SHAPE(1, 3)), &rm, &rv, KILN_NONE, KILN_NONE, true, 0.1, 1e-5),
                  KILN_ERR_SHAPE, "kiln_batch_norm"); /* one value per channel */
    KT_READ_ERROR(kiln_batch_norm(X3, &rm, &rv, kiln_ones(KILN_CPU, KILN_F32, KILN_SHAPE(4)), KILN_NONE, true, 0.1, 1e-5),
                  KILN_ERR_SHAPE, "kiln_batch_norm");
    KT_READ_ERROR(kiln_batch_norm(X3, &rm, &rv, KILN_NONE, kiln_ones(KILN_CPU, KILN_I64, KILN_SHAPE(3)), true, 0.1, 1e-5),
                  KILN_ERR_DTYPE, "kiln_batch_norm");
    KT_READ_ERROR(kiln_batch_norm(X3, &rm, &rv, KILN_NONE, KILN_NONE, true, 1.5, 1e-5), KILN_ERR_INVALID_ARGUMENT, "kiln_batch_norm");
    KT_READ_ERROR(kiln_batch_norm(X3, &rm, &rv, KILN_NONE, KILN_NONE, true, 0.1, -1), KILN_ERR_INVALID_ARGUMENT, "kiln_batch_norm");
    kiln_tensor stale = kiln_ref(rm);
    kiln_release(stale);
    KT_READ_ERROR(kiln_batch_norm(X3, &stale, &rv, KILN_NONE, KILN_NONE, true, 0.1, 1e-5), KILN_ERR_INVALID_ARGUMENT, "kiln_batch_norm");
#undef X3
    /* nothing was updated: the same handles, the same values */
    KT_CHECK(rm.id == keep_m.id && rv.id == keep_v.id);
    double v[3];
    if (read_f64(kiln_ref(rm), v, 3)) KT_CHECK(v[0] == 0 && v[2] == 0);
    kiln_release(rm);
    kiln_release(rv);
    KT_MEM_CHECK();
}

/* ---- embedding ---------------------------------------------------------------------------------- */

KT_TEST(embedding_values_and_errors) {
    kt_mem_begin();
    double w[12];
    for (int i = 0; i < 12; i++) w[i] = i * 0.5;
    const double idx[6] = {3, 0, 2, 2, 1, 3};
    kiln_tensor y = kiln_embedding(tensor_of(KILN_I64, KILN_SHAPE(2, 3), idx), tensor_of(KILN_F64, KILN_SHAPE(4, 3), w));
    KT_CHECK(has_shape(y, KILN_SHAPE(2, 3, 3)));
    double got[18];
    if (read_f64(y, got, 18))
        for (int i = 0; i < 6; i++)
            for (int k = 0; k < 3; k++) KT_CHECK(got[i * 3 + k] == w[(int)idx[i] * 3 + k]);
    kiln_tensor s = kiln_embedding(tensor_of(KILN_I32, KILN_SCALAR_SHAPE, idx), tensor_of(KILN_F64, KILN_SHAPE(4, 3), w));
    KT_CHECK(has_shape(s, KILN_SHAPE(3)));
    kiln_release(s);
    KT_READ_ERROR(kiln_embedding(tensor_of(KILN_F32, KILN_SHAPE(2), idx), tensor_of(KILN_F64, KILN_SHAPE(4, 3), w)), KILN_ERR_DTYPE,
                  "kiln_embedding");
    KT_READ_ERROR(kiln_embedding(tensor_of(KILN_I64, KILN_SHAPE(2), idx), tensor_of(KILN_F64, KILN_SHAPE(12), w)), KILN_ERR_SHAPE,
                  "kiln_embedding");
    const double out_of_range[2] = {1, 4};
    KT_READ_ERROR(kiln_embedding(tensor_of(KILN_I64, KILN_SHAPE(2), out_of_range), tensor_of(KILN_F64, KILN_SHAPE(4, 3), w)),
                  KILN_ERR_INDEX, "kiln_embedding");
    KT_MEM_CHECK();
}

static kiln_tensor run_embedding(kiln_tensor *in, void *ctx) {
    const double idx[5] = {1, 0, 1, 3, 1}; /* repeats: gradients add up */
    (void)ctx;
    return kiln_embedding(tensor_of(KILN_I64, KILN_SHAPE(5), idx), in[0]);
}

KT_TEST(embedding_gradient) {
    kt_mem_begin();
    GC_CHECK("embedding", run_embedding, NULL, 1, ((kiln_shape[]){KILN_SHAPE(4, 3)}), 1e-7);
    KT_MEM_CHECK();
}

/* ---- group_norm -------------------------------------------------------------------------------- */

KT_TEST(group_norm_matches_reference) {
    kt_mem_begin();
    enum { N = 2, C = 6, L = 5, G = 3, S = N * C * L };
    double x[S], w[C], b[C], y[S], want[S];
    fill(x, S, -3, 3);
    fill(w, C, 0.5, 2);
    fill(b, C, -1, 1);
    const double eps = 1e-4;
    for (int n = 0; n < N; n++)
        for (int g = 0; g < G; g++) {
            double m = 0, v = 0;
            int per = C / G * L, base = (n * C + g * (C / G)) * L;
            for (int i = 0; i < per; i++) m += x[base + i];
            m /= per;
            for (int i = 0; i < per; i++) v += pow(x[base + i] - m, 2);
            v /= per;
            for (int i = 0; i < per; i++) {
                int c = g * (C / G) + i / L;
                want[base + i] = (x[base + i] - m) / sqrt(v + eps) * w[c] + b[c];
            }
        }
    for (int dt = 0; dt < 2; dt++) {
        kiln_dtype d = dt ? KILN_F32 : KILN_F64;
        kiln_tensor out = kiln_group_norm(tensor_of(d, KILN_SHAPE(N, C, L), x), G, tensor_of(d, KILN_SHAPE(C), w),
                                          tensor_of(d, KILN_SHAPE(C), b), eps);
        if (read_f64(out, y, S))
            for (int i = 0; i < S; i++) KT_NEAR(y[i], want[i], dt ? 1e-5 : 1e-12);
    }
    /* one group of everything, no affine; 4-d input */
    kiln_tensor one = kiln_group_norm(kiln_randn(KILN_CPU, KILN_F64, KILN_SHAPE(2, 4, 3, 3), 5), 1, KILN_NONE, KILN_NONE, 0);
    KT_CHECK(has_shape(one, KILN_SHAPE(2, 4, 3, 3)));
    double o[72];
    if (read_f64(one, o, 72)) {
        double m = 0;
        for (int i = 0; i < 36; i++) m += o[i];
        KT_NEAR(m / 36, 0, 1e-12);
    }
    KT_READ_ERROR(kiln_group_norm(kiln_ones(KILN_CPU, KILN_F32, KILN_SHAPE(2, 6, 3)), 4, KILN_NONE, KILN_NONE, 1e-5),
                  KILN_ERR_INVALID_ARGUMENT, "kiln_group_norm");
    KT_READ_ERROR(kiln_group_norm(kiln_ones(KILN_CPU, KILN_F32, KILN_SHAPE(2, 6, 3)), 0, KILN_NONE, KILN_NONE, 1e-5),
                  KILN_ERR_INVALID_ARGUMENT, "kiln_group_norm");
    KT_READ_ERROR(kiln_group_norm(kiln_ones(KILN_CPU, KILN_F32, KILN_SHAPE(6)), 2, KILN_NONE, KILN_NONE, 1e-5), KILN_ERR_SHAPE,
                  "kiln_group_norm");
    KT_READ_ERROR(kiln_group_norm(kiln_ones(KILN_CPU, KILN_F32, KILN_SHAPE(2, 6, 3)), 2, kiln_ones(KILN_CPU, KILN_F32, KILN_SHAPE(3)),
                                  KILN_NONE, 1e-5), KILN_ERR_SHAPE, "kiln_group_norm");
    KT_READ_ERROR(kiln_group_norm(kiln_ones(KILN_CPU, KILN_I64, KILN_SHAPE(2, 6, 3)), 2, KILN_NONE, KILN_NONE, 1e-5), KILN_ERR_DTYPE,
                  "kiln_group_norm");
    KT_READ_ERROR(kiln_group_norm(kiln_ones(KILN_CPU, KILN_F32, KILN_SHAPE(2, 6, 3)), 2, KILN_NONE, KILN_NONE, NAN),
                  KILN_ERR_INVALID_ARGUMENT, "kiln_group_norm");
    KT_MEM_CHECK();
}

static kiln_tensor run_group_norm(kiln_tensor *in, void *ctx) {
    (void)ctx;
    return kiln_group_norm(in[0], 2, in[1], in[2], 1e-5);
}

KT_TEST(group_norm_gradients) {
    kt_mem_begin();
    GC_CHECK("group_norm", run_group_norm, NULL, 3, ((kiln_shape[]){KILN_SHAPE(2, 4, 3), KILN_SHAPE(4), KILN_SHAPE(4)}), 1e-6);
    KT_MEM_CHECK();
}

/* ---- rms_norm and RMSNorm --------------------------------------------------------------------- */

KT_TEST(rms_norm_matches_reference) {
    kt_mem_begin();
    enum { R = 3, D = 5 };
    double x[R * D], w[D], y[R * D], want[R * D];
    fill(x, R * D, -2, 2);
    fill(w, D, 0.5, 1.5);
    for (int pass = 0; pass < 2; pass++) {
        double eps = pass ? 1e-3 : DBL_EPSILON; /* pass 0: eps NaN, torch's None */
        for (int r = 0; r < R; r++) {
            double ms = 0;
            for (int i = 0; i < D; i++) ms += x[r * D + i] * x[r * D + i];
            ms /= D;
            for (int i = 0; i < D; i++) want[r * D + i] = x[r * D + i] / sqrt(ms + eps) * w[i];
        }
        kiln_tensor out = kiln_rms_norm(tensor_of(KILN_F64, KILN_SHAPE(R, D), x), KILN_SHAPE(D), tensor_of(KILN_F64, KILN_SHAPE(D), w),
                                        pass ? 1e-3 : NAN);
        if (read_f64(out, y, R * D))
            for (int i = 0; i < R * D; i++) KT_NEAR(y[i], want[i], 1e-12);
    }
    /* over two dims, no weight */
    kiln_tensor two = kiln_rms_norm(tensor_of(KILN_F64, KILN_SHAPE(R, D), x), KILN_SHAPE(R, D), KILN_NONE, 0);
    double ms = 0;
    for (int i = 0; i < R * D; i++) ms += x[i] * x[i];
    if (read_f64(two, y, R * D)) KT_NEAR(y[4], x[4] / sqrt(ms / (R * D)), 1e-12);
    /* the layer runs the functional with its weight (ones at first) */
    kiln_module *m = kiln_rms_norm_new(D, 1e-3, true);
    KT_CHECK(m && strcmp(kiln_module_type(m), "RMSNorm") == 0 && kiln_module_num_parameters(m) == D);
    double ym[R * D];
    if (read_f64(kiln_module_forward(m, tensor_of(KILN_F32, KILN_SHAPE(R, D), x)), ym, R * D) &&
        read_f64(kiln_rms_norm(tensor_of(KILN_F32, KILN_SHAPE(R, D), x), KILN_SHAPE(D), KILN_NONE, 1e-3), y, R * D))
        for (int i = 0; i < R * D; i++) KT_CHECK(ym[i] == y[i]);
    KT_READ_ERROR(kiln_module_forward(m, kiln_ones(KILN_CPU, KILN_F32, KILN_SHAPE(2, 4))), KILN_ERR_SHAPE, "RMSNorm");
    kiln_module_free(m);
    kiln_module *plain = kiln_rms_norm_new(D, NAN, false);
    KT_CHECK(plain && kiln_module_num_parameters(plain) == 0);
    kiln_module_free(plain);
    KT_CHECK(kiln_rms_norm_new(0, 1e-5, true) == NULL); KT_EXPECT_ERROR(KILN_ERR_INVALID_ARGUMENT, "kiln_rms_norm_new", __LINE__);
    KT_CHECK(kiln_rms_norm_new(4, -1, true) == NULL); KT_EXPECT_ERROR(KILN_ERR_INVALID_ARGUMENT, "kiln_rms_norm_new", __LINE__);
    KT_READ_ERROR(kiln_rms_norm(kiln_ones(KILN_CPU, KILN_F32, KILN_SHAPE(2, 4)), KILN_SHAPE(5), KILN_NONE, 1e-5), KILN_ERR_SHAPE,
                  "kiln_rms_norm");
    KT_READ_ERROR(kiln_rms_norm(kiln_ones(KILN_CPU, KILN_F32, KILN_SHAPE(2, 4)), KILN_SHAPE(4), kiln_ones(KILN_CPU, KILN_F32, KILN_SHAPE(2)), 1e-5),
                  KILN_ERR_SHAPE, "kiln_rms_norm");
    KT_READ_ERROR(kiln_rms_norm(kiln_ones(KILN_CPU, KILN_I32, KILN_SHAPE(2, 4)), KILN_SHAPE(4), KILN_NONE, 1e-5), KILN_ERR_DTYPE,
                  "kiln_rms_norm");
    KT_READ_ERROR(kiln_rms_norm(kiln_ones(KILN_CPU, KILN_F32, KILN_SHAPE(2, 4)), KILN_SCALAR_SHAPE, KILN_NONE, 1e-5),
                  KILN_ERR_INVALID_ARGUMENT, "kiln_rms_norm");
    KT_READ_ERROR(kiln_rms_norm(kiln_ones(KILN_CPU, KILN_F32, KILN_SHAPE(2, 4)), KILN_SHAPE(4), KILN_NONE, -1),
                  KILN_ERR_INVALID_ARGUMENT, "kiln_rms_norm");
    KT_MEM_CHECK();
}

static kiln_tensor run_rms(kiln_tensor *in, void *ctx) {
    (void)ctx;
    return kiln_rms_norm(kiln_transpose(in[0], 0, 1), KILN_SHAPE(4), in[1], 1e-3);
}

KT_TEST(rms_norm_gradients) {
    kt_mem_begin();
    GC_CHECK("rms_norm", run_rms, NULL, 2, ((kiln_shape[]){KILN_SHAPE(4, 3), KILN_SHAPE(4)}), 1e-6);
    KT_MEM_CHECK();
}

int main(void) {
    KT_RUN(batch_norm_matches_reference);
    KT_RUN(batch_norm_gradients);
    KT_RUN(batch_norm_bad_input);
    KT_RUN(embedding_values_and_errors);
    KT_RUN(embedding_gradient);
    KT_RUN(group_norm_matches_reference);
    KT_RUN(group_norm_gradients);
    KT_RUN(rms_norm_matches_reference);
    KT_RUN(rms_norm_gradients);
    return kt_finish();
}
