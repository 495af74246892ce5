/* The convolution modules: Conv2d (a weight [out, in/groups, k, k] and an optional bias, applied
 * with the public kiln_conv2d), Conv1d and ConvTranspose2d (applied with kiln_conv1d and
 * kiln_conv_transpose2d). */
#include <math.h>

#include "kiln/tensor.h"
#include "nn/layers-impl.h"

static kiln_tensor conv2d_forward(kiln_module *m, kiln_tensor x) {
    const kiln_conv2d_options *o = m->state;
    kiln_tensor bias = o->bias ? kiln_ref(m->params[1].tensor) : KILN_NONE;
    return kiln_conv2d(x, kiln_ref(m->params[0].tensor), bias, o->stride_h, o->stride_w, o->pad_h, o->pad_w,
                       o->dilation_h, o->dilation_w, o->groups);
}

static const kiln__module_vtable conv2d_vt = {"Conv2d", conv2d_forward, NULL};

kiln_conv2d_options kiln_conv2d_defaults(int64_t in_channels, int64_t out_channels, int kernel) {
    return (kiln_conv2d_options){.in_channels = in_channels, .out_channels = out_channels, .kernel_h = kernel,
                                 .kernel_w = kernel, .stride_h = 1, .stride_w = 1, .dilation_h = 1, .dilation_w = 1,
                                 .groups = 1, .bias = true};
}

/* PyTorch's initialisation: kaiming_uniform(a = sqrt(5)) for the weight, which is
 * U(-1/sqrt(fan_in), 1/sqrt(fan_in)), and the same bounds for the bias. */
kiln_module *kiln_conv2d_new(kiln_conv2d_options o, uint64_t seed) {
    const char *op = "kiln_conv2d_new";
    if (o.in_channels < 1 || o.out_channels < 1 || o.kernel_h < 1 || o.kernel_w < 1 || o.stride_h < 1 ||
        o.stride_w < 1 || o.dilation_h < 1 || o.dilation_w < 1 || o.pad_h < 0 || o.pad_w < 0 || o.groups < 1) {
        kiln__report(KILN_ERR_INVALID_ARGUMENT, op, "channels (%lld, %lld), kernel (%d, %d), stride (%d, %d), "
                     "dilation (%d, %d) and groups (%d) must be >= 1 and padding (%d, %d) >= 0",
                     (long long)o.in_channels, (long long)o.out_channels, o.kernel_h, o.kernel_w, o.stride_h,
                     o.stride_w, o.dilation_h, o.dilation_w, o.groups, o.pad_h, o.pad_w);
        return NULL;
    }
    if (o.in_channels % o.groups || o.out_channels % o.groups) {
        kiln__report(KILN_ERR_INVALID_ARGUMENT, op,
                     "groups (%d) must divide in_channels (%lld) and out_channels (%lld)", o.groups,
                     (long long)o.in_channels, (long long)o.out_channels);
        return NULL;
    }
    kiln_module *m = kiln__module_new(&conv2d_vt, sizeof o);
    if (!m) return NULL;
    *(kiln_conv2d_options *)m->state = o;
    int64_t per_group = o.in_channels / o.groups;
    double bound = 1.0 / sqrt((double)(per_group * o.kernel_h * o.kernel_w));
    kiln_tensor w = kiln_uniform(KILN_CPU, KILN_F32, KILN_SHAPE(o.out_channels, per_group, o.kernel_h, o.kernel_w),
                                 -bound, bound, seed);
    bool ok = kiln__module_add_param(m, "weight", w, false) == KILN_OK;
    if (ok && o.bias) {
        /* a stream of its own: layers are often seeded 1, 2, 3, ... */
        kiln_tensor b = kiln_uniform(KILN_CPU, KILN_F32, KILN_SHAPE(o.out_channels), -bound, bound,
                                     seed ^ 0x9e3779b97f4a7c15ull);
        ok = kiln__module_add_param(m, "bias", b, false) == KILN_OK;
    }
    if (!ok) {
        kiln_module_free(m);
        return NULL;
    }
    return m;
}

/* ---- Conv1d and ConvTranspose2d --------------------------------------------------------------- */

static kiln_tensor conv1d_forward(kiln_module *m, kiln_tensor x) {
    const kiln_conv1d_options *o = m->state;
    kiln_tensor bias = o->bias ? kiln_ref(m->params[1].tensor) : KILN_NONE;
    return kiln_conv1d(x, kiln_ref(m->params[0].tensor), bias, o->stride, o->padding, o->dilation, o->groups);
}

static const kiln__module_vtable conv1d_vt = {"Conv1d", conv1d_forward, NULL};

kiln_conv1d_options kiln_conv1d_defaults(int64_t in_channels, int64_t out_channels, int kernel) {
    return (kiln_conv1d_options){.in_channels = in_channels, .out_channels = out_channels, .kernel = kernel,
                                 .stride = 1, .dilation = 1, .groups = 1, .bias = true};
}

/* The weight [rows, per_group, kh, kw] (and a bias [bias_size]) uniform in +-1/sqrt(fan_in),
 * fan_in = per_group * kh * kw, as PyTorch initialises every convolution. */
static kiln_module *conv_finish(kiln_module *m, kiln_shape wshape, int64_t fan_in, bool bias, int64_t bias_size,
                                uint64_t seed) {
    kiln__nn_param ps[2] = {
        {"weight", kiln__nn_uniform_fan_in(wshape, fan_in, kiln__nn_seed(seed, 0)), false},
        {"bias", bias ? kiln__nn_uniform_fan_in(KILN_SHAPE(bias_size), fan_in, kiln__nn_seed(seed, 1)) : KILN_NONE,
         false},
    };
    return kiln__nn_finish(m, bias ? 2 : 1, ps);
}

kiln_module *kiln_conv1d_new(kiln_conv1d_options o, uint64_t seed) {
    const char *op = "kiln_conv1d_new";
    if (o.in_channels < 1 || o.out_channels < 1 || o.kernel < 1 || o.stride < 1 || o.dilation < 1 ||
        o.padding < 0 || o.groups < 1)
        return kiln__nn_bad_arg(op, "channels (%lld, %lld), kernel %d, stride %d, dilation %d and groups %d must be "
                                ">= 1 and padding %d >= 0", (long long)o.in_channels, (long long)o.out_channels,
                                o.kernel, o.stride, o.dilation, o.groups, o.padding);
    if (o.in_channels % o.groups || o.out_channels % o.groups)
        return kiln__nn_bad_arg(op, "groups (%d) must divide in_channels (%lld) and out_channels (%lld)", o.groups,
                                (long long)o.in_channels, (long long)o.out_channels);
    kiln_module *m = kiln__module_new(&conv1d_vt, sizeof o);
    if (m) *(kiln_conv1d_options *)m->state = o;
    int64_t per_group = o.in_channels / o.groups;
    return conv_finish(m, KILN_SHAPE(o.out_channels, per_group, o.kernel), per_group * o.kernel, o.bias,
                       o.out_channels, seed);
}

static kiln_tensor conv_transpose2d_forward(kiln_module *m, kiln_tensor x) {
    const kiln_conv_transpose2d_options *o = m->state;
    kiln_tensor bias = o->bias ? kiln_ref(m->params[1].tensor) : KILN_NONE;
    return kiln_conv_transpose2d(x, kiln_ref(m->params[0].tensor), bias, o->stride_h, o->stride_w, o->pad_h,
                                 o->pad_w, o->output_pad_h, o->output_pad_w, o->dilation_h, o->dilation_w, o->groups);
}

static const kiln__module_vtable conv_transpose2d_vt = {"ConvTranspose2d", conv_transpose2d_forward, NULL};

kiln_conv_transpose2d_options kiln_conv_transpose2d_defaults(int64_t in_channels, int64_t out_channels, int kernel) {
    return (kiln_conv_transpose2d_options){.in_channels = in_channels, .out_channels = out_channels,
                                           .kernel_h = kernel, .kernel_w = kernel, .stride_h = 1, .stride_w = 1,
                                           .dilation_h = 1, .dilation_w = 1, .groups = 1, .bias = true};
}

/* PyTorch's fan_in of a transposed convolution's weight [in, out/groups, KH, KW] is its dim 1
 * times the kernel: out/groups * KH * KW. */
kiln_module *kiln_conv_transpose2d_new(kiln_conv_transpose2d_options o, uint64_t seed) {
    const char *op = "kiln_conv_transpose2d_new";
    if (o.in_channels < 1 || o.out_channels < 1 || o.kernel_h < 1 || o.kernel_w < 1 || o.stride_h < 1 ||
        o.stride_w < 1 || o.dilation_h < 1 || o.dilation_w < 1 || o.pad_h < 0 || o.pad_w < 0 || o.groups < 1 ||
        o.output_pad_h < 0 || o.output_pad_w < 0)
        return kiln__nn_bad_arg(op, "channels (%lld, %lld), kernel (%d, %d), stride (%d, %d), dilation (%d, %d) and "
                                "groups (%d) must be >= 1, padding (%d, %d) and output_padding (%d, %d) >= 0",
                                (long long)o.in_channels, (long long)o.out_channels, o.kernel_h, o.kernel_w,
                                o.stride_h, o.stride_w, o.dilation_h, o.dilation_w, o.groups, o.pad_h, o.pad_w,
                                o.output_pad_h, o.output_pad_w);
    if (o.in_channels % o.groups || o.out_channels % o.groups)
        return kiln__nn_bad_arg(op, "groups (%d) must divide in_channels (%lld) and out_channels (%lld)", o.groups,
                                (long long)o.in_channels, (long long)o.out_channels);
    if ((o.output_pad_h >= o.stride_h && o.output_pad_h >= o.dilation_h) ||
        (o.output_pad_w >= o.stride_w && o.output_pad_w >= o.dilation_w))
        return kiln__nn_bad_arg(op, "output_padding (%d, %d) must be smaller than either stride (%d, %d) or "
                                "dilation (%d, %d)", o.output_pad_h, o.output_pad_w, o.stride_h, o.stride_w,
                                o.dilation_h, o.dilation_w);
    kiln_module *m = kiln__module_new(&conv_transpose2d_vt, sizeof o);
    if (m) *(kiln_conv_transpose2d_options *)m->state = o;
    int64_t per_group = o.out_channels / o.groups;
    return conv_finish(m, KILN_SHAPE(o.in_channels, per_group, o.kernel_h, o.kernel_w),
                       per_group * o.kernel_h * o.kernel_w, o.bias, o.out_channels, seed);
}
