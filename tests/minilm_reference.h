/* Readers of the all-MiniLM-L6-v2 reference in tests/data/minilm (made by
 * scripts/make_minilm_reference.py): the sentences with their escapes, the reference token ids,
 * and where the model package's files are. Shared by the tests that compare kiln with it. */
#ifndef KILN_MINILM_REFERENCE_H
#define KILN_MINILM_REFERENCE_H

#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <kiln.h>

typedef struct {
    char *text; /* UTF-8, may hold NUL bytes: use len */
    size_t len;
} mr_sentence;

/* Appends the UTF-8 of code point cp to out. */
static inline size_t mr_put_utf8(uint32_t cp, char *out) {
    if (cp < 0x80) return out[0] = (char)cp, 1;
    if (cp < 0x800) return out[0] = (char)(0xC0 | cp >> 6), out[1] = (char)(0x80 | (cp & 0x3F)), 2;
    if (cp < 0x10000) {
        out[0] = (char)(0xE0 | cp >> 12), out[1] = (char)(0x80 | ((cp >> 6) & 0x3F)), out[2] = (char)(0x80 | (cp & 0x3F));
        return 3;
    }
    out[0] = (char)(0xF0 | cp >> 18), out[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
    out[2] = (char)(0x80 | ((cp >> 6) & 0x3F)), out[3] = (char)(0x80 | (cp & 0x3F));
    return 4;
}

/* Decodes one line of sentences.txt (\n \t \r \\ \u{HEX}) in place; returns its length, or
 * (size_t)-1 for an unknown escape. */
static inline size_t mr_unescape(char *s, size_t n) {
    size_t out = 0;
    for (size_t i = 0; i < n; i++) {
        if (s[i] != '\\') {
            s[out++] = s[i];
            continue;
        }
        char c = ++i < n ? s[i] : 0;
        if (c == 'n') s[out++] = '\n';
        else if (c == 't') s[out++] = '\t';
        else if (c == 'r') s[out++] = '\r';
        else if (c == '\\') s[out++] = '\\';
        else if (c == 'u' && i + 1 < n && s[i + 1] == '{') {
            char *end;
            unsigned long cp = strtoul(s + i + 2, &end, 16);
            if (*end != '}' || cp > 0x10FFFF) return (size_t)-1;
            i = (size_t)(end - s);
            out += mr_put_utf8((uint32_t)cp, s + out); /* at most 4 bytes: never longer than the escape */
        } else {
            return (size_t)-1;
        }
    }
    return out;
}

/* The sentences of a file in sentences.txt's format; NULL (message on stderr) on failure. */
static inline mr_sentence *mr_read_sentences(const char *path, size_t *count) {
    FILE *f = fopen(path, "rb");
    if (!f) return fprintf(stderr, "  cannot open %s\n", path), NULL;
    mr_sentence *v = NULL;
    size_t n = 0, cap = 0, size = 0;
    char *line = NULL;
    ssize_t got;
    while ((got = getline(&line, &size, f)) >= 0) {
        size_t len = (size_t)got;
        if (len && line[len - 1] == '\n') len--;
        if (len && line[0] == '#') continue;
        if (n == cap) {
            cap = cap ? 2 * cap : 256;
            mr_sentence *w = realloc(v, cap * sizeof *v);
            if (!w) break;
            v = w;
        }
        v[n].text = malloc(len + 1);
        memcpy(v[n].text, line, len);
        v[n].len = mr_unescape(v[n].text, len);
        if (v[n].len == (size_t)-1) {
            fprintf(stderr, "  %s: bad escape in sentence %zu\n", path, n + 1);
            v[n].len = 0;
        }
        n++;
    }
    free(line);
    fclose(f);
    *count = n;
    return v;
}

static inline void mr_free_sentences(mr_sentence *v, size_t n) {
    for (size_t i = 0; v && i < n; i++) free(v[i].text);
    free(v);
}

/* The reference's file `name` (sentences.txt, token_ids.txt, embeddings.f32), read whole:
 * mr_read_sentences for the sentences; the others opened in binary mode (NULL if absent). */
static inline FILE *mr_open_data(const char *name) {
    char path[1024];
    const char *data = getenv("KILN_TEST_DATA") ? getenv("KILN_TEST_DATA") : "tests/data";
    snprintf(path, sizeof path, "%s/minilm/%s", data, name);
    FILE *f = fopen(path, "rb");
    if (!f) fprintf(stderr, "  cannot open %s\n", path);
    return f;
}

/* The n reference embeddings of dim values (embeddings.f32), malloc'd; NULL on failure. */
static inline float *mr_reference_embeddings(size_t n, size_t dim) {
    FILE *f = mr_open_data("embeddings.f32");
    float *v = f ? malloc(n * dim * sizeof *v) : NULL;
    if (v && fread(v, sizeof *v, n * dim, f) != n * dim) free(v), v = NULL;
    if (f) fclose(f);
    return v;
}

/* Embeds the n sentences s with m in batches of 32 into out (n x dim floats): how many were
 * embedded, fewer when a batch failed (kiln_last_error says why). */
static inline size_t mr_embed_all(kiln_tokenizer *tok, kiln_bert *m, const mr_sentence *s, size_t n, size_t dim,
                                  float *out) {
    size_t at = 0;
    while (tok && m && at < n) {
        size_t k = n - at < 32 ? n - at : 32;
        const char *texts[32];
        size_t lens[32];
        for (size_t i = 0; i < k; i++) texts[i] = s[at + i].text, lens[i] = s[at + i].len;
        kiln_token_batch b;
        if (kiln_tokenizer_encode_batch(tok, (int64_t)k, texts, lens, &b) != KILN_OK ||
            kiln_into_data(kiln_bert_embed(m, b.input_ids, b.attention_mask, b.token_type_ids), out + at * dim,
                           k * dim * sizeof *out) != KILN_OK)
            break;
        at += k;
    }
    return at;
}

/* The reference sentences ($KILN_TEST_DATA/minilm/sentences.txt); NULL on failure. */
static inline mr_sentence *mr_reference_sentences(size_t *count) {
    char path[1024];
    const char *data = getenv("KILN_TEST_DATA") ? getenv("KILN_TEST_DATA") : "tests/data";
    snprintf(path, sizeof path, "%s/minilm/sentences.txt", data);
    return mr_read_sentences(path, count);
}

/* The model's folder: $KILN_MINILM_DIR (set by CMake to the installed package), or NULL when
 * the package is not installed. */
static inline const char *mr_model_dir(void) {
    static char path[4096];
    const char *dir = getenv("KILN_MINILM_DIR");
    if (!dir || !*dir) return NULL;
    snprintf(path, sizeof path, "%s/vocab.txt", dir);
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fclose(f);
    return dir;
}

/* One comparison with the reference: its sentences and embeddings, the tokenizer and model of
 * model_dir, and room for kiln's embeddings (n x 384). */
typedef struct {
    size_t n;
    mr_sentence *sentences;
    float *want, *got;
    kiln_tokenizer *tok;
    kiln_bert *model;
} mr_comparison;

static inline void mr_comparison_close(mr_comparison *c) {
    kiln_bert_free(c->model);
    kiln_tokenizer_free(c->tok);
    free(c->want), free(c->got);
    mr_free_sentences(c->sentences, c->n);
    memset(c, 0, sizeof *c);
}

/* Loads everything a comparison needs; false (what failed on stderr, everything freed) when a
 * piece is missing, so a test checks one result. */
static inline bool mr_comparison_open(mr_comparison *c, const char *model_dir) {
    memset(c, 0, sizeof *c);
    c->sentences = mr_reference_sentences(&c->n);
    c->want = c->sentences ? mr_reference_embeddings(c->n, 384) : NULL;
    c->got = malloc((c->n ? c->n : 1) * 384 * sizeof *c->got);
    char path[4200];
    snprintf(path, sizeof path, "%s/vocab.txt", model_dir);
    c->tok = kiln_tokenizer_load(path, kiln_tokenizer_defaults());
    c->model = kiln_bert_load(model_dir);
    if (c->sentences && c->n >= 200 && c->want && c->got && c->tok && c->model) return true;
    fprintf(stderr, "  the MiniLM comparison cannot start (%zu sentences): %s\n", c->n, kiln_last_error());
    mr_comparison_close(c);
    return false;
}

/* Embeds every sentence into c->got; true when all were embedded (else kiln_last_error says why). */
static inline bool mr_comparison_embed(mr_comparison *c) {
    size_t done = mr_embed_all(c->tok, c->model, c->sentences, c->n, 384, c->got);
    if (done != c->n) fprintf(stderr, "  batch at %zu failed: %s\n", done, kiln_last_error());
    return done == c->n;
}

/* Sentence i's cosine between kiln's embedding and the reference, in double. */
static inline double mr_comparison_cosine(const mr_comparison *c, size_t i) {
    const float *g = c->got + i * 384, *w = c->want + i * 384;
    double dot = 0, gg = 0, ww = 0;
    for (int d = 0; d < 384; d++) dot += (double)g[d] * w[d], gg += (double)g[d] * g[d], ww += (double)w[d] * w[d];
    return dot / sqrt(gg * ww);
}

/* The least of the sentences' cosines to the reference, printed under label with where it is
 * and the mean (after mr_comparison_embed). */
static inline double mr_comparison_worst(const mr_comparison *c, const char *label) {
    double worst = 1, sum = 0;
    size_t worst_at = 0;
    for (size_t i = 0; i < c->n; i++) {
        double cosine = mr_comparison_cosine(c, i);
        if (cosine < worst) worst = cosine, worst_at = i;
        sum += cosine;
    }
    fprintf(stderr, "  %s: %zu sentences, cosine to f32 min %.5f (sentence %zu), mean %.5f\n", label, c->n, worst,
            worst_at + 1, sum / (double)(c->n ? c->n : 1));
    return worst;
}

/* Says why a test of the reference is skipped; returns ctest's skip status (SKIP_RETURN_CODE). */
static inline int mr_skip(void) {
    printf("SKIP: the all-MiniLM-L6-v2 package is not installed (KILN_MINILM_DIR=%s); "
           "scripts/setup-debian.sh installs it\n", getenv("KILN_MINILM_DIR") ? getenv("KILN_MINILM_DIR") : "");
    return 77;
}

#endif
