/* The Python binding's rows of the op table's unary ops and of the reduction table's rows
 * with a py name: generated from src/ir/optable.h and src/ir/reduce_table.h by
 * scripts/gen_optable.py; do not edit. op_table.h puts them in KP_UNARY_OPS and
 * KP_REDUCE_OPS. */
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

#endif
