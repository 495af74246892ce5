/* Public kiln_conv2d: takes the handles (the bias is optional), then autodiff's decorated
 * conv for tracked inputs, the op layer's for untracked ones. */
#include "kiln/tensor.h"
#include "api/autocast-impl.h"
#include "autodiff/autodiff-impl.h"

kiln_tensor kiln_conv2d(kiln_tensor x, kiln_tensor w, kiln_tensor bias, int stride_h, int stride_w, int pad_h,
                        int pad_w, int dilation_h, int dilation_w, int groups) {
    KILN__OP_BEGIN("kiln_conv2d");
    if (!kiln__autocast_conv_stays_f32(x, groups)) {
        x = kiln__autocast_arg("kiln_conv2d", x);
        w = kiln__autocast_arg("kiln_conv2d", w);
        bias = kiln__autocast_arg("kiln_conv2d", bias);
    }
    kiln__tensor *in[3] = {NULL, NULL, NULL};
    in[0] = kiln__arg(&c, x); /* in order: the first stale handle is the one reported */
    in[1] = kiln__arg(&c, w);
    bool has_bias = bias.id != KILN_NONE.id;
    if (has_bias) in[2] = kiln__arg(&c, bias);
    kiln__conv2d_params p = {stride_h, stride_w, pad_h, pad_w, dilation_h, dilation_w, groups};
    if (KILN__UNLIKELY(kiln__ad_active(2 + has_bias, in)))
        return kiln__result(&c, kiln__ad_conv2d(&c, in[0], in[1], in[2], has_bias, &p));
    return kiln__result(&c, kiln__t_conv2d(&c, in[0], in[1], in[2], has_bias, &p));
}
