/* A data-parallel step's end (see ddp-impl.h's ddp_step): the buffers broadcast from rank 0
 * (batch-norm statistics, as PyTorch's DDP does at each step) into flat tensors that are copied
 * into the module only when the step commits, and the vote of every rank before it commits.
 * Each step has exactly one vote on every rank, so the collectives of the ranks stay in step
 * whatever a rank did after its backward: kiln_optimizer_step votes yes when its updates
 * succeeded (and fails when any rank voted no, naming the lowest); a failed backward, gradients
 * freed without a step, or a later backward vote no. A vote is a sized all-reduce of one value,
 * which a rank voting no joins without data (dist.c's failure agreement). */
#include <stdlib.h>

#include "dist/ddp-impl.h"

ddp_step *kiln__ddp_step_begin(kiln__opctx *c, struct kiln_ddp *d) {
    ddp_step *s = calloc(1, sizeof *s);
    if (!s) {
        kiln__fail(c, KILN_ERR_OUT_OF_MEMORY, "rank %d: cannot allocate a data-parallel step", kiln__dist_rank());
        return NULL;
    }
    s->d = d;
    s->number = d->steps;
    s->refs = 2; /* the wrapper's list of unvoted steps, and the walk until it ends */
    ddp_step **tail = &d->unvoted;
    while (*tail) tail = &(*tail)->next;
    *tail = s;
    return s;
}

void kiln__ddp_step_unref(ddp_step *s) {
    if (!s || --s->refs > 0) return;
    for (int k = 0; k < DDP_MAX_BUFFER_DTYPES; k++) kiln__tensor_release(s->buffers[k]);
    free(s);
}

void kiln__ddp_step_broadcast_buffers(struct kiln_ddp *d, ddp_step *s, bool failed) {
    if (kiln__dist_size() < 2) return;
    KILN__OP_BEGIN("kiln_backward (kiln_ddp buffer broadcast)");
    for (int k = 0; k < d->n_buffer_dtypes; k++) {
        kiln__tensor *flat = NULL;
        if (!failed) {
            kiln__tensor **parts = calloc((size_t)d->n_buffers, sizeof *parts);
            int n = 0;
            if (!parts) kiln__fail(&c, KILN_ERR_OUT_OF_MEMORY, "cannot gather the buffers");
            for (int i = 0; parts && i < d->n_buffers && !c.err; i++) {
                kiln__error *err = NULL;
                kiln__tensor *t = kiln__handle_peek(*d->buffers[i], c.name, &err);
                if (!t) {
                    c.err = err;
                    break;
                }
                if (t->dtype != d->buffer_dtypes[k]) continue;
                kiln__tensor_retain(t);
                int64_t numel = kiln__tensor_numel(t);
                parts[n++] = kiln__t_reshape(&c, kiln__t_contiguous(&c, t), 1, &numel);
            }
            if (parts && !c.err) flat = kiln__t_cat(&c, parts, n, 0);
            else
                for (int i = 0; i < n; i++) kiln__tensor_release(parts[i]);
            free(parts);
        }
        /* (NULL: this rank failed, and its peers learn of it instead of waiting) */
        kiln__tensor *out = kiln__dist_collective(&c, KILN__OP_BROADCAST, flat, 0);
        if (s && out) s->buffers[k] = out;
        else kiln__tensor_release(out);
    }
    if (c.err && !failed) {
        kiln__stream_record_dispatch_error(c.err);
    }
    kiln__error_unref(c.err);
}

/* Copies the broadcast buffers into the module's (ranks other than 0: rank 0's are those). */
static void commit_buffers(kiln__opctx *c, struct kiln_ddp *d, ddp_step *s) {
    if (!d || kiln__dist_rank() == 0) return;
    for (int k = 0; k < d->n_buffer_dtypes && !c->err; k++) {
        int64_t off = 0;
        for (int i = 0; s->buffers[k] && i < d->n_buffers && !c->err; i++) {
            kiln__error *err = NULL;
            kiln__tensor *t = kiln__handle_peek(*d->buffers[i], c->name, &err);
            if (!t) {
                c->err = err;
                break;
            }
            if (t->dtype != d->buffer_dtypes[k]) continue;
            int64_t n = kiln__tensor_numel(t);
            kiln__tensor_retain(s->buffers[k]);
            kiln__tensor *part =
                kiln__t_reshape(c, kiln__t_slice(c, s->buffers[k], 0, off, off + n, 1), t->ndim, t->shape);
            if (part) kiln__t_copy_into(c, kiln__view_of(t), part);
            kiln__tensor_release(part);
            off += n;
        }
    }
}

void kiln__ddp_step_vote(ddp_step *s, kiln__opctx *c, bool ok) {
    if (s) {
        if (s->voted) return;
        s->voted = true;
        if (s->d) { /* off the wrapper's list */
            ddp_step **p = &s->d->unvoted;
            while (*p && *p != s) p = &(*p)->next;
            if (*p) *p = s->next;
        }
        s->next = NULL;
        s->d = NULL;
    }
    if (kiln__dist_size() > 1) {
        int64_t outer = s ? kiln__dist_tag(s->number) : 0; /* (no step: the caller's tag) */
        int64_t one_shape[1] = {1};
        kiln__tensor *yes = ok ? kiln__t_fill(c, KILN_CPU, KILN_F32, 1, one_shape, 1.0) : NULL;
        kiln__tensor *all = kiln__dist_all_reduce_sized(c, yes, 1, KILN_F32);
        if (all && ok) { /* (a no needs no answer: this rank does not commit) */
            if (kiln__wait_storage(all->storage) != KILN_OK && !c->err)
                c->err = kiln__earliest_error(atomic_load(&all->storage->err));
        }
        kiln__tensor_release(all);
        if (s) kiln__dist_tag(outer);
    }
    if (s) kiln__ddp_step_unref(s); /* the list's reference */
}

void kiln__ddp_steps_give_up(struct kiln_ddp *d) {
    while (d->unvoted) {
        KILN__OP_BEGIN("kiln_ddp (a step given up)");
        kiln__ddp_step_vote(d->unvoted, &c, false);
        kiln__error_unref(c.err);
    }
}

/* kiln_optimizer_step's agreement before it commits: waits for the buffers' broadcast, votes,
 * and on a yes from every rank copies the buffers in. */
static void step_agree(void *ctx, kiln__opctx *c) {
    ddp_step *s = ctx;
    if (s->voted) { /* its peers took it as failed: so must this rank */
        kiln__fail(c, KILN_ERR_INVALID_ARGUMENT,
                   "rank %d: this step was given up before kiln_optimizer_step (another backward of the model "
                   "ran first, or kiln_ddp_free), so no rank commits it", kiln__dist_rank());
        return;
    }
    for (int k = 0; k < DDP_MAX_BUFFER_DTYPES && !c->err; k++)
        if (s->buffers[k] && kiln__wait_storage(s->buffers[k]->storage) != KILN_OK)
            c->err = kiln__earliest_error(atomic_load(&s->buffers[k]->storage->err));
    struct kiln_ddp *d = s->d;
    kiln__ddp_step_vote(s, c, !c->err);
    if (!c->err) commit_buffers(c, d, s);
}

static void step_release(void *ctx) {
    ddp_step *s = ctx;
    if (!s->voted) {
        KILN__OP_BEGIN("kiln_grads_free (a data-parallel step not taken)");
        kiln__ddp_step_vote(s, &c, false);
        kiln__error_unref(c.err);
    }
    kiln__ddp_step_unref(s); /* the container's reference */
}

const kiln__grads_sync kiln__ddp_step_sync = {step_agree, step_release};
