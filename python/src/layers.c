/* kiln.nn.LSTM, GRU and MultiheadAttention's C half, and what every C layer of kiln.nn shares:
 * kiln's own module (kiln_lstm_new, kiln_linear_new, ...) in a capsule. The parameters a Python
 * user trains, saves and loads are the C module's tensors: _layer_params hands out new handles
 * to them (marked as Python leaves, so backward fills their .grad), never copies. Python code
 * may rebind them (an optimizer's `p -= ...`, load_state_dict, .to()), so each forward first
 * puts the Python module's current tensors into the C module's slots, in the order
 * _layer_params gave, and afterwards rebinds the Python buffers the C forward replaced (batch
 * norm's running statistics). The GIL is held from the slot writes to the dispatch, so two
 * threads cannot interleave them. */
#include "kiln_py.h"

#include <string.h>

static const char CAPSULE[] = "kiln.layer";

static void layer_destroy(PyObject *capsule) {
    kiln_module *m = PyCapsule_GetPointer(capsule, CAPSULE);
    if (m) kiln_module_free(m);
}

kiln_module *kp_layer_of(PyObject *o) {
    kiln_module *m = PyCapsule_IsValid(o, CAPSULE) ? PyCapsule_GetPointer(o, CAPSULE) : NULL;
    if (!m && !PyErr_Occurred()) kp_error_at(PyExc_TypeError, "not a kiln layer");
    return m;
}

PyObject *kp_layer_capsule(kiln_module *m) {
    if (!m) return kp_raise_status(kiln_last_status());
    PyObject *capsule = PyCapsule_New(m, CAPSULE, layer_destroy);
    if (!capsule) kiln_module_free(m);
    return capsule;
}

int kp_int64_arg(PyObject *o, const char *what, int64_t *out) {
    if (!PyLong_Check(o) || PyBool_Check(o)) {
        kp_error_at(PyExc_TypeError, "%s must be an int, not %s", what, Py_TYPE(o)->tp_name);
        return -1;
    }
    long long v = PyLong_AsLongLong(o);
    if (v == -1 && PyErr_Occurred()) return -1;
    *out = v;
    return 0;
}

/* _layer_new(kind, a, b, num_layers, bias, batch_first, bidirectional, dropout, seed):
 * kind "lstm"/"gru" (a, b: input_size, hidden_size) or "mha" (embed_dim, num_heads; the
 * RNN-only fields are ignored). */
static PyObject *f_new(PyObject *mod, PyObject *const *args, Py_ssize_t n) {
    (void)mod;
    if (n != 9 || !PyUnicode_Check(args[0]))
        return kp_error_at(PyExc_TypeError, "_layer_new(kind, a, b, num_layers, bias, batch_first, bidirectional, dropout, seed)");
    const char *kind = PyUnicode_AsUTF8(args[0]);
    int64_t a, b, layers;
    if (!kind || kp_int64_arg(args[1], "the first size", &a) < 0 || kp_int64_arg(args[2], "the second size", &b) < 0 ||
        kp_int64_arg(args[3], "num_layers", &layers) < 0)
        return NULL;
    int bias = PyObject_IsTrue(args[4]), batch_first = PyObject_IsTrue(args[5]), bidir = PyObject_IsTrue(args[6]);
    double dropout = PyFloat_AsDouble(args[7]);
    unsigned long long seed = PyLong_AsUnsignedLongLongMask(args[8]);
    if (PyErr_Occurred() || bias < 0 || batch_first < 0 || bidir < 0) return NULL;
    kp_site();
    kiln_module *m;
    if (!strcmp(kind, "mha")) {
        kiln_multihead_attention_options o = kiln_multihead_attention_defaults(a, b);
        o.bias = bias;
        o.batch_first = batch_first;
        m = kiln_multihead_attention_new(o, seed);
    } else if (!strcmp(kind, "lstm") || !strcmp(kind, "gru")) {
        if (layers < 1 || layers > 32) return kp_error_at(PyExc_ValueError, "num_layers must be 1 to 32, got %lld", (long long)layers);
        kiln_rnn_options o = kiln_rnn_defaults(a, b);
        o.num_layers = (int)layers;
        o.bias = bias;
        o.batch_first = batch_first;
        o.bidirectional = bidir;
        o.dropout = dropout;
        m = kind[0] == 'l' ? kiln_lstm_new(o, seed) : kiln_gru_new(o, seed);
    } else {
        return kp_error_at(PyExc_ValueError, "unknown layer kind '%s'", kind);
    }
    return kp_layer_capsule(m);
}

/* The C module's tensors as [(name, Tensor, is_buffer)], in slot order: its own handles, moved
 * out of the slots (which stay empty until a run borrows them back), the parameters marked as
 * leaves of Python's backward (they are leaves of kiln's already). */
static PyObject *f_params(PyObject *mod, PyObject *arg) {
    (void)mod;
    kiln_module *m = kp_layer_of(arg);
    if (!m) return NULL;
    int count = kiln_module_params(m, NULL, 0);
    kiln_param *ps = PyMem_Calloc(count > 0 ? (size_t)count : 1, sizeof *ps);
    if (!ps) return PyErr_NoMemory();
    kiln_module_params(m, ps, count);
    PyObject *out = PyList_New(0);
    for (int i = 0; out && i < count; i++) {
        if (!ps[i].slot->id) {
            kp_error_at(PyExc_RuntimeError, "this layer's tensors were handed out already");
            Py_CLEAR(out);
            break;
        }
        bool leaf = !ps[i].buffer && kiln_requires_grad(*ps[i].slot);
        PyObject *t = kp_wrap(*ps[i].slot); /* takes the handle, on failure too */
        *ps[i].slot = KILN_NONE;
        if (t && leaf) {
            ((kp_tensor *)t)->requires_grad = true;
            kp_leaf_link((kp_tensor *)t);
        }
        PyObject *item = t ? Py_BuildValue("(sNO)", ps[i].name, t, ps[i].buffer ? Py_True : Py_False) : NULL;
        if (!item || PyList_Append(out, item) < 0) Py_CLEAR(out);
        Py_XDECREF(item);
    }
    PyMem_Free(ps);
    return out;
}

/* Lends the Python module's tensors (a list in _layer_params' order) to m's slots for one run
 * and sets its training mode: each slot gets a new handle, given back by kp_layer_unload. */
int kp_layer_load(kiln_module *m, PyObject *tensors, PyObject *training, kp_layer_run *run) {
    int train = PyObject_IsTrue(training);
    if (train < 0) return -1;
    int count = kiln_module_params(m, NULL, 0);
    if (!PyList_Check(tensors) || PyList_GET_SIZE(tensors) != count) {
        kp_error_at(PyExc_TypeError, "expected a list of the layer's %d tensors", count);
        return -1;
    }
    if (count > KP_LAYER_SLOTS) {
        kp_error_at(PyExc_ValueError, "too many parameters");
        return -1;
    }
    kiln_module_params(m, run->ps, count);
    for (int i = 0; i < count; i++) {
        PyObject *o = PyList_GET_ITEM(tensors, i);
        if (!kp_is_tensor(o)) {
            kp_error_at(PyExc_TypeError, "parameter %s is %s, not a kiln Tensor", run->ps[i].name, Py_TYPE(o)->tp_name);
            return -1;
        }
        if (!kp_live((kp_tensor *)o)) return -1;
    }
    for (int i = 0; i < count; i++) {
        kiln_release(*run->ps[i].slot);
        *run->ps[i].slot = run->lent[i] = kiln_ref(((kp_tensor *)PyList_GET_ITEM(tensors, i))->h);
    }
    run->count = count;
    run->tensors = tensors;
    kiln_module_train(m, train);
    return 0;
}

/* Takes the lent handles back, so that between runs the Python tensor is a tensor's only handle
 * and an optimizer's update reuses its buffer in place; a slot the run replaced (batch norm's
 * running statistics: the module released the lent handle) becomes the Python tensor's. */
void kp_layer_unload(kp_layer_run *run) {
    for (int i = 0; i < run->count; i++) {
        kiln_tensor *slot = run->ps[i].slot;
        kp_tensor *t = (kp_tensor *)PyList_GET_ITEM(run->tensors, i);
        if (slot->id != run->lent[i].id && slot->id) {
            kiln_release(t->h);
            t->h = *slot;
        } else {
            kiln_release(*slot);
        }
        *slot = KILN_NONE;
    }
    run->count = 0;
}

/* An optional tensor argument, as a handle to consume: None gives KILN_NONE. */
static int optional(PyObject *o, const char *what, kiln_tensor *out) {
    *out = KILN_NONE;
    if (o == Py_None) return 0;
    if (!kp_is_tensor(o)) {
        kp_error_at(PyExc_TypeError, "%s must be a kiln Tensor or None, not %s", what, Py_TYPE(o)->tp_name);
        return -1;
    }
    *out = kp_take(o);
    return out->id ? 0 : -1;
}

static void release_all(kiln_tensor *ts, int n) {
    for (int i = 0; i < n; i++)
        if (ts[i].id) kiln_release(ts[i]);
}

/* _rnn(layer, params, training, x, h0, c0): (output, h_n, c_n or None); c0 is ignored for a GRU. */
static PyObject *f_rnn(PyObject *mod, PyObject *const *args, Py_ssize_t n) {
    (void)mod;
    if (n != 6) return kp_error_at(PyExc_TypeError, "_rnn(layer, params, training, x, h0, c0)");
    kiln_module *m = kp_layer_of(args[0]);
    if (!m) return NULL;
    if (!kp_is_tensor(args[3])) return kp_error_at(PyExc_TypeError, "input must be a kiln Tensor, not %s", Py_TYPE(args[3])->tp_name);
    bool lstm = !strcmp(kiln_module_type(m), "LSTM");
    kiln_tensor in[3] = {KILN_NONE, KILN_NONE, KILN_NONE};
    kp_layer_run run;
    if (optional(args[3], "input", &in[0]) < 0 || optional(args[4], "h0", &in[1]) < 0 ||
        (lstm && optional(args[5], "c0", &in[2]) < 0) || kp_layer_load(m, args[1], args[2], &run) < 0) {
        release_all(in, 3);
        return NULL;
    }
    kp_site();
    kiln_tensor h_n = KILN_NONE, c_n = KILN_NONE;
    kiln_tensor y = lstm ? kiln_lstm(m, in[0], in[1], in[2], &h_n, &c_n) : kiln_gru(m, in[0], in[1], &h_n);
    kp_layer_unload(&run);
    /* kp_wrap consumes the handle it is given, on failure too */
    PyObject *py = kp_wrap(y);
    PyObject *ph = py ? kp_wrap(h_n) : (kiln_release(h_n), NULL);
    PyObject *pc = !ph ? (lstm ? (kiln_release(c_n), NULL) : NULL) : lstm ? kp_wrap(c_n) : Py_NewRef(Py_None);
    if (!pc) {
        Py_XDECREF(py);
        Py_XDECREF(ph);
        return NULL;
    }
    return Py_BuildValue("(NNN)", py, ph, pc);
}

/* _mha(layer, params, training, query, key, value, key_padding_mask, attn_mask, need_weights):
 * (output, weights or None). */
static PyObject *f_mha(PyObject *mod, PyObject *const *args, Py_ssize_t n) {
    (void)mod;
    if (n != 9) return kp_error_at(PyExc_TypeError, "_mha(layer, params, training, q, k, v, key_padding_mask, attn_mask, need_weights)");
    kiln_module *m = kp_layer_of(args[0]);
    if (!m) return NULL;
    int need = PyObject_IsTrue(args[8]);
    if (need < 0) return NULL;
    static const char *const what[] = {"query", "key", "value"};
    for (int i = 0; i < 3; i++)
        if (!kp_is_tensor(args[3 + i]))
            return kp_error_at(PyExc_TypeError, "%s must be a kiln Tensor, not %s", what[i], Py_TYPE(args[3 + i])->tp_name);
    kiln_tensor in[5] = {KILN_NONE, KILN_NONE, KILN_NONE, KILN_NONE, KILN_NONE};
    kp_layer_run run;
    if (optional(args[3], "query", &in[0]) < 0 || optional(args[4], "key", &in[1]) < 0 ||
        optional(args[5], "value", &in[2]) < 0 || optional(args[6], "key_padding_mask", &in[3]) < 0 ||
        optional(args[7], "attn_mask", &in[4]) < 0 || kp_layer_load(m, args[1], args[2], &run) < 0) {
        release_all(in, 5);
        return NULL;
    }
    kp_site();
    kiln_tensor w = KILN_NONE;
    kiln_tensor y = kiln_multihead_attention(m, in[0], in[1], in[2], in[3], in[4], need ? &w : NULL);
    kp_layer_unload(&run);
    PyObject *py = kp_wrap(y);
    PyObject *pw = !py ? (need ? (kiln_release(w), NULL) : NULL) : need ? kp_wrap(w) : Py_NewRef(Py_None);
    if (!pw) {
        Py_XDECREF(py);
        return NULL;
    }
    return Py_BuildValue("(NN)", py, pw);
}

PyMethodDef kp_layer_functions[] = {
    {"_layer_new", (PyCFunction)(void (*)(void))f_new, METH_FASTCALL, NULL},
    {"_layer_params", f_params, METH_O, NULL},
    {"_rnn", (PyCFunction)(void (*)(void))f_rnn, METH_FASTCALL, NULL},
    {"_mha", (PyCFunction)(void (*)(void))f_mha, METH_FASTCALL, NULL},
    {NULL, NULL, 0, NULL},
};
