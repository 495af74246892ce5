/* Data parallelism: every rank holds the whole model; rank 0's parameters are broadcast at the
 * start; during backward, the gradients are grouped into buckets (in reverse registration
 * order, about what backward produces first) and a bucket's all-reduce (mean) is queued the
 * moment its last gradient is complete (autodiff's leaf_final hook), so it runs on the
 * communication thread while the rest of backward runs on the engine workers. A bucket is one
 * flat tensor per step (the cat of its gradients); the gradients handed back are views of its
 * all-reduced result, so each gradient waits only for its own bucket, and the container is
 * marked (kiln__grads_mark_late) so that kiln_optimizer_step queues each parameter's update to
 * run as soon as its own bucket is done, and commits them all only once every bucket succeeded
 * on every rank (src/optim/optimizer.c, step_early; the ranks agree through agree_step). */
#include <stdlib.h>
#include <string.h>

#include "autodiff/autodiff-impl.h"
#include "dist/dist-impl.h"
#include "nn/module-impl.h"

#define DEFAULT_BUCKET_BYTES ((int64_t)25 << 20)

/* kiln_optimizer_step's agreement before it commits a data-parallel step: one sized all-reduce
 * of one value, which a rank whose step failed (a kernel, memory, a check) joins without data,
 * so its peers fail the step too ("rank N failed at or before this collective") and every rank
 * keeps its weights, rather than one rank keeping them while the others commit. */
static void agree_step(kiln__opctx *c) {
    if (kiln__dist_size() < 2) return;
    int64_t one_shape[1] = {1};
    kiln__tensor *ok = c->err ? NULL : kiln__t_fill(c, KILN_CPU, KILN_F32, 1, one_shape, 1.0);
    kiln__tensor *all = kiln__dist_all_reduce_sized(c, ok, 1, KILN_F32);
    if (!all) return;
    if (kiln__wait_storage(all->storage) != KILN_OK && !c->err)
        c->err = kiln__earliest_error(atomic_load(&all->storage->err));
    kiln__tensor_release(all);
}

typedef struct {
    const kiln__ad_leaf *leaf;
    kiln__tensor *param; /* borrowed from the module */
    int bucket;
} ddp_param;

typedef struct {
    int first, n;  /* params[first .. first + n) */
    int ready;     /* gradients complete in this walk */
    bool launched; /* in this walk */
} ddp_bucket;

struct kiln_ddp {
    kiln_module *model;
    ddp_param *params;
    int n_params;
    ddp_bucket *buckets;
    int n_buckets;
    bool seen; /* a gradient of ours was seen in this walk */
};

kiln_ddp_options kiln_ddp_defaults(void) {
    /* for experiments without recompiling; bounded so that the KB-to-bytes shift cannot overflow */
    int64_t kb = kiln__env_int_range("KILN_DDP_BUCKET_KB", 1, INT64_MAX >> 10, DEFAULT_BUCKET_BYTES >> 10);
    return (kiln_ddp_options){.bucket_bytes = kb << 10};
}

/* Queues the all-reduce of bucket b: its gradients (those missing count as zeros) joined into
 * one flat tensor, reduced, and handed back as views. failed: this rank's backward failed; the
 * collective only tells the peers. */
static void launch(kiln_ddp *d, ddp_bucket *b, kiln_grads *gs, bool failed) {
    KILN__OP_BEGIN("kiln_backward (kiln_ddp gradient all-reduce)");
    b->launched = true;
    /* every rank knows the bucket's size, even one whose gradients failed: a sized all-reduce */
    int64_t numel = 0;
    for (int k = 0; k < b->n; k++) numel += kiln__tensor_numel(d->params[b->first + k].param);
    kiln_dtype dtype = d->params[b->first].param->dtype;
    if (failed) {
        kiln__dist_all_reduce_sized(&c, NULL, numel, dtype);
        return;
    }
    kiln__tensor **parts = calloc((size_t)b->n, sizeof *parts);
    kiln__tensor ***slots = calloc((size_t)b->n, sizeof *slots);
    if (!parts || !slots) { /* the peers still get this bucket's all-reduce */
        free(parts);
        free(slots);
        kiln__fail(&c, KILN_ERR_OUT_OF_MEMORY, "cannot gather a bucket's gradients");
        kiln__dist_all_reduce_sized(&c, NULL, numel, dtype);
        kiln__stream_record_dispatch_error(c.err);
        kiln__error_unref(c.err);
        return;
    }
    for (int k = 0; k < b->n; k++) {
        const ddp_param *p = &d->params[b->first + k];
        slots[k] = kiln__grads_slot(gs, p->leaf);
        kiln__tensor *g = NULL;
        if (slots[k]) {
            g = *slots[k];
            *slots[k] = NULL;
        } else {
            g = kiln__t_fill(&c, p->param->device, p->param->dtype, p->param->ndim, p->param->shape, 0.0);
        }
        int64_t n = kiln__tensor_numel(p->param);
        parts[k] = g ? kiln__t_reshape(&c, g, 1, &n) : NULL;
    }
    kiln__grads_mark_late(gs, agree_step);
    kiln__tensor *flat = kiln__t_cat(&c, parts, b->n, 0);
    kiln__tensor *sum = kiln__dist_all_reduce_sized(&c, flat, numel, dtype);
    int64_t off = 0;
    for (int k = 0; k < b->n; k++) {
        const kiln__tensor *param = d->params[b->first + k].param;
        int64_t n = kiln__tensor_numel(param);
        if (slots[k]) {
            kiln__tensor *v = NULL;
            if (sum) {
                kiln__tensor_retain(sum);
                v = kiln__t_reshape(&c, kiln__t_slice(&c, sum, 0, off, off + n, 1), param->ndim, param->shape);
            }
            /* a failure here still leaves a gradient: a poisoned one, so the step reports it */
            *slots[k] = v ? v : kiln__tensor_poisoned(c.err);
        }
        off += n;
    }
    kiln__tensor_release(sum);
    free(parts);
    free(slots);
    if (c.err) {
        kiln__stream_record_dispatch_error(c.err);
        kiln__error_unref(c.err);
    }
}

static ddp_param *find_param(kiln_ddp *d, const kiln__ad_leaf *leaf) {
    for (int i = 0; i < d->n_params; i++)
        if (d->params[i].leaf == leaf) return &d->params[i];
    return NULL;
}

static void on_leaf_final(void *ctx, kiln_grads *gs, const kiln__ad_leaf *leaf) {
    kiln_ddp *d = ctx;
    ddp_param *p = find_param(d, leaf);
    if (!p) return;
    d->seen = true;
    ddp_bucket *b = &d->buckets[p->bucket];
    if (!b->launched && ++b->ready == b->n) launch(d, b, gs, false);
}

static void on_walk_done(void *ctx, kiln_grads *gs, bool ok) {
    kiln_ddp *d = ctx;
    /* a walk that failed must still take part in every bucket's all-reduce, or the peers wait */
    if (d->seen || !ok)
        for (int i = 0; i < d->n_buckets; i++)
            if (!d->buckets[i].launched) launch(d, &d->buckets[i], gs, !ok);
    for (int i = 0; i < d->n_buckets; i++) d->buckets[i].ready = 0, d->buckets[i].launched = false;
    d->seen = false;
}

/* Broadcasts t from rank 0 into its own storage (it stays the same tensor: a leaf keeps its
 * identity). */
static void broadcast_in_place(kiln__opctx *c, kiln__tensor *t) {
    if (!kiln__tensor_is_contiguous(t)) {
        kiln__fail(c, KILN_ERR_INVALID_ARGUMENT, "rank %d: a parameter is not dense", kiln__dist_rank());
        return;
    }
    kiln__tensor_retain(t);
    kiln__tensor *out = kiln__dist_collective(c, KILN__OP_BROADCAST, t, 0);
    if (out && out->storage != t->storage) /* (t had another owner: copy the result back) */
        kiln__t_copy_into(c, kiln__view_of(t), out);
    kiln__tensor_release(out);
}

kiln_ddp *kiln_ddp_new(kiln_module *model, kiln_ddp_options o) {
    if (o.bucket_bytes == 0) o.bucket_bytes = kiln_ddp_defaults().bucket_bytes; /* left 0: the default */
    KILN__OP_BEGIN("kiln_ddp_new");
    kiln_ddp *d = NULL;
    int n = model ? kiln_module_params(model, NULL, 0) : 0;
    kiln_param *ps = n > 0 ? calloc((size_t)n, sizeof *ps) : NULL;
    if (!model)
        kiln__fail(&c, KILN_ERR_NULL, "model is NULL");
    else if (o.bucket_bytes <= 0)
        kiln__fail(&c, KILN_ERR_INVALID_ARGUMENT, "bucket_bytes %lld is not positive", (long long)o.bucket_bytes);
    else if (n > 0 && !ps)
        kiln__fail(&c, KILN_ERR_OUT_OF_MEMORY, "cannot list the parameters");
    else if (kiln__dist_ready(&c) && !(d = calloc(1, sizeof *d)))
        kiln__fail(&c, KILN_ERR_OUT_OF_MEMORY, "cannot allocate the wrapper");
    if (d) {
        kiln_module_params(model, ps, n);
        d->model = model;
        d->params = calloc((size_t)n + 1, sizeof *d->params);
        d->buckets = calloc((size_t)n + 1, sizeof *d->buckets);
        if (!d->params || !d->buckets) kiln__fail(&c, KILN_ERR_OUT_OF_MEMORY, "cannot allocate the buckets");
    }
    /* rank 0's values everywhere: parameters and buffers, in registration order */
    for (int i = 0; d && !c.err && i < n; i++) {
        kiln__error *err = NULL;
        kiln__tensor *t = kiln__handle_peek(*ps[i].slot, "kiln_ddp_new", &err);
        if (!t) {
            c.err = err;
            break;
        }
        broadcast_in_place(&c, t);
    }
    /* buckets of trainable parameters, last registered first, one dtype per bucket */
    int64_t bytes = 0;
    for (int i = n - 1; d && !c.err && i >= 0; i--) {
        kiln__error *err = NULL;
        kiln__tensor *t = kiln__handle_peek(*ps[i].slot, "kiln_ddp_new", &err);
        kiln__error_unref(err);
        const kiln__ad_meta *m = t ? t->autodiff : NULL;
        if (ps[i].buffer || !m || !m->leaf) continue;
        int64_t b = (int64_t)kiln__tensor_numel(t) * (int64_t)kiln__elsize(t->dtype);
        ddp_bucket *cur = d->n_buckets ? &d->buckets[d->n_buckets - 1] : NULL;
        if (!cur || bytes + b > o.bucket_bytes || d->params[cur->first].param->dtype != t->dtype) {
            cur = &d->buckets[d->n_buckets++];
            cur->first = d->n_params;
            bytes = 0;
        }
        d->params[d->n_params++] = (ddp_param){m->leaf, t, d->n_buckets - 1};
        cur->n++;
        bytes += b;
    }
    /* a world of one has nothing to average: its gradients are already the mean, and the
     * buckets' cat, copy and views cost the Fashion-MNIST MLP about a fifth of its epoch */
    if (d && !c.err && kiln_dist_world_size() > 1 &&
        !kiln__ad_hooks_add((kiln__ad_backward_hooks){on_leaf_final, on_walk_done, d}))
        kiln__fail(&c, KILN_ERR_UNSUPPORTED, "too many data-parallel wrappers at once (8)");
    free(ps);
    if (!c.err) return d;
    if (d) {
        free(d->params);
        free(d->buckets);
        free(d);
    }
    kiln__error_report(c.err);
    kiln__error_unref(c.err);
    return NULL;
}

int kiln_ddp_num_buckets(const kiln_ddp *d) { return d ? d->n_buckets : 0; }

void kiln_ddp_free(kiln_ddp *d) {
    if (!d) return;
    kiln__ad_hooks_remove(d);
    free(d->params);
    free(d->buckets);
    free(d);
}
