/* kiln data: datasets, transforms and a multi-threaded data loader. Loader workers
 * assemble whole batches on their own threads (each with its own stream) and hand them
 * over through a bounded prefetch queue; a batch reaches the device in one transfer.
 *
 *   kiln_dataset *train = kiln_idx_dataset_new(".../train-images-idx3-ubyte.gz",
 *                                              ".../train-labels-idx1-ubyte.gz");
 *   kiln_loader_options o = kiln_loader_defaults(128);   // batch 128, 2 workers, shuffled
 *   kiln_loader *loader = kiln_loader_new(train, o);
 *   kiln_tensor x, y;
 *   for (int epoch = 0; epoch < 5; epoch++) {
 *       kiln_loader_start_epoch(loader, epoch);
 *       kiln_status st;
 *       while ((st = kiln_loader_next(loader, &x, &y)) != KILN_DONE) {  // not "== KILN_OK"
 *           if (st != KILN_OK) { fprintf(stderr, "%s\n", kiln_last_error()); continue; }  // or stop
 *           ...
 *       }
 *   }
 *   kiln_loader_free(loader);                               // also fine mid-epoch
 *   kiln_dataset_free(train);
 */
#ifndef KILN_DATA_H
#define KILN_DATA_H

#include "core.h"

#ifdef __cplusplus
extern "C" {
#endif

/* A dataset of samples (input, target) of fixed shapes and dtypes. get() writes one
 * sample into the two buffers (dense, of the declared shapes); `seed` varies per sample and
 * epoch, for random transforms. get() may be called from several threads at once. */
typedef struct {
    kiln_dtype input_dtype, target_dtype;
    kiln_shape input_shape, target_shape; /* of one sample */
    int64_t (*length)(void *ctx);
    kiln_status (*get)(void *ctx, int64_t index, void *input, void *target, uint64_t seed);
    void (*free)(void *ctx); /* may be NULL */
} kiln_dataset_desc;

typedef struct kiln_dataset kiln_dataset;
/* On failure ctx is freed through desc.free. */
KILN_API kiln_dataset *kiln_dataset_new(kiln_dataset_desc desc, void *ctx);
/* Host copies of inputs [N, ...] and targets [N, ...] (both consumed). */
KILN_API kiln_dataset *kiln_memory_dataset_new(kiln_tensor inputs, kiln_tensor targets);
/* MNIST-format IDX files (gzip'd or not): images become f32 in [0, 1] of shape [1, H, W];
 * labels i64 scalars. NULL with kiln_last_error on a missing, truncated or corrupt file. */
KILN_API kiln_dataset *kiln_idx_dataset_new(const char *images_path, const char *labels_path);
KILN_API int64_t kiln_dataset_length(const kiln_dataset *ds);
/* One sample, for inspection: input and target as tensors (transforms use the seed a loader
 * with seed 0 would use in epoch 0). */
KILN_API kiln_status kiln_dataset_get(kiln_dataset *ds, int64_t index, kiln_tensor *input, kiln_tensor *target);
KILN_API void kiln_dataset_free(kiln_dataset *ds);

/* ---- transforms: each wraps a dataset (taking it, on failure too) and returns the result -- */
/* (x - mean) / std, per channel (dim 0 of the input) or one value for all when n == 1. */
KILN_API kiln_dataset *kiln_transform_normalize(kiln_dataset *base, int n, const double *mean, const double *std);
/* Pads H and W by `padding` (zeros) and crops a random window of the original size. */
KILN_API kiln_dataset *kiln_transform_random_crop(kiln_dataset *base, int padding);
KILN_API kiln_dataset *kiln_transform_random_hflip(kiln_dataset *base, double p);

/* ---- loader ---------------------------------------------------------------------------------- */
/* Fields left 0 take their defaults where 0 means nothing else (prefetch 4, shard_count 1);
 * batch_size is required (0 is refused); workers 0, shuffle and drop_last false are choices and
 * read as written (kiln_loader_defaults gives 2 workers and shuffling). */
typedef struct {
    int64_t batch_size;
    int workers;       /* threads assembling batches (0: on the calling thread; at most 256) */
    int prefetch;      /* batches being assembled or ready ahead, at most (unused with 0 workers; 0: 4) */
    bool shuffle;
    bool drop_last;
    uint64_t seed;     /* shuffling and transform randomness */
    kiln_device device;
    /* Data parallelism: this process's part of each epoch. Every shard shuffles the whole
     * dataset with the same seed, pads it by wrapping around to a multiple of shard_count, and
     * takes every shard_count-th sample from position shard_rank: the shards are distinct
     * (but for the few padded samples) and have equal batch counts. Typically
     * kiln_dist_rank() and kiln_dist_world_size(); defaults 0 and 1 (0 counts as 1). */
    int shard_rank, shard_count;
} kiln_loader_options;
KILN_API kiln_loader_options kiln_loader_defaults(int64_t batch_size); /* 2 workers, prefetch 4, shuffle */

typedef struct kiln_loader kiln_loader;
/* The loader borrows ds: it must outlive the loader. next, start_epoch and free must be
 * called from one thread. */
KILN_API kiln_loader *kiln_loader_new(kiln_dataset *ds, kiln_loader_options o);
/* Starts (or restarts) an epoch: order = shuffle(seed, epoch); every sample once. */
KILN_API kiln_status kiln_loader_start_epoch(kiln_loader *l, int64_t epoch);
/* The next batch: inputs [B, ...], targets [B, ...]. KILN_DONE (1, not an error) after the
 * last batch. Without a start_epoch first, epoch 0 runs. A batch whose sample failed returns
 * that error (< 0, naming the sample, KILN_NONE in both outputs); the next call moves on to
 * the following batch. So loop until KILN_DONE, not while KILN_OK (which would end the epoch
 * at a failed batch without a word): see the example above. A failure that ended the loop
 * (no kiln_loader_next after it) is reported again by the next kiln_loader_start_epoch,
 * which returns its status (the new epoch still starts). */
KILN_API kiln_status kiln_loader_next(kiln_loader *l, kiln_tensor *inputs, kiln_tensor *targets);
KILN_API int64_t kiln_loader_batches(const kiln_loader *l); /* per epoch */
KILN_API void kiln_loader_free(kiln_loader *l); /* stops the workers, mid-epoch too */

/* ---- call sites ------------------------------------------------------------------------- */
/* The calls that record the caller's file:line, as in core.h's list. */
#define KILN_DATA_API(X) \
    X(kiln_dataset *, dataset_new, (kiln_dataset_desc desc, void *ctx), (desc, ctx)) \
    X(kiln_dataset *, memory_dataset_new, (kiln_tensor inputs, kiln_tensor targets), (inputs, targets)) \
    X(kiln_dataset *, idx_dataset_new, (const char *images_path, const char *labels_path), (images_path, labels_path)) \
    X(kiln_status, dataset_get, (kiln_dataset *ds, int64_t index, kiln_tensor *input, kiln_tensor *target), (ds, index, input, target)) \
    X(kiln_dataset *, transform_normalize, (kiln_dataset *base, int n, const double *mean, const double *std), (base, n, mean, std)) \
    X(kiln_dataset *, transform_random_crop, (kiln_dataset *base, int padding), (base, padding)) \
    X(kiln_dataset *, transform_random_hflip, (kiln_dataset *base, double p), (base, p)) \
    X(kiln_loader *, loader_new, (kiln_dataset *ds, kiln_loader_options o), (ds, o)) \
    X(kiln_status, loader_start_epoch, (kiln_loader *l, int64_t epoch), (l, epoch)) \
    X(kiln_status, loader_next, (kiln_loader *l, kiln_tensor *inputs, kiln_tensor *targets), (l, inputs, targets))
KILN_DATA_API(KILN__AT_DECLARE)

#if !defined(KILN_BUILDING) && !defined(KILN_NO_CALL_SITE_MACROS)
#pragma GCC system_header /* see core.h: errors in these calls name the caller's line */
#define kiln_dataset_new(...) KILN__AT(dataset_new, __VA_ARGS__)
#define kiln_memory_dataset_new(...) KILN__AT(memory_dataset_new, __VA_ARGS__)
#define kiln_idx_dataset_new(...) KILN__AT(idx_dataset_new, __VA_ARGS__)
#define kiln_dataset_get(...) KILN__AT(dataset_get, __VA_ARGS__)
#define kiln_transform_normalize(...) KILN__AT(transform_normalize, __VA_ARGS__)
#define kiln_transform_random_crop(...) KILN__AT(transform_random_crop, __VA_ARGS__)
#define kiln_transform_random_hflip(...) KILN__AT(transform_random_hflip, __VA_ARGS__)
#define kiln_loader_new(...) KILN__AT(loader_new, __VA_ARGS__)
#define kiln_loader_start_epoch(...) KILN__AT(loader_start_epoch, __VA_ARGS__)
#define kiln_loader_next(...) KILN__AT(loader_next, __VA_ARGS__)
#endif

#ifdef __cplusplus
}
#endif
/* The free calls record their file:line too: a later use of the freed object names it. */
KILN__FREE_AT_DECLARE(kiln_dataset, dataset_free)
KILN__FREE_AT_DECLARE(kiln_loader, loader_free)
#if !defined(KILN_BUILDING) && !defined(KILN_NO_CALL_SITE_MACROS)
#define kiln_dataset_free(...) KILN__AT(dataset_free, __VA_ARGS__)
#define kiln_loader_free(...) KILN__AT(loader_free, __VA_ARGS__)
#endif

#endif
