/* Unary elementwise ops against double references: every dtype, strided / transposed /
 * offset views, a large dense run (threads + vector paths), special values, empty and 0-d
 * tensors, in-place reuse of single-owner buffers, and bad input. */
#include "ew_util.h"

typedef kiln_tensor (*op1_fn)(kiln_tensor);
typedef double (*ref1_fn)(double);

static double r_neg(double x) { return -x; }
static double r_abs(double x) { return fabs(x); }
static double r_sign(double x) { return x > 0 ? 1 : x < 0 ? -1 : x; }
static double r_relu(double x) { return x < 0 ? 0 : x; }
static double r_rsqrt(double x) { return 1 / sqrt(x); }
static double r_sigmoid(double x) { return 1 / (1 + exp(-x)); }
/* Written without cancellation, so the reference keeps its accuracy in the negative tails;
 * the x * (0 at -inf) products are defined by their limit, -0. */
static double r_gelu(double x) { return x == -INFINITY ? -0.0 : 0.5 * x * erfc(-x / sqrt(2.0)); }
static double r_gelu_tanh(double x) {
    return x == -INFINITY ? -0.0 : x / (1 + exp(-2 * sqrt(2 / M_PI) * (x + 0.044715 * x * x * x)));
}
static double r_silu(double x) { return x == -INFINITY ? -0.0 : x / (1 + exp(-x)); }
static double r_softplus(double x) { return x > 20 ? x : log1p(exp(x)); } /* PyTorch's threshold */

typedef struct {
    const char *name;
    op1_fn op;
    ref1_fn ref;
    double lo, hi;   /* input range */
    bool float_math; /* ints compute (and return) f32; otherwise the dtype is kept, bool refused */
} unary_case;

static const unary_case cases[] = {
    {"neg", kiln_neg, r_neg, -100, 100, false},
    {"abs", kiln_abs, r_abs, -100, 100, false},
    {"sign", kiln_sign, r_sign, -3, 3, false},
    {"relu", kiln_relu, r_relu, -100, 100, false},
    {"exp", kiln_exp, exp, -20, 20, true},
    {"log", kiln_log, log, 0.001, 1000, true},
    {"log1p", kiln_log1p, log1p, -0.9, 10, true},
    {"expm1", kiln_expm1, expm1, -5, 5, true},
    {"sqrt", kiln_sqrt, sqrt, 0, 100, true},
    {"rsqrt", kiln_rsqrt, r_rsqrt, 0.01, 100, true},
    {"sin", kiln_sin, sin, -10, 10, true},
    {"cos", kiln_cos, cos, -10, 10, true},
    {"tanh", kiln_tanh, tanh, -6, 6, true},
    {"sigmoid", kiln_sigmoid, r_sigmoid, -20, 20, true},
    {"gelu", kiln_gelu, r_gelu, -6, 6, true},
    {"gelu_tanh", kiln_gelu_tanh, r_gelu_tanh, -6, 6, true},
    {"silu", kiln_silu, r_silu, -10, 10, true},
    {"softplus", kiln_softplus, r_softplus, -30, 30, true},
    {"erf", kiln_erf, erf, -4, 4, true},
};
#define NCASES ((int)(sizeof cases / sizeof cases[0]))

static const unary_case *find_case(const char *name) {
    for (int k = 0; k < NCASES; k++)
        if (!strcmp(cases[k].name, name)) return &cases[k];
    return NULL;
}

static kiln_dtype result_dtype(const unary_case *uc, kiln_dtype in) {
    return uc->float_math && !ew_is_float(in) ? KILN_F32 : in;
}

/* Accuracy expected of a result: vmath is a few ulp in f32, libm-exact in f64. */
static void tolerance(const unary_case *uc, kiln_dtype rd, double *rtol, double *atol) {
    *rtol = ew_rtol(rd);
    *atol = 0;
    if (!uc->float_math) return;
    switch (rd) {
    case KILN_F32: *rtol = 4e-6, *atol = 1e-7; break;
    case KILN_F64: *rtol = 1e-13, *atol = 1e-15; break;
    case KILN_F16: *atol = 1e-4; break;
    default: *atol = 1e-3; break;
    }
}

/* Checks y (consumed), the result of uc on `in` of dtype dt, element by element. */
static void check_result(const unary_case *uc, kiln_tensor y, const double *in, int64_t n, kiln_dtype dt,
                         const char *what) {
    kiln_dtype rd = result_dtype(uc, dt);
    double *got = ew_read(y, rd, n);
    if (!got) return;
    double *want = malloc(sizeof(double) * (size_t)(n ? n : 1));
    for (int64_t i = 0; i < n; i++) want[i] = ew_round(rd, uc->ref(in[i]));
    double rtol, atol;
    tolerance(uc, rd, &rtol, &atol);
    char label[128];
    snprintf(label, sizeof label, "%s %s %s", uc->name, kiln_dtype_name(dt), what);
    EW_EXPECT_CLOSE(label, got, want, n, rtol, atol);
    free(got);
    free(want);
}

static void check_op(const unary_case *uc, kiln_tensor x, const double *in, int64_t n, kiln_dtype dt, const char *what) {
    kiln_set_call_site(__FILE__, __LINE__);
    check_result(uc, uc->op(x), in, n, dt, what);
}

KT_TEST(every_op_dtype_and_layout) {
    ew_mark m = ew_mark_now();
    enum { R = 13, C = 37 };
    double in[R * C];
    for (int k = 0; k < NCASES; k++) {
        const unary_case *uc = &cases[k];
        for (int d = 0; d < EW_NDTYPES; d++) {
            kiln_dtype dt = ew_dtypes[d];
            if (dt == KILN_BOOL && !uc->float_math) continue; /* refused: see bad_input */
            ew_values(in, R * C, dt, uc->lo, uc->hi);
            for (int l = 0; l < EW_NLAYOUTS; l++) check_op(uc, ew_matrix(dt, R, C, in, (ew_layout)l), in, R * C, dt, ew_layout_names[l]);
        }
    }
    EW_NO_LEAKS(m);
}

/* Long dense runs go through the thread pool and the vectorised bodies and tails. */
KT_TEST(large_dense_runs) {
    ew_mark m = ew_mark_now();
    enum { N = 100003 };
    double *in = malloc(sizeof(double) * N);
    for (int k = 0; k < NCASES; k++) {
        const kiln_dtype dts[] = {KILN_F32, KILN_F64, KILN_I32};
        for (int d = 0; d < 3; d++) {
            if (dts[d] == KILN_I32 && cases[k].float_math) continue;
            ew_values(in, N, dts[d], cases[k].lo, cases[k].hi);
            check_op(&cases[k], ew_tensor(dts[d], KILN_SHAPE(N), in), in, N, dts[d], "large");
        }
    }
    free(in);
    EW_NO_LEAKS(m);
}

KT_TEST(special_values) {
    ew_mark m = ew_mark_now();
    const double sp[] = {0.0, -0.0, INFINITY, -INFINITY, NAN, 1e-30, -1e-30, 88.8, -104, 1e30, -1e30, 0.5, -0.5,
                         1e5, -1e5, 3e38, 20.5, -20.5, 1.0, -1.0};
    enum { N = sizeof sp / sizeof sp[0] };
    double in[N];
    for (int k = 0; k < NCASES; k++) {
        for (int d = 0; d < 2; d++) {
            kiln_dtype dt = d ? KILN_F64 : KILN_F32;
            for (int i = 0; i < N; i++) in[i] = ew_round(dt, sp[i]);
            check_op(&cases[k], ew_tensor(dt, KILN_SHAPE(N), in), in, N, dt, "special");
        }
    }
    /* integer extremes wrap like PyTorch's: neg/abs of INT_MIN is INT_MIN */
    int32_t i32[] = {INT32_MIN, INT32_MAX, -1, 0, 1};
    int32_t o32[5];
    KT_CHECK(kiln_into_data(kiln_abs(kiln_from_data(KILN_CPU, KILN_I32, KILN_SHAPE(5), i32)), o32, sizeof o32) == KILN_OK);
    KT_CHECK(o32[0] == INT32_MIN && o32[1] == INT32_MAX && o32[2] == 1 && o32[3] == 0 && o32[4] == 1);
    int64_t i64[] = {INT64_MIN, INT64_MAX, -7};
    int64_t o64[3];
    KT_CHECK(kiln_into_data(kiln_neg(kiln_from_data(KILN_CPU, KILN_I64, KILN_SHAPE(3), i64)), o64, sizeof o64) == KILN_OK);
    KT_CHECK(o64[0] == INT64_MIN && o64[1] == -INT64_MAX && o64[2] == 7);
    EW_NO_LEAKS(m);
}

KT_TEST(empty_scalar_and_size_one_dims) {
    ew_mark m = ew_mark_now();
    const kiln_shape shapes[] = {KILN_SHAPE(0), KILN_SHAPE(3, 0, 2), KILN_SCALAR_SHAPE, KILN_SHAPE(1, 5, 1), KILN_SHAPE(1)};
    double in[5];
    for (int s = 0; s < 5; s++) {
        kiln_shape shape = shapes[s];
        int64_t n = kiln_shape_numel(shape);
        for (int k = 0; k < NCASES; k++) {
            kiln_dtype dt = k % 2 ? KILN_F32 : KILN_I32;
            ew_values(in, n, dt, cases[k].lo, cases[k].hi);
            kiln_tensor y = cases[k].op(ew_tensor(dt, shape, in));
            kiln_shape ys = kiln_tensor_shape(y);
            KT_CHECK(ys.ndim == shape.ndim && memcmp(ys.dims, shape.dims, sizeof(int64_t) * (size_t)shape.ndim) == 0);
            check_result(&cases[k], y, in, n, dt, "small");
        }
    }
    EW_NO_LEAKS(m);
}

static kiln_memory_stats stats(void) { return kiln_memory_stats_get(KILN_CPU); }

/* A single-owner dense input is overwritten; with another handle alive a new buffer is made
 * and the original keeps its values; a borrowed buffer is never written. */
KT_TEST(in_place_reuse) {
    ew_mark m = ew_mark_now();
    enum { N = 1000 };
    double in[N], host_vals[N];
    ew_values(in, N, KILN_F32, -5, 5);
    for (int k = 0; k < NCASES; k++) {
        const unary_case *uc = &cases[k];
        kiln_tensor x = ew_tensor(KILN_F32, KILN_SHAPE(N), in);
        kiln_memory_stats s0 = stats();
        kiln_tensor y = uc->op(x);
        kiln_memory_stats s1 = stats();
        KT_CHECK_MSG(s1.alloc_count == s0.alloc_count && s1.inplace_reuses == s0.inplace_reuses + 1, "%s", uc->name);
        check_result(uc, y, in, N, KILN_F32, "in place");

        x = ew_tensor(KILN_F32, KILN_SHAPE(N), in);
        kiln_tensor keep = kiln_ref(x);
        s0 = stats();
        y = uc->op(x);
        KT_CHECK_MSG(stats().alloc_count == s0.alloc_count + 1 && stats().inplace_reuses == s0.inplace_reuses, "%s", uc->name);
        check_result(uc, y, in, N, KILN_F32, "shared");
        double *kept = ew_read(keep, KILN_F32, N);
        if (kept) EW_EXPECT_CLOSE("kept input", kept, in, N, 0, 0);
        free(kept);

        float host[N];
        for (int i = 0; i < N; i++) host[i] = (float)in[i], host_vals[i] = in[i];
        s0 = stats();
        y = uc->op(kiln_from_borrowed(KILN_F32, KILN_SHAPE(N), host, NULL, NULL));
        KT_CHECK(stats().inplace_reuses == s0.inplace_reuses);
        check_result(uc, y, in, N, KILN_F32, "borrowed");
        int changed = 0;
        for (int i = 0; i < N; i++) changed += host[i] != (float)host_vals[i];
        KT_CHECK_MSG(changed == 0, "%s wrote borrowed memory", uc->name);
    }
    /* an i32 input converts in place (same element size), then the math runs in place too */
    double ints[N];
    ew_values(ints, N, KILN_I32, -10, 10);
    kiln_tensor xi = ew_tensor(KILN_I32, KILN_SHAPE(N), ints);
    kiln_memory_stats s0 = stats();
    kiln_tensor yi = kiln_exp(xi);
    KT_CHECK(stats().alloc_count == s0.alloc_count);
    check_result(find_case("exp"), yi, ints, N, KILN_I32, "i32 in place");
    /* a transposed single-owner view is not dense in its buffer's order: a new buffer */
    double v[12];
    ew_values(v, 12, KILN_F32, -3, 3);
    kiln_tensor xt = ew_matrix(KILN_F32, 3, 4, v, EW_TRANSPOSED);
    s0 = stats();
    kiln_tensor yt = kiln_neg(xt);
    KT_CHECK(stats().alloc_count == s0.alloc_count + 1);
    check_result(find_case("neg"), yt, v, 12, KILN_F32, "transposed");
    EW_NO_LEAKS(m);
}

KT_TEST(bad_input) {
    ew_mark m = ew_mark_now();
    for (int k = 0; k < NCASES; k++) {
        int line;
        kiln_set_call_site(__FILE__, line = __LINE__);
        EW_EXPECT_ERROR(cases[k].op(KILN_NONE), KILN_ERR_NULL, "kiln_", line);
        kiln_tensor stale = ew_stale();
        kiln_set_call_site(__FILE__, line = __LINE__);
        EW_EXPECT_ERROR(cases[k].op(stale), KILN_ERR_STALE_HANDLE, "kiln_neg", line);
        kiln_tensor bad = EW_POISONED(); line = __LINE__;
        EW_EXPECT_ERROR(cases[k].op(kiln_unsqueeze(bad, 0)), KILN_ERR_SHAPE, "kiln_reshape", line);
    }
    /* the names of the failing ops, with the caller's line */
    kiln_tensor b = kiln_ones(KILN_CPU, KILN_BOOL, KILN_SHAPE(3));
    kiln_tensor r = kiln_neg(kiln_ref(b)); int line = __LINE__;
    EW_EXPECT_ERROR(r, KILN_ERR_DTYPE, "kiln_neg", line);
    r = kiln_abs(kiln_ref(b)); line = __LINE__;
    EW_EXPECT_ERROR(r, KILN_ERR_DTYPE, "kiln_abs", line);
    r = kiln_sign(kiln_ref(b)); line = __LINE__;
    EW_EXPECT_ERROR(r, KILN_ERR_DTYPE, "kiln_sign", line);
    r = kiln_relu(b); line = __LINE__;
    EW_EXPECT_ERROR(r, KILN_ERR_DTYPE, "kiln_relu", line);
    r = kiln_exp(KILN_NONE); line = __LINE__;
    EW_EXPECT_ERROR(r, KILN_ERR_NULL, "kiln_exp", line);
    kiln_tensor x = kiln_ones(KILN_CPU, KILN_F32, KILN_SHAPE(3));
    kiln_release(kiln_sqrt(x));
    r = kiln_tanh(x); line = __LINE__;
    EW_EXPECT_ERROR(r, KILN_ERR_STALE_HANDLE, "kiln_tanh", line);
    kiln_clear_error();
    EW_NO_LEAKS(m);
}

int main(void) {
    KT_RUN(every_op_dtype_and_layout);
    KT_RUN(large_dense_runs);
    KT_RUN(special_values);
    KT_RUN(empty_scalar_and_size_one_dims);
    KT_RUN(in_place_reuse);
    KT_RUN(bad_input);
    return kt_finish();
}
