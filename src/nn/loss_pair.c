/* The elementwise losses (prediction and target of one shape): mse, l1, smooth L1, Huber,
 * binary cross-entropy (on probabilities and on logits) and KL divergence, composed from
 * differentiable ops, with PyTorch's reduction: the mean, the sum, or none (per element);
 * kl_div also takes batchmean. The loss's name scopes the ops inside, so their errors name
 * the loss the caller called. */
#include <math.h>

#include "kiln/autodiff.h"
#include "kiln/tensor.h"
#include "api/autocast-impl.h"
#include "nn/layers-impl.h"

bool kiln__nn_check_reduction(kiln_reduction r, bool batchmean_ok) {
    return r == KILN_REDUCTION_MEAN || r == KILN_REDUCTION_SUM || r == KILN_REDUCTION_NONE ||
           (batchmean_ok && r == KILN_REDUCTION_BATCHMEAN);
}

kiln_tensor kiln__nn_reduce(kiln_tensor x, kiln_reduction r) {
    switch (r) {
    case KILN_REDUCTION_SUM: return kiln_sum(x);
    case KILN_REDUCTION_NONE: return x;
    case KILN_REDUCTION_BATCHMEAN: {
        int64_t n = kiln_tensor_ndim(x) > 0 ? kiln_tensor_dim(x, 0) : 1;
        return kiln_div_scalar(kiln_sum(x), (double)n);
    }
    default: return kiln_mean(x);
    }
}

/* prediction and target: float tensors of one shape. Broadcasting is refused on purpose:
 * [N, 1] against [N] silently averaging an N x N matrix is a classic bug. */
static bool check_pair(const char *op, kiln_tensor a, kiln_tensor b, kiln_reduction r, bool batchmean_ok,
                       kiln_tensor *fail) {
    const kiln__tensor *x = kiln__nn_peek(a), *y = kiln__nn_peek(b);
    kiln_tensor in[2] = {a, b};
    char sa[128], sb[128];
    if (!x || !y) {
        *fail = kiln__nn_fail(op, 2, in, KILN_ERR_INVALID_ARGUMENT, "unusable input");
    } else if (!kiln__dtype_is_float(x->dtype) || !kiln__dtype_is_float(y->dtype)) {
        *fail = kiln__nn_fail(op, 2, in, KILN_ERR_DTYPE, "needs floating-point inputs, got %s and %s",
                              kiln_dtype_name(x->dtype), kiln_dtype_name(y->dtype));
    } else if (!kiln__nn_check_reduction(r, batchmean_ok)) {
        *fail = kiln__nn_fail(op, 2, in, KILN_ERR_INVALID_ARGUMENT, "reduction %d is not one this loss has", (int)r);
    } else {
        bool same = x->ndim == y->ndim;
        for (int d = 0; same && d < x->ndim; d++) same = x->shape[d] == y->shape[d];
        if (same) return true;
        *fail = kiln__nn_fail(op, 2, in, KILN_ERR_SHAPE, "input and target must have the same shape, got %s and %s",
                              kiln__nn_shape_str(sa, sizeof sa, x), kiln__nn_shape_str(sb, sizeof sb, y));
    }
    return false;
}

static kiln_tensor mse_loss(kiln_tensor prediction, kiln_tensor target, double k, kiln_reduction r) {
    (void)k;
    kiln_tensor d = kiln_sub(prediction, target);
    return kiln__nn_reduce(kiln_mul(kiln_ref(d), d), r);
}

static kiln_tensor l1_loss(kiln_tensor prediction, kiln_tensor target, double k, kiln_reduction r) {
    (void)k;
    return kiln__nn_reduce(kiln_abs(kiln_sub(prediction, target)), r);
}

/* With a = |p - t| and m = min(a, k): 0.5 m^2 * scale2 + (a - m) * scale1 is PyTorch's
 * piecewise loss without a select: smooth L1 (k = beta, scale2 = 1/beta, scale1 = 1) and
 * Huber (k = delta, scale2 = 1, scale1 = delta); its derivative is m * scale2 below k and
 * scale1 above, as torch's. */
static kiln_tensor piecewise(kiln_tensor prediction, kiln_tensor target, double k, double scale2, double scale1,
                             kiln_reduction r) {
    kiln_tensor a = kiln_abs(kiln_sub(prediction, target));
    kiln_tensor m = kiln_clamp(kiln_ref(a), NAN, k);
    kiln_tensor quad = kiln_mul_scalar(kiln_mul(kiln_ref(m), kiln_ref(m)), 0.5 * scale2);
    kiln_tensor lin = kiln_mul_scalar(kiln_sub(a, m), scale1);
    return kiln__nn_reduce(kiln_add(quad, lin), r);
}

static kiln_tensor smooth_l1(kiln_tensor prediction, kiln_tensor target, double k, kiln_reduction r) {
    if (!(k >= 0 && isfinite(k)))
        return kiln__nn_fail("kiln_smooth_l1_loss", 2, (kiln_tensor[]){prediction, target}, KILN_ERR_INVALID_ARGUMENT,
                             "beta %g must be finite and >= 0", k);
    if (k == 0) return l1_loss(prediction, target, 0, r); /* torch: beta 0 is L1 */
    return piecewise(prediction, target, k, 1.0 / k, 1.0, r);
}

static kiln_tensor huber(kiln_tensor prediction, kiln_tensor target, double k, kiln_reduction r) {
    if (!(k > 0 && isfinite(k)))
        return kiln__nn_fail("kiln_huber_loss", 2, (kiln_tensor[]){prediction, target}, KILN_ERR_INVALID_ARGUMENT,
                             "delta %g must be finite and > 0", k);
    return piecewise(prediction, target, k, 1.0, k, r);
}

/* torch's binary_cross_entropy: each log clamped at -100, so p = 0 or 1 gives a finite loss. */
static kiln_tensor binary_cross_entropy(kiln_tensor p, kiln_tensor t, double k, kiln_reduction r) {
    (void)k;
    kiln_tensor log_p = kiln_clamp(kiln_log(kiln_ref(p)), -100.0, NAN);
    kiln_tensor log_q = kiln_clamp(kiln_log(kiln_rsub_scalar(p, 1.0)), -100.0, NAN);
    kiln_tensor a = kiln_mul(kiln_ref(t), log_p);
    kiln_tensor b = kiln_mul(kiln_rsub_scalar(t, 1.0), log_q);
    return kiln__nn_reduce(kiln_neg(kiln_add(a, b)), r);
}

/* max(x, 0) - x y + log1p(exp(-|x|)) = softplus(x) - x y, and the softplus kernel computes
 * exactly that stable form; its derivative sigmoid(x) keeps the gradient sigmoid(x) - y exact
 * at x = 0, where the max/abs composition would give a one-sided answer. */
static kiln_tensor bce_with_logits(kiln_tensor logits, kiln_tensor target, double k, kiln_reduction r) {
    (void)k;
    kiln_tensor sp = kiln_softplus(kiln_ref(logits));
    kiln_tensor xy = kiln_mul(logits, target);
    return kiln__nn_reduce(kiln_sub(sp, xy), r);
}

/* torch's kl_div, input being log-probabilities: target (log target - input), 0 where target
 * is 0 (xlogy); log_target (k != 0): exp(t) (t - input). */
static kiln_tensor kl_div(kiln_tensor input, kiln_tensor target, double log_target, kiln_reduction r) {
    if (log_target != 0) {
        kiln_tensor weight = kiln_exp(kiln_ref(target)); /* before target is consumed below */
        return kiln__nn_reduce(kiln_mul(weight, kiln_sub(target, input)), r);
    }
    kiln_dtype dt = kiln_tensor_dtype(target);
    kiln_shape shape = kiln_tensor_shape(target);
    kiln_device dev = kiln_tensor_device(target);
    kiln_tensor positive = kiln_gt(kiln_ref(target), kiln_zeros(dev, dt, shape));
    /* log of a clamped target: the unselected branch stays finite, so its zero gradient too */
    kiln_tensor log_t = kiln_log(kiln_clamp(kiln_ref(target), 1e-300, NAN));
    kiln_tensor terms = kiln_mul(target, kiln_sub(log_t, input));
    return kiln__nn_reduce(kiln_where(positive, terms, kiln_zeros(dev, dt, shape)), r);
}

/* ---- public wrappers: the ops a loss is built from report errors under the loss's name ---- */

typedef kiln_tensor (*pair_loss)(kiln_tensor a, kiln_tensor b, double k, kiln_reduction r);

static kiln_tensor scoped(const char *name, pair_loss fn, kiln_tensor a, kiln_tensor b, double k, kiln_reduction r) {
    a = kiln__autocast_arg(name, a);
    b = kiln__autocast_arg(name, b);
    const char *outer = kiln__op_scope_enter(name);
    kiln_tensor fail, loss;
    loss = check_pair(name, a, b, r, fn == kl_div, &fail) ? fn(a, b, k, r) : fail;
    kiln__op_scope_leave(outer);
    return loss;
}

kiln_tensor kiln_mse_loss_ex(kiln_tensor prediction, kiln_tensor target, kiln_reduction reduction) {
    return scoped("kiln_mse_loss", mse_loss, prediction, target, 0, reduction);
}

kiln_tensor kiln_l1_loss_ex(kiln_tensor prediction, kiln_tensor target, kiln_reduction reduction) {
    return scoped("kiln_l1_loss", l1_loss, prediction, target, 0, reduction);
}

kiln_tensor kiln_smooth_l1_loss_ex(kiln_tensor prediction, kiln_tensor target, double beta, kiln_reduction reduction) {
    return scoped("kiln_smooth_l1_loss", smooth_l1, prediction, target, beta, reduction);
}

kiln_tensor kiln_huber_loss_ex(kiln_tensor prediction, kiln_tensor target, double delta, kiln_reduction reduction) {
    return scoped("kiln_huber_loss", huber, prediction, target, delta, reduction);
}

kiln_tensor kiln_bce_with_logits_ex(kiln_tensor logits, kiln_tensor target, kiln_reduction reduction) {
    return scoped("kiln_bce_with_logits", bce_with_logits, logits, target, 0, reduction);
}

kiln_tensor kiln_binary_cross_entropy_ex(kiln_tensor probabilities, kiln_tensor target, kiln_reduction reduction) {
    return scoped("kiln_binary_cross_entropy", binary_cross_entropy, probabilities, target, 0, reduction);
}

kiln_tensor kiln_kl_div_ex(kiln_tensor input, kiln_tensor target, bool log_target, kiln_reduction reduction) {
    return scoped("kiln_kl_div", kl_div, input, target, log_target ? 1 : 0, reduction);
}

kiln_tensor kiln_mse_loss(kiln_tensor prediction, kiln_tensor target) {
    return kiln_mse_loss_ex(prediction, target, KILN_REDUCTION_MEAN);
}

kiln_tensor kiln_l1_loss(kiln_tensor prediction, kiln_tensor target) {
    return kiln_l1_loss_ex(prediction, target, KILN_REDUCTION_MEAN);
}

kiln_tensor kiln_smooth_l1_loss(kiln_tensor prediction, kiln_tensor target, double beta) {
    return kiln_smooth_l1_loss_ex(prediction, target, beta, KILN_REDUCTION_MEAN);
}

kiln_tensor kiln_huber_loss(kiln_tensor prediction, kiln_tensor target, double delta) {
    return kiln_huber_loss_ex(prediction, target, delta, KILN_REDUCTION_MEAN);
}

kiln_tensor kiln_bce_with_logits(kiln_tensor logits, kiln_tensor target) {
    return kiln_bce_with_logits_ex(logits, target, KILN_REDUCTION_MEAN);
}

kiln_tensor kiln_binary_cross_entropy(kiln_tensor probabilities, kiln_tensor target) {
    return kiln_binary_cross_entropy_ex(probabilities, target, KILN_REDUCTION_MEAN);
}

kiln_tensor kiln_kl_div(kiln_tensor input, kiln_tensor target, bool log_target) {
    return kiln_kl_div_ex(input, target, log_target, KILN_REDUCTION_MEAN);
}
