/* Call sites and exceptions. Before each kiln call a binding records the Python file and line
 * that made it (the innermost frame outside the kiln package, so a layer written in Python
 * names its user's line), and a kiln status becomes an exception of a class per kind. */
#include "kiln_py.h"

#include <stdarg.h>
#include <string.h>

/* kiln keeps the file name's pointer in its error records, so every name handed to it lives
 * as long as the process: one strdup per distinct file, found again by the name object. */
typedef struct {
    PyObject *key; /* the code object's co_filename (a strong reference) */
    char *file;
    bool internal; /* a file of the kiln package itself */
} site_file;

#define SITE_FILES 256
static site_file files[SITE_FILES];
static char *package_dir;
static size_t package_dir_len;

static site_file *file_entry(PyObject *name) {
    size_t i = ((uintptr_t)name >> 4) % SITE_FILES;
    for (size_t n = 0; n < SITE_FILES; n++, i = (i + 1) % SITE_FILES) {
        if (files[i].key == name) return &files[i];
        if (!files[i].key) {
            const char *s = PyUnicode_AsUTF8(name);
            if (!s) {
                PyErr_Clear();
                return NULL;
            }
            char *copy = strdup(s);
            if (!copy) return NULL;
            Py_INCREF(name);
            files[i].key = name;
            files[i].file = copy;
            files[i].internal = package_dir && strncmp(copy, package_dir, package_dir_len) == 0 &&
                                copy[package_dir_len] == '/';
            return &files[i];
        }
    }
    return NULL; /* full: such a program gets "<python>" */
}

/* The line of a frame. Python computes it by walking the code object's line table from its
 * start, a tenth of a tiny op's dispatch in a long loop body (perf); a frame at the same
 * instruction of the same code object has the same line, so the answers are kept per
 * (code, instruction), each entry holding its code object so that the address is not reused. */
#define LINE_CACHE 64
static struct {
    PyCodeObject *code; /* a strong reference, or NULL */
    int lasti, line;
} lines[LINE_CACHE];

static int frame_line(PyFrameObject *frame, PyCodeObject *code) {
#if PY_VERSION_HEX >= 0x030B0000
    int lasti = PyFrame_GetLasti(frame);
    size_t i = (((uintptr_t)code >> 4) ^ (size_t)lasti * 0x9E3779B1u) % LINE_CACHE;
    if (lines[i].code == code && lines[i].lasti == lasti) return lines[i].line;
    int line = PyFrame_GetLineNumber(frame);
    if (lasti < 0) return line;
    Py_INCREF(code);
    Py_XSETREF(lines[i].code, code);
    lines[i].lasti = lasti;
    lines[i].line = line;
    return line;
#else
    (void)code;
    return PyFrame_GetLineNumber(frame);
#endif
}

/* The innermost Python frame outside the kiln package: its file (a name kept for the process)
 * and line, or "<python>" and 0. */
static void caller_site(const char **file_out, int *line_out) {
    PyFrameObject *frame = PyEval_GetFrame();
    Py_XINCREF(frame);
    const char *file = "<python>";
    int line = 0;
    while (frame) {
        PyCodeObject *code = PyFrame_GetCode(frame);
        site_file *e = file_entry(code->co_filename);
        if (e) {
            file = e->file;
            line = frame_line(frame, code);
        }
        Py_DECREF(code);
        if (e && !e->internal) break;
        PyFrameObject *back = PyFrame_GetBack(frame);
        Py_DECREF(frame);
        frame = back;
    }
    Py_XDECREF(frame);
    *file_out = file;
    *line_out = line;
}

void kp_site(void) {
    kp_dlpack_drain();
    const char *file;
    int line;
    caller_site(&file, &line);
    kiln_set_call_site(file, line);
}

PyObject *kp_error_at(PyObject *type, const char *format, ...) {
    va_list ap;
    va_start(ap, format);
    PyObject *message = PyUnicode_FromFormatV(format, ap);
    va_end(ap);
    if (!message) return NULL;
    const char *file;
    int line;
    caller_site(&file, &line);
    PyErr_Format(type, "%U (at %s:%d)", message, file, line);
    Py_DECREF(message);
    return NULL;
}

static PyObject *set_package_dir(PyObject *self, PyObject *arg) {
    (void)self;
    const char *s = PyUnicode_AsUTF8(arg);
    if (!s) return NULL;
    char *copy = strdup(s);
    if (!copy) return PyErr_NoMemory();
    free(package_dir);
    package_dir = copy;
    package_dir_len = strlen(copy);
    Py_RETURN_NONE;
}
static PyMethodDef errors_methods[] = {
    {"_set_package_dir", set_package_dir, METH_O, "The kiln package's folder: frames in it are not call sites."},
    {NULL, NULL, 0, NULL},
};

/* ---- exceptions ---- */
static PyObject *kiln_error, *shape_error, *dtype_error, *device_error, *stale_error, *index_error,
    *oom_error, *argument_error, *unsupported_error;

static PyObject *new_class(PyObject *module, const char *name, PyObject *extra_base, const char *doc) {
    PyObject *bases = extra_base ? PyTuple_Pack(2, kiln_error, extra_base) : PyTuple_Pack(1, kiln_error);
    if (!bases) return NULL;
    char qualified[96];
    snprintf(qualified, sizeof qualified, "kiln.%s", name);
    PyObject *cls = PyErr_NewExceptionWithDoc(qualified, doc, bases, NULL);
    Py_DECREF(bases);
    if (cls && PyModule_AddObjectRef(module, name, cls) < 0) Py_CLEAR(cls);
    return cls;
}

int kp_errors_init(PyObject *module) {
    kiln_error = PyErr_NewExceptionWithDoc("kiln.KilnError",
                                           "An error kiln reported; the message names the op and the Python line that queued it.",
                                           PyExc_RuntimeError, NULL);
    if (!kiln_error || PyModule_AddObjectRef(module, "KilnError", kiln_error) < 0) return -1;
    if (!(shape_error = new_class(module, "ShapeError", PyExc_ValueError, "Shapes that do not fit the op.")) ||
        !(dtype_error = new_class(module, "DTypeError", PyExc_TypeError, "A dtype the op does not take.")) ||
        !(device_error = new_class(module, "DeviceError", NULL, "Devices that differ, or one not available.")) ||
        !(stale_error = new_class(module, "StaleHandleError", NULL, "A tensor handle used after it was consumed or released.")) ||
        !(index_error = new_class(module, "KilnIndexError", PyExc_IndexError, "An index out of range.")) ||
        !(oom_error = new_class(module, "OutOfMemoryError", PyExc_MemoryError, "kiln could not allocate memory.")) ||
        !(argument_error = new_class(module, "InvalidArgumentError", PyExc_ValueError, "An argument kiln refused.")) ||
        !(unsupported_error = new_class(module, "UnsupportedError", PyExc_NotImplementedError, "An operation kiln does not support.")))
        return -1;
    return PyModule_AddFunctions(module, errors_methods);
}

PyObject *kp_raise_status(kiln_status st) {
    PyObject *cls = kiln_error;
    switch (st) {
    case KILN_ERR_SHAPE: cls = shape_error; break;
    case KILN_ERR_DTYPE: cls = dtype_error; break;
    case KILN_ERR_DEVICE: cls = device_error; break;
    case KILN_ERR_STALE_HANDLE: cls = stale_error; break;
    case KILN_ERR_INDEX: cls = index_error; break;
    case KILN_ERR_OUT_OF_MEMORY: cls = oom_error; break;
    case KILN_ERR_INVALID_ARGUMENT:
    case KILN_ERR_NULL: cls = argument_error; break;
    case KILN_ERR_UNSUPPORTED: cls = unsupported_error; break;
    default: break;
    }
    const char *msg = kiln_last_status() == st ? kiln_last_error() : NULL;
    PyErr_SetString(cls, msg && msg[0] ? msg : kiln_status_str(st));
    kiln_clear_error();
    return NULL;
}

bool kp_live(kp_tensor *t) {
    if (t->h.id) return true;
    PyErr_SetString(stale_error, "this tensor was handed to kiln as a temporary and no longer holds data");
    return false;
}
