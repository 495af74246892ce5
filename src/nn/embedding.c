/* Embedding and the functional embedding: rows of a [num_embeddings, dim] table picked by
 * integer indices of any shape. */
#include "kiln/tensor.h"
#include "nn/layers-impl.h"

typedef struct {
    int64_t num, dim;
} embedding_state;

/* weight's rows at idx (t: idx's tensor, borrowed), as idx's shape with dim appended; indices
 * out of [0, num) fail when the gather runs (kiln_index_select reports the bad value). */
static kiln_tensor lookup(kiln_tensor idx, const kiln__tensor *t, kiln_tensor weight, int64_t dim) {
    kiln_shape out = {.ndim = t->ndim + 1};
    for (int d = 0; d < t->ndim; d++) out.dims[d] = t->shape[d];
    out.dims[t->ndim] = dim;
    kiln_tensor flat = kiln_reshape(idx, KILN_SHAPE(-1));
    return kiln_reshape(kiln_index_select(weight, 0, flat), out);
}

static kiln_tensor embedding_forward(kiln_module *m, kiln_tensor idx) {
    const embedding_state *s = m->state;
    const kiln__tensor *t = kiln__nn_peek(idx);
    if (!t || (t->dtype != KILN_I32 && t->dtype != KILN_I64) || t->ndim >= KILN_MAX_DIMS)
        return kiln__nn_fail("Embedding", 1, &idx, t && t->ndim < KILN_MAX_DIMS ? KILN_ERR_DTYPE : KILN_ERR_SHAPE,
                             "Embedding(%lld, %lld) expects i32 or i64 indices of at most %d dims, got %s with %d dims",
                             (long long)s->num, (long long)s->dim, KILN_MAX_DIMS - 1,
                             t ? kiln_dtype_name(t->dtype) : "?", t ? t->ndim : -1);
    return lookup(idx, t, kiln_ref(m->params[0].tensor), s->dim);
}

static const kiln__module_vtable embedding_vt = {"Embedding", embedding_forward, NULL};

kiln_module *kiln_embedding_new(int64_t num_embeddings, int64_t dim, uint64_t seed) {
    if (num_embeddings < 1 || dim < 1)
        return kiln__nn_bad_arg("kiln_embedding_new", "num_embeddings %lld and dim %lld must be positive",
                                (long long)num_embeddings, (long long)dim);
    kiln_module *m = kiln__module_new(&embedding_vt, sizeof(embedding_state));
    if (m) *(embedding_state *)m->state = (embedding_state){num_embeddings, dim};
    /* torch's default: N(0, 1) */
    kiln__nn_param ps[1] = {
        {"weight", kiln_randn(KILN_CPU, KILN_F32, KILN_SHAPE(num_embeddings, dim), kiln__nn_seed(seed, 0)), false}};
    return kiln__nn_finish(m, 1, ps);
}

static kiln_tensor embedding(kiln_tensor idx, kiln_tensor weight) {
    const char *op = "kiln_embedding";
    kiln_tensor in[2] = {idx, weight};
    const kiln__tensor *t = kiln__nn_peek(idx), *w = kiln__nn_peek(weight);
    char sa[128];
    if (!t || !w) return kiln__nn_fail(op, 2, in, KILN_ERR_INVALID_ARGUMENT, "unusable input");
    if (t->dtype != KILN_I32 && t->dtype != KILN_I64)
        return kiln__nn_fail(op, 2, in, KILN_ERR_DTYPE, "indices must be i32 or i64, got %s", kiln_dtype_name(t->dtype));
    if (t->ndim >= KILN_MAX_DIMS)
        return kiln__nn_fail(op, 2, in, KILN_ERR_SHAPE, "indices have %d dims: at most %d", t->ndim, KILN_MAX_DIMS - 1);
    if (w->ndim != 2)
        return kiln__nn_fail(op, 2, in, KILN_ERR_SHAPE, "weight must be [num_embeddings, dim], got %s",
                             kiln__nn_shape_str(sa, sizeof sa, w));
    return lookup(idx, t, weight, w->shape[1]);
}

kiln_tensor kiln_embedding(kiln_tensor indices, kiln_tensor weight) {
    const char *outer = kiln__op_scope_enter("kiln_embedding");
    kiln_tensor y = embedding(indices, weight);
    kiln__op_scope_leave(outer);
    return y;
}
