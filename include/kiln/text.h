/* kiln text: a WordPiece tokenizer (BERT's basic tokenization, then greedy longest-match
 * sub-words) that gives the same token ids as the reference tokenizer of BERT-family models
 * such as all-MiniLM-L6-v2, and a batch encoder that makes the model's padded inputs.
 *
 *   kiln_tokenizer_options o = kiln_tokenizer_defaults();   // uncased BERT, 256 tokens at most
 *   kiln_tokenizer *tok = kiln_tokenizer_load(".../model/vocab.txt", o);
 *   if (!tok) fprintf(stderr, "%s\n", kiln_last_error());   // a missing or corrupt file
 *   int32_t ids[256], n;
 *   if (kiln_tokenizer_encode(tok, "Hello, world!", 13, ids, 256, &n) == KILN_OK)
 *       printf("%d tokens, the second is %s\n", n, kiln_tokenizer_token(tok, ids[1])); // hello
 *   const char *texts[] = {"first sentence", "a second, longer sentence"};
 *   kiln_token_batch b;   // input_ids, attention_mask, token_type_ids: i64 [2, longest]
 *   if (kiln_tokenizer_encode_batch(tok, 2, texts, NULL, &b) == KILN_OK)
 *       kiln_token_batch_release(&b);
 *   kiln_tokenizer_free(tok);
 *
 * Text is UTF-8; invalid UTF-8 (overlong forms, surrogates, truncated sequences, code points
 * past U+10FFFF) is an error naming the byte offset, never replaced silently. Unicode rules
 * (normalisation, case, categories) come from utf8proc: a build without it loads no tokenizer
 * (KILN_ERR_UNSUPPORTED), since tables of our own would give wrong ids outside ASCII. utf8proc
 * knows Unicode 15; the reference tokenizer's tables are older, so for the ~800 code points
 * assigned since (e.g. U+061D, U+07FD, U+0890..U+089F) the ids can differ: "a" U+07FD "b" is
 * one unknown word to it and "ab" (a mark dropped) to kiln. Every other code point matches. */
#ifndef KILN_TEXT_H
#define KILN_TEXT_H

#include "core.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
    bool lower_case;           /* lower-case the text (uncased models) */
    int strip_accents;         /* 1: NFD, then drop nonspacing marks; 0: keep; -1: as lower_case */
    bool split_chinese_chars;  /* a CJK ideograph is a word of its own */
    bool match_special_tokens; /* "[CLS]" etc. written in the text are those tokens, unsplit */
    bool add_special_tokens;   /* [CLS] first and [SEP] last */
    int32_t max_length;        /* tokens per text at most, the special ones included; 0: no limit */
    int32_t max_chars_per_word; /* a longer word is one unknown token (1 to 1024) */
    /* Copied at load; each must be in the vocabulary (mask_token may be NULL). */
    const char *unk_token, *cls_token, *sep_token, *pad_token, *mask_token;
} kiln_tokenizer_options;
/* all-MiniLM-L6-v2's configuration: lower case, accents stripped, CJK split, special tokens
 * matched and added, 256 tokens at most (its max_seq_length), 100 characters per word,
 * [UNK] [CLS] [SEP] [PAD] [MASK]. */
KILN_API kiln_tokenizer_options kiln_tokenizer_defaults(void);

typedef struct kiln_tokenizer kiln_tokenizer;
/* Reads a vocabulary of one token per line (line i is id i; "\n" or "\r\n" ends a line).
 * NULL with kiln_last_error for a missing, non-regular, oversized or corrupt file (invalid
 * UTF-8, an empty or over-long token, a duplicate, a special token it lacks). */
KILN_API kiln_tokenizer *kiln_tokenizer_load(const char *vocab_path, kiln_tokenizer_options o);
KILN_API void kiln_tokenizer_free(kiln_tokenizer *tok);
/* May be called from several threads at once on one tokenizer. */
KILN_API int32_t kiln_tokenizer_vocab_size(const kiln_tokenizer *tok); /* -1 for NULL */
/* The token of an id (owned by tok), or NULL with the last error for an id out of range. */
KILN_API const char *kiln_tokenizer_token(const kiln_tokenizer *tok, int32_t id);
/* The id of a token (len bytes, exact match), or -1 with the last error when absent. */
KILN_API int32_t kiln_tokenizer_id(const kiln_tokenizer *tok, const char *token, size_t len);

/* Token ids of len bytes of UTF-8 (NUL bytes count as text: they are dropped, as the reference
 * drops them) into ids[0..cap). *n_out is the number of ids, truncated to max_length. When cap
 * is too small nothing useful is in ids, *n_out is the count needed and the status is
 * KILN_ERR_BUFFER_SIZE. */
KILN_API kiln_status kiln_tokenizer_encode(const kiln_tokenizer *tok, const char *utf8, size_t len,
                                           int32_t *ids, int32_t cap, int32_t *n_out);

/* A batch as the model takes it, each i64 of shape [n, longest text's token count]:
 * input_ids padded with the pad token's id, attention_mask 1 on tokens and 0 on padding,
 * token_type_ids zeros. */
typedef struct {
    kiln_tensor input_ids, attention_mask, token_type_ids;
} kiln_token_batch;
/* Encodes texts[0..n) (n >= 1); lens[i] is text i's length in bytes, or lens NULL for
 * NUL-terminated texts. On failure (naming the text's index) every tensor of *out is KILN_NONE. */
KILN_API kiln_status kiln_tokenizer_encode_batch(const kiln_tokenizer *tok, int64_t n, const char *const *texts,
                                                 const size_t *lens, kiln_token_batch *out);
/* Releases the three tensors (KILN_NONE ones are skipped) and sets them to KILN_NONE. */
KILN_API void kiln_token_batch_release(kiln_token_batch *b);

/* ---- call sites ------------------------------------------------------------------------- */
/* The calls that record the caller's file:line, as in core.h's list. */
#define KILN_TEXT_API(X) \
    X(kiln_tokenizer *, tokenizer_load, (const char *vocab_path, kiln_tokenizer_options o), (vocab_path, o)) \
    X(const char *, tokenizer_token, (const kiln_tokenizer *tok, int32_t id), (tok, id)) \
    X(int32_t, tokenizer_id, (const kiln_tokenizer *tok, const char *token, size_t len), (tok, token, len)) \
    X(kiln_status, tokenizer_encode, (const kiln_tokenizer *tok, const char *utf8, size_t len, int32_t *ids, int32_t cap, int32_t *n_out), (tok, utf8, len, ids, cap, n_out)) \
    X(kiln_status, tokenizer_encode_batch, (const kiln_tokenizer *tok, int64_t n, const char *const *texts, const size_t *lens, kiln_token_batch *out), (tok, n, texts, lens, out))
KILN_TEXT_API(KILN__AT_DECLARE)

#if !defined(KILN_BUILDING) && !defined(KILN_NO_CALL_SITE_MACROS)
#pragma GCC system_header /* see core.h: errors in these calls name the caller's line */
#define kiln_tokenizer_load(...) KILN__AT(tokenizer_load, __VA_ARGS__)
#define kiln_tokenizer_token(...) KILN__AT(tokenizer_token, __VA_ARGS__)
#define kiln_tokenizer_id(...) KILN__AT(tokenizer_id, __VA_ARGS__)
#define kiln_tokenizer_encode(...) KILN__AT(tokenizer_encode, __VA_ARGS__)
#define kiln_tokenizer_encode_batch(...) KILN__AT(tokenizer_encode_batch, __VA_ARGS__)
#endif

#ifdef __cplusplus
}
#endif
/* The free calls record their file:line too: a later use of the freed object names it. */
KILN__FREE_AT_DECLARE(kiln_tokenizer, tokenizer_free)
#if !defined(KILN_BUILDING) && !defined(KILN_NO_CALL_SITE_MACROS)
#define kiln_tokenizer_free(...) KILN__AT(tokenizer_free, __VA_ARGS__)
#endif

#endif
