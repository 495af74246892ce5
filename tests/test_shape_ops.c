/* flip, roll, repeat, tile, any, all and pad (constant, reflect, replicate) against index references computed here: every dtype,
 * transposed / strided inputs, negative dims and shifts, empty dims, gradients by finite
 * differences through the differentiable ones, and bad input naming the op and line. */
#include "ew_util.h"
#include "gradcheck.h"

/* Reads y (consumed) and compares it with want[0..n) exactly; the shape must be `shape`. */
static void expect_exact(const char *what, kiln_tensor y, kiln_dtype dt, kiln_shape shape, const double *want) {
    kiln_shape ys = kiln_tensor_shape(y);
    KT_CHECK_MSG(ys.ndim == shape.ndim && memcmp(ys.dims, shape.dims, sizeof(int64_t) * (size_t)shape.ndim) == 0,
                 "%s: shape", what);
    int64_t n = kiln_shape_numel(shape);
    double *got = ew_read(y, dt, n);
    if (got) EW_EXPECT_CLOSE(what, got, want, n, 0, 0);
    free(got);
}

/* Row-major coordinates of flat index i in shape. */
static void coords(kiln_shape s, int64_t i, int64_t *c) {
    for (int d = s.ndim - 1; d >= 0; d--) {
        c[d] = s.dims[d] ? i % s.dims[d] : 0;
        i = s.dims[d] ? i / s.dims[d] : 0;
    }
}
static int64_t flat(kiln_shape s, const int64_t *c) {
    int64_t i = 0;
    for (int d = 0; d < s.ndim; d++) i = i * s.dims[d] + c[d];
    return i;
}

KT_TEST(flip_every_dtype_and_layout) {
    ew_mark m = ew_mark_now();
    enum { R = 4, C = 5 };
    kiln_shape s = KILN_SHAPE(R, C);
    for (int d = 0; d < EW_NDTYPES; d++) {
        kiln_dtype dt = ew_dtypes[d];
        for (int l = 0; l < EW_NLAYOUTS; l++) {
            for (int which = 0; which < 3; which++) {
                double v[R * C], want[R * C];
                ew_values(v, R * C, dt, -50, 50);
                kiln_tensor x = ew_matrix(dt, R, C, v, (ew_layout)l);
                kiln_dims dims = which == 0 ? KILN_DIMS(0) : which == 1 ? KILN_DIMS(-1) : KILN_DIMS(1, 0);
                for (int64_t i = 0; i < R * C; i++) {
                    int64_t c[2];
                    coords(s, i, c);
                    if (which != 1) c[0] = R - 1 - c[0];
                    if (which != 0) c[1] = C - 1 - c[1];
                    want[i] = v[flat(s, c)];
                }
                char label[64];
                snprintf(label, sizeof label, "flip %s %s %d", kiln_dtype_name(dt), ew_layout_names[l], which);
                expect_exact(label, kiln_flip(x, dims), dt, s, want);
            }
        }
    }
    /* no dims, a size-1 dim and an empty tensor come back as they are */
    double v[3] = {1, 2, 3};
    expect_exact("flip none", kiln_flip(ew_tensor(KILN_F32, KILN_SHAPE(1, 3), v), KILN_DIMS(0)), KILN_F32, KILN_SHAPE(1, 3), v);
    expect_exact("flip empty", kiln_flip(ew_tensor(KILN_F32, KILN_SHAPE(0, 3), v), KILN_DIMS(0, 1)), KILN_F32, KILN_SHAPE(0, 3), v);
    EW_NO_LEAKS(m);
}

KT_TEST(roll_shifts_and_dims) {
    ew_mark m = ew_mark_now();
    enum { R = 3, C = 7 };
    kiln_shape s = KILN_SHAPE(R, C);
    const int64_t shifts[] = {0, 1, -1, 3, 7, -9, 100};
    for (int d = 0; d < EW_NDTYPES; d++) {
        kiln_dtype dt = ew_dtypes[d];
        for (int k = 0; k < 7; k++) {
            for (int dim = -2; dim < 2; dim++) {
                int nd = dim < 0 ? dim + 2 : dim;
                double v[R * C], want[R * C];
                ew_values(v, R * C, dt, -50, 50);
                kiln_tensor x = ew_matrix(dt, R, C, v, (ew_layout)(k % EW_NLAYOUTS));
                int64_t n = s.dims[nd];
                for (int64_t i = 0; i < R * C; i++) { /* out[j] = in[(j - shift) mod n] */
                    int64_t c[2];
                    coords(s, i, c);
                    c[nd] = ((c[nd] - shifts[k]) % n + n) % n;
                    want[i] = v[flat(s, c)];
                }
                char label[64];
                snprintf(label, sizeof label, "roll %s shift %lld dim %d", kiln_dtype_name(dt), (long long)shifts[k], dim);
                expect_exact(label, kiln_roll(x, shifts[k], dim), dt, s, want);
            }
        }
    }
    EW_NO_LEAKS(m);
}

KT_TEST(repeat_and_tile) {
    ew_mark m = ew_mark_now();
    for (int d = 0; d < EW_NDTYPES; d++) {
        kiln_dtype dt = ew_dtypes[d];
        double v[6];
        ew_values(v, 6, dt, -50, 50);
        /* repeat [2, 3] by (2, 1, 3): [2, 2, 9] */
        kiln_shape so = KILN_SHAPE(2, 2, 9);
        double want[36];
        for (int64_t i = 0; i < 36; i++) {
            int64_t c[3];
            coords(so, i, c);
            want[i] = v[(c[1] % 2) * 3 + c[2] % 3];
        }
        expect_exact("repeat", kiln_repeat(ew_matrix(dt, 2, 3, v, EW_TRANSPOSED), KILN_SHAPE(2, 1, 3)), dt, so, want);
        /* tile [2, 3] by (2,): the counts pad with 1s on the left: [2, 6] */
        double want2[12];
        for (int64_t i = 0; i < 12; i++) want2[i] = v[(i / 6) * 3 + (i % 6) % 3];
        expect_exact("tile", kiln_tile(ew_matrix(dt, 2, 3, v, EW_STRIDED), KILN_SHAPE(2)), dt, KILN_SHAPE(2, 6), want2);
        /* a zero count gives an empty dim; all ones is a copy */
        expect_exact("repeat zero", kiln_repeat(ew_tensor(dt, KILN_SHAPE(2, 3), v), KILN_SHAPE(0, 1)), dt, KILN_SHAPE(0, 3), v);
        expect_exact("repeat ones", kiln_repeat(ew_tensor(dt, KILN_SHAPE(2, 3), v), KILN_SHAPE(1, 1)), dt, KILN_SHAPE(2, 3), v);
    }
    EW_NO_LEAKS(m);
}

KT_TEST(any_and_all) {
    ew_mark m = ew_mark_now();
    const double v[6] = {0, 0, 3, NAN, -0.0, 0};
    const kiln_dtype dts[] = {KILN_F32, KILN_F64, KILN_F16, KILN_BF16};
    for (int d = 0; d < 4; d++) {
        double want_any[2] = {1, 1}, want_all[3] = {0, 0, 0};
        expect_exact("any", kiln_any(ew_tensor(dts[d], KILN_SHAPE(2, 3), v)), KILN_BOOL, KILN_SCALAR_SHAPE, want_any);
        expect_exact("all", kiln_all(ew_tensor(dts[d], KILN_SHAPE(2, 3), v)), KILN_BOOL, KILN_SCALAR_SHAPE, want_all);
        /* rows [0 0 3] [nan -0 0]: columns of the transposed view */
        double col_any[2] = {1, 1}, row_any[3] = {0, 0, 1};
        expect_exact("any dim 1", kiln_any_dims(ew_matrix(dts[d], 2, 3, (double[6]){0, 0, 3, NAN, -0.0, 0}, EW_DENSE), KILN_DIMS(1), false),
                     KILN_BOOL, KILN_SHAPE(2), col_any);
        expect_exact("any dim 0 keep", kiln_any_dims(ew_matrix(dts[d], 2, 3, (double[6]){0, 0, 3, 0, -0.0, 0}, EW_TRANSPOSED), KILN_DIMS(0), true),
                     KILN_BOOL, KILN_SHAPE(1, 3), row_any);
    }
    double ones[4] = {1, 2, -1, 5}, all1[1] = {1}, none[1] = {0};
    const kiln_dtype ints[] = {KILN_I32, KILN_I64, KILN_BOOL};
    for (int d = 0; d < 3; d++) {
        expect_exact("all ints", kiln_all(ew_tensor(ints[d], KILN_SHAPE(4), ones)), KILN_BOOL, KILN_SCALAR_SHAPE, all1);
        expect_exact("any zeros", kiln_any(kiln_zeros(KILN_CPU, ints[d], KILN_SHAPE(4))), KILN_BOOL, KILN_SCALAR_SHAPE, none);
    }
    /* of nothing: any false, all true */
    expect_exact("any empty", kiln_any(kiln_zeros(KILN_CPU, KILN_F32, KILN_SHAPE(0))), KILN_BOOL, KILN_SCALAR_SHAPE, none);
    expect_exact("all empty", kiln_all(kiln_zeros(KILN_CPU, KILN_F32, KILN_SHAPE(0))), KILN_BOOL, KILN_SCALAR_SHAPE, all1);
    double all_rows[2] = {1, 0};
    expect_exact("all dims", kiln_all_dims(ew_tensor(KILN_I32, KILN_SHAPE(2, 2), (double[4]){1, 2, 0, 3}), KILN_DIMS(-1), false),
                 KILN_BOOL, KILN_SHAPE(2), all_rows);
    EW_NO_LEAKS(m);
}

/* ---- pad ------------------------------------------------------------------------------------ */

/* The source index of output position j along a dim of size n, or -1 for the fill value. */
static int64_t pad_ref_index(int64_t j, int64_t n, kiln_pad_mode mode) {
    if (mode == KILN_PAD_CONSTANT) return j >= 0 && j < n ? j : -1;
    if (mode == KILN_PAD_REPLICATE) return j < 0 ? 0 : j >= n ? n - 1 : j;
    return j < 0 ? -j : j >= n ? 2 * (n - 1) - j : j;
}

/* x [R, C] padded on the last dim by (l1, r1) and on the first by (l0, r0). */
static void check_pad(kiln_dtype dt, ew_layout layout, kiln_pad_mode mode, int64_t l1, int64_t r1, int64_t l0, int64_t r0) {
    enum { R = 4, C = 5 };
    double v[R * C];
    ew_values(v, R * C, dt, -9, 9);
    kiln_tensor x = ew_matrix(dt, R, C, v, layout);
    int64_t ro = R + l0 + r0, co = C + l1 + r1;
    double *want = malloc(sizeof(double) * (size_t)(ro * co + 1));
    for (int64_t i = 0; i < ro; i++)
        for (int64_t j = 0; j < co; j++) {
            int64_t si = pad_ref_index(i - l0, R, mode), sj = pad_ref_index(j - l1, C, mode);
            want[i * co + j] = si < 0 || sj < 0 ? ew_round(dt, 2.5) : v[si * C + sj];
        }
    char label[96];
    snprintf(label, sizeof label, "pad %s %s mode %d (%lld %lld %lld %lld)", kiln_dtype_name(dt), ew_layout_names[layout],
             (int)mode, (long long)l1, (long long)r1, (long long)l0, (long long)r0);
    expect_exact(label, kiln_pad(x, KILN_SHAPE(l1, r1, l0, r0), mode, 2.5), dt, KILN_SHAPE(ro, co), want);
    free(want);
}

KT_TEST(pad_modes_dtypes_and_layouts) {
    ew_mark m = ew_mark_now();
    for (int d = 0; d < EW_NDTYPES; d++)
        for (int l = 0; l < EW_NLAYOUTS; l++) {
            kiln_dtype dt = ew_dtypes[d];
            if (dt == KILN_BOOL) continue; /* the fill 2.5 is not a bool; bool is checked below */
            check_pad(dt, (ew_layout)l, KILN_PAD_CONSTANT, 1, 2, 0, 3);
            check_pad(dt, (ew_layout)l, KILN_PAD_REFLECT, 2, 4, 3, 1);
            check_pad(dt, (ew_layout)l, KILN_PAD_REPLICATE, 3, 0, 2, 5);
        }
    check_pad(KILN_F32, EW_DENSE, KILN_PAD_CONSTANT, -2, 1, 1, -3); /* negative pads crop */
    check_pad(KILN_F64, EW_TRANSPOSED, KILN_PAD_CONSTANT, 0, 0, 0, 0);
    /* a 1-d bool, and a pad of only the last dim of a 3-d tensor */
    double b[3] = {1, 0, 1}, wb[6] = {0, 1, 0, 1, 0, 0};
    expect_exact("pad bool", kiln_pad(ew_tensor(KILN_BOOL, KILN_SHAPE(3), b), KILN_SHAPE(1, 2), KILN_PAD_CONSTANT, 0), KILN_BOOL,
                 KILN_SHAPE(6), wb);
    double t[8] = {1, 2, 3, 4, 5, 6, 7, 8}, wt[16] = {2, 1, 2, 1, 4, 3, 4, 3, 6, 5, 6, 5, 8, 7, 8, 7};
    expect_exact("pad 3-d reflect", kiln_pad(ew_tensor(KILN_F32, KILN_SHAPE(2, 2, 2), t), KILN_SHAPE(1, 1), KILN_PAD_REFLECT, 0),
                 KILN_F32, KILN_SHAPE(2, 2, 4), wt);
    EW_NO_LEAKS(m);
}

/* ---- gradients ------------------------------------------------------------------------------ */

static kiln_tensor g_flip(kiln_tensor *in, void *ctx) {
    (void)ctx;
    return kiln_flip(kiln_transpose(in[0], 0, 1), KILN_DIMS(0, 1));
}
static kiln_tensor g_roll(kiln_tensor *in, void *ctx) {
    (void)ctx;
    return kiln_roll(kiln_roll(in[0], 2, 1), -1, 0);
}
static kiln_tensor g_repeat(kiln_tensor *in, void *ctx) {
    (void)ctx;
    return kiln_repeat(kiln_transpose(in[0], 0, 1), KILN_SHAPE(2, 3, 1));
}
static kiln_tensor g_tile(kiln_tensor *in, void *ctx) {
    (void)ctx;
    return kiln_tile(in[0], KILN_SHAPE(3));
}

static kiln_tensor g_pad(kiln_tensor *in, void *ctx) {
    kiln_pad_mode mode = *(const kiln_pad_mode *)ctx;
    return kiln_pad(kiln_transpose(in[0], 0, 1), KILN_SHAPE(2, 1, 1, 2), mode, -1.0);
}

KT_TEST(gradients) {
    kiln_shape s[1] = {KILN_SHAPE(3, 4)};
    const kiln_pad_mode modes[3] = {KILN_PAD_CONSTANT, KILN_PAD_REFLECT, KILN_PAD_REPLICATE};
    for (int k = 0; k < 3; k++) GC_CHECK("pad", g_pad, (void *)&modes[k], 1, s, 1e-6);
    GC_CHECK("flip", g_flip, NULL, 1, s, 1e-6);
    GC_CHECK("roll", g_roll, NULL, 1, s, 1e-6);
    GC_CHECK("repeat", g_repeat, NULL, 1, s, 1e-6);
    GC_CHECK("tile", g_tile, NULL, 1, s, 1e-6);
}

KT_TEST(bad_input) {
    ew_mark m = ew_mark_now();
    int line;
    kiln_tensor r = kiln_flip(kiln_ones(KILN_CPU, KILN_F32, KILN_SHAPE(2, 3)), KILN_DIMS(2)); line = __LINE__;
    EW_EXPECT_ERROR(r, KILN_ERR_INVALID_ARGUMENT, "kiln_flip", line);
    r = kiln_flip(kiln_ones(KILN_CPU, KILN_F32, KILN_SHAPE(2, 3)), KILN_DIMS(0, -2)); line = __LINE__;
    EW_EXPECT_ERROR(r, KILN_ERR_INVALID_ARGUMENT, "kiln_flip", line);
    r = kiln_roll(kiln_ones(KILN_CPU, KILN_F32, KILN_SHAPE(2, 3)), 1, 5); line = __LINE__;
    EW_EXPECT_ERROR(r, KILN_ERR_INVALID_ARGUMENT, "kiln_roll", line);
    r = kiln_repeat(kiln_ones(KILN_CPU, KILN_F32, KILN_SHAPE(2, 3)), KILN_SHAPE(2)); line = __LINE__;
    EW_EXPECT_ERROR(r, KILN_ERR_INVALID_ARGUMENT, "kiln_repeat", line);
    r = kiln_tile(kiln_ones(KILN_CPU, KILN_F32, KILN_SHAPE(2, 3)), KILN_SHAPE(-1, 2)); line = __LINE__;
    EW_EXPECT_ERROR(r, KILN_ERR_INVALID_ARGUMENT, "kiln_tile", line);
    r = kiln_any_dims(kiln_ones(KILN_CPU, KILN_F32, KILN_SHAPE(2, 3)), KILN_DIMS(3), false); line = __LINE__;
    EW_EXPECT_ERROR(r, KILN_ERR_INVALID_ARGUMENT, "kiln_any_dims", line);
    r = kiln_all(KILN_NONE); line = __LINE__;
    EW_EXPECT_ERROR(r, KILN_ERR_NULL, "kiln_all", line);
    r = kiln_flip(KILN_NONE, KILN_DIMS(0)); line = __LINE__;
    EW_EXPECT_ERROR(r, KILN_ERR_NULL, "kiln_flip", line);
    kiln_tensor stale = ew_stale();
    r = kiln_roll(stale, 1, 0); line = __LINE__;
    EW_EXPECT_ERROR(r, KILN_ERR_STALE_HANDLE, "kiln_neg", line);
    stale = ew_stale();
    r = kiln_any(stale); line = __LINE__;
    EW_EXPECT_ERROR(r, KILN_ERR_STALE_HANDLE, "kiln_neg", line);
    r = kiln_pad(kiln_ones(KILN_CPU, KILN_F32, KILN_SHAPE(2, 3)), KILN_SHAPE(3, 0), KILN_PAD_REFLECT, 0); line = __LINE__;
    EW_EXPECT_ERROR(r, KILN_ERR_INVALID_ARGUMENT, "kiln_pad", line);
    r = kiln_pad(kiln_ones(KILN_CPU, KILN_F32, KILN_SHAPE(2, 3)), KILN_SHAPE(1, 0, 1), KILN_PAD_CONSTANT, 0); line = __LINE__;
    EW_EXPECT_ERROR(r, KILN_ERR_INVALID_ARGUMENT, "kiln_pad", line);
    r = kiln_pad(kiln_ones(KILN_CPU, KILN_F32, KILN_SHAPE(3)), KILN_SHAPE(1, 1, 1, 1), KILN_PAD_CONSTANT, 0); line = __LINE__;
    EW_EXPECT_ERROR(r, KILN_ERR_INVALID_ARGUMENT, "kiln_pad", line);
    r = kiln_pad(kiln_ones(KILN_CPU, KILN_F32, KILN_SHAPE(3)), KILN_SHAPE(-1, 0), KILN_PAD_REPLICATE, 0); line = __LINE__;
    EW_EXPECT_ERROR(r, KILN_ERR_INVALID_ARGUMENT, "kiln_pad", line);
    r = kiln_pad(kiln_ones(KILN_CPU, KILN_F32, KILN_SHAPE(3)), KILN_SHAPE(-2, -2), KILN_PAD_CONSTANT, 0); line = __LINE__;
    EW_EXPECT_ERROR(r, KILN_ERR_INVALID_ARGUMENT, "kiln_pad", line);
    r = kiln_pad(kiln_ones(KILN_CPU, KILN_F32, KILN_SHAPE(3)), KILN_SHAPE(1, 1), (kiln_pad_mode)7, 0); line = __LINE__;
    EW_EXPECT_ERROR(r, KILN_ERR_INVALID_ARGUMENT, "kiln_pad", line);
    r = kiln_pad(KILN_NONE, KILN_SHAPE(1, 1), KILN_PAD_CONSTANT, 0); line = __LINE__;
    EW_EXPECT_ERROR(r, KILN_ERR_NULL, "kiln_pad", line);
    kiln_tensor bad = EW_POISONED(); line = __LINE__;
    EW_EXPECT_ERROR(kiln_pad(bad, KILN_SHAPE(1, 1), KILN_PAD_REFLECT, 0), KILN_ERR_SHAPE, "kiln_reshape", line);
    bad = EW_POISONED(); line = __LINE__;
    EW_EXPECT_ERROR(kiln_tile(bad, KILN_SHAPE(2)), KILN_ERR_SHAPE, "kiln_reshape", line);
    bad = EW_POISONED(); line = __LINE__;
    EW_EXPECT_ERROR(kiln_all(bad), KILN_ERR_SHAPE, "kiln_reshape", line);
    kiln_clear_error();
    EW_NO_LEAKS(m);
}

int main(void) {
    KT_RUN(flip_every_dtype_and_layout);
    KT_RUN(roll_shifts_and_dims);
    KT_RUN(repeat_and_tile);
    KT_RUN(any_and_all);
    KT_RUN(pad_modes_dtypes_and_layouts);
    KT_RUN(gradients);
    KT_RUN(bad_input);
    return kt_finish();
}
