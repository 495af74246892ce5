/* User-defined differentiable functions (kiln_function): the user's forward runs untracked on
 * views of the inputs and keeps what its backward needs through kiln_function_save; one node
 * holds those tensors (released as soon as it ran, as every node's saved state) and calls the
 * user's backward for the inputs' gradients, checked against the inputs' shapes. */
#include <stdlib.h>
#include <string.h>

#include "autodiff/autodiff-impl.h"
#include "kiln/autodiff.h"

struct kiln_function_ctx {
    kiln_function_forward_fn forward;
    kiln_function_backward_fn backward;
    void *ctx;
    kiln__site site; /* the kiln_function call */
    bool recording;  /* saves are kept (a node will use them) */
    bool lost;       /* a save failed (out of memory): the backward could not run */
    int n_saved, cap_saved;
    kiln__tensor **saved;
};

static void fctx_free(void *p) {
    kiln_function_ctx *f = p;
    if (!f) return;
    for (int i = 0; i < f->n_saved; i++) kiln__tensor_release(f->saved[i]);
    free(f->saved);
    free(f);
}

int kiln_function_save(kiln_function_ctx *f, kiln_tensor h) {
    if (!f || !f->recording) {
        kiln_release(h);
        return -1;
    }
    kiln__error *err = NULL;
    kiln__tensor *t = kiln__handle_take(h, "kiln_function_save", &err);
    if (!t) {
        f->lost = true;
        kiln__error_report(err);
        kiln__error_unref(err);
        return -1;
    }
    if (f->n_saved == f->cap_saved) {
        int cap = f->cap_saved ? f->cap_saved * 2 : 4;
        kiln__tensor **grown = kiln__alloc_should_fail() ? NULL : realloc(f->saved, sizeof *grown * (size_t)cap);
        if (!grown) {
            f->lost = true;
            kiln__tensor_release(t);
            kiln__report(KILN_ERR_OUT_OF_MEMORY, "kiln_function_save", "cannot save a tensor for backward");
            return -1;
        }
        f->saved = grown;
        f->cap_saved = cap;
    }
    f->saved[f->n_saved] = t;
    return f->n_saved++;
}

kiln_tensor kiln_function_saved(kiln_function_ctx *f, int i) {
    KILN__OP_BEGIN("kiln_function_saved");
    if (!f) return kiln__result(&c, kiln__fail(&c, KILN_ERR_NULL, "function context is NULL"));
    if (i < 0 || i >= f->n_saved)
        return kiln__result(&c, kiln__fail(&c, KILN_ERR_INVALID_ARGUMENT, "no saved tensor %d (%d saved)", i, f->n_saved));
    kiln__tensor_retain(f->saved[i]);
    return kiln__result(&c, f->saved[i]);
}

/* An error at the kiln_function call (the first error of c wins). */
static void function_fail(kiln__opctx *c, const kiln_function_ctx *f, kiln_status st, const char *fmt, int i,
                          const char *detail) {
    if (c->err) return;
    char msg[384];
    snprintf(msg, sizeof msg, fmt, i, detail);
    c->err = kiln__error_new(st, "kiln_function", f->site.file, f->site.line, 0, "%s", msg);
}

static void function_backward(kiln__opctx *c, kiln__ad_node *n, kiln__tensor *g, kiln__tensor **grads) {
    kiln_function_ctx *f = n->ext;
    kiln_tensor hs[KILN_CHECKPOINT_MAX_INPUTS];
    for (int i = 0; i < n->n_slots; i++) hs[i] = KILN_NONE;
    kiln__site site = kiln__call_site();
    kiln_status st = f->backward(f, f->ctx, kiln__handle_new(g), n->n_slots, hs);
    kiln__site_now = site;
    if (st != KILN_OK) function_fail(c, f, st, "the backward callback failed (%d): %s", (int)st, kiln_last_error());
    for (int i = 0; i < n->n_slots; i++) {
        if (hs[i].id == KILN_NONE.id) continue;
        kiln__error *err = NULL;
        kiln__tensor *t = kiln__handle_take(hs[i], "kiln_function", &err);
        if (!t && err && err->status == KILN_ERR_OUT_OF_MEMORY && !c->err) { /* its handle could not be made */
            c->err = err;
            continue;
        }
        if (!t) {
            kiln__error_unref(err);
            function_fail(c, f, KILN_ERR_INVALID_ARGUMENT, "the gradient of input %d is a stale handle%s", i, "");
            continue;
        }
        if (!c->err && kiln__ok(c, t)) {
            const kiln__ad_slot *s = &n->slots[i];
            if (t->ndim != s->ndim || memcmp(t->shape, s->shape, sizeof(int64_t) * (size_t)s->ndim) != 0) {
                char want[96];
                kiln__shape_str(want, sizeof want, s->ndim, s->shape);
                function_fail(c, f, KILN_ERR_SHAPE, "the gradient of input %d must have the input's shape %s", i, want);
            }
        }
        if (c->err) kiln__tensor_release(t);
        else grads[i] = t;
    }
}

static const kiln__ad_rule function_rule = {.name = "kiln_function", .backward = function_backward};

kiln_tensor kiln_function(kiln_function_forward_fn forward, kiln_function_backward_fn backward, void *ctx,
                          int n_inputs, kiln_tensor *inputs) {
    KILN__OP_BEGIN("kiln_function");
    bool args_ok = n_inputs >= 0 && n_inputs <= KILN_CHECKPOINT_MAX_INPUTS && (inputs || n_inputs == 0);
    if (args_ok && forward && backward && !kiln__grad_mode()) { /* nothing will be differentiated */
        kiln_function_ctx plain = {.forward = forward, .backward = backward, .ctx = ctx};
        return forward(&plain, ctx, n_inputs, inputs);
    }
    kiln__tensor *ts[KILN_CHECKPOINT_MAX_INPUTS] = {0};
    bool ok = true;
    for (int i = 0; args_ok && i < n_inputs; i++) {
        ts[i] = kiln__arg(&c, inputs[i]);
        ok &= kiln__ok(&c, ts[i]);
    }
    if (!forward || !backward) kiln__fail(&c, KILN_ERR_NULL, "%s callback is NULL", forward ? "backward" : "forward");
    else if (!args_ok && inputs == NULL) kiln__fail(&c, KILN_ERR_NULL, "inputs is NULL with n_inputs=%d", n_inputs);
    else if (!args_ok)
        kiln__fail(&c, KILN_ERR_INVALID_ARGUMENT, "n_inputs=%d must lie in [0, %d]", n_inputs, KILN_CHECKPOINT_MAX_INPUTS);
    kiln_function_ctx *f = NULL;
    if (!c.err && ok && !(f = kiln__alloc_should_fail() ? NULL : calloc(1, sizeof *f)))
        kiln__fail(&c, KILN_ERR_OUT_OF_MEMORY, "cannot record a function");
    kiln_tensor hs[KILN_CHECKPOINT_MAX_INPUTS];
    bool tracked = false;
    for (int i = 0; f && i < n_inputs; i++) {
        const kiln__tensor *t = ts[i];
        tracked |= t->autodiff != NULL;
        kiln__tensor *v = kiln__tensor_view(t, t->ndim, t->shape, t->strides, t->offset);
        hs[i] = v ? kiln__handle_new(v) : KILN_NONE;
        if (!v) kiln__fail(&c, KILN_ERR_OUT_OF_MEMORY, "cannot record a function");
    }
    if (c.err || !ok) {
        for (int i = 0; f && i < n_inputs; i++) kiln_release(hs[i]);
        for (int i = 0; args_ok && i < n_inputs; i++) kiln__tensor_release(ts[i]);
        free(f);
        return kiln__result(&c, NULL);
    }
    *f = (kiln_function_ctx){.forward = forward, .backward = backward, .ctx = ctx, .site = kiln__call_site(),
                             .recording = tracked};
    kiln_no_grad_begin();
    kiln_tensor out_h = forward(f, ctx, n_inputs, hs);
    kiln_no_grad_end();
    kiln__site_now = f->site;
    kiln__error *err = NULL;
    kiln__tensor *out = kiln__handle_take(out_h, "kiln_function", &err);
    if (!out && err && err->status == KILN_ERR_OUT_OF_MEMORY) c.err = err; /* its result's handle could not be made */
    else if (!out) {
        kiln__error_unref(err);
        kiln__fail(&c, KILN_ERR_INVALID_ARGUMENT, "the forward callback returned no live tensor");
    }
    if (!c.err && f->lost) kiln__fail(&c, KILN_ERR_OUT_OF_MEMORY, "cannot save a tensor for backward");
    kiln__ad_node *node = NULL;
    if (!c.err && tracked && !out->err) {
        node = kiln__ad_node_new(&c, &function_rule, n_inputs, ts);
        if (node) node->ext = f, node->ext_free = fctx_free, f = NULL;
    }
    fctx_free(f);
    for (int i = 0; i < n_inputs; i++) kiln__tensor_release(ts[i]);
    if (c.err || (out && out->err)) {
        kiln__ad_node_unref(node);
        return kiln__result(&c, out);
    }
    return kiln__result(&c, kiln__ad_attach(&c, node, out));
}
