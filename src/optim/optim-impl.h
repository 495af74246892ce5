/* Optimizer internals shared by the optimizers, clipping and checkpoints.
 *
 * An optimizer holds parameter slots and, per parameter, its state tensors, created at the
 * parameter's first update. Built from a module, a slot is the module's own handle (read
 * afresh at every step, so a replaced handle is followed); built from parameter groups, a
 * slot is the optimizer's own reference (`own`) to the caller's tensor. Each parameter
 * belongs to a group with its own learning rate and weight decay. Updates are one fused op per parameter
 * whose outputs are the parameter's and the state's own storages. What differs between
 * optimizers is in one table per kind (kiln__optim_kind), defined in the kind's own file. */
#ifndef KILN_OPTIM_IMPL_H
#define KILN_OPTIM_IMPL_H

#include <math.h>

#include "kiln/optim.h"
#include "ops/optim_ops-impl.h"

#define KILN__OPTIM_MAX_STATE 3 /* RMSprop: square_avg, momentum_buffer, grad_avg */

typedef struct kiln__optim_param {
    char name[96];                               /* the module's name for it ("0.weight") */
    kiln_tensor *slot;                           /* the module's handle */
    kiln__tensor *state[KILN__OPTIM_MAX_STATE]; /* NULL until the first update */
    kiln__tensor *master; /* master_weights: the f32 copy of a bf16/f16 parameter (master.c), else NULL */
    uint64_t master_stamp; /* the parameter storage's write clock when the master was last in step with it */
    int64_t step;                                /* updates of this parameter (Adam's bias correction) */
    int group;                                   /* index into the optimizer's groups */
    kiln_tensor own;                             /* the optimizer's reference (groups), or KILN_NONE */
    bool tentative; /* a step's working copy: state and parameter are fresh copies, committed later */
    /* During one in-place update only: autocast's bf16 copy of the f32 parameter, which the kind's
     * update rewrites in the same pass (optimizer.c; kinds with writes_bf16_copy), else NULL */
    kiln__tensor *bf16_copy;
} kiln__optim_param;

typedef struct {
    double lr, weight_decay;
} kiln__optim_group;

/* The options of any kind; the kind's table says which member is in use. */
typedef union {
    kiln_sgd_options sgd;
    kiln_adam_options adam;
    kiln_rmsprop_options rmsprop;
    kiln_adagrad_options adagrad;
} kiln__optim_options;

/* A hyperparameter a checkpoint saves besides the learning rate: its metadata key and where
 * its value lives (in a copy of the options, or the kind's bool as 0 or 1 in *flag). */
typedef struct {
    const char *key;
    double *value;
} kiln__optim_hyper;
#define KILN__OPTIM_MAX_HYPERS 5

/* One optimizer kind: everything optimizer.c and checkpoint.c need to know about it. Each kind's
 * file (sgd.c, adam.c, adaptive.c) defines its table and its public constructors, which call
 * kiln__optim_create with it; optimizer.c calls a kind only through its table, so the calls
 * inside optim/ point one way (the kinds down to optimizer.c). */
typedef struct kiln__optim_kind {
    const char *type;    /* "sgd", "adam", "rmsprop", "adagrad": checkpoints and messages */
    size_t options_size; /* sizeof the public options struct */
    /* Fields left 0 replaced by their defaults (see optim.h), in place. */
    void (*resolve)(kiln__optim_options *o);
    /* Whether the options are usable; false + error reported under op. */
    bool (*check)(const char *op, const kiln__optim_options *o);
    /* The options' learning rate and weight decay (the groups' defaults). */
    void (*rates)(const kiln__optim_options *o, double *lr, double *weight_decay);
    /* Number of state tensors per parameter and their names (PyTorch's: momentum_buffer;
     * exp_avg, exp_avg_sq; square_avg, momentum_buffer, grad_avg; sum). */
    int (*state_count)(const kiln__optim_options *o);
    const char *(*state_name)(const kiln__optim_options *o, int i);
    /* Whether the options ask for f32 master copies of bf16/f16 parameters. */
    bool (*master_weights)(const kiln__optim_options *o);
    /* Whether dev has every kernel the updates use. */
    bool (*has_kernels)(const kiln__optim_options *o, kiln_device dev);
    /* The fused update of one parameter; its state tensors exist and p->step already counts
     * this update. False + c->err if it could not be queued. */
    bool (*apply)(kiln__opctx *c, const kiln_optimizer *opt, const kiln__optim_param *p, kiln__tensor *param,
                  const kiln__tensor *grad);
    /* Checkpoints: the saved hyperparameters as pointers into o (at most KILN__OPTIM_MAX_HYPERS;
     * the kind's bool, if any, last, through *flag), and the loaded lr and bool set back. */
    int (*hypers)(kiln__optim_options *o, double *flag, kiln__optim_hyper *out);
    void (*set_loaded)(kiln__optim_options *o, double lr, double flag);
    /* Whether apply passes p->bf16_copy to its update, which then rewrites that copy too. */
    bool writes_bf16_copy;
} kiln__optim_kind;

/* The kinds' tables (sgd.c, adam.c, adaptive.c), also as names to compare opt->kind with. */
extern const kiln__optim_kind kiln__sgd_kind, kiln__adam_kind, kiln__rmsprop_kind, kiln__adagrad_kind;
#define KILN__OPTIM_SGD (&kiln__sgd_kind)
#define KILN__OPTIM_ADAM (&kiln__adam_kind)
#define KILN__OPTIM_RMSPROP (&kiln__rmsprop_kind)
#define KILN__OPTIM_ADAGRAD (&kiln__adagrad_kind)

struct kiln_optimizer {
    const kiln__optim_kind *kind;
    const char *type; /* kind->type (checkpoints) */
    union {                          /* one storage, two ways to name it: */
        kiln__optim_options options; /* as the kind's table takes it */
        kiln_sgd_options sgd;        /* or by kind, where the kind is known */
        kiln_adam_options adam;
        kiln_rmsprop_options rmsprop;
        kiln_adagrad_options adagrad;
    };
    int64_t steps;
    bool master_weights; /* kind->master_weights of the options (fixed at construction) */
    int n_groups;
    kiln__optim_group *groups;
    int n_params;
    kiln__optim_param *params;
};

/* A double option as given, or its default where a designated initializer left it 0 (+0.0);
 * KILN_ZERO (-0.0) asks for a real 0. */
static inline double kiln__option_or(double v, double default_value) {
    return v != 0 ? v : signbit(v) ? 0.0 : default_value;
}
/* The number of state tensors of opt's parameters and the name of the i-th (checkpoints). */
static inline int kiln__optim_state_count(const kiln_optimizer *opt) { return opt->kind->state_count(&opt->options); }
static inline const char *kiln__optim_state_name(const kiln_optimizer *opt, int i) {
    return opt->kind->state_name(&opt->options, i);
}
/* Reports c's error as the thread's last error (if any) and returns its status. */
kiln_status kiln__optim_finish(kiln__opctx *c);
/* Multiplies each gradient in g of opt's parameters by factor, in place, and gives the f64
 * sum of their squares after (a 1-element tensor: inf or NaN when any gradient holds one;
 * NULL when no parameter has a gradient, or with c's error set). For kiln_grad_scaler_step. */
kiln__tensor *kiln__optim_grads_unscale(kiln__opctx *c, kiln_optimizer *opt, kiln_grads *g, double factor);
/* ---- master weights (master.c) ---- */
/* Whether a parameter of this dtype is updated through an f32 master copy by opt. */
static inline bool kiln__optim_uses_master(const kiln_optimizer *opt, kiln_dtype dtype) {
    return opt->master_weights && (dtype == KILN_BF16 || dtype == KILN_F16);
}
/* The dtype of a parameter's state (and master): f32 for a master-weighted one, else its own. */
static inline kiln_dtype kiln__optim_state_dtype(const kiln_optimizer *opt, kiln_dtype param_dtype) {
    return kiln__optim_uses_master(opt, param_dtype) ? KILN_F32 : param_dtype;
}
/* A fresh f32 tensor holding param's values exactly (read on the host, so no queued kernel can
 * fail it later: a master that exists is never poisoned). NULL + c's error. */
kiln__tensor *kiln__optim_master_from(kiln__opctx *c, kiln__tensor *param);
/* Whether someone else wrote the parameter since its master was last in step with it (a load,
 * a copy into it, a replaced handle): then the master is stale and is made again from the
 * parameter; kiln__optim_master_mark records that the two agree now. */
static inline bool kiln__optim_master_stale(const kiln__optim_param *p, kiln__tensor *param) {
    return p->master && kiln__storage_last_write(param->storage) != p->master_stamp;
}
static inline void kiln__optim_master_mark(kiln__optim_param *p, kiln__tensor *param) {
    p->master_stamp = kiln__storage_last_write(param->storage);
}
/* A parameter whose buffer was exported through DLPack can be written behind the engine (no
 * write stamp): each element that no longer equals its master rounded takes the parameter's
 * value in the master. Waits for both; false + c's error if it cannot. */
bool kiln__optim_master_merge_outside_writes(kiln__opctx *c, kiln__tensor *param, kiln__tensor *master);
/* Queues param = master rounded to param's dtype. False + c's error if it cannot be queued. */
bool kiln__optim_master_write_back(kiln__opctx *c, kiln__tensor *param, const kiln__tensor *master);
/* The parameter's tensor (borrowed), if it can be updated in place (bf16/f16 ones only
 * through master weights); NULL + error if not. */
kiln__tensor *kiln__optim_param_tensor(kiln__opctx *c, const kiln__optim_param *p, bool master_weights);
/* Whether grad (not NULL) can update param by opt: not failed, same dtype (or f32 for a
 * master-weighted parameter: the gradient scaler unscales those in f32), device and shape;
 * false + c's error if not. wait_computed: the step is a read of its gradients, so a gradient
 * that fails while it is computed is known before any parameter changes (clipping only looks
 * at what is known). */
bool kiln__optim_check_grad(kiln__opctx *c, const kiln_optimizer *opt, const kiln__optim_param *p,
                            const kiln__tensor *param, const kiln__tensor *grad, bool wait_computed);
/* Both live (else the error in c): a step or a clip touches neither otherwise. */
bool kiln__optim_and_grads_live(kiln__opctx *c, const kiln_optimizer *opt, const kiln_grads *g);
/* Drops every parameter's state. */
void kiln__optim_clear_state(kiln_optimizer *opt);
/* Where a new optimizer's parameters come from: a module's trainable parameters, the caller's
 * groups (a reference taken to each parameter; a group's negative lr or weight decay means the
 * options'), or a plain list of n parameters in one group (at least one, as PyTorch's "empty
 * parameter list"). */
typedef struct {
    kiln_module *model;
    int n_groups;
    const kiln_param_group *groups;
    int n;
    const kiln_tensor *params;
    enum { KILN__OPTIM_FROM_MODULE, KILN__OPTIM_FROM_GROUPS, KILN__OPTIM_FROM_PARAMS } from;
} kiln__optim_source;
#define KILN__OPTIM_MODULE(m) ((kiln__optim_source){.model = (m), .from = KILN__OPTIM_FROM_MODULE})
#define KILN__OPTIM_GROUPS(n_, g_) ((kiln__optim_source){.n_groups = (n_), .groups = (g_), .from = KILN__OPTIM_FROM_GROUPS})
#define KILN__OPTIM_PARAMS(n_, p_) ((kiln__optim_source){.n = (n_), .params = (p_), .from = KILN__OPTIM_FROM_PARAMS})
/* Every public constructor: the caller's options (kind's options struct) resolved and checked,
 * then an optimizer of that kind over src's parameters. NULL + error under op. */
kiln_optimizer *kiln__optim_create(const kiln__optim_kind *kind, const char *op, const void *options,
                                   kiln__optim_source src);
/* Whether lr is a usable learning rate; false + error reported under op. */
bool kiln__optim_check_lr(const char *op, double lr);
/* Whether v is finite and >= 0 (most options' rule). */
static inline bool kiln__optim_nonneg(double v) { return v >= 0 && isfinite(v); }
#endif
