/* kiln.nn.functional's ops with several tensor arguments or options (pools, embedding,
 * dropout): each a thin call of the C function of the same name. Optional tensors may be None
 * (KILN_NONE). The norms and losses are made from the C row-op table (functional_rows.c), linear,
 * conv2d, attention and batch norm from the linear-algebra table (functional_linalg.c). */
#include "kiln_py.h"

#include <math.h>

#include "args.h"

#define FASTKW (METH_FASTCALL | METH_KEYWORDS)
#define CFN(f) ((PyCFunction)(void (*)(void))(f))

/* Takes n tensor arguments (None allowed where optional[i]); on failure releases the ones
 * taken and returns -1. */
int kp_take_all(PyObject **objs, const bool *optional, int n, kiln_tensor *out) {
    for (int i = 0; i < n; i++) {
        out[i] = KILN_NONE;
        if ((!objs[i] || objs[i] == Py_None) && optional[i]) continue;
        if (!objs[i] || !kp_is_tensor(objs[i])) {
            kp_error_at(PyExc_TypeError, "argument %d must be a kiln.Tensor", i + 1);
        } else {
            out[i] = kp_take(objs[i]);
        }
        if (!out[i].id) {
            for (int j = 0; j < i; j++)
                if (out[j].id) kiln_release(out[j]);
            return -1;
        }
    }
    return 0;
}

/* torch.nn.functional.max_pool2d(input, kernel_size, stride=None, padding=0, dilation=1,
 * ceil_mode=False, return_indices=False) and avg_pool2d(input, kernel_size, stride=None,
 * padding=0, ceil_mode=False, count_include_pad=True, divisor_override=None), square windows. */
static PyObject *pool(PyObject *const *args, Py_ssize_t n, PyObject *kw, bool is_max) {
    static const char *const max_names[] = {"input", "kernel_size", "stride", "padding", "dilation", "ceil_mode", "return_indices"};
    static const char *const avg_names[] = {"input", "kernel_size", "stride", "padding", "ceil_mode", "count_include_pad", "divisor_override"};
    static const bool opt[] = {false};
    const char *fname = is_max ? "max_pool2d" : "avg_pool2d";
    PyObject *a[7];
    long k, s, p, dilation = 1;
    bool ceil_mode, include_pad = true, indices = false;
    kiln_tensor h[1];
    if (kp_args(fname, args, n, kw, is_max ? max_names : avg_names, a, 7) < 0 || kp_int_arg(a[1], 2, &k) < 0 ||
        kp_int_arg(a[2], k, &s) < 0 || kp_int_arg(a[3], 0, &p) < 0 || (is_max && kp_int_arg(a[4], 1, &dilation) < 0) ||
        kp_bool_arg(a[is_max ? 5 : 4], false, &ceil_mode) < 0 || (is_max && kp_bool_arg(a[6], false, &indices) < 0) ||
        (!is_max && kp_bool_arg(a[5], true, &include_pad) < 0))
        return NULL;
    if (k < 1 || k > 1 << 20 || s < 1 || s > 1 << 20 || p < 0 || p > 1 << 20)
        return kp_error_at(PyExc_ValueError, "pooling: kernel_size and stride must be >= 1, padding >= 0");
    if (dilation != 1 || indices || (!is_max && a[6] && a[6] != Py_None))
        return kp_error_at(PyExc_NotImplementedError, "%s: kiln's pools take no %s", fname,
                            dilation != 1 ? "dilation other than 1" : indices ? "return_indices" : "divisor_override");
    kp_site();
    if (kp_take_all(a, opt, 1, h) < 0) return NULL;
    kiln_pool2d_options o = {(int)k, (int)k, (int)s, (int)s, (int)p, (int)p, ceil_mode, !include_pad};
    return kp_wrap(is_max ? kiln_max_pool2d_opts(h[0], o) : kiln_avg_pool2d_opts(h[0], o));
}
static PyObject *f_max_pool2d(PyObject *m, PyObject *const *a, Py_ssize_t n, PyObject *k) { (void)m; return pool(a, n, k, true); }
static PyObject *f_avg_pool2d(PyObject *m, PyObject *const *a, Py_ssize_t n, PyObject *k) { (void)m; return pool(a, n, k, false); }

static PyObject *f_embedding(PyObject *m, PyObject *const *args, Py_ssize_t n, PyObject *kw) {
    (void)m;
    static const char *const names[] = {"input", "weight"};
    static const bool opt[] = {false, false};
    PyObject *a[2];
    kiln_tensor h[2];
    if (kp_args("embedding", args, n, kw, names, a, 2) < 0) return NULL;
    kp_site();
    if (kp_take_all(a, opt, 2, h) < 0) return NULL;
    return kp_wrap(kiln_embedding(h[0], h[1]));
}

static PyObject *f_dropout(PyObject *m, PyObject *const *args, Py_ssize_t n, PyObject *kw) {
    (void)m;
    static const char *const names[] = {"input", "p", "training", "generator"};
    static const bool opt[] = {false};
    PyObject *a[4];
    double p;
    bool training;
    kiln_tensor h[1];
    if (kp_args("dropout", args, n, kw, names, a, 4) < 0 || kp_double_arg(a[1], 0.5, &p) < 0 ||
        kp_bool_arg(a[2], true, &training) < 0)
        return NULL;
    if (!(p >= 0 && p <= 1)) return kp_error_at(PyExc_ValueError, "dropout probability %R is not in [0, 1]", a[1]);
    kiln_generator *g = kp_generator_of(a[3]);
    if (g == (kiln_generator *)-1) return NULL;
    kp_site();
    if (kp_take_all(a, opt, 1, h) < 0) return NULL;
    if (!training || p == 0) return kp_wrap(h[0]);
    return kp_wrap(kiln_dropout_gen(h[0], p, g));
}

PyMethodDef kp_functional_functions[] = {
    {"max_pool2d", CFN(f_max_pool2d), FASTKW, "2-d max pooling"},
    {"avg_pool2d", CFN(f_avg_pool2d), FASTKW, "2-d average pooling"},
    {"embedding", CFN(f_embedding), FASTKW, "rows of weight at the indices"},
    {"dropout", CFN(f_dropout), FASTKW, "zeroes elements with probability p (in training)"},
    {NULL, NULL, 0, NULL},
};
