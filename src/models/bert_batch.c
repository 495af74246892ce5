/* A padded batch's embedding over its tokens alone (kiln_bert_embed). A padding token's hidden
 * state never reaches a real token's (its key is hidden: exp(-FLT_MAX + ...) is exactly 0) nor
 * the mean pooling (weight 0), so every layer may run over the tokens alone, packed one sentence
 * after another: the linear layers, GELU and layer norms over [T, h] instead of [b * s, h] (at a
 * batch of mixed lengths padded to its longest, about half the rows), and attention within each
 * sentence's own rows (the sum of its lengths squared instead of b times the longest squared:
 * 0.38 of the padded work at lengths spread evenly from 16 to 128), straight on the packed
 * projection, with no gather of it into the padded layout and back. */
#include <stdint.h>
#include <stdlib.h>

#include "kiln/bert.h"
#include "kiln/nn.h"
#include "kiln/tensor.h"
#include "models/bert-impl.h"
#include "nn/layers-impl.h"

/* A packing for attention_mask [b, s], or false when it does not pay (no padding, no token at
 * all, a mask that cannot be read: the padded path then runs, and reports any error). Reads
 * the mask: a wait for whatever computes it (the tokenizer's output is ready). */
bool kiln__bert_plan_packing(kiln_tensor mask, int64_t b, int64_t s, kiln__bert_packing *out, bool *every_token) {
    int64_t n = b * s, *keep = malloc(sizeof(int64_t) * (size_t)n), *where = malloc(sizeof(int64_t) * (size_t)n);
    int64_t *lengths = malloc(sizeof(int64_t) * (size_t)b), sentences = 0;
    /* a token where the mask is nonzero, as the pooling and the attention's hiding count it
     * (a cast to i64 would truncate 0.5 to padding); a poisoned mask's error stays reported
     * (this read delivers it: the padded path's poisoned result then fails its own read) */
    bool ok = keep && where && lengths &&
              kiln_into_data(kiln_cast(kiln_ne_scalar(kiln_ref(mask), 0.0), KILN_I64), keep,
                             sizeof(int64_t) * (size_t)n) == KILN_OK;
    int64_t t = 0;
    for (int64_t r = 0; ok && r < b; r++) {
        int64_t first = -1, before = t;
        for (int64_t c = 0; c < s; c++) {
            int64_t i = r * s + c;
            if (keep[i] != 0) {
                if (first < 0) first = t;
                where[i] = t;
                keep[t++] = i; /* t <= i: overwrites only what was read */
            } else {
                where[i] = -1;
            }
        }
        for (int64_t c = 0; c < s; c++)
            if (where[r * s + c] < 0) where[r * s + c] = first < 0 ? 0 : first;
        if (t > before) lengths[sentences++] = t - before;
    }
    *every_token = ok && t == n;
    ok = ok && t > 0 && t < n;
    if (ok) {
        out->pack = kiln_from_data(KILN_CPU, KILN_I64, KILN_SHAPE(t), keep);
        out->unpack = kiln_from_data(KILN_CPU, KILN_I64, KILN_SHAPE(n), where);
        out->sentences = sentences;
        out->lengths = lengths;
    } else {
        free(lengths);
    }
    free(keep), free(where);
    return ok;
}


void kiln__bert_packing_release(kiln__bert_packing *p) {
    kiln_release(p->pack), kiln_release(p->unpack);
    free(p->lengths);
    p->lengths = NULL;
}

kiln_tensor kiln__bert_packed_attention(const kiln_bert *m, kiln_tensor qkv, const kiln__bert_packing *p) {
    int64_t h = m->cfg.hidden_size, heads = m->cfg.num_attention_heads, hd = h / heads;
    qkv = kiln_reshape(qkv, KILN_SHAPE(-1, 3, heads, hd));
    kiln_tensor part[3];
    for (int i = 0; i < 3; i++) /* [heads, T, hd] views of the projection, rows 3h apart */
        part[i] = kiln_permute(kiln_squeeze(kiln_narrow(i < 2 ? kiln_ref(qkv) : qkv, 1, i, 1), 1), KILN_DIMS(1, 0, 2));
    /* q is pre-scaled in the weights (bert_load.c's fuse_qkv): scale 1 */
    kiln_tensor ctx = kiln__attention_segments(part[0], part[1], part[2], p->sentences, p->lengths, 1.0);
    return kiln_reshape(kiln_permute(ctx, KILN_DIMS(1, 0, 2)), KILN_SHAPE(-1, h)); /* a view: [T, heads, hd] in memory */
}
