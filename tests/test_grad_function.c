/* User-defined differentiable functions (kiln_function) and gradient hooks: a function's
 * gradient against central differences in double precision (one and two inputs, saved
 * tensors, a function inside a larger graph and inside a checkpointed region), the same
 * function on OpenCL (PoCL) against the CPU when a device is there; bad callbacks, shapes and
 * arguments reported at the user's line; hooks that inspect and replace gradients of leaves,
 * computed tensors and a module's parameters (once each, also in checkpointed regions); no leaks. */
#include <kiln.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kiln_test.h"
#include "ew_util.h"
#include "gradcheck.h"

/* y = x^3, dy/dx = 3 x^2 from the saved x */
static kiln_tensor cube_fwd(kiln_function_ctx *f, void *ctx, int n, kiln_tensor *in) {
    (void)ctx, (void)n;
    kiln_function_save(f, kiln_ref(in[0]));
    return kiln_pow_scalar(in[0], 3.0);
}

static kiln_status cube_bwd(kiln_function_ctx *f, void *ctx, kiln_tensor g, int n, kiln_tensor *grads) {
    (void)ctx, (void)n;
    kiln_tensor x = kiln_function_saved(f, 0);
    grads[0] = kiln_mul(g, kiln_mul_scalar(kiln_mul(kiln_ref(x), x), 3.0));
    return KILN_OK;
}

/* z = x * exp(y) with broadcasting y over x's rows: the user reduces y's gradient itself */
static kiln_tensor xexp_fwd(kiln_function_ctx *f, void *ctx, int n, kiln_tensor *in) {
    (void)ctx, (void)n;
    kiln_tensor e = kiln_exp(in[1]);
    kiln_function_save(f, kiln_ref(in[0]));
    kiln_function_save(f, kiln_ref(e));
    return kiln_mul(in[0], e);
}

static kiln_status xexp_bwd(kiln_function_ctx *f, void *ctx, kiln_tensor g, int n, kiln_tensor *grads) {
    (void)ctx, (void)n;
    kiln_tensor x = kiln_function_saved(f, 0), e = kiln_function_saved(f, 1);
    grads[0] = kiln_mul(kiln_ref(g), e);
    grads[1] = kiln_sum_dims(kiln_mul(kiln_mul(g, x), kiln_function_saved(f, 1)), KILN_DIMS(0), true);
    return KILN_OK;
}

static kiln_tensor gc_cube(kiln_tensor *in, void *ctx) {
    (void)ctx;
    return kiln_function(cube_fwd, cube_bwd, NULL, 1, in);
}

static kiln_tensor gc_xexp(kiln_tensor *in, void *ctx) {
    (void)ctx;
    /* inside a graph: a tracked op before and after the function */
    kiln_tensor args[2] = {kiln_tanh(in[0]), in[1]};
    return kiln_mul_scalar(kiln_function(xexp_fwd, xexp_bwd, NULL, 2, args), 0.5);
}

static kiln_tensor region(void *ctx, int n, kiln_tensor *in) {
    (void)ctx, (void)n;
    return kiln_function(xexp_fwd, xexp_bwd, NULL, 2, in);
}

static kiln_tensor gc_in_region(kiln_tensor *in, void *ctx) {
    (void)ctx;
    return kiln_checkpoint(region, NULL, 2, in);
}

KT_TEST(finite_differences) {
    ew_mark mark = ew_mark_now();
    GC_CHECK("cube", gc_cube, NULL, 1, (kiln_shape[]){KILN_SHAPE(3, 4)}, 1e-6);
    GC_CHECK("x*exp(y)", gc_xexp, NULL, 2, ((kiln_shape[]){KILN_SHAPE(3, 4), KILN_SHAPE(1, 4)}), 1e-6);
    GC_CHECK("in a checkpointed region", gc_in_region, NULL, 2, ((kiln_shape[]){KILN_SHAPE(3, 4), KILN_SHAPE(1, 4)}),
             1e-6);
    EW_NO_LEAKS(mark);
}

/* The same function on an OpenCL device: forward and gradient equal the CPU's. */
static void cube_on(kiln_device dev, float *y, float *dx) {
    kiln_tensor x = kiln_leaf(kiln_to_device(kiln_randn(KILN_CPU, KILN_F32, KILN_SHAPE(32), 8), dev));
    kiln_tensor in = kiln_ref(x);
    kiln_tensor out = kiln_function(cube_fwd, cube_bwd, NULL, 1, &in);
    KT_CHECK(kiln_tensor_device(out) == dev);
    kiln_grads *g = NULL;
    KT_CHECK(kiln_into_data(kiln_to_device(kiln_detach(kiln_ref(out)), KILN_CPU), y, 32 * sizeof(float)) == KILN_OK);
    KT_CHECK(kiln_backward(kiln_sum(out), &g) == KILN_OK);
    kiln_tensor d = kiln_grad(g, x);
    KT_CHECK(kiln_tensor_device(d) == dev);
    KT_CHECK(kiln_into_data(kiln_to_device(d, KILN_CPU), dx, 32 * sizeof(float)) == KILN_OK);
    kiln_grads_free(g);
    kiln_release(x);
}

KT_TEST(every_device) {
    if (kiln_device_count(KILN_KIND_OPENCL) == 0) {
        printf("  no OpenCL device: CPU only\n");
        return;
    }
    float y0[32], y1[32], d0[32], d1[32];
    cube_on(KILN_CPU, y0, d0);
    cube_on(KILN_OPENCL, y1, d1);
    for (int i = 0; i < 32; i++) {
        KT_NEAR(y1[i], y0[i], 1e-5 * (1 + fabs(y0[i])));
        KT_NEAR(d1[i], d0[i], 1e-5 * (1 + fabs(d0[i])));
    }
}

static kiln_status wrong_shape_bwd(kiln_function_ctx *f, void *ctx, kiln_tensor g, int n, kiln_tensor *grads) {
    (void)f, (void)ctx, (void)n;
    grads[0] = kiln_sum(g);
    return KILN_OK;
}

static int failing_line;
static kiln_status failing_bwd(kiln_function_ctx *f, void *ctx, kiln_tensor g, int n, kiln_tensor *grads) {
    (void)f, (void)ctx, (void)n;
    failing_line = __LINE__ + 1;
    grads[0] = kiln_matmul(g, kiln_ones(KILN_CPU, KILN_F32, KILN_SHAPE(7, 7)));
    return KILN_OK;
}

static kiln_status status_bwd(kiln_function_ctx *f, void *ctx, kiln_tensor g, int n, kiln_tensor *grads) {
    (void)f, (void)ctx, (void)n, (void)grads;
    kiln_release(g);
    return KILN_ERR_INVALID_ARGUMENT;
}

static kiln_status run(kiln_function_backward_fn bwd, int *line) {
    kiln_tensor x = kiln_leaf(kiln_randn(KILN_CPU, KILN_F32, KILN_SHAPE(3, 4), 1));
    kiln_tensor in = kiln_ref(x);
    *line = __LINE__ + 1;
    kiln_tensor y = kiln_function(cube_fwd, bwd, NULL, 1, &in);
    kiln_grads *g = NULL;
    kiln_status st = kiln_backward(kiln_sum(y), &g);
    KT_CHECK(g == NULL);
    kiln_release(x);
    return st;
}

KT_TEST(bad_backward_and_arguments) {
    ew_mark mark = ew_mark_now();
    int line;
    KT_CHECK(run(wrong_shape_bwd, &line) == KILN_ERR_SHAPE);
    KT_EXPECT_ERROR(KILN_ERR_SHAPE, "kiln_function", line);
    KT_CHECK(strstr(kiln_last_error(), "[3, 4]") != NULL);
    KT_CHECK(run(failing_bwd, &line) == KILN_ERR_SHAPE);
    KT_EXPECT_ERROR(KILN_ERR_SHAPE, "kiln_matmul", failing_line);
    KT_CHECK(run(status_bwd, &line) == KILN_ERR_INVALID_ARGUMENT);
    KT_EXPECT_ERROR(KILN_ERR_INVALID_ARGUMENT, "kiln_function", line);
    KT_CHECK(kiln_sync() == KILN_OK); /* each reported once */

    kiln_tensor in = kiln_randn(KILN_CPU, KILN_F32, KILN_SHAPE(3), 1);
    line = __LINE__ + 1;
    kiln_tensor y = kiln_function(NULL, cube_bwd, NULL, 1, &in);
    KT_READ_ERROR(y, KILN_ERR_NULL, "kiln_function");
    KT_EXPECT_ERROR(KILN_ERR_NULL, "kiln_function", line);
    in = kiln_randn(KILN_CPU, KILN_F32, KILN_SHAPE(3), 1);
    y = kiln_function(cube_fwd, NULL, NULL, 1, &in);
    KT_READ_ERROR(y, KILN_ERR_NULL, "kiln_function");
    y = kiln_function(cube_fwd, cube_bwd, NULL, -1, NULL);
    KT_READ_ERROR(y, KILN_ERR_NULL, "kiln_function");
    kiln_tensor none = kiln_function_saved(NULL, 0);
    KT_CHECK(kiln_tensor_status(none) == KILN_ERR_NULL);
    kiln_release(none);
    KT_CHECK(kiln_function_save(NULL, kiln_randn(KILN_CPU, KILN_F32, KILN_SHAPE(3), 1)) == -1); /* released */
    /* no grad: a plain call, saves released at once */
    kiln_no_grad_begin();
    in = kiln_leaf(kiln_randn(KILN_CPU, KILN_F32, KILN_SHAPE(3), 1));
    kiln_tensor keep = kiln_ref(in);
    y = kiln_function(cube_fwd, cube_bwd, NULL, 1, &in);
    KT_CHECK(!kiln_requires_grad(y) && kiln_tensor_status(y) == KILN_OK);
    kiln_no_grad_end();
    kiln_release(y), kiln_release(keep);
    EW_NO_LEAKS(mark);
}

/* ---- hooks ---- */
static int hook_calls;
static kiln_tensor doubling(void *ctx, kiln_tensor g) {
    (void)ctx;
    hook_calls++;
    return kiln_mul_scalar(g, 2.0);
}
static kiln_tensor zeroing(void *ctx, kiln_tensor g) {
    (void)ctx;
    hook_calls++;
    return kiln_mul_scalar(g, 0.0);
}
static kiln_tensor inspecting(void *ctx, kiln_tensor g) {
    double *norm = ctx;
    hook_calls++;
    kiln_into_scalar_f64(kiln_sum(kiln_mul(kiln_ref(g), kiln_ref(g))), norm);
    return g;
}
static kiln_tensor shrinking(void *ctx, kiln_tensor g) {
    (void)ctx;
    return kiln_sum(g);
}

KT_TEST(tensor_hooks) {
    ew_mark mark = ew_mark_now();
    /* loss = sum(3 a + b * c) with a used twice: a's hook sees the total (6) once */
    kiln_tensor a = kiln_leaf(kiln_ones(KILN_CPU, KILN_F64, KILN_SHAPE(4)));
    kiln_tensor b = kiln_leaf(kiln_full(KILN_CPU, KILN_F64, KILN_SHAPE(4), 5.0));
    double norm = 0;
    hook_calls = 0;
    KT_CHECK(kiln_tensor_register_hook(a, inspecting, &norm) == KILN_OK);
    KT_CHECK(kiln_tensor_register_hook(a, doubling, NULL) == KILN_OK); /* in order: inspect, then double */
    kiln_tensor c = kiln_mul_scalar(kiln_ref(a), 7.0);                 /* computed: dloss/dc = b = 5 */
    KT_CHECK(kiln_tensor_register_hook(c, zeroing, NULL) == KILN_OK);  /* cuts the path through c */
    kiln_tensor s = kiln_add(kiln_mul_scalar(kiln_ref(a), 2.0), kiln_ref(a));
    kiln_tensor loss = kiln_sum(kiln_add(s, kiln_mul(kiln_ref(b), c)));
    kiln_grads *g = NULL;
    KT_CHECK(kiln_backward(loss, &g) == KILN_OK);
    double da[4], db[4];
    KT_CHECK(kiln_into_data(kiln_grad(g, a), da, sizeof da) == KILN_OK);
    KT_CHECK(kiln_into_data(kiln_grad(g, b), db, sizeof db) == KILN_OK);
    for (int i = 0; i < 4; i++) KT_CHECK(da[i] == 6.0 && db[i] == 7.0);
    KT_CHECK(norm == 4 * 9.0); /* a's total before doubling: 3 per entry */
    KT_CHECK(hook_calls == 3);
    kiln_grads_free(g);

    /* a hook returning another shape, at the registering line */
    kiln_tensor x = kiln_leaf(kiln_ones(KILN_CPU, KILN_F32, KILN_SHAPE(3)));
    int line = __LINE__ + 1;
    KT_CHECK(kiln_tensor_register_hook(x, shrinking, NULL) == KILN_OK);
    KT_CHECK(kiln_backward(kiln_sum(kiln_mul_scalar(kiln_ref(x), 2.0)), &g) == KILN_ERR_INVALID_ARGUMENT);
    KT_EXPECT_ERROR(KILN_ERR_INVALID_ARGUMENT, "kiln_tensor_register_hook", line);
    /* bad arguments */
    kiln_tensor plain = kiln_ones(KILN_CPU, KILN_F32, KILN_SHAPE(3));
    KT_CHECK(kiln_tensor_register_hook(plain, doubling, NULL) == KILN_ERR_NO_GRAPH);
    KT_CHECK(kiln_tensor_register_hook(x, NULL, NULL) == KILN_ERR_NULL);
    kiln_release(plain);
    KT_CHECK(kiln_tensor_register_hook(plain, doubling, NULL) != KILN_OK); /* stale */
    kiln_release(a), kiln_release(b), kiln_release(x);
    EW_NO_LEAKS(mark);
}

/* A module's hook doubles every parameter's gradient once, checkpointed or not. */
static void module_grads(bool checkpoint, bool hooked, float *out) {
    kiln_module *parts[2] = {kiln_linear_new(4, 3, true, 5), kiln_gelu_new()};
    kiln_module *m = kiln_sequential_new(2, parts);
    if (checkpoint) kiln_module_set_checkpoint(m, true);
    if (hooked) KT_CHECK(kiln_module_register_grad_hook(m, doubling, NULL) == KILN_OK);
    kiln_grads *g = NULL;
    KT_CHECK(kiln_backward(kiln_sum(kiln_module_forward(m, kiln_randn(KILN_CPU, KILN_F32, KILN_SHAPE(2, 4), 3))), &g) ==
             KILN_OK);
    kiln_param ps[2];
    kiln_module_params(m, ps, 2);
    KT_CHECK(kiln_into_data(kiln_grad(g, *ps[0].slot), out, 12 * sizeof(float)) == KILN_OK);
    KT_CHECK(kiln_into_data(kiln_grad(g, *ps[1].slot), out + 12, 3 * sizeof(float)) == KILN_OK);
    kiln_grads_free(g);
    kiln_module_free(m);
}

KT_TEST(module_hooks) {
    ew_mark mark = ew_mark_now();
    float plain[15], hooked[15], hooked_ckpt[15];
    module_grads(false, false, plain);
    hook_calls = 0;
    module_grads(false, true, hooked);
    KT_CHECK(hook_calls == 2);
    hook_calls = 0;
    module_grads(true, true, hooked_ckpt);
    KT_CHECK(hook_calls == 2);
    for (int i = 0; i < 15; i++) {
        KT_CHECK(hooked[i] == 2 * plain[i]);
        KT_NEAR(hooked_ckpt[i], 2 * plain[i], 1e-6 * (1 + fabs(plain[i])));
    }
    KT_CHECK(kiln_module_register_grad_hook(NULL, doubling, NULL) == KILN_ERR_NULL);
    EW_NO_LEAKS(mark);
}

/* Out of memory at every allocation of a step through a function with a hooked input: a status,
 * never a crash, no leak. */
KT_TEST(out_of_memory_anywhere) {
    ew_mark mark = ew_mark_now();
    int failed = 0, ok = 0;
    for (int n = 1; n <= 150; n++) {
        kiln_tensor x = kiln_leaf(kiln_randn(KILN_CPU, KILN_F64, KILN_SHAPE(3, 4), 1));
        kiln_tensor y = kiln_leaf(kiln_randn(KILN_CPU, KILN_F64, KILN_SHAPE(1, 4), 2));
        kiln_sync();
        kiln_debug_fail_alloc_after(n);
        kiln_status hs = kiln_tensor_register_hook(x, doubling, NULL);
        kiln_tensor in[2] = {kiln_ref(x), kiln_ref(y)};
        kiln_grads *g = NULL;
        kiln_status st = kiln_backward(kiln_sum(kiln_function(xexp_fwd, xexp_bwd, NULL, 2, in)), &g);
        kiln_status st2 = kiln_sync();
        kiln_debug_fail_alloc_after(0);
        KT_CHECK(hs == KILN_OK || hs == KILN_ERR_OUT_OF_MEMORY);
        KT_CHECK_MSG(st == KILN_OK || st == KILN_ERR_OUT_OF_MEMORY, "allocation %d: %s", n, kiln_last_error());
        KT_CHECK(st2 == KILN_OK || st2 == KILN_ERR_OUT_OF_MEMORY);
        if (hs == KILN_OK && st == KILN_OK && st2 == KILN_OK) ok++;
        else failed++;
        kiln_grads_free(g);
        kiln_release(x), kiln_release(y);
    }
    kiln_sync();
    KT_CHECK_MSG(failed > 10 && ok > 0, "%d failed, %d succeeded", failed, ok);
    EW_NO_LEAKS(mark);
}

int main(void) {
    KT_RUN(finite_differences);
    KT_RUN(every_device);
    KT_RUN(bad_backward_and_arguments);
    KT_RUN(tensor_hooks);
    KT_RUN(module_hooks);
    KT_RUN(out_of_memory_anywhere);
    return kt_finish();
}
