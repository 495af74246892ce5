/* The data loader on the OpenCL device: each batch arrives on the device with the bytes the CPU
 * loader gives for the same seed (0 and 2 workers, a last short batch), the caller computes on
 * each batch while later ones are copied, and every host-to-device copy of a batch runs on a
 * stream other than the caller's (the profiler's stream ids): a worker's, or with no workers
 * the one stream the loader keeps for its copies. So it does not queue behind the caller's
 * device work, and its tensor reaches the caller's stream through a device event; with no
 * workers, batches stay right while the caller's queue is kept busy and batches are released
 * unread. Skipped (exit 77) without an OpenCL device. */
#include <kiln.h>
#include <stdlib.h>
#include <string.h>

#include "kiln_test.h"
#if KILN_HAVE_OPENCL
#define DEV KILN_OPENCL
#define N_SAMPLES 53
#define BATCH 8

/* input (i, i + 0.5, -i), target 1000 + i */
static int64_t length(void *ctx) {
    (void)ctx;
    return N_SAMPLES;
}

static kiln_status get(void *ctx, int64_t i, void *in, void *tg, uint64_t seed) {
    (void)ctx, (void)seed;
    float *x = in;
    x[0] = (float)i, x[1] = (float)i + 0.5f, x[2] = (float)-i;
    *(int64_t *)tg = 1000 + i;
    return KILN_OK;
}

static kiln_loader *loader(kiln_dataset *ds, kiln_device dev, int workers) {
    kiln_loader_options o = kiln_loader_defaults(BATCH);
    o.workers = workers;
    o.seed = 7;
    o.device = dev;
    kiln_loader *l = kiln_loader_new(ds, o);
    KT_CHECK(l != NULL);
    return l;
}

/* One epoch on the device beside one on the CPU: equal bytes, the device's batches on the
 * device; the caller doubles each device batch and sums it (its own stream's work). */
static void epoch_matches(kiln_dataset *ds, int workers) {
    kiln_loader *ld = loader(ds, DEV, workers), *lc = loader(ds, KILN_CPU, workers);
    KT_CHECK(kiln_loader_start_epoch(ld, 0) == KILN_OK && kiln_loader_start_epoch(lc, 0) == KILN_OK);
    kiln_tensor xd, yd, xc, yc;
    int batches = 0, bad = 0;
    double total = 0;
    while (kiln_loader_next(ld, &xd, &yd) == KILN_OK) {
        KT_CHECK(kiln_loader_next(lc, &xc, &yc) == KILN_OK);
        KT_CHECK(kiln_tensor_device(xd) == DEV && kiln_tensor_device(yd) == DEV);
        int64_t b = kiln_tensor_shape(xd).dims[0];
        KT_CHECK(b == (batches < N_SAMPLES / BATCH ? BATCH : N_SAMPLES % BATCH));
        float fd[3 * BATCH], fc[3 * BATCH];
        int64_t td[BATCH], tc[BATCH];
        size_t fb = sizeof(float) * 3 * (size_t)b, tb = sizeof(int64_t) * (size_t)b;
        kiln_tensor s = kiln_sum(kiln_mul_scalar(kiln_ref(xd), 2));
        KT_CHECK(kiln_into_data(xd, fd, fb) == KILN_OK && kiln_into_data(xc, fc, fb) == KILN_OK);
        KT_CHECK(kiln_into_data(yd, td, tb) == KILN_OK && kiln_into_data(yc, tc, tb) == KILN_OK);
        bad += memcmp(fd, fc, fb) != 0 || memcmp(td, tc, tb) != 0;
        float sv = 0;
        KT_CHECK(kiln_into_data(s, &sv, sizeof sv) == KILN_OK);
        total += sv;
        kiln_release(s);
        kiln_release(xd), kiln_release(yd), kiln_release(xc), kiln_release(yc);
        batches++;
    }
    KT_CHECK_MSG(bad == 0, "workers %d: %d batches differ from the CPU loader's", workers, bad);
    KT_CHECK(batches == (N_SAMPLES + BATCH - 1) / BATCH);
    /* sum over samples of 2 (i + i + 0.5 - i) = 2 i + 1 */
    KT_CHECK_MSG(total == (double)N_SAMPLES * N_SAMPLES, "workers %d: the device sums add to %g", workers, total);
    kiln_loader_free(ld);
    kiln_loader_free(lc);
}

KT_TEST(loader_device_batches) {
    kiln_dataset_desc d = {.input_dtype = KILN_F32, .target_dtype = KILN_I64, .input_shape = KILN_SHAPE(3),
                           .target_shape = KILN_SCALAR_SHAPE, .length = length, .get = get};
    kiln_dataset *ds = kiln_dataset_new(d, NULL);
    KT_CHECK(ds != NULL);
    epoch_matches(ds, 0);
    epoch_matches(ds, 2);
    kiln_dataset_free(ds);
}

/* The profiler's events of one epoch with `workers`: the stream of the caller's ops (kiln_mul)
 * and how many host-to-device copies ran on another stream (*elsewhere) or on it (*here), on
 * how many streams in all (*streams). */
static void copy_streams(kiln_dataset *ds, int workers, int *copies, int *elsewhere, int *here, int *streams) {
    kiln_loader *l = loader(ds, DEV, workers);
    kiln_profiler_start();
    KT_CHECK(kiln_loader_start_epoch(l, 1) == KILN_OK);
    kiln_tensor x, y;
    while (kiln_loader_next(l, &x, &y) == KILN_OK) {
        kiln_release(kiln_mul(kiln_ref(x), kiln_ref(x)));
        kiln_release(x), kiln_release(y);
    }
    KT_CHECK(kiln_sync() == KILN_OK);
    kiln_profiler_stop();
    kiln_loader_free(l);
    size_t n = kiln_profiler_events(NULL, 0);
    kiln_profile_event *ev = calloc(n + 1, sizeof *ev);
    n = kiln_profiler_events(ev, n);
    int caller = -1;
    for (size_t i = 0; i < n; i++)
        if (strstr(ev[i].op, "kiln_mul")) caller = ev[i].stream; /* alone or fused */
    KT_CHECK(caller >= 0);
    *copies = *elsewhere = *here = *streams = 0;
    int seen[64];
    for (size_t i = 0; i < n; i++) {
        if (strcmp(ev[i].kernel, "COPY") != 0 || !ev[i].on_device) continue;
        ++*copies;
        if (ev[i].stream == caller) ++*here;
        else ++*elsewhere;
        bool known = false;
        for (int k = 0; k < *streams; k++) known |= seen[k] == ev[i].stream;
        if (!known && *streams < 64) seen[(*streams)++] = ev[i].stream;
    }
    free(ev);
}

KT_TEST(loader_copies_on_own_streams) {
    kiln_dataset_desc d = {.input_dtype = KILN_F32, .target_dtype = KILN_I64, .input_shape = KILN_SHAPE(3),
                           .target_shape = KILN_SCALAR_SHAPE, .length = length, .get = get};
    kiln_dataset *ds = kiln_dataset_new(d, NULL);
    int copies, elsewhere, here, streams;
    copy_streams(ds, 2, &copies, &elsewhere, &here, &streams);
    int batches = (N_SAMPLES + BATCH - 1) / BATCH;
    KT_CHECK_MSG(copies >= 2 * batches && here == 0, "workers 2: %d copies, %d on the caller's stream", copies, here);
    /* no workers: the caller copies, on the loader's one copy stream */
    copy_streams(ds, 0, &copies, &elsewhere, &here, &streams);
    KT_CHECK_MSG(copies >= 2 * batches && here == 0 && streams == 1, "workers 0: %d copies, %d on the caller's stream, %d streams",
                 copies, here, streams);
    kiln_dataset_free(ds);
}

/* No workers, the caller's device queue kept busy (a chain of products queued before each
 * batch is asked for): each batch, copied on the loader's stream meanwhile, is the CPU
 * loader's, and the products that use it see it; every other batch is released unread. */
KT_TEST(loader_no_workers_busy_caller) {
    kiln_dataset_desc d = {.input_dtype = KILN_F32, .target_dtype = KILN_I64, .input_shape = KILN_SHAPE(3),
                           .target_shape = KILN_SCALAR_SHAPE, .length = length, .get = get};
    kiln_dataset *ds = kiln_dataset_new(d, NULL);
    kiln_loader *ld = loader(ds, DEV, 0), *lc = loader(ds, KILN_CPU, 0);
    KT_CHECK(kiln_loader_start_epoch(ld, 3) == KILN_OK && kiln_loader_start_epoch(lc, 3) == KILN_OK);
    kiln_tensor w = kiln_mul_scalar(kiln_ones(DEV, KILN_F32, KILN_SHAPE(192, 192)), 1.0 / 192);
    kiln_tensor busy = kiln_ones(DEV, KILN_F32, KILN_SHAPE(192, 192));
    kiln_tensor x, y, xc, yc;
    int bad = 0;
    for (int k = 0; kiln_loader_next(ld, &x, &y) == KILN_OK; k++) {
        KT_CHECK(kiln_loader_next(lc, &xc, &yc) == KILN_OK);
        for (int i = 0; i < 4; i++) busy = kiln_matmul(busy, kiln_ref(w)); /* queued ahead of the batch's use */
        if (k % 2) { /* released unread, its copy maybe still queued */
            kiln_release(x), kiln_release(y), kiln_release(xc), kiln_release(yc);
            continue;
        }
        /* used on the caller's stream after the products: x * (0 sum(busy) + 1) is x */
        kiln_tensor scale = kiln_add_scalar(kiln_mul_scalar(kiln_sum(kiln_ref(busy)), 0), 1);
        kiln_tensor got = kiln_to_device(kiln_mul(x, scale), KILN_CPU);
        int64_t n = kiln_tensor_numel(xc);
        float g[BATCH * 3], want[BATCH * 3];
        int64_t gy[BATCH], wy[BATCH];
        if (kiln_into_data(got, g, sizeof(float) * (size_t)n) != KILN_OK || kiln_into_data(xc, want, sizeof(float) * (size_t)n) != KILN_OK ||
            kiln_into_data(kiln_to_device(y, KILN_CPU), gy, sizeof(int64_t) * (size_t)(n / 3)) != KILN_OK ||
            kiln_into_data(yc, wy, sizeof(int64_t) * (size_t)(n / 3)) != KILN_OK)
            bad++;
        else if (memcmp(g, want, sizeof(float) * (size_t)n) != 0 || memcmp(gy, wy, sizeof(int64_t) * (size_t)(n / 3)) != 0)
            bad++;
    }
    KT_CHECK_MSG(bad == 0, "%d batches differ from the CPU loader's", bad);
    kiln_release(busy), kiln_release(w);
    kiln_loader_free(ld);
    kiln_loader_free(lc);
    KT_CHECK(kiln_sync() == KILN_OK);
    kiln_dataset_free(ds);
}
#endif

int main(void) {
#if KILN_HAVE_OPENCL
    if (kiln_device_count(KILN_KIND_OPENCL) > 0) {
        KT_RUN(loader_device_batches);
        KT_RUN(loader_copies_on_own_streams);
        KT_RUN(loader_no_workers_busy_caller);
        return kt_finish();
    }
#endif
    printf("no OpenCL device (or a build without OpenCL): skipped\n");
    return 77; /* ctest's skip */
}
