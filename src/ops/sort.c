/* sort, argsort and topk (src/api/shape.c): one SORT op writes values and i64 indices of the
 * first k of each line along dim. f16/bf16 sort in f32 and bool in i32; the values come back in
 * x's dtype. */
#include "kiln/tensor.h"
#include "ops/ops-impl.h"

kiln__tensor *kiln__t_sort(kiln__opctx *c, kiln__tensor *x, int dim, bool descending, int64_t k,
                           kiln__tensor **indices) {
    *indices = NULL;
    if (!kiln__ok(c, x)) return kiln__drop(1, x), NULL;
    if (x->ndim == 0 && (dim == 0 || dim == -1)) { /* as a 1-element line, as PyTorch does */
        kiln__tensor *v = kiln__t_sort(c, kiln__t_reshape(c, x, 1, (const int64_t[]){1}), 0, descending, k, indices);
        if (*indices) *indices = kiln__t_reshape(c, *indices, 0, NULL);
        return v ? kiln__t_reshape(c, v, 0, NULL) : NULL;
    }
    if (!kiln__norm_dim(c, &dim, x->ndim)) return kiln__drop(1, x), NULL;
    int64_t n = x->shape[dim];
    if (k < 0) k = n; /* sort: all of it */
    if (k > n) {
        kiln__drop(1, x);
        return kiln__fail(c, KILN_ERR_INVALID_ARGUMENT, "k = %lld is out of range for a dim of size %lld", (long long)k,
                          (long long)n);
    }
    kiln_dtype rd = x->dtype;
    kiln_dtype kd = rd == KILN_BOOL ? KILN_I32 : (rd == KILN_F16 || rd == KILN_BF16) ? KILN_F32 : rd;
    x = kiln__t_cast(c, x, kd);
    if (!x) return NULL;
    int64_t shape[KILN_MAX_DIMS];
    for (int d = 0; d < x->ndim; d++) shape[d] = d == dim ? k : x->shape[d];
    kiln_device dev = x->device;
    kiln__tensor *vals = kiln__t_empty(c, dev, kd, x->ndim, shape);
    kiln__tensor *idx = vals ? kiln__t_empty(c, dev, KILN_I64, x->ndim, shape) : NULL;
    if (idx) {
        kiln__op op;
        kiln__op_init(&op, KILN__OP_SORT, c->name);
        op.in[0] = kiln__view_of(x);
        op.out[0] = kiln__view_of(vals);
        op.out[1] = kiln__view_of(idx);
        op.n_in = 1;
        op.n_out = 2;
        op.p.i[0] = dim;
        op.p.i[1] = descending;
        op.p.i[2] = k;
        if (!kiln__t_submit(c, &op, dev)) kiln__drop(2, vals, idx), vals = idx = NULL;
    } else {
        kiln__drop(1, vals), vals = NULL;
    }
    kiln__tensor_release(x);
    *indices = idx;
    return vals && vals->dtype != rd ? kiln__t_cast(c, vals, rd) : vals;
}
