/* conv1d and conv_transpose2d against direct double-precision loops written here (stride,
 * padding, dilation, groups, output_padding, with and without bias, f32 and f64, channel
 * counts on both sides of oneDNN's threshold), PyTorch's output sizes, finite-difference
 * gradients of input, weight and bias, the Conv1d and ConvTranspose2d modules, bad input and
 * leaks. */
#include "gradcheck.h"
#include "ew_util.h"

typedef struct {
    int64_t n, c, o, h, w, kh, kw;
    int sh, sw, ph, pw, oph, opw, dh, dw, groups;
    bool bias;
} tcase;

static int64_t t_oh(const tcase *k) { return (k->h - 1) * k->sh - 2 * k->ph + k->dh * (k->kh - 1) + k->oph + 1; }
static int64_t t_ow(const tcase *k) { return (k->w - 1) * k->sw - 2 * k->pw + k->dw * (k->kw - 1) + k->opw + 1; }

/* y[n, g*og + oc, iy*s - p + i*d, ...] += x[n, g*cg + ic, iy, ix] * w[g*cg + ic, oc, i, j] */
static void ref_transpose(const tcase *k, const double *x, const double *w, const double *b, double *y) {
    int64_t oh = t_oh(k), ow = t_ow(k), cg = k->c / k->groups, og = k->o / k->groups;
    for (int64_t n = 0; n < k->n; n++)
        for (int64_t o = 0; o < k->o; o++)
            for (int64_t q = 0; q < oh * ow; q++) y[(n * k->o + o) * oh * ow + q] = k->bias ? b[o] : 0;
    for (int64_t n = 0; n < k->n; n++)
        for (int64_t ci = 0; ci < k->c; ci++)
            for (int64_t iy = 0; iy < k->h; iy++)
                for (int64_t ix = 0; ix < k->w; ix++)
                    for (int64_t oc = 0; oc < og; oc++)
                        for (int64_t i = 0; i < k->kh; i++)
                            for (int64_t j = 0; j < k->kw; j++) {
                                int64_t yy = iy * k->sh - k->ph + i * k->dh, yx = ix * k->sw - k->pw + j * k->dw;
                                if (yy < 0 || yy >= oh || yx < 0 || yx >= ow) continue;
                                int64_t o = (ci / cg) * og + oc;
                                y[((n * k->o + o) * oh + yy) * ow + yx] +=
                                    x[((n * k->c + ci) * k->h + iy) * k->w + ix] *
                                    w[((ci * og + oc) * k->kh + i) * k->kw + j];
                            }
}

static double *randv(int64_t n, double lo, double hi) {
    double *v = malloc(sizeof(double) * (size_t)(n + 1));
    ew_values(v, n, KILN_F64, lo, hi);
    return v;
}

static const tcase tcases[] = {
    {2, 3, 4, 5, 4, 3, 3, 1, 1, 0, 0, 0, 0, 1, 1, 1, true},
    {2, 3, 2, 4, 5, 3, 2, 2, 2, 1, 0, 1, 1, 1, 1, 1, true},  /* stride 2, output_padding 1 */
    {1, 4, 6, 3, 3, 2, 3, 3, 2, 1, 1, 2, 0, 1, 2, 2, false}, /* groups 2, mixed */
    {1, 2, 2, 3, 4, 2, 2, 1, 1, 0, 1, 1, 1, 2, 3, 1, true},  /* output_padding >= stride, < dilation */
    {2, 16, 8, 5, 5, 3, 3, 2, 2, 1, 1, 1, 1, 1, 1, 1, true}, /* channels enough for oneDNN */
    {1, 8, 16, 4, 4, 4, 4, 2, 2, 1, 1, 0, 0, 1, 1, 8, true}, /* depthwise-like groups */
};

KT_TEST(transpose_forward) {
    for (size_t t = 0; t < sizeof tcases / sizeof tcases[0]; t++) {
        const tcase *k = &tcases[t];
        for (int d = 0; d < 2; d++) {
            kiln_dtype dt = d ? KILN_F32 : KILN_F64;
            int64_t nx = k->n * k->c * k->h * k->w, nw = k->c * (k->o / k->groups) * k->kh * k->kw;
            int64_t ny = k->n * k->o * t_oh(k) * t_ow(k);
            double *x = randv(nx, -1, 1), *w = randv(nw, -1, 1), *b = randv(k->o, -1, 1), *want = randv(ny, 0, 0);
            if (dt == KILN_F32) { /* values exact in f32: the reference sees what kiln sees */
                for (int64_t i = 0; i < nx; i++) x[i] = (float)x[i];
                for (int64_t i = 0; i < nw; i++) w[i] = (float)w[i];
                for (int64_t i = 0; i < k->o; i++) b[i] = (float)b[i];
            }
            ref_transpose(k, x, w, b, want);
            kiln_tensor y = kiln_conv_transpose2d(
                ew_tensor(dt, KILN_SHAPE(k->n, k->c, k->h, k->w), x),
                ew_tensor(dt, KILN_SHAPE(k->c, k->o / k->groups, k->kh, k->kw), w),
                k->bias ? ew_tensor(dt, KILN_SHAPE(k->o), b) : KILN_NONE, k->sh, k->sw, k->ph, k->pw, k->oph, k->opw,
                k->dh, k->dw, k->groups);
            kiln_shape s = kiln_tensor_shape(y);
            KT_CHECK_MSG(s.ndim == 4 && s.dims[0] == k->n && s.dims[1] == k->o && s.dims[2] == t_oh(k) &&
                             s.dims[3] == t_ow(k), "case %zu: shape", t);
            double *got = ew_read(y, dt, ny);
            char what[64];
            snprintf(what, sizeof what, "conv_transpose2d case %zu %s", t, kiln_dtype_name(dt));
            if (got) EW_EXPECT_CLOSE(what, got, want, ny, dt == KILN_F32 ? 1e-5 : 1e-12, dt == KILN_F32 ? 1e-5 : 1e-12);
            free(got), free(x), free(w), free(b), free(want);
        }
    }
}

/* Half precision (computed in f32, rounded once) and an input held channels-last (a permuted
 * view) give the f64 reference's values within their precision. */
KT_TEST(transpose_dtypes_and_layouts) {
    const tcase *k = &tcases[1];
    int64_t nx = k->n * k->c * k->h * k->w, nw = k->c * (k->o / k->groups) * k->kh * k->kw;
    int64_t ny = k->n * k->o * t_oh(k) * t_ow(k);
    kiln_dtype dts[3] = {KILN_F16, KILN_BF16, KILN_F32};
    for (int d = 0; d < 3; d++) {
        double *x = randv(nx, -1, 1), *w = randv(nw, -1, 1), *b = randv(k->o, -1, 1), *want = randv(ny, 0, 0);
        kiln_tensor xt = ew_tensor(dts[d], KILN_SHAPE(k->n, k->c, k->h, k->w), x);
        kiln_tensor wt = ew_tensor(dts[d], KILN_SHAPE(k->c, k->o / k->groups, k->kh, k->kw), w);
        kiln_tensor bt = ew_tensor(dts[d], KILN_SHAPE(k->o), b);
        /* the reference sees the rounded values */
        double *xr = ew_read(kiln_cast(kiln_ref(xt), KILN_F64), KILN_F64, nx);
        double *wr = ew_read(kiln_cast(kiln_ref(wt), KILN_F64), KILN_F64, nw);
        double *br = ew_read(kiln_cast(kiln_ref(bt), KILN_F64), KILN_F64, k->o);
        if (xr && wr && br) ref_transpose(k, xr, wr, br, want);
        if (dts[d] == KILN_F32) /* channels-last: [N, H, W, C] data viewed as [N, C, H, W] */
            xt = kiln_permute(kiln_contiguous(kiln_permute(xt, KILN_DIMS(0, 2, 3, 1))), KILN_DIMS(0, 3, 1, 2));
        kiln_tensor y = kiln_conv_transpose2d(xt, wt, bt, k->sh, k->sw, k->ph, k->pw, k->oph, k->opw, k->dh, k->dw,
                                              k->groups);
        double *got = ew_read(kiln_cast(y, KILN_F64), KILN_F64, ny);
        double tol = dts[d] == KILN_BF16 ? 3e-2 : dts[d] == KILN_F16 ? 4e-3 : 1e-5;
        if (got) EW_EXPECT_CLOSE(kiln_dtype_name(dts[d]), got, want, ny, tol, tol);
        free(got), free(x), free(w), free(b), free(want), free(xr), free(wr), free(br);
    }
}

/* PyTorch's sizes: ConvTranspose2d(k=3, stride=2, padding=1, output_padding=1) doubles 7 to 14;
 * k=4, stride=2, padding=1 doubles too; stride 1 without padding grows by k - 1. */
KT_TEST(transpose_output_sizes) {
    struct { int64_t h, k; int s, p, op, d; int64_t want; } c[] = {
        {7, 3, 2, 1, 1, 1, 14}, {7, 4, 2, 1, 0, 1, 14}, {5, 3, 1, 0, 0, 1, 7}, {1, 1, 1, 0, 0, 1, 1},
        {3, 3, 3, 2, 2, 1, 7}, {4, 3, 1, 2, 1, 2, 5},
    };
    for (size_t i = 0; i < sizeof c / sizeof c[0]; i++) {
        kiln_tensor y = kiln_conv_transpose2d(kiln_zeros(KILN_CPU, KILN_F32, KILN_SHAPE(1, 1, c[i].h, 2)),
                                              kiln_ones(KILN_CPU, KILN_F32, KILN_SHAPE(1, 1, c[i].k, 1)), KILN_NONE,
                                              c[i].s, 1, c[i].p, 0, c[i].op, 0, c[i].d, 1, 1);
        KT_CHECK_MSG(kiln_tensor_shape(y).dims[2] == c[i].want, "case %zu: %lld, want %lld", i,
                     (long long)kiln_tensor_shape(y).dims[2], (long long)c[i].want);
        kiln_release(y);
    }
}

/* conv1d against a direct loop, through the public call. */
KT_TEST(conv1d_forward) {
    struct { int64_t n, c, o, l, k; int s, p, d, g; bool bias; } cs[] = {
        {2, 3, 4, 9, 3, 1, 1, 1, 1, true}, {1, 4, 6, 10, 2, 2, 0, 3, 2, false}, {3, 8, 8, 7, 3, 1, 2, 2, 8, true},
        {2, 16, 8, 12, 5, 2, 2, 1, 1, true},
    };
    for (size_t t = 0; t < sizeof cs / sizeof cs[0]; t++) {
        int64_t cg = cs[t].c / cs[t].g, og = cs[t].o / cs[t].g;
        int64_t ol = (cs[t].l + 2 * cs[t].p - cs[t].d * (cs[t].k - 1) - 1) / cs[t].s + 1;
        int64_t nx = cs[t].n * cs[t].c * cs[t].l, nw = cs[t].o * cg * cs[t].k, ny = cs[t].n * cs[t].o * ol;
        double *x = randv(nx, -1, 1), *w = randv(nw, -1, 1), *b = randv(cs[t].o, -1, 1), *want = randv(ny, 0, 0);
        for (int64_t n = 0; n < cs[t].n; n++)
            for (int64_t o = 0; o < cs[t].o; o++)
                for (int64_t q = 0; q < ol; q++) {
                    double acc = cs[t].bias ? b[o] : 0;
                    for (int64_t ci = 0; ci < cg; ci++)
                        for (int64_t j = 0; j < cs[t].k; j++) {
                            int64_t ix = q * cs[t].s - cs[t].p + j * cs[t].d;
                            if (ix < 0 || ix >= cs[t].l) continue;
                            acc += x[(n * cs[t].c + (o / og) * cg + ci) * cs[t].l + ix] * w[(o * cg + ci) * cs[t].k + j];
                        }
                    want[(n * cs[t].o + o) * ol + q] = acc;
                }
        kiln_tensor y = kiln_conv1d(ew_tensor(KILN_F64, KILN_SHAPE(cs[t].n, cs[t].c, cs[t].l), x),
                                    ew_tensor(KILN_F64, KILN_SHAPE(cs[t].o, cg, cs[t].k), w),
                                    cs[t].bias ? ew_tensor(KILN_F64, KILN_SHAPE(cs[t].o), b) : KILN_NONE, cs[t].s,
                                    cs[t].p, cs[t].d, cs[t].g);
        kiln_shape s = kiln_tensor_shape(y);
        KT_CHECK(s.ndim == 3 && s.dims[0] == cs[t].n && s.dims[1] == cs[t].o && s.dims[2] == ol);
        double *got = ew_read(y, KILN_F64, ny);
        if (got) EW_EXPECT_CLOSE("conv1d", got, want, ny, 1e-12, 1e-12);
        free(got), free(x), free(w), free(b), free(want);
    }
}

static kiln_tensor gc_transpose(kiln_tensor *in, void *ctx) {
    const tcase *k = ctx;
    return kiln_conv_transpose2d(in[0], in[1], k->bias ? in[2] : KILN_NONE, k->sh, k->sw, k->ph, k->pw, k->oph,
                                 k->opw, k->dh, k->dw, k->groups);
}

static kiln_tensor gc_conv1d(kiln_tensor *in, void *ctx) {
    const int *p = ctx; /* stride, padding, dilation, groups */
    return kiln_conv1d(in[0], in[1], in[2], p[0], p[1], p[2], p[3]);
}

KT_TEST(gradients_finite_differences) {
    const tcase small[] = {
        {2, 2, 3, 3, 3, 2, 3, 2, 1, 1, 0, 1, 0, 1, 1, 1, true},
        {1, 2, 2, 2, 3, 2, 2, 1, 1, 0, 1, 1, 1, 2, 3, 1, true}, /* output_padding >= stride */
        {1, 4, 2, 3, 2, 2, 2, 2, 2, 0, 0, 0, 1, 1, 1, 2, false},
    };
    for (size_t t = 0; t < sizeof small / sizeof small[0]; t++) {
        const tcase *k = &small[t];
        kiln_shape shapes[3] = {KILN_SHAPE(k->n, k->c, k->h, k->w), KILN_SHAPE(k->c, k->o / k->groups, k->kh, k->kw),
                                KILN_SHAPE(k->o)};
        char name[64];
        snprintf(name, sizeof name, "conv_transpose2d case %zu", t);
        GC_CHECK(name, gc_transpose, (void *)k, k->bias ? 3 : 2, shapes, 1e-6);
    }
    int p[4] = {2, 1, 2, 2};
    kiln_shape shapes[3] = {KILN_SHAPE(2, 4, 7), KILN_SHAPE(4, 2, 2), KILN_SHAPE(4)};
    GC_CHECK("conv1d", gc_conv1d, p, 3, shapes, 1e-6);
}

KT_TEST(modules) {
    ew_mark mark = ew_mark_now();
    kiln_conv1d_options o1 = kiln_conv1d_defaults(4, 6, 3);
    o1.padding = 1;
    kiln_module *m = kiln_conv1d_new(o1, 7);
    KT_CHECK(m && strcmp(kiln_module_type(m), "Conv1d") == 0);
    kiln_param ps[4];
    KT_CHECK(kiln_module_params(m, ps, 4) == 2 && strcmp(ps[0].name, "weight") == 0 && strcmp(ps[1].name, "bias") == 0);
    kiln_shape ws = kiln_tensor_shape(*ps[0].slot);
    KT_CHECK(ws.ndim == 3 && ws.dims[0] == 6 && ws.dims[1] == 4 && ws.dims[2] == 3);
    double *wv = ew_read(kiln_ref(*ps[0].slot), KILN_F32, 72);
    double bound = 1 / sqrt(12.0);
    for (int i = 0; wv && i < 72; i++) KT_CHECK(fabs(wv[i]) <= bound);
    free(wv);
    kiln_tensor y = kiln_module_forward(m, kiln_ones(KILN_CPU, KILN_F32, KILN_SHAPE(2, 4, 9)));
    kiln_shape ys = kiln_tensor_shape(y);
    KT_CHECK(ys.ndim == 3 && ys.dims[1] == 6 && ys.dims[2] == 9);
    kiln_release(y);
    kiln_module_free(m);

    kiln_conv_transpose2d_options o2 = kiln_conv_transpose2d_defaults(4, 6, 3);
    o2.stride_h = o2.stride_w = 2, o2.pad_h = o2.pad_w = 1, o2.output_pad_h = o2.output_pad_w = 1, o2.groups = 2;
    m = kiln_conv_transpose2d_new(o2, 3);
    KT_CHECK(m && strcmp(kiln_module_type(m), "ConvTranspose2d") == 0);
    KT_CHECK(kiln_module_params(m, ps, 4) == 2);
    ws = kiln_tensor_shape(*ps[0].slot);
    KT_CHECK(ws.ndim == 4 && ws.dims[0] == 4 && ws.dims[1] == 3 && ws.dims[2] == 3 && ws.dims[3] == 3);
    wv = ew_read(kiln_ref(*ps[0].slot), KILN_F32, 108);
    bound = 1 / sqrt(27.0); /* fan_in = out/groups * 3 * 3 */
    for (int i = 0; wv && i < 108; i++) KT_CHECK(fabs(wv[i]) <= bound);
    free(wv);
    y = kiln_module_forward(m, kiln_ones(KILN_CPU, KILN_F32, KILN_SHAPE(1, 4, 5, 7)));
    ys = kiln_tensor_shape(y);
    KT_CHECK(ys.ndim == 4 && ys.dims[1] == 6 && ys.dims[2] == 10 && ys.dims[3] == 14);
    kiln_release(y);
    kiln_module_free(m);

    int line;
    o1.groups = 4, o1.out_channels = 6;
    m = kiln_conv1d_new(o1, 1); line = __LINE__;
    KT_CHECK(m == NULL);
    KT_EXPECT_ERROR(KILN_ERR_INVALID_ARGUMENT, "kiln_conv1d_new", line);
    o2 = kiln_conv_transpose2d_defaults(4, 6, 3);
    o2.output_pad_h = 1; /* stride 1, dilation 1 */
    m = kiln_conv_transpose2d_new(o2, 1); line = __LINE__;
    KT_CHECK(m == NULL);
    KT_EXPECT_ERROR(KILN_ERR_INVALID_ARGUMENT, "kiln_conv_transpose2d_new", line);
    o2 = kiln_conv_transpose2d_defaults(0, 6, 3);
    m = kiln_conv_transpose2d_new(o2, 1); line = __LINE__;
    KT_CHECK(m == NULL);
    KT_EXPECT_ERROR(KILN_ERR_INVALID_ARGUMENT, "kiln_conv_transpose2d_new", line);
    EW_NO_LEAKS(mark);
}

static kiln_tensor z(kiln_dtype dt, kiln_shape s) { return kiln_zeros(KILN_CPU, dt, s); }

KT_TEST(bad_input) {
    ew_mark mark = ew_mark_now();
    kiln_tensor x = z(KILN_F32, KILN_SHAPE(2, 4, 5, 5)), w = z(KILN_F32, KILN_SHAPE(4, 3, 3, 3));
    kiln_tensor r;
    int line;
    const char *T = "kiln_conv_transpose2d", *C = "kiln_conv1d";
    r = kiln_conv_transpose2d(z(KILN_F32, KILN_SHAPE(4, 5, 5)), kiln_ref(w), KILN_NONE, 1, 1, 0, 0, 0, 0, 1, 1, 1); line = __LINE__;
    EW_EXPECT_ERROR(r, KILN_ERR_SHAPE, T, line);
    r = kiln_conv_transpose2d(kiln_ref(x), z(KILN_F32, KILN_SHAPE(3, 3, 3, 3)), KILN_NONE, 1, 1, 0, 0, 0, 0, 1, 1, 1); line = __LINE__;
    EW_EXPECT_ERROR(r, KILN_ERR_SHAPE, T, line);
    KT_CHECK(strstr(kiln_last_error(), "[3, 3, 3, 3]") != NULL);
    r = kiln_conv_transpose2d(kiln_ref(x), kiln_ref(w), z(KILN_F32, KILN_SHAPE(4)), 1, 1, 0, 0, 0, 0, 1, 1, 1); line = __LINE__;
    EW_EXPECT_ERROR(r, KILN_ERR_SHAPE, T, line); /* bias needs [3] */
    r = kiln_conv_transpose2d(kiln_ref(x), kiln_ref(w), KILN_NONE, 2, 2, 0, 0, 2, 0, 1, 1, 1); line = __LINE__;
    EW_EXPECT_ERROR(r, KILN_ERR_INVALID_ARGUMENT, T, line);
    KT_CHECK(strstr(kiln_last_error(), "output_padding") != NULL);
    r = kiln_conv_transpose2d(kiln_ref(x), kiln_ref(w), KILN_NONE, 1, 1, 0, 0, -1, 0, 1, 1, 1); line = __LINE__;
    EW_EXPECT_ERROR(r, KILN_ERR_INVALID_ARGUMENT, T, line);
    r = kiln_conv_transpose2d(kiln_ref(x), kiln_ref(w), KILN_NONE, 1, 1, 4, 4, 0, 0, 1, 1, 1); line = __LINE__;
    EW_EXPECT_ERROR(r, KILN_ERR_SHAPE, T, line); /* (5 - 1) - 8 + 2 + 1 < 1 */
    r = kiln_conv_transpose2d(kiln_ref(x), kiln_ref(w), KILN_NONE, 0, 1, 0, 0, 0, 0, 1, 1, 1); line = __LINE__;
    EW_EXPECT_ERROR(r, KILN_ERR_INVALID_ARGUMENT, T, line);
    r = kiln_conv_transpose2d(kiln_ref(x), kiln_ref(w), KILN_NONE, 1, 1, 0, 0, 0, 0, 1, 1, 3); line = __LINE__;
    EW_EXPECT_ERROR(r, KILN_ERR_SHAPE, T, line); /* 4 input channels, 3 groups */
    r = kiln_conv_transpose2d(z(KILN_I32, KILN_SHAPE(2, 4, 5, 5)), kiln_ref(w), KILN_NONE, 1, 1, 0, 0, 0, 0, 1, 1, 1); line = __LINE__;
    EW_EXPECT_ERROR(r, KILN_ERR_DTYPE, T, line);
    r = kiln_conv_transpose2d(KILN_NONE, kiln_ref(w), KILN_NONE, 1, 1, 0, 0, 0, 0, 1, 1, 1); line = __LINE__;
    EW_EXPECT_ERROR(r, KILN_ERR_NULL, T, line);
    r = kiln_conv_transpose2d(kiln_ref(x), ew_stale(), KILN_NONE, 1, 1, 0, 0, 0, 0, 1, 1, 1); line = __LINE__;
    EW_EXPECT_ERROR(r, KILN_ERR_STALE_HANDLE, T, line);
    line = __LINE__; r = kiln_conv_transpose2d(EW_POISONED(), kiln_ref(w), KILN_NONE, 1, 1, 0, 0, 0, 0, 1, 1, 1);
    EW_EXPECT_ERROR(r, KILN_ERR_SHAPE, "kiln_reshape", line);

    kiln_tensor x1 = z(KILN_F32, KILN_SHAPE(2, 4, 9)), w1 = z(KILN_F32, KILN_SHAPE(6, 4, 3));
    r = kiln_conv1d(kiln_ref(x), kiln_ref(w1), KILN_NONE, 1, 0, 1, 1); line = __LINE__;
    EW_EXPECT_ERROR(r, KILN_ERR_SHAPE, C, line);
    KT_CHECK(strstr(kiln_last_error(), "[N, C, L]") != NULL);
    r = kiln_conv1d(kiln_ref(x1), kiln_ref(w), KILN_NONE, 1, 0, 1, 1); line = __LINE__;
    EW_EXPECT_ERROR(r, KILN_ERR_SHAPE, C, line);
    r = kiln_conv1d(kiln_ref(x1), z(KILN_F32, KILN_SHAPE(6, 3, 3)), KILN_NONE, 1, 0, 1, 1); line = __LINE__;
    EW_EXPECT_ERROR(r, KILN_ERR_SHAPE, C, line);
    r = kiln_conv1d(kiln_ref(x1), kiln_ref(w1), z(KILN_F32, KILN_SHAPE(5)), 1, 0, 1, 1); line = __LINE__;
    EW_EXPECT_ERROR(r, KILN_ERR_SHAPE, C, line);
    r = kiln_conv1d(kiln_ref(x1), z(KILN_F32, KILN_SHAPE(6, 4, 12)), KILN_NONE, 1, 0, 1, 1); line = __LINE__;
    EW_EXPECT_ERROR(r, KILN_ERR_SHAPE, C, line); /* kernel longer than the input */
    r = kiln_conv1d(kiln_ref(x1), kiln_ref(w1), KILN_NONE, 0, 0, 1, 1); line = __LINE__;
    EW_EXPECT_ERROR(r, KILN_ERR_INVALID_ARGUMENT, C, line);
    r = kiln_conv1d(z(KILN_I64, KILN_SHAPE(2, 4, 9)), kiln_ref(w1), KILN_NONE, 1, 0, 1, 1); line = __LINE__;
    EW_EXPECT_ERROR(r, KILN_ERR_DTYPE, C, line);
    r = kiln_conv1d(kiln_ref(x1), KILN_NONE, KILN_NONE, 1, 0, 1, 1); line = __LINE__;
    EW_EXPECT_ERROR(r, KILN_ERR_NULL, C, line);
    r = kiln_conv1d(kiln_ref(x1), kiln_ref(w1), ew_stale(), 1, 0, 1, 1); line = __LINE__;
    EW_EXPECT_ERROR(r, KILN_ERR_STALE_HANDLE, C, line);
    line = __LINE__; r = kiln_conv1d(EW_POISONED(), kiln_ref(w1), KILN_NONE, 1, 0, 1, 1);
    EW_EXPECT_ERROR(r, KILN_ERR_SHAPE, "kiln_reshape", line);
    /* tracked inputs take the recording path: the same checks, nothing recorded or leaked */
    kiln_tensor tw = z(KILN_F32, KILN_SHAPE(6, 4, 3));
    kiln_require_grad(tw);
    r = kiln_conv1d(kiln_ref(x1), kiln_ref(tw), KILN_NONE, 1, 0, 1, 5); line = __LINE__;
    EW_EXPECT_ERROR(r, KILN_ERR_INVALID_ARGUMENT, C, line);
    r = kiln_conv1d(kiln_ref(x), kiln_ref(tw), KILN_NONE, 1, 0, 1, 1); line = __LINE__;
    EW_EXPECT_ERROR(r, KILN_ERR_SHAPE, C, line);
    kiln_release(tw);
    tw = z(KILN_F32, KILN_SHAPE(4, 3, 3, 3));
    kiln_require_grad(tw);
    r = kiln_conv_transpose2d(kiln_ref(x), kiln_ref(tw), KILN_NONE, 1, 1, 0, 0, 1, 0, 1, 1, 1); line = __LINE__;
    EW_EXPECT_ERROR(r, KILN_ERR_INVALID_ARGUMENT, T, line);
    kiln_release(tw);
    kiln_release(x), kiln_release(w), kiln_release(x1), kiln_release(w1);
    EW_NO_LEAKS(mark);
}

int main(void) {
    KT_RUN(transpose_forward);
    KT_RUN(transpose_dtypes_and_layouts);
    KT_RUN(transpose_output_sizes);
    KT_RUN(conv1d_forward);
    KT_RUN(gradients_finite_differences);
    KT_RUN(modules);
    KT_RUN(bad_input);
    return kt_finish();
}
