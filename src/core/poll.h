/* One step of a thread's bounded poll for an event another thread will post (the intra-op pool's
 * workers and caller, threadpool.c; the engine's workers, queue_workers.c), so that every poll
 * gives its core away the same way.
 *
 * A poll holds its core. Under the ordinary scheduler that costs others a time slice at worst;
 * under a real-time policy (`chrt -f 50`: SCHED_FIFO never time-slices threads of one priority)
 * a polling thread keeps a core that another kiln thread, woken and runnable, waits for until
 * the poll ends. So every KILN__POLL_YIELD_EVERY steps the poll yields: a no-op system call when
 * no thread waits for this core, the waiting thread's turn when one does. Not more often: a yield
 * that hands the core over delays the poller's own answer by the other thread's turn, and the
 * pool's caller polls for its workers on the product's critical path (yielding every 64 steps, about
 * 1.5 us, made a 256 product 7% slower under `chrt -f 50`; every 1024 measured as not yielding).
 * 1024 steps of `pause` are about 25 us on an AMD Zen 5 (its pause takes ~60 cycles; ~140 on recent
 * Intel cores): polls shorter than that never yield, and the longest (200 us) gives its core away
 * every 25.
 *
 *   for (int polls = 1; !atomic_load(&flag); polls++) {
 *       if (polls % 64 == 0 && now() > give_up) break;   // (then sleep on a condition variable)
 *       kiln__poll_step(polls);
 *   }
 */
#ifndef KILN_CORE_POLL_H
#define KILN_CORE_POLL_H

#include <sched.h>

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

static inline void kiln__poll_step(int polls) {
    if (polls % KILN__POLL_YIELD_EVERY == 0) {
        sched_yield();
        return;
    }
    kiln__cpu_relax();
}

#endif
