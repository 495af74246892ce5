/* A user's registered swish op (examples/swish_op.h: an AVX2 CPU kernel, an OpenCL kernel)
 * against kiln's composition x * sigmoid(x) and its built-in silu, on 16M f32 (64 MiB): the
 * three alternate round by round in one process, so machine load falls on each alike.
 * --autodiff: each run is forward + sum + backward (the registered op's backward is a kiln
 * composition); --device opencl runs the OpenCL kernel; --only composed|silu|registered runs
 * one, so that its peak RSS is its own (with all three the RSS is the process's, shared). */
#include "bench.h"

#include "../examples/swish_op.h"

enum { COMPOSED, SILU, REGISTERED, N_WAYS };
static const char *const way_name[N_WAYS] = {"composed", "silu", "registered"};

static kiln_tensor swish_by(int way, kiln_custom_op *op, kiln_tensor x) {
    if (way == COMPOSED) {
        kiln_tensor s = kiln_sigmoid(kiln_ref(x));
        return kiln_mul(x, s);
    }
    if (way == SILU) return kiln_silu(x);
    return kiln_custom_op_call(op, 1, &x);
}

int main(int argc, char **argv) {
    int runs = bench_runs(argc, argv, 10);
    kiln_device dev = bench_device(argc, argv);
    bool autodiff = bench_flag(argc, argv, "--autodiff");
    int only = -1;
    for (int i = 1; i + 1 < argc; i++)
        for (int w = 0; w < N_WAYS; w++)
            if (strcmp(argv[i], "--only") == 0 && strcmp(argv[i + 1], way_name[w]) == 0) only = w;
    kiln_custom_op *op = swish_register();
    if (!op) bench_check(KILN_ERR_INVALID_ARGUMENT, "registering swish");
    const int64_t n = (int64_t)16 << 20;
    double *ms[N_WAYS], *cpu[N_WAYS];
    for (int w = 0; w < N_WAYS; w++) ms[w] = malloc(sizeof(double) * (size_t)runs), cpu[w] = malloc(sizeof(double) * (size_t)runs);
    kiln_tensor x = kiln_randn(dev, KILN_F32, KILN_SHAPE(n), 1);
    if (autodiff) bench_check(kiln_require_grad(x), "require_grad");
    bench_check(kiln_sync(), "init");
    for (int r = -2; r < runs; r++)
        for (int w = 0; w < N_WAYS; w++) {
            if (only >= 0 && w != only) continue;
            double t0 = bench_now_ms(), c0 = bench_cpu_ms();
            kiln_tensor y = swish_by(w, op, kiln_ref(x));
            if (autodiff) {
                kiln_grads *g = NULL;
                bench_check(kiln_backward(kiln_sum(y), &g), "backward");
                kiln_tensor dx = kiln_grad(g, x);
                bench_check(kiln_sync(), way_name[w]);
                kiln_release(dx);
                kiln_grads_free(g);
            } else {
                bench_check(kiln_sync(), way_name[w]);
                kiln_release(y);
            }
            if (r >= 0) ms[w][r] = bench_now_ms() - t0, cpu[w][r] = bench_cpu_ms() - c0;
        }
    for (int w = 0; w < N_WAYS; w++) {
        if (only < 0 || w == only) {
            char name[64], extra[96];
            snprintf(name, sizeof name, "swish_%s_%s%s", way_name[w], autodiff ? "autodiff" : "inference",
                     dev == KILN_CPU ? "" : "_device");
            snprintf(extra, sizeof extra, ",\"cpu_ms\":%.2f", bench_quantile(cpu[w], runs, 0.5));
            bench_report(name, bench_quantile(ms[w], runs, 0.5), extra);
        }
        free(ms[w]);
        free(cpu[w]);
    }
    kiln_release(x);
    return 0;
}
