/* kiln gradient scaler: loss scaling for f16 autocast (torch.amp.GradScaler).
 *
 * f16 keeps 5 exponent bits, so small gradients flush to 0. The scaler multiplies the loss by
 * a large factor before backward, divides the gradients by it before the optimizer's step,
 * and skips the step when any gradient came out inf or NaN (the factor was too large): the
 * factor then shrinks (backoff), and grows again after growth_interval good steps in a row.
 * bf16 has f32's exponent range and needs none of this.
 *
 *   kiln_grad_scaler *gs = kiln_grad_scaler_new(kiln_grad_scaler_defaults());
 *   kiln_autocast_begin(KILN_F16);
 *   kiln_tensor loss = kiln_cross_entropy(kiln_module_forward(model, kiln_ref(x)), kiln_ref(y), ce);
 *   kiln_autocast_end();
 *   if (kiln_backward(kiln_grad_scaler_scale(gs, loss), &grads) == KILN_OK) {
 *       bool stepped;
 *       kiln_grad_scaler_step(gs, opt, grads, &stepped);   // unscale, check, step or skip
 *   }
 *   kiln_grads_free(grads);
 *   kiln_grad_scaler_free(gs);
 */
#ifndef KILN_AMP_H
#define KILN_AMP_H

#include "core.h"
#include "optim.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
    double init_scale;       /* 65536 */
    double growth_factor;    /* 2: > 1 */
    double backoff_factor;   /* 0.5: in (0, 1) */
    int64_t growth_interval; /* 2000 good steps in a row before growing: >= 1 */
} kiln_grad_scaler_options;
KILN_API kiln_grad_scaler_options kiln_grad_scaler_defaults(void);

typedef struct kiln_grad_scaler kiln_grad_scaler;
/* NULL (KILN_ERR_INVALID_ARGUMENT, kiln_last_error) for options out of range. */
KILN_API kiln_grad_scaler *kiln_grad_scaler_new(kiln_grad_scaler_options o);
/* loss times the current scale (consumes loss). */
KILN_API kiln_tensor kiln_grad_scaler_scale(kiln_grad_scaler *s, kiln_tensor loss);
/* Divides opt's gradients in g by the scale; when all are finite runs kiln_optimizer_step(opt, g)
 * (*stepped true), else skips it (*stepped false) and backs the scale off; grows the scale after
 * growth_interval steps in a row. One read (waits for the gradients). The status of the check
 * or the step; a NULL argument is KILN_ERR_NULL. */
KILN_API kiln_status kiln_grad_scaler_step(kiln_grad_scaler *s, kiln_optimizer *opt, kiln_grads *g, bool *stepped);
/* The current scale (NaN for NULL). */
KILN_API double kiln_grad_scaler_get_scale(const kiln_grad_scaler *s);
KILN_API void kiln_grad_scaler_free(kiln_grad_scaler *s);

/* ---- call sites ------------------------------------------------------------------------- */
#define KILN_AMP_API(X)                                                                        \
    X(kiln_grad_scaler *, grad_scaler_new, (kiln_grad_scaler_options o), (o))                \
    X(kiln_tensor, grad_scaler_scale, (kiln_grad_scaler * s, kiln_tensor loss), (s, loss)) \
    X(kiln_status, grad_scaler_step, (kiln_grad_scaler * s, kiln_optimizer * opt, kiln_grads * g, bool *stepped), \
      (s, opt, g, stepped))
KILN_AMP_API(KILN__AT_DECLARE)

#if !defined(KILN_BUILDING) && !defined(KILN_NO_CALL_SITE_MACROS)
#pragma GCC system_header /* see core.h: errors in these calls name the caller's line */
#define kiln_grad_scaler_new(...) KILN__AT(grad_scaler_new, __VA_ARGS__)
#define kiln_grad_scaler_scale(...) KILN__AT(grad_scaler_scale, __VA_ARGS__)
#define kiln_grad_scaler_step(...) KILN__AT(grad_scaler_step, __VA_ARGS__)
#endif

#ifdef __cplusplus
}
#endif

#endif
