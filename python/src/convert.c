/* Arguments and conversions: kiln.dtype objects, shapes, dim lists and device strings from
 * Python values (each bad one a TypeError or ValueError, never a crash), and copies between
 * NumPy arrays and tensors. */
#include "kiln_py.h"

#include <string.h>

typedef struct {
    PyObject_HEAD
    kiln_dtype code;
} kp_dtype;

static const char *numpy_names[KILN_DTYPE_COUNT] = {"float32", "float64", "int32", "int64", "bool", "float16", NULL};
static const char *names[KILN_DTYPE_COUNT] = {"float32", "float64", "int32", "int64", "bool", "float16", "bfloat16"};
static PyObject *dtype_objects[KILN_DTYPE_COUNT];

static PyObject *dtype_repr(PyObject *self) { return PyUnicode_FromFormat("kiln.%s", names[((kp_dtype *)self)->code]); }
static PyObject *dtype_is_float(PyObject *self, void *c) {
    (void)c;
    kiln_dtype d = ((kp_dtype *)self)->code;
    return PyBool_FromLong(d == KILN_F32 || d == KILN_F64 || d == KILN_F16 || d == KILN_BF16);
}
static PyObject *dtype_itemsize(PyObject *self, void *c) {
    (void)c;
    return PyLong_FromSize_t(kiln_dtype_size(((kp_dtype *)self)->code));
}
static PyObject *dtype_numpy_name(PyObject *self, void *c) {
    (void)c;
    const char *n = numpy_names[((kp_dtype *)self)->code];
    if (!n) Py_RETURN_NONE;
    return PyUnicode_FromString(n);
}
static PyObject *dtype_code(PyObject *self, void *c) {
    (void)c;
    return PyLong_FromLong(((kp_dtype *)self)->code);
}
static PyGetSetDef dtype_getset[] = {
    {"is_floating_point", dtype_is_float, NULL, "True for float32, float64, float16 and bfloat16.", NULL},
    {"itemsize", dtype_itemsize, NULL, "Bytes per element.", NULL},
    {"numpy_name", dtype_numpy_name, NULL, "The NumPy dtype's name (None for bfloat16).", NULL},
    {"_code", dtype_code, NULL, "kiln's dtype enumerator.", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

PyTypeObject kp_DTypeType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "kiln.dtype",
    .tp_basicsize = sizeof(kp_dtype),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "A tensor's element type: kiln.float32, kiln.int64, ...",
    .tp_repr = dtype_repr,
    .tp_getset = dtype_getset,
};

PyObject *kp_dtype_object(kiln_dtype d) {
    if ((unsigned)d >= KILN_DTYPE_COUNT) Py_RETURN_NONE;
    return Py_NewRef(dtype_objects[d]);
}

int kp_dtypes_init(PyObject *module) {
    if (PyType_Ready(&kp_DTypeType) < 0) return -1;
    for (int d = 0; d < KILN_DTYPE_COUNT; d++) {
        kp_dtype *o = PyObject_New(kp_dtype, &kp_DTypeType);
        if (!o) return -1;
        o->code = (kiln_dtype)d;
        dtype_objects[d] = (PyObject *)o;
        if (PyModule_AddObjectRef(module, names[d], (PyObject *)o) < 0) return -1;
    }
    return PyModule_AddObjectRef(module, "dtype", (PyObject *)&kp_DTypeType);
}

int kp_parse_dtype(PyObject *o, kiln_dtype dflt, kiln_dtype *out) {
    if (!o || o == Py_None) {
        *out = dflt;
        return 0;
    }
    if (Py_TYPE(o) == &kp_DTypeType) {
        *out = ((kp_dtype *)o)->code;
        return 0;
    }
    if (PyUnicode_Check(o)) {
        const char *s = PyUnicode_AsUTF8(o);
        if (!s) return -1;
        for (int d = 0; d < KILN_DTYPE_COUNT; d++)
            if (!strcmp(s, names[d])) {
                *out = (kiln_dtype)d;
                return 0;
            }
        kp_error_at(PyExc_ValueError, "unknown dtype '%s'", s);
        return -1;
    }
    kp_error_at(PyExc_TypeError, "dtype must be a kiln.dtype such as kiln.float32, not %.100s", Py_TYPE(o)->tp_name);
    return -1;
}

int kp_parse_device(PyObject *o, kiln_device *out) {
    if (!o || o == Py_None) {
        *out = KILN_CPU;
        return 0;
    }
    if (!PyUnicode_Check(o)) {
        PyObject *s = PyObject_GetAttrString(o, "type"); /* a torch.device-like object */
        if (!s) {
            kp_error_at(PyExc_TypeError, "device must be a string such as \"cpu\" or \"opencl:0\", not %.100s",
                         Py_TYPE(o)->tp_name);
            return -1;
        }
        Py_DECREF(s);
        o = PyObject_Str(o);
        if (!o) return -1;
    } else {
        Py_INCREF(o);
    }
    const char *s = PyUnicode_AsUTF8(o);
    int rc = -1;
    if (s && kiln_device_parse(s, out) == KILN_OK) {
        rc = 0;
    } else if (s) {
        kiln_clear_error();
        kp_error_at(PyExc_ValueError, "unknown device '%s' (expected \"cpu\", \"opencl\" or \"opencl:N\")", s);
    }
    Py_DECREF(o);
    return rc;
}

static int shape_from_sequence(PyObject *seq, kiln_shape *out) {
    Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
    if (n > KILN_MAX_DIMS) {
        kp_error_at(PyExc_ValueError, "a shape has at most %d dims, got %zd", KILN_MAX_DIMS, n);
        return -1;
    }
    out->ndim = (int32_t)n;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *item = PySequence_Fast_GET_ITEM(seq, i);
        if (!PyIndex_Check(item)) {
            kp_error_at(PyExc_TypeError, "shape entries must be integers, not %.100s", Py_TYPE(item)->tp_name);
            return -1;
        }
        long long v = PyLong_AsLongLong(item);
        if (v == -1 && PyErr_Occurred()) {
            PyErr_Clear();
            kp_error_at(PyExc_ValueError, "shape entry out of range");
            return -1;
        }
        if (v < -1) {
            kp_error_at(PyExc_ValueError, "negative dimension %lld", v);
            return -1;
        }
        out->dims[i] = v;
    }
    return 0;
}

int kp_parse_shape(PyObject *args, kiln_shape *out) {
    PyObject *src = args;
    if (PyTuple_Check(args) && PyTuple_GET_SIZE(args) == 1 && !PyIndex_Check(PyTuple_GET_ITEM(args, 0)))
        src = PyTuple_GET_ITEM(args, 0);
    if (PyIndex_Check(src)) {
        PyObject *t = PyTuple_Pack(1, src);
        if (!t) return -1;
        int rc = kp_parse_shape(t, out);
        Py_DECREF(t);
        return rc;
    }
    if (!PyTuple_Check(src) && !PyList_Check(src)) {
        kp_error_at(PyExc_TypeError, "a shape is integers or a tuple of them, not %.100s", Py_TYPE(src)->tp_name);
        return -1;
    }
    PyObject *seq = PySequence_Fast(src, "shape");
    if (!seq) return -1;
    int rc = shape_from_sequence(seq, out);
    Py_DECREF(seq);
    return rc;
}

int kp_parse_dims(PyObject *o, int ndim, kiln_dims *out) {
    (void)ndim;
    if (PyIndex_Check(o)) {
        long v = PyLong_AsLong(o);
        if (v == -1 && PyErr_Occurred()) return -1;
        if (v < -KILN_MAX_DIMS || v >= KILN_MAX_DIMS) {
            kp_error_at(PyExc_IndexError, "dim %ld out of range", v);
            return -1;
        }
        out->n = 1;
        out->d[0] = (int32_t)v;
        return 0;
    }
    if (!PyTuple_Check(o) && !PyList_Check(o)) {
        kp_error_at(PyExc_TypeError, "dim must be an int or a tuple of ints, not %.100s", Py_TYPE(o)->tp_name);
        return -1;
    }
    Py_ssize_t n = PySequence_Size(o);
    if (n > KILN_MAX_DIMS) {
        kp_error_at(PyExc_ValueError, "too many dims");
        return -1;
    }
    out->n = (int32_t)n;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *item = PySequence_GetItem(o, i);
        if (!item) return -1;
        long v = PyIndex_Check(item) ? PyLong_AsLong(item) : (kp_error_at(PyExc_TypeError, "dims must be ints"), -1);
        Py_DECREF(item);
        if (v == -1 && PyErr_Occurred()) return -1;
        if (v < -KILN_MAX_DIMS || v >= KILN_MAX_DIMS) {
            kp_error_at(PyExc_IndexError, "dim %ld out of range", v);
            return -1;
        }
        out->d[i] = (int32_t)v;
    }
    return 0;
}

PyObject *kp_shape_tuple(kiln_shape s) {
    if (s.ndim < 0) return kp_error_at(PyExc_RuntimeError, "tensor handle is not valid");
    PyObject *t = PyTuple_New(s.ndim);
    if (!t) return NULL;
    for (int i = 0; i < s.ndim; i++) {
        PyObject *v = PyLong_FromLongLong(s.dims[i]);
        if (!v) {
            Py_DECREF(t);
            return NULL;
        }
        PyTuple_SET_ITEM(t, i, v);
    }
    return t;
}

/* _from_numpy(array, dtype, device): a copy of a C-contiguous array whose items are dtype's. */
PyObject *kp_from_buffer(PyObject *obj, kiln_dtype dtype, kiln_device dev) {
    Py_buffer view;
    if (PyObject_GetBuffer(obj, &view, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) < 0) return NULL;
    PyObject *result = NULL;
    kiln_shape shape = {.ndim = view.ndim};
    if (view.ndim > KILN_MAX_DIMS) {
        kp_error_at(PyExc_ValueError, "an array of %d dims (kiln takes at most %d)", view.ndim, KILN_MAX_DIMS);
        goto done;
    }
    if ((size_t)view.itemsize != kiln_dtype_size(dtype)) {
        kp_error_at(PyExc_TypeError, "array items of %zd bytes for a dtype of %zu", view.itemsize, kiln_dtype_size(dtype));
        goto done;
    }
    for (int i = 0; i < view.ndim; i++) shape.dims[i] = view.shape ? view.shape[i] : 0;
    kp_site();
    result = kp_wrap(kiln_from_data(dev, dtype, shape, view.buf));
done:
    PyBuffer_Release(&view);
    return result;
}

/* A NumPy array with t's values: one read, with the GIL released while it waits. */
PyObject *kp_to_numpy(kp_tensor *t) {
    if (!kp_live(t)) return NULL;
    kp_site();
    kiln_tensor h = kiln_ref(t->h);
    kiln_dtype dtype = kiln_tensor_dtype(h);
    if (dtype == KILN_BF16) {
        h = kiln_cast(h, KILN_F32);
        dtype = KILN_F32;
    }
    kiln_shape shape = kiln_tensor_shape(h);
    if (shape.ndim < 0 || (unsigned)dtype >= KILN_DTYPE_COUNT) {
        return kp_raise_tensor(h);
    }
    PyObject *dims = kp_shape_tuple(shape);
    PyObject *arr = dims ? PyObject_CallMethod(kp_numpy, "empty", "Os", dims, numpy_names[dtype]) : NULL;
    Py_XDECREF(dims);
    Py_buffer view;
    if (!arr || PyObject_GetBuffer(arr, &view, PyBUF_WRITABLE | PyBUF_C_CONTIGUOUS) < 0) {
        Py_XDECREF(arr);
        kiln_release(h);
        return NULL;
    }
    kiln_status st;
    Py_BEGIN_ALLOW_THREADS st = kiln_into_data(h, view.buf, (size_t)view.len);
    Py_END_ALLOW_THREADS PyBuffer_Release(&view);
    if (st != KILN_OK) {
        Py_DECREF(arr);
        return kp_raise_status(st);
    }
    return arr;
}
