/* Tensor methods with their own argument forms (shapes as varargs, optional dims, tuples of
 * results): views, casts and moves, max/min with indices, clamp, autograd entry points. */
#include "kiln_py.h"

#include <math.h>
#include <string.h>

#include "args.h"

#define FASTKW (METH_FASTCALL | METH_KEYWORDS)
#define CFN(f) ((PyCFunction)(void (*)(void))(f))

static kiln_tensor self_ref(PyObject *self) {
    kp_tensor *t = (kp_tensor *)self;
    return kp_live(t) ? kp_take(self) : KILN_NONE;
}

/* A shape given as t.reshape(2, 3) or t.reshape((2, 3)). */
static int shape_of_args(PyObject *const *args, Py_ssize_t n, kiln_shape *out) {
    PyObject *tuple = PyTuple_New(n);
    if (!tuple) return -1;
    for (Py_ssize_t i = 0; i < n; i++) PyTuple_SET_ITEM(tuple, i, Py_NewRef(args[i]));
    int rc = kp_parse_shape(tuple, out);
    Py_DECREF(tuple);
    return rc;
}

static PyObject *m_reshape(PyObject *self, PyObject *const *args, Py_ssize_t n) {
    kiln_shape s;
    if (shape_of_args(args, n, &s) < 0) return NULL;
    kp_site();
    kiln_tensor h = self_ref(self);
    return h.id ? kp_wrap(kiln_reshape(h, s)) : NULL;
}

static PyObject *m_expand(PyObject *self, PyObject *const *args, Py_ssize_t n) {
    kiln_shape s;
    if (shape_of_args(args, n, &s) < 0) return NULL;
    kp_site();
    kiln_tensor h = self_ref(self);
    return h.id ? kp_wrap(kiln_expand(h, s)) : NULL;
}

static PyObject *m_permute(PyObject *self, PyObject *const *args, Py_ssize_t n) {
    kiln_dims d;
    PyObject *src = n == 1 && !PyIndex_Check(args[0]) ? Py_NewRef(args[0]) : PyTuple_New(n);
    if (!src) return NULL;
    if (!(n == 1 && !PyIndex_Check(args[0])))
        for (Py_ssize_t i = 0; i < n; i++) PyTuple_SET_ITEM(src, i, Py_NewRef(args[i]));
    int rc = kp_parse_dims(src, 0, &d);
    Py_DECREF(src);
    if (rc < 0) return NULL;
    kp_site();
    kiln_tensor h = self_ref(self);
    return h.id ? kp_wrap(kiln_permute(h, d)) : NULL;
}

static PyObject *m_transpose(PyObject *self, PyObject *const *args, Py_ssize_t n, PyObject *kw) {
    static const char *const names[] = {"dim0", "dim1"};
    PyObject *a[2];
    long d0, d1;
    if (kp_args("transpose", args, n, kw, names, a, 2) < 0 || !a[0] || !a[1]) {
        if (!PyErr_Occurred()) kp_error_at(PyExc_TypeError, "transpose() takes dim0 and dim1");
        return NULL;
    }
    if (kp_int_arg(a[0], 0, &d0) < 0 || kp_int_arg(a[1], 0, &d1) < 0) return NULL;
    kp_site();
    kiln_tensor h = self_ref(self);
    return h.id ? kp_wrap(kiln_transpose(h, (int)d0, (int)d1)) : NULL;
}

static PyObject *m_t(PyObject *self, PyObject *unused) {
    (void)unused;
    kp_tensor *t = (kp_tensor *)self;
    if (!kp_live(t)) return NULL;
    if (kiln_tensor_ndim(t->h) > 2) return kp_error_at(PyExc_ValueError, "t() expects a tensor of at most 2 dims");
    kp_site();
    kiln_tensor h = self_ref(self);
    if (kiln_tensor_ndim(h) < 2) return kp_wrap(h);
    return kp_wrap(kiln_transpose(h, 0, 1));
}

static PyObject *m_squeeze(PyObject *self, PyObject *const *args, Py_ssize_t n, PyObject *kw) {
    static const char *const names[] = {"dim"};
    PyObject *a[1];
    if (kp_args("squeeze", args, n, kw, names, a, 1) < 0) return NULL;
    kp_site();
    if (a[0] && a[0] != Py_None) {
        long d;
        if (kp_int_arg(a[0], 0, &d) < 0) return NULL;
        kiln_tensor h = self_ref(self);
        if (!h.id) return NULL;
        int nd = kiln_tensor_ndim(h);
        if (d >= -nd && d < nd && kiln_tensor_dim(h, (int)(d < 0 ? d + nd : d)) != 1) return kp_wrap(h);
        return kp_wrap(kiln_squeeze(h, (int)d));
    }
    kiln_tensor h = self_ref(self);
    if (!h.id) return NULL;
    kiln_shape s = kiln_tensor_shape(h), out = {0};
    for (int i = 0; i < s.ndim; i++)
        if (s.dims[i] != 1) out.dims[out.ndim++] = s.dims[i];
    return kp_wrap(kiln_reshape(h, out));
}

static PyObject *m_flatten(PyObject *self, PyObject *const *args, Py_ssize_t n, PyObject *kw) {
    static const char *const names[] = {"start_dim", "end_dim"};
    PyObject *a[2];
    long s, e;
    if (kp_args("flatten", args, n, kw, names, a, 2) < 0 || kp_int_arg(a[0], 0, &s) < 0 || kp_int_arg(a[1], -1, &e) < 0)
        return NULL;
    kp_site();
    kiln_tensor h = self_ref(self);
    if (!h.id) return NULL;
    if (kiln_tensor_ndim(h) == 0) return kp_wrap(kiln_reshape(h, KILN_SHAPE(1)));
    return kp_wrap(kiln_flatten(h, (int)s, (int)e));
}

static PyObject *m_to(PyObject *self, PyObject *const *args, Py_ssize_t n, PyObject *kw) {
    static const char *const names[] = {"a", "b", "dtype", "device"};
    PyObject *a[4];
    if (kp_args("to", args, n, kw, names, a, 4) < 0) return NULL;
    PyObject *dtype_o = a[2], *device_o = a[3];
    for (int i = 0; i < 2; i++) {
        if (!a[i]) continue;
        if (Py_TYPE(a[i]) == &kp_DTypeType)
            dtype_o = a[i];
        else if (kp_is_tensor(a[i])) {
            kp_tensor *o = (kp_tensor *)a[i];
            if (!kp_live(o)) return NULL;
            dtype_o = kp_dtype_object(kiln_tensor_dtype(o->h));
            Py_DECREF(dtype_o); /* the dtype objects live as long as the module */
        } else
            device_o = a[i];
    }
    kp_tensor *t = (kp_tensor *)self;
    if (!kp_live(t)) return NULL;
    kiln_dtype dtype;
    kiln_device dev;
    if (kp_parse_dtype(dtype_o, kiln_tensor_dtype(t->h), &dtype) < 0) return NULL;
    if (device_o) {
        if (kp_parse_device(device_o, &dev) < 0) return NULL;
    } else
        dev = kiln_tensor_device(t->h);
    if (dtype == kiln_tensor_dtype(t->h) && dev == kiln_tensor_device(t->h)) return Py_NewRef(self);
    kp_site();
    kiln_tensor h = self_ref(self);
    if (!h.id) return NULL;
    if (dtype != kiln_tensor_dtype(h)) h = kiln_cast(h, dtype);
    if (dev != kiln_tensor_device(h)) h = kiln_to_device(h, dev);
    return kp_wrap(h);
}

static PyObject *cast_to(PyObject *self, kiln_dtype d) {
    kp_tensor *t = (kp_tensor *)self;
    if (!kp_live(t)) return NULL;
    if (kiln_tensor_dtype(t->h) == d) return Py_NewRef(self);
    kp_site();
    kiln_tensor h = self_ref(self);
    return h.id ? kp_wrap(kiln_cast(h, d)) : NULL;
}
static PyObject *m_float(PyObject *s, PyObject *u) { (void)u; return cast_to(s, KILN_F32); }
static PyObject *m_double(PyObject *s, PyObject *u) { (void)u; return cast_to(s, KILN_F64); }
static PyObject *m_half(PyObject *s, PyObject *u) { (void)u; return cast_to(s, KILN_F16); }
static PyObject *m_bfloat16(PyObject *s, PyObject *u) { (void)u; return cast_to(s, KILN_BF16); }
static PyObject *m_int(PyObject *s, PyObject *u) { (void)u; return cast_to(s, KILN_I32); }
static PyObject *m_long(PyObject *s, PyObject *u) { (void)u; return cast_to(s, KILN_I64); }
static PyObject *m_bool(PyObject *s, PyObject *u) { (void)u; return cast_to(s, KILN_BOOL); }
static PyObject *m_cpu(PyObject *self, PyObject *u) {
    (void)u;
    kp_tensor *t = (kp_tensor *)self;
    if (!kp_live(t)) return NULL;
    if (kiln_tensor_device(t->h) == KILN_CPU) return Py_NewRef(self);
    kp_site();
    return kp_wrap(kiln_to_device(kiln_ref(t->h), KILN_CPU));
}

static PyObject *m_size(PyObject *self, PyObject *const *args, Py_ssize_t n) {
    kp_tensor *t = (kp_tensor *)self;
    if (!kp_live(t)) return NULL;
    kiln_shape s = kiln_tensor_shape(t->h);
    if (n == 0) return kp_shape_tuple(s);
    long d;
    if (n > 1 || kp_int_arg(args[0], 0, &d) < 0) {
        if (!PyErr_Occurred()) kp_error_at(PyExc_TypeError, "size() takes at most one dim");
        return NULL;
    }
    if (d < -s.ndim || d >= s.ndim) return kp_error_at(PyExc_IndexError, "dim %ld out of range for %d dims", d, s.ndim);
    return PyLong_FromLongLong(s.dims[d < 0 ? d + s.ndim : d]);
}
static PyObject *m_dim(PyObject *self, PyObject *u) {
    (void)u;
    kp_tensor *t = (kp_tensor *)self;
    return kp_live(t) ? PyLong_FromLong(kiln_tensor_ndim(t->h)) : NULL;
}
static PyObject *m_numel(PyObject *self, PyObject *u) {
    (void)u;
    kp_tensor *t = (kp_tensor *)self;
    return kp_live(t) ? PyLong_FromLongLong(kiln_tensor_numel(t->h)) : NULL;
}

/* max / min: the whole tensor's value, or (values, indices) along one dim as torch's. */
static PyObject *extreme(PyObject *self, PyObject *const *args, Py_ssize_t n, PyObject *kw, bool is_max) {
    static const char *const names[] = {"dim", "keepdim"};
    PyObject *a[2];
    const char *name = is_max ? "max" : "min";
    if (kp_args(name, args, n, kw, names, a, 2) < 0) return NULL;
    if (a[0] && kp_is_tensor(a[0])) /* t.max(other): elementwise */
        return kp_binary(self, a[0], is_max ? kiln_maximum : kiln_minimum, NULL, NULL);
    bool keepdim;
    if (kp_bool_arg(a[1], false, &keepdim) < 0) return NULL;
    kp_site();
    if (!a[0] || a[0] == Py_None) {
        kiln_tensor h = self_ref(self);
        return h.id ? kp_wrap(is_max ? kiln_max(h) : kiln_min(h)) : NULL;
    }
    long d;
    if (kp_int_arg(a[0], 0, &d) < 0) return NULL;
    kp_tensor *t = (kp_tensor *)self;
    if (!kp_live(t)) return NULL;
    PyObject *values = kp_wrap((is_max ? kiln_max_dims : kiln_min_dims)(kiln_ref(t->h), KILN_DIMS((int)d), keepdim));
    if (!values) return NULL;
    PyObject *indices = kp_wrap((is_max ? kiln_argmax : kiln_argmin)(kiln_ref(t->h), (int)d, keepdim));
    if (!indices) {
        Py_DECREF(values);
        return NULL;
    }
    return Py_BuildValue("(NN)", values, indices);
}
static PyObject *m_max(PyObject *s, PyObject *const *a, Py_ssize_t n, PyObject *kw) { return extreme(s, a, n, kw, true); }
static PyObject *m_min(PyObject *s, PyObject *const *a, Py_ssize_t n, PyObject *kw) { return extreme(s, a, n, kw, false); }

static PyObject *arg_extreme(PyObject *self, PyObject *const *args, Py_ssize_t n, PyObject *kw, bool is_max) {
    static const char *const names[] = {"dim", "keepdim"};
    PyObject *a[2];
    bool keepdim;
    if (kp_args(is_max ? "argmax" : "argmin", args, n, kw, names, a, 2) < 0 || kp_bool_arg(a[1], false, &keepdim) < 0)
        return NULL;
    kp_site();
    kiln_tensor h = self_ref(self);
    if (!h.id) return NULL;
    long d = 0;
    if (!a[0] || a[0] == Py_None)
        h = kiln_reshape(h, KILN_SHAPE(-1));
    else if (kp_int_arg(a[0], 0, &d) < 0) {
        kiln_release(h);
        return NULL;
    }
    return kp_wrap((is_max ? kiln_argmax : kiln_argmin)(h, (int)d, keepdim));
}
static PyObject *m_argmax(PyObject *s, PyObject *const *a, Py_ssize_t n, PyObject *kw) { return arg_extreme(s, a, n, kw, true); }
static PyObject *m_argmin(PyObject *s, PyObject *const *a, Py_ssize_t n, PyObject *kw) { return arg_extreme(s, a, n, kw, false); }

static PyObject *spread(PyObject *self, PyObject *const *args, Py_ssize_t n, PyObject *kw, bool is_std) {
    static const char *const names[] = {"dim", "unbiased", "keepdim", "correction"};
    PyObject *a[4];
    bool unbiased, keepdim;
    long correction;
    if (kp_args(is_std ? "std" : "var", args, n, kw, names, a, 4) < 0 || kp_bool_arg(a[1], true, &unbiased) < 0 ||
        kp_bool_arg(a[2], false, &keepdim) < 0 || kp_int_arg(a[3], unbiased ? 1 : 0, &correction) < 0)
        return NULL;
    kiln_dims dims = KILN_ALL_DIMS;
    if (a[0] && a[0] != Py_None && kp_parse_dims(a[0], 0, &dims) < 0) return NULL;
    kp_site();
    kiln_tensor h = self_ref(self);
    if (!h.id) return NULL;
    return kp_wrap((is_std ? kiln_std_dims : kiln_var_dims)(h, dims, (int)correction, keepdim));
}
static PyObject *m_var(PyObject *s, PyObject *const *a, Py_ssize_t n, PyObject *kw) { return spread(s, a, n, kw, false); }
static PyObject *m_std(PyObject *s, PyObject *const *a, Py_ssize_t n, PyObject *kw) { return spread(s, a, n, kw, true); }

static PyObject *m_clamp(PyObject *self, PyObject *const *args, Py_ssize_t n, PyObject *kw) {
    static const char *const names[] = {"min", "max"};
    PyObject *a[2];
    double lo, hi;
    if (kp_args("clamp", args, n, kw, names, a, 2) < 0 || kp_double_arg(a[0], NAN, &lo) < 0 || kp_double_arg(a[1], NAN, &hi) < 0)
        return NULL;
    kp_site();
    kiln_tensor h = self_ref(self);
    return h.id ? kp_wrap(kiln_clamp(h, lo, hi)) : NULL;
}

static PyObject *m_masked_fill(PyObject *self, PyObject *const *args, Py_ssize_t n) {
    double v;
    if (n != 2 || !kp_is_tensor(args[0])) return kp_error_at(PyExc_TypeError, "masked_fill(mask, value) takes a bool tensor and a number");
    if (kp_double_arg(args[1], 0, &v) < 0) return NULL;
    kp_site();
    kiln_tensor h = self_ref(self);
    if (!h.id) return NULL;
    kiln_tensor m = kp_take(args[0]);
    if (!m.id) {
        kiln_release(h);
        return NULL;
    }
    return kp_wrap(kiln_masked_fill(h, m, v));
}

static PyObject *m_detach(PyObject *self, PyObject *u) {
    (void)u;
    kp_site();
    kiln_tensor h = self_ref(self);
    return h.id ? kp_wrap(kiln_detach(h)) : NULL;
}

int kp_mark_leaf(kp_tensor *t, bool on);
static PyObject *m_requires_grad_(PyObject *self, PyObject *const *args, Py_ssize_t n) {
    bool on = true;
    if (n > 1 || (n == 1 && kp_bool_arg(args[0], true, &on) < 0)) {
        if (!PyErr_Occurred()) kp_error_at(PyExc_TypeError, "requires_grad_() takes one bool");
        return NULL;
    }
    if (kp_mark_leaf((kp_tensor *)self, on) < 0) return NULL;
    return Py_NewRef(self);
}

/* loss.backward(): kiln's freeing backward over the graph, then each marked leaf's gradient
 * added to its .grad (the first one is stored as it comes). */
static PyObject *m_backward(PyObject *self, PyObject *const *args, Py_ssize_t n, PyObject *kw) {
    static const char *const names[] = {"gradient"};
    PyObject *a[1];
    if (kp_args("backward", args, n, kw, names, a, 1) < 0) return NULL;
    kp_tensor *t = (kp_tensor *)self;
    if (!kp_live(t)) return NULL;
    kp_site();
    kiln_grads *g = NULL;
    kiln_status st;
    kiln_tensor root = kiln_ref(t->h);
    if (a[0] && a[0] != Py_None) {
        kiln_tensor seed = kp_operand(a[0], t->h);
        if (!seed.id) {
            kiln_release(root);
            return NULL;
        }
        st = kiln_backward_seed(root, seed, &g);
    } else {
        st = kiln_backward(root, &g);
    }
    if (st != KILN_OK) {
        kiln_grads_free(g);
        return kp_raise_status(st);
    }
    for (kp_tensor *leaf = kp_leaves.leaf_next; leaf != &kp_leaves; leaf = leaf->leaf_next) {
        if (!leaf->h.id) continue;
        kiln_tensor d = kiln_grad(g, leaf->h);
        if (!d.id) continue;
        if (leaf->grad && kp_is_tensor(leaf->grad) && ((kp_tensor *)leaf->grad)->h.id) {
            kp_tensor *acc = (kp_tensor *)leaf->grad;
            acc->h = kiln_add(acc->h, d);
        } else {
            PyObject *w = kp_wrap(d);
            if (!w) {
                kiln_grads_free(g);
                return NULL;
            }
            Py_XSETREF(leaf->grad, w);
        }
    }
    kiln_grads_free(g);
    Py_RETURN_NONE;
}

static PyObject *m_zero_(PyObject *self, PyObject *u) {
    (void)u;
    kp_tensor *t = (kp_tensor *)self;
    if (!kp_live(t)) return NULL;
    kp_site();
    kiln_tensor old = t->h;
    t->h = kiln_zeros_like(old);
    if (t->requires_grad) kiln_require_grad(t->h);
    return Py_NewRef(self);
}

PyMethodDef kp_tensor_more_methods[] = {
    {"reshape", CFN(m_reshape), METH_FASTCALL, "The same data in another shape (a view when possible)."},
    {"view", CFN(m_reshape), METH_FASTCALL, "The same data in another shape."},
    {"expand", CFN(m_expand), METH_FASTCALL, "Size-1 dims repeated to the given sizes (a view); -1 keeps a dim."},
    {"permute", CFN(m_permute), METH_FASTCALL, "The dims in another order (a view)."},
    {"transpose", CFN(m_transpose), FASTKW, "Two dims swapped (a view)."},
    {"t", m_t, METH_NOARGS, "A 2-d tensor transposed."},
    {"squeeze", CFN(m_squeeze), FASTKW, "Size-1 dims removed (one, or all)."},
    {"flatten", CFN(m_flatten), FASTKW, "Dims start_dim..end_dim merged into one."},
    {"to", CFN(m_to), FASTKW, "A copy with another dtype and/or device (self when nothing changes)."},
    {"cpu", m_cpu, METH_NOARGS, "The tensor on the CPU."},
    {"float", m_float, METH_NOARGS, "Cast to float32."},
    {"double", m_double, METH_NOARGS, "Cast to float64."},
    {"half", m_half, METH_NOARGS, "Cast to float16."},
    {"bfloat16", m_bfloat16, METH_NOARGS, "Cast to bfloat16."},
    {"int", m_int, METH_NOARGS, "Cast to int32."},
    {"long", m_long, METH_NOARGS, "Cast to int64."},
    {"bool", m_bool, METH_NOARGS, "Cast to bool."},
    {"size", CFN(m_size), METH_FASTCALL, "The shape, or one dim's size."},
    {"dim", m_dim, METH_NOARGS, "The number of dims."},
    {"numel", m_numel, METH_NOARGS, "The number of elements."},
    {"max", CFN(m_max), FASTKW, "The largest value, or (values, indices) along dim."},
    {"min", CFN(m_min), FASTKW, "The smallest value, or (values, indices) along dim."},
    {"argmax", CFN(m_argmax), FASTKW, "Index of the largest value (of the flattened tensor without dim)."},
    {"argmin", CFN(m_argmin), FASTKW, "Index of the smallest value."},
    {"var", CFN(m_var), FASTKW, "Variance over dims (unbiased by default)."},
    {"std", CFN(m_std), FASTKW, "Standard deviation over dims (unbiased by default)."},
    {"clamp", CFN(m_clamp), FASTKW, "Values limited to [min, max]."},
    {"masked_fill", CFN(m_masked_fill), METH_FASTCALL, "value where the bool mask is true."},
    {"detach", m_detach, METH_NOARGS, "The same data without its autograd graph."},
    {"requires_grad_", CFN(m_requires_grad_), METH_FASTCALL, "Marks the tensor as a leaf that backward differentiates."},
    {"backward", CFN(m_backward), FASTKW, "Computes the gradients of this scalar into the leaves' .grad."},
    {"zero_", m_zero_, METH_NOARGS, "Sets every element to zero."},
    {NULL, NULL, 0, NULL},
};
