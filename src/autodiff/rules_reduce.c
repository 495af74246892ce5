/* Derivatives of the reductions (sum, mean, prod, var/std, logsumexp, max/min) and of
 * softmax / log_softmax.
 *
 * A reduction's node keeps the reduced dims as a mask over the input's dims and keepdim. The
 * output's gradient is first seen with the reduced dims kept as size 1 (a view), so that it
 * broadcasts against the input. max/min keep only where each winner is: the input seen with
 * its kept dims first and its reduced dims flattened into one last dim is arg-reduced there,
 * and backward scatters the gradient to those positions (the first of tied winners, as
 * argmax picks it). Which backward a node runs and what it saves is its row's grad column in
 * ir/reduce_table.h (SPREAD, MEAN, WINNERS, PROD, VAR, SOFTMAX): a new reduction of a known
 * kind needs no edit here. */
#include "autodiff/ad-math.h"

enum { P_MASK, P_KEEPDIM, P_CORRECTION, P_SQRT };

static kiln__reduce_grad grad_kind(kiln__opcode code) { return kiln__reduce_info_of(code)->grad; }
/* PROD and VAR keep their input for backward; SOFTMAX keeps it with the output. */
static bool saves_input(kiln__reduce_grad k) {
    return k == KILN__RGRAD_PROD || k == KILN__RGRAD_VAR || k == KILN__RGRAD_SOFTMAX;
}

static bool is_reduced(const kiln__ad_node *n, int d) { return (n->pi[P_MASK] >> d) & 1; }

/* t, of the output's shape, seen with the reduced dims kept (size 1). Consumes t. */
static kiln__tensor *keep_dims(kiln__opctx *c, const kiln__ad_node *n, kiln__tensor *t) {
    const kiln__ad_slot *s = &n->slots[0];
    if (n->pi[P_KEEPDIM] || !t) return t;
    int64_t shape[KILN_MAX_DIMS];
    for (int d = 0; d < s->ndim; d++) shape[d] = is_reduced(n, d) ? 1 : s->shape[d];
    return kiln__t_reshape(c, t, s->ndim, shape);
}

/* t, of the output's shape, broadcast back over the input's shape (a view). Consumes t. */
static kiln__tensor *spread(kiln__opctx *c, const kiln__ad_node *n, kiln__tensor *t) {
    return kiln__t_expand(c, keep_dims(c, n, t), n->slots[0].ndim, n->slots[0].shape);
}

static int64_t reduced_count(const kiln__ad_node *n) {
    int64_t count = 1;
    for (int d = 0; d < n->slots[0].ndim; d++)
        if (is_reduced(n, d)) count *= n->slots[0].shape[d];
    return count;
}

/* The order that lists the kept dims first and the reduced ones last, and the shape
 * [kept..., product of the reduced sizes] that flattens the reduced ones. Returns the number
 * of kept dims. mask is not 0, so flat needs at most ndim entries. */
static int flat_plan(int ndim, const int64_t *shape, uint32_t mask, int *order, int64_t *flat) {
    int nk = 0, o = 0;
    int64_t size = 1;
    for (int d = 0; d < ndim; d++)
        if (!(mask >> d & 1)) order[o++] = d, flat[nk++] = shape[d];
    for (int d = 0; d < ndim; d++)
        if (mask >> d & 1) order[o++] = d, size *= shape[d];
    flat[nk] = size;
    return nk;
}

/* The reduction that gives the index of code's winner: the KERNEL row of the same fold that
 * finishes with an INDEX (argmax for max). */
static kiln__opcode index_of(kiln__opcode code) {
    kiln__reduce_fold fold = kiln__reduce_info_of(code)->fold;
    for (int r = 0; r < KILN__RED_COUNT; r++)
        if (kiln__reduce_rows[r].code >= 0 && kiln__reduce_rows[r].fold == fold &&
            kiln__reduce_rows[r].finish == KILN__RFIN_INDEX)
            return (kiln__opcode)kiln__reduce_rows[r].code;
    return KILN__OP_NOOP; /* a WINNERS row without an index row: the op layer reports it */
}

/* Where the max (min) of each group is, as [kept..., 1] indices into the flattened reduced
 * dims. Consumes x. */
static kiln__tensor *winners(kiln__opctx *c, kiln__opcode code, kiln__tensor *x, uint32_t mask) {
    int order[KILN_MAX_DIMS];
    int64_t flat[KILN_MAX_DIMS];
    int nd = x->ndim, nk = flat_plan(nd, x->shape, mask, order, flat);
    x = kiln__t_reshape(c, kiln__t_permute(c, x, nd, order), nk + 1, flat);
    return kiln__t_reduce(c, index_of(code), x, 1u << nk, true, 0);
}

static kiln__tensor *max_backward(kiln__opctx *c, kiln__ad_node *n, kiln__tensor *g) {
    const kiln__ad_slot *s = &n->slots[0];
    if (!n->saved[0]) return g; /* nothing was reduced: the identity */
    int order[KILN_MAX_DIMS], inverse[KILN_MAX_DIMS];
    int64_t flat[KILN_MAX_DIMS], one_each[KILN_MAX_DIMS], permuted[KILN_MAX_DIMS];
    int nd = s->ndim, nk = flat_plan(nd, s->shape, (uint32_t)n->pi[P_MASK], order, flat);
    for (int d = 0; d <= nk; d++) one_each[d] = d < nk ? flat[d] : 1;
    g = kiln__t_reshape(c, g, nk + 1, one_each);
    kiln__tensor *z = kiln__ad_scatter_zeros(c, nk + 1, flat, nk, kiln__ad_saved(n, 0), g);
    /* unflatten, then undo the permutation */
    for (int d = 0; d < nd; d++) permuted[d] = s->shape[order[d]], inverse[order[d]] = d;
    return kiln__t_permute(c, kiln__t_reshape(c, z, nd, permuted), nd, inverse);
}

/* d prod / dx_i = the product of the others: p / x_i when the group has no zero; for a zero
 * x_i, the product of the non-zeros when it is the group's only zero; else 0. */
static kiln__tensor *prod_backward(kiln__opctx *c, kiln__ad_node *n, kiln__tensor *g) {
    kiln__tensor *x = n->saved[0];
    uint32_t mask = (uint32_t)n->pi[P_MASK];
    kiln__tensor *zero = kiln__t_binary_scalar(c, KILN__OP_EQ, ad_ref(x), 0.0, false);
    kiln__tensor *one = kiln__t_fill(c, x->device, x->dtype, 0, NULL, 1.0);
    kiln__tensor *nonzero = kiln__t_where(c, ad_ref(zero), one, ad_ref(x)); /* zeros read as 1 */
    kiln__tensor *zeros = kiln__t_reduce(c, KILN__OP_SUM, ad_as(c, ad_ref(zero), x->dtype), mask, true, 0);
    kiln__tensor *p = kiln__t_reduce(c, KILN__OP_PROD, ad_ref(nonzero), mask, true, 0);
    kiln__tensor *no_zero = kiln__t_binary_scalar(c, KILN__OP_EQ, ad_ref(zeros), 0.0, false);
    kiln__tensor *one_zero = kiln__t_binary_scalar(c, KILN__OP_EQ, zeros, 1.0, false);
    kiln__tensor *at_nonzero = ad_keep(c, no_zero, ad_div(c, ad_ref(p), nonzero));
    kiln__tensor *at_zero = ad_keep(c, one_zero, p);
    return ad_mul(c, keep_dims(c, n, g), kiln__t_where(c, zero, at_zero, at_nonzero));
}

/* var: 2 (x - mean) / (N - correction); std: that over 2 std. */
static kiln__tensor *var_backward(kiln__opctx *c, kiln__ad_node *n, kiln__tensor *g) {
    kiln__tensor *x = n->saved[0];
    double denom = (double)(reduced_count(n) - n->pi[P_CORRECTION]);
    kiln__tensor *mean = kiln__t_reduce(c, KILN__OP_MEAN, ad_ref(x), (uint32_t)n->pi[P_MASK], true, 0);
    kiln__tensor *diff = ad_sub(c, ad_ref(x), mean);
    g = keep_dims(c, n, g);
    if (n->pi[P_SQRT]) g = ad_div(c, g, keep_dims(c, n, kiln__ad_saved(n, 1)));
    return ad_mul(c, diff, ad_muls(c, g, (n->pi[P_SQRT] ? 1.0 : 2.0) / denom));
}

static void reduce_backward(kiln__opctx *c, kiln__ad_node *n, kiln__tensor *g, kiln__tensor **grads) {
    switch (grad_kind(n->code)) {
    case KILN__RGRAD_SPREAD: grads[0] = spread(c, n, g); break;
    case KILN__RGRAD_MEAN: grads[0] = spread(c, n, ad_muls(c, g, 1.0 / (double)reduced_count(n))); break;
    case KILN__RGRAD_PROD: grads[0] = prod_backward(c, n, g); break;
    case KILN__RGRAD_VAR: grads[0] = var_backward(c, n, g); break;
    case KILN__RGRAD_SOFTMAX: { /* softmax of x over the group */
        kiln__tensor *shifted = ad_sub(c, kiln__ad_saved(n, 0), keep_dims(c, n, kiln__ad_saved(n, 1)));
        grads[0] = ad_mul(c, keep_dims(c, n, g), ad_un(c, KILN__OP_EXP, shifted));
        break;
    }
    case KILN__RGRAD_WINNERS: grads[0] = max_backward(c, n, g); break;
    default: kiln__tensor_release(g); break;
    }
}

/* The automatic policy: std and logsumexp (SOFTMAX) saved their output; prod and var their
 * input; sum, mean, max and min (whose saved[0] is the winners, not x) read their producer's
 * output. One operation per input element (VAR: 3). */
static bool reduce_plan(const kiln__ad_node *n, kiln__ad_work *w) {
    if (n->saved[1]) return true;
    kiln__reduce_grad k = grad_kind(n->code);
    w->ops = (k == KILN__RGRAD_VAR ? 3 : 1) * kiln__ad_slot_numel(n, 0);
    if (saves_input(k)) w->saved = 1;
    else w->inputs = 1;
    return true;
}

static kiln__tensor *reduce_recompute(kiln__opctx *c, const kiln__ad_node *n) {
    if (n->saved[1]) return ad_ref(n->saved[1]);
    bool from_saved = saves_input(grad_kind(n->code));
    kiln__tensor *x = from_saved ? kiln__ad_saved_now(c, n, 0) : kiln__ad_input_now(c, n, 0);
    return kiln__t_reduce(c, n->code, x, (uint32_t)n->pi[P_MASK], n->pi[P_KEEPDIM], n->pi[P_CORRECTION]);
}

static const kiln__ad_rule reduce_rule = {"reduce", reduce_backward, reduce_recompute, reduce_plan};

kiln__tensor *kiln__ad_reduce(kiln__opctx *c, kiln__opcode code, kiln__tensor *x, uint32_t mask, bool keepdim,
                              int64_t param, bool take_sqrt) {
    kiln__ad_node *n = kiln__ad_node_new(c, &reduce_rule, 1, &x);
    if (n) {
        n->code = code;
        n->pi[P_MASK] = mask;
        n->pi[P_KEEPDIM] = keepdim;
        n->pi[P_CORRECTION] = param;
        n->pi[P_SQRT] = take_sqrt;
    }
    kiln__reduce_grad k = grad_kind(code);
    if (saves_input(k)) kiln__ad_save(c, n, 0, x);
    kiln__tensor *for_winners = k == KILN__RGRAD_WINNERS && mask ? ad_ref(x) : NULL;
    kiln__tensor *y = take_sqrt ? kiln__t_std(c, x, mask, keepdim, param)
                                : kiln__t_reduce(c, code, x, mask, keepdim, param);
    if (take_sqrt || k == KILN__RGRAD_SOFTMAX) kiln__ad_save(c, n, 1, y);
    if (for_winners) { /* after the forward, so that its error (e.g. an empty dim) is the one reported */
        kiln__tensor *w = y && n ? winners(c, code, for_winners, mask) : (kiln__tensor_release(for_winners), NULL);
        if (n) n->saved[0] = w;
    }
    return kiln__ad_attach(c, n, y);
}

/* ---- softmax / log_softmax ---------------------------------------------------------------- */

static void softmax_backward(kiln__opctx *c, kiln__ad_node *n, kiln__tensor *g, kiln__tensor **grads) {
    kiln__tensor *y = n->saved[0];
    uint32_t dim = 1u << n->pi[0];
    if (n->code == KILN__OP_SOFTMAX) { /* y (g - sum(g y)) */
        kiln__tensor *gy = kiln__t_reduce(c, KILN__OP_SUM, ad_mul(c, ad_ref(g), ad_ref(y)), dim, true, 0);
        grads[0] = ad_mul(c, ad_ref(y), ad_sub(c, g, gy));
    } else { /* g - exp(y) sum(g) */
        kiln__tensor *sum = kiln__t_reduce(c, KILN__OP_SUM, ad_ref(g), dim, true, 0);
        grads[0] = ad_sub(c, g, ad_mul(c, ad_un(c, KILN__OP_EXP, ad_ref(y)), sum));
    }
}

/* Its saved output is what a consumer needs: nothing to recompute. */
static bool softmax_plan(const kiln__ad_node *n, kiln__ad_work *w) {
    (void)w;
    return n->saved[0] != NULL;
}

static kiln__tensor *softmax_recompute(kiln__opctx *c, const kiln__ad_node *n) {
    (void)c;
    return ad_ref(n->saved[0]);
}

static const kiln__ad_rule softmax_rule = {"softmax", softmax_backward, softmax_recompute, softmax_plan};

kiln__tensor *kiln__ad_softmax(kiln__opctx *c, kiln__opcode code, kiln__tensor *x, int dim) {
    kiln__ad_node *n = kiln__ad_node_new(c, &softmax_rule, 1, &x);
    if (n) n->code = code, n->pi[0] = kiln__ad_dim(dim, x->ndim);
    kiln__tensor *y = kiln__t_softmax(c, code, x, dim);
    kiln__ad_save(c, n, 0, y);
    return kiln__ad_attach(c, n, y);
}
