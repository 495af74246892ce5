/* The module core: forward dispatch (a checkpointed module's forward as a region too),
 * parameters by name, training mode, freeing, and the
 * public API for user-defined modules (a forward callback with a context, registered
 * parameters, buffers and named children). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "autodiff/autodiff-impl.h"
#include "kiln/autocast.h"
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
    if (!kiln__object_register(m, KILN__MODULE_KIND)) {
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

kiln_tensor kiln__module_refused(const char *op, const kiln_module *m, int n, const kiln_tensor *xs) {
    kiln_status st;
    const char *why = kiln__object_problem(m, KILN__MODULE_KIND, &st);
    KILN__OP_BEGIN(op);
    for (int i = 0; i < n; i++)
        if (kiln_is_valid(xs[i])) kiln_release(xs[i]);
    return kiln__result(&c, kiln__fail(&c, why ? st : KILN_ERR_INTERNAL, "%s", why ? why : "module refused"));
}

kiln_status kiln__module_add_param(kiln_module *m, const char *name, kiln_tensor t, bool buffer) {
    kiln_status st = kiln_tensor_status(t);
    kiln__module_param *grown = NULL;
    if (st == KILN_OK && !buffer) st = kiln_require_grad(t);
    if (st == KILN_OK && !(grown = realloc(m->params, sizeof *grown * (size_t)(m->n_params + 1))))
        st = kiln__report(KILN_ERR_OUT_OF_MEMORY, kiln_module_type(m), "cannot add a parameter");
    if (grown) m->params = grown;
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

kiln_status kiln__module_add_named_child(kiln_module *m, const char *op, const char *name, kiln_module *child) {
    kiln_module **grown = realloc(m->children, sizeof *grown * (size_t)(m->n_children + 1));
    if (grown) m->children = grown;
    char(*names)[KILN__MODULE_NAME_MAX] =
        grown ? realloc(m->child_names, sizeof *names * (size_t)(m->n_children + 1)) : NULL;
    if (names) m->child_names = names;
    if (!grown || !names) return kiln__report(KILN_ERR_OUT_OF_MEMORY, op, "cannot add a child module");
    if (name) snprintf(names[m->n_children], sizeof names[0], "%s", name);
    else snprintf(names[m->n_children], sizeof names[0], "%d", m->n_children);
    m->children[m->n_children++] = child;
    child->owned = true;
    return KILN_OK;
}

kiln_status kiln__module_add_child(kiln_module *m, kiln_module *child) {
    return kiln__module_add_named_child(m, kiln_module_type(m), NULL, child);
}

/* This thread's last kiln_module_child that found nothing (empty after one that did): a NULL
 * module passed on is most often that lookup's result, and its message names the child. */
static _Thread_local char failed_lookup[400];

static kiln_tensor module_region(void *ctx, int n_inputs, kiln_tensor *inputs) {
    kiln_module *m = ctx;
    (void)n_inputs;
    return kiln__module_forward_body(m, inputs[0]);
}

/* m's forward as a checkpointed region (kiln_module_set_checkpoint, module_autodiff.c), holding
 * the module's guard so that a module freed before the backward pass is reported there rather
 * than called; consumes x. */
static kiln_tensor forward_checkpointed(kiln_module *m, kiln_tensor x) {
    return kiln__checkpoint_guarded(module_region, m, m->guard, 1, &x);
}

kiln_tensor kiln_module_forward(kiln_module *m, kiln_tensor x) {
    if (!m) {
        KILN__OP_BEGIN("kiln_module_forward");
        kiln__tensor *t = kiln__arg(&c, x);
        kiln__drop(1, t);
        if (failed_lookup[0])
            return kiln__result(&c, kiln__fail(&c, KILN_ERR_NULL, "module is NULL (from kiln_module_child? %s)",
                                               failed_lookup));
        return kiln__result(&c, kiln__fail(&c, KILN_ERR_NULL, "module is NULL"));
    }
    if (!KILN__MODULE_LIVE(m)) return kiln__module_refused("kiln_module_forward", m, 1, &x);
    if (m->checkpoint && kiln_grad_enabled()) return forward_checkpointed(m, x);
    return kiln__module_forward_body(m, x);
}

/* The module's own forward under its autocast setting: also what a checkpointed module's
 * recomputation runs, so the replay computes in the dtypes the first run did. */
kiln_tensor kiln__module_forward_body(kiln_module *m, kiln_tensor x) {
    if (!m->autocast_set) return m->vt->forward(m, x);
    kiln_autocast_begin(m->autocast); /* checked when set: cannot fail but past 32 nested scopes */
    kiln_tensor y = m->vt->forward(m, x);
    kiln_autocast_end();
    return y;
}

kiln_status kiln_module_set_autocast(kiln_module *m, kiln_dtype dtype) {
    const char *op = "kiln_module_set_autocast";
    if (!m) return kiln__report(KILN_ERR_NULL, op, "module is NULL");
    KILN__OBJECT_OR_RETURN(m, KILN__MODULE_KIND, op, kiln_last_status());
    if (dtype != KILN_BF16 && dtype != KILN_F16 && dtype != KILN_F32)
        return kiln__report(KILN_ERR_DTYPE, op, "autocast runs in bf16 or f16 (f32: off), not %s", kiln_dtype_name(dtype));
    m->autocast = dtype;
    m->autocast_set = dtype != KILN_F32;
    return KILN_OK;
}

void kiln_module_train(kiln_module *m, bool training) {
    if (!m) return;
    KILN__OBJECT_OR_RETURN(m, KILN__MODULE_KIND, "kiln_module_train");
    m->training = training;
    for (int i = 0; i < m->n_children; i++) kiln_module_train(m->children[i], training);
}

/* Each tensor moves with one queued copy; a parameter stays a leaf that requires grad. */
static kiln_status move_tree(kiln_module *m, kiln_device dev) {
    for (int i = 0; i < m->n_params; i++) {
        kiln__module_param *p = &m->params[i];
        if (kiln_tensor_device(p->tensor) == dev) continue;
        kiln_no_grad_begin();
        kiln_tensor t = kiln_to_device(p->tensor, dev);
        kiln_no_grad_end();
        p->tensor = t;
        kiln_status st = kiln_tensor_status(t);
        if (st != KILN_OK) return st;
        if (!p->buffer) kiln_require_grad(t);
    }
    for (int i = 0; i < m->n_children; i++) {
        kiln_status st = move_tree(m->children[i], dev);
        if (st != KILN_OK) return st;
    }
    return KILN_OK;
}

kiln_status kiln_module_to_device(kiln_module *m, kiln_device dev) {
    if (!m) return kiln__report(KILN_ERR_NULL, "kiln_module_to_device", "module is NULL");
    KILN__OBJECT_OR_RETURN(m, KILN__MODULE_KIND, "kiln_module_to_device", kiln_last_status());
    kiln_device_info info;
    if (kiln_device_info_get(dev, &info) != KILN_OK)
        return kiln__report(KILN_ERR_DEVICE, "kiln_module_to_device", "device %s is not available", kiln_device_name(dev));
    kiln_status st = move_tree(m, dev);
    return st == KILN_OK ? KILN_OK : kiln__report(st, "kiln_module_to_device", "%s", kiln_last_error());
}

bool kiln_module_is_training(const kiln_module *m) {
    if (!m) return false;
    KILN__OBJECT_OR_RETURN(m, KILN__MODULE_KIND, "kiln_module_is_training", false);
    return m->training;
}

const char *kiln_module_type(const kiln_module *m) {
    if (!m) return "NULL";
    KILN__OBJECT_OR_RETURN(m, KILN__MODULE_KIND, "kiln_module_type", "(freed module)");
    return m->type[0] ? m->type : m->vt->type;
}

void kiln_module_free(kiln_module *m) {
    if (!m || kiln__object_retire(m, KILN__MODULE_KIND, "kiln_module_free") != KILN_OK) return;
    kiln__ad_guard_kill(m->guard);
    for (int i = 0; i < m->n_children; i++) kiln_module_free(m->children[i]);
    free(m->children);
    free(m->child_names);
    for (int i = 0; i < m->n_params; i++) kiln_release(m->params[i].tensor);
    free(m->params);
    if (m->vt->destroy) m->vt->destroy(m);
    if (m->user_free) m->user_free(m->user_ctx);
    free(m->state);
    kiln__object_dispose(m, KILN__MODULE_KIND, "kiln_module_free");
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
        snprintf(child_prefix, sizeof child_prefix, "%s%s.", prefix, m->child_names[i]);
        at = list_params(m->children[i], child_prefix, out, cap, at);
    }
    return at;
}

int kiln_module_params(kiln_module *m, kiln_param *out, int cap) {
    if (!m) {
        kiln__report(KILN_ERR_NULL, "kiln_module_params", "module is NULL");
        return 0;
    }
    KILN__OBJECT_OR_RETURN(m, KILN__MODULE_KIND, "kiln_module_params", 0);
    return list_params(m, "", out, out ? cap : 0, 0);
}

int64_t kiln_module_num_parameters(kiln_module *m) {
    if (m) KILN__OBJECT_OR_RETURN(m, KILN__MODULE_KIND, "kiln_module_num_parameters", -1);
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
        if (children[i] && !KILN__MODULE_LIVE(children[i])) { /* not freed: it may be gone already */
            kiln__object_check(children[i], KILN__MODULE_KIND, "kiln_sequential_new");
            for (int k = 0; k < n; k++)
                if (k != i && KILN__MODULE_LIVE(children[k])) kiln_module_free(children[k]);
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

/* ---- user-defined modules ------------------------------------------------------------------- */

static kiln_tensor user_forward(kiln_module *m, kiln_tensor x) { return m->user_forward(m, x, m->user_ctx); }

static const kiln__module_vtable user_vt = {"Module", user_forward, NULL};

kiln_module *kiln_module_new(const char *type, kiln_module_forward_fn forward, void *ctx, void (*free_ctx)(void *ctx)) {
    const char *op = "kiln_module_new";
    kiln_status st = KILN_OK;
    if (!forward) st = kiln__report(KILN_ERR_NULL, op, "forward callback is NULL");
    else if (type && strlen(type) >= KILN__MODULE_NAME_MAX)
        st = kiln__report(KILN_ERR_INVALID_ARGUMENT, op, "type name '%.40s...' is longer than %d bytes", type,
                          KILN__MODULE_NAME_MAX - 1);
    kiln_module *m = st == KILN_OK ? kiln__module_new(&user_vt, 0) : NULL;
    if (!m) {
        if (free_ctx) free_ctx(ctx); /* the context was given away */
        return NULL;
    }
    snprintf(m->type, sizeof m->type, "%s", type && *type ? type : "Module");
    m->user_forward = forward;
    m->user_ctx = ctx;
    m->user_free = free_ctx;
    return m;
}

void *kiln_module_context(const kiln_module *m) {
    if (!m) return NULL;
    KILN__OBJECT_OR_RETURN(m, KILN__MODULE_KIND, "kiln_module_context", NULL);
    return m->user_ctx;
}

/* A name for a parameter, buffer or child: [A-Za-z0-9_]+, shorter than the limit, unused in m. */
static kiln_status check_name(const char *op, const kiln_module *m, const char *name) {
    if (!name) return kiln__report(KILN_ERR_NULL, op, "name is NULL");
    size_t n = strlen(name);
    if (n == 0 || n >= KILN__MODULE_NAME_MAX)
        return kiln__report(KILN_ERR_INVALID_ARGUMENT, op, "name '%.40s' must have 1 to %d characters", name,
                            KILN__MODULE_NAME_MAX - 1);
    for (size_t i = 0; i < n; i++) {
        char ch = name[i];
        if (!((ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') || ch == '_'))
            return kiln__report(KILN_ERR_INVALID_ARGUMENT, op, "name '%s' may hold only letters, digits and '_'", name);
    }
    for (int i = 0; i < m->n_params; i++)
        if (strcmp(m->params[i].name, name) == 0)
            return kiln__report(KILN_ERR_INVALID_ARGUMENT, op, "%s already has a %s named '%s'", kiln_module_type(m),
                                m->params[i].buffer ? "buffer" : "parameter", name);
    for (int i = 0; i < m->n_children; i++)
        if (strcmp(m->child_names[i], name) == 0)
            return kiln__report(KILN_ERR_INVALID_ARGUMENT, op, "%s already has a child named '%s'", kiln_module_type(m), name);
    return KILN_OK;
}

static kiln_status add_tensor(const char *op, kiln_module *m, const char *name, kiln_tensor t, bool buffer) {
    kiln_status st = !m ? kiln__report(KILN_ERR_NULL, op, "module is NULL")
                     : kiln__object_check(m, KILN__MODULE_KIND, op) != KILN_OK ? kiln_last_status()
                                                                              : check_name(op, m, name);
    if (st == KILN_OK && !kiln_is_valid(t))
        st = kiln__report(KILN_ERR_STALE_HANDLE, op, "tensor '%s' is not a live handle", name);
    if (st == KILN_OK && kiln_tensor_status(t) != KILN_OK)
        st = kiln__report(kiln_tensor_status(t), op, "tensor '%s' carries an error (%s)", name,
                          kiln_status_str(kiln_tensor_status(t)));
    if (st == KILN_OK && !buffer) {
        kiln_dtype dt = kiln_tensor_dtype(t);
        if (dt != KILN_F32 && dt != KILN_F64 && dt != KILN_F16 && dt != KILN_BF16)
            st = kiln__report(KILN_ERR_DTYPE, op, "parameter '%s' is %s: parameters are float tensors", name,
                              kiln_dtype_name(dt));
    }
    if (st != KILN_OK) {
        if (kiln_is_valid(t)) kiln_release(t); /* a stale one would replace the error */
        return st;
    }
    return kiln__module_add_param(m, name, t, buffer);
}

kiln_status kiln_module_add_parameter(kiln_module *m, const char *name, kiln_tensor t) {
    return add_tensor("kiln_module_add_parameter", m, name, t, false);
}

kiln_status kiln_module_add_buffer(kiln_module *m, const char *name, kiln_tensor t) {
    return add_tensor("kiln_module_add_buffer", m, name, t, true);
}

static bool contains(const kiln_module *tree, const kiln_module *m) {
    if (tree == m) return true;
    for (int i = 0; i < tree->n_children; i++)
        if (contains(tree->children[i], m)) return true;
    return false;
}

kiln_status kiln_module_add_child(kiln_module *m, const char *name, kiln_module *child) {
    const char *op = "kiln_module_add_child";
    if (!child) return kiln__report(KILN_ERR_NULL, op, "child is NULL");
    /* (a dead module or child is not touched: not even freed, since it may be gone already) */
    if (m) KILN__OBJECT_OR_RETURN(m, KILN__MODULE_KIND, op, kiln_last_status());
    KILN__OBJECT_OR_RETURN(child, KILN__MODULE_KIND, op, kiln_last_status());
    if (child->owned) return kiln__report(KILN_ERR_INVALID_ARGUMENT, op, "child '%s' already belongs to a module", name ? name : "?");
    if (m && contains(child, m))
        return kiln__report(KILN_ERR_INVALID_ARGUMENT, op, "child '%s' contains the module itself", name ? name : "?");
    kiln_status st = !m ? kiln__report(KILN_ERR_NULL, op, "module is NULL") : check_name(op, m, name);
    if (st == KILN_OK) st = kiln__module_add_named_child(m, op, name, child);
    if (st != KILN_OK) kiln_module_free(child); /* it was given away */
    return st;
}

/* The names of m's children, "'0', '1', '2'" (cut short with "..." past cap), for messages. */
static const char *child_list(const kiln_module *m, char *buf, size_t cap) {
    size_t at = 0;
    buf[0] = '\0';
    for (int i = 0; i < m->n_children && at + 8 < cap; i++) {
        int n = snprintf(buf + at, cap - at, "%s'%s'", i ? ", " : "", m->child_names[i]);
        at = n < 0 || (size_t)n >= cap - at ? cap : at + (size_t)n;
    }
    if (at >= cap) snprintf(buf + cap - 4, 4, "...");
    return m->n_children ? buf : "none";
}

/* The module a dotted path's parent part names, and the last part in *leaf; NULL + message. */
static kiln_module *walk(kiln_module *m, const char *path, const char **leaf, char *why, size_t cap) {
    const char *part = path;
    for (const char *dot; (dot = strchr(part, '.')) != NULL; part = dot + 1) {
        size_t len = (size_t)(dot - part);
        kiln_module *next = NULL;
        for (int i = 0; i < m->n_children && !next; i++)
            if (strlen(m->child_names[i]) == len && strncmp(m->child_names[i], part, len) == 0) next = m->children[i];
        if (!next) {
            char names[160];
            snprintf(why, cap, "%s has no child '%.*s' (in '%.*s'); its children: %s", kiln_module_type(m), (int)len, part,
                     (int)(strlen(path) - (path[strlen(path) - 1] == '.')), path, child_list(m, names, sizeof names));
            return NULL;
        }
        m = next;
    }
    *leaf = part;
    return m;
}

kiln_tensor kiln_module_param(kiln_module *m, const char *name) {
    KILN__OP_BEGIN("kiln_module_param");
    if (!m || !name) return kiln__result(&c, kiln__fail(&c, KILN_ERR_NULL, "%s is NULL", !m ? "module" : "name"));
    if (!KILN__MODULE_LIVE(m)) return kiln__module_refused("kiln_module_param", m, 0, NULL);
    char why[400];
    const char *leaf = NULL;
    kiln_module *owner = walk(m, name, &leaf, why, sizeof why);
    if (!owner) return kiln__result(&c, kiln__fail(&c, KILN_ERR_INVALID_ARGUMENT, "%s", why));
    for (int i = 0; i < owner->n_params; i++)
        if (strcmp(owner->params[i].name, leaf) == 0) {
            kiln__tensor *t = kiln__arg(&c, kiln_ref(owner->params[i].tensor));
            return kiln__result(&c, t);
        }
    return kiln__result(&c, kiln__fail(&c, KILN_ERR_INVALID_ARGUMENT, "%s has no parameter or buffer '%s'",
                                       kiln_module_type(owner), leaf));
}

kiln_module *kiln_module_child(kiln_module *m, const char *name) {
    const char *op = "kiln_module_child";
    if (!m || !name) return kiln__report(KILN_ERR_NULL, op, "%s is NULL", !m ? "module" : "name"), NULL;
    KILN__OBJECT_OR_RETURN(m, KILN__MODULE_KIND, op, NULL);
    char why[400], path[160];
    if (strlen(name) >= sizeof path - 1) return kiln__report(KILN_ERR_INVALID_ARGUMENT, op, "name is too long"), NULL;
    snprintf(path, sizeof path, "%s.", name); /* every part names a child */
    const char *leaf = NULL;
    kiln_module *child = walk(m, path, &leaf, why, sizeof why);
    if (!child) kiln__report(KILN_ERR_INVALID_ARGUMENT, op, "%s", why);
    snprintf(failed_lookup, sizeof failed_lookup, "%s", child ? "" : why);
    return child;
}
