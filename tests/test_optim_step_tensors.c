/* kiln_optimizer_step_tensors: an optimizer step with the gradients given as tensors, as a
 * binding holds them (Python's .grad). The same updates as kiln_optimizer_step over a backward
 * pass's container (Adam, SGD with momentum, three steps), a parameter without a gradient left
 * alone, a replaced parameter followed with its state kept, and bad input: NULL arrays, a count
 * that differs from the optimizer's, a module's optimizer, non-leaves, repeats, stale and
 * poisoned handles, a gradient of the wrong shape, each naming this call's file:line. */
#include <math.h>
#include <string.h>

#include <kiln.h>

#include "kiln_test.h"

static kiln_tensor f64(kiln_shape s, const double *v) { return kiln_from_data(KILN_CPU, KILN_F64, s, v); }

static void read_f64(kiln_tensor t, double *out, int n) {
    KT_CHECK_MSG(kiln_into_data(t, out, sizeof(double) * (size_t)n) == KILN_OK, "%s", kiln_last_error());
}

static const double W0[4] = {1, -2, 3, 0.5}, B0[2] = {0.25, -1}, CW[4] = {0.1, -0.2, 0.3, 1}, CB[2] = {-1, 2};

/* loss = sum(c_w * w^2) + sum(c_b * b): gradients 2 c_w w and c_b */
static kiln_tensor loss_of(kiln_tensor w, kiln_tensor b) {
    return kiln_add(kiln_sum(kiln_mul(f64(KILN_SHAPE(2, 2), CW), kiln_mul(kiln_ref(w), kiln_ref(w)))),
                    kiln_sum(kiln_mul(f64(KILN_SHAPE(2), CB), kiln_ref(b))));
}

typedef kiln_optimizer *(*make_fn)(kiln_tensor w, kiln_tensor b);
static kiln_optimizer *make_adam(kiln_tensor w, kiln_tensor b) {
    kiln_adam_options o = kiln_adam_defaults();
    o.lr = 0.1;
    return kiln_adam_new_params(2, (kiln_tensor[]){w, b}, o);
}
static kiln_optimizer *make_sgd(kiln_tensor w, kiln_tensor b) {
    return kiln_sgd_new_params(2, (kiln_tensor[]){w, b}, (kiln_sgd_options){.lr = 0.5, .momentum = 0.9});
}

KT_TEST(same_updates_as_the_container_step) {
    kt_mem_begin();
    make_fn makers[] = {make_adam, make_sgd};
    for (int k = 0; k < 2; k++) {
        kiln_tensor w1 = kiln_leaf(f64(KILN_SHAPE(2, 2), W0)), b1 = kiln_leaf(f64(KILN_SHAPE(2), B0));
        kiln_tensor w2 = kiln_leaf(f64(KILN_SHAPE(2, 2), W0)), b2 = kiln_leaf(f64(KILN_SHAPE(2), B0));
        kiln_optimizer *o1 = makers[k](w1, b1), *o2 = makers[k](w2, b2);
        KT_CHECK(o1 && o2);
        for (int step = 0; step < 3 && o1 && o2; step++) {
            kiln_grads *g = NULL;
            KT_CHECK(kiln_backward(loss_of(w1, b1), &g) == KILN_OK);
            KT_CHECK(kiln_optimizer_step(o1, g) == KILN_OK);
            kiln_grads_free(g);
            KT_CHECK(kiln_backward(loss_of(w2, b2), &g) == KILN_OK);
            kiln_tensor grads[2] = {kiln_grad(g, w2), kiln_grad(g, b2)};
            kiln_grads_free(g);
            KT_CHECK_MSG(kiln_optimizer_step_tensors(o2, 2, (kiln_tensor[]){w2, b2}, grads) == KILN_OK, "%s",
                         kiln_last_error());
            /* the gradients stay the caller's, unchanged */
            double gb[2];
            read_f64(kiln_ref(grads[1]), gb, 2);
            KT_CHECK(gb[0] == CB[0] && gb[1] == CB[1]);
            kiln_release(grads[0]);
            kiln_release(grads[1]);
        }
        double a[4], b[4];
        read_f64(kiln_ref(w1), a, 4);
        read_f64(kiln_ref(w2), b, 4);
        for (int i = 0; i < 4; i++) KT_CHECK_MSG(a[i] == b[i], "w[%d]: %.17g against %.17g", i, b[i], a[i]);
        read_f64(kiln_ref(b1), a, 2);
        read_f64(kiln_ref(b2), b, 2);
        for (int i = 0; i < 2; i++) KT_CHECK(a[i] == b[i]);
        KT_CHECK(kiln_optimizer_steps(o2) == 3);
        kiln_optimizer_free(o1);
        kiln_optimizer_free(o2);
        kiln_release(w1), kiln_release(b1), kiln_release(w2), kiln_release(b2);
    }
    KT_MEM_CHECK();
}

/* Adam's first step moves each parameter by lr * g / (|g| + eps): -lr * sign(g), computed in
 * double here; a parameter given no gradient does not move. */
KT_TEST(first_adam_step_matches_reference_and_skips_missing_gradients) {
    kt_mem_begin();
    kiln_tensor w = kiln_leaf(f64(KILN_SHAPE(2, 2), W0)), b = kiln_leaf(f64(KILN_SHAPE(2), B0));
    kiln_optimizer *opt = make_adam(w, b);
    kiln_tensor gw = f64(KILN_SHAPE(2, 2), (double[]){0.5, -3, 1e-3, 0});
    KT_CHECK(kiln_optimizer_step_tensors(opt, 2, (kiln_tensor[]){w, b}, (kiln_tensor[]){gw, KILN_NONE}) == KILN_OK);
    double got[4], gb[2], g[4] = {0.5, -3, 1e-3, 0};
    read_f64(kiln_ref(w), got, 4);
    for (int i = 0; i < 4; i++) KT_NEAR(got[i], W0[i] - 0.1 * g[i] / (fabs(g[i]) + 1e-8), 1e-12);
    read_f64(kiln_ref(b), gb, 2);
    KT_CHECK(gb[0] == B0[0] && gb[1] == B0[1]);
    kiln_release(gw);
    kiln_optimizer_free(opt);
    kiln_release(w), kiln_release(b);
    KT_MEM_CHECK();
}

/* A parameter the caller replaced (a new tensor, as Python's load_state_dict makes) is updated
 * from then on, with the state of the one it replaced: the same values as if it had not been
 * replaced. The old tensor no longer moves. A replacement of another shape is refused. */
KT_TEST(a_replaced_parameter_is_followed_with_its_state) {
    kt_mem_begin();
    kiln_tensor w = kiln_leaf(f64(KILN_SHAPE(2, 2), W0)), b = kiln_leaf(f64(KILN_SHAPE(2), B0));
    kiln_tensor w_ref = kiln_leaf(f64(KILN_SHAPE(2, 2), W0)), b_ref = kiln_leaf(f64(KILN_SHAPE(2), B0));
    kiln_optimizer *opt = make_adam(w, b), *ref = make_adam(w_ref, b_ref);
    kiln_tensor gw = f64(KILN_SHAPE(2, 2), CW), gb = f64(KILN_SHAPE(2), CB);
    KT_CHECK(kiln_optimizer_step_tensors(opt, 2, (kiln_tensor[]){w, b}, (kiln_tensor[]){gw, gb}) == KILN_OK);
    KT_CHECK(kiln_optimizer_step_tensors(ref, 2, (kiln_tensor[]){w_ref, b_ref}, (kiln_tensor[]){gw, gb}) == KILN_OK);
    double now[2], old_b[2];
    read_f64(kiln_ref(b), old_b, 2);
    kiln_tensor b_new = kiln_leaf(kiln_add_scalar(kiln_detach(kiln_ref(b)), 0)); /* a copy of b's values */
    KT_CHECK(kiln_optimizer_step_tensors(opt, 2, (kiln_tensor[]){w, b_new}, (kiln_tensor[]){gw, gb}) == KILN_OK);
    KT_CHECK(kiln_optimizer_step_tensors(ref, 2, (kiln_tensor[]){w_ref, b_ref}, (kiln_tensor[]){gw, gb}) == KILN_OK);
    double want[2], got[2];
    read_f64(kiln_ref(b_ref), want, 2);
    read_f64(kiln_ref(b_new), got, 2);
    for (int i = 0; i < 2; i++) KT_CHECK_MSG(got[i] == want[i], "b[%d]: %.17g against %.17g", i, got[i], want[i]);
    read_f64(kiln_ref(b), now, 2);
    KT_CHECK(now[0] == old_b[0] && now[1] == old_b[1]);
    kiln_tensor b_wide = kiln_leaf(kiln_zeros(KILN_CPU, KILN_F64, KILN_SHAPE(3)));
    KT_CHECK(kiln_optimizer_step_tensors(opt, 2, (kiln_tensor[]){w, b_wide}, (kiln_tensor[]){gw, KILN_NONE}) ==
             KILN_ERR_SHAPE);
    KT_EXPECT_ERROR(KILN_ERR_SHAPE, "kiln_optimizer_step_tensors", __LINE__ - 2);
    kiln_release(gw), kiln_release(gb), kiln_release(b_wide), kiln_release(b_new);
    kiln_optimizer_free(opt);
    kiln_optimizer_free(ref);
    kiln_release(w), kiln_release(b), kiln_release(w_ref), kiln_release(b_ref);
    KT_MEM_CHECK();
}

#define EXPECT_STEP(call, st)                                                             \
    do {                                                                                  \
        KT_CHECK_MSG((call) == (st), "status %s", kiln_status_str(kiln_last_status())); \
        KT_EXPECT_ERROR((st), "kiln_optimizer_step_tensors", __LINE__);                 \
    } while (0)

KT_TEST(bad_input) {
    kt_mem_begin();
    kiln_tensor w = kiln_leaf(f64(KILN_SHAPE(2, 2), W0)), b = kiln_leaf(f64(KILN_SHAPE(2), B0));
    kiln_optimizer *opt = make_adam(w, b);
    kiln_tensor gw = f64(KILN_SHAPE(2, 2), CW), gb = f64(KILN_SHAPE(2), CB);
    kiln_tensor ps[2] = {w, b}, gs[2] = {gw, gb};
    EXPECT_STEP(kiln_optimizer_step_tensors(NULL, 2, ps, gs), KILN_ERR_NULL);
    EXPECT_STEP(kiln_optimizer_step_tensors(opt, 2, NULL, gs), KILN_ERR_NULL);
    EXPECT_STEP(kiln_optimizer_step_tensors(opt, 2, ps, NULL), KILN_ERR_NULL);
    EXPECT_STEP(kiln_optimizer_step_tensors(opt, 1, ps, gs), KILN_ERR_INVALID_ARGUMENT);
    EXPECT_STEP(kiln_optimizer_step_tensors(opt, -1, ps, gs), KILN_ERR_INVALID_ARGUMENT);
    EXPECT_STEP(kiln_optimizer_step_tensors(opt, 2, (kiln_tensor[]){w, w}, gs), KILN_ERR_INVALID_ARGUMENT);
    kiln_tensor plain = f64(KILN_SHAPE(2), B0);
    EXPECT_STEP(kiln_optimizer_step_tensors(opt, 2, (kiln_tensor[]){w, plain}, gs), KILN_ERR_INVALID_ARGUMENT);
    EXPECT_STEP(kiln_optimizer_step_tensors(opt, 2, ps, (kiln_tensor[]){gw, gw}), KILN_ERR_SHAPE); /* [2,2] for [2] */
    kiln_tensor gone = kiln_ref(gb);
    kiln_release(gone);
    EXPECT_STEP(kiln_optimizer_step_tensors(opt, 2, ps, (kiln_tensor[]){gw, gone}), KILN_ERR_STALE_HANDLE);
    /* a gradient that failed upstream keeps its own error (the op that failed) */
    kiln_tensor poisoned = kiln_reshape(kiln_zeros(KILN_CPU, KILN_F64, KILN_SHAPE(2)), KILN_SHAPE(3));
    KT_CHECK(kiln_optimizer_step_tensors(opt, 2, ps, (kiln_tensor[]){gw, poisoned}) == KILN_ERR_SHAPE);
    KT_CHECK(strstr(kiln_last_error(), "kiln_reshape") != NULL);
    kiln_release(poisoned);
    /* nothing moved through all of the above */
    double got[4];
    read_f64(kiln_ref(w), got, 4);
    for (int i = 0; i < 4; i++) KT_CHECK(got[i] == W0[i]);
    KT_CHECK(kiln_optimizer_steps(opt) == 0);
    /* a module's optimizer follows the module's own handles */
    kiln_module *lin = kiln_linear_new(2, 1, true, 1);
    kiln_optimizer *mod_opt = kiln_adam_new(lin, kiln_adam_defaults());
    EXPECT_STEP(kiln_optimizer_step_tensors(mod_opt, 2, ps, gs), KILN_ERR_INVALID_ARGUMENT);
    kiln_optimizer_free(mod_opt);
    kiln_module_free(lin);
    kiln_release(plain), kiln_release(gw), kiln_release(gb);
    kiln_optimizer_free(opt);
    kiln_release(w), kiln_release(b);
    KT_MEM_CHECK();
}

int main(void) {
    KT_RUN(same_updates_as_the_container_step);
    KT_RUN(first_adam_step_matches_reference_and_skips_missing_gradients);
    KT_RUN(a_replaced_parameter_is_followed_with_its_state);
    KT_RUN(bad_input);
    return kt_finish();
}
