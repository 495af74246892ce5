/* The BERT encoder (kiln/bert.h): all-MiniLM-L6-v2's sentence embeddings against the reference
 * in tests/data/minilm (`test_bert --reference`, skipped with 77 when the model package is not
 * installed), and, without the model, a tiny BERT written here: loading errors for missing,
 * unexpected, mis-shaped and mistyped tensors, truncated files and bad configs, input checks,
 * and the pooling's invariance to padding. */
#include <kiln.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "kiln_test.h"
#include "minilm_reference.h"
#include "io/safetensors.h"

/* ---- the reference ----------------------------------------------------------------------- */
static const char *model_dir;

/* Whether a file whose path ends in name is mapped into this process. */
static bool file_is_mapped(const char *name) {
    FILE *f = fopen("/proc/self/maps", "r");
    char line[4096];
    bool found = false;
    while (f && !found && fgets(line, sizeof line, f)) found = strstr(line, name) != NULL;
    if (f) fclose(f);
    return found;
}

KT_TEST(reference_embeddings) {
    mr_comparison c;
    KT_CHECK(mr_comparison_open(&c, model_dir));
    if (!c.model) return;
    kiln_bert_config cfg = kiln_bert_get_config(c.model);
    KT_CHECK(cfg.hidden_size == 384 && cfg.num_hidden_layers == 6 && cfg.num_attention_heads == 12 &&
             cfg.intermediate_size == 1536);
    double worst = 0, worst_cos = 1;
    size_t checked = 0, bad = 0;
    KT_CHECK(mr_comparison_embed(&c));
    for (size_t i = 0; i < c.n; i++) {
        const float *g = c.got + i * 384, *w = c.want + i * 384;
        double diff = 0, cosine = mr_comparison_cosine(&c, i);
        for (int d = 0; d < 384; d++) diff = fmax(diff, fabs((double)g[d] - (double)w[d]));
        worst = diff > worst ? diff : worst;
        worst_cos = cosine < worst_cos ? cosine : worst_cos;
        bool ok = diff <= 1e-5 && cosine >= 0.99999;
        bad += !ok;
        KT_CHECK_MSG(ok || bad > 5, "sentence %zu (%.40s): max |diff| %.3g, cosine %.8f", i + 1, c.sentences[i].text,
                     diff, cosine);
        checked++;
    }
    fprintf(stderr, "  %zu of %zu sentences embedded (batches of 32): max |diff| %.3g, min cosine %.8f, %zu off\n", checked,
            c.n, worst, worst_cos, bad);
    KT_CHECK(bad == 0 && checked == c.n);
    mr_comparison_close(&c);
}

/* The same with bf16 weights (kiln_bert_to_dtype; test_bert --reference-bf16): every one of
 * the 278 sentences within cosine 0.999 of the f32 reference, and the mapped file let go. */
KT_TEST(reference_embeddings_bf16) {
    mr_comparison c;
    KT_CHECK(mr_comparison_open(&c, model_dir));
    if (!c.model) return;
    KT_CHECK_MSG(kiln_bert_to_dtype(c.model, KILN_BF16) == KILN_OK, "%s", kiln_last_error());
    KT_CHECK(!file_is_mapped("model.safetensors"));
    KT_CHECK(mr_comparison_embed(&c));
    KT_CHECK(mr_comparison_worst(&c, "bf16") >= 0.999);
    mr_comparison_close(&c);
}

/* ---- a tiny BERT written here ------------------------------------------------------------ */
static char tmp_dir[64];
enum { T_VOCAB = 10, T_H = 8, T_HEADS = 2, T_I = 16, T_POS = 12, T_TYPES = 2 };

static const char TINY_CONFIG[] =
    "{\"architectures\": [\"BertModel\"], \"hidden_act\": \"gelu\", \"hidden_size\": 8, \"intermediate_size\": 16,\n"
    " \"layer_norm_eps\": 1e-12, \"max_position_embeddings\": 12, \"model_type\": \"bert\", \"num_attention_heads\": 2,\n"
    " \"num_hidden_layers\": 1, \"position_embedding_type\": \"absolute\", \"type_vocab_size\": 2, \"vocab_size\": 10,\n"
    " \"nested\": {\"a\": [1, 2, {\"b\": null}], \"c\": \"\\u00e9\\ud83d\\ude00\"}}\n";
static const char TINY_POOLING[] = "{\"word_embedding_dimension\": 8, \"pooling_mode_cls_token\": false,\n"
                                   " \"pooling_mode_mean_tokens\": true, \"pooling_mode_max_tokens\": false}\n";

typedef struct {
    char name[96];
    int ndim;
    int64_t shape[2];
} tiny_tensor;

static int tiny_tensors(tiny_tensor *t) {
    static const struct {
        const char *name;
        int64_t rows, cols;
    } list[] = {
        {"embeddings.word_embeddings.weight", T_VOCAB, T_H}, {"embeddings.position_embeddings.weight", T_POS, T_H},
        {"embeddings.token_type_embeddings.weight", T_TYPES, T_H}, {"embeddings.LayerNorm.weight", T_H, 0},
        {"embeddings.LayerNorm.bias", T_H, 0}, {"encoder.layer.0.attention.self.query.weight", T_H, T_H},
        {"encoder.layer.0.attention.self.query.bias", T_H, 0}, {"encoder.layer.0.attention.self.key.weight", T_H, T_H},
        {"encoder.layer.0.attention.self.key.bias", T_H, 0}, {"encoder.layer.0.attention.self.value.weight", T_H, T_H},
        {"encoder.layer.0.attention.self.value.bias", T_H, 0}, {"encoder.layer.0.attention.output.dense.weight", T_H, T_H},
        {"encoder.layer.0.attention.output.dense.bias", T_H, 0}, {"encoder.layer.0.attention.output.LayerNorm.weight", T_H, 0},
        {"encoder.layer.0.attention.output.LayerNorm.bias", T_H, 0}, {"encoder.layer.0.intermediate.dense.weight", T_I, T_H},
        {"encoder.layer.0.intermediate.dense.bias", T_I, 0}, {"encoder.layer.0.output.dense.weight", T_H, T_I},
        {"encoder.layer.0.output.dense.bias", T_H, 0}, {"encoder.layer.0.output.LayerNorm.weight", T_H, 0},
        {"encoder.layer.0.output.LayerNorm.bias", T_H, 0},
    };
    int n = (int)(sizeof list / sizeof *list);
    for (int i = 0; i < n; i++) {
        snprintf(t[i].name, sizeof t[i].name, "%s", list[i].name);
        t[i].ndim = list[i].cols ? 2 : 1;
        t[i].shape[0] = list[i].rows, t[i].shape[1] = list[i].cols;
    }
    return n;
}

static void write_text(const char *dir, const char *name, const char *text) {
    char path[256];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "wb");
    KT_CHECK(f != NULL);
    if (f) fputs(text, f), fclose(f);
}

/* Writes the tiny model (config, pooling, weights) into a fresh folder under tmp_dir; edit
 * changes the tensor list first: drop (name), add (name), reshape or retype one. */
typedef enum { EDIT_NONE, EDIT_DROP, EDIT_ADD, EDIT_SHAPE, EDIT_DTYPE, EDIT_POOLER } tiny_edit;

static const char *write_tiny(const char *sub, tiny_edit edit, const char *name) {
    static char dir[160];
    snprintf(dir, sizeof dir, "%s/%s", tmp_dir, sub);
    mkdir(dir, 0700);
    char pool[200];
    snprintf(pool, sizeof pool, "%s/1_Pooling", dir);
    mkdir(pool, 0700);
    write_text(dir, "config.json", TINY_CONFIG);
    write_text(dir, "1_Pooling/config.json", TINY_POOLING);
    tiny_tensor t[32];
    int n = tiny_tensors(t);
    if (edit == EDIT_ADD || edit == EDIT_POOLER) {
        snprintf(t[n].name, sizeof t[n].name, "%s", edit == EDIT_POOLER ? "pooler.dense.weight" : name);
        t[n].ndim = 2, t[n].shape[0] = T_H, t[n].shape[1] = T_H;
        n++;
    }
    static double data[32][T_VOCAB * T_H * 2 + T_H * T_I];
    kiln__st_entry e[32];
    int k = 0;
    for (int i = 0; i < n; i++) {
        if (edit == EDIT_DROP && strcmp(t[i].name, name) == 0) continue;
        bool mine = name && strcmp(t[i].name, name) == 0;
        if (mine && edit == EDIT_SHAPE) t[i].shape[0]++;
        kiln_dtype dt = mine && edit == EDIT_DTYPE ? KILN_F64 : KILN_F32;
        int64_t numel = t[i].shape[0] * (t[i].ndim == 2 ? t[i].shape[1] : 1);
        float *fv = (float *)data[k];
        for (int64_t j = 0; j < numel; j++) { /* small deterministic weights; LayerNorm weights near 1 */
            double v = 0.3 * sin(0.7 * (double)(j + 13 * i)) + (strstr(t[i].name, "LayerNorm.weight") ? 1.0 : 0.0);
            if (dt == KILN_F64) data[k][j] = v;
            else fv[j] = (float)v;
        }
        e[k] = (kiln__st_entry){t[i].name, dt, t[i].ndim, t[i].shape, data[k], (size_t)numel * (dt == KILN_F64 ? 8 : 4)};
        k++;
    }
    char path[256], why[256];
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    KT_CHECK_MSG(kiln__st_write(path, e, k, NULL, 0, why, sizeof why) == KILN_OK, "%s", why);
    return dir;
}

#define EXPECT_LOAD_ERROR(dir, st, what)                                  \
    do {                                                                  \
        int line_ = __LINE__;                                             \
        kiln_bert *m_ = kiln_bert_load(dir);                              \
        KT_CHECK(m_ == NULL);                                             \
        kiln_bert_free(m_);                                               \
        KT_EXPECT_ERROR((st), (what), line_);                             \
        KT_CHECK_MSG(strstr(kiln_last_error(), "kiln_bert_load") != NULL, "%s", kiln_last_error()); \
    } while (0)

/* [n, s] i64 tensors from rows of ids (0 = padding, mask 0 there). */
static kiln_token_batch tiny_batch(int64_t n, int64_t s, const int64_t *ids) {
    int64_t mask[64], types[64] = {0};
    for (int64_t i = 0; i < n * s; i++) mask[i] = ids[i] != 0;
    return (kiln_token_batch){kiln_from_data(KILN_CPU, KILN_I64, KILN_SHAPE(n, s), ids),
                              kiln_from_data(KILN_CPU, KILN_I64, KILN_SHAPE(n, s), mask),
                              kiln_from_data(KILN_CPU, KILN_I64, KILN_SHAPE(n, s), types)};
}

KT_TEST(tiny_model_loads_and_pools) {
    kt_mem_begin();
    kiln_bert *m = kiln_bert_load(write_tiny("good", EDIT_NONE, NULL));
    KT_CHECK_MSG(m != NULL, "%s", kiln_last_error());
    if (!m) return;
    kiln_bert_config c = kiln_bert_get_config(m);
    KT_CHECK(c.vocab_size == T_VOCAB && c.hidden_size == T_H && c.num_attention_heads == T_HEADS &&
             c.num_hidden_layers == 1 && c.intermediate_size == T_I && c.max_position_embeddings == T_POS &&
             c.type_vocab_size == T_TYPES && c.layer_norm_eps == 1e-12);
    /* a sentence alone and padded in a batch beside a longer one: the same embedding, unit norm */
    int64_t alone[3] = {1, 5, 2}, both[10] = {1, 5, 2, 0, 0, 1, 7, 3, 9, 2};
    kiln_token_batch a = tiny_batch(1, 3, alone), b = tiny_batch(2, 5, both);
    float ea[T_H], eb[2 * T_H], h[2 * 5 * T_H];
    KT_CHECK(kiln_into_data(kiln_bert_embed(m, a.input_ids, a.attention_mask, a.token_type_ids), ea, sizeof ea) == KILN_OK);
    kiln_tensor hidden = kiln_bert_forward(m, kiln_ref(b.input_ids), kiln_ref(b.attention_mask), KILN_NONE);
    KT_CHECK(kiln_tensor_ndim(hidden) == 3 && kiln_tensor_dim(hidden, 2) == T_H);
    KT_CHECK(kiln_into_data(hidden, h, sizeof h) == KILN_OK);
    KT_CHECK(kiln_into_data(kiln_bert_embed(m, b.input_ids, b.attention_mask, b.token_type_ids), eb, sizeof eb) == KILN_OK);
    double norm0 = 0, norm1 = 0, mean_err = 0;
    for (int d = 0; d < T_H; d++) {
        KT_NEAR(eb[d], ea[d], 1e-5);
        norm0 += (double)eb[d] * eb[d], norm1 += (double)eb[T_H + d] * eb[T_H + d];
    }
    KT_NEAR(norm0, 1.0, 1e-5);
    KT_NEAR(norm1, 1.0, 1e-5);
    /* the second row's embedding is its hidden states' mean, normalised */
    double mean[T_H], mn = 0;
    for (int d = 0; d < T_H; d++) {
        mean[d] = 0;
        for (int t = 0; t < 5; t++) mean[d] += h[(5 + t) * T_H + d] / 5.0;
        mn += mean[d] * mean[d];
    }
    for (int d = 0; d < T_H; d++) mean_err = fmax(mean_err, fabs(mean[d] / sqrt(mn) - eb[T_H + d]));
    KT_CHECK_MSG(mean_err < 1e-5, "mean pooling off by %g", mean_err);
    /* i32 ids, a bool mask and no token types (all type 0) give the same embedding */
    kiln_token_batch one = tiny_batch(1, 3, alone);
    float ec[T_H];
    kiln_tensor e32 = kiln_bert_embed(m, kiln_cast(one.input_ids, KILN_I32), kiln_cast(one.attention_mask, KILN_BOOL), KILN_NONE);
    KT_CHECK_MSG(kiln_into_data(e32, ec, sizeof ec) == KILN_OK, "%s", kiln_last_error());
    for (int d = 0; d < T_H; d++) KT_NEAR(ec[d], ea[d], 1e-6);
    kiln_release(one.token_type_ids);
    kiln_bert_free(m);
    /* the pooler is BertModel's and ignored */
    m = kiln_bert_load(write_tiny("pooler", EDIT_POOLER, NULL));
    KT_CHECK_MSG(m != NULL, "%s", kiln_last_error());
    kiln_bert_free(m);
    KT_MEM_CHECK();
}

KT_TEST(tensor_errors) {
    kt_mem_begin();
    EXPECT_LOAD_ERROR(write_tiny("drop", EDIT_DROP, "encoder.layer.0.output.dense.bias"), KILN_ERR_SHAPE,
                      "no tensor 'encoder.layer.0.output.dense.bias'");
    EXPECT_LOAD_ERROR(write_tiny("drop_emb", EDIT_DROP, "embeddings.word_embeddings.weight"), KILN_ERR_SHAPE,
                      "no tensor 'embeddings.word_embeddings.weight'");
    EXPECT_LOAD_ERROR(write_tiny("extra", EDIT_ADD, "encoder.layer.1.attention.self.query.weight"), KILN_ERR_SHAPE,
                      "unexpected tensor 'encoder.layer.1.attention.self.query.weight'");
    EXPECT_LOAD_ERROR(write_tiny("extra2", EDIT_ADD, "cls.predictions.weight"), KILN_ERR_SHAPE, "unexpected tensor 'cls.predictions.weight'");
    EXPECT_LOAD_ERROR(write_tiny("shape", EDIT_SHAPE, "encoder.layer.0.intermediate.dense.weight"), KILN_ERR_SHAPE,
                      "tensor 'encoder.layer.0.intermediate.dense.weight' has shape [17, 8], the config asks for [16, 8]");
    EXPECT_LOAD_ERROR(write_tiny("dtype", EDIT_DTYPE, "embeddings.LayerNorm.bias"), KILN_ERR_DTYPE,
                      "tensor 'embeddings.LayerNorm.bias' is F64, not F32");
    /* a truncated file, and one with a damaged header */
    const char *dir = write_tiny("truncated", EDIT_NONE, NULL);
    char path[256];
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    struct stat st;
    KT_CHECK(stat(path, &st) == 0 && truncate(path, st.st_size - 7) == 0);
    EXPECT_LOAD_ERROR(dir, KILN_ERR_CORRUPT, "model.safetensors");
    KT_CHECK(truncate(path, 5) == 0);
    EXPECT_LOAD_ERROR(dir, KILN_ERR_CORRUPT, "model.safetensors");
    KT_CHECK(unlink(path) == 0);
    EXPECT_LOAD_ERROR(dir, KILN_ERR_IO, "cannot open");
    KT_CHECK(strstr(kiln_last_error(), "model.safetensors") != NULL);
    EXPECT_LOAD_ERROR(NULL, KILN_ERR_NULL, "dir is NULL");
    KT_MEM_CHECK();
}

KT_TEST(config_errors) {
    kt_mem_begin();
    const char *dir = write_tiny("config", EDIT_NONE, NULL);
    EXPECT_LOAD_ERROR("/nonexistent/model", KILN_ERR_IO, "/nonexistent/model/config.json: cannot open");
    static const struct {
        const char *text;
        kiln_status st;
        const char *why;
    } bad[] = {
        {"", KILN_ERR_CORRUPT, "expected an object at byte 0"},
        {"{\"hidden_size\": 8,}", KILN_ERR_CORRUPT, "expected a key"},
        {"{\"hidden_size\": 8} x", KILN_ERR_CORRUPT, "text after the object"},
        {"{\"a\": 1, \"a\": 2}", KILN_ERR_CORRUPT, "duplicate key"},
        {"{\"a\": 01}", KILN_ERR_CORRUPT, "expected ',' or '}'"},
        {"{\"a\": 1e999}", KILN_ERR_CORRUPT, "number out of range"},
        {"{\"a\": \"\\ud800\"}", KILN_ERR_CORRUPT, "lone surrogate"},
        {"{\"a\": \"x\ty\"}", KILN_ERR_CORRUPT, "control character"},
        {"{\"a\": [[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[1]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]}", KILN_ERR_CORRUPT,
         "nesting too deep"},
        {"{\"a\": tru}", KILN_ERR_CORRUPT, "invalid literal"},
        {"{\"vocab_size\": 10}", KILN_ERR_CORRUPT, "no \"hidden_size\""},
        {"{\"vocab_size\": 10, \"hidden_size\": 8.5}", KILN_ERR_CORRUPT, "\"hidden_size\" must be an integer"},
        {"{\"vocab_size\": 10, \"hidden_size\": -8}", KILN_ERR_CORRUPT, "\"hidden_size\" must be an integer"},
        {"{\"vocab_size\": 10, \"hidden_size\": \"8\"}", KILN_ERR_CORRUPT, "\"hidden_size\" must be an integer"},
        {"{\"vocab_size\": 10, \"hidden_size\": 8, \"num_hidden_layers\": 1, \"num_attention_heads\": 3, "
         "\"intermediate_size\": 16, \"max_position_embeddings\": 12}", KILN_ERR_CORRUPT, "not a multiple of num_attention_heads"},
        {"{\"vocab_size\": 10, \"hidden_size\": 8, \"num_hidden_layers\": 1, \"num_attention_heads\": 2, "
         "\"intermediate_size\": 16, \"max_position_embeddings\": 12, \"hidden_act\": \"relu\"}", KILN_ERR_UNSUPPORTED,
         "\"hidden_act\" is \"relu\", only \"gelu\" is supported"},
        {"{\"vocab_size\": 10, \"hidden_size\": 8, \"num_hidden_layers\": 1, \"num_attention_heads\": 2, "
         "\"intermediate_size\": 16, \"max_position_embeddings\": 12, \"layer_norm_eps\": -1}", KILN_ERR_CORRUPT,
         "\"layer_norm_eps\" must be a number"},
        /* sizes that disagree with the weights */
        {"{\"vocab_size\": 11, \"hidden_size\": 8, \"num_hidden_layers\": 1, \"num_attention_heads\": 2, "
         "\"intermediate_size\": 16, \"max_position_embeddings\": 12}", KILN_ERR_SHAPE,
         "'embeddings.word_embeddings.weight' has shape [10, 8], the config asks for [11, 8]"},
        {"{\"vocab_size\": 10, \"hidden_size\": 8, \"num_hidden_layers\": 2, \"num_attention_heads\": 2, "
         "\"intermediate_size\": 16, \"max_position_embeddings\": 12}", KILN_ERR_SHAPE, "no tensor 'encoder.layer.1."},
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        write_text(dir, "config.json", bad[i].text);
        EXPECT_LOAD_ERROR(dir, bad[i].st, bad[i].why);
        KT_CHECK_MSG(strstr(kiln_last_error(), i < 17 ? "config.json" : "model.safetensors") != NULL, "case %zu: %s", i,
                     kiln_last_error());
    }
    write_text(dir, "config.json", TINY_CONFIG);
    write_text(dir, "1_Pooling/config.json", "{\"word_embedding_dimension\": 8, \"pooling_mode_cls_token\": true, \"pooling_mode_mean_tokens\": false}");
    EXPECT_LOAD_ERROR(dir, KILN_ERR_UNSUPPORTED, "\"pooling_mode_cls_token\" is true: only mean pooling");
    write_text(dir, "1_Pooling/config.json", "{\"word_embedding_dimension\": 384, \"pooling_mode_mean_tokens\": true}");
    EXPECT_LOAD_ERROR(dir, KILN_ERR_SHAPE, "word_embedding_dimension 384 differs from hidden_size 8");
    write_text(dir, "1_Pooling/config.json", "{\"word_embedding_dimension\": 8, \"pooling_mode_mean_tokens\": 1}");
    EXPECT_LOAD_ERROR(dir, KILN_ERR_CORRUPT, "\"pooling_mode_mean_tokens\" is not true or false");
    write_text(dir, "1_Pooling/config.json", "[");
    EXPECT_LOAD_ERROR(dir, KILN_ERR_CORRUPT, "1_Pooling/config.json: not a JSON object");
    /* no pooling config: a plain BERT folder, mean pooling */
    char path[256];
    snprintf(path, sizeof path, "%s/1_Pooling/config.json", dir);
    KT_CHECK(unlink(path) == 0);
    kiln_bert *m = kiln_bert_load(dir);
    KT_CHECK_MSG(m != NULL, "%s", kiln_last_error());
    kiln_bert_free(m);
    /* a directory where config.json should be */
    snprintf(path, sizeof path, "%s/config.json", dir);
    KT_CHECK(unlink(path) == 0 && mkdir(path, 0700) == 0);
    EXPECT_LOAD_ERROR(dir, KILN_ERR_IO, "config.json: cannot open");
    rmdir(path);
    KT_MEM_CHECK();
}

KT_TEST(input_errors) {
    kt_mem_begin();
    kiln_bert *m = kiln_bert_load(write_tiny("inputs", EDIT_NONE, NULL));
    KT_CHECK_MSG(m != NULL, "%s", kiln_last_error());
    int64_t ids[4] = {1, 5, 2, 0};
    kiln_token_batch b = tiny_batch(1, 4, ids);
    KT_READ_ERROR(kiln_bert_embed(NULL, kiln_ref(b.input_ids), kiln_ref(b.attention_mask), KILN_NONE), KILN_ERR_NULL,
                  "kiln_bert_embed");
    KT_READ_ERROR(kiln_bert_embed(m, kiln_cast(kiln_ref(b.input_ids), KILN_F32), kiln_ref(b.attention_mask), KILN_NONE),
                  KILN_ERR_DTYPE, "kiln_bert_embed");
    KT_READ_ERROR(kiln_bert_embed(m, kiln_reshape(kiln_ref(b.input_ids), KILN_SHAPE(4)), kiln_ref(b.attention_mask), KILN_NONE),
                  KILN_ERR_SHAPE, "kiln_bert_embed");
    KT_READ_ERROR(kiln_bert_forward(m, kiln_ref(b.input_ids), kiln_reshape(kiln_ref(b.attention_mask), KILN_SHAPE(2, 2)),
                                    KILN_NONE),
                  KILN_ERR_SHAPE, "kiln_bert_forward");
    int64_t long_ids[T_POS + 1];
    for (int i = 0; i <= T_POS; i++) long_ids[i] = 1;
    kiln_token_batch l = tiny_batch(1, T_POS + 1, long_ids);
    KT_READ_ERROR(kiln_bert_embed(m, l.input_ids, l.attention_mask, l.token_type_ids), KILN_ERR_SHAPE, "kiln_bert_embed");
    /* an id past the vocabulary: found when the lookup runs, reported as the embedding call */
    int64_t big[2] = {1, T_VOCAB};
    kiln_token_batch g = tiny_batch(1, 2, big);
    kiln_tensor e = kiln_bert_embed(m, g.input_ids, g.attention_mask, g.token_type_ids);
    float out[T_H];
    KT_CHECK(kiln_into_data(e, out, sizeof out) != KILN_OK);
    KT_CHECK_MSG(strstr(kiln_last_error(), "kiln_bert_embed") != NULL, "%s", kiln_last_error());
    kiln_token_batch_release(&b);
    kiln_bert_free(m);
    KT_MEM_CHECK();
}

/* The tiny model's embedding of b (not consumed) into out[T_H]. */
static void tiny_embed(kiln_bert *m, const kiln_token_batch *b, float *out) {
    KT_CHECK(kiln_into_data(kiln_bert_embed(m, kiln_ref(b->input_ids), kiln_ref(b->attention_mask), KILN_NONE), out,
                            T_H * sizeof *out) == KILN_OK);
}

static double cosine(const float *a, const float *b) {
    double dot = 0, na = 0, nb = 0;
    for (int i = 0; i < T_H; i++) dot += (double)a[i] * b[i], na += (double)a[i] * a[i], nb += (double)b[i] * b[i];
    return dot / sqrt(na * nb);
}

/* kiln_bert_quantize_dynamic frees the f32 weights it replaces (query/key/value, attention
 * output, intermediate, output: four int8 weights with their scales in, the scales holding the
 * biases, and four f32 weights and their four biases out; most
 * f32 weights are views of the mapped file, so the count of live tensors shows it, not the
 * allocator's bytes), and the embedding stays close to f32's. */
KT_TEST(quantize_frees_f32_weights) {
    kiln_bert *m = kiln_bert_load(write_tiny("quantized", EDIT_NONE, NULL));
    KT_CHECK_MSG(m != NULL, "%s", kiln_last_error());
    if (!m) return;
    int64_t ids[4] = {1, 5, 2, 0};
    kiln_token_batch b = tiny_batch(1, 4, ids);
    float f32[T_H], i8[T_H];
    tiny_embed(m, &b, f32);
    kiln_memory_stats before = kiln_memory_stats_get(KILN_CPU);
    KT_CHECK(kiln_bert_quantize_dynamic(m, KILN_QUANT_I8) == KILN_OK);
    kiln_memory_stats after = kiln_memory_stats_get(KILN_CPU);
    KT_CHECK_MSG(after.live_tensors == before.live_tensors, "%llu live tensors, %llu before",
                 (unsigned long long)after.live_tensors, (unsigned long long)before.live_tensors);
    tiny_embed(m, &b, i8);
    KT_CHECK_MSG(cosine(f32, i8) > 0.99, "cosine %g", cosine(f32, i8));
    KT_CHECK(kiln_bert_quantize_dynamic(m, KILN_QUANT_I8) == KILN_OK); /* again: nothing changes */
    kiln_token_batch_release(&b);
    kiln_bert_free(m);
}

/* kiln_bert_to_dtype(KILN_BF16) replaces every weight one for one (the same count of live
 * tensors), lets go of the mapped file, and embeds within bf16's error of f32; bad input. */
KT_TEST(bf16_weights) {
    const char *dir = write_tiny("bf16", EDIT_NONE, NULL);
    kiln_bert *m = kiln_bert_load(dir);
    KT_CHECK_MSG(m != NULL, "%s", kiln_last_error());
    if (!m) return;
    int64_t ids[4] = {1, 5, 2, 0};
    kiln_token_batch b = tiny_batch(1, 4, ids);
    float f32[T_H], bf[T_H];
    tiny_embed(m, &b, f32);
    KT_CHECK(file_is_mapped(dir));
    KT_CHECK(kiln_bert_to_dtype(m, KILN_F32) == KILN_OK); /* already f32: nothing changes */
    kiln_memory_stats before = kiln_memory_stats_get(KILN_CPU);
    KT_CHECK_MSG(kiln_bert_to_dtype(m, KILN_BF16) == KILN_OK, "%s", kiln_last_error());
    kiln_memory_stats after = kiln_memory_stats_get(KILN_CPU);
    KT_CHECK_MSG(after.live_tensors == before.live_tensors, "%llu live tensors, %llu before",
                 (unsigned long long)after.live_tensors, (unsigned long long)before.live_tensors);
    KT_CHECK_MSG(!file_is_mapped(dir), "%s still mapped", dir);
    tiny_embed(m, &b, bf);
    KT_CHECK_MSG(cosine(f32, bf) > 0.999, "cosine %g", cosine(f32, bf));
    KT_CHECK(kiln_bert_to_dtype(m, KILN_BF16) == KILN_OK); /* again: nothing changes */
    int line = __LINE__ + 1;
    KT_CHECK(kiln_bert_to_dtype(m, KILN_F32) == KILN_ERR_INVALID_ARGUMENT);
    KT_EXPECT_ERROR(KILN_ERR_INVALID_ARGUMENT, "kiln_bert_to_dtype", line);
    line = __LINE__ + 1;
    KT_CHECK(kiln_bert_quantize_dynamic(m, KILN_QUANT_I8) == KILN_ERR_UNSUPPORTED);
    KT_EXPECT_ERROR(KILN_ERR_UNSUPPORTED, "bf16", line);
    line = __LINE__ + 1;
    KT_CHECK(kiln_bert_to_dtype(NULL, KILN_BF16) == KILN_ERR_NULL);
    KT_EXPECT_ERROR(KILN_ERR_NULL, "kiln_bert_to_dtype", line);
    kiln_bert_free(m);
    /* an int8 model, another dtype, a freed model */
    m = kiln_bert_load(dir);
    KT_CHECK(m && kiln_bert_quantize_dynamic(m, KILN_QUANT_I8) == KILN_OK);
    line = __LINE__ + 1;
    KT_CHECK(kiln_bert_to_dtype(m, KILN_BF16) == KILN_ERR_UNSUPPORTED);
    KT_EXPECT_ERROR(KILN_ERR_UNSUPPORTED, "int8", line);
    line = __LINE__ + 1;
    KT_CHECK(kiln_bert_to_dtype(m, (kiln_dtype)99) == KILN_ERR_INVALID_ARGUMENT);
    KT_EXPECT_ERROR(KILN_ERR_INVALID_ARGUMENT, "kiln_bert_to_dtype", line);
    kiln_bert_free(m);
    line = __LINE__ + 1;
    KT_CHECK(kiln_bert_to_dtype(m, KILN_BF16) == KILN_ERR_STALE_HANDLE);
    KT_EXPECT_ERROR(KILN_ERR_STALE_HANDLE, "kiln_bert_to_dtype", line);
    kiln_token_batch_release(&b);
}

/* A freed model is refused like every object a user frees (issue 23): use after free and a
 * second free are errors naming the call and the free, never a crash. */
KT_TEST(use_after_free) {
    kiln_bert *m = kiln_bert_load(write_tiny("freed", EDIT_NONE, NULL));
    KT_CHECK_MSG(m != NULL, "%s", kiln_last_error());
    int64_t ids[4] = {1, 5, 2, 0};
    kiln_token_batch b = tiny_batch(1, 4, ids);
    kiln_bert_free(m);
    char freed_here[64];
    snprintf(freed_here, sizeof freed_here, "test_bert.c:%d", __LINE__ - 2);
    KT_READ_ERROR(kiln_bert_embed(m, kiln_ref(b.input_ids), kiln_ref(b.attention_mask), KILN_NONE), KILN_ERR_STALE_HANDLE,
                  "kiln_bert_embed");
    KT_READ_ERROR(kiln_bert_forward(m, kiln_ref(b.input_ids), kiln_ref(b.attention_mask), KILN_NONE), KILN_ERR_STALE_HANDLE,
                  "kiln_bert_forward");
    KT_CHECK(kiln_bert_get_config(m).hidden_size == 0 && kiln_last_status() == KILN_ERR_STALE_HANDLE);
    KT_CHECK_MSG(strstr(kiln_last_error(), freed_here) != NULL, "%s lacks %s", kiln_last_error(), freed_here);
    KT_CHECK(kiln_bert_quantize_dynamic(m, KILN_QUANT_I8) == KILN_ERR_STALE_HANDLE);
    kiln_bert_free(m);
    KT_CHECK(kiln_last_status() == KILN_ERR_STALE_HANDLE);
    KT_CHECK_MSG(strstr(kiln_last_error(), "kiln_bert_free") && strstr(kiln_last_error(), "freed by kiln_bert_free"), "%s",
                 kiln_last_error());
    kiln_token_batch_release(&b);
}

/* kiln_tensors_save, which examples/embed writes its embeddings with: any layout, read back
 * exactly; bad names and poisoned tensors are errors naming it and this line. */
KT_TEST(tensors_save) {
    kt_mem_begin();
    char path[200], why[256];
    snprintf(path, sizeof path, "%s/saved.safetensors", tmp_dir);
    kiln_tensor e = kiln_transpose(kiln_reshape(kiln_arange(KILN_CPU, KILN_F32, 0, 6, 1), KILN_SHAPE(2, 3)), 0, 1);
    kiln_tensor ids = kiln_arange(KILN_CPU, KILN_I64, 5, 9, 1);
    kiln_tensor ts[2] = {e, ids};
    const char *names[2] = {"embeddings", "ids"};
    KT_CHECK_MSG(kiln_tensors_save(path, 2, names, ts) == KILN_OK, "%s", kiln_last_error());
    kiln__st_file f;
    KT_CHECK_MSG(kiln__st_read(path, &f, why, sizeof why) == KILN_OK, "%s", why);
    const kiln__st_tensor *a = kiln__st_find(&f, "embeddings"), *b = kiln__st_find(&f, "ids");
    KT_CHECK(f.n_tensors == 2 && a && b);
    if (a && b) {
        KT_CHECK(a->kiln_dtype == KILN_F32 && a->ndim == 2 && a->shape[0] == 3 && a->shape[1] == 2);
        float want[6] = {0, 3, 1, 4, 2, 5}, got[6];
        memcpy(got, f.data + a->begin, sizeof got);
        KT_CHECK(memcmp(got, want, sizeof got) == 0);
        int64_t wi[4] = {5, 6, 7, 8}, gi[4];
        memcpy(gi, f.data + b->begin, sizeof gi);
        KT_CHECK(b->kiln_dtype == KILN_I64 && memcmp(gi, wi, sizeof gi) == 0);
    }
    kiln__st_free(&f);
    int line = __LINE__ + 1;
    KT_CHECK(kiln_tensors_save(path, 2, (const char *[]){"x", "x"}, ts) == KILN_ERR_INVALID_ARGUMENT);
    KT_EXPECT_ERROR(KILN_ERR_INVALID_ARGUMENT, "name 'x' is repeated", line);
    KT_CHECK(kiln_tensors_save(path, 1, (const char *[]){""}, ts) == KILN_ERR_INVALID_ARGUMENT);
    KT_CHECK(kiln_tensors_save(NULL, 1, names, ts) == KILN_ERR_NULL);
    kiln_tensor poisoned = kiln_add(kiln_ref(e), kiln_ones(KILN_CPU, KILN_F32, KILN_SHAPE(5)));
    KT_CHECK(kiln_tensors_save(path, 1, names, &poisoned) == KILN_ERR_SHAPE); /* the tensor's own error */
    KT_CHECK_MSG(strstr(kiln_last_error(), "kiln_add") != NULL, "%s", kiln_last_error());
    kiln_release(poisoned);
    kiln_release(e), kiln_release(ids);
    KT_MEM_CHECK();
}

/* kiln_bert_embed runs a padded batch over its tokens alone (the padded rows gathered out, each
 * sentence's attention within its own rows: bert_batch.c): each sentence's embedding is the one
 * it gets alone, in any row, beside a row whose mask hides everything (embedded as zeros, as by
 * the padded path), in f32 and int8; and a batch with no token at all takes the padded path. */
static void check_packed_batch(bool int8) {
    kiln_bert *m = kiln_bert_load(write_tiny("good", EDIT_NONE, NULL));
    KT_CHECK_MSG(m != NULL, "%s", kiln_last_error());
    if (!m) return;
    if (int8) KT_CHECK(kiln_bert_quantize_dynamic(m, KILN_QUANT_I8) == KILN_OK);
    int64_t one[3] = {1, 5, 2}, two[5] = {1, 7, 3, 9, 2}, three[4] = {1, 8, 6, 2};
    float e1[T_H], e2[T_H], e3[T_H], got[4 * T_H];
    kiln_token_batch a = tiny_batch(1, 3, one), b = tiny_batch(1, 5, two), d = tiny_batch(1, 4, three);
    KT_CHECK(kiln_into_data(kiln_bert_embed(m, a.input_ids, a.attention_mask, a.token_type_ids), e1, sizeof e1) == KILN_OK);
    KT_CHECK(kiln_into_data(kiln_bert_embed(m, b.input_ids, b.attention_mask, b.token_type_ids), e2, sizeof e2) == KILN_OK);
    KT_CHECK(kiln_into_data(kiln_bert_embed(m, d.input_ids, d.attention_mask, d.token_type_ids), e3, sizeof e3) == KILN_OK);
    /* rows: nothing (mask all 0, ids not 0), the long one, the short one padded, the middle one */
    int64_t ids[20] = {1, 4, 4, 4, 2, 1, 7, 3, 9, 2, 1, 5, 2, 0, 0, 1, 8, 6, 2, 0};
    int64_t mask[20] = {0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 1, 1, 1, 1, 0};
    kiln_tensor e = kiln_bert_embed(m, kiln_from_data(KILN_CPU, KILN_I64, KILN_SHAPE(4, 5), ids),
                                    kiln_from_data(KILN_CPU, KILN_I64, KILN_SHAPE(4, 5), mask), KILN_NONE);
    KT_CHECK_MSG(kiln_into_data(e, got, sizeof got) == KILN_OK, "%s", kiln_last_error());
    for (int i = 0; i < T_H; i++) {
        KT_NEAR(got[i], 0.0, 0);
        KT_NEAR(got[T_H + i], e2[i], 1e-6);
        KT_NEAR(got[2 * T_H + i], e1[i], 1e-6);
        KT_NEAR(got[3 * T_H + i], e3[i], 1e-6);
    }
    int64_t none[6] = {0};
    e = kiln_bert_embed(m, kiln_from_data(KILN_CPU, KILN_I64, KILN_SHAPE(2, 3), ids),
                        kiln_from_data(KILN_CPU, KILN_I64, KILN_SHAPE(2, 3), none), KILN_NONE);
    KT_CHECK_MSG(kiln_into_data(e, got, 2 * T_H * sizeof *got) == KILN_OK, "%s", kiln_last_error());
    for (int i = 0; i < 2 * T_H; i++) KT_NEAR(got[i], 0.0, 0);
    kiln_bert_free(m);
}

KT_TEST(padded_batches_pack_tokens) {
    kt_mem_begin();
    check_packed_batch(false);
    check_packed_batch(true);
    KT_MEM_CHECK();
}

/* Out of memory at each allocation of a load in turn (kiln_debug_fail_alloc_after): the load
 * fails with an error, or it succeeds with a model that embeds as a clean load's does. Never a
 * crash (the packed weights' buffer, or the file's mapping, freed twice when a handle could not
 * be made for the tensor over it) nor a loaded model with a poisoned weight (a view of the
 * packed buffer that could not be made). */
KT_TEST(load_out_of_memory) {
    kt_mem_begin();
    const char *dir = write_tiny("oom", EDIT_NONE, NULL);
    int64_t ids[3] = {1, 5, 2};
    float want[T_H], got[T_H];
    kiln_bert *m = kiln_bert_load(dir);
    KT_CHECK_MSG(m != NULL, "%s", kiln_last_error());
    if (!m) return;
    kiln_token_batch a = tiny_batch(1, 3, ids);
    KT_CHECK(kiln_into_data(kiln_bert_embed(m, a.input_ids, a.attention_mask, a.token_type_ids), want, sizeof want) == KILN_OK);
    kiln_bert_free(m);
    int failed = 0, clean = 0;
    for (int64_t n = 1; n <= 2000 && clean < 20; n++) {
        kiln_debug_fail_alloc_after(n);
        m = kiln_bert_load(dir);
        kiln_debug_fail_alloc_after(0);
        if (!m) {
            failed++, clean = 0;
            continue;
        }
        clean++;
        kiln_token_batch b = tiny_batch(1, 3, ids);
        kiln_status st = kiln_into_data(kiln_bert_embed(m, b.input_ids, b.attention_mask, b.token_type_ids), got, sizeof got);
        KT_CHECK_MSG(st == KILN_OK, "allocation %lld failed, the load did not, the embedding: %s", (long long)n,
                     kiln_last_error());
        for (int d = 0; st == KILN_OK && d < T_H; d++) KT_NEAR(got[d], want[d], 1e-6);
        kiln_bert_free(m);
    }
    KT_CHECK(failed > 0 && clean == 20);
    (void)kiln_sync(); /* (the failed loads' errors) */
    KT_MEM_CHECK();
}

int main(int argc, char **argv) {
    if (argc == 2 && strcmp(argv[1], "--reference") == 0) {
        model_dir = mr_model_dir();
        if (!model_dir) return mr_skip();
        KT_RUN(reference_embeddings);
        return kt_finish();
    }
    if (argc == 2 && strcmp(argv[1], "--reference-bf16") == 0) {
        model_dir = mr_model_dir();
        if (!model_dir) return mr_skip();
        KT_RUN(reference_embeddings_bf16);
        return kt_finish();
    }
    snprintf(tmp_dir, sizeof tmp_dir, "/tmp/kiln_bert_XXXXXX");
    if (!mkdtemp(tmp_dir)) return perror("mkdtemp"), 1;
    KT_RUN(tiny_model_loads_and_pools);
    KT_RUN(padded_batches_pack_tokens);
    KT_RUN(tensor_errors);
    KT_RUN(config_errors);
    KT_RUN(input_errors);
    KT_RUN(tensors_save);
    KT_RUN(use_after_free);
    KT_RUN(quantize_frees_f32_weights);
    KT_RUN(bf16_weights);
    KT_RUN(load_out_of_memory);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmp_dir);
    if (system(cmd) != 0) fprintf(stderr, "  could not remove %s\n", tmp_dir);
    return kt_finish();
}
