/* Data parallelism: every rank holds the whole model; kiln_ddp_new checks that every rank has
 * the same model (ddp_check.c) and broadcasts rank 0's parameters and buffers. The trainable
 * parameters are grouped into buckets, last registered first (about the order backward makes
 * their gradients), and every rank all-reduces (mean) the same buckets in the same order in
 * every step, whatever its own graph used: during backward, bucket i is queued as soon as its
 * gradients are final (autodiff's leaf_final hook) and buckets 0 .. i-1 are queued, so it runs
 * on the communication thread while the rest of backward runs on the engine workers; a
 * parameter this rank's graph does not reach (a branch another rank took) is final from the
 * start and adds zeros, and the buckets still waiting when the walk ends are queued then. A
 * bucket is one flat tensor per step (the cat of its gradients); every parameter's gradient in
 * the container becomes a view of the all-reduced result (also where this rank had none), so
 * every rank applies the same update and each gradient waits only for its own bucket. The
 * container is marked (kiln__grads_mark_late) so that kiln_optimizer_step queues each update as
 * soon as its own bucket is done and commits only after every rank's vote (ddp_step.c). A
 * backward that fails on one rank, before or while it walks, still queues every bucket and its
 * vote as failed, so its peers fail that step naming it and the ranks never pair different
 * steps' collectives. Inside kiln_ddp_no_sync_begin/end, backward only adds the gradients up
 * here; the next synced backward adds them into its buckets. */
#include <stdlib.h>
#include <string.h>

#include "dist/ddp-impl.h"
#include "nn/module-impl.h"

#define DEFAULT_BUCKET_BYTES ((int64_t)25 << 20)

kiln_ddp_options kiln_ddp_defaults(void) {
    /* for experiments without recompiling; bounded so that the KB-to-bytes shift cannot overflow */
    int64_t kb = kiln__env_int_range("KILN_DDP_BUCKET_KB", 1, INT64_MAX >> 10, DEFAULT_BUCKET_BYTES >> 10);
    return (kiln_ddp_options){.bucket_bytes = kb << 10};
}

/* Puts g (consumed) as p's gradient in gs, where the slot is or as a new entry. */
static void put_grad(kiln__opctx *c, kiln_grads *gs, const ddp_param *p, kiln__tensor **slot, kiln__tensor *g) {
    if (slot) {
        kiln__tensor_release(*slot);
        *slot = g;
    } else {
        kiln__grads_put(c, gs, p->leaf, g);
    }
}

/* Queues the all-reduce of bucket b: this rank's gradients (zeros where it has none, plus what
 * no_sync accumulated) joined into one flat tensor, reduced, and handed back as views, one per
 * parameter. fail: this rank's step failed (why, when known): the collective only tells the
 * peers, and this rank's gradients carry the reason. */
static void launch(kiln_ddp *d, int bi, kiln_grads *gs, bool failed, kiln__error *why) {
    KILN__OP_BEGIN("kiln_backward (kiln_ddp gradient all-reduce)");
    const ddp_bucket *b = &d->buckets[bi];
    /* every rank knows the bucket's size, even one whose gradients failed: a sized all-reduce */
    int64_t numel = 0;
    for (int k = 0; k < b->n; k++) numel += kiln__tensor_numel(d->params[b->first + k].param);
    kiln_dtype dtype = d->params[b->first].param->dtype;
    kiln__tensor **parts = failed ? NULL : calloc((size_t)b->n, sizeof *parts);
    if (!failed && !parts) {
        kiln__fail(&c, KILN_ERR_OUT_OF_MEMORY, "cannot gather a bucket's gradients");
        failed = true, why = c.err;
    }
    if (failed) { /* the peers still get this bucket's all-reduce */
        kiln__dist_all_reduce_sized(&c, NULL, numel, dtype);
        for (int k = 0; gs && why && k < b->n; k++) {
            ddp_param *p = &d->params[b->first + k];
            kiln__tensor *poison = kiln__tensor_poisoned(why);
            if (poison) put_grad(&c, gs, p, kiln__grads_slot(gs, p->leaf), poison);
            kiln__tensor_release(p->acc), p->acc = NULL;
        }
        if (c.err) {
            kiln__stream_record_dispatch_error(c.err);
            kiln__error_unref(c.err);
        }
        return;
    }
    for (int k = 0; k < b->n; k++) {
        ddp_param *p = &d->params[b->first + k];
        kiln__tensor **slot = kiln__grads_slot(gs, p->leaf);
        kiln__tensor *g = NULL;
        if (slot) {
            g = *slot;
            *slot = NULL;
            if (p->acc) g = kiln__t_binary(&c, KILN__OP_ADD, g, p->acc);
        } else {
            g = p->acc ? p->acc
                       : kiln__t_fill(&c, p->param->device, p->param->dtype, p->param->ndim, p->param->shape, 0.0);
        }
        p->acc = NULL;
        int64_t n = kiln__tensor_numel(p->param);
        parts[k] = g ? kiln__t_reshape(&c, g, 1, &n) : NULL;
    }
    kiln__tensor *flat = kiln__t_cat(&c, parts, b->n, 0);
    kiln__tensor *sum = kiln__dist_all_reduce_sized(&c, flat, numel, dtype);
    int64_t off = 0;
    for (int k = 0; k < b->n; k++) {
        const ddp_param *p = &d->params[b->first + k];
        int64_t n = kiln__tensor_numel(p->param);
        kiln__tensor *v = NULL;
        if (sum) {
            kiln__tensor_retain(sum);
            v = kiln__t_reshape(&c, kiln__t_slice(&c, sum, 0, off, off + n, 1), p->param->ndim, p->param->shape);
        }
        /* a failure here still leaves a gradient: a poisoned one, so the step reports it */
        if (!v) v = c.err ? kiln__tensor_poisoned(c.err) : NULL;
        if (v) put_grad(&c, gs, p, kiln__grads_slot(gs, p->leaf), v);
        off += n;
    }
    kiln__tensor_release(sum);
    free(parts);
    if (c.err) {
        kiln__stream_record_dispatch_error(c.err);
        kiln__error_unref(c.err);
    }
}

/* Queues, in order, every bucket whose gradients are all final. */
static void launch_ready(kiln_ddp *d, kiln_grads *gs) {
    while (d->next_bucket < d->n_buckets && d->buckets[d->next_bucket].ready == d->buckets[d->next_bucket].n)
        launch(d, d->next_bucket++, gs, d->accum_error != NULL, d->accum_error);
}

static void mark_ready(kiln_ddp *d, ddp_param *p) {
    if (p->ready) return;
    p->ready = true;
    d->buckets[p->bucket].ready++;
}

/* The walk reached one of our parameters (or failed): a data-parallel step starts. Steps
 * still waiting for their vote are given up first (their vote is no), so that the ranks'
 * collectives stay in the same order whatever each did with its last gradients. */
static void begin_step(kiln_ddp *d, kiln_grads *gs) {
    KILN__OP_BEGIN("kiln_backward (kiln_ddp)");
    kiln__ddp_steps_give_up(d);
    d->in_step = true;
    d->steps++;
    d->step = kiln__ddp_step_begin(&c, d);
    if (d->step && gs) {
        if (kiln__grads_mark_late(gs, &kiln__ddp_step_sync, d->step)) d->step->refs++;
        else kiln__fail(&c, KILN_ERR_UNSUPPORTED, "too many data-parallel wrappers share one backward (8)");
    }
    if (c.err && !d->accum_error) d->accum_error = kiln__error_ref(c.err); /* this rank's step fails */
    kiln__error_unref(c.err);
    /* what this walk's graph does not reach is final already: zeros from this rank */
    for (int i = 0; i < d->n_params; i++)
        if (!kiln__grads_expects(gs, d->params[i].leaf)) mark_ready(d, &d->params[i]);
}

static ddp_param *find_param(kiln_ddp *d, const kiln__ad_leaf *leaf) {
    for (int i = 0; i < d->n_params; i++)
        if (d->params[i].leaf == leaf) return &d->params[i];
    return NULL;
}

static void on_leaf_final(void *ctx, kiln_grads *gs, const kiln__ad_leaf *leaf) {
    kiln_ddp *d = ctx;
    if (d->no_sync || kiln__dist_size() < 2) return; /* (added up, or merged, when the walk ends) */
    ddp_param *p = find_param(d, leaf);
    if (!p) return;
    if (!d->in_step) begin_step(d, gs);
    mark_ready(d, p);
    int64_t outer = kiln__dist_tag(d->steps);
    launch_ready(d, gs);
    kiln__dist_tag(outer);
}

/* Adds this walk's gradients to what no_sync accumulated (the container keeps its own). */
static void accumulate(kiln_ddp *d, kiln_grads *gs) {
    KILN__OP_BEGIN("kiln_backward (kiln_ddp_no_sync)");
    for (int i = 0; i < d->n_params; i++) {
        ddp_param *p = &d->params[i];
        kiln__tensor **slot = kiln__grads_slot(gs, p->leaf);
        if (!slot) continue;
        kiln__tensor_retain(*slot);
        p->acc = p->acc ? kiln__t_binary(&c, KILN__OP_ADD, p->acc, *slot) : *slot;
        d->accumulated = true;
    }
    if (c.err && !d->accum_error) d->accum_error = kiln__error_ref(c.err);
    if (c.err) {
        kiln__stream_record_dispatch_error(c.err);
        kiln__error_unref(c.err);
    }
}

static void drop_accumulated(kiln_ddp *d) {
    for (int i = 0; i < d->n_params; i++) kiln__tensor_release(d->params[i].acc), d->params[i].acc = NULL;
    d->accumulated = false;
    kiln__error_unref(d->accum_error);
    d->accum_error = NULL;
}

/* A world of one has no all-reduce: what no_sync accumulated joins the container directly. */
static void merge_alone(kiln_ddp *d, kiln_grads *gs) {
    KILN__OP_BEGIN("kiln_backward (kiln_ddp_no_sync)");
    for (int i = 0; gs && i < d->n_params; i++) {
        ddp_param *p = &d->params[i];
        kiln__tensor **slot = kiln__grads_slot(gs, p->leaf);
        kiln__tensor *g = d->accum_error ? kiln__tensor_poisoned(d->accum_error) : NULL;
        if (!g && p->acc && slot) {
            g = kiln__t_binary(&c, KILN__OP_ADD, *slot, p->acc); /* (in place when it can) */
            *slot = NULL;
        } else if (!g) {
            g = p->acc;
        } else {
            kiln__tensor_release(p->acc);
        }
        p->acc = NULL;
        if (g) put_grad(&c, gs, p, slot, g);
    }
    if (c.err) {
        kiln__stream_record_dispatch_error(c.err);
        kiln__error_unref(c.err);
    }
}

static void on_walk_done(void *ctx, kiln_grads *gs, bool ok) {
    kiln_ddp *d = ctx;
    if (d->no_sync) {
        if (ok && gs) accumulate(d, gs);
        else if (!ok && !d->accum_error)
            d->accum_error = kiln__error_new(KILN_ERR_KERNEL, "kiln_ddp_no_sync", NULL, 0, 0,
                                             "rank %d: a backward inside kiln_ddp_no_sync failed, so the gradients "
                                             "accumulated for the next step are incomplete", kiln__dist_rank());
        return;
    }
    if (kiln__dist_size() < 2) {
        if (d->accumulated || d->accum_error) {
            if (ok) merge_alone(d, gs);
            drop_accumulated(d);
        }
        return;
    }
    if (!d->in_step && ok) return; /* none of our parameters in this walk: not a step */
    if (!d->in_step) begin_step(d, gs);
    int64_t outer = kiln__dist_tag(d->steps);
    bool failed = !ok || d->accum_error;
    for (int i = 0; i < d->n_params && !failed; i++) mark_ready(d, &d->params[i]);
    if (failed)
        while (d->next_bucket < d->n_buckets) launch(d, d->next_bucket++, ok ? gs : NULL, true, d->accum_error);
    else
        launch_ready(d, gs);
    kiln__ddp_step_broadcast_buffers(d, d->step, failed || !d->step);
    if (failed) {
        KILN__OP_BEGIN("kiln_backward (kiln_ddp)");
        kiln__ddp_step_vote(d->step, &c, false);
        kiln__error_unref(c.err);
    }
    kiln__dist_tag(outer);
    /* the walk is over */
    for (int i = 0; i < d->n_params; i++) d->params[i].ready = false;
    for (int i = 0; i < d->n_buckets; i++) d->buckets[i].ready = 0;
    d->next_bucket = 0;
    d->in_step = false;
    if (d->step) kiln__ddp_step_unref(d->step); /* (the list of unvoted steps, or the container, keeps it) */
    d->step = NULL;
    drop_accumulated(d);
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

/* What d holds (not d itself: a registered wrapper goes back through the registry). */
static void ddp_release_contents(kiln_ddp *d) {
    kiln__ddp_steps_give_up(d);
    drop_accumulated(d);
    free(d->params);
    free(d->buckets);
    free(d->buffers);
}

/* The buffers (for the per-step broadcast, grouped by dtype) and the buckets of trainable
 * parameters, last registered first, one dtype per bucket. */
static void layout(kiln__opctx *c, kiln_ddp *d, const kiln_param *ps, int n, int64_t bucket_bytes) {
    int64_t bytes = 0;
    for (int i = 0; i < n && !c->err; i++) {
        if (!ps[i].buffer) continue;
        kiln__error *err = NULL;
        kiln__tensor *t = kiln__handle_peek(*ps[i].slot, "kiln_ddp_new", &err);
        kiln__error_unref(err);
        if (!t) continue;
        d->buffers[d->n_buffers++] = ps[i].slot;
        int k = 0;
        while (k < d->n_buffer_dtypes && d->buffer_dtypes[k] != t->dtype) k++;
        if (k == DDP_MAX_BUFFER_DTYPES)
            kiln__fail(c, KILN_ERR_UNSUPPORTED, "buffers of more than %d dtypes", DDP_MAX_BUFFER_DTYPES);
        else if (k == d->n_buffer_dtypes)
            d->buffer_dtypes[d->n_buffer_dtypes++] = t->dtype;
    }
    for (int i = n - 1; !c->err && i >= 0; i--) {
        kiln__error *err = NULL;
        kiln__tensor *t = kiln__handle_peek(*ps[i].slot, "kiln_ddp_new", &err);
        kiln__error_unref(err);
        const kiln__ad_meta *m = t ? t->autodiff : NULL;
        if (ps[i].buffer || !m || !m->leaf) continue;
        int64_t b = (int64_t)kiln__tensor_numel(t) * (int64_t)kiln__elsize(t->dtype);
        ddp_bucket *cur = d->n_buckets ? &d->buckets[d->n_buckets - 1] : NULL;
        if (!cur || bytes + b > bucket_bytes || d->params[cur->first].param->dtype != t->dtype) {
            cur = &d->buckets[d->n_buckets++];
            cur->first = d->n_params;
            bytes = 0;
        }
        d->params[d->n_params++] = (ddp_param){.leaf = m->leaf, .param = t, .bucket = d->n_buckets - 1};
        cur->n++;
        bytes += b;
    }
}

kiln_ddp *kiln_ddp_new(kiln_module *model, kiln_ddp_options o) {
    if (o.bucket_bytes == 0) o.bucket_bytes = kiln_ddp_defaults().bucket_bytes; /* left 0: the default */
    /* (a freed module is refused before its parameters are listed) */
    if (model && kiln__object_check(model, KILN__MODULE_KIND, "kiln_ddp_new") != KILN_OK) return NULL;
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
        d->buffers = calloc((size_t)n + 1, sizeof *d->buffers);
        if (!d->params || !d->buckets || !d->buffers)
            kiln__fail(&c, KILN_ERR_OUT_OF_MEMORY, "cannot allocate the buckets");
    }
    /* the same model everywhere, or a clear error on every rank (a different model would pair
     * different buckets' all-reduces) */
    if (d && !c.err) kiln__ddp_check_structure(&c, ps, n);
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
    if (d && !c.err) layout(&c, d, ps, n, o.bucket_bytes);
    /* (a world of one only merges no_sync's sums: its gradients are already the mean) */
    if (d && !c.err && !kiln__ad_hooks_add((kiln__ad_backward_hooks){on_leaf_final, on_walk_done, d}))
        kiln__fail(&c, KILN_ERR_UNSUPPORTED, "too many data-parallel wrappers at once (8)");
    free(ps);
    if (d && !c.err && !kiln__object_register(d, KILN__DDP_KIND)) {
        kiln__ad_hooks_remove(d);
        kiln__fail(&c, KILN_ERR_OUT_OF_MEMORY, "cannot register the wrapper");
    }
    if (!c.err) return d;
    if (d) ddp_release_contents(d), free(d);
    kiln__error_report(c.err);
    kiln__error_unref(c.err);
    return NULL;
}

int kiln_ddp_num_buckets(const kiln_ddp *d) {
    return kiln__object_check(d, KILN__DDP_KIND, "kiln_ddp_num_buckets") == KILN_OK ? d->n_buckets : 0;
}

static kiln_status no_sync_set(const char *op, kiln_ddp *d, bool on) {
    if (!d) return kiln__report(KILN_ERR_NULL, op, "the wrapper is NULL");
    KILN__OBJECT_OR_RETURN(d, KILN__DDP_KIND, op, kiln_last_status());
    if (d->no_sync == on)
        return kiln__report(KILN_ERR_INVALID_ARGUMENT, op, on ? "already inside kiln_ddp_no_sync_begin"
                                                              : "not inside kiln_ddp_no_sync_begin");
    d->no_sync = on;
    return KILN_OK;
}

kiln_status kiln_ddp_no_sync_begin(kiln_ddp *d) { return no_sync_set("kiln_ddp_no_sync_begin", d, true); }
kiln_status kiln_ddp_no_sync_end(kiln_ddp *d) { return no_sync_set("kiln_ddp_no_sync_end", d, false); }

void kiln_ddp_free(kiln_ddp *d) {
    static const char op[] = "kiln_ddp_free";
    if (!d || kiln__object_retire(d, KILN__DDP_KIND, op) != KILN_OK) return;
    kiln__ad_hooks_remove(d);
    ddp_release_contents(d);
    kiln__object_dispose(d, KILN__DDP_KIND, op);
}
