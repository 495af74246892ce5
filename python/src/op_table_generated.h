/* The Python binding's rows of the op table's unary ops, of the reduction table's rows with a
 * py name and of the row-op table's rows: generated from src/ir/optable.h, src/ir/reduce_table.h
 * and src/ir/row_table.h by scripts/gen_optable.py; do not edit. op_table.h puts them in
 * KP_UNARY_OPS, KP_REDUCE_OPS and KP_DIM_OPS; functional_rows.c makes the row functions. */
#ifndef KILN_PY_OP_TABLE_GENERATED_H
#define KILN_PY_OP_TABLE_GENERATED_H

#define KP_TABLE_UNARY_OPS(X) \
    X(neg, kiln_neg, "-t") \
    X(abs, kiln_abs, "|t|") \
    X(sign, kiln_sign, "-1, 0 or 1 by the sign of t") \
    X(exp, kiln_exp, "e^t") \
    X(log, kiln_log, "natural logarithm") \
    X(log1p, kiln_log1p, "log(1 + t), accurate near 0") \
    X(expm1, kiln_expm1, "e^t - 1, accurate near 0") \
    X(sqrt, kiln_sqrt, "square root") \
    X(rsqrt, kiln_rsqrt, "1 / sqrt(t)") \
    X(sin, kiln_sin, "sine") \
    X(cos, kiln_cos, "cosine") \
    X(tanh, kiln_tanh, "hyperbolic tangent") \
    X(sigmoid, kiln_sigmoid, "1 / (1 + e^-t)") \
    X(relu, kiln_relu, "max(t, 0)") \
    X(gelu, kiln_gelu, "t Phi(t), the erf form") \
    X(gelu_tanh, kiln_gelu_tanh, "gelu's tanh approximation") \
    X(silu, kiln_silu, "t sigmoid(t)") \
    X(softplus, kiln_softplus, "log(1 + e^t); t itself above 20") \
    X(erf, kiln_erf, "error function") \
    X(logical_not, kiln_logical_not, "not t (bool out)") \
    X(floor, kiln_floor, "round down; integers unchanged, bool refused; gradient zero") \
    X(ceil, kiln_ceil, "round up; integers unchanged") \
    X(round, kiln_round, "round half to even; integers unchanged") \
    X(trunc, kiln_trunc, "round toward zero; integers unchanged") \
    X(atan, kiln_atan, "arctangent") \
    X(log2, kiln_log2, "base-2 logarithm") \
    X(log10, kiln_log10, "base-10 logarithm") \
    X(exp2, kiln_exp2, "2^t") \
    X(isnan, kiln_isnan, "t is NaN (bool out; false for integers)") \
    X(isinf, kiln_isinf, "t is +-inf (bool out; false for integers)") \
    X(isfinite, kiln_isfinite, "t is neither NaN nor infinite (bool out)") \
    X(log_sigmoid, kiln_log_sigmoid, "log(sigmoid(t))") \
    X(mish, kiln_mish, "t tanh(softplus(t))") \
    X(softsign, kiln_softsign, "t / (1 + |t|)") \
    X(hardswish, kiln_hardswish, "t min(max(t + 3, 0), 6) / 6") \
    X(hardsigmoid, kiln_hardsigmoid, "min(max(t + 3, 0), 6) / 6 (torch.nn.functional.hardsigmoid)") \
    X(reciprocal, kiln_reciprocal, "1 / t (torch.reciprocal: integers give f32)")

/* X(method, whole-tensor function or 0, dims function, doc): t.method(dim=None, keepdim=False) */
#define KP_TABLE_REDUCE_OPS(X) \
    X(sum, kiln_sum, kiln_sum_dims, "the sum; integers and bools accumulate in i64") \
    X(mean, kiln_mean, kiln_mean_dims, "the mean; integers and bools give f32; NaN when empty") \
    X(prod, kiln_prod, kiln_prod_dims, "the product; integers and bools accumulate in i64") \
    X(amax, kiln_max, kiln_max_dims, "the largest value (NaN wins); a dim of size 0 fails") \
    X(amin, kiln_min, kiln_min_dims, "the smallest value (NaN wins); a dim of size 0 fails") \
    X(logsumexp, 0, kiln_logsumexp_dims, "log(sum(exp(t))), without overflow") \
    X(any, kiln_any, kiln_any_dims, "whether any element is nonzero (NaN is); false when empty") \
    X(all, kiln_all, kiln_all_dims, "whether every element is nonzero (NaN is); true when empty") \
    X(count_nonzero, kiln_count_nonzero, kiln_count_nonzero_dims, "the number of nonzero elements (NaN is one), in i64")

/* X(method, function, doc): t.method(dim), kiln.method(t, dim) */
#define KP_TABLE_DIM_OPS(X) \
    X(softmax, kiln_softmax, "exp(t) / sum(exp(t)) along dim; integers and bools give f32") \
    X(log_softmax, kiln_log_softmax, "t - logsumexp(t) along dim, without overflow")

/* X(dims, arity, name, function, _ex function or 0, parameter's name or "", its default, doc):
 * kiln.nn.functional.name, called as torch's (functional_rows.c: one caller per dims kind) */
#define KP_TABLE_ROW_FUNCTIONS(X) \
    X(NORMALIZED, 3, layer_norm, kiln_layer_norm, 0, "eps", 1e-5, "(x - mean) / sqrt(var + eps) * weight + bias over the trailing dims. torch.nn.functional.layer_norm: normalises over the trailing dims normalized_shape names (x's last dims must equal it) with the biased variance; weight and bias are float tensors of normalized_shape or KILN_NONE (consumed).") \
    X(NORMALIZED, 2, rms_norm, kiln_rms_norm, 0, "eps", NAN, "x / sqrt(mean(x^2) + eps) * weight over the trailing dims. torch.nn.functional.rms_norm: the mean over the trailing normalized_shape dims; weight of normalized_shape or KILN_NONE (consumed). eps NaN means the dtype's epsilon (PyTorch's eps=None). Differentiable in x and weight.") \
    X(GROUPS, 3, group_norm, kiln_group_norm, 0, "eps", 1e-5, "each group of channels normalised, then * weight + bias per channel. torch.nn.functional.group_norm: x [N, C, ...] with C split into num_groups groups, each (sample, group) normalised over its channels and positions with the biased variance, then * weight + bias per channel ([C] or KILN_NONE; consumed). Differentiable.") \
    X(NONE, 2, mse_loss, kiln_mse_loss, kiln_mse_loss_ex, "", 0, "mean((input - target)^2); float inputs of one shape (no broadcasting).") \
    X(NONE, 2, l1_loss, kiln_l1_loss, kiln_l1_loss_ex, "", 0, "mean(|input - target|) (torch's l1_loss); float inputs of one shape.") \
    X(NONE_K, 2, smooth_l1_loss, kiln_smooth_l1_loss, kiln_smooth_l1_loss_ex, "beta", 1.0, "0.5 d^2 / beta where |d| < beta, else |d| - 0.5 beta; averaged. torch's smooth_l1_loss: beta >= 0 (0 is L1); a bad beta gives KILN_ERR_INVALID_ARGUMENT.") \
    X(NONE_K, 2, huber_loss, kiln_huber_loss, kiln_huber_loss_ex, "delta", 1.0, "0.5 d^2 where |d| < delta, else delta (|d| - 0.5 delta); averaged. torch's huber_loss: delta > 0; a bad delta gives KILN_ERR_INVALID_ARGUMENT.") \
    X(NONE, 2, binary_cross_entropy_with_logits, kiln_bce_with_logits, kiln_bce_with_logits_ex, "", 0, "mean(softplus(x) - x y): binary cross-entropy of logits, stable for large |x|.") \
    X(NONE, 2, binary_cross_entropy, kiln_binary_cross_entropy, kiln_binary_cross_entropy_ex, "", 0, "-mean(y log p + (1 - y) log(1 - p)), each log clamped at -100. torch's binary_cross_entropy on probabilities in [0, 1] (values outside give NaN rather than torch's error, as they are only seen when computed). Prefer kiln_bce_with_logits, which is stable.") \
    X(NONE_FLAG, 2, kl_div, kiln_kl_div, kiln_kl_div_ex, "log_target", 0, "mean(target (log target - input)); the flag: target holds log-probabilities. torch's kl_div(input, target, reduction='mean'): input holds log-probabilities, target probabilities (log-probabilities with log_target); 0 where target is 0. The _ex form also takes BATCHMEAN.") \
    X(CLASSES_OPT, 2, cross_entropy, kiln_cross_entropy, 0, "", 0, "-mean(log_softmax(scores)[target]) over the samples. logits [N, C] (consumed), targets [N] i32/i64 class indices (consumed); as PyTorch, also logits [N, C, d1, ...] with targets [N, d1, ...] (a class per position; NONE gives [N, d1, ...]) and unbatched logits [C] with a 0-d target.") \
    X(CLASSES, 2, nll_loss, kiln_nll_loss, kiln_nll_loss_ex, "", 0, "-mean(log_probs[target]) over the samples; the other shapes as kiln_cross_entropy's. The _ex form is torch's nll_loss(log_probs, targets, weight, ignore_index, reduction) with o's class_weights (not consumed), ignore_index and reduction; o.label_smoothing must be 0.")

#endif
