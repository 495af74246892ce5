/* The module core: forward dispatch, parameters by name, training mode, freeing. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kiln/autodiff.h"
#include "nn/module-impl.h"

kiln_module *kiln__module_new(const kiln__module_vtable *vt, size_t state_size) {
    kiln_module *m = calloc(1, sizeof *m);
    void *state = state_size ? calloc(1, state_size) : NULL;
    if (!m || (state_size && !state)) {
        free(m);
        free(state);
        kiln__report(KILN_ERR_OUT_OF_MEMORY, vt->type, "cannot allocate a module");
        return NULL;
    }
    m->vt = vt;
    m->training = true;
    m->state = state;
    return m;
}

kiln_status kiln__module_add_param(kiln_module *m, const char *name, kiln_tensor t, bool buffer) {
    kiln_status st = kiln_tensor_status(t);
    if (st == KILN_OK && m->n_params == KILN__MODULE_MAX_PARAMS)
        st = kiln__report(KILN_ERR_INTERNAL, m->vt->type, "too many parameters");
    if (st == KILN_OK && !buffer) st = kiln_require_grad(t);
    if (st != KILN_OK) {
        kiln_release(t);
        return st;
    }
    kiln__module_param *p = &m->params[m->n_params++];
    snprintf(p->name, sizeof p->name, "%s", name);
    p->tensor = t;
    p->buffer = buffer;
    return KILN_OK;
}

kiln_status kiln__module_add_child(kiln_module *m, kiln_module *child) {
    kiln_module **grown = realloc(m->children, sizeof *grown * (size_t)(m->n_children + 1));
    if (!grown) return kiln__report(KILN_ERR_OUT_OF_MEMORY, m->vt->type, "cannot add a child module");
    m->children = grown;
    m->children[m->n_children++] = child;
    return KILN_OK;
}

kiln_tensor kiln_module_forward(kiln_module *m, kiln_tensor x) {
    if (!m) {
        KILN__OP_BEGIN("kiln_module_forward");
        kiln__tensor *t = kiln__arg(&c, x);
        kiln__drop(1, t);
        return kiln__result(&c, kiln__fail(&c, KILN_ERR_NULL, "module is NULL"));
    }
    return m->vt->forward(m, x);
}

void kiln_module_train(kiln_module *m, bool training) {
    if (!m) return;
    m->training = training;
    for (int i = 0; i < m->n_children; i++) kiln_module_train(m->children[i], training);
}

bool kiln_module_is_training(const kiln_module *m) { return m && m->training; }
const char *kiln_module_type(const kiln_module *m) { return m ? m->vt->type : "NULL"; }

void kiln_module_free(kiln_module *m) {
    if (!m) return;
    for (int i = 0; i < m->n_children; i++) kiln_module_free(m->children[i]);
    free(m->children);
    for (int i = 0; i < m->n_params; i++) kiln_release(m->params[i].tensor);
    if (m->vt->destroy) m->vt->destroy(m);
    free(m->state);
    free(m);
}

/* Parameters are listed before buffers at each level, each level before its children, so
 * an optimizer sees a stable order. */
static int list_params(kiln_module *m, const char *prefix, kiln_param *out, int cap, int at) {
    for (int pass = 0; pass < 2; pass++)
        for (int i = 0; i < m->n_params; i++) {
            if (m->params[i].buffer != (pass == 1)) continue;
            if (at < cap) {
                snprintf(out[at].name, sizeof out[at].name, "%s%s", prefix, m->params[i].name);
                out[at].slot = &m->params[i].tensor;
                out[at].buffer = m->params[i].buffer;
            }
            at++;
        }
    for (int i = 0; i < m->n_children; i++) {
        char child_prefix[96];
        snprintf(child_prefix, sizeof child_prefix, "%s%d.", prefix, i);
        at = list_params(m->children[i], child_prefix, out, cap, at);
    }
    return at;
}

int kiln_module_params(kiln_module *m, kiln_param *out, int cap) {
    if (!m) {
        kiln__report(KILN_ERR_NULL, "kiln_module_params", "module is NULL");
        return 0;
    }
    return list_params(m, "", out, out ? cap : 0, 0);
}

int64_t kiln_module_num_parameters(kiln_module *m) {
    int n = kiln_module_params(m, NULL, 0);
    kiln_param *ps = calloc((size_t)(n ? n : 1), sizeof *ps);
    if (!ps) return -1;
    kiln_module_params(m, ps, n);
    int64_t total = 0;
    for (int i = 0; i < n; i++)
        if (!ps[i].buffer) total += kiln_tensor_numel(*ps[i].slot);
    free(ps);
    return total;
}

/* ---- Sequential ---------------------------------------------------------------------------- */

static kiln_tensor sequential_forward(kiln_module *m, kiln_tensor x) {
    for (int i = 0; i < m->n_children; i++) x = kiln_module_forward(m->children[i], x);
    return x;
}

static const kiln__module_vtable sequential_vt = {"Sequential", sequential_forward, NULL};

kiln_module *kiln_sequential_new(int n, kiln_module *const *children) {
    if (n < 0 || (n > 0 && !children)) {
        kiln__report(KILN_ERR_NULL, "kiln_sequential_new", "children array is NULL");
        return NULL;
    }
    for (int i = 0; i < n; i++)
        if (!children[i]) {
            kiln__report(KILN_ERR_NULL, "kiln_sequential_new", "child %d is NULL", i);
            for (int k = 0; k < n; k++) kiln_module_free(children[k]);
            return NULL;
        }
    kiln_module *m = kiln__module_new(&sequential_vt, 0);
    for (int i = 0; i < n; i++) {
        if (!m || kiln__module_add_child(m, children[i]) != KILN_OK) {
            for (int k = i; k < n; k++) kiln_module_free(children[k]);
            kiln_module_free(m);
            return NULL;
        }
    }
    return m;
}
