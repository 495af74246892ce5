/* isnan, isinf, isfinite, nan_to_num, atan, atan2, log2, log10 and exp2 against double
 * references: every dtype (integers are never NaN; float math on integers gives f32),
 * transposed / strided / offset / expanded inputs, broadcasting, special values, gradients by
 * finite differences (the class tests have none), and bad input. */
#include <float.h>

#include "op_cases.h"

static double r_isnan(double x) { return isnan(x) != 0; }
static double r_isinf(double x) { return isinf(x) != 0; }
static double r_isfinite(double x) { return isfinite(x) != 0; }

static const oc_unary cases[] = {
    {"kiln_isnan", kiln_isnan, r_isnan, -5, 5, OC_BOOL_OUT},
    {"kiln_isinf", kiln_isinf, r_isinf, -5, 5, OC_BOOL_OUT},
    {"kiln_isfinite", kiln_isfinite, r_isfinite, -5, 5, OC_BOOL_OUT},
    {"kiln_atan", kiln_atan, atan, -20, 20, OC_FLOAT_MATH},
    {"kiln_log2", kiln_log2, log2, 0.001, 1000, OC_FLOAT_MATH},
    {"kiln_log10", kiln_log10, log10, 0.001, 1000, OC_FLOAT_MATH},
    {"kiln_exp2", kiln_exp2, exp2, -30, 30, OC_FLOAT_MATH},
};
#define NCASES ((int)(sizeof cases / sizeof cases[0]))

static const double specials[] = {0.0,   -0.0, INFINITY, -INFINITY, NAN,  1.0,  -1.0, 2.0,   0.5,  1e-30,
                                  -1e-30, 1e30, -1e30,   3e38,      -3e38, 127.5, 128.0, -149.0, -150.5, 1e-45,
                                  2.414213562, 0.41421356, 10.0, 1000.0};
#define NSPECIALS ((int)(sizeof specials / sizeof specials[0]))

KT_TEST(every_op_dtype_and_layout) {
    for (int k = 0; k < NCASES; k++) oc_check_unary(&cases[k], specials, NSPECIALS);
}

/* The class tests on the values that decide them, in the half-precision dtypes too. */
KT_TEST(class_tests_spelled_out) {
    const double v[] = {NAN, INFINITY, -INFINITY, 0.0, -0.0, 1e30, 65504};
    const kiln_dtype dts[] = {KILN_F32, KILN_F64, KILN_F16, KILN_BF16};
    for (int d = 0; d < 4; d++) {
        uint8_t n[7], i[7], f[7];
        KT_CHECK(kiln_into_data(kiln_isnan(ew_tensor(dts[d], KILN_SHAPE(7), v)), n, 7) == KILN_OK);
        KT_CHECK(kiln_into_data(kiln_isinf(ew_tensor(dts[d], KILN_SHAPE(7), v)), i, 7) == KILN_OK);
        KT_CHECK(kiln_into_data(kiln_isfinite(ew_tensor(dts[d], KILN_SHAPE(7), v)), f, 7) == KILN_OK);
        bool f16 = dts[d] == KILN_F16; /* 1e30 overflows to inf in f16 */
        KT_CHECK_MSG(n[0] && !n[1] && !n[2] && !n[3] && !n[5], "isnan %s", kiln_dtype_name(dts[d]));
        KT_CHECK_MSG(!i[0] && i[1] && i[2] && !i[3] && i[5] == f16 && !i[6], "isinf %s", kiln_dtype_name(dts[d]));
        KT_CHECK_MSG(!f[0] && !f[1] && !f[2] && f[3] && f[4] && f[5] == !f16 && f[6], "isfinite %s", kiln_dtype_name(dts[d]));
    }
    /* integers: never NaN or infinite, whatever the value */
    int32_t iv[3] = {INT32_MIN, 0, INT32_MAX};
    uint8_t out[3];
    KT_CHECK(kiln_into_data(kiln_isfinite(kiln_from_data(KILN_CPU, KILN_I32, KILN_SHAPE(3), iv)), out, 3) == KILN_OK);
    KT_CHECK(out[0] && out[1] && out[2]);
    KT_CHECK(kiln_into_data(kiln_isnan(kiln_from_data(KILN_CPU, KILN_I32, KILN_SHAPE(3), iv)), out, 3) == KILN_OK);
    KT_CHECK(!out[0] && !out[1] && !out[2]);
}

/* ---- nan_to_num -------------------------------------------------------------------------- */

KT_TEST(nan_to_num_defaults_and_values) {
    ew_mark m = ew_mark_now();
    const double v[] = {NAN, INFINITY, -INFINITY, 1.5, -0.0, -2.0};
    const kiln_dtype dts[] = {KILN_F32, KILN_F64, KILN_F16, KILN_BF16};
    const double max[] = {FLT_MAX, DBL_MAX, 65504.0, 3.3895313892515355e38};
    for (int d = 0; d < 4; d++) {
        double *got = ew_read(kiln_nan_to_num(ew_tensor(dts[d], KILN_SHAPE(6), v), 0.0, NAN, NAN), dts[d], 6);
        if (got) {
            double want[6] = {0, max[d], -max[d], ew_round(dts[d], 1.5), -0.0, -2.0};
            EW_EXPECT_CLOSE(kiln_dtype_name(dts[d]), got, want, 6, 0, 0);
            KT_CHECK(signbit(got[4]));
        }
        free(got);
        got = ew_read(kiln_nan_to_num(ew_tensor(dts[d], KILN_SHAPE(6), v), 7.0, 100.0, -50.0), dts[d], 6);
        if (got) {
            double want[6] = {7, 100, -50, ew_round(dts[d], 1.5), 0, -2};
            EW_EXPECT_CLOSE("nan_to_num values", got, want, 6, 0, 0);
        }
        free(got);
    }
    /* transposed input, and integers unchanged */
    double t[6] = {NAN, 1, 2, INFINITY, 4, -INFINITY};
    double *got = ew_read(kiln_nan_to_num(ew_matrix(KILN_F32, 2, 3, t, EW_TRANSPOSED), -1, 9, -9), KILN_F32, 6);
    if (got) {
        double want[6] = {-1, 1, 2, 9, 4, -9};
        EW_EXPECT_CLOSE("nan_to_num transposed", got, want, 6, 0, 0);
    }
    free(got);
    int64_t iv[2] = {INT64_MAX, -3};
    int64_t io[2];
    KT_CHECK(kiln_into_data(kiln_nan_to_num(kiln_from_data(KILN_CPU, KILN_I64, KILN_SHAPE(2), iv), 0, NAN, NAN), io,
                            sizeof io) == KILN_OK);
    KT_CHECK(io[0] == INT64_MAX && io[1] == -3);
    EW_NO_LEAKS(m);
}

/* ---- atan2 ------------------------------------------------------------------------------- */

static double r_atan2(const void *ctx, double y, double x) {
    (void)ctx;
    return atan2(y, x);
}

KT_TEST(atan2_dtypes_layouts_broadcast_and_quadrants) {
    ew_mark m = ew_mark_now();
    const kiln_dtype dts[] = {KILN_F32, KILN_F64, KILN_F16, KILN_BF16};
    for (int d = 0; d < 4; d++)
        for (int l = 0; l < EW_NLAYOUTS; l++) {
            ew_operand a = {dts[d], KILN_SHAPE(6, 5), (ew_layout)l, -5, 5, 0};
            ew_operand b = {dts[d], KILN_SHAPE(5), EW_DENSE, -5, 5, 0};
            ew_check_binary("atan2", kiln_atan2, a, b, dts[d], r_atan2, NULL, dts[d] == KILN_F64 ? 1e-15 : 2 * ew_rtol(dts[d]));
        }
    /* integers compute in f32, like the other float math */
    ew_operand ai = {KILN_I32, KILN_SHAPE(4, 4), EW_DENSE, -5, 5, 0};
    ew_check_binary("atan2 i32", kiln_atan2, ai, ai, KILN_F32, r_atan2, NULL, 2e-7);
    const double y[] = {0.0, -0.0, 0.0, -0.0, 1, -1, INFINITY, INFINITY, NAN, 1};
    const double x[] = {1, 1, -1, -1, 0, 0, INFINITY, -INFINITY, 1, NAN};
    enum { N = sizeof y / sizeof y[0] };
    double *got = ew_read(kiln_atan2(ew_tensor(KILN_F64, KILN_SHAPE(N), y), ew_tensor(KILN_F64, KILN_SHAPE(N), x)), KILN_F64, N);
    if (got) {
        double want[N];
        for (int i = 0; i < N; i++) want[i] = atan2(y[i], x[i]);
        EW_EXPECT_CLOSE("atan2 quadrants", got, want, N, 0, 0);
        KT_CHECK(signbit(got[1]) && got[3] < 0);
    }
    free(got);
    EW_NO_LEAKS(m);
}

/* ---- gradients ----------------------------------------------------------------------------- */

static kiln_tensor g_atan2(kiln_tensor *in, void *ctx) {
    (void)ctx;
    return kiln_atan2(kiln_transpose(in[0], 0, 1), kiln_add_scalar(in[1], 0.2));
}
static kiln_tensor g_nan_to_num(kiln_tensor *in, void *ctx) {
    (void)ctx; /* log of a sign-changing input: some NaNs, replaced, with zero gradient there */
    return kiln_nan_to_num(kiln_log(in[0]), 0.0, NAN, NAN);
}

KT_TEST(gradients) {
    oc_gradcheck("atan", kiln_atan, 3.0, 0.0);
    oc_gradcheck("log2", kiln_log2, 1.0, 1.5);
    oc_gradcheck("log10", kiln_log10, 1.0, 1.5);
    oc_gradcheck("exp2", kiln_exp2, 3.0, 0.0);
    kiln_shape s2[2] = {KILN_SHAPE(4, 3), KILN_SHAPE(4)};
    GC_CHECK("atan2", g_atan2, NULL, 2, s2, 1e-6);
    kiln_shape s1[1] = {KILN_SHAPE(8)};
    GC_CHECK("nan_to_num", g_nan_to_num, NULL, 1, s1, 1e-6);
    /* the class tests record nothing: a tracked input gives an untracked bool */
    kiln_tensor x = kiln_ones(KILN_CPU, KILN_F32, KILN_SHAPE(2));
    kiln_require_grad(x);
    kiln_tensor b = kiln_isnan(kiln_ref(x));
    KT_CHECK(kiln_tensor_dtype(b) == KILN_BOOL && !kiln_requires_grad(b));
    kiln_release(b);
    kiln_release(x);
}

KT_TEST(bad_input) {
    for (int k = 0; k < NCASES; k++) oc_check_bad_input(&cases[k]);
    ew_mark m = ew_mark_now();
    int line;
    kiln_tensor r = kiln_atan2(kiln_ones(KILN_CPU, KILN_F32, KILN_SHAPE(2, 3)), kiln_ones(KILN_CPU, KILN_F32, KILN_SHAPE(2))); line = __LINE__;
    EW_EXPECT_ERROR(r, KILN_ERR_SHAPE, "kiln_atan2", line);
    r = kiln_nan_to_num(KILN_NONE, 0, NAN, NAN); line = __LINE__;
    EW_EXPECT_ERROR(r, KILN_ERR_NULL, "kiln_nan_to_num", line);
    kiln_tensor bad = EW_POISONED(); line = __LINE__;
    EW_EXPECT_ERROR(kiln_nan_to_num(bad, 0, NAN, NAN), KILN_ERR_SHAPE, "kiln_reshape", line);
    kiln_tensor stale = ew_stale();
    r = kiln_atan2(stale, kiln_ones(KILN_CPU, KILN_F32, KILN_SHAPE(2))); line = __LINE__;
    EW_EXPECT_ERROR(r, KILN_ERR_STALE_HANDLE, "kiln_neg", line);
    kiln_clear_error();
    EW_NO_LEAKS(m);
}

int main(void) {
    KT_RUN(every_op_dtype_and_layout);
    KT_RUN(class_tests_spelled_out);
    KT_RUN(nan_to_num_defaults_and_values);
    KT_RUN(atan2_dtypes_layouts_broadcast_and_quadrants);
    KT_RUN(gradients);
    KT_RUN(bad_input);
    return kt_finish();
}
