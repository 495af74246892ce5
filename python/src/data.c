/* kiln.utils.data's C half: kiln's loader (kiln/data.h) over an in-memory dataset, in a
 * capsule, for DataLoader over a TensorDataset of NumPy arrays. The loader's worker threads
 * assemble and shuffle batches while Python trains; next() waits for a batch without the GIL.
 * kiln's loader must be driven from one thread at a time, and a Python thread could call it
 * while another waits in next() with the GIL released: a `busy` flag, read and set under the
 * GIL, refuses the second call instead. */
#include "kiln_py.h"

#include <kiln/data.h>

static const char CAPSULE[] = "kiln.loader";

typedef struct {
    kiln_dataset *ds;
    kiln_loader *loader;
    bool busy;
} py_loader;

static void loader_close(py_loader *p) {
    kiln_loader *l = p->loader;
    kiln_dataset *ds = p->ds;
    p->loader = NULL;
    p->ds = NULL;
    Py_BEGIN_ALLOW_THREADS if (l) kiln_loader_free(l); /* joins the workers */
    if (ds) kiln_dataset_free(ds);
    Py_END_ALLOW_THREADS
}

static void loader_destroy(PyObject *capsule) {
    py_loader *p = PyCapsule_GetPointer(capsule, CAPSULE);
    if (!p) return;
    loader_close(p);
    PyMem_Free(p);
}

/* The loader of a capsule, claimed for this call (release with p->busy = false). */
static py_loader *claim(PyObject *o) {
    py_loader *p = PyCapsule_IsValid(o, CAPSULE) ? PyCapsule_GetPointer(o, CAPSULE) : NULL;
    if (!p) {
        if (!PyErr_Occurred()) kp_error_at(PyExc_TypeError, "not a kiln loader");
        return NULL;
    }
    if (!p->loader) {
        kp_error_at(PyExc_RuntimeError, "this DataLoader was closed");
        return NULL;
    }
    if (p->busy) {
        kp_error_at(PyExc_RuntimeError, "this DataLoader is being iterated by another thread");
        return NULL;
    }
    p->busy = true;
    return p;
}

/* _loader_new(inputs, targets, batch_size, workers, shuffle, drop_last, seed): the tensors are
 * copied to the loader's host memory. */
static PyObject *f_new(PyObject *m, PyObject *const *args, Py_ssize_t n) {
    (void)m;
    if (n != 7 || !kp_is_tensor(args[0]) || !kp_is_tensor(args[1]))
        return kp_error_at(PyExc_TypeError, "_loader_new(inputs, targets, batch_size, workers, shuffle, drop_last, seed)");
    long long batch = PyLong_AsLongLong(args[2]);
    long workers = PyLong_AsLong(args[3]);
    int shuffle = PyObject_IsTrue(args[4]), drop_last = PyObject_IsTrue(args[5]);
    unsigned long long seed = PyLong_AsUnsignedLongLongMask(args[6]);
    if (PyErr_Occurred() || shuffle < 0 || drop_last < 0) return NULL;
    if (batch < 1) return kp_error_at(PyExc_ValueError, "batch_size must be at least 1, got %lld", batch);
    if (workers < 0 || workers > 256) return kp_error_at(PyExc_ValueError, "num_workers must be 0 to 256, got %ld", workers);
    py_loader *p = PyMem_Calloc(1, sizeof *p);
    if (!p) return PyErr_NoMemory();
    kiln_tensor x = kp_take(args[0]);
    kiln_tensor y = x.id ? kp_take(args[1]) : KILN_NONE;
    if (!y.id) {
        if (x.id) kiln_release(x);
        PyMem_Free(p);
        return NULL;
    }
    kiln_loader_options o = kiln_loader_defaults(batch);
    o.workers = (int)workers;
    o.shuffle = shuffle;
    o.drop_last = drop_last;
    o.seed = seed;
    kp_site();
    kiln_status st = KILN_OK;
    Py_BEGIN_ALLOW_THREADS p->ds = kiln_memory_dataset_new(x, y); /* waits for their values */
    if (p->ds) p->loader = kiln_loader_new(p->ds, o);
    if (!p->loader) st = kiln_last_status();
    Py_END_ALLOW_THREADS if (!p->loader) {
        if (p->ds) kiln_dataset_free(p->ds);
        PyMem_Free(p);
        return kp_raise_status(st);
    }
    PyObject *capsule = PyCapsule_New(p, CAPSULE, loader_destroy);
    if (!capsule) {
        loader_close(p);
        PyMem_Free(p);
    }
    return capsule;
}

static PyObject *f_start_epoch(PyObject *m, PyObject *const *args, Py_ssize_t n) {
    (void)m;
    if (n != 2) return kp_error_at(PyExc_TypeError, "_loader_start_epoch(loader, epoch)");
    long long epoch = PyLong_AsLongLong(args[1]);
    if (PyErr_Occurred()) return NULL;
    py_loader *p = claim(args[0]);
    if (!p) return NULL;
    kp_site();
    kiln_status st;
    Py_BEGIN_ALLOW_THREADS st = kiln_loader_start_epoch(p->loader, epoch);
    Py_END_ALLOW_THREADS p->busy = false;
    return st == KILN_OK ? Py_NewRef(Py_None) : kp_raise_status(st);
}

/* The next (inputs, targets), or None after the epoch's last batch. */
static PyObject *f_next(PyObject *m, PyObject *arg) {
    (void)m;
    py_loader *p = claim(arg);
    if (!p) return NULL;
    kp_site();
    kiln_tensor x = KILN_NONE, y = KILN_NONE;
    kiln_status st;
    Py_BEGIN_ALLOW_THREADS st = kiln_loader_next(p->loader, &x, &y);
    Py_END_ALLOW_THREADS p->busy = false;
    if (st == KILN_DONE) return Py_NewRef(Py_None);
    if (st != KILN_OK) return kp_raise_status(st);
    PyObject *px = kp_wrap(x);
    if (!px) {
        kiln_release(y);
        return NULL;
    }
    PyObject *py = kp_wrap(y);
    if (!py) {
        Py_DECREF(px);
        return NULL;
    }
    return Py_BuildValue("(NN)", px, py);
}

static PyObject *f_batches(PyObject *m, PyObject *arg) {
    (void)m;
    py_loader *p = claim(arg);
    if (!p) return NULL;
    int64_t b = kiln_loader_batches(p->loader);
    p->busy = false;
    return PyLong_FromLongLong((long long)b);
}

/* Stops the workers and frees the loader now (closing twice is fine). */
static PyObject *f_close(PyObject *m, PyObject *arg) {
    (void)m;
    py_loader *p = PyCapsule_IsValid(arg, CAPSULE) ? PyCapsule_GetPointer(arg, CAPSULE) : NULL;
    if (!p) return PyErr_Occurred() ? NULL : kp_error_at(PyExc_TypeError, "not a kiln loader");
    if (p->busy) return kp_error_at(PyExc_RuntimeError, "this DataLoader is being iterated by another thread");
    loader_close(p);
    Py_RETURN_NONE;
}

PyMethodDef kp_data_functions[] = {
    {"_loader_new", (PyCFunction)(void (*)(void))f_new, METH_FASTCALL, NULL},
    {"_loader_start_epoch", (PyCFunction)(void (*)(void))f_start_epoch, METH_FASTCALL, NULL},
    {"_loader_next", f_next, METH_O, NULL},
    {"_loader_batches", f_batches, METH_O, NULL},
    {"_loader_close", f_close, METH_O, NULL},
    {NULL, NULL, 0, NULL},
};
