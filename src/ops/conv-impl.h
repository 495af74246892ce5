/* 2-d convolution and pooling: the tensor-level ops (src/ops/conv.c, src/ops/pool.c); their
 * autodiff decorators are declared in autodiff/autodiff-impl.h. Like every kiln__t_* function they consume
 * the owned references they are given (NULL means "that argument already failed").
 *
 *   kiln__conv2d_params p = {.stride_h = 1, .stride_w = 1, .dilation_h = 1, .dilation_w = 1, .groups = 1};
 *   kiln__tensor *y = kiln__t_conv2d(c, x, w, NULL, false, &p);   // x [N,C,H,W], w [O,C,KH,KW]
 */
#ifndef KILN_OPS_CONV_IMPL_H
#define KILN_OPS_CONV_IMPL_H

#include "ir/pool_params.h"
#include "kiln/tensor.h"
#include "ops/ops-impl.h"

typedef struct {
    int stride_h, stride_w, pad_h, pad_w, dilation_h, dilation_w, groups;
} kiln__conv2d_params;

/* Max and average pooling over kernel_h x kernel_w windows; adaptive average pooling sets
 * `adaptive` and out_h/out_w, and ignores the window fields. ceil_mode and exclude_pad as in
 * kiln_pool2d_options (tensor.h). */
typedef struct {
    int kernel_h, kernel_w, stride_h, stride_w, pad_h, pad_w;
    bool adaptive;
    int out_h, out_w;
    bool ceil_mode, exclude_pad;
} kiln__pool2d_params;

/* A window's params; a stride of 0 means "the kernel size" (PyTorch's stride=None). */
static inline kiln__pool2d_params kiln__pool2d_window(int kernel_h, int kernel_w, int stride_h, int stride_w, int pad_h,
                                                      int pad_w) {
    return (kiln__pool2d_params){kernel_h, kernel_w, stride_h ? stride_h : kernel_h, stride_w ? stride_w : kernel_w,
                                 pad_h, pad_w, false, 0, 0, false, false};
}

/* The params of the public options (kiln_pool2d_options, tensor.h). */
static inline kiln__pool2d_params kiln__pool2d_of(kiln_pool2d_options o) {
    kiln__pool2d_params p = kiln__pool2d_window(o.kernel_h, o.kernel_w, o.stride_h, o.stride_w, o.pad_h, o.pad_w);
    p.ceil_mode = o.ceil_mode, p.exclude_pad = o.exclude_pad;
    return p;
}

/* True when t is a floating-point tensor of ndim dims; otherwise fails c naming `what`. */
bool kiln__check_float_input(kiln__opctx *c, const kiln__tensor *t, const char *what, int ndim);

/* x [N, C, H, W], w [O, C/groups, KH, KW], bias [O] (read only when has_bias). Checks every
 * argument and reports errors under c->name. */
kiln__tensor *kiln__t_conv2d(kiln__opctx *c, kiln__tensor *x, kiln__tensor *w, kiln__tensor *bias, bool has_bias,
                             const kiln__conv2d_params *p);
/* The gradients of conv2d: dx [N, C, h, w] from dy [N, O, OH, OW] and the weight; dw
 * [O, C/groups, kh, kw] from dy and the input. */
kiln__tensor *kiln__t_conv2d_backward_input(kiln__opctx *c, kiln__tensor *dy, kiln__tensor *w,
                                            const kiln__conv2d_params *p, int64_t h, int64_t w_);
kiln__tensor *kiln__t_conv2d_backward_weight(kiln__opctx *c, kiln__tensor *dy, kiln__tensor *x,
                                             const kiln__conv2d_params *p, int64_t kh, int64_t kw);

/* torch.nn.functional.conv_transpose2d: x [N, C, H, W], w [C, O/groups, KH, KW], bias [O] (read
 * only when has_bias), output_padding out_pad_h/w (each smaller than the stride or the dilation);
 * computed as conv2d's input gradient. */
kiln__tensor *kiln__t_conv_transpose2d(kiln__opctx *c, kiln__tensor *x, kiln__tensor *w, kiln__tensor *bias,
                                       bool has_bias, const kiln__conv2d_params *p, int out_pad_h, int out_pad_w);

/* Max pooling; when indices is not NULL it receives the argmax of each window (i64, into the
 * flattened H * W of its plane), which the backward scatters through. */
kiln__tensor *kiln__t_max_pool2d(kiln__opctx *c, kiln__tensor *x, const kiln__pool2d_params *p,
                                 kiln__tensor **indices);
kiln__tensor *kiln__t_max_pool2d_backward(kiln__opctx *c, kiln__tensor *dy, kiln__tensor *indices, int64_t h,
                                          int64_t w);
/* Average pooling (the padding counted in the divisor unless exclude_pad) or adaptive average pooling. */
kiln__tensor *kiln__t_avg_pool2d(kiln__opctx *c, kiln__tensor *x, const kiln__pool2d_params *p);
kiln__tensor *kiln__t_avg_pool2d_backward(kiln__opctx *c, kiln__tensor *dy, const kiln__pool2d_params *p, int64_t h,
                                          int64_t w);

#endif
