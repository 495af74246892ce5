/* Dispatch overhead: the frontend cost of one tiny op pushed without a sync (ns per op,
 * p50 and p99 over batches), the ops themselves running on the engine's threads; also the
 * whole cost of an op to its completion (us_per_op_done: every batch's ops and the syncs,
 * over the ops), which on a device includes its launch and wait. --device opencl.
 * --after-mean: one mean first, so that substitution has a pattern to look for (kiln's layer norm).
 * --matmul: the op is a product of [8, 8] matrices (it may start composed attention, so the
 * substitution hold takes it until the next op: KILN_SUBSTITUTE_ATTENTION=0 to compare).
 * --drop: Python's `x + y` with the result dropped (a new output each op, released at once)
 * instead of a chain written in place.
 * --fusion-ab: groups of 10 batches alternate fusion on and off (kiln_fusion_set_enabled) in this
 * one process; unfused_ms is the off groups' p50, for #29's fused/unfused check (see
 * bench_elementwise.c: two processes apart differ by more than the check's 3%). */
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
    bool ab = bench_flag(argc, argv, "--fusion-ab"), fused_default = kiln_fusion_enabled(), unfused = false;
    if (ab) batches *= 2; /* each side keeps the batches it would have alone */
    double *ns = malloc(sizeof(double) * (size_t)batches), *ns_unfused = malloc(sizeof(double) * (size_t)batches);
    int n_fused = 0, n_unfused = 0;
    double t_start = 0;
    for (int b = -20; b < batches; b++) { /* 20 warm-up batches */
        if (ab && b % 10 == 0) { /* (the other mode's queued batches drain first, untimed) */
            bench_check(kiln_sync(), "sync");
            kiln_fusion_set_enabled(!(unfused = (b / 10) & 1));
        }
        double t0 = bench_now_ms();
        if (b == 0) t_start = t0;
        if (drop)
            for (int i = 0; i < per_batch; i++) kiln_release(matmul ? kiln_matmul(kiln_ref(x), kiln_ref(acc)) : kiln_add(kiln_ref(x), kiln_ref(acc)));
        else
            for (int i = 0; i < per_batch; i++) acc = matmul ? kiln_matmul(acc, kiln_ref(x)) : kiln_add(acc, kiln_ref(x));
        double t1 = bench_now_ms();
        if (b >= 0 && unfused) ns_unfused[n_unfused++] = (t1 - t0) * 1e6 / per_batch;
        else if (b >= 0) ns[n_fused++] = (t1 - t0) * 1e6 / per_batch;
        if (b % 10 == 0) bench_check(kiln_sync(), "sync"); /* keep the queue from staying full */
    }
    float v[64];
    bench_check(kiln_into_data(acc, v, sizeof(float) * (matmul ? 64 : 8)), "read");
    double done_us = (bench_now_ms() - t_start) * 1e3 / ((double)batches * per_batch);
    kiln_release(x);
    kiln_fusion_set_enabled(fused_default);
    double p50 = bench_quantile(ns, n_fused, 0.5), p99 = bench_quantile(ns, n_fused, 0.99);
    char extra[160];
    int len = snprintf(extra, sizeof extra, ",\"ns_per_op\":%.1f,\"ns_p99\":%.1f,\"us_per_op_done\":%.2f", p50, p99, done_us);
    if (n_unfused)
        snprintf(extra + len, sizeof extra - (size_t)len, ",\"unfused_ms\":%.4f",
                 bench_quantile(ns_unfused, n_unfused, 0.5) * per_batch / 1e6);
    bench_report(matmul ? "dispatch_matmul" : "dispatch", p50 * per_batch / 1e6, extra);
    free(ns);
    free(ns_unfused);
    return 0;
}
