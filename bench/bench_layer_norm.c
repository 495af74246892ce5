/* Layer norm over the last dim of [1024, 384] f32 (MiniLM's hidden states for 8 sequences of
 * 128 tokens), inference: the composition a user writes (mean, subtract, square, mean, add eps,
 * rsqrt, multiply, weight, bias) with substitution on (run as kiln's fused kernel) and off (as
 * written, fused by kiln's elementwise fusion), and kiln_layer_norm; the three alternate round by
 * round in one process. 100 calls per round, then a sync: ms per call, median over rounds.
 * bench/python/layer_norm.py is the PyTorch eager peer on the same shapes. */
#include "bench.h"

#include "engine/substitute.h"

enum { SUBSTITUTED, AS_WRITTEN, LAYER_NORM_FN, N_WAYS };
static const char *const way_name[N_WAYS] = {"layer_norm_composed_substituted", "layer_norm_composed_as_written",
                                             "layer_norm_fn"};

static kiln_tensor composed(kiln_tensor x, kiln_tensor w, kiln_tensor b) {
    kiln_tensor mean = kiln_mean_dims(kiln_ref(x), (kiln_dims){1, {-1}}, true);
    kiln_tensor xc = kiln_sub(x, mean);
    kiln_tensor var = kiln_mean_dims(kiln_mul(kiln_ref(xc), kiln_ref(xc)), (kiln_dims){1, {-1}}, true);
    kiln_tensor y = kiln_mul(xc, kiln_rsqrt(kiln_add_scalar(var, 1e-12)));
    return kiln_add(kiln_mul(y, w), b);
}

int main(int argc, char **argv) {
    int runs = bench_runs(argc, argv, 15);
    const int calls = 100;
    kiln_tensor x = kiln_randn(KILN_CPU, KILN_F32, KILN_SHAPE(1024, 384), 1);
    kiln_tensor w = kiln_randn(KILN_CPU, KILN_F32, KILN_SHAPE(384), 2), b = kiln_randn(KILN_CPU, KILN_F32, KILN_SHAPE(384), 3);
    bench_check(kiln_sync(), "init");
    double *ms[N_WAYS];
    for (int k = 0; k < N_WAYS; k++) ms[k] = malloc(sizeof(double) * (size_t)runs);
    int64_t replaced[N_WAYS] = {0};
    for (int r = -2; r < runs; r++)
        for (int k = 0; k < N_WAYS; k++) {
            kiln__subst_set_enabled(k != AS_WRITTEN);
            kiln__subst_stats_reset();
            double t0 = bench_now_ms();
            for (int i = 0; i < calls; i++) {
                kiln_tensor y = k == LAYER_NORM_FN ? kiln_layer_norm(kiln_ref(x), KILN_SHAPE(384), kiln_ref(w), kiln_ref(b), 1e-12)
                                                   : composed(kiln_ref(x), kiln_ref(w), kiln_ref(b));
                kiln_release(y);
            }
            bench_check(kiln_sync(), way_name[k]);
            if (r >= 0) ms[k][r] = (bench_now_ms() - t0) / calls;
            replaced[k] = kiln__subst_stats_get().substituted;
        }
    for (int k = 0; k < N_WAYS; k++) {
        char extra[128];
        snprintf(extra, sizeof extra, ",\"replaced_per_round\":%lld,\"threads\":%d", (long long)replaced[k], kiln_num_threads());
        bench_report(way_name[k], bench_quantile(ms[k], runs, 0.5), extra);
        free(ms[k]);
    }
    kiln_release(x), kiln_release(w), kiln_release(b);
    return 0;
}
