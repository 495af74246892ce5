/* Binary arithmetic (add sub mul div pow maximum minimum and their scalar forms) against
 * double references: every pair of dtypes with the promotion rules, broadcasting, views,
 * special values, in-place reuse (lhs first, then rhs), the relu gradient kernel, bad input. */
#include "ew_util.h"
#include "ops/ops-impl.h"

typedef kiln_tensor (*op2_fn)(kiln_tensor, kiln_tensor);
typedef kiln_tensor (*op_scalar_fn)(kiln_tensor, double);
typedef double (*ref2_fn)(double, double);

static double r_add(double x, double y) { return x + y; }
static double r_sub(double x, double y) { return x - y; }
static double r_mul(double x, double y) { return x * y; }
static double r_div(double x, double y) { return x / y; }
static double r_max(double x, double y) { return isnan(x) || isnan(y) ? NAN : x > y ? x : y; }
static double r_min(double x, double y) { return isnan(x) || isnan(y) ? NAN : x < y ? x : y; }
static double r_rsub(double x, double y) { return y - x; }
static double r_rdiv(double x, double y) { return y / x; }

typedef struct {
    const char *name;
    op2_fn op;
    ref2_fn ref;
    double lo, hi, blo, bhi; /* ranges of a and b */
    bool float_math;         /* integers compute in (and return) f32 */
} binary_case;

static const binary_case cases[] = {
    {"add", kiln_add, r_add, -50, 50, -50, 50, false},
    {"sub", kiln_sub, r_sub, -50, 50, -50, 50, false},
    {"mul", kiln_mul, r_mul, -50, 50, -50, 50, false},
    {"div", kiln_div, r_div, -50, 50, -9, 9, true},
    {"pow", kiln_pow, pow, 0, 4, -3, 3, true},
    {"maximum", kiln_maximum, r_max, -50, 50, -50, 50, false},
    {"minimum", kiln_minimum, r_min, -50, 50, -50, 50, false},
};
#define NCASES ((int)(sizeof cases / sizeof cases[0]))

/* The dtype the kernel computes in, and the one returned. */
static kiln_dtype kernel_dtype(const binary_case *bc, kiln_dtype p) {
    if (p == KILN_F16 || p == KILN_BF16) return KILN_F32;
    if (bc->float_math && !ew_is_float(p)) return KILN_F32;
    return p == KILN_BOOL ? KILN_I32 : p;
}
static kiln_dtype result_dtype(const binary_case *bc, kiln_dtype p) {
    return p == KILN_F16 || p == KILN_BF16 ? p : kernel_dtype(bc, p);
}

static double tolerance(const binary_case *bc, kiln_dtype rd) {
    return bc->ref == pow && rd == KILN_F32 ? 1e-6 : ew_rtol(rd);
}

typedef struct {
    const binary_case *bc;
    kiln_dtype kd, rd;
} binary_ref;

/* Inputs converted to the kernel's dtype, the result rounded there and then to the result's. */
static double expect(const void *ctx, double x, double y) {
    const binary_ref *r = ctx;
    return ew_round(r->rd, ew_round(r->kd, r->bc->ref(ew_round(r->kd, x), ew_round(r->kd, y))));
}

/* a (shape sa, layout la, dtype da) op b: checks shape, dtype and every value. */
static void check_pair(const binary_case *bc, kiln_dtype da, kiln_shape sa, ew_layout la, kiln_dtype db, kiln_shape sb,
                       ew_layout lb) {
    binary_ref r = {bc, kernel_dtype(bc, ew_promote(da, db)), result_dtype(bc, ew_promote(da, db))};
    ew_check_binary(bc->name, bc->op, (ew_operand){da, sa, la, bc->lo, bc->hi, 0}, (ew_operand){db, sb, lb, bc->blo, bc->bhi, 0},
                    r.rd, expect, &r, tolerance(bc, r.rd));
}

KT_TEST(every_dtype_pair) {
    ew_mark m = ew_mark_now();
    for (int k = 0; k < NCASES; k++)
        for (int i = 0; i < EW_NDTYPES; i++)
            for (int j = 0; j < EW_NDTYPES; j++) {
                kiln_dtype da = ew_dtypes[i], db = ew_dtypes[j];
                if (cases[k].op == kiln_sub && da == KILN_BOOL && db == KILN_BOOL) continue; /* refused */
                check_pair(&cases[k], da, KILN_SHAPE(5, 19), EW_DENSE, db, KILN_SHAPE(5, 19), EW_DENSE);
            }
    EW_NO_LEAKS(m);
}

KT_TEST(broadcasting_and_views) {
    ew_mark m = ew_mark_now();
    enum { R = 9, C = 35 };
    const struct {
        kiln_shape a, b;
    } shapes[] = {
        {KILN_SHAPE(R, C), KILN_SHAPE(R, C)}, {KILN_SHAPE(R, C), KILN_SHAPE(C)},    {KILN_SHAPE(C), KILN_SHAPE(R, C)},
        {KILN_SHAPE(R, C), KILN_SHAPE(R, 1)}, {KILN_SHAPE(R, 1), KILN_SHAPE(R, C)}, {KILN_SHAPE(1, C), KILN_SHAPE(R, 1)},
        {KILN_SHAPE(R, C), KILN_SCALAR_SHAPE}, {KILN_SCALAR_SHAPE, KILN_SHAPE(R, C)}, {KILN_SHAPE(2, 1, C), KILN_SHAPE(3, 1)},
        {KILN_SHAPE(0, C), KILN_SHAPE(C)},    {KILN_SHAPE(R, 0), KILN_SHAPE(R, 1)}, {KILN_SCALAR_SHAPE, KILN_SCALAR_SHAPE},
        {KILN_SHAPE(1, 1, 1), KILN_SHAPE(1)},
    };
    const kiln_dtype dts[] = {KILN_F32, KILN_F64, KILN_I32, KILN_I64};
    for (int k = 0; k < NCASES; k++)
        for (int s = 0; s < (int)(sizeof shapes / sizeof shapes[0]); s++)
            for (int d = 0; d < 4; d++)
                for (int la = 0; la < EW_NLAYOUTS; la++)
                    for (int lb = 0; lb < EW_NLAYOUTS; lb++) {
                        if (la != lb && la != EW_DENSE && lb != EW_DENSE) continue;
                        check_pair(&cases[k], dts[d], shapes[s].a, (ew_layout)la, dts[d], shapes[s].b, (ew_layout)lb);
                    }
    EW_NO_LEAKS(m);
}

KT_TEST(large_dense_runs) {
    ew_mark m = ew_mark_now();
    for (int k = 0; k < NCASES; k++) {
        check_pair(&cases[k], KILN_F32, KILN_SHAPE(70001), EW_DENSE, KILN_F32, KILN_SHAPE(70001), EW_DENSE);
        check_pair(&cases[k], KILN_F32, KILN_SHAPE(70001), EW_DENSE, KILN_F32, KILN_SCALAR_SHAPE, EW_DENSE);
        check_pair(&cases[k], KILN_F64, KILN_SCALAR_SHAPE, EW_DENSE, KILN_F64, KILN_SHAPE(70001), EW_DENSE);
        check_pair(&cases[k], KILN_I32, KILN_SHAPE(300, 257), EW_DENSE, KILN_I32, KILN_SHAPE(257), EW_DENSE);
        check_pair(&cases[k], KILN_I64, KILN_SHAPE(300, 257), EW_TRANSPOSED, KILN_I64, KILN_SHAPE(300, 1), EW_DENSE);
    }
    EW_NO_LEAKS(m);
}

/* IEEE specials in every pair: infinities, NaN (maximum/minimum propagate it), signed zeros,
 * division by zero (also of integers, which divide in f32). */
KT_TEST(special_values) {
    ew_mark m = ew_mark_now();
    const double sp[] = {0.0, -0.0, 1.0, -1.0, 2.5, -3.0, INFINITY, -INFINITY, NAN, 1e-30, 3e38};
    enum { N = sizeof sp / sizeof sp[0] };
    double a[N * N], b[N * N], want[N * N];
    for (int i = 0; i < N; i++)
        for (int j = 0; j < N; j++) a[i * N + j] = sp[i], b[i * N + j] = sp[j];
    for (int k = 0; k < NCASES; k++)
        for (int d = 0; d < 2; d++) {
            kiln_dtype dt = d ? KILN_F64 : KILN_F32;
            double ra[N * N], rb[N * N];
            for (int i = 0; i < N * N; i++) {
                ra[i] = ew_round(dt, a[i]), rb[i] = ew_round(dt, b[i]);
                want[i] = ew_round(dt, cases[k].ref(ra[i], rb[i]));
            }
            double *got = ew_read(cases[k].op(ew_tensor(dt, KILN_SHAPE(N * N), ra), ew_tensor(dt, KILN_SHAPE(N * N), rb)), dt, N * N);
            char label[64];
            snprintf(label, sizeof label, "%s %s special", cases[k].name, kiln_dtype_name(dt));
            if (got) EW_EXPECT_CLOSE(label, got, want, N * N, tolerance(&cases[k], dt), 0);
            free(got);
        }
    int32_t num[] = {1, -1, 0, 7}, den[] = {0, 0, 0, 2};
    float q[4];
    kiln_tensor y = kiln_div(kiln_from_data(KILN_CPU, KILN_I32, KILN_SHAPE(4), num), kiln_from_data(KILN_CPU, KILN_I32, KILN_SHAPE(4), den));
    KT_CHECK(kiln_tensor_dtype(y) == KILN_F32);
    KT_CHECK(kiln_into_data(y, q, sizeof q) == KILN_OK);
    KT_CHECK(isinf(q[0]) && q[0] > 0 && isinf(q[1]) && q[1] < 0 && isnan(q[2]) && q[3] == 3.5f);
    /* integer overflow wraps instead of trapping */
    int32_t big[] = {INT32_MAX, INT32_MIN}, one[] = {1, 1}, w[2];
    y = kiln_add(kiln_from_data(KILN_CPU, KILN_I32, KILN_SHAPE(2), big), kiln_from_data(KILN_CPU, KILN_I32, KILN_SHAPE(2), one));
    KT_CHECK(kiln_into_data(y, w, sizeof w) == KILN_OK);
    KT_CHECK(w[0] == INT32_MIN && w[1] == INT32_MIN + 1);
    EW_NO_LEAKS(m);
}

typedef struct {
    const char *name;
    op_scalar_fn op;
    ref2_fn ref;
    bool float_math;
} scalar_case;

static const scalar_case scalar_cases[] = {
    {"add_scalar", kiln_add_scalar, r_add, false},   {"sub_scalar", kiln_sub_scalar, r_sub, false},
    {"rsub_scalar", kiln_rsub_scalar, r_rsub, false}, {"mul_scalar", kiln_mul_scalar, r_mul, false},
    {"div_scalar", kiln_div_scalar, r_div, true},    {"rdiv_scalar", kiln_rdiv_scalar, r_rdiv, true},
    {"pow_scalar", kiln_pow_scalar, pow, true},      {"maximum_scalar", kiln_maximum_scalar, r_max, false},
    {"minimum_scalar", kiln_minimum_scalar, r_min, false},
};

/* A scalar takes the tensor's dtype, except that a fractional one makes integers f32 and one
 * past i32's range makes i32 (and bool) i64. */
KT_TEST(scalar_variants) {
    ew_mark m = ew_mark_now();
    const double scalars[] = {2, -1.5, 0.5, 0, 3, 1e10, NAN};
    enum { R = 4, C = 33 };
    double v[R * C], want[R * C];
    for (int k = 0; k < (int)(sizeof scalar_cases / sizeof scalar_cases[0]); k++) {
        const scalar_case *sc = &scalar_cases[k];
        for (int d = 0; d < EW_NDTYPES; d++) {
            kiln_dtype dt = ew_dtypes[d];
            for (int s = 0; s < (int)(sizeof scalars / sizeof scalars[0]); s++) {
                double sv = scalars[s];
                bool whole = sv == floor(sv);
                kiln_dtype xd = dt;
                if (!ew_is_float(dt) && !whole) xd = KILN_F32;
                else if (dt == KILN_BOOL) xd = KILN_I64; /* as torch: bool with a whole number */
                if (xd == KILN_I32 && fabs(sv) > 2147483647.0) xd = KILN_I64;
                kiln_dtype kd = xd == KILN_F16 || xd == KILN_BF16 || (sc->float_math && !ew_is_float(xd)) ? KILN_F32 : xd;
                kiln_dtype rd = xd == KILN_F16 || xd == KILN_BF16 ? xd : kd;
                ew_values(v, R * C, dt, -9, 9);
                kiln_tensor x = ew_matrix(dt, R, C, v, (ew_layout)((k + s) % EW_NLAYOUTS));
                for (int i = 0; i < R * C; i++)
                    want[i] = ew_round(rd, ew_round(kd, sc->ref(ew_round(kd, v[i]), ew_round(kd, sv))));
                kiln_set_call_site(__FILE__, __LINE__);
                double *got = ew_read(sc->op(x, sv), rd, R * C);
                char label[96];
                snprintf(label, sizeof label, "%s %s s=%g", sc->name, kiln_dtype_name(dt), sv);
                if (got) EW_EXPECT_CLOSE(label, got, want, R * C, sc->ref == pow ? 1e-6 : ew_rtol(rd), 0);
                free(got);
            }
        }
    }
    /* int * 1.5 -> f32; i32 + 2 stays i32; 1e10 does not fit i32 and is not wrapped */
    int32_t iv[] = {1, -2, 3};
    kiln_tensor x = kiln_from_data(KILN_CPU, KILN_I32, KILN_SHAPE(3), iv);
        kiln_tensor h = kiln_mul_scalar(kiln_ref(x), 1.5), t = kiln_add_scalar(kiln_ref(x), 2), g = kiln_add_scalar(x, 1e10);
    KT_CHECK(kiln_tensor_dtype(h) == KILN_F32 && kiln_tensor_dtype(t) == KILN_I32 && kiln_tensor_dtype(g) == KILN_I64);
    float hv[3];
    int32_t tv[3];
    int64_t gv[3];
    KT_CHECK(kiln_into_data(h, hv, sizeof hv) == KILN_OK && hv[0] == 1.5f && hv[1] == -3.0f && hv[2] == 4.5f);
    KT_CHECK(kiln_into_data(t, tv, sizeof tv) == KILN_OK && tv[0] == 3 && tv[1] == 0 && tv[2] == 5);
    KT_CHECK(kiln_into_data(g, gv, sizeof gv) == KILN_OK && gv[0] == 10000000001LL && gv[1] == 9999999998LL);
    EW_NO_LEAKS(m);
}

static void *data_of(kiln_tensor t) {
    kiln__tensor *p = kiln__handle_peek(t, "test", NULL);
    return p && p->storage ? p->storage->data : NULL;
}

static kiln_memory_stats stats(void) { return kiln_memory_stats_get(KILN_CPU); }

/* Reads t (consumed) and checks it holds want (n f32 values). */
static void expect_f32(kiln_tensor t, const float *want, int n, const char *what) {
    float got[64];
    KT_CHECK(n <= 64 && kiln_into_data(t, got, sizeof(float) * (size_t)n) == KILN_OK);
    int bad = 0;
    for (int i = 0; i < n; i++) bad += got[i] != want[i];
    KT_CHECK_MSG(bad == 0, "%s: %d values differ", what, bad);
}

/* The output reuses the lhs buffer when it has a single owner, else the rhs, else a new one;
 * an input with another handle alive, or borrowed, keeps its values. */
KT_TEST(in_place_lhs_then_rhs) {
    ew_mark m = ew_mark_now();
    float av[20], bv[20], diff[20], quot[20];
    for (int i = 0; i < 20; i++) {
        av[i] = (float)(i - 7), bv[i] = (float)(2 * i + 1);
        diff[i] = av[i] - bv[i], quot[i] = av[i] / bv[i];
    }
    /* both single owners: lhs */
    kiln_tensor a = kiln_from_data(KILN_CPU, KILN_F32, KILN_SHAPE(4, 5), av);
    kiln_tensor b = kiln_from_data(KILN_CPU, KILN_F32, KILN_SHAPE(4, 5), bv);
    void *pa = data_of(a);
    kiln_memory_stats s0 = stats();
    kiln_tensor y = kiln_sub(a, b);
    KT_CHECK(stats().alloc_count == s0.alloc_count && stats().inplace_reuses == s0.inplace_reuses + 1);
    KT_CHECK(data_of(y) == pa);
    expect_f32(y, diff, 20, "sub into lhs");
    /* lhs shared: rhs (the kernel's output aliases its second input) */
    a = kiln_from_data(KILN_CPU, KILN_F32, KILN_SHAPE(4, 5), av);
    b = kiln_from_data(KILN_CPU, KILN_F32, KILN_SHAPE(4, 5), bv);
    void *pb = data_of(b);
    kiln_tensor keep = kiln_ref(a);
    s0 = stats();
    y = kiln_div(a, b);
    KT_CHECK(stats().alloc_count == s0.alloc_count && data_of(y) == pb);
    expect_f32(y, quot, 20, "div into rhs");
    expect_f32(keep, av, 20, "shared lhs");
    /* lhs too small for the broadcast result: rhs */
    a = kiln_from_data(KILN_CPU, KILN_F32, KILN_SHAPE(5), av);
    b = kiln_from_data(KILN_CPU, KILN_F32, KILN_SHAPE(4, 5), bv);
    pb = data_of(b);
    y = kiln_sub(a, b);
    KT_CHECK(data_of(y) == pb);
    float bdiff[20];
    for (int i = 0; i < 20; i++) bdiff[i] = av[i % 5] - bv[i];
    expect_f32(y, bdiff, 20, "broadcast sub into rhs");
    /* both shared: a new buffer, inputs untouched */
    a = kiln_from_data(KILN_CPU, KILN_F32, KILN_SHAPE(4, 5), av);
    b = kiln_from_data(KILN_CPU, KILN_F32, KILN_SHAPE(4, 5), bv);
    kiln_tensor ka = kiln_ref(a), kb = kiln_ref(b);
    s0 = stats();
    y = kiln_sub(a, b);
    KT_CHECK(stats().alloc_count == s0.alloc_count + 1 && stats().inplace_reuses == s0.inplace_reuses);
    expect_f32(y, diff, 20, "sub new buffer");
    expect_f32(ka, av, 20, "shared lhs");
    expect_f32(kb, bv, 20, "shared rhs");
    /* borrowed lhs is never written: rhs is reused; both borrowed: a new buffer */
    float host_a[20], host_b[20];
    memcpy(host_a, av, sizeof av);
    memcpy(host_b, bv, sizeof bv);
    b = kiln_from_data(KILN_CPU, KILN_F32, KILN_SHAPE(4, 5), bv);
    pb = data_of(b);
    y = kiln_sub(kiln_from_borrowed(KILN_F32, KILN_SHAPE(4, 5), host_a, NULL, NULL), b);
    KT_CHECK(data_of(y) == pb);
    expect_f32(y, diff, 20, "borrowed lhs");
    s0 = stats();
    y = kiln_sub(kiln_from_borrowed(KILN_F32, KILN_SHAPE(4, 5), host_a, NULL, NULL),
                 kiln_from_borrowed(KILN_F32, KILN_SHAPE(4, 5), host_b, NULL, NULL));
    KT_CHECK(stats().alloc_count == s0.alloc_count + 1);
    expect_f32(y, diff, 20, "both borrowed");
    KT_CHECK(memcmp(host_a, av, sizeof av) == 0 && memcmp(host_b, bv, sizeof bv) == 0);
    /* i32 lhs converts to f32 in its own buffer, then takes the result: no allocation */
    int32_t iv[20];
    float sum[20];
    for (int i = 0; i < 20; i++) iv[i] = i - 7, sum[i] = (float)iv[i] + bv[i];
    kiln_tensor ai = kiln_from_data(KILN_CPU, KILN_I32, KILN_SHAPE(4, 5), iv);
    keep = kiln_ref(b = kiln_from_data(KILN_CPU, KILN_F32, KILN_SHAPE(4, 5), bv));
    pa = data_of(ai);
    s0 = stats();
    y = kiln_add(ai, b);
    KT_CHECK(stats().alloc_count == s0.alloc_count && data_of(y) == pa);
    expect_f32(y, sum, 20, "i32 + f32 in place");
    kiln_release(keep);
    EW_NO_LEAKS(m);
}

/* RELU_BACKWARD has no public function yet (autodiff will call it): run it as an op record. */
static kiln_tensor relu_backward(kiln_tensor grad, kiln_tensor x) {
    kiln__opctx c = {.name = "relu_backward", .err = NULL};
    kiln__tensor *g = kiln__arg(&c, grad), *t = kiln__arg(&c, x);
    if (!kiln__ok(&c, g) || !kiln__ok(&c, t)) return kiln__drop(2, g, t), kiln__result(&c, NULL);
    kiln__tensor *out = kiln__t_empty(&c, g->device, g->dtype, g->ndim, g->shape);
    if (out) {
        kiln__op op;
        kiln__op_init(&op, KILN__OP_RELU_BACKWARD, c.name);
        op.in[0] = kiln__view_of(g);
        op.in[1] = kiln__view_broadcast(t, g->ndim, g->shape);
        op.out[0] = kiln__view_of(out);
        op.n_in = 2;
        op.n_out = 1;
        if (!kiln__t_submit(&c, &op, g->device)) kiln__tensor_release(out), out = NULL;
    }
    kiln__drop(2, g, t);
    return kiln__result(&c, out);
}

KT_TEST(relu_backward_kernel) {
    ew_mark m = ew_mark_now();
    enum { R = 7, C = 29 };
    double gv[R * C], xv[R * C], want[R * C];
    for (int d = 0; d < 2; d++) {
        kiln_dtype dt = d ? KILN_F64 : KILN_F32;
        for (int l = 0; l < EW_NLAYOUTS; l++) {
            ew_values(gv, R * C, dt, -5, 5);
            ew_values(xv, R * C, dt, -1, 1);
            xv[3] = NAN, xv[4] = 0.0, xv[5] = -0.0;
            kiln_tensor g = ew_matrix(dt, R, C, gv, (ew_layout)l), x = ew_matrix(dt, R, C, xv, (ew_layout)((l + 1) % EW_NLAYOUTS));
            for (int i = 0; i < R * C; i++) want[i] = xv[i] > 0 ? gv[i] : 0;
            double *got = ew_read(relu_backward(g, x), dt, R * C);
            if (got) EW_EXPECT_CLOSE("relu_backward", got, want, R * C, 0, 0);
            free(got);
        }
    }
    EW_NO_LEAKS(m);
}

KT_TEST(bad_input) {
    ew_mark m = ew_mark_now();
    /* called through pointers: the call site is set by hand, after the arguments exist */
#define CALL(op, a, b) (kiln_set_call_site(__FILE__, line = __LINE__), (op)((a), (b)))
    for (int k = 0; k < NCASES; k++) {
        const binary_case *bc = &cases[k];
        int line;
        kiln_tensor x = kiln_ones(KILN_CPU, KILN_F32, KILN_SHAPE(2, 3)), y = kiln_ones(KILN_CPU, KILN_F32, KILN_SHAPE(4));
        kiln_tensor r = CALL(bc->op, x, y);
        EW_EXPECT_ERROR(r, KILN_ERR_SHAPE, "kiln_", line);
        x = kiln_ones(KILN_CPU, KILN_F32, KILN_SHAPE(2));
        r = CALL(bc->op, x, KILN_NONE);
        EW_EXPECT_ERROR(r, KILN_ERR_NULL, "kiln_", line);
        y = kiln_ones(KILN_CPU, KILN_F32, KILN_SHAPE(2));
        r = CALL(bc->op, KILN_NONE, y);
        EW_EXPECT_ERROR(r, KILN_ERR_NULL, "kiln_", line);
        x = kiln_ones(KILN_CPU, KILN_F32, KILN_SHAPE(2)), y = ew_stale();
        r = CALL(bc->op, x, y);
        EW_EXPECT_ERROR(r, KILN_ERR_STALE_HANDLE, "kiln_neg", line);
        x = ew_stale(), y = ew_stale();
        r = CALL(bc->op, x, y);
        EW_EXPECT_ERROR(r, KILN_ERR_STALE_HANDLE, "kiln_neg", line);
        x = kiln_ones(KILN_CPU, KILN_F32, KILN_SHAPE(3));
        kiln_tensor bad = EW_POISONED(); line = __LINE__;
        EW_EXPECT_ERROR(bc->op(x, bad), KILN_ERR_SHAPE, "kiln_reshape", line);
        y = kiln_ones(KILN_CPU, KILN_I32, KILN_SHAPE(3));
        bad = EW_POISONED(); line = __LINE__;
        EW_EXPECT_ERROR(bc->op(bad, y), KILN_ERR_SHAPE, "kiln_reshape", line);
    }
#undef CALL
    int line;
    kiln_tensor r = kiln_add(kiln_zeros(KILN_CPU, KILN_F32, KILN_SHAPE(3, 2)), kiln_zeros(KILN_CPU, KILN_F32, KILN_SHAPE(3))); line = __LINE__;
    EW_EXPECT_ERROR(r, KILN_ERR_SHAPE, "kiln_add", line);
    r = kiln_sub(kiln_ones(KILN_CPU, KILN_BOOL, KILN_SHAPE(3)), kiln_ones(KILN_CPU, KILN_BOOL, KILN_SHAPE(3))); line = __LINE__;
    EW_EXPECT_ERROR(r, KILN_ERR_DTYPE, "kiln_sub", line);
    r = kiln_mul_scalar(KILN_NONE, 2); line = __LINE__;
    EW_EXPECT_ERROR(r, KILN_ERR_NULL, "kiln_mul_scalar", line);
    kiln_tensor bad = EW_POISONED(); line = __LINE__;
    EW_EXPECT_ERROR(kiln_pow_scalar(bad, 2), KILN_ERR_SHAPE, "kiln_reshape", line);
    kiln_clear_error();
    EW_NO_LEAKS(m);
}

int main(void) {
    KT_RUN(every_dtype_pair);
    KT_RUN(broadcasting_and_views);
    KT_RUN(large_dense_runs);
    KT_RUN(special_values);
    KT_RUN(scalar_variants);
    KT_RUN(in_place_lhs_then_rhs);
    KT_RUN(relu_backward_kernel);
    KT_RUN(bad_input);
    return kt_finish();
}
