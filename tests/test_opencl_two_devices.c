/* Two OpenCL devices (PoCL's CPU twice: POCL_DEVICES="pthread pthread"), which share one
 * OpenCL context: a tensor moved between them by kiln_to_device is one buffer copy queued on the
 * destination's stream, after the source's last write as a device event (with
 * KILN_OPENCL_SHARED_CONTEXT=0 each device has its own context and a move goes through the
 * host: a copy to the host on the source device, then one to the other device). CPU -> device
 * 0 -> device 1 -> CPU chains with ops on each device against the same ops on the CPU, bit for
 * bit where the math is exact; a move is one op on the device (the profiler's events); two
 * threads, one per device, the consumer taking the producer's tensor while the producer's
 * chain is still queued, and two threads moving tensors both ways at once; in-place writes on
 * one device after the other one read the tensor; a failure found while a device-0 kernel runs,
 * or a failed kernel, poisons what device 1 computes from it and is reported once; an
 * allocation failing on device 1 mid-chain is an error naming the move and its call site, and
 * each device's memory stats count only its own buffers; tensors released while the work that
 * reads them is queued. Skipped (exit 77) with fewer than two OpenCL devices or without
 * OpenCL. */
#include <kiln.h>
#include <pthread.h>
#include <stdint.h>
#include <string.h>

#include "engine/engine-impl.h"
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

/* t (consumed, any device) read on the host against want (a CPU tensor, consumed), byte for
 * byte. */
static void same_bytes(const char *what, kiln_tensor t, kiln_tensor want) {
    size_t n = (size_t)kiln_tensor_numel(want) * kiln_dtype_size(kiln_tensor_dtype(want));
    unsigned char *a = malloc(n + 1), *b = malloc(n + 1);
    KT_CHECK_MSG(kiln_tensor_dtype(t) == kiln_tensor_dtype(want) && kiln_tensor_numel(t) == kiln_tensor_numel(want),
                 "%s: dtype or size differs", what);
    kiln_status sa = kiln_into_data(kiln_to_device(t, KILN_CPU), a, n), sb = kiln_into_data(want, b, n);
    KT_CHECK_MSG(sa == KILN_OK && sb == KILN_OK, "%s: read failed: %s", what, kiln_last_error());
    KT_CHECK_MSG(sa != KILN_OK || memcmp(a, b, n) == 0, "%s: bytes differ", what);
    free(a);
    free(b);
}

/* CPU -> device 0 -> device 1 -> CPU, bit for bit: several dtypes and sizes (empty, one
 * element, past a staging buffer), a narrowed source (an offset into its buffer), and a tensor
 * bounced between the devices with in-place writes on each side. */
KT_TEST(exact_chains) {
    static const kiln_dtype dtypes[] = {KILN_F32, KILN_F64, KILN_I32, KILN_I64, KILN_F16, KILN_BF16};
    static const int64_t sizes[] = {0, 1, 1000, (1 << 20) + 3};
    for (size_t k = 0; k < sizeof dtypes / sizeof *dtypes; k++)
        for (size_t j = 0; j < sizeof sizes / sizeof *sizes; j++) {
            kiln_dtype dt = dtypes[k];
            int64_t n = sizes[j];
            /* small integers: every op below is exact in every dtype */
            kiln_tensor x = kiln_cast(kiln_remainder_scalar(kiln_arange(KILN_CPU, KILN_F64, 0, (double)n, 1), 50), dt);
            kiln_tensor a0 = kiln_add_scalar(kiln_to_device(kiln_ref(x), D0), 3);
            kiln_tensor b1 = kiln_mul_scalar(kiln_to_device(a0, D1), 2);
            kiln_tensor want = kiln_mul_scalar(kiln_add_scalar(x, 3), 2);
            char what[64];
            snprintf(what, sizeof what, "%s[%lld] via both devices", kiln_dtype_name(dt), (long long)n);
            KT_CHECK(kiln_tensor_device(b1) == D1);
            same_bytes(what, b1, want);
        }
    /* a narrowed source: one copy from an offset into device 0's buffer */
    kiln_tensor x = kiln_arange(KILN_CPU, KILN_F32, 0, 4096, 1);
    kiln_tensor x0 = kiln_to_device(kiln_ref(x), D0);
    same_bytes("narrowed", kiln_to_device(kiln_narrow(kiln_ref(x0), 0, 1000, 777), D1), kiln_narrow(kiln_ref(x), 0, 1000, 777));
    same_bytes("rows of a matrix", kiln_to_device(kiln_narrow(kiln_reshape(x0, KILN_SHAPE(64, 64)), 0, 5, 9), D1),
               kiln_narrow(kiln_reshape(kiln_ref(x), KILN_SHAPE(64, 64)), 0, 5, 9));
    /* bounced: each side writes its copy in place after the move read it */
    kiln_tensor b = kiln_to_device(kiln_ref(x), D0), rb = kiln_ref(x);
    for (int i = 0; i < 10; i++) {
        kiln_tensor other = kiln_to_device(kiln_ref(b), i % 2 ? D0 : D1);
        b = kiln_add_scalar(b, 1); /* the tensor left behind, after the move read it */
        kiln_release(b);
        b = kiln_add_scalar(other, (double)i);
        rb = kiln_add_scalar(rb, (double)i);
    }
    KT_CHECK(kiln_tensor_device(b) == D0);
    same_bytes("bounced", b, rb);
    kiln_release(x);
    KT_CHECK(kiln_sync() == KILN_OK);
}

/* With one context a move between the devices is one op, run on device 1's queue (device
 * times): no copy to the host, no engine worker waiting for device 0. */
KT_TEST(move_is_one_device_op) {
    const char *env = getenv("KILN_OPENCL_SHARED_CONTEXT");
    bool shared = !(env && env[0] == '0');
    kiln_tensor x = kiln_exp(kiln_full(D0, KILN_F32, KILN_SHAPE(1 << 16), 0.5));
    KT_CHECK(kiln_sync() == KILN_OK);
    kiln_profiler_start();
    kiln_tensor y = kiln_to_device(x, D1);
    kiln_profiler_stop();
    kiln_profile_event ev[16];
    size_t n = kiln_profiler_events(ev, 16), moves = 0, on_device = 0;
    for (size_t i = 0; i < n && i < 16; i++)
        if (strcmp(ev[i].op, "kiln_to_device") == 0) moves++, on_device += ev[i].on_device;
    KT_CHECK_MSG(moves == (shared ? 1u : 2u), "%zu ops for one move (shared context: %d)", moves, shared);
    KT_CHECK_MSG(!shared || on_device == 1, "the move is not a device op");
    compare("moved", y, kiln_exp(kiln_full(KILN_CPU, KILN_F32, KILN_SHAPE(1 << 16), 0.5)), 1e-6, 0);
}

/* A kernel that fails on device 0 poisons the move to device 1 and what device 1 computes from
 * it; the read reports it once. */
KT_TEST(poisoned_source) {
    kiln__debug_fail_next_kernel("kiln_exp");
    kiln_tensor bad = kiln_exp(kiln_ones(D0, KILN_F32, KILN_SHAPE(64)));
    kiln_tensor moved = kiln_to_device(bad, D1);
    kiln_tensor y = kiln_sum(kiln_mul_scalar(moved, 2));
    float v = 0;
    KT_CHECK(kiln_into_scalar(y, &v) == KILN_ERR_KERNEL);
    KT_CHECK_MSG(strstr(kiln_last_error(), "kiln_exp") && strstr(kiln_last_error(), "injected"), "%s", kiln_last_error());
    KT_CHECK(kiln_sync() == KILN_OK);
    KT_CHECK(kiln_sync_all() == KILN_OK);
    kiln__debug_fail_next_kernel(NULL);
}

/* Device 1's buffer for a move cannot be had: a clean error naming kiln_to_device and its call
 * site, device 0's chain unharmed, and each device's stats counting only its own buffers. */
KT_TEST(alloc_failure_on_device_1) {
    KT_CHECK(kiln_sync_all() == KILN_OK);
    kiln_memory_stats s0 = kiln_memory_stats_get(D0), s1 = kiln_memory_stats_get(D1);
    kiln_tensor a0 = kiln_add_scalar(kiln_mul_scalar(kiln_full(D0, KILN_F32, KILN_SHAPE(4096), 3), 2), 1);
    kiln_tensor src = kiln_ref(a0);
    kiln_debug_fail_alloc_after(1);
    int line = __LINE__ + 1;
    kiln_tensor a1 = kiln_to_device(src, D1); /* its buffer on device 1 fails */
    kiln_debug_fail_alloc_after(0);
    KT_READ_ERROR(kiln_add_scalar(a1, 1), KILN_ERR_OUT_OF_MEMORY, "kiln_to_device");
    char site[64];
    snprintf(site, sizeof site, "test_opencl_two_devices.c:%d", line);
    KT_CHECK_MSG(strstr(kiln_last_error(), site), "'%s' lacks %s", kiln_last_error(), site);
    /* device 0 goes on; a move that can allocate counts on device 1 alone */
    kiln_tensor m1 = kiln_to_device(kiln_ref(a0), D1);
    KT_CHECK(kiln_sync_all() == KILN_OK);
    kiln_memory_stats m0s = kiln_memory_stats_get(D0), m1s = kiln_memory_stats_get(D1);
    KT_CHECK_MSG(m1s.bytes_in_use == s1.bytes_in_use + 4096 * 4 && m0s.bytes_in_use == s0.bytes_in_use + 4096 * 4,
                 "in use %llu on device 0, %llu on device 1", (unsigned long long)m0s.bytes_in_use,
                 (unsigned long long)m1s.bytes_in_use);
    same_bytes("device 0 after the failure", a0, kiln_full(KILN_CPU, KILN_F32, KILN_SHAPE(4096), 7));
    same_bytes("moved after the failure", m1, kiln_full(KILN_CPU, KILN_F32, KILN_SHAPE(4096), 7));
    KT_CHECK(kiln_sync_all() == KILN_OK);
    KT_CHECK(kiln_memory_stats_get(D0).bytes_in_use == s0.bytes_in_use &&
             kiln_memory_stats_get(D1).bytes_in_use == s1.bytes_in_use);
}

/* ---- two threads moving tensors both ways at once ------------------------------------------ */
#define BOTH_ROUNDS 40

typedef struct {
    kiln_device from, to;
    int bad;
} mover;

/* Rounds of: made on `from`, moved to `to`, written there, moved back and compared bit for bit
 * with the CPU's; each round's tensors also feed a running sum on `to`. */
static void *move_both_ways(void *p) {
    mover *m = p;
    kiln_tensor acc = kiln_zeros(m->to, KILN_F32, KILN_SHAPE(3000)), racc = kiln_zeros(KILN_CPU, KILN_F32, KILN_SHAPE(3000));
    for (int r = 0; r < BOTH_ROUNDS; r++) {
        kiln_tensor base = kiln_remainder_scalar(kiln_arange(KILN_CPU, KILN_F32, r, r + 3000, 1), 97);
        kiln_tensor x = kiln_mul_scalar(kiln_to_device(kiln_ref(base), m->from), 2);
        kiln_tensor y = kiln_add_scalar(kiln_to_device(x, m->to), 1);
        acc = kiln_add(acc, kiln_ref(y));
        kiln_tensor back = kiln_sub_scalar(kiln_to_device(y, m->from), 1);
        kiln_tensor want = kiln_mul_scalar(base, 2);
        racc = kiln_add(racc, kiln_add_scalar(kiln_ref(want), 1));
        float g[3000], w[3000];
        if (kiln_into_data(kiln_to_device(back, KILN_CPU), g, sizeof g) != KILN_OK ||
            kiln_into_data(want, w, sizeof w) != KILN_OK || memcmp(g, w, sizeof g) != 0)
            m->bad++;
    }
    float g[3000], w[3000];
    if (kiln_into_data(kiln_to_device(acc, KILN_CPU), g, sizeof g) != KILN_OK || kiln_into_data(racc, w, sizeof w) != KILN_OK ||
        memcmp(g, w, sizeof g) != 0)
        m->bad++;
    if (kiln_sync() != KILN_OK) m->bad++;
    return NULL;
}

KT_TEST(both_ways_at_once) {
    mover a = {D0, D1, 0}, b = {D1, D0, 0};
    pthread_t t;
    pthread_create(&t, NULL, move_both_ways, &a);
    move_both_ways(&b);
    pthread_join(t, NULL);
    KT_CHECK_MSG(a.bad == 0 && b.bad == 0, "mismatches: %d device 0 -> 1, %d device 1 -> 0", a.bad, b.bad);
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
        KT_RUN(exact_chains);
        KT_RUN(move_is_one_device_op);
        KT_RUN(poisoned_source);
        KT_RUN(alloc_failure_on_device_1);
        KT_RUN(both_ways_at_once);
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
