/* Views as kernels see them: an op record's operands, made from tensors or scalars. */
#include "ir/op.h"

#include <string.h>

kiln__view kiln__view_of(const kiln__tensor *t) {
    kiln__view v;
    kiln__view_set(&v, t);
    return v;
}

kiln__view kiln__view_scalar(kiln_dtype dtype, int ndim, const int64_t *shape, double value) {
    kiln__view v = {0};
    v.dtype = dtype;
    v.ndim = ndim;
    v.scalar = value;
    for (int d = 0; d < ndim; d++) v.shape[d] = shape[d];
    return v;
}

int64_t kiln__view_numel(const kiln__view *v) {
    int64_t n = 1;
    for (int d = 0; d < v->ndim; d++) n *= v->shape[d];
    return n;
}

bool kiln__view_is_contiguous(const kiln__view *v) {
    return v->storage && kiln__layout_is_contiguous(v->ndim, v->shape, v->strides);
}
