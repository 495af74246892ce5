/* sort, argsort and topk against a reference sort done here (stable, NaN largest): every
 * dtype, every dim with negative dims, ascending and descending, transposed / strided inputs,
 * ties and NaN, long lines over the thread pool, 0-d and empty tensors, gradients by finite
 * differences through the values, and bad input (k out of range, bad dim, KILN_NONE, stale,
 * poisoned) naming the op and the caller's line. */
#include "ew_util.h"
#include "gradcheck.h"

typedef struct {
    double v;
    int64_t i;
} item;

static int asc(double a, double b) { /* NaN largest */
    if (isnan(a) || isnan(b)) return isnan(a) == isnan(b) ? 0 : isnan(a) ? 1 : -1;
    return a < b ? -1 : a > b;
}

/* Stable insertion sort of one line. */
static void ref_sort_line(item *it, int64_t n, bool desc) {
    for (int64_t j = 1; j < n; j++) {
        item x = it[j];
        int64_t k = j;
        while (k > 0 && (desc ? asc(it[k - 1].v, x.v) < 0 : asc(it[k - 1].v, x.v) > 0)) {
            it[k] = it[k - 1];
            k--;
        }
        it[k] = x;
    }
}

/* Reference values and indices of the first k of each line of v (shape s) along dim. */
static void ref_sort(const double *v, kiln_shape s, int dim, bool desc, int64_t k, double *vals, double *idx) {
    int64_t n = s.dims[dim], inner = 1, total = kiln_shape_numel(s);
    for (int d = dim + 1; d < s.ndim; d++) inner *= s.dims[d];
    item *it = malloc(sizeof(item) * (size_t)(n ? n : 1));
    for (int64_t outer = 0; outer < (n ? total / n / inner : 0); outer++)
        for (int64_t in = 0; in < inner; in++) {
            for (int64_t j = 0; j < n; j++) it[j] = (item){v[(outer * n + j) * inner + in], j};
            ref_sort_line(it, n, desc);
            for (int64_t j = 0; j < k; j++) {
                vals[(outer * k + j) * inner + in] = it[j].v;
                idx[(outer * k + j) * inner + in] = (double)it[j].i;
            }
        }
    free(it);
}

static void check_sort(kiln_dtype dt, kiln_tensor x, const double *v, kiln_shape s, int dim, bool desc, int64_t k,
                       const char *what) {
    int nd = dim < 0 ? dim + s.ndim : dim;
    bool topk = k >= 0;
    if (!topk) k = s.dims[nd];
    kiln_shape so = s;
    so.dims[nd] = k;
    int64_t m = kiln_shape_numel(so);
    double *wv = malloc(sizeof(double) * (size_t)(m + 1)), *wi = malloc(sizeof(double) * (size_t)(m + 1));
    ref_sort(v, s, nd, desc, k, wv, wi);
    kiln_tensor idx;
    kiln_tensor y = topk ? kiln_topk(x, k, dim, desc, &idx) : kiln_sort(x, dim, desc, &idx);
    double *gv = ew_read(y, dt, m), *gi = ew_read(idx, KILN_I64, m);
    char label[128];
    snprintf(label, sizeof label, "%s %s dim %d %s %s", topk ? "topk" : "sort", kiln_dtype_name(dt), dim,
             desc ? "desc" : "asc", what);
    if (gv) EW_EXPECT_CLOSE(label, gv, wv, m, 0, 0);
    if (gi) EW_EXPECT_CLOSE(label, gi, wi, m, 0, 0);
    free(gv);
    free(gi);
    free(wv);
    free(wi);
}

KT_TEST(every_dtype_dim_order_and_layout) {
    ew_mark m = ew_mark_now();
    enum { R = 6, C = 9 };
    kiln_shape s = KILN_SHAPE(R, C);
    for (int d = 0; d < EW_NDTYPES; d++) {
        kiln_dtype dt = ew_dtypes[d];
        for (int l = 0; l < EW_NLAYOUTS; l++)
            for (int dim = -2; dim < 2; dim++)
                for (int desc = 0; desc < 2; desc++) {
                    double v[R * C];
                    ew_values(v, R * C, dt, -4, 4); /* few distinct values: many ties */
                    if (ew_is_float(dt))
                        for (int i = 0; i < R * C; i++) v[i] = ew_round(dt, floor(v[i] * 2) / 2);
                    kiln_tensor x = ew_matrix(dt, R, C, v, (ew_layout)l);
                    check_sort(dt, x, v, s, dim, desc, -1, ew_layout_names[l]);
                    x = ew_matrix(dt, R, C, v, (ew_layout)l);
                    check_sort(dt, x, v, s, dim, desc, dim == 0 || dim == -2 ? 2 : 4, ew_layout_names[l]);
                }
    }
    EW_NO_LEAKS(m);
}

KT_TEST(nan_inf_long_lines_and_small_shapes) {
    ew_mark m = ew_mark_now();
    const double sp[] = {3, NAN, -INFINITY, 0.0, INFINITY, -1, NAN, 3, -0.0};
    enum { NS = sizeof sp / sizeof sp[0] };
    for (int d = 0; d < 2; d++)
        for (int desc = 0; desc < 2; desc++) {
            kiln_dtype dt = d ? KILN_F64 : KILN_F32;
            check_sort(dt, ew_tensor(dt, KILN_SHAPE(NS), sp), sp, KILN_SHAPE(NS), 0, desc, -1, "specials");
        }
    enum { N = 20000 };
    double *v = malloc(sizeof(double) * N);
    ew_values(v, N, KILN_F64, -1000, 1000);
    check_sort(KILN_F64, ew_tensor(KILN_F64, KILN_SHAPE(N), v), v, KILN_SHAPE(N), 0, false, -1, "long");
    ew_values(v, N, KILN_F32, -1000, 1000);
    check_sort(KILN_F32, ew_tensor(KILN_F32, KILN_SHAPE(N / 4, 4), v), v, KILN_SHAPE(N / 4, 4), 1, true, 3, "many lines");
    /* i64 keys past 2^53 compare exactly */
    int64_t big[3] = {(int64_t)1 << 60, ((int64_t)1 << 60) + 1, ((int64_t)1 << 60) - 1}, out[3], oi[3];
    kiln_tensor idx;
    kiln_tensor y = kiln_sort(kiln_from_data(KILN_CPU, KILN_I64, KILN_SHAPE(3), big), 0, false, &idx);
    KT_CHECK(kiln_into_data(y, out, sizeof out) == KILN_OK && kiln_into_data(idx, oi, sizeof oi) == KILN_OK);
    KT_CHECK(out[0] == big[2] && out[2] == big[1] && oi[0] == 2 && oi[1] == 0 && oi[2] == 1);
    free(v);
    /* argsort is sort's indices; 0-d and empty inputs; topk with k = 0 */
    double w[6] = {4, 1, 3, 1, 0, 2};
    double *gi = ew_read(kiln_argsort(ew_tensor(KILN_F32, KILN_SHAPE(5), w), -1, true), KILN_I64, 5);
    double want[5] = {0, 2, 1, 3, 4};
    if (gi) EW_EXPECT_CLOSE("argsort", gi, want, 5, 0, 0);
    free(gi);
    double one[1] = {7};
    check_sort(KILN_F32, ew_tensor(KILN_F32, KILN_SHAPE(1), one), one, KILN_SHAPE(1), 0, false, -1, "one");
    y = kiln_sort(ew_tensor(KILN_F32, KILN_SCALAR_SHAPE, one), 0, false, &idx);
    KT_CHECK(kiln_tensor_ndim(y) == 0 && kiln_tensor_ndim(idx) == 0);
    float f;
    int64_t i0;
    KT_CHECK(kiln_into_scalar(y, &f) == KILN_OK && f == 7 && kiln_into_data(idx, &i0, sizeof i0) == KILN_OK && i0 == 0);
    check_sort(KILN_F32, ew_tensor(KILN_F32, KILN_SHAPE(3, 0), one), one, KILN_SHAPE(3, 0), 1, false, -1, "empty");
    check_sort(KILN_F32, ew_tensor(KILN_F32, KILN_SHAPE(2, 3), w), w, KILN_SHAPE(2, 3), 1, true, 0, "k = 0");
    KT_CHECK(kiln_sync() == KILN_OK);
    EW_NO_LEAKS(m);
}

/* ---- gradients ------------------------------------------------------------------------------ */

static kiln_tensor g_sort(kiln_tensor *in, void *ctx) {
    (void)ctx;
    return kiln_sort(kiln_transpose(in[0], 0, 1), 1, true, NULL);
}
static kiln_tensor g_topk(kiln_tensor *in, void *ctx) {
    (void)ctx;
    kiln_tensor idx;
    kiln_tensor v = kiln_topk(in[0], 2, 0, false, &idx);
    kiln_release(idx);
    return v;
}

KT_TEST(gradients) {
    kiln_shape s[1] = {KILN_SHAPE(3, 5)};
    GC_CHECK("sort", g_sort, NULL, 1, s, 1e-6);
    GC_CHECK("topk", g_topk, NULL, 1, s, 1e-6);
}

KT_TEST(bad_input) {
    ew_mark m = ew_mark_now();
    int line;
    kiln_tensor idx;
    kiln_tensor r = kiln_topk(kiln_ones(KILN_CPU, KILN_F32, KILN_SHAPE(2, 3)), 4, 1, true, &idx); line = __LINE__;
    KT_CHECK(kiln_tensor_status(idx) == KILN_ERR_INVALID_ARGUMENT);
    kiln_release(idx);
    EW_EXPECT_ERROR(r, KILN_ERR_INVALID_ARGUMENT, "kiln_topk", line);
    r = kiln_topk(kiln_ones(KILN_CPU, KILN_F32, KILN_SHAPE(2, 3)), -1, 1, true, NULL); line = __LINE__;
    EW_EXPECT_ERROR(r, KILN_ERR_INVALID_ARGUMENT, "kiln_topk", line);
    r = kiln_sort(kiln_ones(KILN_CPU, KILN_F32, KILN_SHAPE(2, 3)), 2, false, &idx); line = __LINE__;
    EW_EXPECT_ERROR(idx, KILN_ERR_INVALID_ARGUMENT, "kiln_sort", line);
    EW_EXPECT_ERROR(r, KILN_ERR_INVALID_ARGUMENT, "kiln_sort", line);
    r = kiln_argsort(KILN_NONE, 0, false); line = __LINE__;
    EW_EXPECT_ERROR(r, KILN_ERR_NULL, "kiln_argsort", line);
    kiln_tensor stale = ew_stale();
    r = kiln_sort(stale, 0, false, NULL); line = __LINE__;
    EW_EXPECT_ERROR(r, KILN_ERR_STALE_HANDLE, "kiln_neg", line);
    kiln_tensor bad = EW_POISONED(); line = __LINE__;
    EW_EXPECT_ERROR(kiln_topk(bad, 1, 0, true, NULL), KILN_ERR_SHAPE, "kiln_reshape", line);
    kiln_clear_error();
    kiln_sync();
    kiln_clear_error();
    EW_NO_LEAKS(m);
}

int main(void) {
    KT_RUN(every_dtype_dim_order_and_layout);
    KT_RUN(nan_inf_long_lines_and_small_shapes);
    KT_RUN(gradients);
    KT_RUN(bad_input);
    return kt_finish();
}
