/* kiln.optim's C half: an optimizer of kiln's (kiln/optim.h) over the Python parameters, in a
 * capsule, stepped with the gradients Python holds in .grad (kiln_optimizer_step_tensors). An
 * update is then one fused kernel per parameter, queued from C, instead of about a dozen
 * tensor ops dispatched one by one from Python: for the Fashion-MNIST MLP's Adam that was a
 * fifth of the epoch. The parameters' handles are read at each step, so a tensor Python
 * rebinds (an in-place op under no_grad) is followed with its state. A step waits for the
 * gradients without the GIL, so a second Python thread could enter the same optimizer
 * meanwhile: a `busy` flag, read and set under the GIL, refuses it (as data.c's loader does). */
#include "kiln_py.h"

#include <kiln/optim.h>

static const char CAPSULE[] = "kiln.optimizer";

typedef struct {
    kiln_optimizer *opt;
    bool busy;
} py_optim;

static void optimizer_destroy(PyObject *capsule) {
    py_optim *p = PyCapsule_GetPointer(capsule, CAPSULE);
    if (!p) return;
    kiln_optimizer_free(p->opt);
    PyMem_Free(p);
}

/* The optimizer of a capsule, claimed for this call (release with p->busy = false). */
static py_optim *claim(PyObject *o) {
    py_optim *p = PyCapsule_IsValid(o, CAPSULE) ? PyCapsule_GetPointer(o, CAPSULE) : NULL;
    if (!p) {
        if (!PyErr_Occurred()) kp_error_at(PyExc_TypeError, "not a kiln optimizer");
        return NULL;
    }
    if (p->busy) {
        kp_error_at(PyExc_RuntimeError, "this optimizer is stepping in another thread");
        return NULL;
    }
    p->busy = true;
    return p;
}

/* An option as kiln reads it: a 0 there means "the default", so a real 0 is KILN_ZERO. */
static int option(PyObject *o, double *out) {
    double v = PyFloat_AsDouble(o);
    if (v == -1.0 && PyErr_Occurred()) return -1;
    *out = v == 0 ? KILN_ZERO : v;
    return 0;
}

/* The live handles of a list of Tensors (None: KILN_NONE where none_ok), borrowed. */
static int handles(PyObject *list, Py_ssize_t n, bool none_ok, kiln_tensor *out, const char *what) {
    if (!PyList_Check(list) || PyList_GET_SIZE(list) != n) {
        kp_error_at(PyExc_TypeError, "%s must be a list of %zd tensors", what, n);
        return -1;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *o = PyList_GET_ITEM(list, i);
        if (none_ok && o == Py_None) {
            out[i] = KILN_NONE;
            continue;
        }
        if (!kp_is_tensor(o)) {
            kp_error_at(PyExc_TypeError, "%s[%zd] is %s, not a kiln.Tensor", what, i, Py_TYPE(o)->tp_name);
            return -1;
        }
        if (!kp_live((kp_tensor *)o)) return -1;
        out[i] = ((kp_tensor *)o)->h;
    }
    return 0;
}

/* _optimizer_new(kind, groups, options): kind "adam" (options (beta1, beta2, eps, decoupled))
 * or "sgd" (options (momentum, dampening, nesterov)); groups a list of (params, lr, weight_decay). */
static PyObject *f_new(PyObject *m, PyObject *const *args, Py_ssize_t n) {
    (void)m;
    if (n != 3 || !PyUnicode_Check(args[0]) || !PyList_Check(args[1]) || !PyTuple_Check(args[2]))
        return kp_error_at(PyExc_TypeError, "_optimizer_new(kind, groups, options)");
    const char *kind = PyUnicode_AsUTF8(args[0]);
    if (!kind) return NULL;
    bool adam = !strcmp(kind, "adam");
    if (!adam && strcmp(kind, "sgd")) return kp_error_at(PyExc_ValueError, "no C optimizer '%s'", kind);
    PyObject *opts = args[2];
    Py_ssize_t n_groups = PyList_GET_SIZE(args[1]), total = 0;
    if (PyTuple_GET_SIZE(opts) != (adam ? 4 : 3)) return kp_error_at(PyExc_TypeError, "wrong options for %s", kind);
    if (n_groups < 1 || n_groups > 1024) return kp_error_at(PyExc_ValueError, "%zd parameter groups: 1 to 1024", n_groups);
    for (Py_ssize_t g = 0; g < n_groups; g++) {
        PyObject *grp = PyList_GET_ITEM(args[1], g);
        if (!PyTuple_Check(grp) || PyTuple_GET_SIZE(grp) != 3 || !PyList_Check(PyTuple_GET_ITEM(grp, 0)))
            return kp_error_at(PyExc_TypeError, "group %zd must be (params, lr, weight_decay)", g);
        total += PyList_GET_SIZE(PyTuple_GET_ITEM(grp, 0));
    }
    if (total > INT_MAX / 2) return kp_error_at(PyExc_ValueError, "%zd parameters: too many", total);
    kiln_tensor *hs = PyMem_Calloc((size_t)(total ? total : 1), sizeof *hs);
    kiln_param_group *groups = PyMem_Calloc((size_t)n_groups, sizeof *groups);
    kiln_optimizer *opt = NULL;
    if (!hs || !groups) {
        PyErr_NoMemory();
        goto done;
    }
    Py_ssize_t k = 0;
    for (Py_ssize_t g = 0; g < n_groups; g++) {
        PyObject *grp = PyList_GET_ITEM(args[1], g), *ps = PyTuple_GET_ITEM(grp, 0);
        Py_ssize_t np_ = PyList_GET_SIZE(ps);
        if (handles(ps, np_, false, hs + k, "params") < 0 || option(PyTuple_GET_ITEM(grp, 1), &groups[g].lr) < 0)
            goto done;
        groups[g].weight_decay = PyFloat_AsDouble(PyTuple_GET_ITEM(grp, 2));
        if (PyErr_Occurred()) goto done;
        groups[g].params = hs + k;
        groups[g].n = (int)np_;
        k += np_;
    }
    kp_site();
    if (adam) {
        kiln_adam_options o = kiln_adam_defaults();
        int decoupled = PyObject_IsTrue(PyTuple_GET_ITEM(opts, 3));
        if (option(PyTuple_GET_ITEM(opts, 0), &o.beta1) < 0 || option(PyTuple_GET_ITEM(opts, 1), &o.beta2) < 0 ||
            option(PyTuple_GET_ITEM(opts, 2), &o.eps) < 0 || decoupled < 0)
            goto done;
        o.weight_decay = KILN_ZERO; /* each group's own */
        o.decoupled_weight_decay = decoupled;
        opt = kiln_adam_new_groups((int)n_groups, groups, o);
    } else {
        kiln_sgd_options o = kiln_sgd_defaults();
        int nesterov = PyObject_IsTrue(PyTuple_GET_ITEM(opts, 2));
        if (option(PyTuple_GET_ITEM(opts, 0), &o.momentum) < 0 || option(PyTuple_GET_ITEM(opts, 1), &o.dampening) < 0 ||
            nesterov < 0)
            goto done;
        o.weight_decay = KILN_ZERO;
        o.nesterov = nesterov;
        opt = kiln_sgd_new_groups((int)n_groups, groups, o);
    }
    if (!opt) kp_raise_status(kiln_last_status());
done:
    PyMem_Free(hs);
    PyMem_Free(groups);
    if (!opt) return NULL;
    py_optim *p = PyMem_Calloc(1, sizeof *p);
    PyObject *capsule = p ? PyCapsule_New(p, CAPSULE, optimizer_destroy) : PyErr_NoMemory();
    if (!capsule) {
        kiln_optimizer_free(opt);
        PyMem_Free(p);
        return NULL;
    }
    p->opt = opt;
    return capsule;
}

/* _optimizer_step(opt, params, grads): grads[i] is params[i]'s .grad or None. Waits for the
 * gradients (the step reads them) without the GIL. */
static PyObject *f_step(PyObject *m, PyObject *const *args, Py_ssize_t n) {
    (void)m;
    if (n != 3) return kp_error_at(PyExc_TypeError, "_optimizer_step(opt, params, grads)");
    if (!PyList_Check(args[1])) return kp_error_at(PyExc_TypeError, "params must be a list");
    Py_ssize_t np_ = PyList_GET_SIZE(args[1]);
    if (np_ > INT_MAX / 2) return kp_error_at(PyExc_ValueError, "%zd parameters: too many", np_);
    kiln_tensor small[32 * 2], *hs = np_ <= 32 ? small : PyMem_Calloc((size_t)np_ * 2, sizeof *hs);
    if (!hs) return PyErr_NoMemory();
    PyObject *ret = NULL;
    py_optim *p = NULL;
    if (handles(args[1], np_, false, hs, "params") < 0 || handles(args[2], np_, true, hs + np_, "grads") < 0 ||
        !(p = claim(args[0])))
        goto done;
    kp_site();
    kiln_status st;
    Py_BEGIN_ALLOW_THREADS st = kiln_optimizer_step_tensors(p->opt, (int)np_, hs, hs + np_);
    Py_END_ALLOW_THREADS
    p->busy = false;
    ret = st == KILN_OK ? Py_NewRef(Py_None) : kp_raise_status(st);
done:
    if (hs != small) PyMem_Free(hs);
    return ret;
}

/* _optimizer_set_lr(opt, group, lr) */
static PyObject *f_set_lr(PyObject *m, PyObject *const *args, Py_ssize_t n) {
    (void)m;
    if (n != 3) return kp_error_at(PyExc_TypeError, "_optimizer_set_lr(opt, group, lr)");
    long group = PyLong_AsLong(args[1]);
    double lr;
    if ((group == -1 && PyErr_Occurred()) || option(args[2], &lr) < 0) return NULL;
    if (group < INT_MIN || group > INT_MAX) return kp_error_at(PyExc_IndexError, "group %ld out of range", group);
    py_optim *p = claim(args[0]);
    if (!p) return NULL;
    kp_site();
    kiln_status st = kiln_optimizer_set_group_lr(p->opt, (int)group, lr);
    p->busy = false;
    return st == KILN_OK ? Py_NewRef(Py_None) : kp_raise_status(st);
}

PyMethodDef kp_optim_functions[] = {
    {"_optimizer_new", (PyCFunction)(void (*)(void))f_new, METH_FASTCALL, NULL},
    {"_optimizer_step", (PyCFunction)(void (*)(void))f_step, METH_FASTCALL, NULL},
    {"_optimizer_set_lr", (PyCFunction)(void (*)(void))f_set_lr, METH_FASTCALL, NULL},
    {NULL, NULL, 0, NULL},
};
