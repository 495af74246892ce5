/* Derivative of masked_fill: the incoming gradient passes where the input was kept and is zero
 * where it was replaced, i.e. the same fill applied to it. Only the mask is saved, never x. */
#include "autodiff/ad-math.h"

static void masked_fill_backward(kiln__opctx *c, kiln__ad_node *n, kiln__tensor *g, kiln__tensor **grads) {
    grads[0] = kiln__t_masked_fill(c, g, kiln__ad_saved(n, 0), 0.0);
}

static const kiln__ad_rule masked_fill_rule = {"masked_fill", masked_fill_backward};

kiln__tensor *kiln__ad_masked_fill(kiln__opctx *c, kiln__tensor *x, kiln__tensor *mask, double value) {
    kiln__ad_node *n = kiln__ad_node_new(c, &masked_fill_rule, 1, &x); /* a mask has no gradient */
    kiln__ad_save(c, n, 0, mask);
    return kiln__ad_attach(c, n, kiln__t_masked_fill(c, x, mask, value));
}
