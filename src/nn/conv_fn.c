/* The functional convolutions beside conv2d: conv1d (conv2d over a height of one: the input
 * [N, C, L] and the weight [O, C/groups, K] gain a unit dim 2, which the result loses again)
 * and conv_transpose2d (conv2d's input gradient, with its own derivative rule). Both take the
 * handles, check what is specific to them, then run the tracked or the untracked op. */
#include "kiln/nn.h"
#include "api/autocast-impl.h"
#include "autodiff/autodiff-impl.h"

/* Takes x, w and bias (unless KILN_NONE) into in[]; returns whether there is a bias. */
static bool take_args(kiln__opctx *c, kiln_tensor x, kiln_tensor w, kiln_tensor bias, kiln__tensor **in) {
    in[0] = kiln__arg(c, x); /* in order: the first stale handle is the one reported */
    in[1] = kiln__arg(c, w);
    bool has_bias = bias.id != KILN_NONE.id;
    in[2] = has_bias ? kiln__arg(c, bias) : NULL;
    return has_bias;
}

kiln_tensor kiln_conv1d(kiln_tensor x, kiln_tensor w, kiln_tensor bias, int stride, int padding, int dilation,
                        int groups) {
    KILN__OP_BEGIN("kiln_conv1d");
    x = kiln__autocast_arg("kiln_conv1d", x);
    w = kiln__autocast_arg("kiln_conv1d", w);
    bias = kiln__autocast_arg("kiln_conv1d", bias);
    kiln__tensor *in[3];
    bool has_bias = take_args(&c, x, w, bias, in);
    if (!kiln__ok(&c, in[0]) || !kiln__ok(&c, in[1]) || (has_bias && !kiln__ok(&c, in[2])) ||
        !kiln__check_float_input(&c, in[0], "input [N, C, L]", 3) ||
        !kiln__check_float_input(&c, in[1], "weight [O, C/groups, K]", 3))
        return kiln__drop(3, in[0], in[1], in[2]), kiln__result(&c, NULL);
    kiln__conv2d_params p = {1, stride, 0, padding, 1, dilation, groups};
    if (KILN__UNLIKELY(kiln__ad_active(2 + has_bias, in))) {
        kiln__tensor *y = kiln__ad_conv2d(&c, kiln__ad_unsqueeze(&c, in[0], 2), kiln__ad_unsqueeze(&c, in[1], 2),
                                          in[2], has_bias, &p);
        return kiln__result(&c, kiln__ad_squeeze(&c, y, 2));
    }
    kiln__tensor *y = kiln__t_conv2d(&c, kiln__t_unsqueeze(&c, in[0], 2), kiln__t_unsqueeze(&c, in[1], 2), in[2],
                                     has_bias, &p);
    return kiln__result(&c, kiln__t_squeeze(&c, y, 2));
}

kiln_tensor kiln_conv_transpose2d(kiln_tensor x, kiln_tensor w, kiln_tensor bias, int stride_h, int stride_w,
                                  int pad_h, int pad_w, int output_pad_h, int output_pad_w, int dilation_h,
                                  int dilation_w, int groups) {
    KILN__OP_BEGIN("kiln_conv_transpose2d");
    x = kiln__autocast_arg("kiln_conv_transpose2d", x);
    w = kiln__autocast_arg("kiln_conv_transpose2d", w);
    bias = kiln__autocast_arg("kiln_conv_transpose2d", bias);
    kiln__tensor *in[3];
    bool has_bias = take_args(&c, x, w, bias, in);
    kiln__conv2d_params p = {stride_h, stride_w, pad_h, pad_w, dilation_h, dilation_w, groups};
    if (KILN__UNLIKELY(kiln__ad_active(2 + has_bias, in)))
        return kiln__result(&c, kiln__ad_conv_transpose2d(&c, in[0], in[1], in[2], has_bias, &p, output_pad_h,
                                                          output_pad_w));
    return kiln__result(&c, kiln__t_conv_transpose2d(&c, in[0], in[1], in[2], has_bias, &p, output_pad_h,
                                                     output_pad_w));
}
