/* The data loader. Workers claim batch numbers in order, each assembles its batch on its own
 * thread (get() writes every sample straight into its slice of one host buffer) and moves it
 * to the device with one copy op per tensor on the worker's own stream (batch_tensor); with no
 * workers the caller assembles it and moves it on a stream the loader keeps for that. Ready
 * batches wait in a ring of `prefetch` slots: a worker may only claim batch k while
 * k < next_deliver + prefetch, so batch k has slot k % prefetch to itself, and the caller
 * receives batches in order whichever worker finishes first.
 *
 * Cancellation: every start_epoch (and free) bumps `generation`; a worker checks it between
 * samples and drops a batch claimed under an older one, so a restart or a shutdown only waits
 * for the sample each worker is in. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "data/data-impl.h"
#include "engine/stream.h"
#include "kiln/tensor.h"

#define MAX_WORKERS 256

typedef struct {
    kiln_status status;
    kiln_tensor x, y;
    char msg[KILN__DATA_MSG + 96];
} batch;

typedef struct {
    bool ready;
    batch b;
} slot;

typedef struct {
    struct kiln_loader *l;
    unsigned char *host; /* [B, input...] then [B, target...] */
    int64_t *indices;    /* the claimed batch's sample indices */
} worker;

struct kiln_loader {
    kiln_dataset *ds;
    kiln_loader_options o;
    int64_t n, batches; /* n: samples of this shard per epoch */
    int64_t total;      /* samples in the dataset */
    int64_t *full_order; /* the epoch's order of the whole dataset, when sharded */
    size_t in_bytes, tg_bytes; /* per sample */
    size_t tg_offset;          /* of the targets in a worker's host buffer (aligned) */

    pthread_mutex_t lock;
    pthread_cond_t work_cond;  /* a batch may be claimed, or stop */
    pthread_cond_t ready_cond; /* the batch the caller waits for is ready */
    _Atomic uint64_t generation;
    bool stop, started;
    int64_t epoch;
    int64_t *order;
    int64_t next_claim, next_deliver;
    int n_slots;
    slot *slots;
    kiln_tensor *dropped; /* room to collect the slots' tensors for release */
    /* the last kiln_loader_next failed and nothing was read after it: a loop that stops at
     * the first status other than KILN_OK; the next epoch's start reports it */
    kiln_status unread_status;
    int64_t unread_epoch, unread_batch;

    int n_threads;
    pthread_t *threads;
    worker *workers; /* n_threads, or one for the caller when workers == 0 */
    struct kiln__stream *copies; /* workers == 0 on a device: the stream of the caller's copies */
    unsigned char *host_block;
    int64_t *index_block;
};

static int64_t batch_count(const kiln_loader *l, int64_t k) {
    int64_t left = l->n - k * l->o.batch_size;
    return left < l->o.batch_size ? left : l->o.batch_size;
}

static kiln_shape batch_shape(kiln_shape sample, int64_t count) {
    kiln_shape s = {sample.ndim + 1, {count}};
    memcpy(s.dims + 1, sample.dims, sizeof(int64_t) * (size_t)sample.ndim);
    return s;
}

/* A batch tensor on the loader's device from host bytes, copied now (the buffer is reused). To
 * a device it is a CPU tensor moved by kiln_to_device: an op on this thread's stream (a
 * worker's own, or the loader's copy stream the caller enters, see assemble), whose write is
 * queued on that stream's device queue from pinned staging, so it overlaps the caller's device
 * work (it does not queue behind it) and this thread goes on to the next batch; the caller's
 * ops wait for it through a device event. (kiln_from_data straight to the device writes
 * through the device's one transfer queue, behind reads that wait for the caller's work, and
 * blocks until done.) */
static kiln_tensor batch_tensor(const kiln_loader *l, kiln_dtype dtype, kiln_shape shape, const void *bytes) {
    if (l->o.device == KILN_CPU) return kiln_from_data(KILN_CPU, dtype, shape, bytes);
    return kiln_to_device(kiln_from_data(KILN_CPU, dtype, shape, bytes), l->o.device);
}

/* Builds batch k from the indices in w (count of them) into *out. Returns false, with nothing
 * allocated, when the generation moved on (the batch is no longer wanted). */
static bool assemble(kiln_loader *l, worker *w, int64_t k, int64_t count, int64_t epoch, uint64_t gen, batch *out) {
    out->status = KILN_OK;
    out->x = out->y = KILN_NONE;
    unsigned char *in = w->host, *tg = w->host + l->tg_offset;
    for (int64_t i = 0; i < count; i++) {
        if (atomic_load_explicit(&l->generation, memory_order_relaxed) != gen) return false;
        int64_t idx = w->indices[i];
        kiln_status st = kiln__fetch_checked(l->ds, idx, in + (size_t)i * l->in_bytes, tg + (size_t)i * l->tg_bytes,
                                             kiln__sample_seed(l->o.seed, epoch, idx));
        if (st != KILN_OK) {
            char why[KILN__DATA_MSG];
            kiln__fetch_error(why, sizeof why);
            snprintf(out->msg, sizeof out->msg, "sample %lld (batch %lld of epoch %lld): %s", (long long)idx,
                     (long long)k, (long long)epoch, why);
            out->status = st;
            return true;
        }
    }
    const kiln_dataset_desc *d = &l->ds->desc;
    struct kiln__stream *own = l->copies ? kiln__stream_enter(l->copies) : NULL;
    out->x = batch_tensor(l, d->input_dtype, batch_shape(d->input_shape, count), in);
    out->y = batch_tensor(l, d->target_dtype, batch_shape(d->target_shape, count), tg);
    kiln_status st = kiln_tensor_status(out->x);
    if (st == KILN_OK) st = kiln_tensor_status(out->y);
    if (l->copies) kiln__stream_leave(l->copies, own);
    if (st != KILN_OK) {
        snprintf(out->msg, sizeof out->msg, "batch %lld of epoch %lld: %s", (long long)k, (long long)epoch,
                 kiln_last_error());
        kiln_release(out->x);
        kiln_release(out->y);
        out->x = out->y = KILN_NONE;
        out->status = st;
    }
    return true;
}

static bool can_claim(const kiln_loader *l) {
    return l->started && l->next_claim < l->batches && l->next_claim < l->next_deliver + l->n_slots;
}

static void *worker_main(void *arg) {
    worker *w = arg;
    kiln_loader *l = w->l;
    batch b;
    pthread_mutex_lock(&l->lock);
    for (;;) {
        while (!l->stop && !can_claim(l)) pthread_cond_wait(&l->work_cond, &l->lock);
        if (l->stop) break;
        int64_t k = l->next_claim++, count = batch_count(l, k), epoch = l->epoch;
        uint64_t gen = atomic_load_explicit(&l->generation, memory_order_relaxed);
        memcpy(w->indices, l->order + k * l->o.batch_size, sizeof(int64_t) * (size_t)count);
        pthread_mutex_unlock(&l->lock);

        bool wanted = assemble(l, w, k, count, epoch, gen, &b);

        pthread_mutex_lock(&l->lock);
        if (!wanted) continue;
        if (atomic_load_explicit(&l->generation, memory_order_relaxed) != gen) {
            pthread_mutex_unlock(&l->lock); /* released outside the lock: a release may free */
            kiln_release(b.x);
            kiln_release(b.y);
            pthread_mutex_lock(&l->lock);
            continue;
        }
        slot *s = &l->slots[k % l->n_slots];
        s->b = b;
        s->ready = true;
        if (k == l->next_deliver) pthread_cond_signal(&l->ready_cond);
    }
    pthread_mutex_unlock(&l->lock);
    return NULL;
}

/* Takes the tensors of every ready slot into out (2 per slot); returns how many. Under lock. */
static int take_ready(kiln_loader *l, kiln_tensor *out) {
    int n = 0;
    for (int i = 0; i < l->n_slots; i++) {
        if (!l->slots[i].ready) continue;
        out[n++] = l->slots[i].b.x;
        out[n++] = l->slots[i].b.y;
        l->slots[i].ready = false;
    }
    return n;
}

static void release_all(int n, const kiln_tensor *t) {
    for (int i = 0; i < n; i++) kiln_release(t[i]);
}

kiln_loader_options kiln_loader_defaults(int64_t batch_size) {
    return (kiln_loader_options){.batch_size = batch_size, .workers = 2, .prefetch = 4, .shuffle = true,
                                 .drop_last = false, .seed = 0, .device = KILN_CPU, .shard_rank = 0,
                                 .shard_count = 1};
}

static kiln_status check_options(const kiln_dataset *ds, kiln_loader_options o) {
    static const char op[] = "kiln_loader_new";
    if (!ds) return kiln__report(KILN_ERR_NULL, op, "dataset is NULL");
    if (o.batch_size < 1)
        return kiln__report(KILN_ERR_INVALID_ARGUMENT, op, "batch_size %lld must be >= 1", (long long)o.batch_size);
    if (o.workers < 0 || o.workers > MAX_WORKERS)
        return kiln__report(KILN_ERR_INVALID_ARGUMENT, op, "workers %d not in 0..%d", o.workers, MAX_WORKERS);
    if (o.prefetch < 0)
        return kiln__report(KILN_ERR_INVALID_ARGUMENT, op, "prefetch %d must be >= 0 (0: the default)", o.prefetch);
    if (o.shard_count < 0 || o.shard_rank < 0 || o.shard_rank >= (o.shard_count > 0 ? o.shard_count : 1))
        return kiln__report(KILN_ERR_INVALID_ARGUMENT, op, "shard_rank %d is not in 0..%d (shard_count %d)",
                            o.shard_rank, (o.shard_count > 0 ? o.shard_count : 1) - 1, o.shard_count);
    kiln_device_info info;
    if (kiln_device_info_get(o.device, &info) != KILN_OK)
        return kiln__report(KILN_ERR_DEVICE, op, "device %s is not available", kiln_device_name(o.device));
    if (ds->desc.input_shape.ndim >= KILN_MAX_DIMS || ds->desc.target_shape.ndim >= KILN_MAX_DIMS)
        return kiln__report(KILN_ERR_SHAPE, op, "a sample of %d dims leaves no room for the batch dim",
                            KILN_MAX_DIMS);
    int64_t n = ds->desc.length(ds->ctx);
    if (n < 0) return kiln__report(KILN_ERR_INVALID_ARGUMENT, op, "dataset length %lld is negative", (long long)n);
    size_t per = ds->input_bytes + ds->target_bytes;
    if (per && (uint64_t)(o.batch_size < n ? o.batch_size : n) > (SIZE_MAX >> 2) / per)
        return kiln__report(KILN_ERR_OUT_OF_MEMORY, op, "a batch of %lld samples is too large", (long long)o.batch_size);
    return KILN_OK;
}

void kiln_loader_free(kiln_loader *l) {
    if (!l || kiln__object_retire(l, KILN__LOADER_KIND, "kiln_loader_free") != KILN_OK) return;
    pthread_mutex_lock(&l->lock);
    l->stop = true;
    atomic_fetch_add(&l->generation, 1);
    pthread_cond_broadcast(&l->work_cond);
    pthread_mutex_unlock(&l->lock);
    for (int i = 0; i < l->n_threads; i++) pthread_join(l->threads[i], NULL);
    if (l->slots && l->dropped) release_all(take_ready(l, l->dropped), l->dropped);
    kiln__stream_free(l->copies);
    pthread_mutex_destroy(&l->lock);
    pthread_cond_destroy(&l->work_cond);
    pthread_cond_destroy(&l->ready_cond);
    free(l->slots);
    free(l->dropped);
    free(l->order);
    free(l->full_order);
    free(l->threads);
    free(l->workers);
    free(l->host_block);
    free(l->index_block);
    kiln__object_dispose(l, KILN__LOADER_KIND, "kiln_loader_free");
}

kiln_loader *kiln_loader_new(kiln_dataset *ds, kiln_loader_options o) {
    static const char op[] = "kiln_loader_new";
    if (ds) KILN__OBJECT_OR_RETURN(ds, KILN__DATASET_KIND, op, NULL);
    if (check_options(ds, o) != KILN_OK) return NULL;
    if (o.prefetch == 0) o.prefetch = kiln_loader_defaults(o.batch_size).prefetch; /* left 0: the default */
    kiln_loader *l = calloc(1, sizeof *l);
    if (l && !kiln__object_register(l, KILN__LOADER_KIND)) free(l), l = NULL;
    if (!l) return kiln__report(KILN_ERR_OUT_OF_MEMORY, op, "cannot allocate the loader"), NULL;
    l->ds = ds;
    l->o = o;
    if (o.shard_count < 1) l->o.shard_count = o.shard_count = 1;
    l->total = ds->desc.length(ds->ctx);
    l->n = l->total > 0 ? (l->total + o.shard_count - 1) / o.shard_count : 0; /* padded: equal shards */
    l->batches = l->n / o.batch_size + (!o.drop_last && l->n % o.batch_size != 0);
    l->in_bytes = ds->input_bytes;
    l->tg_bytes = ds->target_bytes;
    pthread_mutex_init(&l->lock, NULL);
    pthread_cond_init(&l->work_cond, NULL);
    pthread_cond_init(&l->ready_cond, NULL);
    int hosts = o.workers > 0 ? o.workers : 1;
    size_t most = (size_t)(o.batch_size < l->n ? o.batch_size : l->n > 0 ? l->n : 1); /* samples in a batch */
    /* inputs then targets, each part on its own cache lines (aligned for any dtype) */
    l->tg_offset = (most * l->in_bytes + 63) & ~(size_t)63;
    size_t host_bytes = (l->tg_offset + most * l->tg_bytes + 63) & ~(size_t)63;
    l->n_slots = o.workers > 0 ? o.prefetch : 1;
    l->slots = calloc((size_t)l->n_slots, sizeof *l->slots);
    l->dropped = malloc(sizeof(kiln_tensor) * 2 * (size_t)l->n_slots);
    l->order = malloc(sizeof(int64_t) * (size_t)(l->n ? l->n : 1));
    if (o.shard_count > 1) l->full_order = malloc(sizeof(int64_t) * (size_t)(l->total ? l->total : 1));
    l->workers = calloc((size_t)hosts, sizeof *l->workers);
    l->threads = calloc((size_t)hosts, sizeof *l->threads);
    l->host_block = aligned_alloc(64, host_bytes * (size_t)hosts + 64);
    l->index_block = malloc(sizeof(int64_t) * most * (size_t)hosts);
    if (!l->slots || !l->dropped || !l->order || (o.shard_count > 1 && !l->full_order) || !l->workers || !l->threads || !l->host_block || !l->index_block) {
        kiln_loader_free(l);
        return kiln__report(KILN_ERR_OUT_OF_MEMORY, op, "cannot allocate buffers for batches of %lld",
                            (long long)o.batch_size), NULL;
    }
    for (int i = 0; i < hosts; i++) {
        l->workers[i] = (worker){l, l->host_block + host_bytes * (size_t)i, l->index_block + most * (size_t)i};
    }
    if (o.workers == 0 && o.device != KILN_CPU && !(l->copies = kiln__stream_new())) {
        kiln_loader_free(l);
        return kiln__report(KILN_ERR_OUT_OF_MEMORY, op, "cannot allocate the stream of the batches' copies"), NULL;
    }
    for (int i = 0; i < o.workers; i++) {
        int err = pthread_create(&l->threads[i], NULL, worker_main, &l->workers[i]);
        if (err) {
            kiln_loader_free(l);
            return kiln__report(KILN_ERR_OUT_OF_MEMORY, op, "cannot start worker thread %d: %s", i, strerror(err)), NULL;
        }
        l->n_threads++;
    }
    return l;
}

int64_t kiln_loader_batches(const kiln_loader *l) {
    if (l) KILN__OBJECT_OR_RETURN(l, KILN__LOADER_KIND, "kiln_loader_batches", -1);
    return l ? l->batches : -1;
}

kiln_status kiln_loader_start_epoch(kiln_loader *l, int64_t epoch) {
    if (!l) return kiln__report(KILN_ERR_NULL, "kiln_loader_start_epoch", "loader is NULL");
    KILN__OBJECT_OR_RETURN(l, KILN__LOADER_KIND, "kiln_loader_start_epoch", kiln_last_status());
    kiln_status unread = l->unread_status;
    l->unread_status = KILN_OK;
    pthread_mutex_lock(&l->lock);
    atomic_fetch_add(&l->generation, 1); /* first: workers mid-batch stop at their next sample */
    l->epoch = epoch;
    int64_t *whole = l->full_order ? l->full_order : l->order;
    if (l->o.shuffle)
        kiln__shuffle_order(whole, l->total, l->o.seed, epoch);
    else
        for (int64_t i = 0; i < l->total; i++) whole[i] = i;
    if (l->full_order) /* every shard_count-th, wrapping around at the end */
        for (int64_t i = 0; i < l->n; i++)
            l->order[i] = whole[(l->o.shard_rank + i * l->o.shard_count) % l->total];
    l->next_claim = l->next_deliver = 0;
    l->started = true;
    int n_dropped = take_ready(l, l->dropped);
    pthread_cond_broadcast(&l->work_cond);
    pthread_mutex_unlock(&l->lock);
    release_all(n_dropped, l->dropped); /* outside the lock: the last release of a buffer frees it */
    if (unread != KILN_OK)
        return kiln__report(unread, "kiln_loader_start_epoch",
                            "epoch %lld started, but epoch %lld stopped at its failed batch %lld (%s) and its later "
                            "batches were never read: loop until kiln_loader_next returns KILN_DONE and check every "
                            "other status (see kiln/data.h)",
                            (long long)epoch, (long long)l->unread_epoch, (long long)l->unread_batch,
                            kiln_status_str(unread));
    return KILN_OK;
}

kiln_status kiln_loader_next(kiln_loader *l, kiln_tensor *inputs, kiln_tensor *targets) {
    static const char op[] = "kiln_loader_next";
    if (inputs) *inputs = KILN_NONE;
    if (targets) *targets = KILN_NONE;
    if (!l || !inputs || !targets) return kiln__report(KILN_ERR_NULL, op, "loader or output pointer is NULL");
    KILN__OBJECT_OR_RETURN(l, KILN__LOADER_KIND, op, kiln_last_status());
    if (!l->started) kiln_loader_start_epoch(l, 0);
    l->unread_status = KILN_OK; /* the loop went on after a failure: it saw it */
    int64_t k_now = l->next_deliver;
    batch b;
    if (l->o.workers == 0) { /* no threads: the caller assembles the batch itself */
        if (l->next_deliver >= l->batches) return KILN_DONE;
        int64_t k = l->next_deliver++, count = batch_count(l, k);
        memcpy(l->workers[0].indices, l->order + k * l->o.batch_size, sizeof(int64_t) * (size_t)count);
        assemble(l, &l->workers[0], k, count, l->epoch, atomic_load(&l->generation), &b);
    } else {
        pthread_mutex_lock(&l->lock);
        if (l->next_deliver >= l->batches) {
            pthread_mutex_unlock(&l->lock);
            return KILN_DONE;
        }
        slot *s = &l->slots[l->next_deliver % l->n_slots];
        while (!s->ready) pthread_cond_wait(&l->ready_cond, &l->lock);
        b = s->b;
        s->ready = false;
        l->next_deliver++;
        pthread_cond_signal(&l->work_cond); /* one more batch may be claimed */
        pthread_mutex_unlock(&l->lock);
    }
    if (b.status != KILN_OK) {
        l->unread_status = b.status;
        l->unread_epoch = l->epoch;
        l->unread_batch = k_now;
        return kiln__report(b.status, op, "%s", b.msg);
    }
    *inputs = b.x;
    *targets = b.y;
    return KILN_OK;
}
