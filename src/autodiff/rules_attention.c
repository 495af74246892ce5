/* Derivative of the fused attention op, so training keeps no attention weights (issue #28).
 *
 * Composed of matmul, softmax and matmul, tracked attention keeps softmax(q k^T * scale), one
 * [batch, heads, L, S] tensor per layer (32 MiB for 8 x 4 heads x 512 x 512 f32, eight times a
 * layer's activations), and its backward holds two more of that size at once. Here the forward
 * is the fused kernel (the weights never a tensor) and the node keeps only q, k and v, which the
 * projections before it made anyway. The backward recomputes the weights a few batch rows at a
 * time (about CHUNK_BYTES of scores per step) and applies, per chunk, the composed path's own
 * formulas:
 *
 *   P = softmax(q k^T * scale)        dv = P^T g        dP = g v^T
 *   dS = P (dP - sum(dP P, -1)) * scale   dq = dS k     dk = dS^T q
 *
 * so what backward holds at once is one chunk's scores, not the whole batch's: PyTorch's CPU
 * flash attention keeps no weights either. Taken only without a mask and when q, k and v share
 * their batch dims (no broadcasting); other cases stay on the composed ops. */
#include <math.h>
#include <stdlib.h>

#include "autodiff/ad-math.h"

#define CHUNK_BYTES ((int64_t)4 << 20)

bool kiln__ad_attention_fits(const kiln__tensor *q, const kiln__tensor *k, const kiln__tensor *v) {
    if (!kiln__t_attention_fits(q, k, v, NULL)) return false;
    if (q->ndim < 3 || k->ndim != q->ndim || v->ndim != q->ndim) return false;
    for (int d = 0; d < q->ndim; d++) {
        if (q->shape[d] <= 0 || k->shape[d] <= 0 || v->shape[d] <= 0) return false;
        if (d < q->ndim - 2 && (k->shape[d] != q->shape[d] || v->shape[d] != q->shape[d])) return false;
    }
    return true;
}

static kiln__tensor *transposed(kiln__opctx *c, kiln__tensor *t) { return kiln__t_transpose(c, t, -1, -2); }

static kiln__tensor *rows(kiln__opctx *c, kiln__tensor *t, int64_t start, int64_t end) {
    return kiln__t_slice(c, ad_ref(t), 0, start, end, 1);
}

/* The gradients of one chunk of batch rows [start, end) into dq/dk/dv[i] (NULL where not wanted). */
static void chunk_backward(kiln__opctx *c, kiln__ad_node *n, kiln__tensor *const *qkv, kiln__tensor *g,
                           kiln__tensor *causal_mask, int64_t start, int64_t end, kiln__tensor **d) {
    double scale = n->pf[0];
    int last = n->slots[0].ndim - 1;
    kiln__tensor *q = rows(c, qkv[0], start, end), *k = rows(c, qkv[1], start, end), *v = rows(c, qkv[2], start, end);
    kiln__tensor *gc = rows(c, g, start, end);
    kiln__tensor *s = ad_muls(c, kiln__t_matmul(c, ad_ref(q), transposed(c, ad_ref(k))), scale);
    if (causal_mask) s = kiln__t_masked_fill(c, s, ad_ref(causal_mask), -INFINITY);
    kiln__tensor *p = kiln__t_softmax(c, KILN__OP_SOFTMAX, s, -1);
    if (kiln__ad_wants(n, 2)) d[2] = kiln__t_matmul(c, transposed(c, ad_ref(p)), ad_ref(gc));
    if (kiln__ad_wants(n, 0) || kiln__ad_wants(n, 1)) {
        kiln__tensor *dp = kiln__t_matmul(c, gc, transposed(c, v));
        kiln__tensor *gy = kiln__t_reduce(c, KILN__OP_SUM, ad_mul(c, ad_ref(dp), ad_ref(p)), 1u << last, true, 0);
        kiln__tensor *ds = ad_muls(c, ad_mul(c, p, ad_sub(c, dp, gy)), scale);
        if (kiln__ad_wants(n, 0)) d[0] = kiln__t_matmul(c, ad_ref(ds), ad_ref(k));
        if (kiln__ad_wants(n, 1)) d[1] = kiln__t_matmul(c, transposed(c, ad_ref(ds)), ad_ref(q));
        kiln__drop(1, ds);
    } else {
        kiln__drop(3, p, gc, v);
    }
    kiln__drop(2, q, k);
}

static void attention_backward(kiln__opctx *c, kiln__ad_node *n, kiln__tensor *g, kiln__tensor **grads) {
    kiln__tensor *qkv[3] = {kiln__ad_saved(n, 0), kiln__ad_saved(n, 1), kiln__ad_saved(n, 2)};
    const int64_t *qs = n->slots[0].shape, *ks = n->slots[1].shape;
    int nd = n->slots[0].ndim;
    int64_t L = qs[nd - 2], S = ks[nd - 2], per_row = (int64_t)kiln_dtype_size(n->slots[0].dtype) * L * S;
    for (int d = 1; d < nd - 2; d++) per_row *= qs[d];
    int64_t batch = qs[0], step = per_row >= CHUNK_BYTES ? 1 : CHUNK_BYTES / per_row;
    int64_t n_chunks = (batch + step - 1) / step;
    kiln__tensor *causal = NULL;
    if (n->pi[0]) /* top-left aligned, as the forward: query i sees keys 0..i */
        causal = kiln__t_tri(c, kiln__t_fill(c, g->device, KILN_BOOL, 2, (int64_t[]){L, S}, 1.0), 1, true);
    kiln__tensor **parts = kiln__alloc_should_fail() ? NULL : calloc((size_t)(3 * n_chunks), sizeof *parts);
    if (!parts && !c->err) kiln__fail(c, KILN_ERR_OUT_OF_MEMORY, "cannot split attention's backward");
    for (int64_t i = 0; parts && !c->err && i < n_chunks; i++) {
        int64_t start = i * step, end = start + step < batch ? start + step : batch;
        kiln__tensor *d[3] = {NULL, NULL, NULL};
        chunk_backward(c, n, qkv, g, causal, start, end, d);
        for (int j = 0; j < 3; j++) parts[j * n_chunks + i] = d[j];
    }
    for (int j = 0; parts && j < 3; j++) {
        if (!kiln__ad_wants(n, j) || c->err) {
            for (int64_t i = 0; i < n_chunks; i++) kiln__drop(1, parts[j * n_chunks + i]);
            continue;
        }
        grads[j] = n_chunks == 1 ? parts[j * n_chunks] : kiln__t_cat(c, parts + j * n_chunks, (int)n_chunks, 0);
    }
    free(parts);
    kiln__drop(5, qkv[0], qkv[1], qkv[2], g, causal);
}

static const kiln__ad_rule attention_rule = {.name = "scaled_dot_product_attention", .backward = attention_backward};

kiln__tensor *kiln__ad_attention(kiln__opctx *c, kiln__tensor *q, kiln__tensor *k, kiln__tensor *v, bool causal,
                                 double scale) {
    kiln__tensor *in[3] = {q, k, v};
    kiln__ad_node *n = kiln__ad_node_new(c, &attention_rule, 3, in);
    if (n) n->pi[0] = causal, n->pf[0] = scale;
    for (int i = 0; i < 3; i++) kiln__ad_save(c, n, i, in[i]);
    return kiln__ad_attach(c, n, kiln__t_attention(c, q, k, v, NULL, causal, scale));
}
