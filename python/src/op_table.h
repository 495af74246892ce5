/* The op table of the Python binding: one row per public kiln op, from which ops.c makes a
 * Tensor method (t.exp()), a module function (kiln.exp(t)) and, for operators, a number
 * slot. Rows are data only, so the lists can be generated from the C op table (src/ir/)
 * once it describes each op's Python signature.
 *   UNARY(name, kiln function, doc)                      t.name()
 *   BINARY(name, tensor-tensor fn, tensor-scalar fn, scalar-tensor fn or 0, doc)
 *                                                        t.name(other), kiln.name(a, b)
 *   REDUCE(name, whole-tensor fn, dims fn, doc)          t.name(dim=None, keepdim=False)
 *   DIM(name, fn(t, int dim), doc)                       t.name(dim) */
#ifndef KILN_PY_OP_TABLE_H
#define KILN_PY_OP_TABLE_H

#define KP_UNARY_OPS(X)                                                  \
    X(neg, kiln_neg, "-t")                                               \
    X(abs, kiln_abs, "|t|")                                              \
    X(sign, kiln_sign, "-1, 0 or 1 by sign")                             \
    X(exp, kiln_exp, "e**t")                                             \
    X(log, kiln_log, "natural logarithm")                                \
    X(log1p, kiln_log1p, "log(1 + t)")                                   \
    X(expm1, kiln_expm1, "exp(t) - 1")                                   \
    X(sqrt, kiln_sqrt, "square root")                                    \
    X(rsqrt, kiln_rsqrt, "1 / sqrt(t)")                                  \
    X(sin, kiln_sin, "sine")                                             \
    X(cos, kiln_cos, "cosine")                                           \
    X(tanh, kiln_tanh, "hyperbolic tangent")                             \
    X(sigmoid, kiln_sigmoid, "1 / (1 + exp(-t))")                        \
    X(relu, kiln_relu, "max(t, 0)")                                      \
    X(gelu, kiln_gelu, "GELU (erf form)")                                \
    X(silu, kiln_silu, "t * sigmoid(t)")                                 \
    X(softplus, kiln_softplus, "log(1 + exp(t))")                        \
    X(erf, kiln_erf, "error function")                                   \
    X(logical_not, kiln_logical_not, "not t (bool)")                     \
    X(floor, kiln_floor, "round down")                                   \
    X(ceil, kiln_ceil, "round up")                                       \
    X(round, kiln_round, "round half to even")                           \
    X(trunc, kiln_trunc, "round toward zero")                            \
    X(atan, kiln_atan, "arc tangent")                                    \
    X(log2, kiln_log2, "base-2 logarithm")                               \
    X(log10, kiln_log10, "base-10 logarithm")                            \
    X(exp2, kiln_exp2, "2**t")                                           \
    X(isnan, kiln_isnan, "bool: t is NaN")                               \
    X(isinf, kiln_isinf, "bool: t is infinite")                          \
    X(isfinite, kiln_isfinite, "bool: t is finite")                      \
    X(selu, kiln_selu, "SELU activation")                                \
    X(mish, kiln_mish, "Mish activation")                                \
    X(hardswish, kiln_hardswish, "hard swish")                           \
    X(softsign, kiln_softsign, "t / (1 + |t|)")                          \
    X(log_sigmoid, kiln_log_sigmoid, "log(sigmoid(t))")                  \
    X(contiguous, kiln_contiguous, "a dense copy, or t when dense")      \
    X(clone, kiln_clone, "a copy in its own storage")

#define KP_BINARY_OPS(X)                                                                         \
    X(add, kiln_add, kiln_add_scalar, kiln_add_scalar, "a + b")                                  \
    X(sub, kiln_sub, kiln_sub_scalar, kiln_rsub_scalar, "a - b")                                 \
    X(mul, kiln_mul, kiln_mul_scalar, kiln_mul_scalar, "a * b")                                  \
    X(div, kiln_div, kiln_div_scalar, kiln_rdiv_scalar, "a / b")                                 \
    X(pow, kiln_pow, kiln_pow_scalar, 0, "a ** b")                                               \
    X(maximum, kiln_maximum, kiln_maximum_scalar, kiln_maximum_scalar, "elementwise maximum")    \
    X(minimum, kiln_minimum, kiln_minimum_scalar, kiln_minimum_scalar, "elementwise minimum")    \
    X(eq, kiln_eq, kiln_eq_scalar, kiln_eq_scalar, "a == b (bool)")                              \
    X(ne, kiln_ne, kiln_ne_scalar, kiln_ne_scalar, "a != b (bool)")                              \
    X(lt, kiln_lt, kiln_lt_scalar, kiln_gt_scalar, "a < b (bool)")                               \
    X(le, kiln_le, kiln_le_scalar, kiln_ge_scalar, "a <= b (bool)")                              \
    X(gt, kiln_gt, kiln_gt_scalar, kiln_lt_scalar, "a > b (bool)")                               \
    X(ge, kiln_ge, kiln_ge_scalar, kiln_le_scalar, "a >= b (bool)")                              \
    X(logical_and, kiln_logical_and, 0, 0, "a and b (bool)")                                     \
    X(logical_or, kiln_logical_or, 0, 0, "a or b (bool)")                                        \
    X(fmod, kiln_fmod, kiln_fmod_scalar, 0, "remainder with a's sign")                           \
    X(remainder, kiln_remainder, kiln_remainder_scalar, 0, "remainder with b's sign (Python %)") \
    X(atan2, kiln_atan2, 0, 0, "atan2(a, b)")                                                    \
    X(matmul, kiln_matmul, 0, 0, "matrix product (torch.matmul)")                                \
    X(dot, kiln_dot, 0, 0, "inner product of 1-d tensors")                                       \
    X(outer, kiln_outer, 0, 0, "outer product of 1-d tensors")                                   \
    X(bmm, kiln_bmm, 0, 0, "batched matrix product")

#define KP_REDUCE_OPS(X)                                         \
    X(sum, kiln_sum, kiln_sum_dims, "sum over dims (all by default)") \
    X(mean, kiln_mean, kiln_mean_dims, "mean over dims")         \
    X(prod, kiln_prod, kiln_prod_dims, "product over dims")      \
    X(amax, kiln_max, kiln_max_dims, "maximum over dims")        \
    X(amin, kiln_min, kiln_min_dims, "minimum over dims")        \
    X(any, kiln_any, kiln_any_dims, "bool: any element true")    \
    X(all, kiln_all, kiln_all_dims, "bool: every element true")

#define KP_DIM_OPS(X)                                          \
    X(softmax, kiln_softmax, "softmax along dim")             \
    X(log_softmax, kiln_log_softmax, "log of softmax along dim") \
    X(cumsum, kiln_cumsum, "running sum along dim")           \
    X(cumprod, kiln_cumprod, "running product along dim")     \
    X(unsqueeze, kiln_unsqueeze, "a dim of size 1 inserted at dim")

#endif
