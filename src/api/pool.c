/* Public pooling: kiln_max_pool2d, kiln_avg_pool2d, kiln_adaptive_avg_pool2d, and the first two
 * with ceil_mode and exclude_pad (the _opts forms). A stride of 0
 * means "the kernel size" (PyTorch's stride=None); tracked inputs go through autodiff. */
#include "kiln/tensor.h"
#include "autodiff/autodiff-impl.h"

static kiln_tensor pool_public(kiln__opctx *c, kiln_tensor x, kiln__pool2d_params p, bool max) {
    kiln__tensor *t = kiln__arg(c, x);
    if (KILN__UNLIKELY(kiln__ad_active(1, &t)))
        return kiln__result(c, max ? kiln__ad_max_pool2d(c, t, &p) : kiln__ad_avg_pool2d(c, t, &p));
    return kiln__result(c, max ? kiln__t_max_pool2d(c, t, &p, NULL) : kiln__t_avg_pool2d(c, t, &p));
}

kiln_tensor kiln_max_pool2d(kiln_tensor x, int kernel_h, int kernel_w, int stride_h, int stride_w, int pad_h,
                            int pad_w) {
    KILN__OP_BEGIN("kiln_max_pool2d");
    return pool_public(&c, x, kiln__pool2d_window(kernel_h, kernel_w, stride_h, stride_w, pad_h, pad_w), true);
}

kiln_tensor kiln_avg_pool2d(kiln_tensor x, int kernel_h, int kernel_w, int stride_h, int stride_w, int pad_h,
                            int pad_w) {
    KILN__OP_BEGIN("kiln_avg_pool2d");
    return pool_public(&c, x, kiln__pool2d_window(kernel_h, kernel_w, stride_h, stride_w, pad_h, pad_w), false);
}

kiln_pool2d_options kiln_pool2d_defaults(int kernel) {
    return (kiln_pool2d_options){.kernel_h = kernel, .kernel_w = kernel};
}

kiln_tensor kiln_max_pool2d_opts(kiln_tensor x, kiln_pool2d_options o) {
    KILN__OP_BEGIN("kiln_max_pool2d_opts");
    return pool_public(&c, x, kiln__pool2d_of(o), true);
}

kiln_tensor kiln_avg_pool2d_opts(kiln_tensor x, kiln_pool2d_options o) {
    KILN__OP_BEGIN("kiln_avg_pool2d_opts");
    return pool_public(&c, x, kiln__pool2d_of(o), false);
}

kiln_tensor kiln_adaptive_avg_pool2d(kiln_tensor x, int out_h, int out_w) {
    KILN__OP_BEGIN("kiln_adaptive_avg_pool2d");
    return pool_public(&c, x, (kiln__pool2d_params){.adaptive = true, .out_h = out_h, .out_w = out_w}, false);
}
