/* kiln_init: Kaiming (He) and Xavier (Glorot) initialisation from the seeded generator. */
#include <math.h>

#include "kiln/autodiff.h"
#include "kiln/tensor.h"
#include "nn/layers-impl.h"

kiln_status kiln_init(kiln_tensor *t, kiln_init_kind kind, uint64_t seed) {
    const char *op = "kiln_init";
    if (!t) return kiln__report(KILN_ERR_NULL, op, "tensor pointer is NULL");
    kiln__error *err = NULL;
    const kiln__tensor *x = kiln__handle_peek(*t, op, &err);
    if (!x) {
        kiln_status st = kiln__error_report(err);
        kiln__error_unref(err);
        return st;
    }
    if (x->err) return kiln__error_report(x->err);
    if (!kiln__dtype_is_float(x->dtype))
        return kiln__report(KILN_ERR_DTYPE, op, "needs a floating-point tensor, got %s", kiln_dtype_name(x->dtype));
    if ((unsigned)kind > KILN_INIT_XAVIER_NORMAL)
        return kiln__report(KILN_ERR_INVALID_ARGUMENT, op, "unknown kind %d", (int)kind);
    if (x->ndim < 2) {
        char buf[128];
        return kiln__report(KILN_ERR_SHAPE, op, "fan-in and fan-out need a tensor of at least 2 dims, got %s",
                            kiln__nn_shape_str(buf, sizeof buf, x));
    }
    kiln_shape shape = {.ndim = x->ndim};
    int64_t receptive = 1;
    for (int d = 0; d < x->ndim; d++) {
        shape.dims[d] = x->shape[d];
        if (d >= 2) receptive *= x->shape[d];
    }
    if (kiln__tensor_numel(x) == 0) return KILN_OK; /* a zero fan means no elements: nothing to fill */
    double fan_in = (double)(x->shape[1] * receptive), fan_out = (double)(x->shape[0] * receptive);
    /* Kaiming for ReLU (gain sqrt 2) in fan-in mode; Xavier with gain 1 */
    bool kaiming = kind == KILN_INIT_KAIMING_UNIFORM || kind == KILN_INIT_KAIMING_NORMAL;
    double std = kaiming ? sqrt(2.0 / fan_in) : sqrt(2.0 / (fan_in + fan_out));
    bool uniform = kind == KILN_INIT_KAIMING_UNIFORM || kind == KILN_INIT_XAVIER_UNIFORM;
    double bound = sqrt(3.0) * std; /* U(-b, b) has standard deviation b / sqrt 3 */
    kiln_tensor fresh = uniform ? kiln_uniform(x->device, x->dtype, shape, -bound, bound, seed)
                                : kiln_normal(x->device, x->dtype, shape, 0.0, std, seed);
    kiln_status st = kiln_tensor_status(fresh);
    /* a parameter stays a parameter: the new values are a leaf that wants a gradient */
    if (st == KILN_OK && kiln_requires_grad(*t)) st = kiln_require_grad(fresh);
    if (st != KILN_OK) {
        kiln_release(fresh);
        return st;
    }
    kiln_release(*t);
    *t = fresh;
    return KILN_OK;
}
