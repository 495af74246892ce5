/* conv2d against a direct double-precision convolution: a grid of stride, padding, dilation
 * and groups (depthwise included), odd sizes, batch 1 and more, every float dtype, inputs in
 * permuted / strided / offset views, a transposed weight view; the three gradients against
 * direct references (batch sizes that split the weight gradient into uneven chunks, results
 * equal bit for bit on 1 and 2 threads) and by finite differences; the Conv2d module
 * (parameter names, shapes, initial bounds); bad input and leaks. */
#include "backend/cpu/conv_direct.h"
#include "backend/cpu/vmath.h"
#include "gradcheck.h"
#include "conv_grid.h"
#include "nd_layout.h"

static int64_t ref_oh(const conv_case *k) { return out_dim(k->h, k->kh, k->sh, k->ph, k->dh); }
static int64_t ref_ow(const conv_case *k) { return out_dim(k->w, k->kw, k->sw, k->pw, k->dw); }

/* Calls f(n, o, oy, ox, x index, w index) for every product term of the convolution. */
#define CONV_TERMS(k, BODY)                                                                                    \
    do {                                                                                                       \
        int64_t oh_ = ref_oh(k), ow_ = ref_ow(k), cg_ = (k)->c / (k)->groups, og_ = (k)->o / (k)->groups;       \
        for (int64_t n = 0; n < (k)->n; n++)                                                                   \
            for (int64_t o = 0; o < (k)->o; o++)                                                               \
                for (int64_t oy = 0; oy < oh_; oy++)                                                           \
                    for (int64_t ox = 0; ox < ow_; ox++)                                                       \
                        for (int64_t ci = 0; ci < cg_; ci++)                                                   \
                            for (int64_t i = 0; i < (k)->kh; i++)                                              \
                                for (int64_t j = 0; j < (k)->kw; j++) {                                        \
                                    int64_t iy = oy * (k)->sh - (k)->ph + i * (k)->dh;                          \
                                    int64_t ix = ox * (k)->sw - (k)->pw + j * (k)->dw;                          \
                                    if (iy < 0 || iy >= (k)->h || ix < 0 || ix >= (k)->w) continue;             \
                                    int64_t c_ = (o / og_) * cg_ + ci;                                         \
                                    int64_t yi = ((n * (k)->o + o) * oh_ + oy) * ow_ + ox;                      \
                                    int64_t xi = ((n * (k)->c + c_) * (k)->h + iy) * (k)->w + ix;               \
                                    int64_t wi = ((o * cg_ + ci) * (k)->kh + i) * (k)->kw + j;                  \
                                    BODY;                                                                      \
                                }                                                                              \
    } while (0)

static void ref_conv(const conv_case *k, const double *x, const double *w, const double *b, double *y) {
    int64_t ohw = ref_oh(k) * ref_ow(k);
    for (int64_t n = 0; n < k->n; n++)
        for (int64_t o = 0; o < k->o; o++)
            for (int64_t q = 0; q < ohw; q++) y[(n * k->o + o) * ohw + q] = k->bias ? b[o] : 0;
    CONV_TERMS(k, y[yi] += x[xi] * w[wi]);
}

static kiln_shape x_shape(const conv_case *k) { return KILN_SHAPE(k->n, k->c, k->h, k->w); }
static kiln_shape w_shape(const conv_case *k) { return KILN_SHAPE(k->o, k->c / k->groups, k->kh, k->kw); }

static double *values(int64_t n, kiln_dtype dt) {
    double *v = malloc(sizeof(double) * (size_t)(n + 1));
    ew_values(v, n, dt, -1, 1);
    return v;
}

/* A [O, Cg, KH, KW] weight held transposed in its last two dims (a non-contiguous view). */
static kiln_tensor transposed_weight(kiln_dtype dt, kiln_shape s, const double *v) {
    int64_t n = kiln_shape_numel(s), kh = s.dims[2], kw = s.dims[3];
    double *buf = malloc(sizeof(double) * (size_t)(n + 1));
    for (int64_t p = 0; p < n / (kh * kw); p++)
        for (int64_t i = 0; i < kh; i++)
            for (int64_t j = 0; j < kw; j++) buf[(p * kw + j) * kh + i] = v[(p * kh + i) * kw + j];
    kiln_tensor t = kiln_transpose(ew_tensor(dt, KILN_SHAPE(s.dims[0], s.dims[1], kw, kh), buf), 2, 3);
    free(buf);
    return t;
}

static double tol_of(kiln_dtype dt) { return dt == KILN_F32 ? 1e-5 : dt == KILN_F64 ? 1e-12 : dt == KILN_F16 ? 4e-3 : 2e-2; }

/* Compares got (consumed) with ref rounded to dt; atol grows with the number of terms. */
static void expect_values(kiln_tensor got, kiln_dtype dt, const double *ref, int64_t n, int64_t terms, const char *what) {
    double *g = ew_read(got, dt, n);
    if (!g) {
        fprintf(stderr, "    (%s)\n", what);
        return;
    }
    double *want = malloc(sizeof(double) * (size_t)(n + 1));
    for (int64_t i = 0; i < n; i++) want[i] = ew_round(dt, ref[i]);
    EW_EXPECT_CLOSE(what, g, want, n, tol_of(dt), tol_of(dt) * (double)(terms + 1) * 0.1);
    free(want);
    free(g);
}

static void check_forward(const conv_case *k, kiln_dtype dt, nd_layout xl, bool w_transposed) {
    int64_t nx = kiln_shape_numel(x_shape(k)), nw = kiln_shape_numel(w_shape(k)), ny = k->n * k->o * ref_oh(k) * ref_ow(k);
    double *x = values(nx, dt), *w = values(nw, dt), *b = values(k->o, dt);
    double *y = malloc(sizeof(double) * (size_t)(ny + 1));
    ref_conv(k, x, w, b, y);
    kiln_tensor tx = nd_make(dt, x_shape(k), x, xl);
    kiln_tensor tw = w_transposed ? transposed_weight(dt, w_shape(k), w) : ew_tensor(dt, w_shape(k), w);
    kiln_tensor tb = k->bias ? ew_tensor(dt, KILN_SHAPE(k->o), b) : KILN_NONE;
    kiln_tensor r = kiln_conv2d(tx, tw, tb, k->sh, k->sw, k->ph, k->pw, k->dh, k->dw, k->groups);
    kiln_shape rs = kiln_tensor_shape(r);
    KT_CHECK(rs.ndim == 4 && rs.dims[0] == k->n && rs.dims[1] == k->o && rs.dims[2] == ref_oh(k) &&
             rs.dims[3] == ref_ow(k));
    char what[200];
    snprintf(what, sizeof what, "conv %s x[%s]%s n%lld c%lld %lldx%lld o%lld k%lldx%lld s%d,%d p%d,%d d%d,%d g%d",
             kiln_dtype_name(dt), nd_layout_names[xl], w_transposed ? " wT" : "", (long long)k->n, (long long)k->c,
             (long long)k->h, (long long)k->w, (long long)k->o, (long long)k->kh, (long long)k->kw, k->sh, k->sw,
             k->ph, k->pw, k->dh, k->dw, k->groups);
    expect_values(r, dt, y, ny, k->c / k->groups * k->kh * k->kw, what);
    free(x);
    free(w);
    free(b);
    free(y);
}


KT_TEST(forward_grid) {
    static const nd_layout layouts[] = {ND_DENSE, ND_PERMUTED, ND_STRIDED, ND_OFFSET};
    for (size_t i = 0; i < NGRID; i++) {
        for (int l = 0; l < 4; l++) {
            check_forward(&conv_grid[i], KILN_F32, layouts[l], false);
            check_forward(&conv_grid[i], KILN_F64, layouts[l], l == 1);
        }
        check_forward(&conv_grid[i], KILN_F16, ND_DENSE, false);
        check_forward(&conv_grid[i], KILN_BF16, ND_PERMUTED, true);
    }
}

KT_TEST(channels_last_and_mixed_dtypes) {
    /* an NHWC buffer viewed as NCHW: the layout a user gets from image data */
    conv_case k = {2, 3, 6, 5, 4, 3, 3, 1, 1, 1, 1, 1, 1, 1, true};
    int64_t nx = 2 * 3 * 6 * 5, nw = 4 * 3 * 9, ny = 2 * 4 * 6 * 5;
    double *x = values(nx, KILN_F32), *w = values(nw, KILN_F32), *b = values(4, KILN_F32), *y = malloc(sizeof(double) * ny);
    double *nhwc = malloc(sizeof(double) * nx);
    for (int64_t n = 0; n < 2; n++)
        for (int64_t c = 0; c < 3; c++)
            for (int64_t i = 0; i < 30; i++) nhwc[(n * 30 + i) * 3 + c] = x[(n * 3 + c) * 30 + i];
    ref_conv(&k, x, w, b, y);
    kiln_tensor tx = kiln_permute(ew_tensor(KILN_F32, KILN_SHAPE(2, 6, 5, 3), nhwc), KILN_DIMS(0, 3, 1, 2));
    KT_CHECK(!kiln_tensor_is_contiguous(tx));
    kiln_tensor r = kiln_conv2d(tx, ew_tensor(KILN_F32, w_shape(&k), w), ew_tensor(KILN_F32, KILN_SHAPE(4), b), 1, 1,
                                1, 1, 1, 1, 1);
    expect_values(r, KILN_F32, y, ny, 27, "channels-last input");
    /* f16 input with an f64 weight is refused, as torch's conv2d refuses it */
    r = kiln_conv2d(ew_tensor(KILN_F16, x_shape(&k), x), ew_tensor(KILN_F64, w_shape(&k), w), KILN_NONE, 1, 1, 1, 1, 1,
                    1, 1);
    KT_READ_ERROR(r, KILN_ERR_DTYPE, "kiln_conv2d");
    free(x), free(w), free(b), free(y), free(nhwc);
}

KT_TEST(empty_batch_and_channels) {
    ew_mark mark = ew_mark_now();
    kiln_tensor r = kiln_conv2d(kiln_zeros(KILN_CPU, KILN_F32, KILN_SHAPE(0, 3, 5, 5)),
                                kiln_ones(KILN_CPU, KILN_F32, KILN_SHAPE(2, 3, 3, 3)), KILN_NONE, 1, 1, 0, 0, 1, 1, 1);
    kiln_shape s = kiln_tensor_shape(r);
    KT_CHECK(s.ndim == 4 && s.dims[0] == 0 && s.dims[1] == 2 && s.dims[2] == 3 && s.dims[3] == 3);
    KT_CHECK(kiln_into_data(r, NULL, 0) == KILN_OK);
    /* no input channels: the output is the bias */
    r = kiln_conv2d(kiln_zeros(KILN_CPU, KILN_F32, KILN_SHAPE(2, 0, 4, 4)),
                    kiln_ones(KILN_CPU, KILN_F32, KILN_SHAPE(3, 0, 2, 2)),
                    kiln_full(KILN_CPU, KILN_F32, KILN_SHAPE(3), 1.5), 1, 1, 0, 0, 1, 1, 1);
    double *v = ew_read(r, KILN_F32, 2 * 3 * 3 * 3);
    for (int i = 0; v && i < 54; i++) KT_NEAR(v[i], 1.5, 0);
    free(v);
    EW_NO_LEAKS(mark);
}

/* ---- gradients ------------------------------------------------------------------------------ */

/* dx, dw and db of sum(y * seed) by direct loops. */
static void ref_grads(const conv_case *k, const double *x, const double *w, const double *dy, double *dx, double *dw,
                      double *db) {
    int64_t nx = kiln_shape_numel(x_shape(k)), nw = kiln_shape_numel(w_shape(k)), ohw = ref_oh(k) * ref_ow(k);
    memset(dx, 0, sizeof(double) * (size_t)nx);
    memset(dw, 0, sizeof(double) * (size_t)nw);
    memset(db, 0, sizeof(double) * (size_t)k->o);
    for (int64_t n = 0; n < k->n; n++)
        for (int64_t o = 0; o < k->o; o++)
            for (int64_t q = 0; q < ohw; q++) db[o] += dy[(n * k->o + o) * ohw + q];
    CONV_TERMS(k, (dx[xi] += dy[yi] * w[wi], dw[wi] += dy[yi] * x[xi]));
}

/* Runs forward + backward in dt, seeded with dy; checks dx, dw and db against the reference
 * and returns the raw dw (for comparing thread counts). */
static double *check_backward(const conv_case *k, kiln_dtype dt, nd_layout xl) {
    int64_t nx = kiln_shape_numel(x_shape(k)), nw = kiln_shape_numel(w_shape(k)), ny = k->n * k->o * ref_oh(k) * ref_ow(k);
    double *x = values(nx, dt), *w = values(nw, dt), *b = values(k->o, dt), *dy = values(ny, dt);
    double *dx = malloc(sizeof(double) * (size_t)nx), *dw = malloc(sizeof(double) * (size_t)nw),
           *db = malloc(sizeof(double) * (size_t)k->o);
    ref_grads(k, x, w, dy, dx, dw, db);
    kiln_tensor tx = nd_make(dt, x_shape(k), x, xl), tw = ew_tensor(dt, w_shape(k), w), tb = ew_tensor(dt, KILN_SHAPE(k->o), b);
    kiln_require_grad(tx);
    kiln_require_grad(tw);
    kiln_require_grad(tb);
    kiln_tensor y = kiln_conv2d(kiln_ref(tx), kiln_ref(tw), kiln_ref(tb), k->sh, k->sw, k->ph, k->pw, k->dh, k->dw, k->groups);
    kiln_grads *g = NULL;
    kiln_status st = kiln_backward_seed(y, ew_tensor(dt, kiln_tensor_shape(y), dy), &g);
    KT_CHECK_MSG(st == KILN_OK, "%s", kiln_last_error());
    char what[160];
    snprintf(what, sizeof what, "grads %s x[%s] n%lld c%lld o%lld g%d", kiln_dtype_name(dt), nd_layout_names[xl],
             (long long)k->n, (long long)k->c, (long long)k->o, k->groups);
    int64_t cg = k->c / k->groups, og = k->o / k->groups, ohw = ref_oh(k) * ref_ow(k);
    expect_values(kiln_grad(g, tx), dt, dx, nx, og * k->kh * k->kw, what);
    double *raw = ew_read(kiln_grad(g, tw), dt, nw);
    if (raw) {
        double *want = malloc(sizeof(double) * (size_t)nw);
        for (int64_t i = 0; i < nw; i++) want[i] = ew_round(dt, dw[i]);
        EW_EXPECT_CLOSE(what, raw, want, nw, tol_of(dt), tol_of(dt) * (double)(k->n * ohw + 1) * 0.1);
        free(want);
    }
    expect_values(kiln_grad(g, tb), dt, db, k->o, k->n * ohw, what);
    (void)cg;
    kiln_grads_free(g);
    kiln_release(tx), kiln_release(tw), kiln_release(tb);
    free(x), free(w), free(b), free(dy), free(dx), free(dw), free(db);
    return raw;
}

KT_TEST(gradients_against_reference) {
    ew_mark mark = ew_mark_now();
    for (size_t i = 0; i < NGRID; i++) {
        conv_case k = conv_grid[i];
        k.bias = true;
        free(check_backward(&k, KILN_F64, i % 2 ? ND_PERMUTED : ND_DENSE));
        free(check_backward(&k, KILN_F32, i % 3 ? ND_DENSE : ND_STRIDED));
    }
    /* batches that split the weight gradient into uneven chunks, MNIST-like channels */
    conv_case big = {19, 8, 12, 12, 16, 3, 3, 1, 1, 1, 1, 1, 1, 1, true};
    free(check_backward(&big, KILN_F32, ND_DENSE));
    conv_case one = {11, 16, 7, 7, 8, 1, 1, 1, 1, 0, 0, 1, 1, 1, true};
    free(check_backward(&one, KILN_F64, ND_DENSE));
    /* one input channel, 3x3, stride 1 (the weight gradient's direct kernel, conv_direct.c):
     * rows of 8 + 3, 8 + 8 + 2 and 6 outputs, padding 0 to 2; on one thread and three, and
     * with KILN_ISA=scalar's im2col path */
    static const conv_case first[] = {{5, 1, 13, 11, 7, 3, 3, 1, 1, 1, 1, 1, 1, 1, true},
                                      {3, 1, 9, 20, 10, 3, 3, 1, 1, 2, 0, 1, 1, 1, true},
                                      {2, 1, 4, 4, 3, 3, 3, 1, 1, 0, 2, 1, 1, 1, false}};
    int threads = kiln_num_threads();
    double dw_one[3][90];
    for (int run = 0; run < 3; run++) {
        kiln_set_num_threads(run == 1 ? 3 : 1);
        if (run == 2 && kiln__vmath_force_isa("scalar") != 0) break;
        long before = kiln__conv_direct_calls();
        for (size_t i = 0; i < sizeof first / sizeof first[0]; i++) {
            ew_rng = 91 + i;
            double *dw = check_backward(&first[i], KILN_F32, i == 1 ? ND_PERMUTED : ND_DENSE);
            int64_t nw = kiln_shape_numel(w_shape(&first[i]));
            if (run == 0) memcpy(dw_one[i], dw, sizeof(double) * (size_t)nw); /* same bits on 3 threads */
            if (run == 1) KT_CHECK(dw && memcmp(dw_one[i], dw, sizeof(double) * (size_t)nw) == 0);
            free(dw);
        }
        if (strcmp(kiln__vmath_isa(), "scalar") != 0) /* AVX2: it ran on the dense inputs at least */
            KT_CHECK_MSG(kiln__conv_direct_calls() - before >= 2, "run %d: %ld direct weight gradients", run,
                         kiln__conv_direct_calls() - before);
        else
            KT_CHECK(kiln__conv_direct_calls() == before);
    }
    kiln__vmath_force_isa(NULL);
    kiln_set_num_threads(threads);
    /* half precision: computed in f32, gradients rounded once */
    free(check_backward(&conv_grid[3], KILN_F16, ND_DENSE));
    free(check_backward(&conv_grid[4], KILN_BF16, ND_PERMUTED));
    EW_NO_LEAKS(mark);
}

KT_TEST(weight_gradient_independent_of_threads) {
    conv_case k = {13, 4, 9, 9, 6, 3, 3, 1, 1, 1, 1, 1, 1, 2, true};
    int threads = kiln_num_threads();
    int64_t nw = kiln_shape_numel(w_shape(&k));
    kiln_set_num_threads(1);
    ew_rng = 77;
    double *one = check_backward(&k, KILN_F32, ND_DENSE);
    kiln_set_num_threads(3);
    ew_rng = 77;
    double *three = check_backward(&k, KILN_F32, ND_DENSE);
    kiln_set_num_threads(threads);
    KT_CHECK(one && three && memcmp(one, three, sizeof(double) * (size_t)nw) == 0);
    free(one);
    free(three);
}

typedef struct {
    conv_case k;
    bool channels_last; /* the input arrives as [N, H, W, C] and is permuted */
} gc_conv;

static kiln_tensor run_conv(kiln_tensor *in, void *ctx) {
    const gc_conv *g = ctx;
    const conv_case *k = &g->k;
    kiln_tensor x = g->channels_last ? kiln_permute(in[0], KILN_DIMS(0, 3, 1, 2)) : in[0];
    return kiln_conv2d(x, in[1], k->bias ? in[2] : KILN_NONE, k->sh, k->sw, k->ph, k->pw, k->dh, k->dw, k->groups);
}

KT_TEST(gradients_finite_differences) {
    static const gc_conv cases[] = {
        {{2, 3, 5, 6, 4, 3, 3, 1, 1, 1, 1, 1, 1, 1, true}, false},
        {{2, 4, 7, 6, 2, 3, 2, 2, 1, 1, 0, 2, 1, 2, true}, true},
        {{1, 3, 6, 5, 3, 3, 3, 2, 2, 1, 1, 1, 1, 3, true}, false}, /* depthwise */
        {{3, 4, 4, 3, 2, 1, 1, 1, 1, 0, 0, 1, 1, 1, false}, true}, /* 1x1 */
        {{2, 2, 5, 5, 3, 2, 3, 3, 2, 2, 1, 1, 2, 1, true}, false},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const conv_case *k = &cases[i].k;
        kiln_shape s[3] = {cases[i].channels_last ? KILN_SHAPE(k->n, k->h, k->w, k->c) : x_shape(k), w_shape(k),
                           KILN_SHAPE(k->o)};
        char name[32];
        snprintf(name, sizeof name, "conv2d case %zu", i);
        GC_CHECK(name, run_conv, (void *)&cases[i], k->bias ? 3 : 2, s, 1e-6);
    }
}

static kiln_tensor run_conv_input_only(kiln_tensor *in, void *ctx) {
    /* the weight is a constant: only the input gradient is computed */
    kiln_tensor w = kiln_full(KILN_CPU, KILN_F64, KILN_SHAPE(2, 3, 2, 2), 0.25);
    return kiln_conv2d(in[0], w, KILN_NONE, 1, 1, 1, 1, 1, 1, 1);
}

static kiln_tensor run_conv_weight_only(kiln_tensor *in, void *ctx) {
    kiln_tensor x = kiln_full(KILN_CPU, KILN_F64, KILN_SHAPE(2, 3, 4, 4), 0.5);
    return kiln_conv2d(x, in[0], in[1], 2, 2, 1, 1, 1, 1, 1);
}

KT_TEST(gradients_of_one_side) {
    kiln_shape x[1] = {KILN_SHAPE(2, 3, 4, 5)};
    GC_CHECK("conv2d input only", run_conv_input_only, NULL, 1, x, 1e-6);
    kiln_shape wb[2] = {KILN_SHAPE(4, 3, 3, 3), KILN_SHAPE(4)};
    GC_CHECK("conv2d weight only", run_conv_weight_only, NULL, 2, wb, 1e-6);
}

/* ---- module ------------------------------------------------------------------------------------ */

KT_TEST(conv2d_module) {
    ew_mark mark = ew_mark_now();
    kiln_conv2d_options o = kiln_conv2d_defaults(4, 6, 3);
    o.pad_h = o.pad_w = 1;
    o.groups = 2;
    kiln_module *m = kiln_conv2d_new(o, 7);
    KT_CHECK(m && strcmp(kiln_module_type(m), "Conv2d") == 0);
    kiln_param ps[4];
    KT_CHECK(kiln_module_params(m, ps, 4) == 2);
    KT_CHECK(strcmp(ps[0].name, "weight") == 0 && strcmp(ps[1].name, "bias") == 0);
    kiln_shape ws = kiln_tensor_shape(*ps[0].slot), bs = kiln_tensor_shape(*ps[1].slot);
    KT_CHECK(ws.ndim == 4 && ws.dims[0] == 6 && ws.dims[1] == 2 && ws.dims[2] == 3 && ws.dims[3] == 3);
    KT_CHECK(bs.ndim == 1 && bs.dims[0] == 6);
    KT_CHECK(kiln_module_num_parameters(m) == 6 * 2 * 9 + 6);
    KT_CHECK(kiln_requires_grad(*ps[0].slot) && kiln_requires_grad(*ps[1].slot));
    /* U(-1/sqrt(fan_in), 1/sqrt(fan_in)), fan_in = 2 * 3 * 3, spread over the range */
    double bound = 1.0 / sqrt(18.0);
    double *w = ew_read(kiln_ref(*ps[0].slot), KILN_F32, 108), *b = ew_read(kiln_ref(*ps[1].slot), KILN_F32, 6);
    double lo = 1, hi = -1;
    for (int i = 0; w && i < 108; i++) {
        KT_CHECK(fabs(w[i]) <= bound);
        lo = fmin(lo, w[i]), hi = fmax(hi, w[i]);
    }
    KT_CHECK(lo < -0.6 * bound && hi > 0.6 * bound);
    for (int i = 0; b && i < 6; i++) KT_CHECK(fabs(b[i]) <= bound);
    /* the bias is not the weight's first values (its own stream) */
    KT_CHECK(w && b && (w[0] != b[0] || w[1] != b[1]));
    /* forward = the functional op on the module's parameters */
    double *x = values(2 * 4 * 5 * 5, KILN_F32), *y = malloc(sizeof(double) * 2 * 6 * 25);
    conv_case k = {2, 4, 5, 5, 6, 3, 3, 1, 1, 1, 1, 1, 1, 2, true};
    ref_conv(&k, x, w, b, y);
    kiln_tensor out = kiln_module_forward(m, ew_tensor(KILN_F32, x_shape(&k), x));
    expect_values(out, KILN_F32, y, 2 * 6 * 25, 18, "Conv2d forward");
    /* same seed, same weights; no bias: one parameter */
    kiln_module *m2 = kiln_conv2d_new(o, 7);
    o.bias = false;
    kiln_module *m3 = kiln_conv2d_new(o, 8);
    kiln_param p2[2], p3[2];
    KT_CHECK(kiln_module_params(m2, p2, 2) == 2 && kiln_module_params(m3, p3, 2) == 1);
    double *w2 = ew_read(kiln_ref(*p2[0].slot), KILN_F32, 108);
    KT_CHECK(w && w2 && memcmp(w, w2, sizeof(double) * 108) == 0);
    KT_CHECK(kiln_module_num_parameters(m3) == 108);
    /* a bad input is a poisoned result naming the op */
    int line = __LINE__ + 1;
    out = kiln_module_forward(m3, kiln_zeros(KILN_CPU, KILN_F32, KILN_SHAPE(2, 3, 5, 5)));
    EW_EXPECT_ERROR(out, KILN_ERR_SHAPE, "kiln_conv2d", line);
    kiln_module_free(m);
    kiln_module_free(m2);
    kiln_module_free(m3);
    free(w), free(w2), free(b), free(x), free(y);
    /* bad options */
    o = kiln_conv2d_defaults(4, 6, 0);
    KT_CHECK(kiln_conv2d_new(o, 1) == NULL && strstr(kiln_last_error(), "kiln_conv2d_new"));
    o = kiln_conv2d_defaults(4, 6, 3);
    o.groups = 3;
    KT_CHECK(kiln_conv2d_new(o, 1) == NULL && strstr(kiln_last_error(), "groups"));
    o.groups = 1;
    o.stride_h = 0;
    KT_CHECK(kiln_conv2d_new(o, 1) == NULL);
    o = kiln_conv2d_defaults(0, 6, 3);
    KT_CHECK(kiln_conv2d_new(o, 1) == NULL);
    EW_NO_LEAKS(mark);
}

/* ---- bad input ---------------------------------------------------------------------------------- */

/* a macro, so the call site recorded is the caller's line */
#define zeros4(a, b, c, d) kiln_zeros(KILN_CPU, KILN_F32, KILN_SHAPE(a, b, c, d))

KT_TEST(bad_input) {
    ew_mark mark = ew_mark_now();
    kiln_tensor x = zeros4(2, 4, 6, 6), w = zeros4(8, 4, 3, 3);
    kiln_tensor r;
    int line;
    r = kiln_conv2d(kiln_zeros(KILN_CPU, KILN_F32, KILN_SHAPE(4, 6, 6)), kiln_ref(w), KILN_NONE, 1, 1, 0, 0, 1, 1, 1); line = __LINE__;
    EW_EXPECT_ERROR(r, KILN_ERR_SHAPE, "kiln_conv2d", line);
    KT_CHECK(strstr(kiln_last_error(), "input must have 4 dims") && strstr(kiln_last_error(), "[4, 6, 6]"));
    r = kiln_conv2d(kiln_ref(x), kiln_zeros(KILN_CPU, KILN_F32, KILN_SHAPE(8, 4, 3)), KILN_NONE, 1, 1, 0, 0, 1, 1, 1); line = __LINE__;
    EW_EXPECT_ERROR(r, KILN_ERR_SHAPE, "kiln_conv2d", line);
    KT_CHECK(strstr(kiln_last_error(), "weight must have 4 dims"));
    r = kiln_conv2d(kiln_ref(x), zeros4(8, 3, 3, 3), KILN_NONE, 1, 1, 0, 0, 1, 1, 1); line = __LINE__;
    EW_EXPECT_ERROR(r, KILN_ERR_SHAPE, "kiln_conv2d", line);
    KT_CHECK(strstr(kiln_last_error(), "[8, 3, 3, 3]") && strstr(kiln_last_error(), "[2, 4, 6, 6]"));
    r = kiln_conv2d(kiln_ref(x), zeros4(8, 1, 3, 3), KILN_NONE, 1, 1, 0, 0, 1, 1, 3); line = __LINE__;
    EW_EXPECT_ERROR(r, KILN_ERR_INVALID_ARGUMENT, "kiln_conv2d", line);
    KT_CHECK(strstr(kiln_last_error(), "groups (3) must divide the output channels of weight [8, 1, 3, 3]"));
    r = kiln_conv2d(kiln_ref(x), zeros4(6, 1, 3, 3), KILN_NONE, 1, 1, 0, 0, 1, 1, 4); line = __LINE__;
    EW_EXPECT_ERROR(r, KILN_ERR_INVALID_ARGUMENT, "kiln_conv2d", line);
    r = kiln_conv2d(kiln_ref(x), zeros4(8, 4, 7, 3), KILN_NONE, 1, 1, 0, 0, 1, 1, 1); line = __LINE__;
    EW_EXPECT_ERROR(r, KILN_ERR_SHAPE, "kiln_conv2d", line);
    KT_CHECK(strstr(kiln_last_error(), "does not fit"));
    r = kiln_conv2d(kiln_ref(x), kiln_ref(w), KILN_NONE, 1, 1, 0, 0, 3, 3, 1); line = __LINE__; /* dilated: 7 > 6 */
    EW_EXPECT_ERROR(r, KILN_ERR_SHAPE, "kiln_conv2d", line);
    r = kiln_conv2d(kiln_ref(x), kiln_ref(w), kiln_zeros(KILN_CPU, KILN_F32, KILN_SHAPE(7)), 1, 1, 0, 0, 1, 1, 1); line = __LINE__;
    EW_EXPECT_ERROR(r, KILN_ERR_SHAPE, "kiln_conv2d", line);
    KT_CHECK(strstr(kiln_last_error(), "bias [7]"));
    r = kiln_conv2d(kiln_ref(x), kiln_ref(w), KILN_NONE, 0, 1, 0, 0, 1, 1, 1); line = __LINE__;
    EW_EXPECT_ERROR(r, KILN_ERR_INVALID_ARGUMENT, "kiln_conv2d", line);
    r = kiln_conv2d(kiln_ref(x), kiln_ref(w), KILN_NONE, 1, 1, -1, 0, 1, 1, 1); line = __LINE__;
    EW_EXPECT_ERROR(r, KILN_ERR_INVALID_ARGUMENT, "kiln_conv2d", line);
    r = kiln_conv2d(kiln_ref(x), kiln_ref(w), KILN_NONE, 1, 1, 0, 0, 1, 0, 1); line = __LINE__;
    EW_EXPECT_ERROR(r, KILN_ERR_INVALID_ARGUMENT, "kiln_conv2d", line);
    r = kiln_conv2d(kiln_ref(x), kiln_ref(w), KILN_NONE, 1, 1, 0, 0, 1, 1, 0); line = __LINE__;
    EW_EXPECT_ERROR(r, KILN_ERR_INVALID_ARGUMENT, "kiln_conv2d", line);
    r = kiln_conv2d(kiln_zeros(KILN_CPU, KILN_I32, KILN_SHAPE(2, 4, 6, 6)), kiln_ref(w), KILN_NONE, 1, 1, 0, 0, 1, 1, 1); line = __LINE__;
    EW_EXPECT_ERROR(r, KILN_ERR_DTYPE, "kiln_conv2d", line);
    r = kiln_conv2d(kiln_ref(x), kiln_ref(w), kiln_zeros(KILN_CPU, KILN_BOOL, KILN_SHAPE(8)), 1, 1, 0, 0, 1, 1, 1); line = __LINE__;
    EW_EXPECT_ERROR(r, KILN_ERR_DTYPE, "kiln_conv2d", line);
    kiln_tensor stale = ew_stale();
    r = kiln_conv2d(kiln_ref(x), stale, KILN_NONE, 1, 1, 0, 0, 1, 1, 1); line = __LINE__;
    EW_EXPECT_ERROR(r, KILN_ERR_STALE_HANDLE, "kiln_conv2d", line);
    r = kiln_conv2d(kiln_ref(x), kiln_ref(w), stale, 1, 1, 0, 0, 1, 1, 1); line = __LINE__;
    EW_EXPECT_ERROR(r, KILN_ERR_STALE_HANDLE, "kiln_conv2d", line);
    r = kiln_conv2d(KILN_NONE, kiln_ref(w), KILN_NONE, 1, 1, 0, 0, 1, 1, 1); line = __LINE__;
    EW_EXPECT_ERROR(r, KILN_ERR_NULL, "kiln_conv2d", line);
    line = __LINE__; r = kiln_conv2d(EW_POISONED(), kiln_ref(w), KILN_NONE, 1, 1, 0, 0, 1, 1, 1);
    EW_EXPECT_ERROR(r, KILN_ERR_SHAPE, "kiln_reshape", line);
    /* a tracked input takes the recording path: the same checks, nothing recorded or leaked */
    kiln_tensor tw = zeros4(8, 4, 3, 3);
    kiln_require_grad(tw);
    r = kiln_conv2d(kiln_ref(x), kiln_ref(tw), KILN_NONE, 1, 1, 0, 0, 1, 1, 5); line = __LINE__;
    EW_EXPECT_ERROR(r, KILN_ERR_INVALID_ARGUMENT, "kiln_conv2d", line);
    r = kiln_conv2d(zeros4(2, 3, 6, 6), kiln_ref(tw), KILN_NONE, 1, 1, 0, 0, 1, 1, 1); line = __LINE__;
    EW_EXPECT_ERROR(r, KILN_ERR_SHAPE, "kiln_conv2d", line);
    line = __LINE__; r = kiln_conv2d(EW_POISONED(), kiln_ref(tw), KILN_NONE, 1, 1, 0, 0, 1, 1, 1);
    EW_EXPECT_ERROR(r, KILN_ERR_SHAPE, "kiln_reshape", line);
    kiln_release(tw);
    kiln_release(x);
    kiln_release(w);
    EW_NO_LEAKS(mark);
}

int main(void) {
    KT_RUN(forward_grid);
    KT_RUN(channels_last_and_mixed_dtypes);
    KT_RUN(empty_batch_and_channels);
    KT_RUN(gradients_against_reference);
    KT_RUN(weight_gradient_independent_of_threads);
    KT_RUN(gradients_finite_differences);
    KT_RUN(gradients_of_one_side);
    KT_RUN(conv2d_module);
    KT_RUN(bad_input);
    return kt_finish();
}
