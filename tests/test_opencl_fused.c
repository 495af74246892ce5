/* Fused reductions on the OpenCL device: softmax and log_softmax composed from ops (max, sub,
 * exp, sum, div; logsumexp; log of a sum), mean and min groups with a per-row epilogue and a
 * per-row input, over odd row lengths, rows of 1 and rows holding NaN and infinities. Each is
 * run on the device with fusion on (the fusion stats show the reduction joined its group) and
 * off, and against the CPU, within a few ulps (the fused kernel sums a row in another order,
 * in double), in both forms of the fused row kernel (KILN_OPENCL_ROWS: a work-group per row,
 * or one float16 loop per row, the default on a CPU device). Skipped (exit 77) without an
 * OpenCL device. */
#include <kiln.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>

#include "kiln_test.h"
#if KILN_HAVE_OPENCL
#include "engine/fusion.h"
#define DEV KILN_OPENCL

#include "opencl_compare.h"

/* Each takes x (consumed) and returns the composed value. */
static kiln_tensor softmax_ops(kiln_tensor x) {
    kiln_tensor m = kiln_max_dims(kiln_ref(x), KILN_DIMS(-1), true);
    kiln_tensor e = kiln_exp(kiln_sub(x, m));
    kiln_tensor s = kiln_sum_dims(kiln_ref(e), KILN_DIMS(-1), true);
    return kiln_div(e, s);
}

static kiln_tensor log_softmax_lse(kiln_tensor x) {
    kiln_tensor m = kiln_max_dims(kiln_ref(x), KILN_DIMS(-1), true);
    kiln_tensor z = kiln_sub(x, m);
    kiln_tensor lse = kiln_logsumexp_dims(kiln_ref(z), KILN_DIMS(-1), true);
    return kiln_sub(z, lse);
}

static kiln_tensor log_softmax_log_sum(kiln_tensor x) { /* bench_softmax's form */
    kiln_tensor lse = kiln_log(kiln_sum_dims(kiln_exp(kiln_ref(x)), KILN_DIMS(-1), true));
    return kiln_exp(kiln_sub(x, lse));
}

static kiln_tensor centered(kiln_tensor x) { /* mean, a per-row input, a per-row add */
    kiln_shape s = kiln_tensor_shape(x);
    s.dims[s.ndim - 1] = 1;
    kiln_tensor b = kiln_arange(kiln_tensor_device(x), KILN_F32, 0, (double)kiln_shape_numel(s), 1);
    kiln_tensor y = kiln_mul_scalar(x, 2);
    kiln_tensor mn = kiln_add(kiln_mean_dims(kiln_ref(y), KILN_DIMS(-1), true), kiln_reshape(b, s));
    return kiln_sub(y, mn);
}

static kiln_tensor min_scaled(kiln_tensor x) { /* min, a per-row op, a broadcast division */
    kiln_tensor y = kiln_abs(x);
    kiln_tensor mi = kiln_add_scalar(kiln_min_dims(kiln_ref(y), KILN_DIMS(-1), true), 1);
    return kiln_div(y, mi);
}

typedef struct {
    const char *name;
    kiln_tensor (*f)(kiln_tensor);
    double rtol, atol;
} composed;

static const composed cases[] = {
    {"softmax", softmax_ops, 4e-6, 1e-7},
    {"log_softmax lse", log_softmax_lse, 4e-6, 1e-6},
    {"exp(x - log(sum(exp(x))))", log_softmax_log_sum, 4e-6, 1e-7},
    {"x * 2 - (mean + b)", centered, 4e-6, 1e-6},
    {"|x| / (min + 1)", min_scaled, 4e-6, 1e-7},
};

/* Runs every case on x (a CPU tensor, consumed) on the device fused and unfused and on the
 * CPU; `fuses`: the shape's rows are long enough for a fused reduction (2 or more). */
static void check_all(const char *what, kiln_tensor x, bool fuses) {
    kiln_tensor xd = kiln_to_device(kiln_ref(x), DEV);
    bool was = kiln_fusion_enabled();
    KT_CHECK(kiln_sync() == KILN_OK);
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        kiln_fusion_set_enabled(false);
        kiln_tensor off = cases[c].f(kiln_ref(xd));
        KT_CHECK(kiln_sync() == KILN_OK);
        kiln_fusion_set_enabled(was);
        kiln__fusion_stats_reset();
        kiln_tensor on = cases[c].f(kiln_ref(xd));
        KT_CHECK(kiln_sync() == KILN_OK);
        kiln__fusion_stats st = kiln__fusion_stats_get();
        if (was && fuses && kiln_engine_is_async())
            KT_CHECK_MSG(st.reductions >= 1 && st.epilogues >= 1, "%s %s: %lld fused reductions, %lld epilogues", what,
                         cases[c].name, (long long)st.reductions, (long long)st.epilogues);
        char name[160];
        snprintf(name, sizeof name, "%s %s fused vs unfused", what, cases[c].name);
        compare(name, kiln_ref(on), off, cases[c].rtol, cases[c].atol);
        snprintf(name, sizeof name, "%s %s vs cpu", what, cases[c].name);
        compare(name, on, cases[c].f(kiln_ref(x)), cases[c].rtol, cases[c].atol);
    }
    kiln_release(xd);
    kiln_release(x);
}

KT_TEST(fused_softmax_shapes) {
    check_all("[5, 37]", kiln_randn(KILN_CPU, KILN_F32, KILN_SHAPE(5, 37), 11), true);
    check_all("[2, 3, 129]", kiln_mul_scalar(kiln_randn(KILN_CPU, KILN_F32, KILN_SHAPE(2, 3, 129), 12), 4), true);
    check_all("[7, 2]", kiln_randn(KILN_CPU, KILN_F32, KILN_SHAPE(7, 2), 13), true);
    check_all("[3, 1]", kiln_randn(KILN_CPU, KILN_F32, KILN_SHAPE(3, 1), 14), false); /* rows of 1: not fused */
    check_all("[1, 4099]", kiln_randn(KILN_CPU, KILN_F32, KILN_SHAPE(1, 4099), 15), true);
}

KT_TEST(fused_softmax_nan_inf) {
    const float I = INFINITY, N = NAN;
    const float v[6][5] = {
        {0.5f, -1, 2, 3, -0.25f}, /* finite */
        {1, N, 2, 3, 4},          /* a NaN */
        {1, 2, I, 3, 4},          /* +inf */
        {-I, -I, -I, -I, -I},     /* all -inf */
        {I, -I, 0, I, 1},         /* both infinities */
        {-I, 1, 2, N, -I},        /* -inf and NaN */
    };
    check_all("nan/inf rows", kiln_from_data(KILN_CPU, KILN_F32, KILN_SHAPE(6, 5), v), true);
}

KT_TEST(fused_f64) {
    check_all("f64 [4, 33]", kiln_randn(KILN_CPU, KILN_F64, KILN_SHAPE(4, 33), 16), true);
}

/* Both kernel forms on rows of 16-element steps and a tail, with NaN and infinities inside the
 * steps (lanes of the vector form) and in the tail. */
KT_TEST(fused_rows_both_forms) {
    const char *forms[] = {"group", "vector"};
    float v[5][35];
    for (int r = 0; r < 5; r++)
        for (int c = 0; c < 35; c++) v[r][c] = (float)((r * 35 + c) * 37 % 23) * 0.25f - 2;
    v[1][7] = NAN;                        /* a NaN in the first step */
    v[2][20] = INFINITY;                  /* +inf in the second */
    v[3][33] = NAN, v[3][3] = -INFINITY;  /* a NaN in the tail */
    for (int c = 0; c < 35; c++) v[4][c] = -INFINITY;
    for (int f = 0; f < 2; f++) {
        setenv("KILN_OPENCL_ROWS", forms[f], 1);
        check_all(forms[f], kiln_mul_scalar(kiln_randn(KILN_CPU, KILN_F32, KILN_SHAPE(3, 2, 67), 18), 3), true);
        check_all(forms[f], kiln_from_data(KILN_CPU, KILN_F32, KILN_SHAPE(5, 35), v), true);
        check_all(forms[f], kiln_randn(KILN_CPU, KILN_F32, KILN_SHAPE(2, 16), 19), true); /* no tail */
    }
    unsetenv("KILN_OPENCL_ROWS");
}

/* A group that overwrites its own input in place (x.exp_() then its sum): every walk over a
 * row before the last reads the input unchanged. */
KT_TEST(fused_in_place_prologue) {
    kiln_tensor x = kiln_randn(KILN_CPU, KILN_F32, KILN_SHAPE(4, 9), 17);
    kiln_tensor xd = kiln_to_device(kiln_ref(x), DEV);
    KT_CHECK(kiln_sync() == KILN_OK);
    kiln_tensor ed = kiln_exp(xd), e = kiln_exp(x); /* in place: the handles were the last */
    compare("in-place logsumexp", kiln_logsumexp_dims(kiln_ref(ed), KILN_DIMS(-1), true),
            kiln_logsumexp_dims(kiln_ref(e), KILN_DIMS(-1), true), 4e-6, 1e-6);
    compare("in-place exp stored", ed, e, 4e-6, 0);
}

#endif

int main(void) {
    if (kt_opencl_missing()) return 77;
#if KILN_HAVE_OPENCL
    KT_RUN(fused_softmax_shapes);
    KT_RUN(fused_softmax_nan_inf);
    KT_RUN(fused_f64);
    KT_RUN(fused_in_place_prologue);
    KT_RUN(fused_rows_both_forms);
#endif
    return kt_finish();
}
