/* Data parallelism's gradient accumulation and buffers: (1) M micro-batches per rank, the first
 * M - 1 inside kiln_ddp_no_sync_begin/end (no all-reduce runs there: the profiler shows none),
 * give the same weights as one process taking the whole batch of every rank at once; (2) the
 * module's buffers (batch-norm running statistics and its step count) are rank 0's on every
 * rank after each step, as PyTorch's DDP broadcasts them, although each rank's batches differ;
 * (3) the no_sync calls' bad uses. Run alone (a world of one) and under `mpirun -np 2` / `-np 3`. */
#include <kiln.h>

#include "kiln_test.h"
#include "dist_util.h"

static int rank, world;

enum { IN = 5, HID = 7, OUT = 3, ROWS = 2, MICRO = 3, STEPS = 2 };
enum { NP = IN * HID + HID + HID * OUT + OUT };

static kiln_module *mlp(uint64_t seed) {
    kiln_module *layers[] = {kiln_linear_new(IN, HID, true, seed), kiln_tanh_new(), kiln_linear_new(HID, OUT, true, seed + 1)};
    return kiln_sequential_new(3, layers);
}

/* The mean loss of `rows` rows of step s's global batch from row `first`, times `scale`. */
static kiln_tensor loss_of(kiln_module *m, int s, int64_t first, int64_t rows, double scale) {
    int64_t total = (int64_t)world * MICRO * ROWS;
    kiln_tensor x = kiln_narrow(kiln_randn(KILN_CPU, KILN_F32, KILN_SHAPE(total, IN), 900 + (uint64_t)s), 0, first, rows);
    int64_t y[3 * MICRO * ROWS];
    for (int64_t i = 0; i < rows; i++) y[i] = (first + i + s) % OUT;
    kiln_tensor loss = kiln_cross_entropy(kiln_module_forward(m, x), kiln_from_data(KILN_CPU, KILN_I64, KILN_SHAPE(rows), y),
                                          kiln_cross_entropy_defaults());
    return kiln_mul_scalar(loss, scale);
}

static void read_params(kiln_module *m, float *out) { KT_CHECK(kt_read_params(m, out, NP) == NP); }

static int bucket_all_reduces(void) {
    static kiln_profile_event ev[4096];
    size_t n = kiln_profiler_events(ev, 4096);
    int reduces = 0;
    for (size_t i = 0; i < n && i < 4096; i++)
        reduces += strcmp(ev[i].kernel, "ALL_REDUCE") == 0 && ev[i].op && strstr(ev[i].op, "gradient all-reduce");
    return reduces;
}

KT_TEST(no_sync_accumulation_equals_one_large_batch) {
    kt_mem_begin();
    if (world > 3) return;
    kiln_module *ref = mlp(3), *m = mlp(3 + (uint64_t)rank);
    kiln_optimizer *ref_opt = kiln_adam_new(ref, kiln_adam_defaults()), *opt = kiln_adam_new(m, kiln_adam_defaults());
    kiln_ddp_options o = kiln_ddp_defaults();
    o.bucket_bytes = 64; /* several buckets */
    kiln_ddp *ddp = kiln_ddp_new(m, o);
    KT_CHECK(ddp != NULL);
    for (int s = 0; s < STEPS; s++) {
        kiln_grads *g = NULL;
        KT_CHECK(kiln_backward(loss_of(ref, s, 0, (int64_t)world * MICRO * ROWS, 1.0), &g) == KILN_OK);
        KT_CHECK(kiln_optimizer_step(ref_opt, g) == KILN_OK);
        kiln_grads_free(g);
        /* this rank's micro-batches: rows [(rank * MICRO + k) * ROWS, + ROWS) */
        KT_CHECK(kiln_sync() == KILN_OK);
        kiln_profiler_start();
        KT_CHECK(kiln_ddp_no_sync_begin(ddp) == KILN_OK);
        for (int k = 0; k < MICRO - 1; k++) {
            KT_CHECK(kiln_backward(loss_of(m, s, (int64_t)(rank * MICRO + k) * ROWS, ROWS, 1.0 / MICRO), &g) == KILN_OK);
            kiln_grads_free(g);
        }
        KT_CHECK(kiln_ddp_no_sync_end(ddp) == KILN_OK);
        KT_CHECK(kiln_sync() == KILN_OK);
        kiln_profiler_stop();
        KT_CHECK_MSG(bucket_all_reduces() == 0, "%d all-reduces inside no_sync", bucket_all_reduces());
        KT_CHECK(kiln_backward(loss_of(m, s, (int64_t)(rank * MICRO + MICRO - 1) * ROWS, ROWS, 1.0 / MICRO), &g) == KILN_OK);
        KT_CHECK_MSG(kiln_optimizer_step(opt, g) == KILN_OK, "rank %d: %s", rank, kiln_last_error());
        kiln_grads_free(g);
    }
    static float want[NP], got[NP], all[3 * NP];
    read_params(ref, want);
    read_params(m, got);
    int bad = 0, first = -1;
    for (int i = 0; i < NP; i++)
        if (fabsf(got[i] - want[i]) > 1e-5f * fmaxf(1.0f, fabsf(want[i]))) bad++, first = first < 0 ? i : first;
    KT_CHECK_MSG(bad == 0, "rank %d: %d of %d parameters differ from one large batch's (#%d: %.9g vs %.9g)", rank, bad,
                 NP, first, first < 0 ? 0.0 : got[first], first < 0 ? 0.0 : want[first]);
    KT_CHECK(kiln_into_data(kiln_dist_all_gather(kiln_from_data(KILN_CPU, KILN_F32, KILN_SHAPE(NP), got)), all,
                            sizeof(float) * NP * (size_t)world) == KILN_OK);
    for (int r = 0; r < world; r++) KT_CHECK_MSG(memcmp(all + r * NP, got, sizeof got) == 0, "rank %d differs", r);
    kiln_ddp_free(ddp);
    kiln_optimizer_free(opt), kiln_optimizer_free(ref_opt);
    kiln_module_free(m), kiln_module_free(ref);
    KT_MEM_CHECK();
}

KT_TEST(no_sync_bad_uses) {
    KT_CHECK(kiln_ddp_no_sync_begin(NULL) == KILN_ERR_NULL);
    KT_EXPECT_ERROR(KILN_ERR_NULL, "kiln_ddp_no_sync_begin", __LINE__ - 1);
    KT_CHECK(kiln_ddp_no_sync_end(NULL) == KILN_ERR_NULL);
    KT_EXPECT_ERROR(KILN_ERR_NULL, "kiln_ddp_no_sync_end", __LINE__ - 1);
    kiln_module *m = mlp(4);
    kiln_ddp *ddp = kiln_ddp_new(m, kiln_ddp_defaults());
    KT_CHECK(kiln_ddp_no_sync_end(ddp) == KILN_ERR_INVALID_ARGUMENT);
    KT_EXPECT_ERROR(KILN_ERR_INVALID_ARGUMENT, "not inside", __LINE__ - 1);
    KT_CHECK(kiln_ddp_no_sync_begin(ddp) == KILN_OK);
    KT_CHECK(kiln_ddp_no_sync_begin(ddp) == KILN_ERR_INVALID_ARGUMENT);
    KT_EXPECT_ERROR(KILN_ERR_INVALID_ARGUMENT, "already inside", __LINE__ - 1);
    KT_CHECK(kiln_ddp_no_sync_end(ddp) == KILN_OK);
    kiln_ddp_free(ddp);
    kiln_module_free(m);
}

enum { C = 4, BN_ROWS = 3 };


KT_TEST(buffers_are_rank_0s_after_each_step) {
    if (world > 3) return;
    kiln_module *m = kiln_module_new("WithNorm", kt_identity_forward, NULL, NULL);
    KT_CHECK(kiln_module_add_child(m, "fc", kiln_linear_new(IN, C, true, 8)) == KILN_OK);
    KT_CHECK(kiln_module_add_child(m, "bn", kiln_batch_norm2d_new(C, 1e-5, 0.1)) == KILN_OK);
    kiln_ddp *ddp = kiln_ddp_new(m, kiln_ddp_defaults());
    KT_CHECK(ddp != NULL);
    kiln_optimizer *opt = kiln_sgd_new(m, kiln_sgd_defaults());
    for (int s = 0; s < 2; s++) {
        /* each rank's own rows: its running statistics move differently */
        kiln_tensor x = kiln_randn(KILN_CPU, KILN_F32, KILN_SHAPE(BN_ROWS, IN), 40 + (uint64_t)(s * 8 + rank));
        kiln_tensor h = kiln_module_forward(kiln_module_child(m, "fc"), kiln_mul_scalar(x, 1.0 + rank));
        h = kiln_module_forward(kiln_module_child(m, "bn"), kiln_reshape(h, KILN_SHAPE(BN_ROWS, C, 1, 1)));
        int64_t y[BN_ROWS] = {0, 1, 2};
        kiln_tensor loss = kiln_cross_entropy(kiln_reshape(h, KILN_SHAPE(BN_ROWS, C)),
                                              kiln_from_data(KILN_CPU, KILN_I64, KILN_SHAPE(BN_ROWS), y),
                                              kiln_cross_entropy_defaults());
        kiln_grads *g = NULL;
        KT_CHECK(kiln_backward(loss, &g) == KILN_OK);
        KT_CHECK_MSG(kiln_optimizer_step(opt, g) == KILN_OK, "rank %d: %s", rank, kiln_last_error());
        kiln_grads_free(g);
        float stats[2 * C], all[3 * 2 * C];
        KT_CHECK(kiln_into_data(kiln_module_param(m, "bn.running_mean"), stats, sizeof(float) * C) == KILN_OK);
        KT_CHECK(kiln_into_data(kiln_module_param(m, "bn.running_var"), stats + C, sizeof(float) * C) == KILN_OK);
        int64_t count = -1, counts[3];
        KT_CHECK(kiln_into_data(kiln_module_param(m, "bn.num_batches_tracked"), &count, sizeof count) == KILN_OK);
        KT_CHECK(count == s + 1);
        KT_CHECK(kiln_into_data(kiln_dist_all_gather(kiln_from_data(KILN_CPU, KILN_F32, KILN_SHAPE(2 * C), stats)), all,
                                sizeof(float) * 2 * C * (size_t)world) == KILN_OK);
        KT_CHECK(kiln_into_data(kiln_dist_all_gather(kiln_from_data(KILN_CPU, KILN_I64, KILN_SHAPE(1), &count)), counts,
                                sizeof(int64_t) * (size_t)world) == KILN_OK);
        for (int r = 0; r < world; r++) {
            KT_CHECK_MSG(memcmp(all + r * 2 * C, all, sizeof stats) == 0,
                         "step %d: rank %d's running statistics differ from rank 0's (%g vs %g)", s, r,
                         (double)all[r * 2 * C], (double)all[0]);
            KT_CHECK(counts[r] == s + 1);
        }
    }
    kiln_optimizer_free(opt);
    kiln_ddp_free(ddp);
    kiln_module_free(m);
}

int main(void) {
    if (!kt_dist_begin(&rank, &world)) return 1;
    KT_RUN(no_sync_accumulation_equals_one_large_batch);
    KT_RUN(no_sync_bad_uses);
    KT_RUN(buffers_are_rank_0s_after_each_step);
    return kt_dist_end();
}
