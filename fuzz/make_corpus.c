/* Writes the fuzzers' seed corpus into <dir>/safetensors, <dir>/idx, <dir>/tokenizer and
 * <dir>/json: small valid files made by kiln itself (a checkpoint with optimizer state; IDX
 * images and labels, plain and, when built with zlib, gzip'd), a few sentences and a few
 * config.json files, so CI needs no committed binaries. */
#include <kiln.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#if KILN_HAVE_ZLIB
#include <zlib.h>
#endif

static int put_file(const char *path, const unsigned char *bytes, size_t n, int gz) {
#if KILN_HAVE_ZLIB
    if (gz) {
        gzFile f = gzopen(path, "wb9");
        int ok = f && gzwrite(f, bytes, (unsigned)n) == (int)n;
        return f && gzclose(f) == Z_OK && ok ? 0 : -1;
    }
#endif
    if (gz) return 0;
    FILE *f = fopen(path, "wb");
    int ok = f && fwrite(bytes, 1, n, f) == n;
    return f && fclose(f) == 0 && ok ? 0 : -1;
}

/* An IDX file of u8: magic 0x0800 | ndim, big-endian dims, then pixel(i) = 37 i % 256. */
static size_t idx(unsigned char *out, int ndim, const unsigned *dims) {
    size_t at = 0, total = 1;
    const unsigned head[] = {0x800u | (unsigned)ndim, dims[0], ndim > 1 ? dims[1] : 0, ndim > 2 ? dims[2] : 0};
    for (int k = 0; k <= ndim; k++)
        for (int b = 3; b >= 0; b--) out[at++] = (unsigned char)(head[k] >> (8 * b));
    for (int d = 0; d < ndim; d++) total *= dims[d];
    for (size_t i = 0; i < total; i++) out[at++] = (unsigned char)(37 * i % 256);
    return at;
}

int main(int argc, char **argv) {
    if (argc != 2) return fprintf(stderr, "usage: %s <dir>\n", argv[0]), 2;
    char path[1024];
    snprintf(path, sizeof path, "%s/safetensors", argv[1]);
    mkdir(argv[1], 0777), mkdir(path, 0777);
    kiln_module *layers[2] = {kiln_linear_new(3, 2, true, 1), kiln_relu_new()};
    kiln_module *m = kiln_sequential_new(2, layers);
    kiln_adam_options o = kiln_adam_defaults();
    kiln_optimizer *opt = kiln_adam_new(m, o);
    snprintf(path, sizeof path, "%s/safetensors/model.safetensors", argv[1]);
    int bad = kiln_checkpoint_save(path, m, NULL) != KILN_OK;
    snprintf(path, sizeof path, "%s/safetensors/model_adam.safetensors", argv[1]);
    bad |= kiln_checkpoint_save(path, m, opt) != KILN_OK;
    kiln_optimizer_free(opt);
    kiln_module_free(m);

    snprintf(path, sizeof path, "%s/idx", argv[1]);
    mkdir(path, 0777);
    unsigned char buf[256];
    const unsigned img_dims[] = {3, 4, 5}, lbl_dims[] = {3};
    size_t ni = idx(buf, 3, img_dims);
    for (int gz = 0; gz <= 1; gz++) {
        snprintf(path, sizeof path, "%s/idx/images%s", argv[1], gz ? ".gz" : "");
        bad |= put_file(path, buf, ni, gz) != 0;
    }
    size_t nl = idx(buf, 1, lbl_dims);
    for (int gz = 0; gz <= 1; gz++) {
        snprintf(path, sizeof path, "%s/idx/labels%s", argv[1], gz ? ".gz" : "");
        bad |= put_file(path, buf, nl, gz) != 0;
    }
    static const char *const sentences[] = {
        "The cafés, a CAFÉ.", "中文 and [MASK] x[SEP]y", "tab\tnew\nline\x01 \xE3\x80\x80 ok",
        "xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx",
        "\xF0\x9F\x98\x80 emoji \xCC\x81 e\xCC\x81", "",
    };
    snprintf(path, sizeof path, "%s/tokenizer", argv[1]);
    mkdir(path, 0777);
    for (size_t i = 0; i < sizeof sentences / sizeof sentences[0]; i++) {
        snprintf(path, sizeof path, "%s/tokenizer/sentence%zu", argv[1], i);
        bad |= put_file(path, (const unsigned char *)sentences[i], strlen(sentences[i]), 0) != 0;
    }
    static const char *const configs[] = {
        ("{\"architectures\": [\"BertModel\"], \"hidden_act\": \"gelu\", \"hidden_size\": 384, \"layer_norm_eps\": 1e-12,\n"
         " \"num_attention_heads\": 12, \"vocab_size\": 30522, \"use_cache\": true, \"x\": null}"),
        "{\"word_embedding_dimension\": 384, \"pooling_mode_cls_token\": false, \"pooling_mode_mean_tokens\": true}",
        "{\"a\": {\"b\": [1, -2.5E+3, \"\\u00e9\\ud83d\\ude00\\n\"]}, \"c\": \"\\\"q\\\"\"}",
    };
    snprintf(path, sizeof path, "%s/json", argv[1]);
    mkdir(path, 0777);
    for (size_t i = 0; i < sizeof configs / sizeof configs[0]; i++) {
        snprintf(path, sizeof path, "%s/json/config%zu", argv[1], i);
        bad |= put_file(path, (const unsigned char *)configs[i], strlen(configs[i]), 0) != 0;
    }
    if (bad) fprintf(stderr, "make_corpus: %s\n", kiln_last_error());
    return bad;
}
