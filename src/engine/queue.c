/* Admission to the bounded queue: the asynchronous engine's layer below fusion. The streams
 * (stream.c) and the fusion windows (fusion.c) hand it op records and fused groups; each becomes
 * a node ordered by per-storage dependencies (deps.c), counted against its stream's bounds (ops
 * in flight, bytes pending), past which the frontend waits, helping to run its own ready ops, and
 * in kiln_sync_all's epoch (queue_epochs.c); queue_workers.c runs it once ready. Or it runs at
 * once on its caller's thread, when that is cheaper than handing it over (handoff.c): the rules
 * made of that measurement are kept here. Here also: the recycling of nodes and groups on the
 * stream's own thread. It calls nothing above it: a wait for the whole engine (out of memory)
 * goes through the drain the streams register (kiln__queue_init). */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "engine/fusion-impl.h" /* (kiln__fusion_is_reduction: fusion_join.c's opcode rule, a leaf) */
#include "engine/handoff.h"
#include "engine/queue-impl.h"
#include "ir/expr.h"

#define DEFAULT_MAX_INFLIGHT 4096
/* Bytes of op outputs not yet computed plus buffers released but not yet freed: how far the
 * frontend may run ahead in memory. Small, so an async program peaks near a synchronous one;
 * a single larger op still goes through alone. */
#define DEFAULT_MAX_BYTES ((int64_t)64 << 20)

static struct {
    void (*drain_all)(void); /* the streams' kiln__engine_drain_all (kiln__queue_init) */
    _Atomic int64_t max_inflight, max_bytes; /* read by every stream without a lock */
    /* what handing an op to a worker costs here (handoff.c), and the rules made of it: how long
     * a worker polls before it sleeps, and the largest op its caller runs itself */
    kiln__handoff_costs handoff;
    int64_t poll_ns;
    _Atomic int64_t inline_max_bytes;
    int64_t inline_default;
} queue;

/* Groups a stream keeps for reuse beyond those in flight: enough for the groups of a burst
 * between two reads of a loop; more go back to malloc. */
#define SPARE_GROUPS 8

kiln__fused *kiln__stream_group_alloc(kiln__stream *s, int n_ops) {
    kiln__group_link *l = s->spare_groups;
    if (!l) {
        l = atomic_exchange_explicit(&s->returned_groups, NULL, memory_order_acquire);
        kiln__group_list_free(l, SPARE_GROUPS); /* (keeps the first SPARE_GROUPS) */
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

void kiln__queue_init(void (*drain_all)(void)) {
    queue.drain_all = drain_all;
    queue.max_inflight = kiln__env_int_range("KILN_MAX_INFLIGHT", 1, INT32_MAX, DEFAULT_MAX_INFLIGHT);
    queue.max_bytes = kiln__env_int_range("KILN_MAX_PENDING_MB", 1, INT64_MAX >> 20, DEFAULT_MAX_BYTES >> 20) << 20;
}

bool kiln__queue_start_workers(void) {
    queue.handoff = kiln__handoff_measure();
    /* poll as long as a sleep and wake-up would take; unmeasured, 20 us */
    int64_t sleep_wake_ns = queue.handoff.signal_ns ? queue.handoff.signal_ns + queue.handoff.wake_ns : 20000;
    queue.poll_ns = kiln__env_int_range("KILN_POLL_NS", 0, INT32_MAX, sleep_wake_ns);
    queue.inline_default = kiln__env_int_range("KILN_INLINE_MAX_BYTES", 0, INT64_MAX,
                                               kiln__handoff_inline_max_bytes(&queue.handoff));
    atomic_store(&queue.inline_max_bytes, queue.inline_default);
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    return kiln__workers_start((int)kiln__env_int("KILN_ENGINE_THREADS", 1, cpus > 0 ? cpus : 2), queue.poll_ns);
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
    room_request r = {bytes, atomic_load_explicit(&queue.max_inflight, memory_order_relaxed),
                      atomic_load_explicit(&queue.max_bytes, memory_order_relaxed)};
    if (may_block) {
        s->waiting_for_room++;
        kiln__stream_wait_helping(s, has_room, &r);
        s->waiting_for_room--;
    }
    atomic_store_explicit(&s->pending_ops, atomic_load_explicit(&s->pending_ops, memory_order_relaxed) + 1,
                          memory_order_relaxed);
    s->pending_bytes += bytes;
    pthread_mutex_unlock(&s->lock);
    n->epoch = kiln__epoch_count_in();
}

/* Whether op (g: its group) runs on its caller's thread when it is its stream's only op and is
 * granted at once: cheaper to run than to hand over (handoff.c), so the caller loses nothing
 * that overlap could win, and nothing of its stream can be waiting behind it on a worker. Only
 * kernels whose time goes with their bytes (elementwise groups and ops, reductions) and that
 * call no user code, on the CPU, with every worker asleep: an awake worker takes an op for
 * the cost of the queue's lock. A kernel runs on the caller as it would on a worker, on the
 * same records, so its dependencies, errors (the op's call site), poisoning and profiler record
 * are the same: kiln__stream_wait_helping runs ops on this thread the same way. */
static bool runs_inline(const kiln__op *op, const kiln__fused *g) {
    int64_t max = atomic_load_explicit(&queue.inline_max_bytes, memory_order_relaxed);
    if (max <= 0 || atomic_load_explicit(&kiln__workers_polling, memory_order_relaxed) > 0) return false;
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

/* Runs op (its node n, every access of it granted) on its stream's own thread at its dispatch:
 * what running a queued node does (queue_workers.c), less what only a queued one needs. It is
 * not counted on the stream or in kiln_sync_all's epoch: it is done before its dispatch returns,
 * so no wait that begins after the dispatch can miss it. Its error is recorded before the ops waiting
 * for it are released (a read of theirs may deliver it). */
static void run_here(kiln__stream *s, kiln__node *n, const kiln__op *op) {
    kiln__error *err = kiln__execute(op);
    if (op->code == KILN__OP_FUSED) kiln__group_return(s, (const kiln__fused *)(intptr_t)op->p.i[0]);
    if (err) kiln__stream_record_error(s, err);
    kiln__node *granted[64];
    for (int i = 0; i < n->n_vars; i++) {
        int k = kiln__var_complete(n->vars[i].var, n->vars[i].write, granted, 64);
        for (int j = 0; j < k; j++) kiln__node_release_grant(granted[j], NULL);
    }
    kiln__error_unref(err);
    n->next_ready = s->spare; /* (the stream's own thread: its private list) */
    s->spare = n;
}

/* here_checked: the caller found kiln__async_runs_here(s, op) true just before (no event, no
 * free target, owner), so the inline test is not made twice per op */
static void enqueue(kiln__stream *s, const kiln__op *op, kiln__event *ev, kiln__storage *free_target,
                    const kiln__fused *g, bool owner, bool may_block, bool here_checked) {
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
        queue.drain_all();
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
        if (err) kiln__stream_record_error_locked(s, err);
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
    bool here = here_checked ||
                (owner && !free_target && !ev && op->stream_id == s->id && runs_inline(op, g) && stream_idle_now(s));
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
            queue.drain_all();
            bool again = false;
            while (!kiln__var_append(n->vars[i].var, n, n->vars[i].write, &again)) queue.drain_all();
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
    kiln__node_release_grant(n, NULL);
}

void kiln__async_enqueue(kiln__stream *s, const kiln__op *op, kiln__event *ev, kiln__storage *free_target,
                         const kiln__fused *g, bool owner, bool may_block) {
    enqueue(s, op, ev, free_target, g, owner, may_block, false);
}

void kiln__async_run_checked_here(kiln__stream *s, const kiln__op *op) { enqueue(s, op, NULL, NULL, NULL, true, true, true); }

void kiln__stream_throttle(kiln__stream *s, int64_t bytes) {
    room_request r = {bytes, atomic_load_explicit(&queue.max_inflight, memory_order_relaxed),
                      atomic_load_explicit(&queue.max_bytes, memory_order_relaxed)};
    pthread_mutex_lock(&s->lock);
    s->waiting_for_room++;
    kiln__stream_wait_helping(s, has_room, &r);
    s->waiting_for_room--;
    pthread_mutex_unlock(&s->lock);
}

kiln__handoff_rules kiln__queue_handoff_rules(void) {
    return (kiln__handoff_rules){queue.handoff, queue.poll_ns, atomic_load(&queue.inline_max_bytes)};
}

int64_t kiln__queue_set_inline_max_bytes(int64_t bytes) {
    if (bytes < 0) bytes = queue.inline_default;
    return atomic_exchange(&queue.inline_max_bytes, bytes);
}

void kiln__queue_set_limits(int64_t max_inflight_ops, int64_t max_pending_bytes) {
    if (max_inflight_ops > 0) atomic_store(&queue.max_inflight, max_inflight_ops);
    if (max_pending_bytes > 0) atomic_store(&queue.max_bytes, max_pending_bytes);
}
