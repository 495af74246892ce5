/* The 2-d pooling tensor ops (max, average, adaptive average) and their gradients.
 *
 * PyTorch's semantics: out = (in + 2 * pad - kernel) / stride + 1, rounded up with ceil_mode
 * (pooled_size); padding at most half the kernel; max pooling pads with -inf, average pooling
 * counts the padding in its divisor unless exclude_pad (PyTorch's count_include_pad=False); with
 * ceil_mode, the part of a last window past the padding is never counted. A stride of 0 means "the kernel size", PyTorch's default (stride=None). Inputs are
 * [N, C, H, W] float tensors with any strides; f16 is pooled in f32 (cast there and back), and so
 * is bf16 off the CPU, whose kernels take bf16 as it is (f32 math inside, backend/cpu/pool.c). */
#include <stdio.h>

#include "kiln/tensor.h"
#include "ops/conv-impl.h"

/* Windows along one dim of `size` (padded by pad on both sides; the kernel fits, checked): as
 * PyTorch, ceil_mode rounds the count up, but a last window must start inside the input or its
 * leading padding, never in the trailing padding alone. */
static int64_t pooled_size(int64_t size, int kernel, int stride, int pad, bool ceil_mode) {
    int64_t room = size + 2 * (int64_t)pad - kernel;
    int64_t n = (ceil_mode ? (room + stride - 1) / stride : room / stride) + 1;
    if (ceil_mode && (n - 1) * stride >= size + pad) n--;
    return n;
}

/* Checks x and the window parameters (stride 0 already replaced); writes the output shape. */
static bool check_pool(kiln__opctx *c, kiln__tensor *x, const kiln__pool2d_params *p, int64_t *shape) {
    char sx[128];
    if (!kiln__ok(c, x) || !kiln__check_float_input(c, x, "input", 4)) return false;
    kiln__shape_str(sx, sizeof sx, x->ndim, x->shape);
    if (x->shape[2] < 1 || x->shape[3] < 1) {
        kiln__fail(c, KILN_ERR_SHAPE, "input %s has an empty spatial dim", sx);
        return false;
    }
    shape[0] = x->shape[0], shape[1] = x->shape[1];
    if (p->adaptive) {
        if (p->out_h < 1 || p->out_w < 1) {
            kiln__fail(c, KILN_ERR_INVALID_ARGUMENT, "output size (%d, %d) must be >= 1", p->out_h, p->out_w);
            return false;
        }
        shape[2] = p->out_h, shape[3] = p->out_w;
        return true;
    }
    if (p->kernel_h < 1 || p->kernel_w < 1 || p->stride_h < 1 || p->stride_w < 1 || p->pad_h < 0 || p->pad_w < 0 ||
        p->pad_h > p->kernel_h / 2 || p->pad_w > p->kernel_w / 2) {
        kiln__fail(c, KILN_ERR_INVALID_ARGUMENT,
                   "kernel (%d, %d) must be >= 1, stride (%d, %d) >= 0 and padding (%d, %d) between 0 and half the "
                   "kernel", p->kernel_h, p->kernel_w, p->stride_h, p->stride_w, p->pad_h, p->pad_w);
        return false;
    }
    int64_t room_h = x->shape[2] + 2 * (int64_t)p->pad_h, room_w = x->shape[3] + 2 * (int64_t)p->pad_w;
    if (room_h < p->kernel_h || room_w < p->kernel_w) {
        kiln__fail(c, KILN_ERR_SHAPE, "kernel (%d, %d) is larger than input %s padded by (%d, %d)", p->kernel_h,
                   p->kernel_w, sx, p->pad_h, p->pad_w);
        return false;
    }
    shape[2] = pooled_size(x->shape[2], p->kernel_h, p->stride_h, p->pad_h, p->ceil_mode);
    shape[3] = pooled_size(x->shape[3], p->kernel_w, p->stride_w, p->pad_w, p->ceil_mode);
    return true;
}

/* Queues a pooling kernel on `in` (plus indices for the max backward), into a fresh output of
 * `shape` (plus indices for the max forward when want_idx). Casts `in` to its compute dtype
 * and the result back. Consumes in and idx_in. */
static kiln__tensor *pool_run(kiln__opctx *c, kiln__opcode code, kiln__tensor *in, kiln__tensor *idx_in,
                              const int64_t *shape, const kiln__pool2d_params *p, kiln__tensor **idx_out) {
    kiln_dtype rd = in->dtype;
    kiln_device dev = in->device;
    kiln_dtype kd = rd == KILN_BF16 && dev == KILN_CPU ? rd : kiln__dtype_compute(rd);
    in = kiln__t_cast(c, in, kd);
    kiln__tensor *out = in ? kiln__t_empty(c, dev, kd, 4, shape) : NULL;
    kiln__tensor *idx = out && idx_out ? kiln__t_empty(c, dev, KILN_I64, 4, shape) : NULL;
    if (out && (!idx_out || idx)) {
        kiln__op op;
        kiln__op_init(&op, code, c->name);
        op.in[0] = kiln__view_of(in);
        op.n_in = 1;
        if (idx_in) op.in[op.n_in++] = kiln__view_of(idx_in);
        op.out[0] = kiln__view_of(out);
        op.n_out = 1;
        if (idx) op.out[op.n_out++] = kiln__view_of(idx);
        op.p.i[0] = p->kernel_h, op.p.i[1] = p->kernel_w, op.p.i[2] = p->stride_h, op.p.i[3] = p->stride_w;
        op.pi[0] = p->pad_h, op.pi[1] = p->pad_w, op.pi[3] = 0;
        op.pi[2] = p->adaptive ? KILN__POOL_ADAPTIVE : p->exclude_pad ? KILN__POOL_WINDOWS_EXCLUDE_PAD : KILN__POOL_WINDOWS;
        if (!kiln__t_submit(c, &op, dev)) kiln__drop(2, out, idx), out = idx = NULL;
    } else {
        kiln__drop(2, out, idx), out = idx = NULL;
    }
    kiln__drop(2, in, idx_in);
    if (idx_out) *idx_out = idx;
    return out && out->dtype != rd ? kiln__t_cast(c, out, rd) : out;
}

kiln__tensor *kiln__t_max_pool2d(kiln__opctx *c, kiln__tensor *x, const kiln__pool2d_params *p,
                                 kiln__tensor **indices) {
    int64_t shape[4];
    if (indices) *indices = NULL;
    if (p->exclude_pad) {
        kiln__fail(c, KILN_ERR_INVALID_ARGUMENT, "exclude_pad applies to average pooling only");
        return kiln__drop(1, x), NULL;
    }
    if (!check_pool(c, x, p, shape)) return kiln__drop(1, x), NULL;
    return pool_run(c, KILN__OP_MAX_POOL2D, x, NULL, shape, p, indices);
}

kiln__tensor *kiln__t_avg_pool2d(kiln__opctx *c, kiln__tensor *x, const kiln__pool2d_params *p) {
    int64_t shape[4];
    if (!check_pool(c, x, p, shape)) return kiln__drop(1, x), NULL;
    return pool_run(c, KILN__OP_AVG_POOL2D, x, NULL, shape, p, NULL);
}

kiln__tensor *kiln__t_max_pool2d_backward(kiln__opctx *c, kiln__tensor *dy, kiln__tensor *indices, int64_t h,
                                          int64_t w) {
    if (!kiln__ok(c, dy) || !kiln__ok(c, indices)) return kiln__drop(2, dy, indices), NULL;
    int64_t shape[4] = {dy->shape[0], dy->shape[1], h, w};
    kiln__pool2d_params none = {0};
    return pool_run(c, KILN__OP_MAX_POOL2D_BACKWARD, dy, indices, shape, &none, NULL);
}

kiln__tensor *kiln__t_avg_pool2d_backward(kiln__opctx *c, kiln__tensor *dy, const kiln__pool2d_params *p, int64_t h,
                                          int64_t w) {
    if (!kiln__ok(c, dy)) return kiln__drop(1, dy), NULL;
    int64_t shape[4] = {dy->shape[0], dy->shape[1], h, w};
    return pool_run(c, KILN__OP_AVG_POOL2D_BACKWARD, dy, NULL, shape, p, NULL);
}
