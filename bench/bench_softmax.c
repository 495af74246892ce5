/* Softmax on [128,128,2048] f32 (DESIGN.md §4): exp(log_softmax(x)) with
 * log_softmax(x) = x - log(sum(exp(x), -1, keepdim)), written with kiln ops.
 * --autodiff: x requires a gradient and each run is forward + sum + backward.
 * --floor: also the memory floor (softmax_floor.h): floor_ms and floor_cpu_ms, medians of as many
 * plain C passes over the same bytes on kiln's thread count, alternated with kiln's runs. */
#include "bench.h"
#include "softmax_floor.h"

static kiln_tensor softmax_composed(kiln_tensor x) {
    kiln_tensor lse = kiln_log(kiln_sum_dims(kiln_exp(kiln_ref(x)), KILN_DIMS(-1), true));
    return kiln_exp(kiln_sub(x, lse));
}

int main(int argc, char **argv) {
    int runs = bench_runs(argc, argv, 10);
    kiln_device dev = bench_device(argc, argv);
    bool autodiff = bench_flag(argc, argv, "--autodiff");
    double *ms = malloc(sizeof(double) * (size_t)runs), *cpu = malloc(sizeof(double) * (size_t)runs);
    kiln_tensor x = kiln_randn(dev, KILN_F32, KILN_SHAPE(128, 128, 2048), 1);
    if (autodiff) bench_check(kiln_require_grad(x), "require_grad");
    bench_check(kiln_sync(), "init");
    bool floor = bench_flag(argc, argv, "--floor");
    const int64_t rows = 128 * 128, cols = 2048;
    float *fx = floor ? aligned_alloc(64, sizeof(float) * (size_t)(rows * cols)) : NULL;
    float *fy = floor ? aligned_alloc(64, sizeof(float) * (size_t)(rows * cols)) : NULL;
    double *floor_ms = malloc(sizeof(double) * (size_t)runs), *floor_cpu = malloc(sizeof(double) * (size_t)runs);
    size_t floor_bytes = sizeof(float) * (size_t)(rows * cols);
    if (fx && fy) memset(fx, 0, floor_bytes), memset(fy, 0, floor_bytes);
    for (int r = -2; r < runs; r++) {
        if (fx && fy) {
            double fc, f = softmax_floor_pass(fx, fy, rows, cols, kiln_num_threads(), &fc);
            if (r >= 0) floor_ms[r] = f, floor_cpu[r] = fc;
        }
        double t0 = bench_now_ms(), c0 = bench_cpu_ms();
        kiln_tensor y = softmax_composed(kiln_ref(x));
        if (autodiff) {
            kiln_grads *g = NULL;
            bench_check(kiln_backward(kiln_sum(y), &g), "backward");
            kiln_tensor dx = kiln_grad(g, x);
            bench_check(kiln_sync(), "softmax");
            kiln_release(dx);
            kiln_grads_free(g);
        } else {
            bench_check(kiln_sync(), "softmax");
            kiln_release(y);
        }
        if (r >= 0) ms[r] = bench_now_ms() - t0, cpu[r] = bench_cpu_ms() - c0;
    }
    char extra[128]; /* CPU time of all threads: steadier than the wall clock on a shared machine */
    int len = snprintf(extra, sizeof extra, ",\"cpu_ms\":%.2f", bench_quantile(cpu, runs, 0.5));
    if (fx && fy) snprintf(extra + len, sizeof extra - (size_t)len, ",\"floor_ms\":%.2f,\"floor_cpu_ms\":%.2f",
                            bench_quantile(floor_ms, runs, 0.5), bench_quantile(floor_cpu, runs, 0.5));
    bench_report(autodiff ? "softmax_autodiff" : "softmax_inference", bench_quantile(ms, runs, 0.5), extra);
    kiln_release(x);
    free(ms);
    free(cpu);
    free(floor_ms);
    free(floor_cpu);
    free(fx);
    free(fy);
    return 0;
}
