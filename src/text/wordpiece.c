/* WordPiece: a word becomes the longest vocabulary token that starts it, then the longest
 * "##"-prefixed token that continues it, and so on; a word that cannot be covered, or that is
 * longer than max_chars_per_word, is one unknown token (BERT's WordpieceTokenizer). */
#include <string.h>

#include "text/text-impl.h"

#define PREFIX "##"
#define PREFIX_LEN 2

bool kiln__wordpiece(const kiln_tokenizer *tok, const int32_t *cps, size_t n, kiln__ids *ids, const char *op) {
    int32_t unk = tok->special[KILN__UNK].id;
    if (n == 0) return true;
    if (n > (size_t)tok->o.max_chars_per_word) return kiln__ids_push(ids, unk, op);
    /* The word's UTF-8 with the byte offset of each character; a candidate is the slice
     * [at[start], at[end]), after "##" when it continues the word (copied once per start). */
    char word[4 * KILN__TOKEN_MAX_BYTES], cand[PREFIX_LEN + 4 * KILN__TOKEN_MAX_BYTES];
    size_t at[KILN__TOKEN_MAX_BYTES + 1];
    if (n > KILN__TOKEN_MAX_BYTES) return kiln__ids_push(ids, unk, op); /* never: options cap it lower */
    at[0] = 0;
    for (size_t k = 0; k < n; k++) at[k + 1] = at[k] + kiln__utf8_put(cps[k], word + at[k]);
    memcpy(cand, PREFIX, PREFIX_LEN);

    size_t first = ids->n;
    for (size_t start = 0; start < n;) {
        const char *from = word + at[start];
        size_t extra = 0;
        if (start) {
            memcpy(cand + PREFIX_LEN, from, at[n] - at[start]);
            from = cand, extra = PREFIX_LEN;
        }
        int32_t found = -1;
        size_t end = n;
        for (; end > start; end--) {
            size_t len = extra + at[end] - at[start];
            if (len > tok->longest) continue; /* no token that long: skip the lookup */
            if ((found = kiln__vocab_find(tok, from, len)) >= 0) break;
        }
        if (found < 0) { /* the whole word is unknown: take back its pieces */
            ids->n = first;
            return kiln__ids_push(ids, unk, op);
        }
        if (!kiln__ids_push(ids, found, op)) return false;
        start = end;
    }
    return true;
}
