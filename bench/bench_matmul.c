/* Matrix product throughput: n x n matmul, GFLOP/s, for n = argv --n (default 1024), in
 * --dtype f32 (default), bf16 or f16 (f32 accumulation, the result rounded to the dtype). */
#include "bench.h"

int main(int argc, char **argv) {
    int runs = bench_runs(argc, argv, 5);
    int64_t n = 1024;
    kiln_dtype dt = KILN_F32;
    for (int i = 1; i + 1 < argc; i++) {
        if (strcmp(argv[i], "--n") == 0) n = atoll(argv[i + 1]);
        if (strcmp(argv[i], "--dtype") == 0)
            dt = strcmp(argv[i + 1], "bf16") == 0 ? KILN_BF16 : strcmp(argv[i + 1], "f16") == 0 ? KILN_F16 : KILN_F32;
    }
    double *ms = malloc(sizeof(double) * (size_t)runs);
    kiln_tensor a = kiln_randn(KILN_CPU, dt, KILN_SHAPE(n, n), 1);
    kiln_tensor b = kiln_randn(KILN_CPU, dt, KILN_SHAPE(n, n), 2);
    bench_check(kiln_sync(), "init");
    for (int r = -1; r < runs; r++) {
        double t0 = bench_now_ms();
        kiln_tensor c = kiln_matmul(kiln_ref(a), kiln_ref(b));
        bench_check(kiln_sync(), "matmul");
        if (r >= 0) ms[r] = bench_now_ms() - t0;
        kiln_release(c);
    }
    double med = bench_quantile(ms, runs, 0.5);
    char name[32], extra[64];
    snprintf(name, sizeof name, dt == KILN_F32 ? "matmul_%lld" : "matmul_%lld_%s", (long long)n, kiln_dtype_name(dt));
    snprintf(extra, sizeof extra, ",\"gflops\":%.1f", 2.0 * (double)n * (double)n * (double)n / (med * 1e6));
    bench_report(name, med, extra);
    kiln_release(a);
    kiln_release(b);
    free(ms);
    return 0;
}
