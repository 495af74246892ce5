/* What every optimizer shares: the parameter list, per-parameter state, the step driver
 * (check everything, allocate state, then submit one fused update per parameter) and the
 * learning rate. Clipping and the gradient scaler's pass are in clip.c. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/autocast-impl.h"
#include "autodiff/autodiff-impl.h"
#include "optim/optim-impl.h"


kiln_status kiln__optim_finish(kiln__opctx *c) {
    if (!c->err) return KILN_OK;
    kiln_status st = kiln__error_report(c->err);
    kiln__error_unref(c->err);
    c->err = NULL;
    return st;
}

/* One parameter's update by opt's kind. */
static bool apply_update(kiln__opctx *c, const kiln_optimizer *opt, const kiln__optim_param *p, kiln__tensor *param,
                         const kiln__tensor *grad) {
    return opt->kind->apply(c, opt, p, param, grad);
}

void kiln__optim_clear_state(kiln_optimizer *opt) {
    for (int i = 0; i < opt->n_params; i++) {
        for (int k = 0; k < KILN__OPTIM_MAX_STATE; k++) {
            kiln__tensor_release(opt->params[i].state[k]);
            opt->params[i].state[k] = NULL;
        }
        kiln__tensor_release(opt->params[i].master);
        opt->params[i].master = NULL;
        opt->params[i].step = 0;
    }
}

bool kiln__optim_check_lr(const char *op, double lr) {
    if (lr >= 0 && isfinite(lr)) return true;
    kiln__report(KILN_ERR_INVALID_ARGUMENT, op, "learning rate %g must be finite and >= 0", lr);
    return false;
}

/* A group's rate: the options' where it is negative or left 0 (a designated initializer that
 * names only params and n must not freeze the group); KILN_ZERO is a real 0. */
static double group_lr(double group, double options) { return group < 0 ? options : kiln__option_or(group, options); }

kiln__tensor *kiln__optim_param_tensor(kiln__opctx *c, const kiln__optim_param *p, bool master_weights) {
    kiln__tensor *t = kiln__peek(c, *p->slot);
    if (!t) return NULL;
    bool low = t->dtype == KILN_BF16 || t->dtype == KILN_F16;
    if (t->dtype != KILN_F32 && t->dtype != KILN_F64 && !(low && master_weights)) {
        kiln__fail(c, KILN_ERR_DTYPE, "parameter '%s' is %s: optimizers update f32 and f64 parameters%s", p->name,
                   kiln_dtype_name(t->dtype),
                   low ? " (set the options' master_weights to update it through an f32 master copy)" : "");
        return NULL;
    }
    if (t->storage->borrowed) {
        kiln__fail(c, KILN_ERR_INVALID_ARGUMENT, "parameter '%s' wraps borrowed memory, which kiln never writes", p->name);
        return NULL;
    }
    return t;
}

/* Takes params (n of them, slots and names filled) and groups; frees both on failure. */
static kiln_optimizer *optim_make(kiln__opctx *c, const kiln__optim_kind *kind, int n, kiln__optim_param *params, int n_groups,
                                  kiln__optim_group *groups, bool master_weights) {
    for (int k = 0; k < n && !c->err; k++) kiln__optim_param_tensor(c, &params[k], master_weights); /* refuse what no step could update */
    kiln_optimizer *opt = c->err ? NULL : calloc(1, sizeof *opt);
    if (opt && !kiln__object_register(opt, KILN__OPTIMIZER_KIND)) free(opt), opt = NULL;
    if (!opt && !c->err) kiln__fail(c, KILN_ERR_OUT_OF_MEMORY, "cannot allocate the optimizer");
    if (c->err) {
        for (int k = 0; k < n; k++) kiln_release(params[k].own);
        free(params), free(groups), free(opt);
        kiln__optim_finish(c);
        return NULL;
    }
    opt->kind = kind;
    opt->type = kind->type;
    opt->master_weights = master_weights;
    opt->n_params = n;
    opt->params = params;
    opt->n_groups = n_groups;
    opt->groups = groups;
    return opt;
}

/* An optimizer over the module's trainable parameters (f32 or f64) in one group. */
static kiln_optimizer *optim_new_module(const char *op, kiln_module *model, const kiln__optim_kind *kind, double lr,
                                        double weight_decay, bool master_weights) {
    if (!model) {
        kiln__report(KILN_ERR_NULL, op, "model is NULL");
        return NULL;
    }
    KILN__OBJECT_OR_RETURN(model, KILN__MODULE_KIND, op, NULL);
    if (kiln_module_is_quantized(model)) {
        kiln__report(KILN_ERR_UNSUPPORTED, op,
                     "the model was quantized by kiln_quantize_dynamic: its int8 layers are for inference only");
        return NULL;
    }
    int n = kiln_module_params(model, NULL, 0);
    kiln_param *list = calloc((size_t)(n ? n : 1), sizeof *list);
    kiln__optim_param *params = calloc((size_t)(n ? n : 1), sizeof *params);
    kiln__optim_group *group = calloc(1, sizeof *group);
    if (!list || !params || !group) {
        free(list), free(params), free(group);
        kiln__report(KILN_ERR_OUT_OF_MEMORY, op, "cannot allocate the optimizer");
        return NULL;
    }
    kiln_module_params(model, list, n);
    int k = 0;
    for (int i = 0; i < n; i++) {
        if (list[i].buffer) continue;
        memcpy(params[k].name, list[i].name, sizeof params[k].name);
        params[k++].slot = list[i].slot;
    }
    free(list);
    *group = (kiln__optim_group){lr, weight_decay};
    KILN__OP_BEGIN(op);
    return optim_make(&c, kind, k, params, 1, group, master_weights);
}

#define MAX_GROUP_PARAMS (1 << 24) /* far above any model; keeps the counts' sums in an int */

/* An optimizer over the caller's groups (a reference taken to each parameter). */
static kiln_optimizer *optim_new_groups(const char *op, int n_groups, const kiln_param_group *groups,
                                        const kiln__optim_kind *kind, double lr, double weight_decay, bool master_weights) {
    KILN__OP_BEGIN(op);
    if (!groups) return kiln__fail(&c, KILN_ERR_NULL, "groups is NULL"), kiln__optim_finish(&c), NULL;
    if (n_groups < 1 || n_groups > 1024)
        return kiln__fail(&c, KILN_ERR_INVALID_ARGUMENT, "%d groups: expected 1 to 1024", n_groups), kiln__optim_finish(&c),
               NULL;
    int64_t total = 0;
    for (int g = 0; g < n_groups && !c.err; g++) {
        const kiln_param_group *pg = &groups[g];
        double glr = group_lr(pg->lr, lr), gwd = pg->weight_decay < 0 ? weight_decay : pg->weight_decay;
        if (pg->n < 0 || pg->n > MAX_GROUP_PARAMS)
            kiln__fail(&c, KILN_ERR_INVALID_ARGUMENT, "group %d has %d parameters: expected 0 to %d", g, pg->n,
                       MAX_GROUP_PARAMS);
        else if (pg->n > 0 && !pg->params) kiln__fail(&c, KILN_ERR_NULL, "group %d's params is NULL", g);
        else if (!(glr >= 0 && isfinite(glr)) || isnan(pg->lr))
            kiln__fail(&c, KILN_ERR_INVALID_ARGUMENT, "group %d's learning rate %g must be finite", g, pg->lr);
        else if (!(gwd >= 0 && isfinite(gwd)) || isnan(pg->weight_decay))
            kiln__fail(&c, KILN_ERR_INVALID_ARGUMENT, "group %d's weight decay %g must be finite", g, pg->weight_decay);
        total += pg->n;
    }
    if (!c.err && total > MAX_GROUP_PARAMS)
        kiln__fail(&c, KILN_ERR_INVALID_ARGUMENT, "%lld parameters: at most %d", (long long)total, MAX_GROUP_PARAMS);
    if (c.err) return kiln__optim_finish(&c), NULL;
    kiln__optim_param *params = calloc((size_t)(total ? total : 1), sizeof *params);
    kiln__optim_group *gs = calloc((size_t)n_groups, sizeof *gs);
    kiln__tensor **seen = calloc((size_t)(total ? total : 1), sizeof *seen);
    if (!params || !gs || !seen) {
        free(params), free(gs), free(seen);
        return kiln__fail(&c, KILN_ERR_OUT_OF_MEMORY, "cannot allocate the optimizer"), kiln__optim_finish(&c), NULL;
    }
    int k = 0;
    for (int g = 0; g < n_groups && !c.err; g++) {
        const kiln_param_group *pg = &groups[g];
        gs[g] = (kiln__optim_group){group_lr(pg->lr, lr), pg->weight_decay < 0 ? weight_decay : pg->weight_decay};
        for (int i = 0; i < pg->n && !c.err; i++) {
            kiln__tensor *t = kiln__peek(&c, pg->params[i]);
            if (!t) break;
            const kiln__ad_meta *m = t->autodiff;
            if (!m || !m->leaf) {
                kiln__fail(&c, KILN_ERR_INVALID_ARGUMENT,
                           "parameter %d of group %d is not a leaf: mark it with kiln_require_grad", i, g);
                break;
            }
            for (int j = 0; j < k; j++)
                if (seen[j] == t || ((const kiln__ad_meta *)seen[j]->autodiff)->leaf == m->leaf) {
                    kiln__fail(&c, KILN_ERR_INVALID_ARGUMENT, "parameter %d of group %d appears twice", i, g);
                    break;
                }
            if (c.err) break;
            seen[k] = t;
            kiln__optim_param *p = &params[k++];
            snprintf(p->name, sizeof p->name, "group%d.%d", g, i);
            p->group = g;
            kiln__tensor_retain(t);
            p->own = kiln__handle_new(t);
            p->slot = &p->own;
        }
    }
    free(seen);
    return optim_make(&c, kind, k, params, n_groups, gs, master_weights); /* keeps the array: the slots stay valid */
}

/* An optimizer over a plain list of n parameters in one group. */
static kiln_optimizer *optim_new_params(const char *op, int n, const kiln_tensor *params, const kiln__optim_kind *kind,
                                        double lr, double weight_decay, bool master_weights) {
    if (n < 1) {
        kiln__report(KILN_ERR_INVALID_ARGUMENT, op, "%d parameters: the list must not be empty", n);
        return NULL;
    }
    kiln_param_group g = kiln_param_group_of(n, params);
    return optim_new_groups(op, 1, &g, kind, lr, weight_decay, master_weights);
}

kiln_optimizer *kiln__optim_create(const kiln__optim_kind *kind, const char *op, const void *options,
                                   kiln__optim_source src) {
    kiln__optim_options o;
    memset(&o, 0, sizeof o);
    memcpy(&o, options, kind->options_size);
    kind->resolve(&o);
    if (!kind->check(op, &o)) return NULL;
    double lr, wd;
    kind->rates(&o, &lr, &wd);
    bool mw = kind->master_weights(&o);
    kiln_optimizer *opt = src.from == KILN__OPTIM_FROM_MODULE ? optim_new_module(op, src.model, kind, lr, wd, mw)
                          : src.from == KILN__OPTIM_FROM_GROUPS ? optim_new_groups(op, src.n_groups, src.groups, kind, lr, wd, mw)
                                                                : optim_new_params(op, src.n, src.params, kind, lr, wd, mw);
    if (opt) opt->options = o;
    return opt;
}

kiln_param_group kiln_param_group_of(int n, const kiln_tensor *params) {
    return (kiln_param_group){.params = params, .n = n, .lr = -1, .weight_decay = -1};
}

void kiln_optimizer_free(kiln_optimizer *opt) {
    if (!opt || kiln__object_retire(opt, KILN__OPTIMIZER_KIND, "kiln_optimizer_free") != KILN_OK) return;
    kiln__optim_clear_state(opt);
    for (int i = 0; i < opt->n_params; i++) kiln_release(opt->params[i].own);
    free(opt->params);
    free(opt->groups);
    kiln__object_dispose(opt, KILN__OPTIMIZER_KIND, "kiln_optimizer_free");
}

void kiln_optimizer_set_lr(kiln_optimizer *opt, double lr) {
    if (!opt) {
        kiln__report(KILN_ERR_NULL, "kiln_optimizer_set_lr", "optimizer is NULL");
        return;
    }
    KILN__OBJECT_OR_RETURN(opt, KILN__OPTIMIZER_KIND, "kiln_optimizer_set_lr");
    if (kiln__optim_check_lr("kiln_optimizer_set_lr", lr))
        for (int g = 0; g < opt->n_groups; g++) opt->groups[g].lr = lr;
}

double kiln_optimizer_lr(const kiln_optimizer *opt) {
    if (opt) KILN__OBJECT_OR_RETURN(opt, KILN__OPTIMIZER_KIND, "kiln_optimizer_lr", NAN);
    return opt && opt->n_groups ? opt->groups[0].lr : 0.0;
}

int64_t kiln_optimizer_steps(const kiln_optimizer *opt) {
    if (opt) KILN__OBJECT_OR_RETURN(opt, KILN__OPTIMIZER_KIND, "kiln_optimizer_steps", -1);
    return opt ? opt->steps : 0;
}

int kiln_optimizer_num_groups(const kiln_optimizer *opt) {
    if (opt) KILN__OBJECT_OR_RETURN(opt, KILN__OPTIMIZER_KIND, "kiln_optimizer_num_groups", -1);
    return opt ? opt->n_groups : 0;
}

bool kiln__optim_and_grads_live(kiln__opctx *c, const kiln_optimizer *opt, const kiln_grads *g) {
    kiln_status st;
    const char *why = kiln__object_problem(opt, KILN__OPTIMIZER_KIND, &st);
    if (!why) why = kiln__object_problem(g, KILN__GRADS_KIND, &st);
    if (why) kiln__fail(c, st, "%s", why);
    return !why;
}

static bool check_group(const char *op, const kiln_optimizer *opt, int group) {
    if (!opt) return kiln__report(KILN_ERR_NULL, op, "optimizer is NULL"), false;
    KILN__OBJECT_OR_RETURN(opt, KILN__OPTIMIZER_KIND, op, false);
    if (group < 0 || group >= opt->n_groups)
        return kiln__report(KILN_ERR_INDEX, op, "group %d out of range: the optimizer has %d", group, opt->n_groups), false;
    return true;
}

kiln_status kiln_optimizer_set_group_lr(kiln_optimizer *opt, int group, double lr) {
    const char *op = "kiln_optimizer_set_group_lr";
    if (!check_group(op, opt, group)) return kiln_last_status();
    if (!kiln__optim_check_lr(op, lr)) return kiln_last_status();
    opt->groups[group].lr = lr;
    return KILN_OK;
}

double kiln_optimizer_group_lr(const kiln_optimizer *opt, int group) {
    return check_group("kiln_optimizer_group_lr", opt, group) ? opt->groups[group].lr : NAN;
}

/* ---- gradients ------------------------------------------------------------------------------ */

/* Takes parameter i's gradient out of g (owned; NULL when it has none). */
static kiln__tensor *take_grad(kiln__opctx *c, kiln_optimizer *opt, int i, const kiln__tensor *param, kiln_grads *g) {
    const kiln__ad_meta *m = param->autodiff;
    if (!m || !m->leaf) return NULL;
    kiln_tensor h = kiln_grad(g, *opt->params[i].slot);
    return h.id ? kiln__arg(c, h) : NULL;
}

bool kiln__optim_check_grad(kiln__opctx *c, const kiln_optimizer *opt, const kiln__optim_param *p,
                            const kiln__tensor *param, const kiln__tensor *grad, bool wait_computed) {
    if (!kiln__ok(c, (kiln__tensor *)grad)) return false;
    if (wait_computed) kiln__wait_storage(grad->storage);
    kiln__error *late = atomic_load(&grad->storage->err); /* failed while running: no update from it */
    if (late) {
        if (!c->err) c->err = wait_computed ? kiln__earliest_error(late) : kiln__error_ref(late);
        return false;
    }
    bool dtype_ok = grad->dtype == param->dtype || (grad->dtype == KILN_F32 && kiln__optim_uses_master(opt, param->dtype));
    if (!dtype_ok || grad->device != param->device || grad->ndim != param->ndim ||
        memcmp(grad->shape, param->shape, sizeof(int64_t) * (size_t)param->ndim) != 0) {
        char a[128], b[128];
        kiln__fail(c, KILN_ERR_SHAPE, "gradient of '%s' is %s %s, the parameter %s %s", p->name,
                   kiln_dtype_name(grad->dtype), kiln__shape_str(a, sizeof a, grad->ndim, grad->shape),
                   kiln_dtype_name(param->dtype), kiln__shape_str(b, sizeof b, param->ndim, param->shape));
        return false;
    }
    return true;
}

/* ---- step ------------------------------------------------------------------------------------ */

typedef struct {
    kiln__tensor *param;   /* borrowed */
    kiln__tensor *grad;    /* owned */
    kiln__tensor *grad_up; /* master weights: the gradient cast to f32 (owned), else NULL */
    bool fresh_state, fresh_master;
    /* the early path: the updated copies of the parameter (or master) and its state (owned) */
    kiln__tensor *next, *next_state[KILN__OPTIM_MAX_STATE];
} update;

/* What the kind's update writes: the parameter's f32 master where it has one, else itself. */
static kiln__tensor *target_of(const kiln_optimizer *opt, const kiln__optim_param *p, const update *u) {
    return kiln__optim_uses_master(opt, u->param->dtype) ? p->master : u->param;
}
static const kiln__tensor *grad_of(const update *u) { return u->grad_up ? u->grad_up : u->grad; }

/* Master weights, before any update is queued: each bf16/f16 parameter to update gets its
 * master (made at its first update) and its gradient cast up to f32. */
static void prepare_masters(kiln__opctx *c, kiln_optimizer *opt, update *ups) {
    for (int i = 0; i < opt->n_params && !c->err; i++) {
        kiln__optim_param *p = &opt->params[i];
        if (!ups[i].grad || !kiln__optim_uses_master(opt, ups[i].param->dtype)) continue;
        if (kiln__optim_master_stale(p, ups[i].param)) { /* the parameter was written since: it wins */
            kiln__tensor_release(p->master);
            p->master = NULL;
        } else if (p->master && ups[i].param->storage->exported &&
                   !kiln__optim_master_merge_outside_writes(c, ups[i].param, p->master)) {
            break;
        }
        if (!p->master) {
            p->master = kiln__optim_master_from(c, ups[i].param);
            ups[i].fresh_master = p->master != NULL;
            if (c->err) break;
        }
        kiln__tensor_retain(ups[i].grad);
        ups[i].grad_up = kiln__t_cast(c, ups[i].grad, KILN_F32);
    }
}

/* After a step's write-backs: each master agrees with its parameter as the write clock now
 * says (after all of them, since parameters may share a storage). */
static void mark_masters(kiln_optimizer *opt, const update *ups) {
    for (int i = 0; i < opt->n_params; i++)
        if (ups[i].param && opt->params[i].master) kiln__optim_master_mark(&opt->params[i], ups[i].param);
}

/* A step that failed keeps no master it made. */
static void drop_fresh_master(kiln__optim_param *p, update *u) {
    if (!u->fresh_master) return;
    kiln__tensor_release(p->master);
    p->master = NULL;
    u->fresh_master = false;
}

/* A fresh dense copy of t (borrowed), queued. */
static kiln__tensor *copy_of(kiln__opctx *c, const kiln__tensor *t) {
    kiln__tensor *out = kiln__t_empty(c, t->device, t->dtype, t->ndim, t->shape);
    if (out && !kiln__t_copy_into(c, kiln__view_of(out), t)) kiln__tensor_release(out), out = NULL;
    return out;
}

/* The step for gradients that are results of queued collectives (kiln__grads_late: data
 * parallelism's bucket all-reduces, which end one after another). Waiting for every gradient
 * before queuing any update would start every update after the last bucket; updating in place
 * as each gradient arrives could leave the parameters half-changed when a later bucket fails.
 * So: (a) each parameter's update is queued at once into copies of the parameter and its state,
 * so it runs as soon as its own gradient is ready; (b) the step waits for every gradient and
 * every copy, and the processes sharing the step agree (`agree`: every rank of a data-parallel
 * step; one that failed alone would otherwise keep its weights while the others commit); (c)
 * only if all succeeded, each parameter gets its copy back (one queued copy) and
 * takes the new state tensors (a swap); otherwise the copies are dropped and the parameters, the
 * state and the step counts are as before. Same kernels, same order of arithmetic: the same
 * values as updating in place. */
static void step_early(kiln__opctx *c, kiln_optimizer *opt, update *ups, int n_state, kiln_grads *g) {
    /* (a) */
    for (int i = 0; i < opt->n_params && !c->err; i++) {
        if (!ups[i].grad) continue;
        kiln__optim_param work = opt->params[i];
        work.tentative = true;
        work.step++;
        const kiln__tensor *target = target_of(opt, &opt->params[i], &ups[i]);
        ups[i].next = copy_of(c, target);
        for (int k = 0; k < n_state && !c->err; k++) {
            const kiln__tensor *old = opt->params[i].state[k];
            const kiln__tensor *p = target;
            ups[i].next_state[k] = old ? copy_of(c, old) : kiln__t_empty(c, p->device, p->dtype, p->ndim, p->shape);
            work.state[k] = ups[i].next_state[k];
        }
        if (!c->err) apply_update(c, opt, &work, ups[i].next, grad_of(&ups[i]));
    }
    /* (b) */
    for (int i = 0; i < opt->n_params && !c->err; i++) {
        if (!ups[i].grad) continue;
        if (!kiln__optim_check_grad(c, opt, &opt->params[i], ups[i].param, ups[i].grad, true)) break;
        for (int k = -1; k < n_state && !c->err; k++) {
            kiln__tensor *t = k < 0 ? ups[i].next : ups[i].next_state[k];
            if (kiln__wait_storage(t->storage) != KILN_OK)
                c->err = kiln__earliest_error(atomic_load(&t->storage->err));
        }
    }
    kiln__grads_agree(g, c); /* (also when this process failed: its peers wait for its word) */
    /* (c) nothing below can fail at dispatch: the copies above ran on the same devices */
    for (int i = 0; i < opt->n_params; i++) {
        kiln__optim_param *p = &opt->params[i];
        if (ups[i].grad && !c->err) {
            kiln__tensor *target = target_of(opt, p, &ups[i]);
            kiln__t_copy_into(c, kiln__view_of(target), ups[i].next);
            if (target != ups[i].param) kiln__optim_master_write_back(c, ups[i].param, target);
            for (int k = 0; k < n_state; k++) {
                kiln__tensor_release(p->state[k]);
                p->state[k] = ups[i].next_state[k];
                ups[i].next_state[k] = NULL;
            }
            p->step++;
        }
        if (c->err) drop_fresh_master(p, &ups[i]);
        kiln__tensor_release(ups[i].next);
        for (int k = 0; k < KILN__OPTIM_MAX_STATE; k++) kiln__tensor_release(ups[i].next_state[k]);
    }
}

kiln_status kiln_optimizer_step(kiln_optimizer *opt, kiln_grads *g) {
    KILN__OP_BEGIN("kiln_optimizer_step");
    if (!opt || !g) {
        kiln__fail(&c, KILN_ERR_NULL, "%s is NULL", !opt ? "optimizer" : "gradients container");
        return kiln__optim_finish(&c);
    }
    if (!kiln__optim_and_grads_live(&c, opt, g)) return kiln__optim_finish(&c);
    update *ups = calloc((size_t)(opt->n_params ? opt->n_params : 1), sizeof *ups);
    if (!ups) {
        kiln__fail(&c, KILN_ERR_OUT_OF_MEMORY, "cannot allocate the step's bookkeeping");
        return kiln__optim_finish(&c);
    }
    int n_state = kiln__optim_state_count(opt);
    /* gradients still being all-reduced: each update starts when its own gradient is ready */
    bool early = kiln__grads_late(g);
    /* 1: every gradient and parameter checked before anything changes (the early path waits
     * for the gradients later, in step_early) */
    for (int i = 0; i < opt->n_params; i++) {
        kiln__tensor *param = kiln__optim_param_tensor(&c, &opt->params[i], opt->master_weights);
        kiln__tensor *grad = param ? take_grad(&c, opt, i, param, g) : NULL;
        if (!grad) continue;
        ups[i].param = param;
        ups[i].grad = grad;
        if (!kiln__optim_check_grad(&c, opt, &opt->params[i], param, grad, !early)) continue;
        const kiln__tensor *st = opt->params[i].state[0], *master = opt->params[i].master;
        bool uses_master = kiln__optim_uses_master(opt, param->dtype);
        if (!st && uses_master) st = master; /* (SGD without momentum has no other state) */
        if ((st && (st->dtype != kiln__optim_state_dtype(opt, param->dtype) || st->device != param->device ||
                    st->ndim != param->ndim ||
                    memcmp(st->shape, param->shape, sizeof(int64_t) * (size_t)param->ndim) != 0)) ||
            (master && !uses_master)) {
            kiln__fail(&c, KILN_ERR_SHAPE, "parameter '%s' changed shape or dtype since its optimizer state was made",
                       opt->params[i].name);
            continue;
        }
        if (!opt->kind->has_kernels(&opt->options, param->device) ||
            (uses_master && !kiln__t_has_kernel(param->device, KILN__OP_COPY)))
            kiln__fail(&c, KILN_ERR_UNSUPPORTED, "%s has no %s update kernel", kiln_device_name(param->device), opt->type);
    }
    prepare_masters(&c, opt, ups);
    if (early) {
        step_early(&c, opt, ups, n_state, g); /* (a failed check: it agrees, then drops) */
        if (!c.err) mark_masters(opt, ups);
        for (int i = 0; i < opt->n_params; i++) kiln__drop(2, ups[i].grad, ups[i].grad_up);
        free(ups);
        if (!c.err) opt->steps++;
        return kiln__optim_finish(&c);
    }
    /* 2: state for parameters updated for the first time */
    for (int i = 0; i < opt->n_params && !c.err; i++) {
        kiln__optim_param *p = &opt->params[i];
        if (!ups[i].grad || p->state[0] || n_state == 0) continue;
        ups[i].fresh_state = true;
        const kiln__tensor *t = target_of(opt, p, &ups[i]);
        for (int k = 0; k < n_state && !c.err; k++) p->state[k] = kiln__t_empty(&c, t->device, t->dtype, t->ndim, t->shape);
    }
    /* 3: the updates (nothing below can fail) */
    for (int i = 0; i < opt->n_params; i++) {
        kiln__optim_param *p = &opt->params[i];
        if (ups[i].grad && !c.err) {
            p->step++;
            /* the kernels were checked above: the submits cannot fail */
            kiln__tensor *target = target_of(opt, p, &ups[i]);
            /* autocast's bf16 copy of the parameter rewritten by the update, not cast again at the
             * next forward pass (a second pass over the weight) */
            p->bf16_copy = target == ups[i].param && opt->kind->writes_bf16_copy ? kiln__autocast_copy_for_update(target)
                                                                                 : NULL;
            bool queued = apply_update(&c, opt, p, target, grad_of(&ups[i]));
            kiln__autocast_copy_updated(target, p->bf16_copy, queued && !c.err);
            p->bf16_copy = NULL;
            if (target != ups[i].param) kiln__optim_master_write_back(&c, ups[i].param, target);
        }
        if (c.err && ups[i].fresh_state)
            for (int k = 0; k < KILN__OPTIM_MAX_STATE; k++) {
                kiln__tensor_release(p->state[k]);
                p->state[k] = NULL;
            }
        if (c.err) drop_fresh_master(p, &ups[i]);
        kiln__drop(2, ups[i].grad, ups[i].grad_up);
    }
    if (!c.err) mark_masters(opt, ups);
    free(ups);
    if (!c.err) opt->steps++;
    return kiln__optim_finish(&c);
}
