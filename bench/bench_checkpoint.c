/* Training memory (issue #28): one training step (forward, mean, backward, SGD) of a stack of
 * --layers x (Linear(--width) + GELU) on [--batch, --width] f32, default 24 x 2048, batch 512:
 *   --mode plain   nothing recomputed
 *   --mode ckpt    every block a checkpointed region (kiln_module_set_checkpoint)
 *   --mode auto    the automatic policy (kiln_checkpoint_policy_set(KILN_CHECKPOINT_AUTO))
 *   --mode ckpt+auto  both: regions, and the policy inside their recomputation
 * --region K (ckpt modes): K consecutive blocks per region instead of 1 (the last region takes
 * what is left), to measure what the number of regions alone decides.
 * Reports the median step time, what the forward pass keeps for backward (the memory in use once
 * it is done: "act_mib" kiln's own, kiln_memory_stats_get; "act_rss_mib" the resident set's), and
 * the peak of the whole step ("peak_mib"; "hwm_mib" the resident set's: VmHWM after resetting it
 * through /proc/self/clear_refs), all above what the process held before the timed steps (model,
 * optimizer, input), as bench/peers/torch_checkpoint.py measures PyTorch. The step's peak comes
 * at the end of backward, when every weight's gradient exists (24 x 16 MiB at the default
 * shape, more than the activations), so the forward's memory is where checkpointing shows.
 * One mode per process, so peaks do not mix.
 * --model encoder: instead, --layers (default 8) post-norm transformer encoder layers (PyTorch's
 * nn.TransformerEncoderLayer: d_model 256, 4 heads, feed-forward 1024, ReLU, no dropout) on
 * [batch 8, seq 512, 256], batch first; --mode ckpt checkpoints each layer. */
#include <math.h>
#include <stdio.h>

#include "bench.h"

static int64_t int_arg(int argc, char **argv, const char *name, int64_t fallback) {
    for (int i = 1; i + 1 < argc; i++)
        if (strcmp(argv[i], name) == 0) return atoll(argv[i + 1]);
    return fallback;
}

static const char *str_arg(int argc, char **argv, const char *name, const char *fallback) {
    for (int i = 1; i + 1 < argc; i++)
        if (strcmp(argv[i], name) == 0) return argv[i + 1];
    return fallback;
}

/* VmRSS or VmHWM of this process, in MiB. */
static double status_mib(const char *key) {
    FILE *f = fopen("/proc/self/status", "r");
    char line[256];
    double v = NAN;
    size_t k = strlen(key);
    while (f && fgets(line, sizeof line, f))
        if (strncmp(line, key, k) == 0) v = atof(line + k + 1) / 1024.0;
    if (f) fclose(f);
    return v;
}

static void reset_hwm(void) {
    FILE *f = fopen("/proc/self/clear_refs", "w");
    if (f) fputs("5", f), fclose(f);
}

/* x = LN1(x + MHA(x)); x = LN2(x + W2 relu(W1 x)) */
static kiln_tensor encoder_forward(kiln_module *m, kiln_tensor x, void *ctx) {
    (void)ctx;
    kiln_tensor a = kiln_module_forward(kiln_module_child(m, "self_attn"), kiln_ref(x));
    x = kiln_module_forward(kiln_module_child(m, "norm1"), kiln_add(x, a));
    kiln_tensor f = kiln_module_forward(kiln_module_child(m, "linear1"), kiln_ref(x));
    f = kiln_module_forward(kiln_module_child(m, "linear2"), kiln_relu(f));
    return kiln_module_forward(kiln_module_child(m, "norm2"), kiln_add(x, f));
}

static kiln_module *encoder_layer(int64_t d, int64_t heads, int64_t ff, uint64_t seed) {
    kiln_multihead_attention_options o = kiln_multihead_attention_defaults(d, heads);
    o.batch_first = true;
    kiln_module *m = kiln_module_new("EncoderLayer", encoder_forward, NULL, NULL);
    kiln_module_add_child(m, "self_attn", kiln_multihead_attention_new(o, seed));
    kiln_module_add_child(m, "linear1", kiln_linear_new(d, ff, true, seed + 1));
    kiln_module_add_child(m, "linear2", kiln_linear_new(ff, d, true, seed + 2));
    kiln_module_add_child(m, "norm1", kiln_layer_norm_new(d, 1e-5, true));
    kiln_module_add_child(m, "norm2", kiln_layer_norm_new(d, 1e-5, true));
    return m;
}

int main(int argc, char **argv) {
    int runs = bench_runs(argc, argv, 3);
    bool encoder = strcmp(str_arg(argc, argv, "--model", "mlp"), "encoder") == 0;
    int64_t layers = int_arg(argc, argv, "--layers", encoder ? 8 : 24), width = int_arg(argc, argv, "--width", 2048);
    int64_t batch = int_arg(argc, argv, "--batch", encoder ? 8 : 512), seq = int_arg(argc, argv, "--seq", 512);
    const char *mode = str_arg(argc, argv, "--mode", "plain");
    bool both = strcmp(mode, "ckpt+auto") == 0;
    bool ckpt = both || strcmp(mode, "ckpt") == 0, autop = both || strcmp(mode, "auto") == 0;
    int64_t per_region = int_arg(argc, argv, "--region", 1);
    if ((!ckpt && !autop && strcmp(mode, "plain") != 0) || per_region < 1) {
        fprintf(stderr, "--mode plain|ckpt|auto|ckpt+auto [--region K >= 1]\n");
        return 2;
    }
    if (autop) kiln_checkpoint_policy_set(KILN_CHECKPOINT_AUTO);
    kiln_module **blocks = calloc((size_t)layers, sizeof *blocks);
    for (int64_t l = 0; l < layers; l++) {
        kiln_module *parts[2] = {kiln_linear_new(width, width, true, (uint64_t)l + 1), kiln_gelu_new()};
        blocks[l] = encoder ? encoder_layer(256, 4, 1024, 10 * (uint64_t)l) : kiln_sequential_new(2, parts);
        if (encoder) kiln_module_free(parts[0]), kiln_module_free(parts[1]);
        if (ckpt && per_region == 1) bench_check(kiln_module_set_checkpoint(blocks[l], true), "set_checkpoint");
    }
    int64_t n_top = layers;
    if (ckpt && per_region > 1) { /* blocks grouped, each group one region */
        n_top = 0;
        for (int64_t l = 0; l < layers; l += per_region) {
            int k = (int)(layers - l < per_region ? layers - l : per_region);
            blocks[n_top] = kiln_sequential_new(k, blocks + l);
            bench_check(kiln_module_set_checkpoint(blocks[n_top++], true), "set_checkpoint");
        }
    }
    kiln_module *model = kiln_sequential_new((int)n_top, blocks);
    free(blocks);
    kiln_sgd_options so = kiln_sgd_defaults();
    so.lr = 1e-4;
    kiln_optimizer *opt = kiln_sgd_new(model, so);
    kiln_tensor x = encoder ? kiln_randn(KILN_CPU, KILN_F32, KILN_SHAPE(batch, seq, 256), 7)
                            : kiln_randn(KILN_CPU, KILN_F32, KILN_SHAPE(batch, width), 7);
    double *ms = calloc((size_t)runs, sizeof *ms), loss = NAN, base_mib = 0, rss0 = 0, act_mib = 0, act_rss = 0;
    for (int r = -1; r < runs; r++) { /* one warm-up step: the allocator's cache, BLAS buffers */
        if (r == 0) {
            kiln_sync();
            kiln_memory_reset_peak(KILN_CPU);
            base_mib = (double)kiln_memory_stats_get(KILN_CPU).bytes_in_use / 1048576.0;
            reset_hwm();
            rss0 = status_mib("VmRSS:");
        }
        double t0 = bench_now_ms();
        kiln_tensor out = kiln_mean(kiln_module_forward(model, kiln_ref(x)));
        if (r >= 0) { /* what the forward pass keeps for backward (a wait for the forward pass, timed) */
            act_mib = fmax(act_mib, (double)kiln_memory_stats_get(KILN_CPU).bytes_in_use / 1048576.0 - base_mib);
            act_rss = fmax(act_rss, status_mib("VmRSS:") - rss0);
        }
        bench_check(kiln_train_step(opt, out, &loss), "step");
        bench_check(kiln_sync(), "step");
        if (r >= 0) ms[r] = bench_now_ms() - t0;
    }
    kiln_memory_stats st = kiln_memory_stats_get(KILN_CPU);
    char extra[256];
    snprintf(extra, sizeof extra,
             ",\"mode\":\"%s\",\"region\":%lld,\"act_mib\":%.1f,\"act_rss_mib\":%.1f,\"peak_mib\":%.1f,\"hwm_mib\":%.1f,\"loss\":%.6f",
             mode, (long long)per_region, act_mib, act_rss, (double)st.peak_bytes / 1048576.0 - base_mib, status_mib("VmHWM:") - rss0, loss);
    char name[64];
    snprintf(name, sizeof name, "checkpoint_%s_%s", encoder ? "encoder" : "mlp", mode);
    bench_report(name, bench_quantile(ms, runs, 0.5), extra);
    free(ms);
    kiln_release(x);
    kiln_optimizer_free(opt);
    kiln_module_free(model);
    return 0;
}
