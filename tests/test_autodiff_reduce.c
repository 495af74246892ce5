/* Gradients of the reductions (sum, mean, prod, max, min, var, std, logsumexp) and of
 * softmax / log_softmax: finite-difference checks over whole tensors and dim lists
 * (negative, several, empty), keepdim both ways, on contiguous, transposed and sliced inputs;
 * prod at zeros against a double-precision reference; what a node keeps; bad input. */
#include "gradcheck.h"

typedef kiln_tensor (*dims_fn)(kiln_tensor, kiln_dims, bool);
typedef kiln_tensor (*whole_fn)(kiln_tensor);

static kiln_memory_stats stats(void) {
    kiln_sync();
    return kiln_memory_stats_get(KILN_CPU);
}

/* The [3,4,5] input is given as is, as the transpose of [5,4,3], or as every other row of
 * [3,8,5]. */
enum { PLAIN, TRANSPOSED, SLICED, N_VIEWS };
static const char *const view_names[N_VIEWS] = {"plain", "transposed", "sliced"};

static kiln_shape input_shape(int view) {
    return view == TRANSPOSED ? KILN_SHAPE(5, 4, 3) : view == SLICED ? KILN_SHAPE(3, 8, 5) : KILN_SHAPE(3, 4, 5);
}

static kiln_tensor seen_as(kiln_tensor x, int view) {
    if (view == TRANSPOSED) return kiln_transpose(x, 0, 2);
    if (view == SLICED) return kiln_slice(x, 1, 0, 8, 2);
    return x;
}

typedef struct {
    dims_fn fn;     /* or whole, when NULL */
    whole_fn whole;
    kiln_dims dims;
    bool keepdim;
    int view;
    bool positive; /* maps the input into [0.5, 1.5] (prod) */
} red_case;

static kiln_tensor run_reduce(kiln_tensor *in, void *ctx) {
    const red_case *r = ctx;
    kiln_tensor x = seen_as(in[0], r->view);
    if (r->positive) x = kiln_add_scalar(kiln_mul_scalar(x, 0.5), 1.0);
    return r->fn ? r->fn(x, r->dims, r->keepdim) : r->whole(x);
}

static kiln_tensor var0(kiln_tensor t, kiln_dims d, bool k) { return kiln_var_dims(t, d, 0, k); }
static kiln_tensor var1(kiln_tensor t, kiln_dims d, bool k) { return kiln_var_dims(t, d, 1, k); }
static kiln_tensor std0(kiln_tensor t, kiln_dims d, bool k) { return kiln_std_dims(t, d, 0, k); }
static kiln_tensor std1(kiln_tensor t, kiln_dims d, bool k) { return kiln_std_dims(t, d, 1, k); }

static void check_case(const char *op, const char *dims_name, red_case *r) {
    char name[160];
    kiln_shape s[1] = {input_shape(r->view)};
    snprintf(name, sizeof name, "%s dims=%s keepdim=%d %s", op, dims_name, r->keepdim, view_names[r->view]);
    GC_CHECK(name, run_reduce, r, 1, s, 1e-6);
}

KT_TEST(reductions_over_dim_lists) {
    struct {
        const char *name;
        dims_fn fn;
        bool positive, needs_dims; /* var/std of one element (no dims) divide by 0 */
    } ops[] = {
        {"sum", kiln_sum_dims, false, false},   {"mean", kiln_mean_dims, false, false},
        {"prod", kiln_prod_dims, true, false},  {"max", kiln_max_dims, false, false},
        {"min", kiln_min_dims, false, false},   {"var0", var0, false, true},
        {"var1", var1, false, true},            {"std0", std0, false, true},
        {"std1", std1, false, true},            {"logsumexp", kiln_logsumexp_dims, false, false},
    };
    struct {
        const char *name;
        kiln_dims dims;
    } lists[] = {
        {"all", KILN_ALL_DIMS},       {"(0)", KILN_DIMS(0)},           {"(1)", KILN_DIMS(1)},
        {"(-1)", KILN_DIMS(-1)},
        {"(0,2)", KILN_DIMS(0, 2)},   {"(-1,-3,1)", KILN_DIMS(-1, -3, 1)}, {"()", {0, {0}}},
    };
    int k = 0;
    for (size_t i = 0; i < sizeof ops / sizeof ops[0]; i++)
        for (size_t j = 0; j < sizeof lists / sizeof lists[0]; j++) {
            if (ops[i].needs_dims && lists[j].dims.n == 0) continue;
            for (int keep = 0; keep < 2; keep++) {
                red_case r = {.fn = ops[i].fn, .dims = lists[j].dims, .keepdim = keep, .view = k++ % N_VIEWS,
                              .positive = ops[i].positive};
                check_case(ops[i].name, lists[j].name, &r);
            }
        }
}

KT_TEST(whole_tensor_reductions) {
    struct {
        const char *name;
        whole_fn fn;
        bool positive;
    } ops[] = {{"sum", kiln_sum, false}, {"mean", kiln_mean, false}, {"prod", kiln_prod, true},
               {"max", kiln_max, false}, {"min", kiln_min, false}};
    for (size_t i = 0; i < sizeof ops / sizeof ops[0]; i++)
        for (int v = 0; v < N_VIEWS; v++) {
            red_case r = {.whole = ops[i].fn, .view = v, .positive = ops[i].positive};
            check_case(ops[i].name, "whole", &r);
        }
}

static kiln_tensor run_whole(kiln_tensor *in, void *ctx) { return ((whole_fn)ctx)(in[0]); }
static kiln_tensor run_sum_dim0(kiln_tensor *in, void *ctx) { return kiln_sum_dims(in[0], KILN_DIMS(0), false); }
static kiln_tensor run_max_last(kiln_tensor *in, void *ctx) { return kiln_max_dims(in[0], KILN_DIMS(-1), true); }

KT_TEST(zero_dim_size_one_and_empty) {
    kiln_shape scalar[1] = {KILN_SCALAR_SHAPE}, ones[1] = {KILN_SHAPE(1, 1, 1)}, empty[1] = {KILN_SHAPE(0, 3)};
    whole_fn fns[] = {kiln_sum, kiln_mean, kiln_prod, kiln_max, kiln_min};
    for (size_t i = 0; i < sizeof fns / sizeof fns[0]; i++) {
        GC_CHECK("0-d", run_whole, (void *)fns[i], 1, scalar, 1e-6);
        GC_CHECK("[1,1,1]", run_whole, (void *)fns[i], 1, ones, 1e-6);
    }
    GC_CHECK("max over a size-1 dim", run_max_last, NULL, 1, ones, 1e-6);
    GC_CHECK("sum of an empty tensor", run_sum_dim0, NULL, 1, empty, 1e-6);
}

/* prod is linear in each entry, so its derivative at a zero is the product of the others;
 * checked against that, computed here in double, for groups with no zero, one, and two. */
static void check_prod_at_zeros(kiln_dtype dtype) {
    const double x[3][4] = {{2, 0, 3, 4}, {1, 2, 3, 0.5}, {0, 5, 0, 1}};
    const double w[3] = {0.5, -2, 3};
    double want_rows[3][4], want_cols[3][4];
    for (int i = 0; i < 3; i++)
        for (int j = 0; j < 4; j++) {
            double others_row = 1, others_col = 1;
            for (int k = 0; k < 4; k++) others_row *= k == j ? 1 : x[i][k];
            for (int k = 0; k < 3; k++) others_col *= k == i ? 1 : x[k][j];
            want_rows[i][j] = w[i] * others_row;
            want_cols[i][j] = (j + 1) * others_col; /* the seed over columns is 1, 2, 3, 4 */
        }
    for (int over_cols = 0; over_cols < 2; over_cols++) {
        kiln_tensor t = kiln_cast(kiln_from_data(KILN_CPU, KILN_F64, KILN_SHAPE(3, 4), x), dtype);
        kiln_require_grad(t);
        kiln_tensor y, seed;
        if (over_cols) {
            y = kiln_prod_dims(kiln_ref(t), KILN_DIMS(0), true);
            seed = kiln_reshape(kiln_arange(KILN_CPU, dtype, 1, 5, 1), KILN_SHAPE(1, 4));
        } else {
            y = kiln_prod_dims(kiln_ref(t), KILN_DIMS(-1), false);
            seed = kiln_cast(kiln_from_data(KILN_CPU, KILN_F64, KILN_SHAPE(3), w), dtype);
        }
        kiln_grads *g = NULL;
        KT_CHECK(kiln_backward_seed(y, seed, &g) == KILN_OK);
        double got[3][4];
        KT_CHECK(kiln_into_data(kiln_cast(kiln_grad(g, t), KILN_F64), got, sizeof got) == KILN_OK);
        for (int i = 0; i < 3; i++)
            for (int j = 0; j < 4; j++) KT_NEAR(got[i][j], over_cols ? want_cols[i][j] : want_rows[i][j], 1e-6);
        kiln_grads_free(g);
        kiln_release(t);
    }
    /* the whole tensor, with exactly one zero */
    const double v[5] = {1.5, -2, 0, 4, 0.5};
    kiln_tensor t = kiln_cast(kiln_from_data(KILN_CPU, KILN_F64, KILN_SHAPE(5), v), dtype);
    kiln_require_grad(t);
    kiln_grads *g = NULL;
    KT_CHECK(kiln_backward(kiln_prod(kiln_ref(t)), &g) == KILN_OK);
    double got[5];
    KT_CHECK(kiln_into_data(kiln_cast(kiln_grad(g, t), KILN_F64), got, sizeof got) == KILN_OK);
    for (int i = 0; i < 5; i++) KT_NEAR(got[i], i == 2 ? 1.5 * -2 * 4 * 0.5 : 0.0, 1e-6);
    kiln_grads_free(g);
    kiln_release(t);
}

KT_TEST(prod_at_zeros) {
    check_prod_at_zeros(KILN_F64);
    check_prod_at_zeros(KILN_F32);
}

typedef struct {
    kiln_tensor (*fn)(kiln_tensor, int);
    int dim, view;
} softmax_case;

static kiln_tensor run_softmax(kiln_tensor *in, void *ctx) {
    const softmax_case *s = ctx;
    return s->fn(seen_as(in[0], s->view), s->dim);
}

KT_TEST(softmax_and_log_softmax) {
    const int dims[] = {0, 1, -1, 2};
    for (int f = 0; f < 2; f++)
        for (size_t d = 0; d < sizeof dims / sizeof dims[0]; d++)
            for (int v = 0; v < N_VIEWS; v++) {
                softmax_case s = {.fn = f ? kiln_log_softmax : kiln_softmax, .dim = dims[d], .view = v};
                kiln_shape sh[1] = {input_shape(v)};
                char name[96];
                snprintf(name, sizeof name, "%s dim=%d %s", f ? "log_softmax" : "softmax", dims[d], view_names[v]);
                GC_CHECK(name, run_softmax, &s, 1, sh, 1e-6);
            }
}

/* ---- dtypes -------------------------------------------------------------------------------- */

/* The gradient of fn at x in dtype dt (returned in dt) against the same in f64 from the same
 * rounded inputs and seed. Returns the mismatches. */
static int check_in_dtype(const char *name, kiln_tensor (*fn)(kiln_tensor), kiln_dtype dt, double tol) {
    double got[60], want[60];
    for (int pass = 0; pass < 2; pass++) {
        kiln_dtype d = pass ? dt : KILN_F64;
        kiln_tensor x = kiln_cast(kiln_uniform(KILN_CPU, KILN_F64, KILN_SHAPE(3, 4, 5), -1, 1, 5), dt);
        x = kiln_cast(x, d); /* the f64 pass starts from the same rounded values */
        kiln_require_grad(x);
        kiln_tensor y = fn(kiln_ref(x));
        kiln_tensor seed = kiln_uniform(KILN_CPU, KILN_F64, kiln_tensor_shape(y), -1, 1, 6);
        seed = kiln_cast(kiln_cast(seed, dt), d);
        kiln_grads *g = NULL;
        KT_CHECK(kiln_backward_seed(y, seed, &g) == KILN_OK);
        kiln_tensor dx = kiln_grad(g, x);
        KT_CHECK(kiln_tensor_dtype(dx) == d);
        KT_CHECK(kiln_into_data(kiln_cast(dx, KILN_F64), pass ? got : want, sizeof got) == KILN_OK);
        kiln_grads_free(g);
        kiln_release(x);
    }
    int bad = 0;
    for (int i = 0; i < 60; i++)
        if (!(fabs(got[i] - want[i]) <= tol * (1 + fabs(want[i]))) && bad++ < 3)
            fprintf(stderr, "  %s in %s: dx[%d] = %g, f64 gives %g\n", name, kiln_dtype_name(dt), i, got[i], want[i]);
    return bad;
}

static kiln_tensor sum_1(kiln_tensor x) { return kiln_sum_dims(x, KILN_DIMS(1), false); }
static kiln_tensor mean_02(kiln_tensor x) { return kiln_mean_dims(x, KILN_DIMS(0, 2), true); }
static kiln_tensor prod_last(kiln_tensor x) { return kiln_prod_dims(kiln_add_scalar(x, 2.0), KILN_DIMS(-1), false); }
static kiln_tensor max_0(kiln_tensor x) { return kiln_max_dims(x, KILN_DIMS(0), false); }
static kiln_tensor min_all(kiln_tensor x) { return kiln_min(x); }
static kiln_tensor std_1(kiln_tensor x) { return kiln_std_dims(x, KILN_DIMS(1), 1, false); }
static kiln_tensor var_all(kiln_tensor x) { return kiln_var_dims(x, KILN_ALL_DIMS, 0, false); }
static kiln_tensor lse_last(kiln_tensor x) { return kiln_logsumexp_dims(x, KILN_DIMS(-1), true); }
static kiln_tensor softmax_1(kiln_tensor x) { return kiln_softmax(x, 1); }
static kiln_tensor log_softmax_last(kiln_tensor x) { return kiln_log_softmax(x, -1); }

KT_TEST(f32_f16_bf16_gradients) {
    struct {
        const char *name;
        kiln_tensor (*fn)(kiln_tensor);
    } ops[] = {{"sum", sum_1},         {"mean", mean_02}, {"prod", prod_last}, {"max", max_0},
               {"min", min_all},       {"std", std_1},    {"var", var_all},    {"logsumexp", lse_last},
               {"softmax", softmax_1}, {"log_softmax", log_softmax_last}};
    struct {
        kiln_dtype dt;
        double tol;
    } dts[] = {{KILN_F32, 1e-5}, {KILN_F16, 1e-2}, {KILN_BF16, 5e-2}};
    for (size_t i = 0; i < sizeof ops / sizeof ops[0]; i++)
        for (size_t d = 0; d < sizeof dts / sizeof dts[0]; d++)
            KT_CHECK_MSG(check_in_dtype(ops[i].name, ops[i].fn, dts[d].dt, dts[d].tol) == 0, "%s in %s", ops[i].name,
                         kiln_dtype_name(dts[d].dt));
}

/* A node keeps only what its derivative reads: sum and mean nothing, max the winners'
 * positions, softmax its own output. Measured as what stays alive once x is released. */
KT_TEST(nodes_keep_only_what_they_need) {
    kiln_memory_stats base = stats();
    struct {
        const char *name;
        int what;
        uint64_t extra; /* bytes kept beyond the output */
    } cases[] = {{"sum", 0, 0}, {"mean", 1, 0}, {"max", 2, 256 * 8}, {"softmax", 3, 0}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        kiln_tensor x = kiln_randn(KILN_CPU, KILN_F32, KILN_SHAPE(256, 256), 3);
        kiln_require_grad(x);
        kiln_tensor y;
        uint64_t out_bytes = 256 * 4;
        switch (cases[i].what) {
        case 0: y = kiln_sum_dims(kiln_ref(x), KILN_DIMS(1), false); break;
        case 1: y = kiln_mean_dims(kiln_ref(x), KILN_DIMS(0), true); break;
        case 2: y = kiln_max_dims(kiln_ref(x), KILN_DIMS(1), false); break;
        default: y = kiln_softmax(kiln_ref(x), -1), out_bytes = 256 * 256 * 4; break;
        }
        kiln_release(x);
        KT_CHECK_MSG(stats().bytes_in_use == base.bytes_in_use + out_bytes + cases[i].extra, "%s keeps %llu bytes",
                     cases[i].name, (unsigned long long)(stats().bytes_in_use - base.bytes_in_use));
        kiln_release(y);
        KT_CHECK(stats().bytes_in_use == base.bytes_in_use);
    }
}

KT_TEST(bad_input_on_tracked_tensors) {
    kiln_memory_stats base = stats();
    kiln_tensor x = kiln_ones(KILN_CPU, KILN_F32, KILN_SHAPE(2, 3));
    kiln_require_grad(x);
    float v[6];
    kiln_tensor y = kiln_sum_dims(kiln_ref(x), KILN_DIMS(2), false);
    KT_CHECK(kiln_into_data(y, v, sizeof v) == KILN_ERR_INVALID_ARGUMENT);
    KT_CHECK(strstr(kiln_last_error(), "kiln_sum_dims") && strstr(kiln_last_error(), "test_autodiff_reduce.c"));
    y = kiln_softmax(kiln_ref(x), -3);
    KT_CHECK(kiln_into_data(y, v, sizeof v) == KILN_ERR_INVALID_ARGUMENT);
    KT_CHECK(strstr(kiln_last_error(), "kiln_softmax") != NULL);
    kiln_tensor e = kiln_ones(KILN_CPU, KILN_F32, KILN_SHAPE(0, 3));
    kiln_require_grad(e);
    y = kiln_max_dims(kiln_ref(e), KILN_DIMS(0), false); /* no identity */
    KT_CHECK(kiln_into_data(y, v, sizeof v) == KILN_ERR_SHAPE);
    KT_CHECK(strstr(kiln_last_error(), "kiln_max_dims") != NULL);
    /* a poisoned input propagates; backward of the result reports it */
    kiln_tensor bad = kiln_reshape(kiln_ref(x), KILN_SHAPE(4));
    kiln_grads *g = NULL;
    KT_CHECK(kiln_backward(kiln_logsumexp_dims(bad, KILN_ALL_DIMS, false), &g) == KILN_ERR_SHAPE);
    KT_CHECK(strstr(kiln_last_error(), "kiln_reshape") != NULL && g == NULL);
    kiln_release(e);
    kiln_release(x);
    KT_CHECK(stats().live_tensors == base.live_tensors);
    KT_CHECK(stats().bytes_in_use == base.bytes_in_use);
}

static kiln_memory_stats at_start;

KT_TEST(everything_released) {
    kiln_memory_stats end = stats();
    KT_CHECK(end.live_tensors == at_start.live_tensors);
    KT_CHECK(end.bytes_in_use == at_start.bytes_in_use);
}

int main(void) {
    at_start = stats();
    KT_RUN(reductions_over_dim_lists);
    KT_RUN(whole_tensor_reductions);
    KT_RUN(zero_dim_size_one_and_empty);
    KT_RUN(prod_at_zeros);
    KT_RUN(softmax_and_log_softmax);
    KT_RUN(f32_f16_bf16_gradients);
    KT_RUN(nodes_keep_only_what_they_need);
    KT_RUN(bad_input_on_tracked_tensors);
    KT_RUN(everything_released);
    return kt_finish();
}
