/* How long the intra-op pool polls (threadpool.c: a caller waiting for its workers, a worker
 * that finished a job waiting for the next) before it sleeps on a condition variable.
 *
 * Polling wins when the event comes before a sleep and a wake-up would have: a miss costs a
 * wake-up (the futex call and the sleeper's return to the CPU), a poll costs the core. A poll as
 * long as one wake-up is the classic spin-then-block bound (never more than twice the best
 * choice made knowing the future). The pool polls POLL_WAKEUPS times that: the events it waits
 * for come in trains (the ops of a BERT layer, ~20 us apart, each a job for the pool), and a
 * worker asleep at one op is asleep at the next ones too, each paying a wake-up, while a worker
 * that polls through a gap stays awake for the whole train.
 *
 * Before this rule the poll was a constant, 50 us, chosen on one machine for that train (a
 * 16-token BERT pass); it stays as the rule without a measurement. The measurement is made once
 * per CPU model and cached with the other speed decisions (tune.c, KILN_TUNE). */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE 1
#endif
#include "backend/cpu/pool_poll.h"
#include "core/poll.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>
#include <time.h>

#define ROUNDS 31
/* The spinning rounds must all finish within this (a preempted round costs a time slice, a few
 * ms: the median leaves a few out); when they do not, the machine is too loaded to say what a
 * wake-up costs, and the rule is kept. */
#define SPIN_ROUNDS_MAX_NS 20000000
#define POLL_WAKEUPS 4

static uint64_t now_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (uint64_t)t.tv_sec * 1000000000ull + (uint64_t)t.tv_nsec;
}

/* Two threads pass a turn back and forth: odd turns are the partner's to answer, even ones the
 * measuring thread's. First through `turn` under `lock` (each side sleeps on its condition
 * variable until its turn), then through `spin` (each side polls it). */
typedef struct pingpong {
    pthread_mutex_t lock;
    pthread_cond_t to_partner, to_main;
    int turn;
    atomic_int spin;
    atomic_bool give_up;
} pingpong;

static void *partner_main(void *arg) {
    pingpong *p = arg;
    pthread_mutex_lock(&p->lock);
    for (int r = 0; r < ROUNDS; r++) {
        while (p->turn != 2 * r + 1) pthread_cond_wait(&p->to_partner, &p->lock);
        p->turn = 2 * r + 2;
        pthread_cond_signal(&p->to_main);
    }
    pthread_mutex_unlock(&p->lock);
    for (int r = 0; r < ROUNDS; r++) {
        while (atomic_load_explicit(&p->spin, memory_order_acquire) != 2 * r + 1) {
            if (atomic_load_explicit(&p->give_up, memory_order_relaxed)) return NULL;
            kiln__cpu_relax();
        }
        atomic_store_explicit(&p->spin, 2 * r + 2, memory_order_release);
    }
    return NULL;
}

static int cmp_u64(const void *a, const void *b) {
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

int64_t kiln__pool_measure_wake_ns(void) {
    pingpong p = {.lock = PTHREAD_MUTEX_INITIALIZER,
                  .to_partner = PTHREAD_COND_INITIALIZER,
                  .to_main = PTHREAD_COND_INITIALIZER};
    atomic_init(&p.spin, 0);
    atomic_init(&p.give_up, false);
    pthread_t partner;
    if (pthread_create(&partner, NULL, partner_main, &p) != 0) return 0;
    uint64_t sleep_rt[ROUNDS], spin_rt[ROUNDS];
    /* (the first round also waits for the partner to start: the median leaves it out) */
    pthread_mutex_lock(&p.lock);
    for (int r = 0; r < ROUNDS; r++) {
        uint64_t t0 = now_ns();
        p.turn = 2 * r + 1;
        pthread_cond_signal(&p.to_partner);
        while (p.turn != 2 * r + 2) pthread_cond_wait(&p.to_main, &p.lock);
        sleep_rt[r] = now_ns() - t0;
    }
    pthread_mutex_unlock(&p.lock);
    bool in_time = true;
    uint64_t give_up = now_ns() + SPIN_ROUNDS_MAX_NS;
    for (int r = 0; r < ROUNDS && in_time; r++) {
        uint64_t t0 = now_ns();
        atomic_store_explicit(&p.spin, 2 * r + 1, memory_order_release);
        for (int polls = 1; atomic_load_explicit(&p.spin, memory_order_acquire) != 2 * r + 2; polls++) {
            if (polls % 64 == 0 && now_ns() > give_up) {
                in_time = false;
                break;
            }
            kiln__cpu_relax();
        }
        spin_rt[r] = now_ns() - t0;
    }
    atomic_store(&p.give_up, true);
    pthread_join(partner, NULL);
    pthread_cond_destroy(&p.to_partner);
    pthread_cond_destroy(&p.to_main);
    pthread_mutex_destroy(&p.lock);
    if (!in_time) return 0;
    qsort(sleep_rt, ROUNDS, sizeof sleep_rt[0], cmp_u64);
    qsort(spin_rt, ROUNDS, sizeof spin_rt[0], cmp_u64);
    int64_t sleeping = (int64_t)sleep_rt[ROUNDS / 2], spinning = (int64_t)spin_rt[ROUNDS / 2];
    /* a spinning hand-off not clearly cheaper than a sleeping one: the two threads did not have
     * a core each (a loaded machine), and nothing is learned */
    if (2 * spinning >= sleeping) return 0;
    return (sleeping - spinning) / 2;
}

int64_t kiln__pool_poll_from_wake(int64_t wake_ns) {
    if (wake_ns <= 0) return KILN__POOL_POLL_RULE_NS;
    int64_t poll = wake_ns > KILN__POOL_POLL_MAX_NS ? KILN__POOL_POLL_MAX_NS : POLL_WAKEUPS * wake_ns;
    if (poll < KILN__POOL_POLL_MIN_NS) return KILN__POOL_POLL_MIN_NS;
    return poll > KILN__POOL_POLL_MAX_NS ? KILN__POOL_POLL_MAX_NS : poll;
}
