/* matmul and linear against double references: f32 / f64 / f16 / bf16; dense, transposed
 * (a transpose flag for GEMM), strided (copied) and offset operands; 1-d operands (dot,
 * vector-matrix, matrix-vector); broadcast batch dims, stride-0 batch operands, many small
 * batches; empty sizes (K = 0 gives zeros); linear with and without bias over any leading dims;
 * and bad input (shape mismatches naming both shapes, integer dtypes, 0-d operands). */
#include "nd_layout.h"

/* The matrix layouts: row-major, transposed (a transpose flag for GEMM), strided (copied),
 * offset. */
static const nd_layout mlayouts[] = {ND_DENSE, ND_TRANSPOSED, ND_STRIDED, ND_OFFSET};
#define M_NLAYOUTS 4

/* torch.matmul in double. Returns the result's shape; out holds its values. */
static kiln_shape ref_matmul(kiln_shape sa, const double *a, kiln_shape sb, const double *b, double *out) {
    int64_t m = sa.ndim == 1 ? 1 : sa.dims[sa.ndim - 2], k = sa.dims[sa.ndim - 1];
    int64_t n = sb.ndim == 1 ? 1 : sb.dims[sb.ndim - 1];
    int na = sa.ndim > 2 ? sa.ndim - 2 : 0, nb = sb.ndim > 2 ? sb.ndim - 2 : 0, nbat = na > nb ? na : nb;
    kiln_shape batch = {nbat, {0}}, ba = {na, {0}}, bb = {nb, {0}};
    memcpy(ba.dims, sa.dims, sizeof(int64_t) * (size_t)na);
    memcpy(bb.dims, sb.dims, sizeof(int64_t) * (size_t)nb);
    batch = ew_broadcast(ba, bb);
    batch.ndim = nbat;
    int64_t nbatch = kiln_shape_numel(batch);
    for (int64_t q = 0; q < nbatch; q++) {
        const double *pa = a + ew_source_index(ba, batch, q) * m * k;
        const double *pb = b + ew_source_index(bb, batch, q) * k * n;
        for (int64_t i = 0; i < m; i++)
            for (int64_t j = 0; j < n; j++) {
                double s = 0;
                for (int64_t p = 0; p < k; p++) s += pa[i * k + p] * pb[p * n + j];
                out[(q * m + i) * n + j] = s;
            }
    }
    kiln_shape so = batch;
    if (sa.ndim > 1) so.dims[so.ndim++] = m;
    if (sb.ndim > 1) so.dims[so.ndim++] = n;
    return so;
}

static double rtol_of(kiln_dtype rd) { return rd == KILN_F32 ? 2e-6 : rd == KILN_F64 ? 1e-13 : 2 * ew_rtol(rd); }

static void check_result(kiln_tensor r, kiln_dtype rd, kiln_shape want, const double *ref, double atol, const char *what) {
    kiln_shape got = kiln_tensor_shape(r);
    KT_CHECK_MSG(got.ndim == want.ndim && !memcmp(got.dims, want.dims, sizeof(int64_t) * (size_t)want.ndim),
                 "%s: result has %d dims, want %d", what, got.ndim, want.ndim);
    int64_t n = kiln_shape_numel(want);
    double *res = ew_read(r, rd, n);
    if (!res) return;
    double *w = malloc(sizeof(double) * (size_t)(n + 1));
    for (int64_t i = 0; i < n; i++) w[i] = ew_round(rd, ref[i]);
    EW_EXPECT_CLOSE(what, res, w, n, rtol_of(rd), atol);
    free(w);
    free(res);
}

/* a (shape sa, layout la) @ b (shape sb, layout lb) in dtype dt against the reference. */
static void check_matmul(kiln_dtype dt, kiln_shape sa, int la, kiln_shape sb, int lb) {
    int64_t na = kiln_shape_numel(sa), nb = kiln_shape_numel(sb);
    double *a = malloc(sizeof(double) * (size_t)(na + 1)), *b = malloc(sizeof(double) * (size_t)(nb + 1));
    ew_values(a, na, dt, -1, 1);
    ew_values(b, nb, dt, -1, 1);
    double *ref = malloc(sizeof(double) * (size_t)(na * 64 + nb * 64 + 4096));
    kiln_shape so = ref_matmul(sa, a, sb, b, ref);
    kiln_tensor r = kiln_matmul(nd_make(dt, sa, a, mlayouts[la]), nd_make(dt, sb, b, mlayouts[lb]));
    char what[160];
    snprintf(what, sizeof what, "matmul %s %s(%d-d) @ %s(%d-d)", kiln_dtype_name(dt), nd_layout_names[mlayouts[la]], sa.ndim,
             nd_layout_names[mlayouts[lb]], sb.ndim);
    int64_t k = sa.dims[sa.ndim - 1];
    check_result(r, dt, so, ref, (dt == KILN_F32 ? 1e-6 : dt == KILN_F64 ? 1e-14 : 4e-3) * (double)(k + 1), what);
    free(a);
    free(b);
    free(ref);
}

KT_TEST(matrices_every_dtype_and_layout) {
    static const int64_t sizes[][3] = {{1, 1, 1}, {3, 4, 5}, {17, 33, 9}, {64, 1, 7}, {1, 40, 1}, {70, 65, 66}};
    static const kiln_dtype dts[] = {KILN_F32, KILN_F64, KILN_F16, KILN_BF16};
    for (size_t si = 0; si < sizeof sizes / sizeof sizes[0]; si++)
        for (int k = 0; k < 4; k++)
            for (int la = 0; la < M_NLAYOUTS; la++)
                for (int lb = 0; lb < M_NLAYOUTS; lb++)
                    check_matmul(dts[k], KILN_SHAPE(sizes[si][0], sizes[si][1]), la,
                                 KILN_SHAPE(sizes[si][1], sizes[si][2]), lb);
    /* mixed float dtypes are refused, as torch.matmul refuses them (test_dtype_promotion) */
    double a[6] = {1, 2, 3, 4, 5, 6}, b[6] = {1, 0, 0, 1, 1, 1};
    KT_READ_ERROR(kiln_matmul(ew_tensor(KILN_F16, KILN_SHAPE(2, 3), a), ew_tensor(KILN_F64, KILN_SHAPE(3, 2), b)),
                  KILN_ERR_DTYPE, "kiln_matmul");
}

KT_TEST(vectors) {
    for (int la = 0; la < M_NLAYOUTS; la++)
        for (int lb = 0; lb < M_NLAYOUTS; lb++) {
            check_matmul(KILN_F32, KILN_SHAPE(37), la, KILN_SHAPE(37), lb);       /* dot: 0-d */
            check_matmul(KILN_F32, KILN_SHAPE(5), la, KILN_SHAPE(5, 3), lb);      /* [3] */
            check_matmul(KILN_F64, KILN_SHAPE(4, 5), la, KILN_SHAPE(5), lb);      /* [4] */
            check_matmul(KILN_F32, KILN_SHAPE(5), la, KILN_SHAPE(2, 5, 3), lb);   /* [2, 3] */
            check_matmul(KILN_F32, KILN_SHAPE(2, 4, 5), la, KILN_SHAPE(5), lb);   /* [2, 4] */
        }
}

KT_TEST(batches_broadcast) {
    for (int la = 0; la < M_NLAYOUTS; la++)
        for (int lb = 0; lb < M_NLAYOUTS; lb++) {
            check_matmul(KILN_F32, KILN_SHAPE(2, 1, 3, 4), la, KILN_SHAPE(5, 4, 6), lb);
            check_matmul(KILN_F64, KILN_SHAPE(3, 4), la, KILN_SHAPE(7, 4, 2), lb);
            check_matmul(KILN_F32, KILN_SHAPE(3, 1, 2, 8, 9), la, KILN_SHAPE(1, 4, 1, 9, 5), lb);
            check_matmul(KILN_F32, KILN_SHAPE(64, 8, 8), la, KILN_SHAPE(64, 8, 8), lb); /* small */
        }
    /* batch operands of stride 0 (expanded), with a row-major and with a strided matrix */
    double a[3 * 4], b[6 * 4 * 5], ref[6 * 3 * 5];
    ew_values(a, 12, KILN_F32, -1, 1);
    ew_values(b, 120, KILN_F32, -1, 1);
    double a6[6 * 12];
    for (int i = 0; i < 72; i++) a6[i] = a[i % 12];
    kiln_shape so = ref_matmul(KILN_SHAPE(6, 3, 4), a6, KILN_SHAPE(6, 4, 5), b, ref);
    for (int l = 0; l < 2; l++) {
        kiln_tensor ta = kiln_expand(nd_make(KILN_F32, KILN_SHAPE(1, 3, 4), a, l ? ND_STRIDED : ND_DENSE),
                                     KILN_SHAPE(6, 3, 4));
        check_result(kiln_matmul(ta, ew_tensor(KILN_F32, KILN_SHAPE(6, 4, 5), b)), KILN_F32, so, ref, 1e-5,
                     l ? "expanded strided batch" : "expanded batch");
    }
}

KT_TEST(empty_sizes) {
    ew_mark mark = ew_mark_now();
    check_matmul(KILN_F32, KILN_SHAPE(5, 0), 0, KILN_SHAPE(0, 3), 0); /* zeros [5, 3] */
    check_matmul(KILN_F64, KILN_SHAPE(0, 4), 0, KILN_SHAPE(4, 3), 1);
    check_matmul(KILN_F32, KILN_SHAPE(2, 3), 0, KILN_SHAPE(3, 0), 0);
    check_matmul(KILN_F32, KILN_SHAPE(0, 2, 3), 0, KILN_SHAPE(3, 4), 0);
    check_matmul(KILN_F32, KILN_SHAPE(0), 0, KILN_SHAPE(0), 0); /* dot of empties: 0 */
    double z[1] = {0};
    kiln_tensor r = kiln_linear(ew_tensor(KILN_F32, KILN_SHAPE(4, 0), z), ew_tensor(KILN_F32, KILN_SHAPE(3, 0), z),
                                kiln_ones(KILN_CPU, KILN_F32, KILN_SHAPE(3)));
    double ones[12] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1};
    check_result(r, KILN_F32, KILN_SHAPE(4, 3), ones, 0, "linear K=0: the bias");
    EW_NO_LEAKS(mark);
}

/* linear(x, w, b) = x @ w^T + b over x [..., in]. */
static void check_linear(kiln_dtype dt, kiln_shape sx, int64_t out_f, bool bias, nd_layout lx, bool w_transposed) {
    int64_t in_f = sx.dims[sx.ndim - 1], nx = kiln_shape_numel(sx), rows = nx / (in_f ? in_f : 1);
    double *x = malloc(sizeof(double) * (size_t)(nx + 1)), *w = malloc(sizeof(double) * (size_t)(out_f * in_f + 1));
    double *wt = malloc(sizeof(double) * (size_t)(out_f * in_f + 1)), bv[512];
    double *ref = malloc(sizeof(double) * (size_t)(rows * out_f + 1));
    ew_values(x, nx, dt, -1, 1);
    ew_values(w, out_f * in_f, dt, -1, 1);
    ew_values(bv, out_f, dt, -1, 1);
    for (int64_t i = 0; i < out_f; i++)
        for (int64_t j = 0; j < in_f; j++) wt[j * out_f + i] = w[i * in_f + j];
    ref_matmul(KILN_SHAPE(rows, in_f), x, KILN_SHAPE(in_f, out_f), wt, ref);
    if (bias)
        for (int64_t i = 0; i < rows * out_f; i++) ref[i] += bv[i % out_f];
    kiln_tensor tw = w_transposed ? kiln_transpose(ew_tensor(dt, KILN_SHAPE(in_f, out_f), wt), 0, 1)
                                  : ew_tensor(dt, KILN_SHAPE(out_f, in_f), w);
    kiln_tensor r = kiln_linear(nd_make(dt, sx, x, lx), tw, bias ? ew_tensor(dt, KILN_SHAPE(out_f), bv) : KILN_NONE);
    kiln_shape so = sx;
    so.dims[so.ndim - 1] = out_f;
    char what[128];
    snprintf(what, sizeof what, "linear %s %d-d x %s, bias %d, w^T view %d", kiln_dtype_name(dt), sx.ndim,
             nd_layout_names[lx], bias, w_transposed);
    check_result(r, dt, so, ref, (dt == KILN_F32 ? 1e-6 : dt == KILN_F64 ? 1e-14 : 4e-3) * (double)(in_f + 1), what);
    free(x);
    free(w);
    free(wt);
    free(ref);
}

KT_TEST(linear_layers) {
    static const kiln_dtype dts[] = {KILN_F32, KILN_F64, KILN_F16, KILN_BF16};
    for (int k = 0; k < 4; k++)
        for (int bias = 0; bias < 2; bias++)
            for (int l = 0; l < M_NLAYOUTS; l++)
                for (int wt = 0; wt < 2; wt++) {
                    check_linear(dts[k], KILN_SHAPE(2, 3, 5), 4, bias, mlayouts[l], wt);
                    check_linear(dts[k], KILN_SHAPE(7), 3, bias, mlayouts[l], wt);
                }
    check_linear(KILN_F32, KILN_SHAPE(130, 200), 150, true, ND_DENSE, false);
    check_linear(KILN_F32, KILN_SHAPE(3, 1, 16), 1, true, ND_TRANSPOSED, true);
}

/* ---- bad input ------------------------------------------------------------------------------ */
KT_TEST(bad_input) {
    ew_mark mark = ew_mark_now();
    kiln_tensor a = kiln_zeros(KILN_CPU, KILN_F32, KILN_SHAPE(2, 3));
    kiln_tensor b = kiln_zeros(KILN_CPU, KILN_F32, KILN_SHAPE(4, 5));
    int line;
    kiln_tensor r;
    r = kiln_matmul(kiln_ref(a), kiln_ref(b)); line = __LINE__;
    EW_EXPECT_ERROR(r, KILN_ERR_SHAPE, "kiln_matmul", line);
    KT_CHECK(strstr(kiln_last_error(), "[2, 3]") && strstr(kiln_last_error(), "[4, 5]"));
    /* (operands first, the call on one line: gcc and clang name different lines of a call
     * that spans several) */
    kiln_tensor x = kiln_zeros(KILN_CPU, KILN_F32, KILN_SHAPE(2, 2, 3)), y = kiln_zeros(KILN_CPU, KILN_F32, KILN_SHAPE(3, 3, 1));
    r = kiln_matmul(x, y); line = __LINE__;
    EW_EXPECT_ERROR(r, KILN_ERR_SHAPE, "kiln_matmul", line);
    KT_CHECK(strstr(kiln_last_error(), "[2, 2, 3]") && strstr(kiln_last_error(), "[3, 3, 1]"));
    x = kiln_zeros(KILN_CPU, KILN_I32, KILN_SHAPE(2, 3)), y = kiln_zeros(KILN_CPU, KILN_F32, KILN_SHAPE(3, 2));
    r = kiln_matmul(x, y); line = __LINE__;
    EW_EXPECT_ERROR(r, KILN_ERR_DTYPE, "kiln_matmul", line);
    r = kiln_matmul(kiln_ref(a), kiln_zeros(KILN_CPU, KILN_BOOL, KILN_SHAPE(3, 2))); line = __LINE__;
    EW_EXPECT_ERROR(r, KILN_ERR_DTYPE, "kiln_matmul", line);
    r = kiln_matmul(kiln_zeros(KILN_CPU, KILN_F32, KILN_SCALAR_SHAPE), kiln_ref(a)); line = __LINE__;
    EW_EXPECT_ERROR(r, KILN_ERR_SHAPE, "kiln_matmul", line);
    kiln_tensor stale = ew_stale();
    r = kiln_matmul(stale, kiln_ref(a)); line = __LINE__;
    EW_EXPECT_ERROR(r, KILN_ERR_STALE_HANDLE, "kiln_matmul", line);
    r = kiln_matmul(kiln_ref(a), KILN_NONE); line = __LINE__;
    EW_EXPECT_ERROR(r, KILN_ERR_NULL, "kiln_matmul", line);
    line = __LINE__; r = kiln_matmul(EW_POISONED(), kiln_ref(a));
    EW_EXPECT_ERROR(r, KILN_ERR_SHAPE, "kiln_reshape", line);
    /* linear: in_features, weight rank, bias shape, dtypes, handles */
    r = kiln_linear(kiln_ref(a), kiln_ref(b), KILN_NONE); line = __LINE__;
    EW_EXPECT_ERROR(r, KILN_ERR_SHAPE, "kiln_linear", line);
    r = kiln_linear(kiln_ref(a), kiln_zeros(KILN_CPU, KILN_F32, KILN_SHAPE(3)), KILN_NONE); line = __LINE__;
    EW_EXPECT_ERROR(r, KILN_ERR_SHAPE, "kiln_linear", line);
    x = kiln_zeros(KILN_CPU, KILN_F32, KILN_SHAPE(4, 3)), y = kiln_zeros(KILN_CPU, KILN_F32, KILN_SHAPE(3));
    r = kiln_linear(kiln_ref(a), x, y); line = __LINE__;
    EW_EXPECT_ERROR(r, KILN_ERR_SHAPE, "kiln_linear", line);
    r = kiln_linear(kiln_ref(a), kiln_zeros(KILN_CPU, KILN_I64, KILN_SHAPE(4, 3)), KILN_NONE); line = __LINE__;
    EW_EXPECT_ERROR(r, KILN_ERR_DTYPE, "kiln_linear", line);
    r = kiln_linear(kiln_ref(a), kiln_zeros(KILN_CPU, KILN_F32, KILN_SHAPE(4, 3)), stale); line = __LINE__;
    EW_EXPECT_ERROR(r, KILN_ERR_STALE_HANDLE, "kiln_linear", line);
    r = kiln_linear(KILN_NONE, kiln_zeros(KILN_CPU, KILN_F32, KILN_SHAPE(4, 3)), KILN_NONE); line = __LINE__;
    EW_EXPECT_ERROR(r, KILN_ERR_NULL, "kiln_linear", line);
    line = __LINE__; r = kiln_linear(kiln_ref(a), EW_POISONED(), KILN_NONE);
    EW_EXPECT_ERROR(r, KILN_ERR_SHAPE, "kiln_reshape", line);
    kiln_release(a);
    kiln_release(b);
    EW_NO_LEAKS(mark);
}

int main(void) {
    KT_RUN(matrices_every_dtype_and_layout);
    KT_RUN(vectors);
    KT_RUN(batches_broadcast);
    KT_RUN(empty_sizes);
    KT_RUN(linear_layers);
    KT_RUN(bad_input);
    return kt_finish();
}
