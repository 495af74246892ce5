/* kiln autodiff: reverse-mode differentiation as a decorator over the op API. Ops on a
 * tensor that requires a gradient record a backward node holding only what its derivative
 * needs; ops on untracked tensors record nothing and cost nothing extra.
 *
 *   kiln_tensor w = kiln_randn(KILN_CPU, KILN_F32, KILN_SHAPE(3, 2), 0);
 *   kiln_require_grad(w);                                    // a leaf
 *   kiln_tensor x = kiln_ones(KILN_CPU, KILN_F32, KILN_SHAPE(4, 3));
 *   kiln_tensor loss = kiln_sum(kiln_relu(kiln_matmul(x, kiln_ref(w))));
 *   kiln_grads *g = NULL;
 *   if (kiln_backward(loss, &g) == KILN_OK) {               // consumes loss and its graph
 *       kiln_tensor dw = kiln_grad(g, w);                   // owned gradient, shape [3, 2]
 *       ...
 *       kiln_release(dw);
 *   }
 *   kiln_grads_free(g);
 */
#ifndef KILN_AUTODIFF_H
#define KILN_AUTODIFF_H

#include "core.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Marks t as a leaf whose gradient backward computes. Float dtypes only.
 * Does not consume t: marking changes the tensor itself, and the caller goes on using it. */
KILN_API kiln_status kiln_require_grad(kiln_tensor t);
KILN_API bool kiln_requires_grad(kiln_tensor t); /* a leaf, or computed from one */
/* kiln_require_grad as an op: consumes t and returns it (the same tensor, no copy) marked as a
 * leaf, so a parameter is made in one expression, as torch.zeros(..., requires_grad=True):
 *
 *   kiln_tensor w = kiln_leaf(kiln_zeros(KILN_CPU, KILN_F32, KILN_SHAPE(8, 1)));
 *
 * A tensor that is a leaf already comes back unchanged. A poisoned tensor (KILN_ERR_DTYPE for
 * a non-float t; KILN_ERR_INVALID_ARGUMENT for a tensor computed by tracked ops, which is no
 * leaf: kiln_detach it first) when it cannot be marked. */
KILN_API kiln_tensor kiln_leaf(kiln_tensor t);
/* The same data without its graph (consumes t; shares the storage). */
KILN_API kiln_tensor kiln_detach(kiln_tensor t);

typedef struct kiln_grads kiln_grads;
/* Consumes the scalar `loss` and its graph (freeing each node's saved state as soon as it is
 * used); *out receives the leaves' gradients. */
KILN_API kiln_status kiln_backward(kiln_tensor loss, kiln_grads **out);
/* kiln_backward that also reads the loss (as a double) for a training loop's log, without
 * a kiln_ref first: the backward pass is queued, then the loss is read (the one wait, for
 * the forward pass only). *value is NaN when it fails; the loss is consumed in every case.
 * A loss that failed while computed gives that error (naming the op and its file:line) and
 * the gradients, which then carry the same error (kiln_optimizer_step refuses them). */
KILN_API kiln_status kiln_backward_value(kiln_tensor loss, kiln_grads **out, double *value);
/* For a non-scalar root: seed is d(objective)/d(root), of root's shape (consumed). */
KILN_API kiln_status kiln_backward_seed(kiln_tensor root, kiln_tensor seed, kiln_grads **out);
/* Takes leaf t's gradient out of the container (an owned tensor of t's shape and dtype);
 * KILN_NONE when no path led from t to the loss.
 * Does not consume t: t is only the key (the leaf) to look up, and stays the caller's. */
KILN_API kiln_tensor kiln_grad(kiln_grads *grads, kiln_tensor t);
KILN_API size_t kiln_grads_count(const kiln_grads *grads);
KILN_API void kiln_grads_free(kiln_grads *grads); /* releases gradients not taken */

/* No-grad scopes (per thread, nestable): ops inside record nothing. */
KILN_API void kiln_no_grad_begin(void);
KILN_API void kiln_no_grad_end(void);
KILN_API bool kiln_grad_enabled(void);

/* ---- checkpointed regions (torch.utils.checkpoint) ---------------------------------------
 * A region's function runs untracked in the forward pass, so none of its intermediate results
 * are kept for backward; the backward pass runs it again, recording, to get them. Memory for
 * compute: a model split into k regions keeps about 1/k of its activations.
 *
 *   static kiln_tensor block(void *ctx, int n, kiln_tensor *in) {     // consumes in[0..n)
 *       kiln_module *layer = ctx;
 *       return kiln_gelu(kiln_module_forward(layer, in[0]));
 *   }
 *   ...
 *   kiln_tensor x = ...;                                // tracked or not
 *   x = kiln_checkpoint(block, layer, 1, &x);           // consumes x; ctx must outlive backward
 *   kiln_status st = kiln_backward(kiln_sum(x), &g);    // block runs again here
 *
 * fn takes owned handles to the inputs (untracked views in the forward pass, tracked in the
 * recomputation) and returns one tensor (owned). It must compute the same thing both times:
 * random calls inside (a generator's draws, dropout modules) replay the seeds the forward pass
 * drew, and a recomputed output of another shape is an error of the backward pass naming the
 * kiln_checkpoint line; an op that fails inside it is reported once, with its own line. The
 * parameters fn reads through ctx get their gradients as if fn ran tracked. Regions nest. With
 * grad mode off it is a plain call. Consumes inputs[0..n_inputs), n_inputs at most
 * KILN_CHECKPOINT_MAX_INPUTS. */
#define KILN_CHECKPOINT_MAX_INPUTS 16
typedef kiln_tensor (*kiln_checkpoint_fn)(void *ctx, int n_inputs, kiln_tensor *inputs);
KILN_API kiln_tensor kiln_checkpoint(kiln_checkpoint_fn fn, void *ctx, int n_inputs, kiln_tensor *inputs);

/* ---- the automatic policy ------------------------------------------------------------------
 * KILN_CHECKPOINT_AUTO recomputes what is cheap and keeps what is expensive, without annotating
 * regions: a tensor an op saves for backward that a chain of cheap ops (elementwise ops,
 * reductions such as sums, means and variances, views) made from tensors kept anyway (a matmul's
 * or convolution's output, which the next op saved; layer norm's normalised input) is not kept;
 * backward recomputes it just before it is needed, where fusion runs it with the derivative
 * around it. Matrix products, convolutions and attention are never recomputed. The choice is by
 * cost, from the op records: a chain is replayed when it costs at most 32 element operations per
 * element dropped (a reduction over 16 values is recomputed, one over 4096 is kept). A stack of
 * Linear + GELU keeps one activation per layer instead of two; a layer norm's affine output and a
 * normalisation composed of means and variances are not kept. Random values are never drawn
 * again: a dropout mask is saved, and the recomputation reads it. An error while recomputing
 * names the forward call that made the tensor. The policy applies to what the forward pass
 * records, so it is chosen per step, before the forward pass: per thread with
 * kiln_checkpoint_policy_set (returns the one it replaces), or for the whole program with
 * KILN_CHECKPOINT=auto in the environment. */
typedef enum { KILN_CHECKPOINT_NONE = 0, KILN_CHECKPOINT_AUTO = 1 } kiln_checkpoint_policy;
KILN_API kiln_checkpoint_policy kiln_checkpoint_policy_set(kiln_checkpoint_policy p);
KILN_API kiln_checkpoint_policy kiln_checkpoint_policy_get(void);

/* ---- user-defined differentiable functions (torch.autograd.Function) ----------------------
 * forward computes the output from the inputs (owned handles to untracked views; it runs with
 * grad mode off) and keeps what backward needs through kiln_function_save; backward gets the
 * output's gradient (owned) and writes one gradient per input (owned, the input's shape, or
 * KILN_NONE for none) into grads. Both are plain kiln code, so a function works on every device.
 *
 *   static kiln_tensor cube_fwd(kiln_function_ctx *f, void *ctx, int n, kiln_tensor *in) {
 *       kiln_function_save(f, kiln_ref(in[0]));                 // x, for backward
 *       return kiln_pow_scalar(in[0], 3.0);
 *   }
 *   static kiln_status cube_bwd(kiln_function_ctx *f, void *ctx, kiln_tensor g, int n, kiln_tensor *grads) {
 *       kiln_tensor x = kiln_function_saved(f, 0);
 *       grads[0] = kiln_mul(g, kiln_mul_scalar(kiln_mul(kiln_ref(x), x), 3.0));
 *       return KILN_OK;
 *   }
 *   kiln_tensor y = kiln_function(cube_fwd, cube_bwd, NULL, 1, &x); // consumes x
 *
 * Saved tensors are released once backward ran (or the graph is dropped). An error backward
 * returns, a gradient of the wrong shape or none where one is due fails the backward pass,
 * naming the kiln_function line. Consumes inputs[0..n_inputs), n_inputs at most
 * KILN_CHECKPOINT_MAX_INPUTS; ctx must outlive the backward pass. */
typedef struct kiln_function_ctx kiln_function_ctx;
typedef kiln_tensor (*kiln_function_forward_fn)(kiln_function_ctx *f, void *ctx, int n_inputs, kiln_tensor *inputs);
typedef kiln_status (*kiln_function_backward_fn)(kiln_function_ctx *f, void *ctx, kiln_tensor grad_output,
                                                 int n_inputs, kiln_tensor *grads);
KILN_API kiln_tensor kiln_function(kiln_function_forward_fn forward, kiln_function_backward_fn backward, void *ctx,
                                   int n_inputs, kiln_tensor *inputs);
/* Keeps t (consumed) for backward; returns its index for kiln_function_saved. Outside a
 * forward callback, or with grad mode off (nothing will be differentiated), it just releases t. */
KILN_API int kiln_function_save(kiln_function_ctx *f, kiln_tensor t);
/* A new handle to saved tensor i (the caller releases it); KILN_NONE and an error if none. */
KILN_API kiln_tensor kiln_function_saved(kiln_function_ctx *f, int i);

/* ---- gradient hooks ------------------------------------------------------------------------
 * hook(ctx, grad) sees the gradient of t (owned) once backward has computed all of it, and
 * returns the gradient to use instead (owned): grad itself to only inspect it, or a new tensor
 * of its shape to replace it. On a leaf, it runs on the leaf's total gradient before
 * kiln_grad hands it out; on a computed tensor, before its producer's backward runs. Does not
 * consume t. A hook returning an unusable tensor fails the backward pass naming the line
 * that registered it. kiln_module_register_grad_hook puts hook on every parameter of m. */
typedef kiln_tensor (*kiln_grad_hook_fn)(void *ctx, kiln_tensor grad);
KILN_API kiln_status kiln_tensor_register_hook(kiln_tensor t, kiln_grad_hook_fn hook, void *ctx);

/* ---- call sites ------------------------------------------------------------------------- */
/* The calls that record the caller's file:line, as in core.h's list. */
#define KILN_AUTODIFF_API(X) \
    X(kiln_status, require_grad, (kiln_tensor t), (t)) \
    X(kiln_tensor, leaf, (kiln_tensor t), (t)) \
    X(kiln_tensor, detach, (kiln_tensor t), (t)) \
    X(kiln_status, backward, (kiln_tensor loss, kiln_grads **out), (loss, out)) \
    X(kiln_status, backward_value, (kiln_tensor loss, kiln_grads **out, double *value), (loss, out, value)) \
    X(kiln_status, backward_seed, (kiln_tensor root, kiln_tensor seed, kiln_grads **out), (root, seed, out)) \
    X(kiln_tensor, grad, (kiln_grads *grads, kiln_tensor t), (grads, t)) \
    X(kiln_tensor, checkpoint, (kiln_checkpoint_fn fn, void *ctx, int n_inputs, kiln_tensor *inputs), (fn, ctx, n_inputs, inputs)) \
    X(kiln_tensor, function, (kiln_function_forward_fn forward, kiln_function_backward_fn backward, void *ctx, int n_inputs, kiln_tensor *inputs), (forward, backward, ctx, n_inputs, inputs)) \
    X(kiln_tensor, function_saved, (kiln_function_ctx *f, int i), (f, i)) \
    X(kiln_status, tensor_register_hook, (kiln_tensor t, kiln_grad_hook_fn hook, void *ctx), (t, hook, ctx))
KILN_AUTODIFF_API(KILN__AT_DECLARE)

#if !defined(KILN_BUILDING) && !defined(KILN_NO_CALL_SITE_MACROS)
#pragma GCC system_header /* see core.h: errors in these calls name the caller's line */
#define kiln_require_grad(...) KILN__AT(require_grad, __VA_ARGS__)
#define kiln_leaf(...) KILN__AT(leaf, __VA_ARGS__)
#define kiln_detach(...) KILN__AT(detach, __VA_ARGS__)
#define kiln_backward(...) KILN__AT(backward, __VA_ARGS__)
#define kiln_backward_value(...) KILN__AT(backward_value, __VA_ARGS__)
#define kiln_backward_seed(...) KILN__AT(backward_seed, __VA_ARGS__)
#define kiln_grad(...) KILN__AT(grad, __VA_ARGS__)
#define kiln_checkpoint(...) KILN__AT(checkpoint, __VA_ARGS__)
#define kiln_function(...) KILN__AT(function, __VA_ARGS__)
#define kiln_function_saved(...) KILN__AT(function_saved, __VA_ARGS__)
#define kiln_tensor_register_hook(...) KILN__AT(tensor_register_hook, __VA_ARGS__)
#endif

#ifdef __cplusplus
}
#endif
/* The free calls record their file:line too: a later use of the freed object names it. */
KILN__FREE_AT_DECLARE(kiln_grads, grads_free)
#if !defined(KILN_BUILDING) && !defined(KILN_NO_CALL_SITE_MACROS)
#define kiln_grads_free(...) KILN__AT(grads_free, __VA_ARGS__)
#endif

#endif
