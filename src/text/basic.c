/* BERT's basic tokenization, streamed over the text so that truncation can stop early and no
 * copy of the whole text is made. It follows the reference normaliser's order: drop NUL, U+FFFD
 * and control characters and turn white space into a word break; put each CJK ideograph in a
 * word of its own; decompose (NFD) and drop nonspacing marks (Mn) when stripping accents; lower
 * the case; then a punctuation character (Unicode P*, or any ASCII symbol) is a word of its own.
 * Unicode data (categories, decompositions, case, combining classes) come from utf8proc. */
#include "text/text-impl.h"

#if KILN_HAVE_UTF8PROC
#include <utf8proc.h>

typedef struct {
    const kiln_tokenizer *tok;
    kiln__ids *ids;
    const char *op;
    size_t n;                              /* characters in the current word (stored or not) */
    int32_t cps[KILN__TOKEN_MAX_BYTES];    /* its first max_chars_per_word characters */
} word;

static int category(int32_t cp) { return utf8proc_category(cp); }

/* \t \n \r are white space, not control characters, as in BERT. */
static bool is_control(int32_t cp) {
    if (cp == '\t' || cp == '\n' || cp == '\r') return false;
    int c = category(cp);
    return c == UTF8PROC_CATEGORY_CC || c == UTF8PROC_CATEGORY_CF || c == UTF8PROC_CATEGORY_CO ||
           c == UTF8PROC_CATEGORY_CS;
}

static bool is_whitespace(int32_t cp) {
    if (cp == ' ' || cp == '\t' || cp == '\n' || cp == '\r') return true;
    int c = category(cp);
    return c == UTF8PROC_CATEGORY_ZS || c == UTF8PROC_CATEGORY_ZL || c == UTF8PROC_CATEGORY_ZP;
}

/* Every ASCII character that is neither a letter, a digit, a space nor a control counts. */
static bool is_punctuation(int32_t cp) {
    if ((cp >= 33 && cp <= 47) || (cp >= 58 && cp <= 64) || (cp >= 91 && cp <= 96) || (cp >= 123 && cp <= 126))
        return true;
    int c = category(cp);
    return c >= UTF8PROC_CATEGORY_PC && c <= UTF8PROC_CATEGORY_PO;
}

/* The CJK Unified Ideographs blocks and their extensions and compatibility blocks, as BERT
 * defines them (Hangul, kana and others are written with spaces and are left alone). */
static bool is_cjk(int32_t cp) {
    return (cp >= 0x4E00 && cp <= 0x9FFF) || (cp >= 0x3400 && cp <= 0x4DBF) || (cp >= 0x20000 && cp <= 0x2A6DF) ||
           (cp >= 0x2A700 && cp <= 0x2B73F) || (cp >= 0x2B740 && cp <= 0x2B81F) || (cp >= 0x2B820 && cp <= 0x2CEAF) ||
           (cp >= 0xF900 && cp <= 0xFAFF) || (cp >= 0x2F800 && cp <= 0x2FA1F);
}

/* NFD puts runs of combining marks in canonical order; only marks that survive (those that are
 * not Mn) can still be out of order here, and only within one word. */
static void canonical_order(int32_t *cps, size_t n) {
    for (size_t i = 1; i < n; i++) {
        int32_t c = cps[i];
        int cc = utf8proc_get_property(c)->combining_class;
        size_t j = i;
        while (cc && j > 0) {
            int prev = utf8proc_get_property(cps[j - 1])->combining_class;
            if (prev <= cc) break;
            cps[j] = cps[j - 1];
            j--;
        }
        cps[j] = c;
    }
}

static bool flush(word *w) {
    if (!w->n) return true;
    size_t stored = w->n < (size_t)w->tok->o.max_chars_per_word ? w->n : (size_t)w->tok->o.max_chars_per_word;
    if (w->tok->o.strip_accents) canonical_order(w->cps, stored);
    bool ok = kiln__wordpiece(w->tok, w->cps, w->n, w->ids, w->op);
    w->n = 0;
    return ok;
}

static void add(word *w, int32_t cp) {
    if (w->n < (size_t)w->tok->o.max_chars_per_word) w->cps[w->n] = cp;
    w->n++;
}

/* A normalised character: punctuation is a word of its own, anything else joins the word. */
static bool take(word *w, int32_t cp) {
    if (!is_punctuation(cp)) return add(w, cp), true;
    if (!flush(w)) return false;
    add(w, cp);
    return flush(w);
}

/* Accent stripping and case for one character of the text, then take() on each result. */
static bool normalise(word *w, int32_t cp) {
    const kiln_tokenizer_options *o = &w->tok->o;
    int32_t parts[8];
    utf8proc_ssize_t n = 1;
    parts[0] = cp;
    if (o->strip_accents) {
        int boundclass = 0;
        n = utf8proc_decompose_char(cp, parts, 8, UTF8PROC_DECOMPOSE, &boundclass);
        if (n < 1 || n > 8) parts[0] = cp, n = 1; /* never: canonical decompositions are short */
    }
    for (utf8proc_ssize_t k = 0; k < n; k++) {
        int32_t c = parts[k];
        if (o->strip_accents && category(c) == UTF8PROC_CATEGORY_MN) continue;
        if (o->lower_case) {
            if (c == 0x130) { /* the one full lower-case mapping of two characters: i + dot above */
                if (!take(w, 'i')) return false;
                c = 0x307;
            } else {
                c = utf8proc_tolower(c);
            }
        }
        if (!take(w, c)) return false;
    }
    return true;
}

bool kiln__basic_tokenize(const kiln_tokenizer *tok, const char *s, size_t len, kiln__ids *ids, const char *op) {
    word w = {.tok = tok, .ids = ids, .op = op};
    const unsigned char *u = (const unsigned char *)s;
    size_t at = 0;
    while (at < len && ids->n < ids->limit) {
        int32_t cp;
        if (kiln__utf8_next(u, len, &at, &cp)) /* never: the encoder checked the text */
            return kiln__report(KILN_ERR_INTERNAL, op, "invalid UTF-8 at byte %zu after the check", at), false;
        if (cp == 0 || cp == 0xFFFD || is_control(cp)) continue;
        bool ok;
        if (is_whitespace(cp)) ok = flush(&w);
        else if (tok->o.split_chinese_chars && is_cjk(cp)) ok = flush(&w) && normalise(&w, cp) && flush(&w);
        else ok = normalise(&w, cp);
        if (!ok) return false;
    }
    return ids->n >= ids->limit || flush(&w);
}

#else /* without utf8proc no tokenizer loads (vocab.c), so this is never reached */
bool kiln__basic_tokenize(const kiln_tokenizer *tok, const char *s, size_t len, kiln__ids *ids, const char *op) {
    return kiln__report(KILN_ERR_UNSUPPORTED, op, "kiln was built without utf8proc"), false;
}
#endif
