/* The Fashion-MNIST CNN's training step (examples/fashion_mnist.c --model cnn: conv 1->32,
 * pool, conv 32->64, pool, linear 3136->128, linear 128->10) on a batch of random images:
 * forward, cross entropy, backward (the parameters' gradients; the optimizer step is the
 * same f32 update either way and is left out). Each round times one f32 step and one under
 * bf16 autocast (kiln_module_set_autocast: convs and linears in bf16, the loss in f32), the
 * two alternating in one process, so the machine's load falls on both alike.
 *   bench_cnn [--batch B] [--runs N] [--only f32|autocast]
 * prints cnn_step_f32, cnn_step_autocast and their ratio; --only times one of the two (for a
 * profile of it alone: KILN_PROFILE=trace.json bench_cnn --only autocast). */
#include "bench.h"

static kiln_module *cnn(void) {
    kiln_conv2d_options first = kiln_conv2d_defaults(1, 32, 3), second = kiln_conv2d_defaults(32, 64, 3);
    first.pad_h = first.pad_w = 1;
    second.pad_h = second.pad_w = 1;
    kiln_module *m[] = {kiln_conv2d_new(first, 1),   kiln_relu_new(), kiln_max_pool2d_new(2, 2, 0),
                        kiln_conv2d_new(second, 2),  kiln_relu_new(), kiln_max_pool2d_new(2, 2, 0),
                        kiln_flatten_new(1, -1),     kiln_linear_new(64 * 7 * 7, 128, true, 3),
                        kiln_relu_new(),             kiln_linear_new(128, 10, true, 4)};
    return kiln_sequential_new((int)(sizeof m / sizeof m[0]), m);
}

static double step(kiln_module *model, kiln_tensor images, kiln_tensor labels) {
    double t0 = bench_now_ms();
    kiln_tensor loss = kiln_cross_entropy(kiln_module_forward(model, kiln_ref(images)), kiln_ref(labels),
                                          kiln_cross_entropy_defaults());
    kiln_grads *g = NULL;
    bench_check(kiln_backward(loss, &g), "backward");
    bench_check(kiln_sync(), "cnn step");
    kiln_grads_free(g);
    return bench_now_ms() - t0;
}

int main(int argc, char **argv) {
    int runs = bench_runs(argc, argv, 10);
    int64_t batch = 128;
    const char *only = "";
    for (int i = 1; i + 1 < argc; i++) {
        if (strcmp(argv[i], "--batch") == 0) batch = atoll(argv[i + 1]);
        if (strcmp(argv[i], "--only") == 0) only = argv[i + 1];
    }
    bool skip[2] = {strcmp(only, "autocast") == 0, strcmp(only, "f32") == 0};
    if (batch < 1 || runs < 1 || (*only && !skip[0] && !skip[1])) {
        fprintf(stderr, "usage: bench_cnn [--batch B] [--runs N] [--only f32|autocast]\n");
        return 2;
    }
    kiln_module *f32 = cnn(), *bf16 = cnn();
    bench_check(kiln_module_set_autocast(bf16, KILN_BF16), "autocast");
    kiln_tensor images = kiln_randn(KILN_CPU, KILN_F32, KILN_SHAPE(batch, 1, 28, 28), 5);
    kiln_tensor labels = kiln_randint(KILN_CPU, KILN_I64, KILN_SHAPE(batch), 0, 10, 6);
    double *ms[2] = {malloc(sizeof(double) * (size_t)runs), malloc(sizeof(double) * (size_t)runs)};
    for (int r = -2; r < runs; r++) /* two warm-up rounds: primitive creation, allocator */
        for (int which = 0; which < 2; which++) {
            double t = skip[which] ? 0 : step(which ? bf16 : f32, images, labels);
            if (r >= 0) ms[which][r] = t;
        }
    double f = bench_quantile(ms[0], runs, 0.5), a = bench_quantile(ms[1], runs, 0.5);
    char extra[128];
    snprintf(extra, sizeof extra, ",\"batch\":%lld,\"min_ms\":%.3f", (long long)batch, bench_quantile(ms[0], runs, 0));
    bench_report("cnn_step_f32", f, extra);
    snprintf(extra, sizeof extra, ",\"batch\":%lld,\"min_ms\":%.3f,\"ratio_to_f32\":%.3f", (long long)batch,
             bench_quantile(ms[1], runs, 0), a / f);
    bench_report("cnn_step_autocast", a, extra);
    kiln_release(images), kiln_release(labels);
    kiln_module_free(f32), kiln_module_free(bf16);
    free(ms[0]), free(ms[1]);
    return 0;
}
