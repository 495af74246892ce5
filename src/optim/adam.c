/* Adam and AdamW, as torch.optim.Adam / AdamW (non-amsgrad):
 *   L2: g += wd * p      decoupled: p *= 1 - lr * wd
 *   m = lerp(m, g, 1 - beta1);  v = beta2 * v + (1 - beta2) * g * g
 *   p -= lr / (1 - beta1^t) * m / (sqrt(v) / sqrt(1 - beta2^t) + eps)
 * with t the parameter's own update count; bias corrections are computed here on the host,
 * the update is one fused kernel per parameter (ADAM_UPDATE). Its kind table and public
 * constructors (AdamW is Adam with kiln_adamw_defaults). */
#include <math.h>

#include "optim/optim-impl.h"

kiln_adam_options kiln_adam_defaults(void) {
    return (kiln_adam_options){
        .lr = 1e-3, .beta1 = 0.9, .beta2 = 0.999, .eps = 1e-8, .weight_decay = 0, .decoupled_weight_decay = false};
}

kiln_adam_options kiln_adamw_defaults(void) {
    kiln_adam_options o = kiln_adam_defaults();
    o.weight_decay = 0.01;
    o.decoupled_weight_decay = true;
    return o;
}

static void adam_resolve(kiln__optim_options *u) {
    kiln_adam_options *o = &u->adam, d = kiln_adam_defaults();
    o->lr = kiln__option_or(o->lr, d.lr);
    o->beta1 = kiln__option_or(o->beta1, d.beta1);
    o->beta2 = kiln__option_or(o->beta2, d.beta2);
    o->eps = kiln__option_or(o->eps, d.eps);
    o->weight_decay = kiln__option_or(o->weight_decay, 0.0);
}

static bool adam_check(const char *op, const kiln__optim_options *u) {
    const kiln_adam_options *o = &u->adam;
    if (!kiln__optim_check_lr(op, o->lr)) return false;
    const char *bad = NULL;
    if (!(o->beta1 >= 0 && o->beta1 < 1)) bad = "beta1 must be in [0, 1)";
    else if (!(o->beta2 >= 0 && o->beta2 < 1)) bad = "beta2 must be in [0, 1)";
    else if (!kiln__optim_nonneg(o->eps)) bad = "eps must be finite and >= 0";
    else if (!kiln__optim_nonneg(o->weight_decay)) bad = "weight decay must be finite and >= 0";
    if (bad) kiln__report(KILN_ERR_INVALID_ARGUMENT, op, "%s", bad);
    return !bad;
}

static void adam_rates(const kiln__optim_options *u, double *lr, double *weight_decay) {
    *lr = u->adam.lr, *weight_decay = u->adam.weight_decay;
}

static int adam_state_count(const kiln__optim_options *u) {
    (void)u;
    return 2;
}

static const char *adam_state_name(const kiln__optim_options *u, int i) {
    (void)u;
    return i == 0 ? "exp_avg" : "exp_avg_sq";
}

static bool adam_master_weights(const kiln__optim_options *u) { return u->adam.master_weights; }

static bool adam_has_kernels(const kiln__optim_options *u, kiln_device dev) {
    (void)u;
    return kiln__t_has_kernel(dev, KILN__OP_ADAM_UPDATE);
}

static bool adam_apply(kiln__opctx *c, const kiln_optimizer *opt, const kiln__optim_param *p, kiln__tensor *param,
                       const kiln__tensor *grad) {
    const kiln_adam_options *o = &opt->options.adam;
    const kiln__optim_group *g = &opt->groups[p->group];
    double lr = g->lr, wd = g->weight_decay;
    double t = (double)p->step; /* already counts this update */
    double bc1 = 1.0 - pow(o->beta1, t), bc2 = 1.0 - pow(o->beta2, t);
    bool decoupled = o->decoupled_weight_decay && wd != 0;
    kiln__adam_update u = {.step_size = lr / bc1, .beta1 = o->beta1, .beta2 = o->beta2, .eps = o->eps,
                           .sqrt_bias_correction2 = sqrt(bc2),
                           .weight_decay_term = decoupled ? 1.0 - lr * wd : wd,
                           .first = p->step == 1, .decoupled = decoupled, .tentative = p->tentative};
    return kiln__t_adam_update(c, param, p->state[0], p->state[1], grad, &u);
}

static int adam_hypers(kiln__optim_options *u, double *flag, kiln__optim_hyper *out) {
    kiln_adam_options *a = &u->adam;
    *flag = a->decoupled_weight_decay;
    kiln__optim_hyper h[] = {{"optim.beta1", &a->beta1}, {"optim.beta2", &a->beta2}, {"optim.eps", &a->eps},
                             {"optim.weight_decay", &a->weight_decay}, {"optim.decoupled_weight_decay", flag}};
    memcpy(out, h, sizeof h);
    return 5;
}

static void adam_set_loaded(kiln__optim_options *u, double lr, double flag) {
    u->adam.lr = lr, u->adam.decoupled_weight_decay = flag != 0;
}

const kiln__optim_kind kiln__adam_kind = {
    .type = "adam", .options_size = sizeof(kiln_adam_options), .resolve = adam_resolve, .check = adam_check,
    .rates = adam_rates, .state_count = adam_state_count, .state_name = adam_state_name,
    .master_weights = adam_master_weights, .has_kernels = adam_has_kernels, .apply = adam_apply, .hypers = adam_hypers,
    .set_loaded = adam_set_loaded};

kiln_optimizer *kiln_adam_new(kiln_module *model, kiln_adam_options o) {
    return kiln__optim_create(&kiln__adam_kind, "kiln_adam_new", &o, KILN__OPTIM_MODULE(model));
}

kiln_optimizer *kiln_adam_new_params(int n, const kiln_tensor *params, kiln_adam_options o) {
    return kiln__optim_create(&kiln__adam_kind, "kiln_adam_new_params", &o, KILN__OPTIM_PARAMS(n, params));
}

kiln_optimizer *kiln_adam_new_groups(int n_groups, const kiln_param_group *groups, kiln_adam_options o) {
    return kiln__optim_create(&kiln__adam_kind, "kiln_adam_new_groups", &o, KILN__OPTIM_GROUPS(n_groups, groups));
}
