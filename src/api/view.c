/* Public view ops: take the handle, then autodiff's decorated view for a tracked input (it
 * records how to map the gradient back), the op layer's view for an untracked one. */
#include "kiln/tensor.h"
#include "autodiff/autodiff-impl.h"

#define TRACKED(t) KILN__UNLIKELY(kiln__ad_active(1, &(t)))

/* Views to a user shape: reshape and expand. */
#define SHAPE_VIEW(fname)                                                                  \
    kiln_tensor kiln_##fname(kiln_tensor x, kiln_shape shape) {                            \
        KILN__OP_BEGIN("kiln_" #fname);                                                    \
        kiln__tensor *t = kiln__arg(&c, x);                                                \
        if (TRACKED(t)) return kiln__result(&c, kiln__ad_##fname(&c, t, shape.ndim, shape.dims)); \
        return kiln__result(&c, kiln__t_##fname(&c, t, shape.ndim, shape.dims));          \
    }
SHAPE_VIEW(reshape)
SHAPE_VIEW(expand)

kiln_tensor kiln_permute(kiln_tensor x, kiln_dims order) {
    KILN__OP_BEGIN("kiln_permute");
    kiln__tensor *t = kiln__arg(&c, x);
    if (order.n < 0 || order.n > KILN_MAX_DIMS) {
        kiln__drop(1, t);
        return kiln__result(&c, kiln__fail(&c, KILN_ERR_INVALID_ARGUMENT, "permutation has %d dims", order.n));
    }
    if (TRACKED(t)) return kiln__result(&c, kiln__ad_permute(&c, t, order.n, order.d));
    return kiln__result(&c, kiln__t_permute(&c, t, order.n, order.d));
}

kiln_tensor kiln_transpose(kiln_tensor x, int d0, int d1) {
    KILN__OP_BEGIN("kiln_transpose");
    kiln__tensor *t = kiln__arg(&c, x);
    if (TRACKED(t)) return kiln__result(&c, kiln__ad_transpose(&c, t, d0, d1));
    return kiln__result(&c, kiln__t_transpose(&c, t, d0, d1));
}

kiln_tensor kiln_narrow(kiln_tensor x, int dim, int64_t start, int64_t length) {
    KILN__OP_BEGIN("kiln_narrow");
    kiln__tensor *t = kiln__arg(&c, x);
    if (!kiln__narrow_range(&c, t, &dim, &start, length)) return kiln__drop(1, t), kiln__result(&c, NULL);
    if (TRACKED(t)) return kiln__result(&c, kiln__ad_slice(&c, t, dim, start, start + length, 1));
    return kiln__result(&c, kiln__t_slice(&c, t, dim, start, start + length, 1));
}

kiln_tensor kiln_slice(kiln_tensor x, int dim, int64_t start, int64_t end, int64_t step) {
    KILN__OP_BEGIN("kiln_slice");
    kiln__tensor *t = kiln__arg(&c, x);
    if (TRACKED(t)) return kiln__result(&c, kiln__ad_slice(&c, t, dim, start, end, step));
    return kiln__result(&c, kiln__t_slice(&c, t, dim, start, end, step));
}

kiln_tensor kiln_squeeze(kiln_tensor x, int dim) {
    KILN__OP_BEGIN("kiln_squeeze");
    kiln__tensor *t = kiln__arg(&c, x);
    if (TRACKED(t)) return kiln__result(&c, kiln__ad_squeeze(&c, t, dim));
    return kiln__result(&c, kiln__t_squeeze(&c, t, dim));
}

kiln_tensor kiln_unsqueeze(kiln_tensor x, int dim) {
    KILN__OP_BEGIN("kiln_unsqueeze");
    kiln__tensor *t = kiln__arg(&c, x);
    if (TRACKED(t)) return kiln__result(&c, kiln__ad_unsqueeze(&c, t, dim));
    return kiln__result(&c, kiln__t_unsqueeze(&c, t, dim));
}

kiln_tensor kiln_flatten(kiln_tensor x, int start_dim, int end_dim) {
    KILN__OP_BEGIN("kiln_flatten");
    kiln__tensor *t = kiln__arg(&c, x);
    if (TRACKED(t)) return kiln__result(&c, kiln__ad_flatten(&c, t, start_dim, end_dim));
    return kiln__result(&c, kiln__t_flatten(&c, t, start_dim, end_dim));
}

kiln_tensor kiln_contiguous(kiln_tensor x) {
    KILN__OP_BEGIN("kiln_contiguous");
    kiln__tensor *t = kiln__arg(&c, x);
    if (TRACKED(t)) return kiln__result(&c, kiln__ad_contiguous(&c, t));
    return kiln__result(&c, kiln__t_contiguous(&c, t));
}
