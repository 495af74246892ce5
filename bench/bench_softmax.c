/* Softmax inference on [128,128,2048] f32 (DESIGN.md §4): exp(log_softmax(x)) with
 * log_softmax(x) = x - log(sum(exp(x), -1, keepdim)), written with kiln ops. */
#include "bench.h"

static kiln_tensor softmax_composed(kiln_tensor x) {
    kiln_tensor lse = kiln_log(kiln_sum_dims(kiln_exp(kiln_ref(x)), KILN_DIMS(-1), true));
    return kiln_exp(kiln_sub(x, lse));
}

int main(int argc, char **argv) {
    int runs = bench_runs(argc, argv, 10);
    double *ms = malloc(sizeof(double) * (size_t)runs);
    kiln_tensor x = kiln_randn(KILN_CPU, KILN_F32, KILN_SHAPE(128, 128, 2048), 1);
    bench_check(kiln_sync(), "init");
    for (int r = -2; r < runs; r++) {
        double t0 = bench_now_ms();
        kiln_tensor y = softmax_composed(kiln_ref(x));
        bench_check(kiln_sync(), "softmax");
        if (r >= 0) ms[r] = bench_now_ms() - t0;
        kiln_release(y);
    }
    bench_report("softmax_inference", bench_quantile(ms, runs, 0.5), NULL);
    kiln_release(x);
    free(ms);
    return 0;
}
