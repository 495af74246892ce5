/* The fusion window of each stream (see engine/fusion.h): its life, the marks that let other
 * threads flush it, and the hand-over of a group to the engine. Which ops may join a group is
 * fusion_join.c's. */
#include <stdlib.h>
#include <string.h>

#include "engine/fusion-impl.h"
#include "engine/spinlock.h"
#include "kiln/engine.h"

static struct {
    pthread_once_t once;
    atomic_bool enabled;
    atomic_bool fuse_tiny; /* tiny ops join the window even on an idle stream (kiln__fusion_submit) */
    pthread_mutex_t lock; /* spare list */
    kiln__window *_Atomic all;
    kiln__window *spare;
    _Atomic int64_t groups, ops_fused, stores_elided, foreign_flushes, reductions, epilogues;
} fusion = {.once = PTHREAD_ONCE_INIT, .lock = PTHREAD_MUTEX_INITIALIZER};

static void fusion_init(void) {
    atomic_store(&fusion.enabled, kiln__env_flag("KILN_FUSION", true));
    atomic_store(&fusion.fuse_tiny, kiln__env_flag("KILN_FUSE_TINY", false));
}

void kiln__fusion_set_fuse_tiny(int on) {
    pthread_once(&fusion.once, fusion_init);
    atomic_store(&fusion.fuse_tiny, on < 0 ? kiln__env_flag("KILN_FUSE_TINY", false) : on > 0);
}

bool kiln_fusion_enabled(void) {
    static _Thread_local bool ready; /* (pthread_once's own check is a call per op) */
    if (KILN__UNLIKELY(!ready)) pthread_once(&fusion.once, fusion_init), ready = true;
    return atomic_load_explicit(&fusion.enabled, memory_order_relaxed);
}

void kiln_fusion_set_enabled(bool on) {
    pthread_once(&fusion.once, fusion_init);
    atomic_store(&fusion.enabled, on);
    if (!on) kiln__fusion_flush_all(NULL);
}

kiln__fusion_stats kiln__fusion_stats_get(void) {
    return (kiln__fusion_stats){atomic_load(&fusion.groups), atomic_load(&fusion.ops_fused),
                                atomic_load(&fusion.stores_elided), atomic_load(&fusion.foreign_flushes),
                                atomic_load(&fusion.reductions), atomic_load(&fusion.epilogues)};
}

void kiln__fusion_stats_reset(void) {
    atomic_store(&fusion.groups, 0);
    atomic_store(&fusion.ops_fused, 0);
    atomic_store(&fusion.stores_elided, 0);
    atomic_store(&fusion.foreign_flushes, 0);
    atomic_store(&fusion.reductions, 0);
    atomic_store(&fusion.epilogues, 0);
}

/* The hold windows carry (substitute.c registers it before it holds any op): read with acquire,
 * so a thread that finds a window's hold, or an op the hold wants, finds the calls too. */
static const kiln__window_hold *_Atomic hold_calls;
atomic_bool kiln__hold_live;
_Atomic uint8_t kiln__hold_codes[KILN__OP_COUNT];

void kiln__fusion_set_hold(const kiln__window_hold *hold) {
    atomic_store_explicit(&hold_calls, hold, memory_order_release);
}

static const kiln__window_hold *hold_of(const kiln__window *w) {
    return w->hold ? atomic_load_explicit(&hold_calls, memory_order_acquire) : NULL;
}

/* Window bytes from which each joining op checks the stream's bounds. */
#define THROTTLE_MIN_BYTES ((int64_t)16 << 20)

/* The window this thread holds locked: a drain inside a flush (out of memory) skips it. */
static _Thread_local kiln__window *held;

/* The window's lock: its owner takes it for every op it queues, another thread only to flush
 * the window, so it is almost never contended (a spinlock: engine/spinlock.h). */
static void window_lock(kiln__window *w) { kiln__spin_lock(&w->lock); }

static void window_unlock(kiln__window *w) { kiln__spin_unlock(&w->lock); }

static void lock_window(kiln__window *w) {
    window_lock(w);
    held = w;
}

static void unlock_window(kiln__window *w) {
    held = NULL;
    window_unlock(w);
}

static kiln__window *window_of(kiln__storage *s) {
    return atomic_load_explicit((kiln__window *_Atomic *)&s->window, memory_order_acquire);
}

static kiln__window *window_get(kiln__stream *s) {
    pthread_mutex_lock(&fusion.lock);
    kiln__window *w = fusion.spare;
    if (w) fusion.spare = w->next_spare;
    if (!w && (w = calloc(1, sizeof *w))) {
        w->next_all = atomic_load(&fusion.all);
        atomic_store(&fusion.all, w);
    }
    pthread_mutex_unlock(&fusion.lock);
    if (!w) return NULL;
    lock_window(w);
    w->stream = s;
    unlock_window(w);
    return w;
}

static bool is_dead(void *ctx, const kiln__storage *s) {
    const kiln__window *w = ctx;
    for (int i = 0; i < w->n_dead; i++)
        if (w->dead[i] == s) return true;
    return false;
}

static kiln__op fused_op(const kiln__fused *g) {
    const kiln__op *first = &g->ops[0];
    kiln__op op = {.code = KILN__OP_FUSED, .name = "fused", .file = first->file, .line = first->line,
                   .stream_id = first->stream_id, .seq = first->seq, .t_dispatch_ns = first->t_dispatch_ns};
    op.p.i[0] = (int64_t)(intptr_t)g;
    return op;
}

/* Gives back now the memory of the group's unwritten intermediates: storages no handle
 * reaches, that the group writes before any read (so never loads) and does not store, and
 * that no queued op still uses. Allocated at dispatch, they would otherwise hold their
 * memory until the group has run, and the next ops' outputs could not reuse it (the composed
 * softmax as one group: 393 MiB peak instead of 265). Done when the last handle goes (so the
 * window's next ops reuse the memory) and again at the flush. If the group then runs op by
 * op after all (a single op, a failure: engine.c), each op allocates its output again. */
static void drop_if_unwritten(kiln__window *w, kiln__storage *d) {
    int e = 0;
    while (e < w->n_st && w->st[e].s != d) e++;
    if (e == w->n_st || !w->st[e].written || w->st[e].read_first || d->borrowed || !d->data) return;
    kiln__var *v = atomic_load_explicit((kiln__var *_Atomic *)&d->var, memory_order_acquire);
    if (!v || kiln__var_idle(v)) kiln__storage_drop_data(d);
}

static void drop_unwritten(kiln__window *w) {
    for (int i = 0; i < w->n_dead; i++) drop_if_unwritten(w, w->dead[i]);
}

/* Hands the window's group to the engine (w->lock held). Storages keep their mark until the
 * group is queued on them, so another thread either flushes or queues behind the group; one
 * that the substitution hold still uses keeps it until the hold lets go. */
static void flush_group_locked(kiln__window *w, bool owner) {
    kiln__fused *g = w->g;
    if (!g || g->n_ops == 0) return;
    kiln__stream *s = w->stream;
    if (g->n_ops == 1) {
        kiln__op op = g->ops[0];
        kiln__async_enqueue(s, &op, NULL, NULL, NULL, owner, false);
    } else {
        kiln__fused_finish(g, is_dead, w);
        /* a small group goes as a copy sized by its ops; a large one (or one with no memory
         * for the copy) as the window's own record, which the engine recycles once it has run */
        kiln__fused *queued = g->n_ops * 2 < KILN__FUSE_MAX_OPS ? kiln__stream_group_alloc(s, g->n_ops) : NULL;
        if (queued) {
            kiln__fused_copy(queued, g);
        } else {
            queued = g;
            w->g = NULL;
        }
        kiln__op op = fused_op(queued);
        atomic_fetch_add(&fusion.groups, 1);
        atomic_fetch_add(&fusion.ops_fused, g->n_ops);
        atomic_fetch_add(&fusion.stores_elided, g->expr.n_outputs - g->expr.n_stores);
        if (g->row > 0) atomic_fetch_add(&fusion.reductions, 1);
        if (kiln__expr_has_epilogue(&g->expr)) atomic_fetch_add(&fusion.epilogues, 1);
        drop_unwritten(w);
        kiln__async_enqueue(s, &op, NULL, NULL, queued, owner, false);
    }
    const kiln__window_hold *hold = hold_of(w);
    for (int i = 0; i < w->n_st; i++)
        if (!hold || !hold->uses(w, w->st[i].s)) atomic_store((kiln__window *_Atomic *)&w->st[i].s->window, NULL);
    kiln__op free_op = {.code = KILN__OP_NOOP, .name = "free"};
    for (int i = 0; i < w->n_dead; i++) kiln__async_enqueue(s, &free_op, NULL, w->dead[i], NULL, owner, false);
    if (w->g) w->g->n_ops = 0;
    w->n_st = w->n_dead = 0;
    w->bytes = 0;
    w->closed = false;
    atomic_store_explicit(&w->n_held, 0, memory_order_release);
}

/* Hands everything the window holds to the engine (w->lock held): the substitution hold's ops
 * (or their replacements) after the group's, then the group. */
static void flush_locked(kiln__window *w, bool owner) {
    const kiln__window_hold *hold = hold_of(w);
    if (hold) hold->resolve(w, owner);
    flush_group_locked(w, owner);
}

static void flush_foreign(kiln__window *w, kiln__stream *cur) {
    lock_window(w);
    if (w->g && w->g->n_ops) atomic_fetch_add(&fusion.foreign_flushes, 1);
    flush_locked(w, w->stream == cur && cur);
    unlock_window(w);
}

void kiln__fusion_flush_storage(kiln__storage *st, kiln__stream *cur) {
    kiln__window *w = window_of(st);
    if (w) flush_foreign(w, cur);
}

void kiln__fusion_flush_stream(kiln__stream *s) {
    kiln__window *w = s->window;
    if (!w || atomic_load_explicit(&w->n_held, memory_order_acquire) == 0) return;
    lock_window(w);
    flush_locked(w, true);
    unlock_window(w);
}

void kiln__fusion_flush_all(kiln__stream *cur) {
    for (kiln__window *w = atomic_load(&fusion.all); w; w = w->next_all) {
        if (w == held) continue;
        if (cur && cur->window == w) {
            kiln__fusion_flush_stream(cur);
            continue;
        }
        lock_window(w);
        flush_locked(w, false);
        unlock_window(w);
    }
}

void kiln__fusion_stream_exit(kiln__stream *s) {
    kiln__window *w = s->window;
    if (!w) return;
    lock_window(w);
    flush_locked(w, true);
    w->stream = NULL;
    unlock_window(w);
    s->window = NULL;
    pthread_mutex_lock(&fusion.lock);
    w->next_spare = fusion.spare;
    fusion.spare = w;
    pthread_mutex_unlock(&fusion.lock);
}

bool kiln__fusion_defer_free(kiln__storage *st, kiln__stream *cur) {
    kiln__window *w = window_of(st);
    if (!w) return false;
    if (!cur || cur->window != w) {
        flush_foreign(w, cur);
        return false;
    }
    lock_window(w);
    bool joined = false;
    const kiln__window_hold *hold = hold_of(w);
    if (window_of(st) == w && hold && hold->defer_free(w, st, true)) {
        joined = true;
    } else if (window_of(st) == w && w->n_dead < MAX_STORAGES) {
        w->dead[w->n_dead++] = st;
        drop_if_unwritten(w, st);
        kiln__window_count_held(w);
        joined = true;
    } else {
        flush_locked(w, true);
    }
    unlock_window(w);
    return joined;
}

/* Adds op (fusable, or a MATMUL that may start a group) to w's group, flushing the group
 * first when op does not fit it (w->lock held). */
static bool join_locked(kiln__window *w, const kiln__op *op, bool matmul, bool owner, bool *flushed) {
    bool joined = false;
    for (int attempt = 0; attempt < 2 && !joined; attempt++) {
        if (!w->g) {
            if (!(w->g = kiln__stream_group_alloc(w->stream, KILN__FUSE_MAX_OPS))) break;
            w->g->n_ops = 0;
        }
        joined = matmul ? kiln__window_try_join_matmul(w, op) : kiln__window_try_join(w, op);
        if (!joined && w->g->n_ops == 0) break; /* not even alone */
        if (!joined) flush_group_locked(w, owner), *flushed = true;
    }
    return joined;
}

void kiln__window_admit(kiln__window *w, const kiln__op *op, bool owner) {
    if (kiln_fusion_enabled()) {
        if (kiln__fusion_is_reduction(op->code) && w->g && w->g->n_ops && kiln__window_try_join_reduce(w, op)) return;
        bool matmul = op->code == KILN__OP_MATMUL && kiln__fusion_matmul_fusable(op), flushed = false;
        if ((matmul || kiln__fusion_op_fusable(op)) && join_locked(w, op, matmul, owner, &flushed)) return;
    }
    flush_group_locked(w, owner);
    kiln__async_enqueue(w->stream, op, NULL, NULL, NULL, owner, false);
}

void kiln__window_add_dead(kiln__window *w, kiln__storage *s, bool owner) {
    if (w->n_dead == MAX_STORAGES) flush_group_locked(w, owner);
    if (w->g && w->g->n_ops && kiln__window_holds(w, s)) {
        w->dead[w->n_dead++] = s;
        drop_if_unwritten(w, s);
        return;
    }
    /* the group does not use it: free it now, after its users, which are queued (waiting for
     * the group would keep its memory from the ops that follow) */
    kiln__op free_op = {.code = KILN__OP_NOOP, .name = "free"};
    kiln__async_enqueue(w->stream, &free_op, NULL, s, NULL, owner, false);
}

bool kiln__window_holds(const kiln__window *w, const kiln__storage *s) {
    for (int i = 0; i < w->n_st; i++)
        if (w->st[i].s == s) return true;
    return false;
}

void kiln__window_recount_held(kiln__window *w) {
    atomic_store_explicit(&w->n_held, (w->g ? w->g->n_ops : 0) + w->n_dead, memory_order_release);
}

bool kiln__fusion_submit(kiln__stream *s, const kiln__op *op, kiln__event *ev, kiln__storage *free_target,
                         bool *runs_here) {
    *runs_here = false;
    /* another thread's window holding a storage this op touches goes first */
    for (int i = 0; i < op->n_in + op->n_out; i++) {
        kiln__storage *st = i < op->n_in ? op->in[i].storage : op->out[i - op->n_in].storage;
        kiln__window *m = st ? window_of(st) : NULL;
        if (m && m != s->window) flush_foreign(m, s);
    }
    if (free_target) { /* frees do not end a group: they queue behind it */
        kiln__window *m = window_of(free_target);
        if (m) flush_foreign(m, s);
        return false;
    }
    /* An op small enough to run on this thread at once, its stream idle and its window empty,
     * skips the window: a group of it alone would be built, finished and run as one op, about a
     * third of a tiny op's dispatch, and it has nothing waiting to fuse with. When ops follow
     * it while it runs they find the stream busy and group as before; so does a tiny op queued
     * behind others (a window of them is one hand-off instead of many). Values are the same
     * either way; KILN_FUSE_TINY=1 (kiln__fusion_set_fuse_tiny) lets tiny ops join as before,
     * for tests of fusion on small tensors. */
    if (!ev && kiln_fusion_enabled() && !atomic_load_explicit(&fusion.fuse_tiny, memory_order_relaxed) &&
        (!s->window || atomic_load_explicit(&s->window->n_held, memory_order_relaxed) == 0) &&
        !kiln__window_hold_wants(s->window, op) && kiln__async_runs_here(s, op))
        return *runs_here = true, false;
    const kiln__window_hold *hold = NULL;
    if (KILN__UNLIKELY(kiln__window_hold_wants(s->window, op)) && !ev &&
        (hold = atomic_load_explicit(&hold_calls, memory_order_acquire)) && (s->window || (s->window = window_get(s)))) {
        lock_window(s->window);
        bool let_go = false, held_back = hold->hold_op(s->window, op, &let_go);
        int64_t window_bytes = s->window->bytes;
        unlock_window(s->window);
        /* what the hold let go was queued without waiting for room (under the lock) */
        if (let_go) kiln__stream_throttle(s, window_bytes);
        if (held_back) return true;
    }
    if (!ev && s->window && kiln__fusion_is_reduction(op->code) &&
        atomic_load_explicit(&s->window->n_held, memory_order_relaxed) &&
        kiln_fusion_enabled()) {
        lock_window(s->window);
        bool joined = kiln__window_try_join_reduce(s->window, op);
        unlock_window(s->window);
        if (joined) return true;
    }
    bool matmul = op->code == KILN__OP_MATMUL && kiln__fusion_matmul_fusable(op); /* a group's producer */
    if (ev || !kiln_fusion_enabled() || !(matmul || kiln__fusion_op_fusable(op))) {
        kiln__fusion_flush_stream(s);
        return false;
    }
    if (!s->window && !(s->window = window_get(s))) return false;
    kiln__window *w = s->window;
    lock_window(w);
    bool flushed = false, joined = join_locked(w, op, matmul, true, &flushed);
    int64_t window_bytes = w->bytes;
    unlock_window(w);
    /* the bounded queue, outside the lock: the window's outputs count as pending bytes, so a
     * frontend filling windows with large tensors waits as it would unfused (small ones skip
     * the stream's lock: the dispatch cost stays that of the window) */
    if (flushed || window_bytes >= THROTTLE_MIN_BYTES) kiln__stream_throttle(s, window_bytes);
    return joined;
}

/* ---- fork ----------------------------------------------------------------------------------- */
/* Every window is locked across fork(), so the child inherits none mid-change. The child runs
 * at dispatch and forgets what windows held: that work is the parent's (as with work another
 * thread queues while the fork happens). */
void kiln__fusion_fork_prepare(void) {
    pthread_mutex_lock(&fusion.lock);
    for (kiln__window *w = atomic_load(&fusion.all); w; w = w->next_all) window_lock(w);
}

void kiln__fusion_fork_parent(void) {
    for (kiln__window *w = atomic_load(&fusion.all); w; w = w->next_all) window_unlock(w);
    pthread_mutex_unlock(&fusion.lock);
}

void kiln__fusion_fork_child(void) {
    for (kiln__window *w = atomic_load(&fusion.all); w; w = w->next_all) {
        for (int i = 0; i < w->n_st; i++) atomic_store((kiln__window *_Atomic *)&w->st[i].s->window, NULL);
        if (w->g) w->g->n_ops = 0;
        w->n_st = w->n_dead = 0;
        const kiln__window_hold *hold = hold_of(w);
        if (hold) hold->forget(w);
        window_unlock(w);
    }
    pthread_mutex_unlock(&fusion.lock);
}
