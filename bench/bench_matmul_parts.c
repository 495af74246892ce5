/* Where an n x n f32 matmul's time goes (#29): one way of running the product per process, so a
 * shell loop can alternate them the way bench/run alternates sides.
 *
 *   bench_matmul_parts --n 256 --runs 400 --mode api       # kiln_matmul + kiln_sync, as bench_matmul
 *   ... --mode api-trace    the same, profiled: hand-off to the kernel's start, the kernel, the
 *                           kernel's end to kiln_sync's return (medians, us)
 *   ... --mode gemm         kiln__gemm_f32 on the calling thread (the provider the tuner chose,
 *                           on kiln's pool): the product without the engine
 *   ... --mode gemm1        the same on one thread (kiln's pool set to 1)
 *   ... --mode dnnl1|dnnl2  dnnl_sgemm whole, its OpenMP team told 1 or 2 threads
 *   ... --mode blas1|blas2  cblas_sgemm whole, OpenBLAS told 1 or 2 threads
 *
 *   ... --m M --k K --ta 1 --tb 1   (gemm*, dnnl*, blas*) an m x n x k product (n from --n),
 *                           A or B transposed, as a layer's forward and backward make them
 *                           (default m = k = n, neither transposed)
 *
 * Prints one line: mode, m x n x k, median / p10 / p90 us of a product, GFLOP/s at the median,
 * and for the library modes the process's CPU time per product. */
#include "bench.h"

#include "backend/cpu/gemm.h"
#include "backend/cpu/threadpool.h"
#include "engine/handoff.h"

#if KILN_HAVE_CBLAS
#include <cblas.h>
#endif
#if KILN_HAVE_DNNL
#include <dlfcn.h>
#include <oneapi/dnnl/dnnl.h>
#endif

static const char *arg_of(int argc, char **argv, const char *flag, const char *fallback) {
    for (int i = 1; i + 1 < argc; i++)
        if (strcmp(argv[i], flag) == 0) return argv[i + 1];
    return fallback;
}

static void omp_threads(int n) {
#if KILN_HAVE_DNNL
    void (*set)(int);
    *(void **)&set = dlsym(RTLD_DEFAULT, "omp_set_num_threads");
    if (set) set(n);
#else
    (void)n;
#endif
}

typedef struct {
    int64_t m, n, k;
    int ta, tb;
} prod_shape;

/* One product the mode's way; false when this build lacks it. */
static bool product(const char *mode, prod_shape s, const float *a, const float *b, float *c) {
    int64_t lda = s.ta ? s.m : s.k, ldb = s.tb ? s.k : s.n;
    if (strcmp(mode, "gemm") == 0 || strcmp(mode, "gemm1") == 0) {
        kiln__gemm_f32(s.ta, s.tb, s.m, s.n, s.k, 1.0f, a, lda, b, ldb, 0.0f, c, s.n);
        return true;
    }
#if KILN_HAVE_DNNL
    if (strncmp(mode, "dnnl", 4) == 0)
        return dnnl_sgemm(s.ta ? 'T' : 'N', s.tb ? 'T' : 'N', s.m, s.n, s.k, 1.0f, a, lda, b, ldb, 0.0f, c, s.n) ==
               dnnl_success;
#endif
#if KILN_HAVE_CBLAS
    if (strncmp(mode, "blas", 4) == 0) {
        cblas_sgemm(CblasRowMajor, s.ta ? CblasTrans : CblasNoTrans, s.tb ? CblasTrans : CblasNoTrans, (int)s.m,
                    (int)s.n, (int)s.k, 1.0f, a, (int)lda, b, (int)ldb, 0.0f, c, (int)s.n);
        return true;
    }
#endif
    return false;
}

int main(int argc, char **argv) {
    int64_t n = atoll(arg_of(argc, argv, "--n", "256"));
    int runs = bench_runs(argc, argv, 200);
    const char *mode = arg_of(argc, argv, "--mode", "api");
    prod_shape s = {.m = atoll(arg_of(argc, argv, "--m", "0")), .n = n, .k = atoll(arg_of(argc, argv, "--k", "0")),
                    .ta = atoi(arg_of(argc, argv, "--ta", "0")) != 0, .tb = atoi(arg_of(argc, argv, "--tb", "0")) != 0};
    s.m = s.m > 0 ? s.m : n, s.k = s.k > 0 ? s.k : n;
    if (n < 1 || n > 8192 || s.m > 8192 || s.k > 8192 || runs < 1) return 2;
    double *us = malloc(sizeof(double) * (size_t)runs), *hand = malloc(sizeof(double) * (size_t)runs);
    double *kern = malloc(sizeof(double) * (size_t)runs), *back = malloc(sizeof(double) * (size_t)runs);
    kiln_tensor ta = kiln_randn(KILN_CPU, KILN_F32, KILN_SHAPE(n, n), 1);
    kiln_tensor tb = kiln_randn(KILN_CPU, KILN_F32, KILN_SHAPE(n, n), 2);
    bench_check(kiln_sync(), "init");
    bool trace = strcmp(mode, "api-trace") == 0;
    double cpu_us = 0;
    if (strcmp(mode, "api") == 0 || trace) {
        if (trace) kiln_profiler_start();
        for (int r = -1; r < runs; r++) {
            double t0 = bench_now_ms();
            kiln_tensor c = kiln_matmul(kiln_ref(ta), kiln_ref(tb));
            bench_check(kiln_sync(), "matmul");
            if (r >= 0) us[r] = 1e3 * (bench_now_ms() - t0);
            kiln_release(c);
        }
        if (trace) {
            kiln_profiler_stop();
            size_t ne = kiln_profiler_events(NULL, 0);
            kiln_profile_event *ev = calloc(ne ? ne : 1, sizeof *ev);
            ne = kiln_profiler_events(ev, ne);
            int got = 0, on_caller = 0;
            for (size_t i = 0; i < ne; i++) {
                if (strcmp(ev[i].kernel, "MATMUL") != 0 && strcmp(ev[i].kernel, "FUSED") != 0) continue;
                if (got - 1 >= 0 && got - 1 < runs) { /* (the first is the warm-up) */
                    hand[got - 1] = ev[i].start_us - ev[i].dispatch_us;
                    kern[got - 1] = ev[i].end_us - ev[i].start_us;
                    back[got - 1] = us[got - 1] - (ev[i].end_us - ev[i].dispatch_us);
                    on_caller += ev[i].worker < 0;
                }
                got++;
            }
            free(ev);
            if (got == runs + 1) {
                printf("%s n %lld: hand-off %.1f us, kernel %.1f us, back to the caller %.1f us (medians); %d of %d "
                       "run by the caller\n",
                       mode, (long long)n, bench_quantile(hand, runs, 0.5), bench_quantile(kern, runs, 0.5),
                       bench_quantile(back, runs, 0.5), on_caller, runs);
            } else {
                printf("%s: %d product events for %d runs\n", mode, got, runs + 1);
            }
        }
    } else {
        int64_t most = s.m * s.k > s.k * n ? s.m * s.k : s.k * n;
        most = most > s.m * n ? most : s.m * n, most = most > n * n ? most : n * n;
        size_t bytes = sizeof(float) * (size_t)(n * n);
        float *a = calloc((size_t)most, sizeof(float)), *b = calloc((size_t)most, sizeof(float));
        float *c = calloc((size_t)most, sizeof(float));
        bench_check(kiln_into_data(kiln_ref(ta), a, bytes), "copy"); /* (the rest of a larger operand: zeros) */
        bench_check(kiln_into_data(kiln_ref(tb), b, bytes), "copy");
        int threads = mode[strlen(mode) - 1] == '1' ? 1 : kiln_num_threads();
        if (strcmp(mode, "gemm1") == 0) kiln_set_num_threads(1);
#if KILN_HAVE_CBLAS
        if (strncmp(mode, "blas", 4) == 0) openblas_set_num_threads(threads);
#endif
        if (strncmp(mode, "dnnl", 4) == 0) omp_threads(threads);
        for (int r = -1; r < runs; r++) {
            double t0 = bench_now_ms(), c0 = bench_cpu_ms();
            if (!product(mode, s, a, b, c)) {
                printf("%s: not in this build\n", mode);
                return 0;
            }
            if (r >= 0) us[r] = 1e3 * (bench_now_ms() - t0), kern[r] = 1e3 * (bench_cpu_ms() - c0);
        }
        cpu_us = bench_quantile(kern, runs, 0.5);
        free(a), free(b), free(c);
    }
    double med = bench_quantile(us, runs, 0.5);
    printf("%-9s %lldx%lldx%lld%s%s: %9.1f us (p10 %.1f, p90 %.1f) %6.1f GFLOP/s", mode, (long long)s.m,
           (long long)s.n, (long long)s.k, s.ta ? " A^T" : "", s.tb ? " B^T" : "", med, bench_quantile(us, runs, 0.1),
           bench_quantile(us, runs, 0.9), 2.0 * (double)s.m * (double)s.n * (double)s.k / (med * 1e3));
    /* the process's CPU time per product (all its threads, polls included): on a shared machine
     * the one-thread modes' CPU time moves far less with the load than their wall time */
    if (cpu_us > 0) printf(", CPU %.1f us", cpu_us);
    printf("\n");
    if (bench_flag(argc, argv, "--rules")) {
        kiln__handoff_rules h = kiln__engine_handoff_rules();
        printf("engine: signal %lld ns, wake %lld ns, worker poll %lld ns, inline up to %lld bytes; pool poll %lld ns\n",
               (long long)h.measured.signal_ns, (long long)h.measured.wake_ns, (long long)h.poll_ns,
               (long long)h.inline_max_bytes, (long long)kiln__pool_poll_ns());
    }
    kiln_release(ta), kiln_release(tb);
    free(us), free(hand), free(kern), free(back);
    return 0;
}
