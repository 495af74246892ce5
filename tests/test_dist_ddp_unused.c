/* Data parallelism with parameters that some ranks do not use: rank r's forward goes through
 * the trunk and head r % 2 only (a conditional branch, a task per rank). Every rank must
 * all-reduce the same buckets in the same order and apply the same averaged gradient to every
 * parameter, used here or not: after a few SGD steps (momentum, weight decay) the ranks' weights
 * are bit-identical and equal (within float rounding) to one process that runs every rank's
 * forward on the union of the data, with one bucket and with a bucket per parameter. Run alone
 * (a world of one) and under `mpirun -np 2` / `-np 3`. */
#include <kiln.h>

#include "kiln_test.h"
#include "dist_util.h"

static int rank, world;

enum { IN = 6, HID = 8, OUT = 3, ROWS = 4, STEPS = 3 };
enum { NP = IN * HID + HID + 2 * (HID * OUT + OUT) };


static kiln_module *two_heads(uint64_t seed) {
    kiln_module *m = kiln_module_new("TwoHeads", kt_identity_forward, NULL, NULL);
    KT_CHECK(kiln_module_add_child(m, "trunk", kiln_linear_new(IN, HID, true, seed)) == KILN_OK);
    KT_CHECK(kiln_module_add_child(m, "head0", kiln_linear_new(HID, OUT, true, seed + 1)) == KILN_OK);
    KT_CHECK(kiln_module_add_child(m, "head1", kiln_linear_new(HID, OUT, true, seed + 2)) == KILN_OK);
    return m;
}

/* Rank r's loss at step s: its own rows through the trunk and head r % 2. */
static kiln_tensor loss_of(kiln_module *m, int r, int s) {
    kiln_tensor x = kiln_randn(KILN_CPU, KILN_F32, KILN_SHAPE(ROWS, IN), 700 + (uint64_t)(s * 16 + r));
    int64_t y[ROWS];
    for (int i = 0; i < ROWS; i++) y[i] = (i + r + s) % OUT;
    kiln_tensor h = kiln_relu(kiln_module_forward(kiln_module_child(m, "trunk"), x));
    kiln_tensor logits = kiln_module_forward(kiln_module_child(m, r % 2 ? "head1" : "head0"), h);
    return kiln_cross_entropy(logits, kiln_from_data(KILN_CPU, KILN_I64, KILN_SHAPE(ROWS), y),
                              kiln_cross_entropy_defaults());
}

static void step(kiln_module *m, kiln_optimizer *opt, kiln_tensor loss) {
    kiln_grads *g = NULL;
    KT_CHECK_MSG(kiln_backward(loss, &g) == KILN_OK, "%s", kiln_last_error());
    KT_CHECK_MSG(kiln_optimizer_step(opt, g) == KILN_OK, "rank %d: %s", rank, kiln_last_error());
    kiln_grads_free(g);
    (void)m;
}

static void read_params(kiln_module *m, float *out) { KT_CHECK(kt_read_params(m, out, NP) == NP); }

static kiln_optimizer *sgd(kiln_module *m) {
    return kiln_sgd_new(m, (kiln_sgd_options){.lr = 0.3, .momentum = 0.9, .weight_decay = 0.01});
}

static void same_as_one_process(int64_t bucket_bytes, int want_buckets) {
    /* the reference: every rank's forward in one process, the mean of their losses */
    kiln_module *ref = two_heads(1);
    kiln_optimizer *ref_opt = sgd(ref);
    for (int s = 0; s < STEPS; s++) {
        kiln_tensor total = loss_of(ref, 0, s);
        for (int r = 1; r < world; r++) total = kiln_add(total, loss_of(ref, r, s));
        step(ref, ref_opt, kiln_div_scalar(total, world));
    }
    kiln_module *m = two_heads(1 + (uint64_t)rank * 7); /* rank 0's weights are the reference's */
    kiln_ddp_options o = kiln_ddp_defaults();
    o.bucket_bytes = bucket_bytes;
    kiln_ddp *ddp = kiln_ddp_new(m, o);
    KT_CHECK(ddp != NULL);
    KT_CHECK_MSG(kiln_ddp_num_buckets(ddp) == want_buckets, "%d buckets", kiln_ddp_num_buckets(ddp));
    kiln_optimizer *opt = sgd(m);
    for (int s = 0; s < STEPS; s++) step(m, opt, loss_of(m, rank, s));
    static float want[NP], got[NP], all[3 * NP];
    read_params(ref, want);
    read_params(m, got);
    int bad = 0, first = -1;
    for (int i = 0; i < NP; i++)
        if (fabsf(got[i] - want[i]) > 2e-6f * fmaxf(1.0f, fabsf(want[i]))) bad++, first = first < 0 ? i : first;
    KT_CHECK_MSG(bad == 0, "rank %d: %d of %d parameters differ from one process's (#%d: %.9g vs %.9g)", rank, bad, NP,
                 first, first < 0 ? 0.0 : got[first], first < 0 ? 0.0 : want[first]);
    /* and the ranks agree to the bit */
    if (world <= 3) {
        KT_CHECK(kiln_into_data(kiln_dist_all_gather(kiln_from_data(KILN_CPU, KILN_F32, KILN_SHAPE(NP), got)), all,
                                sizeof(float) * NP * (size_t)world) == KILN_OK);
        for (int r = 0; r < world; r++)
            KT_CHECK_MSG(memcmp(all + r * NP, got, sizeof got) == 0, "rank %d's weights differ from rank %d's", r, rank);
    }
    kiln_ddp_free(ddp);
    kiln_optimizer_free(opt);
    kiln_optimizer_free(ref_opt);
    kiln_module_free(m);
    kiln_module_free(ref);
}

KT_TEST(unused_head_one_bucket) {
    kt_mem_begin();
    same_as_one_process(kiln_ddp_defaults().bucket_bytes, 1);
    KT_MEM_CHECK();
}

/* a bucket per parameter: the buckets of the head a rank does not use are final from the start,
 * the others as backward reaches them; every rank still queues them in one order */
KT_TEST(unused_head_bucket_per_parameter) {
    kt_mem_begin();
    same_as_one_process(16, 6);
    KT_MEM_CHECK();
}

int main(void) {
    if (!kt_dist_begin(&rank, &world)) return 1;
    KT_RUN(unused_head_one_bucket);
    KT_RUN(unused_head_bucket_per_parameter);
    return kt_dist_end();
}
