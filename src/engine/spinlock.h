/* A spinlock for the engine's short critical sections that two threads rarely contend: a
 * window's (its owner takes it per op) and a storage's dependency state (its caller appends an
 * access, the thread that ran the last one completes it). It costs a tenth of a mutex's
 * instructions and one locked instruction instead of two (the release is a plain store); a
 * waiter yields its core after a short spin, so a holder that was preempted gets it back. */
#ifndef KILN_ENGINE_SPINLOCK_H
#define KILN_ENGINE_SPINLOCK_H

#include <sched.h>
#include <stdatomic.h>
#include <stdbool.h>

static inline void kiln__spin_lock(atomic_bool *lock) {
    for (int spins = 0; atomic_exchange_explicit(lock, true, memory_order_acquire);) {
        while (atomic_load_explicit(lock, memory_order_relaxed)) {
            if (++spins < 64) {
#if defined(__x86_64__) || defined(__i386__)
                __builtin_ia32_pause();
#endif
            } else {
                sched_yield();
            }
        }
    }
}

static inline void kiln__spin_unlock(atomic_bool *lock) { atomic_store_explicit(lock, false, memory_order_release); }

#endif
