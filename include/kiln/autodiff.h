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

/* ---- call sites ------------------------------------------------------------------------- */
/* The calls that record the caller's file:line, as in core.h's list. */
#define KILN_AUTODIFF_API(X) \
    X(kiln_status, require_grad, (kiln_tensor t), (t)) \
    X(kiln_tensor, leaf, (kiln_tensor t), (t)) \
    X(kiln_tensor, detach, (kiln_tensor t), (t)) \
    X(kiln_status, backward, (kiln_tensor loss, kiln_grads **out), (loss, out)) \
    X(kiln_status, backward_value, (kiln_tensor loss, kiln_grads **out, double *value), (loss, out, value)) \
    X(kiln_status, backward_seed, (kiln_tensor root, kiln_tensor seed, kiln_grads **out), (root, seed, out)) \
    X(kiln_tensor, grad, (kiln_grads *grads, kiln_tensor t), (grads, t))
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
