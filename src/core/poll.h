/* One step of a thread's bounded poll for an event another thread will post (the intra-op pool's
 * workers and caller, threadpool.c; the engine's workers, queue_workers.c), so that every poll
 * gives its core away the same way.
 *
 * A poll holds its core. Under a real-time policy (`chrt -f 50`: SCHED_FIFO never time-slices
 * threads of one priority) a polling thread keeps a core that another kiln thread, woken and
 * runnable, waits for until the poll ends. So there, every KILN__POLL_YIELD_EVERY steps, the poll
 * yields: a no-op system call when no thread waits for this core, the waiting thread's turn when
 * one does. Not more often: a yield that hands the core over delays the poller's own answer by
 * the other thread's turn, and the pool's caller polls for its workers on the product's critical
 * path (yielding every 64 steps, about 1.5 us, made a 256 product 7% slower under `chrt -f 50`;
 * every 1024 measured as not yielding). 1024 steps of `pause` are about 25 us on an AMD Zen 5 (its
 * pause takes ~60 cycles; ~140 on recent Intel cores).
 *
 * Under the ordinary policies the poll never yields: the scheduler time-slices the core by
 * itself, and a yield costs the poller its share. Linux's EEVDF scheduler (6.6 on) moves a
 * yielding thread's virtual runtime to the end of its slice, as if it had run all of it, whenever
 * another task shares its CPU: a thread polling 1024 pauses per yield got 0.02 s of a CPU in 1 s
 * beside one busy loop, 0.36-0.44 s without the yields (0.10 against 0.63-0.67 beside a busy loop
 * at nice 10; AMD EPYC Zen 5, Linux 6.18, 2026-11-30). That was #29's slow rounds of matmul_256:
 * the pool's worker, sharing its CPU with any other process, yielded itself off it for whole
 * rounds, and its caller did both tiles of every product (126-132 us against 65-70). The policy is
 * asked once per KILN__POLL_POLICY_EVERY yield points (a thread moved to SCHED_FIFO later polls
 * without yielding a few ms at most).
 *
 *   for (int polls = 1; !atomic_load(&flag); polls++) {
 *       if (polls % 64 == 0 && now() > give_up) break;   // (then sleep on a condition variable)
 *       kiln__poll_step(polls);
 *   }
 */
#ifndef KILN_CORE_POLL_H
#define KILN_CORE_POLL_H

#include <sched.h>
#include <stdbool.h>

#define KILN__POLL_YIELD_EVERY 1024

/* The CPU's spin-wait hint alone (no yield): for a spin that must not give its core away, as
 * pool_poll.c's measurement of a spinning hand-off. */
static inline void kiln__cpu_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    __asm__ __volatile__("yield");
#endif
}

#define KILN__POLL_POLICY_EVERY 256

/* This thread runs under a real-time policy (SCHED_FIFO or SCHED_RR), asked of the kernel once
 * per KILN__POLL_POLICY_EVERY calls. */
static inline bool kiln__poll_thread_realtime(void) {
    static _Thread_local int calls, realtime;
    if (calls++ % KILN__POLL_POLICY_EVERY == 0) {
        int policy = sched_getscheduler(0);
        realtime = policy == SCHED_FIFO || policy == SCHED_RR;
    }
    return realtime;
}

static inline void kiln__poll_step(int polls) {
    if (polls % KILN__POLL_YIELD_EVERY == 0 && kiln__poll_thread_realtime()) {
        sched_yield();
        return;
    }
    kiln__cpu_relax();
}

#endif
