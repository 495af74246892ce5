/* kiln.nn's one-input layers as kiln's C modules: Linear, Conv2d, the pools, BatchNorm2d,
 * LayerNorm over the last dim, Embedding and Dropout are kiln's own (kiln_linear_new, ...);
 * BatchNorm1d, LayerNorm over several dims, GroupNorm and batch norms without affine weights or
 * running statistics, which kiln has as functional ops only, are C modules made here with
 * kiln_module_new over those ops, so every kiln.nn layer with state is a C module in a capsule
 * (layers.c) and runs through one forward, _module_forward. Sizes are checked as C ints here;
 * the rest (positive sizes, eps, momentum, p) by the C constructors, whose errors name the
 * Python line that built the layer. */
#include "kiln_py.h"

#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* An int argument that fits a C int (kiln's constructors check the values, naming the line). */
static int int_of(PyObject *o, const char *what, int *out) {
    if (!PyLong_Check(o) || PyBool_Check(o)) {
        kp_error_at(PyExc_TypeError, "%s must be an int, not %s", what, Py_TYPE(o)->tp_name);
        return -1;
    }
    long v = PyLong_AsLong(o);
    if (v == -1 && PyErr_Occurred()) return -1;
    if (v < INT_MIN || v > INT_MAX) {
        kp_error_at(PyExc_ValueError, "%s %ld does not fit a C int", what, v);
        return -1;
    }
    *out = (int)v;
    return 0;
}

static int double_of(PyObject *o, const char *what, double *out) {
    if (!PyFloat_Check(o) && !(PyLong_Check(o) && !PyBool_Check(o))) {
        kp_error_at(PyExc_TypeError, "%s must be a number, not %s", what, Py_TYPE(o)->tp_name);
        return -1;
    }
    *out = PyFloat_AsDouble(o);
    return *out == -1.0 && PyErr_Occurred() ? -1 : 0;
}

static int seed_of(PyObject *o, uint64_t *out) {
    *out = PyLong_AsUnsignedLongLongMask(o);
    return PyErr_Occurred() ? -1 : 0;
}

#define EXPECT(fname, count, usage)                                                         \
    do {                                                                                    \
        (void)mod;                                                                          \
        if (n != (count)) return kp_error_at(PyExc_TypeError, fname "(" usage ")");         \
    } while (0)

/* _linear_new(in_features, out_features, bias, seed) */
static PyObject *f_linear(PyObject *mod, PyObject *const *args, Py_ssize_t n) {
    EXPECT("_linear_new", 4, "in_features, out_features, bias, seed");
    int64_t in, out;
    uint64_t seed;
    int bias = 0;
    if (kp_int64_arg(args[0], "in_features", &in) < 0 || kp_int64_arg(args[1], "out_features", &out) < 0 ||
        (bias = PyObject_IsTrue(args[2])) < 0 || seed_of(args[3], &seed) < 0)
        return NULL;
    kp_site();
    return kp_layer_capsule(kiln_linear_new(in, out, bias, seed));
}

/* _conv2d_new(in, out, kh, kw, sh, sw, ph, pw, dh, dw, groups, bias, seed) */
static PyObject *f_conv2d(PyObject *mod, PyObject *const *args, Py_ssize_t n) {
    EXPECT("_conv2d_new", 13, "in, out, kh, kw, sh, sw, ph, pw, dh, dw, groups, bias, seed");
    static const char *const what[] = {"kernel_size", "kernel_size", "stride", "stride", "padding",
                                       "padding", "dilation", "dilation", "groups"};
    int v[9];
    int64_t in, out;
    uint64_t seed;
    int bias = 0;
    if (kp_int64_arg(args[0], "in_channels", &in) < 0 || kp_int64_arg(args[1], "out_channels", &out) < 0) return NULL;
    for (int i = 0; i < 9; i++)
        if (int_of(args[2 + i], what[i], &v[i]) < 0) return NULL;
    if ((bias = PyObject_IsTrue(args[11])) < 0 || seed_of(args[12], &seed) < 0) return NULL;
    kiln_conv2d_options o = kiln_conv2d_defaults(in, out, v[0]);
    o.kernel_w = v[1];
    o.stride_h = v[2], o.stride_w = v[3];
    o.pad_h = v[4], o.pad_w = v[5];
    o.dilation_h = v[6], o.dilation_w = v[7];
    o.groups = v[8];
    o.bias = bias;
    kp_site();
    return kp_layer_capsule(kiln_conv2d_new(o, seed));
}

/* _pool2d_new(kind, kernel, stride, padding, ceil_mode, exclude_pad): kind "max" or "avg"; or
 * ("adaptive", out_h, out_w, 0, False, False) */
static PyObject *f_pool2d(PyObject *mod, PyObject *const *args, Py_ssize_t n) {
    EXPECT("_pool2d_new", 6, "kind, kernel, stride, padding, ceil_mode, exclude_pad");
    const char *kind = PyUnicode_Check(args[0]) ? PyUnicode_AsUTF8(args[0]) : NULL;
    if (!kind) return PyErr_Occurred() ? NULL : kp_error_at(PyExc_TypeError, "pool kind must be a str");
    bool adaptive = !strcmp(kind, "adaptive");
    int a, b, c;
    int ceil_mode = PyObject_IsTrue(args[4]), exclude_pad = PyObject_IsTrue(args[5]);
    if (int_of(args[1], adaptive ? "output_size" : "kernel_size", &a) < 0 ||
        int_of(args[2], adaptive ? "output_size" : "stride", &b) < 0 || int_of(args[3], "padding", &c) < 0 ||
        ceil_mode < 0 || exclude_pad < 0)
        return NULL;
    kp_site();
    if (adaptive) return kp_layer_capsule(kiln_adaptive_avg_pool2d_new(a, b));
    kiln_pool2d_options o = {a, a, b, b, c, c, ceil_mode, exclude_pad};
    if (!strcmp(kind, "max")) return kp_layer_capsule(kiln_max_pool2d_new_opts(o));
    if (!strcmp(kind, "avg")) return kp_layer_capsule(kiln_avg_pool2d_new_opts(o));
    return kp_error_at(PyExc_ValueError, "unknown pool kind '%s'", kind);
}

/* _embedding_new(num_embeddings, embedding_dim, seed) */
static PyObject *f_embedding(PyObject *mod, PyObject *const *args, Py_ssize_t n) {
    EXPECT("_embedding_new", 3, "num_embeddings, embedding_dim, seed");
    int64_t num, dim;
    uint64_t seed;
    if (kp_int64_arg(args[0], "num_embeddings", &num) < 0 || kp_int64_arg(args[1], "embedding_dim", &dim) < 0 ||
        seed_of(args[2], &seed) < 0)
        return NULL;
    kp_site();
    return kp_layer_capsule(kiln_embedding_new(num, dim, seed));
}

/* _dropout_new(p, seed) */
static PyObject *f_dropout(PyObject *mod, PyObject *const *args, Py_ssize_t n) {
    EXPECT("_dropout_new", 2, "p, seed");
    double p;
    uint64_t seed;
    if (double_of(args[0], "p", &p) < 0 || seed_of(args[1], &seed) < 0) return NULL;
    kp_site();
    return kp_layer_capsule(kiln_dropout_new(p, seed));
}

/* ---- norms kiln has as functional ops only: C modules over them ---- */

typedef struct {
    int64_t groups;    /* GroupNorm: groups; batch norm: channels */
    kiln_shape shape;  /* LayerNorm: normalized_shape */
    double eps, momentum;
    bool affine, track; /* batch norm: weight and bias; running statistics */
} norm_ctx;

/* The handle in the slot of m named name (parameters and buffers), or NULL. */
static kiln_tensor *slot_of(kiln_module *m, const char *name) {
    kiln_param ps[8];
    int count = kiln_module_params(m, ps, 8);
    for (int i = 0; i < count && i < 8; i++)
        if (!strcmp(ps[i].name, name)) return ps[i].slot;
    return NULL;
}

static kiln_tensor ref_of(kiln_module *m, const char *name) {
    kiln_tensor *t = slot_of(m, name);
    return t ? kiln_ref(*t) : KILN_NONE;
}

static kiln_tensor batch_norm_forward(kiln_module *m, kiln_tensor x, void *vctx) {
    const norm_ctx *c = vctx;
    bool training = kiln_module_is_training(m);
    kiln_tensor *mean = c->track ? slot_of(m, "running_mean") : NULL, *var = c->track ? slot_of(m, "running_var") : NULL;
    /* without running statistics, eval normalises with the batch's, as PyTorch does */
    kiln_tensor y = kiln_batch_norm(x, mean, var, c->affine ? ref_of(m, "weight") : KILN_NONE,
                                    c->affine ? ref_of(m, "bias") : KILN_NONE, training || !c->track, c->momentum, c->eps);
    kiln_tensor *count = c->track && training && kiln_tensor_status(y) == KILN_OK ? slot_of(m, "num_batches_tracked") : NULL;
    if (count) {
        kiln_no_grad_begin();
        *count = kiln_add_scalar(*count, 1.0);
        kiln_no_grad_end();
    }
    return y;
}

static kiln_tensor layer_norm_forward(kiln_module *m, kiln_tensor x, void *vctx) {
    const norm_ctx *c = vctx;
    return kiln_layer_norm(x, c->shape, c->affine ? ref_of(m, "weight") : KILN_NONE,
                           c->affine ? ref_of(m, "bias") : KILN_NONE, c->eps);
}

static kiln_tensor group_norm_forward(kiln_module *m, kiln_tensor x, void *vctx) {
    const norm_ctx *c = vctx;
    return kiln_group_norm(x, c->groups, c->affine ? ref_of(m, "weight") : KILN_NONE,
                           c->affine ? ref_of(m, "bias") : KILN_NONE, c->eps);
}

/* A C module of type name over ctx (taken), with weight (ones) and bias (zeros) of shape when
 * affine; NULL with kiln's error set when it cannot be made. */
static kiln_module *norm_module(const char *type, kiln_module_forward_fn fwd, norm_ctx *ctx, kiln_shape shape) {
    norm_ctx *owned = malloc(sizeof *owned);
    if (!owned) return NULL;
    *owned = *ctx;
    kiln_module *m = kiln_module_new(type, fwd, owned, free);
    if (m && ctx->affine &&
        (kiln_module_add_parameter(m, "weight", kiln_ones(KILN_CPU, KILN_F32, shape)) != KILN_OK ||
         kiln_module_add_parameter(m, "bias", kiln_zeros(KILN_CPU, KILN_F32, shape)) != KILN_OK)) {
        kiln_module_free(m);
        return NULL;
    }
    return m;
}

static PyObject *norm_capsule(kiln_module *m) {
    if (!m && kiln_last_status() == KILN_OK) return PyErr_NoMemory();
    return kp_layer_capsule(m);
}

/* A ValueError for a norm's eps (and momentum): PyUnicode_FromFormat, under kp_error_at, has no
 * %g, so the numbers are printed first. */
static PyObject *bad_eps_momentum(double eps, double momentum, bool with_momentum) {
    char e[32], m[32];
    snprintf(e, sizeof e, "%g", eps);
    snprintf(m, sizeof m, "%g", momentum);
    if (with_momentum)
        return kp_error_at(PyExc_ValueError, "eps must be finite and >= 0 and momentum in [0, 1], got %s and %s", e, m);
    return kp_error_at(PyExc_ValueError, "eps %s must be finite and >= 0", e);
}

/* _batch_norm_new(num_features, eps, momentum, affine, track_running_stats, kiln_own): kiln_own
 * (the default BatchNorm2d) takes kiln_batch_norm2d_new; otherwise a module over kiln_batch_norm
 * that takes [N, C, ...] (BatchNorm1d, or flags kiln's module lacks). */
static PyObject *f_batch_norm(PyObject *mod, PyObject *const *args, Py_ssize_t n) {
    EXPECT("_batch_norm_new", 6, "num_features, eps, momentum, affine, track_running_stats, kiln_own");
    norm_ctx c = {0};
    int affine = 0, track = 0, own = 0;
    if (kp_int64_arg(args[0], "num_features", &c.groups) < 0 || double_of(args[1], "eps", &c.eps) < 0 ||
        double_of(args[2], "momentum", &c.momentum) < 0 || (affine = PyObject_IsTrue(args[3])) < 0 ||
        (track = PyObject_IsTrue(args[4])) < 0 || (own = PyObject_IsTrue(args[5])) < 0)
        return NULL;
    kp_site();
    if (own) return kp_layer_capsule(kiln_batch_norm2d_new(c.groups, c.eps, c.momentum));
    if (c.groups < 1) return kp_error_at(PyExc_ValueError, "num_features must be positive, got %lld", (long long)c.groups);
    if (!(c.eps >= 0 && c.eps < INFINITY) || !(c.momentum >= 0 && c.momentum <= 1))
        return bad_eps_momentum(c.eps, c.momentum, true);
    c.affine = affine, c.track = track;
    kiln_shape cs = {.ndim = 1, .dims = {c.groups}};
    kiln_module *m = norm_module("BatchNorm", batch_norm_forward, &c, cs);
    if (m && track &&
        (kiln_module_add_buffer(m, "running_mean", kiln_zeros(KILN_CPU, KILN_F32, cs)) != KILN_OK ||
         kiln_module_add_buffer(m, "running_var", kiln_ones(KILN_CPU, KILN_F32, cs)) != KILN_OK ||
         kiln_module_add_buffer(m, "num_batches_tracked", kiln_zeros(KILN_CPU, KILN_I64, (kiln_shape){.ndim = 0})) != KILN_OK)) {
        kiln_module_free(m);
        m = NULL;
    }
    return norm_capsule(m);
}

/* _layer_norm_new(normalized_shape (a tuple of ints), eps, affine) */
static PyObject *f_layer_norm(PyObject *mod, PyObject *const *args, Py_ssize_t n) {
    EXPECT("_layer_norm_new", 3, "normalized_shape, eps, affine");
    norm_ctx c = {0};
    int affine = 0;
    if (kp_parse_shape(args[0], &c.shape) < 0 || double_of(args[1], "eps", &c.eps) < 0 ||
        (affine = PyObject_IsTrue(args[2])) < 0)
        return NULL;
    kp_site();
    if (c.shape.ndim == 1) return kp_layer_capsule(kiln_layer_norm_new(c.shape.dims[0], c.eps, affine));
    if (c.shape.ndim < 1) return kp_error_at(PyExc_ValueError, "normalized_shape must have at least one dim");
    for (int d = 0; d < c.shape.ndim; d++)
        if (c.shape.dims[d] < 1) return kp_error_at(PyExc_ValueError, "normalized_shape's sizes must be positive");
    if (!(c.eps >= 0 && c.eps < INFINITY)) return bad_eps_momentum(c.eps, 0, false);
    c.affine = affine;
    return norm_capsule(norm_module("LayerNorm", layer_norm_forward, &c, c.shape));
}

/* _group_norm_new(num_groups, num_channels, eps, affine) */
static PyObject *f_group_norm(PyObject *mod, PyObject *const *args, Py_ssize_t n) {
    EXPECT("_group_norm_new", 4, "num_groups, num_channels, eps, affine");
    norm_ctx c = {0};
    int64_t channels;
    int affine = 0;
    if (kp_int64_arg(args[0], "num_groups", &c.groups) < 0 || kp_int64_arg(args[1], "num_channels", &channels) < 0 ||
        double_of(args[2], "eps", &c.eps) < 0 || (affine = PyObject_IsTrue(args[3])) < 0)
        return NULL;
    if (c.groups < 1 || channels < 1 || channels % c.groups)
        return kp_error_at(PyExc_ValueError, "num_channels (%lld) must be a positive multiple of num_groups (%lld)",
                            (long long)channels, (long long)c.groups);
    if (!(c.eps >= 0 && c.eps < INFINITY)) return bad_eps_momentum(c.eps, 0, false);
    c.affine = affine;
    kp_site();
    return norm_capsule(norm_module("GroupNorm", group_norm_forward, &c, (kiln_shape){.ndim = 1, .dims = {channels}}));
}

/* _module_forward(layer, tensors, training, x): the layer's slots lent the tensors (its
 * parameters and buffers in _layer_params' order), kiln_module_forward on x, the slots given
 * back; the buffers the forward replaced (running statistics) are rebound in the Python tensors
 * of the list. */
static PyObject *f_forward(PyObject *mod, PyObject *const *args, Py_ssize_t n) {
    EXPECT("_module_forward", 4, "layer, tensors, training, x");
    kiln_module *m = kp_layer_of(args[0]);
    if (!m) return NULL;
    if (!kp_is_tensor(args[3]))
        return kp_error_at(PyExc_TypeError, "%s's input must be a kiln Tensor, not %s", kiln_module_type(m),
                            Py_TYPE(args[3])->tp_name);
    kp_layer_run run;
    kiln_tensor x = kp_take(args[3]);
    if (!x.id) return NULL;
    if (kp_layer_load(m, args[1], args[2], &run) < 0) {
        kiln_release(x);
        return NULL;
    }
    kp_site();
    kiln_tensor y = kiln_module_forward(m, x);
    kp_layer_unload(&run);
    return kp_wrap(y);
}

PyMethodDef kp_layer_module_functions[] = {
    {"_linear_new", (PyCFunction)(void (*)(void))f_linear, METH_FASTCALL, NULL},
    {"_conv2d_new", (PyCFunction)(void (*)(void))f_conv2d, METH_FASTCALL, NULL},
    {"_pool2d_new", (PyCFunction)(void (*)(void))f_pool2d, METH_FASTCALL, NULL},
    {"_embedding_new", (PyCFunction)(void (*)(void))f_embedding, METH_FASTCALL, NULL},
    {"_dropout_new", (PyCFunction)(void (*)(void))f_dropout, METH_FASTCALL, NULL},
    {"_batch_norm_new", (PyCFunction)(void (*)(void))f_batch_norm, METH_FASTCALL, NULL},
    {"_layer_norm_new", (PyCFunction)(void (*)(void))f_layer_norm, METH_FASTCALL, NULL},
    {"_group_norm_new", (PyCFunction)(void (*)(void))f_group_norm, METH_FASTCALL, NULL},
    {"_module_forward", (PyCFunction)(void (*)(void))f_forward, METH_FASTCALL, NULL},
    {NULL, NULL, 0, NULL},
};
