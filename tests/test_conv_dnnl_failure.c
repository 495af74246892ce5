/* oneDNN's failure paths (conv_dnnl.c), injected through kiln__conv_dnnl_inject_failure: a
 * buffer allocation that returns NULL and a primitive oneDNN refuses to create. Each must
 * come back as a clean status at the first read, naming the public op and the caller's
 * file:line; the next call on the same shape must work again (and match the built-in
 * kernel); and a training step whose weight gradient failed must leave the weights as they
 * were. Skipped (77) in a build without oneDNN. */
#include <math.h>
#include <string.h>

#include <kiln.h>

#include "backend/cpu/conv_dnnl.h"
#include "kiln_test.h"

/* 16 input channels: over oneDNN's threshold, so the default rule would pick it too. */
enum { N = 2, C = 16, H = 9, W = 7, O = 8, K = 3 };

static float x_data[N * C * H * W], w_data[O * C * K * K];

static void fill(float *v, int n, float scale) {
    for (int i = 0; i < n; i++) v[i] = scale * (float)((i * 37 % 101) - 50) / 50.0f;
}

static kiln_tensor make_x(void) { return kiln_from_data(KILN_CPU, KILN_F32, KILN_SHAPE(N, C, H, W), x_data); }
static kiln_tensor make_w(void) { return kiln_from_data(KILN_CPU, KILN_F32, KILN_SHAPE(O, C, K, K), w_data); }

/* The forward result of the conv of x_data with w_data (padding pad), read into out. */
static kiln_status conv_read(int pad, float *out, size_t bytes) {
    return kiln_into_data(kiln_conv2d(make_x(), make_w(), KILN_NONE, 1, 1, pad, pad, 1, 1, 1), out, bytes);
}

/* A failed buffer allocation inside oneDNN's forward: out of memory, naming kiln_conv2d at
 * this file's line; the same call without the failure then agrees with the built-in kernel. */
KT_TEST(allocation_failure_forward) {
    kt_mem_begin();
    kiln__conv_dnnl_force(1);
    long calls = kiln__conv_dnnl_calls();
    kiln__conv_dnnl_inject_failure(KILN__DNNL_FAIL_ALLOC, 1);
    kiln_tensor y = kiln_conv2d(make_x(), make_w(), KILN_NONE, 1, 1, 1, 1, 1, 1, 1);
    int line = __LINE__ - 1;
    float out[N * O * H * W], ref[N * O * H * W];
    kiln_status st = kiln_into_data(y, out, sizeof out);
    KT_EXPECT_ERROR(KILN_ERR_OUT_OF_MEMORY, "kiln_conv2d", line);
    KT_CHECK(st == KILN_ERR_OUT_OF_MEMORY);
    KT_CHECK_MSG(strstr(kiln_last_error(), "oneDNN") != NULL, "message '%s' does not say oneDNN", kiln_last_error());
    KT_CHECK(kiln__conv_dnnl_calls() > calls); /* oneDNN took it (and failed), not the built-in path */
    kiln__conv_dnnl_inject_failure(0, 0);

    KT_CHECK(conv_read(1, out, sizeof out) == KILN_OK);
    kiln__conv_dnnl_force(0);
    KT_CHECK(conv_read(1, ref, sizeof ref) == KILN_OK);
    kiln__conv_dnnl_force(-1);
    for (int i = 0; i < N * O * H * W; i++) KT_NEAR(out[i], ref[i], 1e-4 * (1.0 + fabs(ref[i])));
    KT_CHECK(kiln_sync() == KILN_OK);
    KT_MEM_CHECK();
}

/* oneDNN refuses to create the primitive (a shape not yet cached: padding 2): a kernel error
 * naming the op and this line, not a fallback that hides it; the next call creates it. */
KT_TEST(primitive_creation_failure) {
    kt_mem_begin();
    kiln__conv_dnnl_force(1);
    kiln__conv_dnnl_inject_failure(KILN__DNNL_FAIL_CREATE, 1);
    kiln_tensor y = kiln_conv2d(make_x(), make_w(), KILN_NONE, 1, 1, 2, 2, 1, 1, 1);
    int line = __LINE__ - 1;
    float out[N * O * (H + 2) * (W + 2)], ref[N * O * (H + 2) * (W + 2)];
    kiln_status st = kiln_into_data(y, out, sizeof out);
    KT_CHECK(st == KILN_ERR_KERNEL);
    KT_EXPECT_ERROR(KILN_ERR_KERNEL, "kiln_conv2d", line);
    KT_CHECK_MSG(strstr(kiln_last_error(), "primitive creation") != NULL, "message '%s' does not say what failed",
                 kiln_last_error());
    kiln__conv_dnnl_inject_failure(0, 0);

    KT_CHECK(conv_read(2, out, sizeof out) == KILN_OK);
    kiln__conv_dnnl_force(0);
    KT_CHECK(conv_read(2, ref, sizeof ref) == KILN_OK);
    kiln__conv_dnnl_force(-1);
    for (size_t i = 0; i < sizeof out / sizeof out[0]; i++) KT_NEAR(out[i], ref[i], 1e-4 * (1.0 + fabs(ref[i])));
    KT_CHECK(kiln_sync() == KILN_OK);
    KT_MEM_CHECK();
}

/* One SGD step whose conv weight gradient fails inside oneDNN (allocation, then creation on a
 * new shape): backward or the step reports the error, and the weights keep every value. */
static void failed_step_keeps_weights(int stage, int pad) {
    kiln__conv_dnnl_force(1);
    kiln_tensor w = make_w();
    KT_CHECK(kiln_require_grad(w) == KILN_OK);
    kiln_optimizer *opt = kiln_sgd_new_params(1, &w, kiln_sgd_defaults());
    KT_CHECK(opt != NULL);
    kiln_tensor y = kiln_conv2d(make_x(), kiln_ref(w), KILN_NONE, 1, 1, pad, pad, 1, 1, 1);
    kiln_tensor loss = kiln_sum(kiln_mul(kiln_ref(y), y));
    KT_CHECK(kiln_sync() == KILN_OK); /* the forward ran; only the backward will fail */
    kiln__conv_dnnl_inject_failure(stage, 1);
    kiln_grads *g = NULL;
    kiln_status st = kiln_backward(loss, &g);
    if (st == KILN_OK) st = kiln_optimizer_step(opt, g);
    if (st == KILN_OK) st = kiln_sync();
    kiln__conv_dnnl_inject_failure(0, 0);
    KT_CHECK_MSG(st == (stage == KILN__DNNL_FAIL_ALLOC ? KILN_ERR_OUT_OF_MEMORY : KILN_ERR_KERNEL),
                 "status %s (%s)", kiln_status_str(st), kiln_last_error());
    KT_CHECK_MSG(strstr(kiln_last_error(), "oneDNN") != NULL, "message '%s' does not say oneDNN", kiln_last_error());
    KT_CHECK_MSG(strstr(kiln_last_error(), "test_conv_dnnl_failure.c:") != NULL, "message '%s' has no call site",
                 kiln_last_error());
    kiln_grads_free(g);
    float after[O * C * K * K];
    KT_CHECK(kiln_into_data(kiln_ref(w), after, sizeof after) == KILN_OK);
    KT_CHECK(memcmp(after, w_data, sizeof after) == 0);
    kiln_optimizer_free(opt);
    kiln_release(w);
    kiln__conv_dnnl_force(-1);
}

KT_TEST(failed_backward_keeps_weights) {
    kt_mem_begin();
    failed_step_keeps_weights(KILN__DNNL_FAIL_ALLOC, 1);
    failed_step_keeps_weights(KILN__DNNL_FAIL_CREATE, 0); /* padding 0: a weight-gradient shape not yet cached */
    KT_CHECK(kiln_sync() == KILN_OK);
    KT_MEM_CHECK();
}

int main(void) {
    if (!KILN_HAVE_DNNL) {
        printf("SKIP: built without oneDNN (KILN_USE_DNNL=OFF or no libdnnl-dev)\n");
        return 77;
    }
    fill(x_data, N * C * H * W, 1.0f);
    fill(w_data, O * C * K * K, 0.2f);
    KT_RUN(allocation_failure_forward);
    KT_RUN(primitive_creation_failure);
    KT_RUN(failed_backward_keeps_weights);
    return kt_finish();
}
