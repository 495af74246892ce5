/* Training end to end: metrics read through one transaction, and a short training run (a
 * few hundred steps on a Fashion-MNIST subset, or synthetic data when the dataset is not
 * installed) whose loss falls. */
#include <kiln.h>
#include <unistd.h>

#include "kiln_test.h"

KT_TEST(metrics_sum_what_was_added) {
    kt_mem_begin();
    kiln_metrics *m = kiln_metrics_new();
    float logits[3 * 2] = {2, 1, /* predicts 0 */ 0, 3, /* predicts 1 */ 5, 4 /* predicts 0 */};
    int64_t targets[3] = {0, 0, 0};
    kiln_tensor l = kiln_from_data(KILN_CPU, KILN_F32, KILN_SHAPE(3, 2), logits);
    kiln_tensor t = kiln_from_data(KILN_CPU, KILN_I64, KILN_SHAPE(3), targets);
    KT_CHECK(kiln_metrics_add(m, kiln_full(KILN_CPU, KILN_F32, KILN_SCALAR_SHAPE, 2.0), l, t) == KILN_OK);
    t = kiln_from_data(KILN_CPU, KILN_I64, KILN_SHAPE(1), targets);
    KT_CHECK(kiln_metrics_add(m, kiln_full(KILN_CPU, KILN_F32, KILN_SCALAR_SHAPE, 6.0), KILN_NONE, t) == KILN_OK);
    double loss, acc;
    int64_t n;
    KT_CHECK(kiln_metrics_read(m, &loss, &acc, &n) == KILN_OK);
    KT_NEAR(loss, (2.0 * 3 + 6.0 * 1) / 4, 1e-12); /* weighted by batch size */
    KT_NEAR(acc, 2.0 / 3.0, 1e-12);                 /* only batches with logits count */
    KT_CHECK(n == 4);
    KT_CHECK(kiln_metrics_read(m, &loss, &acc, &n) == KILN_OK); /* reset after a read */
    KT_CHECK(n == 0 && isnan(loss) && isnan(acc));
    kiln_metrics_free(m);
    KT_MEM_CHECK();
}

KT_TEST(metrics_bad_input) {
    kt_mem_begin();
    kiln_metrics *m = kiln_metrics_new();
    kiln_tensor y = kiln_zeros(KILN_CPU, KILN_I64, KILN_SHAPE(4));
    KT_CHECK(kiln_metrics_add(NULL, kiln_ones(KILN_CPU, KILN_F32, KILN_SCALAR_SHAPE), KILN_NONE, kiln_ref(y)) == KILN_ERR_NULL);
    KT_CHECK(kiln_metrics_add(m, kiln_ones(KILN_CPU, KILN_F32, KILN_SHAPE(2)), KILN_NONE, kiln_ref(y)) == KILN_ERR_SHAPE);
    KT_CHECK(strstr(kiln_last_error(), "kiln_metrics_add") != NULL);
    KT_CHECK(kiln_metrics_add(m, kiln_ones(KILN_CPU, KILN_F32, KILN_SCALAR_SHAPE), kiln_zeros(KILN_CPU, KILN_F32, KILN_SHAPE(3, 2)),
                              kiln_ref(y)) == KILN_ERR_SHAPE);
    KT_CHECK(kiln_metrics_read(NULL, NULL, NULL, NULL) == KILN_ERR_NULL);
    kiln_release(y);
    kiln_metrics_free(m);
    kiln_metrics_free(NULL);
    KT_MEM_CHECK();
}

/* Synthetic stand-in for Fashion-MNIST: 10 Gaussian blobs in 784 dims. */
static kiln_dataset *synthetic(int64_t n) {
    kiln_tensor centers = kiln_randn(KILN_CPU, KILN_F32, KILN_SHAPE(10, 1, 28, 28), 5);
    kiln_tensor labels = kiln_cast(kiln_mul_scalar(kiln_rand(KILN_CPU, KILN_F32, KILN_SHAPE(n), 6), 9.999), KILN_I64);
    kiln_tensor x = kiln_add(kiln_index_select(centers, 0, kiln_ref(labels)),
                             kiln_mul_scalar(kiln_randn(KILN_CPU, KILN_F32, KILN_SHAPE(n, 1, 28, 28), 7), 2.0));
    return kiln_memory_dataset_new(x, labels);
}

KT_TEST(short_training_run_loss_falls) {
    kt_mem_begin();
    const char *dir = "/usr/share/datasets/fashion-mnist";
    bool real = access("/usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz", R_OK) == 0;
    kiln_dataset *ds = real ? kiln_idx_dataset_new("/usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz",
                                                   "/usr/share/datasets/fashion-mnist/train-labels-idx1-ubyte.gz")
                            : synthetic(4096);
    (void)dir;
    KT_CHECK(ds != NULL);
    if (!ds) return;
    kiln_module *layers[] = {kiln_flatten_new(1, -1), kiln_linear_new(784, 128, true, 1), kiln_relu_new(),
                             kiln_linear_new(128, 10, true, 2)};
    kiln_module *model = kiln_sequential_new(4, layers);
    kiln_optimizer *opt = kiln_adam_new(model, kiln_adam_defaults());
    kiln_loader_options lo = kiln_loader_defaults(64);
    kiln_loader *loader = kiln_loader_new(ds, lo);
    kiln_metrics *m = kiln_metrics_new();
    KT_CHECK(model && opt && loader && m);
    kiln_loader_start_epoch(loader, 0);
    double first = NAN, last = NAN, acc = 0;
    const int steps = 300, window = 50;
    for (int step = 1; step <= steps; step++) {
        kiln_tensor x, y;
        if (kiln_loader_next(loader, &x, &y) != KILN_OK) break;
        kiln_tensor logits = kiln_module_forward(model, x);
        kiln_tensor loss = kiln_cross_entropy(kiln_ref(logits), kiln_ref(y), kiln_cross_entropy_defaults());
        kiln_metrics_add(m, kiln_ref(loss), logits, y);
        kiln_grads *g = NULL;
        KT_CHECK(kiln_backward(loss, &g) == KILN_OK);
        KT_CHECK(kiln_optimizer_step(opt, g) == KILN_OK);
        kiln_grads_free(g);
        if (step % window == 0) {
            double l;
            KT_CHECK(kiln_metrics_read(m, &l, &acc, NULL) == KILN_OK);
            if (step == window) first = l;
            last = l;
        }
    }
    KT_CHECK_MSG(last < 0.6 * first, "loss went from %.4f to %.4f", first, last);
    KT_CHECK_MSG(acc > 0.7, "accuracy over the last %d steps %.3f", window, acc);
    kiln_metrics_free(m);
    kiln_loader_free(loader);
    kiln_optimizer_free(opt);
    kiln_module_free(model);
    kiln_dataset_free(ds);
    KT_MEM_CHECK();
}

int main(void) {
    KT_RUN(metrics_sum_what_was_added);
    KT_RUN(metrics_bad_input);
    KT_RUN(short_training_run_loss_falls);
    return kt_finish();
}
