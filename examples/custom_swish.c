/* A user's own kernels as kiln ops: swish (x * sigmoid(x)) written as an AVX2 CPU kernel and as an
 * OpenCL kernel, its gradient likewise (examples/swish_op.h), registered once, then called,
 * differentiated and checked against kiln's composition x * sigmoid(x) on the CPU and, when
 * there is one, on the OpenCL device. Exits 1 when a value or a gradient differs by more than 1e-5 (relative). Its times
 * against the composition: bench/bench_custom_swish.c. */
#include <kiln.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "swish_op.h"

static int failures;

static void check(kiln_status st, const char *what) {
    if (st != KILN_OK) {
        fprintf(stderr, "%s: %s\n", what, kiln_last_error());
        exit(1);
    }
}

/* The largest |a - b| / (1 + |b|) over n values of two tensors (both consumed). */
static double max_rel_diff(kiln_tensor a, kiln_tensor b, int64_t n) {
    float *va = malloc((size_t)n * sizeof *va), *vb = malloc((size_t)n * sizeof *vb);
    if (!va || !vb) exit(1);
    check(kiln_into_data(a, va, (size_t)n * sizeof *va), "reading the op's result");
    check(kiln_into_data(b, vb, (size_t)n * sizeof *vb), "reading the composition's result");
    double worst = 0;
    for (int64_t i = 0; i < n; i++) worst = fmax(worst, fabs((double)va[i] - vb[i]) / (1 + fabs((double)vb[i])));
    free(va);
    free(vb);
    return worst;
}

/* The loss: sum(y * y) (its gradient reaches swish dense), or sum(y) (one value broadcast). */
static kiln_tensor loss_of(kiln_tensor y, bool squared) {
    return kiln_sum(squared ? kiln_mul(kiln_ref(y), kiln_ref(y)) : kiln_ref(y));
}

static void compare_on(kiln_device dev, kiln_custom_op *swish, bool squared) {
    const int64_t n = 100003; /* not a multiple of 8: the vector loop's tail runs too */
    kiln_tensor x = kiln_leaf(kiln_mul_scalar(kiln_randn(dev, KILN_F32, KILN_SHAPE(n), 7), 4.0));
    kiln_tensor mine = kiln_custom_op_call(swish, 1, (kiln_tensor[]){kiln_ref(x)});
    kiln_tensor theirs = kiln_mul(kiln_ref(x), kiln_sigmoid(kiln_ref(x)));
    kiln_grads *g_mine = NULL, *g_theirs = NULL;
    check(kiln_backward(loss_of(mine, squared), &g_mine), "backward through swish");
    check(kiln_backward(loss_of(theirs, squared), &g_theirs), "backward through the composition");
    double dv = max_rel_diff(mine, theirs, n);
    double dg = max_rel_diff(kiln_grad(g_mine, x), kiln_grad(g_theirs, x), n);
    printf("%-8s swish vs x*sigmoid(x): values differ by %.2g, gradients of %s by %.2g (relative)\n",
           kiln_device_name(dev), dv, squared ? "sum(y*y)" : "sum(y)  ", dg);
    if (!(dv < 1e-5 && dg < 1e-5)) failures++;
    kiln_grads_free(g_mine);
    kiln_grads_free(g_theirs);
    kiln_release(x);
}

int main(void) {
    kiln_custom_op *swish = swish_register();
    if (!swish) {
        fprintf(stderr, "registering swish: %s\n", kiln_last_error());
        return 1;
    }
    printf("CPU kernel: %s\n", SWISH_HAVE_AVX2_KERNEL && __builtin_cpu_supports("avx2") ? "AVX2" : "portable loop");
    bool opencl = kiln_device_count(KILN_KIND_OPENCL) > 0;
    for (int squared = 0; squared < 2; squared++) {
        compare_on(KILN_CPU, swish, squared);
        if (opencl) compare_on(KILN_OPENCL, swish, squared);
    }
    if (!opencl) printf("no OpenCL device: its kernels are not run\n");
    return failures ? 1 : 0;
}
