/* kiln_train_step: one optimisation step from a loss (backward with the loss read for the log,
 * the optimizer's update, the gradients freed), the three calls a training loop repeats. */
#include <math.h>

#include "kiln/autodiff.h"
#include "kiln/optim.h"
#include "kiln/train.h"
#include "ops/ops-impl.h"

kiln_status kiln_train_step(kiln_optimizer *opt, kiln_tensor loss, double *value) {
    if (value) *value = NAN;
    if (!opt) {
        kiln_release(loss);
        return kiln__report(KILN_ERR_NULL, "kiln_train_step", "optimizer is NULL");
    }
    if (!kiln__object_live(opt, KILN__OPTIMIZER_KIND)) {
        if (kiln_is_valid(loss)) kiln_release(loss);
        return kiln__object_check(opt, KILN__OPTIMIZER_KIND, "kiln_train_step");
    }
    const char *outer = kiln__op_scope_enter("kiln_train_step"); /* the calls inside report as it */
    kiln_grads *g = NULL;
    double v = NAN;
    kiln_status st = kiln_backward_value(loss, &g, &v);
    if (value) *value = v;
    if (st == KILN_OK) st = kiln_optimizer_step(opt, g);
    kiln_grads_free(g);
    kiln__op_scope_leave(outer);
    return st;
}
