/* The Fashion-MNIST CNN's two convolutions (examples/fashion_mnist.c), one at a time:
 *   conv1: x [B, 1, 28, 28]  -> 32 channels, 3x3, pad 1, bias
 *   conv2: x [B, 32, 14, 14] -> 64 channels, 3x3, pad 1, bias
 * --layer conv1|conv2 (default conv2), --batch B (default 128), --runs N (default 20).
 * --device cpu|opencl|opencl:N (default cpu): where the tensors live.
 * --train: each run is forward + sum + backward (the weight and bias gradients, and for
 * conv2 the input gradient, as in training); otherwise forward only.
 * --autocast: the conv under kiln_autocast_begin(KILN_BF16) (f32 tensors cast to bf16, oneDNN's
 * bf16 conv where the CPU has AVX512-BF16), its output summed in f32.
 * The path is kiln's default or KILN_CONV=builtin|dnnl; the name carries which was asked:
 *   KILN_CONV=builtin ./bench_conv --train ; KILN_CONV=dnnl ./bench_conv --train */
#include "bench.h"

static const char *arg_str(int argc, char **argv, const char *flag, const char *fallback) {
    for (int i = 1; i + 1 < argc; i++)
        if (strcmp(argv[i], flag) == 0) return argv[i + 1];
    return fallback;
}

int main(int argc, char **argv) {
    int runs = bench_runs(argc, argv, 20);
    bool train = bench_flag(argc, argv, "--train"), autocast = bench_flag(argc, argv, "--autocast");
    kiln_device dev = bench_device(argc, argv);
    const char *layer = arg_str(argc, argv, "--layer", "conv2");
    int64_t batch = atoll(arg_str(argc, argv, "--batch", "128"));
    bool first = strcmp(layer, "conv1") == 0;
    if ((!first && strcmp(layer, "conv2") != 0) || batch < 1 || runs < 1) {
        fprintf(stderr, "usage: bench_conv [--layer conv1|conv2] [--batch B] [--runs N] [--device D] [--train] [--autocast]\n");
        return 2;
    }
    int64_t c = first ? 1 : 32, o = first ? 32 : 64, hw = first ? 28 : 14;
    double *ms = malloc(sizeof(double) * (size_t)runs);
    kiln_tensor x = kiln_randn(dev, KILN_F32, KILN_SHAPE(batch, c, hw, hw), 1);
    kiln_tensor w = kiln_uniform(dev, KILN_F32, KILN_SHAPE(o, c, 3, 3), -0.1, 0.1, 2);
    kiln_tensor b = kiln_uniform(dev, KILN_F32, KILN_SHAPE(o), -0.1, 0.1, 3);
    if (train) {
        bench_check(kiln_require_grad(w), "w");
        bench_check(kiln_require_grad(b), "b");
        if (!first) bench_check(kiln_require_grad(x), "x");
    }
    bench_check(kiln_sync(), "init");
    for (int r = -3; r < runs; r++) {
        double t0 = bench_now_ms();
        if (autocast) kiln_autocast_begin(KILN_BF16);
        kiln_tensor y = kiln_conv2d(kiln_ref(x), kiln_ref(w), kiln_ref(b), 1, 1, 1, 1, 1, 1, 1);
        if (autocast) kiln_autocast_end();
        if (train) {
            kiln_grads *g = NULL;
            bench_check(kiln_backward(kiln_sum(kiln_cast(y, KILN_F32)), &g), "backward");
            bench_check(kiln_sync(), "conv");
            kiln_grads_free(g);
        } else {
            bench_check(kiln_sync(), "conv");
            kiln_release(y);
        }
        if (r >= 0) ms[r] = bench_now_ms() - t0;
    }
    const char *mode = getenv(dev == KILN_CPU ? "KILN_CONV" : "KILN_OPENCL_CONV");
    char name[96], extra[96];
    snprintf(name, sizeof name, "%s_%s%s%s", layer, train ? "train" : "fwd", autocast ? "_autocast" : "",
             dev == KILN_CPU ? "" : "_device");
    snprintf(extra, sizeof extra, ",\"conv\":\"%s\",\"batch\":%lld,\"min_ms\":%.4f", mode ? mode : "default",
             (long long)batch, (bench_quantile(ms, runs, 0.0)));
    bench_report(name, bench_quantile(ms, runs, 0.5), extra);
    kiln_release(x), kiln_release(w), kiln_release(b);
    free(ms);
    return 0;
}
