/* Checkpointed regions (kiln_checkpoint): the region's function runs untracked in the forward
 * pass, so none of its saved tensors are kept; one backward node holds the region's inputs (by
 * reference), the seeds its random ops drew, and the tracked tensors it read from outside (a
 * module's parameters). Its backward reruns the function with recording on, backpropagates
 * through the rebuilt sub-graph up to the region's edge, and hands the gradients of the inputs
 * and of those outside tensors to the enclosing walk, which delivers them as any node's. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "autodiff/autodiff-impl.h"
#include "kiln/autodiff.h"
#include "ops/generator-impl.h"

typedef struct {
    kiln_checkpoint_fn fn;
    void *ctx;
    kiln__ad_guard *guard; /* a reference, or NULL */
    kiln__site site;       /* the kiln_checkpoint call */
    kiln__draw_log draws;
    int n_inputs;
    kiln__tensor *inputs[]; /* untracked aliases */
} region;

void kiln__ad_guard_unref(kiln__ad_guard *g) {
    if (g && atomic_fetch_sub_explicit(&g->refs, 1, memory_order_acq_rel) == 1) free(g);
}

kiln__ad_guard *kiln__ad_guard_new(const char *what) {
    kiln__ad_guard *g = calloc(1, sizeof *g);
    if (!g) return NULL;
    atomic_init(&g->refs, 1);
    snprintf(g->what, sizeof g->what, "%s", what);
    return g;
}

void kiln__ad_guard_kill(kiln__ad_guard *g) {
    if (!g) return;
    g->freed_at = kiln__call_site();
    atomic_store_explicit(&g->freed, true, memory_order_release);
    kiln__ad_guard_unref(g);
}

static void region_free(void *p) {
    region *r = p;
    if (!r) return;
    for (int i = 0; i < r->n_inputs; i++) kiln__tensor_release(r->inputs[i]);
    kiln__ad_guard_unref(r->guard);
    kiln__draw_log_clear(&r->draws);
    free(r);
}

/* An error at the region's kiln_checkpoint call (the first error of c wins). */
static void region_fail(kiln__opctx *c, const region *r, kiln_status st, const char *detail) {
    if (c->err) return;
    c->err = kiln__error_new(st, "kiln_checkpoint", r->site.file, r->site.line, 0, "%s", detail);
}

/* Runs the region's function on handles to ts (consumed), with this thread's recording state
 * set for the pass (no_grad: the depth; the capture; the draw log recording, and r's log
 * replaying when `replay`, else the replay in force, an enclosing region's), restored after. */
static kiln__tensor *run_region(kiln__opctx *c, region *r, kiln__tensor **ts, int no_grad, kiln__ad_capture *cap,
                                kiln__draw_log *record, bool replay) {
    kiln_tensor handles[KILN_CHECKPOINT_MAX_INPUTS];
    for (int i = 0; i < r->n_inputs; i++) handles[i] = kiln__handle_new(ts[i]);
    kiln__site site = kiln__call_site();
    int depth = kiln__ad_no_grad_swap(no_grad);
    kiln__ad_capture *outer_cap = kiln__ad_capture_swap(cap);
    kiln__draw_log *outer_rec = kiln__draw_log_record(record);
    if (replay) r->draws.next = 0;
    kiln__draw_log *outer_rep = replay ? kiln__draw_log_replay(&r->draws) : NULL;
    kiln_tensor out = r->fn(r->ctx, r->n_inputs, handles);
    if (replay) kiln__draw_log_replay(outer_rep);
    kiln__draw_log_record(outer_rec);
    kiln__ad_capture_swap(outer_cap);
    kiln__ad_no_grad_swap(depth);
    kiln__site_now = site;
    kiln__error *err = NULL;
    kiln__tensor *t = kiln__handle_take(out, "kiln_checkpoint", &err);
    if (!t && err && err->status == KILN_ERR_OUT_OF_MEMORY && !c->err) { /* its result's handle could not be made */
        c->err = err;
        return NULL;
    }
    if (!t) {
        kiln__error_unref(err);
        region_fail(c, r, KILN_ERR_INVALID_ARGUMENT, "the checkpointed function returned no live tensor");
        return NULL;
    }
    return t;
}

static void checkpoint_backward(kiln__opctx *c, kiln__ad_node *n, kiln__tensor *g, kiln__tensor **grads) {
    region *r = n->ext;
    if (!r) {
        kiln__tensor_release(g);
        kiln__fail(c, KILN_ERR_INTERNAL, "a checkpointed region's state is gone");
        return;
    }
    if (r->guard && atomic_load_explicit(&r->guard->freed, memory_order_acquire)) {
        kiln__tensor_release(g);
        /* where it was freed is known when the free's call site was recorded as that call */
        const kiln__site *at = &r->guard->freed_at;
        char where[320] = "";
        if (at->file && at->op && strstr(at->op, "_free")) snprintf(where, sizeof where, " (at %s:%d)", at->file, at->line);
        if (!c->err)
            c->err = kiln__error_new(KILN_ERR_INVALID_ARGUMENT, "kiln_checkpoint", r->site.file, r->site.line, 0,
                                     "%s was freed%s before the backward pass that recomputes it", r->guard->what, where);
        return;
    }
    kiln__tensor *ins[KILN_CHECKPOINT_MAX_INPUTS];
    kiln__ad_leaf *leaves[KILN_CHECKPOINT_MAX_INPUTS] = {0};
    bool oom = false;
    for (int i = 0; i < r->n_inputs; i++) {
        const kiln__tensor *t = r->inputs[i];
        ins[i] = oom ? NULL : kiln__tensor_view(t, t->ndim, t->shape, t->strides, t->offset);
        if (!ins[i]) oom = true;
        else if (kiln__ad_wants(n, i) && !(leaves[i] = kiln__ad_make_leaf(ins[i]))) oom = true;
    }
    if (oom) {
        for (int i = 0; i < r->n_inputs; i++) kiln__tensor_release(ins[i]);
        kiln__tensor_release(g);
        kiln__fail(c, KILN_ERR_OUT_OF_MEMORY, "cannot recompute a checkpointed region");
        return;
    }
    kiln__tensor *out = run_region(c, r, ins, 0, NULL, NULL, true);
    if (out && !out->err &&
        (out->ndim != n->out_ndim || memcmp(out->shape, n->out_shape, sizeof(int64_t) * (size_t)out->ndim) != 0 ||
         out->dtype != n->out_dtype))
        region_fail(c, r, KILN_ERR_SHAPE, "the recomputed output differs in shape or dtype from the forward pass's");
    if (c->err || !out || (!out->err && !out->autodiff)) { /* no error and no graph: nothing reaches the inputs */
        kiln__drop(2, out, g);
        return;
    }
    int n_edge = 0;
    kiln__ad_node *edge[64];
    kiln__ad_node **ev = n->n_slots <= 64 ? edge : calloc((size_t)n->n_slots, sizeof *ev);
    kiln__tensor *egs_small[64] = {0};
    kiln__tensor **egs = n->n_slots <= 64 ? egs_small : calloc((size_t)n->n_slots, sizeof *egs);
    if (!ev || !egs) {
        if (ev != edge) free(ev);
        if (egs != egs_small) free(egs);
        kiln__drop(2, out, g);
        kiln__fail(c, KILN_ERR_OUT_OF_MEMORY, "cannot recompute a checkpointed region");
        return;
    }
    for (int i = r->n_inputs; i < n->n_slots; i++)
        if (n->slots[i].node) ev[n_edge++] = n->slots[i].node;
    kiln_grads *gs = kiln__ad_region_backward(c, out, g, n_edge, ev, egs);
    for (int i = 0, k = 0; i < n->n_slots; i++) {
        const kiln__ad_leaf *leaf = i < r->n_inputs ? leaves[i] : n->slots[i].leaf;
        kiln__tensor **slot = leaf ? kiln__grads_slot(gs, leaf) : NULL;
        if (slot) {
            grads[i] = *slot;
            *slot = NULL;
        } else if (i >= r->n_inputs && n->slots[i].node) {
            grads[i] = egs[k++];
        }
    }
    kiln_grads_free(gs);
    if (ev != edge) free(ev);
    if (egs != egs_small) free(egs);
}

static const kiln__ad_rule checkpoint_rule = {.name = "kiln_checkpoint", .backward = checkpoint_backward};

kiln_tensor kiln__checkpoint_guarded(kiln_checkpoint_fn fn, void *ctx, kiln__ad_guard *guard, int n_inputs,
                                     kiln_tensor *inputs) {
    KILN__OP_BEGIN("kiln_checkpoint");
    bool args_ok = n_inputs >= 0 && n_inputs <= KILN_CHECKPOINT_MAX_INPUTS && (inputs || n_inputs == 0);
    if (args_ok && fn && !kiln__grad_mode()) /* nothing is recorded (inside a region's forward too): a plain call */
        return fn(ctx, n_inputs, inputs);
    kiln__tensor *ts[KILN_CHECKPOINT_MAX_INPUTS] = {0};
    bool ok = true;
    for (int i = 0; args_ok && i < n_inputs; i++) {
        ts[i] = kiln__arg(&c, inputs[i]);
        ok &= kiln__ok(&c, ts[i]);
    }
    if (!fn) kiln__fail(&c, KILN_ERR_NULL, "function is NULL");
    else if (!args_ok && inputs == NULL) kiln__fail(&c, KILN_ERR_NULL, "inputs is NULL with n_inputs=%d", n_inputs);
    else if (!args_ok)
        kiln__fail(&c, KILN_ERR_INVALID_ARGUMENT, "n_inputs=%d must lie in [0, %d]", n_inputs, KILN_CHECKPOINT_MAX_INPUTS);
    region *r = NULL;
    if (!c.err && ok) {
        r = kiln__alloc_should_fail() ? NULL : calloc(1, sizeof *r + sizeof(kiln__tensor *) * (size_t)n_inputs);
        if (!r) kiln__fail(&c, KILN_ERR_OUT_OF_MEMORY, "cannot record a checkpointed region");
    }
    if (c.err || !ok) {
        for (int i = 0; i < n_inputs && args_ok; i++) kiln__tensor_release(ts[i]);
        return kiln__result(&c, NULL);
    }
    *r = (region){.fn = fn, .ctx = ctx, .guard = guard, .site = kiln__call_site(), .n_inputs = n_inputs};
    if (guard) atomic_fetch_add_explicit(&guard->refs, 1, memory_order_relaxed);
    /* the function sees untracked views; the node keeps aliases of the inputs */
    kiln__tensor *views[KILN_CHECKPOINT_MAX_INPUTS] = {0};
    bool tracked = false;
    for (int i = 0; i < n_inputs; i++) {
        const kiln__tensor *t = ts[i];
        tracked |= t->autodiff != NULL;
        r->inputs[i] = kiln__tensor_view(t, t->ndim, t->shape, t->strides, t->offset);
        views[i] = kiln__tensor_view(t, t->ndim, t->shape, t->strides, t->offset);
        if (!r->inputs[i] || !views[i]) kiln__fail(&c, KILN_ERR_OUT_OF_MEMORY, "cannot record a checkpointed region");
    }
    if (c.err) {
        for (int i = 0; i < n_inputs; i++) kiln__drop(2, ts[i], views[i]);
        region_free(r);
        return kiln__result(&c, NULL);
    }
    kiln__ad_capture cap = {0};
    kiln__tensor *out = run_region(&c, r, views, 1, &cap, &r->draws, false);
    if (cap.lost || r->draws.lost) kiln__fail(&c, KILN_ERR_OUT_OF_MEMORY, "cannot record a checkpointed region");
    kiln__ad_node *node = NULL;
    if (!c.err && out && !out->err && (tracked || cap.n > 0)) {
        /* the inputs' slots from ts; the captured ones take cap's references */
        kiln__tensor **padded = calloc((size_t)(n_inputs + cap.n), sizeof *padded);
        if (!padded) kiln__fail(&c, KILN_ERR_OUT_OF_MEMORY, "cannot record a checkpointed region");
        else memcpy(padded, ts, sizeof *padded * (size_t)n_inputs);
        node = padded ? kiln__ad_node_new(&c, &checkpoint_rule, n_inputs + cap.n, padded) : NULL;
        free(padded);
        if (node) {
            for (int j = 0; j < cap.n; j++) node->slots[n_inputs + j] = cap.v[j];
            cap.n = 0;
            node->ext = r;
            node->ext_free = region_free;
            r = NULL;
        }
    }
    kiln__ad_capture_clear(&cap);
    region_free(r);
    for (int i = 0; i < n_inputs; i++) kiln__tensor_release(ts[i]);
    if (c.err) {
        kiln__ad_node_unref(node);
        kiln__tensor_release(out);
        return kiln__result(&c, NULL);
    }
    if (out && out->err) { /* the function's own error, with its op and line */
        kiln__ad_node_unref(node);
        return kiln__result(&c, out);
    }
    return kiln__result(&c, kiln__ad_attach(&c, node, out));
}

kiln_tensor kiln_checkpoint(kiln_checkpoint_fn fn, void *ctx, int n_inputs, kiln_tensor *inputs) {
    return kiln__checkpoint_guarded(fn, ctx, NULL, n_inputs, inputs);
}
