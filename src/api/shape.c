/* sort, argsort and topk (one SORT op; the values are differentiable), and shape ops composed from differentiable public ops (index_select, narrow + cat, expand +
 * reshape): flip, roll, repeat, tile (any and all are rows of the reduction table: api/reduce.c).
 * Each checks its own arguments under its public name, then runs its parts in that name's
 * scope, so an error inside names the op the caller called, at the caller's line. Gradients
 * come from the parts. */
#include <stdio.h>
#include <stdlib.h>

#include "kiln/tensor.h"
#include "autodiff/autodiff-impl.h"

/* Takes t and checks it is usable; NULL (and the error in c) otherwise. */
static kiln__tensor *take(kiln__opctx *c, kiln_tensor t) {
    kiln__tensor *x = kiln__arg(c, t);
    if (!kiln__ok(c, x)) return kiln__drop(1, x), NULL;
    return x;
}

kiln_tensor kiln_flip(kiln_tensor t, kiln_dims dims) {
    KILN__OP_BEGIN("kiln_flip");
    kiln__tensor *x = take(&c, t);
    if (!x) return kiln__result(&c, NULL);
    int ndim = x->ndim, d[KILN_MAX_DIMS];
    int64_t size[KILN_MAX_DIMS];
    kiln_device dev = x->device;
    if (dims.n < 0 || dims.n > ndim) {
        kiln__drop(1, x);
        return kiln__result(&c, kiln__fail(&c, KILN_ERR_INVALID_ARGUMENT, "flip of %d dims of a %d-d tensor", (int)dims.n, ndim));
    }
    uint32_t seen = 0;
    for (int i = 0; i < dims.n; i++) {
        d[i] = dims.d[i];
        if (!kiln__norm_dim(&c, &d[i], ndim)) return kiln__drop(1, x), kiln__result(&c, NULL);
        if (seen & (1u << d[i])) {
            kiln__drop(1, x);
            return kiln__result(&c, kiln__fail(&c, KILN_ERR_INVALID_ARGUMENT, "dim %d appears twice in flip's dims", d[i]));
        }
        seen |= 1u << d[i];
        size[i] = x->shape[d[i]];
    }
    kiln_tensor h = kiln__result(&c, x);
    const char *outer = kiln__op_scope_enter("kiln_flip");
    for (int i = 0; i < dims.n; i++)
        if (size[i] > 1) /* index n-1, ..., 0 */
            h = kiln_index_select(h, d[i], kiln_arange(dev, KILN_I64, (double)(size[i] - 1), -1.0, -1.0));
    kiln__op_scope_leave(outer);
    return h;
}

kiln_tensor kiln_roll(kiln_tensor t, int64_t shift, int dim) {
    KILN__OP_BEGIN("kiln_roll");
    kiln__tensor *x = take(&c, t);
    if (!x) return kiln__result(&c, NULL);
    if (!kiln__norm_dim(&c, &dim, x->ndim)) return kiln__drop(1, x), kiln__result(&c, NULL);
    int64_t n = x->shape[dim];
    int64_t s = n ? ((shift % n) + n) % n : 0; /* torch.roll: element i moves to (i + shift) mod n */
    kiln_tensor h = kiln__result(&c, x);
    if (s == 0) return h;
    const char *outer = kiln__op_scope_enter("kiln_roll");
    kiln_tensor parts[2] = {kiln_narrow(kiln_ref(h), dim, n - s, s), kiln_narrow(h, dim, 0, n - s)};
    h = kiln_cat(parts, 2, dim);
    kiln__op_scope_leave(outer);
    return h;
}

/* torch.Tensor.repeat: t's shape padded with leading 1s to reps.ndim dims, then each dim
 * repeated reps[i] times: one expand + copy per repeated dim. */
static kiln_tensor repeat(kiln__opctx *c, kiln_tensor t, kiln_shape reps, bool tile) {
    kiln__tensor *x = take(c, t);
    if (!x) return kiln__result(c, NULL);
    if (reps.ndim < 0 || reps.ndim > KILN_MAX_DIMS || (!tile && reps.ndim < x->ndim)) {
        int got = reps.ndim, have = x->ndim;
        kiln__drop(1, x);
        return kiln__result(c, kiln__fail(c, KILN_ERR_INVALID_ARGUMENT,
                                          "%d repeat counts for a %d-d tensor (at least as many needed, at most %d)", got,
                                          have, KILN_MAX_DIMS));
    }
    int nd = reps.ndim > x->ndim ? reps.ndim : x->ndim;
    int64_t r[KILN_MAX_DIMS], shape[KILN_MAX_DIMS];
    for (int i = 0; i < nd; i++) {
        int ri = i - (nd - reps.ndim), xi = i - (nd - x->ndim);
        r[i] = ri >= 0 ? reps.dims[ri] : 1; /* tile pads the counts with 1s, repeat the shape */
        shape[i] = xi >= 0 ? x->shape[xi] : 1;
        if (r[i] < 0) {
            kiln__drop(1, x);
            return kiln__result(c, kiln__fail(c, KILN_ERR_INVALID_ARGUMENT, "negative repeat count %lld", (long long)r[i]));
        }
    }
    kiln_tensor h = kiln__result(c, x);
    const char *outer = kiln__op_scope_enter(tile ? "kiln_tile" : "kiln_repeat");
    kiln_shape cur = {nd, {0}};
    for (int i = 0; i < nd; i++) cur.dims[i] = shape[i];
    h = kiln_reshape(h, cur);
    for (int i = 0; i < nd; i++) {
        if (r[i] == 1) continue;
        /* [.., s_i, ..] -> [.., 1, s_i, ..] -> [.., r_i, s_i, ..] -> [.., r_i * s_i, ..] */
        kiln_shape e = {nd + 1, {0}};
        for (int j = 0, k = 0; j < nd + 1; j++) e.dims[j] = j == i ? r[i] : cur.dims[k++];
        h = kiln_contiguous(kiln_expand(kiln_unsqueeze(h, i), e));
        cur.dims[i] *= r[i];
        h = kiln_reshape(h, cur);
    }
    kiln__op_scope_leave(outer);
    return h;
}

kiln_tensor kiln_repeat(kiln_tensor t, kiln_shape repeats) {
    KILN__OP_BEGIN("kiln_repeat");
    return repeat(&c, t, repeats, false);
}

kiln_tensor kiln_tile(kiln_tensor t, kiln_shape reps) {
    KILN__OP_BEGIN("kiln_tile");
    return repeat(&c, t, reps, true);
}

/* ---- pad ------------------------------------------------------------------------------------ */

/* Source index along a dim of size n for output position j (j < 0 left of the input). */
static int64_t pad_source(int64_t j, int64_t n, kiln_pad_mode mode) {
    if (mode == KILN_PAD_REPLICATE) return j < 0 ? 0 : j >= n ? n - 1 : j;
    return j < 0 ? -j : j >= n ? 2 * (n - 1) - j : j; /* reflect: the edge itself is not repeated */
}

/* One dim: constant mode concatenates filled blocks (or narrows, for negative pads);
 * reflect and replicate gather through an index, so the gradient flows back through it. */
static kiln_tensor pad_dim(kiln_tensor h, int dim, int64_t left, int64_t right, kiln_pad_mode mode, double value,
                           kiln_shape shape, kiln_dtype dtype, kiln_device dev, int64_t *index) {
    int64_t n = shape.dims[dim];
    if (mode == KILN_PAD_CONSTANT) {
        if (left < 0) h = kiln_narrow(h, dim, -left, n + left), n += left, left = 0;
        if (right < 0) h = kiln_narrow(h, dim, 0, n + right), n += right, right = 0;
        kiln_tensor parts[3];
        int k = 0;
        kiln_shape block = shape;
        block.dims[dim] = left;
        if (left) parts[k++] = kiln_full(dev, dtype, block, value);
        parts[k++] = h;
        block.dims[dim] = right;
        if (right) parts[k++] = kiln_full(dev, dtype, block, value);
        return k == 1 ? h : kiln_cat(parts, k, dim);
    }
    int64_t m = left + n + right;
    for (int64_t j = 0; j < m; j++) index[j] = pad_source(j - left, n, mode);
    return kiln_index_select(h, dim, kiln_from_data(dev, KILN_I64, KILN_SHAPE(m), index));
}

kiln_tensor kiln_pad(kiln_tensor t, kiln_shape pads, kiln_pad_mode mode, double value) {
    KILN__OP_BEGIN("kiln_pad");
    kiln__tensor *x = take(&c, t);
    if (!x) return kiln__result(&c, NULL);
    int nd = x->ndim, np = pads.ndim;
    kiln_shape shape = {nd, {0}};
    for (int d = 0; d < nd; d++) shape.dims[d] = x->shape[d];
    kiln_dtype dtype = x->dtype;
    kiln_device dev = x->device;
    const char *bad = NULL;
    char msg[160];
    if (mode != KILN_PAD_CONSTANT && mode != KILN_PAD_REFLECT && mode != KILN_PAD_REPLICATE) {
        bad = "mode";
        snprintf(msg, sizeof msg, "unknown pad mode %d", (int)mode);
    } else if (np < 0 || np % 2 || np / 2 > nd) {
        bad = "pads";
        snprintf(msg, sizeof msg, "%d pad sizes for a %d-d tensor: (left, right) pairs for at most every dim", np, nd);
    }
    for (int i = 0; !bad && i < np; i++) {
        int dim = nd - 1 - i / 2;
        int64_t p = pads.dims[i], n = shape.dims[dim];
        if (mode == KILN_PAD_CONSTANT ? n + p < 0 || n + pads.dims[i ^ 1] + p < 0
                                      : p < 0 || (mode == KILN_PAD_REFLECT ? p >= n : n == 0 && p > 0)) {
            bad = "pads";
            snprintf(msg, sizeof msg, "pad %lld does not fit dim %d of size %lld in %s mode", (long long)p, dim,
                     (long long)n, mode == KILN_PAD_CONSTANT ? "constant" : mode == KILN_PAD_REFLECT ? "reflect" : "replicate");
        }
    }
    int64_t longest = 1; /* the index of reflect / replicate, for the longest padded dim */
    for (int i = 0; !bad && mode != KILN_PAD_CONSTANT && i + 1 < np; i += 2) {
        int64_t m = shape.dims[nd - 1 - i / 2] + pads.dims[i] + pads.dims[i + 1];
        longest = m > longest ? m : longest;
    }
    int64_t *index = bad ? NULL : malloc(sizeof(int64_t) * (size_t)longest);
    if (bad || !index) {
        kiln__drop(1, x);
        if (!bad) return kiln__result(&c, kiln__fail(&c, KILN_ERR_OUT_OF_MEMORY, "no memory for a pad index of %lld", (long long)longest));
        return kiln__result(&c, kiln__fail(&c, KILN_ERR_INVALID_ARGUMENT, "%s", msg));
    }
    kiln_tensor h = kiln__result(&c, x);
    const char *outer = kiln__op_scope_enter("kiln_pad");
    for (int i = 0; i + 1 < np; i += 2) { /* PyTorch's order: the last dim first */
        int dim = nd - 1 - i / 2;
        h = pad_dim(h, dim, pads.dims[i], pads.dims[i + 1], mode, value, shape, dtype, dev, index);
        shape.dims[dim] += pads.dims[i] + pads.dims[i + 1];
    }
    kiln__op_scope_leave(outer);
    free(index);
    return h;
}

/* ---- sort, argsort, topk --------------------------------------------------------------------- */

/* The values; *indices (if not NULL) the i64 indices, or another handle to the poisoned values
 * when the op failed. */
static kiln_tensor sort_op(kiln__opctx *c, kiln_tensor t, int dim, bool descending, int64_t k, kiln_tensor *indices,
                           bool track) {
    kiln__tensor *x = kiln__arg(c, t), *idx = NULL, *values;
    if (track && KILN__UNLIKELY(kiln__ad_active(1, &x)))
        values = kiln__ad_sort(c, x, dim, descending, k, &idx);
    else
        values = kiln__t_sort(c, x, dim, descending, k, &idx);
    if (!values) kiln__drop(1, idx), idx = NULL;
    const char *name = c->name;
    kiln_tensor v = kiln__result(c, values);
    if (!indices) {
        kiln__drop(1, idx);
    } else if (!idx) {
        *indices = kiln_ref(v);
    } else {
        kiln__opctx ci = {.name = name, .err = NULL};
        *indices = kiln__result(&ci, idx);
    }
    return v;
}

kiln_tensor kiln_sort(kiln_tensor t, int dim, bool descending, kiln_tensor *indices) {
    KILN__OP_BEGIN("kiln_sort");
    return sort_op(&c, t, dim, descending, -1, indices, true);
}

kiln_tensor kiln_argsort(kiln_tensor t, int dim, bool descending) {
    KILN__OP_BEGIN("kiln_argsort");
    kiln_tensor idx;
    kiln_release(sort_op(&c, t, dim, descending, -1, &idx, false));
    return idx;
}

kiln_tensor kiln_topk(kiln_tensor t, int64_t k, int dim, bool largest, kiln_tensor *indices) {
    KILN__OP_BEGIN("kiln_topk");
    if (k < 0) {
        kiln__drop(1, kiln__arg(&c, t));
        kiln_tensor v = kiln__result(&c, kiln__fail(&c, KILN_ERR_INVALID_ARGUMENT, "k = %lld must not be negative", (long long)k));
        if (indices) *indices = kiln_ref(v);
        return v;
    }
    return sort_op(&c, t, dim, largest, k, indices, true);
}
