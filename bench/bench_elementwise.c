/* Memory bandwidth of elementwise ops on 64M f32: --op add (c = a + b, 3 streams of 256 MiB),
 * --op exp (y = exp(x), 2 streams) or --op chain8 (eight ops on a and b, as issue #11's fusion
 * workload: fused, it reads a and b once and writes once, the traffic of one add). Inputs stay
 * alive (ref'd), so the first op allocates; the rest of the chain may run in place. Any other
 * op of kiln/ops.h by its name (--op hardswish): unary on a, binary on a and b, so a kernel
 * written as an op-table expression is timed against the hand-written one it replaced.
 * --fusion-ab: every run is timed twice, fused and with fusion off (kiln_fusion_set_enabled),
 * in alternating order, and unfused_ms reports the second median: #29's fused/unfused check
 * then compares runs seconds apart in one process, not two processes minutes apart, whose
 * memory bandwidth on a shared machine moves by more than the 3% the check allows. */
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
    kiln_tensor a = kiln_randn(KILN_CPU, KILN_F32, KILN_SHAPE(n), 1);
    kiln_tensor b = kiln_randn(KILN_CPU, KILN_F32, KILN_SHAPE(n), 2);
    bool ab = bench_flag(argc, argv, "--fusion-ab"), fused_default = kiln_fusion_enabled();
    double *unfused_ms = malloc(sizeof(double) * (size_t)runs);
    bench_check(kiln_sync(), "init");
    for (int r = -1; r < runs; r++) {
        for (int half = 0; half < (ab ? 2 : 1); half++) {
            bool unfused = ab && (half == (r & 1)); /* even runs time unfused first, odd runs second */
            kiln_fusion_set_enabled(ab ? !unfused : fused_default);
            double t0 = bench_now_ms(), c0 = bench_cpu_ms();
            kiln_tensor c = chain ? chain8(kiln_ref(a), kiln_ref(b))
                            : add ? kiln_add(kiln_ref(a), kiln_ref(b))
                            : named >= 0 ? table_ops[named].run(kiln_ref(a), kiln_ref(b)) : kiln_exp(kiln_ref(a));
            bench_check(kiln_sync(), op);
            if (r >= 0 && unfused) unfused_ms[r] = bench_now_ms() - t0;
            else if (r >= 0) ms[r] = bench_now_ms() - t0, cpu[r] = bench_cpu_ms() - c0;
            kiln_release(c);
        }
    }
    kiln_fusion_set_enabled(fused_default);
    double med = bench_quantile(ms, runs, 0.5);
    double bytes = (add || chain || (named >= 0 && table_ops[named].arity == 2) ? 3.0 : 2.0) * 4.0 * (double)n;
    char name[32], extra[128];
    snprintf(name, sizeof name, "%s_bandwidth", op);
    int len = snprintf(extra, sizeof extra, ",\"gbps\":%.2f,\"cpu_ms\":%.2f", bytes / (med * 1e6),
                       bench_quantile(cpu, runs, 0.5));
    if (ab) snprintf(extra + len, sizeof extra - (size_t)len, ",\"unfused_ms\":%.4f", bench_quantile(unfused_ms, runs, 0.5));
    bench_report(name, med, extra);
    kiln_release(a);
    kiln_release(b);
    free(ms);
    free(cpu);
    free(unfused_ms);
    return 0;
}
