/* The bounded queue: the asynchronous engine's layer below fusion. The streams (stream.c) and
 * the fusion windows (fusion.c) hand it op records and fused groups; each becomes a node ordered
 * by per-storage dependencies (deps.c) and runs on one pool of engine workers, or on the
 * collectives' communication thread, or at once on its caller's thread when that is cheaper
 * (handoff.c). Here also: the stream's bounds (ops in flight, bytes pending), past which the
 * frontend waits, helping to run its own ready ops; completion, which records a stream's
 * earliest error and releases the ops waiting on the node's storages; the epochs kiln_sync_all
 * waits for; the recycling of nodes and groups. It calls nothing above it: a wait for the whole
 * engine (out of memory) goes through the drain the streams register (kiln__queue_init). */
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "backend/backend-impl.h"
#include "engine/fusion-impl.h" /* (kiln__fusion_is_reduction: fusion_join.c's opcode rule, a leaf) */
#include "engine/handoff.h"
#include "engine/node.h"
#include "engine/profiler.h"
#include "engine/queue.h"
#include "ir/expr.h"

#define DEFAULT_MAX_INFLIGHT 4096
/* Bytes of op outputs not yet computed plus buffers released but not yet freed: how far the
 * frontend may run ahead in memory. Small, so an async program peaks near a synchronous one;
 * a single larger op still goes through alone. */
#define DEFAULT_MAX_BYTES ((int64_t)64 << 20)
#define MAX_WORKERS 64

/* Work queued between two kiln_sync_all calls: a sync_all starts a new epoch and waits only
 * for the ops counted in earlier ones, so threads that keep dispatching cannot hold it. */
typedef struct kiln__epoch {
    int64_t pending;
    uint64_t id;
    struct kiln__epoch *next, *prev; /* live epochs, newest first; or the spare list */
} kiln__epoch;

static struct {
    int n_workers;
    pthread_t workers[MAX_WORKERS];
    pthread_mutex_t lock; /* ready queue */
    pthread_cond_t ready_cond;
    kiln__node *ready_head, *ready_tail;
    atomic_int ready_count; /* peeked without the lock by spinning workers */
    int sleeping;           /* workers waiting on ready_cond */
    atomic_int spinning;    /* workers polling the queue */
    bool stopping;
    /* all streams: for kiln_sync_all */
    pthread_mutex_t all_lock;
    pthread_cond_t all_cond;
    kiln__epoch *epoch;       /* the current one, head of the live list */
    kiln__epoch *spare_epochs;
    kiln__epoch first_epoch;
    void (*drain_all)(void); /* the streams' kiln__engine_drain_all (kiln__queue_init) */
    _Atomic int64_t max_inflight, max_bytes; /* read by every stream without a lock */
    /* what handing an op to a worker costs here (handoff.c), and the rules made of it: how long
     * a worker polls before it sleeps, and the largest op its caller runs itself */
    kiln__handoff_costs handoff;
    int64_t poll_ns;
    _Atomic int64_t inline_max_bytes;
    int64_t inline_default;
    /* the communication thread: runs the collectives, one at a time, so a collective blocked
     * on its peers never holds a compute worker (started with the first collective) */
    pthread_once_t comm_once;
    bool comm_started;
    pthread_t comm_thread;
    pthread_cond_t comm_cond;
    kiln__node *comm_head, *comm_tail; /* guarded by engine.lock */
} engine = {.lock = PTHREAD_MUTEX_INITIALIZER,
            .ready_cond = PTHREAD_COND_INITIALIZER,
            .all_lock = PTHREAD_MUTEX_INITIALIZER,
            .all_cond = PTHREAD_COND_INITIALIZER,
            .comm_once = PTHREAD_ONCE_INIT,
            .comm_cond = PTHREAD_COND_INITIALIZER,
            .epoch = &engine.first_epoch};

static void free_node_list(kiln__node *n) {
    while (n) {
        kiln__node *next = n->next_ready;
        free(n);
        n = next;
    }
}

/* A recycled fused group, linked through its first bytes (its contents are dead), with room
 * for `cap` ops. */
typedef struct group_link {
    struct group_link *next;
    int cap;
} group_link;

/* Groups a stream keeps for reuse beyond those in flight: enough for the groups of a burst
 * between two reads of a loop; more go back to malloc. */
#define SPARE_GROUPS 8

static void free_group_list(group_link *l, int keep) {
    for (int i = 0; l; i++) {
        group_link *next = l->next;
        if (i + 1 == keep) l->next = NULL;
        if (i + 1 > keep) free(l);
        l = next;
    }
}

kiln__fused *kiln__stream_group_alloc(kiln__stream *s, int n_ops) {
    group_link *l = s->spare_groups;
    if (!l) {
        l = atomic_exchange_explicit(&s->returned_groups, NULL, memory_order_acquire);
        free_group_list(l, SPARE_GROUPS); /* (keeps the first SPARE_GROUPS) */
    }
    if (l) {
        s->spare_groups = l->next;
        if (l->cap >= n_ops) return (kiln__fused *)(void *)l; /* (its cap field is intact) */
        free(l);
    }
    kiln__fused *g = malloc(KILN__FUSED_SIZE(n_ops));
    if (g) g->cap = n_ops;
    return g;
}

/* Gives a group that has run back to the stream that built it (any thread). */
static void group_return(kiln__stream *s, const kiln__fused *g) {
    /* (read before the link overwrites the record's first bytes. Its room, not its ops: a whole
     * record a window handed over holding fewer ops than it has room for was labelled by its
     * ops, the window's next group then found no spare that large, and each flush freed one
     * and took a new 27 KiB record from malloc, whose consolidation of the small free chunks
     * was a tenth of Python's tiny-op dispatch: perf) */
    int cap = g->cap;
    group_link *l = (group_link *)(void *)(intptr_t)g;
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
    free_group_list(s->spare_groups, 0);
    free_group_list(atomic_load(&s->returned_groups), 0);
    kiln__error_unref(s->first_error);
    pthread_mutex_destroy(&s->lock);
    pthread_cond_destroy(&s->cond);
    free(s);
}

static void *worker_main(void *arg);

void kiln__queue_init(void (*drain_all)(void)) {
    engine.drain_all = drain_all;
    engine.max_inflight = kiln__env_int_range("KILN_MAX_INFLIGHT", 1, INT32_MAX, DEFAULT_MAX_INFLIGHT);
    engine.max_bytes = kiln__env_int_range("KILN_MAX_PENDING_MB", 1, INT64_MAX >> 20, DEFAULT_MAX_BYTES >> 20) << 20;
}

bool kiln__queue_start_workers(void) {
    engine.handoff = kiln__handoff_measure();
    /* poll as long as a sleep and wake-up would take; unmeasured, 20 us */
    int64_t sleep_wake_ns = engine.handoff.signal_ns ? engine.handoff.signal_ns + engine.handoff.wake_ns : 20000;
    engine.poll_ns = kiln__env_int_range("KILN_POLL_NS", 0, INT32_MAX, sleep_wake_ns);
    engine.inline_default = kiln__env_int_range("KILN_INLINE_MAX_BYTES", 0, INT64_MAX,
                                                kiln__handoff_inline_max_bytes(&engine.handoff));
    atomic_store(&engine.inline_max_bytes, engine.inline_default);
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    int n = (int)kiln__env_int("KILN_ENGINE_THREADS", 1, cpus > 0 ? cpus : 2);
    if (n > MAX_WORKERS) n = MAX_WORKERS;
    for (int i = 0; i < n; i++) {
        if (pthread_create(&engine.workers[i], NULL, worker_main, (void *)(intptr_t)i) != 0) break;
        engine.n_workers++;
    }
    return engine.n_workers > 0;
}

/* fork() (stream.c's handlers, when the engine runs asynchronously): the queue's locks are taken
 * before, so the child inherits none held by a thread it lacks; the child starts with an empty
 * queue and no workers (it runs every op at dispatch). */
void kiln__queue_fork_lock(void) {
    pthread_mutex_lock(&engine.all_lock);
    pthread_mutex_lock(&engine.lock);
}

void kiln__queue_fork_unlock(void) {
    pthread_mutex_unlock(&engine.lock);
    pthread_mutex_unlock(&engine.all_lock);
}

void kiln__queue_fork_child(void) {
    engine.n_workers = 0;
    engine.ready_head = engine.ready_tail = NULL;
    engine.comm_head = engine.comm_tail = NULL; /* (the child runs collectives at dispatch) */
    atomic_store(&engine.ready_count, 0);
    atomic_store(&engine.spinning, 0);
    engine.sleeping = 0;
    engine.first_epoch = (kiln__epoch){0};
    engine.epoch = &engine.first_epoch; /* the parent's uncounted work never completes here */
    engine.spare_epochs = NULL;
    pthread_cond_init(&engine.ready_cond, NULL);
    pthread_cond_init(&engine.all_cond, NULL);
    pthread_mutex_unlock(&engine.lock);
    pthread_mutex_unlock(&engine.all_lock);
}

/* ---- ready queue and workers -------------------------------------------------------------- */

static kiln__node *run_node(kiln__node *n, bool chain);

/* The profiler's worker id of the communication thread (the last of its 64 tracks). */
#define COMM_WORKER_ID 63

static void *comm_main(void *arg) {
    (void)arg;
    kiln__profiler_set_worker(COMM_WORKER_ID);
    pthread_mutex_lock(&engine.lock);
    for (;;) {
        while (!engine.comm_head && !engine.stopping) pthread_cond_wait(&engine.comm_cond, &engine.lock);
        kiln__node *n = engine.comm_head;
        if (!n) break;
        engine.comm_head = n->next_ready;
        if (!engine.comm_head) engine.comm_tail = NULL;
        pthread_mutex_unlock(&engine.lock);
        run_node(n, false);
        pthread_mutex_lock(&engine.lock);
    }
    pthread_mutex_unlock(&engine.lock);
    return NULL;
}

static void comm_start(void) {
    engine.comm_started = pthread_create(&engine.comm_thread, NULL, comm_main, NULL) == 0;
}

/* Appends n to a FIFO of nodes (engine.lock held). */
static void fifo_append(kiln__node **head, kiln__node **tail, kiln__node *n) {
    if (*tail)
        (*tail)->next_ready = n;
    else
        *head = n;
    *tail = n;
}

static void push_ready(kiln__node *n) {
    n->next_ready = NULL;
    if (KILN__UNLIKELY(kiln__opcode_is_comm(n->op.code))) {
        pthread_once(&engine.comm_once, comm_start);
        if (engine.comm_started) {
            pthread_mutex_lock(&engine.lock);
            fifo_append(&engine.comm_head, &engine.comm_tail, n);
            pthread_cond_signal(&engine.comm_cond);
            pthread_mutex_unlock(&engine.lock);
            return;
        }
    }
    pthread_mutex_lock(&engine.lock);
    fifo_append(&engine.ready_head, &engine.ready_tail, n);
    atomic_fetch_add_explicit(&engine.ready_count, 1, memory_order_release);
    /* a wake-up is a system call: only pay it when no worker is awake to find the op */
    if (engine.sleeping > 0 &&
        atomic_load_explicit(&engine.ready_count, memory_order_relaxed) > atomic_load_explicit(&engine.spinning, memory_order_relaxed))
        pthread_cond_signal(&engine.ready_cond);
    pthread_mutex_unlock(&engine.lock);
}

/* Keeps the stream's earliest undelivered error (s->lock held): the one a synchronous run
 * would have met first, whatever order the workers finished in. */
static void record_error_locked(kiln__stream *s, kiln__error *e) {
    if (atomic_load(&e->delivered)) return;
    kiln__error *old = s->first_error;
    if (old && !atomic_load(&old->delivered) && old->order <= e->order) return;
    s->first_error = kiln__error_ref(e);
    kiln__error_unref(old);
}

void kiln__stream_record_error(kiln__stream *s, kiln__error *e) {
    pthread_mutex_lock(&s->lock);
    record_error_locked(s, e);
    pthread_mutex_unlock(&s->lock);
}

void kiln__stream_record_error_now(kiln__stream *s, kiln__error *e) {
    pthread_mutex_lock(&s->lock);
    if (e->order == 0) e->order = 2 * s->seq + 1; /* after the ops queued so far */
    record_error_locked(s, e);
    pthread_mutex_unlock(&s->lock);
}

/* An emptied epoch that is not the current one: no op and no new work can reach it, so it
 * leaves the live list for the spare list (all_lock held). */
static void epoch_recycle(kiln__epoch *ep) {
    if (ep->prev) ep->prev->next = ep->next;
    if (ep->next) ep->next->prev = ep->prev;
    ep->next = engine.spare_epochs;
    engine.spare_epochs = ep;
}

static void epoch_done(kiln__epoch *ep) {
    pthread_mutex_lock(&engine.all_lock);
    if (--ep->pending == 0) {
        if (ep != engine.epoch) epoch_recycle(ep);
        pthread_cond_broadcast(&engine.all_cond);
    }
    pthread_mutex_unlock(&engine.all_lock);
}

/* One access of n granted. When that makes n ready it goes to the queue, or, with keep given
 * and still empty, to *keep: the thread that completed the op n waited for runs it next, so a
 * chain of dependent ops stays on one thread without a queue hand-off or a wake-up call.
 * A free of kiln's own memory runs here at once, before the op that made it ready reports its
 * completion: queued, it could still wait for a worker when the read that ended the step had
 * returned, and the next step's buffers then missed the cache and came from the system, a few
 * more at each unlucky moment (issue #23). User memory's release callback still runs on a
 * worker: it may call kiln, and this thread may hold a fusion window. */
static kiln__node *run_node(kiln__node *n, bool chain);
static bool release_grant(kiln__node *n, kiln__node **keep) {
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
        record_error_locked(s, err);
        if (n->event && !n->event->first_error) n->event->first_error = kiln__error_ref(err);
        pthread_mutex_unlock(&s->lock);
    }
    kiln__node *granted[64];
    bool queued = false;
    for (int i = 0; i < n->n_vars; i++) {
        int g = kiln__var_complete(n->vars[i].var, n->vars[i].write, granted, 64);
        for (int k = 0; k < g; k++) queued |= release_grant(granted[k], keep);
    }
    pthread_mutex_lock(&s->lock);
    bool event_done = n->event && --n->event->pending == 0;
    atomic_store_explicit(&s->pending_ops, atomic_load_explicit(&s->pending_ops, memory_order_relaxed) - 1,
                          memory_order_relaxed);
    s->pending_bytes -= n->bytes;
    /* the waits on s->cond (wait_helping) end on an event done, the stream idle, room in its
     * bounds; a waiter also helps with ops put in the queue. An op that only handed its
     * successor to this thread wakes no one: a wake-up per op of a chain would cost a system
     * call and a core's time at each op. */
    if (queued || event_done || s->pending_ops == 0 || s->waiting_for_room > 0) pthread_cond_broadcast(&s->cond);
    pthread_mutex_unlock(&s->lock);
    epoch_done(n->epoch);
    /* back to the stream that made it (before dropping our reference to that stream) */
    kiln__node *head = atomic_load_explicit(&s->returned, memory_order_relaxed);
    do {
        n->next_ready = head;
    } while (!atomic_compare_exchange_weak_explicit(&s->returned, &head, n, memory_order_release,
                                                    memory_order_relaxed));
    kiln__stream_unref(s);
}

static kiln__node *node_alloc(kiln__stream *s) {
    kiln__node *n = s->spare;
    if (!n) n = atomic_exchange_explicit(&s->returned, NULL, memory_order_acquire);
    if (n) {
        s->spare = n->next_ready;
        return n;
    }
    return malloc(sizeof *n);
}

/* Runs n; returns the op its completion made ready that this thread is to run next (chain: see
 * release_grant), or NULL. */
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
    if (n->op.code == KILN__OP_FUSED) group_return(n->stream, (const kiln__fused *)(intptr_t)n->op.p.i[0]);
    complete(n, err, chain ? &next : NULL);
    kiln__error_unref(err);
    return next;
}

/* After finishing an op a worker polls the queue for a short while before sleeping: a
 * frontend dispatching a burst of small ops then finds it awake and skips the wake-up call.
 * The poll lasts as long as a sleep and wake-up take on this machine (engine.poll_ns, see
 * handoff.c), so idle workers do not hold cores from BLAS threads for longer than waking
 * them would cost. The clock is read every POLLS_PER_CLOCK polls. */
#define POLLS_PER_CLOCK 32

static inline void cpu_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    __asm__ __volatile__("yield");
#endif
}

static kiln__node *pop_ready(bool may_sleep) {
    pthread_mutex_lock(&engine.lock);
    if (may_sleep) {
        while (!engine.ready_head && !engine.stopping) {
            engine.sleeping++;
            pthread_cond_wait(&engine.ready_cond, &engine.lock);
            engine.sleeping--;
        }
    }
    kiln__node *n = engine.ready_head;
    if (n) {
        engine.ready_head = n->next_ready;
        if (!engine.ready_head) engine.ready_tail = NULL;
        atomic_fetch_sub_explicit(&engine.ready_count, 1, memory_order_relaxed);
    }
    pthread_mutex_unlock(&engine.lock);
    return n;
}

static void *worker_main(void *arg) {
    kiln__profiler_set_worker((int)(intptr_t)arg);
    for (;;) {
        kiln__node *n = NULL;
        atomic_fetch_add_explicit(&engine.spinning, 1, memory_order_relaxed);
        uint64_t poll_end = kiln__now_ns() + (uint64_t)engine.poll_ns;
        for (int i = 1; !n; i++) {
            if (atomic_load_explicit(&engine.ready_count, memory_order_acquire) > 0)
                n = pop_ready(false);
            else if (i % POLLS_PER_CLOCK == 0 && kiln__now_ns() >= poll_end)
                break;
            else
                cpu_relax();
        }
        atomic_fetch_sub_explicit(&engine.spinning, 1, memory_order_relaxed);
        if (!n) n = pop_ready(true);
        if (!n) return NULL; /* stopping */
        while (n) n = run_node(n, true);
    }
}

/* Takes the first ready op of stream s out of the queue (NULL if none). */
static kiln__node *pop_ready_of(const kiln__stream *s) {
    pthread_mutex_lock(&engine.lock);
    kiln__node *prev = NULL, *n = engine.ready_head;
    while (n && n->stream != s) prev = n, n = n->next_ready;
    if (n) {
        if (prev)
            prev->next_ready = n->next_ready;
        else
            engine.ready_head = n->next_ready;
        if (engine.ready_tail == n) engine.ready_tail = prev;
        atomic_fetch_sub_explicit(&engine.ready_count, 1, memory_order_relaxed);
    }
    pthread_mutex_unlock(&engine.lock);
    return n;
}

/* A thread about to wait runs one of its own stream's ready ops instead: the hand-off to a
 * sleeping worker and back costs more than a small op. Only its own: a sync must never end up
 * waiting for another thread's work. n is the op the previous one left this thread (or NULL:
 * one from the queue); returns the op this one leaves, NULL if none. *ran: whether one ran. */
static kiln__node *help_one(const kiln__stream *s, kiln__node *n, bool *ran) {
    if (n && n->stream != s) push_ready(n), n = NULL;
    if (!n && atomic_load_explicit(&engine.ready_count, memory_order_acquire) > 0) n = pop_ready_of(s);
    *ran = n != NULL;
    return n ? run_node(n, true) : NULL;
}

/* Waits on s->cond (s->lock held) until done(s, arg), helping with ready ops meanwhile. */
static void wait_helping(kiln__stream *s, bool (*done)(kiln__stream *, void *), void *arg) {
    kiln__node *next = NULL;
    while (!done(s, arg)) {
        if (next || atomic_load_explicit(&engine.ready_count, memory_order_acquire) > 0) {
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

/* ---- submission ------------------------------------------------------------------------- */

static void add_var(kiln__node *n, kiln__storage *s, bool write) {
    if (!s) return;
    kiln__var *v = kiln__var_of(s);
    for (int i = 0; i < n->n_vars; i++) {
        if (n->vars[i].var == v) { /* read and written: one write access */
            n->vars[i].write |= write;
            return;
        }
    }
    n->vars[n->n_vars].var = v;
    n->vars[n->n_vars].write = write;
    n->n_vars++;
}

typedef struct {
    int64_t bytes, max_ops, max_bytes;
} room_request;

static bool has_room(kiln__stream *s, void *arg) {
    const room_request *r = arg;
    return s->pending_ops == 0 || (s->pending_ops < r->max_ops && s->pending_bytes + r->bytes <= r->max_bytes);
}

/* Waits for room on the stream (the bounded queue), then counts the op in. */
static void admit(kiln__stream *s, kiln__node *n, int64_t bytes, bool may_block) {
    pthread_mutex_lock(&s->lock);
    room_request r = {bytes, atomic_load_explicit(&engine.max_inflight, memory_order_relaxed),
                      atomic_load_explicit(&engine.max_bytes, memory_order_relaxed)};
    if (may_block) {
        s->waiting_for_room++;
        wait_helping(s, has_room, &r);
        s->waiting_for_room--;
    }
    atomic_store_explicit(&s->pending_ops, atomic_load_explicit(&s->pending_ops, memory_order_relaxed) + 1,
                          memory_order_relaxed);
    s->pending_bytes += bytes;
    pthread_mutex_unlock(&s->lock);
    pthread_mutex_lock(&engine.all_lock);
    n->epoch = engine.epoch;
    n->epoch->pending++;
    pthread_mutex_unlock(&engine.all_lock);
}

/* Whether op (g: its group) runs on its caller's thread when it is its stream's only op and is
 * granted at once: cheaper to run than to hand over (handoff.c), so the caller loses nothing
 * that overlap could win, and nothing of its stream can be waiting behind it on a worker. Only
 * kernels whose time goes with their bytes (elementwise groups and ops, reductions) and that
 * call no user code, on the CPU, with every worker asleep: an awake worker takes an op for
 * the cost of the queue's lock. A kernel runs on the caller as it would on a worker, on the
 * same records, so its dependencies, errors (the op's call site), poisoning and profiler record
 * are the same: wait_helping runs ops on this thread the same way. */
static bool runs_inline(const kiln__op *op, const kiln__fused *g) {
    int64_t max = atomic_load_explicit(&engine.inline_max_bytes, memory_order_relaxed);
    if (max <= 0 || atomic_load_explicit(&engine.spinning, memory_order_relaxed) > 0) return false;
    int64_t bytes = 0;
    if (g) {
        if (g->matmul) return false;
        for (int k = 0; k < g->expr.n_inputs; k++) {
            const kiln__storage *st = g->input[k].storage;
            if (st && (st->device != KILN_CPU || (bytes += (int64_t)st->nbytes) > max)) return false;
        }
        for (int w = 0; w < g->expr.n_outputs; w++) {
            const kiln__storage *st = g->output[w].storage;
            if (st->device != KILN_CPU || (bytes += (int64_t)st->nbytes) > max) return false;
        }
        return true;
    }
    if (op->flags || !(kiln__expr_opcode_fusable(op->code) || kiln__fusion_is_reduction(op->code))) return false;
    for (int i = 0; i < op->n_in + op->n_out; i++) {
        const kiln__storage *st = i < op->n_in ? op->in[i].storage : op->out[i - op->n_in].storage;
        if (st && (st->device != KILN_CPU || (bytes += (int64_t)st->nbytes) > max)) return false;
    }
    return true;
}

/* Without the lock: only this thread (the stream's) counts ops in, so a 0 it reads is not stale;
 * a count the workers have just taken down is seen at the next op. Dependencies are ordered by
 * the storages' vars, not by this. */
static bool stream_idle_now(kiln__stream *s) {
    return atomic_load_explicit(&s->pending_ops, memory_order_relaxed) == 0;
}

bool kiln__async_runs_here(kiln__stream *s, const kiln__op *op) {
    return op->stream_id == s->id && runs_inline(op, NULL) && stream_idle_now(s);
}

/* Runs op (its node n, every access of it granted) on its stream's own thread at its dispatch: what
 * run_node and complete do, less what only an op that was queued needs. It is not counted on
 * the stream or in kiln_sync_all's epoch: it is done before its dispatch returns, so no wait
 * that begins after the dispatch can miss it. Its error is recorded before the ops waiting
 * for it are released (a read of theirs may deliver it). */
static void run_here(kiln__stream *s, kiln__node *n, const kiln__op *op) {
    kiln__error *err = kiln__execute(op);
    if (op->code == KILN__OP_FUSED) group_return(s, (const kiln__fused *)(intptr_t)op->p.i[0]);
    if (err) kiln__stream_record_error(s, err);
    kiln__node *granted[64];
    for (int i = 0; i < n->n_vars; i++) {
        int k = kiln__var_complete(n->vars[i].var, n->vars[i].write, granted, 64);
        for (int j = 0; j < k; j++) release_grant(granted[j], NULL);
    }
    kiln__error_unref(err);
    n->next_ready = s->spare; /* (the stream's own thread: its private list) */
    s->spare = n;
}

void kiln__async_enqueue(kiln__stream *s, const kiln__op *op, kiln__event *ev, kiln__storage *free_target,
                         const kiln__fused *g, bool owner, bool may_block) {
    if (free_target && !free_target->borrowed) {
        /* no op uses it any more (a group that wrote it ran on this thread): freed now, as
         * core's release hook does. Not user memory: its callback may call kiln, and this thread
         * may hold its window's lock */
        kiln__var *v = atomic_load_explicit((kiln__var *_Atomic *)&free_target->var, memory_order_acquire);
        if (!v || kiln__var_idle(v)) {
            free_target->var = NULL;
            kiln__var_free(v);
            kiln__storage_destroy(free_target);
            return;
        }
    }
    kiln__node *n = owner ? node_alloc(s) : malloc(sizeof *n);
    if (!n) { /* no memory to queue it: wait for everything before, then run it here */
        engine.drain_all();
        if (free_target) {
            kiln__var_free(free_target->var);
            free_target->var = NULL;
            kiln__storage_destroy(free_target);
            return;
        }
        kiln__op here;
        kiln__op_copy(&here, op);
        here.stream_id = s->id;
        kiln__error *err = kiln__execute(&here);
        if (g) free((void *)g);
        pthread_mutex_lock(&s->lock);
        if (err) record_error_locked(s, err);
        if (err && ev && !ev->first_error) ev->first_error = kiln__error_ref(err);
        pthread_mutex_unlock(&s->lock);
        kiln__error_unref(err);
        return;
    }
    n->stream = s;
    n->event = ev;
    n->free_target = free_target;
    n->n_vars = 0;
    n->bytes = 0;
    if (free_target) {
        add_var(n, free_target, true);
        n->bytes = (int64_t)free_target->nbytes; /* counts against the window, never blocks */
    } else if (g) {
        for (int k = 0; k < g->n_ops; k++) {
            for (int i = 0; i < g->ops[k].n_in; i++) add_var(n, g->ops[k].in[i].storage, false);
            add_var(n, g->ops[k].out[0].storage, true);
        }
        for (int w = 0; w < g->expr.n_outputs; w++) n->bytes += (int64_t)g->output[w].storage->nbytes;
    } else {
        for (int i = 0; i < op->n_in; i++) add_var(n, op->in[i].storage, false);
        for (int i = 0; i < op->n_out; i++) {
            add_var(n, op->out[i].storage, true);
            n->bytes += (int64_t)op->out[i].storage->nbytes;
        }
    }
    atomic_init(&n->wait, n->n_vars + 1);
    /* (op is the caller's record, already stamped with this stream: it runs from there) */
    bool here = owner && !free_target && !ev && op->stream_id == s->id && runs_inline(op, g) && stream_idle_now(s);
    if (!here) {
        kiln__op_copy(&n->op, op);
        n->op.stream_id = s->id; /* (the engine's own no-ops, a free or a read, are made unstamped) */
        atomic_fetch_add_explicit(&s->refs, 1, memory_order_relaxed);
        admit(s, n, n->bytes, free_target == NULL && may_block); /* a release never blocks its caller */
        if (ev) {
            pthread_mutex_lock(&s->lock);
            ev->pending++;
            pthread_mutex_unlock(&s->lock);
        }
    }
    for (int i = 0; i < n->n_vars; i++) {
        bool oom = false;
        if (kiln__var_append(n->vars[i].var, n, n->vars[i].write, &oom)) {
            atomic_fetch_sub_explicit(&n->wait, 1, memory_order_relaxed);
        } else if (oom) {
            /* cannot queue behind this storage: wait for the whole engine, then take access */
            engine.drain_all();
            bool again = false;
            while (!kiln__var_append(n->vars[i].var, n, n->vars[i].write, &again)) engine.drain_all();
            atomic_fetch_sub_explicit(&n->wait, 1, memory_order_relaxed);
        }
    }
    if (here) {
        /* every access granted at once (only the dispatch's count is left): every op it depends
         * on is done, so it runs now */
        if (atomic_load_explicit(&n->wait, memory_order_relaxed) == 1) {
            run_here(s, n, op);
            return;
        }
        kiln__op_copy(&n->op, op); /* (before the dispatch's count is given back) */
        /* it waits for another stream's op: queued after all (its dispatch count keeps it from
         * running before it is counted; nothing of this stream is queued, so this never blocks) */
        atomic_fetch_add_explicit(&s->refs, 1, memory_order_relaxed);
        admit(s, n, n->bytes, false);
    }
    release_grant(n, NULL);
}

void kiln__stream_throttle(kiln__stream *s, int64_t bytes) {
    room_request r = {bytes, atomic_load_explicit(&engine.max_inflight, memory_order_relaxed),
                      atomic_load_explicit(&engine.max_bytes, memory_order_relaxed)};
    pthread_mutex_lock(&s->lock);
    s->waiting_for_room++;
    wait_helping(s, has_room, &r);
    s->waiting_for_room--;
    pthread_mutex_unlock(&s->lock);
}

static bool event_done(kiln__stream *s, void *ev) { return ((kiln__event *)ev)->pending == 0; }
static bool stream_idle(kiln__stream *s, void *arg) { return s->pending_ops == 0; }

void kiln__queue_wait_event(kiln__stream *s, kiln__event *ev) {
    pthread_mutex_lock(&s->lock);
    wait_helping(s, event_done, ev);
    pthread_mutex_unlock(&s->lock);
}

void kiln__queue_wait_idle(kiln__stream *s) {
    pthread_mutex_lock(&s->lock);
    wait_helping(s, stream_idle, NULL);
    pthread_mutex_unlock(&s->lock);
}

static bool epochs_pending_upto(uint64_t id) {
    for (const kiln__epoch *ep = engine.epoch; ep; ep = ep->next)
        if (ep->id <= id && ep->pending > 0) return true;
    return false;
}

void kiln__queue_wait_all(void) {
    pthread_mutex_lock(&engine.all_lock);
    kiln__epoch *cur = engine.epoch;
    if (cur->pending > 0 || cur->next) {
        uint64_t target = cur->id;
        kiln__epoch *next = engine.spare_epochs;
        if (next)
            engine.spare_epochs = next->next;
        else
            next = malloc(sizeof *next);
        if (next) { /* (without memory for one, this waits for the current epoch to empty) */
            *next = (kiln__epoch){.id = cur->id + 1, .next = cur};
            cur->prev = next;
            engine.epoch = next;
            if (cur->pending == 0) epoch_recycle(cur); /* nothing will complete in it any more */
        }
        while (epochs_pending_upto(target)) pthread_cond_wait(&engine.all_cond, &engine.all_lock);
    }
    pthread_mutex_unlock(&engine.all_lock);
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

kiln__handoff_rules kiln__queue_handoff_rules(void) {
    return (kiln__handoff_rules){engine.handoff, engine.poll_ns, atomic_load(&engine.inline_max_bytes)};
}

int64_t kiln__queue_set_inline_max_bytes(int64_t bytes) {
    if (bytes < 0) bytes = engine.inline_default;
    return atomic_exchange(&engine.inline_max_bytes, bytes);
}

void kiln__queue_set_limits(int64_t max_inflight_ops, int64_t max_pending_bytes) {
    if (max_inflight_ops > 0) atomic_store(&engine.max_inflight, max_inflight_ops);
    if (max_pending_bytes > 0) atomic_store(&engine.max_bytes, max_pending_bytes);
}
