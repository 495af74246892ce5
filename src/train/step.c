/* kiln_train_step: one optimisation step from a loss (backward with the loss read for the log,
 * the optimizer's update, the gradients freed), the three calls a training loop repeats. */
#include <math.h>

#include "kiln/autodiff.h"
#include "kiln/optim.h"
#include "kiln/train.h"
#include "ops/ops-impl.h"

/* max_norm: clip the gradients' global norm to it first; NAN: no clipping. */
static kiln_status step(const char *op, kiln_optimizer *opt, kiln_tensor loss, double max_norm, double *value) {
    if (value) *value = NAN;
    if (!opt) {
        kiln_release(loss);
        return kiln__report(KILN_ERR_NULL, op, "optimizer is NULL");
    }
    if (!kiln__object_live(opt, KILN__OPTIMIZER_KIND)) {
        if (kiln_is_valid(loss)) kiln_release(loss);
        return kiln__object_check(opt, KILN__OPTIMIZER_KIND, op);
    }
    const char *outer = kiln__op_scope_enter(op); /* the calls inside report as it */
    kiln_grads *g = NULL;
    double v = NAN;
    kiln_status st = kiln_backward_value(loss, &g, &v);
    if (value) *value = v;
    if (st == KILN_OK && !isnan(max_norm)) st = kiln_clip_grad_norm(opt, g, max_norm, NULL);
    if (st == KILN_OK) st = kiln_optimizer_step(opt, g);
    kiln_grads_free(g);
    kiln__op_scope_leave(outer);
    return st;
}

kiln_status kiln_train_step(kiln_optimizer *opt, kiln_tensor loss, double *value) {
    return step("kiln_train_step", opt, loss, NAN, value);
}

kiln_status kiln_train_step_clip(kiln_optimizer *opt, kiln_tensor loss, double max_norm, double *value) {
    if (!(max_norm > 0 && isfinite(max_norm))) {
        if (value) *value = NAN;
        kiln_release(loss);
        return kiln__report(KILN_ERR_INVALID_ARGUMENT, "kiln_train_step_clip", "max_norm %g must be finite and > 0",
                            max_norm);
    }
    return step("kiln_train_step_clip", opt, loss, max_norm, value);
}
