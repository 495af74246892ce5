/* kiln._C: the module's functions (creation, waits, memory, seeds, grad mode, joins) and its
 * initialisation. The package kiln (python/kiln/__init__.py) re-exports them. */
#include "kiln_py.h"

#include <string.h>

#include "args.h"

#define FASTKW (METH_FASTCALL | METH_KEYWORDS)
#define CFN(f) ((PyCFunction)(void (*)(void))(f))

PyObject *kp_numpy;
extern PyTypeObject kp_EmbedderType;
extern PyMethodDef kp_tensor_more_methods[];
extern PyMethodDef *kp_tensor_base_methods;
extern PyMethodDef kp_functional_functions[];
extern PyMethodDef kp_functional_row_functions[];
extern PyMethodDef kp_functional_linalg_functions[];
extern PyMethodDef kp_dlpack_methods[], kp_dlpack_functions[], kp_io_functions[];
extern PyMethodDef kp_summary_functions[]; /* summary.c: kiln.utils.tensorboard */
extern PyMethodDef kp_data_functions[];    /* data.c: kiln.utils.data's loader */
extern PyMethodDef kp_optim_functions[];   /* optim.c: kiln.optim's fused updates */
extern PyMethodDef kp_layer_functions[];   /* layers.c: kiln.nn.LSTM, GRU, MultiheadAttention */
extern PyMethodDef kp_layer_module_functions[]; /* layer_modules.c: kiln.nn's other C layers */
int kp_custom_ops_init(PyObject *module);  /* custom_ops.c: kiln.ops, users' registered ops */

/* ---- generators ---- */
typedef struct {
    PyObject_HEAD
    kiln_generator *g;
    unsigned long long seed;
} kp_generator;

static PyObject *gen_new(PyTypeObject *type, PyObject *args, PyObject *kw) {
    static char *names[] = {"seed", NULL};
    unsigned long long seed = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "|K", names, &seed)) return NULL;
    kp_generator *self = (kp_generator *)type->tp_alloc(type, 0);
    if (!self) return NULL;
    self->g = kiln_generator_new(seed);
    self->seed = seed;
    if (!self->g) {
        Py_DECREF(self);
        return PyErr_NoMemory();
    }
    return (PyObject *)self;
}
static void gen_dealloc(PyObject *o) {
    kp_generator *self = (kp_generator *)o;
    if (self->g) kiln_generator_free(self->g);
    Py_TYPE(o)->tp_free(o);
}
static PyObject *gen_manual_seed(PyObject *o, PyObject *arg) {
    kp_generator *self = (kp_generator *)o;
    unsigned long long seed = PyLong_AsUnsignedLongLongMask(arg);
    if (PyErr_Occurred()) return NULL;
    kiln_generator_manual_seed(self->g, seed);
    self->seed = seed;
    return Py_NewRef(o);
}
static PyObject *gen_initial_seed(PyObject *o, PyObject *u) {
    (void)u;
    return PyLong_FromUnsignedLongLong(((kp_generator *)o)->seed);
}
static PyMethodDef gen_methods[] = {
    {"manual_seed", gen_manual_seed, METH_O, "Restarts the generator's sequence from seed."},
    {"initial_seed", gen_initial_seed, METH_NOARGS, "The seed last set."},
    {NULL, NULL, 0, NULL},
};
PyTypeObject kp_GeneratorType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "kiln.Generator",
    .tp_basicsize = sizeof(kp_generator),
    .tp_dealloc = gen_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Generator(seed=0): a source of seeds for rand/randn, as torch.Generator.",
    .tp_methods = gen_methods,
    .tp_new = gen_new,
};

/* ---- creation ---- */
/* The common tail of zeros(*size, dtype=, device=, requires_grad=): marks the leaf. */
int kp_mark_leaf(kp_tensor *t, bool on);
static PyObject *finish(PyObject *made, PyObject *requires_grad) {
    if (!made || !requires_grad) return made;
    int on = PyObject_IsTrue(requires_grad);
    if (on < 0 || (on && kp_mark_leaf((kp_tensor *)made, true) < 0)) {
        Py_DECREF(made);
        return NULL;
    }
    return made;
}

typedef struct {
    kiln_shape shape;
    kiln_dtype dtype;
    kiln_device dev;
    PyObject *requires_grad, *generator, *seed;
} creation_args;

/* Parses (*size, dtype=None, device=None, requires_grad=False[, generator=, seed=]). */
static int parse_creation(const char *name, PyObject *args, PyObject *kw, creation_args *c, Py_ssize_t skip) {
    c->requires_grad = c->generator = c->seed = NULL;
    PyObject *dtype = NULL, *device = NULL;
    if (kw) {
        Py_ssize_t pos = 0;
        PyObject *k, *v;
        while (PyDict_Next(kw, &pos, &k, &v)) {
            const char *s = PyUnicode_AsUTF8(k);
            if (!s) return -1;
            if (!strcmp(s, "dtype")) dtype = v;
            else if (!strcmp(s, "device")) device = v;
            else if (!strcmp(s, "requires_grad")) c->requires_grad = v;
            else if (!strcmp(s, "generator")) c->generator = v;
            else if (!strcmp(s, "seed")) c->seed = v;
            else if (!strcmp(s, "size")) {
                if (PyTuple_GET_SIZE(args) > skip) {
                    kp_error_at(PyExc_TypeError, "%s() got the size twice", name);
                    return -1;
                }
                PyObject *t = PyTuple_Pack(1, v);
                int rc = t ? kp_parse_shape(t, &c->shape) : -1;
                Py_XDECREF(t);
                if (rc < 0) return -1;
                goto rest;
            } else {
                kp_error_at(PyExc_TypeError, "%s() got an unexpected keyword argument '%s'", name, s);
                return -1;
            }
        }
    }
    {
        PyObject *size = PyTuple_GetSlice(args, skip, PyTuple_GET_SIZE(args));
        if (!size) return -1;
        int rc = kp_parse_shape(size, &c->shape);
        Py_DECREF(size);
        if (rc < 0) return -1;
    }
rest:
    if (kp_parse_dtype(dtype, KILN_F32, &c->dtype) < 0 || kp_parse_device(device, &c->dev) < 0) return -1;
    return 0;
}

#define CREATION(name, call)                                                    \
    static PyObject *f_##name(PyObject *mod, PyObject *args, PyObject *kw) {     \
        (void)mod;                                                              \
        creation_args c;                                                        \
        if (parse_creation(#name, args, kw, &c, 0) < 0) return NULL;            \
        kp_site();                                                              \
        return finish(kp_wrap(call), c.requires_grad);                          \
    }
CREATION(zeros, kiln_zeros(c.dev, c.dtype, c.shape))
CREATION(ones, kiln_ones(c.dev, c.dtype, c.shape))
CREATION(empty, kiln_empty(c.dev, c.dtype, c.shape))

kiln_generator *kp_generator_of(PyObject *o) {
    if (!o || o == Py_None) return NULL;
    if (Py_TYPE(o) != &kp_GeneratorType) {
        kp_error_at(PyExc_TypeError, "generator must be a kiln.Generator");
        return (kiln_generator *)-1;
    }
    return ((kp_generator *)o)->g;
}

/* Where a random op's seed comes from: seed= (*seeded) or the generator (NULL: the global
 * one); -1 with a Python error set. Records the call site too. */
static int random_source(const creation_args *c, kiln_generator **g, bool *seeded, unsigned long long *seed) {
    *g = kp_generator_of(c->generator);
    if (*g == (kiln_generator *)-1) return -1;
    kp_site();
    *seeded = c->seed && c->seed != Py_None;
    *seed = *seeded ? PyLong_AsUnsignedLongLongMask(c->seed) : 0;
    return PyErr_Occurred() ? -1 : 0;
}

static PyObject *random_tensor(PyObject *args, PyObject *kw, bool normal) {
    creation_args c;
    kiln_generator *g;
    bool seeded;
    unsigned long long seed;
    if (parse_creation(normal ? "randn" : "rand", args, kw, &c, 0) < 0 || random_source(&c, &g, &seeded, &seed) < 0) return NULL;
    kiln_tensor t = seeded ? (normal ? kiln_randn(c.dev, c.dtype, c.shape, seed) : kiln_rand(c.dev, c.dtype, c.shape, seed))
                           : (normal ? kiln_randn_gen(g, c.dev, c.dtype, c.shape) : kiln_rand_gen(g, c.dev, c.dtype, c.shape));
    return finish(kp_wrap(t), c.requires_grad);
}

/* randint(high, size) or randint(low, high, size), as torch.randint: int64 unless dtype= says. */
static PyObject *f_randint(PyObject *mod, PyObject *args, PyObject *kw) {
    (void)mod;
    Py_ssize_t n = PyTuple_GET_SIZE(args);
    bool size_kw = kw && PyDict_GetItemString(kw, "size");
    Py_ssize_t bounds = size_kw ? n : n - 1;
    if (bounds < 1 || bounds > 2)
        return kp_error_at(PyExc_TypeError, "randint(low=0, high, size, ...) takes the bounds and a size tuple");
    long long b[2] = {0, 0};
    for (Py_ssize_t i = 0; i < bounds; i++) {
        b[i] = PyLong_AsLongLong(PyTuple_GET_ITEM(args, i));
        if (b[i] == -1 && PyErr_Occurred()) return NULL;
    }
    long long low = bounds == 2 ? b[0] : 0, high = bounds == 2 ? b[1] : b[0];
    creation_args c;
    kiln_generator *g;
    bool seeded;
    unsigned long long seed;
    if (parse_creation("randint", args, kw, &c, bounds) < 0) return NULL;
    if (!kw || !PyDict_GetItemString(kw, "dtype")) c.dtype = KILN_I64;
    if (random_source(&c, &g, &seeded, &seed) < 0) return NULL;
    kiln_tensor t = seeded ? kiln_randint(c.dev, c.dtype, c.shape, low, high, seed)
                           : kiln_randint_gen(g, c.dev, c.dtype, c.shape, low, high);
    return finish(kp_wrap(t), c.requires_grad);
}

static PyObject *f_randn(PyObject *m, PyObject *a, PyObject *k) { (void)m; return random_tensor(a, k, true); }
static PyObject *f_rand(PyObject *m, PyObject *a, PyObject *k) { (void)m; return random_tensor(a, k, false); }

static PyObject *f_full(PyObject *mod, PyObject *args, PyObject *kw) {
    (void)mod;
    if (PyTuple_GET_SIZE(args) != 2) return kp_error_at(PyExc_TypeError, "full(size, fill_value, ...) takes 2 positional arguments");
    PyObject *value = PyTuple_GET_ITEM(args, 1);
    double v = PyFloat_AsDouble(value);
    if (v == -1.0 && PyErr_Occurred()) return NULL;
    PyObject *size = PyTuple_GetSlice(args, 0, 1);
    if (!size) return NULL;
    creation_args c;
    int rc = parse_creation("full", size, kw, &c, 0);
    Py_DECREF(size);
    if (rc < 0) return NULL;
    if (!kw || !PyDict_GetItemString(kw, "dtype"))
        c.dtype = PyBool_Check(value) ? KILN_BOOL : PyLong_Check(value) ? KILN_I64 : KILN_F32;
    kp_site();
    return finish(kp_wrap(kiln_full(c.dev, c.dtype, c.shape, v)), c.requires_grad);
}

static PyObject *f_arange(PyObject *mod, PyObject *const *args, Py_ssize_t n, PyObject *kwnames) {
    (void)mod;
    static const char *const names[] = {"start", "end", "step", "dtype", "device", "requires_grad"};
    PyObject *a[6];
    if (kp_args("arange", args, n, kwnames, names, a, 6) < 0) return NULL;
    if (!a[0]) return kp_error_at(PyExc_TypeError, "arange() needs an end");
    PyObject *start = a[1] ? a[0] : NULL, *end = a[1] ? a[1] : a[0], *step = a[2];
    bool ints = (!start || PyLong_Check(start)) && PyLong_Check(end) && (!step || PyLong_Check(step));
    double s = 0, e, st = 1;
    if ((start && (s = PyFloat_AsDouble(start)) == -1.0 && PyErr_Occurred()) ||
        ((e = PyFloat_AsDouble(end)) == -1.0 && PyErr_Occurred()) ||
        (step && (st = PyFloat_AsDouble(step)) == -1.0 && PyErr_Occurred()))
        return NULL;
    kiln_dtype dtype;
    kiln_device dev;
    if (kp_parse_dtype(a[3], ints ? KILN_I64 : KILN_F32, &dtype) < 0 || kp_parse_device(a[4], &dev) < 0) return NULL;
    kp_site();
    return finish(kp_wrap(kiln_arange(dev, dtype, s, e, st)), a[5]);
}

static PyObject *f_linspace(PyObject *mod, PyObject *const *args, Py_ssize_t n, PyObject *kwnames) {
    (void)mod;
    static const char *const names[] = {"start", "end", "steps", "dtype", "device"};
    PyObject *a[5];
    if (kp_args("linspace", args, n, kwnames, names, a, 5) < 0) return NULL;
    if (!a[0] || !a[1] || !a[2]) return kp_error_at(PyExc_TypeError, "linspace(start, end, steps)");
    double s = PyFloat_AsDouble(a[0]), e = PyFloat_AsDouble(a[1]);
    long long steps = PyLong_AsLongLong(a[2]);
    if (PyErr_Occurred()) return NULL;
    kiln_dtype dtype;
    kiln_device dev;
    if (kp_parse_dtype(a[3], KILN_F32, &dtype) < 0 || kp_parse_device(a[4], &dev) < 0) return NULL;
    kp_site();
    return kp_wrap(kiln_linspace(dev, dtype, s, e, steps));
}

static PyObject *f_from_numpy(PyObject *mod, PyObject *const *args, Py_ssize_t n) {
    (void)mod;
    kiln_dtype dtype;
    kiln_device dev;
    if (n != 3) return kp_error_at(PyExc_TypeError, "_from_numpy(array, dtype, device)");
    if (kp_parse_dtype(args[1], KILN_F32, &dtype) < 0 || kp_parse_device(args[2], &dev) < 0) return NULL;
    return kp_from_buffer(args[0], dtype, dev);
}

/* ---- joins ---- */
static int handles_of(PyObject *seq, kiln_tensor **out, Py_ssize_t *n) {
    PyObject *fast = PySequence_Fast(seq, "expected a sequence of tensors");
    if (!fast) return -1;
    *n = PySequence_Fast_GET_SIZE(fast);
    if (*n < 1 || *n > 1 << 20) {
        Py_DECREF(fast);
        kp_error_at(PyExc_ValueError, "expected a non-empty sequence of tensors");
        return -1;
    }
    *out = PyMem_Calloc((size_t)*n, sizeof **out);
    if (!*out) {
        Py_DECREF(fast);
        PyErr_NoMemory();
        return -1;
    }
    for (Py_ssize_t i = 0; i < *n; i++) {
        PyObject *it = PySequence_Fast_GET_ITEM(fast, i);
        if (!kp_is_tensor(it) || !kp_live((kp_tensor *)it)) {
            if (!PyErr_Occurred()) kp_error_at(PyExc_TypeError, "element %zd is not a kiln.Tensor", i);
            for (Py_ssize_t j = 0; j < i; j++) kiln_release((*out)[j]);
            PyMem_Free(*out);
            Py_DECREF(fast);
            return -1;
        }
        (*out)[i] = kiln_ref(((kp_tensor *)it)->h);
    }
    Py_DECREF(fast);
    return 0;
}

static PyObject *join(PyObject *const *args, Py_ssize_t n, PyObject *kwnames, bool stack) {
    static const char *const names[] = {"tensors", "dim"};
    PyObject *a[2];
    long dim;
    if (kp_args(stack ? "stack" : "cat", args, n, kwnames, names, a, 2) < 0 || kp_int_arg(a[1], 0, &dim) < 0) return NULL;
    if (!a[0]) return kp_error_at(PyExc_TypeError, "missing the tensors");
    kiln_tensor *hs;
    Py_ssize_t count;
    kp_site();
    if (handles_of(a[0], &hs, &count) < 0) return NULL;
    kiln_tensor r = stack ? kiln_stack(hs, (int)count, (int)dim) : kiln_cat(hs, (int)count, (int)dim);
    PyMem_Free(hs);
    return kp_wrap(r);
}
static PyObject *f_cat(PyObject *m, PyObject *const *a, Py_ssize_t n, PyObject *k) { (void)m; return join(a, n, k, false); }
static PyObject *f_stack(PyObject *m, PyObject *const *a, Py_ssize_t n, PyObject *k) { (void)m; return join(a, n, k, true); }

static PyObject *f_where(PyObject *mod, PyObject *const *args, Py_ssize_t n) {
    (void)mod;
    if (n != 3 || !kp_is_tensor(args[0])) return kp_error_at(PyExc_TypeError, "where(condition, a, b) takes a bool tensor and two values");
    kp_site();
    kiln_tensor c = kp_take(args[0]);
    if (!c.id) return NULL;
    kiln_tensor like = kp_is_tensor(args[1]) ? ((kp_tensor *)args[1])->h : kp_is_tensor(args[2]) ? ((kp_tensor *)args[2])->h : KILN_NONE;
    kiln_tensor a = kp_operand(args[1], like);
    kiln_tensor b = a.id ? kp_operand(args[2], like.id ? like : a) : KILN_NONE;
    if (!a.id || !b.id) {
        kiln_release(c);
        if (a.id) kiln_release(a);
        return NULL;
    }
    return kp_wrap(kiln_where(c, a, b));
}

/* ---- waits ---- */
static PyObject *f_sync(PyObject *mod, PyObject *u) {
    (void)mod, (void)u;
    kp_site();
    kiln_status st;
    Py_BEGIN_ALLOW_THREADS st = kiln_sync();
    Py_END_ALLOW_THREADS if (st != KILN_OK) return kp_raise_status(st);
    Py_RETURN_NONE;
}

/* read_many([a, b, c]): NumPy copies of every tensor after one wait (one transaction). */
static PyObject *f_read_many(PyObject *mod, PyObject *seq) {
    (void)mod;
    PyObject *fast = PySequence_Fast(seq, "read_many() takes a sequence of tensors");
    if (!fast) return NULL;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(fast);
    PyObject *out = PyList_New(n);
    Py_buffer *views = PyMem_Calloc(n ? (size_t)n : 1, sizeof *views);
    kiln_transaction *tx = kiln_transaction_new();
    Py_ssize_t held = 0;
    kiln_status st = KILN_OK;
    if (!out || !views || !tx) {
        if (out && views) PyErr_NoMemory();
        goto done;
    }
    kp_site();
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *it = PySequence_Fast_GET_ITEM(fast, i);
        if (!kp_is_tensor(it) || !kp_live((kp_tensor *)it)) {
            if (!PyErr_Occurred()) kp_error_at(PyExc_TypeError, "element %zd is not a kiln.Tensor", i);
            goto done;
        }
        kiln_tensor h = kiln_ref(((kp_tensor *)it)->h);
        kiln_dtype dtype = kiln_tensor_dtype(h);
        if (dtype == KILN_BF16) h = kiln_cast(h, KILN_F32), dtype = KILN_F32;
        PyObject *dims = kp_shape_tuple(kiln_tensor_shape(h));
        PyObject *dt = kp_dtype_object(dtype);
        PyObject *np_name = dt ? PyObject_GetAttrString(dt, "numpy_name") : NULL;
        PyObject *arr = dims && np_name ? PyObject_CallMethod(kp_numpy, "empty", "OO", dims, np_name) : NULL;
        Py_XDECREF(dims);
        Py_XDECREF(dt);
        Py_XDECREF(np_name);
        if (!arr || PyObject_GetBuffer(arr, &views[i], PyBUF_WRITABLE | PyBUF_C_CONTIGUOUS) < 0) {
            Py_XDECREF(arr);
            kiln_release(h);
            goto done;
        }
        held = i + 1;
        PyList_SET_ITEM(out, i, arr);
        kiln_transaction_read(tx, h, views[i].buf, (size_t)views[i].len);
    }
    Py_BEGIN_ALLOW_THREADS st = kiln_transaction_execute(tx);
    Py_END_ALLOW_THREADS if (st != KILN_OK) kp_raise_status(st);
done:
    for (Py_ssize_t i = 0; i < held; i++) PyBuffer_Release(&views[i]);
    PyMem_Free(views);
    if (tx) kiln_transaction_free(tx);
    Py_DECREF(fast);
    if (PyErr_Occurred()) {
        Py_XDECREF(out);
        return NULL;
    }
    return out;
}

/* ---- memory, seeds, grad mode, threads ---- */
static PyObject *f_memory_stats(PyObject *mod, PyObject *const *args, Py_ssize_t n) {
    (void)mod;
    kiln_device dev;
    if (kp_parse_device(n > 0 ? args[0] : NULL, &dev) < 0) return NULL;
    kiln_memory_stats s;
    Py_BEGIN_ALLOW_THREADS s = kiln_memory_stats_get(dev);
    Py_END_ALLOW_THREADS return Py_BuildValue(
        "{sKsKsKsKsKsKsK}", "bytes_in_use", (unsigned long long)s.bytes_in_use, "peak_bytes",
        (unsigned long long)s.peak_bytes, "bytes_cached", (unsigned long long)s.bytes_cached, "alloc_count",
        (unsigned long long)s.alloc_count, "system_allocs", (unsigned long long)s.system_allocs, "inplace_reuses",
        (unsigned long long)s.inplace_reuses, "live_tensors", (unsigned long long)s.live_tensors);
}
static PyObject *f_reset_peak(PyObject *mod, PyObject *const *args, Py_ssize_t n) {
    (void)mod;
    kiln_device dev;
    if (kp_parse_device(n > 0 ? args[0] : NULL, &dev) < 0) return NULL;
    Py_BEGIN_ALLOW_THREADS kiln_memory_reset_peak(dev);
    Py_END_ALLOW_THREADS Py_RETURN_NONE;
}
static PyObject *f_manual_seed(PyObject *mod, PyObject *arg) {
    (void)mod;
    unsigned long long seed = PyLong_AsUnsignedLongLongMask(arg);
    if (PyErr_Occurred()) return NULL;
    kiln_manual_seed(seed);
    Py_RETURN_NONE;
}
static PyObject *f_no_grad_begin(PyObject *m, PyObject *u) { (void)m, (void)u; kiln_no_grad_begin(); Py_RETURN_NONE; }
static PyObject *f_no_grad_end(PyObject *m, PyObject *u) { (void)m, (void)u; kiln_no_grad_end(); Py_RETURN_NONE; }
static PyObject *f_grad_enabled(PyObject *m, PyObject *u) { (void)m, (void)u; return PyBool_FromLong(kiln_grad_enabled()); }
static PyObject *f_set_num_threads(PyObject *m, PyObject *arg) {
    (void)m;
    long v = PyLong_AsLong(arg);
    if (v == -1 && PyErr_Occurred()) return NULL;
    if (v < 1 || v > 1024) return kp_error_at(PyExc_ValueError, "thread count %ld out of range", v);
    kiln_set_num_threads((int)v);
    Py_RETURN_NONE;
}
static PyObject *f_get_num_threads(PyObject *m, PyObject *u) { (void)m, (void)u; return PyLong_FromLong(kiln_num_threads()); }
static PyObject *f_set_factory(PyObject *m, PyObject *arg) {
    (void)m;
    Py_XSETREF(kp_tensor_factory, Py_NewRef(arg));
    Py_RETURN_NONE;
}
static PyObject *f_set_elide_min_bytes(PyObject *m, PyObject *arg) {
    (void)m;
    Py_ssize_t v = PyNumber_AsSsize_t(arg, PyExc_OverflowError);
    if (v == -1 && PyErr_Occurred()) return NULL;
    kp_elide_min_bytes = v;
    Py_RETURN_NONE;
}
static PyObject *f_set_engine_limits(PyObject *m, PyObject *const *args, Py_ssize_t n) {
    (void)m;
    long long ops, bytes;
    if (n != 2) return kp_error_at(PyExc_TypeError, "set_engine_limits(max_inflight_ops, max_pending_bytes)");
    ops = PyLong_AsLongLong(args[0]);
    bytes = PyLong_AsLongLong(args[1]);
    if (PyErr_Occurred()) return NULL;
    kiln_engine_set_limits(ops, bytes);
    Py_RETURN_NONE;
}
static PyObject *f_is_async(PyObject *m, PyObject *u) { (void)m, (void)u; return PyBool_FromLong(kiln_engine_is_async()); }
static PyObject *f_device_count(PyObject *m, PyObject *arg) {
    (void)m;
    const char *s = PyUnicode_AsUTF8(arg);
    if (!s) return NULL;
    kiln_device d;
    if (kiln_device_parse(s, &d) != KILN_OK) return kp_error_at(PyExc_ValueError, "unknown device kind '%s'", s);
    return PyLong_FromLong(kiln_device_count(kiln_device_kind(d)));
}

static PyMethodDef module_functions[] = {
    {"zeros", CFN(f_zeros), METH_VARARGS | METH_KEYWORDS, "zeros(*size, dtype=kiln.float32, device='cpu', requires_grad=False)"},
    {"ones", CFN(f_ones), METH_VARARGS | METH_KEYWORDS, "ones(*size, dtype=, device=, requires_grad=)"},
    {"empty", CFN(f_empty), METH_VARARGS | METH_KEYWORDS, "empty(*size, ...): contents unspecified"},
    {"full", CFN(f_full), METH_VARARGS | METH_KEYWORDS, "full(size, fill_value, dtype=, device=)"},
    {"randn", CFN(f_randn), METH_VARARGS | METH_KEYWORDS, "randn(*size, generator=None, seed=None, dtype=, device=)"},
    {"rand", CFN(f_rand), METH_VARARGS | METH_KEYWORDS, "rand(*size, generator=None, seed=None, dtype=, device=)"},
    {"randint", CFN(f_randint), METH_VARARGS | METH_KEYWORDS,
     "randint(low=0, high, size, generator=None, seed=None, dtype=int64, device=): integers in [low, high)"},
    {"arange", CFN(f_arange), FASTKW, "arange([start,] end[, step], dtype=, device=)"},
    {"linspace", CFN(f_linspace), FASTKW, "linspace(start, end, steps, dtype=, device=)"},
    {"_from_numpy", CFN(f_from_numpy), METH_FASTCALL, "A tensor copied from a C-contiguous array."},
    {"cat", CFN(f_cat), FASTKW, "cat(tensors, dim=0)"},
    {"stack", CFN(f_stack), FASTKW, "stack(tensors, dim=0)"},
    {"where", CFN(f_where), METH_FASTCALL, "where(condition, a, b)"},
    {"sync", f_sync, METH_NOARGS, "Waits for every op this thread queued (GIL released); raises the first error."},
    {"read_many", f_read_many, METH_O, "NumPy copies of many tensors after one wait."},
    {"memory_stats", CFN(f_memory_stats), METH_FASTCALL, "kiln's memory counters of a device (waits for queued ops)."},
    {"reset_peak_memory_stats", CFN(f_reset_peak), METH_FASTCALL, "Restarts the peak counter."},
    {"manual_seed", f_manual_seed, METH_O, "Seeds the global generator."},
    {"_no_grad_begin", f_no_grad_begin, METH_NOARGS, NULL},
    {"_no_grad_end", f_no_grad_end, METH_NOARGS, NULL},
    {"is_grad_enabled", f_grad_enabled, METH_NOARGS, "False inside kiln.no_grad()."},
    {"set_num_threads", f_set_num_threads, METH_O, "kiln's CPU thread count."},
    {"get_num_threads", f_get_num_threads, METH_NOARGS, "kiln's CPU thread count."},
    {"_set_tensor_factory", f_set_factory, METH_O, NULL},
    {"_set_elide_min_bytes", f_set_elide_min_bytes, METH_O, "Size from which temporaries are handed over."},
    {"set_engine_limits", CFN(f_set_engine_limits), METH_FASTCALL,
     "This thread's stream bounds: ops in flight and bytes pending before dispatch blocks (< 1 keeps one)."},
    {"is_async", f_is_async, METH_NOARGS, "False when KILN_SYNC=1 runs every op at dispatch."},
    {"device_count", f_device_count, METH_O, "device_count('opencl'): devices of that kind."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT, .m_name = "kiln._C", .m_doc = "kiln's C extension: tensors over the asynchronous engine.",
    .m_size = -1, .m_methods = module_functions,
};

static PyMethodDef *concat_methods(void) {
    PyMethodDef *parts[] = {kp_tensor_base_methods, kp_tensor_more_methods, kp_tensor_table_methods, kp_dlpack_methods,
                            kp_tensor_shape_methods};
    size_t total = 1;
    for (size_t p = 0; p < sizeof parts / sizeof parts[0]; p++)
        for (PyMethodDef *m = parts[p]; m->ml_name; m++) total++;
    PyMethodDef *all = PyMem_Calloc(total, sizeof *all); /* lives as long as the type */
    if (!all) return NULL;
    size_t k = 0;
    for (size_t p = 0; p < sizeof parts / sizeof parts[0]; p++)
        for (PyMethodDef *m = parts[p]; m->ml_name; m++) all[k++] = *m;
    return all;
}

static Py_hash_t tensor_hash(PyObject *o) { return (Py_hash_t)((uintptr_t)o >> 4); }

PyMODINIT_FUNC PyInit__C(void) {
    kp_numpy = PyImport_ImportModule("numpy");
    if (!kp_numpy) return NULL;
    kp_TensorType.tp_methods = concat_methods();
    kp_TensorType.tp_hash = tensor_hash;
    if (!kp_TensorType.tp_methods) return PyErr_NoMemory();
    if (PyType_Ready(&kp_TensorType) < 0 || PyType_Ready(&kp_GeneratorType) < 0 || PyType_Ready(&kp_EmbedderType) < 0)
        return NULL;
    PyObject *m = PyModule_Create(&module_def);
    if (!m) return NULL;
    if (PyModule_AddObjectRef(m, "Tensor", (PyObject *)&kp_TensorType) < 0 ||
        PyModule_AddObjectRef(m, "Generator", (PyObject *)&kp_GeneratorType) < 0 ||
        PyModule_AddObjectRef(m, "SentenceEmbedder", (PyObject *)&kp_EmbedderType) < 0 || kp_dtypes_init(m) < 0 ||
        kp_errors_init(m) < 0 || PyModule_AddFunctions(m, kp_module_table_functions) < 0 ||
        PyModule_AddFunctions(m, kp_functional_functions) < 0 || PyModule_AddFunctions(m, kp_functional_row_functions) < 0 ||
        PyModule_AddFunctions(m, kp_functional_linalg_functions) < 0 || PyModule_AddFunctions(m, kp_module_shape_functions) < 0 ||
        PyModule_AddFunctions(m, kp_dlpack_functions) < 0 || PyModule_AddFunctions(m, kp_io_functions) < 0 ||
        PyModule_AddFunctions(m, kp_summary_functions) < 0 || PyModule_AddFunctions(m, kp_data_functions) < 0 ||
        PyModule_AddFunctions(m, kp_optim_functions) < 0 || PyModule_AddFunctions(m, kp_layer_functions) < 0 ||
        PyModule_AddFunctions(m, kp_layer_module_functions) < 0 || kp_custom_ops_init(m) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    kp_elide_init();
    return m;
}
