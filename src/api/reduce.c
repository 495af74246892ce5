/* Public reductions and softmax: dim lists become masks, then tracked inputs go through
 * autodiff and untracked ones straight to the op layer. */
#include "kiln/tensor.h"
#include "autodiff/autodiff-impl.h"

static kiln_tensor reduce_dims(const char *name, kiln__opcode code, kiln_tensor t, kiln_dims dims, bool keepdim,
                               int64_t param, bool take_sqrt) {
    KILN__OP_BEGIN(name);
    kiln__tensor *x = kiln__arg(&c, t);
    uint32_t mask = 0;
    if (!kiln__ok(&c, x) || !kiln__dims_mask(&c, dims, x->ndim, &mask)) {
        kiln__drop(1, x);
        return kiln__result(&c, NULL);
    }
    if (KILN__UNLIKELY(kiln__ad_active(1, &x)))
        return kiln__result(&c, kiln__ad_reduce(&c, code, x, mask, keepdim, param, take_sqrt));
    if (take_sqrt) return kiln__result(&c, kiln__t_std(&c, x, mask, keepdim, param));
    return kiln__result(&c, kiln__t_reduce(&c, code, x, mask, keepdim, param));
}

#define REDUCE(fname, CODE)                                                                      \
    kiln_tensor kiln_##fname(kiln_tensor t) {                                                    \
        return reduce_dims("kiln_" #fname, KILN__OP_##CODE, t, KILN_ALL_DIMS, false, 0, false);  \
    }                                                                                            \
    kiln_tensor kiln_##fname##_dims(kiln_tensor t, kiln_dims dims, bool keepdim) {               \
        return reduce_dims("kiln_" #fname "_dims", KILN__OP_##CODE, t, dims, keepdim, 0, false); \
    }
REDUCE(sum, SUM)
REDUCE(mean, MEAN)
REDUCE(max, MAX)
REDUCE(min, MIN)
REDUCE(prod, PROD)

kiln_tensor kiln_var_dims(kiln_tensor t, kiln_dims dims, int correction, bool keepdim) {
    return reduce_dims("kiln_var_dims", KILN__OP_VAR, t, dims, keepdim, correction, false);
}

kiln_tensor kiln_std_dims(kiln_tensor t, kiln_dims dims, int correction, bool keepdim) {
    return reduce_dims("kiln_std_dims", KILN__OP_VAR, t, dims, keepdim, correction, true);
}

kiln_tensor kiln_logsumexp_dims(kiln_tensor t, kiln_dims dims, bool keepdim) {
    return reduce_dims("kiln_logsumexp_dims", KILN__OP_LOGSUMEXP, t, dims, keepdim, 0, false);
}

static kiln_tensor arg_reduce(const char *name, kiln__opcode code, kiln_tensor t, int dim, bool keepdim) {
    KILN__OP_BEGIN(name);
    kiln__tensor *x = kiln__arg(&c, t);
    if (!kiln__ok(&c, x) || !kiln__norm_dim(&c, &dim, x->ndim)) {
        kiln__drop(1, x);
        return kiln__result(&c, NULL);
    }
    return kiln__result(&c, kiln__t_reduce(&c, code, x, x->ndim ? 1u << dim : 0u, keepdim, 0));
}

kiln_tensor kiln_argmax(kiln_tensor t, int dim, bool keepdim) {
    return arg_reduce("kiln_argmax", KILN__OP_ARGMAX, t, dim, keepdim);
}

kiln_tensor kiln_argmin(kiln_tensor t, int dim, bool keepdim) {
    return arg_reduce("kiln_argmin", KILN__OP_ARGMIN, t, dim, keepdim);
}

/* ---- softmax ----------------------------------------------------------------------------- */
static kiln_tensor softmax_op(const char *name, kiln__opcode code, kiln_tensor t, int dim) {
    KILN__OP_BEGIN(name);
    kiln__tensor *x = kiln__arg(&c, t);
    if (KILN__UNLIKELY(kiln__ad_active(1, &x))) return kiln__result(&c, kiln__ad_softmax(&c, code, x, dim));
    return kiln__result(&c, kiln__t_softmax(&c, code, x, dim));
}

kiln_tensor kiln_softmax(kiln_tensor t, int dim) { return softmax_op("kiln_softmax", KILN__OP_SOFTMAX, t, dim); }

kiln_tensor kiln_log_softmax(kiln_tensor t, int dim) {
    return softmax_op("kiln_log_softmax", KILN__OP_LOG_SOFTMAX, t, dim);
}

static kiln_tensor scan(kiln__opctx *c, kiln__opcode code, kiln_tensor t, int dim) {
    kiln__tensor *x = kiln__arg(c, t);
    if (KILN__UNLIKELY(kiln__ad_active(1, &x))) return kiln__result(c, kiln__ad_scan(c, code, x, dim));
    return kiln__result(c, kiln__t_scan(c, code, x, dim, false));
}

kiln_tensor kiln_cumsum(kiln_tensor t, int dim) {
    KILN__OP_BEGIN("kiln_cumsum");
    return scan(&c, KILN__OP_CUMSUM, t, dim);
}

kiln_tensor kiln_cumprod(kiln_tensor t, int dim) {
    KILN__OP_BEGIN("kiln_cumprod");
    return scan(&c, KILN__OP_CUMPROD, t, dim);
}
