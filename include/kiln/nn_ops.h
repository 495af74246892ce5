/* kiln's norms and losses, the row-op table's COMPOSED rows (made of other ops in src/nn/):
 * generated from src/ir/row_table.h by scripts/gen_optable.py; do not edit (edit the row, then
 * run the script). Included by kiln/nn.h, after the losses' types (kiln_reduction,
 * kiln_cross_entropy_options). Every function consumes its tensor arguments and is
 * differentiable in its float ones; bad input gives a poisoned tensor naming the function.
 *
 *   kiln_tensor mse = kiln_mse_loss(kiln_ref(x), kiln_ref(y));          // 0-d mean; x and y kept
 *   kiln_tensor per_elem = kiln_l1_loss_ex(x, y, KILN_REDUCTION_NONE);  // x's shape; both consumed
 */
#ifndef KILN_NN_OPS_H
#define KILN_NN_OPS_H

#include "kiln/core.h"

#ifdef __cplusplus
extern "C" {
#endif

/* (x - mean) / sqrt(var + eps) * weight + bias over the trailing dims.
 * torch.nn.functional.layer_norm: normalises over the trailing dims normalized_shape names (x's
 * last dims must equal it) with the biased variance; weight and bias are float tensors of
 * normalized_shape or KILN_NONE (consumed). */
KILN_API kiln_tensor kiln_layer_norm(kiln_tensor x, kiln_shape normalized_shape, kiln_tensor weight, kiln_tensor bias, double eps);
/* x / sqrt(mean(x^2) + eps) * weight over the trailing dims. torch.nn.functional.rms_norm: the
 * mean over the trailing normalized_shape dims; weight of normalized_shape or KILN_NONE
 * (consumed). eps NaN means the dtype's epsilon (PyTorch's eps=None). Differentiable in x and
 * weight. */
KILN_API kiln_tensor kiln_rms_norm(kiln_tensor x, kiln_shape normalized_shape, kiln_tensor weight, double eps);
/* each group of channels normalised, then * weight + bias per channel.
 * torch.nn.functional.group_norm: x [N, C, ...] with C split into num_groups groups, each
 * (sample, group) normalised over its channels and positions with the biased variance, then
 * * weight + bias per channel ([C] or KILN_NONE; consumed). Differentiable. */
KILN_API kiln_tensor kiln_group_norm(kiln_tensor x, int64_t num_groups, kiln_tensor weight, kiln_tensor bias, double eps);
/* mean((input - target)^2); float inputs of one shape (no broadcasting). */
KILN_API kiln_tensor kiln_mse_loss(kiln_tensor prediction, kiln_tensor target);
KILN_API kiln_tensor kiln_mse_loss_ex(kiln_tensor prediction, kiln_tensor target, kiln_reduction reduction); /* with PyTorch's reduction: MEAN, SUM or NONE (the inputs' shape) */
/* mean(|input - target|) (torch's l1_loss); float inputs of one shape. */
KILN_API kiln_tensor kiln_l1_loss(kiln_tensor prediction, kiln_tensor target);
KILN_API kiln_tensor kiln_l1_loss_ex(kiln_tensor prediction, kiln_tensor target, kiln_reduction reduction); /* with PyTorch's reduction: MEAN, SUM or NONE (the inputs' shape) */
/* 0.5 d^2 / beta where |d| < beta, else |d| - 0.5 beta; averaged. torch's smooth_l1_loss: beta
 * >= 0 (0 is L1); a bad beta gives KILN_ERR_INVALID_ARGUMENT. */
KILN_API kiln_tensor kiln_smooth_l1_loss(kiln_tensor prediction, kiln_tensor target, double beta);
KILN_API kiln_tensor kiln_smooth_l1_loss_ex(kiln_tensor prediction, kiln_tensor target, double beta, kiln_reduction reduction); /* with PyTorch's reduction: MEAN, SUM or NONE (the inputs' shape) */
/* 0.5 d^2 where |d| < delta, else delta (|d| - 0.5 delta); averaged. torch's huber_loss: delta >
 * 0; a bad delta gives KILN_ERR_INVALID_ARGUMENT. */
KILN_API kiln_tensor kiln_huber_loss(kiln_tensor prediction, kiln_tensor target, double delta);
KILN_API kiln_tensor kiln_huber_loss_ex(kiln_tensor prediction, kiln_tensor target, double delta, kiln_reduction reduction); /* with PyTorch's reduction: MEAN, SUM or NONE (the inputs' shape) */
/* mean(softplus(x) - x y): binary cross-entropy of logits, stable for large |x|. */
KILN_API kiln_tensor kiln_bce_with_logits(kiln_tensor logits, kiln_tensor target);
KILN_API kiln_tensor kiln_bce_with_logits_ex(kiln_tensor logits, kiln_tensor target, kiln_reduction reduction); /* with PyTorch's reduction: MEAN, SUM or NONE (the inputs' shape) */
/* -mean(y log p + (1 - y) log(1 - p)), each log clamped at -100. torch's binary_cross_entropy on
 * probabilities in [0, 1] (values outside give NaN rather than torch's error, as they are only
 * seen when computed). Prefer kiln_bce_with_logits, which is stable. */
KILN_API kiln_tensor kiln_binary_cross_entropy(kiln_tensor probabilities, kiln_tensor target);
KILN_API kiln_tensor kiln_binary_cross_entropy_ex(kiln_tensor probabilities, kiln_tensor target, kiln_reduction reduction); /* with PyTorch's reduction: MEAN, SUM or NONE (the inputs' shape) */
/* mean(target (log target - input)); the flag: target holds log-probabilities. torch's
 * kl_div(input, target, reduction='mean'): input holds log-probabilities, target probabilities
 * (log-probabilities with log_target); 0 where target is 0. The _ex form also takes BATCHMEAN. */
KILN_API kiln_tensor kiln_kl_div(kiln_tensor input, kiln_tensor target, bool log_target);
KILN_API kiln_tensor kiln_kl_div_ex(kiln_tensor input, kiln_tensor target, bool log_target, kiln_reduction reduction); /* with PyTorch's reduction: MEAN, SUM or NONE (the inputs' shape) */
/* -mean(log_softmax(scores)[target]) over the samples. logits [N, C] (consumed), targets [N]
 * i32/i64 class indices (consumed); as PyTorch, also logits [N, C, d1, ...] with targets [N, d1,
 * ...] (a class per position; NONE gives [N, d1, ...]) and unbatched logits [C] with a 0-d
 * target. */
KILN_API kiln_tensor kiln_cross_entropy(kiln_tensor logits, kiln_tensor targets, kiln_cross_entropy_options o);
/* -mean(log_probs[target]) over the samples; the other shapes as kiln_cross_entropy's. The _ex
 * form is torch's nll_loss(log_probs, targets, weight, ignore_index, reduction) with o's
 * class_weights (not consumed), ignore_index and reduction; o.label_smoothing must be 0. */
KILN_API kiln_tensor kiln_nll_loss(kiln_tensor log_probs, kiln_tensor targets);
KILN_API kiln_tensor kiln_nll_loss_ex(kiln_tensor log_probs, kiln_tensor targets, kiln_cross_entropy_options o); /* with o's class_weights, ignore_index and reduction */

/* The calls that record the caller's file:line, as in core.h's list. */
#define KILN_NN_ROW_API(X) \
    X(kiln_tensor, layer_norm, (kiln_tensor x, kiln_shape normalized_shape, kiln_tensor weight, kiln_tensor bias, double eps), (x, normalized_shape, weight, bias, eps)) \
    X(kiln_tensor, rms_norm, (kiln_tensor x, kiln_shape normalized_shape, kiln_tensor weight, double eps), (x, normalized_shape, weight, eps)) \
    X(kiln_tensor, group_norm, (kiln_tensor x, int64_t num_groups, kiln_tensor weight, kiln_tensor bias, double eps), (x, num_groups, weight, bias, eps)) \
    X(kiln_tensor, mse_loss, (kiln_tensor prediction, kiln_tensor target), (prediction, target)) \
    X(kiln_tensor, mse_loss_ex, (kiln_tensor prediction, kiln_tensor target, kiln_reduction reduction), (prediction, target, reduction)) \
    X(kiln_tensor, l1_loss, (kiln_tensor prediction, kiln_tensor target), (prediction, target)) \
    X(kiln_tensor, l1_loss_ex, (kiln_tensor prediction, kiln_tensor target, kiln_reduction reduction), (prediction, target, reduction)) \
    X(kiln_tensor, smooth_l1_loss, (kiln_tensor prediction, kiln_tensor target, double beta), (prediction, target, beta)) \
    X(kiln_tensor, smooth_l1_loss_ex, (kiln_tensor prediction, kiln_tensor target, double beta, kiln_reduction reduction), (prediction, target, beta, reduction)) \
    X(kiln_tensor, huber_loss, (kiln_tensor prediction, kiln_tensor target, double delta), (prediction, target, delta)) \
    X(kiln_tensor, huber_loss_ex, (kiln_tensor prediction, kiln_tensor target, double delta, kiln_reduction reduction), (prediction, target, delta, reduction)) \
    X(kiln_tensor, bce_with_logits, (kiln_tensor logits, kiln_tensor target), (logits, target)) \
    X(kiln_tensor, bce_with_logits_ex, (kiln_tensor logits, kiln_tensor target, kiln_reduction reduction), (logits, target, reduction)) \
    X(kiln_tensor, binary_cross_entropy, (kiln_tensor probabilities, kiln_tensor target), (probabilities, target)) \
    X(kiln_tensor, binary_cross_entropy_ex, (kiln_tensor probabilities, kiln_tensor target, kiln_reduction reduction), (probabilities, target, reduction)) \
    X(kiln_tensor, kl_div, (kiln_tensor input, kiln_tensor target, bool log_target), (input, target, log_target)) \
    X(kiln_tensor, kl_div_ex, (kiln_tensor input, kiln_tensor target, bool log_target, kiln_reduction reduction), (input, target, log_target, reduction)) \
    X(kiln_tensor, cross_entropy, (kiln_tensor logits, kiln_tensor targets, kiln_cross_entropy_options o), (logits, targets, o)) \
    X(kiln_tensor, nll_loss, (kiln_tensor log_probs, kiln_tensor targets), (log_probs, targets)) \
    X(kiln_tensor, nll_loss_ex, (kiln_tensor log_probs, kiln_tensor targets, kiln_cross_entropy_options o), (log_probs, targets, o))
KILN_NN_ROW_API(KILN__AT_DECLARE)

#if !defined(KILN_BUILDING) && !defined(KILN_NO_CALL_SITE_MACROS)
#pragma GCC system_header /* see core.h: errors in these calls name the caller's line */
#define kiln_layer_norm(...) KILN__AT(layer_norm, __VA_ARGS__)
#define kiln_rms_norm(...) KILN__AT(rms_norm, __VA_ARGS__)
#define kiln_group_norm(...) KILN__AT(group_norm, __VA_ARGS__)
#define kiln_mse_loss(...) KILN__AT(mse_loss, __VA_ARGS__)
#define kiln_mse_loss_ex(...) KILN__AT(mse_loss_ex, __VA_ARGS__)
#define kiln_l1_loss(...) KILN__AT(l1_loss, __VA_ARGS__)
#define kiln_l1_loss_ex(...) KILN__AT(l1_loss_ex, __VA_ARGS__)
#define kiln_smooth_l1_loss(...) KILN__AT(smooth_l1_loss, __VA_ARGS__)
#define kiln_smooth_l1_loss_ex(...) KILN__AT(smooth_l1_loss_ex, __VA_ARGS__)
#define kiln_huber_loss(...) KILN__AT(huber_loss, __VA_ARGS__)
#define kiln_huber_loss_ex(...) KILN__AT(huber_loss_ex, __VA_ARGS__)
#define kiln_bce_with_logits(...) KILN__AT(bce_with_logits, __VA_ARGS__)
#define kiln_bce_with_logits_ex(...) KILN__AT(bce_with_logits_ex, __VA_ARGS__)
#define kiln_binary_cross_entropy(...) KILN__AT(binary_cross_entropy, __VA_ARGS__)
#define kiln_binary_cross_entropy_ex(...) KILN__AT(binary_cross_entropy_ex, __VA_ARGS__)
#define kiln_kl_div(...) KILN__AT(kl_div, __VA_ARGS__)
#define kiln_kl_div_ex(...) KILN__AT(kl_div_ex, __VA_ARGS__)
#define kiln_cross_entropy(...) KILN__AT(cross_entropy, __VA_ARGS__)
#define kiln_nll_loss(...) KILN__AT(nll_loss, __VA_ARGS__)
#define kiln_nll_loss_ex(...) KILN__AT(nll_loss_ex, __VA_ARGS__)
#endif

#ifdef __cplusplus
}
#endif
#endif
