/* Reading and writing safetensors files. The reader treats the file as hostile: every
 * length and offset is checked before use, and the JSON header is parsed by a small strict
 * parser for exactly the subset the format uses. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#if KILN_HAVE_ZLIB
#include <zlib.h>
#endif

#include "core/core-impl.h"
#include "core/text.h"
#include "io/safetensors.h"

#define MAX_HEADER ((uint64_t)100 << 20) /* the reference implementation's limit */
#define CRC_KEY "kiln.crc32"

static kiln_status fail(kiln_status st, char *why, size_t size, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static kiln_status fail(kiln_status st, char *why, size_t size, const char *fmt, ...) {
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
static uint32_t file_crc(const unsigned char *bytes, size_t size, size_t hole, const unsigned char *const *parts,
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

static const char *kiln_dtype_tag(kiln_dtype d) {
    for (size_t i = 0; i < sizeof dtypes / sizeof dtypes[0]; i++)
        if (dtypes[i].kiln == (int)d) return dtypes[i].name;
    return NULL;
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
    if (!p->failed) fail(KILN_ERR_CORRUPT, p->why, p->why_size, "malformed header at byte %zu: %s", p->pos + 8, what);
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
                    if (strcmp(m.key, CRC_KEY) == 0) {
                        if (len != 8 || p->crc_at) {
                            bad(p, "bad " CRC_KEY " entry");
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

/* ---- checks after parsing --------------------------------------------------------------- */

static int cmp_names(const void *a, const void *b) {
    return strcmp(((const kiln__st_tensor *)a)->name, ((const kiln__st_tensor *)b)->name);
}

static int cmp_keys(const void *a, const void *b) {
    return strcmp(((const kiln__st_meta *)a)->key, ((const kiln__st_meta *)b)->key);
}

/* Sorts tensors and metadata by name (so lookups can bisect) and rejects repeated names:
 * O(n log n), where comparing each new key with all before it took minutes on 100k keys. */
static kiln_status sort_names(kiln__st_file *f, char *why, size_t why_size) {
    if (f->n_tensors > 1) qsort(f->tensors, (size_t)f->n_tensors, sizeof *f->tensors, cmp_names);
    if (f->n_meta > 1) qsort(f->meta, (size_t)f->n_meta, sizeof *f->meta, cmp_keys);
    for (int i = 1; i < f->n_tensors; i++)
        if (strcmp(f->tensors[i - 1].name, f->tensors[i].name) == 0)
            return fail(KILN_ERR_CORRUPT, why, why_size, "tensor '%s' appears twice", f->tensors[i].name);
    for (int i = 1; i < f->n_meta; i++)
        if (strcmp(f->meta[i - 1].key, f->meta[i].key) == 0)
            return fail(KILN_ERR_CORRUPT, why, why_size, "metadata key '%s' appears twice", f->meta[i].key);
    return KILN_OK;
}

static int cmp_offsets(const void *a, const void *b) {
    const kiln__st_tensor *x = *(const kiln__st_tensor *const *)a, *y = *(const kiln__st_tensor *const *)b;
    if (x->begin != y->begin) return x->begin < y->begin ? -1 : 1;
    return x->end < y->end ? -1 : x->end > y->end;
}

static kiln_status check_tensors(kiln__st_file *f, char *why, size_t why_size) {
    for (int i = 0; i < f->n_tensors; i++) {
        kiln__st_tensor *t = &f->tensors[i];
        unsigned es = 0;
        t->kiln_dtype = -1;
        for (size_t k = 0; k < sizeof dtypes / sizeof dtypes[0]; k++)
            if (strcmp(t->dtype, dtypes[k].name) == 0) es = dtypes[k].size, t->kiln_dtype = dtypes[k].kiln;
        if (!es) return fail(KILN_ERR_CORRUPT, why, why_size, "tensor '%s' has unknown dtype '%s'", t->name, t->dtype);
        if (t->ndim > KILN_MAX_DIMS)
            return fail(KILN_ERR_UNSUPPORTED, why, why_size, "tensor '%s' has more than %d dims", t->name, KILN_MAX_DIMS);
        uint64_t bytes = es;
        for (int d = 0; d < t->ndim; d++) {
            uint64_t dim = (uint64_t)t->shape[d];
            if (dim && bytes > (uint64_t)INT64_MAX / dim)
                return fail(KILN_ERR_CORRUPT, why, why_size, "tensor '%s' is impossibly large", t->name);
            bytes *= dim;
        }
        if (t->end < t->begin || t->end - t->begin != bytes)
            return fail(KILN_ERR_CORRUPT, why, why_size, "tensor '%s' has %llu bytes of data, its dtype and shape need %llu",
                        t->name, (unsigned long long)(t->end - t->begin), (unsigned long long)bytes);
    }
    kiln_status st = sort_names(f, why, why_size);
    if (st != KILN_OK) return st;
    const kiln__st_tensor **order = malloc(sizeof *order * (size_t)(f->n_tensors ? f->n_tensors : 1));
    if (!order) return fail(KILN_ERR_OUT_OF_MEMORY, why, why_size, "cannot allocate the tensor index");
    for (int i = 0; i < f->n_tensors; i++) order[i] = &f->tensors[i];
    qsort(order, (size_t)f->n_tensors, sizeof *order, cmp_offsets);
    uint64_t at = 0;
    for (int i = 0; i < f->n_tensors && st == KILN_OK; i++) {
        if (order[i]->begin != at)
            st = fail(KILN_ERR_CORRUPT, why, why_size, "tensor '%s' starts at byte %llu of the data, expected %llu",
                      order[i]->name, (unsigned long long)order[i]->begin, (unsigned long long)at);
        at = order[i]->end;
    }
    if (st == KILN_OK && at != f->data_len)
        st = fail(KILN_ERR_CORRUPT, why, why_size, "tensors cover %llu bytes of data, the file holds %zu",
                  (unsigned long long)at, f->data_len);
    free(order);
    return st;
}

/* The header length from the first 8 bytes, checked against the file's size and the limit. */
static kiln_status header_length(const unsigned char *first, uint64_t file_size, uint64_t *n, char *why, size_t why_size) {
    if (file_size < 8)
        return fail(KILN_ERR_CORRUPT, why, why_size, "file has %llu bytes, fewer than the 8 of the header length",
                    (unsigned long long)file_size);
    *n = 0;
    for (int i = 7; i >= 0; i--) *n = *n << 8 | first[i];
    if (*n > file_size - 8 || *n > MAX_HEADER)
        return fail(KILN_ERR_CORRUPT, why, why_size, "header length %llu does not fit a file of %llu bytes",
                    (unsigned long long)*n, (unsigned long long)file_size);
    return KILN_OK;
}

/* Parses the n header bytes at hdr (file position 8) and checks every tensor against the
 * data a file of file_size bytes holds, before any of that data is read. */
static kiln_status parse_checked(kiln__st_file *f, const unsigned char *hdr, size_t n, uint64_t file_size,
                                 size_t *crc_at, char *why, size_t why_size) {
    f->data_len = (size_t)(file_size - 8 - n);
    f->strings = malloc(n + 1);
    if (!f->strings) return fail(KILN_ERR_OUT_OF_MEMORY, why, why_size, "cannot allocate the header");
    parser p = {.s = hdr, .len = n, .arena = f->strings, .why = why, .why_size = why_size};
    kiln_status st = parse_header(&p, f);
    if (st == KILN_ERR_OUT_OF_MEMORY) fail(st, why, why_size, "cannot allocate the header index");
    if (st == KILN_OK) st = check_tensors(f, why, why_size);
    *crc_at = p.crc_at;
    return st;
}

/* Once f->bytes holds the whole file: its CRC against kiln's entry, if it has one. */
static kiln_status check_crc(const kiln__st_file *f, size_t crc_at, char *why, size_t why_size) {
    if (!crc_at) return KILN_OK;
    uint32_t want = 0;
    for (int i = 0; i < 8; i++) {
        int h = hex(f->bytes[crc_at + (size_t)i]);
        if (h < 0) return fail(KILN_ERR_CORRUPT, why, why_size, CRC_KEY " is not 8 hex digits");
        want = want << 4 | (uint32_t)h;
    }
    if (file_crc(f->bytes, f->size, crc_at, NULL, NULL, 0) != want)
        return fail(KILN_ERR_CORRUPT, why, why_size, "checksum mismatch: the file is damaged");
    return KILN_OK;
}

static bool read_at(int fd, unsigned char *buf, size_t n, uint64_t at) {
    while (n > 0) {
        ssize_t got = pread(fd, buf, n > ((size_t)1 << 30) ? (size_t)1 << 30 : n, (off_t)at);
        if (got < 0 && errno == EINTR) continue;
        if (got <= 0) return false;
        buf += got, n -= (size_t)got, at += (uint64_t)got;
    }
    return true;
}

static kiln_status open_regular(const char *path, int *fd, uint64_t *size, char *why, size_t why_size) {
    const char *what = NULL;
    *fd = kiln__open_regular(path, size, &what);
    return *fd >= 0 ? KILN_OK : fail(KILN_ERR_IO, why, why_size, "cannot open '%s': %s", path, what);
}

/* The whole file mapped read-only in place of the copy that f->bytes holds so far (its header,
 * already checked): true, or false with f unchanged. */
static bool map_file(int fd, uint64_t size, kiln__st_file *f) {
    void *m = mmap(NULL, (size_t)size, PROT_READ, MAP_PRIVATE | MAP_POPULATE, fd, 0);
    if (m == MAP_FAILED) return false;
    free(f->bytes);
    f->bytes = m;
    f->size = (size_t)size;
    f->mapped = true;
    return true;
}

static kiln_status st_read(const char *path, kiln__st_file *f, bool map, char *why, size_t why_size) {
    memset(f, 0, sizeof *f);
    int fd = -1;
    uint64_t size = 0, n = 0;
    size_t crc_at = 0;
    kiln_status st = open_regular(path, &fd, &size, why, why_size);
    if (st != KILN_OK) return st;
    unsigned char first[8] = {0};
    if (size >= 8 && !read_at(fd, first, 8, 0)) st = fail(KILN_ERR_IO, why, why_size, "cannot read '%s'", path);
    if (st == KILN_OK) st = header_length(first, size, &n, why, why_size);
    if (st == KILN_OK && size > SIZE_MAX / 2)
        st = fail(KILN_ERR_OUT_OF_MEMORY, why, why_size, "'%s' is too large to load", path);
    /* the header first: the data is read only once every tensor in it is known to fit */
    if (st == KILN_OK && !(f->bytes = malloc(8 + (size_t)n)))
        st = fail(KILN_ERR_OUT_OF_MEMORY, why, why_size, "cannot allocate the header");
    if (st == KILN_OK && !read_at(fd, f->bytes + 8, (size_t)n, 8))
        st = fail(KILN_ERR_IO, why, why_size, "cannot read '%s'", path);
    if (st == KILN_OK) {
        memcpy(f->bytes, first, 8);
        st = parse_checked(f, f->bytes + 8, (size_t)n, size, &crc_at, why, why_size);
    }
    if (st == KILN_OK && map && size > 0 && map_file(fd, size, f)) {
        /* mapped: the data is the page cache's, read in place */
    } else if (st == KILN_OK) {
        unsigned char *all = realloc(f->bytes, size ? (size_t)size : 1);
        if (!all) st = fail(KILN_ERR_OUT_OF_MEMORY, why, why_size, "cannot allocate %llu bytes for '%s'",
                            (unsigned long long)size, path);
        else f->bytes = all;
        if (st == KILN_OK && !read_at(fd, f->bytes + 8 + n, (size_t)(size - 8 - n), 8 + n))
            st = fail(KILN_ERR_IO, why, why_size, "cannot read '%s': it changed size while being read", path);
    }
    struct stat sb;
    if (st == KILN_OK && (fstat(fd, &sb) != 0 || (uint64_t)sb.st_size != size))
        st = fail(KILN_ERR_IO, why, why_size, "cannot read '%s': it changed size while being read", path);
    close(fd);
    if (st == KILN_OK) {
        f->size = (size_t)size;
        f->data = f->bytes + 8 + n;
        st = check_crc(f, crc_at, why, why_size);
    }
    if (st != KILN_OK) kiln__st_free(f);
    return st;
}

kiln_status kiln__st_read(const char *path, kiln__st_file *f, char *why, size_t why_size) {
    return st_read(path, f, false, why, why_size);
}

kiln_status kiln__st_map(const char *path, kiln__st_file *f, char *why, size_t why_size) {
    return st_read(path, f, true, why, why_size);
}

typedef struct {
    void *addr;
    size_t len;
} st_mapping;

void *kiln__st_take_mapping(kiln__st_file *f) {
    st_mapping *m = f->mapped ? malloc(sizeof *m) : NULL;
    if (!m) return NULL;
    m->addr = f->bytes, m->len = f->size;
    f->mapped = false;
    f->bytes = NULL; /* kiln__st_free leaves it alone now; f->data stays valid */
    return m;
}

void kiln__st_unmap(void *mapping) {
    st_mapping *m = mapping;
    if (!m) return;
    munmap(m->addr, m->len);
    free(m);
}

kiln_status kiln__st_parse(const void *bytes, size_t size, kiln__st_file *f, char *why, size_t why_size) {
    memset(f, 0, sizeof *f);
    uint64_t n = 0;
    size_t crc_at = 0;
    kiln_status st = header_length(bytes, size, &n, why, why_size);
    if (st == KILN_OK && !(f->bytes = malloc(size)))
        st = fail(KILN_ERR_OUT_OF_MEMORY, why, why_size, "cannot allocate %zu bytes", size);
    if (st == KILN_OK) {
        memcpy(f->bytes, bytes, size);
        f->size = size;
        f->data = f->bytes + 8 + n;
        st = parse_checked(f, f->bytes + 8, (size_t)n, size, &crc_at, why, why_size);
    }
    if (st == KILN_OK) st = check_crc(f, crc_at, why, why_size);
    if (st != KILN_OK) kiln__st_free(f);
    return st;
}

void kiln__st_free(kiln__st_file *f) {
    if (f->mapped)
        munmap(f->bytes, f->size);
    else
        free(f->bytes);
    free(f->tensors);
    free(f->meta);
    free(f->strings);
    memset(f, 0, sizeof *f);
}

const kiln__st_tensor *kiln__st_find(const kiln__st_file *f, const char *name) {
    kiln__st_tensor key = {.name = name};
    return f->n_tensors ? bsearch(&key, f->tensors, (size_t)f->n_tensors, sizeof *f->tensors, cmp_names) : NULL;
}

const char *kiln__st_meta_get(const kiln__st_file *f, const char *key) {
    kiln__st_meta want = {.key = key};
    const kiln__st_meta *m = f->n_meta ? bsearch(&want, f->meta, (size_t)f->n_meta, sizeof *f->meta, cmp_keys) : NULL;
    return m ? m->value : NULL;
}

/* ---- writer ------------------------------------------------------------------------------ */

static void put_json_string(kiln__text *t, const char *s) {
    kiln__text_printf(t, "\"");
    for (const unsigned char *c = (const unsigned char *)s; *c; c++) {
        if (*c == '"' || *c == '\\') kiln__text_printf(t, "\\%c", *c);
        else if (*c < 0x20) kiln__text_printf(t, "\\u%04x", *c);
        else kiln__text_printf(t, "%c", *c);
    }
    kiln__text_printf(t, "\"");
}

static int cmp_entries(const void *a, const void *b) {
    const kiln__st_entry *x = a, *y = b;
    size_t ex = kiln__elsize(x->dtype), ey = kiln__elsize(y->dtype);
    if (ex != ey) return ex > ey ? -1 : 1; /* widest first: every tensor stays aligned */
    return strcmp(x->name, y->name);
}

static bool write_all(int fd, const void *buf, size_t n) {
    const char *p = buf;
    while (n > 0) {
        ssize_t w = write(fd, p, n);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) return false;
        p += w;
        n -= (size_t)w;
    }
    return true;
}

int (*kiln__st_fsync)(int fd) = fsync;
void (*kiln__st_mid_write)(const char *tmp_path);

#define TMP_TAG ".kiln-tmp-"

/* path's directory into dir (at least 2 bytes more than path) and its last part. */
static const char *split_path(const char *path, char *dir) {
    const char *slash = strrchr(path, '/');
    if (!slash) return strcpy(dir, "."), path;
    size_t n = slash == path ? 1 : (size_t)(slash - path);
    memcpy(dir, path, n);
    dir[n] = '\0';
    return slash + 1;
}

/* Removes "<base>.kiln-tmp-<pid>-<n>" files left in dir by saves to the same target whose
 * process is gone (killed mid-write); a live saver's temporaries are left alone. Best effort:
 * a file that cannot be removed only wastes space. */
static void remove_stale_temporaries(const char *dir, const char *base) {
    DIR *d = opendir(dir);
    if (!d) return;
    size_t blen = strlen(base), tlen = strlen(TMP_TAG);
    for (struct dirent *e; (e = readdir(d));) {
        const char *name = e->d_name;
        if (strncmp(name, base, blen) != 0 || strncmp(name + blen, TMP_TAG, tlen) != 0) continue;
        char *end;
        errno = 0;
        long pid = strtol(name + blen + tlen, &end, 10);
        if (errno || pid <= 0 || pid != (pid_t)pid || *end != '-' || pid == (long)getpid()) continue;
        const char *counter = end + 1;
        if (!*counter || strspn(counter, "0123456789") != strlen(counter)) continue;
        if (kill((pid_t)pid, 0) != 0 && errno == ESRCH) unlinkat(dirfd(d), name, 0);
    }
    closedir(d);
}

/* Makes a rename in dir durable: the directory entry itself must reach the disk. */
static int sync_dir(const char *dir) {
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) return errno;
    int err = kiln__st_fsync(fd) == 0 ? 0 : errno;
    close(fd);
    return err == EINVAL ? 0 : err; /* a file system that cannot sync directories has nothing to lose */
}

kiln_status kiln__st_write(const char *path, kiln__st_entry *entries, int n, const kiln__st_meta *meta, int n_meta,
                           char *why, size_t why_size) {
    for (int i = 0; i < n; i++)
        if (!kiln_dtype_tag(entries[i].dtype))
            return fail(KILN_ERR_DTYPE, why, why_size, "no safetensors dtype for %s", kiln_dtype_name(entries[i].dtype));
    /* the rename below would put a regular file where a device, FIFO or socket was (/dev/null
     * replaced for every program on the machine), so only a regular file or a new name is written */
    struct stat target;
    if (stat(path, &target) == 0 && !S_ISREG(target.st_mode))
        return fail(KILN_ERR_IO, why, why_size, "cannot save to '%s': not a regular file", path);
    qsort(entries, (size_t)n, sizeof *entries, cmp_entries);
    kiln__text h = {0};
    kiln__text_printf(&h, "{\"__metadata__\":{\"" CRC_KEY "\":\"");
    size_t crc_at = 8 + h.len;
    kiln__text_printf(&h, "00000000\"");
    for (int i = 0; i < n_meta; i++) {
        kiln__text_printf(&h, ",");
        put_json_string(&h, meta[i].key);
        kiln__text_printf(&h, ":");
        put_json_string(&h, meta[i].value);
    }
    kiln__text_printf(&h, "}");
    uint64_t at = 0;
    for (int i = 0; i < n; i++) {
        kiln__text_printf(&h, ",");
        put_json_string(&h, entries[i].name);
        kiln__text_printf(&h, ":{\"dtype\":\"%s\",\"shape\":[", kiln_dtype_tag(entries[i].dtype));
        for (int d = 0; d < entries[i].ndim; d++) kiln__text_printf(&h, d ? ",%lld" : "%lld", (long long)entries[i].shape[d]);
        kiln__text_printf(&h, "],\"data_offsets\":[%llu,%llu]}", (unsigned long long)at, (unsigned long long)(at + entries[i].nbytes));
        at += entries[i].nbytes;
    }
    kiln__text_printf(&h, "}");
    while ((8 + h.len) % 8) kiln__text_printf(&h, " "); /* the data starts 8-byte aligned */
    const unsigned char **parts = malloc(sizeof *parts * (size_t)(n ? n : 1));
    size_t *sizes = malloc(sizeof *sizes * (size_t)(n ? n : 1));
    unsigned char *head = malloc(8 + h.len);
    if (h.oom || !parts || !sizes || !head) {
        free(h.s), free(parts), free(sizes), free(head);
        return fail(KILN_ERR_OUT_OF_MEMORY, why, why_size, "cannot allocate the header");
    }
    for (int i = 0; i < 8; i++) head[i] = (unsigned char)((uint64_t)h.len >> (8 * i));
    memcpy(head + 8, h.s, h.len);
    free(h.s);
    for (int i = 0; i < n; i++) {
        parts[i] = entries[i].data;
        sizes[i] = entries[i].nbytes;
    }
    char hexd[9];
    snprintf(hexd, sizeof hexd, "%08x", (unsigned)file_crc(head, 8 + h.len, crc_at, parts, sizes, n));
    memcpy(head + crc_at, hexd, 8);

    static atomic_uint counter;
    size_t plen = strlen(path);
    char *tmp = malloc(plen + 64), *dir = malloc(plen + 2);
    kiln_status st = KILN_OK;
    if (!tmp || !dir) {
        st = fail(KILN_ERR_OUT_OF_MEMORY, why, why_size, "cannot allocate a path");
    } else {
        const char *base = split_path(path, dir);
        remove_stale_temporaries(dir, base);
        snprintf(tmp, plen + 64, "%s" TMP_TAG "%ld-%u", path, (long)getpid(), atomic_fetch_add(&counter, 1));
        int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
        if (fd < 0) {
            st = fail(KILN_ERR_IO, why, why_size, "cannot create '%s': %s", tmp, strerror(errno));
        } else {
            bool ok = write_all(fd, head, 8 + h.len);
            if (ok && kiln__st_mid_write) kiln__st_mid_write(tmp);
            for (int i = 0; ok && i < n; i++) ok = write_all(fd, parts[i], sizes[i]);
            ok = ok && kiln__st_fsync(fd) == 0;
            int saved = errno;
            ok = close(fd) == 0 && ok;
            if (ok && rename(tmp, path) != 0) ok = false, saved = errno;
            if (!ok) {
                st = fail(KILN_ERR_IO, why, why_size, "cannot write '%s': %s", path, strerror(saved ? saved : EIO));
                unlink(tmp);
            } else if ((saved = sync_dir(dir)) != 0) {
                st = fail(KILN_ERR_IO, why, why_size, "wrote '%s' but cannot sync its directory '%s': %s", path, dir,
                          strerror(saved));
            }
        }
    }
    free(dir);
    free(tmp), free(parts), free(sizes), free(head);
    return st;
}
