/* Losses: cross_entropy (label smoothing, class weights, PyTorch's weighted mean), nll_loss,
 * mse_loss and bce_with_logits against double references computed here, extreme logits,
 * finite-difference gradients, and bad input (no leaks). */
#include "gradcheck.h"
#include "nn_util.h"

/* PyTorch's definition, straight from its formula:
 *   sum_i [(1-e) w[y_i] (-lp[i,y_i]) + e/C sum_c w[c] (-lp[i,c])] / sum_i w[y_i] */
static double ce_ref(const double *x, const int64_t *y, int n, int c, const double *w, double e) {
    double num = 0, den = 0;
    for (int i = 0; i < n; i++) {
        const double *r = x + i * c;
        double mx = r[0], s = 0;
        for (int k = 1; k < c; k++) mx = r[k] > mx ? r[k] : mx;
        for (int k = 0; k < c; k++) s += exp(r[k] - mx);
        double lse = mx + log(s), wy = w ? w[y[i]] : 1, smooth = 0;
        for (int k = 0; k < c; k++) smooth += (w ? w[k] : 1) * -(r[k] - lse);
        num += (1 - e) * wy * -(r[y[i]] - lse) + e / c * smooth;
        den += wy;
    }
    return num / den;
}

static kiln_tensor targets_of(kiln_dtype dt, int n, const int64_t *y) {
    double v[16];
    for (int i = 0; i < n; i++) v[i] = (double)y[i];
    return tensor_of(dt, KILN_SHAPE(n), v);
}

KT_TEST(cross_entropy_known_values) {
    kt_mem_begin();
    double x[3] = {1, 2, 3};
    int64_t y0 = 0;
    kiln_cross_entropy_options o = kiln_cross_entropy_defaults();
    KT_CHECK(o.label_smoothing == 0 && o.class_weights.id == KILN_NONE.id);
    kiln_tensor loss = kiln_cross_entropy(tensor_of(KILN_F64, KILN_SHAPE(1, 3), x), targets_of(KILN_I64, 1, &y0), o);
    KT_CHECK(kiln_tensor_ndim(loss) == 0);
    KT_NEAR(read_scalar(loss), 2.40760596444438, 1e-13);
    o.label_smoothing = 0.1;
    KT_NEAR(read_scalar(kiln_cross_entropy(tensor_of(KILN_F64, KILN_SHAPE(1, 3), x), targets_of(KILN_I64, 1, &y0), o)),
            2.30760596444438, 1e-13);
    double x2[6] = {1, 2, 3, 0.5, -1, 2}, w[3] = {0.2, 1.0, 3.0};
    int64_t y2[2] = {0, 2};
    o.label_smoothing = 0.2;
    o.class_weights = tensor_of(KILN_F64, KILN_SHAPE(3), w);
    KT_NEAR(read_scalar(kiln_cross_entropy(tensor_of(KILN_F64, KILN_SHAPE(2, 3), x2), targets_of(KILN_I64, 2, y2), o)),
            0.4560606977281381, 1e-13);
    kiln_release(o.class_weights);
    KT_MEM_CHECK();
}

KT_TEST(cross_entropy_matches_reference) {
    kt_mem_begin();
    enum { N = 6, C = 5 };
    double x[N * C], xt[N * C], w[C] = {0.5, 2, 1, 0.25, 3};
    int64_t y[N] = {0, 4, 2, 2, 1, 3};
    fill(x, N * C, -4, 4);
    for (int i = 0; i < N; i++)
        for (int k = 0; k < C; k++) xt[k * N + i] = x[i * C + k];
    const double smoothing[3] = {0, 0.1, 1};
    for (int dt = 0; dt < 2; dt++)
        for (int s = 0; s < 3; s++)
            for (int weighted = 0; weighted < 2; weighted++)
                for (int transposed = 0; transposed < 2; transposed++) {
                    kiln_dtype fdt = dt ? KILN_F64 : KILN_F32;
                    kiln_cross_entropy_options o = kiln_cross_entropy_defaults();
                    o.label_smoothing = smoothing[s];
                    /* weights in the other float dtype: they follow the logits */
                    if (weighted) o.class_weights = tensor_of(dt ? KILN_F32 : KILN_F64, KILN_SHAPE(C), w);
                    kiln_tensor logits = transposed ? kiln_transpose(tensor_of(fdt, KILN_SHAPE(C, N), xt), 0, 1)
                                                    : tensor_of(fdt, KILN_SHAPE(N, C), x);
                    kiln_tensor loss =
                        kiln_cross_entropy(logits, targets_of(transposed ? KILN_I32 : KILN_I64, N, y), o);
                    KT_CHECK(kiln_tensor_dtype(loss) == fdt);
                    double want = ce_ref(x, y, N, C, weighted ? w : NULL, smoothing[s]);
                    KT_NEAR(read_scalar(loss), want, dt ? 1e-12 : 2e-6);
                    if (weighted) { /* not consumed */
                        KT_CHECK(kiln_is_valid(o.class_weights));
                        kiln_release(o.class_weights);
                    }
                }

    /* half-precision logits: the loss comes back in their dtype, to their precision */
    for (int h = 0; h < 2; h++) {
        kiln_dtype hdt = h ? KILN_BF16 : KILN_F16;
        kiln_cross_entropy_options o = kiln_cross_entropy_defaults();
        o.label_smoothing = 0.1;
        o.class_weights = tensor_of(KILN_F32, KILN_SHAPE(C), w);
        kiln_tensor loss = kiln_cross_entropy(tensor_of(hdt, KILN_SHAPE(N, C), x), targets_of(KILN_I64, N, y), o);
        KT_CHECK(kiln_tensor_dtype(loss) == hdt);
        KT_NEAR(read_scalar(loss), ce_ref(x, y, N, C, w, 0.1), h ? 3e-2 : 5e-3);
        kiln_release(o.class_weights);
        double t[N * C];
        for (int i = 0; i < N * C; i++) t[i] = (i % 3) / 2.0;
        double bce = 0, mse = 0;
        for (int i = 0; i < N * C; i++) {
            bce += (fmax(x[i], 0) - x[i] * t[i] + log1p(exp(-fabs(x[i])))) / (N * C);
            mse += (x[i] - t[i]) * (x[i] - t[i]) / (N * C);
        }
        KT_NEAR(
            read_scalar(kiln_bce_with_logits(tensor_of(hdt, KILN_SHAPE(N, C), x), tensor_of(hdt, KILN_SHAPE(N, C), t))),
            bce, h ? 3e-2 : 5e-3);
        KT_NEAR(read_scalar(kiln_mse_loss(tensor_of(hdt, KILN_SHAPE(N, C), x), tensor_of(hdt, KILN_SHAPE(N, C), t))),
                mse, h ? 3e-2 : 5e-3);
    }

    /* extreme logits stay finite: log_softmax never exponentiates a large positive */
    double ex[6] = {100, -100, 0, 1000, 0, -1000};
    int64_t ey[2] = {1, 2};
    for (int dt = 0; dt < 2; dt++) {
        double v = read_scalar(kiln_cross_entropy(tensor_of(dt ? KILN_F64 : KILN_F32, KILN_SHAPE(2, 3), ex),
                                                  targets_of(KILN_I64, 2, ey), kiln_cross_entropy_defaults()));
        KT_CHECK(isfinite(v));
        KT_NEAR(v, 1100, 1e-6);
    }
    /* an empty batch is 0/0, as in torch */
    kiln_tensor none = kiln_cross_entropy(kiln_zeros(KILN_CPU, KILN_F32, KILN_SHAPE(0, 3)),
                                          kiln_zeros(KILN_CPU, KILN_I64, KILN_SHAPE(0)), kiln_cross_entropy_defaults());
    KT_CHECK(isnan(read_scalar(none)));
    KT_MEM_CHECK();
}

KT_TEST(nll_mse_bce_match_reference) {
    kt_mem_begin();
    enum { N = 5, C = 4 };
    double lp[N * C];
    int64_t y[N] = {3, 0, 1, 3, 2};
    fill(lp, N * C, -5, 0);
    double want = 0;
    for (int i = 0; i < N; i++) want -= lp[i * C + y[i]] / N;
    KT_NEAR(read_scalar(kiln_nll_loss(tensor_of(KILN_F32, KILN_SHAPE(N, C), lp), targets_of(KILN_I32, N, y))), want,
            1e-6);
    KT_NEAR(read_scalar(kiln_nll_loss(tensor_of(KILN_F64, KILN_SHAPE(N, C), lp), targets_of(KILN_I64, N, y))), want,
            1e-13);

    /* mse, with a transposed prediction */
    double a[12], b[12], at[12];
    fill(a, 12, -3, 3);
    fill(b, 12, -3, 3);
    for (int i = 0; i < 3; i++)
        for (int j = 0; j < 4; j++) at[j * 3 + i] = a[i * 4 + j];
    want = 0;
    for (int i = 0; i < 12; i++) want += (a[i] - b[i]) * (a[i] - b[i]) / 12;
    KT_NEAR(read_scalar(kiln_mse_loss(kiln_transpose(tensor_of(KILN_F32, KILN_SHAPE(4, 3), at), 0, 1),
                                      tensor_of(KILN_F32, KILN_SHAPE(3, 4), b))),
            want, 1e-6);
    KT_NEAR(read_scalar(kiln_mse_loss(tensor_of(KILN_F64, KILN_SHAPE(12), a), tensor_of(KILN_F64, KILN_SHAPE(12), b))),
            want, 1e-13);

    /* bce with logits: soft targets and extreme logits, f32 and f64 */
    double x[10] = {100, -100, 100, -100, 0, 5.5, -3.25, 19, -40, 0.125};
    double t[10] = {0, 1, 1, 0, 0.5, 1, 0, 0.25, 0.75, 1};
    want = 0;
    for (int i = 0; i < 10; i++) want += (fmax(x[i], 0) - x[i] * t[i] + log1p(exp(-fabs(x[i])))) / 10;
    for (int dt = 0; dt < 2; dt++) {
        kiln_dtype fdt = dt ? KILN_F64 : KILN_F32;
        double v =
            read_scalar(kiln_bce_with_logits(tensor_of(fdt, KILN_SHAPE(2, 5), x), tensor_of(fdt, KILN_SHAPE(2, 5), t)));
        KT_CHECK(isfinite(v));
        KT_NEAR(v, want, dt ? 1e-12 : 1e-6);
    }
    /* each extreme alone: 100 when wrong, ~0 when right */
    double big[4] = {100, -100, 100, -100}, tgt[4] = {0, 1, 1, 0};
    for (int i = 0; i < 4; i++) {
        double v = read_scalar(kiln_bce_with_logits(tensor_of(KILN_F32, KILN_SHAPE(1), &big[i]),
                                                    tensor_of(KILN_F32, KILN_SHAPE(1), &tgt[i])));
        KT_NEAR(v, i < 2 ? 100 : 0, 1e-6);
    }
    KT_MEM_CHECK();
}

/* ---- gradients ------------------------------------------------------------------------------ */

typedef struct {
    kiln_cross_entropy_options o;
    const int64_t *y;
    int n;
    bool transposed;
} ce_case;

static kiln_tensor run_ce(kiln_tensor *in, void *ctx) {
    ce_case *cc = ctx;
    kiln_tensor logits = cc->transposed ? kiln_transpose(in[0], 0, 1) : in[0];
    return kiln_cross_entropy(logits, targets_of(KILN_I64, cc->n, cc->y), cc->o);
}

static kiln_tensor run_nll(kiln_tensor *in, void *ctx) {
    ce_case *cc = ctx;
    return kiln_nll_loss(in[0], targets_of(KILN_I32, cc->n, cc->y));
}

static kiln_tensor run_mse(kiln_tensor *in, void *ctx) { return kiln_mse_loss(in[0], in[1]); }
static kiln_tensor run_bce(kiln_tensor *in, void *ctx) {
    /* logits spread over [-6, 6] so that both tails are exercised */
    return kiln_bce_with_logits(kiln_mul_scalar(in[0], 6.0), in[1]);
}

KT_TEST(loss_gradients) {
    kt_mem_begin();
    int64_t y[4] = {2, 0, 4, 2};
    double w[5] = {0.5, 2, 1, 0.25, 3};
    kiln_tensor weights = tensor_of(KILN_F64, KILN_SHAPE(5), w);
    kiln_shape s[1] = {KILN_SHAPE(4, 5)};
    for (int smooth = 0; smooth < 2; smooth++)
        for (int weighted = 0; weighted < 2; weighted++) {
            ce_case cc = {kiln_cross_entropy_defaults(), y, 4, false};
            cc.o.label_smoothing = smooth ? 0.2 : 0;
            cc.o.class_weights = weighted ? weights : KILN_NONE;
            char name[64];
            snprintf(name, sizeof name, "cross_entropy smooth=%d weighted=%d", smooth, weighted);
            GC_CHECK(name, run_ce, &cc, 1, s, 1e-6);
        }
    ce_case tc = {kiln_cross_entropy_defaults(), y, 4, true};
    GC_CHECK("cross_entropy transposed", run_ce, &tc, 1, ((kiln_shape[]){KILN_SHAPE(5, 4)}), 1e-6);
    GC_CHECK("nll_loss", run_nll, &tc, 1, s, 1e-6);
    kiln_shape two[2] = {KILN_SHAPE(3, 4), KILN_SHAPE(3, 4)};
    GC_CHECK("mse_loss", run_mse, NULL, 2, two, 1e-6);
    GC_CHECK("bce_with_logits", run_bce, NULL, 2, two, 1e-6);
    kiln_release(weights);

    /* bce's gradient at exactly 0 is sigmoid(0) - y, from both sides */
    double t[4] = {0, 1, 0.5, 0.25}, g[4];
    kiln_tensor x = kiln_zeros(KILN_CPU, KILN_F32, KILN_SHAPE(4));
    kiln_require_grad(x);
    kiln_grads *grads = NULL;
    KT_CHECK(kiln_backward(kiln_bce_with_logits(kiln_ref(x), tensor_of(KILN_F32, KILN_SHAPE(4), t)), &grads) ==
             KILN_OK);
    read_f64(kiln_grad(grads, x), g, 4);
    for (int i = 0; i < 4; i++) KT_NEAR(g[i], (0.5 - t[i]) / 4, 1e-7);
    kiln_grads_free(grads);
    /* cross_entropy's gradient is (softmax - onehot) / N, even for extreme logits */
    double ex[6] = {100, -100, 0, 1000, 0, -1000}, want[6] = {1, -1, 0, 1, 0, -1};
    int64_t ey[2] = {1, 2};
    kiln_tensor logits = tensor_of(KILN_F32, KILN_SHAPE(2, 3), ex);
    kiln_require_grad(logits);
    grads = NULL;
    KT_CHECK(
        kiln_backward(kiln_cross_entropy(kiln_ref(logits), targets_of(KILN_I64, 2, ey), kiln_cross_entropy_defaults()),
                      &grads) == KILN_OK);
    double gl[6];
    read_f64(kiln_grad(grads, logits), gl, 6);
    for (int i = 0; i < 6; i++) KT_NEAR(gl[i], want[i] / 2, 1e-6);
    kiln_grads_free(grads);
    kiln_release(x);
    kiln_release(logits);
    KT_MEM_CHECK();
}

/* ---- bad input ------------------------------------------------------------------------------ */

KT_TEST(bad_inputs) {
    kt_mem_begin();
    kiln_tensor logits = kiln_zeros(KILN_CPU, KILN_F32, KILN_SHAPE(3, 4));
    kiln_tensor y = kiln_zeros(KILN_CPU, KILN_I64, KILN_SHAPE(3));
    kiln_cross_entropy_options o = kiln_cross_entropy_defaults();
    const char *ce = "kiln_cross_entropy";
    KT_READ_ERROR(kiln_cross_entropy(kiln_zeros(KILN_CPU, KILN_F32, KILN_SHAPE(4)), kiln_ref(y), o), KILN_ERR_SHAPE, ce);
    KT_READ_ERROR(kiln_cross_entropy(kiln_zeros(KILN_CPU, KILN_I32, KILN_SHAPE(3, 4)), kiln_ref(y), o), KILN_ERR_DTYPE,
                 ce);
    KT_READ_ERROR(kiln_cross_entropy(kiln_ref(logits), kiln_zeros(KILN_CPU, KILN_F32, KILN_SHAPE(3)), o), KILN_ERR_DTYPE,
                 ce);
    KT_READ_ERROR(kiln_cross_entropy(kiln_ref(logits), kiln_zeros(KILN_CPU, KILN_I64, KILN_SHAPE(4)), o), KILN_ERR_SHAPE,
                 ce);
    KT_READ_ERROR(kiln_cross_entropy(kiln_ref(logits), kiln_zeros(KILN_CPU, KILN_I64, KILN_SHAPE(3, 1)), o),
                 KILN_ERR_SHAPE, ce);
    KT_READ_ERROR(kiln_cross_entropy(kiln_zeros(KILN_CPU, KILN_F32, KILN_SHAPE(3, 0)), kiln_ref(y), o), KILN_ERR_SHAPE,
                 ce);
    double smooth[3] = {1.5, -0.1, NAN};
    for (int i = 0; i < 3; i++) {
        o.label_smoothing = smooth[i];
        KT_READ_ERROR(kiln_cross_entropy(kiln_ref(logits), kiln_ref(y), o), KILN_ERR_INVALID_ARGUMENT, ce);
    }
    o.label_smoothing = 0;
    struct {
        kiln_tensor w;
        kiln_status st;
    } weights[] = {
        {kiln_ones(KILN_CPU, KILN_F32, KILN_SHAPE(5)), KILN_ERR_SHAPE},
        {kiln_ones(KILN_CPU, KILN_F32, KILN_SHAPE(1, 4)), KILN_ERR_SHAPE},
        {kiln_ones(KILN_CPU, KILN_I64, KILN_SHAPE(4)), KILN_ERR_DTYPE},
        {kiln_reshape(kiln_ones(KILN_CPU, KILN_F32, KILN_SHAPE(4)), KILN_SHAPE(3)), KILN_ERR_SHAPE}, /* poisoned */
    };
    for (size_t i = 0; i < sizeof weights / sizeof weights[0]; i++) {
        o.class_weights = weights[i].w;
        KT_READ_ERROR(kiln_cross_entropy(kiln_ref(logits), kiln_ref(y), o), weights[i].st, ce);
        KT_CHECK(kiln_is_valid(weights[i].w)); /* not consumed, even on failure */
        kiln_release(weights[i].w);
    }
    o.class_weights = weights[0].w; /* released: stale */
    KT_READ_ERROR(kiln_cross_entropy(kiln_ref(logits), kiln_ref(y), o), KILN_ERR_STALE_HANDLE, ce);
    o.class_weights = KILN_NONE;

    /* stale and poisoned inputs keep their own errors */
    kiln_tensor gone = kiln_zeros(KILN_CPU, KILN_F32, KILN_SHAPE(3, 4));
    kiln_release(gone);
    KT_READ_ERROR(kiln_cross_entropy(gone, kiln_ref(y), o), KILN_ERR_STALE_HANDLE, ce);
    KT_READ_ERROR(kiln_cross_entropy(kiln_reshape(kiln_ref(logits), KILN_SHAPE(5)), kiln_ref(y), o), KILN_ERR_SHAPE,
                 "kiln_reshape");
    KT_READ_ERROR(kiln_cross_entropy(kiln_ref(logits), KILN_NONE, o), KILN_ERR_NULL, ce);

    /* targets outside [0, C): bad_targets_name_the_loss */

    const char *nll = "kiln_nll_loss";
    KT_READ_ERROR(kiln_nll_loss(kiln_zeros(KILN_CPU, KILN_F32, KILN_SHAPE(3, 4, 1)), kiln_ref(y)), KILN_ERR_SHAPE, nll);
    KT_READ_ERROR(kiln_nll_loss(kiln_ref(logits), kiln_zeros(KILN_CPU, KILN_BOOL, KILN_SHAPE(3))), KILN_ERR_DTYPE, nll);
    KT_READ_ERROR(kiln_nll_loss(gone, kiln_ref(y)), KILN_ERR_STALE_HANDLE, nll);

    const char *pair_ops[2] = {"kiln_mse_loss", "kiln_bce_with_logits"};
    kiln_tensor (*pair_fns[2])(kiln_tensor, kiln_tensor) = {(kiln_mse_loss), (kiln_bce_with_logits)};
    for (int i = 0; i < 2; i++) {
        /* [3, 1] against [3] would broadcast to [3, 3]: refused */
        KT_READ_ERROR(pair_fns[i](kiln_zeros(KILN_CPU, KILN_F32, KILN_SHAPE(3, 1)),
                                 kiln_zeros(KILN_CPU, KILN_F32, KILN_SHAPE(3))),
                     KILN_ERR_SHAPE, pair_ops[i]);
        KT_READ_ERROR(
            pair_fns[i](kiln_zeros(KILN_CPU, KILN_I32, KILN_SHAPE(3)), kiln_zeros(KILN_CPU, KILN_F32, KILN_SHAPE(3))),
            KILN_ERR_DTYPE, pair_ops[i]);
        KT_READ_ERROR(pair_fns[i](kiln_zeros(KILN_CPU, KILN_F32, KILN_SHAPE(3)), gone), KILN_ERR_STALE_HANDLE,
                     pair_ops[i]);
        KT_READ_ERROR(pair_fns[i](kiln_reshape(kiln_ref(logits), KILN_SHAPE(7)), kiln_ref(logits)), KILN_ERR_SHAPE,
                     "kiln_reshape");
    }
    kiln_release(logits);
    kiln_release(y);
    KT_MEM_CHECK();
}

/* A target outside [0, C) is found by an indexing op inside the loss when that op runs (at
 * dispatch with KILN_SYNC=1, on an engine thread otherwise): the error still names the loss
 * the caller called, and the caller's line, not the internal op. */
static void expect_index_error(kiln_tensor loss, const char *op, int line) {
    float v;
    KT_CHECK(kiln_into_scalar(loss, &v) == KILN_ERR_INDEX);
    const char *msg = kiln_last_error();
    char site[64];
    snprintf(site, sizeof site, "test_nn_loss.c:%d", line);
    KT_CHECK_MSG(strncmp(msg, op, strlen(op)) == 0 && strstr(msg, site), "'%s' should name %s at %s", msg, op, site);
    KT_CHECK_MSG(!strstr(msg, "kiln_gather") && !strstr(msg, "kiln_index_select"), "'%s' names an internal op", msg);
}

KT_TEST(bad_targets_name_the_loss) {
    kt_mem_begin();
    kiln_tensor logits = kiln_zeros(KILN_CPU, KILN_F32, KILN_SHAPE(3, 4));
    kiln_tensor w = kiln_ones(KILN_CPU, KILN_F32, KILN_SHAPE(4));
    kiln_cross_entropy_options o = kiln_cross_entropy_defaults();
    int64_t outside[2][3] = {{0, 4, 1}, {0, -1, 1}};
    for (int i = 0; i < 4; i++) {
        o.class_weights = i < 2 ? KILN_NONE : w; /* weighted: index_select finds it too */
        o.label_smoothing = i == 3 ? 0.1 : 0.0;
        kiln_tensor y = targets_of(i % 2 ? KILN_I32 : KILN_I64, 3, outside[i % 2]);
        int line = __LINE__ + 1;
        kiln_tensor loss = kiln_cross_entropy(kiln_ref(logits), kiln_ref(y), o);
        expect_index_error(loss, "kiln_cross_entropy", line);
        line = __LINE__ + 1;
        loss = kiln_nll_loss(kiln_ref(logits), y);
        expect_index_error(loss, "kiln_nll_loss", line);
    }
    /* the scope closes with the loss: later ops name themselves again */
    kiln_tensor idx = targets_of(KILN_I64, 3, outside[0]);
    int line = __LINE__ + 1;
    kiln_tensor picked = kiln_index_select(kiln_ref(logits), 1, idx);
    KT_READ_ERROR(picked, KILN_ERR_INDEX, "kiln_index_select");
    char site[64];
    snprintf(site, sizeof site, "test_nn_loss.c:%d", line);
    KT_CHECK(strstr(kiln_last_error(), site) != NULL);
    kiln_release(logits);
    kiln_release(w);
    KT_MEM_CHECK();
}

/* ---- l1, smooth_l1, huber ------------------------------------------------------------------- */

static double ref_piecewise(const double *x, const double *t, int n, int kind, double k) {
    double sum = 0;
    for (int i = 0; i < n; i++) {
        double a = fabs(x[i] - t[i]);
        if (kind == 0 || k == 0) sum += a;
        else if (kind == 1) sum += a < k ? 0.5 * a * a / k : a - 0.5 * k;
        else sum += a < k ? 0.5 * a * a : k * (a - 0.5 * k);
    }
    return sum / n;
}

KT_TEST(l1_smooth_l1_huber_match_reference) {
    kt_mem_begin();
    const double x[12] = {0.3, -1.2, 2.5, 0.0, 0.75, -0.05, 1.9, -3.0, 0.2, 0.45, -0.6, 1.0};
    const double t[12] = {0.1, 0.4, 0.5, 0.0, 0.7, 0.3, -1.0, -2.5, 0.25, 1.5, -0.6, 0.0};
    kiln_shape s = KILN_SHAPE(3, 4);
    KT_NEAR(read_scalar(kiln_l1_loss(tensor_of(KILN_F64, s, x), tensor_of(KILN_F64, s, t))), ref_piecewise(x, t, 12, 0, 0), 1e-14);
    const double ks[4] = {0.0, 0.5, 1.0, 2.0};
    for (int i = 0; i < 4; i++) {
        KT_NEAR(read_scalar(kiln_smooth_l1_loss(tensor_of(KILN_F64, s, x), tensor_of(KILN_F64, s, t), ks[i])),
                ref_piecewise(x, t, 12, 1, ks[i]), 1e-14);
        if (ks[i] > 0)
            KT_NEAR(read_scalar(kiln_huber_loss(tensor_of(KILN_F64, s, x), tensor_of(KILN_F64, s, t), ks[i])),
                    ref_piecewise(x, t, 12, 2, ks[i]), 1e-14);
    }
    /* f32 too */
    KT_NEAR(read_scalar(kiln_huber_loss(tensor_of(KILN_F32, s, x), tensor_of(KILN_F32, s, t), 1.0)),
            ref_piecewise(x, t, 12, 2, 1.0), 1e-6);
    KT_MEM_CHECK();
}

static kiln_tensor run_l1(kiln_tensor *in, void *ctx) { return (void)ctx, kiln_l1_loss(in[0], in[1]); }
static kiln_tensor run_smooth_l1(kiln_tensor *in, void *ctx) { return kiln_smooth_l1_loss(in[0], in[1], *(double *)ctx); }
static kiln_tensor run_huber(kiln_tensor *in, void *ctx) { return kiln_huber_loss(in[0], in[1], *(double *)ctx); }

KT_TEST(l1_smooth_l1_huber_gradients) {
    kt_mem_begin();
    kiln_shape two[2] = {KILN_SHAPE(3, 4), KILN_SHAPE(3, 4)};
    double beta = 0.5, delta = 0.7, zero = 0;
    GC_CHECK("l1_loss", run_l1, NULL, 2, two, 1e-6);
    GC_CHECK("smooth_l1_loss beta 0.5", run_smooth_l1, &beta, 2, two, 1e-6);
    GC_CHECK("smooth_l1_loss beta 0", run_smooth_l1, &zero, 2, two, 1e-6);
    GC_CHECK("huber_loss delta 0.7", run_huber, &delta, 2, two, 1e-6);
    KT_MEM_CHECK();
}

KT_TEST(l1_smooth_l1_huber_bad_input) {
    kt_mem_begin();
    kiln_tensor gone = kiln_zeros(KILN_CPU, KILN_F32, KILN_SHAPE(3));
    kiln_release(gone);
#define Z(...) kiln_zeros(KILN_CPU, KILN_F32, KILN_SHAPE(__VA_ARGS__))
    KT_READ_ERROR(kiln_l1_loss(Z(3, 1), Z(3)), KILN_ERR_SHAPE, "kiln_l1_loss");
    KT_READ_ERROR(kiln_l1_loss(kiln_zeros(KILN_CPU, KILN_I64, KILN_SHAPE(3)), Z(3)), KILN_ERR_DTYPE, "kiln_l1_loss");
    KT_READ_ERROR(kiln_l1_loss(Z(3), gone), KILN_ERR_STALE_HANDLE, "kiln_l1_loss");
    KT_READ_ERROR(kiln_smooth_l1_loss(Z(3), Z(3), -1.0), KILN_ERR_INVALID_ARGUMENT, "kiln_smooth_l1_loss");
    KT_READ_ERROR(kiln_smooth_l1_loss(Z(3), Z(3), NAN), KILN_ERR_INVALID_ARGUMENT, "kiln_smooth_l1_loss");
    KT_READ_ERROR(kiln_smooth_l1_loss(Z(2, 3), Z(3, 2), 1.0), KILN_ERR_SHAPE, "kiln_smooth_l1_loss");
    KT_READ_ERROR(kiln_huber_loss(Z(3), Z(3), 0.0), KILN_ERR_INVALID_ARGUMENT, "kiln_huber_loss");
    KT_READ_ERROR(kiln_huber_loss(Z(3), Z(3), INFINITY), KILN_ERR_INVALID_ARGUMENT, "kiln_huber_loss");
    KT_READ_ERROR(kiln_huber_loss(gone, Z(3), 1.0), KILN_ERR_STALE_HANDLE, "kiln_huber_loss");
#undef Z
    KT_MEM_CHECK();
}

/* ---- ignore_index ----------------------------------------------------------------------------- */

static double ref_ce_ignore(const double *x, const int64_t *y, int n, int C, const double *w, double e, int64_t ignore) {
    double num = 0, smooth = 0, den = 0;
    for (int i = 0; i < n; i++) {
        if (y[i] == ignore) continue;
        double mx = -INFINITY, z = 0;
        for (int c = 0; c < C; c++) mx = fmax(mx, x[i * C + c]);
        for (int c = 0; c < C; c++) z += exp(x[i * C + c] - mx);
        double wy = w ? w[y[i]] : 1;
        num += wy * (x[i * C + y[i]] - mx - log(z));
        for (int c = 0; c < C; c++) smooth += (w ? w[c] : 1) * (x[i * C + c] - mx - log(z));
        den += wy;
    }
    return -((1 - e) * num + e / C * smooth) / den;
}

KT_TEST(cross_entropy_ignore_index) {
    kt_mem_begin();
    enum { N = 5, C = 4 };
    const double x[N * C] = {0.2, -1.0, 2.0, 0.5, 1.5, 0.3, -0.7, 0.0, -2.0, 0.4, 1.1, 0.9, 0.6, 0.6, -0.2, 3.0, 1.0, 2.0, 3.0, 4.0};
    const int64_t y[N] = {2, -100, 0, 3, -100};
    const double w[C] = {0.5, 2.0, 1.5, 0.25};
    kiln_tensor wt = tensor_of(KILN_F64, KILN_SHAPE(C), w);
    for (int weighted = 0; weighted < 2; weighted++)
        for (int smooth = 0; smooth < 2; smooth++) {
            kiln_cross_entropy_options o = kiln_cross_entropy_defaults();
            KT_CHECK(!o.has_ignore_index);
            o.has_ignore_index = true, o.ignore_index = -100;
            o.class_weights = weighted ? wt : KILN_NONE;
            o.label_smoothing = smooth ? 0.2 : 0;
            double got = read_scalar(kiln_cross_entropy(tensor_of(KILN_F64, KILN_SHAPE(N, C), x), targets_of(KILN_I64, N, y), o));
            KT_NEAR(got, ref_ce_ignore(x, y, N, C, weighted ? w : NULL, o.label_smoothing, -100), 1e-13);
            /* an ignore_index no target has: the default result */
            kiln_cross_entropy_options plain = o;
            plain.has_ignore_index = false;
            const int64_t y2[N] = {2, 1, 0, 3, 1};
            o.ignore_index = 7;
            KT_NEAR(read_scalar(kiln_cross_entropy(tensor_of(KILN_F64, KILN_SHAPE(N, C), x), targets_of(KILN_I32, N, y2), o)),
                    read_scalar(kiln_cross_entropy(tensor_of(KILN_F64, KILN_SHAPE(N, C), x), targets_of(KILN_I32, N, y2), plain)), 1e-13);
            /* ignoring a real class: that class's samples drop out */
            o.ignore_index = 1;
            KT_NEAR(read_scalar(kiln_cross_entropy(tensor_of(KILN_F64, KILN_SHAPE(N, C), x), targets_of(KILN_I64, N, y2), o)),
                    ref_ce_ignore(x, y2, N, C, weighted ? w : NULL, o.label_smoothing, 1), 1e-13);
        }
    /* every sample ignored: NaN, as torch */
    kiln_cross_entropy_options o = kiln_cross_entropy_defaults();
    o.has_ignore_index = true, o.ignore_index = -1;
    const int64_t none[2] = {-1, -1};
    KT_CHECK(isnan(read_scalar(kiln_cross_entropy(kiln_zeros(KILN_CPU, KILN_F32, KILN_SHAPE(2, 3)), targets_of(KILN_I64, 2, none), o))));
    /* a target neither in range nor ignored is still an error naming the loss */
    const int64_t bad[2] = {-1, 9};
    KT_READ_ERROR(kiln_cross_entropy(kiln_zeros(KILN_CPU, KILN_F32, KILN_SHAPE(2, 3)), targets_of(KILN_I64, 2, bad), o),
                  KILN_ERR_INDEX, "kiln_cross_entropy");
    /* gradients, ignored rows included (they get zero) */
    const int64_t yg[4] = {2, -1, 4, 0};
    for (int weighted = 0; weighted < 2; weighted++) {
        double w5[5] = {0.5, 2, 1, 0.25, 3};
        kiln_tensor w5t = tensor_of(KILN_F64, KILN_SHAPE(5), w5);
        ce_case cc = {o, yg, 4, false};
        cc.o.label_smoothing = 0.1;
        cc.o.class_weights = weighted ? w5t : KILN_NONE;
        GC_CHECK(weighted ? "cross_entropy ignore_index weighted" : "cross_entropy ignore_index", run_ce, &cc, 1,
                 ((kiln_shape[]){KILN_SHAPE(4, 5)}), 1e-6);
        kiln_release(w5t);
    }
    kiln_release(wt);
    KT_MEM_CHECK();
}

/* ---- binary_cross_entropy, kl_div ------------------------------------------------------------ */

KT_TEST(bce_and_kl_div_match_reference) {
    kt_mem_begin();
    const double p[6] = {0.1, 0.9, 0.5, 0.0, 1.0, 0.3}, t[6] = {0.0, 1.0, 0.25, 0.0, 0.5, 1.0};
    double ref = 0;
    for (int i = 0; i < 6; i++)
        ref -= (t[i] * fmax(log(p[i]), -100) + (1 - t[i]) * fmax(log(1 - p[i]), -100)) / 6;
    KT_NEAR(read_scalar(kiln_binary_cross_entropy(tensor_of(KILN_F64, KILN_SHAPE(2, 3), p), tensor_of(KILN_F64, KILN_SHAPE(2, 3), t))),
            ref, 1e-13);
    const double lq[6] = {-1.2, -0.4, -2.0, -0.1, -3.0, -0.7}, pt[6] = {0.2, 0.0, 0.5, 0.3, 0.0, 1.0};
    double kl = 0, kl_log = 0;
    for (int i = 0; i < 6; i++) {
        kl += pt[i] > 0 ? pt[i] * (log(pt[i]) - lq[i]) / 6 : 0;
        kl_log += exp(lq[5 - i]) * (lq[5 - i] - lq[i]) / 6;
    }
    double lq_rev[6];
    for (int i = 0; i < 6; i++) lq_rev[i] = lq[5 - i];
    KT_NEAR(read_scalar(kiln_kl_div(tensor_of(KILN_F64, KILN_SHAPE(6), lq), tensor_of(KILN_F64, KILN_SHAPE(6), pt), false)), kl, 1e-13);
    KT_NEAR(read_scalar(kiln_kl_div(tensor_of(KILN_F64, KILN_SHAPE(6), lq), tensor_of(KILN_F64, KILN_SHAPE(6), lq_rev), true)), kl_log,
            1e-13);
    KT_MEM_CHECK();
}

static kiln_tensor run_bce_probs(kiln_tensor *in, void *ctx) {
    return (void)ctx, kiln_binary_cross_entropy(kiln_sigmoid(in[0]), kiln_sigmoid(in[1]));
}
static kiln_tensor run_kl(kiln_tensor *in, void *ctx) {
    bool log_target = *(bool *)ctx;
    kiln_tensor target = log_target ? kiln_log_softmax(in[1], 1) : kiln_softmax(in[1], 1);
    return kiln_kl_div(kiln_log_softmax(in[0], 1), target, log_target);
}

KT_TEST(bce_and_kl_div_gradients) {
    kt_mem_begin();
    kiln_shape two[2] = {KILN_SHAPE(3, 4), KILN_SHAPE(3, 4)};
    bool no = false, yes = true;
    GC_CHECK("binary_cross_entropy", run_bce_probs, NULL, 2, two, 1e-6);
    GC_CHECK("kl_div", run_kl, &no, 2, two, 1e-6);
    GC_CHECK("kl_div log_target", run_kl, &yes, 2, two, 1e-6);
    KT_MEM_CHECK();
}

KT_TEST(bce_and_kl_div_bad_input) {
    kt_mem_begin();
    kiln_tensor gone = kiln_zeros(KILN_CPU, KILN_F32, KILN_SHAPE(3));
    kiln_release(gone);
#define Z(...) kiln_zeros(KILN_CPU, KILN_F32, KILN_SHAPE(__VA_ARGS__))
    KT_READ_ERROR(kiln_binary_cross_entropy(Z(3, 1), Z(3)), KILN_ERR_SHAPE, "kiln_binary_cross_entropy");
    KT_READ_ERROR(kiln_binary_cross_entropy(Z(3), kiln_zeros(KILN_CPU, KILN_I32, KILN_SHAPE(3))), KILN_ERR_DTYPE,
                  "kiln_binary_cross_entropy");
    KT_READ_ERROR(kiln_binary_cross_entropy(gone, Z(3)), KILN_ERR_STALE_HANDLE, "kiln_binary_cross_entropy");
    KT_READ_ERROR(kiln_kl_div(Z(2, 3), Z(3, 2), false), KILN_ERR_SHAPE, "kiln_kl_div");
    KT_READ_ERROR(kiln_kl_div(kiln_zeros(KILN_CPU, KILN_BOOL, KILN_SHAPE(3)), Z(3), true), KILN_ERR_DTYPE, "kiln_kl_div");
    KT_READ_ERROR(kiln_kl_div(Z(3), gone, false), KILN_ERR_STALE_HANDLE, "kiln_kl_div");
#undef Z
    KT_MEM_CHECK();
}

int main(void) {
    KT_RUN(cross_entropy_known_values);
    KT_RUN(cross_entropy_matches_reference);
    KT_RUN(nll_mse_bce_match_reference);
    KT_RUN(loss_gradients);
    KT_RUN(bad_inputs);
    KT_RUN(bad_targets_name_the_loss);
    KT_RUN(l1_smooth_l1_huber_match_reference);
    KT_RUN(l1_smooth_l1_huber_gradients);
    KT_RUN(l1_smooth_l1_huber_bad_input);
    KT_RUN(cross_entropy_ignore_index);
    KT_RUN(bce_and_kl_div_match_reference);
    KT_RUN(bce_and_kl_div_gradients);
    KT_RUN(bce_and_kl_div_bad_input);
    return kt_finish();
}
