/* The Conv2d module: a weight [out, in/groups, k, k] and an optional bias, applied with the
 * public kiln_conv2d. */
#include <math.h>

#include "kiln/tensor.h"
#include "nn/module-impl.h"

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
