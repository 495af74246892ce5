/* The BERT encoder's forward (kiln_bert_forward: transformers' last_hidden_state) and the
 * sentence embedding (kiln_bert_embed: sentence-transformers' mean pooling and normalization),
 * on kiln's public ops; each linear runs in the precision the model's weights are in (f32, bf16
 * or int8, bert.c). A padded batch's embedding runs over its tokens alone (bert_batch.c). */
#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kiln/bert.h"
#include "kiln/engine.h"
#include "kiln/nn.h"
#include "kiln/tensor.h"
#include "models/bert-impl.h"
#include "nn/layers-impl.h"

/* Part `which` (0 query, 1 key, 2 value) of the fused projection qkv [b, s, 3, heads, hd] as a
 * view [b, heads, s, hd]: attention reads it in place (rows 3h apart), no copy. Consumes qkv. */
static kiln_tensor head_view(kiln_tensor qkv, int which) {
    return kiln_permute(kiln_squeeze(kiln_narrow(qkv, 2, which, 1), 2), KILN_DIMS(0, 2, 1, 3));
}

/* Layer l's linear k of linear_slots over x (consumed), then GELU when gelu: int8 where it was
 * quantized (bias and GELU inside the product); in bf16 (and giving bf16) where the weights are. */
static kiln_tensor bert_linear(const kiln_bert *m, int64_t l, int k, kiln_tensor x, bool gelu) {
    const kiln_tensor *w = m->layers[l];
    int slot = linear_slots[k];
    if (m->int8 && m->int8[l][k][0].id)
        return kiln__linear_i8_fused("linear_int8", x, kiln_ref(m->int8[l][k][0]), kiln_ref(m->int8[l][k][1]), gelu);
    kiln_tensor y = m->bf16 ? kiln_linear(kiln_cast(x, KILN_BF16), kiln_ref(w[slot]), kiln_ref(w[slot + 1]))
                            : kiln_linear(x, kiln_ref(w[slot]), kiln_ref(w[slot + 1]));
    return gelu ? kiln_gelu(y) : y;
}

/* every_token: the mask is known to hide nothing (kiln__bert_plan_packing read it), so the
 * attention takes none: a one-sentence embedding skips building the additive mask, and runs
 * bert_attention.c's kernel straight on the projection where the CPU has AVX-512. */
static kiln_tensor encoder(const kiln_bert *m, kiln_tensor ids, kiln_tensor mask, kiln_tensor types, int64_t b, int64_t s,
                           const kiln__bert_packing *packing, bool every_token) {
    const kiln_bert_config *c = &m->cfg;
    int64_t h = c->hidden_size, heads = c->num_attention_heads, hd = h / heads;
    double eps = c->layer_norm_eps;
    kiln_shape hs = KILN_SHAPE(h);
    /* embeddings: word + position + token type, then LayerNorm */
    kiln_tensor x = kiln_index_select(kiln_ref(m->word), 0, kiln_reshape(ids, KILN_SHAPE(b * s)));
    if (types.id)
        x = kiln_add(x, kiln_index_select(kiln_ref(m->token_type), 0, kiln_reshape(types, KILN_SHAPE(b * s))));
    else
        x = kiln_add(x, kiln_narrow(kiln_ref(m->token_type), 0, 0, 1));
    x = kiln_add(kiln_reshape(x, KILN_SHAPE(b, s, h)), kiln_narrow(kiln_ref(m->position), 0, 0, s));
    x = kiln_layer_norm(x, hs, kiln_ref(m->ln_w), kiln_ref(m->ln_b), eps);
    /* the rows as one 2-d [b * s, h] (or packed [T, h]) matrix from here on: each linear is one
     * 2-d product, which fuses with its GELU or residual add (fusion_matmul.c takes 2-d only) */
    x = kiln_reshape(x, KILN_SHAPE(b * s, h));
    if (packing) x = kiln_index_select(x, 0, kiln_ref(packing->pack)); /* [T, h] */
    /* transformers' extended attention mask: 0 for a token, the lowest float for padding, added
     * to the scores [b, heads, s, s] as [b, 1, 1, s]. Finite, as there: a row with no token at
     * all attends evenly rather than giving NaN. Packed, each sentence attends to its own rows. */
    kiln_tensor hide = KILN_NONE;
    if (packing || every_token)
        kiln_release(mask);
    else
        hide = kiln_reshape(kiln_mul_scalar(kiln_cast(kiln_eq_scalar(mask, 0.0), KILN_F32), -FLT_MAX), KILN_SHAPE(b, 1, 1, s));
    for (int64_t l = 0; l < c->num_hidden_layers; l++) {
        const kiln_tensor *w = m->layers[l];
        kiln_tensor qkv = kiln_cast(bert_linear(m, l, 0, kiln_ref(x), false), KILN_F32); /* attention in f32 */
        kiln_tensor ctx;
        if (packing) {
            ctx = kiln__bert_packed_attention(m, qkv, packing);
        } else if (every_token && kiln__bert_attention_supported()) {
            ctx = kiln_reshape(kiln__bert_attention(kiln_reshape(qkv, KILN_SHAPE(b, s, 3, heads, hd))), KILN_SHAPE(b * s, h));
        } else {
            qkv = kiln_reshape(qkv, KILN_SHAPE(b, s, 3, heads, hd));
            /* softmax(q k^T + hide) v, q pre-scaled by 1/sqrt(hd) in the weights (scale 1): one
             * fused kernel per head at inference, its output already laid out [b, s, heads, hd]
             * so the heads merge as a view */
            kiln_tensor q = head_view(kiln_ref(qkv), 0), k = head_view(kiln_ref(qkv), 1), v = head_view(qkv, 2);
            ctx = kiln_scaled_dot_product_attention(q, k, v, hide.id ? kiln_ref(hide) : KILN_NONE, false, 1.0);
            ctx = kiln_reshape(kiln_permute(ctx, KILN_DIMS(0, 2, 1, 3)), KILN_SHAPE(b * s, h));
        }
        kiln_tensor a = bert_linear(m, l, 1, ctx, false);
        x = kiln_layer_norm(kiln_add(a, x), hs, kiln_ref(w[ALN_W]), kiln_ref(w[ALN_B]), eps);
        kiln_tensor i = bert_linear(m, l, 2, kiln_ref(x), true);
        kiln_tensor o = bert_linear(m, l, 3, i, false);
        x = kiln_layer_norm(kiln_add(o, x), hs, kiln_ref(w[OLN_W]), kiln_ref(w[OLN_B]), eps);
    }
    if (hide.id) kiln_release(hide);
    if (packing) x = kiln_index_select(x, 0, kiln_ref(packing->unpack));
    return kiln_reshape(x, KILN_SHAPE(b, s, h));
}

/* Checks the inputs; on success *b and *s are the batch and sequence sizes. Otherwise returns
 * false with *out a tensor poisoned for op (the inputs consumed). */
static bool check_inputs(const char *op, const kiln_bert *m, kiln_tensor *in, int64_t *b, int64_t *s, kiln_tensor *out) {
    int n = in[2].id ? 3 : 2;
    kiln_status why_status;
    const char *why = kiln__object_problem(m, KILN__BERT_KIND, &why_status);
    if (why) return *out = kiln__nn_fail(op, n, in, why_status, "%s", why), false;
    const kiln__tensor *t[3] = {kiln__nn_peek(in[0]), kiln__nn_peek(in[1]), n == 3 ? kiln__nn_peek(in[2]) : NULL};
    if (!t[0] || !t[1] || (n == 3 && !t[2])) return *out = kiln__nn_fail(op, n, in, KILN_ERR_INVALID_ARGUMENT, "unusable input"), false;
    static const char *const what[] = {"input_ids", "attention_mask", "token_type_ids"};
    char a[128], c[128];
    if (t[0]->ndim != 2)
        return *out = kiln__nn_fail(op, n, in, KILN_ERR_SHAPE, "input_ids must be [batch, seq], got %s",
                                    kiln__shape_str(a, sizeof a, t[0]->ndim, t[0]->shape)), false;
    for (int i = 0; i < n; i++) {
        if (i != 1 && t[i]->dtype != KILN_I64 && t[i]->dtype != KILN_I32)
            return *out = kiln__nn_fail(op, n, in, KILN_ERR_DTYPE, "%s must be i32 or i64, got %s", what[i],
                                        kiln_dtype_name(t[i]->dtype)), false;
        if (i && (t[i]->ndim != 2 || t[i]->shape[0] != t[0]->shape[0] || t[i]->shape[1] != t[0]->shape[1]))
            return *out = kiln__nn_fail(op, n, in, KILN_ERR_SHAPE, "%s %s must have input_ids' shape %s", what[i],
                                        kiln__shape_str(a, sizeof a, t[i]->ndim, t[i]->shape),
                                        kiln__shape_str(c, sizeof c, t[0]->ndim, t[0]->shape)), false;
    }
    *b = t[0]->shape[0], *s = t[0]->shape[1];
    if (*b < 1 || *s < 1 || *s > m->cfg.max_position_embeddings)
        return *out = kiln__nn_fail(op, n, in, KILN_ERR_SHAPE, "input_ids %s: need a batch of at least 1 and 1 to %lld tokens",
                                    kiln__shape_str(a, sizeof a, t[0]->ndim, t[0]->shape),
                                    (long long)m->cfg.max_position_embeddings), false;
    return true;
}

/* sentence-transformers' Pooling + Normalize over x [b, s, h]: sum(x * mask) / max(count, 1e-9),
 * then divided by max(||.||, 1e-12). Consumes both. every_token: the mask is all tokens, so the
 * weights are all 1 and the count s: the same values from fewer ops (x * 1 is x, and the
 * division by s the one by a count of s). */
static kiln_tensor mean_pool_normalize(kiln_tensor x, kiln_tensor attention_mask, int64_t s, bool every_token) {
    kiln_tensor mean;
    if (every_token) {
        kiln_release(attention_mask);
        mean = kiln_div_scalar(kiln_sum_dims(x, KILN_DIMS(1), false), (double)s);
    } else {
        kiln_tensor weight = kiln_cast(kiln_ne_scalar(attention_mask, 0.0), KILN_F32); /* [b, s] */
        kiln_tensor sum = kiln_sum_dims(kiln_mul(x, kiln_unsqueeze(kiln_ref(weight), -1)), KILN_DIMS(1), false);
        kiln_tensor count = kiln_clamp(kiln_sum_dims(weight, KILN_DIMS(1), true), 1e-9, NAN);
        mean = kiln_div(sum, count);
    }
    kiln_tensor norm = kiln_sqrt(kiln_sum_dims(kiln_mul(kiln_ref(mean), kiln_ref(mean)), KILN_DIMS(1), true));
    return kiln_div(mean, kiln_clamp(norm, 1e-12, NAN));
}

/* kiln_bert_forward and kiln_bert_embed: the checks, then the encoder (and the pooling) with
 * the ops inside reporting as op. */
static kiln_tensor run(const char *op, bool pool, const kiln_bert *m, kiln_tensor input_ids, kiln_tensor attention_mask,
                       kiln_tensor token_type_ids) {
    kiln_tensor in[3] = {input_ids, attention_mask, token_type_ids}, out;
    int64_t b, s;
    if (!check_inputs(op, m, in, &b, &s, &out)) return out;
    const char *outer = kiln__op_scope_enter(op);
    kiln_tensor mask = pool ? kiln_ref(attention_mask) : KILN_NONE;
    kiln__bert_packing packing; /* the pooled embedding only: forward's padded rows stay transformers' */
    bool every_token = false;
    bool packed = pool && kiln__bert_plan_packing(attention_mask, b, s, &packing, &every_token);
    out = encoder(m, input_ids, attention_mask, token_type_ids, b, s, packed ? &packing : NULL, every_token);
    if (packed) kiln__bert_packing_release(&packing);
    if (pool) out = mean_pool_normalize(out, mask, s, every_token);
    kiln__op_scope_leave(outer);
    return out;
}

kiln_tensor kiln_bert_forward(const kiln_bert *m, kiln_tensor input_ids, kiln_tensor attention_mask,
                              kiln_tensor token_type_ids) {
    return run("kiln_bert_forward", false, m, input_ids, attention_mask, token_type_ids);
}

kiln_tensor kiln_bert_embed(const kiln_bert *m, kiln_tensor input_ids, kiln_tensor attention_mask,
                            kiln_tensor token_type_ids) {
    return run("kiln_bert_embed", true, m, input_ids, attention_mask, token_type_ids);
}
