/* A reader of flat JSON objects (models-impl.h): recursive descent over RFC 8259 with a depth
 * bound, keeping only the top level's scalar members. Used for config.json files, which are
 * read from disk and so hostile: it never reads past len and never allocates. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "models/models-impl.h"

typedef struct {
    const char *s;
    size_t n, at;
    char *why;
    size_t why_size;
    bool failed;
} reader;

static bool fail(reader *r, const char *what) {
    if (!r->failed) snprintf(r->why, r->why_size, "%s at byte %zu", what, r->at);
    r->failed = true;
    return false;
}

static void skip_space(reader *r) {
    while (r->at < r->n && (r->s[r->at] == ' ' || r->s[r->at] == '\t' || r->s[r->at] == '\n' || r->s[r->at] == '\r'))
        r->at++;
}

static bool literal(reader *r, const char *word) {
    size_t k = strlen(word);
    if (r->n - r->at < k || memcmp(r->s + r->at, word, k) != 0) return fail(r, "invalid literal");
    r->at += k;
    return true;
}

static int hex4(reader *r) {
    if (r->n - r->at < 4) return fail(r, "truncated \\u escape"), -1;
    int v = 0;
    for (int i = 0; i < 4; i++) {
        char c = r->s[r->at++];
        int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
        if (d < 0) return fail(r, "bad \\u escape"), -1;
        v = v * 16 + d;
    }
    return v;
}

/* Appends byte c to out (cap bytes with the NUL) unless full; *len counts every byte. */
static void put(char *out, size_t cap, size_t *len, char c) {
    if (out && *len + 1 < cap) out[*len] = c, out[*len + 1] = 0;
    (*len)++;
}

/* A string at r->at (the opening quote), decoded into out (may be NULL). *len: decoded bytes. */
static bool string(reader *r, char *out, size_t cap, size_t *len) {
    *len = 0;
    if (out && cap) out[0] = 0;
    r->at++; /* the quote */
    for (;;) {
        if (r->at >= r->n) return fail(r, "unterminated string");
        unsigned char c = (unsigned char)r->s[r->at++];
        if (c == '"') return true;
        if (c < 0x20) return fail(r, "control character in a string");
        if (c != '\\') {
            put(out, cap, len, (char)c);
            continue;
        }
        if (r->at >= r->n) return fail(r, "unterminated string");
        char e = r->s[r->at++];
        const char *from = "\"\\/bfnrt", *to = "\"\\/\b\f\n\r\t";
        const char *p = e ? strchr(from, e) : NULL;
        if (p) {
            put(out, cap, len, to[p - from]);
            continue;
        }
        if (e != 'u') return fail(r, "bad escape");
        long cp = hex4(r);
        if (cp < 0) return false;
        if (cp >= 0xD800 && cp <= 0xDBFF) { /* a high surrogate needs its low half */
            if (r->n - r->at < 2 || r->s[r->at] != '\\' || r->s[r->at + 1] != 'u') return fail(r, "lone surrogate");
            r->at += 2;
            long lo = hex4(r);
            if (lo < 0) return false;
            if (lo < 0xDC00 || lo > 0xDFFF) return fail(r, "lone surrogate");
            cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
        } else if (cp >= 0xDC00 && cp <= 0xDFFF) {
            return fail(r, "lone surrogate");
        }
        if (cp < 0x80) {
            put(out, cap, len, (char)cp);
        } else if (cp < 0x800) {
            put(out, cap, len, (char)(0xC0 | cp >> 6)), put(out, cap, len, (char)(0x80 | (cp & 0x3F)));
        } else if (cp < 0x10000) {
            put(out, cap, len, (char)(0xE0 | cp >> 12)), put(out, cap, len, (char)(0x80 | ((cp >> 6) & 0x3F)));
            put(out, cap, len, (char)(0x80 | (cp & 0x3F)));
        } else {
            put(out, cap, len, (char)(0xF0 | cp >> 18)), put(out, cap, len, (char)(0x80 | ((cp >> 12) & 0x3F)));
            put(out, cap, len, (char)(0x80 | ((cp >> 6) & 0x3F))), put(out, cap, len, (char)(0x80 | (cp & 0x3F)));
        }
    }
}

/* A number in JSON's grammar (no leading zeros, no '+', no hex, inf or nan) into *out. */
static bool number(reader *r, double *out) {
    size_t start = r->at;
    const char *s = r->s;
    if (r->at < r->n && s[r->at] == '-') r->at++;
    if (r->at >= r->n || s[r->at] < '0' || s[r->at] > '9') return fail(r, "invalid number");
    if (s[r->at] == '0') r->at++;
    else
        while (r->at < r->n && s[r->at] >= '0' && s[r->at] <= '9') r->at++;
    if (r->at < r->n && s[r->at] == '.') {
        r->at++;
        if (r->at >= r->n || s[r->at] < '0' || s[r->at] > '9') return fail(r, "invalid number");
        while (r->at < r->n && s[r->at] >= '0' && s[r->at] <= '9') r->at++;
    }
    if (r->at < r->n && (s[r->at] == 'e' || s[r->at] == 'E')) {
        r->at++;
        if (r->at < r->n && (s[r->at] == '+' || s[r->at] == '-')) r->at++;
        if (r->at >= r->n || s[r->at] < '0' || s[r->at] > '9') return fail(r, "invalid number");
        while (r->at < r->n && s[r->at] >= '0' && s[r->at] <= '9') r->at++;
    }
    char buf[128];
    size_t k = r->at - start;
    if (k >= sizeof buf) return r->at = start, fail(r, "number too long");
    memcpy(buf, s + start, k);
    buf[k] = 0;
    errno = 0;
    double v = strtod(buf, NULL);
    if (!isfinite(v)) return r->at = start, fail(r, "number out of range");
    *out = v;
    return true;
}

static bool value(reader *r, int depth, kiln__json_member *keep);

/* An array or object at r->at, checked and dropped. */
static bool container(reader *r, int depth) {
    if (depth >= KILN__JSON_MAX_DEPTH) return fail(r, "nesting too deep");
    bool object = r->s[r->at++] == '{';
    char close = object ? '}' : ']';
    skip_space(r);
    if (r->at < r->n && r->s[r->at] == close) return r->at++, true;
    for (;;) {
        skip_space(r);
        if (object) {
            size_t len;
            if (r->at >= r->n || r->s[r->at] != '"') return fail(r, "expected a key");
            if (!string(r, NULL, 0, &len)) return false;
            skip_space(r);
            if (r->at >= r->n || r->s[r->at] != ':') return fail(r, "expected ':'");
            r->at++;
        }
        if (!value(r, depth + 1, NULL)) return false;
        skip_space(r);
        if (r->at >= r->n) return fail(r, "unterminated container");
        char c = r->s[r->at++];
        if (c == close) return true;
        if (c != ',') return r->at--, fail(r, "expected ',' or the container's end");
    }
}

/* Any value; a scalar is stored into keep (if not NULL). */
static bool value(reader *r, int depth, kiln__json_member *keep) {
    skip_space(r);
    if (r->at >= r->n) return fail(r, "expected a value");
    kiln__json_member dummy;
    kiln__json_member *m = keep ? keep : &dummy;
    m->type = KILN__JSON_OTHER;
    char c = r->s[r->at];
    size_t len;
    switch (c) {
    case '{':
    case '[': return container(r, depth);
    case '"':
        if (!string(r, keep ? m->string : NULL, sizeof m->string, &len)) return false;
        m->type = len < sizeof m->string ? KILN__JSON_STRING : KILN__JSON_OTHER;
        return true;
    case 't': m->type = KILN__JSON_BOOL, m->boolean = true; return literal(r, "true");
    case 'f': m->type = KILN__JSON_BOOL, m->boolean = false; return literal(r, "false");
    case 'n': m->type = KILN__JSON_NULL; return literal(r, "null");
    default: m->type = KILN__JSON_NUMBER; return number(r, &m->number);
    }
}

bool kiln__json_parse_flat(const char *text, size_t len, kiln__json_member *out, int cap, int *count, char *why,
                           size_t why_size) {
    reader r = {.s = text, .n = text ? len : 0, .why = why, .why_size = why_size};
    *count = 0;
    if (why_size) why[0] = 0;
    skip_space(&r);
    if (r.at >= r.n || r.s[r.at] != '{') return fail(&r, "expected an object");
    r.at++;
    skip_space(&r);
    bool empty = r.at < r.n && r.s[r.at] == '}';
    if (empty) r.at++;
    while (!empty) {
        skip_space(&r);
        if (r.at >= r.n || r.s[r.at] != '"') return fail(&r, "expected a key");
        char key[KILN__JSON_KEY_MAX];
        size_t key_len, key_at = r.at;
        if (!string(&r, key, sizeof key, &key_len)) return false;
        bool kept = key_len < sizeof key && memchr(key, 0, key_len) == NULL;
        if (kept && kiln__json_find(out, *count, key)) return r.at = key_at, fail(&r, "duplicate key");
        if (kept && *count >= cap) return r.at = key_at, fail(&r, "too many members");
        skip_space(&r);
        if (r.at >= r.n || r.s[r.at] != ':') return fail(&r, "expected ':'");
        r.at++;
        kiln__json_member *m = kept ? &out[*count] : NULL;
        if (!value(&r, 1, m)) return false;
        if (m) memcpy(m->key, key, sizeof key), (*count)++;
        skip_space(&r);
        if (r.at >= r.n) return fail(&r, "unterminated object");
        char c = r.s[r.at++];
        if (c == '}') break;
        if (c != ',') return r.at--, fail(&r, "expected ',' or '}'");
    }
    skip_space(&r);
    if (r.at != r.n) return fail(&r, "text after the object");
    return true;
}

const kiln__json_member *kiln__json_find(const kiln__json_member *m, int count, const char *key) {
    for (int i = 0; i < count; i++)
        if (strcmp(m[i].key, key) == 0) return &m[i];
    return NULL;
}
