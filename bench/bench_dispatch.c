/* Dispatch overhead: the frontend cost of one tiny op pushed without a sync (ns per op,
 * p50 and p99 over batches), the ops themselves running on the engine's threads; also the
 * whole cost of an op to its completion (us_per_op_done: every batch's ops and the syncs,
 * over the ops), which on a device includes its launch and wait. --device opencl.
 * --after-mean: one mean first, so that substitution has a pattern to look for (kiln's layer norm).
 * --matmul: the op is a product of [8, 8] matrices (it may start composed attention, so the
 * substitution hold takes it until the next op: KILN_SUBSTITUTE_ATTENTION=0 to compare).
 * --drop: Python's `x + y` with the result dropped (a new output each op, released at once)
 * instead of a chain written in place. */
#include "bench.h"

int main(int argc, char **argv) {
    int batches = bench_runs(argc, argv, 200);
    kiln_device dev = bench_device(argc, argv);
    const int per_batch = 1000;
    bool drop = bench_flag(argc, argv, "--drop");
    if (bench_flag(argc, argv, "--after-mean")) /* a mean first: kiln's layer norm pattern is then registered */
        kiln_release(kiln_mean(kiln_ones(dev, KILN_F32, KILN_SHAPE(8))));
    bool matmul = bench_flag(argc, argv, "--matmul");
    kiln_shape shape = matmul ? KILN_SHAPE(8, 8) : KILN_SHAPE(8);
    kiln_tensor x = kiln_ones(dev, KILN_F32, shape);
    kiln_tensor acc = kiln_zeros(dev, KILN_F32, shape);
    double *ns = malloc(sizeof(double) * (size_t)batches);
    double t_start = 0;
    for (int b = -20; b < batches; b++) { /* 20 warm-up batches */
        double t0 = bench_now_ms();
        if (b == 0) t_start = t0;
        if (drop)
            for (int i = 0; i < per_batch; i++) kiln_release(matmul ? kiln_matmul(kiln_ref(x), kiln_ref(acc)) : kiln_add(kiln_ref(x), kiln_ref(acc)));
        else
            for (int i = 0; i < per_batch; i++) acc = matmul ? kiln_matmul(acc, kiln_ref(x)) : kiln_add(acc, kiln_ref(x));
        double t1 = bench_now_ms();
        if (b >= 0) ns[b] = (t1 - t0) * 1e6 / per_batch;
        if (b % 10 == 0) bench_check(kiln_sync(), "sync"); /* keep the queue from staying full */
    }
    float v[64];
    bench_check(kiln_into_data(acc, v, sizeof(float) * (matmul ? 64 : 8)), "read");
    double done_us = (bench_now_ms() - t_start) * 1e3 / ((double)batches * per_batch);
    kiln_release(x);
    double p50 = bench_quantile(ns, batches, 0.5), p99 = bench_quantile(ns, batches, 0.99);
    char extra[128];
    snprintf(extra, sizeof extra, ",\"ns_per_op\":%.1f,\"ns_p99\":%.1f,\"us_per_op_done\":%.2f", p50, p99, done_us);
    bench_report(matmul ? "dispatch_matmul" : "dispatch", p50 * per_batch / 1e6, extra);
    free(ns);
    return 0;
}
