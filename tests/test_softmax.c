/* softmax and log_softmax against double references: every dim of dense / permuted / strided
 * inputs (the row, tile and strided kernel paths), every float dtype and integers (f32), long
 * rows with vector tails, numerical stability (huge values, -inf entries, rows of -inf or NaN),
 * in-place reuse of a single-owner input, empty and 0-d tensors, and bad input. */
#include "backend/cpu/vmath.h"
#include "nd_layout.h"

/* Softmax (or log-softmax) of v (shape s) along dim, in double, like torch. */
static void ref_softmax(bool log_out, kiln_shape s, const double *v, int dim, double *out) {
    int64_t n = s.ndim ? s.dims[dim] : 1, inner = 1, outer = 1;
    for (int d = 0; d < s.ndim; d++) {
        if (d < dim) outer *= s.dims[d];
        if (d > dim) inner *= s.dims[d];
    }
    for (int64_t o = 0; o < outer; o++)
        for (int64_t i = 0; i < inner; i++) {
            const double *x = v + o * n * inner + i;
            double *y = out + o * n * inner + i;
            double m = -INFINITY, sum = 0;
            for (int64_t k = 0; k < n; k++) m = fmax(m, x[k * inner]);
            for (int64_t k = 0; k < n; k++) sum += exp(x[k * inner] - m);
            for (int64_t k = 0; k < n; k++)
                y[k * inner] = log_out ? (x[k * inner] - m) - log(sum) : exp(x[k * inner] - m) / sum;
        }
}

static double tolerance(kiln_dtype rd) { return rd == KILN_F32 ? 2e-6 : rd == KILN_F64 ? 1e-13 : 2 * ew_rtol(rd); }

/* Checks op(t, dim) for t (consumed) holding v of shape s. */
static void check(bool log_out, kiln_tensor t, kiln_dtype dt, kiln_shape s, const double *v, int dim, const char *what) {
    int64_t n = kiln_shape_numel(s);
    double *ref = malloc(sizeof(double) * (size_t)(n + 1));
    int nd = dim < 0 ? dim + (s.ndim ? s.ndim : 1) : dim;
    ref_softmax(log_out, s, v, nd, ref);
    kiln_tensor r = log_out ? kiln_log_softmax(t, dim) : kiln_softmax(t, dim);
    kiln_shape got = kiln_tensor_shape(r);
    KT_CHECK_MSG(got.ndim == s.ndim && !memcmp(got.dims, s.dims, sizeof(int64_t) * (size_t)s.ndim), "%s: shape", what);
    kiln_dtype rd = ew_is_float(dt) ? dt : KILN_F32;
    double *res = ew_read(r, rd, n);
    if (res) {
        char label[160];
        snprintf(label, sizeof label, "%s %s %s dim %d", what, log_out ? "log_softmax" : "softmax", kiln_dtype_name(dt), dim);
        if (rd == KILN_F16 || rd == KILN_BF16)
            for (int64_t i = 0; i < n; i++) ref[i] = ew_round(rd, ref[i]);
        double tol = tolerance(rd);
        EW_EXPECT_CLOSE(label, res, ref, n, tol, tol);
    }
    free(res);
    free(ref);
}

KT_TEST(every_dim_dtype_layout) {
    static const kiln_dtype dts[] = {KILN_F32, KILN_F64, KILN_F16, KILN_BF16, KILN_I32, KILN_I64, KILN_BOOL};
    static const kiln_shape shapes[] = {{3, {4, 5, 6}}, {3, {3, 17, 40}}, {2, {9, 1}}, {1, {7}}};
    for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++) {
        kiln_shape s = shapes[si];
        int64_t n = kiln_shape_numel(s);
        double *v = malloc(sizeof(double) * (size_t)n);
        for (int k = 0; k < 7; k++) {
            ew_values(v, n, dts[k], -8, 8);
            for (int dim = -s.ndim; dim < s.ndim; dim++)
                for (int lg = 0; lg < 2; lg++)
                    for (int l = 0; l < ND_NLAYOUTS; l++)
                        check(lg, nd_make(dts[k], s, v, (nd_layout)l), dts[k], s, v, dim, nd_layout_names[l]);
        }
        free(v);
    }
}

/* Rows of many lengths: vector bodies, tails, block boundaries of log_softmax's scratch. */
KT_TEST(long_rows_and_tiles) {
    static const int64_t lens[] = {1, 7, 8, 31, 33, 511, 512, 513, 2048, 3001};
    for (size_t li = 0; li < sizeof lens / sizeof lens[0]; li++) {
        kiln_shape s = KILN_SHAPE(5, lens[li]);
        int64_t n = 5 * lens[li];
        double *v = malloc(sizeof(double) * (size_t)n);
        for (int k = 0; k < 2; k++) {
            kiln_dtype dt = k ? KILN_F64 : KILN_F32;
            ew_values(v, n, dt, -30, 30);
            for (int lg = 0; lg < 2; lg++) {
                check(lg, ew_tensor(dt, s, v), dt, s, v, 1, "row");
                check(lg, ew_tensor(dt, s, v), dt, s, v, 0, "tile");
            }
        }
        free(v);
    }
}

KT_TEST(scalar_fallbacks) {
    if (kiln__vmath_force_isa("scalar") != 0) return;
    kiln_shape s = KILN_SHAPE(6, 1001);
    double *v = malloc(sizeof(double) * 6 * 1001);
    ew_values(v, 6 * 1001, KILN_F32, -20, 20);
    for (int lg = 0; lg < 2; lg++)
        for (int dim = 0; dim < 2; dim++) check(lg, ew_tensor(KILN_F32, s, v), KILN_F32, s, v, dim, "scalar isa");
    kiln__vmath_force_isa(NULL);
    free(v);
}

KT_TEST(numerically_stable) {
    /* huge values, an -inf entry, a row of -inf, a NaN, a +inf (torch: NaN rows for the last three) */
    double v[6][4] = {{1000, 999, 998, -1000}, {-1000, -1001, -1002, -1003}, {-INFINITY, 0, 1, 2},
                      {-INFINITY, -INFINITY, -INFINITY, -INFINITY}, {1, NAN, 2, 3}, {1, INFINITY, 2, 3}};
    kiln_shape s = KILN_SHAPE(6, 4);
    /* the same slices along dim 0: 12 columns (the tile path) and 6 (the strided path) */
    double t12[4][12], t6[4][6];
    for (int k = 0; k < 4; k++)
        for (int i = 0; i < 12; i++) t12[k][i] = v[i % 6][k], t6[k][i % 6] = v[i % 6][k];
    for (int k = 0; k < 2; k++) {
        kiln_dtype dt = k ? KILN_F64 : KILN_F32;
        for (int lg = 0; lg < 2; lg++) {
            check(lg, ew_tensor(dt, s, &v[0][0]), dt, s, &v[0][0], 1, "special rows");
            check(lg, ew_tensor(dt, KILN_SHAPE(4, 12), &t12[0][0]), dt, KILN_SHAPE(4, 12), &t12[0][0], 0, "special tile");
            check(lg, ew_tensor(dt, KILN_SHAPE(4, 6), &t6[0][0]), dt, KILN_SHAPE(4, 6), &t6[0][0], 0, "special cols");
        }
    }
    float y[6 * 4];
    KT_CHECK(kiln_into_data(kiln_softmax(ew_tensor(KILN_F32, s, &v[0][0]), -1), y, sizeof y) == KILN_OK);
    KT_CHECK(isfinite(y[0]) && y[8] == 0 && isnan(y[12]) && isnan(y[16]) && isnan(y[20]));
    KT_NEAR(y[0] + y[1] + y[2] + y[3], 1.0, 1e-6);
}

KT_TEST(in_place_when_single_owner) {
    kiln_shape s = KILN_SHAPE(64, 300);
    double *v = malloc(sizeof(double) * 64 * 300);
    ew_values(v, 64 * 300, KILN_F32, -5, 5);
    for (int dim = 0; dim < 2; dim++)
        for (int lg = 0; lg < 2; lg++) {
            uint64_t before = kiln_memory_stats_get(KILN_CPU).inplace_reuses;
            check(lg, ew_tensor(KILN_F32, s, v), KILN_F32, s, v, dim, "in place");
            KT_CHECK(kiln_memory_stats_get(KILN_CPU).inplace_reuses == before + 1);
        }
    /* a shared input is left alone */
    kiln_tensor x = ew_tensor(KILN_F32, s, v);
    uint64_t before = kiln_memory_stats_get(KILN_CPU).inplace_reuses;
    check(false, kiln_ref(x), KILN_F32, s, v, 1, "shared");
    KT_CHECK(kiln_memory_stats_get(KILN_CPU).inplace_reuses == before);
    double *again = ew_read(x, KILN_F32, 64 * 300);
    if (again) EW_EXPECT_CLOSE("input kept", again, v, 64 * 300, 0, 0);
    free(again);
    free(v);
}

KT_TEST(empty_and_scalar) {
    ew_mark mark = ew_mark_now();
    double v[1] = {3.5};
    check(false, ew_tensor(KILN_F32, KILN_SCALAR_SHAPE, v), KILN_F32, KILN_SCALAR_SHAPE, v, 0, "0-d");
    check(true, ew_tensor(KILN_F64, KILN_SCALAR_SHAPE, v), KILN_F64, KILN_SCALAR_SHAPE, v, -1, "0-d");
    check(false, ew_tensor(KILN_F32, KILN_SHAPE(0, 4), v), KILN_F32, KILN_SHAPE(0, 4), v, 1, "empty");
    check(true, ew_tensor(KILN_F32, KILN_SHAPE(3, 0), v), KILN_F32, KILN_SHAPE(3, 0), v, 1, "empty");
    check(true, ew_tensor(KILN_F32, KILN_SHAPE(3, 0), v), KILN_F32, KILN_SHAPE(3, 0), v, 0, "empty");
    EW_NO_LEAKS(mark);
}

KT_TEST(bad_input) {
    ew_mark mark = ew_mark_now();
    kiln_tensor x = kiln_zeros(KILN_CPU, KILN_F32, KILN_SHAPE(2, 3));
    int line;
    kiln_tensor r;
    r = kiln_softmax(kiln_ref(x), 2); line = __LINE__;
    EW_EXPECT_ERROR(r, KILN_ERR_INVALID_ARGUMENT, "kiln_softmax", line);
    r = kiln_log_softmax(kiln_ref(x), -3); line = __LINE__;
    EW_EXPECT_ERROR(r, KILN_ERR_INVALID_ARGUMENT, "kiln_log_softmax", line);
    kiln_tensor stale = ew_stale();
    r = kiln_softmax(stale, 0); line = __LINE__;
    EW_EXPECT_ERROR(r, KILN_ERR_STALE_HANDLE, "kiln_softmax", line);
    r = kiln_log_softmax(KILN_NONE, 0); line = __LINE__;
    EW_EXPECT_ERROR(r, KILN_ERR_NULL, "kiln_log_softmax", line);
    line = __LINE__; r = kiln_softmax(EW_POISONED(), 0);
    EW_EXPECT_ERROR(r, KILN_ERR_SHAPE, "kiln_reshape", line);
    line = __LINE__; r = kiln_log_softmax(EW_POISONED(), 0);
    EW_EXPECT_ERROR(r, KILN_ERR_SHAPE, "kiln_reshape", line);
    float y[6];
    KT_CHECK(kiln_into_data(kiln_softmax(x, 1), y, sizeof y) == KILN_OK);
    KT_NEAR(y[0], 1.0 / 3, 1e-7);
    EW_NO_LEAKS(mark);
}

int main(void) {
    KT_RUN(every_dim_dtype_layout);
    KT_RUN(long_rows_and_tiles);
    KT_RUN(scalar_fallbacks);
    KT_RUN(numerically_stable);
    KT_RUN(in_place_when_single_owner);
    KT_RUN(empty_and_scalar);
    KT_RUN(bad_input);
    return kt_finish();
}
