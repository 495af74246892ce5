/* User-defined modules (kiln_module_new): a custom module with a forward callback and a
 * context, a parameter, a buffer and named children (a Sequential holding a Linear); names
 * as checkpoints see them ("encoder.0.weight"), train/eval reaching the children, a few
 * training steps, a checkpoint saved and loaded into a fresh copy, the free callback, bad
 * input with the caller's file:line, and no leaks. */
#include <kiln.h>

#include "kiln_test.h"

typedef struct {
    int calls;
    bool saw_training;
} net_ctx;

static int ctx_freed;
static void net_free(void *ctx) {
    ctx_freed++;
    free(ctx);
}

static kiln_tensor net_forward(kiln_module *m, kiln_tensor x, void *ctx) {
    net_ctx *n = ctx;
    n->calls++;
    n->saw_training = kiln_module_is_training(m);
    x = kiln_module_forward(kiln_module_child(m, "encoder"), x);
    x = kiln_module_forward(kiln_module_child(m, "head"), x);
    return kiln_mul(x, kiln_module_param(m, "scale"));
}

static kiln_module *net_new(uint64_t seed) {
    net_ctx *ctx = calloc(1, sizeof *ctx);
    kiln_module *m = kiln_module_new("Net", net_forward, ctx, net_free);
    kiln_module *enc[] = {kiln_linear_new(4, 8, true, seed), kiln_relu_new()};
    KT_CHECK(kiln_module_add_child(m, "encoder", kiln_sequential_new(2, enc)) == KILN_OK);
    KT_CHECK(kiln_module_add_child(m, "head", kiln_linear_new(8, 3, true, seed + 1)) == KILN_OK);
    KT_CHECK(kiln_module_add_parameter(m, "scale", kiln_full(KILN_CPU, KILN_F32, KILN_SHAPE(3), 1.0 + (double)seed)) == KILN_OK);
    KT_CHECK(kiln_module_add_buffer(m, "seen", kiln_zeros(KILN_CPU, KILN_I64, KILN_SCALAR_SHAPE)) == KILN_OK);
    return m;
}

static const float xs[16 * 4] = {0.5f, -1.f, 0.25f, 2.f, 1.f, 0.f, -0.5f, 0.3f, -1.2f, 0.7f, 0.1f, 0.f,
                                 0.f, 0.4f, -0.9f, 1.1f, 0.2f, 0.2f, 0.2f, -0.2f, 1.5f, -0.3f, 0.8f, 0.6f,
                                 -0.6f, 1.3f, 0.f, -1.f, 0.9f, 0.9f, -0.1f, 0.4f, 0.3f, -0.8f, 1.2f, -0.4f,
                                 -0.2f, 0.f, 0.6f, 0.9f, 1.f, 1.f, -1.f, -1.f, 0.1f, -0.1f, 0.5f, -0.5f,
                                 0.7f, 0.3f, -0.3f, 0.2f, -0.4f, -0.9f, 0.6f, 1.4f, 0.f, 0.f, 0.f, 1.f,
                                 0.8f, -0.7f, -0.2f, 0.1f};
static const int64_t ys[16] = {0, 1, 2, 1, 0, 2, 1, 0, 2, 2, 1, 0, 1, 2, 0, 1};

static kiln_tensor batch_x(void) { return kiln_from_data(KILN_CPU, KILN_F32, KILN_SHAPE(16, 4), xs); }

KT_TEST(custom_module_names_and_modes) {
    kt_mem_begin();
    ctx_freed = 0;
    kiln_module *m = net_new(1);
    KT_CHECK(strcmp(kiln_module_type(m), "Net") == 0);
    kiln_param ps[8];
    int n = kiln_module_params(m, ps, 8);
    KT_CHECK(n == 6);
    const char *want[] = {"scale", "seen", "encoder.0.weight", "encoder.0.bias", "head.weight", "head.bias"};
    for (int i = 0; i < n && i < 6; i++) KT_CHECK_MSG(strcmp(ps[i].name, want[i]) == 0, "%d: %s", i, ps[i].name);
    KT_CHECK(!ps[0].buffer && ps[1].buffer && kiln_requires_grad(*ps[0].slot) && !kiln_requires_grad(*ps[1].slot));
    KT_CHECK(kiln_module_num_parameters(m) == 3 + 4 * 8 + 8 + 8 * 3 + 3);
    net_ctx *ctx = kiln_module_context(m);
    KT_CHECK(ctx != NULL && kiln_module_context(kiln_module_child(m, "head")) == NULL);
    /* dotted paths */
    KT_CHECK(strcmp(kiln_module_type(kiln_module_child(m, "encoder.0")), "Linear") == 0);
    kiln_tensor w = kiln_module_param(m, "encoder.0.weight");
    KT_CHECK(kiln_tensor_dim(w, 0) == 8 && kiln_tensor_dim(w, 1) == 4);
    kiln_release(w);
    /* forward with the context; train/eval reaches every child */
    kiln_tensor y = kiln_module_forward(m, batch_x());
    KT_CHECK(kiln_tensor_dim(y, 1) == 3);
    kiln_release(y);
    KT_CHECK(ctx->calls == 1 && ctx->saw_training);
    kiln_module_train(m, false);
    KT_CHECK(!kiln_module_is_training(kiln_module_child(m, "encoder.1")));
    kiln_release(kiln_module_forward(m, batch_x()));
    KT_CHECK(ctx->calls == 2 && !ctx->saw_training);
    kiln_module_free(m);
    KT_CHECK(ctx_freed == 1);
    KT_MEM_CHECK();
}

static double train_steps(kiln_module *m, kiln_optimizer *opt, int steps) {
    float last = 0;
    for (int s = 0; s < steps; s++) {
        kiln_tensor logits = kiln_module_forward(m, batch_x());
        kiln_tensor loss = kiln_cross_entropy(logits, kiln_from_data(KILN_CPU, KILN_I64, KILN_SHAPE(16), ys),
                                              kiln_cross_entropy_defaults());
        KT_CHECK(kiln_into_scalar(kiln_ref(loss), &last) == KILN_OK);
        kiln_grads *g = NULL;
        KT_CHECK(kiln_backward(loss, &g) == KILN_OK);
        KT_CHECK(kiln_optimizer_step(opt, g) == KILN_OK);
        kiln_grads_free(g);
    }
    return last;
}

KT_TEST(custom_module_trains_and_checkpoints) {
    kt_mem_begin();
    const char *path = "test_nn_module.safetensors";
    kiln_module *m = net_new(1);
    kiln_optimizer *opt = kiln_adam_new(m, kiln_adam_defaults());
    kiln_optimizer_set_lr(opt, 0.05);
    double first = train_steps(m, opt, 1), later = train_steps(m, opt, 15);
    KT_CHECK_MSG(later < first * 0.8, "loss %g -> %g", first, later);
    KT_CHECK(kiln_checkpoint_save(path, m, opt) == KILN_OK);

    kiln_module *copy = net_new(7); /* other values everywhere */
    kiln_optimizer *copy_opt = kiln_adam_new(copy, kiln_adam_defaults());
    KT_CHECK(kiln_checkpoint_load(path, copy, copy_opt) == KILN_OK);
    KT_CHECK(kiln_optimizer_lr(copy_opt) == 0.05 && kiln_optimizer_steps(copy_opt) == 16);
    float a[48], b[48];
    KT_CHECK(kiln_into_data(kiln_module_forward(m, batch_x()), a, sizeof a) == KILN_OK);
    KT_CHECK(kiln_into_data(kiln_module_forward(copy, batch_x()), b, sizeof b) == KILN_OK);
    KT_CHECK(memcmp(a, b, sizeof a) == 0);
    /* and both keep training alike */
    double la = train_steps(m, opt, 2), lb = train_steps(copy, copy_opt, 2);
    KT_CHECK(la == lb);
    /* a module with other names is refused, unchanged */
    kiln_module *other = kiln_module_new("Other", net_forward, NULL, NULL);
    kiln_module_add_parameter(other, "scale", kiln_ones(KILN_CPU, KILN_F32, KILN_SHAPE(3)));
    KT_CHECK(kiln_checkpoint_load(path, other, NULL) == KILN_ERR_SHAPE);
    remove(path);
    kiln_module_free(other);
    kiln_optimizer_free(opt);
    kiln_optimizer_free(copy_opt);
    kiln_module_free(m);
    kiln_module_free(copy);
    KT_MEM_CHECK();
}

static kiln_tensor pass(kiln_module *m, kiln_tensor x, void *ctx) { return (void)m, (void)ctx, x; }

KT_TEST(custom_module_bad_input) {
    kt_mem_begin();
    ctx_freed = 0;
    KT_CHECK(kiln_module_new("X", NULL, malloc(4), net_free) == NULL); KT_EXPECT_ERROR(KILN_ERR_NULL, "kiln_module_new", __LINE__);
    KT_CHECK(ctx_freed == 1); /* the context was taken */
    KT_CHECK(kiln_module_new("a type name far longer than thirty-one bytes", pass, NULL, NULL) == NULL); KT_EXPECT_ERROR(KILN_ERR_INVALID_ARGUMENT, "kiln_module_new", __LINE__);
    kiln_module *m = kiln_module_new(NULL, pass, NULL, NULL);
    KT_CHECK(m != NULL && strcmp(kiln_module_type(m), "Module") == 0);
    KT_CHECK(kiln_module_add_parameter(NULL, "w", kiln_ones(KILN_CPU, KILN_F32, KILN_SHAPE(2))) == KILN_ERR_NULL); KT_EXPECT_ERROR(KILN_ERR_NULL, "kiln_module_add_parameter", __LINE__);
    KT_CHECK(kiln_module_add_parameter(m, NULL, kiln_ones(KILN_CPU, KILN_F32, KILN_SHAPE(2))) == KILN_ERR_NULL); KT_EXPECT_ERROR(KILN_ERR_NULL, "kiln_module_add_parameter", __LINE__);
    KT_CHECK(kiln_module_add_parameter(m, "", kiln_ones(KILN_CPU, KILN_F32, KILN_SHAPE(2))) == KILN_ERR_INVALID_ARGUMENT); KT_EXPECT_ERROR(KILN_ERR_INVALID_ARGUMENT, "kiln_module_add_parameter", __LINE__);
    KT_CHECK(kiln_module_add_parameter(m, "a.b", kiln_ones(KILN_CPU, KILN_F32, KILN_SHAPE(2))) == KILN_ERR_INVALID_ARGUMENT); KT_EXPECT_ERROR(KILN_ERR_INVALID_ARGUMENT, "kiln_module_add_parameter", __LINE__);
    KT_CHECK(kiln_module_add_parameter(m, "a_name_of_thirty_two_characters_", kiln_ones(KILN_CPU, KILN_F32, KILN_SHAPE(2))) == KILN_ERR_INVALID_ARGUMENT);
    KT_CHECK(kiln_module_add_parameter(m, "w", kiln_zeros(KILN_CPU, KILN_I32, KILN_SHAPE(2))) == KILN_ERR_DTYPE); KT_EXPECT_ERROR(KILN_ERR_DTYPE, "kiln_module_add_parameter", __LINE__);
    kiln_tensor stale = kiln_ones(KILN_CPU, KILN_F32, KILN_SHAPE(2));
    kiln_release(stale);
    KT_CHECK(kiln_module_add_buffer(m, "b", stale) == KILN_ERR_STALE_HANDLE); KT_EXPECT_ERROR(KILN_ERR_STALE_HANDLE, "kiln_module_add_buffer", __LINE__);
    kiln_tensor poisoned = kiln_reshape(kiln_ones(KILN_CPU, KILN_F32, KILN_SHAPE(2)), KILN_SHAPE(3));
    KT_CHECK(kiln_module_add_buffer(m, "b", poisoned) == KILN_ERR_SHAPE); KT_EXPECT_ERROR(KILN_ERR_SHAPE, "kiln_module_add_buffer", __LINE__);
    KT_CHECK(kiln_module_add_parameter(m, "w", kiln_ones(KILN_CPU, KILN_F32, KILN_SHAPE(2))) == KILN_OK);
    KT_CHECK(kiln_module_add_buffer(m, "w", kiln_ones(KILN_CPU, KILN_F32, KILN_SHAPE(2))) == KILN_ERR_INVALID_ARGUMENT); KT_EXPECT_ERROR(KILN_ERR_INVALID_ARGUMENT, "kiln_module_add_buffer", __LINE__);
    KT_CHECK(strstr(kiln_last_error(), "already has a parameter named 'w'") != NULL);

    KT_CHECK(kiln_module_add_child(m, "c", NULL) == KILN_ERR_NULL); KT_EXPECT_ERROR(KILN_ERR_NULL, "kiln_module_add_child", __LINE__);
    KT_CHECK(kiln_module_add_child(NULL, "c", kiln_relu_new()) == KILN_ERR_NULL); KT_EXPECT_ERROR(KILN_ERR_NULL, "kiln_module_add_child", __LINE__);
    KT_CHECK(kiln_module_add_child(m, "w", kiln_relu_new()) == KILN_ERR_INVALID_ARGUMENT); KT_EXPECT_ERROR(KILN_ERR_INVALID_ARGUMENT, "kiln_module_add_child", __LINE__);
    KT_CHECK(kiln_module_add_child(m, "self", m) == KILN_ERR_INVALID_ARGUMENT); KT_EXPECT_ERROR(KILN_ERR_INVALID_ARGUMENT, "kiln_module_add_child", __LINE__);
    kiln_module *child = kiln_relu_new();
    KT_CHECK(kiln_module_add_child(m, "act", child) == KILN_OK);
    KT_CHECK(kiln_module_add_child(m, "act2", child) == KILN_ERR_INVALID_ARGUMENT); KT_EXPECT_ERROR(KILN_ERR_INVALID_ARGUMENT, "kiln_module_add_child", __LINE__);
    kiln_module *outer = kiln_module_new("Outer", pass, NULL, NULL);
    KT_CHECK(kiln_module_add_child(outer, "inner", m) == KILN_OK);
    KT_CHECK(kiln_module_add_child(child, "loop", outer) == KILN_ERR_INVALID_ARGUMENT); /* outer contains child */
    KT_CHECK(kiln_module_child(outer, "inner.act") == child);

    KT_CHECK(kiln_module_child(outer, "nope") == NULL); KT_EXPECT_ERROR(KILN_ERR_INVALID_ARGUMENT, "kiln_module_child", __LINE__);
    KT_CHECK(kiln_module_child(NULL, "inner") == NULL); KT_EXPECT_ERROR(KILN_ERR_NULL, "kiln_module_child", __LINE__);
    KT_CHECK(kiln_module_child(outer, NULL) == NULL); KT_EXPECT_ERROR(KILN_ERR_NULL, "kiln_module_child", __LINE__);
    KT_READ_ERROR(kiln_module_param(outer, "inner.nope"), KILN_ERR_INVALID_ARGUMENT, "kiln_module_param");
    KT_READ_ERROR(kiln_module_param(outer, "x.w"), KILN_ERR_INVALID_ARGUMENT, "kiln_module_param");
    KT_READ_ERROR(kiln_module_param(NULL, "w"), KILN_ERR_NULL, "kiln_module_param");
    kiln_tensor w = kiln_module_param(outer, "inner.w");
    KT_CHECK(kiln_tensor_numel(w) == 2 && kiln_tensor_status(w) == KILN_OK);
    kiln_release(w);
    kiln_module_free(outer);
    KT_MEM_CHECK();
}

/* A misspelt child: the lookup names the missing child and lists the ones there are, and the
 * NULL it gives, passed to kiln_module_forward, says where it came from. */
KT_TEST(misspelt_child_is_named) {
    kt_mem_begin();
    kiln_module *m = net_new(1);
    KT_CHECK(kiln_module_child(m, "encodr") == NULL);
    const char *msg = kiln_last_error();
    KT_CHECK_MSG(strstr(msg, "no child 'encodr'") && strstr(msg, "'encoder', 'head'"), "%s", msg);
    KT_CHECK(kiln_module_child(m, "encoder.5") == NULL);
    KT_CHECK_MSG(strstr(kiln_last_error(), "'0', '1'") != NULL, "%s", kiln_last_error());
    int line = __LINE__ + 1;
    kiln_tensor y = kiln_module_forward(kiln_module_child(m, "haed"), kiln_ones(KILN_CPU, KILN_F32, KILN_SHAPE(2, 8)));
    KT_CHECK(kiln_into_data(y, NULL, 0) == KILN_ERR_NULL);
    KT_EXPECT_ERROR(KILN_ERR_NULL, "no child 'haed'", line);
    KT_CHECK(kiln_module_child(m, "head") != NULL); /* a lookup that succeeds forgets the failed one */
    KT_CHECK(kiln_into_data(kiln_module_forward(NULL, kiln_ones(KILN_CPU, KILN_F32, KILN_SHAPE(2))), NULL, 0) == KILN_ERR_NULL);
    KT_CHECK(strstr(kiln_last_error(), "haed") == NULL);
    KT_READ_ERROR(kiln_module_param(m, "encodr.0.weight"), KILN_ERR_INVALID_ARGUMENT, "kiln_module_param");
    KT_CHECK(strstr(kiln_last_error(), "its children: 'encoder', 'head'") != NULL);
    kiln_module_free(m);
    KT_MEM_CHECK();
}

int main(void) {
    KT_RUN(misspelt_child_is_named);
    KT_RUN(custom_module_names_and_modes);
    KT_RUN(custom_module_trains_and_checkpoints);
    KT_RUN(custom_module_bad_input);
    return kt_finish();
}
