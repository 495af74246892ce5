/* kiln_optimizer_step_tensors: one optimizer step with gradients the caller holds as tensors
 * (a binding's .grad attributes) rather than in a backward pass's container. The gradients go
 * into a container of their own, keyed by the parameters' leaves, and the ordinary step runs
 * on it, so the updates are the same fused kernels with the same checks. A parameter the
 * caller replaced since the optimizer was made (a new tensor of the same shape and dtype, as
 * Python's load_state_dict or an in-place op on a leaf gives) is followed from then on, its
 * state kept, as a module's replaced handle is. */
#include <stdlib.h>
#include <string.h>

#include "autodiff/autodiff-impl.h"
#include "optim/optim-impl.h"

/* The optimizer's own reference moved to t when t is another tensor; false + c's error when t
 * cannot be a parameter (not a leaf, or a different shape or dtype from the state made for it). */
static bool follow(kiln__opctx *c, kiln__optim_param *p, int i, kiln__tensor *t) {
    kiln__error *err = NULL;
    kiln__tensor *held = kiln__handle_peek(p->own, c->name, &err);
    kiln__error_unref(err);
    if (held == t) return true;
    const kiln__ad_meta *m = t->autodiff;
    if (!m || !m->leaf) {
        kiln__fail(c, KILN_ERR_INVALID_ARGUMENT, "params[%d] is not a leaf: mark it with kiln_require_grad", i);
        return false;
    }
    const kiln__tensor *st = p->state[0];
    if (st && (st->dtype != t->dtype || st->ndim != t->ndim ||
               memcmp(st->shape, t->shape, sizeof(int64_t) * (size_t)t->ndim) != 0)) {
        kiln__fail(c, KILN_ERR_SHAPE, "params[%d] changed shape or dtype since its optimizer state was made", i);
        return false;
    }
    kiln__tensor_retain(t);
    kiln_tensor h = kiln__handle_new(t);
    if (!h.id) {
        kiln__fail(c, KILN_ERR_OUT_OF_MEMORY, "no handle for params[%d]", i);
        return false;
    }
    kiln_release(p->own);
    p->own = h;
    return true;
}

kiln_status kiln_optimizer_step_tensors(kiln_optimizer *opt, int n, const kiln_tensor *params, const kiln_tensor *grads) {
    KILN__OP_BEGIN("kiln_optimizer_step_tensors");
    if (!opt || !params || !grads) {
        kiln__fail(&c, KILN_ERR_NULL, "%s is NULL", !opt ? "optimizer" : !params ? "params" : "grads");
        return kiln__optim_finish(&c);
    }
    kiln_status st;
    const char *why = kiln__object_problem(opt, KILN__OPTIMIZER_KIND, &st);
    if (why) {
        kiln__fail(&c, st, "%s", why);
        return kiln__optim_finish(&c);
    }
    if (n != opt->n_params) {
        kiln__fail(&c, KILN_ERR_INVALID_ARGUMENT, "%d parameters given: the optimizer has %d", n, opt->n_params);
        return kiln__optim_finish(&c);
    }
    for (int i = 0; i < n; i++)
        if (opt->params[i].slot != &opt->params[i].own) {
            kiln__fail(&c, KILN_ERR_INVALID_ARGUMENT, "the optimizer follows a module's parameters: use kiln_optimizer_step");
            return kiln__optim_finish(&c);
        }
    /* everything checked before anything changes: the parameters, then the gradients */
    kiln__tensor **ts = calloc((size_t)(n ? n : 1), sizeof *ts);
    kiln_grads *g = ts ? kiln__grads_new() : NULL;
    if (!g) {
        free(ts);
        kiln__fail(&c, KILN_ERR_OUT_OF_MEMORY, "cannot allocate the step's gradients container");
        return kiln__optim_finish(&c);
    }
    for (int i = 0; i < n && !c.err; i++) {
        ts[i] = kiln__peek(&c, params[i]);
        if (!ts[i]) break;
        const kiln__ad_meta *m = ts[i]->autodiff;
        if (!m || !m->leaf) kiln__fail(&c, KILN_ERR_INVALID_ARGUMENT, "params[%d] is not a leaf: mark it with kiln_require_grad", i);
        for (int j = 0; j < i && !c.err; j++)
            if (ts[j] == ts[i]) kiln__fail(&c, KILN_ERR_INVALID_ARGUMENT, "params[%d] repeats params[%d]", i, j);
        if (c.err || !grads[i].id) continue;
        kiln__tensor *d = kiln__peek(&c, grads[i]);
        if (!d) break;
        kiln__tensor_retain(d);
        kiln__grads_put(&c, g, m->leaf, d); /* consumes d */
    }
    for (int i = 0; i < n && !c.err; i++) follow(&c, &opt->params[i], i, ts[i]);
    free(ts);
    if (c.err) {
        kiln_grads_free(g);
        return kiln__optim_finish(&c);
    }
    /* the step's own errors name this call, not kiln_optimizer_step */
    const char *outer = kiln__op_scope_enter(c.name);
    st = kiln_optimizer_step(opt, g);
    kiln__op_scope_leave(outer);
    kiln_grads_free(g);
    return st;
}
