/* CPU caching allocator: 64-byte aligned blocks in size classes (4 per power of two, so at
 * most 25% slack), freed blocks kept per class for reuse up to a byte limit. KILN_NO_CACHING=1
 * sends every call to the system allocator, so sanitizers see each buffer's true lifetime.
 *
 * A request whose class has no free block takes one from the next larger classes
 * (BORROW_CLASSES, at most 50% slack) before asking the system: in a steady loop the number of
 * buffers of one size alive at once varies a little with the workers' timing, and without this
 * every new maximum of any class was a new system allocation, so the cache kept growing (412 ->
 * 1004 system allocations over 100,000 steps of a small loop, issue #23). The caller keeps the
 * size granted and frees with it, so a block always goes back to its own class. */
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "core/core-impl.h"

#define ALIGNMENT 64
#define NUM_CLASSES 256
#define DEFAULT_CACHE_LIMIT ((size_t)4 << 30)
#define BORROW_CLASSES 2

typedef struct free_block {
    struct free_block *next;
} free_block;

static struct {
    atomic_bool lock; /* cache_lock() */
    free_block *classes[NUM_CLASSES];
    size_t cached_bytes;
    size_t cache_limit;
    int caching; /* -1 unknown */
} cache = {.caching = -1};

/* The cache's lock is held for a list push or pop: a spinlock (one locked instruction), where a
 * mutex took two and a hundred instructions of each tiny op's allocation and free (callgrind);
 * a waiter gives its core away, so a holder that was preempted gets it back. */
static void cache_lock(void) {
    while (atomic_exchange_explicit(&cache.lock, true, memory_order_acquire))
        while (atomic_load_explicit(&cache.lock, memory_order_relaxed)) sched_yield();
}

static void cache_unlock(void) { atomic_store_explicit(&cache.lock, false, memory_order_release); }

void kiln__alloc_fork_lock(bool lock) {
    if (lock)
        cache_lock();
    else
        cache_unlock();
}

static struct {
    _Atomic int64_t in_use, peak;
    _Atomic int64_t cached; /* device allocators' cached bytes */
    atomic_ullong allocs, system_allocs;
} stats[KILN__DEVICE_SLOTS];

static atomic_llong fail_countdown;

void kiln_debug_fail_alloc_after(int64_t n) { atomic_store(&fail_countdown, n); }

bool kiln__alloc_should_fail(void) {
    long long n = atomic_load_explicit(&fail_countdown, memory_order_relaxed);
    if (KILN__LIKELY(n <= 0)) return false;
    return atomic_fetch_sub(&fail_countdown, 1) == 1;
}

/* Size class: for sizes up to 256 bytes one class per 64 bytes, then 4 classes per power of two. */
int kiln__alloc_size_class(size_t n, size_t *rounded) {
    if (n <= 256) {
        size_t r = (n + 63) & ~(size_t)63;
        if (r == 0) r = 64;
        *rounded = r;
        return (int)(r / 64) - 1; /* 0..3 */
    }
    int lg = 63 - __builtin_clzll((unsigned long long)(n - 1)); /* n-1 in [2^lg, 2^(lg+1)) */
    size_t step = (size_t)1 << (lg - 2);
    size_t r = (n + step - 1) & ~(step - 1);
    *rounded = r;
    int sub = (int)((r >> (lg - 2)) & 3); /* position within the power of two */
    int cls = 4 + (lg - 8) * 4 + sub;
    return cls < NUM_CLASSES ? cls : -1;
}

static bool caching_enabled(void) {
    int c = __atomic_load_n(&cache.caching, __ATOMIC_ACQUIRE);
    if (c < 0) {
        c = !kiln__env_flag("KILN_NO_CACHING", false);
        size_t limit = (size_t)kiln__env_int_range("KILN_CACHE_LIMIT_MB", 0, (int64_t)(SIZE_MAX >> 21),
                                                   (int64_t)(DEFAULT_CACHE_LIMIT >> 20)) << 20;
        cache_lock();
        cache.cache_limit = limit;
        cache_unlock();
        __atomic_store_n(&cache.caching, c, __ATOMIC_RELEASE);
    }
    return c;
}

/* A free block of class cls or of one of the BORROW_CLASSES classes above it (cache.lock
 * held), with its size in *granted; NULL if none. */
static free_block *take_cached(int cls, size_t rounded, size_t *granted) {
    for (int k = 0; k <= BORROW_CLASSES && cls >= 0; k++) {
        free_block *b = cache.classes[cls];
        if (b) {
            cache.classes[cls] = b->next;
            cache.cached_bytes -= rounded;
            *granted = rounded;
            return b;
        }
        cls = kiln__alloc_size_class(rounded + 1, &rounded); /* the next larger class */
    }
    return NULL;
}

void *kiln__cpu_alloc(size_t nbytes, size_t *granted) {
    *granted = nbytes;
    if (kiln__alloc_should_fail()) return NULL;
    size_t rounded = nbytes;
    int cls = caching_enabled() ? kiln__alloc_size_class(nbytes, &rounded) : -1;
    if (cls >= 0) {
        cache_lock();
        free_block *b = take_cached(cls, rounded, granted);
        cache_unlock();
        if (b) {
            kiln__stats_count_alloc(KILN_CPU, false);
            return b;
        }
    }
    void *p = NULL;
    if (posix_memalign(&p, ALIGNMENT, rounded ? rounded : ALIGNMENT) != 0) return NULL;
    kiln__stats_count_alloc(KILN_CPU, true);
    *granted = rounded;
    return p;
}

void kiln__cpu_free(void *p, size_t nbytes) {
    if (!p) return;
    size_t rounded = nbytes;
    int cls = caching_enabled() ? kiln__alloc_size_class(nbytes, &rounded) : -1;
    if (cls >= 0) {
        cache_lock();
        if (cache.cached_bytes + rounded <= cache.cache_limit) {
            free_block *b = p;
            b->next = cache.classes[cls];
            cache.classes[cls] = b;
            cache.cached_bytes += rounded;
            p = NULL;
        }
        cache_unlock();
    }
    free(p);
}

void kiln__cpu_empty_cache(void) {
    free_block *all = NULL; /* freed after the lock: a spinlock is held for short steps only */
    cache_lock();
    for (int c = 0; c < NUM_CLASSES; c++) {
        free_block *b = cache.classes[c];
        while (b) {
            free_block *next = b->next;
            b->next = all;
            all = b;
            b = next;
        }
        cache.classes[c] = NULL;
    }
    cache.cached_bytes = 0;
    cache_unlock();
    while (all) {
        free_block *next = all->next;
        free(all);
        all = next;
    }
}

void kiln__stats_add_in_use(kiln_device dev, int64_t delta) {
    int k = kiln__device_slot(dev);
    if (NEVER(k < 0)) return;
    int64_t now = atomic_fetch_add(&stats[k].in_use, delta) + delta;
    int64_t peak = atomic_load_explicit(&stats[k].peak, memory_order_relaxed);
    while (now > peak && !atomic_compare_exchange_weak(&stats[k].peak, &peak, now)) {
    }
}

void kiln__stats_count_alloc(kiln_device dev, bool from_system) {
    int k = kiln__device_slot(dev);
    if (NEVER(k < 0)) return;
    atomic_fetch_add_explicit(&stats[k].allocs, 1, memory_order_relaxed);
    if (from_system) atomic_fetch_add_explicit(&stats[k].system_allocs, 1, memory_order_relaxed);
}

void kiln__stats_add_cached(kiln_device dev, int64_t delta) {
    int k = kiln__device_slot(dev);
    if (ALWAYS(k > 0)) atomic_fetch_add_explicit(&stats[k].cached, delta, memory_order_relaxed);
}

kiln_memory_stats kiln__memory_stats_snapshot(kiln_device dev) {
    kiln_memory_stats s = {0};
    int k = kiln__device_slot(dev);
    if (NEVER(k < 0)) return s;
    s.bytes_in_use = (uint64_t)atomic_load(&stats[k].in_use);
    s.peak_bytes = (uint64_t)atomic_load(&stats[k].peak);
    s.alloc_count = atomic_load(&stats[k].allocs);
    s.system_allocs = atomic_load(&stats[k].system_allocs);
    s.bytes_cached = (uint64_t)atomic_load(&stats[k].cached);
    int64_t live, inplace;
    kiln__stats_counts_sum(&live, &inplace);
    s.inplace_reuses = (uint64_t)inplace;
    s.live_tensors = (uint64_t)live;
    if (dev == KILN_CPU) {
        cache_lock();
        s.bytes_cached = cache.cached_bytes;
        cache_unlock();
    }
    return s;
}

void kiln__memory_reset_peak(kiln_device dev) {
    int k = kiln__device_slot(dev);
    if (NEVER(k < 0)) return;
    atomic_store(&stats[k].peak, atomic_load(&stats[k].in_use));
}
