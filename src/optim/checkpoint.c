/* Checkpoints: a module's parameters and buffers by name and an optimizer's state in one
 * safetensors file. Optimizer tensors are named "optim.<param>.<state>" (PyTorch's state
 * names; a master-weighted parameter's f32 master is "optim.<param>.master"); its type, step
 * counts and hyperparameters go in the metadata as strings.
 *
 * Loading is all or nothing: the whole file is read and checked, then matched against the
 * module (every parameter and buffer present with its exact dtype and shape, nothing extra)
 * and the optimizer, then every tensor is staged in fresh memory; only then is anything
 * changed: one COPY per parameter into its own storage (its handle and leaf identity stay),
 * and the optimizer's state swapped in. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "optim/optim-impl.h"
#include "io/safetensors.h"

#define OPTIM_PREFIX "optim."

/* The module's parameters and buffers (n of them), or NULL with an error. */
static kiln_param *list_params(kiln__opctx *c, kiln_module *model, int *n) {
    *n = kiln_module_params(model, NULL, 0);
    kiln_param *ps = calloc((size_t)(*n ? *n : 1), sizeof *ps);
    if (!ps) return kiln__fail(c, KILN_ERR_OUT_OF_MEMORY, "cannot list the parameters"), NULL;
    kiln_module_params(model, ps, *n);
    return ps;
}

/* ---- save ------------------------------------------------------------------------------------ */

typedef struct {
    char name[128];
    kiln__tensor *t; /* borrowed */
    void *host;      /* owned */
    size_t nbytes;
} save_item;

typedef struct {
    char key[128];
    char value[40];
} meta_text;

/* value_fmt NULL: the shortest text that reads back as exactly v. */
static void add_meta(meta_text *m, int *n, const char *key, const char *value_fmt, double v) {
    snprintf(m[*n].key, sizeof m[*n].key, "%s", key);
    if (value_fmt) snprintf(m[*n].value, sizeof m[*n].value, value_fmt, v);
    for (int digits = 15; !value_fmt && digits <= 17; digits++) {
        snprintf(m[*n].value, sizeof m[*n].value, "%.*g", digits, v);
        if (strtod(m[*n].value, NULL) == v) break;
    }
    (*n)++;
}

/* Sets the options' lr and bool from the loaded values and checks them as a constructor would. */
static bool options_finish(kiln__opctx *c, kiln_optimizer *o, double lr, double flag) {
    o->kind->set_loaded(&o->options, lr, flag);
    return o->kind->check(c->name, &o->options);
}

/* Type, counts and hyperparameters (doubles printed to read back exactly). */
static int optim_meta(const kiln_optimizer *opt, meta_text *m) {
    int n = 0;
    snprintf(m[n].key, sizeof m[n].key, OPTIM_PREFIX "type");
    snprintf(m[n].value, sizeof m[n].value, "%s", opt->type);
    n++;
    add_meta(m, &n, OPTIM_PREFIX "steps", "%.0f", (double)opt->steps);
    add_meta(m, &n, OPTIM_PREFIX "lr", NULL, opt->groups[0].lr);
    add_meta(m, &n, OPTIM_PREFIX "groups", "%.0f", (double)opt->n_groups);
    for (int g = 0; g < opt->n_groups; g++) {
        char key[64];
        snprintf(key, sizeof key, OPTIM_PREFIX "group%d.lr", g);
        add_meta(m, &n, key, NULL, opt->groups[g].lr);
        snprintf(key, sizeof key, OPTIM_PREFIX "group%d.weight_decay", g);
        add_meta(m, &n, key, NULL, opt->groups[g].weight_decay);
    }
    kiln__optim_options copy = opt->options;
    double flag;
    kiln__optim_hyper hs[KILN__OPTIM_MAX_HYPERS];
    int nh = opt->kind->hypers(&copy, &flag, hs);
    for (int i = 0; i < nh; i++) add_meta(m, &n, hs[i].key, NULL, *hs[i].value);
    for (int i = 0; i < opt->n_params; i++) {
        if (!opt->params[i].step) continue;
        char key[160];
        snprintf(key, sizeof key, OPTIM_PREFIX "%s.step", opt->params[i].name);
        add_meta(m, &n, key, "%.0f", (double)opt->params[i].step);
    }
    return n;
}

#define OPTIM_FIXED_META 16 /* format, and what optim_meta writes besides per-parameter steps */

/* The model and the optimizer (when given) are live objects (else the error in c). */
static bool models_live(kiln__opctx *c, const kiln_module *model, const kiln_optimizer *opt) {
    kiln_status st;
    const char *why = kiln__object_problem(model, KILN__MODULE_KIND, &st);
    if (!why && opt) why = kiln__object_problem(opt, KILN__OPTIMIZER_KIND, &st);
    if (why) kiln__fail(c, st, "%s", why);
    return !why;
}

kiln_status kiln_checkpoint_save(const char *path, kiln_module *model, kiln_optimizer *opt) {
    KILN__OP_BEGIN("kiln_checkpoint_save");
    if (!path || !model) {
        kiln__fail(&c, KILN_ERR_NULL, "%s is NULL", !path ? "path" : "model");
        return kiln__optim_finish(&c);
    }
    if (!models_live(&c, model, opt)) return kiln__optim_finish(&c);
    int np = 0, n_state = opt ? kiln__optim_state_count(opt) : 0;
    kiln_param *ps = list_params(&c, model, &np);
    int cap = np + (opt ? opt->n_params * (n_state + 1) : 0); /* (+1: a master) */
    int n_meta_cap = OPTIM_FIXED_META + (opt ? opt->n_params + 2 * opt->n_groups : 0);
    save_item *items = calloc((size_t)(cap ? cap : 1), sizeof *items);
    kiln__st_entry *entries = calloc((size_t)(cap ? cap : 1), sizeof *entries);
    meta_text *mt = calloc((size_t)n_meta_cap, sizeof *mt);
    kiln__st_meta *meta = calloc((size_t)n_meta_cap, sizeof *meta);
    if (ps && (!items || !entries || !mt || !meta)) kiln__fail(&c, KILN_ERR_OUT_OF_MEMORY, "cannot allocate the checkpoint");
    int n = 0;
    for (int i = 0; i < np && !c.err; i++) {
        snprintf(items[n].name, sizeof items[n].name, "%s", ps[i].name);
        items[n++].t = kiln__peek(&c, *ps[i].slot);
    }
    for (int i = 0; opt && i < opt->n_params && !c.err; i++)
        for (int k = 0; k < n_state && opt->params[i].state[k]; k++) {
            snprintf(items[n].name, sizeof items[n].name, OPTIM_PREFIX "%s.%s", opt->params[i].name,
                     kiln__optim_state_name(opt, k));
            items[n++].t = opt->params[i].state[k];
        }
    for (int i = 0; opt && i < opt->n_params && !c.err; i++)
        if (opt->params[i].master) {
            snprintf(items[n].name, sizeof items[n].name, OPTIM_PREFIX "%s.master", opt->params[i].name);
            items[n++].t = opt->params[i].master;
        }
    for (int i = 0; i < n && !c.err; i++) {
        save_item *it = &items[i];
        it->nbytes = (size_t)kiln__tensor_numel(it->t) * kiln__elsize(it->t->dtype);
        it->host = malloc(it->nbytes ? it->nbytes : 1);
        if (!it->host) {
            kiln__fail(&c, KILN_ERR_OUT_OF_MEMORY, "cannot allocate %zu bytes for '%s'", it->nbytes, it->name);
            break;
        }
        if (!kiln__t_copy_to_host(&c, it->t, it->host, it->nbytes)) break;
        entries[i] = (kiln__st_entry){it->name, it->t->dtype, it->t->ndim, it->t->shape, it->host, it->nbytes};
    }
    if (!c.err) {
        int nm = 1;
        snprintf(mt[0].key, sizeof mt[0].key, "format");
        snprintf(mt[0].value, sizeof mt[0].value, "pt"); /* what PyTorch's safetensors writes */
        if (opt) nm += optim_meta(opt, mt + 1);
        for (int i = 0; i < nm; i++) meta[i] = (kiln__st_meta){mt[i].key, mt[i].value};
        char why[512];
        kiln_status st = kiln__st_write(path, entries, n, meta, nm, why, sizeof why);
        if (st != KILN_OK) kiln__fail(&c, st, "%s", why);
    }
    for (int i = 0; items && i < n; i++) free(items[i].host);
    free(ps), free(items), free(entries), free(mt), free(meta);
    return kiln__optim_finish(&c);
}

/* ---- load ------------------------------------------------------------------------------------ */

typedef struct {
    kiln__tensor *dst;              /* borrowed: the parameter */
    const kiln__st_tensor *src;
    kiln__tensor *staged;           /* owned */
} load_item;

typedef struct {
    kiln_optimizer opts;       /* a copy of the optimizer with the loaded options */
    kiln__optim_group *groups; /* [opt->n_groups] */
    int64_t steps;
    int64_t *param_steps;
    load_item *state;   /* [n_params * KILN__OPTIM_MAX_STATE], src NULL where absent */
    load_item *master;  /* [n_params]: master-weighted parameters' masters, src NULL where absent */
    kiln__tensor *like; /* [n_params]: what a master-weighted parameter's state looks like (f32) */
} optim_plan;

/* A metadata number: a finite double, or with `count` a decimal integer >= 0. An absent key
 * gives 0, and is an error only when required. */
static bool meta_number(kiln__opctx *c, const kiln__st_file *f, const char *key, bool required, bool count, double *out) {
    const char *v = kiln__st_meta_get(f, key);
    *out = 0;
    if (!v && !required) return true;
    char *end = NULL;
    errno = 0;
    double d = v ? strtod(v, &end) : 0;
    bool ok = v && *v && !*end && errno != ERANGE && isfinite(d);
    for (const char *ch = v; ok && count && *ch; ch++) ok = *ch >= '0' && *ch <= '9';
    if (!ok || (count && d > 9007199254740992.0)) {
        kiln__fail(c, KILN_ERR_CORRUPT, "metadata '%s' is %s", key, !v ? "missing" : count ? "not a count" : "not a number");
        return false;
    }
    *out = d;
    return true;
}

static bool meta_double(kiln__opctx *c, const kiln__st_file *f, const char *key, double *out) {
    return meta_number(c, f, key, true, false, out);
}

static bool meta_count(kiln__opctx *c, const kiln__st_file *f, const char *key, bool required, int64_t *out) {
    double d;
    bool ok = meta_number(c, f, key, required, true, &d);
    *out = (int64_t)d;
    return ok;
}

/* The file's tensor `name` checked against like (dtype, shape); NULL if absent or mismatched. */
static const kiln__st_tensor *match(kiln__opctx *c, const kiln__st_file *f, const char *name, const kiln__tensor *like,
                                    bool required) {
    const kiln__st_tensor *t = kiln__st_find(f, name);
    if (!t) {
        if (required) kiln__fail(c, KILN_ERR_SHAPE, "checkpoint has no tensor '%s'", name);
        return NULL;
    }
    if (t->kiln_dtype != (int)like->dtype) {
        kiln__fail(c, KILN_ERR_DTYPE, "tensor '%s' is %s in the checkpoint, %s in the model", name, t->dtype,
                   kiln_dtype_name(like->dtype));
        return NULL;
    }
    if (t->ndim != like->ndim || memcmp(t->shape, like->shape, sizeof(int64_t) * (size_t)like->ndim) != 0) {
        char a[128], b[128];
        kiln__fail(c, KILN_ERR_SHAPE, "tensor '%s' has shape %s in the checkpoint, %s in the model", name,
                   kiln__shape_str(a, sizeof a, t->ndim, t->shape), kiln__shape_str(b, sizeof b, like->ndim, like->shape));
        return NULL;
    }
    return t;
}

static bool starts_with(const char *s, const char *prefix) { return strncmp(s, prefix, strlen(prefix)) == 0; }

/* Checks the optimizer's part of the file; fills plan. Returns the number of optimizer tensors used. */
static int plan_optim(kiln__opctx *c, const kiln__st_file *f, const kiln_optimizer *opt, optim_plan *plan) {
    const char *type = kiln__st_meta_get(f, OPTIM_PREFIX "type");
    if (!type) return kiln__fail(c, KILN_ERR_SHAPE, "checkpoint has no optimizer state"), 0;
    if (strcmp(type, opt->type) != 0)
        return kiln__fail(c, KILN_ERR_SHAPE, "checkpoint has %s state, the optimizer is %s", type, opt->type), 0;
    plan->opts = *opt;
    double flag;
    kiln__optim_hyper hs[KILN__OPTIM_MAX_HYPERS];
    int nh = opt->kind->hypers(&plan->opts.options, &flag, hs);
    double lr = 0;
    int64_t n_groups = 1;
    bool ok = meta_count(c, f, OPTIM_PREFIX "steps", true, &plan->steps) && meta_double(c, f, OPTIM_PREFIX "lr", &lr) &&
              meta_count(c, f, OPTIM_PREFIX "groups", false, &n_groups);
    for (int i = 0; ok && i < nh; i++) ok = meta_double(c, f, hs[i].key, hs[i].value);
    ok = ok && (flag == 0 || flag == 1);
    if (ok && kiln__st_meta_get(f, OPTIM_PREFIX "groups") && n_groups != opt->n_groups)
        return kiln__fail(c, KILN_ERR_SHAPE, "checkpoint has %lld parameter groups, the optimizer %d", (long long)n_groups,
                          opt->n_groups), 0;
    /* files from before groups: one group with the options' rate and decay */
    for (int g = 0; ok && g < opt->n_groups; g++) {
        double options_lr, options_wd; /* the options' decay: a group's default */
        opt->kind->rates(&plan->opts.options, &options_lr, &options_wd);
        plan->groups[g] = (kiln__optim_group){lr, options_wd};
        if (!kiln__st_meta_get(f, OPTIM_PREFIX "groups")) continue;
        char key[64];
        snprintf(key, sizeof key, OPTIM_PREFIX "group%d.lr", g);
        ok = meta_double(c, f, key, &plan->groups[g].lr) && plan->groups[g].lr >= 0;
        snprintf(key, sizeof key, OPTIM_PREFIX "group%d.weight_decay", g);
        ok = ok && meta_double(c, f, key, &plan->groups[g].weight_decay) && plan->groups[g].weight_decay >= 0;
    }
    ok = ok && options_finish(c, &plan->opts, lr, flag);
    if (!ok) return kiln__fail(c, KILN_ERR_CORRUPT, "checkpoint has invalid optimizer hyperparameters"), 0;
    /* the state count follows the loaded hyperparameters (SGD without momentum has none) */
    const kiln_optimizer *probe = &plan->opts;
    int n_state = kiln__optim_state_count(probe), used = 0;
    for (int i = 0; i < opt->n_params && !c->err; i++) {
        const kiln__optim_param *p = &opt->params[i];
        kiln__tensor *param = kiln__peek(c, *p->slot);
        char key[160];
        snprintf(key, sizeof key, OPTIM_PREFIX "%s.step", p->name);
        if (!param || !meta_count(c, f, key, false, &plan->param_steps[i])) break;
        kiln__tensor *like = param; /* the state's dtype and shape */
        if (kiln__optim_uses_master(opt, param->dtype)) {
            like = &plan->like[i];
            like->dtype = KILN_F32, like->ndim = param->ndim, like->device = param->device;
            memcpy(like->shape, param->shape, sizeof like->shape);
            snprintf(key, sizeof key, OPTIM_PREFIX "%s.master", p->name);
            plan->master[i] = (load_item){.dst = like, .src = match(c, f, key, like, false)};
            if (!c->err && (plan->master[i].src != NULL) != (plan->param_steps[i] != 0))
                kiln__fail(c, KILN_ERR_CORRUPT, "the f32 master of '%s' is %s", p->name,
                           plan->param_steps[i] ? "missing" : "there without a step");
            used += plan->master[i].src != NULL;
        }
        int present = 0;
        for (int k = 0; k < n_state && !c->err; k++) {
            snprintf(key, sizeof key, OPTIM_PREFIX "%s.%s", p->name, kiln__optim_state_name(probe, k));
            load_item *it = &plan->state[i * KILN__OPTIM_MAX_STATE + k];
            it->src = match(c, f, key, like, false);
            it->dst = like;
            present += it->src != NULL;
        }
        if (!c->err && n_state && present != (plan->param_steps[i] ? n_state : 0))
            kiln__fail(c, KILN_ERR_CORRUPT, "optimizer state of '%s' is incomplete", p->name);
        used += present;
    }
    return used;
}

static bool stage(kiln__opctx *c, load_item *it, const kiln__st_file *f) {
    const kiln__tensor *like = it->dst;
    it->staged = kiln__t_empty(c, like->device, like->dtype, like->ndim, like->shape);
    if (!it->staged) return false;
    size_t nbytes = (size_t)(it->src->end - it->src->begin);
    const unsigned char *src = f->data + it->src->begin;
    unsigned char *tmp = NULL;
    if (like->dtype == KILN_BOOL && nbytes) { /* any non-zero byte is true; kiln's bools are 0 or 1 */
        tmp = malloc(nbytes);
        if (!tmp) return kiln__fail(c, KILN_ERR_OUT_OF_MEMORY, "cannot convert a bool tensor"), false;
        for (size_t i = 0; i < nbytes; i++) tmp[i] = src[i] != 0;
        src = tmp;
    }
    bool ok = kiln__t_copy_from_host(c, it->staged, src, nbytes);
    free(tmp);
    return ok;
}

static void commit_optim(kiln__opctx *c, kiln_optimizer *opt, optim_plan *plan) {
    kiln__optim_clear_state(opt);
    opt->options = plan->opts.options;
    memcpy(opt->groups, plan->groups, sizeof *opt->groups * (size_t)opt->n_groups);
    opt->steps = plan->steps;
    for (int i = 0; i < opt->n_params; i++) {
        opt->params[i].step = plan->param_steps[i];
        for (int k = 0; k < KILN__OPTIM_MAX_STATE; k++) {
            load_item *it = &plan->state[i * KILN__OPTIM_MAX_STATE + k];
            opt->params[i].state[k] = it->staged;
            it->staged = NULL;
        }
        opt->params[i].master = plan->master[i].staged;
        plan->master[i].staged = NULL;
        kiln__tensor *param = opt->params[i].master ? kiln__peek(c, *opt->params[i].slot) : NULL;
        if (param) kiln__optim_master_mark(&opt->params[i], param); /* the parameters were loaded just before */
    }
}

kiln_status kiln_checkpoint_load(const char *path, kiln_module *model, kiln_optimizer *opt) {
    KILN__OP_BEGIN("kiln_checkpoint_load");
    if (!path || !model) {
        kiln__fail(&c, KILN_ERR_NULL, "%s is NULL", !path ? "path" : "model");
        return kiln__optim_finish(&c);
    }
    if (!models_live(&c, model, opt)) return kiln__optim_finish(&c);
    kiln__st_file f;
    char why[512];
    kiln_status st = kiln__st_read(path, &f, why, sizeof why);
    if (st != KILN_OK) {
        kiln__fail(&c, st, "%s", why);
        return kiln__optim_finish(&c);
    }
    int np = 0, n_opt = opt ? opt->n_params * KILN__OPTIM_MAX_STATE : 0;
    kiln_param *ps = list_params(&c, model, &np);
    load_item *items = calloc((size_t)(np ? np : 1), sizeof *items);
    optim_plan plan = {0};
    if (opt) {
        plan.state = calloc((size_t)(n_opt ? n_opt : 1), sizeof *plan.state);
        plan.param_steps = calloc((size_t)(opt->n_params ? opt->n_params : 1), sizeof *plan.param_steps);
        plan.groups = calloc((size_t)opt->n_groups, sizeof *plan.groups);
        plan.master = calloc((size_t)(opt->n_params ? opt->n_params : 1), sizeof *plan.master);
        plan.like = calloc((size_t)(opt->n_params ? opt->n_params : 1), sizeof *plan.like);
    }
    if (ps && (!items || (opt && (!plan.state || !plan.param_steps || !plan.groups || !plan.master || !plan.like))))
        kiln__fail(&c, KILN_ERR_OUT_OF_MEMORY, "cannot allocate the load plan");
    /* 1: the module: every parameter and buffer, exactly */
    for (int i = 0; i < np && !c.err; i++) {
        kiln__tensor *t = kiln__peek(&c, *ps[i].slot);
        if (t && t->storage->borrowed)
            kiln__fail(&c, KILN_ERR_INVALID_ARGUMENT, "'%s' wraps borrowed memory, which kiln never writes", ps[i].name);
        if (c.err) break;
        items[i].dst = t;
        items[i].src = match(&c, &f, ps[i].name, t, true);
    }
    for (int i = 0; i < f.n_tensors && !c.err; i++) {
        const char *name = f.tensors[i].name;
        if (starts_with(name, OPTIM_PREFIX)) continue;
        bool known = false;
        for (int k = 0; k < np && !known; k++) known = strcmp(ps[k].name, name) == 0;
        if (!known) kiln__fail(&c, KILN_ERR_SHAPE, "checkpoint tensor '%s' is not in the model", name);
    }
    /* 2: the optimizer */
    if (opt && !c.err) {
        int used = plan_optim(&c, &f, opt, &plan), in_file = 0;
        for (int i = 0; i < f.n_tensors; i++) in_file += starts_with(f.tensors[i].name, OPTIM_PREFIX);
        if (!c.err && used != in_file)
            kiln__fail(&c, KILN_ERR_SHAPE, "checkpoint has optimizer tensors for parameters the optimizer lacks");
    }
    for (int i = 0; i < np && !c.err; i++) {
        if (!kiln__t_has_kernel(items[i].dst->device, KILN__OP_COPY))
            kiln__fail(&c, KILN_ERR_DEVICE, "cannot copy into '%s' on %s", ps[i].name, kiln_device_name(items[i].dst->device));
    }
    /* 3: everything staged in fresh memory */
    for (int i = 0; i < np && !c.err; i++) stage(&c, &items[i], &f);
    for (int i = 0; i < n_opt && !c.err; i++)
        if (plan.state[i].src) stage(&c, &plan.state[i], &f);
    for (int i = 0; opt && i < opt->n_params && !c.err; i++)
        if (plan.master[i].src) stage(&c, &plan.master[i], &f);
    /* 4: commit (nothing below can fail) */
    for (int i = 0; i < np && !c.err; i++) {
        kiln__t_copy_into(&c, kiln__view_of(items[i].dst), items[i].staged); /* staged on dst's device */
    }
    if (opt && !c.err) commit_optim(&c, opt, &plan);
    for (int i = 0; items && i < np; i++) kiln__tensor_release(items[i].staged);
    for (int i = 0; i < n_opt && plan.state; i++) kiln__tensor_release(plan.state[i].staged);
    for (int i = 0; opt && plan.master && i < opt->n_params; i++) kiln__tensor_release(plan.master[i].staged);
    free(plan.master), free(plan.like), free(plan.state), free(plan.param_steps), free(plan.groups), free(items), free(ps);
    kiln__st_free(&f);
    return kiln__optim_finish(&c);
}
