/* Public matmul and linear: take the handles, then autodiff's decorated op for tracked
 * inputs, the op layer's for untracked ones. */
#include "kiln/tensor.h"
#include "autodiff/autodiff-impl.h"

kiln_tensor kiln_matmul(kiln_tensor a, kiln_tensor b) {
    KILN__OP_BEGIN("kiln_matmul");
    kiln__tensor *in[2];
    in[0] = kiln__arg(&c, a); /* in order: the first stale handle is the one reported */
    in[1] = kiln__arg(&c, b);
    if (KILN__UNLIKELY(kiln__ad_active(2, in))) return kiln__result(&c, kiln__ad_matmul(&c, in[0], in[1]));
    return kiln__result(&c, kiln__t_matmul(&c, in[0], in[1]));
}

kiln_tensor kiln_linear(kiln_tensor x, kiln_tensor w, kiln_tensor bias) {
    KILN__OP_BEGIN("kiln_linear");
    kiln__tensor *in[3] = {NULL, NULL, NULL};
    in[0] = kiln__arg(&c, x);
    in[1] = kiln__arg(&c, w);
    bool has_bias = bias.id != KILN_NONE.id;
    if (has_bias) in[2] = kiln__arg(&c, bias);
    if (KILN__UNLIKELY(kiln__ad_active(2 + has_bias, in)))
        return kiln__result(&c, kiln__ad_linear(&c, in[0], in[1], in[2], has_bias));
    return kiln__result(&c, kiln__t_linear(&c, in[0], in[1], in[2], has_bias));
}
