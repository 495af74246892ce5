/* Losses, composed from differentiable ops and reduced to a 0-d mean (PyTorch's
 * reduction='mean', with its weighted-mean rule for class weights). */
#include <math.h>
#include <stdio.h>

#include "kiln/autodiff.h"
#include "kiln/tensor.h"
#include "nn/layers-impl.h"

kiln_cross_entropy_options kiln_cross_entropy_defaults(void) {
    return (kiln_cross_entropy_options){.label_smoothing = 0.0, .class_weights = KILN_NONE};
}

/* Checks scores [N, C] (float) against targets [N] (i32/i64). Returns false with the status
 * and message of the first problem. */
static bool check_classification(const kiln__tensor *s, const kiln__tensor *y, const char *what, kiln_status *st,
                                 char *msg, size_t size) {
    char a[128], b[128];
    if (!s || !y) {
        *st = KILN_ERR_INVALID_ARGUMENT; /* the input's own error is reported instead */
        msg[0] = '\0';
        return false;
    }
    if (!kiln__dtype_is_float(s->dtype)) {
        *st = KILN_ERR_DTYPE;
        snprintf(msg, size, "%s must be floating point, got %s", what, kiln_dtype_name(s->dtype));
    } else if (y->dtype != KILN_I32 && y->dtype != KILN_I64) {
        *st = KILN_ERR_DTYPE;
        snprintf(msg, size, "targets must be i32 or i64 class indices, got %s", kiln_dtype_name(y->dtype));
    } else if (s->ndim != 2 || y->ndim != 1 || y->shape[0] != s->shape[0] || s->shape[1] < 1) {
        *st = KILN_ERR_SHAPE;
        snprintf(msg, size, "expects %s [N, C] with C >= 1 and targets [N], got %s and %s", what,
                 kiln__nn_shape_str(a, sizeof a, s), kiln__nn_shape_str(b, sizeof b, y));
    } else {
        return true;
    }
    return false;
}

/* scores[i, targets[i]] as [N]; consumes both */
static kiln_tensor pick(kiln_tensor scores, kiln_tensor targets) {
    return kiln_squeeze(kiln_gather(scores, 1, kiln_unsqueeze(targets, 1)), 1);
}

/* The class weights' problem, if any (they are borrowed, not consumed). */
static bool check_weights(kiln_tensor w, int64_t classes, kiln_status *st, char *msg, size_t size) {
    kiln__error *err = NULL;
    const kiln__tensor *t = kiln__handle_peek(w, "kiln_cross_entropy", &err);
    char a[128];
    if (!t) {
        *st = err->status;
        snprintf(msg, size, "class_weights: %s", err->message);
        kiln__error_unref(err);
    } else if (t->err) {
        *st = t->err->status;
        snprintf(msg, size, "class_weights carry an error: %s", t->err->message);
    } else if (!kiln__dtype_is_float(t->dtype)) {
        *st = KILN_ERR_DTYPE;
        snprintf(msg, size, "class_weights must be floating point, got %s", kiln_dtype_name(t->dtype));
    } else if (t->ndim != 1 || t->shape[0] != classes) {
        *st = KILN_ERR_SHAPE;
        snprintf(msg, size, "class_weights must have shape [%lld], got %s", (long long)classes,
                 kiln__nn_shape_str(a, sizeof a, t));
    } else {
        return true;
    }
    return false;
}

/* The general form with ignored samples: keep_i = (y_i != ignore_index), the per-sample
 * weight v_i = keep_i * w[y_i] (w = 1 without weights), and ignored targets read as class 0
 * so the gather stays in range:
 *   loss = -[(1 - e) sum_i v_i lp[i, y_i] + e/C sum_i keep_i sum_c w[c] lp[i, c]] / sum_i v_i */
static kiln_tensor cross_entropy_ignoring(kiln_tensor logits, kiln_tensor targets, kiln_cross_entropy_options o,
                                          bool weighted, kiln_device dev, kiln_dtype ydt, int64_t n) {
    kiln_dtype dt = kiln_tensor_dtype(logits);
    int64_t classes = kiln_tensor_dim(logits, 1);
    double e = o.label_smoothing;
    kiln_tensor keep = kiln_ne(kiln_ref(targets), kiln_full(dev, ydt, KILN_SHAPE(n), (double)o.ignore_index));
    kiln_tensor safe = kiln_where(kiln_ref(keep), targets, kiln_zeros(dev, ydt, KILN_SHAPE(n)));
    kiln_tensor keep_f = kiln_cast(keep, dt);
    kiln_tensor w = weighted ? kiln_cast(kiln_detach(kiln_ref(o.class_weights)), dt) : KILN_NONE;
    kiln_tensor v = weighted ? kiln_mul(kiln_index_select(kiln_ref(w), 0, kiln_ref(safe)), kiln_ref(keep_f)) : kiln_ref(keep_f);
    kiln_tensor lp = kiln_log_softmax(logits, 1);
    kiln_tensor num = kiln_sum(kiln_mul(pick(kiln_ref(lp), safe), kiln_ref(v)));
    if (e != 0) {
        kiln_tensor per_row = weighted ? kiln_sum_dims(kiln_mul(lp, w), KILN_DIMS(1), false) : kiln_sum_dims(lp, KILN_DIMS(1), false);
        kiln_tensor smooth = kiln_mul_scalar(kiln_sum(kiln_mul(per_row, keep_f)), e / (double)classes);
        num = kiln_add(kiln_mul_scalar(num, 1.0 - e), smooth);
    } else {
        kiln_release(lp);
        kiln_release(w);
        kiln_release(keep_f);
    }
    return kiln_neg(kiln_div(num, kiln_sum(v)));
}

/* With log-probabilities lp, weights w and smoothing e over C classes, torch defines
 *   loss = [(1 - e) sum_i w[y_i] (-lp[i, y_i]) + e/C sum_i sum_c w[c] (-lp[i, c])] / sum_i w[y_i]
 * (w = 1 without weights, so the denominator is N). */
static kiln_tensor cross_entropy(kiln_tensor logits, kiln_tensor targets, kiln_cross_entropy_options o) {
    const char *op = "kiln_cross_entropy";
    const kiln__tensor *s = kiln__nn_peek(logits), *y = kiln__nn_peek(targets);
    kiln_tensor in[2] = {logits, targets};
    kiln_status st;
    char msg[512];
    if (!check_classification(s, y, "logits", &st, msg, sizeof msg)) return kiln__nn_fail(op, 2, in, st, "%s", msg);
    double e = o.label_smoothing;
    if (!(e >= 0 && e <= 1))
        return kiln__nn_fail(op, 2, in, KILN_ERR_INVALID_ARGUMENT, "label_smoothing %g must lie in [0, 1]", e);
    int64_t classes = s->shape[1];
    bool weighted = o.class_weights.id != KILN_NONE.id;
    if (weighted && !check_weights(o.class_weights, classes, &st, msg, sizeof msg))
        return kiln__nn_fail(op, 2, in, st, "%s", msg);

    kiln_dtype dt = s->dtype;
    if (o.has_ignore_index) return cross_entropy_ignoring(logits, targets, o, weighted, s->device, y->dtype, y->shape[0]);
    kiln_tensor lp = kiln_log_softmax(logits, 1);
    if (!weighted) {
        kiln_tensor nll = kiln_mean(pick(kiln_ref(lp), targets)); /* -nll, until the final negation */
        if (e == 0) {
            kiln_release(lp);
            return kiln_neg(nll);
        }
        /* e/C sum_i sum_c lp / N = e mean(lp) */
        kiln_tensor smooth = kiln_mul_scalar(kiln_mean(lp), e);
        return kiln_neg(kiln_add(kiln_mul_scalar(nll, 1.0 - e), smooth));
    }
    /* weights are constants of the loss, in the logits' dtype */
    kiln_tensor w = kiln_cast(kiln_detach(kiln_ref(o.class_weights)), dt);
    kiln_tensor wy = kiln_index_select(kiln_ref(w), 0, kiln_ref(targets));
    kiln_tensor num = kiln_sum(kiln_mul(pick(kiln_ref(lp), targets), kiln_ref(wy)));
    if (e != 0) {
        kiln_tensor smooth = kiln_mul_scalar(kiln_sum(kiln_mul(lp, w)), e / (double)classes);
        num = kiln_add(kiln_mul_scalar(num, 1.0 - e), smooth);
    } else {
        kiln_release(lp);
        kiln_release(w);
    }
    return kiln_neg(kiln_div(num, kiln_sum(wy)));
}

static kiln_tensor nll_loss(kiln_tensor log_probs, kiln_tensor targets) {
    const kiln__tensor *s = kiln__nn_peek(log_probs), *y = kiln__nn_peek(targets);
    kiln_status st;
    char msg[512];
    if (!check_classification(s, y, "log_probs", &st, msg, sizeof msg))
        return kiln__nn_fail("kiln_nll_loss", 2, (kiln_tensor[]){log_probs, targets}, st, "%s", msg);
    return kiln_neg(kiln_mean(pick(log_probs, targets)));
}

/* prediction and target: float tensors of one shape. Broadcasting is refused on purpose:
 * [N, 1] against [N] silently averaging an N x N matrix is a classic bug. */
static bool check_pair(const char *op, kiln_tensor a, kiln_tensor b, kiln_tensor *fail) {
    const kiln__tensor *x = kiln__nn_peek(a), *y = kiln__nn_peek(b);
    kiln_tensor in[2] = {a, b};
    char sa[128], sb[128];
    if (!x || !y) {
        *fail = kiln__nn_fail(op, 2, in, KILN_ERR_INVALID_ARGUMENT, "unusable input");
    } else if (!kiln__dtype_is_float(x->dtype) || !kiln__dtype_is_float(y->dtype)) {
        *fail = kiln__nn_fail(op, 2, in, KILN_ERR_DTYPE, "needs floating-point inputs, got %s and %s",
                              kiln_dtype_name(x->dtype), kiln_dtype_name(y->dtype));
    } else {
        bool same = x->ndim == y->ndim;
        for (int d = 0; same && d < x->ndim; d++) same = x->shape[d] == y->shape[d];
        if (same) return true;
        *fail = kiln__nn_fail(op, 2, in, KILN_ERR_SHAPE, "input and target must have the same shape, got %s and %s",
                              kiln__nn_shape_str(sa, sizeof sa, x), kiln__nn_shape_str(sb, sizeof sb, y));
    }
    return false;
}

static kiln_tensor mse_loss(kiln_tensor prediction, kiln_tensor target) {
    kiln_tensor fail;
    if (!check_pair("kiln_mse_loss", prediction, target, &fail)) return fail;
    kiln_tensor d = kiln_sub(prediction, target);
    return kiln_mean(kiln_mul(kiln_ref(d), d));
}

static kiln_tensor l1_loss(kiln_tensor prediction, kiln_tensor target) {
    kiln_tensor fail;
    if (!check_pair("kiln_l1_loss", prediction, target, &fail)) return fail;
    return kiln_mean(kiln_abs(kiln_sub(prediction, target)));
}

/* With a = |p - t| and m = min(a, k): 0.5 m^2 * scale2 + (a - m) * scale1 is PyTorch's
 * piecewise loss without a select: smooth L1 (k = beta, scale2 = 1/beta, scale1 = 1) and
 * Huber (k = delta, scale2 = 1, scale1 = delta); its derivative is m * scale2 below k and
 * scale1 above, as torch's. */
static kiln_tensor piecewise(kiln_tensor prediction, kiln_tensor target, double k, double scale2, double scale1) {
    kiln_tensor a = kiln_abs(kiln_sub(prediction, target));
    kiln_tensor m = kiln_clamp(kiln_ref(a), NAN, k);
    kiln_tensor quad = kiln_mul_scalar(kiln_mul(kiln_ref(m), kiln_ref(m)), 0.5 * scale2);
    kiln_tensor lin = kiln_mul_scalar(kiln_sub(a, m), scale1);
    return kiln_mean(kiln_add(quad, lin));
}

static kiln_tensor smooth_l1(const char *op, kiln_tensor prediction, kiln_tensor target, double k, bool huber) {
    kiln_tensor fail;
    if (!check_pair(op, prediction, target, &fail)) return fail;
    if (!(k >= 0 && isfinite(k)) || (huber && k == 0))
        return kiln__nn_fail(op, 2, (kiln_tensor[]){prediction, target}, KILN_ERR_INVALID_ARGUMENT,
                             "%s %g must be finite and %s", huber ? "delta" : "beta", k, huber ? "> 0" : ">= 0");
    if (k == 0) return kiln_mean(kiln_abs(kiln_sub(prediction, target))); /* torch: beta 0 is L1 */
    return huber ? piecewise(prediction, target, k, 1.0, k) : piecewise(prediction, target, k, 1.0 / k, 1.0);
}

/* torch's binary_cross_entropy: each log clamped at -100, so p = 0 or 1 gives a finite loss. */
static kiln_tensor binary_cross_entropy(kiln_tensor p, kiln_tensor t) {
    kiln_tensor fail;
    if (!check_pair("kiln_binary_cross_entropy", p, t, &fail)) return fail;
    kiln_tensor log_p = kiln_clamp(kiln_log(kiln_ref(p)), -100.0, NAN);
    kiln_tensor log_q = kiln_clamp(kiln_log(kiln_rsub_scalar(p, 1.0)), -100.0, NAN);
    kiln_tensor a = kiln_mul(kiln_ref(t), log_p);
    kiln_tensor b = kiln_mul(kiln_rsub_scalar(t, 1.0), log_q);
    return kiln_neg(kiln_mean(kiln_add(a, b)));
}

/* torch's kl_div(input, target, reduction='mean'), input being log-probabilities: the mean of
 * target (log target - input), 0 where target is 0 (xlogy); log_target: exp(t) (t - input). */
static kiln_tensor kl_div(kiln_tensor input, kiln_tensor target, bool log_target) {
    kiln_tensor fail;
    if (!check_pair("kiln_kl_div", input, target, &fail)) return fail;
    if (log_target) {
        kiln_tensor weight = kiln_exp(kiln_ref(target)); /* before target is consumed below */
        return kiln_mean(kiln_mul(weight, kiln_sub(target, input)));
    }
    kiln_dtype dt = kiln_tensor_dtype(target);
    kiln_shape shape = kiln_tensor_shape(target);
    kiln_device dev = kiln_tensor_device(target);
    kiln_tensor positive = kiln_gt(kiln_ref(target), kiln_zeros(dev, dt, shape));
    /* log of a clamped target: the unselected branch stays finite, so its zero gradient too */
    kiln_tensor log_t = kiln_log(kiln_clamp(kiln_ref(target), 1e-300, NAN));
    kiln_tensor terms = kiln_mul(target, kiln_sub(log_t, input));
    return kiln_mean(kiln_where(positive, terms, kiln_zeros(dev, dt, shape)));
}

/* max(x, 0) - x y + log1p(exp(-|x|)) = softplus(x) - x y, and the softplus kernel computes
 * exactly that stable form; its derivative sigmoid(x) keeps the gradient sigmoid(x) - y exact
 * at x = 0, where the max/abs composition would give a one-sided answer. */
static kiln_tensor bce_with_logits(kiln_tensor logits, kiln_tensor target) {
    kiln_tensor fail;
    if (!check_pair("kiln_bce_with_logits", logits, target, &fail)) return fail;
    kiln_tensor sp = kiln_softplus(kiln_ref(logits));
    kiln_tensor xy = kiln_mul(logits, target);
    return kiln_mean(kiln_sub(sp, xy));
}

/* ---- public wrappers: the ops a loss is built from report errors under the loss's name (a
 * target out of range is found by a gather inside, but the caller called the loss) ---------- */

kiln_tensor kiln_cross_entropy(kiln_tensor logits, kiln_tensor targets, kiln_cross_entropy_options o) {
    const char *outer = kiln__op_scope_enter("kiln_cross_entropy");
    kiln_tensor loss = cross_entropy(logits, targets, o);
    kiln__op_scope_leave(outer);
    return loss;
}

static kiln_tensor scoped(const char *name, kiln_tensor (*loss_fn)(kiln_tensor, kiln_tensor), kiln_tensor a,
                          kiln_tensor b) {
    const char *outer = kiln__op_scope_enter(name);
    kiln_tensor loss = loss_fn(a, b);
    kiln__op_scope_leave(outer);
    return loss;
}

kiln_tensor kiln_nll_loss(kiln_tensor log_probs, kiln_tensor targets) {
    return scoped("kiln_nll_loss", nll_loss, log_probs, targets);
}

kiln_tensor kiln_mse_loss(kiln_tensor prediction, kiln_tensor target) {
    return scoped("kiln_mse_loss", mse_loss, prediction, target);
}

kiln_tensor kiln_bce_with_logits(kiln_tensor logits, kiln_tensor target) {
    return scoped("kiln_bce_with_logits", bce_with_logits, logits, target);
}

kiln_tensor kiln_l1_loss(kiln_tensor prediction, kiln_tensor target) {
    return scoped("kiln_l1_loss", l1_loss, prediction, target);
}

kiln_tensor kiln_smooth_l1_loss(kiln_tensor prediction, kiln_tensor target, double beta) {
    const char *outer = kiln__op_scope_enter("kiln_smooth_l1_loss");
    kiln_tensor loss = smooth_l1("kiln_smooth_l1_loss", prediction, target, beta, false);
    kiln__op_scope_leave(outer);
    return loss;
}

kiln_tensor kiln_huber_loss(kiln_tensor prediction, kiln_tensor target, double delta) {
    const char *outer = kiln__op_scope_enter("kiln_huber_loss");
    kiln_tensor loss = smooth_l1("kiln_huber_loss", prediction, target, delta, true);
    kiln__op_scope_leave(outer);
    return loss;
}

kiln_tensor kiln_binary_cross_entropy(kiln_tensor probabilities, kiln_tensor target) {
    return scoped("kiln_binary_cross_entropy", binary_cross_entropy, probabilities, target);
}

kiln_tensor kiln_kl_div(kiln_tensor input, kiln_tensor target, bool log_target) {
    const char *outer = kiln__op_scope_enter("kiln_kl_div");
    kiln_tensor loss = kl_div(input, target, log_target);
    kiln__op_scope_leave(outer);
    return loss;
}
