/* kiln.ops: users' registered ops (kiln/custom_op.h) called from Python, torch.ops's way. A
 * CustomOp object wraps a registered op (which lives as long as the process); calling it takes
 * its tensor arguments as every binding does (a reference, or an elided temporary's own handle),
 * so the op runs asynchronously on the calling thread's stream and autodiff records it. The
 * package's kiln/ops.py finds ops by attribute name and loads libraries through this file. */
#include "kiln_py.h"

#include <kiln/custom_op.h>

#include <stddef.h>

typedef struct {
    PyObject_HEAD
    kiln_custom_op *op;
    PyObject *name;            /* the registered name (str) */
    vectorcallfunc vectorcall; /* the arguments stay the interpreter's: a temporary can be elided */
} kp_custom_op;

static void custom_op_dealloc(PyObject *self) {
    Py_XDECREF(((kp_custom_op *)self)->name);
    Py_TYPE(self)->tp_free(self);
}

static PyObject *custom_op_repr(PyObject *self) {
    return PyUnicode_FromFormat("<kiln.ops.%U>", ((kp_custom_op *)self)->name);
}

/* kiln_custom_op_call consumes at most this many handles; more is refused before any is taken */
#define MAX_CALL_ARGS 64

static PyObject *custom_op_vectorcall(PyObject *self, PyObject *const *args, size_t nargsf, PyObject *kwnames) {
    kp_custom_op *op = (kp_custom_op *)self;
    if (kwnames && PyTuple_GET_SIZE(kwnames) > 0)
        return kp_error_at(PyExc_TypeError, "kiln.ops.%U() takes tensors as positional arguments only", op->name);
    Py_ssize_t n = PyVectorcall_NARGS(nargsf);
    if (n > MAX_CALL_ARGS)
        return kp_error_at(PyExc_TypeError, "kiln.ops.%U() takes at most %d tensors, got %zd", op->name,
                            KILN_CUSTOM_MAX_INPUTS, n);
    for (Py_ssize_t i = 0; i < n; i++)
        if (!kp_is_tensor(args[i]))
            return kp_error_at(PyExc_TypeError, "kiln.ops.%U() takes kiln.Tensor arguments; argument %zd is %.100s",
                                op->name, i + 1, Py_TYPE(args[i])->tp_name);
    kp_site();
    kiln_tensor handles[MAX_CALL_ARGS];
    for (Py_ssize_t i = 0; i < n; i++) {
        handles[i] = kp_take(args[i]);
        if (!handles[i].id) {
            while (i-- > 0) kiln_release(handles[i]);
            return NULL;
        }
    }
    /* n == 0 still reaches kiln, which reports the arity at this line */
    return kp_wrap(kiln_custom_op_call(op->op, (int)n, n ? handles : (kiln_tensor[1]){KILN_NONE}));
}

static PyObject *custom_op_get_name(PyObject *self, void *closure) {
    (void)closure;
    return Py_NewRef(((kp_custom_op *)self)->name);
}

static PyGetSetDef custom_op_getset[] = {
    {"name", custom_op_get_name, NULL, "The name the op was registered under.", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyTypeObject kp_CustomOpType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "kiln.ops.CustomOp",
    .tp_basicsize = sizeof(kp_custom_op),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_VECTORCALL,
    .tp_vectorcall_offset = offsetof(kp_custom_op, vectorcall),
    .tp_doc = "A registered op (kiln.ops.<name> or kiln.ops.find(name)); call it with its input tensors.",
    .tp_dealloc = custom_op_dealloc,
    .tp_repr = custom_op_repr,
    .tp_call = PyVectorcall_Call,
    .tp_getset = custom_op_getset,
};

static PyObject *custom_op_find(PyObject *mod, PyObject *arg) {
    (void)mod;
    if (!PyUnicode_Check(arg)) return kp_error_at(PyExc_TypeError, "an op name must be a str, not %.100s", Py_TYPE(arg)->tp_name);
    const char *name = PyUnicode_AsUTF8(arg);
    if (!name) return NULL;
    kiln_custom_op *found = kiln_custom_op_find(name);
    if (!found) Py_RETURN_NONE;
    kp_custom_op *op = PyObject_New(kp_custom_op, &kp_CustomOpType);
    if (!op) return NULL;
    op->op = found;
    op->name = Py_NewRef(arg);
    op->vectorcall = custom_op_vectorcall;
    return (PyObject *)op;
}

static PyObject *custom_op_load_library(PyObject *mod, PyObject *arg) {
    (void)mod;
    PyObject *bytes = NULL;
    if (!PyUnicode_FSConverter(arg, &bytes)) return NULL;
    kp_site();
    kiln_status st;
    /* a library's constructors and kiln_register_ops run here; they do not call Python */
    Py_BEGIN_ALLOW_THREADS st = kiln_custom_op_load_library(PyBytes_AS_STRING(bytes));
    Py_END_ALLOW_THREADS Py_DECREF(bytes);
    if (st == KILN_OK) Py_RETURN_NONE;
    if (st == KILN_ERR_IO) { /* as ctypes.CDLL and torch.ops.load_library raise */
        kp_error_at(PyExc_OSError, "%s", kiln_last_error());
        kiln_clear_error();
        return NULL;
    }
    return kp_raise_status(st);
}

static PyMethodDef custom_op_functions[] = {
    {"_custom_op_find", custom_op_find, METH_O, "The registered op of this name (a CustomOp), or None."},
    {"_custom_op_load_library", custom_op_load_library, METH_O,
     "Loads a shared library whose ops register (kiln_custom_op_load_library)."},
    {NULL, NULL, 0, NULL},
};

int kp_custom_ops_init(PyObject *module) {
    if (PyType_Ready(&kp_CustomOpType) < 0) return -1;
    if (PyModule_AddObjectRef(module, "CustomOp", (PyObject *)&kp_CustomOpType) < 0) return -1;
    return PyModule_AddFunctions(module, custom_op_functions);
}
