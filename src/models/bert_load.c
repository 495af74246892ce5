/* Loading a BERT encoder (transformers' BertModel, post-norm, GELU) from a Hugging Face model
 * folder: config.json for the sizes, model.safetensors for the weights by name,
 * 1_Pooling/config.json (sentence-transformers) for the pooling. Loading is strict and all or
 * nothing: every file is hostile until checked, and every tensor must be present with its exact
 * shape and dtype, with nothing left over but the parts BertModel has and an encoder does not
 * use (the pooler, the position_ids buffer). */
#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "kiln/bert.h"
#include "kiln/engine.h"
#include "kiln/tensor.h"
#include "models/bert-impl.h"
#include "models/models-impl.h"
#include "nn/layers-impl.h"
#include "io/safetensors.h"

static const char OP_LOAD[] = "kiln_bert_load";
#define CONFIG_MAX_BYTES (1u << 20) /* transformers' config.json files are a few KiB */
#define CONFIG_MAX_MEMBERS 256

/* Shapes in units: H hidden, I intermediate. */
enum { DIM_H = -1, DIM_I = -2, DIM_NONE = 0 };
static const struct {
    const char *suffix;
    int rows, cols;
} LAYER_TENSORS[LAYER_N] = {
    [Q_W] = {"attention.self.query.weight", DIM_H, DIM_H},   [Q_B] = {"attention.self.query.bias", DIM_H, DIM_NONE},
    [K_W] = {"attention.self.key.weight", DIM_H, DIM_H},     [K_B] = {"attention.self.key.bias", DIM_H, DIM_NONE},
    [V_W] = {"attention.self.value.weight", DIM_H, DIM_H},   [V_B] = {"attention.self.value.bias", DIM_H, DIM_NONE},
    [AO_W] = {"attention.output.dense.weight", DIM_H, DIM_H}, [AO_B] = {"attention.output.dense.bias", DIM_H, DIM_NONE},
    [ALN_W] = {"attention.output.LayerNorm.weight", DIM_H, DIM_NONE},
    [ALN_B] = {"attention.output.LayerNorm.bias", DIM_H, DIM_NONE},
    [I_W] = {"intermediate.dense.weight", DIM_I, DIM_H},     [I_B] = {"intermediate.dense.bias", DIM_I, DIM_NONE},
    [O_W] = {"output.dense.weight", DIM_H, DIM_I},           [O_B] = {"output.dense.bias", DIM_H, DIM_NONE},
    [OLN_W] = {"output.LayerNorm.weight", DIM_H, DIM_NONE},  [OLN_B] = {"output.LayerNorm.bias", DIM_H, DIM_NONE},
};
/* BertModel's tensors that an encoder for embeddings does not use. */
static const char *const IGNORED[] = {"pooler.dense.weight", "pooler.dense.bias", "embeddings.position_ids"};

kiln_bert_config kiln_bert_get_config(const kiln_bert *m) {
    return kiln__object_check(m, KILN__BERT_KIND, "kiln_bert_get_config") == KILN_OK ? m->cfg : (kiln_bert_config){0};
}

/* The tensors m holds (not m itself: a registered model goes back through the registry). */
static void release_contents(kiln_bert *m) {
    kiln_tensor *emb[] = {&m->word, &m->position, &m->token_type, &m->ln_w, &m->ln_b};
    for (size_t i = 0; i < sizeof emb / sizeof *emb; i++)
        if (emb[i]->id) kiln_release(*emb[i]);
    for (int64_t l = 0; m->layers && l < m->cfg.num_hidden_layers; l++)
        for (int k = 0; k < LAYER_SLOTS; k++)
            if (m->layers[l][k].id) kiln_release(m->layers[l][k]);
    for (int64_t l = 0; m->int8 && l < m->cfg.num_hidden_layers; l++)
        for (int k = 0; k < 8; k++)
            if (m->int8[l][k / 2][k % 2].id) kiln_release(m->int8[l][k / 2][k % 2]);
    free(m->layers);
    free(m->int8);
}

void kiln_bert_free(kiln_bert *m) {
    static const char op[] = "kiln_bert_free";
    if (!m || kiln__object_retire(m, KILN__BERT_KIND, op) != KILN_OK) return;
    release_contents(m);
    kiln__object_dispose(m, KILN__BERT_KIND, op);
}

/* ---- config files ------------------------------------------------------------------------ */

/* Parses the JSON file at path into members; false with the error reported, or, when absent
 * is not NULL and the file does not exist, false with *absent set and nothing reported. */
static bool read_json(const char *path, kiln__json_member *members, int *count, bool *absent) {
    size_t size = 0;
    if (absent) *absent = access(path, F_OK) != 0 && errno == ENOENT;
    if (absent && *absent) return false;
    char *text = kiln__read_small_file(path, CONFIG_MAX_BYTES, "a config", OP_LOAD, &size);
    if (!text) return false;
    char why[256];
    bool ok = kiln__json_parse_flat(text, size, members, CONFIG_MAX_MEMBERS, count, why, sizeof why);
    free(text);
    if (!ok) kiln__report(KILN_ERR_CORRUPT, OP_LOAD, "%s: not a JSON object of settings: %s", path, why);
    return ok;
}

/* An integer setting within [lo, hi]; absent gives fallback, or an error when fallback < 0. */
static bool config_int(const char *path, const kiln__json_member *ms, int n, const char *key, int64_t lo, int64_t hi,
                       int64_t fallback, int64_t *out) {
    const kiln__json_member *m = kiln__json_find(ms, n, key);
    if (!m && fallback >= 0) return *out = fallback, true;
    if (!m) return kiln__report(KILN_ERR_CORRUPT, OP_LOAD, "%s: no \"%s\"", path, key), false;
    if (m->type != KILN__JSON_NUMBER || m->number != floor(m->number) || m->number < (double)lo || m->number > (double)hi) {
        kiln__report(KILN_ERR_CORRUPT, OP_LOAD, "%s: \"%s\" must be an integer from %lld to %lld", path, key,
                     (long long)lo, (long long)hi);
        return false;
    }
    *out = (int64_t)m->number;
    return true;
}

/* A string setting, when present, must be `want`. */
static bool config_is(const char *path, const kiln__json_member *ms, int n, const char *key, const char *want) {
    const kiln__json_member *m = kiln__json_find(ms, n, key);
    if (!m || (m->type == KILN__JSON_STRING && strcmp(m->string, want) == 0)) return true;
    kiln__report(KILN_ERR_UNSUPPORTED, OP_LOAD, "%s: \"%s\" is %s%s%s, only \"%s\" is supported", path, key,
                 m->type == KILN__JSON_STRING ? "\"" : "", m->type == KILN__JSON_STRING ? m->string : "not a string",
                 m->type == KILN__JSON_STRING ? "\"" : "", want);
    return false;
}

static bool read_config(const char *dir, kiln_bert_config *cfg) {
    char path[4096];
    snprintf(path, sizeof path, "%s/config.json", dir);
    kiln__json_member *ms = calloc(CONFIG_MAX_MEMBERS, sizeof *ms);
    if (!ms) return kiln__report(KILN_ERR_OUT_OF_MEMORY, OP_LOAD, "cannot read %s", path), false;
    int n = 0;
    bool ok = read_json(path, ms, &n, NULL);
    ok = ok && config_int(path, ms, n, "vocab_size", 1, 1 << 24, -1, &cfg->vocab_size);
    ok = ok && config_int(path, ms, n, "hidden_size", 1, 1 << 16, -1, &cfg->hidden_size);
    ok = ok && config_int(path, ms, n, "num_hidden_layers", 1, 1024, -1, &cfg->num_hidden_layers);
    ok = ok && config_int(path, ms, n, "num_attention_heads", 1, 1 << 16, -1, &cfg->num_attention_heads);
    ok = ok && config_int(path, ms, n, "intermediate_size", 1, 1 << 20, -1, &cfg->intermediate_size);
    ok = ok && config_int(path, ms, n, "max_position_embeddings", 1, 1 << 20, -1, &cfg->max_position_embeddings);
    ok = ok && config_int(path, ms, n, "type_vocab_size", 1, 1 << 16, 2, &cfg->type_vocab_size);
    ok = ok && config_is(path, ms, n, "hidden_act", "gelu") && config_is(path, ms, n, "position_embedding_type", "absolute");
    if (ok && cfg->hidden_size % cfg->num_attention_heads != 0) {
        kiln__report(KILN_ERR_CORRUPT, OP_LOAD, "%s: hidden_size %lld is not a multiple of num_attention_heads %lld", path,
                     (long long)cfg->hidden_size, (long long)cfg->num_attention_heads);
        ok = false;
    }
    const kiln__json_member *eps = kiln__json_find(ms, n, "layer_norm_eps");
    cfg->layer_norm_eps = 1e-12; /* BertConfig's default */
    if (ok && eps) {
        if (eps->type != KILN__JSON_NUMBER || !(eps->number >= 0) || eps->number > 1) {
            kiln__report(KILN_ERR_CORRUPT, OP_LOAD, "%s: \"layer_norm_eps\" must be a number from 0 to 1", path);
            ok = false;
        }
        cfg->layer_norm_eps = eps->number;
    }
    free(ms);
    return ok;
}

/* sentence-transformers' pooling settings, when the folder has them: mean pooling only. */
static bool check_pooling(const char *dir, int64_t hidden) {
    char path[4096];
    snprintf(path, sizeof path, "%s/1_Pooling/config.json", dir);
    kiln__json_member *ms = calloc(CONFIG_MAX_MEMBERS, sizeof *ms);
    if (!ms) return kiln__report(KILN_ERR_OUT_OF_MEMORY, OP_LOAD, "cannot read %s", path), false;
    int n = 0;
    bool absent = false, ok = read_json(path, ms, &n, &absent);
    if (absent) return free(ms), true; /* a plain BERT folder: mean pooling, sentence-transformers' default */
    int64_t dim = 0;
    ok = ok && config_int(path, ms, n, "word_embedding_dimension", 1, 1 << 16, -1, &dim);
    if (ok && dim != hidden) {
        kiln__report(KILN_ERR_SHAPE, OP_LOAD, "%s: word_embedding_dimension %lld differs from hidden_size %lld", path,
                     (long long)dim, (long long)hidden);
        ok = false;
    }
    for (int i = 0; ok && i < n; i++) {
        if (strncmp(ms[i].key, "pooling_mode_", 13) != 0) continue;
        bool mean = strcmp(ms[i].key, "pooling_mode_mean_tokens") == 0;
        if (ms[i].type != KILN__JSON_BOOL) {
            kiln__report(KILN_ERR_CORRUPT, OP_LOAD, "%s: \"%s\" is not true or false", path, ms[i].key);
            ok = false;
        } else if (ms[i].boolean != mean) {
            kiln__report(KILN_ERR_UNSUPPORTED, OP_LOAD, "%s: \"%s\" is %s: only mean pooling (pooling_mode_mean_tokens) is supported",
                         path, ms[i].key, ms[i].boolean ? "true" : "false");
            ok = false;
        }
    }
    const kiln__json_member *mean = kiln__json_find(ms, n, "pooling_mode_mean_tokens");
    if (ok && !mean) {
        kiln__report(KILN_ERR_UNSUPPORTED, OP_LOAD, "%s: no \"pooling_mode_mean_tokens\": only mean pooling is supported", path);
        ok = false;
    }
    free(ms);
    return ok;
}

/* ---- weights ------------------------------------------------------------------------------ */

typedef struct {
    char name[96];
    int ndim;
    int64_t shape[2];
    kiln_tensor *slot;
} wanted;

static void want(wanted *w, int *n, const char *name, int64_t rows, int64_t cols, kiln_tensor *slot) {
    snprintf(w[*n].name, sizeof w[*n].name, "%s", name);
    w[*n].ndim = cols ? 2 : 1;
    w[*n].shape[0] = rows, w[*n].shape[1] = cols;
    w[*n].slot = slot;
    (*n)++;
}

/* Checks the file's tensors against the list, then makes every tensor; false with the error. */
static bool load_weights(const char *path, kiln__st_file *f, wanted *w, int n) {
    char a[128], b[128];
    for (int i = 0; i < n; i++) {
        const kiln__st_tensor *t = kiln__st_find(f, w[i].name);
        if (!t) return kiln__report(KILN_ERR_SHAPE, OP_LOAD, "%s: no tensor '%s'", path, w[i].name), false;
        if (t->kiln_dtype != KILN_F32)
            return kiln__report(KILN_ERR_DTYPE, OP_LOAD, "%s: tensor '%s' is %s, not F32", path, w[i].name, t->dtype), false;
        if (t->ndim != w[i].ndim || memcmp(t->shape, w[i].shape, sizeof(int64_t) * (size_t)t->ndim) != 0)
            return kiln__report(KILN_ERR_SHAPE, OP_LOAD, "%s: tensor '%s' has shape %s, the config asks for %s", path, w[i].name,
                                kiln__shape_str(a, sizeof a, t->ndim, t->shape), kiln__shape_str(b, sizeof b, w[i].ndim, w[i].shape)),
                   false;
    }
    for (int i = 0; i < f->n_tensors; i++) {
        const char *name = f->tensors[i].name;
        bool known = false;
        for (size_t k = 0; k < sizeof IGNORED / sizeof *IGNORED && !known; k++) known = strcmp(name, IGNORED[k]) == 0;
        for (int k = 0; k < n && !known; k++) known = strcmp(name, w[k].name) == 0;
        if (!known)
            return kiln__report(KILN_ERR_SHAPE, OP_LOAD, "%s: unexpected tensor '%s' (not a part of a BERT encoder of this config)",
                                path, name), false;
    }
    /* A mapped file whose tensors are all f32-aligned becomes one borrowed f32 tensor over its
     * data, unmapped once nothing uses it, and every weight a view of it: nothing is copied. */
    kiln_tensor all = KILN_NONE;
    bool aligned = f->mapped && (uintptr_t)f->data % sizeof(float) == 0;
    for (int i = 0; i < n && aligned; i++) aligned = kiln__st_find(f, w[i].name)->begin % sizeof(float) == 0;
    void *mapping = aligned ? kiln__st_take_mapping(f) : NULL;
    if (mapping) {
        all = kiln_from_borrowed(KILN_F32, KILN_SHAPE((int64_t)(f->data_len / sizeof(float))), f->data, kiln__st_unmap, mapping);
        if (!kiln__nn_peek(all)) { /* on failure the mapping is still ours */
            kiln__report(KILN_ERR_OUT_OF_MEMORY, OP_LOAD, "%s: cannot wrap the mapped file: %s", path, kiln_last_error());
            kiln_release(all);
            kiln__st_unmap(mapping);
            return false;
        }
    }
    for (int i = 0; i < n; i++) {
        const kiln__st_tensor *t = kiln__st_find(f, w[i].name);
        kiln_shape shape = {.ndim = t->ndim};
        memcpy(shape.dims, t->shape, sizeof(int64_t) * (size_t)t->ndim);
        if (all.id)
            *w[i].slot = kiln_reshape(kiln_narrow(kiln_ref(all), 0, (int64_t)(t->begin / sizeof(float)),
                                                  (int64_t)((t->end - t->begin) / sizeof(float))), shape);
        else
            *w[i].slot = kiln_from_data(KILN_CPU, KILN_F32, shape, f->data + t->begin); /* copied now */
        if (!kiln__nn_peek(*w[i].slot)) { /* poisoned: out of memory */
            if (all.id) kiln_release(all);
            return kiln__report(KILN_ERR_OUT_OF_MEMORY, OP_LOAD, "%s: cannot make tensor '%s': %s", path, w[i].name,
                                kiln_last_error()), false;
        }
    }
    if (all.id) kiln_release(all);
    return true;
}

/* Every layer's QKV_W and QKV_B from its Q, K and V tensors, which it consumes; false with the
 * error (out of memory) reported. */
static bool fuse_qkv(kiln_bert *m) {
    double scale = 1.0 / sqrt((double)(m->cfg.hidden_size / m->cfg.num_attention_heads));
    for (int64_t l = 0; l < m->cfg.num_hidden_layers; l++) {
        kiln_tensor *w = m->layers[l];
        kiln_tensor ws[3] = {kiln_mul_scalar(w[Q_W], scale), w[K_W], w[V_W]};
        kiln_tensor bs[3] = {kiln_mul_scalar(w[Q_B], scale), w[K_B], w[V_B]};
        w[QKV_W] = kiln_cat(ws, 3, 0);
        w[QKV_B] = kiln_cat(bs, 3, 0);
        w[Q_W].id = w[K_W].id = w[V_W].id = w[Q_B].id = w[K_B].id = w[V_B].id = 0; /* consumed */
        if (kiln_tensor_status(w[QKV_W]) != KILN_OK || kiln_tensor_status(w[QKV_B]) != KILN_OK)
            return kiln__report(KILN_ERR_OUT_OF_MEMORY, OP_LOAD, "cannot join layer %lld's query, key and value: %s",
                                (long long)l, kiln_last_error()), false;
    }
    return true;
}

/* The linear layers' weights, layer by layer in the order a forward reads them, copied into one
 * buffer of 2 MiB pages (transparent huge pages, asked for with madvise): a forward over a few
 * tokens streams all of them (42 MB for MiniLM) from memory once, and with 4 KiB pages (the
 * file mapping, or separate allocations of 0.6-2.4 MB) their TLB misses cost about a fifth of
 * that stream: 16-row products over MiniLM's weights cold, one thread, 4.2 -> 3.4 ms. */
#define WEIGHT_PAGE ((size_t)2 << 20)

static void free_weights(void *buf) { free(buf); }

static bool pack_linear_weights(kiln_bert *m) {
    const int *which = linear_slots;
    enum { N = 4 };
    int64_t total = 0, layers = m->cfg.num_hidden_layers;
    for (int64_t l = 0; l < layers; l++)
        for (int k = 0; k < N; k++) total += kiln_tensor_numel(m->layers[l][which[k]]);
    size_t bytes = ((size_t)total * sizeof(float) + WEIGHT_PAGE - 1) / WEIGHT_PAGE * WEIGHT_PAGE;
    float *buf = aligned_alloc(WEIGHT_PAGE, bytes);
    if (!buf) return kiln__report(KILN_ERR_OUT_OF_MEMORY, OP_LOAD, "out of memory for the weights"), false;
#ifdef MADV_HUGEPAGE
    madvise(buf, bytes, MADV_HUGEPAGE); /* a hint: without it the pages are 4 KiB, nothing else changes */
#endif
    int64_t off = 0;
    kiln_status st = KILN_OK;
    for (int64_t l = 0; l < layers && st == KILN_OK; l++)
        for (int k = 0; k < N && st == KILN_OK; k++) {
            int64_t n = kiln_tensor_numel(m->layers[l][which[k]]);
            st = kiln_into_data(kiln_ref(m->layers[l][which[k]]), buf + off, sizeof(float) * (size_t)n);
            off += n;
        }
    kiln_tensor all = st == KILN_OK ? kiln_from_borrowed(KILN_F32, KILN_SHAPE(total), buf, free_weights, buf) : KILN_NONE;
    if (!kiln__nn_peek(all)) {
        kiln_release(all);
        free(buf);
        return kiln__report(st != KILN_OK ? st : KILN_ERR_OUT_OF_MEMORY, OP_LOAD, "cannot gather the weights: %s",
                            kiln_last_error()), false;
    }
    /* every view first, then the swap: a view that cannot be made (out of memory) fails the
     * load and leaves the weights as they were, never one of them poisoned in a loaded model */
    kiln_tensor *views = calloc((size_t)(layers > 0 ? layers : 1) * N, sizeof *views);
    bool made = views != NULL;
    off = 0;
    for (int64_t l = 0; l < layers && made; l++)
        for (int k = 0; k < N && made; k++) {
            const kiln_tensor t = m->layers[l][which[k]];
            int64_t n = kiln_tensor_numel(t);
            views[l * N + k] = kiln_reshape(kiln_narrow(kiln_ref(all), 0, off, n), kiln_tensor_shape(t));
            made = kiln__nn_peek(views[l * N + k]) != NULL;
            off += n;
        }
    if (!made) {
        for (int64_t i = 0; views && i < layers * N; i++) kiln_release(views[i]); /* (KILN_NONE past the failed one) */
        free(views);
        kiln_release(all); /* (with the views, the last user of buf: frees it) */
        return kiln__report(KILN_ERR_OUT_OF_MEMORY, OP_LOAD, "cannot view the gathered weights: %s", kiln_last_error()),
               false;
    }
    for (int64_t l = 0; l < layers; l++)
        for (int k = 0; k < N; k++) {
            kiln_release(m->layers[l][which[k]]);
            m->layers[l][which[k]] = views[l * N + k];
        }
    free(views);
    kiln_release(all);
    return true;
}

kiln_bert *kiln_bert_load(const char *dir) {
    if (!dir) return kiln__report(KILN_ERR_NULL, OP_LOAD, "dir is NULL"), NULL;
    kiln_bert *m = calloc(1, sizeof *m);
    if (!m) return kiln__report(KILN_ERR_OUT_OF_MEMORY, OP_LOAD, "out of memory"), NULL;
    if (!read_config(dir, &m->cfg) || !check_pooling(dir, m->cfg.hidden_size)) return free(m), NULL;
    const kiln_bert_config *c = &m->cfg;
    m->layers = calloc((size_t)c->num_hidden_layers, sizeof *m->layers);
    int cap = 5 + LAYER_N * (int)c->num_hidden_layers, n = 0;
    wanted *w = calloc((size_t)cap, sizeof *w);
    if (!m->layers || !w) {
        free(w), release_contents(m), free(m);
        return kiln__report(KILN_ERR_OUT_OF_MEMORY, OP_LOAD, "out of memory"), NULL;
    }
    int64_t h = c->hidden_size;
    want(w, &n, "embeddings.word_embeddings.weight", c->vocab_size, h, &m->word);
    want(w, &n, "embeddings.position_embeddings.weight", c->max_position_embeddings, h, &m->position);
    want(w, &n, "embeddings.token_type_embeddings.weight", c->type_vocab_size, h, &m->token_type);
    want(w, &n, "embeddings.LayerNorm.weight", h, 0, &m->ln_w);
    want(w, &n, "embeddings.LayerNorm.bias", h, 0, &m->ln_b);
    for (int64_t l = 0; l < c->num_hidden_layers; l++)
        for (int k = 0; k < LAYER_N; k++) {
            char name[96];
            snprintf(name, sizeof name, "encoder.layer.%lld.%s", (long long)l, LAYER_TENSORS[k].suffix);
            int64_t dims[2];
            for (int d = 0; d < 2; d++) {
                int u = d ? LAYER_TENSORS[k].cols : LAYER_TENSORS[k].rows;
                dims[d] = u == DIM_H ? h : u == DIM_I ? c->intermediate_size : 0;
            }
            want(w, &n, name, dims[0], dims[1], &m->layers[l][k]);
        }
    char path[4096], why[512];
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    kiln__st_file f;
    kiln_status st = kiln__st_map(path, &f, why, sizeof why);
    if (st != KILN_OK) {
        free(w), release_contents(m), free(m);
        /* name the file once: some of the reader's reasons name it already */
        return kiln__report(st, OP_LOAD, "%s%s%s", strstr(why, path) ? "" : path, strstr(why, path) ? "" : ": ", why), NULL;
    }
    bool ok = load_weights(path, &f, w, n);
    kiln__st_free(&f);
    free(w);
    if (ok) ok = fuse_qkv(m);
    if (ok) ok = pack_linear_weights(m);
    if (ok && !kiln__object_register(m, KILN__BERT_KIND)) {
        ok = false;
        kiln__report(KILN_ERR_OUT_OF_MEMORY, OP_LOAD, "out of memory");
    }
    if (!ok) return release_contents(m), free(m), NULL;
    return m;
}
