/* kiln train: helpers for training loops. Metrics accumulate on the device (no sync per
 * batch) and are read through one transaction per logging step.
 *
 *   kiln_metrics *m = kiln_metrics_new();
 *   kiln_tensor x, y;
 *   for (int64_t step = 1; kiln_loader_next(loader, &x, &y) == KILN_OK; step++) {
 *       kiln_tensor logits = kiln_module_forward(model, x);
 *       kiln_tensor loss = kiln_cross_entropy(kiln_ref(logits), kiln_ref(y), ce);
 *       kiln_metrics_add(m, kiln_ref(loss), logits, y);    // consumes its arguments
 *       ...                                                 // backward(loss), optimizer step
 *       if (step % 50 == 0) {
 *           double mean_loss, accuracy;
 *           kiln_metrics_read(m, &mean_loss, &accuracy, NULL);  // one wait, then reset
 *       }
 *   }
 *   kiln_metrics_free(m);
 */
#ifndef KILN_TRAIN_H
#define KILN_TRAIN_H

#include "core.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct kiln_metrics kiln_metrics;
KILN_API kiln_metrics *kiln_metrics_new(void); /* NULL on out of memory */
/* Adds one batch: loss is the batch's mean loss (0-d); logits [N, C] and targets [N] class
 * indices count correct predictions. All three are consumed; logits may be KILN_NONE (loss
 * only). Nothing waits. */
KILN_API kiln_status kiln_metrics_add(kiln_metrics *m, kiln_tensor loss, kiln_tensor logits, kiln_tensor targets);
/* One transaction for everything added since the last read: the sample-weighted mean loss,
 * the accuracy (NaN if no logits were given) and the sample count (any pointer may be NULL).
 * Resets the accumulators. */
KILN_API kiln_status kiln_metrics_read(kiln_metrics *m, double *mean_loss, double *accuracy, int64_t *count);
KILN_API void kiln_metrics_free(kiln_metrics *m);
/* What m accumulated since the last read, handed to a TensorBoard writer (kiln/summary.h) as the
 * scalars "<prefix>/loss" (sample-weighted mean) and "<prefix>/accuracy" (if logits were given)
 * at step, without waiting: the writer's thread reads them. Resets the accumulators like a read.
 * Under data parallelism the sums are first all-reduced (every rank calls it; rank 0 writes).
 * Nothing added since the last read: nothing logged. prefix NULL: "loss" and "accuracy". */
typedef struct kiln_summary_writer kiln_summary_writer;
KILN_API kiln_status kiln_metrics_log(kiln_metrics *m, kiln_summary_writer *w, const char *prefix, int64_t step);

/* ---- one training step ------------------------------------------------------------------ */
typedef struct kiln_optimizer kiln_optimizer; /* kiln/optim.h */
/* Backward from loss (consumed, with its graph), the optimizer's step on the gradients, then
 * the gradients freed: kiln_backward_value + kiln_optimizer_step + kiln_grads_free. *value
 * (may be NULL) receives the loss, NaN when it could not be computed. On failure nothing is
 * updated and the status and message are those of the call that failed (a loss that failed
 * while computed names its op and file:line).
 *
 *   double l;
 *   if (kiln_train_step(opt, kiln_mse_loss(kiln_module_forward(model, x), y), &l) != KILN_OK)
 *       fprintf(stderr, "%s\n", kiln_last_error());
 */
KILN_API kiln_status kiln_train_step(kiln_optimizer *opt, kiln_tensor loss, double *value);
/* kiln_train_step with the gradients' global L2 norm clipped to max_norm (finite, > 0) before
 * the update: torch.nn.utils.clip_grad_norm_ between backward and step, as kiln_clip_grad_norm.
 *
 *   kiln_train_step_clip(opt, kiln_mse_loss(kiln_module_forward(model, x), y), 1.0, &l);
 */
KILN_API kiln_status kiln_train_step_clip(kiln_optimizer *opt, kiln_tensor loss, double max_norm, double *value);

/* ---- call sites ------------------------------------------------------------------------- */
/* The calls that record the caller's file:line, as in core.h's list. */
#define KILN_TRAIN_API(X) \
    X(kiln_status, metrics_add, (kiln_metrics *m, kiln_tensor loss, kiln_tensor logits, kiln_tensor targets), (m, loss, logits, targets)) \
    X(kiln_status, metrics_read, (kiln_metrics *m, double *mean_loss, double *accuracy, int64_t *count), (m, mean_loss, accuracy, count)) \
    X(kiln_status, metrics_log, (kiln_metrics *m, kiln_summary_writer *w, const char *prefix, int64_t step), (m, w, prefix, step)) \
    X(kiln_status, train_step, (kiln_optimizer *opt, kiln_tensor loss, double *value), (opt, loss, value)) \
    X(kiln_status, train_step_clip, (kiln_optimizer *opt, kiln_tensor loss, double max_norm, double *value), (opt, loss, max_norm, value))
KILN_TRAIN_API(KILN__AT_DECLARE)

#if !defined(KILN_BUILDING) && !defined(KILN_NO_CALL_SITE_MACROS)
#pragma GCC system_header /* see core.h: errors in these calls name the caller's line */
#define kiln_metrics_add(...) KILN__AT(metrics_add, __VA_ARGS__)
#define kiln_metrics_read(...) KILN__AT(metrics_read, __VA_ARGS__)
#define kiln_metrics_log(...) KILN__AT(metrics_log, __VA_ARGS__)
#define kiln_train_step(...) KILN__AT(train_step, __VA_ARGS__)
#define kiln_train_step_clip(...) KILN__AT(train_step_clip, __VA_ARGS__)
#endif

#ifdef __cplusplus
}
#endif
/* The free calls record their file:line too: a later use of the freed object names it. */
KILN__FREE_AT_DECLARE(kiln_metrics, metrics_free)
#if !defined(KILN_BUILDING) && !defined(KILN_NO_CALL_SITE_MACROS)
#define kiln_metrics_free(...) KILN__AT(metrics_free, __VA_ARGS__)
#endif

#endif
