/* The derivative of a user's registered op: its inputs and output are saved, and the user's
 * backward, written with kiln's public ops, turns the output's gradient into the inputs'. */
#include "autodiff/autodiff-impl.h"
#include "ops/custom_op-impl.h"

/* A user's gradient must have its input's shape: the walker would otherwise try to sum a wrong
 * one down to it and fail with a message about a reshape the user never wrote. */
static bool same_shape(kiln__opctx *c, const kiln_custom_op *op, int i, const kiln__ad_slot *s, const kiln__tensor *g) {
    bool same = g->ndim == s->ndim;
    for (int d = 0; same && d < s->ndim; d++) same = g->shape[d] == s->shape[d];
    if (!same) {
        char gs[160], xs[160];
        kiln__fail(c, KILN_ERR_SHAPE, "backward of op %s gave a gradient of shape %s for input %d of shape %s", op->name,
                   kiln__shape_str(gs, sizeof gs, g->ndim, g->shape), i, kiln__shape_str(xs, sizeof xs, s->ndim, s->shape));
    }
    return same;
}

/* A borrowed handle the backward returned as a gradient as it is (`grad_inputs[0] = grad`, as
 * a PyTorch backward returns grad) is handed over, not released under it. */
static void release_unless_returned(kiln_tensor h, int n, const kiln_tensor *returned) {
    for (int i = 0; i < n; i++)
        if (returned[i].id == h.id) return;
    kiln_release(h);
}

static void custom_backward(kiln__opctx *c, kiln__ad_node *n, kiln__tensor *g, kiln__tensor **grads) {
    const kiln_custom_op *op = (const kiln_custom_op *)(uintptr_t)n->pi[0];
    int n_in = n->n_slots;
    if (!g) return;
    if (!op->def.backward) {
        kiln__tensor_release(g);
        kiln__fail(c, KILN_ERR_UNSUPPORTED, "op %s has no backward (give one in its kiln_custom_op_def)", op->name);
        return;
    }
    kiln_tensor ins[KILN_CUSTOM_MAX_INPUTS], gins[KILN_CUSTOM_MAX_INPUTS];
    for (int i = 0; i < n_in; i++) ins[i] = kiln__handle_new(kiln__ad_saved(n, i)), gins[i] = KILN_NONE;
    kiln_tensor out = kiln__handle_new(kiln__ad_saved(n, n_in));
    kiln_tensor gh = kiln__handle_new(g);
    kiln__site site = kiln__call_site(); /* the user's ops set their own lines; the walk's is kept */
    kiln__kernel_error("%s", "");
    kiln_status st = op->def.backward(n_in, ins, out, gh, gins, op->def.user_data);
    char detail[384];
    snprintf(detail, sizeof detail, "%s", kiln__kernel_error_detail());
    kiln__kernel_error("%s", "");
    kiln__site_now = site;
    for (int i = 0; i < n_in; i++) release_unless_returned(ins[i], n_in, gins);
    release_unless_returned(out, n_in, gins);
    release_unless_returned(gh, n_in, gins);
    if (st != KILN_OK) kiln__fail(c, st, "backward of op %s failed: %s", op->name, detail[0] ? detail : kiln_status_str(st));
    for (int i = 0; i < n_in; i++) {
        if (gins[i].id == 0) continue;
        kiln__error *err = NULL;
        kiln__tensor *gi = kiln__handle_take(gins[i], op->name, &err);
        if (!gi) {
            if (!c->err) c->err = err; else kiln__error_unref(err);
            continue;
        }
        if (!kiln__ok(c, gi) || c->err || !same_shape(c, op, i, &n->slots[i], gi)) {
            kiln__tensor_release(gi);
            continue;
        }
        grads[i] = gi;
    }
}

static const kiln__ad_rule custom_rule = {.name = "kiln_custom_op_call", .backward = custom_backward};

kiln__tensor *kiln__ad_custom(kiln__opctx *c, const kiln_custom_op *op, int n, kiln__tensor **in) {
    kiln__ad_node *node = kiln__ad_node_new(c, &custom_rule, n, in);
    if (node) node->pi[0] = (int64_t)(uintptr_t)op;
    if (op->def.backward)
        for (int i = 0; i < n; i++) kiln__ad_save(c, node, i, in[i]); /* (so no input is overwritten in place) */
    kiln__tensor *y = kiln__t_custom(c, op, n, in);
    if (op->def.backward) kiln__ad_save(c, node, n, y);
    return kiln__ad_attach(c, node, y);
}
