/* The Tensor type: a Python object holding one kiln handle. Ops get a new reference to it
 * (kiln_ref), so nothing is consumed behind the user's back, except a temporary the
 * interpreter alone holds (elide.c). Results poisoned at dispatch (bad shapes, dtypes,
 * devices) raise at once; errors found while an op runs surface at the next read. */
#include "kiln_py.h"

#include <math.h>
#include <string.h>

PyObject *kp_tensor_factory;
kp_tensor kp_leaves = {.leaf_prev = &kp_leaves, .leaf_next = &kp_leaves};

void kp_leaf_link(kp_tensor *t) {
    if (t->leaf_next) return;
    t->leaf_next = kp_leaves.leaf_next;
    t->leaf_prev = &kp_leaves;
    kp_leaves.leaf_next->leaf_prev = t;
    kp_leaves.leaf_next = t;
}

void kp_leaf_unlink(kp_tensor *t) {
    if (!t->leaf_next) return;
    t->leaf_prev->leaf_next = t->leaf_next;
    t->leaf_next->leaf_prev = t->leaf_prev;
    t->leaf_next = t->leaf_prev = NULL;
}

/* A result that carries an error: poisoned at dispatch, or made from an input whose op
 * already failed while it ran. A read reports the error (once, with its op and line). */
PyObject *kp_raise_tensor(kiln_tensor h) {
    kiln_status st;
    Py_BEGIN_ALLOW_THREADS st = kiln_to_string(h, NULL, 0, NULL);
    Py_END_ALLOW_THREADS if (st == KILN_ERR_BUFFER_SIZE) st = kiln_tensor_status(h);
    kiln_release(h);
    return kp_raise_status(st != KILN_OK ? st : KILN_ERR_INTERNAL);
}

PyObject *kp_wrap(kiln_tensor h) {
    if (kiln_tensor_status(h) != KILN_OK) return kp_raise_tensor(h);
    kp_tensor *t = PyObject_New(kp_tensor, &kp_TensorType);
    if (!t) {
        kiln_release(h);
        return NULL;
    }
    t->h = h;
    t->grad = NULL;
    t->requires_grad = false;
    t->leaf_prev = t->leaf_next = NULL;
    t->weakreflist = NULL;
    t->dict = NULL;
    return (PyObject *)t;
}

kiln_tensor kp_take(PyObject *o) {
    kp_tensor *t = (kp_tensor *)o;
    if (!kp_live(t)) return KILN_NONE;
    if (kp_elidable(o)) {
        kiln_tensor h = t->h;
        t->h = KILN_NONE;
        return h;
    }
    return kiln_ref(t->h);
}

kiln_tensor kp_operand(PyObject *o, kiln_tensor like) {
    if (kp_is_tensor(o)) return kp_take(o);
    if (PyFloat_Check(o) || PyLong_Check(o)) {
        double v = PyFloat_AsDouble(o);
        if (v == -1.0 && PyErr_Occurred()) return KILN_NONE;
        kiln_dtype dtype = like.id ? kiln_tensor_dtype(like) : KILN_F32;
        if (PyFloat_Check(o) && dtype != KILN_F64 && dtype != KILN_F16 && dtype != KILN_BF16) dtype = KILN_F32;
        if (PyBool_Check(o) && !like.id) dtype = KILN_BOOL;
        return kiln_full(like.id ? kiln_tensor_device(like) : KILN_CPU, dtype, KILN_SCALAR_SHAPE, v);
    }
    if (!kp_tensor_factory) {
        kp_error_at(PyExc_TypeError, "expected a tensor, not %.100s", Py_TYPE(o)->tp_name);
        return KILN_NONE;
    }
    PyObject *made = PyObject_CallOneArg(kp_tensor_factory, o);
    if (!made) return KILN_NONE;
    if (!kp_is_tensor(made)) {
        Py_DECREF(made);
        kp_error_at(PyExc_TypeError, "kiln.tensor returned no tensor");
        return KILN_NONE;
    }
    kiln_tensor h = kiln_ref(((kp_tensor *)made)->h);
    Py_DECREF(made);
    if (like.id && kiln_tensor_device(h) != kiln_tensor_device(like)) h = kiln_to_device(h, kiln_tensor_device(like));
    return h;
}

static void tensor_dealloc(PyObject *self) {
    kp_tensor *t = (kp_tensor *)self;
    kp_leaf_unlink(t);
    if (t->weakreflist) PyObject_ClearWeakRefs(self);
    if (t->h.id) kiln_release(t->h);
    Py_CLEAR(t->grad);
    Py_CLEAR(t->dict);
    Py_TYPE(self)->tp_free(self);
}

/* ---- reads ---- */
static PyObject *tensor_repr(PyObject *self) {
    kp_tensor *t = (kp_tensor *)self;
    if (!kp_live(t)) return NULL;
    kp_site();
    char small[1024];
    size_t needed = 0;
    kiln_status st;
    Py_BEGIN_ALLOW_THREADS st = kiln_to_string(t->h, small, sizeof small, &needed);
    Py_END_ALLOW_THREADS if (st == KILN_OK) return PyUnicode_FromString(small);
    if (st != KILN_ERR_BUFFER_SIZE) return kp_raise_status(st);
    char *big = PyMem_Malloc(needed);
    if (!big) return PyErr_NoMemory();
    Py_BEGIN_ALLOW_THREADS st = kiln_to_string(t->h, big, needed, NULL);
    Py_END_ALLOW_THREADS PyObject *s = st == KILN_OK ? PyUnicode_FromString(big) : kp_raise_status(st);
    PyMem_Free(big);
    return s;
}

static PyObject *tensor_item(PyObject *self, PyObject *unused) {
    (void)unused;
    kp_tensor *t = (kp_tensor *)self;
    if (!kp_live(t)) return NULL;
    kp_site();
    kiln_dtype dtype = kiln_tensor_dtype(t->h);
    kiln_status st;
    if (dtype == KILN_I64 || dtype == KILN_I32 || dtype == KILN_BOOL) {
        if (kiln_tensor_numel(t->h) != 1) {
            kp_error_at(PyExc_ValueError, "item() needs a tensor of one element");
            return NULL;
        }
        kiln_tensor h = kiln_cast(kiln_ref(t->h), KILN_I64);
        int64_t v = 0;
        Py_BEGIN_ALLOW_THREADS st = kiln_into_data(h, &v, sizeof v);
        Py_END_ALLOW_THREADS if (st != KILN_OK) return kp_raise_status(st);
        return dtype == KILN_BOOL ? PyBool_FromLong(v != 0) : PyLong_FromLongLong(v);
    }
    double v = 0;
    kiln_tensor h = kiln_ref(t->h);
    Py_BEGIN_ALLOW_THREADS st = kiln_into_scalar_f64(h, &v);
    Py_END_ALLOW_THREADS if (st != KILN_OK) return kp_raise_status(st);
    return PyFloat_FromDouble(v);
}

static PyObject *tensor_numpy(PyObject *self, PyObject *unused) {
    (void)unused;
    return kp_to_numpy((kp_tensor *)self);
}

static PyObject *tensor_array(PyObject *self, PyObject *args, PyObject *kw) {
    (void)kw;
    PyObject *arr = kp_to_numpy((kp_tensor *)self);
    PyObject *dtype = PyTuple_GET_SIZE(args) > 0 ? PyTuple_GET_ITEM(args, 0) : Py_None;
    if (!arr || dtype == Py_None) return arr;
    PyObject *cast = PyObject_CallMethod(arr, "astype", "O", dtype);
    Py_DECREF(arr);
    return cast;
}

static PyObject *tensor_tolist(PyObject *self, PyObject *unused) {
    (void)unused;
    PyObject *arr = kp_to_numpy((kp_tensor *)self);
    if (!arr) return NULL;
    PyObject *list = PyObject_CallMethod(arr, "tolist", NULL);
    Py_DECREF(arr);
    return list;
}

static PyObject *tensor_float(PyObject *self) {
    PyObject *v = tensor_item(self, NULL);
    if (!v || PyFloat_Check(v)) return v;
    PyObject *f = PyNumber_Float(v);
    Py_DECREF(v);
    return f;
}

static PyObject *tensor_int(PyObject *self) {
    PyObject *v = tensor_item(self, NULL);
    if (!v || PyLong_CheckExact(v)) return v;
    PyObject *i = PyNumber_Long(v);
    Py_DECREF(v);
    return i;
}

static int tensor_bool(PyObject *self) {
    kp_tensor *t = (kp_tensor *)self;
    if (!kp_live(t)) return -1;
    if (kiln_tensor_numel(t->h) != 1) {
        kp_error_at(PyExc_RuntimeError, "the truth value of a tensor with more than one element is ambiguous");
        return -1;
    }
    PyObject *v = tensor_item(self, NULL);
    if (!v) return -1;
    int r = PyObject_IsTrue(v);
    Py_DECREF(v);
    return r;
}

static PyObject *tensor_index(PyObject *self) {
    kp_tensor *t = (kp_tensor *)self;
    if (!kp_live(t)) return NULL;
    kiln_dtype d = kiln_tensor_dtype(t->h);
    if (d != KILN_I32 && d != KILN_I64 && d != KILN_BOOL) {
        kp_error_at(PyExc_TypeError, "only integer tensors of one element can be converted to an index");
        return NULL;
    }
    return tensor_int(self);
}

static Py_ssize_t tensor_len(PyObject *self) {
    kp_tensor *t = (kp_tensor *)self;
    if (!kp_live(t)) return -1;
    if (kiln_tensor_ndim(t->h) == 0) {
        kp_error_at(PyExc_TypeError, "len() of a 0-d tensor");
        return -1;
    }
    return (Py_ssize_t)kiln_tensor_dim(t->h, 0);
}

/* iter(t) and unpacking (`q, k, v = t`) yield the views t[0], t[1], ... made all at once, as
 * PyTorch's unbind(0) does, so the tensor may be changed while they are consumed. */
static PyObject *tensor_iter(PyObject *self) {
    kp_tensor *t = (kp_tensor *)self;
    if (!kp_live(t)) return NULL;
    if (kiln_tensor_ndim(t->h) == 0) {
        kp_error_at(PyExc_TypeError, "iteration over a 0-d tensor");
        return NULL;
    }
    Py_ssize_t n = (Py_ssize_t)kiln_tensor_dim(t->h, 0);
    PyObject *rows = PyList_New(n);
    if (!rows) return NULL;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *key = PyLong_FromSsize_t(i);
        PyObject *row = key ? PyObject_GetItem(self, key) : NULL;
        Py_XDECREF(key);
        if (!row) {
            Py_DECREF(rows);
            return NULL;
        }
        PyList_SET_ITEM(rows, i, row);
    }
    PyObject *it = PyObject_GetIter(rows);
    Py_DECREF(rows);
    return it;
}

/* ---- attributes ---- */
static PyObject *get_shape(PyObject *self, void *c) {
    (void)c;
    kp_tensor *t = (kp_tensor *)self;
    if (!kp_live(t)) return NULL;
    return kp_shape_tuple(kiln_tensor_shape(t->h));
}
static PyObject *get_dtype(PyObject *self, void *c) {
    (void)c;
    kp_tensor *t = (kp_tensor *)self;
    if (!kp_live(t)) return NULL;
    return kp_dtype_object(kiln_tensor_dtype(t->h));
}
static PyObject *get_device(PyObject *self, void *c) {
    (void)c;
    kp_tensor *t = (kp_tensor *)self;
    if (!kp_live(t)) return NULL;
    return PyUnicode_FromString(kiln_device_name(kiln_tensor_device(t->h)));
}
static PyObject *get_ndim(PyObject *self, void *c) {
    (void)c;
    kp_tensor *t = (kp_tensor *)self;
    if (!kp_live(t)) return NULL;
    return PyLong_FromLong(kiln_tensor_ndim(t->h));
}
static PyObject *get_requires_grad(PyObject *self, void *c) {
    (void)c;
    kp_tensor *t = (kp_tensor *)self;
    if (!kp_live(t)) return NULL;
    return PyBool_FromLong(t->requires_grad || kiln_requires_grad(t->h));
}
static PyObject *get_is_leaf(PyObject *self, void *c) {
    (void)c;
    kp_tensor *t = (kp_tensor *)self;
    if (!kp_live(t)) return NULL;
    return PyBool_FromLong(t->requires_grad || !kiln_requires_grad(t->h));
}

int kp_mark_leaf(kp_tensor *t, bool on) {
    if (!kp_live(t)) return -1;
    if (!on) {
        if (t->requires_grad) {
            kp_error_at(PyExc_RuntimeError, "requires_grad cannot be turned off on a leaf; use .detach()");
            return -1;
        }
        return 0;
    }
    if (t->requires_grad) return 0;
    if (kiln_requires_grad(t->h)) {
        kp_error_at(PyExc_RuntimeError, "only a leaf tensor (not computed from tensors that require grad) can be marked; use .detach() first");
        return -1;
    }
    kp_site();
    kiln_status st = kiln_require_grad(t->h);
    if (st != KILN_OK) return kp_raise_status(st) ? 0 : -1;
    t->requires_grad = true;
    kp_leaf_link(t);
    return 0;
}
static int set_requires_grad(PyObject *self, PyObject *v, void *c) {
    (void)c;
    if (!v) {
        kp_error_at(PyExc_AttributeError, "cannot delete requires_grad");
        return -1;
    }
    int on = PyObject_IsTrue(v);
    return on < 0 ? -1 : kp_mark_leaf((kp_tensor *)self, on);
}
static PyObject *get_grad(PyObject *self, void *c) {
    (void)c;
    kp_tensor *t = (kp_tensor *)self;
    if (!t->grad) Py_RETURN_NONE;
    return Py_NewRef(t->grad);
}
static int set_grad(PyObject *self, PyObject *v, void *c) {
    (void)c;
    kp_tensor *t = (kp_tensor *)self;
    if (v && v != Py_None && !kp_is_tensor(v)) {
        kp_error_at(PyExc_TypeError, "grad must be a tensor or None");
        return -1;
    }
    Py_XSETREF(t->grad, v && v != Py_None ? Py_NewRef(v) : NULL);
    return 0;
}
static PyObject *get_T(PyObject *self, void *c) {
    (void)c;
    kp_tensor *t = (kp_tensor *)self;
    if (!kp_live(t)) return NULL;
    int nd = kiln_tensor_ndim(t->h);
    kp_site();
    if (nd < 2) return kp_wrap(kiln_ref(t->h));
    kiln_dims order = {.n = nd};
    for (int i = 0; i < nd; i++) order.d[i] = nd - 1 - i;
    return kp_wrap(kiln_permute(kiln_ref(t->h), order));
}

static PyGetSetDef tensor_getset[] = {
    {"shape", get_shape, NULL, "The sizes of the dims, a tuple.", NULL},
    {"dtype", get_dtype, NULL, "The element type (kiln.float32, ...).", NULL},
    {"device", get_device, NULL, "\"cpu\" or \"opencl:N\".", NULL},
    {"ndim", get_ndim, NULL, "The number of dims.", NULL},
    {"requires_grad", get_requires_grad, set_requires_grad, "Whether backward computes a gradient for it.", NULL},
    {"is_leaf", get_is_leaf, NULL, "True unless computed by ops that record a gradient.", NULL},
    {"grad", get_grad, set_grad, "The gradient backward accumulated (None before).", NULL},
    {"T", get_T, NULL, "The dims reversed (a view).", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyMethodDef tensor_methods[] = {
    {"item", tensor_item, METH_NOARGS, "The value of a one-element tensor as a Python number (waits)."},
    {"numpy", tensor_numpy, METH_NOARGS, "A NumPy array copy of the values (waits)."},
    {"tolist", tensor_tolist, METH_NOARGS, "The values as nested Python lists (waits)."},
    {"__array__", (PyCFunction)(void (*)(void))tensor_array, METH_VARARGS | METH_KEYWORDS, "NumPy's conversion (waits)."},
    {NULL, NULL, 0, NULL},
};

static PySequenceMethods tensor_as_sequence = {.sq_length = tensor_len};

PyTypeObject kp_TensorType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "kiln.Tensor",
    .tp_basicsize = sizeof(kp_tensor),
    .tp_dealloc = tensor_dealloc,
    .tp_repr = tensor_repr,
    .tp_as_number = &kp_tensor_as_number,
    .tp_as_sequence = &tensor_as_sequence,
    .tp_as_mapping = &kp_tensor_as_mapping,
    .tp_iter = tensor_iter,
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE,
    .tp_doc = "A tensor: a handle to kiln's asynchronous data. Ops return at once; reads wait.",
    .tp_richcompare = kp_richcompare,
    .tp_weaklistoffset = offsetof(kp_tensor, weakreflist),
    .tp_getset = tensor_getset,
    .tp_dictoffset = offsetof(kp_tensor, dict),
};

/* Methods and number slots that are not one row of the op table (ops.c) live here. */
PyMethodDef *kp_tensor_base_methods = tensor_methods;
unaryfunc kp_tensor_float = tensor_float, kp_tensor_int = tensor_int, kp_tensor_index_fn = tensor_index;
inquiry kp_tensor_bool = tensor_bool;
