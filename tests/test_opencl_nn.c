/* The OpenCL backend's nn kernels against the CPU: conv2d (stride, padding, dilation, groups,
 * bias, a strided input, f32 and f64) and max / average / adaptive-average pooling (also with
 * ceil_mode and exclude_pad), forward and every gradient, on random inputs; and a small CNN trained a few steps on the device
 * beside the CPU. Skipped (exit 77) without an OpenCL device. */
#include <kiln.h>
#include <stdint.h>

#include "kiln_test.h"
#if KILN_HAVE_OPENCL
#define DEV KILN_OPENCL

#include "opencl_compare.h"

/* f(inputs) on dev with every input requiring a gradient: the output and the gradients of
 * sum(f * t) into out[0..n] (owned). */
typedef kiln_tensor (*nn_fn)(kiln_tensor *in, const int *p);
static void run_on(kiln_device dev, nn_fn f, const int *p, kiln_tensor *host, int n, kiln_tensor *out) {
    kiln_tensor in[4];
    for (int i = 0; i < n; i++) {
        in[i] = kiln_to_device(kiln_ref(host[i]), dev);
        kiln_require_grad(in[i]);
    }
    kiln_tensor y = f(in, p);
    out[0] = kiln_detach(kiln_ref(y));
    kiln_tensor t = kiln_uniform(dev, KILN_F32, kiln_tensor_shape(y), -1, 1, 99);
    kiln_grads *g = NULL;
    KT_CHECK_MSG(kiln_backward(kiln_sum(kiln_mul(y, kiln_cast(t, kiln_tensor_dtype(out[0])))), &g) == KILN_OK, "%s",
                 kiln_last_error());
    for (int i = 0; i < n; i++) {
        out[1 + i] = g ? kiln_grad(g, in[i]) : KILN_NONE;
        kiln_release(in[i]);
    }
    kiln_grads_free(g);
}

static void check(const char *what, nn_fn f, const int *p, kiln_tensor *host, int n, double tol) {
    kiln_tensor d[5], c[5];
    run_on(DEV, f, p, host, n, d);
    run_on(KILN_CPU, f, p, host, n, c);
    char name[96];
    for (int i = 0; i <= n; i++) {
        snprintf(name, sizeof name, "%s %s%d", what, i ? "grad " : "forward", i ? i - 1 : 0);
        compare(name, d[i], c[i], tol, tol);
    }
    for (int i = 0; i < n; i++) kiln_release(host[i]);
}

/* p: stride, pad, dilation, groups; with a bias when in[2] is given. */
static kiln_tensor conv(kiln_tensor *in, const int *p) {
    return kiln_conv2d(kiln_ref(in[0]), kiln_ref(in[1]), p[4] ? kiln_ref(in[2]) : KILN_NONE, p[0], p[0], p[1], p[1], p[2],
                       p[2], p[3]);
}
/* the input through a transposed (strided) view */
static kiln_tensor conv_strided(kiln_tensor *in, const int *p) {
    return kiln_conv2d(kiln_transpose(kiln_ref(in[0]), 2, 3), kiln_ref(in[1]), KILN_NONE, p[0], p[0], p[1], p[1], p[2],
                       p[2], p[3]);
}

KT_TEST(conv2d) {
    static const int params[][5] = {
        {1, 0, 1, 1, 1}, {1, 1, 1, 1, 1}, {2, 1, 1, 1, 0}, {1, 2, 2, 1, 1}, {2, 0, 1, 2, 1}, {1, 1, 1, 4, 0}, {3, 2, 2, 2, 1},
    };
    for (size_t k = 0; k < sizeof params / sizeof params[0]; k++) {
        const int *p = params[k];
        int g = p[3];
        kiln_tensor in[3] = {kiln_randn(KILN_CPU, KILN_F32, KILN_SHAPE(3, 4, 9, 7), 10 + k),
                             kiln_randn(KILN_CPU, KILN_F32, KILN_SHAPE(g == 4 ? 8 : 6, 4 / g, 3, 3), 20 + k),
                             kiln_randn(KILN_CPU, KILN_F32, KILN_SHAPE(g == 4 ? 8 : 6), 30 + k)};
        char what[64];
        snprintf(what, sizeof what, "conv2d s%d p%d d%d g%d%s", p[0], p[1], p[2], g, p[4] ? " bias" : "");
        if (!p[4]) kiln_release(in[2]);
        check(what, conv, p, in, p[4] ? 3 : 2, 1e-5);
    }
    const int p[5] = {1, 1, 1, 1, 0};
    kiln_tensor in[2] = {kiln_randn(KILN_CPU, KILN_F32, KILN_SHAPE(2, 3, 6, 8), 40), kiln_randn(KILN_CPU, KILN_F32, KILN_SHAPE(5, 3, 2, 3), 41)};
    check("conv2d strided input", conv_strided, p, in, 2, 1e-5);
    kiln_tensor in64[3] = {kiln_randn(KILN_CPU, KILN_F64, KILN_SHAPE(2, 2, 5, 5), 42), kiln_randn(KILN_CPU, KILN_F64, KILN_SHAPE(3, 2, 3, 3), 43),
                           kiln_randn(KILN_CPU, KILN_F64, KILN_SHAPE(3), 44)};
    const int p64[5] = {2, 1, 1, 1, 1};
    check("conv2d f64", conv, p64, in64, 3, 1e-12);
    /* an empty batch: zero outputs and a zero weight gradient */
    kiln_tensor in0[2] = {kiln_randn(KILN_CPU, KILN_F32, KILN_SHAPE(0, 2, 5, 5), 45), kiln_randn(KILN_CPU, KILN_F32, KILN_SHAPE(3, 2, 3, 3), 46)};
    const int p0[5] = {1, 1, 1, 1, 0};
    check("conv2d empty batch", conv, p0, in0, 2, 0);
}

/* The f32 forward and weight gradient run as im2col + the device GEMM (nn.c): edge shapes for
 * the column layouts and the GEMM's tiles (one image, odd sizes, 1x1 kernels, an output of one
 * position, more than 32 positions and channels so the tiled kernel's full and partial tiles
 * both run, a kernel as large as the padded input), with and without bias. The input gradient
 * runs the direct kernel; groups and f64 (the direct fallback) are in conv2d above. */
KT_TEST(conv2d_im2col) {
    /* N, C, H, W, O, KH, KW, stride, pad, dilation, bias */
    static const int shapes[][11] = {
        {1, 3, 7, 5, 4, 3, 3, 1, 0, 1, 1},   {2, 5, 11, 9, 7, 3, 3, 2, 1, 1, 1}, {3, 16, 6, 6, 40, 1, 1, 1, 0, 1, 1},
        {2, 3, 13, 13, 33, 5, 3, 1, 2, 2, 0}, {1, 1, 1, 1, 3, 1, 1, 1, 0, 1, 1},  {2, 4, 5, 5, 3, 5, 5, 1, 0, 1, 1},
        {2, 8, 9, 9, 16, 3, 3, 3, 1, 1, 0},   {1, 2, 3, 4, 5, 3, 3, 2, 2, 1, 1},  {1, 32, 14, 14, 64, 3, 3, 1, 1, 1, 1},
    };
    for (size_t k = 0; k < sizeof shapes / sizeof shapes[0]; k++) {
        const int *s = shapes[k];
        const int p[5] = {s[7], s[8], s[9], 1, s[10]};
        kiln_tensor in[3] = {kiln_randn(KILN_CPU, KILN_F32, KILN_SHAPE(s[0], s[1], s[2], s[3]), 50 + k),
                             kiln_randn(KILN_CPU, KILN_F32, KILN_SHAPE(s[4], s[1], s[5], s[6]), 60 + k),
                             kiln_randn(KILN_CPU, KILN_F32, KILN_SHAPE(s[4]), 70 + k)};
        char what[96];
        snprintf(what, sizeof what, "conv2d im2col [%d,%d,%d,%d] o%d k%dx%d s%d p%d d%d%s", s[0], s[1], s[2], s[3], s[4], s[5],
                 s[6], s[7], s[8], s[9], s[10] ? " bias" : "");
        if (!s[10]) kiln_release(in[2]);
        /* f32 sums of C*KH*KW products (and O*KH*KW for the input gradient) in another order
         * than the CPU's: the tolerance grows with the count */
        int taps = s[1] * s[5] * s[6] > s[4] * s[5] * s[6] ? s[1] * s[5] * s[6] : s[4] * s[5] * s[6];
        check(what, conv, p, in, s[10] ? 3 : 2, taps > 10 ? 1e-6 * taps : 1e-5);
    }
}

/* p: kind (0 max, 1 avg, 2 adaptive avg, 3 max with ceil_mode, 4 avg with ceil_mode and
 * exclude_pad), kernel, stride, pad (or the adaptive output size) */
static kiln_tensor pool(kiln_tensor *in, const int *p) {
    if (p[0] == 0) return kiln_max_pool2d(kiln_ref(in[0]), p[1], p[1] + 1, p[2], p[2], p[3], p[3]);
    if (p[0] == 1) return kiln_avg_pool2d(kiln_ref(in[0]), p[1], p[1], p[2], p[2], p[3], p[3]);
    if (p[0] == 3) return kiln_max_pool2d_opts(kiln_ref(in[0]), (kiln_pool2d_options){p[1], p[1] + 1, p[2], p[2], p[3], p[3], true, false});
    if (p[0] == 4) return kiln_avg_pool2d_opts(kiln_ref(in[0]), (kiln_pool2d_options){p[1], p[1], p[2], p[2], p[3], p[3], true, true});
    return kiln_adaptive_avg_pool2d(kiln_transpose(kiln_ref(in[0]), 2, 3), p[1], p[2]);
}

KT_TEST(pooling) {
    static const int params[][4] = {{0, 2, 2, 0}, {0, 3, 2, 1}, {0, 3, 1, 1}, {1, 2, 2, 0}, {1, 3, 2, 1}, {2, 3, 4, 0}, {2, 4, 3, 0},
                                    {3, 3, 2, 1}, {4, 3, 2, 1}, {4, 2, 3, 1}};
    for (size_t k = 0; k < sizeof params / sizeof params[0]; k++) {
        kiln_tensor in[1] = {kiln_randn(KILN_CPU, KILN_F32, KILN_SHAPE(2, 3, 10, 9), 60 + k)};
        char what[64];
        snprintf(what, sizeof what, "pool kind %d k%d s%d p%d", params[k][0], params[k][1], params[k][2], params[k][3]);
        check(what, pool, params[k], in, 1, 1e-6);
    }
    /* f64, and a NaN in a max window propagates */
    double v[16] = {1, 2, 3, 4, 5, NAN, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16};
    kiln_tensor in[1] = {kiln_from_data(KILN_CPU, KILN_F64, KILN_SHAPE(1, 1, 4, 4), v)};
    check("max pool f64 nan", pool, params[0], in, 1, 0);
}

/* A small CNN (conv, relu, max pool, conv, avg pool, linear) trained 4 SGD steps on the device
 * and on the CPU from the same weights: the losses agree. */
static void train(kiln_device dev, double losses[4]) {
    kiln_tensor w1 = kiln_to_device(kiln_mul_scalar(kiln_randn(KILN_CPU, KILN_F32, KILN_SHAPE(8, 1, 3, 3), 1), 0.3), dev);
    kiln_tensor w2 = kiln_to_device(kiln_mul_scalar(kiln_randn(KILN_CPU, KILN_F32, KILN_SHAPE(8, 8, 3, 3), 2), 0.1), dev);
    kiln_tensor w3 = kiln_to_device(kiln_mul_scalar(kiln_randn(KILN_CPU, KILN_F32, KILN_SHAPE(8, 4), 3), 0.3), dev);
    kiln_tensor x = kiln_to_device(kiln_randn(KILN_CPU, KILN_F32, KILN_SHAPE(6, 1, 12, 12), 4), dev);
    kiln_tensor t = kiln_to_device(kiln_rand(KILN_CPU, KILN_F32, KILN_SHAPE(6, 4), 5), dev);
    kiln_tensor ws[3] = {w1, w2, w3};
    for (int i = 0; i < 3; i++) kiln_require_grad(ws[i]);
    for (int step = 0; step < 4; step++) {
        kiln_tensor h = kiln_max_pool2d(kiln_relu(kiln_conv2d(kiln_ref(x), kiln_ref(w1), KILN_NONE, 1, 1, 1, 1, 1, 1, 1)), 2, 2, 2, 2, 0, 0);
        h = kiln_adaptive_avg_pool2d(kiln_relu(kiln_conv2d(h, kiln_ref(w2), KILN_NONE, 1, 1, 1, 1, 1, 1, 1)), 1, 1);
        kiln_tensor logits = kiln_matmul(kiln_reshape(h, KILN_SHAPE(6, 8)), kiln_ref(w3));
        kiln_tensor loss = kiln_mean(kiln_mul(kiln_log_softmax(logits, -1), kiln_ref(t)));
        float lv = 0;
        KT_CHECK(kiln_into_scalar(kiln_ref(loss), &lv) == KILN_OK);
        losses[step] = lv;
        kiln_grads *g = NULL;
        KT_CHECK_MSG(kiln_backward(loss, &g) == KILN_OK, "%s", kiln_last_error());
        for (int i = 0; g && i < 3; i++) {
            kiln_tensor nw = kiln_detach(kiln_sub(kiln_ref(ws[i]), kiln_mul_scalar(kiln_grad(g, ws[i]), 0.5)));
            kiln_release(ws[i]);
            ws[i] = nw;
            kiln_require_grad(ws[i]);
        }
        w1 = ws[0], w2 = ws[1], w3 = ws[2];
        kiln_grads_free(g);
    }
    for (int i = 0; i < 3; i++) kiln_release(ws[i]);
    kiln_release(x);
    kiln_release(t);
    /* the last update's work is still queued: let it finish before the process exits (oneDNN's
     * exit handlers must not run under a conv in flight) */
    KT_CHECK(kiln_sync() == KILN_OK);
}

KT_TEST(cnn_training) {
    double ld[4], lc[4];
    train(DEV, ld);
    train(KILN_CPU, lc);
    for (int i = 0; i < 4; i++) KT_NEAR(ld[i], lc[i], 1e-5);
    KT_CHECK(lc[3] != lc[0]);
}
#endif

int main(void) {
    if (kt_opencl_missing()) return 77;
#if KILN_HAVE_OPENCL
    KT_RUN(conv2d);
    KT_RUN(conv2d_im2col);
    KT_RUN(pooling);
    KT_RUN(cnn_training);
#endif
    return kt_finish();
}
