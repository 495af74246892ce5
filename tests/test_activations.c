/* leaky_relu, elu, selu, log_sigmoid, hardtanh, hardswish, mish and softsign against double
 * references (torch.nn.functional's definitions): the float dtypes (integers are refused, as
 * PyTorch refuses them), transposed / strided / offset / expanded inputs, special values,
 * in-place reuse, gradients by finite differences, and bad input. */
#include "op_cases.h"

#define SELU_ALPHA 1.6732632423543772848
#define SELU_SCALE 1.0507009873554804934

static double r_leaky(double x) { return x < 0 ? 0.01 * x : x; }
static double r_elu(double x) { return x > 0 ? x : expm1(x); }
static double r_selu(double x) { return SELU_SCALE * (x > 0 ? x : SELU_ALPHA * expm1(x)); }
static double r_log_sigmoid(double x) { return -(fmax(-x, 0.0) + log1p(exp(-fabs(x)))); }
static double r_hardtanh(double x) { return x < -1 ? -1 : x > 1 ? 1 : x; }
static double r_hardswish(double x) { return x * (fmin(fmax(x + 3, 0.0), 6.0) / 6); }
static double r_mish(double x) {
    if (x == -INFINITY) return -0.0;
    if (x > 30) return x;
    return x * tanh(log1p(exp(x)));
}
static double r_softsign(double x) { return isinf(x) ? copysign(1.0, x) : x / (1 + fabs(x)); }

/* The torch defaults, behind the one-argument signature the table takes. The parenthesised
 * names skip the call-site macros, so errors name the caller's line, not these. */
static kiln_tensor leaky_default(kiln_tensor x) { return (kiln_leaky_relu)(x, 0.01); }
static kiln_tensor elu_default(kiln_tensor x) { return (kiln_elu)(x, 1.0); }
static kiln_tensor hardtanh_default(kiln_tensor x) { return (kiln_hardtanh)(x, -1.0, 1.0); }

static const oc_unary cases[] = {
    {"kiln_leaky_relu", leaky_default, r_leaky, -10, 10, OC_FLOAT_ONLY},
    {"kiln_elu", elu_default, r_elu, -10, 10, OC_FLOAT_ONLY},
    {"kiln_selu", kiln_selu, r_selu, -10, 10, OC_FLOAT_ONLY},
    {"kiln_log_sigmoid", kiln_log_sigmoid, r_log_sigmoid, -30, 30, OC_FLOAT_ONLY},
    {"kiln_hardtanh", hardtanh_default, r_hardtanh, -3, 3, OC_FLOAT_ONLY},
    {"kiln_hardswish", kiln_hardswish, r_hardswish, -6, 6, OC_FLOAT_ONLY},
    {"kiln_mish", kiln_mish, r_mish, -30, 30, OC_FLOAT_ONLY},
    {"kiln_softsign", kiln_softsign, r_softsign, -50, 50, OC_FLOAT_ONLY},
};
#define NCASES ((int)(sizeof cases / sizeof cases[0]))

static const double specials[] = {0.0,  -0.0, INFINITY, -INFINITY, NAN,   1.0,  -1.0, -3.0, 3.0,  -3.0000002,
                                  2.9999998, 1e-30, -1e-30, 20.5, -20.5, 88.8, -104, -150, 1e30, -1e30,
                                  3e38, -3e38, 0.5, -0.5};
#define NSPECIALS ((int)(sizeof specials / sizeof specials[0]))

KT_TEST(every_op_dtype_and_layout) {
    for (int k = 0; k < NCASES; k++) oc_check_unary(&cases[k], specials, NSPECIALS);
}

/* Parameters other than the defaults. */
KT_TEST(parameters) {
    ew_mark m = ew_mark_now();
    const double v[] = {-4, -1, -0.25, 0, 0.5, 3, -INFINITY, NAN};
    enum { N = sizeof v / sizeof v[0] };
    for (int d = 0; d < 2; d++) {
        kiln_dtype dt = d ? KILN_F64 : KILN_F32;
        double rtol = d ? 1e-15 : 4e-7;
        double want[N];
        double *got = ew_read(kiln_leaky_relu(ew_tensor(dt, KILN_SHAPE(N), v), 0.2), dt, N);
        for (int i = 0; i < N; i++) want[i] = v[i] < 0 ? 0.2 * v[i] : v[i];
        if (got) EW_EXPECT_CLOSE("leaky_relu 0.2", got, want, N, rtol, 0);
        free(got);
        got = ew_read(kiln_elu(ew_tensor(dt, KILN_SHAPE(N), v), 2.5), dt, N);
        for (int i = 0; i < N; i++) want[i] = v[i] > 0 ? v[i] : 2.5 * expm1(v[i]);
        if (got) EW_EXPECT_CLOSE("elu 2.5", got, want, N, rtol, 1e-7);
        free(got);
        got = ew_read(kiln_hardtanh(ew_tensor(dt, KILN_SHAPE(N), v), -0.5, 2.0), dt, N);
        for (int i = 0; i < N; i++) want[i] = isnan(v[i]) ? v[i] : fmin(fmax(v[i], -0.5), 2.0);
        if (got) EW_EXPECT_CLOSE("hardtanh -0.5 2", got, want, N, 0, 0);
        free(got);
    }
    EW_NO_LEAKS(m);
}

/* ---- gradients ----------------------------------------------------------------------------- */

static kiln_tensor leaky_02(kiln_tensor x) { return kiln_leaky_relu(x, 0.2); }
static kiln_tensor elu_07(kiln_tensor x) { return kiln_elu(x, 0.7); }
static kiln_tensor hardtanh_narrow(kiln_tensor x) { return kiln_hardtanh(x, -0.8, 1.3); }

KT_TEST(gradients) {
    /* inputs a x + b over [-1, 1]: across each kink (kept away from it by the random draw) */
    oc_gradcheck("leaky_relu", leaky_02, 2.0, 0.0);
    oc_gradcheck("elu", elu_07, 3.0, 0.0);
    oc_gradcheck("selu", kiln_selu, 3.0, 0.0);
    oc_gradcheck("log_sigmoid", kiln_log_sigmoid, 6.0, 0.0);
    oc_gradcheck("hardtanh", hardtanh_narrow, 2.0, 0.0);
    oc_gradcheck("hardswish", kiln_hardswish, 5.0, 0.0);
    oc_gradcheck("mish", kiln_mish, 5.0, 0.0);
    oc_gradcheck("softsign", kiln_softsign, 4.0, 0.0);
    /* hardtanh passes no gradient at its bounds (PyTorch's), unlike clamp */
    double v[3] = {-1, 0, 1};
    kiln_tensor x = kiln_from_data(KILN_CPU, KILN_F64, KILN_SHAPE(3), v);
    kiln_require_grad(x);
    kiln_grads *g = NULL;
    KT_CHECK(kiln_backward(kiln_sum(kiln_hardtanh(kiln_ref(x), -1, 1)), &g) == KILN_OK);
    double dx[3] = {9, 9, 9};
    KT_CHECK(kiln_into_data(kiln_grad(g, x), dx, sizeof dx) == KILN_OK);
    KT_CHECK(dx[0] == 0 && dx[1] == 1 && dx[2] == 0);
    kiln_grads_free(g);
    kiln_release(x);
}

KT_TEST(bad_input) {
    for (int k = 0; k < NCASES; k++) oc_check_bad_input(&cases[k]);
    ew_mark m = ew_mark_now();
    int line;
    kiln_tensor r = kiln_hardtanh(kiln_ones(KILN_CPU, KILN_F32, KILN_SHAPE(2)), 1, -1); line = __LINE__;
    EW_EXPECT_ERROR(r, KILN_ERR_INVALID_ARGUMENT, "kiln_hardtanh", line);
    r = kiln_hardtanh(kiln_ones(KILN_CPU, KILN_F32, KILN_SHAPE(2)), NAN, 1); line = __LINE__;
    EW_EXPECT_ERROR(r, KILN_ERR_INVALID_ARGUMENT, "kiln_hardtanh", line);
    r = kiln_elu(kiln_ones(KILN_CPU, KILN_I64, KILN_SHAPE(2)), 1.0); line = __LINE__;
    EW_EXPECT_ERROR(r, KILN_ERR_DTYPE, "kiln_elu", line);
    kiln_clear_error();
    EW_NO_LEAKS(m);
}

int main(void) {
    KT_RUN(every_op_dtype_and_layout);
    KT_RUN(parameters);
    KT_RUN(gradients);
    KT_RUN(bad_input);
    return kt_finish();
}
