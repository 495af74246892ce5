/* kiln_module_param_groups: a module's trainable parameters split by a name predicate into two
 * optimizer groups (buffers left out), equal in training to the same groups built by hand;
 * bad arguments named with the caller's line; no leaks. */
#include <kiln.h>
#include <string.h>

#include "kiln_test.h"

static bool is_bias(const char *name, void *ctx) {
    int *calls = ctx;
    ++*calls;
    return strstr(name, "bias") != NULL;
}

static kiln_module *model_new(void) {
    kiln_module *layers[] = {kiln_linear_new(3, 4, true, 1), kiln_layer_norm_new(4, 1e-5, true), kiln_relu_new(),
                             kiln_linear_new(4, 2, true, 2)};
    kiln_module *m = kiln_sequential_new(4, layers);
    KT_CHECK(kiln_module_add_buffer(m, "seen", kiln_zeros(KILN_CPU, KILN_I64, KILN_SHAPE(1))) == KILN_OK); /* not trained */
    return m;
}

static kiln_tensor loss_of(kiln_module *m) {
    static const float xs[12] = {1, 2, 3, -1, 0.5f, 2, 0, 1, -2, 3, 1, 1};
    return kiln_sum(kiln_mul(kiln_module_forward(m, kiln_from_data(KILN_CPU, KILN_F32, KILN_SHAPE(4, 3), xs)),
                             kiln_full(KILN_CPU, KILN_F32, KILN_SHAPE(4, 2), 0.5)));
}

KT_TEST(split_by_name_trains_as_by_hand) {
    kt_mem_begin();
    kiln_module *a = model_new(), *b = model_new();
    kiln_tensor handles[8];
    kiln_param_group groups[2];
    int calls = 0;
    KT_CHECK(kiln_module_param_groups(a, is_bias, &calls, handles, 8, groups) == 6);
    KT_CHECK(calls > 0 && groups[0].n == 3 && groups[1].n == 3); /* 3 biases; 3 weights; not the buffer */
    KT_CHECK(groups[0].params == handles && groups[1].params == handles + 3);
    groups[0].weight_decay = 0;
    kiln_optimizer *oa = kiln_adam_new_groups(2, groups, kiln_adamw_defaults());
    /* by hand, as a PyTorch user writes it */
    kiln_param ps[16];
    int n = kiln_module_params(b, ps, 16);
    kiln_tensor decay[8], no_decay[8];
    int nd = 0, nn = 0;
    for (int i = 0; i < n; i++)
        if (!ps[i].buffer) {
            if (strstr(ps[i].name, "bias")) no_decay[nn++] = *ps[i].slot;
            else decay[nd++] = *ps[i].slot;
        }
    kiln_param_group hand[2] = {kiln_param_group_of(nn, no_decay), kiln_param_group_of(nd, decay)};
    hand[0].weight_decay = 0;
    kiln_optimizer *ob = kiln_adam_new_groups(2, hand, kiln_adamw_defaults());
    KT_CHECK(oa && ob);
    for (int s = 0; s < 3; s++) {
        KT_CHECK(kiln_train_step(oa, loss_of(a), NULL) == KILN_OK);
        KT_CHECK(kiln_train_step(ob, loss_of(b), NULL) == KILN_OK);
    }
    float wa[8], wb[8];
    KT_CHECK(kiln_into_data(kiln_module_param(a, "3.weight"), wa, sizeof wa) == KILN_OK);
    KT_CHECK(kiln_into_data(kiln_module_param(b, "3.weight"), wb, sizeof wb) == KILN_OK);
    KT_CHECK(memcmp(wa, wb, sizeof wa) == 0);
    KT_CHECK(kiln_into_data(kiln_module_param(a, "0.bias"), wa, 4 * sizeof(float)) == KILN_OK);
    KT_CHECK(kiln_into_data(kiln_module_param(b, "0.bias"), wb, 4 * sizeof(float)) == KILN_OK);
    KT_CHECK(memcmp(wa, wb, 4 * sizeof(float)) == 0);
    kiln_optimizer_free(oa), kiln_optimizer_free(ob);
    kiln_module_free(a), kiln_module_free(b);
    KT_MEM_CHECK();
}

KT_TEST(bad_arguments) {
    kiln_module *m = model_new();
    kiln_tensor handles[8];
    kiln_param_group groups[2];
    int calls = 0;
    int line = __LINE__ + 1;
    KT_CHECK(kiln_module_param_groups(m, is_bias, &calls, handles, 5, groups) == -1);
    KT_EXPECT_ERROR(KILN_ERR_BUFFER_SIZE, "kiln_module_param_groups", line);
    KT_CHECK(strstr(kiln_last_error(), "6 parameters") != NULL);
    line = __LINE__ + 1;
    KT_CHECK(kiln_module_param_groups(NULL, is_bias, &calls, handles, 8, groups) == -1);
    KT_EXPECT_ERROR(KILN_ERR_NULL, "module is NULL", line);
    KT_CHECK(kiln_module_param_groups(m, NULL, NULL, handles, 8, groups) == -1);
    KT_EXPECT_ERROR(KILN_ERR_NULL, "filter is NULL", 0);
    KT_CHECK(kiln_module_param_groups(m, is_bias, &calls, handles, 8, NULL) == -1);
    KT_EXPECT_ERROR(KILN_ERR_NULL, "groups is NULL", 0);
    kiln_module_free(m);
}

int main(void) {
    KT_RUN(split_by_name_trains_as_by_hand);
    KT_RUN(bad_arguments);
    return kt_finish();
}
