/* Autocast (include/kiln/autocast.h): a per-thread stack of scopes, and THE op list.
 *
 * The list follows PyTorch's CPU autocast (docs/source/amp.rst, "CPU Op-Specific Behavior"):
 * its lower-precision ops that kiln has (conv1d, conv2d, bmm, mm/matmul, addmm, linear) plus
 * scaled_dot_product_attention (on the list of PyTorch 2.x's autocast_mode.h), and from its f32
 * list the ops kiln has (conv_transpose, mse_loss, kl_div, binary_cross_entropy). kiln
 * adds its other losses to the f32 list, as PyTorch's CUDA list has them: a loss is a sum
 * over a batch whose f32 value the backward pass and a gradient scaler start from. Ops
 * not listed (elementwise, softmax, layer_norm, reductions) run in their inputs' dtype and
 * compute in f32 inside, as unlisted ops do in PyTorch's CPU autocast.
 *
 * Each listed op's public wrapper calls kiln__autocast_arg on its float inputs with its own
 * name, so an op composed of others (attention of matmuls, bmm of matmul) is cast by its own
 * rule and its inner ops by theirs.
 *
 * One exception to the list, kiln's own: a conv with an f32 input of fewer than 8 channels per
 * group (an image network's first conv) stays f32. Its products are short (K = C kh kw under
 * 72), so bf16 saves nothing there, and kiln's bf16 conv widens such a conv back to f32 anyway
 * (oneDNN takes convs from 8 channels: backend/cpu/conv_dnnl.c); in bf16 it cost the
 * Fashion-MNIST CNN's step the casts of its largest activation (conv1's output, 128 x 32 x 28 x
 * 28), its relu and pooling off their f32 kernels, and conv1 itself 1.5-2.3x its f32 time. */
#include "api/autocast-impl.h"

#include <string.h>

#include "kiln/tensor.h"
#include "ops/ops-impl.h"

static const struct {
    const char *op;
    kiln_autocast_rule rule;
} op_list[] = {
    /* products: f32 sums of bf16 products */
    {"kiln_matmul", KILN_AUTOCAST_LOWER},
    {"kiln_linear", KILN_AUTOCAST_LOWER},
    {"kiln_bmm", KILN_AUTOCAST_LOWER},
    {"kiln_addmm", KILN_AUTOCAST_LOWER},
    {"kiln_conv1d", KILN_AUTOCAST_LOWER},
    {"kiln_conv2d", KILN_AUTOCAST_LOWER},
    {"kiln_scaled_dot_product_attention", KILN_AUTOCAST_LOWER},
    /* range: PyTorch's CPU f32 list */
    {"kiln_conv_transpose2d", KILN_AUTOCAST_F32},
    {"kiln_mse_loss", KILN_AUTOCAST_F32},
    {"kiln_kl_div", KILN_AUTOCAST_F32},
    {"kiln_binary_cross_entropy", KILN_AUTOCAST_F32},
    /* range: kiln's other losses (PyTorch's CUDA f32 list) */
    {"kiln_cross_entropy", KILN_AUTOCAST_F32},
    {"kiln_nll_loss", KILN_AUTOCAST_F32},
    {"kiln_bce_with_logits", KILN_AUTOCAST_F32},
    {"kiln_l1_loss", KILN_AUTOCAST_F32},
    {"kiln_smooth_l1_loss", KILN_AUTOCAST_F32},
    {"kiln_huber_loss", KILN_AUTOCAST_F32},
};
#define N_OPS ((int)(sizeof op_list / sizeof op_list[0]))

#define MAX_DEPTH 32
static _Thread_local kiln_dtype scopes[MAX_DEPTH];
static _Thread_local int depth;

kiln_status kiln_autocast_begin(kiln_dtype dtype) {
    if (dtype != KILN_BF16 && dtype != KILN_F16 && dtype != KILN_F32)
        return kiln__report(KILN_ERR_DTYPE, "kiln_autocast_begin", "autocast runs in bf16 or f16 (f32: off), not %s",
                            kiln_dtype_name(dtype));
    if (depth == MAX_DEPTH)
        return kiln__report(KILN_ERR_INVALID_ARGUMENT, "kiln_autocast_begin", "more than %d nested autocast scopes",
                            MAX_DEPTH);
    scopes[depth++] = dtype;
    return KILN_OK;
}

kiln_status kiln_autocast_end(void) {
    if (depth == 0)
        return kiln__report(KILN_ERR_INVALID_ARGUMENT, "kiln_autocast_end", "no autocast scope is open on this thread");
    depth--;
    return KILN_OK;
}

kiln_dtype kiln_autocast_dtype(void) { return depth ? scopes[depth - 1] : KILN_F32; }

const char *kiln_autocast_op_at(int i, kiln_autocast_rule *rule) {
    if (i < 0 || i >= N_OPS) return NULL;
    if (rule) *rule = op_list[i].rule;
    return op_list[i].op;
}

kiln_autocast_rule kiln_autocast_rule_of(const char *op_name) {
    for (int i = 0; op_name && i < N_OPS; i++)
        if (strcmp(op_list[i].op, op_name) == 0) return op_list[i].rule;
    return KILN_AUTOCAST_NONE;
}

#define CONV_LOWER_MIN_CHANNELS 8

bool kiln__autocast_conv_stays_f32(kiln_tensor x, int groups) {
    if (!depth || scopes[depth - 1] == KILN_F32 || groups < 1) return false;
    kiln__error *err = NULL;
    const kiln__tensor *t = kiln__handle_peek(x, "kiln_conv2d", &err);
    kiln__error_unref(err);
    return t && !t->err && t->dtype == KILN_F32 && t->ndim == 4 && t->shape[1] / groups < CONV_LOWER_MIN_CHANNELS;
}

kiln_tensor kiln__autocast_arg(const char *op, kiln_tensor t) {
    if (!depth || scopes[depth - 1] == KILN_F32 || t.id == KILN_NONE.id) return t;
    kiln_autocast_rule rule = kiln_autocast_rule_of(op);
    if (rule == KILN_AUTOCAST_NONE) return t;
    kiln__error *err = NULL; /* a stale or poisoned t goes to the op as it is, which reports it */
    const kiln__tensor *x = kiln__handle_peek(t, op, &err);
    if (!x || x->err) return kiln__error_unref(err), t;
    kiln_dtype have = x->dtype, want = rule == KILN_AUTOCAST_LOWER ? scopes[depth - 1] : KILN_F32;
    if (have == want || (have != KILN_F32 && have != KILN_F16 && have != KILN_BF16)) return t;
    const char *outer = kiln__op_scope_enter(op); /* a failing cast reports as the op */
    t = kiln__autocast_cast(t, want); /* a parameter's kept copy while it is unchanged */
    kiln__op_scope_leave(outer);
    return t;
}
