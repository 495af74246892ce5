/* MLP (DESIGN.md §4): 12 x (Linear(2048,2048) + ReLU) on [128,2048] f32.
 * --autodiff: weights and biases require gradients; each run is forward + sum + backward. */
#include "bench.h"

#define LAYERS 12
#define WIDTH 2048

int main(int argc, char **argv) {
    int runs = bench_runs(argc, argv, 10);
    kiln_device dev = bench_device(argc, argv);
    bool autodiff = bench_flag(argc, argv, "--autodiff");
    double *ms = malloc(sizeof(double) * (size_t)runs);
    kiln_tensor w[LAYERS], b[LAYERS];
    double bound = 1.0 / 45.25; /* 1/sqrt(2048), like torch's default init */
    for (int l = 0; l < LAYERS; l++) {
        w[l] = kiln_uniform(dev, KILN_F32, KILN_SHAPE(WIDTH, WIDTH), -bound, bound, 10 + (uint64_t)l);
        b[l] = kiln_uniform(dev, KILN_F32, KILN_SHAPE(WIDTH), -bound, bound, 100 + (uint64_t)l);
        if (autodiff) bench_check(kiln_require_grad(w[l]), "w"), bench_check(kiln_require_grad(b[l]), "b");
    }
    kiln_tensor x = kiln_randn(dev, KILN_F32, KILN_SHAPE(128, WIDTH), 1);
    bench_check(kiln_sync(), "init");
    for (int r = -2; r < runs; r++) {
        double t0 = bench_now_ms();
        kiln_tensor h = kiln_ref(x);
        for (int l = 0; l < LAYERS; l++) h = kiln_relu(kiln_linear(h, kiln_ref(w[l]), kiln_ref(b[l])));
        if (autodiff) {
            kiln_grads *g = NULL;
            bench_check(kiln_backward(kiln_sum(h), &g), "backward");
            bench_check(kiln_sync(), "mlp");
            kiln_grads_free(g);
        } else {
            bench_check(kiln_sync(), "mlp");
            kiln_release(h);
        }
        if (r >= 0) ms[r] = bench_now_ms() - t0;
    }
    bench_report(autodiff ? "mlp_autodiff" : "mlp_inference", bench_quantile(ms, runs, 0.5), NULL);
    for (int l = 0; l < LAYERS; l++) kiln_release(w[l]), kiln_release(b[l]);
    kiln_release(x);
    free(ms);
    return 0;
}
