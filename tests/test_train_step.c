/* kiln_train_step: one step equals kiln_backward_value + kiln_optimizer_step + kiln_grads_free
 * (the same parameters after it as after the three calls, the loss value read); a NULL
 * optimizer, a poisoned or stale loss (status and message of the failing call, the caller's
 * line, NaN, nothing updated); kiln_train_step_clip against the same with kiln_clip_grad_norm; leaks. */
#include <kiln.h>

#include "kiln_test.h"
#include "ew_util.h"

static kiln_tensor loss_of(kiln_module *m) {
    static const float xs[6] = {1, 2, 3, -1, 0.5f, 2};
    static const float ys[2] = {0.5f, -1};
    return kiln_mse_loss(kiln_module_forward(m, kiln_from_data(KILN_CPU, KILN_F32, KILN_SHAPE(2, 3), xs)),
                         kiln_from_data(KILN_CPU, KILN_F32, KILN_SHAPE(2, 1), ys));
}

static void read_weight(kiln_module *m, float *w) {
    kiln_param p[2];
    kiln_module_params(m, p, 2);
    KT_CHECK(kiln_into_data(kiln_ref(*p[0].slot), w, 3 * sizeof(float)) == KILN_OK);
}

KT_TEST(same_as_three_calls) {
    ew_mark mark = ew_mark_now();
    kiln_module *a = kiln_linear_new(3, 1, true, 7), *b = kiln_linear_new(3, 1, true, 7);
    kiln_optimizer *oa = kiln_sgd_new(a, kiln_sgd_defaults()), *ob = kiln_sgd_new(b, kiln_sgd_defaults());
    double first = 0, last = 0;
    for (int step = 0; step < 5; step++) {
        double la, lb;
        KT_CHECK(kiln_train_step(oa, loss_of(a), &la) == KILN_OK);
        kiln_grads *g = NULL;
        KT_CHECK(kiln_backward_value(loss_of(b), &g, &lb) == KILN_OK);
        KT_CHECK(kiln_optimizer_step(ob, g) == KILN_OK);
        kiln_grads_free(g);
        KT_CHECK(la == lb);
        if (step == 0) first = la;
        last = la;
    }
    KT_CHECK(last < first);
    float wa[3], wb[3];
    read_weight(a, wa);
    read_weight(b, wb);
    KT_CHECK(memcmp(wa, wb, sizeof wa) == 0);
    KT_CHECK(kiln_train_step(oa, loss_of(a), NULL) == KILN_OK); /* the value is optional */
    kiln_optimizer_free(oa), kiln_optimizer_free(ob);
    kiln_module_free(a), kiln_module_free(b);
    EW_NO_LEAKS(mark);
}

KT_TEST(bad_input) {
    ew_mark mark = ew_mark_now();
    kiln_module *m = kiln_linear_new(3, 1, true, 7);
    kiln_optimizer *opt = kiln_sgd_new(m, kiln_sgd_defaults());
    float before[3], after[3];
    read_weight(m, before);
    double v = 0;
    int line;
    kiln_status st = kiln_train_step(NULL, loss_of(m), &v); line = __LINE__;
    KT_CHECK(st == KILN_ERR_NULL && isnan(v));
    KT_EXPECT_ERROR(KILN_ERR_NULL, "kiln_train_step", line);
    v = 0;
    line = __LINE__; st = kiln_train_step(opt, kiln_sum(EW_POISONED()), &v);
    KT_CHECK(st == KILN_ERR_SHAPE && isnan(v));
    KT_EXPECT_ERROR(KILN_ERR_SHAPE, "kiln_reshape", line);
    st = kiln_train_step(opt, ew_stale(), &v); line = __LINE__;
    KT_CHECK(st == KILN_ERR_STALE_HANDLE && isnan(v));
    KT_EXPECT_ERROR(KILN_ERR_STALE_HANDLE, "kiln_train_step", line);
    st = kiln_train_step(opt, KILN_NONE, &v); line = __LINE__;
    KT_CHECK(st != KILN_OK && isnan(v));
    read_weight(m, after);
    KT_CHECK(memcmp(before, after, sizeof before) == 0);
    kiln_optimizer_free(opt);
    kiln_module_free(m);
    EW_NO_LEAKS(mark);
}

/* kiln_train_step_clip equals backward + kiln_clip_grad_norm + step (a small max_norm, so the
 * clipping acts), and refuses a max_norm that is not finite and > 0, updating nothing. */
KT_TEST(clip_same_as_four_calls) {
    ew_mark mark = ew_mark_now();
    kiln_module *a = kiln_linear_new(3, 1, true, 7), *b = kiln_linear_new(3, 1, true, 7), *c = kiln_linear_new(3, 1, true, 7);
    kiln_optimizer *oa = kiln_sgd_new(a, kiln_sgd_defaults()), *ob = kiln_sgd_new(b, kiln_sgd_defaults());
    kiln_optimizer *oc = kiln_sgd_new(c, kiln_sgd_defaults());
    for (int step = 0; step < 3; step++) {
        double la, lb;
        KT_CHECK(kiln_train_step_clip(oa, loss_of(a), 0.05, &la) == KILN_OK);
        kiln_grads *g = NULL;
        KT_CHECK(kiln_backward_value(loss_of(b), &g, &lb) == KILN_OK);
        KT_CHECK(kiln_clip_grad_norm(ob, g, 0.05, NULL) == KILN_OK);
        KT_CHECK(kiln_optimizer_step(ob, g) == KILN_OK);
        kiln_grads_free(g);
        KT_CHECK(la == lb);
        KT_CHECK(kiln_train_step(oc, loss_of(c), NULL) == KILN_OK);
    }
    float wa[3], wb[3], wc[3];
    read_weight(a, wa);
    read_weight(b, wb);
    read_weight(c, wc);
    KT_CHECK(memcmp(wa, wb, sizeof wa) == 0);
    KT_CHECK(memcmp(wa, wc, sizeof wa) != 0); /* the clipping changed the steps */
    const double bad[] = {0, -1, NAN, INFINITY};
    for (int i = 0; i < 4; i++) {
        double v = 0;
        int line = __LINE__ + 1;
        kiln_status st = kiln_train_step_clip(oa, loss_of(a), bad[i], &v);
        KT_CHECK(st == KILN_ERR_INVALID_ARGUMENT && isnan(v));
        KT_EXPECT_ERROR(KILN_ERR_INVALID_ARGUMENT, "kiln_train_step_clip", line);
    }
    float after[3];
    read_weight(a, after);
    KT_CHECK(memcmp(wa, after, sizeof wa) == 0);
    KT_CHECK(kiln_train_step_clip(NULL, loss_of(a), 1.0, NULL) == KILN_ERR_NULL);
    kiln_optimizer_free(oa), kiln_optimizer_free(ob), kiln_optimizer_free(oc);
    kiln_module_free(a), kiln_module_free(b), kiln_module_free(c);
    EW_NO_LEAKS(mark);
}

int main(void) {
    KT_RUN(same_as_three_calls);
    KT_RUN(bad_input);
    KT_RUN(clip_same_as_four_calls);
    return kt_finish();
}
