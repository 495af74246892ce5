/* cat, stack, split, chunk: values against references computed here, dtypes and promotion,
 * non-contiguous inputs, empty pieces, and bad input for every function (no leaks). */
#include <kiln.h>

#include "kiln_test.h"



/* A tensor of dtype dt holding v (given as doubles, row-major). */
static kiln_tensor make(kiln_dtype dt, kiln_shape shape, const double *v) {
    return kiln_cast(kiln_from_data(KILN_CPU, KILN_F64, shape, v), dt);
}

/* Small distinct integers (exact in every dtype, bf16 included), different on every call;
 * bool gets both values. The values used are copied to ref when it is not NULL. */
static kiln_tensor iota(kiln_dtype dt, kiln_shape shape, double *ref) {
    static int salt;
    salt = (salt + 37) % 101;
    int64_t n = kiln_shape_numel(shape);
    double *v = malloc(sizeof(double) * (size_t)(n ? n : 1));
    for (int64_t i = 0; i < n; i++) v[i] = dt == KILN_BOOL ? (double)((i + salt) % 3 != 0) : (double)((i + salt) % 250 + 1);
    if (ref) memcpy(ref, v, sizeof(double) * (size_t)n);
    kiln_tensor t = make(dt, shape, v);
    free(v);
    return t;
}

/* Reads t (consumed) as doubles; checks its shape first. */
static kiln_status read_as(kiln_tensor t, kiln_shape want, double *out) {
    kiln_shape s = kiln_tensor_shape(t);
    bool same = s.ndim == want.ndim;
    for (int d = 0; same && d < s.ndim; d++) same = s.dims[d] == want.dims[d];
    KT_CHECK_MSG(same || s.ndim < 0, "shape mismatch (ndim %d vs %d)", s.ndim, want.ndim);
    return kiln_into_data(kiln_cast(t, KILN_F64), out, sizeof(double) * (size_t)kiln_shape_numel(want));
}

/* The read of t fails with st, and the message names op and this file. */
static void expect_error(kiln_tensor t, kiln_status st, const char *op) {
    kiln_status got = kiln_into_data(t, NULL, 0);
    KT_CHECK_MSG(got == st, "status %s, expected %s", kiln_status_str(got), kiln_status_str(st));
    const char *msg = kiln_last_error();
    KT_CHECK_MSG(strstr(msg, op) != NULL, "message '%s' does not name %s", msg, op);
    KT_CHECK_MSG(strstr(msg, "test_join.c") != NULL, "message '%s' has no call site", msg);
}

/* Reference cat of two row-major blocks a [.., na, inner] and b [.., nb, inner] on one dim. */
static void ref_cat2(const double *a, int64_t na, const double *b, int64_t nb, int64_t outer, int64_t inner,
                     double *out) {
    for (int64_t o = 0; o < outer; o++) {
        memcpy(out, a + o * na * inner, sizeof(double) * (size_t)(na * inner));
        out += na * inner;
        memcpy(out, b + o * nb * inner, sizeof(double) * (size_t)(nb * inner));
        out += nb * inner;
    }
}

static void check_values(const double *got, const double *want, int64_t n, double tol) {
    for (int64_t i = 0; i < n; i++) KT_NEAR(got[i], want[i], tol);
}

KT_TEST(cat_values_every_dtype_and_dim) {
    kt_mem_begin();
    for (int k = 0; k < KT_N_DTYPES; k++) {
        kiln_dtype dt = kt_all_dtypes[k];
        double a[2 * 3 * 4], b[2 * 5 * 4], want[2 * 8 * 4], got[2 * 8 * 4];
        /* dim 1 of [2,3,4] and [2,5,4], also spelled as -2 */
        for (int dim = 1; dim >= -2; dim -= 3) {
            kiln_tensor ts[2] = {iota(dt, KILN_SHAPE(2, 3, 4), a), iota(dt, KILN_SHAPE(2, 5, 4), b)};
            ref_cat2(a, 3, b, 5, 2, 4, want);
            kiln_tensor r = kiln_cat(ts, 2, dim);
            KT_CHECK(kiln_tensor_dtype(r) == dt);
            KT_CHECK(read_as(r, KILN_SHAPE(2, 8, 4), got) == KILN_OK);
            check_values(got, want, 64, 0);
        }
        /* dim 0 and the last dim, three inputs */
        double c[6], w2[24], w3[16];
        kiln_tensor t0[3] = {iota(dt, KILN_SHAPE(2, 4), a), iota(dt, KILN_SHAPE(3, 4), b), iota(dt, KILN_SHAPE(1, 4), c)};
        memcpy(w2, a, 8 * sizeof(double));
        memcpy(w2 + 8, b, 12 * sizeof(double));
        memcpy(w2 + 20, c, 4 * sizeof(double));
        KT_CHECK(read_as(kiln_cat(t0, 3, 0), KILN_SHAPE(6, 4), got) == KILN_OK);
        check_values(got, w2, 24, 0);
        kiln_tensor t1[3] = {iota(dt, KILN_SHAPE(2, 4), a), iota(dt, KILN_SHAPE(2, 1), b), iota(dt, KILN_SHAPE(2, 3), c)};
        for (int r = 0; r < 2; r++) {
            memcpy(w3 + r * 8, a + r * 4, 4 * sizeof(double));
            w3[r * 8 + 4] = b[r];
            memcpy(w3 + r * 8 + 5, c + r * 3, 3 * sizeof(double));
        }
        KT_CHECK(read_as(kiln_cat(t1, 3, -1), KILN_SHAPE(2, 8), got) == KILN_OK);
        check_values(got, w3, 16, 0);
    }
    KT_MEM_CHECK();
}

KT_TEST(cat_promotes_dtypes) {
    kt_mem_begin();
    struct {
        kiln_dtype a, b, out;
    } cases[] = {{KILN_I32, KILN_F32, KILN_F32}, {KILN_BOOL, KILN_I64, KILN_I64}, {KILN_F16, KILN_BF16, KILN_F32},
                 {KILN_F64, KILN_I32, KILN_F64}, {KILN_BOOL, KILN_BF16, KILN_BF16}};
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        double a[4], b[2], want[6], got[6];
        kiln_tensor ts[2] = {iota(cases[k].a, KILN_SHAPE(2, 2), a), iota(cases[k].b, KILN_SHAPE(1, 2), b)};
        memcpy(want, a, sizeof a);
        memcpy(want + 4, b, sizeof b);
        kiln_tensor r = kiln_cat(ts, 2, 0);
        KT_CHECK(kiln_tensor_dtype(r) == cases[k].out);
        KT_CHECK(read_as(r, KILN_SHAPE(3, 2), got) == KILN_OK);
        check_values(got, want, 6, 0);
    }
    KT_MEM_CHECK();
}

KT_TEST(cat_non_contiguous_inputs) {
    kt_mem_begin();
    double base[12], got[64], want[64];
    /* a: [4,3] transposed to [3,4]; b: rows 0 and 2 of a [3,4] block (stepped slice);
     * c: a [1,4] row expanded to [2,4] (zero stride) */
    kiln_tensor a = kiln_transpose(iota(KILN_F32, KILN_SHAPE(4, 3), base), 0, 1);
    double tb[12];
    kiln_tensor b = kiln_slice(iota(KILN_F32, KILN_SHAPE(3, 4), tb), 0, 0, 3, 2);
    kiln_tensor c = kiln_expand(make(KILN_F32, KILN_SHAPE(1, 4), (double[]){-1, -2, -3, -4}), KILN_SHAPE(2, 4));
    KT_CHECK(!kiln_tensor_is_contiguous(a) && !kiln_tensor_is_contiguous(b) && !kiln_tensor_is_contiguous(c));
    int w = 0;
    for (int i = 0; i < 3; i++)
        for (int j = 0; j < 4; j++) want[w++] = base[j * 3 + i];
    for (int i = 0; i < 3; i += 2)
        for (int j = 0; j < 4; j++) want[w++] = tb[i * 4 + j];
    for (int i = 0; i < 2; i++)
        for (int j = 0; j < 4; j++) want[w++] = -(j + 1);
    kiln_tensor ts[3] = {kiln_ref(a), kiln_ref(b), kiln_ref(c)};
    KT_CHECK(read_as(kiln_cat(ts, 3, 0), KILN_SHAPE(7, 4), got) == KILN_OK);
    check_values(got, want, 28, 0);
    /* along dim 1 the slices of the output are strided too */
    kiln_tensor t2[2] = {kiln_transpose(a, 0, 1), kiln_transpose(b, 0, 1)}; /* [4,3] and [4,2] */
    KT_CHECK(read_as(kiln_cat(t2, 2, 1), KILN_SHAPE(4, 5), got) == KILN_OK);
    for (int j = 0; j < 4; j++) {
        for (int i = 0; i < 3; i++) KT_NEAR(got[j * 5 + i], base[j * 3 + i], 0);
        KT_NEAR(got[j * 5 + 3], tb[j], 0);
        KT_NEAR(got[j * 5 + 4], tb[8 + j], 0);
    }
    kiln_release(c);
    KT_MEM_CHECK();
}

KT_TEST(cat_same_tensor_twice_keeps_it) {
    kt_mem_begin();
    double v[6], got[12];
    kiln_tensor a = iota(KILN_I64, KILN_SHAPE(2, 3), v);
    kiln_tensor ts[2] = {kiln_ref(a), kiln_ref(a)};
    KT_CHECK(read_as(kiln_cat(ts, 2, 0), KILN_SHAPE(4, 3), got) == KILN_OK);
    for (int i = 0; i < 12; i++) KT_NEAR(got[i], v[i % 6], 0);
    KT_CHECK(kiln_is_valid(a));
    KT_CHECK(read_as(a, KILN_SHAPE(2, 3), got) == KILN_OK);
    check_values(got, v, 6, 0);
    /* one input: the result is that input's data */
    kiln_tensor one[1] = {iota(KILN_F64, KILN_SHAPE(2, 3), v)};
    KT_CHECK(read_as(kiln_cat(one, 1, 1), KILN_SHAPE(2, 3), got) == KILN_OK);
    check_values(got, v, 6, 0);
    kiln_tensor one_i[1] = {iota(KILN_I32, KILN_SHAPE(3), v)};
    KT_CHECK(read_as(kiln_cat(one_i, 1, 0), KILN_SHAPE(3), got) == KILN_OK);
    check_values(got, v, 3, 0);
    KT_MEM_CHECK();
}

KT_TEST(cat_empty_pieces) {
    kt_mem_begin();
    double a[6], b[3], got[9], want[9];
    /* an empty piece in the middle */
    kiln_tensor ts[3] = {iota(KILN_F32, KILN_SHAPE(2, 3), a), kiln_zeros(KILN_CPU, KILN_F32, KILN_SHAPE(0, 3)),
                         iota(KILN_F32, KILN_SHAPE(1, 3), b)};
    memcpy(want, a, sizeof a);
    memcpy(want + 6, b, sizeof b);
    KT_CHECK(read_as(kiln_cat(ts, 3, 0), KILN_SHAPE(3, 3), got) == KILN_OK);
    check_values(got, want, 9, 0);
    /* every piece empty, and empty in a dim other than the cat dim */
    kiln_tensor e1[2] = {kiln_zeros(KILN_CPU, KILN_F32, KILN_SHAPE(0, 3)), kiln_zeros(KILN_CPU, KILN_I32, KILN_SHAPE(0, 3))};
    KT_CHECK(read_as(kiln_cat(e1, 2, 0), KILN_SHAPE(0, 3), got) == KILN_OK);
    kiln_tensor e2[2] = {kiln_zeros(KILN_CPU, KILN_F32, KILN_SHAPE(0, 3)), kiln_zeros(KILN_CPU, KILN_F32, KILN_SHAPE(0, 2))};
    KT_CHECK(read_as(kiln_cat(e2, 2, 1), KILN_SHAPE(0, 5), got) == KILN_OK);
    /* a 1-d empty tensor joins any shape (torch's legacy rule) and still counts for dtype */
    kiln_tensor e3[2] = {kiln_zeros(KILN_CPU, KILN_F64, KILN_SHAPE(0)), iota(KILN_I32, KILN_SHAPE(2, 3), a)};
    kiln_tensor r = kiln_cat(e3, 2, 1);
    KT_CHECK(kiln_tensor_dtype(r) == KILN_F64);
    KT_CHECK(read_as(r, KILN_SHAPE(2, 3), got) == KILN_OK);
    check_values(got, a, 6, 0);
    kiln_tensor e4[2] = {kiln_zeros(KILN_CPU, KILN_F32, KILN_SHAPE(0)), kiln_zeros(KILN_CPU, KILN_F32, KILN_SHAPE(0))};
    KT_CHECK(read_as(kiln_cat(e4, 2, 0), KILN_SHAPE(0), got) == KILN_OK);
    KT_MEM_CHECK();
}

KT_TEST(cat_many_inputs) {
    kt_mem_begin();
    enum { N = 40 };
    kiln_tensor ts[N];
    double got[N * 2];
    for (int i = 0; i < N; i++) ts[i] = kiln_full(KILN_CPU, KILN_I32, KILN_SHAPE(2, 1), i);
    KT_CHECK(read_as(kiln_cat(ts, N, 1), KILN_SHAPE(2, N), got) == KILN_OK);
    for (int i = 0; i < 2 * N; i++) KT_NEAR(got[i], i % N, 0);
    /* a stale handle among many: every other one is still consumed */
    for (int i = 0; i < N; i++) ts[i] = kiln_full(KILN_CPU, KILN_I32, KILN_SHAPE(2, 1), i);
    kiln_release(ts[N - 3]);
    expect_error(kiln_cat(ts, N, 1), KILN_ERR_STALE_HANDLE, "kiln_cat");
    for (int i = 0; i < N; i++) KT_CHECK(!kiln_is_valid(ts[i]));
    KT_MEM_CHECK();
}

KT_TEST(cat_bad_input) {
    kt_mem_begin();
    expect_error(kiln_cat(NULL, 2, 0), KILN_ERR_NULL, "kiln_cat");
    kiln_tensor none[1] = {KILN_NONE};
    expect_error(kiln_cat(none, 0, 0), KILN_ERR_INVALID_ARGUMENT, "kiln_cat");
    expect_error(kiln_cat(none, 1, 0), KILN_ERR_NULL, "kiln_cat");
    kiln_tensor a[2] = {kiln_zeros(KILN_CPU, KILN_F32, KILN_SHAPE(2, 3)), kiln_zeros(KILN_CPU, KILN_F32, KILN_SHAPE(2, 4))};
    expect_error(kiln_cat(a, 2, 0), KILN_ERR_SHAPE, "kiln_cat");
    kiln_tensor b[2] = {kiln_zeros(KILN_CPU, KILN_F32, KILN_SHAPE(2, 3)), kiln_zeros(KILN_CPU, KILN_F32, KILN_SHAPE(2, 3, 1))};
    expect_error(kiln_cat(b, 2, 0), KILN_ERR_SHAPE, "kiln_cat");
    kiln_tensor c[2] = {kiln_zeros(KILN_CPU, KILN_F32, KILN_SHAPE(2, 3)), kiln_zeros(KILN_CPU, KILN_F32, KILN_SHAPE(2, 3))};
    expect_error(kiln_cat(c, 2, 2), KILN_ERR_INVALID_ARGUMENT, "kiln_cat");
    kiln_tensor c2[2] = {kiln_zeros(KILN_CPU, KILN_F32, KILN_SHAPE(2, 3)), kiln_zeros(KILN_CPU, KILN_F32, KILN_SHAPE(2, 3))};
    expect_error(kiln_cat(c2, 2, -3), KILN_ERR_INVALID_ARGUMENT, "kiln_cat");
    kiln_tensor d[2] = {kiln_full(KILN_CPU, KILN_F32, KILN_SCALAR_SHAPE, 1), kiln_full(KILN_CPU, KILN_F32, KILN_SCALAR_SHAPE, 2)};
    expect_error(kiln_cat(d, 2, 0), KILN_ERR_SHAPE, "kiln_cat");
    /* a stale handle first, KILN_NONE in the middle, a poisoned tensor last: all consumed */
    kiln_tensor gone = kiln_zeros(KILN_CPU, KILN_F32, KILN_SHAPE(2));
    kiln_release(gone);
    kiln_tensor e[4] = {gone, kiln_zeros(KILN_CPU, KILN_F32, KILN_SHAPE(2)), KILN_NONE,
                        kiln_reshape(kiln_zeros(KILN_CPU, KILN_F32, KILN_SHAPE(3)), KILN_SHAPE(2))};
    expect_error(kiln_cat(e, 4, 0), KILN_ERR_STALE_HANDLE, "kiln_cat");
    KT_CHECK(!kiln_is_valid(e[1]) && !kiln_is_valid(e[3]));
    /* a poisoned input propagates its own error (the failed reshape's) */
    kiln_tensor f[2] = {kiln_zeros(KILN_CPU, KILN_F32, KILN_SHAPE(2)),
                        kiln_reshape(kiln_zeros(KILN_CPU, KILN_F32, KILN_SHAPE(3)), KILN_SHAPE(2))};
    expect_error(kiln_cat(f, 2, 0), KILN_ERR_SHAPE, "kiln_reshape");
    /* an input whose kernel failed while running poisons the result */
    kiln_tensor g[2] = {kiln_zeros(KILN_CPU, KILN_F32, KILN_SHAPE(2)),
                        kiln_gather(kiln_zeros(KILN_CPU, KILN_F32, KILN_SHAPE(2)), 0,
                                    make(KILN_I64, KILN_SHAPE(1), (double[]){5}))};
    float out[3];
    kiln_status st = kiln_into_data(kiln_cat(g, 2, 0), out, sizeof out);
    KT_CHECK_MSG(st == KILN_ERR_INDEX, "%s: %s", kiln_status_str(st), kiln_last_error());
    KT_CHECK(strstr(kiln_last_error(), "kiln_gather") != NULL);
    kiln_sync(); /* the read reported it already; nothing may stay queued */
    KT_MEM_CHECK();
}

/* Stacks [2,3] inputs at dim (normalised 0..2): out index with k at dim, (i, j) elsewhere. */
static void ref_stack(const double *const *xs, int n, int dim, double *out) {
    int64_t shape[3] = {2, 3, 0};
    int64_t os[3];
    for (int d = 0, s = 0; d < 3; d++) os[d] = d == dim ? n : shape[s++];
    int64_t w = 0;
    for (int64_t i0 = 0; i0 < os[0]; i0++)
        for (int64_t i1 = 0; i1 < os[1]; i1++)
            for (int64_t i2 = 0; i2 < os[2]; i2++) {
                int64_t idx[3] = {i0, i1, i2}, rest[2];
                for (int d = 0, s = 0; d < 3; d++)
                    if (d != dim) rest[s++] = idx[d];
                out[w++] = xs[idx[dim]][rest[0] * 3 + rest[1]];
            }
}

KT_TEST(stack_values) {
    kt_mem_begin();
    for (int k = 0; k < KT_N_DTYPES; k++) {
        kiln_dtype dt = kt_all_dtypes[k];
        double a[6], b[6], c[6], want[18], got[18];
        for (int dim = -3; dim <= 2; dim++) {
            int nd = dim < 0 ? dim + 3 : dim;
            /* c is a transposed view: stack copies through strides */
            kiln_tensor ts[3] = {iota(dt, KILN_SHAPE(2, 3), a), iota(dt, KILN_SHAPE(2, 3), b),
                                 kiln_transpose(iota(dt, KILN_SHAPE(3, 2), c), 0, 1)};
            double ct[6];
            for (int i = 0; i < 2; i++)
                for (int j = 0; j < 3; j++) ct[i * 3 + j] = c[j * 2 + i];
            ref_stack((const double *const[]){a, b, ct}, 3, nd, want);
            kiln_shape os = nd == 0 ? KILN_SHAPE(3, 2, 3) : nd == 1 ? KILN_SHAPE(2, 3, 3) : KILN_SHAPE(2, 3, 3);
            kiln_tensor r = kiln_stack(ts, 3, dim);
            KT_CHECK(kiln_tensor_dtype(r) == dt);
            KT_CHECK(read_as(r, os, got) == KILN_OK);
            check_values(got, want, 18, 0);
        }
    }
    /* promotion, one input, empty inputs, 0-d inputs (-> 1-d) */
    double a[4], got[8];
    kiln_tensor p[2] = {kiln_full(KILN_CPU, KILN_I32, KILN_SHAPE(2), 3), kiln_full(KILN_CPU, KILN_F64, KILN_SHAPE(2), 0.5)};
    kiln_tensor r = kiln_stack(p, 2, 1);
    KT_CHECK(kiln_tensor_dtype(r) == KILN_F64);
    KT_CHECK(read_as(r, KILN_SHAPE(2, 2), got) == KILN_OK);
    check_values(got, (double[]){3, 0.5, 3, 0.5}, 4, 0);
    kiln_tensor one[1] = {iota(KILN_F32, KILN_SHAPE(4), a)};
    KT_CHECK(read_as(kiln_stack(one, 1, 1), KILN_SHAPE(4, 1), got) == KILN_OK);
    check_values(got, a, 4, 0);
    kiln_tensor e[2] = {kiln_zeros(KILN_CPU, KILN_F32, KILN_SHAPE(0, 2)), kiln_zeros(KILN_CPU, KILN_F32, KILN_SHAPE(0, 2))};
    KT_CHECK(read_as(kiln_stack(e, 2, 0), KILN_SHAPE(2, 0, 2), got) == KILN_OK);
    kiln_tensor z[3] = {kiln_full(KILN_CPU, KILN_F32, KILN_SCALAR_SHAPE, 1), kiln_full(KILN_CPU, KILN_F32, KILN_SCALAR_SHAPE, 2),
                        kiln_full(KILN_CPU, KILN_F32, KILN_SCALAR_SHAPE, 3)};
    KT_CHECK(read_as(kiln_stack(z, 3, 0), KILN_SHAPE(3), got) == KILN_OK);
    check_values(got, (double[]){1, 2, 3}, 3, 0);
    KT_MEM_CHECK();
}

KT_TEST(stack_bad_input) {
    kt_mem_begin();
    expect_error(kiln_stack(NULL, 1, 0), KILN_ERR_NULL, "kiln_stack");
    kiln_tensor a[2] = {kiln_zeros(KILN_CPU, KILN_F32, KILN_SHAPE(2, 3)), kiln_zeros(KILN_CPU, KILN_F32, KILN_SHAPE(2, 3))};
    expect_error(kiln_stack(a, 0, 0), KILN_ERR_INVALID_ARGUMENT, "kiln_stack");
    /* n = 0 consumed nothing */
    KT_CHECK(kiln_is_valid(a[0]) && kiln_is_valid(a[1]));
    expect_error(kiln_stack(a, 2, 3), KILN_ERR_INVALID_ARGUMENT, "kiln_stack");
    kiln_tensor b[2] = {kiln_zeros(KILN_CPU, KILN_F32, KILN_SHAPE(2, 3)), kiln_zeros(KILN_CPU, KILN_F32, KILN_SHAPE(3, 2))};
    expect_error(kiln_stack(b, 2, 0), KILN_ERR_SHAPE, "kiln_stack");
    kiln_tensor c[2] = {kiln_zeros(KILN_CPU, KILN_F32, KILN_SHAPE(2)), kiln_zeros(KILN_CPU, KILN_F32, KILN_SHAPE(2, 1))};
    expect_error(kiln_stack(c, 2, 0), KILN_ERR_SHAPE, "kiln_stack");
    kiln_tensor d[3] = {kiln_zeros(KILN_CPU, KILN_F32, KILN_SHAPE(2)), KILN_NONE, KILN_NONE};
    d[1] = kiln_ref(d[0]);
    kiln_release(d[0]); /* d[0] is stale, d[1] still live */
    expect_error(kiln_stack(d, 3, 0), KILN_ERR_STALE_HANDLE, "kiln_stack");
    KT_CHECK(!kiln_is_valid(d[1]));
    kiln_tensor e[2] = {kiln_reshape(kiln_zeros(KILN_CPU, KILN_F32, KILN_SHAPE(3)), KILN_SHAPE(2)),
                        kiln_zeros(KILN_CPU, KILN_F32, KILN_SHAPE(2))};
    expect_error(kiln_stack(e, 2, 0), KILN_ERR_SHAPE, "kiln_reshape");
    kiln_tensor f[2] = {kiln_zeros(KILN_CPU, KILN_F32, KILN_SHAPE(1, 1, 1, 1, 1, 1, 1, 1)),
                        kiln_zeros(KILN_CPU, KILN_F32, KILN_SHAPE(1, 1, 1, 1, 1, 1, 1, 1))};
    expect_error(kiln_stack(f, 2, 0), KILN_ERR_SHAPE, "kiln_stack");
    KT_MEM_CHECK();
}

/* Reads n pieces and checks they tile ref (a [rows, cols] row-major block) along dim. */
static void check_pieces(kiln_tensor *pieces, int n, const int64_t *sizes, int dim, const double *ref, int64_t rows,
                         int64_t cols) {
    int64_t at = 0;
    for (int i = 0; i < n; i++) {
        double got[64];
        int64_t pr = dim == 0 ? sizes[i] : rows, pc = dim == 0 ? cols : sizes[i];
        KT_CHECK(read_as(pieces[i], KILN_SHAPE(pr, pc), got) == KILN_OK);
        for (int64_t r = 0; r < pr; r++)
            for (int64_t c = 0; c < pc; c++) {
                int64_t rr = dim == 0 ? r + at : r, cc = dim == 0 ? c : c + at;
                KT_NEAR(got[r * pc + c], ref[rr * cols + cc], 0);
            }
        at += sizes[i];
    }
}

KT_TEST(split_and_chunk_values) {
    kt_mem_begin();
    double v[35];
    kiln_tensor out[8];
    for (int k = 0; k < KT_N_DTYPES; k++) {
        kiln_dtype dt = kt_all_dtypes[k];
        kiln_tensor t = iota(dt, KILN_SHAPE(5, 7), v);
        KT_CHECK(kiln_split(kiln_ref(t), 2, 0, out, 8) == 3);
        check_pieces(out, 3, (int64_t[]){2, 2, 1}, 0, v, 5, 7);
        KT_CHECK(kiln_split(kiln_ref(t), 3, -1, out, 3) == 3);
        KT_CHECK(!kiln_tensor_is_contiguous(out[0])); /* a view of columns, not a copy */
        check_pieces(out, 3, (int64_t[]){3, 3, 1}, 1, v, 5, 7);
        KT_CHECK(kiln_split(kiln_ref(t), 7, 1, out, 1) == 1);
        check_pieces(out, 1, (int64_t[]){7}, 1, v, 5, 7);
        KT_CHECK(kiln_split(kiln_ref(t), 100, 0, out, 1) == 1);
        check_pieces(out, 1, (int64_t[]){5}, 0, v, 5, 7);
        KT_CHECK(kiln_chunk(kiln_ref(t), 3, 0, out, 8) == 3); /* 5 rows: 2, 2, 1 */
        check_pieces(out, 3, (int64_t[]){2, 2, 1}, 0, v, 5, 7);
        KT_CHECK(kiln_chunk(kiln_ref(t), 4, 1, out, 8) == 4); /* 7 cols: 2, 2, 2, 1 */
        check_pieces(out, 4, (int64_t[]){2, 2, 2, 1}, 1, v, 5, 7);
        KT_CHECK(kiln_chunk(kiln_ref(t), 4, 0, out, 8) == 3); /* 5 rows in 4: 2, 2, 1 (as torch) */
        check_pieces(out, 3, (int64_t[]){2, 2, 1}, 0, v, 5, 7);
        KT_CHECK(kiln_chunk(t, 9, 0, out, 8) == 5); /* more chunks than rows: one row each */
        check_pieces(out, 5, (int64_t[]){1, 1, 1, 1, 1}, 0, v, 5, 7);
    }
    KT_MEM_CHECK();
}

KT_TEST(split_views_outlive_the_input) {
    kt_mem_begin();
    double v[12], got[12];
    kiln_tensor t = kiln_transpose(iota(KILN_F32, KILN_SHAPE(4, 3), v), 0, 1); /* [3,4] strided */
    kiln_tensor out[4];
    KT_CHECK(kiln_split(t, 1, 1, out, 4) == 4);
    KT_CHECK(!kiln_is_valid(t));
    /* each piece owns its own reference: release in a scrambled order, reading some */
    kiln_release(out[2]);
    KT_CHECK(read_as(out[3], KILN_SHAPE(3, 1), got) == KILN_OK);
    for (int i = 0; i < 3; i++) KT_NEAR(got[i], v[3 * 3 + i], 0);
    kiln_release(out[0]);
    KT_CHECK(read_as(kiln_contiguous(out[1]), KILN_SHAPE(3, 1), got) == KILN_OK);
    for (int i = 0; i < 3; i++) KT_NEAR(got[i], v[3 + i], 0);
    /* a stepped slice split into pieces, then joined back */
    kiln_tensor s = kiln_slice(iota(KILN_I64, KILN_SHAPE(12), v), 0, 1, 12, 2); /* 6 elements */
    KT_CHECK(kiln_chunk(s, 3, 0, out, 4) == 3);
    KT_CHECK(read_as(kiln_cat(out, 3, 0), KILN_SHAPE(6), got) == KILN_OK);
    for (int i = 0; i < 6; i++) KT_NEAR(got[i], v[1 + 2 * i], 0);
    KT_MEM_CHECK();
}

KT_TEST(split_empty_dims) {
    kt_mem_begin();
    kiln_tensor out[4];
    double got[1];
    /* a dim of size 0: split gives one empty piece, chunk gives `chunks` empty pieces */
    KT_CHECK(kiln_split(kiln_zeros(KILN_CPU, KILN_F32, KILN_SHAPE(0, 3)), 2, 0, out, 4) == 1);
    KT_CHECK(read_as(out[0], KILN_SHAPE(0, 3), got) == KILN_OK);
    KT_CHECK(kiln_split(kiln_zeros(KILN_CPU, KILN_F32, KILN_SHAPE(0, 3)), 0, 0, out, 4) == 1);
    KT_CHECK(read_as(out[0], KILN_SHAPE(0, 3), got) == KILN_OK);
    KT_CHECK(kiln_chunk(kiln_zeros(KILN_CPU, KILN_F32, KILN_SHAPE(0, 3)), 3, 0, out, 4) == 3);
    for (int i = 0; i < 3; i++) KT_CHECK(read_as(out[i], KILN_SHAPE(0, 3), got) == KILN_OK);
    /* empty in another dim: pieces are empty but sized along dim */
    KT_CHECK(kiln_split(kiln_zeros(KILN_CPU, KILN_F32, KILN_SHAPE(0, 3)), 2, 1, out, 4) == 2);
    KT_CHECK(read_as(out[0], KILN_SHAPE(0, 2), got) == KILN_OK);
    KT_CHECK(read_as(out[1], KILN_SHAPE(0, 1), got) == KILN_OK);
    KT_MEM_CHECK();
}

KT_TEST(split_and_chunk_bad_input) {
    kt_mem_begin();
    kiln_tensor out[4];
    /* no room: returns 0, still consumes the input, sets the last error */
    kiln_tensor t = kiln_zeros(KILN_CPU, KILN_F32, KILN_SHAPE(4));
    KT_CHECK(kiln_split(t, 2, 0, NULL, 4) == 0);
    KT_CHECK(kiln_last_status() == KILN_ERR_NULL && strstr(kiln_last_error(), "kiln_split"));
    KT_CHECK(!kiln_is_valid(t));
    t = kiln_zeros(KILN_CPU, KILN_F32, KILN_SHAPE(4));
    KT_CHECK(kiln_chunk(t, 2, 0, out, 0) == 0);
    KT_CHECK(kiln_last_status() == KILN_ERR_INVALID_ARGUMENT && strstr(kiln_last_error(), "kiln_chunk"));
    KT_CHECK(!kiln_is_valid(t));
    /* errors: one poisoned tensor in out[0] */
    struct {
        int n;
        kiln_status st;
    } expect[] = {{0, KILN_ERR_INVALID_ARGUMENT}, {1, KILN_ERR_INVALID_ARGUMENT}, {2, KILN_ERR_INVALID_ARGUMENT},
                  {3, KILN_ERR_SHAPE}, {4, KILN_ERR_STALE_HANDLE}, {5, KILN_ERR_NULL}, {6, KILN_ERR_SHAPE}};
    for (size_t k = 0; k < sizeof expect / sizeof expect[0]; k++) {
        int got = 0;
        kiln_tensor gone = kiln_zeros(KILN_CPU, KILN_F32, KILN_SHAPE(1));
        kiln_release(gone);
        switch (expect[k].n) {
        case 0: got = kiln_split(kiln_zeros(KILN_CPU, KILN_F32, KILN_SHAPE(4, 2)), 1, 0, out, 3); break; /* cap */
        case 1: got = kiln_split(kiln_zeros(KILN_CPU, KILN_F32, KILN_SHAPE(4, 2)), 0, 0, out, 4); break;
        case 2: got = kiln_split(kiln_zeros(KILN_CPU, KILN_F32, KILN_SHAPE(4, 2)), 1, 2, out, 4); break;
        case 3: got = kiln_split(kiln_full(KILN_CPU, KILN_F32, KILN_SCALAR_SHAPE, 1), 1, 0, out, 4); break;
        case 4: got = kiln_split(gone, 1, 0, out, 4); break;
        case 5: got = kiln_split(KILN_NONE, 1, 0, out, 4); break;
        case 6: got = kiln_split(kiln_reshape(kiln_zeros(KILN_CPU, KILN_F32, KILN_SHAPE(3)), KILN_SHAPE(2)), 1, 0, out, 4); break;
        }
        KT_CHECK(got == 1);
        expect_error(out[0], expect[k].st, expect[k].n == 6 ? "kiln_reshape" : "kiln_split");
    }
    KT_CHECK(kiln_chunk(kiln_zeros(KILN_CPU, KILN_F32, KILN_SHAPE(4)), 0, 0, out, 4) == 1);
    expect_error(out[0], KILN_ERR_INVALID_ARGUMENT, "kiln_chunk");
    KT_CHECK(kiln_chunk(kiln_zeros(KILN_CPU, KILN_F32, KILN_SHAPE(4)), -2, 0, out, 4) == 1);
    expect_error(out[0], KILN_ERR_INVALID_ARGUMENT, "kiln_chunk");
    KT_CHECK(kiln_chunk(kiln_zeros(KILN_CPU, KILN_F32, KILN_SHAPE(4)), 4, 0, out, 2) == 1); /* cap */
    expect_error(out[0], KILN_ERR_INVALID_ARGUMENT, "kiln_chunk");
    KT_CHECK(kiln_chunk(kiln_zeros(KILN_CPU, KILN_F32, KILN_SHAPE(0)), 3, 0, out, 2) == 1); /* 3 empty pieces */
    expect_error(out[0], KILN_ERR_INVALID_ARGUMENT, "kiln_chunk");
    KT_CHECK(kiln_chunk(kiln_zeros(KILN_CPU, KILN_F32, KILN_SHAPE(4)), 2, -2, out, 4) == 1);
    expect_error(out[0], KILN_ERR_INVALID_ARGUMENT, "kiln_chunk");
    KT_MEM_CHECK();
}

int main(void) {
    KT_RUN(cat_values_every_dtype_and_dim);
    KT_RUN(cat_promotes_dtypes);
    KT_RUN(cat_non_contiguous_inputs);
    KT_RUN(cat_same_tensor_twice_keeps_it);
    KT_RUN(cat_empty_pieces);
    KT_RUN(cat_many_inputs);
    KT_RUN(cat_bad_input);
    KT_RUN(stack_values);
    KT_RUN(stack_bad_input);
    KT_RUN(split_and_chunk_values);
    KT_RUN(split_views_outlive_the_input);
    KT_RUN(split_empty_dims);
    KT_RUN(split_and_chunk_bad_input);
    return kt_finish();
}
