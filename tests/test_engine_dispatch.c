/* The dispatch fast path: handle slots taken and given back a batch per thread, tensor counts
 * kept per thread, an in-place output taking over its input's tensor object, and fused
 * groups recycled per stream. Each must keep what the slow path gave: handles consumed on
 * another thread than the one that made them, exact live-tensor counts across thread exits,
 * in place only for a single owner and never for autodiff metadata, exact results over many
 * groups. */
#include <kiln.h>
#include <pthread.h>

#include "core/core-impl.h"
#include "kiln_test.h"

static kiln_memory_stats stats(void) { return kiln_memory_stats_get(KILN_CPU); }

#define PER_THREAD 300

typedef struct {
    kiln_tensor made[PER_THREAD];
    int keep; /* handles left for the main thread; the rest are made and released here */
} maker;

static void *make_tensors(void *arg) {
    maker *m = arg;
    for (int i = 0; i < PER_THREAD; i++) {
        m->made[i] = kiln_full(KILN_CPU, KILN_F32, KILN_SHAPE(4), (double)i);
        if (i >= m->keep) kiln_release(m->made[i]), m->made[i] = KILN_NONE;
    }
    KT_CHECK(kiln_sync() == KILN_OK);
    return NULL;
}

/* Handles made on threads that exit (their unused slots go back at exit) are consumed here;
 * the live-tensor count is exact across the exits. */
KT_TEST(handles_and_counts_cross_thread_exits) {
    uint64_t live = stats().live_tensors;
    enum { N = 4 };
    static maker m[N];
    pthread_t th[N];
    for (int t = 0; t < N; t++) {
        m[t].keep = 10 * (t + 1);
        KT_CHECK(pthread_create(&th[t], NULL, make_tensors, &m[t]) == 0);
    }
    for (int t = 0; t < N; t++) pthread_join(th[t], NULL);
    KT_CHECK(stats().live_tensors == live + 10 + 20 + 30 + 40);
    kiln_tensor acc = kiln_zeros(KILN_CPU, KILN_F32, KILN_SHAPE(4));
    double expect = 0;
    for (int t = 0; t < N; t++)
        for (int i = 0; i < m[t].keep; i++) {
            acc = kiln_add(acc, m[t].made[i]);
            expect += i;
            KT_CHECK(!kiln_is_valid(m[t].made[i])); /* consumed */
        }
    float v[4];
    KT_CHECK(kiln_into_data(acc, v, sizeof v) == KILN_OK);
    for (int k = 0; k < 4; k++) KT_NEAR(v[k], expect, 0);
    kiln_tensor again = kiln_neg(m[0].made[0]);
    KT_CHECK_MSG(strstr(kiln_last_error(), "consumed by kiln_add"), "%s", kiln_last_error());
    KT_CHECK(kiln_tensor_status(again) == KILN_ERR_STALE_HANDLE);
    kiln_release(again);
    kiln_sync(); /* (the stale use is owed to sync as well) */
    KT_CHECK(stats().live_tensors == live);
}

/* A handle released by a thread-exit destructor that runs after kiln's own (a key created
 * later runs later) still goes back to the shared free list, not into a batch that is gone. */
static pthread_key_t late_key;

static void release_late(void *h) { kiln_release(*(kiln_tensor *)h); }

static void *release_at_exit(void *arg) {
    kiln_tensor *h = arg;
    *h = kiln_full(KILN_CPU, KILN_F32, KILN_SHAPE(2), 1.0);
    KT_CHECK(kiln_sync() == KILN_OK);
    pthread_setspecific(late_key, h);
    return NULL;
}

KT_TEST(handle_released_in_a_later_exit_destructor_is_given_back) {
    kiln_release(kiln_zeros(KILN_CPU, KILN_F32, KILN_SHAPE(1))); /* kiln's key exists first */
    KT_CHECK(kiln_sync() == KILN_OK);
    KT_CHECK(pthread_key_create(&late_key, release_late) == 0);
    uint64_t live = stats().live_tensors;
    uint32_t before = kiln__handle_slots_outstanding();
    for (int round = 0; round < 3; round++) {
        kiln_tensor h;
        pthread_t th;
        KT_CHECK(pthread_create(&th, NULL, release_at_exit, &h) == 0);
        pthread_join(th, NULL);
        KT_CHECK(kiln_sync() == KILN_OK);
        KT_CHECK(stats().live_tensors == live);
        KT_CHECK_MSG(kiln__handle_slots_outstanding() == before, "round %d: %u slots outstanding, %u before", round,
                     kiln__handle_slots_outstanding(), before);
    }
    pthread_key_delete(late_key);
}

/* An exclusive input becomes the output; one with another handle, or a leaf's, does not. */
KT_TEST(in_place_output_takes_only_a_single_owner) {
    kiln_memory_stats s0 = stats();
    kiln_tensor x = kiln_full(KILN_CPU, KILN_F32, KILN_SHAPE(2, 3), 2.0);
    kiln_tensor y = kiln_mul(kiln_exp(x), kiln_full(KILN_CPU, KILN_F32, KILN_SHAPE(3), 0.5));
    KT_CHECK(stats().inplace_reuses >= s0.inplace_reuses + 2);
    KT_CHECK(stats().live_tensors == s0.live_tensors + 1);
    KT_CHECK(kiln_tensor_ndim(y) == 2 && kiln_tensor_shape(y).dims[1] == 3);
    float v[6];

    kiln_tensor keep = kiln_ref(y); /* two handles: the output is a new tensor */
    kiln_tensor z = kiln_neg(y);
    KT_CHECK(kiln_into_data(keep, v, sizeof v) == KILN_OK);
    for (int i = 0; i < 6; i++) KT_NEAR(v[i], exp(2.0) * 0.5, 1e-6);
    KT_CHECK(kiln_into_data(z, v, sizeof v) == KILN_OK);
    for (int i = 0; i < 6; i++) KT_NEAR(v[i], -exp(2.0) * 0.5, 1e-6);
    kiln_release(keep);
    kiln_release(z);

    kiln_tensor w = kiln_leaf(kiln_ones(KILN_CPU, KILN_F32, KILN_SHAPE(4)));
    kiln_no_grad_begin();
    kiln_tensor u = kiln_exp(w); /* the leaf's buffer may go, its autodiff metadata may not */
    kiln_no_grad_end();
    KT_CHECK(!kiln_requires_grad(u));
    float f[4];
    KT_CHECK(kiln_into_data(u, f, sizeof f) == KILN_OK);
    KT_NEAR(f[0], exp(1.0), 1e-6);
    kiln_release(u);
    KT_CHECK(stats().live_tensors == s0.live_tensors);
}

/* Many fused groups in flight, their buffers recycled: the sum is exact. */
KT_TEST(many_groups_give_exact_results) {
    kiln_tensor x = kiln_ones(KILN_CPU, KILN_F64, KILN_SHAPE(8));
    kiln_tensor acc = kiln_zeros(KILN_CPU, KILN_F64, KILN_SHAPE(8));
    const int n = 50000;
    for (int i = 0; i < n; i++) {
        acc = kiln_add(acc, kiln_ref(x));
        if (i % 7919 == 0) KT_CHECK(kiln_sync() == KILN_OK);
    }
    double v[8];
    KT_CHECK(kiln_into_data(acc, v, sizeof v) == KILN_OK);
    for (int k = 0; k < 8; k++) KT_CHECK(v[k] == (double)n);
    kiln_release(x);
}

int main(void) {
    KT_RUN(handles_and_counts_cross_thread_exits);
    KT_RUN(handle_released_in_a_later_exit_destructor_is_given_back);
    KT_RUN(in_place_output_takes_only_a_single_owner);
    KT_RUN(many_groups_give_exact_results);
    return kt_finish();
}
