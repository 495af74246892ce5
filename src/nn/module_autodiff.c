/* What a module adds to autodiff: its forward as a checkpointed region (kiln_module_set_checkpoint),
 * holding the module's guard so that a module freed before the backward pass is reported there
 * rather than called; and gradient hooks on all its parameters. */
#include <stdio.h>
#include <stdlib.h>

#include "autodiff/autodiff-impl.h"
#include "kiln/autodiff.h"
#include "nn/module-impl.h"

static kiln_tensor module_region(void *ctx, int n_inputs, kiln_tensor *inputs) {
    kiln_module *m = ctx;
    (void)n_inputs;
    return kiln__module_forward_body(m, inputs[0]);
}

kiln_tensor kiln__module_forward_checkpointed(kiln_module *m, kiln_tensor x) {
    return kiln__checkpoint_guarded(module_region, m, m->guard, 1, &x);
}

kiln_status kiln_module_set_checkpoint(kiln_module *m, bool on) {
    if (!m) return kiln__report(KILN_ERR_NULL, "kiln_module_set_checkpoint", "module is NULL");
    KILN__OBJECT_OR_RETURN(m, KILN__MODULE_KIND, "kiln_module_set_checkpoint", kiln_last_status());
    if (on && !m->guard) {
        char what[64];
        snprintf(what, sizeof what, "module %s", kiln_module_type(m));
        m->guard = kiln__ad_guard_new(what);
        if (!m->guard) return kiln__report(KILN_ERR_OUT_OF_MEMORY, "kiln_module_set_checkpoint", "cannot allocate");
    }
    m->checkpoint = on;
    return KILN_OK;
}

kiln_status kiln_module_register_grad_hook(kiln_module *m, kiln_grad_hook_fn hook, void *ctx) {
    if (!m) return kiln__report(KILN_ERR_NULL, "kiln_module_register_grad_hook", "module is NULL");
    KILN__OBJECT_OR_RETURN(m, KILN__MODULE_KIND, "kiln_module_register_grad_hook", kiln_last_status());
    if (!hook) return kiln__report(KILN_ERR_NULL, "kiln_module_register_grad_hook", "hook is NULL");
    int n = kiln_module_params(m, NULL, 0);
    kiln_param *ps = n > 0 ? calloc((size_t)n, sizeof *ps) : NULL;
    if (n > 0 && !ps) return kiln__report(KILN_ERR_OUT_OF_MEMORY, "kiln_module_register_grad_hook", "cannot allocate");
    kiln_module_params(m, ps, n);
    kiln_status st = KILN_OK;
    for (int i = 0; i < n && st == KILN_OK; i++)
        if (!ps[i].buffer) st = kiln_tensor_register_hook(*ps[i].slot, hook, ctx);
    free(ps);
    return st;
}
