/* A small parser of fastcall arguments (positional, then keywords by name), for the
 * bindings with optional arguments: each slot gets a borrowed object or stays NULL. */
#ifndef KILN_PY_ARGS_H
#define KILN_PY_ARGS_H

#include "kiln_py.h"

#include <string.h>

static inline int kp_args(const char *fname, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames,
                          const char *const *names, PyObject **out, int n) {
    for (int i = 0; i < n; i++) out[i] = NULL;
    if (nargs > n) {
        kp_error_at(PyExc_TypeError, "%s() takes at most %d arguments (%zd given)", fname, n, nargs);
        return -1;
    }
    for (Py_ssize_t i = 0; i < nargs; i++) out[i] = args[i];
    Py_ssize_t nkw = kwnames ? PyTuple_GET_SIZE(kwnames) : 0;
    for (Py_ssize_t k = 0; k < nkw; k++) {
        const char *key = PyUnicode_AsUTF8(PyTuple_GET_ITEM(kwnames, k));
        if (!key) return -1;
        int slot = -1;
        for (int i = 0; i < n; i++)
            if (!strcmp(key, names[i])) slot = i;
        if (slot < 0) {
            kp_error_at(PyExc_TypeError, "%s() got an unexpected keyword argument '%s'", fname, key);
            return -1;
        }
        if (out[slot]) {
            kp_error_at(PyExc_TypeError, "%s() got multiple values for argument '%s'", fname, key);
            return -1;
        }
        out[slot] = args[nargs + k];
    }
    return 0;
}

static inline int kp_int_arg(PyObject *o, long dflt, long *out) {
    if (!o || o == Py_None) {
        *out = dflt;
        return 0;
    }
    if (!PyIndex_Check(o)) {
        kp_error_at(PyExc_TypeError, "expected an int, not %.100s", Py_TYPE(o)->tp_name);
        return -1;
    }
    long v = PyLong_AsLong(o);
    if (v == -1 && PyErr_Occurred()) return -1;
    *out = v;
    return 0;
}

static inline int kp_double_arg(PyObject *o, double dflt, double *out) {
    if (!o || o == Py_None) {
        *out = dflt;
        return 0;
    }
    if (!PyFloat_Check(o) && !PyLong_Check(o) && !PyIndex_Check(o)) {
        kp_error_at(PyExc_TypeError, "expected a number, not %.100s", Py_TYPE(o)->tp_name);
        return -1;
    }
    double v = PyFloat_AsDouble(o);
    if (v == -1.0 && PyErr_Occurred()) return -1;
    *out = v;
    return 0;
}

static inline int kp_bool_arg(PyObject *o, bool dflt, bool *out) {
    if (!o) {
        *out = dflt;
        return 0;
    }
    int v = PyObject_IsTrue(o);
    if (v < 0) return -1;
    *out = v;
    return 0;
}

#endif
