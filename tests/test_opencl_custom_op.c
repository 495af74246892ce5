/* Users' registered ops with an OpenCL kernel (kiln/custom_op.h) on the OpenCL device: values
 * against the op's CPU kernel and a double reference (strided and offset inputs included, which
 * kiln copies dense for the kernel), in place when the input has one owner, gradients equal to
 * the CPU's, an op without an OpenCL kernel refused at the caller's line, a source that does
 * not build and a kernel name not in the source poisoning the result, and half a definition
 * refused; a kernel that takes layouts (opencl_layout) against the CPU on transposed, sliced
 * and broadcast inputs, handed the view's own layout (no dense copy), and its build errors
 * naming the user's line. Skipped (exit 77) without an OpenCL device. */
#include <kiln.h>

#include "core/core-impl.h"
#include "kiln_test.h"

#if KILN_HAVE_OPENCL
/* ---- a user's op: y = a * a * b (same shapes, f32) ----------------------------------------- */

static kiln_status same_f32_rule(int n, const kiln_custom_meta *in, kiln_custom_meta *out, void *user) {
    (void)user;
    for (int i = 0; i < n; i++) {
        bool same = in[i].ndim == in[0].ndim && in[i].dtype == KILN_F32;
        for (int d = 0; same && d < in[0].ndim; d++) same = in[i].shape[d] == in[0].shape[d];
        if (!same) return kiln_custom_op_error("input %d is not f32 of input 0's shape", i);
    }
    *out = in[0];
    return KILN_OK;
}

static float load(const kiln_custom_operand *o, int64_t i) {
    int64_t off = 0;
    for (int d = o->ndim - 1; d >= 0; d--) {
        off += (i % o->shape[d]) * o->strides[d];
        i /= o->shape[d];
    }
    return ((const float *)o->data)[off];
}

static kiln_status square_mul_cpu(int n, const kiln_custom_operand *in, const kiln_custom_operand *out, int threads,
                                  void *user) {
    (void)threads, (void)user;
    int64_t count = 1;
    for (int d = 0; d < out->ndim; d++) count *= out->shape[d];
    for (int64_t i = 0; i < count; i++) {
        float a = load(&in[0], i), b = n > 1 ? load(&in[1], i) : 1.0f;
        ((float *)out->data)[i] = a * a * b;
    }
    return KILN_OK;
}

static const char square_mul_cl[] =
    "kernel void square_mul(global const float *a, global const float *b, global float *y, long n) {\n"
    "    long i = get_global_id(0);\n"
    "    if (i < n) y[i] = a[i] * a[i] * b[i];\n"
    "}\n";

static kiln_status square_mul_backward(int n, const kiln_tensor *in, kiln_tensor out, kiln_tensor g, kiln_tensor *gin,
                                       void *user) {
    (void)n, (void)out, (void)user;
    gin[0] = kiln_mul(kiln_mul_scalar(kiln_mul(kiln_ref(in[0]), kiln_ref(in[1])), 2.0), kiln_ref(g));
    gin[1] = kiln_mul(kiln_mul(kiln_ref(in[0]), kiln_ref(in[0])), kiln_ref(g));
    return KILN_OK;
}

static kiln_custom_op *square_mul(void) {
    static kiln_custom_op *op;
    if (!op) {
        kiln_custom_op_def def = {.name = "cl_square_mul", .n_inputs = 2, .shape = same_f32_rule,
                                  .cpu_kernel = square_mul_cpu, .in_place = true, .backward = square_mul_backward,
                                  .opencl_source = square_mul_cl, .opencl_kernel = "square_mul"};
        KT_CHECK_MSG(kiln_custom_op_register(&def, &op) == KILN_OK, "%s", kiln_last_error());
    }
    return op;
}

static kiln_tensor call2(kiln_custom_op *op, kiln_tensor a, kiln_tensor b) {
    kiln_tensor in[2] = {a, b};
    return kiln_custom_op_call(op, 2, in);
}

static kiln_tensor dev(kiln_tensor t) { return kiln_to_device(t, KILN_OPENCL); }

static void read_f64(kiln_tensor t, double *out, size_t n) {
    kiln_status st = kiln_into_data(kiln_cast(t, KILN_F64), out, n * sizeof(double));
    KT_CHECK_MSG(st == KILN_OK, "%s", kiln_last_error());
}

KT_TEST(device_values_match_the_cpu_kernel) {
    kt_mem_begin();
    kiln_tensor a = kiln_randn(KILN_CPU, KILN_F32, KILN_SHAPE(40, 30), 1);
    kiln_tensor b = kiln_transpose(kiln_randn(KILN_CPU, KILN_F32, KILN_SHAPE(30, 40), 2), 0, 1); /* strided */
    kiln_tensor on_cpu = call2(square_mul(), kiln_ref(a), kiln_ref(b));
    /* on the device: b strided there too, a an offset slice of a larger buffer */
    kiln_tensor parts[2] = {kiln_zeros(KILN_CPU, KILN_F32, KILN_SHAPE(5, 30)), kiln_ref(a)};
    kiln_tensor da = kiln_narrow(dev(kiln_cat(parts, 2, 0)), 0, 5, 40);
    kiln_tensor db = kiln_transpose(dev(kiln_transpose(kiln_ref(b), 0, 1)), 0, 1);
    kiln_tensor on_dev = call2(square_mul(), da, db);
    KT_CHECK(kiln_tensor_device(on_dev) == KILN_OPENCL);
    static double got[1200], want[1200], av[1200], bv[1200];
    read_f64(on_dev, got, 1200);
    read_f64(on_cpu, want, 1200);
    read_f64(a, av, 1200);
    read_f64(b, bv, 1200);
    for (int i = 0; i < 1200; i++) {
        KT_NEAR(got[i], want[i], 1e-6 * (1 + fabs(want[i])));
        KT_NEAR(got[i], av[i] * av[i] * bv[i], 1e-5 * (1 + fabs(want[i]))); /* the double reference */
    }
    KT_MEM_CHECK();
}

static kiln__storage *storage_of(kiln_tensor t) {
    kiln__error *err = NULL;
    kiln__tensor *p = kiln__handle_peek(t, "test", &err);
    if (!p) kiln__error_unref(err);
    return p ? p->storage : NULL;
}

KT_TEST(in_place_on_the_device_when_the_input_has_one_owner) {
    kt_mem_begin();
    kiln_tensor a = kiln_full(KILN_OPENCL, KILN_F32, KILN_SHAPE(64), 3.0);
    kiln_sync();
    kiln__storage *sa = storage_of(a);
    kiln_tensor y = call2(square_mul(), a, kiln_full(KILN_OPENCL, KILN_F32, KILN_SHAPE(64), 2.0));
    KT_CHECK(storage_of(y) == sa);
    double got[64];
    read_f64(y, got, 64);
    for (int i = 0; i < 64; i++) KT_NEAR(got[i], 18.0, 1e-12);
    a = kiln_full(KILN_OPENCL, KILN_F32, KILN_SHAPE(64), 3.0); /* shared: a keeps its values */
    y = call2(square_mul(), kiln_ref(a), kiln_full(KILN_OPENCL, KILN_F32, KILN_SHAPE(64), 2.0));
    KT_CHECK(storage_of(y) != storage_of(a));
    read_f64(y, got, 64);
    KT_NEAR(got[63], 18.0, 1e-12);
    read_f64(a, got, 64);
    KT_NEAR(got[63], 3.0, 1e-12);
    KT_MEM_CHECK();
}

/* The gradients of sum(sin(op(a, b))) on the device: 2ab cos(y) and a^2 cos(y), as on the CPU
 * (whose gradient test_custom_op checks by finite differences). */
KT_TEST(device_gradient_matches_the_cpu_and_the_formula) {
    kt_mem_begin();
    float a[6] = {0.3f, -1.2f, 0.8f, 1.5f, -0.4f, 0.9f}, b[6] = {1.1f, 0.2f, -0.7f, 0.5f, 1.3f, -0.6f};
    double grads[2][2][6];
    for (int on_dev = 0; on_dev < 2; on_dev++) {
        kiln_device d = on_dev ? KILN_OPENCL : KILN_CPU;
        kiln_tensor ta = kiln_leaf(kiln_to_device(kiln_from_data(KILN_CPU, KILN_F32, KILN_SHAPE(2, 3), a), d));
        kiln_tensor tb = kiln_leaf(kiln_to_device(kiln_from_data(KILN_CPU, KILN_F32, KILN_SHAPE(2, 3), b), d));
        kiln_grads *g = NULL;
        kiln_status st = kiln_backward(kiln_sum(kiln_sin(call2(square_mul(), kiln_ref(ta), kiln_ref(tb)))), &g);
        KT_CHECK_MSG(st == KILN_OK, "%s", kiln_last_error());
        read_f64(kiln_grad(g, ta), grads[on_dev][0], 6);
        read_f64(kiln_grad(g, tb), grads[on_dev][1], 6);
        kiln_grads_free(g);
        kiln_release(ta);
        kiln_release(tb);
    }
    for (int i = 0; i < 6; i++) {
        double y = (double)a[i] * a[i] * b[i];
        KT_NEAR(grads[1][0][i], grads[0][0][i], 1e-5);
        KT_NEAR(grads[1][1][i], grads[0][1][i], 1e-5);
        KT_NEAR(grads[1][0][i], 2.0 * a[i] * b[i] * cos(y), 1e-5);
        KT_NEAR(grads[1][1][i], (double)a[i] * a[i] * cos(y), 1e-5);
    }
    KT_MEM_CHECK();
}

/* ---- refusals and failures ----------------------------------------------------------------- */

KT_TEST(op_without_an_opencl_kernel_is_refused_on_the_device) {
    static kiln_custom_op *op;
    kiln_custom_op_def def = {.name = "cpu_only_square", .n_inputs = 1, .shape = same_f32_rule,
                              .cpu_kernel = square_mul_cpu};
    KT_CHECK(kiln_custom_op_register(&def, &op) == KILN_OK);
    kt_mem_begin();
    kiln_tensor x = kiln_ones(KILN_OPENCL, KILN_F32, KILN_SHAPE(4));
    int line = __LINE__ + 1;
    kiln_tensor y = kiln_custom_op_call(op, 1, &x);
    KT_EXPECT_ERROR(KILN_ERR_UNSUPPORTED, "no OpenCL kernel", line);
    KT_READ_ERROR(y, KILN_ERR_UNSUPPORTED, "cpu_only_square");
    x = kiln_ones(KILN_CPU, KILN_F32, KILN_SHAPE(4)); /* the fallback the message suggests */
    double got[4];
    read_f64(kiln_custom_op_call(op, 1, &x), got, 4);
    KT_NEAR(got[3], 1.0, 0);
    KT_MEM_CHECK();
}

KT_TEST(inputs_on_two_devices_are_refused) {
    kt_mem_begin();
    kiln_tensor y = call2(square_mul(), kiln_ones(KILN_OPENCL, KILN_F32, KILN_SHAPE(4)), kiln_ones(KILN_CPU, KILN_F32, KILN_SHAPE(4)));
    KT_READ_ERROR(y, KILN_ERR_DEVICE, "cl_square_mul");
    KT_MEM_CHECK();
}

static kiln_tensor call_broken(const char *name, const char *source, const char *kernel) {
    kiln_custom_op *op = NULL;
    kiln_custom_op_def def = {.name = name, .n_inputs = 1, .shape = same_f32_rule, .cpu_kernel = square_mul_cpu,
                              .opencl_source = source, .opencl_kernel = kernel};
    KT_CHECK(kiln_custom_op_register(&def, &op) == KILN_OK);
    kiln_tensor x = kiln_ones(KILN_OPENCL, KILN_F32, KILN_SHAPE(4));
    return kiln_custom_op_call(op, 1, &x);
}

KT_TEST(source_that_does_not_build_poisons_the_result) {
    kt_mem_begin();
    kiln_tensor y = call_broken("cl_broken_source", "kernel void f(global float *y, long n) { y[0] = undeclared; }\n", "f");
    KT_READ_ERROR(kiln_add_scalar(y, 1.0), KILN_ERR_KERNEL, "cl_broken_source");
    KT_CHECK_MSG(strstr(kiln_last_error(), "OpenCL build failed"), "%s", kiln_last_error());
    y = call_broken("cl_wrong_name", square_mul_cl, "no_such_kernel");
    KT_READ_ERROR(y, KILN_ERR_DEVICE, "cl_wrong_name");
    KT_CHECK_MSG(strstr(kiln_last_error(), "clCreateKernel"), "%s", kiln_last_error());
    KT_MEM_CHECK();
}

KT_TEST(half_an_opencl_kernel_is_refused) {
    kiln_custom_op *op = (kiln_custom_op *)1;
    kiln_custom_op_def d = {.name = "cl_half", .n_inputs = 1, .shape = same_f32_rule, .cpu_kernel = square_mul_cpu,
                            .opencl_source = square_mul_cl};
    int line = __LINE__ + 1;
    KT_CHECK(kiln_custom_op_register(&d, &op) == KILN_ERR_INVALID_ARGUMENT && op == NULL);
    KT_EXPECT_ERROR(KILN_ERR_INVALID_ARGUMENT, "needs both its source and its name", line);
    d.opencl_source = NULL, d.opencl_kernel = "square_mul";
    KT_CHECK(kiln_custom_op_register(&d, &op) == KILN_ERR_INVALID_ARGUMENT);
    KT_CHECK(kiln_custom_op_find("cl_half") == NULL);
}

/* ---- kernels that take layouts (opencl_layout): inputs as they are, shapes and strides ------ */

/* y[r] = the sum of x's last dim in row r: a kernel that needs x's shape */
static kiln_status row_sum_rule(int n, const kiln_custom_meta *in, kiln_custom_meta *out, void *user) {
    (void)n, (void)user;
    if (in[0].dtype != KILN_F32 || in[0].ndim < 1) return kiln_custom_op_error("f32 with at least 1 dim");
    *out = in[0];
    out->ndim = in[0].ndim - 1;
    return KILN_OK;
}

static kiln_status row_sum_cpu(int n, const kiln_custom_operand *in, const kiln_custom_operand *out, int threads,
                               void *user) {
    (void)n, (void)threads, (void)user;
    int64_t cols = in[0].shape[in[0].ndim - 1], rows = 1;
    for (int d = 0; d < out->ndim; d++) rows *= out->shape[d];
    for (int64_t r = 0; r < rows; r++) {
        float s = 0;
        for (int64_t j = 0; j < cols; j++) s += load(&in[0], r * cols + j);
        ((float *)out->data)[r] = s;
    }
    return KILN_OK;
}

static const char row_sum_cl[] =
    "kernel void row_sum(global const float *x, global float *y, long n, KILN_LAYOUT(x), KILN_LAYOUT(y)) {\n"
    "    long r = get_global_id(0);\n"
    "    if (r >= n) return;\n"
    "    float s = 0;\n"
    "    for (long j = 0; j < x_shape.s7; j++) s += x[KILN_AT(x, r * x_shape.s7 + j)];\n"
    "    y[KILN_AT(y, r)] = s;\n"
    "}\n";

static kiln_custom_op *row_sum(void) {
    static kiln_custom_op *op;
    if (!op) {
        kiln_custom_op_def def = {.name = "cl_row_sum", .n_inputs = 1, .shape = row_sum_rule, .cpu_kernel = row_sum_cpu,
                                  .opencl_source = row_sum_cl, .opencl_kernel = "row_sum", .opencl_layout = true};
        KT_CHECK_MSG(kiln_custom_op_register(&def, &op) == KILN_OK, "%s", kiln_last_error());
    }
    return op;
}

KT_TEST(layout_kernel_matches_the_cpu_on_strided_inputs) {
    kt_mem_begin();
    kiln_tensor a = kiln_randn(KILN_CPU, KILN_F32, KILN_SHAPE(45, 30), 3);
    static double x[45 * 30], got[64], want[64];
    read_f64(kiln_ref(a), x, 45 * 30);
    /* [30, 40]: a's rows 5.. transposed (offset 150, strides (1, 30)), on the device and the CPU */
    kiln_tensor on_dev = kiln_custom_op_call(row_sum(), 1,
                                             (kiln_tensor[]){kiln_transpose(kiln_narrow(dev(kiln_ref(a)), 0, 5, 40), 0, 1)});
    kiln_tensor on_cpu = kiln_custom_op_call(row_sum(), 1, (kiln_tensor[]){kiln_transpose(kiln_narrow(kiln_ref(a), 0, 5, 40), 0, 1)});
    KT_CHECK(kiln_tensor_device(on_dev) == KILN_OPENCL && kiln_tensor_ndim(on_dev) == 1);
    read_f64(on_dev, got, 30);
    read_f64(on_cpu, want, 30);
    for (int c = 0; c < 30; c++) {
        double ref = 0;
        for (int r = 5; r < 45; r++) ref += x[r * 30 + c];
        KT_NEAR(got[c], want[c], 1e-5 * (1 + fabs(ref)));
        KT_NEAR(got[c], ref, 1e-4 * (1 + fabs(ref)));
    }
    /* every other column of a 3-d view, and a row broadcast over 4 (zero strides) */
    kiln_tensor cube = dev(kiln_reshape(kiln_ref(a), KILN_SHAPE(3, 15, 30)));
    kiln_tensor picked = kiln_slice(cube, 2, 1, 30, 2); /* [3, 15, 15], columns 1, 3, ... */
    read_f64(kiln_custom_op_call(row_sum(), 1, &picked), got, 45);
    for (int r = 0; r < 45; r++) {
        double ref = 0;
        for (int c = 1; c < 30; c += 2) ref += x[r * 30 + c];
        KT_NEAR(got[r], ref, 1e-4 * (1 + fabs(ref)));
    }
    kiln_tensor row = kiln_expand(kiln_narrow(dev(kiln_ref(a)), 0, 2, 1), KILN_SHAPE(4, 30));
    read_f64(kiln_custom_op_call(row_sum(), 1, &row), got, 4);
    double ref = 0;
    for (int c = 0; c < 30; c++) ref += x[2 * 30 + c];
    for (int i = 0; i < 4; i++) KT_NEAR(got[i], ref, 1e-4 * (1 + fabs(ref)));
    kiln_release(a);
    KT_MEM_CHECK();
}

/* y = the layout the kernel received for x: shape, strides, then the offset (8 times) */
static kiln_status probe_rule(int n, const kiln_custom_meta *in, kiln_custom_meta *out, void *user) {
    (void)n, (void)in, (void)user;
    *out = (kiln_custom_meta){.dtype = KILN_F32, .ndim = 2, .shape = {3, 8}};
    return KILN_OK;
}

static kiln_status probe_cpu(int n, const kiln_custom_operand *in, const kiln_custom_operand *out, int threads,
                             void *user) {
    (void)n, (void)in, (void)threads, (void)user;
    memset(out->data, 0, 24 * sizeof(float));
    return KILN_OK;
}

static const char probe_cl[] =
    "kernel void probe(global const float *x, global float *y, long n, KILN_LAYOUT(x), KILN_LAYOUT(y)) {\n"
    "    long i = get_global_id(0), v[8];\n"
    "    if (i >= n) return;\n"
    "    vstore8(i < 8 ? x_shape : x_strides, 0, v);\n"
    "    y[i] = i < 16 ? (float)v[i % 8] : (float)x_offset;\n"
    "}\n";

KT_TEST(layout_kernel_gets_the_views_own_layout_without_a_copy) {
    kiln_custom_op *op = NULL;
    kiln_custom_op_def def = {.name = "cl_layout_probe", .n_inputs = 1, .shape = probe_rule, .cpu_kernel = probe_cpu,
                              .opencl_source = probe_cl, .opencl_kernel = "probe", .opencl_layout = true};
    KT_CHECK_MSG(kiln_custom_op_register(&def, &op) == KILN_OK, "%s", kiln_last_error());
    kt_mem_begin();
    kiln_tensor x = kiln_transpose(kiln_narrow(kiln_zeros(KILN_OPENCL, KILN_F32, KILN_SHAPE(45, 30)), 0, 5, 40), 0, 1);
    double got[24];
    read_f64(kiln_custom_op_call(op, 1, &x), got, 24);
    const double want[24] = {1, 1, 1, 1, 1, 1, 30, 40, 0, 0, 0, 0, 0, 0, 1, 30, 150, 150, 150, 150, 150, 150, 150, 150};
    for (int i = 0; i < 24; i++) KT_NEAR(got[i], want[i], 0);
    KT_MEM_CHECK();
}

KT_TEST(layout_build_errors_name_the_users_line) {
    kt_mem_begin();
    kiln_custom_op *op = NULL;
    kiln_custom_op_def def = {.name = "cl_layout_broken", .n_inputs = 1, .shape = same_f32_rule, .cpu_kernel = square_mul_cpu,
                              .opencl_source = "kernel void f(global const float *x, global float *y, long n) {\n"
                                               "    y[0] = undeclared_here;\n}\n",
                              .opencl_kernel = "f", .opencl_layout = true};
    KT_CHECK(kiln_custom_op_register(&def, &op) == KILN_OK);
    kiln_tensor x = kiln_ones(KILN_OPENCL, KILN_F32, KILN_SHAPE(4));
    KT_READ_ERROR(kiln_custom_op_call(op, 1, &x), KILN_ERR_KERNEL, "cl_layout_broken");
    KT_CHECK_MSG(strstr(kiln_last_error(), ":2:") && strstr(kiln_last_error(), "undeclared_here"), "%s", kiln_last_error());
    /* layouts without an OpenCL kernel: a bad definition */
    kiln_custom_op_def cpu_only = {.name = "cl_layout_cpu_only", .n_inputs = 1, .shape = same_f32_rule,
                                   .cpu_kernel = square_mul_cpu, .opencl_layout = true};
    int line = __LINE__ + 1;
    KT_CHECK(kiln_custom_op_register(&cpu_only, &op) == KILN_ERR_INVALID_ARGUMENT);
    KT_EXPECT_ERROR(KILN_ERR_INVALID_ARGUMENT, "has no OpenCL kernel", line);
    KT_MEM_CHECK();
}
#endif

int main(void) {
#if !KILN_HAVE_OPENCL
    printf("built without OpenCL: skipped\n");
    return 77;
#else
    if (kiln_device_count(KILN_KIND_OPENCL) == 0) {
        printf("no OpenCL device: skipped\n");
        return 77;
    }
    KT_RUN(device_values_match_the_cpu_kernel);
    KT_RUN(in_place_on_the_device_when_the_input_has_one_owner);
    KT_RUN(device_gradient_matches_the_cpu_and_the_formula);
    KT_RUN(op_without_an_opencl_kernel_is_refused_on_the_device);
    KT_RUN(inputs_on_two_devices_are_refused);
    KT_RUN(source_that_does_not_build_poisons_the_result);
    KT_RUN(half_an_opencl_kernel_is_refused);
    KT_RUN(layout_kernel_matches_the_cpu_on_strided_inputs);
    KT_RUN(layout_kernel_gets_the_views_own_layout_without_a_copy);
    KT_RUN(layout_build_errors_name_the_users_line);
    return kt_finish();
#endif
}
