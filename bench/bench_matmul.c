/* Matrix product throughput: n x n matmul, GFLOP/s, for n = argv --n (default 1024), in
 * --dtype f32 (default), bf16 or f16 (f32 accumulation, the result rounded to the dtype).
 *
 * --provider openblas|onednn (f32 only) times a library alone on the same workload instead of
 * kiln: the same operands (kiln_randn's values, copied out), the same threads (kiln's pool size:
 * OpenBLAS told that many, oneDNN's OpenMP team that size), the same loop (one warm-up, then
 * --runs products, median), cblas_sgemm or dnnl_sgemm called straight into a result allocated
 * once. These are the yardsticks of #29's goal (kiln >= 0.95x the best of OpenBLAS, oneDNN and
 * PyTorch at each size): what the libraries kiln calls can do here when nothing stands between.
 * A build without that library prints a note and no record (exit 0), as bench_gemm_shapes does.
 *
 * Every side runs --runs products and then more until --min-ms (default 250) have passed, the
 * median over all of them. Why (#29): a 256 product takes 65-70 us on two threads, so 200 of them
 * were 14 ms, three or four of the kernel's 4 ms ticks; another process's time slice on the second
 * CPU then covered most of a round, kiln's pool worker was off its CPU for it (the caller doing
 * both tiles: the one-thread time, 126-132 us) and the whole round read as slow (AMD EPYC Zen 5,
 * 2 vCPUs, perf sched timehist, 2026-11-30). Over a quarter of a second such a slice is a few
 * percent of the products, below the median.
 *
 * Each record also carries cpu_ms, the median CPU time of one product (every thread of the
 * process, bench_cpu_ms), and kiln's cpu_gflops from it: on a machine whose two CPUs other work
 * shares, the wall time of a 2048 bf16 product swung 53-117 ms while its CPU time held nearer
 * (Intel Xeon family 6 model 207, load 5-6, BENCHMARKS.md), so the low-precision goals (#27: bf16
 * at least 1.9x kiln's f32) can be read from CPU time when the wall clock cannot be trusted. */
#include "bench.h"

#if KILN_HAVE_CBLAS
#include <cblas.h>
#endif
#if KILN_HAVE_DNNL
#include <dlfcn.h>
#include <oneapi/dnnl/dnnl.h>
#endif

enum { MAX_TIMED = 1 << 20 };

typedef enum { PROVIDER_KILN, PROVIDER_OPENBLAS, PROVIDER_ONEDNN } provider;

static provider parse_provider(int argc, char **argv) {
    for (int i = 1; i + 1 < argc; i++) {
        if (strcmp(argv[i], "--provider") != 0) continue;
        if (strcmp(argv[i + 1], "kiln") == 0) return PROVIDER_KILN;
        if (strcmp(argv[i + 1], "openblas") == 0) return PROVIDER_OPENBLAS;
        if (strcmp(argv[i + 1], "onednn") == 0) return PROVIDER_ONEDNN;
        fprintf(stderr, "--provider: '%s' is not kiln, openblas or onednn\n", argv[i + 1]);
        exit(2);
    }
    return PROVIDER_KILN;
}

/* One product by the library alone, C = A B (row-major, n x n); false where this build lacks it. */
static bool raw_product(provider p, int64_t n, const float *a, const float *b, float *c) {
#if KILN_HAVE_CBLAS
    if (p == PROVIDER_OPENBLAS) {
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)n, (int)n, (int)n, 1.0f, a, (int)n, b, (int)n,
                    0.0f, c, (int)n);
        return true;
    }
#endif
#if KILN_HAVE_DNNL
    if (p == PROVIDER_ONEDNN) return dnnl_sgemm('N', 'N', n, n, n, 1.0f, a, n, b, n, 0.0f, c, n) == dnnl_success;
#endif
    (void)p, (void)n, (void)a, (void)b, (void)c;
    return false;
}

/* The library's own threads set to kiln's pool size: what "the same threads" means here. */
static void raw_threads(provider p, int threads) {
#if KILN_HAVE_CBLAS
    if (p == PROVIDER_OPENBLAS) openblas_set_num_threads(threads);
#endif
#if KILN_HAVE_DNNL
    if (p == PROVIDER_ONEDNN) { /* libgomp comes in with libdnnl: looked up, not linked */
        void (*set)(int);
        *(void **)&set = dlsym(RTLD_DEFAULT, "omp_set_num_threads");
        if (set) set(threads);
    }
#endif
    (void)p, (void)threads;
}

int main(int argc, char **argv) {
    int runs = bench_runs(argc, argv, 5);
    int64_t n = 1024;
    kiln_dtype dt = KILN_F32;
    provider prov = parse_provider(argc, argv);
    for (int i = 1; i + 1 < argc; i++) {
        if (strcmp(argv[i], "--n") == 0) n = atoll(argv[i + 1]);
        if (strcmp(argv[i], "--dtype") == 0)
            dt = strcmp(argv[i + 1], "bf16") == 0 ? KILN_BF16 : strcmp(argv[i + 1], "f16") == 0 ? KILN_F16 : KILN_F32;
    }
    if (runs < 1 || n < 1 || n > 65536) {
        fprintf(stderr, "--runs must be >= 1 and --n in 1..65536\n");
        return 2;
    }
    if (prov != PROVIDER_KILN && dt != KILN_F32) {
        fprintf(stderr, "--provider openblas|onednn times f32 products only\n");
        return 2;
    }
    double min_ms = 250;
    for (int i = 1; i + 1 < argc; i++)
        if (strcmp(argv[i], "--min-ms") == 0) min_ms = atof(argv[i + 1]);
    /* room for the products --min-ms asks, up to a bound (a 16 x 16 product takes ~1 us) */
    int cap = runs > MAX_TIMED ? runs : MAX_TIMED;
    double *ms = malloc(sizeof(double) * (size_t)cap), *cpu = malloc(sizeof(double) * (size_t)cap);
    if (!ms || !cpu) return 1;
    kiln_tensor a = kiln_randn(KILN_CPU, dt, KILN_SHAPE(n, n), 1);
    kiln_tensor b = kiln_randn(KILN_CPU, dt, KILN_SHAPE(n, n), 2);
    bench_check(kiln_sync(), "init");
    int timed = 0;
    const char *side = prov == PROVIDER_OPENBLAS ? "openblas" : prov == PROVIDER_ONEDNN ? "onednn" : "kiln";
    if (prov == PROVIDER_KILN) {
        double start = 0;
        for (int r = -1; r < runs || (r < cap && bench_now_ms() - start < min_ms); r++) {
            double t0 = bench_now_ms(), c0 = bench_cpu_ms();
            kiln_tensor c = kiln_matmul(kiln_ref(a), kiln_ref(b));
            bench_check(kiln_sync(), "matmul");
            if (r >= 0) ms[r] = bench_now_ms() - t0, cpu[r] = bench_cpu_ms() - c0, timed = r + 1;
            else start = bench_now_ms();
            kiln_release(c);
        }
    } else {
        size_t bytes = sizeof(float) * (size_t)(n * n);
        float *ra = malloc(bytes), *rb = malloc(bytes), *rc = malloc(bytes);
        if (!ra || !rb || !rc) {
            fprintf(stderr, "out of memory for %lld x %lld operands\n", (long long)n, (long long)n);
            return 1;
        }
        bench_check(kiln_into_data(kiln_ref(a), ra, bytes), "copying A out");
        bench_check(kiln_into_data(kiln_ref(b), rb, bytes), "copying B out");
        raw_threads(prov, kiln_num_threads());
        double start = 0;
        for (int r = -1; r < runs || (r < cap && bench_now_ms() - start < min_ms); r++) {
            double t0 = bench_now_ms(), c0 = bench_cpu_ms();
            if (!raw_product(prov, n, ra, rb, rc)) {
                printf("bench_matmul: this build has no %s (or it refused the product): nothing to measure\n", side);
                return 0;
            }
            if (r >= 0) ms[r] = bench_now_ms() - t0, cpu[r] = bench_cpu_ms() - c0, timed = r + 1;
            else start = bench_now_ms();
        }
        free(ra), free(rb), free(rc);
    }
    double med = bench_quantile(ms, timed, 0.5);
    double cpu_med = bench_quantile(cpu, timed, 0.5), flop = 2.0 * (double)n * (double)n * (double)n;
    double gflops = flop / (med * 1e6), cpu_gflops = cpu_med > 0 ? flop / (cpu_med * 1e6) : 0;
    char name[32];
    snprintf(name, sizeof name, dt == KILN_F32 ? "matmul_%lld" : "matmul_%lld_%s", (long long)n, kiln_dtype_name(dt));
    if (prov == PROVIDER_KILN) {
        char extra[128];
        snprintf(extra, sizeof extra, ",\"gflops\":%.1f,\"cpu_ms\":%.4f,\"cpu_gflops\":%.1f", gflops, cpu_med, cpu_gflops);
        bench_report(name, med, extra);
    } else {
        printf("{\"name\":\"%s\",\"side\":\"%s\",\"ms\":%.4f,\"rss_mib\":%.1f,\"gflops\":%.1f,\"cpu_ms\":%.4f,"
               "\"threads\":%d}\n", name, side, med, bench_peak_rss_mib(), gflops, cpu_med, kiln_num_threads());
    }
    kiln_release(a);
    kiln_release(b);
    free(ms), free(cpu);
    return 0;
}
