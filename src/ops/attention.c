/* The fused attention op (ATTENTION, src/backend/cpu/attention.c): softmax(q k^T * scale + mask) v
 * as one kernel for inference. nn's kiln_scaled_dot_product_attention checks the arguments and
 * runs this when nothing is tracked and kiln__t_attention_fits says yes; autodiff goes through
 * the composed ops, whose backward rules exist.
 *
 * The op record has three inputs, so with a mask k and v travel as one view [2, ..., S, E]:
 * that needs them in one storage with one layout, as a transformer's joint QKV projection
 * gives them (views of its output). The output is allocated as [..., L, heads, Ev] and
 * returned as the view [..., heads, L, Ev]: merging the heads back, as every transformer does
 * next (permute + reshape to [..., L, heads * Ev]), is then a view, not a copy. */
#include <string.h>

#include "kiln/tensor.h"
#include "ops/ops-impl.h"

bool kiln__attention_batch_shape(const kiln__tensor *const *t, int *nb, int64_t *out) {
    *nb = 0;
    for (int i = 0; i < 3; i++) {
        int n = t[i]->ndim - 2, m = n > *nb ? n : *nb;
        int64_t merged[KILN_MAX_DIMS];
        for (int d = 0; d < m; d++) {
            int64_t a = d < m - *nb ? 1 : out[d - (m - *nb)], b = d < m - n ? 1 : t[i]->shape[d - (m - n)];
            if (a != b && a != 1 && b != 1) return false;
            merged[d] = a == 1 ? b : a;
        }
        memcpy(out, merged, sizeof(int64_t) * (size_t)m);
        *nb = m;
    }
    return true;
}

/* k and v broadcast to the batch as views of one storage with one shape and layout: the
 * element distance between them (> 0 when v comes after k), or 0 when they are not. */
static int64_t kv_distance(const kiln__tensor *k, const kiln__tensor *v, int nd, const int64_t *shape) {
    if (k->storage != v->storage || k->dtype != v->dtype || k->shape[k->ndim - 1] != v->shape[v->ndim - 1]) return 0;
    kiln__view a = kiln__view_broadcast(k, nd, shape), b = kiln__view_broadcast(v, nd, shape);
    if (memcmp(a.strides, b.strides, sizeof(int64_t) * (size_t)nd) != 0) return 0;
    return b.offset - a.offset;
}

bool kiln__t_attention_fits(const kiln__tensor *q, const kiln__tensor *k, const kiln__tensor *v, const kiln__tensor *mask) {
    const kiln__tensor *t[3] = {q, k, v};
    for (int i = 0; i < 3; i++)
        if (!t[i]->storage || kiln_device_kind(t[i]->device) != KILN_KIND_CPU || t[i]->ndim < 2 || t[i]->dtype != q->dtype) return false;
    if (q->dtype != KILN_F32 && q->dtype != KILN_F64) return false;
    int nb;
    int64_t shape[KILN_MAX_DIMS];
    if (!kiln__attention_batch_shape(t, &nb, shape) || nb + 3 > KILN_MAX_DIMS) return false;
    if (!mask) return true;
    if (!mask->storage || kiln_device_kind(mask->device) != KILN_KIND_CPU || (mask->dtype != KILN_BOOL && mask->dtype != q->dtype))
        return false;
    shape[nb] = k->shape[k->ndim - 2];
    shape[nb + 1] = k->shape[k->ndim - 1];
    return kv_distance(k, v, nb + 2, shape) != 0;
}

kiln__tensor *kiln__t_attention(kiln__opctx *c, kiln__tensor *q, kiln__tensor *k, kiln__tensor *v, kiln__tensor *mask,
                                bool causal, double scale) {
    if (!kiln__ok(c, q) || !kiln__ok(c, k) || !kiln__ok(c, v) || (mask && !kiln__ok(c, mask)))
        return kiln__drop(4, q, k, v, mask), NULL;
    if (!kiln__t_attention_fits(q, k, v, mask)) {
        kiln__fail(c, KILN_ERR_INTERNAL, "fused attention called on operands it does not take");
        return kiln__drop(4, q, k, v, mask), NULL;
    }
    const kiln__tensor *t[3] = {q, k, v};
    int nb;
    int64_t batch[KILN_MAX_DIMS], shape[KILN_MAX_DIMS];
    kiln__attention_batch_shape(t, &nb, batch);
    int64_t L = q->shape[q->ndim - 2], E = q->shape[q->ndim - 1], S = k->shape[k->ndim - 2], Ev = v->shape[v->ndim - 1];
    /* out as [..., L, heads, Ev] in memory, seen as [..., heads, L, Ev] */
    memcpy(shape, batch, sizeof(int64_t) * (size_t)nb);
    int order[KILN_MAX_DIMS];
    for (int d = 0; d < nb + 2; d++) order[d] = d;
    if (nb > 0) {
        shape[nb - 1] = L, shape[nb] = batch[nb - 1];
        order[nb - 1] = nb, order[nb] = nb - 1;
    } else {
        shape[nb] = L;
    }
    shape[nb + 1] = Ev;
    kiln_device dev = q->device;
    kiln__tensor *out = kiln__t_empty(c, dev, q->dtype, nb + 2, shape);
    if (out && nb > 0) out = kiln__t_permute(c, out, nb + 2, order);
    if (out) {
        memcpy(shape, batch, sizeof(int64_t) * (size_t)nb);
        kiln__op op;
        kiln__op_init(&op, KILN__OP_ATTENTION, c->name);
        shape[nb] = L, shape[nb + 1] = E;
        op.in[0] = kiln__view_broadcast(q, nb + 2, shape);
        shape[nb] = S;
        if (!mask) {
            op.in[1] = kiln__view_broadcast(k, nb + 2, shape);
            shape[nb + 1] = Ev;
            op.in[2] = kiln__view_broadcast(v, nb + 2, shape);
        } else {
            int64_t dist = kv_distance(k, v, nb + 2, shape);
            kiln__view first = kiln__view_broadcast(dist > 0 ? k : v, nb + 2, shape), kv = first;
            kv.ndim = nb + 3;
            kv.shape[0] = 2, kv.strides[0] = dist > 0 ? dist : -dist;
            memcpy(kv.shape + 1, first.shape, sizeof(int64_t) * (size_t)(nb + 2));
            memcpy(kv.strides + 1, first.strides, sizeof(int64_t) * (size_t)(nb + 2));
            op.in[1] = kv;
            shape[nb] = L, shape[nb + 1] = S;
            op.in[2] = kiln__view_broadcast(mask, nb + 2, shape);
            op.pi[1] = dist > 0 ? 1 : 2;
        }
        op.n_in = 3;
        op.out[0] = kiln__view_of(out);
        op.n_out = 1;
        op.p.f[0] = scale;
        op.pi[0] = causal;
        if (!kiln__t_submit(c, &op, dev)) kiln__tensor_release(out), out = NULL;
    }
    kiln__drop(4, q, k, v, mask);
    return out;
}
