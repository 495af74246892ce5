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

kiln_optimizer *kiln_adam_new(kiln_module *model, kiln_adam_options o) {
    if (!kiln__optim_check_adam("kiln_adam_new", o)) return NULL;
    kiln_optimizer *opt = kiln__optim_new("kiln_adam_new", model, KILN__OPTIM_ADAM);
    if (!opt) return NULL;
    opt->adam = o;
    opt->lr = o.lr;
    return opt;
}

void kiln__adam_fill(const kiln_optimizer *opt, const kiln__optim_param *p, const kiln__tensor *param,
                     const kiln__tensor *grad, kiln__op *op) {
    const kiln_adam_options *o = &opt->adam;
    double t = (double)p->step; /* already counts this update */
    double bc1 = 1.0 - pow(o->beta1, t), bc2 = 1.0 - pow(o->beta2, t);
    op->out[0] = kiln__view_of(param);
    op->out[1] = kiln__view_of(p->state[0]);
    op->out[2] = kiln__view_of(p->state[1]);
    op->in[0] = kiln__view_of(grad);
    op->n_in = 1;
    op->n_out = 3;
    op->p.f[0] = opt->lr / bc1;
    op->p.f[1] = o->beta1;
    op->p.f[2] = o->beta2;
    op->p.f[3] = o->eps;
    bool decoupled = o->decoupled_weight_decay && o->weight_decay != 0;
    op->pi[0] = (p->step == 1 ? KILN__OPTIM_FLAG_FIRST : 0) | (decoupled ? KILN__OPTIM_FLAG_DECOUPLED : 0);
    op->pi[1] = kiln__op_f64_bits(sqrt(bc2));
    op->pi[2] = kiln__op_f64_bits(decoupled ? 1.0 - opt->lr * o->weight_decay : o->weight_decay);
}
