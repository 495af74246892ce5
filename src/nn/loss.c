/* Classification losses, composed from differentiable ops: cross-entropy on logits and NLL on
 * log-probabilities, with class weights, label smoothing (cross-entropy), ignore_index and
 * PyTorch's reduction (the mean follows its weighted-mean rule for class weights). The
 * elementwise losses are in loss_pair.c. */
#include <math.h>
#include <stdio.h>

#include "kiln/autodiff.h"
#include "kiln/tensor.h"
#include "api/autocast-impl.h"
#include "nn/layers-impl.h"

kiln_cross_entropy_options kiln_cross_entropy_defaults(void) {
    return (kiln_cross_entropy_options){
        .label_smoothing = 0.0, .class_weights = KILN_NONE, .reduction = KILN_REDUCTION_MEAN};
}

/* scores [N, C, d1, ...] and targets [N, d1, ...] (PyTorch's K-dimensional form), or scores
 * [C] and a 0-d target (unbatched); C >= 1. */
static bool class_shapes(const kiln__tensor *s, const kiln__tensor *y) {
    int c_dim = s->ndim == 1 ? 0 : 1;
    if (s->ndim < 1 || y->ndim != s->ndim - 1 || s->shape[c_dim] < 1) return false;
    for (int d = 0; d < y->ndim; d++)
        if (y->shape[d] != s->shape[d < 1 ? d : d + 1]) return false;
    return true;
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
    } else if (!class_shapes(s, y)) {
        *st = KILN_ERR_SHAPE;
        snprintf(msg, size, "expects %s [N, C, d1, ...] (or [C]) with C >= 1 and targets [N, d1, ...] (or []), got %s and %s",
                 what, kiln__nn_shape_str(a, sizeof a, s), kiln__nn_shape_str(b, sizeof b, y));
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
static bool check_weights(const char *op, kiln_tensor w, int64_t classes, kiln_status *st, char *msg, size_t size) {
    kiln__error *err = NULL;
    const kiln__tensor *t = kiln__handle_peek(w, op, &err);
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
static kiln_tensor cross_entropy_ignoring(kiln_tensor lp, kiln_tensor targets, kiln_cross_entropy_options o,
                                          bool weighted, kiln_device dev, kiln_dtype ydt, int64_t n) {
    kiln_dtype dt = kiln_tensor_dtype(lp);
    int64_t classes = kiln_tensor_dim(lp, 1);
    double e = o.label_smoothing;
    kiln_tensor keep = kiln_ne(kiln_ref(targets), kiln_full(dev, ydt, KILN_SHAPE(n), (double)o.ignore_index));
    kiln_tensor safe = kiln_where(kiln_ref(keep), targets, kiln_zeros(dev, ydt, KILN_SHAPE(n)));
    kiln_tensor keep_f = kiln_cast(keep, dt);
    kiln_tensor w = weighted ? kiln_cast(kiln_detach(kiln_ref(o.class_weights)), dt) : KILN_NONE;
    kiln_tensor v = weighted ? kiln_mul(kiln_index_select(kiln_ref(w), 0, kiln_ref(safe)), kiln_ref(keep_f)) : kiln_ref(keep_f);
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

/* The per-sample losses [N] (SUM and NONE): with keep_i = (y_i != ignore_index) and ignored
 * targets read as class 0 so the gather stays in range,
 *   L_i = -[(1 - e) w[y_i] lp[i, y_i] + e/C sum_c w[c] lp[i, c]]  where keep_i, else 0. */
static kiln_tensor per_sample(kiln_tensor lp, kiln_tensor targets, kiln_cross_entropy_options o, bool weighted,
                              kiln_device dev, kiln_dtype ydt, int64_t n) {
    kiln_dtype dt = kiln_tensor_dtype(lp);
    int64_t classes = kiln_tensor_dim(lp, 1);
    double e = o.label_smoothing;
    kiln_tensor keep = KILN_NONE;
    if (o.has_ignore_index) {
        keep = kiln_ne(kiln_ref(targets), kiln_full(dev, ydt, KILN_SHAPE(n), (double)o.ignore_index));
        targets = kiln_where(kiln_ref(keep), targets, kiln_zeros(dev, ydt, KILN_SHAPE(n)));
    }
    kiln_tensor w = weighted ? kiln_cast(kiln_detach(kiln_ref(o.class_weights)), dt) : KILN_NONE;
    kiln_tensor wy = weighted ? kiln_index_select(kiln_ref(w), 0, kiln_ref(targets)) : KILN_NONE;
    kiln_tensor loss = pick(kiln_ref(lp), targets);
    if (weighted) loss = kiln_mul(loss, wy);
    if (e != 0) {
        kiln_tensor row = kiln_sum_dims(weighted ? kiln_mul(lp, w) : lp, KILN_DIMS(1), false);
        loss = kiln_add(kiln_mul_scalar(loss, 1.0 - e), kiln_mul_scalar(row, e / (double)classes));
    } else {
        kiln_release(lp);
        kiln_release(w);
    }
    loss = kiln_neg(loss);
    /* a select, not a product: an ignored row of -inf log-probabilities still gives 0 */
    if (o.has_ignore_index) loss = kiln_where(keep, loss, kiln_zeros(dev, dt, KILN_SHAPE(n)));
    return loss;
}

/* With log-probabilities lp, weights w and smoothing e over C classes, torch defines
 *   loss = [(1 - e) sum_i w[y_i] (-lp[i, y_i]) + e/C sum_i sum_c w[c] (-lp[i, c])] / sum_i w[y_i]
 * (w = 1 without weights, so the denominator is N). scores are logits, or log-probabilities
 * when !from_logits (NLL). */
static kiln_tensor classify(const char *op, kiln_tensor scores, kiln_tensor targets, kiln_cross_entropy_options o,
                            bool from_logits) {
    const kiln__tensor *s = kiln__nn_peek(scores), *y = kiln__nn_peek(targets);
    kiln_tensor in[2] = {scores, targets};
    kiln_status st;
    char msg[512];
    if (!check_classification(s, y, from_logits ? "logits" : "log_probs", &st, msg, sizeof msg))
        return kiln__nn_fail(op, 2, in, st, "%s", msg);
    double e = o.label_smoothing;
    if (!(e >= 0 && e <= 1))
        return kiln__nn_fail(op, 2, in, KILN_ERR_INVALID_ARGUMENT, "label_smoothing %g must lie in [0, 1]", e);
    if (!from_logits && e != 0)
        return kiln__nn_fail(op, 2, in, KILN_ERR_INVALID_ARGUMENT, "label_smoothing %g: nll_loss has none", e);
    if (!kiln__nn_check_reduction(o.reduction, false))
        return kiln__nn_fail(op, 2, in, KILN_ERR_INVALID_ARGUMENT, "reduction %d is not mean, sum or none", (int)o.reduction);
    if (s->ndim != 2) { /* [N, C, d...] -> [N * d..., C] (the classes last), or [C] -> [1, C] */
        kiln_shape ys = {y->ndim, {0}};
        for (int d = 0; d < y->ndim; d++) ys.dims[d] = y->shape[d];
        int64_t classes = s->shape[s->ndim == 1 ? 0 : 1], rows = kiln__tensor_numel(y);
        kiln_dims order = {s->ndim, {0}};
        for (int d = 0, k = 0; d < s->ndim; d++)
            if (d != 1) order.d[k++] = d;
        order.d[s->ndim - 1] = 1;
        kiln_tensor s2 = kiln_reshape(s->ndim == 1 ? scores : kiln_permute(scores, order), KILN_SHAPE(rows, classes));
        kiln_tensor l = classify(op, s2, kiln_reshape(targets, KILN_SHAPE(rows)), o, from_logits);
        return o.reduction == KILN_REDUCTION_NONE ? kiln_reshape(l, ys) : l;
    }
    int64_t classes = s->shape[1];
    bool weighted = o.class_weights.id != KILN_NONE.id;
    if (weighted && !check_weights(op, o.class_weights, classes, &st, msg, sizeof msg))
        return kiln__nn_fail(op, 2, in, st, "%s", msg);

    kiln_dtype dt = s->dtype;
    kiln_device dev = s->device;
    kiln_dtype ydt = y->dtype;
    int64_t n = y->shape[0];
    kiln_tensor lp = from_logits ? kiln_log_softmax(scores, 1) : scores;
    if (o.reduction != KILN_REDUCTION_MEAN)
        return kiln__nn_reduce(per_sample(lp, targets, o, weighted, dev, ydt, n), o.reduction);
    if (o.has_ignore_index) return cross_entropy_ignoring(lp, targets, o, weighted, dev, ydt, n);
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
    /* weights are constants of the loss, in the scores' dtype */
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

/* ---- public wrappers: the ops a loss is built from report errors under the loss's name (a
 * target out of range is found by a gather inside, but the caller called the loss) ---------- */

static kiln_tensor scoped(const char *op, kiln_tensor scores, kiln_tensor targets, kiln_cross_entropy_options o,
                          bool from_logits) {
    scores = kiln__autocast_arg(op, scores);
    const char *outer = kiln__op_scope_enter(op);
    kiln_tensor loss = classify(op, scores, targets, o, from_logits);
    kiln__op_scope_leave(outer);
    return loss;
}

kiln_tensor kiln_cross_entropy(kiln_tensor logits, kiln_tensor targets, kiln_cross_entropy_options o) {
    return scoped("kiln_cross_entropy", logits, targets, o, true);
}

kiln_tensor kiln_nll_loss_ex(kiln_tensor log_probs, kiln_tensor targets, kiln_cross_entropy_options o) {
    return scoped("kiln_nll_loss", log_probs, targets, o, false);
}

kiln_tensor kiln_nll_loss(kiln_tensor log_probs, kiln_tensor targets) {
    return kiln_nll_loss_ex(log_probs, targets, kiln_cross_entropy_defaults());
}
