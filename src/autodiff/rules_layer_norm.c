/* Derivative of layer norm as one node, so training keeps one tensor of the input's size per
 * layer norm, not two (issue #28).
 *
 * Composed of ops, layer norm's graph keeps x - mean (for the variance's and the normalising
 * product's derivatives) and the normalised x̂ (for the weight's), each the size of the input;
 * PyTorch keeps the input and two small statistics. This node runs the same forward ops,
 * untracked, and keeps x̂ and 1/std, from which everything follows:
 *
 *   dx̂ = g w     dx = rstd (dx̂ - mean(dx̂) - x̂ mean(dx̂ x̂))     dw = g x̂     db = g
 *
 * (means over the normalised dims; dw and db are summed back to the weight's shape by the walk). */
#include "autodiff/ad-math.h"

/* slots: x, then the weight and the bias where given (the bias is slot 1 without a weight) */

static void layer_norm_backward(kiln__opctx *c, kiln__ad_node *n, kiln__tensor *g, kiln__tensor **grads) {
    uint32_t dims = (uint32_t)n->pi[0];
    bool has_w = n->pi[1] != 0, has_b = n->pi[2] != 0;
    kiln__tensor *xhat = kiln__ad_saved(n, 0), *rstd = kiln__ad_saved(n, 1);
    int b_slot = has_w ? 2 : 1;
    if (has_b && kiln__ad_wants(n, b_slot)) grads[b_slot] = ad_ref(g);
    if (has_w && kiln__ad_wants(n, 1)) grads[1] = ad_mul(c, ad_ref(g), ad_ref(xhat));
    if (kiln__ad_wants(n, 0)) {
        kiln__tensor *dxhat = has_w ? ad_mul(c, ad_ref(g), kiln__ad_saved(n, 2)) : ad_ref(g);
        kiln__tensor *m1 = kiln__t_reduce(c, KILN__OP_MEAN, ad_ref(dxhat), dims, true, 0);
        kiln__tensor *m2 = kiln__t_reduce(c, KILN__OP_MEAN, ad_mul(c, ad_ref(dxhat), ad_ref(xhat)), dims, true, 0);
        kiln__tensor *inner = ad_sub(c, ad_sub(c, dxhat, m1), ad_mul(c, ad_ref(xhat), m2));
        grads[0] = ad_mul(c, inner, ad_ref(rstd));
    }
    kiln__drop(3, g, xhat, rstd);
}

/* The automatic policy: the output is x̂ w + b again, from x̂, w and (saved under the policy
 * only: a parameter, so an alias costs nothing) b. Two operations per element. */
static bool layer_norm_plan(const kiln__ad_node *n, kiln__ad_work *w) {
    bool has_w = n->pi[1] != 0, has_b = n->pi[2] != 0;
    if (!n->saved[0] || (has_w && !n->saved[2]) || (has_b && !n->saved[3])) return false;
    w->ops = 2 * kiln__ad_out_numel(n);
    return true;
}

static kiln__tensor *layer_norm_recompute(kiln__opctx *c, const kiln__ad_node *n) {
    kiln__tensor *y = ad_ref(n->saved[0]);
    if (n->pi[1]) y = ad_mul(c, y, ad_ref(n->saved[2]));
    if (n->pi[2]) y = ad_add(c, y, ad_ref(n->saved[3]));
    return y;
}

static const kiln__ad_rule layer_norm_rule = {"layer_norm", layer_norm_backward, layer_norm_recompute,
                                              layer_norm_plan};

kiln__tensor *kiln__ad_layer_norm(kiln__opctx *c, kiln__tensor *x, kiln__tensor *w, kiln__tensor *b, int n_norm,
                                  double eps) {
    kiln__tensor *in[3] = {x, w ? w : b, w ? b : NULL};
    int n_in = 1 + (w != NULL) + (b != NULL);
    kiln__ad_node *n = kiln__ad_node_new(c, &layer_norm_rule, n_in, in);
    uint32_t dims = 0;
    for (int d = x->ndim - n_norm; d < x->ndim; d++) dims |= 1u << d;
    if (n) n->pi[0] = dims, n->pi[1] = w != NULL, n->pi[2] = b != NULL;
    kiln__tensor *mean = kiln__t_reduce(c, KILN__OP_MEAN, ad_ref(x), dims, true, 0);
    kiln__tensor *xc = ad_sub(c, x, mean);
    kiln__tensor *var = kiln__t_reduce(c, KILN__OP_MEAN, ad_mul(c, ad_ref(xc), ad_ref(xc)), dims, true, 0);
    kiln__tensor *rstd = ad_un(c, KILN__OP_RSQRT, ad_adds(c, var, eps));
    kiln__tensor *y = ad_mul(c, xc, ad_ref(rstd));
    kiln__ad_save(c, n, 0, y);
    kiln__ad_save(c, n, 1, rstd);
    if (w) kiln__ad_save(c, n, 2, w);
    if (b && kiln_checkpoint_policy_get() == KILN_CHECKPOINT_AUTO) kiln__ad_save(c, n, 3, b);
    kiln__drop(1, rstd);
    if (w) y = ad_mul(c, y, w);
    if (b) y = ad_add(c, y, b);
    return kiln__ad_attach(c, n, y);
}
