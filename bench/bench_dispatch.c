/* Dispatch overhead: the frontend cost of one tiny op pushed without a sync (ns per op,
 * p50 and p99 over batches), the ops themselves running on the engine's threads. */
#include "bench.h"

int main(int argc, char **argv) {
    int batches = bench_runs(argc, argv, 200);
    const int per_batch = 1000;
    kiln_tensor x = kiln_ones(KILN_CPU, KILN_F32, KILN_SHAPE(8));
    kiln_tensor acc = kiln_zeros(KILN_CPU, KILN_F32, KILN_SHAPE(8));
    double *ns = malloc(sizeof(double) * (size_t)batches);
    for (int b = -20; b < batches; b++) { /* 20 warm-up batches */
        double t0 = bench_now_ms();
        for (int i = 0; i < per_batch; i++) acc = kiln_add(acc, kiln_ref(x));
        double t1 = bench_now_ms();
        if (b >= 0) ns[b] = (t1 - t0) * 1e6 / per_batch;
        if (b % 10 == 0) bench_check(kiln_sync(), "sync"); /* keep the queue from staying full */
    }
    float v[8];
    bench_check(kiln_into_data(acc, v, sizeof v), "read");
    kiln_release(x);
    double p50 = bench_quantile(ns, batches, 0.5), p99 = bench_quantile(ns, batches, 0.99);
    char extra[128];
    snprintf(extra, sizeof extra, ",\"ns_per_op\":%.1f,\"ns_p99\":%.1f", p50, p99);
    bench_report("dispatch", p50 * per_batch / 1e6, extra);
    free(ns);
    return 0;
}
