/* The data loader on the OpenCL device: each batch arrives on the device with the bytes the CPU
 * loader gives for the same seed (0 and 2 workers, a last short batch), the caller computes on
 * each batch while later ones are copied, and with workers every host-to-device copy of a
 * batch runs on a worker's stream (the profiler's stream ids), not on the caller's: it does not
 * queue behind the caller's device work, and its tensor reaches the caller's stream through a
 * device event. Skipped (exit 77) without an OpenCL device. */
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
 * and how many host-to-device copies ran on another stream (*elsewhere) or on it (*here). */
static void copy_streams(kiln_dataset *ds, int workers, int *copies, int *elsewhere, int *here) {
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
    *copies = *elsewhere = *here = 0;
    for (size_t i = 0; i < n; i++) {
        if (strcmp(ev[i].kernel, "COPY") != 0 || !ev[i].on_device) continue;
        ++*copies;
        if (ev[i].stream == caller) ++*here;
        else ++*elsewhere;
    }
    free(ev);
}

KT_TEST(loader_copies_on_worker_streams) {
    kiln_dataset_desc d = {.input_dtype = KILN_F32, .target_dtype = KILN_I64, .input_shape = KILN_SHAPE(3),
                           .target_shape = KILN_SCALAR_SHAPE, .length = length, .get = get};
    kiln_dataset *ds = kiln_dataset_new(d, NULL);
    int copies, elsewhere, here;
    copy_streams(ds, 2, &copies, &elsewhere, &here);
    int batches = (N_SAMPLES + BATCH - 1) / BATCH;
    KT_CHECK_MSG(copies >= 2 * batches && here == 0, "workers 2: %d copies, %d on the caller's stream", copies, here);
    copy_streams(ds, 0, &copies, &elsewhere, &here); /* no workers: the caller copies */
    KT_CHECK_MSG(copies >= 2 * batches && elsewhere == 0, "workers 0: %d copies, %d elsewhere", copies, elsewhere);
    kiln_dataset_free(ds);
}
#endif

int main(void) {
#if KILN_HAVE_OPENCL
    if (kiln_device_count(KILN_KIND_OPENCL) > 0) {
        KT_RUN(loader_device_batches);
        KT_RUN(loader_copies_on_worker_streams);
        return kt_finish();
    }
#endif
    printf("no OpenCL device (or a build without OpenCL): skipped\n");
    return 77; /* ctest's skip */
}
