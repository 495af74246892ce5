/* The gradient scaler (include/kiln/amp.h): a step with finite gradients updates with the
 * unscaled gradient; an inf gradient skips the step, leaves the parameter and halves the scale;
 * the scale doubles after growth_interval good steps; f16 autocast training whose gradients
 * flush to 0 unscaled keeps them with the scaler; bad options and NULLs give errors naming the
 * call and its line. */
#include <math.h>

#include "kiln.h"
#include "kiln_test.h"

static float read1(kiln_tensor t) {
    float v = NAN;
    KT_CHECK_MSG(kiln_into_scalar(kiln_sum(kiln_ref(t)), &v) == KILN_OK, "%s", kiln_last_error());
    return v;
}

/* loss = factor * sum(w^2) / 2 with w = [1, 2]: dL/dw = factor * w */
static bool one_step(kiln_grad_scaler *gs, kiln_optimizer *opt, kiln_tensor w, double factor) {
    kiln_tensor loss = kiln_mul_scalar(kiln_sum(kiln_mul(kiln_ref(w), kiln_ref(w))), factor / 2);
    kiln_grads *g = NULL;
    KT_CHECK(kiln_backward(kiln_grad_scaler_scale(gs, loss), &g) == KILN_OK);
    bool stepped = false;
    KT_CHECK_MSG(kiln_grad_scaler_step(gs, opt, g, &stepped) == KILN_OK, "%s", kiln_last_error());
    kiln_grads_free(g);
    return stepped;
}

KT_TEST(skip_and_growth) {
    kt_mem_begin();
    kiln_tensor w = kiln_leaf(kiln_from_data(KILN_CPU, KILN_F32, KILN_SHAPE(2), ((float[]){1, 2})));
    kiln_sgd_options so = kiln_sgd_defaults();
    so.lr = 0.5;
    kiln_optimizer *opt = kiln_sgd_new_params(1, &w, so);
    kiln_grad_scaler_options o = kiln_grad_scaler_defaults();
    KT_CHECK(o.init_scale == 65536 && o.growth_factor == 2 && o.backoff_factor == 0.5 && o.growth_interval == 2000);
    o.growth_interval = 2;
    kiln_grad_scaler *gs = kiln_grad_scaler_new(o);
    /* good step: w -= 0.5 * 0.1 * w (the gradient unscaled) */
    KT_CHECK(one_step(gs, opt, w, 0.1));
    KT_NEAR(read1(w), 3 * 0.95, 1e-5);
    KT_CHECK(kiln_grad_scaler_get_scale(gs) == 65536);
    /* overflow: 1e38 * 65536 is inf in f32: skipped, w kept, scale halved */
    KT_CHECK(!one_step(gs, opt, w, 1e38));
    KT_NEAR(read1(w), 3 * 0.95, 1e-5);
    KT_CHECK(kiln_grad_scaler_get_scale(gs) == 32768);
    KT_CHECK(kiln_optimizer_steps(opt) == 1);
    /* two good steps in a row: the scale doubles */
    KT_CHECK(one_step(gs, opt, w, 0.1));
    KT_CHECK(kiln_grad_scaler_get_scale(gs) == 32768);
    KT_CHECK(one_step(gs, opt, w, 0.1));
    KT_CHECK(kiln_grad_scaler_get_scale(gs) == 65536);
    KT_NEAR(read1(w), 3 * 0.95 * 0.95 * 0.95, 1e-5);
    kiln_grad_scaler_free(gs);
    kiln_optimizer_free(opt);
    kiln_release(w);
    KT_MEM_CHECK();
}

/* A gradient of 1e-8 per element reaching an f16 activation under f16 autocast: 0 in f16
 * without scaling (below f16's smallest subnormal, 6e-8), kept with it. (The weight's own
 * gradient, f32 sums of f16 products, would not flush: test_autocast_grad.c.) */
KT_TEST(f16_gradients_survive_scaling) {
    kt_mem_begin();
    for (int scaled = 0; scaled < 2; scaled++) {
        kiln_tensor w = kiln_leaf(kiln_ones(KILN_CPU, KILN_F32, KILN_SHAPE(4, 4)));
        kiln_tensor x = kiln_ones(KILN_CPU, KILN_F32, KILN_SHAPE(1, 4));
        kiln_grad_scaler *gs = kiln_grad_scaler_new(kiln_grad_scaler_defaults());
        kiln_autocast_begin(KILN_F16);
        /* d loss / d y = 1e-8 reaches y in f16; d loss / d w[i][j] = x[i] * 1e-8 */
        kiln_tensor y = kiln_matmul(kiln_ref(x), kiln_ref(w));
        kiln_autocast_end();
        kiln_tensor loss = kiln_mul_scalar(kiln_sum(kiln_cast(y, KILN_F32)), 1e-8);
        if (scaled) loss = kiln_grad_scaler_scale(gs, loss);
        kiln_grads *g = NULL;
        KT_CHECK(kiln_backward(loss, &g) == KILN_OK);
        kiln_tensor dw = kiln_grad(g, w);
        kiln_grads_free(g);
        if (scaled) dw = kiln_div_scalar(dw, kiln_grad_scaler_get_scale(gs));
        float total = read1(dw);
        if (scaled) KT_NEAR(total, 16 * 1e-8, 16 * 1e-8 * 0.01);
        else KT_CHECK_MSG(total == 0, "unscaled f16 gradient sum %g", total);
        kiln_release(dw), kiln_release(w), kiln_release(x);
        kiln_grad_scaler_free(gs);
    }
    KT_MEM_CHECK();
}

KT_TEST(bad_input) {
    kiln_grad_scaler_options o = kiln_grad_scaler_defaults();
    o.backoff_factor = 1.5;
    int line = __LINE__ + 1;
    KT_CHECK(kiln_grad_scaler_new(o) == NULL);
    KT_EXPECT_ERROR(KILN_ERR_INVALID_ARGUMENT, "kiln_grad_scaler_new", line);
    bool stepped = true;
    line = __LINE__ + 1;
    KT_CHECK(kiln_grad_scaler_step(NULL, NULL, NULL, &stepped) == KILN_ERR_NULL);
    KT_EXPECT_ERROR(KILN_ERR_NULL, "kiln_grad_scaler_step", line);
    KT_CHECK(!stepped);
    KT_READ_ERROR(kiln_grad_scaler_scale(NULL, kiln_ones(KILN_CPU, KILN_F32, KILN_SCALAR_SHAPE)), KILN_ERR_NULL,
                  "kiln_grad_scaler_scale");
    KT_CHECK(isnan(kiln_grad_scaler_get_scale(NULL)));
    kiln_grad_scaler_free(NULL);
}

int main(void) {
    KT_RUN(skip_and_growth);
    KT_RUN(f16_gradients_survive_scaling);
    KT_RUN(bad_input);
    return kt_finish();
}
