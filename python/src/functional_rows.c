/* kiln.nn.functional's norms and losses: one function per row of the C row-op table
 * (src/ir/row_table.h, through KP_TABLE_ROW_FUNCTIONS in op_table_generated.h), each called as
 * torch.nn.functional's function of that name, by one caller per dims kind (the row's
 * signature). A new norm or loss of an existing kind is a Python function with no edit here.
 * Tensors passed are consumed as every op consumes them (a reference, or an elided temporary);
 * optional ones may be None. The losses' reduction is torch's string ('mean', 'sum', 'none',
 * and 'batchmean' for kl_div); arguments past the tensors are keywords, as torch's deprecated
 * size_average and reduce sit between them there. */
#include "kiln_py.h"

#include <math.h>

#include "args.h"
#include "op_table.h"

#define FASTKW (METH_FASTCALL | METH_KEYWORDS)
#define CFN(f) ((PyCFunction)(void (*)(void))(f))

typedef void (*any_fn)(void);

/* A row as the callers see it: its Python name, arity, functions and scalar parameter. */
typedef struct {
    const char *name;
    int arity;
    any_fn fn, ex;     /* kiln_name, and kiln_name_ex or NULL */
    const char *param; /* the double or bool parameter's keyword ("eps", "beta"), or "" */
    double dflt;       /* its default (NaN: Python's None) */
} row_def;

/* The tensors a norm takes (weight and bias may be None) and a loss takes (both needed). */
static const bool norm_optional[] = {false, true, true}, loss_optional[] = {false, false};

/* At most `positional` positional arguments, then kp_args. */
static int row_args(const row_def *r, PyObject *const *args, Py_ssize_t n, PyObject *kw, const char *const *names,
                    PyObject **out, int count, int positional) {
    if (n > positional) {
        kp_error_at(PyExc_TypeError, "%s() takes %d positional arguments (%zd given); pass the rest by keyword", r->name,
                     positional, n);
        return -1;
    }
    return kp_args(r->name, args, n, kw, names, out, count);
}

/* torch's reduction string; 'mean' when absent. */
static int reduction_arg(const row_def *r, PyObject *o, kiln_reduction *out) {
    static const char *const words[] = {"mean", "sum", "none", "batchmean"};
    *out = KILN_REDUCTION_MEAN;
    if (!o) return 0;
    const char *s = PyUnicode_Check(o) ? PyUnicode_AsUTF8(o) : NULL;
    for (int i = 0; s && i < 4; i++)
        if (!strcmp(s, words[i])) {
            *out = (kiln_reduction)i;
            return 0;
        }
    if (!PyErr_Occurred())
        kp_error_at(PyExc_ValueError, "%s(): reduction %R is not 'mean', 'sum', 'none' or 'batchmean'", r->name, o);
    return -1;
}

/* NORMALIZED: (input, normalized_shape, weight=None[, bias=None], eps=...) */
static inline PyObject *call_NORMALIZED(const row_def *r, PyObject *const *args, Py_ssize_t n, PyObject *kw) {
    static const char *const names3[] = {"input", "normalized_shape", "weight", "bias", "eps"};
    static const char *const names2[] = {"input", "normalized_shape", "weight", "eps"};
    int count = r->arity + 2;
    PyObject *a[5];
    double eps;
    kiln_shape shape;
    if (kp_args(r->name, args, n, kw, r->arity == 3 ? names3 : names2, a, count) < 0 ||
        kp_double_arg(a[count - 1], r->dflt, &eps) < 0)
        return NULL;
    if (!a[1]) return kp_error_at(PyExc_TypeError, "%s() needs normalized_shape", r->name);
    PyObject *t = PyTuple_Pack(1, a[1]);
    int rc = t ? kp_parse_shape(t, &shape) : -1;
    Py_XDECREF(t);
    if (rc < 0) return NULL;
    PyObject *objs[3] = {a[0], a[2], r->arity == 3 ? a[3] : NULL};
    kiln_tensor h[3];
    kp_site();
    if (kp_take_all(objs, norm_optional, r->arity, h) < 0) return NULL;
    if (r->arity == 3)
        return kp_wrap(((kiln_tensor(*)(kiln_tensor, kiln_shape, kiln_tensor, kiln_tensor, double))r->fn)(h[0], shape, h[1],
                                                                                                        h[2], eps));
    return kp_wrap(((kiln_tensor(*)(kiln_tensor, kiln_shape, kiln_tensor, double))r->fn)(h[0], shape, h[1], eps));
}

/* GROUPS: (input, num_groups, weight=None, bias=None, eps=...) */
static inline PyObject *call_GROUPS(const row_def *r, PyObject *const *args, Py_ssize_t n, PyObject *kw) {
    static const char *const names[] = {"input", "num_groups", "weight", "bias", "eps"};
    PyObject *a[5];
    long groups;
    double eps;
    if (kp_args(r->name, args, n, kw, names, a, 5) < 0 || kp_double_arg(a[4], r->dflt, &eps) < 0) return NULL;
    if (!a[1] || a[1] == Py_None) return kp_error_at(PyExc_TypeError, "%s() needs num_groups", r->name);
    if (kp_int_arg(a[1], 0, &groups) < 0) return NULL;
    PyObject *objs[3] = {a[0], a[2], a[3]};
    kiln_tensor h[3];
    kp_site();
    if (kp_take_all(objs, norm_optional, 3, h) < 0) return NULL;
    return kp_wrap(((kiln_tensor(*)(kiln_tensor, int64_t, kiln_tensor, kiln_tensor, double))r->fn)(h[0], (int64_t)groups,
                                                                                                  h[1], h[2], eps));
}

/* NONE, NONE_K, NONE_FLAG: (input, target, *, reduction='mean'[, param=...]) */
static PyObject *call_pair(const row_def *r, int kind, PyObject *const *args, Py_ssize_t n, PyObject *kw) {
    const char *names[4] = {"input", "target", "reduction", r->param};
    PyObject *a[4];
    kiln_reduction red;
    double k = r->dflt;
    bool flag = r->dflt != 0;
    int count = kind == 0 ? 3 : 4;
    if (row_args(r, args, n, kw, names, a, count, 2) < 0 || reduction_arg(r, a[2], &red) < 0 ||
        (kind == 1 && kp_double_arg(a[3], r->dflt, &k) < 0) || (kind == 2 && kp_bool_arg(a[3], r->dflt != 0, &flag) < 0))
        return NULL;
    if (!r->ex && red != KILN_REDUCTION_MEAN) return kp_error_at(PyExc_ValueError, "%s() takes no reduction", r->name);
    kiln_tensor h[2];
    kp_site();
    if (kp_take_all(a, loss_optional, 2, h) < 0) return NULL;
    if (!r->ex) switch (kind) { /* a row without an _ex form: the mean only */
        case 0: return kp_wrap(((kiln_tensor(*)(kiln_tensor, kiln_tensor))r->fn)(h[0], h[1]));
        case 1: return kp_wrap(((kiln_tensor(*)(kiln_tensor, kiln_tensor, double))r->fn)(h[0], h[1], k));
        default: return kp_wrap(((kiln_tensor(*)(kiln_tensor, kiln_tensor, bool))r->fn)(h[0], h[1], flag));
        }
    switch (kind) {
    case 0: return kp_wrap(((kiln_tensor(*)(kiln_tensor, kiln_tensor, kiln_reduction))r->ex)(h[0], h[1], red));
    case 1: return kp_wrap(((kiln_tensor(*)(kiln_tensor, kiln_tensor, double, kiln_reduction))r->ex)(h[0], h[1], k, red));
    default: return kp_wrap(((kiln_tensor(*)(kiln_tensor, kiln_tensor, bool, kiln_reduction))r->ex)(h[0], h[1], flag, red));
    }
}
static inline PyObject *call_NONE(const row_def *r, PyObject *const *a, Py_ssize_t n, PyObject *k) { return call_pair(r, 0, a, n, k); }
static inline PyObject *call_NONE_K(const row_def *r, PyObject *const *a, Py_ssize_t n, PyObject *k) { return call_pair(r, 1, a, n, k); }
static inline PyObject *call_NONE_FLAG(const row_def *r, PyObject *const *a, Py_ssize_t n, PyObject *k) { return call_pair(r, 2, a, n, k); }

/* CLASSES, CLASSES_OPT: (input, target, weight=None, *, ignore_index=None, reduction='mean'[,
 * label_smoothing=0.0]). ignore_index None ignores no class (torch's -100 must be given: a
 * target of -100 is otherwise an index out of range, reported, never silently dropped). */
static PyObject *call_classes(const row_def *r, bool opt, PyObject *const *args, Py_ssize_t n, PyObject *kw) {
    static const char *const names[] = {"input", "target", "weight", "ignore_index", "reduction", "label_smoothing"};
    PyObject *a[6];
    kiln_cross_entropy_options o = kiln_cross_entropy_defaults();
    long ignore;
    if (row_args(r, args, n, kw, names, a, opt ? 6 : 5, 3) < 0 || reduction_arg(r, a[4], &o.reduction) < 0 ||
        (opt && kp_double_arg(a[5], 0, &o.label_smoothing) < 0))
        return NULL;
    if (a[3] && a[3] != Py_None) {
        if (kp_int_arg(a[3], 0, &ignore) < 0) return NULL;
        o.has_ignore_index = true, o.ignore_index = ignore;
    }
    if (a[2] && a[2] != Py_None) { /* not consumed: the options are lent (kiln/nn.h) */
        if (!kp_is_tensor(a[2])) return kp_error_at(PyExc_TypeError, "%s(): weight must be a kiln.Tensor", r->name);
        o.class_weights = ((kp_tensor *)a[2])->h;
    }
    if (!opt && !r->ex && (o.class_weights.id || o.has_ignore_index || o.reduction != KILN_REDUCTION_MEAN))
        return kp_error_at(PyExc_ValueError, "%s() takes no weight, ignore_index or reduction", r->name);
    kiln_tensor h[2];
    kp_site();
    if (kp_take_all(a, loss_optional, 2, h) < 0) return NULL;
    if (opt) return kp_wrap(((kiln_tensor(*)(kiln_tensor, kiln_tensor, kiln_cross_entropy_options))r->fn)(h[0], h[1], o));
    if (!r->ex) return kp_wrap(((kiln_tensor(*)(kiln_tensor, kiln_tensor))r->fn)(h[0], h[1]));
    return kp_wrap(((kiln_tensor(*)(kiln_tensor, kiln_tensor, kiln_cross_entropy_options))r->ex)(h[0], h[1], o));
}
static inline PyObject *call_CLASSES(const row_def *r, PyObject *const *a, Py_ssize_t n, PyObject *k) { return call_classes(r, false, a, n, k); }
static inline PyObject *call_CLASSES_OPT(const row_def *r, PyObject *const *a, Py_ssize_t n, PyObject *k) { return call_classes(r, true, a, n, k); }

/* One function per row: its row_def and its dims kind's caller. */
#define ROW_FUNCTION(dims, arity, py, fn, ex, param, dflt, doc)                                                \
    static PyObject *f_##py(PyObject *m, PyObject *const *args, Py_ssize_t n, PyObject *kw) {                   \
        (void)m;                                                                                                \
        static const row_def def = {#py, arity, (any_fn)(fn), (any_fn)(ex), param, dflt};                       \
        return call_##dims(&def, args, n, kw);                                                                  \
    }
KP_TABLE_ROW_FUNCTIONS(ROW_FUNCTION)

/* A tuple of the count names. */
PyObject *kp_names_tuple(const char *const *names, size_t count) {
    PyObject *t = PyTuple_New((Py_ssize_t)count);
    for (size_t i = 0; t && i < count; i++) {
        PyObject *s = PyUnicode_FromString(names[i]);
        if (!s) {
            Py_CLEAR(t);
            break;
        }
        PyTuple_SET_ITEM(t, (Py_ssize_t)i, s);
    }
    return t;
}

/* kiln.nn.functional takes the names from here (python/kiln/nn/functional.py). */
static PyObject *f_row_functions(PyObject *m, PyObject *unused) {
    (void)m, (void)unused;
#define ROW_NAME(dims, arity, py, ...) #py,
    static const char *const names[] = {KP_TABLE_ROW_FUNCTIONS(ROW_NAME)};
#undef ROW_NAME
    return kp_names_tuple(names, sizeof names / sizeof names[0]);
}

#define ROW_METHOD(dims, arity, py, fn, ex, param, dflt, doc) {#py, CFN(f_##py), FASTKW, doc},
PyMethodDef kp_functional_row_functions[] = {
    KP_TABLE_ROW_FUNCTIONS(ROW_METHOD){"_row_functions", CFN(f_row_functions), METH_NOARGS,
                                       "the names of the functions made from the C row-op table"},
    {NULL, NULL, 0, NULL},
};
