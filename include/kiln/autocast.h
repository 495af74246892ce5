/* kiln autocast: mixed precision as a per-thread scope, as torch.autocast("cpu", bfloat16).
 *
 * Inside the scope the ops on one list (kiln_autocast_op_at) cast their float inputs before
 * they run: the products (matmul, linear, bmm, addmm, conv, attention) to the scope's dtype,
 * whose CPU kernels multiply bf16 into f32 sums; the ops that need f32's range (losses,
 * transposed convolution) to f32. Other ops run in the dtype their inputs have (a bf16
 * product's output flows on as bf16; elementwise ops and reductions compute in f32 inside).
 * One exception: a conv2d whose f32 input has fewer than 8 channels per group (a first conv
 * over images) stays f32, which kiln computes faster than bf16 for such short products.
 * The casts are ordinary tracked kiln_cast ops, so gradients flow back through them to f32
 * parameters in f32: an optimizer keeps updating f32 master weights.
 *
 *   kiln_autocast_begin(KILN_BF16);
 *   kiln_tensor logits = kiln_module_forward(model, kiln_ref(images));   // bf16 products
 *   kiln_tensor loss = kiln_cross_entropy(logits, kiln_ref(labels), ce); // f32
 *   kiln_autocast_end();
 *   kiln_backward(loss, &grads);                                         // f32 gradients
 *
 * Scopes nest; kiln_autocast_begin(KILN_F32) turns autocast off inside an enclosing scope.
 * f16 works the same way but needs loss scaling (kiln_grad_scaler, amp.h) to keep small
 * gradients from flushing to 0; it computes no faster than f32 on CPUs (no f16 products). */
#ifndef KILN_AUTOCAST_H
#define KILN_AUTOCAST_H

#include "core.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Opens a scope on this thread: dtype KILN_BF16 or KILN_F16 (autocast on), or KILN_F32 (off
 * inside). KILN_ERR_DTYPE for another dtype, KILN_ERR_INVALID_ARGUMENT past 32 nested scopes. */
KILN_API kiln_status kiln_autocast_begin(kiln_dtype dtype);
/* Closes the innermost scope: KILN_ERR_INVALID_ARGUMENT when none is open. */
KILN_API kiln_status kiln_autocast_end(void);
/* The lower-precision dtype ops on the list run in now, or KILN_F32 when autocast is off. */
KILN_API kiln_dtype kiln_autocast_dtype(void);

/* What autocast does to an op's float inputs. */
typedef enum {
    KILN_AUTOCAST_NONE = 0, /* unlisted: runs in its inputs' dtype */
    KILN_AUTOCAST_LOWER,    /* cast to the scope's dtype (bf16 / f16) */
    KILN_AUTOCAST_F32       /* cast to f32 */
} kiln_autocast_rule;

/* The list, entry i (0, 1, ...): the op's public name ("kiln_linear") and its rule; NULL past
 * the end. */
KILN_API const char *kiln_autocast_op_at(int i, kiln_autocast_rule *rule);
/* The rule for an op by its public name (KILN_AUTOCAST_NONE when unlisted or NULL). */
KILN_API kiln_autocast_rule kiln_autocast_rule_of(const char *op_name);

/* ---- call sites ------------------------------------------------------------------------- */
#define KILN_AUTOCAST_API(X, X0)                                  \
    X(kiln_status, autocast_begin, (kiln_dtype dtype), (dtype)) \
    X0(kiln_status, autocast_end)
KILN_AUTOCAST_API(KILN__AT_DECLARE, KILN__AT_DECLARE0)

#if !defined(KILN_BUILDING) && !defined(KILN_NO_CALL_SITE_MACROS)
#pragma GCC system_header /* see core.h: errors in these calls name the caller's line */
#define kiln_autocast_begin(...) KILN__AT(autocast_begin, __VA_ARGS__)
#define kiln_autocast_end() KILN__AT0(autocast_end)
#endif

#ifdef __cplusplus
}
#endif

#endif
