/* kiln models internals: the BERT encoder's state, shared by its files: bert_load.c (config,
 * weights, kiln_bert_load and _free), bert_encoder.c (the forward and the pooled embedding),
 * bert_batch.c (a padded batch run over its tokens alone) and bert.c (the weights' precision:
 * int8, bf16). */
#ifndef KILN_MODELS_BERT_IMPL_H
#define KILN_MODELS_BERT_IMPL_H

#include <stdbool.h>
#include <stdint.h>

#include "kiln/bert.h"
#include "kiln/tensor.h"

/* One encoder layer's tensors, in the order of LAYER_TENSORS (bert_load.c). */
enum { Q_W, Q_B, K_W, K_B, V_W, V_B, AO_W, AO_B, ALN_W, ALN_B, I_W, I_B, O_W, O_B, OLN_W, OLN_B, LAYER_N };
/* Made at load time from the Q, K and V projections (which are then released): one weight
 * [3H, H] and bias [3H], the query's rows pre-scaled by 1/sqrt(head size), so each layer
 * projects in one GEMM and the scores need no scaling pass. */
enum { QKV_W = LAYER_N, QKV_B, LAYER_SLOTS };

struct kiln_bert {
    kiln_bert_config cfg;
    kiln_tensor word, position, token_type, ln_w, ln_b; /* embeddings */
    kiln_tensor (*layers)[LAYER_SLOTS];
    /* kiln_bert_quantize_dynamic: per layer, the int8 weight and scales of QKV_W, AO_W, I_W, O_W
     * (KILN_NONE: that one stays f32), the scales with the bias as their last column (fused into
     * the product, as is the intermediate's GELU); NULL until then */
    kiln_tensor (*int8)[4][2];
    bool bf16; /* kiln_bert_to_dtype(KILN_BF16): the word embeddings and the linears are bf16 */
};

/* The slots of the four linear layers' weights, in the order a layer runs them (each one's
 * bias is the next slot). */
static const int linear_slots[4] = {QKV_W, AO_W, I_W, O_W};

/* A padded batch's tokens packed one sentence after another (bert_batch.c). */
typedef struct {
    kiln_tensor pack;   /* [T] i64: the padded rows that are tokens, in order */
    kiln_tensor unpack; /* [b * s] i64: each padded row's packed row (padding: its sentence's
                         * first token, or row 0; either is hidden or dropped) */
    int64_t sentences;  /* the rows with a token */
    int64_t *lengths;   /* [sentences]: each one's count of tokens (its packed rows, in turn) */
} kiln__bert_packing;

/* A packing for attention_mask [b, s], or false when it does not pay (no padding, no token at
 * all, a mask that cannot be read: the padded path then runs, and reports any error). Reads
 * the mask: a wait for whatever computes it (the tokenizer's output is ready). *every_token:
 * whether the mask was read and has no padding at all (then it needs no hiding nor weights). */
bool kiln__bert_plan_packing(kiln_tensor mask, int64_t b, int64_t s, kiln__bert_packing *out, bool *every_token);
void kiln__bert_packing_release(kiln__bert_packing *p);
/* Attention within each sentence over the packed projection qkv [T, 3h] (consumed): the
 * context [T, h]. */
kiln_tensor kiln__bert_packed_attention(const kiln_bert *m, kiln_tensor qkv, const kiln__bert_packing *p);

/* softmax(q k^T) v per sentence and head of qkv [b, s, 3, heads, hd] f32 (consumed; q
 * pre-scaled), no mask: the context [b, s, heads, hd] (bert_attention.c). Only where
 * kiln__bert_attention_supported(); otherwise the result is poisoned. */
kiln_tensor kiln__bert_attention(kiln_tensor qkv);
bool kiln__bert_attention_supported(void);

#endif
