/* Derivatives of the joins (cat, stack: the gradient is cut back into the inputs' pieces) and
 * of the indexing ops (index_select, gather: the gradient is scatter-added into zeros of the
 * input's shape at the index; scatter_add: t's gradient passes through, src's is gathered
 * at the index). split and chunk are slices and use the slice rule of rules_view.c. */
#include <string.h>

#include "autodiff/ad-math.h"

kiln__tensor *kiln__ad_scatter_zeros(kiln__opctx *c, int ndim, const int64_t *shape, int dim, kiln__tensor *index,
                                     kiln__tensor *g) {
    if (!g) return kiln__drop(1, index), NULL;
    kiln__tensor *z = kiln__t_fill(c, g->device, g->dtype, ndim, shape, 0.0);
    return kiln__t_scatter_add(c, z, dim, index, g);
}

/* ---- cat / stack ----------------------------------------------------------------------------- */

enum { P_DIM, P_STACK };

/* Input i took [at, at + its extent) of the output along dim: its size there for cat (0 for
 * the empty 1-d tensors cat skips), 1 for stack, whose gradient then drops that dim. */
static void join_backward(kiln__opctx *c, kiln__ad_node *n, kiln__tensor *g, kiln__tensor **grads) {
    int dim = kiln__ad_dim((int)n->pi[P_DIM], n->out_ndim);
    bool stack = n->pi[P_STACK];
    int64_t at = 0;
    for (int i = 0; i < n->n_slots; i++) {
        const kiln__ad_slot *s = &n->slots[i];
        bool skipped = !stack && s->ndim == 1 && s->shape[0] == 0;
        int64_t extent = stack ? 1 : skipped ? 0 : s->shape[dim];
        if (kiln__ad_wants(n, i))
            grads[i] = kiln__t_reshape(c, kiln__t_slice(c, ad_ref(g), dim, at, at + extent, 1), s->ndim, s->shape);
        at += extent;
    }
    kiln__tensor_release(g);
}

static const kiln__ad_rule join_rule = {.name = "cat", .backward = join_backward};

kiln__ad_node *kiln__ad_begin_join(kiln__opctx *c, kiln__tensor *const *ts, int n, int dim, bool stack) {
    kiln__ad_node *node = kiln__ad_node_new(c, &join_rule, n, ts);
    if (node) node->pi[P_DIM] = dim, node->pi[P_STACK] = stack;
    return node;
}

/* ---- index_select / gather / scatter_add --------------------------------------------------- */

/* g with the zeros around it that make it src's shape: scatter_add may read only the part of
 * src that its index covers (the index starts at 0 in every dim). Consumes g. */
static kiln__tensor *pad_to(kiln__opctx *c, kiln__tensor *g, const kiln__ad_slot *s) {
    if (!g || (g->ndim == s->ndim && memcmp(g->shape, s->shape, sizeof(int64_t) * (size_t)s->ndim) == 0)) return g;
    kiln__tensor *z = kiln__t_fill(c, g->device, g->dtype, s->ndim, s->shape, 0.0);
    if (!z) return kiln__drop(1, g), NULL;
    kiln__view corner = kiln__view_of(z);
    memcpy(corner.shape, g->shape, sizeof(int64_t) * (size_t)g->ndim);
    kiln__t_copy_into(c, corner, g);
    kiln__tensor_release(g);
    return z;
}

static void index_backward(kiln__opctx *c, kiln__ad_node *n, kiln__tensor *g, kiln__tensor **grads) {
    const kiln__ad_slot *s = &n->slots[0];
    int dim = (int)n->pi[0];
    kiln__tensor *index = kiln__ad_saved(n, 0);
    switch (n->code) {
    case KILN__OP_INDEX_SELECT: { /* the 1-d index, seen along dim and broadcast over g */
        int64_t along[KILN_MAX_DIMS];
        for (int d = 0; d < s->ndim; d++) along[d] = d == dim ? -1 : 1;
        index = kiln__t_reshape(c, index, s->ndim, along);
        index = g ? kiln__t_expand(c, index, g->ndim, g->shape) : (kiln__drop(1, index), NULL);
        grads[0] = kiln__ad_scatter_zeros(c, s->ndim, s->shape, dim, index, g);
        break;
    }
    case KILN__OP_GATHER: grads[0] = kiln__ad_scatter_zeros(c, s->ndim, s->shape, dim, index, g); break;
    default: /* scatter_add */
        if (kiln__ad_wants(n, 2)) grads[2] = pad_to(c, kiln__t_gather(c, ad_ref(g), dim, ad_ref(index)), &n->slots[2]);
        if (kiln__ad_wants(n, 0)) grads[0] = ad_ref(g);
        kiln__drop(2, index, g);
        break;
    }
}

static const kiln__ad_rule index_rule = {.name = "index", .backward = index_backward};

kiln__tensor *kiln__ad_index(kiln__opctx *c, kiln__opcode code, kiln__tensor *t, int dim, kiln__tensor *index,
                             kiln__tensor *src) {
    kiln__tensor *in[3] = {t, index, src};
    kiln__ad_node *n = kiln__ad_node_new(c, &index_rule, code == KILN__OP_SCATTER_ADD ? 3 : 2, in);
    if (n) n->code = code, n->pi[0] = kiln__ad_dim(dim, t->ndim);
    if (code != KILN__OP_SCATTER_ADD || kiln__ad_wants(n, 2)) kiln__ad_save(c, n, 0, index);
    kiln__tensor *y = code == KILN__OP_INDEX_SELECT ? kiln__t_index_select(c, t, dim, index)
                      : code == KILN__OP_GATHER     ? kiln__t_gather(c, t, dim, index)
                                                    : kiln__t_scatter_add(c, t, dim, index, src);
    return kiln__ad_attach(c, n, y);
}

kiln__tensor *kiln__ad_cat(kiln__opctx *c, kiln__tensor **ts, int n, int dim) {
    kiln__ad_node *node = kiln__ad_begin_join(c, ts, n, dim, false);
    return kiln__ad_attach(c, node, kiln__t_cat(c, ts, n, dim));
}

/* The node is recorded only once the shapes are known to stack, with dim normalised. */
kiln__tensor *kiln__ad_stack(kiln__opctx *c, kiln__tensor **ts, int n, int dim) {
    kiln__ad_node *node = kiln__stack_check(c, ts, n, &dim) ? kiln__ad_begin_join(c, ts, n, dim, true) : NULL;
    return kiln__ad_attach(c, node, kiln__t_stack(c, ts, n, dim));
}
