/* View ops: new shape/strides/offset over the same storage. reshape copies only when the
 * layout cannot be expressed as a view. */
#include <string.h>

#include "kiln/tensor.h"
#include "ops/ops-impl.h"

static kiln__tensor *make_view(kiln__opctx *c, kiln__tensor *x, int ndim, const int64_t *shape,
                               const int64_t *strides, int64_t offset) {
    kiln__tensor *v = kiln__tensor_view(x, ndim, shape, strides, offset);
    kiln__tensor_release(x);
    if (!v) kiln__fail(c, KILN_ERR_OUT_OF_MEMORY, "cannot allocate a view");
    return v;
}

/* Strides that let `x` be seen with `shape` without copying, if any (PyTorch's rule: each
 * run of x's dims that is contiguous in memory may be re-split freely). */
static bool view_strides(const kiln__tensor *x, int ndim, const int64_t *shape, int64_t *out) {
    if (kiln__tensor_numel(x) == 0) {
        kiln__dense_strides(ndim, shape, out);
        return true;
    }
    int64_t old_n = x->ndim;
    int view_d = ndim - 1;
    int64_t chunk_base = old_n ? x->strides[old_n - 1] : 1;
    int64_t tensor_numel = 1, view_numel = 1;
    for (int64_t d = old_n - 1; d >= 0; d--) {
        int64_t span;
        if (__builtin_mul_overflow(tensor_numel, x->shape[d], &tensor_numel)) return false;
        bool chunk_end = d == 0 || (x->shape[d - 1] != 1 && (__builtin_mul_overflow(tensor_numel, chunk_base, &span) ||
                                                              x->strides[d - 1] != span));
        if (chunk_end) {
            while (view_d >= 0 && (view_numel < tensor_numel || shape[view_d] == 1)) {
                if (__builtin_mul_overflow(view_numel, chunk_base, &out[view_d]) ||
                    __builtin_mul_overflow(view_numel, shape[view_d], &view_numel))
                    return false;
                view_d--;
            }
            if (view_numel != tensor_numel) return false;
            if (d > 0) {
                chunk_base = x->strides[d - 1];
                tensor_numel = 1;
                view_numel = 1;
            }
        }
    }
    return view_d == -1;
}

kiln__tensor *kiln__t_reshape(kiln__opctx *c, kiln__tensor *x, int ndim, const int64_t *shape_in) {
    if (!kiln__ok(c, x)) return kiln__drop(1, x), NULL;
    if (ndim < 0 || ndim > KILN_MAX_DIMS) {
        kiln__drop(1, x);
        return kiln__fail(c, KILN_ERR_SHAPE, "shape has %d dims (0..%d allowed)", ndim, KILN_MAX_DIMS);
    }
    int64_t shape[KILN_MAX_DIMS];
    int infer = -1;
    int64_t known = 1, numel = kiln__tensor_numel(x);
    for (int d = 0; d < ndim; d++) {
        shape[d] = shape_in[d];
        if (shape[d] == -1 && infer < 0) {
            infer = d;
        } else if (shape[d] < 0) {
            kiln__drop(1, x);
            return kiln__fail(c, KILN_ERR_SHAPE, "invalid size %lld in dim %d", (long long)shape[d], d);
        } else if (__builtin_mul_overflow(known, shape[d], &known)) {
            char buf[128];
            kiln__drop(1, x);
            return kiln__fail(c, KILN_ERR_SHAPE, "shape %s has more elements than int64 can count",
                              kiln__shape_str(buf, sizeof buf, ndim, shape_in));
        }
    }
    if (infer >= 0) {
        if (known == 0 || numel % known != 0) {
            char buf[128];
            kiln__drop(1, x);
            return kiln__fail(c, KILN_ERR_SHAPE, "cannot infer -1 in shape %s for %lld elements",
                              kiln__shape_str(buf, sizeof buf, ndim, shape_in), (long long)numel);
        }
        shape[infer] = numel / known;
        known *= shape[infer];
    }
    if (known != numel) {
        char a[128], b[128];
        kiln__fail(c, KILN_ERR_SHAPE, "cannot reshape %s (%lld elements) to %s", kiln__shape_str(a, sizeof a, x->ndim, x->shape),
                   (long long)numel, kiln__shape_str(b, sizeof b, ndim, shape));
        kiln__drop(1, x);
        return NULL;
    }
    if (!kiln__check_dims(c, ndim, shape)) return kiln__drop(1, x), NULL; /* [0, 2^62, 2^62]: no strides fit */
    int64_t strides[KILN_MAX_DIMS];
    if (!view_strides(x, ndim, shape, strides)) {
        x = kiln__t_contiguous(c, x);
        if (!x) return NULL;
        kiln__dense_strides(ndim, shape, strides);
    }
    return make_view(c, x, ndim, shape, strides, x->offset);
}

kiln__tensor *kiln__t_permute(kiln__opctx *c, kiln__tensor *x, int ndim, const int *order) {
    if (!kiln__ok(c, x)) return kiln__drop(1, x), NULL;
    if (ndim != x->ndim) {
        kiln__fail(c, KILN_ERR_SHAPE, "permutation has %d dims, tensor has %d", ndim, x->ndim);
        return kiln__drop(1, x), NULL;
    }
    int64_t shape[KILN_MAX_DIMS], strides[KILN_MAX_DIMS];
    bool seen[KILN_MAX_DIMS] = {false};
    for (int d = 0; d < ndim; d++) {
        int s = order[d];
        if (!kiln__norm_dim(c, &s, ndim) || seen[s]) {
            kiln__drop(1, x);
            return kiln__fail(c, KILN_ERR_INVALID_ARGUMENT, "dims must be a permutation of 0..%d", ndim - 1);
        }
        seen[s] = true;
        shape[d] = x->shape[s];
        strides[d] = x->strides[s];
    }
    return make_view(c, x, ndim, shape, strides, x->offset);
}

kiln__tensor *kiln__t_transpose(kiln__opctx *c, kiln__tensor *x, int d0, int d1) {
    if (!kiln__ok(c, x)) return kiln__drop(1, x), NULL;
    if (!kiln__norm_dim(c, &d0, x->ndim) || !kiln__norm_dim(c, &d1, x->ndim)) return kiln__drop(1, x), NULL;
    int order[KILN_MAX_DIMS];
    for (int d = 0; d < x->ndim; d++) order[d] = d;
    order[d0] = d1;
    order[d1] = d0;
    if (x->ndim == 0) return x;
    return kiln__t_permute(c, x, x->ndim, order);
}

kiln__tensor *kiln__t_slice(kiln__opctx *c, kiln__tensor *x, int dim, int64_t start, int64_t end, int64_t step) {
    if (!kiln__ok(c, x)) return kiln__drop(1, x), NULL;
    if (x->ndim == 0) {
        kiln__drop(1, x);
        return kiln__fail(c, KILN_ERR_SHAPE, "cannot slice a 0-d tensor");
    }
    if (!kiln__norm_dim(c, &dim, x->ndim)) return kiln__drop(1, x), NULL;
    if (step <= 0) {
        kiln__drop(1, x);
        return kiln__fail(c, KILN_ERR_INVALID_ARGUMENT, "slice step must be positive, got %lld", (long long)step);
    }
    int64_t n = x->shape[dim];
    if (start < 0) start += n;
    if (end < 0) end += n;
    if (start < 0) start = 0;
    if (end > n) end = n;
    if (start > n) start = n;
    if (end < start) end = start;
    int64_t shape[KILN_MAX_DIMS], strides[KILN_MAX_DIMS];
    memcpy(shape, x->shape, sizeof shape);
    memcpy(strides, x->strides, sizeof strides);
    int64_t len = end - start; /* 0..n */
    shape[dim] = len ? (len - 1) / step + 1 : 0;
    /* a step past the end leaves one element, whose stride is never used */
    if (shape[dim] > 1 && __builtin_mul_overflow(x->strides[dim], step, &strides[dim])) {
        kiln__drop(1, x);
        return kiln__fail(c, KILN_ERR_INVALID_ARGUMENT, "slice step %lld is too large", (long long)step);
    }
    int64_t offset = x->offset + (shape[dim] ? start * x->strides[dim] : 0); /* start < n: inside x */
    return make_view(c, x, x->ndim, shape, strides, offset);
}

kiln__tensor *kiln__t_expand(kiln__opctx *c, kiln__tensor *x, int ndim, const int64_t *target) {
    if (!kiln__ok(c, x)) return kiln__drop(1, x), NULL;
    if (ndim < x->ndim || ndim > KILN_MAX_DIMS) {
        kiln__fail(c, KILN_ERR_SHAPE, "cannot expand a %d-d tensor to %d dims", x->ndim, ndim);
        return kiln__drop(1, x), NULL;
    }
    int64_t shape[KILN_MAX_DIMS], strides[KILN_MAX_DIMS];
    int lead = ndim - x->ndim;
    for (int d = 0; d < ndim; d++) {
        int s = d - lead;
        int64_t have = s >= 0 ? x->shape[s] : 1;
        int64_t want = target[d] == -1 ? have : target[d];
        if (s < 0 && target[d] == -1) {
            kiln__drop(1, x);
            return kiln__fail(c, KILN_ERR_SHAPE, "-1 is not allowed for new leading dim %d", d);
        }
        if (have != want && have != 1) {
            char a[128], b[128];
            kiln__fail(c, KILN_ERR_SHAPE, "cannot expand %s to %s", kiln__shape_str(a, sizeof a, x->ndim, x->shape),
                       kiln__shape_str(b, sizeof b, ndim, target));
            kiln__drop(1, x);
            return NULL;
        }
        shape[d] = want;
        strides[d] = (s >= 0 && have == want) ? x->strides[s] : 0;
    }
    if (!kiln__check_dims(c, ndim, shape)) return kiln__drop(1, x), NULL;
    return make_view(c, x, ndim, shape, strides, x->offset);
}

kiln__tensor *kiln__t_unsqueeze(kiln__opctx *c, kiln__tensor *x, int dim) {
    if (!kiln__ok(c, x)) return kiln__drop(1, x), NULL;
    if (x->ndim >= KILN_MAX_DIMS) {
        kiln__drop(1, x);
        return kiln__fail(c, KILN_ERR_SHAPE, "tensor already has %d dims", KILN_MAX_DIMS);
    }
    if (!kiln__norm_dim(c, &dim, x->ndim + 1)) return kiln__drop(1, x), NULL;
    int64_t shape[KILN_MAX_DIMS], strides[KILN_MAX_DIMS];
    for (int d = 0, s = 0; d <= x->ndim; d++) {
        if (d == dim) {
            shape[d] = 1;
            /* any stride works for a size-1 dim; this one keeps a contiguous x contiguous */
            if (s >= x->ndim || __builtin_mul_overflow(x->strides[s], x->shape[s], &strides[d])) strides[d] = 1;
        } else {
            shape[d] = x->shape[s];
            strides[d] = x->strides[s];
            s++;
        }
    }
    return make_view(c, x, x->ndim + 1, shape, strides, x->offset);
}

kiln__tensor *kiln__t_squeeze(kiln__opctx *c, kiln__tensor *x, int dim) {
    if (!kiln__ok(c, x)) return kiln__drop(1, x), NULL;
    if (!kiln__norm_dim(c, &dim, x->ndim)) return kiln__drop(1, x), NULL;
    if (x->ndim == 0) return x;
    if (x->shape[dim] != 1) {
        kiln__fail(c, KILN_ERR_SHAPE, "cannot squeeze dim %d of size %lld", dim, (long long)x->shape[dim]);
        kiln__drop(1, x);
        return NULL;
    }
    int64_t shape[KILN_MAX_DIMS], strides[KILN_MAX_DIMS];
    for (int d = 0, o = 0; d < x->ndim; d++) {
        if (d == dim) continue;
        shape[o] = x->shape[d];
        strides[o++] = x->strides[d];
    }
    return make_view(c, x, x->ndim - 1, shape, strides, x->offset);
}

bool kiln__narrow_range(kiln__opctx *c, kiln__tensor *x, int *dim, int64_t *start, int64_t length) {
    if (!kiln__ok(c, x) || !kiln__norm_dim(c, dim, x->ndim)) return false;
    if (x->ndim == 0) return kiln__fail(c, KILN_ERR_SHAPE, "cannot slice a 0-d tensor"), false;
    int64_t n = x->shape[*dim];
    if (*start < 0) *start += n; /* start < 0 <= n: cannot overflow */
    if (*start < 0 || *start > n || length < 0 || length > n - *start) {
        kiln__fail(c, KILN_ERR_INDEX, "narrow of length %lld at %lld out of range for dim %d of size %lld",
                   (long long)length, (long long)*start, *dim, (long long)n);
        return false;
    }
    return true;
}

kiln__tensor *kiln__t_flatten(kiln__opctx *c, kiln__tensor *x, int start_dim, int end_dim) {
    if (!kiln__ok(c, x)) return kiln__drop(1, x), NULL;
    if (x->ndim == 0) return kiln__t_reshape(c, x, 1, (int64_t[]){1});
    if (!kiln__norm_dim(c, &start_dim, x->ndim) || !kiln__norm_dim(c, &end_dim, x->ndim) || start_dim > end_dim) {
        kiln__drop(1, x);
        return kiln__fail(c, KILN_ERR_INVALID_ARGUMENT, "invalid flatten range");
    }
    int64_t shape[KILN_MAX_DIMS];
    int nd = 0;
    for (int d = 0; d < start_dim; d++) shape[nd++] = x->shape[d];
    int64_t merged = 1;
    for (int d = start_dim; d <= end_dim; d++) merged *= x->shape[d];
    shape[nd++] = merged;
    for (int d = end_dim + 1; d < x->ndim; d++) shape[nd++] = x->shape[d];
    return kiln__t_reshape(c, x, nd, shape);
}
