/* What handing an op to an engine worker costs on this machine, measured once when the engine
 * starts (issue #29: the rules that depend on it come from the machine, not from constants
 * tuned on one CPU). Two rules use it (queue.c):
 *  - a worker that ran out of ops polls for new ones as long as a sleep and wake-up would take
 *    (the classic spin-then-block bound: polling longer cannot win more than the wake-up costs,
 *    and a shorter poll pays the wake-up for work that was about to come);
 *  - an op small enough to run in less time than its caller would spend handing it over (the
 *    wake-up call, the cache lines of its record moving to the worker's core) runs on the
 *    caller's thread when nothing else of its stream is queued.
 * The measurement: a helper thread sleeps on a condition variable and is woken a few times;
 * the signalling side's time is the hand-off's cost to the caller, the time until the helper
 * runs is the wake-up latency. The medians keep one preempted round out. A memcpy within the L1
 * cache gives how many bytes an elementwise kernel moves in that time. About 3 ms, once (more
 * on a loaded machine, where a round can be preempted).
 * KILN_INLINE_MAX_BYTES and KILN_POLL_NS override what is measured. */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/machine.h"
#include "engine/handoff.h"
#include "engine/profiler.h"

#define ROUNDS 9

static struct {
    pthread_mutex_t lock;
    pthread_cond_t cond;
    int round;        /* the round the helper is to answer */
    int answered;     /* the last round it answered */
    bool asleep;      /* the helper waits on cond (seen under the lock: it is in the wait) */
    uint64_t woke_ns; /* when the helper ran again */
} probe = {.lock = PTHREAD_MUTEX_INITIALIZER, .cond = PTHREAD_COND_INITIALIZER};

static void *probe_helper(void *arg) {
    (void)arg;
    pthread_mutex_lock(&probe.lock);
    while (probe.answered < ROUNDS) {
        probe.asleep = true;
        pthread_cond_broadcast(&probe.cond);
        while (probe.round == probe.answered) pthread_cond_wait(&probe.cond, &probe.lock);
        probe.woke_ns = kiln__now_ns();
        probe.asleep = false;
        probe.answered = probe.round;
        pthread_cond_broadcast(&probe.cond);
    }
    pthread_mutex_unlock(&probe.lock);
    return NULL;
}

static int cmp_u64(const void *a, const void *b) {
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

/* Bytes a kernel moves per ns within the L1 cache: a memcpy of half of it, read and written. */
static double l1_bytes_per_ns(size_t l1) {
    size_t half = l1 / 4; /* source and destination together fill half the cache */
    char *buf = malloc(2 * half);
    if (!buf) return 0;
    memset(buf, 1, 2 * half);
    uint64_t best = UINT64_MAX;
    for (int r = 0; r < ROUNDS; r++) {
        uint64_t t0 = kiln__now_ns();
        memcpy(buf + half, buf, half);
        __asm__ __volatile__("" ::"r"(buf) : "memory"); /* (the copy is not dead) */
        uint64_t dt = kiln__now_ns() - t0;
        if (dt < best) best = dt;
    }
    free(buf);
    return best ? (double)(2 * half) / (double)best : 0;
}

kiln__handoff_costs kiln__handoff_measure(void) {
    int64_t l1 = kiln__machine_facts()->l1d_bytes;
    kiln__handoff_costs c = {.l1_bytes = l1};
    uint64_t signal_ns[ROUNDS], wake_ns[ROUNDS];
    pthread_t helper;
    probe.round = probe.answered = 0;
    probe.asleep = false;
    if (pthread_create(&helper, NULL, probe_helper, NULL) != 0) return c; /* nothing measured */
    for (int r = 0; r < ROUNDS; r++) {
        pthread_mutex_lock(&probe.lock);
        while (!probe.asleep || probe.answered != r) pthread_cond_wait(&probe.cond, &probe.lock);
        pthread_mutex_unlock(&probe.lock);
        usleep(20); /* (asleep in the kernel by now, not about to be) */
        uint64_t t0 = kiln__now_ns();
        pthread_mutex_lock(&probe.lock);
        probe.round = r + 1;
        pthread_cond_signal(&probe.cond);
        pthread_mutex_unlock(&probe.lock);
        uint64_t t1 = kiln__now_ns();
        pthread_mutex_lock(&probe.lock);
        while (probe.answered != r + 1) pthread_cond_wait(&probe.cond, &probe.lock);
        wake_ns[r] = probe.woke_ns - t0;
        pthread_mutex_unlock(&probe.lock);
        signal_ns[r] = t1 - t0;
    }
    pthread_join(helper, NULL);
    qsort(signal_ns, ROUNDS, sizeof signal_ns[0], cmp_u64);
    qsort(wake_ns, ROUNDS, sizeof wake_ns[0], cmp_u64);
    c.signal_ns = (int64_t)signal_ns[ROUNDS / 2];
    c.wake_ns = (int64_t)wake_ns[ROUNDS / 2];
    c.bytes_per_ns = l1_bytes_per_ns((size_t)l1);
    return c;
}

int64_t kiln__handoff_inline_max_bytes(const kiln__handoff_costs *c) {
    /* what the kernel moves while the caller would hand the op over, at most the L1 cache: an
     * op that small finds its inputs in the cache of the thread that just wrote them */
    double bytes = (double)c->signal_ns * c->bytes_per_ns;
    return bytes < (double)c->l1_bytes ? (int64_t)bytes : c->l1_bytes;
}
