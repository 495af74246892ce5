/* The backward pass: walks the graph from the root in reverse topological order (a node
 * runs once every consumer has delivered its gradient), releasing each node's saved state
 * right after its derivative is computed, and collects the leaves' gradients. */
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "autodiff/autodiff-impl.h"
#include "kiln/autodiff.h"
#include "kiln/tensor.h"

typedef struct {
    kiln__ad_leaf *leaf; /* a reference */
    kiln__tensor *grad;
    int pending; /* with hooks: deliveries still to come in this walk */
} grad_entry;

#define MAX_HOOKS 8
static struct {
    pthread_mutex_t lock;
    int n;
    kiln__ad_backward_hooks v[MAX_HOOKS];
} hooks = {.lock = PTHREAD_MUTEX_INITIALIZER};

bool kiln__ad_hooks_add(kiln__ad_backward_hooks h) {
    pthread_mutex_lock(&hooks.lock);
    bool ok = hooks.n < MAX_HOOKS;
    if (ok) hooks.v[hooks.n++] = h;
    pthread_mutex_unlock(&hooks.lock);
    return ok;
}

void kiln__ad_hooks_remove(void *ctx) {
    pthread_mutex_lock(&hooks.lock);
    for (int i = 0; i < hooks.n; i++)
        if (hooks.v[i].ctx == ctx) hooks.v[i--] = hooks.v[--hooks.n];
    pthread_mutex_unlock(&hooks.lock);
}

/* The hooks registered when a walk starts. */
static int hooks_snapshot(kiln__ad_backward_hooks *out) {
    pthread_mutex_lock(&hooks.lock);
    int n = hooks.n;
    memcpy(out, hooks.v, sizeof *out * (size_t)n);
    pthread_mutex_unlock(&hooks.lock);
    return n;
}

struct kiln_grads {
    grad_entry *entries;
    size_t n, cap;
    kiln__site made;             /* the backward call, for the leak check */
    bool late;                   /* some gradients are still being computed by collectives */
    int n_syncs;                 /* (late) how the step's processes agree before committing */
    struct {
        const kiln__grads_sync *fn;
        void *ctx;
    } syncs[MAX_HOOKS];
    kiln_grads *prev, *next;     /* every live container */
};

/* Live containers, for the leak check (a mutex per backward pass, not per op). */
static pthread_mutex_t live_lock = PTHREAD_MUTEX_INITIALIZER;
static kiln_grads *live_head;
static pthread_once_t live_once = PTHREAD_ONCE_INIT;

static int64_t live_containers(FILE *f) {
    int64_t n = 0;
    pthread_mutex_lock(&live_lock);
    for (kiln_grads *g = live_head; g; g = g->next, n++)
        if (f && n < 32)
            fprintf(f, "  gradients container made by %s at %s:%d (kiln_grads_free)\n",
                    g->made.op ? g->made.op : "kiln_backward", g->made.file ? g->made.file : "?", g->made.line);
    pthread_mutex_unlock(&live_lock);
    if (f && n > 32) fprintf(f, "  ... and %lld more gradient containers\n", (long long)(n - 32));
    return n;
}

static void live_lock_for_fork(void) { pthread_mutex_lock(&live_lock); }
static void live_unlock_after_fork(void) { pthread_mutex_unlock(&live_lock); }

static void live_register(void) {
    kiln__leak_add_reporter(live_containers);
    pthread_atfork(live_lock_for_fork, live_unlock_after_fork, live_unlock_after_fork);
}

static kiln_grads *grads_new(void) {
    kiln_grads *gs = calloc(1, sizeof *gs);
    if (!gs) return NULL;
    if (!kiln__object_register(gs, KILN__GRADS_KIND)) {
        free(gs);
        return NULL;
    }
    pthread_once(&live_once, live_register);
    gs->made = kiln__call_site();
    pthread_mutex_lock(&live_lock);
    gs->next = live_head;
    if (live_head) live_head->prev = gs;
    live_head = gs;
    pthread_mutex_unlock(&live_lock);
    return gs;
}

static atomic_ullong visit_epoch;

kiln__tensor *kiln__ad_sum_to(kiln__opctx *c, kiln__tensor *g, int ndim, const int64_t *shape) {
    if (!kiln__ok(c, g)) return kiln__drop(1, g), NULL;
    if (g->ndim == ndim && memcmp(g->shape, shape, sizeof(int64_t) * (size_t)ndim) == 0) return g;
    uint32_t mask = 0;
    int lead = g->ndim - ndim;
    if (lead < 0) {
        kiln__drop(1, g);
        return kiln__fail(c, KILN_ERR_INTERNAL, "gradient has fewer dims than its input");
    }
    for (int d = 0; d < g->ndim; d++)
        if (d < lead || (shape[d - lead] == 1 && g->shape[d] != 1)) mask |= 1u << d;
    if (mask) g = kiln__t_reduce(c, KILN__OP_SUM, g, mask, true, 0);
    return g ? kiln__t_reshape(c, g, ndim, shape) : NULL;
}

/* Adds g into *acc (in place when *acc has one owner). */
static void accumulate(kiln__opctx *c, kiln__tensor **acc, kiln__tensor *g) {
    *acc = *acc ? kiln__t_binary(c, KILN__OP_ADD, *acc, g) : g;
}

static grad_entry *find_entry(kiln_grads *gs, const kiln__ad_leaf *leaf) {
    for (size_t i = 0; i < gs->n; i++)
        if (gs->entries[i].leaf == leaf) return &gs->entries[i];
    return NULL;
}

/* leaf's entry, made if missing; NULL (and c's error) on out of memory. */
static grad_entry *entry_for(kiln__opctx *c, kiln_grads *gs, kiln__ad_leaf *leaf) {
    grad_entry *e = find_entry(gs, leaf);
    if (e) return e;
    if (gs->n == gs->cap) {
        size_t cap = gs->cap ? gs->cap * 2 : 16;
        grad_entry *grown = realloc(gs->entries, sizeof *grown * cap);
        if (!grown) {
            kiln__fail(c, KILN_ERR_OUT_OF_MEMORY, "cannot grow the gradients container");
            return NULL;
        }
        gs->entries = grown;
        gs->cap = cap;
    }
    e = &gs->entries[gs->n++];
    atomic_fetch_add_explicit(&leaf->refs, 1, memory_order_relaxed);
    *e = (grad_entry){leaf, NULL, 0};
    return e;
}

static void deliver_to_leaf(kiln__opctx *c, kiln_grads *gs, kiln__ad_leaf *leaf, kiln__tensor *g,
                            const kiln__ad_backward_hooks *hv, int nh) {
    grad_entry *e = entry_for(c, gs, leaf);
    if (!e) {
        kiln__tensor_release(g);
        return;
    }
    /* a leaf's gradient is dense (sum or expand backward can hand over a broadcast view) */
    accumulate(c, &e->grad, kiln__t_contiguous(c, g));
    if (nh > 0 && --e->pending <= 0 && !c->err)
        for (int i = 0; i < nh; i++) hv[i].leaf_final(hv[i].ctx, gs, leaf);
}

kiln_dtype kiln__ad_grad_dtype(const kiln__ad_node *n, int i) {
    const kiln__ad_slot *s = &n->slots[i];
    const kiln__ad_node *p = s->node;
    if (!kiln__ad_node_is_cast(p) || p->hooks || p->n_slots != 1) return s->dtype;
    kiln_dtype from = p->slots[0].dtype;
    return kiln__dtype_is_float(from) && kiln__elsize(from) > kiln__elsize(s->dtype) ? from : s->dtype;
}

/* Shapes and dtype of gradient i of n brought back to those of the input it is for (a wider
 * one kept where kiln__ad_grad_dtype allows). */
static kiln__tensor *fit_to_slot(kiln__opctx *c, const kiln__ad_node *n, int i, kiln__tensor *g) {
    const kiln__ad_slot *s = &n->slots[i];
    g = kiln__ad_sum_to(c, g, s->ndim, s->shape);
    if (!g || (g->dtype != s->dtype && g->dtype == kiln__ad_grad_dtype(n, i))) return g;
    return kiln__t_cast(c, g, s->dtype);
}

/* Drops what the node holds for backward; the node itself lives while tensors point to it. */
static void consume_node(kiln__ad_node *n) {
    n->consumed = true;
    if (n->ext_free) n->ext_free(n->ext);
    n->ext = NULL;
    n->ext_free = NULL;
    for (int i = 0; i < KILN__AD_MAX_SAVED; i++) {
        kiln__tensor_release(n->saved[i]);
        n->saved[i] = NULL;
        kiln__ad_node_unref(n->lazy[i]);
        n->lazy[i] = NULL;
    }
    for (int i = 0; i < n->n_slots; i++) {
        kiln__ad_node *p = n->slots[i].node;
        n->slots[i].node = NULL;
        kiln__ad_node_unref(p);
    }
}

typedef struct {
    kiln__ad_node **v;
    size_t n, cap;
} node_stack;

static bool push(node_stack *s, kiln__ad_node *n) {
    if (s->n == s->cap) {
        size_t cap = s->cap ? s->cap * 2 : 64;
        kiln__ad_node **grown = realloc(s->v, sizeof *grown * cap);
        if (!grown) return false;
        s->v = grown;
        s->cap = cap;
    }
    s->v[s->n++] = n;
    return true;
}

/* Where a region's walk stops (kiln__ad_region_backward): nodes outside the region, whose
 * gradients are collected for the enclosing walk. NULL for a whole backward pass. */
typedef struct {
    int n;
    kiln__ad_node *const *nodes;
    kiln__tensor **grads;
} walk_edge;

static int edge_index(const walk_edge *e, const kiln__ad_node *p) {
    if (e)
        for (int k = 0; k < e->n; k++)
            if (e->nodes[k] == p) return k;
    return -1;
}

/* Counts, for every node reachable from root, how many of its consumers are in the graph;
 * takes a walk reference on each. */
static bool count_consumers(kiln__ad_node *root, node_stack *all, const walk_edge *edge) {
    uint64_t epoch = atomic_fetch_add(&visit_epoch, 1) + 1;
    node_stack todo = {0};
    bool ok = push(&todo, root) && push(all, root);
    root->visit = epoch;
    root->pending = 0;
    atomic_fetch_add(&root->refs, 1);
    while (ok && todo.n) {
        kiln__ad_node *n = todo.v[--todo.n];
        for (int i = 0; i < n->n_slots; i++) {
            kiln__ad_node *p = n->slots[i].node;
            if (!p || edge_index(edge, p) >= 0) continue;
            if (p->visit != epoch) {
                p->visit = epoch;
                p->pending = 0;
                atomic_fetch_add(&p->refs, 1);
                ok = push(&todo, p) && push(all, p);
                if (!ok) atomic_fetch_sub(&p->refs, 1);
            }
            p->pending++;
        }
    }
    free(todo.v);
    return ok;
}

/* With hooks: how many gradients each leaf receives in this walk, so the hooks learn when a
 * leaf's gradient is complete. */
static void count_leaf_deliveries(kiln__opctx *c, kiln_grads *gs, const node_stack *all) {
    for (size_t i = 0; i < all->n && !c->err; i++) {
        const kiln__ad_node *n = all->v[i];
        for (int k = 0; k < n->n_slots; k++) {
            if (!n->slots[k].leaf) continue;
            grad_entry *e = entry_for(c, gs, n->slots[k].leaf);
            if (e) e->pending++;
        }
    }
}

/* A backward call that failed before it could walk (a poisoned loss, a bad argument): the
 * hooks still hear of it, so data parallelism's peers are told rather than left waiting. */
static void hooks_failed_before_walk(void) {
    kiln__ad_backward_hooks hv[MAX_HOOKS];
    int nh = hooks_snapshot(hv);
    for (int i = 0; i < nh; i++) hv[i].walk_done(hv[i].ctx, NULL, false);
}

/* Leaves' hooks on their total gradients, once a whole walk is done (a region's walk leaves
 * them to the enclosing one, which receives the region's contributions). */
static void leaf_hooks(kiln__opctx *c, kiln_grads *gs) {
    for (size_t i = 0; i < gs->n && !c->err; i++)
        if (gs->entries[i].leaf->hooks && gs->entries[i].grad)
            gs->entries[i].grad = kiln__ad_run_hooks(c, gs->entries[i].leaf->hooks, gs->entries[i].grad);
}

static kiln_status run_backward(kiln__opctx *c, kiln__tensor *root, kiln__tensor *seed, kiln_grads **out,
                                const walk_edge *edge) {
    kiln__ad_meta *m = root->autodiff;
    kiln_grads *gs = grads_new();
    if (!gs) {
        kiln__drop(2, root, seed);
        kiln__fail(c, KILN_ERR_OUT_OF_MEMORY, "cannot allocate the gradients container");
        if (!edge) hooks_failed_before_walk(); /* (a region's walk: the enclosing walk tells them) */
        return c->err->status;
    }
    kiln__ad_backward_hooks hv[MAX_HOOKS] = {0};
    int nh = edge ? 0 : hooks_snapshot(hv);
    kiln_no_grad_begin();
    if (m->leaf) {
        deliver_to_leaf(c, gs, m->leaf, seed, hv, nh);
        kiln__tensor_release(root);
        if (!edge) leaf_hooks(c, gs);
        for (int i = 0; i < nh; i++) hv[i].walk_done(hv[i].ctx, gs, !c->err);
        kiln_no_grad_end();
        *out = gs;
        return c->err ? c->err->status : KILN_OK;
    }
    kiln__ad_node *start = m->node;
    node_stack all = {0}, ready = {0};
    if (!count_consumers(start, &all, edge)) {
        kiln__fail(c, KILN_ERR_OUT_OF_MEMORY, "cannot walk the graph");
        kiln__tensor_release(seed);
    } else {
        start->grad = seed;
        push(&ready, start); /* cannot fail: `all` grew to this size already */
        if (nh > 0) count_leaf_deliveries(c, gs, &all);
    }
    kiln__tensor_release(root); /* the root's own meta no longer pins the graph: the walk does */
    while (ready.n && !c->err) {
        kiln__ad_node *n = ready.v[--ready.n];
        kiln__tensor *g = n->grad;
        n->grad = NULL;
        if (n->hooks && !(g = kiln__ad_run_hooks(c, n->hooks, g))) break;
        if (!kiln__ad_unlazy(c, n)) {
            kiln__tensor_release(g);
            break;
        }
        kiln__tensor *grads[64];
        kiln__tensor **gv = n->n_slots <= 64 ? grads : calloc((size_t)n->n_slots, sizeof *gv);
        if (!gv) {
            kiln__tensor_release(g);
            kiln__fail(c, KILN_ERR_OUT_OF_MEMORY, "cannot run a backward node");
            break;
        }
        memset(gv, 0, sizeof *gv * (size_t)n->n_slots);
        n->rule->backward(c, n, g, gv);
        for (int i = 0; i < n->n_slots; i++) {
            kiln__ad_slot *s = &n->slots[i];
            kiln__tensor *gi = gv[i];
            if (!gi) continue;
            if (c->err || (!s->leaf && !s->node)) {
                kiln__tensor_release(gi);
                continue;
            }
            gi = fit_to_slot(c, n, i, gi);
            if (!gi) continue;
            int k;
            if (s->leaf) {
                deliver_to_leaf(c, gs, s->leaf, gi, hv, nh);
            } else if ((k = edge_index(edge, s->node)) >= 0) {
                accumulate(c, &edge->grads[k], gi);
            } else {
                accumulate(c, &s->node->grad, gi);
                if (--s->node->pending == 0) push(&ready, s->node);
            }
        }
        if (gv != grads) free(gv);
        consume_node(n);
    }
    if (!edge) leaf_hooks(c, gs);
    for (int i = 0; i < nh; i++) hv[i].walk_done(hv[i].ctx, gs, !c->err);
    kiln_no_grad_end();
    for (size_t i = 0; i < all.n; i++) { /* drop walk references (and state left by an error) */
        kiln__tensor_release(all.v[i]->grad);
        all.v[i]->grad = NULL;
        consume_node(all.v[i]);
        kiln__ad_node_unref(all.v[i]);
    }
    free(all.v);
    free(ready.v);
    if (c->err) {
        kiln_grads_free(gs);
        return c->err->status;
    }
    *out = gs;
    return KILN_OK;
}

kiln_grads *kiln__ad_region_backward(kiln__opctx *c, kiln__tensor *root, kiln__tensor *seed, int n_edge,
                                     kiln__ad_node *const *edge, kiln__tensor **edge_grads) {
    walk_edge e = {n_edge, edge, edge_grads};
    kiln_grads *gs = NULL;
    if (!kiln__ok(c, root) || !kiln__ok(c, seed) || !root->autodiff) {
        kiln__drop(2, root, seed);
        return NULL;
    }
    int k = edge_index(&e, ((kiln__ad_meta *)root->autodiff)->node);
    if (k >= 0) { /* the region returned a tensor from outside it unchanged */
        accumulate(c, &edge_grads[k], seed);
        kiln__tensor_release(root);
        gs = grads_new();
        if (!gs) kiln__fail(c, KILN_ERR_OUT_OF_MEMORY, "cannot allocate the gradients container");
        return gs;
    }
    run_backward(c, root, seed, &gs, &e);
    return gs;
}

static kiln_status backward_common(kiln__opctx *c, kiln_tensor root_h, kiln_tensor seed_h, bool has_seed, kiln_grads **out) {
    kiln__tensor *root = kiln__arg(c, root_h);
    kiln__tensor *seed = has_seed ? kiln__arg(c, seed_h) : NULL;
    if (out) *out = NULL;
    if (!out) kiln__fail(c, KILN_ERR_NULL, "output pointer is NULL");
    if (kiln__ok(c, root) && (!has_seed || kiln__ok(c, seed)) && !c->err) {
        kiln__ad_meta *m = root->autodiff;
        if (!m)
            kiln__fail(c, KILN_ERR_NO_GRAPH, "tensor has no graph: no input requires a gradient (kiln_require_grad)");
        else if (m->node && m->node->consumed)
            kiln__fail(c, KILN_ERR_NO_GRAPH, "this graph was already consumed by a backward pass");
        else if (!has_seed && kiln__tensor_numel(root) != 1)
            kiln__fail(c, KILN_ERR_SHAPE, "backward of a non-scalar tensor needs a seed (kiln_backward_seed)");
        else if (has_seed && (seed->ndim != root->ndim ||
                              memcmp(seed->shape, root->shape, sizeof(int64_t) * (size_t)root->ndim) != 0))
            kiln__fail(c, KILN_ERR_SHAPE, "seed shape differs from the root's");
    }
    if (c->err) {
        kiln__drop(2, root, seed);
        hooks_failed_before_walk();
    } else {
        if (!seed) seed = kiln__t_fill(c, root->device, root->dtype, root->ndim, root->shape, 1.0);
        else seed = kiln__t_cast(c, seed, root->dtype);
        if (seed) {
            kiln__tensor *detached = seed->autodiff ? kiln__tensor_view(seed, seed->ndim, seed->shape, seed->strides, seed->offset) : NULL;
            if (detached) kiln__tensor_release(seed), seed = detached;
            run_backward(c, root, seed, out, NULL);
        } else {
            kiln__tensor_release(root);
            hooks_failed_before_walk();
        }
    }
    if (!c->err) return KILN_OK;
    kiln_status st = kiln__error_report(c->err);
    kiln__error_unref(c->err);
    return st;
}

kiln_status kiln_backward(kiln_tensor loss, kiln_grads **out) {
    KILN__OP_BEGIN("kiln_backward");
    return backward_common(&c, loss, KILN_NONE, false, out);
}

kiln_status kiln_backward_seed(kiln_tensor root, kiln_tensor seed, kiln_grads **out) {
    KILN__OP_BEGIN("kiln_backward_seed");
    return backward_common(&c, root, seed, true, out);
}

/* The backward pass is queued first, then the loss is read: the one wait is for the forward
 * pass only, and the backward runs meanwhile. The extra reference keeps the loss's buffer from
 * being reused in place by the backward. */
kiln_status kiln_backward_value(kiln_tensor loss, kiln_grads **out, double *value) {
    KILN__OP_BEGIN("kiln_backward_value");
    if (value) *value = NAN;
    kiln__error *err = NULL;
    kiln__tensor *t = kiln__handle_peek(loss, c.name, &err);
    if (!t) {
        if (out) *out = NULL;
        hooks_failed_before_walk();
        kiln_status st = kiln__error_report(err);
        kiln__error_unref(err);
        return st;
    }
    if (!value) kiln__fail(&c, KILN_ERR_NULL, "value pointer is NULL");
    kiln__tensor_retain(t);
    kiln_tensor keep = kiln__handle_new(t);
    kiln_status st = backward_common(&c, loss, KILN_NONE, false, out); /* reports its own error */
    if (st != KILN_OK) {
        kiln_release(keep);
        return st;
    }
    return kiln_into_scalar_f64(keep, value);
}

kiln_tensor kiln_grad(kiln_grads *gs, kiln_tensor h) {
    kiln__error *err = NULL;
    kiln__tensor *t = kiln__handle_peek(h, "kiln_grad", &err);
    if (!t) {
        kiln__error_report(err);
        kiln__error_unref(err);
        return KILN_NONE;
    }
    if (!gs) {
        kiln__report(KILN_ERR_NULL, "kiln_grad", "gradients container is NULL");
        return KILN_NONE;
    }
    KILN__OBJECT_OR_RETURN(gs, KILN__GRADS_KIND, "kiln_grad", KILN_NONE);
    kiln__ad_meta *m = t->autodiff;
    if (!m || !m->leaf) {
        kiln__report(KILN_ERR_INVALID_ARGUMENT, "kiln_grad", "tensor is not a leaf (kiln_require_grad)");
        return KILN_NONE;
    }
    grad_entry *e = find_entry(gs, m->leaf);
    if (!e || !e->grad) return KILN_NONE;
    kiln__tensor *g = e->grad;
    e->grad = NULL;
    return kiln__handle_new(g);
}

kiln__tensor **kiln__grads_slot(kiln_grads *gs, const kiln__ad_leaf *leaf) {
    grad_entry *e = gs && leaf ? find_entry(gs, leaf) : NULL;
    return e && e->grad ? &e->grad : NULL;
}

bool kiln__grads_mark_late(kiln_grads *gs, const kiln__grads_sync *sync, void *ctx) {
    if (!gs) return false;
    if (sync) {
        if (gs->n_syncs == MAX_HOOKS) return false;
        gs->syncs[gs->n_syncs].fn = sync;
        gs->syncs[gs->n_syncs++].ctx = ctx;
    }
    gs->late = true;
    return true;
}

bool kiln__grads_late(const kiln_grads *gs) { return gs && gs->late; }

void kiln__grads_agree(kiln_grads *gs, kiln__opctx *c) {
    for (int i = 0; gs && i < gs->n_syncs; i++) gs->syncs[i].fn->agree(gs->syncs[i].ctx, c);
}

bool kiln__grads_expects(const kiln_grads *gs, const kiln__ad_leaf *leaf) {
    return gs && leaf && find_entry((kiln_grads *)gs, leaf) != NULL;
}

kiln_grads *kiln__grads_new(void) { return grads_new(); }

bool kiln__grads_put(kiln__opctx *c, kiln_grads *gs, kiln__ad_leaf *leaf, kiln__tensor *g) {
    grad_entry *e = entry_for(c, gs, leaf);
    if (!e) return kiln__tensor_release(g), false;
    kiln__tensor_release(e->grad);
    e->grad = g;
    return true;
}

size_t kiln_grads_count(const kiln_grads *gs) {
    if (gs) KILN__OBJECT_OR_RETURN(gs, KILN__GRADS_KIND, "kiln_grads_count", 0);
    size_t n = 0;
    for (size_t i = 0; gs && i < gs->n; i++) n += gs->entries[i].grad != NULL;
    return n;
}

void kiln_grads_free(kiln_grads *gs) {
    if (!gs || kiln__object_retire(gs, KILN__GRADS_KIND, "kiln_grads_free") != KILN_OK) return;
    for (int i = 0; i < gs->n_syncs; i++) gs->syncs[i].fn->release(gs->syncs[i].ctx);
    for (size_t i = 0; i < gs->n; i++) {
        kiln__tensor_release(gs->entries[i].grad);
        kiln__ad_leaf *l = gs->entries[i].leaf;
        if (atomic_fetch_sub(&l->refs, 1) == 1) free(l);
    }
    free(gs->entries);
    pthread_mutex_lock(&live_lock);
    if (gs->prev) gs->prev->next = gs->next;
    else live_head = gs->next;
    if (gs->next) gs->next->prev = gs->prev;
    pthread_mutex_unlock(&live_lock);
    kiln__object_dispose(gs, KILN__GRADS_KIND, "kiln_grads_free");
}
