/* The conv2d tensor ops (torch.nn.functional.conv2d semantics: stride, zero padding,
 * dilation, groups) and their gradients.
 *
 * The op layer checks shapes, promotes float dtypes (f16/bf16 go to the CPU kernel as they are,
 * which sums their products in f32; other devices compute them in f32 and cast back) and hands the kernels views they can use as they are: the input image may have any
 * strides (im2col reads it in place), the weight and dy are made dense. */
#include <math.h>
#include <stdio.h>

#include "kiln/tensor.h"
#include "ops/conv-impl.h"

bool kiln__check_float_input(kiln__opctx *c, const kiln__tensor *t, const char *what, int ndim) {
    char s[128];
    if (!kiln__dtype_is_float(t->dtype)) {
        kiln__fail(c, KILN_ERR_DTYPE, "%s must be a floating-point tensor (f32, f64, f16, bf16), got %s", what,
                   kiln_dtype_name(t->dtype));
        return false;
    }
    if (t->ndim != ndim) {
        kiln__fail(c, KILN_ERR_SHAPE, "%s must have %d dims%s, got %s", what, ndim, ndim == 4 ? " [N, C, H, W]" : "",
                   kiln__shape_str(s, sizeof s, t->ndim, t->shape));
        return false;
    }
    return true;
}

/* Queues one of the three conv kernels on a (x or dy) and b (w or x), with an optional bias,
 * into a fresh output of `shape`. Operands are cast to the compute dtype and made dense where
 * the kernel indexes them densely; the result comes back in the promoted dtype. Consumes a, b
 * and bias. */
static kiln__tensor *conv_run(kiln__opctx *c, kiln__opcode code, kiln__tensor *a, kiln__tensor *b, kiln__tensor *bias,
                              const int64_t *shape, const kiln__conv2d_params *p) {
    kiln_dtype rd = kiln__dtype_promote(a->dtype, b->dtype);
    if (bias) rd = kiln__dtype_promote(rd, bias->dtype);
    kiln_device dev = a->device;
    /* bf16/f16 operands reach the CPU's kernel as they are (oneDNN's bf16 conv sums their
     * products in f32 where the CPU has AVX512-BF16, else the kernel widens them), and the
     * result comes back in their dtype, as PyTorch's; other devices get them widened */
    kiln_dtype kd = (rd == KILN_BF16 || rd == KILN_F16) && dev == KILN_CPU ? rd : kiln__dtype_compute(rd);
    a = kiln__t_cast(c, a, kd);
    b = kiln__t_cast(c, b, kd);
    if (code != KILN__OP_CONV2D) a = kiln__t_contiguous(c, a);              /* dy */
    if (code != KILN__OP_CONV2D_BACKWARD_WEIGHT) b = kiln__t_contiguous(c, b); /* w */
    bool has_bias = bias != NULL;
    if (has_bias) bias = kiln__t_cast(c, bias, kd);
    if (!a || !b || (has_bias && !bias)) return kiln__drop(3, a, b, bias), NULL;
    kiln__tensor *out = kiln__t_empty(c, dev, kd, 4, shape);
    if (out) {
        kiln__op op;
        kiln__op_init(&op, code, c->name);
        op.in[0] = kiln__view_of(a);
        op.in[1] = kiln__view_of(b);
        op.n_in = 2;
        if (has_bias) op.in[op.n_in++] = kiln__view_of(bias);
        op.out[0] = kiln__view_of(out);
        op.n_out = 1;
        op.p.i[0] = p->stride_h, op.p.i[1] = p->stride_w, op.p.i[2] = p->pad_h, op.p.i[3] = p->pad_w;
        op.pi[0] = p->dilation_h, op.pi[1] = p->dilation_w, op.pi[2] = p->groups, op.pi[3] = 0;
        if (!kiln__t_submit(c, &op, dev)) kiln__tensor_release(out), out = NULL;
    }
    kiln__drop(3, a, b, bias);
    return out && out->dtype != rd ? kiln__t_cast(c, out, rd) : out;
}

/* Output size of one spatial dim, or -1 when the dilated kernel does not fit the padded input
 * (a span too large to compute does not fit either). */
static int64_t out_size(int64_t in, int64_t k, int64_t stride, int64_t pad, int64_t dilation) {
    int64_t span, room = in + 2 * pad; /* dims < 2^59 and pad < 2^31: no overflow */
    if (__builtin_mul_overflow(dilation, k - 1, &span) || span == INT64_MAX) return -1;
    span += 1;
    return room < span ? -1 : (room - span) / stride + 1;
}

static bool check_params(kiln__opctx *c, const kiln__conv2d_params *p) {
    if (p->stride_h >= 1 && p->stride_w >= 1 && p->dilation_h >= 1 && p->dilation_w >= 1 && p->pad_h >= 0 &&
        p->pad_w >= 0 && p->groups >= 1)
        return true;
    kiln__fail(c, KILN_ERR_INVALID_ARGUMENT,
               "stride (%d, %d) and dilation (%d, %d) must be >= 1, padding (%d, %d) >= 0 and groups (%d) >= 1",
               p->stride_h, p->stride_w, p->dilation_h, p->dilation_w, p->pad_h, p->pad_w, p->groups);
    return false;
}

/* Shapes of x, w and bias against each other and the parameters; the output shape. */
static bool check_shapes(kiln__opctx *c, const kiln__tensor *x, const kiln__tensor *w, const kiln__tensor *bias,
                         const kiln__conv2d_params *p, int64_t *shape) {
    char sx[128], sw[128], sb[128];
    kiln__shape_str(sx, sizeof sx, x->ndim, x->shape);
    kiln__shape_str(sw, sizeof sw, w->ndim, w->shape);
    int64_t in_c = x->shape[1], out_c = w->shape[0], groups = p->groups;
    if (out_c % groups) {
        kiln__fail(c, KILN_ERR_INVALID_ARGUMENT, "groups (%d) must divide the output channels of weight %s", p->groups,
                   sw);
        return false;
    }
    int64_t grouped_in;
    if (__builtin_mul_overflow(w->shape[1], groups, &grouped_in) || grouped_in != in_c) {
        kiln__fail(c, KILN_ERR_SHAPE, "weight %s expects %lld input channels per group x %d groups, input %s has %lld",
                   sw, (long long)w->shape[1], p->groups, sx, (long long)in_c);
        return false;
    }
    if (bias && (bias->ndim != 1 || bias->shape[0] != out_c)) {
        kiln__fail(c, KILN_ERR_SHAPE, "bias %s does not match weight %s: it needs [%lld]",
                   kiln__shape_str(sb, sizeof sb, bias->ndim, bias->shape), sw, (long long)out_c);
        return false;
    }
    int64_t oh = out_size(x->shape[2], w->shape[2], p->stride_h, p->pad_h, p->dilation_h);
    int64_t ow = out_size(x->shape[3], w->shape[3], p->stride_w, p->pad_w, p->dilation_w);
    if (w->shape[2] < 1 || w->shape[3] < 1 || oh < 1 || ow < 1) {
        kiln__fail(c, KILN_ERR_SHAPE, "kernel of weight %s (dilation %d, %d) does not fit input %s padded by (%d, %d)",
                   sw, p->dilation_h, p->dilation_w, sx, p->pad_h, p->pad_w);
        return false;
    }
    shape[0] = x->shape[0], shape[1] = out_c, shape[2] = oh, shape[3] = ow;
    return true;
}

kiln__tensor *kiln__t_conv2d(kiln__opctx *c, kiln__tensor *x, kiln__tensor *w, kiln__tensor *bias, bool has_bias,
                             const kiln__conv2d_params *p) {
    int64_t shape[4];
    if (!kiln__ok(c, x) || !kiln__ok(c, w) || (has_bias && !kiln__ok(c, bias)) || !kiln__same_device(c, x, w) ||
        (has_bias && !kiln__same_device(c, x, bias)) || !kiln__check_float_input(c, x, "input", 4) ||
        !kiln__check_float_input(c, w, "weight", 4) || (has_bias && !kiln__check_float_input(c, bias, "bias", 1)) ||
        !kiln__same_dtype(c, x, w, has_bias ? bias : NULL) || !check_params(c, p) ||
        !check_shapes(c, x, w, has_bias ? bias : NULL, p, shape))
        return kiln__drop(3, x, w, bias), NULL;
    return conv_run(c, KILN__OP_CONV2D, x, w, has_bias ? bias : NULL, shape, p);
}

kiln__tensor *kiln__t_conv2d_backward_input(kiln__opctx *c, kiln__tensor *dy, kiln__tensor *w,
                                            const kiln__conv2d_params *p, int64_t h, int64_t w_) {
    if (!kiln__ok(c, dy) || !kiln__ok(c, w)) return kiln__drop(2, dy, w), NULL;
    int64_t shape[4] = {dy->shape[0], w->shape[1] * p->groups, h, w_};
    return conv_run(c, KILN__OP_CONV2D_BACKWARD_INPUT, dy, w, NULL, shape, p);
}

kiln__tensor *kiln__t_conv2d_backward_weight(kiln__opctx *c, kiln__tensor *dy, kiln__tensor *x,
                                             const kiln__conv2d_params *p, int64_t kh, int64_t kw) {
    if (!kiln__ok(c, dy) || !kiln__ok(c, x)) return kiln__drop(2, dy, x), NULL;
    int64_t shape[4] = {dy->shape[1], x->shape[1] / p->groups, kh, kw};
    return conv_run(c, KILN__OP_CONV2D_BACKWARD_WEIGHT, dy, x, NULL, shape, p);
}

/* ---- conv_transpose2d ------------------------------------------------------------------------- */

/* Output size of one spatial dim of a transposed convolution (PyTorch's formula), or -1 when it
 * is below 1 or too large. */
static int64_t transpose_out_size(int64_t in, int64_t k, int64_t stride, int64_t pad, int64_t dilation,
                                  int64_t out_pad) {
    int64_t a, b, r;
    if (__builtin_mul_overflow(in - 1, stride, &a) || __builtin_mul_overflow(dilation, k - 1, &b) ||
        __builtin_add_overflow(a, b, &r) || __builtin_add_overflow(r, out_pad + 1 - 2 * pad, &r) ||
        r > KILN__MAX_NUMEL)
        return -1;
    return r < 1 ? -1 : r;
}

kiln__tensor *kiln__t_conv_transpose2d(kiln__opctx *c, kiln__tensor *x, kiln__tensor *w, kiln__tensor *bias,
                                       bool has_bias, const kiln__conv2d_params *p, int out_pad_h, int out_pad_w) {
    char sx[128], sw[128], sb[128];
    if (!kiln__ok(c, x) || !kiln__ok(c, w) || (has_bias && !kiln__ok(c, bias)) || !kiln__same_device(c, x, w) ||
        (has_bias && !kiln__same_device(c, x, bias)) || !kiln__check_float_input(c, x, "input", 4) ||
        !kiln__check_float_input(c, w, "weight", 4) || (has_bias && !kiln__check_float_input(c, bias, "bias", 1)) ||
        !kiln__same_dtype(c, x, w, has_bias ? bias : NULL) || !check_params(c, p))
        return kiln__drop(3, x, w, bias), NULL;
    kiln__shape_str(sx, sizeof sx, x->ndim, x->shape);
    kiln__shape_str(sw, sizeof sw, w->ndim, w->shape);
    int64_t in_c = x->shape[1], g = p->groups, out_c;
    if (out_pad_h < 0 || out_pad_w < 0 || (out_pad_h >= p->stride_h && out_pad_h >= p->dilation_h) ||
        (out_pad_w >= p->stride_w && out_pad_w >= p->dilation_w)) {
        kiln__fail(c, KILN_ERR_INVALID_ARGUMENT,
                   "output_padding (%d, %d) must be >= 0 and smaller than either stride (%d, %d) or dilation (%d, %d)",
                   out_pad_h, out_pad_w, p->stride_h, p->stride_w, p->dilation_h, p->dilation_w);
        return kiln__drop(3, x, w, bias), NULL;
    }
    if (w->shape[0] != in_c || in_c % g || __builtin_mul_overflow(w->shape[1], g, &out_c)) {
        kiln__fail(c, KILN_ERR_SHAPE, "weight %s must be [in_channels, out_channels / groups, KH, KW] with "
                   "in_channels = %lld (input %s) divisible by groups (%d)", sw, (long long)in_c, sx, p->groups);
        return kiln__drop(3, x, w, bias), NULL;
    }
    if (has_bias && (bias->ndim != 1 || bias->shape[0] != out_c)) {
        kiln__fail(c, KILN_ERR_SHAPE, "bias %s does not match weight %s: it needs [%lld]",
                   kiln__shape_str(sb, sizeof sb, bias->ndim, bias->shape), sw, (long long)out_c);
        return kiln__drop(3, x, w, bias), NULL;
    }
    int64_t oh = transpose_out_size(x->shape[2], w->shape[2], p->stride_h, p->pad_h, p->dilation_h, out_pad_h);
    int64_t ow = transpose_out_size(x->shape[3], w->shape[3], p->stride_w, p->pad_w, p->dilation_w, out_pad_w);
    if (w->shape[2] < 1 || w->shape[3] < 1 || x->shape[2] < 1 || x->shape[3] < 1 || oh < 1 || ow < 1) {
        kiln__fail(c, KILN_ERR_SHAPE, "input %s with weight %s, stride (%d, %d), padding (%d, %d) and dilation "
                   "(%d, %d) gives an empty or too large output", sx, sw, p->stride_h, p->stride_w, p->pad_h,
                   p->pad_w, p->dilation_h, p->dilation_w);
        return kiln__drop(3, x, w, bias), NULL;
    }
    int64_t shape[4] = {x->shape[0], out_c, oh, ow};
    /* the input gradient of conv2d is the transposed convolution */
    kiln__tensor *y = conv_run(c, KILN__OP_CONV2D_BACKWARD_INPUT, x, w, NULL, shape, p);
    if (!has_bias) return y;
    int64_t bshape[3] = {out_c, 1, 1};
    return kiln__t_binary(c, KILN__OP_ADD, y, kiln__t_reshape(c, bias, 3, bshape));
}
