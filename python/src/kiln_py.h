/* Shared declarations of the kiln extension module (kiln._C): the Tensor object, the argument
 * parsers, the call-site and error helpers every binding uses. The module is written over the
 * public C API only (include/kiln/), with the call-site macros off: each binding records the
 * calling Python frame's file:line (kp_site) before it calls a plain kiln function. */
#ifndef KILN_PY_H
#define KILN_PY_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <kiln/autodiff.h>
#include <kiln/core.h>
#include <kiln/engine.h>
#include <kiln/nn.h>
#include <kiln/tensor.h>

typedef struct kp_tensor {
    PyObject_HEAD
    kiln_tensor h;            /* KILN_NONE once handed to kiln as an elided temporary */
    PyObject *grad;           /* the accumulated gradient (a Tensor) or NULL */
    bool requires_grad;       /* a leaf marked by the user (kept across in-place rebinding) */
    struct kp_tensor *leaf_prev, *leaf_next; /* the list of such leaves (kp_leaves) */
    PyObject *weakreflist;
    PyObject *dict;
} kp_tensor;

extern PyTypeObject kp_TensorType;
extern PyTypeObject kp_DTypeType;
extern PyTypeObject kp_GeneratorType;
extern PyObject *kp_numpy; /* the numpy module, imported at init */

#define kp_is_tensor(o) PyObject_TypeCheck((o), &kp_TensorType)

/* ---- call sites and errors (errors.c) ---- */
/* Records the innermost Python frame outside the kiln package as the call site of the next
 * kiln calls on this thread. */
void kp_site(void);
int kp_errors_init(PyObject *module);
/* Gives imported DLPack buffers kiln released back to their producers (under the GIL). */
void kp_dlpack_drain(void);
/* Raises type with a printf-style message (PyUnicode_FromFormat's) followed by the calling
 * Python line, " (at file.py:12)", as kiln's own errors name it; returns NULL. For the binding's
 * own checks of its arguments. */
PyObject *kp_error_at(PyObject *type, const char *format, ...);
/* Raises the exception of status st with kiln's last error message; returns NULL. */
PyObject *kp_raise_status(kiln_status st);
/* The live handle of a Tensor, or NULL with RuntimeError (an elided or consumed one). */
bool kp_live(kp_tensor *t);

/* ---- tensors (tensor.c) ---- */
/* Wraps a new handle (owned) as a Tensor; a result poisoned at dispatch raises its error now. */
PyObject *kp_wrap(kiln_tensor h);
/* Raises the error tensor h carries (consumed), waiting for it when it comes from a run. */
PyObject *kp_raise_tensor(kiln_tensor h);
/* A handle to pass to a consuming op: a new reference, or the tensor's own handle when the
 * object is a temporary only the interpreter's stack holds (elide.c). NONE with an exception
 * set on failure. */
kiln_tensor kp_take(PyObject *o);
/* kp_take of n objects (None or NULL allowed where optional[i]: KILN_NONE); on failure releases
 * those taken and returns -1 (functional.c). */
int kp_take_all(PyObject **objs, const bool *optional, int n, kiln_tensor *out);
/* A tuple of count names (str), for the kiln.nn.functional names a table gives (functional_rows.c). */
PyObject *kp_names_tuple(const char *const *names, size_t count);
/* Like kp_take for any operand: a Tensor, or a Python number / NumPy array made a tensor of
 * like's dtype and device (like may be NONE). */
kiln_tensor kp_operand(PyObject *o, kiln_tensor like);
bool kp_elidable(PyObject *o);
void kp_elide_init(void);
extern Py_ssize_t kp_elide_min_bytes;
extern PyObject *kp_tensor_factory; /* kiln.tensor, set by the package's __init__ */
void kp_leaf_link(kp_tensor *t);
void kp_leaf_unlink(kp_tensor *t);
extern kp_tensor kp_leaves; /* sentinel of the circular list */

/* ---- arguments (convert.c) ---- */
int kp_parse_shape(PyObject *args, kiln_shape *out);  /* ints, or one tuple/list of ints */
int kp_parse_dtype(PyObject *o, kiln_dtype dflt, kiln_dtype *out);
int kp_parse_device(PyObject *o, kiln_device *out);
int kp_parse_dims(PyObject *o, int ndim, kiln_dims *out); /* an int or a tuple of ints */
PyObject *kp_dtype_object(kiln_dtype d);
int kp_dtypes_init(PyObject *module);
PyObject *kp_from_buffer(PyObject *obj, kiln_dtype dtype, kiln_device dev);
PyObject *kp_to_numpy(kp_tensor *t);
PyObject *kp_shape_tuple(kiln_shape s);

/* ---- tables (ops.c, index.c, module.c) ---- */
extern PyMethodDef kp_tensor_table_methods[];
extern PyMethodDef kp_module_table_functions[];
extern PyMethodDef kp_tensor_shape_methods[];   /* shape_ops.c: the shape table's split ... unfold */
extern PyMethodDef kp_module_shape_functions[];
extern PyNumberMethods kp_tensor_as_number;
extern PyMappingMethods kp_tensor_as_mapping;
PyObject *kp_richcompare(PyObject *a, PyObject *b, int op);
PyObject *kp_binary(PyObject *a, PyObject *b, kiln_tensor (*fn)(kiln_tensor, kiln_tensor),
                    kiln_tensor (*scalar)(kiln_tensor, double), kiln_tensor (*rscalar)(kiln_tensor, double));
kiln_generator *kp_generator_of(PyObject *o); /* NULL: the global generator */

/* ---- kiln's C layers behind kiln.nn (layers.c, layer_modules.c) ---- */
PyObject *kp_layer_capsule(kiln_module *m); /* takes m; NULL m: raises kiln's last error */
kiln_module *kp_layer_of(PyObject *o);      /* NULL + TypeError if o is no layer capsule */
/* One run of a layer: the Python tensors lent to its slots (kp_layer_load) and taken back after
 * the forward (kp_layer_unload), with the replaced buffers rebound in the Python tensors. */
#define KP_LAYER_SLOTS 64
typedef struct {
    kiln_param ps[KP_LAYER_SLOTS];
    kiln_tensor lent[KP_LAYER_SLOTS];
    int count;
    PyObject *tensors; /* the list given to kp_layer_load (borrowed) */
} kp_layer_run;
int kp_layer_load(kiln_module *m, PyObject *tensors, PyObject *training, kp_layer_run *run);
void kp_layer_unload(kp_layer_run *run);
int kp_int64_arg(PyObject *o, const char *what, int64_t *out); /* an int (not a bool), or TypeError */

#endif
