/* Temporary elision, after NumPy's temp_elide.c: in `(a + b) * c` the result of `a + b` is
 * referenced only by the interpreter's value stack. Handing kiln that tensor's own handle
 * (instead of a new reference) lets kiln write the product into its buffer, as a C caller's
 * consumed argument would. Two conditions make it safe:
 *  - the object's reference count is 1, so no Python variable, container or view object
 *    holds it (a Tensor subclass, a leaf that requires a gradient and an empty handle never
 *    qualify), and
 *  - the call came straight from the interpreter: between this module and the frame
 *    evaluator (_PyEval_EvalFrameDefault) only CPython's own code runs. A C extension calling
 *    PyNumber_Multiply(tmp, c) on a temporary it goes on using would also show a count of 1;
 *    walking the native stack (backtrace + dladdr) rules such a caller out.
 * The walk costs about a microsecond, so only tensors of at least ELIDE_MIN_BYTES try (the
 * same threshold as NumPy's): below it a new buffer is cheap. */
#define _GNU_SOURCE
#include "kiln_py.h"

#include <dlfcn.h>
#include <execinfo.h>
#include <string.h>

#define ELIDE_MIN_BYTES (256 * 1024)
#define STACK_DEPTH 24

static void *eval_frame;          /* the start of _PyEval_EvalFrameDefault */
static const char *python_object; /* the file holding CPython (executable or libpython) */
static const char *module_object; /* this extension's file */
static bool ready;
Py_ssize_t kp_elide_min_bytes = ELIDE_MIN_BYTES;

void kp_elide_init(void) {
    Dl_info info;
    if (!dladdr((void *)&PyNumber_Add, &info) || !info.dli_fname) return;
    python_object = info.dli_fname;
    if (!dladdr((void *)&kp_elide_init, &info) || !info.dli_fname) return;
    module_object = info.dli_fname;
    if (!dladdr((void *)&_PyEval_EvalFrameDefault, &info) || !info.dli_saddr) return;
    eval_frame = info.dli_saddr;
    void *warm[2];
    backtrace(warm, 2); /* the first call loads libgcc's unwinder: not on an op's path */
    ready = true;
}

static bool called_from_interpreter(void) {
    void *frames[STACK_DEPTH];
    int n = backtrace(frames, STACK_DEPTH);
    for (int i = 1; i < n; i++) {
        Dl_info info;
        if (!dladdr(frames[i], &info) || !info.dli_fname) return false;
        if (info.dli_fname != python_object && info.dli_fname != module_object &&
            strcmp(info.dli_fname, python_object) != 0 && strcmp(info.dli_fname, module_object) != 0)
            return false; /* another library's code sits between: it may hold the object */
        if (info.dli_saddr == eval_frame) return true;
    }
    return false;
}

bool kp_elidable(PyObject *o) {
    if (!ready || Py_REFCNT(o) != 1 || Py_TYPE(o) != &kp_TensorType) return false;
    kp_tensor *t = (kp_tensor *)o;
    if (!t->h.id || t->requires_grad || kiln_requires_grad(t->h)) return false;
    int64_t bytes = kiln_tensor_numel(t->h) * (int64_t)kiln_dtype_size(kiln_tensor_dtype(t->h));
    if (bytes < kp_elide_min_bytes) return false;
    return called_from_interpreter();
}
