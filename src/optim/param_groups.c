/* kiln_module_param_groups: a module's trainable parameters split into two optimizer groups
 * by a predicate on their names (PyTorch users build the same two lists by hand, as for "no
 * weight decay on biases and norms"). */
#include <stdlib.h>

#include "optim/optim-impl.h"

int kiln_module_param_groups(kiln_module *m, kiln_param_filter first, void *ctx, kiln_tensor *handles, int cap,
                             kiln_param_group *groups) {
    static const char op[] = "kiln_module_param_groups";
    if (!m || !first || !groups || (!handles && cap > 0))
        return kiln__report(KILN_ERR_NULL, op, "%s is NULL", !m ? "module" : !first ? "filter" : !groups ? "groups" : "handles"),
               -1;
    KILN__OBJECT_OR_RETURN(m, KILN__MODULE_KIND, op, -1);
    int n = kiln_module_params(m, NULL, 0);
    kiln_param *ps = calloc((size_t)(n > 0 ? n : 1), sizeof *ps);
    if (!ps) return kiln__report(KILN_ERR_OUT_OF_MEMORY, op, "cannot list %d parameters", n), -1;
    kiln_module_params(m, ps, n);
    int trainable = 0;
    for (int i = 0; i < n; i++) trainable += !ps[i].buffer;
    if (trainable > cap) {
        free(ps);
        return kiln__report(KILN_ERR_BUFFER_SIZE, op, "the module has %d parameters, handles has room for %d", trainable,
                            cap),
               -1;
    }
    int k = 0, in_first = 0;
    for (int pass = 0; pass < 2; pass++) /* group 0's first, so each group is one run of handles */
        for (int i = 0; i < n; i++)
            if (!ps[i].buffer && first(ps[i].name, ctx) == (pass == 0)) handles[k++] = *ps[i].slot, in_first += pass == 0;
    free(ps);
    groups[0] = kiln_param_group_of(in_first, handles);
    groups[1] = kiln_param_group_of(k - in_first, handles + in_first);
    return k;
}
