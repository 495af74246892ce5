/* Derivatives of the view ops: reshape-like views reshape the gradient back, permutes
 * apply the inverse permutation, slices scatter into zeros, expand is undone by the
 * walker's sum back to the input shape. */
#include <string.h>

#include "autodiff/ad-math.h"

static void reshape_backward(kiln__opctx *c, kiln__ad_node *n, kiln__tensor *g, kiln__tensor **grads) {
    grads[0] = kiln__t_reshape(c, g, n->slots[0].ndim, n->slots[0].shape);
}

static void identity_backward(kiln__opctx *c, kiln__ad_node *n, kiln__tensor *g, kiln__tensor **grads) {
    grads[0] = g; /* expand: the walker sums broadcast dims back */
}

static void permute_backward(kiln__opctx *c, kiln__ad_node *n, kiln__tensor *g, kiln__tensor **grads) {
    int inverse[KILN_MAX_DIMS];
    for (int d = 0; d < n->slots[0].ndim; d++) inverse[n->pi[d]] = d;
    grads[0] = kiln__t_permute(c, g, n->slots[0].ndim, inverse);
}

/* zeros of the input's shape, with g written into the slice the forward took */
static void slice_backward(kiln__opctx *c, kiln__ad_node *n, kiln__tensor *g, kiln__tensor **grads) {
    const kiln__ad_slot *s = &n->slots[0];
    if (!g) return;
    kiln__tensor *z = kiln__t_fill(c, g->device, g->dtype, s->ndim, s->shape, 0.0);
    if (!z) return kiln__drop(1, g);
    int dim = (int)n->pi[0];
    int64_t start = n->pi[1], step = n->pi[2];
    kiln__tensor_retain(z);
    int64_t len = g->shape[dim]; /* its last element lies inside the input: no overflow */
    kiln__tensor *window = kiln__t_slice(c, z, dim, start, len ? start + step * (len - 1) + 1 : start, step);
    if (window) kiln__t_copy_into(c, kiln__view_of(window), g);
    kiln__drop(2, window, g);
    grads[0] = z;
}

/* The automatic policy: a view of its producer's output, made again; free but for contiguous
 * (the expand rule with the input's own shape), which copies. */
static bool view_plan(const kiln__ad_node *n, kiln__ad_work *w) {
    w->inputs = 1;
    return true;
}

static bool copy_plan(const kiln__ad_node *n, kiln__ad_work *w) {
    w->inputs = 1;
    w->ops = kiln__ad_out_numel(n);
    return true;
}

static kiln__tensor *reshape_recompute(kiln__opctx *c, const kiln__ad_node *n) {
    return kiln__t_reshape(c, kiln__ad_input_now(c, n, 0), n->out_ndim, n->out_shape);
}

static kiln__tensor *identity_recompute(kiln__opctx *c, const kiln__ad_node *n) {
    kiln__tensor *x = kiln__ad_input_now(c, n, 0);
    const kiln__ad_slot *s = &n->slots[0];
    bool same = s->ndim == n->out_ndim && memcmp(s->shape, n->out_shape, sizeof(int64_t) * (size_t)s->ndim) == 0;
    return same ? kiln__t_contiguous(c, x) : kiln__t_expand(c, x, n->out_ndim, n->out_shape);
}

static kiln__tensor *permute_recompute(kiln__opctx *c, const kiln__ad_node *n) {
    int order[KILN_MAX_DIMS];
    for (int d = 0; d < n->slots[0].ndim; d++) order[d] = (int)n->pi[d];
    return kiln__t_permute(c, kiln__ad_input_now(c, n, 0), n->slots[0].ndim, order);
}

static kiln__tensor *slice_recompute(kiln__opctx *c, const kiln__ad_node *n) {
    int dim = (int)n->pi[0];
    int64_t start = n->pi[1], step = n->pi[2], len = n->out_shape[dim];
    return kiln__t_slice(c, kiln__ad_input_now(c, n, 0), dim, start, len ? start + step * (len - 1) + 1 : start, step);
}

static const kiln__ad_rule reshape_rule = {"reshape", reshape_backward, reshape_recompute, view_plan};
static const kiln__ad_rule identity_rule = {"expand", identity_backward, identity_recompute, copy_plan};
static const kiln__ad_rule permute_rule = {"permute", permute_backward, permute_recompute, view_plan};
static const kiln__ad_rule slice_rule = {"slice", slice_backward, slice_recompute, view_plan};

kiln__ad_node *kiln__ad_begin_view(kiln__opctx *c, kiln__ad_view_kind kind, kiln__tensor *x, const int64_t *params, int np) {
    if (KILN__LIKELY(!kiln__ad_active(1, &x))) return NULL;
    const kiln__ad_rule *rule = kind == KILN__AD_VIEW_RESHAPE ? &reshape_rule
                                : kind == KILN__AD_VIEW_PERMUTE ? &permute_rule
                                : kind == KILN__AD_VIEW_SLICE ? &slice_rule
                                                               : &identity_rule;
    kiln__ad_node *n = kiln__ad_node_new(c, rule, 1, &x);
    if (n)
        for (int i = 0; i < np && i < 8; i++) n->pi[i] = params[i];
    return n;
}

/* ---- the decorated views: record the node, then attach it to the op layer's view ---------- */

kiln__tensor *kiln__ad_reshape(kiln__opctx *c, kiln__tensor *x, int ndim, const int64_t *shape) {
    kiln__ad_node *n = kiln__ad_begin_view(c, KILN__AD_VIEW_RESHAPE, x, NULL, 0);
    return kiln__ad_attach(c, n, kiln__t_reshape(c, x, ndim, shape));
}

kiln__tensor *kiln__ad_flatten(kiln__opctx *c, kiln__tensor *x, int start_dim, int end_dim) {
    kiln__ad_node *n = kiln__ad_begin_view(c, KILN__AD_VIEW_RESHAPE, x, NULL, 0);
    return kiln__ad_attach(c, n, kiln__t_flatten(c, x, start_dim, end_dim));
}

kiln__tensor *kiln__ad_squeeze(kiln__opctx *c, kiln__tensor *x, int dim) {
    kiln__ad_node *n = kiln__ad_begin_view(c, KILN__AD_VIEW_RESHAPE, x, NULL, 0);
    return kiln__ad_attach(c, n, kiln__t_squeeze(c, x, dim));
}

kiln__tensor *kiln__ad_unsqueeze(kiln__opctx *c, kiln__tensor *x, int dim) {
    kiln__ad_node *n = kiln__ad_begin_view(c, KILN__AD_VIEW_RESHAPE, x, NULL, 0);
    return kiln__ad_attach(c, n, kiln__t_unsqueeze(c, x, dim));
}

kiln__tensor *kiln__ad_expand(kiln__opctx *c, kiln__tensor *x, int ndim, const int64_t *shape) {
    kiln__ad_node *n = kiln__ad_begin_view(c, KILN__AD_VIEW_EXPAND, x, NULL, 0);
    return kiln__ad_attach(c, n, kiln__t_expand(c, x, ndim, shape));
}

/* A contiguous x comes back as it is: nothing to record. */
kiln__tensor *kiln__ad_contiguous(kiln__opctx *c, kiln__tensor *x) {
    kiln__ad_node *n = x && !kiln__tensor_is_contiguous(x) ? kiln__ad_begin_view(c, KILN__AD_VIEW_EXPAND, x, NULL, 0) : NULL;
    return kiln__ad_attach(c, n, kiln__t_contiguous(c, x));
}

kiln__tensor *kiln__ad_permute(kiln__opctx *c, kiln__tensor *x, int ndim, const int *order) {
    int64_t norm[KILN_MAX_DIMS]; /* ndim is 0..KILN_MAX_DIMS: the caller checked */
    for (int d = 0; d < ndim; d++) norm[d] = order[d] < 0 ? order[d] + ndim : order[d];
    kiln__ad_node *n = kiln__ad_begin_view(c, KILN__AD_VIEW_PERMUTE, x, norm, ndim);
    return kiln__ad_attach(c, n, kiln__t_permute(c, x, ndim, order));
}

kiln__tensor *kiln__ad_transpose(kiln__opctx *c, kiln__tensor *x, int d0, int d1) {
    kiln__ad_node *n = NULL;
    if (x && !x->err && x->ndim > 0 && kiln__norm_dim(c, &d0, x->ndim) && kiln__norm_dim(c, &d1, x->ndim)) {
        int64_t order[KILN_MAX_DIMS];
        for (int d = 0; d < x->ndim; d++) order[d] = d;
        order[d0] = d1;
        order[d1] = d0;
        n = kiln__ad_begin_view(c, KILN__AD_VIEW_PERMUTE, x, order, x->ndim);
    }
    return kiln__ad_attach(c, n, kiln__t_transpose(c, x, d0, d1));
}

/* The node keeps (dim, start, step) normalised as kiln__t_slice clamps them. */
kiln__tensor *kiln__ad_slice(kiln__opctx *c, kiln__tensor *x, int dim, int64_t start, int64_t end, int64_t step) {
    kiln__ad_node *n = NULL;
    if (x && !x->err && x->ndim > 0 && step > 0 && kiln__norm_dim(c, &dim, x->ndim)) {
        int64_t len = x->shape[dim], s0 = start < 0 ? start + len : start;
        s0 = s0 < 0 ? 0 : (s0 > len ? len : s0);
        n = kiln__ad_begin_view(c, KILN__AD_VIEW_SLICE, x, (int64_t[]){dim, s0, step}, 3);
    }
    return kiln__ad_attach(c, n, kiln__t_slice(c, x, dim, start, end, step));
}
