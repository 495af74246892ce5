/* The precision of a loaded BERT encoder's weights: kiln_bert_quantize_dynamic (int8 linear
 * layers, dynamic per-row activations) and kiln_bert_to_dtype (bf16 weights). Both replace the
 * f32 weights they convert and give their memory back. */
#include <stdint.h>
#include <stdlib.h>

#include "kiln/bert.h"
#include "kiln/engine.h"
#include "kiln/tensor.h"
#include "models/bert-impl.h"
#include "nn/layers-impl.h"
#include "nn/linear_blockq-impl.h"

/* Which of each layer's linears (bits: 1 query/key/value, 2 attention output, 4 intermediate,
 * 8 output) go int8, chosen by MiniLM's cosine to f32 over the 278 reference sentences (worst
 * sentence). With one weight scale per output channel: all four 0.9931, all but the output
 * 0.9970; with a scale per channel and block of 32 inputs: all four 0.9977 (all but the
 * output 0.9981), so all four go int8 and the f32 output linear no longer costs a third of
 * the time (and four times the weight bytes) of the products. */
#define BERT_INT8_LINEARS 15

kiln_status kiln_bert_quantize_dynamic(kiln_bert *m, kiln_quant_type type) {
    const char *op = "kiln_bert_quantize_dynamic";
    if (!m) return kiln__report(KILN_ERR_NULL, op, "the model is NULL");
    KILN__OBJECT_OR_RETURN(m, KILN__BERT_KIND, op, kiln_last_status());
    if (type != KILN_QUANT_I8 && type != KILN_QUANT_Q8_0 && type != KILN_QUANT_Q4_0)
        return kiln__report(KILN_ERR_INVALID_ARGUMENT, op, "unknown quantized type %d (KILN_QUANT_I8, _Q8_0, _Q4_0)",
                            (int)type);
    if (m->int8) /* already: the same type changes nothing, another is refused */
        return m->cfg.num_hidden_layers == 0 || kiln__quant_type_of(m->int8[0][0][0]) == type
                   ? KILN_OK
                   : kiln__report(KILN_ERR_UNSUPPORTED, op, "the model's linears are quantized to another type already");
    if (m->bf16) return kiln__report(KILN_ERR_UNSUPPORTED, op, "the model's weights are bf16 (kiln_bert_to_dtype)");
    int64_t layers = m->cfg.num_hidden_layers;
    const unsigned which = BERT_INT8_LINEARS;
    kiln_tensor(*q)[4][2] = calloc((size_t)(layers ? layers : 1), sizeof *q);
    if (!q) return kiln__report(KILN_ERR_OUT_OF_MEMORY, op, "out of memory for the int8 weights");
    kiln_status st = KILN_OK;
    for (int64_t l = 0; l < layers && st == KILN_OK; l++)
        for (int k = 0; k < 4 && st == KILN_OK; k++)
            if (which & (1u << k))
                st = type == KILN_QUANT_I8
                         ? kiln__quantize_weight_i8(op, m->layers[l][linear_slots[k]], m->layers[l][linear_slots[k] + 1],
                                                    &q[l][k][0], &q[l][k][1])
                         : kiln__quantize_weight_blockq(op, type, m->layers[l][linear_slots[k]],
                                                        m->layers[l][linear_slots[k] + 1], &q[l][k][0], &q[l][k][1]);
    if (st != KILN_OK) {
        for (int64_t l = 0; l < layers; l++)
            for (int k = 0; k < 8; k++)
                if (q[l][k / 2][k % 2].id) kiln_release(q[l][k / 2][k % 2]);
        free(q);
        return st;
    }
    m->int8 = q;
    /* the f32 weights (and biases) that went int8 are no longer read: give their memory back */
    for (int64_t l = 0; l < layers; l++)
        for (int k = 0; k < 4; k++)
            for (int i = 0; i < 2 && q[l][k][0].id; i++) {
                kiln_release(m->layers[l][linear_slots[k] + i]);
                m->layers[l][linear_slots[k] + i] = KILN_NONE;
            }
    return KILN_OK;
}

/* ---- bf16 weights ----------------------------------------------------------------------- */

/* Whether layer slot k goes bf16: the four linears' weights and biases. */
static bool slot_goes_bf16(int k) {
    for (int i = 0; i < 4; i++)
        if (k == linear_slots[i] || k == linear_slots[i] + 1) return true;
    return false;
}

kiln_status kiln_bert_to_dtype(kiln_bert *m, kiln_dtype dtype) {
    const char *op = "kiln_bert_to_dtype";
    if (!m) return kiln__report(KILN_ERR_NULL, op, "the model is NULL");
    KILN__OBJECT_OR_RETURN(m, KILN__BERT_KIND, op, kiln_last_status());
    if (dtype == (m->bf16 ? KILN_BF16 : KILN_F32)) return KILN_OK;
    if (dtype != KILN_BF16)
        return kiln__report(KILN_ERR_INVALID_ARGUMENT, op, "%s: the weights are %s and can go to bf16 only (from f32)",
                            kiln__dtype_valid(dtype) ? kiln_dtype_name(dtype) : "an invalid dtype", m->bf16 ? "bf16" : "f32");
    if (m->int8) return kiln__report(KILN_ERR_UNSUPPORTED, op, "the model's linears are int8 (kiln_bert_quantize_dynamic)");
    int64_t layers = m->cfg.num_hidden_layers;
    size_t cap = 5 + (size_t)layers * LAYER_SLOTS;
    kiln_tensor **slots = calloc(cap, sizeof *slots), *made = calloc(cap, sizeof *made);
    bool *low = calloc(cap, sizeof *low);
    size_t n = 0;
    if (slots && made && low) {
        kiln_tensor *emb[] = {&m->word, &m->position, &m->token_type, &m->ln_w, &m->ln_b};
        for (size_t i = 0; i < sizeof emb / sizeof *emb; i++) low[n] = i == 0, slots[n++] = emb[i];
        for (int64_t l = 0; l < layers; l++)
            for (int k = 0; k < LAYER_SLOTS; k++)
                if (m->layers[l][k].id) low[n] = slot_goes_bf16(k), slots[n++] = &m->layers[l][k];
    }
    /* every new tensor first (bf16 casts; own f32 copies of the rest, so that nothing views the
     * mapped file any more), then the swap: a failure leaves the model as it was */
    bool ok = slots && made && low;
    for (size_t i = 0; i < n && ok; i++) {
        made[i] = low[i] ? kiln_cast(kiln_ref(*slots[i]), KILN_BF16) : kiln_clone(kiln_ref(*slots[i]));
        ok = kiln__nn_peek(made[i]) != NULL;
    }
    if (!ok) {
        for (size_t i = 0; made && i < n; i++)
            if (made[i].id) kiln_release(made[i]);
        free(slots), free(made), free(low);
        return kiln__report(KILN_ERR_OUT_OF_MEMORY, op, "out of memory for the bf16 weights");
    }
    for (size_t i = 0; i < n; i++) {
        kiln_release(*slots[i]);
        *slots[i] = made[i];
    }
    m->bf16 = true;
    free(slots), free(made), free(low);
    /* blocking, as kiln_bert_quantize_dynamic: the f32 weights are gone when it returns */
    return kiln_sync();
}
