/* The OpenCL matmul's three paths against the CPU: the register-tiled f32 kernels (the
 * default on a CPU device: the "dot" form for a @ b^T, the "outer" form for b's rows
 * contiguous), CLBlast, and the generic per-element kernel, each forced by KILN_OPENCL_GEMM,
 * on shapes at the tiles' edges (1, odd, not multiples of 4, 8, 16 or 32), batched with a
 * broadcast operand, transposed operands, offset views, a bias added (the accumulating form),
 * and gradients through a linear layer. Skipped (exit 77) without an OpenCL device. */
#include <kiln.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "kiln_test.h"
#if KILN_HAVE_OPENCL
#define DEV KILN_OPENCL

#include "opencl_compare.h"

static const char *const paths[] = {"tiled", "clblast", "generic"};

/* Sums over K in another order than the CPU's: a relative tolerance scaled for K <= 300. */
#define TOL 2e-5

static kiln_tensor dev(kiln_tensor t) { return kiln_to_device(t, DEV); }

/* [m,k] @ [k,n] as each of the four transposition layouts the device sees. */
static void products(const char *path, int64_t m, int64_t k, int64_t n, uint64_t seed) {
    kiln_tensor a = kiln_randn(KILN_CPU, KILN_F32, KILN_SHAPE(m, k), seed);
    kiln_tensor b = kiln_randn(KILN_CPU, KILN_F32, KILN_SHAPE(k, n), seed + 1);
    kiln_tensor at = kiln_contiguous(kiln_transpose(kiln_ref(a), 0, 1)); /* [k,m] */
    kiln_tensor bt = kiln_contiguous(kiln_transpose(kiln_ref(b), 0, 1)); /* [n,k] */
    kiln_tensor ad = dev(kiln_ref(a)), bd = dev(kiln_ref(b)), atd = dev(kiln_ref(at)), btd = dev(kiln_ref(bt));
    char what[128];
    snprintf(what, sizeof what, "%s [%lld,%lld]@[%lld,%lld] nn", path, (long long)m, (long long)k, (long long)k, (long long)n);
    compare(what, kiln_matmul(kiln_ref(ad), kiln_ref(bd)), kiln_matmul(kiln_ref(a), kiln_ref(b)), TOL, TOL);
    what[strlen(what) - 2] = 'n', what[strlen(what) - 1] = 't';
    compare(what, kiln_matmul(kiln_ref(ad), kiln_transpose(kiln_ref(btd), 0, 1)),
            kiln_matmul(kiln_ref(a), kiln_transpose(kiln_ref(bt), 0, 1)), TOL, TOL);
    what[strlen(what) - 2] = 't', what[strlen(what) - 1] = 'n';
    compare(what, kiln_matmul(kiln_transpose(kiln_ref(atd), 0, 1), kiln_ref(bd)),
            kiln_matmul(kiln_transpose(kiln_ref(at), 0, 1), kiln_ref(b)), TOL, TOL);
    what[strlen(what) - 2] = 't', what[strlen(what) - 1] = 't';
    compare(what, kiln_matmul(kiln_transpose(kiln_ref(atd), 0, 1), kiln_transpose(kiln_ref(btd), 0, 1)),
            kiln_matmul(kiln_transpose(kiln_ref(at), 0, 1), kiln_transpose(kiln_ref(bt), 0, 1)), TOL, TOL);
    kiln_release(a), kiln_release(b), kiln_release(at), kiln_release(bt);
    kiln_release(ad), kiln_release(bd), kiln_release(atd), kiln_release(btd);
}

KT_TEST(shapes) {
    /* m, k, n: one element; below one tile; a tile and one; K past 16 with a tail; N past 32
     * with a tail; the MLP's layer shape, smaller */
    static const int64_t shapes[][3] = {{1, 1, 1}, {3, 5, 2},   {5, 17, 33}, {9, 16, 32},
                                        {1, 300, 7}, {37, 33, 45}, {64, 128, 96}};
    /* every shape tiled; CLBlast and the generic kernel (which compile slowly on PoCL) on two */
    for (int p = 0; p < 3; p++) {
        setenv("KILN_OPENCL_GEMM", paths[p], 1);
        for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
            if (p == 0 || s == 1 || s == 5) products(paths[p], shapes[s][0], shapes[s][1], shapes[s][2], 10 + s);
    }
    unsetenv("KILN_OPENCL_GEMM");
}

/* Batched: [2,3,m,k] @ [k,n] (b broadcast over the batch), [3,m,k] @ [3,k,n]^T per batch, and
 * a product of offset views (a slice of rows and of the batch). */
KT_TEST(batched_and_views) {
    kiln_tensor a = kiln_randn(KILN_CPU, KILN_F32, KILN_SHAPE(2, 3, 7, 19), 1);
    kiln_tensor b = kiln_randn(KILN_CPU, KILN_F32, KILN_SHAPE(19, 35), 2);
    kiln_tensor c = kiln_randn(KILN_CPU, KILN_F32, KILN_SHAPE(3, 35, 19), 3);
    kiln_tensor ad = dev(kiln_ref(a)), bd = dev(kiln_ref(b)), cd = dev(kiln_ref(c));
    for (int p = 0; p < 3; p++) {
        setenv("KILN_OPENCL_GEMM", paths[p], 1);
        compare(paths[p], kiln_matmul(kiln_ref(ad), kiln_ref(bd)), kiln_matmul(kiln_ref(a), kiln_ref(b)), TOL, TOL);
        compare(paths[p], kiln_matmul(kiln_ref(ad), kiln_transpose(kiln_ref(cd), 1, 2)),
                kiln_matmul(kiln_ref(a), kiln_transpose(kiln_ref(c), 1, 2)), TOL, TOL);
        compare(paths[p], kiln_matmul(kiln_narrow(kiln_narrow(kiln_ref(ad), 1, 1, 2), 2, 3, 4), kiln_ref(bd)),
                kiln_matmul(kiln_narrow(kiln_narrow(kiln_ref(a), 1, 1, 2), 2, 3, 4), kiln_ref(b)), TOL, TOL);
    }
    unsetenv("KILN_OPENCL_GEMM");
    kiln_release(a), kiln_release(b), kiln_release(c), kiln_release(ad), kiln_release(bd), kiln_release(cd);
}

/* kiln_linear (x @ w^T + bias: the accumulating form) forward, and the gradients of
 * sum(relu(linear) * t) for x, w and bias (x^T-shaped products: the outer form). */
static void linear_grads(kiln_device d, kiln_tensor *host, kiln_tensor *out) {
    kiln_tensor in[3];
    for (int i = 0; i < 3; i++) {
        in[i] = kiln_to_device(kiln_ref(host[i]), d);
        kiln_require_grad(in[i]);
    }
    kiln_tensor y = kiln_relu(kiln_linear(kiln_ref(in[0]), kiln_ref(in[1]), kiln_ref(in[2])));
    out[0] = kiln_detach(kiln_ref(y));
    kiln_tensor t = kiln_uniform(d, KILN_F32, kiln_tensor_shape(y), -1, 1, 7);
    kiln_grads *g = NULL;
    KT_CHECK_MSG(kiln_backward(kiln_sum(kiln_mul(y, t)), &g) == KILN_OK, "%s", kiln_last_error());
    for (int i = 0; i < 3; i++) {
        out[1 + i] = g ? kiln_grad(g, in[i]) : KILN_NONE;
        kiln_release(in[i]);
    }
    kiln_grads_free(g);
}

KT_TEST(linear_gradients) {
    static const int64_t shapes[][3] = {{1, 3, 5}, {13, 37, 21}, {32, 64, 40}}; /* batch, in, out */
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
        kiln_tensor host[3] = {kiln_randn(KILN_CPU, KILN_F32, KILN_SHAPE(shapes[s][0], shapes[s][1]), 20 + s),
                               kiln_randn(KILN_CPU, KILN_F32, KILN_SHAPE(shapes[s][2], shapes[s][1]), 30 + s),
                               kiln_randn(KILN_CPU, KILN_F32, KILN_SHAPE(shapes[s][2]), 40 + s)};
        kiln_tensor d[4], c[4];
        linear_grads(DEV, host, d);
        linear_grads(KILN_CPU, host, c);
        static const char *const names[] = {"linear forward", "linear grad x", "linear grad w", "linear grad bias"};
        for (int i = 0; i < 4; i++) compare(names[i], d[i], c[i], TOL, TOL);
        for (int i = 0; i < 3; i++) kiln_release(host[i]);
    }
}

/* f64 is not tiled: CLBlast (or the generic kernel) still runs it, and to rounding. */
KT_TEST(f64_untiled) {
    kiln_tensor a = kiln_randn(KILN_CPU, KILN_F64, KILN_SHAPE(9, 21), 1), b = kiln_randn(KILN_CPU, KILN_F64, KILN_SHAPE(21, 34), 2);
    kiln_tensor got = kiln_matmul(dev(kiln_ref(a)), dev(kiln_ref(b)));
    if (kiln_tensor_status(got) == KILN_OK) compare("f64", got, kiln_matmul(kiln_ref(a), kiln_ref(b)), 1e-12, 1e-12);
    else kiln_release(got); /* a device without fp64 reports it (test_opencl checks that) */
    kiln_release(a), kiln_release(b);
}
#endif

int main(void) {
#if KILN_HAVE_OPENCL
    if (kiln_device_count(KILN_KIND_OPENCL) > 0) {
        KT_RUN(shapes);
        KT_RUN(batched_and_views);
        KT_RUN(linear_gradients);
        KT_RUN(f64_untiled);
        return kt_finish();
    }
#endif
    printf("built without OpenCL, or no OpenCL device: skipped\n");
    return 77;
}
