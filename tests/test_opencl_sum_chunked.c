/* Long f32 sums and means to one value on the OpenCL device (reduce_chunked.c: chunks, then
 * their total) against the CPU: lengths around the chunking (a multiple of 16 per chunk, a
 * ragged last chunk, fewer elements than chunks x 16), a view at an offset, a mean, NaN and
 * infinity, the same bits on a second run; a non-dense input and a sum over one dim keep the
 * per-output kernel and agree too. Also the gradient of a sum (the usual loss). Skipped
 * (exit 77) without an OpenCL device. */
#include <kiln.h>
#include <math.h>
#include <string.h>

#include "kiln_test.h"
#if KILN_HAVE_OPENCL
#define DEV KILN_OPENCL

#include "opencl_compare.h"

/* sum or mean of x (a CPU tensor, consumed) on the device against the CPU's */
static void check(const char *what, kiln_tensor x, bool mean) {
    kiln_tensor xd = kiln_to_device(kiln_ref(x), DEV);
    kiln_tensor got = mean ? kiln_mean(kiln_ref(xd)) : kiln_sum(kiln_ref(xd));
    kiln_tensor again = mean ? kiln_mean(xd) : kiln_sum(xd);
    float a = 0, b = 0;
    KT_CHECK(kiln_into_data(kiln_ref(got), &a, sizeof a) == KILN_OK && kiln_into_data(again, &b, sizeof b) == KILN_OK);
    KT_CHECK_MSG(memcmp(&a, &b, sizeof a) == 0, "%s: %.9g, then %.9g", what, a, b);
    kiln_release(again);
    compare(what, got, mean ? kiln_mean(x) : kiln_sum(x), 1e-6, 1e-4);
}

KT_TEST(chunked_sums) {
    const int64_t lengths[] = {65536, 65536 + 7, 256 * 16 * 20 + 15, 1000003};
    for (size_t i = 0; i < sizeof lengths / sizeof lengths[0]; i++) {
        char what[64];
        snprintf(what, sizeof what, "sum of %lld", (long long)lengths[i]);
        check(what, kiln_randn(KILN_CPU, KILN_F32, KILN_SHAPE(lengths[i]), 30 + i), false);
        snprintf(what, sizeof what, "mean of %lld", (long long)lengths[i]);
        check(what, kiln_add_scalar(kiln_randn(KILN_CPU, KILN_F32, KILN_SHAPE(lengths[i]), 40 + i), 3), true);
    }
    check("sum of [64, 4099]", kiln_randn(KILN_CPU, KILN_F32, KILN_SHAPE(64, 4099), 50), false);
    /* a dense view at an offset: rows 1.. of [65, 2048] */
    kiln_tensor host = kiln_randn(KILN_CPU, KILN_F32, KILN_SHAPE(65, 2048), 52);
    kiln_tensor dev = kiln_to_device(kiln_ref(host), DEV);
    compare("device view at an offset", kiln_sum(kiln_narrow(dev, 0, 1, 64)), kiln_sum(kiln_narrow(host, 0, 1, 64)),
            1e-6, 1e-4);
    /* a transposed (non-dense) input and a sum over one dim: the per-output kernel */
    kiln_tensor t = kiln_randn(KILN_CPU, KILN_F32, KILN_SHAPE(300, 400), 53);
    kiln_tensor td = kiln_to_device(kiln_ref(t), DEV);
    compare("sum of a transpose", kiln_sum(kiln_transpose(kiln_ref(td), 0, 1)), kiln_sum(kiln_transpose(kiln_ref(t), 0, 1)),
            1e-6, 1e-4);
    compare("sum over dim 1", kiln_sum_dims(td, KILN_DIMS(1), false), kiln_sum_dims(t, KILN_DIMS(1), false), 1e-6, 1e-5);
}

KT_TEST(chunked_nan_inf) {
    float *v = calloc(100000, sizeof(float));
    for (int i = 0; i < 100000; i++) v[i] = (float)(i % 7) - 3;
    v[77777] = INFINITY;
    check("sum with +inf", kiln_from_data(KILN_CPU, KILN_F32, KILN_SHAPE(100000), v), false);
    v[12345] = NAN;
    check("sum with NaN", kiln_from_data(KILN_CPU, KILN_F32, KILN_SHAPE(100000), v), false);
    free(v);
}

/* kiln_sum as a loss: its gradient, and a parameter's, through the chunked forward */
KT_TEST(chunked_loss_gradient) {
    kiln_tensor w = kiln_randn(KILN_CPU, KILN_F32, KILN_SHAPE(256, 512), 60);
    kiln_tensor wd = kiln_to_device(kiln_ref(w), DEV);
    KT_CHECK(kiln_require_grad(w) == KILN_OK && kiln_require_grad(wd) == KILN_OK);
    kiln_grads *g = NULL, *gd = NULL;
    KT_CHECK(kiln_backward(kiln_sum(kiln_exp(kiln_ref(w))), &g) == KILN_OK);
    KT_CHECK(kiln_backward(kiln_sum(kiln_exp(kiln_ref(wd))), &gd) == KILN_OK);
    compare("d sum(exp(w)) / dw", kiln_grad(gd, wd), kiln_grad(g, w), 4e-6, 0);
    kiln_grads_free(g);
    kiln_grads_free(gd);
    kiln_release(w);
    kiln_release(wd);
}
#endif

int main(void) {
#if KILN_HAVE_OPENCL
    if (kiln_device_count(KILN_KIND_OPENCL) > 0) {
        KT_RUN(chunked_sums);
        KT_RUN(chunked_nan_inf);
        KT_RUN(chunked_loss_gradient);
        return kt_finish();
    }
#endif
    printf("no OpenCL device (or a build without OpenCL): skipped\n");
    return 77; /* ctest's skip */
}
