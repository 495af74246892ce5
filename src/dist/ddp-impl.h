/* The data-parallel wrapper's internals, shared by its files: ddp.c (buckets, backward hooks,
 * no_sync accumulation), ddp_step.c (each step's commit vote and buffer broadcast) and
 * ddp_check.c (the model's structure compared across ranks). */
#ifndef KILN_DDP_IMPL_H
#define KILN_DDP_IMPL_H

#include "autodiff/autodiff-impl.h"
#include "dist/dist-impl.h"

typedef struct {
    kiln__ad_leaf *leaf;
    kiln__tensor *param; /* borrowed from the module */
    int bucket;
    bool ready;          /* its gradient is final in this walk, or the walk does not reach it */
    kiln__tensor *acc;   /* no_sync: this rank's gradients summed so far (owned) */
} ddp_param;

typedef struct {
    int first, n; /* params[first .. first + n) */
    int ready;    /* params ready in this walk */
} ddp_bucket;

#define DDP_MAX_BUFFER_DTYPES 4

/* One data-parallel step: the buckets' all-reduces, the buffers' broadcast, then one vote of
 * every rank before anything is committed. Exactly one vote per step on every rank, whoever
 * gives it: kiln_optimizer_step (commit if this rank's step succeeded), a failed backward, the
 * gradients freed without a step, or the next step's backward (the step was given up). */
typedef struct ddp_step {
    struct kiln_ddp *d; /* NULL once the wrapper is freed */
    int64_t number;     /* the wrapper's count of steps, this one's: its collectives' tag */
    int refs;           /* the wrapper's list of steps not voted on, the gradients container */
    bool voted;
    kiln__tensor *buffers[DDP_MAX_BUFFER_DTYPES]; /* rank 0's buffers, one flat tensor per dtype */
    struct ddp_step *next;                        /* in the wrapper's list */
} ddp_step;

struct kiln_ddp {
    kiln_module *model;
    ddp_param *params; /* trainable, in bucket order: last registered first */
    int n_params;
    ddp_bucket *buckets;
    int n_buckets;
    kiln_tensor **buffers; /* the module's buffer slots, in registration order */
    int n_buffers;
    kiln_dtype buffer_dtypes[DDP_MAX_BUFFER_DTYPES];
    int n_buffer_dtypes;
    int64_t steps; /* begun so far, the same on every rank: each step's collectives carry it */
    /* the walk in progress */
    bool in_step;    /* it reached one of our parameters: a data-parallel step */
    int next_bucket; /* buckets are all-reduced in order: the next one to queue */
    ddp_step *step;
    ddp_step *unvoted; /* oldest first */
    /* no_sync */
    bool no_sync;
    bool accumulated;         /* some gradient is in params[].acc */
    kiln__error *accum_error; /* a backward inside no_sync failed: the next synced step fails */
};

/* ddp_step.c */
ddp_step *kiln__ddp_step_begin(kiln__opctx *c, struct kiln_ddp *d);
/* Queues the broadcast of the buffers from rank 0 into the step's flat tensors (failed: this
 * rank only takes part). */
void kiln__ddp_step_broadcast_buffers(struct kiln_ddp *d, ddp_step *s, bool failed);
/* This rank's vote (ok false: it will not commit); c's error when the vote says some rank
 * will not. Each step is voted on once. */
void kiln__ddp_step_vote(ddp_step *s, kiln__opctx *c, bool ok);
/* Votes no on every step of d not voted on yet (a new step starts, or d is freed). */
void kiln__ddp_steps_give_up(struct kiln_ddp *d);
void kiln__ddp_step_unref(ddp_step *s);
extern const kiln__grads_sync kiln__ddp_step_sync;

/* ddp_check.c: c's error, on every rank, when the ranks' models differ (count, then the first
 * parameter or buffer whose name, kind, dtype or shape differs). */
void kiln__ddp_check_structure(kiln__opctx *c, const kiln_param *ps, int n);

#endif
