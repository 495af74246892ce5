/* DLPack in and out (kiln/dlpack.h). Out: the CPU tensor's own buffer, after a wait, with the
 * tensor retained by the struct until its deleter runs (so kiln, seeing a second owner, never
 * reuses that buffer in place). In: kiln_from_borrowed over a dense buffer, the producer's
 * deleter as the release callback; a strided one is copied. Without <dlpack/dlpack.h> at build
 * time both report KILN_ERR_UNSUPPORTED. */
#include <stdlib.h>
#include <string.h>

#include "api/call_site.h"
#include "kiln/dlpack.h"
#include "kiln/tensor.h"
#include "ops/ops-impl.h"

KILN_DLPACK_API(KILN__AT_DEFINE)

#if __has_include(<dlpack/dlpack.h>)
#include <dlpack/dlpack.h>

typedef struct {
    DLManagedTensor managed; /* first: the struct handed out is this one */
    kiln__tensor *tensor;
    int64_t shape[KILN_MAX_DIMS];
    int64_t strides[KILN_MAX_DIMS];
} export_ctx;

static void export_delete(DLManagedTensor *m) {
    if (!m) return;
    export_ctx *e = (export_ctx *)m;
    kiln__tensor_release(e->tensor);
    free(e);
}

static DLDataType dl_dtype(kiln_dtype d) {
    static const DLDataType map[KILN_DTYPE_COUNT] = {
        [KILN_F32] = {kDLFloat, 32, 1}, [KILN_F64] = {kDLFloat, 64, 1}, [KILN_I32] = {kDLInt, 32, 1},
        [KILN_I64] = {kDLInt, 64, 1},   [KILN_BOOL] = {kDLUInt, 8, 1},  [KILN_F16] = {kDLFloat, 16, 1},
        [KILN_BF16] = {kDLBfloat, 16, 1},
    };
    return map[d];
}

static bool kiln_dtype_of(DLDataType t, kiln_dtype *out) {
    if (t.lanes != 1) return false;
    for (int d = 0; d < KILN_DTYPE_COUNT; d++) {
        DLDataType m = dl_dtype((kiln_dtype)d);
        if (m.code == t.code && m.bits == t.bits) {
            *out = (kiln_dtype)d;
            return true;
        }
    }
    return false;
}

kiln_status kiln_to_dlpack(kiln_tensor h, struct DLManagedTensor **out) {
    KILN__OP_BEGIN("kiln_to_dlpack");
    if (out) *out = NULL;
    kiln__tensor *t = kiln__arg(&c, h);
    kiln_status st;
    if (!kiln__ok(&c, t)) goto fail;
    if (!out) {
        kiln__fail(&c, KILN_ERR_NULL, "out is NULL");
        goto fail;
    }
    if (t->device != KILN_CPU) {
        kiln__fail(&c, KILN_ERR_DEVICE, "a tensor on %s (DLPack export is for CPU tensors: move it first)",
                   kiln_device_name(t->device));
        goto fail;
    }
    export_ctx *e = calloc(1, sizeof *e);
    if (!e) {
        kiln__fail(&c, KILN_ERR_OUT_OF_MEMORY, "cannot allocate the DLPack struct");
        goto fail;
    }
    st = kiln__wait_storage(t->storage);
    if (st != KILN_OK) {
        free(e);
        st = kiln__error_report(atomic_load(&t->storage->err));
        kiln__tensor_release(t);
        kiln__error_unref(c.err);
        return st;
    }
    e->tensor = t;
    t->storage->exported = true; /* a consumer may write it behind the engine: no cached casts */
    for (int i = 0; i < t->ndim; i++) {
        e->shape[i] = t->shape[i];
        e->strides[i] = t->strides[i];
    }
    DLTensor *dl = &e->managed.dl_tensor;
    dl->data = t->storage->data;
    dl->byte_offset = (uint64_t)t->offset * kiln__elsize(t->dtype);
    dl->device = (DLDevice){kDLCPU, 0};
    dl->ndim = t->ndim;
    dl->dtype = dl_dtype(t->dtype);
    dl->shape = e->shape;
    dl->strides = e->strides;
    e->managed.manager_ctx = e;
    e->managed.deleter = export_delete;
    *out = &e->managed;
    kiln__error_unref(c.err);
    return KILN_OK;
fail:
    kiln__tensor_release(t);
    st = kiln__error_report(c.err);
    kiln__error_unref(c.err);
    return st;
}

static void import_release(void *ctx) {
    DLManagedTensor *m = ctx;
    if (m->deleter) m->deleter(m);
}

/* Copies a strided tensor of n elements of size el to dense row-major order. */
static void gather(char *dst, const char *src, int ndim, const int64_t *shape, const int64_t *strides, size_t el) {
    int64_t idx[KILN_MAX_DIMS] = {0};
    int64_t n = 1;
    for (int d = 0; d < ndim; d++) n *= shape[d];
    for (int64_t k = 0; k < n; k++) {
        int64_t off = 0;
        for (int d = 0; d < ndim; d++) off += idx[d] * strides[d];
        memcpy(dst + (size_t)k * el, src + off * (int64_t)el, el);
        for (int d = ndim - 1; d >= 0; d--) {
            if (++idx[d] < shape[d]) break;
            idx[d] = 0;
        }
    }
}

kiln_tensor kiln_from_dlpack(struct DLManagedTensor *m) {
    KILN__OP_BEGIN("kiln_from_dlpack");
    if (!m) return kiln__result(&c, kiln__fail(&c, KILN_ERR_NULL, "the DLPack tensor is NULL"));
    DLTensor *dl = &m->dl_tensor;
    kiln_dtype dtype;
    if (dl->device.device_type != kDLCPU)
        return kiln__result(&c, kiln__fail(&c, KILN_ERR_DEVICE, "DLPack device type %d (kiln takes kDLCPU memory)",
                                           (int)dl->device.device_type));
    if (!kiln_dtype_of(dl->dtype, &dtype))
        return kiln__result(&c, kiln__fail(&c, KILN_ERR_DTYPE, "DLPack dtype code %d, %d bits, %d lanes has no kiln dtype",
                                           dl->dtype.code, dl->dtype.bits, dl->dtype.lanes));
    if (dl->ndim < 0 || dl->ndim > KILN_MAX_DIMS || (dl->ndim > 0 && !dl->shape))
        return kiln__result(&c, kiln__fail(&c, KILN_ERR_SHAPE, "a DLPack tensor of %d dims (kiln takes 0 to %d)", dl->ndim,
                                           KILN_MAX_DIMS));
    kiln_shape shape = {.ndim = dl->ndim};
    for (int d = 0; d < dl->ndim; d++) shape.dims[d] = dl->shape[d];
    if (!kiln__check_shape(&c, shape)) return kiln__result(&c, NULL);
    int64_t numel = kiln_shape_numel(shape);
    if (!dl->data && numel > 0) return kiln__result(&c, kiln__fail(&c, KILN_ERR_NULL, "the DLPack tensor's data is NULL"));
    const char *base = (const char *)dl->data + dl->byte_offset;
    bool dense = true;
    if (dl->strides) {
        int64_t expect = 1;
        for (int d = dl->ndim - 1; d >= 0; d--) {
            if (shape.dims[d] != 1 && dl->strides[d] != expect) dense = false;
            expect *= shape.dims[d];
        }
    }
    if (dense) return kiln_from_borrowed(dtype, shape, base, import_release, m);
    if (numel == 0) {
        kiln_tensor r = kiln_zeros(KILN_CPU, dtype, shape);
        import_release(m);
        return r;
    }
    size_t el = kiln_dtype_size(dtype);
    char *copy = malloc((size_t)numel * el);
    if (!copy) return kiln__result(&c, kiln__fail(&c, KILN_ERR_OUT_OF_MEMORY, "cannot copy a strided DLPack tensor"));
    gather(copy, base, dl->ndim, shape.dims, dl->strides, el);
    kiln_tensor r = kiln_from_data(KILN_CPU, dtype, shape, copy);
    free(copy);
    if (kiln_tensor_status(r) == KILN_OK) import_release(m);
    return r;
}

#else /* no dlpack.h when kiln was built */

kiln_status kiln_to_dlpack(kiln_tensor h, struct DLManagedTensor **out) {
    KILN__OP_BEGIN("kiln_to_dlpack");
    if (out) *out = NULL;
    kiln__tensor_release(kiln__arg(&c, h));
    kiln__fail(&c, KILN_ERR_UNSUPPORTED, "kiln was built without DLPack (libdlpack-dev)");
    kiln_status st = kiln__error_report(c.err);
    kiln__error_unref(c.err);
    return st;
}

kiln_tensor kiln_from_dlpack(struct DLManagedTensor *m) {
    KILN__OP_BEGIN("kiln_from_dlpack");
    (void)m;
    return kiln__result(&c, kiln__fail(&c, KILN_ERR_UNSUPPORTED, "kiln was built without DLPack (libdlpack-dev)"));
}
#endif
