/* The pooling modules: MaxPool2d, AvgPool2d and AdaptiveAvgPool2d, each checking its
 * settings once at construction and applying the public pooling op (the _opts form, which
 * carries ceil_mode and exclude_pad). */
#include "kiln/tensor.h"
#include "nn/module-impl.h"
#include "ops/conv-impl.h"

static kiln_pool2d_options options_of(const kiln__pool2d_params *p) {
    return (kiln_pool2d_options){p->kernel_h, p->kernel_w, p->stride_h, p->stride_w, p->pad_h, p->pad_w,
                                 p->ceil_mode, p->exclude_pad};
}

static kiln_tensor max_pool_forward(kiln_module *m, kiln_tensor x) {
    return kiln_max_pool2d_opts(x, options_of(m->state));
}

static kiln_tensor avg_pool_forward(kiln_module *m, kiln_tensor x) {
    const kiln__pool2d_params *p = m->state;
    if (p->adaptive) return kiln_adaptive_avg_pool2d(x, p->out_h, p->out_w);
    return kiln_avg_pool2d_opts(x, options_of(p));
}

static const kiln__module_vtable max_pool_vt = {"MaxPool2d", max_pool_forward, NULL};
static const kiln__module_vtable avg_pool_vt = {"AvgPool2d", avg_pool_forward, NULL};
static const kiln__module_vtable adaptive_vt = {"AdaptiveAvgPool2d", avg_pool_forward, NULL};

static kiln_module *pool_module(const kiln__module_vtable *vt, const char *op, kiln__pool2d_params p) {
    bool ok = p.adaptive ? p.out_h >= 1 && p.out_w >= 1
                         : p.kernel_h >= 1 && p.stride_h >= 1 && p.pad_h >= 0 && p.pad_h <= p.kernel_h / 2 &&
                               p.kernel_w >= 1 && p.stride_w >= 1 && p.pad_w >= 0 && p.pad_w <= p.kernel_w / 2;
    if (!ok) {
        if (p.adaptive)
            kiln__report(KILN_ERR_INVALID_ARGUMENT, op, "output size (%d, %d) must be >= 1", p.out_h, p.out_w);
        else
            kiln__report(KILN_ERR_INVALID_ARGUMENT, op, "kernel (%d, %d) must be >= 1, stride (%d, %d) >= 0 and "
                         "padding (%d, %d) between 0 and half the kernel", p.kernel_h, p.kernel_w, p.stride_h,
                         p.stride_w, p.pad_h, p.pad_w);
        return NULL;
    }
    if (p.exclude_pad && vt->forward == max_pool_forward) {
        kiln__report(KILN_ERR_INVALID_ARGUMENT, op, "exclude_pad applies to average pooling only");
        return NULL;
    }
    kiln_module *m = kiln__module_new(vt, sizeof p);
    if (m) *(kiln__pool2d_params *)m->state = p;
    return m;
}

kiln_module *kiln_max_pool2d_new(int kernel, int stride, int padding) {
    return pool_module(&max_pool_vt, "kiln_max_pool2d_new",
                       kiln__pool2d_window(kernel, kernel, stride, stride, padding, padding));
}

kiln_module *kiln_avg_pool2d_new(int kernel, int stride, int padding) {
    return pool_module(&avg_pool_vt, "kiln_avg_pool2d_new",
                       kiln__pool2d_window(kernel, kernel, stride, stride, padding, padding));
}

kiln_module *kiln_max_pool2d_new_opts(kiln_pool2d_options o) {
    return pool_module(&max_pool_vt, "kiln_max_pool2d_new_opts", kiln__pool2d_of(o));
}

kiln_module *kiln_avg_pool2d_new_opts(kiln_pool2d_options o) {
    return pool_module(&avg_pool_vt, "kiln_avg_pool2d_new_opts", kiln__pool2d_of(o));
}

kiln_module *kiln_adaptive_avg_pool2d_new(int out_h, int out_w) {
    return pool_module(&adaptive_vt, "kiln_adaptive_avg_pool2d_new",
                       (kiln__pool2d_params){.adaptive = true, .out_h = out_h, .out_w = out_w});
}
