/* The automatic policy's recomputation (KILN_CHECKPOINT=auto): which saved tensors are dropped
 * and how backward makes them again.
 *
 * When a node saves a tensor t made by one of its inputs' producers p, the policy asks whether
 * p's output can be replayed from what the graph keeps anyway: each op of the chain reads what
 * its own node saved (its rule needs that in any case) or the output of its producer, replayed in
 * turn; a chain that reaches a leaf, an untracked tensor or an op whose outputs are always kept
 * (matrix products, convolutions, attention: their rules have no recompute) cannot be replayed.
 * The cost is counted in element operations from the op records (an elementwise op per output
 * element, a reduction per input element, a view nothing) and compared with the bytes dropped:
 * at most RECOMPUTE_OPS_PER_ELEMENT per dropped element, through at most RECOMPUTE_MAX_NODES ops.
 * So layer norm's affine output is made again from its x̂ and a composed normalisation (mean,
 * x - mean, variance, x̂) from the GELU input before it, while a sum over 4096 values is kept.
 *
 * Dropping never keeps more: the chain reads only what its nodes save for their own rules, and
 * those nodes are ancestors of the consumer, so the walk reaches them after it and their saved
 * tensors are still there. The replay runs where the consumer's rule runs, so fusion takes it
 * with the derivative around it; its errors name the forward call that recorded the op.
 *
 * Every rule saves through kiln__ad_save here, which keeps the tensor or, under the policy, a
 * reference to its producer; the graph's recording (graph.c) is below and calls nothing here. */
#include <math.h>

#include "autodiff/autodiff-impl.h"

#define RECOMPUTE_OPS_PER_ELEMENT 32.0
#define RECOMPUTE_MAX_NODES 16

double kiln__ad_out_numel(const kiln__ad_node *n) {
    double e = 1;
    for (int d = 0; d < n->out_ndim; d++) e *= (double)n->out_shape[d];
    return e;
}

double kiln__ad_slot_numel(const kiln__ad_node *n, int i) {
    double e = 1;
    for (int d = 0; d < n->slots[i].ndim; d++) e *= (double)n->slots[i].shape[d];
    return e;
}

void kiln__ad_plan_saved_or_input(const kiln__ad_node *n, kiln__ad_work *w, int k, int i) {
    if (n->saved[k] || n->lazy[k]) w->saved |= 1u << k;
    else w->inputs |= 1u << i;
}

/* Element operations to replay p's output, INFINITY when it cannot be; *budget counts the nodes
 * visited (a shared input is counted once per use, as it is replayed once per use). */
static double chain_ops(const kiln__ad_node *p, int *budget) {
    kiln__ad_work w = {0};
    if (!p || p->consumed || !p->rule->plan || --*budget < 0 || !p->rule->plan(p, &w)) return INFINITY;
    double ops = w.ops;
    for (int k = 0; k < KILN__AD_MAX_SAVED && ops < INFINITY; k++) {
        if (!(w.saved >> k & 1) || p->saved[k]) continue;
        ops = p->lazy[k] ? ops + chain_ops(p->lazy[k], budget) : INFINITY;
    }
    for (int i = 0; i < p->n_slots && i < 32 && ops < INFINITY; i++)
        if (w.inputs >> i & 1) ops = p->slots[i].node ? ops + chain_ops(p->slots[i].node, budget) : INFINITY;
    return ops;
}

bool kiln__ad_recomputable(const kiln__ad_node *p) {
    int budget = RECOMPUTE_MAX_NODES;
    return chain_ops(p, &budget) < INFINITY;
}

bool kiln__ad_worth_recomputing(const kiln__ad_node *p, const kiln__tensor *t) {
    int budget = RECOMPUTE_MAX_NODES;
    double ops = chain_ops(p, &budget), elements = (double)kiln__tensor_numel(t);
    return ops <= RECOMPUTE_OPS_PER_ELEMENT * elements;
}

/* Whether to keep a reference to t's producer instead of t (the automatic policy): only for a
 * producer that is one of n's inputs, which the walk then runs after n, so what it saved is
 * still there when n's rule needs t. */
static kiln__ad_node *lazy_producer(const kiln__ad_node *n, const kiln__tensor *t) {
    const kiln__ad_meta *m = t->autodiff;
    if (!m || !m->node || kiln_checkpoint_policy_get() != KILN_CHECKPOINT_AUTO) return NULL;
    for (int k = 0; k < n->n_slots; k++)
        if (n->slots[k].node == m->node) return kiln__ad_worth_recomputing(m->node, t) ? m->node : NULL;
    return NULL;
}

void kiln__ad_save(kiln__opctx *c, kiln__ad_node *n, int i, const kiln__tensor *t) {
    if (!n || !t || t->err) return;
    kiln__ad_node *p = lazy_producer(n, t);
    if (p) {
        atomic_fetch_add_explicit(&p->refs, 1, memory_order_relaxed);
        kiln__tensor_release(n->saved[i]);
        n->saved[i] = NULL;
        kiln__ad_node_unref(n->lazy[i]);
        n->lazy[i] = p;
        return;
    }
    kiln__tensor *alias = kiln__tensor_view(t, t->ndim, t->shape, t->strides, t->offset);
    if (!alias) {
        kiln__fail(c, KILN_ERR_OUT_OF_MEMORY, "cannot save a tensor for backward");
        return;
    }
    kiln__tensor_release(n->saved[i]);
    n->saved[i] = alias;
}

kiln__tensor *kiln__ad_recompute(kiln__opctx *c, const kiln__ad_node *p) {
    if (c->err) return NULL;
    if (!p || p->consumed || !p->rule->recompute)
        return kiln__fail(c, KILN_ERR_INTERNAL, "a tensor saved for backward was dropped and cannot be recomputed");
    /* its errors, found now or when its kernel runs, name the forward call that made the tensor */
    kiln__site outer = kiln__site_now;
    const char *name = c->name;
    kiln__site_now = p->site;
    c->name = "kiln_backward (recomputing a tensor the automatic policy dropped)";
    kiln__tensor *t = p->rule->recompute(c, p);
    kiln__site_now = outer;
    c->name = name;
    return t;
}

kiln__tensor *kiln__ad_saved_now(kiln__opctx *c, const kiln__ad_node *n, int k) {
    if (n->saved[k]) return kiln__tensor_retain(n->saved[k]), n->saved[k];
    if (n->lazy[k]) return kiln__ad_recompute(c, n->lazy[k]);
    return c->err ? NULL : kiln__fail(c, KILN_ERR_INTERNAL, "a recomputation reads a tensor that was not saved");
}

kiln__tensor *kiln__ad_input_now(kiln__opctx *c, const kiln__ad_node *n, int i) {
    return kiln__ad_recompute(c, i < n->n_slots ? n->slots[i].node : NULL);
}

bool kiln__ad_unlazy(kiln__opctx *c, kiln__ad_node *n) {
    for (int i = 0; i < KILN__AD_MAX_SAVED; i++) {
        kiln__ad_node *p = n->lazy[i];
        if (!p) continue;
        if (!c->err) {
            int same = -1; /* x * x saved one tensor twice: made once */
            for (int k = 0; k < i; k++)
                if (n->saved[k] && n->lazy[k] == p) same = k;
            n->saved[i] = same >= 0 ? (kiln__tensor_retain(n->saved[same]), n->saved[same]) : kiln__ad_recompute(c, p);
        }
    }
    for (int i = 0; i < KILN__AD_MAX_SAVED; i++) {
        kiln__ad_node_unref(n->lazy[i]);
        n->lazy[i] = NULL;
    }
    return !c->err;
}
