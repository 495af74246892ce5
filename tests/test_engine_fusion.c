/* Fusion across threads: a tensor made by a fused chain that is still held in its thread's
 * window is handed to another thread without any sync; that thread's read and its own ops
 * flush the window first and see the right values. Runs under ThreadSanitizer in CI. */
#include <kiln.h>
#include <pthread.h>

#include "engine/fusion.h"
#include "kiln_test.h"

#define N 3000 /* several tiles */
#define ROUNDS 200

typedef struct {
    pthread_mutex_t lock;
    pthread_cond_t cond;
    kiln_tensor slot;
    bool full, consumed;
    int bad;
} handoff;

static void *produce(void *arg) {
    handoff *h = arg;
    for (int r = 0; r < ROUNDS; r++) {
        /* exact in f32: ((r + 1) * 2 - 3) + 0.5, all in one fused group */
        kiln_tensor x = kiln_full(KILN_CPU, KILN_F32, KILN_SHAPE(N), (double)r);
        x = kiln_add_scalar(kiln_mul_scalar(kiln_add_scalar(x, 1.0), 2.0), -3.0);
        x = kiln_add_scalar(x, 0.5);
        pthread_mutex_lock(&h->lock);
        h->slot = x;
        h->full = true;
        h->consumed = false;
        pthread_cond_broadcast(&h->cond);
        /* wait with the window still open: the consumer must flush it */
        while (!h->consumed) pthread_cond_wait(&h->cond, &h->lock);
        pthread_mutex_unlock(&h->lock);
    }
    return NULL;
}

KT_TEST(fused_tensor_consumed_on_another_thread) {
    if (!kiln_fusion_enabled()) return;
    kiln__fusion_stats_reset();
    handoff h = {.lock = PTHREAD_MUTEX_INITIALIZER, .cond = PTHREAD_COND_INITIALIZER};
    pthread_t th;
    KT_CHECK(pthread_create(&th, NULL, produce, &h) == 0);
    static float v[N];
    for (int r = 0; r < ROUNDS; r++) {
        pthread_mutex_lock(&h.lock);
        while (!h.full) pthread_cond_wait(&h.cond, &h.lock);
        kiln_tensor x = h.slot;
        h.full = false;
        pthread_mutex_unlock(&h.lock);
        float want = (float)((r + 1) * 2 - 3) + 0.5f;
        if (r % 2) { /* consumed by this thread's own ops, then read */
            x = kiln_mul_scalar(x, 2.0);
            want *= 2;
        }
        KT_CHECK(kiln_into_data(x, v, sizeof v) == KILN_OK);
        int bad = 0;
        for (int i = 0; i < N; i++) bad += v[i] != want;
        KT_CHECK_MSG(bad == 0, "round %d: %d wrong values (v[0] %g, want %g)", r, bad, v[0], want);
        pthread_mutex_lock(&h.lock);
        h.consumed = true;
        pthread_cond_broadcast(&h.cond);
        pthread_mutex_unlock(&h.lock);
    }
    pthread_join(th, NULL);
    if (kiln_engine_is_async()) {
        kiln__fusion_stats s = kiln__fusion_stats_get();
        KT_CHECK_MSG(s.foreign_flushes > 0 && s.groups > 0, "foreign flushes %lld, groups %lld",
                     (long long)s.foreign_flushes, (long long)s.groups);
    }
}

/* A producer thread that exits with ops still in its window: they run, and the handle the
 * main thread got reads right. */
static void *produce_and_exit(void *arg) {
    kiln_tensor *out = arg;
    kiln_tensor x = kiln_full(KILN_CPU, KILN_F32, KILN_SHAPE(N), 1.0);
    *out = kiln_mul_scalar(kiln_add_scalar(x, 1.0), 4.0);
    return NULL;
}

KT_TEST(window_of_an_exited_thread) {
    kiln_tensor t;
    pthread_t th;
    KT_CHECK(pthread_create(&th, NULL, produce_and_exit, &t) == 0);
    pthread_join(th, NULL);
    static float v[N];
    KT_CHECK(kiln_into_data(t, v, sizeof v) == KILN_OK);
    KT_CHECK(v[0] == 8.0f && v[N - 1] == 8.0f);
}

/* kiln_sync_all flushes every thread's window. */
KT_TEST(sync_all_flushes_windows) {
    kiln_tensor x = kiln_exp(kiln_add_scalar(kiln_zeros(KILN_CPU, KILN_F32, KILN_SHAPE(N)), 0.0));
    KT_CHECK(kiln_sync_all() == KILN_OK);
    float v;
    KT_CHECK(kiln_into_scalar(kiln_sum(x), &v) == KILN_OK);
    KT_NEAR(v, (double)N, 0);
}

int main(void) {
    kt_mem_begin();
    KT_RUN(fused_tensor_consumed_on_another_thread);
    KT_RUN(window_of_an_exited_thread);
    KT_RUN(sync_all_flushes_windows);
    KT_MEM_CHECK();
    return kt_finish();
}
