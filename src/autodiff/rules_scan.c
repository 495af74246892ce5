/* Derivatives of cumsum (the gradient summed from the end), cumprod (its own kernel, exact
 * where x has zeros) and sort / topk (the gradient scattered back to where each value came
 * from). */
#include "autodiff/ad-math.h"

static void scan_backward(kiln__opctx *c, kiln__ad_node *n, kiln__tensor *g, kiln__tensor **grads) {
    int dim = (int)n->pi[0];
    if (n->code == KILN__OP_CUMSUM) {
        grads[0] = kiln__t_scan(c, KILN__OP_CUMSUM, g, dim, true);
    } else if (n->out_ndim == 0) {
        grads[0] = g; /* cumprod of a 0-d tensor is the tensor */
    } else {
        grads[0] = kiln__t_cumprod_backward(c, g, ad_ref(n->saved[0]), dim);
    }
}

static const kiln__ad_rule scan_rule = {.name = "scan", .backward = scan_backward};

kiln__tensor *kiln__ad_scan(kiln__opctx *c, kiln__opcode code, kiln__tensor *x, int dim) {
    kiln__ad_node *n = kiln__ad_node_new(c, &scan_rule, 1, &x);
    if (n) n->code = code, n->pi[0] = kiln__ad_dim(dim, x->ndim);
    if (code == KILN__OP_CUMPROD) kiln__ad_save(c, n, 0, x);
    return kiln__ad_attach(c, n, kiln__t_scan(c, code, x, dim, false));
}

static void sort_backward(kiln__opctx *c, kiln__ad_node *n, kiln__tensor *g, kiln__tensor **grads) {
    const kiln__ad_slot *s = &n->slots[0];
    if (s->ndim == 0) { /* a 0-d input: its one value, or nothing (k = 0) */
        grads[0] = g && g->ndim == 0 ? g : NULL;
        if (!grads[0]) kiln__tensor_release(g);
        return;
    }
    grads[0] = kiln__ad_scatter_zeros(c, s->ndim, s->shape, (int)n->pi[0], ad_ref(n->saved[0]), g);
}

static const kiln__ad_rule sort_rule = {.name = "sort", .backward = sort_backward};

kiln__tensor *kiln__ad_sort(kiln__opctx *c, kiln__tensor *x, int dim, bool descending, int64_t k,
                            kiln__tensor **indices) {
    kiln__ad_node *n = kiln__ad_node_new(c, &sort_rule, 1, &x);
    if (n) n->pi[0] = kiln__ad_dim(dim, x->ndim);
    kiln__tensor *values = kiln__t_sort(c, x, dim, descending, k, indices);
    if (*indices) kiln__ad_save(c, n, 0, *indices);
    return kiln__ad_attach(c, n, values);
}
