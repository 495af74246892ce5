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
#include "autodiff.h" /* kiln_grad_hook_fn */
#include "tensor.h" /* kiln_conv2d and the pooling ops, used with the layers */

#ifdef __cplusplus
extern "C" {
#endif

/* ---- modules ------------------------------------------------------------------------------ */
typedef struct kiln_module kiln_module;

/* Runs the module on x (consumed); returns its output. A NULL module gives a poisoned tensor. */
KILN_API kiln_tensor kiln_module_forward(kiln_module *m, kiln_tensor x);
/* Runs m's forward passes under kiln_autocast_begin(dtype) (kiln/autocast.h): KILN_BF16 or
 * KILN_F16, or KILN_F32 for off (the default). The parameters stay f32; KILN_ERR_DTYPE for
 * another dtype, KILN_ERR_NULL for a NULL module. */
KILN_API kiln_status kiln_module_set_autocast(kiln_module *m, kiln_dtype dtype);
/* Training mode (dropout active, batch norm uses and updates batch statistics) or eval. */
KILN_API void kiln_module_train(kiln_module *m, bool training);
/* Checkpointing (kiln_checkpoint in autodiff.h) of m's forward: its activations are not kept
 * for backward but recomputed there. Freeing m before that backward makes the backward fail
 * with an error naming where m was freed. KILN_ERR_NULL for a NULL m. */
KILN_API kiln_status kiln_module_set_checkpoint(kiln_module *m, bool on);
/* kiln_tensor_register_hook (autodiff.h) on each of m's parameters (not buffers), children's
 * included: the hook sees and may replace every parameter's gradient. */
KILN_API kiln_status kiln_module_register_grad_hook(kiln_module *m, kiln_grad_hook_fn hook, void *ctx);
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

/* torch.nn.Conv1d: a weight [out, in/groups, kernel] and a bias [out], on [N, C, L] inputs. */
typedef struct {
    int64_t in_channels, out_channels;
    int kernel, stride, padding, dilation, groups;
    bool bias;
} kiln_conv1d_options;
/* stride 1, padding 0, dilation 1, groups 1, with bias */
KILN_API kiln_conv1d_options kiln_conv1d_defaults(int64_t in_channels, int64_t out_channels, int kernel);
KILN_API kiln_module *kiln_conv1d_new(kiln_conv1d_options o, uint64_t seed);

/* torch.nn.ConvTranspose2d: a weight [in, out/groups, KH, KW] and a bias [out]; each output
 * padding must be smaller than the stride or the dilation of its dim (as PyTorch). */
typedef struct {
    int64_t in_channels, out_channels;
    int kernel_h, kernel_w;
    int stride_h, stride_w;
    int pad_h, pad_w;
    int output_pad_h, output_pad_w;
    int dilation_h, dilation_w;
    int groups;
    bool bias;
} kiln_conv_transpose2d_options;
/* kernel k x k, stride 1, padding 0, output padding 0, dilation 1, groups 1, with bias */
KILN_API kiln_conv_transpose2d_options kiln_conv_transpose2d_defaults(int64_t in_channels, int64_t out_channels,
                                                                      int kernel);
KILN_API kiln_module *kiln_conv_transpose2d_new(kiln_conv_transpose2d_options o, uint64_t seed);

/* torch.nn.MultiheadAttention (no dropout; key and value have embed_dim features): parameters
 * in_proj_weight [3E, E] (xavier uniform), in_proj_bias [3E] (zeros), out_proj.weight [E, E] and
 * out_proj.bias [E] (zeros), named as PyTorch names them. kiln_module_forward(m, x) is
 * self-attention without masks; kiln_multihead_attention takes the rest. */
typedef struct {
    int64_t embed_dim, num_heads; /* num_heads must divide embed_dim */
    bool bias;                    /* in_proj_bias and out_proj.bias */
    bool batch_first;             /* inputs and output [N, L, E] rather than [L, N, E] */
} kiln_multihead_attention_options;
/* with bias, batch_first false (PyTorch's defaults) */
KILN_API kiln_multihead_attention_options kiln_multihead_attention_defaults(int64_t embed_dim, int64_t num_heads);
KILN_API kiln_module *kiln_multihead_attention_new(kiln_multihead_attention_options o, uint64_t seed);

/* torch.nn.LSTM and torch.nn.GRU (no proj_size): per layer l, weight_ih_l{l} [G H, in],
 * weight_hh_l{l} [G H, H], bias_ih_l{l} and bias_hh_l{l} [G H] (G = 4 for LSTM, gates i, f, g,
 * o; G = 3 for GRU, gates r, z, n), then the same with _reverse for a bidirectional layer's
 * backward pass (whose next layer takes 2 H inputs); all uniform in +-1/sqrt(hidden_size) as
 * PyTorch. kiln_module_forward(m, x) gives the outputs from zero states; kiln_lstm and kiln_gru
 * take initial states and give the final ones. */
typedef struct {
    int64_t input_size, hidden_size;
    int num_layers;     /* 1 to 32 */
    bool bias;          /* the four bias vectors of each layer */
    bool batch_first;   /* x and the outputs [N, T, *] rather than [T, N, *]; states stay [layers, N, H] */
    bool bidirectional; /* outputs [.., 2 H] (forward then backward features); states [2 layers, N, H] */
    double dropout;     /* in [0, 1): dropout on each layer's outputs but the last, in training mode */
} kiln_rnn_options;
/* one layer, with bias, batch_first false, unidirectional, no dropout (PyTorch's defaults) */
KILN_API kiln_rnn_options kiln_rnn_defaults(int64_t input_size, int64_t hidden_size);
KILN_API kiln_module *kiln_lstm_new(kiln_rnn_options o, uint64_t seed);
KILN_API kiln_module *kiln_gru_new(kiln_rnn_options o, uint64_t seed);

/* Pools: stride 0 means "the kernel size" (PyTorch's default). Max pooling pads with -inf;
 * average pooling counts padding in its divisor. */
KILN_API kiln_module *kiln_max_pool2d_new(int kernel, int stride, int padding);
KILN_API kiln_module *kiln_avg_pool2d_new(int kernel, int stride, int padding);
KILN_API kiln_module *kiln_adaptive_avg_pool2d_new(int out_h, int out_w);
/* The same with every option of kiln_pool2d_options (tensor.h): rectangles, ceil_mode, exclude_pad. */
KILN_API kiln_module *kiln_max_pool2d_new_opts(kiln_pool2d_options o);
KILN_API kiln_module *kiln_avg_pool2d_new_opts(kiln_pool2d_options o);
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
/* torch.nn.RMSNorm(normalized_size, eps, elementwise_affine) over the last dim: runs
 * kiln_rms_norm with its "weight" (ones, f32) when affine. eps NaN: the dtype's epsilon. */
KILN_API kiln_module *kiln_rms_norm_new(int64_t normalized_size, double eps, bool affine);

/* ---- functional layer ops (consume tensor arguments; differentiable) --------------------- */
/* kiln_conv2d and the pooling ops are tensor ops: see tensor.h. layer_norm, group_norm and
 * rms_norm are with the losses below (kiln/nn_ops.h, generated from src/ir/row_table.h). */
/* Zeroes each element with probability p and scales the rest by 1/(1-p); seed picks the mask. */
KILN_API kiln_tensor kiln_dropout(kiln_tensor x, double p, uint64_t seed);
/* The same with the mask's seed drawn from g (NULL: the global generator; see tensor.h). */
KILN_API kiln_tensor kiln_dropout_gen(kiln_tensor x, double p, kiln_generator *g);
/* torch.nn.functional.embedding: the rows of weight [num_embeddings, dim] at the i32/i64
 * indices (any shape, at most 7 dims), giving indices' shape + [dim]; both consumed. An index
 * out of range fails when the gather runs, naming this call. Differentiable in weight. */
KILN_API kiln_tensor kiln_embedding(kiln_tensor indices, kiln_tensor weight);
/* kiln_batch_norm and kiln_scaled_dot_product_attention: kiln/linalg_ops.h (through tensor.h),
 * from the linear-algebra table (src/ir/linalg_table.h). */

/* torch.nn.functional.conv1d: x [N, C, L], w [O, C/groups, K], bias [O] or KILN_NONE (all
 * consumed); gives [N, O, (L + 2 padding - dilation (K - 1) - 1) / stride + 1]. Computed as
 * conv2d over a height of one, so a mismatch found past the 3-dim check is reported with that
 * unit height in the shapes.
 *
 *   kiln_tensor y = kiln_conv1d(x, kiln_ref(w), KILN_NONE, 1, 1, 1, 1);   // "same" for K = 3
 */
KILN_API kiln_tensor kiln_conv1d(kiln_tensor x, kiln_tensor w, kiln_tensor bias, int stride, int padding,
                                 int dilation, int groups);
/* torch.nn.functional.conv_transpose2d: x [N, C, H, W], w [C, O/groups, KH, KW] (PyTorch's
 * layout: input channels first), bias [O] or KILN_NONE (all consumed); gives [N, O, OH, OW]
 * with OH = (H - 1) stride_h - 2 pad_h + dilation_h (KH - 1) + output_pad_h + 1 (OW alike).
 * output_pad must be >= 0 and smaller than either the stride or the dilation of its dim. It is
 * the gradient of conv2d with respect to its input, computed by the same kernels. */
KILN_API kiln_tensor kiln_conv_transpose2d(kiln_tensor x, kiln_tensor w, kiln_tensor bias, int stride_h, int stride_w,
                                           int pad_h, int pad_w, int output_pad_h, int output_pad_w, int dilation_h,
                                           int dilation_w, int groups);

/* torch.nn.functional.interpolate on x [N, C, H, W] (consumed), in one of two ways: an output
 * size (out_h, out_w > 0, scales 0) or scale factors (scale_h, scale_w > 0, sizes 0; the output
 * is floor(H scale_h) x floor(W scale_w) and, as PyTorch with recompute_scale_factor unset,
 * pixels map through 1 / scale). Nearest takes floor(dst * in / out) (any dtype); bilinear
 * (float only) samples pixel centres, or the corner pixels' centres with align_corners, which
 * nearest rejects as PyTorch does. Differentiable with respect to x.
 *
 *   kiln_tensor up = kiln_interpolate(x, 0, 0, 2.0, 2.0, KILN_INTERP_BILINEAR, false);
 */
typedef enum { KILN_INTERP_NEAREST, KILN_INTERP_BILINEAR } kiln_interp_mode;
KILN_API kiln_tensor kiln_interpolate(kiln_tensor x, int64_t out_h, int64_t out_w, double scale_h, double scale_w,
                                      kiln_interp_mode mode, bool align_corners);
/* torch.nn.Upsample: kiln_interpolate with these arguments as a module (no parameters); a size
 * and scale factors both given, or neither, or align_corners with nearest, are refused here. */
KILN_API kiln_module *kiln_upsample_new(int64_t out_h, int64_t out_w, double scale_h, double scale_w,
                                        kiln_interp_mode mode, bool align_corners);

/* nn.MultiheadAttention's forward on m (a kiln_multihead_attention_new module, borrowed):
 * query [L, N, E], key and value [S, N, E] ([N, L, E] and [N, S, E] with batch_first), one
 * float dtype. key_padding_mask [N, S] and attn_mask [L, S] or [N * num_heads, L, S] are
 * KILN_NONE, bool (true = the key is hidden, as PyTorch's MultiheadAttention; note that
 * kiln_scaled_dot_product_attention's bool mask is the opposite) or the query's dtype (added to
 * the scores). Returns the output, shaped like query. When weights is not NULL it receives the
 * attention weights averaged over the heads, [N, L, S] (need_weights=True,
 * average_attn_weights=True), else they are not computed; KILN_NONE when the call fails. A query
 * whose keys are all hidden gets a zero output row (the weights show NaN there). Consumes every
 * tensor argument.
 *
 *   kiln_tensor w;
 *   kiln_tensor y = kiln_multihead_attention(mha, kiln_ref(x), kiln_ref(x), x, pad_mask, KILN_NONE, &w);
 */
KILN_API kiln_tensor kiln_multihead_attention(kiln_module *m, kiln_tensor query, kiln_tensor key, kiln_tensor value,
                                              kiln_tensor key_padding_mask, kiln_tensor attn_mask,
                                              kiln_tensor *weights);
/* nn.LSTM's forward on m (a kiln_lstm_new module, borrowed): x [T, N, input_size] ([N, T, ...]
 * with batch_first), h0 and c0 [num_layers * directions, N, hidden_size] or KILN_NONE (zeros).
 * Returns the last layer's outputs [T, N, directions * hidden_size] (or [N, T, ...]); *h_n and
 * *c_n (each may be NULL) receive the final states [num_layers * directions, N, hidden_size],
 * ordered as PyTorch (layer 0 forward, layer 0 backward, layer 1 ...), or KILN_NONE when the
 * call fails before running. Consumes x, h0 and c0. */
KILN_API kiln_tensor kiln_lstm(kiln_module *m, kiln_tensor x, kiln_tensor h0, kiln_tensor c0, kiln_tensor *h_n,
                               kiln_tensor *c_n);
/* nn.GRU's forward on m (a kiln_gru_new module): as kiln_lstm without the cell state. */
KILN_API kiln_tensor kiln_gru(kiln_module *m, kiln_tensor x, kiln_tensor h0, kiln_tensor *h_n);

/* ---- norms and losses (losses: the mean over the batch unless noted) ----------------------- */
/* PyTorch's reduction argument: the mean (0, the default of a zeroed options struct), the
 * sum, or none (the per-element or per-sample losses, in the input's shape). BATCHMEAN is
 * kl_div's: the sum divided by the first dim's size. The _ex form of each loss takes it; a
 * value out of range gives KILN_ERR_INVALID_ARGUMENT. */
typedef enum { KILN_REDUCTION_MEAN, KILN_REDUCTION_SUM, KILN_REDUCTION_NONE, KILN_REDUCTION_BATCHMEAN } kiln_reduction;

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
    /* MEAN (the weighted mean over the samples not ignored, as PyTorch), SUM, or NONE: [N]
     * per-sample losses, 0 for ignored samples. */
    kiln_reduction reduction;
} kiln_cross_entropy_options;
KILN_API kiln_cross_entropy_options kiln_cross_entropy_defaults(void);
/* The norms (layer, RMS, group) and the losses with their _ex forms: rows of src/ir/row_table.h,
 * their prototypes, call-site list (KILN_NN_ROW_API) and macros generated from it. The _ex
 * forms take the reduction (NONE keeps the inputs' shape; BATCHMEAN only for kl_div, torch's
 * recommended reduction for it):
 *
 *   kiln_tensor per_elem = kiln_mse_loss_ex(pred, target, KILN_REDUCTION_NONE);  // pred's shape
 *   kiln_tensor total = kiln_l1_loss_ex(pred2, target2, KILN_REDUCTION_SUM);      // 0-d
 */
#include "nn_ops.h"

/* ---- initialisation (in place on an existing float tensor; the seed picks the values) ---- */
typedef enum { KILN_INIT_KAIMING_UNIFORM, KILN_INIT_KAIMING_NORMAL, KILN_INIT_XAVIER_UNIFORM, KILN_INIT_XAVIER_NORMAL } kiln_init_kind;
/* Fills *t (replacing the handle) from fan-in/fan-out of its shape ([out, in, ...]).
 * Does not consume *t: it takes a pointer because it gives new values back in the same
 * variable: *t's old handle is released and replaced by a new tensor (a new leaf requiring a
 * gradient if the old one did). Module optimizers follow the module's slot; an optimizer built
 * from parameter groups keeps the old tensor. On error *t is left as it was. */
KILN_API kiln_status kiln_init(kiln_tensor *t, kiln_init_kind kind, uint64_t seed);

/* ---- dynamic quantization (PyTorch's quantize_dynamic) ----------------------------------- */
/* Replaces, in place, every Linear in m's tree by an int8 one for inference:
 *
 *   kiln_quantize_dynamic(model, KILN_QUANT_I8);   // blocking: reads the f32 weights once
 *   kiln_tensor y = kiln_module_forward(model, x); // f32 in, f32 out
 *
 * The weight becomes int8 with a scale per output channel and block of 32 inputs, symmetric
 * (buffers "weight_int8_g16": [out, ceil(in/4)] i32, four int8 values to an element, and
 * "weight_scale_k32": [out, ceil(in/32)] f32, both in the kernel's interleaved order; the bias
 * stays f32, as a buffer); each block of 32 values of an input row is quantized with its own
 * scale at run time and the product accumulates in int32 (AVX512-VNNI, AVX2 or plain C). The quantized module has no parameters and is not
 * differentiable: optimizers refuse it (kiln_module_is_quantized). On error, a Linear already
 * quantized stays so; the one that failed is unchanged. */
/* Weight-only block formats, ggml's q8_0 and q4_0 (KILN_QUANT_Q8_0, KILN_QUANT_Q4_0): each block
 * of 32 inputs of an output row has one f32 scale and 32 integers, in [-127, 127] or [-8, 7]
 * (buffers "weight_q8_0" [out, ceil(in/32), 8] or "weight_q4_0" [out, ceil(in/32), 4] i32 and
 * "weight_scale_b32" [out, ceil(in/32)] f32); activations stay f32 and the product turns each
 * weight block into f32 in registers: less memory and a faster one-sentence product than f32,
 * no activation rounding. Quantizing a module again leaves its quantized layers as they are. */
typedef enum { KILN_QUANT_I8 = 1, KILN_QUANT_Q8_0 = 2, KILN_QUANT_Q4_0 = 3 } kiln_quant_type;
KILN_API kiln_status kiln_quantize_dynamic(kiln_module *m, kiln_quant_type type);
KILN_API bool kiln_module_is_quantized(kiln_module *m); /* any quantized layer in m's tree */

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
    X(kiln_status, module_set_autocast, (kiln_module *m, kiln_dtype dtype), (m, dtype)) \
    X(kiln_tensor, dropout, (kiln_tensor x, double p, uint64_t seed), (x, p, seed)) \
    X(kiln_tensor, dropout_gen, (kiln_tensor x, double p, kiln_generator *g), (x, p, g)) \
    X(kiln_status, init, (kiln_tensor *t, kiln_init_kind kind, uint64_t seed), (t, kind, seed)) \
    X(kiln_module *, sequential_new, (int n, kiln_module *const *children), (n, children)) \
    X(kiln_module *, linear_new, (int64_t in_features, int64_t out_features, bool bias, uint64_t seed), (in_features, out_features, bias, seed)) \
    X(kiln_module *, conv2d_new, (kiln_conv2d_options o, uint64_t seed), (o, seed)) \
    X(kiln_module *, max_pool2d_new, (int kernel, int stride, int padding), (kernel, stride, padding)) \
    X(kiln_module *, avg_pool2d_new, (int kernel, int stride, int padding), (kernel, stride, padding)) \
    X(kiln_module *, adaptive_avg_pool2d_new, (int out_h, int out_w), (out_h, out_w)) \
    X(kiln_module *, max_pool2d_new_opts, (kiln_pool2d_options o), (o)) \
    X(kiln_module *, avg_pool2d_new_opts, (kiln_pool2d_options o), (o)) \
    X(kiln_module *, batch_norm2d_new, (int64_t channels, double eps, double momentum), (channels, eps, momentum)) \
    X(kiln_module *, layer_norm_new, (int64_t normalized_size, double eps, bool affine), (normalized_size, eps, affine)) \
    X(kiln_module *, dropout_new, (double p, uint64_t seed), (p, seed)) \
    X(kiln_module *, flatten_new, (int start_dim, int end_dim), (start_dim, end_dim)) \
    X(kiln_module *, embedding_new, (int64_t num_embeddings, int64_t dim, uint64_t seed), (num_embeddings, dim, seed)) \
    X(kiln_tensor, conv1d, (kiln_tensor x, kiln_tensor w, kiln_tensor bias, int stride, int padding, int dilation, int groups), (x, w, bias, stride, padding, dilation, groups)) \
    X(kiln_tensor, conv_transpose2d, (kiln_tensor x, kiln_tensor w, kiln_tensor bias, int stride_h, int stride_w, int pad_h, int pad_w, int output_pad_h, int output_pad_w, int dilation_h, int dilation_w, int groups), (x, w, bias, stride_h, stride_w, pad_h, pad_w, output_pad_h, output_pad_w, dilation_h, dilation_w, groups)) \
    X(kiln_module *, conv1d_new, (kiln_conv1d_options o, uint64_t seed), (o, seed)) \
    X(kiln_module *, conv_transpose2d_new, (kiln_conv_transpose2d_options o, uint64_t seed), (o, seed)) \
    X(kiln_tensor, interpolate, (kiln_tensor x, int64_t out_h, int64_t out_w, double scale_h, double scale_w, kiln_interp_mode mode, bool align_corners), (x, out_h, out_w, scale_h, scale_w, mode, align_corners)) \
    X(kiln_module *, upsample_new, (int64_t out_h, int64_t out_w, double scale_h, double scale_w, kiln_interp_mode mode, bool align_corners), (out_h, out_w, scale_h, scale_w, mode, align_corners)) \
    X(kiln_module *, multihead_attention_new, (kiln_multihead_attention_options o, uint64_t seed), (o, seed)) \
    X(kiln_module *, lstm_new, (kiln_rnn_options o, uint64_t seed), (o, seed)) \
    X(kiln_module *, gru_new, (kiln_rnn_options o, uint64_t seed), (o, seed)) \
    X(kiln_tensor, multihead_attention, (kiln_module *m, kiln_tensor query, kiln_tensor key, kiln_tensor value, kiln_tensor key_padding_mask, kiln_tensor attn_mask, kiln_tensor *weights), (m, query, key, value, key_padding_mask, attn_mask, weights)) \
    X(kiln_tensor, lstm, (kiln_module *m, kiln_tensor x, kiln_tensor h0, kiln_tensor c0, kiln_tensor *h_n, kiln_tensor *c_n), (m, x, h0, c0, h_n, c_n)) \
    X(kiln_tensor, gru, (kiln_module *m, kiln_tensor x, kiln_tensor h0, kiln_tensor *h_n), (m, x, h0, h_n)) \
    X(kiln_tensor, embedding, (kiln_tensor indices, kiln_tensor weight), (indices, weight)) \
    X(kiln_module *, rms_norm_new, (int64_t normalized_size, double eps, bool affine), (normalized_size, eps, affine)) \
    X(kiln_status, module_register_grad_hook, (kiln_module *m, kiln_grad_hook_fn hook, void *ctx), (m, hook, ctx)) \
    X(kiln_status, quantize_dynamic, (kiln_module *m, kiln_quant_type type), (m, type))
KILN_NN_API(KILN__AT_DECLARE)

#if !defined(KILN_BUILDING) && !defined(KILN_NO_CALL_SITE_MACROS)
#pragma GCC system_header /* see core.h: errors in these calls name the caller's line */
#define kiln_module_new(...) KILN__AT(module_new, __VA_ARGS__)
#define kiln_module_add_parameter(...) KILN__AT(module_add_parameter, __VA_ARGS__)
#define kiln_module_add_buffer(...) KILN__AT(module_add_buffer, __VA_ARGS__)
#define kiln_module_add_child(...) KILN__AT(module_add_child, __VA_ARGS__)
#define kiln_module_param(...) KILN__AT(module_param, __VA_ARGS__)
#define kiln_module_child(...) KILN__AT(module_child, __VA_ARGS__)
#define kiln_module_register_grad_hook(...) KILN__AT(module_register_grad_hook, __VA_ARGS__)
#define kiln_module_forward(...) KILN__AT(module_forward, __VA_ARGS__)
#define kiln_module_set_autocast(...) KILN__AT(module_set_autocast, __VA_ARGS__)
#define kiln_dropout(...) KILN__AT(dropout, __VA_ARGS__)
#define kiln_dropout_gen(...) KILN__AT(dropout_gen, __VA_ARGS__)
#define kiln_init(...) KILN__AT(init, __VA_ARGS__)
#define kiln_sequential_new(...) KILN__AT(sequential_new, __VA_ARGS__)
#define kiln_linear_new(...) KILN__AT(linear_new, __VA_ARGS__)
#define kiln_conv2d_new(...) KILN__AT(conv2d_new, __VA_ARGS__)
#define kiln_max_pool2d_new(...) KILN__AT(max_pool2d_new, __VA_ARGS__)
#define kiln_avg_pool2d_new(...) KILN__AT(avg_pool2d_new, __VA_ARGS__)
#define kiln_adaptive_avg_pool2d_new(...) KILN__AT(adaptive_avg_pool2d_new, __VA_ARGS__)
#define kiln_max_pool2d_new_opts(...) KILN__AT(max_pool2d_new_opts, __VA_ARGS__)
#define kiln_avg_pool2d_new_opts(...) KILN__AT(avg_pool2d_new_opts, __VA_ARGS__)
#define kiln_batch_norm2d_new(...) KILN__AT(batch_norm2d_new, __VA_ARGS__)
#define kiln_layer_norm_new(...) KILN__AT(layer_norm_new, __VA_ARGS__)
#define kiln_dropout_new(...) KILN__AT(dropout_new, __VA_ARGS__)
#define kiln_flatten_new(...) KILN__AT(flatten_new, __VA_ARGS__)
#define kiln_embedding_new(...) KILN__AT(embedding_new, __VA_ARGS__)
#define kiln_conv1d(...) KILN__AT(conv1d, __VA_ARGS__)
#define kiln_conv_transpose2d(...) KILN__AT(conv_transpose2d, __VA_ARGS__)
#define kiln_conv1d_new(...) KILN__AT(conv1d_new, __VA_ARGS__)
#define kiln_conv_transpose2d_new(...) KILN__AT(conv_transpose2d_new, __VA_ARGS__)
#define kiln_interpolate(...) KILN__AT(interpolate, __VA_ARGS__)
#define kiln_upsample_new(...) KILN__AT(upsample_new, __VA_ARGS__)
#define kiln_multihead_attention_new(...) KILN__AT(multihead_attention_new, __VA_ARGS__)
#define kiln_lstm_new(...) KILN__AT(lstm_new, __VA_ARGS__)
#define kiln_gru_new(...) KILN__AT(gru_new, __VA_ARGS__)
#define kiln_multihead_attention(...) KILN__AT(multihead_attention, __VA_ARGS__)
#define kiln_lstm(...) KILN__AT(lstm, __VA_ARGS__)
#define kiln_gru(...) KILN__AT(gru, __VA_ARGS__)
#define kiln_embedding(...) KILN__AT(embedding, __VA_ARGS__)
#define kiln_rms_norm_new(...) KILN__AT(rms_norm_new, __VA_ARGS__)
#define kiln_quantize_dynamic(...) KILN__AT(quantize_dynamic, __VA_ARGS__)
#endif

#ifdef __cplusplus
}
#endif
/* The free calls record their file:line too: a later use of the freed object names it. */
KILN__FREE_AT_DECLARE(kiln_module, module_free)
#if !defined(KILN_BUILDING) && !defined(KILN_NO_CALL_SITE_MACROS)
#define kiln_module_free(...) KILN__AT(module_free, __VA_ARGS__)
#endif

#endif
