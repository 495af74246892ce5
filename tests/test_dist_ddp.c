/* Data-parallel training (kiln_ddp): a small MLP trained for a few SGD steps, each rank on its
 * slice of a batch, ends with the same parameters (within float tolerance) as the same MLP
 * trained here, in one process, on the whole batch; the ranks start from different weights, so
 * this also checks rank 0's broadcast. Small buckets give several all-reduces per step, and the
 * profiler shows them running on the communication thread while backward's matrix products
 * still run, and the gradient of a parameter in an early bucket can be read before a later
 * bucket's all-reduce ends (it waits for its own bucket only). Run alone (a world of one) and
 * under `mpirun -np 2` / `-np 3`. */
#include <kiln.h>

#include "kiln_test.h"
#include "dist_util.h"

static int rank, world;

#define BATCH 12 /* divides by 1, 2 and 3 */
#define IN 6
#define HIDDEN 5
#define CLASSES 3
#define STEPS 4

static kiln_module *mlp(uint64_t seed) {
    kiln_module *layers[] = {kiln_linear_new(IN, HIDDEN, true, seed), kiln_relu_new(),
                             kiln_linear_new(HIDDEN, CLASSES, true, seed + 100)};
    return kiln_sequential_new(3, layers);
}

static kiln_tensor batch_x(int step) { return kiln_randn(KILN_CPU, KILN_F32, KILN_SHAPE(BATCH, IN), 1000 + step); }

static kiln_tensor batch_y(int step) {
    int64_t y[BATCH];
    for (int i = 0; i < BATCH; i++) y[i] = (i * 5 + step) % CLASSES;
    return kiln_from_data(KILN_CPU, KILN_I64, KILN_SHAPE(BATCH), y);
}

/* One SGD step on rows [start, start + n) of the step's batch. */
static void train_step(kiln_module *m, kiln_optimizer *opt, int step, int64_t start, int64_t n) {
    kiln_tensor x = kiln_narrow(batch_x(step), 0, start, n);
    kiln_tensor y = kiln_narrow(batch_y(step), 0, start, n);
    kiln_tensor loss = kiln_cross_entropy(kiln_module_forward(m, x), y, kiln_cross_entropy_defaults());
    kiln_grads *g = NULL;
    KT_CHECK(kiln_backward(loss, &g) == KILN_OK);
    KT_CHECK(kiln_optimizer_step(opt, g) == KILN_OK);
    kiln_grads_free(g);
}

static void read_params(kiln_module *m, float *out, int64_t n) { KT_CHECK(kt_read_params(m, out, n) == n); }

static void same_as_one_process(int64_t bucket_bytes, int want_buckets) {
    enum { NP = IN * HIDDEN + HIDDEN + HIDDEN * CLASSES + CLASSES };
    kiln_module *ref = mlp(1);
    kiln_optimizer *ref_opt = kiln_sgd_new(ref, (kiln_sgd_options){.lr = 0.5, .momentum = 0.9});
    kiln_module *m = mlp(1 + (uint64_t)rank * 7); /* rank 0's weights are the reference's */
    kiln_ddp_options o = kiln_ddp_defaults();
    o.bucket_bytes = bucket_bytes;
    kiln_ddp *ddp = kiln_ddp_new(m, o);
    KT_CHECK(ddp != NULL);
    KT_CHECK_MSG(kiln_ddp_num_buckets(ddp) == want_buckets, "%d buckets", kiln_ddp_num_buckets(ddp));
    kiln_optimizer *opt = kiln_sgd_new(m, (kiln_sgd_options){.lr = 0.5, .momentum = 0.9});
    int64_t local = BATCH / world;
    for (int step = 0; step < STEPS; step++) {
        train_step(ref, ref_opt, step, 0, BATCH);
        train_step(m, opt, step, rank * local, local);
    }
    float want[NP], got[NP];
    read_params(ref, want, NP);
    read_params(m, got, NP);
    int bad = 0;
    for (int i = 0; i < NP; i++) bad += fabsf(got[i] - want[i]) > 1e-5f * fmaxf(1.0f, fabsf(want[i]));
    KT_CHECK_MSG(bad == 0, "%d of %d parameters differ from one process's (e.g. %g vs %g)", bad, NP, got[0], want[0]);
    /* and the ranks agree exactly */
    float *all = malloc(sizeof(float) * NP * (size_t)world);
    KT_CHECK(kiln_into_data(kiln_dist_all_gather(kiln_from_data(KILN_CPU, KILN_F32, KILN_SHAPE(NP), got)), all,
                            sizeof(float) * NP * (size_t)world) == KILN_OK);
    KT_CHECK(memcmp(all, all + NP * rank, sizeof got) == 0 && memcmp(all + NP * (world - 1), got, sizeof got) == 0);
    free(all);
    kiln_ddp_free(ddp);
    kiln_optimizer_free(opt);
    kiln_optimizer_free(ref_opt);
    kiln_module_free(m);
    kiln_module_free(ref);
}

KT_TEST(one_bucket_same_as_one_process) {
    kt_mem_begin();
    same_as_one_process(kiln_ddp_defaults().bucket_bytes, 1);
    KT_MEM_CHECK();
}

KT_TEST(bucket_per_parameter_same_as_one_process) { same_as_one_process(16, 4); }

/* A bucket's all-reduce (not the step's vote, which gradients freed without a step give too) */
static bool is_bucket_all_reduce(const kiln_profile_event *e) {
    return strcmp(e->kernel, "ALL_REDUCE") == 0 && e->op && strstr(e->op, "gradient all-reduce");
}

KT_TEST(all_reduce_overlaps_backward) {
    /* 6 x Linear(512, 512): a bucket per layer; the last layers' all-reduces start while the
     * first layers' backward products run */
    enum { L = 6, W = 512, N = 256 };
    kiln_module *layers[2 * L];
    for (int i = 0; i < L; i++) layers[2 * i] = kiln_linear_new(W, W, false, 10 + (uint64_t)i), layers[2 * i + 1] = kiln_relu_new();
    kiln_module *m = kiln_sequential_new(2 * L, layers);
    kiln_ddp_options o = kiln_ddp_defaults();
    o.bucket_bytes = (int64_t)W * W * 4;
    kiln_ddp *ddp = kiln_ddp_new(m, o);
    KT_CHECK(kiln_ddp_num_buckets(ddp) == L);
    KT_CHECK(kiln_sync() == KILN_OK);
    bool overlapped = false;
    /* the same number of steps on every rank (each step's all-reduces pair up across ranks);
     * eight, so that 3 ranks on 2 loaded cores still see one overlap (3 missed it once in CI) */
    for (int attempt = 0; attempt < 8; attempt++) {
        kiln_tensor x = kiln_randn(KILN_CPU, KILN_F32, KILN_SHAPE(N, W), 7 + (uint64_t)attempt);
        kiln_tensor out = kiln_module_forward(m, x);
        KT_CHECK(kiln_sync() == KILN_OK);
        kiln_profiler_start();
        kiln_grads *g = NULL;
        KT_CHECK(kiln_backward(kiln_mean(out), &g) == KILN_OK);
        KT_CHECK(kiln_grads_count(g) == L);
        kiln_grads_free(g);
        kiln_profiler_stop();
        static kiln_profile_event ev[4096];
        size_t n = kiln_profiler_events(ev, 4096);
        int reduces = 0;
        for (size_t i = 0; i < n && i < 4096; i++) {
            if (!is_bucket_all_reduce(&ev[i])) continue;
            reduces++;
            /* on the communication thread (KILN_SYNC=1: on this one, at dispatch) */
            KT_CHECK(ev[i].worker == (kiln_engine_is_async() ? 63 : -1));
            for (size_t k = 0; k < n && k < 4096; k++)
                if (strcmp(ev[k].kernel, "MATMUL") == 0 && ev[k].start_us < ev[i].end_us && ev[k].end_us > ev[i].start_us)
                    overlapped = true;
        }
        KT_CHECK_MSG(reduces == (world > 1 ? L : 0), "%d all-reduces", reduces); /* a world of one has none */
        if (getenv("KILN_TEST_DUMP"))
            for (size_t i = 0; i < n && i < 4096; i++)
                fprintf(stderr, "rank %d: %s %s w%d %.0f-%.0f\n", rank, ev[i].op, ev[i].kernel, ev[i].worker,
                        ev[i].start_us, ev[i].end_us);
    }
    /* (a world of one runs no all-reduce: its gradients are already the mean) */
    /* (KILN_SYNC=1 runs every op at dispatch, one after another: nothing overlaps) */
    KT_CHECK_MSG(world == 1 || !kiln_engine_is_async() || overlapped, "no all-reduce ran while a backward matmul ran");
    kiln_ddp_free(ddp);
    kiln_module_free(m);
}

KT_TEST(gradient_waits_for_its_own_bucket_only) {
    /* Linear(2048, 1024) then Linear(1024, 4): two buckets. The small last layer's gradient is
     * final first and its bucket's all-reduce is short; the first layer's 8 MB bucket follows
     * a large weight-gradient product and holds the communication thread for milliseconds.
     * The last layer's gradient is a view of its own bucket's result, so it can be read (and a
     * marker op queued after the read runs) before the first layer's all-reduce ends. A timing
     * check, so it takes the best of a few steps (the same number on every rank: each step's
     * all-reduces pair up). (kiln_optimizer_step's updates likewise start bucket by bucket:
     * tests/test_dist_step.c.) */
    enum { IN_W = 2048, HID = 1024, OUT_W = 4, N = 64 };
    kiln_module *layers[] = {kiln_linear_new(IN_W, HID, false, 21), kiln_relu_new(), kiln_linear_new(HID, OUT_W, false, 22)};
    kiln_module *m = kiln_sequential_new(3, layers);
    kiln_param ps[2];
    KT_CHECK(kiln_module_params(m, ps, 2) == 2);
    kiln_ddp_options o = kiln_ddp_defaults();
    o.bucket_bytes = (int64_t)HID * OUT_W * 4;
    kiln_ddp *ddp = kiln_ddp_new(m, o);
    KT_CHECK(kiln_ddp_num_buckets(ddp) == 2);
    KT_CHECK(kiln_sync() == KILN_OK);
    bool early = false;
    for (int attempt = 0; attempt < 4; attempt++) {
        kiln_tensor x = kiln_randn(KILN_CPU, KILN_F32, KILN_SHAPE(N, IN_W), 30 + (uint64_t)attempt);
        kiln_tensor out = kiln_module_forward(m, x);
        KT_CHECK(kiln_sync() == KILN_OK);
        kiln_profiler_start();
        kiln_grads *g = NULL;
        KT_CHECK(kiln_backward(kiln_mean(out), &g) == KILN_OK);
        static float last[HID * OUT_W];
        KT_CHECK(kiln_into_data(kiln_grad(g, *ps[1].slot), last, sizeof last) == KILN_OK);
        double marker = 0; /* an op queued once the read returned: its start is after the read */
        KT_CHECK(kiln_into_scalar_f64(kiln_tanh(kiln_full(KILN_CPU, KILN_F64, KILN_SHAPE(1), 0.5)), &marker) == KILN_OK);
        KT_CHECK(fabs(marker - tanh(0.5)) < 1e-12);
        kiln_grads_free(g);
        kiln_profiler_stop();
        static kiln_profile_event ev[4096];
        size_t n = kiln_profiler_events(ev, 4096);
        double last_reduce_end = 0, marker_start = -1;
        int reduces = 0;
        for (size_t i = 0; i < n && i < 4096; i++) {
            if (is_bucket_all_reduce(&ev[i])) reduces++, last_reduce_end = fmax(last_reduce_end, ev[i].end_us);
            if (ev[i].op && strstr(ev[i].op, "kiln_tanh")) marker_start = ev[i].start_us; /* (maybe fused) */
        }
        if (getenv("KILN_TEST_DUMP"))
            for (size_t i = 0; i < n && i < 4096; i++)
                fprintf(stderr, "rank %d: %s %s w%d %.0f-%.0f\n", rank, ev[i].op, ev[i].kernel, ev[i].worker,
                        ev[i].start_us, ev[i].end_us);
        KT_CHECK_MSG(reduces == (world > 1 ? 2 : 0) && marker_start >= 0, "%d all-reduces, marker %g", reduces,
                     marker_start);
        early |= marker_start < last_reduce_end;
    }
    /* (a world of one has no all-reduce; KILN_SYNC=1 runs every op at dispatch, in order) */
    KT_CHECK_MSG(world == 1 || !kiln_engine_is_async() || early,
                 "the last layer's gradient was read only after the first layer's all-reduce ended");
    kiln_ddp_free(ddp);
    kiln_module_free(m);
}

int main(void) {
    if (!kt_dist_begin(&rank, &world)) return 1;
    KT_RUN(one_bucket_same_as_one_process);
    KT_RUN(bucket_per_parameter_same_as_one_process);
    KT_RUN(all_reduce_overlaps_backward);
    KT_RUN(gradient_waits_for_its_own_bucket_only);
    return kt_dist_end();
}
