/* kiln's elementwise ops and reductions whose signature the op tables give: generated from
 * src/ir/optable.h and src/ir/reduce_table.h by scripts/gen_optable.py; do not edit (edit the
 * table's row, then run the script). Included by kiln/tensor.h; every op consumes its tensor
 * arguments and returns a new tensor (NumPy broadcasting; integers and bools promote to f32
 * for float math).
 *
 *   kiln_tensor y = kiln_softsign(kiln_ref(x));   // y = x / (1 + |x|), x kept
 *   kiln_tensor m = kiln_mean_dims(y, KILN_DIMS(-1), true);   // y consumed
 */
#ifndef KILN_OPS_H
#define KILN_OPS_H

#include "kiln/core.h"

#ifdef __cplusplus
extern "C" {
#endif

KILN_API kiln_tensor kiln_neg(kiln_tensor t); /* -t */
KILN_API kiln_tensor kiln_abs(kiln_tensor t); /* |t| */
KILN_API kiln_tensor kiln_sign(kiln_tensor t); /* -1, 0 or 1 by the sign of t */
KILN_API kiln_tensor kiln_exp(kiln_tensor t); /* e^t */
KILN_API kiln_tensor kiln_log(kiln_tensor t); /* natural logarithm */
KILN_API kiln_tensor kiln_log1p(kiln_tensor t); /* log(1 + t), accurate near 0 */
KILN_API kiln_tensor kiln_expm1(kiln_tensor t); /* e^t - 1, accurate near 0 */
KILN_API kiln_tensor kiln_sqrt(kiln_tensor t); /* square root */
KILN_API kiln_tensor kiln_rsqrt(kiln_tensor t); /* 1 / sqrt(t) */
KILN_API kiln_tensor kiln_sin(kiln_tensor t); /* sine */
KILN_API kiln_tensor kiln_cos(kiln_tensor t); /* cosine */
KILN_API kiln_tensor kiln_tanh(kiln_tensor t); /* hyperbolic tangent */
KILN_API kiln_tensor kiln_sigmoid(kiln_tensor t); /* 1 / (1 + e^-t) */
KILN_API kiln_tensor kiln_relu(kiln_tensor t); /* max(t, 0) */
KILN_API kiln_tensor kiln_gelu(kiln_tensor t); /* t Phi(t), the erf form */
KILN_API kiln_tensor kiln_gelu_tanh(kiln_tensor t); /* gelu's tanh approximation */
KILN_API kiln_tensor kiln_silu(kiln_tensor t); /* t sigmoid(t) */
KILN_API kiln_tensor kiln_softplus(kiln_tensor t); /* log(1 + e^t); t itself above 20 */
KILN_API kiln_tensor kiln_erf(kiln_tensor t); /* error function */
KILN_API kiln_tensor kiln_logical_not(kiln_tensor t); /* not t (bool out) */
KILN_API kiln_tensor kiln_floor(kiln_tensor t); /* round down; integers unchanged, bool refused; gradient zero */
KILN_API kiln_tensor kiln_ceil(kiln_tensor t); /* round up; integers unchanged */
KILN_API kiln_tensor kiln_round(kiln_tensor t); /* round half to even; integers unchanged */
KILN_API kiln_tensor kiln_trunc(kiln_tensor t); /* round toward zero; integers unchanged */
KILN_API kiln_tensor kiln_atan(kiln_tensor t); /* arctangent */
KILN_API kiln_tensor kiln_log2(kiln_tensor t); /* base-2 logarithm */
KILN_API kiln_tensor kiln_log10(kiln_tensor t); /* base-10 logarithm */
KILN_API kiln_tensor kiln_exp2(kiln_tensor t); /* 2^t */
KILN_API kiln_tensor kiln_isnan(kiln_tensor t); /* t is NaN (bool out; false for integers) */
KILN_API kiln_tensor kiln_isinf(kiln_tensor t); /* t is +-inf (bool out; false for integers) */
KILN_API kiln_tensor kiln_isfinite(kiln_tensor t); /* t is neither NaN nor infinite (bool out) */
KILN_API kiln_tensor kiln_log_sigmoid(kiln_tensor t); /* log(sigmoid(t)) */
KILN_API kiln_tensor kiln_mish(kiln_tensor t); /* t tanh(softplus(t)) */
KILN_API kiln_tensor kiln_softsign(kiln_tensor t); /* t / (1 + |t|) */
KILN_API kiln_tensor kiln_hardswish(kiln_tensor t); /* t min(max(t + 3, 0), 6) / 6 */
KILN_API kiln_tensor kiln_hardsigmoid(kiln_tensor t); /* min(max(t + 3, 0), 6) / 6 (torch.nn.functional.hardsigmoid) */
KILN_API kiln_tensor kiln_reciprocal(kiln_tensor t); /* 1 / t (torch.reciprocal: integers give f32) */
KILN_API kiln_tensor kiln_add(kiln_tensor a, kiln_tensor b); /* a + b */
KILN_API kiln_tensor kiln_sub(kiln_tensor a, kiln_tensor b); /* a - b */
KILN_API kiln_tensor kiln_mul(kiln_tensor a, kiln_tensor b); /* a * b */
KILN_API kiln_tensor kiln_div(kiln_tensor a, kiln_tensor b); /* a / b (true division: integers give f32) */
KILN_API kiln_tensor kiln_pow(kiln_tensor a, kiln_tensor b); /* a^b */
KILN_API kiln_tensor kiln_maximum(kiln_tensor a, kiln_tensor b); /* the larger of a and b (NaN wins) */
KILN_API kiln_tensor kiln_minimum(kiln_tensor a, kiln_tensor b); /* the smaller of a and b (NaN wins) */
KILN_API kiln_tensor kiln_eq(kiln_tensor a, kiln_tensor b); /* a == b (bool out) */
KILN_API kiln_tensor kiln_ne(kiln_tensor a, kiln_tensor b); /* a != b (bool out) */
KILN_API kiln_tensor kiln_lt(kiln_tensor a, kiln_tensor b); /* a < b (bool out) */
KILN_API kiln_tensor kiln_le(kiln_tensor a, kiln_tensor b); /* a <= b (bool out) */
KILN_API kiln_tensor kiln_gt(kiln_tensor a, kiln_tensor b); /* a > b (bool out) */
KILN_API kiln_tensor kiln_ge(kiln_tensor a, kiln_tensor b); /* a >= b (bool out) */
KILN_API kiln_tensor kiln_logical_and(kiln_tensor a, kiln_tensor b); /* a and b (bool out) */
KILN_API kiln_tensor kiln_logical_or(kiln_tensor a, kiln_tensor b); /* a or b (bool out) */
KILN_API kiln_tensor kiln_fmod(kiln_tensor a, kiln_tensor b); /* C fmod: the sign of a; integer division by zero fails the op (KILN_ERR_INVALID_ARGUMENT) */
KILN_API kiln_tensor kiln_remainder(kiln_tensor a, kiln_tensor b); /* the sign of b (torch.remainder); integer b == 0 fails */
KILN_API kiln_tensor kiln_atan2(kiln_tensor a, kiln_tensor b); /* atan2(a, b): a is y */

/* Scalar variants: the binary op with the double s as its other operand (rsub and rdiv: s first).
 * The scalar takes the tensor's dtype (a float scalar promotes an integer or bool tensor to f32,
 * a whole one a bool tensor to i64, as PyTorch). */
KILN_API kiln_tensor kiln_add_scalar(kiln_tensor t, double s); /* t + s */
KILN_API kiln_tensor kiln_sub_scalar(kiln_tensor t, double s); /* t - s */
KILN_API kiln_tensor kiln_rsub_scalar(kiln_tensor t, double s); /* s - t */
KILN_API kiln_tensor kiln_mul_scalar(kiln_tensor t, double s); /* t * s */
KILN_API kiln_tensor kiln_div_scalar(kiln_tensor t, double s); /* t / s (true division: integers give f32) */
KILN_API kiln_tensor kiln_rdiv_scalar(kiln_tensor t, double s); /* s / t */
KILN_API kiln_tensor kiln_pow_scalar(kiln_tensor t, double s); /* t^s */
KILN_API kiln_tensor kiln_maximum_scalar(kiln_tensor t, double s); /* the larger of t and s (NaN wins) */
KILN_API kiln_tensor kiln_minimum_scalar(kiln_tensor t, double s); /* the smaller of t and s (NaN wins) */
KILN_API kiln_tensor kiln_eq_scalar(kiln_tensor t, double s); /* t == s (bool out) */
KILN_API kiln_tensor kiln_ne_scalar(kiln_tensor t, double s); /* t != s (bool out) */
KILN_API kiln_tensor kiln_lt_scalar(kiln_tensor t, double s); /* t < s (bool out) */
KILN_API kiln_tensor kiln_le_scalar(kiln_tensor t, double s); /* t <= s (bool out) */
KILN_API kiln_tensor kiln_gt_scalar(kiln_tensor t, double s); /* t > s (bool out) */
KILN_API kiln_tensor kiln_ge_scalar(kiln_tensor t, double s); /* t >= s (bool out) */
KILN_API kiln_tensor kiln_fmod_scalar(kiln_tensor t, double s); /* C fmod(t, s): the sign of t */
KILN_API kiln_tensor kiln_remainder_scalar(kiln_tensor t, double s); /* the sign of s (torch.remainder) */

/* Ops with parameters (KILN__OPTABLE_PARAMS): the rows that take doubles or three tensors, and
 * compositions of a row with other parameters. */
/* t limited to [lo, hi] (torch.clamp); a NAN bound is no bound */
KILN_API kiln_tensor kiln_clamp(kiln_tensor t, double lo, double hi);
/* torch.nan_to_num: NaN -> nan, +inf -> posinf, -inf -> neginf; posinf / neginf NAN mean torch's
 * None: the largest / lowest finite value of t's dtype. Integer tensors unchanged. */
KILN_API kiln_tensor kiln_nan_to_num(kiln_tensor t, double nan, double posinf, double neginf);
/* torch.nn.functional.leaky_relu: t < 0 gives t negative_slope (torch's default 0.01);
 * floating-point tensors only */
KILN_API kiln_tensor kiln_leaky_relu(kiln_tensor t, double negative_slope);
/* torch.nn.functional.elu: t > 0 gives t, else alpha (e^t - 1) (torch's default alpha 1.0);
 * floating-point tensors only */
KILN_API kiln_tensor kiln_elu(kiln_tensor t, double alpha);
/* torch.nn.functional.selu: elu with SELU's alpha and scale; floating-point tensors only */
KILN_API kiln_tensor kiln_selu(kiln_tensor t);
/* torch.nn.functional.hardtanh: t clamped to [min_val, max_val] (torch's -1, 1) with PyTorch's
 * gradient at the bounds; floating-point tensors only */
KILN_API kiln_tensor kiln_hardtanh(kiln_tensor t, double min_val, double max_val);
/* torch.lerp: start + weight (end - start); all three broadcast; floating-point tensors only */
KILN_API kiln_tensor kiln_lerp(kiln_tensor start, kiln_tensor end, kiln_tensor weight);
/* torch.lerp with a double weight: start + weight (end - start) */
KILN_API kiln_tensor kiln_lerp_scalar(kiln_tensor start, kiln_tensor end, double weight);

/* Reductions. kiln_name(t): over every dim, to a 0-d tensor. kiln_name_dims(t, dims, keepdim):
 * over a dim list (KILN_ALL_DIMS for all; an empty list reduces nothing), the reduced dims
 * dropped, or kept as size 1 if keepdim. var and std take a correction (1: unbiased, Bessel's;
 * 0: the population's) before keepdim; argmax and argmin one dim. */
KILN_API kiln_tensor kiln_sum(kiln_tensor t); /* the sum; integers and bools accumulate in i64 */
KILN_API kiln_tensor kiln_sum_dims(kiln_tensor t, kiln_dims dims, bool keepdim); /* over dims */
KILN_API kiln_tensor kiln_mean(kiln_tensor t); /* the mean; integers and bools give f32; NaN when empty */
KILN_API kiln_tensor kiln_mean_dims(kiln_tensor t, kiln_dims dims, bool keepdim); /* over dims */
KILN_API kiln_tensor kiln_prod(kiln_tensor t); /* the product; integers and bools accumulate in i64 */
KILN_API kiln_tensor kiln_prod_dims(kiln_tensor t, kiln_dims dims, bool keepdim); /* over dims */
KILN_API kiln_tensor kiln_max(kiln_tensor t); /* the largest value (NaN wins); a dim of size 0 fails */
KILN_API kiln_tensor kiln_max_dims(kiln_tensor t, kiln_dims dims, bool keepdim); /* over dims */
KILN_API kiln_tensor kiln_min(kiln_tensor t); /* the smallest value (NaN wins); a dim of size 0 fails */
KILN_API kiln_tensor kiln_min_dims(kiln_tensor t, kiln_dims dims, bool keepdim); /* over dims */
KILN_API kiln_tensor kiln_var_dims(kiln_tensor t, kiln_dims dims, int correction, bool keepdim); /* the variance: sum((t - mean)^2) / (N - correction) */
KILN_API kiln_tensor kiln_logsumexp_dims(kiln_tensor t, kiln_dims dims, bool keepdim); /* log(sum(exp(t))), without overflow */
KILN_API kiln_tensor kiln_argmax(kiln_tensor t, int dim, bool keepdim); /* the i64 index of the largest value along dim; the first of ties */
KILN_API kiln_tensor kiln_argmin(kiln_tensor t, int dim, bool keepdim); /* the i64 index of the smallest value along dim; the first of ties */
KILN_API kiln_tensor kiln_std_dims(kiln_tensor t, kiln_dims dims, int correction, bool keepdim); /* the standard deviation: sqrt of var, in var's kernel */
KILN_API kiln_tensor kiln_any(kiln_tensor t); /* whether any element is nonzero (NaN is); false when empty */
KILN_API kiln_tensor kiln_any_dims(kiln_tensor t, kiln_dims dims, bool keepdim); /* over dims */
KILN_API kiln_tensor kiln_all(kiln_tensor t); /* whether every element is nonzero (NaN is); true when empty */
KILN_API kiln_tensor kiln_all_dims(kiln_tensor t, kiln_dims dims, bool keepdim); /* over dims */
KILN_API kiln_tensor kiln_count_nonzero(kiln_tensor t); /* the number of nonzero elements (NaN is one), in i64 */
KILN_API kiln_tensor kiln_count_nonzero_dims(kiln_tensor t, kiln_dims dims, bool keepdim); /* over dims */

/* Row ops (src/ir/row_table.h): along one dim, same shape (the norms and losses of the table
 * are in kiln/nn_ops.h). */
KILN_API kiln_tensor kiln_softmax(kiln_tensor t, int dim); /* exp(t) / sum(exp(t)) along dim; integers and bools give f32 */
KILN_API kiln_tensor kiln_log_softmax(kiln_tensor t, int dim); /* t - logsumexp(t) along dim, without overflow */

/* The calls that record the caller's file:line, as in core.h's list: the elementwise ops'
 * (KILN_OPS_ELEMENTWISE_API: a tensor or two in, one out), their scalar variants', the ops'
 * with parameters, the reductions', the row ops' and all five. */
#define KILN_OPS_ELEMENTWISE_API(X) \
    X(kiln_tensor, neg, (kiln_tensor t), (t)) \
    X(kiln_tensor, abs, (kiln_tensor t), (t)) \
    X(kiln_tensor, sign, (kiln_tensor t), (t)) \
    X(kiln_tensor, exp, (kiln_tensor t), (t)) \
    X(kiln_tensor, log, (kiln_tensor t), (t)) \
    X(kiln_tensor, log1p, (kiln_tensor t), (t)) \
    X(kiln_tensor, expm1, (kiln_tensor t), (t)) \
    X(kiln_tensor, sqrt, (kiln_tensor t), (t)) \
    X(kiln_tensor, rsqrt, (kiln_tensor t), (t)) \
    X(kiln_tensor, sin, (kiln_tensor t), (t)) \
    X(kiln_tensor, cos, (kiln_tensor t), (t)) \
    X(kiln_tensor, tanh, (kiln_tensor t), (t)) \
    X(kiln_tensor, sigmoid, (kiln_tensor t), (t)) \
    X(kiln_tensor, relu, (kiln_tensor t), (t)) \
    X(kiln_tensor, gelu, (kiln_tensor t), (t)) \
    X(kiln_tensor, gelu_tanh, (kiln_tensor t), (t)) \
    X(kiln_tensor, silu, (kiln_tensor t), (t)) \
    X(kiln_tensor, softplus, (kiln_tensor t), (t)) \
    X(kiln_tensor, erf, (kiln_tensor t), (t)) \
    X(kiln_tensor, logical_not, (kiln_tensor t), (t)) \
    X(kiln_tensor, floor, (kiln_tensor t), (t)) \
    X(kiln_tensor, ceil, (kiln_tensor t), (t)) \
    X(kiln_tensor, round, (kiln_tensor t), (t)) \
    X(kiln_tensor, trunc, (kiln_tensor t), (t)) \
    X(kiln_tensor, atan, (kiln_tensor t), (t)) \
    X(kiln_tensor, log2, (kiln_tensor t), (t)) \
    X(kiln_tensor, log10, (kiln_tensor t), (t)) \
    X(kiln_tensor, exp2, (kiln_tensor t), (t)) \
    X(kiln_tensor, isnan, (kiln_tensor t), (t)) \
    X(kiln_tensor, isinf, (kiln_tensor t), (t)) \
    X(kiln_tensor, isfinite, (kiln_tensor t), (t)) \
    X(kiln_tensor, log_sigmoid, (kiln_tensor t), (t)) \
    X(kiln_tensor, mish, (kiln_tensor t), (t)) \
    X(kiln_tensor, softsign, (kiln_tensor t), (t)) \
    X(kiln_tensor, hardswish, (kiln_tensor t), (t)) \
    X(kiln_tensor, hardsigmoid, (kiln_tensor t), (t)) \
    X(kiln_tensor, reciprocal, (kiln_tensor t), (t)) \
    X(kiln_tensor, add, (kiln_tensor a, kiln_tensor b), (a, b)) \
    X(kiln_tensor, sub, (kiln_tensor a, kiln_tensor b), (a, b)) \
    X(kiln_tensor, mul, (kiln_tensor a, kiln_tensor b), (a, b)) \
    X(kiln_tensor, div, (kiln_tensor a, kiln_tensor b), (a, b)) \
    X(kiln_tensor, pow, (kiln_tensor a, kiln_tensor b), (a, b)) \
    X(kiln_tensor, maximum, (kiln_tensor a, kiln_tensor b), (a, b)) \
    X(kiln_tensor, minimum, (kiln_tensor a, kiln_tensor b), (a, b)) \
    X(kiln_tensor, eq, (kiln_tensor a, kiln_tensor b), (a, b)) \
    X(kiln_tensor, ne, (kiln_tensor a, kiln_tensor b), (a, b)) \
    X(kiln_tensor, lt, (kiln_tensor a, kiln_tensor b), (a, b)) \
    X(kiln_tensor, le, (kiln_tensor a, kiln_tensor b), (a, b)) \
    X(kiln_tensor, gt, (kiln_tensor a, kiln_tensor b), (a, b)) \
    X(kiln_tensor, ge, (kiln_tensor a, kiln_tensor b), (a, b)) \
    X(kiln_tensor, logical_and, (kiln_tensor a, kiln_tensor b), (a, b)) \
    X(kiln_tensor, logical_or, (kiln_tensor a, kiln_tensor b), (a, b)) \
    X(kiln_tensor, fmod, (kiln_tensor a, kiln_tensor b), (a, b)) \
    X(kiln_tensor, remainder, (kiln_tensor a, kiln_tensor b), (a, b)) \
    X(kiln_tensor, atan2, (kiln_tensor a, kiln_tensor b), (a, b))
#define KILN_OPS_SCALAR_API(X) \
    X(kiln_tensor, add_scalar, (kiln_tensor t, double s), (t, s)) \
    X(kiln_tensor, sub_scalar, (kiln_tensor t, double s), (t, s)) \
    X(kiln_tensor, rsub_scalar, (kiln_tensor t, double s), (t, s)) \
    X(kiln_tensor, mul_scalar, (kiln_tensor t, double s), (t, s)) \
    X(kiln_tensor, div_scalar, (kiln_tensor t, double s), (t, s)) \
    X(kiln_tensor, rdiv_scalar, (kiln_tensor t, double s), (t, s)) \
    X(kiln_tensor, pow_scalar, (kiln_tensor t, double s), (t, s)) \
    X(kiln_tensor, maximum_scalar, (kiln_tensor t, double s), (t, s)) \
    X(kiln_tensor, minimum_scalar, (kiln_tensor t, double s), (t, s)) \
    X(kiln_tensor, eq_scalar, (kiln_tensor t, double s), (t, s)) \
    X(kiln_tensor, ne_scalar, (kiln_tensor t, double s), (t, s)) \
    X(kiln_tensor, lt_scalar, (kiln_tensor t, double s), (t, s)) \
    X(kiln_tensor, le_scalar, (kiln_tensor t, double s), (t, s)) \
    X(kiln_tensor, gt_scalar, (kiln_tensor t, double s), (t, s)) \
    X(kiln_tensor, ge_scalar, (kiln_tensor t, double s), (t, s)) \
    X(kiln_tensor, fmod_scalar, (kiln_tensor t, double s), (t, s)) \
    X(kiln_tensor, remainder_scalar, (kiln_tensor t, double s), (t, s))
#define KILN_OPS_PARAMS_API(X) \
    X(kiln_tensor, clamp, (kiln_tensor t, double lo, double hi), (t, lo, hi)) \
    X(kiln_tensor, nan_to_num, (kiln_tensor t, double nan, double posinf, double neginf), (t, nan, posinf, neginf)) \
    X(kiln_tensor, leaky_relu, (kiln_tensor t, double negative_slope), (t, negative_slope)) \
    X(kiln_tensor, elu, (kiln_tensor t, double alpha), (t, alpha)) \
    X(kiln_tensor, selu, (kiln_tensor t), (t)) \
    X(kiln_tensor, hardtanh, (kiln_tensor t, double min_val, double max_val), (t, min_val, max_val)) \
    X(kiln_tensor, lerp, (kiln_tensor start, kiln_tensor end, kiln_tensor weight), (start, end, weight)) \
    X(kiln_tensor, lerp_scalar, (kiln_tensor start, kiln_tensor end, double weight), (start, end, weight))
#define KILN_OPS_REDUCE_API(X) \
    X(kiln_tensor, sum, (kiln_tensor t), (t)) \
    X(kiln_tensor, sum_dims, (kiln_tensor t, kiln_dims dims, bool keepdim), (t, dims, keepdim)) \
    X(kiln_tensor, mean, (kiln_tensor t), (t)) \
    X(kiln_tensor, mean_dims, (kiln_tensor t, kiln_dims dims, bool keepdim), (t, dims, keepdim)) \
    X(kiln_tensor, prod, (kiln_tensor t), (t)) \
    X(kiln_tensor, prod_dims, (kiln_tensor t, kiln_dims dims, bool keepdim), (t, dims, keepdim)) \
    X(kiln_tensor, max, (kiln_tensor t), (t)) \
    X(kiln_tensor, max_dims, (kiln_tensor t, kiln_dims dims, bool keepdim), (t, dims, keepdim)) \
    X(kiln_tensor, min, (kiln_tensor t), (t)) \
    X(kiln_tensor, min_dims, (kiln_tensor t, kiln_dims dims, bool keepdim), (t, dims, keepdim)) \
    X(kiln_tensor, var_dims, (kiln_tensor t, kiln_dims dims, int correction, bool keepdim), (t, dims, correction, keepdim)) \
    X(kiln_tensor, logsumexp_dims, (kiln_tensor t, kiln_dims dims, bool keepdim), (t, dims, keepdim)) \
    X(kiln_tensor, argmax, (kiln_tensor t, int dim, bool keepdim), (t, dim, keepdim)) \
    X(kiln_tensor, argmin, (kiln_tensor t, int dim, bool keepdim), (t, dim, keepdim)) \
    X(kiln_tensor, std_dims, (kiln_tensor t, kiln_dims dims, int correction, bool keepdim), (t, dims, correction, keepdim)) \
    X(kiln_tensor, any, (kiln_tensor t), (t)) \
    X(kiln_tensor, any_dims, (kiln_tensor t, kiln_dims dims, bool keepdim), (t, dims, keepdim)) \
    X(kiln_tensor, all, (kiln_tensor t), (t)) \
    X(kiln_tensor, all_dims, (kiln_tensor t, kiln_dims dims, bool keepdim), (t, dims, keepdim)) \
    X(kiln_tensor, count_nonzero, (kiln_tensor t), (t)) \
    X(kiln_tensor, count_nonzero_dims, (kiln_tensor t, kiln_dims dims, bool keepdim), (t, dims, keepdim))
#define KILN_OPS_ROW_API(X) \
    X(kiln_tensor, softmax, (kiln_tensor t, int dim), (t, dim)) \
    X(kiln_tensor, log_softmax, (kiln_tensor t, int dim), (t, dim))
#define KILN_OPS_API(X) KILN_OPS_ELEMENTWISE_API(X) KILN_OPS_SCALAR_API(X) KILN_OPS_PARAMS_API(X) \
    KILN_OPS_REDUCE_API(X) KILN_OPS_ROW_API(X)
KILN_OPS_API(KILN__AT_DECLARE)

#if !defined(KILN_BUILDING) && !defined(KILN_NO_CALL_SITE_MACROS)
#pragma GCC system_header /* see core.h: errors in these calls name the caller's line */
#define kiln_neg(...) KILN__AT(neg, __VA_ARGS__)
#define kiln_abs(...) KILN__AT(abs, __VA_ARGS__)
#define kiln_sign(...) KILN__AT(sign, __VA_ARGS__)
#define kiln_exp(...) KILN__AT(exp, __VA_ARGS__)
#define kiln_log(...) KILN__AT(log, __VA_ARGS__)
#define kiln_log1p(...) KILN__AT(log1p, __VA_ARGS__)
#define kiln_expm1(...) KILN__AT(expm1, __VA_ARGS__)
#define kiln_sqrt(...) KILN__AT(sqrt, __VA_ARGS__)
#define kiln_rsqrt(...) KILN__AT(rsqrt, __VA_ARGS__)
#define kiln_sin(...) KILN__AT(sin, __VA_ARGS__)
#define kiln_cos(...) KILN__AT(cos, __VA_ARGS__)
#define kiln_tanh(...) KILN__AT(tanh, __VA_ARGS__)
#define kiln_sigmoid(...) KILN__AT(sigmoid, __VA_ARGS__)
#define kiln_relu(...) KILN__AT(relu, __VA_ARGS__)
#define kiln_gelu(...) KILN__AT(gelu, __VA_ARGS__)
#define kiln_gelu_tanh(...) KILN__AT(gelu_tanh, __VA_ARGS__)
#define kiln_silu(...) KILN__AT(silu, __VA_ARGS__)
#define kiln_softplus(...) KILN__AT(softplus, __VA_ARGS__)
#define kiln_erf(...) KILN__AT(erf, __VA_ARGS__)
#define kiln_logical_not(...) KILN__AT(logical_not, __VA_ARGS__)
#define kiln_floor(...) KILN__AT(floor, __VA_ARGS__)
#define kiln_ceil(...) KILN__AT(ceil, __VA_ARGS__)
#define kiln_round(...) KILN__AT(round, __VA_ARGS__)
#define kiln_trunc(...) KILN__AT(trunc, __VA_ARGS__)
#define kiln_atan(...) KILN__AT(atan, __VA_ARGS__)
#define kiln_log2(...) KILN__AT(log2, __VA_ARGS__)
#define kiln_log10(...) KILN__AT(log10, __VA_ARGS__)
#define kiln_exp2(...) KILN__AT(exp2, __VA_ARGS__)
#define kiln_isnan(...) KILN__AT(isnan, __VA_ARGS__)
#define kiln_isinf(...) KILN__AT(isinf, __VA_ARGS__)
#define kiln_isfinite(...) KILN__AT(isfinite, __VA_ARGS__)
#define kiln_log_sigmoid(...) KILN__AT(log_sigmoid, __VA_ARGS__)
#define kiln_mish(...) KILN__AT(mish, __VA_ARGS__)
#define kiln_softsign(...) KILN__AT(softsign, __VA_ARGS__)
#define kiln_hardswish(...) KILN__AT(hardswish, __VA_ARGS__)
#define kiln_hardsigmoid(...) KILN__AT(hardsigmoid, __VA_ARGS__)
#define kiln_reciprocal(...) KILN__AT(reciprocal, __VA_ARGS__)
#define kiln_add(...) KILN__AT(add, __VA_ARGS__)
#define kiln_sub(...) KILN__AT(sub, __VA_ARGS__)
#define kiln_mul(...) KILN__AT(mul, __VA_ARGS__)
#define kiln_div(...) KILN__AT(div, __VA_ARGS__)
#define kiln_pow(...) KILN__AT(pow, __VA_ARGS__)
#define kiln_maximum(...) KILN__AT(maximum, __VA_ARGS__)
#define kiln_minimum(...) KILN__AT(minimum, __VA_ARGS__)
#define kiln_eq(...) KILN__AT(eq, __VA_ARGS__)
#define kiln_ne(...) KILN__AT(ne, __VA_ARGS__)
#define kiln_lt(...) KILN__AT(lt, __VA_ARGS__)
#define kiln_le(...) KILN__AT(le, __VA_ARGS__)
#define kiln_gt(...) KILN__AT(gt, __VA_ARGS__)
#define kiln_ge(...) KILN__AT(ge, __VA_ARGS__)
#define kiln_logical_and(...) KILN__AT(logical_and, __VA_ARGS__)
#define kiln_logical_or(...) KILN__AT(logical_or, __VA_ARGS__)
#define kiln_fmod(...) KILN__AT(fmod, __VA_ARGS__)
#define kiln_remainder(...) KILN__AT(remainder, __VA_ARGS__)
#define kiln_atan2(...) KILN__AT(atan2, __VA_ARGS__)
#define kiln_add_scalar(...) KILN__AT(add_scalar, __VA_ARGS__)
#define kiln_sub_scalar(...) KILN__AT(sub_scalar, __VA_ARGS__)
#define kiln_rsub_scalar(...) KILN__AT(rsub_scalar, __VA_ARGS__)
#define kiln_mul_scalar(...) KILN__AT(mul_scalar, __VA_ARGS__)
#define kiln_div_scalar(...) KILN__AT(div_scalar, __VA_ARGS__)
#define kiln_rdiv_scalar(...) KILN__AT(rdiv_scalar, __VA_ARGS__)
#define kiln_pow_scalar(...) KILN__AT(pow_scalar, __VA_ARGS__)
#define kiln_maximum_scalar(...) KILN__AT(maximum_scalar, __VA_ARGS__)
#define kiln_minimum_scalar(...) KILN__AT(minimum_scalar, __VA_ARGS__)
#define kiln_eq_scalar(...) KILN__AT(eq_scalar, __VA_ARGS__)
#define kiln_ne_scalar(...) KILN__AT(ne_scalar, __VA_ARGS__)
#define kiln_lt_scalar(...) KILN__AT(lt_scalar, __VA_ARGS__)
#define kiln_le_scalar(...) KILN__AT(le_scalar, __VA_ARGS__)
#define kiln_gt_scalar(...) KILN__AT(gt_scalar, __VA_ARGS__)
#define kiln_ge_scalar(...) KILN__AT(ge_scalar, __VA_ARGS__)
#define kiln_fmod_scalar(...) KILN__AT(fmod_scalar, __VA_ARGS__)
#define kiln_remainder_scalar(...) KILN__AT(remainder_scalar, __VA_ARGS__)
#define kiln_clamp(...) KILN__AT(clamp, __VA_ARGS__)
#define kiln_nan_to_num(...) KILN__AT(nan_to_num, __VA_ARGS__)
#define kiln_leaky_relu(...) KILN__AT(leaky_relu, __VA_ARGS__)
#define kiln_elu(...) KILN__AT(elu, __VA_ARGS__)
#define kiln_selu(...) KILN__AT(selu, __VA_ARGS__)
#define kiln_hardtanh(...) KILN__AT(hardtanh, __VA_ARGS__)
#define kiln_lerp(...) KILN__AT(lerp, __VA_ARGS__)
#define kiln_lerp_scalar(...) KILN__AT(lerp_scalar, __VA_ARGS__)
#define kiln_sum(...) KILN__AT(sum, __VA_ARGS__)
#define kiln_sum_dims(...) KILN__AT(sum_dims, __VA_ARGS__)
#define kiln_mean(...) KILN__AT(mean, __VA_ARGS__)
#define kiln_mean_dims(...) KILN__AT(mean_dims, __VA_ARGS__)
#define kiln_prod(...) KILN__AT(prod, __VA_ARGS__)
#define kiln_prod_dims(...) KILN__AT(prod_dims, __VA_ARGS__)
#define kiln_max(...) KILN__AT(max, __VA_ARGS__)
#define kiln_max_dims(...) KILN__AT(max_dims, __VA_ARGS__)
#define kiln_min(...) KILN__AT(min, __VA_ARGS__)
#define kiln_min_dims(...) KILN__AT(min_dims, __VA_ARGS__)
#define kiln_var_dims(...) KILN__AT(var_dims, __VA_ARGS__)
#define kiln_logsumexp_dims(...) KILN__AT(logsumexp_dims, __VA_ARGS__)
#define kiln_argmax(...) KILN__AT(argmax, __VA_ARGS__)
#define kiln_argmin(...) KILN__AT(argmin, __VA_ARGS__)
#define kiln_std_dims(...) KILN__AT(std_dims, __VA_ARGS__)
#define kiln_any(...) KILN__AT(any, __VA_ARGS__)
#define kiln_any_dims(...) KILN__AT(any_dims, __VA_ARGS__)
#define kiln_all(...) KILN__AT(all, __VA_ARGS__)
#define kiln_all_dims(...) KILN__AT(all_dims, __VA_ARGS__)
#define kiln_count_nonzero(...) KILN__AT(count_nonzero, __VA_ARGS__)
#define kiln_count_nonzero_dims(...) KILN__AT(count_nonzero_dims, __VA_ARGS__)
#define kiln_softmax(...) KILN__AT(softmax, __VA_ARGS__)
#define kiln_log_softmax(...) KILN__AT(log_softmax, __VA_ARGS__)
#endif

#ifdef __cplusplus
}
#endif
#endif
