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
 * Prints one line: mode, n, median / p10 / p90 us of a product, GFLOP/s at the median. */
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

/* One product the mode's way; false when this build lacks it. */
static bool product(const char *mode, int64_t n, const float *a, const float *b, float *c) {
    if (strcmp(mode, "gemm") == 0 || strcmp(mode, "gemm1") == 0) {
        kiln__gemm_f32(0, 0, n, n, n, 1.0f, a, n, b, n, 0.0f, c, n);
        return true;
    }
#if KILN_HAVE_DNNL
    if (strncmp(mode, "dnnl", 4) == 0) return dnnl_sgemm('N', 'N', n, n, n, 1.0f, a, n, b, n, 0.0f, c, n) == dnnl_success;
#endif
#if KILN_HAVE_CBLAS
    if (strncmp(mode, "blas", 4) == 0) {
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)n, (int)n, (int)n, 1.0f, a, (int)n, b, (int)n, 0.0f,
                    c, (int)n);
        return true;
    }
#endif
    return false;
}

int main(int argc, char **argv) {
    int64_t n = atoll(arg_of(argc, argv, "--n", "256"));
    int runs = bench_runs(argc, argv, 200);
    const char *mode = arg_of(argc, argv, "--mode", "api");
    if (n < 1 || n > 8192 || runs < 1) return 2;
    double *us = malloc(sizeof(double) * (size_t)runs), *hand = malloc(sizeof(double) * (size_t)runs);
    double *kern = malloc(sizeof(double) * (size_t)runs), *back = malloc(sizeof(double) * (size_t)runs);
    kiln_tensor ta = kiln_randn(KILN_CPU, KILN_F32, KILN_SHAPE(n, n), 1);
    kiln_tensor tb = kiln_randn(KILN_CPU, KILN_F32, KILN_SHAPE(n, n), 2);
    bench_check(kiln_sync(), "init");
    bool trace = strcmp(mode, "api-trace") == 0;
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
        size_t bytes = sizeof(float) * (size_t)(n * n);
        float *a = malloc(bytes), *b = malloc(bytes), *c = malloc(bytes);
        bench_check(kiln_into_data(kiln_ref(ta), a, bytes), "copy");
        bench_check(kiln_into_data(kiln_ref(tb), b, bytes), "copy");
        int threads = mode[strlen(mode) - 1] == '1' ? 1 : kiln_num_threads();
        if (strcmp(mode, "gemm1") == 0) kiln_set_num_threads(1);
#if KILN_HAVE_CBLAS
        if (strncmp(mode, "blas", 4) == 0) openblas_set_num_threads(threads);
#endif
        if (strncmp(mode, "dnnl", 4) == 0) omp_threads(threads);
        for (int r = -1; r < runs; r++) {
            double t0 = bench_now_ms();
            if (!product(mode, n, a, b, c)) {
                printf("%s: not in this build\n", mode);
                return 0;
            }
            if (r >= 0) us[r] = 1e3 * (bench_now_ms() - t0);
        }
        free(a), free(b), free(c);
    }
    double med = bench_quantile(us, runs, 0.5);
    printf("%-9s n %5lld: %9.1f us (p10 %.1f, p90 %.1f) %6.1f GFLOP/s\n", mode, (long long)n, med,
           bench_quantile(us, runs, 0.1), bench_quantile(us, runs, 0.9), 2.0 * (double)n * n * n / (med * 1e3));
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
