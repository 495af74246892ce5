/* max_pool2d, avg_pool2d and adaptive_avg_pool2d against double-precision references written
 * from PyTorch's definitions: a grid of kernels, strides (overlapping windows, stride 0 =
 * kernel) and paddings, every float dtype, permuted / strided / offset inputs, empty batches;
 * max pooling's tie, NaN and -inf rules seen through its gradient; finite-difference gradient
 * checks of all three; the modules; bad input and leaks. */
#include "gradcheck.h"
#include "nd_layout.h"

typedef struct {
    int kh, kw, sh, sw, ph, pw; /* stride 0: the kernel size */
} pool_case;

typedef enum { P_MAX, P_AVG, P_ADAPTIVE } pool_kind;

typedef struct {
    int64_t n, c, h, w, oh, ow;
    bool exclude_pad; /* averages divide by the count of input elements in the window */
} dims;

/* PyTorch's pooling_output_shape: with ceil_mode the count rounds up, less a last window that
 * would start in the trailing padding. */
static int64_t out_size(int64_t size, int k, int s, int pad, bool ceil_mode) {
    double exact = (double)(size + 2 * pad - k) / s;
    int64_t n = (int64_t)(ceil_mode ? ceil(exact) : floor(exact)) + 1;
    if (ceil_mode && (n - 1) * s >= size + pad) n--;
    return n;
}

static dims out_dims_opts(int64_t n, int64_t c, int64_t h, int64_t w, pool_case p, bool ceil_mode, bool exclude_pad) {
    int sh = p.sh ? p.sh : p.kh, sw = p.sw ? p.sw : p.kw;
    return (dims){.n = n, .c = c, .h = h, .w = w, .oh = out_size(h, p.kh, sh, p.ph, ceil_mode),
                  .ow = out_size(w, p.kw, sw, p.pw, ceil_mode), .exclude_pad = exclude_pad};
}

static dims out_dims(int64_t n, int64_t c, int64_t h, int64_t w, pool_kind kind, pool_case p, int out_h, int out_w) {
    if (kind != P_ADAPTIVE) return out_dims_opts(n, c, h, w, p, false, false);
    return (dims){.n = n, .c = c, .h = h, .w = w, .oh = out_h, .ow = out_w};
}

/* PyTorch's loops: max takes the first maximum in raster order (a NaN replaces it), avg divides
 * by the window's extent in the padded input (or its count of input elements: exclude_pad), adaptive windows are [floor(i*H/O), ceil((i+1)*H/O)). */
static void ref_pool(pool_kind kind, pool_case p, dims d, const double *x, double *y, int64_t *arg) {
    int sh = p.sh ? p.sh : p.kh, sw = p.sw ? p.sw : p.kw;
    for (int64_t pl = 0; pl < d.n * d.c; pl++)
        for (int64_t oy = 0; oy < d.oh; oy++)
            for (int64_t ox = 0; ox < d.ow; ox++) {
                int64_t y0, y1, x0, x1, count;
                if (kind == P_ADAPTIVE) {
                    y0 = (int64_t)floor((double)(oy * d.h) / d.oh), y1 = (int64_t)ceil((double)((oy + 1) * d.h) / d.oh);
                    x0 = (int64_t)floor((double)(ox * d.w) / d.ow), x1 = (int64_t)ceil((double)((ox + 1) * d.w) / d.ow);
                    count = (y1 - y0) * (x1 - x0);
                } else {
                    y0 = oy * sh - p.ph, x0 = ox * sw - p.pw;
                    y1 = y0 + p.kh < d.h + p.ph ? y0 + p.kh : d.h + p.ph;
                    x1 = x0 + p.kw < d.w + p.pw ? x0 + p.kw : d.w + p.pw;
                    count = (y1 - y0) * (x1 - x0);
                    y0 = y0 < 0 ? 0 : y0, x0 = x0 < 0 ? 0 : x0;
                    y1 = y1 > d.h ? d.h : y1, x1 = x1 > d.w ? d.w : x1;
                    if (d.exclude_pad) count = (y1 - y0) * (x1 - x0);
                }
                double best = -INFINITY, sum = 0;
                int64_t at = y0 * d.w + x0;
                for (int64_t iy = y0; iy < y1; iy++)
                    for (int64_t ix = x0; ix < x1; ix++) {
                        double v = x[pl * d.h * d.w + iy * d.w + ix];
                        sum += v;
                        if (v > best || isnan(v)) best = v, at = iy * d.w + ix;
                    }
                int64_t o = (pl * d.oh + oy) * d.ow + ox;
                y[o] = kind == P_MAX ? best : sum / (double)count;
                if (arg) arg[o] = at;
            }
}

static kiln_tensor run_pool(pool_kind kind, kiln_tensor x, pool_case p, int out_h, int out_w) {
    switch (kind) {
    case P_MAX: return kiln_max_pool2d(x, p.kh, p.kw, p.sh, p.sw, p.ph, p.pw);
    case P_AVG: return kiln_avg_pool2d(x, p.kh, p.kw, p.sh, p.sw, p.ph, p.pw);
    default: return kiln_adaptive_avg_pool2d(x, out_h, out_w);
    }
}

static const char *const kind_names[] = {"max_pool2d", "avg_pool2d", "adaptive_avg_pool2d"};

static void check_pool(pool_kind kind, kiln_dtype dt, nd_layout layout, dims d, pool_case p) {
    int64_t nx = d.n * d.c * d.h * d.w, ny = d.n * d.c * d.oh * d.ow;
    double *x = malloc(sizeof(double) * (size_t)(nx + 1)), *y = malloc(sizeof(double) * (size_t)(ny + 1));
    ew_values(x, nx, dt, -2, 2);
    ref_pool(kind, p, d, x, y, NULL);
    for (int64_t i = 0; i < ny; i++) y[i] = ew_round(dt, y[i]);
    kiln_tensor r = run_pool(kind, nd_make(dt, KILN_SHAPE(d.n, d.c, d.h, d.w), x, layout), p, (int)d.oh, (int)d.ow);
    kiln_shape s = kiln_tensor_shape(r);
    KT_CHECK(s.ndim == 4 && s.dims[0] == d.n && s.dims[1] == d.c && s.dims[2] == d.oh && s.dims[3] == d.ow);
    char what[160];
    snprintf(what, sizeof what, "%s %s[%s] %lldx%lld k%dx%d s%d,%d p%d,%d -> %lldx%lld", kind_names[kind],
             kiln_dtype_name(dt), nd_layout_names[layout], (long long)d.h, (long long)d.w, p.kh, p.kw, p.sh, p.sw,
             p.ph, p.pw, (long long)d.oh, (long long)d.ow);
    double *got = ew_read(r, dt, ny);
    if (got) EW_EXPECT_CLOSE(what, got, y, ny, kind == P_MAX ? 0 : 2 * ew_rtol(dt), dt == KILN_F32 ? 1e-6 : 0);
    free(got);
    free(x);
    free(y);
}

static const pool_case windows[] = {
    {2, 2, 0, 0, 0, 0}, /* the CNN's pool: stride = kernel */
    {2, 2, 2, 2, 1, 1},
    {3, 3, 1, 1, 1, 1}, /* overlapping, "same" size */
    {3, 3, 2, 2, 0, 0},
    {3, 2, 2, 1, 1, 1}, /* rectangular */
    {1, 1, 2, 3, 0, 0},
    {5, 4, 3, 2, 2, 2},
    {4, 4, 0, 0, 2, 0},
};
#define NWINDOWS (sizeof windows / sizeof windows[0])

KT_TEST(max_and_avg_grid) {
    static const int64_t sizes[][4] = {{1, 1, 4, 4}, {2, 3, 7, 9}, {3, 2, 8, 5}, {1, 5, 13, 11}};
    static const nd_layout layouts[] = {ND_DENSE, ND_PERMUTED, ND_STRIDED, ND_OFFSET};
    static const kiln_dtype dtypes[] = {KILN_F32, KILN_F64, KILN_F16, KILN_BF16};
    for (int kind = P_MAX; kind <= P_AVG; kind++)
        for (size_t wi = 0; wi < NWINDOWS; wi++)
            for (size_t si = 0; si < 4; si++) {
                dims d = out_dims(sizes[si][0], sizes[si][1], sizes[si][2], sizes[si][3], kind, windows[wi], 0, 0);
                if (d.oh < 1 || d.ow < 1) continue;
                for (int l = 0; l < 4; l++) check_pool(kind, dtypes[(si + l) % 4], layouts[l], d, windows[wi]);
            }
}

KT_TEST(adaptive_grid) {
    static const int64_t shapes[][6] = {
        {2, 3, 7, 5, 3, 2}, {1, 2, 6, 6, 3, 3}, {2, 2, 5, 5, 7, 7}, /* more outputs than inputs */
        {3, 4, 4, 4, 1, 1},                                         /* global average */
        {1, 1, 10, 13, 4, 5}, {2, 1, 1, 1, 2, 3},
    };
    static const nd_layout layouts[] = {ND_DENSE, ND_PERMUTED, ND_STRIDED, ND_OFFSET};
    pool_case none = {0};
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) {
        const int64_t *s = shapes[i];
        dims d = out_dims(s[0], s[1], s[2], s[3], P_ADAPTIVE, none, (int)s[4], (int)s[5]);
        for (int l = 0; l < 4; l++) check_pool(P_ADAPTIVE, l % 2 ? KILN_F64 : KILN_F32, layouts[l], d, none);
        check_pool(P_ADAPTIVE, KILN_BF16, ND_DENSE, d, none);
    }
}

KT_TEST(empty_batch) {
    ew_mark mark = ew_mark_now();
    kiln_tensor r = kiln_max_pool2d(kiln_zeros(KILN_CPU, KILN_F32, KILN_SHAPE(0, 3, 6, 6)), 2, 2, 2, 2, 0, 0);
    kiln_shape s = kiln_tensor_shape(r);
    KT_CHECK(s.ndim == 4 && s.dims[0] == 0 && s.dims[2] == 3 && s.dims[3] == 3);
    KT_CHECK(kiln_into_data(r, NULL, 0) == KILN_OK);
    r = kiln_adaptive_avg_pool2d(kiln_zeros(KILN_CPU, KILN_F64, KILN_SHAPE(2, 0, 6, 6)), 2, 2);
    KT_CHECK(kiln_tensor_numel(r) == 0 && kiln_into_data(r, NULL, 0) == KILN_OK);
    EW_NO_LEAKS(mark);
}

/* ---- max pooling's choice of element, seen through its gradient ------------------------------ */

/* The gradient of sum(max_pool2d(x)) for x [1, 1, h, w] holding v. */
static double *max_grad(const double *v, int64_t h, int64_t w, pool_case p, double *out_values, int64_t n_out) {
    kiln_tensor x = ew_tensor(KILN_F64, KILN_SHAPE(1, 1, h, w), v);
    kiln_require_grad(x);
    kiln_tensor y = kiln_max_pool2d(kiln_ref(x), p.kh, p.kw, p.sh, p.sw, p.ph, p.pw);
    double *got = ew_read(kiln_ref(y), KILN_F64, n_out);
    if (got) memcpy(out_values, got, sizeof(double) * (size_t)n_out);
    free(got);
    kiln_grads *g = NULL;
    KT_CHECK(kiln_backward(kiln_sum(y), &g) == KILN_OK);
    double *dx = ew_read(kiln_grad(g, x), KILN_F64, h * w);
    kiln_grads_free(g);
    kiln_release(x);
    return dx;
}

KT_TEST(max_ties_nan_and_infinity) {
    ew_mark mark = ew_mark_now();
    /* ties: the first element of each window (raster order) takes the gradient */
    double ones[16], y[16];
    for (int i = 0; i < 16; i++) ones[i] = 1;
    double *dx = max_grad(ones, 4, 4, (pool_case){2, 2, 2, 2, 0, 0}, y, 4);
    double want[16] = {1, 0, 1, 0, 0, 0, 0, 0, 1, 0, 1, 0, 0, 0, 0, 0};
    if (dx) EW_EXPECT_CLOSE("ties", dx, want, 16, 0, 0);
    free(dx);
    /* overlapping windows: a shared maximum collects the gradient of each window it wins */
    double v[9] = {0, 1, 0, 2, 9, 3, 0, 4, 0};
    dx = max_grad(v, 3, 3, (pool_case){2, 2, 1, 1, 0, 0}, y, 4);
    double want2[9] = {0, 0, 0, 0, 4, 0, 0, 0, 0};
    if (dx) EW_EXPECT_CLOSE("overlap", dx, want2, 9, 0, 0);
    free(dx);
    /* padding is -inf: a window of negatives over the padding still picks an element */
    double neg[4] = {-5, -6, -7, -8};
    dx = max_grad(neg, 2, 2, (pool_case){3, 3, 1, 1, 1, 1}, y, 4);
    double want3[4] = {4, 0, 0, 0};
    if (dx) EW_EXPECT_CLOSE("negatives with padding", dx, want3, 4, 0, 0);
    double wanty3[4] = {-5, -5, -5, -5};
    EW_EXPECT_CLOSE("negatives with padding values", y, wanty3, 4, 0, 0);
    free(dx);
    /* all -inf: the value is -inf, the gradient goes to the window's first element */
    double inf[4] = {-INFINITY, -INFINITY, -INFINITY, -INFINITY};
    dx = max_grad(inf, 2, 2, (pool_case){2, 2, 2, 2, 1, 1}, y, 4);
    double want4[4] = {1, 1, 1, 1}, wanty4[4] = {-INFINITY, -INFINITY, -INFINITY, -INFINITY};
    if (dx) EW_EXPECT_CLOSE("-inf", dx, want4, 4, 0, 0);
    EW_EXPECT_CLOSE("-inf values", y, wanty4, 4, 0, 0);
    free(dx);
    /* NaN propagates and takes the gradient (the last NaN of the window, like PyTorch's CPU) */
    double nan[8] = {1, NAN, 3, 4, NAN, 2, 7, 8};
    dx = max_grad(nan, 2, 4, (pool_case){2, 2, 2, 2, 0, 0}, y, 2);
    double want5[8] = {0, 0, 0, 0, 1, 0, 0, 1}, wanty5[2] = {NAN, 8};
    if (dx) EW_EXPECT_CLOSE("nan", dx, want5, 8, 0, 0);
    EW_EXPECT_CLOSE("nan values", y, wanty5, 2, 0, 0);
    free(dx);
    /* a wide row (more columns than one sweep block) */
    int64_t w = 700;
    double *row = malloc(sizeof(double) * (size_t)w), *ry = malloc(sizeof(double) * (size_t)w);
    for (int64_t i = 0; i < w; i++) row[i] = (double)((i * 37) % 101);
    dx = max_grad(row, 1, w, (pool_case){1, 3, 1, 2, 0, 1}, ry, (w + 2 - 3) / 2 + 1);
    double *rref = malloc(sizeof(double) * (size_t)w);
    int64_t *arg = malloc(sizeof(int64_t) * (size_t)w);
    dims d = out_dims(1, 1, 1, w, P_MAX, (pool_case){1, 3, 1, 2, 0, 1}, 0, 0);
    ref_pool(P_MAX, (pool_case){1, 3, 1, 2, 0, 1}, d, row, rref, arg);
    double *gref = calloc((size_t)w, sizeof(double));
    for (int64_t o = 0; o < d.ow; o++) gref[arg[o]] += 1;
    EW_EXPECT_CLOSE("wide row values", ry, rref, d.ow, 0, 0);
    if (dx) EW_EXPECT_CLOSE("wide row grad", dx, gref, w, 0, 0);
    free(dx), free(row), free(ry), free(rref), free(arg), free(gref);
    EW_NO_LEAKS(mark);
}

/* ---- finite differences ------------------------------------------------------------------------ */

typedef struct {
    pool_kind kind;
    pool_case p;
    int out_h, out_w;
    bool channels_last;
} gc_pool;

static kiln_tensor run_gc_pool(kiln_tensor *in, void *ctx) {
    const gc_pool *g = ctx;
    kiln_tensor x = g->channels_last ? kiln_permute(in[0], KILN_DIMS(0, 3, 1, 2)) : in[0];
    return run_pool(g->kind, x, g->p, g->out_h, g->out_w);
}

KT_TEST(gradients_finite_differences) {
    static const gc_pool cases[] = {
        {P_MAX, {2, 2, 0, 0, 0, 0}, 0, 0, false},
        {P_MAX, {3, 3, 1, 1, 1, 1}, 0, 0, true},
        {P_MAX, {3, 2, 2, 1, 1, 1}, 0, 0, false},
        {P_AVG, {2, 2, 0, 0, 0, 0}, 0, 0, false},
        {P_AVG, {3, 3, 2, 2, 1, 1}, 0, 0, true},
        {P_AVG, {3, 2, 1, 2, 1, 0}, 0, 0, false},
        {P_ADAPTIVE, {0}, 3, 2, false},
        {P_ADAPTIVE, {0}, 4, 6, true},
        {P_ADAPTIVE, {0}, 1, 1, false},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        kiln_shape s[1] = {cases[i].channels_last ? KILN_SHAPE(2, 7, 5, 3) : KILN_SHAPE(2, 3, 7, 5)};
        char name[48];
        snprintf(name, sizeof name, "%s case %zu", kind_names[cases[i].kind], i);
        GC_CHECK(name, run_gc_pool, (void *)&cases[i], 1, s, 1e-6);
    }
}

/* The gradient in dtype dt of sum(pool(x) * seed) for the given x and seed values. */
static double *grad_in(kiln_dtype dt, const gc_pool *g, kiln_shape xs, const double *x, const double *seed) {
    kiln_tensor tx = ew_tensor(dt, xs, x);
    kiln_require_grad(tx);
    kiln_tensor y = run_pool(g->kind, kiln_ref(tx), g->p, g->out_h, g->out_w);
    kiln_grads *gr = NULL;
    KT_CHECK(kiln_backward_seed(y, ew_tensor(dt, kiln_tensor_shape(y), seed), &gr) == KILN_OK);
    double *dx = ew_read(kiln_grad(gr, tx), dt, kiln_shape_numel(xs));
    kiln_grads_free(gr);
    kiln_release(tx);
    return dx;
}

KT_TEST(gradients_in_every_dtype) {
    static const gc_pool cases[] = {{P_MAX, {2, 2, 0, 0, 0, 0}, 0, 0, false},
                                    {P_MAX, {3, 3, 1, 1, 1, 1}, 0, 0, false},
                                    {P_AVG, {3, 3, 1, 1, 1, 1}, 0, 0, false},
                                    {P_ADAPTIVE, {0}, 4, 3, false}};
    static const kiln_dtype dts[] = {KILN_F32, KILN_F16, KILN_BF16};
    kiln_shape xs = KILN_SHAPE(3, 2, 8, 8);
    double x[384], seed[384];
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        for (int k = 0; k < 3; k++) {
            ew_values(x, 384, dts[k], -1, 1);
            ew_values(seed, 384, dts[k], -1, 1);
            double *want = grad_in(KILN_F64, &cases[i], xs, x, seed), *got = grad_in(dts[k], &cases[i], xs, x, seed);
            char what[64];
            snprintf(what, sizeof what, "%s grad in %s", kind_names[cases[i].kind], kiln_dtype_name(dts[k]));
            for (int j = 0; want && j < 384; j++) want[j] = ew_round(dts[k], want[j]);
            if (want && got) EW_EXPECT_CLOSE(what, got, want, 384, 4 * ew_rtol(dts[k]), 4 * ew_rtol(dts[k]));
            free(want);
            free(got);
        }
}

/* ---- ceil_mode and exclude_pad (kiln_*_pool2d_opts) ------------------------------------------- */

static kiln_pool2d_options options_of(pool_case p, bool ceil_mode, bool exclude_pad) {
    return (kiln_pool2d_options){p.kh, p.kw, p.sh, p.sw, p.ph, p.pw, ceil_mode, exclude_pad};
}

KT_TEST(ceil_mode_and_exclude_pad_grid) {
    static const int64_t sizes[][4] = {{1, 1, 5, 5}, {2, 3, 7, 9}, {1, 2, 8, 6}, {1, 1, 2, 3}};
    static const nd_layout layouts[] = {ND_DENSE, ND_PERMUTED};
    static const kiln_dtype dtypes[] = {KILN_F32, KILN_F64, KILN_BF16};
    int ceil_windows_seen = 0;
    for (size_t si = 0; si < 4; si++)
        for (size_t wi = 0; wi < NWINDOWS; wi++)
            for (int mode = 0; mode < 4; mode++) { /* max ceil; avg ceil; avg exclude; avg ceil + exclude */
                pool_kind kind = mode == 0 ? P_MAX : P_AVG;
                bool ceil_mode = mode != 2, exclude = mode >= 2;
                pool_case p = windows[wi];
                const int64_t *z = sizes[si];
                if (z[2] + 2 * p.ph < p.kh || z[3] + 2 * p.pw < p.kw) continue; /* the kernel does not fit */
                dims d = out_dims_opts(z[0], z[1], z[2], z[3], p, ceil_mode, exclude);
                ceil_windows_seen += d.oh != out_dims(z[0], z[1], z[2], z[3], kind, p, 0, 0).oh;
                kiln_dtype dt = dtypes[(si + wi + (size_t)mode) % 3];
                nd_layout layout = layouts[(si + wi) % 2];
                int64_t nx = d.n * d.c * d.h * d.w, ny = d.n * d.c * d.oh * d.ow;
                double *x = malloc(sizeof(double) * (size_t)(nx + 1)), *y = malloc(sizeof(double) * (size_t)(ny + 1));
                ew_values(x, nx, dt, -2, 2);
                ref_pool(kind, p, d, x, y, NULL);
                for (int64_t i = 0; i < ny; i++) y[i] = ew_round(dt, y[i]);
                kiln_tensor in = nd_make(dt, KILN_SHAPE(d.n, d.c, d.h, d.w), x, layout);
                kiln_pool2d_options o = options_of(p, ceil_mode, exclude);
                kiln_tensor r = kind == P_MAX ? kiln_max_pool2d_opts(in, o) : kiln_avg_pool2d_opts(in, o);
                kiln_shape s = kiln_tensor_shape(r);
                KT_CHECK_MSG(s.ndim == 4 && s.dims[2] == d.oh && s.dims[3] == d.ow, "%lldx%lld k%dx%d s%d,%d p%d,%d "
                             "ceil %d: %lldx%lld, PyTorch's %lldx%lld", (long long)d.h, (long long)d.w, p.kh, p.kw,
                             p.sh, p.sw, p.ph, p.pw, ceil_mode, (long long)s.dims[2], (long long)s.dims[3],
                             (long long)d.oh, (long long)d.ow);
                char what[160];
                snprintf(what, sizeof what, "%s %s %lldx%lld k%dx%d s%d,%d p%d,%d ceil %d exclude %d", kind_names[kind],
                         kiln_dtype_name(dt), (long long)d.h, (long long)d.w, p.kh, p.kw, p.sh, p.sw, p.ph, p.pw,
                         ceil_mode, exclude);
                double *got = s.ndim == 4 && s.dims[2] == d.oh && s.dims[3] == d.ow ? ew_read(r, dt, ny) : (kiln_release(r), NULL);
                if (got) EW_EXPECT_CLOSE(what, got, y, ny, kind == P_MAX ? 0 : 2 * ew_rtol(dt), dt == KILN_F32 ? 1e-6 : 0);
                free(got), free(x), free(y);
            }
    KT_CHECK_MSG(ceil_windows_seen > 10, "only %d cases where ceil_mode adds a window", ceil_windows_seen);
    /* PyTorch's rule for the last window: 5 rows, kernel 2, stride 2, padding 1: floor gives 3,
     * rounding up 4, but the 4th would start in the trailing padding alone: 3 */
    kiln_pool2d_options o = {2, 2, 2, 2, 1, 1, true, false};
    kiln_tensor y = kiln_max_pool2d_opts(kiln_ones(KILN_CPU, KILN_F32, KILN_SHAPE(1, 1, 5, 5)), o);
    kiln_shape s = kiln_tensor_shape(y);
    kiln_release(y);
    KT_CHECK(s.dims[2] == 3 && s.dims[3] == 3);
    kiln_pool2d_options dflt = kiln_pool2d_defaults(3);
    KT_CHECK(dflt.kernel_h == 3 && dflt.kernel_w == 3 && dflt.stride_h == 0 && !dflt.ceil_mode && !dflt.exclude_pad);
}

typedef struct {
    pool_kind kind;
    kiln_pool2d_options o;
} gc_opts;

static kiln_tensor run_gc_opts(kiln_tensor *in, void *ctx) {
    const gc_opts *g = ctx;
    return g->kind == P_MAX ? kiln_max_pool2d_opts(in[0], g->o) : kiln_avg_pool2d_opts(in[0], g->o);
}

KT_TEST(ceil_mode_and_exclude_pad_gradients) {
    static const gc_opts cases[] = {
        {P_MAX, {3, 3, 2, 2, 1, 1, true, false}},
        {P_MAX, {2, 3, 2, 2, 0, 1, true, false}},
        {P_AVG, {3, 3, 2, 2, 1, 1, true, false}},
        {P_AVG, {3, 3, 2, 2, 1, 1, false, true}},
        {P_AVG, {3, 2, 2, 3, 1, 1, true, true}},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        kiln_shape s[1] = {KILN_SHAPE(2, 3, 7, 6)};
        char name[48];
        snprintf(name, sizeof name, "%s options case %zu", kind_names[cases[i].kind], i);
        GC_CHECK(name, run_gc_opts, (void *)&cases[i], 1, s, 1e-6);
    }
}

KT_TEST(options_modules_and_bad_input) {
    ew_mark mark = ew_mark_now();
    kiln_tensor x = kiln_randn(KILN_CPU, KILN_F32, KILN_SHAPE(2, 3, 9, 8), 5);
    kiln_pool2d_options o = {3, 3, 2, 2, 1, 1, true, true};
    kiln_module *m = kiln_avg_pool2d_new_opts(o);
    KT_CHECK(m && strcmp(kiln_module_type(m), "AvgPool2d") == 0);
    kiln_tensor a = kiln_module_forward(m, kiln_ref(x)), b = kiln_avg_pool2d_opts(kiln_ref(x), o);
    int64_t n = kiln_tensor_numel(b);
    double *va = ew_read(a, KILN_F32, n), *vb = ew_read(b, KILN_F32, n);
    if (va && vb) EW_EXPECT_CLOSE("AvgPool2d ceil exclude", va, vb, n, 0, 0);
    free(va), free(vb);
    kiln_module_free(m);
    o.exclude_pad = false;
    m = kiln_max_pool2d_new_opts(o);
    KT_CHECK(m && strcmp(kiln_module_type(m), "MaxPool2d") == 0);
    kiln_tensor y = kiln_module_forward(m, kiln_ref(x));
    kiln_shape s = kiln_tensor_shape(y);
    kiln_release(y);
    KT_CHECK(s.dims[2] == 5 && s.dims[3] == 5); /* 8 columns: (8 + 2 - 3) / 2 = 3.5 rounds up to 4, + 1 */
    kiln_module_free(m);
    /* exclude_pad is for averages; the module constructor refuses it at once, the op when queued */
    o.exclude_pad = true;
    KT_CHECK(kiln_max_pool2d_new_opts(o) == NULL && strstr(kiln_last_error(), "kiln_max_pool2d_new_opts") &&
             strstr(kiln_last_error(), "average pooling only"));
    int line = __LINE__ + 1;
    kiln_tensor r = kiln_max_pool2d_opts(kiln_ref(x), o);
    EW_EXPECT_ERROR(r, KILN_ERR_INVALID_ARGUMENT, "kiln_max_pool2d_opts", line);
    o = (kiln_pool2d_options){2, 3, 2, 2, 2, 0, true, false}; /* padding 2 > half of 2 */
    KT_CHECK(kiln_avg_pool2d_new_opts(o) == NULL && strstr(kiln_last_error(), "kiln_avg_pool2d_new_opts"));
    line = __LINE__ + 1;
    r = kiln_avg_pool2d_opts(kiln_ref(x), o);
    EW_EXPECT_ERROR(r, KILN_ERR_INVALID_ARGUMENT, "kiln_avg_pool2d_opts", line);
    line = __LINE__ + 1;
    r = kiln_avg_pool2d_opts(ew_stale(), kiln_pool2d_defaults(2));
    EW_EXPECT_ERROR(r, KILN_ERR_STALE_HANDLE, "kiln_avg_pool2d_opts", line);
    line = __LINE__ + 1;
    r = kiln_max_pool2d_opts(KILN_NONE, kiln_pool2d_defaults(2));
    EW_EXPECT_ERROR(r, KILN_ERR_NULL, "kiln_max_pool2d_opts", line);
    kiln_release(x);
    EW_NO_LEAKS(mark);
}

/* ---- modules ----------------------------------------------------------------------------------- */

static void check_module(kiln_module *m, const char *type, kiln_tensor expected_from, pool_kind kind, pool_case p,
                         int oh, int ow) {
    KT_CHECK(m && strcmp(kiln_module_type(m), type) == 0);
    KT_CHECK(kiln_module_params(m, NULL, 0) == 0 && kiln_module_num_parameters(m) == 0);
    kiln_tensor a = kiln_module_forward(m, kiln_ref(expected_from));
    kiln_tensor b = run_pool(kind, kiln_ref(expected_from), p, oh, ow);
    int64_t n = kiln_tensor_numel(b);
    KT_CHECK(kiln_tensor_numel(a) == n && n > 0);
    double *va = ew_read(a, KILN_F32, n), *vb = ew_read(b, KILN_F32, n);
    if (va && vb) EW_EXPECT_CLOSE(type, va, vb, n, 0, 0);
    free(va);
    free(vb);
}

KT_TEST(modules) {
    ew_mark mark = ew_mark_now();
    kiln_tensor x = kiln_randn(KILN_CPU, KILN_F32, KILN_SHAPE(2, 3, 9, 8), 5);
    kiln_module *m = kiln_max_pool2d_new(2, 0, 0);
    check_module(m, "MaxPool2d", x, P_MAX, (pool_case){2, 2, 2, 2, 0, 0}, 0, 0);
    kiln_tensor y = kiln_module_forward(m, kiln_ref(x));
    kiln_shape s = kiln_tensor_shape(y);
    KT_CHECK(s.dims[2] == 4 && s.dims[3] == 4); /* stride 0 = the kernel size */
    kiln_release(y);
    kiln_module_free(m);
    m = kiln_avg_pool2d_new(3, 1, 1);
    check_module(m, "AvgPool2d", x, P_AVG, (pool_case){3, 3, 1, 1, 1, 1}, 0, 0);
    kiln_module_train(m, false);
    check_module(m, "AvgPool2d", x, P_AVG, (pool_case){3, 3, 1, 1, 1, 1}, 0, 0);
    kiln_module_free(m);
    m = kiln_adaptive_avg_pool2d_new(1, 1);
    check_module(m, "AdaptiveAvgPool2d", x, P_ADAPTIVE, (pool_case){0}, 1, 1);
    /* a bad input through the module names the op */
    int line = __LINE__ + 1;
    y = kiln_module_forward(m, kiln_zeros(KILN_CPU, KILN_F32, KILN_SHAPE(3, 9, 8)));
    EW_EXPECT_ERROR(y, KILN_ERR_SHAPE, "kiln_adaptive_avg_pool2d", line);
    kiln_module_free(m);
    kiln_release(x);
    /* bad arguments: NULL and a message naming the constructor */
    KT_CHECK(kiln_max_pool2d_new(0, 1, 0) == NULL && strstr(kiln_last_error(), "kiln_max_pool2d_new"));
    KT_CHECK(kiln_max_pool2d_new(2, 2, 2) == NULL && strstr(kiln_last_error(), "padding (2, 2)"));
    KT_CHECK(kiln_avg_pool2d_new(3, -1, 0) == NULL && strstr(kiln_last_error(), "kiln_avg_pool2d_new"));
    KT_CHECK(kiln_adaptive_avg_pool2d_new(0, 3) == NULL && strstr(kiln_last_error(), "kiln_adaptive_avg_pool2d_new"));
    EW_NO_LEAKS(mark);
}

/* ---- bad input -------------------------------------------------------------------------------- */

#define X4 kiln_zeros(KILN_CPU, KILN_F32, KILN_SHAPE(2, 3, 6, 6))

KT_TEST(bad_input) {
    ew_mark mark = ew_mark_now();
    kiln_tensor r;
    int line;
    r = kiln_max_pool2d(kiln_zeros(KILN_CPU, KILN_F32, KILN_SHAPE(3, 6, 6)), 2, 2, 2, 2, 0, 0); line = __LINE__;
    EW_EXPECT_ERROR(r, KILN_ERR_SHAPE, "kiln_max_pool2d", line);
    KT_CHECK(strstr(kiln_last_error(), "input must have 4 dims") && strstr(kiln_last_error(), "[3, 6, 6]"));
    r = kiln_avg_pool2d(kiln_zeros(KILN_CPU, KILN_I64, KILN_SHAPE(2, 3, 6, 6)), 2, 2, 2, 2, 0, 0); line = __LINE__;
    EW_EXPECT_ERROR(r, KILN_ERR_DTYPE, "kiln_avg_pool2d", line);
    r = kiln_max_pool2d(kiln_zeros(KILN_CPU, KILN_BOOL, KILN_SHAPE(2, 3, 6, 6)), 2, 2, 2, 2, 0, 0); line = __LINE__;
    EW_EXPECT_ERROR(r, KILN_ERR_DTYPE, "kiln_max_pool2d", line);
    r = kiln_max_pool2d(X4, 2, 2, 2, 2, 2, 0); line = __LINE__; /* padding > kernel / 2 */
    EW_EXPECT_ERROR(r, KILN_ERR_INVALID_ARGUMENT, "kiln_max_pool2d", line);
    KT_CHECK(strstr(kiln_last_error(), "half the kernel"));
    r = kiln_avg_pool2d(X4, 0, 2, 2, 2, 0, 0); line = __LINE__;
    EW_EXPECT_ERROR(r, KILN_ERR_INVALID_ARGUMENT, "kiln_avg_pool2d", line);
    r = kiln_avg_pool2d(X4, 2, 2, -1, 2, 0, 0); line = __LINE__;
    EW_EXPECT_ERROR(r, KILN_ERR_INVALID_ARGUMENT, "kiln_avg_pool2d", line);
    r = kiln_max_pool2d(X4, 2, 2, 2, 2, -1, 0); line = __LINE__;
    EW_EXPECT_ERROR(r, KILN_ERR_INVALID_ARGUMENT, "kiln_max_pool2d", line);
    r = kiln_max_pool2d(X4, 9, 9, 1, 1, 1, 1); line = __LINE__; /* 9 > 6 + 2 */
    EW_EXPECT_ERROR(r, KILN_ERR_SHAPE, "kiln_max_pool2d", line);
    KT_CHECK(strstr(kiln_last_error(), "larger than input [2, 3, 6, 6]"));
    r = kiln_max_pool2d(kiln_zeros(KILN_CPU, KILN_F32, KILN_SHAPE(2, 3, 0, 6)), 1, 1, 1, 1, 0, 0); line = __LINE__;
    EW_EXPECT_ERROR(r, KILN_ERR_SHAPE, "kiln_max_pool2d", line);
    r = kiln_adaptive_avg_pool2d(X4, 0, 2); line = __LINE__;
    EW_EXPECT_ERROR(r, KILN_ERR_INVALID_ARGUMENT, "kiln_adaptive_avg_pool2d", line);
    r = kiln_adaptive_avg_pool2d(kiln_zeros(KILN_CPU, KILN_I32, KILN_SHAPE(2, 3, 6, 6)), 2, 2); line = __LINE__;
    EW_EXPECT_ERROR(r, KILN_ERR_DTYPE, "kiln_adaptive_avg_pool2d", line);
    kiln_tensor stale = ew_stale();
    r = kiln_max_pool2d(stale, 2, 2, 2, 2, 0, 0); line = __LINE__;
    EW_EXPECT_ERROR(r, KILN_ERR_STALE_HANDLE, "kiln_max_pool2d", line);
    r = kiln_avg_pool2d(stale, 2, 2, 2, 2, 0, 0); line = __LINE__;
    EW_EXPECT_ERROR(r, KILN_ERR_STALE_HANDLE, "kiln_avg_pool2d", line);
    r = kiln_adaptive_avg_pool2d(KILN_NONE, 2, 2); line = __LINE__;
    EW_EXPECT_ERROR(r, KILN_ERR_NULL, "kiln_adaptive_avg_pool2d", line);
    line = __LINE__; r = kiln_max_pool2d(EW_POISONED(), 2, 2, 2, 2, 0, 0);
    EW_EXPECT_ERROR(r, KILN_ERR_SHAPE, "kiln_reshape", line);
    line = __LINE__; r = kiln_adaptive_avg_pool2d(EW_POISONED(), 2, 2);
    EW_EXPECT_ERROR(r, KILN_ERR_SHAPE, "kiln_reshape", line);
    /* the recording path checks the same things and leaks nothing */
    kiln_tensor t = X4;
    kiln_require_grad(t);
    r = kiln_max_pool2d(kiln_ref(t), 2, 2, 2, 2, 3, 0); line = __LINE__;
    EW_EXPECT_ERROR(r, KILN_ERR_INVALID_ARGUMENT, "kiln_max_pool2d", line);
    r = kiln_avg_pool2d(kiln_ref(t), 7, 7, 1, 1, 0, 0); line = __LINE__;
    EW_EXPECT_ERROR(r, KILN_ERR_SHAPE, "kiln_avg_pool2d", line);
    r = kiln_adaptive_avg_pool2d(kiln_ref(t), 2, -2); line = __LINE__;
    EW_EXPECT_ERROR(r, KILN_ERR_INVALID_ARGUMENT, "kiln_adaptive_avg_pool2d", line);
    kiln_release(t);
    EW_NO_LEAKS(mark);
}

int main(void) {
    KT_RUN(max_and_avg_grid);
    KT_RUN(adaptive_grid);
    KT_RUN(empty_batch);
    KT_RUN(max_ties_nan_and_infinity);
    KT_RUN(gradients_finite_differences);
    KT_RUN(gradients_in_every_dtype);
    KT_RUN(ceil_mode_and_exclude_pad_grid);
    KT_RUN(ceil_mode_and_exclude_pad_gradients);
    KT_RUN(options_modules_and_bad_input);
    KT_RUN(modules);
    KT_RUN(bad_input);
    return kt_finish();
}
