/* RMSprop and Adagrad, as torch.optim.RMSprop / Adagrad (non-foreach, not maximize): the
 * options, their checks, one fused update per parameter (the formulas are in
 * include/kiln/optim.h and src/backend/cpu/optim_adaptive.c), their kind tables and public
 * constructors. Adagrad's decayed rate is computed here on the host from the parameter's own
 * update count. */
#include <math.h>

#include "optim/optim-impl.h"

/* ---- RMSprop ------------------------------------------------------------------------------- */

kiln_rmsprop_options kiln_rmsprop_defaults(void) {
    return (kiln_rmsprop_options){.lr = 0.01, .alpha = 0.99, .eps = 1e-8, .weight_decay = 0, .momentum = 0,
                                  .centered = false};
}

static void rmsprop_resolve(kiln__optim_options *u) {
    kiln_rmsprop_options *o = &u->rmsprop, d = kiln_rmsprop_defaults();
    o->lr = kiln__option_or(o->lr, d.lr);
    o->alpha = kiln__option_or(o->alpha, d.alpha);
    o->eps = kiln__option_or(o->eps, d.eps);
}

static bool rmsprop_check(const char *op, const kiln__optim_options *u) {
    const kiln_rmsprop_options *o = &u->rmsprop;
    if (!kiln__optim_check_lr(op, o->lr)) return false;
    const char *bad = NULL;
    if (!kiln__optim_nonneg(o->alpha)) bad = "alpha must be finite and >= 0";
    else if (!kiln__optim_nonneg(o->eps)) bad = "eps must be finite and >= 0";
    else if (!kiln__optim_nonneg(o->weight_decay)) bad = "weight decay must be finite and >= 0";
    else if (!kiln__optim_nonneg(o->momentum)) bad = "momentum must be finite and >= 0";
    if (bad) kiln__report(KILN_ERR_INVALID_ARGUMENT, op, "%s", bad);
    return !bad;
}

static void rmsprop_rates(const kiln__optim_options *u, double *lr, double *weight_decay) {
    *lr = u->rmsprop.lr, *weight_decay = u->rmsprop.weight_decay;
}

/* state: square_avg, then momentum_buffer (momentum > 0), then grad_avg (centered) */
static int rmsprop_state_count(const kiln__optim_options *u) {
    return 1 + (u->rmsprop.momentum != 0) + u->rmsprop.centered;
}

static const char *rmsprop_state_name(const kiln__optim_options *u, int i) {
    if (i == 0) return "square_avg";
    return i == 1 && u->rmsprop.momentum != 0 ? "momentum_buffer" : "grad_avg";
}

static bool rmsprop_master_weights(const kiln__optim_options *u) { return u->rmsprop.master_weights; }

static bool rmsprop_has_kernels(const kiln__optim_options *u, kiln_device dev) {
    return kiln__t_has_kernel(dev, KILN__OP_RMSPROP_UPDATE) &&
           (!u->rmsprop.centered || kiln__t_has_kernel(dev, KILN__OP_RMSPROP_GRAD_AVG));
}

static bool rmsprop_apply(kiln__opctx *c, const kiln_optimizer *opt, const kiln__optim_param *p, kiln__tensor *param,
                          const kiln__tensor *grad) {
    const kiln_rmsprop_options *o = &opt->options.rmsprop;
    const kiln__optim_group *g = &opt->groups[p->group];
    kiln__rmsprop_update u = {.lr = g->lr, .alpha = o->alpha, .eps = o->eps, .weight_decay = g->weight_decay,
                              .momentum = o->momentum, .first = p->step == 1, .centered = o->centered,
                              .tentative = p->tentative};
    kiln__tensor *buf = o->momentum != 0 ? p->state[1] : NULL;
    kiln__tensor *avg = o->centered ? p->state[o->momentum != 0 ? 2 : 1] : NULL;
    kiln__rmsprop_grad_avg a = {.alpha = o->alpha, .weight_decay = g->weight_decay, .first = p->step == 1,
                                .tentative = p->tentative};
    if (avg && !kiln__t_rmsprop_grad_avg(c, avg, param, grad, &a)) return false;
    return kiln__t_rmsprop_update(c, param, p->state[0], buf, avg, grad, &u);
}

static int rmsprop_hypers(kiln__optim_options *u, double *flag, kiln__optim_hyper *out) {
    kiln_rmsprop_options *r = &u->rmsprop;
    *flag = r->centered;
    kiln__optim_hyper h[] = {{"optim.alpha", &r->alpha}, {"optim.eps", &r->eps},
                             {"optim.weight_decay", &r->weight_decay}, {"optim.momentum", &r->momentum},
                             {"optim.centered", flag}};
    memcpy(out, h, sizeof h);
    return 5;
}

static void rmsprop_set_loaded(kiln__optim_options *u, double lr, double flag) {
    u->rmsprop.lr = lr, u->rmsprop.centered = flag != 0;
}

const kiln__optim_kind kiln__rmsprop_kind = {
    .type = "rmsprop", .options_size = sizeof(kiln_rmsprop_options), .resolve = rmsprop_resolve,
    .check = rmsprop_check, .rates = rmsprop_rates, .state_count = rmsprop_state_count,
    .state_name = rmsprop_state_name,
    .master_weights = rmsprop_master_weights, .has_kernels = rmsprop_has_kernels, .apply = rmsprop_apply,
    .hypers = rmsprop_hypers, .set_loaded = rmsprop_set_loaded};

kiln_optimizer *kiln_rmsprop_new(kiln_module *model, kiln_rmsprop_options o) {
    return kiln__optim_create(&kiln__rmsprop_kind, "kiln_rmsprop_new", &o, KILN__OPTIM_MODULE(model));
}

kiln_optimizer *kiln_rmsprop_new_groups(int n_groups, const kiln_param_group *groups, kiln_rmsprop_options o) {
    return kiln__optim_create(&kiln__rmsprop_kind, "kiln_rmsprop_new_groups", &o, KILN__OPTIM_GROUPS(n_groups, groups));
}

kiln_optimizer *kiln_rmsprop_new_params(int n, const kiln_tensor *params, kiln_rmsprop_options o) {
    return kiln__optim_create(&kiln__rmsprop_kind, "kiln_rmsprop_new_params", &o, KILN__OPTIM_PARAMS(n, params));
}

/* ---- Adagrad ------------------------------------------------------------------------------- */

kiln_adagrad_options kiln_adagrad_defaults(void) {
    return (kiln_adagrad_options){.lr = 0.01, .lr_decay = 0, .weight_decay = 0, .initial_accumulator_value = 0,
                                  .eps = 1e-10};
}

static void adagrad_resolve(kiln__optim_options *u) {
    kiln_adagrad_options *o = &u->adagrad, d = kiln_adagrad_defaults();
    o->lr = kiln__option_or(o->lr, d.lr);
    o->eps = kiln__option_or(o->eps, d.eps);
}

static bool adagrad_check(const char *op, const kiln__optim_options *u) {
    const kiln_adagrad_options *o = &u->adagrad;
    if (!kiln__optim_check_lr(op, o->lr)) return false;
    const char *bad = NULL;
    if (!kiln__optim_nonneg(o->lr_decay)) bad = "lr_decay must be finite and >= 0";
    else if (!kiln__optim_nonneg(o->weight_decay)) bad = "weight decay must be finite and >= 0";
    else if (!kiln__optim_nonneg(o->initial_accumulator_value)) bad = "initial_accumulator_value must be finite and >= 0";
    else if (!kiln__optim_nonneg(o->eps)) bad = "eps must be finite and >= 0";
    if (bad) kiln__report(KILN_ERR_INVALID_ARGUMENT, op, "%s", bad);
    return !bad;
}

static void adagrad_rates(const kiln__optim_options *u, double *lr, double *weight_decay) {
    *lr = u->adagrad.lr, *weight_decay = u->adagrad.weight_decay;
}

static int adagrad_state_count(const kiln__optim_options *u) {
    (void)u;
    return 1;
}

static const char *adagrad_state_name(const kiln__optim_options *u, int i) {
    (void)u, (void)i;
    return "sum";
}

static bool adagrad_master_weights(const kiln__optim_options *u) { return u->adagrad.master_weights; }

static bool adagrad_has_kernels(const kiln__optim_options *u, kiln_device dev) {
    (void)u;
    return kiln__t_has_kernel(dev, KILN__OP_ADAGRAD_UPDATE);
}

static bool adagrad_apply(kiln__opctx *c, const kiln_optimizer *opt, const kiln__optim_param *p, kiln__tensor *param,
                          const kiln__tensor *grad) {
    const kiln_adagrad_options *o = &opt->options.adagrad;
    const kiln__optim_group *g = &opt->groups[p->group];
    kiln__adagrad_update u = {.clr = g->lr / (1.0 + (double)(p->step - 1) * o->lr_decay), .eps = o->eps,
                              .weight_decay = g->weight_decay,
                              .initial_accumulator_value = o->initial_accumulator_value, .first = p->step == 1,
                              .tentative = p->tentative};
    return kiln__t_adagrad_update(c, param, p->state[0], grad, &u);
}

/* Adagrad has no bool option: *flag stays 0. */
static int adagrad_hypers(kiln__optim_options *u, double *flag, kiln__optim_hyper *out) {
    kiln_adagrad_options *g = &u->adagrad;
    *flag = 0;
    kiln__optim_hyper h[] = {{"optim.lr_decay", &g->lr_decay}, {"optim.eps", &g->eps},
                             {"optim.weight_decay", &g->weight_decay},
                             {"optim.initial_accumulator_value", &g->initial_accumulator_value}};
    memcpy(out, h, sizeof h);
    return 4;
}

static void adagrad_set_loaded(kiln__optim_options *u, double lr, double flag) {
    (void)flag;
    u->adagrad.lr = lr;
}

const kiln__optim_kind kiln__adagrad_kind = {
    .type = "adagrad", .options_size = sizeof(kiln_adagrad_options), .resolve = adagrad_resolve,
    .check = adagrad_check, .rates = adagrad_rates, .state_count = adagrad_state_count,
    .state_name = adagrad_state_name,
    .master_weights = adagrad_master_weights, .has_kernels = adagrad_has_kernels, .apply = adagrad_apply,
    .hypers = adagrad_hypers, .set_loaded = adagrad_set_loaded};

kiln_optimizer *kiln_adagrad_new(kiln_module *model, kiln_adagrad_options o) {
    return kiln__optim_create(&kiln__adagrad_kind, "kiln_adagrad_new", &o, KILN__OPTIM_MODULE(model));
}

kiln_optimizer *kiln_adagrad_new_groups(int n_groups, const kiln_param_group *groups, kiln_adagrad_options o) {
    return kiln__optim_create(&kiln__adagrad_kind, "kiln_adagrad_new_groups", &o, KILN__OPTIM_GROUPS(n_groups, groups));
}

kiln_optimizer *kiln_adagrad_new_params(int n, const kiln_tensor *params, kiln_adagrad_options o) {
    return kiln__optim_create(&kiln__adagrad_kind, "kiln_adagrad_new_params", &o, KILN__OPTIM_PARAMS(n, params));
}
