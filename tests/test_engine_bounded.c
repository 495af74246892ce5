/* The bounded queue: with a tiny in-flight limit, a million pushed ops keep memory bounded
 * (the frontend blocks instead of queueing without end). Frees are stream events. */
#include <kiln.h>
#include <stdio.h>

#include "kiln_test.h"

static long peak_rss_kib(void) {
    FILE *f = fopen("/proc/self/status", "r");
    char line[256];
    long kib = -1;
    while (f && fgets(line, sizeof line, f))
        if (sscanf(line, "VmHWM: %ld kB", &kib) == 1) break;
    if (f) fclose(f);
    return kib;
}

KT_TEST(million_ops_bounded_memory) {
    kiln_engine_set_limits(16, 1 << 20);
    kiln_tensor x = kiln_ones(KILN_CPU, KILN_F32, KILN_SHAPE(64));
    KT_CHECK(kiln_sync() == KILN_OK);
    kiln_memory_reset_peak(KILN_CPU);
    long rss_before = peak_rss_kib();
    const int n = 1000000;
    kiln_tensor acc = kiln_zeros(KILN_CPU, KILN_F32, KILN_SHAPE(64));
    for (int i = 0; i < n; i++) {
        if (i % 2 == 0) {
            kiln_tensor y = kiln_add_scalar(kiln_ref(x), 1.0); /* a fresh buffer each time */
            kiln_release(y);                                    /* freed after it has run */
        } else {
            acc = kiln_add(acc, kiln_ref(x)); /* in place on acc */
        }
    }
    float v[64];
    KT_CHECK(kiln_into_data(acc, v, sizeof v) == KILN_OK);
    KT_NEAR(v[0], n / 2, 0);
    kiln_memory_stats s = kiln_memory_stats_get(KILN_CPU);
    /* at most the limit's worth of 256-byte outputs can be alive at once */
    KT_CHECK_MSG(s.peak_bytes < 64 * 1024, "peak %llu bytes", (unsigned long long)s.peak_bytes);
    long growth = peak_rss_kib() - rss_before;
#if !defined(__SANITIZE_ADDRESS__) && !defined(__SANITIZE_THREAD__)
    /* (sanitizers keep freed memory in quarantine, so RSS says nothing under them) */
    KT_CHECK_MSG(growth < 16 * 1024, "peak RSS grew by %ld KiB", growth);
#else
    (void)growth;
#endif
    kiln_release(x);
    kiln_engine_set_limits(4096, (int64_t)2 << 30);
}

KT_TEST(release_while_queued_does_not_block_or_break) {
    kiln_tensor x = kiln_full(KILN_CPU, KILN_F32, KILN_SHAPE(512, 512), 2.0);
    kiln_tensor y = kiln_mul(kiln_ref(x), kiln_ref(x));
    kiln_tensor z = kiln_add(kiln_ref(x), kiln_ref(y));
    kiln_release(x); /* queued readers still see it */
    kiln_release(y);
    float v;
    KT_CHECK(kiln_into_scalar(kiln_max(z), &v) == KILN_OK);
    KT_NEAR(v, 6.0, 0);
    KT_CHECK(kiln_sync() == KILN_OK);
    KT_CHECK(kiln_memory_stats_get(KILN_CPU).bytes_in_use == 0);
}

int main(void) {
    KT_RUN(million_ops_bounded_memory);
    KT_RUN(release_while_queued_does_not_block_or_break);
    return kt_finish();
}
