/* kiln text internals: the tokenizer record (vocabulary, hash index, options), strict UTF-8
 * decoding, and the growable id list that the encoder fills. */
#ifndef KILN_TEXT_IMPL_H
#define KILN_TEXT_IMPL_H

#include "core/core-impl.h"
#include "kiln/text.h"

#ifndef KILN_HAVE_UTF8PROC
#define KILN_HAVE_UTF8PROC 0
#endif

#define KILN__TOKEN_MAX_BYTES 1024        /* a longer vocabulary line is corrupt */
#define KILN__VOCAB_MAX_BYTES (64u << 20) /* BERT's vocabularies are under 1 MiB */
#define KILN__SPECIAL_COUNT 5

typedef struct {
    const char *text; /* in the tokenizer's blob */
    size_t len;
    int32_t id;
} kiln__special;

struct kiln_tokenizer {
    kiln_tokenizer_options o; /* token strings point at the matching kiln__special's text */
    char *blob;               /* every token, NUL-terminated, in id order */
    uint32_t *start, *len;    /* of token i in blob */
    int32_t n;
    int32_t *slots; /* open-addressing hash index: id or -1 */
    uint64_t slot_mask;
    size_t longest; /* bytes of the longest token */
    kiln__special special[KILN__SPECIAL_COUNT]; /* unk, cls, sep, pad, mask (len 0: none) */
};
enum { KILN__UNK, KILN__CLS, KILN__SEP, KILN__PAD, KILN__MASK };

/* The id of token s (n bytes), or -1: no error is set. */
int32_t kiln__vocab_find(const kiln_tokenizer *tok, const char *s, size_t n);

/* Decodes the code point at s[*at] (strict UTF-8: no overlong forms, surrogates or values past
 * U+10FFFF) into *cp and advances *at; returns NULL, or what is wrong with the bytes there. */
const char *kiln__utf8_next(const unsigned char *s, size_t len, size_t *at, int32_t *cp);
/* The whole of s is valid UTF-8, else reports `status` for op, naming the byte offset and `what`
 * (the text's name in the message). */
kiln_status kiln__utf8_check(kiln_status status, const char *op, const char *what, const char *s, size_t len);
/* Writes cp as UTF-8 into out (room for 4) and returns the byte count. */
size_t kiln__utf8_put(int32_t cp, char *out);

/* A growable list of ids that stops taking ids at `limit` but counts every one it is offered. */
typedef struct {
    int32_t *v;
    size_t n, cap, limit;
} kiln__ids;
/* false, with the last error set for op, when out of memory. */
bool kiln__ids_push(kiln__ids *ids, int32_t id, const char *op);

/* Appends to ids the WordPiece ids of one word of n code points (before any is stored, a word
 * longer than max_chars_per_word is one [UNK]; cps may then hold fewer than n). */
bool kiln__wordpiece(const kiln_tokenizer *tok, const int32_t *cps, size_t n, kiln__ids *ids, const char *op);

/* BERT's basic tokenization of one span of text (valid UTF-8, no special tokens in it): each
 * word goes through kiln__wordpiece into ids. Stops early once ids holds `limit` ids. */
bool kiln__basic_tokenize(const kiln_tokenizer *tok, const char *s, size_t len, kiln__ids *ids, const char *op);

#endif
