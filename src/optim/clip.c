/* Gradient clipping (by global norm, by value) and the gradient scaler's unscale-and-check
 * pass: each reads the gradients of an optimizer's parameters where they sit in a kiln_grads
 * and changes them in place, checked as the step checks them (optimizer.c). */
#include <math.h>
#include <stdlib.h>

#include "autodiff/autodiff-impl.h"
#include "optim/optim-impl.h"

/* Parameter i's gradient slot in g, checked as the step checks it (*param: the tensor it
 * updates); NULL when the parameter has no gradient or it is wrong (c->err set). */
static kiln__tensor **checked_grad_slot(kiln__opctx *c, kiln_optimizer *opt, kiln_grads *g, int i,
                                        kiln__tensor **param) {
    kiln__optim_param *p = &opt->params[i];
    *param = kiln__optim_param_tensor(c, p, opt->master_weights);
    const kiln__ad_meta *m = *param ? (*param)->autodiff : NULL;
    kiln__tensor **slot = m ? kiln__grads_slot(g, m->leaf) : NULL;
    return slot && kiln__optim_check_grad(c, opt, p, *param, *slot, false) ? slot : NULL;
}

/* Room for one slot per parameter (all NULL); NULL with c->err set when there is no memory. */
static kiln__tensor ***slots_new(kiln__opctx *c, const kiln_optimizer *opt) {
    kiln__tensor ***slots = calloc((size_t)(opt->n_params ? opt->n_params : 1), sizeof *slots);
    if (!slots) kiln__fail(c, KILN_ERR_OUT_OF_MEMORY, "cannot allocate the clipping bookkeeping");
    return slots;
}

/* ---- clipping -------------------------------------------------------------------------------- */

kiln_status kiln_clip_grad_norm(kiln_optimizer *opt, kiln_grads *g, double max_norm, kiln_tensor *total_norm) {
    KILN__OP_BEGIN("kiln_clip_grad_norm");
    if (total_norm) *total_norm = KILN_NONE;
    if (!opt || !g) {
        kiln__fail(&c, KILN_ERR_NULL, "%s is NULL", !opt ? "optimizer" : "gradients container");
        return kiln__optim_finish(&c);
    }
    if (!kiln__optim_and_grads_live(&c, opt, g)) return kiln__optim_finish(&c);
    if (!(max_norm >= 0)) {
        kiln__fail(&c, KILN_ERR_INVALID_ARGUMENT, "max_norm %g must be >= 0", max_norm);
        return kiln__optim_finish(&c);
    }
    /* the gradients stay in g: each is scaled in place where it sits */
    kiln__tensor ***slots = slots_new(&c, opt);
    if (!slots) return kiln__optim_finish(&c);
    int n = 0;
    kiln__tensor *first = NULL;
    kiln_dtype norm_dtype = KILN_F32;
    for (int i = 0; i < opt->n_params; i++) {
        kiln__tensor *param, **slot = checked_grad_slot(&c, opt, g, i, &param);
        if (!slot) continue;
        if (first && !kiln__same_device(&c, first, *slot)) continue;
        norm_dtype = first ? kiln__dtype_promote(norm_dtype, (*slot)->dtype) : (*slot)->dtype;
        if (!first) first = *slot;
        slots[i] = slot;
        n++;
    }
    if (c.err) {
        free(slots);
        return kiln__optim_finish(&c);
    }
    kiln_device dev = first ? first->device : KILN_CPU;
    /* squared norms side by side in one f64 vector, summed in a fixed order */
    int64_t len = n;
    kiln__tensor *sums = kiln__t_empty(&c, dev, KILN_F64, 1, &len); /* every element written below */
    for (int i = 0, k = 0; sums && i < opt->n_params; i++) {
        if (!slots[i]) continue;
        if (!kiln__t_sum_squares_into(&c, sums, k++, *slots[i])) break;
    }
    kiln__tensor *norm = kiln__t_unary(&c, KILN__OP_SQRT, kiln__t_reduce(&c, KILN__OP_SUM, sums, 1u, false, 0));
    kiln__tensor *scale = NULL;
    if (norm) {
        kiln__tensor_retain(norm);
        scale = kiln__t_binary_scalar(&c, KILN__OP_ADD, norm, 1e-6, false);
        scale = kiln__t_binary_scalar(&c, KILN__OP_DIV, scale, max_norm, true);
        scale = kiln__t_binary_scalar(&c, KILN__OP_MINIMUM, scale, 1.0, false);
    }
    /* one cast of the scale per gradient dtype (f32, f64; bf16 and f16 with master weights) */
    kiln__tensor *scale_as[KILN_DTYPE_COUNT] = {NULL};
    for (int i = 0; scale && i < opt->n_params && !c.err; i++) {
        if (!slots[i]) continue;
        kiln__tensor **slot = slots[i];
        int which = (int)(*slot)->dtype;
        if (!scale_as[which]) {
            kiln__tensor_retain(scale);
            scale_as[which] = kiln__t_cast(&c, scale, (*slot)->dtype);
            if (!scale_as[which]) break;
        }
        kiln__tensor_retain(scale_as[which]);
        /* in place: the gradient is dense and has one owner, so the product reuses its buffer */
        *slot = kiln__t_binary(&c, KILN__OP_MUL, *slot, scale_as[which]);
    }
    free(slots);
    kiln__tensor_release(scale);
    for (int d = 0; d < KILN_DTYPE_COUNT; d++) kiln__tensor_release(scale_as[d]);
    if (norm && total_norm && !c.err) {
        kiln__tensor *out = kiln__t_cast(&c, norm, norm_dtype);
        norm = NULL;
        if (out) *total_norm = kiln__handle_new(out);
    }
    kiln__tensor_release(norm);
    return kiln__optim_finish(&c);
}

kiln_status kiln_clip_grad_value(kiln_optimizer *opt, kiln_grads *g, double clip_value) {
    KILN__OP_BEGIN("kiln_clip_grad_value");
    if (!opt || !g) {
        kiln__fail(&c, KILN_ERR_NULL, "%s is NULL", !opt ? "optimizer" : "gradients container");
        return kiln__optim_finish(&c);
    }
    if (!kiln__optim_and_grads_live(&c, opt, g)) return kiln__optim_finish(&c);
    if (!(clip_value >= 0 && isfinite(clip_value))) {
        kiln__fail(&c, KILN_ERR_INVALID_ARGUMENT, "clip_value %g must be finite and >= 0", clip_value);
        return kiln__optim_finish(&c);
    }
    kiln__tensor ***slots = slots_new(&c, opt);
    if (!slots) return kiln__optim_finish(&c);
    /* every gradient checked before any is changed */
    for (int i = 0; i < opt->n_params; i++) {
        kiln__tensor *param;
        slots[i] = checked_grad_slot(&c, opt, g, i, &param);
    }
    /* in place: a gradient is dense and has one owner, so the clamp reuses its buffer */
    for (int i = 0; i < opt->n_params && !c.err; i++)
        if (slots[i]) *slots[i] = kiln__t_clamp(&c, *slots[i], -clip_value, clip_value);
    free(slots);
    return kiln__optim_finish(&c);
}

/* ---- the gradient scaler's pass (grad_scaler.c) ----------------------------------------- */

kiln__tensor *kiln__optim_grads_unscale(kiln__opctx *c, kiln_optimizer *opt, kiln_grads *g, double factor) {
    kiln__tensor *total = NULL;
    for (int i = 0; i < opt->n_params && !c->err; i++) {
        kiln__tensor *param, **slot = checked_grad_slot(c, opt, g, i, &param);
        if (!slot) continue;
        /* a master-weighted parameter's gradient is unscaled in f32 (and stays f32: the step
         * takes it as it is), so what the scale lifted out of f16's range is not lost again */
        if (kiln__optim_uses_master(opt, param->dtype)) *slot = kiln__t_cast(c, *slot, KILN_F32);
        /* in place: a gradient is dense and has one owner */
        if (*slot) *slot = kiln__t_binary_scalar(c, KILN__OP_MUL, *slot, factor, false);
        if (!*slot) break;
        int64_t one = 1;
        kiln__tensor *sq = kiln__t_empty(c, (*slot)->device, KILN_F64, 1, &one);
        if (!sq || !kiln__t_sum_squares_into(c, sq, 0, *slot)) {
            kiln__tensor_release(sq);
            break;
        }
        total = total ? kiln__t_binary(c, KILN__OP_ADD, total, sq) : sq;
    }
    if (c->err) kiln__tensor_release(total), total = NULL;
    return total;
}
