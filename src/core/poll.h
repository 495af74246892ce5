/* One step of a thread's bounded poll for an event another thread will post (the intra-op pool's
 * workers and caller, threadpool.c; the engine's workers, queue_workers.c), so that every poll
 * gives its core away the same way.
 *
 * A poll holds its core. Under the ordinary scheduler that costs others a time slice at worst;
 * under a real-time policy (`chrt -f 50`: SCHED_FIFO never time-slices threads of one priority)
 * a polling thread keeps a core that another kiln thread, woken and runnable, waits for until
 * the poll ends: the product's second thread, or the caller the product's end woke (#29:
 * matmul_1024 ran at one core's speed in 4 rounds of 5 so). So every KILN__POLL_YIELD_EVERY
 * steps the poll yields: a no-op system call when no thread waits for this core (about 0.2 us
 * here, a few percent of a poll's steps), the waiting thread's turn when one does.
 *
 *   for (int polls = 1; !atomic_load(&flag); polls++) {
 *       if (polls % 64 == 0 && now() > give_up) break;   // (then sleep on a condition variable)
 *       kiln__poll_step(polls);
 *   }
 */
#ifndef KILN_CORE_POLL_H
#define KILN_CORE_POLL_H

#include <sched.h>

/* About 1-3 us of pause instructions (their latency differs by CPU) between two yields. */
#define KILN__POLL_YIELD_EVERY 64

static inline void kiln__poll_step(int polls) {
    if (polls % KILN__POLL_YIELD_EVERY == 0) {
        sched_yield();
        return;
    }
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    __asm__ __volatile__("yield");
#endif
}

#endif
