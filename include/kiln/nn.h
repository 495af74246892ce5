/* kiln nn: layers (modules that own their parameters), functional layer ops, losses and
 * initialisation. A model lists its parameters by name for optimizers and checkpoints.
 *
 *   kiln_module *layers[] = {kiln_flatten_new(1, -1), kiln_linear_new(784, 256, true, 1), kiln_relu_new(),
 *                            kiln_linear_new(256, 10, true, 2)};
 *   kiln_module *model = kiln_sequential_new(4, layers);          // takes the layers
 *   kiln_tensor logits = kiln_module_forward(model, images);      // consumes images
 *   kiln_tensor loss = kiln_cross_entropy(logits, labels, kiln_cross_entropy_defaults());
 *   ...
 *   kiln_module_free(model);
 */
#ifndef KILN_NN_H
#define KILN_NN_H

#include "core.h"
#include "tensor.h" /* kiln_conv2d and the pooling ops, used with the layers */

#ifdef __cplusplus
extern "C" {
#endif

/* ---- modules ------------------------------------------------------------------------------ */
typedef struct kiln_module kiln_module;

/* Runs the module on x (consumed); returns its output. A NULL module gives a poisoned tensor. */
KILN_API kiln_tensor kiln_module_forward(kiln_module *m, kiln_tensor x);
/* Training mode (dropout active, batch norm uses and updates batch statistics) or eval. */
KILN_API void kiln_module_train(kiln_module *m, bool training);
KILN_API bool kiln_module_is_training(const kiln_module *m);
/* Moves every parameter and buffer of m and its children to dev (each a queued copy; the
 * handles the module owns are replaced, so take kiln_module_param handles and build the
 * optimizer after the move). Parameters stay leaves that require grad. */
KILN_API kiln_status kiln_module_to_device(kiln_module *m, kiln_device dev);
KILN_API void kiln_module_free(kiln_module *m); /* frees children and parameters */
KILN_API const char *kiln_module_type(const kiln_module *m);

/* A named tensor a module owns: a trainable parameter, or a buffer (e.g. batch-norm running
 * statistics) that is saved in checkpoints but not optimised. `slot` points at the module's
 * own handle, so an optimizer can replace it and a checkpoint can load into it. */
typedef struct {
    char name[96]; /* "0.weight", "features.3.running_mean", ... */
    kiln_tensor *slot;
    bool buffer;
} kiln_param;

/* Writes up to cap entries (parameters first in registration order, buffers included) and
 * returns how many the module has in total (call with cap 0 to count). */
KILN_API int kiln_module_params(kiln_module *m, kiln_param *out, int cap);
KILN_API int64_t kiln_module_num_parameters(kiln_module *m); /* trainable elements */

/* ---- user-defined modules ------------------------------------------------------------------ */
/* A module of your own: a forward callback with your context, and parameters, buffers and
 * child modules registered by name, so optimizers, checkpoints ("encoder.0.weight"),
 * kiln_module_train and kiln_module_free see them as they see the built-in layers':
 *
 *   typedef struct { double alpha; } block_ctx;
 *   static kiln_tensor block_forward(kiln_module *m, kiln_tensor x, void *ctx) {  // consumes x
 *       x = kiln_module_forward(kiln_module_child(m, "encoder"), x);
 *       x = kiln_mul_scalar(x, ((block_ctx *)ctx)->alpha);
 *       return kiln_mul(x, kiln_module_param(m, "scale"));      // a new handle, consumed here
 *   }
 *   block_ctx *ctx = malloc(sizeof *ctx);
 *   ctx->alpha = 0.5;
 *   kiln_module *m = kiln_module_new("Block", block_forward, ctx, free);      // takes ctx
 *   kiln_module_add_child(m, "encoder", kiln_linear_new(784, 10, true, 1));   // takes the child
 *   kiln_module_add_parameter(m, "scale", kiln_ones(KILN_CPU, KILN_F32, KILN_SHAPE(10)));
 *   kiln_module_add_buffer(m, "seen", kiln_zeros(KILN_CPU, KILN_F32, KILN_SCALAR_SHAPE));
 *   // names: encoder.weight, encoder.bias, scale, seen (a buffer: saved, not optimised)
 *   kiln_module_free(m);                     // frees children, tensors, then free_ctx(ctx)
 *
 * In forward, kiln_module_is_training(m) says which mode (train/eval reaches every child).
 * Names are 1 to 31 letters, digits or '_', unique within a module. kiln_module_new takes ctx
 * (free_ctx, if not NULL, runs when the module is freed, or at once when it cannot be made);
 * the add functions take the tensor or child, also when they fail (a failed child is freed),
 * except a child that already belongs to a module or contains m, which is left as it is. */
typedef kiln_tensor (*kiln_module_forward_fn)(kiln_module *m, kiln_tensor x, void *ctx);
KILN_API kiln_module *kiln_module_new(const char *type, kiln_module_forward_fn forward, void *ctx,
                                      void (*free_ctx)(void *ctx));
/* A trainable parameter (float; marked with kiln_require_grad here). Takes t. */
KILN_API kiln_status kiln_module_add_parameter(kiln_module *m, const char *name, kiln_tensor t);
/* A buffer: saved in checkpoints, not optimised (any dtype). Takes t. */
KILN_API kiln_status kiln_module_add_buffer(kiln_module *m, const char *name, kiln_tensor t);
KILN_API kiln_status kiln_module_add_child(kiln_module *m, const char *name, kiln_module *child);
/* A new handle (kiln_ref) to the parameter or buffer at a dotted path ("encoder.weight");
 * a poisoned tensor naming the path when there is none. */
KILN_API kiln_tensor kiln_module_param(kiln_module *m, const char *name);
/* The child at a dotted path ("encoder", "encoder.0"), borrowed; NULL + error if none. */
KILN_API kiln_module *kiln_module_child(kiln_module *m, const char *name);
KILN_API void *kiln_module_context(const kiln_module *m); /* NULL for the built-in layers */

/* ---- layers (constructors return NULL and set kiln_last_error on bad arguments) ---------- */
KILN_API kiln_module *kiln_sequential_new(int n, kiln_module *const *children); /* takes them */
KILN_API kiln_module *kiln_linear_new(int64_t in_features, int64_t out_features, bool bias, uint64_t seed);

typedef struct {
    int64_t in_channels, out_channels;
    int kernel_h, kernel_w;
    int stride_h, stride_w;
    int pad_h, pad_w;
    int dilation_h, dilation_w;
    int groups;
    bool bias;
} kiln_conv2d_options;
/* kernel k x k, stride 1, padding 0, dilation 1, groups 1, with bias */
KILN_API kiln_conv2d_options kiln_conv2d_defaults(int64_t in_channels, int64_t out_channels, int kernel);
KILN_API kiln_module *kiln_conv2d_new(kiln_conv2d_options o, uint64_t seed);

/* Pools: stride 0 means "the kernel size" (PyTorch's default). Max pooling pads with -inf;
 * average pooling counts padding in its divisor. */
KILN_API kiln_module *kiln_max_pool2d_new(int kernel, int stride, int padding);
KILN_API kiln_module *kiln_avg_pool2d_new(int kernel, int stride, int padding);
KILN_API kiln_module *kiln_adaptive_avg_pool2d_new(int out_h, int out_w);
KILN_API kiln_module *kiln_batch_norm2d_new(int64_t channels, double eps, double momentum);
KILN_API kiln_module *kiln_layer_norm_new(int64_t normalized_size, double eps, bool affine); /* last dim */
KILN_API kiln_module *kiln_dropout_new(double p, uint64_t seed);
KILN_API kiln_module *kiln_flatten_new(int start_dim, int end_dim);
KILN_API kiln_module *kiln_embedding_new(int64_t num_embeddings, int64_t dim, uint64_t seed);
KILN_API kiln_module *kiln_relu_new(void);
KILN_API kiln_module *kiln_gelu_new(void);
KILN_API kiln_module *kiln_tanh_new(void);
KILN_API kiln_module *kiln_sigmoid_new(void);
KILN_API kiln_module *kiln_silu_new(void);

/* ---- functional layer ops (consume tensor arguments; differentiable) --------------------- */
/* kiln_conv2d and the pooling ops are tensor ops: see tensor.h. */
/* Zeroes each element with probability p and scales the rest by 1/(1-p); seed picks the mask. */
KILN_API kiln_tensor kiln_dropout(kiln_tensor x, double p, uint64_t seed);
/* The same with the mask's seed drawn from g (NULL: the global generator; see tensor.h). */
KILN_API kiln_tensor kiln_dropout_gen(kiln_tensor x, double p, kiln_generator *g);
/* torch.nn.functional.layer_norm: normalises over the trailing dims normalized_shape names
 * (x's last dims must equal it): (x - mean) / sqrt(var + eps) with the biased variance, then
 * * weight + bias, each a float tensor of normalized_shape or KILN_NONE (consumed). */
KILN_API kiln_tensor kiln_layer_norm(kiln_tensor x, kiln_shape normalized_shape, kiln_tensor weight, kiln_tensor bias,
                                     double eps);
/* torch.nn.functional.scaled_dot_product_attention: softmax(q k^T * scale + mask) v for
 * q [..., L, E], k [..., S, E], v [..., S, Ev] (batch dims broadcast; one float dtype) giving
 * [..., L, Ev]. attn_mask: KILN_NONE, bool (true = attend, as PyTorch) or q's dtype (added to
 * the scores), broadcastable to [..., L, S]. is_causal: query i attends keys 0..i (top-left
 * aligned, also when L != S); it cannot be combined with attn_mask (as PyTorch). scale <= 0 or
 * NaN means the default 1/sqrt(E). A row whose keys are all masked gives zeros with zero
 * gradients (PyTorch >= 2.5), not NaN. All tensors are consumed; a float mask gets a gradient. */
KILN_API kiln_tensor kiln_scaled_dot_product_attention(kiln_tensor q, kiln_tensor k, kiln_tensor v, kiln_tensor attn_mask,
                                                       bool is_causal, double scale);

/* ---- losses (mean over the batch unless noted) ------------------------------------------- */
typedef struct {
    double label_smoothing; /* 0: none */
    /* [C] or KILN_NONE. Does not consume class_weights: options are passed by value and
     * reused for every batch, so the loss takes its own reference; release it yourself. */
    kiln_tensor class_weights;
    /* PyTorch's ignore_index, when has_ignore_index: samples whose target equals it add
     * nothing, and the mean is over the others (NaN when every sample is ignored). Off by
     * default (a zeroed struct must not ignore class 0). */
    bool has_ignore_index;
    int64_t ignore_index;
} kiln_cross_entropy_options;
KILN_API kiln_cross_entropy_options kiln_cross_entropy_defaults(void);
/* logits [N, C] (consumed), targets [N] i32/i64 class indices (consumed). */
KILN_API kiln_tensor kiln_cross_entropy(kiln_tensor logits, kiln_tensor targets, kiln_cross_entropy_options o);
/* log_probs [N, C], targets [N]: -mean(log_probs[i, target_i]). */
KILN_API kiln_tensor kiln_nll_loss(kiln_tensor log_probs, kiln_tensor targets);
KILN_API kiln_tensor kiln_mse_loss(kiln_tensor prediction, kiln_tensor target);
KILN_API kiln_tensor kiln_bce_with_logits(kiln_tensor logits, kiln_tensor target);
/* mean |prediction - target| (torch's l1_loss); same shapes, float. */
KILN_API kiln_tensor kiln_l1_loss(kiln_tensor prediction, kiln_tensor target);
/* torch's smooth_l1_loss: 0.5 d^2 / beta where |d| < beta, else |d| - 0.5 beta (beta >= 0;
 * 0 is L1), and huber_loss: 0.5 d^2 where |d| < delta, else delta (|d| - 0.5 delta)
 * (delta > 0); both averaged. A bad beta or delta gives KILN_ERR_INVALID_ARGUMENT. */
KILN_API kiln_tensor kiln_smooth_l1_loss(kiln_tensor prediction, kiln_tensor target, double beta);
KILN_API kiln_tensor kiln_huber_loss(kiln_tensor prediction, kiln_tensor target, double delta);
/* torch's binary_cross_entropy on probabilities in [0, 1] (each log clamped at -100; values
 * outside [0, 1] give NaN rather than torch's error, as they are only seen when computed).
 * Prefer kiln_bce_with_logits, which is stable. */
KILN_API kiln_tensor kiln_binary_cross_entropy(kiln_tensor probabilities, kiln_tensor target);
/* torch's kl_div(input, target, reduction='mean'): input holds log-probabilities; target
 * probabilities (log-probabilities with log_target); the mean of target * (log target -
 * input) over every element, 0 where target is 0. */
KILN_API kiln_tensor kiln_kl_div(kiln_tensor input, kiln_tensor target, bool log_target);

/* ---- initialisation (in place on an existing float tensor; the seed picks the values) ---- */
typedef enum { KILN_INIT_KAIMING_UNIFORM, KILN_INIT_KAIMING_NORMAL, KILN_INIT_XAVIER_UNIFORM, KILN_INIT_XAVIER_NORMAL } kiln_init_kind;
/* Fills *t (replacing the handle) from fan-in/fan-out of its shape ([out, in, ...]).
 * Does not consume *t: it takes a pointer because it gives new values back in the same
 * variable: *t's old handle is released and replaced by a new tensor (a new leaf requiring a
 * gradient if the old one did). Module optimizers follow the module's slot; an optimizer built
 * from parameter groups keeps the old tensor. On error *t is left as it was. */
KILN_API kiln_status kiln_init(kiln_tensor *t, kiln_init_kind kind, uint64_t seed);

/* ---- call sites ------------------------------------------------------------------------- */
/* The calls that record the caller's file:line, as in core.h's list. */
#define KILN_NN_API(X) \
    X(kiln_module *, module_new, (const char *type, kiln_module_forward_fn forward, void *ctx, void (*free_ctx)(void *ctx)), (type, forward, ctx, free_ctx)) \
    X(kiln_status, module_add_parameter, (kiln_module *m, const char *name, kiln_tensor t), (m, name, t)) \
    X(kiln_status, module_add_buffer, (kiln_module *m, const char *name, kiln_tensor t), (m, name, t)) \
    X(kiln_status, module_add_child, (kiln_module *m, const char *name, kiln_module *child), (m, name, child)) \
    X(kiln_tensor, module_param, (kiln_module *m, const char *name), (m, name)) \
    X(kiln_module *, module_child, (kiln_module *m, const char *name), (m, name)) \
    X(kiln_tensor, module_forward, (kiln_module *m, kiln_tensor x), (m, x)) \
    X(kiln_tensor, dropout, (kiln_tensor x, double p, uint64_t seed), (x, p, seed)) \
    X(kiln_tensor, dropout_gen, (kiln_tensor x, double p, kiln_generator *g), (x, p, g)) \
    X(kiln_tensor, layer_norm, (kiln_tensor x, kiln_shape normalized_shape, kiln_tensor weight, kiln_tensor bias, double eps), (x, normalized_shape, weight, bias, eps)) \
    X(kiln_tensor, scaled_dot_product_attention, (kiln_tensor q, kiln_tensor k, kiln_tensor v, kiln_tensor attn_mask, bool is_causal, double scale), (q, k, v, attn_mask, is_causal, scale)) \
    X(kiln_tensor, cross_entropy, (kiln_tensor logits, kiln_tensor targets, kiln_cross_entropy_options o), (logits, targets, o)) \
    X(kiln_tensor, nll_loss, (kiln_tensor log_probs, kiln_tensor targets), (log_probs, targets)) \
    X(kiln_tensor, mse_loss, (kiln_tensor prediction, kiln_tensor target), (prediction, target)) \
    X(kiln_tensor, bce_with_logits, (kiln_tensor logits, kiln_tensor target), (logits, target)) \
    X(kiln_tensor, l1_loss, (kiln_tensor prediction, kiln_tensor target), (prediction, target)) \
    X(kiln_tensor, smooth_l1_loss, (kiln_tensor prediction, kiln_tensor target, double beta), (prediction, target, beta)) \
    X(kiln_tensor, huber_loss, (kiln_tensor prediction, kiln_tensor target, double delta), (prediction, target, delta)) \
    X(kiln_tensor, binary_cross_entropy, (kiln_tensor probabilities, kiln_tensor target), (probabilities, target)) \
    X(kiln_tensor, kl_div, (kiln_tensor input, kiln_tensor target, bool log_target), (input, target, log_target)) \
    X(kiln_status, init, (kiln_tensor *t, kiln_init_kind kind, uint64_t seed), (t, kind, seed)) \
    X(kiln_module *, sequential_new, (int n, kiln_module *const *children), (n, children)) \
    X(kiln_module *, linear_new, (int64_t in_features, int64_t out_features, bool bias, uint64_t seed), (in_features, out_features, bias, seed)) \
    X(kiln_module *, conv2d_new, (kiln_conv2d_options o, uint64_t seed), (o, seed)) \
    X(kiln_module *, max_pool2d_new, (int kernel, int stride, int padding), (kernel, stride, padding)) \
    X(kiln_module *, avg_pool2d_new, (int kernel, int stride, int padding), (kernel, stride, padding)) \
    X(kiln_module *, adaptive_avg_pool2d_new, (int out_h, int out_w), (out_h, out_w)) \
    X(kiln_module *, batch_norm2d_new, (int64_t channels, double eps, double momentum), (channels, eps, momentum)) \
    X(kiln_module *, layer_norm_new, (int64_t normalized_size, double eps, bool affine), (normalized_size, eps, affine)) \
    X(kiln_module *, dropout_new, (double p, uint64_t seed), (p, seed)) \
    X(kiln_module *, flatten_new, (int start_dim, int end_dim), (start_dim, end_dim)) \
    X(kiln_module *, embedding_new, (int64_t num_embeddings, int64_t dim, uint64_t seed), (num_embeddings, dim, seed))
KILN_NN_API(KILN__AT_DECLARE)

#if !defined(KILN_BUILDING) && !defined(KILN_NO_CALL_SITE_MACROS)
#pragma GCC system_header /* see core.h: errors in these calls name the caller's line */
#define kiln_module_new(...) KILN__AT(module_new, __VA_ARGS__)
#define kiln_module_add_parameter(...) KILN__AT(module_add_parameter, __VA_ARGS__)
#define kiln_module_add_buffer(...) KILN__AT(module_add_buffer, __VA_ARGS__)
#define kiln_module_add_child(...) KILN__AT(module_add_child, __VA_ARGS__)
#define kiln_module_param(...) KILN__AT(module_param, __VA_ARGS__)
#define kiln_module_child(...) KILN__AT(module_child, __VA_ARGS__)
#define kiln_module_forward(...) KILN__AT(module_forward, __VA_ARGS__)
#define kiln_dropout(...) KILN__AT(dropout, __VA_ARGS__)
#define kiln_dropout_gen(...) KILN__AT(dropout_gen, __VA_ARGS__)
#define kiln_layer_norm(...) KILN__AT(layer_norm, __VA_ARGS__)
#define kiln_scaled_dot_product_attention(...) KILN__AT(scaled_dot_product_attention, __VA_ARGS__)
#define kiln_cross_entropy(...) KILN__AT(cross_entropy, __VA_ARGS__)
#define kiln_nll_loss(...) KILN__AT(nll_loss, __VA_ARGS__)
#define kiln_mse_loss(...) KILN__AT(mse_loss, __VA_ARGS__)
#define kiln_bce_with_logits(...) KILN__AT(bce_with_logits, __VA_ARGS__)
#define kiln_l1_loss(...) KILN__AT(l1_loss, __VA_ARGS__)
#define kiln_smooth_l1_loss(...) KILN__AT(smooth_l1_loss, __VA_ARGS__)
#define kiln_huber_loss(...) KILN__AT(huber_loss, __VA_ARGS__)
#define kiln_binary_cross_entropy(...) KILN__AT(binary_cross_entropy, __VA_ARGS__)
#define kiln_kl_div(...) KILN__AT(kl_div, __VA_ARGS__)
#define kiln_init(...) KILN__AT(init, __VA_ARGS__)
#define kiln_sequential_new(...) KILN__AT(sequential_new, __VA_ARGS__)
#define kiln_linear_new(...) KILN__AT(linear_new, __VA_ARGS__)
#define kiln_conv2d_new(...) KILN__AT(conv2d_new, __VA_ARGS__)
#define kiln_max_pool2d_new(...) KILN__AT(max_pool2d_new, __VA_ARGS__)
#define kiln_avg_pool2d_new(...) KILN__AT(avg_pool2d_new, __VA_ARGS__)
#define kiln_adaptive_avg_pool2d_new(...) KILN__AT(adaptive_avg_pool2d_new, __VA_ARGS__)
#define kiln_batch_norm2d_new(...) KILN__AT(batch_norm2d_new, __VA_ARGS__)
#define kiln_layer_norm_new(...) KILN__AT(layer_norm_new, __VA_ARGS__)
#define kiln_dropout_new(...) KILN__AT(dropout_new, __VA_ARGS__)
#define kiln_flatten_new(...) KILN__AT(flatten_new, __VA_ARGS__)
#define kiln_embedding_new(...) KILN__AT(embedding_new, __VA_ARGS__)
#endif

#ifdef __cplusplus
}
#endif
#endif
