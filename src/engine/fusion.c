/* The fusion window of each stream (see engine/fusion.h): which ops may join a group, the
 * marks that let other threads flush it, and the hand-over of a group to the engine. */
#include <stdlib.h>
#include <string.h>

#include "engine/fusion.h"
#include "engine/node.h"
#include "ir/expr.h"
#include "kiln/engine.h"

#define MAX_STORAGES KILN__NODE_MAX_VARS

typedef struct {
    kiln__storage *s;
    kiln__view map;  /* the first access's element mapping */
    bool same;       /* every access so far used map */
    bool written;
} window_storage;

/* Windows are never freed: a thread that read a storage's mark may lock the window after its
 * stream is gone (it then finds it empty or reused, and a flush is harmless either way). */
struct kiln__window {
    pthread_mutex_t lock;
    kiln__stream *stream; /* owner; NULL while spare */
    struct kiln__window *next_all, *next_spare;
    kiln__fused *g;       /* the group being built (g->n_ops ops) */
    atomic_int n_held;    /* g->n_ops + n_dead, readable without the lock: only the owner raises it */
    int n_st, n_dead;
    bool closed;          /* the group ended in a reduction: the next op starts a new one */
    window_storage st[MAX_STORAGES];
    kiln__storage *dead[MAX_STORAGES]; /* released while held: freed after the group */
};

static struct {
    pthread_once_t once;
    atomic_bool enabled;
    pthread_mutex_t lock; /* spare list */
    kiln__window *_Atomic all;
    kiln__window *spare;
    _Atomic int64_t groups, ops_fused, stores_elided, foreign_flushes, reductions;
} fusion = {.once = PTHREAD_ONCE_INIT, .lock = PTHREAD_MUTEX_INITIALIZER};

static void fusion_init(void) {
    const char *v = getenv("KILN_FUSION");
    atomic_store(&fusion.enabled, !(v && v[0] == '0'));
}

bool kiln_fusion_enabled(void) {
    pthread_once(&fusion.once, fusion_init);
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
                                atomic_load(&fusion.reductions)};
}

void kiln__fusion_stats_reset(void) {
    atomic_store(&fusion.groups, 0);
    atomic_store(&fusion.ops_fused, 0);
    atomic_store(&fusion.stores_elided, 0);
    atomic_store(&fusion.foreign_flushes, 0);
    atomic_store(&fusion.reductions, 0);
}

/* The window this thread holds locked: a drain inside a flush (out of memory) skips it. */
static _Thread_local kiln__window *held;

static void lock_window(kiln__window *w) {
    pthread_mutex_lock(&w->lock);
    held = w;
}

static void unlock_window(kiln__window *w) {
    held = NULL;
    pthread_mutex_unlock(&w->lock);
}

static kiln__window *window_of(kiln__storage *s) {
    return atomic_load_explicit((kiln__window *_Atomic *)&s->window, memory_order_acquire);
}

static kiln__window *window_get(kiln__stream *s) {
    pthread_mutex_lock(&fusion.lock);
    kiln__window *w = fusion.spare;
    if (w) fusion.spare = w->next_spare;
    if (!w && (w = calloc(1, sizeof *w))) {
        pthread_mutex_init(&w->lock, NULL);
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

/* Hands the window's ops to the engine (w->lock held). Storages keep their mark until the
 * group is queued on them, so another thread either flushes or queues behind the group. */
static void flush_locked(kiln__window *w, bool owner) {
    kiln__fused *g = w->g;
    if (!g || g->n_ops == 0) return;
    kiln__stream *s = w->stream;
    if (g->n_ops == 1) {
        kiln__op op = g->ops[0];
        kiln__async_enqueue(s, &op, NULL, NULL, NULL, owner, false);
    } else {
        kiln__fused_finish(g, is_dead, w);
        kiln__op op = fused_op(g);
        atomic_fetch_add(&fusion.groups, 1);
        atomic_fetch_add(&fusion.ops_fused, g->n_ops);
        atomic_fetch_add(&fusion.stores_elided, g->expr.n_outputs - g->expr.n_stores);
        if (g->row > 0) atomic_fetch_add(&fusion.reductions, 1);
        w->g = NULL; /* the engine frees it once it has run */
        kiln__async_enqueue(s, &op, NULL, NULL, g, owner, false);
    }
    for (int i = 0; i < w->n_st; i++) atomic_store((kiln__window *_Atomic *)&w->st[i].s->window, NULL);
    kiln__op free_op = {.code = KILN__OP_NOOP, .name = "free"};
    for (int i = 0; i < w->n_dead; i++) kiln__async_enqueue(s, &free_op, NULL, w->dead[i], NULL, owner, false);
    if (w->g) w->g->n_ops = 0;
    w->n_st = w->n_dead = 0;
    w->closed = false;
    atomic_store_explicit(&w->n_held, 0, memory_order_release);
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
    if (window_of(st) == w && w->n_dead < MAX_STORAGES) {
        w->dead[w->n_dead++] = st;
        atomic_fetch_add_explicit(&w->n_held, 1, memory_order_relaxed);
        joined = true;
    } else {
        flush_locked(w, true);
    }
    unlock_window(w);
    return joined;
}

/* ---- joining a group -------------------------------------------------------------------- */

static bool same_shape(const kiln__view *v, int ndim, const int64_t *shape) {
    if (v->ndim != ndim) return false;
    for (int d = 0; d < ndim; d++)
        if (v->shape[d] != shape[d]) return false;
    return true;
}

static bool all_zero_strides(const kiln__view *v) {
    for (int d = 0; d < v->ndim; d++)
        if (v->shape[d] != 1 && v->strides[d] != 0) return false;
    return true;
}

/* An elementwise op on the CPU with one dense output whose inputs are already broadcast to
 * its shape (what the IR and the tile interpreter handle). */
static bool op_fusable(const kiln__op *op) {
    if (op->flags || op->n_out != 1 || !kiln__expr_opcode_fusable(op->code)) return false;
    const kiln__view *out = &op->out[0];
    if (!out->storage || out->storage->device != KILN_CPU || !kiln__view_is_contiguous(out) ||
        kiln__view_numel(out) == 0)
        return false;
    for (int i = 0; i < op->n_in; i++) {
        const kiln__view *v = &op->in[i];
        if (!same_shape(v, out->ndim, out->shape) || (v->storage && v->storage->device != KILN_CPU)) return false;
    }
    /* pow's x * x shortcut depends on a stride-0 exponent: keep what the unfused kernel sees */
    if (op->code == KILN__OP_POW && op->in[1].storage && !all_zero_strides(&op->in[1]) &&
        !kiln__view_is_contiguous(&op->in[1]))
        return false;
    return true;
}

typedef struct {
    kiln__storage *s;
    const kiln__view *v;
    bool write;
} access;

static int accesses_of(const kiln__op *op, access *a) {
    int n = 0;
    for (int i = 0; i < op->n_in; i++)
        if (op->in[i].storage) a[n++] = (access){op->in[i].storage, &op->in[i], false};
    a[n++] = (access){op->out[0].storage, &op->out[0], true};
    return n;
}

static int find_storage(const kiln__window *w, const kiln__storage *s) {
    for (int i = 0; i < w->n_st; i++)
        if (w->st[i].s == s) return i;
    return -1;
}

/* Tile-wise evaluation in program order is only right when every access to a storage the
 * group writes uses one element mapping (in-place chains: same view each step). */
static bool accesses_fit(const kiln__window *w, const access *a, int n) {
    int n_new = 0;
    for (int j = 0; j < n; j++) {
        const kiln__view *map = NULL;
        bool same = true, written = false, seen_here = false;
        int e = find_storage(w, a[j].s);
        if (e >= 0) map = &w->st[e].map, same = w->st[e].same, written = w->st[e].written;
        for (int k = 0; k < j; k++) {
            if (a[k].s != a[j].s) continue;
            seen_here = true;
            if (!map) map = a[k].v;
            else same &= kiln__view_same(map, a[k].v);
            written |= a[k].write;
        }
        bool this_same = !map || kiln__view_same(map, a[j].v);
        if (a[j].write && !(same && this_same)) return false;
        if (written && !this_same) return false;
        if (e < 0 && !seen_here) n_new++;
    }
    return w->n_st + n_new <= MAX_STORAGES;
}

static void accesses_commit(kiln__window *w, const access *a, int n) {
    for (int j = 0; j < n; j++) {
        int e = find_storage(w, a[j].s);
        if (e < 0) {
            e = w->n_st++;
            w->st[e] = (window_storage){.s = a[j].s, .map = *a[j].v, .same = true};
            atomic_store((kiln__window *_Atomic *)&a[j].s->window, w);
        }
        w->st[e].same &= kiln__view_same(&w->st[e].map, a[j].v);
        w->st[e].written |= a[j].write;
    }
}

/* Adds op to w's group (w->lock held); false when it does not fit the current group. */
static bool try_join(kiln__window *w, const kiln__op *op, const access *a, int n) {
    kiln__fused *g = w->g;
    if (w->closed || (g->n_ops > 0 && !same_shape(&op->out[0], g->ndim, g->shape))) return false;
    if (!accesses_fit(w, a, n)) return false;
    if (g->n_ops == 0) kiln__fused_init(g, &op->out[0]);
    if (!kiln__fused_add(g, op)) return false;
    accesses_commit(w, a, n);
    atomic_fetch_add_explicit(&w->n_held, 1, memory_order_relaxed);
    return true;
}

/* ---- a reduction ending a group ------------------------------------------------------------ */
/* Rows the CPU interpreter takes whole into a tile: longer ones are reduced unfused. */
#define MAX_FUSED_ROW 16384

static bool is_fusable_reduction(kiln__opcode code) {
    return code == KILN__OP_SUM || code == KILN__OP_MEAN || code == KILN__OP_MAX || code == KILN__OP_MIN ||
           code == KILN__OP_LOGSUMEXP;
}

/* A reduction over the last dim of a value the group wrote (same mapping), into a fresh dense
 * output: it ends the group (w->lock held; true when it joined). */
static bool try_join_reduce(kiln__window *w, const kiln__op *op) {
    kiln__fused *g = w->g;
    if (w->closed || !g || g->n_ops == 0 || op->flags || op->n_in != 1 || op->n_out != 1 ||
        !is_fusable_reduction(op->code))
        return false;
    const kiln__view *in = &op->in[0], *out = &op->out[0];
    int nd = g->ndim;
    if (nd < 1 || g->shape[nd - 1] < 2 || g->shape[nd - 1] > MAX_FUSED_ROW || !in->storage || !out->storage ||
        out->storage->device != KILN_CPU || !same_shape(in, nd, g->shape) || out->ndim != nd ||
        !kiln__view_is_contiguous(out) || (in->dtype != KILN_F32 && in->dtype != KILN_F64))
        return false;
    for (int d = 0; d < nd; d++)
        if (out->shape[d] != (d == nd - 1 ? 1 : g->shape[d])) return false;
    int e = find_storage(w, in->storage);
    if (e < 0 || !w->st[e].written || find_storage(w, out->storage) >= 0) return false;
    access a[2] = {{in->storage, in, false}, {out->storage, out, true}};
    if (!accesses_fit(w, a, 2) || !kiln__var_of(out->storage) || !kiln__fused_add_reduce(g, op)) return false;
    accesses_commit(w, a, 2);
    w->closed = true;
    atomic_fetch_add_explicit(&w->n_held, 1, memory_order_relaxed);
    return true;
}

bool kiln__fusion_submit(kiln__stream *s, const kiln__op *op, kiln__event *ev, kiln__storage *free_target) {
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
    if (!ev && s->window && is_fusable_reduction(op->code) && atomic_load_explicit(&s->window->n_held, memory_order_relaxed) &&
        kiln_fusion_enabled()) {
        lock_window(s->window);
        bool joined = try_join_reduce(s->window, op);
        unlock_window(s->window);
        if (joined) return true;
    }
    if (ev || !kiln_fusion_enabled() || !op_fusable(op)) {
        kiln__fusion_flush_stream(s);
        return false;
    }
    access a[KILN__OP_MAX_IN + 1];
    int n = accesses_of(op, a);
    for (int i = 0; i < n; i++)
        if (!kiln__var_of(a[i].s)) return false; /* (a storage with a var reaches the release hook) */
    if (!s->window && !(s->window = window_get(s))) return false;
    kiln__window *w = s->window;
    lock_window(w);
    bool joined = false, flushed = false;
    for (int attempt = 0; attempt < 2 && !joined; attempt++) {
        if (!w->g) {
            if (!(w->g = malloc(sizeof *w->g))) break;
            w->g->n_ops = 0;
        }
        joined = try_join(w, op, a, n);
        if (!joined && w->g->n_ops == 0) break; /* not even alone */
        if (!joined) flush_locked(w, true), flushed = true;
    }
    unlock_window(w);
    if (flushed) kiln__stream_throttle(s); /* the bounded queue, outside the lock */
    return joined;
}

/* ---- fork ----------------------------------------------------------------------------------- */
/* Every window is locked across fork(), so the child inherits none mid-change. The child runs
 * at dispatch and forgets what windows held: that work is the parent's (as with work another
 * thread queues while the fork happens). */
void kiln__fusion_fork_prepare(void) {
    pthread_mutex_lock(&fusion.lock);
    for (kiln__window *w = atomic_load(&fusion.all); w; w = w->next_all) pthread_mutex_lock(&w->lock);
}

void kiln__fusion_fork_parent(void) {
    for (kiln__window *w = atomic_load(&fusion.all); w; w = w->next_all) pthread_mutex_unlock(&w->lock);
    pthread_mutex_unlock(&fusion.lock);
}

void kiln__fusion_fork_child(void) {
    for (kiln__window *w = atomic_load(&fusion.all); w; w = w->next_all) {
        for (int i = 0; i < w->n_st; i++) atomic_store((kiln__window *_Atomic *)&w->st[i].s->window, NULL);
        if (w->g) w->g->n_ops = 0;
        w->n_st = w->n_dead = 0;
        pthread_mutex_unlock(&w->lock);
    }
    pthread_mutex_unlock(&fusion.lock);
}
