/* The training helpers under data parallelism: metrics read on any rank are those of the whole
 * job (summed over the ranks), and checkpoints are written by rank 0 alone and loaded on every
 * rank from rank 0's bytes (the ranks start with different weights and end with rank 0's, the
 * optimizer state included). Run alone (a world of one) and under `mpirun -np 2` / `-np 3`. */
#include <kiln.h>
#include <unistd.h>

#include "kiln_test.h"
#include "dist_util.h"

static int rank, world;

KT_TEST(metrics_sum_over_ranks) {
    kiln_metrics *m = kiln_metrics_new();
    /* rank r: r + 1 samples of loss r + 1, all of them classified right on rank 0 only */
    int64_t n = rank + 1;
    float logits[3 * 2];
    int64_t targets[3];
    for (int i = 0; i < n; i++) logits[2 * i] = 1.0f, logits[2 * i + 1] = 0.0f, targets[i] = rank == 0 ? 0 : 1;
    KT_CHECK(kiln_metrics_add(m, kiln_full(KILN_CPU, KILN_F32, KILN_SCALAR_SHAPE, (double)(rank + 1)),
                              kiln_from_data(KILN_CPU, KILN_F32, KILN_SHAPE(n, 2), logits),
                              kiln_from_data(KILN_CPU, KILN_I64, KILN_SHAPE(n), targets)) == KILN_OK);
    double loss, acc;
    int64_t count;
    KT_CHECK(kiln_metrics_read(m, &loss, &acc, &count) == KILN_OK);
    double samples = 0, weighted = 0;
    for (int r = 0; r < world; r++) samples += r + 1, weighted += (r + 1) * (r + 1);
    KT_CHECK(count == (int64_t)samples);
    KT_NEAR(loss, weighted / samples, 1e-9);
    KT_NEAR(acc, 1.0 / samples, 1e-9);
    kiln_metrics_free(m);
}

static void read_all(kiln_module *m, float *out, int cap) { KT_CHECK(kt_read_params(m, out, cap) == cap); }

KT_TEST(checkpoint_rank0_writes_all_load) {
    char path[256];
    snprintf(path, sizeof path, "%s/kiln_test_dist_%d.safetensors", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp",
             (int)getpid()); /* only rank 0's path is written */
    kiln_module *m = kiln_linear_new(4, 3, true, 11);
    kiln_optimizer *opt = kiln_sgd_new(m, (kiln_sgd_options){.lr = 0.1, .momentum = 0.9});
    kiln_grads *g = NULL;
    kiln_tensor x = kiln_full(KILN_CPU, KILN_F32, KILN_SHAPE(2, 4), 1.0);
    KT_CHECK(kiln_backward(kiln_sum(kiln_module_forward(m, x)), &g) == KILN_OK);
    KT_CHECK(kiln_optimizer_step(opt, g) == KILN_OK); /* momentum state exists */
    kiln_grads_free(g);
    float saved[15], got[15];
    read_all(m, saved, 15);
    KT_CHECK(kiln_dist_checkpoint_save(path, m, opt) == KILN_OK);
    KT_CHECK((access(path, F_OK) == 0) == (rank == 0)); /* the other ranks wrote nothing */
    /* every rank moves away from the saved weights, differently */
    kiln_module *m2 = kiln_linear_new(4, 3, true, 100 + (uint64_t)rank);
    kiln_optimizer *opt2 = kiln_sgd_new(m2, (kiln_sgd_options){.lr = 0.5, .momentum = 0.9});
    KT_CHECK(kiln_dist_checkpoint_load(path, m2, opt2) == KILN_OK);
    read_all(m2, got, 15);
    float rank0[15];
    memcpy(rank0, saved, sizeof saved);
    KT_CHECK(kiln_into_data(kiln_dist_broadcast(kiln_from_data(KILN_CPU, KILN_F32, KILN_SHAPE(15), saved), 0), rank0,
                            sizeof rank0) == KILN_OK);
    KT_CHECK(memcmp(got, rank0, sizeof got) == 0);
    KT_NEAR(kiln_optimizer_lr(opt2), 0.1, 1e-12); /* rank 0's hyperparameters came along */
    /* a file rank 0 cannot read fails on every rank */
    KT_CHECK(kiln_dist_checkpoint_load("/nonexistent/kiln.safetensors", m2, opt2) == KILN_ERR_IO);
    if (rank == 0) unlink(path);
    kiln_optimizer_free(opt2);
    kiln_module_free(m2);
    kiln_optimizer_free(opt);
    kiln_module_free(m);
}

int main(void) {
    if (!kt_dist_begin(&rank, &world)) return 1;
    KT_RUN(metrics_sum_over_ranks);
    KT_RUN(checkpoint_rank0_writes_all_load);
    return kt_dist_end();
}
