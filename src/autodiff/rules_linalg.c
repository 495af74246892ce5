/* Derivatives of matmul and linear. Each operand is saved only when the other one needs a
 * gradient (d(a b)/da reads b, d(a b)/db reads a). Gradients over broadcast batch dims come
 * back in the product's batch shape, which is a broadcast of the operand's: the walker sums
 * them back. Under autocast, the gradient of an operand that is a bf16 cast of an f32
 * parameter is the bf16 product's f32 sums, kept in f32 (grad_product). */
#include "autodiff/ad-math.h"

static kiln__tensor *transposed(kiln__opctx *c, kiln__tensor *t) { return kiln__t_transpose(c, t, -1, -2); }

/* a @ b as gradient i of n: in f32 where the input is autocast's bf16 (f16) cast of an f32
 * tensor (kiln__ad_grad_dtype), so its f32 sums are stored as they are, not rounded to bf16
 * and cast back. (Measured: the twelve 2048 x 2048 weight gradients of an MLP step spent
 * 0.3-0.5 ms each on that cast.) */
static kiln__tensor *grad_product(kiln__opctx *c, const kiln__ad_node *n, int i, kiln__tensor *a, kiln__tensor *b) {
    if (kiln__ad_grad_dtype(n, i) == KILN_F32 && n->slots[i].dtype != KILN_F32) return kiln__t_matmul_wide(c, a, b);
    return kiln__t_matmul(c, a, b);
}

/* torch.matmul treats a 1-d a as a row [1, K] and a 1-d b as a column [K, 1], then drops
 * those dims from the product: g is seen with them put back, [batch..., M, N]. */
static void matmul_backward(kiln__opctx *c, kiln__ad_node *n, kiln__tensor *g, kiln__tensor **grads) {
    const kiln__ad_slot *sa = &n->slots[0], *sb = &n->slots[1];
    bool a_row = sa->ndim == 1, b_col = sb->ndim == 1;
    int nb = n->out_ndim - !a_row - !b_col;
    int64_t shape[KILN_MAX_DIMS];
    for (int d = 0; d < nb; d++) shape[d] = n->out_shape[d];
    shape[nb] = a_row ? 1 : n->out_shape[nb];
    shape[nb + 1] = b_col ? 1 : n->out_shape[n->out_ndim - 1];
    g = kiln__t_reshape(c, g, nb + 2, shape);
    if (kiln__ad_wants(n, 0)) { /* g b^T, [batch..., M, K] */
        kiln__tensor *b = kiln__ad_saved(n, 1);
        if (b_col) b = kiln__t_unsqueeze(c, b, 1);
        kiln__tensor *ga = grad_product(c, n, 0, ad_ref(g), transposed(c, b));
        grads[0] = a_row ? kiln__t_squeeze(c, ga, -2) : ga;
    }
    if (kiln__ad_wants(n, 1)) { /* a^T g, [batch..., K, N] */
        kiln__tensor *a = kiln__ad_saved(n, 0);
        if (a_row) a = kiln__t_unsqueeze(c, a, 0);
        kiln__tensor *gb = grad_product(c, n, 1, transposed(c, a), ad_ref(g));
        grads[1] = b_col ? kiln__t_squeeze(c, gb, -1) : gb;
    }
    kiln__tensor_release(g);
}

static const kiln__ad_rule matmul_rule = {.name = "matmul", .backward = matmul_backward};

kiln__tensor *kiln__ad_matmul(kiln__opctx *c, kiln__tensor *a, kiln__tensor *b) {
    kiln__tensor *in[2] = {a, b};
    kiln__ad_node *n = kiln__ad_node_new(c, &matmul_rule, 2, in);
    if (kiln__ad_wants(n, 1)) kiln__ad_save(c, n, 0, a);
    if (kiln__ad_wants(n, 0)) kiln__ad_save(c, n, 1, b);
    return kiln__ad_attach(c, n, kiln__t_matmul(c, a, b));
}

/* y = x w^T + bias with x [..., in], w [out, in]: dx = g w, dw = g^T x over all rows of x,
 * dbias = g, which the walker sums over the leading dims. */
static void linear_backward(kiln__opctx *c, kiln__ad_node *n, kiln__tensor *g, kiln__tensor **grads) {
    const kiln__ad_slot *sx = &n->slots[0], *sw = &n->slots[1];
    if (kiln__ad_wants(n, 0)) grads[0] = grad_product(c, n, 0, ad_ref(g), kiln__ad_saved(n, 1));
    if (kiln__ad_wants(n, 1)) {
        int64_t rows = 1, out_f = sw->shape[0], in_f = sw->shape[1];
        for (int d = 0; d < sx->ndim - 1; d++) rows *= sx->shape[d];
        kiln__tensor *g2 = kiln__t_reshape(c, ad_ref(g), 2, (int64_t[]){rows, out_f});
        kiln__tensor *x2 = kiln__t_reshape(c, kiln__ad_saved(n, 0), 2, (int64_t[]){rows, in_f});
        grads[1] = grad_product(c, n, 1, transposed(c, g2), x2);
    }
    if (n->n_slots == 3 && kiln__ad_wants(n, 2)) grads[2] = ad_ref(g);
    kiln__tensor_release(g);
}

static const kiln__ad_rule linear_rule = {.name = "linear", .backward = linear_backward};

kiln__tensor *kiln__ad_linear(kiln__opctx *c, kiln__tensor *x, kiln__tensor *w, kiln__tensor *bias, bool has_bias) {
    kiln__tensor *in[3] = {x, w, bias};
    kiln__ad_node *n = kiln__ad_node_new(c, &linear_rule, has_bias ? 3 : 2, in);
    if (kiln__ad_wants(n, 1)) kiln__ad_save(c, n, 0, x);
    if (kiln__ad_wants(n, 0)) kiln__ad_save(c, n, 1, w);
    return kiln__ad_attach(c, n, kiln__t_linear(c, x, w, bias, has_bias));
}
