/* scaled_dot_product_attention (torch.nn.functional's), composed from differentiable ops so
 * autodiff gives the gradients of q, k, v and of a float mask:
 *
 *   softmax(q k^T * scale + mask) v
 *
 * The softmax is the max-subtracted kernel. A row that the mask hides entirely (every key
 * masked) gives zeros and zero gradients, as PyTorch >= 2.5 (its _safe_softmax) does, not NaN:
 * such rows are found from the mask alone (cheap: the mask is usually far smaller than the
 * scores), left unmasked so their softmax stays finite, then zeroed.
 *
 * When nothing is tracked (inference) and the operands suit it, the whole product is one
 * fused op instead (kiln__t_attention: one kernel per head, the scores never a tensor), with
 * the same results to rounding. Tracked and without a mask, it is the same fused op recorded
 * with its own derivative (src/autodiff/rules_attention.c), which keeps q, k and v instead of
 * the attention weights and recomputes those a few rows at a time in backward.
 *
 * kiln__attention_segments is the inference form over sequences packed one after another (a
 * padded batch's tokens without the padding: kiln_bert_embed), one kernel call per sequence. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "kiln/autodiff.h"
#include "kiln/tensor.h"
#include "api/autocast-impl.h"
#include "autodiff/autodiff-impl.h"
#include "nn/layers-impl.h"

/* mask broadcasts to the scores' shape without growing it */
static bool mask_fits(const kiln__tensor *mask, int nd, const int64_t *scores) {
    if (mask->ndim > nd) return false;
    for (int d = 0; d < mask->ndim; d++) {
        int64_t m = mask->shape[d], s = scores[nd - mask->ndim + d];
        if (m != s && m != 1) return false;
    }
    return true;
}

/* The argument checks; false with the status and message of the first problem. */
static bool check(const kiln__tensor *const *t, const kiln__tensor *mask, bool is_causal, double scale, int *nd,
                  int64_t *scores, kiln_status *st, char *msg, size_t size) {
    const kiln__tensor *q = t[0], *k = t[1], *v = t[2];
    char a[128], b[128], c[128];
    *st = KILN_ERR_DTYPE;
    if (!kiln__dtype_is_float(q->dtype) || k->dtype != q->dtype || v->dtype != q->dtype)
        return snprintf(msg, size, "query, key and value must have one floating-point dtype, got %s, %s and %s",
                        kiln_dtype_name(q->dtype), kiln_dtype_name(k->dtype), kiln_dtype_name(v->dtype)), false;
    if (mask && mask->dtype != KILN_BOOL && mask->dtype != q->dtype)
        return snprintf(msg, size, "attn_mask must be bool (true = attend) or the query's dtype %s (added), got %s",
                        kiln_dtype_name(q->dtype), kiln_dtype_name(mask->dtype)), false;
    *st = KILN_ERR_SHAPE;
    kiln__shape_str(a, sizeof a, q->ndim, q->shape);
    kiln__shape_str(b, sizeof b, k->ndim, k->shape);
    kiln__shape_str(c, sizeof c, v->ndim, v->shape);
    if (q->ndim < 2 || k->ndim < 2 || v->ndim < 2)
        return snprintf(msg, size, "expects query [..., L, E], key [..., S, E] and value [..., S, Ev], got %s, %s and %s", a, b, c), false;
    if (q->shape[q->ndim - 1] != k->shape[k->ndim - 1])
        return snprintf(msg, size, "query %s and key %s must have the same embedding size E (last dim)", a, b), false;
    if (k->shape[k->ndim - 2] != v->shape[v->ndim - 2])
        return snprintf(msg, size, "key %s and value %s must have the same sequence length S (dim -2)", b, c), false;
    int nb;
    if (!kiln__attention_batch_shape(t, &nb, scores))
        return snprintf(msg, size, "the batch dims of query %s, key %s and value %s cannot be broadcast together", a, b, c), false;
    scores[nb] = q->shape[q->ndim - 2];
    scores[nb + 1] = k->shape[k->ndim - 2];
    *nd = nb + 2;
    if (mask && !mask_fits(mask, *nd, scores))
        return snprintf(msg, size, "attn_mask of shape %s cannot be broadcast to the attention weights' shape %s",
                        kiln__shape_str(a, sizeof a, mask->ndim, mask->shape), kiln__shape_str(b, sizeof b, *nd, scores)), false;
    *st = KILN_ERR_INVALID_ARGUMENT;
    if (mask && is_causal)
        return snprintf(msg, size, "is_causal and an explicit attn_mask cannot be combined (as in PyTorch): "
                                   "fold the causal triangle into the mask"), false;
    if (isinf(scale)) return snprintf(msg, size, "scale %g must be finite", scale), false;
    return true;
}

static kiln_tensor attention(kiln_tensor q, kiln_tensor k, kiln_tensor v, kiln_tensor attn_mask, bool is_causal,
                             double scale) {
    const char *op = "kiln_scaled_dot_product_attention";
    bool has_mask = attn_mask.id != KILN_NONE.id;
    kiln_tensor in[4] = {q, k, v, attn_mask};
    int n = has_mask ? 4 : 3;
    const kiln__tensor *t[3] = {kiln__nn_peek(q), kiln__nn_peek(k), kiln__nn_peek(v)};
    const kiln__tensor *m = has_mask ? kiln__nn_peek(attn_mask) : NULL;
    if (!t[0] || !t[1] || !t[2] || (has_mask && !m)) return kiln__nn_fail(op, n, in, KILN_ERR_INVALID_ARGUMENT, "unusable input");
    int nd = 0;
    int64_t scores[KILN_MAX_DIMS];
    kiln_status st;
    char msg[512];
    if (!check(t, m, is_causal, scale, &nd, scores, &st, msg, sizeof msg)) return kiln__nn_fail(op, n, in, st, "%s", msg);
    int64_t e = t[0]->shape[t[0]->ndim - 1], L = scores[nd - 2], S = scores[nd - 1];
    kiln_device dev = t[0]->device;
    bool bool_mask = has_mask && m->dtype == KILN_BOOL;
    if (!(scale > 0)) scale = e > 0 ? 1.0 / sqrt((double)e) : 1.0; /* E = 0: every score is 0 anyway */
    bool tracked = kiln_grad_enabled() && (kiln_requires_grad(q) || kiln_requires_grad(k) || kiln_requires_grad(v) ||
                                           (has_mask && kiln_requires_grad(attn_mask)));
    if (!tracked && kiln__t_attention_fits(t[0], t[1], t[2], m)) { /* inference: one kernel */
        KILN__OP_BEGIN(op);
        kiln__tensor *x[4] = {kiln__arg(&c, q), kiln__arg(&c, k), kiln__arg(&c, v), has_mask ? kiln__arg(&c, attn_mask) : NULL};
        return kiln__result(&c, kiln__t_attention(&c, x[0], x[1], x[2], x[3], is_causal, scale));
    }
    if (tracked && !has_mask && kiln__ad_attention_fits(t[0], t[1], t[2])) { /* training: no weights kept */
        KILN__OP_BEGIN(op);
        kiln__tensor *x[3] = {kiln__arg(&c, q), kiln__arg(&c, k), kiln__arg(&c, v)};
        if (!x[0] || !x[1] || !x[2]) return kiln__drop(3, x[0], x[1], x[2]), kiln__result(&c, NULL);
        return kiln__result(&c, kiln__ad_attention(&c, x[0], x[1], x[2], is_causal, scale));
    }

    kiln_tensor s = kiln_mul_scalar(kiln_matmul(q, kiln_transpose(k, -2, -1)), scale);
    if (is_causal) /* top-left aligned: query i sees keys 0..i */
        s = kiln_masked_fill(s, kiln_triu(kiln_ones(dev, KILN_BOOL, KILN_SHAPE(L, S)), 1), -INFINITY);
    kiln_tensor dead = KILN_NONE; /* [..., 1]: the rows the mask hides entirely */
    if (bool_mask) {
        dead = kiln_eq_scalar(kiln_sum_dims(kiln_ref(attn_mask), KILN_DIMS(-1), true), 0.0);
        kiln_tensor hide = kiln_logical_and(kiln_logical_not(attn_mask), kiln_logical_not(kiln_ref(dead)));
        s = kiln_masked_fill(s, hide, -INFINITY);
    } else if (has_mask) {
        dead = kiln_eq_scalar(kiln_max_dims(kiln_ref(attn_mask), KILN_DIMS(-1), true), -INFINITY);
        s = kiln_add(s, kiln_masked_fill(attn_mask, kiln_ref(dead), 0.0));
    }
    kiln_tensor p = kiln_softmax(s, -1);
    if (has_mask) p = kiln_masked_fill(p, dead, 0.0);
    return kiln_matmul(p, v);
}

kiln_tensor kiln_scaled_dot_product_attention(kiln_tensor q, kiln_tensor k, kiln_tensor v, kiln_tensor attn_mask,
                                              bool is_causal, double scale) {
    q = kiln__autocast_arg("kiln_scaled_dot_product_attention", q);
    k = kiln__autocast_arg("kiln_scaled_dot_product_attention", k);
    v = kiln__autocast_arg("kiln_scaled_dot_product_attention", v);
    const char *outer = kiln__op_scope_enter("kiln_scaled_dot_product_attention"); /* the ops inside report as it */
    kiln_tensor y = attention(q, k, v, attn_mask, is_causal, scale);
    kiln__op_scope_leave(outer);
    return y;
}

kiln_tensor kiln__attention_segments(kiln_tensor q, kiln_tensor k, kiln_tensor v, int64_t n, const int64_t *lengths,
                                     double scale) {
    const char *op = "attention_segments";
    kiln_tensor in[3] = {q, k, v};
    if (kiln_grad_enabled() && (kiln_requires_grad(q) || kiln_requires_grad(k) || kiln_requires_grad(v)))
        return kiln__nn_fail(op, 3, in, KILN_ERR_UNSUPPORTED, "attention over segments has no gradient (inference only)");
    KILN__OP_BEGIN(op);
    kiln__tensor *x[3] = {kiln__arg(&c, q), kiln__arg(&c, k), kiln__arg(&c, v)};
    return kiln__result(&c, kiln__t_attention_segments(&c, x[0], x[1], x[2], n, lengths, scale));
}
