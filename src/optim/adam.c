/* Adam and AdamW, as torch.optim.Adam / AdamW (non-amsgrad):
 *   L2: g += wd * p      decoupled: p *= 1 - lr * wd
 *   m = lerp(m, g, 1 - beta1);  v = beta2 * v + (1 - beta2) * g * g
 *   p -= lr / (1 - beta1^t) * m / (sqrt(v) / sqrt(1 - beta2^t) + eps)
 * with t the parameter's own update count; bias corrections are computed here on the host,
 * the update is one fused kernel per parameter (ADAM_UPDATE). */
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

kiln_adam_options kiln__adam_resolve(kiln_adam_options o) {
    kiln_adam_options d = kiln_adam_defaults();
    o.lr = kiln__option_or(o.lr, d.lr);
    o.beta1 = kiln__option_or(o.beta1, d.beta1);
    o.beta2 = kiln__option_or(o.beta2, d.beta2);
    o.eps = kiln__option_or(o.eps, d.eps);
    o.weight_decay = kiln__option_or(o.weight_decay, 0.0);
    return o;
}

kiln_optimizer *kiln_adam_new(kiln_module *model, kiln_adam_options o) {
    o = kiln__adam_resolve(o);
    if (!kiln__optim_check_adam("kiln_adam_new", o)) return NULL;
    kiln_optimizer *opt = kiln__optim_new("kiln_adam_new", model, KILN__OPTIM_ADAM, o.lr, o.weight_decay);
    if (opt) opt->adam = o;
    return opt;
}

kiln_optimizer *kiln_adam_new_params(int n, const kiln_tensor *params, kiln_adam_options o) {
    o = kiln__adam_resolve(o);
    if (!kiln__optim_check_adam("kiln_adam_new_params", o)) return NULL;
    kiln_optimizer *opt = kiln__optim_new_params("kiln_adam_new_params", n, params, KILN__OPTIM_ADAM, o.lr, o.weight_decay);
    if (opt) opt->adam = o;
    return opt;
}

kiln_optimizer *kiln_adam_new_groups(int n_groups, const kiln_param_group *groups, kiln_adam_options o) {
    o = kiln__adam_resolve(o);
    if (!kiln__optim_check_adam("kiln_adam_new_groups", o)) return NULL;
    kiln_optimizer *opt =
        kiln__optim_new_groups("kiln_adam_new_groups", n_groups, groups, KILN__OPTIM_ADAM, o.lr, o.weight_decay);
    if (opt) opt->adam = o;
    return opt;
}

bool kiln__adam_apply(kiln__opctx *c, const kiln_optimizer *opt, const kiln__optim_param *p, kiln__tensor *param,
                      const kiln__tensor *grad) {
    const kiln_adam_options *o = &opt->adam;
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
