/* Memory: stats, the caching allocator, in-place reuse, borrowed memory, and fault
 * injection (every allocation of an op failing in turn gives a status, never a crash). */
#include <kiln.h>
#include <stdatomic.h>

#include "kiln_test.h"

static kiln_memory_stats stats(void) { return kiln_memory_stats_get(KILN_CPU); }

KT_TEST(bytes_in_use_and_peak) {
    kiln_memory_reset_peak(KILN_CPU);
    uint64_t base = stats().bytes_in_use;
    kiln_tensor a = kiln_zeros(KILN_CPU, KILN_F32, KILN_SHAPE(1000));
    KT_CHECK(stats().bytes_in_use == base + 4000);
    kiln_release(a);
    KT_CHECK(stats().bytes_in_use == base);
    KT_CHECK(stats().peak_bytes >= base + 4000);
    kiln_memory_reset_peak(KILN_CPU);
    KT_CHECK(stats().peak_bytes == base);
}

KT_TEST(cache_reuses_freed_blocks) {
    kiln_tensor a = kiln_zeros(KILN_CPU, KILN_F32, KILN_SHAPE(4096));
    kiln_release(a);
    uint64_t sys = stats().system_allocs;
    const char *nocache = getenv("KILN_NO_CACHING");
    kiln_tensor b = kiln_zeros(KILN_CPU, KILN_F32, KILN_SHAPE(4000)); /* same size class */
    if (!nocache || nocache[0] == '0') KT_CHECK(stats().system_allocs == sys);
    kiln_release(b);
    kiln_memory_empty_cache(KILN_CPU);
    KT_CHECK(stats().bytes_cached == 0);
}

KT_TEST(in_place_when_single_owner) {
    kiln_tensor a = kiln_zeros(KILN_CPU, KILN_F32, KILN_SHAPE(64));
    kiln_memory_stats s0 = stats();
    kiln_tensor b = kiln_cast(a, KILN_I32); /* same element size: reuses a's buffer */
    kiln_memory_stats s1 = stats();
    KT_CHECK(s1.alloc_count == s0.alloc_count);
    KT_CHECK(s1.inplace_reuses == s0.inplace_reuses + 1);
    kiln_tensor keep = kiln_ref(b);
    kiln_tensor c = kiln_cast(b, KILN_F32); /* b has two handles: a new buffer */
    KT_CHECK(stats().alloc_count == s1.alloc_count + 1);
    int32_t v[64];
    KT_CHECK(kiln_into_data(keep, v, sizeof v) == KILN_OK);
    kiln_release(c);
}

static atomic_int released; /* the callback runs on whichever thread frees the buffer */
static void on_release(void *ctx) { atomic_fetch_add(&released, *(int *)ctx); }

KT_TEST(borrowed_memory_is_never_written_and_is_returned) {
    float host[8] = {1, 2, 3, 4, 5, 6, 7, 8};
    int one = 1;
    released = 0;
    kiln_tensor t = kiln_from_borrowed(KILN_F32, KILN_SHAPE(8), host, on_release, &one);
    kiln_tensor i = kiln_cast(t, KILN_I32); /* would be in place if it were kiln's memory */
    KT_NEAR(host[0], 1.0f, 0);
    int32_t out[8];
    KT_CHECK(kiln_into_data(i, out, sizeof out) == KILN_OK);
    KT_CHECK(out[7] == 8);
    /* the buffer is returned once the queued ops that read it are done: after a sync */
    KT_CHECK(kiln_sync() == KILN_OK);
    KT_CHECK(atomic_load(&released) == 1);
    kiln_tensor bad = kiln_from_borrowed(KILN_F32, KILN_SHAPE(8), NULL, NULL, NULL);
    KT_CHECK(kiln_tensor_status(bad) == KILN_ERR_NULL);
    kiln_release(bad);
}

KT_TEST(allocation_failures_are_statuses) {
    uint64_t live = stats().live_tensors, in_use = stats().bytes_in_use;
    /* fail the 1st, 2nd, ... allocation of a small pipeline in turn */
    for (int n = 1; n <= 12; n++) {
        kiln_tensor a = kiln_full(KILN_CPU, KILN_F32, KILN_SHAPE(3, 4), 1.0);
        kiln_debug_fail_alloc_after(n);
        kiln_tensor b = kiln_contiguous(kiln_transpose(kiln_ref(a), 0, 1));
        kiln_tensor c = kiln_cast(kiln_reshape(b, KILN_SHAPE(12)), KILN_F64);
        double out[12];
        kiln_status st = kiln_into_data(c, out, sizeof out);
        kiln_debug_fail_alloc_after(0);
        KT_CHECK_MSG(st == KILN_OK || st == KILN_ERR_OUT_OF_MEMORY, "n=%d st=%d", n, st);
        if (st != KILN_OK) KT_CHECK(strstr(kiln_last_error(), "test_memory.c:") != NULL);
        kiln_release(a);
    }
    KT_CHECK(stats().live_tensors == live);
    KT_CHECK(stats().bytes_in_use == in_use);
}

KT_TEST(invalid_device_and_dtype) {
    kiln_tensor a = kiln_zeros(KILN_CUDA, KILN_F32, KILN_SHAPE(2));
    KT_CHECK(kiln_tensor_status(a) == KILN_ERR_DEVICE);
    kiln_tensor b = kiln_zeros(KILN_CPU, (kiln_dtype)42, KILN_SHAPE(2));
    KT_CHECK(kiln_tensor_status(b) == KILN_ERR_DTYPE);
    kiln_tensor c = kiln_zeros(KILN_CPU, KILN_F32, KILN_SHAPE(-3));
    KT_CHECK(kiln_tensor_status(c) == KILN_ERR_SHAPE);
    kiln_tensor d = kiln_zeros(KILN_CPU, KILN_F32, KILN_SHAPE(1ll << 40, 1ll << 40));
    KT_CHECK(kiln_tensor_status(d) == KILN_ERR_OUT_OF_MEMORY);
    kiln_tensor e = kiln_zeros(KILN_CPU, KILN_F32, KILN_SHAPE(1ll << 42)); /* 16 TiB: malloc says no */
    KT_CHECK(kiln_tensor_status(e) == KILN_ERR_OUT_OF_MEMORY);
    kiln_memory_stats bad = kiln_memory_stats_get((kiln_device)7);
    KT_CHECK(bad.bytes_in_use == 0 && kiln_last_status() == KILN_ERR_DEVICE);
    kiln_release(a);
    kiln_release(b);
    kiln_release(c);
    kiln_release(d);
    kiln_release(e);
}

int main(void) {
    KT_RUN(bytes_in_use_and_peak);
    KT_RUN(cache_reuses_freed_blocks);
    KT_RUN(in_place_when_single_owner);
    KT_RUN(borrowed_memory_is_never_written_and_is_returned);
    KT_RUN(allocation_failures_are_statuses);
    KT_RUN(invalid_device_and_dtype);
    return kt_finish();
}
