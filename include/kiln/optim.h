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

#ifdef __cplusplus
extern "C" {
#endif

typedef struct kiln_optimizer kiln_optimizer;

typedef struct {
    double lr, momentum, dampening, weight_decay;
    bool nesterov;
} kiln_sgd_options;
KILN_API kiln_sgd_options kiln_sgd_defaults(void); /* lr 0.01, no momentum, no decay */

typedef struct {
    double lr, beta1, beta2, eps, weight_decay;
    bool decoupled_weight_decay; /* true: AdamW */
} kiln_adam_options;
KILN_API kiln_adam_options kiln_adam_defaults(void);  /* lr 1e-3, betas 0.9/0.999, eps 1e-8, decay 0 */
KILN_API kiln_adam_options kiln_adamw_defaults(void); /* the same with decoupled decay 0.01 */

/* The optimizer keeps a pointer to the module's parameters: the module must outlive it.
 * NULL (with kiln_last_error) on bad options. */
KILN_API kiln_optimizer *kiln_sgd_new(kiln_module *model, kiln_sgd_options o);
KILN_API kiln_optimizer *kiln_adam_new(kiln_module *model, kiln_adam_options o);
/* One update of every parameter that has a gradient in g (taken out of g). The step is a
 * read of the gradients: it waits until they are computed, and if any of them failed (a
 * target out of range, a poisoned input) it returns that error, naming the op that failed
 * first and its file:line, and changes no parameter and no optimizer state. Check its status
 * in a training loop; the updates themselves then run asynchronously, and an update that
 * cannot run leaves its parameter as it was (reported by the next sync). */
KILN_API kiln_status kiln_optimizer_step(kiln_optimizer *opt, kiln_grads *g);
KILN_API void kiln_optimizer_set_lr(kiln_optimizer *opt, double lr);
KILN_API double kiln_optimizer_lr(const kiln_optimizer *opt);
KILN_API int64_t kiln_optimizer_steps(const kiln_optimizer *opt);
KILN_API void kiln_optimizer_free(kiln_optimizer *opt);

/* Scales the gradients in g (in place, where they are) so their global L2 norm is at most
 * max_norm. Computed on the device (no sync); if total_norm is not NULL it receives a 0-d
 * tensor of the norm. */
KILN_API kiln_status kiln_clip_grad_norm(kiln_optimizer *opt, kiln_grads *g, double max_norm, kiln_tensor *total_norm);

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
/* Saves n tensors (not consumed; any layout, waited for) under their names (unique, 1 to 127
 * bytes) to a safetensors file, as a checkpoint is saved (a temporary file renamed over path):
 * e.g. the embeddings of a corpus for numpy or PyTorch's safetensors.load_file. Statuses:
 * KILN_ERR_NULL, KILN_ERR_INVALID_ARGUMENT (a bad, empty or repeated name), a tensor's own
 * error, KILN_ERR_IO. */
KILN_API kiln_status kiln_tensors_save(const char *path, int n, const char *const *names, const kiln_tensor *tensors);

/* ---- call sites ------------------------------------------------------------------------- */
/* The calls that record the caller's file:line, as in core.h's list. */
#define KILN_OPTIM_API(X) \
    X(kiln_status, optimizer_step, (kiln_optimizer *opt, kiln_grads *g), (opt, g)) \
    X(kiln_status, clip_grad_norm, (kiln_optimizer *opt, kiln_grads *g, double max_norm, kiln_tensor *total_norm), (opt, g, max_norm, total_norm)) \
    X(kiln_status, checkpoint_save, (const char *path, kiln_module *model, kiln_optimizer *opt), (path, model, opt)) \
    X(kiln_status, checkpoint_load, (const char *path, kiln_module *model, kiln_optimizer *opt), (path, model, opt)) \
    X(kiln_status, tensors_save, (const char *path, int n, const char *const *names, const kiln_tensor *tensors), (path, n, names, tensors))
KILN_OPTIM_API(KILN__AT_DECLARE)

#if !defined(KILN_BUILDING) && !defined(KILN_NO_CALL_SITE_MACROS)
#pragma GCC system_header /* see core.h: errors in these calls name the caller's line */
#define kiln_optimizer_step(...) KILN__AT(optimizer_step, __VA_ARGS__)
#define kiln_clip_grad_norm(...) KILN__AT(clip_grad_norm, __VA_ARGS__)
#define kiln_checkpoint_save(...) KILN__AT(checkpoint_save, __VA_ARGS__)
#define kiln_checkpoint_load(...) KILN__AT(checkpoint_load, __VA_ARGS__)
#define kiln_tensors_save(...) KILN__AT(tensors_save, __VA_ARGS__)
#endif

#ifdef __cplusplus
}
#endif
#endif
