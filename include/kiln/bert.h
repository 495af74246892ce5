/* kiln models: a BERT encoder (the architecture of all-MiniLM-L6-v2 and other sentence
 * embedders) loaded from a Hugging Face model folder, with sentence-transformers' mean pooling
 * and L2 normalisation on top.
 *
 *   kiln_bert *m = kiln_bert_load(".../all-MiniLM-L6-v2/model");   // config.json + model.safetensors
 *   kiln_tokenizer *tok = kiln_tokenizer_load(".../all-MiniLM-L6-v2/model/vocab.txt", kiln_tokenizer_defaults());
 *   if (!m || !tok) fprintf(stderr, "%s\n", kiln_last_error());     // missing, corrupt, mismatched
 *   const char *texts[] = {"A man is eating food.", "Someone eats a meal."};
 *   kiln_token_batch b;
 *   if (m && tok && kiln_tokenizer_encode_batch(tok, 2, texts, NULL, &b) == KILN_OK) {
 *       kiln_tensor e = kiln_bert_embed(m, b.input_ids, b.attention_mask, b.token_type_ids); // [2, 384]
 *       float v[2 * 384];
 *       if (kiln_into_data(e, v, sizeof v) == KILN_OK) printf("%f\n", v[0]);
 *   }
 *   kiln_tokenizer_free(tok);
 *   kiln_bert_free(m);
 *
 * The weights are f32, named as transformers' BertModel names them ("embeddings.*",
 * "encoder.layer.N.*"); "pooler.*" and "embeddings.position_ids" are ignored, any other tensor
 * the model does not use is an error, as is a missing one or one of another shape or dtype. */
#ifndef KILN_BERT_H
#define KILN_BERT_H

#include "core.h"
#include "nn.h"

#ifdef __cplusplus
extern "C" {
#endif

/* config.json's numbers (hidden_act must be "gelu", position_embedding_type "absolute"). */
typedef struct {
    int64_t vocab_size, hidden_size, num_hidden_layers, num_attention_heads, intermediate_size;
    int64_t max_position_embeddings, type_vocab_size;
    double layer_norm_eps;
} kiln_bert_config;

typedef struct kiln_bert kiln_bert;

/* Reads dir/config.json, dir/model.safetensors and, when present, dir/1_Pooling/config.json
 * (which must ask for mean pooling of dimension hidden_size). NULL with kiln_last_error for a
 * missing or corrupt file, an unsupported setting, or a tensor that is missing, unexpected, or
 * of the wrong shape or dtype: KILN_ERR_IO, KILN_ERR_CORRUPT, KILN_ERR_UNSUPPORTED,
 * KILN_ERR_SHAPE, KILN_ERR_DTYPE, KILN_ERR_OUT_OF_MEMORY. The weights live on the CPU, read
 * in place from model.safetensors mapped into memory (read-only, private) until kiln_bert_free:
 * replacing the file meanwhile is safe, truncating it in place is not (as with any mapped
 * weights, the lost pages would fault). Where the file cannot be mapped it is read instead. */
KILN_API kiln_bert *kiln_bert_load(const char *dir);
KILN_API void kiln_bert_free(kiln_bert *m);
/* The loaded configuration (all zero for NULL). */
KILN_API kiln_bert_config kiln_bert_get_config(const kiln_bert *m);

/* The encoder's last hidden state [batch, seq, hidden_size] f32. input_ids [batch, seq]
 * (i32/i64, each below vocab_size, seq at most max_position_embeddings), attention_mask of the
 * same shape (non-zero: a token, 0: padding; any dtype) and token_type_ids (same, or KILN_NONE
 * for all zeros) are consumed. Padding is hidden from attention as transformers does it (the
 * lowest float added to its scores), so a sequence with no token at all attends evenly. Errors come back as a poisoned tensor naming kiln_bert_forward. */
KILN_API kiln_tensor kiln_bert_forward(const kiln_bert *m, kiln_tensor input_ids, kiln_tensor attention_mask,
                                       kiln_tensor token_type_ids);
/* Sentence embeddings [batch, hidden_size] f32: the hidden states averaged over the tokens
 * attention_mask marks, then divided by their L2 norm (sentence-transformers' Pooling +
 * Normalize). Takes the tokenizer's batch (kiln_token_batch's three tensors, consumed). A batch
 * with padding runs its linear layers over the tokens alone (the same result): this reads the
 * mask, so the call waits for whatever computes attention_mask. */
KILN_API kiln_tensor kiln_bert_embed(const kiln_bert *m, kiln_tensor input_ids, kiln_tensor attention_mask,
                                     kiln_tensor token_type_ids);

/* Runs the encoder's linear layers in int8 from now on (kiln_quantize_dynamic's scheme: int8
 * weights per output channel, inputs quantized per row at run time, int32 sums) and frees
 * their f32 weights; embeddings, attention, layer norms, pooling and the output linear (whose
 * GELU input has the widest outliers) stay f32.
 * KILN_QUANT_Q8_0 / KILN_QUANT_Q4_0 instead: the same linears with weight-only blocks
 * (kiln_quantize_dynamic's q8_0/q4_0: f32 activations, weights dequantized in the product).
 * Blocking (reads the weights once); calling it again with the same type changes nothing,
 * with another is KILN_ERR_UNSUPPORTED. KILN_ERR_NULL,
 * KILN_ERR_INVALID_ARGUMENT for another type, KILN_ERR_OUT_OF_MEMORY (the model unchanged). */
KILN_API kiln_status kiln_bert_quantize_dynamic(kiln_bert *m, kiln_quant_type type);

/* Holds the weights in dtype from now on: KILN_BF16 (from the f32 the file has) puts the word
 * embeddings and the encoder's linear weights and biases in bf16 and runs those products in
 * bf16 with f32 sums (the bf16 GEMM: AVX512-BF16 where the CPU has it), as PyTorch's
 * model.to(torch.bfloat16) under CPU autocast would for the products: their outputs are bf16
 * (GELU runs on them, computing in f32); attention, residual adds, layer norms and pooling stay
 * f32, and forward's and embed's results are f32 as before. The f32
 * weights are freed and the mapped file is let go (every other tensor gets its own copy), so
 * resident memory holds about half the weight bytes (MiniLM: 73 MiB against 158 after an
 * embedding). Without AVX512-BF16 the products widen the weights at every call: the same
 * memory, but small batches run several times slower than f32 (BENCHMARKS.md).
 * Blocking (waits for the conversion);
 * KILN_F32 on an f32 model, or KILN_BF16 again, changes nothing. KILN_ERR_NULL,
 * KILN_ERR_INVALID_ARGUMENT for another dtype or back to f32, KILN_ERR_UNSUPPORTED after
 * kiln_bert_quantize_dynamic (and that call refuses a bf16 model likewise),
 * KILN_ERR_OUT_OF_MEMORY (the model unchanged).
 *
 *   kiln_bert *m = kiln_bert_load(".../all-MiniLM-L6-v2/model");
 *   if (m && kiln_bert_to_dtype(m, KILN_BF16) == KILN_OK) {
 *       // kiln_bert_embed as before: f32 embeddings, cosine > 0.999 to f32's on MiniLM
 *   }
 *   kiln_bert_free(m);
 */
KILN_API kiln_status kiln_bert_to_dtype(kiln_bert *m, kiln_dtype dtype);

/* ---- call sites ------------------------------------------------------------------------- */
/* The calls that record the caller's file:line, as in core.h's list. */
#define KILN_BERT_API(X) \
    X(kiln_bert *, bert_load, (const char *dir), (dir)) \
    X(kiln_tensor, bert_forward, (const kiln_bert *m, kiln_tensor input_ids, kiln_tensor attention_mask, kiln_tensor token_type_ids), (m, input_ids, attention_mask, token_type_ids)) \
    X(kiln_tensor, bert_embed, (const kiln_bert *m, kiln_tensor input_ids, kiln_tensor attention_mask, kiln_tensor token_type_ids), (m, input_ids, attention_mask, token_type_ids)) \
    X(kiln_status, bert_quantize_dynamic, (kiln_bert *m, kiln_quant_type type), (m, type)) \
    X(kiln_status, bert_to_dtype, (kiln_bert *m, kiln_dtype dtype), (m, dtype))
KILN_BERT_API(KILN__AT_DECLARE)

#if !defined(KILN_BUILDING) && !defined(KILN_NO_CALL_SITE_MACROS)
#pragma GCC system_header /* see core.h: errors in these calls name the caller's line */
#define kiln_bert_load(...) KILN__AT(bert_load, __VA_ARGS__)
#define kiln_bert_forward(...) KILN__AT(bert_forward, __VA_ARGS__)
#define kiln_bert_embed(...) KILN__AT(bert_embed, __VA_ARGS__)
#define kiln_bert_quantize_dynamic(...) KILN__AT(bert_quantize_dynamic, __VA_ARGS__)
#define kiln_bert_to_dtype(...) KILN__AT(bert_to_dtype, __VA_ARGS__)
#endif
/* The free call records its file:line too: a later use of the freed model names it. */
KILN__FREE_AT_DECLARE(kiln_bert, bert_free)
#if !defined(KILN_BUILDING) && !defined(KILN_NO_CALL_SITE_MACROS)
#define kiln_bert_free(...) KILN__AT(bert_free, __VA_ARGS__)
#endif

#ifdef __cplusplus
}
#endif
#endif
