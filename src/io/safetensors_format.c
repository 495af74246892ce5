/* The safetensors format itself, shared by the reader (safetensors.c) and the writer
 * (safetensors_write.c): the error text helper, kiln's CRC-32 entry, the dtype tags, and the
 * strict parser of the JSON header (exactly the subset the format uses; every length and
 * offset is checked, since the reader treats each file as hostile). */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#if KILN_HAVE_ZLIB
#include <zlib.h>
#endif

#include "io/safetensors-impl.h"

kiln_status kiln__st_fail(kiln_status st, char *why, size_t size, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    if (why && size) vsnprintf(why, size, fmt, ap);
    va_end(ap);
    return st;
}

/* ---- CRC-32 (IEEE, as zlib) ------------------------------------------------------------------ */

static uint32_t crc_update(uint32_t crc, const unsigned char *p, size_t n) {
#if KILN_HAVE_ZLIB
    while (n > 0) {
        uInt part = n > (1u << 30) ? (1u << 30) : (uInt)n;
        crc = (uint32_t)crc32(crc, p, part);
        p += part;
        n -= part;
    }
    return crc;
#else
    uint32_t table[256];
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int k = 0; k < 8; k++) c = c & 1 ? 0xEDB88320u ^ (c >> 1) : c >> 1;
        table[i] = c;
    }
    crc = ~crc;
    for (size_t i = 0; i < n; i++) crc = table[(crc ^ p[i]) & 0xff] ^ (crc >> 8);
    return ~crc;
#endif
}

/* CRC of the file with the 8 bytes at `hole` read as "00000000". */
uint32_t kiln__st_file_crc(const unsigned char *bytes, size_t size, size_t hole, const unsigned char *const *parts,
                         const size_t *part_sizes, int n_parts) {
    static const unsigned char zeros[8] = {'0', '0', '0', '0', '0', '0', '0', '0'};
    uint32_t crc = crc_update(0, bytes, hole);
    crc = crc_update(crc, zeros, 8);
    crc = crc_update(crc, bytes + hole + 8, size - hole - 8);
    for (int i = 0; i < n_parts; i++) crc = crc_update(crc, parts[i], part_sizes[i]);
    return crc;
}

/* ---- dtypes ------------------------------------------------------------------------------ */

static const struct {
    const char *name;
    unsigned size;
    int kiln;
} dtypes[] = {
    {"BOOL", 1, KILN_BOOL}, {"U8", 1, -1},       {"I8", 1, -1},         {"F8_E5M2", 1, -1}, {"F8_E4M3", 1, -1},
    {"I16", 2, -1},         {"U16", 2, -1},      {"F16", 2, KILN_F16},  {"BF16", 2, KILN_BF16}, {"I32", 4, KILN_I32},
    {"U32", 4, -1},         {"F32", 4, KILN_F32}, {"F64", 8, KILN_F64}, {"I64", 8, KILN_I64}, {"U64", 8, -1},
};

const char *kiln__st_dtype_tag(kiln_dtype d) {
    for (size_t i = 0; i < sizeof dtypes / sizeof dtypes[0]; i++)
        if (dtypes[i].kiln == (int)d) return dtypes[i].name;
    return NULL;
}

unsigned kiln__st_dtype_size(const char *tag, int *dtype) {
    *dtype = -1;
    for (size_t k = 0; k < sizeof dtypes / sizeof dtypes[0]; k++)
        if (strcmp(tag, dtypes[k].name) == 0) return *dtype = dtypes[k].kiln, dtypes[k].size;
    return 0;
}

/* ---- the header parser ------------------------------------------------------------------ */

typedef struct {
    const unsigned char *s;
    size_t pos, len;
    char *arena;
    size_t arena_at;
    char *why;
    size_t why_size;
    bool failed;
    size_t crc_at; /* raw position of the "kiln.crc32" value, 0 if absent */
} parser;

static bool bad(parser *p, const char *what) {
    if (!p->failed) kiln__st_fail(KILN_ERR_CORRUPT, p->why, p->why_size, "malformed header at byte %zu: %s", p->pos + 8, what);
    p->failed = true;
    return false;
}

static void skip_ws(parser *p) {
    while (p->pos < p->len && (p->s[p->pos] == ' ' || p->s[p->pos] == '\t' || p->s[p->pos] == '\n' || p->s[p->pos] == '\r'))
        p->pos++;
}

static bool expect(parser *p, char ch) {
    skip_ws(p);
    if (p->pos < p->len && p->s[p->pos] == (unsigned char)ch) {
        p->pos++;
        return true;
    }
    char what[32];
    snprintf(what, sizeof what, "expected '%c'", ch);
    return bad(p, what);
}

/* After a member: true if another follows (','), false at the closing bracket or on error. */
static bool more(parser *p, char close) {
    skip_ws(p);
    if (p->pos < p->len && p->s[p->pos] == ',') {
        p->pos++;
        return true;
    }
    if (p->pos < p->len && p->s[p->pos] == (unsigned char)close) {
        p->pos++;
        return false;
    }
    bad(p, close == '}' ? "expected ',' or '}'" : "expected ',' or ']'");
    return false;
}

static int hex(unsigned char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

static bool read_u4(parser *p, uint32_t *out) {
    if (p->len - p->pos < 4) return bad(p, "truncated \\u escape");
    uint32_t v = 0;
    for (int i = 0; i < 4; i++) {
        int h = hex(p->s[p->pos + (size_t)i]);
        if (h < 0) return bad(p, "bad \\u escape");
        v = v << 4 | (uint32_t)h;
    }
    p->pos += 4;
    *out = v;
    return true;
}

static void put_utf8(parser *p, uint32_t cp) {
    char *o = p->arena + p->arena_at;
    if (cp < 0x80) {
        o[0] = (char)cp, p->arena_at += 1;
    } else if (cp < 0x800) {
        o[0] = (char)(0xC0 | cp >> 6), o[1] = (char)(0x80 | (cp & 0x3F)), p->arena_at += 2;
    } else if (cp < 0x10000) {
        o[0] = (char)(0xE0 | cp >> 12), o[1] = (char)(0x80 | (cp >> 6 & 0x3F)), o[2] = (char)(0x80 | (cp & 0x3F));
        p->arena_at += 3;
    } else {
        o[0] = (char)(0xF0 | cp >> 18), o[1] = (char)(0x80 | (cp >> 12 & 0x3F));
        o[2] = (char)(0x80 | (cp >> 6 & 0x3F)), o[3] = (char)(0x80 | (cp & 0x3F));
        p->arena_at += 4;
    }
}

/* One UTF-8 sequence starting at p->pos (lead byte >= 0x80), copied through. */
static bool utf8_seq(parser *p) {
    const unsigned char *s = p->s + p->pos;
    size_t left = p->len - p->pos;
    unsigned char c = s[0];
    int n = c >= 0xC2 && c <= 0xDF ? 2 : c >= 0xE0 && c <= 0xEF ? 3 : c >= 0xF0 && c <= 0xF4 ? 4 : 0;
    if (!n || left < (size_t)n) return bad(p, "invalid UTF-8");
    uint32_t cp = c & (0x7F >> n);
    for (int i = 1; i < n; i++) {
        if ((s[i] & 0xC0) != 0x80) return bad(p, "invalid UTF-8");
        cp = cp << 6 | (s[i] & 0x3F);
    }
    if ((n == 3 && cp < 0x800) || (n == 4 && (cp < 0x10000 || cp > 0x10FFFF)) || (cp >= 0xD800 && cp <= 0xDFFF))
        return bad(p, "invalid UTF-8");
    memcpy(p->arena + p->arena_at, s, (size_t)n);
    p->arena_at += (size_t)n;
    p->pos += (size_t)n;
    return true;
}

/* A JSON string, decoded into the arena (never longer than its raw form). *raw_at receives
 * the position of its first raw byte, *raw_len the raw length between the quotes. */
static bool parse_string(parser *p, const char **out, size_t *raw_at, size_t *raw_len) {
    if (!expect(p, '"')) return false;
    size_t start = p->pos;
    *out = p->arena + p->arena_at;
    for (;;) {
        if (p->pos >= p->len) return bad(p, "unterminated string");
        unsigned char c = p->s[p->pos];
        if (c == '"') break;
        if (c < 0x20) return bad(p, "control character in a string");
        if (c >= 0x80) {
            if (!utf8_seq(p)) return false;
            continue;
        }
        p->pos++;
        if (c != '\\') {
            p->arena[p->arena_at++] = (char)c;
            continue;
        }
        if (p->pos >= p->len) return bad(p, "unterminated escape");
        unsigned char e = p->s[p->pos++];
        const char *simple = strchr("\"\\/bfnrt", e);
        if (e && simple) {
            static const char decoded[] = "\"\\/\b\f\n\r\t";
            p->arena[p->arena_at++] = decoded[simple - "\"\\/bfnrt"];
            continue;
        }
        if (e != 'u') return bad(p, "bad escape");
        uint32_t cp;
        if (!read_u4(p, &cp)) return false;
        if (cp >= 0xDC00 && cp <= 0xDFFF) return bad(p, "lone low surrogate");
        if (cp >= 0xD800 && cp <= 0xDBFF) {
            uint32_t lo;
            if (p->len - p->pos < 2 || p->s[p->pos] != '\\' || p->s[p->pos + 1] != 'u') return bad(p, "lone high surrogate");
            p->pos += 2;
            if (!read_u4(p, &lo)) return false;
            if (lo < 0xDC00 || lo > 0xDFFF) return bad(p, "bad surrogate pair");
            cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
        }
        if (cp == 0) return bad(p, "NUL in a string");
        put_utf8(p, cp);
    }
    if (raw_at) *raw_at = start;
    if (raw_len) *raw_len = p->pos - start;
    p->pos++; /* closing quote */
    p->arena[p->arena_at++] = '\0';
    return true;
}

/* A non-negative JSON integer (no sign, fraction or exponent; no leading zeros). */
static bool parse_uint(parser *p, uint64_t *out) {
    skip_ws(p);
    size_t start = p->pos;
    uint64_t v = 0;
    while (p->pos < p->len && p->s[p->pos] >= '0' && p->s[p->pos] <= '9') {
        unsigned d = p->s[p->pos] - '0';
        if (v > ((uint64_t)INT64_MAX - d) / 10) return bad(p, "number too large");
        v = v * 10 + d;
        p->pos++;
    }
    if (p->pos == start) return bad(p, "expected a non-negative integer");
    if (p->s[start] == '0' && p->pos - start > 1) return bad(p, "leading zero in a number");
    if (p->pos < p->len && (p->s[p->pos] == '.' || p->s[p->pos] == 'e' || p->s[p->pos] == 'E'))
        return bad(p, "expected an integer");
    *out = v;
    return true;
}

/* [n0, n1, ...] with at most cap entries (one more is reported as too many). */
static bool parse_uint_list(parser *p, uint64_t *vals, int cap, int *n, bool *too_many) {
    *n = 0;
    *too_many = false;
    if (!expect(p, '[')) return false;
    skip_ws(p);
    if (p->pos < p->len && p->s[p->pos] == ']') {
        p->pos++;
        return true;
    }
    do {
        uint64_t v;
        if (!parse_uint(p, &v)) return false;
        if (*n < cap) vals[*n] = v;
        else *too_many = true;
        (*n)++;
    } while (more(p, ']'));
    return !p->failed;
}

static bool parse_tensor(parser *p, kiln__st_tensor *t) {
    bool seen[3] = {false, false, false};
    if (!expect(p, '{')) return false;
    do {
        const char *key;
        if (!parse_string(p, &key, NULL, NULL) || !expect(p, ':')) return false;
        if (strcmp(key, "dtype") == 0 && !seen[0]) {
            seen[0] = true;
            if (!parse_string(p, &t->dtype, NULL, NULL)) return false;
        } else if (strcmp(key, "shape") == 0 && !seen[1]) {
            seen[1] = true;
            uint64_t dims[KILN_MAX_DIMS];
            bool too_many;
            if (!parse_uint_list(p, dims, KILN_MAX_DIMS, &t->ndim, &too_many)) return false;
            if (too_many) t->ndim = KILN_MAX_DIMS + 1;
            for (int d = 0; d < t->ndim && d < KILN_MAX_DIMS; d++) t->shape[d] = (int64_t)dims[d];
        } else if (strcmp(key, "data_offsets") == 0 && !seen[2]) {
            seen[2] = true;
            uint64_t off[2];
            int n;
            bool too_many;
            if (!parse_uint_list(p, off, 2, &n, &too_many)) return false;
            if (n != 2) return bad(p, "data_offsets must have two entries");
            t->begin = off[0];
            t->end = off[1];
        } else {
            return bad(p, "unknown or repeated key in a tensor entry");
        }
    } while (more(p, '}'));
    if (p->failed) return false;
    if (!seen[0] || !seen[1] || !seen[2]) return bad(p, "tensor entry lacks dtype, shape or data_offsets");
    return true;
}

static bool grow(void **arr, int n, int *cap, size_t elem) {
    if (n < *cap) return true;
    int ncap = *cap ? *cap * 2 : 16;
    void *g = realloc(*arr, (size_t)ncap * elem);
    if (!g) return false;
    *arr = g;
    *cap = ncap;
    return true;
}

static kiln_status parse_header(parser *p, kiln__st_file *f) {
    int cap_t = 0, cap_m = 0;
    bool seen_meta = false;
    if (!p->len || p->s[0] != '{') return bad(p, "header does not start with '{'"), KILN_ERR_CORRUPT;
    p->pos = 1;
    skip_ws(p);
    if (p->pos < p->len && p->s[p->pos] == '}') {
        p->pos++;
    } else {
        do {
            const char *key;
            if (!parse_string(p, &key, NULL, NULL) || !expect(p, ':')) break;
            if (strcmp(key, "__metadata__") == 0) {
                if (seen_meta) {
                    bad(p, "__metadata__ appears twice");
                    break;
                }
                seen_meta = true;
                if (!expect(p, '{')) break;
                skip_ws(p);
                if (p->pos < p->len && p->s[p->pos] == '}') {
                    p->pos++;
                    continue;
                }
                do {
                    kiln__st_meta m;
                    size_t at, len;
                    if (!parse_string(p, &m.key, NULL, NULL) || !expect(p, ':')) break;
                    skip_ws(p);
                    if (p->pos >= p->len || p->s[p->pos] != '"') {
                        bad(p, "metadata values must be strings");
                        break;
                    }
                    if (!parse_string(p, &m.value, &at, &len)) break;
                    if (strcmp(m.key, KILN__ST_CRC_KEY) == 0) {
                        if (len != 8 || p->crc_at) {
                            bad(p, "bad " KILN__ST_CRC_KEY " entry");
                            break;
                        }
                        p->crc_at = at + 8; /* file position */
                    }
                    if (!grow((void **)&f->meta, f->n_meta, &cap_m, sizeof *f->meta)) return KILN_ERR_OUT_OF_MEMORY;
                    f->meta[f->n_meta++] = m;
                } while (more(p, '}'));
                if (p->failed) break;
                continue;
            }
            if (!grow((void **)&f->tensors, f->n_tensors, &cap_t, sizeof *f->tensors)) return KILN_ERR_OUT_OF_MEMORY;
            kiln__st_tensor *t = &f->tensors[f->n_tensors];
            memset(t, 0, sizeof *t);
            t->name = key;
            if (!parse_tensor(p, t)) break;
            f->n_tensors++;
        } while (more(p, '}'));
    }
    if (p->failed) return KILN_ERR_CORRUPT;
    skip_ws(p); /* the padding */
    if (p->pos != p->len) return bad(p, "bytes after the header object"), KILN_ERR_CORRUPT;
    return KILN_OK;
}


kiln_status kiln__st_parse_header(const unsigned char *hdr, size_t n, kiln__st_file *f, size_t *crc_at, char *why,
                                  size_t why_size) {
    parser p = {.s = hdr, .len = n, .arena = f->strings, .why = why, .why_size = why_size};
    kiln_status st = parse_header(&p, f);
    *crc_at = p.crc_at;
    return st;
}

/* Once f->bytes holds the whole file: its CRC against kiln's entry, if it has one. */
kiln_status kiln__st_check_crc(const kiln__st_file *f, size_t crc_at, char *why, size_t why_size) {
    if (!crc_at) return KILN_OK;
    uint32_t want = 0;
    for (int i = 0; i < 8; i++) {
        int h = hex(f->bytes[crc_at + (size_t)i]);
        if (h < 0) return kiln__st_fail(KILN_ERR_CORRUPT, why, why_size, KILN__ST_CRC_KEY " is not 8 hex digits");
        want = want << 4 | (uint32_t)h;
    }
    if (kiln__st_file_crc(f->bytes, f->size, crc_at, NULL, NULL, 0) != want)
        return kiln__st_fail(KILN_ERR_CORRUPT, why, why_size, "checksum mismatch: the file is damaged");
    return KILN_OK;
}

