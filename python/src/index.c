/* t[key] and t[key] = value with NumPy's and PyTorch's key forms: ints, slices (positive
 * steps), None, ..., bool masks and integer index tensors or lists (one of them per key).
 * Basic keys make views; a mask reads its own values once (the result's shape depends on
 * them), then selects like an index. Assignment builds the flat positions the key selects
 * from an arange of the tensor's size and writes the values there (masked_fill + scatter_add),
 * then the object holds the new tensor. */
#include "kiln_py.h"

#include <string.h>

/* The positions of a bool mask's true elements, as an i64 tensor (waits for the mask). */
static kiln_tensor mask_positions(kiln_tensor mask) {
    int64_t n = kiln_tensor_numel(mask);
    if (n < 0) return kiln_reshape(mask, KILN_SHAPE(-1)); /* poisoned: carries the error */
    uint8_t *m = PyMem_Malloc(n ? (size_t)n : 1);
    int64_t *pos = PyMem_Malloc(n ? (size_t)n * sizeof *pos : 8);
    if (!m || !pos) {
        PyMem_Free(m);
        PyMem_Free(pos);
        kiln_release(mask);
        PyErr_NoMemory();
        return KILN_NONE;
    }
    kiln_status st;
    Py_BEGIN_ALLOW_THREADS st = kiln_into_data(kiln_contiguous(mask), m, (size_t)n);
    Py_END_ALLOW_THREADS if (st != KILN_OK) {
        PyMem_Free(m);
        PyMem_Free(pos);
        kp_raise_status(st);
        return KILN_NONE;
    }
    int64_t k = 0;
    for (int64_t i = 0; i < n; i++)
        if (m[i]) pos[k++] = i;
    kiln_tensor r = kiln_from_data(KILN_CPU, KILN_I64, KILN_SHAPE(k), pos);
    PyMem_Free(m);
    PyMem_Free(pos);
    return r;
}

/* Applies key to h (consumed). Returns the result or NONE with an exception set. */
static kiln_tensor apply_key(kiln_tensor h, PyObject *key) {
    PyObject *items = PyTuple_Check(key) ? Py_NewRef(key) : PyTuple_Pack(1, key);
    if (!items) {
        kiln_release(h);
        return KILN_NONE;
    }
    Py_ssize_t n = PyTuple_GET_SIZE(items);
    int consumed = 0; /* dims of h the key names (None and ... name none) */
    bool ellipsis = false;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *it = PyTuple_GET_ITEM(items, i);
        if (it == Py_Ellipsis) {
            if (ellipsis) {
                kp_error_at(PyExc_IndexError, "an index can only have a single ellipsis ('...')");
                goto fail;
            }
            ellipsis = true;
        } else if (it != Py_None) {
            consumed += kp_is_tensor(it) && kiln_tensor_dtype(((kp_tensor *)it)->h) == KILN_BOOL
                            ? kiln_tensor_ndim(((kp_tensor *)it)->h)
                            : 1;
        }
    }
    int ndim = kiln_tensor_ndim(h);
    if (consumed > ndim) {
        kp_error_at(PyExc_IndexError, "too many indices for a tensor of %d dims", ndim);
        goto fail;
    }
    int dim = 0;
    bool advanced = false;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *it = PyTuple_GET_ITEM(items, i);
        if (it == Py_Ellipsis) {
            dim += kiln_tensor_ndim(h) - dim - (consumed - 0);
            consumed = 0;
            continue;
        }
        if (it == Py_None) {
            h = kiln_unsqueeze(h, dim);
            dim++;
            continue;
        }
        if (PySlice_Check(it)) {
            Py_ssize_t start, stop, step;
            if (PySlice_Unpack(it, &start, &stop, &step) < 0) goto fail;
            if (step <= 0) {
                kp_error_at(PyExc_ValueError, "slice step must be positive");
                goto fail;
            }
            int64_t size = kiln_tensor_dim(h, dim);
            Py_ssize_t len = PySlice_AdjustIndices((Py_ssize_t)size, &start, &stop, step);
            (void)len;
            if (stop < start) stop = start;
            h = kiln_slice(h, dim, start, stop, step);
            dim++;
            consumed--;
            continue;
        }
        if (PyIndex_Check(it) && !kp_is_tensor(it)) {
            Py_ssize_t v = PyNumber_AsSsize_t(it, PyExc_IndexError);
            if (v == -1 && PyErr_Occurred()) goto fail;
            int64_t size = kiln_tensor_dim(h, dim);
            if (v < -size || v >= size) {
                kp_error_at(PyExc_IndexError, "index %zd is out of bounds for dim %d of size %lld", v, dim, (long long)size);
                goto fail;
            }
            if (v < 0) v += size;
            h = kiln_squeeze(kiln_narrow(h, dim, v, 1), dim);
            consumed--;
            continue;
        }
        /* an index tensor, a bool mask, or a list of either */
        if (!kp_is_tensor(it) && !PyList_Check(it) && !PyObject_CheckBuffer(it)) {
            kp_error_at(PyExc_IndexError, "a tensor cannot be indexed by %.100s", Py_TYPE(it)->tp_name);
            goto fail;
        }
        if (advanced) {
            kp_error_at(PyExc_IndexError, "kiln takes one index tensor or mask per key");
            goto fail;
        }
        advanced = true;
        kiln_tensor idx = kp_operand(it, KILN_NONE);
        if (!idx.id) goto fail;
        kiln_dtype idt = kiln_tensor_dtype(idx);
        if (idt != KILN_BOOL && idt != KILN_I32 && idt != KILN_I64) {
            kiln_release(idx);
            kp_error_at(PyExc_IndexError, "index tensors must be integers or bools");
            goto fail;
        }
        if (idt == KILN_BOOL) {
            int md = kiln_tensor_ndim(idx);
            kiln_shape hs = kiln_tensor_shape(h), ms = kiln_tensor_shape(idx);
            for (int k = 0; k < md; k++)
                if (hs.dims[dim + k] != ms.dims[k]) {
                    kp_error_at(PyExc_IndexError, "the mask's shape does not match the indexed dims");
                    kiln_release(idx);
                    goto fail;
                }
            if (md != 1) h = kiln_flatten(h, dim, dim + md - 1);
            idx = mask_positions(idx);
            if (!idx.id) goto fail;
            h = kiln_index_select(h, dim, idx);
            consumed -= md;
            dim++;
        } else {
            kiln_shape is = kiln_tensor_shape(idx);
            int64_t size = kiln_tensor_dim(h, dim);
            /* negative indices count from the end, as in Python */
            idx = kiln_cast(idx, KILN_I64);
            kiln_tensor wrap = kiln_mul_scalar(kiln_cast(kiln_lt_scalar(kiln_ref(idx), 0), KILN_I64), (double)size);
            idx = kiln_add(idx, wrap);
            h = kiln_index_select(h, dim, kiln_reshape(idx, KILN_SHAPE(-1)));
            if (is.ndim != 1) {
                kiln_shape hs = kiln_tensor_shape(h), out = {0};
                for (int k = 0; k < dim; k++) out.dims[out.ndim++] = hs.dims[k];
                for (int k = 0; k < is.ndim; k++) out.dims[out.ndim++] = is.dims[k];
                for (int k = dim + 1; k < hs.ndim; k++) out.dims[out.ndim++] = hs.dims[k];
                if (out.ndim > KILN_MAX_DIMS) {
                    kp_error_at(PyExc_IndexError, "the result would have too many dims");
                    goto fail;
                }
                h = kiln_reshape(h, out);
            }
            dim += is.ndim;
            consumed--;
        }
    }
    Py_DECREF(items);
    return h;
fail:
    Py_DECREF(items);
    kiln_release(h);
    return KILN_NONE;
}

static PyObject *getitem(PyObject *self, PyObject *key) {
    kp_tensor *t = (kp_tensor *)self;
    if (!kp_live(t)) return NULL;
    kp_site();
    kiln_tensor r = apply_key(kiln_ref(t->h), key);
    return r.id ? kp_wrap(r) : NULL;
}

static int setitem(PyObject *self, PyObject *key, PyObject *value) {
    kp_tensor *t = (kp_tensor *)self;
    if (!value) {
        kp_error_at(PyExc_TypeError, "tensor elements cannot be deleted");
        return -1;
    }
    if (!kp_live(t)) return -1;
    if (t->requires_grad && kiln_grad_enabled()) {
        kp_error_at(PyExc_RuntimeError, "a leaf tensor that requires grad is assigned into (use kiln.no_grad())");
        return -1;
    }
    kp_site();
    kiln_shape shape = kiln_tensor_shape(t->h);
    kiln_dtype dtype = kiln_tensor_dtype(t->h);
    kiln_device dev = kiln_tensor_device(t->h);
    int64_t numel = kiln_tensor_numel(t->h);
    kiln_tensor pos = kiln_reshape(kiln_arange(dev, KILN_I64, 0, (double)numel, 1), shape);
    pos = apply_key(pos, key);
    if (!pos.id) return -1;
    kiln_shape sel = kiln_tensor_shape(pos);
    kiln_tensor v = kp_operand(value, t->h);
    if (!v.id) {
        kiln_release(pos);
        return -1;
    }
    if (kiln_tensor_dtype(v) != dtype) v = kiln_cast(v, dtype);
    kiln_tensor flat_pos = kiln_reshape(kiln_contiguous(pos), KILN_SHAPE(-1));
    kiln_tensor flat_v = kiln_reshape(kiln_contiguous(kiln_expand(v, sel)), KILN_SHAPE(-1));
    kiln_tensor hit = kiln_gt_scalar(
        kiln_scatter_add(kiln_zeros(dev, KILN_F32, KILN_SHAPE(numel)), 0, kiln_ref(flat_pos),
                         kiln_ones(dev, KILN_F32, KILN_SHAPE(kiln_tensor_numel(flat_pos)))),
        0.5);
    kiln_tensor base = kiln_masked_fill(kiln_reshape(kiln_ref(t->h), KILN_SHAPE(-1)), hit, 0);
    kiln_tensor r = kiln_reshape(kiln_scatter_add(base, 0, flat_pos, flat_v), shape);
    if (kiln_tensor_status(r) != KILN_OK) {
        kp_raise_tensor(r);
        return -1;
    }
    kiln_release(t->h);
    t->h = r;
    if (t->requires_grad) kiln_require_grad(t->h);
    return 0;
}

PyMappingMethods kp_tensor_as_mapping = {.mp_subscript = getitem, .mp_ass_subscript = setitem};
