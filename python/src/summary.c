/* kiln.utils.tensorboard's C half: a kiln_summary_writer (kiln/summary.h) in a capsule, and one
 * function per call. The Python class (python/kiln/utils/tensorboard.py) gives them PyTorch's
 * SummaryWriter names and defaults. Tensors are passed as to any consuming op (kp_take), so
 * adding a loss still being computed does not wait; flush and close wait without the GIL. */
#include "kiln_py.h"

#include <kiln/summary.h>

static const char CAPSULE[] = "kiln.summary_writer";

static void writer_destroy(PyObject *capsule) {
    kiln_summary_writer *w = PyCapsule_GetPointer(capsule, CAPSULE);
    if (!w) return;
    Py_BEGIN_ALLOW_THREADS kiln_summary_writer_free(w); /* closes: the writer thread finishes */
    Py_END_ALLOW_THREADS
}

static kiln_summary_writer *writer_of(PyObject *o) {
    return PyCapsule_CheckExact(o) ? PyCapsule_GetPointer(o, CAPSULE)
                                   : (kp_error_at(PyExc_TypeError, "not a summary writer"), NULL);
}

/* _summary_open(logdir or None, flush_secs, max_queue, filename_suffix or None) */
static PyObject *f_open(PyObject *m, PyObject *const *args, Py_ssize_t n) {
    (void)m;
    if (n != 4 || (args[0] != Py_None && !PyUnicode_Check(args[0])) || (args[3] != Py_None && !PyUnicode_Check(args[3])))
        return kp_error_at(PyExc_TypeError, "_summary_open(logdir, flush_secs, max_queue, filename_suffix)");
    kiln_summary_writer_options o = kiln_summary_writer_defaults();
    o.flush_secs = PyFloat_AsDouble(args[1]);
    long q = PyLong_AsLong(args[2]);
    if (PyErr_Occurred()) return NULL;
    o.max_queue = q > 0 && q < 1 << 30 ? (int)q : 0; /* 0 is refused below with kiln's message */
    const char *logdir = args[0] == Py_None ? NULL : PyUnicode_AsUTF8(args[0]);
    o.filename_suffix = args[3] == Py_None ? NULL : PyUnicode_AsUTF8(args[3]);
    if ((args[0] != Py_None && !logdir) || (args[3] != Py_None && !o.filename_suffix)) return NULL;
    kp_site();
    kiln_summary_writer *w;
    Py_BEGIN_ALLOW_THREADS w = kiln_summary_writer_open_ex(logdir, o);
    Py_END_ALLOW_THREADS if (!w) return kp_raise_status(kiln_last_status());
    PyObject *capsule = PyCapsule_New(w, CAPSULE, writer_destroy);
    if (!capsule) kiln_summary_writer_free(w);
    return capsule;
}

static PyObject *f_path(PyObject *m, PyObject *arg) {
    (void)m;
    kiln_summary_writer *w = writer_of(arg);
    return w ? PyUnicode_FromString(kiln_summary_writer_path(w)) : NULL;
}

static PyObject *status_result(kiln_status st) { return st == KILN_OK ? Py_NewRef(Py_None) : kp_raise_status(st); }

/* _summary_add(writer, kind, tag, value, step): kind 0 a number, 1 a tensor (one element),
 * 2 a histogram of a tensor, 3 text. */
static PyObject *f_add(PyObject *m, PyObject *const *args, Py_ssize_t n) {
    (void)m;
    if (n != 5 || !PyUnicode_Check(args[2])) return kp_error_at(PyExc_TypeError, "_summary_add(writer, kind, tag, value, step)");
    kiln_summary_writer *w = writer_of(args[0]);
    long kind = PyLong_AsLong(args[1]);
    long long step = PyLong_AsLongLong(args[4]);
    const char *tag = PyUnicode_AsUTF8(args[2]);
    if (!w || !tag || PyErr_Occurred()) return NULL;
    kiln_status st;
    if (kind == 0) {
        double v = PyFloat_AsDouble(args[3]);
        if (PyErr_Occurred()) return NULL;
        kp_site();
        st = kiln_summary_writer_add_scalar(w, tag, v, step);
    } else if (kind == 3) {
        const char *text = PyUnicode_Check(args[3]) ? PyUnicode_AsUTF8(args[3]) : NULL;
        if (!text) return PyErr_Occurred() ? NULL : kp_error_at(PyExc_TypeError, "text must be a str");
        kp_site();
        st = kiln_summary_writer_add_text(w, tag, text, step);
    } else if (kind == 1 || kind == 2) {
        if (!kp_is_tensor(args[3])) return kp_error_at(PyExc_TypeError, "expected a kiln Tensor");
        kiln_tensor h = kp_take(args[3]);
        if (!h.id) return NULL;
        kp_site();
        st = kind == 1 ? kiln_summary_writer_add_scalar_tensor(w, tag, h, step) : kiln_summary_writer_add_histogram(w, tag, h, step);
    } else {
        return kp_error_at(PyExc_ValueError, "unknown kind %ld", kind);
    }
    return status_result(st);
}

static PyObject *f_flush(PyObject *m, PyObject *arg) {
    (void)m;
    kiln_summary_writer *w = writer_of(arg);
    if (!w) return NULL;
    kp_site();
    kiln_status st;
    Py_BEGIN_ALLOW_THREADS st = kiln_summary_writer_flush(w);
    Py_END_ALLOW_THREADS return status_result(st);
}

static PyObject *f_close(PyObject *m, PyObject *arg) {
    (void)m;
    kiln_summary_writer *w = writer_of(arg);
    if (!w) return NULL;
    kp_site();
    kiln_status st;
    Py_BEGIN_ALLOW_THREADS st = kiln_summary_writer_close(w);
    Py_END_ALLOW_THREADS return status_result(st);
}

PyMethodDef kp_summary_functions[] = {
    {"_summary_open", (PyCFunction)(void (*)(void))f_open, METH_FASTCALL, NULL},
    {"_summary_path", f_path, METH_O, NULL},
    {"_summary_add", (PyCFunction)(void (*)(void))f_add, METH_FASTCALL, NULL},
    {"_summary_flush", f_flush, METH_O, NULL},
    {"_summary_close", f_close, METH_O, NULL},
    {NULL, NULL, 0, NULL},
};
