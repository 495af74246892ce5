/* SGD with momentum, dampening, Nesterov and (L2) weight decay, as torch.optim.SGD:
 *   g += wd * p;  b = first ? g : mu * b + (1 - dampening) * g;  g = nesterov ? g + mu * b : b;
 *   p -= lr * g
 * in one fused kernel per parameter (SGD_UPDATE). Its kind table and public constructors. */
#include "optim/optim-impl.h"

kiln_sgd_options kiln_sgd_defaults(void) {
    return (kiln_sgd_options){.lr = 0.01, .momentum = 0, .dampening = 0, .weight_decay = 0, .nesterov = false};
}

static void sgd_resolve(kiln__optim_options *u) { u->sgd.lr = kiln__option_or(u->sgd.lr, kiln_sgd_defaults().lr); }

static bool sgd_check(const char *op, const kiln__optim_options *u) {
    const kiln_sgd_options *o = &u->sgd;
    if (!kiln__optim_check_lr(op, o->lr)) return false;
    const char *bad = NULL;
    if (!kiln__optim_nonneg(o->momentum)) bad = "momentum must be finite and >= 0";
    else if (!isfinite(o->dampening)) bad = "dampening must be finite";
    else if (!kiln__optim_nonneg(o->weight_decay)) bad = "weight decay must be finite and >= 0";
    else if (o->nesterov && (o->momentum <= 0 || o->dampening != 0)) bad = "nesterov needs momentum > 0 and dampening 0";
    if (bad) kiln__report(KILN_ERR_INVALID_ARGUMENT, op, "%s", bad);
    return !bad;
}

static void sgd_rates(const kiln__optim_options *u, double *lr, double *weight_decay) {
    *lr = u->sgd.lr, *weight_decay = u->sgd.weight_decay;
}

static int sgd_state_count(const kiln__optim_options *u) { return u->sgd.momentum != 0 ? 1 : 0; }

static const char *sgd_state_name(const kiln__optim_options *u, int i) {
    (void)u, (void)i;
    return "momentum_buffer";
}

static bool sgd_master_weights(const kiln__optim_options *u) { return u->sgd.master_weights; }

static bool sgd_has_kernels(const kiln__optim_options *u, kiln_device dev) {
    (void)u;
    return kiln__t_has_kernel(dev, KILN__OP_SGD_UPDATE);
}

static bool sgd_apply(kiln__opctx *c, const kiln_optimizer *opt, const kiln__optim_param *p, kiln__tensor *param,
                      const kiln__tensor *grad) {
    const kiln_sgd_options *o = &opt->options.sgd;
    const kiln__optim_group *g = &opt->groups[p->group];
    kiln__sgd_update u = {.lr = g->lr, .momentum = o->momentum, .dampening = o->dampening,
                          .weight_decay = g->weight_decay, .first = p->step == 1, .nesterov = o->nesterov,
                          .tentative = p->tentative};
    return kiln__t_sgd_update(c, param, o->momentum != 0 ? p->state[0] : NULL, grad, &u, p->bf16_copy);
}

static int sgd_hypers(kiln__optim_options *u, double *flag, kiln__optim_hyper *out) {
    kiln_sgd_options *s = &u->sgd;
    *flag = s->nesterov;
    kiln__optim_hyper h[] = {{"optim.momentum", &s->momentum}, {"optim.dampening", &s->dampening},
                             {"optim.weight_decay", &s->weight_decay}, {"optim.nesterov", flag}};
    memcpy(out, h, sizeof h);
    return 4;
}

static void sgd_set_loaded(kiln__optim_options *u, double lr, double flag) {
    u->sgd.lr = lr, u->sgd.nesterov = flag != 0;
}

const kiln__optim_kind kiln__sgd_kind = {
    .type = "sgd", .options_size = sizeof(kiln_sgd_options), .resolve = sgd_resolve, .check = sgd_check,
    .rates = sgd_rates, .state_count = sgd_state_count, .state_name = sgd_state_name,
    .master_weights = sgd_master_weights, .has_kernels = sgd_has_kernels, .apply = sgd_apply, .hypers = sgd_hypers,
    .writes_bf16_copy = true,
    .set_loaded = sgd_set_loaded};

kiln_optimizer *kiln_sgd_new(kiln_module *model, kiln_sgd_options o) {
    return kiln__optim_create(&kiln__sgd_kind, "kiln_sgd_new", &o, KILN__OPTIM_MODULE(model));
}

kiln_optimizer *kiln_sgd_new_params(int n, const kiln_tensor *params, kiln_sgd_options o) {
    return kiln__optim_create(&kiln__sgd_kind, "kiln_sgd_new_params", &o, KILN__OPTIM_PARAMS(n, params));
}

kiln_optimizer *kiln_sgd_new_groups(int n_groups, const kiln_param_group *groups, kiln_sgd_options o) {
    return kiln__optim_create(&kiln__sgd_kind, "kiln_sgd_new_groups", &o, KILN__OPTIM_GROUPS(n_groups, groups));
}
