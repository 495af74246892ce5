/* What a module adds to autodiff: turning its checkpointed forward on (kiln_module_set_checkpoint:
 * the module's guard, which module.c's forward holds in the region, so that a module freed
 * before the backward pass is reported there rather than called); and gradient hooks on all its
 * parameters. Above module.c: it calls the core, never the other way. */
#include <stdio.h>
#include <stdlib.h>

#include "autodiff/autodiff-impl.h"
#include "kiln/autodiff.h"
#include "nn/module-impl.h"

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
