/* Optimizer internals shared by the optimizers, clipping and checkpoints.
 *
 * An optimizer holds the module's trainable parameter slots (the module's own handles, read
 * afresh at every step, so a replaced handle is followed) and, per parameter, its state
 * tensors, created at the parameter's first update. Updates are one fused op per parameter
 * whose outputs are the parameter's and the state's own storages. */
#ifndef KILN_OPTIM_IMPL_H
#define KILN_OPTIM_IMPL_H

#include "kiln/optim.h"
#include "ops/optim_ops-impl.h"

#define KILN__OPTIM_MAX_STATE 2

typedef enum { KILN__OPTIM_SGD, KILN__OPTIM_ADAM } kiln__optim_kind;

typedef struct {
    char name[96];                               /* the module's name for it ("0.weight") */
    kiln_tensor *slot;                           /* the module's handle */
    kiln__tensor *state[KILN__OPTIM_MAX_STATE]; /* NULL until the first update */
    int64_t step;                                /* updates of this parameter (Adam's bias correction) */
} kiln__optim_param;

struct kiln_optimizer {
    kiln__optim_kind kind;
    const char *type; /* "sgd" or "adam" (checkpoints) */
    kiln_sgd_options sgd;
    kiln_adam_options adam;
    double lr;
    int64_t steps;
    int n_params;
    kiln__optim_param *params;
};

/* Number of state tensors and their names (PyTorch's: momentum_buffer; exp_avg, exp_avg_sq). */
int kiln__optim_state_count(const kiln_optimizer *opt);
const char *kiln__optim_state_name(const kiln_optimizer *opt, int i);
/* Validates hyperparameters as the constructors do; false + error reported under op. */
bool kiln__optim_check_sgd(const char *op, kiln_sgd_options o);
bool kiln__optim_check_adam(const char *op, kiln_adam_options o);
/* Reports c's error as the thread's last error (if any) and returns its status. */
kiln_status kiln__optim_finish(kiln__opctx *c);
/* The usable tensor behind a module slot (borrowed); NULL + c->err if stale or poisoned. */
kiln__tensor *kiln__optim_slot_tensor(kiln__opctx *c, kiln_tensor h);
/* Drops every parameter's state. */
void kiln__optim_clear_state(kiln_optimizer *opt);
/* An optimizer over the module's trainable parameters (f32 or f64); NULL + error under op. */
kiln_optimizer *kiln__optim_new(const char *op, kiln_module *model, kiln__optim_kind kind);
/* The fused update of one parameter (sgd.c, adam.c); its state tensors exist and p->step
 * already counts this update. False + c->err if it could not be queued. */
bool kiln__sgd_apply(kiln__opctx *c, const kiln_optimizer *opt, const kiln__optim_param *p, kiln__tensor *param,
                     const kiln__tensor *grad);
bool kiln__adam_apply(kiln__opctx *c, const kiln_optimizer *opt, const kiln__optim_param *p, kiln__tensor *param,
                      const kiln__tensor *grad);

#endif
