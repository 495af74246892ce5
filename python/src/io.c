/* kiln.save / kiln.load's C half: tensors to a safetensors file under names, and one named
 * tensor back (kiln_tensors_save / kiln_load_tensor); kiln/serialization.py reads the file's
 * header for the names and builds the dict. */
#include "kiln_py.h"

#include <kiln/optim.h>

static PyObject *f_save_tensors(PyObject *m, PyObject *const *args, Py_ssize_t n) {
    (void)m;
    if (n != 3 || !PyUnicode_Check(args[0]) || !PyList_Check(args[1]) || !PyList_Check(args[2]) ||
        PyList_GET_SIZE(args[1]) != PyList_GET_SIZE(args[2]))
        return kp_error_at(PyExc_TypeError, "_save_tensors(path, names, tensors)");
    Py_ssize_t count = PyList_GET_SIZE(args[1]);
    if (count < 1 || count > 1 << 20) return kp_error_at(PyExc_ValueError, "nothing to save");
    const char *path = PyUnicode_AsUTF8(args[0]);
    const char **names = PyMem_Calloc((size_t)count, sizeof *names);
    kiln_tensor *ts = PyMem_Calloc((size_t)count, sizeof *ts);
    PyObject *result = NULL;
    if (!path || !names || !ts) {
        if (path) PyErr_NoMemory();
        goto done;
    }
    for (Py_ssize_t i = 0; i < count; i++) {
        PyObject *name = PyList_GET_ITEM(args[1], i), *t = PyList_GET_ITEM(args[2], i);
        if (!PyUnicode_Check(name) || !kp_is_tensor(t)) {
            kp_error_at(PyExc_TypeError, "entry %zd: names are strings, values kiln tensors", i);
            goto done;
        }
        if (!(names[i] = PyUnicode_AsUTF8(name)) || !kp_live((kp_tensor *)t)) goto done;
        ts[i] = ((kp_tensor *)t)->h; /* not consumed */
    }
    kp_site();
    kiln_status st;
    Py_BEGIN_ALLOW_THREADS st = kiln_tensors_save(path, (int)count, names, ts);
    Py_END_ALLOW_THREADS if (st != KILN_OK) kp_raise_status(st);
    else result = Py_NewRef(Py_None);
done:
    PyMem_Free(names);
    PyMem_Free(ts);
    return result;
}

static PyObject *f_load_tensor(PyObject *m, PyObject *const *args, Py_ssize_t n) {
    (void)m;
    if (n != 3 || !PyUnicode_Check(args[0]) || (args[1] != Py_None && !PyUnicode_Check(args[1])))
        return kp_error_at(PyExc_TypeError, "_load_tensor(path, name, device)");
    kiln_device dev;
    if (kp_parse_device(args[2], &dev) < 0) return NULL;
    const char *path = PyUnicode_AsUTF8(args[0]);
    const char *name = args[1] == Py_None ? NULL : PyUnicode_AsUTF8(args[1]);
    if (!path || (args[1] != Py_None && !name)) return NULL;
    kp_site();
    kiln_tensor h;
    Py_BEGIN_ALLOW_THREADS h = kiln_load_tensor(path, name, dev);
    Py_END_ALLOW_THREADS return kp_wrap(h);
}

PyMethodDef kp_io_functions[] = {
    {"_save_tensors", (PyCFunction)(void (*)(void))f_save_tensors, METH_FASTCALL, NULL},
    {"_load_tensor", (PyCFunction)(void (*)(void))f_load_tensor, METH_FASTCALL, NULL},
    {NULL, NULL, 0, NULL},
};
