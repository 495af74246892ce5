/* Joining (cat, stack), splitting (split, chunk), indexing (index_select, gather, scatter_add,
 * one_hot) and device transfer.
 *
 * cat writes each input into its slice of one output with an ordinary COPY op, so no op
 * record ever needs a variable number of inputs. split and chunk only make views. Index
 * values are checked by the kernels (they are known only when the op runs). */
#include <stdlib.h>
#include <string.h>

#include "kiln/tensor.h"
#include "ops/ops-impl.h"

/* kiln__ok on each of n arguments in order, so the first one's error is the one kept. */
static bool usable(kiln__opctx *c, int n, kiln__tensor *const *ts) {
    bool ok = true;
    for (int i = 0; i < n; i++) ok = kiln__ok(c, ts[i]) && ok;
    return ok;
}

/* ---- cat / stack --------------------------------------------------------------------------- */

/* torch's legacy rule: a 1-d tensor with no elements joins anything (it is skipped). */
static bool skippable(const kiln__tensor *t) { return t->ndim == 1 && t->shape[0] == 0; }

/* Checks shapes and devices; fills the output shape, dtype and the normalised dim. */
static bool cat_plan(kiln__opctx *c, kiln__tensor *const *ts, int n, int *dim, int *ndim, int64_t *shape,
                     kiln_dtype *dtype) {
    const kiln__tensor *ref = ts[0];
    for (int i = 0; i < n; i++)
        if (!skippable(ts[i])) {
            ref = ts[i];
            break;
        }
    if (ref->ndim == 0) return kiln__fail(c, KILN_ERR_SHAPE, "zero-dimensional tensors cannot be concatenated"), false;
    if (!kiln__norm_dim(c, dim, ref->ndim)) return false;
    *ndim = ref->ndim;
    memcpy(shape, ref->shape, sizeof(int64_t) * (size_t)ref->ndim);
    shape[*dim] = 0;
    *dtype = ts[0]->dtype;
    for (int i = 0; i < n; i++) {
        const kiln__tensor *t = ts[i];
        if (!kiln__same_device(c, ref, t)) return false;
        *dtype = kiln__dtype_promote(*dtype, t->dtype);
        if (skippable(t)) continue;
        bool match = t->ndim == ref->ndim;
        for (int d = 0; match && d < t->ndim; d++) match = d == *dim || t->shape[d] == ref->shape[d];
        if (!match) {
            char a[128], b[128];
            kiln__fail(c, KILN_ERR_SHAPE, "tensor %d has shape %s, expected %s except in dim %d", i,
                       kiln__shape_str(a, sizeof a, t->ndim, t->shape), kiln__shape_str(b, sizeof b, ref->ndim, ref->shape),
                       *dim);
            return false;
        }
        if (__builtin_add_overflow(shape[*dim], t->shape[*dim], &shape[*dim])) {
            kiln__fail(c, KILN_ERR_OUT_OF_MEMORY, "the joined dim %d has more elements than int64 can count", *dim);
            return false;
        }
    }
    return true;
}

/* Concatenates ts[0..n) (usable) along dim. They stay the caller's to release, except a lone
 * input handed back as the result (its entry becomes NULL). */
static kiln__tensor *cat_array(kiln__opctx *c, kiln__tensor **ts, int n, int dim) {
    int64_t shape[KILN_MAX_DIMS];
    int nd;
    kiln_dtype dtype;
    if (!cat_plan(c, ts, n, &dim, &nd, shape, &dtype)) return NULL;
    if (n == 1 && ts[0]->dtype == dtype) { /* nothing to join: hand the input back */
        kiln__tensor *only = ts[0];
        ts[0] = NULL;
        return only;
    }
    kiln_device dev = ts[0]->device;
    kiln__tensor *out = kiln__t_empty(c, dev, dtype, nd, shape);
    if (!out) return NULL;
    int64_t at = 0;
    for (int i = 0; i < n; i++) {
        kiln__tensor *t = ts[i];
        if (skippable(t)) continue; /* no elements; its ndim may differ from out's */
        if (kiln__tensor_numel(t) > 0) {
            kiln__view slice = kiln__view_of(out); /* the slice of out that t fills */
            memcpy(slice.shape, t->shape, sizeof(int64_t) * (size_t)t->ndim);
            slice.offset += at * out->strides[dim];
            if (!kiln__t_copy_into(c, slice, t)) return kiln__drop(1, out), NULL;
        }
        at += t->shape[dim];
    }
    return out;
}


static void release_all(kiln__tensor **ts, int n) {
    for (int i = 0; i < n; i++) kiln__tensor_release(ts[i]), ts[i] = NULL;
}

kiln__tensor *kiln__t_cat(kiln__opctx *c, kiln__tensor **ts, int n, int dim) {
    kiln__tensor *out = n >= 1 && usable(c, n, ts) ? cat_array(c, ts, n, dim) : NULL;
    if (n < 1) kiln__fail(c, KILN_ERR_INVALID_ARGUMENT, "needs at least one tensor, got n=%d", n);
    release_all(ts, n);
    return out;
}

bool kiln__stack_check(kiln__opctx *c, kiln__tensor *const *ts, int n, int *dim) {
    if (n < 1) return kiln__fail(c, KILN_ERR_INVALID_ARGUMENT, "needs at least one tensor, got n=%d", n), false;
    if (!usable(c, n, ts)) return false;
    const kiln__tensor *ref = ts[0];
    if (!kiln__norm_dim(c, dim, ref->ndim + 1)) return false;
    for (int i = 1; i < n; i++) {
        const kiln__tensor *t = ts[i];
        if (t->ndim != ref->ndim || memcmp(t->shape, ref->shape, sizeof(int64_t) * (size_t)t->ndim) != 0) {
            char a[128], b[128];
            kiln__fail(c, KILN_ERR_SHAPE, "stack needs equal shapes: tensor 0 is %s, tensor %d is %s",
                       kiln__shape_str(a, sizeof a, ref->ndim, ref->shape), i,
                       kiln__shape_str(b, sizeof b, t->ndim, t->shape));
            return false;
        }
    }
    return true;
}

kiln__tensor *kiln__t_stack(kiln__opctx *c, kiln__tensor **ts, int n, int dim) {
    kiln__tensor *out = NULL;
    if (kiln__stack_check(c, ts, n, &dim)) {
        /* unsqueeze consumes each entry; a failure leaves NULL there and c->err set */
        for (int i = 0; i < n; i++) ts[i] = kiln__t_unsqueeze(c, ts[i], dim);
        if (!c->err) out = cat_array(c, ts, n, dim);
    }
    release_all(ts, n);
    return out;
}

/* ---- index_select / gather / scatter_add / one_hot ----------------------------------------- */

static bool check_index(kiln__opctx *c, const kiln__tensor *t, const kiln__tensor *index) {
    if (index->dtype != KILN_I32 && index->dtype != KILN_I64)
        return kiln__fail(c, KILN_ERR_DTYPE, "index must be i32 or i64, got %s", kiln_dtype_name(index->dtype)), false;
    return !t || kiln__same_device(c, t, index);
}

/* Checks the indexed tensor and its dim (0-d tensors have no dim to index). */
static bool check_indexed(kiln__opctx *c, const kiln__tensor *t, int *dim) {
    if (t->ndim == 0) return kiln__fail(c, KILN_ERR_SHAPE, "cannot index a 0-d tensor"), false;
    return kiln__norm_dim(c, dim, t->ndim);
}

/* Submits `code` reading a (and b when not NULL) into out, with p.i[0] = param; releases a
 * and b. Returns out, or NULL with c->err set. */
static kiln__tensor *submit_indexing(kiln__opctx *c, kiln__opcode code, kiln__tensor *out, kiln__tensor *a,
                                     kiln__tensor *b, int64_t param) {
    kiln__op op;
    kiln__op_init(&op, code, c->name);
    op.in[0] = kiln__view_of(a);
    if (b) op.in[1] = kiln__view_of(b);
    op.n_in = b ? 2 : 1;
    op.p.i[0] = param;
    op.out[0] = kiln__view_of(out);
    op.n_out = 1;
    if (!kiln__t_submit(c, &op, out->device)) kiln__tensor_release(out), out = NULL;
    kiln__drop(2, a, b);
    return out;
}

kiln__tensor *kiln__t_index_select(kiln__opctx *c, kiln__tensor *t, int dim, kiln__tensor *index) {
    if (!usable(c, 2, (kiln__tensor *[]){t, index})) return kiln__drop(2, t, index), NULL;
    if (!check_indexed(c, t, &dim) || !check_index(c, t, index)) return kiln__drop(2, t, index), NULL;
    if (index->ndim > 1) {
        kiln__fail(c, KILN_ERR_SHAPE, "index must be 1-d, got %d dims", index->ndim);
        return kiln__drop(2, t, index), NULL;
    }
    /* a scalar index selects one entry, keeping the dim */
    if (index->ndim == 0 && !(index = kiln__t_reshape(c, index, 1, (int64_t[]){1}))) return kiln__drop(1, t), NULL;
    int64_t shape[KILN_MAX_DIMS];
    memcpy(shape, t->shape, sizeof shape);
    shape[dim] = index->shape[0];
    kiln__tensor *out = kiln__t_empty(c, t->device, t->dtype, t->ndim, shape);
    if (!out) return kiln__drop(2, t, index), NULL;
    return submit_indexing(c, KILN__OP_INDEX_SELECT, out, t, index, dim);
}

/* torch's rule: same ndim, and index no larger than `t` in every dim but `dim` (dim -1:
 * in every dim). */
static bool check_fits(kiln__opctx *c, const kiln__tensor *index, const kiln__tensor *t, int dim, const char *what) {
    bool ok = index->ndim == t->ndim;
    for (int d = 0; ok && d < t->ndim; d++) ok = d == dim || index->shape[d] <= t->shape[d];
    if (ok) return true;
    char a[128], b[128];
    kiln__fail(c, KILN_ERR_SHAPE, "index of shape %s does not fit %s of shape %s (dim %d)",
               kiln__shape_str(a, sizeof a, index->ndim, index->shape), what,
               kiln__shape_str(b, sizeof b, t->ndim, t->shape), dim);
    return false;
}

kiln__tensor *kiln__t_gather(kiln__opctx *c, kiln__tensor *t, int dim, kiln__tensor *index) {
    if (!usable(c, 2, (kiln__tensor *[]){t, index})) return kiln__drop(2, t, index), NULL;
    if (!check_indexed(c, t, &dim) || !check_index(c, t, index) || !check_fits(c, index, t, dim, "input"))
        return kiln__drop(2, t, index), NULL;
    kiln__tensor *out = kiln__t_empty(c, t->device, t->dtype, index->ndim, index->shape);
    if (!out) return kiln__drop(2, t, index), NULL;
    return submit_indexing(c, KILN__OP_GATHER, out, t, index, dim);
}

kiln__tensor *kiln__t_scatter_add(kiln__opctx *c, kiln__tensor *t, int dim, kiln__tensor *index, kiln__tensor *src) {
    if (!usable(c, 3, (kiln__tensor *[]){t, index, src})) return kiln__drop(3, t, index, src), NULL;
    if (!check_indexed(c, t, &dim) || !check_index(c, t, index) || !kiln__same_device(c, t, src) ||
        !check_fits(c, index, t, dim, "input") || !check_fits(c, index, src, -1, "src"))
        return kiln__drop(3, t, index, src), NULL;
    kiln_dtype dtype = kiln__dtype_promote(t->dtype, src->dtype);
    t = kiln__t_cast(c, t, dtype);
    src = kiln__t_cast(c, src, dtype);
    if (!t || !src) return kiln__drop(3, t, index, src), NULL;
    /* out starts as a copy of t, or is t itself when t's buffer may be overwritten */
    kiln__tensor *out = kiln__t_output(c, t->device, dtype, t->ndim, t->shape, &t, 1);
    if (!out) return kiln__drop(3, t, index, src), NULL;
    if (out->storage != t->storage && !kiln__t_copy_into(c, kiln__view_of(out), t))
        return kiln__drop(4, out, t, index, src), NULL;
    kiln__tensor_release(t);
    return submit_indexing(c, KILN__OP_SCATTER_ADD, out, index, src, dim);
}

kiln__tensor *kiln__t_one_hot(kiln__opctx *c, kiln__tensor *index, int64_t classes, kiln_dtype dtype) {
    if (!kiln__ok(c, index)) return kiln__drop(1, index), NULL;
    if (!check_index(c, NULL, index)) return kiln__drop(1, index), NULL;
    if (!kiln__dtype_valid(dtype)) return kiln__drop(1, index), kiln__fail(c, KILN_ERR_DTYPE, "invalid dtype %d", (int)dtype);
    if (classes < 1)
        return kiln__drop(1, index), kiln__fail(c, KILN_ERR_INVALID_ARGUMENT, "num_classes %lld must be positive",
                                                (long long)classes);
    if (index->ndim >= KILN_MAX_DIMS)
        return kiln__drop(1, index), kiln__fail(c, KILN_ERR_SHAPE, "index already has %d dims", KILN_MAX_DIMS);
    int64_t shape[KILN_MAX_DIMS];
    memcpy(shape, index->shape, sizeof(int64_t) * (size_t)index->ndim);
    shape[index->ndim] = classes;
    kiln_shape s = {.ndim = index->ndim + 1};
    memcpy(s.dims, shape, sizeof shape);
    if (!kiln__check_shape(c, s)) return kiln__drop(1, index), NULL;
    kiln__tensor *out = kiln__t_empty(c, index->device, dtype, s.ndim, shape);
    if (!out) return kiln__drop(1, index), NULL;
    return submit_indexing(c, KILN__OP_ONE_HOT, out, index, NULL, classes);
}

/* ---- devices ------------------------------------------------------------------------------- */

/* A COPY between the host and a device, or between two devices that share memory: the
 * device's backend runs it (the engine picks the device side of an op, the destination of a
 * copy between devices), as a transfer queued on this thread's stream. */
static bool submit_transfer(kiln__opctx *c, kiln__tensor *out, const kiln__tensor *src) {
    kiln__op op;
    kiln__op_init(&op, KILN__OP_COPY, c->name);
    op.in[0] = kiln__view_of(src);
    op.out[0] = kiln__view_of(out);
    op.n_in = op.n_out = 1;
    return kiln__t_submit(c, &op, out->device == KILN_CPU ? src->device : out->device);
}

kiln__tensor *kiln__t_to_device(kiln__opctx *c, kiln__tensor *t, kiln_device dev) {
    if (!kiln__ok(c, t)) return kiln__drop(1, t), NULL;
    if (t->device == dev) return t;
    kiln_device from = t->device;
    if (kiln__device_slot(dev) < 0) return kiln__drop(1, t), kiln__fail(c, KILN_ERR_DEVICE, "invalid device %d", (int)dev);
    const kiln__backend *be = kiln__backend_get(dev);
    if (!be) return kiln__drop(1, t), kiln__fail(c, KILN_ERR_DEVICE, "device %s is not available", kiln_device_name(dev));
    if (from != KILN_CPU && dev != KILN_CPU && !(be->shares_memory && be->shares_memory(be->context, from)))
        return kiln__t_to_device(c, kiln__t_to_device(c, t, KILN_CPU), dev); /* through the host */
    /* a dense source (a copy on its own device first), then one transfer queued on the stream
     * (between two devices that share memory: on the destination's queue, after the source's
     * last write as a device event) */
    t = kiln__t_contiguous(c, t);
    if (!t) return NULL;
    kiln__tensor *out = kiln__t_empty(c, dev, t->dtype, t->ndim, t->shape);
    if (out && !submit_transfer(c, out, t)) kiln__tensor_release(out), out = NULL;
    kiln__tensor_release(t);
    return out;
}
