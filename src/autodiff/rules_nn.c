/* Derivatives of 2-d convolution and pooling.
 *
 * conv2d saves the input (for the weight gradient) and the weight (for the input gradient),
 * each only when the other side wants a gradient; the bias gradient is dy summed over
 * N, H and W. max_pool2d saves the argmax indices its forward wrote and scatters dy through
 * them; the average pools save nothing: their backward spreads dy over each window. */
#include "autodiff/ad-math.h"

static kiln__conv2d_params conv_params_of(const kiln__ad_node *n) {
    return (kiln__conv2d_params){(int)n->pi[0], (int)n->pi[1], (int)n->pi[2], (int)n->pi[3],
                                 (int)n->pi[4], (int)n->pi[5], (int)n->pi[6]};
}

static void conv2d_backward(kiln__opctx *c, kiln__ad_node *n, kiln__tensor *g, kiln__tensor **grads) {
    kiln__conv2d_params p = conv_params_of(n);
    const int64_t *xs = n->slots[0].shape, *ws = n->slots[1].shape;
    if (kiln__ad_wants(n, 0))
        grads[0] = kiln__t_conv2d_backward_input(c, ad_ref(g), kiln__ad_saved(n, 1), &p, xs[2], xs[3]);
    if (kiln__ad_wants(n, 1))
        grads[1] = kiln__t_conv2d_backward_weight(c, ad_ref(g), kiln__ad_saved(n, 0), &p, ws[2], ws[3]);
    if (n->n_slots > 2 && kiln__ad_wants(n, 2))
        grads[2] = kiln__t_reduce(c, KILN__OP_SUM, ad_ref(g), (1u << 0) | (1u << 2) | (1u << 3), false, 0);
    kiln__tensor_release(g);
}

static const kiln__ad_rule conv2d_rule = {.name = "conv2d", .backward = conv2d_backward};

kiln__tensor *kiln__ad_conv2d(kiln__opctx *c, kiln__tensor *x, kiln__tensor *w, kiln__tensor *bias, bool has_bias,
                              const kiln__conv2d_params *p) {
    kiln__tensor *in[3] = {x, w, bias};
    kiln__ad_node *n = kiln__ad_node_new(c, &conv2d_rule, has_bias ? 3 : 2, in);
    if (n) {
        const int params[7] = {p->stride_h, p->stride_w, p->pad_h, p->pad_w, p->dilation_h, p->dilation_w, p->groups};
        for (int i = 0; i < 7; i++) n->pi[i] = params[i];
    }
    if (kiln__ad_wants(n, 1)) kiln__ad_save(c, n, 0, x);
    if (kiln__ad_wants(n, 0)) kiln__ad_save(c, n, 1, w);
    return kiln__ad_attach(c, n, kiln__t_conv2d(c, x, w, bias, has_bias, p));
}

/* conv_transpose2d is conv2d's input gradient, so its own gradients are conv2d (for the input)
 * and conv2d's weight gradient with the roles of dy and x swapped (for the weight). An
 * output_padding of at least the stride makes conv2d of dy one row or column longer than the
 * input: that tail is cut off. pi[7] holds the output padding, h << 32 | w. */
static void conv_transpose2d_backward(kiln__opctx *c, kiln__ad_node *n, kiln__tensor *g, kiln__tensor **grads) {
    kiln__conv2d_params p = conv_params_of(n);
    const int64_t *xs = n->slots[0].shape, *ws = n->slots[1].shape;
    if (kiln__ad_wants(n, 0)) {
        kiln__tensor *dx = kiln__t_conv2d(c, ad_ref(g), kiln__ad_saved(n, 1), NULL, false, &p);
        if (dx && dx->shape[2] != xs[2]) dx = kiln__t_slice(c, dx, 2, 0, xs[2], 1);
        if (dx && dx->shape[3] != xs[3]) dx = kiln__t_slice(c, dx, 3, 0, xs[3], 1);
        grads[0] = dx;
    }
    if (kiln__ad_wants(n, 1))
        grads[1] = kiln__t_conv2d_backward_weight(c, kiln__ad_saved(n, 0), ad_ref(g), &p, ws[2], ws[3]);
    if (n->n_slots > 2 && kiln__ad_wants(n, 2))
        grads[2] = kiln__t_reduce(c, KILN__OP_SUM, ad_ref(g), (1u << 0) | (1u << 2) | (1u << 3), false, 0);
    kiln__tensor_release(g);
}

static const kiln__ad_rule conv_transpose2d_rule = {.name = "conv_transpose2d", .backward = conv_transpose2d_backward};

kiln__tensor *kiln__ad_conv_transpose2d(kiln__opctx *c, kiln__tensor *x, kiln__tensor *w, kiln__tensor *bias,
                                        bool has_bias, const kiln__conv2d_params *p, int out_pad_h, int out_pad_w) {
    kiln__tensor *in[3] = {x, w, bias};
    kiln__ad_node *n = kiln__ad_node_new(c, &conv_transpose2d_rule, has_bias ? 3 : 2, in);
    if (n) {
        const int params[7] = {p->stride_h, p->stride_w, p->pad_h, p->pad_w, p->dilation_h, p->dilation_w, p->groups};
        for (int i = 0; i < 7; i++) n->pi[i] = params[i];
        n->pi[7] = (int64_t)out_pad_h << 32 | (int64_t)(uint32_t)out_pad_w;
    }
    if (kiln__ad_wants(n, 1)) kiln__ad_save(c, n, 0, x);
    if (kiln__ad_wants(n, 0)) kiln__ad_save(c, n, 1, w);
    return kiln__ad_attach(c, n, kiln__t_conv_transpose2d(c, x, w, bias, has_bias, p, out_pad_h, out_pad_w));
}

/* ---- pooling --------------------------------------------------------------------------------- */

static kiln__pool2d_params pool_params_of(const kiln__ad_node *n) {
    return (kiln__pool2d_params){(int)n->pi[0], (int)n->pi[1], (int)n->pi[2], (int)n->pi[3], (int)n->pi[4],
                                 (int)n->pi[5], n->pi[6] != 0, (int)n->out_shape[2], (int)n->out_shape[3],
                                 (n->pi[7] & 1) != 0, (n->pi[7] & 2) != 0};
}

static void store_pool_params(kiln__ad_node *n, const kiln__pool2d_params *p) {
    if (!n) return;
    const int params[6] = {p->kernel_h, p->kernel_w, p->stride_h, p->stride_w, p->pad_h, p->pad_w};
    for (int i = 0; i < 6; i++) n->pi[i] = params[i];
    n->pi[6] = p->adaptive;
    n->pi[7] = (p->ceil_mode ? 1 : 0) | (p->exclude_pad ? 2 : 0);
}

static void max_pool2d_backward(kiln__opctx *c, kiln__ad_node *n, kiln__tensor *g, kiln__tensor **grads) {
    const int64_t *xs = n->slots[0].shape;
    grads[0] = kiln__t_max_pool2d_backward(c, g, kiln__ad_saved(n, 0), xs[2], xs[3]);
}

static void avg_pool2d_backward(kiln__opctx *c, kiln__ad_node *n, kiln__tensor *g, kiln__tensor **grads) {
    kiln__pool2d_params p = pool_params_of(n);
    const int64_t *xs = n->slots[0].shape;
    grads[0] = kiln__t_avg_pool2d_backward(c, g, &p, xs[2], xs[3]);
}

static const kiln__ad_rule max_pool2d_rule = {.name = "max_pool2d", .backward = max_pool2d_backward};
static const kiln__ad_rule avg_pool2d_rule = {.name = "avg_pool2d", .backward = avg_pool2d_backward};

kiln__tensor *kiln__ad_max_pool2d(kiln__opctx *c, kiln__tensor *x, const kiln__pool2d_params *p) {
    kiln__ad_node *n = kiln__ad_node_new(c, &max_pool2d_rule, 1, &x);
    store_pool_params(n, p);
    kiln__tensor *indices = NULL;
    kiln__tensor *y = kiln__t_max_pool2d(c, x, p, &indices);
    kiln__ad_save(c, n, 0, indices);
    kiln__tensor_release(indices);
    return kiln__ad_attach(c, n, y);
}

kiln__tensor *kiln__ad_avg_pool2d(kiln__opctx *c, kiln__tensor *x, const kiln__pool2d_params *p) {
    kiln__ad_node *n = kiln__ad_node_new(c, &avg_pool2d_rule, 1, &x);
    store_pool_params(n, p);
    return kiln__ad_attach(c, n, kiln__t_avg_pool2d(c, x, p));
}
