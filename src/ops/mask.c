/* Masked fills: masked_fill (a bool mask broadcast to x) and tril/triu (a triangle of the last
 * two dims). Each is one WHERE pass over x whose fill value is a scalar operand (no tensor for
 * it), in place when x has a single owner; the result always has x's shape and dtype. tril/triu
 * first build their [rows, cols] triangle from two index ranges and one comparison. */
#include <math.h>
#include <string.h>

#include "kiln/tensor.h"
#include "ops/ops-impl.h"

/* The fill value must fit x's dtype, as PyTorch requires (2^40 into an i32 is an error, not a
 * silently saturated value); floats and bools take any value (a bool takes value != 0). */
static bool value_fits(kiln__opctx *c, kiln_dtype dtype, double value) {
    bool fits;
    if (dtype == KILN_I32)
        fits = value >= (double)INT32_MIN && value <= (double)INT32_MAX;
    else if (dtype == KILN_I64)
        fits = value >= -0x1p63 && value < 0x1p63;
    else
        return true;
    if (!fits) kiln__fail(c, KILN_ERR_INVALID_ARGUMENT, "value %g cannot be converted to %s without overflow", value, kiln_dtype_name(dtype));
    return fits;
}

/* out = mask ? value : x (fill_where_true) or mask ? x : value. mask is bool and broadcasts to
 * x's shape without growing it. Consumes x and mask. */
static kiln__tensor *select_fill(kiln__opctx *c, kiln__tensor *x, kiln__tensor *mask, double value, bool fill_where_true) {
    if (!kiln__ok(c, x) || !kiln__ok(c, mask) || !kiln__same_device(c, x, mask)) return kiln__drop(2, x, mask), NULL;
    if (mask->dtype != KILN_BOOL) {
        kiln__fail(c, KILN_ERR_DTYPE, "mask must be bool, got %s", kiln_dtype_name(mask->dtype));
        return kiln__drop(2, x, mask), NULL;
    }
    int nd;
    int64_t shape[KILN_MAX_DIMS];
    if (!kiln__broadcast_shapes(c, mask->ndim, mask->shape, x->ndim, x->shape, &nd, shape))
        return kiln__drop(2, x, mask), NULL;
    if (nd != x->ndim || memcmp(shape, x->shape, sizeof(int64_t) * (size_t)nd) != 0) {
        char sm[128], sx[128];
        kiln__fail(c, KILN_ERR_SHAPE, "mask of shape %s cannot be broadcast to the input's shape %s",
                   kiln__shape_str(sm, sizeof sm, mask->ndim, mask->shape), kiln__shape_str(sx, sizeof sx, x->ndim, x->shape));
        return kiln__drop(2, x, mask), NULL;
    }
    if (!value_fits(c, x->dtype, value)) return kiln__drop(2, x, mask), NULL;
    kiln_device dev = x->device;
    kiln__tensor *out = kiln__t_output(c, dev, x->dtype, x->ndim, x->shape, &x, 1);
    if (out) {
        kiln__op op;
        kiln__op_init(&op, KILN__OP_WHERE, c->name);
        kiln__view fill = kiln__view_scalar(x->dtype, x->ndim, x->shape, value);
        op.in[0] = kiln__view_broadcast(mask, x->ndim, x->shape);
        op.in[1] = fill_where_true ? fill : kiln__view_of(x);
        op.in[2] = fill_where_true ? kiln__view_of(x) : fill;
        op.out[0] = kiln__view_of(out);
        op.n_in = 3;
        op.n_out = 1;
        if (!kiln__t_submit(c, &op, dev)) kiln__tensor_release(out), out = NULL;
    }
    kiln__drop(2, x, mask);
    return out;
}

kiln__tensor *kiln__t_masked_fill(kiln__opctx *c, kiln__tensor *x, kiln__tensor *mask, double value) {
    return select_fill(c, x, mask, value, true);
}

/* start, start + 1, ... (i64) as a column [n, 1] or a row [1, n]. */
static kiln__tensor *index_line(kiln__opctx *c, kiln_device dev, int64_t n, int64_t start, bool row) {
    int64_t shape[2] = {row ? 1 : n, row ? n : 1};
    kiln__tensor *t = kiln__t_empty(c, dev, KILN_I64, 2, shape);
    if (!t) return NULL;
    kiln__op op;
    kiln__op_init(&op, KILN__OP_ARANGE, c->name);
    op.out[0] = kiln__view_of(t);
    op.out[0].ndim = 1; /* the kernel fills a 1-d run; both layouts are one dense run */
    op.out[0].shape[0] = n;
    op.out[0].strides[0] = 1;
    op.n_out = 1;
    op.p.f[0] = (double)start;
    op.p.f[1] = 1.0;
    if (!kiln__t_submit(c, &op, dev)) return kiln__drop(1, t), NULL;
    return t;
}

kiln__tensor *kiln__t_tri(kiln__opctx *c, kiln__tensor *x, int64_t diagonal, bool upper) {
    if (!kiln__ok(c, x)) return kiln__drop(1, x), NULL;
    if (x->ndim < 2) {
        kiln__fail(c, KILN_ERR_SHAPE, "needs a tensor of at least 2 dims (a matrix or a batch of them), got %d-d", x->ndim);
        return kiln__drop(1, x), NULL;
    }
    int64_t rows = x->shape[x->ndim - 2], cols = x->shape[x->ndim - 1];
    if (rows == 0 || cols == 0) return x;
    /* past either corner the triangle is all or nothing: clamping keeps every index exact */
    if (diagonal > cols) diagonal = cols;
    if (diagonal < -rows) diagonal = -rows;
    /* keep (i, j) when j - i <= diagonal (tril) or >= diagonal (triu): compare j - diagonal with i */
    kiln__tensor *i = index_line(c, x->device, rows, 0, false);
    kiln__tensor *j = i ? index_line(c, x->device, cols, -diagonal, true) : NULL;
    kiln__tensor *keep = kiln__t_binary(c, upper ? KILN__OP_GE : KILN__OP_LE, j, i);
    if (!keep) return kiln__drop(1, x), NULL;
    return select_fill(c, x, keep, 0.0, false);
}
