/* Data parallelism when one rank fails or the ranks' models differ. (1) Rank 1's step 2 fails
 * (its loss is poisoned by a bad shape, so kiln_backward returns before it walks; or a kernel of
 * its forward fails, which kiln_backward_value reports) and the program goes on as programs do:
 * skips the batch, calls kiln_optimizer_step anyway, or returns. Step 2 must fail on every rank
 * (rank 1 with its own error, the others naming rank 1), change no rank's weights, and, where
 * the program goes on, the later steps succeed with the ranks' weights bit-identical: the ranks'
 * collectives never pair different steps. (2) kiln_ddp_new on models that differ (a layer's
 * size, an extra layer, a dtype) fails on every rank within a second, naming the first
 * difference. Run under `mpirun -np 2` / `-np 3` (alone: nothing to check). */
#include <kiln.h>
#include <time.h>

#include "kiln_test.h"
#include "dist_util.h"
#include "engine/engine-impl.h"

static int rank, world;

enum { IN = 6, HID = 10, OUT = 3, ROWS = 4, STEPS = 4, BAD_STEP = 2 };
enum { NP = IN * HID + HID + HID * OUT + OUT };

static kiln_module *mlp(int64_t in, int64_t hid, uint64_t seed) {
    kiln_module *layers[] = {kiln_linear_new(in, hid, true, seed), kiln_relu_new(), kiln_linear_new(hid, OUT, true, seed + 1)};
    return kiln_sequential_new(3, layers);
}

static void read_params(kiln_module *m, float *out) { KT_CHECK(kt_read_params(m, out, NP) == NP); }

typedef enum { SKIP_BATCH, STEP_ANYWAY, RETURN, KERNEL_SKIP_BATCH } variant;
static const char *const variant_names[] = {"skip the batch", "step anyway", "return", "kernel failure, skip the batch"};

/* The training loop, as a program would write it, on rank 1's failure at BAD_STEP. */
static void train_through_failure(variant v) {
    kiln_module *m = mlp(IN, HID, 3 + (uint64_t)rank);
    kiln_ddp_options o = kiln_ddp_defaults();
    o.bucket_bytes = 64; /* several buckets */
    kiln_ddp *ddp = kiln_ddp_new(m, o);
    KT_CHECK(ddp != NULL);
    kiln_optimizer *opt = kiln_adam_new(m, kiln_adam_defaults());
    static float before[NP], after[NP], all[3 * NP];
    unsigned failed_steps = 0; /* a bit per step that failed */
    int last_step = -1;
    char msg[1024] = "";
    for (int s = 0; s < STEPS; s++) {
        last_step = s;
        if (s == BAD_STEP) read_params(m, before);
        bool bad = rank == 1 && s == BAD_STEP;
        int64_t width = bad && v != KERNEL_SKIP_BATCH ? IN + 1 : IN; /* a bad shape poisons the loss */
        kiln_tensor x = kiln_randn(KILN_CPU, KILN_F32, KILN_SHAPE(ROWS, width), 60 + (uint64_t)(s * 4 + rank));
        int64_t y[ROWS] = {0, 1, 2, 1};
        if (bad && v == KERNEL_SKIP_BATCH) kiln__debug_fail_next_kernel("kiln_relu");
        kiln_tensor loss = kiln_cross_entropy(kiln_module_forward(m, x), kiln_from_data(KILN_CPU, KILN_I64, KILN_SHAPE(ROWS), y),
                                              kiln_cross_entropy_defaults());
        kiln_grads *g = NULL;
        double value = 0;
        kiln_status st = v == KERNEL_SKIP_BATCH ? kiln_backward_value(loss, &g, &value) : kiln_backward(loss, &g);
        kiln__debug_fail_next_kernel(NULL);
        if (st != KILN_OK) {
            if (!failed_steps) snprintf(msg, sizeof msg, "%s", kiln_last_error());
            failed_steps |= 1u << s;
            if (v == SKIP_BATCH || v == KERNEL_SKIP_BATCH) {
                kiln_grads_free(g);
                goto next;
            }
            if (v == RETURN) {
                kiln_grads_free(g);
                goto done;
            }
        }
        st = kiln_optimizer_step(opt, g); /* (step anyway: g is NULL on the failed rank) */
        kiln_grads_free(g);
        if (st != KILN_OK) {
            if (!failed_steps) snprintf(msg, sizeof msg, "%s", kiln_last_error());
            failed_steps |= 1u << s;
            if (v == RETURN) goto done;
        }
    next:
        if (s == BAD_STEP) read_params(m, after);
    }
done:
    kiln_sync(); /* (the failure's errors, already reported) */
    if (last_step == BAD_STEP) read_params(m, after);
    const char *name = variant_names[v];
    KT_CHECK_MSG(failed_steps == 1u << BAD_STEP, "%s: rank %d failed in steps %#x (a bit each): %s", name, rank,
                 failed_steps, msg);
    const char *want = rank != 1 ? "rank 1 failed" : v == KERNEL_SKIP_BATCH ? "injected failure" : "Linear(6 -> 10)";
    KT_CHECK_MSG(strstr(msg, want), "%s: rank %d's error '%s' does not say '%s'", name, rank, msg, want);
    KT_CHECK_MSG(memcmp(before, after, sizeof before) == 0, "%s: rank %d's weights changed in the failed step", name, rank);
    KT_CHECK_MSG(last_step == (v == RETURN ? BAD_STEP : STEPS - 1), "%s: rank %d stopped at step %d", name, rank, last_step);
    /* the ranks agree to the bit (after the later steps, where the program went on) */
    static float now[NP];
    read_params(m, now);
    KT_CHECK(kiln_into_data(kiln_dist_all_gather(kiln_from_data(KILN_CPU, KILN_F32, KILN_SHAPE(NP), now)), all,
                            sizeof(float) * NP * (size_t)world) == KILN_OK);
    for (int r = 0; r < world; r++) KT_CHECK_MSG(memcmp(all + r * NP, now, sizeof now) == 0, "%s: rank %d differs", name, r);
    kiln_ddp_free(ddp);
    kiln_optimizer_free(opt);
    kiln_module_free(m);
}

KT_TEST(failure_skip_batch) { train_through_failure(SKIP_BATCH); }
KT_TEST(failure_step_anyway) { train_through_failure(STEP_ANYWAY); }
KT_TEST(failure_return) { train_through_failure(RETURN); }
KT_TEST(kernel_failure_skip_batch) { train_through_failure(KERNEL_SKIP_BATCH); }

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* kiln_ddp_new on the last rank's model m (the others: the usual one) fails everywhere, quickly,
 * saying `what`. */
static void mismatch_fails(kiln_module *m, const char *what) {
    double t0 = now_s();
    kiln_ddp *ddp = kiln_ddp_new(m, kiln_ddp_defaults());
    double took = now_s() - t0;
    KT_CHECK_MSG(ddp == NULL, "rank %d: kiln_ddp_new accepted different models", rank);
    const char *msg = kiln_last_error();
    KT_CHECK_MSG(strstr(msg, "differs across ranks") && strstr(msg, what), "rank %d: '%s' does not say '%s'", rank, msg,
                 what);
    KT_CHECK_MSG(took < 1.0, "rank %d: the mismatch took %.2f s to find", rank, took);
    kiln_ddp_free(ddp);
    kiln_module_free(m);
    /* and the ranks go on in step */
    KT_CHECK(kiln_dist_barrier() == KILN_OK);
}

KT_TEST(mismatched_layer_size) {
    bool odd = rank == world - 1;
    mismatch_fails(mlp(IN, odd ? HID + 1 : HID, 5), "entry 0: rank 0 has '0.weight' (parameter f32 [10, 6])");
}

KT_TEST(extra_layer) {
    bool odd = rank == world - 1;
    kiln_module *layers[] = {kiln_linear_new(IN, HID, true, 5), kiln_relu_new(), kiln_linear_new(HID, OUT, true, 6),
                             kiln_linear_new(OUT, OUT, true, 7)};
    mismatch_fails(kiln_sequential_new(odd ? 4 : 3, layers), "entry 4: rank 0 has nothing (4 entries)");
    if (!odd) kiln_module_free(layers[3]);
}


KT_TEST(mismatched_dtype) {
    kiln_module *m = kiln_module_new("Scale", kt_identity_forward, NULL, NULL);
    kiln_dtype dt = rank == world - 1 ? KILN_F64 : KILN_F32;
    KT_CHECK(kiln_module_add_parameter(m, "w", kiln_ones(KILN_CPU, dt, KILN_SHAPE(3))) == KILN_OK);
    mismatch_fails(m, "entry 0: rank 0 has 'w' (parameter f32 [3])");
}

/* A freed wrapper is refused like every object a user frees (issue 23), and a freed module
 * is refused by kiln_ddp_new before its parameters are listed. */
KT_TEST(use_after_free) {
    kiln_module *m = mlp(IN, HID, 5);
    kiln_ddp *ddp = kiln_ddp_new(m, kiln_ddp_defaults());
    KT_CHECK_MSG(ddp != NULL, "%s", kiln_last_error());
    kiln_ddp_free(ddp);
    char freed_here[64];
    snprintf(freed_here, sizeof freed_here, "test_dist_ddp_errors.c:%d", __LINE__ - 2);
    KT_CHECK(kiln_ddp_no_sync_begin(ddp) == KILN_ERR_STALE_HANDLE);
    KT_CHECK_MSG(strstr(kiln_last_error(), freed_here) != NULL, "%s lacks %s", kiln_last_error(), freed_here);
    KT_CHECK_MSG(strstr(kiln_last_error(), "kiln_ddp_no_sync_begin") && strstr(kiln_last_error(), "freed by kiln_ddp_free"),
                 "%s", kiln_last_error());
    KT_CHECK(kiln_ddp_num_buckets(ddp) == 0 && kiln_last_status() == KILN_ERR_STALE_HANDLE);
    kiln_ddp_free(ddp);
    KT_CHECK(kiln_last_status() == KILN_ERR_STALE_HANDLE);
    kiln_module_free(m);
    KT_CHECK(kiln_ddp_new(m, kiln_ddp_defaults()) == NULL && kiln_last_status() == KILN_ERR_STALE_HANDLE);
    KT_CHECK_MSG(strstr(kiln_last_error(), "kiln_ddp_new") != NULL, "%s", kiln_last_error());
    KT_CHECK(kiln_dist_barrier() == KILN_OK);
}

int main(void) {
    if (!kt_dist_begin(&rank, &world)) return 1;
    if (world > 1 && world <= 3) {
        KT_RUN(failure_skip_batch);
        KT_RUN(failure_step_anyway);
        KT_RUN(failure_return);
        KT_RUN(kernel_failure_skip_batch);
        KT_RUN(mismatched_layer_size);
        KT_RUN(extra_layer);
        KT_RUN(mismatched_dtype);
        KT_RUN(use_after_free);
    }
    return kt_dist_end();
}
