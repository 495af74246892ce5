/* Tensor methods, module functions and operators made from the rows of op_table.h, by four
 * generic callers (unary, binary, reduction, dim, diagonal offset). Each records the Python call site, takes
 * its operands (a reference, or an elided temporary's own handle) and wraps the result. */
#include "kiln_py.h"

#include <string.h>

#include "args.h"
#include "op_table.h"

typedef kiln_tensor (*unary_fn)(kiln_tensor);
typedef kiln_tensor (*binary_fn)(kiln_tensor, kiln_tensor);
typedef kiln_tensor (*scalar_fn)(kiln_tensor, double);
typedef kiln_tensor (*reduce_all_fn)(kiln_tensor);
typedef kiln_tensor (*reduce_dims_fn)(kiln_tensor, kiln_dims, bool);
typedef kiln_tensor (*dim_fn)(kiln_tensor, int);

static bool is_number(PyObject *o) { return PyFloat_Check(o) || PyLong_Check(o); }

static PyObject *need_tensor(PyObject *o, const char *name) {
    if (kp_is_tensor(o)) return o;
    kp_error_at(PyExc_TypeError, "%s() expects a kiln.Tensor, not %.100s", name, Py_TYPE(o)->tp_name);
    return NULL;
}

static PyObject *call_unary(PyObject *self, unary_fn fn) {
    kp_site();
    kiln_tensor h = kp_take(self);
    if (!h.id) return NULL;
    return kp_wrap(fn(h));
}

PyObject *kp_binary(PyObject *a, PyObject *b, binary_fn fn, scalar_fn scalar, scalar_fn rscalar) {
    bool ta = kp_is_tensor(a), tb = kp_is_tensor(b);
    if (!ta && !tb) Py_RETURN_NOTIMPLEMENTED;
    kp_site();
    if (ta && is_number(b) && scalar) {
        double v = PyFloat_AsDouble(b);
        if (v == -1.0 && PyErr_Occurred()) return NULL;
        kiln_tensor h = kp_take(a);
        return h.id ? kp_wrap(scalar(h, v)) : NULL;
    }
    if (tb && is_number(a) && rscalar) {
        double v = PyFloat_AsDouble(a);
        if (v == -1.0 && PyErr_Occurred()) return NULL;
        kiln_tensor h = kp_take(b);
        return h.id ? kp_wrap(rscalar(h, v)) : NULL;
    }
    if ((!ta && !is_number(a) && !PyList_Check(a) && !PyTuple_Check(a) && !PyObject_CheckBuffer(a)) ||
        (!tb && !is_number(b) && !PyList_Check(b) && !PyTuple_Check(b) && !PyObject_CheckBuffer(b)))
        Py_RETURN_NOTIMPLEMENTED;
    kiln_tensor like = ta ? ((kp_tensor *)a)->h : ((kp_tensor *)b)->h;
    kiln_tensor ha = kp_operand(a, like);
    if (!ha.id) return NULL;
    kiln_tensor hb = kp_operand(b, ta ? ha : like);
    if (!hb.id) {
        kiln_release(ha);
        return NULL;
    }
    return kp_wrap(fn(ha, hb));
}

static PyObject *call_reduce(PyObject *self, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames, const char *name,
                             reduce_all_fn all, reduce_dims_fn dims_fn) {
    static const char *const names[] = {"dim", "keepdim"};
    PyObject *a[2];
    if (kp_args(name, args, nargs, kwnames, names, a, 2) < 0) return NULL;
    bool keepdim;
    if (kp_bool_arg(a[1], false, &keepdim) < 0) return NULL;
    kiln_dims dims = KILN_ALL_DIMS;
    if (a[0] && a[0] != Py_None && kp_parse_dims(a[0], 0, &dims) < 0) return NULL;
    kp_site();
    kiln_tensor h = kp_take(self);
    if (!h.id) return NULL;
    if (dims.n < 0 && !keepdim && all) return kp_wrap(all(h)); /* (a DIMS row has no whole form) */
    return kp_wrap(dims_fn(h, dims, keepdim));
}

static PyObject *call_dim(PyObject *self, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames, const char *name,
                          dim_fn fn) {
    static const char *const names[] = {"dim"};
    PyObject *a[1];
    if (kp_args(name, args, nargs, kwnames, names, a, 1) < 0) return NULL;
    if (!a[0]) return kp_error_at(PyExc_TypeError, "%s() missing its dim argument", name);
    long dim;
    if (kp_int_arg(a[0], 0, &dim) < 0) return NULL;
    kp_site();
    kiln_tensor h = kp_take(self);
    if (!h.id) return NULL;
    return kp_wrap(fn(h, (int)dim));
}

/* t.name(diagonal=0): the shape table's OFFSET rows (tril, triu). */
static PyObject *call_offset(PyObject *self, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames,
                             const char *name, kiln_tensor (*fn)(kiln_tensor, int64_t)) {
    static const char *const names[] = {"diagonal"};
    PyObject *a[1];
    long diagonal;
    if (kp_args(name, args, nargs, kwnames, names, a, 1) < 0 || kp_int_arg(a[0], 0, &diagonal) < 0) return NULL;
    kp_site();
    kiln_tensor h = kp_take(self);
    if (!h.id) return NULL;
    return kp_wrap(fn(h, (int64_t)diagonal));
}

/* ---- the rows, expanded ---- */
#define UNARY_DEFS(name, fn, doc)                                                                  \
    static PyObject *m_##name(PyObject *self, PyObject *unused) {                                  \
        (void)unused;                                                                              \
        return call_unary(self, fn);                                                               \
    }                                                                                              \
    static PyObject *f_##name(PyObject *mod, PyObject *arg) {                                      \
        (void)mod;                                                                                 \
        return need_tensor(arg, #name) ? call_unary(arg, fn) : NULL;                               \
    }
KP_UNARY_OPS(UNARY_DEFS)

#define BINARY_DEFS(name, fn, sfn, rsfn, doc)                                                      \
    static PyObject *m_##name(PyObject *self, PyObject *other) {                                   \
        PyObject *r = kp_binary(self, other, fn, sfn, rsfn);                                       \
        if (r == Py_NotImplemented) {                                                              \
            Py_DECREF(r);                                                                          \
            return kp_error_at(PyExc_TypeError, #name "() cannot take %.100s", Py_TYPE(other)->tp_name); \
        }                                                                                          \
        return r;                                                                                  \
    }                                                                                              \
    static PyObject *f_##name(PyObject *mod, PyObject *const *args, Py_ssize_t n) {                \
        (void)mod;                                                                                 \
        if (n != 2) return kp_error_at(PyExc_TypeError, #name "() takes 2 arguments (%zd given)", n); \
        if (!kp_is_tensor(args[0]) && !kp_is_tensor(args[1]))                                      \
            return kp_error_at(PyExc_TypeError, #name "() needs a kiln.Tensor argument");          \
        PyObject *r = kp_binary(args[0], args[1], fn, sfn, rsfn);                                  \
        if (r == Py_NotImplemented) {                                                              \
            Py_DECREF(r);                                                                          \
            return kp_error_at(PyExc_TypeError, #name "() cannot take these arguments");           \
        }                                                                                          \
        return r;                                                                                  \
    }
KP_BINARY_OPS(BINARY_DEFS)

#define REDUCE_DEFS(name, all, dims, doc)                                                          \
    static PyObject *m_##name(PyObject *self, PyObject *const *args, Py_ssize_t n, PyObject *kw) { \
        return call_reduce(self, args, n, kw, #name, all, dims);                                   \
    }                                                                                              \
    static PyObject *f_##name(PyObject *mod, PyObject *const *args, Py_ssize_t n, PyObject *kw) {  \
        (void)mod;                                                                                 \
        if (n < 1 || !need_tensor(args[0], #name)) return n < 1 ? kp_error_at(PyExc_TypeError, #name "() needs a tensor") : NULL; \
        return call_reduce(args[0], args + 1, n - 1, kw, #name, all, dims);                        \
    }
KP_REDUCE_OPS(REDUCE_DEFS)

#define DIM_DEFS(name, fn, doc)                                                                    \
    static PyObject *m_##name(PyObject *self, PyObject *const *args, Py_ssize_t n, PyObject *kw) { \
        return call_dim(self, args, n, kw, #name, fn);                                             \
    }                                                                                              \
    static PyObject *f_##name(PyObject *mod, PyObject *const *args, Py_ssize_t n, PyObject *kw) {  \
        (void)mod;                                                                                 \
        if (n < 1 || !need_tensor(args[0], #name)) return n < 1 ? kp_error_at(PyExc_TypeError, #name "() needs a tensor") : NULL; \
        return call_dim(args[0], args + 1, n - 1, kw, #name, fn);                                  \
    }
KP_DIM_OPS(DIM_DEFS)

#define OFFSET_DEFS(name, fn, doc)                                                                 \
    static PyObject *m_##name(PyObject *self, PyObject *const *args, Py_ssize_t n, PyObject *kw) { \
        return call_offset(self, args, n, kw, #name, fn);                                          \
    }                                                                                              \
    static PyObject *f_##name(PyObject *mod, PyObject *const *args, Py_ssize_t n, PyObject *kw) {  \
        (void)mod;                                                                                 \
        if (n < 1 || !need_tensor(args[0], #name)) return n < 1 ? kp_error_at(PyExc_TypeError, #name "() needs a tensor") : NULL; \
        return call_offset(args[0], args + 1, n - 1, kw, #name, fn);                               \
    }
KP_OFFSET_OPS(OFFSET_DEFS)

#define FASTKW (METH_FASTCALL | METH_KEYWORDS)
#define CFN(f) ((PyCFunction)(void (*)(void))(f))
#define UNARY_M(name, fn, doc) {#name, m_##name, METH_NOARGS, doc},
#define BINARY_M(name, fn, sfn, rsfn, doc) {#name, m_##name, METH_O, doc},
#define REDUCE_M(name, all, dims, doc) {#name, CFN(m_##name), FASTKW, doc},
#define DIM_M(name, fn, doc) {#name, CFN(m_##name), FASTKW, doc},
#define UNARY_F(name, fn, doc) {#name, f_##name, METH_O, doc},
#define BINARY_F(name, fn, sfn, rsfn, doc) {#name, CFN(f_##name), METH_FASTCALL, doc},
#define REDUCE_F(name, all, dims, doc) {#name, CFN(f_##name), FASTKW, doc},
#define DIM_F(name, fn, doc) {#name, CFN(f_##name), FASTKW, doc},

PyMethodDef kp_tensor_table_methods[] = {
    KP_UNARY_OPS(UNARY_M) KP_BINARY_OPS(BINARY_M) KP_REDUCE_OPS(REDUCE_M) KP_DIM_OPS(DIM_M) KP_OFFSET_OPS(DIM_M){NULL, NULL, 0, NULL},
};
PyMethodDef kp_module_table_functions[] = {
    KP_UNARY_OPS(UNARY_F) KP_BINARY_OPS(BINARY_F) KP_REDUCE_OPS(REDUCE_F) KP_DIM_OPS(DIM_F) KP_OFFSET_OPS(DIM_F){NULL, NULL, 0, NULL},
};

/* ---- operators ---- */
static PyObject *nb_add(PyObject *a, PyObject *b) { return kp_binary(a, b, kiln_add, kiln_add_scalar, kiln_add_scalar); }
static PyObject *nb_sub(PyObject *a, PyObject *b) { return kp_binary(a, b, kiln_sub, kiln_sub_scalar, kiln_rsub_scalar); }
static PyObject *nb_mul(PyObject *a, PyObject *b) { return kp_binary(a, b, kiln_mul, kiln_mul_scalar, kiln_mul_scalar); }
static PyObject *nb_div(PyObject *a, PyObject *b) { return kp_binary(a, b, kiln_div, kiln_div_scalar, kiln_rdiv_scalar); }
static PyObject *nb_mod(PyObject *a, PyObject *b) { return kp_binary(a, b, kiln_remainder, kiln_remainder_scalar, NULL); }
static PyObject *nb_matmul(PyObject *a, PyObject *b) { return kp_binary(a, b, kiln_matmul, NULL, NULL); }
static PyObject *nb_pow(PyObject *a, PyObject *b, PyObject *mod) {
    if (mod != Py_None) Py_RETURN_NOTIMPLEMENTED;
    return kp_binary(a, b, kiln_pow, kiln_pow_scalar, NULL);
}
static PyObject *nb_floordiv(PyObject *a, PyObject *b) {
    PyObject *q = nb_div(a, b);
    if (!q || q == Py_NotImplemented) return q;
    PyObject *r = call_unary(q, kiln_floor);
    Py_DECREF(q);
    return r;
}
static PyObject *nb_neg(PyObject *a) { return call_unary(a, kiln_neg); }
static PyObject *nb_abs(PyObject *a) { return call_unary(a, kiln_abs); }
static PyObject *nb_pos(PyObject *a) { return Py_NewRef(a); }
static PyObject *nb_invert(PyObject *a) { return call_unary(a, kiln_logical_not); }
static PyObject *nb_and(PyObject *a, PyObject *b) { return kp_binary(a, b, kiln_logical_and, NULL, NULL); }
static PyObject *nb_or(PyObject *a, PyObject *b) { return kp_binary(a, b, kiln_logical_or, NULL, NULL); }

/* a += b: the object's handle is passed owned and replaced by the result's, so kiln writes in
 * place when no other handle shares the buffer (views made earlier keep the old values). The
 * result keeps a's shape and dtype, checked first so that a failing update leaves a as it was. */
static bool broadcasts_to(kiln_shape from, kiln_shape to) {
    if (from.ndim > to.ndim) return false;
    for (int i = 1; i <= from.ndim; i++) {
        int64_t f = from.dims[from.ndim - i], t = to.dims[to.ndim - i];
        if (f != t && f != 1) return false;
    }
    return true;
}

static PyObject *inplace(PyObject *self, PyObject *other, binary_fn fn, scalar_fn scalar) {
    if (!kp_is_tensor(self)) Py_RETURN_NOTIMPLEMENTED;
    kp_tensor *t = (kp_tensor *)self;
    if (!kp_live(t)) return NULL;
    if (t->requires_grad && kiln_grad_enabled()) {
        kp_error_at(PyExc_RuntimeError,
                    "a leaf tensor that requires grad is used in an in-place operation (use kiln.no_grad())");
        return NULL;
    }
    kiln_shape shape = kiln_tensor_shape(t->h);
    kiln_dtype dtype = kiln_tensor_dtype(t->h);
    kiln_tensor o = KILN_NONE;
    double v = 0;
    bool use_scalar = is_number(other) && scalar;
    if (use_scalar) {
        v = PyFloat_AsDouble(other);
        if (v == -1.0 && PyErr_Occurred()) return NULL;
    } else {
        if (!kp_is_tensor(other) && !is_number(other) && !PyList_Check(other) && !PyObject_CheckBuffer(other))
            Py_RETURN_NOTIMPLEMENTED;
        kp_site();
        o = kp_operand(other, t->h);
        if (!o.id) return NULL;
        kiln_shape os = kiln_tensor_shape(o);
        if (os.ndim < 0 || !broadcasts_to(os, shape)) {
            kiln_release(o);
            kp_error_at(PyExc_ValueError, "in-place operation: the operand does not broadcast to the tensor's shape");
            return NULL;
        }
    }
    kp_site();
    kiln_tensor old = t->h;
    t->h = KILN_NONE;
    kiln_tensor r = use_scalar ? scalar(old, v) : fn(old, o);
    if (kiln_tensor_status(r) == KILN_OK && kiln_tensor_dtype(r) != dtype) r = kiln_cast(r, dtype);
    t->h = r;
    if (kiln_tensor_status(r) != KILN_OK) {
        return kp_raise_tensor(kiln_ref(r));
    }
    if (t->requires_grad) kiln_require_grad(t->h);
    return Py_NewRef(self);
}
static PyObject *nb_iadd(PyObject *a, PyObject *b) { return inplace(a, b, kiln_add, kiln_add_scalar); }
static PyObject *nb_isub(PyObject *a, PyObject *b) { return inplace(a, b, kiln_sub, kiln_sub_scalar); }
static PyObject *nb_imul(PyObject *a, PyObject *b) { return inplace(a, b, kiln_mul, kiln_mul_scalar); }
static PyObject *nb_idiv(PyObject *a, PyObject *b) { return inplace(a, b, kiln_div, kiln_div_scalar); }
static PyObject *nb_ipow(PyObject *a, PyObject *b, PyObject *m) {
    (void)m;
    return inplace(a, b, kiln_pow, kiln_pow_scalar);
}

extern unaryfunc kp_tensor_float, kp_tensor_int, kp_tensor_index_fn;
extern inquiry kp_tensor_bool;
static PyObject *nb_float(PyObject *a) { return kp_tensor_float(a); }
static PyObject *nb_int(PyObject *a) { return kp_tensor_int(a); }
static PyObject *nb_index(PyObject *a) { return kp_tensor_index_fn(a); }
static int nb_bool(PyObject *a) { return kp_tensor_bool(a); }

PyNumberMethods kp_tensor_as_number = {
    .nb_add = nb_add,
    .nb_subtract = nb_sub,
    .nb_multiply = nb_mul,
    .nb_remainder = nb_mod,
    .nb_power = nb_pow,
    .nb_negative = nb_neg,
    .nb_positive = nb_pos,
    .nb_absolute = nb_abs,
    .nb_bool = nb_bool,
    .nb_invert = nb_invert,
    .nb_and = nb_and,
    .nb_or = nb_or,
    .nb_int = nb_int,
    .nb_float = nb_float,
    .nb_inplace_add = nb_iadd,
    .nb_inplace_subtract = nb_isub,
    .nb_inplace_multiply = nb_imul,
    .nb_inplace_power = nb_ipow,
    .nb_floor_divide = nb_floordiv,
    .nb_true_divide = nb_div,
    .nb_inplace_true_divide = nb_idiv,
    .nb_index = nb_index,
    .nb_matrix_multiply = nb_matmul,
};

PyObject *kp_richcompare(PyObject *a, PyObject *b, int op) {
    if (b == Py_None && (op == Py_EQ || op == Py_NE)) return PyBool_FromLong(op == Py_NE);
    switch (op) {
    case Py_EQ: return kp_binary(a, b, kiln_eq, kiln_eq_scalar, kiln_eq_scalar);
    case Py_NE: return kp_binary(a, b, kiln_ne, kiln_ne_scalar, kiln_ne_scalar);
    case Py_LT: return kp_binary(a, b, kiln_lt, kiln_lt_scalar, kiln_gt_scalar);
    case Py_LE: return kp_binary(a, b, kiln_le, kiln_le_scalar, kiln_ge_scalar);
    case Py_GT: return kp_binary(a, b, kiln_gt, kiln_gt_scalar, kiln_lt_scalar);
    case Py_GE: return kp_binary(a, b, kiln_ge, kiln_ge_scalar, kiln_le_scalar);
    }
    Py_RETURN_NOTIMPLEMENTED;
}
