/* Op-layer functions for optim/: the fused parameter updates, clipping's sums of squares and
 * the host copies of checkpoints. optim/ decides what to compute; these encode it into op
 * records (flags and doubles as the kernels read them, ir/optim_params.h) and submit them.
 *
 *   kiln__sgd_update u = {.lr = 0.1, .first = true};
 *   if (kiln__t_has_kernel(param->device, KILN__OP_SGD_UPDATE))
 *       kiln__t_sgd_update(c, param, NULL, grad, &u);
 *
 * The updates write the parameter (and its state) in place and keep them on error: a failed
 * update never poisons a parameter. A tentative update (the flag in each options struct) writes
 * fresh copies that the caller commits or discards: on error they are poisoned like any op's
 * outputs, and the error is left for the caller to find there (not reported to the stream a
 * second time). They borrow every tensor. */
#ifndef KILN_OPS_OPTIM_OPS_IMPL_H
#define KILN_OPS_OPTIM_OPS_IMPL_H

#include "ir/optim_params.h" /* the update structs and their encoding */
#include "ops/ops-impl.h"

/* Whether dev has a kernel for code, so a later submit of it cannot fail. */
bool kiln__t_has_kernel(kiln_device dev, kiln__opcode code);
/* Any row of the optimizer-update table (ir/optim_table.h): outs and ins in the row's order, u
 * its parameter struct (kiln__<name>). Checks the counts against the row, and that every tensor
 * has the parameter's device and shape (each fails naming the row), then queues the op. */
bool kiln__t_optim_update(kiln__opctx *c, kiln__opcode code, int n_out, kiln__tensor *const *outs, int n_in,
                          const kiln__tensor *const *ins, const void *u);
/* momentum: the buffer, or NULL when momentum is 0. bf16_copy: NULL, or a bf16 tensor of an f32
 * param's shape on the CPU that the update rewrites as the updated param rounded to bf16
 * (KILN__OPTIM_FLAG_BF16_COPY; SGD only: Adam's three outputs fill an op record's).
 * False + error if the op cannot be queued. */
bool kiln__t_sgd_update(kiln__opctx *c, kiln__tensor *param, kiln__tensor *momentum, const kiln__tensor *grad,
                        const kiln__sgd_update *u, kiln__tensor *bf16_copy);
bool kiln__t_adam_update(kiln__opctx *c, kiln__tensor *param, kiln__tensor *exp_avg, kiln__tensor *exp_avg_sq,
                         const kiln__tensor *grad, const kiln__adam_update *u);
/* grad_avg = lerp(grad_avg, grad + wd * param, 1 - alpha) (grad_avg read as 0 when first). */
bool kiln__t_rmsprop_grad_avg(kiln__opctx *c, kiln__tensor *grad_avg, const kiln__tensor *param,
                              const kiln__tensor *grad, const kiln__rmsprop_grad_avg *u);
/* momentum: the buffer or NULL; grad_avg: the centered average (already updated) or NULL. */
bool kiln__t_rmsprop_update(kiln__opctx *c, kiln__tensor *param, kiln__tensor *square_avg, kiln__tensor *momentum,
                            const kiln__tensor *grad_avg, const kiln__tensor *grad, const kiln__rmsprop_update *u);
bool kiln__t_adagrad_update(kiln__opctx *c, kiln__tensor *param, kiln__tensor *sum, const kiln__tensor *grad,
                            const kiln__adagrad_update *u);
/* Writes sum(x * x) into element k of the f64 vector sums. */
bool kiln__t_sum_squares_into(kiln__opctx *c, kiln__tensor *sums, int64_t k, const kiln__tensor *x);
/* Waits for t's data and copies it densely into nbytes of host memory (t is borrowed). */
bool kiln__t_copy_to_host(kiln__opctx *c, kiln__tensor *t, void *dst, size_t nbytes);
/* Copies nbytes of host memory into a fresh dense tensor that no queued op touches yet. */
bool kiln__t_copy_from_host(kiln__opctx *c, kiln__tensor *dst, const void *src, size_t nbytes);

#endif
