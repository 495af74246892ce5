/* The data loader: every sample exactly once per epoch (shuffled; batch sizes that do and do
 * not divide the dataset, with and without drop_last; 0, 1, 2 and 4 workers), the same order
 * for the same seed and epoch whatever the workers, another order for another epoch, in-order
 * delivery when workers finish out of order, targets that match their inputs, stopping or
 * restarting at every point of an epoch without deadlock or leak, errors from get() naming
 * the sample, bad arguments, transform randomness per epoch, and one timed pass over the
 * Fashion-MNIST training set when it is installed. Threads: run it under ThreadSanitizer too. */
#include <kiln.h>
#include <time.h>
#include <unistd.h>

#include "core/core-impl.h"
#include "ew_util.h"
#include "kiln_test.h"



/* ---- a dataset whose samples say who they are: input (i, i + 0.5, -i), target 1000 + i;
 * get() fails for `bad_index` and spins `slow` rounds on every fifth sample ------------ */
typedef struct {
    int64_t n, bad_index;
    int slow;
} index_ctx;

static int64_t index_length(void *ctx) { return ((index_ctx *)ctx)->n; }

static kiln_status index_get(void *ctx, int64_t i, void *in, void *tg, uint64_t seed) {
    index_ctx *c = ctx;
    if (i == c->bad_index) return kiln__report(KILN_ERR_CORRUPT, "index dataset", "sample is damaged");
    if (c->slow && i % 5 == 0) { /* uneven work, so workers finish out of order */
        volatile double acc = 0;
        for (int k = 0; k < c->slow; k++) acc = acc + k * 0.5;
        (void)acc;
    }
    float *x = in;
    x[0] = (float)i, x[1] = (float)i + 0.5f, x[2] = (float)-i;
    *(int64_t *)tg = 1000 + i;
    return KILN_OK;
}

static void index_free(void *ctx) { free(ctx); }

static kiln_dataset *index_dataset(int64_t n, int64_t bad_index, int slow) {
    index_ctx *c = malloc(sizeof *c);
    *c = (index_ctx){n, bad_index, slow};
    kiln_dataset_desc d = {.input_dtype = KILN_F32, .target_dtype = KILN_I64, .input_shape = KILN_SHAPE(3),
                           .target_shape = KILN_SCALAR_SHAPE, .length = index_length, .get = index_get, .free = index_free};
    return kiln_dataset_new(d, c);
}

static kiln_loader_options opts(int64_t batch, int workers, int prefetch, bool drop_last, uint64_t seed) {
    kiln_loader_options o = kiln_loader_defaults(batch);
    o.workers = workers;
    o.prefetch = prefetch;
    o.drop_last = drop_last;
    o.seed = seed;
    return o;
}

/* Reads one batch (consumed) of the index dataset: checks shapes and that targets match
 * inputs; appends the sample indices to order. Returns its size, or -1. */
static int64_t read_batch(kiln_tensor x, kiln_tensor y, int64_t *order) {
    kiln_shape sx = kiln_tensor_shape(x), sy = kiln_tensor_shape(y);
    int64_t b = sx.dims[0];
    KT_CHECK(sx.ndim == 2 && sx.dims[1] == 3 && sy.ndim == 1 && sy.dims[0] == b);
    KT_CHECK(kiln_tensor_dtype(x) == KILN_F32 && kiln_tensor_dtype(y) == KILN_I64);
    float *xv = malloc(sizeof(float) * 3 * (size_t)(b + 1));
    int64_t *yv = malloc(sizeof(int64_t) * (size_t)(b + 1));
    bool ok = kiln_into_data(x, xv, sizeof(float) * 3 * (size_t)b) == KILN_OK &&
              kiln_into_data(y, yv, sizeof(int64_t) * (size_t)b) == KILN_OK;
    KT_CHECK(ok);
    int bad = 0;
    for (int64_t r = 0; ok && r < b; r++) {
        bad += xv[3 * r + 1] != xv[3 * r] + 0.5f || xv[3 * r + 2] != -xv[3 * r] || yv[r] != 1000 + (int64_t)xv[3 * r];
        order[r] = (int64_t)xv[3 * r];
    }
    KT_CHECK_MSG(bad == 0, "%d rows whose target does not match the input", bad);
    free(xv);
    free(yv);
    return ok ? b : -1;
}

/* Runs a whole epoch; checks batch sizes, count, and that no sample repeats. Writes the
 * delivered order (n entries at most) and returns how many samples came. */
static int64_t run_epoch(kiln_loader *l, int64_t n, int64_t batch, bool drop_last, int64_t *order) {
    int64_t got = 0, batches = 0;
    kiln_tensor x, y;
    kiln_status st;
    while ((st = kiln_loader_next(l, &x, &y)) == KILN_OK) {
        int64_t b = read_batch(x, y, order + got);
        if (b < 0) return -1;
        bool last = got + b == n || (drop_last && got + 2 * batch > n);
        KT_CHECK_MSG(b == batch || (last && !drop_last), "batch %lld has %lld samples", (long long)batches, (long long)b);
        got += b, batches++;
    }
    KT_CHECK_MSG(st == KILN_DONE, "status %s: %s", kiln_status_str(st), kiln_last_error());
    KT_CHECK(x.id == 0 && y.id == 0);
    KT_CHECK(kiln_loader_next(l, &x, &y) == KILN_DONE); /* and stays done */
    KT_CHECK(batches == kiln_loader_batches(l));
    KT_CHECK(got == (drop_last ? n / batch * batch : n));
    char *seen = calloc((size_t)n, 1);
    int dup = 0;
    for (int64_t i = 0; i < got; i++) dup += order[i] < 0 || order[i] >= n || seen[order[i]]++;
    KT_CHECK_MSG(dup == 0, "%d samples repeated or out of range", dup);
    free(seen);
    return got;
}

KT_TEST(every_sample_once) {
    ew_mark m = ew_mark_now();
    enum { N = 50 };
    kiln_dataset *ds = index_dataset(N, -1, 0);
    const int64_t batches[] = {1, 3, 7, 10, 50, 64};
    const int workers[] = {0, 1, 2, 4};
    static int64_t ref[N], order[N];
    for (int drop = 0; drop < 2; drop++) {
        int64_t ref_n = -1;
        for (size_t b = 0; b < sizeof batches / sizeof batches[0]; b++) {
            for (int w = 0; w < 4; w++) {
                kiln_loader *l = kiln_loader_new(ds, opts(batches[b], workers[w], 3, drop, 7));
                KT_CHECK(l != NULL);
                if (!l) continue;
                KT_CHECK(kiln_loader_start_epoch(l, 3) == KILN_OK);
                int64_t got = run_epoch(l, N, batches[b], drop, order);
                /* the order depends on (seed, epoch) only: not on workers or batch size */
                if (ref_n < 0) memcpy(ref, order, sizeof ref), ref_n = got;
                int64_t common = got < ref_n ? got : ref_n;
                KT_CHECK_MSG(common == 0 || memcmp(ref, order, sizeof(int64_t) * (size_t)common) == 0,
                             "batch %lld, %d workers: another order", (long long)batches[b], workers[w]);
                kiln_loader_free(l);
            }
        }
    }
    kiln_dataset_free(ds);
    EW_NO_LEAKS(m);
}

KT_TEST(order_by_seed_and_epoch) {
    ew_mark m = ew_mark_now();
    enum { N = 64 };
    kiln_dataset *ds = index_dataset(N, -1, 0);
    static int64_t a[N], b[N], c[N];
    kiln_loader *l1 = kiln_loader_new(ds, opts(8, 2, 4, false, 11));
    kiln_loader *l2 = kiln_loader_new(ds, opts(8, 0, 4, false, 11));
    KT_CHECK(kiln_loader_batches(l1) == 8);
    /* next() before start_epoch runs epoch 0 */
    run_epoch(l1, N, 8, false, a);
    kiln_loader_start_epoch(l2, 0);
    run_epoch(l2, N, 8, false, b);
    KT_CHECK(memcmp(a, b, sizeof a) == 0);
    bool identity = true;
    for (int i = 0; i < N; i++) identity &= a[i] == i;
    KT_CHECK(!identity);
    /* the same epoch again; another epoch; another seed */
    kiln_loader_start_epoch(l1, 0);
    run_epoch(l1, N, 8, false, c);
    KT_CHECK(memcmp(a, c, sizeof a) == 0);
    kiln_loader_start_epoch(l1, 1);
    run_epoch(l1, N, 8, false, c);
    KT_CHECK(memcmp(a, c, sizeof a) != 0);
    kiln_loader *l3 = kiln_loader_new(ds, opts(8, 2, 4, false, 12));
    kiln_loader_start_epoch(l3, 0);
    run_epoch(l3, N, 8, false, c);
    KT_CHECK(memcmp(a, c, sizeof a) != 0);
    kiln_loader_free(l3);
    /* no shuffle: in dataset order, also when workers finish out of order */
    kiln_dataset *slow = index_dataset(N, -1, 20000);
    for (int w = 0; w < 3; w++) {
        kiln_loader_options o = opts(2, w * 2, 6, false, 11);
        o.shuffle = false;
        kiln_loader *l = kiln_loader_new(slow, o);
        for (int epoch = 0; epoch < 2; epoch++) {
            kiln_loader_start_epoch(l, epoch);
            run_epoch(l, N, 2, false, c);
            identity = true;
            for (int i = 0; i < N; i++) identity &= c[i] == i;
            KT_CHECK_MSG(identity, "%d workers, epoch %d: out of order", w * 2, epoch);
        }
        kiln_loader_free(l);
    }
    kiln_dataset_free(slow);
    kiln_loader_free(l1);
    kiln_loader_free(l2);
    kiln_dataset_free(ds);
    EW_NO_LEAKS(m);
}

/* Stop (free) or restart after k batches, for every k; the slow dataset keeps workers busy
 * mid-batch when it happens. */
KT_TEST(early_stop_and_restart) {
    ew_mark m = ew_mark_now();
    enum { N = 40, B = 4 };
    kiln_dataset *ds = index_dataset(N, -1, 3000);
    static int64_t order[N];
    const int workers[] = {0, 1, 2, 4}, prefetch[] = {1, 2, 4};
    for (int w = 0; w < 4; w++) {
        for (int p = 0; p < 3; p++) {
            for (int k = -1; k <= N / B + 1; k++) {
                kiln_loader *l = kiln_loader_new(ds, opts(B, workers[w], prefetch[p], false, 5));
                if (k >= 0) kiln_loader_start_epoch(l, 0); /* k == -1: freed before any epoch */
                kiln_tensor x, y;
                for (int i = 0; i < k; i++) {
                    kiln_status st = kiln_loader_next(l, &x, &y);
                    KT_CHECK(st == (i < N / B ? KILN_OK : KILN_DONE));
                    kiln_release(x);
                    kiln_release(y);
                }
                if (k % 2 == 1 && k < N / B) { /* restart mid-epoch: the new epoch is whole */
                    kiln_loader_start_epoch(l, 1);
                    run_epoch(l, N, B, false, order);
                    kiln_loader_start_epoch(l, 2);
                    if (kiln_loader_next(l, &x, &y) == KILN_OK) kiln_release(x), kiln_release(y);
                }
                kiln_loader_free(l);
            }
        }
        EW_NO_LEAKS(m);
    }
    kiln_dataset_free(ds);
    EW_NO_LEAKS(m);
}

KT_TEST(errors_name_the_sample) {
    ew_mark m = ew_mark_now();
    enum { N = 30, B = 4 };
    kiln_dataset *ds = index_dataset(N, 13, 0);
    static int64_t order[N];
    for (int w = 0; w < 3; w++) {
        for (int shuffle = 0; shuffle < 2; shuffle++) {
            kiln_loader_options o = opts(B, w, 2, false, 3);
            o.shuffle = shuffle;
            kiln_loader *l = kiln_loader_new(ds, o);
            kiln_loader_start_epoch(l, 4);
            int64_t good = 0, failed = 0;
            kiln_tensor x, y;
            for (;;) {
                int line = __LINE__ + 1;
                kiln_status st = kiln_loader_next(l, &x, &y);
                if (st == KILN_DONE) break;
                if (st == KILN_OK) {
                    good += read_batch(x, y, order);
                    continue;
                }
                failed++;
                KT_CHECK(x.id == 0 && y.id == 0);
                KT_EXPECT_ERROR(KILN_ERR_CORRUPT, "kiln_loader_next", line);
                KT_EXPECT_ERROR(KILN_ERR_CORRUPT, "sample 13 (batch", 0);
                KT_EXPECT_ERROR(KILN_ERR_CORRUPT, "of epoch 4): index dataset: sample is damaged", 0);
            }
            KT_CHECK(failed == 1);
            KT_CHECK(good == N - (shuffle ? B : 4 /* batch 3: samples 12..15 */));
            kiln_loader_free(l);
        }
    }
    /* the device transfer failing (no memory): caller's thread, then workers */
    for (int w = 0; w < 3; w += 2) {
        kiln_loader *l = kiln_loader_new(ds, opts(B, w, 2, false, 3));
        kiln_loader_start_epoch(l, 0);
        kiln_tensor x, y;
        kiln_debug_fail_alloc_after(1);
        kiln_status st = kiln_loader_next(l, &x, &y);
        kiln_debug_fail_alloc_after(0);
        if (w == 0) {
            KT_CHECK(st == KILN_ERR_OUT_OF_MEMORY);
            KT_EXPECT_ERROR(KILN_ERR_OUT_OF_MEMORY, "batch 0 of epoch 0", 0);
        }
        kiln_release(x);
        kiln_release(y);
        kiln_loader_free(l);
    }
    kiln_dataset_free(ds);
    EW_NO_LEAKS(m);
}

/* A loop `while (kiln_loader_next(...) == KILN_OK)` stops at a failed batch: the next epoch's
 * start says so (and still starts the epoch); a loop that reads on to KILN_DONE, or one that
 * stops after a good batch, gets no such report. */
KT_TEST(unread_failure_is_reported) {
    ew_mark m = ew_mark_now();
    enum { N = 30, B = 4 };
    kiln_dataset *ds = index_dataset(N, 13, 0); /* batch 3 (samples 12..15) fails */
    for (int w = 0; w < 3; w += 2) {
        kiln_loader_options o = opts(B, w, 2, false, 3);
        o.shuffle = false;
        kiln_loader *l = kiln_loader_new(ds, o);
        kiln_tensor x, y;
        kiln_status st;
        int batches = 0;
        while ((st = kiln_loader_next(l, &x, &y)) == KILN_OK) { /* the loop shape to avoid */
            kiln_release(x);
            kiln_release(y);
            batches++;
        }
        KT_CHECK(st == KILN_ERR_CORRUPT && batches == 3);
        KT_CHECK(kiln_loader_start_epoch(l, 1) == KILN_ERR_CORRUPT); KT_EXPECT_ERROR(KILN_ERR_CORRUPT, "kiln_loader_start_epoch", __LINE__);
        KT_CHECK_MSG(strstr(kiln_last_error(), "epoch 0 stopped at its failed batch 3") != NULL, "%s", kiln_last_error());
        KT_CHECK(strstr(kiln_last_error(), "KILN_DONE") != NULL);
        /* epoch 1 started all the same; read the right way, to KILN_DONE */
        int good = 0, failed = 0;
        while ((st = kiln_loader_next(l, &x, &y)) != KILN_DONE) {
            if (st != KILN_OK) {
                failed++;
                continue;
            }
            good++;
            kiln_release(x);
            kiln_release(y);
        }
        KT_CHECK(good == 7 && failed == 1);
        KT_CHECK(kiln_loader_start_epoch(l, 2) == KILN_OK); /* that failure was seen */
        /* stopping early after a good batch is fine */
        KT_CHECK(kiln_loader_next(l, &x, &y) == KILN_OK);
        kiln_release(x);
        kiln_release(y);
        KT_CHECK(kiln_loader_start_epoch(l, 3) == KILN_OK);
        /* a failure, then a read that goes on: seen */
        for (int k = 0; k < 4; k++) {
            st = kiln_loader_next(l, &x, &y);
            kiln_release(x);
            kiln_release(y);
        }
        KT_CHECK(st == KILN_ERR_CORRUPT);
        KT_CHECK(kiln_loader_next(l, &x, &y) == KILN_OK);
        kiln_release(x);
        kiln_release(y);
        KT_CHECK(kiln_loader_start_epoch(l, 4) == KILN_OK);
        kiln_loader_free(l);
    }
    kiln_dataset_free(ds);
    EW_NO_LEAKS(m);
}

KT_TEST(bad_arguments) {
    ew_mark m = ew_mark_now();
    kiln_dataset *ds = index_dataset(10, -1, 0);
    int line = __LINE__ + 1;
    KT_CHECK(kiln_loader_new(NULL, opts(2, 1, 2, false, 0)) == NULL);
    KT_EXPECT_ERROR(KILN_ERR_NULL, "kiln_loader_new", line);
    line = __LINE__ + 1;
    KT_CHECK(kiln_loader_new(ds, opts(0, 1, 2, false, 0)) == NULL);
    KT_EXPECT_ERROR(KILN_ERR_INVALID_ARGUMENT, "batch_size 0", line);
    KT_CHECK(kiln_loader_new(ds, opts(2, -1, 2, false, 0)) == NULL);
    KT_EXPECT_ERROR(KILN_ERR_INVALID_ARGUMENT, "workers -1", 0);
    KT_CHECK(kiln_loader_new(ds, opts(2, 100000, 2, false, 0)) == NULL);
    KT_EXPECT_ERROR(KILN_ERR_INVALID_ARGUMENT, "workers 100000", 0);
    KT_CHECK(kiln_loader_new(ds, opts(2, 2, -1, false, 0)) == NULL); /* (0 is the default: test_options_defaults) */
    KT_EXPECT_ERROR(KILN_ERR_INVALID_ARGUMENT, "prefetch -1", 0);
    kiln_loader_options o = opts(2, 1, 2, false, 0);
    o.device = KILN_CUDA;
    KT_CHECK(kiln_loader_new(ds, o) == NULL); /* no CUDA in this build */
    KT_EXPECT_ERROR(KILN_ERR_DEVICE, "cuda", 0);
    o.device = KILN_DEVICE_COUNT;
    KT_CHECK(kiln_loader_new(ds, o) == NULL);
    KT_EXPECT_ERROR(KILN_ERR_DEVICE, "kiln_loader_new", 0);
    kiln_tensor keep = kiln_ones(KILN_CPU, KILN_F32, KILN_SHAPE(1)), x = keep, y = keep;
    line = __LINE__ + 1;
    KT_CHECK(kiln_loader_next(NULL, &x, &y) == KILN_ERR_NULL && x.id == 0 && y.id == 0); /* outputs cleared */
    KT_EXPECT_ERROR(KILN_ERR_NULL, "kiln_loader_next", line);
    kiln_release(keep);
    kiln_loader *l = kiln_loader_new(ds, opts(INT64_MAX, 2, 2, false, 0)); /* buffers sized by the data */
    KT_CHECK(l && kiln_loader_batches(l) == 1);
    KT_CHECK(kiln_loader_next(l, &x, &y) == KILN_OK && kiln_tensor_dim(x, 0) == 10 && kiln_tensor_dim(y, 0) == 10);
    kiln_release(x);
    kiln_release(y);
    kiln_loader_free(l);
    l = kiln_loader_new(ds, opts(3, 1, 2, true, 0));
    KT_CHECK(kiln_loader_batches(l) == 3);
    KT_CHECK(kiln_loader_next(l, NULL, &y) == KILN_ERR_NULL);
    KT_CHECK(kiln_loader_start_epoch(NULL, 0) == KILN_ERR_NULL);
    KT_EXPECT_ERROR(KILN_ERR_NULL, "kiln_loader_start_epoch", 0);
    KT_CHECK(kiln_loader_batches(NULL) == -1);
    kiln_loader_free(l);
    kiln_loader_free(NULL);
    /* an empty dataset: no batches */
    kiln_dataset *empty = index_dataset(0, -1, 0);
    l = kiln_loader_new(empty, opts(3, 2, 2, false, 0));
    KT_CHECK(kiln_loader_batches(l) == 0);
    KT_CHECK(kiln_loader_next(l, &x, &y) == KILN_DONE);
    kiln_loader_free(l);
    kiln_dataset_free(empty);
    kiln_dataset_free(ds);
    EW_NO_LEAKS(m);
}

/* A random crop seen through loaders: a sample is the same for the same seed and epoch with
 * any workers, and changes with the epoch. */
KT_TEST(transform_randomness_per_epoch) {
    ew_mark m = ew_mark_now();
    enum { N = 24, P = 16 }; /* images 4 x 4 */
    float img[N][P];
    for (int i = 0; i < N; i++)
        for (int j = 0; j < P; j++) img[i][j] = (float)(1 + j);
    kiln_dataset *ds = kiln_transform_random_crop(
        kiln_memory_dataset_new(kiln_from_data(KILN_CPU, KILN_F32, KILN_SHAPE(N, 1, 4, 4), img),
                                kiln_arange(KILN_CPU, KILN_I64, 0, N, 1)), 1);
    static float seen[3][N][P];
    for (int run = 0; run < 3; run++) { /* epoch 0 with 2 workers, epoch 0 inline, epoch 1 */
        kiln_loader *l = kiln_loader_new(ds, opts(5, run == 1 ? 0 : 2, 2, false, 9));
        kiln_loader_start_epoch(l, run == 2);
        kiln_tensor x, y;
        while (kiln_loader_next(l, &x, &y) == KILN_OK) {
            int64_t b = kiln_tensor_dim(x, 0), idx[5];
            float v[5 * P];
            KT_CHECK(kiln_tensor_ndim(x) == 4 && kiln_tensor_dim(x, 1) == 1);
            KT_CHECK(kiln_into_data(x, v, sizeof(float) * P * (size_t)b) == KILN_OK);
            KT_CHECK(kiln_into_data(y, idx, sizeof(int64_t) * (size_t)b) == KILN_OK);
            for (int64_t r = 0; r < b; r++) memcpy(seen[run][idx[r]], v + r * P, sizeof(float) * P);
        }
        kiln_loader_free(l);
    }
    KT_CHECK(memcmp(seen[0], seen[1], sizeof seen[0]) == 0);
    int changed = 0, cropped = 0;
    for (int i = 0; i < N; i++) {
        changed += memcmp(seen[0][i], seen[2][i], sizeof seen[0][i]) != 0;
        cropped += memcmp(seen[0][i], img[i], sizeof img[i]) != 0;
    }
    KT_CHECK_MSG(changed > N / 2, "only %d of %d samples changed between epochs", changed, N);
    KT_CHECK(cropped > N / 2);
    kiln_dataset_free(ds);
    EW_NO_LEAKS(m);
}

/* One pass over Fashion-MNIST's training set, batch 128, 2 workers (timed). */
KT_TEST(fashion_mnist_pass) {
    const char *img = "/usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz";
    const char *lbl = "/usr/share/datasets/fashion-mnist/train-labels-idx1-ubyte.gz";
    if (access(img, R_OK) != 0) {
        fprintf(stderr, "  (no %s: skipped)\n", img);
        return;
    }
    ew_mark m = ew_mark_now();
    struct timespec t0, t1, t2;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    kiln_dataset *ds = kiln_idx_dataset_new(img, lbl);
    if (!ds && kiln_last_status() == KILN_ERR_UNSUPPORTED) {
        fprintf(stderr, "  (no zlib in this build: skipped)\n");
        return;
    }
    KT_CHECK_MSG(ds != NULL, "%s", kiln_last_error());
    if (!ds) return;
    clock_gettime(CLOCK_MONOTONIC, &t1);
    kiln_loader *l = kiln_loader_new(ds, kiln_loader_defaults(128));
    kiln_loader_start_epoch(l, 0);
    kiln_tensor x, y;
    int64_t samples = 0, batches = 0;
    while (kiln_loader_next(l, &x, &y) == KILN_OK) {
        samples += kiln_tensor_dim(x, 0);
        batches++;
        kiln_release(x);
        kiln_release(y);
    }
    clock_gettime(CLOCK_MONOTONIC, &t2);
    KT_CHECK(samples == 60000 && batches == 469);
    double load = (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec);
    double pass = (double)(t2.tv_sec - t1.tv_sec) + 1e-9 * (double)(t2.tv_nsec - t1.tv_nsec);
    fprintf(stderr, "  Fashion-MNIST train: read %.3f s; one pass (batch 128, 2 workers) %.3f s, %.0f samples/s\n",
            load, pass, (double)samples / pass);
    kiln_loader_free(l);
    kiln_dataset_free(ds);
    EW_NO_LEAKS(m);
}

int main(void) {
    KT_RUN(every_sample_once);
    KT_RUN(order_by_seed_and_epoch);
    KT_RUN(early_stop_and_restart);
    KT_RUN(errors_name_the_sample);
    KT_RUN(unread_failure_is_reported);
    KT_RUN(bad_arguments);
    KT_RUN(transform_randomness_per_epoch);
    KT_RUN(fashion_mnist_pass);
    return kt_finish();
}
