/* The tokenizer's vocabulary: vocab.txt read whole (one token per line, line i is id i) into
 * one blob, with an open-addressing hash index from token bytes to id, and the options the
 * encoder follows. The file is hostile until checked: only a regular file of bounded size is
 * read (a FIFO would block), and every line is checked before the tokenizer is handed out. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "text/text-impl.h"

static const char OP_LOAD[] = "kiln_tokenizer_load";

kiln_tokenizer_options kiln_tokenizer_defaults(void) {
    return (kiln_tokenizer_options){
        .lower_case = true,
        .strip_accents = -1,
        .split_chinese_chars = true,
        .match_special_tokens = true,
        .add_special_tokens = true,
        .max_length = 256,
        .max_chars_per_word = 100,
        .unk_token = "[UNK]",
        .cls_token = "[CLS]",
        .sep_token = "[SEP]",
        .pad_token = "[PAD]",
        .mask_token = "[MASK]",
    };
}

static uint64_t hash_bytes(const char *s, size_t n) { /* FNV-1a, then mixed for the low bits */
    uint64_t h = 0xcbf29ce484222325ull;
    for (size_t i = 0; i < n; i++) h = (h ^ (unsigned char)s[i]) * 0x100000001b3ull;
    return h ^ (h >> 29);
}

int32_t kiln__vocab_find(const kiln_tokenizer *tok, const char *s, size_t n) {
    for (uint64_t k = hash_bytes(s, n) & tok->slot_mask;; k = (k + 1) & tok->slot_mask) {
        int32_t id = tok->slots[k];
        if (id < 0) return -1;
        if (tok->len[id] == n && memcmp(tok->blob + tok->start[id], s, n) == 0) return id;
    }
}

/* Turns the file's lines into tokens in place: each line end becomes a NUL. */
static bool split_lines(kiln_tokenizer *tok, const char *path, size_t size) {
    size_t lines = 0;
    for (size_t i = 0; i < size; i++) lines += tok->blob[i] == '\n';
    lines += size > 0 && tok->blob[size - 1] != '\n'; /* a last line without its newline */
    if (lines == 0) return kiln__report(KILN_ERR_CORRUPT, OP_LOAD, "%s: empty vocabulary", path), false;
    tok->start = malloc(lines * sizeof *tok->start);
    tok->len = malloc(lines * sizeof *tok->len);
    if (!tok->start || !tok->len)
        return kiln__report(KILN_ERR_OUT_OF_MEMORY, OP_LOAD, "%s: out of memory for %zu tokens", path, lines), false;
    size_t at = 0;
    for (size_t line = 0; line < lines; line++) {
        char *nl = memchr(tok->blob + at, '\n', size - at);
        size_t end = nl ? (size_t)(nl - tok->blob) : size, n = end - at;
        if (n > 0 && tok->blob[end - 1] == '\r') n--;
        if (n == 0) return kiln__report(KILN_ERR_CORRUPT, OP_LOAD, "%s: line %zu is empty", path, line + 1), false;
        if (n > KILN__TOKEN_MAX_BYTES)
            return kiln__report(KILN_ERR_CORRUPT, OP_LOAD, "%s: line %zu is %zu bytes long, more than a token's %d", path,
                                line + 1, n, KILN__TOKEN_MAX_BYTES),
                   false;
        if (memchr(tok->blob + at, '\0', n))
            return kiln__report(KILN_ERR_CORRUPT, OP_LOAD, "%s: line %zu holds a NUL byte", path, line + 1), false;
        char what[64];
        snprintf(what, sizeof what, "line %zu", line + 1);
        if (kiln__utf8_check(KILN_ERR_CORRUPT, OP_LOAD, what, tok->blob + at, n) != KILN_OK) return false;
        tok->blob[at + n] = '\0';
        tok->start[line] = (uint32_t)at, tok->len[line] = (uint32_t)n;
        if (n > tok->longest) tok->longest = n;
        at = end + 1;
    }
    tok->n = (int32_t)lines; /* fits: the file is at most 64 MiB */
    return true;
}

static bool build_index(kiln_tokenizer *tok, const char *path) {
    uint64_t slots = 16;
    while (slots < 2 * (uint64_t)tok->n) slots *= 2;
    tok->slots = malloc(slots * sizeof *tok->slots);
    if (!tok->slots) return kiln__report(KILN_ERR_OUT_OF_MEMORY, OP_LOAD, "%s: out of memory for the index", path), false;
    memset(tok->slots, 0xFF, slots * sizeof *tok->slots); /* all -1 */
    tok->slot_mask = slots - 1;
    for (int32_t id = 0; id < tok->n; id++) {
        const char *s = tok->blob + tok->start[id];
        uint64_t k = hash_bytes(s, tok->len[id]) & tok->slot_mask;
        for (; tok->slots[k] >= 0; k = (k + 1) & tok->slot_mask) {
            int32_t other = tok->slots[k];
            if (tok->len[other] == tok->len[id] && memcmp(tok->blob + tok->start[other], s, tok->len[id]) == 0)
                return kiln__report(KILN_ERR_CORRUPT, OP_LOAD, "%s: token '%s' on line %d is also on line %d", path, s,
                                    id + 1, other + 1),
                       false;
        }
        tok->slots[k] = id;
    }
    return true;
}

/* Looks up the special tokens the options name and points the options at the blob's copies. */
static bool find_specials(kiln_tokenizer *tok, const char *path) {
    const char **names[KILN__SPECIAL_COUNT] = {&tok->o.unk_token, &tok->o.cls_token, &tok->o.sep_token,
                                               &tok->o.pad_token, &tok->o.mask_token};
    static const char *const role[KILN__SPECIAL_COUNT] = {"unk_token", "cls_token", "sep_token", "pad_token",
                                                          "mask_token"};
    for (int k = 0; k < KILN__SPECIAL_COUNT; k++) {
        const char *name = *names[k];
        if (!name) {
            if (k == KILN__MASK) continue;
            return kiln__report(KILN_ERR_NULL, OP_LOAD, "options.%s is NULL", role[k]), false;
        }
        int32_t id = kiln__vocab_find(tok, name, strlen(name));
        if (id < 0)
            return kiln__report(KILN_ERR_CORRUPT, OP_LOAD, "%s: no token '%.64s' (options.%s) in the vocabulary", path,
                                name, role[k]),
                   false;
        tok->special[k] = (kiln__special){tok->blob + tok->start[id], tok->len[id], id};
        *names[k] = tok->special[k].text;
    }
    return true;
}

static bool check_options(const kiln_tokenizer_options *o) {
    if (o->max_length < 0 || (o->add_special_tokens && o->max_length > 0 && o->max_length < 3))
        return kiln__report(KILN_ERR_INVALID_ARGUMENT, OP_LOAD,
                            "options.max_length %d: 0 (no limit) or room for a token%s", o->max_length,
                            o->add_special_tokens ? " besides [CLS] and [SEP] (3 at least)" : ""),
               false;
    if (o->max_chars_per_word < 1 || o->max_chars_per_word > KILN__TOKEN_MAX_BYTES)
        return kiln__report(KILN_ERR_INVALID_ARGUMENT, OP_LOAD, "options.max_chars_per_word %d: 1 to %d",
                            o->max_chars_per_word, KILN__TOKEN_MAX_BYTES),
               false;
    if (o->strip_accents < -1 || o->strip_accents > 1)
        return kiln__report(KILN_ERR_INVALID_ARGUMENT, OP_LOAD, "options.strip_accents %d: -1, 0 or 1",
                            o->strip_accents),
               false;
    return true;
}

kiln_tokenizer *kiln_tokenizer_load(const char *vocab_path, kiln_tokenizer_options o) {
    if (!vocab_path) return kiln__report(KILN_ERR_NULL, OP_LOAD, "vocab_path is NULL"), NULL;
    if (!check_options(&o)) return NULL;
    if (!KILN_HAVE_UTF8PROC)
        return kiln__report(KILN_ERR_UNSUPPORTED, OP_LOAD,
                            "kiln was built without utf8proc, which the tokenizer's Unicode rules need "
                            "(install libutf8proc-dev and rebuild)"),
               NULL;
    kiln_tokenizer *tok = calloc(1, sizeof *tok);
    if (tok && !kiln__object_register(tok, KILN__TOKENIZER_KIND)) free(tok), tok = NULL;
    if (!tok) return kiln__report(KILN_ERR_OUT_OF_MEMORY, OP_LOAD, "out of memory"), NULL;
    tok->o = o;
    if (o.strip_accents < 0) tok->o.strip_accents = o.lower_case;
    size_t size = 0;
    tok->blob = kiln__read_small_file(vocab_path, KILN__VOCAB_MAX_BYTES, "a vocabulary", OP_LOAD, &size);
    if (!tok->blob || !split_lines(tok, vocab_path, size) || !build_index(tok, vocab_path) ||
        !find_specials(tok, vocab_path)) {
        kiln_tokenizer_free(tok);
        return NULL;
    }
    return tok;
}

void kiln_tokenizer_free(kiln_tokenizer *tok) {
    if (!tok || kiln__object_retire(tok, KILN__TOKENIZER_KIND, "kiln_tokenizer_free") != KILN_OK) return;
    free(tok->blob), free(tok->start), free(tok->len), free(tok->slots);
    kiln__object_dispose(tok, KILN__TOKENIZER_KIND, "kiln_tokenizer_free");
}

int32_t kiln_tokenizer_vocab_size(const kiln_tokenizer *tok) {
    if (tok) KILN__OBJECT_OR_RETURN(tok, KILN__TOKENIZER_KIND, "kiln_tokenizer_vocab_size", -1);
    return tok ? tok->n : -1;
}

const char *kiln_tokenizer_token(const kiln_tokenizer *tok, int32_t id) {
    static const char OP[] = "kiln_tokenizer_token";
    if (!tok) return kiln__report(KILN_ERR_NULL, OP, "tokenizer is NULL"), NULL;
    KILN__OBJECT_OR_RETURN(tok, KILN__TOKENIZER_KIND, OP, NULL);
    if (id < 0 || id >= tok->n)
        return kiln__report(KILN_ERR_INDEX, OP, "id %d is outside the vocabulary [0, %d)", id, tok->n), NULL;
    return tok->blob + tok->start[id];
}

int32_t kiln_tokenizer_id(const kiln_tokenizer *tok, const char *token, size_t len) {
    static const char OP[] = "kiln_tokenizer_id";
    if (!tok) return kiln__report(KILN_ERR_NULL, OP, "tokenizer is NULL"), -1;
    KILN__OBJECT_OR_RETURN(tok, KILN__TOKENIZER_KIND, OP, -1);
    if (!token) return kiln__report(KILN_ERR_NULL, OP, "token is NULL"), -1;
    int32_t id = kiln__vocab_find(tok, token, len);
    if (id < 0) kiln__report(KILN_ERR_INDEX, OP, "'%.*s' is not in the vocabulary", len > 64 ? 64 : (int)len, token);
    return id;
}
