/* floor, ceil, round (half to even), trunc, fmod, remainder and lerp against double
 * references with PyTorch's edge cases (NaN, +-inf, -0, ties, negative divisors): every
 * dtype, transposed / strided / offset / expanded inputs, broadcasting, in-place reuse,
 * gradients by finite differences, integer division by zero, and bad input. */
#include "op_cases.h"

static double r_round(double x) { return nearbyint(x); } /* the default mode: ties to even */

static const oc_unary rounding[] = {
    {"kiln_floor", kiln_floor, floor, -50, 50, OC_KEEP},
    {"kiln_ceil", kiln_ceil, ceil, -50, 50, OC_KEEP},
    {"kiln_round", kiln_round, r_round, -50, 50, OC_KEEP},
    {"kiln_trunc", kiln_trunc, trunc, -50, 50, OC_KEEP},
};
#define NROUNDING ((int)(sizeof rounding / sizeof rounding[0]))

static const double specials[] = {0.0,  -0.0, INFINITY, -INFINITY, NAN,     0.5,    -0.5, 1.5,  -1.5, 2.5,
                                  -2.5, 0.49999997, -0.49999997, 0.7, -0.7, 1e-30, -1e-30, 8388607.5, -8388607.5,
                                  8388609.0, 1e30, -1e30, 3e38, 1.0, -1.0, 2.0, 0.3, -0.3};
#define NSPECIALS ((int)(sizeof specials / sizeof specials[0]))

KT_TEST(rounding_every_dtype_and_layout) {
    for (int k = 0; k < NROUNDING; k++) oc_check_unary(&rounding[k], specials, NSPECIALS);
}

KT_TEST(rounding_edge_cases_spelled_out) {
    float in[] = {2.5f, 3.5f, -2.5f, -0.5f, 0.5f, -0.7f, 1.5f};
    float out[7];
    KT_CHECK(kiln_into_data(kiln_round(kiln_from_data(KILN_CPU, KILN_F32, KILN_SHAPE(7), in)), out, sizeof out) == KILN_OK);
    KT_CHECK(out[0] == 2 && out[1] == 4 && out[2] == -2 && out[3] == 0 && signbit(out[3]) && out[4] == 0 &&
             !signbit(out[4]) && out[5] == -1 && out[6] == 2);
    KT_CHECK(kiln_into_data(kiln_ceil(kiln_from_data(KILN_CPU, KILN_F32, KILN_SHAPE(7), in)), out, sizeof out) == KILN_OK);
    KT_CHECK(out[3] == 0 && signbit(out[3]) && out[5] == 0 && signbit(out[5]) && out[0] == 3);
    KT_CHECK(kiln_into_data(kiln_trunc(kiln_from_data(KILN_CPU, KILN_F32, KILN_SHAPE(7), in)), out, sizeof out) == KILN_OK);
    KT_CHECK(out[2] == -2 && out[5] == 0 && signbit(out[5]));
    /* integers come back unchanged, even past 2^53 */
    int64_t big[] = {INT64_MAX, INT64_MIN, -7};
    int64_t got[3];
    KT_CHECK(kiln_into_data(kiln_floor(kiln_from_data(KILN_CPU, KILN_I64, KILN_SHAPE(3), big)), got, sizeof got) == KILN_OK);
    KT_CHECK(got[0] == INT64_MAX && got[1] == INT64_MIN && got[2] == -7);
    /* under KILN_ISA=scalar the libm path runs; both must agree with the references above */
    printf("  vmath ISA: %s\n", getenv("KILN_ISA") ? getenv("KILN_ISA") : "automatic");
}

KT_TEST(rounding_gradients_are_zero) {
    for (int k = 0; k < NROUNDING; k++) oc_gradcheck(rounding[k].name, rounding[k].op, 3.0, 0.25);
    /* PyTorch's: a zero tensor, not no gradient */
    kiln_tensor x = kiln_ones(KILN_CPU, KILN_F32, KILN_SHAPE(4));
    kiln_require_grad(x);
    kiln_grads *g = NULL;
    KT_CHECK(kiln_backward(kiln_sum(kiln_floor(kiln_mul_scalar(kiln_ref(x), 2.5))), &g) == KILN_OK);
    float dx[4] = {1, 1, 1, 1};
    kiln_tensor gx = kiln_grad(g, x);
    KT_CHECK(gx.id != 0 && kiln_into_data(gx, dx, sizeof dx) == KILN_OK);
    KT_CHECK(dx[0] == 0 && dx[1] == 0 && dx[2] == 0 && dx[3] == 0);
    kiln_grads_free(g);
    kiln_release(x);
}

KT_TEST(rounding_bad_input) {
    for (int k = 0; k < NROUNDING; k++) oc_check_bad_input(&rounding[k]);
}

/* ---- fmod and remainder ----------------------------------------------------------------- */

static double r_fmod(const void *ctx, double x, double y) {
    (void)ctx;
    return fmod(x, y);
}
/* Python's %: the sign of the divisor (torch.remainder). */
static double r_remainder(const void *ctx, double x, double y) {
    (void)ctx;
    double r = fmod(x, y);
    return r != 0 && ((r < 0) != (y < 0)) ? r + y : r;
}

/* Divisors drawn away from zero: a float step of 0.25 makes exact multiples (r == 0) common. */
KT_TEST(fmod_remainder_every_dtype_layout_and_broadcast) {
    ew_mark m = ew_mark_now();
    const kiln_dtype dts[] = {KILN_F32, KILN_F64, KILN_I32, KILN_I64, KILN_F16, KILN_BF16};
    for (int d = 0; d < 6; d++) {
        kiln_dtype dt = dts[d];
        double rtol = ew_is_float(dt) ? ew_rtol(dt) * 4 : 0;
        for (int l = 0; l < EW_NLAYOUTS; l++) {
            ew_operand a = {dt, KILN_SHAPE(6, 9), (ew_layout)l, -20, 20, 0.25};
            ew_operand b = {dt, KILN_SHAPE(6, 9), EW_DENSE, 1, 7, 0.25};
            ew_operand bn = {dt, KILN_SHAPE(9), EW_DENSE, -7, -1, 0.25}; /* negative, broadcast */
            ew_check_binary("fmod", kiln_fmod, a, b, dt, r_fmod, NULL, rtol);
            ew_check_binary("fmod", kiln_fmod, a, bn, dt, r_fmod, NULL, rtol);
            ew_check_binary("remainder", kiln_remainder, a, b, dt, r_remainder, NULL, rtol);
            ew_check_binary("remainder", kiln_remainder, a, bn, dt, r_remainder, NULL, rtol);
        }
    }
    /* mixed dtypes promote: i32 % f64 is f64 */
    ew_operand ai = {KILN_I32, KILN_SHAPE(5, 1), EW_DENSE, -30, 30, 0};
    ew_operand bf = {KILN_F64, KILN_SHAPE(1, 4), EW_DENSE, 1.5, 4, 0};
    ew_check_binary("remainder mixed", kiln_remainder, ai, bf, KILN_F64, r_remainder, NULL, 1e-15);
    EW_NO_LEAKS(m);
}

KT_TEST(fmod_remainder_edge_cases) {
    const double x[] = {5, -5, 5, -5, 0.0, -0.0, INFINITY, 5, -5, NAN, 5, 7.5, -7.5};
    const double y[] = {3, 3, -3, -3, 2, 2, 2, INFINITY, INFINITY, 2, 0, 2.5, -2.5};
    enum { N = sizeof x / sizeof x[0] };
    for (int d = 0; d < 2; d++) {
        kiln_dtype dt = d ? KILN_F64 : KILN_F32;
        for (int op = 0; op < 2; op++) {
            kiln_tensor a = ew_tensor(dt, KILN_SHAPE(N), x), b = ew_tensor(dt, KILN_SHAPE(N), y);
            double *got = ew_read(op ? kiln_remainder(a, b) : kiln_fmod(a, b), dt, N);
            if (!got) continue;
            double want[N];
            for (int i = 0; i < N; i++) want[i] = op ? r_remainder(NULL, x[i], y[i]) : r_fmod(NULL, x[i], y[i]);
            EW_EXPECT_CLOSE(op ? "remainder edges" : "fmod edges", got, want, N, 0, 0);
            KT_CHECK(signbit(got[5]) && (op || signbit(got[1]))); /* fmod keeps a's sign, -0 too */
            free(got);
        }
    }
    /* integers: the same signs; y == -1 with INT_MIN does not trap */
    int32_t xi[] = {7, -7, 7, -7, INT32_MIN, 0};
    int32_t yi[] = {3, 3, -3, -3, -1, 5};
    int32_t oi[6];
    KT_CHECK(kiln_into_data(kiln_remainder(kiln_from_data(KILN_CPU, KILN_I32, KILN_SHAPE(6), xi),
                                           kiln_from_data(KILN_CPU, KILN_I32, KILN_SHAPE(6), yi)),
                            oi, sizeof oi) == KILN_OK);
    KT_CHECK(oi[0] == 1 && oi[1] == 2 && oi[2] == -2 && oi[3] == -1 && oi[4] == 0 && oi[5] == 0);
    KT_CHECK(kiln_into_data(kiln_fmod(kiln_from_data(KILN_CPU, KILN_I32, KILN_SHAPE(6), xi),
                                      kiln_from_data(KILN_CPU, KILN_I32, KILN_SHAPE(6), yi)),
                            oi, sizeof oi) == KILN_OK);
    KT_CHECK(oi[0] == 1 && oi[1] == -1 && oi[2] == 1 && oi[3] == -1 && oi[4] == 0);
    /* scalar divisors */
    double v[4] = {-3.5, 3.5, -1, 4};
    double *got = ew_read(kiln_remainder_scalar(ew_tensor(KILN_F64, KILN_SHAPE(4), v), 2.0), KILN_F64, 4);
    if (got) KT_CHECK(got[0] == 0.5 && got[1] == 1.5 && got[2] == 1 && got[3] == 0);
    free(got);
    got = ew_read(kiln_fmod_scalar(ew_tensor(KILN_F64, KILN_SHAPE(4), v), -2.0), KILN_F64, 4);
    if (got) KT_CHECK(got[0] == -1.5 && got[1] == 1.5 && got[2] == -1 && got[3] == 0);
    free(got);
}

/* An integer zero divisor is found when the kernel runs: the read reports it, naming the op and
 * the line of the call (asynchronously: the call itself returned at once). */
KT_TEST(integer_division_by_zero_fails) {
    int64_t xs[] = {1, 2, 3}, ys[] = {1, 0, 1}, out[3];
    kiln_tensor a = kiln_from_data(KILN_CPU, KILN_I64, KILN_SHAPE(3), xs);
    kiln_tensor b = kiln_from_data(KILN_CPU, KILN_I64, KILN_SHAPE(3), ys);
    int line = __LINE__ + 1;
    kiln_tensor r = kiln_fmod(a, b);
    KT_CHECK(kiln_into_data(r, out, sizeof out) == KILN_ERR_INVALID_ARGUMENT);
    KT_EXPECT_ERROR(KILN_ERR_INVALID_ARGUMENT, "kiln_fmod", line);
    KT_CHECK(strstr(kiln_last_error(), "division by zero") != NULL);
    a = kiln_from_data(KILN_CPU, KILN_I64, KILN_SHAPE(3), xs);
    line = __LINE__ + 1;
    r = kiln_remainder_scalar(a, 0);
    KT_CHECK(kiln_into_data(r, out, sizeof out) == KILN_ERR_INVALID_ARGUMENT);
    KT_EXPECT_ERROR(KILN_ERR_INVALID_ARGUMENT, "kiln_remainder_scalar", line);
    kiln_clear_error();
    KT_CHECK(kiln_sync() == KILN_OK);
}

static kiln_tensor g_fmod(kiln_tensor *in, void *ctx) {
    (void)ctx; /* b kept away from 0 and from making a/b whole */
    return kiln_fmod(kiln_mul_scalar(in[0], 5.0), kiln_add_scalar(kiln_transpose(in[1], 0, 1), 2.37));
}
static kiln_tensor g_remainder(kiln_tensor *in, void *ctx) {
    (void)ctx; /* a broadcast divisor, negative */
    return kiln_remainder(kiln_mul_scalar(in[0], 5.0), kiln_add_scalar(in[1], -2.37));
}
static kiln_tensor g_fmod_scalar(kiln_tensor *in, void *ctx) {
    (void)ctx;
    return kiln_remainder_scalar(kiln_mul_scalar(in[0], 4.0), 1.3);
}

KT_TEST(fmod_remainder_gradients) {
    kiln_shape s2[2] = {KILN_SHAPE(3, 4), KILN_SHAPE(4, 3)};
    GC_CHECK("fmod", g_fmod, NULL, 2, s2, 1e-6);
    kiln_shape sb[2] = {KILN_SHAPE(3, 4), KILN_SHAPE(4)};
    GC_CHECK("remainder broadcast", g_remainder, NULL, 2, sb, 1e-6);
    kiln_shape s1[1] = {KILN_SHAPE(5)};
    GC_CHECK("remainder_scalar", g_fmod_scalar, NULL, 1, s1, 1e-6);
}

/* ---- lerp ------------------------------------------------------------------------------- */

static double r_lerp(double a, double b, double w) { return w < 0.5 ? a + w * (b - a) : b - (b - a) * (1 - w); }

KT_TEST(lerp_values_dtypes_layouts_broadcast) {
    ew_mark m = ew_mark_now();
    enum { R = 5, C = 6 };
    const kiln_dtype dts[] = {KILN_F32, KILN_F64, KILN_F16, KILN_BF16};
    for (int d = 0; d < 4; d++) {
        kiln_dtype dt = dts[d];
        for (int l = 0; l < EW_NLAYOUTS; l++) {
            double a[R * C], b[C], w[R * C];
            ew_values(a, R * C, dt, -10, 10);
            ew_values(b, C, dt, -10, 10);
            ew_values(w, R * C, dt, -0.5, 1.5);
            kiln_tensor ta = ew_matrix(dt, R, C, a, (ew_layout)l); /* may rewrite a (expanded) */
            kiln_tensor tw = ew_matrix(dt, R, C, w, (ew_layout)((l + 1) % EW_NLAYOUTS));
            kiln_tensor y = kiln_lerp(ta, ew_tensor(dt, KILN_SHAPE(C), b), tw);
            double *got = ew_read(y, dt, R * C);
            if (!got) continue;
            double want[R * C];
            for (int i = 0; i < R * C; i++) want[i] = ew_round(dt, r_lerp(a[i], b[i % C], w[i]));
            char label[64];
            snprintf(label, sizeof label, "lerp %s %s", kiln_dtype_name(dt), ew_layout_names[l]);
            double rtol, atol;
            oc_tolerance(dt, &rtol, &atol);
            EW_EXPECT_CLOSE(label, got, want, R * C, rtol, 20 * atol);
            free(got);
        }
    }
    /* scalar weights, exact at both ends, and NaN / inf carried */
    double a[4] = {1, -2, NAN, 0}, b[4] = {3, 5, 1, INFINITY};
    for (int k = 0; k < 3; k++) {
        double wt = k == 0 ? 0.0 : k == 1 ? 1.0 : 0.25;
        double *got = ew_read(kiln_lerp_scalar(ew_tensor(KILN_F64, KILN_SHAPE(4), a), ew_tensor(KILN_F64, KILN_SHAPE(4), b), wt),
                              KILN_F64, 4);
        if (!got) continue;
        double want[4];
        for (int i = 0; i < 4; i++) want[i] = r_lerp(a[i], b[i], wt);
        EW_EXPECT_CLOSE("lerp_scalar", got, want, 4, 1e-15, 0);
        KT_CHECK(k != 1 || (got[0] == 3 && got[1] == 5));
        free(got);
    }
    EW_NO_LEAKS(m);
}

static kiln_tensor g_lerp(kiln_tensor *in, void *ctx) {
    (void)ctx;
    return kiln_lerp(in[0], kiln_transpose(in[1], 0, 1), kiln_add_scalar(in[2], 0.5));
}
static kiln_tensor g_lerp_scalar(kiln_tensor *in, void *ctx) {
    (void)ctx;
    return kiln_lerp_scalar(in[0], in[1], 0.3);
}

KT_TEST(lerp_gradients) {
    kiln_shape s3[3] = {KILN_SHAPE(3, 4), KILN_SHAPE(4, 3), KILN_SHAPE(4)};
    GC_CHECK("lerp", g_lerp, NULL, 3, s3, 1e-6);
    kiln_shape s2[2] = {KILN_SHAPE(2, 3), KILN_SHAPE(3)};
    GC_CHECK("lerp_scalar", g_lerp_scalar, NULL, 2, s2, 1e-6);
}

KT_TEST(binary_bad_input) {
    ew_mark m = ew_mark_now();
    int line;
    kiln_tensor r = kiln_fmod(kiln_ones(KILN_CPU, KILN_F32, KILN_SHAPE(2, 3)), kiln_ones(KILN_CPU, KILN_F32, KILN_SHAPE(3, 2))); line = __LINE__;
    EW_EXPECT_ERROR(r, KILN_ERR_SHAPE, "kiln_fmod", line);
    r = kiln_remainder(KILN_NONE, kiln_ones(KILN_CPU, KILN_F32, KILN_SHAPE(2))); line = __LINE__;
    EW_EXPECT_ERROR(r, KILN_ERR_NULL, "kiln_remainder", line);
    kiln_tensor stale = ew_stale();
    r = kiln_remainder(kiln_ones(KILN_CPU, KILN_F32, KILN_SHAPE(2)), stale); line = __LINE__;
    EW_EXPECT_ERROR(r, KILN_ERR_STALE_HANDLE, "kiln_neg", line);
    kiln_tensor bad = EW_POISONED(); line = __LINE__;
    EW_EXPECT_ERROR(kiln_fmod(kiln_ones(KILN_CPU, KILN_F32, KILN_SHAPE(3)), bad), KILN_ERR_SHAPE, "kiln_reshape", line);
    kiln_tensor i1 = kiln_ones(KILN_CPU, KILN_I32, KILN_SHAPE(2)), i2 = kiln_ones(KILN_CPU, KILN_I32, KILN_SHAPE(2));
    r = kiln_lerp(i1, i2, kiln_ones(KILN_CPU, KILN_I32, KILN_SHAPE(2))); line = __LINE__;
    EW_EXPECT_ERROR(r, KILN_ERR_DTYPE, "kiln_lerp", line);
    r = kiln_lerp_scalar(kiln_ones(KILN_CPU, KILN_F32, KILN_SHAPE(2)), kiln_ones(KILN_CPU, KILN_F32, KILN_SHAPE(3)), 0.5); line = __LINE__;
    EW_EXPECT_ERROR(r, KILN_ERR_SHAPE, "kiln_lerp_scalar", line);
    r = kiln_lerp(kiln_ones(KILN_CPU, KILN_F32, KILN_SHAPE(2)), kiln_ones(KILN_CPU, KILN_F32, KILN_SHAPE(2)), KILN_NONE); line = __LINE__;
    EW_EXPECT_ERROR(r, KILN_ERR_NULL, "kiln_lerp", line);
    bad = EW_POISONED(); line = __LINE__;
    EW_EXPECT_ERROR(kiln_lerp(bad, kiln_ones(KILN_CPU, KILN_F32, KILN_SHAPE(3)), kiln_ones(KILN_CPU, KILN_F32, KILN_SHAPE(3))),
                    KILN_ERR_SHAPE, "kiln_reshape", line);
    r = kiln_floor(kiln_ones(KILN_CPU, KILN_BOOL, KILN_SHAPE(2))); line = __LINE__;
    EW_EXPECT_ERROR(r, KILN_ERR_DTYPE, "kiln_floor", line);
    kiln_clear_error();
    EW_NO_LEAKS(m);
}

int main(void) {
    KT_RUN(rounding_every_dtype_and_layout);
    KT_RUN(rounding_edge_cases_spelled_out);
    KT_RUN(rounding_gradients_are_zero);
    KT_RUN(rounding_bad_input);
    KT_RUN(fmod_remainder_every_dtype_layout_and_broadcast);
    KT_RUN(fmod_remainder_edge_cases);
    KT_RUN(integer_division_by_zero_fails);
    KT_RUN(fmod_remainder_gradients);
    KT_RUN(lerp_values_dtypes_layouts_broadcast);
    KT_RUN(lerp_gradients);
    KT_RUN(binary_bad_input);
    return kt_finish();
}
