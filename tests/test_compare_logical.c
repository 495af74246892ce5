/* Comparisons (eq ne lt le gt ge, tensor and scalar forms) and logical and / or / not against
 * double references: every dtype pair, NaN, broadcasting, views, bool bytes other than 0/1,
 * in-place reuse of bool buffers, bad input. Every result is bool. */
#include "ew_util.h"

typedef kiln_tensor (*op2_fn)(kiln_tensor, kiln_tensor);
typedef kiln_tensor (*op_scalar_fn)(kiln_tensor, double);
typedef bool (*pred_fn)(double, double);

static bool p_eq(double x, double y) { return x == y; }
static bool p_ne(double x, double y) { return x != y; }
static bool p_lt(double x, double y) { return x < y; }
static bool p_le(double x, double y) { return x <= y; }
static bool p_gt(double x, double y) { return x > y; }
static bool p_ge(double x, double y) { return x >= y; }
static bool p_and(double x, double y) { return x != 0 && y != 0; } /* NaN is true, as in C and PyTorch */
static bool p_or(double x, double y) { return x != 0 || y != 0; }

typedef struct {
    const char *name;
    op2_fn op;
    op_scalar_fn op_scalar; /* NULL for the logical ops */
    pred_fn pred;
} compare_case;

static const compare_case cases[] = {
    {"eq", kiln_eq, kiln_eq_scalar, p_eq},     {"ne", kiln_ne, kiln_ne_scalar, p_ne},
    {"lt", kiln_lt, kiln_lt_scalar, p_lt},     {"le", kiln_le, kiln_le_scalar, p_le},
    {"gt", kiln_gt, kiln_gt_scalar, p_gt},     {"ge", kiln_ge, kiln_ge_scalar, p_ge},
    {"logical_and", kiln_logical_and, NULL, p_and}, {"logical_or", kiln_logical_or, NULL, p_or},
};
#define NCASES ((int)(sizeof cases / sizeof cases[0]))

/* Values that every dtype holds exactly, with many ties: -3..3 in halves (whole for ints). */
static void tie_values(double *v, int64_t n, kiln_dtype d) {
    ew_values(v, n, d, -3, 3.99);
    if (ew_is_float(d))
        for (int64_t i = 0; i < n; i++) v[i] = floor(v[i] * 2) / 2;
}

static double expect(const void *ctx, double x, double y) { return ((const compare_case *)ctx)->pred(x, y); }

/* Compared on tie_values-like data: -3..3 in halves (whole numbers for integers). */
static void check_pair(const compare_case *cc, kiln_dtype da, kiln_shape sa, ew_layout la, kiln_dtype db, kiln_shape sb,
                       ew_layout lb) {
    ew_check_binary(cc->name, cc->op, (ew_operand){da, sa, la, -3, 3.99, 0.5}, (ew_operand){db, sb, lb, -3, 3.99, 0.5},
                    KILN_BOOL, expect, cc, 0);
}

KT_TEST(every_dtype_pair) {
    ew_mark m = ew_mark_now();
    for (int k = 0; k < NCASES; k++)
        for (int i = 0; i < EW_NDTYPES; i++)
            for (int j = 0; j < EW_NDTYPES; j++)
                check_pair(&cases[k], ew_dtypes[i], KILN_SHAPE(6, 23), EW_DENSE, ew_dtypes[j], KILN_SHAPE(6, 23), EW_DENSE);
    EW_NO_LEAKS(m);
}

KT_TEST(broadcasting_views_and_sizes) {
    ew_mark m = ew_mark_now();
    const struct {
        kiln_shape a, b;
    } shapes[] = {
        {KILN_SHAPE(7, 33), KILN_SHAPE(7, 33)}, {KILN_SHAPE(7, 33), KILN_SHAPE(33)},  {KILN_SHAPE(7, 1), KILN_SHAPE(7, 33)},
        {KILN_SHAPE(1, 33), KILN_SHAPE(7, 1)},  {KILN_SCALAR_SHAPE, KILN_SHAPE(7, 33)}, {KILN_SHAPE(0, 33), KILN_SHAPE(33)},
        {KILN_SCALAR_SHAPE, KILN_SCALAR_SHAPE},
    };
    const kiln_dtype dts[] = {KILN_F32, KILN_F64, KILN_I32, KILN_I64, KILN_BOOL};
    for (int k = 0; k < NCASES; k++)
        for (int d = 0; d < 5; d++) {
            for (int s = 0; s < (int)(sizeof shapes / sizeof shapes[0]); s++)
                for (int l = 0; l < EW_NLAYOUTS; l++) {
                    check_pair(&cases[k], dts[d], shapes[s].a, (ew_layout)l, dts[d], shapes[s].b, EW_DENSE);
                    check_pair(&cases[k], dts[d], shapes[s].a, EW_DENSE, dts[d], shapes[s].b, (ew_layout)l);
                }
            /* long runs: threads, vector bodies and tails */
            check_pair(&cases[k], dts[d], KILN_SHAPE(40001), EW_DENSE, dts[d], KILN_SHAPE(40001), EW_DENSE);
            check_pair(&cases[k], dts[d], KILN_SHAPE(150, 301), EW_DENSE, dts[d], KILN_SHAPE(301), EW_DENSE);
        }
    EW_NO_LEAKS(m);
}

KT_TEST(nan_and_infinities) {
    ew_mark m = ew_mark_now();
    const double sp[] = {NAN, INFINITY, -INFINITY, 0.0, -0.0, 1.0, -1.0, 1e-30};
    enum { N = sizeof sp / sizeof sp[0] };
    double a[N * N], b[N * N], want[N * N];
    for (int i = 0; i < N; i++)
        for (int j = 0; j < N; j++) a[i * N + j] = sp[i], b[i * N + j] = sp[j];
    for (int k = 0; k < NCASES; k++)
        for (int d = 0; d < 3; d++) {
            kiln_dtype dt = d == 0 ? KILN_F32 : d == 1 ? KILN_F64 : KILN_F16;
            for (int i = 0; i < N * N; i++) want[i] = cases[k].pred(ew_round(dt, a[i]), ew_round(dt, b[i]));
            double *got = ew_read(cases[k].op(ew_tensor(dt, KILN_SHAPE(N * N), a), ew_tensor(dt, KILN_SHAPE(N * N), b)),
                                  KILN_BOOL, N * N);
            char label[64];
            snprintf(label, sizeof label, "%s %s specials", cases[k].name, kiln_dtype_name(dt));
            if (got) EW_EXPECT_CLOSE(label, got, want, N * N, 0, 0);
            free(got);
        }
    EW_NO_LEAKS(m);
}

KT_TEST(scalar_forms) {
    ew_mark m = ew_mark_now();
    const double scalars[] = {2, 2.5, -1, 0, NAN, INFINITY, 1e10};
    enum { R = 5, C = 21 };
    double v[R * C], want[R * C];
    for (int k = 0; k < NCASES; k++) {
        if (!cases[k].op_scalar) continue;
        for (int d = 0; d < EW_NDTYPES; d++)
            for (int s = 0; s < (int)(sizeof scalars / sizeof scalars[0]); s++) {
                kiln_dtype dt = ew_dtypes[d];
                tie_values(v, R * C, dt);
                kiln_tensor x = ew_matrix(dt, R, C, v, (ew_layout)((k + d + s) % EW_NLAYOUTS));
                /* the scalar is compared as the tensor's dtype holds it (f16 / bf16: as f32) */
                double sv = ew_is_float(dt) ? ew_round(dt == KILN_F64 ? KILN_F64 : KILN_F32, scalars[s]) : scalars[s];
                for (int i = 0; i < R * C; i++) want[i] = cases[k].pred(v[i], sv);
                double *got = ew_read(cases[k].op_scalar(x, scalars[s]), KILN_BOOL, R * C);
                char label[96];
                snprintf(label, sizeof label, "%s_scalar %s s=%g", cases[k].name, kiln_dtype_name(dt), scalars[s]);
                if (got) EW_EXPECT_CLOSE(label, got, want, R * C, 0, 0);
                free(got);
            }
    }
    EW_NO_LEAKS(m);
}

KT_TEST(logical_not_every_dtype) {
    ew_mark m = ew_mark_now();
    enum { R = 6, C = 35 };
    double v[R * C], want[R * C];
    for (int d = 0; d < EW_NDTYPES; d++)
        for (int l = 0; l < EW_NLAYOUTS; l++) {
            kiln_dtype dt = ew_dtypes[d];
            tie_values(v, R * C, dt);
            if (ew_is_float(dt)) v[0] = NAN, v[1] = -0.0;
            kiln_tensor x = ew_matrix(dt, R, C, v, (ew_layout)l);
            for (int i = 0; i < R * C; i++) want[i] = v[i] == 0;
            double *got = ew_read(kiln_logical_not(x), KILN_BOOL, R * C);
            char label[64];
            snprintf(label, sizeof label, "logical_not %s %s", kiln_dtype_name(dt), ew_layout_names[l]);
            if (got) EW_EXPECT_CLOSE(label, got, want, R * C, 0, 0);
            free(got);
        }
    const kiln_shape shapes[] = {KILN_SHAPE(0), KILN_SCALAR_SHAPE, KILN_SHAPE(1, 1, 3)};
    for (int s = 0; s < 3; s++) {
        int64_t n = kiln_shape_numel(shapes[s]);
        tie_values(v, n, KILN_I32);
        for (int i = 0; i < n; i++) want[i] = v[i] == 0;
        double *got = ew_read(kiln_logical_not(ew_tensor(KILN_I32, shapes[s], v)), KILN_BOOL, n);
        if (got) EW_EXPECT_CLOSE("logical_not small", got, want, n, 0, 0);
        free(got);
    }
    EW_NO_LEAKS(m);
}

/* Bool bytes from user data may hold any non-zero value: all of them mean true. */
KT_TEST(bool_bytes_other_than_one) {
    ew_mark m = ew_mark_now();
    const uint8_t a[] = {2, 255, 0, 1, 7, 0}, b[] = {1, 3, 0, 0, 0, 9};
    const uint8_t want_and[] = {1, 1, 0, 0, 0, 0}, want_or[] = {1, 1, 0, 1, 1, 1}, want_eq[] = {1, 1, 1, 0, 0, 0},
                  want_not[] = {0, 0, 1, 0, 0, 1}, want_lt[] = {0, 0, 0, 0, 0, 1};
    const struct {
        op2_fn op;
        const uint8_t *want;
    } ops[] = {{kiln_logical_and, want_and}, {kiln_logical_or, want_or}, {kiln_eq, want_eq}, {kiln_lt, want_lt}};
    for (int k = 0; k < 4; k++) {
        uint8_t got[6];
        kiln_tensor x = kiln_from_data(KILN_CPU, KILN_BOOL, KILN_SHAPE(6), a), y = kiln_from_data(KILN_CPU, KILN_BOOL, KILN_SHAPE(6), b);
        KT_CHECK(kiln_into_data(ops[k].op(x, y), got, sizeof got) == KILN_OK);
        KT_CHECK_MSG(memcmp(got, ops[k].want, sizeof got) == 0, "op %d", k);
    }
    uint8_t got[6];
    KT_CHECK(kiln_into_data(kiln_logical_not(kiln_from_data(KILN_CPU, KILN_BOOL, KILN_SHAPE(6), a)), got, sizeof got) == KILN_OK);
    KT_CHECK(memcmp(got, want_not, sizeof got) == 0);
    EW_NO_LEAKS(m);
}

static kiln_memory_stats stats(void) { return kiln_memory_stats_get(KILN_CPU); }

/* Bool inputs give bool outputs of the same size: the lhs (then rhs) buffer is reused. Wider
 * inputs cannot hold the result. */
KT_TEST(in_place_reuse) {
    ew_mark m = ew_mark_now();
    const uint8_t a[] = {1, 0, 1, 0}, b[] = {1, 1, 0, 0}, want[] = {1, 0, 0, 0};
    uint8_t got[4];
    kiln_tensor x = kiln_from_data(KILN_CPU, KILN_BOOL, KILN_SHAPE(4), a), y = kiln_from_data(KILN_CPU, KILN_BOOL, KILN_SHAPE(4), b);
    kiln_memory_stats s0 = stats();
    kiln_tensor r = kiln_logical_and(x, y);
    KT_CHECK(stats().alloc_count == s0.alloc_count && stats().inplace_reuses == s0.inplace_reuses + 1);
    KT_CHECK(kiln_into_data(r, got, sizeof got) == KILN_OK && memcmp(got, want, 4) == 0);
    x = kiln_from_data(KILN_CPU, KILN_BOOL, KILN_SHAPE(4), a), y = kiln_from_data(KILN_CPU, KILN_BOOL, KILN_SHAPE(4), b);
    kiln_tensor keep = kiln_ref(x);
    s0 = stats();
    r = kiln_logical_not(x);
    KT_CHECK(stats().alloc_count == s0.alloc_count + 1);
    KT_CHECK(kiln_into_data(r, got, sizeof got) == KILN_OK && got[0] == 0 && got[1] == 1);
    s0 = stats();
    r = kiln_eq(keep, y); /* keep is now the single owner: reused */
    KT_CHECK(stats().alloc_count == s0.alloc_count && stats().inplace_reuses == s0.inplace_reuses + 1);
    KT_CHECK(kiln_into_data(r, got, sizeof got) == KILN_OK && got[0] == 1 && got[1] == 0 && got[2] == 0 && got[3] == 1);
    float f[4] = {1, 2, 3, 4};
    s0 = stats();
    r = kiln_lt_scalar(kiln_from_data(KILN_CPU, KILN_F32, KILN_SHAPE(4), f), 2.5);
    KT_CHECK(stats().alloc_count == s0.alloc_count + 2); /* the input, then the bool result */
    KT_CHECK(kiln_into_data(r, got, sizeof got) == KILN_OK && got[0] == 1 && got[1] == 1 && got[2] == 0);
    EW_NO_LEAKS(m);
}

KT_TEST(bad_input) {
    ew_mark m = ew_mark_now();
#define CALL(op, a, b) (kiln_set_call_site(__FILE__, line = __LINE__), (op)((a), (b)))
    for (int k = 0; k < NCASES; k++) {
        int line;
        kiln_tensor x = kiln_ones(KILN_CPU, KILN_F32, KILN_SHAPE(2, 3)), y = kiln_ones(KILN_CPU, KILN_I32, KILN_SHAPE(2));
        kiln_tensor r = CALL(cases[k].op, x, y);
        EW_EXPECT_ERROR(r, KILN_ERR_SHAPE, "kiln_", line);
        y = kiln_ones(KILN_CPU, KILN_F32, KILN_SHAPE(2));
        r = CALL(cases[k].op, KILN_NONE, y);
        EW_EXPECT_ERROR(r, KILN_ERR_NULL, "kiln_", line);
        x = ew_stale(), y = kiln_ones(KILN_CPU, KILN_F32, KILN_SHAPE(2));
        r = CALL(cases[k].op, x, y);
        EW_EXPECT_ERROR(r, KILN_ERR_STALE_HANDLE, "kiln_neg", line);
        x = kiln_ones(KILN_CPU, KILN_BOOL, KILN_SHAPE(3));
        kiln_tensor bad = EW_POISONED(); line = __LINE__;
        EW_EXPECT_ERROR(cases[k].op(x, bad), KILN_ERR_SHAPE, "kiln_reshape", line);
        if (cases[k].op_scalar) {
            x = ew_stale();
            kiln_set_call_site(__FILE__, line = __LINE__);
            EW_EXPECT_ERROR(cases[k].op_scalar(x, 1), KILN_ERR_STALE_HANDLE, "kiln_neg", line);
        }
    }
#undef CALL
    int line;
    kiln_tensor r = kiln_logical_not(KILN_NONE); line = __LINE__;
    EW_EXPECT_ERROR(r, KILN_ERR_NULL, "kiln_logical_not", line);
    kiln_tensor bad = EW_POISONED(); line = __LINE__;
    EW_EXPECT_ERROR(kiln_logical_not(bad), KILN_ERR_SHAPE, "kiln_reshape", line);
    r = kiln_ge(kiln_zeros(KILN_CPU, KILN_F32, KILN_SHAPE(4, 3)), kiln_zeros(KILN_CPU, KILN_F64, KILN_SHAPE(4))); line = __LINE__;
    EW_EXPECT_ERROR(r, KILN_ERR_SHAPE, "kiln_ge", line);
    r = kiln_eq_scalar(KILN_NONE, 1); line = __LINE__;
    EW_EXPECT_ERROR(r, KILN_ERR_NULL, "kiln_eq_scalar", line);
    kiln_clear_error();
    EW_NO_LEAKS(m);
}

int main(void) {
    KT_RUN(every_dtype_pair);
    KT_RUN(broadcasting_views_and_sizes);
    KT_RUN(nan_and_infinities);
    KT_RUN(scalar_forms);
    KT_RUN(logical_not_every_dtype);
    KT_RUN(bool_bytes_other_than_one);
    KT_RUN(in_place_reuse);
    KT_RUN(bad_input);
    return kt_finish();
}
