/* Counters that every op moves (tensor objects alive, in-place reuses), kept per thread: a
 * thread adds to its own counter with a plain load and store, and kiln_memory_stats_get sums
 * them. A shared atomic counter cost a locked instruction per count, three per small op (about
 * a tenth of its dispatch on a loaded machine). A thread's counts join the retired sums when it
 * exits; a thread whose counter cannot be allocated counts in the retired sums directly. */
#include <pthread.h>
#include <stdlib.h>

#include "core/core-impl.h"

typedef struct thread_counts {
    _Atomic int64_t live_tensors, inplace; /* written by the owning thread only */
    struct thread_counts *next, *prev;
} thread_counts;

static struct {
    pthread_mutex_t lock;
    thread_counts *threads;
    _Atomic int64_t live_tensors, inplace; /* of exited threads, and of those without a counter */
    pthread_once_t once;
    pthread_key_t key;
    bool have_key;
} counts = {.lock = PTHREAD_MUTEX_INITIALIZER, .once = PTHREAD_ONCE_INIT};

static _Thread_local thread_counts *mine;

static void thread_exit(void *arg) {
    thread_counts *c = arg;
    pthread_mutex_lock(&counts.lock);
    atomic_fetch_add(&counts.live_tensors, atomic_load(&c->live_tensors));
    atomic_fetch_add(&counts.inplace, atomic_load(&c->inplace));
    if (c->prev)
        c->prev->next = c->next;
    else
        counts.threads = c->next;
    if (c->next) c->next->prev = c->prev;
    pthread_mutex_unlock(&counts.lock);
    if (mine == c) mine = NULL; /* a later count (another exit handler) registers again */
    free(c);
}

static void key_create(void) { counts.have_key = pthread_key_create(&counts.key, thread_exit) == 0; }

/* The calling thread's counter, registered on first use; NULL without memory for one. */
static thread_counts *my_counts(void) {
    if (KILN__LIKELY(mine != NULL)) return mine;
    pthread_once(&counts.once, key_create);
    thread_counts *c = counts.have_key ? calloc(1, sizeof *c) : NULL;
    if (!c) return NULL;
    if (pthread_setspecific(counts.key, c) != 0) {
        free(c);
        return NULL;
    }
    pthread_mutex_lock(&counts.lock);
    c->next = counts.threads;
    if (c->next) c->next->prev = c;
    counts.threads = c;
    pthread_mutex_unlock(&counts.lock);
    mine = c;
    return c;
}

static void add(_Atomic int64_t *own, _Atomic int64_t *shared, int64_t delta) {
    if (own)
        atomic_store_explicit(own, atomic_load_explicit(own, memory_order_relaxed) + delta, memory_order_relaxed);
    else
        atomic_fetch_add_explicit(shared, delta, memory_order_relaxed);
}

void kiln__stats_count_tensor(int delta) {
    thread_counts *c = my_counts();
    add(c ? &c->live_tensors : NULL, &counts.live_tensors, delta);
}

void kiln__stats_count_inplace(void) {
    thread_counts *c = my_counts();
    add(c ? &c->inplace : NULL, &counts.inplace, 1);
}

void kiln__stats_counts_sum(int64_t *live_tensors, int64_t *inplace) {
    pthread_mutex_lock(&counts.lock);
    int64_t live = atomic_load(&counts.live_tensors), in = atomic_load(&counts.inplace);
    for (const thread_counts *c = counts.threads; c; c = c->next) {
        live += atomic_load_explicit(&c->live_tensors, memory_order_relaxed);
        in += atomic_load_explicit(&c->inplace, memory_order_relaxed);
    }
    pthread_mutex_unlock(&counts.lock);
    *live_tensors = live;
    *inplace = in;
}

void kiln__counts_fork_lock(bool lock) {
    if (lock)
        pthread_mutex_lock(&counts.lock);
    else
        pthread_mutex_unlock(&counts.lock);
}
