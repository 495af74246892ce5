/* DLPack for Python: t.__dlpack__() / __dlpack_device__() hand NumPy or PyTorch kiln's own
 * buffer (kiln_to_dlpack), kiln.from_dlpack(x) takes theirs without a copy (kiln_from_dlpack).
 * A producer's deleter may take the GIL (NumPy's does), and kiln calls it from whichever
 * thread frees the buffer, possibly an engine thread while this thread holds the GIL waiting
 * for that engine: so kiln gets a wrapper whose deleter only queues the producer's struct, and
 * the queue is emptied under the GIL at the next binding call (kp_site). */
#include "kiln_py.h"

#include <dlpack/dlpack.h>
#include <kiln/dlpack.h>
#include <stdatomic.h>
#include <stdlib.h>

typedef struct deferred {
    DLManagedTensor wrapper; /* what kiln holds */
    DLManagedTensor *producer;
    struct deferred *next;
} deferred;

static _Atomic(deferred *) to_delete;

static void defer_delete(DLManagedTensor *m) {
    deferred *d = (deferred *)m;
    d->next = atomic_load_explicit(&to_delete, memory_order_relaxed);
    while (!atomic_compare_exchange_weak_explicit(&to_delete, &d->next, d, memory_order_release, memory_order_relaxed)) {
    }
}

void kp_dlpack_drain(void) {
    if (!atomic_load_explicit(&to_delete, memory_order_relaxed)) return;
    deferred *d = atomic_exchange_explicit(&to_delete, NULL, memory_order_acquire);
    while (d) {
        deferred *next = d->next;
        if (d->producer->deleter) d->producer->deleter(d->producer);
        free(d);
        d = next;
    }
}

static void capsule_destructor(PyObject *capsule) {
    if (!PyCapsule_IsValid(capsule, "dltensor")) return; /* consumed: the consumer deletes it */
    DLManagedTensor *m = PyCapsule_GetPointer(capsule, "dltensor");
    if (m && m->deleter) m->deleter(m);
}

static PyObject *m_dlpack(PyObject *self, PyObject *args, PyObject *kw) {
    (void)args, (void)kw; /* stream, max_version, dl_device, copy: the CPU needs none of them */
    kp_tensor *t = (kp_tensor *)self;
    if (!kp_live(t)) return NULL;
    kp_site();
    kiln_tensor h = kiln_ref(t->h);
    struct DLManagedTensor *m = NULL;
    kiln_status st;
    Py_BEGIN_ALLOW_THREADS st = kiln_to_dlpack(h, &m);
    Py_END_ALLOW_THREADS if (st != KILN_OK) return kp_raise_status(st);
    PyObject *capsule = PyCapsule_New(m, "dltensor", capsule_destructor);
    if (!capsule) m->deleter(m);
    return capsule;
}

static PyObject *m_dlpack_device(PyObject *self, PyObject *unused) {
    (void)unused;
    kp_tensor *t = (kp_tensor *)self;
    if (!kp_live(t)) return NULL;
    kiln_device d = kiln_tensor_device(t->h);
    int type = kiln_device_kind(d) == KILN_KIND_OPENCL ? kDLOpenCL : kDLCPU;
    return Py_BuildValue("(ii)", type, kiln_device_index(d));
}

static PyObject *f_from_dlpack(PyObject *mod, PyObject *obj) {
    (void)mod;
    PyObject *capsule;
    if (PyCapsule_CheckExact(obj)) {
        capsule = Py_NewRef(obj);
    } else {
        capsule = PyObject_CallMethod(obj, "__dlpack__", NULL);
        if (!capsule) {
            if (PyErr_ExceptionMatches(PyExc_AttributeError)) {
                PyErr_Clear();
                kp_error_at(PyExc_TypeError, "from_dlpack() takes an object with __dlpack__, not %.100s", Py_TYPE(obj)->tp_name);
            }
            return NULL;
        }
    }
    DLManagedTensor *m = PyCapsule_IsValid(capsule, "dltensor") ? PyCapsule_GetPointer(capsule, "dltensor") : NULL;
    if (!m) {
        Py_DECREF(capsule);
        PyErr_Clear();
        kp_error_at(PyExc_ValueError, "not an unconsumed DLPack capsule (\"dltensor\")");
        return NULL;
    }
    deferred *d = calloc(1, sizeof *d);
    if (!d) {
        Py_DECREF(capsule);
        return PyErr_NoMemory();
    }
    d->wrapper.dl_tensor = m->dl_tensor;
    d->wrapper.manager_ctx = d;
    d->wrapper.deleter = defer_delete;
    d->producer = m;
    kp_site();
    kiln_tensor h = kiln_from_dlpack((struct DLManagedTensor *)&d->wrapper);
    if (kiln_tensor_status(h) != KILN_OK) {
        free(d); /* on failure kiln did not take it: the capsule still owns the producer's struct */
        Py_DECREF(capsule);
        return kp_raise_tensor(h);
    }
    PyCapsule_SetName(capsule, "used_dltensor");
    Py_DECREF(capsule);
    return kp_wrap(h);
}

PyMethodDef kp_dlpack_methods[] = {
    {"__dlpack__", (PyCFunction)(void (*)(void))m_dlpack, METH_VARARGS | METH_KEYWORDS,
     "A DLPack capsule over this tensor's buffer (waits for its data; CPU tensors)."},
    {"__dlpack_device__", m_dlpack_device, METH_NOARGS, "(device type, index) as DLPack numbers them."},
    {NULL, NULL, 0, NULL},
};
PyMethodDef kp_dlpack_functions[] = {
    {"from_dlpack", f_from_dlpack, METH_O, "A tensor over another library's buffer (no copy when it is dense)."},
    {NULL, NULL, 0, NULL},
};
