/* kiln optim: optimizers that update a module's parameters in place (no copies of the
 * parameters), learning-rate schedules, gradient clipping, and checkpoints.
 *
 *   kiln_adam_options o = kiln_adamw_defaults();
 *   o.lr = 1e-3;
 *   kiln_optimizer *opt = kiln_adam_new(model, o);
 *   for (int64_t step = 0; step < total_steps; step++) {
 *       kiln_tensor loss = my_loss(model, step);   // your forward pass and loss
 *       kiln_grads *g = NULL;
 *       kiln_backward(loss, &g);
 *       kiln_clip_grad_norm(opt, g, 1.0, NULL);     // NULL: the norm is not wanted
 *       kiln_optimizer_set_lr(opt, kiln_lr_cosine(1e-3, 0.0, step, total_steps));
 *       kiln_optimizer_step(opt, g);          // consumes the gradients it uses
 *       kiln_grads_free(g);
 *   }
 *   kiln_checkpoint_save("model.safetensors", model, opt);
 *   kiln_optimizer_free(opt);
 */
#ifndef KILN_OPTIM_H
#define KILN_OPTIM_H

#include "autodiff.h"
#include "nn.h"
#include "io.h" /* tensor save/load (declared here before kiln/io.h existed) */

#ifdef __cplusplus
extern "C" {
#endif

typedef struct kiln_optimizer kiln_optimizer;

/* Options structs: a field left 0 takes its default, so a designated initializer names only
 * what differs: (kiln_adam_options){.lr = 1e-3} is kiln_adam_defaults() with that lr (betas
 * 0.9/0.999, eps 1e-8), never betas and eps of 0. Where 0 is also a meaningful value (a
 * learning rate, Adam's beta1), write KILN_ZERO for a real 0. Fields whose default is 0 (decays,
 * momentum, flags) read as written; a group's weight_decay of 0 is no decay.
 * Every field but lr is 0 (false) by default, as in torch.optim.SGD:
 * (kiln_sgd_options){.lr = 0.1, .momentum = 0.9}. */
#define KILN_ZERO (-0.0) /* an explicit 0 for an option whose 0 means "the default" */
/* master_weights (every kind; false by default): bf16 and f16 parameters are refused unless it
 * is set. With it, each such parameter gets an f32 master copy in the optimizer state (made
 * from the parameter at its first update), its state (moments, sums) is f32, every update is
 * computed in f32 on the master from the gradient cast up to f32 (the f32 kernels, so the
 * master follows exactly what an f32 parameter given the same gradients would), and the
 * parameter is rewritten as the master rounded to its dtype (nearest even). Updates smaller
 * than the parameter's spacing accumulate in the master instead of being lost. The step takes
 * such a parameter's gradient in its dtype or in f32; kiln_grad_scaler_step unscales it in f32
 * (and leaves it f32 in the container), so what loss scaling lifted above f16's subnormals is
 * not flushed again. f32 and f64 parameters are unaffected. Checkpoints save the master as "optim.<param>.master" (f32) and
 * load it bit-exactly. A parameter written by anything but the optimizer since its last step (a
 * checkpoint loaded with opt NULL, an assignment into it) wins: the next step makes its master
 * again from the written values, so a load is never undone by a stale master. As apex's
 * FusedAdam(master_weights=True):
 *
 *   kiln_tensor w = kiln_leaf(kiln_zeros(KILN_CPU, KILN_BF16, KILN_SHAPE(16, 4)));
 *   kiln_adam_options o = kiln_adamw_defaults();
 *   o.master_weights = true;                             // f32 master copy, f32 moments
 *   kiln_optimizer *opt = kiln_adam_new_params(1, &w, o); // steps as with an f32 parameter
 *   ...                                                  // w holds the master rounded to bf16
 *   kiln_optimizer_free(opt);
 *   kiln_release(w);
 */
typedef struct {
    double lr, momentum, dampening, weight_decay;
    bool nesterov;
    bool master_weights; /* f32 master copies of bf16/f16 parameters (above) */
} kiln_sgd_options;
KILN_API kiln_sgd_options kiln_sgd_defaults(void); /* lr 0.01, no momentum, no decay */

typedef struct {
    double lr, beta1, beta2, eps, weight_decay;
    bool decoupled_weight_decay; /* true: AdamW */
    bool master_weights;         /* f32 master copies of bf16/f16 parameters (above) */
} kiln_adam_options;
KILN_API kiln_adam_options kiln_adam_defaults(void);  /* lr 1e-3, betas 0.9/0.999, eps 1e-8, decay 0 */
KILN_API kiln_adam_options kiln_adamw_defaults(void); /* the same with decoupled decay 0.01 */

/* RMSprop as torch.optim.RMSprop (same defaults and update, step by step):
 *   g += weight_decay * p;  square_avg = alpha * square_avg + (1 - alpha) * g * g
 *   centered: grad_avg = lerp(grad_avg, g, 1 - alpha); avg = sqrt(square_avg - grad_avg^2) + eps
 *   otherwise avg = sqrt(square_avg) + eps
 *   momentum > 0: buf = momentum * buf + g / avg; p -= lr * buf     otherwise p -= lr * g / avg
 * State (checkpoint names as PyTorch's): square_avg, momentum_buffer (momentum > 0),
 * grad_avg (centered). Every option must be finite and >= 0 (alpha too). */
typedef struct {
    double lr, alpha, eps, weight_decay, momentum;
    bool centered;
    bool master_weights; /* f32 master copies of bf16/f16 parameters (above) */
} kiln_rmsprop_options;
KILN_API kiln_rmsprop_options kiln_rmsprop_defaults(void); /* lr 0.01, alpha 0.99, eps 1e-8, rest 0 */

/* Adagrad as torch.optim.Adagrad: with t the parameter's own update count,
 *   g += weight_decay * p;  sum += g * g;  p -= lr / (1 + (t - 1) * lr_decay) * g / (sqrt(sum) + eps)
 * where sum starts at initial_accumulator_value. State: sum. Options finite and >= 0. */
typedef struct {
    double lr, lr_decay, weight_decay, initial_accumulator_value, eps;
    bool master_weights; /* f32 master copies of bf16/f16 parameters (above) */
} kiln_adagrad_options;
KILN_API kiln_adagrad_options kiln_adagrad_defaults(void); /* lr 0.01, eps 1e-10, rest 0 */

/* The optimizer keeps a pointer to the module's parameters: the module must outlive it.
 * NULL (with kiln_last_error) on bad options. */
KILN_API kiln_optimizer *kiln_sgd_new(kiln_module *model, kiln_sgd_options o);
KILN_API kiln_optimizer *kiln_adam_new(kiln_module *model, kiln_adam_options o);
KILN_API kiln_optimizer *kiln_rmsprop_new(kiln_module *model, kiln_rmsprop_options o);
KILN_API kiln_optimizer *kiln_adagrad_new(kiln_module *model, kiln_adagrad_options o);

/* Parameter groups (PyTorch's param_groups), for parameters outside a kiln_module or for a
 * learning rate and weight decay per group (say, no decay on biases):
 *
 *   kiln_tensor w = kiln_randn(KILN_CPU, KILN_F32, KILN_SHAPE(4, 3), 0), b = kiln_zeros(KILN_CPU, KILN_F32, KILN_SHAPE(3));
 *   kiln_require_grad(w);
 *   kiln_require_grad(b);
 *   kiln_param_group groups[2] = {kiln_param_group_of(1, &w), kiln_param_group_of(1, &b)};
 *   groups[1].weight_decay = 0;                                  // group 0 keeps the options' 0.01
 *   kiln_optimizer *opt = kiln_adam_new_groups(2, groups, kiln_adamw_defaults());
 *   kiln_optimizer_set_group_lr(opt, 1, 1e-4);                   // a schedule per group
 *   ...                                                          // steps update w and b in place
 *   kiln_optimizer_free(opt);                                    // drops its references
 *   kiln_release(w);                                             // the caller's own handles
 *   kiln_release(b);
 *
 * Ownership: the handles are not consumed. The optimizer takes its own reference to each
 * parameter (the arrays may be freed after the call) and drops it in kiln_optimizer_free;
 * the caller keeps and releases its handles whenever it likes. Updates are in place, so
 * the caller's handles see them; a handle the caller later replaces (kiln_init) is not
 * followed. Each parameter must be a leaf (kiln_require_grad), f32 or f64 (bf16/f16 with
 * master_weights), not borrowed
 * memory, and appear once. Checkpoints name its state "optim.group<g>.<i>.<state>". */
typedef struct {
    const kiln_tensor *params; /* n handles (not consumed) */
    int n;
    double lr;           /* < 0 or left 0: the options' lr (KILN_ZERO: a real 0) */
    double weight_decay; /* < 0: the options' weight_decay */
} kiln_param_group;
/* A group of n parameters with the options' lr and weight decay (both -1). */
KILN_API kiln_param_group kiln_param_group_of(int n, const kiln_tensor *params);
/* Two groups of a module's trainable parameters (buffers left out), split by name: those for
 * which first(name, ctx) is true (names as kiln_module_params gives them, "0.bias") in
 * groups[0], the others in groups[1], both with the options' lr and weight decay. The groups
 * point into handles[0..cap), which receives the module's own handles (no new references: the
 * optimizer takes its own). Returns the number of parameters, or -1 with kiln_last_error
 * (NULL arguments, cap too small). PyTorch's "no weight decay on biases":
 *
 *   static bool is_bias(const char *name, void *ctx) { (void)ctx; return strstr(name, "bias"); }
 *   ...
 *   kiln_tensor handles[64];
 *   kiln_param_group groups[2];
 *   kiln_module_param_groups(model, is_bias, NULL, handles, 64, groups);
 *   groups[0].weight_decay = 0;
 *   kiln_optimizer *opt = kiln_adam_new_groups(2, groups, kiln_adamw_defaults());
 */
typedef bool (*kiln_param_filter)(const char *name, void *ctx);
KILN_API int kiln_module_param_groups(kiln_module *m, kiln_param_filter first, void *ctx, kiln_tensor *handles, int cap,
                                      kiln_param_group *groups);
/* The common case of one group: n parameters (n >= 1, not consumed) with the options' lr and
 * weight decay, as torch.optim.SGD([w, b], lr=0.5):
 *
 *   kiln_tensor w = kiln_leaf(kiln_zeros(KILN_CPU, KILN_F32, KILN_SHAPE(8, 1)));
 *   kiln_tensor b = kiln_leaf(kiln_zeros(KILN_CPU, KILN_F32, KILN_SHAPE(1)));
 *   kiln_optimizer *opt = kiln_sgd_new_params(2, (kiln_tensor[]){w, b}, (kiln_sgd_options){.lr = 0.5});
 *   ...
 *   kiln_optimizer_free(opt);
 *   kiln_release(w);
 *   kiln_release(b);
 *
 * Everything said above of groups holds (its own references, leaves only, checkpoint names
 * "optim.group0.<i>.<state>"). NULL (with kiln_last_error) on bad options or parameters. */
KILN_API kiln_optimizer *kiln_sgd_new_params(int n, const kiln_tensor *params, kiln_sgd_options o);
KILN_API kiln_optimizer *kiln_adam_new_params(int n, const kiln_tensor *params, kiln_adam_options o);
KILN_API kiln_optimizer *kiln_rmsprop_new_params(int n, const kiln_tensor *params, kiln_rmsprop_options o);
KILN_API kiln_optimizer *kiln_adagrad_new_params(int n, const kiln_tensor *params, kiln_adagrad_options o);
/* 1 to 1024 groups; NULL (with kiln_last_error) on bad options or parameters. */
KILN_API kiln_optimizer *kiln_sgd_new_groups(int n_groups, const kiln_param_group *groups, kiln_sgd_options o);
KILN_API kiln_optimizer *kiln_adam_new_groups(int n_groups, const kiln_param_group *groups, kiln_adam_options o);
KILN_API kiln_optimizer *kiln_rmsprop_new_groups(int n_groups, const kiln_param_group *groups, kiln_rmsprop_options o);
KILN_API kiln_optimizer *kiln_adagrad_new_groups(int n_groups, const kiln_param_group *groups, kiln_adagrad_options o);
/* One update of every parameter that has a gradient in g (taken out of g). The step is a
 * read of the gradients: it waits until they are computed, and if any of them failed (a
 * target out of range, a poisoned input) it returns that error, naming the op that failed
 * first and its file:line, and changes no parameter and no optimizer state. Check its status
 * in a training loop; the updates themselves then run asynchronously, and an update that
 * cannot run leaves its parameter as it was (reported by the next sync). */
KILN_API kiln_status kiln_optimizer_step(kiln_optimizer *opt, kiln_grads *g);
/* kiln_optimizer_step for a caller that holds the gradients as tensors (a binding's .grad):
 * grads[i] (not consumed; KILN_NONE: params[i] is not updated) is the gradient of params[i]
 * (not consumed), and params are the optimizer's n parameters in the order it was made with
 * (kiln_*_new_params, or the groups' in order; not a module's optimizer: KILN_ERR_INVALID_ARGUMENT).
 * A params[i] that is another tensor than the optimizer holds (the caller replaced it) is
 * followed from now on, its state kept (KILN_ERR_SHAPE if its shape or dtype changed). Same
 * waits, checks and statuses as kiln_optimizer_step; no parameter or state changes when a
 * check fails. */
KILN_API kiln_status kiln_optimizer_step_tensors(kiln_optimizer *opt, int n, const kiln_tensor *params,
                                                 const kiln_tensor *grads);
/* Sets every group's learning rate; kiln_optimizer_lr reads group 0's. */
KILN_API void kiln_optimizer_set_lr(kiln_optimizer *opt, double lr);
KILN_API double kiln_optimizer_lr(const kiln_optimizer *opt);
/* One group's learning rate (module optimizers have one group, 0). A bad group gives
 * KILN_ERR_INDEX (the getter returns NaN), a bad rate KILN_ERR_INVALID_ARGUMENT. */
KILN_API int kiln_optimizer_num_groups(const kiln_optimizer *opt);
KILN_API kiln_status kiln_optimizer_set_group_lr(kiln_optimizer *opt, int group, double lr);
KILN_API double kiln_optimizer_group_lr(const kiln_optimizer *opt, int group);
KILN_API int64_t kiln_optimizer_steps(const kiln_optimizer *opt);
KILN_API void kiln_optimizer_free(kiln_optimizer *opt);

/* Scales the gradients in g (in place, where they are) so their global L2 norm is at most
 * max_norm. Computed on the device (no sync); if total_norm is not NULL it receives a 0-d
 * tensor of the norm. */
KILN_API kiln_status kiln_clip_grad_norm(kiln_optimizer *opt, kiln_grads *g, double max_norm, kiln_tensor *total_norm);

/* Clamps every gradient in g (in place, where they are) to [-clip_value, clip_value], as
 * torch.nn.utils.clip_grad_value_. No sync; a gradient that fails later carries its error
 * into the step as before. KILN_ERR_INVALID_ARGUMENT for a negative or non-finite value. */
KILN_API kiln_status kiln_clip_grad_value(kiln_optimizer *opt, kiln_grads *g, double clip_value);

/* Learning-rate schedules: pure functions of the step (or epoch). */
KILN_API double kiln_lr_step(double base_lr, int64_t step, int64_t step_size, double gamma);
KILN_API double kiln_lr_cosine(double base_lr, double min_lr, int64_t step, int64_t total_steps);
/* Linear warm-up: after * step / warmup_steps (0 at step 0) until warmup_steps, then `after`
 * (the value of another schedule). A bad period reports KILN_ERR_INVALID_ARGUMENT and
 * returns the base rate. */
KILN_API double kiln_lr_warmup(double after, int64_t step, int64_t warmup_steps);

/* Checkpoints in the safetensors format (readable by PyTorch's safetensors): the module's
 * parameters and buffers by name and, if opt is not NULL, the optimizer's state
 * ("optim.<param>.<state>") with its step counts and hyperparameters in the metadata.
 * Saving writes a temporary file and renames it. Loading checks every name, shape and dtype
 * before changing anything: a damaged or mismatched file gives a status and leaves model and
 * optimizer as they were. Loading restores the optimizer's hyperparameters and learning rate
 * (like PyTorch's load_state_dict); a file with optimizer state loads with opt == NULL too.
 * Statuses: KILN_ERR_IO (cannot read/write), KILN_ERR_CORRUPT (malformed or damaged),
 * KILN_ERR_SHAPE (names/shapes differ, wrong optimizer kind, no optimizer state),
 * KILN_ERR_DTYPE, KILN_ERR_UNSUPPORTED (more than 8 dims). */
KILN_API kiln_status kiln_checkpoint_save(const char *path, kiln_module *model, kiln_optimizer *opt);
KILN_API kiln_status kiln_checkpoint_load(const char *path, kiln_module *model, kiln_optimizer *opt);

/* ---- call sites ------------------------------------------------------------------------- */
/* The calls that record the caller's file:line, as in core.h's list. */
#define KILN_OPTIM_API(X) \
    X(kiln_optimizer *, sgd_new_params, (int n, const kiln_tensor *params, kiln_sgd_options o), (n, params, o)) \
    X(kiln_status, optimizer_step_tensors, (kiln_optimizer *opt, int n, const kiln_tensor *params, const kiln_tensor *grads), (opt, n, params, grads)) \
    X(kiln_optimizer *, adam_new_params, (int n, const kiln_tensor *params, kiln_adam_options o), (n, params, o)) \
    X(kiln_optimizer *, sgd_new_groups, (int n_groups, const kiln_param_group *groups, kiln_sgd_options o), (n_groups, groups, o)) \
    X(kiln_optimizer *, adam_new_groups, (int n_groups, const kiln_param_group *groups, kiln_adam_options o), (n_groups, groups, o)) \
    X(kiln_status, optimizer_set_group_lr, (kiln_optimizer *opt, int group, double lr), (opt, group, lr)) \
    X(kiln_status, optimizer_step, (kiln_optimizer *opt, kiln_grads *g), (opt, g)) \
    X(kiln_status, clip_grad_value, (kiln_optimizer *opt, kiln_grads *g, double clip_value), (opt, g, clip_value)) \
    X(kiln_status, clip_grad_norm, (kiln_optimizer *opt, kiln_grads *g, double max_norm, kiln_tensor *total_norm), (opt, g, max_norm, total_norm)) \
    X(kiln_status, checkpoint_save, (const char *path, kiln_module *model, kiln_optimizer *opt), (path, model, opt)) \
    X(kiln_status, checkpoint_load, (const char *path, kiln_module *model, kiln_optimizer *opt), (path, model, opt)) \
    X(kiln_optimizer *, rmsprop_new_groups, (int n_groups, const kiln_param_group *groups, kiln_rmsprop_options o), (n_groups, groups, o)) \
    X(kiln_optimizer *, adagrad_new_groups, (int n_groups, const kiln_param_group *groups, kiln_adagrad_options o), (n_groups, groups, o)) \
    X(kiln_optimizer *, rmsprop_new_params, (int n, const kiln_tensor *params, kiln_rmsprop_options o), (n, params, o)) \
    X(kiln_optimizer *, adagrad_new_params, (int n, const kiln_tensor *params, kiln_adagrad_options o), (n, params, o)) \
    X(int, module_param_groups, (kiln_module *m, kiln_param_filter first, void *ctx, kiln_tensor *handles, int cap, kiln_param_group *groups), (m, first, ctx, handles, cap, groups)) \
    X(kiln_optimizer *, sgd_new, (kiln_module *model, kiln_sgd_options o), (model, o)) \
    X(kiln_optimizer *, adam_new, (kiln_module *model, kiln_adam_options o), (model, o)) \
    X(kiln_optimizer *, rmsprop_new, (kiln_module *model, kiln_rmsprop_options o), (model, o)) \
    X(kiln_optimizer *, adagrad_new, (kiln_module *model, kiln_adagrad_options o), (model, o)) \
    KILN_IO_API(X) /* io.h's calls: their wrappers are defined with this list's (optim/call_site.c) */
KILN_OPTIM_API(KILN__AT_DECLARE)

#if !defined(KILN_BUILDING) && !defined(KILN_NO_CALL_SITE_MACROS)
#pragma GCC system_header /* see core.h: errors in these calls name the caller's line */
#define kiln_sgd_new_params(...) KILN__AT(sgd_new_params, __VA_ARGS__)
#define kiln_optimizer_step_tensors(...) KILN__AT(optimizer_step_tensors, __VA_ARGS__)
#define kiln_adam_new_params(...) KILN__AT(adam_new_params, __VA_ARGS__)
#define kiln_sgd_new_groups(...) KILN__AT(sgd_new_groups, __VA_ARGS__)
#define kiln_adam_new_groups(...) KILN__AT(adam_new_groups, __VA_ARGS__)
#define kiln_optimizer_set_group_lr(...) KILN__AT(optimizer_set_group_lr, __VA_ARGS__)
#define kiln_optimizer_step(...) KILN__AT(optimizer_step, __VA_ARGS__)
#define kiln_clip_grad_value(...) KILN__AT(clip_grad_value, __VA_ARGS__)
#define kiln_clip_grad_norm(...) KILN__AT(clip_grad_norm, __VA_ARGS__)
#define kiln_checkpoint_save(...) KILN__AT(checkpoint_save, __VA_ARGS__)
#define kiln_checkpoint_load(...) KILN__AT(checkpoint_load, __VA_ARGS__)
#define kiln_rmsprop_new_groups(...) KILN__AT(rmsprop_new_groups, __VA_ARGS__)
#define kiln_adagrad_new_groups(...) KILN__AT(adagrad_new_groups, __VA_ARGS__)
#define kiln_rmsprop_new_params(...) KILN__AT(rmsprop_new_params, __VA_ARGS__)
#define kiln_module_param_groups(...) KILN__AT(module_param_groups, __VA_ARGS__)
#define kiln_sgd_new(...) KILN__AT(sgd_new, __VA_ARGS__)
#define kiln_adam_new(...) KILN__AT(adam_new, __VA_ARGS__)
#define kiln_rmsprop_new(...) KILN__AT(rmsprop_new, __VA_ARGS__)
#define kiln_adagrad_new(...) KILN__AT(adagrad_new, __VA_ARGS__)
#define kiln_adagrad_new_params(...) KILN__AT(adagrad_new_params, __VA_ARGS__)
#endif

#ifdef __cplusplus
}
#endif
/* The free calls record their file:line too: a later use of the freed object names it. */
KILN__FREE_AT_DECLARE(kiln_optimizer, optimizer_free)
#if !defined(KILN_BUILDING) && !defined(KILN_NO_CALL_SITE_MACROS)
#define kiln_optimizer_free(...) KILN__AT(optimizer_free, __VA_ARGS__)
#endif

#endif
