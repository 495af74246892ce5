/* The intra-op pool: one job at a time, chunks claimed through an atomic counter.
 *
 * A call publishes a job under `state_lock` and wakes just enough workers, then works on
 * chunks itself. When the caller runs out of chunks it retracts the job (so late wakers
 * ignore it) and waits only for workers that actually joined. Because of that a caller
 * never waits for a worker that is slow to wake: the work is done by whoever gets there,
 * and the caller's stack-allocated job is no longer referenced when it returns. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE 1 /* sched_getaffinity, CPU_COUNT */
#endif
#include "backend/cpu/threadpool.h"
#include "backend/cpu/pool_adapt.h"
#include "backend/cpu/pool_poll.h"
#include "core/core-impl.h"
#include "core/poll.h"

#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

enum {
    POOL_MAX_THREADS = 1024,
    /* Chunks per thread: more than one so a caller that starts before its workers wake
     * can take extra chunks instead of leaving the tail to a late worker. */
    POOL_CHUNKS_PER_THREAD = 4,
};

/* How long a caller polls for its workers to finish before sleeping (pool_wait_for_workers),
 * and how long a worker that finished a job polls for the next one before it sleeps: a chain of
 * small parallel ops (a 16-token sentence through BERT: a product, a few tiny ops, the next
 * product, ~20 us apart) then finds it awake instead of paying a wake-up per op. The rule
 * (pool_poll.c) until the speed decisions are made (tune.c sets the measured one). */
static _Atomic int64_t pool_poll_ns = KILN__POOL_POLL_RULE_NS;
/* A worker's poll for the next job: a window that follows the gaps between jobs, from that poll
 * up (pool_adapt.c), shared by the workers; fixed at the poll when KILN_POOL_POLL_NS is set. */
static _Atomic int64_t worker_window_ns = KILN__POOL_POLL_RULE_NS;
static atomic_bool poll_fixed;

static void pool_apply_poll_ns(int64_t ns) {
    /* KILN_POOL_POLL_NS wins over both, and stops the adaptation: to compare polls in one build */
    atomic_store_explicit(&poll_fixed, getenv("KILN_POOL_POLL_NS") != NULL, memory_order_relaxed);
    ns = kiln__env_int_range("KILN_POOL_POLL_NS", 0, 1000000000, ns > 0 ? ns : KILN__POOL_POLL_RULE_NS);
    atomic_store_explicit(&pool_poll_ns, ns, memory_order_relaxed);
    atomic_store_explicit(&worker_window_ns, ns, memory_order_relaxed);
}

int64_t kiln__pool_poll_ns(void) { return atomic_load_explicit(&pool_poll_ns, memory_order_relaxed); }

int64_t kiln__pool_worker_window_ns(void) { return atomic_load_explicit(&worker_window_ns, memory_order_relaxed); }

/* One gap between a worker's poll and the next job, seconds (polled: the job came during it). */
static void pool_learn_gap(double gap, bool polled) {
    if (atomic_load_explicit(&poll_fixed, memory_order_relaxed)) return;
    int64_t window = kiln__pool_adapt_window(kiln__pool_worker_window_ns(), (int64_t)(gap * 1e9), polled,
                                             kiln__pool_poll_ns());
    atomic_store_explicit(&worker_window_ns, window, memory_order_relaxed);
}

static double pool_poll_seconds(void) { return 1e-9 * (double)kiln__pool_poll_ns(); }

typedef struct pool_job {
    kiln__range_fn fn;
    void *ctx;
    int caller_cpu; /* the CPU the caller published it from (-1: unknown) */
    int64_t chunk_count;
    int64_t chunk_base; /* every chunk has chunk_base items, the first chunk_extra one more */
    int64_t chunk_extra;
    atomic_int_fast64_t next_chunk;
} pool_job;

static struct {
    /* Held by the one host thread whose call the pool is serving, and by resizes. */
    pthread_mutex_t caller_lock;
    /* Guards every field below it. */
    pthread_mutex_t state_lock;
    pthread_cond_t work_ready; /* workers sleep here */
    pthread_cond_t work_done;  /* the caller waits here for joined workers */
    pool_job *job;             /* the published job, NULL between calls */
    _Atomic uint64_t job_generation; /* bumped per job so a worker runs each job at most once;
                                      * polled without the lock by a worker that just finished one */
    atomic_int busy_workers;   /* workers inside the job; changed under state_lock */
    int stopping;
    pthread_t *workers;
    int worker_count;
    int worker_start_failed; /* stop retrying pthread_create until the next resize */
    atomic_int threads_wanted;
} pool = {
    .caller_lock = PTHREAD_MUTEX_INITIALIZER,
    .state_lock = PTHREAD_MUTEX_INITIALIZER,
    .work_ready = PTHREAD_COND_INITIALIZER,
    .work_done = PTHREAD_COND_INITIALIZER,
};

static pthread_once_t pool_once = PTHREAD_ONCE_INIT;
static _Thread_local int thread_in_region;
static _Thread_local int thread_locked_for_fork;

static int pool_clamp_threads(long n) {
    if (n < 1) return 1;
    if (n > POOL_MAX_THREADS) return POOL_MAX_THREADS;
    return (int)n;
}

static int pool_default_threads(void) {
    int64_t n = kiln__env_int("KILN_NUM_THREADS", 1, 0);
    if (n > 0) return pool_clamp_threads(n < POOL_MAX_THREADS ? (long)n : POOL_MAX_THREADS);
    cpu_set_t set;
    CPU_ZERO(&set);
    if (sched_getaffinity(0, sizeof set, &set) == 0) {
        int count = CPU_COUNT(&set);
        if (count > 0) return pool_clamp_threads(count);
    }
    return pool_clamp_threads(sysconf(_SC_NPROCESSORS_ONLN));
}

static void pool_stop_workers_locked_by_caller(void);

/* At exit another thread may still be inside a call (exit from a signal handler or a
 * second thread); joining would then hang, so only tidy up when the pool is idle. */
static void pool_shutdown_at_exit(void) {
    if (pthread_mutex_trylock(&pool.caller_lock) != 0) return;
    pool_stop_workers_locked_by_caller();
    pthread_mutex_unlock(&pool.caller_lock);
}

/* fork() copies only the forking thread. Holding both locks across it means the child
 * never inherits a lock owned by a thread that no longer exists; the child then forgets
 * the parent's workers and starts its own on first use. Forking from inside a range
 * function cannot take the locks (this thread already holds or waits on them) and is
 * not supported. */
static void pool_before_fork(void) {
    thread_locked_for_fork = !thread_in_region;
    if (!thread_locked_for_fork) return;
    pthread_mutex_lock(&pool.caller_lock);
    pthread_mutex_lock(&pool.state_lock);
}

static void pool_after_fork_parent(void) {
    if (!thread_locked_for_fork) return;
    pthread_mutex_unlock(&pool.state_lock);
    pthread_mutex_unlock(&pool.caller_lock);
}

static void pool_after_fork_child(void) {
    free(pool.workers);
    pool.workers = NULL;
    pool.worker_count = 0;
    atomic_store(&pool.busy_workers, 0);
    pool.job = NULL;
    pool.stopping = 0;
    pool.worker_start_failed = 0;
    pool_after_fork_parent();
}

static void pool_init_once(void) {
    atomic_store(&pool.threads_wanted, pool_default_threads());
    pool_apply_poll_ns(0); /* (the rule, or KILN_POOL_POLL_NS) */
    atexit(pool_shutdown_at_exit);
    pthread_atfork(pool_before_fork, pool_after_fork_parent, pool_after_fork_child);
}

static void pool_ensure_init(void) { pthread_once(&pool_once, pool_init_once); }

static void pool_chunk_bounds(const pool_job *job, int64_t chunk, int64_t *begin, int64_t *end) {
    int64_t extra_before = chunk < job->chunk_extra ? chunk : job->chunk_extra;
    *begin = chunk * job->chunk_base + extra_before;
    *end = *begin + job->chunk_base + (chunk < job->chunk_extra ? 1 : 0);
}

/* A worker that runs on the CPU its caller published the job from: the scheduler stacked the
 * two, and the worker only ever runs when the caller does not. It happens on a machine where the
 * other CPUs are busy (#29: a wake-up placed the worker beside its waker, and a worker that polls
 * never sleeps again to be placed anew, so it stayed): in a 256 x 256 product loop beside other
 * processes (AMD EPYC Zen 5, 2 vCPUs, load 5-8), the worker reached 7 of 202 jobs, all on the
 * caller's CPU, and the process's products took 128-130 us, the caller's time alone, against
 * 66 us. The worker then moves itself off that CPU (its allowed CPUs less that one, then all of
 * them again: a mask the worker's CPU is in moves nothing), to compete there with whatever runs,
 * instead of with its own caller. At most once per POOL_SPREAD_EVERY_S per worker: a scheduler
 * that kept stacking them would cost three system calls and a migration up to 500 times a second
 * (in the measured loops it happened a few times a process). KILN_POOL_SPREAD=0 turns it off. */
#define POOL_SPREAD_EVERY_S 0.002

static double pool_seconds_now(void);

static bool pool_spread_on(void) {
    static atomic_int cached = -1;
    int v = atomic_load_explicit(&cached, memory_order_relaxed);
    if (v < 0) {
        v = kiln__env_flag("KILN_POOL_SPREAD", true);
        atomic_store_explicit(&cached, v, memory_order_relaxed);
    }
    return v;
}

static _Atomic uint64_t pool_spread_count; /* (tests: kiln__pool_spread_count) */

uint64_t kiln__pool_spread_count(void) { return atomic_load_explicit(&pool_spread_count, memory_order_relaxed); }

/* The worker holds state_lock, and holds it again on return; true when it let go of it (to move). */
static bool pool_spread_from(int caller_cpu, double *last_spread) {
    if (caller_cpu < 0 || sched_getcpu() != caller_cpu || !pool_spread_on()) return false;
    double now = pool_seconds_now();
    if (*last_spread > 0 && now - *last_spread < POOL_SPREAD_EVERY_S) return false;
    *last_spread = now;
    pthread_mutex_unlock(&pool.state_lock);
    cpu_set_t allowed, others;
    if (sched_getaffinity(0, sizeof allowed, &allowed) == 0 && caller_cpu < CPU_SETSIZE &&
        CPU_ISSET(caller_cpu, &allowed)) {
        others = allowed;
        CPU_CLR(caller_cpu, &others);
        /* now elsewhere, it stays there once its mask is whole again; should that fail (the
         * cpuset changed meanwhile) it keeps the narrower mask, still runnable, and is not counted */
        if (CPU_COUNT(&others) > 0 && sched_setaffinity(0, sizeof others, &others) == 0 &&
            sched_setaffinity(0, sizeof allowed, &allowed) == 0)
            atomic_fetch_add_explicit(&pool_spread_count, 1, memory_order_relaxed);
    }
    pthread_mutex_lock(&pool.state_lock);
    return true;
}

static void pool_run_chunks(pool_job *job) {
    for (;;) {
        int64_t chunk = atomic_fetch_add_explicit(&job->next_chunk, 1, memory_order_relaxed);
        if (chunk >= job->chunk_count) return;
        int64_t begin, end;
        pool_chunk_bounds(job, chunk, &begin, &end);
        job->fn(job->ctx, begin, end);
    }
}

/* A worker that has run a job polls, for its window and without the lock, for the next one to
 * be published (caller holds state_lock and releases it). Returns when the poll began if it gave
 * up (the worker then sleeps, and learns the gap when it wakes for a job), else -1. */
static double pool_worker_poll(uint64_t seen_generation) {
    pthread_mutex_unlock(&pool.state_lock);
    double start = pool_seconds_now();
    double give_up = start + 1e-9 * (double)kiln__pool_worker_window_ns();
    for (int polls = 1;; polls++) {
        if (atomic_load_explicit(&pool.job_generation, memory_order_relaxed) != seen_generation) {
            pool_learn_gap(pool_seconds_now() - start, true);
            start = -1;
            break;
        }
        if (polls % 64 == 0 && pool_seconds_now() > give_up) break;
        kiln__poll_step(polls); /* (yields now and then: core/poll.h) */
    }
    pthread_mutex_lock(&pool.state_lock);
    return start;
}

/* arg carries the job generation current when the worker was created: reading it here
 * instead would skip a job published before this thread first ran. */
static void *pool_worker_main(void *arg) {
    uint64_t seen_generation = (uint64_t)(uintptr_t)arg;
    int ran = 0; /* a job since the last sleep: poll before the next */
    double gave_up = -1; /* when the poll that preceded this sleep began (-1: none) */
    double last_spread = 0; /* when it last moved off its caller's CPU (pool_spread_from) */
    thread_in_region = 1;
    pthread_mutex_lock(&pool.state_lock);
    for (;;) {
        bool idle = !pool.stopping && (pool.job == NULL || pool.job_generation == seen_generation);
        if (idle && ran) gave_up = pool_worker_poll(seen_generation);
        ran = 0;
        while (!pool.stopping && (pool.job == NULL || pool.job_generation == seen_generation)) {
            pthread_cond_wait(&pool.work_ready, &pool.state_lock);
            if (gave_up >= 0 && pool.job_generation != seen_generation) {
                pool_learn_gap(pool_seconds_now() - gave_up, false);
                gave_up = -1;
            }
            /* Woken for a job its caller already finished alone (a wake-up can take longer
             * than a small job): poll for the next one as after running one. Without this a
             * worker that missed one job of a chain of small ones (a 16-token sentence's
             * products, ~10-40 us apart) slept through every later one, each caller doing all
             * of its chunks alone. */
            if (pool.job == NULL && pool.job_generation != seen_generation) {
                seen_generation = pool.job_generation;
                gave_up = pool_worker_poll(seen_generation);
            }
        }
        if (pool.stopping) break;
        seen_generation = pool.job_generation;
        pool_job *job = pool.job;
        /* Moved before it joins: a worker the caller waits for must not be the one queued on a
         * busy CPU. Then the job is looked at again (the caller may have finished it alone). */
        if (pool_spread_from(job->caller_cpu, &last_spread) &&
            (pool.job == NULL || pool.job_generation != seen_generation)) {
            ran = 1;
            continue;
        }
        /* A late waker that finds every chunk taken stays out, so the caller never waits
         * on a worker that has nothing to do. */
        if (atomic_load_explicit(&job->next_chunk, memory_order_relaxed) >= job->chunk_count) {
            ran = 1; /* (poll for the next one all the same, as above) */
            continue;
        }
        atomic_fetch_add(&pool.busy_workers, 1);
        pthread_mutex_unlock(&pool.state_lock);

        pool_run_chunks(job);
        ran = 1;

        pthread_mutex_lock(&pool.state_lock);
        /* The caller retracts the job before it waits, so only wake it when it can be
         * waiting; otherwise it sees busy_workers reach 0 by itself. The decrement also
         * publishes this worker's results to a caller that reads the count unlocked. */
        if (atomic_fetch_sub(&pool.busy_workers, 1) == 1 && pool.job == NULL)
            pthread_cond_signal(&pool.work_done);
    }
    pthread_mutex_unlock(&pool.state_lock);
    return NULL;
}

/* Caller holds caller_lock, so no job is in flight. */
static void pool_stop_workers_locked_by_caller(void) {
    pthread_mutex_lock(&pool.state_lock);
    int count = pool.worker_count;
    pthread_t *workers = pool.workers;
    pool.stopping = 1;
    pthread_cond_broadcast(&pool.work_ready);
    pthread_mutex_unlock(&pool.state_lock);

    for (int i = 0; i < count; i++) pthread_join(workers[i], NULL);
    free(workers);

    pthread_mutex_lock(&pool.state_lock);
    pool.workers = NULL;
    pool.worker_count = 0;
    pool.stopping = 0;
    pool.worker_start_failed = 0;
    pthread_mutex_unlock(&pool.state_lock);
}

/* Caller holds caller_lock. Starts workers up to threads_wanted - 1; when the system
 * refuses threads the pool keeps the ones it got and runs with fewer. */
static void pool_start_workers_locked_by_caller(int wanted_workers) {
    if (pool.worker_count >= wanted_workers || pool.worker_start_failed) return;
    pthread_t *workers = realloc(pool.workers, (size_t)wanted_workers * sizeof *workers);
    if (!workers) {
        pool.worker_start_failed = 1;
        return;
    }
    pthread_mutex_lock(&pool.state_lock);
    pool.workers = workers;
    pthread_mutex_unlock(&pool.state_lock);
    /* Workers start with every signal blocked, so that process-directed signals keep
     * going to the application's own threads. */
    sigset_t all_signals, caller_signals;
    sigfillset(&all_signals);
    pthread_sigmask(SIG_SETMASK, &all_signals, &caller_signals);
    while (pool.worker_count < wanted_workers) {
        /* job_generation only changes under caller_lock, which we hold. */
        void *generation = (void *)(uintptr_t)pool.job_generation;
        int rc = pthread_create(&workers[pool.worker_count], NULL, pool_worker_main, generation);
        if (rc != 0) {
            pool.worker_start_failed = 1;
            break;
        }
        pthread_setname_np(workers[pool.worker_count], "kiln-worker");
        pthread_mutex_lock(&pool.state_lock);
        pool.worker_count++;
        pthread_mutex_unlock(&pool.state_lock);
    }
    pthread_sigmask(SIG_SETMASK, &caller_signals, NULL);
}

static double pool_seconds_now(void) {
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    return (double)now.tv_sec + 1e-9 * (double)now.tv_nsec;
}

/* The job is retracted; wait for the workers still inside it. A futex wake-up costs
 * ~20 us on a virtual machine, comparable to a whole small op, so the caller first polls
 * for a bounded moment: its own core has nothing else to do until the op is complete, unless
 * another thread waits for it (the poll yields: core/poll.h). */
static void pool_wait_for_workers(void) {
    if (atomic_load(&pool.busy_workers) == 0) return;
    double give_up = pool_seconds_now() + pool_poll_seconds();
    for (int polls = 1;; polls++) {
        if (atomic_load(&pool.busy_workers) == 0) return;
        if (polls % 64 == 0 && pool_seconds_now() > give_up) break;
        kiln__poll_step(polls);
    }
    pthread_mutex_lock(&pool.state_lock);
    while (atomic_load(&pool.busy_workers) > 0) pthread_cond_wait(&pool.work_done, &pool.state_lock);
    pthread_mutex_unlock(&pool.state_lock);
}

void kiln__pool_set_poll_ns(int64_t ns) {
    pool_ensure_init(); /* (its rule must not overwrite this one later) */
    pool_apply_poll_ns(ns);
}

int kiln__pool_threads(void) {
    pool_ensure_init();
    return atomic_load_explicit(&pool.threads_wanted, memory_order_relaxed);
}

void kiln__pool_set_threads(int n) {
    pool_ensure_init();
    n = pool_clamp_threads(n);
    if (thread_in_region) {
        /* The pool is busy with the call this thread is part of; waiting for it would
         * deadlock. The next call trims or grows the workers instead. */
        atomic_store(&pool.threads_wanted, n);
        return;
    }
    pthread_mutex_lock(&pool.caller_lock);
    if (n != atomic_load(&pool.threads_wanted)) {
        pool_stop_workers_locked_by_caller();
        atomic_store(&pool.threads_wanted, n);
    }
    pthread_mutex_unlock(&pool.caller_lock);
}

int kiln__pool_in_parallel_region(void) { return thread_in_region; }

int kiln__pool_try_claim(void) {
    pool_ensure_init();
    return !thread_in_region && pthread_mutex_trylock(&pool.caller_lock) == 0;
}

void kiln__pool_unclaim(void) { pthread_mutex_unlock(&pool.caller_lock); }

void kiln__pool_shutdown(void) {
    pool_ensure_init();
    pthread_mutex_lock(&pool.caller_lock);
    pool_stop_workers_locked_by_caller();
    pthread_mutex_unlock(&pool.caller_lock);
}

void kiln__parallel_for(int64_t n, int64_t grain, kiln__range_fn fn, void *ctx) {
    if (n <= 0) return;
    if (grain < 1) grain = 1;
    int threads = kiln__pool_threads();
    if (n <= grain || threads <= 1 || thread_in_region) {
        fn(ctx, 0, n);
        return;
    }
    int64_t chunk_count = n / grain;
    if (chunk_count > (int64_t)threads * POOL_CHUNKS_PER_THREAD)
        chunk_count = (int64_t)threads * POOL_CHUNKS_PER_THREAD;
    if (chunk_count <= 1 || pthread_mutex_trylock(&pool.caller_lock) != 0) {
        fn(ctx, 0, n);
        return;
    }
    /* Stable until the job is published: only caller_lock holders and threads inside a
     * running job change threads_wanted. */
    threads = atomic_load_explicit(&pool.threads_wanted, memory_order_relaxed);
    if (pool.worker_count > threads - 1) pool_stop_workers_locked_by_caller();
    pool_start_workers_locked_by_caller(threads - 1);
    int helpers = pool.worker_count;
    if (helpers > chunk_count - 1) helpers = (int)(chunk_count - 1);
    if (helpers <= 0) {
        pthread_mutex_unlock(&pool.caller_lock);
        fn(ctx, 0, n);
        return;
    }

    pool_job job = {.fn = fn, .ctx = ctx, .caller_cpu = sched_getcpu(), .chunk_count = chunk_count,
                    .chunk_base = n / chunk_count, .chunk_extra = n % chunk_count};
    atomic_init(&job.next_chunk, 0);

    pthread_mutex_lock(&pool.state_lock);
    pool.job = &job;
    pool.job_generation++;
    if (helpers >= pool.worker_count) {
        pthread_cond_broadcast(&pool.work_ready);
    } else {
        for (int i = 0; i < helpers; i++) pthread_cond_signal(&pool.work_ready);
    }
    pthread_mutex_unlock(&pool.state_lock);

    thread_in_region = 1;
    pool_run_chunks(&job);
    thread_in_region = 0;

    pthread_mutex_lock(&pool.state_lock);
    pool.job = NULL;
    pthread_mutex_unlock(&pool.state_lock);
    pool_wait_for_workers();
    pthread_mutex_unlock(&pool.caller_lock);
}
