/* kiln.nn.functional's linear-algebra functions: one per FUNCTIONAL row of the C linear-algebra
 * table (src/ir/linalg_table.h, through KP_TABLE_LINALG_FUNCTIONS in linalg_table_generated.h:
 * linear, conv2d, scaled_dot_product_attention, batch_norm), each called as
 * torch.nn.functional's function of that name, with its keywords and defaults, by one caller
 * per sig (the row's C signature). A new row of an existing sig is a Python function with no
 * edit here. Tensors passed are consumed as every op consumes them (a reference, or an elided
 * temporary); batch_norm's running statistics are not: it updates them in place, as torch's. */
#include "kiln_py.h"

#include <math.h>

#include "args.h"
#include "linalg_table_generated.h"

#define FASTKW (METH_FASTCALL | METH_KEYWORDS)
#define CFN(f) ((PyCFunction)(void (*)(void))(f))

typedef void (*any_fn)(void);

/* The biggest stride, padding or dilation taken: more is surely a mistake, and fits an int. */
#define MAX_WINDOW_ARG (1L << 20)

/* LINEAR: (input, weight, bias=None) */
static PyObject *call_LINEAR(const char *name, any_fn fn, PyObject *const *args, Py_ssize_t n, PyObject *kw) {
    static const char *const names[] = {"input", "weight", "bias"};
    static const bool optional[] = {false, false, true};
    PyObject *a[3];
    kiln_tensor h[3];
    if (kp_args(name, args, n, kw, names, a, 3) < 0) return NULL;
    kp_site();
    if (kp_take_all(a, optional, 3, h) < 0) return NULL;
    return kp_wrap(((kiln_tensor(*)(kiln_tensor, kiln_tensor, kiln_tensor))fn)(h[0], h[1], h[2]));
}

/* An int or a pair of ints (height, width), at least lo; absent or None: dflt for both. */
static int pair_arg(const char *name, const char *what, PyObject *o, long dflt, long lo, long out[2]) {
    out[0] = out[1] = dflt;
    if (o && (PyTuple_Check(o) || PyList_Check(o))) {
        if (PySequence_Size(o) != 2) {
            kp_error_at(PyExc_ValueError, "%s(): %s must be an int or a pair of ints, not %R", name, what, o);
            return -1;
        }
        for (int i = 0; i < 2; i++) {
            PyObject *item = PySequence_GetItem(o, i);
            int rc = item ? kp_int_arg(item, dflt, &out[i]) : -1;
            Py_XDECREF(item);
            if (rc < 0) return -1;
        }
    } else if (kp_int_arg(o, dflt, &out[0]) < 0) {
        return -1;
    } else {
        out[1] = out[0];
    }
    for (int i = 0; i < 2; i++)
        if (out[i] < lo || out[i] > MAX_WINDOW_ARG) {
            kp_error_at(PyExc_ValueError, "%s(): %s %ld is not in [%ld, %ld]", name, what, out[i], lo, MAX_WINDOW_ARG);
            return -1;
        }
    return 0;
}

/* conv2d's padding: an int, a pair, 'valid' (none) or 'same' (the output the input's size: stride
 * 1; torch pads an odd total on the right, which kiln's symmetric padding cannot, so that is
 * refused). */
static int padding_arg(const char *name, PyObject *o, PyObject *weight, const long stride[2], const long dil[2],
                       long pad[2]) {
    if (!o || !PyUnicode_Check(o)) return pair_arg(name, "padding", o, 0, 0, pad);
    const char *s = PyUnicode_AsUTF8(o);
    if (!s) return -1;
    pad[0] = pad[1] = 0;
    if (!strcmp(s, "valid")) return 0;
    if (strcmp(s, "same") != 0) {
        kp_error_at(PyExc_ValueError, "%s(): padding %R is not 'valid', 'same', an int or a pair", name, o);
        return -1;
    }
    if (stride[0] != 1 || stride[1] != 1) {
        kp_error_at(PyExc_ValueError, "%s(): padding='same' needs stride 1 (as torch's)", name);
        return -1;
    }
    if (!weight || !kp_is_tensor(weight) || !kp_live((kp_tensor *)weight)) {
        if (!PyErr_Occurred()) kp_error_at(PyExc_TypeError, "%s(): weight must be a kiln.Tensor", name);
        return -1;
    }
    kiln_shape ws = kiln_tensor_shape(((kp_tensor *)weight)->h);
    if (ws.ndim != 4) return 0; /* the op reports the weight's shape */
    for (int i = 0; i < 2; i++) {
        long total = dil[i] * (long)(ws.dims[2 + i] - 1);
        if (total % 2) {
            kp_error_at(PyExc_NotImplementedError,
                         "%s(): padding='same' with an even kernel extent pads one side more; give padding explicitly", name);
            return -1;
        }
        pad[i] = total / 2;
    }
    return 0;
}

/* CONV2D: (input, weight, bias=None, stride=1, padding=0, dilation=1, groups=1); stride, padding
 * and dilation an int or a pair, padding also 'valid' or 'same'. */
static PyObject *call_CONV2D(const char *name, any_fn fn, PyObject *const *args, Py_ssize_t n, PyObject *kw) {
    static const char *const names[] = {"input", "weight", "bias", "stride", "padding", "dilation", "groups"};
    static const bool optional[] = {false, false, true};
    PyObject *a[7];
    long stride[2], pad[2], dil[2], groups;
    kiln_tensor h[3];
    if (kp_args(name, args, n, kw, names, a, 7) < 0 || pair_arg(name, "stride", a[3], 1, 1, stride) < 0 ||
        pair_arg(name, "dilation", a[5], 1, 1, dil) < 0 || padding_arg(name, a[4], a[1], stride, dil, pad) < 0 ||
        kp_int_arg(a[6], 1, &groups) < 0)
        return NULL;
    if (groups < 1 || groups > MAX_WINDOW_ARG)
        return kp_error_at(PyExc_ValueError, "%s(): groups %ld is not in [1, %ld]", name, groups, MAX_WINDOW_ARG);
    kp_site();
    if (kp_take_all(a, optional, 3, h) < 0) return NULL;
    return kp_wrap(((kiln_tensor(*)(kiln_tensor, kiln_tensor, kiln_tensor, int, int, int, int, int, int, int))fn)(
        h[0], h[1], h[2], (int)stride[0], (int)stride[1], (int)pad[0], (int)pad[1], (int)dil[0], (int)dil[1], (int)groups));
}

/* ATTENTION: (query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None,
 * enable_gqa=False); kiln's attention has no dropout and no grouped-query broadcast. */
static PyObject *call_ATTENTION(const char *name, any_fn fn, PyObject *const *args, Py_ssize_t n, PyObject *kw) {
    static const char *const names[] = {"query", "key", "value", "attn_mask", "dropout_p", "is_causal", "scale",
                                        "enable_gqa"};
    static const bool optional[] = {false, false, false, true};
    PyObject *a[8];
    double dropout, scale;
    bool causal, gqa;
    kiln_tensor h[4];
    if (kp_args(name, args, n, kw, names, a, 8) < 0 || kp_double_arg(a[4], 0.0, &dropout) < 0 ||
        kp_bool_arg(a[5], false, &causal) < 0 || kp_double_arg(a[6], NAN, &scale) < 0 || kp_bool_arg(a[7], false, &gqa) < 0)
        return NULL;
    if (dropout != 0 || gqa)
        return kp_error_at(PyExc_NotImplementedError, "%s(): kiln's attention takes no %s", name,
                            gqa ? "enable_gqa" : "dropout_p other than 0");
    if (a[6] && a[6] != Py_None && !(scale > 0))
        return kp_error_at(PyExc_ValueError, "%s(): scale %R is not > 0", name, a[6]);
    kp_site();
    if (kp_take_all(a, optional, 4, h) < 0) return NULL;
    return kp_wrap(((kiln_tensor(*)(kiln_tensor, kiln_tensor, kiln_tensor, kiln_tensor, bool, double))fn)(
        h[0], h[1], h[2], h[3], causal, scale));
}

/* A running statistic: None (NULL) or a live Tensor, whose handle the op may replace. */
static int running_arg(const char *name, const char *what, PyObject *o, kiln_tensor **out) {
    *out = NULL;
    if (!o || o == Py_None) return 0;
    if (!kp_is_tensor(o)) {
        kp_error_at(PyExc_TypeError, "%s(): %s must be a kiln.Tensor or None", name, what);
        return -1;
    }
    if (!kp_live((kp_tensor *)o)) return -1;
    *out = &((kp_tensor *)o)->h;
    return 0;
}

/* BATCH_NORM: (input, running_mean, running_var, weight=None, bias=None, training=False,
 * momentum=0.1, eps=1e-05); the running statistics (None, or Tensors updated in place in
 * training) are not consumed. */
static PyObject *call_BATCH_NORM(const char *name, any_fn fn, PyObject *const *args, Py_ssize_t n, PyObject *kw) {
    static const char *const names[] = {"input", "running_mean", "running_var", "weight", "bias", "training",
                                        "momentum", "eps"};
    static const bool optional[] = {false, true, true};
    PyObject *a[8];
    double momentum, eps;
    bool training;
    kiln_tensor *mean, *var, h[3];
    if (kp_args(name, args, n, kw, names, a, 8) < 0 || kp_bool_arg(a[5], false, &training) < 0 ||
        kp_double_arg(a[7], 1e-5, &eps) < 0 || running_arg(name, "running_mean", a[1], &mean) < 0 ||
        running_arg(name, "running_var", a[2], &var) < 0)
        return NULL;
    if (a[6] == Py_None)
        return kp_error_at(PyExc_NotImplementedError, "%s(): momentum=None (a cumulative average) is not in kiln", name);
    if (kp_double_arg(a[6], 0.1, &momentum) < 0) return NULL;
    if (mean && mean == var)
        return kp_error_at(PyExc_ValueError, "%s(): running_mean and running_var are one tensor", name);
    PyObject *tensors[3] = {a[0], a[3], a[4]};
    kp_site();
    if (kp_take_all(tensors, optional, 3, h) < 0) return NULL;
    return kp_wrap(((kiln_tensor(*)(kiln_tensor, kiln_tensor *, kiln_tensor *, kiln_tensor, kiln_tensor, bool, double,
                                    double))fn)(h[0], mean, var, h[1], h[2], training, momentum, eps));
}

/* One function per row: its sig's caller with the row's name and C function. */
#define LINALG_FUNCTION(sig, name, fn, doc)                                                   \
    static PyObject *f_##name(PyObject *m, PyObject *const *args, Py_ssize_t n, PyObject *kw) { \
        (void)m;                                                                              \
        return call_##sig(#name, (any_fn)(fn), args, n, kw);                                  \
    }
KP_TABLE_LINALG_FUNCTIONS(LINALG_FUNCTION)

/* kiln.nn.functional takes the names from here (python/kiln/nn/functional.py). */
static PyObject *f_linalg_functions(PyObject *m, PyObject *unused) {
    (void)m, (void)unused;
#define LINALG_NAME(sig, name, ...) #name,
    static const char *const names[] = {KP_TABLE_LINALG_FUNCTIONS(LINALG_NAME)};
#undef LINALG_NAME
    return kp_names_tuple(names, sizeof names / sizeof names[0]);
}

#define LINALG_METHOD(sig, name, fn, doc) {#name, CFN(f_##name), FASTKW, doc},
PyMethodDef kp_functional_linalg_functions[] = {
    KP_TABLE_LINALG_FUNCTIONS(LINALG_METHOD){"_linalg_functions", CFN(f_linalg_functions), METH_NOARGS,
                                             "the names of the functions made from the C linear-algebra table"},
    {NULL, NULL, 0, NULL},
};
