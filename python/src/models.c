/* kiln.models.MiniLM's C half: a sentence embedder (kiln_bert + kiln_tokenizer, kiln/bert.h
 * and kiln/text.h) loaded from a model folder; embed(texts) returns NumPy [n, hidden]. */
#include "kiln_py.h"

#include <kiln/bert.h>
#include <kiln/text.h>

typedef struct {
    PyObject_HEAD
    kiln_bert *bert;
    kiln_tokenizer *tok;
} kp_embedder;

static PyObject *embedder_new(PyTypeObject *type, PyObject *args, PyObject *kw) {
    static char *names[] = {"model_dir", NULL};
    PyObject *dir_o;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "O&", names, PyUnicode_FSConverter, &dir_o)) return NULL;
    const char *dir = PyBytes_AS_STRING(dir_o);
    kp_embedder *self = (kp_embedder *)type->tp_alloc(type, 0);
    if (!self) {
        Py_DECREF(dir_o);
        return NULL;
    }
    PyObject *vocab = PyBytes_FromFormat("%s/vocab.txt", dir);
    kp_site();
    if (vocab) {
        Py_BEGIN_ALLOW_THREADS self->bert = kiln_bert_load(dir);
        if (self->bert) self->tok = kiln_tokenizer_load(PyBytes_AS_STRING(vocab), kiln_tokenizer_defaults());
        Py_END_ALLOW_THREADS
    }
    Py_XDECREF(vocab);
    Py_DECREF(dir_o);
    if (!self->bert || !self->tok) {
        Py_DECREF(self);
        return PyErr_Occurred() ? NULL : kp_raise_status(kiln_last_status() != KILN_OK ? kiln_last_status() : KILN_ERR_IO);
    }
    return (PyObject *)self;
}

static void embedder_dealloc(PyObject *o) {
    kp_embedder *self = (kp_embedder *)o;
    kiln_tokenizer_free(self->tok);
    kiln_bert_free(self->bert);
    Py_TYPE(o)->tp_free(o);
}

static PyObject *embedder_embed(PyObject *o, PyObject *texts) {
    kp_embedder *self = (kp_embedder *)o;
    PyObject *fast = PySequence_Fast(texts, "embed() takes a list of strings");
    if (!fast) return NULL;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(fast);
    if (n < 1 || n > 1 << 20) {
        Py_DECREF(fast);
        return kp_error_at(PyExc_ValueError, "embed() needs 1 to 2^20 texts, got %zd", n);
    }
    const char **ptrs = PyMem_Calloc((size_t)n, sizeof *ptrs);
    size_t *lens = PyMem_Calloc((size_t)n, sizeof *lens);
    PyObject *result = NULL;
    if (!ptrs || !lens) {
        PyErr_NoMemory();
        goto done;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *s = PySequence_Fast_GET_ITEM(fast, i);
        Py_ssize_t len;
        if (!PyUnicode_Check(s)) {
            kp_error_at(PyExc_TypeError, "text %zd is %.100s, not str", i, Py_TYPE(s)->tp_name);
            goto done;
        }
        if (!(ptrs[i] = PyUnicode_AsUTF8AndSize(s, &len))) goto done;
        lens[i] = (size_t)len;
    }
    kp_site();
    kiln_token_batch b;
    kiln_status st;
    Py_BEGIN_ALLOW_THREADS st = kiln_tokenizer_encode_batch(self->tok, n, ptrs, lens, &b);
    Py_END_ALLOW_THREADS if (st != KILN_OK) {
        kp_raise_status(st);
        goto done;
    }
    kiln_tensor e;
    Py_BEGIN_ALLOW_THREADS e = kiln_bert_embed(self->bert, b.input_ids, b.attention_mask, b.token_type_ids);
    Py_END_ALLOW_THREADS PyObject *t = kp_wrap(e);
    if (t) {
        result = kp_to_numpy((kp_tensor *)t);
        Py_DECREF(t);
    }
done:
    PyMem_Free(ptrs);
    PyMem_Free(lens);
    Py_DECREF(fast);
    return result;
}

static PyMethodDef embedder_methods[] = {
    {"embed", embedder_embed, METH_O, "Sentence embeddings of a list of strings: NumPy float32 [n, hidden], L2-normalised."},
    {NULL, NULL, 0, NULL},
};

PyTypeObject kp_EmbedderType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "kiln._C.SentenceEmbedder",
    .tp_basicsize = sizeof(kp_embedder),
    .tp_dealloc = embedder_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "SentenceEmbedder(model_dir): a BERT sentence embedder (all-MiniLM-L6-v2's kind).",
    .tp_methods = embedder_methods,
    .tp_new = embedder_new,
};
