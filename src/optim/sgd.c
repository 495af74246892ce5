/* SGD with momentum, dampening, Nesterov and (L2) weight decay, as torch.optim.SGD:
 *   g += wd * p;  b = first ? g : mu * b + (1 - dampening) * g;  g = nesterov ? g + mu * b : b;
 *   p -= lr * g
 * in one fused kernel per parameter (SGD_UPDATE). */
#include "optim/optim-impl.h"

kiln_sgd_options kiln_sgd_defaults(void) {
    return (kiln_sgd_options){.lr = 0.01, .momentum = 0, .dampening = 0, .weight_decay = 0, .nesterov = false};
}

kiln_sgd_options kiln__sgd_resolve(kiln_sgd_options o) {
    o.lr = kiln__option_or(o.lr, kiln_sgd_defaults().lr);
    return o;
}

kiln_optimizer *kiln_sgd_new(kiln_module *model, kiln_sgd_options o) {
    o = kiln__sgd_resolve(o);
    if (!kiln__optim_check_sgd("kiln_sgd_new", o)) return NULL;
    kiln_optimizer *opt = kiln__optim_new("kiln_sgd_new", model, KILN__OPTIM_SGD, o.lr, o.weight_decay);
    if (opt) opt->sgd = o;
    return opt;
}

kiln_optimizer *kiln_sgd_new_params(int n, const kiln_tensor *params, kiln_sgd_options o) {
    o = kiln__sgd_resolve(o);
    if (!kiln__optim_check_sgd("kiln_sgd_new_params", o)) return NULL;
    kiln_optimizer *opt = kiln__optim_new_params("kiln_sgd_new_params", n, params, KILN__OPTIM_SGD, o.lr, o.weight_decay);
    if (opt) opt->sgd = o;
    return opt;
}

kiln_optimizer *kiln_sgd_new_groups(int n_groups, const kiln_param_group *groups, kiln_sgd_options o) {
    o = kiln__sgd_resolve(o);
    if (!kiln__optim_check_sgd("kiln_sgd_new_groups", o)) return NULL;
    kiln_optimizer *opt =
        kiln__optim_new_groups("kiln_sgd_new_groups", n_groups, groups, KILN__OPTIM_SGD, o.lr, o.weight_decay);
    if (opt) opt->sgd = o;
    return opt;
}

bool kiln__sgd_apply(kiln__opctx *c, const kiln_optimizer *opt, const kiln__optim_param *p, kiln__tensor *param,
                     const kiln__tensor *grad) {
    const kiln_sgd_options *o = &opt->sgd;
    const kiln__optim_group *g = &opt->groups[p->group];
    kiln__sgd_update u = {.lr = g->lr, .momentum = o->momentum, .dampening = o->dampening,
                          .weight_decay = g->weight_decay, .first = p->step == 1, .nesterov = o->nesterov,
                          .tentative = p->tentative};
    return kiln__t_sgd_update(c, param, o->momentum != 0 ? p->state[0] : NULL, grad, &u);
}
