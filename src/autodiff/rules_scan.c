/* Derivatives of cumsum (the gradient summed from the end) and cumprod (its own kernel, exact
 * where x has zeros). */
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

static const kiln__ad_rule scan_rule = {"scan", scan_backward};

kiln__tensor *kiln__ad_scan(kiln__opctx *c, kiln__opcode code, kiln__tensor *x, int dim) {
    kiln__ad_node *n = kiln__ad_node_new(c, &scan_rule, 1, &x);
    if (n) n->code = code, n->pi[0] = kiln__ad_dim(dim, x->ndim);
    if (code == KILN__OP_CUMPROD) kiln__ad_save(c, n, 0, x);
    return kiln__ad_attach(c, n, kiln__t_scan(c, code, x, dim, false));
}
