/* kiln dist: data-parallel training over MPI. Collectives are ops like any other: they return
 * at once, run on the engine's communication thread (so they overlap with compute), wait for
 * what they read, poison what they write when they fail, and report errors naming the op, the
 * rank and your file:line. A program started without mpirun is a world of one: every
 * collective is a copy. Run the same program on every rank; collectives must be issued in the
 * same order everywhere (from one thread).
 *
 *   kiln_dist_init();                                  // rank and world from mpirun
 *   kiln_ddp *ddp = kiln_ddp_new(model, kiln_ddp_defaults()); // rank 0's parameters everywhere
 *   // ... forward, kiln_backward (each bucket's all-reduce starts as its gradients are
 *   //     ready), kiln_optimizer_step: the gradients are the mean over the ranks
 *   kiln_tensor total = kiln_dist_all_reduce(kiln_ones(KILN_CPU, KILN_F32, KILN_SHAPE(3)), KILN_DIST_SUM);
 *   kiln_release(total);                               // [world, world, world]
 *   kiln_ddp_free(ddp);
 *   kiln_dist_finalize();
 *
 * A peer that fails before a collective (its input was poisoned) makes that collective fail on
 * every rank with a message naming the failed rank; every collective also checks that the
 * ranks are at the same collective (a count of them), and fails on every rank rather than pair
 * different ones. A peer that stops (crashed, hung) leaves the
 * others blocked: after the timeout (kiln_dist_set_timeout, KILN_DIST_TIMEOUT seconds, default
 * 300) a watchdog prints what was waiting (op, rank, file:line) and aborts the whole job with a
 * non-zero exit status, never hangs. */
#ifndef KILN_DIST_H
#define KILN_DIST_H

#include "optim.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum { KILN_DIST_SUM = 0, KILN_DIST_MEAN = 1 } kiln_dist_reduce_op;

/* Reads rank, world size and local rank from the MPI environment (MPI_Init_thread under
 * mpirun; nothing without it: a world of one). Idempotent; every dist call does it on first
 * use. KILN_ERR_UNSUPPORTED: started under mpirun but kiln was built without MPI. */
KILN_API kiln_status kiln_dist_init(void);
/* Waits for queued work, then MPI_Finalize. Call it at the end of a program that succeeded. */
KILN_API kiln_status kiln_dist_finalize(void);
KILN_API int kiln_dist_rank(void);       /* 0 in a world of one */
KILN_API int kiln_dist_world_size(void); /* 1 in a world of one */
KILN_API int kiln_dist_local_rank(void); /* rank among the processes of this machine */
KILN_API bool kiln_dist_available(void); /* kiln was built with MPI */
/* Seconds a collective may wait for its peers before the watchdog aborts the job (> 0). */
KILN_API void kiln_dist_set_timeout(double seconds);

/* Collectives: consume t (dense or not, any dtype) and return a new tensor, written in place
 * when t has one owner. all_reduce: the element-wise sum or mean over the ranks (mean: floating
 * dtypes only; bool sums as logical or; f16/bf16 add in f32). broadcast: root's tensor on every
 * rank (every rank passes a tensor of the same shape and dtype). all_gather: [world, t's shape],
 * rank r's tensor at index r. */
KILN_API kiln_tensor kiln_dist_all_reduce(kiln_tensor t, kiln_dist_reduce_op op);
KILN_API kiln_tensor kiln_dist_broadcast(kiln_tensor t, int root);
KILN_API kiln_tensor kiln_dist_all_gather(kiln_tensor t);
/* Queues a barrier after everything queued so far and waits for it (a read). */
KILN_API kiln_status kiln_dist_barrier(void);

/* ---- data parallelism ---------------------------------------------------------------------- */
typedef struct kiln_ddp kiln_ddp;
typedef struct {
    int64_t bucket_bytes; /* gradients per all-reduce; default (and when left 0) 25 MB */
} kiln_ddp_options;
KILN_API kiln_ddp_options kiln_ddp_defaults(void); /* KILN_DDP_BUCKET_KB overrides the size */
/* Checks that every rank passes the same model (the count, names, kinds, dtypes and shapes of
 * its parameters and buffers, in order; on a difference every rank fails at once naming the
 * first, e.g. "entry 2: rank 0 has '2.weight' (parameter f32 [3, 5]), rank 1 has '2.weight'
 * (parameter f32 [4, 5])"), broadcasts rank 0's parameters and buffers, groups the trainable
 * parameters into buckets (in reverse order, as backward produces their gradients) and hooks
 * backward. Every backward that reaches the model's parameters is a step, and in every step
 * every rank all-reduces (mean) the same buckets in the same order: a bucket is queued once its
 * gradients are final and the buckets before it are queued (so the all-reduces overlap
 * backward); a parameter this rank's graph did not reach (a branch taken on another rank) adds
 * zeros and still gets the averaged gradient, so every rank applies the same update (one no
 * rank reached gets zeros: PyTorch would leave it without a gradient). The gradients in the
 * kiln_grads become views of the buckets' results, so reading one waits for its own bucket
 * only. kiln_optimizer_step on those gradients starts each parameter's update as soon as its
 * own bucket is all-reduced (into copies of the parameter and its state) and commits them all
 * once every bucket succeeded and every rank voted that its updates did (one more one-value
 * all-reduce, after the updates); the module's buffers (batch-norm running statistics) are
 * then set to rank 0's, as PyTorch's DDP broadcasts them at each step. A step that fails on one
 * rank fails on every rank, naming it, and changes nothing anywhere (parameters, optimizer
 * state, buffers): a poisoned loss or a failed kiln_backward on that rank (whether the program
 * then skips the batch, calls kiln_optimizer_step anyway or returns), a failed update, or
 * gradients freed without a step. A later backward of the model gives up a step whose
 * gradients were neither stepped nor freed. So the ranks' collectives never pair different
 * steps, as long as every rank calls kiln_backward the same number of times. One wrapper per
 * backward; the model must outlive the wrapper. NULL on error. */
KILN_API kiln_ddp *kiln_ddp_new(kiln_module *model, kiln_ddp_options o);
/* Gradient accumulation without an all-reduce per micro-batch (PyTorch's no_sync): between
 * begin and end, backward communicates nothing and the wrapper adds this rank's gradients up
 * (the containers still hold each micro-batch's own, local gradients: free them, do not step);
 * the first backward after end adds the sum into its buckets, so its gradients are the mean over
 * the ranks of each rank's sum over its micro-batches, as one large batch would give (scale
 * each micro-batch's loss by 1 / micro-batches for the mean). A backward that failed inside
 * makes that step fail on every rank; a failed step drops what was accumulated.
 *
 *   kiln_ddp_no_sync_begin(ddp);
 *   for (int m = 0; m < M - 1; m++) { kiln_backward(loss_of(m), &g); kiln_grads_free(g); }
 *   kiln_ddp_no_sync_end(ddp);
 *   kiln_backward(loss_of(M - 1), &g);  // one all-reduce per bucket, of all M micro-batches
 *   kiln_optimizer_step(opt, g);
 *
 * KILN_ERR_INVALID_ARGUMENT: begin inside begin, end without begin. */
KILN_API kiln_status kiln_ddp_no_sync_begin(kiln_ddp *d);
KILN_API kiln_status kiln_ddp_no_sync_end(kiln_ddp *d);
KILN_API int kiln_ddp_num_buckets(const kiln_ddp *d);
KILN_API void kiln_ddp_free(kiln_ddp *d);

/* Checkpoints (kiln_checkpoint_save/load's format) under data parallelism: save writes on
 * rank 0 only (atomically: a temporary file renamed) and every rank returns rank 0's status;
 * load reads the file on rank 0 and broadcasts it, so every rank ends with rank 0's parameters
 * and optimizer state without a shared file system. Call them on every rank. In a world of one
 * they are kiln_checkpoint_save/load. */
KILN_API kiln_status kiln_dist_checkpoint_save(const char *path, kiln_module *model, kiln_optimizer *opt);
KILN_API kiln_status kiln_dist_checkpoint_load(const char *path, kiln_module *model, kiln_optimizer *opt);

/* ---- call sites ------------------------------------------------------------------------- */
/* The calls that record the caller's file:line, as in core.h's list. */
#define KILN_DIST_API(X) \
    X(kiln_tensor, dist_all_reduce, (kiln_tensor t, kiln_dist_reduce_op op), (t, op)) \
    X(kiln_tensor, dist_broadcast, (kiln_tensor t, int root), (t, root)) \
    X(kiln_tensor, dist_all_gather, (kiln_tensor t), (t)) \
    X(kiln_ddp *, ddp_new, (kiln_module *model, kiln_ddp_options o), (model, o)) \
    X(kiln_status, ddp_no_sync_begin, (kiln_ddp *d), (d)) \
    X(kiln_status, ddp_no_sync_end, (kiln_ddp *d), (d)) \
    X(kiln_status, dist_checkpoint_save, (const char *path, kiln_module *model, kiln_optimizer *opt), (path, model, opt)) \
    X(kiln_status, dist_checkpoint_load, (const char *path, kiln_module *model, kiln_optimizer *opt), (path, model, opt))
KILN_DIST_API(KILN__AT_DECLARE)

#if !defined(KILN_BUILDING) && !defined(KILN_NO_CALL_SITE_MACROS)
#pragma GCC system_header /* see core.h: errors in these calls name the caller's line */
#define kiln_dist_all_reduce(...) KILN__AT(dist_all_reduce, __VA_ARGS__)
#define kiln_dist_broadcast(...) KILN__AT(dist_broadcast, __VA_ARGS__)
#define kiln_dist_all_gather(...) KILN__AT(dist_all_gather, __VA_ARGS__)
#define kiln_ddp_new(...) KILN__AT(ddp_new, __VA_ARGS__)
#define kiln_ddp_no_sync_begin(...) KILN__AT(ddp_no_sync_begin, __VA_ARGS__)
#define kiln_ddp_no_sync_end(...) KILN__AT(ddp_no_sync_end, __VA_ARGS__)
#define kiln_dist_checkpoint_save(...) KILN__AT(dist_checkpoint_save, __VA_ARGS__)
#define kiln_dist_checkpoint_load(...) KILN__AT(dist_checkpoint_load, __VA_ARGS__)
#endif
/* The free call records its file:line too: a later use of the freed wrapper names it. */
KILN__FREE_AT_DECLARE(kiln_ddp, ddp_free)
#if !defined(KILN_BUILDING) && !defined(KILN_NO_CALL_SITE_MACROS)
#define kiln_ddp_free(...) KILN__AT(ddp_free, __VA_ARGS__)
#endif

#ifdef __cplusplus
}
#endif
#endif
