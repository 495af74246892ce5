/* MLP (DESIGN.md §4): 12 x (Linear(2048,2048) + ReLU) on [128,2048] f32.
 * --autodiff: weights and biases require gradients; each run is forward + sum + backward.
 * --batch B --width W --gelu: another shape (rows B, features W) and GELU for ReLU, e.g. a
 * product larger than L2 (--batch 16384 --width 256: 16 MiB per layer).
 * Inference also times, in the same runs and interleaved with the MLP: the 12 GEMMs alone
 * (h @ w^T of the same shapes and layouts through the same BLAS, no bias, no activation:
 * "gemms_ms", the floor matmul epilogues aim at) and, when fusion is on, the MLP with fusion
 * turned off in-process ("unfused_ms"); and the CPU time of each (all threads: steadier than
 * the wall clock on a loaded machine, best read with one thread). --autodiff with fusion on
 * likewise times a run with fusion off after each fused one ("unfused_ms"): in one process,
 * alternated run by run, the two see the same machine (separate processes on a shared 2-core
 * machine moved by more than the difference measured).
 * --dtype bf16|f16: weights, biases and input in that dtype (f32 sums in the products).
 * --autocast: f32 weights, the forward pass under kiln_autocast_begin(KILN_BF16) (products in
 * bf16), the loss summed in f32, as PyTorch's torch.autocast("cpu", bfloat16).
 * --step (with --autodiff): an SGD step (lr 1e-6) after each backward, as a training loop has:
 * the parameters change every run, so autocast's kept bf16 copies (api/autocast_cache.c) are
 * made again every run, as they would be in training. */
#include <math.h>

#include "bench.h"

#define LAYERS 12

static kiln_tensor w[LAYERS], b[LAYERS];
static bool use_gelu, use_autocast;
static kiln_optimizer *opt; /* --step */

static int64_t int_arg(int argc, char **argv, const char *name, int64_t fallback) {
    for (int i = 1; i + 1 < argc; i++)
        if (strcmp(argv[i], name) == 0) return atoll(argv[i + 1]);
    return fallback;
}

static kiln_tensor layer(kiln_tensor h, int l) {
    h = kiln_linear(h, kiln_ref(w[l]), kiln_ref(b[l]));
    return use_gelu ? kiln_gelu(h) : kiln_relu(h);
}

/* One inference pass (gemms_only: the products alone, h @ w^T without bias or ReLU); its CPU
 * time in *cpu. */
static double inference_once(kiln_tensor x, bool gemms_only, double *cpu) {
    double t0 = bench_now_ms(), c0 = bench_cpu_ms();
    kiln_tensor h = kiln_ref(x);
    if (use_autocast) kiln_autocast_begin(KILN_BF16);
    for (int l = 0; l < LAYERS; l++)
        h = gemms_only ? kiln_matmul(h, kiln_transpose(kiln_ref(w[l]), 0, 1)) : layer(h, l);
    if (use_autocast) kiln_autocast_end();
    bench_check(kiln_sync(), "mlp");
    kiln_release(h);
    *cpu = bench_cpu_ms() - c0;
    return bench_now_ms() - t0;
}

static double mlp_autodiff_once(kiln_tensor x) {
    double t0 = bench_now_ms();
    kiln_tensor h = kiln_ref(x);
    if (use_autocast) kiln_autocast_begin(KILN_BF16);
    for (int l = 0; l < LAYERS; l++) h = layer(h, l);
    if (use_autocast) kiln_autocast_end();
    kiln_grads *g = NULL;
    bench_check(kiln_backward(kiln_sum(kiln_cast(h, KILN_F32)), &g), "backward");
    if (opt) bench_check(kiln_optimizer_step(opt, g), "step");
    bench_check(kiln_sync(), "mlp");
    kiln_grads_free(g);
    return bench_now_ms() - t0;
}

int main(int argc, char **argv) {
    int runs = bench_runs(argc, argv, 10);
    kiln_device dev = bench_device(argc, argv);
    bool autodiff = bench_flag(argc, argv, "--autodiff");
    bool fused = kiln_fusion_enabled();
    int64_t batch = int_arg(argc, argv, "--batch", 128), width = int_arg(argc, argv, "--width", 2048);
    use_gelu = bench_flag(argc, argv, "--gelu");
    use_autocast = bench_flag(argc, argv, "--autocast");
    kiln_dtype dt = KILN_F32;
    for (int i = 1; i + 1 < argc; i++)
        if (strcmp(argv[i], "--dtype") == 0) dt = strcmp(argv[i + 1], "f16") == 0 ? KILN_F16 : KILN_BF16;
    /* wall and CPU ms of the MLP, its GEMMs alone, the MLP unfused */
    double *ms = malloc(sizeof(double) * (size_t)runs * 6), *gemm_ms = ms + runs, *unfused_ms = ms + 2 * runs;
    double *cpu = ms + 3 * runs, *gemm_cpu = ms + 4 * runs, *unfused_cpu = ms + 5 * runs;
    double bound = 1.0 / sqrt((double)width); /* like torch's default init */
    for (int l = 0; l < LAYERS; l++) {
        w[l] = kiln_uniform(dev, dt, KILN_SHAPE(width, width), -bound, bound, 10 + (uint64_t)l);
        b[l] = kiln_uniform(dev, dt, KILN_SHAPE(width), -bound, bound, 100 + (uint64_t)l);
        if (autodiff) bench_check(kiln_require_grad(w[l]), "w"), bench_check(kiln_require_grad(b[l]), "b");
    }
    if (autodiff && bench_flag(argc, argv, "--step")) {
        kiln_tensor params[2 * LAYERS];
        for (int l = 0; l < LAYERS; l++) params[2 * l] = w[l], params[2 * l + 1] = b[l];
        opt = kiln_sgd_new_params(2 * LAYERS, params, (kiln_sgd_options){.lr = 1e-6});
        if (!opt) bench_check(KILN_ERR_INVALID_ARGUMENT, "sgd");
    }
    kiln_tensor x = kiln_randn(dev, dt, KILN_SHAPE(batch, width), 1);
    bench_check(kiln_sync(), "init");
    for (int r = -2; r < runs; r++) {
        if (autodiff) { /* with fusion on, an unfused run interleaved with each fused one */
            double t = mlp_autodiff_once(x), tu = 0;
            if (fused) {
                kiln_fusion_set_enabled(false);
                tu = mlp_autodiff_once(x);
                kiln_fusion_set_enabled(true);
            }
            if (r >= 0) ms[r] = t, unfused_ms[r] = tu;
            continue;
        }
        double c, cg, cu = 0;
        double t = inference_once(x, false, &c), tg = inference_once(x, true, &cg), tu = 0;
        if (fused) {
            kiln_fusion_set_enabled(false);
            tu = inference_once(x, false, &cu);
            kiln_fusion_set_enabled(true);
        }
        if (r >= 0) ms[r] = t, gemm_ms[r] = tg, unfused_ms[r] = tu, cpu[r] = c, gemm_cpu[r] = cg, unfused_cpu[r] = cu;
    }
    char extra[256] = "";
    if (!autodiff)
        snprintf(extra, sizeof extra, ",\"gemms_ms\":%.4f,\"cpu_ms\":%.2f,\"gemms_cpu_ms\":%.2f",
                 bench_quantile(gemm_ms, runs, 0.5), bench_quantile(cpu, runs, 0.5), bench_quantile(gemm_cpu, runs, 0.5));
    if (!autodiff && fused)
        snprintf(extra + strlen(extra), sizeof extra - strlen(extra), ",\"unfused_ms\":%.4f,\"unfused_cpu_ms\":%.2f",
                 bench_quantile(unfused_ms, runs, 0.5), bench_quantile(unfused_cpu, runs, 0.5));
    if (autodiff && fused)
        snprintf(extra, sizeof extra, ",\"unfused_ms\":%.4f", bench_quantile(unfused_ms, runs, 0.5));
    char name[64];
    snprintf(name, sizeof name, "%s%s%s%s", autodiff ? "mlp_autodiff" : "mlp_inference", use_autocast ? "_autocast" : "",
             dt == KILN_BF16 ? "_bf16" : dt == KILN_F16 ? "_f16" : "", opt ? "_step" : "");
    bench_report(name, bench_quantile(ms, runs, 0.5), extra);
    if (opt) kiln_optimizer_free(opt);
    for (int l = 0; l < LAYERS; l++) kiln_release(w[l]), kiln_release(b[l]);
    kiln_release(x);
    free(ms);
    return 0;
}
