/* Options structs written as designated initializers, naming one field: a field left 0 takes
 * its default (so (kiln_adam_options){.lr = 1e-3} trains as kiln_adam_defaults() with that lr,
 * not with betas and eps of 0, which turned weights into NaN at a zero gradient), KILN_ZERO
 * asks for a real 0, and where a 0 cannot mean a default the constructor refuses it naming
 * itself and the caller's line. */
#include <kiln.h>
#include <math.h>

#include "kiln_test.h"

#define N 4
#define STEPS 3

typedef enum { SGD, ADAM, RMSPROP, ADAGRAD } kind;

typedef struct {
    kind k;
    kiln_sgd_options sgd;
    kiln_adam_options adam;
    kiln_rmsprop_options rmsprop;
    kiln_adagrad_options adagrad;
} any_options;

/* Gradients of three steps, the middle one zero (the step that turned 0/0 into NaN). */
static const float grads[STEPS][N] = {{0.5f, -1.0f, 0.25f, 2.0f}, {0, 0, 0, 0}, {-0.3f, 0.7f, 1.5f, -0.1f}};

/* The parameter after STEPS updates by an optimizer with options o, or NaNs when the optimizer
 * was refused. */
static void train(any_options o, float out[N]) {
    static const float w0[N] = {1.0f, -2.0f, 0.5f, 3.0f};
    kiln_tensor w = kiln_leaf(kiln_from_data(KILN_CPU, KILN_F32, KILN_SHAPE(N), w0));
    kiln_optimizer *opt = o.k == SGD       ? kiln_sgd_new_params(1, &w, o.sgd)
                          : o.k == ADAM    ? kiln_adam_new_params(1, &w, o.adam)
                          : o.k == RMSPROP ? kiln_rmsprop_new_params(1, &w, o.rmsprop)
                                           : kiln_adagrad_new_params(1, &w, o.adagrad);
    for (int i = 0; i < N; i++) out[i] = NAN;
    for (int s = 0; s < STEPS && opt; s++) {
        kiln_tensor c = kiln_from_data(KILN_CPU, KILN_F32, KILN_SHAPE(N), grads[s]);
        kiln_grads *g = NULL;
        KT_CHECK(kiln_backward(kiln_sum(kiln_mul(kiln_ref(w), c)), &g) == KILN_OK);
        KT_CHECK(kiln_optimizer_step(opt, g) == KILN_OK);
        kiln_grads_free(g);
    }
    if (opt) KT_CHECK(kiln_into_data(kiln_ref(w), out, sizeof(float) * N) == KILN_OK);
    kiln_optimizer_free(opt);
    kiln_release(w);
}

/* The run with only one field set equals the run with the defaults and that field set, and
 * changed the weights (finitely). */
static void expect_same(any_options one_field, any_options defaults_with_it, const char *what) {
    float a[N], b[N];
    train(one_field, a);
    train(defaults_with_it, b);
    for (int i = 0; i < N; i++) {
        KT_CHECK_MSG(isfinite(a[i]) && memcmp(&a[i], &b[i], sizeof a[i]) == 0, "%s: w[%d] %.9g, with the defaults %.9g",
                     what, i, (double)a[i], (double)b[i]);
    }
}

KT_TEST(sgd_one_field) {
    kiln_sgd_options d = kiln_sgd_defaults();
    d.momentum = 0.9;
    expect_same((any_options){SGD, .sgd = {.momentum = 0.9}}, (any_options){SGD, .sgd = d}, "sgd momentum");
    d = kiln_sgd_defaults();
    d.weight_decay = 0.1;
    expect_same((any_options){SGD, .sgd = {.weight_decay = 0.1}}, (any_options){SGD, .sgd = d}, "sgd weight_decay");
    d = kiln_sgd_defaults();
    d.lr = 0.5;
    expect_same((any_options){SGD, .sgd = {.lr = 0.5}}, (any_options){SGD, .sgd = d}, "sgd lr");
}

KT_TEST(adam_one_field) {
    kiln_adam_options d = kiln_adam_defaults();
    d.lr = 0.1;
    expect_same((any_options){ADAM, .adam = {.lr = 0.1}}, (any_options){ADAM, .adam = d}, "adam lr");
    d = kiln_adam_defaults();
    d.beta1 = 0.5;
    expect_same((any_options){ADAM, .adam = {.beta1 = 0.5}}, (any_options){ADAM, .adam = d}, "adam beta1");
    d = kiln_adam_defaults();
    d.beta2 = 0.9;
    expect_same((any_options){ADAM, .adam = {.beta2 = 0.9}}, (any_options){ADAM, .adam = d}, "adam beta2");
    d = kiln_adam_defaults();
    d.eps = 1e-3;
    expect_same((any_options){ADAM, .adam = {.eps = 1e-3}}, (any_options){ADAM, .adam = d}, "adam eps");
    d = kiln_adam_defaults();
    d.weight_decay = 0.1;
    expect_same((any_options){ADAM, .adam = {.weight_decay = 0.1}}, (any_options){ADAM, .adam = d}, "adam decay");
    d = kiln_adam_defaults();
    d.decoupled_weight_decay = true;
    expect_same((any_options){ADAM, .adam = {.decoupled_weight_decay = true}}, (any_options){ADAM, .adam = d},
                "adam decoupled");
    /* an explicit 0 where 0 means the default: KILN_ZERO, as beta1 = 0 in PyTorch */
    d = kiln_adam_defaults();
    d.beta1 = 1e-300; /* a beta1 whose powers vanish at once: the same arithmetic as 0 */
    expect_same((any_options){ADAM, .adam = {.lr = 1e-3, .beta1 = KILN_ZERO, .beta2 = 0.999, .eps = 1e-8}},
                (any_options){ADAM, .adam = d}, "adam beta1 KILN_ZERO");
}

KT_TEST(rmsprop_adagrad_one_field) {
    kiln_rmsprop_options r = kiln_rmsprop_defaults();
    r.momentum = 0.5;
    expect_same((any_options){RMSPROP, .rmsprop = {.momentum = 0.5}}, (any_options){RMSPROP, .rmsprop = r},
                "rmsprop momentum");
    r = kiln_rmsprop_defaults();
    r.centered = true;
    expect_same((any_options){RMSPROP, .rmsprop = {.centered = true}}, (any_options){RMSPROP, .rmsprop = r},
                "rmsprop centered");
    r = kiln_rmsprop_defaults();
    r.alpha = 0.5;
    expect_same((any_options){RMSPROP, .rmsprop = {.alpha = 0.5}}, (any_options){RMSPROP, .rmsprop = r},
                "rmsprop alpha");
    kiln_adagrad_options a = kiln_adagrad_defaults();
    a.lr_decay = 0.1;
    expect_same((any_options){ADAGRAD, .adagrad = {.lr_decay = 0.1}}, (any_options){ADAGRAD, .adagrad = a},
                "adagrad lr_decay");
    a = kiln_adagrad_defaults();
    a.lr = 0.3;
    expect_same((any_options){ADAGRAD, .adagrad = {.lr = 0.3}}, (any_options){ADAGRAD, .adagrad = a}, "adagrad lr");
}

/* A learning rate of KILN_ZERO is a real 0: the weights do not move. */
KT_TEST(explicit_zero_rate) {
    float w[N];
    train((any_options){SGD, .sgd = {.lr = KILN_ZERO}}, w);
    KT_CHECK(w[0] == 1.0f && w[1] == -2.0f && w[2] == 0.5f && w[3] == 3.0f);
}

/* A parameter group naming only its tensors takes the options' rate (it used to train at 0). */
KT_TEST(group_rate_left_zero) {
    static const float w0[2] = {1.0f, 2.0f};
    kiln_tensor w = kiln_leaf(kiln_from_data(KILN_CPU, KILN_F32, KILN_SHAPE(2), w0));
    kiln_param_group g = {.params = &w, .n = 1};
    kiln_optimizer *opt = kiln_sgd_new_groups(1, &g, (kiln_sgd_options){.lr = 0.5});
    KT_CHECK(opt && kiln_optimizer_group_lr(opt, 0) == 0.5);
    kiln_optimizer_free(opt);
    kiln_release(w);
}

/* The loader's prefetch left 0 with workers is the default, not a refusal; the DDP wrapper's
 * bucket size left 0 is the default. */
KT_TEST(loader_and_ddp_left_zero) {
    float x[8] = {0, 1, 2, 3, 4, 5, 6, 7};
    int64_t y[8] = {0, 1, 2, 3, 4, 5, 6, 7};
    kiln_dataset *ds = kiln_memory_dataset_new(kiln_from_data(KILN_CPU, KILN_F32, KILN_SHAPE(8, 1), x),
                                               kiln_from_data(KILN_CPU, KILN_I64, KILN_SHAPE(8), y));
    kiln_loader *l = kiln_loader_new(ds, (kiln_loader_options){.batch_size = 4, .workers = 2});
    KT_CHECK_MSG(l != NULL, "%s", kiln_last_error());
    kiln_tensor in, tg;
    int batches = 0;
    float first[4];
    while (l && kiln_loader_next(l, &in, &tg) == KILN_OK) {
        if (batches++ == 0) KT_CHECK(kiln_into_data(kiln_ref(in), first, sizeof first) == KILN_OK);
        kiln_release(in), kiln_release(tg);
    }
    KT_CHECK(batches == 2 && first[0] == 0 && first[3] == 3); /* in order: shuffle read as written */
    kiln_loader_free(l);
    l = kiln_loader_new(ds, (kiln_loader_options){.workers = 2}); /* batch_size is required */
    KT_CHECK(l == NULL);
    KT_EXPECT_ERROR(KILN_ERR_INVALID_ARGUMENT, "batch_size", 0);
    KT_CHECK(strstr(kiln_last_error(), "kiln_loader_new") != NULL);
    kiln_dataset_free(ds);

    kiln_module *m = kiln_linear_new(2, 2, true, 1);
    kiln_ddp *d = kiln_ddp_new(m, (kiln_ddp_options){0});
    KT_CHECK_MSG(d != NULL, "%s", kiln_last_error());
    kiln_ddp_free(d);
    kiln_module_free(m);
}

/* Where 0 has no default (a layer's sizes) or a zero field is a choice, the constructor says
 * which field and names itself and the caller's line. */
KT_TEST(refused_zero_fields_are_named) {
    int line = __LINE__ + 1;
    KT_CHECK(kiln_conv2d_new((kiln_conv2d_options){.in_channels = 3, .out_channels = 4, .kernel_h = 3}, 1) == NULL);
    KT_EXPECT_ERROR(KILN_ERR_INVALID_ARGUMENT, "kiln_conv2d_new", line);
    line = __LINE__ + 1;
    KT_CHECK(kiln_lstm_new((kiln_rnn_options){.input_size = 3, .hidden_size = 4}, 1) == NULL);
    KT_EXPECT_ERROR(KILN_ERR_INVALID_ARGUMENT, "num_layers", line);
    /* cross entropy's defaults are all zero: a zeroed struct is the defaults */
    kiln_cross_entropy_options z = {0}, d = kiln_cross_entropy_defaults();
    KT_CHECK(z.label_smoothing == d.label_smoothing && z.class_weights.id == d.class_weights.id &&
             z.has_ignore_index == d.has_ignore_index && z.reduction == d.reduction);
}

int main(void) {
    KT_RUN(sgd_one_field);
    KT_RUN(adam_one_field);
    KT_RUN(rmsprop_adagrad_one_field);
    KT_RUN(explicit_zero_rate);
    KT_RUN(group_rate_left_zero);
    KT_RUN(loader_and_ddp_left_zero);
    KT_RUN(refused_zero_fields_are_named);
    return kt_finish();
}
