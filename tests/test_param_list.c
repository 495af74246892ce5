/* Parameters outside a module, as PyTorch's plain tensors with requires_grad: kiln_leaf (a
 * tensor marked as a leaf in one expression) and the optimizers over a plain parameter list
 * (kiln_sgd_new_params, kiln_adam_new_params, kiln_rmsprop_new_params, kiln_adagrad_new_params), checked against hand-computed updates and
 * against the same optimizer built from one parameter group. */
#include <kiln.h>

#include "kiln_test.h"

static kiln_tensor f64(kiln_shape s, const double *v) { return kiln_from_data(KILN_CPU, KILN_F64, s, v); }

static void read_f64(kiln_tensor t, double *out, int n) {
    KT_CHECK_MSG(kiln_into_data(kiln_cast(t, KILN_F64), out, sizeof(double) * (size_t)n) == KILN_OK, "%s",
                 kiln_last_error());
}

KT_TEST(leaf_marks_and_returns_the_tensor) {
    kt_mem_begin();
    const kiln_dtype floats[] = {KILN_F32, KILN_F64, KILN_F16, KILN_BF16};
    for (int d = 0; d < 4; d++) {
        kiln_tensor w = kiln_leaf(kiln_cast(f64(KILN_SHAPE(3), (double[]){1, -2, 3}), floats[d]));
        KT_CHECK(kiln_tensor_status(w) == KILN_OK && kiln_requires_grad(w) && kiln_tensor_dtype(w) == floats[d]);
        w = kiln_leaf(w); /* a leaf already: unchanged */
        kiln_grads *g = NULL;
        KT_CHECK(kiln_backward(kiln_sum(kiln_mul(kiln_ref(w), kiln_ref(w))), &g) == KILN_OK);
        double got[3], dw[3];
        read_f64(kiln_grad(g, w), dw, 3); /* d sum(w^2) / dw = 2 w */
        read_f64(w, got, 3);
        for (int i = 0; i < 3; i++) KT_NEAR(dw[i], 2 * got[i], 1e-12);
        KT_NEAR(got[1], -2, 0);
        kiln_grads_free(g);
    }
    /* the same tensor, no copy: a handle kept before marking sees the mark */
    kiln_tensor x = f64(KILN_SHAPE(2), (double[]){1, 2});
    kiln_tensor kept = kiln_ref(x);
    kiln_tensor leaf = kiln_leaf(x);
    KT_CHECK(kiln_requires_grad(kept));
    kiln_release(kept);
    kiln_release(leaf);
    KT_MEM_CHECK();
}

KT_TEST(leaf_bad_input) {
    kt_mem_begin();
    KT_READ_ERROR(kiln_leaf(kiln_zeros(KILN_CPU, KILN_I64, KILN_SHAPE(2))), KILN_ERR_DTYPE, "kiln_leaf");
    KT_READ_ERROR(kiln_leaf(kiln_zeros(KILN_CPU, KILN_BOOL, KILN_SHAPE(2))), KILN_ERR_DTYPE, "kiln_leaf");
    kiln_tensor w = kiln_leaf(kiln_ones(KILN_CPU, KILN_F32, KILN_SHAPE(2)));
    kiln_tensor y = kiln_mul_scalar(kiln_ref(w), 2); /* computed by a tracked op: no leaf */
    KT_READ_ERROR(kiln_leaf(y), KILN_ERR_INVALID_ARGUMENT, "kiln_detach");
    kiln_tensor d = kiln_leaf(kiln_detach(kiln_mul_scalar(kiln_ref(w), 2))); /* as the message says */
    KT_CHECK(kiln_tensor_status(d) == KILN_OK && kiln_requires_grad(d));
    kiln_release(d);
    kiln_release(w);
    KT_READ_ERROR(kiln_leaf(w), KILN_ERR_STALE_HANDLE, "kiln_leaf"); /* released */
    /* a poisoned input keeps its own error */
    KT_READ_ERROR(kiln_leaf(kiln_reshape(kiln_zeros(KILN_CPU, KILN_F32, KILN_SHAPE(2)), KILN_SHAPE(3))), KILN_ERR_SHAPE,
                  "kiln_reshape");
    KT_MEM_CHECK();
}

/* Two steps of loss = sum(c * w) + sum(c * b) (gradients c): SGD(lr 0.5) moves each parameter
 * by -0.5 c per step, as torch.optim.SGD([w, b], lr=0.5). */
KT_TEST(sgd_over_a_list_matches_reference) {
    kt_mem_begin();
    const double w0[4] = {1, 2, 3, 4}, b0[1] = {0.5}, cw[4] = {0.1, -0.2, 0.3, 1}, cb[1] = {-1};
    kiln_tensor w = kiln_leaf(f64(KILN_SHAPE(2, 2), w0)), b = kiln_leaf(f64(KILN_SHAPE(1), b0));
    kiln_optimizer *opt = kiln_sgd_new_params(2, (kiln_tensor[]){w, b}, (kiln_sgd_options){.lr = 0.5});
    KT_CHECK(opt != NULL && kiln_optimizer_num_groups(opt) == 1 && kiln_optimizer_lr(opt) == 0.5);
    for (int step = 0; step < 2 && opt; step++) {
        kiln_tensor loss = kiln_add(kiln_sum(kiln_mul(kiln_ref(w), f64(KILN_SHAPE(2, 2), cw))),
                                    kiln_sum(kiln_mul(kiln_ref(b), f64(KILN_SHAPE(1), cb))));
        double l;
        KT_CHECK(kiln_train_step(opt, loss, &l) == KILN_OK);
    }
    double gw[4], gb[1];
    read_f64(kiln_ref(w), gw, 4);
    read_f64(kiln_ref(b), gb, 1);
    for (int i = 0; i < 4; i++) KT_NEAR(gw[i], w0[i] - 2 * 0.5 * cw[i], 1e-15);
    KT_NEAR(gb[0], b0[0] - 2 * 0.5 * cb[0], 1e-15);
    kiln_optimizer_free(opt);
    kiln_release(w);
    kiln_release(b);
    KT_MEM_CHECK();
}

/* An optimizer over a list is the same optimizer over one group of that list: bit-identical
 * after three steps, for each kind that takes a list. */
static kiln_optimizer *make_opt(int kind, bool as_list, kiln_tensor *p) {
    kiln_param_group g = kiln_param_group_of(2, p);
    switch (kind) {
    case 0: {
        kiln_adam_options o = kiln_adamw_defaults();
        o.lr = 0.1;
        return as_list ? kiln_adam_new_params(2, p, o) : kiln_adam_new_groups(1, &g, o);
    }
    case 1: {
        kiln_rmsprop_options o = kiln_rmsprop_defaults();
        o.momentum = 0.5;
        o.centered = true;
        return as_list ? kiln_rmsprop_new_params(2, p, o) : kiln_rmsprop_new_groups(1, &g, o);
    }
    default: {
        kiln_adagrad_options o = kiln_adagrad_defaults();
        o.lr_decay = 0.1;
        return as_list ? kiln_adagrad_new_params(2, p, o) : kiln_adagrad_new_groups(1, &g, o);
    }
    }
}

KT_TEST(list_is_one_group) {
    for (int kind = 0; kind < 3; kind++) {
        kt_mem_begin();
        kiln_tensor p[2][2];
        kiln_optimizer *opt[2];
        for (int k = 0; k < 2; k++) {
            p[k][0] = kiln_leaf(kiln_randn(KILN_CPU, KILN_F32, KILN_SHAPE(3, 2), 7));
            p[k][1] = kiln_leaf(kiln_randn(KILN_CPU, KILN_F32, KILN_SHAPE(2), 8));
            opt[k] = make_opt(kind, k == 0, p[k]);
            KT_CHECK_MSG(opt[k] != NULL, "kind %d", kind);
            for (int step = 0; step < 3 && opt[k]; step++) {
                kiln_tensor x = kiln_randn(KILN_CPU, KILN_F32, KILN_SHAPE(4, 3), (uint64_t)step);
                kiln_tensor h = kiln_add(kiln_matmul(x, kiln_ref(p[k][0])), kiln_ref(p[k][1]));
                KT_CHECK(kiln_train_step(opt[k], kiln_mean(kiln_mul(kiln_ref(h), h)), NULL) == KILN_OK);
            }
        }
        for (int i = 0; i < 2; i++) {
            double a[6], b[6];
            int n = i == 0 ? 6 : 2;
            read_f64(p[0][i], a, n);
            read_f64(p[1][i], b, n);
            for (int j = 0; j < n; j++)
                KT_CHECK_MSG(a[j] == b[j], "kind %d param %d [%d]: %.9g vs %.9g", kind, i, j, a[j], b[j]);
        }
        kiln_optimizer_free(opt[0]);
        kiln_optimizer_free(opt[1]);
        KT_MEM_CHECK();
    }
}

KT_TEST(list_bad_input) {
    kt_mem_begin();
    kiln_tensor w = kiln_leaf(kiln_ones(KILN_CPU, KILN_F32, KILN_SHAPE(2)));
    kiln_tensor plain = kiln_ones(KILN_CPU, KILN_F32, KILN_SHAPE(2));
    int line = __LINE__ + 1;
    KT_CHECK(kiln_sgd_new_params(0, &w, kiln_sgd_defaults()) == NULL);
    KT_EXPECT_ERROR(KILN_ERR_INVALID_ARGUMENT, "kiln_sgd_new_params", line);
    KT_CHECK(kiln_adam_new_params(2, NULL, kiln_adam_defaults()) == NULL);
    KT_EXPECT_ERROR(KILN_ERR_NULL, "kiln_adam_new_params", __LINE__ - 1);
    KT_CHECK(kiln_adam_new_params(1, &plain, kiln_adam_defaults()) == NULL); /* not a leaf */
    KT_EXPECT_ERROR(KILN_ERR_INVALID_ARGUMENT, "kiln_adam_new_params", __LINE__ - 1);
    KT_CHECK(kiln_sgd_new_params(2, (kiln_tensor[]){w, w}, kiln_sgd_defaults()) == NULL); /* twice */
    KT_EXPECT_ERROR(KILN_ERR_INVALID_ARGUMENT, "kiln_sgd_new_params", __LINE__ - 1);
    KT_CHECK(kiln_sgd_new_params(1, &w, (kiln_sgd_options){.lr = -1}) == NULL);
    KT_EXPECT_ERROR(KILN_ERR_INVALID_ARGUMENT, "kiln_sgd_new_params", __LINE__ - 1);
    kiln_adam_options o = kiln_adam_defaults();
    o.beta1 = 1.5;
    KT_CHECK(kiln_adam_new_params(1, &w, o) == NULL);
    KT_EXPECT_ERROR(KILN_ERR_INVALID_ARGUMENT, "kiln_adam_new_params", __LINE__ - 1);
    KT_CHECK(kiln_rmsprop_new_params(0, &w, kiln_rmsprop_defaults()) == NULL);
    KT_EXPECT_ERROR(KILN_ERR_INVALID_ARGUMENT, "kiln_rmsprop_new_params", __LINE__ - 1);
    KT_CHECK(kiln_adagrad_new_params(1, &plain, kiln_adagrad_defaults()) == NULL); /* not a leaf */
    KT_EXPECT_ERROR(KILN_ERR_INVALID_ARGUMENT, "kiln_adagrad_new_params", __LINE__ - 1);
    kiln_release(w);
    kiln_release(plain);
    KT_MEM_CHECK();
}

int main(void) {
    KT_RUN(leaf_marks_and_returns_the_tensor);
    KT_RUN(leaf_bad_input);
    KT_RUN(sgd_over_a_list_matches_reference);
    KT_RUN(list_is_one_group);
    KT_RUN(list_bad_input);
    return kt_finish();
}
