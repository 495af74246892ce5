/* Public reductions and softmax: dim lists become masks, then tracked inputs go through
 * autodiff and untracked ones straight to the op layer. One wrapper (two for ALL_DIMS) per
 * KERNEL row of the reduction table (ir/reduce_table.h), by its signature and gradient columns;
 * the COMPOSED rows' (std, any, all, count_nonzero) are written below them; softmax and
 * log_softmax from the row-op table's KERNEL rows (ir/row_table.h). */
#include "kiln/tensor.h"
#include "autodiff/autodiff-impl.h"

/* tracked: the row has a gradient rule (its grad column is not NONE), so a tracked input
 * records a node. */
static kiln_tensor reduce_dims(const char *name, kiln__opcode code, bool tracked, kiln_tensor t, kiln_dims dims,
                               bool keepdim, int64_t param, bool take_sqrt) {
    KILN__OP_BEGIN(name);
    kiln__tensor *x = kiln__arg(&c, t);
    uint32_t mask = 0;
    if (!kiln__ok(&c, x) || !kiln__dims_mask(&c, dims, x->ndim, &mask)) {
        kiln__drop(1, x);
        return kiln__result(&c, NULL);
    }
    if (KILN__UNLIKELY(tracked && kiln__ad_active(1, &x)))
        return kiln__result(&c, kiln__ad_reduce(&c, code, x, mask, keepdim, param, take_sqrt));
    if (take_sqrt) return kiln__result(&c, kiln__t_std(&c, x, mask, keepdim, param));
    return kiln__result(&c, kiln__t_reduce(&c, code, x, mask, keepdim, param));
}

/* One dim (argmax, argmin): an index is not differentiable, so never recorded (a DIM row's
 * grad is NONE; tests/test_backend_ops_reduce.c checks it). */
static kiln_tensor reduce_dim(const char *name, kiln__opcode code, kiln_tensor t, int dim, bool keepdim) {
    KILN__OP_BEGIN(name);
    kiln__tensor *x = kiln__arg(&c, t);
    if (!kiln__ok(&c, x) || !kiln__norm_dim(&c, &dim, x->ndim)) {
        kiln__drop(1, x);
        return kiln__result(&c, NULL);
    }
    return kiln__result(&c, kiln__t_reduce(&c, code, x, x->ndim ? 1u << dim : 0u, keepdim, 0));
}

#define TRACKED(grad) (KILN__RGRAD_##grad != KILN__RGRAD_NONE)
#define WRAPPER(NAME, name, dtype, sig, grad, ...) WRAPPER_##sig(NAME, name, TRACKED(grad))
#define WRAPPER_ALL_DIMS(NAME, name, tracked)                                                     \
    kiln_tensor kiln_##name(kiln_tensor t) {                                                      \
        return reduce_dims("kiln_" #name, KILN__OP_##NAME, tracked, t, KILN_ALL_DIMS, false, 0, false); \
    }                                                                                             \
    WRAPPER_DIMS(NAME, name, tracked)
#define WRAPPER_DIMS(NAME, name, tracked)                                                         \
    kiln_tensor kiln_##name##_dims(kiln_tensor t, kiln_dims dims, bool keepdim) {                 \
        return reduce_dims("kiln_" #name "_dims", KILN__OP_##NAME, tracked, t, dims, keepdim, 0, false); \
    }
#define WRAPPER_CORRECTION(NAME, name, tracked)                                                   \
    kiln_tensor kiln_##name##_dims(kiln_tensor t, kiln_dims dims, int correction, bool keepdim) { \
        return reduce_dims("kiln_" #name "_dims", KILN__OP_##NAME, tracked, t, dims, keepdim, correction, false); \
    }
#define WRAPPER_DIM(NAME, name, tracked)                                                          \
    _Static_assert(!(tracked), "kiln_" #name ": a DIM row's grad is NONE");                       \
    kiln_tensor kiln_##name(kiln_tensor t, int dim, bool keepdim) {                               \
        return reduce_dim("kiln_" #name, KILN__OP_##NAME, t, dim, keepdim);                       \
    }
KILN__REDUCE_KERNELS(WRAPPER)

/* ---- the COMPOSED rows ------------------------------------------------------------------- */
/* std: VAR's kernel takes the square root before it writes (no separate sqrt pass). */
kiln_tensor kiln_std_dims(kiln_tensor t, kiln_dims dims, int correction, bool keepdim) {
    return reduce_dims("kiln_std_dims", KILN__OP_VAR, true, t, dims, keepdim, correction, true);
}

/* any: a nonzero count above 0; all: a zero count of 0 (NaN is nonzero, as in PyTorch). */
static kiln_tensor any_all(const char *name, kiln_tensor t, kiln_dims dims, bool keepdim, bool all) {
    const char *outer = kiln__op_scope_enter(name);
    kiln_tensor hit = all ? kiln_eq_scalar(t, 0.0) : kiln_ne_scalar(t, 0.0);
    kiln_tensor count = kiln_sum_dims(kiln_cast(hit, KILN_I32), dims, keepdim);
    kiln_tensor out = all ? kiln_eq_scalar(count, 0.0) : kiln_gt_scalar(count, 0.0);
    kiln__op_scope_leave(outer);
    return out;
}

kiln_tensor kiln_any(kiln_tensor t) { return any_all("kiln_any", t, KILN_ALL_DIMS, false, false); }
kiln_tensor kiln_all(kiln_tensor t) { return any_all("kiln_all", t, KILN_ALL_DIMS, false, true); }
kiln_tensor kiln_any_dims(kiln_tensor t, kiln_dims dims, bool keepdim) {
    return any_all("kiln_any_dims", t, dims, keepdim, false);
}
kiln_tensor kiln_all_dims(kiln_tensor t, kiln_dims dims, bool keepdim) {
    return any_all("kiln_all_dims", t, dims, keepdim, true);
}

/* torch.count_nonzero: the sum of the bools t != 0 (a sum of bools is i64). */
static kiln_tensor count_nonzero(const char *name, kiln_tensor t, kiln_dims dims, bool keepdim) {
    const char *outer = kiln__op_scope_enter(name);
    kiln_tensor out = kiln_sum_dims(kiln_ne_scalar(t, 0.0), dims, keepdim);
    kiln__op_scope_leave(outer);
    return out;
}

kiln_tensor kiln_count_nonzero(kiln_tensor t) { return count_nonzero("kiln_count_nonzero", t, KILN_ALL_DIMS, false); }
kiln_tensor kiln_count_nonzero_dims(kiln_tensor t, kiln_dims dims, bool keepdim) {
    return count_nonzero("kiln_count_nonzero_dims", t, dims, keepdim);
}

/* ---- softmax ----------------------------------------------------------------------------- */
static kiln_tensor softmax_op(const char *name, kiln__opcode code, kiln_tensor t, int dim) {
    KILN__OP_BEGIN(name);
    kiln__tensor *x = kiln__arg(&c, t);
    if (KILN__UNLIKELY(kiln__ad_active(1, &x))) return kiln__result(&c, kiln__ad_softmax(&c, code, x, dim));
    return kiln__result(&c, kiln__t_softmax(&c, code, x, dim));
}

/* One wrapper per KERNEL row of the row-op table (ir/row_table.h); each is a DIM row. */
#define ROW_WRAPPER(NAME, name, arity, dims, ...) ROW_WRAPPER_##dims(NAME, name)
#define ROW_WRAPPER_DIM(NAME, name) \
    kiln_tensor kiln_##name(kiln_tensor t, int dim) { return softmax_op("kiln_" #name, KILN__OP_##NAME, t, dim); }
KILN__ROW_KERNELS(ROW_WRAPPER)

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
