/* The one intra-op thread pool of the CPU backend.
 *
 * Every CPU kernel that wants more than one core splits its index space through
 * kiln__parallel_for; nothing else in kiln creates compute threads. Between calls a worker
 * polls for a bounded moment (kiln__pool_poll_ns, yielding its core now and then: core/poll.h),
 * then sleeps on a condition variable, so a BLAS library running its own threads next to us
 * gets the cores it was given.
 *
 *   static void add_one(void *ctx, int64_t begin, int64_t end) {
 *       float *x = ctx;
 *       for (int64_t i = begin; i < end; i++) x[i] += 1.0f;
 *   }
 *   kiln__parallel_for(n, 16384, add_one, x);   // returns when every index is done
 *
 * Concurrency contract:
 *  - Calls from inside a running range function (nested) run inline on that thread.
 *  - Two host threads calling at once are both correct: the pool serves one call at a
 *    time and a caller that finds it busy runs its whole range inline instead of waiting,
 *    because its own thread is a core's worth of work the pool could not give it anyway.
 *  - kiln__pool_set_threads waits for the call in flight, then resizes; called from
 *    inside a range function it only records the size, applied by the next call. */
#ifndef KILN_BACKEND_CPU_THREADPOOL_H
#define KILN_BACKEND_CPU_THREADPOOL_H

#include <stdint.h>

typedef void (*kiln__range_fn)(void *ctx, int64_t begin, int64_t end);

/* Total threads a parallel_for may use, the caller included. The default is the
 * environment variable KILN_NUM_THREADS when set to a positive number, otherwise the
 * CPUs this process may run on (sched_getaffinity). */
int kiln__pool_threads(void);

/* Use n threads in total (n < 1 is taken as 1). Safe between ops and from any thread. */
void kiln__pool_set_threads(int n);

/* Split [0, n) into chunks of at least `grain` items and run fn over them on the pool and
 * the calling thread; returns when all are done. Runs fn(ctx, 0, n) inline, touching no
 * thread, when n <= grain, when only one thread is configured, when nested, or when
 * another host thread holds the pool. Does nothing when n <= 0. */
void kiln__parallel_for(int64_t n, int64_t grain, kiln__range_fn fn, void *ctx);

/* Lends the pool's cores to a library with threads of its own (oneDNN's OpenMP): returns 1
 * when this thread now holds the pool, so that every other parallel_for runs inline on its
 * caller until kiln__pool_unclaim; 0 (nothing held) when another caller holds it or this
 * thread is inside a parallel region, and the library call should then use one thread.
 *
 *   int held = kiln__pool_try_claim();
 *   run_library(held ? kiln__pool_threads() : 1);
 *   if (held) kiln__pool_unclaim(); */
int kiln__pool_try_claim(void);
void kiln__pool_unclaim(void);

/* True on a pool worker and on a caller while it runs its share of a parallel_for. */
int kiln__pool_in_parallel_region(void);

/* How long a caller polls for its workers before sleeping (ns), and the least a worker polls for
 * the next job: the rule of pool_poll.h until the speed decisions (tune.c) set the measured one;
 * ns <= 0 sets the rule. KILN_POOL_POLL_NS, when set, wins over both and fixes the worker's
 * window too. */
void kiln__pool_set_poll_ns(int64_t ns);

int64_t kiln__pool_poll_ns(void);
/* A worker's poll for the next job now: from kiln__pool_poll_ns up, following the gaps between
 * jobs (pool_adapt.h). */
int64_t kiln__pool_worker_window_ns(void);

/* How many times a worker found itself on its caller's CPU and moved off it (threadpool.c,
 * KILN_POOL_SPREAD); for tests. */
uint64_t kiln__pool_spread_count(void);

/* Join the workers. The pool restarts lazily on the next parallel_for. Registered with
 * atexit on first use, so a leak checker sees no threads at exit. */
void kiln__pool_shutdown(void);

#endif
