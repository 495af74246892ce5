/* Shared op-layer machinery: arguments, errors, outputs, broadcasting, submission. */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "ops/ops-impl.h"

static _Thread_local const char *scope_name;

const char *kiln__op_scope_enter(const char *name) {
    const char *outer = scope_name;
    if (!outer) scope_name = name;
    return outer;
}

void kiln__op_scope_leave(const char *outer) { scope_name = outer; }

const char *kiln__op_name(const char *name) { return scope_name ? scope_name : name; }

kiln__tensor *kiln__arg(kiln__opctx *c, kiln_tensor h) {
    kiln__error *err = NULL;
    kiln__tensor *t = kiln__handle_take(h, c->name, &err);
    if (t) {
        if (c->n_taken < KILN__OP_TAKEN) c->taken_id[c->n_taken] = h.id, c->taken[c->n_taken++] = t;
        return t;
    }
    for (int i = 0; i < c->n_taken; i++)
        if (c->taken_id[i] == h.id) { /* x * x: the handle's one tensor, used twice */
            kiln__error_unref(err);
            kiln__tensor_retain(c->taken[i]);
            return c->taken[i];
        }
    if (!c->err)
        c->err = err;
    else
        kiln__error_unref(err);
    return NULL;
}

kiln__tensor *kiln__peek(kiln__opctx *c, kiln_tensor h) {
    kiln__error *err = NULL;
    kiln__tensor *t = kiln__handle_peek(h, c->name, &err);
    if (!t) {
        if (!c->err) c->err = err;
        else kiln__error_unref(err);
        return NULL;
    }
    return kiln__ok(c, t) ? t : NULL;
}

bool kiln__ok(kiln__opctx *c, kiln__tensor *t) {
    if (!t) return false;
    if (t->err) {
        if (!c->err) c->err = kiln__error_ref(t->err);
        return false;
    }
    return true;
}

kiln__tensor *kiln__fail(kiln__opctx *c, kiln_status st, const char *fmt, ...) {
    if (c->err) return NULL;
    char detail[384];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(detail, sizeof detail, fmt, ap);
    va_end(ap);
    kiln__site site = kiln__call_site();
    c->err = kiln__error_new(st, c->name, site.file, site.line, 0, "%s", detail);
    return NULL;
}

void kiln__drop(int n, ...) {
    va_list ap;
    va_start(ap, n);
    for (int i = 0; i < n; i++) kiln__tensor_release(va_arg(ap, kiln__tensor *));
    va_end(ap);
}

kiln_tensor kiln__result(kiln__opctx *c, kiln__tensor *out) {
    if (out && !c->err) return kiln__handle_new(out);
    if (out) kiln__tensor_release(out);
    if (!c->err) kiln__fail(c, KILN_ERR_INTERNAL, "op produced no result and no error");
    kiln__error_set_last(c->err);
    kiln__stream_record_dispatch_error(c->err); /* reported by a read of it, or else by sync */
    kiln__tensor *p = kiln__tensor_poisoned(c->err);
    kiln__error_unref(c->err);
    c->err = NULL;
    return p ? kiln__handle_new(p) : (kiln_tensor){KILN__OOM_HANDLE_ID};
}

bool kiln__norm_dim(kiln__opctx *c, int *dim, int ndim) {
    int d = *dim;
    int n = ndim > 0 ? ndim : 1;
    if (d < -n || d >= n) {
        kiln__fail(c, KILN_ERR_INVALID_ARGUMENT, "dim %d out of range for a %d-d tensor", d, ndim);
        return false;
    }
    *dim = d < 0 ? d + n : d;
    return true;
}

bool kiln__same_device(kiln__opctx *c, const kiln__tensor *a, const kiln__tensor *b) {
    if (a->device == b->device) return true;
    kiln__fail(c, KILN_ERR_DEVICE, "tensors on different devices (%s and %s)", kiln_device_name(a->device),
               kiln_device_name(b->device));
    return false;
}

bool kiln__same_dtype(kiln__opctx *c, const kiln__tensor *a, const kiln__tensor *b, const kiln__tensor *bias) {
    const kiln__tensor *other = a->dtype != b->dtype ? b : bias && bias->dtype != a->dtype ? bias : NULL;
    if (!other) return true;
    kiln__fail(c, KILN_ERR_DTYPE, "operands of one dtype expected, got %s and %s%s (as PyTorch, a product does not "
               "promote: kiln_cast one of them)", kiln_dtype_name(a->dtype), kiln_dtype_name(other->dtype),
               other == bias ? " (bias)" : "");
    return false;
}

const char *kiln__shape_str(char *buf, size_t size, int ndim, const int64_t *shape) {
    size_t at = 0;
    at += (size_t)snprintf(buf + at, size - at, "[");
    for (int d = 0; d < ndim && at < size; d++)
        at += (size_t)snprintf(buf + at, size - at, d ? ", %lld" : "%lld", (long long)shape[d]);
    if (at < size) snprintf(buf + at, size - at, "]");
    return buf;
}

bool kiln__check_dims(kiln__opctx *c, int ndim, const int64_t *shape) {
    for (int d = 0; d < ndim; d++)
        if (shape[d] < 0) {
            kiln__fail(c, KILN_ERR_SHAPE, "negative size %lld in dim %d", (long long)shape[d], d);
            return false;
        }
    int64_t n, extent; /* the extent bounds the strides too: [0, 2^62] is refused as well */
    if (!kiln__shape_numel_checked(ndim, shape, &n, &extent) || extent > KILN__MAX_NUMEL) {
        char buf[160];
        kiln__fail(c, KILN_ERR_OUT_OF_MEMORY, "shape %s is too large (2^59 elements or more)",
                   kiln__shape_str(buf, sizeof buf, ndim, shape));
        return false;
    }
    return true;
}

bool kiln__check_shape(kiln__opctx *c, kiln_shape shape) {
    if (shape.ndim < 0 || shape.ndim > KILN_MAX_DIMS) {
        kiln__fail(c, KILN_ERR_SHAPE, "shape has %d dims (0..%d allowed)", shape.ndim, KILN_MAX_DIMS);
        return false;
    }
    return kiln__check_dims(c, shape.ndim, shape.dims);
}

bool kiln__broadcast_shapes(kiln__opctx *c, int na, const int64_t *a, int nb, const int64_t *b, int *nout,
                            int64_t *out) {
    int n = na > nb ? na : nb;
    for (int i = 0; i < n; i++) {
        int64_t da = i < n - na ? 1 : a[i - (n - na)];
        int64_t db = i < n - nb ? 1 : b[i - (n - nb)];
        if (da != db && da != 1 && db != 1) {
            char sa[128], sb[128];
            kiln__fail(c, KILN_ERR_SHAPE, "shapes %s and %s cannot be broadcast together",
                       kiln__shape_str(sa, sizeof sa, na, a), kiln__shape_str(sb, sizeof sb, nb, b));
            return false;
        }
        out[i] = da == 1 ? db : da;
    }
    *nout = n;
    return true;
}

kiln__view kiln__view_broadcast(const kiln__tensor *t, int ndim, const int64_t *shape) {
    kiln__view v;
    kiln__view_set_broadcast(&v, t, ndim, shape);
    return v;
}

static bool is_dense(const kiln__tensor *t) {
    /* no zero strides, no overlap, no gaps: the buffer holds exactly this tensor */
    return kiln__tensor_is_contiguous(t) && (size_t)kiln__tensor_numel(t) * kiln__elsize(t->dtype) == t->storage->nbytes;
}

kiln__tensor *kiln__t_empty(kiln__opctx *c, kiln_device dev, kiln_dtype dtype, int ndim, const int64_t *shape) {
    if (!kiln__check_dims(c, ndim, shape)) return NULL; /* a broadcast or a product may have grown too large */
    kiln__tensor *out = kiln__tensor_new(dev, dtype, ndim, shape);
    if (!out) {
        int64_t n = 1;
        for (int d = 0; d < ndim; d++) n *= shape[d];
        kiln__fail(c, KILN_ERR_OUT_OF_MEMORY, "cannot allocate %lld bytes for the result on %s",
                   (long long)(n * (int64_t)kiln__elsize(dtype)), kiln_device_name(dev));
    }
    return out;
}

/* The output in place of the first candidate that can give its buffer (see kiln__t_output);
 * taking: the candidate's tensor object itself may become the output (its entry is then NULL). */
static kiln__tensor *output_in_place(kiln__opctx *c, kiln_device dev, kiln_dtype dtype, int ndim, const int64_t *shape,
                                     kiln__tensor **candidates, int n_candidates, bool taking) {
    if (!kiln__check_dims(c, ndim, shape)) return NULL;
    int64_t strides[KILN_MAX_DIMS];
    int64_t numel = kiln__dense_strides(ndim, shape, strides);
    size_t bytes = (size_t)numel * kiln__elsize(dtype); /* checked: numel <= KILN__MAX_NUMEL */
    for (int i = 0; i < n_candidates; i++) {
        kiln__tensor *t = candidates[i];
        if (!t || !kiln__tensor_is_exclusive(t) || t->device != dev) continue;
        if (kiln__elsize(t->dtype) != kiln__elsize(dtype) || t->storage->nbytes != bytes || !is_dense(t)) continue;
        kiln__tensor *out;
        if (taking && !t->autodiff) { /* the caller holds the only reference: no one else sees it change */
            kiln__tensor_describe(t, dtype, ndim, shape, strides, 0);
            candidates[i] = NULL;
            out = t;
        } else if (!(out = kiln__tensor_wrap(t->storage, dtype, ndim, shape, strides, 0))) {
            break;
        }
        kiln__stats_count_inplace();
        return out;
    }
    return kiln__t_empty(c, dev, dtype, ndim, shape);
}

kiln__tensor *kiln__t_output(kiln__opctx *c, kiln_device dev, kiln_dtype dtype, int ndim, const int64_t *shape,
                             kiln__tensor *const *candidates, int n_candidates) {
    return output_in_place(c, dev, dtype, ndim, shape, (kiln__tensor **)(uintptr_t)candidates, n_candidates, false);
}

kiln__tensor *kiln__t_output_taking(kiln__opctx *c, kiln_device dev, kiln_dtype dtype, int ndim, const int64_t *shape,
                                    kiln__tensor **candidates, int n_candidates) {
    return output_in_place(c, dev, dtype, ndim, shape, candidates, n_candidates, true);
}

bool kiln__t_submit(kiln__opctx *c, kiln__op *op, kiln_device dev) {
    const kiln__backend *be = kiln__backend_get(dev);
    if (!be) {
        kiln__fail(c, KILN_ERR_DEVICE, "device %s is not available", kiln_device_name(dev));
        return false;
    }
    if (!be->kernels[op->code]) {
        kiln__fail(c, KILN_ERR_UNSUPPORTED, "%s has no %s kernel", kiln_device_name(dev), kiln__opcode_name(op->code));
        return false;
    }
    kiln__submit(op);
    return true;
}

/* ---- basic tensor-level ops -------------------------------------------------------------- */

bool kiln__t_copy_into(kiln__opctx *c, kiln__view dst, const kiln__tensor *src) {
    kiln__op op;
    kiln__op_init(&op, KILN__OP_COPY, c->name);
    op.in[0] = kiln__view_of(src);
    op.out[0] = dst;
    op.n_in = op.n_out = 1;
    return kiln__t_submit(c, &op, src->device);
}

kiln__tensor *kiln__t_cast(kiln__opctx *c, kiln__tensor *x, kiln_dtype dtype) {
    if (!kiln__ok(c, x)) return kiln__drop(1, x), NULL;
    if (x->dtype == dtype) return x;
    kiln__tensor *out = kiln__t_output(c, x->device, dtype, x->ndim, x->shape, &x, 1);
    if (out && !kiln__t_copy_into(c, kiln__view_of(out), x)) kiln__tensor_release(out), out = NULL;
    kiln__tensor_release(x);
    return out;
}

kiln__tensor *kiln__t_contiguous(kiln__opctx *c, kiln__tensor *x) {
    if (!kiln__ok(c, x)) return kiln__drop(1, x), NULL;
    if (kiln__tensor_is_contiguous(x)) return x;
    kiln__tensor *out = kiln__t_empty(c, x->device, x->dtype, x->ndim, x->shape);
    if (out && !kiln__t_copy_into(c, kiln__view_of(out), x)) kiln__tensor_release(out), out = NULL;
    kiln__tensor_release(x);
    return out;
}

kiln__tensor *kiln__t_fill(kiln__opctx *c, kiln_device dev, kiln_dtype dtype, int ndim, const int64_t *shape,
                           double value) {
    kiln__tensor *out = kiln__t_empty(c, dev, dtype, ndim, shape);
    if (!out) return NULL;
    kiln__op op;
    kiln__op_init(&op, KILN__OP_FILL, c->name);
    op.out[0] = kiln__view_of(out);
    op.n_out = 1;
    op.p.f[0] = value;
    if (!kiln__t_submit(c, &op, dev)) return kiln__drop(1, out), NULL;
    return out;
}
