/* Resident memory over a long loop: a program that repeats a small create / compute / read /
 * release step must not grow, whatever kiln's own counters say. 100,000 steps (a few tensors,
 * an elementwise chain, a matrix product, a backward pass every 10th step, a transaction and a
 * freed generator each step, so the object registry's ring of freed objects is exercised too),
 * with 8 engine and 8 intra-op threads so that glibc gives kiln's threads their own arenas as a
 * many-core machine would. After a warm-up, the resident set (/proc/self/statm) may grow by
 * less than 4 MiB, and the live tensor count must return to where it was. Sanitizer builds only
 * run the loop (their allocators keep freed memory on purpose). */
#include <kiln.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "kiln_test.h"

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define SANITIZED 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
#define SANITIZED 1
#endif
#endif
#ifndef SANITIZED
#define SANITIZED 0
#endif

static long resident_kib(void) {
    long pages = 0, resident = 0;
    FILE *f = fopen("/proc/self/statm", "r");
    if (!f) return -1;
    if (fscanf(f, "%ld %ld", &pages, &resident) != 2) resident = -1;
    fclose(f);
    return resident < 0 ? -1 : resident * (sysconf(_SC_PAGESIZE) / 1024);
}

static void step(int i, kiln_tensor w) {
    int64_t rows = 1 + i % 29;
    kiln_tensor x = kiln_rand(KILN_CPU, KILN_F32, KILN_SHAPE(rows, 16), (uint64_t)i);
    kiln_tensor y = kiln_sum(kiln_tanh(kiln_matmul(kiln_mul_scalar(kiln_add_scalar(x, 1.0), 0.5), kiln_ref(w))));
    if (i % 10 == 0) {
        kiln_grads *g = NULL;
        double v;
        KT_CHECK(kiln_backward_value(y, &g, &v) == KILN_OK);
        kiln_grads_free(g);
        return;
    }
    float v;
    kiln_transaction *tx = kiln_transaction_new();
    kiln_transaction_read(tx, y, &v, sizeof v);
    KT_CHECK(kiln_transaction_execute(tx) == KILN_OK);
    kiln_transaction_free(tx);
    kiln_generator_free(kiln_generator_new((uint64_t)i));
}

KT_TEST(resident_memory_stays_flat) {
    kiln_tensor w = kiln_randn(KILN_CPU, KILN_F32, KILN_SHAPE(16, 16), 1);
    kiln_require_grad(w);
    const int warm = SANITIZED ? 500 : 10000, total = SANITIZED ? 3000 : 100000;
    for (int i = 0; i < warm; i++) step(i, w);
    KT_CHECK(kiln_sync_all() == KILN_OK);
    kiln_memory_stats before = kiln_memory_stats_get(KILN_CPU);
    long rss_before = resident_kib();
    for (int i = warm; i < total; i++) step(i, w);
    KT_CHECK(kiln_sync_all() == KILN_OK);
    kiln_memory_stats after = kiln_memory_stats_get(KILN_CPU);
    long growth = resident_kib() - rss_before;
    printf("resident memory %ld KiB after %d steps, %+ld KiB over the last %d; cached %llu -> %llu bytes\n",
           rss_before + growth, total, growth, total - warm, (unsigned long long)before.bytes_cached,
           (unsigned long long)after.bytes_cached);
    KT_CHECK(after.live_tensors == before.live_tensors);
    KT_CHECK(after.bytes_in_use == before.bytes_in_use);
    if (!SANITIZED) KT_CHECK_MSG(rss_before > 0 && growth < 4 * 1024, "resident memory grew by %ld KiB", growth);
    kiln_release(w);
}

int main(void) {
    /* (before kiln starts its threads) */
    setenv("KILN_ENGINE_THREADS", "8", 0);
    setenv("KILN_NUM_THREADS", "8", 0);
    KT_RUN(resident_memory_stays_flat);
    return kt_finish();
}
