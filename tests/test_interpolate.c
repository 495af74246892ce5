/* interpolate (nearest and bilinear, align_corners, by size or by scale factor) against a
 * double-precision resampler written here and against values printed by PyTorch 2.x
 * (torch.nn.functional.interpolate on arange(1, 7).reshape(1, 1, 2, 3)); output sizes;
 * finite-difference gradients; the Upsample module; bad input naming kiln_interpolate and the
 * caller's line. */
#include "gradcheck.h"
#include "ew_util.h"

/* Source position of output index i along a dim (PyTorch's area_pixel_compute_source_index). */
static double src_pos(int64_t i, int64_t in, int64_t out, double scale, bool align) {
    if (align) return out > 1 ? (double)i * (double)(in - 1) / (double)(out - 1) : 0.0;
    double s = scale > 0 ? 1.0 / scale : (double)in / (double)out;
    double p = ((double)i + 0.5) * s - 0.5;
    return p < 0 ? 0 : p;
}

static int64_t nearest_idx(int64_t i, int64_t in, int64_t out, double scale) {
    float s = scale > 0 ? (float)(1.0 / scale) : (float)in / (float)out;
    int64_t k = (int64_t)floorf((float)i * s);
    return k < in - 1 ? k : in - 1;
}

static void ref_interp(const double *x, int64_t nc, int64_t h, int64_t w, int64_t oh, int64_t ow, double sh,
                       double sw, kiln_interp_mode mode, bool align, double *y) {
    for (int64_t p = 0; p < nc; p++)
        for (int64_t i = 0; i < oh; i++)
            for (int64_t j = 0; j < ow; j++) {
                const double *xp = x + p * h * w;
                double v;
                if (mode == KILN_INTERP_NEAREST) {
                    v = xp[nearest_idx(i, h, oh, sh) * w + nearest_idx(j, w, ow, sw)];
                } else {
                    double fy = src_pos(i, h, oh, sh, align), fx = src_pos(j, w, ow, sw, align);
                    int64_t y0 = (int64_t)fy, x0 = (int64_t)fx;
                    int64_t y1 = y0 + (y0 < h - 1), x1 = x0 + (x0 < w - 1);
                    double ly = fy - (double)y0, lx = fx - (double)x0;
                    v = (1 - ly) * ((1 - lx) * xp[y0 * w + x0] + lx * xp[y0 * w + x1]) +
                        ly * ((1 - lx) * xp[y1 * w + x0] + lx * xp[y1 * w + x1]);
                }
                y[(p * oh + i) * ow + j] = v;
            }
}

typedef struct {
    int64_t n, c, h, w, oh, ow;
    double sh, sw;
} icase;

static const icase cases[] = {
    {2, 3, 4, 5, 8, 10, 0, 0}, {1, 2, 5, 7, 3, 4, 0, 0},   {1, 1, 3, 3, 7, 2, 0, 0}, {2, 2, 6, 4, 0, 0, 1.5, 0.5},
    {1, 3, 5, 5, 0, 0, 2.3, 1.7}, {1, 1, 1, 4, 5, 1, 0, 0}, {1, 2, 4, 4, 4, 4, 0, 0}, {1, 1, 5, 3, 0, 0, 1.1, 1.0},
};

KT_TEST(against_reference) {
    for (size_t t = 0; t < sizeof cases / sizeof cases[0]; t++)
        for (int m = 0; m < 3; m++)
            for (int d = 0; d < 2; d++) {
                const icase *k = &cases[t];
                kiln_interp_mode mode = m == 0 ? KILN_INTERP_NEAREST : KILN_INTERP_BILINEAR;
                bool align = m == 2;
                kiln_dtype dt = d ? KILN_F32 : KILN_F64;
                int64_t oh = k->oh ? k->oh : (int64_t)floor((double)k->h * k->sh);
                int64_t ow = k->ow ? k->ow : (int64_t)floor((double)k->w * k->sw);
                int64_t nx = k->n * k->c * k->h * k->w, ny = k->n * k->c * oh * ow;
                double *x = malloc(sizeof(double) * (size_t)nx), *want = malloc(sizeof(double) * (size_t)ny);
                ew_values(x, nx, dt, -2, 2);
                ref_interp(x, k->n * k->c, k->h, k->w, oh, ow, k->sh, k->sw, mode, align, want);
                kiln_tensor y = kiln_interpolate(ew_tensor(dt, KILN_SHAPE(k->n, k->c, k->h, k->w), x), k->oh, k->ow,
                                                 k->sh, k->sw, mode, align);
                kiln_shape s = kiln_tensor_shape(y);
                KT_CHECK_MSG(s.ndim == 4 && s.dims[2] == oh && s.dims[3] == ow, "case %zu mode %d: shape", t, m);
                double *got = ew_read(y, dt, ny);
                char what[64];
                snprintf(what, sizeof what, "case %zu mode %d %s", t, m, kiln_dtype_name(dt));
                if (got) EW_EXPECT_CLOSE(what, got, want, ny, dt == KILN_F32 ? 1e-6 : 1e-13, dt == KILN_F32 ? 1e-6 : 1e-13);
                free(got), free(x), free(want);
            }
}

/* Values printed by PyTorch 2.x for arange(1, 7).reshape(1, 1, 2, 3) in f64. */
KT_TEST(pytorch_values) {
    static const double x[6] = {1, 2, 3, 4, 5, 6};
    static const double bil[15] = {1.0, 1.4, 2.0, 2.6, 3.0, 2.5, 2.9, 3.5, 4.1, 4.5, 4.0, 4.4, 5.0, 5.6, 6.0};
    static const double bil_ac[15] = {1.0, 1.5, 2.0, 2.5, 3.0, 2.5, 3.0, 3.5, 4.0, 4.5, 4.0, 4.5, 5.0, 5.5, 6.0};
    static const double near[15] = {1, 1, 2, 2, 3, 1, 1, 2, 2, 3, 4, 4, 5, 5, 6};
    static const double near_s[6] = {1, 2, 1, 2, 4, 5}; /* scale (1.7, 0.7): [3, 2] */
    static const double bil_s[12] = {1.0, 1.5, 2.1666666666666665, 2.8333333333333335, 2.147058823529412,
                                     2.6470588235294117, 3.313725490196078, 3.980392156862745, 3.9117647058823533,
                                     4.411764705882353, 5.07843137254902, 5.745098039215686}; /* (1.7, 1.5): [3, 4] */
    struct { int64_t oh, ow; double sh, sw; kiln_interp_mode m; bool ac; const double *want; int64_t n; } c[] = {
        {3, 5, 0, 0, KILN_INTERP_BILINEAR, false, bil, 15}, {3, 5, 0, 0, KILN_INTERP_BILINEAR, true, bil_ac, 15},
        {3, 5, 0, 0, KILN_INTERP_NEAREST, false, near, 15}, {0, 0, 1.7, 0.7, KILN_INTERP_NEAREST, false, near_s, 6},
        {0, 0, 1.7, 1.5, KILN_INTERP_BILINEAR, false, bil_s, 12},
    };
    for (size_t i = 0; i < sizeof c / sizeof c[0]; i++) {
        kiln_tensor y = kiln_interpolate(kiln_from_data(KILN_CPU, KILN_F64, KILN_SHAPE(1, 1, 2, 3), x), c[i].oh,
                                         c[i].ow, c[i].sh, c[i].sw, c[i].m, c[i].ac);
        double *got = ew_read(y, KILN_F64, c[i].n);
        if (got) EW_EXPECT_CLOSE("pytorch value", got, c[i].want, c[i].n, 1e-12, 1e-12);
        free(got);
    }
    /* nearest keeps integer dtypes */
    int32_t xi[4] = {1, 2, 3, 4};
    kiln_tensor y = kiln_interpolate(kiln_from_data(KILN_CPU, KILN_I32, KILN_SHAPE(1, 1, 2, 2), xi), 0, 0, 2, 2,
                                     KILN_INTERP_NEAREST, false);
    int32_t yi[16], want_i[16] = {1, 1, 2, 2, 1, 1, 2, 2, 3, 3, 4, 4, 3, 3, 4, 4};
    KT_CHECK(kiln_tensor_dtype(y) == KILN_I32 && kiln_into_data(y, yi, sizeof yi) == KILN_OK);
    KT_CHECK(memcmp(yi, want_i, sizeof yi) == 0);
}

static kiln_tensor gc_interp(kiln_tensor *in, void *ctx) {
    const int *m = ctx; /* mode, align, by scale */
    if (m[2]) return kiln_interpolate(in[0], 0, 0, 1.6, 0.75, (kiln_interp_mode)m[0], m[1]);
    return kiln_interpolate(in[0], 5, 7, 0, 0, (kiln_interp_mode)m[0], m[1]);
}

KT_TEST(gradients_finite_differences) {
    kiln_shape shapes[1] = {KILN_SHAPE(2, 2, 3, 4)};
    int m[][3] = {{KILN_INTERP_NEAREST, 0, 0}, {KILN_INTERP_BILINEAR, 0, 0}, {KILN_INTERP_BILINEAR, 1, 0},
                  {KILN_INTERP_BILINEAR, 0, 1}, {KILN_INTERP_NEAREST, 0, 1}};
    for (size_t i = 0; i < sizeof m / sizeof m[0]; i++) {
        char name[48];
        snprintf(name, sizeof name, "interpolate %zu", i);
        GC_CHECK(name, gc_interp, m[i], 1, shapes, 1e-6);
    }
}

/* Upsample is interpolate as a module: the same values; its arguments are checked when made. */
KT_TEST(upsample_module) {
    ew_mark mark = ew_mark_now();
    kiln_module *m = kiln_upsample_new(0, 0, 2.0, 1.5, KILN_INTERP_BILINEAR, true);
    KT_CHECK(m && strcmp(kiln_module_type(m), "Upsample") == 0 && kiln_module_params(m, NULL, 0) == 0);
    kiln_tensor x = kiln_randn(KILN_CPU, KILN_F32, KILN_SHAPE(2, 3, 4, 4), 5);
    double *a = ew_read(kiln_module_forward(m, kiln_ref(x)), KILN_F32, 2 * 3 * 8 * 6);
    double *b = ew_read(kiln_interpolate(x, 0, 0, 2.0, 1.5, KILN_INTERP_BILINEAR, true), KILN_F32, 2 * 3 * 8 * 6);
    if (a && b) KT_CHECK(memcmp(a, b, sizeof(double) * 2 * 3 * 8 * 6) == 0);
    free(a), free(b);
    kiln_module_free(m);
    int line;
    m = kiln_upsample_new(4, 4, 2.0, 2.0, KILN_INTERP_NEAREST, false); line = __LINE__;
    KT_CHECK(m == NULL);
    KT_EXPECT_ERROR(KILN_ERR_INVALID_ARGUMENT, "kiln_upsample_new", line);
    m = kiln_upsample_new(0, 0, INFINITY, 2.0, KILN_INTERP_NEAREST, false); line = __LINE__;
    KT_CHECK(m == NULL);
    KT_EXPECT_ERROR(KILN_ERR_INVALID_ARGUMENT, "kiln_upsample_new", line);
    m = kiln_upsample_new(4, 4, 0, 0, KILN_INTERP_NEAREST, true); line = __LINE__;
    KT_CHECK(m == NULL);
    KT_EXPECT_ERROR(KILN_ERR_INVALID_ARGUMENT, "kiln_upsample_new", line);
    EW_NO_LEAKS(mark);
}

KT_TEST(bad_input) {
    ew_mark mark = ew_mark_now();
    kiln_tensor x = kiln_zeros(KILN_CPU, KILN_F32, KILN_SHAPE(1, 2, 3, 4)), r;
    const char *I = "kiln_interpolate";
    int line;
    r = kiln_interpolate(kiln_zeros(KILN_CPU, KILN_F32, KILN_SHAPE(2, 3, 4)), 4, 4, 0, 0, KILN_INTERP_NEAREST, false); line = __LINE__;
    EW_EXPECT_ERROR(r, KILN_ERR_SHAPE, I, line);
    r = kiln_interpolate(kiln_ref(x), 4, 4, 2, 2, KILN_INTERP_NEAREST, false); line = __LINE__;
    EW_EXPECT_ERROR(r, KILN_ERR_INVALID_ARGUMENT, I, line);
    r = kiln_interpolate(kiln_ref(x), 0, 0, 0, 0, KILN_INTERP_BILINEAR, false); line = __LINE__;
    EW_EXPECT_ERROR(r, KILN_ERR_INVALID_ARGUMENT, I, line);
    r = kiln_interpolate(kiln_ref(x), 4, 0, 0, 0, KILN_INTERP_BILINEAR, false); line = __LINE__;
    EW_EXPECT_ERROR(r, KILN_ERR_SHAPE, I, line);
    r = kiln_interpolate(kiln_ref(x), -3, 4, 0, 0, KILN_INTERP_BILINEAR, false); line = __LINE__;
    EW_EXPECT_ERROR(r, KILN_ERR_SHAPE, I, line);
    r = kiln_interpolate(kiln_ref(x), 0, 0, -1, 2, KILN_INTERP_BILINEAR, false); line = __LINE__;
    EW_EXPECT_ERROR(r, KILN_ERR_INVALID_ARGUMENT, I, line);
    r = kiln_interpolate(kiln_ref(x), 0, 0, NAN, 2, KILN_INTERP_BILINEAR, false); line = __LINE__;
    EW_EXPECT_ERROR(r, KILN_ERR_INVALID_ARGUMENT, I, line);
    r = kiln_interpolate(kiln_ref(x), 0, 0, 1e30, 2, KILN_INTERP_BILINEAR, false); line = __LINE__;
    EW_EXPECT_ERROR(r, KILN_ERR_INVALID_ARGUMENT, I, line);
    r = kiln_interpolate(kiln_ref(x), 0, 0, 0.1, 2, KILN_INTERP_BILINEAR, false); line = __LINE__;
    EW_EXPECT_ERROR(r, KILN_ERR_SHAPE, I, line); /* floor(3 * 0.1) = 0 rows */
    r = kiln_interpolate(kiln_ref(x), (int64_t)1 << 38, (int64_t)1 << 38, 0, 0, KILN_INTERP_NEAREST, false); line = __LINE__;
    EW_EXPECT_ERROR(r, KILN_ERR_OUT_OF_MEMORY, I, line); /* 2^77 elements, refused before any allocation */
    r = kiln_interpolate(kiln_ref(x), 6, 6, 0, 0, KILN_INTERP_NEAREST, true); line = __LINE__;
    EW_EXPECT_ERROR(r, KILN_ERR_INVALID_ARGUMENT, I, line);
    r = kiln_interpolate(kiln_ref(x), 6, 6, 0, 0, (kiln_interp_mode)7, false); line = __LINE__;
    EW_EXPECT_ERROR(r, KILN_ERR_INVALID_ARGUMENT, I, line);
    r = kiln_interpolate(kiln_zeros(KILN_CPU, KILN_I32, KILN_SHAPE(1, 1, 2, 2)), 4, 4, 0, 0, KILN_INTERP_BILINEAR, false); line = __LINE__;
    EW_EXPECT_ERROR(r, KILN_ERR_DTYPE, I, line);
    r = kiln_interpolate(KILN_NONE, 4, 4, 0, 0, KILN_INTERP_BILINEAR, false); line = __LINE__;
    EW_EXPECT_ERROR(r, KILN_ERR_NULL, I, line);
    r = kiln_interpolate(ew_stale(), 4, 4, 0, 0, KILN_INTERP_BILINEAR, false); line = __LINE__;
    EW_EXPECT_ERROR(r, KILN_ERR_STALE_HANDLE, I, line);
    line = __LINE__; r = kiln_interpolate(EW_POISONED(), 4, 4, 0, 0, KILN_INTERP_BILINEAR, false);
    EW_EXPECT_ERROR(r, KILN_ERR_SHAPE, "kiln_reshape", line);
    kiln_release(x);
    EW_NO_LEAKS(mark);
}

int main(void) {
    KT_RUN(against_reference);
    KT_RUN(pytorch_values);
    KT_RUN(gradients_finite_differences);
    KT_RUN(upsample_module);
    KT_RUN(bad_input);
    return kt_finish();
}
