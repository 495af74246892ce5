/* Derivatives of masked_fill and tril/triu: the incoming gradient passes where the input was
 * kept and is zero where it was replaced, i.e. the same mask applied to it. masked_fill saves
 * its mask (the mask alone, never x); tril/triu rebuild their triangle from the offset. */
#include "autodiff/ad-math.h"

static void masked_fill_backward(kiln__opctx *c, kiln__ad_node *n, kiln__tensor *g, kiln__tensor **grads) {
    grads[0] = kiln__t_masked_fill(c, g, kiln__ad_saved(n, 0), 0.0);
}

static const kiln__ad_rule masked_fill_rule = {.name = "masked_fill", .backward = masked_fill_backward};

kiln__tensor *kiln__ad_masked_fill(kiln__opctx *c, kiln__tensor *x, kiln__tensor *mask, double value) {
    kiln__ad_node *n = kiln__ad_node_new(c, &masked_fill_rule, 1, &x); /* a mask has no gradient */
    kiln__ad_save(c, n, 0, mask);
    return kiln__ad_attach(c, n, kiln__t_masked_fill(c, x, mask, value));
}

static void tri_backward(kiln__opctx *c, kiln__ad_node *n, kiln__tensor *g, kiln__tensor **grads) {
    grads[0] = kiln__t_tri(c, g, n->pi[0], n->pi[1] != 0);
}

static const kiln__ad_rule tri_rule = {.name = "tril/triu", .backward = tri_backward};

kiln__tensor *kiln__ad_tri(kiln__opctx *c, kiln__tensor *x, int64_t diagonal, bool upper) {
    kiln__ad_node *n = kiln__ad_node_new(c, &tri_rule, 1, &x);
    if (n) n->pi[0] = diagonal, n->pi[1] = upper;
    return kiln__ad_attach(c, n, kiln__t_tri(c, x, diagonal, upper));
}
