/* Attention within segments of a packed sequence (FlashAttention's "varlen" form): q, k and v
 * [heads, T, E] hold n sequences one after another along T (lengths[i] rows each), and each
 * row attends to the rows of its own sequence only. That is a padded batch's attention with
 * the padding hidden, without the padding: a batch of sentences padded to its longest spends
 * b * longest^2 on scores where the sentences need the sum of their lengths squared.
 *
 * One ATTENTION record per segment (the kernel of src/backend/cpu/attention.c, unchanged), its
 * operands views of the packed q, k, v and of one output [T, heads, Ev] (returned as the view
 * [heads, T, Ev], as kiln__t_attention's: merging the heads back is a view). Inference only
 * (no gradient): the caller checks that nothing is tracked. */
#include <string.h>

#include "kiln/tensor.h"
#include "ops/ops-impl.h"

/* t's view narrowed to rows [at, at + len) of dim 1. */
static kiln__view rows_of(const kiln__tensor *t, int64_t at, int64_t len) {
    kiln__view v = kiln__view_of(t);
    v.offset += at * t->strides[1];
    v.shape[1] = len;
    return v;
}

kiln__tensor *kiln__t_attention_segments(kiln__opctx *c, kiln__tensor *q, kiln__tensor *k, kiln__tensor *v, int64_t n,
                                         const int64_t *lengths, double scale) {
    if (!kiln__ok(c, q) || !kiln__ok(c, k) || !kiln__ok(c, v)) return kiln__drop(3, q, k, v), NULL;
    char a[128], b[128], d[128];
    kiln__shape_str(a, sizeof a, q->ndim, q->shape);
    kiln__shape_str(b, sizeof b, k->ndim, k->shape);
    kiln__shape_str(d, sizeof d, v->ndim, v->shape);
    const kiln__tensor *t[3] = {q, k, v};
    bool cpu = true;
    for (int i = 0; i < 3; i++) cpu = cpu && t[i]->storage && kiln_device_kind(t[i]->device) == KILN_KIND_CPU;
    if (!cpu || q->dtype != k->dtype || q->dtype != v->dtype || (q->dtype != KILN_F32 && q->dtype != KILN_F64)) {
        kiln__fail(c, KILN_ERR_DTYPE, "attention over segments takes f32 or f64 CPU tensors of one dtype, got %s, %s and %s",
                   kiln_dtype_name(q->dtype), kiln_dtype_name(k->dtype), kiln_dtype_name(v->dtype));
        return kiln__drop(3, q, k, v), NULL;
    }
    if (q->ndim != 3 || k->ndim != 3 || v->ndim != 3 || k->shape[0] != q->shape[0] || v->shape[0] != q->shape[0] ||
        k->shape[1] != q->shape[1] || v->shape[1] != q->shape[1] || k->shape[2] != q->shape[2]) {
        kiln__fail(c, KILN_ERR_SHAPE, "attention over segments takes q and k [heads, T, E] and v [heads, T, Ev], got %s, %s and %s",
                   a, b, d);
        return kiln__drop(3, q, k, v), NULL;
    }
    int64_t total = 0;
    for (int64_t i = 0; lengths && i < n; i++) {
        if (lengths[i] < 1 || total > q->shape[1] - lengths[i]) {
            total = -1;
            break;
        }
        total += lengths[i];
    }
    if (!lengths || n < 1 || total != q->shape[1]) {
        kiln__fail(c, KILN_ERR_SHAPE, "%lld segment lengths must be positive and add up to the %lld rows of %s", (long long)n,
                   (long long)q->shape[1], a);
        return kiln__drop(3, q, k, v), NULL;
    }
    kiln_device dev = q->device;
    int64_t heads = q->shape[0], Ev = v->shape[2], shape[3] = {total, heads, Ev};
    kiln__tensor *out = kiln__t_empty(c, dev, q->dtype, 3, shape);
    if (out) out = kiln__t_permute(c, out, 3, (const int[]){1, 0, 2});
    for (int64_t i = 0, at = 0; out && i < n; at += lengths[i++]) {
        kiln__op op;
        kiln__op_init(&op, KILN__OP_ATTENTION, c->name);
        op.in[0] = rows_of(q, at, lengths[i]);
        op.in[1] = rows_of(k, at, lengths[i]);
        op.in[2] = rows_of(v, at, lengths[i]);
        op.n_in = 3;
        op.out[0] = rows_of(out, at, lengths[i]);
        op.n_out = 1;
        op.p.f[0] = scale;
        op.pi[0] = 0, op.pi[1] = 0; /* not causal, no mask */
        if (!kiln__t_submit(c, &op, dev)) kiln__tensor_release(out), out = NULL;
    }
    kiln__drop(3, q, k, v);
    return out;
}
