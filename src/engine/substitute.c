/* Substitution of queued ops (engine/substitute.h): the registry of patterns, the hold of a
 * stream's window where ops that may belong to one wait, and the matcher that replaces a
 * complete pattern by its builder's op when none of its intermediates is read elsewhere.
 *
 * Why hold instead of looking back at queued nodes: a queued op may already be running, and
 * the engine cannot tell from a node whether a handle to its result remains. Ops in the hold
 * are not queued yet, their storages carry the window's mark (so another thread's op on one
 * flushes the hold first, as for a fusion group), and a storage whose last handle goes while
 * it is held lands in the hold's dead list: "no handle remains" is then a fact, not a guess.
 * The decision is taken when the hold must let go (an op no pattern has, a read, a sync, a full
 * hold), so that a handle the caller releases just after the pattern's last op counts.
 *
 * The hold sits above fusion: the window calls it only through the calls this file registers
 * (kiln__window_hold, kiln__fusion_set_hold), and it gives ops back to the window by name
 * (kiln__window_admit), so calls between the two point one way. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/fusion-impl.h"
#include "engine/substitute.h"

#define MAX_PATTERNS 32

static struct {
    pthread_once_t once;
    pthread_mutex_t lock; /* registration */
    bool env_on;
    atomic_bool enabled;
    _Atomic int n;
    kiln__pattern *patterns[MAX_PATTERNS]; /* largest first; each set before n counts it */
    _Atomic int64_t substituted, refused_consumer, refused_shape;
} subst = {.once = PTHREAD_ONCE_INIT, .lock = PTHREAD_MUTEX_INITIALIZER};

/* feeds[a] bit b: some pattern has a node of opcode b that reads a node of opcode a */
static _Atomic uint8_t feeds[KILN__OP_COUNT][(KILN__OP_COUNT + 7) / 8];
/* bit n: some pattern's input-only node of this opcode has n operands (a product with a bias,
 * three, starts no attention) */
static _Atomic uint8_t start_arity[KILN__OP_COUNT];

/* The hold a window carries, as fusion (the layer below) calls it: kiln__window_hold. */
static bool hold_op(kiln__window *w, const kiln__op *op, bool *let_go_of);
static void hold_resolve(kiln__window *w, bool owner);
static bool hold_uses(const kiln__window *w, const kiln__storage *s);
static bool hold_defer_free(kiln__window *w, kiln__storage *s, bool owner);
static void hold_forget(kiln__window *w);
static const kiln__window_hold window_hold = {hold_op, hold_resolve, hold_uses, hold_defer_free, hold_forget};

static void subst_init(void) {
    kiln__fusion_set_hold(&window_hold); /* (before any pattern is registered: nothing is held yet) */
    subst.env_on = kiln__env_flag("KILN_SUBSTITUTE", true);
    atomic_store(&subst.enabled, subst.env_on);
}

static void update_live(void) {
    atomic_store(&kiln__hold_live, atomic_load(&subst.enabled) && atomic_load(&subst.n) > 0);
}

bool kiln__subst_on(void) {
    pthread_once(&subst.once, subst_init);
    return atomic_load_explicit(&kiln__hold_live, memory_order_relaxed);
}

void kiln__subst_set_enabled(bool on) {
    pthread_once(&subst.once, subst_init);
    atomic_store(&subst.enabled, on);
    update_live();
    if (!on) kiln__fusion_flush_all(NULL); /* what is held goes on as written */
}

kiln__subst_stats kiln__subst_stats_get(void) {
    return (kiln__subst_stats){atomic_load(&subst.substituted), atomic_load(&subst.refused_consumer),
                               atomic_load(&subst.refused_shape)};
}

void kiln__subst_stats_reset(void) {
    atomic_store(&subst.substituted, 0);
    atomic_store(&subst.refused_consumer, 0);
    atomic_store(&subst.refused_shape, 0);
}

/* ---- registration -------------------------------------------------------------------------- */

/* A row-op kernel of ir/row_table.h (softmax, log_softmax): one dim, p.i[0]. */
static bool is_row_kernel(kiln__opcode c) {
    switch (c) {
#define ROW_KERNEL(NAME, ...) case KILN__OP_##NAME:
        KILN__ROW_KERNELS(ROW_KERNEL)
#undef ROW_KERNEL
        return true;
    default: return false;
    }
}

/* What a pattern may ask to run over the last dim: a reduction the engine fuses (the fuse column
 * of ir/reduce_table.h) or a row op. */
static bool is_reduction_or_softmax(kiln__opcode c) {
    return kiln__reduce_info_of(c)->fuse == KILN__RFUSE_LAST || is_row_kernel(c);
}

static bool bad(char *why, size_t size, const char *fmt, const char *name, int a, int b) {
    snprintf(why, size, fmt, name, a, b);
    return false;
}

static bool check_pattern(const kiln__pattern *p, char *why, size_t n) {
    const char *name = p->name ? p->name : "(unnamed)";
    if (p->n_nodes < 1 || p->n_nodes > KILN__PAT_MAX_NODES)
        return bad(why, n, "pattern of %s: %d nodes (1..%d allowed)", name, p->n_nodes, KILN__PAT_MAX_NODES);
    if (p->n_slots < 1 || p->n_slots > KILN__PAT_MAX_SLOTS)
        return bad(why, n, "pattern of %s: %d inputs (1..%d allowed)", name, p->n_slots, KILN__PAT_MAX_SLOTS);
    if (!p->build) return bad(why, n, "pattern of %s has no builder%.0d%.0d", name, 0, 0);
    uint32_t slots_used = 0, nodes_used = 0;
    for (int j = 0; j < p->n_nodes; j++) {
        const kiln__pat_node *nd = &p->nodes[j];
        if ((unsigned)nd->code >= KILN__OP_COUNT || nd->n_in < 1 || nd->n_in > 2)
            return bad(why, n, "pattern of %s: node %d has an unknown op or %d inputs", name, j, nd->n_in);
        if ((nd->flags & KILN__PAT_CONST) && nd->n_in != 2)
            return bad(why, n, "pattern of %s: node %d has a constant but %d input (a constant is a binary op's second)", name, j,
                       nd->n_in);
        if ((nd->flags & KILN__PAT_LAST_DIM) && !is_reduction_or_softmax(nd->code))
            return bad(why, n, "pattern of %s: node %d asks for the last dim but is no reduction or softmax%.0d", name, j, 0);
        int n_refs = nd->n_in - ((nd->flags & KILN__PAT_CONST) ? 1 : 0);
        for (int k = 0; k < n_refs; k++) {
            int r = nd->in[k];
            if (r >= 0 && r >= j)
                return bad(why, n, "pattern of %s: node %d reads node %d, which is not an earlier one", name, j, r);
            if (r < 0 && -1 - r >= p->n_slots)
                return bad(why, n, "pattern of %s: node %d reads input %d, past the pattern's inputs", name, j, -1 - r);
            if (r >= 0) nodes_used |= 1u << r;
            else slots_used |= 1u << (-1 - r);
        }
    }
    for (int j = 0; j + 1 < p->n_nodes; j++)
        if (!(nodes_used >> j & 1))
            return bad(why, n, "pattern of %s: node %d is read by no later node (only the last is the result)%.0d", name, j, 0);
    for (int k = 0; k < p->n_slots; k++)
        if (!(slots_used >> k & 1)) return bad(why, n, "pattern of %s: input %d is read by no node%.0d", name, k, 0);
    return true;
}

bool kiln__subst_check(const kiln__pattern *p, char *why, size_t why_size) {
    if (!p) return bad(why, why_size, "%s pattern is NULL%.0d%.0d", "the", 0, 0);
    return check_pattern(p, why, why_size);
}

bool kiln__subst_register(const kiln__pattern *p, char *why, size_t why_size) {
    pthread_once(&subst.once, subst_init);
    if (!p) return bad(why, why_size, "%s pattern is NULL%.0d%.0d", "the", 0, 0);
    if (!check_pattern(p, why, why_size)) return false;
    kiln__pattern *copy = malloc(sizeof *copy);
    if (!copy) return bad(why, why_size, "no memory for the pattern of %s%.0d%.0d", p->name, 0, 0);
    *copy = *p;
    pthread_mutex_lock(&subst.lock);
    int n = atomic_load(&subst.n);
    if (n == MAX_PATTERNS) {
        pthread_mutex_unlock(&subst.lock);
        free(copy);
        return bad(why, why_size, "pattern of %s: %d patterns are registered already (the most)%.0d", p->name, MAX_PATTERNS, 0);
    }
    int at = n; /* largest first: a larger pattern that matches replaces more */
    while (at > 0 && subst.patterns[at - 1]->n_nodes < copy->n_nodes) subst.patterns[at] = subst.patterns[at - 1], at--;
    subst.patterns[at] = copy;
    bool leaf[KILN__PAT_MAX_NODES];
    int n_leaves = 0;
    for (int j = 0; j < copy->n_nodes; j++) {
        const kiln__pat_node *nd = &copy->nodes[j];
        leaf[j] = true;
        for (int k = 0; k < nd->n_in - ((nd->flags & KILN__PAT_CONST) ? 1 : 0); k++) {
            if (nd->in[k] < 0) continue;
            leaf[j] = false;
            kiln__opcode from = copy->nodes[nd->in[k]].code;
            atomic_fetch_or(&feeds[from][nd->code / 8], (uint8_t)(1u << nd->code % 8));
        }
        n_leaves += leaf[j];
    }
    for (int j = 0; j < copy->n_nodes; j++) {
        uint8_t role = KILN__HOLD_MEMBER;
        if (leaf[j]) role |= KILN__HOLD_START | (n_leaves > 1 ? KILN__HOLD_CO_START : 0);
        if (leaf[j]) atomic_fetch_or(&start_arity[copy->nodes[j].code], (uint8_t)(1u << copy->nodes[j].n_in));
        atomic_fetch_or(&kiln__hold_codes[copy->nodes[j].code], role);
    }
    atomic_store(&subst.n, n + 1);
    pthread_mutex_unlock(&subst.lock);
    update_live();
    return true;
}

/* ---- the hold -------------------------------------------------------------------------------- */

#define HOLD_MAX_OPS 24
#define HOLD_MAX_STORAGES 32

typedef struct kiln__subst_hold {
    int n_ops, n_st, n_dead;
    kiln__storage *st[HOLD_MAX_STORAGES];   /* every storage a held op touches (marked) */
    kiln__storage *dead[HOLD_MAX_STORAGES]; /* of those, released while held */
    kiln__op ops[HOLD_MAX_OPS];
} kiln__subst_hold;

static int find(kiln__storage *const *list, int n, const kiln__storage *s) {
    for (int i = 0; i < n; i++)
        if (list[i] == s) return i;
    return -1;
}

/* What the hold's matches are: taken[i], the node held op i was matched as (-1: none);
 * is_root[i], whether rep[i] replaces the match rooted there. Returns how many ops are taken. */
typedef struct {
    int8_t taken[HOLD_MAX_OPS];
    bool is_root[HOLD_MAX_OPS];
    kiln__op rep[HOLD_MAX_OPS]; /* (~1 KiB each: thread-local, not on the stack) */
    int refused_consumer, refused_shape; /* counted when the hold lets go (not for a look ahead) */
} matches;

static _Thread_local matches found;
static int match_all(const kiln__subst_hold *h, matches *m);
static void let_go(kiln__window *w, bool owner, const matches *m);
static bool continues(const kiln__subst_hold *h, const kiln__op *op);

static bool hold_uses(const kiln__window *w, const kiln__storage *s) {
    return w->hold && find(w->hold->st, w->hold->n_st, s) >= 0;
}

/* op's storages fit the hold's list (they are not marked by another window: kiln__fusion_submit
 * flushed those first) */
static bool storages_fit(const kiln__subst_hold *h, const kiln__op *op) {
    int extra = 0;
    for (int i = 0; i < op->n_in + op->n_out; i++) {
        kiln__storage *s = i < op->n_in ? op->in[i].storage : op->out[i - op->n_in].storage;
        if (!s) continue;
        if (!kiln__var_of(s)) return false; /* (a storage with a var reaches the release hook) */
        if (find(h->st, h->n_st, s) < 0) extra++;
    }
    return h->n_st + extra <= HOLD_MAX_STORAGES;
}

/* Only ops a pattern can hold: one output, on the CPU, no special handling of failures. */
static bool holdable(const kiln__op *op) {
    return op->n_out == 1 && op->flags == 0 && op->out[0].storage && op->out[0].storage->device == KILN_CPU;
}

static bool hold_op(kiln__window *w, const kiln__op *op, bool *let_go_of) {
    uint8_t codes = atomic_load_explicit(&kiln__hold_codes[op->code], memory_order_relaxed);
    kiln__subst_hold *h = w->hold;
    bool holding = h && h->n_ops > 0;
    /* An op that does not continue what is held lets go of it too: what is held keeps its
     * memory and its work from the engine until then, and an instance that a later op would
     * complete must have been written with other ops in the middle of it. (A pattern with one
     * input-only node has every other node after it, so an op that starts a new instance
     * cannot join one held already; one with several such nodes can: CO_START.) Tracked
     * attention's backward held the products of one chunk of rows while the next chunk's were
     * made: 20.5 MiB instead of 12.5 (tests/test_grad_checkpoint.c). */
    if (holding && (!(codes & KILN__HOLD_MEMBER) || !holdable(op) || h->n_ops == HOLD_MAX_OPS ||
                    (!(codes & KILN__HOLD_CO_START) && !continues(h, op)) || !storages_fit(h, op)))
        hold_resolve(w, true), holding = false, *let_go_of = true;
    /* an op that may start another instance while everything held is a complete match (a
     * layer norm after a layer norm): replaced now, so the hold never fills with them */
    if (holding && (codes & KILN__HOLD_START) && match_all(h, &found) == h->n_ops) {
        let_go(w, true, &found);
        holding = false, *let_go_of = true;
    }
    if (!holding && (!(codes & KILN__HOLD_START) || !holdable(op) ||
                     !(atomic_load_explicit(&start_arity[op->code], memory_order_relaxed) >> op->n_in & 1)))
        return false;
    if (!h && !(h = w->hold = calloc(1, sizeof *h))) return false;
    if (!storages_fit(h, op)) return false;
    kiln__op_copy(&h->ops[h->n_ops++], op);
    atomic_store_explicit(&w->n_hold, h->n_ops, memory_order_relaxed);
    for (int i = 0; i < op->n_in + op->n_out; i++) {
        kiln__storage *s = i < op->n_in ? op->in[i].storage : op->out[i - op->n_in].storage;
        if (!s || find(h->st, h->n_st, s) >= 0) continue;
        h->st[h->n_st++] = s;
        atomic_store((kiln__window *_Atomic *)&s->window, w);
    }
    kiln__window_count_held(w);
    return true;
}

static bool hold_defer_free(kiln__window *w, kiln__storage *s, bool owner) {
    kiln__subst_hold *h = w->hold;
    if (!h || h->n_ops == 0 || find(h->st, h->n_st, s) < 0) return false;
    if (h->n_dead == HOLD_MAX_STORAGES) { /* (cannot happen: dead ⊆ st) */
        hold_resolve(w, owner);
        return false;
    }
    /* Its memory stays until the hold lets go (the ops that now end a hold keep that short).
     * Giving it back at once, for the held op writing it first to take again, made two threads
     * take memory for one storage: the op writing it first, let go and run on a worker, and
     * the frontend flushing a later group that writes it too (fusion.c then took memory for
     * what a group stores at its flush). Each wrote its own block, and the group's readers saw
     * the other's: wrong values and NaN gradients in test_layer_norm_fn's layer norms over two
     * dims (4 of 100 runs with KILN_INLINE_MAX_BYTES=100000, which only changes who runs
     * when; 0 of 100 with that allocation made atomic). Memory for a storage must be taken by
     * the thread that runs an op writing it (engine.c), never at dispatch. */
    h->dead[h->n_dead++] = s;
    kiln__window_count_held(w);
    return true;
}

static void hold_forget(kiln__window *w) {
    kiln__subst_hold *h = w->hold;
    if (!h) return;
    for (int i = 0; i < h->n_st; i++) atomic_store((kiln__window *_Atomic *)&h->st[i]->window, NULL);
    h->n_ops = h->n_st = h->n_dead = 0;
    atomic_store_explicit(&w->n_hold, 0, memory_order_relaxed);
}

/* ---- the matcher ----------------------------------------------------------------------------- */

typedef struct {
    int8_t node_op[KILN__PAT_MAX_NODES]; /* the held op each node matched, or -1 */
    int8_t op_node[HOLD_MAX_OPS];        /* the node each held op matched in this match, or -1 */
    const int8_t *taken;                  /* ops an earlier (later-rooted) match replaced */
    uint32_t bound;                       /* slots bound so far */
    uint32_t slot_writers;                /* held ops that wrote a tensor slot's memory before it was read */
    kiln__subst_match m;
} match_state;

static bool same_view(const kiln__view *a, const kiln__view *b) {
    if (a->storage != b->storage || a->dtype != b->dtype || a->ndim != b->ndim || a->offset != b->offset) return false;
    for (int d = 0; d < a->ndim; d++)
        if (a->shape[d] != b->shape[d] || (a->shape[d] != 1 && a->strides[d] != b->strides[d])) return false;
    return true;
}

/* v reads all of what w (an op's output) holds, each element where the consumer expects it:
 * w itself, or w broadcast along its size-1 dims (a keepdim reduction read by a binary op). */
static bool reads_result(const kiln__view *v, const kiln__view *w) {
    if (v->storage != w->storage || v->dtype != w->dtype || v->offset != w->offset || v->ndim < w->ndim) return false;
    int lead = v->ndim - w->ndim;
    for (int d = 0; d < v->ndim; d++) {
        if (d < lead) {
            if (v->shape[d] != 1 && v->strides[d] != 0) return false;
            continue;
        }
        int64_t ws = w->shape[d - lead], wt = w->strides[d - lead];
        bool same = v->shape[d] == ws && (ws == 1 || v->strides[d] == wt);
        bool bcast = ws == 1 && (v->strides[d] == 0 || v->shape[d] == 1);
        if (!same && !bcast) return false;
    }
    return true;
}

/* The last held op before `before` that writes s, or -1. */
static int writer_before(const kiln__subst_hold *h, const kiln__storage *s, int before) {
    for (int i = before - 1; i >= 0; i--)
        if (h->ops[i].out[0].storage == s) return i;
    return -1;
}

/* Whether op reads, whole, the result of a held op that some pattern has a node of op's kind
 * read: without that, no instance that holds one of the held ops can hold op as well. */
static bool continues(const kiln__subst_hold *h, const kiln__op *op) {
    for (int k = 0; k < op->n_in; k++) {
        const kiln__view *v = &op->in[k];
        int w = v->storage ? writer_before(h, v->storage, h->n_ops) : -1;
        if (w < 0) continue;
        uint8_t consumers = atomic_load_explicit(&feeds[h->ops[w].code][op->code / 8], memory_order_relaxed);
        if ((consumers >> op->code % 8 & 1) && reads_result(v, &h->ops[w].out[0])) return true;
    }
    return false;
}

static bool last_dim_only(const kiln__op *op) {
    int nd = op->in[0].ndim;
    if (nd < 1) return false;
    if (is_row_kernel(op->code)) return op->p.i[0] == nd - 1;
    /* a reduction's dims are those where its output (in's ndim) has size 1 and in has not */
    const kiln__view *out = &op->out[0];
    if (out->ndim != nd || out->shape[nd - 1] != 1) return false;
    for (int d = 0; d + 1 < nd; d++)
        if (out->shape[d] != op->in[0].shape[d]) return false;
    return true;
}

static bool match_node(const kiln__pattern *p, const kiln__subst_hold *h, match_state *s, int j, int i);

static bool bind(const kiln__pattern *p, const kiln__subst_hold *h, match_state *s, int ref, const kiln__view *v, int i) {
    if (ref < 0) {
        int k = -1 - ref;
        bool scalar = p->scalar_slots >> k & 1;
        if (scalar != (v->storage == NULL)) return false;
        if (!scalar) {
            int w = writer_before(h, v->storage, i);
            if (w >= 0) s->slot_writers |= 1u << w;
        }
        if (s->bound >> k & 1)
            return scalar ? s->m.slot[k].scalar == v->scalar && s->m.slot[k].dtype == v->dtype : same_view(&s->m.slot[k], v);
        s->m.slot[k] = *v;
        s->bound |= 1u << k;
        return true;
    }
    if (!v->storage) return false;
    int w = writer_before(h, v->storage, i);
    return w >= 0 && reads_result(v, &h->ops[w].out[0]) && match_node(p, h, s, ref, w);
}

static bool match_inputs(const kiln__pattern *p, const kiln__subst_hold *h, match_state *s, const kiln__pat_node *nd,
                         const kiln__op *op, int i, bool swap) {
    if (nd->flags & KILN__PAT_CONST) {
        const kiln__view *c = &op->in[swap ? 0 : 1];
        if (c->storage || c->scalar != nd->constant) return false;
        return bind(p, h, s, nd->in[0], &op->in[swap ? 1 : 0], i);
    }
    for (int k = 0; k < nd->n_in; k++)
        if (!bind(p, h, s, nd->in[k], &op->in[swap ? nd->n_in - 1 - k : k], i)) return false;
    return true;
}

static bool match_node(const kiln__pattern *p, const kiln__subst_hold *h, match_state *s, int j, int i) {
    if (s->node_op[j] >= 0) return s->node_op[j] == i;
    if (s->op_node[i] >= 0 || s->taken[i] >= 0) return false; /* one op is one node */
    const kiln__pat_node *nd = &p->nodes[j];
    const kiln__op *op = &h->ops[i];
    if (op->code != nd->code || op->n_in != nd->n_in) return false;
    if ((nd->flags & KILN__PAT_LAST_DIM) && !last_dim_only(op)) return false;
    s->node_op[j] = (int8_t)i;
    s->op_node[i] = (int8_t)j;
    match_state before = *s;
    if (match_inputs(p, h, s, nd, op, i, false)) return true;
    bool commutes = (op->code == KILN__OP_ADD || op->code == KILN__OP_MUL) && nd->n_in == 2;
    if (commutes) {
        *s = before;
        if (match_inputs(p, h, s, nd, op, i, true)) return true;
    }
    *s = before;
    s->node_op[j] = -1;
    s->op_node[i] = -1;
    return false;
}

/* The checks beyond the shape of the graph, for a match rooted at held op r. Refused (false,
 * *consumer true) when an intermediate is still read: a handle remains (not dead) or a held op
 * outside the match reads it. Refused (false) also when an op outside the match, between the
 * match's first op and r, writes what the match reads (the replacement runs at r's place), or
 * when the result would overwrite an input the replacement cannot work in place on. */
static bool match_valid(const kiln__pattern *p, const kiln__subst_hold *h, const match_state *s, int r, bool *consumer) {
    *consumer = false;
    kiln__storage *out = h->ops[r].out[0].storage;
    /* a slot read from memory a matched op wrote would be that op's value, not the input's */
    for (int i = 0; i < h->n_ops; i++)
        if ((s->slot_writers >> i & 1) && s->op_node[i] >= 0) return false;
    int first = r;
    for (int i = 0; i < h->n_ops; i++)
        if (s->op_node[i] >= 0 && i < first) first = i;
    for (int i = 0; i < h->n_ops; i++) {
        if (s->op_node[i] < 0 || i == r) continue;
        kiln__storage *mid = h->ops[i].out[0].storage;
        if (mid != out && find(h->dead, h->n_dead, mid) < 0) return *consumer = true, false;
        for (int q = 0; q < h->n_ops; q++) {
            if (s->op_node[q] >= 0) continue;
            const kiln__op *o = &h->ops[q];
            for (int k = 0; k < o->n_in + o->n_out; k++) {
                const kiln__view *v = k < o->n_in ? &o->in[k] : &o->out[k - o->n_in];
                /* (an op before i sees the storage's earlier value; after r, the result's) */
                if (v->storage == mid && q > i && (q < r || mid != out)) return *consumer = true, false;
            }
        }
    }
    for (int k = 0; k < p->n_slots; k++) {
        const kiln__view *v = &s->m.slot[k];
        if (!v->storage) continue;
        for (int q = first + 1; q < r; q++)
            if (s->op_node[q] < 0 && h->ops[q].out[0].storage == v->storage) return false;
        if (v->storage == out && !((p->in_place_slots >> k & 1) && same_view(v, &h->ops[r].out[0]))) return false;
    }
    return true;
}

/* Finds a match of p rooted at held op r not overlapping `taken`, and builds its replacement. */
static bool try_pattern(const kiln__pattern *p, const kiln__subst_hold *h, int r, const int8_t *taken, match_state *s,
                        kiln__op *rep, int *refused_consumer, int *refused_shape) {
    memset(s->node_op, -1, sizeof s->node_op);
    memset(s->op_node, -1, sizeof s->op_node);
    s->taken = taken;
    s->bound = s->slot_writers = 0;
    if (!match_node(p, h, s, p->n_nodes - 1, r)) return false;
    if ((s->bound & ((1u << p->n_slots) - 1)) != (1u << p->n_slots) - 1) return false;
    bool consumer;
    if (!match_valid(p, h, s, r, &consumer)) {
        ++*(consumer ? refused_consumer : refused_shape);
        return false;
    }
    s->m.root = &h->ops[r];
    memset(rep, 0, sizeof *rep);
    if (!p->build(&s->m, rep, p->ctx)) {
        ++*refused_shape;
        return false;
    }
    const kiln__op *root = &h->ops[r];
    rep->n_out = 1;
    rep->out[0] = root->out[0];
    rep->file = root->file;
    rep->line = root->line;
    rep->stream_id = root->stream_id;
    rep->seq = root->seq;
    rep->t_dispatch_ns = root->t_dispatch_ns;
    return true;
}

/* Gives back now the memory of a replaced intermediate: nothing will write or read it. */
static void drop_replaced(kiln__storage *d) {
    if (d->borrowed || !d->data) return;
    kiln__var *v = atomic_load_explicit((kiln__var *_Atomic *)&d->var, memory_order_acquire);
    if (!v || kiln__var_idle(v)) kiln__storage_drop_data(d);
}

static bool read_by_replacement(const kiln__op *rep, const bool *is_root, int n, const kiln__storage *s) {
    for (int i = 0; i < n; i++)
        for (int k = 0; is_root[i] && k < rep[i].n_in; k++)
            if (rep[i].in[k].storage == s || rep[i].out[0].storage == s) return true;
    return false;
}

static int match_all(const kiln__subst_hold *h, matches *m) {
    int n = h->n_ops, n_taken = 0;
    memset(m->taken, -1, sizeof m->taken);
    memset(m->is_root, 0, sizeof m->is_root);
    m->refused_consumer = m->refused_shape = 0;
    if (!atomic_load_explicit(&kiln__hold_live, memory_order_relaxed)) return 0;
    int n_patterns = atomic_load(&subst.n);
    match_state s;
    for (int r = n - 1; r >= 0; r--) {
        if (m->taken[r] >= 0) continue;
        for (int k = 0; k < n_patterns; k++) {
            const kiln__pattern *p = subst.patterns[k];
            /* (a match rooted at r is n_nodes ops up to r: a product held alone matches none) */
            if (p->n_nodes > r + 1 || p->nodes[p->n_nodes - 1].code != h->ops[r].code) continue;
            if (!try_pattern(p, h, r, m->taken, &s, &m->rep[r], &m->refused_consumer, &m->refused_shape)) continue;
            for (int i = 0; i < n; i++)
                if (s.op_node[i] >= 0) m->taken[i] = s.op_node[i], n_taken++;
            m->is_root[r] = true;
            break;
        }
    }
    return n_taken;
}

/* Gives every held op back to the window in order, a match's replacement at its root's place. */
static void let_go(kiln__window *w, bool owner, const matches *m) {
    kiln__subst_hold *h = w->hold;
    int n = h->n_ops;
    const int8_t *taken = m->taken;
    const bool *is_root = m->is_root;
    const kiln__op *rep = m->rep;
    int n_roots = 0;
    for (int i = 0; i < n; i++) n_roots += is_root[i];
    /* (shared counters: touched only when they change, most let-goes replace nothing) */
    if (n_roots) atomic_fetch_add(&subst.substituted, n_roots);
    if (m->refused_consumer) atomic_fetch_add(&subst.refused_consumer, m->refused_consumer);
    if (m->refused_shape) atomic_fetch_add(&subst.refused_shape, m->refused_shape);
    h->n_ops = 0; /* (admitting may flush the group, never the hold) */
    atomic_store_explicit(&w->n_hold, 0, memory_order_relaxed);
    for (int i = 0; i < n; i++) {
        if (is_root[i]) kiln__window_admit(w, &rep[i], owner);
        else if (taken[i] < 0) kiln__window_admit(w, &h->ops[i], owner);
    }
    for (int i = 0; i < n; i++) {
        kiln__storage *mid = h->ops[i].out[0].storage;
        if (taken[i] >= 0 && !is_root[i] && find(h->dead, h->n_dead, mid) >= 0 && !kiln__window_holds(w, mid) &&
            !read_by_replacement(rep, is_root, n, mid))
            drop_replaced(mid);
    }
    for (int i = 0; i < h->n_st; i++)
        if (!kiln__window_holds(w, h->st[i])) atomic_store((kiln__window *_Atomic *)&h->st[i]->window, NULL);
    /* storages released while held are freed after the ops that used them, which are now in
     * the group or queued (last: a free may run at once) */
    for (int i = 0; i < h->n_dead; i++) kiln__window_add_dead(w, h->dead[i], owner);
    h->n_st = h->n_dead = 0;
    kiln__window_recount_held(w);
}

static void hold_resolve(kiln__window *w, bool owner) {
    if (!w->hold || w->hold->n_ops == 0) return;
    match_all(w->hold, &found);
    let_go(w, owner, &found);
}
