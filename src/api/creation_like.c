/* Tensors made from another tensor (PyTorch's *_like and clone), meshgrid and unfold. The
 * *_like ops read only t's metadata; clone copies into a storage of its own (a tracked input
 * goes through a differentiable identity); meshgrid and unfold are composed from
 * differentiable public ops (reshape + expand; index_select + reshape + permute) in their own
 * name's scope, so errors inside name the op the caller called. */
#include <stdlib.h>

#include "kiln/tensor.h"
#include "autodiff/autodiff-impl.h"

/* ---- *_like ------------------------------------------------------------------------------- */

typedef struct {
    kiln_device dev;
    kiln_dtype dtype;
    kiln_shape shape;
} like_meta;

/* Takes t; its metadata in *m, or false with c's error (t's own when t is poisoned). */
static bool like_of(kiln__opctx *c, kiln_tensor t, like_meta *m) {
    kiln__tensor *x = kiln__arg(c, t);
    if (!kiln__ok(c, x)) return kiln__drop(1, x), false;
    m->dev = x->device;
    m->dtype = x->dtype;
    m->shape.ndim = x->ndim;
    for (int d = 0; d < x->ndim; d++) m->shape.dims[d] = x->shape[d];
    kiln__tensor_release(x);
    return true;
}

kiln_tensor kiln_empty_like(kiln_tensor t) {
    KILN__OP_BEGIN("kiln_empty_like");
    like_meta m;
    if (!like_of(&c, t, &m)) return kiln__result(&c, NULL);
    return kiln__result(&c, kiln__t_empty(&c, m.dev, m.dtype, m.shape.ndim, m.shape.dims));
}

static kiln_tensor fill_like(const char *name, kiln_tensor t, double value) {
    KILN__OP_BEGIN(name);
    like_meta m;
    if (!like_of(&c, t, &m)) return kiln__result(&c, NULL);
    return kiln__result(&c, kiln__t_fill(&c, m.dev, m.dtype, m.shape.ndim, m.shape.dims, value));
}

kiln_tensor kiln_zeros_like(kiln_tensor t) { return fill_like("kiln_zeros_like", t, 0.0); }
kiln_tensor kiln_ones_like(kiln_tensor t) { return fill_like("kiln_ones_like", t, 1.0); }
kiln_tensor kiln_full_like(kiln_tensor t, double value) { return fill_like("kiln_full_like", t, value); }

static kiln_tensor random_like(const char *name, kiln_tensor t, uint64_t seed, bool normal) {
    KILN__OP_BEGIN(name);
    like_meta m;
    if (!like_of(&c, t, &m)) return kiln__result(&c, NULL);
    const char *outer = kiln__op_scope_enter(name);
    kiln_tensor out = normal ? kiln_randn(m.dev, m.dtype, m.shape, seed) : kiln_rand(m.dev, m.dtype, m.shape, seed);
    kiln__op_scope_leave(outer);
    return out;
}

kiln_tensor kiln_rand_like(kiln_tensor t, uint64_t seed) { return random_like("kiln_rand_like", t, seed, false); }
kiln_tensor kiln_randn_like(kiln_tensor t, uint64_t seed) { return random_like("kiln_randn_like", t, seed, true); }

/* ---- clone ---------------------------------------------------------------------------------- */

kiln_tensor kiln_clone(kiln_tensor t) {
    KILN__OP_BEGIN("kiln_clone");
    kiln__tensor *x = kiln__arg(&c, t);
    if (!kiln__ok(&c, x)) return kiln__drop(1, x), kiln__result(&c, NULL);
    if (KILN__UNLIKELY(kiln__ad_active(1, &x))) {
        /* x * 1 is exact (NaN, -0 and infinities too) and differentiable; its output is a new
         * buffer unless x's storage has no other owner, when nobody could tell the difference */
        kiln_tensor h = kiln__result(&c, x);
        const char *outer = kiln__op_scope_enter("kiln_clone");
        h = kiln_mul_scalar(h, 1.0);
        kiln__op_scope_leave(outer);
        return h;
    }
    kiln__tensor *out = kiln__t_empty(&c, x->device, x->dtype, x->ndim, x->shape);
    if (out && !kiln__t_copy_into(&c, kiln__view_of(out), x)) kiln__tensor_release(out), out = NULL;
    kiln__tensor_release(x);
    return kiln__result(&c, out);
}

/* ---- meshgrid ------------------------------------------------------------------------------- */

/* Every out slot below min(n, cap) gets a handle to c's error; returns that count. */
static int meshgrid_fail(kiln__opctx *c, int n, kiln_tensor *out, int cap) {
    int k = n < cap ? n : cap;
    if (k < 1) k = 1;
    out[0] = kiln__result(c, NULL);
    for (int i = 1; i < k; i++) out[i] = kiln_ref(out[0]);
    return k;
}

int kiln_meshgrid(const kiln_tensor *ts, int n, kiln_meshgrid_indexing indexing, kiln_tensor *out, int cap) {
    KILN__OP_BEGIN("kiln_meshgrid");
    if (!out || cap < 1) {
        for (int i = 0; ts && i < n && i < KILN_MAX_DIMS; i++) kiln_release(ts[i]);
        kiln__fail(&c, out ? KILN_ERR_INVALID_ARGUMENT : KILN_ERR_NULL, "out is %s", !out ? "NULL" : "empty (cap < 1)");
        kiln__error_report(c.err); /* no room for a poisoned result: reported, delivered */
        kiln__error_unref(c.err);
        return 0;
    }
    if (!ts || n < 1 || n > KILN_MAX_DIMS || cap < n || (indexing != KILN_MESHGRID_IJ && indexing != KILN_MESHGRID_XY)) {
        if (!ts) kiln__fail(&c, KILN_ERR_NULL, "ts is NULL");
        else if (n < 1 || n > KILN_MAX_DIMS) kiln__fail(&c, KILN_ERR_INVALID_ARGUMENT, "%d tensors: expected 1 to %d", n, KILN_MAX_DIMS);
        else if (cap < n) kiln__fail(&c, KILN_ERR_INVALID_ARGUMENT, "out holds %d tensors, %d needed", cap, n);
        else kiln__fail(&c, KILN_ERR_INVALID_ARGUMENT, "indexing %d is neither IJ nor XY", (int)indexing);
        for (int i = 0; ts && i < n && i < KILN_MAX_DIMS; i++) kiln_release(ts[i]);
        return meshgrid_fail(&c, n, out, cap);
    }
    kiln__tensor *x[KILN_MAX_DIMS];
    for (int i = 0; i < n; i++) x[i] = kiln__arg(&c, ts[i]); /* every handle taken, in order */
    kiln_shape full = {n, {0}};
    for (int i = 0; i < n && !c.err; i++) {
        if (!kiln__ok(&c, x[i])) break;
        if (x[i]->ndim > 1) {
            kiln__fail(&c, KILN_ERR_SHAPE, "tensor %d is %d-d: meshgrid takes 1-d (or 0-d) tensors", i, x[i]->ndim);
        } else if (x[i]->dtype != x[0]->dtype) {
            kiln__fail(&c, KILN_ERR_DTYPE, "tensor %d is %s, tensor 0 %s: meshgrid takes one dtype", i,
                       kiln_dtype_name(x[i]->dtype), kiln_dtype_name(x[0]->dtype));
        } else if (kiln__same_device(&c, x[0], x[i])) {
            int at = indexing == KILN_MESHGRID_XY && n >= 2 && i < 2 ? 1 - i : i;
            full.dims[at] = x[i]->ndim ? x[i]->shape[0] : 1;
        }
    }
    if (c.err) {
        for (int i = 0; i < n; i++) kiln__tensor_release(x[i]);
        return meshgrid_fail(&c, n, out, cap);
    }
    kiln_tensor h[KILN_MAX_DIMS];
    for (int i = 0; i < n; i++) {
        kiln__opctx ci = {.name = c.name, .err = NULL};
        h[i] = kiln__result(&ci, x[i]);
    }
    const char *outer = kiln__op_scope_enter("kiln_meshgrid");
    for (int i = 0; i < n; i++) {
        int at = indexing == KILN_MESHGRID_XY && n >= 2 && i < 2 ? 1 - i : i;
        kiln_shape one = {n, {0}};
        for (int d = 0; d < n; d++) one.dims[d] = d == at ? full.dims[at] : 1;
        out[i] = kiln_expand(kiln_reshape(h[i], one), full);
    }
    kiln__op_scope_leave(outer);
    return n;
}

/* ---- unfold ---------------------------------------------------------------------------------- */

kiln_tensor kiln_unfold(kiln_tensor t, int dim, int64_t size, int64_t step) {
    KILN__OP_BEGIN("kiln_unfold");
    kiln__tensor *x = kiln__arg(&c, t);
    if (!kiln__ok(&c, x)) return kiln__drop(1, x), kiln__result(&c, NULL);
    int nd = x->ndim;
    if (nd < 1 || nd >= KILN_MAX_DIMS) {
        kiln__drop(1, x);
        return kiln__result(&c, kiln__fail(&c, KILN_ERR_SHAPE, "unfold of a %d-d tensor: 1 to %d dims", nd, KILN_MAX_DIMS - 1));
    }
    if (!kiln__norm_dim(&c, &dim, nd)) return kiln__drop(1, x), kiln__result(&c, NULL);
    int64_t len = x->shape[dim];
    if (size < 0 || size > len || step < 1) {
        kiln__drop(1, x);
        return kiln__result(&c, kiln__fail(&c, KILN_ERR_INVALID_ARGUMENT,
                                           "size %lld and step %lld along dim %d of size %lld: need 0 <= size <= %lld, step >= 1",
                                           (long long)size, (long long)step, dim, (long long)len, (long long)len));
    }
    int64_t windows = (len - size) / step + 1, total;
    int64_t *idx = NULL;
    if (__builtin_mul_overflow(windows, size, &total) || total > KILN__MAX_NUMEL / (len ? len : 1))
        kiln__fail(&c, KILN_ERR_OUT_OF_MEMORY, "%lld windows of %lld elements are too many", (long long)windows,
                   (long long)size);
    else if (!(idx = malloc(sizeof *idx * (size_t)(total ? total : 1))))
        kiln__fail(&c, KILN_ERR_OUT_OF_MEMORY, "cannot allocate %lld window indices", (long long)total);
    if (c.err) return kiln__drop(1, x), kiln__result(&c, NULL);
    for (int64_t w = 0, k = 0; w < windows; w++)
        for (int64_t j = 0; j < size; j++) idx[k++] = w * step + j;
    kiln_shape split = {nd + 1, {0}};
    kiln_dims order = {nd + 1, {0}};
    for (int d = 0, k = 0; d <= nd; d++) {
        split.dims[d] = d < dim ? x->shape[d] : d == dim ? windows : d == dim + 1 ? size : x->shape[d - 1];
        if (d != dim + 1) order.d[k++] = d;
    }
    order.d[nd] = dim + 1; /* the window's elements last */
    kiln_device dev = x->device;
    kiln_tensor h = kiln__result(&c, x);
    const char *outer = kiln__op_scope_enter("kiln_unfold");
    kiln_tensor index = kiln_from_data(dev, KILN_I64, KILN_SHAPE(total), idx);
    free(idx);
    h = kiln_permute(kiln_reshape(kiln_index_select(h, dim, index), split), order);
    kiln__op_scope_leave(outer);
    return h;
}
