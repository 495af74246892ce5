/* Memory bandwidth of elementwise ops on 64M f32: --op add (c = a + b, 3 streams of 256 MiB),
 * --op exp (y = exp(x), 2 streams) or --op chain8 (eight ops on a and b, as issue #11's fusion
 * workload: fused, it reads a and b once and writes once, the traffic of one add). Inputs stay
 * alive (ref'd), so the first op allocates; the rest of the chain may run in place. Any other
 * op of kiln/ops.h by its name (--op hardswish): unary on a, binary on a and b, so a kernel
 * written as an op-table expression is timed against the hand-written one it replaced.
 * --fusion-ab: every run is timed twice, fused and with fusion off (kiln_fusion_set_enabled),
 * in alternating order, and unfused_ms reports the second median: #29's fused/unfused check
 * then compares runs seconds apart in one process, not two processes minutes apart, whose
 * memory bandwidth on a shared machine moves by more than the 3% the check allows.
 * --vs-add (chain8 and the named ops): one add is timed beside every run too, in alternating
 * order, and add_ms reports its median: #29's "chain8 / one add" from one process, both sides
 * in the same state of the machine (see raw_ms).
 * After kiln's runs, raw_ms times the machine itself: b = a + b in plain C (plain stores,
 * two threads, 3 times, the best) over the same inputs. On a 2-vCPU VM that number moves
 * between runs (11 ms or 18-20 for 64M f32, BENCHMARKS.md "one add at 11 or at 20 ms") with
 * kiln's own times, so a round is read against the machine's speed at that moment. */
#include <pthread.h>

#include "bench.h"

/* The public elementwise ops of the op table (kiln/ops.h's KILN_OPS_ELEMENTWISE_API), by name and arity. */
#define ARITY_(a, b, n, ...) n
#define ARITY(...) ARITY_(__VA_ARGS__, 2, 1, 0)
#define WRAP(ret, name, params, args) \
    static kiln_tensor run_##name(kiln_tensor a, kiln_tensor b) { \
        kiln_tensor t = a;                                          \
        (void)t;                                                    \
        if (ARITY params == 1) kiln_release(b);                     \
        return kiln_##name args;                                    \
    }
KILN_OPS_ELEMENTWISE_API(WRAP)
#undef WRAP
static const struct {
    const char *name;
    int arity;
    kiln_tensor (*run)(kiln_tensor, kiln_tensor);
} table_ops[] = {
#define ENTRY(ret, name, params, args) {#name, ARITY params, run_##name},
    KILN_OPS_ELEMENTWISE_API(ENTRY)
#undef ENTRY
};

/* The inputs in memory the benchmark owns (kiln borrows them), so raw_add can read them too. */
static float *owned(int64_t n, uint64_t seed) {
    void *p = NULL;
    if (posix_memalign(&p, 64, sizeof(float) * (size_t)n) != 0) return NULL;
    float *f = p;
    uint64_t x = seed * 0x9E3779B97F4A7C15ull + 1;
    for (int64_t i = 0; i < n; i++) { /* xorshift64: values in [-4, 4), none subnormal */
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        f[i] = (float)((double)(x >> 40) / (double)(1 << 24) * 8.0 - 4.0);
    }
    return f;
}

typedef struct {
    const float *a;
    float *b;
    int64_t lo, hi;
} raw_range;

static void *raw_add_range(void *arg) {
    raw_range *r = arg;
    for (int64_t i = r->lo; i < r->hi; i++) r->b[i] = r->a[i] + r->b[i];
    return NULL;
}

/* b = a + b over n, two threads: the best of 3 times (ms). b is overwritten. */
static double raw_add(const float *a, float *b, int64_t n) {
    double best = -1;
    for (int k = 0; k < 3; k++) {
        raw_range r[2] = {{a, b, 0, n / 2}, {a, b, n / 2, n}};
        pthread_t th;
        double t0 = bench_now_ms();
        bool two = pthread_create(&th, NULL, raw_add_range, &r[1]) == 0;
        raw_add_range(&r[0]);
        if (two) pthread_join(th, NULL);
        else raw_add_range(&r[1]);
        double ms = bench_now_ms() - t0;
        if (best < 0 || ms < best) best = ms;
    }
    return best;
}

/* relu(sqrt(|a * 0.5 + 1|) * b - 0.1), negated: the same chain as torch_peer.py's */
static kiln_tensor chain8(kiln_tensor a, kiln_tensor b) {
    kiln_tensor t = kiln_add_scalar(kiln_mul_scalar(a, 0.5), 1.0);
    t = kiln_mul(kiln_sqrt(kiln_abs(t)), b);
    return kiln_neg(kiln_relu(kiln_sub_scalar(t, 0.1)));
}

int main(int argc, char **argv) {
    int runs = bench_runs(argc, argv, 5);
    const char *op = "add";
    for (int i = 1; i + 1 < argc; i++)
        if (strcmp(argv[i], "--op") == 0) op = argv[i + 1];
    bool add = strcmp(op, "add") == 0, chain = strcmp(op, "chain8") == 0;
    int named = -1;
    for (size_t i = 0; !add && !chain && i < sizeof table_ops / sizeof table_ops[0]; i++)
        if (strcmp(op, table_ops[i].name) == 0) named = (int)i;
    const int64_t n = (int64_t)64 << 20;
    double *ms = malloc(sizeof(double) * (size_t)runs), *cpu = malloc(sizeof(double) * (size_t)runs);
    float *raw_a = owned(n, 1), *raw_b = owned(n, 2);
    if (!raw_a || !raw_b) {
        fprintf(stderr, "bench_elementwise: out of memory\n");
        return 1;
    }
    kiln_tensor a = kiln_from_borrowed(KILN_F32, KILN_SHAPE(n), raw_a, NULL, NULL);
    kiln_tensor b = kiln_from_borrowed(KILN_F32, KILN_SHAPE(n), raw_b, NULL, NULL);
    bool ab = bench_flag(argc, argv, "--fusion-ab"), fused_default = kiln_fusion_enabled();
    bool vs_add = !add && bench_flag(argc, argv, "--vs-add");
    double *unfused_ms = malloc(sizeof(double) * (size_t)runs), *add_ms = malloc(sizeof(double) * (size_t)runs);
    bench_check(kiln_sync(), "init");
    for (int r = -1; r < runs; r++) {
        /* even runs: [unfused,] fused[, add]; odd runs the other way round */
        int pieces = 1 + ab + vs_add;
        for (int k = 0; k < pieces; k++) {
            int piece = (r & 1) ? pieces - 1 - k : k; /* 0: unfused (with ab), then fused, then add */
            bool unfused = ab && piece == 0, one_add = vs_add && piece == pieces - 1;
            kiln_fusion_set_enabled(ab ? !unfused : fused_default);
            double t0 = bench_now_ms(), c0 = bench_cpu_ms();
            kiln_tensor c = one_add ? kiln_add(kiln_ref(a), kiln_ref(b))
                            : chain ? chain8(kiln_ref(a), kiln_ref(b))
                            : add ? kiln_add(kiln_ref(a), kiln_ref(b))
                            : named >= 0 ? table_ops[named].run(kiln_ref(a), kiln_ref(b)) : kiln_exp(kiln_ref(a));
            bench_check(kiln_sync(), op);
            if (r < 0) {
            } else if (one_add) {
                add_ms[r] = bench_now_ms() - t0;
            } else if (unfused) {
                unfused_ms[r] = bench_now_ms() - t0;
            } else {
                ms[r] = bench_now_ms() - t0, cpu[r] = bench_cpu_ms() - c0;
            }
            kiln_release(c);
        }
    }
    kiln_fusion_set_enabled(fused_default);
    double med = bench_quantile(ms, runs, 0.5);
    double bytes = (add || chain || (named >= 0 && table_ops[named].arity == 2) ? 3.0 : 2.0) * 4.0 * (double)n;
    char name[32], extra[256];
    snprintf(name, sizeof name, "%s_bandwidth", op);
    kiln_release(a);
    kiln_release(b);
    bench_check(kiln_sync(), "release");
    int len = snprintf(extra, sizeof extra, ",\"gbps\":%.2f,\"cpu_ms\":%.2f,\"raw_ms\":%.2f", bytes / (med * 1e6),
                       bench_quantile(cpu, runs, 0.5), raw_add(raw_a, raw_b, n));
    if (ab) len += snprintf(extra + len, sizeof extra - (size_t)len, ",\"unfused_ms\":%.4f", bench_quantile(unfused_ms, runs, 0.5));
    if (vs_add) snprintf(extra + len, sizeof extra - (size_t)len, ",\"add_ms\":%.4f", bench_quantile(add_ms, runs, 0.5));
    bench_report(name, med, extra);
    free(raw_a);
    free(raw_b);
    free(ms);
    free(cpu);
    free(unfused_ms);
    free(add_ms);
    return 0;
}
