/* A bad batch must never reach the weights: a gradient that turns out to be poisoned while
 * it is computed (a cross-entropy target out of range, a poisoned input) makes
 * kiln_optimizer_step return the error naming the op that failed first and its call site,
 * and leaves every parameter and every optimizer state exactly as it was. Later good steps
 * train normally and a checkpoint still saves. Run many times in the default asynchronous
 * mode, where the failing op has usually not run yet when the step is dispatched. */
#include <kiln.h>
#include <stdint.h>
#include <unistd.h>

#include "engine/engine-impl.h"
#include "kiln_test.h"

#define IN 4
#define OUT 2
#define BATCH 3

static void read_all(kiln_module *m, float *out, int64_t cap) {
    kiln_param ps[8];
    int n = kiln_module_params(m, ps, 8);
    int64_t at = 0;
    for (int i = 0; i < n; i++) {
        int64_t k = kiln_tensor_numel(*ps[i].slot);
        KT_CHECK(at + k <= cap);
        if (at + k > cap) return;
        KT_CHECK(kiln_into_data(kiln_ref(*ps[i].slot), out + at, (size_t)k * sizeof(float)) == KILN_OK);
        at += k;
    }
}

static kiln_tensor batch_input(float scale) {
    float x[BATCH * IN];
    for (int i = 0; i < BATCH * IN; i++) x[i] = scale * (float)((i % 7) - 3) / 3.0f;
    return kiln_from_data(KILN_CPU, KILN_F32, KILN_SHAPE(BATCH, IN), x);
}

static kiln_tensor labels(int64_t bad) {
    int64_t y[BATCH] = {0, 1, bad};
    return kiln_from_data(KILN_CPU, KILN_I64, KILN_SHAPE(BATCH), y);
}

/* One training step; returns the step's status, with *line the line of the failing op. */
static kiln_status train_step(kiln_module *m, kiln_optimizer *opt, kiln_tensor x, int64_t label, int *line) {
    kiln_grads *g = NULL;
    kiln_tensor logits = kiln_module_forward(m, x), target = labels(label);
    *line = __LINE__ + 1;
    kiln_tensor loss = kiln_cross_entropy(logits, target, kiln_cross_entropy_defaults());
    kiln_status st = kiln_backward(loss, &g);
    if (st == KILN_OK) st = kiln_optimizer_step(opt, g);
    kiln_grads_free(g);
    return st;
}

static void check_bad_step_changes_nothing(bool adam, bool poison_input) {
    kiln_module *m = kiln_linear_new(IN, OUT, true, 7);
    kiln_optimizer *opt = adam ? kiln_adam_new(m, kiln_adam_defaults()) : kiln_sgd_new(m, ({
        kiln_sgd_options o = kiln_sgd_defaults();
        o.momentum = 0.9;
        o;
    }));
    int line;
    KT_CHECK(train_step(m, opt, batch_input(1), 1, &line) == KILN_OK); /* state exists now */
    float before[IN * OUT + OUT], after[IN * OUT + OUT];
    read_all(m, before, IN * OUT + OUT);
    char path[64];
    snprintf(path, sizeof path, "/tmp/kiln_optim_poison_%d.safetensors", (int)getpid());
    KT_CHECK(kiln_checkpoint_save(path, m, opt) == KILN_OK);
    int64_t steps = kiln_optimizer_steps(opt);

    kiln_status st;
    if (poison_input) { /* an input that fails while it is computed: a gather out of range */
        int64_t idx[1] = {99};
        kiln_tensor xin = batch_input(1), index = kiln_from_data(KILN_CPU, KILN_I64, KILN_SHAPE(1), idx);
        line = __LINE__ + 1;
        kiln_tensor bad_x = kiln_index_select(xin, 0, index);
        kiln_grads *g = NULL;
        kiln_tensor loss = kiln_sum(kiln_module_forward(m, bad_x));
        st = kiln_backward(loss, &g);
        if (st == KILN_OK) st = kiln_optimizer_step(opt, g);
        kiln_grads_free(g);
    } else {
        st = train_step(m, opt, batch_input(1), 7, &line); /* label 7 with 2 classes */
    }
    KT_CHECK_MSG(st == KILN_ERR_INDEX, "step gave %s: %s", kiln_status_str(st), kiln_last_error());
    char site[64];
    snprintf(site, sizeof site, "test_optim_poison.c:%d", line);
    KT_CHECK_MSG(strstr(kiln_last_error(), site) != NULL, "'%s' lacks %s", kiln_last_error(), site);
    KT_CHECK(kiln_optimizer_steps(opt) == steps);
    KT_CHECK(kiln_sync() == KILN_OK); /* reported once, by the step */

    read_all(m, after, IN * OUT + OUT);
    KT_CHECK(memcmp(before, after, sizeof before) == 0);
    /* the optimizer state too: a checkpoint of model + state is byte-identical */
    char path2[64];
    snprintf(path2, sizeof path2, "/tmp/kiln_optim_poison_%d_b.safetensors", (int)getpid());
    KT_CHECK_MSG(kiln_checkpoint_save(path2, m, opt) == KILN_OK, "%s", kiln_last_error());
    FILE *a = fopen(path, "rb"), *b = fopen(path2, "rb");
    KT_CHECK(a && b);
    if (a && b) {
        int ca, cb;
        bool same = true;
        do {
            ca = fgetc(a), cb = fgetc(b);
            same = same && ca == cb;
        } while (same && ca != EOF);
        KT_CHECK_MSG(same, "optimizer state or weights changed by a failed step");
    }
    if (a) fclose(a);
    if (b) fclose(b);
    remove(path), remove(path2);

    /* good steps afterwards train */
    KT_CHECK(train_step(m, opt, batch_input(1), 0, &line) == KILN_OK);
    read_all(m, after, IN * OUT + OUT);
    KT_CHECK(memcmp(before, after, sizeof before) != 0);
    KT_CHECK(kiln_optimizer_steps(opt) == steps + 1);
    kiln_optimizer_free(opt);
    kiln_module_free(m);
}

KT_TEST(bad_target_never_reaches_sgd_weights) {
    for (int i = 0; i < 30; i++) check_bad_step_changes_nothing(false, false);
}

KT_TEST(bad_target_never_reaches_adam_weights) {
    for (int i = 0; i < 30; i++) check_bad_step_changes_nothing(true, false);
}

KT_TEST(poisoned_input_never_reaches_weights) {
    for (int i = 0; i < 30; i++) check_bad_step_changes_nothing(true, true);
}

/* An update op that itself fails while running leaves its parameter readable and unchanged. */
KT_TEST(failing_update_kernel_keeps_the_parameter) {
    kiln_module *m = kiln_linear_new(IN, OUT, false, 3);
    kiln_optimizer *opt = kiln_sgd_new(m, kiln_sgd_defaults());
    float before[IN * OUT], after[IN * OUT];
    read_all(m, before, IN * OUT);
    kiln_grads *g = NULL;
    kiln_tensor loss = kiln_sum(kiln_module_forward(m, batch_input(1)));
    KT_CHECK(kiln_backward(loss, &g) == KILN_OK);
    kiln__debug_fail_next_kernel("kiln_optimizer_step");
    int line = __LINE__ + 1;
    kiln_status st = kiln_optimizer_step(opt, g);
    kiln_grads_free(g);
    kiln_status sync = kiln_sync();
    KT_CHECK_MSG(st == KILN_ERR_KERNEL || sync == KILN_ERR_KERNEL, "step %s, sync %s", kiln_status_str(st),
                 kiln_status_str(sync));
    char site[64];
    snprintf(site, sizeof site, "test_optim_poison.c:%d", line);
    KT_CHECK_MSG(strstr(kiln_last_error(), site) != NULL, "'%s' lacks %s", kiln_last_error(), site);
    read_all(m, after, IN * OUT); /* still readable: the failure did not poison the weights */
    KT_CHECK(memcmp(before, after, sizeof before) == 0);
    kiln_optimizer_free(opt);
    kiln_module_free(m);
}

int main(void) {
    kiln_memory_stats start = kiln_memory_stats_get(KILN_CPU);
    KT_RUN(bad_target_never_reaches_sgd_weights);
    KT_RUN(bad_target_never_reaches_adam_weights);
    KT_RUN(poisoned_input_never_reaches_weights);
    KT_RUN(failing_update_kernel_keeps_the_parameter);
    kiln_memory_stats end = kiln_memory_stats_get(KILN_CPU);
    KT_CHECK(end.live_tensors == start.live_tensors);
    return kt_finish();
}
