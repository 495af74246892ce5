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

typedef struct kiln__module_vtable {
    const char *type;
    /* Consumes x. m->training says which mode. */
    kiln_tensor (*forward)(kiln_module *m, kiln_tensor x);
    /* Frees what the layer allocated beyond params/children (may be NULL). */
    void (*destroy)(kiln_module *m);
} kiln__module_vtable;

/* For a call on a module that is not live (NULL, freed, not a module): the error as op's
 * poisoned result; the n tensors in xs are consumed. KILN_OK-path callers never get here. */
kiln_tensor kiln__module_refused(const char *op, const kiln_module *m, int n, const kiln_tensor *xs);
#define KILN__MODULE_LIVE(m) kiln__object_live((m), KILN__MODULE_KIND)
#define KILN__MODULE_NAME_MAX 32 /* parameter and child names, terminator included */

typedef struct {
    char name[KILN__MODULE_NAME_MAX];
    kiln_tensor tensor; /* owned handle */
    bool buffer;
} kiln__module_param;

struct kiln_module {
    const kiln__module_vtable *vt;
    bool training;
    bool owned; /* a child of some module, which frees it */
    int n_params;
    kiln__module_param *params; /* [n_params], grown as they are added */
    int n_children;
    kiln_module **children;
    char (*child_names)[KILN__MODULE_NAME_MAX]; /* [n_children]: "0", "1", ... unless named */
    void *state; /* layer-specific settings (owned; freed by destroy or free()) */
    /* user-defined modules (kiln_module_new) */
    char type[KILN__MODULE_NAME_MAX];
    kiln_module_forward_fn user_forward;
    void *user_ctx;
    void (*user_free)(void *ctx);
    kiln_dtype autocast; /* 0 (unset) or the dtype kiln_module_set_autocast gave */
    bool autocast_set;
    /* kiln_module_set_checkpoint: forward runs as a checkpointed region, whose recomputation
     * the guard (killed by kiln_module_free) keeps from using a freed module */
    bool checkpoint;
    struct kiln__ad_guard *guard;
};

/* m's own forward under its autocast setting (module.c); consumes x. */
kiln_tensor kiln__module_forward_body(kiln_module *m, kiln_tensor x);

/* A module with `state_size` zeroed bytes of layer state. NULL on OOM (error reported). */
kiln_module *kiln__module_new(const kiln__module_vtable *vt, size_t state_size);
/* Takes t. Parameters (not buffers) are marked with kiln_require_grad. Returns a status;
 * on failure t is released. */
kiln_status kiln__module_add_param(kiln_module *m, const char *name, kiln_tensor t, bool buffer);
kiln_status kiln__module_add_child(kiln_module *m, kiln_module *child);
/* The same, under a name (NULL: its index); the op reported on failure is op. */
kiln_status kiln__module_add_named_child(kiln_module *m, const char *op, const char *name, kiln_module *child);

#endif
