/* Running queued ops: the queue's layer below admission (queue.c). A node whose every access is
 * granted (deps.c) goes to the ready queue, where one pool of engine workers takes it, or, for a
 * collective, to the communication thread; a thread waiting on its stream runs its own ready
 * nodes instead of sleeping. Completion records the stream's earliest error, releases the nodes
 * waiting on the node's storages (the first one made ready runs next on the same thread), takes
 * the node out of its stream's bounds and kiln_sync_all's epoch (queue_epochs.c) and gives the
 * node and its fused group back to the stream that made them. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE 1 /* pthread_setname_np */
#endif
#include <stdlib.h>

#include "backend/backend-impl.h"
#include "core/poll.h"
#include "engine/profiler.h"
#include "engine/queue-impl.h"

#define MAX_WORKERS 64

atomic_int kiln__workers_polling = 0;

static struct {
    int n_workers;
    pthread_t workers[MAX_WORKERS];
    pthread_mutex_t lock; /* ready queue */
    pthread_cond_t ready_cond;
    kiln__node *ready_head, *ready_tail;
    atomic_int ready_count; /* peeked without the lock by polling workers */
    int sleeping;           /* workers waiting on ready_cond */
    bool stopping;
    int64_t poll_ns; /* how long a worker polls before it sleeps (queue.c's rule) */
    /* the communication thread: runs the collectives, one at a time, so a collective blocked
     * on its peers never holds a compute worker (started with the first collective) */
    pthread_once_t comm_once;
    bool comm_started;
    pthread_t comm_thread;
    pthread_cond_t comm_cond;
    kiln__node *comm_head, *comm_tail; /* guarded by workers.lock */
} workers = {.lock = PTHREAD_MUTEX_INITIALIZER,
             .ready_cond = PTHREAD_COND_INITIALIZER,
             .comm_once = PTHREAD_ONCE_INIT,
             .comm_cond = PTHREAD_COND_INITIALIZER};

static void free_node_list(kiln__node *n) {
    while (n) {
        kiln__node *next = n->next_ready;
        free(n);
        n = next;
    }
}

void kiln__group_list_free(kiln__group_link *l, int keep) {
    for (int i = 0; l; i++) {
        kiln__group_link *next = l->next;
        if (i + 1 == keep) l->next = NULL;
        if (i + 1 > keep) free(l);
        l = next;
    }
}

void kiln__group_return(kiln__stream *s, const kiln__fused *g) {
    /* (read before the link overwrites the record's first bytes. Its room, not its ops: a whole
     * record a window handed over holding fewer ops than it has room for was labelled by its
     * ops, the window's next group then found no spare that large, and each flush freed one
     * and took a new 27 KiB record from malloc, whose consolidation of the small free chunks
     * was a tenth of Python's tiny-op dispatch: perf) */
    int cap = g->cap;
    kiln__group_link *l = (kiln__group_link *)(void *)(intptr_t)g;
    l->cap = cap;
    void *head = atomic_load_explicit(&s->returned_groups, memory_order_relaxed);
    do {
        l->next = head;
    } while (!atomic_compare_exchange_weak_explicit(&s->returned_groups, &head, l, memory_order_release,
                                                    memory_order_relaxed));
}

void kiln__stream_unref(kiln__stream *s) {
    if (atomic_fetch_sub_explicit(&s->refs, 1, memory_order_acq_rel) != 1) return;
    kiln__backends_stream_end(s->id); /* a device's queue for it */
    free_node_list(s->spare);
    free_node_list(atomic_load(&s->returned));
    kiln__group_list_free(s->spare_groups, 0);
    kiln__group_list_free(atomic_load(&s->returned_groups), 0);
    kiln__error_unref(s->first_error);
    pthread_mutex_destroy(&s->lock);
    pthread_cond_destroy(&s->cond);
    free(s);
}

static void *worker_main(void *arg);

bool kiln__workers_start(int n, int64_t poll_ns) {
    workers.poll_ns = poll_ns;
    if (n > MAX_WORKERS) n = MAX_WORKERS;
    for (int i = 0; i < n; i++) {
        if (pthread_create(&workers.workers[i], NULL, worker_main, (void *)(intptr_t)i) != 0) break;
        pthread_setname_np(workers.workers[i], "kiln-engine"); /* (for top -H and perf sched) */
        workers.n_workers++;
    }
    return workers.n_workers > 0;
}

/* fork() (stream.c's handlers, when the engine runs asynchronously): the queue's locks are taken
 * before, so the child inherits none held by a thread it lacks; the child starts with an empty
 * queue and no workers (it runs every op at dispatch). */
void kiln__queue_fork_lock(void) {
    kiln__epochs_fork_lock();
    pthread_mutex_lock(&workers.lock);
}

void kiln__queue_fork_unlock(void) {
    pthread_mutex_unlock(&workers.lock);
    kiln__epochs_fork_unlock();
}

void kiln__queue_fork_child(void) {
    workers.n_workers = 0;
    workers.ready_head = workers.ready_tail = NULL;
    workers.comm_head = workers.comm_tail = NULL; /* (the child runs collectives at dispatch) */
    atomic_store(&workers.ready_count, 0);
    atomic_store(&kiln__workers_polling, 0);
    workers.sleeping = 0;
    pthread_cond_init(&workers.ready_cond, NULL);
    pthread_mutex_unlock(&workers.lock);
    kiln__epochs_fork_child();
}

/* ---- ready queue and workers -------------------------------------------------------------- */

static kiln__node *run_node(kiln__node *n, bool chain);

/* The profiler's worker id of the communication thread (the last of its 64 tracks). */
#define COMM_WORKER_ID 63

static void *comm_main(void *arg) {
    (void)arg;
    kiln__profiler_set_worker(COMM_WORKER_ID);
    pthread_mutex_lock(&workers.lock);
    for (;;) {
        while (!workers.comm_head && !workers.stopping) pthread_cond_wait(&workers.comm_cond, &workers.lock);
        kiln__node *n = workers.comm_head;
        if (!n) break;
        workers.comm_head = n->next_ready;
        if (!workers.comm_head) workers.comm_tail = NULL;
        pthread_mutex_unlock(&workers.lock);
        run_node(n, false);
        pthread_mutex_lock(&workers.lock);
    }
    pthread_mutex_unlock(&workers.lock);
    return NULL;
}

static void comm_start(void) {
    workers.comm_started = pthread_create(&workers.comm_thread, NULL, comm_main, NULL) == 0;
}

/* Appends n to a FIFO of nodes (workers.lock held). */
static void fifo_append(kiln__node **head, kiln__node **tail, kiln__node *n) {
    if (*tail)
        (*tail)->next_ready = n;
    else
        *head = n;
    *tail = n;
}

/* kiln__queue_flush_for_wait's stream (this thread's flush before its wait), and whether a push
 * of its skipped the wake-up */
static _Thread_local const kiln__stream *flushing_for_wait;
static _Thread_local bool wake_skipped;

void kiln__queue_flush_for_wait(kiln__stream *s) { flushing_for_wait = s; }

static void push_ready(kiln__node *n) {
    n->next_ready = NULL;
    if (KILN__UNLIKELY(kiln__opcode_is_comm(n->op.code))) {
        pthread_once(&workers.comm_once, comm_start);
        if (workers.comm_started) {
            pthread_mutex_lock(&workers.lock);
            fifo_append(&workers.comm_head, &workers.comm_tail, n);
            pthread_cond_signal(&workers.comm_cond);
            pthread_mutex_unlock(&workers.lock);
            return;
        }
    }
    pthread_mutex_lock(&workers.lock);
    fifo_append(&workers.ready_head, &workers.ready_tail, n);
    atomic_fetch_add_explicit(&workers.ready_count, 1, memory_order_release);
    /* a wake-up is a system call: only pay it when no worker is awake to find the op, and not for
     * the one op the thread that queued it is about to run as it waits */
    int ready = atomic_load_explicit(&workers.ready_count, memory_order_relaxed);
    bool waiter_runs_it = n->stream == flushing_for_wait && ready == 1;
    if (workers.sleeping > 0 && ready > atomic_load_explicit(&kiln__workers_polling, memory_order_relaxed)) {
        if (waiter_runs_it)
            wake_skipped = true;
        else
            pthread_cond_signal(&workers.ready_cond);
    }
    pthread_mutex_unlock(&workers.lock);
}

/* The end of a wait that began with kiln__queue_flush_for_wait: an op it skipped the wake-up for
 * and left queued (the wait ended first: an event done before it) gets a worker now. */
static void wait_done(void) {
    flushing_for_wait = NULL;
    if (!wake_skipped) return;
    wake_skipped = false;
    pthread_mutex_lock(&workers.lock);
    if (workers.sleeping > 0 &&
        atomic_load_explicit(&workers.ready_count, memory_order_relaxed) > atomic_load_explicit(&kiln__workers_polling, memory_order_relaxed))
        pthread_cond_signal(&workers.ready_cond);
    pthread_mutex_unlock(&workers.lock);
}

/* ---- errors ------------------------------------------------------------------------------- */

/* The earliest: the one a synchronous run would have met first, whatever order the workers
 * finished in. */
void kiln__stream_record_error_locked(kiln__stream *s, kiln__error *e) {
    if (atomic_load(&e->delivered)) return;
    kiln__error *old = s->first_error;
    if (old && !atomic_load(&old->delivered) && old->order <= e->order) return;
    s->first_error = kiln__error_ref(e);
    kiln__error_unref(old);
}

void kiln__stream_record_error(kiln__stream *s, kiln__error *e) {
    pthread_mutex_lock(&s->lock);
    kiln__stream_record_error_locked(s, e);
    pthread_mutex_unlock(&s->lock);
}

void kiln__stream_record_error_now(kiln__stream *s, kiln__error *e) {
    pthread_mutex_lock(&s->lock);
    if (e->order == 0) e->order = 2 * s->seq + 1; /* after the ops queued so far */
    kiln__stream_record_error_locked(s, e);
    pthread_mutex_unlock(&s->lock);
}

kiln__error *kiln__stream_take_error(kiln__stream *s) {
    pthread_mutex_lock(&s->lock);
    kiln__error *e = s->first_error;
    s->first_error = NULL;
    pthread_mutex_unlock(&s->lock);
    return e;
}

void kiln__stream_forget_error(kiln__stream *s, kiln__error *e) {
    kiln__error_mark_delivered(e); /* another thread's stream may hold it too */
    pthread_mutex_lock(&s->lock);
    if (s->first_error == e) {
        kiln__error_unref(s->first_error);
        s->first_error = NULL;
    }
    pthread_mutex_unlock(&s->lock);
}

/* ---- completion --------------------------------------------------------------------------- */

/* With keep given and still empty, the node made ready goes to *keep: the thread that
 * completed the op n waited for runs it next, so a chain of dependent ops stays on one thread
 * without a queue hand-off or a wake-up call. A free of kiln's own memory runs here at once,
 * before the op that made it ready reports its completion: queued, it could still wait for a
 * worker when the read that ended the step had returned, and the next step's buffers then
 * missed the cache and came from the system, a few more at each unlucky moment (issue #23).
 * User memory's release callback still runs on a worker: it may call kiln, and this thread may
 * hold a fusion window. */
bool kiln__node_release_grant(kiln__node *n, kiln__node **keep) {
    if (atomic_fetch_sub_explicit(&n->wait, 1, memory_order_acq_rel) != 1) return false;
    if (n->free_target && !n->free_target->borrowed) {
        run_node(n, false);
        return false;
    }
    if (keep && !*keep && !kiln__opcode_is_comm(n->op.code)) {
        *keep = n;
        return false;
    }
    push_ready(n);
    return true; /* (queued) */
}

static void complete(kiln__node *n, kiln__error *err, kiln__node **keep) {
    kiln__stream *s = n->stream;
    if (err) { /* recorded before dependents are released: a read of them may deliver it */
        pthread_mutex_lock(&s->lock);
        kiln__stream_record_error_locked(s, err);
        if (n->event && !n->event->first_error) n->event->first_error = kiln__error_ref(err);
        pthread_mutex_unlock(&s->lock);
    }
    kiln__node *granted[64];
    bool queued = false;
    for (int i = 0; i < n->n_vars; i++) {
        int g = kiln__var_complete(n->vars[i].var, n->vars[i].write, granted, 64);
        for (int k = 0; k < g; k++) queued |= kiln__node_release_grant(granted[k], keep);
    }
    pthread_mutex_lock(&s->lock);
    bool event_done = n->event && --n->event->pending == 0;
    atomic_store_explicit(&s->pending_ops, atomic_load_explicit(&s->pending_ops, memory_order_relaxed) - 1,
                          memory_order_relaxed);
    s->pending_bytes -= n->bytes;
    /* the waits on s->cond (kiln__stream_wait_helping) end on an event done, the stream idle,
     * room in its bounds; a waiter also helps with ops put in the queue. An op that only handed
     * its successor to this thread wakes no one: a wake-up per op of a chain would cost a system
     * call and a core's time at each op. */
    if (queued || event_done || s->pending_ops == 0 || s->waiting_for_room > 0) pthread_cond_broadcast(&s->cond);
    pthread_mutex_unlock(&s->lock);
    kiln__epoch_done(n->epoch);
    /* back to the stream that made it (before dropping our reference to that stream) */
    kiln__node *head = atomic_load_explicit(&s->returned, memory_order_relaxed);
    do {
        n->next_ready = head;
    } while (!atomic_compare_exchange_weak_explicit(&s->returned, &head, n, memory_order_release,
                                                    memory_order_relaxed));
    kiln__stream_unref(s);
}

/* Runs n; returns the op its completion made ready that this thread is to run next (chain: see
 * kiln__node_release_grant), or NULL. */
static kiln__node *run_node(kiln__node *n, bool chain) {
    kiln__node *next = NULL;
    if (n->free_target) {
        /* every earlier user is done: nothing can follow a free in the storage's queue */
        kiln__storage *target = n->free_target;
        kiln__var *v = target->var;
        n->n_vars = 0;
        target->var = NULL;
        kiln__var_free(v);
        kiln__storage_destroy(target);
        complete(n, NULL, chain ? &next : NULL);
        return next;
    }
    kiln__error *err = kiln__execute(&n->op);
    if (n->op.code == KILN__OP_FUSED) kiln__group_return(n->stream, (const kiln__fused *)(intptr_t)n->op.p.i[0]);
    complete(n, err, chain ? &next : NULL);
    kiln__error_unref(err);
    return next;
}

/* After finishing an op a worker polls the queue for a short while before sleeping: a
 * frontend dispatching a burst of small ops then finds it awake and skips the wake-up call.
 * The poll lasts as long as a sleep and wake-up take on this machine (workers.poll_ns, see
 * handoff.c), so idle workers do not hold cores from BLAS threads for longer than waking
 * them would cost, and yields its core now and then (core/poll.h: under SCHED_FIFO a poll would
 * otherwise keep it from a woken kiln thread). The clock is read every POLLS_PER_CLOCK polls. */
#define POLLS_PER_CLOCK 32

static kiln__node *pop_ready(bool may_sleep) {
    pthread_mutex_lock(&workers.lock);
    if (may_sleep) {
        while (!workers.ready_head && !workers.stopping) {
            workers.sleeping++;
            pthread_cond_wait(&workers.ready_cond, &workers.lock);
            workers.sleeping--;
        }
    }
    kiln__node *n = workers.ready_head;
    if (n) {
        workers.ready_head = n->next_ready;
        if (!workers.ready_head) workers.ready_tail = NULL;
        atomic_fetch_sub_explicit(&workers.ready_count, 1, memory_order_relaxed);
    }
    pthread_mutex_unlock(&workers.lock);
    return n;
}

static void *worker_main(void *arg) {
    kiln__profiler_set_worker((int)(intptr_t)arg);
    for (;;) {
        kiln__node *n = NULL;
        atomic_fetch_add_explicit(&kiln__workers_polling, 1, memory_order_relaxed);
        uint64_t poll_end = kiln__now_ns() + (uint64_t)workers.poll_ns;
        for (int i = 1; !n; i++) {
            if (atomic_load_explicit(&workers.ready_count, memory_order_acquire) > 0)
                n = pop_ready(false);
            else if (i % POLLS_PER_CLOCK == 0 && kiln__now_ns() >= poll_end)
                break;
            else
                kiln__poll_step(i); /* (yields now and then: core/poll.h) */
        }
        atomic_fetch_sub_explicit(&kiln__workers_polling, 1, memory_order_relaxed);
        if (!n) n = pop_ready(true);
        if (!n) return NULL; /* stopping */
        while (n) n = run_node(n, true);
    }
}

/* ---- waiting threads help --------------------------------------------------------------- */

/* Takes the first ready op of stream s out of the queue (NULL if none). */
static kiln__node *pop_ready_of(const kiln__stream *s) {
    pthread_mutex_lock(&workers.lock);
    kiln__node *prev = NULL, *n = workers.ready_head;
    while (n && n->stream != s) prev = n, n = n->next_ready;
    if (n) {
        if (prev)
            prev->next_ready = n->next_ready;
        else
            workers.ready_head = n->next_ready;
        if (workers.ready_tail == n) workers.ready_tail = prev;
        atomic_fetch_sub_explicit(&workers.ready_count, 1, memory_order_relaxed);
    }
    pthread_mutex_unlock(&workers.lock);
    return n;
}

/* A thread about to wait runs one of its own stream's ready ops instead: the hand-off to a
 * sleeping worker and back costs more than a small op. Only its own: a sync must never end up
 * waiting for another thread's work. n is the op the previous one left this thread (or NULL:
 * one from the queue); returns the op this one leaves, NULL if none. *ran: whether one ran. */
static kiln__node *help_one(const kiln__stream *s, kiln__node *n, bool *ran) {
    if (n && n->stream != s) push_ready(n), n = NULL;
    if (!n && atomic_load_explicit(&workers.ready_count, memory_order_acquire) > 0) n = pop_ready_of(s);
    *ran = n != NULL;
    return n ? run_node(n, true) : NULL;
}

void kiln__stream_wait_helping(kiln__stream *s, bool (*done)(kiln__stream *, void *), void *arg) {
    kiln__node *next = NULL;
    while (!done(s, arg)) {
        if (next || atomic_load_explicit(&workers.ready_count, memory_order_acquire) > 0) {
            pthread_mutex_unlock(&s->lock);
            bool ran;
            next = help_one(s, next, &ran);
            pthread_mutex_lock(&s->lock);
            if (ran) continue;
            if (done(s, arg)) break; /* the lock was dropped: it may have happened meanwhile */
        }
        pthread_cond_wait(&s->cond, &s->lock);
    }
    if (next) { /* done before the op left to this thread: a worker takes it */
        pthread_mutex_unlock(&s->lock);
        push_ready(next);
        pthread_mutex_lock(&s->lock);
    }
}

static bool event_done(kiln__stream *s, void *ev) { return ((kiln__event *)ev)->pending == 0; }
static bool stream_idle(kiln__stream *s, void *arg) { return s->pending_ops == 0; }

void kiln__queue_wait_event(kiln__stream *s, kiln__event *ev) {
    flushing_for_wait = NULL; /* (its flush is over: later pushes wake workers as usual) */
    pthread_mutex_lock(&s->lock);
    kiln__stream_wait_helping(s, event_done, ev);
    pthread_mutex_unlock(&s->lock);
    wait_done();
}

void kiln__queue_wait_idle(kiln__stream *s) {
    flushing_for_wait = NULL;
    pthread_mutex_lock(&s->lock);
    kiln__stream_wait_helping(s, stream_idle, NULL);
    pthread_mutex_unlock(&s->lock);
    wait_done();
}
