/* kiln's linear-algebra ops (the products, the convolution, attention, batch norm and the pools):
 * generated from src/ir/linalg_table.h by scripts/gen_optable.py; do not edit (edit the row, then
 * run the script). Included by kiln/tensor.h, after kiln_pool2d_options. Every op consumes its
 * tensor arguments (batch norm's running statistics excepted), is differentiable in its float
 * ones, and gives a poisoned tensor naming the op and the caller's line on bad input.
 *
 *   kiln_tensor w = kiln_randn(KILN_CPU, KILN_F32, KILN_SHAPE(10, 784), 1);
 *   kiln_tensor h = kiln_linear(kiln_ref(x), kiln_ref(w), KILN_NONE);  // x [.., 784] -> [.., 10]; x, w kept
 *   kiln_tensor back = kiln_matmul(h, w);                               // [.., 10] @ [10, 784]; h, w consumed
 */
#ifndef KILN_LINALG_OPS_H
#define KILN_LINALG_OPS_H

#include "kiln/core.h"

#ifdef __cplusplus
extern "C" {
#endif

/* torch.matmul: 1-d operands promoted, batch dims broadcast. The products and the convolution
 * take floating-point operands of one dtype (as PyTorch's: f32 @ f64 is KILN_ERR_DTYPE;
 * kiln_cast one of them). */
KILN_API kiln_tensor kiln_matmul(kiln_tensor a, kiln_tensor b);
/* torch.bmm: [B, n, k] @ [B, k, m], no broadcasting */
KILN_API kiln_tensor kiln_bmm(kiln_tensor a, kiln_tensor b);
/* torch.dot: 1-d a and b of one length -> 0-d */
KILN_API kiln_tensor kiln_dot(kiln_tensor a, kiln_tensor b);
/* torch.outer: 1-d [n] and [m] -> [n, m] */
KILN_API kiln_tensor kiln_outer(kiln_tensor a, kiln_tensor b);
/* torch.addmm: beta * input + alpha * (m1 @ m2). For 2-d m1 [n, k], m2 [k, m] and input
 * broadcastable to [n, m], of the matrices' dtype; beta 0 ignores input's values, NaN included
 * (as PyTorch); beta and alpha finite. */
KILN_API kiln_tensor kiln_addmm(kiln_tensor input, kiln_tensor m1, kiln_tensor m2, double beta, double alpha);
/* x @ w^T + bias; w [out, in], bias [out] or KILN_NONE */
KILN_API kiln_tensor kiln_linear(kiln_tensor x, kiln_tensor w, kiln_tensor bias);
/* x [N, C, H, W], w [O, C/groups, KH, KW], bias [O] or KILN_NONE */
KILN_API kiln_tensor kiln_conv2d(kiln_tensor x, kiln_tensor w, kiln_tensor bias, int stride_h, int stride_w, int pad_h,
                                 int pad_w, int dilation_h, int dilation_w, int groups);
/* softmax(q k^T * scale + mask) v (torch.nn.functional.scaled_dot_product_attention). For q
 * [..., L, E], k [..., S, E], v [..., S, Ev] (batch dims broadcast; one float dtype) giving
 * [..., L, Ev]. attn_mask: KILN_NONE, bool (true = attend, as PyTorch) or q's dtype (added to
 * the scores), broadcastable to [..., L, S]. is_causal: query i attends keys 0..i (top-left
 * aligned, also when L != S); it cannot be combined with attn_mask (as PyTorch). scale <= 0 or
 * NaN means the default 1/sqrt(E). A row whose keys are all masked gives zeros with zero
 * gradients (PyTorch >= 2.5), not NaN. All tensors are consumed; a float mask gets a gradient.
 * When no input is tracked (inference) on the CPU, f32/f64, it runs as one fused kernel (the
 * scores never a tensor; with a mask, k and v must be views of one storage, as a joint QKV
 * projection gives) and returns a view laid out [..., L, heads, Ev]; otherwise composed ops. */
KILN_API kiln_tensor kiln_scaled_dot_product_attention(kiln_tensor q, kiln_tensor k, kiln_tensor v,
                                                       kiln_tensor attn_mask, bool is_causal, double scale);
/* x [N, C, ...] normalised per channel (torch.nn.functional.batch_norm). y = (x - mean) /
 * sqrt(var + eps) * weight + bias, with weight and bias [C] or KILN_NONE (consumed). training:
 * the batch's mean and biased variance are used, and when running_mean and running_var are not
 * NULL they are updated, running = (1 - momentum) * running + momentum * batch (the unbiased
 * variance, as PyTorch), in their own dtype; otherwise (eval) the running statistics are used
 * and must be given. The running statistics are float [C] handles passed by pointer and not
 * consumed: an update replaces *running_mean and *running_var with new handles (the old ones
 * released), as kiln_init does; on error they are left as they were. Training needs more than
 * one value per channel. Differentiable in x, weight and bias. */
KILN_API kiln_tensor kiln_batch_norm(kiln_tensor x, kiln_tensor *running_mean, kiln_tensor *running_var,
                                     kiln_tensor weight, kiln_tensor bias, bool training, double momentum, double eps);
/* torch.nn.functional.max_pool2d: x [N, C, H, W], the largest value of each kernel_h x kernel_w
 * window. The pools' windows move by stride (0: the kernel's size, PyTorch's stride=None) over x
 * padded by pad_h, pad_w (at most half the kernel; -inf for max, zeros counted in the average's
 * divisor): out = (in + 2 pad - kernel) / stride + 1, rounded down. Differentiable in x. */
KILN_API kiln_tensor kiln_max_pool2d(kiln_tensor x, int kernel_h, int kernel_w, int stride_h, int stride_w, int pad_h,
                                     int pad_w);
/* torch.nn.functional.avg_pool2d: x [N, C, H, W], the mean of each window (as max_pool2d's) */
KILN_API kiln_tensor kiln_avg_pool2d(kiln_tensor x, int kernel_h, int kernel_w, int stride_h, int stride_w, int pad_h,
                                     int pad_w);
/* torch.nn.functional.adaptive_avg_pool2d: x [N, C, H, W] -> [N, C, out_h, out_w], PyTorch's
 * windows */
KILN_API kiln_tensor kiln_adaptive_avg_pool2d(kiln_tensor x, int out_h, int out_w);
/* max_pool2d with the options of PyTorch's MaxPool2d beyond the window (kiln_pool2d_options,
 * kiln/tensor.h). ceil_mode rounds the output size up (a last window may hang past the input,
 * but never starts in the trailing padding alone; the part past the padding is never counted);
 * exclude_pad is refused (average pooling only). */
KILN_API kiln_tensor kiln_max_pool2d_opts(kiln_tensor x, kiln_pool2d_options o);
/* avg_pool2d with ceil_mode and exclude_pad (kiln_pool2d_options, kiln/tensor.h). exclude_pad
 * (PyTorch's count_include_pad=False) divides each window by its count of input elements instead
 * of its size in the padded input. */
KILN_API kiln_tensor kiln_avg_pool2d_opts(kiln_tensor x, kiln_pool2d_options o);

/* The calls that record the caller's file:line, as in core.h's list: the ones defined in the
 * API layer (src/api/) and in the nn layer (src/nn/), by the rows' layer column. */
#define KILN_LINALG_API(X) \
    X(kiln_tensor, matmul, (kiln_tensor a, kiln_tensor b), (a, b)) \
    X(kiln_tensor, bmm, (kiln_tensor a, kiln_tensor b), (a, b)) \
    X(kiln_tensor, dot, (kiln_tensor a, kiln_tensor b), (a, b)) \
    X(kiln_tensor, outer, (kiln_tensor a, kiln_tensor b), (a, b)) \
    X(kiln_tensor, addmm, (kiln_tensor input, kiln_tensor m1, kiln_tensor m2, double beta, double alpha), (input, m1, m2, beta, alpha)) \
    X(kiln_tensor, linear, (kiln_tensor x, kiln_tensor w, kiln_tensor bias), (x, w, bias)) \
    X(kiln_tensor, conv2d, (kiln_tensor x, kiln_tensor w, kiln_tensor bias, int stride_h, int stride_w, int pad_h, int pad_w, int dilation_h, int dilation_w, int groups), (x, w, bias, stride_h, stride_w, pad_h, pad_w, dilation_h, dilation_w, groups)) \
    X(kiln_tensor, max_pool2d, (kiln_tensor x, int kernel_h, int kernel_w, int stride_h, int stride_w, int pad_h, int pad_w), (x, kernel_h, kernel_w, stride_h, stride_w, pad_h, pad_w)) \
    X(kiln_tensor, avg_pool2d, (kiln_tensor x, int kernel_h, int kernel_w, int stride_h, int stride_w, int pad_h, int pad_w), (x, kernel_h, kernel_w, stride_h, stride_w, pad_h, pad_w)) \
    X(kiln_tensor, adaptive_avg_pool2d, (kiln_tensor x, int out_h, int out_w), (x, out_h, out_w)) \
    X(kiln_tensor, max_pool2d_opts, (kiln_tensor x, kiln_pool2d_options o), (x, o)) \
    X(kiln_tensor, avg_pool2d_opts, (kiln_tensor x, kiln_pool2d_options o), (x, o))
KILN_LINALG_API(KILN__AT_DECLARE)
#define KILN_NN_LINALG_API(X) \
    X(kiln_tensor, scaled_dot_product_attention, (kiln_tensor q, kiln_tensor k, kiln_tensor v, kiln_tensor attn_mask, bool is_causal, double scale), (q, k, v, attn_mask, is_causal, scale)) \
    X(kiln_tensor, batch_norm, (kiln_tensor x, kiln_tensor *running_mean, kiln_tensor *running_var, kiln_tensor weight, kiln_tensor bias, bool training, double momentum, double eps), (x, running_mean, running_var, weight, bias, training, momentum, eps))
KILN_NN_LINALG_API(KILN__AT_DECLARE)

#if !defined(KILN_BUILDING) && !defined(KILN_NO_CALL_SITE_MACROS)
#pragma GCC system_header /* see core.h: errors in these calls name the caller's line */
#define kiln_matmul(...) KILN__AT(matmul, __VA_ARGS__)
#define kiln_bmm(...) KILN__AT(bmm, __VA_ARGS__)
#define kiln_dot(...) KILN__AT(dot, __VA_ARGS__)
#define kiln_outer(...) KILN__AT(outer, __VA_ARGS__)
#define kiln_addmm(...) KILN__AT(addmm, __VA_ARGS__)
#define kiln_linear(...) KILN__AT(linear, __VA_ARGS__)
#define kiln_conv2d(...) KILN__AT(conv2d, __VA_ARGS__)
#define kiln_scaled_dot_product_attention(...) KILN__AT(scaled_dot_product_attention, __VA_ARGS__)
#define kiln_batch_norm(...) KILN__AT(batch_norm, __VA_ARGS__)
#define kiln_max_pool2d(...) KILN__AT(max_pool2d, __VA_ARGS__)
#define kiln_avg_pool2d(...) KILN__AT(avg_pool2d, __VA_ARGS__)
#define kiln_adaptive_avg_pool2d(...) KILN__AT(adaptive_avg_pool2d, __VA_ARGS__)
#define kiln_max_pool2d_opts(...) KILN__AT(max_pool2d_opts, __VA_ARGS__)
#define kiln_avg_pool2d_opts(...) KILN__AT(avg_pool2d_opts, __VA_ARGS__)
#endif

#ifdef __cplusplus
}
#endif
#endif
