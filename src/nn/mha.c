/* MultiheadAttention (torch.nn.MultiheadAttention without dropout, kdim/vdim or added k/v
 * biases): parameters in_proj_weight [3E, E], in_proj_bias [3E] and a child Linear out_proj, as
 * PyTorch names them, so checkpoints line up. Composed from differentiable ops:
 *
 *   q, k, v = x W_q^T + b_q, ...       split into heads [N, H, L, E/H]
 *   o = scaled_dot_product_attention(q, k, v, mask)   (mask: attn_mask + key_padding_mask, both
 *       turned additive: a bool true hides the key, as PyTorch's MultiheadAttention has it)
 *   y = out_proj(concat heads)
 *
 * The attention weights, when asked for, are softmax(q k^T / sqrt(E/H) + mask) averaged over
 * the heads (PyTorch's average_attn_weights default), computed beside the output. */
#include <math.h>

#include "kiln/autodiff.h"
#include "kiln/tensor.h"
#include "nn/layers-impl.h"

static const char *const OP = "kiln_multihead_attention";

static kiln_tensor mha_self(kiln_module *m, kiln_tensor x);
static const kiln__module_vtable mha_vt = {"MultiheadAttention", mha_self, NULL};

kiln_multihead_attention_options kiln_multihead_attention_defaults(int64_t embed_dim, int64_t num_heads) {
    return (kiln_multihead_attention_options){.embed_dim = embed_dim, .num_heads = num_heads, .bias = true};
}

kiln_module *kiln_multihead_attention_new(kiln_multihead_attention_options o, uint64_t seed) {
    const char *op = "kiln_multihead_attention_new";
    if (o.embed_dim < 1 || o.num_heads < 1 || o.embed_dim % o.num_heads || o.embed_dim > ((int64_t)1 << 30))
        return kiln__nn_bad_arg(op, "embed_dim (%lld) must be >= 1 and divisible by num_heads (%lld >= 1)",
                                (long long)o.embed_dim, (long long)o.num_heads);
    kiln_module *m = kiln__module_new(&mha_vt, sizeof o);
    if (!m) return NULL;
    *(kiln_multihead_attention_options *)m->state = o;
    int64_t e = o.embed_dim;
    double bound = sqrt(6.0 / (double)(e + 3 * e)); /* xavier_uniform over [3E, E], as PyTorch */
    kiln__nn_param ps[2] = {
        {"in_proj_weight",
         kiln_uniform(KILN_CPU, KILN_F32, KILN_SHAPE(3 * e, e), -bound, bound, kiln__nn_seed(seed, 0)), false},
        {"in_proj_bias", o.bias ? kiln_zeros(KILN_CPU, KILN_F32, KILN_SHAPE(3 * e)) : KILN_NONE, false},
    };
    m = kiln__nn_finish(m, o.bias ? 2 : 1, ps);
    kiln_module *out = kiln_linear_new(e, e, o.bias, kiln__nn_seed(seed, 1));
    if (m && out && o.bias) { /* PyTorch zeroes out_proj.bias */
        kiln_release(out->params[1].tensor);
        out->params[1].tensor = kiln_zeros(KILN_CPU, KILN_F32, KILN_SHAPE(e));
        kiln_require_grad(out->params[1].tensor);
    }
    if (!m || !out || kiln__module_add_named_child(m, op, "out_proj", out) != KILN_OK) {
        kiln_module_free(out);
        kiln_module_free(m);
        return NULL;
    }
    return m;
}

/* A bool mask (true = hidden) as 0 / -inf in dtype; a float mask as it is. */
static kiln_tensor additive(kiln_tensor mask, kiln_dtype bool_dtype, kiln_dtype dtype, kiln_device dev) {
    if (bool_dtype != KILN_BOOL) return mask;
    kiln_shape s = kiln_tensor_shape(mask);
    return kiln_masked_fill(kiln_zeros(dev, dtype, s), mask, -INFINITY);
}

/* x [N, L, E] (consumed) projected by rows [part E, part E + E) of the in-projection and split
 * into heads: [N, H, L, D]. */
static kiln_tensor project(kiln_module *m, kiln_tensor x, int part, int64_t h) {
    const kiln_multihead_attention_options *o = m->state;
    int64_t e = o->embed_dim;
    kiln_tensor w = kiln_narrow(kiln_ref(m->params[0].tensor), 0, part * e, e);
    kiln_tensor b = o->bias ? kiln_narrow(kiln_ref(m->params[1].tensor), 0, part * e, e) : KILN_NONE;
    kiln_shape s = kiln_tensor_shape(x);
    kiln_tensor y = kiln_linear(x, w, b);
    return kiln_transpose(kiln_reshape(y, KILN_SHAPE(s.dims[0], s.dims[1], h, e / h)), 1, 2);
}

typedef struct {
    int64_t n, l, s;
    kiln_dtype dtype;
    kiln_device dev;
} mha_dims;

/* The argument checks; false with the status and message of the first problem. */
static bool check(const kiln_multihead_attention_options *o, const kiln__tensor *const *t, mha_dims *d,
                  kiln_status *st, char *msg, size_t size) {
    const kiln__tensor *q = t[0], *k = t[1], *v = t[2], *kpm = t[3], *am = t[4];
    char a[96], b[96], c[96];
    kiln__nn_shape_str(a, sizeof a, q);
    kiln__nn_shape_str(b, sizeof b, k);
    kiln__nn_shape_str(c, sizeof c, v);
    *st = KILN_ERR_DTYPE;
    if (!kiln__dtype_is_float(q->dtype) || k->dtype != q->dtype || v->dtype != q->dtype)
        return snprintf(msg, size, "query, key and value must have one floating-point dtype, got %s, %s and %s",
                        kiln_dtype_name(q->dtype), kiln_dtype_name(k->dtype), kiln_dtype_name(v->dtype)), false;
    for (int i = 3; i < 5; i++)
        if (t[i] && t[i]->dtype != KILN_BOOL && t[i]->dtype != q->dtype)
            return snprintf(msg, size, "%s must be bool (true = hidden) or the query's dtype %s, got %s",
                            i == 3 ? "key_padding_mask" : "attn_mask", kiln_dtype_name(q->dtype),
                            kiln_dtype_name(t[i]->dtype)), false;
    *st = KILN_ERR_SHAPE;
    const char *layout = o->batch_first ? "[N, L, E]" : "[L, N, E]";
    int bd = o->batch_first ? 0 : 1, sd = 1 - bd;
    if (q->ndim != 3 || k->ndim != 3 || v->ndim != 3 || q->shape[2] != o->embed_dim || k->shape[2] != o->embed_dim ||
        v->shape[2] != o->embed_dim)
        return snprintf(msg, size, "query %s, key %s and value %s must be %s with E = embed_dim %lld", a, b, c,
                        layout, (long long)o->embed_dim), false;
    if (k->shape[bd] != q->shape[bd] || v->shape[bd] != q->shape[bd] || k->shape[sd] != v->shape[sd])
        return snprintf(msg, size, "query %s, key %s and value %s must share the batch size N, key and value the "
                        "source length S (layout %s)", a, b, c, layout), false;
    d->n = q->shape[bd], d->l = q->shape[sd], d->s = k->shape[sd], d->dtype = q->dtype, d->dev = q->device;
    if (kpm && (kpm->ndim != 2 || kpm->shape[0] != d->n || kpm->shape[1] != d->s))
        return snprintf(msg, size, "key_padding_mask %s must be [N, S] = [%lld, %lld]",
                        kiln__nn_shape_str(a, sizeof a, kpm), (long long)d->n, (long long)d->s), false;
    if (am && !((am->ndim == 2 && am->shape[0] == d->l && am->shape[1] == d->s) ||
                (am->ndim == 3 && am->shape[0] == d->n * o->num_heads && am->shape[1] == d->l && am->shape[2] == d->s)))
        return snprintf(msg, size, "attn_mask %s must be [L, S] = [%lld, %lld] or [N * num_heads, L, S] = "
                        "[%lld, %lld, %lld]", kiln__nn_shape_str(a, sizeof a, am), (long long)d->l, (long long)d->s,
                        (long long)(d->n * o->num_heads), (long long)d->l, (long long)d->s), false;
    return true;
}

static kiln_tensor attend(kiln_module *m, kiln_tensor query, kiln_tensor key, kiln_tensor value,
                          kiln_tensor key_padding_mask, kiln_tensor attn_mask, kiln_tensor *weights) {
    bool has_kpm = key_padding_mask.id != KILN_NONE.id, has_am = attn_mask.id != KILN_NONE.id;
    kiln_tensor in[5] = {query, key, value}; /* the inputs given, for kiln__nn_fail */
    int n = 3;
    if (has_kpm) in[n++] = key_padding_mask;
    if (has_am) in[n++] = attn_mask;
    if (!m || m->vt != &mha_vt)
        return kiln__nn_fail(OP, n, in, !m ? KILN_ERR_NULL : KILN_ERR_INVALID_ARGUMENT,
                             "module is %s, not a MultiheadAttention", kiln_module_type(m));
    const kiln_multihead_attention_options *o = m->state;
    const kiln__tensor *t[5] = {kiln__nn_peek(query), kiln__nn_peek(key), kiln__nn_peek(value),
                                has_kpm ? kiln__nn_peek(key_padding_mask) : NULL,
                                has_am ? kiln__nn_peek(attn_mask) : NULL};
    if (!t[0] || !t[1] || !t[2] || (has_kpm && !t[3]) || (has_am && !t[4]))
        return kiln__nn_fail(OP, n, in, KILN_ERR_INVALID_ARGUMENT, "unusable input");
    mha_dims d;
    kiln_status st;
    char msg[512];
    if (!check(o, t, &d, &st, msg, sizeof msg)) return kiln__nn_fail(OP, n, in, st, "%s", msg);
    kiln_dtype kpm_dt = has_kpm ? t[3]->dtype : KILN_F32, am_dt = has_am ? t[4]->dtype : KILN_F32;
    int64_t h = o->num_heads, e = o->embed_dim;
    if (!o->batch_first) {
        query = kiln_transpose(query, 0, 1);
        key = kiln_transpose(key, 0, 1);
        value = kiln_transpose(value, 0, 1);
    }
    kiln_tensor q = project(m, query, 0, h), k = project(m, key, 1, h), v = project(m, value, 2, h);
    kiln_tensor mask = KILN_NONE; /* additive, broadcast to [N, H, L, S] */
    if (has_am) {
        mask = additive(attn_mask, am_dt, d.dtype, d.dev);
        if (kiln_tensor_shape(mask).ndim == 3) mask = kiln_reshape(mask, KILN_SHAPE(d.n, h, d.l, d.s));
    }
    if (has_kpm) {
        kiln_tensor kp = kiln_reshape(additive(key_padding_mask, kpm_dt, d.dtype, d.dev), KILN_SHAPE(d.n, 1, 1, d.s));
        mask = mask.id == KILN_NONE.id ? kp : kiln_add(mask, kp);
    }
    if (weights) {
        kiln_tensor s = kiln_mul_scalar(kiln_matmul(kiln_ref(q), kiln_transpose(kiln_ref(k), -2, -1)),
                                        1.0 / sqrt((double)(e / h)));
        if (mask.id != KILN_NONE.id) s = kiln_add(s, kiln_ref(mask));
        *weights = kiln_mean_dims(kiln_softmax(s, -1), KILN_DIMS(1), false);
    }
    kiln_tensor y = kiln_scaled_dot_product_attention(q, k, v, mask, false, 0);
    y = kiln_reshape(kiln_transpose(y, 1, 2), KILN_SHAPE(d.n, d.l, e));
    y = kiln_module_forward(m->children[0], y);
    return o->batch_first ? y : kiln_transpose(y, 0, 1);
}

kiln_tensor kiln_multihead_attention(kiln_module *m, kiln_tensor query, kiln_tensor key, kiln_tensor value,
                                     kiln_tensor key_padding_mask, kiln_tensor attn_mask, kiln_tensor *weights) {
    if (weights) *weights = KILN_NONE;
    if (m && !KILN__MODULE_LIVE(m))
        return kiln__module_refused(OP, m, 5, (kiln_tensor[]){query, key, value, key_padding_mask, attn_mask});
    const char *outer = kiln__op_scope_enter(OP); /* the ops inside report as it */
    kiln_tensor y = attend(m, query, key, value, key_padding_mask, attn_mask, weights);
    kiln__op_scope_leave(outer);
    return y;
}

/* kiln_module_forward: self-attention, no masks. */
static kiln_tensor mha_self(kiln_module *m, kiln_tensor x) {
    kiln_tensor k = kiln_ref(x), v = kiln_ref(x);
    return kiln_multihead_attention(m, x, k, v, KILN_NONE, KILN_NONE, NULL);
}
