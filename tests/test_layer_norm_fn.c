/* Functional layer_norm (torch.nn.functional.layer_norm) against a double reference: f32 and
 * f64, one or several normalised dims, odd sizes, batch dims, strided and permuted inputs,
 * with and without weight and bias, a large mean (the variance is taken of centred values),
 * LayerNorm giving the same values as the functional it runs, finite-difference gradients for
 * x, weight and bias, bad input, leaks. */
#include "gradcheck.h"
#include "nd_layout.h"

/* y of x [rows, d] (row-major), with w/b of d values or NULL */
static void reference(const double *x, int64_t rows, int64_t d, const double *w, const double *b, double eps, double *y) {
    for (int64_t r = 0; r < rows; r++) {
        const double *xr = x + r * d;
        double mean = 0, var = 0;
        for (int64_t i = 0; i < d; i++) mean += xr[i];
        mean /= (double)d;
        for (int64_t i = 0; i < d; i++) var += (xr[i] - mean) * (xr[i] - mean);
        var /= (double)d;
        for (int64_t i = 0; i < d; i++) {
            double v = (xr[i] - mean) / sqrt(var + eps);
            y[r * d + i] = v * (w ? w[i] : 1.0) + (b ? b[i] : 0.0);
        }
    }
}

static void check_layer_norm(kiln_dtype dt, kiln_shape sx, int k, nd_layout layout, bool has_w, bool has_b, double eps,
                             double centre) {
    kiln_shape ns = {k, {0}};
    int64_t d = 1;
    for (int i = 0; i < k; i++) d *= (ns.dims[i] = sx.dims[sx.ndim - k + i]);
    int64_t n = kiln_shape_numel(sx), rows = d ? n / d : 0;
    double *x = malloc(sizeof(double) * (size_t)(n + 1)), *want = malloc(sizeof(double) * (size_t)(n + 1));
    double *w = malloc(sizeof(double) * (size_t)(d + 1)), *b = malloc(sizeof(double) * (size_t)(d + 1));
    ew_values(x, n, dt, centre - 2, centre + 2);
    ew_values(w, d, dt, 0.5, 2);
    ew_values(b, d, dt, -1, 1);
    reference(x, rows, d, has_w ? w : NULL, has_b ? b : NULL, eps, want);
    kiln_tensor y = kiln_layer_norm(nd_make(dt, sx, x, layout), ns, has_w ? ew_tensor(dt, ns, w) : KILN_NONE,
                                    has_b ? ew_tensor(dt, ns, b) : KILN_NONE, eps);
    double *got = ew_read(y, dt, n);
    char label[128];
    snprintf(label, sizeof label, "layer_norm %s[%s] %d-d over %d w%d b%d eps %g mean %g", kiln_dtype_name(dt),
             nd_layout_names[layout], sx.ndim, k, has_w, has_b, eps, centre);
    /* f32: the statistics are rounded to f32 and centring loses |mean| / spread of the ulps */
    double tol = dt == KILN_F64 ? 1e-12 : 2e-6 * (1 + fabs(centre));
    if (got) EW_EXPECT_CLOSE(label, got, want, n, tol, tol);
    free(got);
    free(x);
    free(want);
    free(w);
    free(b);
}

KT_TEST(layer_norm_matches_reference) {
    kt_mem_begin();
    const struct {
        kiln_shape x;
        int k;
    } cases[] = {
        {KILN_SHAPE(3, 5, 7), 1}, {KILN_SHAPE(2, 3, 4, 5), 2}, {KILN_SHAPE(6), 1},     {KILN_SHAPE(2, 3, 1), 2},
        {KILN_SHAPE(5, 129), 1},  {KILN_SHAPE(3, 7, 11), 3},  {KILN_SHAPE(0, 9), 1},  {KILN_SHAPE(4, 1), 1},
    };
    const kiln_dtype dts[] = {KILN_F32, KILN_F64};
    for (int c = 0; c < (int)(sizeof cases / sizeof cases[0]); c++)
        for (int t = 0; t < 2; t++)
            for (int affine = 0; affine < 4; affine++)
                for (int l = 0; l < ND_NLAYOUTS; l++)
                    check_layer_norm(dts[t], cases[c].x, cases[c].k, (nd_layout)l, affine & 1, affine & 2,
                                     affine == 3 ? 0.1 : 1e-5, 0.0);
    for (int t = 0; t < 2; t++) check_layer_norm(dts[t], KILN_SHAPE(4, 33), 1, ND_DENSE, true, true, 1e-5, 100.0);
    KT_MEM_CHECK();
}

KT_TEST(layer_norm_module_runs_the_functional) {
    kt_mem_begin();
    enum { D = 7 };
    double xv[3 * D], wv[D], bv[D], a[3 * D], f[3 * D];
    ew_values(xv, 3 * D, KILN_F32, -3, 3);
    ew_values(wv, D, KILN_F32, 0.5, 2);
    ew_values(bv, D, KILN_F32, -1, 1);
    kiln_module *m = kiln_layer_norm_new(D, 1e-3, true);
    kiln_param ps[2];
    KT_CHECK(kiln_module_params(m, ps, 2) == 2);
    kiln_release(*ps[0].slot), *ps[0].slot = ew_tensor(KILN_F32, KILN_SHAPE(D), wv);
    kiln_release(*ps[1].slot), *ps[1].slot = ew_tensor(KILN_F32, KILN_SHAPE(D), bv);
    kiln_tensor x = ew_tensor(KILN_F32, KILN_SHAPE(3, D), xv);
    KT_CHECK(kiln_into_data(kiln_module_forward(m, kiln_ref(x)), a, sizeof(float) * 3 * D) == KILN_OK);
    kiln_tensor y = kiln_layer_norm(x, KILN_SHAPE(D), kiln_ref(*ps[0].slot), kiln_ref(*ps[1].slot), 1e-3);
    KT_CHECK(kiln_into_data(y, f, sizeof(float) * 3 * D) == KILN_OK);
    KT_CHECK(memcmp(a, f, sizeof(float) * 3 * D) == 0);
    kiln_module_free(m);
    KT_MEM_CHECK();
}

/* ---- gradients ---------------------------------------------------------------------------- */

typedef struct {
    kiln_shape ns;
    bool has_w, has_b;
} ln_case;

static kiln_tensor ln_fn(kiln_tensor *in, void *ctx) {
    const ln_case *lc = ctx;
    int i = 1;
    kiln_tensor w = lc->has_w ? in[i++] : KILN_NONE;
    kiln_tensor b = lc->has_b ? in[i++] : KILN_NONE;
    return kiln_layer_norm(in[0], lc->ns, w, b, 1e-5);
}

KT_TEST(layer_norm_gradient) {
    kt_mem_begin();
    ln_case full = {KILN_SHAPE(5), true, true}, two = {KILN_SHAPE(3, 4), true, true};
    ln_case plain = {KILN_SHAPE(6), false, false}, w_only = {KILN_SHAPE(2, 3), true, false};
    ln_case b_only = {KILN_SHAPE(4), false, true};
    GC_CHECK("layer_norm x w b", ln_fn, &full, 3, ((kiln_shape[]){KILN_SHAPE(2, 3, 5), KILN_SHAPE(5), KILN_SHAPE(5)}), 1e-5);
    GC_CHECK("layer_norm 2 dims", ln_fn, &two, 3, ((kiln_shape[]){KILN_SHAPE(2, 3, 4), KILN_SHAPE(3, 4), KILN_SHAPE(3, 4)}), 1e-5);
    GC_CHECK("layer_norm plain", ln_fn, &plain, 1, ((kiln_shape[]){KILN_SHAPE(3, 6)}), 1e-5);
    GC_CHECK("layer_norm weight only", ln_fn, &w_only, 2, ((kiln_shape[]){KILN_SHAPE(4, 2, 3), KILN_SHAPE(2, 3)}), 1e-5);
    GC_CHECK("layer_norm bias only", ln_fn, &b_only, 2, ((kiln_shape[]){KILN_SHAPE(3, 4), KILN_SHAPE(4)}), 1e-5);
    KT_MEM_CHECK();
}

/* ---- bad input -------------------------------------------------------------------------------- */

static kiln_tensor f32(kiln_shape s) { return kiln_ones(KILN_CPU, KILN_F32, s); }

KT_TEST(layer_norm_bad_input) {
    kt_mem_begin();
    const char *op = "kiln_layer_norm";
    int line;
    kiln_tensor y;
    y = kiln_layer_norm(kiln_ones(KILN_CPU, KILN_I32, KILN_SHAPE(2, 5)), KILN_SHAPE(5), KILN_NONE, KILN_NONE, 1e-5), line = __LINE__;
    EW_EXPECT_ERROR(y, KILN_ERR_DTYPE, op, line);
    y = kiln_layer_norm(f32(KILN_SHAPE(2, 5)), KILN_SHAPE(4), KILN_NONE, KILN_NONE, 1e-5), line = __LINE__;
    EW_EXPECT_ERROR(y, KILN_ERR_SHAPE, op, line);
    y = kiln_layer_norm(f32(KILN_SHAPE(5)), KILN_SHAPE(2, 5), KILN_NONE, KILN_NONE, 1e-5), line = __LINE__;
    EW_EXPECT_ERROR(y, KILN_ERR_SHAPE, op, line);
    y = kiln_layer_norm(f32(KILN_SHAPE(2, 5)), KILN_SCALAR_SHAPE, KILN_NONE, KILN_NONE, 1e-5), line = __LINE__;
    EW_EXPECT_ERROR(y, KILN_ERR_INVALID_ARGUMENT, op, line);
    y = kiln_layer_norm(f32(KILN_SHAPE(2, 5)), KILN_SHAPE(5), f32(KILN_SHAPE(1, 5)), KILN_NONE, 1e-5), line = __LINE__;
    EW_EXPECT_ERROR(y, KILN_ERR_SHAPE, op, line);
    y = kiln_layer_norm(f32(KILN_SHAPE(2, 5)), KILN_SHAPE(5), KILN_NONE, f32(KILN_SHAPE(4)), 1e-5), line = __LINE__;
    EW_EXPECT_ERROR(y, KILN_ERR_SHAPE, op, line);
    kiln_tensor int_bias = kiln_zeros(KILN_CPU, KILN_I64, KILN_SHAPE(5));
    y = kiln_layer_norm(f32(KILN_SHAPE(2, 5)), KILN_SHAPE(5), f32(KILN_SHAPE(5)), int_bias, 1e-5), line = __LINE__;
    EW_EXPECT_ERROR(y, KILN_ERR_DTYPE, op, line);
    y = kiln_layer_norm(f32(KILN_SHAPE(2, 5)), KILN_SHAPE(5), KILN_NONE, KILN_NONE, -1.0), line = __LINE__;
    EW_EXPECT_ERROR(y, KILN_ERR_INVALID_ARGUMENT, op, line);
    y = kiln_layer_norm(f32(KILN_SHAPE(2, 5)), KILN_SHAPE(5), KILN_NONE, KILN_NONE, NAN), line = __LINE__;
    EW_EXPECT_ERROR(y, KILN_ERR_INVALID_ARGUMENT, op, line);
    y = kiln_layer_norm(ew_stale(), KILN_SHAPE(2), KILN_NONE, KILN_NONE, 1e-5), line = __LINE__;
    EW_EXPECT_ERROR(y, KILN_ERR_STALE_HANDLE, op, line);
    y = kiln_layer_norm(f32(KILN_SHAPE(3, 2)), KILN_SHAPE(2), ew_stale(), KILN_NONE, 1e-5), line = __LINE__;
    EW_EXPECT_ERROR(y, KILN_ERR_STALE_HANDLE, op, line);
    y = kiln_layer_norm(KILN_NONE, KILN_SHAPE(2), KILN_NONE, KILN_NONE, 1e-5), line = __LINE__;
    EW_EXPECT_ERROR(y, KILN_ERR_NULL, op, line);
    kiln_tensor bad = EW_POISONED();
    line = __LINE__ - 1;
    y = kiln_layer_norm(f32(KILN_SHAPE(2, 3)), KILN_SHAPE(3), bad, KILN_NONE, 1e-5);
    EW_EXPECT_ERROR(y, KILN_ERR_SHAPE, "kiln_reshape", line);
    kiln_sync();
    kiln_clear_error();
    KT_MEM_CHECK();
}

int main(void) {
    KT_RUN(layer_norm_matches_reference);
    KT_RUN(layer_norm_module_runs_the_functional);
    KT_RUN(layer_norm_gradient);
    KT_RUN(layer_norm_bad_input);
    return kt_finish();
}
