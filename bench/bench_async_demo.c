/* The d2l async demonstration: 10 x (randn 1000x1000, matmul). Reports the time until the
 * calls return (dispatch) and until kiln_sync returns (finish). */
#include "bench.h"

int main(int argc, char **argv) {
    int runs = bench_runs(argc, argv, 10);
    double *dispatch = malloc(sizeof(double) * (size_t)runs), *finish = malloc(sizeof(double) * (size_t)runs);
    for (int r = -2; r < runs; r++) {
        double t0 = bench_now_ms();
        kiln_tensor y[10];
        for (int i = 0; i < 10; i++) {
            kiln_tensor a = kiln_randn(KILN_CPU, KILN_F32, KILN_SHAPE(1000, 1000), (uint64_t)(r * 10 + i + 100));
            y[i] = kiln_matmul(kiln_ref(a), a);
        }
        double t1 = bench_now_ms();
        bench_check(kiln_sync(), "sync");
        double t2 = bench_now_ms();
        for (int i = 0; i < 10; i++) kiln_release(y[i]);
        if (r >= 0) dispatch[r] = t1 - t0, finish[r] = t2 - t0;
    }
    char extra[96];
    snprintf(extra, sizeof extra, ",\"dispatch_ms\":%.3f", bench_quantile(dispatch, runs, 0.5));
    bench_report("async_demo", bench_quantile(finish, runs, 0.5), extra);
    free(dispatch);
    free(finish);
    return 0;
}
