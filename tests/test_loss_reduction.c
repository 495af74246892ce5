/* PyTorch's reduction (mean, sum, none; kl_div's batchmean) for every loss, and nll_loss with
 * class weights and ignore_index: values against double references written from torch's
 * definitions, K-dimensional and unbatched inputs as the 2-d case on permuted rows,
 * finite-difference gradients of the sum and none forms, and bad reductions
 * naming the loss and this file's line (no leaks). */
#include "gradcheck.h"
#include "nn_util.h"

enum { N = 4, C = 5, M = N * C };

/* ---- the elementwise losses: per-element references -------------------------------------- */

typedef enum { MSE, L1, SMOOTH_L1, HUBER, BCE, BCE_LOGITS, KL, KL_LOG, N_PAIR } pair_kind;
static const char *const pair_name[N_PAIR] = {"kiln_mse_loss", "kiln_l1_loss", "kiln_smooth_l1_loss", "kiln_huber_loss",
                                              "kiln_binary_cross_entropy", "kiln_bce_with_logits", "kiln_kl_div",
                                              "kiln_kl_div"};

static double pair_ref(pair_kind k, double p, double t) {
    double d = p - t, a = fabs(d);
    switch (k) {
    case MSE: return d * d;
    case L1: return a;
    case SMOOTH_L1: return a < 0.5 ? 0.5 * d * d / 0.5 : a - 0.25; /* beta 0.5 */
    case HUBER: return a < 0.7 ? 0.5 * d * d : 0.7 * (a - 0.35);   /* delta 0.7 */
    case BCE: return -(t * fmax(log(p), -100) + (1 - t) * fmax(log(1 - p), -100));
    case BCE_LOGITS: return fmax(p, 0) - p * t + log1p(exp(-fabs(p)));
    case KL: return t > 0 ? t * (log(t) - p) : 0;
    default: return exp(t) * (t - p);
    }
}

static kiln_tensor pair_loss(pair_kind k, kiln_tensor p, kiln_tensor t, kiln_reduction r) {
    switch (k) {
    case MSE: return kiln_mse_loss_ex(p, t, r);
    case L1: return kiln_l1_loss_ex(p, t, r);
    case SMOOTH_L1: return kiln_smooth_l1_loss_ex(p, t, 0.5, r);
    case HUBER: return kiln_huber_loss_ex(p, t, 0.7, r);
    case BCE: return kiln_binary_cross_entropy_ex(p, t, r);
    case BCE_LOGITS: return kiln_bce_with_logits_ex(p, t, r);
    case KL: return kiln_kl_div_ex(p, t, false, r);
    default: return kiln_kl_div_ex(p, t, true, r);
    }
}

/* Inputs in each loss's domain: probabilities for BCE, log-probabilities and probabilities
 * (one zero) for KL. */
static void pair_inputs(pair_kind k, double *p, double *t) {
    fill(p, M, -2, 2);
    fill(t, M, -2, 2);
    for (int i = 0; i < M; i++) {
        if (k == BCE) p[i] = 0.05 + 0.9 * (p[i] + 2) / 4, t[i] = (t[i] + 2) / 4;
        if (k == KL) t[i] = i == 3 ? 0 : (t[i] + 2) / 4;
        if (k == KL || k == KL_LOG) p[i] = -fabs(p[i]) - 0.1;
        if (k == KL_LOG) t[i] = -fabs(t[i]) - 0.2;
    }
}

KT_TEST(pair_losses_reduce_as_torch) {
    kt_mem_begin();
    for (int k = 0; k < N_PAIR; k++) {
        double p[M], t[M], ref[M], got[M], sum = 0;
        pair_inputs((pair_kind)k, p, t);
        for (int i = 0; i < M; i++) sum += ref[i] = pair_ref((pair_kind)k, p[i], t[i]);
        for (int dt = 0; dt < 2; dt++) {
            kiln_dtype d = dt ? KILN_F32 : KILN_F64;
            double tol = dt ? 2e-5 : 1e-12;
            kiln_tensor none = pair_loss((pair_kind)k, tensor_of(d, KILN_SHAPE(N, C), p), tensor_of(d, KILN_SHAPE(N, C), t),
                                         KILN_REDUCTION_NONE);
            KT_CHECK_MSG(has_shape(none, KILN_SHAPE(N, C)) && kiln_tensor_dtype(none) == d, "%s none", pair_name[k]);
            if (read_f64(none, got, M))
                for (int i = 0; i < M; i++) KT_CHECK_MSG(fabs(got[i] - ref[i]) <= tol * fmax(1, fabs(ref[i])), "%s none [%d]: %.12g vs %.12g", pair_name[k], i, got[i], ref[i]);
            KT_NEAR(read_scalar(pair_loss((pair_kind)k, tensor_of(d, KILN_SHAPE(N, C), p), tensor_of(d, KILN_SHAPE(N, C), t),
                                          KILN_REDUCTION_SUM)), sum, tol);
            KT_NEAR(read_scalar(pair_loss((pair_kind)k, tensor_of(d, KILN_SHAPE(N, C), p), tensor_of(d, KILN_SHAPE(N, C), t),
                                          KILN_REDUCTION_MEAN)), sum / M, tol);
        }
        /* the old entry points are the mean */
        if (k == MSE)
            KT_NEAR(read_scalar(kiln_mse_loss(tensor_of(KILN_F64, KILN_SHAPE(N, C), p), tensor_of(KILN_F64, KILN_SHAPE(N, C), t))), sum / M, 1e-12);
        if (k == KL) { /* batchmean: the sum over the first dim's size */
            KT_NEAR(read_scalar(kiln_kl_div_ex(tensor_of(KILN_F64, KILN_SHAPE(N, C), p), tensor_of(KILN_F64, KILN_SHAPE(N, C), t), false,
                                               KILN_REDUCTION_BATCHMEAN)), sum / N, 1e-12);
            KT_NEAR(read_scalar(kiln_kl_div(tensor_of(KILN_F64, KILN_SHAPE(N, C), p), tensor_of(KILN_F64, KILN_SHAPE(N, C), t), false)),
                    sum / M, 1e-12);
        }
    }
    /* an empty input: sum 0, mean NaN, none empty (as torch) */
    kiln_tensor e1 = kiln_zeros(KILN_CPU, KILN_F32, KILN_SHAPE(0, 3)), e2 = kiln_zeros(KILN_CPU, KILN_F32, KILN_SHAPE(0, 3));
    KT_CHECK(read_scalar(kiln_l1_loss_ex(kiln_ref(e1), kiln_ref(e2), KILN_REDUCTION_SUM)) == 0);
    KT_CHECK(isnan(read_scalar(kiln_l1_loss_ex(kiln_ref(e1), kiln_ref(e2), KILN_REDUCTION_MEAN))));
    kiln_tensor en = kiln_l1_loss_ex(e1, e2, KILN_REDUCTION_NONE);
    KT_CHECK(has_shape(en, KILN_SHAPE(0, 3)));
    kiln_release(en);
    KT_MEM_CHECK();
}

typedef struct {
    pair_kind k;
    kiln_reduction r;
} pair_case;

static kiln_tensor run_pair(kiln_tensor *in, void *ctx) {
    const pair_case *pc = ctx;
    kiln_tensor p = in[0], t = in[1];
    /* map the random inputs in [-1, 1) into each loss's domain, differentiably */
    if (pc->k == BCE) p = kiln_add_scalar(kiln_mul_scalar(p, 0.4), 0.5), t = kiln_add_scalar(kiln_mul_scalar(t, 0.5), 0.5);
    if (pc->k == KL) p = kiln_sub_scalar(kiln_neg(kiln_abs(p)), 0.1), t = kiln_add_scalar(kiln_mul_scalar(t, 0.4), 0.5);
    if (pc->k == KL_LOG) p = kiln_neg(kiln_abs(p)), t = kiln_sub_scalar(kiln_abs(t), 1.5);
    return pair_loss(pc->k, p, t, pc->r);
}

KT_TEST(pair_loss_gradients) {
    kt_mem_begin();
    const kiln_reduction rs[3] = {KILN_REDUCTION_NONE, KILN_REDUCTION_SUM, KILN_REDUCTION_MEAN};
    for (int k = 0; k < N_PAIR; k++)
        for (int r = 0; r < 3; r++) {
            pair_case pc = {(pair_kind)k, rs[r]};
            char name[96];
            snprintf(name, sizeof name, "%s reduction %d", pair_name[k], (int)rs[r]);
            GC_CHECK(name, run_pair, &pc, 2, ((kiln_shape[]){KILN_SHAPE(3, 4), KILN_SHAPE(3, 4)}), 1e-6);
        }
    pair_case bm = {KL, KILN_REDUCTION_BATCHMEAN};
    GC_CHECK("kl_div batchmean", run_pair, &bm, 2, ((kiln_shape[]){KILN_SHAPE(3, 4), KILN_SHAPE(3, 4)}), 1e-6);
    KT_MEM_CHECK();
}

/* ---- cross-entropy and NLL -------------------------------------------------------------------- */

static const double xs[M] = {0.2, -1.0, 2.0, 0.5, 1.1, 1.5, 0.3, -0.7, 0.0, -0.4, -2.0, 0.4, 1.1, 0.9, 0.3, 0.6, 0.6, -0.2, 3.0, -1.2};
static const int64_t ys[N] = {2, -100, 0, 4};
static const double ws[C] = {0.5, 2.0, 1.5, 0.25, 3.0};

/* Per-sample losses from torch's definition (0 where ignored) and the weighted-mean divisor. */
static double ce_ref_rows(const double *x, bool logits, const int64_t *y, const double *w, double e, bool ignore,
                          double *rows) {
    double den = 0;
    for (int i = 0; i < N; i++) {
        const double *r = x + i * C;
        double lse = 0;
        if (logits) {
            double s = 0;
            for (int k = 0; k < C; k++) s += exp(r[k]);
            lse = log(s);
        }
        if (ignore && y[i] == -100) {
            rows[i] = 0;
            continue;
        }
        double smooth = 0;
        for (int k = 0; k < C; k++) smooth += (w ? w[k] : 1) * -(r[k] - lse);
        double wy = w ? w[y[i]] : 1;
        rows[i] = (1 - e) * wy * -(r[y[i]] - lse) + e / C * smooth;
        den += wy;
    }
    return den;
}

static kiln_tensor targets(const int64_t *y, bool ignore) {
    double v[N];
    for (int i = 0; i < N; i++) v[i] = (double)(y[i] == -100 && !ignore ? 1 : y[i]);
    return tensor_of(KILN_I64, KILN_SHAPE(N), v);
}

static kiln_tensor classify(bool nll, kiln_tensor x, kiln_tensor y, kiln_cross_entropy_options o) {
    return nll ? kiln_nll_loss_ex(x, y, o) : kiln_cross_entropy(x, y, o);
}

KT_TEST(classification_reductions) {
    kt_mem_begin();
    kiln_tensor wt = tensor_of(KILN_F64, KILN_SHAPE(C), ws);
    int64_t y_plain[N];
    for (int i = 0; i < N; i++) y_plain[i] = ys[i] == -100 ? 1 : ys[i];
    for (int nll = 0; nll < 2; nll++)
        for (int weighted = 0; weighted < 2; weighted++)
            for (int ignore = 0; ignore < 2; ignore++)
                for (int smooth = 0; smooth < 2 - nll; smooth++) {
                    kiln_cross_entropy_options o = kiln_cross_entropy_defaults();
                    o.class_weights = weighted ? wt : KILN_NONE;
                    o.has_ignore_index = ignore, o.ignore_index = -100;
                    o.label_smoothing = smooth ? 0.15 : 0;
                    double rows[N], got[N], sum = 0;
                    double den = ce_ref_rows(xs, !nll, ignore ? ys : y_plain, weighted ? ws : NULL, o.label_smoothing,
                                             ignore, rows);
                    for (int i = 0; i < N; i++) sum += rows[i];
                    char what[64];
                    snprintf(what, sizeof what, "%s w%d i%d s%d", nll ? "nll" : "ce", weighted, ignore, smooth);
                    o.reduction = KILN_REDUCTION_NONE;
                    kiln_tensor none = classify(nll, tensor_of(KILN_F64, KILN_SHAPE(N, C), xs), targets(ys, ignore), o);
                    KT_CHECK_MSG(has_shape(none, KILN_SHAPE(N)), "%s", what);
                    if (read_f64(none, got, N))
                        for (int i = 0; i < N; i++) KT_CHECK_MSG(fabs(got[i] - rows[i]) < 1e-12, "%s [%d] %.12g vs %.12g", what, i, got[i], rows[i]);
                    o.reduction = KILN_REDUCTION_SUM;
                    KT_NEAR(read_scalar(classify(nll, tensor_of(KILN_F64, KILN_SHAPE(N, C), xs), targets(ys, ignore), o)), sum, 1e-12);
                    o.reduction = KILN_REDUCTION_MEAN;
                    KT_NEAR(read_scalar(classify(nll, tensor_of(KILN_F64, KILN_SHAPE(N, C), xs), targets(ys, ignore), o)), sum / den, 1e-12);
                    /* f32 too */
                    o.reduction = KILN_REDUCTION_SUM;
                    kiln_cross_entropy_options o32 = o;
                    kiln_tensor w32 = kiln_cast(kiln_ref(wt), KILN_F32);
                    o32.class_weights = weighted ? w32 : KILN_NONE;
                    KT_NEAR(read_scalar(classify(nll, tensor_of(KILN_F32, KILN_SHAPE(N, C), xs), targets(ys, ignore), o32)), sum, 1e-5);
                    kiln_release(w32);
                }
    /* kiln_nll_loss is the unweighted mean */
    double rows[N];
    ce_ref_rows(xs, false, y_plain, NULL, 0, false, rows);
    KT_NEAR(read_scalar(kiln_nll_loss(tensor_of(KILN_F64, KILN_SHAPE(N, C), xs), targets(ys, false))),
            (rows[0] + rows[1] + rows[2] + rows[3]) / N, 1e-12);
    /* an ignored row of -inf log-probabilities still gives 0 under none */
    double xinf[M];
    memcpy(xinf, xs, sizeof xinf);
    for (int k = 0; k < C; k++) xinf[C + k] = -INFINITY;
    kiln_cross_entropy_options o = kiln_cross_entropy_defaults();
    o.has_ignore_index = true, o.ignore_index = -100, o.reduction = KILN_REDUCTION_NONE;
    double got[N];
    if (read_f64(kiln_nll_loss_ex(tensor_of(KILN_F64, KILN_SHAPE(N, C), xinf), targets(ys, true), o), got, N))
        KT_CHECK(got[1] == 0 && isfinite(got[0]));
    kiln_release(wt);
    KT_MEM_CHECK();
}

typedef struct {
    bool nll;
    kiln_cross_entropy_options o;
} cls_case;

static kiln_tensor run_cls(kiln_tensor *in, void *ctx) {
    const cls_case *cc = ctx;
    return classify(cc->nll, in[0], targets(ys, cc->o.has_ignore_index), cc->o);
}

KT_TEST(classification_gradients) {
    kt_mem_begin();
    kiln_tensor wt = tensor_of(KILN_F64, KILN_SHAPE(C), ws);
    const kiln_reduction rs[3] = {KILN_REDUCTION_NONE, KILN_REDUCTION_SUM, KILN_REDUCTION_MEAN};
    for (int nll = 0; nll < 2; nll++)
        for (int r = 0; r < 3; r++)
            for (int v = 0; v < 2; v++) {
                cls_case cc = {nll, kiln_cross_entropy_defaults()};
                cc.o.reduction = rs[r];
                cc.o.class_weights = v ? wt : KILN_NONE;
                cc.o.has_ignore_index = v, cc.o.ignore_index = -100;
                cc.o.label_smoothing = nll ? 0 : 0.1;
                char name[64];
                snprintf(name, sizeof name, "%s reduction %d variant %d", nll ? "nll" : "cross_entropy", (int)rs[r], v);
                GC_CHECK(name, run_cls, &cc, 1, ((kiln_shape[]){KILN_SHAPE(N, C)}), 1e-6);
            }
    kiln_release(wt);
    KT_MEM_CHECK();
}

/* K-dimensional inputs [N, C, L] with targets [N, L] are the 2-d case on the rows of the
 * classes-last permutation; unbatched [C] with a 0-d target is one row. */
KT_TEST(classification_k_dims) {
    kt_mem_begin();
    enum { KN = 2, KC = 3, KLEN = 4 };
    double x[KN * KC * KLEN], rows[KN * KLEN * KC], got[KN * KLEN], want[KN * KLEN];
    fill(x, KN * KC * KLEN, -2, 2);
    for (int n = 0; n < KN; n++)
        for (int c = 0; c < KC; c++)
            for (int l = 0; l < KLEN; l++) rows[(n * KLEN + l) * KC + c] = x[(n * KC + c) * KLEN + l];
    const double y[KN * KLEN] = {0, 2, 1, -100, 2, 2, 0, 1};
    const double w[KC] = {0.5, 2, 1.25};
    kiln_tensor wt = tensor_of(KILN_F64, KILN_SHAPE(KC), w);
    for (int nll = 0; nll < 2; nll++) {
        kiln_cross_entropy_options o = kiln_cross_entropy_defaults();
        o.class_weights = wt, o.has_ignore_index = true, o.ignore_index = -100, o.label_smoothing = nll ? 0 : 0.1;
        o.reduction = KILN_REDUCTION_NONE;
        kiln_tensor k = classify(nll, tensor_of(KILN_F64, KILN_SHAPE(KN, KC, KLEN), x), tensor_of(KILN_I64, KILN_SHAPE(KN, KLEN), y), o);
        KT_CHECK(has_shape(k, KILN_SHAPE(KN, KLEN)));
        bool ok = read_f64(k, got, KN * KLEN);
        if (ok && read_f64(classify(nll, tensor_of(KILN_F64, KILN_SHAPE(KN * KLEN, KC), rows), tensor_of(KILN_I64, KILN_SHAPE(KN * KLEN), y), o),
                           want, KN * KLEN))
            for (int i = 0; i < KN * KLEN; i++) KT_NEAR(got[i], want[i], 1e-13);
        o.reduction = KILN_REDUCTION_MEAN;
        KT_NEAR(read_scalar(classify(nll, tensor_of(KILN_F64, KILN_SHAPE(KN, KC, KLEN), x), tensor_of(KILN_I64, KILN_SHAPE(KN, KLEN), y), o)),
                read_scalar(classify(nll, tensor_of(KILN_F64, KILN_SHAPE(KN * KLEN, KC), rows), tensor_of(KILN_I64, KILN_SHAPE(KN * KLEN), y), o)),
                1e-13);
        /* unbatched */
        o = kiln_cross_entropy_defaults();
        double one = 2;
        KT_NEAR(read_scalar(classify(nll, tensor_of(KILN_F64, KILN_SHAPE(KC), rows), tensor_of(KILN_I64, KILN_SCALAR_SHAPE, &one), o)),
                read_scalar(classify(nll, tensor_of(KILN_F64, KILN_SHAPE(1, KC), rows), tensor_of(KILN_I64, KILN_SHAPE(1), &one), o)), 1e-15);
        KT_READ_ERROR(classify(nll, tensor_of(KILN_F64, KILN_SHAPE(KN, KC, KLEN), x), kiln_zeros(KILN_CPU, KILN_I64, KILN_SHAPE(KN, KLEN + 1)), o),
                      KILN_ERR_SHAPE, nll ? "kiln_nll_loss" : "kiln_cross_entropy");
        KT_READ_ERROR(classify(nll, tensor_of(KILN_F64, KILN_SHAPE(KN, KC, KLEN), x), kiln_zeros(KILN_CPU, KILN_I64, KILN_SHAPE(KN)), o),
                      KILN_ERR_SHAPE, nll ? "kiln_nll_loss" : "kiln_cross_entropy");
    }
    kiln_release(wt);
    KT_MEM_CHECK();
}

static kiln_tensor run_k_dims(kiln_tensor *in, void *ctx) {
    const double y[6] = {0, 2, 1, 1, 2, 0};
    kiln_cross_entropy_options o = kiln_cross_entropy_defaults();
    o.reduction = *(const kiln_reduction *)ctx;
    return kiln_cross_entropy(in[0], tensor_of(KILN_I64, KILN_SHAPE(2, 3), y), o);
}

KT_TEST(classification_k_dims_gradients) {
    kt_mem_begin();
    kiln_reduction r[2] = {KILN_REDUCTION_NONE, KILN_REDUCTION_MEAN};
    for (int i = 0; i < 2; i++) GC_CHECK("cross_entropy [N, C, L]", run_k_dims, &r[i], 1, ((kiln_shape[]){KILN_SHAPE(2, 3, 3)}), 1e-6);
    KT_MEM_CHECK();
}

/* ---- bad input ----------------------------------------------------------------------------------- */

KT_TEST(bad_reductions_and_inputs) {
    kt_mem_begin();
    kiln_tensor a = kiln_zeros(KILN_CPU, KILN_F32, KILN_SHAPE(2, 3));
    KT_READ_ERROR(kiln_mse_loss_ex(kiln_ref(a), kiln_ref(a), (kiln_reduction)7), KILN_ERR_INVALID_ARGUMENT, "kiln_mse_loss");
    KT_READ_ERROR(kiln_l1_loss_ex(kiln_ref(a), kiln_ref(a), (kiln_reduction)-1), KILN_ERR_INVALID_ARGUMENT, "kiln_l1_loss");
    KT_READ_ERROR(kiln_huber_loss_ex(kiln_ref(a), kiln_ref(a), 1.0, KILN_REDUCTION_BATCHMEAN), KILN_ERR_INVALID_ARGUMENT, "kiln_huber_loss");
    KT_READ_ERROR(kiln_smooth_l1_loss_ex(kiln_ref(a), kiln_ref(a), -1.0, KILN_REDUCTION_SUM), KILN_ERR_INVALID_ARGUMENT, "kiln_smooth_l1_loss");
    KT_READ_ERROR(kiln_bce_with_logits_ex(kiln_ref(a), kiln_zeros(KILN_CPU, KILN_F32, KILN_SHAPE(3)), KILN_REDUCTION_NONE),
                  KILN_ERR_SHAPE, "kiln_bce_with_logits");
    KT_READ_ERROR(kiln_binary_cross_entropy_ex(kiln_ref(a), kiln_zeros(KILN_CPU, KILN_I32, KILN_SHAPE(2, 3)), KILN_REDUCTION_SUM),
                  KILN_ERR_DTYPE, "kiln_binary_cross_entropy");
    kiln_tensor stale = kiln_ref(a);
    kiln_release(stale);
    kiln_tensor bad = kiln_kl_div_ex(kiln_ref(a), stale, false, KILN_REDUCTION_BATCHMEAN);
    KT_CHECK(kiln_into_data(bad, NULL, 0) == KILN_ERR_STALE_HANDLE);
    kiln_cross_entropy_options o = kiln_cross_entropy_defaults();
    kiln_tensor x = kiln_zeros(KILN_CPU, KILN_F32, KILN_SHAPE(N, C));
    o.reduction = (kiln_reduction)9;
    KT_READ_ERROR(kiln_cross_entropy(kiln_ref(x), targets(ys, false), o), KILN_ERR_INVALID_ARGUMENT, "kiln_cross_entropy");
    o.reduction = KILN_REDUCTION_BATCHMEAN;
    KT_READ_ERROR(kiln_nll_loss_ex(kiln_ref(x), targets(ys, false), o), KILN_ERR_INVALID_ARGUMENT, "kiln_nll_loss");
    o = kiln_cross_entropy_defaults();
    o.label_smoothing = 0.1;
    KT_READ_ERROR(kiln_nll_loss_ex(kiln_ref(x), targets(ys, false), o), KILN_ERR_INVALID_ARGUMENT, "kiln_nll_loss");
    o = kiln_cross_entropy_defaults();
    o.reduction = KILN_REDUCTION_NONE;
    KT_READ_ERROR(kiln_nll_loss_ex(kiln_ref(x), kiln_zeros(KILN_CPU, KILN_F32, KILN_SHAPE(N)), o), KILN_ERR_DTYPE, "kiln_nll_loss");
    KT_READ_ERROR(kiln_nll_loss_ex(kiln_ref(x), targets(ys, true), o), KILN_ERR_INDEX, "kiln_nll_loss"); /* -100 not ignored */
    o.class_weights = kiln_ones(KILN_CPU, KILN_F32, KILN_SHAPE(C + 1));
    KT_READ_ERROR(kiln_nll_loss_ex(kiln_ref(x), targets(ys, true), o), KILN_ERR_SHAPE, "kiln_nll_loss");
    kiln_release(o.class_weights);
    kiln_release(x);
    kiln_release(a);
    KT_MEM_CHECK();
}

int main(void) {
    KT_RUN(pair_losses_reduce_as_torch);
    KT_RUN(pair_loss_gradients);
    KT_RUN(classification_reductions);
    KT_RUN(classification_gradients);
    KT_RUN(classification_k_dims);
    KT_RUN(classification_k_dims_gradients);
    KT_RUN(bad_reductions_and_inputs);
    return kt_finish();
}
