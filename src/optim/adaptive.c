/* RMSprop and Adagrad, as torch.optim.RMSprop / Adagrad (non-foreach, not maximize): the
 * options, their checks, and one fused update per parameter (the formulas are in
 * include/kiln/optim.h and src/backend/cpu/optim_adaptive.c). Adagrad's decayed rate is
 * computed here on the host from the parameter's own update count. */
#include <math.h>

#include "optim/optim-impl.h"

kiln_rmsprop_options kiln_rmsprop_defaults(void) {
    return (kiln_rmsprop_options){.lr = 0.01, .alpha = 0.99, .eps = 1e-8, .weight_decay = 0, .momentum = 0,
                                  .centered = false};
}

kiln_adagrad_options kiln_adagrad_defaults(void) {
    return (kiln_adagrad_options){.lr = 0.01, .lr_decay = 0, .weight_decay = 0, .initial_accumulator_value = 0,
                                  .eps = 1e-10};
}

kiln_rmsprop_options kiln__rmsprop_resolve(kiln_rmsprop_options o) {
    kiln_rmsprop_options d = kiln_rmsprop_defaults();
    o.lr = kiln__option_or(o.lr, d.lr);
    o.alpha = kiln__option_or(o.alpha, d.alpha);
    o.eps = kiln__option_or(o.eps, d.eps);
    return o;
}

kiln_adagrad_options kiln__adagrad_resolve(kiln_adagrad_options o) {
    kiln_adagrad_options d = kiln_adagrad_defaults();
    o.lr = kiln__option_or(o.lr, d.lr);
    o.eps = kiln__option_or(o.eps, d.eps);
    return o;
}

static bool nonneg(double v) { return v >= 0 && isfinite(v); }

bool kiln__optim_check_rmsprop(const char *op, kiln_rmsprop_options o) {
    if (!kiln__optim_check_lr(op, o.lr)) return false;
    const char *bad = NULL;
    if (!nonneg(o.alpha)) bad = "alpha must be finite and >= 0";
    else if (!nonneg(o.eps)) bad = "eps must be finite and >= 0";
    else if (!nonneg(o.weight_decay)) bad = "weight decay must be finite and >= 0";
    else if (!nonneg(o.momentum)) bad = "momentum must be finite and >= 0";
    if (bad) kiln__report(KILN_ERR_INVALID_ARGUMENT, op, "%s", bad);
    return !bad;
}

bool kiln__optim_check_adagrad(const char *op, kiln_adagrad_options o) {
    if (!kiln__optim_check_lr(op, o.lr)) return false;
    const char *bad = NULL;
    if (!nonneg(o.lr_decay)) bad = "lr_decay must be finite and >= 0";
    else if (!nonneg(o.weight_decay)) bad = "weight decay must be finite and >= 0";
    else if (!nonneg(o.initial_accumulator_value)) bad = "initial_accumulator_value must be finite and >= 0";
    else if (!nonneg(o.eps)) bad = "eps must be finite and >= 0";
    if (bad) kiln__report(KILN_ERR_INVALID_ARGUMENT, op, "%s", bad);
    return !bad;
}

kiln_optimizer *kiln_rmsprop_new(kiln_module *model, kiln_rmsprop_options o) {
    o = kiln__rmsprop_resolve(o);
    if (!kiln__optim_check_rmsprop("kiln_rmsprop_new", o)) return NULL;
    kiln_optimizer *opt = kiln__optim_new("kiln_rmsprop_new", model, KILN__OPTIM_RMSPROP, o.lr, o.weight_decay);
    if (opt) opt->rmsprop = o;
    return opt;
}

kiln_optimizer *kiln_rmsprop_new_groups(int n_groups, const kiln_param_group *groups, kiln_rmsprop_options o) {
    o = kiln__rmsprop_resolve(o);
    if (!kiln__optim_check_rmsprop("kiln_rmsprop_new_groups", o)) return NULL;
    kiln_optimizer *opt = kiln__optim_new_groups("kiln_rmsprop_new_groups", n_groups, groups, KILN__OPTIM_RMSPROP, o.lr,
                                                 o.weight_decay);
    if (opt) opt->rmsprop = o;
    return opt;
}

kiln_optimizer *kiln_rmsprop_new_params(int n, const kiln_tensor *params, kiln_rmsprop_options o) {
    o = kiln__rmsprop_resolve(o);
    if (!kiln__optim_check_rmsprop("kiln_rmsprop_new_params", o)) return NULL;
    kiln_optimizer *opt = kiln__optim_new_params("kiln_rmsprop_new_params", n, params, KILN__OPTIM_RMSPROP, o.lr, o.weight_decay);
    if (opt) opt->rmsprop = o;
    return opt;
}

kiln_optimizer *kiln_adagrad_new(kiln_module *model, kiln_adagrad_options o) {
    o = kiln__adagrad_resolve(o);
    if (!kiln__optim_check_adagrad("kiln_adagrad_new", o)) return NULL;
    kiln_optimizer *opt = kiln__optim_new("kiln_adagrad_new", model, KILN__OPTIM_ADAGRAD, o.lr, o.weight_decay);
    if (opt) opt->adagrad = o;
    return opt;
}

kiln_optimizer *kiln_adagrad_new_groups(int n_groups, const kiln_param_group *groups, kiln_adagrad_options o) {
    o = kiln__adagrad_resolve(o);
    if (!kiln__optim_check_adagrad("kiln_adagrad_new_groups", o)) return NULL;
    kiln_optimizer *opt = kiln__optim_new_groups("kiln_adagrad_new_groups", n_groups, groups, KILN__OPTIM_ADAGRAD, o.lr,
                                                 o.weight_decay);
    if (opt) opt->adagrad = o;
    return opt;
}

kiln_optimizer *kiln_adagrad_new_params(int n, const kiln_tensor *params, kiln_adagrad_options o) {
    o = kiln__adagrad_resolve(o);
    if (!kiln__optim_check_adagrad("kiln_adagrad_new_params", o)) return NULL;
    kiln_optimizer *opt = kiln__optim_new_params("kiln_adagrad_new_params", n, params, KILN__OPTIM_ADAGRAD, o.lr, o.weight_decay);
    if (opt) opt->adagrad = o;
    return opt;
}

bool kiln__rmsprop_apply(kiln__opctx *c, const kiln_optimizer *opt, const kiln__optim_param *p, kiln__tensor *param,
                         const kiln__tensor *grad) {
    const kiln_rmsprop_options *o = &opt->rmsprop;
    const kiln__optim_group *g = &opt->groups[p->group];
    kiln__rmsprop_update u = {.lr = g->lr, .alpha = o->alpha, .eps = o->eps, .weight_decay = g->weight_decay,
                              .momentum = o->momentum, .first = p->step == 1, .centered = o->centered,
                              .tentative = p->tentative};
    /* state: square_avg, then momentum_buffer (momentum > 0), then grad_avg (centered) */
    kiln__tensor *buf = o->momentum != 0 ? p->state[1] : NULL;
    kiln__tensor *avg = o->centered ? p->state[o->momentum != 0 ? 2 : 1] : NULL;
    if (avg && !kiln__t_rmsprop_grad_avg(c, avg, param, grad, &u)) return false;
    return kiln__t_rmsprop_update(c, param, p->state[0], buf, avg, grad, &u);
}

bool kiln__adagrad_apply(kiln__opctx *c, const kiln_optimizer *opt, const kiln__optim_param *p, kiln__tensor *param,
                         const kiln__tensor *grad) {
    const kiln_adagrad_options *o = &opt->adagrad;
    const kiln__optim_group *g = &opt->groups[p->group];
    kiln__adagrad_update u = {.clr = g->lr / (1.0 + (double)(p->step - 1) * o->lr_decay), .eps = o->eps,
                              .weight_decay = g->weight_decay,
                              .initial_accumulator_value = o->initial_accumulator_value, .first = p->step == 1,
                                .tentative = p->tentative};
    return kiln__t_adagrad_update(c, param, p->state[0], grad, &u);
}
