/* Two OpenCL devices (PoCL's CPU twice: POCL_DEVICES="pthread pthread"): tensors moved between
 * them by kiln_to_device (a copy to the host on the source device's stream, then one to the
 * other device: each device's own buffers and events, the engine ordering the two). CPU ->
 * device 0 -> device 1 -> CPU chains with ops on each device against the same ops on the CPU;
 * two threads, one per device, the consumer taking the producer's tensor while the producer's
 * chain is still queued; in-place writes on one device after the other one read the tensor; a
 * failure found while a device-0 kernel runs poisons what device 1 computes from it and is
 * reported once; tensors released while the work that reads them is queued. Skipped (exit 77)
 * with fewer than two OpenCL devices or without OpenCL. */
#include <kiln.h>
#include <pthread.h>
#include <stdint.h>
#include <string.h>

#include "kiln_test.h"
#if KILN_HAVE_OPENCL

#define D0 kiln_opencl_device(0)
#define D1 kiln_opencl_device(1)
#define DEV D1 /* (compare's results are on device 1) */

#include "opencl_compare.h"
#include "opencl_handoff.h"

/* steps of x <- tanh(x w + 0.25) from x and w (consumed), on their device */
static kiln_tensor chain(kiln_tensor x, kiln_tensor w, int steps) {
    for (int i = 0; i < steps; i++) x = kiln_tanh(kiln_add_scalar(kiln_matmul(x, kiln_ref(w)), 0.25));
    kiln_release(w);
    return x;
}

static kiln_tensor weights(int n, uint64_t seed) {
    return kiln_mul_scalar(kiln_randn(KILN_CPU, KILN_F32, KILN_SHAPE(n, n), seed), 0.1);
}

/* ---- CPU -> device 0 -> device 1 -> CPU ------------------------------------------------------ */
/* The device-1 half of a chain: exp(x / 2) * y - column sums of x, from x and y (consumed). */
static kiln_tensor second_half(kiln_tensor x, kiln_tensor y) {
    kiln_tensor cols = kiln_sum_dims(kiln_ref(x), KILN_DIMS(0), true);
    return kiln_sub(kiln_mul(kiln_exp(kiln_mul_scalar(x, 0.5)), y), cols);
}

KT_TEST(chain_across_devices) {
    kiln_tensor x = kiln_randn(KILN_CPU, KILN_F32, KILN_SHAPE(48, 64), 1);
    kiln_tensor y = kiln_randn(KILN_CPU, KILN_F32, KILN_SHAPE(48, 64), 2);
    kiln_tensor w = weights(64, 3);
    /* on device 0, then device 1 (y straight from the host), then back */
    kiln_tensor a0 = chain(kiln_to_device(kiln_ref(x), D0), kiln_to_device(kiln_ref(w), D0), 3);
    KT_CHECK(kiln_tensor_device(a0) == D0);
    kiln_tensor a1 = kiln_to_device(a0, D1);
    KT_CHECK(kiln_tensor_device(a1) == D1);
    kiln_tensor b1 = second_half(a1, kiln_to_device(kiln_ref(y), D1));
    kiln_tensor back = kiln_to_device(kiln_ref(b1), KILN_CPU);
    KT_CHECK(kiln_tensor_device(back) == KILN_CPU);
    /* and device 1 -> device 0 -> device 1 */
    kiln_tensor round = kiln_to_device(kiln_add_scalar(kiln_to_device(kiln_ref(b1), D0), 1), D1);
    /* the same on the CPU */
    kiln_tensor r = second_half(chain(x, w, 3), y);
    compare("device 0 -> device 1", b1, kiln_ref(r), 1e-4, 1e-5);
    compare("back on the host", kiln_to_device(back, D1), kiln_ref(r), 1e-4, 1e-5);
    compare("device 1 -> device 0 -> device 1", round, kiln_add_scalar(r, 1), 1e-4, 1e-5);
    /* a view (not dense) moved between the devices */
    kiln_tensor m = kiln_randn(D0, KILN_F32, KILN_SHAPE(8, 6), 4);
    kiln_tensor mh = kiln_to_device(kiln_ref(m), KILN_CPU);
    compare("transposed view", kiln_to_device(kiln_transpose(m, 0, 1), D1), kiln_transpose(mh, 0, 1), 0, 0);
    /* integers and booleans move bit for bit */
    int64_t iv[5] = {-3, 0, 1, INT64_MAX, INT64_MIN};
    kiln_tensor i1 = kiln_to_device(kiln_to_device(kiln_from_data(KILN_CPU, KILN_I64, KILN_SHAPE(5), iv), D0), D1);
    int64_t got[5];
    KT_CHECK(kiln_tensor_device(i1) == D1 && kiln_into_data(i1, got, sizeof got) == KILN_OK);
    KT_CHECK(memcmp(got, iv, sizeof iv) == 0);
    kiln_tensor b0 = kiln_gt(kiln_randn(D0, KILN_F32, KILN_SHAPE(33), 8), kiln_zeros(D0, KILN_F32, KILN_SHAPE(33)));
    kiln_tensor bh = kiln_to_device(kiln_ref(b0), KILN_CPU);
    compare("bool", kiln_to_device(b0, D1), bh, 0, 0);
    KT_CHECK(kiln_sync() == KILN_OK);
}

/* An op on tensors of two devices is an error naming the op and both devices, not a crash. */
KT_TEST(mixed_devices_rejected) {
    kiln_tensor y = kiln_add(kiln_ones(D0, KILN_F32, KILN_SHAPE(4)), kiln_ones(D1, KILN_F32, KILN_SHAPE(4)));
    float v[4];
    KT_CHECK(kiln_into_data(y, v, sizeof v) == KILN_ERR_DEVICE);
    const char *msg = kiln_last_error();
    KT_CHECK_MSG(strstr(msg, "kiln_add") && strstr(msg, "opencl:0") && strstr(msg, "opencl:1"), "%s", msg);
    KT_CHECK(kiln_sync() == KILN_OK);
}

/* ---- two threads, one per device ------------------------------------------------------------ */
/* (PC_STEPS products of PC_N x PC_N: the producer's chain still runs when the consumer queues
 * its copy of the result; without the copy's wait list the result read is the unfinished one) */
#define PC_N 256
#define PC_STEPS 16

/* Device 1's thread: its own queue busy, then the producer's x (still being computed on
 * device 0) moved here and used; then x written in place here after device 0 read it back. */
static void *consumer(void *p) {
    handoff *h = p;
    kiln_tensor w = kiln_to_device(weights(PC_N, 9), D1);
    kiln_tensor busy = chain(kiln_ones(D1, KILN_F32, KILN_SHAPE(PC_N, PC_N)), kiln_ref(w), 6);
    await(h, 1);
    kiln_tensor x1 = kiln_to_device(h->x, D1); /* consumes the handle */
    h->result = kiln_add(kiln_matmul(kiln_ref(x1), w), busy);
    h->x = kiln_to_device(kiln_ref(x1), D0); /* device 0 reads x1 ... */
    x1 = kiln_mul_scalar(x1, -2);            /* ... before this writes it (in place) */
    hand(h, 2);
    float v;
    if (kiln_into_scalar(kiln_sum(x1), &v) != KILN_OK) h->bad++;
    if (kiln_sync() != KILN_OK) h->bad++;
    return NULL;
}

KT_TEST(producer_and_consumer) {
    handoff h = {.lock = PTHREAD_MUTEX_INITIALIZER, .cond = PTHREAD_COND_INITIALIZER};
    kiln_tensor xh = kiln_randn(KILN_CPU, KILN_F32, KILN_SHAPE(PC_N, PC_N), 5);
    kiln_tensor wh = weights(PC_N, 6);
    pthread_t t;
    pthread_create(&t, NULL, consumer, &h);
    /* the chain is queued (not run) on device 0 when its result is handed over */
    kiln_tensor x = chain(kiln_to_device(kiln_ref(xh), D0), kiln_to_device(kiln_ref(wh), D0), PC_STEPS);
    hand_over(&h, x);
    kiln_tensor echoed = h.x; /* x back on device 0 from device 1, taken before device 1 wrote it */
    x = kiln_add_scalar(x, 1); /* in place on device 0 after device 1's copy read it */
    pthread_join(t, NULL);
    KT_CHECK(h.bad == 0);
    kiln_tensor rx = chain(xh, wh, PC_STEPS);
    kiln_tensor rbusy = chain(kiln_ones(KILN_CPU, KILN_F32, KILN_SHAPE(PC_N, PC_N)), weights(PC_N, 9), 6);
    kiln_tensor rresult = kiln_add(kiln_matmul(kiln_ref(rx), weights(PC_N, 9)), rbusy);
    compare("consumer's result", h.result, rresult, 1e-4, 1e-5);
    compare("x written after device 1 read it", kiln_to_device(x, D1), kiln_add_scalar(kiln_ref(rx), 1), 1e-4, 1e-5);
    compare("x echoed before device 1 wrote it", kiln_to_device(echoed, D1), rx, 1e-4, 1e-5);
    KT_CHECK(kiln_sync() == KILN_OK);
}

/* In place on one device after the other one read it, on one thread: each read sees the
 * value before the write. */
KT_TEST(in_place_after_read) {
    for (int k = 0; k < 20; k++) {
        kiln_tensor x = kiln_full(D0, KILN_F32, KILN_SHAPE(4096), k);
        kiln_tensor y = kiln_to_device(kiln_ref(x), D1);
        x = kiln_mul_scalar(x, 3); /* device 0, after the copy to device 1 read x */
        kiln_tensor z = kiln_to_device(kiln_ref(y), D0);
        y = kiln_add_scalar(y, 1); /* device 1, after the copy to device 0 read y */
        compare("read before the write", kiln_to_device(z, D1), kiln_full(KILN_CPU, KILN_F32, KILN_SHAPE(4096), k), 0, 0);
        compare("written on device 0", kiln_to_device(x, D1), kiln_full(KILN_CPU, KILN_F32, KILN_SHAPE(4096), 3 * k), 0, 0);
        compare("written on device 1", y, kiln_full(KILN_CPU, KILN_F32, KILN_SHAPE(4096), k + 1), 0, 0);
    }
    KT_CHECK(kiln_sync() == KILN_OK);
}

/* ---- a failure on device 0 read on device 1 ------------------------------------------------- */
KT_TEST(failure_across_devices) {
    failure_handed_over(D0);
    int64_t idx[2] = {1, 7};
    /* on one thread: reported once, by the read on device 1 */
    kiln_tensor bad = kiln_one_hot(kiln_from_data(D0, KILN_I64, KILN_SHAPE(2), idx), 3, KILN_F32);
    kiln_tensor y = kiln_sum(kiln_to_device(kiln_mul_scalar(bad, 2), D1));
    float v;
    KT_CHECK(kiln_into_scalar(y, &v) == KILN_ERR_INDEX && strstr(kiln_last_error(), "kiln_one_hot"));
    KT_CHECK(kiln_sync() == KILN_OK);
    KT_CHECK(kiln_sync_all() == KILN_OK);
    /* both devices go on working */
    compare("after a failure", kiln_to_device(kiln_exp(kiln_ones(D0, KILN_F32, KILN_SHAPE(3))), D1),
            kiln_exp(kiln_ones(KILN_CPU, KILN_F32, KILN_SHAPE(3))), 1e-6, 0);
}

/* ---- releases while the work is queued --------------------------------------------------------- */
/* Every intermediate (device 0's chain, its copy on the host and on device 1) is released as
 * soon as the next op is queued; the devices' memory all comes back. */
KT_TEST(release_mid_flight) {
    KT_CHECK(kiln_sync_all() == KILN_OK);
    kiln_memory_stats s0 = kiln_memory_stats_get(D0), s1 = kiln_memory_stats_get(D1);
    kiln_tensor acc = kiln_zeros(D1, KILN_F32, KILN_SHAPE(64, 96));
    kiln_tensor racc = kiln_zeros(KILN_CPU, KILN_F32, KILN_SHAPE(64, 96));
    for (int i = 0; i < 6; i++) {
        kiln_tensor x = kiln_randn(D0, KILN_F32, KILN_SHAPE(64, 96), (uint64_t)(20 + i));
        kiln_tensor rx = kiln_to_device(kiln_ref(x), KILN_CPU);
        kiln_tensor a = chain(x, kiln_to_device(weights(96, 30), D0), 4);
        kiln_tensor moved = kiln_to_device(a, D1); /* a released with its handle consumed */
        acc = kiln_add(acc, kiln_mul_scalar(moved, 0.5));
        kiln_release(kiln_to_device(kiln_exp(kiln_randn(D1, KILN_F32, KILN_SHAPE(256), 7)), D0)); /* never read */
        racc = kiln_add(racc, kiln_mul_scalar(chain(rx, weights(96, 30), 4), 0.5));
    }
    compare("accumulated on device 1", acc, racc, 1e-4, 1e-5);
    KT_CHECK(kiln_sync_all() == KILN_OK);
    kiln_memory_stats e0 = kiln_memory_stats_get(D0), e1 = kiln_memory_stats_get(D1);
    KT_CHECK_MSG(e0.bytes_in_use == s0.bytes_in_use && e1.bytes_in_use == s1.bytes_in_use,
                 "device bytes in use %llu, %llu; were %llu, %llu", (unsigned long long)e0.bytes_in_use,
                 (unsigned long long)e1.bytes_in_use, (unsigned long long)s0.bytes_in_use,
                 (unsigned long long)s1.bytes_in_use);
}

#endif

int main(void) {
#if KILN_HAVE_OPENCL
    if (kiln_device_count(KILN_KIND_OPENCL) >= 2) {
        KT_RUN(chain_across_devices);
        KT_RUN(mixed_devices_rejected);
        KT_RUN(producer_and_consumer);
        KT_RUN(in_place_after_read);
        KT_RUN(failure_across_devices);
        KT_RUN(release_mid_flight);
        return kt_finish();
    }
#endif
    printf("fewer than two OpenCL devices (or a build without OpenCL): skipped\n");
    return 77; /* ctest's skip */
}
