/* cumsum and cumprod along a dim against double references: every dtype (integers and bools
 * give i64), every dim of 1- to 3-d inputs with negative dims, transposed / strided / offset /
 * expanded inputs, long lines over the thread pool, 0-d and empty tensors, in-place reuse,
 * NaN and inf carried, gradients by finite differences (cumprod's with zeros in x, against
 * PyTorch's values), and bad input. */
#include "ew_util.h"
#include "gradcheck.h"

/* want = scan of v (shape s, row-major) along dim. */
static void ref_scan(const double *v, double *want, kiln_shape s, int dim, bool prod) {
    if (s.ndim == 0) { /* a 0-d tensor is its own prefix */
        want[0] = v[0];
        return;
    }
    if (kiln_shape_numel(s) == 0) return;
    int64_t n = s.dims[dim], inner = 1, total = kiln_shape_numel(s);
    for (int d = dim + 1; d < s.ndim; d++) inner *= s.dims[d];
    for (int64_t i = 0; i < total; i++) {
        int64_t k = (i / inner) % n, base = i - k * inner;
        double acc = prod ? 1 : 0;
        for (int64_t j = 0; j <= k; j++) acc = prod ? acc * v[base + j * inner] : acc + v[base + j * inner];
        want[i] = acc;
    }
}

static void check_scan(bool prod, kiln_dtype dt, kiln_tensor x, const double *v, kiln_shape s, int dim, const char *what) {
    int nd = s.ndim == 0 ? 0 : dim < 0 ? dim + s.ndim : dim;
    int64_t n = kiln_shape_numel(s);
    kiln_dtype rd = ew_is_float(dt) ? dt : KILN_I64;
    double *want = malloc(sizeof(double) * (size_t)(n ? n : 1));
    ref_scan(v, want, s, nd, prod);
    for (int64_t i = 0; i < n; i++) want[i] = ew_round(rd, want[i]);
    kiln_tensor y = prod ? kiln_cumprod(x, dim) : kiln_cumsum(x, dim);
    kiln_shape ys = kiln_tensor_shape(y);
    KT_CHECK(ys.ndim == s.ndim && memcmp(ys.dims, s.dims, sizeof(int64_t) * (size_t)s.ndim) == 0);
    double *got = ew_read(y, rd, n);
    if (got) {
        char label[128];
        snprintf(label, sizeof label, "%s %s dim %d %s", prod ? "cumprod" : "cumsum", kiln_dtype_name(dt), dim, what);
        /* f16/bf16 accumulate in f32 and round once at each step's store */
        double rtol = dt == KILN_F16 ? 4e-3 : dt == KILN_BF16 ? 3e-2 : dt == KILN_F32 ? 1e-6 : 1e-14;
        EW_EXPECT_CLOSE(label, got, want, n, ew_is_float(dt) ? rtol : 0, ew_is_float(dt) ? rtol : 0);
    }
    free(got);
    free(want);
}

KT_TEST(every_dtype_dim_and_layout) {
    ew_mark m = ew_mark_now();
    enum { R = 5, C = 6 };
    kiln_shape s = KILN_SHAPE(R, C);
    for (int d = 0; d < EW_NDTYPES; d++) {
        kiln_dtype dt = ew_dtypes[d];
        for (int prod = 0; prod < 2; prod++)
            for (int l = 0; l < EW_NLAYOUTS; l++)
                for (int dim = -2; dim < 2; dim++) {
                    double v[R * C];
                    ew_values(v, R * C, dt, prod ? 0.5 : -20, prod ? 1.8 : 20);
                    if (prod && !ew_is_float(dt))
                        for (int i = 0; i < R * C; i++) v[i] = dt == KILN_BOOL ? v[i] : (double)(i % 5) - 2;
                    kiln_tensor x = ew_matrix(dt, R, C, v, (ew_layout)l); /* expanded rewrites v */
                    check_scan(prod, dt, x, v, s, dim, ew_layout_names[l]);
                }
    }
    /* 3-d, the middle dim, a permuted input */
    double v3[24];
    ew_values(v3, 24, KILN_F64, -3, 3);
    check_scan(false, KILN_F64, ew_tensor(KILN_F64, KILN_SHAPE(2, 3, 4), v3), v3, KILN_SHAPE(2, 3, 4), 1, "3-d");
    check_scan(true, KILN_F64, ew_tensor(KILN_F64, KILN_SHAPE(2, 3, 4), v3), v3, KILN_SHAPE(2, 3, 4), -3, "3-d");
    EW_NO_LEAKS(m);
}

KT_TEST(long_lines_empty_scalar_and_specials) {
    ew_mark m = ew_mark_now();
    enum { N = 50000 };
    double *v = malloc(sizeof(double) * N);
    ew_values(v, N, KILN_F64, -1, 1);
    check_scan(false, KILN_F64, ew_tensor(KILN_F64, KILN_SHAPE(N), v), v, KILN_SHAPE(N), 0, "long line");
    check_scan(false, KILN_F32, ew_tensor(KILN_F32, KILN_SHAPE(N / 10, 10), v), v, KILN_SHAPE(N / 10, 10), 1, "many lines");
    free(v);
    double one[1] = {2.5};
    check_scan(true, KILN_F32, ew_tensor(KILN_F32, KILN_SCALAR_SHAPE, one), one, KILN_SCALAR_SHAPE, 0, "0-d");
    double none[1] = {0};
    check_scan(false, KILN_F32, ew_tensor(KILN_F32, KILN_SHAPE(3, 0), none), none, KILN_SHAPE(3, 0), 1, "empty");
    const double sp[] = {1, NAN, 2, INFINITY, -INFINITY, 0, 3};
    check_scan(false, KILN_F64, ew_tensor(KILN_F64, KILN_SHAPE(7), sp), sp, KILN_SHAPE(7), 0, "specials");
    check_scan(true, KILN_F64, ew_tensor(KILN_F64, KILN_SHAPE(7), sp), sp, KILN_SHAPE(7), 0, "specials");
    /* a single-owner f32 input is overwritten in place */
    double w[64];
    ew_values(w, 64, KILN_F32, -1, 1);
    kiln_tensor x = ew_tensor(KILN_F32, KILN_SHAPE(8, 8), w);
    kiln_memory_stats s0 = kiln_memory_stats_get(KILN_CPU);
    kiln_tensor y = kiln_cumsum(x, 1);
    KT_CHECK(kiln_memory_stats_get(KILN_CPU).alloc_count == s0.alloc_count);
    double want[64];
    ref_scan(w, want, KILN_SHAPE(8, 8), 1, false);
    double *got = ew_read(y, KILN_F32, 64);
    if (got) EW_EXPECT_CLOSE("cumsum in place", got, want, 64, 1e-6, 1e-6);
    free(got);
    /* i32 sums do not wrap at 2^31: they are i64 */
    int32_t big[3] = {INT32_MAX, INT32_MAX, 2};
    int64_t o[3];
    KT_CHECK(kiln_into_data(kiln_cumsum(kiln_from_data(KILN_CPU, KILN_I32, KILN_SHAPE(3), big), 0), o, sizeof o) == KILN_OK);
    KT_CHECK(o[2] == 2 * (int64_t)INT32_MAX + 2);
    EW_NO_LEAKS(m);
}

/* ---- gradients ------------------------------------------------------------------------------ */

static kiln_tensor g_cumsum(kiln_tensor *in, void *ctx) {
    (void)ctx;
    return kiln_cumsum(kiln_transpose(in[0], 0, 1), -1);
}
static kiln_tensor g_cumprod(kiln_tensor *in, void *ctx) {
    (void)ctx;
    return kiln_cumprod(kiln_add_scalar(kiln_mul_scalar(kiln_transpose(in[0], 0, 1), 0.5), 1.0), 0);
}

/* cumprod's gradient where x has zeros, against values worked out by hand (PyTorch's): x = [2,
 * 0, 3, 0, 5], g = 1: y = [2, 0, 0, 0, 0]; dx0 = 1 + 0 = 1; dx1 = 2 (1 + 3 + 0 + 0) = 8; dx2 and
 * later see the factor x1 = 0: dx2 = 0, dx3 = 0 (x1 = 0 is in every term), dx4 = 0. */
KT_TEST(gradients) {
    kiln_shape s[1] = {KILN_SHAPE(3, 4)};
    GC_CHECK("cumsum", g_cumsum, NULL, 1, s, 1e-6);
    GC_CHECK("cumprod", g_cumprod, NULL, 1, s, 1e-6);
    double xv[5] = {2, 0, 3, 0, 5};
    kiln_tensor x = kiln_from_data(KILN_CPU, KILN_F64, KILN_SHAPE(5), xv);
    kiln_require_grad(x);
    kiln_grads *g = NULL;
    KT_CHECK(kiln_backward(kiln_sum(kiln_cumprod(kiln_ref(x), 0)), &g) == KILN_OK);
    double dx[5];
    KT_CHECK(kiln_into_data(kiln_grad(g, x), dx, sizeof dx) == KILN_OK);
    KT_CHECK_MSG(dx[0] == 1 && dx[1] == 8 && dx[2] == 0 && dx[3] == 0 && dx[4] == 0, "%g %g %g %g %g", dx[0], dx[1], dx[2],
                 dx[3], dx[4]);
    kiln_grads_free(g);
    kiln_release(x);
    /* one zero, not at the start, in f32: x = [3, 4, 0, 2], y = [3, 12, 0, 0]: dx0 = 1 + 4 = 5,
     * dx1 = 3, dx2 = 12 + 12 * 2 = 36, dx3 = 0 */
    x = kiln_from_data(KILN_CPU, KILN_F32, KILN_SHAPE(4), (float[4]){3, 4, 0, 2});
    kiln_require_grad(x);
    KT_CHECK(kiln_backward(kiln_sum(kiln_cumprod(kiln_ref(x), -1)), &g) == KILN_OK);
    float df[4];
    KT_CHECK(kiln_into_data(kiln_grad(g, x), df, sizeof df) == KILN_OK);
    KT_CHECK_MSG(df[0] == 5 && df[1] == 3 && df[2] == 36 && df[3] == 0, "%g %g %g %g", df[0], df[1], df[2], df[3]);
    kiln_grads_free(g);
    kiln_release(x);
}

KT_TEST(bad_input) {
    ew_mark m = ew_mark_now();
    int line;
    kiln_tensor r = kiln_cumsum(kiln_ones(KILN_CPU, KILN_F32, KILN_SHAPE(2, 3)), 2); line = __LINE__;
    EW_EXPECT_ERROR(r, KILN_ERR_INVALID_ARGUMENT, "kiln_cumsum", line);
    r = kiln_cumprod(kiln_ones(KILN_CPU, KILN_F32, KILN_SCALAR_SHAPE), 1); line = __LINE__;
    EW_EXPECT_ERROR(r, KILN_ERR_INVALID_ARGUMENT, "kiln_cumprod", line);
    r = kiln_cumprod(KILN_NONE, 0); line = __LINE__;
    EW_EXPECT_ERROR(r, KILN_ERR_NULL, "kiln_cumprod", line);
    kiln_tensor stale = ew_stale();
    r = kiln_cumsum(stale, 0); line = __LINE__;
    EW_EXPECT_ERROR(r, KILN_ERR_STALE_HANDLE, "kiln_neg", line);
    kiln_tensor bad = EW_POISONED(); line = __LINE__;
    EW_EXPECT_ERROR(kiln_cumsum(bad, 0), KILN_ERR_SHAPE, "kiln_reshape", line);
    kiln_clear_error();
    EW_NO_LEAKS(m);
}

int main(void) {
    KT_RUN(every_dtype_dim_and_layout);
    KT_RUN(long_lines_empty_scalar_and_specials);
    KT_RUN(gradients);
    KT_RUN(bad_input);
    return kt_finish();
}
