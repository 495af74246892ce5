/* The gradient scaler (include/kiln/amp.h): PyTorch's GradScaler rule on one host-side scale.
 * The unscale and the inf/NaN check are one pass over the gradients (each multiplied in place,
 * then its squares summed in f64: a sum that is inf or NaN exactly when a gradient holds one,
 * as no f32 square overflows an f64), read once before the step is taken or skipped. */
#include <math.h>
#include <stdlib.h>

#include "kiln/amp.h"
#include "kiln/tensor.h"
#include "optim/optim-impl.h"

struct kiln_grad_scaler {
    kiln_grad_scaler_options o;
    double scale;
    int64_t good_steps;
};

kiln_grad_scaler_options kiln_grad_scaler_defaults(void) {
    return (kiln_grad_scaler_options){.init_scale = 65536.0, .growth_factor = 2.0, .backoff_factor = 0.5,
                                      .growth_interval = 2000};
}

kiln_grad_scaler *kiln_grad_scaler_new(kiln_grad_scaler_options o) {
    const char *op = "kiln_grad_scaler_new";
    if (!(o.init_scale > 0 && isfinite(o.init_scale)) || !(o.growth_factor > 1 && isfinite(o.growth_factor)) ||
        !(o.backoff_factor > 0 && o.backoff_factor < 1) || o.growth_interval < 1) {
        kiln__report(KILN_ERR_INVALID_ARGUMENT, op,
                     "options out of range: init_scale %g (> 0), growth_factor %g (> 1), backoff_factor %g (in (0, 1)), "
                     "growth_interval %lld (>= 1)",
                     o.init_scale, o.growth_factor, o.backoff_factor, (long long)o.growth_interval);
        return NULL;
    }
    kiln_grad_scaler *s = calloc(1, sizeof *s);
    if (!s) {
        kiln__report(KILN_ERR_OUT_OF_MEMORY, op, "cannot allocate the gradient scaler");
        return NULL;
    }
    s->o = o;
    s->scale = o.init_scale;
    return s;
}

kiln_tensor kiln_grad_scaler_scale(kiln_grad_scaler *s, kiln_tensor loss) {
    if (!s) {
        KILN__OP_BEGIN("kiln_grad_scaler_scale");
        kiln__drop(1, kiln__arg(&c, loss));
        if (!c.err) kiln__fail(&c, KILN_ERR_NULL, "the gradient scaler is NULL");
        return kiln__result(&c, NULL);
    }
    const char *outer = kiln__op_scope_enter("kiln_grad_scaler_scale");
    kiln_tensor out = kiln_mul_scalar(loss, s->scale);
    kiln__op_scope_leave(outer);
    return out;
}

kiln_status kiln_grad_scaler_step(kiln_grad_scaler *s, kiln_optimizer *opt, kiln_grads *g, bool *stepped) {
    KILN__OP_BEGIN("kiln_grad_scaler_step");
    if (stepped) *stepped = false;
    if (!s || !opt || !g || !stepped) {
        kiln__fail(&c, KILN_ERR_NULL, "%s is NULL",
                   !s ? "the gradient scaler" : !opt ? "optimizer" : !g ? "gradients container" : "stepped");
        return kiln__optim_finish(&c);
    }
    kiln__tensor *squares = kiln__optim_grads_unscale(&c, opt, g, 1.0 / s->scale);
    if (c.err) return kiln__optim_finish(&c);
    double sum = 0;
    if (squares) {
        kiln_status st = kiln_into_scalar_f64(kiln__handle_new(squares), &sum);
        if (st != KILN_OK) return st;
    }
    if (!isfinite(sum)) { /* this scale overflowed: skip, back off */
        s->scale *= s->o.backoff_factor;
        s->good_steps = 0;
        return KILN_OK;
    }
    kiln_status st = kiln_optimizer_step(opt, g);
    if (st != KILN_OK) return st;
    *stepped = true;
    if (++s->good_steps >= s->o.growth_interval) {
        s->scale *= s->o.growth_factor;
        s->good_steps = 0;
    }
    return KILN_OK;
}

double kiln_grad_scaler_get_scale(const kiln_grad_scaler *s) { return s ? s->scale : NAN; }

void kiln_grad_scaler_free(kiln_grad_scaler *s) { free(s); }
