/* Self-attention inference, softmax(q k^T / sqrt(E)) v without a mask, f32, on two shapes:
 * [8, 8, 128, 64] and MiniLM's [8, 12, 128, 32] (8 sequences of 128 tokens, 12 heads of 32).
 * Three ways alternate round by round in one process: the composition a user writes (matmul,
 * scale, softmax, matmul) with substitution on (run as kiln's fused attention), the same with
 * substitution off (as written: the scale and softmax fused into the product's group), and
 * kiln_scaled_dot_product_attention. --calls calls per round (default 10), then a sync: ms per
 * call, median over rounds. bench/python/attention.py is the PyTorch peer on the same shapes. */
#include "bench.h"

#include <math.h>

#include "engine/substitute.h"

enum { SUBSTITUTED, AS_WRITTEN, SDPA, N_WAYS };
static const char *const way_name[N_WAYS] = {"attention_composed_substituted", "attention_composed_as_written",
                                             "attention_sdpa"};

static kiln_tensor composed(kiln_tensor q, kiln_tensor k, kiln_tensor v, double scale) {
    kiln_tensor s = kiln_mul_scalar(kiln_matmul(q, kiln_transpose(k, -2, -1)), scale);
    return kiln_matmul(kiln_softmax(s, -1), v);
}

static int calls_of(int argc, char **argv) {
    for (int i = 1; i + 1 < argc; i++)
        if (strcmp(argv[i], "--calls") == 0) return atoi(argv[i + 1]);
    return 10;
}

int main(int argc, char **argv) {
    int runs = bench_runs(argc, argv, 15), calls = calls_of(argc, argv);
    static const int64_t shapes[2][4] = {{8, 8, 128, 64}, {8, 12, 128, 32}};
    for (int sh = 0; sh < 2; sh++) {
        const int64_t *d = shapes[sh];
        kiln_shape shape = KILN_SHAPE(d[0], d[1], d[2], d[3]);
        kiln_tensor q = kiln_randn(KILN_CPU, KILN_F32, shape, 1), k = kiln_randn(KILN_CPU, KILN_F32, shape, 2);
        kiln_tensor v = kiln_randn(KILN_CPU, KILN_F32, shape, 3);
        double scale = 1 / sqrt((double)d[3]);
        bench_check(kiln_sync(), "init");
        double *ms[N_WAYS];
        for (int w = 0; w < N_WAYS; w++) ms[w] = malloc(sizeof(double) * (size_t)runs);
        int64_t replaced[N_WAYS] = {0};
        for (int r = -2; r < runs; r++)
            for (int w = 0; w < N_WAYS; w++) {
                kiln__subst_set_enabled(w != AS_WRITTEN);
                kiln__subst_stats_reset();
                double t0 = bench_now_ms();
                for (int i = 0; i < calls; i++) {
                    kiln_tensor o = w == SDPA ? kiln_scaled_dot_product_attention(kiln_ref(q), kiln_ref(k), kiln_ref(v), KILN_NONE,
                                                                                  false, scale)
                                              : composed(kiln_ref(q), kiln_ref(k), kiln_ref(v), scale);
                    kiln_release(o);
                }
                bench_check(kiln_sync(), way_name[w]);
                if (r >= 0) ms[w][r] = (bench_now_ms() - t0) / calls;
                replaced[w] = kiln__subst_stats_get().substituted;
            }
        for (int w = 0; w < N_WAYS; w++) {
            char name[96], extra[160];
            snprintf(name, sizeof name, "%s_%lldx%lldx%lldx%lld", way_name[w], (long long)d[0], (long long)d[1], (long long)d[2],
                     (long long)d[3]);
            snprintf(extra, sizeof extra, ",\"replaced_per_round\":%lld,\"calls\":%d,\"threads\":%d", (long long)replaced[w], calls,
                     kiln_num_threads());
            bench_report(name, bench_quantile(ms[w], runs, 0.5), extra);
            free(ms[w]);
        }
        kiln_release(q), kiln_release(k), kiln_release(v);
    }
    kiln__subst_set_enabled(true);
    return 0;
}
