/* Reads: the blocking calls that copy results out, and metadata queries (which never block). */
#include <string.h>

#include "kiln/engine.h"
#include "kiln/tensor.h"
#include "ops/ops-impl.h"

/* Waits for t's data and copies it (dense) to host memory of exactly numel*elsize bytes. */
static kiln_status read_into(kiln__opctx *c, kiln__tensor *t, void *dst, size_t dst_bytes) {
    t = kiln__t_contiguous(c, t);
    if (!t) return kiln__error_report(c->err);
    kiln_status st = kiln__wait_storage(t->storage);
    if (st != KILN_OK) {
        kiln__error_report(atomic_load(&t->storage->err));
    } else {
        const kiln__backend *be = kiln__backend_get(t->device);
        size_t off = (size_t)t->offset * kiln__elsize(t->dtype);
        st = be->copy_to_host(be->context, dst, t->storage, off, dst_bytes);
        if (st != KILN_OK) kiln__report(st, c->name, "copy from %s failed", kiln_device_name(t->device));
    }
    kiln__tensor_release(t);
    return st;
}

kiln_status kiln__read_borrowed(kiln__opctx *c, kiln__tensor *t, void *dst, size_t dst_bytes) {
    kiln__tensor_retain(t);
    return read_into(c, t, dst, dst_bytes);
}

static kiln_status fail_read(kiln__opctx *c, kiln__tensor *t) {
    kiln__tensor_release(t);
    kiln_status st = kiln__error_report(c->err);
    kiln__error_unref(c->err);
    return st;
}

kiln_status kiln_into_data(kiln_tensor h, void *dst, size_t dst_bytes) {
    KILN__OP_BEGIN("kiln_into_data");
    kiln__tensor *t = kiln__arg(&c, h);
    if (!kiln__ok(&c, t)) return fail_read(&c, t);
    size_t need = (size_t)kiln__tensor_numel(t) * kiln__elsize(t->dtype);
    if (!dst && need) {
        kiln__fail(&c, KILN_ERR_NULL, "destination is NULL");
        return fail_read(&c, t);
    }
    if (dst_bytes != need) {
        kiln__fail(&c, KILN_ERR_BUFFER_SIZE, "destination has %zu bytes, tensor needs %zu", dst_bytes, need);
        return fail_read(&c, t);
    }
    kiln_status st = read_into(&c, t, dst, need);
    kiln__error_unref(c.err);
    return st;
}

static kiln_status read_scalar(kiln__opctx *c, kiln_tensor h, double *out) {
    kiln__tensor *t = kiln__arg(c, h);
    if (!kiln__ok(c, t)) return fail_read(c, t);
    if (!out) {
        kiln__fail(c, KILN_ERR_NULL, "output pointer is NULL");
        return fail_read(c, t);
    }
    if (kiln__tensor_numel(t) != 1) {
        char buf[128];
        kiln__fail(c, KILN_ERR_SHAPE, "tensor of shape %s is not a single element", kiln__shape_str(buf, sizeof buf, t->ndim, t->shape));
        return fail_read(c, t);
    }
    _Alignas(8) unsigned char value[8];
    kiln_dtype dtype = t->dtype;
    kiln_status st = read_into(c, t, value, kiln__elsize(dtype));
    kiln__error_unref(c->err);
    if (st == KILN_OK) *out = kiln__load_as_f64(value, dtype, 0);
    return st;
}

kiln_status kiln_into_scalar(kiln_tensor h, float *out) {
    KILN__OP_BEGIN("kiln_into_scalar");
    double v = 0;
    kiln_status st = read_scalar(&c, h, out ? &v : NULL);
    if (st == KILN_OK) *out = (float)v;
    return st;
}

kiln_status kiln_into_scalar_f64(kiln_tensor h, double *out) {
    KILN__OP_BEGIN("kiln_into_scalar_f64");
    return read_scalar(&c, h, out);
}

/* ---- metadata ---------------------------------------------------------------------------- */

static const kiln__tensor *peek(kiln_tensor h, const char *op) {
    kiln__error *err = NULL;
    kiln__tensor *t = kiln__handle_peek(h, op, &err);
    if (!t) {
        kiln__error_report(err);
        kiln__error_unref(err);
    }
    return t;
}

kiln_shape kiln_tensor_shape(kiln_tensor h) {
    kiln_shape s = {.ndim = -1};
    const kiln__tensor *t = peek(h, "kiln_tensor_shape");
    if (t && !t->err) {
        s.ndim = t->ndim;
        memcpy(s.dims, t->shape, sizeof s.dims);
    }
    return s;
}

int kiln_tensor_ndim(kiln_tensor h) {
    const kiln__tensor *t = peek(h, "kiln_tensor_ndim");
    return t && !t->err ? t->ndim : -1;
}

int64_t kiln_tensor_dim(kiln_tensor h, int dim) {
    const kiln__tensor *t = peek(h, "kiln_tensor_dim");
    if (!t || t->err) return -1;
    if (dim < 0) dim += t->ndim;
    if (dim < 0 || dim >= t->ndim) {
        kiln__report(KILN_ERR_INVALID_ARGUMENT, "kiln_tensor_dim", "dim out of range for a %d-d tensor", t->ndim);
        return -1;
    }
    return t->shape[dim];
}

int64_t kiln_tensor_numel(kiln_tensor h) {
    const kiln__tensor *t = peek(h, "kiln_tensor_numel");
    return t && !t->err ? kiln__tensor_numel(t) : -1;
}

kiln_dtype kiln_tensor_dtype(kiln_tensor h) {
    const kiln__tensor *t = peek(h, "kiln_tensor_dtype");
    return t && !t->err ? t->dtype : KILN_DTYPE_COUNT;
}

kiln_device kiln_tensor_device(kiln_tensor h) {
    const kiln__tensor *t = peek(h, "kiln_tensor_device");
    return t && !t->err ? t->device : KILN_DEVICE_COUNT;
}

bool kiln_tensor_is_contiguous(kiln_tensor h) {
    const kiln__tensor *t = peek(h, "kiln_tensor_is_contiguous");
    return t && !t->err && kiln__tensor_is_contiguous(t);
}

kiln_status kiln_tensor_status(kiln_tensor h) {
    kiln__error *err = NULL;
    kiln__tensor *t = kiln__handle_peek(h, "kiln_tensor_status", &err);
    if (!t) {
        kiln_status st = err->status;
        kiln__error_unref(err);
        return st;
    }
    if (t->err) return t->err->status;
    kiln__error *e = t->storage ? atomic_load(&t->storage->err) : NULL;
    return e ? e->status : KILN_OK;
}

/* ---- a read-only view of a tensor's data ---------------------------------------------------- */

kiln_status kiln_data_view_get(kiln_tensor h, kiln_data_view *v) {
    KILN__OP_BEGIN("kiln_data_view_get");
    if (v) *v = (kiln_data_view){0};
    kiln__tensor *t = kiln__handle_peek(h, c.name, &c.err); /* borrowed: t is not consumed */
    if (!v && !c.err) kiln__fail(&c, KILN_ERR_NULL, "view is NULL");
    if (t && !c.err && kiln__ok(&c, t) && t->device != KILN_CPU)
        kiln__fail(&c, KILN_ERR_DEVICE, "the tensor is on %s: a view needs host memory (use kiln_into_data)",
                   kiln_device_name(t->device));
    if (c.err) return fail_read(&c, NULL);
    kiln__tensor_retain(t);      /* the view's own reference: no op writes this buffer in place */
    t = kiln__t_contiguous(&c, t); /* (a dense copy only when t is not) */
    kiln_status st = t ? kiln__wait_storage(t->storage) : KILN_ERR_INTERNAL;
    if (!t) return fail_read(&c, NULL);
    if (st != KILN_OK) {
        st = kiln__error_report(atomic_load(&t->storage->err));
        kiln__tensor_release(t);
        return st;
    }
    v->data = (const char *)t->storage->data + (size_t)t->offset * kiln__elsize(t->dtype);
    v->numel = kiln__tensor_numel(t);
    v->dtype = t->dtype;
    v->shape.ndim = t->ndim;
    for (int d = 0; d < t->ndim; d++) v->shape.dims[d] = t->shape[d];
    v->keep = kiln__handle_new(t);
    if (v->keep.id == KILN__OOM_HANDLE_ID) {
        *v = (kiln_data_view){0};
        return KILN_ERR_OUT_OF_MEMORY; /* (reported by kiln__handle_new) */
    }
    return KILN_OK;
}

void kiln_data_view_release(kiln_data_view *v) {
    if (!v) return;
    kiln_release(v->keep);
    *v = (kiln_data_view){0};
}
