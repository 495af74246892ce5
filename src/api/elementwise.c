/* Public elementwise ops: take the handles, then send tracked inputs through autodiff's
 * decorated op and untracked ones straight to the op layer (one branch on the fast path). */
#include "kiln/tensor.h"
#include "autodiff/autodiff-impl.h"

#define UNARY(fname, CODE)                                                  \
    kiln_tensor kiln_##fname(kiln_tensor x) {                               \
        KILN__OP_BEGIN("kiln_" #fname);                                     \
        kiln__tensor *tx = kiln__arg(&c, x);                                \
        if (KILN__UNLIKELY(kiln__ad_active(1, &tx)))                        \
            return kiln__result(&c, kiln__ad_unary(&c, KILN__OP_##CODE, tx)); \
        return kiln__result(&c, kiln__t_unary(&c, KILN__OP_##CODE, tx));    \
    }
UNARY(neg, NEG)
UNARY(abs, ABS)
UNARY(sign, SIGN)
UNARY(exp, EXP)
UNARY(log, LOG)
UNARY(log1p, LOG1P)
UNARY(expm1, EXPM1)
UNARY(sqrt, SQRT)
UNARY(rsqrt, RSQRT)
UNARY(sin, SIN)
UNARY(cos, COS)
UNARY(tanh, TANH)
UNARY(sigmoid, SIGMOID)
UNARY(relu, RELU)
UNARY(gelu, GELU)
UNARY(gelu_tanh, GELU_TANH)
UNARY(silu, SILU)
UNARY(softplus, SOFTPLUS)
UNARY(erf, ERF)
UNARY(logical_not, LOGICAL_NOT)

kiln_tensor kiln_clamp(kiln_tensor x, double lo, double hi) {
    KILN__OP_BEGIN("kiln_clamp");
    kiln__tensor *tx = kiln__arg(&c, x);
    if (KILN__UNLIKELY(kiln__ad_active(1, &tx))) return kiln__result(&c, kiln__ad_clamp(&c, tx, lo, hi));
    return kiln__result(&c, kiln__t_clamp(&c, tx, lo, hi));
}

#define BINARY(fname, CODE)                                                    \
    kiln_tensor kiln_##fname(kiln_tensor a, kiln_tensor b) {                   \
        KILN__OP_BEGIN("kiln_" #fname);                                        \
        kiln__tensor *in[2];                                                   \
        in[0] = kiln__arg(&c, a); /* in order: the first stale handle is named */ \
        in[1] = kiln__arg(&c, b);                                              \
        if (KILN__UNLIKELY(kiln__ad_active(2, in)))                            \
            return kiln__result(&c, kiln__ad_binary(&c, KILN__OP_##CODE, in[0], in[1])); \
        return kiln__result(&c, kiln__t_binary(&c, KILN__OP_##CODE, in[0], in[1])); \
    }
BINARY(add, ADD)
BINARY(sub, SUB)
BINARY(mul, MUL)
BINARY(div, DIV)
BINARY(pow, POW)
BINARY(maximum, MAXIMUM)
BINARY(minimum, MINIMUM)
BINARY(eq, EQ)
BINARY(ne, NE)
BINARY(lt, LT)
BINARY(le, LE)
BINARY(gt, GT)
BINARY(ge, GE)
BINARY(logical_and, LOGICAL_AND)
BINARY(logical_or, LOGICAL_OR)

#define BINARY_SCALAR(fname, CODE, FIRST)                                                  \
    kiln_tensor kiln_##fname(kiln_tensor x, double s) {                                    \
        KILN__OP_BEGIN("kiln_" #fname);                                                    \
        kiln__tensor *tx = kiln__arg(&c, x);                                               \
        if (KILN__UNLIKELY(kiln__ad_active(1, &tx)))                                       \
            return kiln__result(&c, kiln__ad_binary_scalar(&c, KILN__OP_##CODE, tx, s, FIRST)); \
        return kiln__result(&c, kiln__t_binary_scalar(&c, KILN__OP_##CODE, tx, s, FIRST)); \
    }
BINARY_SCALAR(add_scalar, ADD, false)
BINARY_SCALAR(sub_scalar, SUB, false)
BINARY_SCALAR(rsub_scalar, SUB, true)
BINARY_SCALAR(mul_scalar, MUL, false)
BINARY_SCALAR(div_scalar, DIV, false)
BINARY_SCALAR(rdiv_scalar, DIV, true)
BINARY_SCALAR(pow_scalar, POW, false)
BINARY_SCALAR(maximum_scalar, MAXIMUM, false)
BINARY_SCALAR(minimum_scalar, MINIMUM, false)
BINARY_SCALAR(eq_scalar, EQ, false)
BINARY_SCALAR(ne_scalar, NE, false)
BINARY_SCALAR(lt_scalar, LT, false)
BINARY_SCALAR(le_scalar, LE, false)
BINARY_SCALAR(gt_scalar, GT, false)
BINARY_SCALAR(ge_scalar, GE, false)

kiln_tensor kiln_where(kiln_tensor mask, kiln_tensor a, kiln_tensor b) {
    KILN__OP_BEGIN("kiln_where");
    kiln__tensor *in[3];
    in[0] = kiln__arg(&c, mask);
    in[1] = kiln__arg(&c, a);
    in[2] = kiln__arg(&c, b);
    if (KILN__UNLIKELY(kiln__ad_active(3, in))) return kiln__result(&c, kiln__ad_where(&c, in[0], in[1], in[2]));
    return kiln__result(&c, kiln__t_where(&c, in[0], in[1], in[2]));
}

kiln_tensor kiln_cast(kiln_tensor x, kiln_dtype dtype) {
    KILN__OP_BEGIN("kiln_cast");
    kiln__tensor *tx = kiln__arg(&c, x);
    if (!kiln__dtype_valid(dtype)) {
        kiln__drop(1, tx);
        return kiln__result(&c, kiln__fail(&c, KILN_ERR_DTYPE, "invalid dtype %d", (int)dtype));
    }
    if (KILN__UNLIKELY(kiln__ad_active(1, &tx))) return kiln__result(&c, kiln__ad_cast(&c, tx, dtype));
    return kiln__result(&c, kiln__t_cast(&c, tx, dtype));
}
