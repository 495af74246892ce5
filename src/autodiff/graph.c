/* Leaves, metas and backward nodes: recording, and freeing graphs that are dropped. What a node
 * saves for its rule is recompute.c's (kiln__ad_save: the tensor, or its producer to replay),
 * which sits above this file. */
#include <stdlib.h>
#include <string.h>

#include "autodiff/autodiff-impl.h"
#include "kiln/autodiff.h"

static _Thread_local int no_grad_depth;

void kiln_no_grad_begin(void) { no_grad_depth++; }
void kiln_no_grad_end(void) {
    if (no_grad_depth > 0)
        no_grad_depth--;
    else
        kiln__report(KILN_ERR_INVALID_ARGUMENT, "kiln_no_grad_end", "no matching kiln_no_grad_begin");
}
bool kiln_grad_enabled(void) { return no_grad_depth == 0; }
bool kiln__grad_mode(void) { return no_grad_depth == 0; }

int kiln__ad_no_grad_swap(int depth) {
    int prev = no_grad_depth;
    no_grad_depth = depth;
    return prev;
}

static _Thread_local kiln__ad_capture *capture;

kiln__ad_capture *kiln__ad_capture_swap(kiln__ad_capture *cap) {
    kiln__ad_capture *prev = capture;
    capture = cap;
    return prev;
}

static void hooks_free(kiln__ad_hook *h) {
    while (h) {
        kiln__ad_hook *next = h->next;
        free(h);
        h = next;
    }
}

static void leaf_unref(kiln__ad_leaf *l) {
    if (l && atomic_fetch_sub_explicit(&l->refs, 1, memory_order_acq_rel) == 1) {
        hooks_free(l->hooks);
        free(l);
    }
}

/* Frees nodes iteratively: a long chain must not recurse once per node. */
static void node_free_chain(kiln__ad_node *first) {
    kiln__ad_node *stack_small[64];
    kiln__ad_node **stack = stack_small;
    int top = 0, cap = 64;
    stack[top++] = first;
    while (top > 0) {
        kiln__ad_node *n = stack[--top];
        for (int i = 0; i < KILN__AD_MAX_SAVED; i++) kiln__tensor_release(n->saved[i]);
        kiln__tensor_release(n->grad);
        if (n->ext_free) n->ext_free(n->ext);
        hooks_free(n->hooks);
        for (int i = 0; i < KILN__AD_MAX_SAVED; i++) /* a producer of the graph: freed by this loop's stack too */
            if (n->lazy[i] && atomic_fetch_sub_explicit(&n->lazy[i]->refs, 1, memory_order_acq_rel) == 1)
                node_free_chain(n->lazy[i]);
        for (int i = 0; i < n->n_slots; i++) {
            leaf_unref(n->slots[i].leaf);
            kiln__ad_node *p = n->slots[i].node;
            if (p && atomic_fetch_sub_explicit(&p->refs, 1, memory_order_acq_rel) == 1) {
                if (top == cap) {
                    kiln__ad_node **grown = malloc(sizeof *grown * (size_t)cap * 2);
                    if (!grown) { /* cannot grow: free this one recursively instead */
                        node_free_chain(p);
                        continue;
                    }
                    memcpy(grown, stack, sizeof *grown * (size_t)top);
                    if (stack != stack_small) free(stack);
                    stack = grown;
                    cap *= 2;
                }
                stack[top++] = p;
            }
        }
        free(n);
    }
    if (stack != stack_small) free(stack);
}

void kiln__ad_capture_clear(kiln__ad_capture *cap) {
    if (!cap) return;
    for (int i = 0; i < cap->n; i++) {
        leaf_unref(cap->v[i].leaf);
        kiln__ad_node_unref(cap->v[i].node);
    }
    free(cap->v);
    *cap = (kiln__ad_capture){0};
}

/* t's leaf or producer into the capture, once each. */
static void capture_add(kiln__ad_capture *cap, const kiln__tensor *t) {
    const kiln__ad_meta *m = t->autodiff;
    if (!m || cap->lost) return;
    for (int i = 0; i < cap->n; i++)
        if ((m->leaf && cap->v[i].leaf == m->leaf) || (!m->leaf && cap->v[i].node == m->node)) return;
    if (cap->n == cap->cap) {
        int grown_cap = cap->cap ? cap->cap * 2 : 16;
        kiln__ad_slot *grown = kiln__alloc_should_fail() ? NULL : realloc(cap->v, sizeof *grown * (size_t)grown_cap);
        if (!grown) {
            cap->lost = true;
            return;
        }
        cap->v = grown;
        cap->cap = grown_cap;
    }
    kiln__ad_slot *s = &cap->v[cap->n++];
    *s = (kiln__ad_slot){.dtype = t->dtype, .ndim = t->ndim};
    memcpy(s->shape, t->shape, sizeof s->shape);
    if (m->leaf) {
        s->leaf = m->leaf;
        atomic_fetch_add_explicit(&m->leaf->refs, 1, memory_order_relaxed);
    } else {
        s->node = m->node;
        atomic_fetch_add_explicit(&m->node->refs, 1, memory_order_relaxed);
    }
}

void kiln__ad_node_unref(kiln__ad_node *n) {
    if (n && atomic_fetch_sub_explicit(&n->refs, 1, memory_order_acq_rel) == 1) node_free_chain(n);
}

static void meta_free(void *p) {
    kiln__ad_meta *m = p;
    leaf_unref(m->leaf);
    kiln__ad_node_unref(m->node);
    free(m);
}

static kiln__ad_meta *meta_new(void) {
    atomic_store_explicit(&kiln__autodiff_free_hook, meta_free, memory_order_relaxed);
    return calloc(1, sizeof(kiln__ad_meta));
}

bool kiln__ad_active(int n, kiln__tensor *const *inputs) {
    if (no_grad_depth) {
        if (KILN__UNLIKELY(capture != NULL))
            for (int i = 0; i < n; i++)
                if (inputs[i] && !inputs[i]->err) capture_add(capture, inputs[i]);
        return false;
    }
    bool any = false;
    for (int i = 0; i < n; i++) {
        if (!inputs[i] || inputs[i]->err) return false; /* the untracked path reports the error */
        any |= inputs[i]->autodiff != NULL;
    }
    return any;
}

kiln__ad_node *kiln__ad_node_new(kiln__opctx *c, const kiln__ad_rule *rule, int n, kiln__tensor *const *inputs) {
    kiln__ad_node *node = kiln__alloc_should_fail() ? NULL : calloc(1, sizeof *node + sizeof(kiln__ad_slot) * (size_t)n);
    if (!node) {
        kiln__fail(c, KILN_ERR_OUT_OF_MEMORY, "cannot record a backward node");
        return NULL;
    }
    atomic_init(&node->refs, 1);
    node->rule = rule;
    node->site = kiln__call_site();
    node->n_slots = n;
    for (int i = 0; i < n; i++) {
        const kiln__tensor *t = inputs[i];
        kiln__ad_slot *s = &node->slots[i];
        if (!t) continue;
        s->dtype = t->dtype;
        s->ndim = t->ndim;
        memcpy(s->shape, t->shape, sizeof s->shape);
        const kiln__ad_meta *m = t->autodiff;
        if (!m) continue;
        if (m->leaf) {
            s->leaf = m->leaf;
            atomic_fetch_add_explicit(&m->leaf->refs, 1, memory_order_relaxed);
        } else if (m->node) {
            s->node = m->node;
            atomic_fetch_add_explicit(&m->node->refs, 1, memory_order_relaxed);
        }
    }
    return node;
}

kiln__tensor *kiln__ad_saved(kiln__ad_node *n, int i) {
    kiln__tensor *t = n->saved[i];
    if (t) kiln__tensor_retain(t);
    return t;
}

kiln__tensor *kiln__ad_attach(kiln__opctx *c, kiln__ad_node *n, kiln__tensor *out) {
    if (!n) return out; /* recording failed: c->err is set, the result is poisoned anyway */
    if (!out || c->err || !kiln__dtype_is_float(out->dtype)) { /* masks and indices carry no gradient */
        kiln__ad_node_unref(n);
        return out;
    }
    kiln__ad_meta *m = meta_new();
    if (!m) {
        kiln__ad_node_unref(n);
        kiln__tensor_release(out);
        return kiln__fail(c, KILN_ERR_OUT_OF_MEMORY, "cannot record a backward node");
    }
    n->out_dtype = out->dtype;
    n->out_ndim = out->ndim;
    memcpy(n->out_shape, out->shape, sizeof n->out_shape);
    m->node = n;
    if (out->autodiff) { /* an op may return its input unchanged (e.g. a no-op cast) */
        kiln__tensor *fresh = kiln__tensor_view(out, out->ndim, out->shape, out->strides, out->offset);
        kiln__tensor_release(out);
        out = fresh;
        if (!out) {
            meta_free(m);
            return kiln__fail(c, KILN_ERR_OUT_OF_MEMORY, "cannot allocate a tensor");
        }
    }
    out->autodiff = m;
    return out;
}

/* Makes t (float, untracked) a leaf; false on out of memory. */
static bool attach_leaf(kiln__tensor *t) {
    kiln__ad_meta *m = meta_new();
    kiln__ad_leaf *leaf = calloc(1, sizeof *leaf);
    if (!m || !leaf) {
        free(m);
        free(leaf);
        return false;
    }
    atomic_init(&leaf->refs, 1);
    m->leaf = leaf;
    t->autodiff = m;
    return true;
}

kiln__ad_leaf *kiln__ad_make_leaf(kiln__tensor *t) {
    return attach_leaf(t) ? ((kiln__ad_meta *)t->autodiff)->leaf : NULL;
}

/* ---- public ------------------------------------------------------------------------------ */

kiln_status kiln_require_grad(kiln_tensor h) {
    kiln__error *err = NULL;
    kiln__tensor *t = kiln__handle_peek(h, "kiln_require_grad", &err);
    if (!t) {
        kiln_status st = kiln__error_report(err);
        kiln__error_unref(err);
        return st;
    }
    if (t->err) return kiln__error_report(t->err);
    if (!kiln__dtype_is_float(t->dtype))
        return kiln__report(KILN_ERR_DTYPE, "kiln_require_grad", "only float tensors can require a gradient, got %s",
                            kiln_dtype_name(t->dtype));
    kiln__ad_meta *m = t->autodiff;
    if (m && m->leaf) return KILN_OK;
    if (m && m->node)
        return kiln__report(KILN_ERR_INVALID_ARGUMENT, "kiln_require_grad",
                            "tensor is computed by tracked ops; kiln_detach it first to make a leaf");
    if (!attach_leaf(t)) return kiln__report(KILN_ERR_OUT_OF_MEMORY, "kiln_require_grad", "cannot allocate a leaf record");
    return KILN_OK;
}

kiln_tensor kiln_leaf(kiln_tensor h) {
    KILN__OP_BEGIN("kiln_leaf");
    kiln__tensor *t = kiln__arg(&c, h);
    if (!kiln__ok(&c, t)) return kiln__drop(1, t), kiln__result(&c, NULL);
    if (!kiln__dtype_is_float(t->dtype))
        kiln__fail(&c, KILN_ERR_DTYPE, "only float tensors can require a gradient, got %s", kiln_dtype_name(t->dtype));
    else if (t->autodiff && ((const kiln__ad_meta *)t->autodiff)->node)
        kiln__fail(&c, KILN_ERR_INVALID_ARGUMENT, "tensor is computed by tracked ops; kiln_detach it first to make a leaf");
    else if (!t->autodiff && !attach_leaf(t))
        kiln__fail(&c, KILN_ERR_OUT_OF_MEMORY, "cannot allocate a leaf record");
    if (c.err) return kiln__drop(1, t), kiln__result(&c, NULL);
    return kiln__result(&c, t);
}

bool kiln_requires_grad(kiln_tensor h) {
    kiln__tensor *t = kiln__handle_peek(h, "kiln_requires_grad", NULL);
    return t && t->autodiff;
}

kiln_tensor kiln_detach(kiln_tensor h) {
    KILN__OP_BEGIN("kiln_detach");
    kiln__tensor *t = kiln__arg(&c, h);
    if (!kiln__ok(&c, t)) return kiln__drop(1, t), kiln__result(&c, NULL);
    if (!t->autodiff) return kiln__result(&c, t);
    kiln__tensor *v = kiln__tensor_view(t, t->ndim, t->shape, t->strides, t->offset);
    kiln__tensor_release(t);
    if (!v) return kiln__result(&c, kiln__fail(&c, KILN_ERR_OUT_OF_MEMORY, "cannot allocate a view"));
    return kiln__result(&c, v);
}

kiln_status kiln_tensor_register_hook(kiln_tensor h, kiln_grad_hook_fn fn, void *ctx) {
    kiln__error *err = NULL;
    kiln__tensor *t = kiln__handle_peek(h, "kiln_tensor_register_hook", &err);
    if (!t) {
        kiln_status st = kiln__error_report(err);
        kiln__error_unref(err);
        return st;
    }
    if (t->err) return kiln__error_report(t->err);
    if (!fn) return kiln__report(KILN_ERR_NULL, "kiln_tensor_register_hook", "hook is NULL");
    kiln__ad_meta *m = t->autodiff;
    if (!m) return kiln__report(KILN_ERR_NO_GRAPH, "kiln_tensor_register_hook", "tensor has no gradient (kiln_require_grad)");
    kiln__ad_hook **at = m->leaf ? &m->leaf->hooks : &m->node->hooks;
    if (!m->leaf && m->node->consumed)
        return kiln__report(KILN_ERR_NO_GRAPH, "kiln_tensor_register_hook", "this graph was already consumed by a backward pass");
    kiln__ad_hook *hk = kiln__alloc_should_fail() ? NULL : calloc(1, sizeof *hk);
    if (!hk) return kiln__report(KILN_ERR_OUT_OF_MEMORY, "kiln_tensor_register_hook", "cannot allocate a hook");
    *hk = (kiln__ad_hook){fn, ctx, kiln__call_site(), NULL};
    while (*at) at = &(*at)->next;
    *at = hk;
    return KILN_OK;
}

kiln__tensor *kiln__ad_run_hooks(kiln__opctx *c, const kiln__ad_hook *h, kiln__tensor *g) {
    for (; h && g && !c->err; h = h->next) {
        int ndim = g->ndim;
        int64_t shape[KILN_MAX_DIMS];
        memcpy(shape, g->shape, sizeof shape);
        kiln__site site = kiln__call_site();
        kiln_tensor r = h->fn(h->ctx, kiln__handle_new(g));
        kiln__site_now = site;
        kiln__error *err = NULL;
        g = kiln__handle_take(r, "kiln_tensor_register_hook", &err);
        if (!g && err && err->status == KILN_ERR_OUT_OF_MEMORY && !c->err) c->err = kiln__error_ref(err);
        kiln__error_unref(err);
        const char *bad = !g ? "returned no live tensor" : g->err ? NULL
                        : (g->ndim != ndim || memcmp(g->shape, shape, sizeof(int64_t) * (size_t)ndim) != 0)
                            ? "returned a gradient of another shape" : NULL;
        if (g && g->err) kiln__ok(c, g); /* the hook's failing op, with its line */
        else if (bad && !c->err)
            c->err = kiln__error_new(KILN_ERR_INVALID_ARGUMENT, "kiln_tensor_register_hook", h->site.file, h->site.line,
                                     0, "the gradient hook %s", bad);
    }
    if (c->err) {
        kiln__tensor_release(g);
        return NULL;
    }
    return g;
}

/* The policy: this thread's choice, else KILN_CHECKPOINT from the environment ("auto"). */
static _Thread_local int policy = -1;

kiln_checkpoint_policy kiln_checkpoint_policy_get(void) {
    if (KILN__LIKELY(policy >= 0)) return (kiln_checkpoint_policy)policy;
    const char *v = getenv("KILN_CHECKPOINT");
    policy = v && strcmp(v, "auto") == 0 ? KILN_CHECKPOINT_AUTO : KILN_CHECKPOINT_NONE;
    return (kiln_checkpoint_policy)policy;
}

kiln_checkpoint_policy kiln_checkpoint_policy_set(kiln_checkpoint_policy p) {
    kiln_checkpoint_policy prev = kiln_checkpoint_policy_get();
    if (p == KILN_CHECKPOINT_NONE || p == KILN_CHECKPOINT_AUTO) policy = (int)p;
    else kiln__report(KILN_ERR_INVALID_ARGUMENT, "kiln_checkpoint_policy_set", "unknown policy %d", (int)p);
    return prev;
}
