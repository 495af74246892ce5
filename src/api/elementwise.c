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
/* Bool results: never differentiable, so never recorded. */
#define UNARY_UNTRACKED(fname, CODE)                                      \
    kiln_tensor kiln_##fname(kiln_tensor x) {                             \
        KILN__OP_BEGIN("kiln_" #fname);                                   \
        kiln__tensor *tx = kiln__arg(&c, x);                              \
        return kiln__result(&c, kiln__t_unary(&c, KILN__OP_##CODE, tx));  \
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

/* One wrapper per row of the op table (ir/optable.h) by its signature and gradient columns: T
 * with a gradient rule is recorded when tracked, T without one never is, AB goes through the
 * binary rule. The rows with parameters (T_D, T_DD, T_DDD, ABC: their prototypes from the
 * table's KILN__OPTABLE_PARAMS) have their wrappers below, each mapping its arguments to the op's
 * parameters its own way; NONE rows are internal. */
#define WRAPPER(NAME, name, arity, dtype, shape, fuse, grad, sig, cpu, domain, doc) WRAPPER_##sig(NAME, name, grad)
#define WRAPPER_NONE(NAME, name, grad)
#define WRAPPER_T_D(NAME, name, grad)
#define WRAPPER_T_DD(NAME, name, grad)
#define WRAPPER_T_DDD(NAME, name, grad)
#define WRAPPER_ABC(NAME, name, grad)
#define WRAPPER_AB(NAME, name, grad) BINARY(name, NAME)
#define WRAPPER_T(NAME, name, grad) WRAPPER_T_##grad(NAME, name)
#define WRAPPER_T_NONE(NAME, name) UNARY_UNTRACKED(name, NAME)
#define WRAPPER_T_ZERO(NAME, name) UNARY(name, NAME)
#define WRAPPER_T_SAVE_NONE(NAME, name) UNARY(name, NAME)
#define WRAPPER_T_SAVE_IN(NAME, name) UNARY(name, NAME)
#define WRAPPER_T_SAVE_OUT(NAME, name) UNARY(name, NAME)
#define WRAPPER_T_EXPR(NAME, name) UNARY(name, NAME)
KILN__OPTABLE(WRAPPER)

static kiln_tensor unary_params(kiln__opctx *c, kiln__opcode code, kiln_tensor x, const double params[4]) {
    kiln__tensor *tx = kiln__arg(c, x);
    if (KILN__UNLIKELY(kiln__ad_active(1, &tx))) return kiln__result(c, kiln__ad_unary_params(c, code, tx, params));
    return kiln__result(c, kiln__t_unary_params(c, code, tx, params));
}

kiln_tensor kiln_leaky_relu(kiln_tensor x, double negative_slope) {
    KILN__OP_BEGIN("kiln_leaky_relu");
    return unary_params(&c, KILN__OP_LEAKY_RELU, x, (const double[4]){negative_slope, 0, 0, 0});
}

kiln_tensor kiln_elu(kiln_tensor x, double alpha) {
    KILN__OP_BEGIN("kiln_elu");
    return unary_params(&c, KILN__OP_ELU, x, (const double[4]){alpha, 1.0, 1.0, 0});
}

kiln_tensor kiln_selu(kiln_tensor x) {
    KILN__OP_BEGIN("kiln_selu");
    return unary_params(&c, KILN__OP_ELU, x, (const double[4]){1.6732632423543772848, 1.0507009873554804934, 1.0, 0});
}

kiln_tensor kiln_hardtanh(kiln_tensor x, double min_val, double max_val) {
    KILN__OP_BEGIN("kiln_hardtanh");
    kiln__tensor *tx = kiln__arg(&c, x);
    if (KILN__UNLIKELY(kiln__ad_active(1, &tx))) return kiln__result(&c, kiln__ad_hardtanh(&c, tx, min_val, max_val));
    return kiln__result(&c, kiln__t_hardtanh(&c, tx, min_val, max_val));
}

kiln_tensor kiln_nan_to_num(kiln_tensor x, double nan, double posinf, double neginf) {
    KILN__OP_BEGIN("kiln_nan_to_num");
    kiln__tensor *tx = kiln__arg(&c, x);
    if (KILN__UNLIKELY(kiln__ad_active(1, &tx))) return kiln__result(&c, kiln__ad_nan_to_num(&c, tx, nan, posinf, neginf));
    return kiln__result(&c, kiln__t_nan_to_num(&c, tx, nan, posinf, neginf));
}

kiln_tensor kiln_clamp(kiln_tensor x, double lo, double hi) {
    KILN__OP_BEGIN("kiln_clamp");
    kiln__tensor *tx = kiln__arg(&c, x);
    if (KILN__UNLIKELY(kiln__ad_active(1, &tx))) return kiln__result(&c, kiln__ad_clamp(&c, tx, lo, hi));
    return kiln__result(&c, kiln__t_clamp(&c, tx, lo, hi));
}

#define BINARY_SCALAR(fname, CODE, FIRST)                                                  \
    kiln_tensor kiln_##fname(kiln_tensor x, double s) {                                    \
        KILN__OP_BEGIN("kiln_" #fname);                                                    \
        kiln__tensor *tx = kiln__arg(&c, x);                                               \
        if (KILN__UNLIKELY(kiln__ad_active(1, &tx)))                                       \
            return kiln__result(&c, kiln__ad_binary_scalar(&c, KILN__OP_##CODE, tx, s, FIRST)); \
        return kiln__result(&c, kiln__t_binary_scalar(&c, KILN__OP_##CODE, tx, s, FIRST)); \
    }
/* One per row of the op table's scalar list (ir/optable.h): the row's opcode, the scalar second
 * (order TS) or first (ST). */
#define SCALAR_FIRST_TS false
#define SCALAR_FIRST_ST true
#define SCALAR_WRAPPER(NAME, name, order, doc) BINARY_SCALAR(name, NAME, SCALAR_FIRST_##order)
KILN__OPTABLE_SCALAR(SCALAR_WRAPPER)

static kiln_tensor lerp(kiln__opctx *c, kiln_tensor start, kiln_tensor end, kiln_tensor weight, bool has_weight, double w) {
    kiln__tensor *in[3] = {NULL, NULL, NULL};
    in[0] = kiln__arg(c, start);
    in[1] = kiln__arg(c, end);
    if (has_weight) in[2] = kiln__arg(c, weight);
    int n = has_weight ? 3 : 2;
    if (KILN__UNLIKELY(kiln__ad_active(n, in))) return kiln__result(c, kiln__ad_lerp(c, in[0], in[1], in[2], w));
    if (has_weight && !in[2]) return kiln__drop(2, in[0], in[1]), kiln__result(c, NULL);
    return kiln__result(c, kiln__t_lerp(c, in[0], in[1], in[2], w));
}

kiln_tensor kiln_lerp(kiln_tensor start, kiln_tensor end, kiln_tensor weight) {
    KILN__OP_BEGIN("kiln_lerp");
    return lerp(&c, start, end, weight, true, 0);
}

kiln_tensor kiln_lerp_scalar(kiln_tensor start, kiln_tensor end, double weight) {
    KILN__OP_BEGIN("kiln_lerp_scalar");
    return lerp(&c, start, end, KILN_NONE, false, weight);
}

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
