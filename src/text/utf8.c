/* Strict UTF-8 for the tokenizer: decoding that names what is wrong (so a caller can find the
 * bad byte), encoding, and the growable id list. Hand-written rather than utf8proc's so that a
 * build without utf8proc still rejects the same inputs with the same messages. */
#include <stdint.h>
#include <stdlib.h>

#include "text/text-impl.h"

const char *kiln__utf8_next(const unsigned char *s, size_t len, size_t *at, int32_t *cp) {
    size_t i = *at;
    unsigned c = s[i];
    if (c < 0x80) {
        *cp = (int32_t)c, *at = i + 1;
        return NULL;
    }
    size_t need;
    uint32_t v, min;
    if (c >= 0xC2 && c <= 0xDF) need = 1, v = c & 0x1F, min = 0x80;
    else if (c >= 0xE0 && c <= 0xEF) need = 2, v = c & 0x0F, min = 0x800;
    else if (c >= 0xF0 && c <= 0xF4) need = 3, v = c & 0x07, min = 0x10000;
    else if (c == 0xC0 || c == 0xC1) return "overlong encoding";
    else if (c < 0xC0) return "continuation byte without a lead byte";
    else return "byte 0xF5..0xFF never appears in UTF-8";
    for (size_t k = 1; k <= need; k++) {
        if (i + k >= len) return "sequence truncated by the end of the text";
        if ((s[i + k] & 0xC0) != 0x80) return "sequence truncated by a byte that does not continue it";
        v = (v << 6) | (s[i + k] & 0x3F);
    }
    if (v < min) return "overlong encoding";
    if (v >= 0xD800 && v <= 0xDFFF) return "UTF-16 surrogate code point";
    if (v > 0x10FFFF) return "code point past U+10FFFF";
    *cp = (int32_t)v, *at = i + need + 1;
    return NULL;
}

kiln_status kiln__utf8_check(kiln_status status, const char *op, const char *what, const char *s, size_t len) {
    const unsigned char *u = (const unsigned char *)s;
    size_t at = 0;
    int32_t cp;
    while (at < len) {
        if (u[at] < 0x80) { /* ASCII runs are most text: skip the decoder */
            at++;
            continue;
        }
        const char *why = kiln__utf8_next(u, len, &at, &cp);
        if (why)
            return kiln__report(status, op, "%s is not valid UTF-8 at byte %zu (0x%02X): %s", what,
                                at, u[at], why);
    }
    return KILN_OK;
}

size_t kiln__utf8_put(int32_t cp, char *out) {
    uint32_t c = (uint32_t)cp;
    if (c < 0x80) return out[0] = (char)c, 1;
    if (c < 0x800) return out[0] = (char)(0xC0 | c >> 6), out[1] = (char)(0x80 | (c & 0x3F)), 2;
    if (c < 0x10000) {
        out[0] = (char)(0xE0 | c >> 12), out[1] = (char)(0x80 | ((c >> 6) & 0x3F));
        out[2] = (char)(0x80 | (c & 0x3F));
        return 3;
    }
    out[0] = (char)(0xF0 | c >> 18), out[1] = (char)(0x80 | ((c >> 12) & 0x3F));
    out[2] = (char)(0x80 | ((c >> 6) & 0x3F)), out[3] = (char)(0x80 | (c & 0x3F));
    return 4;
}

bool kiln__ids_push(kiln__ids *ids, int32_t id, const char *op) {
    if (ids->n < ids->limit) {
        if (ids->n == ids->cap) {
            size_t cap = ids->cap ? 2 * ids->cap : 64;
            if (cap > ids->limit) cap = ids->limit;
            int32_t *v = cap <= SIZE_MAX / sizeof *v ? realloc(ids->v, cap * sizeof *v) : NULL;
            if (!v) {
                kiln__report(KILN_ERR_OUT_OF_MEMORY, op, "out of memory for %zu token ids", cap);
                return false;
            }
            ids->v = v, ids->cap = cap;
        }
        ids->v[ids->n] = id;
    }
    ids->n++;
    return true;
}
