/* The Python functions of the shape op table's rows whose sig has a caller here (split, chunk,
 * meshgrid, pad, one_hot, sort, argsort, topk, unfold): one caller per sig, with torch's
 * keywords and defaults, and one function per row of KP_TABLE_SHAPE_CALLS
 * (shape_table_generated.h, from src/ir/shape_table.h by scripts/gen_optable.py), so a new
 * row of an existing sig is bound with no edit here. A METHOD row is t.name(...) and
 * kiln.name(t, ...), a MODULE row kiln.name(...), a FUNCTIONAL row kiln.nn.functional.name
 * (kiln/nn/functional.py takes the names from _C._shape_functions()). Several results come back
 * as a tuple; sort and topk's as (values, indices), with those names, as torch's. */
#include "kiln_py.h"

#include <limits.h>
#include <string.h>

#include "args.h"
#include "shape_table_generated.h"

typedef void (*any_fn)(void);
#define FASTKW (METH_FASTCALL | METH_KEYWORDS)
#define CFN(f) ((PyCFunction)(void (*)(void))(f))
enum { MAX_PIECES = 1024 }; /* split and chunk results beyond this are refused, not truncated */

/* (values, indices), as torch.return_types.sort: a tuple whose items have names too. */
static PyTypeObject *values_indices_type;

static PyObject *values_indices(kiln_tensor values, kiln_tensor indices) {
    if (!values_indices_type) {
        static PyStructSequence_Field fields[] = {{"values", "the values"}, {"indices", "their i64 indices"}, {NULL, NULL}};
        static PyStructSequence_Desc desc = {"kiln.return_types.values_indices", "(values, indices)", fields, 2};
        values_indices_type = PyStructSequence_NewType(&desc);
        if (!values_indices_type) return kiln_release(values), kiln_release(indices), NULL;
    }
    PyObject *v = kp_wrap(values);
    if (!v) return kiln_release(indices), NULL;
    PyObject *i = kp_wrap(indices);
    if (!i) return Py_DECREF(v), NULL;
    PyObject *r = PyStructSequence_New(values_indices_type);
    if (!r) return Py_DECREF(v), Py_DECREF(i), NULL;
    PyStructSequence_SET_ITEM(r, 0, v);
    PyStructSequence_SET_ITEM(r, 1, i);
    return r;
}

/* The n tensors of out as a tuple; out[0] poisoned (a failed split): its error raised. */
static PyObject *tensors_tuple(kiln_tensor *out, int n) {
    PyObject *tuple = n >= 0 ? PyTuple_New(n) : NULL;
    for (int i = 0; i < n; i++) {
        PyObject *t = tuple ? kp_wrap(out[i]) : NULL;
        if (!t) {
            for (int j = i + 1; j < n; j++) kiln_release(out[j]);
            Py_XDECREF(tuple);
            return NULL;
        }
        PyTuple_SET_ITEM(tuple, i, t);
    }
    return tuple;
}

static int need_int(PyObject *o, const char *name, const char *what, long dflt, long *out) {
    if (!o && dflt == LONG_MIN) {
        kp_error_at(PyExc_TypeError, "%s() missing its %s argument", name, what);
        return -1;
    }
    if (o && PyBool_Check(o)) {
        kp_error_at(PyExc_TypeError, "%s(): %s must be an int, not bool", name, what);
        return -1;
    }
    return kp_int_arg(o, dflt, out);
}

/* t.split(split_size, dim=0), t.chunk(chunks, dim=0): the pieces as a tuple */
static PyObject *call_pieces(PyObject *self, PyObject *const *args, Py_ssize_t n, PyObject *kw, const char *name,
                             const char *first, bool chunk, any_fn fn) {
    const char *const names[] = {first, "dim"};
    PyObject *a[2];
    long count, dim;
    if (kp_args(name, args, n, kw, names, a, 2) < 0) return NULL;
    if (a[0] && (PyList_Check(a[0]) || PyTuple_Check(a[0])))
        return kp_error_at(PyExc_TypeError, "%s(): a list of sections is not supported; give one size", name);
    if (need_int(a[0], name, first, LONG_MIN, &count) < 0 || need_int(a[1], name, "dim", 0, &dim) < 0) return NULL;
    kp_site();
    kiln_tensor h = kp_take(self);
    if (!h.id) return NULL;
    kiln_tensor out[MAX_PIECES];
    int got = chunk ? ((int (*)(kiln_tensor, int, int, kiln_tensor *, int))fn)(h, (int)count, (int)dim, out, MAX_PIECES)
                    : ((int (*)(kiln_tensor, int64_t, int, kiln_tensor *, int))fn)(h, count, (int)dim, out, MAX_PIECES);
    return tensors_tuple(out, got);
}
static PyObject *call_SPLIT(PyObject *self, PyObject *const *args, Py_ssize_t n, PyObject *kw, const char *name,
                            any_fn fn) {
    return call_pieces(self, args, n, kw, name, "split_size", false, fn);
}
static PyObject *call_CHUNK(PyObject *self, PyObject *const *args, Py_ssize_t n, PyObject *kw, const char *name,
                            any_fn fn) {
    return call_pieces(self, args, n, kw, name, "chunks", true, fn);
}

/* kiln.meshgrid(*tensors, indexing='ij'), or one list of tensors */
static PyObject *call_MESHGRID(PyObject *self, PyObject *const *args, Py_ssize_t n, PyObject *kw, const char *name,
                               any_fn fn) {
    (void)self;
    PyObject *indexing = NULL;
    Py_ssize_t nkw = kw ? PyTuple_GET_SIZE(kw) : 0;
    for (Py_ssize_t k = 0; k < nkw; k++) {
        const char *key = PyUnicode_AsUTF8(PyTuple_GET_ITEM(kw, k));
        if (!key) return NULL;
        if (strcmp(key, "indexing")) return kp_error_at(PyExc_TypeError, "%s() got an unexpected keyword argument '%s'", name, key);
        indexing = args[n + k];
    }
    kiln_meshgrid_indexing ix = KILN_MESHGRID_IJ;
    if (indexing && indexing != Py_None) {
        const char *s = PyUnicode_Check(indexing) ? PyUnicode_AsUTF8(indexing) : NULL;
        if (!s || (strcmp(s, "ij") && strcmp(s, "xy")))
            return kp_error_at(PyExc_ValueError, "%s(): indexing must be 'ij' or 'xy'", name);
        ix = strcmp(s, "xy") ? KILN_MESHGRID_IJ : KILN_MESHGRID_XY;
    }
    PyObject *seq = n == 1 && (PyList_Check(args[0]) || PyTuple_Check(args[0])) ? PySequence_Fast(args[0], name) : NULL;
    PyObject *const *items = seq ? PySequence_Fast_ITEMS(seq) : args;
    Py_ssize_t count = seq ? PySequence_Fast_GET_SIZE(seq) : n;
    if (count < 1 || count > KILN_MAX_DIMS) {
        Py_XDECREF(seq);
        return kp_error_at(PyExc_ValueError, "%s() takes 1 to %d tensors, got %zd", name, KILN_MAX_DIMS, count);
    }
    kiln_tensor ts[KILN_MAX_DIMS], out[KILN_MAX_DIMS];
    bool optional[KILN_MAX_DIMS] = {false};
    int rc = kp_take_all((PyObject **)items, optional, (int)count, ts);
    Py_XDECREF(seq);
    if (rc < 0) return NULL;
    kp_site();
    int got = ((int (*)(const kiln_tensor *, int, kiln_meshgrid_indexing, kiln_tensor *, int))fn)(ts, (int)count, ix, out,
                                                                                                  KILN_MAX_DIMS);
    return tensors_tuple(out, got);
}

/* F.pad(input, pad, mode='constant', value=None) */
static PyObject *call_PAD(PyObject *self, PyObject *const *args, Py_ssize_t n, PyObject *kw, const char *name,
                          any_fn fn) {
    static const char *const names[] = {"pad", "mode", "value"};
    PyObject *a[3];
    if (kp_args(name, args, n, kw, names, a, 3) < 0) return NULL;
    if (!a[0] || !(PyList_Check(a[0]) || PyTuple_Check(a[0])))
        return kp_error_at(PyExc_TypeError, "%s(): pad must be a tuple of ints", name);
    Py_ssize_t np = PySequence_Size(a[0]);
    if (np > KILN_MAX_DIMS) return kp_error_at(PyExc_ValueError, "%s(): at most %d pad sizes", name, KILN_MAX_DIMS);
    kiln_shape pads = {(int32_t)np, {0}};
    for (Py_ssize_t i = 0; i < np; i++) {
        PyObject *item = PySequence_GetItem(a[0], i);
        long v = 0;
        int bad = !item || need_int(item, name, "pad", 0, &v) < 0;
        Py_XDECREF(item);
        if (bad) return NULL;
        pads.dims[i] = v;
    }
    kiln_pad_mode mode = KILN_PAD_CONSTANT;
    if (a[1] && a[1] != Py_None) {
        const char *s = PyUnicode_Check(a[1]) ? PyUnicode_AsUTF8(a[1]) : NULL;
        if (s && !strcmp(s, "reflect")) mode = KILN_PAD_REFLECT;
        else if (s && !strcmp(s, "replicate")) mode = KILN_PAD_REPLICATE;
        else if (!s || strcmp(s, "constant"))
            return kp_error_at(PyExc_ValueError, "%s(): mode must be 'constant', 'reflect' or 'replicate'", name);
    }
    double value;
    if (kp_double_arg(a[2], 0.0, &value) < 0) return NULL;
    kp_site();
    kiln_tensor h = kp_take(self);
    if (!h.id) return NULL;
    return kp_wrap(((kiln_tensor(*)(kiln_tensor, kiln_shape, kiln_pad_mode, double))fn)(h, pads, mode, value));
}

/* F.one_hot(tensor, num_classes=-1): i64, as torch's; -1 counts the classes from the largest
 * index (a read: the GIL is released while it waits). */
static PyObject *call_ONE_HOT(PyObject *self, PyObject *const *args, Py_ssize_t n, PyObject *kw, const char *name,
                              any_fn fn) {
    static const char *const names[] = {"num_classes"};
    PyObject *a[1];
    long classes;
    if (kp_args(name, args, n, kw, names, a, 1) < 0 || need_int(a[0], name, "num_classes", -1, &classes) < 0) return NULL;
    kp_site();
    kiln_tensor h = kp_take(self);
    if (!h.id) return NULL;
    if (classes < 0) {
        double largest = -1;
        kiln_status st;
        kiln_tensor m = kiln_max(kiln_ref(h));
        Py_BEGIN_ALLOW_THREADS st = kiln_into_scalar_f64(m, &largest);
        Py_END_ALLOW_THREADS if (st != KILN_OK) return kiln_release(h), kp_raise_status(st);
        classes = (long)largest + 1;
        kp_site();
    }
    return kp_wrap(((kiln_tensor(*)(kiln_tensor, int64_t, kiln_dtype))fn)(h, classes, KILN_I64));
}

/* t.sort(dim=-1, descending=False, stable=False), t.argsort(...): kiln's sort is always stable */
static PyObject *call_sorting(PyObject *self, PyObject *const *args, Py_ssize_t n, PyObject *kw, const char *name,
                              bool pair, any_fn fn) {
    static const char *const names[] = {"dim", "descending", "stable"};
    PyObject *a[3];
    long dim;
    bool descending, stable;
    if (kp_args(name, args, n, kw, names, a, 3) < 0 || need_int(a[0], name, "dim", -1, &dim) < 0 ||
        kp_bool_arg(a[1], false, &descending) < 0 || kp_bool_arg(a[2], false, &stable) < 0)
        return NULL;
    kp_site();
    kiln_tensor h = kp_take(self);
    if (!h.id) return NULL;
    if (!pair) return kp_wrap(((kiln_tensor(*)(kiln_tensor, int, bool))fn)(h, (int)dim, descending));
    kiln_tensor indices;
    kiln_tensor values = ((kiln_tensor(*)(kiln_tensor, int, bool, kiln_tensor *))fn)(h, (int)dim, descending, &indices);
    return values_indices(values, indices);
}
static PyObject *call_SORT(PyObject *self, PyObject *const *args, Py_ssize_t n, PyObject *kw, const char *name,
                           any_fn fn) {
    return call_sorting(self, args, n, kw, name, true, fn);
}
static PyObject *call_ARGSORT(PyObject *self, PyObject *const *args, Py_ssize_t n, PyObject *kw, const char *name,
                              any_fn fn) {
    return call_sorting(self, args, n, kw, name, false, fn);
}

/* t.topk(k, dim=-1, largest=True, sorted=True): kiln's are always sorted */
static PyObject *call_TOPK(PyObject *self, PyObject *const *args, Py_ssize_t n, PyObject *kw, const char *name,
                           any_fn fn) {
    static const char *const names[] = {"k", "dim", "largest", "sorted"};
    PyObject *a[4];
    long k, dim;
    bool largest, sorted;
    if (kp_args(name, args, n, kw, names, a, 4) < 0 || need_int(a[0], name, "k", LONG_MIN, &k) < 0 ||
        need_int(a[1], name, "dim", -1, &dim) < 0 || kp_bool_arg(a[2], true, &largest) < 0 ||
        kp_bool_arg(a[3], true, &sorted) < 0)
        return NULL;
    kp_site();
    kiln_tensor h = kp_take(self);
    if (!h.id) return NULL;
    kiln_tensor indices;
    kiln_tensor values = ((kiln_tensor(*)(kiln_tensor, int64_t, int, bool, kiln_tensor *))fn)(h, k, (int)dim, largest, &indices);
    return values_indices(values, indices);
}

/* t.unfold(dimension, size, step) */
static PyObject *call_UNFOLD(PyObject *self, PyObject *const *args, Py_ssize_t n, PyObject *kw, const char *name,
                             any_fn fn) {
    static const char *const names[] = {"dimension", "size", "step"};
    PyObject *a[3];
    long dim, size, step;
    if (kp_args(name, args, n, kw, names, a, 3) < 0 || need_int(a[0], name, "dimension", LONG_MIN, &dim) < 0 ||
        need_int(a[1], name, "size", LONG_MIN, &size) < 0 || need_int(a[2], name, "step", LONG_MIN, &step) < 0)
        return NULL;
    kp_site();
    kiln_tensor h = kp_take(self);
    if (!h.id) return NULL;
    return kp_wrap(((kiln_tensor(*)(kiln_tensor, int, int64_t, int64_t))fn)(h, (int)dim, size, step));
}

/* ---- the rows, expanded: a module function each, a Tensor method for a METHOD row ---- */
static PyObject *first_tensor(PyObject *const *args, Py_ssize_t n, const char *name) {
    if (n >= 1 && kp_is_tensor(args[0])) return args[0];
    return kp_error_at(PyExc_TypeError, "%s() expects a kiln.Tensor first", name);
}
#define TENSOR_FIRST(sig, name, fn)                                                            \
    static PyObject *f_##name(PyObject *mod, PyObject *const *args, Py_ssize_t n, PyObject *kw) { \
        (void)mod;                                                                               \
        PyObject *self = first_tensor(args, n, #name);                                           \
        return self ? call_##sig(self, args + 1, n - 1, kw, #name, (any_fn)(fn)) : NULL;         \
    }
#define DEFS_METHOD(sig, name, fn)                                                             \
    TENSOR_FIRST(sig, name, fn)                                                                \
    static PyObject *m_##name(PyObject *self, PyObject *const *args, Py_ssize_t n, PyObject *kw) { \
        return call_##sig(self, args, n, kw, #name, (any_fn)(fn));                               \
    }
#define DEFS_FUNCTIONAL(sig, name, fn) TENSOR_FIRST(sig, name, fn)
#define DEFS_MODULE(sig, name, fn)                                                             \
    static PyObject *f_##name(PyObject *mod, PyObject *const *args, Py_ssize_t n, PyObject *kw) { \
        (void)mod;                                                                               \
        return call_##sig(NULL, args, n, kw, #name, (any_fn)(fn));                               \
    }
#define SHAPE_DEFS(sig, form, name, fn, doc) DEFS_##form(sig, name, fn)
KP_TABLE_SHAPE_CALLS(SHAPE_DEFS)

/* kiln.nn.functional takes these names from here (python/kiln/nn/functional.py). */
static PyObject *f_shape_functions(PyObject *m, PyObject *unused) {
    (void)m, (void)unused;
#define NAME_METHOD(name)
#define NAME_MODULE(name)
#define NAME_FUNCTIONAL(name) #name,
#define SHAPE_NAME(sig, form, name, fn, doc) NAME_##form(name)
    static const char *const names[] = {KP_TABLE_SHAPE_CALLS(SHAPE_NAME) NULL};
    return kp_names_tuple(names, sizeof names / sizeof names[0] - 1);
}

#define METHOD_METHOD(name, doc) {#name, CFN(m_##name), FASTKW, doc},
#define METHOD_MODULE(name, doc)
#define METHOD_FUNCTIONAL(name, doc)
#define SHAPE_METHOD(sig, form, name, fn, doc) METHOD_##form(name, doc)
PyMethodDef kp_tensor_shape_methods[] = {KP_TABLE_SHAPE_CALLS(SHAPE_METHOD){NULL, NULL, 0, NULL}};

#define SHAPE_FUNCTION(sig, form, name, fn, doc) {#name, CFN(f_##name), FASTKW, doc},
PyMethodDef kp_module_shape_functions[] = {
    KP_TABLE_SHAPE_CALLS(SHAPE_FUNCTION){"_shape_functions", CFN(f_shape_functions), METH_NOARGS,
                                         "the kiln.nn.functional names made from the C shape op table"},
    {NULL, NULL, 0, NULL},
};
