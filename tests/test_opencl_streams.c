/* Device streams: each thread's stream has its own OpenCL queue (released when the thread's
 * stream ends), and work crossing streams waits on device events. Two threads computing
 * independent chains; a tensor made on one stream, read on another while the first writes it
 * in place; CPU -> device -> CPU chains handed between threads; a device op failing while it
 * runs poisons what another stream computes from it and is reported once; a read waits for
 * its own tensor, not for the rest of its stream; copies from the host through pinned staging
 * buffers; a copy from the host into a buffer kernels were still reading; the profiler's device
 * times. Results
 * against the CPU's. Skipped (exit 77)
 * without an OpenCL device. */
#include <kiln.h>
#include <pthread.h>
#include <stdint.h>
#include <time.h>
#include <unistd.h>

#include "kiln_test.h"
#if KILN_HAVE_OPENCL
#include "backend/opencl/opencl-impl.h"

#define DEV KILN_OPENCL

#include "opencl_compare.h"
#include "opencl_handoff.h"

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int queues_of_device(void) {
    kiln__opencl_device *d = kiln__opencl_device_of(DEV);
    if (!d) return -1;
    pthread_mutex_lock(&d->queue_lock);
    int n = d->n_queues;
    pthread_mutex_unlock(&d->queue_lock);
    return n;
}

/* A chain of device ops from x (consumed): matmuls keep each queue busy for a while. */
static kiln_tensor chain(kiln_tensor x, kiln_tensor w, int steps) {
    for (int i = 0; i < steps; i++) x = kiln_tanh(kiln_add_scalar(kiln_matmul(x, kiln_ref(w)), 0.25));
    kiln_release(w);
    return x;
}

/* ---- independent chains on two streams ---------------------------------------------------- */
typedef struct {
    int seed;
    int bad;
    pthread_barrier_t *both_running;
} indep_arg;

static void *indep_worker(void *p) {
    indep_arg *a = p;
    kiln_tensor x = kiln_randn(KILN_CPU, KILN_F32, KILN_SHAPE(64, 96), (uint64_t)a->seed);
    kiln_tensor w = kiln_mul_scalar(kiln_randn(KILN_CPU, KILN_F32, KILN_SHAPE(96, 96), (uint64_t)a->seed + 100), 0.1);
    kiln_tensor xd = kiln_to_device(kiln_ref(x), DEV), wd = kiln_to_device(kiln_ref(w), DEV);
    if (kiln_sync() != KILN_OK) a->bad++; /* the stream's first device ops have run: it has a queue */
    kiln_tensor got = chain(xd, wd, 12);
    pthread_barrier_wait(a->both_running); /* both streams have queues on the device now */
    pthread_barrier_wait(a->both_running); /* the main thread has counted them */
    kiln_tensor want = chain(x, w, 12);
    int64_t n;
    double *g = read_f64(got, &n), *r = read_f64(want, &n);
    for (int64_t i = 0; g && r && i < n; i++)
        if (fabs(g[i] - r[i]) > 1e-4 * fabs(r[i]) + 1e-5) a->bad++;
    if (!g || !r) a->bad++;
    free(g);
    free(r);
    if (kiln_sync() != KILN_OK) a->bad++;
    return NULL;
}

KT_TEST(independent_streams) {
    kiln_release(kiln_ones(DEV, KILN_F32, KILN_SHAPE(1))); /* (opens the device) */
    KT_CHECK(kiln_sync() == KILN_OK);
    int before = queues_of_device();
    pthread_barrier_t both;
    pthread_barrier_init(&both, NULL, 3);
    pthread_t t[2];
    indep_arg a[2] = {{.seed = 1, .both_running = &both}, {.seed = 2, .both_running = &both}};
    for (int i = 0; i < 2; i++) pthread_create(&t[i], NULL, indep_worker, &a[i]);
    pthread_barrier_wait(&both);
    int during = queues_of_device();
    pthread_barrier_wait(&both);
    for (int i = 0; i < 2; i++) pthread_join(t[i], NULL);
    pthread_barrier_destroy(&both);
    KT_CHECK(a[0].bad == 0 && a[1].bad == 0);
    /* one queue per stream that used the device (the threads' streams and maybe this one) */
    KT_CHECK_MSG(during >= before + 2, "%d queues before, %d with two more streams", before, during);
    /* each ended stream's queue is released once its last op has run */
    KT_CHECK(kiln_sync_all() == KILN_OK);
    int after = queues_of_device();
    /* (up to 60 s: a loaded machine may run the last ops late; an idle one settles at once) */
    for (int i = 0; i < 6000 && after > before; i++) usleep(10000), after = queues_of_device();
    KT_CHECK_MSG(after == before, "%d queues before, %d after the streams ended", before, after);
}

/* ---- a tensor crossing streams ------------------------------------------------------------ */
/* The consumer: its own queue busy first, then it reads the producer's x (not yet computed
 * when it is queued) and hands back what it made. */
static void *consumer(void *p) {
    handoff *h = p;
    kiln_tensor w = kiln_to_device(kiln_mul_scalar(kiln_randn(KILN_CPU, KILN_F32, KILN_SHAPE(96, 96), 9), 0.1), DEV);
    kiln_tensor busy = chain(kiln_ones(DEV, KILN_F32, KILN_SHAPE(64, 96)), kiln_ref(w), 8);
    await(h, 1);
    h->result = kiln_add(kiln_matmul(h->x, w), busy); /* consumes its handle to x */
    h->back = kiln_to_device(kiln_exp(kiln_ref(h->result)), KILN_CPU);
    hand(h, 2);
    return NULL;
}

KT_TEST(dependent_streams) {
    handoff h = {.lock = PTHREAD_MUTEX_INITIALIZER, .cond = PTHREAD_COND_INITIALIZER};
    kiln_tensor xh = kiln_randn(KILN_CPU, KILN_F32, KILN_SHAPE(64, 96), 3);
    kiln_tensor wh = kiln_mul_scalar(kiln_randn(KILN_CPU, KILN_F32, KILN_SHAPE(96, 96), 4), 0.1);
    pthread_t t;
    pthread_create(&t, NULL, consumer, &h);
    /* the producer's chain is queued, not run, when the consumer queues its read of it */
    kiln_tensor x = chain(kiln_to_device(kiln_ref(xh), DEV), kiln_to_device(kiln_ref(wh), DEV), 10);
    hand_over(&h, x);
    /* the consumer's read is queued: writing x in place now must wait for it on the device */
    x = kiln_mul_scalar(x, -3);
    kiln_tensor cpu_sum = kiln_sum(kiln_mul_scalar(h.back, 2)); /* a CPU op on the device's copy */
    pthread_join(t, NULL);
    /* the same on the CPU */
    kiln_tensor w9 = kiln_mul_scalar(kiln_randn(KILN_CPU, KILN_F32, KILN_SHAPE(96, 96), 9), 0.1);
    kiln_tensor rx = chain(xh, wh, 10);
    kiln_tensor rbusy = chain(kiln_ones(KILN_CPU, KILN_F32, KILN_SHAPE(64, 96)), kiln_ref(w9), 8);
    kiln_tensor rresult = kiln_add(kiln_matmul(kiln_ref(rx), w9), rbusy);
    kiln_tensor rsum = kiln_sum(kiln_mul_scalar(kiln_exp(kiln_ref(rresult)), 2));
    compare("consumer's result", h.result, rresult, 1e-4, 1e-5);
    compare("x written after the read", x, kiln_mul_scalar(rx, -3), 1e-4, 1e-5);
    float got, want;
    KT_CHECK(kiln_into_scalar(cpu_sum, &got) == KILN_OK);
    KT_CHECK(kiln_into_scalar(rsum, &want) == KILN_OK);
    KT_NEAR(got, want, 1e-4);
    KT_CHECK(kiln_sync() == KILN_OK);
}

/* ---- a failure on one stream, read on another ----------------------------------------------- */
KT_TEST(failure_across_streams) {
    failure_handed_over(DEV);
    /* the device goes on working after the failure */
    compare("after a failure", kiln_exp(kiln_ones(DEV, KILN_F32, KILN_SHAPE(3))), kiln_exp(kiln_ones(KILN_CPU, KILN_F32, KILN_SHAPE(3))), 1e-6, 0);
}

/* ---- a read waits for its tensor only --------------------------------------------------------- */
/* A small tensor read while a slow chain runs on the same stream: the read returns first.
 * Returns the chain's matmul count. (512 x 512 products: with PoCL's GEMM kernels in registers
 * 24 products of 256 x 256 took a few ms, no longer than a read.) */
static int read_during_chain(void) {
    kiln_tensor small = kiln_full(DEV, KILN_F32, KILN_SHAPE(4), 2.5);
    kiln_tensor w = kiln_mul_scalar(kiln_randn(DEV, KILN_F32, KILN_SHAPE(512, 512), 5), 0.04);
    KT_CHECK(kiln_sync() == KILN_OK);
    double t0 = now_s();
    kiln_tensor slow = chain(kiln_ones(DEV, KILN_F32, KILN_SHAPE(512, 512)), w, 24);
    float v[4];
    KT_CHECK(kiln_into_data(small, v, sizeof v) == KILN_OK && v[0] == 2.5f && v[3] == 2.5f);
    double t_read = now_s() - t0;
    KT_CHECK(kiln_sync() == KILN_OK);
    double t_all = now_s() - t0;
    /* (synchronous mode runs the chain at dispatch: the read then finds it done) */
    KT_CHECK_MSG(t_read < 0.5 * t_all || !kiln_engine_is_async(), "read %.3f s, all %.3f s", t_read, t_all);
    kiln_release(slow);
    return 24;
}

KT_TEST(read_waits_for_its_tensor) { read_during_chain(); }

/* ---- copies from the host through pinned staging buffers ------------------------------------ */
/* Bytes of staging buffers made, once all are back in the cache (waits up to 60 s, as long as a
 * loaded machine may need; an idle one settles at once). */
static size_t staging_settled(kiln__opencl_device *d) {
    size_t free_bytes = 0, made = kiln__opencl_staging_count(d, &free_bytes);
    for (int i = 0; i < 12000 && free_bytes != made; i++) usleep(5000), made = kiln__opencl_staging_count(d, &free_bytes);
    return made;
}

/* Host tensors copied to the device and changed (or freed) right after: each copy took its
 * source when it ran, the staging buffers all come back, and copies reuse them. */
KT_TEST(staged_copies) {
    kiln_tensor acc = kiln_zeros(DEV, KILN_F32, KILN_SHAPE(1000));
    KT_CHECK(kiln_sync() == KILN_OK);
    kiln__opencl_device *d = kiln__opencl_device_of(DEV); /* (opened by the first op on it: run alone, this is it) */
    KT_CHECK(d != NULL);
    if (!d) return;
    kiln_tensor h = kiln_zeros(KILN_CPU, KILN_F32, KILN_SHAPE(1000));
    for (int i = 0; i < 200; i++) {
        h = kiln_add_scalar(h, 1); /* in place after the copy below read it */
        acc = kiln_add(acc, kiln_to_device(kiln_ref(h), DEV));
        kiln_release(kiln_to_device(kiln_randn(KILN_CPU, KILN_F32, KILN_SHAPE(5000), (uint64_t)i), DEV)); /* source freed */
    }
    /* acc = 1 + 2 + ... + 200 */
    compare("staged sum", acc, kiln_full(KILN_CPU, KILN_F32, KILN_SHAPE(1000), 200.0 * 201 / 2), 0, 0);
    KT_CHECK(kiln_sync() == KILN_OK);
    /* every staging buffer comes back once its write is done (an event callback, soon after) */
    size_t made = staging_settled(d);
    KT_CHECK_MSG(made > 0 && made < 200 * ((size_t)4096 + 32768), "%zu staging bytes for 400 copies", made);
    /* copies one at a time reuse what was made */
    for (int i = 0; i < 20; i++) {
        staging_settled(d);
        compare("one staged copy", kiln_to_device(kiln_full(KILN_CPU, KILN_F32, KILN_SHAPE(5000), i), DEV),
                kiln_full(KILN_CPU, KILN_F32, KILN_SHAPE(5000), i), 0, 0);
    }
    KT_CHECK(staging_settled(d) == made);
    kiln_release(h);
}

/* ---- a copy from the host into a buffer that kernels were still reading --------------------- */
/* Eight SGD steps of a small MLP whose labels are copied from the host at each step
 * (kiln_from_data: a blocking write on the transfer queue into a buffer the cache hands back),
 * losses against the CPU's. The engine runs the backward's independent ops on both workers,
 * and a buffer's read events once came out of enqueue order: the copy waited for an earlier
 * read than the last, and overwrote labels a kernel was still reading (about 2% of runs). */
static void sgd_losses(kiln_device dev, float losses[8]) {
    kiln_tensor w1 = kiln_to_device(kiln_randn(KILN_CPU, KILN_F32, KILN_SHAPE(8, 6), 31), dev);
    kiln_tensor b1 = kiln_zeros(dev, KILN_F32, KILN_SHAPE(6));
    kiln_tensor w2 = kiln_to_device(kiln_randn(KILN_CPU, KILN_F32, KILN_SHAPE(6, 3), 32), dev);
    kiln_tensor params[3] = {w1, b1, w2}, kept[8];
    for (int i = 0; i < 3; i++) kiln_require_grad(params[i]);
    kiln_sgd_options o = kiln_sgd_defaults();
    o.lr = 0.1;
    kiln_optimizer *opt = kiln_sgd_new_params(3, params, o);
    int64_t labels[5] = {0, 2, 1, 1, 0};
    for (int step = 0; step < 8; step++) {
        kiln_tensor x = kiln_to_device(kiln_randn(KILN_CPU, KILN_F32, KILN_SHAPE(5, 8), 40 + (uint64_t)step), dev);
        kiln_tensor h = kiln_relu(kiln_add(kiln_matmul(x, kiln_ref(w1)), kiln_ref(b1)));
        kiln_tensor loss = kiln_cross_entropy(kiln_matmul(h, kiln_ref(w2)),
                                              kiln_from_data(dev, KILN_I64, KILN_SHAPE(5), labels),
                                              kiln_cross_entropy_defaults());
        kept[step] = kiln_ref(loss);
        kiln_grads *g = NULL;
        KT_CHECK(kiln_backward(loss, &g) == KILN_OK);
        KT_CHECK(kiln_optimizer_step(opt, g) == KILN_OK);
        kiln_grads_free(g);
    }
    for (int step = 0; step < 8; step++)
        KT_CHECK(kiln_into_data(kiln_to_device(kept[step], KILN_CPU), &losses[step], sizeof(float)) == KILN_OK);
    kiln_optimizer_free(opt);
    for (int i = 0; i < 3; i++) kiln_release(params[i]);
}

KT_TEST(host_copy_into_a_buffer_still_read) {
    float want[8], got[8];
    sgd_losses(KILN_CPU, want);
    int bad_runs = 0;
    for (int run = 0; run < 300; run++) {
        sgd_losses(DEV, got);
        for (int step = 0; step < 8; step++)
            if (fabsf(got[step] - want[step]) > 1e-5f) {
                bad_runs++;
                break;
            }
    }
    KT_CHECK_MSG(bad_runs == 0, "%d of 300 device runs lost their labels", bad_runs);
}

/* ---- the profiler: device times from the queue's events ---------------------------------------- */
/* The same with the profiler on (it does not wait for each kernel): the chain's matmuls carry
 * device times, in order on their stream's queue, and the trace shows them on a device track. */
KT_TEST(profiler_device_times) {
    kiln_profiler_start();
    int matmuls = read_during_chain();
    kiln_profiler_stop();
    size_t n = kiln_profiler_events(NULL, 0);
    kiln_profile_event *ev = calloc(n ? n : 1, sizeof *ev);
    n = kiln_profiler_events(ev, n);
    int on_device = 0, in_order = 0;
    double last_end = -1;
    for (size_t i = 0; i < n; i++) {
        if (strcmp(ev[i].op, "kiln_matmul") != 0) continue;
        KT_CHECK(ev[i].on_device && ev[i].end_us > ev[i].start_us && ev[i].start_us >= ev[i].dispatch_us);
        on_device += ev[i].on_device;
        in_order += ev[i].start_us >= last_end - 5; /* (clocks put together within a few us) */
        last_end = ev[i].end_us;
    }
    KT_CHECK_MSG(on_device == matmuls && in_order == matmuls, "%d matmuls, %d with device times, %d in order", matmuls,
                 on_device, in_order);
    char path[] = "/tmp/kiln_opencl_trace_XXXXXX";
    int fd = mkstemp(path);
    KT_CHECK(fd >= 0 && kiln_profiler_write_trace(path) == KILN_OK);
    FILE *f = fdopen(fd, "r");
    char *text = calloc(1 << 22, 1);
    size_t len = f && text ? fread(text, 1, (1 << 22) - 1, f) : 0;
    KT_CHECK(len > 0 && strstr(text, "(device queue)") && strstr(text, "\"device\":true"));
    if (f) fclose(f);
    unlink(path);
    free(text);
    free(ev);
}

#endif

int main(void) {
#if KILN_HAVE_OPENCL
    if (kiln_device_count(KILN_KIND_OPENCL) > 0) {
        KT_RUN(independent_streams);
        KT_RUN(dependent_streams);
        KT_RUN(failure_across_streams);
        KT_RUN(read_waits_for_its_tensor);
        KT_RUN(staged_copies);
        KT_RUN(host_copy_into_a_buffer_still_read);
        KT_RUN(profiler_device_times);
        return kt_finish();
    }
#endif
    printf("no OpenCL device (or a build without OpenCL): skipped\n");
    return 77; /* ctest's skip */
}
