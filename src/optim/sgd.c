/* SGD with momentum, dampening, Nesterov and (L2) weight decay, as torch.optim.SGD:
 *   g += wd * p;  b = first ? g : mu * b + (1 - dampening) * g;  g = nesterov ? g + mu * b : b;
 *   p -= lr * g
 * in one fused kernel per parameter (SGD_UPDATE). */
#include "optim/optim-impl.h"


kiln_sgd_options kiln_sgd_defaults(void) {
    return (kiln_sgd_options){.lr = 0.01, .momentum = 0, .dampening = 0, .weight_decay = 0, .nesterov = false};
}

kiln_optimizer *kiln_sgd_new(kiln_module *model, kiln_sgd_options o) {
    if (!kiln__optim_check_sgd("kiln_sgd_new", o)) return NULL;
    kiln_optimizer *opt = kiln__optim_new("kiln_sgd_new", model, KILN__OPTIM_SGD);
    if (!opt) return NULL;
    opt->sgd = o;
    opt->lr = o.lr;
    return opt;
}

void kiln__sgd_fill(const kiln_optimizer *opt, const kiln__optim_param *p, const kiln__tensor *param,
                    const kiln__tensor *grad, kiln__op *op) {
    const kiln_sgd_options *o = &opt->sgd;
    op->out[0] = kiln__view_of(param);
    op->in[0] = kiln__view_of(grad);
    op->n_in = 1;
    op->n_out = 1;
    if (o->momentum != 0) {
        op->out[1] = kiln__view_of(p->state[0]);
        op->n_out = 2;
    }
    op->p.f[0] = opt->lr;
    op->p.f[1] = o->momentum;
    op->p.f[2] = o->dampening;
    op->p.f[3] = o->weight_decay;
    /* p->step already counts this update */
    op->pi[0] = (p->step == 1 ? KILN__OPTIM_FLAG_FIRST : 0) | (o->nesterov ? KILN__OPTIM_FLAG_NESTEROV : 0);
}
