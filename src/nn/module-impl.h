/* How a layer is built on the module core: a vtable, owned parameter handles, children.
 *
 *   static kiln_tensor scale_forward(kiln_module *m, kiln_tensor x) {
 *       return kiln_mul(x, kiln_ref(m->params[0].tensor));
 *   }
 *   static const kiln__module_vtable scale_vt = {"Scale", scale_forward, NULL};
 *   kiln_module *m = kiln__module_new(&scale_vt, 0);
 *   kiln__module_add_param(m, "weight", kiln_ones(...), false);
 */
#ifndef KILN_MODULE_IMPL_H
#define KILN_MODULE_IMPL_H

#include "kiln/nn.h"
#include "ops/ops-impl.h"

#define KILN__MODULE_MAX_PARAMS 8

typedef struct kiln__module_vtable {
    const char *type;
    /* Consumes x. m->training says which mode. */
    kiln_tensor (*forward)(kiln_module *m, kiln_tensor x);
    /* Frees what the layer allocated beyond params/children (may be NULL). */
    void (*destroy)(kiln_module *m);
} kiln__module_vtable;

typedef struct {
    char name[32];
    kiln_tensor tensor; /* owned handle */
    bool buffer;
} kiln__module_param;

struct kiln_module {
    const kiln__module_vtable *vt;
    bool training;
    int n_params;
    kiln__module_param params[KILN__MODULE_MAX_PARAMS];
    int n_children;
    kiln_module **children;
    void *state; /* layer-specific settings (owned; freed by destroy or free()) */
};

/* A module with `state_size` zeroed bytes of layer state. NULL on OOM (error reported). */
kiln_module *kiln__module_new(const kiln__module_vtable *vt, size_t state_size);
/* Takes t. Parameters (not buffers) are marked with kiln_require_grad. Returns a status;
 * on failure t is released. */
kiln_status kiln__module_add_param(kiln_module *m, const char *name, kiln_tensor t, bool buffer);
kiln_status kiln__module_add_child(kiln_module *m, kiln_module *child);

#endif
