/* Ops run by their caller (queue.c, handoff.c): the rules come from what this machine measured;
 * an op smaller than a hand-off, with its stream otherwise idle and its accesses granted, runs
 * on the dispatching thread, a larger one on a worker; one that waits for a producer another
 * thread queued is queued instead and sees the producer's value; and an op run by its caller
 * fails, poisons and is profiled as on a worker, its error naming the line that queued it. */
#include <kiln.h>
#include <pthread.h>
#include <stdlib.h>
#include <unistd.h>

#include "engine/engine-impl.h"
#include "engine/fusion.h"
#include "engine/handoff.h"
#include "kiln_test.h"

/* Long enough for every worker to have stopped polling and gone to sleep. */
static void let_workers_sleep(void) { usleep((useconds_t)(kiln__engine_handoff_rules().poll_ns / 1000 + 2000)); }

static kiln_profile_event *events(size_t *n) {
    *n = kiln_profiler_events(NULL, 0);
    kiln_profile_event *ev = malloc(sizeof *ev * (*n ? *n : 1));
    kiln_profiler_events(ev, *n);
    return ev;
}

/* The worker (-1: the dispatching thread) that ran the first event named op, -2 if none. */
static int worker_of(const char *op) {
    size_t n;
    kiln_profile_event *ev = events(&n);
    int w = -2;
    for (size_t i = 0; i < n && w == -2; i++)
        if (strcmp(ev[i].op, op) == 0) w = ev[i].worker;
    free(ev);
    return w;
}

KT_TEST(rules_come_from_the_measurement) {
    kiln__handoff_rules r = kiln__engine_handoff_rules();
    if (!kiln_engine_is_async()) {
        KT_CHECK(r.poll_ns == 0 && r.inline_max_bytes == 0);
        return;
    }
    KT_CHECK_MSG(r.measured.signal_ns > 0 && r.measured.wake_ns > 0 && r.measured.bytes_per_ns > 0,
                 "signal %lld ns, wake %lld ns, %.1f B/ns", (long long)r.measured.signal_ns,
                 (long long)r.measured.wake_ns, r.measured.bytes_per_ns);
    if (!getenv("KILN_POLL_NS")) KT_CHECK(r.poll_ns == r.measured.signal_ns + r.measured.wake_ns);
    if (!getenv("KILN_INLINE_MAX_BYTES")) {
        KT_CHECK(r.inline_max_bytes == kiln__handoff_inline_max_bytes(&r.measured));
        KT_CHECK(r.inline_max_bytes > 0 && r.inline_max_bytes <= r.measured.l1_bytes);
    }
    kiln__handoff_costs slow = {.signal_ns = 1000, .bytes_per_ns = 2, .l1_bytes = 1 << 20};
    KT_CHECK(kiln__handoff_inline_max_bytes(&slow) == 2000); /* what moves in one hand-off */
    slow.l1_bytes = 1000;
    KT_CHECK(kiln__handoff_inline_max_bytes(&slow) == 1000); /* at most the L1 cache */
}

KT_TEST(small_op_runs_on_its_caller_large_on_a_worker) {
    if (!kiln_engine_is_async()) return;
    bool fusion = kiln_fusion_enabled();
    kiln_fusion_set_enabled(false);
    int64_t before = kiln__engine_set_inline_max_bytes(4096);
    kiln_tensor small = kiln_ones(KILN_CPU, KILN_F32, KILN_SHAPE(16));      /* 64 B */
    kiln_tensor large = kiln_ones(KILN_CPU, KILN_F32, KILN_SHAPE(1 << 16)); /* 256 KiB */
    KT_CHECK(kiln_sync() == KILN_OK);
    let_workers_sleep();
    kiln_profiler_start();
    kiln_tensor s = kiln_exp(kiln_ref(small));
    KT_CHECK(worker_of("kiln_exp") == -1); /* ran before kiln_exp returned, on this thread */
    let_workers_sleep();
    kiln_tensor l = kiln_tanh(kiln_ref(large));
    usleep(100000); /* (a worker takes it meanwhile: a read at once could run it here, helping) */
    float v[16];
    KT_CHECK(kiln_into_data(kiln_slice(l, 0, 0, 16, 1), v, sizeof v) == KILN_OK);
    KT_CHECK(worker_of("kiln_tanh") >= 0);
    KT_CHECK(kiln_into_data(s, v, sizeof v) == KILN_OK);
    for (int i = 0; i < 16; i++) KT_NEAR(v[i], exp(1.0), 1e-6);
    /* with the rule off, the small op goes to a worker too */
    kiln__engine_set_inline_max_bytes(0);
    let_workers_sleep();
    kiln_profiler_stop();
    kiln_profiler_start();
    s = kiln_neg(kiln_ref(small));
    usleep(100000);
    KT_CHECK(kiln_into_data(s, v, sizeof v) == KILN_OK);
    KT_CHECK(worker_of("kiln_neg") >= 0);
    kiln_profiler_stop();
    kiln_release(small);
    kiln_release(large);
    kiln__engine_set_inline_max_bytes(before);
    kiln_fusion_set_enabled(fusion);
}

/* A fused group small enough runs on its caller too: one record in the profiler, its ops
 * named, and the right values. */
KT_TEST(small_group_runs_on_its_caller) {
    if (!kiln_engine_is_async() || !kiln_fusion_enabled()) return;
    int64_t before = kiln__engine_set_inline_max_bytes(4096);
    kiln__fusion_set_fuse_tiny(1); /* (else each op runs at once, alone: the next test) */
    kiln_tensor x = kiln_full(KILN_CPU, KILN_F32, KILN_SHAPE(8), 0.5);
    KT_CHECK(kiln_sync() == KILN_OK);
    let_workers_sleep();
    kiln_profiler_start();
    kiln_tensor y = kiln_mul_scalar(kiln_exp(kiln_ref(x)), 2.0);
    float v[8];
    KT_CHECK(kiln_into_data(y, v, sizeof v) == KILN_OK); /* hands the window's group over */
    for (int i = 0; i < 8; i++) KT_NEAR(v[i], 2 * exp(0.5), 1e-6);
    size_t n;
    kiln_profile_event *ev = events(&n);
    int fused = 0;
    for (size_t i = 0; i < n; i++)
        if (strstr(ev[i].op, "fused[") && strstr(ev[i].op, "kiln_exp")) {
            fused++;
            KT_CHECK(ev[i].worker == -1);
        }
    free(ev);
    KT_CHECK(fused == 1);
    kiln_profiler_stop();
    kiln_release(x);
    kiln__fusion_set_fuse_tiny(-1);
    kiln__engine_set_inline_max_bytes(before);
}

/* By default a tiny op on an idle stream skips the fusion window: it runs at once on its caller,
 * alone (building a group for it cost a third of its dispatch), with the same value; ops that
 * follow a queued one still group. */
KT_TEST(tiny_op_on_an_idle_stream_runs_alone) {
    if (!kiln_engine_is_async() || !kiln_fusion_enabled()) return;
    int64_t before = kiln__engine_set_inline_max_bytes(4096);
    kiln__fusion_set_fuse_tiny(0);
    kiln_tensor x = kiln_full(KILN_CPU, KILN_F32, KILN_SHAPE(8), 0.5);
    KT_CHECK(kiln_sync() == KILN_OK);
    let_workers_sleep();
    kiln__fusion_stats_reset();
    kiln_profiler_start();
    kiln_tensor y = kiln_mul_scalar(kiln_exp(kiln_ref(x)), 2.0);
    KT_CHECK(worker_of("kiln_exp") == -1 && worker_of("kiln_mul_scalar") == -1); /* both ran at dispatch */
    kiln_profiler_stop();
    KT_CHECK(kiln__fusion_stats_get().ops_fused == 0);
    float v[8];
    KT_CHECK(kiln_into_data(y, v, sizeof v) == KILN_OK);
    for (int i = 0; i < 8; i++) KT_NEAR(v[i], 2 * exp(0.5), 1e-6);
    /* a poisoned input still names its op and line when the op runs at once */
    int line = __LINE__ + 1;
    kiln_tensor bad = kiln_add(kiln_ref(x), kiln_ones(KILN_CPU, KILN_F32, KILN_SHAPE(3)));
    KT_CHECK(kiln_into_data(bad, v, sizeof v) == KILN_ERR_SHAPE);
    char where[64];
    snprintf(where, sizeof where, "test_engine_inline.c:%d", line);
    KT_CHECK_MSG(strstr(kiln_last_error(), "kiln_add") && strstr(kiln_last_error(), where), "%s", kiln_last_error());
    kiln_release(x);
    kiln__fusion_set_fuse_tiny(-1);
    kiln__engine_set_inline_max_bytes(before);
}

/* Another thread's stream queues a long chain ending in a small value, and hands the value over
 * before the chain has run: the small op reading it here waits for it (it is queued, not run
 * here at once), and sees its value. */
typedef struct {
    kiln_tensor small; /* the chain's small result, handed to the main thread */
    pthread_mutex_t lock;
    pthread_cond_t cond;
    bool ready;
} handover;

static void *produce(void *arg) {
    handover *h = arg;
    kiln_tensor x = kiln_full(KILN_CPU, KILN_F32, KILN_SHAPE(1 << 20), 0.0);
    for (int i = 0; i < 40; i++) x = kiln_add_scalar(kiln_tanh(x), 1.0); /* ends at tanh(...)+1 */
    kiln_tensor s = kiln_sum(kiln_div_scalar(x, (double)(1 << 20)));
    pthread_mutex_lock(&h->lock);
    h->small = s;
    h->ready = true;
    pthread_cond_signal(&h->cond);
    pthread_mutex_unlock(&h->lock);
    KT_CHECK(kiln_sync() == KILN_OK);
    return NULL;
}

KT_TEST(small_op_waits_for_a_producer_on_another_stream) {
    int64_t before = kiln__engine_set_inline_max_bytes(1 << 20); /* everything small enough */
    double expect = 0;
    for (int i = 0; i < 40; i++) expect = tanh(expect) + 1.0;
    for (int round = 0; round < 3; round++) {
        handover h = {.lock = PTHREAD_MUTEX_INITIALIZER, .cond = PTHREAD_COND_INITIALIZER};
        let_workers_sleep();
        pthread_t th;
        KT_CHECK(pthread_create(&th, NULL, produce, &h) == 0);
        pthread_mutex_lock(&h.lock);
        while (!h.ready) pthread_cond_wait(&h.cond, &h.lock);
        pthread_mutex_unlock(&h.lock);
        kiln_tensor r = kiln_mul_scalar(h.small, 2.0); /* this stream is idle, the value is not */
        float v;
        KT_CHECK(kiln_into_scalar(r, &v) == KILN_OK);
        KT_NEAR(v, 2 * expect, 1e-4);
        pthread_join(th, NULL);
    }
    kiln__engine_set_inline_max_bytes(before);
}

/* A kernel that fails on its caller's thread poisons what it writes and reports the op and the
 * line that queued it, at the read; the next ops skip it and the engine goes on. */
KT_TEST(failure_on_the_caller_names_its_line) {
    bool fusion = kiln_fusion_enabled();
    kiln_fusion_set_enabled(false);
    int64_t before = kiln__engine_set_inline_max_bytes(4096);
    kiln_tensor x = kiln_ones(KILN_CPU, KILN_F32, KILN_SHAPE(4));
    KT_CHECK(kiln_sync() == KILN_OK);
    let_workers_sleep();
    kiln_profiler_start();
    kiln__debug_fail_next_kernel("kiln_neg");
    int line = __LINE__ + 1;
    kiln_tensor y = kiln_neg(kiln_ref(x));
    if (kiln_engine_is_async()) KT_CHECK(worker_of("kiln_neg") == -1);
    kiln_profiler_stop();
    y = kiln_add(y, kiln_ref(x)); /* skips, poisoned */
    float v[4];
    KT_CHECK(kiln_into_data(y, v, sizeof v) == KILN_ERR_KERNEL);
    char where[64];
    snprintf(where, sizeof where, "test_engine_inline.c:%d", line);
    KT_CHECK_MSG(strstr(kiln_last_error(), "kiln_neg at ") && strstr(kiln_last_error(), where), "%s", kiln_last_error());
    KT_CHECK(kiln_sync() == KILN_OK); /* reported once */
    KT_CHECK(kiln_into_data(kiln_add(kiln_ref(x), kiln_ref(x)), v, sizeof v) == KILN_OK);
    KT_NEAR(v[0], 2.0, 0);
    kiln_release(x);
    kiln__engine_set_inline_max_bytes(before);
    kiln_fusion_set_enabled(fusion);
}

int main(void) {
    KT_RUN(rules_come_from_the_measurement);
    KT_RUN(small_op_runs_on_its_caller_large_on_a_worker);
    KT_RUN(small_group_runs_on_its_caller);
    KT_RUN(tiny_op_on_an_idle_stream_runs_alone);
    KT_RUN(small_op_waits_for_a_producer_on_another_stream);
    KT_RUN(failure_on_the_caller_names_its_line);
    return kt_finish();
}
