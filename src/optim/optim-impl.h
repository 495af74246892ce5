/* Optimizer internals shared by the optimizers, clipping and checkpoints.
 *
 * An optimizer holds parameter slots and, per parameter, its state tensors, created at the
 * parameter's first update. Built from a module, a slot is the module's own handle (read
 * afresh at every step, so a replaced handle is followed); built from parameter groups, a
 * slot is the optimizer's own reference (`own`) to the caller's tensor. Each parameter
 * belongs to a group with its own learning rate and weight decay. Updates are one fused op per parameter
 * whose outputs are the parameter's and the state's own storages. */
#ifndef KILN_OPTIM_IMPL_H
#define KILN_OPTIM_IMPL_H

#include <math.h>

#include "kiln/optim.h"
#include "ops/optim_ops-impl.h"

#define KILN__OPTIM_MAX_STATE 3 /* RMSprop: square_avg, momentum_buffer, grad_avg */

typedef enum { KILN__OPTIM_SGD, KILN__OPTIM_ADAM, KILN__OPTIM_RMSPROP, KILN__OPTIM_ADAGRAD } kiln__optim_kind;

typedef struct {
    char name[96];                               /* the module's name for it ("0.weight") */
    kiln_tensor *slot;                           /* the module's handle */
    kiln__tensor *state[KILN__OPTIM_MAX_STATE]; /* NULL until the first update */
    int64_t step;                                /* updates of this parameter (Adam's bias correction) */
    int group;                                   /* index into the optimizer's groups */
    kiln_tensor own;                             /* the optimizer's reference (groups), or KILN_NONE */
    bool tentative; /* a step's working copy: state and parameter are fresh copies, committed later */
} kiln__optim_param;

typedef struct {
    double lr, weight_decay;
} kiln__optim_group;

struct kiln_optimizer {
    kiln__optim_kind kind;
    const char *type; /* "sgd", "adam", "rmsprop" or "adagrad" (checkpoints) */
    kiln_sgd_options sgd;
    kiln_adam_options adam;
    kiln_rmsprop_options rmsprop;
    kiln_adagrad_options adagrad;
    int64_t steps;
    int n_groups;
    kiln__optim_group *groups;
    int n_params;
    kiln__optim_param *params;
};

/* Number of state tensors and their names (PyTorch's: momentum_buffer; exp_avg, exp_avg_sq;
 * square_avg, momentum_buffer, grad_avg; sum), in the order of kiln__optim_param.state. */
int kiln__optim_state_count(const kiln_optimizer *opt);
const char *kiln__optim_state_name(const kiln_optimizer *opt, int i);
/* Validates hyperparameters as the constructors do; false + error reported under op. */
/* A double option as given, or its default where a designated initializer left it 0 (+0.0);
 * KILN_ZERO (-0.0) asks for a real 0. */
static inline double kiln__option_or(double v, double default_value) {
    return v != 0 ? v : signbit(v) ? 0.0 : default_value;
}
/* The options with every field left 0 replaced by its default (see optim.h). */
kiln_sgd_options kiln__sgd_resolve(kiln_sgd_options o);
kiln_adam_options kiln__adam_resolve(kiln_adam_options o);
kiln_rmsprop_options kiln__rmsprop_resolve(kiln_rmsprop_options o);
kiln_adagrad_options kiln__adagrad_resolve(kiln_adagrad_options o);
bool kiln__optim_check_sgd(const char *op, kiln_sgd_options o);
bool kiln__optim_check_adam(const char *op, kiln_adam_options o);
bool kiln__optim_check_rmsprop(const char *op, kiln_rmsprop_options o);
bool kiln__optim_check_adagrad(const char *op, kiln_adagrad_options o);
/* The kind's name in checkpoints ("sgd", ...). */
const char *kiln__optim_type_name(kiln__optim_kind kind);
/* An optimizer over a plain list of n parameters (at least one, as PyTorch's "empty parameter
 * list") in one group with lr and weight_decay; NULL + error under op. */
kiln_optimizer *kiln__optim_new_params(const char *op, int n, const kiln_tensor *params, kiln__optim_kind kind,
                                       double lr, double weight_decay);
/* Reports c's error as the thread's last error (if any) and returns its status. */
kiln_status kiln__optim_finish(kiln__opctx *c);
/* Multiplies each gradient in g of opt's parameters by factor, in place, and gives the f64
 * sum of their squares after (a 1-element tensor: inf or NaN when any gradient holds one;
 * NULL when no parameter has a gradient, or with c's error set). For kiln_grad_scaler_step. */
kiln__tensor *kiln__optim_grads_unscale(kiln__opctx *c, kiln_optimizer *opt, kiln_grads *g, double factor);
/* The usable tensor behind a module slot (borrowed); NULL + c->err if stale or poisoned. */
kiln__tensor *kiln__optim_slot_tensor(kiln__opctx *c, kiln_tensor h);
/* Drops every parameter's state. */
void kiln__optim_clear_state(kiln_optimizer *opt);
/* An optimizer over the module's trainable parameters (f32 or f64) in one group with lr and
 * weight_decay; NULL + error under op. */
kiln_optimizer *kiln__optim_new(const char *op, kiln_module *model, kiln__optim_kind kind, double lr, double weight_decay);
/* An optimizer over the caller's parameter groups (a reference taken to each parameter);
 * a group's negative lr or weight decay means lr / weight_decay. NULL + error under op. */
kiln_optimizer *kiln__optim_new_groups(const char *op, int n_groups, const kiln_param_group *groups, kiln__optim_kind kind,
                                       double lr, double weight_decay);
/* Whether lr is a usable learning rate; false + error reported under op. */
bool kiln__optim_check_lr(const char *op, double lr);
/* The fused update of one parameter (sgd.c, adam.c, adaptive.c); its state tensors exist and p->step
 * already counts this update. False + c->err if it could not be queued. */
bool kiln__sgd_apply(kiln__opctx *c, const kiln_optimizer *opt, const kiln__optim_param *p, kiln__tensor *param,
                     const kiln__tensor *grad);
bool kiln__adam_apply(kiln__opctx *c, const kiln_optimizer *opt, const kiln__optim_param *p, kiln__tensor *param,
                      const kiln__tensor *grad);
bool kiln__rmsprop_apply(kiln__opctx *c, const kiln_optimizer *opt, const kiln__optim_param *p, kiln__tensor *param,
                         const kiln__tensor *grad);
bool kiln__adagrad_apply(kiln__opctx *c, const kiln_optimizer *opt, const kiln__optim_param *p, kiln__tensor *param,
                         const kiln__tensor *grad);
/* Whether param's device has every kernel opt's updates use. */
bool kiln__optim_has_kernels(const kiln_optimizer *opt, kiln_device dev);

#endif
